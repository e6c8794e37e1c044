"""Triton's model-repository API closed to strangers (docs/guides/reliability/other-users.md).

`serve` runs Triton in explicit model-control mode for its watcher; Triton's load takes file
overrides, so whoever may call it runs a `model.py` of their own as the server's user. Here a
second local user (created for the test where the machine allows it: root with `useradd` and
`setpriv`; else this user without the key) tries a load with a file override, an unload of the
served model and the repository index over HTTP and gRPC against a real `serve`: each is refused,
their code never runs, the key file is unreadable to them and the key is gone from tritonserver's
command line. The watcher, which holds the key, still heals a killed stub.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import (
    ADD_ONE_CONFIG,
    ADD_ONE_MODEL,
    ServeProcess,
    free_port,
    free_ports,
    running_server,
    write_add_one,
    write_python_model,
)
from reliability_helpers import wait_for_exit

from ge_python_backend import repository_key
from ge_python_backend import server as server_module
from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.errors import UserError
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import (
    ServerBinary,
    TritonServer,
    find_server,
    hide_in_command_line,
    missing_restricted_api,
)

# What the attacker runs: every call of the model-repository API without the key, over HTTP
# and gRPC, a load carrying its own model.py (which would leave `marker` behind); then the key
# file and tritonserver's command line. Prints {attempt: "allowed" or the error}.
ATTACK = r"""
import json, sys
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

http_url, grpc_url, key_file, pid, marker = sys.argv[1:]
model_py = (
    "import pathlib\n"
    f"pathlib.Path({marker!r}).write_text('ran as the server')\n"
    "class TritonPythonModel:\n"
    "    def execute(self, requests):\n"
    "        return []\n"
)
config = json.dumps({"backend": "python", "max_batch_size": 0})
files = {"file:1/model.py": model_py.encode()}
found = {}

def attempt(name, call):
    try:
        call()
        found[name] = "allowed"
    except Exception as error:
        found[name] = str(error)

for protocol, client in (
    ("http", httpclient.InferenceServerClient(http_url)),
    ("grpc", grpcclient.InferenceServerClient(grpc_url)),
):
    attempt(f"{protocol} load", lambda: client.load_model("evil", config=config, files=files))
    attempt(f"{protocol} unload", lambda: client.unload_model("add_one"))
    attempt(f"{protocol} index", lambda: client.get_model_repository_index())
attempt("key file", lambda: open(key_file).read())
found["cmdline"] = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
print(json.dumps(found))
"""


@contextlib.contextmanager
def stranger() -> Iterator[list[str]]:
    """The command prefix running a program as another local user: a user created for the
    test (root with useradd and setpriv) and removed afterwards; else [] (this user, who then
    attacks without the key, as any client that does not send it)."""
    if os.getuid() != 0 or not (shutil.which("useradd") and shutil.which("setpriv")):
        yield []
        return
    name = f"ge-attacker-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name],
        check=True,
    )
    try:
        yield ["setpriv", f"--reuid={name}", f"--regid={name}", "--clear-groups", "--"]
    finally:
        subprocess.run(["userdel", name], check=True)


def attacker_python(prefix: list[str]) -> list[str]:
    """A Python with tritonclient that the attacker may run: this one, or the system's of the
    same version on this venv's site-packages (a venv under /root is closed to others)."""
    site = sysconfig.get_paths()["purelib"]
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [[sys.executable]]
    for python in (os.path.realpath(sys.executable), shutil.which(version, path="/usr/bin")):
        if python:
            candidates.append(["env", f"PYTHONPATH={site}", python])
    for python in candidates:
        check = [*prefix, *python, "-c", "import tritonclient.grpc, tritonclient.http"]
        if subprocess.run(check, capture_output=True, cwd="/").returncode == 0:
            return python
    raise AssertionError("no Python with tritonclient runs as the attacker")


