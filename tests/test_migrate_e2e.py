"""End to end: a GPU team's Triton repository migrated on the emulator, then served by the real
tritonserver and asked what the team's clients ask the GPU server (same model names, input names
and dtypes); the answers are within the migration's recorded tolerance of onnxruntime on the
original ONNX, the ensemble's included.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_helpers import http_address, model_states, running_server
from gpu_repository import CLIENT_INPUTS, build_gpu_repository
from onnx_models import reference

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, random_array, typed
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.validation import validate_repository

pytestmark = pytest.mark.e2e

CONVERTED = ("classifier", "overflow", "scorer", "tagger")
COPIED = ("classify_raw", "preprocess")
MIGRATE_FLAGS = ["--runtime", "emulator", "--gears", "tagger/S:8,16", "--device-ids", "0,1"]
MIGRATE_FLAGS += ["--jobs", "2", "--check-serving"]


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, int]]:
    root = tmp_path_factory.mktemp("migrate")
    source = build_gpu_repository(root / "gpu_models")
    destination = root / "npu_models"
    code = main(["migrate", str(source), str(destination), *MIGRATE_FLAGS])
    yield source, destination, code


def _report(destination: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((destination / "migration.json").read_text())
    return {model["name"]: model for model in data["models"]}


def _within(answer: np.ndarray, expected: np.ndarray, report: dict[str, Any]) -> None:
    """The migration's rule: every element within atol + rtol * |expected|."""
    limits = report["thresholds"]
    np.testing.assert_allclose(answer, expected, rtol=limits["rtol"], atol=limits["atol"])


def test_migrate_converts_copies_and_names_what_to_provide(
    migrated: tuple[Path, Path, int],
) -> None:
    source, destination, code = migrated
    assert code == 0, (destination / "MIGRATION.md").read_text()
    models = _report(destination)
    assert {name: m["status"] for name, m in models.items()} == {
        **dict.fromkeys(CONVERTED, "converted"),
        **dict.fromkeys(COPIED, "copied"),
        "detector": "needs_onnx",
    }
    assert models["detector"]["provide"] == ["DIR/detector/1/model.onnx"]
    assert "--onnx-from" in (destination / "MIGRATION.md").read_text()
    assert [v["version"] for v in models["scorer"]["versions"]] == [1, 2]
    assert "--dynamic_dims=" in models["tagger"]["versions"][0]["atc_command"]
    # the tagger's dims gears are its batch sizes times its lengths: it keeps Triton's batching
    # (rows padded within the gears of a length, as batch gears pad them), every field placed
    tagger = models["tagger"]["config_diff"]
    fields = [change["field"] for changes in tagger.values() for change in changes]
    assert len(fields) == len(set(fields)) and not tagger["refused"]
    kept = {change["field"] for change in tagger["kept"]}
    assert {"max_batch_size", "input[0].dims", "dynamic_batching"} <= kept
    problems = {r.name: r.problems for r in validate_repository(destination) if not r.ok}
    assert not problems
    # --check-serving: a throwaway tritonserver loaded every model and each answered a probe
    serving = json.loads((destination / "migration.json").read_text())["serving"]
    assert {p["name"]: p["ok"] for p in serving} == dict.fromkeys([*CONVERTED, *COPIED], True)


def test_the_gate_catches_what_float16_breaks_and_keeps_an_fp32_island(
    migrated: tuple[Path, Path, int],
) -> None:
    _, destination, _ = migrated
    ladder = _report(destination)["overflow"]["accuracy"]["1"]
    first, *_ = ladder["attempts"]
    assert first["precision_mode"] == "force_fp16" and not first["passed"]
    # the two operators whose values pass float16's range stay in FP32; the rest keeps FP16
    assert ladder["passed_mode"] == "force_fp16"
    assert ladder["fp32_operators"] == ["scale_up", "scale_down"]
    command = _report(destination)["overflow"]["versions"][0]["atc_command"]
    keep_file = destination / "overflow" / "1" / "keep_dtype.cfg"
    assert f"--keep_dtype={keep_file}" in command
    assert keep_file.read_text().split() == ["scale_up", "scale_down"]
    # the classifier passes at ATC's default
    assert _report(destination)["classifier"]["accuracy"]["1"]["passed_mode"] == "force_fp16"


def test_the_config_keeps_what_the_team_wrote(migrated: tuple[Path, Path, int]) -> None:
    _, destination, _ = migrated
    config = load_model_config(destination / "classifier" / "config.pbtxt")
    assert config.backend == "python" and not config.platform
    assert [group.kind for group in config.instance_group] == [config.instance_group[0].KIND_CPU]
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert config.dynamic_batching.priority_levels == 2
    assert config.parameters["team"].string_value == "vision"
    assert "intra_op_thread_count" not in config.parameters
    assert config.output[0].label_filename == "labels.txt"
    assert (destination / "classifier" / "labels.txt").is_file()
    assert (destination / "classifier" / "warmup" / "image.bin").is_file()


def test_the_migrated_repository_answers_the_team_clients(
    migrated: tuple[Path, Path, int], tmp_path: Path
) -> None:
    source, destination, _ = migrated
    report = json.loads((destination / "migration.json").read_text())
    rng = np.random.default_rng(11)
    requests = {
        name: {
            input_name: random_array(
                {np.float32: "FP32", np.int64: "INT64", np.uint8: "UINT8"}[dtype], shape, rng
            )
            for input_name, (dtype, shape) in inputs.items()
        }
        for name, inputs in CLIENT_INPUTS.items()
    }
    with running_server(destination, log_path=tmp_path / "triton.log") as server:
        states = model_states(server)
        assert {name for name, (state, _) in states.items() if state == "READY"} == {
            *CONVERTED,
            *COPIED,
        }, states
        with TritonClient(http_address(server), "http") as client:
            for name in ("classifier", "tagger", "overflow"):
                answer = client.infer(name, typed(requests[name]))
                expected = reference(source / name / "1" / "model.onnx", requests[name])
                for output, value in expected.items():
                    _within(answer[output], value, report)
            for version in ("1", "2"):
                answer = client.infer("scorer", typed(requests["scorer"]), version=version)
                expected = reference(source / "scorer" / version / "model.onnx", requests["scorer"])
                for output, value in expected.items():
                    _within(answer[output], value, report)
            raw = requests["classify_raw"]["raw"]
            answer = client.infer("classify_raw", typed({"raw": raw}))
            image = (raw.astype(np.float32) / 255.0).astype(np.float32)
            expected = reference(source / "classifier" / "1" / "model.onnx", {"image": image})
            _within(answer["logits"], expected["logits"], report)
