"""Emulated pyACL fault injection (`GE_EMULATOR_FAULTS` / `set_faults`)."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
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


def test_a_stall_returns_late_and_succeeds(ctx: int) -> None:
    set_faults("rt.malloc:stall=200:2")
    first = malloc(64)
    before = stats()["faults_injected"]
    start = time.perf_counter()
    second, ret = acl.rt.malloc(64, 0)
    assert ret == 0 and time.perf_counter() - start >= 0.2
    assert stats()["faults_injected"] == before + 1
    for address in (first, second):
        assert acl.rt.free(address) == 0


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
        "rt.malloc:hang:1",
        "mdl.execute_async:hangs:1",
        "rt.malloc:stall=0:1",
        "rt.malloc:stall=-5:1",
        "rt.malloc:stall:1",
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


# ----------------------------------------------------------------------------- hang faults


def _loaded(om: Path) -> tuple[int, list[int]]:
    """(model id, [inputs, outputs] datasets) of `om` loaded in the current context."""
    model_id, ret = acl.mdl.load_from_file(str(om))
    assert ret == 0
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, model_id) == 0
    return model_id, model_datasets(desc)


def test_a_hang_fault_hangs_only_that_execution_until_its_stream_is_destroyed(
    ctx: int, om_static: Path
) -> None:
    model_id, (inputs, outputs) = _loaded(om_static)
    stream, _ = acl.rt.create_stream()
    set_faults("mdl.execute_async:hang:2")
    assert acl.mdl.execute_async(model_id, inputs, outputs, stream) == 0
    assert acl.rt.synchronize_stream_with_timeout(stream, 5000) == 0
    assert acl.mdl.execute_async(model_id, inputs, outputs, stream) == 0  # the call succeeds
    start = time.monotonic()
    assert acl.rt.synchronize_stream_with_timeout(stream, 200) == 507046  # gave up at its limit
    assert time.monotonic() - start >= 0.19
    message = acl.get_recent_err_msg()
    assert "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT (507046)" in message
    assert "did not finish within 200 ms" in message
    assert "acl.mdl.execute_async never completes (injected fault mdl.execute_async:hang" in message
    assert acl.rt.synchronize_stream_with_timeout(stream, 100) == 507046  # still hung
    assert acl.rt.destroy_stream(stream) == 0  # returns: it does not wait for the hung work
    fresh, _ = acl.rt.create_stream()
    assert acl.mdl.execute_async(model_id, inputs, outputs, fresh) == 0  # call #3 runs
    assert acl.rt.synchronize_stream_with_timeout(fresh, 5000) == 0
    assert acl.rt.destroy_stream(fresh) == 0
    assert stats()["faults_injected"] >= 1


def test_synchronize_stream_blocks_on_a_hang_until_another_thread_destroys_the_stream(
    ctx: int, om_static: Path
) -> None:
    model_id, (inputs, outputs) = _loaded(om_static)
    stream, _ = acl.rt.create_stream()
    set_faults("mdl.execute_async:hang:*")
    assert acl.mdl.execute_async(model_id, inputs, outputs, stream) == 0
    result: list[int] = []

    def waiter() -> None:
        assert acl.rt.set_context(ctx) == 0
        result.append(acl.rt.synchronize_stream(stream))

    thread = threading.Thread(target=waiter, daemon=True)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not result  # blocked, as on a hung NPU
    assert acl.rt.destroy_stream(stream) == 0
    thread.join(5)
    assert result == [107017]  # UNCONFIRMED: what real ACL returns to a waiter then


def test_a_slow_execution_times_out_and_then_completes(ctx: int, om_static: Path) -> None:
    model_id, (inputs, outputs) = _loaded(om_static)
    stream, _ = acl.rt.create_stream()
    set_timing("execute_us=300000")
    assert acl.mdl.execute_async(model_id, inputs, outputs, stream) == 0
    assert acl.rt.synchronize_stream_with_timeout(stream, 50) == 507046
    assert acl.rt.synchronize_stream_with_timeout(stream, -1) == 0  # -1: no limit
    assert acl.rt.destroy_stream(stream) == 0


def test_synchronize_event_with_timeout_waits_for_the_event_not_the_stream(
    ctx: int, om_static: Path
) -> None:
    # hicann/ge aclrtSynchronizeEventWithTimeoutImpl: timeout in [-1, INT_MAX] (else 107000),
    # 507047 ACL_ERROR_RT_EVENT_SYNC_TIMEOUT past it; the binding parses (event "k", timeout "i").
    model_id, (inputs, outputs) = _loaded(om_static)
    stream, _ = acl.rt.create_stream()
    executed, _ = acl.rt.create_event()
    set_timing("execute_us=50000,copy_gbps=0.0001")  # a 64-byte copy out takes about 0.6 ms
    assert acl.mdl.execute_async(model_id, inputs, outputs, stream) == 0
    assert acl.rt.record_event(executed, stream) == 0
    device, (host, ret) = malloc(64), acl.rt.malloc_host(64)
    assert ret == 0
    assert acl.rt.memcpy_async(host, 64, device, 64, D2H, stream) == 0
    assert acl.rt.synchronize_event_with_timeout(executed, 0) == 507047  # only looks
    assert "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT (507047)" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_event_with_timeout(executed, 5000) == 0
    assert acl.rt.synchronize_event_with_timeout(executed, -1) == 0
    assert acl.rt.synchronize_event_with_timeout(executed, -2) == 107000
    for bad in ((executed,), (executed, 1.5)):
        with pytest.raises(TypeError, match="synchronize_event_with_timeout> args parse failed"):
            acl.rt.synchronize_event_with_timeout(*bad)
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.rt.free_host(host) == 0
    set_timing(None)
    set_faults("mdl.execute_async:hang:1")
    assert acl.mdl.execute_async(model_id, inputs, outputs, stream) == 0
    assert acl.rt.record_event(executed, stream) == 0
    start = time.monotonic()
    assert acl.rt.synchronize_event_with_timeout(executed, 200) == 507047  # behind hung work
    assert time.monotonic() - start >= 0.19
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_event(executed) == 0


def test_synchronize_stream_with_timeout_checks_its_arguments(ctx: int) -> None:
    stream, _ = acl.rt.create_stream()
    assert acl.rt.synchronize_stream_with_timeout(stream, 1) == 0
    assert acl.rt.synchronize_stream_with_timeout(stream, -2) == 107000
    assert "timeout must be -1 (no limit) or > 0 ms, got -2" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream_with_timeout(stream, 0) == 107000
    for bad in ((stream,), (stream, 1.5), (stream, "1")):
        with pytest.raises(TypeError, match="synchronize_stream_with_timeout> args parse failed"):
            acl.rt.synchronize_stream_with_timeout(*bad)
    with pytest.raises(OverflowError):
        acl.rt.synchronize_stream_with_timeout(stream, 2**31)
    set_faults("rt.synchronize_stream_with_timeout:507000:1")
    assert acl.rt.synchronize_stream_with_timeout(stream, 10) == 507000
    assert acl.rt.destroy_stream(stream) == 0


def test_a_hung_copy_hangs_its_stream(ctx: int) -> None:
    stream, _ = acl.rt.create_stream()
    host, _ = acl.rt.malloc_host(64)
    set_faults("rt.memcpy_async:hang:1")
    assert acl.rt.memcpy_async(malloc(64), 64, host, 64, H2D, stream) == 0
    assert acl.rt.synchronize_stream_with_timeout(stream, 100) == 507046
    assert acl.rt.destroy_stream(stream) == 0


def test_finalize_and_process_exit_are_not_blocked_by_a_hang(om_static: Path) -> None:
    code = (
        "import sys, threading\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from emulator_helpers import model_datasets\n"
        "from ge_python_backend.emulator import acl\n"
        "acl.init(); acl.rt.set_device(0)\n"
        "ctx, _ = acl.rt.get_context()\n"
        f"model_id, _ = acl.mdl.load_from_file({str(om_static)!r})\n"
        "desc = acl.mdl.create_desc(); acl.mdl.get_desc(desc, model_id)\n"
        "inputs, outputs = model_datasets(desc)\n"
        "stream, _ = acl.rt.create_stream()\n"
        "acl.mdl.execute_async(model_id, inputs, outputs, stream)\n"
        "def wait():\n"
        "    acl.rt.set_context(ctx); acl.rt.synchronize_stream(stream)\n"
        "threading.Thread(target=wait, daemon=True).start()\n"
        "print(acl.rt.synchronize_stream_with_timeout(stream, 100), flush=True)\n"
        "if sys.argv[1] == 'finalize':\n"
        "    print(acl.finalize(), flush=True)\n"
    )
    for how in ("finalize", "exit"):
        result = subprocess.run(
            [sys.executable, "-c", code, how],
            env={**os.environ, "GE_EMULATOR_FAULTS": "mdl.execute_async:hang:*"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        expected = ["507046", "0"] if how == "finalize" else ["507046"]
        assert result.stdout.split() == expected
