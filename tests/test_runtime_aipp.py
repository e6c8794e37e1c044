"""The runtime on AIPP models (issue 21, item 3), on the emulator.

* A static-AIPP input is served with the dims whose bytes are `get_input_size_by_index`: v2 for
  YUV420SP_U8 (`[n, h*1.5, w, 1]`, aclmdlGetInputDimsV2.md table 1), UINT8, NHWC; dims and size
  that disagree otherwise are refused at load, naming both.
* Each input's AIPP (`get_aipp_type`, `get_first_aipp_info`) is logged at load and shown by
  `inspect`.
* A dynamic-AIPP model is refused without `aipp_config`, and served with it: the parameters are
  written once per lane (`set_input_aipp`) and every answer equals the NumPy AIPP steps plus
  onnxruntime.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnx_models
import pytest
from onnx_models import onnx_path_of, reference

from ge_python_backend import cli
from ge_python_backend.aipp import bind_static, parse_aipp_config
from ge_python_backend.ascend import DTYPES_BY_NUMPY, Format
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.runtime import Session
from ge_python_backend.runtime.errors import InputError, ModelFileError
from ge_python_backend.runtime.model import _served_dims

FLOAT = DTYPES_BY_NUMPY[np.dtype(np.float32)]


def expected(om: Path, config: str, raw: np.ndarray) -> np.ndarray:
    op = parse_aipp_config(config)[0]
    bound = bind_static(op, (1, 3, 8, 8), Format.NCHW, FLOAT)
    images = np.concatenate([bound.apply(image) for image in raw])
    return reference(onnx_path_of(om), [images])["features"]


def test_a_yuv420sp_input_is_served_in_its_v2_dims(
    om_aipp_yuv: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, "ge_python_backend.runtime.model"):
        session = Session(om_aipp_yuv, runtime="emulator", pipeline_depth=2)
    with session:
        (spec,) = session.inputs
        assert (spec.triton_dtype, spec.shape, spec.format) == ("UINT8", (2, 15, 12, 1), "NHWC")
        assert session.aipp["image"].startswith("static AIPP from YUV420SP_U8 12x10, crop 8x8")
        rng = np.random.default_rng(3)
        for rows in (1, 2, 2, 1):
            raw = rng.integers(0, 256, (rows, 15, 12, 1), dtype=np.uint8)
            answer = session.infer({"image": raw})["features"]
            np.testing.assert_allclose(
                answer, expected(om_aipp_yuv, onnx_models.AIPP_YUV420SP, raw)
            )
    logged = [r.getMessage() for r in caplog.records if "static AIPP" in r.getMessage()]
    assert logged and logged[0].endswith("served as UINT8 [2, 15, 12, 1]")


def test_dims_and_size_that_disagree_are_refused_naming_both() -> None:
    # what real pyACL reports for a model the emulator cannot build: neither dims is the size
    acl = SimpleNamespace(
        mdl=SimpleNamespace(
            get_input_dims_v2=lambda desc, index: ({"dimCount": 2, "dims": [4, 5]}, 0)
        )
    )
    uint8 = np.dtype(np.uint8)
    with pytest.raises(ModelFileError) as caught:
        _served_dims(acl, 1, 0, "x", uint8, (4, 6), 100, Path("m.om"))
    assert str(caught.value) == (
        "m.om: input 'x' reports dims [4, 6] (24 bytes of uint8) and dims_v2 [4, 5] (20 bytes), "
        "but its size is 100 bytes (get_input_size_by_index); neither shape can be served"
    )
    assert _served_dims(acl, 1, 0, "x", uint8, (4, 5), 20, Path("m.om")) == (4, 5)
    assert _served_dims(acl, 1, 0, "x", uint8, (4, 6), 20, Path("m.om")) == (4, 5)
    assert _served_dims(acl, 1, 0, "x", uint8, (4, 6), 80, Path("m.om")) == (4, 6)  # GE's slack


def test_a_dynamic_aipp_model_needs_aipp_config(om_aipp_dynamic: Path) -> None:
    with pytest.raises(ModelFileError, match="set the parameter aipp_config to an ATC-syntax"):
        Session(om_aipp_dynamic, runtime="emulator")


def test_aipp_config_on_a_model_without_dynamic_aipp_is_ignored_with_a_warning(
    om_aipp_rgb: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "aipp.cfg").write_text(onnx_models.AIPP_RGB888)
    with Session(om_aipp_rgb, runtime="emulator", aipp_config=tmp_path / "aipp.cfg") as session:
        assert session.inputs[0].shape == (2, 10, 10, 3)
    assert "aipp_config is ignored: the model has no dynamic AIPP input" in caplog.text


@pytest.mark.parametrize("depth", [1, 2])
def test_a_dynamic_aipp_model_is_served_with_its_fixed_parameters(
    om_aipp_dynamic: Path, om_aipp_rgb: Path, tmp_path: Path, depth: int
) -> None:
    (tmp_path / "aipp.cfg").write_text(onnx_models.AIPP_RGB888)
    with Session(
        om_aipp_dynamic, runtime="emulator", pipeline_depth=depth, aipp_config=tmp_path / "aipp.cfg"
    ) as session:
        assert [(s.triton_dtype, s.shape) for s in session.inputs] == [("UINT8", (2, 10, 10, 3))]
        rng = np.random.default_rng(4)
        requests: list[Any] = [
            rng.integers(0, 256, (1 + i % 2, 10, 10, 3), dtype=np.uint8) for i in range(6)
        ]
        answers = session.infer_many([{"image": raw} for raw in requests])
    for raw, answer in zip(requests, answers):
        np.testing.assert_allclose(
            answer["features"], expected(om_aipp_rgb, onnx_models.AIPP_RGB888, raw)
        )


def test_inspect_shows_the_aipp(om_aipp_rgb: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(om_aipp_rgb), "--runtime", "emulator"]) == 0
    out = capsys.readouterr().out
    assert "  image  UINT8  uint8  [2, 10, 10, 3]  NHWC" in out
    assert (
        "AIPP of image: static AIPP from RGB888_U8 10x10, crop 8x8 at (1,2), (x - mean - min) * "
        "var_reci with mean [124, 117, 104], min [0.5, 0.0, 0.0]"
    ) in out


def _compile(tmp_path: Path, config: str, input_shape: str, **flags: str) -> Path:
    onnx_path = onnx_models.build_conv(tmp_path / "conv.onnx")
    (tmp_path / "aipp.cfg").write_text(config)
    return compile_onnx(
        onnx_path,
        tmp_path / "m",
        input_shape=input_shape,
        insert_op_conf=tmp_path / "aipp.cfg",
        **onnx_models.KEEP_FP32,
        **flags,
    )


def _numpy_then_onnxruntime(om: Path, config: str, dims: tuple[int, ...], raw: Any) -> Any:
    """Each image through `StaticAipp.apply` for the model input `dims` (one image), then
    onnxruntime."""
    bound = bind_static(parse_aipp_config(config)[0], dims, Format.NCHW, FLOAT)
    images = np.concatenate([bound.apply(image) for image in raw])
    return reference(onnx_path_of(om), [images])["features"]


def test_batch_gears_serve_each_image_through_the_aipp(tmp_path: Path) -> None:
    config = onnx_models.AIPP_YUV420SP
    om = _compile(tmp_path, config, "image:-1,3,8,8", dynamic_batch_size="1,2,4,8")
    with Session(om, runtime="emulator", pipeline_depth=2) as session:
        (spec,) = session.inputs
        assert (spec.triton_dtype, spec.shape, spec.format) == ("UINT8", (-1, 15, 12, 1), "NHWC")
        assert (session.gears.batch_gears, session.gears.max_batch) == ((1, 2, 4, 8), 8)
        rng = np.random.default_rng(35)
        requests = [rng.integers(0, 256, (1 + i % 3, 15, 12, 1), dtype=np.uint8) for i in range(9)]
        answers = session.infer_many([{"image": raw} for raw in requests])
        assert session.counters.executions < len(requests)  # batched into the gears
    for raw, answer in zip(requests, answers):
        want = _numpy_then_onnxruntime(om, config, (1, 3, 8, 8), raw)
        np.testing.assert_allclose(answer["features"], want, rtol=1e-6)


def test_scaffold_writes_the_batch_and_the_per_image_dims(tmp_path: Path) -> None:
    om = _compile(tmp_path, onnx_models.AIPP_YUV420SP, "image:-1,3,8,8", dynamic_batch_size="1,4")
    argv = ["scaffold", str(om), "-r", str(tmp_path / "repo"), "--name", "yuv"]
    assert cli.main([*argv, "--runtime", "emulator"]) == 0
    text = (tmp_path / "repo" / "yuv" / "config.pbtxt").read_text()
    assert "max_batch_size: 4" in text
    image = 'input {\n  name: "image"\n  data_type: TYPE_UINT8\n  format: FORMAT_NHWC\n  dims: 15\n'
    image += "  dims: 12\n  dims: 1\n"  # the layout the .om records for its AIPP input
    assert image in text  # per image: v2 without the batch axis
    assert "dynamic_batching {" in text


def test_hw_gears_serve_a_yuv420sp_image_of_each_size(tmp_path: Path) -> None:
    config = onnx_models.AIPP_YUV420SP_ANY_SIZE
    om = _compile(tmp_path, config, "image:1,3,-1,-1", dynamic_image_size="8,8;12,16")
    with Session(om, runtime="emulator") as session:
        assert session.inputs[0].shape == (1, -1, -1, 1)  # v2: H is h * 1.5 of each gear
        rng = np.random.default_rng(36)
        for h, w in ((12, 16), (8, 8), (12, 16)):
            raw = rng.integers(0, 256, (1, h * 3 // 2, w, 1), dtype=np.uint8)
            answer = session.infer({"image": raw})["features"]
            want = _numpy_then_onnxruntime(om, config, (1, 3, h, w), raw)
            np.testing.assert_allclose(answer, want, rtol=1e-6)
        with pytest.raises(InputError, match="match none of the model's"):
            session.infer({"image": np.zeros((1, 8, 8, 1), np.uint8)})  # 8x8 needs 12 rows


def test_dynamic_aipp_with_batch_gears_is_served_with_its_fixed_parameters(
    tmp_path: Path, om_aipp_rgb: Path
) -> None:
    om = _compile(
        tmp_path,
        onnx_models.AIPP_DYNAMIC.replace("600", "2400"),
        "image:-1,3,8,8",
        dynamic_batch_size="1,2,4,8",
    )
    (tmp_path / "rgb.cfg").write_text(onnx_models.AIPP_RGB888)
    with Session(om, runtime="emulator", aipp_config=tmp_path / "rgb.cfg") as session:
        assert session.inputs[0].shape == (-1, 10, 10, 3)
        rng = np.random.default_rng(38)
        requests = [rng.integers(0, 256, (1 + i % 3, 10, 10, 3), dtype=np.uint8) for i in range(5)]
        answers = session.infer_many([{"image": raw} for raw in requests])
    for raw, answer in zip(requests, answers):
        np.testing.assert_allclose(
            answer["features"], expected(om_aipp_rgb, onnx_models.AIPP_RGB888, raw)
        )
