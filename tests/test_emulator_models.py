"""Emulated pyACL models: loading, descriptions, datasets, gears and execution."""

from __future__ import annotations

import ctypes
import struct
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from emulator_helpers import (
    D2H,
    H2D,
    MBATCH,
    Model,
    dataset_of,
    example_inputs,
    malloc,
    model_datasets,
    select,
)
from onnx_models import KEEP_FP32, reference, reference_session

from ge_python_backend.emulator import acl, set_timing
from ge_python_backend.emulator.omfile import MAGIC, compile_onnx

pytestmark = pytest.mark.usefixtures("clean_acl")


CASES = [
    ("om_static", "static", [()]),
    ("om_dynamic_batch", "batch", [(1,), (2,), (4,), (8,)]),
    ("om_mixed_types", "batch", [(1,), (4,)]),
    ("om_hw", "hw", [(16, 16), (32, 32)]),
    ("om_dims", "dims", [(8, 8), (16, 16), (32, 32)]),
]


@pytest.mark.parametrize(("fixture", "kind", "gears"), CASES)
def test_outputs_equal_onnxruntime_for_every_gear(
    ctx: int, request: pytest.FixtureRequest, fixture: str, kind: str, gears: list[Any]
) -> None:
    om = request.getfixturevalue(fixture)
    model = Model(om)
    rng = np.random.default_rng(7)
    for gear in gears:
        arrays = example_inputs(fixture, gear, rng)
        if kind != "static":
            dims = [d for a in arrays for d in a.shape]
            assert select(model, kind, gear, dims) == 0, acl.get_recent_err_msg()
            assert model.mbatch_values(len(gear)) == gear
        model.feed(arrays)
        assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0, (
            acl.get_recent_err_msg()
        )
        expected = list(reference(om, arrays).values())
        actual = model.fetch()
        assert [a.shape for a in actual] == [e.shape for e in expected]
        for got, want in zip(actual, expected):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_static_description(ctx: int, om_static: Path) -> None:
    model = Model(om_static)
    desc = model.desc
    assert acl.mdl.get_num_inputs(desc) == 1
    assert acl.mdl.get_num_outputs(desc) == 2
    assert model.in_sizes == [4 * 16 * 4]
    assert model.out_sizes == [4 * 8 * 4, 4 * 1 * 4]
    assert acl.mdl.get_input_dims(desc, 0) == ({"name": "x", "dimCount": 2, "dims": [4, 16]}, 0)
    # ATC names ONNX outputs op:idx:name (aclmdlGetOutputNameByIndex.md); the dims calls too
    assert acl.mdl.get_output_dims(desc, 1) == (
        {"name": "ReduceSum_3:0:z", "dimCount": 2, "dims": [4, 1]},
        0,
    )
    assert acl.mdl.get_cur_output_dims(desc, 0) == (
        {"name": "Relu_2:0:y", "dimCount": 2, "dims": [4, 8]},
        0,
    )
    assert acl.mdl.get_input_data_type(desc, 0) == 0
    assert acl.mdl.get_output_data_type(desc, 0) == 0
    assert acl.mdl.get_input_format(desc, 0) == 2  # ND: --input_format NCHW names 4-D inputs only
    assert acl.mdl.get_output_format(desc, 0) == 2  # ND
    assert acl.mdl.get_input_name_by_index(desc, 0) == "x"
    assert acl.mdl.get_output_name_by_index(desc, 1) == "ReduceSum_3:0:z"
    assert acl.mdl.get_input_index_by_name(desc, "x") == (0, 0)
    assert acl.mdl.get_output_index_by_name(desc, "ReduceSum_3:0:z") == (1, 0)
    assert acl.mdl.get_input_index_by_name(desc, MBATCH) == (-1, 100000)
    assert "no input named" in acl.get_recent_err_msg()
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 0, "batch": []}, 0)
    assert acl.mdl.get_dynamic_hw(desc, -1) == ({"hwCount": 0, "hw": []}, 0)
    assert acl.mdl.get_input_dynamic_gear_count(desc, -1) == (0, 0)
    assert acl.mdl.get_input_dynamic_dims(desc, -1, 0) == ([], 0)


