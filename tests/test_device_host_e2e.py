"""The device host through the real tritonserver: models with `device_host` on are served by one
process that holds the device, however many models and instances.

Each test models a host of its own (emulated devices, placement records and the device host's
socket in its tmp_path). The stubs start the device host themselves (the copy path), under a
lock. Checked: every model READY and answering as in-stub serving and onnxruntime answer, one
process holding device 0 for all of them (the emulator's ledger and the runtime's placement
records), a bad request failing alone, a model that does not fit failing alone with the wall's
line, a stub's departure freeing its session in the host, a killed device host failing the
requests in flight at once, then coming back with every model serving, without an operator, and
a host that never answers a model's open failing that model's load alone, in its timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_helpers import grpc_address, model_states, running_server
from onnx_models import reference
from test_shared_device_e2e import _gauge, _model_bytes

from ge_python_backend.ascend import PROCESS_DEVICE_MEMORY, malloc_reserved
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.devicehost.protocol import host_paths
from ge_python_backend.emulator import device_holders
from ge_python_backend.emulator.faults import ENV as FAULTS_ENV
from ge_python_backend.processes import RUN_DIR_ENV, is_alive
from ge_python_backend.repository.config import load_model_config, write_model_config
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_DEPTH
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.runtime import placement
from ge_python_backend.runtime.describe import describe_om
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e
# the placement records of the device host's shared work spaces and I/O areas (its default pool
# of 4 streams)
POOL = "shared work spaces (4 streams)"
AREAS = "shared I/O areas (4 streams)"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A host of this test's own; the test process reads its placement records too."""
    env = {
        "GE_EMULATOR_HOST_DIR": str(tmp_path / "host"),
        RUN_DIR_ENV: str(tmp_path / "run"),
        "GE_DEVICE_HOST_IDLE_EXIT_S": "1",
    }
    monkeypatch.setenv(RUN_DIR_ENV, env[RUN_DIR_ENV])
    return env


def device_processes(env: dict[str, str], device: int = 0) -> set[int]:
    """The live processes the emulator's ledger of `device` counts."""
    holders = device_holders(env["GE_EMULATOR_HOST_DIR"], device)
    return {holder.pid for holder in holders if holder.contexts}


def holders_by_label(device: int = 0) -> dict[str, set[int]]:
    found: dict[str, set[int]] = {}
    for holding in placement.holders(device):
        found.setdefault(holding.label, set()).add(holding.pid)
    return found


def host_pid() -> int:
    """The pid of device 0's host, from the placement records of the model `first`."""
    (pid,) = holders_by_label()["first"]
    return pid


