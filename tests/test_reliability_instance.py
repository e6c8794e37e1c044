"""`ModelInstance.execute` (what model.py runs) with one bad or failing part in a batch.

Triton's dynamic batcher never merges requests of different shapes, so a request that fits
config.pbtxt but not the `.om` gears cannot be observed sharing an `execute` call with good ones
on the real server; here the batch is built by hand, with a stand-in for `pb_utils` and the
real runtime on the emulator (faults injected in this process).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from google.protobuf import json_format

from ge_python_backend import emulator
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.runtime import Session
from ge_python_backend.triton import ModelInstance


class FakeTritonError:
    INVALID_ARG = "INVALID_ARG"
    INTERNAL = "INTERNAL"

    def __init__(self, message: str, code: str) -> None:
        self.message, self.code = message, code


class FakeResponse:
    def __init__(self, output_tensors: list[Any], error: FakeTritonError | None = None) -> None:
        self.outputs = {tensor.name: tensor.array for tensor in output_tensors}
        self.error = error


class FakeTensor:
    """An output tensor, as `pb_utils.Tensor(name, array)` makes it."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        self.name, self.array = name, array


class FakeInput:
    """An input tensor of a request."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class FakeMetric:
    def __init__(self, labels: dict[str, str]) -> None:
        self.value = 0.0

    def increment(self, value: float) -> None:
        self.value += value

    def set(self, value: float) -> None:
        self.value = value


class FakeMetricFamily:
    COUNTER, GAUGE, HISTOGRAM = "COUNTER", "GAUGE", "HISTOGRAM"

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.Metric = FakeMetric


class FakeLogger:
    """pb_utils.Logger: what would reach Triton's log, as (level, message)."""

    lines: list[tuple[str, str]] = []

    @classmethod
    def log_info(cls, message: str) -> None:
        cls.lines.append(("INFO", message))

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls.lines.append(("WARNING", message))

    @classmethod
    def log_error(cls, message: str) -> None:
        cls.lines.append(("ERROR", message))

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls.lines.append(("VERBOSE", message))


class FakePbUtils:
    """The parts of `triton_python_backend_utils` that ModelInstance uses."""

    Logger = FakeLogger
    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    TritonError = FakeTritonError
    InferenceResponse = FakeResponse
    MetricFamily = FakeMetricFamily

    class TritonModelException(Exception):
        pass

    @staticmethod
    def Tensor(name: str, array: np.ndarray) -> FakeTensor:  # noqa: N802 (pb_utils' name)
        return FakeTensor(name, array)


class FakeSender:
    """A request's response sender (pipeline depth 2 answers through it)."""

    def __init__(self) -> None:
        self.responses: list[FakeResponse] = []
        self.sent = threading.Event()

    def send(self, response: FakeResponse, flags: int) -> None:
        assert flags == FakePbUtils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self.responses.append(response)
        self.sent.set()


class FakeRequest:
    def __init__(self, feeds: Mapping[str, np.ndarray], outputs: tuple[str, ...] = ()) -> None:
        self.feeds, self.outputs = feeds, outputs
        self.sender = FakeSender()

    def get_response_sender(self) -> FakeSender:
        return self.sender

    def inputs(self) -> list[FakeInput]:
        return [FakeInput(name, array) for name, array in self.feeds.items()]

    def requested_output_names(self) -> list[str]:
        return list(self.outputs)


@pytest.fixture(autouse=True)
def _no_faults() -> Iterator[None]:
    emulator.set_faults(None)
    yield
    emulator.set_faults(None)


def open_instance(
    om: Path, repository: Path, name: str, depth: int, **parameters: str
) -> ModelInstance:
    result = scaffold(
        om, repository, name=name, runtime="emulator", max_batch_size=4, pipeline_depth=depth
    )
    config = load_model_config(result.config_path)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    args = {
        "model_config": json.dumps(json_format.MessageToDict(config)),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{name}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(result.model_dir),
        "model_version": "1",
        "model_name": name,
    }
    return ModelInstance(args, FakePbUtils)


def answers(instance: ModelInstance, requests: list[FakeRequest]) -> list[FakeResponse]:
    """The response of each request: returned by `execute` (depth 1) or sent (depth 2)."""
    returned = instance.execute(requests)
    if returned is not None:
        assert not any(request.sender.responses for request in requests)
        return returned
    for request in requests:
        assert request.sender.sent.wait(10), "no response was sent"
    assert all(len(request.sender.responses) == 1 for request in requests)
    return [request.sender.responses[0] for request in requests]


