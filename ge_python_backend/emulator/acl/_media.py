"""`acl.media`: the DVPP calls of image pipelines: channels, picture descriptions, DVPP memory,
JPEGD (`dvpp_jpeg_*`) and VPC resize and crop-and-paste (`dvpp_vpc_*`).

Argument formats and return shapes are the binding's (hicann/runtime python/pyACL/media/
media_common.cpp, media_jpeg.cpp, media_vpc.cpp). What ACL checks on the host when a call is
made (hicann ImageProcessor: formats, null pointers, sizes) fails the call; what the device
checks when it runs the job (the JPEG's kind, strides, buffers) fails the stream, reported by
`acl.rt.synchronize_stream` and in the output description's ret code, as an asynchronous
DVPP call returns only "task delivered" (acldvppJpegDecodeAsync page). Limits per SoC:
`ascend.DVPP_LIMITS`; sources and the UNCONFIRMED codes: docs/internals/conformance/dvpp.md.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ge_python_backend.ascend import AclCode as _AclCode
from ge_python_backend.ascend import DvppLimits as _DvppLimits
from ge_python_backend.ascend import PixelFormat as _PixelFormat
from ge_python_backend.ascend import dvpp_limits as _dvpp_limits
from ge_python_backend.emulator import _jpeg, timing
from ge_python_backend.emulator._api import api, value, zero_ret
from ge_python_backend.emulator._memory import MEMORY
from ge_python_backend.emulator._state import (
    LOCK,
    STATE,
    AclFailure,
    Handled,
    device_mode,
)
from ge_python_backend.emulator._streams import Context, Stream, current_context, stream_in
from ge_python_backend.emulator.acl._rt import allocate_device, free_device

DVPP_MALLOC = "acl.media.dvpp_malloc"
DVPP_ALIGN = 128  # start address of DVPP buffers
NV12_FORMATS = (_PixelFormat.YUV_SEMIPLANAR_420, _PixelFormat.YVU_SEMIPLANAR_420)
# The JPEGD output formats ACL accepts on 310P-class SoCs (ImageProcessorV200::
# ValidateJpegOutputFormat: YUV400 0, the 420/422/444 semi-planar ones 1..6, the 440 ones 1000
# and 1001 (acl_dvpp.h), UNKNOWN); only NV12 and NV21 are emulated, the others are refused as
# not emulated (200006).
JPEGD_FORMATS = frozenset({0, 1, 2, 3, 4, 5, 6, 1000, 1001, _PixelFormat.UNKNOWN})
VPC_INTERPOLATIONS = {0: "bilinear (default)", 1: "bilinear", 2: "nearest neighbour"}
VPC_WIDTH_ALIGN, VPC_HEIGHT_ALIGN = 16, 2


@dataclass(eq=False)
class ChannelDesc(Handled):
    """`acldvppChannelDesc`; `context` is set while its channel exists."""

    context: Context | None = None


@dataclass(eq=False)
class PicDesc(Handled):
    """`acldvppPicDesc`: the fields the setters set (and JPEGD writes back)."""

    data: int = 0
    size: int = 0
    format: int = 0
    width: int = 0
    height: int = 0
    width_stride: int = 0
    height_stride: int = 0
    ret_code: int = 0


@dataclass(eq=False)
class ResizeConfig(Handled):
    """`acldvppResizeConfig`."""

    interpolation: int = 0


@dataclass(eq=False)
class RoiConfig(Handled):
    """`acldvppRoiConfig`: inclusive pixel bounds."""

    left: int = 0
    right: int = 0
    top: int = 0
    bottom: int = 0


@dataclass
class _Registry:
    channels: dict[int, ChannelDesc] = field(default_factory=dict)
    pics: dict[int, PicDesc] = field(default_factory=dict)
    resizes: dict[int, ResizeConfig] = field(default_factory=dict)
    rois: dict[int, RoiConfig] = field(default_factory=dict)


_REGISTRY = _Registry()


def _find(table: Mapping[int, Handled], handle: int, what: str) -> Handled:
    with LOCK:
        found = table.get(handle)
    if found is None:
        # ACL_REQUIRES_NOT_NULL in hicann's ImageProcessor: ACL_ERROR_INVALID_PARAM
        raise AclFailure(_AclCode.INVALID_PARAM, f"0x{handle:x} is not a live {what}")
    return found


def _pic(handle: int) -> PicDesc:
    found = _find(_REGISTRY.pics, handle, "picture description (dvpp_create_pic_desc)")
    assert isinstance(found, PicDesc)
    return found


def _channel(handle: int) -> ChannelDesc:
    found = _find(_REGISTRY.channels, handle, "channel description (dvpp_create_channel_desc)")
    assert isinstance(found, ChannelDesc)
    return found


def _created(handle: int) -> Context:
    ctx = _channel(handle).context
    if ctx is None:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"channel description 0x{handle:x} has no channel: call dvpp_create_channel first",
        )
    return ctx


def _limits() -> _DvppLimits:
    return _dvpp_limits(STATE.soc)


# ----------------------------------------------------------------------------- memory


@api("acl.media.dvpp_malloc", int, fail=zero_ret)
def dvpp_malloc(size: int) -> tuple[int, int]:
    """(device pointer, ret): DVPP memory, 128-byte aligned, charged to the device like
    `acl.rt.malloc`'s."""
    ctx = current_context()
    if size <= 0:
        raise AclFailure(_AclCode.RT_PARAM_INVALID, f"size must be > 0, got {size}")
    return allocate_device(ctx, size, DVPP_MALLOC, DVPP_ALIGN).base, 0


