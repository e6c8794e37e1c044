"""ATC's precision in the emulator: `emulator compile --precision_mode`, `--precision_mode_v2`,
`--keep_dtype` and `--output_type` change the answers and the outputs' types as the device's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from emulator_helpers import Model
from onnx import TensorProto, helper, numpy_helper
from onnx_models import IR_VERSION, OPSET, build_conv, build_mlp, reference
from real_models import PPOCR_DETECTOR, PPOCR_RECOGNIZER, RAPIDOCR, model_file

from ge_python_backend.cli import main
from ge_python_backend.emulator import acl
from ge_python_backend.emulator.omfile import OmCompileError, OmModel, compile_onnx
from ge_python_backend.emulator.precision import read_keep_dtype
from ge_python_backend.runtime import Session
from ge_python_backend.tools.compare import Thresholds, compare, compare_arrays

pytestmark = pytest.mark.usefixtures("clean_acl")

FP16_MAX = 65504.0
UNIT_ROUNDOFF = 2.0**-11  # float16's: |round(v) - v| <= 2**-11 * |v| in its normal range


def build_logsumexp(path: Path) -> Path:
    """`x` FLOAT[2,8] -> `y` FLOAT[2,1] = log(sum(exp(x @ I))): a MatMul (white list) feeding
    Exp, ReduceSum and Log (black list). For x near 12, exp(x) exceeds FP16's 65504."""
    nodes = [
        helper.make_node("MatMul", ["x", "eye"], ["h"], name="proj"),
        helper.make_node("Exp", ["h"], ["e"], name="exp"),
        helper.make_node("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1),
        helper.make_node("Log", ["s"], ["y"], name="log"),
    ]
    graph = helper.make_graph(
        nodes,
        "logsumexp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])],
        initializer=[
            numpy_helper.from_array(np.eye(8, dtype=np.float32), "eye"),
            numpy_helper.from_array(np.array([1], np.int64), "axes"),
        ],
    )
    return _save(graph, path)


def build_scale(path: Path) -> Path:
    """`x` FLOAT[4,4] -> `y` = x * (1/3) by the node named `scale`, then `z` = y + 0 by `shift`;
    1/3 is no float16 value."""
    nodes = [
        helper.make_node("Mul", ["x", "third"], ["y"], name="scale"),
        helper.make_node("Add", ["y", "zero"], ["z"], name="shift"),
    ]
    graph = helper.make_graph(
        nodes,
        "scale",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 4])],
        initializer=[
            numpy_helper.from_array(np.array(1 / 3, np.float32), "third"),
            numpy_helper.from_array(np.array(0, np.float32), "zero"),
        ],
    )
    return _save(graph, path)


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    onnx.save(model, str(path))
    return path


def run(om: Path, *inputs: np.ndarray) -> list[np.ndarray]:
    return OmModel.load(om).run(list(inputs))


# ----------------------------------------------------------------------------- numerics


def test_fp16_overflow_is_wrong_at_force_fp16_and_right_at_higher_modes(tmp_path: Path) -> None:
    onnx_path = build_logsumexp(tmp_path / "lse.onnx")
    x = np.linspace(11.2, 12.0, 16, dtype=np.float32).reshape(2, 8)
    want = reference(onnx_path, [x])["y"]
    assert np.all(np.exp(x) > FP16_MAX) and np.all(np.isfinite(want))
    fp16 = compile_onnx(onnx_path, tmp_path / "fp16", precision_mode="force_fp16")
    assert np.all(np.isinf(run(fp16, x)[0]))  # exp overflows to inf in float16, as on the device
    origin = compile_onnx(onnx_path, tmp_path / "origin", precision_mode="must_keep_origin_dtype")
    np.testing.assert_array_equal(run(origin, x)[0], want)
    # Exp, ReduceSum and Log are black-listed: float32; the MatMul before them runs in float16,
    # so exp reads x rounded to float16 (|error| <= 2**-11 * 12) and log(sum(exp)) moves as much
    mixed = compile_onnx(onnx_path, tmp_path / "mixed", precision_mode="allow_mix_precision")
    got = run(mixed, x)[0]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=0, atol=UNIT_ROUNDOFF * 12)
    v2 = compile_onnx(onnx_path, tmp_path / "v2", precision_mode_v2="mixed_float16")
    np.testing.assert_array_equal(run(v2, x)[0], got)


