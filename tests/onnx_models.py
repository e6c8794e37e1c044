"""Small ONNX test models with deterministic weights, a way back from an `.om` to its ONNX, and
the one onnxruntime reference every test compares with (`reference`, `reference_session`).

Every builder writes the model to `path` and returns `path` as a `Path`. Batch axes are the
symbolic dim "N", so any batch works; compile them with `--input_shape` to fix or mark dims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

from ge_python_backend.emulator.omfile import OmModel, compile_onnx

OPSET = 17
IR_VERSION = 8  # what onnxruntime accepts for opset 17
# compile_onnx's flags for a model the tests compare with onnxruntime on its ONNX bit for bit:
# float32, as the ONNX computes (ATC's default force_fp16 rounds to float16; test_precision.py).
KEEP_FP32 = {"precision_mode": "must_keep_origin_dtype"}


def onnx_path_of(om: Path) -> Path:
    """The ONNX file an emulator `.om` was compiled from (recorded in its header)."""
    return Path(OmModel.load(om).header["onnx"]["path"])


def reference_session(model: Path) -> onnxruntime.InferenceSession:
    """onnxruntime (CPU) on `model`: an ONNX file, or the ONNX an emulator `.om` came from."""
    onnx_path = model if model.suffix == ".onnx" else onnx_path_of(model)
    return onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])


def reference(
    model: Path, feeds: Mapping[str, np.ndarray] | Sequence[np.ndarray]
) -> dict[str, np.ndarray]:
    """What onnxruntime computes for `feeds` (by name, or a list in the graph's input order) on
    `model` (see `reference_session`): every output by name, in the graph's order."""
    session = reference_session(model)
    if not isinstance(feeds, Mapping):
        feeds = dict(zip((i.name for i in session.get_inputs()), feeds))
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(names, dict(feeds))))


def build_mlp(path: Path, seed: int = 16) -> Path:
    """`x` FLOAT[N,16] -> `y` FLOAT[N,8] = relu(x @ W + b), `z` FLOAT[N,1] = sum of y (axis 1);
    the weights drawn with `seed`."""
    rng = np.random.default_rng(seed)
    weights = [
        _tensor("W", rng.standard_normal((16, 8)).astype(np.float32)),
        _tensor("b", rng.standard_normal(8).astype(np.float32)),
        _tensor("axes", np.array([1], np.int64)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["pre"]),
        helper.make_node("Relu", ["pre"], ["y"]),
        helper.make_node("ReduceSum", ["y", "axes"], ["z"], keepdims=1),
    ]
    return _save(
        path,
        "mlp",
        nodes,
        [_value("x", TensorProto.FLOAT, ["N", 16])],
        [_value("y", TensorProto.FLOAT, ["N", 8]), _value("z", TensorProto.FLOAT, ["N", 1])],
        weights,
    )


def build_wide_mlp(path: Path, hidden: int = 160_000) -> Path:
    """`x` FLOAT[N,16] -> `y` FLOAT[N,8] through a hidden layer of `hidden` (weights of 96 bytes
    per unit: a model whose weights are large, 15.4 MB by default)."""
    rng = np.random.default_rng(7)
    weights = [
        _tensor("W1", rng.standard_normal((16, hidden), np.float32)),
        _tensor("W2", rng.standard_normal((hidden, 8), np.float32)),
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "W1"], ["h"]),
        helper.make_node("MatMul", ["h", "W2"], ["y"]),
    ]
    return _save(
        path,
        "wide",
        nodes,
        [_value("x", TensorProto.FLOAT, ["N", 16])],
        [_value("y", TensorProto.FLOAT, ["N", 8])],
        weights,
    )