@api("acl.media.dvpp_free", int)
def dvpp_free(dev_ptr: int) -> int:
    """Free memory from `dvpp_malloc`."""
    current_context()
    free_device(dev_ptr, DVPP_MALLOC, "acl.media.dvpp_free")
    return 0


# ----------------------------------------------------------------------------- channels


@api("acl.media.dvpp_create_channel_desc", fail=value(0))
def dvpp_create_channel_desc() -> int:
    """A channel description (0 on failure, as a NULL pointer): ACL allocates its device part
    (ImageProcessor::CreateChannelDescOnHost), so it needs a current context."""
    current_context()
    desc = ChannelDesc(STATE.new_handle())
    with LOCK:
        _REGISTRY.channels[desc.handle] = desc
    return desc.handle


@api("acl.media.dvpp_destroy_channel_desc", int)
def dvpp_destroy_channel_desc(desc: int) -> int:
    """Destroy a channel description; 148051 while its channel exists (aclError.md)."""
    channel = _channel(desc)
    if channel.context is not None:
        raise AclFailure(
            _AclCode.RELATIVE_RESOURCE_NOT_CLEARED,
            f"channel description 0x{desc:x} still has its channel: dvpp_destroy_channel first",
        )
    with LOCK:
        _REGISTRY.channels.pop(desc, None)
    return 0


@api("acl.media.dvpp_create_channel", int)
def dvpp_create_channel(desc: int) -> int:
    """Create the channel of `desc` in the current context."""
    ctx = current_context()
    channel = _channel(desc)
    if channel.context is not None:
        raise AclFailure(_AclCode.INVALID_PARAM, f"0x{desc:x} already has a channel")
    channel.context = ctx
    STATE.count("dvpp_channels_created")
    return 0


@api("acl.media.dvpp_destroy_channel", int)
def dvpp_destroy_channel(desc: int) -> int:
    """Destroy the channel of `desc`."""
    current_context()
    _created(desc)
    _channel(desc).context = None
    return 0


# ----------------------------------------------------------------------------- picture descs


@api("acl.media.dvpp_create_pic_desc", fail=value(0))
def dvpp_create_pic_desc() -> int:
    """A picture description (0 on failure); its device part needs a current context
    (ImageProcessor::CreatePicDescOnHost)."""
    current_context()
    desc = PicDesc(STATE.new_handle())
    with LOCK:
        _REGISTRY.pics[desc.handle] = desc
    return desc.handle


@api("acl.media.dvpp_destroy_pic_desc", int)
def dvpp_destroy_pic_desc(desc: int) -> int:
    """Destroy a picture description (not the memory it names)."""
    _pic(desc)
    with LOCK:
        _REGISTRY.pics.pop(desc, None)
    return 0