def test_fp16_rounding_error_of_an_mlp_is_nonzero_and_within_fp16_bound(tmp_path: Path) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    weights = {
        t.name: numpy_helper.to_array(t) for t in onnx.load(str(onnx_path)).graph.initializer
    }
    x = np.random.default_rng(7).standard_normal((4, 16)).astype(np.float32)
    want = reference(onnx_path, [x])["y"]
    got = run(compile_onnx(onnx_path, tmp_path / "fp16", input_shape="x:4,16"), x)[0]
    # relu(x @ W + b) in float16: x, W and b rounded, the MatMul's and the Add's results rounded
    # (its float32 accumulation adds nothing); each rounding moves a value by at most 2**-11 of
    # its size, and every value here is at most |x| @ |W| + |b|: five roundings bound the error.
    scale = np.abs(x) @ np.abs(weights["W"]) + np.abs(weights["b"])
    error = np.abs(got.astype(np.float64) - want)
    assert error.max() > 0
    assert np.all(error <= 5 * UNIT_ROUNDOFF * scale)
    kept = compile_onnx(
        onnx_path, tmp_path / "fp32", input_shape="x:4,16", precision_mode_v2="origin"
    )
    np.testing.assert_array_equal(run(kept, x)[0], want)


BF16_UNIT_ROUNDOFF = 2.0**-8  # bfloat16's 8-bit significand


def test_bfloat16_modes_on_910b_round_to_bfloat16_and_keep_fp16s_range(tmp_path: Path) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    weights = {
        t.name: numpy_helper.to_array(t) for t in onnx.load(str(onnx_path)).graph.initializer
    }
    x = np.random.default_rng(7).standard_normal((4, 16)).astype(np.float32) * 1e5
    want = reference(onnx_path, [x])["y"]
    flags = {"input_shape": "x:4,16", "soc_version": "Ascend910B1"}
    mixed = compile_onnx(onnx_path, tmp_path / "bf16", precision_mode_v2="mixed_bfloat16", **flags)
    got = run(mixed, x)[0]
    # the MatMul (white) and what follows it (gray) in bfloat16: 8-bit significands, float32's
    # range (x of 1e5 overflows float16, not bfloat16); five roundings bound the error
    scale = np.abs(x) @ np.abs(weights["W"]) + np.abs(weights["b"])
    error = np.abs(got.astype(np.float64) - want)
    assert np.all(np.isfinite(got)) and error.max() > 0
    assert np.all(error <= 5 * BF16_UNIT_ROUNDOFF * scale)
    rounded = [t for t in compiled_graph(mixed).initializer if t.name.endswith("/bf16")]
    assert rounded  # stored as bfloat16 values: the low 16 bits of each float32 are 0
    assert not any((numpy_helper.to_array(t).view(np.uint32) & 0xFFFF).any() for t in rounded)
    fp16 = run(compile_onnx(onnx_path, tmp_path / "fp16", **flags), x)[0]
    assert not np.all(np.isfinite(fp16))  # the same x overflows float16
    kept = compile_onnx(onnx_path, tmp_path / "keep", precision_mode="allow_fp32_to_bf16", **flags)
    np.testing.assert_array_equal(run(kept, x)[0], want)  # float32 kept where supported


def test_every_mode_keeps_a_cnn_classifier_top1_and_origin_is_exact(tmp_path: Path) -> None:
    onnx_path = build_conv(tmp_path / "conv.onnx")
    images = np.random.default_rng(2).standard_normal((8, 3, 16, 16)).astype(np.float32)
    want = reference(onnx_path, [images])["features"]
    for mode in ("force_fp16", "allow_mix_precision", "allow_fp32_to_fp16", "force_fp32"):
        om = compile_onnx(
            onnx_path, tmp_path / mode, input_shape="image:8,3,16,16", precision_mode=mode
        )
        got = run(om, images)[0]
        assert not np.array_equal(got, want), mode  # the Conv reads float16 inputs in every one
        np.testing.assert_array_equal(got.argmax(axis=1), want.argmax(axis=1))
    origin = compile_onnx(
        onnx_path,
        tmp_path / "origin",
        input_shape="image:8,3,16,16",
        precision_mode="must_keep_origin_dtype",
    )
    np.testing.assert_array_equal(run(origin, images)[0], want)


