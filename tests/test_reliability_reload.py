"""Reloading with `--model-control-mode explicit` through Triton's model control API.

The same model is unloaded and loaded `GE_RELOAD_CYCLES` times (20 in the suite), then a new
version is scaffolded over it and loaded while clients send requests without a pause. Every stub
process the cycles started must release everything (its emulator stats file), and no request may
fail during the version switch.

Reloads under load: a 2-instance model whose executions hold the emulated device
(`GE_EMULATOR_TIMING`) is unloaded and at once loaded `GE_RELOAD_CYCLES` times while clients keep
sending, so that old instances still execute (and publish their `ge_*` metrics) while the new
ones start: Triton must keep answering right, with no heap corruption or signal in its log (it
crashed in 5 of 5 such runs while the instances shared one Prometheus series:
docs/guides/reliability/soak-reload.md).
"""

from __future__ import annotations

import collections
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import grpc_address, model_states, running_server
from onnx_models import KEEP_FP32
from reliability_helpers import (
    emulator_reports,
    live_resources,
    stub_processes,
    wait_for_exit,
)
from tritonclient.utils import InferenceServerException

from ge_python_backend.client import TritonClient, typed
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_DEPTH
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer
from ge_python_backend.tools.bench import metric_samples

pytestmark = pytest.mark.e2e

CYCLES = int(os.environ.get("GE_RELOAD_CYCLES", "20"))
SENDERS = 4
# Each execution holds the emulated device 0.2 s: the new instances start while old ones execute.
BUSY_EXECUTE_US = 200_000
CALL_TIMEOUT_S = 30.0  # a corrupted server stays alive but answers nothing
# What glibc and Triton print when the heap is corrupted or the server crashes.
CORRUPTION_TEXTS = ("malloc", "corrupted", "double free", "Signal (", "Segmentation fault")


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path
) -> Iterator[tuple[TritonServer, Path, Path]]:
    root = tmp_path_factory.mktemp("reload")
    repository = root / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator")
    stats_dir = root / "stats"
    with running_server(
        repository,
        env={"GE_EMULATOR_STATS_DIR": str(stats_dir)},
        log_path=root / "triton.log",
        model_control_mode="explicit",
        load_models=["mlp"],
    ) as server:
        yield server, repository, stats_dir


def stub_pids(server: TritonServer) -> set[int]:
    return {stub.pid for stub in stub_processes(server)}


def assert_released(stats_dir: Path, pids: set[int]) -> None:
    """Every process in `pids` has exited and its stats file shows nothing held."""
    for pid in pids:
        wait_for_exit(pid)
    reports = emulator_reports(stats_dir)
    assert pids <= set(reports), sorted(pids - set(reports))
    for pid in pids:
        # one model load per lane of the served model's one instance
        loads = DEFAULT_PIPELINE_DEPTH
        assert reports[pid]["model_loads"] == reports[pid]["model_unloads"] == loads, reports[pid]
        assert live_resources(reports[pid]) == {}, (pid, reports[pid])


def test_unload_and_load_again_many_times(served: tuple[TritonServer, Path, Path]) -> None:
    server, _, stats_dir = served
    x = np.ones((2, 16), np.float32)
    seen: set[int] = set()
    with TritonClient(grpc_address(server), "grpc") as client:
        expected = client.infer("mlp", typed({"x": x}))["y"]
        for _ in range(CYCLES):
            seen |= stub_pids(server)
            client.unload_model("mlp")
            client.load_model("mlp")
            assert client.is_model_ready("mlp")
            np.testing.assert_array_equal(client.infer("mlp", typed({"x": x}))["y"], expected)
    current = stub_pids(server)
    assert len(seen) == CYCLES and not seen & current  # a new stub process per load
    assert_released(stats_dir, seen)
    print(f"\nreload: {CYCLES} unload/load cycles, {len(seen)} stub processes, none leaked")


