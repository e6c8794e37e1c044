"""Checks of a host before deploying (`ge-python-model doctor`).

Each check is a function returning a `CheckResult`: what was found, and what to do when it
failed. A failed check that is `required` for the chosen runtime makes the host not ready; with
the emulator runtime the pyACL, CANN and NPU checks still run but are not required.

The pyACL and emulator checks ask the runtime (`probe_acl`), which imports each `acl` by name:
it probes the installation the way the Python backend's stub will. The device checks look at the
Ascend device nodes' owner, group and mode against this process's uid, groups and capabilities,
open each device the repository uses (`acl.rt.set_device`, which fails with 507033 when another
process or container holds it), and compare `ASCEND_VISIBLE_DEVICES` / `ASCEND_RT_VISIBLE_DEVICES`
with the device ids the configs use.
"""

from __future__ import annotations

import dataclasses
import grp
import importlib
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from ge_python_backend.ascend import AclCode
from ge_python_backend.errors import GeBackendError
from ge_python_backend.repository.shm import (
    RepositoryModel,
    repository_entries,
    repository_models_of,
    shm_limit_bytes,
    shm_sizes,
)
from ge_python_backend.runtime import (
    ENV_VAR,
    AclError,
    AclProbe,
    Device,
    load_acl,
    probe_acl,
    selected_runtime,
)
from ge_python_backend.server import (
    ServerBinary,
    StubPython,
    TritonServer,
    UnsupportedStubPython,
    describe_python,
    find_server,
    stub_python_version,
)

OK, WARN, FAIL, SKIP = "OK", "WARN", "FAIL", "SKIP"
MIB = 1024 * 1024
# Below this /dev/shm is suspicious even without a repository to size it (Docker gives 64 MiB).
RECOMMENDED_SHM_BYTES = 256 * MIB
DEFAULT_BACKENDS = Path("/opt/tritonserver/backends")  # tritonserver's own default
SET_ENV_SCRIPTS = (
    Path("/usr/local/Ascend/ascend-toolkit/set_env.sh"),
    Path("/usr/local/Ascend/nnrt/set_env.sh"),
    Path.home() / "Ascend" / "ascend-toolkit" / "set_env.sh",
)
TESTED_TRITON = "2.51"
# CANN's install guide lists protobuf 3.20.x among its Python dependencies.
CANN_PROTOBUF = "3.20"
MIN_NUMPY = (1, 22)
# Run in the stub's Python by `check_stub_environment`: what the stub will find there.
_PROBE_STUB_ENVIRONMENT = """
import importlib.util, json, sys
facts = {"numpy": None, "package": None, "error": "", "protobuf": None, "acl": None}
try:
    import numpy
    facts["numpy"] = numpy.__version__
    import ge_python_backend.triton
    facts["package"] = ge_python_backend.__file__
except Exception as exc:
    facts["error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    import google.protobuf
    facts["protobuf"] = google.protobuf.__version__
except Exception:
    pass
spec = importlib.util.find_spec("acl")
facts["acl"] = spec.origin if spec is not None else None
print(json.dumps(facts))
"""
_CPYTHON_TAG = re.compile(r"cpython-(\d)(\d+)")

