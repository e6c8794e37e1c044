"""`ge-python-model selftest`: every probe passes on the emulator (host and RC mode); a
misbehaving emulator, or the runtime's dims-gear order reverted to graph order, fails a probe; the
models come from the emulator, from `atc`, or prebuilt from --om-dir with the printed commands."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ge_python_backend.cli import main
from ge_python_backend.emulator.omfile import OmModel, compile_onnx
from ge_python_backend.runtime import model as runtime_model
from ge_python_backend.runtime.model import TensorInfo
from ge_python_backend.runtime.selftest import run_selftest
from ge_python_backend.runtime.selftest_models import MODELS, prepare_models

DIMS_PROBES = {"gears: dims in --input_shape order", "gears: dims, order given"}


def _selftest(tmp_path: Path, **env: str) -> tuple[int, str, dict[str, Any]]:
    """Run the command in a fresh process (the emulator reads its run mode at acl.init)."""
    report = tmp_path / "selftest.json"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GE_")}
    result = subprocess.run(
        [sys.executable, "-m", "ge_python_backend.cli", "selftest", "--runtime", "emulator"]
        + ["--device", "1", "--json", str(report)],
        capture_output=True,
        text=True,
        env={**environ, **env},
        timeout=300,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr, json.loads(report.read_text())


@pytest.mark.parametrize("mode", ["host", "device"])
def test_every_probe_passes_on_the_emulator(tmp_path: Path, mode: str) -> None:
    code, output, report = _selftest(tmp_path, GE_EMULATOR_RUN_MODE=mode)
    assert code == 0, output
    probes = report["probes"]
    assert len(probes) >= 15
    assert len({p["name"] for p in probes}) == len(probes)
    assert all(p["passed"] and p["detail"] for p in probes), output
    assert (report["runtime"], report["run_mode"], report["soc"]) == (
        "emulator",
        mode,
        "Ascend310P3",
    )
    assert report["device_id"] == 1 and report["passed"] is True
    assert output.count("[PASS]") == len(probes)
    assert f"all {len(probes)} probes passed" in output
    kinds = "device to device (3" if mode == "device" else "host to device (1)"
    run_mode = next(p for p in probes if p["name"] == "run mode")
    assert kinds in run_mode["detail"]


@pytest.mark.parametrize(
    ("fault", "probe"),
    [
        ("rt.event_elapsed_time:507000:1", "events"),
        ("mdl.set_dynamic_hw_size:507011:1", "gears: HW"),
    ],
)
def test_a_fault_on_one_call_fails_its_probe_and_the_exit_code(
    tmp_path: Path, fault: str, probe: str
) -> None:
    code, output, report = _selftest(tmp_path, GE_EMULATOR_FAULTS=fault)
    assert code == 1
    failed = [p for p in report["probes"] if not p["passed"]]
    assert [p["name"] for p in failed] == [probe]
    assert fault.split(":")[1] in failed[0]["detail"]
    assert f"[FAIL] {probe}:" in output and "FAILED: 1 of" in output
    assert report["passed"] is False


def _graph_order_split(
    gears: Sequence[tuple[int, ...]],
    inputs: Sequence[TensorInfo],
    path: Path,
    input_shape_order: Sequence[str] | None,
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The dims-gear bug of issue 12: each gear split in the model's input order."""
    del path, input_shape_order
    result = []
    for gear in gears:
        shapes, start = [], 0
        for info in inputs:
            shapes.append(tuple(gear[start : start + len(info.spec.shape)]))
            start += len(info.spec.shape)
        result.append(tuple(shapes))
    return tuple(result)


@pytest.mark.usefixtures("clean_acl")
def test_reverting_the_dims_order_fix_fails_the_dims_probes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GE_PYTHON_BACKEND_ACL", raising=False)
    assert run_selftest("emulator", compile_onnx=compile_onnx).passed  # the order fix in place
    monkeypatch.setattr(runtime_model, "_split_dims_gears", _graph_order_split)
    report = run_selftest("emulator", compile_onnx=compile_onnx)
    failed = {p.name: p.detail for p in report.probes if not p.passed}
    assert set(failed) >= DIMS_PROBES, failed
    assert "expected" in failed["gears: dims, order given"]  # swapped silently: caught by values
    assert not {"gears: batch", "gears: HW", "execute_async"} & set(failed)


