"""`validate` on a repository as teams have them: our models beside other Python models and
ensembles over both; and the serve check (`validate --serve`, `tools.probe.probe_repository`)
with the real tritonserver.

The repository: `pre` (someone else's Python model, doubling FP32 [16] `raw` into `scaled`),
`mlp` (ours: the emulator `.om` of `onnx_models.build_mlp`, x [16] -> y [8], z [1], batch up to 8)
and `ens`, the ensemble `pre` -> `mlp`. Each ensemble problem is made by editing the ensemble's
config text.
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest
from e2e_helpers import write_python_model

from ge_python_backend.cli import main
from ge_python_backend.repository.report import (
    KIND_ENSEMBLE,
    KIND_OURS,
    KIND_PYTHON,
    ModelReport,
)
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.tools.probe import probe_repository

PRE_CONFIG = """
    name: "pre"
    backend: "python"
    max_batch_size: 8
    input { name: "raw" data_type: TYPE_FP32 dims: [16] }
    output { name: "scaled" data_type: TYPE_FP32 dims: [16] }
    instance_group { kind: KIND_CPU count: 1 }
"""
PRE_MODEL = """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                raw = pb_utils.get_input_tensor_by_name(request, "raw").as_numpy()
                scaled = pb_utils.Tensor("scaled", (raw * 2).astype(np.float32))
                responses.append(pb_utils.InferenceResponse([scaled]))
            return responses