NO_NPU_FIX = (
    "run on an Ascend host: the driver creates /dev/davinci<N> and `npu-smi info` lists the "
    "NPUs. In a container pass --device /dev/davinci0 --device /dev/davinci_manager "
    "--device /dev/devmm_svm --device /dev/hisi_hdc and mount /usr/local/Ascend/driver (or use "
    "the Ascend Docker runtime); in Kubernetes request the device plugin's resource "
    "(`ge-python-model k8s` does). Without an NPU, serve emulator .om files: --runtime emulator"
)
# The nodes a process opens to use an NPU, besides /dev/davinci<N> (Ascend Docker Runtime's list).
MANAGEMENT_NODES = ("davinci_manager", "devmm_svm", "hisi_hdc")
CAP_DAC_OVERRIDE = 1  # linux/capability.h: bypass file read/write permission checks
# The Ascend Docker Runtime mounts the devices this lists (physical ids, "0-2,4"); the ACL
# runtime then sees only those of ASCEND_RT_VISIBLE_DEVICES ("0,1"), renumbered from 0.
VISIBLE_DEVICES_ENV = ("ASCEND_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES")


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One check: its status (OK, WARN, FAIL, SKIP), what was found and the fix."""

    name: str
    title: str
    status: str
    detail: str
    fix: str = ""
    required: bool = True

    @property
    def blocking(self) -> bool:
        """A required check that failed."""
        return self.status == FAIL and self.required


def _python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def check_python() -> CheckResult:
    """The interpreter ge_python_backend runs on (the one the stub must embed)."""
    import ge_python_backend

    location = Path(ge_python_backend.__file__).parent
    return CheckResult(
        "python",
        "Python and ge_python_backend",
        OK,
        f"Python {sys.version.split()[0]} ({sys.executable}); ge_python_backend "
        f"{getattr(ge_python_backend, '__version__', '?')} at {location}",
    )


def check_runtime_override(environ: Mapping[str, str], runtime: str) -> CheckResult:
    """Whether $GE_PYTHON_BACKEND_ACL overrides every model's acl_runtime."""
    value = environ.get(ENV_VAR, "").strip()
    title = f"${ENV_VAR}"
    if not value:
        return CheckResult(
            "runtime_override", title, OK, "not set: each model's acl_runtime parameter decides"
        )
    if value != runtime:
        return CheckResult(
            "runtime_override",
            title,
            WARN,
            f"{ENV_VAR}={value} overrides every model's acl_runtime: models run on {value}",
            f"unset {ENV_VAR} in the server's environment to use each config's acl_runtime",
        )
    return CheckResult("runtime_override", title, OK, f"{ENV_VAR}={value}: models run on {value}")


def check_cann_environment(
    environ: Mapping[str, str],
    required: bool = True,
    scripts: Sequence[Path] = SET_ENV_SCRIPTS,
) -> CheckResult:
    """CANN's `set_env.sh` was sourced: toolkit home and operator path set and present."""
    home_var = next((v for v in ("ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH") if environ.get(v)), "")
    home = environ.get(home_var, "") if home_var else ""
    opp = environ.get("ASCEND_OPP_PATH", "")
    problems = []
    if not home:
        problems.append("ASCEND_TOOLKIT_HOME and ASCEND_HOME_PATH are not set")
    elif not Path(home).is_dir():
        problems.append(f"{home_var}={home} does not exist")
    if not opp:
        problems.append("ASCEND_OPP_PATH is not set")
    elif not Path(opp).is_dir():
        problems.append(f"ASCEND_OPP_PATH={opp} does not exist")
    title = "CANN environment (set_env.sh)"
    if not problems:
        return CheckResult(
            "cann_env", title, OK, f"{home_var}={home}, ASCEND_OPP_PATH={opp}", required=required
        )
    found = [script for script in scripts if script.is_file()]
    if found:
        fix = (
            f"run `source {found[0]}` in the shell or container entrypoint that starts "
            "tritonserver (the stub inherits its environment)"
        )
    else:
        fix = (
            "no CANN set_env.sh found: install the CANN toolkit (or nnrt) for your NPU, then "
            f"`source {scripts[0]}` (or <install dir>/set_env.sh) before starting tritonserver"
        )
    return CheckResult("cann_env", title, FAIL, "; ".join(problems), fix, required)


def check_pyacl(probe: AclProbe, required: bool = True) -> CheckResult:
    """pyACL imports in this interpreter (`probe`: what `probe_acl` found)."""
    title = "pyACL importable"
    if probe.imported:
        version = f", ACL {probe.version}" if probe.version else ""
        return CheckResult(
            "pyacl",
            title,
            OK,
            f"{probe.module_file} imports in Python {_python_version()}{version}",
            required=required,
        )
    return CheckResult(
        "pyacl",
        title,
        FAIL,
        f"cannot import pyACL (`acl`): {probe.import_error}",
        "source CANN's set_env.sh: it puts <toolkit>/python/site-packages (where acl lives) on "
        f"PYTHONPATH. If acl is found but fails to load, Python {_python_version()} is not one "
        "your CANN release supports: install ge-python-backend into a Python it supports, and "
        "run tritonserver's Python backend stub with the same version",
        required,
    )


