"""End to end: emulator `.om` models scaffolded into a repository, served by the real tritonserver.

Talks to the server with the project's client (`ge_python_backend.client`) over HTTP and gRPC,
compares every answer with onnxruntime on the ONNX the `.om` was compiled from, and reads
Triton's own statistics and metrics.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_helpers import grpc_address, http_address, model_states, running_server
from onnx_models import reference
from tritonclient.utils import InferenceServerException

from ge_python_backend.client import TritonClient, typed
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

BATCH_MODEL, HW_MODEL, BROKEN_MODEL = "mlp", "conv_hw", "truncated"


def build_repository(root: Path, om_batch: Path, om_hw: Path) -> Path:
    repository = root / "models"
    # A long queue delay makes the dynamic batcher merge concurrent requests reliably.
    scaffold(om_batch, repository, name=BATCH_MODEL, runtime="emulator", max_queue_delay_us=20000)
    scaffold(
        om_hw,
        repository,
        name=HW_MODEL,
        runtime="emulator",
        max_batch_size=4,
        max_queue_delay_us=20000,
    )
    broken = scaffold(om_batch, repository, name=BROKEN_MODEL, runtime="emulator")
    data = broken.om_path.read_bytes()
    broken.om_path.write_bytes(data[: len(data) // 2])
    return repository


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path, om_hw: Path
) -> Iterator[tuple[TritonServer, Path]]:
    root = tmp_path_factory.mktemp("e2e")
    repository = build_repository(root, om_dynamic_batch, om_hw)
    stats_dir = root / "emulator-stats"
    stats_dir.mkdir()
    # A 5 ms device: at pipeline depth 2 `execute` returns at once, so Triton's batcher only
    # merges requests that queue while both lanes are busy; a device as fast as the host never
    # keeps them busy and every request would run alone.
    env = {"GE_EMULATOR_STATS_DIR": str(stats_dir), "GE_EMULATOR_TIMING": "execute_us=5000"}
    with running_server(repository, env=env, log_path=root / "triton.log") as server:
        yield server, stats_dir


def infer_http(
    server: TritonServer, model: str, feeds: dict[str, np.ndarray], outputs: list[str] | None = None
) -> Any:
    """tritonclient's result of one request over HTTP (`outputs` None: name none)."""
    with TritonClient(http_address(server), "http") as client:
        return client.send(model, client.prepare(typed(feeds), outputs))


def infer_grpc(client: TritonClient, model: str, feeds: dict[str, np.ndarray]) -> Any:
    return client.send(model, client.prepare(typed(feeds), None))


def mixed_batches(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1 + i % 5, 16), dtype=np.float32) for i in range(count)]


def execution_stats(server: TritonServer, model: str) -> tuple[int, int]:
    with TritonClient(http_address(server), "http") as client:
        stats = client.inference_statistics(model)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def test_concurrent_mixed_batches_over_http_equal_onnxruntime(
    served: tuple[TritonServer, Path], om_dynamic_batch: Path
) -> None:
    server, _ = served
    batches = mixed_batches(24, seed=1)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda x: infer_http(server, BATCH_MODEL, {"x": x}), batches))
    for x, result in zip(batches, results):
        expected = reference(om_dynamic_batch, {"x": x})
        for name in ("y", "z"):
            np.testing.assert_allclose(result.as_numpy(name), expected[name], rtol=1e-5, atol=1e-6)


def test_concurrent_mixed_batches_over_grpc_equal_onnxruntime(
    served: tuple[TritonServer, Path], om_dynamic_batch: Path
) -> None:
    server, _ = served
    batches = mixed_batches(24, seed=2)
    with (
        TritonClient(grpc_address(server), "grpc") as client,
        ThreadPoolExecutor(8) as pool,
    ):
        results = list(pool.map(lambda x: infer_grpc(client, BATCH_MODEL, {"x": x}), batches))
    for x, result in zip(batches, results):
        expected = reference(om_dynamic_batch, {"x": x})
        np.testing.assert_allclose(result.as_numpy("y"), expected["y"], rtol=1e-5, atol=1e-6)


def test_requested_outputs_are_honoured(served: tuple[TritonServer, Path]) -> None:
    server, _ = served
    result = infer_http(server, BATCH_MODEL, {"x": np.ones((3, 16), np.float32)}, outputs=["z"])
    assert result.as_numpy("z").shape == (3, 1)
    assert result.as_numpy("y") is None


