"""DVPP on the data path: JPEG files decoded (JPEGD) and resized (VPC) on the device, written by
VPC into the rows of a YUV420SP_U8 AIPP input's batch buffer (docs/guides/image-inputs.md).

A model served with an image input (`ImageInput`, the config's `image_input` parameter) takes,
for that input, a BYTES tensor of JPEG files, one per row. `ImageStage.decode` does, for every
file of a batch: the host checks (`acl.media.dvpp_jpeg_get_image_info`; from that header
alone, the sizes JPEGD and VPC take on the device's SoC, `size_refusal`;
`dvpp_jpeg_predict_dec_size`), a copy of the file into DVPP memory and the JPEGD decode into an
NV12 picture of the stage's pool, on the stage's own stream, then one synchronize: a file DVPP
refused (the host call's code, or its picture's ret code) is an `ImageError` naming the
request and the file, before any execution of the batch. `ImageStage.queue_resize` then queues,
on the lane's stream ahead of the execution, each row's VPC resize (`stretch`) or fill and
crop-and-paste (`letterbox`) straight into the row of the lane's input buffer (`DvppBuffer`,
from `acl.media.dvpp_malloc`): no host copy of the pixels.

VPC writes a picture whose width stride is a multiple of 16 and whose start is 128-byte aligned
(docs/internals/conformance/dvpp.md); the AIPP input packs each row's NV12 image without padding
(`[h * 3 / 2, w, 1]`), so the rows are VPC's output directly when the width is a multiple of 16
and a row's bytes (w * h * 3 / 2) a multiple of 128 (224 x 224, 256 x 256, 416 x 416, 640 x 640
all are). Another size is refused when the session opens: repacking a strided picture into
packed rows on the device takes copies at addresses `acl.rt.memcpy_async` refuses (it needs
64-byte aligned addresses), and a host copy is what this path exists to avoid.

The stage's pictures are reused by the next batch: its decodes wait on the device (an event
per lane) until the previous batch's VPC jobs have read them, a picture grown for a larger file
waits for those events on the host before its old memory is freed, and `Session` holds
`ImageStage.lock` from a batch's decode until its VPC jobs are queued.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from ge_python_backend.ascend import (
    DvppLimits,
    MemcpyKind,
    PixelFormat,
    common_dvpp_limits,
    describe_code,
    dvpp_limits,
)
from ge_python_backend.modelinfo import TensorSpec
from ge_python_backend.runtime._resource import Resource, close_all
from ge_python_backend.runtime.batching import Execution
from ge_python_backend.runtime.device import Context, Event, Stream
from ge_python_backend.runtime.errors import (
    AclError,
    InputError,
    ModelFileError,
    check,
    check_handle,
)
from ge_python_backend.runtime.memory import DeviceBuffer

__all__ = [
    "DEFAULT_FILL",
    "DEFAULT_MAX_JPEG_BYTES",
    "RESIZE_MODES",
    "DecodedBatch",
    "DvppBuffer",
    "ImageError",
    "ImageInput",
    "ImageStage",
    "served_inputs",
    "served_spec",
]

logger = logging.getLogger(__name__)

RESIZE_MODES = ("stretch", "letterbox")
# Letterbox bars: black in the BT.601 narrow-range YUV that ATC's default YUV420SP CSC takes
# (Y 16, U and V 128).
DEFAULT_FILL = (16, 128, 128)
DEFAULT_MAX_JPEG_BYTES = 4 << 20
# What every SoC family takes: VPC's smallest picture (letterbox regions), JPEGD's output
# strides (Ascend310's 128 x 16 is a multiple of every other family's).
_EVERY_SOC = common_dvpp_limits()
VPC_MIN_W, VPC_MIN_H = _EVERY_SOC.vpc_min_w, _EVERY_SOC.vpc_min_h
JPEGD_WIDTH_STRIDE = _EVERY_SOC.jpegd_width_align
JPEGD_HEIGHT_STRIDE = _EVERY_SOC.jpegd_height_align
VPC_WIDTH_STRIDE = 16  # VPC output width stride (acllite; docs/internals/conformance/dvpp.md)
DVPP_ALIGN = 128  # start address of every DVPP picture
NV12 = int(PixelFormat.YUV_SEMIPLANAR_420)
YUV420SP_ROWS = (3, 2)  # TensorInfo.v2_rows of a YUV420SP_U8 AIPP input: [h * 3 / 2, w, 1]


class ImageError(InputError):
    """A JPEG file DVPP refused (or that breaks a limit before DVPP sees it); `request` is the
    request of the batch, `file` the file's row in it, `code` the ACL code when DVPP gave one."""

    def __init__(self, message: str, file: int, code: int | None = None) -> None:
        super().__init__(message)
        self.file = file
        self.code = code


