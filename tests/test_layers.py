"""The layer rules of docs/internals/design/index.md, checked on the imports every module really
makes.

Every `.py` under `ge_python_backend/` and `model_templates/` is parsed with `ast`; an import is an
`import` or `from ... import` statement anywhere in the file (inside functions and `TYPE_CHECKING`
blocks too), or a call of `importlib.import_module` / `__import__`. A call with a literal name is
an import of that name; a call with a computed name is allowed only in the loaders listed in
`DYNAMIC_LOADERS`, and counts as an import of every module that loader may return.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from sources import PACKAGE, ROOT, source_files

from ge_python_backend.cli import COMMAND_MODULES
from ge_python_backend.runtime._acl import _MODULES as ACL_MODULES

# The one loader that picks the `acl` module at run time: real pyACL, or the emulator's `acl`.
ACL_LOADER = f"{PACKAGE}.runtime._acl"
EMULATOR_ACL = f"{PACKAGE}.emulator.acl"
# Modules that import a computed name, and every module they may import that way.
DYNAMIC_LOADERS = {
    ACL_LOADER: tuple(ACL_MODULES.values()),
    f"{PACKAGE}.cli": COMMAND_MODULES,
    f"{PACKAGE}.client": ("tritonclient.http", "tritonclient.grpc"),
}

# Bottom up: what each layer may import of the package besides itself, the package's root and
# the ground floor (the modules directly under ge_python_backend/ that are not a layer, e.g.
# errors.py, ascend.py, which import no layer, only each other).
LAYERS = {
    "emulator": (),
    "runtime": (),  # and the emulator's `acl`, through ACL_LOADER only
    "repository": ("runtime",),
    "devicehost": ("runtime",),  # host.py only: the stub side imports no layer (STUB_SIDE)
    "triton": ("devicehost", "repository", "runtime"),
    "template": ("triton",),
    "client": (),
    "server": ("repository",),
    "tools": ("client", "devicehost", "repository", "runtime", "server"),
    "commands": ("client", "devicehost", "emulator", "repository", "runtime", "server", "tools"),
    "cli": ("commands",),
}
# Production: what Triton's stub runs. It never imports the emulator (the runtime selection in
# ACL_LOADER aside), not even through another module.
PRODUCTION = ("runtime", "devicehost", "triton", "template")
# The device host's stub side: what a stub imports under `device_host` on. It imports no layer
# (no runtime: no `acl`), only the ground floor and each other.
# The device host itself (its process entry `python -m ge_python_backend.devicehost` included).
DEVICE_HOST_SIDE = (f"{PACKAGE}.devicehost.host", f"{PACKAGE}.devicehost.__main__")
STUB_SIDE = tuple(
    f"{PACKAGE}.devicehost{suffix}" for suffix in ("", ".protocol", ".buffers", ".client")
)
# The only modules outside the emulator that import it.
EMULATOR_USERS = (
    f"{PACKAGE}.commands.emulator_cmd",
    f"{PACKAGE}.commands.migrate_cmd",
    f"{PACKAGE}.commands.selftest_cmd",
)
# Modules only some others may import: the repository writer, the server launcher, and the
# `pb_utils` stand-in for tests (which nothing in the package imports).
RESTRICTED = {
    f"{PACKAGE}.repository.scaffold": (
        f"{PACKAGE}.commands.scaffold_cmd",
        f"{PACKAGE}.tools.migrate.runner",
    ),
    f"{PACKAGE}.server": (
        f"{PACKAGE}.commands.serve_cmd",
        f"{PACKAGE}.tools.doctor",
        f"{PACKAGE}.tools.probe",
        f"{PACKAGE}.tools.watch",  # the process listening at the watched URL: listening_pids
    ),
    f"{PACKAGE}.triton.testing": (),
}
# Layers whose modules still import each other in a circle, being untangled; none is left
# (issue 37 untangled the last, the emulator's). In every other layer the imports run one way:
# no module needs, directly or not, one that needs it.
CIRCLES_TOLERATED: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Import:
    importer: str  # dotted module name
    target: str  # dotted module name, as written (`from a import b` gives a and a.b)
    line: int
    dynamic: bool = False  # a call of importlib.import_module / __import__

    def __str__(self) -> str:
        how = " (importlib)" if self.dynamic else ""
        return f"{self.importer}:{self.line} imports {self.target}{how}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_import_call(node: ast.Call) -> bool:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in ("import_module", "__import__")
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _from_target(package: str, node: ast.ImportFrom) -> str:
    """The module `from X import ...` names; relative ones resolved against `package`."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, module: str) -> Iterator[Import]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            target = _from_target(package, node)
            yield Import(module, target, node.lineno)
            for alias in node.names:
                yield Import(module, f"{target}.{alias.name}", node.lineno)
        elif isinstance(node, ast.Call) and _is_import_call(node) and node.args:
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                yield Import(module, name.value, node.lineno, dynamic=True)
            elif module in DYNAMIC_LOADERS:
                for target in DYNAMIC_LOADERS[module]:
                    yield Import(module, target, node.lineno, dynamic=True)
            else:
                raise AssertionError(
                    f"{module}:{node.lineno} imports a computed name; list it in DYNAMIC_LOADERS "
                    "with every module it may import"
                )


