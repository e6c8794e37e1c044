"""Choosing the ACL implementation, and the once-per-process `acl.init` / `acl.finalize`."""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
import weakref
from types import ModuleType

from ge_python_backend.ascend import (
    ATC_OM_MAGIC,
    AclCode,
    OmContainer,
    describe_code,
    om_container,
)
from ge_python_backend.environment import ACL_RUNTIME
from ge_python_backend.runtime.errors import RuntimeSelectionError, check

__all__ = [
    "ENV_VAR",
    "RUNTIMES",
    "AclProbe",
    "ensure_initialized",
    "load_acl",
    "om_runtime",
    "probe_acl",
    "selected_runtime",
]

ENV_VAR = ACL_RUNTIME.name
RUNTIMES = ("pyacl", "emulator")
_MODULES = {"pyacl": "acl", "emulator": "ge_python_backend.emulator.acl"}

_init_lock = threading.Lock()
_initialized: set[int] = set()  # id() of every acl module initialised in this process
_finalizing: set[int] = set()  # ... and of those this runtime finalizes at exit


class _ProcessLifetime:
    """Lives until the interpreter exits; its finalizers call `acl.finalize` then."""


# Finalizers run at exit newest first, so the ones registered here (at `acl.init`) run after
# those of every device object created later: model, buffers, streams, context, device reset.
_PROCESS = _ProcessLifetime()


def om_runtime(om_path: str | os.PathLike[str], runtime: str | None = None) -> str:
    """The runtime that reads the `.om` at `om_path`, `$GE_PYTHON_BACKEND_ACL` aside: `runtime`
    when given (an explicit choice wins), else the one its container is made for (an emulator
    `.om`: emulator; `ascend.om_container`), else pyacl."""
    if runtime:
        return runtime
    return "emulator" if om_container(om_path) is OmContainer.EMULATOR else "pyacl"