def test_keep_dtype_keeps_a_named_operator_in_float32(tmp_path: Path) -> None:
    onnx_path = build_scale(tmp_path / "scale.onnx")
    x = np.random.default_rng(5).standard_normal((4, 4)).astype(np.float32)
    want = reference(onnx_path, [x])["z"]
    fp16 = run(compile_onnx(onnx_path, tmp_path / "fp16"), x)[0]
    assert not np.array_equal(fp16, want)
    for line in ("scale\nshift", "# by type\nOpType::Mul\nOpType::Add"):
        keep = tmp_path / "keep.cfg"
        keep.write_text(line + "\n")
        got = run(compile_onnx(onnx_path, tmp_path / "kept", keep_dtype=keep), x)[0]
        np.testing.assert_array_equal(got, want)
    keep.write_text("scale\n")  # only the Mul kept: the Add rounds its result to float16
    got = run(compile_onnx(onnx_path, tmp_path / "mul", keep_dtype=keep), x)[0]
    np.testing.assert_array_equal(got, want.astype(np.float16).astype(np.float32))


# ----------------------------------------------------------- ATC's fusions, the operators' dtypes


def build_conv_batchnorm(
    path: Path, conv_is_output: bool = False, after_add: bool = False, group: int = 1
) -> Path:
    """`x` FLOAT[1,2,4,4] -> Conv 3x3 (2 filters, pads 1, `group` 2: depthwise) ->
    BatchNormalization `bn` -> `y`, the
    BatchNorm's running variance 9.8e7 on channel 0 (a real PaddleOCR detector's): beyond
    float16's 65504. `conv_is_output`: the Conv's result is an output too (nothing folds);
    `after_add`: the BatchNorm reads x + 1 instead of a Conv. Scale, offset and mean are Constant
    nodes, the variance an initializer."""
    rng = np.random.default_rng(11)
    filters = rng.standard_normal((2, 2 // group, 3, 3)).astype(np.float32) * 3000
    params = {
        "gamma": np.array([1.4, 0.7], np.float32),
        "beta": np.array([0.44, -0.2], np.float32),
        "mean": np.array([559.5, 0.5], np.float32),
    }
    nodes = [
        helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
        for name, value in params.items()
    ]
    if after_add:
        nodes.append(helper.make_node("Add", ["x", "one"], ["h"], name="add"))
    else:
        conv = helper.make_node("Conv", ["x", "W"], ["h"], name="conv", pads=[1, 1, 1, 1])
        conv.attribute.append(helper.make_attribute("group", group))
        nodes.append(conv)
    nodes.append(
        helper.make_node(
            "BatchNormalization", ["h", "gamma", "beta", "mean", "var"], ["y"], name="bn"
        )
    )
    shape = [1, 2, 4, 4]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)]
    if conv_is_output:
        outputs.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, shape))
    graph = helper.make_graph(
        nodes,
        "conv_bn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        outputs,
        initializer=[
            numpy_helper.from_array(
                np.ones(1, np.float32) if after_add else filters, "one" if after_add else "W"
            ),
            numpy_helper.from_array(np.array([9.79e7, 4.0], np.float32), "var"),
        ],
    )
    return _save(graph, path)


def compiled_graph(om: Path) -> onnx.GraphProto:
    return onnx.load_from_string(OmModel.load(om).onnx_bytes).graph


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("mode", ["force_fp16", "allow_mix_precision", "allow_fp32_to_fp16"])
def test_a_convs_batchnorm_is_folded_in_float32_not_rounded_to_inf(
    tmp_path: Path, mode: str, group: int
) -> None:
    onnx_path = build_conv_batchnorm(tmp_path / "conv_bn.onnx", group=group)
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 4)).astype(np.float32)
    want = reference(onnx_path, [x])["y"]
    om = compile_onnx(onnx_path, tmp_path / mode, precision_mode=mode)
    got = run(om, x)[0]
    # rounded to float16 the variance would be inf and channel 0 all `beta` (0.44)
    assert np.all(np.isfinite(got)) and np.ptp(got[0, 0]) > 1
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    graph = compiled_graph(om)
    assert "BatchNormalization" not in {node.op_type for node in graph.node}
    (conv,) = [node for node in graph.node if node.op_type == "Conv"]
    assert [name.split("/")[:2] for name in conv.input[1:]] == [
        ["conv", "bn_folded_filter"],
        ["conv", "bn_folded_bias"],
    ]
    # the BatchNorm's constants and the original filter are gone; GE's weights: the folded
    # filter (2 x 2 x 3 x 3, FRACTAL_Z pads both channel counts to 16) and bias (2), in FP16
    assert all(t.name.startswith("conv/bn_folded_") for t in graph.initializer)
    assert OmModel.load(om).memory.weight == 16 * 16 * 3 * 3 * 2 + 2 * 2