def all_imports() -> list[Import]:
    found = []
    for path in source_files():
        found.extend(imports_of(path, module_name(path)))
    return found


def layer_of(module: str) -> str | None:
    """The layer of a module of ours; "" for the package root and the ground floor."""
    parts = module.split(".")
    if parts[0] == "model_templates":
        return "template"
    if parts[0] != PACKAGE:
        return None
    if len(parts) == 1:
        return ""
    return parts[1] if parts[1] in LAYERS else ""


def is_within(target: str, module: str) -> bool:
    return target == module or target.startswith(module + ".")


def is_emulator_acl_selection(imp: Import) -> bool:
    """The runtime's loader choosing the emulator as `acl`: the one allowed way in."""
    return imp.importer == ACL_LOADER and imp.dynamic and imp.target == EMULATOR_ACL


IMPORTS = all_imports()
OUR_IMPORTS = [imp for imp in IMPORTS if layer_of(imp.target) is not None]


def test_the_scan_sees_the_imports_it_checks() -> None:
    """The rules below are only as good as the scan: it finds static, lazy and importlib ones."""
    seen = {(imp.importer, imp.target, imp.dynamic) for imp in IMPORTS}
    assert (ACL_LOADER, "acl", True) in seen
    assert (ACL_LOADER, EMULATOR_ACL, True) in seen
    assert (f"{PACKAGE}.runtime.session", f"{PACKAGE}.runtime.lane", False) in seen
    assert (f"{PACKAGE}", f"{PACKAGE}.runtime.session", False) in seen  # inside a function
    assert (f"{PACKAGE}.cli", f"{PACKAGE}.commands.doctor_cmd", True) in seen
    assert (f"{PACKAGE}.commands.emulator_cmd", f"{PACKAGE}.emulator.omfile", False) in seen
    assert ("model_templates.model", f"{PACKAGE}.triton", False) in seen
    assert (f"{PACKAGE}.emulator.acl", f"{PACKAGE}.emulator.acl.mdl", False) in seen  # relative


