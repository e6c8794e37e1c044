"""The reference pages of the documentation site, generated from the code's own definitions.

- `reference/cli/*.md`: every `ge-python-model` command from its argparse parser
  (`cli.build_parser`), so an option added to a command is documented by the next build;
- `reference/parameters.md`: every `config.pbtxt` parameter `repository.parameters` parses
  (`PARAMETER_NAMES`), with the one-line rows of that module's own table;
- `reference/environment.md`: every environment variable of `ge_python_backend.environment`;
- `reference/metrics.md`: every `ge_*` metric `triton.metrics` declares, and the watcher's
  (`tools.watch.METRICS`);
- `internals/benchmark-results.md`: the summary of BENCHMARKS.md, from the same data
  (`benchmarks/results/report.json`), where the site's links to BENCHMARKS.md lead.

`docs_hooks.py` adds them to the site at build time (they are not files in docs/); each row links
to the hand-written section that says why (`parameter-details.md`, `environment-details.md`).
`python tools/docs_reference.py DIR` writes them into DIR to read them without building the site.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from ge_python_backend import environment
from ge_python_backend.cli import build_parser
from ge_python_backend.repository import parameters
from ge_python_backend.tools import watch
from ge_python_backend.triton import metrics

PROGRAM = "ge-python-model"
ROOT = Path(__file__).resolve().parents[1]
BENCH_REPORT = ROOT / "benchmarks" / "results" / "report.json"
BENCH_RESULTS_PAGE = "internals/benchmark-results.md"
USAGE_WIDTH = 100
GENERATED = "<!-- Generated from the code by tools/docs_reference.py: edit the code, not this. -->"


class ReferenceError(Exception):
    """The code's definitions cannot be documented as they are (e.g. a parameter without a
    row in its module's table): the site does not build."""


def _cell(text: str) -> str:
    """One table cell on one line: whitespace collapsed, pipes escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table, one line per row, each cell on one line."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in rows]


def _page(title: str, *intro: str) -> list[str]:
    """The head of a generated page: its title, the note that it is generated, its intro."""
    return [f"# {title}", "", GENERATED, "", *intro, ""]


def _slug(name: str) -> str:
    """The anchor MkDocs' toc gives a heading that is `name` in backticks."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", name).strip().lower())


