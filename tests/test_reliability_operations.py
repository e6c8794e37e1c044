"""Operations on the real tritonserver: a hung execution that times out, graceful drain on
SIGTERM and load shedding.

The device is slowed with `GE_EMULATOR_TIMING` so that requests are really in flight (drain)
or really pile up (shedding) while the test acts.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_helpers import free_ports, grpc_address, running_server
from onnx_models import reference
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient
from ge_python_backend.errors import UserError
from ge_python_backend.repository.scaffold import scaffold

pytestmark = pytest.mark.e2e

SLOW_DEVICE = {"GE_EMULATOR_TIMING": "execute_us=300000"}  # every execution takes 300 ms


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def serving(
    repository: Path, log: Path, env: dict[str, str], *options: str
) -> Iterator[tuple[subprocess.Popen[str], TritonClient]]:
    """`ge-python-model serve REPOSITORY --emulator OPTIONS` as a process, ready, and a gRPC
    client of it; the process is killed on the way out if it still runs."""
    http, grpc, metrics = free_ports(3)
    process = subprocess.Popen(
        [sys.executable, "-m", "ge_python_backend.cli", "serve", str(repository), "--emulator"]
        + ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
        + ["--watch-metrics-port", "0"]
        + ["--log-file", str(log), *options],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not ready(f"http://127.0.0.1:{http}/v2/health/ready"):
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "serve was not ready in time"
            time.sleep(0.2)
        with TritonClient(f"127.0.0.1:{grpc}", "grpc") as client:
            yield process, client
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def send(client: TritonClient, x: np.ndarray, callback: Any) -> None:
    """Send `x` (FLOAT[1,16]) to model mlp; `callback(result, error)` gets the answer."""
    client.send_async("mlp", client.prepare({"x": (x, "FP32")}, None), callback)


# ----------------------------------------------------------------------------- hung NPU


@pytest.mark.parametrize("depth", [1, 2])
def test_a_hung_execution_fails_one_request_and_the_instance_serves_on(
    tmp_path: Path, om_dynamic_batch: Path, depth: int
) -> None:
    """The 3rd execution never completes on the device: with execute_timeout_ms 1000 its request
    fails after that timeout with an error naming it, and every later one succeeds."""
    repository = tmp_path / "models"
    # No warmup: the n-th execution is the n-th request.
    scaffold(
        om_dynamic_batch,
        repository,
        name="mlp",
        runtime="emulator",
        pipeline_depth=depth,
        execute_timeout_ms=1000,
        warmup=False,
    )
    rng = np.random.default_rng(2)
    rows = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(6)]
    hang = {"GE_EMULATOR_FAULTS": "mdl.execute_async:hang:3"}
    # A short exit timeout: stopping must not wait on a hung stub.
    with running_server(
        repository, env=hang, log_path=tmp_path / "triton.log", exit_timeout=2
    ) as server:
        outcomes: list[Any] = []
        with TritonClient(grpc_address(server), "grpc", timeout_s=30) as client:
            for x in rows:
                started = time.monotonic()
                try:
                    outcomes.append(client.send("mlp", client.prepare({"x": (x, "FP32")}, None)))
                except InferenceServerException as exc:
                    outcomes.append((exc, time.monotonic() - started))
    failed = [i for i, outcome in enumerate(outcomes) if isinstance(outcome, tuple)]
    assert failed == [2], [str(outcomes[i][0]) for i in failed]
    error, waited = outcomes[2]
    # failed by the instance's 1 s timeout (waited for it), not by the client's 30 s one
    assert "did not finish within execute_timeout_ms=1000" in str(error), str(error)
    assert waited >= 1.0, waited
    for i, (x, outcome) in enumerate(zip(rows, outcomes)):
        if i != 2:
            want = reference(om_dynamic_batch, {"x": x})
            for name in ("y", "z"):
                np.testing.assert_allclose(outcome.as_numpy(name), want[name], rtol=1e-5)


# ----------------------------------------------------------------------------- graceful drain


def test_sigterm_drains_requests_in_flight_and_serve_exits_0(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    repository = tmp_path / "models"
    scaffold(
        om_dynamic_batch, repository, name="mlp", runtime="emulator", pipeline_depth=2, warmup=False
    )
    rng = np.random.default_rng(0)
    rows = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(6)]
    done = threading.Semaphore(0)
    results: list[object] = [None] * 6

    def callback(index: int, result: object, error: object) -> None:
        results[index] = error if error is not None else result
        done.release()

    with serving(repository, tmp_path / "triton.log", SLOW_DEVICE) as (process, client):
        for index, x in enumerate(rows):
            send(client, x, functools.partial(callback, index))
            time.sleep(0.02)  # apart, so that they form several batches, two on the device
        time.sleep(0.1)  # the last one has reached Triton
        in_flight = [index for index, result in enumerate(results) if result is None]
        process.send_signal(signal.SIGTERM)
        for _ in rows:
            assert done.acquire(timeout=30), "a request was never answered"
        _, err = process.communicate(timeout=60)
    # Six rows take at least two 300 ms executions, so some were still in flight at SIGTERM (on
    # the device at depth 2 or queued in Triton); every request, those among them, was answered,
    # none refused.
    assert in_flight, "every request was answered before SIGTERM: there was nothing to drain"
    failures = [r for r in results if isinstance(r, InferenceServerException)]
    assert not failures, [str(f) for f in failures]
    for x, result in zip(rows, results):
        want = reference(om_dynamic_batch, {"x": x})
        for name in ("y", "z"):
            np.testing.assert_allclose(result.as_numpy(name), want[name], rtol=1e-5)  # type: ignore[attr-defined]
    assert process.returncode == 0, err
    assert "Triton stopped (exit code 0)" in err


def test_serve_exits_1_when_requests_outlive_the_exit_timeout(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator", warmup=False)
    hang = {"GE_EMULATOR_FAULTS": "mdl.execute_async:hang:*"}
    with serving(repository, tmp_path / "triton.log", hang, "--exit-timeout-secs", "1") as (
        process,
        client,
    ):
        send(client, np.zeros((1, 16), np.float32), lambda result, error: None)
        time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    # Triton gives up on the hung request after 1 s; its hung stub then keeps it from exiting
    # until `serve` kills it: exit code 1 or -9 (SIGKILL), never 0.
    assert "Triton did not stop cleanly (exit code " in err
    assert "requests may have been left unanswered" in err


# ----------------------------------------------------------------------------- load shedding


def test_scaffold_writes_the_queue_policy(om_dynamic_batch: Path, tmp_path: Path) -> None:
    config = scaffold(
        om_dynamic_batch,
        tmp_path,
        runtime="emulator",
        max_queue_size=2,
        queue_timeout_us=50000,
        dry_run=True,
    ).config
    policy = config.dynamic_batching.default_queue_policy
    assert policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert (policy.max_queue_size, policy.default_timeout_microseconds) == (2, 50000)
    plain = scaffold(om_dynamic_batch, tmp_path, runtime="emulator", dry_run=True).config
    assert not plain.dynamic_batching.HasField("default_queue_policy")
    with pytest.raises(UserError, match="only a batched model has"):
        scaffold(
            om_dynamic_batch,
            tmp_path,
            runtime="emulator",
            inputs=["x:FP32:4,16"],  # declared without --max-batch-size: no batch axis
            outputs=["y:FP32:4,8"],
            queue_timeout_us=1000,
            dry_run=True,
        )
    with pytest.raises(UserError, match="must be >= 0"):
        scaffold(om_dynamic_batch, tmp_path, runtime="emulator", max_queue_size=-1, dry_run=True)

    assert (
        main(
            ["scaffold", str(om_dynamic_batch), "--repository", str(tmp_path / "cli")]
            + ["--runtime", "emulator", "--max-queue-size", "3", "--queue-timeout-us", "7000"]
        )
        == 0
    )
    text = (tmp_path / "cli" / om_dynamic_batch.stem / "config.pbtxt").read_text()
    assert "default_queue_policy {" in text
    assert "default_timeout_microseconds: 7000" in text and "max_queue_size: 3" in text


def test_a_full_queue_refuses_at_once_and_the_server_serves_on(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    """24 concurrent requests, a queue of 2 and a 100 ms device: some are answered (correctly),
    the others are refused with Triton's queue error, never run on the device (the model ran
    exactly the answered ones); then the server serves on."""
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator", max_queue_size=2)
    rng = np.random.default_rng(1)
    rows = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(24)]
    with running_server(
        repository,
        env={"GE_EMULATOR_TIMING": "execute_us=100000"},
        log_path=tmp_path / "triton.log",
    ) as server:
        client = TritonClient(grpc_address(server), "grpc")
        done = threading.Semaphore(0)
        results: list[object] = [None] * len(rows)

        def callback(index: int, result: object, error: object) -> None:
            results[index] = error if error is not None else result
            done.release()

        before = client.inference_statistics("mlp")["model_stats"][0]
        for index, x in enumerate(rows):
            send(client, x, functools.partial(callback, index))
        for _ in rows:
            assert done.acquire(timeout=60), "a request was never answered"
        after = client.inference_statistics("mlp")["model_stats"][0]
        answered = [i for i, r in enumerate(results) if not isinstance(r, Exception)]
        refused = [i for i, r in enumerate(results) if isinstance(r, Exception)]
        assert answered and refused, (len(answered), len(refused))
        for i in refused:
            assert "Exceeds maximum queue size" in str(results[i]), str(results[i])
        # refused on arrival, not after a device execution: the model ran the answered ones only
        assert int(after["inference_count"]) - int(before["inference_count"]) == len(answered)
        for i in answered:
            want = reference(om_dynamic_batch, {"x": rows[i]})
            for name in ("y", "z"):
                np.testing.assert_allclose(results[i].as_numpy(name), want[name], rtol=1e-5)  # type: ignore[attr-defined]
        # The server serves on: a request after the burst is answered.
        after = client.infer("mlp", {"x": (rows[0], "FP32")})
        np.testing.assert_allclose(
            after["y"], reference(om_dynamic_batch, {"x": rows[0]})["y"], rtol=1e-5
        )
        client.close()
