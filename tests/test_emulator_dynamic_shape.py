"""Dynamic-shape `.om` files in the emulator: data-dependent outputs, shape-range inputs, scalars.

Sources: hicann/ge docs/zh/user_guides/atc_tools/CLI_options/--input_shape.md (ranges `lo~hi`
and -1 without gears make a dynamic-shape model; before executing, set each input's real dims
with aclmdlSetDatasetTensorDesc; after, read each output's from aclmdlGetDatasetTensorDesc);
docs/zh/api/graph_engine_api/c/acl/aclmdlGetInputDimsRange.md (static dims lo == hi, gear models
rangeCount 0), aclmdlGetOutputSizeByIndex.md (0 when the output's range is not bounded);
api/acl/acl_model/model/model.cpp (ModelExecute: an input out of its range is 100000; the output
descs are recreated at every execute); hicann/runtime python/pyACL/mdl/mdl_wrap.cpp
(get_input_dims_range -> ({"rangeCount", "range"}, ret)).

System-allocated outputs (aclmdlGetOutputSizeByIndex.md, aclmdlExecute.md; model.cpp ModelExecute
and RuntimeV2ModelExecute): an empty data buffer (data 0, size 0) is filled by a synchronous
execute with device memory ACL allocates (`aclrtMalloc`: the device's memory, freed with
`acl.rt.free`), before the run when the output's size is known, else after it with GE's size of
the real output (CalcAlignedSizeByShape: bytes rounded up to 32, plus 32); execute_async
refuses it (145000, older GE's "data_buf.data is nullptr"; UNCONFIRMED for current CANN).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_models
import pytest
from emulator_helpers import D2H, H2D, dataset_of, malloc
from onnx_models import KEEP_FP32

from ge_python_backend import emulator
from ge_python_backend.emulator import acl
from ge_python_backend.emulator.omfile import OmCompileError, OmModel, compile_onnx

pytestmark = pytest.mark.usefixtures("clean_acl")


@pytest.fixture(scope="module")
def om_range(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("range")
    onnx_path = onnx_models.build_mlp(directory / "mlp.onnx")
    return compile_onnx(onnx_path, directory / "mlp", input_shape="x:1~16,16", **KEEP_FP32)


def _desc(om: Path) -> tuple[int, int]:
    model_id, ret = acl.mdl.load_from_file(str(om))
    assert ret == 0, acl.get_recent_err_msg()
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, model_id) == 0
    return model_id, desc


def _output_shape(dataset: int, index: int) -> tuple[int, ...]:
    handle = acl.mdl.get_dataset_tensor_desc(dataset, index)
    assert handle
    count = acl.get_tensor_desc_num_dims(handle)
    dims = [acl.get_tensor_desc_dim_v2(handle, i) for i in range(count)]
    assert all(ret == 0 for _, ret in dims)
    return tuple(d for d, _ in dims)


def _run(
    model_id: int,
    arrays: list[np.ndarray],
    out_sizes: list[int],
    *,
    descs: bool = True,
    asynchronous: bool = False,
) -> tuple[int, int, list[int], int]:
    """Copy `arrays` in (with tensor descs), execute; (ret, outputs dataset, out ptrs, stream).
    An out size 0 gives that output an empty data buffer (data 0, size 0)."""
    ptrs = []
    for array in arrays:
        data = np.ascontiguousarray(array).tobytes()
        ptr = malloc(max(len(data), 1))
        assert acl.rt.memcpy(ptr, len(data), acl.util.bytes_to_ptr(data), len(data), H2D) == 0
        ptrs.append((ptr, len(data)))
    inputs = dataset_of(ptrs)
    if descs:
        for i, array in enumerate(arrays):
            desc = acl.create_tensor_desc(0, list(array.shape), 2)
            assert acl.mdl.set_dataset_tensor_desc(inputs, desc, i) == (inputs, 0)
            acl.destroy_tensor_desc(desc)
    out_ptrs = [malloc(size) if size else 0 for size in out_sizes]  # 0: an empty buffer
    outputs = dataset_of(list(zip(out_ptrs, out_sizes)))
    stream = 0
    if asynchronous:
        stream, ret = acl.rt.create_stream()
        assert ret == 0
        ret = acl.mdl.execute_async(model_id, inputs, outputs, stream)
    else:
        ret = acl.mdl.execute(model_id, inputs, outputs)
    return ret, outputs, out_ptrs, stream


def _fetch(ptr: int, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    out = bytes(nbytes)
    if nbytes:
        assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), nbytes, ptr, nbytes, D2H) == 0
    return np.frombuffer(out, dtype).reshape(shape)


def test_data_dependent_output_reports_minus_one_and_size_zero(ctx: int, om_nonzero: Path) -> None:
    """NonZero's count of rows is known only after running: get_output_dims has -1 (not the
    zeros probe's 0) and get_output_size_by_index 0 (unbounded); the scalar stays a scalar."""
    _, desc = _desc(om_nonzero)
    dims, ret = acl.mdl.get_output_dims(desc, 0)
    assert ret == 0 and dims["dims"] == [2, -1]
    assert acl.mdl.get_output_size_by_index(desc, 0) == 0
    scalar, ret = acl.mdl.get_output_dims(desc, 1)
    assert ret == 0 and scalar["dimCount"] == 0 and scalar["dims"] == []
    assert acl.mdl.get_output_size_by_index(desc, 1) == 8
    ranges, ret = acl.mdl.get_input_dims_range(desc, 0)
    assert ret == 0 and ranges == {"rangeCount": 2, "range": [[4, 4], [4, 4]]}


