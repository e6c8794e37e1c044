"""`ge_*` custom metrics published through the Python backend's `pb_utils.MetricFamily`.

Triton 2.51 crashes when a metric is touched from a background thread, so `MetricsPublisher.flush`
must only be called from the thread that runs `initialize` or `execute`. It publishes the change in
the session's cumulative counters since the previous flush. Each metric update is a round trip to
the Triton process, so `execute` flushes only when `due()`: at most every `FLUSH_INTERVAL_S`
(counts of the last executions before an idle spell show with the next execution).

Each stub process publishes series of its own: `series_labels` adds the stub's pid to the
instance's labels. Triton 2.51 shares a Prometheus series between the stubs that add the same
labels to a family of the same name, but counts references per stub: the first stub to delete
its metric frees the series while the other still writes to it (heap corruption, then a hung or
crashed server). Instances of one model overlap whenever a model is reloaded while it executes,
or runs more than one instance and unloads (docs/guides/reliability/soak-reload.md).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from ge_python_backend.runtime import SessionCounters


@dataclass(frozen=True)
class _CounterMetric:
    name: str
    description: str
    field: str
    scale: float = 1.0


COUNTERS = (
    _CounterMetric("ge_executions_total", "Model executions completed on the NPU", "executions"),
    _CounterMetric(
        "ge_failed_executions_total", "Model executions that failed", "failed_executions"
    ),
    _CounterMetric("ge_rows_total", "Real batch rows run on the NPU (padding excluded)", "rows"),
    _CounterMetric(
        "ge_padded_rows_total", "Rows added to reach a compiled batch gear", "padded_rows"
    ),
    _CounterMetric(
        "ge_device_busy_seconds_total",
        "Device time executing this instance's model, from ACL events around the executions "
        "(device_timing_period: one in N per gear timed, the others count its recent time; "
        "rate() is the device's utilization by this instance)",
        "execute_seconds",
    ),
    _CounterMetric(
        "ge_execute_duration_us",
        "Device time executing the model (us), from ACL events",
        "execute_seconds",
        scale=1e6,
    ),
    _CounterMetric("ge_h2d_bytes_total", "Bytes copied host to device", "h2d_bytes"),
    _CounterMetric(
        "ge_h2d_duration_us",
        "Device time of host-to-device copies (us), from ACL events",
        "h2d_seconds",
        1e6,
    ),
    _CounterMetric("ge_d2h_bytes_total", "Bytes copied device to host", "d2h_bytes"),
    _CounterMetric(
        "ge_d2h_duration_us",
        "Device time of device-to-host copies (us), from ACL events",
        "d2h_seconds",
        1e6,
    ),
)
# name, description; set from (pooled bytes held, device free, device total, the device host's
# shared work spaces: bytes, streams; its streams' I/O areas: bytes).
GAUGES = (
    (
        "ge_device_memory_bytes",
        "Device memory held by the instance's own pooled buffers (bytes; in the device host "
        "with shared work spaces, not those in its streams' I/O areas)",
    ),
    ("ge_device_memory_free_bytes", "Free memory of the instance's device (acl.rt.get_mem_info)"),
    ("ge_device_memory_total_bytes", "Memory of the instance's device (acl.rt.get_mem_info)"),
    (
        "ge_device_host_work_space_bytes",
        "Device memory of the shared work spaces of the device host serving the instance, one "
        "per stream of its pool, shared by all its models (bytes; 0 in-stub or per-lane)",
    ),
    (
        "ge_device_host_streams",
        "Streams of the device host's pool, each with one shared work space (0 in-stub or "
        "per-lane)",
    ),
    (
        "ge_device_host_io_area_bytes",
        "Device memory of the I/O areas of the device host serving the instance, one per stream "
        "of its pool, holding the input and output buffers of the lanes seated there (bytes; 0 "
        "in-stub or per-lane)",
    ),
)
FLUSH_INTERVAL_S = 0.1


def series_labels(labels: dict[str, str]) -> dict[str, str]:
    """`labels` with this stub process's pid (`pid`), so that no two stubs add the same series.

    Triton core's `MetricFamily` (src/metric_family.cc) keeps a reference count per family
    object, and the Python backend makes one family object per stub; prometheus-cpp's registry
    merges families of one name and `Family::Add` returns the existing series for equal labels.
    Two stubs with equal labels thus hold one series with a count of 1 each, and the first
    `Metric` deleted removes (frees) it under the other.
    """
    return {**labels, "pid": str(os.getpid())}


class MetricsPublisher:
    """Owns the metric families of one model instance and publishes counter deltas (its series
    labelled `series_labels(labels)`)."""

    def __init__(
        self,
        pb_utils: Any,
        labels: dict[str, str],
        counters: SessionCounters,
        device_memory: tuple[int, int] = (0, 0),
    ) -> None:
        family = pb_utils.MetricFamily
        self._families = [
            family(name=spec.name, description=spec.description, kind=family.COUNTER)
            for spec in COUNTERS
        ]
        labels = series_labels(labels)
        self._metrics = [f.Metric(labels=labels) for f in self._families]
        self._gauge_families = [
            family(name=name, description=description, kind=family.GAUGE)
            for name, description in GAUGES
        ]
        self._gauges = [f.Metric(labels=labels) for f in self._gauge_families]
        self._published = [0.0] * len(COUNTERS)
        self._gauges_published: list[float | None] = [None] * len(GAUGES)
        self._next_flush = 0.0
        self.flush(counters, device_memory)

    def due(self) -> bool:
        """Whether `FLUSH_INTERVAL_S` has passed since the last flush."""
        return time.monotonic() >= self._next_flush

    def flush(self, counters: SessionCounters, device_memory: tuple[int, int] = (0, 0)) -> None:
        """Publish what the counters gained since the last flush, and the memory gauges
        (`device_memory`: the device's (free, total) bytes)."""
        for number, (spec, metric) in enumerate(zip(COUNTERS, self._metrics)):
            value = float(getattr(counters, spec.field))
            delta = value - self._published[number]
            if delta > 0:
                metric.increment(delta * spec.scale)
                self._published[number] = value
        values = (
            counters.device_bytes_held,
            *device_memory,
            counters.work_space_bytes,
            counters.work_space_streams,
            counters.io_area_bytes,
        )
        for number, (gauge, value) in enumerate(zip(self._gauges, values)):
            if float(value) != self._gauges_published[number]:
                gauge.set(float(value))
                self._gauges_published[number] = float(value)
        self._next_flush = time.monotonic() + FLUSH_INTERVAL_S

    def close(self) -> None:
        """Drop metrics before their families, as the Python backend requires."""
        self._metrics.clear()
        self._gauges.clear()
        self._families.clear()
        self._gauge_families.clear()
