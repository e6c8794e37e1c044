"""Scaffolding and serving safety, and requests that cannot fit in shared memory.

Scaffolding refuses names that escape the repository, symlinked targets, existing models without
`--overwrite` and unreadable `.om` files, with one clear line and nothing written; what it writes
is never group- or world-writable. Serving binds to loopback by default, builds no shell command
line, and refuses paths that Triton's Python backend would pass through a shell. A request too
large for the container's /dev/shm fails alone while the model keeps serving.
"""

from __future__ import annotations

import ast
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import http_address, model_states, running_server
from reliability_helpers import can_limit_shm, compile_long, small_shm_binary, stub_for
from tritonclient.utils import InferenceServerException

import ge_python_backend
from ge_python_backend.cli import build_parser, main
from ge_python_backend.client import TritonClient
from ge_python_backend.errors import UserError
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.shm import MIB, shm_sizes_for_repository
from ge_python_backend.server import TritonServer

SHELL_BAIT = "$(touch PWNED)"


def tree(directory: Path) -> dict[str, bytes | None]:
    """Every path under `directory` (its contents for files); empty if it does not exist."""
    if not directory.exists():
        return {}
    return {
        str(path.relative_to(directory)): path.read_bytes() if path.is_file() else None
        for path in sorted(directory.rglob("*"))
    }


def scaffold_cli(om: Path, repository: Path, *extra: str) -> list[str]:
    return ["scaffold", str(om), "--repository", str(repository), "--runtime", "emulator", *extra]


