"""`compare` on AIPP models (issue 21, item 4): the `.om` gets raw UINT8 images, the ONNX what
the same AIPP steps make of them (`--aipp-config`, the aipp.cfg of `atc --insert_op_conf`)."""

from __future__ import annotations

from pathlib import Path

import onnx_models
import pytest
from onnx_models import onnx_path_of

from ge_python_backend.cli import main
from ge_python_backend.errors import UserError
from ge_python_backend.tools.compare import compare

EMULATOR = ["--runtime", "emulator"]


@pytest.mark.parametrize(
    ("fixture", "config"),
    [
        ("om_aipp_yuv", onnx_models.AIPP_YUV420SP),
        ("om_aipp_rgb", onnx_models.AIPP_RGB888),
        ("om_aipp_dynamic", onnx_models.AIPP_RGB888),  # served with these fixed parameters
    ],
)
def test_an_aipp_om_passes_against_its_onnx(
    request: pytest.FixtureRequest, tmp_path: Path, fixture: str, config: str
) -> None:
    om = request.getfixturevalue(fixture)
    (tmp_path / "aipp.cfg").write_text(config)
    report = compare(om, onnx_path_of(om), runtime="emulator", aipp_config=tmp_path / "aipp.cfg")
    assert report.passed
    assert report.inputs["image"].dtype.name == "uint8"
    assert [c.max_abs for c in report.comparisons] == [0.0]


def test_another_config_fails_and_none_is_refused(om_aipp_yuv: Path, tmp_path: Path) -> None:
    other = onnx_models.AIPP_YUV420SP.replace("load_start_pos_w: 2", "load_start_pos_w: 4")
    (tmp_path / "other.cfg").write_text(other)
    onnx_path = str(onnx_path_of(om_aipp_yuv))
    argv = ["compare", "--om", str(om_aipp_yuv), "--onnx", onnx_path, *EMULATOR]
    assert main([*argv, "--aipp-config", str(tmp_path / "other.cfg")]) == 1
    with pytest.raises(UserError, match="has AIPP on image: give --aipp-config"):
        compare(om_aipp_yuv, onnx_path_of(om_aipp_yuv), runtime="emulator")
