"""Build a ResNet-style image classifier in ONNX with random weights (no downloads).

Input `input` [N, 3, 224, 224] FP32, output `logits` [N, 1000] FP32: a 7x7 stem, four stages of
basic residual blocks (32, 64, 128, 256 channels), global average pooling and a linear layer.

    python examples/image_classifier/build_model.py classifier.onnx
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NUM_CLASSES = 1000
STAGE_CHANNELS = (32, 64, 128, 256)


class _GraphBuilder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}_{self.count}"

    def _weight(self, shape: tuple[int, ...], fan_in: int) -> str:
        name = self._name("w")
        values = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shape).astype(np.float32)
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def conv(self, x: str, c_in: int, c_out: int, kernel: int, stride: int) -> str:
        weight = self._weight((c_out, c_in, kernel, kernel), c_in * kernel * kernel)
        bias = self._name("b")
        self.initializers.append(numpy_helper.from_array(np.zeros(c_out, np.float32), bias))
        out = self._name("conv")
        pad = kernel // 2
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, weight, bias],
                [out],
                kernel_shape=[kernel, kernel],
                strides=[stride, stride],
                pads=[pad] * 4,
            )
        )
        return out

    def op(self, op_type: str, inputs: list[str], **attrs: object) -> str:
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def basic_block(self, x: str, c_in: int, c_out: int, stride: int) -> str:
        y = self.op("Relu", [self.conv(x, c_in, c_out, 3, stride)])
        y = self.conv(y, c_out, c_out, 3, 1)
        shortcut = x if (c_in == c_out and stride == 1) else self.conv(x, c_in, c_out, 1, stride)
        return self.op("Relu", [self.op("Add", [y, shortcut])])


def build_classifier(path: Path, seed: int = 0) -> Path:
    """Write the classifier to `path` and return it."""
    g = _GraphBuilder(seed)
    x = g.op("Relu", [g.conv("input", 3, STAGE_CHANNELS[0], 7, 2)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = STAGE_CHANNELS[0]
    for stage, c_out in enumerate(STAGE_CHANNELS):
        x = g.basic_block(x, c_in, c_out, stride=1 if stage == 0 else 2)
        c_in = c_out
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    fc_w = g._weight((c_in, NUM_CLASSES), c_in)
    fc_b = g._name("b")
    g.initializers.append(numpy_helper.from_array(np.zeros(NUM_CLASSES, np.float32), fc_b))
    g.nodes.append(helper.make_node("Gemm", [x, fc_w, fc_b], ["logits"]))
    graph = helper.make_graph(
        g.nodes,
        "resnet_style_classifier",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", NUM_CLASSES])],
        g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="where to write the .onnx file")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"wrote {build_classifier(args.output, args.seed)}")


if __name__ == "__main__":
    main()
