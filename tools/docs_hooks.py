"""MkDocs hooks of the documentation site (mkdocs.yml `hooks`).

The reference pages generated from the code (`docs_reference.pages`) join the site's files at
every build, so they always describe the code being built; a generated page whose path a file
in docs/ already has fails the build.

Pages link to files of the repository outside docs/ (BENCHMARKS.md, examples/) with relative
paths, which work where the Markdown is read in the repository. MkDocs cannot resolve them, so
this hook checks that each such file exists (a missing one fails the build, as a broken link
between pages does) and turns the link into one the site can follow: BENCHMARKS.md into its
summary page (`docs_reference.BENCH_RESULTS_PAGE`), any other file into a link to the
repository (`repo_url`) when the site names one, else into its path as code.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_reference  # noqa: E402

# [text](target) outside code spans; images and in-page anchors are left alone.
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def outside_target(page_src: str, target: str, docs_dir: Path) -> str | None:
    """The repository path a relative link of page `page_src` (a path under docs/) points to
    when it leaves docs/, else None."""
    if re.match(r"[a-z][a-z0-9+.-]*:|/|#", target):
        return None
    path = target.split("#", 1)[0]
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(page_src), path))
    if not resolved.startswith("../"):
        return None
    repository = docs_dir.parent.resolve()
    outside = (docs_dir / resolved).resolve()
    return outside.relative_to(repository).as_posix()


def on_files(files: Files, config: Any) -> Files:
    for path, text in docs_reference.pages().items():
        if files.get_file_from_path(path) is not None:
            raise PluginError(f"docs/{path} is generated from the code: delete the file")
        files.append(File.generated(config, path, content=text))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    docs_dir = Path(config["docs_dir"])
    repo_url = (config.get("repo_url") or "").rstrip("/")

    def rewrite(match: re.Match[str]) -> str:
        text, target = match.group(1), match.group(2)
        path = outside_target(page.file.src_uri, target, docs_dir)
        if path is None:
            return match.group(0)
        if not (docs_dir.parent / path).exists():
            raise PluginError(
                f"{page.file.src_uri} links to {target}: {path} is not in the repository"
            )
        if path == "BENCHMARKS.md":
            here = posixpath.dirname(page.file.src_uri) or "."
            return f"[{text}]({posixpath.relpath(docs_reference.BENCH_RESULTS_PAGE, here)})"
        if repo_url:
            return f"[{text}]({repo_url}/blob/main/{path})"
        return text if text.strip("`") == path else f"{text} (`{path}`)"

    return _LINK.sub(rewrite, markdown)
