"""The project's own Python sources, as the structural tests (test_layers, test_python39) read
them: every `.py` under `ge_python_backend/` and `model_templates/`."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ge_python_backend"
SOURCE_DIRS = (PACKAGE, "model_templates")


def source_files() -> list[Path]:
    """Every source file, in a stable order."""
    return sorted(path for directory in SOURCE_DIRS for path in (ROOT / directory).rglob("*.py"))
