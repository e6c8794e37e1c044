"""Emulated pyACL fault injection (`GE_EMULATOR_FAULTS` / `set_faults`)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from emulator_helpers import D2H, H2D, malloc, model_datasets

from ge_python_backend.emulator import acl, set_faults, set_timing, stats

pytestmark = pytest.mark.usefixtures("clean_acl")


def test_a_fault_hits_the_nth_call_only_and_has_no_side_effects(ctx: int) -> None:
    set_faults("rt.malloc:207001:2")
    first = malloc(64)
    before = stats()
    assert acl.rt.malloc(64, 0) == (0, 207001)
    message = acl.get_recent_err_msg()
    assert "injected fault rt.malloc:207001 (call #2" in message
    after = stats()
    assert after["live_device_allocations"] == before["live_device_allocations"]
    assert after["malloc_calls"] == before["malloc_calls"]
    assert after["faults_injected"] == before["faults_injected"] + 1
    assert acl.rt.malloc(64, 0)[1] == 0
    assert acl.rt.free(first) == 0


def test_star_fails_every_call_until_the_spec_is_cleared(ctx: int) -> None:
    set_faults("rt.malloc_host:207001:*")
    assert [acl.rt.malloc_host(64) for _ in range(3)] == [(0, 207001)] * 3
    set_faults(None)
    assert acl.rt.malloc_host(64)[1] == 0


def test_several_entries_and_counts_restart_with_a_new_spec(ctx: int) -> None:
    set_faults("rt.malloc:207001:1, rt.malloc:507000:3")
    assert [acl.rt.malloc(64, 0)[1] for _ in range(4)] == [207001, 0, 507000, 0]
    set_faults("rt.malloc:207001:1")
    assert acl.rt.malloc(64, 0)[1] == 207001


def _memcpy(ctx: int, om: Path) -> int:
    data = bytes(64)
    return int(acl.rt.memcpy(malloc(64), 64, acl.util.bytes_to_ptr(data), 64, H2D))


def _memcpy_async(ctx: int, om: Path) -> int:
    host, _ = acl.rt.malloc_host(64)
    return int(acl.rt.memcpy_async(malloc(64), 64, host, 64, H2D, 0))


def _load(ctx: int, om: Path) -> int:
    model_id, ret = acl.mdl.load_from_file(str(om))
    return int(ret)


def _execute(ctx: int, om: Path, stream: int | None = None) -> int:
    model_id, _ = acl.mdl.load_from_file(str(om))
    desc = acl.mdl.create_desc()
    acl.mdl.get_desc(desc, model_id)
    inputs, outputs = model_datasets(desc)
    if stream is None:
        return int(acl.mdl.execute(model_id, inputs, outputs))
    return int(acl.mdl.execute_async(model_id, inputs, outputs, stream))


def _execute_async(ctx: int, om: Path) -> int:
    return _execute(ctx, om, 0)


def _synchronize(ctx: int, om: Path) -> int:
    return int(acl.rt.synchronize_stream(0))


CALLS: dict[str, Callable[[int, Path], int]] = {
    "rt.memcpy": _memcpy,
    "rt.memcpy_async": _memcpy_async,
    "mdl.load_from_file": _load,
    "mdl.execute": _execute,
    "mdl.execute_async": _execute_async,
    "rt.synchronize_stream": _synchronize,
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_required_calls_can_be_failed(ctx: int, om_static: Path, call: str) -> None:
    run = CALLS[call]
    set_faults(f"{call}:507011:2")
    assert run(ctx, om_static) == 0
    assert run(ctx, om_static) == 507011
    assert f"injected fault {call}:507011" in acl.get_recent_err_msg()
    assert run(ctx, om_static) == 0


def test_a_failing_load_or_execute_changes_nothing(ctx: int, om_static: Path) -> None:
    before = stats()
    set_faults("mdl.load_from_file:100014:1")
    assert _load(ctx, om_static) == 100014
    assert stats()["loaded_models"] == before["loaded_models"]
    set_faults("mdl.execute:507011:*")
    assert _execute(ctx, om_static) == 507011
    assert stats()["execute_calls"] == before["execute_calls"]


def test_an_injected_synchronize_fault_waits_for_the_queued_work_first(ctx: int) -> None:
    set_timing("copy_gbps=0.000001")  # 200 bytes take 200 ms
    stream, _ = acl.rt.create_stream()
    host, _ = acl.rt.malloc_host(200)
    dev = malloc(200)
    assert acl.rt.memset(dev, 200, 4, 200) == 0
    set_faults("rt.synchronize_stream:507000:1")
    start = time.monotonic()
    assert acl.rt.memcpy_async(host, 200, dev, 200, D2H, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 507000
    assert time.monotonic() - start >= 0.15
    assert ctypes.string_at(host, 200) == b"\x04" * 200
    assert acl.rt.destroy_stream(stream) == 0


@pytest.mark.parametrize(
    "spec",
    [
        "rt.malloc:207001",
        "rt.malloc:abc:1",
        "rt.malloc:207001:0",
        "rt.malloc:207001:-1",
        "rt.malloc:0:1",
        "acl.rt.malloc:207001:1",
        "rt.no_such_call:207001:1",
        "rt.malloc:207001:1,garbage",
    ],
)
def test_bad_specs_raise_value_error_naming_the_entry(spec: str) -> None:
    bad = spec.split(",")[-1]
    with pytest.raises(ValueError, match=rf"GE_EMULATOR_FAULTS: bad entry '{bad}'.*<call>:<code>"):
        set_faults(spec)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_environment_spec_is_read_at_import() -> None:
    code = (
        "from ge_python_backend.emulator import acl\n"
        "acl.init(); acl.rt.set_device(0)\n"
        "print([acl.rt.malloc(64, 0)[1] for _ in range(3)])\n"
    )
    result = _run(code, GE_EMULATOR_FAULTS="rt.malloc:207001:2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0, 207001, 0]"
    result = _run(code, GE_EMULATOR_FAULTS="rt.malloc:oops")
    assert result.returncode != 0
    assert "GE_EMULATOR_FAULTS: bad entry 'rt.malloc:oops'" in result.stderr
