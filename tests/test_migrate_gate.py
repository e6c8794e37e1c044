"""`migrate`'s accuracy gate: input sets from a source config's warmups, samples and random data,
an emulator `.om` checked against its ONNX, and the precision ladder."""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from onnx import helper
from onnx_models import build_cancelling, build_fp16_overflow, build_mlp, onnx_path_of
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import PRECISION_LADDER, PrecisionMode
from ge_python_backend.client import INT_HIGH
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.errors import UserError
from ge_python_backend.tools.compare import Thresholds, compare_arrays, top_k_agreement
from ge_python_backend.tools.migrate.gate import (
    RANDOM_ROWS,
    AccuracyResult,
    InputSet,
    LadderAttempt,
    LadderResult,
    Metric,
    MetricChoice,
    SetJudgement,
    _over_sets,
    bisect_island,
    check_accuracy,
    climb_ladder,
    default_metric,
    gate_inputs,
    judge,
    ladder_from,
    overflowing_operators,
    parse_metrics,
    write_keep_dtype,
)
from ge_python_backend.tools.migrate.report import _accuracy_lines

EMULATOR = "emulator"
# The mlp (onnx_models.build_mlp) as a GPU team configures it, with three warmups.
MLP_CONFIG = """
name: "classifier"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [8] }, { name: "z" data_type: TYPE_FP32 dims: [1] }]
instance_group [{ kind: KIND_GPU count: 1 gpus: [0, 1] }]
model_warmup [
  { name: "w0" batch_size: 2
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [16] input_data_file: "x.bin" } } },
  { name: "zeros" batch_size: 1
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [16] zero_data: true } } },
  { name: "noise" batch_size: 4
    inputs { key: "x" value: { data_type: TYPE_FP32 dims: [16] random_data: true } } }
]
"""


def parse_config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


def mlp_model_dir(root: Path) -> tuple[Path, np.ndarray]:
    """A model directory with the warmup file of MLP_CONFIG's 'w0' (one row of x, raw FP32)."""
    model_dir = root / "classifier"
    (model_dir / "warmup").mkdir(parents=True)
    row = np.arange(16, dtype=np.float32) / 8 - 1
    (model_dir / "warmup" / "x.bin").write_bytes(row.astype("<f4").tobytes())
    return model_dir, row


def negated_z(onnx_path: Path, destination: Path) -> Path:
    """The mlp with a different graph for `z`: -sum(y) (`y` is the same)."""
    model = onnx.load(str(onnx_path))
    reduce = next(node for node in model.graph.node if node.op_type == "ReduceSum")
    reduce.output[0] = "z_sum"
    model.graph.node.append(helper.make_node("Neg", ["z_sum"], ["z"]))
    onnx.save(model, str(destination))
    return destination


def test_warmup_entries_then_random_sets(tmp_path: Path) -> None:
    model_dir, row = mlp_model_dir(tmp_path)
    sets = gate_inputs(model_dir, parse_config(MLP_CONFIG), tmp_path / "unused.onnx", samples=None)
    assert [item.origin for item in sets] == [
        "warmup 'w0'",
        "warmup 'zeros'",
        "warmup 'noise'",
        "random #1",
        "random #2",
        "random #3",
    ]
    w0, zeros, noise = (item.arrays["x"] for item in sets[:3])
    # batch_size rows of the one sample, as Triton sends them
    assert w0.dtype == np.float32 and w0.shape == (2, 16)
    np.testing.assert_array_equal(w0, np.stack([row, row]))
    assert zeros.shape == (1, 16) and not zeros.any()
    assert noise.shape == (4, 16) and np.isfinite(noise).all() and noise.std() > 0.1
    np.testing.assert_array_equal(noise, np.repeat(noise[:1], 4, axis=0))
    randoms = [item.arrays["x"] for item in sets[3:]]
    assert all(array.shape == (RANDOM_ROWS, 16) for array in randoms)
    assert not np.array_equal(randoms[0], randoms[1])
    again = gate_inputs(model_dir, parse_config(MLP_CONFIG), tmp_path / "unused.onnx", samples=None)
    np.testing.assert_array_equal(again[3].arrays["x"], randoms[0])  # seeded


