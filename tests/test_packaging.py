"""The wheel ships the one model.py template (model_templates/ as ge_python_backend.templates),
and the checkout tracks no symbolic link."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "model_templates" / "model.py"


def tracked_files() -> list[tuple[str, str]]:
    """(mode, path) of every file git tracks in the checkout."""
    listing = subprocess.run(
        ["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    entries = []
    for entry in filter(None, listing.split("\0")):
        info, path = entry.split("\t", 1)
        entries.append((info.split()[0], path))
    return entries


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the tracked files (nothing is written into the checkout).

    The build is isolated: pip installs the `[build-system]` requirements from its configured
    index, as any user's build would.
    """
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs a git checkout")
    source = tmp_path_factory.mktemp("source")
    for _, path in tracked_files():
        if (ROOT / path).is_file():  # a tracked file deleted in the working tree is left out
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, source / path)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    [path] = out.glob("ge_python_backend-*.whl")
    return path


def test_no_symbolic_link_is_tracked() -> None:
    links = [path for mode, path in tracked_files() if mode == "120000"]
    assert links == []


def test_the_wheel_ships_the_template_as_package_data(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert "ge_python_backend/templates/__init__.py" in names
        assert archive.read("ge_python_backend/templates/model.py") == TEMPLATE.read_bytes()
    assert not any(name.startswith("model_templates/") for name in names)


def test_scaffold_uses_the_installed_wheel(wheel: Path, tmp_path: Path) -> None:
    """From the installed wheel, scaffold writes the packaged template as model.py and vendors
    the package without its `templates` folder (the stub never imports it)."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), wheel],
        check=True,
        timeout=300,
    )
    assert (site / "ge_python_backend" / "templates" / "model.py").is_file()
    (tmp_path / "m.om").write_bytes(b"IMOD")  # declared below: never opened
    check = (
        "import ge_python_backend, sys; "
        "from ge_python_backend.repository.scaffold import scaffold; "
        "scaffold('m.om', 'models', inputs=['x:FP32:1,4'], outputs=['y:FP32:1,4'], "
        "vendor_runtime=True); "
        "print(ge_python_backend.__file__)"
    )
    shown = subprocess.run(
        [sys.executable, "-c", check],
        cwd=tmp_path,  # not the checkout, which `python -c` would put first on sys.path
        env={"PYTHONPATH": str(site), "PATH": ""},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert Path(shown.strip()).is_relative_to(site)  # not the checkout's editable install
    version_dir = tmp_path / "models" / "m" / "1"
    assert (version_dir / "model.py").read_bytes() == TEMPLATE.read_bytes()
    vendored = version_dir / "_ge_vendor" / "ge_python_backend"
    assert (vendored / "repository" / "parameters.py").is_file()
    assert not (vendored / "templates").exists()


def test_the_command_reports_the_package_version() -> None:
    """`ge-python-model --version`, the installed entry point: pyproject.toml's version."""
    [version] = re.findall(r'(?m)^version = "(.+)"$', (ROOT / "pyproject.toml").read_text())
    entry_point = Path(sys.executable).parent / "ge-python-model"
    shown = subprocess.run(
        [str(entry_point), "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    python = ".".join(map(str, sys.version_info[:3]))
    assert shown == f"ge-python-model {version} (Python {python})\n"
