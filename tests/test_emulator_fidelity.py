"""The emulator against the public pyACL and GE sources (issue 12): each test names its source.

Sources: pyACL binding `hicann/runtime` python/pyACL (mdl/mdl_wrap.cpp, py_init_acl.cpp); ACL's
runtime `hicann/runtime` src/acl/aclrt_impl (device.cpp, memory.cpp); ACL's model layer
`hicann/ge` api/acl/acl_model/model (model.cpp, model_om2.cpp); GE `hicann/ge`
runtime/v1/executor/ge_executor.cc and runtime/v1/graph/load/model_manager/davinci_model.cc
(older copy: `mindspore-ai/graphengine` ge/graph/load/model_manager/davinci_model.cc,
ge/ir_build/atc_ir_common.cc).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import onnx_models
import pytest
from emulator_helpers import (
    D2D,
    D2H,
    H2D,
    H2H,
    Model,
    dataset_of,
    example_inputs,
    malloc,
    select,
)
from onnx import TensorProto, helper
from onnx_models import KEEP_FP32, reference

from ge_python_backend.emulator import acl, set_timing, stats
from ge_python_backend.emulator.omfile import OmCompileError, compile_onnx

pytestmark = pytest.mark.usefixtures("clean_acl")


# ----------------------------------------------------------------------------- dims gear order


def test_dims_gears_are_listed_in_input_shape_order(ctx: int, om_b_first: Path) -> None:
    """hicann/ge model_om2.cpp aclmdlGetInputDynamicDimsImplOm2: dims concatenated over
    dataNameOrder (ATC's --input_shape order), not the model's input order."""
    model = Model(om_b_first)
    assert acl.mdl.get_input_name_by_index(model.desc, 0) == "a"  # graph order for the inputs
    assert acl.mdl.get_input_dims(model.desc, 0)[0]["dims"] == [1, -1]
    count, ret = acl.mdl.get_input_dynamic_gear_count(model.desc, -1)
    assert (count, ret) == (2, 0)
    gears, ret = acl.mdl.get_input_dynamic_dims(model.desc, -1, count)
    assert ret == 0
    # gear 0 of --dynamic_dims "4,8;8,16" is b=4, a=8: listed b first, as --input_shape names it
    assert [g["dims"] for g in gears] == [[1, 4, 1, 8], [1, 8, 1, 16]]


def test_set_input_dynamic_dims_takes_input_shape_order(ctx: int, om_b_first: Path) -> None:
    """ge_executor.cc GetCurDynamicDims walks user_designate_shape_order; the gear b=4, a=8
    runs a of shape (1, 8) and b of shape (1, 4)."""
    model = Model(om_b_first)
    dims = {"dimCount": 4, "name": "", "dims": [1, 4, 1, 8]}
    assert acl.mdl.set_input_dynamic_dims(model.model_id, model.inputs, 2, dims) == 0
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 8)).astype(np.float32)
    b = rng.standard_normal((1, 4)).astype(np.float32)
    model.feed([a, b])
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    (out,) = model.fetch()
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=1))
    # graph order ([a dims, b dims] = [1, 8, 1, 4]) is no gear
    wrong = {"dimCount": 4, "name": "", "dims": [1, 8, 1, 4]}
    assert acl.mdl.set_input_dynamic_dims(model.model_id, model.inputs, 2, wrong) == 145013


def test_set_input_dynamic_dims_checks_count_and_static_dims(ctx: int, om_b_first: Path) -> None:
    """ge_executor.cc GetCurDynamicDims: a wrong number of dims or a changed static dim is
    ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID (145012); model.cpp: dimCount 0 is 100000."""
    model = Model(om_b_first)
    short = {"dimCount": 3, "name": "", "dims": [1, 4, 1]}
    assert acl.mdl.set_input_dynamic_dims(model.model_id, model.inputs, 2, short) == 145012
    static_changed = {"dimCount": 4, "name": "", "dims": [2, 4, 1, 8]}
    assert acl.mdl.set_input_dynamic_dims(model.model_id, model.inputs, 2, static_changed) == 145012
    empty = {"dimCount": 0, "name": "", "dims": []}
    assert acl.mdl.set_input_dynamic_dims(model.model_id, model.inputs, 2, empty) == 100000


def test_compiler_accepts_an_input_shape_order_other_than_the_graphs(om_b_first: Path) -> None:
    from ge_python_backend.emulator.omfile import OmModel

    desc = OmModel.load(om_b_first).description
    assert desc.shape_order == ("b", "a")
    assert desc.input_shapes((4, 8)) == [(1, 8), (1, 4)]  # graph order: a, b


def test_dims_need_nd_format_and_one_to_four_dims(tmp_path: Path) -> None:
    """graphengine ge/ir_build/atc_ir_common.cc CheckDynamicDimsInputShapeValid: E10001 for
    --input_format other than ND, and for an --input_shape entry of more than 4 dims."""
    onnx_path = onnx_models.build_concat(tmp_path / "concat.onnx")
    with pytest.raises(OmCompileError, match=r"E10001.*\[NCHW\].*--input_format.*must be ND"):
        compile_onnx(
            onnx_path,
            tmp_path / "x",
            input_shape="a:1,-1;b:1,-1",
            dynamic_dims="4,4;8,8",
            input_format="NCHW",
        )
    om = compile_onnx(
        onnx_path, tmp_path / "y", input_shape="a:1,-1;b:1,-1", dynamic_dims="4,4", **KEEP_FP32
    )
    from ge_python_backend.emulator.omfile import OmModel

    assert OmModel.load(om).header["flags"]["input_format"] == "ND"  # the default with dims
    path = tmp_path / "five.onnx"
    node = helper.make_node("Identity", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "five",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 1, "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 1, "S"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    with pytest.raises(OmCompileError, match=r"E10001.*\[5\].*Dim num must within \[1, 4\]"):
        compile_onnx(path, tmp_path / "z", input_shape="x:1,1,1,1,-1", dynamic_dims="2;4")


# ----------------------------------------------------------------------------- gear codes


def test_set_input_dynamic_dims_on_batch_and_hw_models(
    ctx: int, om_hw: Path, om_add_mul: Path
) -> None:
    """ge_executor.cc SetDynamicDims / IsDynmaicDimsSizeMatchModel: the values at the -1 dims
    are matched against the model's gears of any kind. A one-input HW model takes its HW gear;
    a two-input batch model has one value per input ([b, b]) against gears of one value, so no
    gear matches: 145013."""
    hw = Model(om_hw)
    dims = {"dimCount": 4, "name": "", "dims": [1, 3, 16, 16]}
    assert acl.mdl.set_input_dynamic_dims(hw.model_id, hw.inputs, hw.mbatch, dims) == 0
    assert hw.mbatch_values(2) == (16, 16)
    two = Model(om_add_mul)
    dims = {"dimCount": 4, "name": "", "dims": [2, 4, 2, 4]}
    assert acl.mdl.set_input_dynamic_dims(two.model_id, two.inputs, two.mbatch, dims) == 145013


def test_zero_batch_or_hw_is_invalid_param(ctx: int, om_dynamic_batch: Path, om_hw: Path) -> None:
    """hicann/ge model.cpp aclmdlSetDynamicBatchSizeImpl / aclmdlSetDynamicHWSizeImpl: 0 is
    ACL_ERROR_INVALID_PARAM."""
    batch = Model(om_dynamic_batch)
    assert acl.mdl.set_dynamic_batch_size(batch.model_id, batch.inputs, 1, 0) == 100000
    hw = Model(om_hw)
    assert acl.mdl.set_dynamic_hw_size(hw.model_id, hw.inputs, 1, 0, 16) == 100000


# ----------------------------------------------------------------------------- one model id


def test_mixing_execute_and_execute_async_is_refused(ctx: int, om_static: Path) -> None:
    """davinci_model.cc InitModelStream: "NnExecute not support mix execute" (GE INTERNAL_ERROR,
    which ACL_GET_ERRCODE_GE maps to ACL_ERROR_GE_FAILURE 500002)."""
    model = Model(om_static)
    stream, _ = acl.rt.create_stream()
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, stream) == 500002
    assert "mix execute" in acl.get_recent_err_msg()
    other = Model(om_static)
    assert acl.mdl.execute_async(other.model_id, other.inputs, other.outputs, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.mdl.execute(other.model_id, other.inputs, other.outputs) == 500002
    assert acl.rt.destroy_stream(stream) == 0


def test_one_model_id_on_two_streams_at_once_is_refused(ctx: int, om_static: Path) -> None:
    """GE has no check here: NnExecute rebinds the model to each call's stream and rewrites the
    task arguments while the first run may still use them (davinci_model.cc InitModelStream),
    a race. The emulator reports it with 500002 while the first stream still runs the model."""
    model = Model(om_static)
    first, _ = acl.rt.create_stream()
    second, _ = acl.rt.create_stream()
    set_timing("execute_us=300000")
    try:
        assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, first) == 0
        assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, second) == 500002
        assert "two streams" in acl.get_recent_err_msg()
        # the same stream queues behind it; another stream is fine once the first has finished
        assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, first) == 0
        assert acl.rt.synchronize_stream(first) == 0
        assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, second) == 0
        assert acl.rt.synchronize_stream(second) == 0
    finally:
        set_timing("")
    for stream in (first, second):
        assert acl.rt.destroy_stream(stream) == 0


# ----------------------------------------------------------------------------- buffer sizes


def test_input_sized_for_the_gear_runs_once_a_gear_is_set(ctx: int, om_dynamic_batch: Path) -> None:
    """davinci_model.cc CheckUserAndModelSize returns early when is_dynamic_ (set by
    ge_executor.cc ExecModel once the dataset carries a gear): acllite allocates only the gear's
    bytes for a dynamic-batch input."""
    model = Model(om_dynamic_batch)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    data = x.tobytes()
    small = malloc(len(data))
    assert acl.rt.memcpy(small, len(data), acl.util.bytes_to_ptr(data), len(data), H2D) == 0
    inputs = dataset_of([(small, len(data)), (model.in_ptrs[1], 8)])
    # no gear set on this dataset yet: GE checks the size against the largest gear
    assert acl.mdl.execute(model.model_id, inputs, model.outputs) == 145000
    assert acl.mdl.set_dynamic_batch_size(model.model_id, inputs, 1, 2) == 0
    assert acl.mdl.execute(model.model_id, inputs, model.outputs) == 0
    for got, want in zip(model.fetch(), reference(om_dynamic_batch, [x]).values()):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    # a buffer smaller than the gear's input is refused (GE would read past it)
    assert acl.mdl.set_dynamic_batch_size(model.model_id, inputs, 1, 4) == 0
    assert acl.mdl.execute(model.model_id, inputs, model.outputs) == 145000


def test_static_input_may_be_up_to_64_bytes_short(ctx: int, om_static: Path) -> None:
    """davinci_model.cc CheckUserAndModelSize: size + 64 < model size fails (145000 in
    graphengine's UpdateIoTaskArgs); up to 64 bytes short is accepted."""
    model = Model(om_static)
    need = model.in_sizes[0]
    for short, code in ((64, 0), (65, 145000)):
        inputs = dataset_of([(model.in_ptrs[0], need - short)])
        assert acl.mdl.execute(model.model_id, inputs, model.outputs) == code


# ----------------------------------------------------------------------------- calls real code uses


def test_app_log_logs_and_returns_none(caplog: pytest.LogCaptureFixture) -> None:
    """py_init_acl.cpp WrapAclAppLog: parse "is", returns None; no acl.init needed."""
    with caplog.at_level(logging.DEBUG, "ge_python_backend.emulator.app_log"):
        assert acl.app_log(3, "hello from acllite") is None
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "hello from acllite")
    ]
    with pytest.raises(TypeError, match="<acl.app_log> args parse failed"):
        acl.app_log("3", "x")  # type: ignore[arg-type]