@pytest.mark.parametrize("asynchronous", [False, True])
def test_output_descs_hold_each_execution_real_shape(
    ctx: int, om_nonzero: Path, asynchronous: bool
) -> None:
    """Every execute makes new output descs with that execution's dims (async: final once the
    stream is synchronized); the rows match onnxruntime; the scalar output is served as []."""
    model_id, _ = _desc(om_nonzero)
    rng = np.random.default_rng(3)
    seen = set()
    for _ in range(3):
        x = rng.random((4, 4), dtype=np.float32)
        ret, outputs, out_ptrs, stream = _run(
            model_id, [x], [4 * 4 * 2 * 8, 8], asynchronous=asynchronous
        )
        assert ret == 0, acl.get_recent_err_msg()
        if stream:
            assert acl.rt.synchronize_stream(stream) == 0
        want = onnx_models.reference(om_nonzero, [x])
        shape = _output_shape(outputs, 0)
        assert shape == want["indices"].shape
        np.testing.assert_array_equal(_fetch(out_ptrs[0], shape, np.int64), want["indices"])
        assert _output_shape(outputs, 1) == ()
        assert _fetch(out_ptrs[1], (), np.int64) == want["count"]
        seen.add(acl.mdl.get_dataset_tensor_desc(outputs, 0))
        seen.add(shape)
    assert len(seen) > 2


def test_too_small_output_buffer_is_refused(ctx: int, om_nonzero: Path) -> None:
    """GE checks a dynamic output's buffer against the bytes it needs and says so (RT2
    TensorToOut; code UNCONFIRMED: 145000, what the emulator gives for every too-small buffer)."""
    model_id, _ = _desc(om_nonzero)
    x = np.ones((4, 4), np.float32)
    ret, *_ = _run(model_id, [x], [8, 8])
    assert ret == 145000
    assert "given buffer size 8 is less than output tensor size 256" in acl.get_recent_err_msg()


def _buffer(dataset: int, index: int) -> tuple[int, int, int]:
    """(data buffer, its address, its size) of output `index`."""
    buf = acl.mdl.get_dataset_buffer(dataset, index)
    return buf, acl.get_data_buffer_addr(buf), acl.get_data_buffer_size_v2(buf)


def _reserved(size: int) -> int:
    return (size + 31) // 32 * 32 + 32  # what the runtime reserves for malloc(size)


