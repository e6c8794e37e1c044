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
    argv = {
        "inspect": ["inspect", om],
        "scaffold": ["scaffold", om, "--repository", models],
        "compare": ["compare", "--om", om, "--onnx", onnx],
        "selftest": ["selftest"],
        "validate": ["validate", models, "--runtime", "pyacl"],
    }[command]
    if command == "validate":  # a repository made with the emulator, checked with pyACL
        assert cli.main(["scaffold", om, "-r", models, "--runtime", "emulator"]) == 0
    cli.main(argv)
    printed = "".join(capsys.readouterr())
    assert "Without an NPU, use the CPU emulator: --runtime emulator or" in printed
    assert "runtime='emulator'" not in printed


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
        "inputs: x FLOAT[-1,16]; outputs: Relu_2:0:y FLOAT[-1,8], ReduceSum_3:0:z FLOAT[-1,1]; "
        "batch gears 1;2;8"
    )
    assert cli.main(["inspect", str(tmp_path / "mlp.om"), "--runtime", "emulator"]) == 0
    table = capsys.readouterr().out
    assert "x     FP32  float32  [-1, 16]  ND" in table
    assert "y     FP32  float32  [-1, 8]  ND" in table
