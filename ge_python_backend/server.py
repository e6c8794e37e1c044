"""Run a real Triton Inference Server: the one bundled in `nvidia-pytriton`, or the user's own.

The bundled server (Triton 2.51) lives in the `pytriton` package: `tritonserver/bin/tritonserver`,
its shared libraries in `nvidia_pytriton.libs/` (put on `LD_LIBRARY_PATH`), the Python backend in
`tritonserver/backends/python/` and one `triton_python_backend_stub` per Python version. The Python
backend looks for the stub next to `libtriton_python.so`, so a backend directory holding both is
built once per interpreter version in a cache folder and reused.

The stub embeds Python (it is linked against `libpython3.X.so.1.0`) and finds its prefix and
`site-packages` the way `python3` would: through `PATH`. The child environment puts the stub's
interpreter's `bin` directory first and its `libpython` directory on `LD_LIBRARY_PATH`, so
`model.py` runs on that interpreter and its virtual environment. The stub's interpreter is this
one unless `stub_python` names another (`serve --stub-python`, e.g. CANN's Python on an Ascend
host): `StubPython` describes it, and the stub built for its version is used.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path
from types import TracebackType
from typing import Any

from ge_python_backend import repository_key
from ge_python_backend.errors import GeBackendError, UserError
from ge_python_backend.processes import NotPrivateError, private_directory, records_directory
from ge_python_backend.repository.config import (
    check_model_directory_names,
    check_shell_safe_path,
)
from ge_python_backend.repository.shm import ShmSizes, shm_sizes_for_repository

logger = logging.getLogger(__name__)

MODEL_CONTROL_MODES = ("none", "explicit")
STOP_LOOK_S = 0.5  # while a server stops: how often its connections and requests are looked at
# Triton's gauge of the requests each model has queued: a request leaves it when it starts
# executing (core's InferenceRequest::SetState); no metric of Triton 2.51 counts those executing.
PENDING_METRIC = "nv_inference_pending_request_count"
PORT_NAMES = ("HTTP", "gRPC", "metrics")  # the order of the ports everywhere
# The Python backend names its shared-memory regions /dev/shm/<prefix><uuid>; each TritonServer
# gives its own prefix (this one, "ge", a tag of 8 hex digits and "_"), so the regions a crashed
# server left are known.
SHM_REGION_PREFIX = "triton_python_backend_shm_region_"
SHM_DIRECTORY = Path("/dev/shm")
_OUR_SHM_PREFIX = re.compile(re.escape(SHM_REGION_PREFIX) + r"ge[0-9a-f]{8}_")
SERVER_RECORDS = "servers"  # the kind of record (`processes.records_directory`)


class ServerError(GeBackendError):
    """The server process failed to start, exited early or never became ready."""


@dataclass(frozen=True)
class ServerBinary:
    """A `tritonserver` executable and how to run it."""

    executable: Path
    backend_directory: Path | None  # None: the server's default (/opt/tritonserver/backends)
    library_path: tuple[Path, ...]  # prepended to LD_LIBRARY_PATH


@dataclass(frozen=True)
class ServerUrls:
    """Where a running server listens."""

    http: str  # "http://127.0.0.1:8000"
    grpc: str  # "127.0.0.1:8001" (what tritonclient.grpc takes)
    metrics: str  # "http://127.0.0.1:8002/metrics"


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/ge-python-backend` (or `~/.cache/ge-python-backend`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "ge-python-backend"


def bundled_server_root() -> Path:
    """`.../site-packages/pytriton/tritonserver` of the installed `nvidia-pytriton`."""
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            "the bundled Triton server needs nvidia-pytriton: pip install "
            "'ge-python-backend[server]' (or pass --tritonserver and --backend-directory)"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "tritonserver"
    if not (root / "bin" / "tritonserver").is_file():
        raise UserError(f"nvidia-pytriton is installed but {root}/bin/tritonserver is missing")
    return root


# Run by `describe_python` in the interpreter described: what the stub needs to embed it.
_DESCRIBE_PYTHON = """
import json, sys, sysconfig
print(json.dumps({
    "version": "%d.%d" % sys.version_info[:2],
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "libdir": sysconfig.get_config_var("LIBDIR") or "",
    "soname": sysconfig.get_config_var("INSTSONAME") or "",
}))
"""


@dataclass(frozen=True)
class StubPython:
    """The Python the Python-backend stub embeds, as `describe_python` found it."""

    executable: Path  # as given: a virtualenv's bin/python keeps its virtualenv
    version: str  # "3.12": the stub built for this version is used
    prefix: Path  # sys.prefix (the virtualenv, if it is one)
    is_virtualenv: bool
    libpython: Path | None  # the shared libpython the stub links against; None: none found

    @property
    def bindir(self) -> Path:
        return self.executable.parent


def describe_python(executable: str | os.PathLike[str] | None = None) -> StubPython:
    """Describe `executable` (a path or a name on PATH; default: this interpreter) by running
    it; UserError when it cannot be run."""
    given = os.fspath(executable) if executable is not None else sys.executable
    found = shutil.which(given)
    if found is None:
        raise UserError(f"stub Python {given!r} not found or not executable")
    try:
        result = subprocess.run(
            [found, "-c", _DESCRIBE_PYTHON], capture_output=True, text=True, timeout=60
        )
        facts = json.loads(result.stdout) if result.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        raise UserError(f"stub Python {found} could not be run: {exc}") from None
    if facts is None:
        raise UserError(
            f"stub Python {found} could not be run (exit {result.returncode}): "
            f"{result.stderr.strip()[-500:]}"
        )
    libpython = Path(facts["libdir"]) / facts["soname"] if facts["soname"] else None
    return StubPython(
        executable=Path(os.path.abspath(found)),
        version=facts["version"],
        prefix=Path(facts["prefix"]),
        is_virtualenv=facts["prefix"] != facts["base_prefix"],
        libpython=libpython if libpython is not None and libpython.is_file() else None,
    )


# The oldest Python model.py and the runtime run on: Triton's own containers up to 23.04 (Triton
# 2.33, Ubuntu 20.04) ship a Python backend stub built for 3.8, 23.05 to 25.01 for 3.10 (Ubuntu
# 22.04), 25.02 on for 3.12 (Ubuntu 24.04); nvidia-pytriton bundles one stub per version.
MIN_STUB_PYTHON = (3, 9)
_LIBPYTHON = re.compile(rb"libpython(\d+\.\d+)")


def stub_python_version(stub: Path) -> str | None:
    """The Python version (`"3.10"`) a `triton_python_backend_stub` links, from its libpython."""
    match = _LIBPYTHON.search(stub.read_bytes())
    return match.group(1).decode() if match else None


class UnsupportedStubPython(UserError):
    """The Python-backend stub would run a Python ge-python-backend does not support."""


def check_stub_python_supported(version: str, subject: str) -> None:
    """Refuse (UnsupportedStubPython, one line) a stub Python older than `MIN_STUB_PYTHON`;
    `subject` says where `version` comes from ("the stub's Python is")."""
    major, minor = (int(part) for part in version.split(".")[:2])
    if (major, minor) < MIN_STUB_PYTHON:
        oldest = ".".join(map(str, MIN_STUB_PYTHON))
        raise UnsupportedStubPython(
            f"{subject} Python {version}, which ge-python-backend does not support: model.py "
            f"needs Python {oldest} or later in Triton's Python-backend stub (Triton's containers "
            "up to 23.04 ship a stub built for 3.8; 23.05 and later for 3.10 or 3.12); use such "
            "a release, nvidia-pytriton's server, or a stub built for a newer Python"
        )


def _stub_source(server_root: Path, version: str) -> Path:
    """The Python backend stub built for Python `version` (major.minor)."""
    stubs = server_root / "python_backend_stubs"
    stub = stubs / version / "triton_python_backend_stub"
    if not stub.is_file():
        available = sorted(path.name for path in stubs.iterdir()) if stubs.is_dir() else []
        raise UserError(
            f"nvidia-pytriton has no Python backend stub for Python {version} "
            f"(it has: {', '.join(available) or 'none'}); use a Python of one of those versions"
        )
    return stub


def _backend_files(server_root: Path, version: str) -> dict[str, Path]:
    """Relative path in the backend directory -> source file."""
    source = server_root / "backends" / "python"
    files = {
        f"python/{path.relative_to(source)}": path
        for path in sorted(source.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    files["python/triton_python_backend_stub"] = _stub_source(server_root, version)
    return files


def _backend_is_complete(directory: Path, files: Mapping[str, Path]) -> bool:
    return all(
        (directory / name).is_file() and (directory / name).stat().st_size == src.stat().st_size
        for name, src in files.items()
    )


def prepare_backend_directory(
    server_root: Path, cache_dir: Path | None = None, version: str | None = None
) -> Path:
    """A backend directory holding `python/` and the stub for Python `version` (default: this
    interpreter's major.minor).

    Reused when already complete; otherwise built in a temporary folder and renamed into place,
    so concurrent callers never see a half-written directory.
    """
    version = version or f"{sys.version_info.major}.{sys.version_info.minor}"
    files = _backend_files(server_root, version)
    fingerprint = hashlib.sha256()
    for name, src in files.items():
        stat = src.stat()
        fingerprint.update(f"{name}:{src}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    cache = (cache_dir or default_cache_dir()) / "backends"
    target = cache / f"python{version}-{fingerprint.hexdigest()[:16]}"
    if _backend_is_complete(target, files):
        return target
    cache.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=".build-", dir=cache))
    try:
        for name, src in files.items():
            (build / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, build / name)
        if target.exists():  # incomplete leftover: move it aside, then swap in the new build
            stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=cache))
            with contextlib.suppress(FileNotFoundError):
                target.rename(stale / "old")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            build.rename(target)
        except OSError:
            if not _backend_is_complete(target, files):  # not just another process winning
                raise
    finally:
        shutil.rmtree(build, ignore_errors=True)
    return target


def find_server(
    tritonserver: str | os.PathLike[str] | None = None,
    backend_directory: str | os.PathLike[str] | None = None,
    cache_dir: Path | None = None,
    stub_version: str | None = None,
) -> ServerBinary:
    """The user's `tritonserver` (a path or a name on PATH) or else the bundled one, with a
    backend directory holding the stub for Python `stub_version` (default: this one's).

    A `tritonserver` of another nvidia-pytriton install (`.../pytriton/tritonserver/bin/`) gets
    that install's shared libraries, as the bundled one does: the stubs of its backend directory
    need them. UserError for a stub Python older than `MIN_STUB_PYTHON`: the stub Python's, or
    the one the backend directory's stub is built for."""
    check_stub_python_supported(
        stub_version or f"{sys.version_info.major}.{sys.version_info.minor}",
        "the stub's Python is",
    )
    backends = Path(backend_directory) if backend_directory is not None else None
    if backends is not None:
        if not backends.is_dir():
            raise UserError(f"backend directory {backends} does not exist")
        stub = backends / "python" / "triton_python_backend_stub"
        built_for = stub_python_version(stub) if stub.is_file() else None
        if built_for is not None:
            check_stub_python_supported(built_for, f"the Python-backend stub {stub} is built for")
    if tritonserver is not None:
        found = shutil.which(os.fspath(tritonserver))
        if found is None:
            raise UserError(f"tritonserver {os.fspath(tritonserver)!r} not found or not executable")
        executable = Path(found).resolve()
        return ServerBinary(executable, backends, _pytriton_libraries(executable.parent.parent))
    root = bundled_server_root()
    if backend_directory is None:
        backends = prepare_backend_directory(root, cache_dir, stub_version)
    return ServerBinary(root / "bin" / "tritonserver", backends, _pytriton_libraries(root))


def _pytriton_libraries(server_root: Path) -> tuple[Path, ...]:
    """`nvidia_pytriton.libs/` of the nvidia-pytriton install `server_root`
    (`.../pytriton/tritonserver`) belongs to; none for a server of another layout."""
    libs = server_root.parent.parent / "nvidia_pytriton.libs"
    is_pytriton = server_root.name == "tritonserver" and server_root.parent.name == "pytriton"
    return (libs,) if is_pytriton and libs.is_dir() else ()


_TCP_LISTEN, _TCP_ESTABLISHED = "0A", "01"  # socket states in /proc/net/tcp


def _tcp_sockets(port: int, state: str) -> set[str]:
    """The TCP sockets of local port `port` in `state` in this network namespace, as the
    targets of the fds holding them (`socket:[inode]`)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()  # sl local_address rem_address st ... inode
                if fields[3] == state and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    return inodes


def listening_pids(port: int) -> set[int]:
    """The processes with a TCP socket listening on `port` in this network namespace, as far as
    Linux's `/proc` shows them (empty when it shows none: another OS, or no permission)."""
    inodes = _tcp_sockets(port, _TCP_LISTEN)
    pids = set()
    for fds in Path("/proc").glob("[0-9]*/fd") if inodes else ():
        with contextlib.suppress(OSError):  # a process gone, or not ours to look at
            if any(_fd_target(fd) in inodes for fd in fds.iterdir()):
                pids.add(int(fds.parent.name))
    return pids


def _fd_target(fd: Path) -> str:
    """What a `/proc/<pid>/fd` entry points at; "" for one closed while it is read."""
    try:
        return os.readlink(fd)
    except OSError:
        return ""


def client_connections(pid: int, port: int) -> list[int]:
    """The fds of process `pid` holding the established connections its clients made to its
    `port` (none when `/proc` does not show them)."""
    inodes = _tcp_sockets(port, _TCP_ESTABLISHED)
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir()) if inodes else []
    except OSError:
        return []
    return sorted(int(fd.name) for fd in fds if _fd_target(fd) in inodes)


_SYS_PIDFD_GETFD = 438  # the same number on every Linux architecture


def shut_down_connections(pid: int, fds: Sequence[int]) -> str | None:
    """Shut down the sockets behind `fds` of process `pid` (a copy of each through
    pidfd_getfd(2), Linux 5.6): the process reads their end and closes them. None when done,
    else why not (it needs ptrace rights over the process, as `hide_in_command_line`)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        pidfd = os.pidfd_open(pid)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        for fd in fds:
            copy = libc.syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0)
            if copy < 0:
                number = ctypes.get_errno()
                if number == errno.EBADF:
                    continue  # closed meanwhile
                return f"pidfd_getfd: {os.strerror(number)}"
            with socket.socket(fileno=copy) as connection, contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
    finally:
        os.close(pidfd)
    return None


def describe_process(pid: int) -> str:
    """`pid 123 (tritonserver)`: the id and, when readable, the program name."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} ({name})"


def check_port_free(host: str, port: int, what: str) -> None:
    """UserError naming the port and the process listening on it when `port` is taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As a server binds: a port left in TIME_WAIT is free, one something listens on is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            # Any other failure (an address this IPv4 check cannot bind) is Triton's to report.
            in_use = exc.errno == errno.EADDRINUSE
        else:
            in_use = False
    if not in_use:
        return
    holders = ", ".join(describe_process(pid) for pid in sorted(listening_pids(port)))
    raise UserError(
        f"{what} port {port} on {host} is already in use"
        + (f" by {holders}" if holders else "")
        + "; stop that server or choose another port (0 picks a free one)"
    )


def process_start_time(pid: int) -> int | None:
    """When process `pid` started (clock ticks after boot: field 22 of `/proc/<pid>/stat`), so
    that a pid used again by another process is told apart; None when no such process runs (none
    with that pid, or a zombie: it has exited) or `/proc` does not show it."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _pid_namespace() -> str:
    """This process's pid namespace (`pid:[4026531836]`): pids mean something only in it."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


@dataclass(frozen=True)
class ServerRecord:
    """Who owns a server's shared-memory regions: `TritonServer` keeps one per server it runs
    (`write_server_record`), so that the next `serve` removes the regions of a server that died
    with its launcher (`remove_dead_servers_regions`) and never those of one still running."""

    shm_region_prefix: str
    owners: tuple[tuple[int, int], ...]  # (pid, start time) of the launcher and the server
    pid_namespace: str  # the owners' pid namespace
    log_path: str

    @classmethod
    def of(cls, prefix: str, pids: Sequence[int], log_path: Path) -> ServerRecord:
        """The record of the server whose regions start with `prefix`, owned by `pids`."""
        owners = [(pid, process_start_time(pid)) for pid in pids]
        return cls(
            prefix,
            tuple((pid, start) for pid, start in owners if start is not None),
            _pid_namespace(),
            str(log_path),
        )

    def alive(self) -> bool:
        """Whether one of the owners still runs (the same process: same pid and start time)."""
        return any(process_start_time(pid) == start for pid, start in self.owners)


def server_records_directory() -> Path:
    """`/dev/shm/ge-python-backend-<uid>/servers` (mode 0700), holding a `ServerRecord` per
    server this user runs: beside the regions it describes, gone with them at a reboot, and apart
    from the runtime's placement records (`processes.records_directory`). UserError when
    `/dev/shm/ge-python-backend-<uid>` is not a private directory of this user
    (`processes.private_directory`)."""
    base = SHM_DIRECTORY / f"ge-python-backend-{os.getuid()}"
    try:
        private_directory(os.fspath(base))
    except NotPrivateError as exc:
        raise UserError(f"{exc}; it holds the servers' records") from None
    except OSError as exc:
        raise UserError(f"cannot create {base} for the servers' records: {exc}") from None
    try:
        return Path(records_directory(SERVER_RECORDS, os.fspath(base)))
    except OSError as exc:
        raise UserError(f"cannot create the servers' records directory in {base}: {exc}") from None


def _record_path(prefix: str) -> Path:
    return server_records_directory() / f"{prefix[len(SHM_REGION_PREFIX) :].strip('_')}.json"


def write_server_record(record: ServerRecord) -> None:
    """Write (or replace) `record` in `server_records_directory()`, whole or not at all."""
    path = _record_path(record.shm_region_prefix)
    text = json.dumps(
        {
            "shm_region_prefix": record.shm_region_prefix,
            "owners": [list(owner) for owner in record.owners],
            "pid_namespace": record.pid_namespace,
            "log": record.log_path,
        }
    )
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        partial.write_text(text + "\n")
        partial.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise UserError(f"cannot write the server's record in {path.parent}: {exc}") from None


def remove_server_record(prefix: str) -> None:
    """Remove the record of the server with region prefix `prefix` (once its regions are)."""
    with contextlib.suppress(FileNotFoundError):
        _record_path(prefix).unlink()


def _read_server_record(path: Path) -> ServerRecord | None:
    """The record in `path`; None (logged) for one that is not a record of ours."""
    try:
        data = json.loads(path.read_text())
        record = ServerRecord(
            str(data["shm_region_prefix"]),
            tuple((int(pid), int(start)) for pid, start in data["owners"]),
            str(data["pid_namespace"]),
            str(data["log"]),
        )
    except FileNotFoundError:
        return None  # removed meanwhile by its server or another sweep
    except (OSError, ValueError, KeyError, TypeError) as exc:
        logger.warning("ignoring %s: not a server record (%s)", path, exc)
        return None
    if not _OUR_SHM_PREFIX.fullmatch(record.shm_region_prefix):
        logger.warning(
            "ignoring %s: %r is not a region prefix of ours", path, record.shm_region_prefix
        )
        return None
    return record


def _remove_regions(prefix: str) -> list[Path]:
    """Remove the `/dev/shm` regions named `<prefix>...`; the paths removed."""
    removed = []
    for path in sorted(SHM_DIRECTORY.glob(f"{prefix}*")):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def remove_dead_servers_regions() -> list[tuple[ServerRecord, list[Path]]]:
    """Remove the shared-memory regions (and the record) of every server of this user that
    died with its launcher (a `serve` killed by SIGKILL): each record whose owners all stopped
    running, in this pid namespace. A record with an owner still running (the same pid and
    start time) is left alone. Each record removed, with the regions removed."""
    if process_start_time(os.getpid()) is None:
        logger.warning("/proc does not show processes: the regions of dead servers stay")
        return []
    namespace = _pid_namespace()
    reclaimed = []
    for path in sorted(server_records_directory().glob("*.json")):
        record = _read_server_record(path)
        if record is None or record.pid_namespace != namespace or record.alive():
            continue
        reclaimed.append((record, _remove_regions(record.shm_region_prefix)))
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    return reclaimed


def missing_restricted_api(binary: ServerBinary) -> list[str]:
    """The options closing the model-repository API (`repository_key.OPTIONS`) that `binary`
    lacks, as its `--help` lists them: both before Triton 2.33, the HTTP one before 2.40."""
    text = _help_of(binary.executable, binary.executable.stat().st_mtime_ns, binary.library_path)
    return [option for option in repository_key.OPTIONS if option not in text]


@functools.lru_cache(maxsize=8)
def _help_of(executable: Path, mtime_ns: int, library_path: tuple[Path, ...]) -> str:
    """`executable --help` (exit code 1 in Triton 2.51), read once per binary."""
    libraries = [*map(str, library_path), os.environ.get("LD_LIBRARY_PATH", "")]
    env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(filter(None, libraries))}
    try:
        result = subprocess.run(
            [str(executable), "--help"], capture_output=True, text=True, timeout=60, env=env
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"{executable} --help could not be run: {exc}") from None
    return result.stdout + result.stderr


def hide_in_command_line(pid: int, secret: str) -> str | None:
    """Overwrite `secret` with '*'s in the command line of process `pid` (its argv strings in
    memory, which `/proc/<pid>/cmdline` shows every local user). None when done, else why it
    could not be: writing another process's memory needs ptrace rights over it (Yama's
    ptrace_scope 1 allows a parent, 2 only CAP_SYS_PTRACE)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rpartition(b")")[2].split()  # from field 3, the state
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49: arg_start, arg_end
        if not 0 < start < end:
            return "/proc does not show this process where its command line is"
        needle = secret.encode()
        with open(f"/proc/{pid}/mem", "r+b", buffering=0) as memory:
            memory.seek(start)
            args = memory.read(end - start)
            at = args.find(needle)
            while at >= 0:
                memory.seek(start + at)
                memory.write(b"*" * len(needle))
                at = args.find(needle, at + len(needle))
    except (OSError, IndexError, ValueError) as exc:
        return getattr(exc, "strerror", None) or str(exc)
    return None


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` different TCP ports nothing listens on right now: all held at once while they
    are chosen (one after another, the kernel may hand out a port it just gave back: a server
    whose HTTP and gRPC ports were one answered its health checks in HTTP/2)."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((host, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    return free_ports(1, host)[0]


def check_shell_safe_paths(repository: Path, binary: ServerBinary) -> None:
    """Refuse paths Triton's Python backend would hand to a shell that interprets them.

    The backend runs its stub through `system()` and starts each model instance with
    `bash -c "exec <stub> <repository>/<model>/<version>/model.py ..."`, the paths unquoted: a
    space breaks the stub's arguments (the model never loads) and `$(...)` or `;` run commands.
    """
    check_shell_safe_path("model repository", repository)
    check_model_directory_names(repository)
    if binary.backend_directory is not None:
        check_shell_safe_path("backend directory", binary.backend_directory.resolve())


def server_environment(
    binary: ServerBinary,
    extra: Mapping[str, str] | None = None,
    python: StubPython | None = None,
) -> dict[str, str]:
    """The child environment: caller's env + `extra`, the stub's interpreter (`python`, default
    this one) first on PATH, its libpython and the server's libraries on LD_LIBRARY_PATH."""
    python = python or describe_python()
    env = dict(os.environ)
    env.update(extra or {})
    env["PATH"] = os.pathsep.join(filter(None, [str(python.bindir), env.get("PATH")]))
    if python.is_virtualenv:
        env["VIRTUAL_ENV"] = str(python.prefix)
    libdirs = [str(path) for path in binary.library_path]
    if python.libpython is not None:
        libdirs.append(str(python.libpython.parent))
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [*libdirs, env.get("LD_LIBRARY_PATH")]))
    return env


def exit_description(code: int) -> str:
    """How a process ended, from its return code: "exited with code 1", "killed by SIGKILL"."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _stop_process(
    process: subprocess.Popen[bytes],
    timeout: float,
    stopping: Callable[[], None] | None = None,
) -> int:
    """SIGINT (Triton's clean shutdown), SIGKILL after `timeout`; then end the process group.
    `stopping` is called right after the SIGINT and then every STOP_LOOK_S while it stops.

    The Python backend's stub processes share the server's process group; after a crash they
    are left behind, so whatever remains of the group is killed once the server is gone.
    """
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        while True:
            if stopping is not None:
                stopping()
            try:
                process.wait(max(0.0, min(STOP_LOOK_S, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    process.kill()
                    process.wait()
                    break
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    return int(process.returncode)


class TritonServer:
    """A `tritonserver` child process serving one model repository on loopback ports.

    ```
    with TritonServer("models", env={"GE_PYTHON_BACKEND_ACL": "emulator"}) as server:
        print(server.urls.http)
    ```
    Entering starts the server and waits until it is ready; leaving stops it. Ports left as
    None are free ports picked at start. `--exit-on-error=false` keeps the server up when a model
    fails to load (that model stays UNAVAILABLE), and readiness is not strict, so `wait_ready`
    returns once the server answers; see `repository_index()` for each model's state.
    `exit_timeout` is Triton's `--exit-timeout-secs`: how long a stop waits for in-flight
    requests and idle client connections. `stub_python` is the Python the stub runs (default:
    this interpreter); without a `binary`, the bundled server uses the stub built for it.
    Without a `log_path` the log goes to a new directory in the temp directory, which
    `remove_log` removes (a `with` block does after a clean stop). Each launch records who owns
    the server's shared-memory regions (`ServerRecord`); `stop` removes the regions and the
    record. Each launch also closes the model-repository API (index, load, unload) to all but
    the holders of a fresh `repository_key`, left for this user's tools in the run directory
    (`repository_key.publish`) and hidden from the server's command line where this process
    may write its memory (`key_hidden`).
    """

    def __init__(
        self,
        repository: str | os.PathLike[str],
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        host: str = "127.0.0.1",
        model_control_mode: str = "none",
        load_models: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        binary: ServerBinary | None = None,
        shm_sizes: ShmSizes | None = None,
        exit_timeout: int = 10,
        stub_python: StubPython | None = None,
    ) -> None:
        self.repository = Path(repository).resolve()
        if not self.repository.is_dir():
            raise UserError(f"model repository {self.repository} is not a directory")
        if model_control_mode not in MODEL_CONTROL_MODES:
            raise UserError(
                f"model control mode must be one of {MODEL_CONTROL_MODES}, "
                f"got {model_control_mode!r}"
            )
        if load_models and model_control_mode != "explicit":
            raise UserError("--load-model needs --model-control-mode explicit")
        self.host = host
        self.model_control_mode = model_control_mode
        self.load_models = tuple(load_models)
        self.env = dict(env or {})
        self.binary = binary
        self.shm_sizes = shm_sizes
        self.exit_timeout = exit_timeout
        self.stub_python = stub_python or describe_python()
        self._requested_ports = (http_port, grpc_port, metrics_port)
        self._ports: tuple[int, int, int] | None = None
        self.log_path = Path(log_path) if log_path is not None else None
        self._log_directory: Path | None = None  # the one `start` made, when no log_path
        self.shm_region_prefix = f"{SHM_REGION_PREFIX}ge{secrets.token_hex(4)}_"
        self.repository_key: str | None = None  # this launch's (`repository_key`)
        self.key_hidden = False  # whether it is gone from the server's /proc/<pid>/cmdline
        self._restricted = False  # whether the binary closes its model-repository API
        # While stopping: requests queued at the last look (None: unknown), and the idle
        # client connections closed (or why they could not be).
        self.in_flight_at_stop: int | None = None
        self.idle_connections_closed = 0
        self._quiet_looks = 0
        self._cannot_close: str | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None

    def __enter__(self) -> TritonServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.stop() == 0 and exc_type is None:
            self.remove_log()

    @property
    def pid(self) -> int | None:
        """The server's process id once started."""
        return self._process.pid if self._process else None

    @property
    def urls(self) -> ServerUrls:
        """HTTP, gRPC and metrics endpoints (after `start`)."""
        if self._ports is None:
            raise ServerError("the server has not been started")
        http, grpc, metrics = self._ports
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return ServerUrls(
            http=f"http://{host}:{http}",
            grpc=f"{host}:{grpc}",
            metrics=f"http://{host}:{metrics}/metrics",
        )

    def command(self) -> list[str]:
        """The `tritonserver` command line (ports and key must be chosen, i.e. after `start`)."""
        if self._ports is None or self.binary is None or self.shm_sizes is None:
            raise ServerError("the server has not been started")
        http, grpc, metrics = self._ports
        command = [
            str(self.binary.executable),
            f"--model-repository={self.repository}",
            f"--http-port={http}",
            f"--grpc-port={grpc}",
            f"--metrics-port={metrics}",
            f"--http-address={self.host}",
            f"--grpc-address={self.host}",
            f"--metrics-address={self.host}",
            "--exit-on-error=false",
            "--strict-readiness=false",
            f"--exit-timeout-secs={self.exit_timeout}",
            f"--model-control-mode={self.model_control_mode}",
            f"--backend-config=python,shm-default-byte-size={self.shm_sizes.default_bytes}",
            f"--backend-config=python,shm-growth-byte-size={self.shm_sizes.growth_bytes}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_region_prefix}",
            *(repository_key.server_options(self.repository_key) if self.repository_key else []),
        ]
        if self.binary.backend_directory is not None:
            command.append(f"--backend-directory={self.binary.backend_directory}")
        command += [f"--load-model={name}" for name in self.load_models]
        return command

    def check_ports(self) -> None:
        """UserError naming the port and the process listening on it when one of the fixed
        ports is taken (`start` checks them too)."""
        for what, port in zip(PORT_NAMES, self._requested_ports):
            if port:
                check_port_free(self.host, port, what)

    def start(self) -> None:
        """Launch the server (does not wait: see `wait_ready`)."""
        if self._process is not None:
            raise ServerError("the server was already started")
        if self.binary is None:
            self.binary = find_server(stub_version=self.stub_python.version)
        self.check_ports()  # a port in use is refused before any tritonserver runs (--help too)
        self._check_restricted_api()
        check_shell_safe_paths(self.repository, self.binary)
        server_records_directory()  # refused before anything runs when it is not private
        if self.shm_sizes is None:
            self.shm_sizes = shm_sizes_for_repository(self.repository)
        logger.info("%s", self.shm_sizes.summary())
        chosen = iter(free_ports(sum(not port for port in self._requested_ports), self.host))
        http, grpc, metrics = (port or next(chosen) for port in self._requested_ports)
        self._ports = (http, grpc, metrics)
        if self.log_path is None:
            self._log_directory = Path(tempfile.mkdtemp(prefix="ge-tritonserver-"))
            self.log_path = self._log_directory / "tritonserver.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._launch("wb")

    def _check_restricted_api(self) -> None:
        """Refuse, in explicit model-control mode, a Triton that cannot close its model-repository
        API (load with file overrides, unload) to a key; in mode none (where Triton refuses every
        load and unload) serve it with an open repository index, and say so."""
        assert self.binary is not None
        missing = missing_restricted_api(self.binary)
        self._restricted = not missing
        if not missing:
            return
        lacks = f"{self.binary.executable} has no {' or '.join(missing)}"
        if self.model_control_mode == "explicit":
            raise UserError(
                f"{lacks}: explicit model-control mode (the watcher's) needs Triton "
                f"{repository_key.FIRST_RELEASE} or later, so that other local users cannot load "
                "code through its model-repository API (or serve with --no-watch in mode none)"
            )
        logger.warning(
            "%s (a Triton before %s): its repository index stays open to every client (mode "
            "none refuses every load and unload)",
            lacks,
            repository_key.FIRST_RELEASE,
        )

    def _launch(self, log_mode: str) -> None:
        assert self.binary is not None and self.log_path is not None and self._ports is not None
        if self._restricted:
            key = repository_key.new_key()
            try:
                repository_key.publish(key, self._ports[:2])
            except OSError as exc:
                raise UserError(
                    f"cannot leave the server's model-repository key in the run directory: {exc}"
                ) from None
            self.repository_key = key
        logged = self.log_path.stat().st_size if log_mode == "ab" else 0
        with open(self.log_path, log_mode) as log:
            self._process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_environment(self.binary, self.env, self.stub_python),
                start_new_session=True,  # Ctrl-C reaches us, and we stop the server cleanly
            )
        self._finalizer = weakref.finalize(self, _stop_process, self._process, 10.0)
        if self.repository_key is not None:
            self._hide_key(logged)
        try:
            write_server_record(
                ServerRecord.of(
                    self.shm_region_prefix, (os.getpid(), self._process.pid), self.log_path
                )
            )
        except UserError:
            self.stop(0.0)
            raise

    def _hide_key(self, logged: int, timeout: float = 10.0) -> None:
        """Overwrite the key in the server's command line once Triton has parsed it (the first
        line it logs comes after), or say in one log line why it stays readable there."""
        assert self._process is not None and self.log_path is not None
        deadline = time.monotonic() + timeout
        while self.log_path.stat().st_size <= logged and self._process.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        assert self.repository_key is not None
        why = hide_in_command_line(self._process.pid, self.repository_key)
        self.key_hidden = why is None
        if why is not None and self._process.poll() is None:
            logger.warning(
                "the model-repository key of tritonserver (pid %d) stays readable by local "
                "users in /proc/%d/cmdline (%s); mount /proc with hidepid=invisible or run "
                "the server in a PID namespace of its own (docs/guides/reliability/other-users.md)",
                self._process.pid,
                self._process.pid,
                why,
            )

    def poll(self) -> int | None:
        """The exit code if the server has exited, else None."""
        return self._process.poll() if self._process else None

    def restart(self) -> list[Path]:
        """Start the server again, on the same ports and appending to the same log, after it
        exited (does not wait: see `wait_ready`). What remains of the dead server's process
        group is killed first and its shared-memory regions removed; returns those regions."""
        if self._process is None or self._process.poll() is None:
            raise ServerError("only a server that has exited can be restarted")
        _stop_process(self._process, 0.0)
        if self._finalizer is not None:
            self._finalizer.detach()
        removed = self.remove_shm_regions()
        self._launch("ab")
        return removed

    def remove_shm_regions(self) -> list[Path]:
        """Remove the `/dev/shm` regions of this server's Python backend (only once it and its
        stubs are gone); the paths removed."""
        return _remove_regions(self.shm_region_prefix)

    def remove_log(self) -> None:
        """Remove the log directory `start` made when no `log_path` was given (a log the caller
        named stays); `serve` and a `with` block call it after a clean stop."""
        if self._log_directory is not None:
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(self._log_directory)
            self._log_directory = None

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server log."""
        if self.log_path is None or not self.log_path.is_file():
            return ""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _request(
        self,
        method: str,
        path: str,
        timeout: float = 5.0,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.urls.http + path, method=method, headers=dict(headers or {})
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), bytes(exc.read())

    def is_live(self, timeout: float = 2.0) -> bool:
        """Whether `/v2/health/live` answers 200 within `timeout` seconds."""
        try:
            return self._request("GET", "/v2/health/live", timeout=timeout)[0] == 200
        except (OSError, HTTPException):  # HTTPException: not HTTP/1 on the port
            return False

    def kill(self) -> int | None:
        """SIGKILL the server and its stubs at once (a hung server drains nothing); the exit
        code (see `stop`)."""
        return self.stop(timeout=0.0)

    def is_ready(self) -> bool:
        """Whether `/v2/health/ready` answers 200."""
        try:
            return self._request("GET", "/v2/health/ready", timeout=2.0)[0] == 200
        except (OSError, HTTPException):  # HTTPException: not HTTP/1 on the port
            return False

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Poll `/v2/health/ready` until this server answers it; raise `ServerError` with the
        log tail on exit or timeout, or when another process answers on its HTTP port."""
        if self._process is None or self._ports is None:
            raise ServerError("the server has not been started")
        http_port = self._ports[0]
        deadline = time.monotonic() + timeout
        while True:
            code = self._process.poll()
            if code is not None:
                raise ServerError(
                    f"tritonserver exited with code {code} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if self.is_ready():
                # The answer may be another server's on the same port: the listener must be
                # this process (trusted when /proc shows no listener).
                holders = listening_pids(http_port)
                if not holders or self._process.pid in holders:
                    return
                raise ServerError(
                    f"{', '.join(map(describe_process, sorted(holders)))} answers on HTTP port "
                    f"{http_port}, not this tritonserver (pid {self._process.pid}); "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ServerError(
                    f"tritonserver not ready after {timeout:.0f} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def repository_index(self) -> list[dict[str, Any]]:
        """`POST /v2/repository/index`: name, version, state and reason of every model."""
        headers = repository_key.request_headers(self.repository_key, "http")
        status, body = self._request("POST", "/v2/repository/index", headers=headers)
        if status != 200:
            raise ServerError(
                f"repository index failed ({status}): {body.decode(errors='replace')}"
            )
        return list(json.loads(body))

    def pending_requests(self) -> int | None:
        """The requests queued in every model (`PENDING_METRIC` on the metrics endpoint; those
        executing are not in it); None when it does not answer."""
        try:
            with urllib.request.urlopen(self.urls.metrics, timeout=1.0) as reply:
                text = reply.read().decode()
        except (OSError, ValueError):
            return None
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith(PENDING_METRIC + "{")
        )

    def _look_while_stopping(self) -> None:
        """While Triton stops: count the requests queued (`in_flight_at_stop`); after two looks
        with none, shut down the HTTP connections clients keep open (keep-alive), which Triton
        would otherwise wait for until its exit timeout, or say once why not. A request
        executing then is not counted: its HTTP connection is shut down too."""
        if self._process is None or self._ports is None:
            return
        self.in_flight_at_stop = self.pending_requests()
        self._quiet_looks = self._quiet_looks + 1 if self.in_flight_at_stop == 0 else 0
        if self._quiet_looks < 2 or self._cannot_close is not None:
            return
        idle = client_connections(self._process.pid, self._ports[0])
        if not idle:
            return
        why = shut_down_connections(self._process.pid, idle)
        if why is None:
            self.idle_connections_closed += len(idle)
            logger.info(
                "closed %d idle HTTP client connection(s) of the stopping server", len(idle)
            )
            return
        self._cannot_close = why
        logger.warning(
            "tritonserver waits for %d idle HTTP client connection(s) until its exit timeout "
            "(%d s), no request being queued: they cannot be closed from here (%s)",
            len(idle),
            self.exit_timeout,
            why,
        )

    def stop(self, timeout: float | None = None) -> int | None:
        """Stop with SIGINT and return the exit code (what a crashed server left in `/dev/shm`
        is removed).

        Triton lets in-flight requests and open HTTP connections finish for `exit_timeout`
        seconds, then unloads the models; HTTP connections that stay open with no request in
        flight are shut down (`_look_while_stopping`); the process group is killed after
        `timeout` seconds (default `exit_timeout` + 20).
        """
        if self._process is None:
            return None
        code = _stop_process(
            self._process,
            self.exit_timeout + 20 if timeout is None else timeout,
            self._look_while_stopping,
        )
        if self._finalizer is not None:
            self._finalizer.detach()
        self.remove_shm_regions()  # what a crash left; a clean exit removed its own
        remove_server_record(self.shm_region_prefix)
        if self.repository_key is not None and self._ports is not None:
            repository_key.withdraw(self.repository_key, self._ports[:2])
        return code