def build_add_mul(path: Path) -> Path:
    """`a`, `b` FLOAT[N,4] -> `sum` = a + b, `product` = a * b (no weights)."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Mul", ["a", "b"], ["product"]),
    ]
    return _save(
        path,
        "add_mul",
        nodes,
        [_value("a", TensorProto.FLOAT, ["N", 4]), _value("b", TensorProto.FLOAT, ["N", 4])],
        [
            _value("sum", TensorProto.FLOAT, ["N", 4]),
            _value("product", TensorProto.FLOAT, ["N", 4]),
        ],
    )


def build_conv(path: Path) -> Path:
    """`image` FLOAT[N,3,H,W] -> conv 3x3 pad 1 (8 channels) -> global average pool -> `features`
    FLOAT[N,8]; any H and W work."""
    rng = np.random.default_rng(3)
    weights = [
        _tensor("conv_w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        _tensor("conv_b", rng.standard_normal(8).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["conv"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"], axis=1),
    ]
    return _save(
        path,
        "conv",
        nodes,
        [_value("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [_value("features", TensorProto.FLOAT, ["N", 8])],
        weights,
    )


def build_classifier(path: Path, classes: int = 10) -> Path:
    """`image` FLOAT[N,3,16,16] -> conv 3x3 (8 channels) -> relu -> global average pool -> gemm
    -> `logits` FLOAT[N,classes]: a small CNN classifier."""
    rng = np.random.default_rng(5)
    weights = [
        _tensor("conv_w", rng.standard_normal((8, 3, 3, 3)).astype(np.float32)),
        _tensor("conv_b", rng.standard_normal(8).astype(np.float32)),
        _tensor("fc_w", rng.standard_normal((8, classes)).astype(np.float32)),
        _tensor("fc_b", rng.standard_normal(classes).astype(np.float32)),
    ]
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"]),
    ]
    return _save(
        path,
        "classifier",
        nodes,
        [_value("image", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [_value("logits", TensorProto.FLOAT, ["N", classes])],
        weights,
    )


def build_fp16_overflow(path: Path) -> Path:
    """`x` FLOAT[N,4] -> `y` FLOAT[N,4] = (x * 1e5) * 1e-5 + 1: the intermediate exceeds
    float16's largest value (65504) for x > 0.655, so a model computing in float16 answers inf
    there while float32 answers x + 1."""
    weights = [
        _tensor("up", np.full(1, 1e5, np.float32)),
        _tensor("down", np.full(1, 1e-5, np.float32)),
        _tensor("one", np.ones(1, np.float32)),
    ]
    nodes = [
        helper.make_node("Mul", ["x", "up"], ["large"], name="scale_up"),
        helper.make_node("Mul", ["large", "down"], ["back"], name="scale_down"),
        helper.make_node("Add", ["back", "one"], ["y"], name="add_one"),
    ]
    return _save(
        path,
        "fp16_overflow",
        nodes,
        [_value("x", TensorProto.FLOAT, ["N", 4])],
        [_value("y", TensorProto.FLOAT, ["N", 4])],
        weights,
    )


def build_cancelling(path: Path) -> Path:
    """`x` FLOAT[4,16] -> `y` = x * 1e10 - x * 1e10: zeros in float32; in float16 the weight
    is inf and every nonzero x gives inf - inf = NaN."""
    nodes = [
        helper.make_node("Mul", ["x", "big"], ["up"], name="up"),
        helper.make_node("Sub", ["up", "up"], ["y"], name="cancel"),
    ]
    return _save(
        path,
        "cancelling",
        nodes,
        [_value("x", TensorProto.FLOAT, [4, 16])],
        [_value("y", TensorProto.FLOAT, [4, 16])],
        [_tensor("big", np.array(1e10, np.float32))],
    )


def build_quantized_lstm(path: Path) -> Path:
    """An LSTM (`x` FLOAT[5,1,4] -> `y` FLOAT[5,1,1,8]) quantized by onnxruntime's
    `quantize_dynamic`: one com.microsoft `DynamicQuantizeLSTM` with INT8 weights, which
    onnxruntime runs and ATC cannot parse."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(7)
    hidden, features = 8, 4
    weights = [
        _tensor("W", rng.standard_normal((1, 4 * hidden, features)).astype(np.float32)),
        _tensor("R", rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)),
        _tensor("B", rng.standard_normal((1, 8 * hidden)).astype(np.float32)),
    ]
    lstm = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden, name="lstm")
    float_model = path.with_name(f"{path.stem}.float.onnx")
    _save(
        float_model,
        "lstm",
        [lstm],
        [_value("x", TensorProto.FLOAT, [5, 1, features])],
        [_value("y", TensorProto.FLOAT, [5, 1, 1, hidden])],
        weights,
    )
    quantize_dynamic(float_model, path, weight_type=QuantType.QInt8)
    return path


