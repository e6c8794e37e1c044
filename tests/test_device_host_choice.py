"""The tools choose the device host: a GPU team's repository whose models do not fit one device in
their own stubs (pyACL's processes per device, or its memory) is migrated in one command with
the models of that device under the device host (parameter device_host on, said on the console);
`validate` then passes, `validate --fix` does the same for a repository written by hand, a model
whose config chooses device_host itself is left as it is, and the repository serves on the real
tritonserver with every model answering, without a hand edit.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import grpc_address, model_states, running_server
from onnx_models import build_mlp, reference

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.repository.budget import DeviceLimits, budget, footprints
from ge_python_backend.repository.config import config_view, load_model_config
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.shm import repository_entries

MODELS = 40
INSTANCES = 2
GPU_CONFIG = """\
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "x" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [
  {{ name: "y" data_type: TYPE_FP32 dims: [ 8 ] }},
  {{ name: "z" data_type: TYPE_FP32 dims: [ 1 ] }}
]
instance_group [ {{ kind: KIND_GPU count: {instances} }} ]
dynamic_batching {{ max_queue_delay_microseconds: 200 }}
"""


def gpu_repository(root: Path, models: int) -> Path:
    """`models` MLPs (weights of their own) as a GPU team serves them: onnxruntime on KIND_GPU,
    2 instances each."""
    for k in range(models):
        name = f"mlp{k:02d}"
        (root / name / "1").mkdir(parents=True)
        build_mlp(root / name / "1" / "model.onnx", seed=k)
        config = GPU_CONFIG.format(name=name, instances=INSTANCES)
        (root / name / "config.pbtxt").write_text(textwrap.dedent(config))
    return root


def hosted(repository: Path) -> dict[str, bool]:
    return {
        path.parent.name: ModelParameters.from_config(
            config_view(load_model_config(path))
        ).in_device_host
        for path in sorted(repository.glob("*/config.pbtxt"))
    }


def test_a_repository_over_the_device_processes_is_migrated_under_the_device_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = gpu_repository(tmp_path / "gpu", MODELS)
    destination = tmp_path / "npu"
    code = main(["migrate", str(source), str(destination), "--runtime", "emulator", "--jobs", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"parameter device_host on written for {MODELS} model(s)" in out
    assert f"device 0: {MODELS * INSTANCES} processes (of 64)" in out
    assert set(hosted(destination).values()) == {True}
    # one process (the device host) holds all 80 instances, each model's weights once
    (row,) = budget(footprints(repository_entries(destination)), DeviceLimits()).rows
    assert row.processes == 1
    assert main(["validate", str(destination)]) == 0


def test_validate_fix_hosts_what_does_not_fit_and_leaves_a_chosen_device_host_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = gpu_repository(tmp_path / "gpu", 3)
    destination = tmp_path / "npu"
    assert main(["migrate", str(source), str(destination), "--runtime", "emulator"]) == 0
    assert set(hosted(destination).values()) == {False}  # 6 processes fit 64
    chosen = destination / "mlp00" / "config.pbtxt"
    chosen.write_text(
        chosen.read_text() + 'parameters { key: "device_host" value: { string_value: "off" } }\n'
    )
    capsys.readouterr()
    assert main(["validate", str(destination), "--processes-per-device", "4"]) == 1
    assert "problem: device 0: 6 processes" in capsys.readouterr().out
    assert main(["validate", str(destination), "--processes-per-device", "4", "--fix"]) == 0
    out = capsys.readouterr().out
    assert "parameter device_host on written for 2 model(s): mlp01, mlp02" in out
    assert hosted(destination) == {"mlp00": False, "mlp01": True, "mlp02": True}


@pytest.mark.e2e
def test_the_migrated_repository_serves_from_the_device_host_without_a_hand_edit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models = int(os.environ.get("GE_HOST_CHOICE_SERVED_MODELS", "6"))
    source = gpu_repository(tmp_path / "gpu", models)
    destination = tmp_path / "npu"
    flags = ["--runtime", "emulator", "--processes-per-device", "8"]
    assert main(["migrate", str(source), str(destination), *flags]) == 0
    assert set(hosted(destination).values()) == {True}
    env = {
        "GE_EMULATOR_HOST_DIR": str(tmp_path / "host"),
        RUN_DIR_ENV: str(tmp_path / "run"),
    }
    monkeypatch.setenv(RUN_DIR_ENV, env[RUN_DIR_ENV])
    rng = np.random.default_rng(3)
    with running_server(destination, env=env, log_path=tmp_path / "triton.log") as server:
        states = model_states(server)
        assert {name for name, (state, _) in states.items() if state == "READY"} == set(
            hosted(destination)
        ), states
        with TritonClient(grpc_address(server), "grpc") as client:
            for name in hosted(destination):
                x = rng.standard_normal((3, 16)).astype(np.float32)
                answer = client.infer(name, typed({"x": x}))
                expected = reference(source / name / "1" / "model.onnx", {"x": x})
                np.testing.assert_allclose(answer["y"], expected["y"], rtol=2e-2, atol=2e-2)
