"""SHA-256 of `.om` files: computing it and checking a file against an expected digest."""

from __future__ import annotations

import hashlib
import os
import re

from ge_python_backend.runtime.errors import ModelFileError

_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
_BLOCK = 1 << 20


def check_digest(expected: object) -> str:
    """`expected` in lower case if it is a SHA-256 written as 64 hexadecimal characters."""
    if not isinstance(expected, str) or not _DIGEST.fullmatch(expected):
        raise ValueError(f"sha256 must be 64 hexadecimal characters, got {expected!r}")
    return expected.lower()


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: str | os.PathLike[str], expected: str) -> None:
    """Raise `ModelFileError` unless the file's SHA-256 is `expected` (ValueError if malformed)."""
    wanted = check_digest(expected)
    actual = file_sha256(path)
    if actual != wanted:
        raise ModelFileError(
            f"{path}: sha256 mismatch: expected {wanted}, the file has {actual}; "
            "refusing to load it"
        )