def check_npu_devices(
    probe: AclProbe, dev_dir: Path = Path("/dev"), required: bool = True
) -> CheckResult:
    """NPUs present: /dev/davinci<N> nodes and the count pyACL reports."""
    nodes = sorted(
        (p.name for p in dev_dir.glob("davinci*") if p.name[len("davinci") :].isdigit()),
        key=lambda name: int(name[len("davinci") :]),
    )
    title = "NPU devices"
    shown = ", ".join(nodes) or "none"
    if not probe.imported:
        if nodes:
            detail = f"device nodes {shown} exist, but pyACL cannot be imported to use them"
        else:
            detail = (
                f"no NPU present: no {dev_dir}/davinci<N> device nodes, and pyACL is not importable"
            )
        return CheckResult("npu", title, FAIL, detail, NO_NPU_FIX, required)
    if probe.device_count:
        detail = f"{probe.device_count} NPU(s) visible to pyACL; device nodes: {shown}"
        return CheckResult("npu", title, OK, detail, required=required)
    detail = probe.count_error or "pyACL reports 0 devices"
    return CheckResult("npu", title, FAIL, f"no NPU usable: {detail}", NO_NPU_FIX, required)


def _numbered_nodes(dev_dir: Path) -> list[Path]:
    nodes = [p for p in dev_dir.glob("davinci*") if p.name[len("davinci") :].isdigit()]
    return sorted(nodes, key=lambda path: int(path.name[len("davinci") :]))


def effective_capabilities(status: Path = Path("/proc/self/status")) -> int:
    """This process's effective capability bits (`CapEff`), 0 when they cannot be read."""
    try:
        text = status.read_text()
    except OSError:
        return 0
    match = re.search(r"^CapEff:\s*([0-9a-fA-F]+)", text, re.MULTILINE)
    return int(match.group(1), 16) if match else 0


def _can_read_write(info: os.stat_result, uid: int, groups: set[int], capabilities: int) -> bool:
    """The kernel's check for opening a node read-write: owner bits for its owner, else group
    bits for a member of its group, else the other bits; CAP_DAC_OVERRIDE bypasses them."""
    if capabilities >> CAP_DAC_OVERRIDE & 1:
        return True
    mode = info.st_mode
    if info.st_uid == uid:
        return mode & 0o600 == 0o600
    if info.st_gid in groups:
        return mode & 0o060 == 0o060
    return mode & 0o006 == 0o006


def _owner(info: os.stat_result) -> str:
    try:
        user = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        user = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"{user}({info.st_uid}):{group}({info.st_gid}) {stat.S_IMODE(info.st_mode):04o}"


def check_device_nodes(
    dev_dir: Path = Path("/dev"),
    uid: int | None = None,
    groups: Sequence[int] | None = None,
    capabilities: int | None = None,
    required: bool = True,
) -> CheckResult:
    """This process can open every Ascend device node read-write: its uid, groups (default:
    this process's) and capabilities against each node's owner, group and mode."""
    title = "NPU device node permissions"
    numbered = _numbered_nodes(dev_dir)
    if not numbered:
        return CheckResult(
            "device_nodes", title, SKIP, f"no {dev_dir}/davinci<N> nodes", required=required
        )
    uid = os.geteuid() if uid is None else uid
    member = set(os.getgroups()) | {os.getegid()} if groups is None else set(groups)
    caps = effective_capabilities() if capabilities is None else capabilities
    missing = [name for name in MANAGEMENT_NODES if not (dev_dir / name).exists()]
    refused = []
    owners = set()
    for node in [*numbered, *(dev_dir / name for name in MANAGEMENT_NODES if name not in missing)]:
        info = node.stat()
        if not _can_read_write(info, uid, member, caps):
            refused.append(f"{node.name} {_owner(info)}")
            owners.add((info.st_uid, info.st_gid))
    who = (
        f"this process runs as uid {uid}, groups {','.join(map(str, sorted(member)))}, "
        + ("with" if caps >> CAP_DAC_OVERRIDE & 1 else "without")
        + " CAP_DAC_OVERRIDE"
    )
    problems = []
    fixes = []
    if missing:
        problems.append(f"{', '.join(missing)} missing from {dev_dir}")
        fixes.append(
            "pass them to the container too (--device /dev/davinci_manager --device "
            "/dev/devmm_svm --device /dev/hisi_hdc) or use the Ascend Docker Runtime"
        )
    if refused:
        problems.append(f"cannot open {'; '.join(refused)} ({who})")
        ids = " or ".join(f"uid {u} / group {g}" for u, g in sorted(owners))
        fixes.append(
            f"run as the nodes' owner or group ({ids}, HwHiAiUser on Ascend hosts): "
            "`docker run --user UID:GID` or `--group-add GID`; in Kubernetes "
            "`ge-python-model k8s --run-as-user UID --run-as-group GID`. Dropping every "
            "capability as root does not help: root then needs the group too"
        )
    shown = ", ".join(node.name for node in numbered)
    if problems:
        return CheckResult(
            "device_nodes", title, FAIL, "; ".join(problems), "; ".join(fixes), required
        )
    return CheckResult(
        "device_nodes",
        title,
        OK,
        f"{shown} and {', '.join(MANAGEMENT_NODES)} can be opened ({who})",
        required=required,
    )


