"""A YOLOv8n-style object detector in ONNX, built locally with random weights (no downloads).

Input `images` FP32 [N, 3, 640, 640] (RGB scaled to 0..1). A backbone of stride-2 3x3 convolutions
with SiLU (16, 32, 64, 128, 256 channels at `width` 16, YOLOv8n's widths) gives feature maps at
strides 8, 16 and 32 (80x80, 40x40, 20x20 cells: 8400 anchor points). An anchor-free decoupled head
on each predicts four distances (left, top, right, bottom) and 80 class logits per cell, decoded
in the graph into three outputs:

* `boxes`  FP32  [N, 8400, 4]  x1, y1, x2, y2 in pixels of the 640x640 input;
* `scores` FP32  [N, 8400]     the best class probability of each anchor (sigmoid);
* `labels` INT64 [N, 8400]     that class (COCO's 80 classes).

Confidence filtering and non-maximum suppression are left to the client, as with YOLOv8 exports.

With `nms=True` the graph ends in ONNX NonMaxSuppression instead (per class, IoU `NMS_IOU`, score
`NMS_SCORE`, at most `NMS_MAX_PER_CLASS` boxes per class), for one image [1, 3, 640, 640]; the
number of detections K depends on the image (a data-dependent output shape):

* `det_boxes`  FP32  [K, 4]  x1, y1, x2, y2 in pixels;
* `det_scores` FP32  [K]     the class probability;
* `det_labels` INT64 [K]     the class.

`build_yolov8` builds the real YOLOv8 detection graph instead, at one of its scales (`SCALES`:
n, s, m with Ultralytics' depth, width and channel caps): a backbone of stride-2 Conv and C2f
(CSP) blocks, SPPF, a PAN neck (upsample and concat top-down, stride-2 Conv and concat
bottom-up, C2f after each concat), the decoupled head (per level a box branch of 4 x 16 DFL
bins and a class branch of 80 logits) and the DFL decode in the graph, as Ultralytics exports
it: input `images` FP32 [N, 3, 640, 640], output `output0` FP32 [N, 84, 8400] (x, y, w, h in
pixels, then the 80 class probabilities). Batch normalisation is folded into each Conv's bias.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IMAGE_SIZE = 640
NUM_CLASSES = 80
STRIDES = (8, 16, 32)
NUM_ANCHORS = sum((IMAGE_SIZE // s) ** 2 for s in STRIDES)  # 8400
INPUT_NAME = "images"
OUTPUT_NAMES = ("boxes", "scores", "labels")
NMS_OUTPUT_NAMES = ("det_boxes", "det_scores", "det_labels")
NMS_IOU, NMS_SCORE, NMS_MAX_PER_CLASS = 0.45, 0.25, 20
# Class bias for a prior probability of 1 % (as YOLO initialises it): few confident anchors.
CLASS_PRIOR_BIAS = float(-np.log((1 - 0.01) / 0.01))


class _Graph:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, kind: str) -> str:
        self._count += 1
        return f"{kind}_{self._count}"

    def constant(self, values: np.ndarray, kind: str = "const") -> str:
        name = self.name(kind)
        self.initializers.append(numpy_helper.from_array(values, name))
        return name

    def node(self, op_type: str, inputs: list[str], outputs: int = 1, **attrs: object) -> str:
        names = [self.name(op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, names, **attrs))
        return names[0]

    def conv(
        self,
        x: str,
        c_in: int,
        c_out: int,
        kernel: int,
        stride: int = 1,
        bias: float = 0.0,
        gain: float = 2.0,
    ) -> str:
        fan_in = c_in * kernel * kernel
        weight = self.rng.normal(0.0, np.sqrt(gain / fan_in), (c_out, c_in, kernel, kernel))
        return self.node(
            "Conv",
            [
                x,
                self.constant(weight.astype(np.float32), "conv_w"),
                self.constant(np.full(c_out, bias, np.float32), "conv_b"),
            ],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[kernel // 2] * 4,
        )

    def silu(self, x: str) -> str:
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def save(
        self,
        path: str | Path,
        name: str,
        image: onnx.ValueInfoProto,
        outputs: list[onnx.ValueInfoProto],
    ) -> Path:
        """The graph of the nodes so far (opset 17), checked and written to `path`."""
        graph = helper.make_graph(self.nodes, name, [image], outputs, self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8  # what onnxruntime accepts for opset 17
        onnx.checker.check_model(model, full_check=True)
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(target))
        return target


def anchor_points() -> tuple[np.ndarray, np.ndarray]:
    """Cell centres in pixels, FP32 [8400, 2] (x, y), and each anchor's stride, FP32 [8400, 1]."""
    centres, strides = [], []
    for stride in STRIDES:
        cells = IMAGE_SIZE // stride
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        centres.append((np.stack([xs, ys], axis=-1).reshape(-1, 2) + 0.5) * stride)
        strides.append(np.full((cells * cells, 1), stride))
    return (
        np.concatenate(centres).astype(np.float32),
        np.concatenate(strides).astype(np.float32),
    )


