"""Load generator for a model served by Triton (`ge-python-model bench`): closed or open loop.

Closed loop, like perf_analyzer's concurrency mode: at concurrency C, C workers each keep exactly
one request in flight, sending the next as soon as the previous one answers. Each worker is a
thread with a client of its own (`tritonclient.http` clients are gevent based and must not be
shared between threads).

Open loop, like perf_analyzer's request-rate mode: requests are due on a fixed schedule
(`arrival_times`: constant gaps, or a Poisson process's exponential gaps) whatever the answers.
A pool of `max_in_flight` worker threads sends them; a request due while all of them are busy is
dropped and counted, never queued. Latency runs from the request's SCHEDULED time, not from when
a worker got to it, so a client that falls behind shows in the percentiles (coordinated omission).

Per level the result holds every request that completed in the measured window: failures are
counted (with their first messages), never dropped, and latency percentiles are taken over the
successful requests. `search_latency_threshold` finds the highest concurrency or rate whose p99
stays within a bound (perf_analyzer's `--latency-threshold`), doubling and then bisecting.

With a `MetricsProbe` (Triton's metrics endpoint) each level also records what the model's
`ge_*` device counters gained during its measured window, per device: `device_utilization` is the
device busy time gained (`ge_device_busy_seconds_total`) divided by the window's seconds.
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import re
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.client import CONNECTION_ERRORS, TritonClient, TypedArrays, error_text
from ge_python_backend.errors import UserError
from ge_python_backend.progress import Progress

KEPT_ERROR_MESSAGES = 5
CONNECT_TIMEOUT_S = 60.0  # also the longest a request may take before it counts as failed
# The model's device counters read from the metrics endpoint: key -> metric (triton/metrics.py).
DEVICE_METRICS = {
    "busy_seconds": "ge_device_busy_seconds_total",
    "executions": "ge_executions_total",
    "rows": "ge_rows_total",
    "padded_rows": "ge_padded_rows_total",
}
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\S+)?")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_ESCAPED = re.compile(r"\\(.)")  # label values escape backslash, double quote and newline
DeviceCounters = dict[str, dict[str, float]]  # device label -> DEVICE_METRICS key -> value


@dataclass(frozen=True)
class Target:
    """What to load: a model at `url`, the request to send and how many rows one request holds."""

    url: str  # HOST:PORT
    protocol: str  # "http" | "grpc"
    model: str
    inputs: TypedArrays  # name -> (array, Triton data type)
    outputs: Sequence[str]
    rows_per_request: int = 1


@dataclass
class LevelResult:
    """One load level: counts over the measured window and latencies of the successes.

    Closed loop: `concurrency` clients each keep one request in flight. Open loop
    (`request_rate` set): requests were due at `request_rate` per second (`arrival`), at most
    `max_in_flight` at once; `dropped` were due while that many were in flight and never sent,
    and `concurrency` is the most that were in flight at once.
    """

    concurrency: int
    requests: int  # completed in the window: successes and failures (dropped ones not sent)
    errors: int
    seconds: float  # from the start of the window to the last completion (open loop: or its end)
    rows: int  # rows of the successful requests
    p50_ms: float | None
    p90_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    error_messages: list[str] = field(default_factory=list)
    device: DeviceCounters | None = None  # what the device counters gained in the window
    request_rate: float | None = None  # open loop: the offered requests/s; None: closed loop
    arrival: str | None = None  # open loop: an ARRIVALS name
    max_in_flight: int | None = None  # open loop: the pool of senders
    dropped: int = 0  # open loop: due while max_in_flight were in flight, never sent

    @property
    def load(self) -> str:
        """The load shape: "concurrency" (closed loop) or "request_rate" (open loop)."""
        return "concurrency" if self.request_rate is None else "request_rate"

    @property
    def level(self) -> float:
        """What the load was set to: the concurrency, or the offered requests/s."""
        return self.concurrency if self.request_rate is None else self.request_rate

    @property
    def device_utilization(self) -> dict[str, float] | None:
        """Per device: busy seconds gained / the window's seconds (None without metrics)."""
        if self.device is None:
            return None
        return {
            device: gained["busy_seconds"] / self.seconds if self.seconds > 0 else 0.0
            for device, gained in self.device.items()
        }

    @property
    def throughput_rps(self) -> float:
        """Successful requests per second (open loop: the achieved rate)."""
        return (self.requests - self.errors) / self.seconds if self.seconds > 0 else 0.0

    @property
    def rows_per_s(self) -> float:
        """Rows of the successful requests per second."""
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The `--json` entry of this level."""
        return {
            "load": self.load,
            "concurrency": self.concurrency,
            "request_rate": self.request_rate,
            "arrival": self.arrival,
            "max_in_flight": self.max_in_flight,
            "requests": self.requests,
            "errors": self.errors,
            "dropped": self.dropped,
            "throughput_rps": round(self.throughput_rps, 3),
            "rows_per_s": round(self.rows_per_s, 3),
            "p50_ms": _rounded(self.p50_ms),
            "p90_ms": _rounded(self.p90_ms),
            "p95_ms": _rounded(self.p95_ms),
            "p99_ms": _rounded(self.p99_ms),
            "seconds": round(self.seconds, 4),
            "rows": self.rows,
            "error_messages": list(self.error_messages),
            "device_utilization": None
            if self.device_utilization is None
            else {d: round(u, 4) for d, u in self.device_utilization.items()},
            "device_counters": self.device,
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (the smallest value with at least p% of values at or below it)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


def summarize(
    concurrency: int,
    latencies_s: Sequence[float],
    errors: int,
    seconds: float,
    rows_per_request: int,
    error_messages: Sequence[str] = (),
) -> LevelResult:
    """A `LevelResult` from the successful latencies (seconds) and the error count (an open-loop
    level sets its own fields on it)."""
    ordered = sorted(latencies_s)
    p50, p90, p95, p99 = (
        percentile(ordered, p) * 1e3 if ordered else None for p in (50, 90, 95, 99)
    )
    return LevelResult(
        concurrency=concurrency,
        requests=len(ordered) + errors,
        errors=errors,
        seconds=seconds,
        rows=len(ordered) * rows_per_request,
        p50_ms=p50,
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        error_messages=list(error_messages),
    )


def metric_samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The samples of metric `name` in Prometheus text format, as (labels, value)."""
    samples = []
    for line in text.splitlines():
        if not line.startswith(name):
            continue
        match = _SAMPLE.fullmatch(line.strip())
        if match is None or match.group(1) != name:
            continue
        labels = {k: _ESCAPED.sub(_unescape, v) for k, v in _LABEL.findall(match[2] or "")}
        samples.append((labels, float(match.group(3))))
    return samples


