"""The serving contract: what a Triton instance (`triton.ModelInstance`) uses of a session, in
its own process (`runtime.Session`) or in the device host (`devicehost.client.RemoteSession`).

Both fail the same way (`errors`): `submit` raises `InputError` (its `request` naming the
request) before any work when a request does not fit, and `ModelUnavailable` when the model
cannot be served any more; `ServingBatch.result()` raises `AclError` (its code and name) when
the device failed the batch, wherever it ran, and another `GeBackendError` for any other failure
of theirs (the device host went away, an output larger than its buffer, ...). Standard library,
numpy and the ground floor only: the stub imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from ge_python_backend.modelinfo import GearInfo, SessionCounters, TensorSpec

__all__ = ["ServingBatch", "ServingSession"]


class ServingBatch(Protocol):
    """A submitted batch."""

    def done(self) -> bool:
        """Whether `result()` will not block."""
        ...

    def result(self) -> list[dict[str, np.ndarray]]:
        """Wait for the batch: its outputs per request, in order."""
        ...


class ServingSession(Protocol):
    """One `.om` served on one device."""

    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    gears: GearInfo
    runtime: str  # "pyacl" or "emulator"

    @property
    def host_pid(self) -> int:
        """The process the session runs in."""
        ...

    @property
    def counters(self) -> SessionCounters:
        """What it counted so far."""
        ...

    def submit(
        self, feeds_list: Sequence[Mapping[str, np.ndarray]], pipelined: bool = True
    ) -> ServingBatch:
        """Queue a batch of requests; `pipelined` False: the caller waits for it next."""
        ...

    def wait_ready(self) -> None:
        """Block until the session could launch the next batch right behind the running one."""
        ...

    def device_memory(self) -> tuple[int, int]:
        """(free, total) bytes of the device."""
        ...

    def close(self) -> None:
        """Complete what is pending and release everything (idempotent)."""
        ...
