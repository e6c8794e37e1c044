"""`ge-python-model doctor`: each check on real inputs, and the command on this host."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from ge_python_backend.cli import main
from ge_python_backend.emulator import acl as emulator_acl
from ge_python_backend.emulator import set_faults
from ge_python_backend.errors import UserError
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.shm import RepositoryModel
from ge_python_backend.runtime import AclProbe, probe_acl
from ge_python_backend.server import ServerBinary, bundled_server_root, find_server
from ge_python_backend.tools.doctor import (
    CAP_DAC_OVERRIDE,
    FAIL,
    MANAGEMENT_NODES,
    OK,
    SKIP,
    WARN,
    check_cann_environment,
    check_device_nodes,
    check_devices_open,
    check_emulator,
    check_npu_devices,
    check_pyacl,
    check_runtime_override,
    check_shm,
    check_stub_python,
    check_tritonserver,
    check_visible_devices,
    effective_capabilities,
    parse_device_list,
    run_checks,
    stub_python_version,
)

HAS_PYACL = importlib.util.find_spec("acl") is not None
no_pyacl_here = pytest.mark.skipif(HAS_PYACL, reason="pyACL is installed on this host")
HERE = f"{sys.version_info.major}.{sys.version_info.minor}"


@no_pyacl_here
def test_this_host_reports_honestly_that_no_npu_is_present() -> None:
    results = {r.name: r for r in run_checks("pyacl", start_server=False, environ={})}
    for name in ("cann_env", "pyacl", "npu"):
        assert results[name].status == FAIL and results[name].blocking, results[name]
    assert "no NPU present" in results["npu"].detail
    assert "set_env.sh" in results["pyacl"].fix and "set_env.sh" in results["cann_env"].fix
    assert "--runtime emulator" in results["npu"].fix
    assert results["emulator"].status == OK and not results["emulator"].required
    emulated = {r.name: r for r in run_checks("emulator", start_server=False, environ={})}
    assert not any(r.blocking for r in emulated.values())
    assert emulated["npu"].status == FAIL and not emulated["npu"].required


@pytest.mark.e2e  # doctor without --no-server starts the bundled tritonserver
@no_pyacl_here
def test_cli_exit_codes_and_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--runtime", "pyacl", "--no-server"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] NPU devices: no NPU present" in out
    assert "NOT READY for the pyacl runtime: 3 required check(s) failed" in out
    assert "no NPU is present on this host" in out
    assert out.count("fix: ") >= 3

    assert main(["doctor", "--runtime", "emulator"]) == 0
    out = capsys.readouterr().out
    assert "[OK  ] tritonserver: Triton 2.51.0" in out
    assert "[WARN] NPU devices" in out and "(not required)" in out
    assert "ready for the emulator runtime" in out


def test_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "models").mkdir()
    args = ["doctor", "--runtime", "emulator", "--no-server", "--json"]
    assert main([*args, "--repository", str(tmp_path / "models")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runtime"] == "emulator"
    checks = {row["name"]: row for row in report["checks"]}
    assert checks["tritonserver"]["status"] == "SKIP"
    assert "the repository needs about 256 MiB" in checks["shm"]["detail"]
    assert main([*args, "--repository", str(tmp_path / "missing")]) == 2


def test_cann_environment(tmp_path: Path) -> None:
    home, opp = tmp_path / "latest", tmp_path / "latest" / "opp"
    opp.mkdir(parents=True)
    good = check_cann_environment({"ASCEND_TOOLKIT_HOME": str(home), "ASCEND_OPP_PATH": str(opp)})
    assert good.status == OK and str(home) in good.detail
    script = tmp_path / "set_env.sh"
    script.write_text("export ASCEND_TOOLKIT_HOME=...\n")
    stale = check_cann_environment(
        {"ASCEND_HOME_PATH": str(tmp_path / "gone"), "ASCEND_OPP_PATH": str(opp)},
        scripts=[tmp_path / "absent.sh", script],
    )
    assert stale.status == FAIL and "does not exist" in stale.detail
    assert f"source {script}" in stale.fix
    unset = check_cann_environment({}, required=False, scripts=[tmp_path / "absent.sh"])
    assert unset.status == FAIL and not unset.blocking and "not set" in unset.detail


def test_pyacl_check_with_an_acl_module() -> None:
    passed = check_pyacl(probe_acl("emulator"))
    assert passed.status == OK and "ACL 8.0.0" in passed.detail
    pyacl = probe_acl("pyacl")
    if not pyacl.imported:
        failed = check_pyacl(pyacl)
        assert failed.status == FAIL and "No module named 'acl'" in failed.detail


def test_npu_devices(tmp_path: Path) -> None:
    for name in ("davinci0", "davinci1", "davinci_manager", "devmm_svm"):
        (tmp_path / name).touch()
    counted = check_npu_devices(probe_acl("emulator"), tmp_path)
    assert counted.status == OK and "device nodes: davinci0, davinci1" in counted.detail
    absent = AclProbe("pyacl", None, "ModuleNotFoundError: No module named 'acl'", "", None, "")
    uncounted = check_npu_devices(absent, tmp_path)
    assert uncounted.status == FAIL and "cannot be imported" in uncounted.detail
    (tmp_path / "empty").mkdir()
    nothing = check_npu_devices(absent, tmp_path / "empty")
    assert nothing.status == FAIL and nothing.detail.startswith("no NPU present")


def test_emulator_check(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_emulator(required=True).status == OK
    if not emulator_acl.rt.get_device_count()[1]:  # initialised elsewhere: setting unread
        return
    monkeypatch.setenv("GE_EMULATOR_DEVICE_COUNT", "0")
    broken = check_emulator(required=True)
    assert broken.blocking and "GE_EMULATOR_DEVICE_COUNT" in broken.detail


def test_stub_python_versions(tmp_path: Path) -> None:
    bundled = find_server()
    assert check_stub_python(bundled, "").status == OK
    other = "3.8" if HERE != "3.8" else "3.9"
    stub = bundled_server_root() / "python_backend_stubs" / other / "triton_python_backend_stub"
    assert stub_python_version(stub) == other
    (tmp_path / "python").mkdir()
    shutil.copy(stub, tmp_path / "python" / "triton_python_backend_stub")
    mismatch = check_stub_python(ServerBinary(bundled.executable, tmp_path, ()), "")
    assert mismatch.status == FAIL
    assert f"embeds Python {other} but ge_python_backend runs on Python {HERE}" in mismatch.detail
    assert f"Python {other} environment" in mismatch.fix
    acl_for_other = f"/x/acl.cpython-{other.replace('.', '')}-x86_64-linux-gnu.so"
    assert check_stub_python(bundled, "", acl_for_other).status == FAIL
    missing = check_stub_python(ServerBinary(bundled.executable, tmp_path / "none", ()), "")
    assert missing.status == FAIL and "does not exist" in missing.detail
    assert check_stub_python(None, "no server").detail == "no server"


def test_shm(tmp_path: Path) -> None:
    assert check_shm(need_bytes=1).status == OK
    short = check_shm(need_bytes=2**60)
    assert short.status == FAIL and "--shm-size" in short.fix
    assert check_shm(tmp_path / "missing").status == FAIL
    assert check_shm().status in (OK, WARN)


def test_tritonserver_failures(tmp_path: Path) -> None:
    missing = check_tritonserver(None, "tritonserver 'x' not found")
    assert missing.status == FAIL and "ge-python-backend[server]" in missing.fix
    broken = check_tritonserver(ServerBinary(Path(shutil.which("false") or "false"), None, ()), "")
    assert broken.status == FAIL and "did not start" in broken.detail


def test_runtime_override() -> None:
    assert check_runtime_override({}, "pyacl").status == OK
    override = check_runtime_override({"GE_PYTHON_BACKEND_ACL": "emulator"}, "pyacl")
    assert override.status == WARN and "unset GE_PYTHON_BACKEND_ACL" in override.fix


def device_nodes(directory: Path, mode: int = 0o660) -> Path:
    """A fake /dev: davinci0, davinci1 and the management nodes, owned by this process."""
    directory.mkdir()
    for name in ("davinci0", "davinci1", *MANAGEMENT_NODES):
        (directory / name).touch()
        (directory / name).chmod(mode)
    return directory


def test_device_node_permissions(tmp_path: Path) -> None:
    dev = device_nodes(tmp_path / "dev")
    owner = (dev / "davinci0").stat()
    other_uid, other_gid = owner.st_uid + 1000, owner.st_gid + 1000
    # Another uid, not in the nodes' group, without CAP_DAC_OVERRIDE: every node refused.
    refused = check_device_nodes(dev, other_uid, [other_gid], capabilities=0)
    assert refused.status == FAIL
    assert refused.detail.count(f"({owner.st_uid}):") == 2 + len(MANAGEMENT_NODES)
    assert "davinci0 " in refused.detail and " 0660" in refused.detail
    assert f"uid {other_uid}, groups {other_gid}, without CAP_DAC_OVERRIDE" in refused.detail
    assert "--run-as-user UID --run-as-group GID" in refused.fix
    assert f"uid {owner.st_uid} / group {owner.st_gid}" in refused.fix
    # The nodes' group opens them (HwHiAiUser's 0660), as does CAP_DAC_OVERRIDE.
    member = check_device_nodes(dev, other_uid, [other_gid, owner.st_gid], capabilities=0)
    assert member.status == OK and "davinci0, davinci1 and davinci_manager" in member.detail
    assert check_device_nodes(dev, other_uid, [other_gid], 1 << CAP_DAC_OVERRIDE).status == OK
    # The owner is judged by the owner bits only, even when its group could open the node.
    (dev / "davinci1").chmod(0o060)
    owner_only = check_device_nodes(dev, owner.st_uid, [owner.st_gid], capabilities=0)
    assert owner_only.status == FAIL and "davinci1 " in owner_only.detail
    assert "davinci0 " not in owner_only.detail
    (dev / "davinci1").chmod(0o600)
    group_only = check_device_nodes(dev, other_uid, [owner.st_gid], capabilities=0)
    assert group_only.status == FAIL and "davinci1 " in group_only.detail
    # A container given /dev/davinci0 alone cannot use it.
    (dev / "devmm_svm").unlink()
    (dev / "davinci1").chmod(0o660)
    missing = check_device_nodes(dev, other_uid, [owner.st_gid], capabilities=0)
    assert missing.status == FAIL and missing.detail.startswith("devmm_svm missing from")
    assert "--device /dev/devmm_svm" in missing.fix
    (tmp_path / "empty").mkdir()
    assert check_device_nodes(tmp_path / "empty").status == SKIP


def test_effective_capabilities(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nCapInh:\t0000000000000000\nCapEff:\t00000000a80425fb\n")
    assert effective_capabilities(status) == 0xA80425FB
    assert effective_capabilities(status) >> CAP_DAC_OVERRIDE & 1
    assert effective_capabilities(tmp_path / "missing") == 0


def test_device_held_by_another_process() -> None:
    emulator = probe_acl("emulator")
    assert check_devices_open("emulator", [0, 1], emulator).status == OK
    set_faults("rt.set_device:507033:*")  # what set_device returns for a device held elsewhere
    try:
        held = check_devices_open("emulator", [1], emulator)
    finally:
        set_faults(None)
    assert held.status == FAIL and held.blocking
    assert "device 1: acl.rt.set_device failed with 507033" in held.detail
    assert "another process or container holds it" in held.detail
    assert "npu-smi info" in held.fix
    unknown = check_devices_open("emulator", [99], emulator)
    assert unknown.status == FAIL and "invalid device id" in unknown.detail
    assert "ASCEND_RT_VISIBLE_DEVICES" in unknown.fix
    absent = AclProbe("pyacl", None, "ModuleNotFoundError: No module named 'acl'", "", None, "")
    assert check_devices_open("pyacl", [0], absent).status == SKIP


def test_visible_devices_against_the_configs() -> None:
    models = [RepositoryModel("mlp", 1, (0, 3), None), RepositoryModel("conv", 1, (1,), None)]
    assert check_visible_devices({}, models).status == OK
    four = check_visible_devices({"ASCEND_VISIBLE_DEVICES": "4-6,9"}, models)
    assert four.status == OK and "4 device(s) visible" in four.detail
    two = check_visible_devices({"ASCEND_RT_VISIBLE_DEVICES": "4,5"}, models)
    assert two.status == FAIL
    assert "model 'mlp' uses device_ids 0,3 but 2 device(s) are visible, numbered 0..1" in (
        two.detail
    )
    assert "'conv'" not in two.detail and "--device-ids" in two.fix
    both = check_visible_devices(
        {"ASCEND_VISIBLE_DEVICES": "2,3", "ASCEND_RT_VISIBLE_DEVICES": "1,2"}, []
    )
    assert both.status == FAIL
    assert "ASCEND_RT_VISIBLE_DEVICES names 2 but the container has 2 device(s)" in both.detail
    for name, value in (("ASCEND_VISIBLE_DEVICES", "0-x"), ("ASCEND_RT_VISIBLE_DEVICES", "0-1")):
        bad = check_visible_devices({name: value}, models)
        assert bad.status == FAIL and bad.detail.startswith(f"{name}={value}: ")
    assert parse_device_list("0-2,4", ranges=True) == [0, 1, 2, 4]
    assert parse_device_list("void", ranges=True) == []


def test_run_checks_compares_the_repository_with_the_devices(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator", device_ids=(0, 3))
    dev = device_nodes(tmp_path / "dev")
    results = {
        r.name: r
        for r in run_checks(
            "emulator",
            repository=repository,
            start_server=False,
            environ={"ASCEND_RT_VISIBLE_DEVICES": "0,1"},
            dev_dir=dev,
        )
    }
    assert results["device_nodes"].status == OK  # this process owns the fake nodes
    assert results["devices_open"].status == OK
    assert results["devices_open"].detail == "device(s) 0,3 opened and released"
    assert results["visible_devices"].status == FAIL
    assert "model 'mlp' uses device_ids 0,3" in results["visible_devices"].detail


@pytest.fixture
def python38_backend(tmp_path: Path) -> Path:
    """A backend directory whose stub is the bundled server's build for Python 3.8, the Python
    of Triton's containers up to 23.04."""
    source = bundled_server_root()
    shutil.copytree(source / "backends" / "python", tmp_path / "backends" / "python")
    stub = source / "python_backend_stubs" / "3.8" / "triton_python_backend_stub"
    shutil.copy(stub, tmp_path / "backends" / "python" / "triton_python_backend_stub")
    return tmp_path / "backends"


def test_a_stub_python_older_than_39_is_refused_in_one_line(
    python38_backend: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = "is built for Python 3.8, which ge-python-backend does not support"
    with pytest.raises(UserError, match=refused):
        find_server(backend_directory=python38_backend)
    with pytest.raises(UserError, match="the stub's Python is Python 3.8, which"):
        find_server(stub_version="3.8")
    results = {
        r.name: r
        for r in run_checks(
            "emulator", backend_directory=str(python38_backend), start_server=False, environ={}
        )
    }
    assert results["stub_python"].status == FAIL
    assert refused in results["stub_python"].detail
    assert results["stub_python"].fix == ""  # the line says what to use instead
    repository = tmp_path / "models"
    repository.mkdir()
    options = ["--backend-directory", str(python38_backend), "--no-watch"]
    assert main(["serve", str(repository), *options]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert refused in line
