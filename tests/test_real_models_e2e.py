"""End to end on public trained models (tests/real_models.py): a GPU team's repository of them
migrated on the emulator with the clients' real requests as samples, served by the real
tritonserver, and answering those requests with the same task answer as onnxruntime on the
original ONNX (same text, same top-1, same boxes within IoU 0.99).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import real_models
from e2e_helpers import http_address, model_states, running_server
from onnx_models import reference

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.repository.config import load_model_config

pytestmark = pytest.mark.e2e

SERVED = tuple(real_models.GPU_CONFIGS)


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, int]]:
    root = tmp_path_factory.mktemp("real")
    samples = root / "samples"
    source = real_models.build_real_repository(root / "gpu_models", samples)
    destination = root / "npu_models"
    gears = [flag for gear in real_models.GEARS for flag in ("--gears", gear)]
    code = main(
        ["migrate", str(source), str(destination), "--runtime", "emulator", *gears]
        + ["--samples", str(samples), "--jobs", "2"]
    )
    yield source, destination, code


def _report(destination: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((destination / "migration.json").read_text())
    return {model["name"]: model for model in data["models"]}


def test_every_real_model_migrates_without_keeping_the_whole_model_in_fp32(
    migrated: tuple[Path, Path, int],
) -> None:
    _, destination, code = migrated
    report = (destination / "MIGRATION.md").read_text()
    assert code == 0, report
    models = _report(destination)
    assert {name: models[name]["status"] for name in SERVED} == dict.fromkeys(SERVED, "converted")
    modes = {name: models[name]["accuracy"]["1"]["passed_mode"] for name in SERVED}
    # ATC's default for every one: FP16 where the device is fast (magika with an FP32 island)
    assert set(modes.values()) == {"force_fp16"}, modes
    # the batch-and-width-gear recognizer keeps Triton's batching: rows are padded within its
    # gears of the same width
    config = load_model_config(destination / "ocr_rec" / "config.pbtxt")
    assert config.max_batch_size == 8 and list(config.input[0].dims) == [3, 48, -1]
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]


def test_the_overflowing_model_serves_with_an_fp32_island_the_report_names(
    migrated: tuple[Path, Path, int],
) -> None:
    _, destination, _ = migrated
    magika = _report(destination)["magika"]
    island = magika["fp32_operators"]
    # its LayerNorm's sum of squares (1.8e5) and its GELU's cube pass float16's 65504
    assert any(name.endswith("LayerNorm_1/Sum_1") for name in island), island
    assert len(island) <= 8, island
    assert (destination / "magika" / "1" / "keep_dtype.cfg").read_text().split() == island
    assert "--keep_dtype=" in magika["versions"][0]["atc_command"]
    report = (destination / "MIGRATION.md").read_text()
    assert f"| 1 | force_fp16 | {len(island)} |" in report and island[0] in report
    assert magika["accuracy"]["1"]["passed_mode"] == "force_fp16"


def test_the_served_real_models_give_onnxruntime_s_answers(
    migrated: tuple[Path, Path, int], tmp_path: Path
) -> None:
    source, destination, _ = migrated
    requests = real_models.client_requests()
    with running_server(destination, log_path=tmp_path / "triton.log") as server:
        states = model_states(server)
        assert {name for name, (state, _) in states.items() if state == "READY"} >= set(SERVED)
        with TritonClient(http_address(server), "http") as client:
            for name in SERVED:
                onnx_path = source / name / "1" / "model.onnx"
                for request in requests[name]:
                    served = client.infer(name, typed(request))
                    expected = reference(onnx_path, request)
                    found = real_models.answer(name, [served[key] for key in expected])
                    wanted = real_models.answer(name, list(expected.values()))
                    assert real_models.same_answer(name, found, wanted), (name, found, wanted)
            # a GPU client's batch of 6 lines to the batch-and-width-gear recognizer: padded to
            # its batch-8 gear of width 160, answered as onnxruntime reads the 6 lines
            lines = [real_models.rendered_text(f"line {k}") for k in range(6)]
            batch = {"x": np.stack([real_models.ocr_line_input(line, 160) for line in lines])}
            served = client.infer("ocr_rec", typed(batch))
            expected = reference(source / "ocr_rec" / "1" / "model.onnx", batch)
            texts = real_models.answer("ocr_rec", [served["softmax_11.tmp_0"]])
            assert texts == real_models.answer("ocr_rec", list(expected.values()))
            assert len(texts) == 6 and all(text.startswith("line ") for text in texts), texts