def build_dims_model(path: Path) -> Path:
    """`input_ids`, `attention_mask` INT64[N,S] -> `hidden` FLOAT[N,S,4] = embedding(input_ids) *
    mask. The vocabulary has 32 tokens (ids 0..31)."""
    rng = np.random.default_rng(4)
    weights = [
        _tensor("embedding", rng.standard_normal((32, 4)).astype(np.float32)),
        _tensor("last_axis", np.array([-1], np.int64)),
    ]
    nodes = [
        helper.make_node("Gather", ["embedding", "input_ids"], ["embedded"], axis=0),
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "last_axis"], ["mask_3d"]),
        helper.make_node("Mul", ["embedded", "mask_3d"], ["hidden"]),
    ]
    return _save(
        path,
        "dims",
        nodes,
        [
            _value("input_ids", TensorProto.INT64, ["N", "S"]),
            _value("attention_mask", TensorProto.INT64, ["N", "S"]),
        ],
        [_value("hidden", TensorProto.FLOAT, ["N", "S", 4])],
        weights,
    )


def build_mixed_types(path: Path) -> Path:
    """`x` INT32[N,4], `h` FLOAT16[N,4] -> `doubled` INT32 = 2x, `positive` BOOL = x > 0,
    `squared` FLOAT16 = h * h."""
    weights = [_tensor("zero", np.array(0, np.int32))]
    nodes = [
        helper.make_node("Add", ["x", "x"], ["doubled"]),
        helper.make_node("Greater", ["x", "zero"], ["positive"]),
        helper.make_node("Mul", ["h", "h"], ["squared"]),
    ]
    return _save(
        path,
        "mixed_types",
        nodes,
        [_value("x", TensorProto.INT32, ["N", 4]), _value("h", TensorProto.FLOAT16, ["N", 4])],
        [
            _value("doubled", TensorProto.INT32, ["N", 4]),
            _value("positive", TensorProto.BOOL, ["N", 4]),
            _value("squared", TensorProto.FLOAT16, ["N", 4]),
        ],
        weights,
    )


def build_concat(path: Path) -> Path:
    """`a` FLOAT[1,A], `b` FLOAT[1,B] -> `c` = concat(a, b) on axis 1: FLOAT[1,A+B] (compiled
    with `--input_shape` naming b first, its dims gears fit both input orders)."""
    node = helper.make_node("Concat", ["a", "b"], ["c"], axis=1)
    inputs = [_value("a", TensorProto.FLOAT, [1, "A"]), _value("b", TensorProto.FLOAT, [1, "B"])]
    return _save(path, "concat", [node], inputs, [_value("c", TensorProto.FLOAT, [1, "C"])])


# YUV to RGB (CSC) of a YUV420SP_U8 AIPP: BT.601 video range (ATC's template), or the full range
# a JPEG's YCbCr uses (Ascend's DVPP samples); rows of (matrix rows, input biases).
CSC_MATRICES = {
    "video": (((298, 0, 409), (298, -100, -208), (298, 516, 0)), (16, 128, 128)),
    "full": (((256, 0, 359), (256, -88, -183), (256, 454, 0)), (0, 128, 128)),
}


def aipp_yuv420sp(
    width: int,
    height: int,
    left: int = 0,
    top: int = 0,
    size: int | None = None,
    csc: str = "video",
) -> str:
    """The ATC aipp.cfg text of a static YUV420SP_U8 AIPP (config_file_template.md): a `width` x
    `height` source, cropped to `size` x `size` at (`left`, `top`) when `size` is given, YUV to
    RGB by `CSC_MATRICES[csc]` and ImageNet's mean and variance."""
    crop = (
        ""
        if size is None
        else f"""    crop: true
    load_start_pos_w: {left}
    load_start_pos_h: {top}
    crop_size_w: {size}
    crop_size_h: {size}
"""
    )
    matrix, bias = CSC_MATRICES[csc]
    rows = "".join(
        f"    matrix_r{r}c{c}: {value}\n"
        for r, row in enumerate(matrix)
        for c, value in enumerate(row)
    )
    biases = "".join(f"    input_bias_{i}: {value}\n" for i, value in enumerate(bias))
    return f"""
aipp_op {{
    aipp_mode: static
    input_format: YUV420SP_U8
    src_image_size_w: {width}
    src_image_size_h: {height}
{crop}    csc_switch: true
    rbuv_swap_switch: false
{rows}{biases}    mean_chn_0: 124
    mean_chn_1: 117
    mean_chn_2: 104
    var_reci_chn_0: 0.0171247538
    var_reci_chn_1: 0.0175070028
    var_reci_chn_2: 0.0174291938
}}
"""


