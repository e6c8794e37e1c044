"""`aipp`: ATC's AIPP config, static pipeline, dims and dynamic block, each rule against its source.

Sources are hicann/ge paths: [TEMPLATE] docs/zh/user_guides/atc_tools/AIPP/config_file_template.md,
[CSC] .../AIPP/CSC_config.md, [CROP] .../AIPP/crop_padding_config.md, [TYPICAL]
.../AIPP/typical_scenario_examples.md, [PROTO] graph_metadef/proto/insert_op.proto, [AIPP_OP]
compiler/graph/preprocess/insert_op/aipp_op.cc, [UTIL] .../insert_op/insert_aipp_op_util.cc,
[V2] docs/zh/api/graph_engine_api/c/acl/aclmdlGetInputDimsV2.md, [DYN_H]
inc/graph_metadef/common/dynamic_aipp.h, [PYACL] hicann/runtime python/pyACL/mdl/mdl_wrap.cpp.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ge_python_backend import aipp
from ge_python_backend.aipp import (
    AippConfigError,
    AippInputFormat,
    AippMode,
    DynamicAippParams,
    aipp_data_size,
    bind_static,
    first_aipp_info,
    parse_aipp_config,
)
from ge_python_backend.ascend import DTYPES_BY_NUMPY, Format

FP32 = DTYPES_BY_NUMPY[np.dtype(np.float32)]
FP16 = DTYPES_BY_NUMPY[np.dtype(np.float16)]
U8 = DTYPES_BY_NUMPY[np.dtype(np.uint8)]
RNG = np.random.default_rng(21)

# [CSC] "YUV420SP_U8转RGB", BT-601NARROW, verbatim.
YUV420SP_TO_RGB = """
aipp_op {
   aipp_mode: static
   input_format : YUV420SP_U8
   csc_switch : true
   rbuv_swap_switch : false
   matrix_r0c0 : 298
   matrix_r0c1 : 0
   matrix_r0c2 : 409
   matrix_r1c0 : 298
   matrix_r1c1 : -100
   matrix_r1c2 : -208
   matrix_r2c0 : 298
   matrix_r2c1 : 516
   matrix_r2c2 : 0
   input_bias_0 : 16
   input_bias_1 : 128
   input_bias_2 : 128
}
"""


def static(body: str) -> str:
    return "aipp_op {\n aipp_mode: static\n" + body + "\n}\n"


def one(text: str) -> aipp.AippOp:
    (op,) = parse_aipp_config(text)
    return op


def raw_bytes(bound: aipp.StaticAipp) -> np.ndarray:
    return RNG.integers(0, 256, bound.input_size, dtype=np.uint8)


# ---------------------------------------------------------------------------------------------
# Parsing and ATC's defaults


def test_doc_csc_example_parses_verbatim() -> None:
    op = one(YUV420SP_TO_RGB)
    assert op.aipp_mode is AippMode.STATIC and op.input_format is AippInputFormat.YUV420SP_U8
    assert op.matrix == ((298, 0, 409), (298, -100, -208), (298, 516, 0))
    assert op.input_bias == (16, 128, 128)
    assert op.output_bias == (16, 128, 128)  # [AIPP_OP] SetCscDefaultValue fills what is unset


def test_csc_defaults_follow_aipp_op_cc() -> None:
    # [AIPP_OP] SetCscDefaultValue: YUV420SP_U8 gets YUV->BGR, every other format RGB->YUV.
    yuv = one(static("input_format: YUV420SP_U8\ncsc_switch: true"))
    assert yuv.matrix == ((298, 516, 0), (298, -100, -208), (298, 0, 409))
    rgb = one(static("input_format: RGB888_U8\ncsc_switch: true"))
    assert rgb.matrix == ((66, 129, 25), (-38, -74, 112), (112, -94, -18))
    assert rgb.input_bias == rgb.output_bias == (16, 128, 128)
    off = one(static("input_format: RGB888_U8"))
    assert off.matrix == ((0, 0, 0),) * 3 and off.output_bias == (0, 0, 0)
    # SetDtcDefaultValue: var_reci 1.0; mean and min stay 0 ([PROTO] proto3 defaults).
    assert off.var_reci_chn == (1.0,) * 4 and off.mean_chn == (0,) * 4 and off.min_chn == (0.0,) * 4


def test_switches_off_zero_their_sizes() -> None:
    # [AIPP_OP] SetDefaultParams zeroes crop / padding sizes when the switch is off.
    op = one(static("input_format: RGB888_U8\nload_start_pos_w: 4\nleft_padding_size: 3"))
    assert (op.load_start_pos_w, op.left_padding_size) == (0, 0)


def test_several_blocks_comments_and_enum_numbers() -> None:
    # aipp_config_example.md: one block per input by related_input_rank; [PROTO] enum values.
    text = (
        "# two inputs\n"
        + static("related_input_rank: 0\ninput_format: RGB888_U8  # trailing comment")
        + "aipp_op: { aipp_mode: 1, related_input_rank: 1; input_format: 4 }\n"
    )
    first, second = parse_aipp_config(text)
    assert (first.related_input_rank, first.input_format) == (0, AippInputFormat.RGB888_U8)
    assert (second.related_input_rank, second.input_format) == (1, AippInputFormat.YUV400_U8)


def test_dynamic_block() -> None:
    (op,) = parse_aipp_config("aipp_op { aipp_mode: dynamic max_src_image_size: 752640 }")
    assert op.aipp_mode is AippMode.DYNAMIC and op.max_src_image_size == 752640


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (static("input_format: RGB888_U8\ncolour: 1"), "no field 'colour'"),
        (static("input_format: BGR888_U8"), "input_format cannot be 'BGR888_U8'"),
        (static("input_format: RAW10"), "RAW10 is not supported"),
        (static("input_format: RGB888_U8\ncrop: yes"), "true or false"),
        (static("input_format: RGB888_U8\nmean_chn_0: 1.5"), "integer"),
        (static("input_format: RGB888_U8\ninput_format: RGB888_U8"), "multiple times"),
        (static("input_format: RGB888_U8\nmatrix_r0c0: 1\nmatrix_r0c0: 2"), "repeatedly"),
        ("aipp_op { input_format: RGB888_U8 }", "aipp_mode must be configured"),
        (static("csc_switch: true"), "input_format must be set"),
        ("aipp_op { aipp_mode: dynamic }", "max_src_image_size must be set"),
        (static("input_format: RGB888_U8\nmean_chn_1: 256"), "outside [0, 255]"),
        (static("input_format: RGB888_U8\nmatrix_r1c1: -40000"), "outside [-32677, 32676]"),
        (static("input_format: RGB888_U8\npadding: true\ntop_padding_size: 33"), "[0, 32]"),
        (static("input_format: RGB888_U8\nvar_reci_chn_0: 70000"), "[-65504, 65504]"),
        (static("input_format: RGB888_U8\nsrc_image_size_w: 1\nsrc_image_size_h: 1"), "[2, 4096]"),
        (static("input_format: YUV420SP_U8\nsrc_image_size_w: 7\nsrc_image_size_h: 6"), "even"),
        (
            static(
                "input_format: YUV420SP_U8\nsrc_image_size_w: 8\nsrc_image_size_h: 8\n"
                "crop: true\nload_start_pos_w: 1"
            ),
            "must be even",
        ),
        (
            static(
                "input_format: RGB888_U8\nsrc_image_size_w: 8\nsrc_image_size_h: 8\n"
                "crop: true\nload_start_pos_w: 4\ncrop_size_w: 6\ncrop_size_h: 2"
            ),
            "exceeds src_image_size_w 8",
        ),
        (static("input_format: RGB888_U8\ncrop: true"), "may be 0 only when crop and padding"),
        (static("input_format: RGB888_U8\nresize: true"), "reserved"),
        (static("input_format: YUV400_U8\ncsc_switch: true"), "YUV400_U8 does not support"),
        (static('input_format: RGB888_U8\nrelated_input_name: "data"'), "Caffe"),
        (static("input_format: RGB888_U8") * 2, "related_input_rank 0 is given to 2"),
        ("multi_shape_op { mode: batch }", "multi_shape_op is not supported"),
        ("aipp { }", "unknown top-level field"),
        ("", "no aipp_op block"),
    ],
)
def test_parser_refuses_what_atc_refuses(text: str, message: str) -> None:
    # [PROTO] field set and text-format rules; [AIPP_OP] ValidateParams; [UTIL]
    # CheckInputRankPositionNoRepeat; [TEMPLATE] ranges, even sizes for YUV420SP, crop bounds,
    # reserved fields; aipp_param_check.cpp: YUV400 without CSC.
    with pytest.raises(AippConfigError) as caught:
        parse_aipp_config(text)
    assert message in str(caught.value)


def test_dynamic_image_size_refusal() -> None:
    # [UTIL] CheckAndCopyAippOpParams; aipp_config_example.md note on --dynamic_image_size.
    aipp.check_with_dynamic_image_size([one(static("input_format: RGB888_U8"))])
    sized = one(static("input_format: RGB888_U8\nsrc_image_size_w: 8\nsrc_image_size_h: 8"))
    with pytest.raises(AippConfigError, match="must be set to '0'"):
        aipp.check_with_dynamic_image_size([sized])


# ---------------------------------------------------------------------------------------------
# Binding to the model input: sizes, dims


def test_crop_padding_doc_example_binds_to_its_output_size() -> None:
    # [CROP]: 320x240 YUV420SP, crop 50x60 at (10, 20), padding 20/15/20/15 -> 85 x 95.
    # The doc's example starts the crop at an even position, as it says YUV420SP needs.
    text = static(
        "input_format: YUV420SP_U8\nsrc_image_size_w: 320\nsrc_image_size_h: 240\ncrop: true\n"
        "load_start_pos_w: 10\nload_start_pos_h: 20\ncrop_size_w: 50\ncrop_size_h: 60\n"
        "padding: true\nleft_padding_size: 20\nright_padding_size: 15\ntop_padding_size: 20\n"
        "bottom_padding_size: 15\npadding_value: 0"
    )
    op = one(text)
    bound = bind_static(op, (1, 3, 95, 85), Format.NCHW, FP32)
    assert bound.input_dims_v1 == [1, 240, 320, 3]
    assert bound.input_dims_v2 == [1, 360, 320, 1]
    assert bound.input_size == 320 * 240 * 3 // 2
    with pytest.raises(AippConfigError, match="must be equal"):
        bind_static(op, (1, 3, 96, 85), Format.NCHW, FP32)


@pytest.mark.parametrize(
    ("fmt", "v1_c", "v2"),
    [
        # [V2] table 1, for n=2, h=4, w=6; v1 is [n, h, w, c] (aclmdlGetInputDims.md table 1).
        ("YUV420SP_U8", 3, [2, 6, 6, 1]),
        ("XRGB8888_U8", 4, [2, 4, 6, 4]),
        ("RGB888_U8", 3, [2, 4, 6, 3]),
        ("YUV400_U8", 1, [2, 4, 6, 1]),
        ("ARGB8888_U8", 4, [2, 4, 6, 4]),
        ("YUYV_U8", 3, [2, 4, 6, 2]),
        ("YUV422SP_U8", 3, [2, 8, 6, 1]),
        ("AYUV444_U8", 4, [2, 4, 6, 4]),
    ],
)
def test_dims_v1_v2_and_size(fmt: str, v1_c: int, v2: list[int]) -> None:
    op = one(static(f"input_format: {fmt}"))
    bound = bind_static(op, (2, 1, 4, 6), Format.NCHW, FP32)
    assert bound.input_dims_v1 == [2, 4, 6, v1_c]
    assert bound.input_dims_v2 == v2
    assert bound.input_size == int(np.prod(v2))  # [V2]: the product equals the size
    assert (bound.input_dtype.acl_name, bound.input_format) == ("ACL_UINT8", Format.NHWC)


def test_zero_sizes_take_the_model_input() -> None:
    # [TEMPLATE]: src_image_size 0 (no crop, no padding) and crop_size 0 (crop, no padding)
    # take the W and H of the model input.
    bound = bind_static(one(static("input_format: RGB888_U8")), (1, 3, 5, 7), Format.NCHW, FP32)
    assert (bound.src_w, bound.src_h) == (7, 5)
    # [TYPICAL] YUV400_U8 -> GRAY: 224x224 source, crop at (0, 0) without crop_size, model 220.
    gray = one(
        static(
            "csc_switch: false\ncrop: true\ninput_format: YUV400_U8\nload_start_pos_h: 0\n"
            "load_start_pos_w: 0\nsrc_image_size_w: 224\nsrc_image_size_h: 224\n"
            "mean_chn_0: 128\nmin_chn_0: 0.0\nvar_reci_chn_0: 0.00390625"
        )
    )
    bound = bind_static(gray, (1, 1, 220, 220), Format.NCHW, FP32)
    assert (bound.crop_w, bound.crop_h, bound.input_size) == (220, 220, 224 * 224)


def test_bind_refusals() -> None:
    rgb = one(static("input_format: RGB888_U8"))
    with pytest.raises(AippConfigError, match="C=4"):
        bind_static(rgb, (1, 4, 4, 4), Format.NCHW, FP32)
    with pytest.raises(AippConfigError, match="must be even"):  # src 0 took the model's 3
        bind_static(one(static("input_format: YUV420SP_U8")), (1, 3, 3, 4), Format.NCHW, FP32)
    with pytest.raises(AippConfigError, match="static 4-D"):
        bind_static(rgb, (-1, 3, 4, 4), Format.NCHW, FP32)
    wide = one(
        static(
            "input_format: RGB888_U8\nsrc_image_size_w: 1060\nsrc_image_size_h: 2\n"
            "padding: true\nleft_padding_size: 32"
        )
    )
    with pytest.raises(AippConfigError, match="exceeds 1080"):  # [TEMPLATE] W <= 1080 on 310P
        bind_static(wide, (1, 3, 2, 1092), Format.NCHW, FP32)
    assert bind_static(wide, (1, 3, 2, 1092), Format.NCHW, FP32, padded_width_limit=4096)
    negative = one(
        static(
            "input_format: RGB888_U8\nsrc_image_size_w: 2\nsrc_image_size_h: 2\n"
            "padding: true\ntop_padding_size: 1\npadding_value: -1"
        )
    )
    with pytest.raises(AippConfigError, match="padding_value -1"):  # uint8 output: [0, 255]
        bind_static(negative, (1, 3, 3, 2), Format.NCHW, U8)


# ---------------------------------------------------------------------------------------------
# The pipeline against straightforward per-pixel references


def reference_csc_yuv(y: int, u: int, v: int, matrix: list[list[int]], bias: list[int]) -> list:
    """[CSC]: out_i = (sum_j m_ij * (in_j - bias_j)) >> 8, saturated to a byte."""
    src = [y - bias[0], u - bias[1], v - bias[2]]
    return [min(255, max(0, sum(m * s for m, s in zip(row, src)) >> 8)) for row in matrix]


def test_yuv420sp_nv12_against_per_pixel_reference() -> None:
    op = one(YUV420SP_TO_RGB)
    h, w = 4, 6
    bound = bind_static(op, (1, 3, h, w), Format.NCHW, FP32)
    raw = raw_bytes(bound)
    out = bound.apply(raw)
    assert out.shape == (1, 3, h, w) and out.dtype == np.float32
    matrix = [list(row) for row in op.matrix]
    for y in range(h):
        for x in range(w):
            # [TEMPLATE]: Y plane, then interleaved U,V (NV12) at half resolution.
            uv = h * w + (y // 2) * w + (x // 2) * 2
            expected = reference_csc_yuv(
                int(raw[y * w + x]), raw[uv], raw[uv + 1], matrix, [16, 128, 128]
            )
            assert list(out[0, :, y, x]) == expected  # R, G, B: row 0 (298, 0, 409) is R


def test_nv21_with_rbuv_swap_equals_nv12() -> None:
    # [TEMPLATE]: input_format stays YUV420SP_U8; rbuv_swap_switch true means the data is NV21.
    nv12 = bind_static(one(YUV420SP_TO_RGB), (1, 3, 4, 4), Format.NCHW, FP32)
    nv21 = bind_static(
        one(YUV420SP_TO_RGB.replace("rbuv_swap_switch : false", "rbuv_swap_switch : true")),
        (1, 3, 4, 4),
        Format.NCHW,
        FP32,
    )
    raw = raw_bytes(nv12)
    swapped = raw.copy()
    swapped[16:] = raw[16:].reshape(-1, 2)[:, ::-1].reshape(-1)
    np.testing.assert_array_equal(nv12.apply(raw), nv21.apply(swapped))


def test_yuv420sp_without_csc_is_yuv444() -> None:
    # [CSC] "YUV420SP_U8转YUV444": csc off gives Y, U, V per pixel.
    bound = bind_static(one(static("input_format: YUV420SP_U8")), (1, 2, 2, 3), Format.NHWC, U8)
    raw = np.array([10, 20, 30, 40, 100, 200], dtype=np.uint8)
    out = bound.apply(raw)
    assert out.dtype == np.uint8  # uint8 -> uint8: DTC does not apply [TEMPLATE]
    np.testing.assert_array_equal(out[0, :, :, 0], [[10, 20], [30, 40]])
    assert (out[0, ..., 1] == 100).all() and (out[0, ..., 2] == 200).all()


def test_rgb_crop_and_normalisation_hand_computed() -> None:
    # [TEMPLATE] DTC: out = (in - mean - min) * var_reci; crop box from load_start_pos.
    text = static(
        "input_format: RGB888_U8\nsrc_image_size_w: 4\nsrc_image_size_h: 3\ncrop: true\n"
        "load_start_pos_w: 1\nload_start_pos_h: 1\ncrop_size_w: 2\ncrop_size_h: 2\n"
        "mean_chn_0: 10\nmean_chn_1: 20\nmean_chn_2: 30\nmin_chn_2: 0.5\n"
        "var_reci_chn_0: 0.5\nvar_reci_chn_1: 2.0\nvar_reci_chn_2: 0.25"
    )
    bound = bind_static(one(text), (1, 3, 2, 2), Format.NCHW, FP32)
    image = np.arange(36, dtype=np.uint8).reshape(3, 4, 3) * 7
    out = bound.apply(image.reshape(-1))
    pixel = image[1, 1].astype(float)  # the crop's top-left pixel: row 1, column 1
    expected = [(pixel[0] - 10) * 0.5, (pixel[1] - 20) * 2.0, (pixel[2] - 30 - 0.5) * 0.25]
    np.testing.assert_allclose(out[0, :, 0, 0], expected, rtol=1e-3)
    np.testing.assert_allclose(out[0, 0], (image[1:3, 1:3, 0] - 10) * 0.5, rtol=1e-3)


def test_padding_offsets_and_value_after_dtc() -> None:
    # [TEMPLATE]/aclmdlGetFirstAippInfo.md: padding is last, its value in the output dtype.
    text = static(
        "input_format: RGB888_U8\nsrc_image_size_w: 2\nsrc_image_size_h: 2\nmean_chn_0: 100\n"
        "padding: true\nleft_padding_size: 1\ntop_padding_size: 2\nbottom_padding_size: 1\n"
        "padding_value: -7.5"
    )
    bound = bind_static(one(text), (1, 5, 3, 3), Format.NHWC, FP16)
    image = np.full((2, 2, 3), 50, dtype=np.uint8)
    out = bound.apply(image.reshape(-1))
    assert out.shape == (1, 5, 3, 3) and out.dtype == np.float16
    assert (out[0, 2:4, 1:3, 0] == -50).all()  # 50 - mean 100, not touched by the padding
    assert (out[0, 2:4, 1:3, 1] == 50).all()
    assert (out[0, :2] == -7.5).all() and (out[0, 4] == -7.5).all() and (out[0, :, 0] == -7.5).all()


def test_bgr_to_rgb_and_gray_via_rbuv_swap() -> None:
    # [CSC] "BGR888_U8转RGB": rbuv_swap true, csc off; "BGR888_U8转GRAY": swap, then 76/150/30.
    bgr = np.array([[[10, 20, 30]]], dtype=np.uint8)  # B, G, R
    to_rgb = one(static("input_format: RGB888_U8\nrbuv_swap_switch: true"))
    out = bind_static(to_rgb, (1, 3, 1, 1), Format.NCHW, FP32).apply(bgr.reshape(-1))
    assert list(out[0, :, 0, 0]) == [30, 20, 10]
    gray = static(
        "input_format: RGB888_U8\ncsc_switch: true\nrbuv_swap_switch: true\nmatrix_r0c0: 76\n"
        "matrix_r0c1: 150\nmatrix_r0c2: 30\n"
        + "\n".join(f"matrix_r{r}c{c}: 0" for r in (1, 2) for c in range(3))
        + "\noutput_bias_0: 0\noutput_bias_1: 0\noutput_bias_2: 0"
    )
    out = bind_static(one(gray), (1, 1, 1, 1), Format.NCHW, FP32).apply(bgr.reshape(-1))
    assert out.shape == (1, 1, 1, 1) and out[0, 0, 0, 0] == (76 * 30 + 150 * 20 + 30 * 10) >> 8


def test_rgb_to_yuv_uses_output_bias() -> None:
    # [TEMPLATE]: RGB->YUV is (M @ RGB) >> 8 + output_bias; BT-601 narrow via the default matrix.
    op = one(static("input_format: RGB888_U8\ncsc_switch: true"))
    rgb = np.array([200, 100, 50], dtype=np.uint8)
    out = bind_static(op, (1, 3, 1, 1), Format.NCHW, FP32).apply(rgb)
    r, g, b = 200, 100, 50
    expected = [
        ((66 * r + 129 * g + 25 * b) >> 8) + 16,
        ((-38 * r - 74 * g + 112 * b) >> 8) + 128,
        ((112 * r - 94 * g - 18 * b) >> 8) + 128,
    ]
    assert list(out[0, :, 0, 0]) == expected


@pytest.mark.parametrize(
    ("packed", "ax", "rbuv"),
    # [TEMPLATE] table 2: XRGB ax true; XBGR rbuv+ax; RGBX neither; BGRX rbuv only.
    [("XRGB", True, False), ("XBGR", True, True), ("RGBX", False, False), ("BGRX", False, True)],
)
def test_xrgb8888_packings_arrive_as_rgb(packed: str, ax: bool, rbuv: bool) -> None:
    values = {"X": 255, "R": 11, "G": 22, "B": 33}
    raw = np.array([values[c] for c in packed], dtype=np.uint8)
    op = one(
        static(
            f"input_format: XRGB8888_U8\nax_swap_switch: {str(ax).lower()}\n"
            f"rbuv_swap_switch: {str(rbuv).lower()}"
        )
    )
    out = bind_static(op, (1, 3, 1, 1), Format.NCHW, FP32).apply(raw)
    assert list(out[0, :, 0, 0]) == [11, 22, 33]


def test_yuyv_and_yuv422sp_layouts() -> None:
    # YUYV: packed Y0 U Y1 V; YUV422SP: Y plane then full-height interleaved U,V at half width.
    yuyv = one(static("input_format: YUYV_U8"))
    out = bind_static(yuyv, (1, 2, 2, 3), Format.NHWC, U8).apply(
        np.array([1, 2, 3, 4, 5, 6, 7, 8], dtype=np.uint8)
    )
    np.testing.assert_array_equal(out[0, 0], [[1, 2, 4], [3, 2, 4]])
    np.testing.assert_array_equal(out[0, 1], [[5, 6, 8], [7, 6, 8]])
    sp = one(static("input_format: YUV422SP_U8"))
    out = bind_static(sp, (1, 2, 2, 3), Format.NHWC, U8).apply(
        np.array([1, 2, 3, 4, 50, 60, 70, 80], dtype=np.uint8)
    )
    np.testing.assert_array_equal(out[0, 1], [[3, 70, 80], [4, 70, 80]])


def test_apply_checks_the_byte_count() -> None:
    bound = bind_static(one(YUV420SP_TO_RGB), (2, 3, 4, 4), Format.NCHW, FP32)
    assert bound.apply(bytes(bound.input_size)).shape == (2, 3, 4, 4)
    with pytest.raises(ValueError, match="needs 48"):
        bound.apply(bytes(2 * 4 * 4 * 3))  # v1's n*h*w*3: twice what the model reads


# ---------------------------------------------------------------------------------------------
# get_first_aipp_info and the dynamic block

PYACL_INFO_KEYS = {
    # [PYACL] SetAIPPCscParams (no matrixR0C2, matrixR2C0, matrixR2C1), SetAIPPInfo,
    # SetAIPPCropParams, SetAIPPPaddingParams, SetAIPPDtcPixelMean/Min, SetAIPPPixelVarReci.
    "cscSwitch", "matrixR0C0", "matrixR0C1", "matrixR1C0", "matrixR1C1", "matrixR1C2",
    "matrixR2C2", "outputBias0", "outputBias1", "outputBias2", "inputBias0", "inputBias1",
    "inputBias2", "rbuvSwapSwitch", "axSwapSwitch", "singleLineMode", "srcImageSizeW",
    "srcImageSizeH", "srcFormat", "srcDatatype", "srcDimNum", "shapeCount", "inputFormat",
    "aippExtend", "cropSwitch", "loadStartPosW", "loadStartPosH", "cropSizeW", "cropSizeH",
    "resizeSwitch", "resizeOutputW", "resizeOutputH", "paddingSwitch", "leftPaddingSize",
    "rightPaddingSize", "topPaddingSize", "bottomPaddingSize", "meanChn0", "meanChn1",
    "meanChn2", "meanChn3", "minChn0", "minChn1", "minChn2", "minChn3", "varReciChn0",
    "varReciChn1", "varReciChn2", "varReciChn3", "outDims",
}  # fmt: skip


def test_first_aipp_info_dict() -> None:
    op = one(YUV420SP_TO_RGB.replace("}", "src_image_size_w: 8\nsrc_image_size_h: 4\n}"))
    info = first_aipp_info([bind_static(op, (1, 3, 4, 8), Format.NCHW, FP32)], "images")
    assert set(info) == PYACL_INFO_KEYS
    assert (info["inputFormat"], info["cscSwitch"], info["matrixR0C0"]) == (1, 1, 298)
    assert (info["srcFormat"], info["srcDatatype"], info["srcDimNum"]) == (0, 0, 4)
    assert (info["srcImageSizeW"], info["srcImageSizeH"], info["varReciChn0"]) == (8, 4, 1.0)
    (gear,) = info["outDims"]
    assert gear["srcDims"] == {"name": "images", "dimCount": 4, "dims": [1, 3, 4, 8]}
    assert gear["srcSize"] == 1 * 3 * 4 * 8 * 4
    assert gear["aippOutdims"]["dims"] == [1, 1, 4, 8, 16]  # NC1HWC0, C0 = 16 for fp16
    assert gear["aippOutSize"] == 4 * 8 * 16 * 2


def test_aipp_data_size() -> None:
    # acl_aipp_om2.cpp aclmdlGetAippDataSize = batch * 96 + 64; [AIPP_OP] CalcMaxSize the same.
    assert [aipp_data_size(n) for n in (1, 2, 8)] == [160, 256, 832]
    with pytest.raises(ValueError, match="ACL_ERROR_INVALID_PARAM"):
        aipp_data_size(0)


def test_dynamic_block_layout_and_round_trip() -> None:
    params = DynamicAippParams.create(2)
    assert all(b.var_reci == [1.0] * 4 for b in params.batches)  # aclmdlCreateAIPP
    params.input_format = AippInputFormat.RGB888_U8
    params.src_image_size_w, params.src_image_size_h = 224, 112
    params.matrix = list(range(1, 10))
    params.batches[1].crop_switch, params.batches[1].crop_size_w = 1, 100
    params.batches[1].padding_right, params.batches[1].min = 7, [0.5, 0, 0, 0]
    data = params.pack()
    assert len(data) == aipp_data_size(2)
    # [DYN_H] offsets (also the ops repo's aipp_infershape.cpp: batchNum at 4, src W/H at 8/12,
    # batch records from 64 with crop size W at +16 and padding right at +52).
    assert data[0] == 5  # RGB888_U8's CceAippInputFormat code, not its aclAippInputFormat 3
    assert data[4] == 2
    assert struct.unpack_from("<2i", data, 8) == (224, 112)
    assert struct.unpack_from("<9h", data, 16) == tuple(range(1, 10))
    second = 64 + 96
    assert data[second] == 1 and struct.unpack_from("<i", data, second + 16) == (100,)
    assert struct.unpack_from("<i", data, second + 52) == (7,)
    assert struct.unpack_from("<H", data, second + 64) == (0x3800,)  # fp16 0.5
    assert DynamicAippParams.unpack(data) == params
    with pytest.raises(ValueError, match="batchNum"):
        DynamicAippParams.unpack(data[:200])
