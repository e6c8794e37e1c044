"""The benchmark's hand-written pyACL model.py (`benchmarks/expert_model.py`) served by the real
tritonserver on the emulator, and the correctness check every model of section 7 passes first.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ge_python_backend.client import TritonClient
from ge_python_backend.repository.scaffold import scaffold

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import analysis  # noqa: E402
import scenarios  # noqa: E402

pytestmark = pytest.mark.e2e

# The floor's arithmetic off by one: what the correctness check must catch.
WRONG_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy() * 2)]
            )
            for r in requests
        ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work = tmp_path_factory.mktemp("expert")
    om = scenarios.build_small_model(work)
    repository = work / "models"
    scaffold(om, repository, name="ours", runtime="emulator")
    scenarios.add_variant(repository, "ours", "expert", ROOT / "benchmarks" / "expert_model.py")
    (work / "wrong.py").write_text(WRONG_MODEL)
    scenarios.add_variant(repository, "ours", "wrong", work / "wrong.py")
    env = {"GE_PYTHON_BACKEND_ACL": "emulator"}
    with scenarios.serving(repository, work, env=env) as running:
        yield running


@pytest.mark.parametrize("model", scenarios.EXPERT_MODELS)
def test_ours_and_the_expert_answer_batched_requests_correctly(server: Any, model: str) -> None:
    scenarios.check_answers(server, model)


def test_the_correctness_check_catches_a_wrong_answer(server: Any) -> None:
    with pytest.raises(SystemExit, match=r"^wrong: wrong answer to request \d \(\d rows\)$"):
        scenarios.check_answers(server, "wrong")


def test_the_expert_answers_a_request_below_a_gear_and_one_filling_the_largest(server: Any) -> None:
    # 3 rows run at gear 4; a 16-row request fills the largest gear
    with TritonClient(server.urls.grpc, "grpc") as client:
        for rows in (3, 16):
            x = np.arange(rows * scenarios.WIDTH, dtype=np.float32).reshape(rows, -1)
            (y,) = client.infer("expert", {"x": (x, "FP32")}, ["y"]).values()
            assert y.shape == (rows, scenarios.WIDTH)
            np.testing.assert_array_equal(y, x * 2 + 1)


def test_the_cpu_witness_measures_both_models_at_each_level_in_analysis_shape(
    server: Any, tmp_path: Path
) -> None:
    recorder = scenarios.Recorder(tmp_path)
    plan = scenarios.Plan(rounds=1, seconds=0.5, warmup=5)
    cpu = scenarios.expert_cpu(recorder, server, [1, 2], plan)
    assert len(recorder.commands) == 4  # both models at both levels, one round
    assert [[e["concurrency"] for e in r] for r in cpu["ours"]] == [[1, 2]]
    for level in (1, 2):
        witness = analysis.expert_cpu(cpu, level)
        for model in scenarios.EXPERT_MODELS:
            assert witness.stub[model] > 0 and witness.compute_infer[model] > 0
        assert witness.by_stub == pytest.approx(witness.stub["expert"] / witness.stub["ours"])