def _setter(name: str, attribute: str) -> Callable[[int, int], int]:
    bits = 64 if attribute == "data" else 32  # parsed "k" / "I": no overflow check, masked

    @api(f"acl.media.dvpp_set_pic_desc_{name}", int, int)
    def setter(desc: int, number: int) -> int:
        setattr(_pic(desc), attribute, number & (2**bits - 1))
        return 0

    setter.__name__ = setter.__qualname__ = f"dvpp_set_pic_desc_{name}"
    setter.__doc__ = f"Set the picture description's {name.replace('_', ' ')}."
    return setter


def _getter(name: str, attribute: str) -> Callable[[int], int]:
    @api(f"acl.media.dvpp_get_pic_desc_{name}", int, fail=value(0))
    def getter(desc: int) -> int:
        number: int = getattr(_pic(desc), attribute)
        return number

    getter.__name__ = getter.__qualname__ = f"dvpp_get_pic_desc_{name}"
    getter.__doc__ = f"The picture description's {name.replace('_', ' ')} (0 for a bad handle)."
    return getter


dvpp_set_pic_desc_data = _setter("data", "data")
dvpp_set_pic_desc_size = _setter("size", "size")
dvpp_set_pic_desc_format = _setter("format", "format")
dvpp_set_pic_desc_width = _setter("width", "width")
dvpp_set_pic_desc_height = _setter("height", "height")
dvpp_set_pic_desc_width_stride = _setter("width_stride", "width_stride")
dvpp_set_pic_desc_height_stride = _setter("height_stride", "height_stride")
dvpp_get_pic_desc_data = _getter("data", "data")
dvpp_get_pic_desc_size = _getter("size", "size")
dvpp_get_pic_desc_format = _getter("format", "format")
dvpp_get_pic_desc_width = _getter("width", "width")
dvpp_get_pic_desc_height = _getter("height", "height")
dvpp_get_pic_desc_width_stride = _getter("width_stride", "width_stride")
dvpp_get_pic_desc_height_stride = _getter("height_stride", "height_stride")
dvpp_get_pic_desc_ret_code = _getter("ret_code", "ret_code")


# ----------------------------------------------------------------------------- configs


@api("acl.media.dvpp_create_resize_config", fail=value(0))
def dvpp_create_resize_config() -> int:
    """A resize configuration (interpolation 0: the default)."""
    config = ResizeConfig(STATE.new_handle())
    with LOCK:
        _REGISTRY.resizes[config.handle] = config
    return config.handle


@api("acl.media.dvpp_destroy_resize_config", int)
def dvpp_destroy_resize_config(config: int) -> int:
    """Destroy a resize configuration."""
    with LOCK:
        _REGISTRY.resizes.pop(config, None)  # ACL_FREE of any pointer succeeds
    return 0


@api("acl.media.dvpp_set_resize_config_interpolation", int, int)
def dvpp_set_resize_config_interpolation(config: int, interpolation: int) -> int:
    """Choose the interpolation (checked when a resize uses the configuration)."""
    found = _find(_REGISTRY.resizes, config, "resize configuration")
    assert isinstance(found, ResizeConfig)
    found.interpolation = interpolation
    return 0


@api("acl.media.dvpp_get_resize_config_interpolation", int, fail=value(0))
def dvpp_get_resize_config_interpolation(config: int) -> int:
    """The interpolation set (0 for a bad handle)."""
    found = _find(_REGISTRY.resizes, config, "resize configuration")
    assert isinstance(found, ResizeConfig)
    return found.interpolation


@api("acl.media.dvpp_create_roi_config", int, int, int, int, fail=value(0))
def dvpp_create_roi_config(left: int, right: int, top: int, bottom: int) -> int:
    """A region: columns left..right and rows top..bottom, inclusive."""
    roi = RoiConfig(STATE.new_handle(), left=left, right=right, top=top, bottom=bottom)
    with LOCK:
        _REGISTRY.rois[roi.handle] = roi
    return roi.handle


