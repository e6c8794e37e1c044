"""Many processes on one emulated device through the real tritonserver: the walls of real hardware.

Each Triton instance is a stub process that opens its device. With other processes already holding
device 0 (`device_holders.py`), the instance over pyACL's 64 processes fails to load with one line
in Triton's log naming the device, the cap and what to do, while the server and the other models
keep serving; a holder killed with SIGKILL gives its slot back and the model then loads. Device
memory is the device's, not the process's: what a second model's stub holds is gone from the
first one's `ge_device_memory_free_bytes` (its opening of the device, its weights once and a work
space and buffers per lane), and a model whose weights do not fit fails with 207001 and names the
models holding the device.
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from device_holders import DeviceHolders
from e2e_helpers import grpc_address, model_states, running_server

from ge_python_backend.ascend import PROCESS_DEVICE_MEMORY, PROCESSES_PER_DEVICE, malloc_reserved
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.emulator import acl
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_DEPTH
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

ROWS = np.ones((2, 16), np.float32)


@pytest.fixture
def host(tmp_path: Path) -> dict[str, str]:
    """The environment of a host of this test's own (devices, placement records)."""
    return {
        "GE_EMULATOR_HOST_DIR": str(tmp_path / "host"),
        "GE_PYTHON_BACKEND_RUN_DIR": str(tmp_path / "placements"),
    }


def _repository(root: Path, om: Path, names: list[str]) -> Path:
    repository = root / "models"
    for name in names:
        scaffold(om, repository, name=name, runtime="emulator")
    return repository


def _load(server: TritonServer, name: str) -> str:
    """Load `name` through Triton's repository API: "" if it loaded, else Triton's error."""
    with TritonClient(grpc_address(server), "grpc") as client:
        try:
            client.load_model(name)
        except Exception as exc:  # tritonclient's InferenceServerException
            return str(exc)
    return ""


def _answers(server: TritonServer, name: str) -> bool:
    with TritonClient(grpc_address(server), "grpc") as client:
        result = client.infer(name, typed({"x": ROWS}))
    return bool(result["y"].shape == (2, 8))


def test_the_65th_process_on_a_device_fails_to_load_with_one_line_and_the_others_serve(
    tmp_path: Path, host: dict[str, str], om_dynamic_batch: Path
) -> None:
    repository = _repository(tmp_path, om_dynamic_batch, ["first", "second", "third"])
    log = tmp_path / "triton.log"
    with DeviceHolders(host) as holders:
        assert holders.open(PROCESSES_PER_DEVICE - 2) == [0] * (PROCESSES_PER_DEVICE - 2)
        with running_server(
            repository, env=host, log_path=log, model_control_mode="explicit"
        ) as server:
            assert _load(server, "first") == "" and _load(server, "second") == ""
            error = _load(server, "third")  # the 65th process on device 0
            assert "device 0 is full: pyACL's limit of processes per device is reached" in error
            assert "507033 ACL_ERROR_RT_DEV_SETUP_ERROR" in error and "E30003" in error
            assert "'first' (1 process" in error and "'second' (1 process" in error
            assert "serve fewer instances" in error
            ours = [
                line
                for line in log.read_text().splitlines()
                if "device 0 is full" in line and '] "ge_python_backend.' in line
            ]  # (Triton repeats the load error in lines of its own)
            assert len(ours) == 1 and ours[0].startswith("E"), ours  # one ERROR line
            assert server.poll() is None
            assert _answers(server, "first") and _answers(server, "second")
            assert model_states(server)["third"][0] == "UNAVAILABLE"
            holders.kill(holders.pids[0])  # a crash: its slot comes back
            assert _load(server, "third") == ""
            assert _answers(server, "third")


def _gauge(server: TritonServer, name: str, model: str) -> float:
    """The newest value of gauge `name` of `model` (after two executions a flush apart)."""
    for _ in range(2):
        _answers(server, model)
        time.sleep(0.15)  # the metrics flush interval is 0.1 s
    with urllib.request.urlopen(server.urls.metrics, timeout=10) as response:
        text = response.read().decode()
    match = re.search(rf'^{name}{{[^}}]*model="{model}"[^}}]*}} (\S+)$', text, re.M)
    assert match, f"{name} of {model} not in the metrics"
    return float(match.group(1))


def _model_bytes(om: Path, lanes: int) -> int:
    """What `lanes` loads of `om` in one process hold: its weights once and a work space per
    load (acl.mdl.query_size's sizes, as acl.rt.malloc reserves them)."""
    assert acl.init() in (0, 100002)  # (scaffold may have initialised this process's acl)
    work, weight, ret = acl.mdl.query_size(str(om))  # needs no device
    assert ret == 0
    return malloc_reserved(weight) + lanes * malloc_reserved(work)


def test_device_memory_is_the_devices_and_a_load_that_does_not_fit_names_who_holds_it(
    tmp_path: Path, host: dict[str, str], om_dynamic_batch: Path, om_wide: Path
) -> None:
    repository = _repository(tmp_path, om_dynamic_batch, ["small", "other"])
    scaffold(om_wide, repository, name="wide", runtime="emulator")
    capacity = 3 * PROCESS_DEVICE_MEMORY + (8 << 20)  # three processes and 8 MiB more
    env = {**host, "GE_EMULATOR_DEVICE_MEMORY": str(capacity)}
    log = tmp_path / "triton.log"
    with running_server(repository, env=env, log_path=log, model_control_mode="explicit") as server:
        assert _load(server, "small") == ""
        free_alone = _gauge(server, "ge_device_memory_free_bytes", "small")
        small_holds = _gauge(server, "ge_device_memory_bytes", "small")  # its pooled buffers
        loads = _model_bytes(om_dynamic_batch, DEFAULT_PIPELINE_DEPTH)
        assert free_alone == capacity - PROCESS_DEVICE_MEMORY - small_holds - loads
        assert _load(server, "other") == ""  # the same model again, in its own stub process
        free_with_other = _gauge(server, "ge_device_memory_free_bytes", "small")
        other_holds = _gauge(server, "ge_device_memory_bytes", "other")
        assert free_alone - free_with_other == PROCESS_DEVICE_MEMORY + other_holds + loads
        error = _load(server, "wide")
        weights = _model_bytes(om_wide, 0)  # its weights, the first allocation that fails
        assert f"device 0 is full: wide.om needs weights of {weights} bytes" in error
        assert f"and {DEFAULT_PIPELINE_DEPTH} work space(s) of" in error
        assert "acl.rt.malloc failed with 207001 ACL_ERROR_RT_MEMORY_ALLOCATION" in error
        assert "'small' (1 process" in error and "'other' (1 process" in error
        assert server.poll() is None
        assert _answers(server, "small") and _answers(server, "other")
        assert model_states(server)["wide"][0] == "UNAVAILABLE"