class Serve(ServeProcess):
    """`ge-python-model serve` with its watcher, as a process, its output collected."""

    def __init__(self, repository: Path, log: Path, exit_timeout_s: int = 2) -> None:
        self.http, self.grpc = free_ports(2)
        arguments = ["--http-port", str(self.http), "--grpc-port", str(self.grpc)]
        arguments += ["--metrics-port", "0", "--watch-metrics-port", "0", "--log-file", str(log)]
        arguments += ["--watch-interval", "0.5", "--watch-timeout", "5"]
        arguments += ["--exit-timeout-secs", str(exit_timeout_s)]
        super().__init__(repository, *arguments)


def answers(address: str) -> bool:
    try:
        with TritonClient(address, "http", timeout_s=5) as client:
            answer = client.infer("add_one", typed({"X": np.ones((1, 4), np.float32)}))["Y"]
            return bool((answer == 2).all())
    except Exception:
        return False


@pytest.mark.e2e
def test_a_stranger_cannot_load_unload_or_list_models_and_the_watcher_still_heals(
    tmp_path: Path,
) -> None:
    repository = tmp_path / "models"
    write_add_one(repository)
    shared = Path(f"/tmp/ge-attack-{uuid.uuid4().hex[:8]}")  # where the attacker may write
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    marker = shared / "ran"
    serve = Serve(repository, tmp_path / "triton.log")
    http = f"127.0.0.1:{serve.http}"
    try:
        serve.wait_for("Press Ctrl-C")
        key_file = Path(repository_key.key_path(serve.http))
        assert f"restricted to header ge-repository-key; its key: {key_file}" in serve.output
        key = key_file.read_text().strip()
        assert len(key) == 64 and (key_file.stat().st_mode & 0o777) == 0o600
        assert (key_file.parent.stat().st_mode & 0o777) == 0o700
        server = serve.tritonserver()
        with stranger() as prefix:
            command = [*prefix, *attacker_python(prefix), "-c", ATTACK]
            command += [http, f"127.0.0.1:{serve.grpc}", str(key_file), str(server.pid)]
            command += [str(marker)]
            run = subprocess.run(command, capture_output=True, text=True, cwd="/", timeout=120)
        assert run.returncode == 0, run.stderr
        found = json.loads(run.stdout)
        print(f"\nas {'another user' if prefix else 'this user without the key'}: {found}")
        for name in ("load", "unload", "index"):
            assert (
                "[403] This API is restricted, expecting header 'ge-repository-key'"
                in (found[f"http {name}"])
            )
            assert (
                "This protocol is restricted, expecting header "
                "'triton-grpc-protocol-ge-repository-key'" in found[f"grpc {name}"]
            )
        assert not marker.exists(), "the stranger's model.py ran"
        if prefix:
            assert "Permission denied" in found["key file"]
        hidden = "stays readable by local users" not in serve.output
        assert (key not in found["cmdline"]) is hidden
        assert "--http-restricted-api=model-repository:ge-repository-key=" in found["cmdline"]
        with TritonClient(http, "http") as client:  # ours finds the key
            states = {e["name"]: e.get("state") for e in client.repository_index()}
        assert states == {"add_one": "READY"}  # not unloaded, nothing loaded beside it

        # The watcher holds the key: a killed stub is reloaded through the restricted API.
        (stub,) = server.children(recursive=True)
        stub.kill()
        wait_for_exit(stub.pid, 10)
        deadline = time.monotonic() + 30
        while not answers(http):
            assert time.monotonic() < deadline, serve.output
            time.sleep(0.2)
        assert "healed by reload" in serve.output
    finally:
        serve.process.send_signal(signal.SIGINT)
        serve.process.wait(60)
        shutil.rmtree(shared, ignore_errors=True)
    # The exit code is not judged: Triton 2.51 keeps the killed stub's instance until it exits,
    # and may give up unloading it; nothing is queued then, and serve says so (or, when the
    # stopping server's metrics did not answer its last look, as on a loaded machine, that it
    # cannot tell), never that a queued request was left.
    if "Triton stopped (exit code 0)" not in serve.output:
        assert "Triton did not stop cleanly (exit code 1): " in serve.output, serve.output
        assert (
            "no request was queued at the end; any still executing" in serve.output
            or "requests may have been left unanswered" in serve.output
        ), serve.output
    assert not key_file.exists(), "the key stays after the server stopped"