# ATC aipp.cfg texts for `build_conv` compiled with --input_shape "image:2,3,8,8" (NCHW): the
# AIPP output must be 8x8. Crop, CSC and normalisation in each (config_file_template.md).
AIPP_YUV420SP = aipp_yuv420sp(12, 10, 2, 2, 8)
AIPP_RGB888 = """
aipp_op {
    aipp_mode: static
    input_format: RGB888_U8
    src_image_size_w: 10
    src_image_size_h: 10
    crop: true
    load_start_pos_w: 1
    load_start_pos_h: 2
    crop_size_w: 8
    crop_size_h: 8
    mean_chn_0: 124
    mean_chn_1: 117
    mean_chn_2: 104
    min_chn_0: 0.5
    var_reci_chn_0: 0.0171247538
    var_reci_chn_1: 0.0175070028
    var_reci_chn_2: 0.0174291938
}
"""
# For --dynamic_image_size (CANN "Concepts and Restrictions": crop and padding off,
# src_image_size_w/h 0, so the source is each gear's H x W): YUV420SP_U8 with CSC and DTC.
AIPP_YUV420SP_ANY_SIZE = """
aipp_op {
    aipp_mode: static
    input_format: YUV420SP_U8
    csc_switch: true
    mean_chn_0: 124
    mean_chn_1: 117
    mean_chn_2: 104
    var_reci_chn_0: 0.0171247538
    var_reci_chn_1: 0.0175070028
    var_reci_chn_2: 0.0174291938
}
"""
AIPP_DYNAMIC = """
aipp_op {
    aipp_mode: dynamic
    max_src_image_size: 600
}
"""


def build_nonzero(path: Path) -> Path:
    """`x` FLOAT[4,4] -> `indices` INT64[2,K] = NonZero(x > 0.5), `count` INT64 scalar = K:
    a data-dependent output (K is known only after running) and a scalar output."""
    nodes = [
        helper.make_node("Greater", ["x", "threshold"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["indices"]),
        helper.make_node("Shape", ["indices"], ["shape"], start=1, end=2),
        helper.make_node("Squeeze", ["shape", "axes"], ["count"]),
    ]
    initializers = [
        _tensor("threshold", np.array(0.5, np.float32)),
        _tensor("axes", np.array([0], np.int64)),
    ]
    outputs = [
        _value("indices", TensorProto.INT64, [2, "K"]),
        _value("count", TensorProto.INT64, []),
    ]
    inputs = [_value("x", TensorProto.FLOAT, [4, 4])]
    return _save(path, "nonzero", nodes, inputs, outputs, initializers)


def build_nms(path: Path) -> Path:
    """A detector head with NMS in the graph: `boxes` FLOAT[1,B,4] (y1,x1,y2,x2), `scores`
    FLOAT[1,C,B] -> `selected` INT64[K,3] (batch, class, box) of NonMaxSuppression (at most 10
    boxes per class, IoU 0.5, score 0.6) and `picked` FLOAT[K,4], the boxes it kept:
    K depends on the data."""
    nodes = [
        helper.make_node(
            "NonMaxSuppression",
            ["boxes", "scores", "max_boxes", "iou", "score"],
            ["selected"],
        ),
        helper.make_node("Gather", ["selected", "box_column"], ["box_index"], axis=1),
        helper.make_node("Squeeze", ["boxes", "batch_axis"], ["boxes_2d"]),
        helper.make_node("Gather", ["boxes_2d", "box_index"], ["picked"], axis=0),
    ]
    initializers = [
        _tensor("max_boxes", np.array([10], np.int64)),
        _tensor("iou", np.array([0.5], np.float32)),
        _tensor("score", np.array([0.6], np.float32)),
        _tensor("box_column", np.array(2, np.int64)),
        _tensor("batch_axis", np.array([0], np.int64)),
    ]
    inputs = [
        _value("boxes", TensorProto.FLOAT, ["N", "B", 4]),
        _value("scores", TensorProto.FLOAT, ["N", "C", "B"]),
    ]
    outputs = [
        _value("selected", TensorProto.INT64, ["K", 3]),
        _value("picked", TensorProto.FLOAT, ["K", 4]),
    ]
    return _save(path, "nms", nodes, inputs, outputs, initializers)


def build_tile(path: Path, repeats: int = 20_000) -> Path:
    """`x` FLOAT[N,16] -> `y` FLOAT[N,16*repeats], x tiled along its row (outputs far larger
    than the inputs: 1.28 MB a row by default)."""
    nodes = [helper.make_node("Tile", ["x", "repeats"], ["y"])]
    repeat = _tensor("repeats", np.array([1, repeats], np.int64))
    inputs = [_value("x", TensorProto.FLOAT, ["N", 16])]
    outputs = [_value("y", TensorProto.FLOAT, ["N", 16 * repeats])]
    return _save(path, "tile", nodes, inputs, outputs, [repeat])


def build_zero_size(path: Path) -> Path:
    """`x` FLOAT[2,3] -> `y` FLOAT[2,3] = x * 2 and `empty` FLOAT[0,3] (always zero-size)."""
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["y"]),
        helper.make_node("Slice", ["x", "start", "end"], ["empty"]),
    ]
    initializers = [
        _tensor("two", np.array(2.0, np.float32)),
        _tensor("start", np.array([0], np.int64)),
        _tensor("end", np.array([0], np.int64)),
    ]
    inputs = [_value("x", TensorProto.FLOAT, [2, 3])]
    outputs = [_value("y", TensorProto.FLOAT, [2, 3]), _value("empty", TensorProto.FLOAT, [0, 3])]
    return _save(path, "zero_size", nodes, inputs, outputs, initializers)


