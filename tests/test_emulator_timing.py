"""Emulated device timing (`GE_EMULATOR_TIMING` / `set_timing`): engines serialize and overlap.

The machine is shared and noisy (the tests run in parallel): what overlaps or serializes is read
from the engines' spans of device time (`timing.start_trace`), which a late thread on a busy host
does not stretch; wall times are only checked from below (a modelled wait is never shorter).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import PIPE

import pytest
from emulator_helpers import H2D, malloc, model_datasets

from ge_python_backend.emulator import acl, set_timing, timing
from ge_python_backend.emulator.timing import PROFILES, engine_path, parse

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


def traced(*jobs: Callable[[], None]) -> list[tuple[int, str, float, float]]:
    """Run every job in its own thread; the engines' (device, engine, start, end) spans of
    device time meanwhile, by start."""
    timing.start_trace()
    wall_time(*jobs)
    return timing.stop_trace()


def overlap(first: tuple[int, str, float, float], second: tuple[int, str, float, float]) -> bool:
    """Whether two spans (`traced`) were busy at the same time."""
    return first[2] < second[3] and second[2] < first[3]


def test_executes_on_one_device_share_its_ai_core(ctx: int, om_static: Path) -> None:
    # in turns of SLICE_S: together they take as long as one after the other, each in progress
    # while the other is (a long execution delays another by its share, not by its length)
    runner = Runner(om_static)
    runner.execute()  # warm up onnxruntime
    set_timing("execute_us=300000")
    assert wall_time(runner.execute, runner.execute) >= 0.55
    first, second = traced(runner.execute, runner.execute)
    assert overlap(first, second)
    assert max(first[3], second[3]) - min(first[2], second[2]) == pytest.approx(0.6, abs=0.01)
    long = threading.Thread(target=runner.execute)
    long.start()
    time.sleep(0.05)
    set_timing("execute_us=20000")  # a short execution beside the long one
    started = time.monotonic()
    runner.execute()
    short_s = time.monotonic() - started
    long.join()
    assert short_s < 0.1  # its 20 ms at half the rate, not after the 300 ms one


def test_executes_on_two_devices_overlap(ctx: int, om_static: Path) -> None:
    first = Runner(om_static)
    assert acl.rt.set_device(1) == 0
    second = Runner(om_static)
    first.execute()
    second.execute()
    set_timing("execute_us=300000")
    spans = traced(first.execute, second.execute)
    assert sorted(span[0] for span in spans) == [0, 1]
    assert overlap(*spans)


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
    executed, copied = sorted(traced(runner.execute, copy), key=lambda span: span[1])
    assert (executed[1], copied[1]) == ("execute", "h2d") and overlap(executed, copied)
    assert not overlap(*traced(copy, copy))
    assert wall_time(copy, copy) >= 0.55


def test_execute_time_grows_with_the_rows_of_the_gear(ctx: int, om_dynamic_batch: Path) -> None:
    runner = Runner(om_dynamic_batch)
    runner.set_batch(1)
    runner.execute()
    set_timing("execute_us=0,execute_us_per_row=50000")
    assert wall_time(runner.execute) >= 0.045
    ((_, _, start, end),) = traced(runner.execute)
    assert end - start == pytest.approx(0.05)  # device time: one row
    runner.set_batch(8)
    assert wall_time(runner.execute) >= 0.38
    ((_, _, start, end),) = traced(runner.execute)
    assert end - start == pytest.approx(0.4)  # eight rows


def test_async_executes_on_two_streams_of_one_device_serialize(ctx: int, om_static: Path) -> None:
    # One load per stream: GE refuses to mix execute and execute_async on one model id and
    # races when one model id runs on two streams (test_emulator_fidelity.py).
    runners = [Runner(om_static) for _ in range(2)]
    streams = [acl.rt.create_stream()[0] for _ in range(2)]
    set_timing("execute_us=250000")
    done = [acl.rt.create_event()[0] for _ in streams]
    start = time.monotonic()
    for runner, stream, event in zip(runners, streams, done):
        inputs, outputs = runner.datasets
        assert acl.mdl.execute_async(runner.model_id, inputs, outputs, stream) == 0
        assert acl.rt.record_event(event, stream) == 0
    # queued, not run: the second execution (behind the first, 0.5 s of device time) has not
    # completed when the calls return (a timeout of 0 only looks)
    assert acl.rt.synchronize_event_with_timeout(done[1], 0) == 507047
    for stream in streams:
        assert acl.rt.synchronize_stream(stream) == 0
    assert time.monotonic() - start >= 0.45
    for event in done:
        assert acl.rt.destroy_event(event) == 0
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
    assert resnet.memset_seconds(204_800_000) == pytest.approx(1e-3)  # 204.8 GB/s LPDDR4X
    assert parse("copy_gbps=5,profile=resnet50-310p3") == parse(
        "execute_us=2260,execute_us_per_row=200,copy_gbps=5,memset_gbps=204.8"
    )
    assert parse(" profile = resnet50-310p3 , execute_us_per_row=0").execute_seconds(8) == 2.26e-3


@pytest.mark.parametrize(
    "spec", ["profile=resnet50", "profile", "profile=resnet50-310p3,profile=resnet50-310p3"]
)
def test_unknown_or_repeated_profiles_raise_value_error_listing_the_profiles(spec: str) -> None:
    with pytest.raises(ValueError, match="profile \\(one of resnet50-310p3"):
        parse(spec)


# A process executing the static model COUNT times on DEVICE under its GE_EMULATOR_TIMING: it
# loads and warms up, prints "ready", waits for a line on stdin, then prints the perf_counter
# seconds (one clock for every process) at which its executions started and ended.
EXECUTOR = """
import sys, time
from emulator_helpers import model_datasets
from ge_python_backend.emulator import acl
om, device, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
assert acl.init() == 0 and acl.rt.set_device(device) == 0
model_id, ret = acl.mdl.load_from_file(om)
desc = acl.mdl.create_desc()
assert ret == 0 and acl.mdl.get_desc(desc, model_id) == 0
datasets = model_datasets(desc)
assert acl.mdl.execute(model_id, *datasets) == 0
print("ready", flush=True)
sys.stdin.readline()
start = time.perf_counter()
for _ in range(count):
    assert acl.mdl.execute(model_id, *datasets) == 0
