"""The documentation: the site builds with strict link checking, pages stay short, README fits a
screen, and every docs/ path that code, tests, README or examples name exists."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# "No page over ~15 KB" (generated pages too): a longer page is split by reader or topic.
MAX_PAGE_BYTES = 15 * 1024
MAX_README_BYTES = 8 * 1024
# Files that name docs pages by path, outside docs/ itself.
NAMING_FILES = ("ge_python_backend", "model_templates", "tests", "examples", "benchmarks", "tools")
DOCS_PATH = re.compile(r"docs/[\w/.-]+\.md")


def test_the_site_builds_with_strict_link_checking(tmp_path: Path) -> None:
    """mkdocs --strict: a link to a missing page or anchor, a page missing from the nav, or a
    link out of docs/ to a file the repository lacks fails the build."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    assert (tmp_path / "reference" / "parameters.html").is_file()
    # a link to the repository's BENCHMARKS.md leads to the site's summary of the same data
    guide = (tmp_path / "guides" / "image-inputs.html").read_text()
    assert 'href="../internals/benchmark-results.html"' in guide
    results = (tmp_path / "internals" / "benchmark-results.html").read_text()
    assert "comparison" in results and "<table>" in results


def test_no_page_is_longer_than_15_kb() -> None:
    sizes = {str(p.relative_to(DOCS)): len(p.read_bytes()) for p in DOCS.rglob("*.md")}
    assert sizes, "docs/ has no pages"
    too_long = {page: size for page, size in sizes.items() if size > MAX_PAGE_BYTES}
    assert not too_long, too_long


def test_the_readme_fits_8_kb_and_keeps_the_two_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= MAX_README_BYTES
    first_block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)  # type: ignore[union-attr]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()]
    assert commands == ["make demo", "make test"]
    # CI runs the README's test command
    assert "\nmake test\n" in (ROOT / ".ci" / "run").read_text()


def test_every_docs_path_named_outside_docs_exists() -> None:
    named = {}
    files = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "pyproject.toml"]
    for folder in NAMING_FILES:
        files += [p for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".md")]
    for path in files:
        for match in DOCS_PATH.finditer(path.read_text(errors="replace")):
            named.setdefault(match.group(0), str(path.relative_to(ROOT)))
    assert any(path.startswith("docs/guides/") for path in named), "no docs path found"
    # sources quoted from other projects (hicann/ge docs/zh/...) are not ours
    missing = {
        path: where
        for path, where in named.items()
        if not path.startswith("docs/zh/") and not (ROOT / path).is_file()
    }
    assert not missing, missing


def test_no_headline_figure_of_benchmarks_md_is_copied_into_readme_or_docs() -> None:
    """README and the docs link to BENCHMARKS.md for its figures: the medians of its summary
    table appear nowhere else, so a new run cannot leave a stale copy behind. (The sections'
    figures are not searched: short decimals such as 1.004 also occur as other measurements.)"""
    report = json.loads((ROOT / "benchmarks" / "results" / "report.json").read_text())
    figures = {part for row in report["summary"]["rows"] for part in row[1].split(", ")}
    assert len(figures) > 10
    copied = [
        f"{path.relative_to(ROOT)}: {figure}"
        for path in [ROOT / "README.md", *DOCS.rglob("*.md")]
        for figure in figures
        if re.search(rf"(?<![\d.,]){re.escape(figure)}(?!\d)", path.read_text())
    ]
    assert not copied, copied


def shown_commands(text: str) -> list[str]:
    """The `ge-python-model` command lines of a page's code blocks: every line of a bash block,
    the `$ ` lines of a console block; continuations joined, redirections and pipes cut off."""
    commands = []
    for kind, block in re.findall(r"```(\w*)\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if kind == "console":
                if not line.startswith("$ "):
                    continue
                line = line[2:]
            if line.startswith("ge-python-model "):
                commands.append(re.split(r" (?:\||>|>>|&&) ", line)[0])
    return commands


def test_every_command_the_readme_and_the_docs_show_parses() -> None:
    """Each `ge-python-model ...` line of README's and the docs' code blocks is accepted by the
    command line's own parser, so a renamed or removed option cannot stay in a page."""
    from ge_python_backend.cli import build_parser

    parser = build_parser()
    shown = [
        (path.relative_to(ROOT), command)
        for path in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
        for command in shown_commands(path.read_text())
    ]
    assert len(shown) > 40
    refused = []
    for where, command in shown:
        try:
            with contextlib.redirect_stderr(io.StringIO()) as error:
                parser.parse_args(shlex.split(command, comments=True)[1:])
        except SystemExit as exc:
            if exc.code:
                refused.append(f"{where}: {command}\n  {error.getvalue().strip().splitlines()[-1]}")
    assert not refused, "\n".join(refused)