@dataclasses.dataclass(frozen=True)
class ImageInput:
    """An input served as JPEG files: `resize` "stretch" (VPC resize to the input's size) or
    "letterbox" (aspect kept, centred, the rest `fill`: Y, U, V bytes); files up to
    `max_jpeg_bytes`."""

    name: str
    resize: str = "stretch"
    fill: tuple[int, int, int] = DEFAULT_FILL
    max_jpeg_bytes: int = DEFAULT_MAX_JPEG_BYTES

    def __post_init__(self) -> None:
        if self.resize not in RESIZE_MODES:
            raise ValueError(
                f"resize must be one of {', '.join(RESIZE_MODES)}, got {self.resize!r}"
            )
        if len(self.fill) != 3 or not all(0 <= v <= 255 for v in self.fill):
            raise ValueError(f"fill must be three bytes Y, U, V 0..255, got {self.fill!r}")
        if self.max_jpeg_bytes < 1:
            raise ValueError(f"max_jpeg_bytes must be positive, got {self.max_jpeg_bytes!r}")


def served_spec(spec: TensorSpec) -> TensorSpec:
    """How an image input is served: BYTES, one JPEG file per row (`[rows, 1]`)."""
    return TensorSpec.declared(spec.name, "BYTES", (spec.shape[0], 1))


def served_inputs(inputs: Sequence[TensorSpec], name: str) -> tuple[TensorSpec, ...]:
    """`inputs` with image input `name` as it is served (`served_spec`); ValueError naming the
    inputs when the model has no input `name`."""
    if name not in [spec.name for spec in inputs]:
        raise ValueError(
            f"image_input {name!r} is not an input of the model (its inputs: "
            f"{', '.join(spec.name for spec in inputs)})"
        )
    return tuple(served_spec(spec) if spec.name == name else spec for spec in inputs)


def image_size(spec: TensorSpec, name: str) -> tuple[int, int]:
    """(width, height) of the NV12 image each row of a YUV420SP_U8 AIPP input holds
    (`[n, h * 3 / 2, w, 1]` uint8); ModelFileError for any other input."""
    shape = spec.shape
    if spec.dtype != np.uint8 or len(shape) != 4 or shape[3] != 1 or -1 in shape[1:]:
        raise ModelFileError(
            f"image_input {name!r}: the input is {spec.triton_dtype} {list(shape)}; an image "
            "input must be a static YUV420SP_U8 AIPP input (UINT8 [n, h * 3 / 2, w, 1])"
        )
    return shape[2], shape[1] * 2 // 3


class DvppBuffer(DeviceBuffer):
    """Device memory from `acl.media.dvpp_malloc` (128-byte aligned; JPEGD and VPC read and
    write only such memory), freed with `dvpp_free`; usable as any device buffer."""

    def __init__(self, context: Context, size: int) -> None:  # noqa: D107
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(f"buffer size must be a positive integer, got {size!r}")
        self.context = context
        context.activate()
        ptr, ret = context.acl.media.dvpp_malloc(size)
        check(ret, "acl.media.dvpp_malloc", context.acl)
        self._own(_dvpp_free, context, ptr)
        context._adopt(self)
        self.ptr = ptr
        self.size = size

    def __repr__(self) -> str:
        return f"DvppBuffer(0x{self.ptr:x}, {self.size} bytes{', closed' if self.closed else ''})"