def _unescape(match: re.Match[str]) -> str:
    return "\n" if match[1] == "n" else match[1]


def device_counters(text: str, model: str) -> DeviceCounters:
    """Per device label, the model's `DEVICE_METRICS` (summed over versions and instances)."""
    counters: DeviceCounters = {}
    for key, name in DEVICE_METRICS.items():
        for labels, value in metric_samples(text, name):
            if labels.get("model") == model:
                device = counters.setdefault(
                    labels.get("device", ""), dict.fromkeys(DEVICE_METRICS, 0.0)
                )
                device[key] += value
    return counters


def counters_gained(before: DeviceCounters, after: DeviceCounters) -> DeviceCounters:
    """What each device's counters gained from `before` to `after`."""
    zero = dict.fromkeys(DEVICE_METRICS, 0.0)
    return {
        device: {key: round(values[key] - before.get(device, zero)[key], 6) for key in values}
        for device, values in sorted(after.items())
    }


def metrics_url(url: str) -> str:
    """Triton's metrics endpoint: `HOST:PORT`, or a URL; the path defaults to /metrics."""
    full = url if "://" in url else f"http://{url}"
    parts = urllib.parse.urlsplit(full)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UserError(
            f"--metrics-url {url!r} must be HOST:PORT or an http(s) URL, e.g. "
            "http://127.0.0.1:8002/metrics"
        )
    return parts._replace(path=parts.path if parts.path not in ("", "/") else "/metrics").geturl()