@api("acl.media.dvpp_destroy_roi_config", int)
def dvpp_destroy_roi_config(config: int) -> int:
    """Destroy a region configuration."""
    with LOCK:
        _REGISTRY.rois.pop(config, None)
    return 0


@api("acl.media.dvpp_set_roi_config", int, int, int, int, int)
def dvpp_set_roi_config(config: int, left: int, right: int, top: int, bottom: int) -> int:
    """Set all four bounds of a region."""
    roi = _find(_REGISTRY.rois, config, "region configuration (dvpp_create_roi_config)")
    assert isinstance(roi, RoiConfig)
    roi.left, roi.right, roi.top, roi.bottom = left, right, top, bottom
    return 0


# ----------------------------------------------------------------------------- JPEGD


def _host_bytes(data: int, size: int) -> bytes:
    """`size` bytes the host reads at `data` (libjpeg runs on the host CPU: host memory, or any
    memory in RC mode)."""
    if size <= 0:
        raise AclFailure(_AclCode.INVALID_PARAM, f"size must be > 0, got {size}")
    with LOCK:
        span = MEMORY.resolve(data, "data")
    if span.on_device and not device_mode():
        # Stricter: real ACL would read a device address on the host and crash.
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"data 0x{data:x} is device memory; the JPEG header is read on the host: pass "
            "host memory holding the file",
        )
    if span.remaining is not None and size > span.remaining:
        raise AclFailure(
            _AclCode.INVALID_PARAM, f"size {size} runs past the allocation ({span.remaining})"
        )
    return ctypes.string_at(span.address, size)


def _header(data: bytes) -> _jpeg.JpegHeader:
    try:
        return _jpeg.read_header(data)
    except _jpeg.JpegError as exc:
        # libjpeg's error_exit inside ACL's try block: ACL_ERROR_FAILURE
        raise AclFailure(_AclCode.FAILURE, f"libjpeg cannot read the header: {exc}") from exc


def _refuse(refusal: str | None) -> None:
    """A limit of `ascend.DvppLimits` broken: ACL_ERROR_INVALID_PARAM with its wording (ACL's
    code for JPEGD's sides; VPC's code is UNCONFIRMED)."""
    if refusal is not None:
        raise AclFailure(_AclCode.INVALID_PARAM, refusal)


@api("acl.media.dvpp_jpeg_get_image_info", int, int, fail=lambda code, args: (0, 0, 0, code))
def dvpp_jpeg_get_image_info(data: int, size: int) -> tuple[int, int, int, int]:
    """(width, height, components, ret) of the JPEG at host address `data`; 500001 when its
    header cannot be read (EXIF orientation is not applied: UNCONFIRMED, not emulated)."""
    header = _header(_host_bytes(data, size))
    return header.width, header.height, header.components, 0


@api("acl.media.dvpp_jpeg_predict_dec_size", int, int, int, fail=zero_ret)
def dvpp_jpeg_predict_dec_size(data: int, size: int, fmt: int) -> tuple[int, int]:
    """(bytes JPEGD's output needs, ret): NV12/NV21 with the width aligned to 128 and the height
    to 16, times 3/2 (hicann ImageProcessor::acldvppJpegPredictDecSize); 100027 for a format
    JPEGD does not output, 100000 for a size out of range."""
    _check_jpegd_format(fmt)
    header = _header(_host_bytes(data, size))
    _refuse(_limits().jpegd_refusal(header.width, header.height))
    return _align(header.width, 128) * _align(header.height, 16) * 3 // 2, 0


def _check_jpegd_format(fmt: int) -> None:
    if fmt not in JPEGD_FORMATS:
        raise AclFailure(
            _AclCode.FORMAT_NOT_MATCH,
            f"pixel format {fmt} is not a JPEGD output format (acldvppPixelFormat)",
        )
    if fmt not in NV12_FORMATS:
        raise AclFailure(
            _AclCode.FEATURE_UNSUPPORTED,
            f"pixel format {fmt}: the emulator's JPEGD outputs YUV420SP only (NV12 = 1, NV21 = 2)",
        )