def test_bad_desc_and_index_give_the_documented_failure_values(ctx: int, om_static: Path) -> None:
    model = Model(om_static)
    desc = model.desc
    assert acl.mdl.get_input_size_by_index(desc, 1) == 0
    assert acl.mdl.get_output_size_by_index(desc, -1) == 0
    assert acl.mdl.get_input_dims(desc, 5) == ({}, 100000)
    assert acl.mdl.get_cur_output_dims(desc, 2) == ({}, 100000)
    assert acl.mdl.get_input_data_type(desc, 3) == -1
    assert acl.mdl.get_output_format(desc, 3) == -1
    assert acl.mdl.get_input_name_by_index(desc, 3) is None
    empty = acl.mdl.create_desc()
    assert acl.mdl.get_num_inputs(empty) == 0
    assert "get_desc" in acl.get_recent_err_msg()
    assert acl.mdl.get_desc(empty, 99999) == 100011
    assert acl.mdl.destroy_desc(empty) == 0
    assert acl.mdl.destroy_desc(empty) == 100000
    assert acl.mdl.get_num_outputs(empty) == 0
    assert acl.mdl.get_dynamic_batch(empty) == ({}, 100000)


def test_batch_description(ctx: int, om_dynamic_batch: Path) -> None:
    desc = Model(om_dynamic_batch).desc
    assert acl.mdl.get_num_inputs(desc) == 2
    assert acl.mdl.get_input_dims(desc, 0) == ({"name": "x", "dimCount": 2, "dims": [-1, 16]}, 0)
    assert acl.mdl.get_input_size_by_index(desc, 0) == 8 * 16 * 4
    assert acl.mdl.get_input_dims(desc, 1) == ({"name": MBATCH, "dimCount": 1, "dims": [1]}, 0)
    assert acl.mdl.get_input_index_by_name(desc, MBATCH) == (1, 0)
    assert acl.mdl.get_input_size_by_index(desc, 1) == 8
    assert acl.mdl.get_input_data_type(desc, 1) == 9
    assert acl.mdl.get_input_format(desc, 1) == 2
    assert acl.mdl.get_output_dims(desc, 0) == (
        {"name": "Relu_2:0:y", "dimCount": 2, "dims": [8, 8]},
        0,
    )
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 4, "batch": [1, 2, 4, 8]}, 0)
    assert acl.mdl.get_dynamic_hw(desc, -1) == ({"hwCount": 0, "hw": []}, 0)
    assert acl.mdl.get_input_dynamic_gear_count(desc, -1) == (0, 0)


def test_hw_description(ctx: int, om_hw: Path) -> None:
    desc = Model(om_hw).desc
    assert acl.mdl.get_input_dims(desc, 0)[0]["dims"] == [1, 3, -1, -1]
    assert acl.mdl.get_input_size_by_index(desc, 0) == 3 * 32 * 32 * 4
    assert acl.mdl.get_input_dims(desc, 1) == ({"name": MBATCH, "dimCount": 1, "dims": [2]}, 0)
    assert acl.mdl.get_input_size_by_index(desc, 1) == 16
    assert acl.mdl.get_dynamic_hw(desc, -1) == ({"hwCount": 2, "hw": [[16, 16], [32, 32]]}, 0)
    assert acl.mdl.get_dynamic_hw(desc, 1) == ({"hwCount": 2, "hw": [[16, 16], [32, 32]]}, 0)
    assert acl.mdl.get_dynamic_hw(desc, 7) == ({}, 100000)
    assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 0, "batch": []}, 0)


