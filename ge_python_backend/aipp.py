"""ATC's AIPP (AI pre-processing) as data and steps: the config file, the static pipeline, the dims.

`atc --insert_op_conf=aipp.cfg` puts an AIPP operator in front of a model input; the input then
takes raw UINT8 images (NHWC, sized for the source image) and the AIPP hardware crops, converts
colour, normalises and pads them into what the original graph takes. This module holds:

* `parse_aipp_config(text)`: ATC's aipp.cfg (protobuf text of `domi.InsertNewOps`) into `AippOp`
  records with ATC's defaults, refusing what ATC or its docs refuse.
* `bind_static(op, dims, fmt, dtype)`: one op bound to the model input it feeds, giving the dims,
  size, dtype and format ACL reports for the AIPP input and `apply`, the pipeline in NumPy.
* the dynamic-AIPP parameter block (`aipp_data_size`, `DynamicAippParams`) as ACL lays it out.
* `first_aipp_info`: the dict pyACL's `acl.mdl.get_first_aipp_info` returns.

Sources (hicann/ge unless named): `graph_metadef/proto/insert_op.proto` [PROTO];
`compiler/graph/preprocess/insert_op/aipp_op.cc` [AIPP_OP] and `insert_aipp_op_util.cc` [UTIL];
`docs/zh/user_guides/atc_tools/AIPP/config_file_template.md` [TEMPLATE], `CSC_config.md` [CSC],
`crop_padding_config.md` [CROP], `normalization_config.md` [DTC], `aipp_config_example.md`;
`docs/zh/api/graph_engine_api/c/acl/aclmdlGetInputDims.md`, `aclmdlGetInputDimsV2.md` [V2],
`aclmdlGetFirstAippInfo.md`, `aclmdlSetInputAIPP.md`, `aclAippInfo.md`, `aclAippDims.md`;
`inc/graph_metadef/common/dynamic_aipp.h` [DYN_H]; `api/acl/acl_model/model/acl_aipp_om2.cpp`,
`aipp_param_check.cpp`, `model_common.h`, `model_desc_internal.h` [ACL]; hicann/runtime
`python/pyACL/mdl/mdl_wrap.cpp` [PYACL]. Imports only the standard library, numpy and `ascend`.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ge_python_backend.ascend import DTYPES_BY_NUMPY, AclCode, DataType, Format

__all__ = [
    "ACL_INVALID_NODE_INDEX",
    "DYNAMIC_AIPP_INPUT_NAME",
    "DYNAMIC_BATCH_PARAMS_SIZE",
    "DYNAMIC_PARAMS_HEAD_SIZE",
    "AippConfigError",
    "AippInputFormat",
    "AippMode",
    "AippOp",
    "AippType",
    "DynamicAippBatch",
    "DynamicAippParams",
    "StaticAipp",
    "aipp_data_size",
    "bind_static",
    "check_with_dynamic_image_size",
    "first_aipp_info",
    "parse_aipp_config",
]


class AippConfigError(ValueError):
    """An AIPP config ATC (or its documentation) refuses; the message names the field."""


class AippMode(enum.IntEnum):
    """`AippOpParams.AippMode` [PROTO]."""

    UNDEFINED = 0
    STATIC = 1
    DYNAMIC = 2

    @property
    def config_name(self) -> str:
        """The word aipp.cfg uses: "static", "dynamic"."""
        return self.name.lower()


class AippInputFormat(enum.IntEnum):
    """`AippOpParams.InputFormat` [PROTO]; values 1..14 equal `aclAippInputFormat` (what
    `get_first_aipp_info` reports as `inputFormat`, and what `set_aipp_input_format` takes)."""

    UNDEFINED = 0
    YUV420SP_U8 = 1
    XRGB8888_U8 = 2
    RGB888_U8 = 3
    YUV400_U8 = 4
    NC1HWC0DI_FP16 = 5
    NC1HWC0DI_S8 = 6
    ARGB8888_U8 = 7
    YUYV_U8 = 8
    YUV422SP_U8 = 9
    AYUV444_U8 = 10
    RAW10 = 11
    RAW12 = 12
    RAW16 = 13
    RAW24 = 14
    RGB16 = 15
    RGB20 = 16
    RGB24 = 17
    RGB8_IR = 18
    RGB16_IR = 19
    RGB24_IR = 20

    @property
    def layout(self) -> _SourceLayout:
        """How the source image is laid out; KeyError for a format the pipeline does not run."""
        return _LAYOUTS[self]

    @property
    def cce_code(self) -> int:
        """The code the dynamic-AIPP block's `inputFormat` byte holds (`CceAippInputFormat`,
        model_desc_internal.h, mapped in acl_aipp_om2.cpp `aclmdlSetAIPPInputFormat`)."""
        return _CCE_CODES[self]


# CceAippInputFormat [ACL model_desc_internal.h], by the aclAippInputFormat it is mapped from.
_CCE_CODES = {
    AippInputFormat.YUV420SP_U8: 1,
    AippInputFormat.XRGB8888_U8: 2,
    AippInputFormat.NC1HWC0DI_FP16: 3,
    AippInputFormat.NC1HWC0DI_S8: 4,
    AippInputFormat.RGB888_U8: 5,
    AippInputFormat.ARGB8888_U8: 6,
    AippInputFormat.YUYV_U8: 7,
    AippInputFormat.YUV422SP_U8: 8,
    AippInputFormat.AYUV444_U8: 9,
    AippInputFormat.YUV400_U8: 10,
    AippInputFormat.RAW10: 11,
    AippInputFormat.RAW12: 12,
    AippInputFormat.RAW16: 13,
    AippInputFormat.RAW24: 16,
}
_FORMATS_BY_CCE = {code: fmt for fmt, code in _CCE_CODES.items()}


class AippType(enum.IntEnum):
    """`aclmdlInputAippType` (aclmdlInputAippType.md), what `acl.mdl.get_aipp_type` returns."""

    NONE = 0  # ACL_DATA_WITHOUT_AIPP
    STATIC = 1  # ACL_DATA_WITH_STATIC_AIPP
    DYNAMIC = 2  # ACL_DATA_WITH_DYNAMIC_AIPP: the input has an attached parameter input
    DYNAMIC_PARAMS = 3  # ACL_DYNAMIC_AIPP_NODE: the input is the dynamic-AIPP parameter input


# `dynamicAttachedDataIndex` when the type is not DYNAMIC (aclmdlGetAippType.md).
ACL_INVALID_NODE_INDEX = 0xFFFFFFFF
# The first dynamic-AIPP parameter input; later ones are `<name>_<aipp node>` [AIPP_OP].
DYNAMIC_AIPP_INPUT_NAME = "ascend_dynamic_aipp_data"


@dataclasses.dataclass(frozen=True)
class _SourceLayout:
    """The bytes of one source image: `v2 = [h * h_num / h_den, w, c]` (table 1 of [V2])."""

    v1_channels: int  # C of get_input_dims (v1): the channels the image carries
    v2_channels: int  # C of get_input_dims_v2
    h_num: int  # v2 H = h * h_num // h_den
    h_den: int
    yuv: bool  # a YUV family format: CSC takes YUV in (input bias), rbuv swaps U and V
    even_w: bool  # the width (and crop start W) must be even
    even_h: bool  # the height (and crop start H) must be even

    def image_bytes(self, h: int, w: int) -> int:
        return h * self.h_num // self.h_den * w * self.v2_channels


_LAYOUTS = {
    AippInputFormat.YUV420SP_U8: _SourceLayout(3, 1, 3, 2, True, True, True),
    AippInputFormat.XRGB8888_U8: _SourceLayout(4, 4, 1, 1, False, False, False),
    AippInputFormat.RGB888_U8: _SourceLayout(3, 3, 1, 1, False, False, False),
    AippInputFormat.YUV400_U8: _SourceLayout(1, 1, 1, 1, True, False, False),
    AippInputFormat.ARGB8888_U8: _SourceLayout(4, 4, 1, 1, False, False, False),
    AippInputFormat.YUYV_U8: _SourceLayout(3, 2, 1, 1, True, True, False),
    AippInputFormat.YUV422SP_U8: _SourceLayout(3, 1, 2, 1, True, True, False),
    AippInputFormat.AYUV444_U8: _SourceLayout(4, 4, 1, 1, True, False, False),
}


# ---------------------------------------------------------------------------------------------
# The config record and its defaults


def _yuv2rgb_default() -> tuple[tuple[int, ...], ...]:
    # [AIPP_OP] SetCscDefaultValue for YUV420SP_U8: rows (298, 516, 0), (298, -100, -208),
    # (298, 0, 409): BT-601 narrow YUV -> BGR, the matrix of [TEMPLATE].
    return ((298, 516, 0), (298, -100, -208), (298, 0, 409))


def _rgb2yuv_default() -> tuple[tuple[int, ...], ...]:
    # [AIPP_OP] SetCscDefaultValue for every other format: BT-601 narrow RGB -> YUV.
    return ((66, 129, 25), (-38, -74, 112), (112, -94, -18))


@dataclasses.dataclass(frozen=True)
class AippOp:
    """One `aipp_op { ... }` block after ATC's `SetDefaultParams` [AIPP_OP].

    Defaults are [PROTO]'s zeros, except: `var_reci_chn` 1.0; with `csc_switch` the matrix and
    biases ATC fills in (YUV420SP_U8: YUV->BGR, others: RGB->YUV, biases 16/128/128) where the
    file gives none; crop, resize and padding sizes are zeroed when their switch is off.
    """

    aipp_mode: AippMode
    related_input_rank: int = 0
    input_edge_idx: tuple[int, ...] = ()
    max_src_image_size: int = 0  # dynamic only
    input_format: AippInputFormat = AippInputFormat.UNDEFINED
    csc_switch: bool = False
    rbuv_swap_switch: bool = False
    ax_swap_switch: bool = False
    src_image_size_w: int = 0
    src_image_size_h: int = 0
    crop: bool = False
    load_start_pos_w: int = 0
    load_start_pos_h: int = 0
    crop_size_w: int = 0
    crop_size_h: int = 0
    padding: bool = False
    left_padding_size: int = 0
    right_padding_size: int = 0
    top_padding_size: int = 0
    bottom_padding_size: int = 0
    padding_value: float = 0.0
    mean_chn: tuple[int, ...] = (0, 0, 0, 0)
    min_chn: tuple[float, ...] = (0.0, 0.0, 0.0, 0.0)
    var_reci_chn: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    matrix: tuple[tuple[int, ...], ...] = ((0, 0, 0), (0, 0, 0), (0, 0, 0))
    output_bias: tuple[int, ...] = (0, 0, 0)
    input_bias: tuple[int, ...] = (0, 0, 0)
    raw_rgbir_to_f16_n: int = 0

    @property
    def is_static(self) -> bool:
        return self.aipp_mode is AippMode.STATIC


# ---------------------------------------------------------------------------------------------
# aipp.cfg: protobuf text format of domi.InsertNewOps [PROTO], read by ATC's ReadProtoFromText


@dataclasses.dataclass(frozen=True)
class _Field:
    kind: str  # "bool", "int", "uint", "float", "mode", "format", "string"
    repeated: bool = False  # a `repeated` field of [PROTO]
    low: float | None = None
    high: float | None = None
    source: str = "[TEMPLATE]"


def _int_field(low: float, high: float, repeated: bool = False) -> _Field:
    return _Field("int", repeated, low, high)


# Every AippOpParams field [PROTO]; ranges are [TEMPLATE]'s (类型/取值范围 of each field).
_FIELDS: dict[str, _Field] = {
    "aipp_mode": _Field("mode"),
    "related_input_rank": _Field("uint"),
    "related_input_name": _Field("string"),
    "input_edge_idx": _Field("uint", repeated=True),
    "max_src_image_size": _Field("uint"),
    "support_rotation": _Field("bool"),
    "input_format": _Field("format"),
    "csc_switch": _Field("bool"),
    "cpadding_value": _Field("float", False, -65504, 65504),
    "rbuv_swap_switch": _Field("bool"),
    "ax_swap_switch": _Field("bool"),
    "single_line_mode": _Field("bool"),
    "src_image_size_w": _int_field(0, 4096),
    "src_image_size_h": _int_field(0, 4096),
    "crop": _Field("bool"),
    "load_start_pos_w": _int_field(0, 4095),
    "load_start_pos_h": _int_field(0, 4095),
    "crop_size_w": _int_field(0, 4096),
    "crop_size_h": _int_field(0, 4096),
    "resize": _Field("bool"),
    "resize_output_w": _int_field(0, 1920),
    "resize_output_h": _int_field(0, 4096),
    "padding": _Field("bool"),
    "left_padding_size": _int_field(0, 32),
    "right_padding_size": _int_field(0, 32),
    "top_padding_size": _int_field(0, 32),
    "bottom_padding_size": _int_field(0, 32),
    "padding_value": _Field("float", False, -65504, 65504),
    **{f"mean_chn_{i}": _int_field(0, 255) for i in range(4)},
    **{f"min_chn_{i}": _Field("float", False, 0, 255) for i in range(4)},
    **{f"var_reci_chn_{i}": _Field("float", True, -65504, 65504) for i in range(4)},
    **{f"matrix_r{r}c{c}": _int_field(-32677, 32676, True) for r in range(3) for c in range(3)},
    **{f"output_bias_{i}": _int_field(0, 255, True) for i in range(3)},
    **{f"input_bias_{i}": _int_field(0, 255, True) for i in range(3)},
    "raw_rgbir_to_f16_n": _Field("uint", False, 0, 31),
}

_TOKEN = re.compile(
    r"""\s+|\#[^\n]*|(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')"""
    r"""|(?P<num>[-+]?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fF]?)"""
    r"""|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<punct>[{}:;,<>\[\]])"""
)


