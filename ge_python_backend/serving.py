"""The serving contract: what a Triton instance (`triton.ModelInstance`) uses of a session, in
its own process (`runtime.Session`) or in the device host (`devicehost.client.RemoteSession`).

Both fail the same way (`errors`): `submit` raises `InputError` (its `request` naming the
request) before any work when a request does not fit, and `ModelUnavailable` when the model
cannot be served any more; `ServingBatch.result()` raises `AclError` (its code and name) when
the device failed the batch, wherever it ran, and another `GeBackendError` for any other failure
of theirs (the device host went away, an output larger than its buffer, ...).

`Completer` is the one thread that completes pipelined batches in order: the instance's (which
answers Triton's requests) and, in the device host, each connection's (which answers the stub).
Standard library, numpy and the ground floor only: the stub imports it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

import numpy as np

from ge_python_backend.modelinfo import GearInfo, SessionCounters, TensorSpec

__all__ = ["Completer", "ServingBatch", "ServingSession"]

logger = logging.getLogger(__name__)
Item = TypeVar("Item")


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


class Completer(Generic[Item]):
    """A thread of its own that completes batches in the order they were put: `complete(item)`
    waits for the item's batch and answers its requests, on failure too (one that raises is
    logged, and the next item completed) and lets it go. The thread starts with the first `put`;
    `close` completes what was put, then ends it."""

    def __init__(self, name: str, complete: Callable[[Item], None], bound: int = 0) -> None:
        self._name = name
        self._complete = complete
        self._items: queue.Queue[Item | None] = queue.Queue(bound)
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()

    def put(self, item: Item) -> None:
        """Hand an item over; blocks while `bound` items (0: no bound) wait."""
        if self._thread is None:
            with self._starting:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
        self._items.put(item)

    def _run(self) -> None:
        while True:
            item = self._items.get()
            if item is None:
                return
            try:
                self._complete(item)
            except Exception:  # never stop completing the batches behind it
                logger.exception("%s: completing a batch", self._name)
            # Not held while waiting for the next one: a batch's arrays (a YOLOv8s batch of 8:
            # 37.5 MiB in, 21.5 MiB out) would stay in memory until then.
            del item

    def close(self) -> None:
        """Complete every item put, then end the thread (idempotent)."""
        with self._starting:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._items.put(None)
            thread.join()