def test_dims_description(ctx: int, om_dims: Path) -> None:
    desc = Model(om_dims).desc
    assert acl.mdl.get_num_inputs(desc) == 3
    assert acl.mdl.get_input_dims(desc, 1)[0]["dims"] == [1, -1]
    assert acl.mdl.get_input_dims(desc, 2) == ({"name": MBATCH, "dimCount": 1, "dims": [2]}, 0)
    assert acl.mdl.get_input_format(desc, 0) == 2
    assert acl.mdl.get_output_dims(desc, 0)[0]["dims"] == [1, 32, 4]
    assert acl.mdl.get_input_dynamic_gear_count(desc, -1) == (3, 0)
    assert acl.mdl.get_input_dynamic_dims(desc, -1, 3) == (
        [
            {"name": "", "dimCount": 4, "dims": [1, 8, 1, 8]},
            {"name": "", "dimCount": 4, "dims": [1, 16, 1, 16]},
            {"name": "", "dimCount": 4, "dims": [1, 32, 1, 32]},
        ],
        0,
    )
    assert acl.mdl.get_input_dynamic_dims(desc, -1, 4097) == (None, 100000)
    assert acl.mdl.get_input_dynamic_dims(desc, -1, 2) == (None, 100000)
    assert acl.mdl.get_input_dynamic_gear_count(desc, 0) == (0, 100000)


@pytest.mark.parametrize(
    ("fixture", "kind", "gear", "dims"),
    [
        ("om_dynamic_batch", "batch", (2,), []),
        ("om_hw", "hw", (32, 32), []),
        ("om_dims", "dims", (16, 16), [1, 16, 1, 16]),
    ],
)
def test_cur_output_dims_follow_the_selected_gear(
    ctx: int,
    request: pytest.FixtureRequest,
    fixture: str,
    kind: str,
    gear: tuple[int, ...],
    dims: list[int],
) -> None:
    model = Model(request.getfixturevalue(fixture))
    largest, _ = acl.mdl.get_output_dims(model.desc, 0)
    assert acl.mdl.get_cur_output_dims(model.desc, 0) == (largest, 0)
    assert select(model, kind, gear, dims) == 0
    current, ret = acl.mdl.get_cur_output_dims(model.desc, 0)
    expected = {"om_dynamic_batch": [2, 8], "om_hw": [1, 8], "om_dims": [1, 16, 4]}[fixture]
    assert (current["dims"], ret) == (expected, 0)
    assert model.mbatch_values(len(gear)) == gear


@pytest.mark.parametrize(
    ("fixture", "kind", "bad", "code"),
    [
        # GE returns 145013 for every kind (ge_executor.cc SetDynamicBatchSize,
        # SetDynamicImageSize, SetDynamicDims); the emulator used to return 145021 for HW/dims.
        ("om_dynamic_batch", "batch", (3,), 145013),
        ("om_hw", "hw", (16, 32), 145013),
        ("om_dims", "dims", (1, 8, 1, 16), 145013),
    ],
)
def test_set_refuses_values_that_are_not_gears(
    ctx: int,
    request: pytest.FixtureRequest,
    fixture: str,
    kind: str,
    bad: tuple[int, ...],
    code: int,
) -> None:
    model = Model(request.getfixturevalue(fixture))
    assert select(model, kind, bad, list(bad)) == code
    assert "gear" in acl.get_recent_err_msg()
    assert model.mbatch_values(1)[0] == struct.unpack("<q", b"\xa5" * 8)[0]


