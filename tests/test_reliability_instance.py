"""`ModelInstance.execute` (what model.py runs) with one bad or failing part in a batch.

Triton's dynamic batcher never merges requests of different shapes, so a request that fits
config.pbtxt but not the `.om` gears cannot be observed sharing an `execute` call with good ones
on the real server; here the batch is built by hand, with the shipped stand-in for `pb_utils`
(`ge_python_backend.triton.testing`) and the real runtime on the emulator (faults injected in
this process).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pytest
from reliability_helpers import instance_args

from ge_python_backend import emulator
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.runtime import Session
from ge_python_backend.triton import ModelInstance, testing


def request_of(
    feeds: Mapping[str, np.ndarray], outputs: tuple[str, ...] = ()
) -> testing.InferenceRequest:
    tensors = [testing.Tensor(name, array) for name, array in feeds.items()]
    return testing.InferenceRequest(inputs=tensors, requested_output_names=outputs)


def outputs_of(response: testing.InferenceResponse) -> dict[str, np.ndarray]:
    return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}


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
    return ModelInstance(instance_args(result, name, **parameters), testing.StandInUtils())


def sent_response(request: testing.InferenceRequest) -> testing.InferenceResponse:
    """The one response sent through the request's sender, with the final flag."""
    response, flags = request.sent.get(timeout=10)
    assert flags == testing.StandInUtils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    assert response is not None
    return response


def answers(
    instance: ModelInstance, requests: list[testing.InferenceRequest]
) -> list[testing.InferenceResponse]:
    """The response of each request: returned by `execute` (depth 1) or sent (depth 2)."""
    returned = instance.execute(requests)
    if returned is not None:
        assert all(request.sent.empty() for request in requests)
        return list(returned)
    responses = [sent_response(request) for request in requests]
    assert all(request.sent.empty() for request in requests)
    return responses


def dims_feeds(length: int, seed: int) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(0, 32, (1, length), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": np.ones((1, length), np.int64)}


@pytest.mark.parametrize("depth", [1, 2])
def test_bad_parts_of_a_batch_fail_alone(tmp_path: Path, om_dims: Path, depth: int) -> None:
    instance = open_instance(om_dims, tmp_path, "dims", depth)
    try:
        good = [dims_feeds(16, seed) for seed in range(3)]
        requests = [
            request_of(good[0]),
            request_of(dims_feeds(12, 9)),  # fits config dims [-1], matches no gear
            request_of(good[1]),
            request_of({**good[2], "attention_mask": good[2]["attention_mask"].astype(np.int32)}),
        ]
        responses = answers(instance, requests)
        with Session(om_dims, runtime="emulator") as session:
            expected = [session.infer(feeds)["hidden"] for feeds in good]
    finally:
        instance.close()
    errors = [r.error() for r in responses]
    assert [e.code() if e else None for e in errors] == [
        None,
        testing.TritonError.INVALID_ARG,
        None,
        testing.TritonError.INVALID_ARG,
    ]
    assert "match none of the model's dims gears" in errors[1].message()
    assert "expected dtype int64" in errors[3].message()
    np.testing.assert_array_equal(outputs_of(responses[0])["hidden"], expected[0])
    np.testing.assert_array_equal(outputs_of(responses[2])["hidden"], expected[1])


@pytest.mark.parametrize("depth", [1, 2])
def test_a_request_for_an_unknown_output_fails_alone(
    tmp_path: Path, om_dynamic_batch: Path, depth: int
) -> None:
    # Triton itself refuses such a request before `execute`; the instance still does not let
    # it take the batch down, and answers each request with the outputs it asked for.
    instance = open_instance(om_dynamic_batch, tmp_path, "mlp", depth)
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((1 + n, 16), dtype=np.float32)} for n in range(3)]
    try:
        responses = answers(
            instance,
            [
                request_of(feeds[0], outputs=("z",)),
                request_of(feeds[1], outputs=("y", "missing")),
                request_of(feeds[2]),
            ],
        )
        with Session(om_dynamic_batch, runtime="emulator") as session:
            expected = [session.infer(f) for f in feeds]
    finally:
        instance.close()
    error = responses[1].error()
    assert error is not None and error.code() == testing.TritonError.INVALID_ARG
    assert "'missing'" in error.message() and "'y', 'z'" in error.message()
    assert list(outputs_of(responses[0])) == ["z"]
    np.testing.assert_array_equal(outputs_of(responses[0])["z"], expected[0]["z"])
    assert sorted(outputs_of(responses[2])) == ["y", "z"]
    np.testing.assert_array_equal(outputs_of(responses[2])["y"], expected[2]["y"])


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
        first = answers(instance, [request_of(feeds[0])])
        failed = answers(instance, [request_of(f) for f in feeds[1:4]])
        after = answers(instance, [request_of(f) for f in feeds[4:]])
    finally:
        instance.close()
    assert first[0].error() is None
    for response in failed:
        error = response.error()
        assert error is not None and error.code() == testing.TritonError.INTERNAL
        assert "507011 ACL_ERROR_RT_MODEL_EXECUTE" in error.message()
        assert "acl.mdl.execute_async" in error.message()
    for response, f in zip(after, feeds[4:]):
        assert response.error() is None
        np.testing.assert_array_equal(outputs_of(response)["sum"], f["a"] + f["b"])
    stats = emulator.stats()
    assert stats["faults_injected"] - before["faults_injected"] == 1
    for key in ("live_device_allocations", "live_host_allocations", "loaded_models"):
        assert stats[key] == before[key], key