def _v1_only(
    acl: Any, desc: int, index: int, name: str, dtype: Any, dims: Any, size: int, path: Path
) -> Any:
    """The bug of issue 21: every input served in get_input_dims' (v1) dims."""
    return dims


@pytest.mark.usefixtures("clean_acl")
def test_serving_v1_dims_fails_the_aipp_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GE_PYTHON_BACKEND_ACL", raising=False)
    monkeypatch.setattr(runtime_model, "_served_dims", _v1_only)
    report = run_selftest("emulator", compile_onnx=compile_onnx)
    failed = {p.name: p.detail for p in report.probes if not p.passed}
    assert set(failed) == {"static AIPP dims v2", "model description"}, failed
    assert (
        "(1, 6, 8, 3))], expected [('image', 'uint8', (1, 9, 8, 1))]"
        in (failed["model description"])
    )


def test_the_emulator_runtime_needs_the_emulator_compiler() -> None:
    with pytest.raises(ValueError, match="needs compile_onnx"):
        run_selftest("emulator")
    with pytest.raises(ValueError, match="pyacl takes none"):
        run_selftest("pyacl", compile_onnx=compile_onnx)


def _fake_atc(directory: Path) -> Path:
    """An `atc` that is the emulator's compiler (which takes ATC's flag names): no real ATC
    runs here, so this checks the commands' flags and the compile-with-atc path."""
    directory.mkdir()
    script = directory / "atc"
    command = f"{shlex.quote(sys.executable)} -m ge_python_backend.cli emulator compile"
    script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    script.chmod(0o755)
    return directory


def test_models_are_compiled_with_atc_when_it_is_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(_fake_atc(tmp_path / "bin")))
    prepared = prepare_models(None, "Ascend910B3", tmp_path / "models", tmp_path / "scratch")
    assert prepared.missing == {}
    assert "atc" in prepared.how and "Ascend910B3" in prepared.how
    for spec in MODELS:
        om = OmModel.load(prepared.paths[spec.name])
        assert om.header["flags"]["soc_version"] == "Ascend910B3"
        assert om.description.dynamic_kind == spec.kind
        assert om.header["flags"]["input_shape"] == spec.flags["input_shape"]


def test_without_atc_models_come_from_om_dir_made_by_the_printed_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no atc
    om_dir = tmp_path / "models"
    nowhere = prepare_models(None, "Ascend310P3", None, tmp_path / "scratch")
    assert set(nowhere.missing) == {m.name for m in MODELS}
    assert all("--om-dir" in reason for reason in nowhere.missing.values())

    first = prepare_models(None, "Ascend310P3", om_dir, tmp_path / "scratch")
    assert set(first.missing) == {m.name for m in MODELS} and not first.paths
    assert "is missing" in first.missing["static"]
    assert len(first.atc_commands) == len(MODELS)
    fake = _fake_atc(tmp_path / "bin") / "atc"
    for command in first.atc_commands:
        argv = shlex.split(command)
        assert argv[0] == "atc" and "--soc_version=Ascend310P3" in argv
        subprocess.run([str(fake), *argv[1:]], check=True, capture_output=True, timeout=120)
    dims = next(c for c in first.atc_commands if "selftest_dims.onnx" in c)
    assert "--input_format=ND" in dims and "--input_shape=b:2,-1;a:1,-1" in shlex.split(dims)

    second = prepare_models(None, "Ascend310P3", om_dir, tmp_path / "scratch")
    assert second.missing == {}
    assert second.paths == {m.name: om_dir / f"selftest_{m.name}.om" for m in MODELS}


def test_pyacl_that_cannot_be_imported_is_a_user_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("GE_PYTHON_BACKEND_ACL", raising=False)
    monkeypatch.setitem(sys.modules, "acl", None)  # import acl fails even on an Ascend host
    assert main(["selftest", "--runtime", "pyacl"]) == 2
    assert "set_env.sh" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["selftest", "--device", "-1"])
