"""Processes that hold an emulated device, for the shared-device tests.

    with DeviceHolders(env) as holders:
        rets = holders.open(64)        # 64 processes set device 0: their set_device rets
        holders.malloc(pid, 1 << 20)   # that process mallocs: its ret
        holders.kill(pid)              # SIGKILL (a crash: nothing is released by the process)

`DeviceHolders` runs this file as a program (the farm) with `env`; the farm imports the emulated
pyACL without initialising it and forks a child per holder, which calls `acl.init` and
`acl.rt.set_device(device)` and then serves malloc requests over a pipe. A killed child stays a
zombie until the farm waits for it: the emulator must count it as gone. The farm speaks lines:
`open <device>` -> `<pid> <ret>`, `malloc <pid> <bytes>` -> `<ret>`, `kill <pid>` -> `ok`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any


class DeviceHolders:
    """A farm of processes holding emulated devices (see the module docstring)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._farm = subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, **(env or {})},
            text=True,
        )
        self.pids: list[int] = []

    def _ask(self, line: str) -> str:
        assert self._farm.stdin is not None and self._farm.stdout is not None
        self._farm.stdin.write(line + "\n")
        self._farm.stdin.flush()
        answer = self._farm.stdout.readline().strip()
        assert answer, f"the device holder farm died answering {line!r}"
        return answer

    def open(self, count: int, device: int = 0) -> list[int]:
        """Start `count` holders of `device`, one after another; their set_device rets."""
        rets = []
        for _ in range(count):
            pid, ret = self._ask(f"open {device}").split()
            self.pids.append(int(pid))
            rets.append(int(ret))
        return rets

    def malloc(self, pid: int, nbytes: int) -> int:
        """Have holder `pid` malloc `nbytes` on its device; the ret."""
        return int(self._ask(f"malloc {pid} {nbytes}"))

    def kill(self, pid: int) -> None:
        """SIGKILL holder `pid` (left a zombie: the farm does not wait for it)."""
        assert self._ask(f"kill {pid}") == "ok"

    def close(self) -> None:
        """End the farm and every holder."""
        if self._farm.poll() is None:
            assert self._farm.stdin is not None
            self._farm.stdin.close()
            self._farm.wait(30)

    def __enter__(self) -> DeviceHolders:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _hold(device: int, requests: int, answers: int) -> None:
    """A holder: open `device`, report, then malloc what it is asked until the pipe closes."""
    from ge_python_backend.emulator import acl

    ret = acl.init()
    if ret == 0:
        ret = acl.rt.set_device(device)
    os.write(answers, f"{ret}\n".encode())
    with os.fdopen(requests) as lines:
        for line in lines:
            os.write(answers, f"{acl.rt.malloc(int(line), 0)[1]}\n".encode())
    os._exit(0)  # no finalize: what the process holds goes with it


def _farm() -> None:
    from ge_python_backend.emulator import acl  # noqa: F401  (imported once, before the forks)
    from ge_python_backend.processes import start_time

    children: dict[int, tuple[Any, Any]] = {}
    for line in sys.stdin:
        command, *args = line.split()
        if command == "open":
            child_reads, parent_writes = os.pipe()
            parent_reads, child_writes = os.pipe()
            pid = os.fork()
            if pid == 0:  # keep no other holder's pipe open (its EOF would never come)
                os.close(parent_writes)
                os.close(parent_reads)
                for writer, reader in children.values():
                    writer.close()
                    reader.close()
                _hold(int(args[0]), child_reads, child_writes)
            os.close(child_reads)
            os.close(child_writes)
            children[pid] = (os.fdopen(parent_writes, "w"), os.fdopen(parent_reads))
            answer = f"{pid} {children[pid][1].readline().strip()}"
        elif command == "malloc":
            writer, reader = children[int(args[0])]
            writer.write(args[1] + "\n")
            writer.flush()
            answer = reader.readline().strip()
        else:  # kill, and answer once the kernel has ended it (a zombie now)
            os.kill(int(args[0]), signal.SIGKILL)
            while start_time(int(args[0])) is not None:
                time.sleep(0.001)
            answer = "ok"
        print(answer, flush=True)
    for pid, (writer, _) in children.items():
        writer.close()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


if __name__ == "__main__":
    _farm()
