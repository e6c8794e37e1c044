"""Public trained ONNX models from PyPI wheels, real inputs for them, and the task answers users
read from their outputs: the real-model suite's fixtures.

`model_file(WHEEL, member)` returns the path of `member` (a file inside the wheel), downloading
the pinned wheel once with pip (`pip download --no-deps`) into the user's cache
(~/.cache/ge-python-backend/real-models, kept between runs on one machine) and unpacking it on
first use; a wheel whose SHA-256 differs is deleted and refused. `onnx_file(name)` gives the
ONNX file of `MODELS[name]`, checked against its own SHA-256 too. Parallel test workers share
the cache under a file lock.

The models (`MODELS`):
- `ocr_det`: PaddleOCR PP-OCRv4 text detector (DB; Convs with BatchNorm at their trained scale),
- `ocr_rec`: PP-OCRv4 CTC text recognizer (SVTR-LCNet, 6625 characters),
- `ocr_cls`: PaddleOCR mobile v2.0 text-angle classifier (0 or 180 degrees),
  the three from rapidocr-onnxruntime 1.3.24;
- `magika`: Google's byte-level file-type classifier (214 types), whose LayerNorm sums squares
  past float16's range (1.8e5 on a Python source file);
- `yolo`: ddddocr's YOLOX-style character detector (416x416, 3549 anchors);
- `crnn`: ddddocr's CRNN text recognizer (Convs, an LSTM, CTC logits [T, 1, 8210] out, although
  its graph declares [1, seqlen]);
- `quantized`: ddddocr's onnxruntime-quantized CRNN (`com.microsoft` DynamicQuantizeLSTM,
  ConvInteger), which ATC cannot parse.

Inputs are real: rendered text (Pillow's own font), a photo (matplotlib's sample photo of Grace
Hopper, a dev dependency) and files of the Python standard library. `answer(name, outputs)` turns
a model's outputs into what a user reads (text, top-1 class, boxes), the same for onnxruntime's
outputs and the served model's. `build_real_repository` writes them as a GPU team serves them
(onnxruntime platform, KIND_GPU, -1 dims) with their clients' requests as samples.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import math
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ge-python-backend"
MODELS_CACHE = CACHE / "real-models"


@dataclasses.dataclass(frozen=True)
class Wheel:
    """A wheel on PyPI, pinned by version and SHA-256."""

    project: str
    version: str
    sha256: str

    @property
    def pattern(self) -> str:
        """The wheel's file name, tags left open."""
        return f"{self.project.replace('-', '_')}-{self.version}-*.whl"


@dataclasses.dataclass(frozen=True)
class RealModel:
    """A file inside a pinned wheel, pinned by its own SHA-256."""

    wheel: Wheel
    member: str  # the file's path inside the wheel
    sha256: str


# PaddleOCR PP-OCRv4 detector and recognizer, PP-OCR mobile v2 angle classifier (ONNX).
RAPIDOCR = Wheel(
    "rapidocr-onnxruntime",
    "1.3.24",
    "4282ff0b8db05ad2a53afc8d0ef2e7d879c53022fc61a4f8e84c58d737822cd2",
)
PPOCR_DETECTOR = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
PPOCR_RECOGNIZER = "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx"  # CTC, 6625 classes
PPOCR_CLASSIFIER = "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
MAGIKA = Wheel(
    "magika", "1.0.3", "3e9b49134e8116ee40b431664dcbed9e199413efddcce1a173c734b4e0521529"
)
DDDDOCR = Wheel(
    "ddddocr", "1.6.1", "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935"
)