def _value(name: str, elem_type: int, dims: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, dims)


def _tensor(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(array, name)


def _save(
    path: Path,
    name: str,
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto] | None = None,
) -> Path:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers or [])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return Path(path)


def build_scaled(path: Path) -> Path:
    """`x` FLOAT[N,4], `scale` FLOAT[1] (no batch axis) -> `y` FLOAT[N,3] = (x @ W) * scale."""
    weights = [_tensor("W", np.random.default_rng(3).standard_normal((4, 3)).astype(np.float32))]
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Mul", ["xw", "scale"], ["y"], name="scale_mul"),
    ]
    inputs = [_value("x", TensorProto.FLOAT, ["N", 4]), _value("scale", TensorProto.FLOAT, [1])]
    return _save(path, "scaled", nodes, inputs, [_value("y", TensorProto.FLOAT, ["N", 3])], weights)


def build_long_names(path: Path, length: int = 150) -> tuple[Path, str, str]:
    """An input and an output named with `length` characters: `x` FLOAT[N,4] -> `y` = relu(x)
    + 1; returns (path, input name, output name)."""
    x = ("input_" + "x" * length)[:length]
    y = ("output_" + "y" * length)[:length]
    nodes = [
        helper.make_node("Relu", [x], ["r"], name="relu"),
        helper.make_node("Add", ["r", "one"], [y], name="add_one"),
    ]
    one = [_tensor("one", np.ones(1, np.float32))]
    inputs = [_value(x, TensorProto.FLOAT, ["N", 4])]
    _save(path, "long_names", nodes, inputs, [_value(y, TensorProto.FLOAT, ["N", 4])], one)
    return Path(path), x, y


def build_tf_style(path: Path) -> Path:
    """Outputs named as tf2onnx names TensorFlow tensors: `x` FLOAT[N,4] -> `Identity:0` = x * 2
    (made by node `Identity`) and `Identity_1:0` = x + 1 (node `Identity_1`)."""
    two = _tensor("two", np.full(1, 2, np.float32))
    one = _tensor("one", np.ones(1, np.float32))
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["Identity:0"], name="Identity"),
        helper.make_node("Add", ["x", "one"], ["Identity_1:0"], name="Identity_1"),
    ]
    outputs = [
        _value("Identity:0", TensorProto.FLOAT, ["N", 4]),
        _value("Identity_1:0", TensorProto.FLOAT, ["N", 4]),
    ]
    inputs = [_value("x", TensorProto.FLOAT, ["N", 4])]
    return _save(path, "tf_style", nodes, inputs, outputs, [two, one])


# Small models of different work sizes for the work-space tests: builder and --input_shape.
BATCHED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "mlp": (build_mlp, "x:-1,16"),
    "classifier": (build_classifier, "image:-1,3,16,16"),
    "add_mul": (build_add_mul, "a:-1,4;b:-1,4"),
    "wide": (lambda path: build_wide_mlp(path, hidden=4000), "x:-1,16"),
}


def compile_batched(directory: Path, *names: str) -> dict[str, Path]:
    """The `BATCHED` models `names` compiled into `directory`: float32, batch gears 1..8."""
    compiled = {}
    for name in names:
        build, input_shape = BATCHED[name]
        compiled[name] = compile_onnx(
            build(directory / f"{name}.onnx"),
            directory / name,
            input_shape=input_shape,
            dynamic_batch_size="1,2,4,8",
            **KEEP_FP32,
        )
    return compiled
