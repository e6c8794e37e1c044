"""Device faults injected through the emulator into models served by the real tritonserver.

One server in explicit model-control mode holds a healthy model and one model per fault.
`GE_EMULATOR_FAULTS` reaches every stub process, so the server-wide spec is one that only the
`alloc_fail` model reaches (its 5th device allocation: the healthy models make 4); the other
faulty models install their own spec in their stub (`reliability_helpers.install_faults`).
Models whose faults hit executions have no `model_warmup`: a failing warmup request can crash
Triton 2.51 (SIGSEGV) instead of failing the load. At the end every model is unloaded and every
stub's emulator stats file must show nothing left allocated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_helpers import http_address, model_states, running_server
from reliability_helpers import (
    emulator_reports,
    install_faults,
    live_resources,
    stub_processes,
    wait_for_exit,
)
from tritonclient.utils import InferenceServerException

from ge_python_backend import emulator
from ge_python_backend.client import TritonClient
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_DEPTH
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.runtime import Session
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e


@dataclasses.dataclass(frozen=True)
class Served:
    server: TritonServer
    stats_dir: Path
    stub_pids: dict[str, int]  # model -> stub pid, for the models that loaded


def allocations_to_open(om: Path) -> int:
    """Device allocations a served model's Session makes to open `om` (in this process)."""
    before = emulator.stats()["malloc_calls"]
    Session(om, runtime="emulator", pipeline_depth=DEFAULT_PIPELINE_DEPTH).close()
    return emulator.stats()["malloc_calls"] - before


def copies_per_request(om: Path) -> int:
    """How many copies (`memcpy_async`, the runtime's only copy call) one 1-row request makes."""
    with Session(om, runtime="emulator") as session:
        feeds = {spec.name: np.zeros((1, *spec.shape[1:]), spec.dtype) for spec in session.inputs}
        before = emulator.stats()
        session.infer(feeds)
        after = emulator.stats()
    return after["memcpy_async_calls"] - before["memcpy_async_calls"]


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path, om_mixed_types: Path
) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("faults")
    repository = root / "models"
    healthy_allocations = allocations_to_open(om_dynamic_batch)
    assert allocations_to_open(om_mixed_types) > healthy_allocations
    copies = copies_per_request(om_dynamic_batch)
    faults = {
        "load_fail": "mdl.load_from_file_with_mem:545001:1",
        "exec_fail": "mdl.execute_async:507011:3",  # the 3rd request
        "copy_fail": f"rt.memcpy_async:507013:{copies + 1}",  # the first copy of the 2nd request
        # the 2nd request's wait (bounded by the default execute_timeout_ms)
        "sync_fail": "rt.synchronize_stream_with_timeout:507000:2",
        "flaky": "mdl.execute_async:507011:*",
    }
    scaffold(om_dynamic_batch, repository, name="healthy", runtime="emulator")
    scaffold(om_mixed_types, repository, name="alloc_fail", runtime="emulator")
    for name, spec in faults.items():
        result = scaffold(om_dynamic_batch, repository, name=name, runtime="emulator", warmup=False)
        install_faults(result.model_dir, spec)
    stats_dir = root / "stats"
    env = {
        "GE_EMULATOR_FAULTS": f"rt.malloc:207001:{healthy_allocations + 1}",
        "GE_EMULATOR_STATS_DIR": str(stats_dir),
    }
    models = ["healthy", "alloc_fail", *faults]
    with running_server(
        repository,
        env=env,
        log_path=root / "triton.log",
        model_control_mode="explicit",
        load_models=models,
    ) as server:
        pids = {}
        for stub in stub_processes(server):
            model = Path(stub.cmdline()[1]).parts[-3]  # <repository>/<model>/<version>/model.py
            pids[model] = stub.pid
        yield Served(server, stats_dir, pids)


def infer(server: TritonServer, model: str, x: np.ndarray) -> Any:
    with TritonClient(http_address(server), "http") as client:
        return client.send(model, client.prepare({"x": (x, "FP32")}, None))