def check_devices_open(
    runtime: str, device_ids: Sequence[int], probe: AclProbe, required: bool = True
) -> CheckResult:
    """Each of `device_ids` opens (`acl.rt.set_device`) with `runtime` (`probe`: its probe)."""
    title = "NPUs free to open"
    if not probe.imported or not device_ids:
        why = "the runtime cannot be imported" if not probe.imported else "no device to open"
        return CheckResult("devices_open", title, SKIP, why, required=required)
    acl = load_acl(runtime)
    problems = []
    fixes = set()
    for device_id in device_ids:
        try:
            with Device(acl, device_id):
                pass
        except AclError as exc:
            if exc.code == AclCode.RT_DEV_SETUP_ERROR:
                problems.append(
                    f"device {device_id}: {exc} - another process or container holds it, or the "
                    "driver or firmware is in trouble"
                )
                fixes.add(
                    "`npu-smi info` lists the processes on each NPU: stop the one holding it, "
                    "or give this server another device (a container's NPUs are its own: do "
                    "not mount one device into two containers)"
                )
            else:
                problems.append(f"device {device_id}: {exc}")
                fixes.add(
                    "use device ids this process sees (0..count-1; see ASCEND_VISIBLE_DEVICES "
                    "and ASCEND_RT_VISIBLE_DEVICES)"
                )
    shown = ",".join(map(str, device_ids))
    if problems:
        return CheckResult(
            "devices_open", title, FAIL, "; ".join(problems), "; ".join(sorted(fixes)), required
        )
    return CheckResult(
        "devices_open", title, OK, f"device(s) {shown} opened and released", required=required
    )


def parse_device_list(text: str, ranges: bool) -> list[int]:
    """`"0,1"` (and with `ranges`, `"0-2,4"`) as device ids; ValueError naming the bad part.
    Empty or "void" is no device."""
    if text.strip().lower() in ("", "void"):
        return []
    ids: list[int] = []
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        if dash and ranges and low.isdigit() and high.isdigit() and int(low) <= int(high):
            ids += range(int(low), int(high) + 1)
        elif part.isdigit():
            ids.append(int(part))
        else:
            raise ValueError(f"{part!r} is not a device id" + (" or range" if ranges else ""))
    return ids