def test_a_computed_import_outside_the_loaders_is_refused(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import importlib\nNAME = 'acl'\nacl = importlib.import_module(NAME)\n")
    with pytest.raises(AssertionError, match="computed name"):
        list(imports_of(sneaky, f"{PACKAGE}.tools.sneaky"))
    literal = tmp_path / "literal.py"
    literal.write_text("from importlib import import_module\nacl = import_module('acl')\n")
    assert [imp.target for imp in imports_of(literal, f"{PACKAGE}.tools.literal")] == [
        "importlib",
        "importlib.import_module",
        "acl",
    ]


def test_only_the_runtime_loader_imports_acl() -> None:
    offenders = [
        str(imp)
        for imp in IMPORTS
        if is_within(imp.target, "acl") and not (imp.importer == ACL_LOADER and imp.dynamic)
    ]
    assert not offenders, "only runtime/_acl.py loads `acl`:\n" + "\n".join(offenders)


def test_each_layer_imports_only_the_layers_below_it() -> None:
    offenders = []
    for imp in OUR_IMPORTS:
        source, target = layer_of(imp.importer), layer_of(imp.target)
        if not source or not target or source == target or is_emulator_acl_selection(imp):
            continue
        if target not in LAYERS[source]:
            offenders.append(f"{imp} ({source} -> {target})")
    layers = "docs/internals/design/index.md"
    assert not offenders, f"imports against the layers of {layers}:\n" + "\n".join(offenders)


def test_the_ground_floor_imports_no_layer() -> None:
    offenders = [
        str(imp)
        for imp in OUR_IMPORTS
        if layer_of(imp.importer) == ""
        and imp.importer != PACKAGE  # the root's lazy `Session` attribute
        and layer_of(imp.target) != ""
    ]
    assert not offenders, "\n".join(offenders)


def test_only_the_emulator_users_import_the_emulator() -> None:
    offenders = [
        str(imp)
        for imp in OUR_IMPORTS
        if layer_of(imp.target) == "emulator"
        and layer_of(imp.importer) != "emulator"
        and imp.importer not in EMULATOR_USERS
        and not is_emulator_acl_selection(imp)
    ]
    assert not offenders, "\n".join(offenders)


def test_production_code_never_reaches_the_emulator() -> None:
    graph: dict[str, set[str]] = {}
    for imp in OUR_IMPORTS:
        if not is_emulator_acl_selection(imp):
            graph.setdefault(imp.importer, set()).add(imp.target)
    for start in sorted(m for m in graph if layer_of(m) in PRODUCTION):
        path = {start: [start]}
        todo = [start]
        while todo:
            module = todo.pop()
            for target in sorted(graph.get(module, ())):
                parts = target.split(".")  # importing a.b.c runs a/__init__ and a/b/__init__
                for parent in (".".join(parts[:n]) for n in range(1, len(parts))):
                    if parent not in path:
                        path[parent] = [*path[module], parent]
                        todo.append(parent)
                if target not in path:
                    path[target] = [*path[module], target]
                    todo.append(target)
        reached = [chain for name, chain in path.items() if layer_of(name) == "emulator"]
        assert not reached, " -> ".join(reached[0])


@pytest.mark.parametrize("module", sorted(RESTRICTED))
def test_restricted_modules_have_only_their_importers(module: str) -> None:
    offenders = [
        str(imp)
        for imp in OUR_IMPORTS
        if is_within(imp.target, module)
        and imp.importer != module
        and imp.importer not in RESTRICTED[module]
    ]
    assert not offenders, f"only {', '.join(RESTRICTED[module])} import {module}:\n" + "\n".join(
        offenders
    )


def test_the_device_host_stub_side_imports_no_layer() -> None:
    modules = {module_name(path) for path in (ROOT / PACKAGE / "devicehost").glob("*.py")}
    assert modules == {*STUB_SIDE, *DEVICE_HOST_SIDE}, "list a new devicehost module here"
    offenders = [
        str(imp)
        for imp in OUR_IMPORTS
        if imp.importer in STUB_SIDE
        and layer_of(imp.target) not in ("", None)
        and not any(is_within(imp.target, module) for module in STUB_SIDE)
    ]
    assert not offenders, "the stub side of the device host imports no layer:\n" + "\n".join(
        offenders
    )


MODULES = {module_name(path) for path in source_files()}


def needs_graph(imports: list[Import]) -> dict[str, set[str]]:
    """Importer -> the modules of ours in its own layer it needs (the package root left out).
    `from P import m` of a submodule `m` needs `m`, not `P` (whose import is already under way
    when `m` is a part of it); `P` is needed when a name of its own is imported from it. An
    importer outside a package `P` that imports `P.m` needs `P` too: `P/__init__.py` runs first."""
    by_line: dict[tuple[str, int], set[str]] = {}
    for imp in imports:
        by_line.setdefault((imp.importer, imp.line), set()).add(imp.target)
    graph: dict[str, set[str]] = {}
    for imp in imports:
        target, importer = imp.target, imp.importer
        if target not in MODULES or target == importer or PACKAGE in (importer, target):
            continue
        if layer_of(importer) != layer_of(target) or is_emulator_acl_selection(imp):
            continue
        parts = target.split(".")
        for parent in (".".join(parts[:n]) for n in range(2, len(parts))):
            if parent in MODULES and not is_within(importer, parent):
                graph.setdefault(importer, set()).add(parent)
        names = {t for t in by_line[(importer, imp.line)] if t.startswith(target + ".")}
        if names and all(name in MODULES for name in names):
            continue  # only submodules of `target` are imported from it
        graph.setdefault(importer, set()).add(target)
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of `graph`: each set of two or more modules that need each other (directly or
    through one another), sorted (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles)


def test_the_circle_check_finds_circles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []
    # `from P import m` (a submodule) needs m; `from P import name` needs P itself.
    p, m = f"{PACKAGE}.repository", f"{PACKAGE}.repository.config"
    importer = f"{PACKAGE}.repository.validation"
    submodule = [Import(importer, p, 1), Import(importer, m, 1)]
    assert needs_graph(submodule) == {importer: {m}}
    name = [Import(importer, p, 2), Import(importer, f"{p}.something", 2)]
    assert needs_graph(name) == {importer: {p}}
    # From outside a package, importing its submodule runs the package's __init__ first.
    outside = f"{PACKAGE}.emulator._models"
    acl, tensor = f"{PACKAGE}.emulator.acl", f"{PACKAGE}.emulator.acl._tensor"
    assert needs_graph([Import(outside, tensor, 3)]) == {outside: {acl, tensor}}


def circle_problems(
    circles: list[list[str]], tolerated: tuple[str, ...]
) -> tuple[list[list[str]], list[str]]:
    """The circles in a layer not `tolerated`, and the `tolerated` layers that have none left."""
    offenders = [circle for circle in circles if layer_of(circle[0]) not in tolerated]
    stale = sorted(set(tolerated) - {str(layer_of(circle[0])) for circle in circles})
    return offenders, stale


def test_the_circle_rule_refuses_new_circles_and_stale_tolerations() -> None:
    circle = [f"{PACKAGE}.tools.a", f"{PACKAGE}.tools.b"]
    assert circle_problems([circle], ()) == ([circle], [])
    assert circle_problems([circle], ("tools",)) == ([], [])
    assert circle_problems([], ("tools",)) == ([], ["tools"])


def test_imports_within_a_layer_run_one_way() -> None:
    offenders, stale = circle_problems(import_circles(needs_graph(IMPORTS)), CIRCLES_TOLERATED)
    assert not offenders, "modules that import each other:\n" + "\n".join(
        " <-> ".join(circle) for circle in offenders
    )
    assert not stale, f"no circle left in {stale}: remove it from CIRCLES_TOLERATED"


def _module_file(name: str) -> str | None:
    """The file of module `name` of ours relative to the package (longest importable prefix:
    `from a.b import C` names a.b.C), or None when it is not one of our files."""
    parts = name.split(".")
    for end in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:end])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate.relative_to(ROOT / PACKAGE).as_posix()
    return None


def test_a_vendored_runtime_holds_every_module_the_template_imports() -> None:
    """`scaffold --vendor-runtime` copies `STUB_FILES`: each module the template reaches (the
    emulator's `acl` included) must be among them, or a vendored model fails to load."""
    from ge_python_backend.repository.scaffold import STUB_FILES, STUB_LEFT_OUT

    graph: dict[str, set[str]] = {}
    for imp in OUR_IMPORTS:
        graph.setdefault(imp.importer, set()).add(imp.target)
    seen, todo = set(), ["model_templates.model"]
    while todo:
        for target in graph.get(todo.pop(), ()):
            parts = target.split(".")
            for module in (".".join(parts[:n]) for n in range(1, len(parts) + 1)):
                if module not in seen and layer_of(module) is not None:
                    seen.add(module)
                    todo.append(module)
    files = {_module_file(module) for module in seen if module.startswith(PACKAGE)}
    package = ROOT / PACKAGE
    vendored = {
        path.relative_to(package).as_posix()
        for pattern in STUB_FILES
        for path in package.glob(pattern)
    }
    missing = sorted(path for path in files - vendored - {None} if path not in STUB_LEFT_OUT)
    assert not missing, f"add to scaffold.STUB_FILES: {missing}"