MODELS = {
    "ocr_det": RealModel(
        RAPIDOCR,
        PPOCR_DETECTOR,
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    ),
    "ocr_rec": RealModel(
        RAPIDOCR,
        PPOCR_RECOGNIZER,
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
    ),
    "ocr_cls": RealModel(
        RAPIDOCR,
        PPOCR_CLASSIFIER,
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
    ),
    "magika": RealModel(
        MAGIKA,
        "magika/models/standard_v3_3/model.onnx",
        "fe2d2eb49c5f88a9e0a6c048e15d6ffdf86235519c2afc535044de433169ec8c",
    ),
    "yolo": RealModel(
        DDDDOCR,
        "ddddocr/common_det.onnx",
        "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
    ),
    "crnn": RealModel(
        DDDDOCR,
        "ddddocr/common.onnx",
        "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
    ),
    "quantized": RealModel(
        DDDDOCR,
        "ddddocr/common_old.onnx",
        "b8f2ad9cbc1f2e3922a6cb9459e30824e7e2467f3fb4fd61420640e34ea0bf68",
    ),
}
MAGIKA_CONFIG = RealModel(
    MAGIKA,
    "magika/models/standard_v3_3/config.min.json",
    "ae24c742205358f6ff6dfd5facb6743fb69743dbba8373e73da58ff0cbd695db",
)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_file(wheel: Wheel, member: str) -> Path:
    """`member` of `wheel`, from the cache (downloaded and unpacked on first use)."""
    target = MODELS_CACHE / f"{wheel.project}-{wheel.version}" / member
    if target.is_file():
        return target
    MODELS_CACHE.mkdir(parents=True, exist_ok=True)
    with open(MODELS_CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            with zipfile.ZipFile(_wheel_path(wheel)) as archive:
                partial = target.with_name(f".{target.name}.partial")
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_bytes(archive.read(member))
                partial.replace(target)
    return target


def _wheel_path(wheel: Wheel) -> Path:
    found = sorted(MODELS_CACHE.glob(wheel.pattern))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
             "--quiet", "--dest", str(MODELS_CACHE), f"{wheel.project}=={wheel.version}"],
            check=True,
        )  # fmt: skip
        found = sorted(MODELS_CACHE.glob(wheel.pattern))
    if len(found) != 1:
        raise RuntimeError(f"expected one wheel {wheel.pattern} in {MODELS_CACHE}, found {found}")
    path = found[0]
    digest = _sha256(path)
    if digest != wheel.sha256:
        path.unlink()
        raise RuntimeError(f"{path.name} has SHA-256 {digest}, expected {wheel.sha256}")
    return path


def _pinned(model: RealModel) -> Path:
    """`model`'s file, checked against its own SHA-256."""
    path = model_file(model.wheel, model.member)
    digest = _sha256(path)
    if digest != model.sha256:
        raise RuntimeError(f"{path} has SHA-256 {digest}, expected {model.sha256}")
    return path


def onnx_file(name: str) -> Path:
    """The ONNX file of `MODELS[name]`, from the cache (fetched and extracted on first use)."""
    return _pinned(MODELS[name])


# ---------------------------------------------------------------------------------------------
# Real inputs


def rendered_text(text: str, height: int = 48, *, margin: int = 8) -> np.ndarray:
    """`text` rendered black on white by Pillow's own scalable font: an RGB uint8 image
    `height` pixels tall, as wide as the text takes."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=int(height * 0.7))
    left, top, right, bottom = font.getbbox(text)
    image = Image.new("RGB", (right - left + 2 * margin, height), "white")
    ImageDraw.Draw(image).text(
        (margin - left, (height - (bottom - top)) // 2 - top), text, fill="black", font=font
    )
    return np.asarray(image)


def text_page(lines: Sequence[str], size: tuple[int, int] = (320, 160)) -> np.ndarray:
    """A white page (`size` = width, height) with `lines` of text one under another."""
    from PIL import Image, ImageDraw, ImageFont

    width, height = size
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=24)
    for row, line in enumerate(lines):
        draw.text((16, 16 + row * 44), line, fill="black", font=font)
    return np.asarray(image)


def photo() -> np.ndarray:
    """A real photo: matplotlib's sample image (Grace Hopper, 600x512 JPEG), RGB uint8."""
    import matplotlib
    from PIL import Image

    path = Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def stdlib_files() -> list[Path]:
    """Real files of several types from the Python standard library."""
    root = Path(sysconfig.get_paths()["stdlib"])
    wanted = ["json/__init__.py", "LICENSE.txt", "email/architecture.rst", "xml/dom/minidom.py"]
    found = [root / name for name in wanted if (root / name).is_file()]
    found += sorted(root.glob("lib-dynload/*.so"))[:1] + sorted(root.glob("**/*.zip"))[:1]
    return found