class MetricsProbe:
    """Reads a model's device counters from Triton's metrics endpoint."""

    def __init__(self, url: str, model: str) -> None:
        self.url = metrics_url(url)
        self.model = model

    def read(self) -> DeviceCounters:
        """The model's counters now; UserError if unreachable or the model has none."""
        return self.counters(self.fetch())

    def fetch(self) -> str:
        """The metrics endpoint's text now; UserError if unreachable."""
        try:
            with urllib.request.urlopen(self.url, timeout=CONNECT_TIMEOUT_S) as response:
                return str(response.read().decode())
        except CONNECTION_ERRORS as exc:
            raise UserError(f"cannot read metrics at {self.url}: {error_text(exc)}") from None

    def counters(self, text: str) -> DeviceCounters:
        """The model's counters in the metrics `text`; UserError if it has none."""
        counters = device_counters(text, self.model)
        if not counters:
            raise UserError(
                f"the metrics at {self.url} have no {DEVICE_METRICS['busy_seconds']} for model "
                f"{self.model!r}: is it served by ge-python-backend's model.py?"
            )
        return counters


class _Phase:
    """One closed-loop run: a budget of requests or a deadline, shared by the workers.

    `ready` is passed by every worker and the main thread; the last to arrive starts the clock.
    """

    def __init__(self, parties: int, requests: int | None, duration: float | None) -> None:
        self._lock = threading.Lock()
        self._left = requests
        self._duration = duration
        self.started = 0.0
        self.deadline = math.inf
        self.ready = threading.Barrier(parties, action=self._start)

    def _start(self) -> None:
        self.started = time.perf_counter()
        if self._duration is not None:
            self.deadline = self.started + self._duration

    def take(self) -> bool:
        """Whether a worker may send one more request."""
        if self._left is None:
            return time.perf_counter() < self.deadline
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True


class _Worker:
    """A thread with its own client; per phase its latencies, errors and last completion."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.latencies: list[float] = []
        self.errors = 0
        self.messages: list[str] = []
        self.finished = 0.0
        self.failure: BaseException | None = None

    def reset(self) -> None:
        self.latencies, self.errors, self.messages, self.finished = [], 0, [], 0.0

    def run(self, phases: Sequence[_Phase], done: threading.Barrier) -> None:
        try:
            with _client(self.target) as send:
                for phase in phases:
                    phase.ready.wait()
                    self._loop(phase, send)
                    done.wait()  # the main thread reads and resets the counts after this
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:
            self.failure = exc
            for barrier in (*(p.ready for p in phases), done):
                barrier.abort()

    def _loop(self, phase: _Phase, send: Callable[[], None]) -> None:
        while phase.take():
            self.attempt(send, time.perf_counter())

    def attempt(self, send: Callable[[], None], start: float) -> None:
        """Send once; a success's latency runs from `start` (perf_counter seconds)."""
        try:
            send()
        except Exception as exc:
            self.errors += 1
            if len(self.messages) < KEPT_ERROR_MESSAGES:
                self.messages.append(error_text(exc))
        else:
            self.latencies.append(time.perf_counter() - start)
        self.finished = time.perf_counter()

    def serve(
        self,
        due: queue.SimpleQueue[float | None],
        ready: threading.Barrier,
        answered: Callable[[], None],
    ) -> None:
        """Open loop: send each scheduled time taken from `due` until None, calling
        `answered` after each."""
        try:
            with _client(self.target) as send:
                ready.wait()
                while (scheduled := due.get()) is not None:
                    self.attempt(send, scheduled)
                    answered()
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:
            self.failure = exc
            ready.abort()


