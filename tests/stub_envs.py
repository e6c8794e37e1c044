"""Stub environments for the end-to-end tests: a Python of another version holding only what the
Python-backend stub needs on an Ascend host (numpy, the package installed with `--no-deps`,
onnxruntime for the emulator, and protobuf 3.20.3 as CANN's install guide pins it).

Each environment is a virtualenv under `.venv/stub-envs/<name>-<key>/`, the key a hash of the
interpreter and the requirements, built once (PyPI must be reachable the first time) and kept.
The package is reinstalled from a wheel of this checkout whenever its sources change.
An interpreter that is not found is an error saying where it was looked for (never a skip).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".venv" / "stub-envs"
CANN_PROTOBUF = "protobuf==3.20.3"


@dataclass(frozen=True)
class StubEnvSpec:
    """One stub environment: an interpreter version and the exact requirements installed."""

    name: str
    python_version: str  # "3.9"
    requirements: tuple[str, ...]


PY39_NUMPY1 = StubEnvSpec(
    "py39-numpy1", "3.9", ("numpy==1.26.4", "onnxruntime==1.19.2", CANN_PROTOBUF)
)
PY312_NUMPY2 = StubEnvSpec(
    "py312-numpy2", "3.12", ("numpy==2.2.6", "onnxruntime==1.22.1", CANN_PROTOBUF)
)
# PY312_NUMPY2 plus what the runtime's and emulator's own tests need, to run them under numpy 2.
PY312_NUMPY2_SUITE = StubEnvSpec(
    "py312-numpy2-suite",
    "3.12",
    (*PY312_NUMPY2.requirements, "onnx==1.17.0", "pytest==8.3.3", "pytest-timeout==2.3.1"),
)


def find_interpreter(version: str) -> Path:
    """A working Python `version`: pyenv's newest `<version>.*`, else `python<version>` on PATH
    (pyenv's shims there fail unless that version is selected); RuntimeError naming both."""
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    pattern = str(pyenv_root / "versions" / f"{version}.*" / "bin" / "python3")
    candidates = sorted(glob.glob(pattern), key=_version_key, reverse=True)
    candidates.append(shutil.which(f"python{version}") or "")
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.executable)"],
            capture_output=True,
            text=True,
        )
        found, _, executable = probe.stdout.strip().partition(" ")
        if probe.returncode == 0 and found == version:
            return Path(executable)
    raise RuntimeError(
        f"the stub environment needs Python {version}: nothing runs as {pattern} or as "
        f"python{version} on PATH; install it (for example `pyenv install {version}`)"
    )


def _version_key(path: str) -> list[int]:
    version = Path(path).parent.parent.name
    return [int(part) for part in version.split(".") if part.isdigit()]


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )


def source_hash() -> str:
    """A hash of what the wheel is built from."""
    digest = hashlib.sha256()
    files = [ROOT / "pyproject.toml", *sorted((ROOT / "model_templates").glob("*.py"))]
    files += sorted((ROOT / "ge_python_backend").rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def build_wheel() -> Path:
    """A wheel of this checkout under `.venv/stub-envs/wheels/<source hash>/` (only the latest
    is kept)."""
    directory = CACHE / "wheels" / source_hash()
    wheels = sorted(directory.glob("ge_python_backend-*.whl"))
    if wheels:
        return wheels[0]
    for stale in directory.parent.glob("*"):  # wheels of earlier sources
        shutil.rmtree(stale, ignore_errors=True)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(directory), str(ROOT)])
    return sorted(directory.glob("ge_python_backend-*.whl"))[0]


def stub_environment(spec: StubEnvSpec) -> Path:
    """The virtualenv of `spec` with the current package installed; built when missing (one
    process at a time: parallel test workers share the cache)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _stub_environment(spec)


def _stub_environment(spec: StubEnvSpec) -> Path:
    interpreter = find_interpreter(spec.python_version)
    key = hashlib.sha256("\n".join([str(interpreter), *spec.requirements]).encode()).hexdigest()
    env = CACHE / f"{spec.name}-{key[:12]}"
    python = env / "bin" / "python"
    if not (env / ".complete").is_file():
        shutil.rmtree(env, ignore_errors=True)
        _run([str(interpreter), "-m", "venv", str(env)])
        _run([str(python), "-m", "pip", "install", "-q", *spec.requirements])
        (env / ".complete").write_text("\n".join(spec.requirements) + "\n")
    wheel = build_wheel()
    marker = env / ".package"
    if not marker.is_file() or marker.read_text() != wheel.parent.name:
        _run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--force-reinstall",
                str(wheel),
            ]
        )
        marker.write_text(wheel.parent.name)
    return python


if __name__ == "__main__":  # build every environment ahead of the tests
    for each in (PY39_NUMPY1, PY312_NUMPY2, PY312_NUMPY2_SUITE):
        print(stub_environment(each))
