"""The emulated `acl.media`: DVPP's JPEGD and VPC do what they do and refuse what they refuse,
with the codes of the sources named in each test (docs/internals/conformance/dvpp.md)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from emulator_helpers import D2H, H2D

from ge_python_backend.ascend import AclCode, dvpp_limits
from ge_python_backend.emulator import acl, set_timing, timing

Image = pytest.importorskip("PIL.Image", reason="Pillow is the emulator extra's")
NV12 = 1


def jpeg(width: int, height: int, seed: int = 0, **save: object) -> bytes:
    """A JPEG of smooth colour gradients with some texture."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack(
        [x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x + y) % 256], axis=-1
    ).astype(np.int16)
    rgb += rng.integers(-8, 8, rgb.shape, dtype=np.int16)
    out = io.BytesIO()
    Image.fromarray(rgb.clip(0, 255).astype(np.uint8)).save(out, "JPEG", quality=92, **save)
    return out.getvalue()


@pytest.fixture
def dvpp(ctx: int) -> Iterator[tuple[int, int]]:
    """(channel desc, stream) with a channel created."""
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    channel = acl.media.dvpp_create_channel_desc()
    assert channel and acl.media.dvpp_create_channel(channel) == 0
    yield channel, stream
    assert acl.media.dvpp_destroy_channel(channel) == 0
    assert acl.media.dvpp_destroy_channel_desc(channel) == 0
    assert acl.rt.destroy_stream(stream) == 0


def dvpp_copy(data: bytes, extra: int = 0) -> int:
    ptr, ret = acl.media.dvpp_malloc(len(data) + extra)
    assert ret == 0
    assert acl.rt.memcpy(ptr + extra, len(data), acl.util.bytes_to_ptr(data), len(data), H2D) == 0
    return ptr


def pic(data: int, size: int, width: int, height: int, ws: int, hs: int, fmt: int = NV12) -> int:
    desc = acl.media.dvpp_create_pic_desc()
    for name, number in (
        ("data", data),
        ("size", size),
        ("format", fmt),
        ("width", width),
        ("height", height),
        ("width_stride", ws),
        ("height_stride", hs),
    ):
        assert getattr(acl.media, f"dvpp_set_pic_desc_{name}")(desc, number) == 0
    return desc


def decode(channel: int, stream: int, data: bytes, ws: int = 0, hs: int = 0) -> tuple[int, int]:
    """(ret of synchronize_stream, output desc) of a JPEGD decode of `data`."""
    host = acl.util.bytes_to_ptr(data)
    width, height, _, ret = acl.media.dvpp_jpeg_get_image_info(host, len(data))
    assert ret == 0
    size, ret = acl.media.dvpp_jpeg_predict_dec_size(host, len(data), NV12)
    assert ret == 0
    out, _ = acl.media.dvpp_malloc(size)
    ws, hs = ws or (width + 127) // 128 * 128, hs or (height + 15) // 16 * 16
    desc = pic(out, size, width, height, ws, hs)
    src = dvpp_copy(data)
    assert acl.media.dvpp_jpeg_decode_async(channel, src, len(data), desc, stream) == 0
    return acl.rt.synchronize_stream(stream), desc