@pytest.mark.parametrize("variant", ["conv_is_output", "after_add"])
def test_a_batchnorm_left_unfolded_keeps_its_parameters_in_float32(
    tmp_path: Path, variant: str
) -> None:
    onnx_path = build_conv_batchnorm(tmp_path / "bn.onnx", **{variant: True})
    x = np.random.default_rng(3).standard_normal((1, 2, 4, 4)).astype(np.float32)
    want = reference(onnx_path, [x])["y"]
    om = compile_onnx(onnx_path, tmp_path / variant, precision_mode="force_fp16")
    got = run(om, x)[0]
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2 * np.abs(want).max())
    (bn,) = [node for node in compiled_graph(om).node if node.op_type == "BatchNormalization"]
    assert list(bn.input[1:]) == ["gamma", "beta", "mean", "var"]  # not rounded copies
    if variant == "after_add":  # GE's weights: 4 float32 parameters of 2, the Add's 1 in FP16
        assert OmModel.load(om).memory.weight == 4 * 2 * 4 + 2


def test_layernorm_keeps_gamma_and_beta_in_float32(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], name="ln", axis=-1)],
        "ln",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        initializer=[
            numpy_helper.from_array(np.full(8, 1 / 3, np.float32), "g"),
            numpy_helper.from_array(np.full(8, 0.1, np.float32), "b"),
        ],
    )
    om = compile_onnx(_save(graph, tmp_path / "ln.onnx"), tmp_path / "ln")
    (ln,) = [node for node in compiled_graph(om).node if node.op_type == "LayerNormalization"]
    assert ln.input[0].endswith("/fp16") and list(ln.input[1:]) == ["g", "b"]


@pytest.mark.parametrize("op", ["Softmax", "ReduceMean"])
def test_softmax_and_reduce_mean_of_fp16_values_accumulate_in_float32(
    tmp_path: Path, op: str
) -> None:
    """4096 ones: summed in float16 the sum stops at 2048 (2048 + 1 rounds back to 2048), so
    a float16 accumulation would answer 1/2048 and 0.5. TBE's SoftmaxV2 and ReduceMeanD cast
    float16 input to float32 (high_precision, the default but on Ascend310), as here."""
    attributes = {"axes": [1]} if op == "ReduceMean" else {"axis": 1}
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="op", **attributes)],
        op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4096])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    onnx_path = _save(graph, tmp_path / "op.onnx")
    om = compile_onnx(onnx_path, tmp_path / "op", precision_mode="force_fp16")
    got = run(om, np.ones((1, 4096), np.float32))[0]
    np.testing.assert_array_equal(got, np.full_like(got, 1 / 4096 if op == "Softmax" else 1))


def build_dense(path: Path) -> Path:
    """`x` FLOAT[2,8] -> `y` = x @ W + b (`dense`, then `bias`), b of 4 elements."""
    rng = np.random.default_rng(8)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"], name="dense"),
            helper.make_node("Add", ["h", "b"], ["y"], name="bias"),
        ],
        "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[
            numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "W"),
            numpy_helper.from_array(np.full(4, 1 / 3, np.float32), "b"),
        ],
    )
    return _save(graph, path)


def test_a_rounded_weight_is_held_once(tmp_path: Path) -> None:
    """force_fp16 gives the MatMul W's rounded copy; the FP32 W, which no operator reads any
    more, is not kept beside it (the .om held every weight twice)."""
    onnx_path = build_dense(tmp_path / "dense.onnx")
    om = compile_onnx(onnx_path, tmp_path / "dense", precision_mode="force_fp16")
    graph = compiled_graph(om)
    read = {tensor for node in graph.node for tensor in node.input}
    assert sorted(t.name for t in graph.initializer) == ["W/fp16", "b/fp16"]
    assert read >= {t.name for t in graph.initializer}
    x = np.random.default_rng(9).standard_normal((2, 8)).astype(np.float32)
    want = reference(onnx_path, [x])["y"]
    np.testing.assert_allclose(run(om, x)[0], want, rtol=1e-2, atol=1e-2)


