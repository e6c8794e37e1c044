"""The package runs on Python 3.9 (`requires-python`; inside Triton's stub on an Ascend host it
runs in CANN's own Python): no code that only a newer Python evaluates. Every `.py` under
`ge_python_backend/` and `model_templates/` is parsed as 3.9 grammar and scanned for what parses
there but fails when it runs: a `|` between types outside postponed annotations (a type alias,
an `isinstance` argument: PEP 604 is 3.10), and the 3.10 keywords `zip(strict=)` and
`dataclass(slots=, kw_only=)`. The stub-environment tests run the stub under 3.9 for real; this
finds the same mistakes in the fast lane."""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest
from sources import ROOT, source_files

NEWER_KEYWORDS = {"zip": {"strict"}, "dataclass": {"slots", "kw_only"}}


def _postponed(tree: ast.Module) -> bool:
    """Whether the module has `from __future__ import annotations` (its annotations are text)."""
    return any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )


def _annotations(tree: ast.Module) -> set[int]:
    """The ids of every annotation expression's nodes."""
    found: set[int] = set()
    for node in ast.walk(tree):
        annotations: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            annotations = [a.annotation for a in every] + [node.returns]
        elif isinstance(node, ast.AnnAssign):
            annotations = [node.annotation]
        for annotation in annotations:
            if annotation is not None:
                found.update(id(inner) for inner in ast.walk(annotation))
    return found


def _is_type_union(node: ast.BinOp) -> bool:
    """`X | Y` where a side is written as a type: a subscripted generic, None, or another union."""
    sides = (node.left, node.right)
    return any(
        isinstance(side, ast.Subscript)
        or (isinstance(side, ast.Constant) and side.value is None)
        or (isinstance(side, ast.BinOp) and isinstance(side.op, ast.BitOr) and _is_type_union(side))
        for side in sides
    )


def problems(source: str, name: str) -> Iterator[str]:
    """What in `source` only a Python newer than 3.9 runs, one line each."""
    try:
        tree = ast.parse(source, name, feature_version=(3, 9))
    except SyntaxError as exc:
        yield f"{name}:{exc.lineno}: not Python 3.9 grammar: {exc.msg}"
        return
    skipped = _annotations(tree) if _postponed(tree) else set()
    for node in ast.walk(tree):
        line = f"{name}:{getattr(node, 'lineno', 0)}"
        union = isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)
        if union and id(node) not in skipped and _is_type_union(node):
            yield f"{line}: a `|` between types runs only on 3.10+ (typing.Union, Optional)"
        if isinstance(node, ast.Call):
            callee = (
                node.func.attr
                if isinstance(node.func, ast.Attribute)
                else getattr(node.func, "id", "")
            )
            if callee in ("isinstance", "issubclass") and len(node.args) == 2:
                kinds = node.args[1]
                if isinstance(kinds, ast.BinOp) and isinstance(kinds.op, ast.BitOr):
                    yield f"{line}: {callee} with `A | B` runs only on 3.10+ (a tuple of types)"
            newer = NEWER_KEYWORDS.get(callee, set()) & {k.arg for k in node.keywords}
            if newer:
                yield f"{line}: {callee}({', '.join(sorted(newer))}=...) is 3.10+"


def test_the_package_is_python_3_9() -> None:
    found = [
        problem
        for path in source_files()
        for problem in problems(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("Reply = tuple[dict[str, int] | bytes, list[int]]\n", "a `|` between types"),
        ("Maybe = int | None\n", "a `|` between types"),
        ("def f(x: list[int] | None) -> None: ...\n", "a `|` between types"),
        ("ok = isinstance(1, int | str)\n", "isinstance with `A | B`"),
        ("pairs = zip([1], [2], strict=True)\n", "zip(strict=...) is 3.10+"),
        ("@dataclasses.dataclass(slots=True)\nclass C: ...\n", "dataclass(slots=...) is 3.10+"),
        ("match x:\n    case 1: pass\n", "not Python 3.9 grammar"),
    ],
)
def test_what_only_a_newer_python_runs_is_found(source: str, words: str) -> None:
    assert any(words in problem for problem in problems(source, "m.py"))


def test_postponed_annotations_and_flags_are_fine() -> None:
    source = (
        "from __future__ import annotations\n"
        "import os\n"
        "FLAGS = os.O_RDWR | os.O_CREAT\n"
        "def f(x: list[int] | None) -> dict[str, int] | None:\n"
        "    y: int | None = None\n"
        "    return None\n"
    )
    assert list(problems(source, "m.py")) == []
