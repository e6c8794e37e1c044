"""`ge-python-model serve` starts the device host of each device its `device_host` models use
before Triton, keeps it up (a killed one is started again), and lets it go when it stops."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from test_device_host_e2e import device_processes, holders_by_label
from test_serve_leftovers import Serve

from ge_python_backend.client import TritonClient, typed
from ge_python_backend.processes import RUN_DIR_ENV, is_alive, start_time
from ge_python_backend.repository.scaffold import scaffold

pytestmark = pytest.mark.e2e


def test_serve_starts_the_device_host_first_and_starts_it_again_when_it_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, om_dynamic_batch: Path
) -> None:
    host = {"GE_EMULATOR_HOST_DIR": str(tmp_path / "host"), RUN_DIR_ENV: str(tmp_path / "run")}
    for name, value in host.items():
        monkeypatch.setenv(name, value)  # serve inherits them, and this test reads the records
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="hosted", runtime="emulator", device_host=True)
    serve = Serve(repository, tmp_path / "tmp", "--no-watch")
    try:
        serve.wait_ready()
        assert "device host of device 0:" in serve.output.split("Triton is ready")[0]
        url = serve.value(r"gRPC\s+(\S+)")
        (hosting,) = holders_by_label()["hosted"]
        assert device_processes(host) == {hosting}
        os.kill(hosting, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while "the device host of device 0 died; starting it again" not in serve.output:
            assert time.monotonic() < deadline, serve.output
            time.sleep(0.2)
        with TritonClient(url, "grpc", timeout_s=60) as client:  # serving again, a new host
            for _ in range(2):  # the first request may meet the old host's closed connection
                try:
                    result = client.infer("hosted", typed({"x": np.ones((2, 16), np.float32)}))
                    break
                except Exception as exc:  # tritonclient's InferenceServerException
                    assert "went away" in str(exc), exc
        assert result["y"].shape == (2, 8)
        (again,) = holders_by_label()["hosted"]
        assert again != hosting and is_alive(again, start_time(again) or 0)
    finally:
        assert serve.stop() == 0, serve.output
