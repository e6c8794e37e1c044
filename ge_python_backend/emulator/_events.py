"""Events: a mark queued on a stream, stamped with the time the stream's worker reaches it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ge_python_backend.emulator._state import AclFailure
from ge_python_backend.emulator._streams import Stream


class Event:
    """An `aclrtEvent`: `record` queues a time stamp on a stream; `wait` blocks until it ran."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self._lock = threading.Lock()
        self._stream: Stream | None = None
        self._ticket = 0
        self._stamp: float | None = None

    def record(self, stream: Stream) -> None:
        """Queue the stamp on `stream` (a later record replaces an earlier one, as in ACL)."""
        with self._lock:
            self._stamp = None
            self._stream = stream
        self._ticket = stream.submit("acl.rt.record_event", self._mark)

    def _mark(self) -> None:
        with self._lock:
            self._stamp = time.perf_counter()

    def wait(self) -> None:
        """Block until the stream has reached the event (returns at once if never recorded)."""
        self.waiter(give_up_if_hung=False)()

    def waiter(self, give_up_if_hung: bool = True) -> Callable[[], None]:
        """Waiting for the event's record as it is now (a later record does not move it); as a
        queued work (the default) it gives up with StreamHung behind hung work."""
        stream, ticket = self._stream, self._ticket
        if stream is None:
            return lambda: None
        return lambda: stream.wait_for(ticket, give_up_if_hung)

    def stamp(self) -> float:
        """perf_counter when the stream reached the event; 507006 if it has not yet."""
        with self._lock:
            if self._stamp is None:
                raise AclFailure(
                    507006, f"event 0x{self.handle:x} has not completed (record it and wait)"
                )
            return self._stamp


EVENTS: dict[int, Event] = {}
_EVENTS_LOCK = threading.Lock()


def add_event(event: Event) -> None:
    with _EVENTS_LOCK:
        EVENTS[event.handle] = event


def remove_event(handle: int) -> Event:
    with _EVENTS_LOCK:
        event = EVENTS.pop(handle, None)
    if event is None:
        raise AclFailure(107000, f"0x{handle:x} is not a live event handle")
    return event


def find_event(handle: int) -> Event:
    """The live event `handle`; 107000 otherwise."""
    with _EVENTS_LOCK:
        event = EVENTS.get(handle)
    if event is None:
        raise AclFailure(107000, f"0x{handle:x} is not a live event handle")
    return event
