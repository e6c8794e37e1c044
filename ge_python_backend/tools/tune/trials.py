"""A trial of `tune`: the load it measures (`LoadFunction`, closed or open loop), the probe that
reads the device counters, the metrics text and Triton's statistics around its window
(`TrialProbe`), what it measured (`Measurement`), and the trial (`Trial`, `winner_of`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ge_python_backend.tools.bench import (
    DEVICE_METRICS,
    DeviceCounters,
    LevelResult,
    MetricsProbe,
    Target,
    metric_samples,
    run_level,
    run_rate_level,
)
from ge_python_backend.tools.tune.space import Candidate

MEMORY_METRIC = "ge_device_memory_bytes"  # one instance's pooled buffers, per device
FREE_MEMORY_METRIC = "ge_device_memory_free_bytes"

# The load a trial measures: target, probe -> the measured window (`bench.run_level`'s result).
LoadFunction = Callable[[Target, MetricsProbe], LevelResult]


def closed_loop(concurrency: int, duration_s: float, warmup: int) -> LoadFunction:
    """`concurrency` clients, each one request in flight, for `duration_s` after `warmup`."""
    return functools.partial(
        _closed_loop, concurrency=concurrency, duration=duration_s, warmup=warmup
    )


def _closed_loop(
    target: Target, metrics: MetricsProbe, *, concurrency: int, duration: float, warmup: int
) -> LevelResult:
    return run_level(target, concurrency, duration=duration, warmup=warmup, metrics=metrics)


def open_loop(
    rate: float,
    duration_s: float,
    warmup: int,
    *,
    arrival: str,
    max_in_flight: int,
    seed: int = 0,
) -> LoadFunction:
    """`rate` requests per second whatever the answers (`bench.run_rate_level`), for
    `duration_s` after `warmup` requests at that rate."""
    return functools.partial(
        _open_loop,
        rate=rate,
        duration=duration_s,
        warmup=warmup,
        arrival=arrival,
        max_in_flight=max_in_flight,
        seed=seed,
    )


def _open_loop(target: Target, metrics: MetricsProbe, **options: Any) -> LevelResult:
    """`bench.run_rate_level` as a trial's load: the device counters read around its window."""
    return run_rate_level(target, metrics=metrics, **options)


# -- measurements ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The metrics text and Triton's statistics of the model at one moment."""

    metrics: str
    statistics: Mapping[str, Any]


class TrialProbe(MetricsProbe):
    """bench's `MetricsProbe` that keeps a `Snapshot` with each read (the load function reads
    it right before and after the measured window)."""

    def __init__(self, url: str, model: str, statistics: Callable[[], Mapping[str, Any]]):
        super().__init__(url, model)
        self._statistics = statistics
        self.snapshots: list[Snapshot] = []

    def read(self) -> DeviceCounters:
        text = self.fetch()
        self.snapshots.append(Snapshot(text, self._statistics()))
        return self.counters(text)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one trial measured over its window."""

    rows_per_s: float
    requests_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    requests: int
    errors: int
    error_messages: tuple[str, ...] = ()
    device_utilization: float | None = None  # mean over the devices used
    padding_ratio: float | None = None  # padded rows / real rows
    rows_per_execution: float | None = None
    queue_ms: float | None = None  # mean time a request waited in Triton's queue
    device_memory_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    device_memory_free_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    batch_sizes: Mapping[int, int] = dataclasses.field(default_factory=dict)  # size -> count


def _model_stats(statistics: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(statistics.get("model_stats", []))


def _count(value: Any) -> int:
    return int(value or 0)  # gRPC's JSON gives 64-bit counts as strings


def queue_ms(before: Mapping[str, Any], after: Mapping[str, Any]) -> float | None:
    """Mean queue time (ms) of the requests between two statistics (None: no request)."""

    def totals(statistics: Mapping[str, Any]) -> tuple[int, int]:
        queues = [s.get("inference_stats", {}).get("queue", {}) for s in _model_stats(statistics)]
        return sum(_count(q.get("count")) for q in queues), sum(_count(q.get("ns")) for q in queues)

    (count0, ns0), (count1, ns1) = totals(before), totals(after)
    return (ns1 - ns0) / (count1 - count0) / 1e6 if count1 > count0 else None


def batch_histogram(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[int, int]:
    """Batch size -> executions Triton formed between two statistics (`batch_stats`)."""

    def counts(statistics: Mapping[str, Any]) -> Counter[int]:
        found: Counter[int] = Counter()
        for stats in _model_stats(statistics):
            for entry in stats.get("batch_stats", []):
                infer = entry.get("compute_infer", {})
                found[_count(entry.get("batch_size"))] += _count(infer.get("count"))
        return found

    gained = counts(after)
    gained.subtract(counts(before))
    return {size: count for size, count in sorted(gained.items()) if count > 0}


def device_gauge(text: str, name: str, model: str) -> dict[str, int]:
    """Device label -> the model's gauge `name` (the largest of its versions)."""
    found: dict[str, int] = {}
    for labels, value in metric_samples(text, name):
        if labels.get("model") == model:
            device = labels.get("device", "")
            found[device] = max(found.get(device, 0), int(value))
    return found


