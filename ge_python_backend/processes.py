"""Which processes are alive, robust to pid reuse: the one liveness test of machine-wide records.

A record that outlives its process (the emulator's device ledger, the runtime's placement
records) stores `(pid, started)`, where `started` is the process's start time in clock ticks
since boot (`/proc/<pid>/stat` field 22). A process killed by SIGKILL leaves its record behind;
`is_alive` tells such a record from a live one, and from a new process that got the same pid.
`run_directory` is the per-user directory (0700) of this host's records and of the device
hosts' sockets; `records_directory` gives each kind of record a directory of its own in it, so a
reader of one kind never meets files of another. Standard library only: the Triton stub imports it.
"""

from __future__ import annotations

import os
import tempfile

from ge_python_backend.environment import RUN_DIR

__all__ = [
    "RUN_DIR_ENV",
    "is_alive",
    "records_directory",
    "run_directory",
    "start_time",
    "this_process",
]

RUN_DIR_ENV = RUN_DIR.name


def start_time(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot; None if it is gone or a zombie (killed,
    not yet waited for: it holds nothing any more). 0 where /proc is not available."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except OSError:
        return None if os.path.isdir("/proc/self") or not _signalable(pid) else 0
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields follow the last ")".
    fields = text[text.rfind(b")") + 2 :].split()
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def _signalable(pid: int) -> bool:
    """Without /proc: whether `pid` exists at all."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_this: tuple[int, int] | None = None


def this_process() -> tuple[int, int]:
    """(pid, started) of the calling process (read again after a fork)."""
    global _this
    pid = os.getpid()
    if _this is None or _this[0] != pid:
        _this = (pid, start_time(pid) or 0)
    return _this


def is_alive(pid: int, started: int) -> bool:
    """Whether the process that wrote (`pid`, `started`) still runs (not a zombie, not a newer
    process with the same pid)."""
    if pid <= 0:
        return False
    now = start_time(pid)
    return now is not None and (started == 0 or now == 0 or now == started)


def run_directory() -> str:
    """The records' directory (`GE_PYTHON_BACKEND_RUN_DIR`, else one per user), created 0700."""
    directory = os.environ.get(RUN_DIR_ENV)
    if not directory:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        directory = os.path.join(base, f"ge-python-backend-{os.getuid()}")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return directory


def records_directory(kind: str, base: str | None = None) -> str:
    """`<base>/<kind>` (default base: `run_directory()`), created 0700: the directory of one kind
    of record (`placement`: the runtime's; `servers`: serve's), apart from every other kind."""
    directory = os.path.join(base if base is not None else run_directory(), kind)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return directory
