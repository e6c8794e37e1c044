"""Detect objects with the `yolov8n` model on Triton and print the boxes found in each image.

    python examples/yolov8n/client.py                    # two synthetic scenes
    python examples/yolov8n/client.py street.jpg         # your own images
    python examples/yolov8n/client.py --conf 0.3 --iou 0.5
    python examples/yolov8n/client.py --nms-in-graph     # a model built with --nms-in-graph

Images are resized to 640x640 and scaled to 0..1, then sent as one FP32 [N,3,640,640] request. The
model answers three tensors per image (`boxes` [8400,4], `scores` [8400], `labels` [8400]); this
client keeps the anchors above `--conf`, runs class-wise non-maximum suppression and prints the
boxes in the original image's pixels. The weights are random: the boxes show the plumbing, not
real objects. A model built with `--nms-in-graph` runs NMS itself: one image per request, and
each answer has one row per detection (`det_boxes` [K,4], `det_scores` [K], `det_labels` [K]).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
from example_tools import infer  # noqa: E402

IMAGE_SIZE = 640
OUTPUTS = ("boxes", "scores", "labels")
NMS_OUTPUTS = ("det_boxes", "det_scores", "det_labels")
COCO_CLASSES = (
    "person",
    "bicycle",
    "car",
    "motorcycle",
    "airplane",
    "bus",
    "train",
    "truck",
    "boat",
    "traffic_light",
    "fire_hydrant",
    "stop_sign",
    "parking_meter",
    "bench",
    "bird",
    "cat",
    "dog",
    "horse",
    "sheep",
    "cow",
    "elephant",
    "bear",
    "zebra",
    "giraffe",
    "backpack",
    "umbrella",
    "handbag",
    "tie",
    "suitcase",
    "frisbee",
    "skis",
    "snowboard",
    "sports_ball",
    "kite",
    "baseball_bat",
    "baseball_glove",
    "skateboard",
    "surfboard",
    "tennis_racket",
    "bottle",
    "wine_glass",
    "cup",
    "fork",
    "knife",
    "spoon",
    "bowl",
    "banana",
    "apple",
    "sandwich",
    "orange",
    "broccoli",
    "carrot",
    "hot_dog",
    "pizza",
    "donut",
    "cake",
    "chair",
    "couch",
    "potted_plant",
    "bed",
    "dining_table",
    "toilet",
    "tv",
    "laptop",
    "mouse",
    "remote",
    "keyboard",
    "cell_phone",
    "microwave",
    "oven",
    "toaster",
    "sink",
    "refrigerator",
    "book",
    "clock",
    "vase",
    "scissors",
    "teddy_bear",
    "hair_drier",
    "toothbrush",
)


@dataclass(frozen=True)
class Detection:
    label: int
    score: float
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in pixels

    def __str__(self) -> str:
        x1, y1, x2, y2 = self.box
        name = COCO_CLASSES[self.label].replace("_", " ")
        return f"{name:<14} {self.score:.2f}  box ({x1:6.1f}, {y1:6.1f}) - ({x2:6.1f}, {y2:6.1f})"


def load_image(path: str | Path) -> tuple[np.ndarray, tuple[int, int]]:
    """An image file as FP32 [3, 640, 640] in 0..1, and its original (width, height)."""
    from PIL import Image

    with Image.open(path) as image:
        size = image.size
        rgb = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR)
    return (np.asarray(rgb, np.float32) / 255.0).transpose(2, 0, 1).copy(), size


def synthetic_scene(seed: int) -> np.ndarray:
    """A 640x640 scene of coloured rectangles and ellipses, FP32 [3, 640, 640] in 0..1."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    image = Image.new(
        "RGB", (IMAGE_SIZE, IMAGE_SIZE), tuple(int(v) for v in rng.integers(0, 256, 3))
    )
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y = (int(v) for v in rng.integers(0, IMAGE_SIZE - 120, 2))
        w, h = (int(v) for v in rng.integers(60, 240, 2))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        shape = draw.rectangle if rng.random() < 0.5 else draw.ellipse
        shape((x, y, x + w, y + h), fill=colour)
    return (np.asarray(image, np.float32) / 255.0).transpose(2, 0, 1).copy()


def detect_raw(url: str, model: str, images: np.ndarray) -> dict[str, np.ndarray]:
    """One request with every image; the model's three outputs."""
    result = infer(url, model, "images", images, "FP32", OUTPUTS)
    return {name: result.as_numpy(name) for name in OUTPUTS}