def test_warmup_file_shorter_than_its_dims_is_refused(tmp_path: Path) -> None:
    model_dir, _ = mlp_model_dir(tmp_path)
    (model_dir / "warmup" / "x.bin").write_bytes(b"\0" * 8)
    with pytest.raises(UserError, match=r"warmup 'w0' input 'x'.*has 8 bytes.*take 64"):
        gate_inputs(model_dir, parse_config(MLP_CONFIG), tmp_path / "unused.onnx", samples=None)


def test_bytes_warmup_file_is_length_prefixed(tmp_path: Path) -> None:
    config = parse_config("""
        name: "texts" max_batch_size: 4
        input [{ name: "text" data_type: TYPE_STRING dims: [3] }]
        model_warmup [
          { name: "file" batch_size: 2 inputs { key: "text" value:
              { data_type: TYPE_STRING dims: [3] input_data_file: "text.bin" } } },
          { name: "random" batch_size: 1 inputs { key: "text" value:
              { data_type: TYPE_STRING dims: [3] random_data: true } } }
        ]
    """)
    (tmp_path / "texts" / "warmup").mkdir(parents=True)
    elements = [b"ab", b"", "\u00e9t\u00e9".encode()]
    data = b"".join(struct.pack("<I", len(item)) + item for item in elements)
    (tmp_path / "texts" / "warmup" / "text.bin").write_bytes(data)
    sets = gate_inputs(tmp_path / "texts", config, tmp_path / "unused.onnx", samples=None)
    assert [item.origin for item in sets][:2] == ["warmup 'file'", "warmup 'random'"]
    assert sets[0].arrays["text"].tolist() == [elements, elements]
    assert sets[1].arrays["text"].tolist() == [[b"", b"", b""]]  # Triton: random -> zero data
    (tmp_path / "texts" / "warmup" / "text.bin").write_bytes(data[:-1])
    with pytest.raises(UserError, match="runs past the end"):
        gate_inputs(tmp_path / "texts", config, tmp_path / "unused.onnx", samples=None)


def test_samples_come_after_the_warmups(tmp_path: Path) -> None:
    model_dir, _ = mlp_model_dir(tmp_path)
    samples = tmp_path / "samples" / "classifier"
    samples.mkdir(parents=True)
    rng = np.random.default_rng(5)
    given = {name: rng.standard_normal((3, 16)) for name in ("b", "a")}  # float64: cast to FP32
    for name, array in given.items():
        np.savez(samples / f"{name}.npz", x=array)
    sets = gate_inputs(
        model_dir,
        parse_config(MLP_CONFIG),
        tmp_path / "unused.onnx",
        samples=samples,
        random_sets=1,
    )
    # the user's samples decide: no random set beside them
    assert [item.origin for item in sets][3:] == ["sample a.npz", "sample b.npz"]
    assert sets[3].arrays["x"].dtype == np.float32
    np.testing.assert_allclose(sets[3].arrays["x"], given["a"], rtol=1e-6)

    np.savez(samples / "c.npz", image=given["a"])
    with pytest.raises(UserError, match=r"sample c.npz holds image; the model's inputs are x"):
        gate_inputs(model_dir, parse_config(MLP_CONFIG), tmp_path / "unused.onnx", samples=samples)
    (samples / "c.npz").unlink()
    np.savez(samples / "c.npz", x=np.zeros((3, 5), np.float32))
    with pytest.raises(UserError, match=r"sample c.npz input 'x' has shape \[3, 5\]"):
        gate_inputs(model_dir, parse_config(MLP_CONFIG), tmp_path / "unused.onnx", samples=samples)


def test_config_without_inputs_takes_the_onnx_inputs(tmp_path: Path) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    config = parse_config('name: "classifier" platform: "onnxruntime_onnx" max_batch_size: 2')
    sets = gate_inputs(tmp_path, config, onnx_path, samples=None, random_sets=2)
    assert [item.origin for item in sets] == ["random #1", "random #2"]
    assert all(item.arrays["x"].shape == (2, 16) for item in sets)  # max_batch_size rows


