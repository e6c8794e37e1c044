"""What the hot path remembers must not change what it does.

`Session` remembers request signatures that fitted, chunk plans and typed views of its pinned
buffers, and its layouts' recent device times (`DeviceTimeSampler`); `MetricsPublisher` publishes
at most every `FLUSH_INTERVAL_S`.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from onnx_models import reference

from ge_python_backend.runtime import InputError, Session, SessionCounters
from ge_python_backend.runtime.batching import Execution, Piece
from ge_python_backend.runtime.lane import DeviceTimes
from ge_python_backend.runtime.session import DeviceTimeSampler
from ge_python_backend.triton import metrics, testing
from ge_python_backend.triton.metrics import FLUSH_INTERVAL_S, MetricsPublisher


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
                for name, want in reference(om_dynamic_batch, {"x": x}).items():
                    np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6)
        first = session.infer({"x": rows(4, 99)})
        session.infer({"x": rows(4, 100)})  # overwrites the pinned buffers: `first` is a copy
        np.testing.assert_allclose(first["y"], reference(om_dynamic_batch, {"x": rows(4, 99)})["y"])


def test_metrics_are_published_at_most_every_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(metrics.time, "monotonic", lambda: now[0])
    pb_utils = testing.StandInUtils()
    held = SessionCounters(
        device_bytes_held=64, work_space_bytes=4096, work_space_streams=4, io_area_bytes=2048
    )
    publisher = MetricsPublisher(pb_utils, {"model": "m"}, held, (900, 1000))
    assert pb_utils.metric_calls == [
        ("set", "ge_device_memory_bytes", 64.0),
        ("set", "ge_device_memory_free_bytes", 900.0),
        ("set", "ge_device_memory_total_bytes", 1000.0),
        ("set", "ge_device_host_work_space_bytes", 4096.0),
        ("set", "ge_device_host_streams", 4.0),
        ("set", "ge_device_host_io_area_bytes", 2048.0),
    ]
    assert not publisher.due()
    now[0] += FLUSH_INTERVAL_S
    assert publisher.due()
    publisher.flush(dataclasses.replace(held, executions=3, rows=5), (900, 1000))
    assert sorted(pb_utils.metric_calls[6:]) == [
        ("increment", "ge_executions_total", 3.0),
        ("increment", "ge_rows_total", 5.0),
    ]  # only what changed, and the unchanged gauge is not set again
    assert not publisher.due()
    now[0] += FLUSH_INTERVAL_S
    publisher.flush(dataclasses.replace(held, executions=4, rows=5), (800, 1000))
    assert pb_utils.metric_calls[-2:] == [
        ("increment", "ge_executions_total", 1.0),
        ("set", "ge_device_memory_free_bytes", 800.0),
    ]


def _execution(gear: int, batch: int) -> Execution:
    return Execution(gear, batch, batch, (Piece(0, 0, 0, batch, True),))


def test_the_first_executions_of_each_layout_are_timed_then_one_in_the_period() -> None:
    sampler = DeviceTimeSampler(4)
    eight, one = _execution(0, 8), _execution(0, 1)
    timed = []
    for _ in range(12):
        wanted = sampler.wants(eight)
        timed.append(wanted)
        sampler.times(eight, DeviceTimes(1e-4, 1e-3, 1e-4) if wanted else None)
    assert timed == [True] * 4 + [True, False, False, False] * 2  # counts 0-3, then 4 and 8
    assert sampler.wants(one)  # another layout starts timed
    for bad in (0, -1, 1.5, True, "4"):
        with pytest.raises(ValueError, match="positive integer"):
            DeviceTimeSampler(bad)  # type: ignore[arg-type]


def test_a_layout_is_timed_until_a_timed_execution_of_it_finished() -> None:
    sampler = DeviceTimeSampler(2)
    layout = _execution(1, 4)
    assert [sampler.wants(layout) for _ in range(5)] == [True] * 5  # none finished yet
    sampler.times(layout, DeviceTimes(0.0, 1.0, 0.0))
    assert [sampler.wants(layout) for _ in range(4)] == [False, True, False, True]


def test_untimed_executions_count_their_layouts_recent_device_times() -> None:
    sampler = DeviceTimeSampler(16)
    layout = _execution(0, 2)
    sampler.wants(layout)
    assert sampler.times(layout, DeviceTimes(1.0, 2.0, 3.0)) == DeviceTimes(1.0, 2.0, 3.0)
    sampler.wants(layout)
    assert sampler.times(layout, DeviceTimes(3.0, 2.0, 7.0)) == DeviceTimes(3.0, 2.0, 7.0)
    # the exponential mean moves a quarter of the way towards each new timed execution
    assert sampler.times(layout, None) == pytest.approx(DeviceTimes(1.5, 2.0, 4.0))
