"""What DVPP's JPEGD sees in a JPEG: its header (the frame, the colour transform) and its
YCbCr planes, and VPC's bilinear resize of YUV420SP planes.

`read_header` walks the markers up to the first scan, as libjpeg's `jpeg_read_header` does for
`acldvppJpegGetImageInfo`; `unsupported` names what JPEGD refuses (Huffman baseline or extended
sequential 8-bit only, YUV colour, subsampling 444/422/420/400/440:
docs/internals/conformance/dvpp.md);
`decode_nv12` decodes the JPEG's own YCbCr (Pillow's JPEG decoder told not to convert to RGB:
`Image.draft("YCbCr")`), with no RGB round trip. Pillow is the emulator's dependency only.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np

SOI = 0xD8
SOS = 0xDA
APP14 = 0xEE
# Start-of-frame markers: C0 baseline, C1 extended sequential, C2 progressive, C3 lossless, C5-C7
# differential (hierarchical), C9-CB and CD-CF the arithmetic-coded ones. C4 (DHT), C8 (JPG) and
# CC (DAC) share the range and are not frames.
SOF_MARKERS = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
SOF_KINDS = {
    0xC0: "baseline",
    0xC1: "extended sequential",
    0xC2: "progressive",
    0xC3: "lossless",
    0xC5: "differential sequential",
    0xC6: "differential progressive",
    0xC7: "differential lossless",
    0xC9: "arithmetic-coded extended sequential",
    0xCA: "arithmetic-coded progressive",
    0xCB: "arithmetic-coded lossless",
    0xCD: "arithmetic-coded differential sequential",
    0xCE: "arithmetic-coded differential progressive",
    0xCF: "arithmetic-coded differential lossless",
}
JPEGD_FRAMES = frozenset({0xC0, 0xC1})  # Huffman, sequential
# (h, v) sampling of Y with Cb, Cr at 1x1: 444, 422, 420, 440
JPEGD_SAMPLING = {(1, 1): "444", (2, 1): "422", (2, 2): "420", (1, 2): "440"}
_STANDALONE = frozenset(range(0xD0, 0xD8)) | {0x01, SOI}


class JpegError(Exception):
    """The bytes are not a JPEG whose header can be read (not a JPEG, truncated, corrupt)."""


@dataclass(frozen=True)
class JpegHeader:
    """The frame of a JPEG: marker, precision, size, components and their (h, v) sampling, and
    the Adobe APP14 colour transform if the file has one (0: none, i.e. RGB or CMYK)."""

    sof: int
    precision: int
    width: int
    height: int
    sampling: tuple[tuple[int, int], ...]
    adobe_transform: int | None

    @property
    def components(self) -> int:
        """Colour components of the frame (libjpeg's num_components)."""
        return len(self.sampling)


def read_header(data: bytes) -> JpegHeader:
    """The header of `data`; JpegError saying why it cannot be read."""
    if data[:2] != b"\xff\xd8":
        raise JpegError("not a JPEG: the file does not start with the SOI marker FF D8")
    at, frame, transform = 2, None, None
    while True:
        while at < len(data) and data[at] != 0xFF:
            at += 1  # tolerate garbage between segments, as libjpeg does (with a warning)
        while at < len(data) and data[at] == 0xFF:
            at += 1
        if at >= len(data):
            raise JpegError("truncated: the header ends before the first scan (SOS)")
        marker = data[at]
        at += 1
        if marker in _STANDALONE:
            continue
        if at + 2 > len(data):
            raise JpegError(f"truncated inside the segment of marker FF {marker:02X}")
        length = int.from_bytes(data[at : at + 2], "big")
        body = data[at + 2 : at + length]
        if length < 2 or len(body) != length - 2:
            raise JpegError(f"truncated or corrupt segment of marker FF {marker:02X}")
        at += length
        if marker in SOF_MARKERS:
            frame = _frame(marker, body)
        elif marker == APP14 and body[:5] == b"Adobe" and len(body) >= 12:
            transform = body[11]
        elif marker == SOS:
            if frame is None:
                raise JpegError("corrupt: a scan (SOS) comes before any frame (SOF) marker")
            return JpegHeader(*frame, adobe_transform=transform)


def _frame(marker: int, body: bytes) -> tuple[int, int, int, int, tuple[tuple[int, int], ...]]:
    if len(body) < 6:
        raise JpegError(f"corrupt frame header (SOF FF {marker:02X})")
    precision, height, width, count = body[0], *np.frombuffer(body[1:5], ">u2"), body[5]
    if len(body) < 6 + 3 * count or count == 0:
        raise JpegError(f"corrupt frame header (SOF FF {marker:02X}): {count} components")
    sampling = tuple((body[7 + 3 * i] >> 4, body[7 + 3 * i] & 0x0F) for i in range(count))
    if width == 0 or height == 0:
        raise JpegError(f"corrupt frame header: size {width}x{height}")
    return marker, precision, int(width), int(height), sampling


def unsupported(header: JpegHeader) -> str | None:
    """Why JPEGD cannot decode a JPEG with `header`, or None when it can."""
    if header.sof not in JPEGD_FRAMES:
        kind = SOF_KINDS[header.sof]
        return (
            f"a {kind} JPEG (SOF FF {header.sof:02X}); JPEGD decodes Huffman-coded sequential "
            "JPEGs only"
        )
    if header.precision != 8:
        return f"{header.precision}-bit samples; JPEGD decodes 8-bit JPEGs only"
    if header.components == 1:
        return None
    if header.components != 3 or header.adobe_transform == 0:
        space = "CMYK" if header.components == 4 else "RGB" if header.components == 3 else ""
        what = f"{space} colour" if space else f"{header.components} components"
        return f"{what}; JPEGD decodes YUV JPEGs only (one or three components)"
    luma, *chroma = header.sampling
    if any(c != (1, 1) for c in chroma) or luma not in JPEGD_SAMPLING:
        return (
            f"sampling {header.sampling}; JPEGD decodes subsampling 444, 422, 420, 400 or 440 only"
        )
    return None


def decode_nv12(data: bytes, header: JpegHeader) -> np.ndarray:
    """The JPEG's Y, Cb, Cr as one YUV420SP (NV12) image of even width and height
    (`[h * 3 // 2, w]` uint8: the Y rows, then the interleaved U, V rows), as JPEGD writes it:
    sides rounded down to even, 400 with U, V 0x80. JpegError for a corrupt or truncated scan."""
    from PIL import Image  # the emulator extra: never imported by the runtime

    h, w = header.height & ~1, header.width & ~1
    out = np.empty((h * 3 // 2, w), np.uint8)
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.draft("YCbCr", image.size)
            image.load()
            planes = _pixels(image)
            # libjpeg upsampled the chroma to full size; Pillow's 2x2 mean, (sum + 2) // 4,
            # gives the 4:2:0 samples back
            halves = None if planes.ndim == 2 else _pixels(image.reduce(2, (0, 0, w, h)))
    except (OSError, SyntaxError, ValueError) as exc:
        raise JpegError(f"corrupt or truncated scan data: {exc}") from exc
    if halves is None:
        out[:h] = planes[:h, :w]
        out[h:] = 0x80
        return out
    out[:h] = planes[:h, :w, 0]
    out[h:] = halves[:, :, 1:].reshape(h // 2, w)
    return out


_STRIP_BYTES = 1 << 20


def _pixels(image: Any) -> np.ndarray:
    """A Pillow image's pixels (`[h, w]` or `[h, w, bands]` uint8), copied out in strips of
    about 1 MiB: `np.asarray(image)` joins one `bytes` of the whole image holding the GIL (tens
    of ms for a large JPEG, during which no other thread of the process runs)."""
    w, h = image.size
    bands = len(image.getbands())
    out = np.empty((h, w, bands) if bands > 1 else (h, w), np.uint8)
    rows = max(1, _STRIP_BYTES // (w * bands))
    for top in range(0, h, rows):
        bottom = min(h, top + rows)
        strip = image.crop((0, top, w, bottom)).tobytes()
        out[top:bottom] = np.frombuffer(strip, np.uint8).reshape(out[top:bottom].shape)
    return out


def resize_plane(plane: np.ndarray, height: int, width: int, nearest: bool = False) -> np.ndarray:
    """`plane` (`[h, w, c]` uint8) resized to `height` x `width`: bilinear with half-pixel
    centres and edge clamping (OpenCV's INTER_LINEAR), rounded half up; or nearest neighbour."""
    h, w = plane.shape[:2]
    ys = (np.arange(height) + 0.5) * (h / height) - 0.5
    xs = (np.arange(width) + 0.5) * (w / width) - 0.5
    if nearest:
        rows = np.clip(np.floor(ys + 0.5), 0, h - 1).astype(np.intp)
        cols = np.clip(np.floor(xs + 0.5), 0, w - 1).astype(np.intp)
        return plane[rows][:, cols]
    ys, xs = np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)
    y0, x0 = np.floor(ys).astype(np.intp), np.floor(xs).astype(np.intp)
    y1, x1 = np.minimum(y0 + 1, h - 1), np.minimum(x0 + 1, w - 1)
    fy, fx = (ys - y0)[:, None, None], (xs - x0)[None, :, None]
    top_rows, bottom_rows = plane[y0], plane[y1]  # only the pixels the output reads, as floats

    def pixels(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return rows[:, cols].astype(np.float32)

    top = pixels(top_rows, x0) * (1 - fx) + pixels(top_rows, x1) * fx
    bottom = pixels(bottom_rows, x0) * (1 - fx) + pixels(bottom_rows, x1) * fx
    return np.floor(top * (1 - fy) + bottom * fy + 0.5).clip(0, 255).astype(np.uint8)


def resize_nv12(image: np.ndarray, height: int, width: int, nearest: bool = False) -> np.ndarray:
    """An NV12 image (`[h * 3 // 2, w]`) resized to even `height` x `width`: Y and the
    interleaved U, V plane each resized (`resize_plane`)."""
    h = image.shape[0] * 2 // 3
    w = image.shape[1]
    luma = resize_plane(image[:h, :, None], height, width, nearest)[:, :, 0]
    uv = image[h:].reshape(h // 2, w // 2, 2)
    chroma = resize_plane(uv, height // 2, width // 2, nearest).reshape(height // 2, width)
    return np.concatenate([luma, chroma])