def selected_runtime(
    runtime: str | None = None, om_path: str | os.PathLike[str] | None = None
) -> str:
    """The runtime name in force: `$GE_PYTHON_BACKEND_ACL` if set, else `runtime`, else (given
    the `.om` it is for) the one its container is made for (`om_runtime`), else pyacl."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        name = env
    elif om_path is not None:
        name = om_runtime(om_path, runtime)
    else:
        name = runtime or "pyacl"
    if name not in RUNTIMES:
        source = f"${ENV_VAR}" if env else "runtime argument"
        raise RuntimeSelectionError(
            f"unknown ACL runtime {name!r} (from the {source}); expected one of: "
            + ", ".join(RUNTIMES)
        )
    return name


def _no_pyacl_message(exc: ImportError, emulator_choice: str) -> str:
    return (
        f"cannot import pyACL (the `acl` module): {exc}. On an Ascend host, load CANN's "
        "environment first: `source /usr/local/Ascend/ascend-toolkit/set_env.sh` (or the "
        "set_env.sh of your CANN install). Without an NPU, use the CPU emulator: "
        f"{emulator_choice} or {ENV_VAR}=emulator."
    )


def _atc_om_message(om_path: str | os.PathLike[str], exc: ImportError) -> str:
    return (
        f"{os.fspath(om_path)} is a real ATC .om (it starts with {ATC_OM_MAGIC!r}): reading it "
        f"needs pyACL (the `acl` module), which cannot be imported here ({exc}); on an Ascend "
        "host, source CANN's set_env.sh first (/usr/local/Ascend/ascend-toolkit/set_env.sh or "
        "your CANN install's)"
    )


def load_acl(
    runtime: str | None = None, om_path: str | os.PathLike[str] | None = None
) -> ModuleType:
    """Import the ACL module: real pyACL (`"pyacl"`, the default) or the CPU emulator; with the
    `.om` it is for and no `runtime`, the one its container is made for (`selected_runtime`).

    `$GE_PYTHON_BACKEND_ACL` overrides `runtime`. There is no fallback from one to the other;
    without pyACL, a real ATC `.om` gets one line saying what it needs.
    """
    name = selected_runtime(runtime, om_path)
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError as exc:
        if name == "pyacl":
            if om_path is not None and om_container(om_path) is OmContainer.ATC:
                raise RuntimeSelectionError(_atc_om_message(om_path, exc)) from exc
            raise RuntimeSelectionError(
                _no_pyacl_message(exc, "runtime='emulator'"),
                _no_pyacl_message(exc, "--runtime emulator"),
            ) from exc
        raise RuntimeSelectionError(
            f"cannot import the pyACL emulator: {exc}. Install its extras: "
            "pip install 'ge-python-backend[emulator]'."
        ) from exc


def ensure_initialized(acl: ModuleType, again: bool = False) -> None:
    """Call `acl.init()` once per process; tolerate 100002; `acl.finalize()` at exit if ours.

    `again` initialises anew after someone else called `acl.finalize`.
    """
    with _init_lock:
        if id(acl) in _initialized and not again:
            return
        ret = acl.init()
        # REPEAT_INITIALIZE: someone else initialised acl, and they finalise it
        if ret != AclCode.REPEAT_INITIALIZE:
            check(ret, "acl.init", acl)
            if id(acl) not in _finalizing:
                weakref.finalize(_PROCESS, _finalize, acl)
                _finalizing.add(id(acl))
        _initialized.add(id(acl))


def _finalize(acl: ModuleType) -> None:
    ret = acl.finalize()
    if ret != AclCode.REPEAT_FINALIZE:
        check(ret, "acl.finalize", acl)


@dataclasses.dataclass(frozen=True)
class AclProbe:
    """What one ACL implementation reports on this host, without opening a device."""

    runtime: str  # "pyacl" or "emulator"
    module_file: str | None  # where its `acl` module was imported from; None when it was not
    import_error: str  # why it could not be imported ("" when it was)
    version: str  # "8.0.0" from acl.get_version; "" when unknown
    device_count: int | None  # from acl.rt.get_device_count; None when it could not be counted
    count_error: str  # why it could not be counted ("" when it was)

    @property
    def imported(self) -> bool:
        return self.module_file is not None


def probe_acl(runtime: str) -> AclProbe:
    """Import the `runtime` ACL by name (not `$GE_PYTHON_BACKEND_ACL`), read its version and
    count its devices, with `acl.init`/`acl.finalize` around the count unless already initialised.
    Failures are reported in the result, not raised."""
    try:
        acl = importlib.import_module(_MODULES[runtime])
    except Exception as exc:  # ImportError, or OSError/SystemError from a broken extension
        return AclProbe(runtime, None, f"{type(exc).__name__}: {exc}", "", None, "")
    version = ""
    get_version = getattr(acl, "get_version", None)
    if get_version is not None:
        major, minor, patch, ret = get_version()
        version = f"{major}.{minor}.{patch}" if ret == 0 else ""
    try:
        count, count_error = _count_devices(acl)
    except ValueError as exc:  # the emulator's reading of a bad GE_EMULATOR_* setting
        count, count_error = None, str(exc)
    return AclProbe(runtime, getattr(acl, "__file__", "acl"), "", version, count, count_error)


def _count_devices(acl: ModuleType) -> tuple[int | None, str]:
    init_ret = acl.init()
    if init_ret not in (AclCode.SUCCESS, AclCode.REPEAT_INITIALIZE):
        name, explanation = describe_code(init_ret)
        return None, f"acl.init returned {init_ret} {name} ({explanation})"
    try:
        count, ret = acl.rt.get_device_count()
    finally:
        if init_ret == 0:  # initialised here; 100002: someone else did and will finalize
            acl.finalize()
    if ret != 0:
        name, explanation = describe_code(ret)
        return None, f"acl.rt.get_device_count returned {ret} {name} ({explanation})"
    return int(count), ""