def test_sync_execute_allocates_empty_output_buffers(ctx: int, om_nonzero: Path) -> None:
    """Both outputs get empty buffers: `count` (size 8) is allocated before the run with the
    model's size, `indices` (size 0: unbounded) after it with GE's size of the real output;
    each is device memory of the device (get_mem_info drops by what malloc would reserve),
    holds the answer, and is released by rt.free; the buffer is reset by update_data_buffer.
    Not reset, the buffer is the caller's again: a larger answer then fails, naming the size."""
    model_id, _ = _desc(om_nonzero)
    free_at_start = acl.rt.get_mem_info(1)[0]
    live_at_start = emulator.stats()["live_device_allocations"]
    rng = np.random.default_rng(5)
    x = rng.random((4, 4), dtype=np.float32)
    ret, outputs, out_ptrs, _ = _run(model_id, [x], [0, 0])
    assert ret == 0, acl.get_recent_err_msg()
    assert out_ptrs == [0, 0]
    after_run = acl.rt.get_mem_info(1)[0]
    with_input = free_at_start - _reserved(x.nbytes)  # the input buffer _run made
    want = onnx_models.reference(om_nonzero, [x])
    shape = _output_shape(outputs, 0)
    assert shape == want["indices"].shape
    nbytes = want["indices"].nbytes
    indices_buf, indices_ptr, indices_size = _buffer(outputs, 0)
    count_buf, count_ptr, count_size = _buffer(outputs, 1)
    assert indices_ptr and count_ptr
    assert indices_size == (nbytes + 31) // 32 * 32 + 32 and count_size == 8
    assert with_input - after_run == _reserved(indices_size) + _reserved(8)
    np.testing.assert_array_equal(_fetch(indices_ptr, shape, np.int64), want["indices"])
    assert _fetch(count_ptr, (), np.int64) == want["count"]
    stats = emulator.stats()
    assert stats["live_device_allocations"] == live_at_start + 3  # input, indices, count
    assert stats["output_allocations"] >= 2
    # a buffer not reset is the caller's: the answer to all ones needs 256 bytes
    assert indices_size < 256
    inputs, ones_ptr = _inputs_of(model_id, np.ones((4, 4), np.float32))
    assert acl.mdl.execute(model_id, inputs, outputs) == 145000
    assert f"given buffer size {indices_size} is less than output tensor size 256" in (
        acl.get_recent_err_msg()
    )
    assert _buffer(outputs, 0) == (indices_buf, indices_ptr, indices_size)
    assert acl.rt.free(ones_ptr) == 0
    for buf, ptr in ((indices_buf, indices_ptr), (count_buf, count_ptr)):
        assert acl.rt.free(ptr) == 0
        assert acl.update_data_buffer(buf, 0, 0) == 0
    assert acl.rt.get_mem_info(1)[0] == with_input


def _inputs_of(model_id: int, x: np.ndarray) -> tuple[int, int]:
    """An input dataset holding `x` on the device, with its tensor desc; (dataset, ptr)."""
    data = x.tobytes()
    ptr = malloc(len(data))
    assert acl.rt.memcpy(ptr, len(data), acl.util.bytes_to_ptr(data), len(data), H2D) == 0
    inputs = dataset_of([(ptr, len(data))])
    desc = acl.create_tensor_desc(0, list(x.shape), 2)
    assert acl.mdl.set_dataset_tensor_desc(inputs, desc, 0) == (inputs, 0)
    acl.destroy_tensor_desc(desc)
    return inputs, ptr


def test_an_empty_answer_gets_ge_smallest_tensor(ctx: int, om_nonzero: Path) -> None:
    """No element above the threshold: `indices` is [2, 0], 0 bytes, for which GE's size is
    32 (never 0), so ACL allocates 32 bytes and the desc says [2, 0]."""
    model_id, _ = _desc(om_nonzero)
    ret, outputs, *_ = _run(model_id, [np.zeros((4, 4), np.float32)], [0, 8])
    assert ret == 0, acl.get_recent_err_msg()
    assert _output_shape(outputs, 0) == (2, 0)
    _, ptr, size = _buffer(outputs, 0)
    assert ptr and size == 32
    assert acl.rt.free(ptr) == 0


def test_static_model_empty_output_buffers_get_the_model_sizes(ctx: int, om_static: Path) -> None:
    """A static model's outputs have sizes: ACL allocates each before the run."""
    model_id, desc = _desc(om_static)
    x = np.random.default_rng(2).random((4, 16), dtype=np.float32)
    ret, outputs, *_ = _run(model_id, [x], [0, 0], descs=False)
    assert ret == 0, acl.get_recent_err_msg()
    want = onnx_models.reference(om_static, [x])
    for index, name in enumerate(("y", "z")):
        _, ptr, size = _buffer(outputs, index)
        assert size == acl.mdl.get_output_size_by_index(desc, index)
        got = _fetch(ptr, want[name].shape, np.float32)
        np.testing.assert_allclose(got, want[name], rtol=1e-5)
        assert acl.rt.free(ptr) == 0