def measurement_of(
    result: LevelResult, before: Snapshot, after: Snapshot, model: str
) -> Measurement:
    """A trial's measurement from the load function's result and the snapshots around it."""
    gained = result.device or {}
    total = {key: sum(values[key] for values in gained.values()) for key in DEVICE_METRICS}
    utilization = result.device_utilization
    rows, executions = total["rows"], total["executions"]
    return Measurement(
        rows_per_s=result.rows_per_s,
        requests_per_s=result.throughput_rps,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        requests=result.requests,
        errors=result.errors,
        error_messages=tuple(result.error_messages),
        device_utilization=sum(utilization.values()) / len(utilization) if utilization else None,
        padding_ratio=total["padded_rows"] / rows if rows else None,
        rows_per_execution=rows / executions if executions else None,
        queue_ms=queue_ms(before.statistics, after.statistics),
        device_memory_bytes=device_gauge(after.metrics, MEMORY_METRIC, model),
        device_memory_free_bytes=device_gauge(after.metrics, FREE_MEMORY_METRIC, model),
        batch_sizes=batch_histogram(before.statistics, after.statistics),
    )


# -- trials ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Trial:
    """One config tried: its measurement, or why it was not measured (`error`)."""

    candidate: Candidate
    default: bool
    measurement: Measurement | None = None
    error: str | None = None  # Triton's reason a load failed, or the requests' first failure
    load_s: float = 0.0
    measure_s: float = 0.0

    @property
    def loaded(self) -> bool:
        return self.measurement is not None

    def meets(self, p99_ms: float) -> bool:
        """Loaded, every request answered, p99 within the constraint."""
        m = self.measurement
        return m is not None and not m.errors and m.p99_ms is not None and m.p99_ms <= p99_ms

    def score(self, p99_ms: float) -> tuple[int, float]:
        """Higher is better: meeting the constraint with more rows/s, else a lower p99."""
        m = self.measurement
        if self.meets(p99_ms) and m is not None:
            return (2, m.rows_per_s)
        if m is not None and not m.errors and m.p99_ms is not None:
            return (1, -m.p99_ms)
        return (0, 0.0)

    def as_dict(self) -> dict[str, Any]:
        """The trial's entry in tune.json."""
        m = self.measurement
        entry: dict[str, Any] = {
            "config": self.candidate.as_dict(),
            "default": self.default,
            "loaded": self.loaded,
            "error": self.error,
        }
        for key in MEASURED_FIELDS:
            entry[key] = _rounded(getattr(m, key) if m else None)
        entry["requests"] = m.requests if m else 0
        entry["errors"] = m.errors if m else 0
        entry["device_memory_bytes"] = dict(m.device_memory_bytes) if m else {}
        entry["device_memory_free_bytes"] = dict(m.device_memory_free_bytes) if m else {}
        entry["batch_sizes"] = {str(k): v for k, v in m.batch_sizes.items()} if m else {}
        entry["load_s"] = round(self.load_s, 3)
        entry["measure_s"] = round(self.measure_s, 3)
        return entry


MEASURED_FIELDS = (
    "rows_per_s",
    "requests_per_s",
    "p50_ms",
    "p99_ms",
    "device_utilization",
    "padding_ratio",
    "rows_per_execution",
    "queue_ms",
)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def winner_of(trials: Sequence[Trial], p99_ms: float) -> int | None:
    """Index of the trial with the most rows/s meeting the constraint (None: none does)."""
    meeting = [i for i, trial in enumerate(trials) if trial.meets(p99_ms)]
    return max(meeting, key=lambda i: trials[i].score(p99_ms), default=None)