def test_set_calls_check_model_kind_index_and_dataset(
    ctx: int, om_dynamic_batch: Path, om_hw: Path, om_static: Path
) -> None:
    batch = Model(om_dynamic_batch)
    hw = Model(om_hw)
    static = Model(om_static)
    dims = {"dimCount": 2, "name": "", "dims": [4, 16]}
    # GE: a call of another gear kind, or any set_* on a static model, is 145013 (no gear
    # matches; ge_executor.cc); set_input_dynamic_dims with the full dims of a one-input batch
    # model selects its batch gear (SetDynamicDims matches them against the batch gears).
    assert acl.mdl.set_dynamic_hw_size(batch.model_id, batch.inputs, 1, 16, 16) == 145013
    assert acl.mdl.set_dynamic_batch_size(hw.model_id, hw.inputs, 1, 1) == 145013
    assert acl.mdl.set_input_dynamic_dims(batch.model_id, batch.inputs, 1, dims) == 0
    assert acl.mdl.set_dynamic_batch_size(static.model_id, static.inputs, 0, 4) == 145013
    assert "static" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_batch_size(batch.model_id, batch.inputs, 0, 4) == 100000
    assert acl.mdl.set_dynamic_batch_size(batch.model_id, 0xBAD, 1, 4) == 100000
    assert acl.mdl.set_dynamic_batch_size(424242, batch.inputs, 1, 4) == 100011
    short = dataset_of([(batch.in_ptrs[0], batch.in_sizes[0])])
    assert acl.mdl.set_dynamic_batch_size(batch.model_id, short, 1, 4) == 145011
    with pytest.raises(TypeError, match="set_input_dynamic_dims> args parse failed"):
        acl.mdl.set_input_dynamic_dims(batch.model_id, batch.inputs, 1, [1, 8])  # type: ignore[arg-type]
    bad_dims = {"dimCount": 3, "dims": [1, 8, 1, 8]}
    assert acl.mdl.set_input_dynamic_dims(batch.model_id, batch.inputs, 1, bad_dims) == 100000


@pytest.mark.parametrize(
    ("fixture", "code", "call"),
    [
        ("om_dynamic_batch", 145013, "set_dynamic_batch_size"),
        ("om_hw", 145013, "set_dynamic_hw_size"),
        ("om_dims", 145013, "set_input_dynamic_dims"),
    ],
)
def test_execute_without_a_set_call_fails(
    ctx: int, request: pytest.FixtureRequest, fixture: str, code: int, call: str
) -> None:
    model = Model(request.getfixturevalue(fixture))
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == code
    message = acl.get_recent_err_msg()
    assert "0xA5 poison" in message and call in message


def test_execute_reads_the_gear_from_the_buffer(ctx: int, om_dynamic_batch: Path) -> None:
    model = Model(om_dynamic_batch)
    value = struct.pack("<q", 3)
    ptr = model.in_ptrs[1]
    assert acl.rt.memcpy(ptr, 8, acl.util.bytes_to_ptr(value), 8, H2D) == 0
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 145013
    assert "holds [3]" in acl.get_recent_err_msg()
    value = struct.pack("<q", 2)
    assert acl.rt.memcpy(ptr, 8, acl.util.bytes_to_ptr(value), 8, H2D) == 0
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0


def test_two_datasets_of_one_model_id_on_one_stream_alternate_gears(
    ctx: int, om_dynamic_batch: Path
) -> None:
    """Two lanes (each its own datasets) of one loaded model on one stream: the gear travels in
    each input dataset's ascend_mbatch_shape_data (ACL keeps its value per dataset too:
    model.cpp aclmdlSetDynamicBatchSize sets the dataset's dynamicBatchSize), so one lane's
    set_dynamic_batch_size changes neither the other's execution nor its output dims. GE keeps
    the gear get_cur_output_dims reports per model id (davinci_model.cc SetDynamicSize,
    GetCurrentShape): the last set_* call's, on any dataset."""
    first = Model(om_dynamic_batch)
    second = model_datasets(first.desc)
    lanes = [(first.inputs, first.outputs), (second[0], second[1])]
    stream, _ = acl.rt.create_stream()
    rng = np.random.default_rng(4)
    for gears in [(2, 8), (8, 1), (4, 2)]:
        sent = []
        for (inputs, _), batch in zip(lanes, gears):  # both set before either runs
            ret = acl.mdl.set_dynamic_batch_size(first.model_id, inputs, first.mbatch, batch)
            assert ret == 0
            x = rng.standard_normal((batch, 16)).astype(np.float32)
            _write(inputs, 0, x.tobytes())
            sent.append(x)
        for inputs, outputs in lanes:
            assert acl.mdl.execute_async(first.model_id, inputs, outputs, stream) == 0
        assert acl.rt.synchronize_stream(stream) == 0, acl.get_recent_err_msg()
        for (_, outputs), x in zip(lanes, sent):
            for index, want in enumerate(reference(om_dynamic_batch, [x]).values()):
                got = _read_output(outputs, index)
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        current, _ = acl.mdl.get_cur_output_dims(first.desc, 0)
        assert current["dims"][0] == gears[-1]  # the model's last set_*
    assert acl.rt.destroy_stream(stream) == 0