"""
ENSEMBLE = """
name: "ens"
platform: "ensemble"
max_batch_size: 8
input { name: "image" data_type: TYPE_FP32 dims: [16] }
output { name: "scores" data_type: TYPE_FP32 dims: [8] }
output { name: "score" data_type: TYPE_FP32 dims: [1] }
ensemble_scheduling {
  step {
    model_name: "pre"
    model_version: -1
    input_map { key: "raw" value: "image" }
    output_map { key: "scaled" value: "features" }
  }
  step {
    model_name: "mlp"
    model_version: -1
    input_map { key: "x" value: "features" }
    output_map { key: "y" value: "scores" }
    output_map { key: "z" value: "score" }
  }
}
"""
STEP0 = "step 0 (model 'pre')"
STEP1 = "step 1 (model 'mlp')"


def write_ensemble(repository: Path, text: str, name: str = "ens") -> None:
    (repository / name / "1").mkdir(parents=True, exist_ok=True)  # Triton wants a version dir
    (repository / name / "config.pbtxt").write_text(
        text.replace('\nname: "ens"', f'\nname: "{name}"')
    )


@pytest.fixture()
def repository(tmp_path: Path, om_dynamic_batch: Path) -> Path:
    repo = tmp_path / "models"
    scaffold(om_dynamic_batch, repo, name="mlp", runtime="emulator")
    write_python_model(repo, "pre", PRE_CONFIG, PRE_MODEL)
    write_ensemble(repo, ENSEMBLE)
    return repo


def reports_of(repository: Path) -> dict[str, ModelReport]:
    return {report.name: report for report in validate_repository(repository)}


def ensemble_report(repository: Path, text: str) -> ModelReport:
    write_ensemble(repository, text)
    return reports_of(repository)["ens"]


# --- a correct repository ---------------------------------------------------------------------


def test_a_mixed_repository_passes(repository: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reports = reports_of(repository)
    assert {name: (r.kind, r.ok, r.problems) for name, r in reports.items()} == {
        "ens": (KIND_ENSEMBLE, True, []),
        "mlp": (KIND_OURS, True, []),
        "pre": (KIND_PYTHON, True, []),
    }
    assert reports["ens"].notes == []  # every step's tensors were checked
    assert main(["validate", str(repository)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "pre: OK (versions: 1; python model, not ours: config checked, files not)" in lines
    assert "ens: OK (versions: 1; ensemble: steps and their tensors checked)" in lines
    assert "mlp: OK (versions: 1)" in lines


def test_ensemble_of_one_name_checks_its_steps(repository: Path) -> None:
    write_ensemble(repository, ENSEMBLE.replace('key: "x"', 'key: "input"'))
    [report] = validate_repository(repository, name="ens")
    assert report.name == "ens"
    assert report.problems == [
        f"{STEP1}: input_map key 'input' (fed from 'features') is not an input of the model; "
        "it has ['x']",
        f"{STEP1}: model input 'x' is not fed (no input_map entry for it)",
    ]


def test_batch_axis_and_wildcards_connect(repository: Path) -> None:
    # Without batching on the ensemble, its full shapes meet the batched models' dims plus
    # the batch axis; -1 matches any size.
    text = (
        ENSEMBLE.replace("max_batch_size: 8", "max_batch_size: 0")
        .replace("dims: [16]", "dims: [-1, -1]")
        .replace("dims: [8]", "dims: [-1, 8]")
        .replace("dims: [1] }", "dims: [-1, 1] }")
    )
    report = ensemble_report(repository, text)
    assert (report.ok, report.problems) == (True, [])


def test_our_model_without_config_gives_its_tensors_from_the_om(
    repository: Path, om_dynamic_batch: Path
) -> None:
    (repository / "mlp" / "config.pbtxt").unlink()  # auto-complete reads the .om
    reports = {r.name: r for r in validate_repository(repository, runtime="emulator")}
    assert (reports["ens"].ok, reports["ens"].problems) == (True, [])
    wrong = ENSEMBLE.replace("dims: [8]", "dims: [4]")
    write_ensemble(repository, wrong)
    reports = {r.name: r for r in validate_repository(repository, runtime="emulator")}
    assert reports["ens"].problems == [
        f"tensor 'scores': shapes differ: {STEP1} output 'y' TYPE_FP32 [-1, 8] feeds ensemble "
        "output 'scores' TYPE_FP32 [-1, 4]"
    ]


# --- each problem kind ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(
            'model_name: "mlp"',
            'model_name: "resnet"',
            ["step 1 (model 'resnet'): no model 'resnet' in the repository"],
            id="step-model-missing",
        ),
        pytest.param(
            'key: "x"',
            'key: "input"',
            [
                f"{STEP1}: input_map key 'input' (fed from 'features') is not an input of the "
                "model; it has ['x']",
                f"{STEP1}: model input 'x' is not fed (no input_map entry for it)",
            ],
            id="not-an-input",
        ),
        pytest.param(
            'key: "z"',
            'key: "w"',
            [
                f"{STEP1}: output_map key 'w' (writing 'score') is not an output of the model; "
                "it has ['y', 'z']"
            ],
            id="not-an-output",
        ),
        pytest.param(
            'input_map { key: "x" value: "features" }',
            'input_map { key: "x" value: "feature" }',
            [
                f"{STEP1} input 'x' reads 'feature', which is neither an ensemble input nor any "
                "step's output",
                f"{STEP0} output 'scaled' writes 'features', which no step reads and is not an "
                "ensemble output (Triton refuses unused tensors)",
                "ensemble output 'score' is written by step 1 (model 'mlp'), which never runs",
                "ensemble output 'scores' is written by step 1 (model 'mlp'), which never runs",
            ],
            id="unfed",
        ),
        pytest.param(
            'name: "image" data_type: TYPE_FP32',
            'name: "image" data_type: TYPE_FP16',
            [
                "tensor 'image': data types differ: ensemble input 'image' TYPE_FP16 [-1, 16] "
                f"feeds {STEP0} input 'raw' TYPE_FP32 [-1, 16]"
            ],
            id="data-type",
        ),
        pytest.param(
            "dims: [8]",
            "dims: [4]",
            [
                f"tensor 'scores': shapes differ: {STEP1} output 'y' TYPE_FP32 [-1, 8] feeds "
                "ensemble output 'scores' TYPE_FP32 [-1, 4]"
            ],
            id="shape",
        ),
        pytest.param(
            'output { name: "score"',
            'output { name: "extra" data_type: TYPE_FP32 dims: [1] }\noutput { name: "score"',
            ["ensemble output 'extra' is not written by any step"],
            id="output-not-written",
        ),
        pytest.param(
            "output {",
            'input { name: "unused" data_type: TYPE_FP32 dims: [1] }\noutput {',
            ["ensemble input 'unused' is not read by any step"],
            id="input-unused",
        ),
        pytest.param(
            "max_batch_size: 8",
            "max_batch_size: 16",
            [
                f"{STEP0} has max_batch_size 8, below the ensemble's 16",
                f"{STEP1} has max_batch_size 8, below the ensemble's 16",
            ],
            id="max-batch-size",
        ),
        pytest.param(
            'model_version: -1\n    input_map { key: "x"',
            'model_version: 3\n    input_map { key: "x"',
            [f"{STEP1} asks for version 3, which the model does not have (versions: 1)"],
            id="version",
        ),
        pytest.param(
            "ensemble_scheduling {",
            "instance_group { kind: KIND_CPU }\nensemble_scheduling {",
            ["an ensemble cannot have instance_group (Triton refuses it)"],
            id="instance-group",
        ),
    ],
)
def test_each_problem_is_one_clear_line(
    repository: Path, old: str, new: str, expected: list[str]
) -> None:
    assert old in ENSEMBLE
    report = ensemble_report(repository, ENSEMBLE.replace(old, new, 1))
    assert not report.ok
    assert sorted(report.problems) == sorted(expected)


def test_a_tensor_written_twice(repository: Path) -> None:
    report = ensemble_report(
        repository, ENSEMBLE.replace('key: "z" value: "score"', 'key: "z" value: "scores"')
    )
    assert (
        f"tensor 'scores' is written by {STEP1} output 'y' and by {STEP1} output 'z'; each "
        "tensor has one producer"
    ) in report.problems
    assert "ensemble output 'score' is not written by any step" in report.problems


def test_a_cycle(repository: Path) -> None:
    cycle = ENSEMBLE.replace(
        'input_map { key: "raw" value: "image" }', 'input_map { key: "raw" value: "loop" }'
    ).replace(
        "  }\n}\n",
        '  }\n  step {\n    model_name: "pre"\n    input_map { key: "raw" value: "features" }'
        '\n    output_map { key: "scaled" value: "loop" }\n  }\n}\n',
    )
    report = ensemble_report(repository, cycle)
    assert (
        f"{STEP0} never runs: its inputs ['loop'] are written by steps that never run (a cycle)"
    ) in report.problems
    assert "ensemble input 'image' is not read by any step" in report.problems


def test_an_invalid_step_model_fails_the_ensemble(repository: Path) -> None:
    (repository / "mlp" / "1" / "model.py").unlink()
    reports = reports_of(repository)
    assert "version 1: model.py is missing" in reports["mlp"].problems
    assert reports["ens"].problems == [
        f"{STEP1}: the model is invalid (see its problems), so Triton will not load this ensemble"
    ]


def test_a_step_model_without_declared_tensors_is_a_note(repository: Path) -> None:
    config = repository / "pre" / "config.pbtxt"
    config.write_text('name: "pre"\nbackend: "python"\nmax_batch_size: 8\n')
    report = reports_of(repository)["ens"]
    assert report.ok
    assert report.notes == [
        f"{STEP0}: tensors not checked: its config.pbtxt does not declare both inputs and "
        "outputs (its model.py's auto_complete_config gives them)"
    ]


# --- other Python models: Triton's checks -----------------------------------------------------


def test_other_python_models_get_tritons_checks(repository: Path) -> None:
    pre = repository / "pre"
    shutil.move(pre / "1" / "model.py", pre / "1" / "preprocess.py")
    [report] = validate_repository(repository, name="pre")
    assert (report.kind, report.problems) == (KIND_PYTHON, ["version 1: model.py is missing"])
    config = pre / "config.pbtxt"
    config.write_text(config.read_text() + 'default_model_filename: "preprocess.py"\n')
    assert validate_repository(repository, name="pre")[0].problems == []
    config.write_text(
        config.read_text().replace("KIND_CPU", "KIND_GPU")
        + textwrap.dedent(
            """
            parameters {
              key: "EXECUTION_ENV_PATH"
              value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" }
            }
            """
        )
    )
    [report] = validate_repository(repository, name="pre")
    assert report.problems == [
        "instance_group has kind KIND_GPU: Triton refuses it on a host without NVIDIA GPUs "
        '("has kind KIND_GPU but no GPUs are available"); use KIND_CPU (ours: with the NPUs in '
        "the device_ids parameter)",
        "parameter EXECUTION_ENV_PATH names '$$TRITON_MODEL_DIRECTORY/env.tar.gz', and "
        f"{pre / 'env.tar.gz'} does not exist",
    ]
    (pre / "env.tar.gz").write_bytes(b"")
    assert len(validate_repository(repository, name="pre")[0].problems) == 1  # KIND_GPU only


# --- the serve check with the real tritonserver ----------------------------------------------


@pytest.mark.e2e
def test_probe_repository_serves_every_model(repository: Path, tmp_path: Path) -> None:
    results = probe_repository(repository, runtime="emulator", log_path=tmp_path / "t.log")
    assert [(r.name, r.states, r.ok) for r in results] == [
        ("ens", ("READY",), True),
        ("mlp", ("READY",), True),
        ("pre", ("READY",), True),
    ]
    by_name = {result.name: result for result in results}
    assert "answered in" in by_name["ens"].message
    assert "scores FP32 [1, 8]" in by_name["ens"].message  # the ensemble's own outputs


@pytest.mark.e2e
def test_validate_serve_reports_a_broken_model_while_the_rest_answer(
    repository: Path, om_dynamic_batch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = scaffold(om_dynamic_batch, repository, name="broken", runtime="emulator")
    data = broken.om_path.read_bytes()
    broken.om_path.write_bytes(data[: len(data) // 2])
    write_ensemble(repository, ENSEMBLE.replace('"mlp"', '"broken"'), name="ens_broken")
    assert main(["validate", str(repository), "--serve", "--runtime", "emulator"]) == 1
    out, progress = capsys.readouterr()
    assert "broken: INVALID (versions: 1)" in out  # the static checks already say why
    # progress on stderr: the server, the loads, then a line per model as it is probed
    lines = progress.splitlines()
    assert lines[0].startswith("tritonserver ready after ")
    assert lines[1].startswith("5 model(s) loaded after ")
    verdicts = dict(line.split("'")[1:3] for line in lines[2:])
    assert verdicts == {
        "broken": ": FAILED",
        "ens": ": answered",
        "ens_broken": ": FAILED",
        "mlp": ": answered",
        "pre": ": answered",
    }
    assert (
        "  problem: step 1 (model 'broken'): the model is invalid (see its problems), so Triton "
        "will not load this ensemble"
    ) in out
    lines = [line.strip() for line in out.splitlines() if line.startswith("  ")]
    served = {line.split(" ", 1)[0]: line for line in lines if " (" in line and ": " in line}
    for name in ("ens", "mlp", "pre"):
        assert served[name].startswith(f"{name} (READY): answered: model '{name}' at "), served
    assert served["broken"].startswith("broken (UNAVAILABLE): FAILED: version 1: UNAVAILABLE: ")
    assert f"{broken.om_path} is truncated" in served["broken"]
    # Never loaded, so the index gives no reason: the answer to loading it once more does.
    assert served["ens_broken"].startswith(
        "ens_broken (not loaded): FAILED: load failed for model 'ens_broken': ensemble "
        "'ens_broken' depends on 'broken' which has no loaded version"
    )


def test_an_ensemble_step_sees_the_verdict_of_an_inner_ensemble(repository: Path) -> None:
    outer = ENSEMBLE.split("ensemble_scheduling")[0] + textwrap.dedent(
        """
        ensemble_scheduling {
          step {
            model_name: "ens"
            input_map { key: "image" value: "image" }
            output_map { key: "scores" value: "scores" }
            output_map { key: "score" value: "score" }
          }
        }
        """
    )
    write_ensemble(repository, outer, name="a_outer")  # checked first by name, unless ordered
    assert reports_of(repository)["a_outer"].problems == []
    write_ensemble(
        repository, outer.replace('model_name: "ens"', 'model_name: "a_outer"'), "a_outer"
    )
    assert reports_of(repository)["a_outer"].problems == [
        "step 0 (model 'a_outer'): the ensemble uses itself through its steps; Triton refuses a "
        "circular dependency"
    ]
    write_ensemble(repository, outer, name="a_outer")
    write_ensemble(repository, ENSEMBLE.replace("dims: [8]", "dims: [4]"))
    reports = reports_of(repository)
    assert len(reports["ens"].problems) == 1
    assert reports["a_outer"].problems == [
        "step 0 (model 'ens'): the model is invalid (see its problems), so Triton will not load "
        "this ensemble",
        "tensor 'scores': shapes differ: step 0 (model 'ens') output 'scores' TYPE_FP32 [-1, 4] "
        "feeds ensemble output 'scores' TYPE_FP32 [-1, 8]",
    ]