@pytest.fixture
def umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.mark.parametrize(
    "name",
    ["../escape", "..", "/etc/cron.d", "nested/name", "back\\slash", ".hidden", "a b", SHELL_BAIT],
)
def test_names_that_escape_or_reach_a_shell_are_refused(
    tmp_path: Path, om_static: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    before = tree(tmp_path)
    assert main(scaffold_cli(om_static, tmp_path / "models", "--name", name)) == 2
    error = capsys.readouterr().err
    assert error.startswith("ge-python-model scaffold: error: model name")
    assert len(error.strip().splitlines()) == 1 and "Traceback" not in error
    assert tree(tmp_path) == before
    assert not Path("/etc/cron.d/config.pbtxt").exists()


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("dangling", [False, True])
def test_a_symlinked_model_directory_is_refused(
    tmp_path: Path,
    om_static: Path,
    capsys: pytest.CaptureFixture[str],
    overwrite: bool,
    dangling: bool,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    if not dangling:
        elsewhere.mkdir()
    repository = tmp_path / "models"
    repository.mkdir()
    (repository / "mlp").symlink_to(elsewhere, target_is_directory=True)
    before = tree(tmp_path)
    flags = ["--name", "mlp"] + (["--overwrite"] if overwrite else [])
    assert main(scaffold_cli(om_static, repository, *flags)) == 2
    error = capsys.readouterr().err
    assert "is a symbolic link; refusing to write through or replace it" in error, error
    assert tree(tmp_path) == before
    assert (repository / "mlp").is_symlink()


def test_an_existing_model_is_kept_without_overwrite(
    tmp_path: Path, om_static: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = tmp_path / "models"
    assert main(scaffold_cli(om_static, repository, "--name", "mlp")) == 0
    before = tree(tmp_path)
    assert main(scaffold_cli(om_static, repository, "--name", "mlp", "--instances", "3")) == 2
    assert "already exists; choose another --version" in capsys.readouterr().err
    assert tree(tmp_path) == before
    assert main(scaffold_cli(om_static, repository, "--name", "mlp", "--overwrite")) == 0


def unprivileged_prefix() -> list[str]:
    """A command prefix under which file permissions apply (root ignores them otherwise)."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@pytest.mark.parametrize("declared", [False, True])
def test_an_unreadable_om_is_refused(tmp_path: Path, om_static: Path, declared: bool) -> None:
    om = tmp_path / "mlp.om"
    shutil.copyfile(om_static, om)
    om.chmod(0)
    repository = tmp_path / "models"
    flags = ["--input", "x:FP32:4,16", "--output", "y:FP32:4,8"] if declared else []
    script = "import sys; from ge_python_backend.cli import main; sys.exit(main(sys.argv[1:]))"
    completed = subprocess.run(
        [
            *unprivileged_prefix(),
            sys.executable,
            "-c",
            script,
            *scaffold_cli(om, repository, *flags),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip() == (
        f"ge-python-model scaffold: error: cannot read .om file {om}: Permission denied"
    )
    assert not repository.exists()


@pytest.mark.parametrize(
    ("mask", "dir_mode", "file_mode"), [(0, 0o755, 0o644), (0o077, 0o700, 0o600)]
)
@pytest.mark.usefixtures("umask")
def test_files_are_written_with_ordinary_permissions(
    tmp_path: Path, om_static: Path, mask: int, dir_mode: int, file_mode: int
) -> None:
    os.umask(mask)
    result = scaffold(om_static, tmp_path / "models", runtime="emulator", vendor_runtime=True)
    modes = {
        path: stat.S_IMODE(path.stat().st_mode)
        for path in [result.model_dir, *result.model_dir.rglob("*")]
    }
    assert len(modes) > 20  # the vendored runtime included
    for path, mode in modes.items():
        assert mode == (dir_mode if path.is_dir() else file_mode), (path, oct(mode))
    assert stat.S_IMODE((tmp_path / "models").stat().st_mode) == dir_mode


def test_serve_listens_on_loopback_unless_told_otherwise(tmp_path: Path) -> None:
    assert build_parser().parse_args(["serve", str(tmp_path)]).host == "127.0.0.1"
    assert (
        build_parser().parse_args(["serve", str(tmp_path), "--host", "0.0.0.0"]).host == "0.0.0.0"
    )
    assert TritonServer(tmp_path).host == "127.0.0.1"


def shell_uses(source: str) -> list[int]:
    """Lines that run a shell: `shell=` other than False, `os.system`/`os.popen`, or a
    subprocess call given one string instead of an argument list."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = ast.unparse(node.func)
        shell = [k.value for k in node.keywords if k.arg == "shell"]
        if (
            name in ("os.system", "os.popen")
            or any(not (isinstance(v, ast.Constant) and v.value is False) for v in shell)
            or (
                name.startswith("subprocess.")
                and node.args
                and isinstance(node.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp))
            )
        ):
            lines.append(node.lineno)
    return lines


def test_the_shell_check_finds_shell_uses() -> None:
    planted = (
        "import os, subprocess\n"
        "subprocess.run(['ls'], shell=True)\n"
        "os.system('ls')\n"
        "subprocess.check_output(f'ls {path}')\n"
        "subprocess.run(['ls'], shell=False)\n"
    )
    assert shell_uses(planted) == [2, 3, 4]


def test_no_shell_command_line_is_ever_built() -> None:
    sources = sorted(Path(ge_python_backend.__file__).parent.rglob("*.py"))
    assert len(sources) > 20
    found = {str(path): shell_uses(path.read_text()) for path in sources}
    assert {path: lines for path, lines in found.items() if lines} == {}


@pytest.mark.parametrize("where", ["repository", "model directory"])
def test_paths_a_shell_would_interpret_are_refused_before_the_server_starts(
    tmp_path: Path, om_static: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Triton's Python backend runs `bash -c "exec <stub> <model path> ..."` unquoted: with
    Triton 2.51 such a path ran `touch PWNED` in the server's working directory."""
    repository = tmp_path / f"repo {SHELL_BAIT}" if where == "repository" else tmp_path / "models"
    scaffold(om_static, repository, name="mlp", runtime="emulator")
    if where == "model directory":
        (repository / "mlp").rename(repository / SHELL_BAIT)
    server = TritonServer(repository)
    with pytest.raises(UserError, match=rf"{where} .* contains .*\$.*shell command line"):
        server.start()
    assert server.pid is None
    free_ports = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    assert main(["serve", str(repository), "--emulator", *free_ports]) == 2
    assert "Python backend starts each model through a shell" in capsys.readouterr().err
    # validate refuses what serve refuses: the repository outright, the model as INVALID
    validate = main(["validate", str(repository), "--runtime", "emulator"])
    output = capsys.readouterr()
    assert validate == (2 if where == "repository" else 1)
    assert "contains" in output.err + output.out and "shell command line" in output.err + output.out
    if where == "model directory":
        assert f"{SHELL_BAIT}: INVALID" in output.out
    # k8s mounts the repository at /models: only the model directories' names reach the shell
    k8s = main(["k8s", str(repository), "--name", "mlp"])
    output = capsys.readouterr()
    if where == "model directory":
        assert k8s == 2 and "shell command line" in output.err
    else:
        assert k8s == 0 and "kind: Deployment" in output.out
    assert not (Path.cwd() / "PWNED").exists() and not (tmp_path / "PWNED").exists()


LONG = 4_194_304  # FP32 values in the long gear: 16 MiB per request, as much again in the answer


@pytest.mark.e2e
def test_a_request_too_large_for_shared_memory_fails_alone(tmp_path: Path) -> None:
    """A container's /dev/shm of 24 MiB: the sizes `serve` picks from config.pbtxt hold the
    warmup-sized requests, a 32 MiB exchange cannot fit and fails with the backend's message."""
    reason = can_limit_shm()
    if reason:
        pytest.skip(reason)
    om = compile_long(tmp_path / "src", "long", f"1024;{LONG}")
    repository = tmp_path / "models"
    # Depth 1: the response travels back with `execute`'s return, through the pool that cannot
    # grow (depth 2's response sender moved the 32 MiB answer without growing it here).
    scaffold(om, repository, name="long", runtime="emulator", pipeline_depth=1)
    assert shm_sizes_for_repository(repository).default_bytes == MIB
    binary, env = small_shm_binary(tmp_path, "24m")
    # After the failure the stub never finishes unloading (Triton 2.51): stop without waiting.
    with running_server(
        repository, env=env, binary=binary, log_path=tmp_path / "log", exit_timeout=1
    ) as server:
        stub = stub_for(server, "long")

        def infer(length: int) -> np.ndarray:
            x = np.full((1, length), 1.5, np.float32)
            with TritonClient(http_address(server), "http") as client:
                return client.infer("long", {"x": (x, "FP32")})["y"]

        np.testing.assert_array_equal(infer(1024), np.full((1, 1024), 3.0, np.float32))
        with pytest.raises(InferenceServerException) as caught:
            infer(LONG)
        message = str(caught.value)
        assert "Failed to increase the shared memory pool size" in message, message
        assert "--shm-size" in message and "No space left on device" in message, message
        np.testing.assert_array_equal(infer(1024), np.full((1, 1024), 3.0, np.float32))
        assert model_states(server)["long"][0] == "READY"
        assert stub_for(server, "long").pid == stub.pid and server.poll() is None
