"""Classify images with the `resnet50` model on Triton and print the top-5 classes of each.

    python examples/resnet50/client.py                       # 4 synthetic images
    python examples/resnet50/client.py cat.jpg dog.png       # your own images
    python examples/resnet50/client.py --synthetic 11        # 11 images in one request

Images are resized to 224x224 and normalised with the ImageNet mean and standard deviation, then
sent as one FP32 [N,3,224,224] request; the server runs it in batch gears (11 rows: 8 + 4 with
one padded row). The weights are random, so the classes are only indices.

    python examples/resnet50/client.py --aipp                # the ModelZoo layout (build --aipp)

`--aipp` sends the images as they are decoded, uint8 RGB HWC [N,256,256,3], to `resnet50_aipp`,
whose AIPP crops them to 224x224 and normalises them on the device: 196,608 bytes per image
instead of FP32's 602,112 (405,504 bytes, 67%, less per image; a 224x224 source would be 4x less).

    python examples/resnet50/client.py --jpeg cat.jpg        # the DVPP layout (build --jpeg)

`--jpeg` sends the files themselves, a BYTES [N,1] tensor of JPEG files, to `resnet50_jpeg`:
the server's DVPP decodes and resizes each on the device; nothing is decoded here. Without
files it sends synthetic images encoded as JPEG.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
from example_tools import infer, top5  # noqa: E402

IMAGE_SIZE = 224
SOURCE_SIZE = 256  # what resnet50_aipp takes: its AIPP crops the center 224x224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def load_image(path: str | Path) -> np.ndarray:
    """An image file as normalised FP32 [3, 224, 224] (RGB, resized, ImageNet mean/std)."""
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR)
    pixels = np.asarray(rgb, np.float32) / 255.0
    return ((pixels - MEAN) / STD).transpose(2, 0, 1).copy()


def load_source(path: str | Path) -> np.ndarray:
    """An image file as resnet50_aipp takes it: uint8 RGB HWC [256, 256, 3], nothing else."""
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB").resize((SOURCE_SIZE, SOURCE_SIZE), Image.BILINEAR)
    return np.asarray(rgb, np.uint8).copy()


def synthetic_sources(count: int, seed: int = 0) -> np.ndarray:
    """`count` smooth random colour fields as uint8 RGB HWC [count, 256, 256, 3]."""
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (count, 8, 8, 3), dtype=np.uint8)
    return coarse.repeat(SOURCE_SIZE // 8, axis=1).repeat(SOURCE_SIZE // 8, axis=2)


def load_jpeg(path: str | Path) -> bytes:
    """A JPEG file as resnet50_jpeg takes it: its bytes, nothing decoded."""
    return Path(path).read_bytes()


def synthetic_jpegs(count: int, seed: int = 0) -> np.ndarray:
    """`synthetic_sources` encoded as JPEG (quality 90): a BYTES [count, 1] array."""
    import io

    from PIL import Image

    files = []
    for image in synthetic_sources(count, seed):
        out = io.BytesIO()
        Image.fromarray(image).save(out, "JPEG", quality=90)
        files.append(out.getvalue())
    return jpeg_batch(files)


def jpeg_batch(files: Sequence[bytes]) -> np.ndarray:
    """JPEG files as one request's BYTES tensor: [N, 1], one file per row."""
    batch = np.empty((len(files), 1), dtype=object)
    batch[:, 0] = list(files)
    return batch


def request_bytes(images: np.ndarray) -> str:
    """What the request carries, and what FP32 [N,3,224,224] would have carried."""
    fp32 = len(images) * 3 * IMAGE_SIZE * IMAGE_SIZE * 4
    carried = sum(len(item) for item in images[:, 0]) if images.dtype == object else images.nbytes
    what = "JPEG files" if images.dtype == object else str(images.dtype)
    return f"{carried} bytes of {what} (FP32 [N,3,224,224]: {fp32} bytes, {fp32 - carried} more)"


def synthetic_images(count: int, seed: int = 0) -> np.ndarray:
    """`count` smooth random colour fields, normalised like photos: FP32 [count, 3, 224, 224]."""
    rng = np.random.default_rng(seed)
    coarse = rng.random((count, 3, 7, 7), dtype=np.float32)
    fields = coarse.repeat(IMAGE_SIZE // 7, axis=2).repeat(IMAGE_SIZE // 7, axis=3)
    return ((fields - MEAN[:, None, None]) / STD[:, None, None]).astype(np.float32)


def classify(url: str, model: str, images: np.ndarray) -> np.ndarray:
    """One request with every image (FP32 NCHW, uint8 HWC for an AIPP model, or JPEG files
    [N, 1] for resnet50_jpeg); the logits, FP32 [N, 1000]."""
    datatype = {np.dtype(np.uint8): "UINT8", np.dtype(object): "BYTES"}.get(images.dtype, "FP32")
    return infer(url, model, "input", images, datatype).as_numpy("logits")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*", help="image files (JPEG, PNG, ...)")
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP address")
    parser.add_argument("--model", help="default: resnet50, resnet50_aipp with --aipp")
    parser.add_argument(
        "--synthetic",
        type=int,
        default=4,
        help="synthetic images when no file is given",
    )
    layouts = parser.add_mutually_exclusive_group()
    layouts.add_argument(
        "--aipp",
        action="store_true",
        help="send uint8 RGB 256x256 images to resnet50_aipp",
    )
    layouts.add_argument(
        "--jpeg",
        action="store_true",
        help="send the JPEG files themselves to resnet50_jpeg",
    )
    args = parser.parse_args(argv)
    layout = "aipp" if args.aipp else "jpeg" if args.jpeg else None
    model = args.model or (f"resnet50_{layout}" if layout else "resnet50")

    load, synthetic = (
        (load_source, synthetic_sources) if args.aipp else (load_image, synthetic_images)
    )
    if args.jpeg:
        synthetic = synthetic_jpegs
    if args.images and args.jpeg:
        names = list(args.images)
        images = jpeg_batch([load_jpeg(path) for path in names])
    elif args.images:
        names = list(args.images)
        images = np.stack([load(path) for path in names])
    else:
        names = [f"synthetic image {i}" for i in range(args.synthetic)]
        images = synthetic(args.synthetic)
    logits = classify(args.url, model, images)
    print(f"{model}: {len(images)} image(s) in one request, logits {list(logits.shape)}")
    print(f"  request: {request_bytes(images)}")
    for name, row in zip(names, logits):
        ranked = ", ".join(f"class {c} ({p:.1%})" for c, p in top5(row))
        print(f"  {name}: top-5 {ranked}")


if __name__ == "__main__":
    main()
