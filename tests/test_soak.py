"""Soak: many requests at concurrency 16 over gRPC against one emulator model, zero errors allowed.

The stub's resident memory is sampled once warm-up requests have completed and again at the end
(growth must stay under 5%); device allocations must not change while serving (the emulator's
stats file after the server stops, and the `ge_device_memory_bytes` gauge). `GE_SOAK_REQUESTS`
sets the request count (20,000 in the suite; `make soak` runs more). Figures are printed (`-s`).
"""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import grpc_address, running_server
from reliability_helpers import emulator_reports, run_load, stub_processes
from tritonclient.grpc import InferResult

from ge_python_backend import emulator
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_DEPTH
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.runtime import Session
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

REQUESTS = int(os.environ.get("GE_SOAK_REQUESTS", "20000"))
CONCURRENCY = 16
WARMUP_REQUESTS = max(2000, REQUESTS // 10)
MAX_RSS_GROWTH = 0.05


def device_memory_gauge(server: TritonServer) -> float:
    with urllib.request.urlopen(server.urls.metrics, timeout=10) as response:
        text = response.read().decode()
    match = re.search(r'^ge_device_memory_bytes\{[^}]*model="mlp"[^}]*\} (\S+)$', text, re.M)
    assert match, "ge_device_memory_bytes missing from the metrics"
    return float(match.group(1))


def test_soak_has_no_errors_and_no_growth(tmp_path: Path, om_dynamic_batch: Path) -> None:
    assert REQUESTS > WARMUP_REQUESTS
    before = emulator.stats()["malloc_calls"]
    with Session(
        om_dynamic_batch, runtime="emulator", pipeline_depth=DEFAULT_PIPELINE_DEPTH
    ) as session:
        x = np.random.default_rng(7).standard_normal((1, 16), dtype=np.float32)
        expected = session.infer({"x": x})["y"]
    allocations_to_open = emulator.stats()["malloc_calls"] - before

    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator")
    stats_dir = tmp_path / "stats"
    samples: dict[str, tuple[int, int, float]] = {}

    def check(result: InferResult) -> None:
        np.testing.assert_allclose(result.as_numpy("y"), expected, rtol=1e-5, atol=1e-6)

    with running_server(
        repository, env={"GE_EMULATOR_STATS_DIR": str(stats_dir)}, log_path=tmp_path / "log"
    ) as server:
        (stub,) = stub_processes(server)
        assert server.pid is not None
        server_process = stub.parent()

        def sample(label: str) -> None:
            rss = stub.memory_info().rss
            samples[label] = (rss, server_process.memory_info().rss, device_memory_gauge(server))

        result = run_load(
            grpc_address(server),
            "mlp",
            {"x": x},
            REQUESTS,
            CONCURRENCY,
            check=check,
            milestones={WARMUP_REQUESTS: lambda: sample("warm")},
        )
        sample("end")
        stub_pid = stub.pid
    stats = emulator_reports(stats_dir)[stub_pid]

    warm_rss, warm_server, warm_device = samples["warm"]
    end_rss, end_server, end_device = samples["end"]
    growth = end_rss / warm_rss - 1
    print(
        f"\nsoak: {result.requests} requests at concurrency {CONCURRENCY} in "
        f"{result.seconds:.1f} s ({result.rate:.0f}/s), {result.errors} errors; "
        f"stub RSS {warm_rss / 2**20:.1f} MiB after {WARMUP_REQUESTS} -> "
        f"{end_rss / 2**20:.1f} MiB ({growth:+.2%}); tritonserver RSS "
        f"{warm_server / 2**20:.1f} -> {end_server / 2**20:.1f} MiB; device allocations "
        f"{stats['malloc_calls']} (opening the model: {allocations_to_open}), "
        f"executions {stats['execute_calls'] + stats['execute_async_calls']}"
    )
    assert result.requests == REQUESTS
    assert result.errors == 0, result.messages
    assert growth < MAX_RSS_GROWTH, f"stub RSS grew {growth:.2%}"
    assert stats["malloc_calls"] == allocations_to_open  # nothing allocated while serving
    assert warm_device == end_device > 0
    assert stats["live_device_allocations"] == 0 and stats["loaded_models"] == 0
