"""Which processes are alive, robust to pid reuse: the one liveness test of machine-wide records.

A record that outlives its process (the emulator's device ledger, the runtime's placement
records) stores `(pid, started)`, where `started` is the process's start time in clock ticks
since boot (`/proc/<pid>/stat` field 22). A process killed by SIGKILL leaves its record behind;
`is_alive` tells such a record from a live one, and from a new process that got the same pid.
`run_directory` is the per-user directory (0700) of this host's records and of the device
hosts' sockets; `records_directory` gives each kind of record a directory of its own in it, so a
reader of one kind never meets files of another; `private_directory` is the one check of such a
directory (the run directory, `serve`'s records, the emulator's host directory). Standard
library only: the Triton stub imports it.
"""

from __future__ import annotations

import os
import stat
import tempfile

from ge_python_backend.environment import RUN_DIR

__all__ = [
    "RUN_DIR_ENV",
    "NotPrivateError",
    "is_alive",
    "private_directory",
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


class NotPrivateError(PermissionError):
    """A directory that is not this user's alone: another owner, access for the group or
    others, or a symbolic link."""


def private_directory(directory: str) -> str:
    """`directory`, created (mode 0700) when missing, checked to be this user's alone: a real
    directory (a symbolic link is not followed), owned by this uid, mode 0700 or narrower.
    `NotPrivateError` otherwise: a user who made the path first could read what it holds, or
    plant links in it that turn our writes onto another file; other `OSError`s when it cannot
    be made."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise NotPrivateError(
            f"{directory} is not a private directory of this user (owner uid {info.st_uid}, "
            f"mode {stat.filemode(info.st_mode)}; uid {os.getuid()} with mode 0700 needed): "
            "remove it, or fix its owner and mode"
        )
    return directory


def run_directory() -> str:
    """The records' directory (`GE_PYTHON_BACKEND_RUN_DIR`, else one per user), created 0700
    and checked private (`private_directory`)."""
    directory = os.environ.get(RUN_DIR_ENV)
    if not directory:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        directory = os.path.join(base, f"ge-python-backend-{os.getuid()}")
    return private_directory(directory)


def records_directory(kind: str, base: str | None = None) -> str:
    """`<base>/<kind>` (default base: `run_directory()`), created 0700: the directory of one kind
    of record (`placement`: the runtime's; `servers`: serve's), apart from every other kind."""
    directory = os.path.join(base if base is not None else run_directory(), kind)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    return directory
