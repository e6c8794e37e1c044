"""The host's ledger of each emulated device: which processes opened it and the memory they hold.

A real NPU belongs to the machine: every process that opens it counts against pyACL's process
cap, and its free memory is what all of them left. So each emulated device has one ledger file
on the host, shared by every emulator process as the timing model's engines are
(`timing.host_directory()`: `GE_EMULATOR_HOST_DIR`, default `/dev/shm/ge-emulator-<uid>`, mode
0700): `device<id>-ledger`, a row per process (`_ROW`: pid, start time, contexts, bytes held),
read and written under `fcntl.flock`. A process holds a row while it has a context on the
device; `bytes` is everything it holds there (the overhead of opening the device, `malloc`s,
loaded models' weight and work memory). The overhead is charged once per process, with its
first context (the primary context of `set_device`, or a first `create_context`): the public
figures are of processes that opened a device; what an extra context of the same process costs
is UNCONFIRMED (charged nothing). Contexts of one process count once against the process cap,
as in the runtime (hicann/runtime `Runtime::DeviceRetain` opens the device's TSD session only
when the device's reference count leaves 0). A row whose process died, even by SIGKILL, is
reaped by pid liveness (`processes.is_alive`), so its slot and memory come back.

Settings (read at `acl.init`): `GE_EMULATOR_MAX_PROCESSES` (default 64, pyACL's cap on a
physical machine; 32 in a VM), `GE_EMULATOR_PROCESS_MEMORY` (bytes a process's opening of the
device holds, default `ascend.PROCESS_DEVICE_MEMORY`), `GE_EMULATOR_DEVICE_MEMORY` (bytes per
device, default the memory of the SoC `GE_EMULATOR_SOC` names, `ascend.SOC_DEVICES`).
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
from dataclasses import dataclass

from ge_python_backend.processes import is_alive, this_process

_ROW = struct.Struct("<qqqq")  # pid, start time (clock ticks), contexts, bytes


@dataclass(frozen=True)
class Holder:
    """A process holding a device: what its row says."""

    pid: int
    contexts: int
    bytes: int


@dataclass(frozen=True)
class Refusal:
    """Why the ledger refused: the device is full of processes, or of memory."""

    processes: int  # processes holding the device, the caller excluded
    used: int  # bytes held by every process
    holders: tuple[Holder, ...]


def device_holders(directory: str, device_id: int) -> tuple[Holder, ...]:
    """The live processes holding emulated device `device_id` of the host at `directory` (as
    its ledger says; for tests and benchmarks that count a device's processes and memory)."""
    path = os.path.join(directory, f"device{device_id}-ledger")
    try:
        with open(path, "rb") as file:
            fcntl.flock(file.fileno(), fcntl.LOCK_SH)
            data = file.read()
    except FileNotFoundError:
        return ()
    rows = _ROW.iter_unpack(data[: len(data) // _ROW.size * _ROW.size])
    return tuple(
        Holder(pid, contexts, nbytes)
        for pid, started, contexts, nbytes in rows
        if pid and is_alive(pid, started)
    )


class DeviceLedger:
    """This process's row in one device's ledger (callers hold the emulator's `LOCK`).

    `open_context` and `charge` return None when they succeed, else a `Refusal` for the caller
    to turn into ACL's code; `close_context` and `release` always succeed.
    """

    def __init__(
        self,
        directory: str,
        device_id: int,
        capacity: int,
        max_processes: int,
        process_memory: int,
    ) -> None:
        self.path = os.path.join(directory, f"device{device_id}-ledger")
        self.capacity = capacity
        self.max_processes = max_processes
        self.process_memory = process_memory
        self.contexts = 0
        self.bytes = 0
        self._fd: int | None = None
        self._pid = 0
        self._row: int | None = None  # index of this process's row while it holds one

    def open_context(self) -> Refusal | None:
        """A new context of this process on the device: the first takes a process slot and the
        memory of opening the device."""
        with self._locked() as rows:
            overhead = 0
            if self.contexts == 0:
                others = [r for i, r in enumerate(rows) if r[0] and i != self._row]
                if len(others) >= self.max_processes:
                    return self._refusal(rows)
                overhead = self.process_memory
            refusal = self._room(rows, overhead)
            if refusal is not None:
                return refusal
            self.contexts += 1
            self.bytes += overhead
            self._publish(rows)
        return None

    def close_context(self) -> None:
        """A context of this process was destroyed; the last gives the slot and the memory of
        opening the device back."""
        with self._locked() as rows:
            self.contexts = max(0, self.contexts - 1)
            if self.contexts == 0:
                self.bytes = max(0, self.bytes - self.process_memory)
            self._publish(rows)

    def charge(self, nbytes: int) -> Refusal | None:
        """Hold `nbytes` more of the device's memory, if every process together leaves them."""
        with self._locked() as rows:
            refusal = self._room(rows, nbytes)
            if refusal is None:
                self.bytes += nbytes
                self._publish(rows)
            return refusal

    def release(self, nbytes: int) -> None:
        """Give back `nbytes` this process held."""
        with self._locked() as rows:
            self.bytes = max(0, self.bytes - nbytes)
            self._publish(rows)

    def leave(self) -> None:
        """`acl.finalize`: the process holds nothing on the device any more."""
        if self.contexts or self.bytes or self._row is not None:
            with self._locked() as rows:
                self.contexts = self.bytes = 0
                self._publish(rows)

    def used(self) -> int:
        """Bytes every live process holds on the device."""
        with self._locked() as rows:
            return sum(r[3] for r in rows if r[0])

    # -- the file ----------------------------------------------------------------------------

    def _room(self, rows: list[tuple[int, int, int, int]], nbytes: int) -> Refusal | None:
        used = sum(r[3] for r in rows if r[0])
        return None if used + nbytes <= self.capacity else self._refusal(rows)

    def _refusal(self, rows: list[tuple[int, int, int, int]]) -> Refusal:
        live = [r for i, r in enumerate(rows) if r[0]]
        return Refusal(
            processes=sum(1 for i, r in enumerate(rows) if r[0] and i != self._row),
            used=sum(r[3] for r in live),
            holders=tuple(Holder(r[0], r[2], r[3]) for r in live),
        )

    def _publish(self, rows: list[tuple[int, int, int, int]]) -> None:
        """Write this process's row (or free it when it holds nothing)."""
        assert self._fd is not None
        if self.contexts == 0 and self.bytes == 0:
            if self._row is not None:
                os.pwrite(self._fd, _ROW.pack(0, 0, 0, 0), self._row * _ROW.size)
                rows[self._row] = (0, 0, 0, 0)
                self._row = None
            return
        pid, started = this_process()
        if self._row is None:
            free = [i for i, r in enumerate(rows) if not r[0]]
            self._row = free[0] if free else len(rows)
            if not free:
                rows.append((0, 0, 0, 0))
        row = (pid, started, self.contexts, self.bytes)
        os.pwrite(self._fd, _ROW.pack(*row), self._row * _ROW.size)
        rows[self._row] = row

    def _locked(self) -> _LedgerLock:
        pid = os.getpid()
        if self._fd is None or self._pid != pid:  # first use, or a forked child: a row of its own
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            self._fd = os.open(self.path, flags, 0o600)
            self._pid, self._row = pid, None
        return _LedgerLock(self)


class _LedgerLock:
    """`with`: the ledger's rows, read under its flock, dead processes' rows reaped (zeroed)."""

    def __init__(self, ledger: DeviceLedger) -> None:
        self.ledger = ledger

    def __enter__(self) -> list[tuple[int, int, int, int]]:
        fd = self.ledger._fd
        assert fd is not None
        _threads.acquire()
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = os.pread(fd, os.fstat(fd).st_size, 0)
        rows = list(_ROW.iter_unpack(data[: len(data) // _ROW.size * _ROW.size]))
        for index, (pid, started, _, _) in enumerate(rows):
            if pid and index != self.ledger._row and not is_alive(pid, started):
                os.pwrite(fd, _ROW.pack(0, 0, 0, 0), index * _ROW.size)
                rows[index] = (0, 0, 0, 0)
        return rows

    def __exit__(self, *exc: object) -> None:
        fd = self.ledger._fd
        assert fd is not None
        fcntl.flock(fd, fcntl.LOCK_UN)
        _threads.release()


# flock does not exclude threads sharing one open file: threads take turns first.
_threads = threading.Lock()


def _after_fork() -> None:
    global _threads
    _threads = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)