@contextlib.contextmanager
def _client(target: Target) -> Iterator[Callable[[], None]]:
    """A function sending the target's request once (raising on failure) over a fresh client."""
    with TritonClient(target.url, target.protocol, timeout_s=CONNECT_TIMEOUT_S) as client:
        request = client.prepare(target.inputs, target.outputs)
        yield lambda: client.send(target.model, request)


class _Progress:
    """Request counts while a level runs (`progress.Progress`): redrawn every 0.5 s on a
    terminal, then one line per level (warmup included)."""

    def __init__(self, progress: Progress | None) -> None:
        self.progress = progress

    @contextlib.contextmanager
    def showing(
        self,
        label: str,
        workers: Sequence[_Worker],
        planned: str,
        dropped: Callable[[], int] | None = None,
    ) -> Iterator[None]:
        progress = self.progress
        if progress is None or progress.quiet:
            yield
            return
        done = threading.Event()
        started = time.monotonic()

        def line() -> str:
            count = sum(len(w.latencies) + w.errors for w in workers)
            errors = sum(w.errors for w in workers)
            elapsed = time.monotonic() - started
            drops = "" if dropped is None else f", {dropped()} dropped"
            return (
                f"  {label}: {count} requests, {errors} errors{drops}, {elapsed:.1f} s ({planned})"
            )

        def show() -> None:
            while not done.wait(0.5):
                progress.begin(line())

        thread = threading.Thread(target=show, name="bench-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            progress.done(line())


def run_level(
    target: Target,
    concurrency: int,
    *,
    requests: int | None = None,
    duration: float | None = None,
    warmup: int = 0,
    progress: Progress | None = None,
    metrics: MetricsProbe | None = None,
) -> LevelResult:
    """Run `warmup` requests, then measure `requests` requests or `duration` seconds; with
    `metrics`, read the device counters right before and after the measured window."""
    if concurrency < 1:
        raise UserError(f"concurrency must be >= 1, got {concurrency}")
    if (requests is None) == (duration is None):
        raise UserError("give either a number of requests or a duration per level")
    if (requests is not None and requests < 1) or (duration is not None and duration <= 0):
        raise UserError("the requests per level and the duration must be positive")
    parties = concurrency + 1  # the workers and this thread
    phases = [_Phase(parties, warmup, None)] if warmup > 0 else []
    measured = _Phase(parties, requests, duration)
    phases.append(measured)
    done = threading.Barrier(parties)
    workers = [_Worker(target) for _ in range(concurrency)]
    threads = [
        threading.Thread(target=w.run, args=(phases, done), name=f"bench-{i}", daemon=True)
        for i, w in enumerate(workers)
    ]
    for thread in threads:
        thread.start()
    planned = f"{requests} requests" if requests is not None else f"{duration:g} s"
    show = _Progress(progress)
    before = after = None
    try:
        for phase in phases:
            warming = phase is not measured
            label = f"concurrency {concurrency}" + (" (warmup)" if warming else "")
            if metrics is not None and not warming:
                before = metrics.read()  # the workers wait at the barrier: nothing in flight
            _wait(phase.ready, workers, CONNECT_TIMEOUT_S)
            with show.showing(label, workers, f"{warmup} requests" if warming else planned):
                _wait(done, workers, None)
            if warming:
                for worker in workers:
                    worker.reset()
        if metrics is not None:
            after = metrics.read()
    finally:
        for barrier in (*(p.ready for p in phases), done):
            barrier.abort()
        for thread in threads:
            thread.join()
    latencies = [t for w in workers for t in w.latencies]
    errors = sum(w.errors for w in workers)
    messages = [m for w in workers for m in w.messages][:KEPT_ERROR_MESSAGES]
    finished = max((w.finished for w in workers), default=measured.started)
    result = summarize(
        concurrency,
        latencies,
        errors,
        max(finished - measured.started, 0.0),
        target.rows_per_request,
        messages,
    )
    if before is not None and after is not None:
        result.device = counters_gained(before, after)
    return result


def _wait(barrier: threading.Barrier, workers: Sequence[_Worker], timeout: float | None) -> None:
    """Wait at the barrier; re-raise a worker's failure (e.g. it could not connect)."""
    try:
        barrier.wait(timeout)
    except threading.BrokenBarrierError:
        failure = next((w.failure for w in workers if w.failure is not None), None)
        if failure is not None:
            raise UserError(f"a load worker failed: {error_text(failure)}") from failure
        raise UserError(f"the load workers were not ready within {timeout} s") from None


def run_benchmark(
    target: Target,
    levels: Sequence[int],
    *,
    requests: int | None = None,
    duration: float | None = None,
    warmup: int = 0,
    progress: Progress | None = None,
    metrics: MetricsProbe | None = None,
) -> list[LevelResult]:
    """`run_level` for each concurrency level, in order; progress lines go to `progress`."""
    return [
        run_level(
            target,
            level,
            requests=requests,
            duration=duration,
            warmup=warmup,
            progress=progress,
            metrics=metrics,
        )
        for level in levels
    ]


ARRIVALS = ("constant", "poisson")  # perf_analyzer's --request-distribution values
DEFAULT_ARRIVAL = "constant"  # perf_analyzer's default: every run of a level sends the same load
DEFAULT_MAX_IN_FLIGHT = 64
DRAIN_TIMEOUT_S = CONNECT_TIMEOUT_S + 10.0  # a request fails after CONNECT_TIMEOUT_S


def arrival_times(
    rate: float,
    arrival: str,
    *,
    seed: int = 0,
    count: int | None = None,
    duration: float | None = None,
) -> list[float]:
    """When each request is due, in seconds from the start: the first `count`, or all before
    `duration`. "constant": every 1/rate s from 0; "poisson": a Poisson process of that rate
    (exponential gaps, seeded), the first after one gap."""
    if not rate > 0 or not math.isfinite(rate):
        raise UserError(f"the request rate must be a positive number, got {rate}")
    if arrival not in ARRIVALS:
        raise UserError(f"arrival must be one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if (count is None) == (duration is None):
        raise UserError("give either a number of requests or a duration")
    rng = np.random.default_rng(seed)
    if count is not None:
        if arrival == "constant":
            return [i / rate for i in range(count)]
        return [float(t) for t in np.cumsum(rng.exponential(1 / rate, count))]
    assert duration is not None
    if arrival == "constant":
        return [
            t for t in (i / rate for i in range(math.ceil(rate * duration) + 1)) if t < duration
        ]
    times: list[float] = []
    last = 0.0
    while True:  # draw in chunks of about one second's arrivals until past the duration
        chunk = np.cumsum(rng.exponential(1 / rate, max(16, math.ceil(rate)))) + last
        inside = chunk[chunk < duration]
        times.extend(float(t) for t in inside)
        if len(inside) < len(chunk):
            return times
        last = float(chunk[-1])


class _Pool:
    """Open loop: `max_in_flight` workers taking scheduled times; counts what is in flight."""

    def __init__(self, target: Target, max_in_flight: int) -> None:
        self.workers = [_Worker(target) for _ in range(max_in_flight)]
        self.capacity = max_in_flight
        self.in_flight = self.peak = self.dropped = 0
        self._settled = threading.Condition()
        self._due: queue.SimpleQueue[float | None] = queue.SimpleQueue()
        self.ready = threading.Barrier(max_in_flight + 1)
        self.threads = [
            threading.Thread(
                target=w.serve,
                args=(self._due, self.ready, self._answered),
                daemon=True,
                name=f"bench-rate-{i}",
            )
            for i, w in enumerate(self.workers)
        ]

    def _answered(self) -> None:
        with self._settled:
            self.in_flight -= 1
            if self.in_flight == 0:
                self._settled.notify_all()

    def send(self, schedule: Sequence[float]) -> float:
        """Hand each request to a worker at its time (drop it if all are busy), wait for the
        answers; the clock's start (perf_counter seconds)."""
        start = time.perf_counter()
        for offset in schedule:
            due = start + offset
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            with self._settled:
                if self.in_flight >= self.capacity:
                    self.dropped += 1
                    continue
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
            self._due.put(due)
        with self._settled:
            settled = self._settled.wait_for(lambda: self.in_flight == 0, DRAIN_TIMEOUT_S)
        if not settled:
            self._raise_failure(
                f"{self.in_flight} requests still in flight {DRAIN_TIMEOUT_S} s "
                "after the last was due"
            )
        return start

    def reset(self) -> None:
        self.peak = self.dropped = 0
        for worker in self.workers:
            worker.reset()

    def _raise_failure(self, otherwise: str) -> None:
        failure = next((w.failure for w in self.workers if w.failure is not None), None)
        if failure is not None:
            raise UserError(f"a load worker failed: {error_text(failure)}") from failure
        raise UserError(otherwise)

    @contextlib.contextmanager
    def running(self) -> Iterator[_Pool]:
        for thread in self.threads:
            thread.start()
        try:
            try:
                self.ready.wait(CONNECT_TIMEOUT_S)
            except threading.BrokenBarrierError:
                self._raise_failure(f"the load workers were not ready within {CONNECT_TIMEOUT_S} s")
            yield self
        finally:
            self.ready.abort()
            for _ in self.threads:
                self._due.put(None)
            for thread in self.threads:
                thread.join()


def run_rate_level(
    target: Target,
    rate: float,
    *,
    duration: float | None = None,
    requests: int | None = None,
    arrival: str = DEFAULT_ARRIVAL,
    seed: int = 0,
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    warmup: int = 0,
    progress: Progress | None = None,
    metrics: MetricsProbe | None = None,
) -> LevelResult:
    """Open loop at `rate` requests/s: `warmup` requests at that rate and their answers, then the
    measured schedule of `duration` seconds (or `requests` requests) and its answers. The window
    lasts the schedule, or to the last answer when later; with `metrics`, the device counters
    are read right before and after it."""
    if max_in_flight < 1:
        raise UserError(f"max_in_flight must be >= 1, got {max_in_flight}")
    if warmup < 0:
        raise UserError(f"warmup must be >= 0, got {warmup}")
    if (requests is not None and requests < 1) or (duration is not None and duration <= 0):
        raise UserError("the requests per level and the duration must be positive")
    schedule = arrival_times(rate, arrival, seed=seed, count=requests, duration=duration)
    warming = arrival_times(rate, arrival, seed=seed, count=warmup) if warmup else []
    label = f"{rate:g} requests/s {arrival}"
    planned = f"{requests} requests" if requests is not None else f"{duration:g} s"
    show = _Progress(progress)
    pool = _Pool(target, max_in_flight)
    with pool.running():
        if warming:
            with show.showing(
                f"{label} (warmup)", pool.workers, f"{warmup} requests", lambda: pool.dropped
            ):
                pool.send(warming)
            pool.reset()
        before = metrics.read() if metrics is not None else None
        with show.showing(label, pool.workers, planned, lambda: pool.dropped):
            start = pool.send(schedule)
        after = metrics.read() if metrics is not None else None
    span = duration if duration is not None else (schedule[-1] if schedule else 0.0)
    finished = max((w.finished for w in pool.workers), default=start)
    result = summarize(
        pool.peak,
        [t for w in pool.workers for t in w.latencies],
        sum(w.errors for w in pool.workers),
        max(finished - start, span),
        target.rows_per_request,
        [m for w in pool.workers for m in w.messages][:KEPT_ERROR_MESSAGES],
    )
    result.request_rate, result.arrival = rate, arrival
    result.max_in_flight, result.dropped = max_in_flight, pool.dropped
    if before is not None and after is not None:
        result.device = counters_gained(before, after)
    return result


def concurrency_measure(target: Target, **options: Any) -> Callable[[float], LevelResult]:
    """`run_level(target, concurrency, **options)` as a search's `measure` (the integer search
    passes whole numbers)."""
    return lambda concurrency: run_level(target, int(concurrency), **options)


def rate_measure(target: Target, **options: Any) -> Callable[[float], LevelResult]:
    """`run_rate_level(target, rate, **options)` as a search's `measure`."""
    return lambda rate: run_rate_level(target, rate, **options)


@dataclass
class ThresholdSearch:
    """A latency-threshold search: every level measured, in order, and the highest that met it."""

    threshold_ms: float
    tried: list[LevelResult]
    chosen: LevelResult | None  # None: the lowest level already broke the threshold

    def as_dict(self) -> dict[str, Any]:
        """The `--json` entry: the threshold and the chosen level's index in the results."""
        return {
            "p99_ms": self.threshold_ms,
            "chosen": None if self.chosen is None else self.tried.index(self.chosen),
        }


def meets_threshold(result: LevelResult, threshold_ms: float) -> bool:
    """Whether every request of a level was sent and answered and its p99 is <= the threshold."""
    return (
        result.p99_ms is not None
        and result.errors == 0
        and result.dropped == 0
        and result.p99_ms <= threshold_ms
    )


def search_latency_threshold(
    measure: Callable[[float], LevelResult],
    threshold_ms: float,
    *,
    start: float,
    maximum: float,
    integer: bool,
    resolution: float = 0.0,
) -> ThresholdSearch:
    """The highest level in [start, maximum] that `meets_threshold`: `measure(level)` from
    `start`, doubling while the threshold holds (the last step capped at `maximum`), then
    bisecting between the highest level that met it and the lowest that broke it, until they
    are one apart (`integer`: concurrency, `concurrency_measure`) or closer than `resolution` x
    the lower one (rates, `rate_measure`)."""
    if not threshold_ms > 0:
        raise UserError(f"the latency threshold must be positive, got {threshold_ms} ms")
    if not 0 < start <= maximum:
        raise UserError(f"the search needs 0 < start <= maximum, got {start} and {maximum}")
    if not integer and not resolution > 0:
        raise UserError("a search over rates needs a resolution > 0")
    tried: list[LevelResult] = []
    chosen: LevelResult | None = None
    good: float | None = None
    bad: float | None = None

    def measure_at(level: float) -> None:
        nonlocal chosen, good, bad
        tried.append(measure(level))
        if meets_threshold(tried[-1], threshold_ms):
            chosen, good = tried[-1], level
        else:
            bad = level

    level = start
    measure_at(level)
    while bad is None and level < maximum:
        level = min(level * 2, maximum)
        measure_at(level)
    if good is not None and bad is not None:
        step = 1.0 if integer else 0.0
        while bad - good > max(step, good * resolution):
            measure_at((good + bad) // 2 if integer else (good + bad) / 2)
    return ThresholdSearch(threshold_ms, tried, chosen)


def results_document(
    model: str, results: Sequence[LevelResult], search: ThresholdSearch | None = None
) -> dict[str, Any]:
    """What `--json` writes (with a search: its threshold and chosen level too)."""
    document: dict[str, Any] = {"model": model, "results": [r.as_dict() for r in results]}
    if search is not None:
        document["latency_threshold"] = search.as_dict()
    return document


def write_json(
    path: str | Path,
    model: str,
    results: Sequence[LevelResult],
    search: ThresholdSearch | None = None,
) -> Path:
    """Write `results_document` to `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(results_document(model, results, search), indent=2) + "\n")
    return target


def format_table(results: Sequence[LevelResult]) -> str:
    """A plain-text table, one line per level: closed-loop levels by concurrency, open-loop
    ones by offered rate with the most in flight and the drops; device utilization when it
    was measured."""
    measured = any(r.device is not None for r in results)
    open_loop = any(r.request_rate is not None for r in results)
    first = ["offered/s", "in flight"] if open_loop else ["concurrency"]
    counts = ["requests", "dropped", "errors"] if open_loop else ["requests", "errors"]
    header = " ".join(
        [f"{name:>11}" for name in first]
        + [f"{name:>9}" for name in counts]
        + [f"{name:>10}" for name in ("req/s", "rows/s")]
        + [f"{f'p{p} ms':>8}" for p in (50, 90, 95, 99)]
    )
    lines = [header + ("  device utilization" if measured else "")]
    for r in results:
        rate = "-" if r.request_rate is None else f"{r.request_rate:g}"
        cells = ([rate] if open_loop else []) + [str(r.concurrency)]
        numbers = [r.requests, r.dropped, r.errors] if open_loop else [r.requests, r.errors]
        latencies = (r.p50_ms, r.p90_ms, r.p95_ms, r.p99_ms)
        line = " ".join(
            [f"{cell:>11}" for cell in cells]
            + [f"{n:>9}" for n in numbers]
            + [f"{r.throughput_rps:>10.1f}", f"{r.rows_per_s:>10.1f}"]
            + [f"{_ms(value):>8}" for value in latencies]
        )
        if measured:
            line += "  " + format_utilization(r.device_utilization)
        lines.append(line)
    return "\n".join(lines)


def format_utilization(utilization: Mapping[str, float] | None) -> str:
    """`0.953` for one device, `device 0: 0.95, device 1: 0.93` for several, `-` for none."""
    if not utilization:
        return "-"
    if len(utilization) == 1:
        return f"{next(iter(utilization.values())):.3f}"
    return ", ".join(f"device {d}: {u:.3f}" for d, u in utilization.items())


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def plot(
    series: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    path: str | Path,
    title: str = "",
) -> Path:
    """Throughput and p99 latency against concurrency (or, for open-loop entries, the offered
    request rate), one line per series, side by side.

    Each series is (label, `--json` result entries), drawn in the order of their levels.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    lines = []
    open_loop = any(e.get("request_rate") is not None for _, entries in series for e in entries)
    for label, unordered in series:
        entries = sorted(unordered, key=_plotted_level)
        levels = [_plotted_level(e) for e in entries]
        rps = [e["throughput_rps"] for e in entries]
        p99 = [e["p99_ms"] if e["p99_ms"] is not None else math.nan for e in entries]
        lines.append((levels, rps, p99))
        left.plot(levels, rps, marker="o", label=label)
        right.plot(levels, p99, marker="o", label=label)
    if len(series) <= 2:  # value labels: the higher point's above, the lower one's below
        for axis, index, text in ((left, 1, "{:,.0f}"), (right, 2, "{:.1f}")):
            for line in lines:
                others = [dict(zip(o[0], o[index])) for o in lines if o is not line]
                for x, y in zip(line[0], line[index]):
                    if math.isnan(y):
                        continue
                    below = any(other.get(x, -math.inf) > y for other in others)
                    axis.annotate(
                        text.format(y),
                        (x, y),
                        textcoords="offset points",
                        xytext=(0, -13 if below else 6),
                        ha="center",
                        fontsize=8,
                    )
    every = sorted({_plotted_level(e) for _, entries in series for e in entries})
    for axis, ylabel, heading in (
        (left, "requests / s", "Throughput (higher is better)"),
        (right, "p99 latency (ms)", "p99 latency (lower is better)"),
    ):
        axis.set_xscale("log", base=2)
        axis.set_xticks(every, [f"{level:g}" for level in every])
        axis.minorticks_off()
        axis.set_xlabel(
            "offered request rate (requests / s)"
            if open_loop
            else "concurrency (requests in flight)"
        )
        axis.set_ylabel(ylabel)
        axis.set_title(heading)
        axis.set_ylim(0, axis.get_ylim()[1] * 1.12)  # room for the value labels
        axis.grid(True, alpha=0.3)
        if len(series) > 1:
            axis.legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def _plotted_level(entry: Mapping[str, Any]) -> float:
    """A `--json` entry's x: its offered request rate (open loop) or its concurrency."""
    rate = entry.get("request_rate")
    return float(entry["concurrency"] if rate is None else rate)