def test_a_new_version_loads_while_clients_send(
    served: tuple[TritonServer, Path, Path], tmp_path: Path, om_dynamic_batch: Path
) -> None:
    server, repository, stats_dir = served
    old = stub_pids(server)
    # Version 2: the same network compiled with other gears, so a different .om.
    onnx_path = Path(str(om_dynamic_batch).removesuffix(".om") + ".onnx")
    new_om = compile_onnx(
        onnx_path,
        tmp_path / "mlp_v2",
        input_shape="x:-1,16",
        dynamic_batch_size="1,4,8",
        **KEEP_FP32,
    )
    stop = threading.Event()
    versions: list[tuple[float, str]] = []  # (sent at, version that answered)
    errors: list[str] = []
    lock = threading.Lock()

    def send() -> None:
        with TritonClient(grpc_address(server), "grpc") as client:
            request = client.prepare(typed({"x": np.ones((1, 16), np.float32)}), None)
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    result = client.send("mlp", request)
                except InferenceServerException as exc:
                    with lock:
                        errors.append(str(exc))
                    continue
                with lock:
                    versions.append((sent, result.get_response().model_version))

    senders = [threading.Thread(target=send) for _ in range(SENDERS)]
    for sender in senders:
        sender.start()
    try:
        time.sleep(0.5)
        scaffold(new_om, repository, name="mlp", runtime="emulator", version=2, overwrite=True)
        with TritonClient(grpc_address(server), "grpc") as client:
            client.load_model("mlp")
        switched = time.monotonic()
        time.sleep(0.5)
    finally:
        stop.set()
        for sender in senders:
            sender.join()
    assert errors == [], errors[:3]
    assert versions[0][1] == "1" and versions[-1][1] == "2"
    after = {version for sent, version in versions if sent > switched}
    assert after == {"2"}, "requests sent after load_model returned went to version 1"
    assert model_states(server)["mlp"][0] == "READY"
    assert_released(stats_dir, old)
    print(f"\nversion switch: {len(versions)} requests from {SENDERS} clients, 0 failed")


@pytest.fixture(scope="module")
def busy(
    tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path
) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("busy_reload")
    repository = root / "models"
    scaffold(
        om_dynamic_batch, repository, name="busy", runtime="emulator", instances=2, warmup=False
    )
    with running_server(
        repository,
        env={"GE_EMULATOR_TIMING": f"execute_us={BUSY_EXECUTE_US}"},
        log_path=root / "triton.log",
        model_control_mode="explicit",
        load_models=["busy"],
    ) as server:
        yield server


def test_reloads_under_load_leave_triton_answering(busy: TritonServer) -> None:
    """Unload then load at once (no wait: the worst a tool could do) while executions run."""
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    with TritonClient(grpc_address(busy), "grpc") as client:
        expected = client.infer("busy", typed({"x": x}))["y"]
    stop = threading.Event()
    answered = collections.Counter[str]()
    lock = threading.Lock()

    def send() -> None:
        with TritonClient(grpc_address(busy), "grpc", timeout_s=CALL_TIMEOUT_S) as client:
            request = client.prepare(typed({"x": x}), None)
            while not stop.is_set():
                try:
                    outcome = "ok" if client.send("busy", request) is not None else "none"
                except InferenceServerException:  # unloading or loading, or a hung server
                    outcome = "refused"
                    stop.wait(0.01)
                with lock:
                    answered[outcome] += 1

    senders = [threading.Thread(target=send) for _ in range(SENDERS)]
    for sender in senders:
        sender.start()
    try:
        with TritonClient(grpc_address(busy), "grpc", timeout_s=CALL_TIMEOUT_S) as client:
            for _ in range(CYCLES):
                time.sleep(0.05)  # executions in flight on the old instances
                client.unload_model("busy")
                client.load_model("busy")
    finally:
        stop.set()
        for sender in senders:
            sender.join()
    assert busy.poll() is None, busy.log_tail()
    assert busy.is_ready()
    with TritonClient(grpc_address(busy), "grpc", timeout_s=CALL_TIMEOUT_S) as client:
        for _ in range(8):  # both new instances answer
            np.testing.assert_array_equal(client.infer("busy", typed({"x": x}))["y"], expected)
    assert busy.log_path is not None
    log = busy.log_path.read_text(errors="replace")
    assert not [text for text in CORRUPTION_TEXTS if text in log], busy.log_tail(30)
    # Each live stub publishes series of its own (labels model_instance and pid).
    exported = urllib.request.urlopen(busy.urls.metrics, timeout=10).read().decode()
    series = [labels for labels, _ in metric_samples(exported, "ge_executions_total")]
    live = [labels for labels in series if labels["model"] == "busy"]
    assert {int(labels["pid"]) for labels in live} == stub_pids(busy), live
    assert sorted(labels["model_instance"] for labels in live) == ["busy_0_0", "busy_0_1"]
    assert answered["ok"] > CYCLES, answered
    print(f"\nreload under load: {CYCLES} cycles, requests {dict(answered)}, no corruption")