def test_execute_async_refuses_an_empty_output_buffer(ctx: int, om_nonzero: Path) -> None:
    """ACL allocates only for the synchronous execute; the async call gets the empty buffer
    through to GE, which refuses it (145000; nothing queued, nothing allocated)."""
    model_id, _ = _desc(om_nonzero)
    allocations = emulator.stats()["output_allocations"]
    ret, *_ = _run(model_id, [np.ones((4, 4), np.float32)], [0, 8], asynchronous=True)
    assert ret == 145000
    message = acl.get_recent_err_msg()
    assert "data_buf.data is nullptr, index=0" in message and "synchronous" in message
    assert emulator.stats()["output_allocations"] == allocations


def test_shape_range_input(ctx: int, om_range: Path) -> None:
    """`--input_shape x:1~16,16`: dims -1, range [[1,16],[16,16]], size at the upper bound;
    the outputs follow with -1 and their bounded size; each execution takes its dims from the
    input's tensor desc; a shape outside the range, or no desc, is 100000."""
    model_id, desc = _desc(om_range)
    dims, _ = acl.mdl.get_input_dims(desc, 0)
    assert dims["dims"] == [-1, 16]
    assert acl.mdl.get_input_dims_range(desc, 0) == (
        {"rangeCount": 2, "range": [[1, 16], [16, 16]]},
        0,
    )
    assert acl.mdl.get_input_size_by_index(desc, 0) == 16 * 16 * 4
    assert acl.mdl.get_output_dims(desc, 0)[0]["dims"] == [-1, 8]
    assert acl.mdl.get_output_size_by_index(desc, 0) == 16 * 8 * 4
    assert acl.mdl.get_dynamic_batch(desc)[0]["batchCount"] == 0
    for rows in (1, 5, 16):
        x = np.random.default_rng(rows).random((rows, 16), dtype=np.float32)
        ret, outputs, out_ptrs, _ = _run(model_id, [x], [16 * 8 * 4, 16 * 4])
        assert ret == 0, acl.get_recent_err_msg()
        want = onnx_models.reference(om_range, [x])
        assert _output_shape(outputs, 0) == (rows, 8)
        np.testing.assert_allclose(_fetch(out_ptrs[0], (rows, 8), np.float32), want["y"], 1e-5)
    x = np.zeros((17, 16), np.float32)
    assert _run(model_id, [x], [16 * 8 * 4, 16 * 4])[0] == 100000
    assert "out of its shape range 1~16,16" in acl.get_recent_err_msg()
    assert _run(model_id, [x[:2]], [16 * 8 * 4, 16 * 4], descs=False)[0] == 100000


def test_gear_model_has_no_dims_range(ctx: int, om_dynamic_batch: Path) -> None:
    _, desc = _desc(om_dynamic_batch)
    assert acl.mdl.get_input_dims_range(desc, 0) == ({"rangeCount": 0, "range": []}, 0)


def test_compile_ranges_as_atc(tmp_path: Path) -> None:
    """-1 without gears is a range of any size (size 0); ranges and gear options do not mix;
    ONNX dynamic dims that --input_shape leaves open are refused."""
    onnx_path = onnx_models.build_mlp(tmp_path / "mlp.onnx")
    om = OmModel.load(compile_onnx(onnx_path, tmp_path / "any", input_shape="x:-1,16", **KEEP_FP32))
    assert om.description.inputs[0].ranges == ((0, -1), (16, 16))
    assert om.description.inputs[0].upper_bytes() == 0
    with pytest.raises(OmCompileError, match="ranges lo~hi only without gear options"):
        compile_onnx(onnx_path, tmp_path / "bad", input_shape="x:1~4,16", dynamic_batch_size="1,2")
    with pytest.raises(OmCompileError, match="that --input_shape does not give"):
        compile_onnx(onnx_path, tmp_path / "open")
