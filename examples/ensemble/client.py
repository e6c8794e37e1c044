"""Send encoded images to the `classify_image` ensemble and print the top-5 classes of each.

    python examples/ensemble/client.py                     # a synthetic JPEG and PNG
    python examples/ensemble/client.py cat.jpg dog.png     # your own files, sent as they are

The client does no image processing: it sends each file's bytes in a BYTES [N,1] tensor. Triton's
ensemble scheduler runs `preprocess` (Python backend: decode, resize to 224x224, normalise) and
passes its FP32 [N,3,224,224] to `classifier` (the `.om`), and answers the logits. The weights
are random, so the classes are only indices.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
from example_tools import infer, top5  # noqa: E402


def synthetic_image(seed: int, image_format: str, size: tuple[int, int] = (320, 240)) -> bytes:
    """An encoded picture (colour gradient with a disc) in `image_format` ("JPEG", "PNG")."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    width, height = size
    ramp = np.linspace(0, 1, width, dtype=np.float32)[None, :, None]
    colours = rng.random((1, 1, 3), dtype=np.float32)
    pixels = (255 * (ramp * colours + (1 - ramp) * colours[..., ::-1])).astype(np.uint8)
    image = Image.fromarray(np.repeat(pixels, height, axis=0), "RGB")
    x, y = (int(v) for v in rng.integers(20, min(size) - 100, 2))
    ImageDraw.Draw(image).ellipse((x, y, x + 80, y + 80), fill=(250, 250, 250))
    buffer = io.BytesIO()
    image.save(buffer, format=image_format)
    return buffer.getvalue()


def classify_bytes(url: str, model: str, encoded: Sequence[bytes]) -> np.ndarray:
    """One request: every encoded image as a row of a BYTES [N,1] tensor; logits FP32 [N,1000]."""
    rows = np.array([[data] for data in encoded], dtype=np.object_)
    return infer(url, model, "image", rows, "BYTES").as_numpy("logits")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="*", type=Path, help="image files (JPEG, PNG, ...)")
    parser.add_argument("--url", default="127.0.0.1:8000", help="Triton HTTP address")
    parser.add_argument("--model", default="classify_image", help="the ensemble's name")
    args = parser.parse_args(argv)

    if args.images:
        names = [str(path) for path in args.images]
        encoded = [path.read_bytes() for path in args.images]
    else:
        names = ["synthetic.jpg", "synthetic.png"]
        encoded = [synthetic_image(0, "JPEG"), synthetic_image(1, "PNG")]
    logits = classify_bytes(args.url, args.model, encoded)
    sizes = ", ".join(f"{len(data)} B" for data in encoded)
    print(f"{args.model}: {len(encoded)} encoded image(s) ({sizes}) -> logits {list(logits.shape)}")
    for name, row in zip(names, logits):
        ranked = ", ".join(f"class {c} ({p:.1%})" for c, p in top5(row))
        print(f"  {name}: top-5 {ranked}")


if __name__ == "__main__":
    main()
