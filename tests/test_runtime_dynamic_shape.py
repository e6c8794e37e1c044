"""The runtime on dynamic-shape `.om` files: data-dependent outputs, shape-range inputs, zero-size
and scalar outputs (issue 21, item 3).

Sources: hicann/ge docs/zh/user_guides/atc_tools/CLI_options/--input_shape.md (set each input's
tensor desc before executing, read each output's after); aclmdlGetOutputSizeByIndex.md (0 when
the output is unbounded: the caller estimates the buffer); api/acl/acl_model/model/model.cpp
(output descs recreated at every execute). Each execution holds one request; the answers are
compared with onnxruntime.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_models
import pytest
from onnx_models import KEEP_FP32

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


def test_unbounded_output_needs_max_output_bytes(om_nonzero: Path) -> None:
    """get_output_size_by_index is 0: without max_output_bytes the model is refused at load."""
    with pytest.raises(ModelFileError, match="set the parameter max_output_bytes"):
        _open(om_nonzero)
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
