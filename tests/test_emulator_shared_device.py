"""One emulated device per device id per host, shared by every process (emulator/_ledger.py).

Other processes here are holders (`device_holders.py`) that open device 0 and hold it until
they are killed with SIGKILL or the farm ends; the test process is the one over the cap or the
one whose memory shrinks. The codes are the sources': 507033 with E30003 for the process
over pyACL's cap (hicann/runtime runtime.cc PrintfTsdError, errcode_manage.cc
RT_ERROR_DEVICE_RETAIN), 207001 for malloc (npu_driver_mem.cc), 245000 for a model load
(hicann/ge davinci_model.cc InitWeightMem).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from device_holders import DeviceHolders

from ge_python_backend.ascend import PROCESS_DEVICE_MEMORY, PROCESSES_PER_DEVICE, soc_device
from ge_python_backend.emulator import acl

pytestmark = pytest.mark.usefixtures("clean_acl")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host of its own, so no other test's processes are on its devices."""
    monkeypatch.setenv("GE_EMULATOR_HOST_DIR", str(tmp_path / "host"))
    return tmp_path / "host"


@pytest.fixture
def holders(host: Path) -> Iterator[DeviceHolders]:
    """Processes holding devices of this test's host (environment read when each opens)."""
    with DeviceHolders() as farm:
        yield farm


def test_the_process_over_the_cap_fails_set_device_with_507033_and_a_killed_one_gives_its_slot(
    holders: DeviceHolders,
) -> None:
    assert holders.open(PROCESSES_PER_DEVICE) == [0] * PROCESSES_PER_DEVICE
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 507033
    message = acl.get_recent_err_msg()
    assert "E30003" in message and "exceeds the limit" in message
    assert f"{PROCESSES_PER_DEVICE} processes hold the device" in message
    assert acl.rt.create_context(0) == (0, 507033)  # a first context opens the device too
    assert acl.rt.set_device(1) == 0  # another device has room
    assert acl.rt.reset_device(1) == 0
    holders.kill(holders.pids[3])
    assert acl.rt.set_device(0) == 0  # the dead process's slot came back (a zombie holds none)
    ctx, ret = acl.rt.create_context(0)  # contexts of one process count once
    assert ret == 0
    assert acl.rt.destroy_context(ctx) == 0
    assert acl.rt.reset_device(0) == 0


def test_the_cap_is_settable_for_a_vm(host: Path) -> None:
    with DeviceHolders({"GE_EMULATOR_MAX_PROCESSES": "2"}) as holders:
        assert holders.open(3) == [0, 0, 507033]


def test_memory_one_process_holds_is_gone_for_another_and_comes_back_when_it_dies(
    holders: DeviceHolders,
) -> None:
    assert holders.open(1) == [0]
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    free_before, total, ret = acl.rt.get_mem_info(1)
    assert ret == 0 and total == soc_device("Ascend310P3").memory
    assert free_before == total - 2 * PROCESS_DEVICE_MEMORY  # each process opened the device
    nbytes = 100 << 20
    assert holders.malloc(holders.pids[0], nbytes) == 0
    reserved = (nbytes + 31) // 32 * 32 + 32  # what the runtime reserves for malloc(nbytes)
    assert free_before - acl.rt.get_mem_info(1)[0] == reserved
    assert acl.rt.get_mem_info(0) == acl.rt.get_mem_info(1)  # DDR and HBM: one memory
    holders.kill(holders.pids[0])
    assert acl.rt.get_mem_info(1)[0] == free_before + PROCESS_DEVICE_MEMORY
    assert acl.rt.reset_device(0) == 0


def test_a_malloc_and_a_load_that_do_not_fit_name_what_is_free_and_who_holds_it(
    host: Path, monkeypatch: pytest.MonkeyPatch, om_static: Path
) -> None:
    capacity = PROCESS_DEVICE_MEMORY * 4
    monkeypatch.setenv("GE_EMULATOR_DEVICE_MEMORY", str(capacity))
    holders = DeviceHolders()
    assert holders.open(1) == [0]
    holder_pid = holders.pids[0]
    assert holders.malloc(holder_pid, PROCESS_DEVICE_MEMORY) == 0  # reserves 32 bytes more
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
    holders.close()


def test_finalize_gives_back_everything_the_process_held(holders: DeviceHolders) -> None:
    assert holders.open(1) == [0]
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.malloc(1 << 20, 0)[1] == 0
    held_by_both = acl.rt.get_mem_info(0)[0]
    acl.finalize()
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    assert acl.rt.get_mem_info(0)[0] == held_by_both + (1 << 20) + 32
    assert acl.rt.reset_device(0) == 0
