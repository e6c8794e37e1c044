"""Classify images with the `resnet50` model on Triton and print the top-5 classes of each.

    python examples/resnet50/client.py                       # 4 synthetic images
    python examples/resnet50/client.py cat.jpg dog.png       # your own images
    python examples/resnet50/client.py --synthetic 11        # 11 images in one request

Images are resized to 224x224 and normalised with the ImageNet mean and standard deviation, then
sent as one FP32 [N,3,224,224] request; the server runs it in batch gears (11 rows: 8 + 4 with
one padded row). The weights are random, so the classes are only indices.
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
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def load_image(path: str | Path) -> np.ndarray:
    """An image file as normalised FP32 [3, 224, 224] (RGB, resized, ImageNet mean/std)."""
    from PIL import Image

    with Image.open(path) as image:
        rgb = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR)
    pixels = np.asarray(rgb, np.float32) / 255.0
    return ((pixels - MEAN) / STD).transpose(2, 0, 1).copy()


def synthetic_images(count: int, seed: int = 0) -> np.ndarray:
    """`count` smooth random colour fields, normalised like photos: FP32 [count, 3, 224, 224]."""
    rng = np.random.default_rng(seed)
    coarse = rng.random((count, 3, 7, 7), dtype=np.float32)
    fields = coarse.repeat(IMAGE_SIZE // 7, axis=2).repeat(IMAGE_SIZE // 7, axis=3)
    return ((fields - MEAN[:, None, None]) / STD[:, None, None]).astype(np.float32)


def classify(url: str, model: str, images: np.ndarray) -> np.ndarray:
    """One request with every image; the logits, FP32 [N, 1000]."""
    return infer(url, model, "input", images, "FP32").as_numpy("logits")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*", help="image files (JPEG, PNG, ...)")
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP address")
    parser.add_argument("--model", default="resnet50")
    parser.add_argument(
        "--synthetic", type=int, default=4, help="synthetic images when no file is given"
    )
    args = parser.parse_args(argv)

    if args.images:
        names = list(args.images)
        images = np.stack([load_image(path) for path in names])
    else:
        names = [f"synthetic image {i}" for i in range(args.synthetic)]
        images = synthetic_images(args.synthetic)
    logits = classify(args.url, args.model, images)
    print(f"{args.model}: {len(images)} image(s) in one request, logits {list(logits.shape)}")
    for name, row in zip(names, logits):
        ranked = ", ".join(f"class {c} ({p:.1%})" for c, p in top5(row))
        print(f"  {name}: top-5 {ranked}")


if __name__ == "__main__":
    main()
