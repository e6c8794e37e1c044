"""Version directories of a model: which `.om` each serves and the checksum beside it.

```
<repository>/<name>/<version>/model.py
<repository>/<name>/<version>/<file>.om
<repository>/<name>/<version>/<file>.om.sha256     "<sha256>  <file>.om" (`sha256sum` format)
```
Each version holds its own `.om`: the only `.om` in the directory, or the one the `om_file`
parameter names. Its checksum file is written by scaffold and verified before every load when
present; the model-level `om_sha256` parameter applies to versions without one.
"""

from __future__ import annotations

from pathlib import Path

from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.triton_config import ConfigError
from ge_python_backend.runtime.checksum import check_digest

CHECKSUM_SUFFIX = ".sha256"


def version_dirs(model_dir: Path) -> list[Path]:
    """The numbered version directories of a model, in version order."""
    return sorted(
        (path for path in model_dir.iterdir() if path.is_dir() and path.name.isdigit()),
        key=lambda path: int(path.name),
    )


def find_om(version_dir: Path, om_file: str | None = None) -> Path:
    """The `.om` a version serves: `om_file` when given, else the only `.om` in `version_dir`.

    ConfigError names the directory and the files it holds when there is none or several.
    """
    if om_file is not None:
        path = version_dir / om_file
        if not path.is_file():
            raise ConfigError(
                f"version directory {version_dir} has no {om_file} (named by the parameter "
                f"om_file); it holds: {_listing(version_dir)}"
            )
        return path
    oms = sorted(p for p in version_dir.iterdir() if p.suffix == ".om" and p.is_file())
    if len(oms) == 1:
        return oms[0]
    if not oms:
        raise ConfigError(
            f"version directory {version_dir} holds no .om file (it holds: "
            f"{_listing(version_dir)}); put the model's .om there"
        )
    raise ConfigError(
        f"version directory {version_dir} holds {len(oms)} .om files "
        f"({', '.join(p.name for p in oms)}); keep one .om per version, or name the one to "
        "serve with the om_file parameter"
    )


def checksum_path(om_path: Path) -> Path:
    """`<file>.om.sha256` beside the `.om`."""
    return om_path.with_name(om_path.name + CHECKSUM_SUFFIX)


def read_checksum(om_path: Path) -> str | None:
    """The SHA-256 in the `.om`'s checksum file (lower case), or None when there is none."""
    path = checksum_path(om_path)
    if not path.is_file():
        return None
    try:
        words = path.read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the checksum file {path}: {exc}") from None
    try:
        return check_digest(words[0] if words else "")
    except ValueError:
        raise ConfigError(
            f"checksum file {path} must start with the SHA-256 of {om_path.name} as 64 "
            f"hexadecimal characters (as `sha256sum {om_path.name}` writes it), got "
            f"{' '.join(words)[:80]!r}"
        ) from None


def write_checksum(om_path: Path, sha256: str) -> Path:
    """Write `<sha256>  <file>.om` beside the `.om` (`sha256sum -c` reads it)."""
    path = checksum_path(om_path)
    path.write_text(f"{check_digest(sha256)}  {om_path.name}\n", encoding="utf-8")
    return path


def expected_sha256(om_path: Path, params: ModelParameters) -> str | None:
    """The digest a version's `.om` must have: its checksum file's, else `om_sha256`, else None
    (not checked)."""
    return read_checksum(om_path) or params.om_sha256


def _listing(directory: Path) -> str:
    names = sorted(
        p.name + ("/" if p.is_dir() else "")
        for p in directory.iterdir()
        if p.name != "__pycache__"  # Python's own, written when model.py is imported
    )
    return ", ".join(names) or "nothing"
