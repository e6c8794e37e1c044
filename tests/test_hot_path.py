"""What the hot path remembers must not change what it does.

`Session` remembers request signatures that fitted, chunk plans and typed views of its pinned
buffers; `MetricsPublisher` publishes at most every `FLUSH_INTERVAL_S`.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime
import pytest
from onnx_models import onnx_path_of

from ge_python_backend.runtime import InputError, Session, SessionCounters
from ge_python_backend.triton import metrics
from ge_python_backend.triton.metrics import FLUSH_INTERVAL_S, MetricsPublisher


def expected(om: Path, x: np.ndarray) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(
        str(onnx_path_of(om)), providers=["CPUExecutionProvider"]
    )
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, {"x": x})))


def rows(count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 16)).astype(np.float32)


def test_a_signature_that_fitted_once_does_not_let_others_through(om_dynamic_batch: Path) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        assert session.validate({"x": rows(3, 0)}) == 3
        assert session.validate({"x": rows(3, 1)}) == 3  # remembered
        for bad, message in (
            ({"x": rows(3, 0).astype(np.float64)}, "dtype"),
            ({"x": rows(3, 0)[:, :15]}, "shape"),
            ({"x": rows(3, 0), "y": rows(3, 0)}, "unknown input"),
            ({"x": rows(3, 0).tolist()}, "numpy"),
            ({"x": rows(0, 0)}, "at least one row"),
        ):
            with pytest.raises(InputError, match=message):
                session.validate(bad)
        # Any mapping is checked, not only dicts.
        assert session.validate(OrderedDict(x=rows(2, 0))) == 2


def test_repeated_mixed_batches_give_the_same_answers(om_dynamic_batch: Path) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        for seed in range(3):  # the second and third rounds run on remembered plans and views
            parts = [rows(n, seed * 10 + n) for n in (1, 5, 3, 11)]
            results = session.infer_many([{"x": x} for x in parts])
            for x, got in zip(parts, results):
                for name, want in expected(om_dynamic_batch, x).items():
                    np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
        first = session.infer({"x": rows(4, 99)})
        session.infer({"x": rows(4, 100)})  # overwrites the pinned buffers: `first` is a copy
        np.testing.assert_allclose(first["y"], expected(om_dynamic_batch, rows(4, 99))["y"])


class _Family:
    COUNTER, GAUGE = 0, 1

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name = name

    def Metric(self, labels: dict[str, str]) -> Any:  # noqa: N802 (Triton's name)
        return _Metric(self.name)


class _Metric:
    calls: list[tuple[str, str, float]] = []

    def __init__(self, name: str) -> None:
        self.name = name

    def increment(self, value: float) -> None:
        self.calls.append(("increment", self.name, value))

    def set(self, value: float) -> None:
        self.calls.append(("set", self.name, value))


class _PbUtils:
    MetricFamily = _Family


def test_metrics_are_published_at_most_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: now[0])
    _Metric.calls = []
    publisher = MetricsPublisher(
        _PbUtils, {"model": "m"}, SessionCounters(device_bytes_held=64), (900, 1000)
    )
    assert _Metric.calls == [
        ("set", "ge_device_memory_bytes", 64.0),
        ("set", "ge_device_memory_free_bytes", 900.0),
        ("set", "ge_device_memory_total_bytes", 1000.0),
    ]
    assert not publisher.due()
    now[0] += FLUSH_INTERVAL_S
    assert publisher.due()
    publisher.flush(SessionCounters(executions=3, rows=5, device_bytes_held=64), (900, 1000))
    assert sorted(_Metric.calls[3:]) == [
        ("increment", "ge_executions_total", 3.0),
        ("increment", "ge_rows_total", 5.0),
    ]  # only what changed, and the unchanged gauge is not set again
    assert not publisher.due()
    now[0] += FLUSH_INTERVAL_S
    publisher.flush(SessionCounters(executions=4, rows=5, device_bytes_held=64), (800, 1000))
    assert _Metric.calls[-2:] == [
        ("increment", "ge_executions_total", 1.0),
        ("set", "ge_device_memory_free_bytes", 800.0),
    ]
