"""`ge-python-model tune` on the real tritonserver in explicit model-control mode: a scaffolded
emulator model under the calibrated ResNet-50 / Atlas 300I Pro device profile (as the saturation
benchmark runs it, `benchmarks/scenarios.py`), tuned without restarting the server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import http_address, running_server

from ge_python_backend import cli
from ge_python_backend.client import TritonClient
from ge_python_backend.emulator.timing import PROFILES
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.tools.tune import Candidate, candidate_of

TIMING = "profile=resnet50-310p3"
# The search keeps time for the confirmation (one round of 3 finalists, ~14 s here, ~21 s with
# its margin) and runs 12 or more trials before it on an idle host, fewer beside other tests:
# how many the budget holds is a speed, which `make bench` reports (BENCHMARKS.md, tune's table).
# 120 s: on a CI machine slowed by the parallel tests 90 s left the confirmation no room.
BUDGET_S = 120.0
CONFIRM_ROUNDS = 1
SLACK_S = 5.0  # reading the model, printing, the report
# The first test's latency target: configs here take p99 14-23 ms on an idle host; a CI machine
# loaded by the parallel tests pushed every finalist, the original config included, past 30 ms
# in the confirmation round (its search window had the original at 16 ms), and no winner was
# left. What the test checks (budget, no restart, the confirmation's winner within the target in
# every round, restoring) holds at any target the configs can meet.
P99_MS = 60


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("tune")
    repository = root / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator")
    with running_server(
        repository,
        env={"GE_EMULATOR_TIMING": TIMING},
        log_path=root / "triton.log",
        model_control_mode="explicit",
        load_models=["mlp"],
    ) as server:
        yield server, repository


def tune(server: Any, *args: str) -> int:
    return cli.main(
        [
            "tune",
            "--url",
            http_address(server),
            "--metrics-url",
            server.urls.metrics,
            "--model",
            "mlp",
            "--duration",
            "0.4",
            "--warmup",
            "4",
            *args,
        ]
    )


def served_candidate(server: Any) -> Candidate:
    with TritonClient(http_address(server)) as client:
        return candidate_of(client.model_config("mlp"))


@pytest.mark.e2e
def test_tune_finishes_in_budget_without_restarting_and_restores(
    served: tuple[Any, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, repository = served
    pid = server.pid
    original = served_candidate(server)
    assert original == candidate_of(load_model_config(repository / "mlp" / "config.pbtxt"))
    started = time.monotonic()
    args = ["--budget-s", f"{BUDGET_S:g}", "--max-instances", "2"]
    args += ["--confirm-rounds", str(CONFIRM_ROUNDS), "--p99-ms", str(P99_MS)]
    code = tune(server, *args, "--report", str(tmp_path / "report"))
    elapsed = time.monotonic() - started
    assert code == 0
    assert elapsed <= BUDGET_S + SLACK_S
    assert server.pid == pid and server.poll() is None  # the same Triton process, still up
    document = json.loads((tmp_path / "report" / "tune.json").read_text())
    trials = document["trials"]
    assert trials[0]["default"] and trials[0]["config"] == original.as_dict()
    assert all(t["loaded"] and t["error"] is None for t in trials), trials
    # the winner is the confirmation's: the original config or a finalist, within p99 in
    # every round (each finalist re-measured once a round); its search window is left out
    # (docs/guides/tune.md: a loaded CI machine gave the kept original config p99 35 ms in its
    # window)
    assert document["confirmation_rounds"] == CONFIRM_ROUNDS, document["confirmation_verdict"]
    confirmed = {entry["trial"]: entry for entry in document["confirmation"]}
    assert 0 in confirmed and document["winner"] in confirmed
    assert all(len(entry["rows_per_s"]) == CONFIRM_ROUNDS for entry in confirmed.values())
    assert all(p99 <= P99_MS for p99 in confirmed[document["winner"]]["p99_ms"])
    for trial in trials:
        assert trial["device_utilization"] > 0 and trial["rows_per_execution"] >= 1
        assert trial["padding_ratio"] >= 0 and trial["p50_ms"] <= trial["p99_ms"]
    # the grid varied both the pipeline depth and the instance count
    assert len({t["config"]["pipeline_depth"] for t in trials}) == 2
    assert len({t["config"]["instances"] for t in trials}) == 2
    assert served_candidate(server) == original  # restored
    out = capsys.readouterr().out
    assert "winner (trial" in out and "The original config was loaded back." in out
    markdown = (tmp_path / "report" / "TUNE.md").read_text()
    assert "## Gear advice" in markdown and "**winner**" in markdown


@pytest.mark.e2e
def test_apply_writes_a_config_that_validates_and_serves(
    served: tuple[Any, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, repository = served
    pid = server.pid
    report = tmp_path / "report"
    args = ["--budget-s", "35", "--max-instances", "1", "--confirm-rounds", "1"]
    args += ["--repository", str(repository)]
    args += ["--apply", "--report", str(report)]
    args += ["--request-rate", "50", "--arrival", "poisson"]  # trials under open-loop load
    # what is applied is the point here, not the budget: a CI machine loaded by the parallel
    # tests once served the original config at p99 51 ms, and no config met 30 ms to apply
    args += ["--p99-ms", "200"]
    assert tune(server, *args) == 0
    document = json.loads((report / "tune.json").read_text())
    assert len(document["trials"]) >= 2
    # the winner: confirmed in a round when the budget left time for one (a loaded machine's
    # slower loads may not), else the best single window
    winner = document["trials"][document["winner"]]["config"]
    written = candidate_of(load_model_config(repository / "mlp" / "config.pbtxt"))
    assert written.as_dict() == winner
    assert served_candidate(server) == written  # served from the applied config.pbtxt
    assert server.pid == pid
    assert "The winner was applied to" in capsys.readouterr().out
    assert cli.main(["validate", str(repository), "--name", "mlp"]) == 0


@pytest.mark.e2e
def test_two_instances_on_one_device_share_its_throughput(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    # Two stub processes on device 0 share the modelled device: requests of the largest gear (8
    # rows) from 8 clients keep it busy, and together they cannot beat one device's 8 rows per
    # execution of the profile's 8-row time.
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator", instances=2)
    peak_rows_per_s = 8 / PROFILES["resnet50-310p3"].execute_seconds(8)
    json_path = tmp_path / "out.json"
    with running_server(
        repository, env={"GE_EMULATOR_TIMING": TIMING}, log_path=tmp_path / "triton.log"
    ) as server:
        args = ["bench", "--url", http_address(server), "--model", "mlp", "--concurrency", "8"]
        args += ["--duration", "3", "--warmup", "10", "--shape", "x:8,16"]
        assert cli.main([*args, "--json", str(json_path)]) == 0
    (level,) = json.loads(json_path.read_text())["results"]
    assert level["errors"] == 0
    assert 0.5 * peak_rows_per_s < level["rows_per_s"] <= 1.1 * peak_rows_per_s, level
