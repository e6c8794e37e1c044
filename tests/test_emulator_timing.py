"""Emulated device timing (`GE_EMULATOR_TIMING` / `set_timing`): engines serialize and overlap.

The machine is shared and noisy: the assertions compare against the serial and the overlapped
totals with wide margins, never against tight times.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from emulator_helpers import H2D, malloc, model_datasets

from ge_python_backend.emulator import acl, set_timing, timing
from ge_python_backend.emulator.timing import PROFILES, parse

pytestmark = pytest.mark.usefixtures("clean_acl")


class Runner:
    """A model loaded under the current context with device buffers for every input/output."""

    def __init__(self, om: Path) -> None:
        self.context, _ = acl.rt.get_context()
        self.model_id, ret = acl.mdl.load_from_file(str(om))
        assert ret == 0
        desc = acl.mdl.create_desc()
        assert acl.mdl.get_desc(desc, self.model_id) == 0
        self.datasets = model_datasets(desc)

    def execute(self) -> None:
        assert acl.rt.set_context(self.context) == 0
        assert acl.mdl.execute(self.model_id, *self.datasets) == 0, acl.get_recent_err_msg()

    def set_batch(self, batch: int) -> None:
        assert acl.mdl.set_dynamic_batch_size(self.model_id, self.datasets[0], 1, batch) == 0


def wall_time(*jobs: Callable[[], None]) -> float:
    """Run every job in its own thread; seconds until all finished."""
    threads = [threading.Thread(target=job) for job in jobs]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.monotonic() - start


def test_executes_on_one_device_serialize(ctx: int, om_static: Path) -> None:
    runner = Runner(om_static)
    runner.execute()  # warm up onnxruntime
    set_timing("execute_us=300000")
    assert wall_time(runner.execute, runner.execute) >= 0.55


def test_executes_on_two_devices_overlap(ctx: int, om_static: Path) -> None:
    first = Runner(om_static)
    assert acl.rt.set_device(1) == 0
    second = Runner(om_static)
    first.execute()
    second.execute()
    set_timing("execute_us=300000")
    assert wall_time(first.execute, second.execute) < 0.5


def test_an_h2d_copy_overlaps_an_execute_but_not_another_h2d_copy(
    ctx: int, om_static: Path
) -> None:
    runner = Runner(om_static)
    runner.execute()
    size = 30_000
    data = bytes(size)
    dev = malloc(size)

    def copy() -> None:
        assert acl.rt.set_context(ctx) == 0
        assert acl.rt.memcpy(dev, size, acl.util.bytes_to_ptr(data), size, H2D) == 0

    set_timing("execute_us=300000,copy_gbps=0.0001")  # the copy takes 300 ms
    assert wall_time(runner.execute, copy) < 0.5
    assert wall_time(copy, copy) >= 0.55


def test_execute_time_grows_with_the_rows_of_the_gear(ctx: int, om_dynamic_batch: Path) -> None:
    runner = Runner(om_dynamic_batch)
    runner.set_batch(1)
    runner.execute()
    set_timing("execute_us=0,execute_us_per_row=50000")
    one = wall_time(runner.execute)
    runner.set_batch(8)
    eight = wall_time(runner.execute)
    assert one >= 0.045 and eight >= 0.38
    assert eight > one + 0.2


def test_async_executes_on_two_streams_of_one_device_serialize(ctx: int, om_static: Path) -> None:
    # One load per stream: GE refuses to mix execute and execute_async on one model id and
    # races when one model id runs on two streams (test_emulator_fidelity.py).
    runners = [Runner(om_static) for _ in range(2)]
    streams = [acl.rt.create_stream()[0] for _ in range(2)]
    set_timing("execute_us=250000")
    start = time.monotonic()
    for runner, stream in zip(runners, streams):
        inputs, outputs = runner.datasets
        assert acl.mdl.execute_async(runner.model_id, inputs, outputs, stream) == 0
    assert time.monotonic() - start < 0.2  # queued, not run
    for stream in streams:
        assert acl.rt.synchronize_stream(stream) == 0
    assert time.monotonic() - start >= 0.45
    for stream in streams:
        assert acl.rt.destroy_stream(stream) == 0


def test_queued_work_starts_in_device_time_when_the_work_before_it_ends(
    ctx: int, om_static: Path
) -> None:
    # Stream B's execution waits for stream A's (stream_wait_event). On a device it starts the
    # moment A's ends; the emulator's thread for B wakes up later than that on a busy host, but
    # the device time (events, engine trace) must not count that wake-up as idle.
    runners = [Runner(om_static) for _ in range(2)]
    streams = [acl.rt.create_stream()[0] for _ in range(2)]
    events = {name: acl.rt.create_event()[0] for name in ("a0", "a1", "b0", "b1")}
    set_timing("execute_us=50000")
    timing.start_trace()
    for runner, stream, first, last in zip(runners, streams, ("a0", "b0"), ("a1", "b1")):
        if first == "b0":
            assert acl.rt.stream_wait_event(stream, events["a1"]) == 0
        assert acl.rt.record_event(events[first], stream) == 0
        inputs, outputs = runner.datasets
        assert acl.mdl.execute_async(runner.model_id, inputs, outputs, stream) == 0
        assert acl.rt.record_event(events[last], stream) == 0
    for stream in streams:
        assert acl.rt.synchronize_stream(stream) == 0
    spans = [span for span in timing.stop_trace() if span[1] == "execute"]

    def elapsed_ms(start: str, end: str) -> float:
        ms, ret = acl.rt.event_elapsed_time(events[start], events[end])
        assert ret == 0
        return float(ms)

    assert elapsed_ms("a1", "b0") == 0.0  # no idle gap between the two executions
    assert 49.999 <= elapsed_ms("b0", "b1") < 75.0
    assert 99.999 <= elapsed_ms("a0", "b1") < 150.0
    assert len(spans) == 2 and spans[1][2] == spans[0][3]  # the engine is busy back to back
    for event in events.values():
        assert acl.rt.destroy_event(event) == 0
    for stream in streams:
        assert acl.rt.destroy_stream(stream) == 0


@pytest.mark.parametrize(
    "spec",
    ["execute_us", "execute_us=-1", "copy_gbps=0", "speed=3", "execute_us=1,execute_us=2"],
)
def test_bad_timing_specs_raise_value_error(spec: str) -> None:
    with pytest.raises(ValueError, match="GE_EMULATOR_TIMING: bad entry"):
        set_timing(spec)


def test_a_named_profile_gives_its_calibrated_values_and_keys_override_them() -> None:
    resnet = parse("profile=resnet50-310p3")
    assert resnet == PROFILES["resnet50-310p3"]
    # The published figures it is calibrated from (BENCHMARKS.md, "Device profiles"):
    # 2.456 ms at batch 1, 64 images in 1/4250 * 64 s at batch 64; PCIe copies at 10 GB/s.
    assert resnet.execute_seconds(1) == pytest.approx(2.456e-3, rel=0.01)
    assert resnet.execute_seconds(64) == pytest.approx(64 / 4250, rel=0.01)
    assert resnet.copy_seconds(10**9) == pytest.approx(0.1)
    assert parse("copy_gbps=5,profile=resnet50-310p3") == parse(
        "execute_us=2260,execute_us_per_row=200,copy_gbps=5"
    )
    assert parse(" profile = resnet50-310p3 , execute_us_per_row=0").execute_seconds(8) == 2.26e-3


@pytest.mark.parametrize(
    "spec", ["profile=resnet50", "profile", "profile=resnet50-310p3,profile=resnet50-310p3"]
)
def test_unknown_or_repeated_profiles_raise_value_error_listing_the_profiles(spec: str) -> None:
    with pytest.raises(ValueError, match="profile \\(one of resnet50-310p3"):
        parse(spec)
