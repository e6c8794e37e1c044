"""Generated JPEG files that look like photographs (no downloads): colour gradients, a soft blob,
optional hard-edged shapes, sensor-like noise; for the JPEG tests and `make bench` section 11.

`jpeg` makes one file of a given size and seed; `photo_like` a varied set (sizes, shapes, noise,
quality and chroma subsampling drawn from one seed); `with_frame_size` gives a file the size
of a huge one in its header alone. Pillow (the emulator extra) encodes them.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw

# `photo_like`'s ranges: sides (JPEGD decodes 32..8192; the largest here keep a run short),
# JPEG quality, Pillow's `subsampling` (0: 4:4:4, 1: 4:2:2, 2: 4:2:0) and noise amplitude.
SIDES = (48, 1280)
QUALITIES = (40, 95)
SUBSAMPLINGS = (0, 1, 2)
NOISES = (2, 40)


def jpeg(
    width: int,
    height: int,
    seed: int,
    noise: int = 24,
    quality: int = 90,
    shapes: int = 0,
    **save: object,
) -> bytes:
    """A baseline JPEG of colour gradients and a blob (each seed its own) with `shapes` random
    rectangles, ellipses and lines on top and noise of +-`noise`; `save`: Pillow's JPEG options
    (progressive, subsampling, ...)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(width, height)
    centre = rng.random(2)
    phase = rng.random(3) * 6
    rgb = np.stack(
        [
            128 + 110 * np.sin(6 * x + phase[0]),
            128 + 110 * np.cos(5 * y + phase[1]),
            255 * np.exp(-8 * ((x - centre[0]) ** 2 + (y - centre[1]) ** 2)) + phase[2] * 10,
        ],
        axis=-1,
    )
    image = Image.fromarray(rgb.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(shapes):
        x0, x1 = sorted(rng.integers(0, width, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height, 2).tolist())
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        kind = rng.integers(3)
        if kind == 0:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
        elif kind == 1:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        else:
            draw.line((x0, y0, x1, y1), fill=colour, width=int(rng.integers(1, 12)))
    pixels = np.asarray(image, np.int16) + rng.integers(-noise, noise + 1, (height, width, 3))
    out = io.BytesIO()
    Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(out, "JPEG", quality=quality, **save)
    return out.getvalue()


def photo_like(count: int, seed: int) -> list[bytes]:
    """`count` baseline JPEGs of varied sides (`SIDES`, any aspect), 0 to 12 shapes, noise,
    quality and chroma subsampling: what a set of real photos varies in."""
    rng = np.random.default_rng(seed)
    return [
        jpeg(
            int(rng.integers(*SIDES)),
            int(rng.integers(*SIDES)),
            seed * 1000 + i,
            noise=int(rng.integers(*NOISES)),
            quality=int(rng.integers(*QUALITIES)),
            shapes=int(rng.integers(0, 13)),
            subsampling=int(rng.choice(SUBSAMPLINGS)),
        )
        for i in range(count)
    ]


def with_frame_size(data: bytes, width: int, height: int) -> bytes:
    """`data` (a JPEG) with the size in its frame header (SOF) set to `width` x `height`: what
    the header says, not what its scan holds; decoding it fails, reading its header does not."""
    at = 2  # after SOI; every segment up to the frame has a length
    while data[at + 1] not in (0xC0, 0xC1, 0xC2):
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    size = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return data[: at + 5] + size + data[at + 9 :]
