"""A ResNet-50-shaped image classifier in ONNX, built locally with random weights (no downloads).

The topology of ResNet-50 v1.5: a 7x7 stride-2 stem, 3x3 max pooling, four stages of 3, 4, 6 and 3
bottleneck blocks (1x1 reduce, 3x3, 1x1 expand by 4; stride 2 on the 3x3 of the first block of
stages 2-4, projection shortcuts), global average pooling and a 1000-way linear layer. Batch
normalisation is folded into the convolutions' biases, as in an exported inference graph.

`width` is the stem's channel count: 64 is the real ResNet-50 (25.6 M parameters, ~100 MB of
ONNX); the examples default to 16 (1.6 M parameters) so that building, compiling and serving
stay quick on a CPU. Input `input` FP32 [N, 3, 224, 224], output `logits` FP32 [N, 1000].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NUM_CLASSES = 1000
IMAGE_SIZE = 224
BLOCKS_PER_STAGE = (3, 4, 6, 3)
EXPANSION = 4
INPUT_NAME, OUTPUT_NAME = "input", "logits"


class _Graph:
    """Collects nodes and He-initialised weights under unique names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, kind: str) -> str:
        self._count += 1
        return f"{kind}_{self._count}"

    def constant(self, values: np.ndarray, kind: str) -> str:
        name = self.name(kind)
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def node(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        out = self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(
        self, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1, gain: float = 2.0
    ) -> str:
        fan_in = c_in * kernel * kernel
        weight = self.rng.normal(0.0, np.sqrt(gain / fan_in), (c_out, c_in, kernel, kernel))
        bias = self.rng.normal(0.0, 0.01, c_out)
        return self.node(
            "Conv",
            [
                x,
                self.constant(weight.astype(np.float32), "conv_w"),
                self.constant(bias.astype(np.float32), "conv_b"),
            ],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[kernel // 2] * 4,
        )

    def bottleneck(self, x: str, c_in: int, mid: int, stride: int) -> str:
        c_out = mid * EXPANSION
        y = self.node("Relu", [self.conv(x, c_in, mid, 1)])
        y = self.node("Relu", [self.conv(y, mid, mid, 3, stride)])
        y = self.conv(y, mid, c_out, 1, gain=0.5)  # a small residual branch keeps logits sane
        shortcut = x if (c_in == c_out and stride == 1) else self.conv(x, c_in, c_out, 1, stride)
        return self.node("Relu", [self.node("Add", [y, shortcut])])


def build_resnet50(path: str | Path, width: int = 16, seed: int = 0) -> Path:
    """Write the classifier to `path` (see the module docstring) and return the path."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    g = _Graph(seed)
    x = g.node("Relu", [g.conv(INPUT_NAME, 3, width, 7, 2)])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = width
    for stage, blocks in enumerate(BLOCKS_PER_STAGE):
        mid = width * 2**stage
        for block in range(blocks):
            x = g.bottleneck(x, c_in, mid, stride=2 if (stage > 0 and block == 0) else 1)
            c_in = mid * EXPANSION
    pooled = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    # Small output weights: softmax probabilities that are not all on one class.
    fc_w = g.rng.normal(0.0, 0.15 / np.sqrt(c_in), (c_in, NUM_CLASSES)).astype(np.float32)
    fc_b = np.zeros(NUM_CLASSES, np.float32)
    g.nodes.append(
        helper.make_node(
            "Gemm",
            [pooled, g.constant(fc_w, "fc_w"), g.constant(fc_b, "fc_b")],
            [OUTPUT_NAME],
        )
    )
    graph = helper.make_graph(
        g.nodes,
        f"resnet50_style_width{width}",
        [
            helper.make_tensor_value_info(
                INPUT_NAME, TensorProto.FLOAT, ["N", 3, IMAGE_SIZE, IMAGE_SIZE]
            )
        ],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", NUM_CLASSES])],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime accepts for opset 17
    onnx.checker.check_model(model)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(target))
    return target
