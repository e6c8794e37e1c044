"""Helpers for end-to-end tests on the real tritonserver (bundled in nvidia-pytriton).

```
from e2e_helpers import running_server, write_python_model

with running_server(repo, log_path=tmp_path / "triton.log", env={...}) as server:
    with TritonClient(http_address(server), "http") as client:  # ge_python_backend.client
        client.infer("model", {"x": (array, "FP32")})
```
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psutil

from ge_python_backend.server import TritonServer, free_port, free_ports

__all__ = [
    "free_port",
    "free_ports",
    "grpc_address",
    "http_address",
    "model_states",
    "running_server",
    "wait_for_state",
    "write_python_model",
]


@contextlib.contextmanager
def running_server(
    repository: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    log_path: str | Path | None = None,
    ready_timeout: float = 120.0,
    **options: Any,
) -> Iterator[TritonServer]:
    """A started and ready `TritonServer`, stopped on exit.

    `options` go to `TritonServer` (ports, model_control_mode, load_models, ...). If the block
    fails, the server log tail is printed to stderr (pytest shows it with the failure).
    """
    server = TritonServer(repository, env=env, log_path=log_path, **options)
    server.start()
    try:
        server.wait_ready(ready_timeout)
        yield server
    except BaseException:
        print(f"--- tritonserver log ({server.log_path}) ---", file=sys.stderr)
        print(server.log_tail(80), file=sys.stderr)
        raise
    finally:
        server.stop()


def http_address(server: TritonServer) -> str:
    """`HOST:PORT` of the HTTP endpoint (what `tritonclient.http` takes)."""
    return server.urls.http.removeprefix("http://")


def grpc_address(server: TritonServer) -> str:
    """`HOST:PORT` of the gRPC endpoint."""
    return server.urls.grpc


def model_states(server: TritonServer) -> dict[str, tuple[str, str]]:
    """`{name: (state, reason)}` from `POST /v2/repository/index`."""
    return {
        entry["name"]: (entry.get("state", ""), entry.get("reason", ""))
        for entry in server.repository_index()
    }


def wait_for_state(
    server: TritonServer, name: str, state: str = "READY", timeout: float = 60.0
) -> tuple[str, str]:
    """Poll the repository index until model `name` reaches `state`; its (state, reason)."""
    deadline = time.monotonic() + timeout
    while True:
        current = model_states(server).get(name, ("", ""))
        if current[0] == state:
            return current
        if time.monotonic() > deadline:
            raise AssertionError(f"model {name!r} is {current}, not {state} after {timeout} s")
        time.sleep(0.2)


def write_python_model(repository: Path, name: str, config_pbtxt: str, model_py: str) -> Path:
    """Write `<repository>/<name>/config.pbtxt` and `1/model.py`; the model directory."""
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(textwrap.dedent(config_pbtxt))
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(model_py))
    return model_dir


# A numpy-only Python model, Y = X + 1: a Triton model none of ours.
ADD_ONE_CONFIG = """\
name: "add_one"
backend: "python"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }
"""

ADD_ONE_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + 1)]
            )
            for r in requests
        ]
"""


def write_add_one(repository: Path) -> Path:
    """Write the `add_one` model (`ADD_ONE_CONFIG`, `ADD_ONE_MODEL`) into `repository`."""
    return write_python_model(repository, "add_one", ADD_ONE_CONFIG, ADD_ONE_MODEL)


class ServeProcess:
    """`ge-python-model serve REPOSITORY ARGUMENTS...` as a process (`env`: its environment),
    stdout and stderr collected line by line."""

    def __init__(
        self, repository: Path, *arguments: str, env: Mapping[str, str] | None = None
    ) -> None:
        command = [sys.executable, "-m", "ge_python_backend.cli", "serve", str(repository)]
        self.process = subprocess.Popen(
            [*command, *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, count: int = 1, timeout: float = 120.0) -> None:
        """Until `count` lines of its output hold `text` (fails when serve ended without them)."""
        deadline = time.monotonic() + timeout
        while sum(text in line for line in self.lines) < count:
            assert self.process.poll() is None or self._reader.is_alive(), self.output
            assert time.monotonic() < deadline, f"no {text!r} in:\n{self.output}"
            time.sleep(0.1)

    def tritonserver(self) -> psutil.Process:
        """The tritonserver serve runs now."""
        (server,) = [
            child
            for child in psutil.Process(self.process.pid).children()
            if child.name() == "tritonserver"
        ]
        return server