@api("acl.media.dvpp_jpeg_decode_async", int, int, int, int, int, hangable=True)
def dvpp_jpeg_decode_async(channel: int, data: int, size: int, out: int, stream: int) -> int:
    """Queue the decode of the `size`-byte JPEG at DVPP address `data` into `out` on
    `stream`. The device refuses, failing the stream: an unsupported JPEG (progressive,
    arithmetic-coded, lossless, not 8-bit, not YUV) with 148052; a corrupt one with 500001
    (UNCONFIRMED); misaligned or too small buffers and strides with 200003 / 100000."""
    ctx = current_context()
    _created(channel)
    target = stream_in(stream, ctx)
    if size <= 0:
        raise AclFailure(_AclCode.INVALID_PARAM, f"size must be > 0, got {size}")
    desc = _pic(out)
    if desc.data == 0:
        raise AclFailure(_AclCode.INVALID_PARAM, "the output description has no data address")
    _check_jpegd_format(desc.format)
    snapshot, limits = replace(desc), _limits()

    def run() -> None:
        try:
            source = bytes(_dvpp_view(data, size, "JPEGD input"))
            header = _header(source)
            reason = _jpeg.unsupported(header)
            if reason is not None:
                raise AclFailure(_AclCode.UNSUPPORTED_JPEG, f"JPEGD cannot decode {reason}")
            _refuse(limits.jpegd_refusal(header.width, header.height))
            _check_strides(snapshot, header.width, header.height, limits.jpegd_width_align, 16)
            target_view = _dvpp_view(snapshot.data, snapshot.size, "JPEGD output")
            pixels = header.width * header.height
            with _dvpp_time(ctx, "jpegd", pixels):
                _paste(_nv12(target_view, snapshot), snapshot, _decode(source, header), 0, 0)
        except AclFailure as exc:
            desc.ret_code = exc.code
            raise
        desc.width, desc.height, desc.ret_code = header.width & ~1, header.height & ~1, 0

    target.submit("acl.media.dvpp_jpeg_decode_async", run)
    STATE.count("jpegd_calls")
    return 0


def _decode(source: bytes, header: _jpeg.JpegHeader) -> np.ndarray:
    try:
        return _jpeg.decode_nv12(source, header)
    except _jpeg.JpegError as exc:
        raise AclFailure(_AclCode.FAILURE, f"JPEGD failed on the scan: {exc}") from exc


# ----------------------------------------------------------------------------- VPC


def _vpc_checks(
    channel: int, src: int, dst: int, stream: int
) -> tuple[Context, Stream, PicDesc, PicDesc]:
    ctx = current_context()
    _created(channel)
    target = stream_in(stream, ctx)
    pics = _pic(src), _pic(dst)
    for what, desc in zip(("input", "output"), pics):
        if desc.data == 0:
            raise AclFailure(_AclCode.INVALID_PARAM, f"the {what} description has no data address")
        if desc.format not in NV12_FORMATS:
            raise AclFailure(
                _AclCode.FEATURE_UNSUPPORTED,
                f"{what} pixel format {desc.format}: the emulator's VPC handles YUV420SP only "
                "(NV12 = 1, NV21 = 2)",
            )
    return ctx, target, replace(pics[0]), replace(pics[1])


def _vpc_image(desc: PicDesc, what: str, limits: _DvppLimits) -> np.ndarray:
    """The NV12 view of a VPC picture ("input" or "output") after the device's checks."""
    w, h = desc.width, desc.height
    check = limits.vpc_input_refusal if what == "input" else limits.vpc_output_refusal
    _refuse(check(w, h))
    if w % 2 or h % 2:
        raise AclFailure(_AclCode.INVALID_PARAM, f"VPC {what} {w}x{h}: YUV420SP needs even sides")
    _check_strides(desc, w, h, VPC_WIDTH_ALIGN, VPC_HEIGHT_ALIGN)
    return _nv12(_dvpp_view(desc.data, desc.size, f"VPC {what}"), desc)


def _interpolation(config: int) -> bool:
    found = _find(_REGISTRY.resizes, config, "resize configuration")
    assert isinstance(found, ResizeConfig)
    if found.interpolation not in VPC_INTERPOLATIONS:
        raise AclFailure(
            _AclCode.FEATURE_UNSUPPORTED,
            f"interpolation {found.interpolation}; VPC offers "
            + ", ".join(f"{k} {v}" for k, v in VPC_INTERPOLATIONS.items()),
        )
    return found.interpolation == 2