def inline_answers(
    instance: ModelInstance, seconds: float, until: bool | None = None
) -> list[bool]:
    """Execute one-row requests for `seconds` (with `until`: until one is answered inline if
    True, through its sender if False, or `seconds` passed); per `execute`, whether it returned
    the response itself (else it came through the response sender), each answer checked."""
    deadline = time.monotonic() + seconds
    feeds = {"a": np.full((1, 4), 2, np.float32), "b": np.ones((1, 4), np.float32)}
    inline: list[bool] = []
    while time.monotonic() < deadline and (until is None or until not in inline):
        request = request_of(feeds)
        returned = instance.execute([request])
        response = returned[0] if returned is not None else sent_response(request)
        assert response.error() is None
        np.testing.assert_array_equal(outputs_of(response)["sum"], np.full((1, 4), 3, np.float32))
        inline.append(returned is not None)
    return inline


# The pipelining threshold of these tests: an execution's device time is the timing model's plus
# the emulator's own work (copies, onnxruntime), which is well under a millisecond on an idle host
# but reached 0.8 ms on a busy one (tests running in parallel), enough to cross the default 1 ms.
THRESHOLD_US = 5000


def test_depth_2_answers_executions_shorter_than_its_threshold_inline(
    tmp_path: Path, om_add_mul: Path
) -> None:
    # Without a timing model an execution takes microseconds on the emulated device: depth 2
    # answers inline from the start and never pays for response senders.
    instance = open_instance(
        om_add_mul, tmp_path, "add_mul", 2, pipeline_min_device_us=str(THRESHOLD_US)
    )
    try:
        assert all(inline_answers(instance, 0.5))
    finally:
        instance.close()


def test_depth_2_pipelines_every_execution_with_threshold_0(
    tmp_path: Path, om_add_mul: Path
) -> None:
    instance = open_instance(om_add_mul, tmp_path, "add_mul", 2, pipeline_min_device_us="0")
    try:
        assert not any(inline_answers(instance, 0.5))
    finally:
        instance.close()


def test_depth_2_pipelines_from_its_threshold_and_stops_below_half_of_it(
    tmp_path: Path, om_add_mul: Path
) -> None:
    # Decided once per metrics interval (0.1 s) from the executions' mean device time (the
    # timing model's execute_us plus the emulator's work): 0.5 ms executions stay inline, 10 ms
    # ones are pipelined (after two long intervals, however long the host takes for them), and
    # pipelining then goes on down to half the limit (3 ms: no flapping around it), not below
    # (the emulator's work alone).
    emulator.set_timing("execute_us=500")
    instance = open_instance(
        om_add_mul, tmp_path, "add_mul", 2, pipeline_min_device_us=str(THRESHOLD_US)
    )
    try:
        assert all(inline_answers(instance, 0.5))
        emulator.set_timing("execute_us=10000")
        assert inline_answers(instance, 30, until=False)[-1] is False  # it starts pipelining
        assert not any(inline_answers(instance, 0.3))  # and goes on
        emulator.set_timing("execute_us=3000")
        assert not any(inline_answers(instance, 0.5))
        emulator.set_timing("execute_us=0")
        assert inline_answers(instance, 30, until=True)[-1] is True  # it stops
        assert all(inline_answers(instance, 0.3))
    finally:
        instance.close()
        emulator.set_timing(None)