def build_yolov8n(path: str | Path, width: int = 16, seed: int = 0, nms: bool = False) -> Path:
    """Write the detector to `path` (see the module docstring) and return the path; `nms`: with
    NonMaxSuppression in the graph, for one image."""
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    g = _Graph(seed)
    channels = [width * 2**i for i in range(5)]  # 16, 32, 64, 128, 256 at width 16
    x, c_in, features = INPUT_NAME, 3, []
    for level, c_out in enumerate(channels):  # strides 2, 4, 8, 16, 32
        x = g.silu(g.conv(x, c_in, c_out, 3, 2))
        c_in = c_out
        if level >= 2:
            features.append((x, c_out))

    heads = []
    flat = g.constant(np.array([0, 4 + NUM_CLASSES, -1], np.int64), "shape")
    for feature, c in features:
        box = g.conv(g.silu(g.conv(feature, c, c, 3)), c, 4, 1)
        cls = g.silu(g.conv(feature, c, c, 3))
        # A large gain on the class layer: with random weights some anchors still pass 0.25.
        cls = g.conv(cls, c, NUM_CLASSES, 1, bias=CLASS_PRIOR_BIAS, gain=16.0)
        heads.append(g.node("Reshape", [g.node("Concat", [box, cls], axis=1), flat]))
    raw = g.node("Transpose", [g.node("Concat", heads, axis=2)], perm=[0, 2, 1])  # [N,8400,84]

    splits = g.constant(np.array([2, 2, NUM_CLASSES], np.int64), "split")
    near, far, logits = (f"{name}_part" for name in ("near", "far", "logits"))
    g.nodes.append(helper.make_node("Split", [raw, splits], [near, far, logits], axis=2))
    centres, strides = anchor_points()
    # Distances in units of 4 cells: boxes of a few cells, so that NMS has overlaps to merge.
    anchors, scale = g.constant(centres, "anchors"), g.constant(4 * strides, "strides")
    top_left = g.node("Sub", [anchors, g.node("Mul", [g.node("Softplus", [near]), scale])])
    bottom_right = g.node("Add", [anchors, g.node("Mul", [g.node("Softplus", [far]), scale])])
    corners = g.node("Concat", [top_left, bottom_right], axis=2)
    low, high = g.constant(np.float32(0.0), "low"), g.constant(np.float32(IMAGE_SIZE), "high")
    if nms:  # the boxes feed NonMaxSuppression
        boxes = g.node("Clip", [corners, low, high])
    else:  # the boxes are an output
        boxes = "boxes"
        g.nodes.append(helper.make_node("Clip", [corners, low, high], [boxes]))
    probabilities = g.node("Sigmoid", [logits])
    if nms:
        outputs = _nms_outputs(g, boxes, probabilities)
    else:
        g.nodes.append(
            helper.make_node("ReduceMax", [probabilities], ["scores"], axes=[2], keepdims=0)
        )
        g.nodes.append(helper.make_node("ArgMax", [probabilities], ["labels"], axis=2, keepdims=0))
        outputs = [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", NUM_ANCHORS, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", NUM_ANCHORS]),
            helper.make_tensor_value_info("labels", TensorProto.INT64, ["N", NUM_ANCHORS]),
        ]

    image = helper.make_tensor_value_info(
        INPUT_NAME, TensorProto.FLOAT, [1 if nms else "N", 3, IMAGE_SIZE, IMAGE_SIZE]
    )
    return g.save(path, f"yolov8n_style_width{width}{'_nms' if nms else ''}", image, outputs)