def check_visible_devices(
    environ: Mapping[str, str], models: Sequence[RepositoryModel] | None = None
) -> CheckResult:
    """ASCEND_VISIBLE_DEVICES (the devices a container gets) and ASCEND_RT_VISIBLE_DEVICES (those
    ACL shows, renumbered 0..n-1) against the device ids of `models`' configs."""
    title = "ASCEND_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES"
    lists: dict[str, list[int]] = {}
    for name in VISIBLE_DEVICES_ENV:
        if name not in environ:
            continue
        try:
            lists[name] = parse_device_list(environ[name], ranges=name == VISIBLE_DEVICES_ENV[0])
        except ValueError as exc:
            return CheckResult(
                "visible_devices",
                title,
                FAIL,
                f"{name}={environ[name]}: {exc}",
                f"{name} is a comma-separated list of device ids"
                + (" or ranges (0-2,4)" if name == VISIBLE_DEVICES_ENV[0] else ""),
            )
    if not lists:
        return CheckResult("visible_devices", title, OK, "neither is set: every device is visible")
    shown = ", ".join(f"{name}={environ[name]}" for name in lists)
    runtime_ids = lists.get(VISIBLE_DEVICES_ENV[1])
    mounted = lists.get(VISIBLE_DEVICES_ENV[0])
    problems = []
    if runtime_ids is not None and mounted is not None:
        beyond = [i for i in runtime_ids if i >= len(mounted)]
        if beyond:
            problems.append(
                f"ASCEND_RT_VISIBLE_DEVICES names {','.join(map(str, beyond))} but the container "
                f"has {len(mounted)} device(s), numbered 0..{len(mounted) - 1} inside it"
            )
    visible = len(runtime_ids if runtime_ids is not None else mounted or [])
    for model in models or ():
        beyond = [i for i in model.device_ids if i >= visible]
        if beyond:
            problems.append(
                f"model {model.name!r} uses device_ids {','.join(map(str, model.device_ids))} but "
                f"{visible} device(s) are visible, numbered 0..{visible - 1}"
            )
    if problems:
        return CheckResult(
            "visible_devices",
            title,
            FAIL,
            f"{shown}: " + "; ".join(problems),
            "device_ids count from 0 among the visible devices: scaffold with --device-ids in "
            "that range, or make more devices visible",
        )
    return CheckResult(
        "visible_devices", title, OK, f"{shown}: {visible} device(s) visible, numbered from 0"
    )


def check_emulator(required: bool = False) -> CheckResult:
    """The CPU emulator of pyACL (and onnxruntime, which runs emulator `.om` files) works."""
    title = "CPU emulator of pyACL"
    probe = probe_acl("emulator")
    error = probe.import_error
    if probe.imported:
        try:
            importlib.import_module("onnxruntime")
        except ImportError as exc:
            error = f"{type(exc).__name__}: {exc}"
    if error:
        return CheckResult(
            "emulator",
            title,
            FAIL,
            f"cannot import the emulator: {error}",
            "pip install 'ge-python-backend[emulator]'",
            required,
        )
    count = probe.device_count
    if not count:
        return CheckResult(
            "emulator",
            title,
            FAIL,
            probe.count_error or "0 emulated devices",
            "set GE_EMULATOR_DEVICE_COUNT to a number >= 1 (default 8)",
            required,
        )
    return CheckResult(
        "emulator",
        title,
        OK,
        f"{count} emulated device(s); runs emulator .om files only",
        required=required,
    )


def check_stub_python(
    binary: ServerBinary | None,
    error: str,
    acl_file: str | None = None,
    python: StubPython | None = None,
    fix: str | None = None,
) -> CheckResult:
    """The Python backend stub embeds the stub's Python (`python`, default this interpreter),
    the one ge_python_backend and pyACL are for. Without a `binary`, `error` says why and `fix`
    what to do (default: install or name a server; "": the error says it)."""
    title = "Python of Triton's Python backend stub"
    if binary is None:
        return CheckResult("stub_python", title, FAIL, error, _SERVER_FIX if fix is None else fix)
    stub = (binary.backend_directory or DEFAULT_BACKENDS) / "python" / "triton_python_backend_stub"
    if not stub.is_file():
        return CheckResult(
            "stub_python",
            title,
            FAIL,
            f"{stub} does not exist",
            "pass --backend-directory DIR where DIR/python holds the Python backend and its stub",
        )
    stub_version = stub_python_version(stub)
    here = python.version if python is not None else _python_version()
    executable = python.executable if python is not None else sys.executable
    tag = _CPYTHON_TAG.search(Path(acl_file).name) if acl_file else None
    acl_version = f"{tag.group(1)}.{tag.group(2)}" if tag else None
    if stub_version is None:
        return CheckResult(
            "stub_python", title, WARN, f"cannot tell which Python {stub} embeds (no libpython)"
        )
    if stub_version != here or (acl_version and acl_version != stub_version):
        pyacl = f"; pyACL is built for Python {acl_version}" if acl_version else ""
        return CheckResult(
            "stub_python",
            title,
            FAIL,
            f"{stub} embeds Python {stub_version} but ge_python_backend runs on Python {here} "
            f"({executable}){pyacl}: model.py would import packages built for another Python",
            f"install ge-python-backend (and numpy) into a Python {stub_version} environment whose "
            "pyACL imports, and start tritonserver with that environment first on PATH; or build "
            f"the stub for Python {here} (python_backend's custom stub build) and place it in "
            "each model directory; or use the bundled server (`ge-python-model serve` without "
            "--tritonserver), which has stubs for Python 3.8-3.13",
        )
    return CheckResult(
        "stub_python", title, OK, f"{stub} embeds Python {stub_version}, the same as {executable}"
    )