@dataclasses.dataclass(frozen=True)
class _Token:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> Iterator[_Token]:
    pos, line = 0, 1
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise AippConfigError(f"line {line}: cannot read {text[pos : pos + 20]!r}")
        kind = match.lastgroup
        if kind is not None:
            yield _Token(kind, match.group(kind), line)
        line += match.group(0).count("\n")
        pos = match.end()


class _Reader:
    def __init__(self, text: str) -> None:
        self._tokens = list(_tokens(text))
        self._pos = 0

    def peek(self) -> _Token | None:
        return self._tokens[self._pos] if self._pos < len(self._tokens) else None

    def take(self, what: str) -> _Token:
        token = self.peek()
        if token is None:
            raise AippConfigError(f"the config ends where {what} was expected")
        self._pos += 1
        return token

    def skip(self, *texts: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "punct" and token.text in texts:
            self._pos += 1
            return True
        return False


def parse_aipp_config(text: str) -> list[AippOp]:
    """ATC's aipp.cfg text into one `AippOp` per `aipp_op` block, in file order.

    The syntax is protobuf text format of `domi.InsertNewOps` [PROTO] (`name: value`, `#`
    comments, `aipp_op { ... }` blocks, `:` before `{` optional); an unknown or repeated singular
    field is a parse error as in protobuf. Then ATC's checks: `ValidateParams` [AIPP_OP], the
    position checks `CheckPositionNotRepeat` [UTIL], and the ranges and constraints of
    [TEMPLATE]. Raises `AippConfigError` naming the field and what is allowed.
    """
    reader = _Reader(text)
    blocks: list[dict[str, list[Any]]] = []
    while (token := reader.peek()) is not None:
        reader.take("aipp_op")
        if token.kind != "ident" or token.text not in ("aipp_op", "multi_shape_op"):
            raise AippConfigError(
                f"line {token.line}: unknown top-level field {token.text!r}; an AIPP config "
                "holds aipp_op { ... } blocks"
            )
        if token.text == "multi_shape_op":
            raise AippConfigError(
                f"line {token.line}: multi_shape_op is not supported; use ATC's "
                "--dynamic_batch_size instead"
            )
        reader.skip(":")
        opening = reader.take("{")
        if opening.text != "{":
            raise AippConfigError(f"line {opening.line}: aipp_op must be followed by '{{'")
        blocks.append(_read_block(reader))
        reader.skip(",", ";")
    if not blocks:
        raise AippConfigError("the AIPP config holds no aipp_op block")
    ops = [_build_op(fields, index) for index, fields in enumerate(blocks)]
    ranks = [op.related_input_rank for op in ops]
    for rank in sorted(set(ranks)):
        if ranks.count(rank) > 1:
            raise AippConfigError(
                f"related_input_rank {rank} is given to {ranks.count(rank)} aipp_op blocks; "
                "ATC cannot insert AIPP twice at one position (CheckInputRankPositionNoRepeat)"
            )
    return ops


def _read_block(reader: _Reader) -> dict[str, list[Any]]:
    fields: dict[str, list[Any]] = {}
    while True:
        token = reader.take("'}'")
        if token.kind == "punct" and token.text == "}":
            return fields
        if token.kind != "ident":
            raise AippConfigError(f"line {token.line}: expected a field name, found {token.text!r}")
        spec = _FIELDS.get(token.text)
        if spec is None:
            raise AippConfigError(
                f"line {token.line}: aipp_op has no field {token.text!r} (insert_op.proto "
                "AippOpParams)"
            )
        if not reader.skip(":"):
            raise AippConfigError(f"line {token.line}: expected ':' after {token.text}")
        value = _read_value(reader, token.text, spec)
        if token.text in fields and not spec.repeated:
            raise AippConfigError(
                f"line {token.line}: non-repeated field {token.text!r} is specified multiple times"
            )
        fields.setdefault(token.text, []).append(value)
        reader.skip(",", ";")


def _read_value(reader: _Reader, name: str, spec: _Field) -> Any:
    token = reader.take(f"a value for {name}")
    where = f"line {token.line}: {name}"
    if spec.kind == "string":
        if token.kind != "str":
            raise AippConfigError(f"{where} takes a quoted string, not {token.text!r}")
        return token.text[1:-1]
    if spec.kind == "bool":
        if token.text in ("true", "True", "t", "1"):
            return True
        if token.text in ("false", "False", "f", "0"):
            return False
        raise AippConfigError(f"{where} takes true or false, not {token.text!r}")
    if spec.kind in ("mode", "format"):
        enum_type: type[enum.IntEnum] = AippMode if spec.kind == "mode" else AippInputFormat
        names = {m.config_name: m for m in AippMode} if spec.kind == "mode" else None
        try:
            if token.kind == "num":
                return enum_type(int(token.text, 0))
            return names[token.text] if names else AippInputFormat[token.text]
        except (KeyError, ValueError):
            allowed = "static, dynamic" if names else ", ".join(m.name for m in _LAYOUTS)
            raise AippConfigError(f"{where} cannot be {token.text!r}; allowed: {allowed}") from None
    if token.kind != "num":
        raise AippConfigError(f"{where} takes a number, not {token.text!r}")
    number: float
    if spec.kind == "float":
        number = (
            float(int(token.text, 16))
            if token.text.lower().startswith(("0x", "-0x"))
            else (float(token.text.rstrip("fF")))
        )
    else:
        try:
            number = int(token.text, 0)
        except ValueError:
            raise AippConfigError(f"{where} takes an integer, not {token.text!r}") from None
        if spec.kind == "uint" and number < 0:
            raise AippConfigError(f"{where} must be >= 0, not {number}")
    if (spec.low is not None and number < spec.low) or (
        spec.high is not None and number > spec.high
    ):
        raise AippConfigError(
            f"{where} = {token.text} is outside [{_num(spec.low)}, {_num(spec.high)}] {spec.source}"
        )
    return number


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def _build_op(fields: dict[str, list[Any]], index: int) -> AippOp:
    where = f"aipp_op #{index}"

    def one(name: str, default: Any) -> Any:
        values = fields.get(name)
        if not values:
            return default
        if len(values) > 1:  # ValidateParams: a repeated field given more than once
            raise AippConfigError(f"{where}: the parameter {name} cannot be configured repeatedly")
        return values[0]

    mode = one("aipp_mode", AippMode.UNDEFINED)
    if mode is AippMode.UNDEFINED:
        raise AippConfigError(f"{where}: aipp_mode must be configured as static or dynamic")
    if "related_input_name" in fields:
        raise AippConfigError(
            f"{where}: related_input_name applies to Caffe models only; use related_input_rank"
        )
    common = {
        "aipp_mode": mode,
        "related_input_rank": one("related_input_rank", 0),
        "input_edge_idx": tuple(fields.get("input_edge_idx", ())),
        "raw_rgbir_to_f16_n": one("raw_rgbir_to_f16_n", 0),
    }
    if mode is AippMode.DYNAMIC:
        if one("support_rotation", False):
            raise AippConfigError(f"{where}: support_rotation is reserved; ATC does not support it")
        size = one("max_src_image_size", 0)
        if size <= 0:
            raise AippConfigError(
                f"{where}: for dynamic AIPP, max_src_image_size must be set greater than 0"
            )
        return AippOp(max_src_image_size=size, **common)
    return _build_static(one, where, common)


def _build_static(one: Any, where: str, common: dict[str, Any]) -> AippOp:
    fmt: AippInputFormat = one("input_format", AippInputFormat.UNDEFINED)
    if fmt is AippInputFormat.UNDEFINED:
        raise AippConfigError(f"{where}: input_format must be set for static AIPP")
    if fmt not in _LAYOUTS:
        raise AippConfigError(
            f"{where}: input_format {fmt.name} is not supported here; supported: "
            + ", ".join(m.name for m in _LAYOUTS)
        )
    for name in ("resize", "single_line_mode"):
        if one(name, False):
            raise AippConfigError(f"{where}: {name} is a reserved field ATC does not support")
    layout = fmt.layout
    src_w, src_h = one("src_image_size_w", 0), one("src_image_size_h", 0)
    if src_w == 1:
        raise AippConfigError(f"{where}: src_image_size_w must be 0 or in [2, 4096], not 1")
    if (layout.even_w and src_w % 2) or (layout.even_h and src_h % 2):
        raise AippConfigError(
            f"{where}: src_image_size_w/h ({src_w}x{src_h}) must be even for {fmt.name}"
        )
    crop, padding, csc = one("crop", False), one("padding", False), one("csc_switch", False)
    if csc and fmt is AippInputFormat.YUV400_U8:
        raise AippConfigError(f"{where}: YUV400_U8 does not support csc_switch")
    pos_w, pos_h = (one("load_start_pos_w", 0), one("load_start_pos_h", 0)) if crop else (0, 0)
    size_w, size_h = (one("crop_size_w", 0), one("crop_size_h", 0)) if crop else (0, 0)
    if (layout.even_w and pos_w % 2) or (layout.even_h and pos_h % 2):
        raise AippConfigError(
            f"{where}: load_start_pos_w/h ({pos_w}, {pos_h}) must be even for {fmt.name}"
        )
    for axis, pos, size, src in (("w", pos_w, size_w, src_w), ("h", pos_h, size_h, src_h)):
        if src and pos >= src:
            raise AippConfigError(
                f"{where}: load_start_pos_{axis} {pos} must be < src_image_size_{axis} {src}"
            )
        if src and pos + size > src:
            raise AippConfigError(
                f"{where}: load_start_pos_{axis} + crop_size_{axis} = {pos + size} exceeds "
                f"src_image_size_{axis} {src}"
            )
    if (crop or padding) and not (src_w and src_h):
        raise AippConfigError(
            f"{where}: src_image_size_w and src_image_size_h may be 0 only when crop and padding "
            "are both off"
        )
    if crop and padding and not (size_w and size_h):
        raise AippConfigError(
            f"{where}: crop_size_w and crop_size_h may be 0 only when padding is off"
        )
    default_matrix = (
        _yuv2rgb_default() if fmt is AippInputFormat.YUV420SP_U8 else _rgb2yuv_default()
    )
    fill = 16, 128, 128
    return AippOp(
        input_format=fmt,
        csc_switch=csc,
        rbuv_swap_switch=one("rbuv_swap_switch", False),
        ax_swap_switch=one("ax_swap_switch", False),
        src_image_size_w=src_w,
        src_image_size_h=src_h,
        crop=crop,
        load_start_pos_w=pos_w,
        load_start_pos_h=pos_h,
        crop_size_w=size_w,
        crop_size_h=size_h,
        padding=padding,
        left_padding_size=one("left_padding_size", 0) if padding else 0,
        right_padding_size=one("right_padding_size", 0) if padding else 0,
        top_padding_size=one("top_padding_size", 0) if padding else 0,
        bottom_padding_size=one("bottom_padding_size", 0) if padding else 0,
        padding_value=float(one("padding_value", 0.0)),
        mean_chn=tuple(one(f"mean_chn_{i}", 0) for i in range(4)),
        min_chn=tuple(float(one(f"min_chn_{i}", 0.0)) for i in range(4)),
        var_reci_chn=tuple(float(one(f"var_reci_chn_{i}", 1.0)) for i in range(4)),
        matrix=tuple(
            tuple(one(f"matrix_r{r}c{c}", default_matrix[r][c] if csc else 0) for c in range(3))
            for r in range(3)
        ),
        output_bias=tuple(one(f"output_bias_{i}", fill[i] if csc else 0) for i in range(3)),
        input_bias=tuple(one(f"input_bias_{i}", fill[i] if csc else 0) for i in range(3)),
        **common,
    )


def check_with_dynamic_image_size(ops: Sequence[AippOp]) -> None:
    """ATC's refusal for `--dynamic_image_size` with static AIPP [UTIL CheckAndCopyAippOpParams]:
    crop and padding must be off and src_image_size_w/h 0."""
    for index, op in enumerate(ops):
        if op.crop or op.padding:
            raise AippConfigError(
                f"aipp_op #{index}: when --dynamic_image_size is set, crop and padding cannot be "
                "set to 'true'"
            )
        if op.is_static and (op.src_image_size_w or op.src_image_size_h):
            raise AippConfigError(
                f"aipp_op #{index}: when --dynamic_image_size is set, src_image_size_w and "
                "src_image_size_h must be set to '0'"
            )


# ---------------------------------------------------------------------------------------------
# Static AIPP bound to the model input it feeds

# The C0 of the NC1HWC0 layout AIPP writes, by output dtype ([TEMPLATE]: FP16 gives C0 = 16).
_C0_BY_DTYPE = {np.dtype(np.float16): 16, np.dtype(np.uint8): 32}
# Where padding_value must lie, by the AIPP output dtype ([TEMPLATE] padding_value).
_PADDING_RANGES = {np.dtype(np.float16): (-65504.0, 65504.0), np.dtype(np.uint8): (0.0, 255.0)}
# The widest padded output of Atlas inference series (310P) and training series (910) [TEMPLATE].
PADDED_WIDTH_LIMIT = 1080


@dataclasses.dataclass(frozen=True)
class StaticAipp:
    """A static `AippOp` bound to one model input: what ACL reports for it and the pipeline.

    `model_dims`/`model_format`/`model_dtype` describe the original graph's input (what the
    pipeline's output feeds); `src_w`/`src_h` and the crop box are resolved (a 0 in the config
    takes the model's W and H, [TEMPLATE]).
    """

    op: AippOp
    model_dims: tuple[int, int, int, int]
    model_format: Format
    model_dtype: DataType
    src_w: int
    src_h: int
    crop_w: int
    crop_h: int

    @property
    def batch(self) -> int:
        return self.model_dims[0]

    @property
    def model_hwc(self) -> tuple[int, int, int]:
        n, a, b, c = self.model_dims
        return (b, c, a) if self.model_format is Format.NCHW else (a, b, c)

    @property
    def aipp_dtype(self) -> np.dtype[Any]:
        """What AIPP writes: fp16 for a float model input (the DTC output), else uint8 [DTC]."""
        return np.dtype(np.uint8) if self.model_dtype.numpy == np.uint8 else np.dtype(np.float16)

    # -- what ACL reports for the AIPP input --------------------------------------------------
    @property
    def input_dims_v1(self) -> list[int]:
        """`get_input_dims`: `[n, h, w, c]` of the source image (aclmdlGetInputDims.md table 1)."""
        return [self.batch, self.src_h, self.src_w, self.op.input_format.layout.v1_channels]

    @property
    def input_dims_v2(self) -> list[int]:
        """`get_input_dims_v2`: product = the byte size ([V2] table 1, e.g. YUV420SP
        `[n, h*1.5, w, 1]`)."""
        layout = self.op.input_format.layout
        return [
            self.batch,
            self.src_h * layout.h_num // layout.h_den,
            self.src_w,
            layout.v2_channels,
        ]

    @property
    def input_size(self) -> int:
        """`get_input_size_by_index`: bytes of `n` source images (UINT8, [V2])."""
        return self.batch * self.image_bytes

    @property
    def image_bytes(self) -> int:
        return self.op.input_format.layout.image_bytes(self.src_h, self.src_w)

    input_dtype = DTYPES_BY_NUMPY[np.dtype(np.uint8)]  # the input becomes UINT8 [TEMPLATE]
    input_format = Format.NHWC  # "forced to NHWC" whatever --input_format said [TEMPLATE]

    # -- the pipeline ------------------------------------------------------------------------
    def apply(self, raw: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
        """The model's original input from the raw bytes a client sends for this AIPP input.

        Steps in the documented order (aclmdlGetFirstAippInfo.md, aclmdlSetInputAIPP.md:
        crop -> CSC -> mean/normalise -> padding; [TEMPLATE]: the channel swap comes first):
        decode the source layout, crop, ax/rbuv swap, CSC, take the model's C channels, DTC
        (float output only), pad, then the model's layout and dtype.
        """
        data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw
        if data.dtype != np.uint8:
            raise ValueError(f"AIPP input must be uint8 bytes, not {data.dtype}")
        if data.size != self.input_size:
            raise ValueError(
                f"AIPP input holds {data.size} bytes; {self.op.input_format.name} "
                f"{self.src_w}x{self.src_h} x {self.batch} needs {self.input_size}"
            )
        images = data.reshape(self.batch, self.image_bytes)
        out = np.stack([self._one_image(image) for image in images])
        if self.model_format is Format.NCHW:
            out = out.transpose(0, 3, 1, 2)
        return np.ascontiguousarray(out.astype(self.model_dtype.numpy))

    def _one_image(self, image: np.ndarray) -> np.ndarray:
        op = self.op
        pixels = decode_source(op.input_format, image, self.src_h, self.src_w)
        y0, x0 = op.load_start_pos_h, op.load_start_pos_w
        pixels = pixels[y0 : y0 + self.crop_h, x0 : x0 + self.crop_w]
        pixels = swap_channels(op.input_format, pixels, op.rbuv_swap_switch, op.ax_swap_switch)
        if op.csc_switch:
            pixels = color_space_convert(op, pixels)
        channels = self.model_hwc[2]
        pixels = pixels[..., :channels]
        values = (
            data_type_convert(op, pixels)
            if self.aipp_dtype == np.float16
            else pixels.astype(np.uint8)
        )
        return pad(op, values)

    # -- what get_first_aipp_info reports ---------------------------------------------------
    def aipp_out_dims(self) -> list[int]:
        """The NC1HWC0 dims AIPP writes ([TEMPLATE]: C1 = 1, C0 = 16 for FP16)."""
        h, w, _ = self.model_hwc
        return [self.batch, 1, h, w, _C0_BY_DTYPE[self.aipp_dtype]]


def bind_static(
    op: AippOp,
    model_dims: Sequence[int],
    model_format: Format,
    model_dtype: DataType,
    padded_width_limit: int = PADDED_WIDTH_LIMIT,
) -> StaticAipp:
    """Bind a static op to the model input it feeds, with ATC's checks against that input.

    `model_dims` is the original input's 4-D shape in `model_format` (NCHW or NHWC; ONNX and
    Caffe are NCHW [TEMPLATE]). The output H and W after crop and padding must equal the model's
    ([CROP], [TEMPLATE] padding constraint); the padded W must not exceed `padded_width_limit`
    (1080 on Atlas inference/training series, 4096 on the A2/A3 series [TEMPLATE]).
    """
    if not op.is_static:
        raise AippConfigError("bind_static takes a static aipp_op; this one is dynamic")
    if model_format not in (Format.NCHW, Format.NHWC):
        raise AippConfigError(f"AIPP feeds an NCHW or NHWC input, not {model_format.name}")
    dims = tuple(int(d) for d in model_dims)
    if len(dims) != 4 or min(dims) <= 0:
        raise AippConfigError(f"AIPP feeds a static 4-D image input, not dims {list(dims)}")
    n, a, b, c = dims
    h, w, channels = (b, c, a) if model_format is Format.NCHW else (a, b, c)
    if model_dtype.numpy not in (np.float16, np.float32, np.uint8):
        raise AippConfigError(
            f"AIPP output into a {model_dtype.acl_name} input is not supported (float16, float32 "
            "or uint8)"
        )
    fmt = op.input_format
    available = 1 if fmt is AippInputFormat.YUV400_U8 else (3 if op.csc_switch else None)
    available = available or fmt.layout.v1_channels
    if channels > available:
        raise AippConfigError(
            f"the model input has C={channels} but {fmt.name}"
            f"{' after CSC' if op.csc_switch else ''} gives {available} channels"
        )
    pad_w = op.left_padding_size + op.right_padding_size
    pad_h = op.top_padding_size + op.bottom_padding_size
    crop_w = op.crop_size_w or (w if op.crop else 0)
    crop_h = op.crop_size_h or (h if op.crop else 0)
    src_w = op.src_image_size_w or w
    src_h = op.src_image_size_h or h
    crop_w, crop_h = (crop_w, crop_h) if op.crop else (src_w, src_h)
    layout = fmt.layout
    if (layout.even_w and src_w % 2) or (layout.even_h and src_h % 2):
        raise AippConfigError(f"the source image {src_w}x{src_h} must be even for {fmt.name}")
    for axis, pos, size, src in (
        ("w", op.load_start_pos_w, crop_w, src_w),
        ("h", op.load_start_pos_h, crop_h, src_h),
    ):
        if pos + size > src:
            raise AippConfigError(
                f"load_start_pos_{axis} + crop size {axis} = {pos + size} exceeds the source "
                f"image's {axis} {src}"
            )
    if (crop_w + pad_w, crop_h + pad_h) != (w, h):
        raise AippConfigError(
            f"AIPP output is {crop_w + pad_w}x{crop_h + pad_h} (W x H after crop and padding) "
            f"but the model input takes {w}x{h}; they must be equal"
        )
    if op.padding and crop_w + pad_w > padded_width_limit:
        raise AippConfigError(
            f"the padded width {crop_w + pad_w} exceeds {padded_width_limit} for this SoC"
        )
    bound = StaticAipp(op, (n, a, b, c), model_format, model_dtype, src_w, src_h, crop_w, crop_h)
    low, high = _PADDING_RANGES[bound.aipp_dtype]
    if op.padding and not low <= op.padding_value <= high:
        raise AippConfigError(
            f"padding_value {op.padding_value:g} is outside [{low:g}, {high:g}] of the AIPP "
            f"output ({bound.aipp_dtype})"
        )
    return bound


# ---------------------------------------------------------------------------------------------
# The pipeline steps, each on one image (H x W x channels, int32 until DTC)


def decode_source(fmt: AippInputFormat, image: np.ndarray, h: int, w: int) -> np.ndarray:
    """One source image's bytes as `(h, w, k)` int32 channels in memory order.

    RGB888/XRGB8888/ARGB8888/AYUV444/YUV400: packed NHWC. YUV420SP_U8: the Y plane (`h*w`) then
    interleaved U,V at half width and height (NV12; NV21 arrives the same way and rbuv_swap
    makes it U,V [TEMPLATE]); YUV422SP_U8: Y plane then `h` rows of interleaved U,V at half width;
    YUYV_U8: packed Y0 U Y1 V. Chroma is repeated over the pixels that share it.
    """
    layout = fmt.layout
    if not layout.yuv or fmt in (AippInputFormat.YUV400_U8, AippInputFormat.AYUV444_U8):
        return image.reshape(h, w, layout.v1_channels).astype(np.int32)
    if fmt is AippInputFormat.YUYV_U8:
        quads = image.reshape(h, w // 2, 4).astype(np.int32)
        luma = quads[..., [0, 2]].reshape(h, w)
        chroma = np.repeat(quads[..., [1, 3]], 2, axis=1)
        return np.dstack([luma, chroma])
    luma = image[: h * w].reshape(h, w).astype(np.int32)
    rows = h // 2 if fmt is AippInputFormat.YUV420SP_U8 else h
    chroma = image[h * w :].reshape(rows, w // 2, 2).astype(np.int32)
    chroma = np.repeat(np.repeat(chroma, h // rows, axis=0), 2, axis=1)
    return np.dstack([luma, chroma])


def swap_channels(fmt: AippInputFormat, pixels: np.ndarray, rbuv: bool, ax: bool) -> np.ndarray:
    """`ax_swap_switch` then `rbuv_swap_switch` [TEMPLATE].

    ax (4-channel formats): the first byte (X/A) moves last, so XRGB arrives as R,G,B,X (the
    table of [TEMPLATE]: XRGB package with ax_swap true, RGBX with false). rbuv: R and B swap
    (channels 0 and 2), or U and V for YUV formats (1 and 2).
    """
    if ax and pixels.shape[-1] == 4:
        pixels = pixels[..., [1, 2, 3, 0]]
    if rbuv and pixels.shape[-1] >= 3:
        order = list(range(pixels.shape[-1]))
        first = 1 if fmt.layout.yuv else 0
        order[first], order[2] = 2, first
        pixels = pixels[..., order]
    return pixels


def color_space_convert(op: AippOp, pixels: np.ndarray) -> np.ndarray:
    """CSC in ATC's fixed point ([TEMPLATE], [CSC]); a 4th channel is ignored.

    YUV in: `out = M @ (in - input_bias) >> 8`; RGB in: `out = (M @ in >> 8) + output_bias`.
    Output channel i is matrix row i (YUV420SP->RGB's row 0 `298, 0, 409` gives R). `>> 8` is
    an arithmetic shift; results saturate to [0, 255] (both UNCONFIRMED on hardware).
    """
    matrix = np.array(op.matrix, dtype=np.int64)
    values = pixels[..., :3].astype(np.int64)
    if op.input_format.layout.yuv:
        out = (values - np.array(op.input_bias)) @ matrix.T >> 8
    else:
        out = (values @ matrix.T >> 8) + np.array(op.output_bias)
    return np.clip(out, 0, 255).astype(np.int32)


def data_type_convert(op: AippOp, pixels: np.ndarray) -> np.ndarray:
    """DTC, uint8 -> fp16: `out = (in - mean_chn_i - min_chn_i) * var_reci_chn_i` [DTC].

    min and var_reci are held as fp16 (ACL's dynamic block stores their fp16 bits [DYN_H]); the
    difference and the product are rounded to fp16 (rounding points UNCONFIRMED on hardware).
    """
    k = pixels.shape[-1]
    mean = np.array(op.mean_chn[:k], dtype=np.float32)
    low = np.array(op.min_chn[:k], dtype=np.float16).astype(np.float32)
    scale = np.array(op.var_reci_chn[:k], dtype=np.float16).astype(np.float32)
    shifted = (pixels.astype(np.float32) - mean - low).astype(np.float16)
    return (shifted.astype(np.float32) * scale).astype(np.float16)


def pad(op: AippOp, values: np.ndarray) -> np.ndarray:
    """Padding, the last step, with `padding_value` in the output dtype [TEMPLATE]."""
    if not op.padding:
        return values
    widths = (
        (op.top_padding_size, op.bottom_padding_size),
        (op.left_padding_size, op.right_padding_size),
        (0, 0),
    )
    return np.pad(values, widths, constant_values=np.array(op.padding_value, dtype=values.dtype))


# ---------------------------------------------------------------------------------------------
# acl.mdl.get_first_aipp_info


def _io_dims(name: str, dims: Sequence[int]) -> dict[str, Any]:
    return {"name": name, "dimCount": len(dims), "dims": [int(d) for d in dims]}


def first_aipp_info(bounds: Sequence[StaticAipp], name: str) -> dict[str, Any]:
    """The dict `acl.mdl.get_first_aipp_info(model_id, index)` returns for a static input.

    `bounds` holds the op bound to the input in each gear (one for a model without gears).
    Keys and value types as [PYACL] `GetPydictFromAIPPInfo` builds them from `aclAippInfo`
    (acl `SetAippInfo` fills it from the op's attributes): the config's values after ATC's
    defaults, `srcFormat`/`srcDatatype`/`srcDimNum` of the original input, `shapeCount` and one
    `outDims` entry per gear (`srcDims`/`srcSize` the original input in that gear,
    `aippOutdims`/`aippOutSize` NC1HWC0; GE records one per gear's AIPP node,
    insert_aipp_op_util.cc RecordAIPPInfoToData). [PYACL] leaves out matrixR0C2, matrixR2C0
    and matrixR2C1; so does this dict.
    """
    bound = bounds[0]
    op = bound.op
    info: dict[str, Any] = {
        "cscSwitch": int(op.csc_switch),
        "matrixR0C0": op.matrix[0][0],
        "matrixR0C1": op.matrix[0][1],
        "matrixR1C0": op.matrix[1][0],
        "matrixR1C1": op.matrix[1][1],
        "matrixR1C2": op.matrix[1][2],
        "matrixR2C2": op.matrix[2][2],
        **{f"outputBias{i}": op.output_bias[i] for i in range(3)},
        **{f"inputBias{i}": op.input_bias[i] for i in range(3)},
        "rbuvSwapSwitch": int(op.rbuv_swap_switch),
        "axSwapSwitch": int(op.ax_swap_switch),
        "singleLineMode": 0,
        "srcImageSizeW": op.src_image_size_w,
        "srcImageSizeH": op.src_image_size_h,
        "srcFormat": int(bound.model_format),
        "srcDatatype": bound.model_dtype.acl,
        "srcDimNum": len(bound.model_dims),
        "shapeCount": len(bounds),
        "inputFormat": int(op.input_format),
        "aippExtend": 0,
        "cropSwitch": int(op.crop),
        "loadStartPosW": op.load_start_pos_w,
        "loadStartPosH": op.load_start_pos_h,
        "cropSizeW": op.crop_size_w,
        "cropSizeH": op.crop_size_h,
        "resizeSwitch": 0,
        "resizeOutputW": 0,
        "resizeOutputH": 0,
        "paddingSwitch": int(op.padding),
        "leftPaddingSize": op.left_padding_size,
        "rightPaddingSize": op.right_padding_size,
        "topPaddingSize": op.top_padding_size,
        "bottomPaddingSize": op.bottom_padding_size,
        **{f"meanChn{i}": op.mean_chn[i] for i in range(4)},
        **{f"minChn{i}": float(np.float32(op.min_chn[i])) for i in range(4)},
        **{f"varReciChn{i}": float(np.float32(op.var_reci_chn[i])) for i in range(4)},
    }
    info["outDims"] = [_gear_dims(one, name) for one in bounds]
    return info


def _gear_dims(bound: StaticAipp, name: str) -> dict[str, Any]:
    """One `outDims` entry of `aclAippInfo`: the original input and AIPP's output in a gear."""
    src_size = int(np.prod(bound.model_dims)) * bound.model_dtype.numpy.itemsize  # type: ignore[union-attr]
    out_dims = bound.aipp_out_dims()
    return {
        "srcDims": _io_dims(name, bound.model_dims),
        "srcSize": src_size,
        "aippOutdims": _io_dims(name, out_dims),
        "aippOutSize": int(np.prod(out_dims)) * bound.aipp_dtype.itemsize,
    }


# ---------------------------------------------------------------------------------------------
# Dynamic AIPP: the parameter input's binary block [DYN_H]

# sizeof(kAippDynamicPara) - sizeof(kAippDynamicBatchPara), and sizeof(kAippDynamicBatchPara).
DYNAMIC_PARAMS_HEAD_SIZE = 64
DYNAMIC_BATCH_PARAMS_SIZE = 96
# tagAippDynamicPara's head: inputFormat (CCE code), cscSwitch, rbuvSwapSwitch, axSwapSwitch,
# batchNum, 3 reserved; srcImageSizeW/H; 9 matrix int16, 3 reserved int16; output bias R0..R2,
# input bias R0..R2 (uint8), 2 + 16 reserved.
_HEAD = struct.Struct("<B4b3x2i9h6x6B18x")
# tagAippDynamicBatchPara: crop/scf/padding/rotate switches, 4 reserved; crop start W/H, size
# W/H; scf input W/H, output W/H; padding top/bottom/left/right; mean int16 x4; min and
# var_reci as fp16 bits x4 each; 16 reserved.
_BATCH = struct.Struct("<4b4x12i4h8H16x")


def aipp_data_size(batch: int) -> int:
    """`acl.mdl.get_aipp_data_size(batch)`: `64 + 96 * batch` bytes (acl_aipp_om2.cpp
    `aclmdlGetAippDataSizeImplOm2`; ATC sizes the parameter input the same, [AIPP_OP]
    `CalcMaxSize`). A batch below 1 is ACL's 100000."""
    if batch < 1:
        raise ValueError(f"batch must be positive ({AclCode.INVALID_PARAM.acl_name})")
    return DYNAMIC_PARAMS_HEAD_SIZE + DYNAMIC_BATCH_PARAMS_SIZE * batch


def _fp16_bits(value: float) -> int:
    return int(np.array(value, dtype=np.float16).view(np.uint16))


def _fp16_value(bits: int) -> float:
    return float(np.array(bits, dtype=np.uint16).view(np.float16))


@dataclasses.dataclass
class DynamicAippBatch:
    """One `tagAippDynamicBatchPara` [DYN_H]; `create_aipp` sets var_reci to 1.0 [ACL]."""

    crop_switch: int = 0
    scf_switch: int = 0
    padding_switch: int = 0
    rotate_switch: int = 0
    crop_start_w: int = 0
    crop_start_h: int = 0
    crop_size_w: int = 0
    crop_size_h: int = 0
    scf_input_w: int = 0
    scf_input_h: int = 0
    scf_output_w: int = 0
    scf_output_h: int = 0
    padding_top: int = 0
    padding_bottom: int = 0
    padding_left: int = 0
    padding_right: int = 0
    mean: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0, 0])
    min: list[float] = dataclasses.field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    var_reci: list[float] = dataclasses.field(default_factory=lambda: [1.0, 1.0, 1.0, 1.0])


# The 16 scalar fields of DynamicAippBatch, in the struct's order.
_BATCH_SCALARS = tuple(f.name for f in dataclasses.fields(DynamicAippBatch))[:16]


@dataclasses.dataclass
class DynamicAippParams:
    """An `aclmdlAIPP` as ACL writes it into the dynamic-AIPP input (`tagAippDynamicPara` with
    one `tagAippDynamicBatchPara` per batch [DYN_H]); `pack`/`unpack` are the bytes."""

    input_format: AippInputFormat = AippInputFormat.UNDEFINED
    csc_switch: int = 0
    rbuv_swap_switch: int = 0
    ax_swap_switch: int = 0
    src_image_size_w: int = 0
    src_image_size_h: int = 0
    matrix: list[int] = dataclasses.field(default_factory=lambda: [0] * 9)
    output_bias: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])
    input_bias: list[int] = dataclasses.field(default_factory=lambda: [0, 0, 0])
    batches: list[DynamicAippBatch] = dataclasses.field(default_factory=list)

    @classmethod
    def create(cls, batch: int) -> DynamicAippParams:
        """What `aclmdlCreateAIPP(batch)` holds [ACL]: zeros, var_reci 1.0 per batch."""
        aipp_data_size(batch)
        return cls(batches=[DynamicAippBatch() for _ in range(batch)])

    def pack(self) -> bytes:
        code = 0 if self.input_format is AippInputFormat.UNDEFINED else self.input_format.cce_code
        head = _HEAD.pack(
            code,
            self.csc_switch,
            self.rbuv_swap_switch,
            self.ax_swap_switch,
            len(self.batches),
            self.src_image_size_w,
            self.src_image_size_h,
            *self.matrix,
            *self.output_bias,
            *self.input_bias,
        )
        return head + b"".join(
            _BATCH.pack(
                b.crop_switch,
                b.scf_switch,
                b.padding_switch,
                b.rotate_switch,
                b.crop_start_w,
                b.crop_start_h,
                b.crop_size_w,
                b.crop_size_h,
                b.scf_input_w,
                b.scf_input_h,
                b.scf_output_w,
                b.scf_output_h,
                b.padding_top,
                b.padding_bottom,
                b.padding_left,
                b.padding_right,
                *b.mean,
                *(_fp16_bits(v) for v in b.min),
                *(_fp16_bits(v) for v in b.var_reci),
            )
            for b in self.batches
        )

    def static_op(self, batch_index: int) -> AippOp:
        """Batch `batch_index`'s parameters as the static op that runs the same steps (the
        head's format, switches and CSC with that batch's crop, padding and DTC)."""
        b = self.batches[batch_index]
        return AippOp(
            aipp_mode=AippMode.STATIC,
            input_format=self.input_format,
            csc_switch=bool(self.csc_switch),
            rbuv_swap_switch=bool(self.rbuv_swap_switch),
            ax_swap_switch=bool(self.ax_swap_switch),
            src_image_size_w=self.src_image_size_w,
            src_image_size_h=self.src_image_size_h,
            crop=bool(b.crop_switch),
            load_start_pos_w=b.crop_start_w if b.crop_switch else 0,
            load_start_pos_h=b.crop_start_h if b.crop_switch else 0,
            crop_size_w=b.crop_size_w if b.crop_switch else 0,
            crop_size_h=b.crop_size_h if b.crop_switch else 0,
            padding=bool(b.padding_switch),
            left_padding_size=b.padding_left if b.padding_switch else 0,
            right_padding_size=b.padding_right if b.padding_switch else 0,
            top_padding_size=b.padding_top if b.padding_switch else 0,
            bottom_padding_size=b.padding_bottom if b.padding_switch else 0,
            mean_chn=tuple(b.mean),
            min_chn=tuple(b.min),
            var_reci_chn=tuple(b.var_reci),
            matrix=tuple(tuple(self.matrix[r * 3 : r * 3 + 3]) for r in range(3)),
            output_bias=tuple(self.output_bias),
            input_bias=tuple(self.input_bias),
        )

    @classmethod
    def unpack(cls, data: bytes | bytearray | memoryview) -> DynamicAippParams:
        """Decode the block; `batchNum` says how many batch records follow the 64-byte head."""
        data = bytes(data)
        if len(data) < DYNAMIC_PARAMS_HEAD_SIZE + DYNAMIC_BATCH_PARAMS_SIZE:
            raise ValueError(f"a dynamic AIPP block needs at least 160 bytes, not {len(data)}")
        head = _HEAD.unpack_from(data)
        count = head[4]
        if count < 1 or len(data) < aipp_data_size(count):
            raise ValueError(f"the block's batchNum {count} does not fit its {len(data)} bytes")
        try:
            fmt = _FORMATS_BY_CCE[head[0]] if head[0] else AippInputFormat.UNDEFINED
        except KeyError:
            raise ValueError(f"unknown CCE input format code {head[0]}") from None
        batches = []
        for i in range(count):
            v = _BATCH.unpack_from(data, DYNAMIC_PARAMS_HEAD_SIZE + i * DYNAMIC_BATCH_PARAMS_SIZE)
            batches.append(
                DynamicAippBatch(
                    **dict(zip(_BATCH_SCALARS, v[:16])),
                    mean=list(v[16:20]),
                    min=[_fp16_value(x) for x in v[20:24]],
                    var_reci=[_fp16_value(x) for x in v[24:28]],
                )
            )
        return cls(
            fmt, head[1], head[2], head[3], head[5], head[6], list(head[7:16]),
            list(head[16:19]), list(head[19:22]), batches,
        )  # fmt: skip
