"""The command line as a whole: hints naming its flags, what `emulator compile` prints.

These need the [cli] extra, so they are not among the runtime's and emulator's tests that also
run in the stub's environments (tests/test_stub_environments.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx_models
import pytest

from ge_python_backend import cli
from ge_python_backend.repository.config import config_view, load_model_config
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.runtime import ENV_VAR


@pytest.mark.parametrize("command", ["inspect", "scaffold", "compare", "selftest", "validate"])
def test_commands_hint_at_the_runtime_flag(
    command: str,
    om_static: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "acl", None)  # `import acl` fails, as without CANN
    om, onnx, models = str(om_static), str(om_static.with_suffix(".onnx")), str(tmp_path / "m")
    argv = {  # an emulator .om read with pyACL, as --runtime pyacl asks
        "inspect": ["inspect", om],
        "scaffold": ["scaffold", om, "--repository", models],
        "compare": ["compare", "--om", om, "--onnx", onnx],
        "selftest": ["selftest"],
        "validate": ["validate", models],
    }[command]
    if command == "validate":  # a repository made with the emulator, checked with pyACL
        assert cli.main(["scaffold", om, "-r", models, "--runtime", "emulator"]) == 0
    cli.main([*argv, "--runtime", "pyacl"])
    printed = "".join(capsys.readouterr())
    assert "Without an NPU, use the CPU emulator: --runtime emulator or" in printed
    assert "runtime='emulator'" not in printed


@pytest.mark.parametrize("command", ["inspect", "inspect --config", "scaffold", "compare"])
def test_commands_read_an_emulator_om_without_the_runtime_flag(
    command: str,
    om_static: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The container says what reads the .om: no --runtime, and no pyACL to fall back on."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "acl", None)  # `import acl` fails, as without CANN
    om, onnx, models = str(om_static), str(om_static.with_suffix(".onnx")), tmp_path / "m"
    name, *flags = command.split()
    argv = {
        "inspect": ["inspect", om, *flags],
        "scaffold": ["scaffold", om, "--repository", str(models)],
        "compare": ["compare", "--om", om, "--onnx", onnx],
    }[name]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    if name == "scaffold":  # the config names the runtime that read it
        config = load_model_config(models / "mlp_static" / "config.pbtxt")
        assert ModelParameters.from_config(config_view(config)).acl_runtime == "emulator"
    elif name == "compare":
        assert "PASS" in out
    else:
        assert "[4, 16]" in out or "dims: 16" in out


@pytest.mark.parametrize("command", ["inspect", "inspect --config", "scaffold", "validate"])
def test_a_real_om_without_pyacl_gets_one_line(
    command: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "acl", None)  # `import acl` fails, as without CANN
    om = tmp_path / "detector.om"
    om.write_bytes(b"IMOD" + bytes(252))  # how a real ATC .om starts
    models = tmp_path / "m"
    (models / "detector" / "1").mkdir(parents=True)
    assert cli.main(["template", str(models / "detector" / "1")]) == 0
    (models / "detector" / "1" / "detector.om").write_bytes(om.read_bytes())
    capsys.readouterr()
    name, *flags = command.split()
    argv = {
        "inspect": ["inspect", str(om), *flags],
        "scaffold": ["scaffold", str(om), "--repository", str(tmp_path / "out")],
        "validate": ["validate", str(models)],
    }[name]
    cli.main(argv)
    printed = "".join(capsys.readouterr())
    needs = (
        "is a real ATC .om (it starts with b'IMOD'): reading it needs pyACL (the `acl` module), "
        "which cannot be imported here"
    )
    (line,) = [line for line in printed.splitlines() if needs in line]
    assert "source CANN's set_env.sh" in line
    assert "emulator" not in line  # the emulator cannot read it: not offered


def test_cli_compile_prints_batch_gear_shapes_as_inspect_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file records outputs at the largest gear ([8,8]); the runtime, and so `inspect`,
    reads them with -1 on the batch axis. The 2-D input is ND whatever --input_format says."""
    onnx_path = onnx_models.build_mlp(tmp_path / "mlp.onnx")
    argv = ["emulator", "compile", f"--model={onnx_path}", "--framework=5"]
    argv += ["--output", str(tmp_path / "mlp"), "--input_shape", "x:-1,16"]
    assert cli.main([*argv, "--dynamic_batch_size", "1,2,8"]) == 0
    compiled = capsys.readouterr().out.splitlines()[1]
    assert compiled == (
        "inputs: x FLOAT[-1,16]; outputs: y FLOAT[-1,8], z FLOAT[-1,1]; batch gears 1;2;8"
    )
    assert cli.main(["inspect", str(tmp_path / "mlp.om"), "--runtime", "emulator"]) == 0
    table = capsys.readouterr().out
    assert "x     FP32  float32  [-1, 16]  ND" in table
    assert "y     FP32  float32  [-1, 8]  ND" in table