def test_matmul_bias_add_accumulates_the_bias_in_float32_on_910b_not_310p(tmp_path: Path) -> None:
    onnx_path = build_dense(tmp_path / "dense.onnx")
    x = np.random.default_rng(9).standard_normal((2, 8)).astype(np.float32)
    want = reference(onnx_path, [x])["y"]
    for soc, fused in (("Ascend910B1", True), ("Ascend310P3", False)):
        om = compile_onnx(onnx_path, tmp_path / soc, soc_version=soc)
        np.testing.assert_allclose(run(om, x)[0], want, rtol=1e-2, atol=1e-2)
        graph = compiled_graph(om)
        (add,) = [node for node in graph.node if node.op_type == "Add"]
        (matmul,) = [node for node in graph.node if node.op_type == "MatMul"]
        # fused: the MatMul's result and the bias reach the Add unrounded (MatMulBiasAddFusionPass)
        assert (add.input[0] == matmul.output[0]) is fused, soc
        assert (add.input[1] == "b") is fused, soc


def test_modify_mixlist_moves_operators_between_the_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onnx_path = build_logsumexp(tmp_path / "lse.onnx")
    x = np.linspace(11.2, 12.0, 16, dtype=np.float32).reshape(2, 8)
    want = reference(onnx_path, [x])["y"]
    mixlist = tmp_path / "ops_info.json"

    def compiled(changes: str) -> np.ndarray:
        mixlist.write_text(changes)
        om = compile_onnx(
            onnx_path, tmp_path / "m", precision_mode="allow_mix_precision", modify_mixlist=mixlist
        )
        return run(om, x)[0]

    # Exp black by default: finite. Removed from the black list it is gray and follows the
    # MatMul (white, FP16): exp overflows.
    assert np.all(np.isfinite(compiled('{"black-list": {"to-add": ["Erf"]}}')))
    assert np.all(np.isinf(compiled('{"black-list": {"to-remove": ["Exp"]}}')))
    assert np.all(np.isinf(compiled('{"white-list": {"to-add": ["Exp", "ReduceSum", "Log"]}}')))
    # the MatMul (Ascend IR MatMulV2) out of the white list: gray with no FP16 input, so float32
    np.testing.assert_array_equal(compiled('{"white-list": {"to-remove": ["MatMulV2"]}}'), want)
    for bad, message in (
        ('{"grey-list": {"to-add": ["Exp"]}}', 'expected a JSON object with "black-list"'),
        ('{"black-list": {"add": ["Exp"]}}', "'black-list' is not a JSON object"),
        ('{"black-list": {"to-add": "Exp"}}', "black-list.to-add must be a list"),
        (
            '{"black-list": {"to-add": ["Exp"]}, "white-list": {"to-add": ["Exp"]}}',
            "Exp added to both lists",
        ),
        ("not json", "is not JSON"),
    ):
        with pytest.raises(OmCompileError, match=message):
            compiled(bad)
    mixlist.write_text('{"black-list": {"to-remove": ["Exp"]}}')
    command = ["emulator", "compile", "--model", str(onnx_path), "--framework", "5"]
    command += ["--output", str(tmp_path / "cli"), "--precision_mode", "allow_mix_precision"]
    assert main([*command, "--modify_mixlist", str(mixlist)]) == 0
    assert f"--modify_mixlist={mixlist}" in capsys.readouterr().out