def test_a_reshaped_input_is_fed_in_the_shape_the_model_receives(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    onnx_path = onnx_path_of(om_dynamic_batch)
    config = parse_config("""
        name: "classifier" max_batch_size: 4
        input [{ name: "x" data_type: TYPE_FP32 dims: [4, 4] reshape { shape: [16] } }]
        model_warmup [{ name: "w0" batch_size: 2 inputs { key: "x" value:
            { data_type: TYPE_FP32 dims: [4, 4] random_data: true } } }]
    """)
    sets = gate_inputs(tmp_path, config, onnx_path, samples=None, random_sets=1)
    assert [item.arrays["x"].shape for item in sets] == [(2, 16), (4, 16)]
    assert check_accuracy(onnx_path, om_dynamic_batch, sets, Thresholds(), runtime=EMULATOR).passed


def test_dynamic_axes_take_the_given_dims_and_ids_stay_in_range(om_dims: Path) -> None:
    onnx_path = onnx_path_of(om_dims)
    config = parse_config("""
        name: "encoder" max_batch_size: 0
        input [{ name: "input_ids" data_type: TYPE_INT64 dims: [1, -1] },
               { name: "attention_mask" data_type: TYPE_INT64 dims: [1, -1] }]
    """)
    with pytest.raises(UserError, match=r"input 'input_ids' has dims \[1, -1\]"):
        gate_inputs(onnx_path.parent, config, onnx_path, samples=None)
    sets = gate_inputs(
        onnx_path.parent,
        config,
        onnx_path,
        samples=None,
        dims={"input_ids": [1, 16], "attention_mask": [1, 16]},
    )
    ids = np.concatenate([item.arrays["input_ids"] for item in sets])
    assert ids.dtype == np.int64 and ids.shape == (3, 16)
    assert ids.min() >= 0 and ids.max() < INT_HIGH and len(np.unique(ids)) > 4
    result = check_accuracy(onnx_path, om_dims, sets, Thresholds(), runtime=EMULATOR)
    assert result.passed and [output.name for output in result.outputs] == ["hidden"]
    assert result.outputs[0].top_k is None  # 3-D: not classifier-like


def test_an_om_passes_against_its_own_onnx(tmp_path: Path, om_dynamic_batch: Path) -> None:
    model_dir, _ = mlp_model_dir(tmp_path)
    onnx_path = onnx_path_of(om_dynamic_batch)
    sets = gate_inputs(model_dir, parse_config(MLP_CONFIG), onnx_path, samples=None)
    result = check_accuracy(onnx_path, om_dynamic_batch, sets, Thresholds(), runtime=EMULATOR)
    assert result.passed
    assert result.origins == [item.origin for item in sets]
    y, z = result.outputs
    assert (y.name, z.name) == ("y", "z")
    assert y.passed and y.max_abs == 0.0 and y.cosine == pytest.approx(1.0)
    rows = 2 + 1 + 4 + 3 * RANDOM_ROWS
    assert y.top_k is not None and (y.top_k.rows, y.top_k.top1, y.top_k.top5) == (rows, rows, rows)
    assert z.top_k is None  # one class: not classifier-like
    record = json.loads(json.dumps(result.as_dict(), allow_nan=False))
    assert record["passed"] is True and record["input_sets"] == result.origins
    assert record["outputs"][0] == {
        "name": "y",
        "passed": True,
        "max_abs": 0.0,
        "max_rel": 0.0,
        "cosine": pytest.approx(1.0),
        "mismatched": 0,
        "top1": 1.0,
        "top5": 1.0,
        "worst_input": y.worst,
        "problem": "",
        "metric": "classes",
        "per_input": [
            {"input": origin, "passed": True, "top1": 1.0, "cosine": pytest.approx(1.0)}
            | {"problem": None}
            for origin in result.origins
        ],
    }


def test_an_om_of_another_graph_fails_on_the_output_that_differs(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    model_dir, _ = mlp_model_dir(tmp_path)
    onnx_path = onnx_path_of(om_dynamic_batch)
    other = negated_z(onnx_path, tmp_path / "other.onnx")
    om = compile_onnx(other, tmp_path / "other", input_shape="x:-1,16", dynamic_batch_size="1,8")
    sets = gate_inputs(model_dir, parse_config(MLP_CONFIG), onnx_path, samples=None)
    result = check_accuracy(onnx_path, om, sets, Thresholds(), runtime=EMULATOR)
    assert not result.passed
    y, z = result.outputs
    assert y.passed and not z.passed
    assert z.cosine < 0 and z.mismatched > 0
    assert z.worst == "warmup 'w0'"  # the lowest cosine (-1 on every set), first of the ties
    record = result.as_dict()
    assert [(item["name"], item["passed"]) for item in record["outputs"]] == [
        ("y", True),
        ("z", False),
    ]


def test_an_all_nan_output_fails_the_gate_by_name(tmp_path: Path) -> None:
    onnx_path = build_cancelling(tmp_path / "cancelling.onnx")  # NaN everywhere in float16
    om = compile_onnx(onnx_path, tmp_path / "cancelling", precision_mode="force_fp16")
    config = parse_config('input [{ name: "x" data_type: TYPE_FP32 dims: [4, 16] }]')
    sets = gate_inputs(tmp_path, config, onnx_path, samples=None)
    result = check_accuracy(onnx_path, om, sets, Thresholds(), runtime=EMULATOR)
    (y,) = result.outputs
    assert not result.passed and y.problem.startswith("NaN in 64 of 64 elements")
    record = json.loads(json.dumps(result.as_dict(), allow_nan=False))
    assert record["outputs"][0]["cosine"] is None  # no statistic, not a perfect 1.0


def test_top_k_agreement_of_a_classifier() -> None:
    rng = np.random.default_rng(1)
    reference = rng.standard_normal((4, 10)).astype(np.float32)
    value = reference.copy()
    order = np.argsort(-reference, axis=1)
    # row 1: the top two classes swap (top-1 differs, the top-5 set is the same)
    value[1, order[1, 0]], value[1, order[1, 1]] = (
        reference[1, order[1, 1]],
        reference[1, order[1, 0]],
    )
    # row 2: the 6th class rises to 3rd (top-1 the same, the top-5 set differs)
    value[2, order[2, 5]] = reference[2, order[2, 2]] + 1e-3
    agreement = top_k_agreement(value, reference)
    assert agreement is not None
    assert (agreement.rows, agreement.top1, agreement.top5) == (4, 3, 3)
    assert agreement.top1_fraction == 0.75
    few = top_k_agreement(value[:, :4], reference[:, :4])
    assert few is not None and few.top5 is None and few.top5_fraction is None
    assert top_k_agreement(value[:, :1], reference[:, :1]) is None  # one class
    assert top_k_agreement(value.reshape(2, 2, 10), reference.reshape(2, 2, 10)) is None
    assert top_k_agreement(value.astype(np.int32), reference.astype(np.int32)) is None


def test_ladder_records_a_compile_error_and_moves_on(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    onnx_path = onnx_path_of(om_dynamic_batch)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not a model")
    sets = gate_inputs(
        tmp_path, parse_config(MLP_CONFIG.split("model_warmup")[0]), onnx_path, samples=None
    )

    def compile_at(mode: PrecisionMode, keep: Sequence[str]) -> Path:
        source = broken if mode == PrecisionMode.FORCE_FP16 else onnx_path
        return compile_onnx(
            source,
            tmp_path / mode.value,
            input_shape="x:-1,16",
            dynamic_batch_size="1,8",
            precision_mode=mode,
        )

    ladder = climb_ladder(
        PrecisionMode.FORCE_FP16,
        compile_at,
        lambda om: check_accuracy(onnx_path, om, sets, Thresholds(), runtime=EMULATOR),
    )
    first, second = ladder.attempts
    assert first.mode == PrecisionMode.FORCE_FP16 and first.om is None and first.result is None
    assert "is not a valid ONNX model" in first.error and not first.passed
    assert second.mode == PrecisionMode.ALLOW_MIX_PRECISION and second.passed
    assert ladder.passed_mode == PrecisionMode.ALLOW_MIX_PRECISION
    assert ladder.passed_attempt is second and second.om == tmp_path / "allow_mix_precision.om"
    record = json.loads(json.dumps(ladder.as_dict(), allow_nan=False))
    assert record["passed_mode"] == "allow_mix_precision"
    assert [item["compile_error"] is None for item in record["attempts"]] == [False, True]


def test_ladder_without_a_passing_mode(tmp_path: Path, om_dynamic_batch: Path) -> None:
    onnx_path = onnx_path_of(om_dynamic_batch)
    other = negated_z(onnx_path, tmp_path / "other.onnx")
    sets = gate_inputs(
        tmp_path,
        parse_config(MLP_CONFIG.split("model_warmup")[0]),
        onnx_path,
        samples=None,
        random_sets=1,
    )

    def compile_at(mode: PrecisionMode, keep: Sequence[str]) -> Path:
        return compile_onnx(other, tmp_path / mode.value, input_shape="x:8,16", precision_mode=mode)

    def check(om: Path) -> AccuracyResult:
        return check_accuracy(onnx_path, om, sets, Thresholds(), runtime=EMULATOR)

    ladder = climb_ladder(PrecisionMode.FORCE_FP16, compile_at, check)
    assert [attempt.mode for attempt in ladder.attempts] == list(PRECISION_LADDER)
    assert ladder.passed_mode is None and ladder.passed_attempt is None
    assert all(attempt.result is not None and not attempt.passed for attempt in ladder.attempts)
    assert ladder.as_dict()["passed_mode"] is None
    # from a later mode up; a mode off the ladder alone
    start = PrecisionMode.MUST_KEEP_ORIGIN_DTYPE
    assert [a.mode for a in climb_ladder(start, compile_at, check).attempts] == [start]
    assert ladder_from(PrecisionMode.ALLOW_FP32_TO_FP16) == list(PRECISION_LADDER[2:])
    assert ladder_from(PrecisionMode.FORCE_FP32) == [PrecisionMode.FORCE_FP32]


def test_ladder_climbs_past_force_fp16_for_a_model_that_overflows_it(tmp_path: Path) -> None:
    onnx_path = build_fp16_overflow(tmp_path / "overflow.onnx")
    config = parse_config("""
        name: "overflow" max_batch_size: 8
        input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
    """)
    sets = gate_inputs(tmp_path, config, onnx_path, samples=None)
    assert max(abs(item.arrays["x"]).max() for item in sets) > 1  # intermediates above 65504

    def compile_at(mode: PrecisionMode, keep: Sequence[str]) -> Path:
        return compile_onnx(
            onnx_path,
            tmp_path / mode.value,
            input_shape="x:-1,4",
            dynamic_batch_size="1,2,4,8",
            precision_mode=mode,
        )

    ladder = climb_ladder(
        PrecisionMode.FORCE_FP16,
        compile_at,
        lambda om: check_accuracy(onnx_path, om, sets, Thresholds(), runtime=EMULATOR),
    )
    first = ladder.attempts[0]
    assert first.mode == PrecisionMode.FORCE_FP16 and first.result is not None
    assert [(output.name, output.passed) for output in first.result.outputs] == [("y", False)]
    assert ladder.passed_mode not in (None, PrecisionMode.FORCE_FP16)
    assert ladder.attempts[-1].passed


def test_nan_or_inf_anywhere_fails_by_name_and_the_report_says_nan() -> None:
    reference = np.full((2, 3), 0.5, np.float32)
    for metric in Metric:
        verdict = judge(np.full((2, 3), np.nan, np.float32), reference, metric, Thresholds())
        assert not verdict.passed and verdict.problem.startswith("NaN in 6 of 6 elements"), metric
    value = reference.copy()
    value[0, 1] = np.inf
    problem = judge(value, reference, Metric.VALUES, Thresholds()).problem
    assert problem.startswith("inf in 1 of 6 elements")
    nan = SetJudgement(
        "sample a.npz",
        compare_arrays("om", "y", np.full((2, 3), np.nan), reference, Thresholds()),
        judge(np.full((2, 3), np.nan, np.float32), reference, Metric.VALUES, Thresholds()),
    )
    output = _over_sets("y", Metric.VALUES, [nan])
    assert not output.passed and output.problem.startswith("NaN in 6 of 6 elements")
    result = AccuracyResult([output], ["sample a.npz"], Thresholds())
    ladder = LadderResult([LadderAttempt(PrecisionMode.FORCE_FP16, None, result)])
    report = "\n".join(_accuracy_lines({"1": ladder.as_dict()}))
    assert "NO: NaN in 6 of 6 elements" in report


def test_each_output_is_judged_by_the_metric_that_fits_it() -> None:
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((4, 10)).astype(np.float32)
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    assert default_metric(logits) == Metric.CLASSES  # [rows, classes]
    assert default_metric(probabilities.reshape(2, 2, 10)) == Metric.CLASSES  # rows sum to 1
    assert default_metric(logits.reshape(2, 2, 10)) == Metric.VALUES  # 3-D, not softmax rows
    assert default_metric(np.arange(6).reshape(2, 3)) == Metric.EXACT
    # the same top-1 classes, a little noise: classes pass, element-wise fails
    noisy = logits + rng.normal(0, 0.02, logits.shape).astype(np.float32)
    assert (noisy.argmax(axis=1) == logits.argmax(axis=1)).all()
    assert judge(noisy, logits, Metric.CLASSES, Thresholds()).passed
    assert not judge(noisy, logits, Metric.ELEMENTS, Thresholds()).passed
    boxes = np.array([[10.0, 20.0, 110.0, 220.0]], np.float32)
    assert judge(boxes + 0.4, boxes, Metric.COORDINATES, Thresholds()).passed
    assert not judge(boxes + 0.4, boxes, Metric.COORDINATES, Thresholds(), 0.25).passed
    assert parse_metrics(["yolo/boxes=coordinates:1", "ids=exact"]) == (
        MetricChoice("boxes", Metric.COORDINATES, 1.0, "yolo"),
        MetricChoice("ids", Metric.EXACT),
    )
    for bad in ("boxes", "boxes=pixels", "/boxes=exact", "boxes=coordinates:-1"):
        with pytest.raises(UserError, match="--metric"):
            parse_metrics([bad])


def test_the_fp32_island_is_the_operators_that_overflow_float16(tmp_path: Path) -> None:
    onnx_path = build_fp16_overflow(tmp_path / "overflow.onnx")
    small = InputSet("sample small.npz", {"x": np.full((2, 4), 0.5, np.float32)})
    large = InputSet("sample large.npz", {"x": np.full((2, 4), 2.0, np.float32)})
    assert overflowing_operators(onnx_path, [small]) == []
    # 2e5 is written by scale_up and read by scale_down: both stay in FP32
    assert overflowing_operators(onnx_path, [small, large]) == ["scale_up", "scale_down"]
    sets = [small, large]
    keep = write_keep_dtype(tmp_path / "keep_dtype.cfg", overflowing_operators(onnx_path, sets))
    om = compile_onnx(onnx_path, tmp_path / "island", input_shape="x:2,4", keep_dtype=keep)
    assert check_accuracy(onnx_path, om, sets, Thresholds(), runtime=EMULATOR).passed
    whole = compile_onnx(onnx_path, tmp_path / "fp16", input_shape="x:2,4")
    result = check_accuracy(onnx_path, whole, sets, Thresholds(), runtime=EMULATOR)
    assert not result.passed and "inf in 8 of 8 elements" in result.outputs[0].problem


def test_the_bisection_finds_the_operators_an_island_needs() -> None:
    names = [f"op{k}" for k in range(40)]
    needed = {"op7", "op31"}
    checks: list[list[str]] = []

    def passes(keep: Sequence[str]) -> bool:
        checks.append(list(keep))
        return needed <= set(keep)

    assert bisect_island(names, passes, budget=40) == ["op7", "op31"]
    assert len(checks) <= 2 * 2 * 6 + 1
    assert bisect_island(names, lambda keep: False, budget=40) == []  # no island works
    assert bisect_island(names, passes, budget=3) == []  # the budget runs out


def test_a_tie_broken_the_other_way_is_the_same_class() -> None:
    reference = np.array([[0.2, 0.5, 0.5 - 1e-5, 0.1], [0.9, 0.1, 0.0, 0.0]], np.float32)
    value = reference.copy()
    value[0, 2] = 0.5 + 1e-5  # the .om picks class 2, which ties with class 1 in the ONNX
    assert judge(value, reference, Metric.CLASSES, Thresholds()).figures["top1"] == 1.0
    value[1] = [0.0, 0.9, 0.1, 0.0]  # a real disagreement
    verdict = judge(value, reference, Metric.CLASSES, Thresholds())
    assert verdict.figures["top1"] == 0.5 and not verdict.passed