def outcomes(server: TritonServer, model: str, count: int) -> list[str]:
    """Send `count` 1-row requests one after another: "ok" or the error message of each."""
    results = []
    for i in range(count):
        x = np.full((1, 16), i, np.float32)
        try:
            reference = infer(server, "healthy", x).as_numpy("y")
            np.testing.assert_array_equal(infer(server, model, x).as_numpy("y"), reference)
            results.append("ok")
        except InferenceServerException as exc:
            results.append(str(exc))
    return results


def test_an_allocation_failure_at_load_is_a_clear_load_error(served: Served) -> None:
    state, reason = model_states(served.server)["alloc_fail"]
    assert state == "UNAVAILABLE"
    for fragment in ("alloc_fail", "acl.rt.malloc", "207001 ACL_ERROR_RT_MEMORY_ALLOCATION"):
        assert fragment in reason, reason


def test_a_model_load_failure_is_a_clear_load_error(served: Served) -> None:
    state, reason = model_states(served.server)["load_fail"]
    assert state == "UNAVAILABLE"
    fragments = ("load_fail", "acl.mdl.load_from_file_with_mem", "545001 ACL_ERROR_GE_LOAD_MODEL")
    for fragment in fragments:
        assert fragment in reason, reason


def test_the_other_models_load_and_serve(served: Served) -> None:
    states = model_states(served.server)
    for name in ("healthy", "exec_fail", "copy_fail", "sync_fail", "flaky"):
        assert states[name][0] == "READY", (name, states[name])
    assert outcomes(served.server, "healthy", 3) == ["ok"] * 3


@pytest.mark.parametrize(
    ("model", "failing", "api", "code"),
    [
        ("exec_fail", 2, "acl.mdl.execute_async", "507011 ACL_ERROR_RT_MODEL_EXECUTE"),
        ("copy_fail", 1, "acl.rt.memcpy_async", "507013 ACL_ERROR_RT_SYS_DMA"),
        (
            "sync_fail",
            1,
            "acl.rt.synchronize_stream_with_timeout",
            "507000 ACL_ERROR_RT_INTERNAL_ERROR",
        ),
    ],
)
def test_a_device_failure_fails_only_that_request(
    served: Served, model: str, failing: int, api: str, code: str
) -> None:
    results = outcomes(served.server, model, 5)
    assert [r == "ok" for r in results] == [i != failing for i in range(5)], results
    assert api in results[failing] and code in results[failing], results[failing]


def test_repeated_failures_leave_the_model_serving_errors(served: Served) -> None:
    batches = [np.ones((1 + i % 4, 16), np.float32) for i in range(40)]

    def send(x: np.ndarray) -> str:
        try:
            infer(served.server, "flaky", x)
            return "ok"
        except InferenceServerException as exc:
            return str(exc)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(send, batches))
    assert all("507011 ACL_ERROR_RT_MODEL_EXECUTE" in r for r in results), set(results)
    assert model_states(served.server)["flaky"][0] == "READY"


def test_nothing_stays_allocated_after_unload(served: Served) -> None:
    """Runs last: unload every model, then read each stub's emulator stats file."""
    with TritonClient(http_address(served.server), "http") as client:
        for name in model_states(served.server):
            client.unload_model(name)
    for pid in served.stub_pids.values():
        wait_for_exit(pid)
    reports = emulator_reports(served.stats_dir)
    assert set(served.stub_pids.values()) <= set(reports), (served.stub_pids, sorted(reports))
    for pid, stats in reports.items():
        assert live_resources(stats) == {}, (pid, stats)
    # Every faulty model's stub reported, the two that failed to load included.
    assert sum(1 for stats in reports.values() if stats["faults_injected"]) == 6
    assert reports[served.stub_pids["flaky"]]["faults_injected"] >= 10
    assert served.server.poll() is None
