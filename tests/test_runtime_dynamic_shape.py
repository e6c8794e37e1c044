"""The runtime on dynamic-shape `.om` files: data-dependent outputs, shape-range inputs, zero-size
and scalar outputs (issue 21, item 3).

Sources: hicann/ge docs/zh/user_guides/atc_tools/CLI_options/--input_shape.md (set each input's
tensor desc before executing, read each output's after); aclmdlGetOutputSizeByIndex.md (0 when
the output is unbounded: the caller estimates the buffer); api/acl/acl_model/model/model.cpp
(output descs recreated at every execute). Each execution holds one request; the answers are
compared with onnxruntime. Without max_output_bytes an unbounded output is allocated by the system
(ACL, during the synchronous acl.mdl.execute) and freed after each copy out.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_models
import pytest
from onnx_models import KEEP_FP32

from ge_python_backend import emulator
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.runtime import AclError, InputError, ModelFileError, Session

pytestmark = pytest.mark.usefixtures("clean_acl")


@pytest.fixture(scope="module")
def om_zero_size(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rt_zero")
    return compile_onnx(onnx_models.build_zero_size(root / "zs.onnx"), root / "zs", **KEEP_FP32)


def _open(om: Path, **options: object) -> Session:
    return Session(om, runtime="emulator", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("depth", [1, 2])
def test_data_dependent_rows_per_request(om_nonzero: Path, depth: int) -> None:
    """Every request gets its own rows (the shape read from the output desc after the wait), a
    request never merged with another; the scalar output stays a scalar."""
    rng = np.random.default_rng(depth)
    feeds = [{"x": rng.random((4, 4), dtype=np.float32)} for _ in range(9)]
    with _open(om_nonzero, max_output_bytes=4096, pipeline_depth=depth) as session:
        assert session.outputs[0].shape == (2, -1) and session.outputs[1].shape == ()
        assert not session.gears.batched
        results = session.infer_many(feeds)
        assert session.counters.executions == len(feeds)
    for feed, result in zip(feeds, results):
        want = onnx_models.reference(om_nonzero, feed)
        np.testing.assert_array_equal(result["indices"], want["indices"])
        assert result["count"].shape == () and result["count"] == want["count"]
    assert len({r["indices"].shape for r in results}) > 1


@pytest.mark.parametrize("depth", [1, 2])
def test_unbounded_output_is_allocated_by_the_system(om_nonzero: Path, depth: int) -> None:
    """get_output_size_by_index is 0 and no max_output_bytes: the session executes
    synchronously with an empty buffer for `indices` (ACL allocates it at each execution) and
    a pooled one for `count` (8 bytes); each answer is its own request's, and each allocation
    is freed after its copy out: the device's memory is back where it was."""
    rng = np.random.default_rng(depth)
    feeds = [{"x": rng.random((4, 4), dtype=np.float32)} for _ in range(9)]
    feeds.append({"x": np.zeros((4, 4), np.float32)})  # no element: indices [2, 0]
    with _open(om_nonzero, pipeline_depth=depth) as session:
        free = session.device_memory()[0]
        before = emulator.stats()
        results = session.infer_many(feeds)
        after = emulator.stats()
        assert session.device_memory()[0] == free
        assert session.counters.executions == len(feeds)
    for key in ("output_allocations", "execute_calls", "free_calls"):
        assert after[key] - before[key] == len(feeds), key
    assert after["execute_async_calls"] == before["execute_async_calls"]
    assert after["live_device_allocations"] == before["live_device_allocations"]
    for feed, result in zip(feeds, results):
        want = onnx_models.reference(om_nonzero, feed)
        np.testing.assert_array_equal(result["indices"], want["indices"])
        assert result["count"].shape == () and result["count"] == want["count"]
    assert results[-1]["indices"].shape == (2, 0)


