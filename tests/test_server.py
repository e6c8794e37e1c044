"""`ge_python_backend.server`: shm sizing, backend directory, and the REAL tritonserver (e2e)."""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import (
    grpc_address,
    http_address,
    model_states,
    running_server,
    write_python_model,
)
from tritonclient.utils import InferenceServerException

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient
from ge_python_backend.errors import UserError
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.shm import (
    MIB,
    SHM_DEFAULT_CAP_BYTES,
    SHM_MIN_BYTES,
    ModelShm,
    shm_limit_bytes,
    shm_sizes_for_repository,
)
from ge_python_backend.runtime import placement
from ge_python_backend.server import (
    ServerError,
    TritonServer,
    bundled_server_root,
    find_server,
    prepare_backend_directory,
)

ADD_CONFIG = """\
name: "add_one"
backend: "python"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }
dynamic_batching { preferred_batch_size: [ 1, 8 ] max_queue_delay_microseconds: 100 }
model_warmup {
  name: "w8" batch_size: 8
  inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 4 ] random_data: true } }
}
"""

ADD_MODEL = """\
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import ge_python_backend  # the launching venv's packages are importable

        with open(os.environ["PROBE_FILE"], "w") as handle:
            json.dump({"prefix": sys.prefix, "version": sys.version,
                       "package": ge_python_backend.__file__}, handle)

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            y = pb_utils.Tensor("Y", (x + 1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([y]))
        return responses
"""

BROKEN_CONFIG = """\
name: "broken"
backend: "python"
max_batch_size: 8
input { name: "X" data_type: TYPE_FP32 dims: [ 4 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }
"""

BROKEN_MODEL = """\
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("deliberately broken model")

    def execute(self, requests):
        return []
"""


def _config(repo: Path, name: str, text: str) -> None:
    (repo / name).mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text)


# --- shared-memory sizing -------------------------------------------------------------------


def test_shm_sizes_default_to_tritons_floor_for_small_models(tmp_path: Path) -> None:
    _config(tmp_path, "small", ADD_CONFIG)
    sizes = shm_sizes_for_repository(tmp_path)
    assert (sizes.default_bytes, sizes.growth_bytes) == (MIB, MIB)
    assert sizes.models == (ModelShm("add_one", 1, MIB),) and sizes.growing() == []
    assert "no stub needs more" in sizes.summary()


def _image_model(name: str, rows: int, instances: int) -> str:
    return (
        f'name: "{name}" max_batch_size: {rows} '
        'input { name: "x" data_type: TYPE_FP32 dims: [3, 224, 224] } '
        'output { name: "y" data_type: TYPE_FP16 dims: [1000] } '
        f"instance_group {{ count: {instances} kind: KIND_CPU }}"
    )


def test_shm_default_is_the_median_stubs_need_and_the_large_grow(tmp_path: Path) -> None:
    # One row is 3x224x224 FP32 in + 1000 FP16 out = 604,112 bytes; a need is two exchanges.
    row = 3 * 224 * 224 * 4 + 1000 * 2
    _config(tmp_path, "big", _image_model("big", 32, 1))  # 2 x 19,331,584 B: 37 MiB
    _config(tmp_path, "mid", _image_model("mid", 4, 2))  # 2 x 2,416,448 B: 5 MiB
    _config(tmp_path, "small", ADD_CONFIG)  # 1 MiB
    _config(tmp_path, "unparsable", "max_batch_size: [")
    sizes = shm_sizes_for_repository(tmp_path)
    needs = {model.name: (model.instances, model.need_bytes) for model in sizes.models}
    assert needs == {"big": (1, 37 * MIB), "mid": (2, 5 * MIB), "add_one": (1, MIB)}
    assert 2 * 32 * row <= 37 * MIB and 2 * 4 * row <= 5 * MIB
    # Stubs' needs 1, 5, 5, 37 MiB: the median stub (the smallest need half of them fit) is mid's.
    assert (sizes.default_bytes, sizes.growth_bytes) == (5 * MIB, MIB)
    assert [model.name for model in sizes.growing()] == ["big"]
    # Each stub its region plus a growth step, 4 auto-complete stubs at the default, headroom.
    regions = (5 + 1) + 2 * (5 + 1) + (37 + 1)
    assert shm_limit_bytes(sizes) == max((regions + 4 * 5 + 64) * MIB, SHM_MIN_BYTES)
    summary = sizes.summary()
    assert "each of 4 stubs starts with a 5 MiB region" in summary
    assert "1 stub grows: big to about 37 MiB each" in summary
    assert f"/dev/shm needs about {shm_limit_bytes(sizes) // MIB} MiB" in summary
    # With a third instance the large model's stubs are the median: nothing grows.
    _config(tmp_path, "big3", _image_model("big3", 32, 3))
    sizes = shm_sizes_for_repository(tmp_path)
    assert sizes.default_bytes == 37 * MIB and sizes.growing() == []