print(start, time.perf_counter(), flush=True)
"""
EXECUTE_S = 0.1
EXECUTIONS = 4


def executor(om: Path, device: int, host: Path, timing_spec: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "GE_EMULATOR_TIMING": timing_spec,
        "GE_EMULATOR_HOST_DIR": str(host),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path]),
    }
    args = [sys.executable, "-c", EXECUTOR, str(om), str(device), str(EXECUTIONS)]
    return subprocess.Popen(args, env=env, stdin=PIPE, stdout=PIPE, text=True)


def together(om: Path, *placements: tuple[int, Path]) -> list[tuple[float, float]]:
    """When each process, one per (device, host directory) started together, began and ended
    its executions (`time.perf_counter` seconds, one clock for every process)."""
    processes = [
        executor(om, device, host, f"execute_us={EXECUTE_S * 1e6:g}") for device, host in placements
    ]
    try:
        for process in processes:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        spans = [process.communicate(timeout=30)[0].split() for process in processes]
    finally:
        for process in processes:
            process.kill()
            process.wait()
    assert all(process.returncode == 0 for process in processes)
    return [(float(start), float(end)) for start, end in spans]


def test_processes_on_one_device_of_a_host_serialize(om_static: Path, tmp_path: Path) -> None:
    spans = together(om_static, (0, tmp_path), (0, tmp_path))
    # from the first start to the last end: the two processes' executions one after another
    assert max(end for _, end in spans) - min(start for start, _ in spans) >= 1.7 * (
        EXECUTIONS * EXECUTE_S
    )


def test_processes_on_two_devices_or_two_hosts_overlap(om_static: Path, tmp_path: Path) -> None:
    for placements in (((0, tmp_path), (1, tmp_path)), ((0, tmp_path / "a"), (0, tmp_path / "b"))):
        (first_start, first_end), (second_start, second_end) = together(om_static, *placements)
        # executing at the same time: each began before the other ended
        assert first_start < second_end and second_start < first_end, placements


def test_a_killed_process_holding_the_device_does_not_block_it(
    om_static: Path, tmp_path: Path
) -> None:
    # Killed while its 60 s execution holds the engine: the kernel drops its flock, and the
    # free_at it left (from its warm-up) is in the past.
    held_s = 60
    holder = executor(om_static, 0, tmp_path, f"execute_us={held_s * 1_000_000}")
    try:
        path = Path(engine_path(str(tmp_path), 0, "execute"))
        deadline = time.monotonic() + 30
        while not held(path):
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
    finally:
        holder.kill()
        holder.communicate()
    ((start, end),) = together(om_static, (0, tmp_path))
    assert end - start < held_s / 2  # not behind the killed process's execution


def held(path: Path) -> bool:
    """Whether a process holds the engine file's lock."""
    if not path.exists():
        return False
    with path.open("rb") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(file, fcntl.LOCK_UN)
        return False


def test_the_default_host_is_one_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(timing.HOST_DIR_ENV)
    assert timing.host_directory() == f"/dev/shm/ge-emulator-{os.getuid()}"


def test_a_host_directory_that_is_not_this_users_alone_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user who made the directory first (with a link in it to a file of ours), a
    directory others may enter, or a link in the directory's place: each is refused before a
    file in it is opened, and the link's target is left as it was."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o777)
    planted.chmod(0o777)
    (planted / "device0-execute").symlink_to(victim)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "mine")
    (tmp_path / "mine").mkdir(mode=0o700)
    cases = {planted: "mode drwxrwxrwx", link: "mode lrwxrwxrwx"}
    if os.getuid() == 0:  # a directory of another user (uid 65534: nobody), private to them
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        cases[foreign] = "owner uid 65534"
    for directory, why in cases.items():
        monkeypatch.setenv(timing.HOST_DIR_ENV, str(directory))
        with pytest.raises(ValueError, match=f"is not a private directory of this user .*{why}"):
            timing.host_directory()
    assert victim.read_bytes() == b"precious"
