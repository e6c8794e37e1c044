"""The Triton releases the served slice is tested on: the tritonservers nvidia-pytriton bundles.

The release the project installs (`ge-python-backend[server]`) is served as `serve` finds it;
every other one is installed once, without its dependencies, into
`.venv/triton-releases/nvidia-pytriton-<version>/` (PyPI must be reachable the first time) and
served through `serve --tritonserver --backend-directory`, as a user's own server is. Parallel
test workers share the cache under a lock.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ge_python_backend.server import prepare_backend_directory

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".venv" / "triton-releases"


@dataclass(frozen=True)
class TritonRelease:
    """A Triton release and the nvidia-pytriton version whose wheel bundles its server."""

    triton: str  # what the server reports (GET /v2 "version")
    pytriton: str

    @property
    def installed(self) -> bool:
        """Whether this is the release the project installs (the bundled server)."""
        return importlib.metadata.version("nvidia-pytriton") == self.pytriton


RELEASES = (
    TritonRelease("2.39.0", "0.4.2"),
    TritonRelease("2.44.0", "0.5.5"),
    TritonRelease("2.51.0", "0.7.0"),
)


def server_root(release: TritonRelease) -> Path:
    """`.../pytriton/tritonserver` of `release`'s install, installing it when missing."""
    if release.installed:
        import pytriton

        return Path(pytriton.__file__).parent / "tritonserver"
    CACHE.mkdir(parents=True, exist_ok=True)
    target = CACHE / f"nvidia-pytriton-{release.pytriton}"
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            shutil.rmtree(target, ignore_errors=True)
            command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
            command += [str(target), f"nvidia-pytriton=={release.pytriton}"]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}")
            (target / ".complete").write_text(release.pytriton + "\n")
    return target / "pytriton" / "tritonserver"


def serve_options(release: TritonRelease, cache: Path) -> list[str]:
    """`serve`'s options that run `release`: none for the bundled server, else its
    `tritonserver` and a backend directory of its Python backend and this Python's stub."""
    if release.installed:
        return []
    root = server_root(release)
    backends = prepare_backend_directory(root, cache)
    return [
        "--tritonserver",
        str(root / "bin" / "tritonserver"),
        "--backend-directory",
        str(backends),
    ]


if __name__ == "__main__":  # install every release ahead of the tests
    for each in RELEASES:
        print(each.triton, server_root(each))