def test_get_run_mode_needs_no_init(monkeypatch: pytest.MonkeyPatch) -> None:
    """hicann/runtime src/acl/aclrt_impl/device.cpp aclrtGetRunModeImpl has no init check;
    acl_rt.h: ACL_DEVICE = 0, ACL_HOST = 1."""
    assert acl.rt.get_run_mode() == (1, 0)
    monkeypatch.setenv("GE_EMULATOR_RUN_MODE", "device")
    assert acl.rt.get_run_mode() == (0, 0)


def test_description_calls_real_code_uses(ctx: int, om_dims: Path) -> None:
    """mdl_wrap.cpp: get_input_dims_v2 -> (dims, ret), get_tensor_real_name -> str (None when
    unknown), query_size -> (work, weight, ret), load_from_file_with_mem -> (model_id, ret)."""
    model = Model(om_dims)
    assert acl.mdl.get_input_dims_v2(model.desc, 0) == acl.mdl.get_input_dims(model.desc, 0)
    assert acl.mdl.get_tensor_real_name(model.desc, "input_ids") == "input_ids"
    hidden = acl.mdl.get_output_name_by_index(model.desc, 0)  # ATC's op:idx:hidden
    assert hidden.endswith(":0:hidden")
    assert acl.mdl.get_tensor_real_name(model.desc, hidden) == hidden
    assert acl.mdl.get_tensor_real_name(model.desc, "hidden") is None
    assert acl.mdl.get_tensor_real_name(model.desc, "nope") is None
    work, weight, ret = acl.mdl.query_size(str(om_dims))
    assert ret == 0 and work > 0 and weight > 0
    assert acl.mdl.query_size("/no/such.om") == (0, 0, 100014)
    work_ptr, weight_ptr = malloc(work), malloc(weight)
    model_id, ret = acl.mdl.load_from_file_with_mem(
        str(om_dims), work_ptr, work, weight_ptr, weight
    )
    assert ret == 0 and model_id > 0
    assert acl.mdl.unload(model_id) == 0
    assert acl.mdl.load_from_file_with_mem(str(om_dims), work_ptr, work - 1, 0, 0) == (0, 145000)


