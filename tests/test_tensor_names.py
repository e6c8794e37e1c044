"""ATC's tensor names and batch models with static side inputs (issue 21, points 4 and 5), from
the emulator's compiler through the emulated pyACL calls to the runtime and the Triton config.

Sources: aclmdlGetOutputNameByIndex.md, aclmdlGetInputDims.md, aclmdlGetOutputDims.md,
aclmdlGetTensorRealName.md (hicann/ge docs/zh/api/graph_engine_api/c/acl/); model_common.cpp
GetTensorDescNameToDims and model_om2.cpp aclmdlGetTensorRealNameImplOm2 (hicann/ge
api/acl/acl_model/model/); api/atc/omg.cc CreateOutputNodesInfo; option_utils.cc
CheckDynamicBatchSizeInputShapeValid; the binding's WrapAclMdlGetTensorRealName (hicann/runtime
python/pyACL/mdl/mdl_wrap.cpp: `get_tensor_real_name(desc, name) -> str`, None for nullptr).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import onnx
import pytest
from emulator_helpers import Model
from onnx import TensorProto, helper
from onnx_models import (
    KEEP_FP32,
    build_add_mul,
    build_long_names,
    build_mlp,
    build_scaled,
    build_tf_style,
    reference,
)
from test_omfile import reseal

from ge_python_backend.ascend import converted_tensor_name, tensor_name_of_output
from ge_python_backend.emulator import acl
from ge_python_backend.emulator.omfile import MAGIC, OmCompileError, OmModel, compile_onnx
from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import build_model_config, config_view
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.triton_config import compare_config_with_session
from ge_python_backend.runtime import Session
from ge_python_backend.runtime.batching import ExecutionPlanner
from ge_python_backend.runtime.errors import InputError, ModelFileError

# ----------------------------------------------------------------------------- the name rules


@pytest.mark.parametrize(
    ("reported", "served"),
    [
        ("Relu_2:0:y", "y"),  # ONNX via ATC: op:idx:output_name
        ("StatefulPartitionedCall:0:Identity:0", "Identity:0"),  # tf2onnx's name kept whole
        ("logits:0", "logits:0"),  # TensorFlow via ATC, ONNX with --out_nodes: op:idx
        ("output_0_conv_0", "output_0_conv_0"),  # graph API
        ("y", "y"),  # a plain name
        ("prob:1:top", "top"),  # Caffe op:idx:top
    ],
)
def test_served_name_of_each_documented_output_format(reported: str, served: str) -> None:
    assert tensor_name_of_output(reported) == served


def test_converted_name_pattern() -> None:
    assert converted_tensor_name(3, True, 0) == "acl_modelId_3_input_0"
    assert converted_tensor_name(0, False, 2) == "acl_modelId_0_output_2"


# ----------------------------------------------------------------------------- compiling


def test_output_names_as_atc_writes_them(tmp_path: Path) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    plain = compile_onnx(onnx_path, tmp_path / "plain", input_shape="x:2,16", **KEEP_FP32)
    names = [t.name for t in OmModel.load(plain).description.outputs]
    assert names == ["Relu_2:0:y", "ReduceSum_3:0:z"]
    by_node = compile_onnx(
        onnx_path,
        tmp_path / "n",
        input_shape="x:2,16",
        out_nodes="ReduceSum_3:0;Add_1:0",
        **KEEP_FP32,
    )
    om = OmModel.load(by_node)
    assert [t.name for t in om.description.outputs] == ["ReduceSum_3:0", "Add_1:0"]
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    z, pre = om.run([x])
    np.testing.assert_allclose(z, reference(onnx_path, [x])["z"], rtol=1e-5, atol=1e-5)
    assert pre.shape == (2, 8)  # the intermediate tensor Add_1 makes, now an output
    by_name = compile_onnx(
        onnx_path, tmp_path / "t", input_shape="x:2,16", out_nodes="z", **KEEP_FP32
    )
    assert [t.name for t in OmModel.load(by_name).description.outputs] == ["ReduceSum_3:0:z"]
    tf = compile_onnx(
        build_tf_style(tmp_path / "tf.onnx"),
        tmp_path / "tf",
        input_shape="x:2,4",
        framework=3,
        **KEEP_FP32,
    )
    assert [t.name for t in OmModel.load(tf).description.outputs] == ["Identity:0", "Identity_1:0"]
    assert OmModel.load(tf).header["flags"]["framework"] == 3


@pytest.mark.parametrize(
    ("out_nodes", "framework", "message"),
    [
        ("Relu_2:0;z", 5, "one form only"),
        ("nope:0", 5, r"node:index entries of the graph \(.*Relu_2:0.*\), or output names"),
        ("z", 3, r"give node:index entries of the graph \([^)]*\), one form only"),
    ],
)
def test_out_nodes_errors(tmp_path: Path, out_nodes: str, framework: int, message: str) -> None:
    with pytest.raises(OmCompileError, match=message):
        compile_onnx(
            build_mlp(tmp_path / "mlp.onnx"),
            tmp_path / "m",
            input_shape="x:2,16",
            out_nodes=out_nodes,
            framework=framework,
        )


def test_framework_other_than_onnx_or_tensorflow_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OmCompileError, match="framework 0 is not supported"):
        compile_onnx(build_mlp(tmp_path / "m.onnx"), tmp_path / "m", framework=0)


def test_side_input_compiles_and_runs_unchanged_in_every_gear(tmp_path: Path) -> None:
    onnx_path = build_scaled(tmp_path / "s.onnx")
    om = OmModel.load(
        compile_onnx(
            onnx_path,
            tmp_path / "s",
            input_shape="x:-1,4;scale:1",
            dynamic_batch_size="1,2,4",
            **KEEP_FP32,
        )
    )
    assert [(t.name, t.dims) for t in om.description.inputs] == [("x", (-1, 4)), ("scale", (1,))]
    assert om.description.gears == ((1,), (2,), (4,))
    assert om.description.input_shapes((2,)) == [(2, 4), (1,)]
    for batch in (1, 2, 4):
        x = np.full((batch, 4), 0.5, np.float32)
        scale = np.array([2.0], np.float32)
        (y,) = om.run([x, scale], (batch,))
        np.testing.assert_allclose(y, reference(onnx_path, [x, scale])["y"], rtol=1e-6)
    with pytest.raises(OmCompileError, match="E10018: Only batch N can be -1.*b is -1,-1"):
        compile_onnx(
            build_add_mul(tmp_path / "am.onnx"),
            tmp_path / "am",
            input_shape="a:-1,4;b:-1,-1",
            dynamic_batch_size="1,2",
        )


# ----------------------------------------------------------------------------- emulated calls


def _two_inputs(path: Path, long: str, short: str) -> Path:
    """`long`, `short` FLOAT[2] -> `out` = long + short."""
    graph = helper.make_graph(
        [helper.make_node("Add", [long, short], ["out"], name="add")],
        "names",
        [
            helper.make_tensor_value_info(long, TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info(short, TensorProto.FLOAT, [2]),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return path


@pytest.mark.usefixtures("clean_acl")
def test_long_names_are_converted_in_the_dims_only(ctx: int, tmp_path: Path) -> None:
    onnx_path, long_in, long_out = build_long_names(tmp_path / "l.onnx", 150)
    om = compile_onnx(onnx_path, tmp_path / "l", input_shape=f"{long_in}:2,4", **KEEP_FP32)
    model = Model(om)
    desc, model_id = model.desc, model.model_id
    dims, ret = acl.mdl.get_input_dims(desc, 0)
    assert ret == 0 and dims["name"] == f"acl_modelId_{model_id}_input_0"
    assert acl.mdl.get_input_dims_v2(desc, 0)[0]["name"] == dims["name"]
    assert acl.mdl.get_output_dims(desc, 0)[0]["name"] == f"acl_modelId_{model_id}_output_0"
    assert acl.mdl.get_cur_output_dims(desc, 0)[0]["name"] == f"acl_modelId_{model_id}_output_0"
    assert acl.mdl.get_input_name_by_index(desc, 0) == long_in  # the real name, whole
    real_out = acl.mdl.get_output_name_by_index(desc, 0)
    assert real_out == f"add_one:0:{long_out}"
    assert acl.mdl.get_tensor_real_name(desc, dims["name"]) == long_in
    assert acl.mdl.get_tensor_real_name(desc, f"acl_modelId_{model_id}_output_0") == real_out
    assert acl.mdl.get_tensor_real_name(desc, long_in) == long_in  # a real name maps to itself
    assert acl.mdl.get_tensor_real_name(desc, f"acl_modelId_{model_id + 1}_input_0") is None
    assert acl.mdl.get_tensor_real_name(desc, f"acl_modelId_{model_id}_input_5") is None
    assert acl.mdl.get_input_index_by_name(desc, dims["name"]) == (-1, 100000)  # real names only
    from_file = acl.mdl.create_desc()
    assert acl.mdl.get_desc_from_file(from_file, str(om)) == 0
    assert acl.mdl.get_input_dims(from_file, 0)[0]["name"] == "acl_modelId_0_input_0"


@pytest.mark.usefixtures("clean_acl")
def test_a_converted_name_taken_by_a_tensor_gets_letters(tmp_path: Path) -> None:
    long = "n" * 128
    onnx_path = _two_inputs(tmp_path / "t.onnx", long, "acl_modelId_0_input_0")
    om = compile_onnx(onnx_path, tmp_path / "t", **KEEP_FP32)
    assert acl.init() == 0
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc_from_file(desc, str(om)) == 0
    assert acl.mdl.get_input_dims(desc, 0)[0]["name"] == "acl_modelId_0_input_0_a"
    assert acl.mdl.get_input_dims(desc, 1)[0]["name"] == "acl_modelId_0_input_0"  # 21 chars
    assert acl.mdl.get_tensor_real_name(desc, "acl_modelId_0_input_0_a") == long
    assert acl.mdl.get_tensor_real_name(desc, "acl_modelId_0_input_0") == "acl_modelId_0_input_0"
    assert len("n" * 127) == 127  # exactly 127 characters are kept (char[128] with its NUL)
    kept = compile_onnx(
        _two_inputs(tmp_path / "k.onnx", "n" * 127, "b"), tmp_path / "k", **KEEP_FP32
    )
    assert acl.mdl.get_desc_from_file(desc, str(kept)) == 0
    assert acl.mdl.get_input_dims(desc, 0)[0]["name"] == "n" * 127


# ----------------------------------------------------------------------------- the runtime


def test_session_serves_real_names_and_side_inputs(tmp_path: Path) -> None:
    onnx_path = build_scaled(tmp_path / "s.onnx")
    om = compile_onnx(
        onnx_path,
        tmp_path / "s",
        input_shape="x:-1,4;scale:1",
        dynamic_batch_size="1,2,4",
        **KEEP_FP32,
    )
    rng = np.random.default_rng(4)
    with Session(om, runtime="emulator") as session:
        assert session.gears.side_inputs == ("scale",) and session.gears.batched
        assert not session.gears.every_input_batched
        assert [s.name for s in session.outputs] == ["y"]
        requests = [
            {
                "x": rng.standard_normal((rows, 4)).astype(np.float32),
                "scale": np.array([i + 0.5], np.float32),
            }
            for i, rows in enumerate((3, 9, 1, 2))
        ]
        answers = session.infer_many(requests)
        for feeds, answer in zip(requests, answers):
            np.testing.assert_allclose(answer["y"], reference(onnx_path, feeds)["y"], rtol=1e-5)
        counters = session.counters
        # each request runs alone (side inputs differ): 3 -> 4; 9 -> 4+4+1; 1; 2
        assert counters.executions == 6 and counters.rows == 15 and counters.padded_rows == 1
        with pytest.raises(InputError, match=r"input 'scale': expected shape \(1,\), got \(2,\)"):
            session.validate({"x": requests[0]["x"], "scale": np.ones(2, np.float32)})


def test_colliding_served_names_fail_the_load(tmp_path: Path) -> None:
    om = compile_onnx(
        build_mlp(tmp_path / "m.onnx"), tmp_path / "m", input_shape="x:2,16", **KEEP_FP32
    )
    data = om.read_bytes()
    length = struct.unpack_from("<Q", data, len(MAGIC))[0]
    start = len(MAGIC) + 8
    header = json.loads(data[start : start + length])
    header["outputs"][0]["name"], header["outputs"][1]["name"] = "a:0:y", "b:0:y"
    new = json.dumps(header).encode()
    om.write_bytes(reseal(MAGIC + struct.pack("<Q", len(new)) + new + data[start + length :]))
    with pytest.raises(ModelFileError, match=r"same name \(y\).*'y' \(from 'a:0:y'\), 'y' "):
        Session(om, runtime="emulator")


def test_config_of_a_side_input_model(tmp_path: Path) -> None:
    om = compile_onnx(
        build_scaled(tmp_path / "s.onnx"),
        tmp_path / "s",
        input_shape="x:-1,4;scale:1",
        dynamic_batch_size="1,2,4",
        **KEEP_FP32,
    )
    with Session(om, runtime="emulator") as session:
        inputs, outputs, gears = session.inputs, session.outputs, session.gears
    params = ModelParameters(om_file="s.om", acl_runtime="emulator")
    config = build_model_config("s", inputs, outputs, gears, params, instances=1)
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert [list(t.dims) for t in config.input] == [[-1, 4], [1]]
    assert [list(t.dims) for t in config.output] == [[-1, 3]]
    assert [dict(w.inputs)["x"].dims for w in config.model_warmup] == [[1, 4]]
    with pytest.raises(UserError, match="side inputs scale have none"):
        build_model_config("s", inputs, outputs, gears, params, instances=1, max_batch_size=4)
    config.max_batch_size = 4
    problems = compare_config_with_session(config_view(config), inputs, outputs, gears)
    assert problems and "side inputs scale have none" in problems[0]


def test_planner_keeps_requests_apart_when_executions_are_not_shared() -> None:
    def layout(planner: ExecutionPlanner) -> list[tuple[int, int, list[int]]]:
        plan = planner.plan([(0, 3), (0, 2)])
        return [(e.batch, e.rows, [p.part for p in e.pieces]) for e in plan]

    assert layout(ExecutionPlanner((1, 2, 4))) == [(4, 4, [0, 1]), (1, 1, [1])]
    assert layout(ExecutionPlanner((1, 2, 4), shared=False)) == [(4, 3, [0]), (2, 2, [1])]
