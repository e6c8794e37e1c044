"""The one SHA-256 helper (`runtime/checksum.py`) used by scaffold, validate and the Session."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ge_python_backend.runtime import ModelFileError
from ge_python_backend.runtime.checksum import check_digest, file_sha256, verify_sha256


@pytest.fixture()
def blob(tmp_path: Path) -> Path:
    path = tmp_path / "model.om"
    path.write_bytes(bytes(range(256)) * 5000)  # > 1 MiB: more than one block
    return path


def test_file_sha256_is_the_hex_digest_of_the_whole_file(blob: Path) -> None:
    assert file_sha256(blob) == hashlib.sha256(blob.read_bytes()).hexdigest()


def test_verify_accepts_the_digest_in_either_case(blob: Path) -> None:
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    verify_sha256(blob, digest)
    verify_sha256(blob, digest.upper())


def test_verify_refuses_another_file(blob: Path) -> None:
    with pytest.raises(ModelFileError, match="sha256 mismatch: expected 0{64}, the file has "):
        verify_sha256(blob, "0" * 64)


@pytest.mark.parametrize("digest", ["", "0" * 63, "g" * 64, "0" * 65, None])
def test_malformed_digests_are_refused(blob: Path, digest: object) -> None:
    with pytest.raises(ValueError, match="sha256 must be 64 hexadecimal characters"):
        check_digest(digest)
    with pytest.raises(ValueError, match="sha256 must be 64 hexadecimal characters"):
        verify_sha256(blob, digest)  # type: ignore[arg-type]