def test_tensor_descs_are_kept_by_the_dataset(ctx: int, om_static: Path) -> None:
    """py_init_acl.cpp create/destroy/get_tensor_desc_*; mdl_wrap.cpp set_dataset_tensor_desc ->
    (dataset, ret), get_dataset_tensor_desc -> handle; model_om2.cpp
    aclmdlSetDatasetTensorDescImplOm2 copies the desc (the caller may destroy its own) and
    refuses an index past the buffers with 100000. ModelZoo's ACL_PyTorch helpers set one on
    every input dataset of a static model, which runs as before."""
    model = Model(om_static)
    desc = acl.create_tensor_desc(0, [4, 16], 0)
    assert desc != 0
    assert acl.get_tensor_desc_num_dims(desc) == 2
    assert acl.get_tensor_desc_dim_v2(desc, 1) == (16, 0)
    assert acl.get_tensor_desc_dim_v2(desc, 2)[1] == 100000
    assert acl.get_tensor_desc_size(desc) == 4 * 16 * 4
    assert acl.mdl.set_dataset_tensor_desc(model.inputs, desc, 0) == (model.inputs, 0)
    assert acl.mdl.set_dataset_tensor_desc(model.inputs, desc, 1) == (model.inputs, 100000)
    assert acl.destroy_tensor_desc(desc) is None
    kept = acl.mdl.get_dataset_tensor_desc(model.inputs, 0)
    assert kept not in (0, desc)
    assert [acl.get_tensor_desc_dim_v2(kept, i)[0] for i in range(2)] == [4, 16]
    assert acl.mdl.get_dataset_tensor_desc(model.outputs, 0) == 0
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    with pytest.raises(TypeError, match="argument 2 is not list"):
        acl.create_tensor_desc(0, (4, 16), 0)
    assert acl.mdl.destroy_dataset(model.inputs) == 0
    assert acl.get_tensor_desc_num_dims(kept) == 0  # freed with its dataset