@api("acl.media.dvpp_vpc_resize_async", int, int, int, int, int, hangable=True)
def dvpp_vpc_resize_async(channel: int, src: int, dst: int, config: int, stream: int) -> int:
    """Queue the resize of picture `src` to the size of picture `dst` on `stream`."""
    ctx, target, source, dest = _vpc_checks(channel, src, dst, stream)
    nearest, limits = _interpolation(config), _limits()

    def run() -> None:
        image = _vpc_image(source, "input", limits)
        canvas = _vpc_image(dest, "output", limits)
        _refuse(limits.vpc_scale_refusal(_size(source), _size(dest)))
        pixels = max(source.width * source.height, dest.width * dest.height)
        with _dvpp_time(ctx, "vpc", pixels):
            resized = _jpeg.resize_nv12(_plain(image, source), dest.height, dest.width, nearest)
            _paste(canvas, dest, resized, 0, 0)

    target.submit("acl.media.dvpp_vpc_resize_async", run)
    STATE.count("vpc_calls")
    return 0


def _roi(handle: int, what: str) -> RoiConfig:
    roi = _find(_REGISTRY.rois, handle, f"{what} region (dvpp_create_roi_config)")
    assert isinstance(roi, RoiConfig)
    if roi.left % 2 or roi.top % 2 or roi.right % 2 == 0 or roi.bottom % 2 == 0:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"{what} region left {roi.left} right {roi.right} top {roi.top} bottom "
            f"{roi.bottom}: YUV420SP needs even left and top, odd right and bottom",
        )
    if roi.right <= roi.left or roi.bottom <= roi.top:
        raise AclFailure(_AclCode.INVALID_PARAM, f"{what} region is empty")
    return replace(roi)


@api("acl.media.dvpp_vpc_crop_and_paste_async", int, int, int, int, int, int, hangable=True)
def dvpp_vpc_crop_and_paste_async(
    channel: int, src: int, dst: int, crop: int, paste: int, stream: int
) -> int:
    """Queue: cut region `crop` of `src`, resize it to region `paste` and write it there in
    `dst` (the rest of `dst` keeps its bytes)."""
    ctx, target, source, dest = _vpc_checks(channel, src, dst, stream)
    cut, place = _roi(crop, "crop"), _roi(paste, "paste")
    limits = _limits()

    def run() -> None:
        image = _vpc_image(source, "input", limits)
        canvas = _vpc_image(dest, "output", limits)
        for roi, desc, what in ((cut, source, "crop"), (place, dest, "paste")):
            if roi.right >= desc.width or roi.bottom >= desc.height:
                raise AclFailure(
                    _AclCode.INVALID_PARAM,
                    f"{what} region to ({roi.right}, {roi.bottom}) is outside the "
                    f"{desc.width}x{desc.height} picture",
                )
        out_w, out_h = _size(place)
        _refuse(limits.vpc_scale_refusal(_size(cut), (out_w, out_h)))
        plain = _plain(image, source)
        h = source.height
        region = np.concatenate(
            [
                plain[cut.top : cut.bottom + 1, cut.left : cut.right + 1],
                plain[h + cut.top // 2 : h + (cut.bottom + 1) // 2, cut.left : cut.right + 1],
            ]
        )
        with _dvpp_time(ctx, "vpc", max(region.size, out_w * out_h)):
            resized = _jpeg.resize_nv12(region, out_h, out_w)
            _paste(canvas, dest, resized, place.left, place.top)

    target.submit("acl.media.dvpp_vpc_crop_and_paste_async", run)
    STATE.count("vpc_calls")
    return 0


# ----------------------------------------------------------------------------- helpers


def _size(picture: PicDesc | RoiConfig) -> tuple[int, int]:
    """(width, height) of a picture or of a region (inclusive bounds)."""
    if isinstance(picture, RoiConfig):
        return picture.right - picture.left + 1, picture.bottom - picture.top + 1
    return picture.width, picture.height


def _align(number: int, to: int) -> int:
    return (number + to - 1) // to * to


def _check_strides(desc: PicDesc, width: int, height: int, w_align: int, h_align: int) -> None:
    ws, hs = desc.width_stride, desc.height_stride
    if ws < width or ws % w_align or hs < height or hs % h_align:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"strides {ws}x{hs} for a {width}x{height} picture: the width stride must be >= the "
            f"width and a multiple of {w_align}, the height stride >= the height and a multiple "
            f"of {h_align}",
        )
    need = ws * hs * 3 // 2
    if desc.size < need:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"size {desc.size} is below width stride x height stride x 3/2 = {need}",
        )


