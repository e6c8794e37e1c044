"""Helpers for the reliability tests (docs/guides/reliability/index.md).

* `compile_scale`: an emulator `.om` of `y = x * factor` with rows of `width` FP32 values, to make
  requests as large as needed (1 MiB per row at width 262,144).
* `install_faults`: a fault spec for ONE model's stub process (GE_EMULATOR_FAULTS is read by every
  stub of a server, so it cannot fail one model while the others serve).
* `stub_processes`, `emulator_reports`, `live_resources`: what the stub processes hold.
* `run_load`: a closed-loop gRPC load generator (C workers, one request in flight each).
* `small_shm_binary`: the bundled tritonserver run with a small private `/dev/shm`, as in a
  container started without `--shm-size`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import psutil
from google.protobuf import json_format
from onnx import TensorProto, helper, numpy_helper
from onnx_models import KEEP_FP32
from tritonclient.utils import InferenceServerException

from ge_python_backend.client import TritonClient, typed
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.server import ServerBinary, TritonServer, find_server

STUB_NAME = "triton_python_backend_stub"
MIB = 1024 * 1024


def compile_scale(
    directory: Path, name: str, width: int, factor: float, gears: str = "1,2,4"
) -> Path:
    """`x` FLOAT[N,width] -> `y` FLOAT[N,width] = x * factor, batch gears `gears`."""
    directory.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "factor"], ["y"])],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", width])],
        initializer=[numpy_helper.from_array(np.array(factor, np.float32), "factor")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx_path = directory / f"{name}.onnx"
    onnx.save(model, str(onnx_path))
    return compile_onnx(
        onnx_path,
        directory / name,
        input_shape=f"x:-1,{width}",
        dynamic_batch_size=gears,
        **KEEP_FP32,
    )


def compile_long(directory: Path, name: str, lengths: str) -> Path:
    """`x` FLOAT[1,L] -> `y` = 2x with dims gears `lengths` ("1024;4194304"): variable-length
    requests, whose size config.pbtxt cannot tell (dims [-1])."""
    directory.mkdir(parents=True, exist_ok=True)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y"])],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "L"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "L"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx_path = directory / f"{name}.onnx"
    onnx.save(model, str(onnx_path))
    return compile_onnx(
        onnx_path,
        directory / name,
        input_shape="x:1,-1",
        dynamic_dims=lengths,
        input_format="ND",
        **KEEP_FP32,
    )


def install_faults(model_dir: Path, spec: str, version: int = 1) -> None:
    """Make `model.py` of `model_dir` install emulator fault `spec` in its own stub process.

    The rest of `model.py` is the scaffolded template, unchanged.
    """
    model_py = model_dir / str(version) / "model.py"
    prologue = (
        "from ge_python_backend.emulator import set_faults\n\n"
        f"set_faults({spec!r})  # reliability test: faults for this model only\n\n"
    )
    model_py.write_text(prologue + model_py.read_text(encoding="utf-8"), encoding="utf-8")


def stub_processes(server: TritonServer) -> list[psutil.Process]:
    """The Python backend stub processes (one per model instance) of a running server."""
    assert server.pid is not None
    children = psutil.Process(server.pid).children(recursive=True)
    return [child for child in children if child.name().startswith(STUB_NAME[:15])]


def stub_for(server: TritonServer, model: str) -> psutil.Process:
    """The one stub process serving `model` (its command line names the model directory)."""
    matches = [
        stub
        for stub in stub_processes(server)
        if any(Path(arg).name == model or f"/{model}/" in arg for arg in stub.cmdline()[1:3])
    ]
    assert len(matches) == 1, f"expected one stub for {model!r}, found {len(matches)}"
    return matches[0]


def emulator_reports(stats_dir: Path) -> dict[int, dict[str, Any]]:
    """`{pid: stats}` from the `emulator-<pid>.json` files the processes wrote."""
    reports = {}
    for path in sorted(stats_dir.glob("emulator-*.json")):
        document = json.loads(path.read_text())
        reports[int(document["pid"])] = document["stats"]
    return reports


def live_resources(stats: Mapping[str, int]) -> dict[str, int]:
    """The resources a process still held when it wrote its stats (empty: nothing leaked)."""
    held = {k: v for k, v in stats.items() if (k.startswith("live_") or k.endswith("_in_use"))}
    held["loaded_models"] = stats["loaded_models"]
    return {k: v for k, v in held.items() if v}


def wait_for_exit(pid: int, timeout: float = 60.0) -> None:
    """Wait until process `pid` is gone."""
    deadline = time.monotonic() + timeout
    while psutil.pid_exists(pid):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"process {pid} still runs after {timeout} s")
        time.sleep(0.1)


@dataclasses.dataclass
class LoadResult:
    """What a `run_load` run saw."""

    requests: int
    errors: int
    seconds: float
    messages: list[str]

    @property
    def rate(self) -> float:
        """Requests per second."""
        return self.requests / self.seconds if self.seconds else 0.0


def run_load(
    address: str,
    model: str,
    feeds: Mapping[str, np.ndarray],
    total: int,
    concurrency: int,
    check: Callable[[Any], None] | None = None,
    milestones: Mapping[int, Callable[[], None]] | None = None,
) -> LoadResult:
    """Send `total` requests from `concurrency` gRPC workers, each with one request in flight.

    `check(result)` may raise to count a wrong answer as an error. `milestones[n]` is called
    (once, from a worker) when the n-th request has completed; the workers wait meanwhile.
    """
    lock = threading.Lock()
    pending = dict(milestones or {})
    state = {"sent": 0, "done": 0, "errors": 0}
    messages: list[str] = []
    gate = threading.Event()
    gate.set()

    def worker() -> None:
        with TritonClient(address, "grpc") as client:
            request = client.prepare(typed(feeds), None)
            while True:
                gate.wait()
                with lock:
                    if state["sent"] >= total:
                        return
                    state["sent"] += 1
                try:
                    result = client.send(model, request)
                    if check is not None:
                        check(result)
                    failed = None
                except (InferenceServerException, AssertionError) as exc:
                    failed = str(exc)
                with lock:
                    state["done"] += 1
                    if failed is not None:
                        state["errors"] += 1
                        if len(messages) < 5:
                            messages.append(failed)
                    milestone = pending.pop(state["done"], None)
                    if milestone is not None:
                        gate.clear()
                if milestone is not None:
                    _run_milestone(milestone, gate, lock, state)

    started = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return LoadResult(state["done"], state["errors"], time.monotonic() - started, messages)


def _run_milestone(
    milestone: Callable[[], None],
    gate: threading.Event,
    lock: threading.Lock,
    state: dict[str, int],
) -> None:
    """Run `milestone` once the requests already in flight have finished, then reopen."""
    try:
        while True:
            with lock:
                if state["done"] == state["sent"]:
                    break
            time.sleep(0.01)
        milestone()
    finally:
        gate.set()


def can_limit_shm() -> str:
    """Empty if a private tmpfs can be mounted on /dev/shm here, else why not."""
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is not installed"
    command = _unshare_prefix() + ["sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode:
        return f"cannot mount a private /dev/shm: {completed.stderr.strip()}"
    return ""


def _unshare_prefix() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--propagation", "private", "--"]


def small_shm_binary(directory: Path, size: str) -> tuple[ServerBinary, dict[str, str]]:
    """The bundled server run in its own mount namespace with a `size` tmpfs on /dev/shm.

    Returns the binary and the environment the wrapper needs (pass both to `TritonServer`).
    The real server path and the size reach the shell as positional parameters and
    environment values, never as command text.
    """
    real = find_server()
    wrapper = directory / "tritonserver-small-shm"
    script = 'mount -t tmpfs -o size="$GE_TEST_SHM_SIZE" tmpfs /dev/shm && exec "$0" "$@"'
    prefix = " ".join(_unshare_prefix())
    wrapper.write_text(
        f'#!/bin/sh\nexec {prefix} sh -c \'{script}\' "$GE_TEST_TRITONSERVER" "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {"GE_TEST_SHM_SIZE": size, "GE_TEST_TRITONSERVER": str(real.executable)}
    return dataclasses.replace(real, executable=wrapper), env


def instance_args(result: Any, name: str, **parameters: str) -> dict[str, str]:
    """The `args` Triton gives the `initialize` of `name`'s first instance (`result`: scaffold's),
    its config's `parameters` set as given."""
    config = load_model_config(result.config_path)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return {
        "model_config": json.dumps(json_format.MessageToDict(config)),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{name}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(result.model_dir),
        "model_version": "1",
        "model_name": name,
    }