def rendered_text(lines: list[str], size: tuple[int, int], top: int = 20) -> np.ndarray:
    """Black text on white, as PaddleOCR's models take it: NCHW float32 in [-1, 1]."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(28)
    for row, line in enumerate(lines):
        draw.text((12, top + 70 * row), line, fill="black", font=font)
    pixels = (np.asarray(image, np.float32) / 255 - 0.5) / 0.5
    return np.ascontiguousarray(pixels.transpose(2, 0, 1)[None])


def test_paddleocr_detector_under_force_fp16_finds_the_text_onnxruntime_finds(
    tmp_path: Path,
) -> None:
    """PP-OCRv4's detector has a BatchNorm of running variance 9.8e7 after a Conv: folded as ATC
    folds it, force_fp16 finds the same text pixels as onnxruntime in float32 (it found none
    when the variance was rounded to float16)."""
    detector = model_file(RAPIDOCR, PPOCR_DETECTOR)
    image = rendered_text(["Ascend 310P3", "force_fp16 2026"], (320, 160))
    want = reference(detector, [image])["sigmoid_0.tmp_0"]
    om = compile_onnx(detector, tmp_path / "det", input_shape="x:1,3,160,320")
    got = run(om, image)[0]
    text, found = want > 0.3, got > 0.3  # PaddleOCR's DBPostProcess threshold
    assert text.sum() > 2000
    assert (text & found).sum() / (text | found).sum() >= 0.99  # IoU of the text masks
    result = compare_arrays("om", "maps", got, want, Thresholds())
    assert not result.problem and result.cosine >= 0.999


def ctc_labels(scores: np.ndarray) -> list[int]:
    """Greedy CTC decoding of [1, steps, classes] scores: the best class per step, repeats
    merged, the blank (0) dropped."""
    best = scores[0].argmax(axis=-1)
    return [int(c) for i, c in enumerate(best) if c != 0 and (i == 0 or c != best[i - 1])]


def test_paddleocr_recognizer_under_force_fp16_reads_what_onnxruntime_reads(
    tmp_path: Path,
) -> None:
    """PP-OCRv4's recognizer (SVTR: its LayerNorms exported as small operators, which ATC on
    310P3 does not fuse) under force_fp16 reads the same labels as onnxruntime in float32."""
    recognizer = model_file(RAPIDOCR, PPOCR_RECOGNIZER)
    line = rendered_text(["Ascend 310P3 2026"], (320, 48), top=8)
    want = reference(recognizer, [line])["softmax_11.tmp_0"]
    om = compile_onnx(recognizer, tmp_path / "rec", input_shape="x:1,3,48,320")
    got = run(om, line)[0]
    labels = ctc_labels(want)
    assert len(labels) >= 10 and ctc_labels(got) == labels
    assert compare_arrays("om", "scores", got, want, Thresholds()).cosine >= 0.999


# ----------------------------------------------------------------------------- output types


def test_output_type_fp16_gives_acl_float16_outputs_the_runtime_serves(
    tmp_path: Path, ctx: int
) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    om = compile_onnx(onnx_path, tmp_path / "half", input_shape="x:4,16", output_type="FP16")
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    fp16_float_out = run(compile_onnx(onnx_path, tmp_path / "f", input_shape="x:4,16"), x)
    model = Model(om)
    assert [acl.mdl.get_output_data_type(model.desc, i) for i in range(2)] == [1, 1]  # FLOAT16
    assert acl.mdl.get_input_data_type(model.desc, 0) == 0  # inputs stay as the graph says
    assert model.out_sizes == [4 * 8 * 2, 4 * 1 * 2]
    model.feed([x])
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    outputs = model.fetch()
    assert [o.dtype for o in outputs] == [np.float16, np.float16]
    for got, same in zip(outputs, fp16_float_out):  # the float16 values a float32 output holds
        np.testing.assert_array_equal(got.astype(np.float32), same)
    assert acl.mdl.unload(model.model_id) == 0
    with Session(om, runtime="emulator") as session:
        assert [(s.name, s.dtype) for s in session.outputs] == [
            ("y", np.dtype(np.float16)),
            ("z", np.dtype(np.float16)),
        ]
        served = session.infer({"x": x})
    np.testing.assert_array_equal(served["y"], outputs[0])


def test_output_type_per_output_with_out_nodes(tmp_path: Path) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    om = compile_onnx(
        onnx_path,
        tmp_path / "one",
        input_shape="x:4,16",
        out_nodes="Relu_2:0;ReduceSum_3:0",
        output_type="ReduceSum_3:0:FP16;Relu_2:0:FP32",
        precision_mode="must_keep_origin_dtype",
    )
    desc = OmModel.load(om).description
    assert [(t.name, t.acl_dtype) for t in desc.outputs] == [("Relu_2:0", 0), ("ReduceSum_3:0", 1)]
    x = np.random.default_rng(4).standard_normal((4, 16)).astype(np.float32)
    y, z = run(om, x)
    want = reference(onnx_path, [x])
    np.testing.assert_array_equal(y, want["y"])
    np.testing.assert_array_equal(z, want["z"].astype(np.float16))


# ----------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"precision_mode": "fp16"}, r"--precision_mode 'fp16' is not supported; use one of "),
        (
            {"precision_mode": "allow_mix_precision_bf16"},
            r"computes in bfloat16, which Ascend310P3 does not have: .*\(Ascend910B\*",
        ),
        ({"precision_mode_v2": "mixed_hif8"}, r"HiFloat8 mode is Ascend 950's"),
        ({"precision_mode_v2": "force_fp16"}, r"'force_fp16' .* use one of fp16, origin"),
        (
            {"precision_mode": "force_fp16", "precision_mode_v2": "fp16"},
            r"--precision_mode and --precision_mode_v2 cannot be used together",
        ),
        ({"output_type": "FP64"}, r"--output_type 'FP64' is not supported; give one of FP32, "),
        ({"output_type": "UINT8"}, r"only emulates FP32 and FP16 outputs"),
        ({"output_type": "Relu_2:0:FP16"}, r"needs --out_nodes"),
        (
            {"output_type": "Add_1:0:FP16", "out_nodes": "Relu_2:0"},
            r"'Add_1:0:FP16' names no model output; .* \(the outputs: Relu_2:0\)",
        ),
    ],
)
def test_bad_values_are_refused_naming_what_is_allowed(
    tmp_path: Path, flags: dict[str, str], message: str
) -> None:
    with pytest.raises(OmCompileError, match=message):
        compile_onnx(
            build_mlp(tmp_path / "mlp.onnx"), tmp_path / "m", input_shape="x:4,16", **flags
        )


def test_keep_dtype_names_must_be_operators_of_the_graph(tmp_path: Path) -> None:
    onnx_path = build_scale(tmp_path / "scale.onnx")
    keep = tmp_path / "keep.cfg"
    keep.write_text("scale\nnope\n")
    with pytest.raises(
        OmCompileError, match=r"line 2: 'nope' is not an operator .*\(scale, shift\)"
    ):
        compile_onnx(onnx_path, tmp_path / "m", keep_dtype=keep)
    keep.write_text("OpType::Conv2D\n")
    with pytest.raises(OmCompileError, match=r"no operator of type 'Conv2D'; .* Add, Mul"):
        compile_onnx(onnx_path, tmp_path / "m", keep_dtype=keep)
    with pytest.raises(OmCompileError, match=r"cannot read --keep_dtype"):
        compile_onnx(onnx_path, tmp_path / "m", keep_dtype=tmp_path / "absent.cfg")
    keep.write_text("OpType::RealDiv\nOpType::BatchNorm\n")  # ATC's names of Div, BatchNorm
    kept = read_keep_dtype(keep, ["d", "bn"], ["Div", "BatchNormalization"])
    assert kept.keeps("d", "Div") and kept.keeps("bn", "BatchNormalization")


def test_header_and_atc_command_carry_the_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    base = ["emulator", "compile", "--model", str(onnx_path), "--framework", "5"]
    assert main([*base, "--output", str(tmp_path / "d"), "--input_shape", "x:4,16"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("--precision_mode=force_fp16")
    assert OmModel.load(tmp_path / "d.om").header["flags"]["precision_mode"] == "force_fp16"
    flags = ["--precision_mode_v2", "origin", "--output_type", "FP16"]
    assert main([*base, "--output", str(tmp_path / "o"), "--input_shape", "x:4,16", *flags]) == 0
    atc = capsys.readouterr().out.splitlines()[-1]
    assert atc.endswith("--precision_mode_v2=origin --output_type=FP16")
    assert "--precision_mode=" not in atc
    header = OmModel.load(tmp_path / "o.om").header["flags"]
    assert header["precision_mode"] == "must_keep_origin_dtype"


# ----------------------------------------------------------------------------- compare


def test_compare_defaults_pass_fp16_rounding_and_catch_fp16_overflow(tmp_path: Path) -> None:
    mlp = build_mlp(tmp_path / "mlp.onnx")
    report = compare(
        compile_onnx(mlp, tmp_path / "mlp", input_shape="x:4,16"), mlp, runtime="emulator"
    )
    assert report.passed
    assert max(item.max_abs for item in report.comparisons) > 0  # FP16's error, within 1e-2
    lse = build_logsumexp(tmp_path / "lse.onnx")
    np.save(tmp_path / "x.npy", np.full((2, 8), 12, np.float32))
    files = {"x": tmp_path / "x.npy"}
    assert not compare(
        compile_onnx(lse, tmp_path / "lse"), lse, runtime="emulator", files=files
    ).passed
    origin = compile_onnx(lse, tmp_path / "origin", precision_mode="must_keep_origin_dtype")
    assert compare(origin, lse, runtime="emulator", files=files).passed