def read_nv12(desc: int) -> np.ndarray:
    """The picture of `desc` without its stride padding, NV12 `[h * 3 // 2, w]`."""
    w, h = acl.media.dvpp_get_pic_desc_width(desc), acl.media.dvpp_get_pic_desc_height(desc)
    ws, hs = (
        acl.media.dvpp_get_pic_desc_width_stride(desc),
        acl.media.dvpp_get_pic_desc_height_stride(desc),
    )
    raw = np.empty(ws * hs * 3 // 2, np.uint8)
    ret = acl.rt.memcpy(
        raw.ctypes.data, raw.nbytes, acl.media.dvpp_get_pic_desc_data(desc), raw.nbytes, D2H
    )
    assert ret == 0
    planes = raw.reshape(hs * 3 // 2, ws)
    return np.concatenate([planes[:h, :w], planes[hs : hs + h // 2, :w]])


def pillow_ycbcr(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        return np.asarray(image.convert("YCbCr"))


def test_jpegd_decodes_the_jpegs_own_ycbcr_into_nv12(dvpp: tuple[int, int]) -> None:
    data = jpeg(151, 97)  # odd sides: JPEGD rounds them down to even for YUV420SP
    ret, desc = decode(*dvpp, data)
    assert ret == 0 and acl.media.dvpp_get_pic_desc_ret_code(desc) == 0
    assert (acl.media.dvpp_get_pic_desc_width(desc), acl.media.dvpp_get_pic_desc_height(desc)) == (
        150,
        96,
    )
    nv12 = read_nv12(desc)
    reference = pillow_ycbcr(data)[:96, :150].astype(int)
    # the decoder's RGB output converted back differs by its rounding only (JPEGD never makes RGB)
    assert np.abs(nv12[:96].astype(int) - reference[:, :, 0]).max() <= 3
    uv = nv12[96:].reshape(48, 75, 2).astype(int)
    mean = reference[:, :, 1:].reshape(48, 2, 75, 2, 2).mean(axis=(1, 3))
    assert np.abs(uv - mean).max() <= 3  # the 4:2:0 chroma, through libjpeg's upsampling


def test_predict_dec_size_aligns_as_acl_does(ctx: int) -> None:
    # hicann ImageProcessor::acldvppJpegPredictDecSize: NV12 width to 128, height to 16, x 3/2
    data = jpeg(200, 33)
    size, ret = acl.media.dvpp_jpeg_predict_dec_size(acl.util.bytes_to_ptr(data), len(data), NV12)
    assert (size, ret) == (256 * 48 * 3 // 2, 0)
    _, ret = acl.media.dvpp_jpeg_predict_dec_size(acl.util.bytes_to_ptr(data), len(data), 77)
    assert ret == AclCode.FORMAT_NOT_MATCH  # ValidateJpegOutputFormat's 100027


def frame_patched(data: bytes, offset: int, byte: int) -> bytes:
    """`data` with byte `offset` of its SOF0 segment (from the marker) replaced."""
    out = bytearray(data)
    out[out.index(b"\xff\xc0") + offset] = byte
    return bytes(out)


@pytest.mark.parametrize(
    ("make", "what"),
    [
        (lambda: jpeg(64, 64, progressive=True), "progressive"),
        (lambda: frame_patched(jpeg(64, 64), 1, 0xC9), "arithmetic-coded"),
        (lambda: frame_patched(jpeg(64, 64), 11, 0x41), "sampling"),  # Y 4x1: 4:1:1
        (lambda: jpeg(64, 64, keep_rgb=True), "RGB colour"),  # Adobe transform 0
    ],
)
def test_jpegd_refuses_what_it_cannot_decode_with_148052(
    dvpp: tuple[int, int], make: Callable[[], bytes], what: str
) -> None:
    # aclError.md: ACL_ERROR_UNSUPPORTED_JPEG 148052 for codings JPEGD does not support; the
    # JPEGD restrictions page (CANN 8.0.RC1 aclpythondevg_01_0321): Huffman only, YUV colour,
    # 444/422/420/400/440, no arithmetic coding, no progressive JPEG
    ret, desc = decode(*dvpp, make())
    assert ret == AclCode.UNSUPPORTED_JPEG == acl.media.dvpp_get_pic_desc_ret_code(desc)
    assert what in acl.get_recent_err_msg()


def test_image_info_of_what_is_not_a_jpeg_fails_as_libjpeg_does(ctx: int) -> None:
    # ImageProcessor::acldvppJpegGetImageInfo: libjpeg's error exit -> ACL_ERROR_FAILURE
    out = io.BytesIO()
    Image.new("RGB", (40, 40)).save(out, "PNG")
    png = out.getvalue()
    assert acl.media.dvpp_jpeg_get_image_info(acl.util.bytes_to_ptr(png), len(png)) == (
        0,
        0,
        0,
        AclCode.FAILURE,
    )
    truncated = jpeg(64, 64)[:100]
    _, _, _, ret = acl.media.dvpp_jpeg_get_image_info(acl.util.bytes_to_ptr(truncated), 100)
    assert ret == AclCode.FAILURE


def test_jpegd_fails_a_truncated_scan(dvpp: tuple[int, int]) -> None:
    data = jpeg(128, 128)
    ret, _ = decode(*dvpp, data[: len(data) * 2 // 3])
    assert ret == AclCode.FAILURE and "truncated" in acl.get_recent_err_msg()


def test_jpeg_sides_out_of_range_are_refused(ctx: int) -> None:
    # acldvppJpegPredictDecSize: 32..8192 -> else ACL_ERROR_INVALID_PARAM
    data = jpeg(31, 64)
    _, ret = acl.media.dvpp_jpeg_predict_dec_size(acl.util.bytes_to_ptr(data), len(data), NV12)
    assert ret == AclCode.INVALID_PARAM


def test_misaligned_input_and_strides_fail_the_stream(dvpp: tuple[int, int]) -> None:
    channel, stream = dvpp
    data = jpeg(64, 64)
    size = 128 * 64 * 3 // 2
    out, _ = acl.media.dvpp_malloc(size)
    good = pic(out, size, 64, 64, 128, 64)
    src = dvpp_copy(data, extra=64)  # the file starts 64 bytes in: not 128-byte aligned
    assert acl.media.dvpp_jpeg_decode_async(channel, src + 64, len(data), good, stream) == 0
    assert acl.rt.synchronize_stream(stream) == AclCode.MEMORY_ADDRESS_UNALIGNED
    # Ascend310P3 (the emulator's default SoC): JPEGD width stride a multiple of 64
    ret, _ = decode(channel, stream, data, ws=96, hs=64)
    assert ret == AclCode.INVALID_PARAM and "multiple of 64" in acl.get_recent_err_msg()
    ret, _ = decode(channel, stream, data, ws=128, hs=72)
    assert ret == AclCode.INVALID_PARAM and "multiple of 16" in acl.get_recent_err_msg()


def test_dvpp_buffers_must_come_from_dvpp_malloc(dvpp: tuple[int, int]) -> None:
    channel, stream = dvpp
    data = jpeg(64, 64)
    plain, _ = acl.rt.malloc(len(data), 0)
    acl.rt.memcpy(plain, len(data), acl.util.bytes_to_ptr(data), len(data), H2D)
    size = 128 * 64 * 3 // 2
    out, _ = acl.media.dvpp_malloc(size)
    assert (
        acl.media.dvpp_jpeg_decode_async(
            channel, plain, len(data), pic(out, size, 64, 64, 128, 64), stream
        )
        == 0
    )
    assert acl.rt.synchronize_stream(stream) == AclCode.INVALID_PARAM
    assert "dvpp_malloc" in acl.get_recent_err_msg()
    assert acl.rt.free(out) == AclCode.RT_PARAM_INVALID  # DVPP memory is freed by dvpp_free
    assert acl.media.dvpp_free(out) == 0 and acl.rt.free(plain) == 0


def test_dvpp_memory_is_device_memory_of_the_shared_ledger(ctx: int) -> None:
    before, total, _ = acl.rt.get_mem_info(0)
    ptr, ret = acl.media.dvpp_malloc(10 * 2**20)
    assert ret == 0 and ptr % 128 == 0
    after, _, _ = acl.rt.get_mem_info(0)
    assert before - after >= 10 * 2**20
    assert acl.media.dvpp_free(ptr) == 0
    assert acl.rt.get_mem_info(0)[0] == before


def test_vpc_resize_is_bilinear_and_checks_strides(dvpp: tuple[int, int]) -> None:
    channel, stream = dvpp
    ret, src = decode(channel, stream, jpeg(160, 120))
    assert ret == 0
    size = 64 * 48 * 3 // 2
    out, _ = acl.media.dvpp_malloc(size)
    dst = pic(out, size, 64, 48, 64, 48)
    config = acl.media.dvpp_create_resize_config()
    assert acl.media.dvpp_vpc_resize_async(channel, src, dst, config, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    source, resized = read_nv12(src).astype(float), read_nv12(dst).astype(float)
    # a smooth picture: the luma is Pillow's bilinear resize of it within a few levels
    small = Image.fromarray(source[:120].astype(np.uint8)).resize((64, 48), Image.BILINEAR)
    assert np.abs(resized[:48] - np.asarray(small)).mean() < 4
    bad = pic(out, size, 64, 48, 72, 48)  # VPC width stride: a multiple of 16 (acllite)
    assert acl.media.dvpp_vpc_resize_async(channel, src, bad, config, stream) == 0
    assert acl.rt.synchronize_stream(stream) == AclCode.INVALID_PARAM
    assert acl.media.dvpp_set_resize_config_interpolation(config, 7) == 0
    assert (
        acl.media.dvpp_vpc_resize_async(channel, src, dst, config, stream)
        == AclCode.FEATURE_UNSUPPORTED
    )


def test_crop_and_paste_writes_only_the_paste_region(dvpp: tuple[int, int]) -> None:
    channel, stream = dvpp
    ret, src = decode(channel, stream, jpeg(100, 80))
    assert ret == 0
    size = 64 * 64 * 3 // 2
    out, _ = acl.media.dvpp_malloc(size)
    assert acl.rt.memset(out, size, 0x10, size) == 0
    dst = pic(out, size, 64, 64, 64, 64)
    crop = acl.media.dvpp_create_roi_config(0, 99, 0, 79)
    paste = acl.media.dvpp_create_roi_config(0, 63, 6, 57)  # 64 x 52: the letterbox of 100 x 80
    assert acl.media.dvpp_vpc_crop_and_paste_async(channel, src, dst, crop, paste, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    image = read_nv12(dst)
    assert (image[:6] == 0x10).all() and (image[58:64] == 0x10).all()
    assert (image[64:67] == 0x10).all() and (image[6:58] != 0x10).any()
    even = acl.media.dvpp_create_roi_config(0, 98, 0, 79)  # right must be odd (acllite)
    assert (
        acl.media.dvpp_vpc_crop_and_paste_async(channel, src, dst, even, paste, stream)
        == AclCode.INVALID_PARAM
    )


def test_destroying_a_channel_desc_with_its_channel_is_148051(ctx: int) -> None:
    # aclError.md: ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED when the channel is not destroyed
    channel = acl.media.dvpp_create_channel_desc()
    assert acl.media.dvpp_create_channel(channel) == 0
    assert acl.media.dvpp_destroy_channel_desc(channel) == AclCode.RELATIVE_RESOURCE_NOT_CLEARED
    assert acl.media.dvpp_destroy_channel(channel) == 0
    assert acl.media.dvpp_destroy_channel_desc(channel) == 0


def test_bad_arguments_raise_type_error_as_the_binding_does(ctx: int) -> None:
    with pytest.raises(TypeError, match="acl.media.dvpp_malloc"):
        acl.media.dvpp_malloc("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acl.media.dvpp_create_roi_config(0, 1, 0)  # type: ignore[call-arg]


def test_jpegd_device_time_follows_the_soc_profile(dvpp: tuple[int, int]) -> None:
    # the 310P page: 128 1080p frames/s on one channel; a 1080p decode holds the stream 1/128 s
    channel, stream = dvpp
    set_timing("profile=dvpp-310p3")
    start, end = acl.rt.create_event()[0], acl.rt.create_event()[0]
    data = jpeg(1920, 1080)
    host = acl.util.bytes_to_ptr(data)
    size, _ = acl.media.dvpp_jpeg_predict_dec_size(host, len(data), NV12)
    out, _ = acl.media.dvpp_malloc(size)
    desc = pic(out, size, 1920, 1080, 1920, 1088)
    src = dvpp_copy(data)
    assert acl.rt.record_event(start, stream) == 0
    assert acl.media.dvpp_jpeg_decode_async(channel, src, len(data), desc, stream) == 0
    assert acl.rt.record_event(end, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    ms, ret = acl.rt.event_elapsed_time(start, end)
    assert ret == 0 and ms >= 1000 / 128 * 0.999
    assert timing.current().dvpp_seconds("jpegd", 1920 * 1080) == (1 / 128, 1 / 2048)


def test_a_decode_holds_the_chips_jpegd_engine_for_its_chip_share_only(
    dvpp: tuple[int, int],
) -> None:
    # JPEGD's channels decode side by side (16 on the 310P): the emulator's decode runs on the
    # job's channel, and the chip's engine is held 1/2048 s per 1080p frame, not for as long as
    # the emulator took to decode (which held every other channel's jobs when it was)
    channel, stream = dvpp
    set_timing("profile=dvpp-310p3")
    data = jpeg(1920, 1080)
    host = acl.util.bytes_to_ptr(data)
    size, _ = acl.media.dvpp_jpeg_predict_dec_size(host, len(data), NV12)
    out, _ = acl.media.dvpp_malloc(size)
    desc = pic(out, size, 1920, 1080, 1920, 1088)
    src = dvpp_copy(data)
    timing.start_trace()
    assert acl.media.dvpp_jpeg_decode_async(channel, src, len(data), desc, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    ((_device, engine, start, end),) = timing.stop_trace()
    assert engine == "jpegd" and end - start == pytest.approx(1 / 2048, abs=1e-9)


def test_descriptions_need_a_context_as_their_device_part_does(clean_acl: None) -> None:
    # ImageProcessor::CreateChannelDescOnHost / CreatePicDescOnHost allocate device memory
    assert acl.init() == 0
    assert acl.media.dvpp_create_channel_desc() == 0
    assert acl.media.dvpp_create_pic_desc() == 0
    assert "no current context" in acl.get_recent_err_msg()


def test_vpc_reads_8k_pictures_and_scales_each_side_by_1_32_to_16(dvpp: tuple[int, int]) -> None:
    # VPC restrictions (CANN 8.5/9.0): input up to 8192 x 8192 (YUV420SP above 4096); output
    # 4096 x 4096 on Atlas inference (the emulator's Ascend310P3); each side scaled 1/32..16
    channel, stream = dvpp
    ret, src = decode(channel, stream, jpeg(8192, 32))
    assert ret == 0
    config = acl.media.dvpp_create_resize_config()
    for width, height, expected in ((256, 32, 0), (128, 32, AclCode.INVALID_PARAM)):
        size = width * height * 3 // 2
        out, _ = acl.media.dvpp_malloc(size)
        dst = pic(out, size, width, height, width, height)
        assert acl.media.dvpp_vpc_resize_async(channel, src, dst, config, stream) == 0
        assert acl.rt.synchronize_stream(stream) == expected
    assert (
        "VPC would resize 8192x32 to 128x32 (by 1/64 x 1); VPC scales each side by 1/32 to 16"
        in (acl.get_recent_err_msg())
    )
    size = 4112 * 32 * 3 // 2
    out, _ = acl.media.dvpp_malloc(size)
    dst = pic(out, size, 4112, 32, 4112, 32)
    assert acl.media.dvpp_vpc_resize_async(channel, src, dst, config, stream) == 0
    assert acl.rt.synchronize_stream(stream) == AclCode.INVALID_PARAM
    assert "VPC writes 10x6 to 4096x4096 (Ascend310P)" in acl.get_recent_err_msg()


@pytest.mark.parametrize(
    ("soc", "output", "refused"),
    [
        ("Ascend310P3", (4096, 8192), True),
        ("Ascend910B2", (4096, 8192), False),  # the A2 series writes up to 8192 high
        ("Ascend910B2", (8192, 4096), True),
        ("Ascend310B1", (4096, 8192), False),
    ],
)
def test_vpc_output_limits_follow_the_soc_family(
    soc: str, output: tuple[int, int], refused: bool
) -> None:
    assert (dvpp_limits(soc).vpc_output_refusal(*output) is not None) == refused