# ---------------------------------------------------------------------------------------------
# Each model's input, as its own pre-processing makes it


def _resized(image: np.ndarray, width: int, height: int) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((width, height), Image.BILINEAR))


def ocr_line_input(image: np.ndarray, width: int, height: int = 48) -> np.ndarray:
    """PaddleOCR's recognizer/classifier input [3, height, width]: the line resized to `height`
    keeping its aspect (at most `width`), scaled to [-1, 1], padded with zeros to `width`."""
    scaled = min(width, math.ceil(height * image.shape[1] / image.shape[0]))
    pixels = _resized(image, scaled, height).astype(np.float32) / 255.0
    chw = ((pixels - 0.5) / 0.5).transpose(2, 0, 1)
    padded = np.zeros((3, height, width), np.float32)
    padded[:, :, :scaled] = chw
    return padded


def ocr_det_input(image: np.ndarray) -> np.ndarray:
    """PaddleOCR's detector input [3, H, W] (sides multiples of 32): ImageNet-normalised."""
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    return ((image.astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1)


def magika_input(path: Path) -> np.ndarray:
    """Magika's input [2048] int32: the file's first and last bytes (stripped of leading and
    trailing whitespace), padded with the padding token, as its config says."""
    config = json.loads(_pinned(MAGIKA_CONFIG).read_text())
    begin, end, pad = config["beg_size"], config["end_size"], config["padding_token"]
    block = config["block_size"]
    data = path.read_bytes()
    head, tail = data[:block].lstrip(), data[-block:].rstrip()
    row = np.full(begin + end, pad, np.int32)
    first = np.frombuffer(head[:begin], np.uint8)
    last = np.frombuffer(tail[-end:], np.uint8) if end else np.zeros(0, np.uint8)
    row[: first.size] = first
    if last.size:
        row[begin + end - last.size :] = last
    return row


def magika_labels() -> list[str]:
    return list(json.loads(_pinned(MAGIKA_CONFIG).read_text())["target_labels_space"])


def yolo_input(image: np.ndarray, side: int = 416) -> np.ndarray:
    """ddddocr's detector input [3, side, side]: the image letterboxed (grey 114), 0-255."""
    scale = min(side / image.shape[0], side / image.shape[1])
    width, height = int(image.shape[1] * scale), int(image.shape[0] * scale)
    boxed = np.full((side, side, 3), 114, np.uint8)
    boxed[:height, :width] = _resized(image, width, height)
    return boxed.astype(np.float32).transpose(2, 0, 1)


def crnn_input(image: np.ndarray, width: int) -> np.ndarray:
    """ddddocr's CRNN input [1, 64, width]: grey, 64 pixels tall, [0, 1], padded white."""
    grey = image.astype(np.float32).mean(axis=2)
    scaled = min(width, math.ceil(64 * grey.shape[1] / grey.shape[0]))
    from PIL import Image

    line = np.asarray(Image.fromarray(grey.astype(np.uint8)).resize((scaled, 64), Image.BILINEAR))
    padded = np.full((64, width), 255, np.float32)
    padded[:, :scaled] = line
    return (padded / 255.0)[np.newaxis]


# ---------------------------------------------------------------------------------------------
# Task answers


def ctc_text(probabilities: np.ndarray, characters: Sequence[str]) -> list[str]:
    """PaddleOCR's greedy CTC decoding of [N, T, C] scores: per row, the best class per step,
    repeats merged, blanks (class 0) dropped, mapped to `characters` (class k = characters[k-1],
    the last class a space)."""
    return [
        "".join(characters[k - 1] if k <= len(characters) else " " for k in ctc_indices(row))
        for row in probabilities.argmax(axis=-1)
    ]


def ctc_indices(steps: np.ndarray) -> list[int]:
    """One row of best-class indices, repeats merged and blanks (0) dropped."""
    kept, previous = [], -1
    for index in np.asarray(steps).tolist():
        if index != previous and index != 0:
            kept.append(int(index))
        previous = index
    return kept


def ocr_characters() -> list[str]:
    """The recognizer's dictionary, from its ONNX metadata (`character`)."""
    import onnx

    model = onnx.load(str(onnx_file("ocr_rec")), load_external_data=False)
    text = next(prop.value for prop in model.metadata_props if prop.key == "character")
    return text.splitlines()


def top1(scores: np.ndarray) -> list[int]:
    return [int(k) for k in np.asarray(scores).reshape(len(scores), -1).argmax(axis=1)]


Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def text_boxes(probability: np.ndarray, threshold: float = 0.3, min_pixels: int = 9) -> list[Box]:
    """DB post-processing's boxes of one [H, W] probability map: the bounding rectangles of the
    4-connected regions above `threshold` (regions under `min_pixels` dropped), top to bottom."""
    mask = probability > threshold
    seen = np.zeros_like(mask)
    boxes = []
    for start in zip(*np.nonzero(mask)):
        if seen[start]:
            continue
        seen[start] = True
        stack, pixels = [start], []
        while stack:
            y, x = stack.pop()
            pixels.append((y, x))
            for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                inside = 0 <= ny < mask.shape[0] and 0 <= nx < mask.shape[1]
                if inside and mask[ny, nx] and not seen[ny, nx]:
                    seen[ny, nx] = True
                    stack.append((ny, nx))
        if len(pixels) >= min_pixels:
            ys, xs = zip(*pixels)
            boxes.append((float(min(xs)), float(min(ys)), float(max(xs) + 1), float(max(ys) + 1)))
    return sorted(boxes, key=lambda box: (box[1], box[0]))


def yolo_boxes(prediction: np.ndarray, side: int = 416, threshold: float = 0.3) -> list[Box]:
    """YOLOX decoding of ddddocr's [A, 6] output (x, y, w, h, objectness, class score over the
    strides 8, 16, 32 of a `side` square), score above `threshold`, greedy NMS at IoU 0.45."""
    grids, strides = [], []
    for stride in (8, 16, 32):
        cells = side // stride
        ys, xs = np.meshgrid(np.arange(cells), np.arange(cells), indexing="ij")
        grids.append(np.stack([xs, ys], axis=-1).reshape(-1, 2))
        strides.append(np.full((cells * cells, 1), stride))
    grid, stride_of = np.concatenate(grids), np.concatenate(strides)
    centers = (prediction[:, :2] + grid) * stride_of
    sizes = np.exp(prediction[:, 2:4]) * stride_of
    scores = prediction[:, 4] * prediction[:, 5]
    order = [k for k in np.argsort(-scores) if scores[k] > threshold]
    kept: list[Box] = []
    for k in order:
        box = (*(centers[k] - sizes[k] / 2), *(centers[k] + sizes[k] / 2))
        candidate = tuple(float(v) for v in box)
        if all(iou(candidate, other) < 0.45 for other in kept):
            kept.append(candidate)  # type: ignore[arg-type]
    return sorted(kept)


def iou(a: Box, b: Box) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    overlap = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - overlap
    return overlap / union if union > 0 else 1.0


def same_boxes(found: Sequence[Box], expected: Sequence[Box], least_iou: float = 0.99) -> bool:
    """As many boxes, each matching its counterpart (same order) at IoU >= `least_iou`."""
    return len(found) == len(expected) and all(
        iou(a, b) >= least_iou for a, b in zip(found, expected)
    )


# ---------------------------------------------------------------------------------------------
# The GPU team's repository of the real models, their clients' requests and the gate's samples

GPU_CONFIGS = {
    "ocr_det": """\
name: "ocr_det"
platform: "onnxruntime_onnx"
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 3, -1, -1 ] } ]
output [ { name: "sigmoid_0.tmp_0" data_type: TYPE_FP32 dims: [ -1, 1, -1, -1 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
""",
    "ocr_rec": """\
name: "ocr_rec"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 48, -1 ] } ]
output [ { name: "softmax_11.tmp_0" data_type: TYPE_FP32 dims: [ -1, 6625 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
dynamic_batching { preferred_batch_size: [ 4, 8 ] }
""",
    "ocr_cls": """\
name: "ocr_cls"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 48, 192 ] } ]
output [ { name: "save_infer_model/scale_0.tmp_1" data_type: TYPE_FP32 dims: [ 2 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
dynamic_batching { }
""",
    "magika": """\
name: "magika"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "bytes" data_type: TYPE_INT32 dims: [ 2048 ] } ]
output [ { name: "target_label" data_type: TYPE_FP32 dims: [ 214 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
dynamic_batching { }
""",
    "yolo": """\
name: "yolo"
platform: "onnxruntime_onnx"
input [ { name: "images" data_type: TYPE_FP32 dims: [ 1, 3, 416, 416 ] } ]
output [ { name: "output" data_type: TYPE_FP32 dims: [ 1, 3549, 6 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
""",
    "crnn": """\
name: "crnn"
platform: "onnxruntime_onnx"
input [ { name: "input1" data_type: TYPE_FP32 dims: [ 1, 1, 64, -1 ] } ]
output [ { name: "387" data_type: TYPE_FP32 dims: [ -1, 1, 8210 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
""",
}
# --gears of `migrate` for the axes the configs leave open (single sizes compile static)
GEARS = [
    "ocr_det/x.0:1",
    "ocr_det/x.2,x.3:96x320,160x320,160x640",
    "ocr_rec/x.3:160,320",
    "crnn/input1.3:192,320",
]
TEXT = "Hello World 2026"
PAGE = ["Hello World", "Ascend 310P3"]


def client_requests() -> dict[str, list[dict[str, np.ndarray]]]:
    """What the team's clients send each model: per model, its requests (input name -> array,
    with the batch axis of a batched model), made from real inputs."""
    line = rendered_text(TEXT)
    words = [rendered_text(word) for word in ("Triton", "Ascend", "float16", "NPU 2026")]
    files = stdlib_files()
    return {
        "ocr_det": [{"x": ocr_det_input(text_page(PAGE))[np.newaxis]}],
        "ocr_rec": [
            {"x": ocr_line_input(line, 320)[np.newaxis]},
            {"x": np.stack([ocr_line_input(word, 160) for word in words])},
        ],
        "ocr_cls": [
            {"x": np.stack([ocr_line_input(image, 192) for image in (line, line[::-1, ::-1])])}
        ],
        "magika": [{"bytes": np.stack([magika_input(path) for path in files])}],
        "yolo": [
            {"images": yolo_input(photo())[np.newaxis]},
            {"images": yolo_input(text_page(["Hello 2026", "ABC xyz"], (416, 160)))[np.newaxis]},
        ],
        "crnn": [{"input1": crnn_input(rendered_text("ab12cd", 64), 192)[np.newaxis]}],
    }


def answer(name: str, outputs: Sequence[np.ndarray]) -> object:
    """The task answer a user reads from model `name`'s outputs (in the ONNX's order)."""
    (output,) = outputs
    if name == "ocr_det":
        return [text_boxes(page[0]) for page in output]
    if name == "ocr_rec":
        return ctc_text(output, ocr_characters())
    if name in ("ocr_cls", "magika"):
        return top1(output)
    if name == "yolo":
        return [yolo_boxes(image) for image in output]
    if name == "crnn":
        return ctc_indices(output[:, 0].argmax(axis=-1))
    raise KeyError(name)


def same_answer(name: str, found: object, expected: object) -> bool:
    """Boxes within IoU 0.99 for the detectors, equality for the rest."""
    if name in ("ocr_det", "yolo"):
        assert isinstance(found, list) and isinstance(expected, list)
        return len(found) == len(expected) and all(
            same_boxes(a, b) for a, b in zip(found, expected)
        )
    return found == expected


def build_real_repository(root: Path, samples: Path) -> Path:
    """The GPU team's repository of the real models under `root` (onnxruntime platform,
    KIND_GPU, -1 dims), and the migration's samples under `samples/<model>/` (the clients'
    requests, one .npz each); returns `root`."""
    requests = client_requests()
    for name, config in GPU_CONFIGS.items():
        version = root / name / "1"
        version.mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        os.symlink(onnx_file(name), version / "model.onnx")
        (samples / name).mkdir(parents=True)
        for number, request in enumerate(requests[name]):
            np.savez(samples / name / f"request{number}.npz", **request)
    return root