def _nms_outputs(g: _Graph, boxes: str, probabilities: str) -> list[onnx.ValueInfoProto]:
    """NonMaxSuppression per class on one image's anchors; the kept boxes, scores and labels."""
    per_class = g.node("Transpose", [probabilities], perm=[0, 2, 1])  # [1, 80, 8400]
    selected = g.node(
        "NonMaxSuppression",
        [
            boxes,
            per_class,
            g.constant(np.array([NMS_MAX_PER_CLASS], np.int64), "max_per_class"),
            g.constant(np.array([NMS_IOU], np.float32), "iou"),
            g.constant(np.array([NMS_SCORE], np.float32), "score"),
        ],
    )  # [K, 3]: image, class, anchor
    column = {name: g.constant(np.array(i, np.int64), name) for i, name in ((1, "cls"), (2, "box"))}
    anchor = g.node("Gather", [selected, column["box"]], axis=1)
    image_boxes = g.node("Squeeze", [boxes, g.constant(np.array([0], np.int64), "axes")])
    g.nodes += [
        helper.make_node("Gather", [image_boxes, anchor], ["det_boxes"], axis=0),
        helper.make_node("GatherND", [per_class, selected], ["det_scores"]),
        helper.make_node("Gather", [selected, column["cls"]], ["det_labels"], axis=1),
    ]
    return [
        helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["K", 4]),
        helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, ["K"]),
        helper.make_tensor_value_info("det_labels", TensorProto.INT64, ["K"]),
    ]


# -- the real YOLOv8 detection graph -------------------------------------------------------------

