"""Timing model: `GE_EMULATOR_TIMING="execute_us=2000,execute_us_per_row=250,copy_gbps=0.05"`.

`profile=NAME` starts from a named device profile calibrated from published figures (`PROFILES`,
sources in BENCHMARKS.md); keys given next to it override its values, e.g.
`GE_EMULATOR_TIMING="profile=resnet50-310p3,copy_gbps=5"`.

Each device has three engines (model execution, host-to-device copy, device-to-host copy). A copy
engine is a lock held while the work runs and then while sleeping the rest of its modelled time:
copies in one direction serialize, the engines overlap. The execute engine (the AI Core) is
shared instead (`shared_engine`): tasks of different streams interleave on it at the granularity
of a kernel (GE's stream allocator design: "tasks between different streams can execute in
parallel"), so executions of several streams take it in turns of `SLICE_S` of device time, each
progressing at its share of the rate, and a long execution delays another by its share, not by
its whole length (in this process the turns go first come, first served; between processes the
engine file's lock decides, which may keep one process's turns together). Execution takes
`execute_us + rows * execute_us_per_row` microseconds (rows = the batch of the selected gear, or
dim 0 of a static model's first input); a copy takes `bytes / (copy_gbps * 1e9)` seconds, or as
long as the work really took if that is longer (an execution: its device time). A memset
(`acl.rt.memset`, `memset_async`) writes device memory at the device's memory bandwidth,
`bytes / (memset_gbps * 1e9)` seconds of its stream's device time, holding no engine (whether it
contends with copies on a device is UNCONFIRMED). Without a spec
nothing sleeps, but the copy engines' locks still serialize copies on a device (of this process);
executions run side by side.

DVPP (`acl.media`): a JPEGD decode or VPC job holds the chip's engine (`jpegd`, `vpc`) for
pixels / 1080p / `*_chip_fps` seconds and its stream for pixels / 1080p / `*_channel_fps`
(`channel`): one stream (a channel, in the pages' words) runs at the channel rate, many together
at most at the chip's (the shape of CANN's JPEGD and VPC performance pages). The job's own work
runs on its channel, outside the chip's engine: channels decode side by side, and a long decode
holds neither the VPC nor the execute engine.

With a spec the engines are the host's, shared by every emulator process like a real NPU is by
every process that sets it (Triton's stubs are one process per instance): each (device, engine)
is a file in `GE_EMULATOR_HOST_DIR` (default: `ge-emulator-<uid>` in /dev/shm, else in the temp
directory; read when the spec is installed), locked with `fcntl.flock` while the engine is held
(inside a process a thread lock comes first: flock does not exclude threads sharing one open
file) and holding the engine's `free_at` (8 bytes). The kernel drops a dead process's flock; its
last `free_at` is in the past, since a holder sleeps until its work's end before releasing. One
device time is possible because `time.perf_counter` is CLOCK_MONOTONIC on Linux: system-wide,
the same in every process; a `free_at` later than now is not from this clock (a directory kept
across a reboot) and counts as now.

Device time: work starts when the device could have started it, not when the emulator's thread
got to it: at the latest of its submission, the end of its stream's previous work (and of the
events it waits for) and the end of the engine's previous work (`begin_work`, `reach`). It ends
its modelled time later; the engine sleeps until then. So a late wake-up of a worker thread on a
loaded host neither idles the modelled device nor stretches its work, as on a device that starts
queued work the moment it can. Events are stamped with this device time.

`start_trace()` / `stop_trace()` record when each engine was busy (device, engine, start, end in
`time.perf_counter` seconds of device time), in this process: the benchmarks draw stream
timelines from them.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import functools
import math
import os
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from ge_python_backend.environment import EMULATOR_HOST_DIR, EMULATOR_TIMING
from ge_python_backend.processes import private_directory

ENV = EMULATOR_TIMING.name
HOST_DIR_ENV = EMULATOR_HOST_DIR.name
FIELDS = (
    "execute_us",
    "execute_us_per_row",
    "copy_gbps",
    "memset_gbps",
    "jpegd_channel_fps",
    "jpegd_chip_fps",
    "vpc_channel_fps",
    "vpc_chip_fps",
)
RATES = (
    "copy_gbps",
    "memset_gbps",
    "jpegd_channel_fps",
    "jpegd_chip_fps",
    "vpc_channel_fps",
    "vpc_chip_fps",
)
FRAME_1080P = 1920 * 1080  # the pixels DVPP's performance pages count as one frame


@dataclass(frozen=True)
class Timing:
    """The modelled costs (all zero: no sleeping)."""

    execute_us: float = 0.0
    execute_us_per_row: float = 0.0
    copy_gbps: float = math.inf
    memset_gbps: float = math.inf  # device memory written by a memset
    # DVPP: 1080p frames per second of one channel, and of the chip (all channels together)
    jpegd_channel_fps: float = math.inf
    jpegd_chip_fps: float = math.inf
    vpc_channel_fps: float = math.inf
    vpc_chip_fps: float = math.inf

    @functools.cached_property
    def sleeps(self) -> bool:
        """Whether any work is modelled to take time (then streams run on worker threads)."""
        rates = (getattr(self, name) for name in RATES)
        return bool(self.execute_us or self.execute_us_per_row or any(r != math.inf for r in rates))

    def execute_seconds(self, rows: int) -> float:
        """Modelled time of one model execution."""
        return (self.execute_us + rows * self.execute_us_per_row) / 1e6

    def copy_seconds(self, nbytes: int) -> float:
        """Modelled time of one copy."""
        return nbytes / (self.copy_gbps * 1e9)

    def memset_seconds(self, nbytes: int) -> float:
        """Modelled time of one memset of device memory."""
        return nbytes / (self.memset_gbps * 1e9)

    def dvpp_seconds(self, unit: str, pixels: int) -> tuple[float, float]:
        """Modelled (channel, chip) time of one JPEGD (`unit` "jpegd") or VPC ("vpc") job of
        `pixels` pixels: a channel holds its job for pixels / 1080p / channel rate, the chip's
        engine for pixels / 1080p / chip rate (so n channels reach n x the channel rate up to
        the chip's)."""
        frames = pixels / FRAME_1080P
        channel, chip = getattr(self, f"{unit}_channel_fps"), getattr(self, f"{unit}_chip_fps")
        return frames / channel, frames / chip


# Named device profiles; BENCHMARKS.md ("Device profiles") gives the sources.
PROFILES = {
    # ResNet-50 fp16 on Atlas 300I Pro (Ascend 310P3): 2.46 ms at batch 1 and 15.06 ms at
    # batch 64 (4,250 images/s); copies at 10 GB/s, a third of PCIe 4.0 x16's 31.5 GB/s;
    # memsets at the chip's LPDDR4X bandwidth, 204.8 GB/s.
    "resnet50-310p3": Timing(
        execute_us=2260.0, execute_us_per_row=200.0, copy_gbps=10.0, memset_gbps=204.8
    ),
    # DVPP per SoC, combined with a model's figures by keys (CANN 6.0.1 JPEGD and VPC
    # performance pages aclcppdevg_03_0187, _0279, _0233): Ascend 310 JPEGD 128 fps on one
    # channel, 256 on two or more (its VPC rates were not read: not modelled); 310P JPEGD
    # n x 128 up to 16 channels (2048), VPC n x 360 up to 12 (4320), 1080p YUV420SP.
    "dvpp-310": Timing(jpegd_channel_fps=128.0, jpegd_chip_fps=256.0),
    "dvpp-310p3": Timing(
        jpegd_channel_fps=128.0, jpegd_chip_fps=2048.0, vpc_channel_fps=360.0, vpc_chip_fps=4320.0
    ),
}
FORMAT = (
    "comma-separated key=value pairs with keys execute_us, execute_us_per_row (microseconds, "
    ">= 0), copy_gbps, memset_gbps (GB/s, > 0), jpegd_channel_fps, jpegd_chip_fps, "
    "vpc_channel_fps, vpc_chip_fps (1080p frames/s, > 0) and profile (one of "
    f"{', '.join(PROFILES)}: its values, the other keys override them), e.g. "
    '"execute_us=2000,execute_us_per_row=250,copy_gbps=0.05" or "profile=resnet50-310p3"'
)


_FREE_AT = struct.Struct("<d")  # an engine file's content
SLICE_S = 0.002  # a turn on a shared engine, in device time (about a kernel's)


class _Turns:
    """A lock taken first come, first served (`threading.Lock` lets the thread that released it
    take it again at once: turns would not alternate). The holder hands it straight to the
    longest waiter, waking that thread alone."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._waiting: collections.deque[Any] = collections.deque()  # each waiter's baton
        self._held = False

    def __enter__(self) -> None:
        with self._guard:
            if not self._held:
                self._held = True
                return
            baton = threading.Lock()
            baton.acquire()
            self._waiting.append(baton)
        baton.acquire()  # released by the holder that hands over its turn

    def __exit__(self, *_exc: object) -> None:
        with self._guard:
            if self._waiting:
                self._waiting.popleft().release()  # still held: by the waiter now
            else:
                self._held = False


class _Engine:
    """One engine of one device: `lock` is held while busy; `free_at` is when its last work in
    this process ended; `file` is the host's engine file (opened in `host_file`)."""

    def __init__(self, device_id: int, name: str) -> None:
        self.device_id = device_id
        self.name = name
        self.lock = threading.Lock()  # an exclusive engine's
        self.turns = _Turns()  # a shared engine's
        self.free_at = 0.0
        self.file: int | None = None
        self.directory = ""

    def host_file(self, directory: str) -> int:
        """The descriptor of this engine's file in `directory` (opened once; callers hold
        `lock`)."""
        if self.file is None or self.directory != directory:
            if self.file is not None:
                os.close(self.file)
            path = engine_path(directory, self.device_id, self.name)
            self.file = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            self.directory = directory
        return self.file


def engine_path(directory: str, device_id: int, name: str) -> str:
    """The file of a device's engine on the host of `directory`."""
    return os.path.join(directory, f"device{device_id}-{name}")


def host_directory() -> str:
    """The directory of the host's shared engines (`GE_EMULATOR_HOST_DIR`, else one per user),
    created if missing and checked to be this user's alone (`processes.private_directory`:
    another user who made it first could plant links that turn our writes onto their target)."""
    directory = os.environ.get(HOST_DIR_ENV)
    if not directory:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
        directory = os.path.join(base, f"ge-emulator-{os.getuid()}")
    try:
        return private_directory(directory)
    except OSError as error:
        raise ValueError(f"{HOST_DIR_ENV}: cannot use {directory!r}: {error}") from error


_lock = threading.Lock()
_timing = Timing()
_host_dir: str | None = None  # the shared engines' directory while a spec sleeps
_engines: dict[tuple[int, str], _Engine] = {}
_trace: list[tuple[int, str, float, float]] | None = None
_work = threading.local()  # .at: the device time reached by the stream work this thread runs


def parse(spec: str) -> Timing:
    """Parse a timing spec; raises ValueError naming the bad entry and the format."""
    values: dict[str, float] = {}
    profile: Timing | None = None
    for entry in spec.split(","):
        if not entry.strip():
            continue
        key, sep, text = (p.strip() for p in entry.partition("="))
        if key == "profile" and sep and profile is None and text in PROFILES:
            profile = PROFILES[text]
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        valid = value > 0 if key in RATES else value >= 0
        if not sep or key not in FIELDS or key in values or not valid or math.isinf(value):
            raise ValueError(f"{ENV}: bad entry {entry.strip()!r}; expected {FORMAT}")
        values[key] = value
    return replace(profile or Timing(), **values)


def set_timing(spec: str | None) -> None:
    """Install a timing spec (None or "" turns the sleeping off); a spec that sleeps shares the
    engines of `host_directory()` with the host's other processes."""
    global _timing, _host_dir
    timing = parse(spec or "")
    directory = host_directory() if timing.sleeps else None
    with _lock:
        _timing, _host_dir = timing, directory


def load_from_env() -> None:
    """Install the spec from `GE_EMULATOR_TIMING` (no sleeping when unset)."""
    set_timing(os.environ.get(ENV))


def start_trace() -> None:
    """Start recording engine spans (forgets an earlier recording)."""
    global _trace
    with _lock:
        _trace = []


def stop_trace() -> list[tuple[int, str, float, float]]:
    """Stop recording; the (device, engine, start, end) spans since `start_trace`, by start."""
    global _trace
    with _lock:
        spans, _trace = _trace or [], None
    return sorted(spans, key=lambda span: span[2])


def current() -> Timing:
    """The installed timing model."""
    return _timing


def begin_work(earliest: float) -> float | None:
    """This thread starts running stream work that the device could start at `earliest`
    (perf_counter seconds); returns what `end_work` needs to restore (work may nest: a lazy
    wait runs another stream's work)."""
    outer: float | None = getattr(_work, "at", None)
    _work.at = earliest
    return outer


def reach(moment: float) -> None:
    """The running stream work cannot go on before device time `moment` (an event it waits for);
    nothing outside stream work."""
    at: float | None = getattr(_work, "at", None)
    if at is not None:
        _work.at = max(at, moment)


def work_time() -> float:
    """The device time the running stream work has reached (now, outside stream work)."""
    at: float | None = getattr(_work, "at", None)
    return time.perf_counter() if at is None else at


def end_work(outer: float | None) -> float:
    """The running stream work ended; the device time it reached."""
    reached: float = _work.at
    _work.at = outer
    return reached


def _unit(device_id: int, name: str) -> tuple[_Engine, str | None]:
    """The device's engine `name`, and the host's directory of engine files (None: no spec)."""
    with _lock:
        unit = _engines.get((device_id, name))
        if unit is None:
            unit = _engines[(device_id, name)] = _Engine(device_id, name)
        return unit, _host_dir


@contextlib.contextmanager
def _claimed(
    unit: _Engine, directory: str | None, guard: Any
) -> Iterator[tuple[float, Callable[[float], None]]]:
    """Hold `unit` (`guard` in this process, then the host's engine file, if any): when its last
    work ended, and the function that records when this work ends."""
    with guard:
        shared = None if directory is None else unit.host_file(directory)
        if shared is None:
            free_at = unit.free_at
        else:
            fcntl.flock(shared, fcntl.LOCK_EX)
            stored = os.pread(shared, _FREE_AT.size, 0)
            free_at = min(_FREE_AT.unpack(stored)[0], time.perf_counter()) if stored else 0.0

        def ends(end: float) -> None:
            unit.free_at = end
            if shared is not None:
                os.pwrite(shared, _FREE_AT.pack(end), 0)

        try:
            yield free_at, ends
        finally:
            if shared is not None:
                fcntl.flock(shared, fcntl.LOCK_UN)


def _sleep_until(end: float) -> None:
    remaining = end - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


def _traced(device_id: int, name: str, start: float, end: float) -> None:
    trace = _trace
    if trace is not None:
        trace.append((device_id, name, start, end))


@contextlib.contextmanager
def engine(device_id: int, name: str, seconds: float) -> Iterator[None]:
    """Hold the device's `name` engine for the body and until its modelled `seconds` have passed
    in device time (see the module docstring); the running work reaches the end."""
    unit, directory = _unit(device_id, name)
    with _claimed(unit, directory, unit.lock) as (free_at, ends):
        start = max(work_time(), free_at)
        began = time.perf_counter()
        yield
        end = start + max(seconds, time.perf_counter() - began)
        _sleep_until(end)
        ends(end)
    reach(end)
    _traced(device_id, name, start, end)


@contextlib.contextmanager
def shared_engine(device_id: int, name: str, seconds: float) -> Iterator[None]:
    """The device's `name` engine shared by every stream (the AI Core): the body (the emulator's
    own work) runs outside it, then the work takes its `seconds` of device time (or as long as
    the body really took, if longer) in turns of `SLICE_S` with the other work waiting for it;
    the running work reaches the end of its last turn."""
    unit, directory = _unit(device_id, name)
    began = time.perf_counter()
    yield
    remaining = max(seconds, time.perf_counter() - began)
    turn = SLICE_S if current().sleeps else remaining  # (nothing sleeps: no turns to take)
    first: float | None = None
    end = work_time()  # the work's own device time, turn after turn
    while True:
        with _claimed(unit, directory, unit.turns) as (free_at, ends):
            start = max(end, free_at)
            piece = min(turn, remaining)
            end = start + piece
            _sleep_until(end)
            ends(end)
        first = start if first is None else first
        remaining -= piece
        if remaining <= 1e-12:
            break
    reach(end)
    assert first is not None
    _traced(device_id, name, first, end)


@contextlib.contextmanager
def channel(seconds: float) -> Iterator[None]:
    """The running stream work takes at least `seconds` of device time from where it is now
    (a DVPP channel's rate); sleeps the rest after the body."""
    start = work_time()
    yield
    end = max(start + seconds, work_time())
    remaining = end - time.perf_counter()
    if remaining > 0 and math.isfinite(remaining):
        time.sleep(remaining)
    reach(end)


def _forget_engines_after_fork() -> None:
    """A forked child gets engines of its own: its copies of the parent's locks may be held, and
    its inherited descriptors share the parent's flocks."""
    global _lock
    for unit in _engines.values():
        if unit.file is not None:
            os.close(unit.file)
    _engines.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_engines_after_fork)