def _buffer(dataset: int, index: int) -> tuple[int, int]:
    buf = acl.mdl.get_dataset_buffer(dataset, index)
    return acl.get_data_buffer_addr(buf), acl.get_data_buffer_size_v2(buf)


def _write(dataset: int, index: int, data: bytes) -> None:
    ptr, size = _buffer(dataset, index)
    assert acl.rt.memcpy(ptr, size, acl.util.bytes_to_ptr(data), len(data), H2D) == 0


def _read_output(dataset: int, index: int) -> np.ndarray:
    """Output `index` of the execution that filled `dataset`, in the dims of its tensor desc."""
    desc = acl.mdl.get_dataset_tensor_desc(dataset, index)
    dims = [acl.get_tensor_desc_dim_v2(desc, axis)[0] for axis in range(2)]
    dtype = np.dtype(np.float32)
    out = bytes(int(np.prod(dims)) * dtype.itemsize)
    ptr, _ = _buffer(dataset, index)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), len(out), ptr, len(out), D2H) == 0
    return np.frombuffer(out, dtype).reshape(dims)


def test_execute_checks_the_datasets(ctx: int, om_dynamic_batch: Path) -> None:
    model = Model(om_dynamic_batch)
    mid = model.model_id
    assert select(model, "batch", (1,), []) == 0
    one_input = dataset_of([(model.in_ptrs[0], model.in_sizes[0])])
    assert acl.mdl.execute(mid, one_input, model.outputs) == 100017
    assert MBATCH in acl.get_recent_err_msg()
    one_output = dataset_of([(model.out_ptrs[0], model.out_sizes[0])])
    assert acl.mdl.execute(mid, model.inputs, one_output) == 100018
    assert acl.mdl.execute(mid, model.inputs, 0xBAD) == 100000
    assert acl.mdl.execute(999999, model.inputs, model.outputs) == 100011
    # No set_* call on this dataset: GE checks sizes and accepts up to 64 bytes short
    # (DavinciModel::CheckUserAndModelSize); shorter is 145000 (the emulator said 145006).
    small = malloc(model.in_sizes[0] - 65)
    too_small = dataset_of([(small, model.in_sizes[0] - 65), (model.in_ptrs[1], 8)])
    assert acl.mdl.execute(mid, too_small, model.outputs) == 145000
    message = acl.get_recent_err_msg()  # GE's E13025 names the size the model needs
    assert (
        f"The provided {model.in_sizes[0] - 65} bytes of buffer size plus the aligned 64" in message
    )
    assert f"less than the tensor size {model.in_sizes[0]} bytes required by the model" in message
    lying = dataset_of([(small, model.in_sizes[0]), (model.in_ptrs[1], 8)])
    assert acl.mdl.execute(mid, lying, model.outputs) == 145007
    host, _ = acl.rt.malloc_host(model.in_sizes[0])
    on_host = dataset_of([(host, model.in_sizes[0]), (model.in_ptrs[1], 8)])
    assert acl.mdl.execute(mid, on_host, model.outputs) == 145007
    assert "ACL_HOST" in acl.get_recent_err_msg()
    data = bytes(model.in_sizes[0])
    pageable = dataset_of([(acl.util.bytes_to_ptr(data), len(data)), (model.in_ptrs[1], 8)])
    assert acl.mdl.execute(mid, pageable, model.outputs) == 145007
    buffer = acl.mdl.get_dataset_buffer(model.outputs, 1)
    assert acl.destroy_data_buffer(buffer) == 0
    assert acl.mdl.execute(mid, model.inputs, model.outputs) == 100000
    assert "destroyed" in acl.get_recent_err_msg()


