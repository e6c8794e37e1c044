"""Choosing pyACL or the emulator, and the process-wide init/finalize."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ge_python_backend.runtime import (
    ENV_VAR,
    RuntimeSelectionError,
    Session,
    load_acl,
    selected_runtime,
)

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` in a fresh interpreter (this repository importable, no runtime override)."""
    environment = {key: value for key, value in os.environ.items() if key != ENV_VAR}
    environment["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture()
def no_pyacl(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import acl` fail as it does without CANN's environment."""
    monkeypatch.setitem(sys.modules, "acl", None)


def test_default_is_real_pyacl() -> None:
    assert selected_runtime() == "pyacl"
    assert selected_runtime(None) == "pyacl"
    assert selected_runtime("emulator") == "emulator"


def test_environment_overrides_the_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "emulator")
    assert selected_runtime("pyacl") == "emulator"
    assert load_acl("pyacl").__name__ == "ge_python_backend.emulator.acl"
    monkeypatch.setenv(ENV_VAR, "pyacl")
    assert selected_runtime("emulator") == "pyacl"


def test_unknown_runtime_names_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeSelectionError) as caught:
        selected_runtime("cuda")
    assert str(caught.value) == (
        "unknown ACL runtime 'cuda' (from the runtime argument); expected one of: pyacl, emulator"
    )
    monkeypatch.setenv(ENV_VAR, "npu")
    with pytest.raises(RuntimeSelectionError, match=r"'npu' \(from the \$GE_PYTHON_BACKEND_ACL\)"):
        selected_runtime("emulator")


def test_emulator_module_has_the_pyacl_layout() -> None:
    acl = load_acl("emulator")
    assert all(hasattr(acl, name) for name in ("init", "finalize", "rt", "mdl", "util"))


@pytest.mark.usefixtures("no_pyacl")
def test_missing_pyacl_names_set_env_and_the_emulator() -> None:
    with pytest.raises(RuntimeSelectionError) as caught:
        load_acl("pyacl")
    message = str(caught.value)
    assert message.startswith("cannot import pyACL (the `acl` module): ")
    assert "set_env.sh" in message
    assert "runtime='emulator'" in message and f"{ENV_VAR}=emulator" in message
    assert isinstance(caught.value, ImportError)


@pytest.mark.usefixtures("no_pyacl")
def test_no_silent_fallback_to_the_emulator(om_static: Path, tmp_path: Path) -> None:
    """A missing pyACL never sends a model to the emulator: asked for pyACL, or given an .om
    that is not the emulator's, the error names set_env.sh."""
    with pytest.raises(RuntimeSelectionError, match="set_env.sh"):
        Session(om_static, runtime="pyacl")
    other = tmp_path / "other.om"
    other.write_bytes(b"neither container" * 16)
    with pytest.raises(RuntimeSelectionError, match="cannot import pyACL .*set_env.sh"):
        Session(other)
    real = tmp_path / "real.om"
    real.write_bytes(b"IMOD" + bytes(252))
    with pytest.raises(RuntimeSelectionError) as caught:
        Session(real)
    message = str(caught.value)
    assert message.startswith(f"{real} is a real ATC .om (it starts with b'IMOD'): reading it ")
    assert "needs pyACL" in message and "set_env.sh" in message and "\n" not in message
    assert "emulator" not in message  # which cannot read it


def test_the_om_container_chooses_when_nothing_else_does(
    om_static: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "real.om"
    real.write_bytes(b"IMOD" + bytes(252))
    assert selected_runtime(None, om_static) == "emulator"
    assert selected_runtime(None, real) == "pyacl"
    assert selected_runtime(None, tmp_path / "missing.om") == "pyacl"  # its reader says why
    assert selected_runtime("pyacl", om_static) == "pyacl"  # an explicit choice wins
    session = Session(om_static)  # whether or not pyACL is installed
    try:
        assert session.runtime == "emulator"
    finally:
        session.close()
    monkeypatch.setenv(ENV_VAR, "pyacl")  # and the environment over both
    assert selected_runtime(None, om_static) == "pyacl"


def test_importing_the_package_does_not_import_acl() -> None:
    result = run_python(
        """
        import sys
        import ge_python_backend, ge_python_backend.runtime
        assert ge_python_backend.Session is ge_python_backend.runtime.Session
        print(sorted(m for m in sys.modules if m == "acl" or m.endswith(".acl")))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_init_once_and_finalize_at_exit_after_everything_else(om_static: Path) -> None:
    # A session and a stray buffer left open at exit: the safety nets release them, newest
    # first, then acl.finalize runs last (and exactly once).
    result = run_python(
        f"""
        import json
        import numpy as np
        from ge_python_backend import emulator
        from ge_python_backend.emulator import acl
        from ge_python_backend.runtime import Context, Device, DeviceBuffer, Session

        real_init, real_finalize = acl.init, acl.finalize
        calls = []

        def init(*args):
            calls.append("init")
            return real_init(*args)

        def finalize():
            stats = emulator.stats()
            live = {{k: v for k, v in stats.items() if k.startswith(("live_", "loaded_")) and v}}
            print(json.dumps({{"calls": calls + ["finalize"], "live_at_finalize": live}}))
            return real_finalize()

        acl.init, acl.finalize = init, finalize
        first = Session({str(om_static)!r}, runtime="emulator")
        second = Session({str(om_static)!r}, runtime="emulator")
        second.close()
        stray = DeviceBuffer(Context(Device(acl, 1)), 64)
        first.infer({{"x": np.ones((4, 16), np.float32)}})
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    report = json.loads(result.stdout)
    assert report == {"calls": ["init", "finalize"], "live_at_finalize": {}}


def test_repeat_initialize_is_tolerated_and_not_finalized_by_us() -> None:
    result = run_python(
        """
        from ge_python_backend.emulator import acl
        from ge_python_backend.runtime import Device
        assert acl.init() == 0  # someone else initialised first
        Device(acl, 0).close()
        assert acl.finalize() == 0  # still initialised: the runtime did not finalize it
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert result.stderr == ""


def test_sessions_survive_someone_else_finalizing_acl(om_static: Path) -> None:
    acl = load_acl("emulator")
    with Session(om_static, runtime="emulator"):
        pass
    assert acl.finalize() == 0  # another component shuts ACL down between sessions
    with Session(om_static, runtime="emulator") as session:
        assert session.infer({"x": np.ones((4, 16), np.float32)})["y"].shape == (4, 8)