def _dvpp_free(context: Context, ptr: int) -> None:
    context.activate()
    check(context.acl.media.dvpp_free(ptr), "acl.media.dvpp_free", context.acl)


class _Handles:
    """The acl.media objects of a stage (descriptions, configs), destroyed newest first."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.acl: ModuleType = context.acl
        self.made: list[tuple[str, int]] = []

    def make(self, create: str, destroy: str, *args: int) -> int:
        api = f"acl.media.{create}"
        handle = check_handle(getattr(self.acl.media, create)(*args), api, self.acl)
        self.made.append((destroy, handle))
        return handle

    def release(self) -> None:
        self.context.activate()
        first: AclError | None = None
        for destroy, handle in reversed(self.made):
            try:
                check(getattr(self.acl.media, destroy)(handle), f"acl.media.{destroy}", self.acl)
            except AclError as exc:
                first = first or exc
        self.made.clear()
        if first is not None:
            raise first


@dataclasses.dataclass
class _Picture:
    """One pool entry: the file's DVPP buffer, JPEGD's output picture, its crop region."""

    desc: int
    crop: int
    source: DvppBuffer | None = None
    output: DvppBuffer | None = None
    width: int = 0  # JPEGD's output (the JPEG's sides rounded down to even)
    height: int = 0


@dataclasses.dataclass
class _Target:
    """Where VPC writes one row of a lane: its picture description and paste region."""

    desc: int
    paste: int


@dataclasses.dataclass
class _LaneTargets:
    """A lane's VPC targets (one per row) and the event its stream records after the VPC jobs
    of a batch."""

    rows: list[_Target]
    event: Event
    used: bool = False  # VPC jobs of the last batch read the pool on this lane


class DecodedBatch:
    """A batch whose files are decoded: `feeds_list` with each image input's files replaced by
    a stand-in of the model's input shape (nothing reads it: DVPP writes those rows), and the
    pool picture of each (request, row)."""

    def __init__(
        self, feeds_list: list[Mapping[str, np.ndarray]], pictures: list[list[int]]
    ) -> None:
        self.feeds_list = feeds_list
        self.pictures = pictures


class ImageStage(Resource):
    """JPEGD and VPC for one image input of a session: a DVPP channel, a stream for the
    decodes, a pool of pictures (grown to the most files one batch held and the largest
    file and picture seen) and each lane's VPC targets."""

    def __init__(
        self, context: Context, image: ImageInput, spec: TensorSpec, rows: int, lanes: int
    ) -> None:
        self.image = image
        self.spec = spec  # the model's input (UINT8 [n, h * 3 / 2, w, 1])
        self.width, self.height = image_size(spec, image.name)
        w, h = self.width, self.height
        self.limits = soc_dvpp_limits(context.acl)
        refusal = self.limits.vpc_output_refusal(w, h)
        if refusal is not None:
            raise ModelFileError(
                f"image_input {image.name!r}: the AIPP source is {w}x{h}; {refusal}"
            )
        self.row_bytes = w * h * 3 // 2
        if w % VPC_WIDTH_STRIDE or (rows > 1 and self.row_bytes % DVPP_ALIGN):
            raise ModelFileError(
                f"image_input {image.name!r}: the AIPP source is {w}x{h}; VPC writes each row "
                f"of the batch in place only when the width is a multiple of {VPC_WIDTH_STRIDE} "
                f"(VPC's width stride) and a row's {self.row_bytes} bytes (w * h * 3 / 2) a "
                f"multiple of {DVPP_ALIGN} (DVPP's picture alignment): compile the model with "
                "such a src_image_size (224x224, 256x256, 416x416 and 640x640 are)"
            )
        self.rows = rows
        self.lock = threading.Lock()  # one batch from decode until its VPC jobs are queued
        self.context = context
        self._acl: ModuleType = context.acl
        self._parts: list[Resource] = []
        self._handles = _Handles(context)
        self._own(_release_stage, self._handles, self._parts)
        try:
            context.activate()
            self.channel = self._handles.make(
                "dvpp_create_channel_desc", "dvpp_destroy_channel_desc"
            )
            check(
                self._acl.media.dvpp_create_channel(self.channel),
                "acl.media.dvpp_create_channel",
                self._acl,
            )
            self._handles.made.append(("dvpp_destroy_channel", self.channel))
            self._resize = self._handles.make(
                "dvpp_create_resize_config", "dvpp_destroy_resize_config"
            )
            self.stream = self._keep(Stream(context))
            self._fill: DvppBuffer | None = None
            if image.resize == "letterbox":
                self._fill = self._keep(DvppBuffer(context, self.row_bytes))
                self._write_fill(self._fill)
            self._pool: list[_Picture] = []
            self._lanes = [self._lane_targets() for _ in range(lanes)]
            # the lanes' events this batch's decodes wait for on the device: a picture freed to
            # grow it waits for them on the host first (its last VPC jobs may not have run)
            self._readers: list[Event] = []
        except BaseException:
            self._abandon()
            raise
        logger.info(
            "image input %s: JPEG files decoded by JPEGD and %s by VPC into the model's %dx%d "
            "NV12 rows",
            image.name,
            "letterboxed" if image.resize == "letterbox" else "stretched",
            w,
            h,
        )

    # -- the batch ---------------------------------------------------------------------------

    def stand_in(
        self, feeds: Mapping[str, np.ndarray], number: int | None = None
    ) -> tuple[Mapping[str, np.ndarray], list[bytes] | None]:
        """`feeds` with the image input's files replaced by a read-only stand-in of the model's
        input shape (for the feed checks), and the files; InputError when the image input is
        not a BYTES array of one file per row."""
        files = self._files(feeds, number)
        if files is None:
            return feeds, None
        shape = (len(files), *self.spec.shape[1:])
        return {**feeds, self.image.name: np.broadcast_to(np.zeros((), np.uint8), shape)}, files

    def decode(self, feeds_list: Sequence[Mapping[str, np.ndarray]]) -> DecodedBatch:
        """Check and decode every file of the batch into the pool (see the module docstring);
        ImageError (with `request` and `file`) for the first file DVPP refused."""
        acl = self._acl
        self.context.activate()
        # the previous batch's VPC jobs read the pool first (the device waits; a picture
        # grown for this batch waits on the host: `_grown`)
        self._readers = [lane.event for lane in self._lanes if lane.used]
        for lane in self._lanes:
            if lane.used:
                self.stream.wait(lane.event)
                lane.used = False
        stood_in: list[Mapping[str, np.ndarray]] = []
        pictures: list[list[int]] = []
        queued: list[tuple[int, int, _Picture]] = []
        try:
            for number, feeds in enumerate(feeds_list):
                feeds_in, files = self.stand_in(feeds, number)
                stood_in.append(feeds_in)
                rows: list[int] = []
                for row, data in enumerate(files or ()):
                    picture = self._picture(len(queued))
                    self._queue_decode(picture, data, number, row, len(files or ()))
                    queued.append((number, row, picture))
                    rows.append(len(queued) - 1)
                pictures.append(rows)
        except BaseException:
            self._settle()  # nothing of this batch still runs when it is refused
            raise
        if not queued:
            return DecodedBatch(stood_in, pictures)
        try:
            self.stream.synchronize()
            failure: AclError | None = None
        except AclError as exc:
            failure = exc
        for number, row, picture in queued:
            code = acl.media.dvpp_get_pic_desc_ret_code(picture.desc)
            if code:
                count = len(pictures[number])
                raise self._error(number, row, count, code, "JPEGD could not decode it", failure)
        if failure is not None:  # the stream failed without naming a file: the device's
            raise failure
        return DecodedBatch(stood_in, pictures)

    def queue_resize(
        self,
        decoded: DecodedBatch,
        lane: int,
        target: DeviceBuffer,
        execution: Execution,
        stream: Stream,
    ) -> None:
        """Queue on `stream` (the lane's, ahead of its execution) each row's VPC job from its
        decoded picture into row i of `target` (the lane's image input buffer)."""
        targets = self._lanes[lane]
        for piece in execution.pieces:
            for offset in range(piece.rows):
                picture = self._pool[decoded.pictures[piece.part][piece.src + offset]]
                row = piece.dst + offset
                self._queue_vpc(picture, targets, row, target, stream)
        targets.event.record(stream)
        targets.used = True

    def size_refusal(self, width: int, height: int) -> str | None:
        """Why JPEGD and VPC cannot bring a `width` x `height` JPEG into this input's rows
        (None when they can), from its header alone: JPEGD's sides, then VPC's input (the
        picture JPEGD writes: sides rounded down to even) and its scale to the row (stretch)
        or to the row's letterbox region."""
        limits = self.limits
        refusal = limits.jpegd_refusal(width, height)
        if refusal is not None:
            return refusal
        decoded = (width & ~1, height & ~1)
        if self.image.resize == "letterbox":
            target = letterbox(*decoded, self.width, self.height)[2:]
        else:
            target = (self.width, self.height)
        refusal = limits.vpc_input_refusal(*decoded) or limits.vpc_scale_refusal(decoded, target)
        if refusal is None:
            return None
        return f"the JPEG is {width}x{height}, decoded to {decoded[0]}x{decoded[1]}: {refusal}"

    # -- pieces ------------------------------------------------------------------------------

    def _files(self, feeds: Mapping[str, np.ndarray], number: int | None) -> list[bytes] | None:
        """The image input's files of a request (None when the request lacks the input: the
        feed checks say so); InputError unless it is one file per row."""
        name = self.image.name
        if not isinstance(feeds, Mapping) or name not in feeds:
            return None
        array = feeds[name]
        ok = isinstance(array, np.ndarray) and (array.dtype == object or array.dtype.kind == "S")
        if ok and array.ndim == 2 and array.shape[1] == 1:
            array = array[:, 0]
        if not ok or array.ndim != 1 or len(array) < 1:
            got = (
                f"{array.dtype} {array.shape}"
                if isinstance(array, np.ndarray)
                else type(array).__name__
            )
            error = InputError(
                f"input {name!r} takes JPEG files: a BYTES tensor of one file per row, shape "
                f"[rows, 1] (at least one row), got {got}"
            )
            error.request = number
            raise error
        files = []
        for row, item in enumerate(array):
            if not isinstance(item, (bytes, bytearray, memoryview)):
                error = ImageError(
                    f"input {name!r} file {row}: expected the bytes of a JPEG file, got "
                    f"{type(item).__name__}",
                    row,
                )
                error.request = number
                raise error
            files.append(bytes(item))
        return files

    def _settle(self) -> None:
        """Wait for the decodes queued so far (their failures are the refused batch's)."""
        try:
            self.stream.synchronize()
        except AclError as exc:
            logger.debug("image stage: synchronize after a refused batch reported %s", exc)

    def _queue_decode(
        self, picture: _Picture, data: bytes, number: int, row: int, count: int
    ) -> None:
        """Host checks, copy into DVPP memory, JPEGD decode queued on the stage's stream."""
        acl = self._acl
        limit = self.image.max_jpeg_bytes
        if not data:
            raise self._error(number, row, count, None, "the file is empty (0 bytes)")
        if len(data) > limit:
            raise self._error(
                number,
                row,
                count,
                None,
                f"the file is {len(data)} bytes; the parameter max_jpeg_bytes allows {limit}",
            )
        host = acl.util.bytes_to_ptr(data)
        width, height, _, ret = acl.media.dvpp_jpeg_get_image_info(host, len(data))
        if ret:
            raise self._error(
                number,
                row,
                count,
                ret,
                "acl.media.dvpp_jpeg_get_image_info cannot read it as a JPEG",
            )
        refusal = self.size_refusal(width, height)
        if refusal is not None:
            raise self._error(number, row, count, None, refusal)
        size, ret = acl.media.dvpp_jpeg_predict_dec_size(host, len(data), NV12)
        if ret:
            raise self._error(
                number, row, count, ret, "acl.media.dvpp_jpeg_predict_dec_size refused it"
            )
        picture.source = self._grown(picture.source, len(data))
        picture.output = self._grown(picture.output, size)
        check(
            acl.rt.memcpy(
                picture.source.ptr,
                picture.source.size,
                host,
                len(data),
                MemcpyKind.HOST_TO_DEVICE,
            ),
            "acl.rt.memcpy",
            acl,
        )
        stride_w = -(-width // JPEGD_WIDTH_STRIDE) * JPEGD_WIDTH_STRIDE
        stride_h = -(-height // JPEGD_HEIGHT_STRIDE) * JPEGD_HEIGHT_STRIDE
        self._set_pic(picture.desc, picture.output.ptr, size, width, height, stride_w, stride_h)
        picture.width, picture.height = width & ~1, height & ~1
        ret = acl.media.dvpp_jpeg_decode_async(
            self.channel, picture.source.ptr, len(data), picture.desc, self.stream.handle
        )
        if ret:
            raise self._error(
                number, row, count, ret, "acl.media.dvpp_jpeg_decode_async refused it"
            )

    def _queue_vpc(
        self,
        picture: _Picture,
        targets: _LaneTargets,
        row: int,
        target: DeviceBuffer,
        stream: Stream,
    ) -> None:
        """One row: fill (letterbox), then VPC into the row."""
        acl = self._acl
        place = targets.rows[row]
        canvas = target.ptr + row * self.row_bytes
        size = self.row_bytes
        self._set_pic(place.desc, canvas, size, self.width, self.height, self.width, self.height)
        if self._fill is None:
            ret = acl.media.dvpp_vpc_resize_async(
                self.channel, picture.desc, place.desc, self._resize, stream.handle
            )
            check(ret, "acl.media.dvpp_vpc_resize_async", acl)
        else:
            self._copy(canvas, self._fill.ptr, size, stream)
            left, top, width, height = letterbox(
                picture.width, picture.height, self.width, self.height
            )
            check(
                acl.media.dvpp_set_roi_config(
                    picture.crop, 0, picture.width - 1, 0, picture.height - 1
                ),
                "acl.media.dvpp_set_roi_config",
                acl,
            )
            check(
                acl.media.dvpp_set_roi_config(
                    place.paste, left, left + width - 1, top, top + height - 1
                ),
                "acl.media.dvpp_set_roi_config",
                acl,
            )
            ret = acl.media.dvpp_vpc_crop_and_paste_async(
                self.channel, picture.desc, place.desc, picture.crop, place.paste, stream.handle
            )
            check(ret, "acl.media.dvpp_vpc_crop_and_paste_async", acl)

    def _copy(self, dst: int, src: int, count: int, stream: Stream) -> None:
        acl = self._acl
        ret = acl.rt.memcpy_async(
            dst, count, src, count, MemcpyKind.DEVICE_TO_DEVICE, stream.handle
        )
        check(ret, "acl.rt.memcpy_async", acl)

    def _set_pic(
        self, desc: int, data: int, size: int, width: int, height: int, ws: int, hs: int
    ) -> None:
        media = self._acl.media
        for setter, number in (
            (media.dvpp_set_pic_desc_data, data),
            (media.dvpp_set_pic_desc_size, size),
            (media.dvpp_set_pic_desc_format, NV12),
            (media.dvpp_set_pic_desc_width, width),
            (media.dvpp_set_pic_desc_height, height),
            (media.dvpp_set_pic_desc_width_stride, ws),
            (media.dvpp_set_pic_desc_height_stride, hs),
        ):
            check(setter(desc, number), f"acl.media.{setter.__name__}", self._acl)

    def _picture(self, index: int) -> _Picture:
        """Pool entry `index`, made on first use."""
        while len(self._pool) <= index:
            desc = self._handles.make("dvpp_create_pic_desc", "dvpp_destroy_pic_desc")
            crop = self._handles.make(
                "dvpp_create_roi_config", "dvpp_destroy_roi_config", 0, 1, 0, 1
            )
            self._pool.append(_Picture(desc, crop))
        return self._pool[index]

    def _grown(self, buffer: DvppBuffer | None, size: int) -> DvppBuffer:
        """`buffer` if it holds `size` bytes, else a new one (the old one freed)."""
        if buffer is not None and buffer.size >= size:
            return buffer
        if buffer is not None:
            for event in self._readers:  # a VPC job queued before may still read it
                event.synchronize()
            self._readers.clear()
            self._parts.remove(buffer)
            buffer.close()
        return self._keep(DvppBuffer(self.context, size))

    def _lane_targets(self) -> _LaneTargets:
        rows = [
            _Target(
                self._handles.make("dvpp_create_pic_desc", "dvpp_destroy_pic_desc"),
                self._handles.make("dvpp_create_roi_config", "dvpp_destroy_roi_config", 0, 1, 0, 1),
            )
            for _ in range(self.rows)
        ]
        return _LaneTargets(rows, self._keep(Event(self.context)))

    def _write_fill(self, buffer: DvppBuffer) -> None:
        """The letterbox canvas (a whole picture of `fill`), written once."""
        y, u, v = self.image.fill
        h = self.height
        picture = np.empty((h * 3 // 2, self.width), np.uint8)
        picture[:h] = y
        picture[h:, 0::2] = u
        picture[h:, 1::2] = v
        acl = self._acl
        data = picture.tobytes()  # alive through the copy
        check(
            acl.rt.memcpy(
                buffer.ptr,
                buffer.size,
                acl.util.bytes_to_ptr(data),
                len(data),
                MemcpyKind.HOST_TO_DEVICE,
            ),
            "acl.rt.memcpy",
            acl,
        )

    def _error(
        self,
        number: int,
        row: int,
        count: int,
        code: int | None,
        why: str,
        cause: AclError | None = None,
    ) -> ImageError:
        text = f"input {self.image.name!r} file {row} (of {count} in this request): {why}"
        if code is not None:
            name, explanation = describe_code(code)
            recent = cause.recent if cause is not None else self._recent()
            text += f" (ACL {code} {name}: {explanation}"
            text += f"; ACL says: {recent})" if recent else ")"
        error = ImageError(text, row, code)
        error.request = number
        return error

    def _recent(self) -> str:
        message = getattr(self._acl, "get_recent_err_msg", lambda: "")()
        return message.strip() if isinstance(message, str) else ""

    def _keep(self, resource: Any) -> Any:
        self._parts.append(resource)
        return resource

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"ImageStage({self.image.name!r}, {self.width}x{self.height}{state})"


def soc_dvpp_limits(acl: ModuleType) -> DvppLimits:
    """The DVPP limits of the device's SoC (`acl.get_soc_name()`), or what every known family
    takes when its family is not known (logged)."""
    soc = getattr(acl, "get_soc_name", lambda: None)()
    try:
        return dvpp_limits(str(soc))
    except ValueError as exc:
        logger.warning(
            "image input: %s; JPEG files are checked against what every one of them takes", exc
        )
        return _EVERY_SOC


def letterbox(width: int, height: int, to_w: int, to_h: int) -> tuple[int, int, int, int]:
    """(left, top, width, height) of a `width` x `height` picture scaled into `to_w` x `to_h`
    with its aspect kept, centred; even sides and offsets (YUV420SP), at least VPC's smallest
    output."""
    scale = min(to_w / width, to_h / height)
    w = min(to_w, max(VPC_MIN_W + VPC_MIN_W % 2, round(width * scale / 2) * 2))
    h = min(to_h, max(VPC_MIN_H + VPC_MIN_H % 2, round(height * scale / 2) * 2))
    return (to_w - w) // 2 & ~1, (to_h - h) // 2 & ~1, w, h


def _release_stage(handles: _Handles, parts: list[Resource]) -> None:
    """Descriptions, configs and channel first (they name the buffers), then buffers, events
    and the stream, newest first."""
    try:
        handles.release()
    finally:
        ordered = parts[::-1]
        parts.clear()
        close_all(ordered)
