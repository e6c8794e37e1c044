"""`ge-python-model probe`: a real inference as liveness check, on the real tritonserver.

A live server answers the probe (exit 0, HTTP and gRPC); a server whose every execution hangs
(`GE_EMULATOR_FAULTS="mdl.execute_async:hang:*"`) still reports itself ready, and the probe
fails (exit 1) within its timeout, saying so.
"""

from __future__ import annotations

import io
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import grpc_address, http_address, running_server

from ge_python_backend.ascend import DVPP_LIMITS
from ge_python_backend.cli import main
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer
from ge_python_backend.tools.probe import PROBE_JPEG, output_problems, probe_inputs

HANG = {"GE_EMULATOR_FAULTS": "mdl.execute_async:hang:*"}


def run_probe(*args: str) -> subprocess.CompletedProcess[str]:
    """`ge-python-model probe ARGS` as a process (given 120 s: a probe that waited on a hung
    model for ever would fail the test)."""
    return subprocess.run(
        [sys.executable, "-m", "ge_python_backend.cli", "probe", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_probe_inputs_follow_the_config(
    om_dynamic_batch: Path, om_hw: Path, tmp_path: Path
) -> None:
    batch = scaffold(om_dynamic_batch, tmp_path, name="mlp", runtime="emulator", dry_run=True)
    inputs = probe_inputs(batch.config)
    assert {name: (a.shape, a.dtype, dt) for name, (a, dt) in inputs.items()} == {
        "x": ((1, 16), np.dtype(np.float32), "FP32")
    }
    assert not inputs["x"][0].any()
    hw = scaffold(om_hw, tmp_path, name="conv", runtime="emulator", dry_run=True)
    assert probe_inputs(hw.config)["image"][0].shape == (1, 3, 16, 16)  # the first HW gear
    bare = scaffold(om_hw, tmp_path, name="conv", runtime="emulator", dry_run=True, warmup=False)
    assert probe_inputs(bare.config)["image"][0].shape == (1, 3, 1, 1)  # -1 axes as 1


def test_an_image_input_is_probed_with_a_jpeg_every_soc_decodes(
    om_aipp_yuv: Path, tmp_path: Path
) -> None:
    config = scaffold(
        om_aipp_yuv, tmp_path, name="yuv", runtime="emulator", dry_run=True, image_input="image"
    ).config
    array, datatype = probe_inputs(config)["image"]
    assert (array.shape, datatype) == ((1, 1), "BYTES") and array[0, 0] == PROBE_JPEG
    image_module = pytest.importorskip("PIL.Image", reason="Pillow is the emulator extra's")
    from PIL import JpegImagePlugin

    with image_module.open(io.BytesIO(PROBE_JPEG)) as image:
        assert (image.format, image.size, image.mode) == ("JPEG", (256, 256), "RGB")
        assert "progressive" not in image.info
        assert JpegImagePlugin.get_sampling(image) == 2  # 4:2:0
        assert (np.asarray(image) == 128).all()  # mid-grey
    for limits in DVPP_LIMITS.values():  # JPEGD decodes it; VPC scales it into any rows
        assert limits.jpegd_refusal(256, 256) is None
        for rows in ((8, 8), (224, 224), (640, 480), (4096, 4096)):
            assert limits.vpc_scale_refusal((256, 256), rows) is None, (limits.family, rows)


def test_output_problems_name_what_is_wrong(om_dynamic_batch: Path, tmp_path: Path) -> None:
    config = scaffold(
        om_dynamic_batch, tmp_path, name="mlp", runtime="emulator", dry_run=True
    ).config
    good = {
        "y": (np.zeros((1, 8), np.float32), "FP32"),
        "z": (np.zeros((1, 1), np.float32), "FP32"),
    }
    assert output_problems(config, good) == []
    assert output_problems(config, {"y": good["y"]}) == ["output 'z' is missing"]
    assert output_problems(config, {**good, "y": (good["y"][0], "FP16")}) == [
        "output 'y' is FP16, the config says FP32"
    ]
    assert output_problems(config, {**good, "z": (np.zeros((1, 2), np.float32), "FP32")}) == [
        "output 'z' has shape [1, 2], the config says [1, 1] (-1: any)"
    ]


@pytest.fixture(scope="module")
def live_server(
    tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path, om_hw: Path
) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("probe_live")
    scaffold(om_dynamic_batch, root / "models", name="mlp", runtime="emulator")
    scaffold(om_hw, root / "models", name="conv", runtime="emulator")
    with running_server(root / "models", log_path=root / "triton.log") as server:
        yield server


@pytest.mark.e2e
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["mlp", "conv"])
def test_probe_passes_on_a_live_model(live_server: TritonServer, protocol: str, model: str) -> None:
    url = http_address(live_server) if protocol == "http" else grpc_address(live_server)
    result = run_probe("--url", url, "--protocol", protocol, "--model", model, "--timeout", "10")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"ok: model {model!r} at {protocol}://{url} answered in ")


@pytest.mark.e2e
def test_probe_fails_on_an_unknown_model_or_server(live_server: TritonServer) -> None:
    result = run_probe("--url", http_address(live_server), "--model", "nope")
    assert result.returncode == 1
    assert "FAILED: model 'nope'" in result.stderr and "reading its config failed" in result.stderr
    result = run_probe("--url", "127.0.0.1:1", "--model", "mlp", "--timeout", "3")
    assert result.returncode == 1 and "FAILED" in result.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("command", ["probe", "infer", "bench"])
def test_a_wrong_port_or_protocol_is_one_line(
    live_server: TritonServer, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each protocol's client pointed at the other protocol's port, and at a closed port."""
    extra = {"probe": ["--timeout", "5"], "infer": [], "bench": ["--duration", "1"]}[command]
    targets = [
        ("http", grpc_address(live_server), "the reply is not HTTP/1.1"),
        ("grpc", http_address(live_server), "grpc://"),
        ("http", "127.0.0.1:1", "Connection refused"),
    ]
    for protocol, url, reason in targets:
        args = [command, "--url", url, "--protocol", protocol, "--model", "mlp", *extra]
        assert main(args) in (1, 2)
        printed = capsys.readouterr()
        message = printed.err.strip()
        assert message.startswith(f"ge-python-model {command}: "), printed
        assert len(message.splitlines()) == 1 and reason in message, message


@pytest.mark.e2e
def test_probe_fails_within_its_timeout_on_a_hung_model(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    # No warmup: it would hang the load itself.
    scaffold(om_dynamic_batch, tmp_path / "models", name="mlp", runtime="emulator", warmup=False)
    with running_server(
        tmp_path / "models", env=HANG, log_path=tmp_path / "triton.log", exit_timeout=2
    ) as server:
        with urllib.request.urlopen(server.urls.http + "/v2/models/mlp/ready") as reply:
            assert reply.status == 200  # Triton's own readiness does not notice
        for protocol, url in (("http", http_address(server)), ("grpc", grpc_address(server))):
            result = run_probe(
                "--url", url, "--protocol", protocol, "--model", "mlp", "--timeout", "3"
            )
            assert result.returncode == 1, result.stdout
            # given up by its own 3 s timeout, not waiting on the hung model
            assert "no answer to inference on x FP32 [1, 16] within the 3 s timeout" in (
                result.stderr
            )