def test_dynamic_batching_merges_concurrent_requests(served: tuple[TritonServer, Path]) -> None:
    server, _ = served
    before = execution_stats(server, BATCH_MODEL)
    batches = [np.full((1, 16), i, np.float32) for i in range(16)]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda x: infer_http(server, BATCH_MODEL, {"x": x}), batches))
    inferences, executions = (a - b for a, b in zip(execution_stats(server, BATCH_MODEL), before))
    assert inferences == 16
    assert executions < inferences, f"{inferences} requests ran in {executions} executions"


def test_ge_metrics_appear_on_the_metrics_port(served: tuple[TritonServer, Path]) -> None:
    server, _ = served
    infer_http(server, BATCH_MODEL, {"x": np.ones((5, 16), np.float32)})
    with urllib.request.urlopen(server.urls.metrics, timeout=10) as response:
        text = response.read().decode()
    samples = {
        line.split("{")[0]: line
        for line in text.splitlines()
        if line.startswith("ge_") and f'model="{BATCH_MODEL}"' in line
    }
    for name in (
        "ge_executions_total",
        "ge_rows_total",
        "ge_padded_rows_total",
        "ge_execute_duration_us",
        "ge_device_busy_seconds_total",
        "ge_h2d_bytes_total",
        "ge_d2h_bytes_total",
        "ge_device_memory_bytes",
        "ge_device_memory_free_bytes",
        "ge_device_memory_total_bytes",
    ):
        assert name in samples, f"{name} missing from {sorted(samples)}"
        assert float(samples[name].rsplit(" ", 1)[1]) > 0, samples[name]


def test_a_bad_request_fails_alone(served: tuple[TritonServer, Path], om_hw: Path) -> None:
    server, _ = served
    rng = np.random.default_rng(3)
    good = [rng.standard_normal((1, 3, 16, 16), dtype=np.float32) for _ in range(6)]
    bad = rng.standard_normal((1, 3, 20, 20), dtype=np.float32)

    def send(image: np.ndarray) -> Any:
        try:
            return infer_http(server, HW_MODEL, {"image": image})
        except InferenceServerException as exc:
            return exc

    with ThreadPoolExecutor(7) as pool:
        results = list(pool.map(send, [*good[:3], bad, *good[3:]]))
    failure = results.pop(3)
    assert isinstance(failure, InferenceServerException)
    assert "16x16" in str(failure) and "32x32" in str(failure) and "(1, 3, 20, 20)" in str(failure)
    for image, result in zip(good, results):
        assert not isinstance(result, Exception), result
        expected = reference(om_hw, {"image": image})["features"]
        np.testing.assert_allclose(result.as_numpy("features"), expected, rtol=1e-5, atol=1e-6)


def test_a_broken_model_fails_to_load_while_the_others_serve(
    served: tuple[TritonServer, Path],
) -> None:
    server, _ = served
    states = model_states(server)
    state, reason = states[BROKEN_MODEL]
    assert state == "UNAVAILABLE"
    assert "truncated" in reason or "ACL_ERROR_PARSE_MODEL" in reason, reason
    assert states[BATCH_MODEL][0] == "READY" and states[HW_MODEL][0] == "READY"
    assert infer_http(server, BATCH_MODEL, {"x": np.ones((1, 16), np.float32)}).as_numpy("y").shape


def test_stub_processes_release_everything_when_the_server_stops(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name=BATCH_MODEL, runtime="emulator", instances=2)
    stats_dir = tmp_path / "stats"
    stats_dir.mkdir()
    with running_server(repository, env={"GE_EMULATOR_STATS_DIR": str(stats_dir)}) as server:
        for x in mixed_batches(8, seed=4):
            infer_http(server, BATCH_MODEL, {"x": x})
    reports = [json.loads(path.read_text()) for path in sorted(stats_dir.glob("*.json"))]
    stub_reports = [
        r for r in reports if r["stats"]["loaded_models"] or r["stats"]["execute_calls"]
    ]
    assert len(stub_reports) >= 2, reports  # one per instance (plus warmup executions)
    for report in reports:
        live = {k: v for k, v in report["stats"].items() if k.startswith("live_") and v}
        assert not live, f"process {report['pid']} left {live}"
        assert report["stats"]["loaded_models"] == 0
    shutil.rmtree(stats_dir)