def test_execute_refuses_memory_of_another_device(ctx: int, om_static: Path) -> None:
    model = Model(om_static)
    assert acl.rt.set_device(1) == 0
    other = malloc(model.in_sizes[0])
    assert acl.rt.set_context(ctx) == 0
    inputs = dataset_of([(other, model.in_sizes[0])])
    assert acl.mdl.execute(model.model_id, inputs, model.outputs) == 145007
    assert "device 1" in acl.get_recent_err_msg()


def test_a_model_is_used_only_under_its_loading_context(ctx: int, om_static: Path) -> None:
    model = Model(om_static)
    model.feed([np.zeros((4, 16), np.float32)])
    explicit, _ = acl.rt.create_context(0)
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 107004
    assert "loaded under context" in acl.get_recent_err_msg()
    assert acl.mdl.unload(model.model_id) == 107004
    assert acl.rt.set_context(ctx) == 0
    assert acl.rt.destroy_context(explicit) == 0
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    assert acl.mdl.unload(model.model_id) == 0
    assert acl.mdl.unload(model.model_id) == 100011
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 100011
    assert acl.mdl.get_cur_output_dims(model.desc, 0) == ({}, 100011)
    assert acl.mdl.get_output_dims(model.desc, 0)[1] == 0


def test_execute_async_validates_now_and_runs_on_the_stream(
    ctx: int, om_dynamic_batch: Path
) -> None:
    model = Model(om_dynamic_batch)
    stream, _ = acl.rt.create_stream()
    assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, stream) == 145013
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    model.feed([x])
    assert select(model, "batch", (4,), []) == 0
    assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    np.testing.assert_allclose(
        model.fetch()[0], reference(om_dynamic_batch, [x])["y"], rtol=1e-5, atol=1e-6
    )
    explicit, _ = acl.rt.create_context(0)
    other_stream, _ = acl.rt.create_stream()
    assert acl.rt.set_context(ctx) == 0
    assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, other_stream) == (
        107003
    )
    assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, 0) == 0
    assert acl.rt.synchronize_stream(0) == 0
    assert acl.rt.destroy_stream(stream) == 0


def test_unload_before_the_queued_execute_runs_fails_at_synchronize(
    ctx: int, om_static: Path
) -> None:
    model = Model(om_static)
    stream, _ = acl.rt.create_stream()
    set_timing("copy_gbps=0.000001")
    host, _ = acl.rt.malloc_host(200)
    assert acl.rt.memcpy_async(malloc(200), 200, host, 200, H2D, stream) == 0
    assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, stream) == 0
    assert acl.mdl.unload(model.model_id) == 0
    assert acl.rt.synchronize_stream(stream) == 100011
    assert "queued acl.mdl.execute_async failed" in acl.get_recent_err_msg()


def test_load_errors_carry_codes_and_messages(ctx: int, tmp_path: Path, om_static: Path) -> None:
    assert acl.mdl.load_from_file(str(tmp_path / "missing.om")) == (0, 100014)
    assert "missing.om" in acl.get_recent_err_msg()
    garbage = tmp_path / "garbage.om"
    garbage.write_bytes(b"not a model at all" * 4)
    assert acl.mdl.load_from_file(str(garbage)) == (0, 100013)
    real = tmp_path / "real.om"
    real.write_bytes(b"IMOD" + bytes(100))
    assert acl.mdl.load_from_file(str(real)) == (0, 100012)
    assert "real pyACL" in acl.get_recent_err_msg()
    truncated = tmp_path / "truncated.om"
    truncated.write_bytes(om_static.read_bytes()[:-10])
    assert acl.mdl.load_from_file(str(truncated)) == (0, 100013)
    assert om_static.read_bytes().startswith(MAGIC)


