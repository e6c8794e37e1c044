"""One emulated device per device id per host, shared by every process (emulator/_ledger.py).

Other processes here are forked children that open device 0 and hold it until told to go (or
are killed with SIGKILL); the test process is the one over the cap or the one whose memory
shrinks. The codes are the sources': 507033 with E30003 for the process over pyACL's cap
(hicann/runtime runtime.cc PrintfTsdError, errcode_manage.cc RT_ERROR_DEVICE_RETAIN), 207001
for malloc (npu_driver_mem.cc), 245000 for a model load (hicann/ge davinci_model.cc
InitWeightMem).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from ge_python_backend.ascend import PROCESS_DEVICE_MEMORY, PROCESSES_PER_DEVICE, soc_device
from ge_python_backend.emulator import acl

pytestmark = pytest.mark.usefixtures("clean_acl")

FORK = multiprocessing.get_context("fork")


def _hold_device(conn: Connection, nbytes: int) -> None:
    """A child: open device 0, malloc `nbytes` (0: none), report; then malloc the sizes it is
    sent, reporting each ret, until it is sent "go"."""
    ret = acl.init()
    if ret == 0:
        ret = acl.rt.set_device(0)
    if ret == 0 and nbytes:
        ret = acl.rt.malloc(nbytes, 0)[1]
    conn.send(ret)
    while (command := conn.recv()) != "go":
        conn.send(acl.rt.malloc(command, 0)[1])
    os._exit(0)  # no finalize: what the process holds goes with it, as on a crash


class Holders:
    """Forked processes holding device 0; `kill(i)` ends one with SIGKILL."""

    def __init__(self) -> None:
        self.processes: list[multiprocessing.process.BaseProcess] = []
        self.pipes: list[Connection] = []

    def start(self, count: int, nbytes: int = 0) -> list[int]:
        """Start `count` holders one after another; each one's set_device/malloc ret."""
        rets = []
        for _ in range(count):
            parent, child = FORK.Pipe()
            process = FORK.Process(target=_hold_device, args=(child, nbytes), daemon=True)
            process.start()
            rets.append(parent.recv())
            self.processes.append(process)
            self.pipes.append(parent)
        return rets

    def malloc(self, index: int, nbytes: int) -> int:
        """Have holder `index` malloc `nbytes`; its ret."""
        self.pipes[index].send(nbytes)
        ret: int = self.pipes[index].recv()
        return ret

    def kill(self, index: int) -> None:
        """SIGKILL one holder and wait for it (its row stays in the ledger until reaped)."""
        process = self.processes[index]
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join()

    def stop(self) -> None:
        for pipe, process in zip(self.pipes, self.processes):
            if process.is_alive():
                pipe.send("go")
            process.join(10)


@pytest.fixture
def holders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Holders]:
    """A host of its own (so no other test's processes are on its devices), and its holders."""
    monkeypatch.setenv("GE_EMULATOR_HOST_DIR", str(tmp_path / "host"))
    group = Holders()
    try:
        yield group
    finally:
        group.stop()


def test_the_process_over_the_cap_fails_set_device_with_507033_and_a_killed_one_gives_its_slot(
    holders: Holders,
) -> None:
    assert holders.start(PROCESSES_PER_DEVICE) == [0] * PROCESSES_PER_DEVICE
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 507033
    message = acl.get_recent_err_msg()
    assert "E30003" in message and "exceeds the limit" in message
    assert f"{PROCESSES_PER_DEVICE} processes hold the device" in message
    assert acl.rt.create_context(0) == (0, 507033)  # a first context opens the device too
    assert acl.rt.set_device(1) == 0  # another device has room
    assert acl.rt.reset_device(1) == 0
    holders.kill(3)
    assert acl.rt.set_device(0) == 0  # the dead process's slot came back
    ctx, ret = acl.rt.create_context(0)  # contexts of one process count once
    assert ret == 0
    assert acl.rt.destroy_context(ctx) == 0
    assert acl.rt.reset_device(0) == 0


def test_the_cap_is_settable_for_a_vm(holders: Holders, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GE_EMULATOR_MAX_PROCESSES", "2")
    assert holders.start(3) == [0, 0, 507033]


def test_memory_one_process_holds_is_gone_for_another_and_comes_back_when_it_dies(
    holders: Holders,
) -> None:
    assert holders.start(1) == [0]  # (forked before this process's acl.init)
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    free_before, total, ret = acl.rt.get_mem_info(1)
    assert ret == 0 and total == soc_device("Ascend310P3").memory
    assert free_before == total - 2 * PROCESS_DEVICE_MEMORY  # each process opened the device
    nbytes = 100 << 20
    assert holders.malloc(0, nbytes) == 0
    reserved = (nbytes + 31) // 32 * 32 + 32  # what the runtime reserves for malloc(nbytes)
    assert free_before - acl.rt.get_mem_info(1)[0] == reserved
    assert acl.rt.get_mem_info(0) == acl.rt.get_mem_info(1)  # DDR and HBM: one memory
    holders.kill(0)
    assert acl.rt.get_mem_info(1)[0] == free_before + PROCESS_DEVICE_MEMORY
    assert acl.rt.reset_device(0) == 0


def test_a_malloc_and_a_load_that_do_not_fit_name_what_is_free_and_who_holds_it(
    holders: Holders, monkeypatch: pytest.MonkeyPatch, om_static: Path
) -> None:
    capacity = PROCESS_DEVICE_MEMORY * 4
    monkeypatch.setenv("GE_EMULATOR_DEVICE_MEMORY", str(capacity))
    assert holders.start(1, PROCESS_DEVICE_MEMORY) == [0]  # reserves 32 bytes more
    holder_pid = holders.processes[0].pid
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    free = acl.rt.get_mem_info(0)[0]
    assert free == capacity - 3 * PROCESS_DEVICE_MEMORY - 32
    assert acl.rt.malloc(free, 0) == (0, 207001)  # free + 32 reserved
    message = acl.get_recent_err_msg()
    assert f"{free} of {capacity} free" in message
    assert f"pid {holder_pid}" in message and f"pid {os.getpid()}" in message
    work, weight, ret = acl.mdl.query_size(str(om_static))
    assert ret == 0 and weight > 256 and work + weight < free
    filler, ret = acl.rt.malloc(free - weight // 2 - 64, 0)
    assert ret == 0 and 0 < acl.rt.get_mem_info(0)[0] < weight
    assert acl.mdl.load_from_file(str(om_static)) == (0, 245000)  # ACL_ERROR_GE_MEMORY_ALLOCATION
    assert "the weights of" in acl.get_recent_err_msg()
    assert acl.rt.free(filler) == 0
    model_id, ret = acl.mdl.load_from_file(str(om_static))
    assert ret == 0
    assert acl.rt.get_mem_info(0)[0] == free - work - weight
    assert acl.mdl.unload(model_id) == 0
    assert acl.rt.get_mem_info(0)[0] == free
    assert acl.rt.reset_device(0) == 0


def test_finalize_gives_back_everything_the_process_held(holders: Holders) -> None:
    assert holders.start(1) == [0]
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.malloc(1 << 20, 0)[1] == 0
    held_by_both = acl.rt.get_mem_info(0)[0]
    acl.finalize()
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.get_mem_info(0)[0] == held_by_both + (1 << 20) + 32
    assert acl.rt.reset_device(0) == 0
