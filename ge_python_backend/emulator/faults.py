"""Fault injection: `GE_EMULATOR_FAULTS="mdl.execute:507011:3,rt.malloc:207001:*"`.

Each entry is `<call>:<code>:<n>` (the call's pyACL name without `acl.`): the call returns `code`
on its n-th call (1-based, counted from when the spec was installed) or on every call with `*`.
A failing call has no side effects. `<call>:hang:<n>` (calls that queue work on a stream, e.g.
`mdl.execute_async:hang:3`) makes the call succeed but the work it queues never complete, like a
hung NPU: `synchronize_stream` blocks, `synchronize_stream_with_timeout` times out, and only
destroying the stream releases it. `<call>:stall=<ms>:<n>` makes the call take `ms` milliseconds
longer, then succeed as usual: a host thread stuck in the driver that resumes (what a caller's
own timeouts must survive). The spec is read when the emulator is imported; `set_faults`
replaces it (and restarts the call counts).
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass

from ge_python_backend.environment import EMULATOR_FAULTS

ENV = EMULATOR_FAULTS.name
FORMAT = (
    '<call>:<code>|hang|stall=<ms>:<n>|* separated by ",", e.g. '
    '"mdl.execute:507011:3,rt.malloc:207001:*" (call without the acl. prefix, code a positive '
    "ACL error code, hang for a call that queues work on a stream, stall=<ms> for a call that "
    "returns that many milliseconds late, n the 1-based call number or * for every call)"
)
HANG = "hang"
STALL = "stall="

# Calls that can be made to fail, and those that queue work on a stream (can hang); the `acl`
# modules register theirs when imported.
INJECTABLE: set[str] = set()
HANGABLE: set[str] = set()


@dataclass(frozen=True)
class Fault:
    """Return `code` from `call` on its `nth` call (every call if `nth` is None); code 0 is a
    hang (the call succeeds and the work it queues never completes) or, with `stall_s`, a
    stall (the call returns that many seconds late, and succeeds)."""

    call: str
    code: int
    nth: int | None
    stall_s: float = 0.0

    @property
    def hang(self) -> bool:
        return self.code == 0 and not self.stall_s


_lock = threading.Lock()
_faults: dict[str, list[Fault]] = {}
_calls: collections.Counter[str] = collections.Counter()
_hanging = threading.local()  # .fault: the hang fault of the call this thread is running


def parse(spec: str) -> list[Fault]:
    """Parse a fault spec; raises ValueError naming the bad entry and the format."""
    faults = []
    for entry in spec.split(","):
        if not entry.strip():
            continue
        parts = [p.strip() for p in entry.split(":")]
        fault = _parse_entry(parts)
        if fault is None:
            raise ValueError(f"{ENV}: bad entry {entry.strip()!r}; expected {FORMAT}")
        if fault.call not in INJECTABLE:
            raise ValueError(
                f"{ENV}: bad entry {entry.strip()!r}: {fault.call!r} is not a call the emulator "
                f"can fail; use one of {', '.join(sorted(INJECTABLE))}; expected {FORMAT}"
            )
        if fault.hang and fault.call not in HANGABLE:
            raise ValueError(
                f"{ENV}: bad entry {entry.strip()!r}: {fault.call!r} queues no work on a stream, "
                f"so it cannot hang; hang one of {', '.join(sorted(HANGABLE))}; expected {FORMAT}"
            )
        faults.append(fault)
    return faults


def _parse_entry(parts: list[str]) -> Fault | None:
    if len(parts) != 3 or not parts[0]:
        return None
    call, code_text, nth_text = parts
    stall_s = 0.0
    if code_text == HANG:
        code = 0
    elif code_text.startswith(STALL) and code_text[len(STALL) :].isdigit():
        code, stall_s = 0, int(code_text[len(STALL) :]) / 1000
        if not stall_s:
            return None
    elif code_text.isdigit() and int(code_text) != 0:
        code = int(code_text)
    else:
        return None
    if nth_text == "*":
        return Fault(call, code, None, stall_s)
    if not nth_text.isdigit() or int(nth_text) == 0:
        return None
    return Fault(call, code, int(nth_text), stall_s)


def set_faults(spec: str | None) -> None:
    """Install a fault spec (None or "" clears it) and restart the call counts."""
    faults = parse(spec or "")
    with _lock:
        _faults.clear()
        _calls.clear()
        for fault in faults:
            _faults.setdefault(fault.call, []).append(fault)


def load_from_env() -> None:
    """Install the spec from `GE_EMULATOR_FAULTS` (empty when unset)."""
    set_faults(os.environ.get(ENV))


def take(call: str) -> Fault | None:
    """Count one call of `call`; the fault it must fail with, if any. Without faults installed
    nothing is counted (`set_faults` restarts the counts anyway)."""
    if not _faults:
        return None
    with _lock:
        _calls[call] += 1
        number = _calls[call]
        for fault in _faults.get(call, ()):
            if fault.nth is None or fault.nth == number:
                return fault
    return None


def set_hanging(fault: Fault | None) -> None:
    """Mark (or, with None, unmark) the calling thread as running the call of hang `fault`."""
    _hanging.fault = fault


def hanging() -> Fault | None:
    """The hang fault of the call this thread is running: the work it queues must never run."""
    fault: Fault | None = getattr(_hanging, "fault", None)
    return fault