def check_stub_environment(python: StubPython) -> CheckResult:
    """What the stub's Python holds: numpy >= 1.22, ge_python_backend importable, a pyACL built
    for that Python if there is one, and CANN's protobuf 3.20.x (a WARN otherwise)."""
    title = "Packages of the stub's Python"
    try:
        probe = subprocess.run(
            [str(python.executable), "-c", _PROBE_STUB_ENVIRONMENT],
            capture_output=True,
            text=True,
            timeout=120,
        )
        facts = json.loads(probe.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        return CheckResult("stub_environment", title, FAIL, f"{python.executable}: {exc}")
    where = f"Python {python.version} ({python.executable})"
    install = (
        f"{python.executable} -m pip install 'numpy>=1.22' && {python.executable} -m pip install "
        "--no-deps ge-python-backend (docs/guides/deploy/index.md)"
    )
    numpy_version = facts["numpy"]
    if numpy_version is None or facts["package"] is None:
        return CheckResult("stub_environment", title, FAIL, f"{where}: {facts['error']}", install)
    numbers = tuple(int(part) for part in re.findall(r"\d+", numpy_version)[:2])
    if numbers < MIN_NUMPY:
        return CheckResult(
            "stub_environment", title, FAIL, f"{where} has numpy {numpy_version} (< 1.22)", install
        )
    tag = _CPYTHON_TAG.search(Path(facts["acl"]).name) if facts["acl"] else None
    if tag and f"{tag.group(1)}.{tag.group(2)}" != python.version:
        return CheckResult(
            "stub_environment",
            title,
            FAIL,
            f"{where}: pyACL {facts['acl']} is built for Python {tag.group(1)}.{tag.group(2)}",
            "use the Python CANN's pyACL is built for as the stub's Python (--stub-python)",
        )
    detail = (
        f"{where}: numpy {numpy_version}, ge_python_backend at {Path(facts['package']).parent}"
        + (f", pyACL {facts['acl']}" if facts["acl"] else ", no pyACL")
        + (f", protobuf {facts['protobuf']}" if facts["protobuf"] else ", no protobuf")
    )
    protobuf = facts["protobuf"]
    if protobuf is None or not protobuf.startswith(CANN_PROTOBUF + "."):
        return CheckResult(
            "stub_environment",
            title,
            WARN,
            detail + f"; CANN's install guide lists protobuf {CANN_PROTOBUF}.x",
            f"{python.executable} -m pip install 'protobuf=={CANN_PROTOBUF}.3' if CANN's tools "
            "run on this Python (ge_python_backend's stub does not import protobuf)",
        )
    return CheckResult("stub_environment", title, OK, detail)


def check_shm(path: Path = Path("/dev/shm"), need_bytes: int | None = None) -> CheckResult:
    """`/dev/shm` has room for the Python backend's shared memory (`need_bytes` if known)."""
    title = "/dev/shm size"
    fix = (
        "give the container more shared memory: docker run --shm-size=1g (Docker's default is "
        "64 MiB); in Kubernetes mount an emptyDir with medium: Memory at /dev/shm "
        "(`ge-python-model k8s` sizes it for a repository)"
    )
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        return CheckResult("shm", title, FAIL, f"cannot read {path}: {exc}", fix)
    total = stat.f_blocks * stat.f_frsize
    free = stat.f_bavail * stat.f_frsize
    detail = f"{path}: {total // MIB} MiB, {free // MIB} MiB free"
    if need_bytes is not None:
        detail += f"; the repository needs about {need_bytes // MIB} MiB"
        status = OK if free >= need_bytes else FAIL
    else:
        status = OK if total >= RECOMMENDED_SHM_BYTES else WARN
        if status == WARN:
            detail += f" (less than {RECOMMENDED_SHM_BYTES // MIB} MiB)"
    return CheckResult("shm", title, status, detail, "" if status == OK else fix)


_SERVER_FIX = (
    "pip install 'ge-python-backend[server]' for the bundled Triton 2.51, or pass --tritonserver "
    "PATH and --backend-directory DIR of your Triton install (in NVIDIA's container: "
    "/opt/tritonserver/bin/tritonserver and /opt/tritonserver/backends)"
)


def check_tritonserver(binary: ServerBinary | None, error: str) -> CheckResult:
    """tritonserver starts (on an empty repository) and reports its version on `GET /v2`."""
    title = "tritonserver"
    if binary is None:
        return CheckResult("tritonserver", title, FAIL, error, _SERVER_FIX)
    with tempfile.TemporaryDirectory(prefix="ge-doctor-") as work:
        repository = Path(work) / "models"
        repository.mkdir()
        server = TritonServer(repository, binary=binary, log_path=Path(work) / "triton.log")
        try:
            with server, urllib.request.urlopen(server.urls.http + "/v2", timeout=5) as reply:
                metadata = json.loads(reply.read())
        except (GeBackendError, OSError, ValueError) as exc:
            return CheckResult(
                "tritonserver",
                title,
                FAIL,
                f"{binary.executable} did not start: {str(exc).splitlines()[0]}",
                _SERVER_FIX,
            )
    version = str(metadata.get("version", "?"))
    detail = f"Triton {version} ({binary.executable}) started and answered"
    if not version.startswith(TESTED_TRITON + "."):
        detail += f"; ge-python-backend is tested with {TESTED_TRITON}"
    return CheckResult("tritonserver", title, OK if version != "?" else WARN, detail)


def run_checks(
    runtime: str | None = None,
    *,
    repository: Path | None = None,
    tritonserver: str | None = None,
    backend_directory: str | None = None,
    stub_python: str | None = None,
    start_server: bool = True,
    environ: Mapping[str, str] | None = None,
    dev_dir: Path = Path("/dev"),
) -> list[CheckResult]:
    """Every check, in the order they are printed."""
    env = os.environ if environ is None else environ
    chosen = selected_runtime(runtime)
    on_npu = chosen == "pyacl"
    pyacl = probe_acl("pyacl")
    python = describe_python(stub_python)
    try:
        binary: ServerBinary | None = find_server(
            tritonserver, backend_directory, stub_version=python.version
        )
        server_error, stub_fix = "", _SERVER_FIX
    except GeBackendError as exc:
        binary, server_error = None, str(exc)
        # an unsupported stub Python's error says what to use instead
        stub_fix = "" if isinstance(exc, UnsupportedStubPython) else _SERVER_FIX
    need = None
    models = None
    if repository is not None:
        entries = repository_entries(repository, chosen)
        models = repository_models_of(entries)
        need = shm_limit_bytes(shm_sizes(entries))
    probe = pyacl if on_npu else probe_acl(chosen)
    if models is not None:
        device_ids = sorted({device for model in models for device in model.device_ids})
    else:
        device_ids = list(range(probe.device_count or 0))
    results = [
        check_python(),
        check_runtime_override(env, chosen),
        check_cann_environment(env, required=on_npu),
        check_pyacl(pyacl, required=on_npu),
        check_npu_devices(pyacl, dev_dir, required=on_npu),
        check_device_nodes(dev_dir, required=on_npu),
        check_devices_open(chosen, device_ids, probe),
        check_visible_devices(env, models),
        check_emulator(required=not on_npu),
        check_stub_python(binary, server_error, pyacl.module_file, python, stub_fix),
        check_stub_environment(python),
        check_shm(need_bytes=need),
    ]
    if start_server:
        results.append(check_tritonserver(binary, server_error))
    else:
        results.append(CheckResult("tritonserver", "tritonserver", SKIP, "--no-server given"))
    return results