def dims_feeds(length: int, seed: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(0, 32, (1, length), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones((1, length), np.int64)}


@pytest.mark.parametrize("depth", [1, 2])
def test_bad_parts_of_a_batch_fail_alone(tmp_path: Path, om_dims: Path, depth: int) -> None:
    instance = open_instance(om_dims, tmp_path, "dims", depth)
    try:
        good = [dims_feeds(16, seed) for seed in range(3)]
        requests = [
            FakeRequest(good[0]),
            FakeRequest(dims_feeds(12, 9)),  # fits config dims [-1], matches no gear
            FakeRequest(good[1]),
            FakeRequest(good[2], outputs=("hidden", "missing")),
        ]
        responses = answers(instance, requests)
        with Session(om_dims, runtime="emulator") as session:
            expected = [session.infer(feeds)["hidden"] for feeds in good]
    finally:
        instance.close()
    assert [r.error.code if r.error else None for r in responses] == [
        None,
        "INVALID_ARG",
        None,
        "INVALID_ARG",
    ]
    assert "match none of the model's dims gears" in responses[1].error.message
    assert "'missing'" in responses[3].error.message
    np.testing.assert_array_equal(responses[0].outputs["hidden"], expected[0])
    np.testing.assert_array_equal(responses[2].outputs["hidden"], expected[1])


@pytest.mark.parametrize("depth", [1, 2])
def test_a_failed_execution_fails_its_batch_only(
    tmp_path: Path, om_add_mul: Path, depth: int
) -> None:
    before = emulator.stats()
    emulator.set_faults("mdl.execute_async:507011:2")
    instance = open_instance(om_add_mul, tmp_path, "add_mul", depth)
    feeds = [
        {"a": np.full((1, 4), i, np.float32), "b": np.ones((1, 4), np.float32)} for i in range(7)
    ]
    try:
        first = answers(instance, [FakeRequest(feeds[0])])
        failed = answers(instance, [FakeRequest(f) for f in feeds[1:4]])
        after = answers(instance, [FakeRequest(f) for f in feeds[4:]])
    finally:
        instance.close()
    assert first[0].error is None
    for response in failed:
        assert response.error.code == "INTERNAL"
        assert "507011 ACL_ERROR_RT_MODEL_EXECUTE" in response.error.message
        assert "acl.mdl.execute_async" in response.error.message
    for response, f in zip(after, feeds[4:]):
        assert response.error is None
        np.testing.assert_array_equal(response.outputs["sum"], f["a"] + f["b"])
    stats = emulator.stats()
    assert stats["faults_injected"] - before["faults_injected"] == 1
    for key in ("live_device_allocations", "live_host_allocations", "loaded_models"):
        assert stats[key] == before[key], key


def answered_inline_within(instance: ModelInstance, seconds: float) -> bool:
    """Execute one-row requests for up to `seconds`; whether `execute` began returning the
    responses itself (checking each answer on the way)."""
    deadline = time.monotonic() + seconds
    feeds = {"a": np.full((1, 4), 2, np.float32), "b": np.ones((1, 4), np.float32)}
    while time.monotonic() < deadline:
        request = FakeRequest(feeds)
        returned = instance.execute([request])
        if returned is None:
            assert request.sender.sent.wait(10), "no response was sent"
        response = (returned or request.sender.responses)[0]
        assert response.error is None
        np.testing.assert_array_equal(response.outputs["sum"], np.full((1, 4), 3, np.float32))
        if returned is not None:
            return True
    return False


def test_depth_2_answers_executions_shorter_than_its_threshold_inline(
    tmp_path: Path, om_add_mul: Path
) -> None:
    # Without a timing model an execution takes microseconds on the emulated device: after the
    # first metrics interval (0.1 s) depth 2 stops paying for response senders.
    instance = open_instance(om_add_mul, tmp_path, "add_mul", 2)
    try:
        assert answered_inline_within(instance, 5.0)
    finally:
        instance.close()


# Pipelining starts at the limit and stops below half of it: 700 us executions keep it on.
@pytest.mark.parametrize(
    ("timing", "threshold"), [("", "0"), ("execute_us=2000", "1000"), ("execute_us=700", "1000")]
)
def test_depth_2_pipelines_executions_as_long_as_its_threshold(
    tmp_path: Path, om_add_mul: Path, timing: str, threshold: str
) -> None:
    emulator.set_timing(timing)
    instance = open_instance(om_add_mul, tmp_path, "add_mul", 2, pipeline_min_device_us=threshold)
    try:
        assert not answered_inline_within(instance, 0.5)
    finally:
        instance.close()
        emulator.set_timing(None)