@pytest.mark.e2e
def test_ctrl_c_with_an_idle_keep_alive_client_stops_at_once_and_cleanly(tmp_path: Path) -> None:
    """Triton waits for every open HTTP connection up to its exit timeout (30 s here), then
    exits 1 with models still loaded; serve shuts down the connections of clients that keep
    them open with no request in flight, so Triton unloads its models and exits 0."""
    repository = tmp_path / "models"
    write_add_one(repository)
    serve = Serve(repository, tmp_path / "triton.log", exit_timeout_s=30)
    try:
        serve.wait_for("Press Ctrl-C")
        with socket.create_connection(("127.0.0.1", serve.http)) as idle:
            idle.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: triton\r\n\r\n")
            assert idle.recv(1024).startswith(b"HTTP/1.1 200 OK")  # kept open, idle
            serve.process.send_signal(signal.SIGINT)
            serve.process.wait(25)  # well before the exit timeout
            assert idle.recv(1024) == b""  # closed by the server's end
    finally:
        if serve.process.poll() is None:
            serve.process.kill()
            serve.process.wait()
    assert serve.process.returncode == 0, serve.output
    assert "closed 1 idle HTTP client connection(s) of the stopping server" in serve.output
    assert "Triton stopped (exit code 0)" in serve.output


@pytest.mark.e2e
def test_tritons_pending_gauge_counts_a_queued_request_and_not_an_executing_one(
    tmp_path: Path,
) -> None:
    """What serve can count at its stop: with two requests in flight on one instance, one
    executing (2 s) and one queued behind it, Triton 2.51's nv_inference_pending_request_count
    says 1, never 2; no metric of Triton counts the executing one."""
    repository = tmp_path / "models"
    started = tmp_path / "executing"  # the model's execute makes it, then takes 2 s
    slow = ADD_ONE_MODEL.replace(
        "    def execute(self, requests):\n",
        "    def execute(self, requests):\n"
        "        open(__import__('os').environ['EXECUTING'], 'w').close()\n"
        "        __import__('time').sleep(2)\n",
    )
    write_python_model(repository, "add_one", ADD_ONE_CONFIG, slow)
    env = {"EXECUTING": str(started)}
    with running_server(repository, env=env, log_path=tmp_path / "triton.log") as server:

        def infer() -> np.ndarray:
            with TritonClient(server.urls.http, "http", timeout_s=30) as client:
                return client.infer("add_one", typed({"X": np.ones((1, 4), np.float32)}))["Y"]

        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(infer)
            while not started.exists():
                time.sleep(0.02)
            second = pool.submit(infer)
            seen = []
            while not first.done():  # the first executes, the second is sent and queued
                seen.append(server.pending_requests())
                time.sleep(0.05)
            answers = [first.result(), second.result()]
    assert all((answer == 2).all() for answer in answers)
    assert 1 in seen and 2 not in seen, seen


# --- without a server ---------------------------------------------------------------------------


@pytest.mark.e2e  # runs the bundled tritonserver's --help
def test_a_triton_without_the_restricted_api_options_is_refused_in_explicit_mode(
    tmp_path: Path,
) -> None:
    """A release before 2.40 lists no --http-restricted-api in its --help (as this stand-in):
    refused in one line where loads and unloads are open (explicit mode)."""
    old = tmp_path / "tritonserver"
    old.write_text("#!/bin/sh\necho 'Usage: tritonserver [options]'\necho '  --grpc-port <int>'\n")
    old.chmod(0o755)
    binary = ServerBinary(old, None, ())
    assert missing_restricted_api(binary) == list(repository_key.OPTIONS)
    assert missing_restricted_api(find_server()) == []  # the bundled 2.51 has both
    repository = tmp_path / "models"
    write_add_one(repository)
    server = TritonServer(repository, model_control_mode="explicit", binary=binary)
    with pytest.raises(UserError) as refused:
        server.start()
    assert str(refused.value) == (
        f"{old} has no --http-restricted-api or --grpc-restricted-protocol: explicit "
        "model-control mode (the watcher's) needs Triton 2.40 (NGC 23.11) or later, so that "
        "other local users cannot load code through its model-repository API (or serve with "
        "--no-watch in mode none)"
    )
    assert server.pid is None  # nothing started