def test_fifty_models_card_is_sized_for_its_median_stub(tmp_path: Path) -> None:
    """`make bench`'s fifty (tests/fifty_models.py: batch 8, 2 instances each): 20 BERT-base
    stubs need 7 MiB, 40 ResNet-50 10 MiB, 40 YOLOv8s 119 MiB (2 x 61,900,800 B)."""
    kinds = {
        "resnet50": (20, [("input", "FP32", [3, 224, 224])], [("logits", "FP32", [1000])]),
        "yolov8s": (20, [("images", "FP32", [3, 640, 640])], [("output0", "FP32", [84, 8400])]),
        "bert": (
            10,
            [(name, "INT64", [128]) for name in ("ids", "mask", "types")],
            [("hidden", "FP32", [128, 768]), ("pooled", "FP32", [768])],
        ),
    }
    for kind, (count, inputs, outputs) in kinds.items():
        tensors = [("input", *tensor) for tensor in inputs] + [
            ("output", *tensor) for tensor in outputs
        ]
        text = "max_batch_size: 8 instance_group { count: 2 } " + " ".join(
            f'{side} {{ name: "{name}" data_type: TYPE_{dtype} dims: {dims} }}'
            for side, name, dtype, dims in tensors
        )
        for number in range(count):
            _config(tmp_path, f"{kind}_{number:02d}", f'name: "{kind}_{number:02d}" {text}')
    sizes = shm_sizes_for_repository(tmp_path)
    needs = {model.name.split("_")[0]: model.need_bytes // MIB for model in sizes.models}
    assert needs == {"resnet50": 10, "yolov8s": 119, "bert": 7}
    assert sizes.default_bytes == 10 * MIB
    assert len(sizes.growing()) == 20
    regions = sum(model.instances * sizes.region_bytes(model) for model in sizes.models)
    assert regions == (60 * 10 + 40 * 119) * MIB  # 5.2 GiB; 100 x 119 MiB before
    assert shm_limit_bytes(sizes) == (regions + 100 * MIB + 4 * 10 * MIB + 64 * MIB)


def test_shm_sizes_use_warmup_dims_for_dynamic_axes_and_are_capped(tmp_path: Path) -> None:
    _config(
        tmp_path,
        "hw",
        'max_batch_size: 0 input { name: "x" data_type: TYPE_FP32 dims: [1, 3, -1, -1] } '
        'output { name: "y" data_type: TYPE_FP32 dims: [1, 8] } '
        'model_warmup { batch_size: 1 inputs { key: "x" value { data_type: TYPE_FP32 '
        "dims: [1, 3, 512, 512] random_data: true } } }",
    )
    exchange = 3 * 512 * 512 * 4 + 8 * 4
    assert shm_sizes_for_repository(tmp_path).default_bytes == -(-2 * exchange // MIB) * MIB
    _config(
        tmp_path,
        "huge",
        'max_batch_size: 64 input { name: "x" data_type: TYPE_FP32 dims: [3, 1024, 1024] } '
        "instance_group { count: 2 }",
    )
    sizes = shm_sizes_for_repository(tmp_path)
    assert (sizes.default_bytes, sizes.growth_bytes) == (SHM_DEFAULT_CAP_BYTES, MIB)
    assert [model.name for model in sizes.growing()] == ["huge"]


# --- locating the server and building the backend directory --------------------------------


def test_backend_directory_is_built_once_and_rebuilt_when_incomplete(tmp_path: Path) -> None:
    root = bundled_server_root()
    backend = prepare_backend_directory(root, tmp_path)
    stub = backend / "python" / "triton_python_backend_stub"
    assert (backend / "python" / "libtriton_python.so").is_file()
    assert os.access(stub, os.X_OK)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    source = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    assert stub.read_bytes() == source.read_bytes()
    mtime = stub.stat().st_mtime_ns
    assert prepare_backend_directory(root, tmp_path) == backend  # reused
    assert stub.stat().st_mtime_ns == mtime
    stub.write_bytes(b"truncated")
    assert prepare_backend_directory(root, tmp_path) == backend  # rebuilt in place
    assert stub.read_bytes() == source.read_bytes()
    leftovers = [path.name for path in backend.parent.iterdir() if path.name.startswith(".")]
    assert leftovers == []


def test_find_server_refuses_missing_user_binary(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found"):
        find_server(tmp_path / "no-such-tritonserver")
    with pytest.raises(UserError, match="does not exist"):
        find_server(backend_directory=tmp_path / "missing")


def test_server_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a directory"):
        TritonServer(tmp_path / "missing")
    with pytest.raises(UserError, match="explicit"):
        TritonServer(tmp_path, load_models=["a"])
    with pytest.raises(UserError, match="model control mode"):
        TritonServer(tmp_path, model_control_mode="poll")


# --- the real server -------------------------------------------------------------------------


@pytest.fixture()
def repository(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    write_python_model(repo, "add_one", ADD_CONFIG, ADD_MODEL)
    write_python_model(repo, "broken", BROKEN_CONFIG, BROKEN_MODEL)
    return repo


@pytest.mark.e2e
def test_real_server_serves_while_a_broken_model_stays_unavailable(
    repository: Path, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.json"
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    with running_server(
        repository, env={"PROBE_FILE": str(probe)}, log_path=tmp_path / "triton.log"
    ) as server:
        ready = urllib.request.urlopen(server.urls.http + "/v2/health/ready", timeout=5)
        assert ready.status == 200
        states = model_states(server)
        assert states["add_one"][0] == "READY"
        assert states["broken"][0] == "UNAVAILABLE"
        assert "deliberately broken model" in states["broken"][1]

        with TritonClient(http_address(server), "http") as http:
            request = http.prepare({"X": (data, "FP32")}, None)
            np.testing.assert_array_equal(http.send("add_one", request).as_numpy("Y"), data + 1)
            with pytest.raises(InferenceServerException):
                http.send("broken", request)

        with TritonClient(grpc_address(server), "grpc") as grpc:
            answer = grpc.send("add_one", grpc.prepare({"X": (data, "FP32")}, None))
            np.testing.assert_array_equal(answer.as_numpy("Y"), data + 1)

        metrics = urllib.request.urlopen(server.urls.metrics, timeout=5).read().decode()
        assert 'nv_inference_request_success{model="add_one"' in metrics
        assert server.urls.http.startswith("http://127.0.0.1:")

    # model.py ran on this interpreter, in this virtual environment.
    seen = json.loads(probe.read_text())
    assert seen["prefix"] == sys.prefix
    assert seen["version"] == sys.version
    import ge_python_backend

    assert seen["package"] == ge_python_backend.__file__
    assert server.poll() == 0  # stopped cleanly by SIGINT
    with pytest.raises(OSError):
        urllib.request.urlopen(server.urls.http + "/v2/health/live", timeout=2)


@pytest.mark.e2e
def test_explicit_mode_loads_only_the_named_model(repository: Path, tmp_path: Path) -> None:
    with running_server(
        repository,
        env={"PROBE_FILE": str(tmp_path / "probe.json")},
        log_path=tmp_path / "triton.log",
        model_control_mode="explicit",
        load_models=["add_one"],
    ) as server:
        states = model_states(server)
        assert states["add_one"][0] == "READY"
        assert states["broken"][0] != "READY"


def http_port(server: TritonServer) -> int:
    return int(http_address(server).rsplit(":", 1)[1])


def this_process() -> str:
    """How the server's messages name this process."""
    return f"pid {os.getpid()} ({Path('/proc/self/comm').read_text().strip()})"


def test_a_port_in_use_is_refused_before_the_server_starts(
    repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = TritonServer(repository, grpc_port=port, log_path=tmp_path / "triton.log")
        holder = this_process()
        with pytest.raises(
            UserError,
            match=rf"gRPC port {port} on 127.0.0.1 is already in use "
            rf"by {re.escape(holder)}; stop that server or choose another port",
        ):
            server.start()
        assert server.pid is None
        assert main(["serve", str(repository), "--http-port", str(port)]) == 2
        assert f"HTTP port {port} on 127.0.0.1 is already in use by pid" in capsys.readouterr().err


@pytest.mark.e2e
def test_wait_ready_reports_a_server_that_exits(repository: Path, tmp_path: Path) -> None:
    server = TritonServer(repository, log_path=tmp_path / "triton.log")
    server.start()
    try:
        with socket.socket() as taken:  # taken after the check, before Triton binds it
            taken.bind(("127.0.0.1", http_port(server)))
            taken.listen()
            with pytest.raises(ServerError, match="exited with code") as failure:
                server.wait_ready(60)
    finally:
        server.stop()
    assert "HTTP" in str(failure.value)  # the log tail names what failed


class _Ready(http.server.BaseHTTPRequestHandler):
    """Another server's `/v2/health/ready`: 200."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.e2e
def test_wait_ready_refuses_another_server_answering_on_its_port(
    repository: Path, tmp_path: Path
) -> None:
    server = TritonServer(repository, log_path=tmp_path / "triton.log")
    server.start()
    other = http.server.ThreadingHTTPServer(("127.0.0.1", http_port(server)), _Ready)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ServerError) as failure:
            server.wait_ready(60)
    finally:
        other.shutdown()
        other.server_close()
        server.stop()
    assert str(failure.value).startswith(
        f"{this_process()} answers on HTTP port {http_port(server)}, not this "
        f"tritonserver (pid {server.pid})"
    )


@pytest.mark.e2e
def test_serve_exits_non_zero_when_no_model_is_available(
    repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.rmtree(repository / "add_one")  # only the broken model is left
    ports = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    log = ["--log-file", str(tmp_path / "serve.log")]
    assert main(["serve", str(repository), *ports, *log]) == 1
    printed = capsys.readouterr()
    assert "Triton is ready" not in printed.out
    assert printed.err.startswith("ge-python-model serve: no model is available (log ")
    assert "  broken (version 1): UNAVAILABLE: " in printed.err
    assert "deliberately broken model" in printed.err


def start_serve(
    repository: Path, tmp_path: Path, *options: str
) -> tuple[subprocess.Popen[str], list[str]]:
    """`ge-python-model serve` in a child process, read up to its "Press Ctrl-C" line."""
    env = dict(os.environ, PROBE_FILE=str(tmp_path / "probe.json"))
    command = [sys.executable, "-m", "ge_python_backend.cli", "serve", str(repository)]
    command += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    command += ["--watch-metrics-port", "0"]
    command += ["--log-file", str(tmp_path / "serve.log"), *options]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (lines and lines[-1].startswith("Press Ctrl-C")):
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
    if not lines or not lines[-1].startswith("Press Ctrl-C"):
        process.kill()
        _, stderr = process.communicate()
        pytest.fail("serve did not become ready:\n" + "".join(lines) + stderr)
    return process, lines


@pytest.mark.e2e
def test_serve_and_infer_commands(repository: Path, tmp_path: Path) -> None:
    process, lines = start_serve(repository, tmp_path)
    try:
        text = "".join(lines)
        assert "add_one (version 1): READY" in text
        assert "broken (version 1): UNAVAILABLE: " in text
        assert "  Python backend shared memory: each of 2 stubs starts with a 1 MiB region" in text
        http_url = next(line.split()[1] for line in lines if line.strip().startswith("HTTP"))
        grpc_url = next(line.split()[1] for line in lines if line.strip().startswith("gRPC"))
        for protocol, url in (("http", http_url), ("grpc", grpc_url)):
            code = main(["infer", "--url", url, "--protocol", protocol, "--model", "add_one"])
            assert code == 0
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "Triton stopped (exit code 0)" in stderr


@pytest.mark.e2e
def test_serve_exits_non_zero_when_the_server_dies(repository: Path, tmp_path: Path) -> None:
    """Without restarts (tests/test_watch.py has serve restarting it)."""
    process, lines = start_serve(repository, tmp_path, "--max-restarts", "0")
    pid = int(lines[0].split("(pid ")[1].split(")")[0])
    os.kill(pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1
    assert "tritonserver killed by SIGKILL (not restarted: --max-restarts 0)" in stderr
    assert process_group_members(pid) == []  # its orphaned stub processes were ended too


def process_group_members(pgid: int) -> list[int]:
    """Pids of live processes in process group `pgid` (from /proc)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


@pytest.mark.e2e
def test_infer_command_output(
    repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    array = tmp_path / "x.npy"
    np.save(array, np.full((2, 4), 0.5, dtype=np.float64))  # cast to FP32 (same kind)
    with running_server(
        repository, env={"PROBE_FILE": str(tmp_path / "p.json")}, log_path=tmp_path / "t.log"
    ) as server:
        url = http_address(server)
        assert main(["infer", "--url", url, "--model", "add_one", "--input", f"X={array}"]) == 0
        out = capsys.readouterr().out
        assert "Y  FP32  [2, 4]  min 1.5  max 1.5  mean 1.5  first [1.5, 1.5, 1.5" in out

        assert main(["infer", "--url", url, "--model", "add_one", "--shape", "X:2,5"]) == 2
        err = capsys.readouterr().err
        assert "--shape for 'X' is [2, 5] but the model takes [-1, 4]" in err
        assert "Traceback" not in err
        assert main(["infer", "--url", url, "--model", "nope"]) == 2
        assert "nope" in capsys.readouterr().err


@pytest.mark.e2e
def test_scaffolded_model_serves_from_its_vendored_runtime(
    om_dynamic_batch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))  # a device host of this test's own
    repo = tmp_path / "models"
    result = scaffold(om_dynamic_batch, repo, name="mlp", runtime="emulator", vendor_runtime=True)
    assert result.vendor_dir is not None
    hosted = scaffold(
        om_dynamic_batch,
        repo,
        name="hosted",
        runtime="emulator",
        vendor_runtime=True,
        device_host=True,
    )
    assert hosted.vendor_dir is not None
    marker = tmp_path / "vendored.txt"
    vendored_init = result.vendor_dir / "ge_python_backend" / "__init__.py"
    with vendored_init.open("a") as handle:  # prove the stub imports this copy, not the venv's
        handle.write(
            "\nimport os as _os\nopen(_os.environ['VENDOR_MARKER'], 'w').write(__file__)\n"
        )
    with running_server(
        repo, env={"VENDOR_MARKER": str(marker)}, log_path=tmp_path / "triton.log"
    ) as server:
        assert model_states(server)["mlp"][0] == "READY"
        with TritonClient(http_address(server), "http") as client:
            response = client.infer("mlp", {"x": (np.ones((5, 16), np.float32), "FP32")})
            assert response["y"].shape == (5, 8)
            assert response["z"].shape == (5, 1)
            # the device host its stub started runs from that model's vendored copy
            served = client.infer("hosted", {"x": (np.ones((5, 16), np.float32), "FP32")})
            np.testing.assert_array_equal(served["y"], response["y"])
        # one process holds it (its session's record and its weights')
        (pid,) = {h.pid for h in placement.holders(0) if h.label == "hosted"}
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert command[1:3] == [b"-m", b"ge_python_backend.devicehost"], command
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        (path,) = [v for v in environ if v.startswith(b"PYTHONPATH=")]
        assert path.split(b"=", 1)[1].split(b":")[0] == str(hosted.vendor_dir).encode()
    assert marker.read_text() == str(vendored_init)