def test_load_from_mem_reads_host_memory(ctx: int, om_static: Path) -> None:
    data = om_static.read_bytes()
    model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(data), len(data))
    assert ret == 0 and model_id >= 1
    first, _ = acl.mdl.load_from_file(str(om_static))
    assert first == model_id + 1
    host, _ = acl.rt.malloc_host(len(data))
    ctypes.memmove(host, data, len(data))
    assert acl.mdl.load_from_mem(host, len(data))[1] == 0
    assert acl.mdl.load_from_mem(host, len(data) + 1) == (0, 100000)
    dev = malloc(len(data))
    assert acl.mdl.load_from_mem(dev, len(data)) == (0, 100000)
    assert "device memory" in acl.get_recent_err_msg()
    assert acl.mdl.load_from_mem(acl.util.bytes_to_ptr(data), len(data) - 5) == (0, 100013)


def test_dataset_calls(ctx: int) -> None:
    dataset = acl.mdl.create_dataset()
    ptr = malloc(64)
    buf = acl.create_data_buffer(ptr, 64)
    assert acl.mdl.get_dataset_num_buffers(dataset) == 0
    assert acl.mdl.add_dataset_buffer(dataset, buf) == (dataset, 0)
    assert acl.mdl.add_dataset_buffer(dataset, 0xBAD) == (dataset, 100000)
    assert acl.mdl.get_dataset_num_buffers(dataset) == 1
    assert acl.mdl.get_dataset_buffer(dataset, 0) == buf
    assert acl.mdl.get_dataset_buffer(dataset, 1) == 0
    assert acl.mdl.destroy_dataset(dataset) == 0
    assert acl.mdl.destroy_dataset(dataset) == 100000
    assert acl.mdl.get_dataset_num_buffers(dataset) == 0
    assert acl.mdl.add_dataset_buffer(dataset, buf) == (dataset, 100000)
    assert acl.get_data_buffer_addr(buf) == ptr  # the dataset does not own its buffers


def test_threads_sharing_a_context_execute_concurrently(ctx: int, om_static: Path) -> None:
    models = [Model(om_static) for _ in range(4)]
    session = reference_session(om_static)

    def expected(x: np.ndarray) -> np.ndarray:
        return np.asarray(session.run(["y"], {"x": x})[0])

    errors: list[str] = []

    def work(model: Model, seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            assert acl.rt.set_context(ctx) == 0
            for _ in range(10):
                x = rng.standard_normal((4, 16)).astype(np.float32)
                model.feed([x])
                assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
                np.testing.assert_allclose(model.fetch()[0], expected(x), rtol=1e-5, atol=1e-6)
        except AssertionError as exc:
            errors.append(f"{exc} {acl.get_recent_err_msg()}")

    threads = [threading.Thread(target=work, args=(m, i)) for i, m in enumerate(models)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_sizes_cover_every_gear_when_inputs_do_not_grow_together(ctx: int, tmp_path: Path) -> None:
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "a"], ["a2"]), helper.make_node("Add", ["b", "b"], ["b2"])],
        "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, "S"]) for n in ("a", "b")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, "S"]) for n in ("a2", "b2")],
    )
    onnx_path = tmp_path / "two.onnx"
    save(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
        onnx_path,
    )
    om = compile_onnx(
        onnx_path,
        tmp_path / "two",
        input_shape="a:1,-1;b:1,-1",
        dynamic_dims="8,32;16,8",
        **KEEP_FP32,
    )
    model = Model(om)
    assert model.in_sizes == [16 * 4, 32 * 4, 2 * 8]
    assert model.out_sizes == [16 * 4, 32 * 4]
    for sa, sb in ((8, 32), (16, 8)):
        a = np.arange(sa, dtype=np.float32).reshape(1, sa)
        b = np.arange(sb, dtype=np.float32).reshape(1, sb)
        assert select(model, "dims", (sa, sb), [1, sa, 1, sb]) == 0
        model.feed([a, b])
        assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
        got = model.fetch()
        np.testing.assert_array_equal(got[0], 2 * a)
        np.testing.assert_array_equal(got[1], 2 * b)