YOLOV8_OUTPUT = "output0"
DFL_BINS = 16  # Ultralytics' reg_max: each box side is a distribution over 16 distances
# Ultralytics' yolov8.yaml scales: depth multiple, width multiple, largest channel count.
SCALES = {"n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768)}


class _Yolov8Graph(_Graph):
    """`_Graph` with YOLOv8's blocks (Ultralytics' `Conv`, `Bottleneck`, `C2f`, `SPPF`)."""

    def cbs(self, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1) -> str:
        """Conv (batch norm folded) and SiLU."""
        return self.silu(self.conv(x, c_in, c_out, kernel, stride))

    def c2f(self, x: str, c_in: int, c_out: int, blocks: int, shortcut: bool) -> str:
        """Split the 1x1 Conv's output in two halves, chain `blocks` bottlenecks on the second,
        concatenate every stage and fuse it with a 1x1 Conv."""
        half = c_out // 2
        first, second = self.name("c2f_a"), self.name("c2f_b")
        self.nodes.append(
            helper.make_node(
                "Split",
                [self.cbs(x, c_in, 2 * half, 1), self.constant(np.array([half, half], np.int64))],
                [first, second],
                axis=1,
            )
        )
        parts = [first, second]
        for _ in range(blocks):
            y = self.cbs(self.cbs(parts[-1], half, half, 3), half, half, 3)
            parts.append(self.node("Add", [parts[-1], y]) if shortcut else y)
        return self.cbs(self.node("Concat", parts, axis=1), (2 + blocks) * half, c_out, 1)

    def sppf(self, x: str, c_in: int, c_out: int) -> str:
        """Three chained 5x5 max poolings of a 1x1 Conv, concatenated and fused."""
        hidden = c_in // 2
        parts = [self.cbs(x, c_in, hidden, 1)]
        for _ in range(3):
            parts.append(
                self.node("MaxPool", [parts[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2] * 4)
            )
        return self.cbs(self.node("Concat", parts, axis=1), 4 * hidden, c_out, 1)

    def upsample(self, x: str) -> str:
        scales = self.constant(np.array([1, 1, 2, 2], np.float32), "scales")
        return self.node("Resize", [x, "", scales], mode="nearest")

    def branch(self, x: str, c_in: int, hidden: int, c_out: int, bias: float) -> str:
        """A head branch: two 3x3 Conv-SiLU, then a plain 1x1 Conv."""
        y = self.cbs(self.cbs(x, c_in, hidden, 3), hidden, hidden, 3)
        return self.conv(y, hidden, c_out, 1, bias=bias)


def yolov8_channels(scale: str) -> tuple[int, ...]:
    """The backbone's channels at strides 2 to 32 for `scale` (s: 32, 64, 128, 256, 512)."""
    _, width, largest = SCALES[scale]
    return tuple(int(min(c, largest) * width) for c in (64, 128, 256, 512, 1024))


def build_yolov8(path: str | Path, scale: str = "s", seed: int = 0) -> Path:
    """Write YOLOv8 `scale` (see the module docstring) to `path` and return the path."""
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, got {scale!r}")
    depth = SCALES[scale][0]

    def blocks(n: int) -> int:
        return max(round(n * depth), 1)

    c1, c2, c3, c4, c5 = yolov8_channels(scale)
    g = _Yolov8Graph(seed)
    x = g.cbs(g.cbs(INPUT_NAME, 3, c1, 3, 2), c1, c2, 3, 2)
    x = g.c2f(x, c2, c2, blocks(3), shortcut=True)
    p3 = g.c2f(g.cbs(x, c2, c3, 3, 2), c3, c3, blocks(6), shortcut=True)
    p4 = g.c2f(g.cbs(p3, c3, c4, 3, 2), c4, c4, blocks(6), shortcut=True)
    p5 = g.c2f(g.cbs(p4, c4, c5, 3, 2), c5, c5, blocks(3), shortcut=True)
    p5 = g.sppf(p5, c5, c5)
    # PAN neck: top-down, then bottom-up
    n4 = g.c2f(g.node("Concat", [g.upsample(p5), p4], axis=1), c5 + c4, c4, blocks(3), False)
    n3 = g.c2f(g.node("Concat", [g.upsample(n4), p3], axis=1), c4 + c3, c3, blocks(3), False)
    m4 = g.node("Concat", [g.cbs(n3, c3, c3, 3, 2), n4], axis=1)
    m4 = g.c2f(m4, c3 + c4, c4, blocks(3), False)
    m5 = g.node("Concat", [g.cbs(m4, c4, c4, 3, 2), p5], axis=1)
    m5 = g.c2f(m5, c4 + c5, c5, blocks(3), False)
    # decoupled head: a box branch (4 sides x DFL_BINS) and a class branch per level
    box_hidden = max(16, c3 // 4, 4 * DFL_BINS)
    cls_hidden = max(c3, min(NUM_CLASSES, 100))
    flat = g.constant(np.array([0, 4 * DFL_BINS + NUM_CLASSES, -1], np.int64), "shape")
    levels = []
    for feature, c in ((n3, c3), (m4, c4), (m5, c5)):
        box = g.branch(feature, c, box_hidden, 4 * DFL_BINS, 1.0)
        cls = g.branch(feature, c, cls_hidden, NUM_CLASSES, CLASS_PRIOR_BIAS)
        levels.append(g.node("Reshape", [g.node("Concat", [box, cls], axis=1), flat]))
    raw = g.node("Concat", levels, axis=2)  # [N, 144, 8400]
    box_part, cls_part = g.name("box_part"), g.name("cls_part")
    splits = g.constant(np.array([4 * DFL_BINS, NUM_CLASSES], np.int64), "split")
    g.nodes.append(helper.make_node("Split", [raw, splits], [box_part, cls_part], axis=1))
    # DFL: a softmax over each side's bins, their expected distance (a fixed 1x1 Conv)
    bins = g.constant(np.array([0, 4, DFL_BINS, NUM_ANCHORS], np.int64), "shape")
    spread = g.node("Transpose", [g.node("Reshape", [box_part, bins])], perm=[0, 2, 1, 3])
    expected = np.arange(DFL_BINS, dtype=np.float32).reshape(1, DFL_BINS, 1, 1)
    distances = g.node(
        "Conv", [g.node("Softmax", [spread], axis=1), g.constant(expected, "dfl_w")]
    )  # [N, 1, 4, 8400]
    sides = g.constant(np.array([0, 4, NUM_ANCHORS], np.int64), "shape")
    distances = g.node("Reshape", [distances, sides])
    near, far = g.name("near"), g.name("far")
    g.nodes.append(
        helper.make_node(
            "Split", [distances, g.constant(np.array([2, 2], np.int64))], [near, far], axis=1
        )
    )
    centres, strides = anchor_points()  # [8400, 2], [8400, 1]
    anchors = g.constant(np.ascontiguousarray(centres.T / strides.T), "anchors")  # [2, 8400]
    top_left = g.node("Sub", [anchors, near])
    bottom_right = g.node("Add", [anchors, far])
    centre = g.node(
        "Div", [g.node("Add", [top_left, bottom_right]), g.constant(np.float32(2.0), "two")]
    )
    size = g.node("Sub", [bottom_right, top_left])
    xywh = g.node(
        "Mul", [g.node("Concat", [centre, size], axis=1), g.constant(strides.T.copy(), "strides")]
    )
    g.nodes.append(
        helper.make_node("Concat", [xywh, g.node("Sigmoid", [cls_part])], [YOLOV8_OUTPUT], axis=1)
    )
    image = helper.make_tensor_value_info(
        INPUT_NAME, TensorProto.FLOAT, ["N", 3, IMAGE_SIZE, IMAGE_SIZE]
    )
    output = helper.make_tensor_value_info(
        YOLOV8_OUTPUT, TensorProto.FLOAT, ["N", 4 + NUM_CLASSES, NUM_ANCHORS]
    )
    return g.save(path, f"yolov8{scale}", image, [output])