def test_the_key_goes_only_to_a_server_of_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    repository_key.publish("k" * 64, (port,))
    try:
        assert repository_key.find_key(f"127.0.0.1:{port}") == "k" * 64
        assert repository_key.find_key(f"localhost:{port}") == "k" * 64
        assert repository_key.find_key(f"192.0.2.1:{port}") is None  # TEST-NET-1: not ours
        assert repository_key.find_key(f"127.0.0.1:{free_port()}") is None  # no server there
        monkeypatch.setenv(repository_key.ENV, "given")
        assert repository_key.find_key(f"192.0.2.1:{port}") == "given"
    finally:
        repository_key.withdraw("k" * 64, (port,))
    assert not os.path.exists(repository_key.key_path(port))
    assert repository_key.request_headers("x", "http") == {"ge-repository-key": "x"}
    assert repository_key.request_headers("x", "grpc") == {
        "triton-grpc-protocol-ge-repository-key": "x"
    }


def test_a_secret_is_overwritten_in_a_childs_command_line_or_the_reason_given() -> None:
    secret = repository_key.new_key()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", secret])
    try:
        cmdline = Path(f"/proc/{child.pid}/cmdline")
        deadline = time.monotonic() + 10
        while secret not in cmdline.read_text():  # until the child has exec'd
            assert time.monotonic() < deadline
            time.sleep(0.01)
        why = hide_in_command_line(child.pid, secret)
        shown = cmdline.read_text()
        if why is None:
            assert secret not in shown and "*" * len(secret) in shown
        else:  # no ptrace rights over the child (Yama's ptrace_scope 2 or 3, not root)
            assert secret in shown and os.getuid() != 0
    finally:
        child.kill()
        child.wait()


@contextlib.contextmanager
def full_filesystem(directory: Path) -> Iterator[Path]:
    """A tmpfs at `directory` holding the run directory `run/` and serve's records directory
    (0700) and no free inode (root only: mount; skipped elsewhere)."""
    directory.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=8,mode=0700", "tmpfs", str(directory)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        for name in (
            "run",
            f"ge-python-backend-{os.getuid()}",
            f"ge-python-backend-{os.getuid()}/servers",
        ):
            (directory / name).mkdir(mode=0o700)
        with contextlib.suppress(OSError):
            for number in range(100):
                (directory / f"filler-{number}").touch()
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=True)


@pytest.mark.e2e  # runs the bundled tritonserver's --help
@pytest.mark.parametrize("hosted", [False, True], ids=["in-stub", "device-host"])
def test_serve_refuses_a_run_directory_out_of_inodes_in_one_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    om_dynamic_batch: Path,
    hosted: bool,
) -> None:
    """Out of inodes, the first file `serve` writes there fails: the model-repository key, or
    before it the device host's files of a `device_host` model."""
    repository = tmp_path / "models"
    if hosted:
        scaffold(om_dynamic_batch, repository, name="hosted", runtime="emulator", device_host=True)
    else:
        write_add_one(repository)
    with full_filesystem(tmp_path / "full") as full:
        monkeypatch.setattr(server_module, "SHM_DIRECTORY", full)
        monkeypatch.setenv(RUN_DIR_ENV, str(full / "run"))
        free = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
        code = main(["serve", str(repository), *free, "--watch-metrics-port", "0"])
    printed = capsys.readouterr()
    assert code == 2 and "Triton is ready" not in printed.out
    (line,) = printed.err.strip().splitlines()
    what = (
        "cannot start the device host of device 0"
        if hosted
        else "cannot leave the server's model-repository key in the run directory"
    )
    assert line.startswith(f"ge-python-model serve: error: {what}: [Errno 28] No space left")
