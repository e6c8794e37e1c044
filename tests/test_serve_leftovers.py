"""What `serve` leaves behind: its watcher's port, its log directory and Triton's shared memory.

The unit tests judge the records of who owns a server's regions (`server.ServerRecord`) on real
processes, in a `/dev/shm` stand-in; the e2e tests run `ge-python-model serve` as a process on
the real tritonserver, each with a temp directory of its own (`TMPDIR`).
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import ServeProcess, write_add_one
from reliability_helpers import wait_for_exit

from ge_python_backend import server as server_module
from ge_python_backend.cli import main
from ge_python_backend.errors import UserError
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.runtime import placement
from ge_python_backend.server import (
    SHM_DIRECTORY,
    SHM_REGION_PREFIX,
    ServerRecord,
    remove_dead_servers_regions,
    server_records_directory,
    write_server_record,
)
from ge_python_backend.tools.watch import metrics_port_beside

FREE_PORTS = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]


@pytest.fixture()
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_add_one(repo)
    return repo


# --- the watcher's port ------------------------------------------------------------------------


def test_the_watchers_port_follows_the_servers() -> None:
    assert metrics_port_beside((8000, 8001, 8002)) == 8003  # Triton's defaults
    assert metrics_port_beside((9100, 9000, 9001)) == 9101
    assert metrics_port_beside((0, 0, 9002)) == 9003
    assert metrics_port_beside((0, 0, 0)) == 0  # a free port
    assert metrics_port_beside((0, 0, 65535)) == 0


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture()
def taken_port() -> Iterator[int]:
    """A port this process listens on, the port below it free (for a metrics port whose
    following port, the watcher's default, is the taken one)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if port > 1 and _free(port - 1):
                sock.listen()
                yield port
                return


def this_process() -> str:
    return f"pid {os.getpid()} ({Path('/proc/self/comm').read_text().strip()})"


def test_a_taken_watcher_port_is_refused_before_the_server_starts(
    repository: Path, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    given = [*FREE_PORTS, "--watch-metrics-port", str(taken_port)]
    assert main(["serve", str(repository), *given]) == 2
    printed = capsys.readouterr()
    assert "Triton is ready" not in printed.out
    assert (
        f"watcher's metrics port {taken_port} on 127.0.0.1 is already in use by "
        f"{this_process()}; stop that server or choose another port" in printed.err
    )
    # By default the port above Triton's metrics port, refused the same way.
    following = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", str(taken_port - 1)]
    assert main(["serve", str(repository), *following]) == 2
    assert f"watcher's metrics port {taken_port} on 127.0.0.1 is already in use by " in (
        capsys.readouterr().err
    )


def test_a_port_out_of_range_is_refused(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", str(repository), "--watch-metrics-port", "70000"])
    assert "'70000' is not a port: 0 (a free one) to 65535" in capsys.readouterr().err


# --- the records of who owns a server's regions --------------------------------------------


@pytest.fixture()
def shm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory standing in for /dev/shm: regions and records land there."""
    directory = tmp_path / "shm"
    directory.mkdir()
    monkeypatch.setattr(server_module, "SHM_DIRECTORY", directory)
    return directory


def regions(shm: Path, tag: str) -> tuple[str, list[Path]]:
    """A region prefix of ours and two regions named by it, written to `shm`."""
    prefix = f"{SHM_REGION_PREFIX}ge{tag}_"
    paths = [shm / f"{prefix}{n}" for n in ("a", "b")]
    for path in paths:
        path.write_bytes(b"\0" * 16)
    return prefix, paths


def sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_only_the_regions_of_servers_whose_owners_all_died_are_removed(shm: Path) -> None:
    log = shm / "log"
    running, died = sleeper(), sleeper()
    try:
        live_prefix, live_paths = regions(shm, "00000001")  # its launcher died, its server runs
        write_server_record(ServerRecord.of(live_prefix, (died.pid, running.pid), log))
        dead_prefix, dead_paths = regions(shm, "00000002")  # launcher and server died
        dead = ServerRecord.of(dead_prefix, (died.pid,), log)
        write_server_record(dead)
        died.kill()
        died.wait()
        # The running process's pid, but another start time: the pid was used again.
        reused_prefix, reused_paths = regions(shm, "00000003")
        (owner,) = ServerRecord.of(reused_prefix, (running.pid,), log).owners
        write_server_record(
            dataclasses.replace(
                dead, shm_region_prefix=reused_prefix, owners=((owner[0], owner[1] - 1),)
            )
        )
        # Another pid namespace's pids mean nothing here: left alone.
        other_prefix, other_paths = regions(shm, "00000004")
        write_server_record(
            dataclasses.replace(dead, shm_region_prefix=other_prefix, pid_namespace="pid:[1]")
        )
        unrecorded_prefix, unrecorded_paths = regions(shm, "00000005")  # no record: not ours

        removed = remove_dead_servers_regions()

        assert [(record.shm_region_prefix, paths) for record, paths in removed] == [
            (dead_prefix, dead_paths),
            (reused_prefix, reused_paths),
        ]
        assert {record.log_path for record, _ in removed} == {str(log)}
        for path in dead_paths + reused_paths:
            assert not path.exists()
        for path in live_paths + other_paths + unrecorded_paths:
            assert path.exists()
        records = server_records_directory()
        assert sorted(path.name for path in records.iterdir()) == [
            "ge00000001.json",
            "ge00000004.json",
        ]
        assert remove_dead_servers_regions() == []
    finally:
        running.kill()
        running.wait()


def test_serve_says_what_it_removed_of_a_dead_server(
    shm: Path, repository: Path, taken_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    died = sleeper()
    prefix, paths = regions(shm, "000000aa")
    write_server_record(ServerRecord.of(prefix, (died.pid,), shm / "the.log"))
    died.kill()
    died.wait()
    # The sweep comes first: the taken port then ends serve before a server starts.
    assert main(["serve", str(repository), "--watch-metrics-port", str(taken_port)]) == 2
    assert (
        f"removed 2 shared-memory regions of a server that died with its launcher (pid "
        f"{died.pid}; log {shm / 'the.log'}): {paths[0].name}, {paths[1].name}\n"
    ) in capsys.readouterr().err
    assert not any(path.exists() for path in paths)


def test_a_record_that_is_not_ours_is_ignored(shm: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, paths = regions(shm, "0000000a")
    (server_records_directory() / "garbled.json").write_text("{not json")
    # A prefix TritonServer does not make (this one names every region of ours) is refused.
    everything = f"{SHM_REGION_PREFIX}ge"
    write_server_record(ServerRecord(everything, ((1, 1),), "", "log"))
    assert remove_dead_servers_regions() == []
    assert all(path.exists() for path in paths)
    assert "garbled.json: not a server record" in caplog.text
    assert f"{everything!r} is not a region prefix of ours" in caplog.text


def test_the_runtimes_placement_records_are_not_read_as_server_records(
    shm: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The default layout: the runtime's records and serve's under the same per-user directory.
    monkeypatch.setenv(RUN_DIR_ENV, str(shm / f"ge-python-backend-{os.getuid()}"))
    token = placement.place(0, "resnet", 1024)
    try:
        assert [holding.label for holding in placement.holders(0)] == ["resnet"]
        assert remove_dead_servers_regions() == []
    finally:
        placement.remove(0, token)
    assert "not a server record" not in caplog.text
    assert caplog.records == []


def test_a_records_directory_others_may_read_is_refused(shm: Path) -> None:
    directory = shm / f"ge-python-backend-{os.getuid()}"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    with pytest.raises(UserError, match=r"is not a private directory of this user .*drwxr-xr-x"):
        server_records_directory()
    assert directory.stat().st_mode & 0o777 == 0o755  # left as it was


# --- serve on the real server ----------------------------------------------------------------


class Serve(ServeProcess):
    """`ge-python-model serve` as a process with a temp directory of its own; stdout and stderr
    collected line by line."""

    def __init__(self, repository: Path, tmpdir: Path, *options: str) -> None:
        tmpdir.mkdir()
        self.tmpdir = tmpdir
        env = dict(os.environ, TMPDIR=str(tmpdir))
        super().__init__(repository, *FREE_PORTS, *options, env=env)

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith("Press Ctrl-C") for line in self.lines):
            assert self._reader.is_alive(), f"serve ended:\n{self.output}"
            assert time.monotonic() < deadline, f"serve not ready:\n{self.output}"
            time.sleep(0.2)

    def value(self, pattern: str) -> str:
        found = re.search(pattern, self.output)
        assert found, f"no {pattern!r} in:\n{self.output}"
        return found.group(1)

    @property
    def server_pid(self) -> int:
        return int(self.value(r"Triton is ready \(pid (\d+)\)"))

    def region_prefix(self) -> str:
        """The server's `shm-region-prefix-name`, from its command line."""
        arguments = Path(f"/proc/{self.server_pid}/cmdline").read_bytes().decode().split("\0")
        (flag,) = [arg for arg in arguments if "shm-region-prefix-name=" in arg]
        return flag.rpartition("=")[2]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        code = self.process.wait(60)
        self._reader.join(10)
        return code


def regions_of(prefix: str) -> list[str]:
    return sorted(name for name in os.listdir(SHM_DIRECTORY) if name.startswith(prefix))


def record_of(prefix: str) -> Path:
    tag = prefix[len(SHM_REGION_PREFIX) :].strip("_")
    return server_records_directory() / f"{tag}.json"


def answers(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.status == 200


@pytest.mark.e2e
def test_two_serves_on_free_ports_serve_side_by_side_and_leave_nothing(
    repository: Path, tmp_path: Path
) -> None:
    serves = [Serve(repository, tmp_path / name) for name in ("tmp-a", "tmp-b")]
    try:
        for serve in serves:
            serve.wait_ready()
        prefixes = [serve.region_prefix() for serve in serves]
        for serve, prefix in zip(serves, prefixes):
            assert "add_one (version 1): READY" in serve.output
            assert answers(serve.value(r"HTTP +(\S+)") + "/v2/models/add_one/ready")
            watcher = serve.value(r"watcher .*; metrics (\S+)")
            assert answers(watcher)  # each watcher on a port of its own
            assert regions_of(prefix), "the Python backend made no region"
            assert record_of(prefix).is_file()
            (log_directory,) = serve.tmpdir.iterdir()
            assert log_directory.name.startswith("ge-tritonserver-")
        watchers = {serve.value(r"watcher .*; metrics (\S+)") for serve in serves}
        assert len(watchers) == 2
    finally:
        codes = [serve.stop() for serve in serves]
    assert codes == [0, 0], "\n".join(serve.output for serve in serves)
    for serve, prefix in zip(serves, prefixes):
        assert "Triton stopped (exit code 0)" in serve.output
        assert list(serve.tmpdir.iterdir()) == []  # the log directory is gone
        assert regions_of(prefix) == []
        assert not record_of(prefix).exists()


@pytest.mark.e2e
def test_a_log_file_given_stays_after_a_clean_stop(repository: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    serve = Serve(repository, tmp_path / "tmp", "--no-watch", "--log-file", str(log))
    try:
        serve.wait_ready()
    finally:
        assert serve.stop() == 0, serve.output
    assert "add_one" in log.read_text()
    assert list(serve.tmpdir.iterdir()) == []


@pytest.mark.e2e
def test_the_next_serve_removes_what_a_killed_serve_and_server_left(
    repository: Path, tmp_path: Path
) -> None:
    killed = Serve(repository, tmp_path / "tmp-killed")
    killed.wait_ready()
    server_pid, prefix = killed.server_pid, killed.region_prefix()
    left = regions_of(prefix)
    assert left and record_of(prefix).is_file()
    killed.process.kill()
    os.killpg(server_pid, signal.SIGKILL)  # the server and its stub processes
    killed.stop()
    wait_for_exit(server_pid, 30)
    assert regions_of(prefix) == left, "the regions of a dead server stay until a serve starts"

    # A live server's regions are never touched by the next start: this one runs throughout.
    running = Serve(repository, tmp_path / "tmp-running")
    try:
        running.wait_ready()
        running_prefix = running.region_prefix()
        running_regions = regions_of(running_prefix)
        assert regions_of(prefix) == [] and not record_of(prefix).exists()
        following = Serve(repository, tmp_path / "tmp-following", "--no-watch")
        try:
            following.wait_ready()
            assert set(running_regions) <= set(regions_of(running_prefix))
            assert record_of(running_prefix).is_file()
        finally:
            assert following.stop() == 0, following.output
        assert answers(running.value(r"HTTP +(\S+)") + "/v2/models/add_one/ready")
    finally:
        assert running.stop() == 0, running.output
