"""GE's memory plan of an emulator `.om` (emulator/memory_plan.py): the work (feature map) and
weight sizes `acl.mdl.query_size` reports, pinned on small graphs computed by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ge_python_backend.emulator import acl
from ge_python_backend.emulator.memory_plan import RULE, MemoryPlan
from ge_python_backend.emulator.omfile import OmModel, compile_onnx

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _save(
    path: Path,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    weights: tuple[onnx.TensorProto, ...] | list[onnx.TensorProto] = (),
) -> Path:
    graph = helper.make_graph(nodes, "plan", inputs, outputs, list(weights))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _relu_chain(path: Path) -> Path:
    """x [1,4,8,8] -> Relu -> a -> Relu -> b -> Relu -> y: four tensors of 1 KiB in float32."""
    return _save(
        path,
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Relu", ["b"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
    )


def _plan(onnx_path: Path, mode: str, **flags: str) -> tuple[Path, MemoryPlan]:
    om = compile_onnx(onnx_path, onnx_path.with_suffix(f".{mode}.om"), precision_mode=mode, **flags)
    return om, OmModel.load(om).memory


def test_float32_tensors_reuse_the_blocks_their_last_readers_freed(tmp_path: Path) -> None:
    _, plan = _plan(_relu_chain(tmp_path / "chain.onnx"), "must_keep_origin_dtype")
    # x (steps -1..0) and a (0..1) live together; b takes x's block, y (the output) a's
    assert (plan.work, plan.largest_tensor, plan.weight) == (2 * 1024, 1024, 0)
    assert plan.rule == RULE


def test_fp16_tensors_are_half_the_bytes_in_nc1hwc0_with_atc_casts_at_input_and_output(
    tmp_path: Path,
) -> None:
    _, plan = _plan(_relu_chain(tmp_path / "chain.onnx"), "force_fp16")
    # x 1 KiB (float32 input) and its FP16 copy, channels 4 -> 16: 1*16*8*8*2 = 2 KiB; a, b and y
    # 2 KiB each in FP16; y's float32 Cast 1 KiB. Blocks: x 1 KiB (reused by y's Cast),
    # x's copy 2 KiB (reused by b), a 2 KiB (reused by y)
    assert (plan.work, plan.largest_tensor) == (1024 + 2048 + 2048, 2048)


def test_weights_are_stored_at_the_compiled_precision_in_the_cube_formats(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    path = _save(
        tmp_path / "conv_matmul.onnx",
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Flatten", ["c"], ["f"]),
            helper.make_node("MatMul", ["f", "m"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 30])],
        [
            numpy_helper.from_array(rng.normal(size=(5, 3, 3, 3)).astype(np.float32), "w"),
            numpy_helper.from_array(np.zeros(5, np.float32), "b"),
            numpy_helper.from_array(rng.normal(size=(20, 30)).astype(np.float32), "m"),
        ],
    )
    _, fp32 = _plan(path, "must_keep_origin_dtype")
    assert fp32.weight == (5 * 3 * 3 * 3 + 5 + 20 * 30) * 4
    _, fp16 = _plan(path, "force_fp16")
    # filter in FRACTAL_Z (5 and 3 channels -> 16), bias 5 halves, matrix in FRACTAL_NZ (32 x 32)
    assert fp16.weight == (16 * 16 * 3 * 3 + 5 + 32 * 32) * 2


def test_query_size_reports_the_plan_of_the_largest_gear(tmp_path: Path) -> None:
    path = _relu_chain(tmp_path / "chain.onnx")
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    onnx.save(model, str(path))
    om, plan = _plan(
        path, "must_keep_origin_dtype", input_shape="x:-1,4,8,8", dynamic_batch_size="1,4"
    )
    assert plan.work == 2 * 4 * 1024  # batch 4: two blocks of 4 KiB
    assert acl.init() in (0, 100002)
    assert acl.mdl.query_size(str(om)) == (plan.work, plan.weight, 0)


def test_a_full_width_resnet50_at_batch_16_plans_its_feature_map_and_fp16_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES / "resnet50"))
    from resnet50_onnx import build_resnet50

    onnx_path = build_resnet50(tmp_path / "resnet50.onnx", width=64)
    fp32_weights = sum(
        numpy_helper.to_array(t).nbytes for t in onnx.load(str(onnx_path)).graph.initializer
    )
    _, plan = _plan(
        onnx_path, "force_fp16", input_shape="input:-1,3,224,224", dynamic_batch_size="1,8,16"
    )
    # the largest activation: 16 x 64 x 112 x 112 in FP16 (24.5 MiB), and the input's FP16 copy
    assert plan.largest_tensor == 16 * 64 * 112 * 112 * 2
    assert plan.work >= 3 * plan.largest_tensor  # a block in, a block out, the shortcut
    assert fp32_weights / 2 <= plan.weight < fp32_weights / 2 * 1.01