def test_system_allocation_leaks_nothing_over_10000_executions(om_nonzero: Path) -> None:
    """10,000 executions, one request each: every allocation ACL made is freed (the device's
    free memory and the live allocations end where they started)."""
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.random((4, 4), dtype=np.float32)} for _ in range(100)]
    with _open(om_nonzero) as session:
        free = session.device_memory()[0]
        before = emulator.stats()
        for _ in range(100):
            session.infer_many(feeds)
        after = emulator.stats()
        assert session.device_memory()[0] == free
        assert session.counters.executions == 10_000
    assert after["output_allocations"] - before["output_allocations"] == 10_000
    assert after["free_calls"] - before["free_calls"] == 10_000
    assert after["live_device_allocations"] == before["live_device_allocations"]
    assert after["device_bytes_in_use"] == before["device_bytes_in_use"]


@pytest.mark.parametrize(
    "fault",
    ["mdl.execute:507011:1", "rt.memcpy:507011:2"],  # the execution, or its copy out, fails
)
def test_a_failed_system_allocated_execution_frees_its_outputs(
    om_nonzero: Path, fault: str
) -> None:
    """A failure fails its request alone; what ACL allocated for it is freed, and the next
    request is served."""
    x = np.ones((4, 4), np.float32)
    with _open(om_nonzero) as session:
        free = session.device_memory()[0]
        emulator.set_faults(fault)
        with pytest.raises(AclError):
            session.infer({"x": x})
        emulator.set_faults(None)
        assert session.device_memory()[0] == free
        result = session.infer({"x": x})
        assert result["indices"].shape == (2, 16)
        assert session.device_memory()[0] == free
        assert session.counters.failed_executions == 1


def test_max_output_bytes_must_be_positive(om_nonzero: Path) -> None:
    with pytest.raises(ValueError, match="max_output_bytes must be a positive integer"):
        _open(om_nonzero, max_output_bytes=0)


def test_too_small_output_buffer_fails_its_request_alone(om_nonzero: Path) -> None:
    """An answer larger than max_output_bytes fails that request (the device refuses the
    buffer); the lane is settled and the next request is served."""
    with _open(om_nonzero, max_output_bytes=64, pipeline_depth=2) as session:
        with pytest.raises(AclError):
            session.infer({"x": np.ones((4, 4), np.float32)})  # 16 rows: 256 bytes
        few = np.zeros((4, 4), np.float32)
        few[1, 2] = 1.0
        result = session.infer({"x": few})
        np.testing.assert_array_equal(result["indices"], [[1], [2]])
        assert session.counters.failed_executions == 1


def test_zero_size_output_is_served(om_zero_size: Path) -> None:
    """A zero-size output used to fail every request with a ValueError that left the queued
    work on the lane unsettled; it is served as an empty array, at both depths."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for depth in (1, 2):
        with _open(om_zero_size, pipeline_depth=depth) as session:
            results = session.infer_many([{"x": x}, {"x": x + 1}, {"x": x + 2}])
            assert session.counters.failed_executions == 0
        for offset, result in enumerate(results):
            np.testing.assert_array_equal(result["y"], (x + offset) * 2)
            assert result["empty"].shape == (0, 3) and result["empty"].dtype == np.float32


def test_shape_range_input(tmp_path: Path) -> None:
    """`x:1~16,16`: any row count in the range runs alone with its real dims; outside it the
    request is refused before any work; an unbounded range cannot be sized and is refused."""
    onnx_path = onnx_models.build_mlp(tmp_path / "mlp.onnx")
    om = compile_onnx(onnx_path, tmp_path / "ranged", input_shape="x:1~16,16", **KEEP_FP32)
    rng = np.random.default_rng(0)
    with _open(om, pipeline_depth=2) as session:
        assert session.inputs[0].shape == (-1, 16)
        feeds = [{"x": rng.random((rows, 16), dtype=np.float32)} for rows in (1, 16, 7, 3)]
        for feed, result in zip(feeds, session.infer_many(feeds)):
            want = onnx_models.reference(om, feed)
            np.testing.assert_allclose(result["y"], want["y"], rtol=1e-5, atol=1e-6)
        with pytest.raises(InputError, match=r"outside the model's shape range \(1\.\.16, 16\)"):
            session.infer({"x": np.zeros((17, 16), np.float32)})
    unbounded = compile_onnx(onnx_path, tmp_path / "any", input_shape="x:-1,16", **KEEP_FP32)
    with pytest.raises(ModelFileError, match="has no upper bound"):
        _open(unbounded)
