"""Events: a mark queued on a stream, stamped with the device time the stream reaches it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ge_python_backend.ascend import AclCode
from ge_python_backend.emulator import timing
from ge_python_backend.emulator._state import AclFailure
from ge_python_backend.emulator._streams import Mark, Stream


class _Record(Mark):
    """One record of an event on a stream: its ticket there and, once reached, its stamp."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.ticket = 0
        self.after = stream.after  # what the stream's work before it runs after


class Event:
    """An `aclrtEvent`: `record` queues a time stamp on a stream; `wait` blocks until it ran."""

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self._record: _Record | None = None

    def record(self, stream: Stream) -> None:
        """Queue the stamp on `stream` (a later record replaces an earlier one, as in ACL)."""
        record = _Record(stream)
        record.ticket = stream.submit("acl.rt.record_event", record)
        self._record = record

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the stream has reached the event (at once if never recorded), at most
        `timeout` seconds (None: no limit); False if it has not by then."""
        record = self._record
        return record is None or record.stream.wait_for(record.ticket, timeout=timeout)

    def waiter(self) -> Callable[[], None]:
        """A queued work (`stream_wait_event`) waiting for the event's record as it is now (a
        later record does not move it): it gives up with StreamHung behind hung work, and the
        waiting stream goes on from the device time of the record."""
        record = self._record
        if record is None:
            return lambda: None

        def wait() -> None:
            record.stream.wait_for(record.ticket, give_up_if_hung=True)
            if record.stamp is not None:  # None: the stream was destroyed before reaching it
                timing.reach(record.stamp)

        return wait

    def order(self, stream: Stream) -> None:
        """`stream` (which queued a wait for the event's record as it is now) runs its later
        work after the record's stream's work up to the record (`_flights`)."""
        record = self._record
        if record is not None:
            stream.order_after(record.stream, record.ticket, record.after)

    def stamp(self) -> float:
        """Device time (perf_counter seconds) when the stream reached the event; 507006 if it
        has not yet."""
        record = self._record
        if record is None or record.stamp is None:
            raise AclFailure(
                AclCode.RT_EVENT_NOT_COMPLETE,
                f"event 0x{self.handle:x} has not completed (record it and wait)",
            )
        return record.stamp


EVENTS: dict[int, Event] = {}
_EVENTS_LOCK = threading.Lock()


def add_event(event: Event) -> None:
    with _EVENTS_LOCK:
        EVENTS[event.handle] = event


def remove_event(handle: int) -> Event:
    with _EVENTS_LOCK:
        event = EVENTS.pop(handle, None)
    if event is None:
        raise AclFailure(AclCode.RT_PARAM_INVALID, f"0x{handle:x} is not a live event handle")
    return event


def find_event(handle: int) -> Event:
    """The live event `handle`; 107000 otherwise."""
    with _EVENTS_LOCK:
        event = EVENTS.get(handle)
    if event is None:
        raise AclFailure(AclCode.RT_PARAM_INVALID, f"0x{handle:x} is not a live event handle")
    return event