# ----------------------------------------------------------------------------- RC mode


@pytest.fixture
def device_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GE_EMULATOR_RUN_MODE", "device")


@pytest.mark.usefixtures("device_mode")
def test_device_mode_host_memory_is_device_memory(ctx: int, om_static: Path) -> None:
    """RC ("Ascend RC形态"): hicann/runtime docs/zh/api_ref/11-02_host_memory_management.md:
    host memory is device memory; 11-03_memory_copy_and_set.md: H2D, D2H and H2H copies run as
    device-to-device copies. Model inputs and outputs may live in malloc_host memory."""
    assert acl.rt.get_run_mode() == (0, 0)
    stream, _ = acl.rt.create_stream()
    host_in, _ = acl.rt.malloc_host(4 * 16 * 4)
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    data = x.tobytes()
    # every kind is accepted between any two addresses (acllite copies numpy with D2D in RC)
    for kind in (H2H, H2D, D2H, D2D):
        assert acl.rt.memcpy(host_in, len(data), acl.util.bytes_to_ptr(data), len(data), kind) == 0
    assert acl.rt.memcpy_async(host_in, len(data), host_in, len(data), H2H, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    model = Model(om_static)
    host_outs = [acl.rt.malloc_host(size)[0] for size in model.out_sizes]
    inputs = dataset_of([(host_in, len(data))])
    outputs = dataset_of(list(zip(host_outs, model.out_sizes)))
    assert acl.mdl.execute(model.model_id, inputs, outputs) == 0
    out = np.frombuffer(acl.util.ptr_to_bytes(host_outs[0], 4 * 8 * 4), np.float32).reshape(4, 8)
    np.testing.assert_allclose(out, reference(om_static, [x])["y"], rtol=1e-5)
    assert acl.rt.memcpy(host_in, 64, host_in, 64, 4) == 100000
    assert acl.rt.destroy_stream(stream) == 0


def test_host_mode_still_refuses_host_memory_for_models(ctx: int, om_static: Path) -> None:
    assert acl.rt.get_run_mode() == (1, 0)
    model = Model(om_static)
    host, _ = acl.rt.malloc_host(model.in_sizes[0])
    inputs = dataset_of([(host, model.in_sizes[0])])
    assert acl.mdl.execute(model.model_id, inputs, model.outputs) == 145007
    assert acl.rt.memcpy(host, 64, host, 64, D2H) == 107000


def test_gear_models_run_in_device_mode(
    ctx: int, device_mode: None, request: pytest.FixtureRequest
) -> None:
    for fixture, gear, dims in (
        ("om_dynamic_batch", (2,), []),
        ("om_hw", (16, 16), []),
        ("om_dims", (8,), [1, 8, 1, 8]),
    ):
        model = Model(request.getfixturevalue(fixture))
        kind = {"om_dynamic_batch": "batch", "om_hw": "hw", "om_dims": "dims"}[fixture]
        arrays = example_inputs(fixture, gear, np.random.default_rng(3))
        model.feed(arrays)
        assert select(model, kind, gear if kind != "dims" else (), dims) == 0
        assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
        expected = reference(request.getfixturevalue(fixture), arrays)
        for got, want in zip(model.fetch(), expected.values()):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_printed_atc_command_for_dims_models_says_nd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ATC refuses --dynamic_dims without --input_format=ND (graphengine atc_ir_common.cc
    CheckDynamicDimsInputShapeValid), so the command printed for real hardware carries it."""
    from ge_python_backend.cli import main

    onnx_path = onnx_models.build_concat(tmp_path / "concat.onnx")
    flags = ["--input_shape", "b:1,-1;a:1,-1", "--dynamic_dims", "4,8;8,16"]
    argv = ["emulator", "compile", f"--model={onnx_path}", "--framework=5"]
    code = main([*argv, "--output", str(tmp_path / "concat"), *flags])
    lines = capsys.readouterr().out.splitlines()
    atc = next(line for line in lines if line.startswith("on Ascend hardware: atc "))
    assert code == 0
    assert "--input_format=ND" in atc and "--input_shape='b:1,-1;a:1,-1'" in atc


# ----------------------------------------------------------------------------- desc from file


def _description(desc: int) -> dict[str, object]:
    """Everything a description reports that does not need a loaded model."""
    mdl = acl.mdl
    n_in, n_out = mdl.get_num_inputs(desc), mdl.get_num_outputs(desc)
    count, ret = mdl.get_input_dynamic_gear_count(desc, -1)
    return {
        "inputs": [
            (
                mdl.get_input_name_by_index(desc, i),
                mdl.get_input_dims(desc, i),
                mdl.get_input_data_type(desc, i),
                mdl.get_input_format(desc, i),
                mdl.get_input_size_by_index(desc, i),
            )
            for i in range(n_in)
        ],
        "outputs": [
            (
                mdl.get_output_name_by_index(desc, i),
                mdl.get_output_dims(desc, i),
                mdl.get_output_data_type(desc, i),
                mdl.get_output_size_by_index(desc, i),
            )
            for i in range(n_out)
        ],
        "batch": mdl.get_dynamic_batch(desc),
        "hw": mdl.get_dynamic_hw(desc, -1),
        "dims": (count, ret, mdl.get_input_dynamic_dims(desc, -1, count)),
    }


@pytest.mark.parametrize("fixture", ["om_dynamic_batch", "om_hw", "om_dims", "om_static"])
def test_get_desc_from_file_describes_without_a_device(
    clean_acl: None, fixture: str, request: pytest.FixtureRequest
) -> None:
    """mdl_wrap.cpp WrapAclMdlGetDescFromFile: `acl.mdl.get_desc_from_file(desc, path)` ("ks")
    -> ret. model.cpp aclmdlGetDescFromFileImpl reads the file on the host
    (GeExecutor::LoadDataFromFile, GetModelDescInfoFromMem) and fills inputs, outputs, dynamic
    batch/HW/dims: no model load, no device. pyACL's reference
    (python/docs/zh/api_ref/ge/function-get_desc_from_file.md): such a description cannot be used
    with get_cur_output_dims. Here: the same answers as get_desc of the loaded model, with no
    set_device, and nothing loaded."""
    om: Path = request.getfixturevalue(fixture)
    assert acl.init() == 0
    from_file = acl.mdl.create_desc()
    assert acl.mdl.get_desc_from_file(from_file, str(om)) == 0
    described = _description(from_file)
    used = stats()
    assert used["loaded_models"] == used["live_contexts"] == used["device_bytes_in_use"] == 0
    dims, ret = acl.mdl.get_cur_output_dims(from_file, 0)
    assert (dims, ret) == ({}, 100000)
    assert acl.mdl.get_desc_from_file(from_file, "/no/such.om") == 100014
    assert acl.mdl.destroy_desc(from_file) == 0

    assert acl.rt.set_device(0) == 0
    model = Model(om)
    assert _description(model.desc) == described


def test_get_desc_from_file_argument_rules(clean_acl: None, om_static: Path) -> None:
    """mdl_wrap.cpp parses (desc: k, path: s): anything else is a TypeError ("args parse
    failed"); before acl.init 100001, like every desc call here."""
    assert acl.mdl.get_desc_from_file(1, str(om_static)) == 100001
    assert acl.init() == 0
    with pytest.raises(TypeError, match="get_desc_from_file> args parse failed"):
        acl.mdl.get_desc_from_file(acl.mdl.create_desc(), 5)
    assert acl.mdl.get_desc_from_file(0xDEAD, str(om_static)) == 100000