def detect_in_graph(url: str, model: str, image: np.ndarray) -> dict[str, np.ndarray]:
    """One request with one image ([1,3,640,640]) to a model with NMS in its graph: its three
    outputs, one row per detection (K differs from image to image)."""
    result = infer(url, model, "images", image[None], "FP32", NMS_OUTPUTS)
    return {name: result.as_numpy(name) for name in NMS_OUTPUTS}


def in_graph_detections(outputs: dict[str, np.ndarray]) -> list[Detection]:
    """The model's detections, best score first."""
    order = np.argsort(-outputs["det_scores"], kind="stable")
    return [
        Detection(
            int(outputs["det_labels"][i]),
            float(outputs["det_scores"][i]),
            tuple(float(v) for v in outputs["det_boxes"][i]),  # type: ignore[arg-type]
        )
        for i in order
    ]


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    top_left = np.maximum(box[:2], others[:, :2])
    bottom_right = np.minimum(box[2:], others[:, 2:])
    overlap = np.prod(np.clip(bottom_right - top_left, 0, None), axis=1)
    area = np.prod(box[2:] - box[:2])
    areas = np.prod(others[:, 2:] - others[:, :2], axis=1)
    return overlap / np.maximum(area + areas - overlap, 1e-9)


def postprocess(
    boxes: np.ndarray,
    scores: np.ndarray,
    labels: np.ndarray,
    conf: float = 0.25,
    iou: float = 0.45,
    max_detections: int = 100,
) -> list[Detection]:
    """One image's anchors -> detections: score >= conf, then greedy NMS within each class."""
    keep = np.flatnonzero(scores >= conf)
    keep = keep[np.argsort(-scores[keep], kind="stable")]
    chosen: list[int] = []
    while keep.size and len(chosen) < max_detections:
        best, rest = keep[0], keep[1:]
        chosen.append(int(best))
        same_class = labels[rest] == labels[best]
        overlapping = _iou(boxes[best], boxes[rest]) > iou
        keep = rest[~(same_class & overlapping)]
    return [
        Detection(int(labels[i]), float(scores[i]), tuple(float(v) for v in boxes[i]))  # type: ignore[arg-type]
        for i in chosen
    ]


def scaled(detection: Detection, size: tuple[int, int]) -> Detection:
    """A detection in the pixels of an image of `size` (width, height) instead of 640x640."""
    sx, sy = size[0] / IMAGE_SIZE, size[1] / IMAGE_SIZE
    x1, y1, x2, y2 = detection.box
    return Detection(detection.label, detection.score, (x1 * sx, y1 * sy, x2 * sx, y2 * sy))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*", help="image files (JPEG, PNG, ...)")
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP address")
    parser.add_argument("--model", default="yolov8n")
    parser.add_argument("--conf", type=float, default=0.25, help="score threshold")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold")
    parser.add_argument("--top", type=int, default=10, help="detections printed per image")
    parser.add_argument(
        "--nms-in-graph",
        action="store_true",
        help="the model runs NMS in its graph (build.py --nms-in-graph): one request per image",
    )
    args = parser.parse_args(argv)

    if args.images:
        loaded = [load_image(path) for path in args.images]
        names = list(args.images)
        images = np.stack([pixels for pixels, _ in loaded])
        sizes = [size for _, size in loaded]
    else:
        names = ["synthetic scene 0", "synthetic scene 1"]
        images = np.stack([synthetic_scene(0), synthetic_scene(1)])
        sizes = [(IMAGE_SIZE, IMAGE_SIZE)] * 2
    if args.nms_in_graph:
        for name, image, size in zip(names, images, sizes):
            found = in_graph_detections(detect_in_graph(args.url, args.model, image))
            print(f"  {name}: {len(found)} detection(s) (NMS in the graph)")
            for detection in found[: args.top]:
                print(f"    {scaled(detection, size)}")
        return
    outputs = detect_raw(args.url, args.model, images)
    shapes = ", ".join(f"{k} {list(v.shape)} {v.dtype}" for k, v in outputs.items())
    print(f"{args.model}: {len(images)} image(s) in one request -> {shapes}")
    for index, (name, size) in enumerate(zip(names, sizes)):
        found = postprocess(
            outputs["boxes"][index],
            outputs["scores"][index],
            outputs["labels"][index],
            args.conf,
            args.iou,
        )
        print(f"  {name}: {len(found)} detection(s) (score >= {args.conf}, NMS IoU {args.iou})")
        for detection in found[: args.top]:
            print(f"    {scaled(detection, size)}")


if __name__ == "__main__":
    main()