def infer(server: TritonServer, model: str, inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    with TritonClient(grpc_address(server), "grpc", timeout_s=60) as client:
        return client.infer(model, typed(inputs))


def _scaffold(om: Path, repository: Path, name: str, **options: Any) -> None:
    scaffold(om, repository, name=name, runtime="emulator", **options)


def test_many_models_in_the_device_host_hold_device_0_as_one_process(
    tmp_path: Path, host: dict[str, str], om_dynamic_batch: Path, om_hw: Path, om_add_mul: Path
) -> None:
    repository = tmp_path / "models"
    for name in ("first", "second"):
        _scaffold(om_dynamic_batch, repository, name, instances=2, device_host=True)
    _scaffold(om_hw, repository, "hw", device_host=True)
    _scaffold(om_add_mul, repository, "add_mul", device_host=True, pipeline_depth=1)
    _scaffold(om_dynamic_batch, repository, "in_stub")  # device_host off: its stub opens device 0
    rng = np.random.default_rng(5)
    env = {**host, "GE_EMULATOR_MAX_PROCESSES": "2"}  # seven instances under a cap of two
    with running_server(repository, env=env, log_path=tmp_path / "triton.log") as server:
        states = model_states(server)
        assert {name: state for name, (state, _) in states.items()} == dict.fromkeys(
            ("add_mul", "first", "hw", "in_stub", "second"), "READY"
        ), states
        held = holders_by_label()
        (hosting,) = held["first"]
        assert held["second"] == held["hw"] == held["add_mul"] == {hosting}
        assert held["in_stub"] != {hosting}
        assert device_processes(host) == {hosting, *held["in_stub"]}  # 6 instances, 2 processes
        x = rng.standard_normal((3, 16), dtype=np.float32)
        in_stub = infer(server, "in_stub", {"x": x})
        for name in ("first", "second"):
            answer = infer(server, name, {"x": x})
            for output in ("y", "z"):
                np.testing.assert_array_equal(answer[output], in_stub[output])
        np.testing.assert_allclose(
            in_stub["y"], reference(om_dynamic_batch, {"x": x})["y"], rtol=1e-5, atol=1e-6
        )
        # the ge_* metrics travel back from the host's session
        assert _gauge(server, "ge_executions_total", "first") >= 2
        assert _gauge(server, "ge_device_memory_free_bytes", "first") > 0
        assert _gauge(server, "ge_device_memory_bytes", "first") > 0  # its lanes' buffers
        # the placement records: in its stub, a model holds its weights once and a work space
        # and buffers per lane; in the host, its two instances hold one copy of the weights and
        # what their lanes keep of their own (the gear inputs), the host's 4 shared work spaces
        # the largest hosted work and its 4 I/O areas the largest hosted inputs and outputs
        recorded = {name: 0 for name in ("first", "in_stub", POOL, AREAS)}
        for holding in placement.holders(0):
            if holding.label in recorded:
                recorded[holding.label] += holding.bytes
        weights, work = _model_bytes(om_dynamic_batch, 0), _model_bytes(om_dynamic_batch, 1)
        work -= weights
        buffers = _gauge(server, "ge_device_memory_bytes", "in_stub")
        assert recorded["in_stub"] == weights + DEFAULT_PIPELINE_DEPTH * work + buffers
        own = _gauge(server, "ge_device_memory_bytes", "first")
        assert 0 < own < buffers
        assert recorded["first"] == 2 * own + weights  # its 2 instances
        hw_work = _model_bytes(om_hw, 1) - _model_bytes(om_hw, 0)
        assert recorded[POOL] == 4 * max(work, hw_work)
        io = max(describe_om(om, "emulator").shared_io()[1] for om in (om_dynamic_batch, om_hw))
        assert recorded[AREAS] == 4 * malloc_reserved(io)
        # and the instances' metrics show the host's work spaces; the in-stub one has none
        assert _gauge(server, "ge_device_host_work_space_bytes", "first") == recorded[POOL]
        assert _gauge(server, "ge_device_host_io_area_bytes", "first") == recorded[AREAS]
        assert _gauge(server, "ge_device_host_streams", "second") == 4
        assert _gauge(server, "ge_device_host_streams", "in_stub") == 0
        a, b = (rng.standard_normal((2, 4), dtype=np.float32) for _ in range(2))
        answer = infer(server, "add_mul", {"a": a, "b": b})
        np.testing.assert_allclose(answer["sum"], a + b, rtol=1e-6)
        np.testing.assert_allclose(answer["product"], a * b, rtol=1e-6)

        good = [rng.standard_normal((1, 3, 16, 16), dtype=np.float32) for _ in range(6)]
        bad = rng.standard_normal((1, 3, 20, 20), dtype=np.float32)

        def send(image: np.ndarray) -> Any:
            try:
                return infer(server, "hw", {"image": image})
            except Exception as exc:  # tritonclient's InferenceServerException
                return exc

        with ThreadPoolExecutor(7) as pool:
            results = list(pool.map(send, [*good[:3], bad, *good[3:]]))
        failure = results.pop(3)
        assert isinstance(failure, Exception) and "(1, 3, 20, 20)" in str(failure), failure
        assert "16x16" in str(failure)
        for image, result in zip(good, results):
            assert not isinstance(result, Exception), result
            expected = reference(om_hw, {"image": image})["features"]
            np.testing.assert_allclose(result["features"], expected, rtol=1e-5, atol=1e-6)


def test_a_stub_leaving_frees_its_session_and_a_model_that_does_not_fit_fails_alone(
    tmp_path: Path, host: dict[str, str], om_dynamic_batch: Path, om_wide: Path
) -> None:
    repository = tmp_path / "models"
    for name in ("first", "second"):
        _scaffold(om_dynamic_batch, repository, name, device_host=True)
    _scaffold(om_wide, repository, "wide", device_host=True)
    env = {**host, "GE_EMULATOR_DEVICE_MEMORY": str(PROCESS_DEVICE_MEMORY + (8 << 20))}
    x = np.ones((2, 16), np.float32)
    with (
        running_server(
            repository, env=env, log_path=tmp_path / "triton.log", model_control_mode="explicit"
        ) as server,
        TritonClient(grpc_address(server), "grpc") as client,
    ):
        client.load_model("first")
        client.load_model("second")
        with pytest.raises(Exception) as refused:
            client.load_model("wide")
        assert "device 0 is full: wide.om needs weights of" in str(refused.value)
        assert "207001 ACL_ERROR_RT_MEMORY_ALLOCATION" in str(refused.value)
        assert "'first' (1 process" in str(refused.value)
        assert infer(server, "first", {"x": x})["y"].shape == (2, 8)
        assert infer(server, "second", {"x": x})["y"].shape == (2, 8)
        assert set(holders_by_label()) == {"first", "second", POOL, AREAS}
        hosting = host_pid()
        client.unload_model("second")  # its stub leaves: the host closes its session
        while "second" in holders_by_label():
            threading.Event().wait(0.05)
        assert holders_by_label() == {"first": {hosting}, POOL: {hosting}, AREAS: {hosting}}
        assert infer(server, "first", {"x": x})["y"].shape == (2, 8)
        client.unload_model("first")  # the last stub: the host stops after its grace (1 s)
        while is_alive(hosting, 0):
            threading.Event().wait(0.05)
        client.load_model("first")  # and the next stub starts one again
        assert infer(server, "first", {"x": x})["y"].shape == (2, 8)
        assert host_pid() != hosting


def test_a_killed_device_host_fails_the_requests_in_flight_and_comes_back(
    tmp_path: Path, host: dict[str, str], om_dynamic_batch: Path
) -> None:
    repository = tmp_path / "models"
    names = ("first", "second", "third")
    for name in names:
        _scaffold(om_dynamic_batch, repository, name, instances=2, device_host=True)
    env = {**host, "GE_EMULATOR_TIMING": "execute_us=3000"}  # requests stay in flight a while
    x = np.ones((2, 16), np.float32)
    with running_server(repository, env=env, log_path=tmp_path / "triton.log") as server:
        hosting = host_pid()
        errors: list[str] = []
        answered = threading.Semaphore(0)
        stop = threading.Event()

        def load(model: str) -> None:
            while not stop.is_set():
                try:
                    infer(server, model, {"x": x})
                except Exception as exc:
                    errors.append(str(exc))
                answered.release()

        workers = [threading.Thread(target=load, args=(name,)) for name in names * 2]
        for worker in workers:
            worker.start()
        for _ in range(30):  # serving under load
            answered.acquire()
        os.kill(hosting, signal.SIGKILL)
        for _ in range(200):  # the requests in flight fail ...
            if errors:
                break
            answered.acquire()
        stop.set()
        for worker in workers:
            worker.join(120)  # ... and none hangs: every worker ends
        assert not any(worker.is_alive() for worker in workers)
        assert errors  # requests were in flight when it died
        for error in errors:
            assert "went away with this request in flight" in error, error
        for name in names:  # back without an operator: a new host, every model serving
            assert infer(server, name, {"x": x})["y"].shape == (2, 8)
        held = holders_by_label()
        (again,) = held["first"]
        assert again != hosting and held["second"] == held["third"] == {again}
        assert device_processes(host) == {again}
        assert server.poll() is None


def test_a_device_host_that_never_answers_the_open_fails_that_load_alone_in_its_timeout(
    tmp_path: Path, host: dict[str, str], om_dynamic_batch: Path
) -> None:
    """The host of device 1 (a real one, its load of the model stalled for 120 s by the
    emulator) takes the stub's connection and does not answer: that load fails after the
    model's device_host_load_timeout_s with the error naming the host and the parameter, while
    the server and the model of device 0 keep serving."""
    repository = tmp_path / "models"
    _scaffold(om_dynamic_batch, repository, "first", device_host=True)
    _scaffold(om_dynamic_batch, repository, "stuck", device_ids=(1,), device_host=True)
    config = load_model_config(repository / "stuck" / "config.pbtxt")
    config.parameters["device_host_load_timeout_s"].string_value = "3"
    write_model_config(config, repository / "stuck" / "config.pbtxt")
    paths = host_paths(1)
    stall = {FAULTS_ENV: "mdl.load_from_file_with_mem:stall=120000:1"}
    with open(paths.log, "ab") as log:
        stalled = subprocess.Popen(
            [sys.executable, "-m", "ge_python_backend.devicehost", "--device", "1"],
            env={**os.environ, **host, **stall},
            stdout=log,
            stderr=log,
        )
    x = np.ones((2, 16), np.float32)
    try:
        while not os.path.exists(paths.socket):
            assert stalled.poll() is None, Path(paths.log).read_text()
            threading.Event().wait(0.05)
        with (
            running_server(
                repository,
                env=host,
                log_path=tmp_path / "triton.log",
                model_control_mode="explicit",
            ) as server,
            TritonClient(grpc_address(server), "grpc") as client,
        ):
            client.load_model("first")
            started = time.monotonic()
            with pytest.raises(Exception) as refused:
                client.load_model("stuck")
            waited = time.monotonic() - started
            assert (
                f"the device host of device 1 (pid {stalled.pid}, socket {paths.socket}) took "
                "the connection but did not answer the opening of stuck within 3 s"
                in str(refused.value)
            )
            assert "raise the config.pbtxt parameter device_host_load_timeout_s (now 3)" in str(
                refused.value
            )
            assert waited < 60  # the timeout ended the wait, not the host's stall of 120 s
            assert "stuck loaded" not in Path(paths.log).read_text()  # still stalled
            assert infer(server, "first", {"x": x})["y"].shape == (2, 8)
            assert model_states(server)["first"][0] == "READY"
            assert server.poll() is None
    finally:
        stalled.kill()
        stalled.wait()
