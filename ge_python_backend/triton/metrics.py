"""`ge_*` custom metrics published through the Python backend's `pb_utils.MetricFamily`.

Triton 2.51 crashes when a metric is touched from a background thread, so `MetricsPublisher.flush`
must only be called from the thread that runs `initialize` or `execute`. It publishes the change in
the session's cumulative counters since the previous flush. Each metric update is a round trip to
the Triton process, so `execute` flushes only when `due()`: at most every `FLUSH_INTERVAL_S`
(counts of the last executions before an idle spell show with the next execution).
"""

from __future__ import annotations

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
    _CounterMetric("ge_executions_total", "Model executions on the NPU", "executions"),
    _CounterMetric("ge_rows_total", "Batch rows run on the NPU, padding included", "rows"),
    _CounterMetric(
        "ge_padded_rows_total", "Rows added to reach a compiled batch gear", "padded_rows"
    ),
    _CounterMetric(
        "ge_execute_duration_us", "Device execute time (us)", "execute_seconds", scale=1e6
    ),
    _CounterMetric("ge_h2d_bytes_total", "Bytes copied host to device", "h2d_bytes"),
    _CounterMetric("ge_h2d_duration_us", "Host-to-device copy time (us)", "h2d_seconds", 1e6),
    _CounterMetric("ge_d2h_bytes_total", "Bytes copied device to host", "d2h_bytes"),
    _CounterMetric("ge_d2h_duration_us", "Device-to-host copy time (us)", "d2h_seconds", 1e6),
)
DEVICE_MEMORY_GAUGE = "ge_device_memory_bytes"
FLUSH_INTERVAL_S = 0.1


class MetricsPublisher:
    """Owns the metric families of one model instance and publishes counter deltas."""

    def __init__(self, pb_utils: Any, labels: dict[str, str], counters: SessionCounters) -> None:
        family = pb_utils.MetricFamily
        self._families = [
            family(name=spec.name, description=spec.description, kind=family.COUNTER)
            for spec in COUNTERS
        ]
        self._metrics = [f.Metric(labels=labels) for f in self._families]
        self._memory_family = family(
            name=DEVICE_MEMORY_GAUGE,
            description="Device memory held by the instance's pooled buffers (bytes)",
            kind=family.GAUGE,
        )
        self._memory = self._memory_family.Metric(labels=labels)
        self._published = {spec.field: 0.0 for spec in COUNTERS}
        self._memory_published: float | None = None
        self._next_flush = 0.0
        self.flush(counters)

    def due(self) -> bool:
        """Whether `FLUSH_INTERVAL_S` has passed since the last flush."""
        return time.monotonic() >= self._next_flush

    def flush(self, counters: SessionCounters) -> None:
        """Publish what the counters gained since the last flush."""
        for spec, metric in zip(COUNTERS, self._metrics):
            value = float(getattr(counters, spec.field))
            delta = value - self._published[spec.field]
            if delta > 0:
                metric.increment(delta * spec.scale)
                self._published[spec.field] = value
        memory = float(counters.device_bytes_held)
        if memory != self._memory_published:
            self._memory.set(memory)
            self._memory_published = memory
        self._next_flush = time.monotonic() + FLUSH_INTERVAL_S

    def close(self) -> None:
        """Drop metrics before their families, as the Python backend requires."""
        self._metrics.clear()
        del self._memory
        self._families.clear()
        del self._memory_family
