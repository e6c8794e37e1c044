"""`ge-python-model compare`: emulator `.om` files against their ONNX, and a served model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from e2e_helpers import http_address, running_server
from onnx import numpy_helper
from onnx_models import KEEP_FP32, build_add_mul, build_cancelling, build_nms, onnx_path_of

from ge_python_backend.cli import main
from ge_python_backend.client import INT_HIGH
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.errors import UserError
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.tools.compare import (
    Thresholds,
    compare,
    compare_arrays,
    cosine_similarity,
    match_outputs,
)

# Every fixture model and the input shapes of its first gear.
FIRST_GEAR = {
    "om_static": {"x": (4, 16)},
    "om_dynamic_batch": {"x": (1, 16)},
    "om_mixed_types": {"x": (1, 4), "h": (1, 4)},
    "om_hw": {"image": (1, 3, 16, 16)},
    "om_dims": {"input_ids": (1, 8), "attention_mask": (1, 8)},
}


def other_weights(onnx_path: Path, destination: Path) -> Path:
    """The same graph with different weights (every float initializer redrawn)."""
    model = onnx.load(str(onnx_path))
    rng = np.random.default_rng(99)
    for index, tensor in enumerate(model.graph.initializer):
        array = numpy_helper.to_array(tensor)
        if array.dtype.kind == "f":
            redrawn = rng.standard_normal(array.shape).astype(array.dtype)
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(redrawn, tensor.name))
    onnx.save(model, str(destination))
    return destination


@pytest.mark.parametrize("fixture", sorted(FIRST_GEAR))
def test_om_passes_against_its_own_onnx(fixture: str, request: pytest.FixtureRequest) -> None:
    om: Path = request.getfixturevalue(fixture)
    report = compare(om, onnx_path_of(om), runtime="emulator")
    assert report.passed
    assert {name: array.shape for name, array in report.inputs.items()} == FIRST_GEAR[fixture]
    assert report.comparisons and all(item.target == "om" for item in report.comparisons)
    for item in report.comparisons:
        assert item.max_abs == 0.0 and item.mismatched == 0
        assert item.cosine == pytest.approx(1.0)


def test_om_fails_against_onnx_with_other_weights(
    om_dynamic_batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = other_weights(onnx_path_of(om_dynamic_batch), tmp_path / "other.onnx")
    report = compare(om_dynamic_batch, wrong, runtime="emulator", shapes={"x": (8, 16)})
    assert not report.passed
    y = next(item for item in report.comparisons if item.name == "y")
    assert y.cosine < 0.9 and y.max_abs > 0.1 and y.mismatched > 0

    code = main(["compare", "--om", str(om_dynamic_batch), "--onnx", str(wrong)] + EMULATOR)
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL: 2 of 2 outputs" in out


EMULATOR = ["--runtime", "emulator"]


def test_cli_passes_and_prints_every_output(
    om_static: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        ["compare", "--om", str(om_static), "--onnx", str(onnx_path_of(om_static))] + EMULATOR
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "x  float32  [4, 16]" in out
    assert out.count("  ok") == 2
    assert "ok; top-1 agrees on 4 of 4 rows, top-5 on 4" in out  # y [4, 8] is classifier-like
    assert "PASS: every output is within atol 0.01, rtol 0.01, cosine >= 0.99" in out


def test_shape_and_input_files(om_add_mul: Path, tmp_path: Path) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "a.npy", a)
    report = compare(
        om_add_mul,
        onnx_path_of(om_add_mul),
        runtime="emulator",
        shapes={"b": (3, 4)},
        files={"a": tmp_path / "a.npy"},
    )
    assert report.passed  # 3 rows: not a gear, run as gear chunks
    np.testing.assert_array_equal(report.inputs["a"], a)
    assert report.inputs["b"].shape == (3, 4)


def test_random_integers_stay_in_a_small_range(om_mixed_types: Path) -> None:
    report = compare(
        om_mixed_types, onnx_path_of(om_mixed_types), runtime="emulator", shapes={"x": (4, 4)}
    )
    x = report.inputs["x"]
    assert x.dtype == np.int32 and x.min() >= 0 and x.max() < INT_HIGH
    assert report.inputs["h"].dtype == np.float16


def test_user_mistakes_exit_2(
    om_dims: Path, om_add_mul: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onnx_path = str(onnx_path_of(om_dims))
    not_a_gear = ["--shape", "input_ids:1,9", "--shape", "attention_mask:1,9"]
    assert main(["compare", "--om", str(om_dims), "--onnx", onnx_path, *not_a_gear, *EMULATOR]) == 2
    assert "do not fit" in capsys.readouterr().err
    unrelated = str(build_add_mul(tmp_path / "add_mul.onnx"))
    assert main(["compare", "--om", str(om_dims), "--onnx", unrelated, *EMULATOR]) == 2
    assert "takes inputs ['a', 'b']" in capsys.readouterr().err
    with pytest.raises(UserError, match="--url and --model go together"):
        compare(om_add_mul, onnx_path_of(om_add_mul), runtime="emulator", url="127.0.0.1:1")
    with pytest.raises(UserError, match="no input nope"):
        compare(om_add_mul, onnx_path_of(om_add_mul), runtime="emulator", shapes={"nope": (1,)})


def test_compare_arrays_statistics() -> None:
    limits = Thresholds(atol=0.1, rtol=0.01, min_cosine=0.99)
    ref = np.array([0.0, 0.05, 10.0, -20.0], np.float32)
    value = np.array([0.05, 0.05, 10.3, -20.0], np.float32)
    result = compare_arrays("om", "y", value, ref, limits)
    assert result.max_abs == pytest.approx(0.3, abs=1e-5)
    assert result.max_rel == pytest.approx(0.03, abs=1e-6)  # only |ref| > atol counts
    # 10.3 vs 10: 0.3 > 0.1 + 0.01 * 10; 0.05 vs 0: within atol.
    assert result.mismatched == 1 and not result.passed
    assert result.cosine == pytest.approx(cosine_similarity(value, ref))
    assert compare_arrays("om", "y", ref, ref, limits).passed
    shape = compare_arrays("om", "y", ref[:3], ref, limits)
    assert not shape.passed and "shape [3]" in shape.problem


def test_nan_and_inf_fail_by_name_and_are_no_perfect_score() -> None:
    limits = Thresholds()
    ref = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    all_nan = compare_arrays("om", "y", np.full(4, np.nan, np.float32), ref, limits)
    assert not all_nan.passed
    assert all_nan.problem == "NaN in 4 of 4 elements, where the ONNX output has none"
    assert np.isnan([all_nan.max_abs, all_nan.max_rel, all_nan.cosine]).all()  # no statistic
    some = compare_arrays("om", "y", np.array([1.0, np.inf, np.nan, 4.0], np.float32), ref, limits)
    assert not some.passed and "NaN in 1 and inf in 1 of 4" in some.problem
    assert some.max_abs == 0.0 and some.cosine == pytest.approx(1.0)  # over the finite ones
    masked = np.array([1.0, -np.inf, 3.0, 4.0], np.float32)  # the ONNX's own -inf: an answer
    assert compare_arrays("om", "y", masked, masked, limits).passed
    flipped = compare_arrays("om", "y", -masked, masked, limits)
    assert "inf in 1" in flipped.problem


def test_all_nan_om_output_fails_with_the_word_nan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onnx_file = build_cancelling(tmp_path / "cancelling.onnx")
    om = compile_onnx(onnx_file, tmp_path / "cancelling", precision_mode="force_fp16")
    report = compare(om, onnx_file, runtime="emulator")
    (y,) = report.comparisons
    assert not report.passed and y.problem.startswith("NaN in 64 of 64 elements")
    code = main(["compare", "--om", str(om), "--onnx", str(onnx_file), *EMULATOR])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL: NaN in 64 of 64 elements, where the ONNX output has none" in out
    assert "1.0000" not in out  # no cosine of a perfect score


def test_cosine_similarity_edges() -> None:
    zeros = np.zeros(3)
    assert cosine_similarity(zeros, zeros) == 1.0
    assert cosine_similarity(zeros, np.ones(3)) == 0.0
    assert cosine_similarity(np.ones(3), -np.ones(3)) == pytest.approx(-1.0)


def test_output_names_from_atc_are_matched() -> None:
    assert match_outputs(["y", "conv:0:z"], ["z", "y"]) == {"y": "y", "conv:0:z": "z"}
    assert match_outputs(["out0", "out1"], ["a", "b"]) == {"out0": "a", "out1": "b"}
    assert match_outputs(["out0"], ["a", "b"]) == {}


@pytest.mark.e2e
def test_served_model_is_compared_too(
    om_dynamic_batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator", warmup=False)
    golden = str(onnx_path_of(om_dynamic_batch))
    wrong = str(other_weights(onnx_path_of(om_dynamic_batch), tmp_path / "other.onnx"))
    with running_server(repository, log_path=tmp_path / "triton.log") as server:
        served = ["--url", http_address(server), "--model", "mlp", "--shape", "x:5,16"]
        assert (
            main(["compare", "--om", str(om_dynamic_batch), "--onnx", golden, *served, *EMULATOR])
            == 0
        )
        good = capsys.readouterr().out
        code = main(["compare", "--om", str(om_dynamic_batch), "--onnx", wrong, *served, *EMULATOR])
        bad = capsys.readouterr().out
        grpc = compare(
            om_dynamic_batch,
            Path(golden),
            runtime="emulator",
            url=server.urls.grpc,
            model="mlp",
            protocol="grpc",
        )
    assert good.count("  served  ") == 2 and "PASS" in good
    assert code == 1 and "FAIL: 4 of 4 outputs" in bad
    assert grpc.passed and [item.target for item in grpc.comparisons] == [
        "om",
        "om",
        "served",
        "served",
    ]


def test_data_dependent_outputs_are_compared_by_their_real_shapes(tmp_path: Path) -> None:
    """An NMS detector's `selected` and `picked` come back with the rows this input keeps; the
    comparison checks them against onnxruntime's (same shape, same values), with the outputs
    allocated by the system (no max_output_bytes) and in pooled buffers."""
    onnx_path = build_nms(tmp_path / "nms.onnx")
    om = compile_onnx(
        onnx_path, tmp_path / "nms", input_shape="boxes:1,20,4;scores:1,3,20", **KEEP_FP32
    )
    for options in ({}, {"max_output_bytes": 4096}):
        report = compare(om, onnx_path, runtime="emulator", seed=3, **options)
        assert report.passed
        rows = {c.name: c.shape[0] for c in report.comparisons}
        assert rows["selected"] == rows["picked"] > 0
    argv = ["compare", "--om", str(om), "--onnx", str(onnx_path), "--runtime", "emulator"]
    assert main([*argv, "--max-output-bytes", "4096"]) == 0
    assert main([*argv, "--max-output-bytes", "0"]) == 2
