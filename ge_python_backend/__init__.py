"""Serve Ascend NPU ``.om`` models behind Triton through the Python backend."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ge_python_backend.runtime.session import Session

__version__ = "0.1.0"
__all__ = ["Session", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so that importing the package (the CLI, the emulator) loads no runtime code.
    if name == "Session":
        from ge_python_backend.runtime.session import Session

        return Session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