# ------------------------------------------------------------------------------------------ CLI


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """name -> (help line, parser) of the subcommands of `parser`, in declaration order."""
    found: dict[str, tuple[str, argparse.ArgumentParser]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                found[name] = (helps.get(name, ""), subparser)
    return found


def _argument(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
    if action.nargs == 0:
        return flags
    if action.choices is not None:
        return f"{flags} `{{{','.join(map(str, action.choices))}}}`"
    metavar = action.metavar or action.dest.upper()
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    return f"{flags} `{metavar}`"


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is argparse.SUPPRESS or action.nargs == 0:
        return ""
    if isinstance(default, (list, tuple)):
        default = ",".join(map(str, default))
    return f"`{default}`" if str(default) else ""


def _options(parser: argparse.ArgumentParser) -> list[list[str]]:
    """One row per argument of `parser`: the argument, its default, its help."""
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        what = formatter._expand_help(action) if action.help else ""
        if action.required and action.option_strings:
            what = f"(required) {what}"
        rows.append([_argument(action), _default(action), what])
    return rows


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line as `--help` prints it, wrapped at `USAGE_WIDTH` whatever the terminal."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _command_section(words: list[str], parser: argparse.ArgumentParser, level: int) -> list[str]:
    lines = [f"{'#' * level} `{' '.join([PROGRAM, *words])}`", ""]
    lines += ["```text", _usage(parser), "```", ""]
    if parser.description:
        lines += ["```text", parser.description.strip("\n"), "```", ""]
    options = _options(parser)
    if options:
        lines += [*_table(["argument", "default", "what"], options), ""]
    for name, (_, subparser) in _subcommands(parser).items():
        lines += _command_section([*words, name], subparser, level + 1)
    return lines


def cli_pages() -> dict[str, str]:
    """`reference/cli/index.md` (every command, one line each) and one page per command."""
    parser = build_parser()
    commands = _subcommands(parser)
    index = _page(
        "Command line: `ge-python-model`",
        "Every command, from its argparse parser; `ge-python-model COMMAND --help` prints the",
        "same.",
    )
    index += _table(
        ["command", "what"],
        [[f"[`{name}`]({name}.md)", help_line] for name, (help_line, _) in commands.items()],
    )
    pages = {"reference/cli/index.md": "\n".join(index) + "\n"}
    for name, (help_line, subparser) in commands.items():
        head = _page(f"`{PROGRAM} {name}`", _cell(help_line))
        body = head + _command_section([name], subparser, 1)[2:]
        pages[f"reference/cli/{name}.md"] = "\n".join(body).rstrip() + "\n"
    return pages


# ----------------------------------------------------------------------------------- parameters

_PARAMETER_ROW = re.compile(r"^\| `(\w+)` \| (.+) \| (.+) \|$")


def _parameter_rows() -> dict[str, tuple[str, str]]:
    """name -> (value, when absent) from `repository.parameters`' docstring table."""
    rows = {}
    for line in (parameters.__doc__ or "").splitlines():
        match = _PARAMETER_ROW.match(line.strip())
        if match and match.group(1) != "parameter":
            rows[match.group(1)] = (match.group(2), match.group(3))
    return rows


def parameters_page() -> str:
    rows = _parameter_rows()
    parsed = parameters.PARAMETER_NAMES
    undocumented = [name for name in parsed if name not in rows]
    stale = [name for name in rows if name not in parsed]
    if undocumented or stale:
        raise ReferenceError(
            "repository/parameters.py: the docstring's table must have one row per parameter "
            f"of _PARSERS; missing {undocumented}, not parsed {stale}"
        )
    lines = _page(
        "`config.pbtxt` parameters",
        "Every parameter `model.py` reads from a model's `config.pbtxt`, each a `parameters` entry",
        "with a `string_value`, all optional; `ge-python-model scaffold` writes them and",
        "`validate` checks them. Each row links to what the parameter does and why.",
        "",
        "```",
        'parameters { key: "device_ids"  value { string_value: "0,1" } }',
        "```",
    )
    lines += _table(
        ["parameter", "value", "when absent"],
        [[f"[`{name}`](parameter-details.md#{_slug(name)})", *rows[name]] for name in parsed],
    )
    known = ", ".join(f"`{name}`" for name in parameters.TRITON_PARAMETERS)
    lines += [
        "",
        f"Triton's Python backend reads {known} from the same map itself. Any other name is",
        "reported (`validate` as a note, the model's load as a warning in Triton's log) with the",
        "parameter it nearly spells. The standard fields of the config: [Standard fields, "
        "auto-complete, versions](configuration.md).",
    ]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- environment


def environment_page() -> str:
    lines = _page(
        "Environment variables",
        "Every variable the package reads. Set them where `tritonserver` (or `ge-python-model",
        "serve`) starts: the Python backend's stubs and the device hosts inherit them.",
    )
    lines += _table(
        ["variable", "default", "what", "read by"],
        [
            [
                f"[`{variable.name}`](environment-details.md#{_slug(variable.name)})",
                variable.default,
                variable.meaning,
                variable.reader,
            ]
            for variable in environment.VARIABLES
        ],
    )
    lines += [
        "",
        "CANN's own variables (`ASCEND_TOOLKIT_HOME`, `ASCEND_OPP_PATH`, `LD_LIBRARY_PATH`, ...)",
        "are set by sourcing its `set_env.sh`; `ge-python-model doctor` checks them",
        "([Deploying on Ascend](../guides/deploy/index.md)).",
    ]
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------- metrics


def metrics_page() -> str:
    lines = _page(
        "Metrics",
        "Every `ge_*` metric a model instance publishes on Triton's metrics port",
        "(`:8002/metrics`), next to Triton's own `nv_inference_*`, labelled by `model`, `version`,",
        "`device`, `model_instance` and the stub's `pid`: a series per stub process, since Triton",
        "2.51 frees a series two stubs share ([reloads under",
        "load](../guides/reliability/soak-reload.md#reloads-under-load)); sum over them.",
        "Device times come from ACL events around the executions and copies on their stream",
        "([lanes](../learn/concepts/lanes.md)), so `rate(ge_device_busy_seconds_total[1m])` is the",
        "device's utilization by the instance.",
    )
    lines += _table(
        ["metric", "kind", "what"],
        [[f"`{counter.name}`", "counter", counter.description] for counter in metrics.COUNTERS]
        + [[f"`{name}`", "gauge", description] for name, description in metrics.GAUGES],
    )
    lines += [
        "",
        "## The watcher's",
        "",
        "`ge-python-model watch` (and `serve`, which runs it) serves its own counters on its own",
        "`/metrics` (`--metrics-port`; `serve --watch-metrics-port`), labelled by `model`.",
        "",
        *_table(
            ["metric", "kind", "what"],
            [[f"`{name}`", "counter", description] for name, description in watch.METRICS.items()],
        ),
    ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- benchmarks


def benchmark_results_page() -> str:
    """The introduction and summary table of the last `make bench` run (its `report.json`, which
    BENCHMARKS.md is rendered from), and the titles of the report's sections."""
    report = json.loads(BENCH_REPORT.read_text())
    lines = _page(
        "Benchmark results",
        report["introduction"],
        "",
        "The full report, with each section's tables, plots and commands, is `BENCHMARKS.md` in",
        "the repository, rendered from the same data by `make bench`"
        " ([how it is measured](benchmarks.md)).",
    )
    lines += _table(report["summary"]["columns"], report["summary"]["rows"])
    lines += ["", "Its sections:", ""]
    lines += [f"- {section['title']}" for section in report["sections"]]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """Every generated page: its path under docs/ -> its Markdown."""
    return {
        **cli_pages(),
        "reference/parameters.md": parameters_page(),
        "reference/environment.md": environment_page(),
        "reference/metrics.md": metrics_page(),
        BENCH_RESULTS_PAGE: benchmark_results_page(),
    }


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "site-reference")
    for path, text in pages().items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text)
        print(target / path)