def _dvpp_view(addr: int, nbytes: int, what: str) -> np.ndarray:
    """`nbytes` of DVPP memory at `addr` as a writable uint8 array."""
    with LOCK:
        span = MEMORY.resolve(addr, what)
    if span.device is None or span.device.allocator != DVPP_MALLOC:
        # Stricter: DVPP's buffers come from acldvppMalloc (every JPEGD/VPC restrictions page)
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"{what} 0x{addr:x} is not memory from acl.media.dvpp_malloc",
        )
    if addr % DVPP_ALIGN:
        raise AclFailure(
            _AclCode.MEMORY_ADDRESS_UNALIGNED,
            f"{what} 0x{addr:x} is not {DVPP_ALIGN}-byte aligned",
        )
    if span.remaining is None or nbytes > span.remaining:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"{what}: {nbytes} bytes at 0x{addr:x} run past the allocation ({span.remaining} left)",
        )
    keep = span.device.view
    assert keep is not None  # resolve refuses freed memory
    # a view of the allocation's own buffer: it stays alive while the array does
    offset = span.address - ctypes.addressof(keep)
    return np.frombuffer(memoryview(keep).cast("B"), np.uint8, nbytes, offset)


def _nv12(view: np.ndarray, desc: PicDesc) -> np.ndarray:
    """The `[hs * 3 // 2, ws]` strided NV12 array of a picture's buffer."""
    rows = desc.height_stride * 3 // 2
    return view[: rows * desc.width_stride].reshape(rows, desc.width_stride)


def _plain(strided: np.ndarray, desc: PicDesc) -> np.ndarray:
    """The picture's NV12 image without stride padding (`[h * 3 // 2, w]`), as NV12."""
    w, h, hs = desc.width, desc.height, desc.height_stride
    image = np.concatenate([strided[:h, :w], strided[hs : hs + h // 2, :w]])
    if desc.format == _PixelFormat.YVU_SEMIPLANAR_420:
        image[h:] = image[h:].reshape(h // 2, w // 2, 2)[:, :, ::-1].reshape(h // 2, w)
    return image


def _paste(canvas: np.ndarray, desc: PicDesc, image: np.ndarray, left: int, top: int) -> None:
    """Write NV12 `image` into the strided picture `canvas` at (left, top), in its format."""
    h = image.shape[0] * 2 // 3
    w = image.shape[1]
    chroma = image[h:]
    if desc.format == _PixelFormat.YVU_SEMIPLANAR_420:
        chroma = chroma.reshape(h // 2, w // 2, 2)[:, :, ::-1].reshape(h // 2, w)
    canvas[top : top + h, left : left + w] = image[:h]
    uv_top = desc.height_stride + top // 2
    canvas[uv_top : uv_top + h // 2, left : left + w] = chroma


@contextlib.contextmanager
def _dvpp_time(ctx: Context, unit: str, pixels: int) -> Iterator[None]:
    """The device time of one DVPP job (`timing.dvpp_seconds`) on `ctx`'s device: its stream
    at the channel rate, of which the chip's engine is held for the chip's share only. The job's
    work (the emulator's decode or resize) runs outside the engine, so jobs of other channels
    run beside it, as the chip's channels do."""
    channel_s, chip_s = timing.current().dvpp_seconds(unit, pixels)
    with timing.channel(channel_s):
        yield
        with timing.engine(ctx.device.id, unit, chip_s):
            pass
