"""A dims `.om` whose gears fit several orders of its inputs: the `input_shape_order` parameter.

The model is Concat(a, b) compiled with `--input_shape "b:1,-1;a:1,-1"` (b named first, the graph
lists a first) and `--dynamic_dims "4,8;8,16"`: ACL lists the gears as [1,4,1,8] and [1,8,1,16]
in `--input_shape` order, which both (a, b) and (b, a) fit, so only the user can tell.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ge_python_backend.cli import main
from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import config_view, load_model_config, write_model_config
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.runtime import ModelFileError, Session

pytestmark = pytest.mark.usefixtures("clean_acl")

ORDER_MESSAGE = "give that order as input_shape_order (e.g. the parameter input_shape_order"


def test_session_refuses_the_model_without_the_order(om_b_first: Path) -> None:
    with pytest.raises(ModelFileError) as caught:
        Session(om_b_first, runtime="emulator")
    assert ORDER_MESSAGE in str(caught.value)
    assert "fit several orders of the inputs a, b" in str(caught.value)


@pytest.mark.parametrize("depth", [1, 2])
def test_session_serves_every_gear_with_the_order(om_b_first: Path, depth: int) -> None:
    with Session(
        om_b_first, runtime="emulator", pipeline_depth=depth, input_shape_order=["b", "a"]
    ) as session:
        assert [spec.name for spec in session.inputs] == ["a", "b"]
        # gear 0 is b=4, a=8; gear 1 is b=8, a=16 (shapes listed in the model's input order)
        assert session.gears.dims_gears == (((1, 8), (1, 4)), ((1, 16), (1, 8)))
        rng = np.random.default_rng(0)
        for a_size, b_size in ((8, 4), (16, 8), (8, 4)):
            a = rng.standard_normal((1, a_size)).astype(np.float32)
            b = rng.standard_normal((1, b_size)).astype(np.float32)
            outputs = session.infer({"a": a, "b": b})
            np.testing.assert_array_equal(outputs["c"], np.concatenate([a, b], axis=1))


def test_scaffold_validate_and_inspect_take_the_order(
    om_b_first: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "models"
    with pytest.raises(UserError, match="input_shape_order"):
        scaffold(om_b_first, repo, runtime="emulator")
    code = main(
        ["scaffold", str(om_b_first), "-r", str(repo), "--runtime", "emulator"]
        + ["--input-shape-order", "b, a", "--execute-timeout-ms", "1500", "--no-warmup"]
    )
    assert code == 0, capsys.readouterr().err
    config = load_model_config(repo / "concat" / "config.pbtxt")
    assert config.parameters["input_shape_order"].string_value == "b,a"
    params = ModelParameters.from_config(config_view(config))
    assert (params.input_shape_order, params.execute_timeout_ms) == (("b", "a"), 1500)
    [report] = validate_repository(repo)
    assert report.ok and not report.notes, (report.problems, report.notes)
    # Without the parameter validate cannot open the .om, and says why.
    del config.parameters["input_shape_order"]
    write_model_config(config, repo / "concat" / "config.pbtxt")
    [report] = validate_repository(repo)
    assert any(ORDER_MESSAGE in note for note in report.notes), report.notes
    capsys.readouterr()
    code = main(["inspect", str(om_b_first), "--runtime", "emulator", "--json"])
    assert code == 2 and ORDER_MESSAGE in capsys.readouterr().err
    code = main(
        ["inspect", str(om_b_first), "--runtime", "emulator", "--json"]
        + ["--input-shape-order", "b,a"]
    )
    assert code == 0
    info = json.loads(capsys.readouterr().out)
    assert info["gears"]["dims_gears"] == [[[1, 8], [1, 4]], [[1, 16], [1, 8]]]
    code = main(["inspect", str(om_b_first), "--runtime", "emulator", "--input-shape-order", "b,"])
    assert code == 2
    assert "parameter input_shape_order must be the model's input names" in (
        capsys.readouterr().err
    )


def test_compare_takes_the_order(om_b_first: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx = om_b_first.parent / "concat.onnx"
    base = ["compare", "--om", str(om_b_first), "--onnx", str(onnx), "--runtime", "emulator"]
    assert main([*base, "--shape", "a:1,8", "--shape", "b:1,4"]) == 2
    assert ORDER_MESSAGE in capsys.readouterr().err
    assert main([*base, "--shape", "a:1,8", "--shape", "b:1,4", "--input-shape-order", "b,a"]) == 0
    assert "PASS" in capsys.readouterr().out
