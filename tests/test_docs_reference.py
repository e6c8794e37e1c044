"""The reference pages generated from the code (`tools/docs_reference.py`): every command and
option, parameter, environment variable and metric is on its page, a new one is picked up
without touching the generator, and each row's link has the section it points to."""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import pytest
from sources import ROOT, source_files
from test_docs import MAX_PAGE_BYTES

from ge_python_backend import environment
from ge_python_backend.cli import build_parser
from ge_python_backend.repository import parameters
from ge_python_backend.tools import watch
from ge_python_backend.triton import metrics

sys.path.insert(0, str(ROOT / "tools"))

import docs_reference  # noqa: E402

DOCS = ROOT / "docs"


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: subparser
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, subparser in action.choices.items()
    }


def options(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string and positional of `parser` and of its subcommands."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                found += options(subparser)
        else:
            found += action.option_strings or [str(action.metavar or action.dest)]
    return found


def headings(page: Path) -> set[str]:
    return set(re.findall(r"^## `([^`]+)`$", page.read_text(), re.M))


def test_every_command_and_option_has_its_line() -> None:
    pages = docs_reference.cli_pages()
    commands = subcommands(build_parser())
    index = pages["reference/cli/index.md"]
    for name, parser in commands.items():
        assert f"[`{name}`]({name}.md)" in index
        page = pages[f"reference/cli/{name}.md"]
        missing = [option for option in options(parser) if f"`{option}`" not in page]
        assert not missing, (name, missing)
    assert len(pages) == len(commands) + 1


def test_an_option_added_to_a_command_is_documented_by_the_next_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def parser_with_a_new_option() -> argparse.ArgumentParser:
        parser = build_parser()
        subcommands(parser)["serve"].add_argument(
            "--drain-seconds", metavar="S", default=30, help="a new option"
        )
        return parser

    monkeypatch.setattr(docs_reference, "build_parser", parser_with_a_new_option)
    page = docs_reference.cli_pages()["reference/cli/serve.md"]
    assert "| `--drain-seconds` `S` | `30` | a new option |" in page


def test_the_subcommands_of_a_command_are_on_its_page() -> None:
    page = docs_reference.cli_pages()["reference/cli/emulator.md"]
    assert "## `ge-python-model emulator compile`" in page
    assert "`--dynamic_batch_size`" in page


def test_every_parameter_parsed_has_a_row_and_a_section() -> None:
    page = docs_reference.parameters_page()
    rows = re.findall(r"^\| \[`(\w+)`\]\(parameter-details\.md#(\w+)\)", page, re.M)
    assert [name for name, _ in rows] == list(parameters.PARAMETER_NAMES)
    assert all(name == anchor for name, anchor in rows)
    details = headings(DOCS / "reference" / "parameter-details.md")
    assert set(parameters.PARAMETER_NAMES) <= details


def test_a_parameter_without_a_row_in_its_module_table_stops_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(parameters, "PARAMETER_NAMES", (*parameters.PARAMETER_NAMES, "warmup"))
    with pytest.raises(docs_reference.ReferenceError, match=r"missing \['warmup'\]"):
        docs_reference.parameters_page()


def test_every_environment_variable_declared_has_a_row_and_a_section() -> None:
    page = docs_reference.environment_page()
    details = headings(DOCS / "reference" / "environment-details.md")
    for variable in environment.VARIABLES:
        assert f"[`{variable.name}`](environment-details.md#{variable.name.lower()})" in page
        assert variable.name in details, variable.name


def _string_constants(path: Path) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def test_no_module_names_an_environment_variable_of_its_own() -> None:
    """A `GE_*` variable is read through its declaration in `environment.py`, so the
    generated reference cannot miss one."""
    declared = {variable.name for variable in environment.VARIABLES}
    undeclared = [
        f"{path.relative_to(ROOT)}:{line}: {value}"
        for path in source_files()
        if path.name != "environment.py"
        for line, value in _string_constants(path)
        if re.fullmatch(r"GE_[A-Z0-9_]+", value)
    ]
    assert not undeclared, "declare these in ge_python_backend/environment.py:\n" + "\n".join(
        undeclared
    )
    assert len(declared) == len(environment.VARIABLES)


def test_every_declared_environment_variable_is_read_somewhere() -> None:
    names = {
        attribute
        for attribute, value in vars(environment).items()
        if isinstance(value, environment.EnvironmentVariable)
    }
    assert len(names) == len(environment.VARIABLES)
    used = set()
    for path in source_files():
        if path.name != "environment.py":
            used |= set(re.findall(r"\b[A-Z_]+\b", path.read_text())) & names
    assert used == names, names - used


def test_every_metric_declared_is_on_the_metrics_page() -> None:
    page = docs_reference.metrics_page()
    declared = [counter.name for counter in metrics.COUNTERS]
    declared += [name for name, _ in metrics.GAUGES] + list(watch.METRICS)
    for name in declared:
        assert re.search(rf"^\| `{name}` \| (counter|gauge) \| .+ \|$", page, re.M), name
    # the tools read the instances' metrics by name: every such name is a declared metric
    read = {
        value
        for path in source_files()
        for _, value in _string_constants(path)
        if re.fullmatch(r"ge_[a-z_]+_(total|bytes|us)", value)
    }
    assert read and read <= set(declared), read - set(declared)


def test_the_generated_pages_are_short_and_not_files_in_docs() -> None:
    for path, text in docs_reference.pages().items():
        assert len(text.encode()) <= MAX_PAGE_BYTES, path
        assert not (DOCS / path).exists(), f"docs/{path} is generated: delete the file"


def test_the_defaults_the_reference_shows_are_the_codes() -> None:
    """The defaults written beside the declarations are the values the reading code falls back
    to (`environment.py` is the ground floor and imports none of them)."""
    from ge_python_backend import ascend
    from ge_python_backend.devicehost import client
    from ge_python_backend.emulator import _state

    shown = {
        environment.EMULATOR_DEVICE_COUNT: _state.DEFAULT_DEVICE_COUNT,
        environment.EMULATOR_SOC: ascend.DEFAULT_SOC,
        environment.EMULATOR_MAX_PROCESSES: ascend.PROCESSES_PER_DEVICE,
        environment.EMULATOR_PROCESS_MEMORY: ascend.PROCESS_DEVICE_MEMORY,
        environment.DEVICE_HOST_IDLE_EXIT_S: int(client.DEFAULT_IDLE_EXIT_S),
    }
    for variable, value in shown.items():
        assert variable.default.startswith(f"`{value}`"), (variable.name, value)
