"""The emulator's AIPP: `compile --insert_op_conf` as ATC, and the pyACL AIPP calls.

Sources (hicann/ge unless named): aclmdlGetInputDims.md, aclmdlGetInputDimsV2.md table 1 (v1,
v2, size of an AIPP input); aclmdlGetAippType.md; acl_aipp.cpp (aclmdlGetFirstAippInfoImpl:
145015 without AIPP; aclmdlSetInputAIPPImpl's checks: 100000); aipp_op.cc AddNodeToGraph /
CalcMaxSize (the dynamic parameter input, UINT8 ND [64 + 96 n]); aipp_param_check.cpp
GetSrcImageSize (max_src_image_size bounds a whole batch); davinci_model.cc
CheckUserAndModelSize (no small-buffer check for dynamic AIPP); hicann/runtime
python/pyACL/mdl/mdl_wrap.cpp (signatures and return tuples).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_models
import pytest
from emulator_helpers import Model
from onnx_models import build_conv, onnx_path_of, reference

from ge_python_backend import cli
from ge_python_backend.aipp import (
    ACL_INVALID_NODE_INDEX,
    AippInputFormat,
    AippType,
    DynamicAippParams,
    bind_static,
    parse_aipp_config,
)
from ge_python_backend.ascend import DTYPES_BY_NUMPY, AclCode, Format
from ge_python_backend.emulator import acl
from ge_python_backend.emulator.omfile import OmCompileError, compile_onnx

pytestmark = pytest.mark.usefixtures("clean_acl")

FLOAT = DTYPES_BY_NUMPY[np.dtype(np.float32)]
UINT8 = DTYPES_BY_NUMPY[np.dtype(np.uint8)].acl


def expected(om: Path, config: str, raw: np.ndarray) -> np.ndarray:
    bound = bind_static(parse_aipp_config(config)[0], (2, 3, 8, 8), Format.NCHW, FLOAT)
    return reference(onnx_path_of(om), [bound.apply(raw)])["features"]


@pytest.mark.parametrize(
    ("fixture", "config", "v1", "v2"),
    [
        ("om_aipp_yuv", onnx_models.AIPP_YUV420SP, [2, 10, 12, 3], [2, 15, 12, 1]),
        ("om_aipp_rgb", onnx_models.AIPP_RGB888, [2, 10, 10, 3], [2, 10, 10, 3]),
    ],
)
def test_a_static_aipp_input_reports_and_runs_as_acl(
    ctx: int, request: pytest.FixtureRequest, fixture: str, config: str, v1: list, v2: list
) -> None:
    om = request.getfixturevalue(fixture)
    model = Model(om)
    dims, ret = acl.mdl.get_input_dims(model.desc, 0)
    assert (dims["dims"], ret) == (v1, 0)
    dims, ret = acl.mdl.get_input_dims_v2(model.desc, 0)
    assert (dims["dims"], ret) == (v2, 0)
    assert acl.mdl.get_input_size_by_index(model.desc, 0) == int(np.prod(v2))
    assert acl.mdl.get_input_data_type(model.desc, 0) == UINT8
    assert acl.mdl.get_input_format(model.desc, 0) == Format.NHWC
    assert acl.mdl.get_aipp_type(model.model_id, 0) == (AippType.STATIC, ACL_INVALID_NODE_INDEX, 0)
    info, ret = acl.mdl.get_first_aipp_info(model.model_id, 0)
    assert ret == 0
    assert info["inputFormat"] == parse_aipp_config(config)[0].input_format
    assert info["outDims"][0]["srcDims"]["dims"] == [2, 3, 8, 8]

    raw = np.random.default_rng(1).integers(0, 256, v2, dtype=np.uint8)
    model.feed([raw])
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    np.testing.assert_allclose(model.fetch()[0], expected(om, config, raw), rtol=1e-6)


def test_an_input_without_aipp(ctx: int, om_static: Path) -> None:
    model = Model(om_static)
    assert acl.mdl.get_aipp_type(model.model_id, 0) == (AippType.NONE, ACL_INVALID_NODE_INDEX, 0)
    assert acl.mdl.get_first_aipp_info(model.model_id, 0) == (None, AclCode.GE_AIPP_NOT_EXIST)
    v1, _ = acl.mdl.get_input_dims(model.desc, 0)
    assert acl.mdl.get_input_dims_v2(model.desc, 0) == (v1, 0)
    assert acl.mdl.get_aipp_type(model.model_id, 5)[2] == AclCode.INVALID_PARAM


def test_dynamic_aipp_adds_the_parameter_input(ctx: int, om_aipp_dynamic: Path) -> None:
    model = Model(om_aipp_dynamic)
    assert acl.mdl.get_num_inputs(model.desc) == 2
    assert acl.mdl.get_input_dims(model.desc, 0)[0]["dims"] == [2, -1, -1, -1]
    assert acl.mdl.get_input_size_by_index(model.desc, 0) == 600  # max_src_image_size
    assert acl.mdl.get_input_name_by_index(model.desc, 1) == "ascend_dynamic_aipp_data"
    assert acl.mdl.get_input_dims(model.desc, 1)[0]["dims"] == [64 + 96 * 2]
    assert acl.mdl.get_input_data_type(model.desc, 1) == UINT8
    assert acl.mdl.get_input_format(model.desc, 1) == Format.ND
    assert acl.mdl.get_aipp_type(model.model_id, 0) == (AippType.DYNAMIC, 1, 0)
    assert acl.mdl.get_aipp_type(model.model_id, 1) == (
        AippType.DYNAMIC_PARAMS,
        ACL_INVALID_NODE_INDEX,
        0,
    )
    assert acl.mdl.get_aipp_data_size(2) == (256, 0)
    assert acl.mdl.get_aipp_data_size(0) == (0, AclCode.INVALID_PARAM)


def _rgb_aipp(batch: int, crop_w: int = 8) -> int:
    """What a client sets for the RGB888 config: 10x10 source, crop 8x8 at (1, 2), DTC."""
    aipp = acl.mdl.create_aipp(batch)
    assert aipp
    assert acl.mdl.set_aipp_input_format(aipp, AippInputFormat.RGB888_U8) == 0
    assert acl.mdl.set_aipp_src_image_size(aipp, 10, 10) == 0
    for b in range(batch):
        assert acl.mdl.set_aipp_crop_params(aipp, 1, 1, 2, crop_w, 8, b) == 0
        assert acl.mdl.set_aipp_dtc_pixel_mean(aipp, 124, 117, 104, 0, b) == 0
        assert acl.mdl.set_aipp_dtc_pixel_min(aipp, 0.5, 0, 0, 0, b) == 0
        assert (
            acl.mdl.set_aipp_pixel_var_reci(aipp, 0.0171247538, 0.0175070028, 0.0174291938, 1, b)
            == 0
        )
    return aipp


def test_set_input_aipp_runs_the_parameters_it_wrote(
    ctx: int, om_aipp_dynamic: Path, om_aipp_rgb: Path
) -> None:
    model = Model(om_aipp_dynamic)
    aipp = _rgb_aipp(2)
    assert acl.mdl.set_input_aipp(model.model_id, model.inputs, 1, aipp) == 0
    raw = np.random.default_rng(2).integers(0, 256, (2, 10, 10, 3), dtype=np.uint8)
    model.feed([raw])  # the image only: the parameter buffer keeps what set_input_aipp wrote
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    answer = model.fetch()[0]
    np.testing.assert_allclose(answer, expected(om_aipp_rgb, onnx_models.AIPP_RGB888, raw))
    assert acl.mdl.destroy_aipp(aipp) == 0
    assert acl.mdl.destroy_aipp(aipp) == AclCode.INVALID_PARAM


def test_set_input_aipp_refuses_what_acl_refuses(ctx: int, om_aipp_dynamic: Path) -> None:
    model = Model(om_aipp_dynamic)
    aipp = _rgb_aipp(2)
    assert acl.mdl.set_input_aipp(model.model_id, model.inputs, 0, aipp) == AclCode.INVALID_PARAM
    wrong_batch = _rgb_aipp(1)
    assert acl.mdl.set_input_aipp(model.model_id, model.inputs, 1, wrong_batch) == 100000
    wrong_crop = _rgb_aipp(2, crop_w=6)  # AIPP output 6x8, the model takes 8x8
    assert acl.mdl.set_input_aipp(model.model_id, model.inputs, 1, wrong_crop) == 100000
    too_big = _rgb_aipp(2)
    assert acl.mdl.set_aipp_src_image_size(too_big, 12, 10) == 0  # 2 * 360 bytes > 600
    assert acl.mdl.set_input_aipp(model.model_id, model.inputs, 1, too_big) == 100000
    assert acl.mdl.set_aipp_crop_params(aipp, 1, 0, 0, 8, 8, 2) == AclCode.INVALID_PARAM
    assert acl.mdl.create_aipp(0) == 0
    with pytest.raises(TypeError, match="set_aipp_crop_params"):
        acl.mdl.set_aipp_crop_params(aipp, 1, 0, 0, 8, 8)


def test_the_block_set_input_aipp_writes_is_acls_layout() -> None:
    params = DynamicAippParams.create(2)
    params.input_format = AippInputFormat.YUV420SP_U8
    params.batches[1].crop_size_w = 8
    assert DynamicAippParams.unpack(params.pack()) == params
    assert DynamicAippParams.unpack(params.pack()).static_op(1).crop_size_w == 0  # switch off


@pytest.mark.parametrize(
    ("config", "flags", "message"),
    [
        (onnx_models.AIPP_RGB888, {"dynamic_dims": "8;16"}, "exclusive .*000041"),
        (
            onnx_models.AIPP_RGB888,
            {"dynamic_image_size": "8,8;16,16"},
            "when --dynamic_image_size is set, crop and padding cannot be",
        ),
        (onnx_models.AIPP_RGB888.replace("crop_size_w: 8", "crop_size_w: 6"), {}, "must be equal"),
        (
            onnx_models.AIPP_RGB888.replace(
                "aipp_mode: static", "aipp_mode: static\nrelated_input_rank: 1"
            ),
            {},
            "related_input_rank 1 is out of range",
        ),
        ("aipp_op { aipp_mode: static }", {}, "input_format must be set"),
    ],
)
def test_compile_refuses_what_atc_refuses(
    tmp_path: Path, config: str, flags: dict[str, str], message: str
) -> None:
    onnx_path = build_conv(tmp_path / "conv.onnx")
    (tmp_path / "aipp.cfg").write_text(config)
    shape = "image:2,3,8,8"
    if "dynamic_dims" in flags:
        shape, flags = "image:2,3,-1,8", {**flags, "input_format": "ND"}
    elif "dynamic_image_size" in flags:
        shape = "image:2,3,-1,-1"
    with pytest.raises(OmCompileError, match=message):
        compile_onnx(
            onnx_path,
            tmp_path / "m",
            input_shape=shape,
            insert_op_conf=tmp_path / "aipp.cfg",
            **flags,
        )


def test_cli_compile_prints_the_atc_command_with_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onnx_path = build_conv(tmp_path / "conv.onnx")
    (tmp_path / "aipp.cfg").write_text(onnx_models.AIPP_YUV420SP)
    argv = ["emulator", "compile", f"--model={onnx_path}", "--framework=5"]
    argv += ["--output", str(tmp_path / "m"), "--input_shape", "image:2,3,8,8"]
    assert cli.main([*argv, "--insert_op_conf", str(tmp_path / "aipp.cfg")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].endswith("; static; image: static AIPP from YUV420SP_U8")
    (atc,) = [line for line in out if line.startswith("on Ascend hardware: atc ")]
    assert f"--insert_op_conf={tmp_path / 'aipp.cfg'}" in atc


def _compile_gears(tmp_path: Path, config: str, input_shape: str, **flags: str) -> Path:
    onnx_path = build_conv(tmp_path / "conv.onnx")
    (tmp_path / "aipp.cfg").write_text(config)
    return compile_onnx(
        onnx_path,
        tmp_path / "m",
        input_shape=input_shape,
        insert_op_conf=tmp_path / "aipp.cfg",
        **onnx_models.KEEP_FP32,
        **flags,
    )


def _reference(om: Path, config: str, model_dims: tuple[int, ...], raw: np.ndarray) -> np.ndarray:
    bound = bind_static(parse_aipp_config(config)[0], model_dims, Format.NCHW, FLOAT)
    return reference(onnx_path_of(om), [bound.apply(raw)])["features"]


def test_static_aipp_with_batch_gears_reports_the_largest_gear(tmp_path: Path, ctx: int) -> None:
    # GE: v1 and v2 keep -1 on N (insert_aipp_op_util.cc UpdateMultiBatchInputDims,
    # SetModelInputDims), the size is the largest gear's (UpdateCaseNode), one outDims per gear
    om = _compile_gears(
        tmp_path, onnx_models.AIPP_YUV420SP, "image:-1,3,8,8", dynamic_batch_size="1,2,4"
    )
    model = Model(om)
    assert acl.mdl.get_input_dims(model.desc, 0) == (
        {"name": "image", "dimCount": 4, "dims": [-1, 10, 12, 3]},
        0,
    )
    assert acl.mdl.get_input_dims_v2(model.desc, 0)[0]["dims"] == [-1, 15, 12, 1]
    assert acl.mdl.get_input_size_by_index(model.desc, 0) == 4 * 15 * 12
    assert acl.mdl.get_input_format(model.desc, 0) == Format.NHWC
    info, ret = acl.mdl.get_first_aipp_info(model.model_id, 0)
    assert (info["shapeCount"], ret) == (3, 0)
    assert [g["srcDims"]["dims"][0] for g in info["outDims"]] == [1, 2, 4]
    assert [g["aippOutdims"]["dims"] for g in info["outDims"]][1] == [2, 1, 8, 8, 16]
    rng = np.random.default_rng(35)
    for batch in (2, 1, 4):
        raw = rng.integers(0, 256, (batch, 15, 12, 1), dtype=np.uint8)
        model.feed([raw])
        assert acl.mdl.set_dynamic_batch_size(model.model_id, model.inputs, 1, batch) == 0
        assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
        answer = model.fetch()[0]
        want = _reference(om, onnx_models.AIPP_YUV420SP, (batch, 3, 8, 8), raw)
        np.testing.assert_allclose(answer, want, rtol=1e-6)


def test_static_aipp_with_dynamic_image_size_takes_each_gears_size(
    tmp_path: Path, ctx: int
) -> None:
    config = onnx_models.AIPP_YUV420SP_ANY_SIZE
    om = _compile_gears(tmp_path, config, "image:1,3,-1,-1", dynamic_image_size="8,8;12,16")
    model = Model(om)
    assert acl.mdl.get_input_dims(model.desc, 0)[0]["dims"] == [1, -1, -1, 3]
    assert acl.mdl.get_input_dims_v2(model.desc, 0)[0]["dims"] == [1, -1, -1, 1]
    assert acl.mdl.get_input_size_by_index(model.desc, 0) == 12 * 16 * 3 // 2
    info, _ = acl.mdl.get_first_aipp_info(model.model_id, 0)
    assert (info["srcImageSizeW"], info["srcImageSizeH"], info["shapeCount"]) == (0, 0, 2)
    rng = np.random.default_rng(36)
    for h, w in ((12, 16), (8, 8)):
        raw = rng.integers(0, 256, (1, h * 3 // 2, w, 1), dtype=np.uint8)
        model.feed([raw])
        assert acl.mdl.set_dynamic_hw_size(model.model_id, model.inputs, 1, h, w) == 0
        assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
        want = _reference(om, config, (1, 3, h, w), raw)
        np.testing.assert_allclose(model.fetch()[0], want, rtol=1e-6)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            onnx_models.AIPP_YUV420SP_ANY_SIZE.replace("}", "src_image_size_w: 8\n}"),
            "src_image_size_w and src_image_size_h must be set to '0'",
        ),
        (
            onnx_models.AIPP_YUV420SP_ANY_SIZE.replace(
                "}", "src_image_size_w: 8\nsrc_image_size_h: 6\npadding: true\n}"
            ),
            "crop and padding cannot be set to 'true'",
        ),
        (onnx_models.AIPP_DYNAMIC, "dynamic AIPP with --dynamic_image_size is not supported"),
    ],
)
def test_aipp_with_dynamic_image_size_is_refused_outside_the_constraints(
    tmp_path: Path, config: str, message: str
) -> None:
    with pytest.raises(OmCompileError, match=message):
        _compile_gears(tmp_path, config, "image:1,3,-1,-1", dynamic_image_size="8,8;12,16")


def test_dynamic_aipp_with_batch_gears_takes_the_largest_batch(tmp_path: Path, ctx: int) -> None:
    # CANN "Concepts and Restrictions": create_aipp with the largest batch, the parameter
    # input's buffer sized for it; acl_aipp.cpp GetModelOriDims checks the largest gear's N
    config = onnx_models.AIPP_DYNAMIC.replace("600", "1200")
    om = _compile_gears(tmp_path, config, "image:-1,3,8,8", dynamic_batch_size="1,2,4")
    model = Model(om)
    params, ret = acl.mdl.get_input_index_by_name(model.desc, "ascend_dynamic_aipp_data")
    assert ret == 0
    assert acl.mdl.get_aipp_type(model.model_id, 0) == (AippType.DYNAMIC, params, 0)
    assert acl.mdl.get_input_dims(model.desc, 0)[0]["dims"] == [-1, -1, -1, -1]
    assert acl.mdl.get_input_dims(model.desc, params)[0]["dims"] == [64 + 96 * 4]
    assert acl.mdl.get_input_size_by_index(model.desc, params) == 64 + 96 * 4
    assert acl.mdl.set_input_aipp(model.model_id, model.inputs, params, _rgb_aipp(2)) == 100000
    aipp = _rgb_aipp(4)
    assert acl.mdl.set_aipp_dtc_pixel_mean(aipp, 0, 0, 0, 0, 1) == 0  # image 1: its own mean
    assert acl.mdl.set_input_aipp(model.model_id, model.inputs, params, aipp) == 0
    raw = np.random.default_rng(37).integers(0, 256, (2, 10, 10, 3), dtype=np.uint8)
    model.feed([raw])
    assert acl.mdl.set_dynamic_batch_size(model.model_id, model.inputs, model.mbatch, 2) == 0
    assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    answer = model.fetch()[0]
    config_rgb = onnx_models.AIPP_RGB888
    without_mean = config_rgb.replace("mean_chn_0: 124", "").replace("mean_chn_1: 117", "")
    without_mean = without_mean.replace("mean_chn_2: 104", "")
    want = [
        _reference(om, text, (1, 3, 8, 8), raw[i : i + 1])[0]
        for i, text in enumerate((config_rgb, without_mean))
    ]
    np.testing.assert_allclose(answer, np.stack(want), rtol=1e-6)
