"""The watcher (`ge-python-model watch`) and `serve`'s own healing, on the real tritonserver.

Triton 2.51 keeps a model READY after its stub process died, failing every request; the watcher
reloads it. Two requests kill Triton's processes (docs/guides/reliability/triton.md): a gRPC request
whose dims overflow the int64 byte size kills the stub of an HW-gear model (the watcher heals it)
and an HTTP JSON request declaring a 2^31-row shape aborts tritonserver with `std::bad_alloc`
(`serve` restarts it). `kill -9` stands in for any other death.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from e2e_helpers import ServeProcess, free_port, running_server
from reliability_helpers import install_faults, stub_processes, wait_for_exit
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.client import TritonClient, typed
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer, exit_description
from ge_python_backend.tools.probe import ProbeResult
from ge_python_backend.tools.watch import (
    DRAIN_TIMEOUT_S,
    Watcher,
    WatchMetrics,
    configured_instances,
    dead_instances,
    live_stubs,
    needs_reload,
    serve_metrics,
)

HEAL_DEADLINE_S = 10.0
IMAGE = np.zeros((1, 3, 16, 16), np.float32)
# dims [1, 3, 16, 2^62 + 16]: 4 bytes times that many elements overflows int64 to 3,072, the
# bytes sent, so Triton's size check passes and the stub is handed the shape.
OVERFLOW_DIMS = [1, 3, 16, 2**62 + 16]
# 202 bytes: a 2^31-row FP32 input Triton tries to allocate before checking anything.
BAD_ALLOC_BODY = json.dumps(
    {
        "inputs": [
            {"name": "image", "shape": [2147483648, 3, 32, 32], "datatype": "FP32", "data": [0]}
        ]
    }
).encode()


def metric(text: str, name: str, model: str) -> int:
    """The value of counter `name{model="<model>"}` in Prometheus text (0 when absent)."""
    found = re.search(rf'^{name}{{model="{re.escape(model)}"}} (\d+)$', text, re.MULTILINE)
    return int(found.group(1)) if found else 0


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


def answers(address: str) -> bool:
    """Whether model conv answers one request now."""
    try:
        with TritonClient(address, "http", timeout_s=5) as client:
            return client.infer("conv", typed({"image": IMAGE}))["features"].shape[0] == 1
    except Exception:
        return False


def seconds_until_it_answers(address: str, deadline: float = HEAL_DEADLINE_S) -> float:
    start = time.monotonic()
    while not answers(address):
        assert time.monotonic() - start < deadline, f"model conv did not answer in {deadline} s"
        time.sleep(0.2)
    return time.monotonic() - start


def live_stub(server: TritonServer) -> psutil.Process:
    """The one running stub process (the one model's; a killed one stays a zombie of Triton)."""
    (stub,) = [p for p in stub_processes(server) if p.status() != psutil.STATUS_ZOMBIE]
    return stub


def send_int64_overflow(grpc_address: str) -> str:
    """The gRPC request of OVERFLOW_DIMS with 3,072 bytes; the error it got."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name="conv")
    tensor = request.inputs.add(name="image", datatype="FP32")
    tensor.shape.extend(OVERFLOW_DIMS)
    request.raw_input_contents.append(bytes(3072))
    with grpc.insecure_channel(grpc_address) as channel:
        try:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=10)
        except grpc.RpcError as exc:
            return str(exc.details())
    return ""


def send_bad_alloc(http_address: str) -> None:
    request = urllib.request.Request(
        f"http://{http_address}/v2/models/conv/infer", data=BAD_ALLOC_BODY, method="POST"
    )
    with contextlib.suppress(OSError):  # the server dies without an answer
        urllib.request.urlopen(request, timeout=10).close()


# --- without a server ---------------------------------------------------------------------


def test_the_metrics_endpoint_serves_the_counters_by_model() -> None:
    metrics = WatchMetrics()
    for _ in range(3):
        metrics.count("ge_watch_probes_total", "conv")
    metrics.count("ge_watch_failures_total", 'we"ird')
    endpoint = serve_metrics(metrics, 0, host="127.0.0.1")
    try:
        text = scrape(endpoint.server_address[1])
    finally:
        endpoint.shutdown()
        endpoint.server_close()
    assert "# TYPE ge_watch_reloads_total counter" in text
    assert metric(text, "ge_watch_probes_total", "conv") == 3
    assert 'ge_watch_failures_total{model="we\\"ird"} 1' in text
    assert metric(text, "ge_watch_reloads_total", "conv") == 0


def test_only_a_dead_stub_or_a_timeout_calls_for_a_reload() -> None:
    dead = "inference failed: Stub process 'conv_0_0' is not healthy."
    assert needs_reload(ProbeResult(False, dead, 0.01))
    assert needs_reload(ProbeResult(False, "no answer within the 3 s timeout", 3.0, True))
    assert not needs_reload(ProbeResult(False, "malformed answer: output 'y' is missing", 0.1))


def test_the_stub_processes_of_a_server_are_read_from_proc(tmp_path: Path) -> None:
    """A shell named as the stub, started by this process (standing in for tritonserver) with a
    stub's command line (`model.py` a script it runs): listed while it runs, no longer once
    killed (a zombie)."""
    stub = tmp_path / "triton_python_backend_stub"
    shutil.copy("/bin/sh", stub)
    script = tmp_path / "mlp" / "2" / "model.py"
    script.parent.mkdir(parents=True)
    script.write_text("sleep 30\n")
    argv = [str(stub), str(script), "region", "1", "1", "1", "dir", "3", "mlp_0_1", "DEFAULT"]
    process = subprocess.Popen(argv)
    try:
        time.sleep(0.2)
        (found,) = live_stubs(os.getpid())
        assert (found.pid, found.model, found.version, found.instance) == (
            process.pid,
            "mlp",
            "2",
            "mlp_0_1",
        )
        assert dead_instances("mlp", 2, [found]) == 1
        assert dead_instances("mlp", 1, [found, found]) == 0
        process.kill()
        time.sleep(0.2)  # not waited for: a zombie
        assert live_stubs(os.getpid()) == []
    finally:
        process.kill()
        process.wait()


def test_configured_instances_count_each_group_per_gpu() -> None:
    config = ModelConfig()
    config.instance_group.add(count=2)
    config.instance_group.add(count=3, gpus=[0, 1])
    assert configured_instances(config) == 8


def test_bad_watcher_settings_are_refused() -> None:
    from ge_python_backend.errors import UserError

    for settings in ({"interval": 0}, {"timeout": -1}, {"retries": 0}):
        with pytest.raises(UserError):
            Watcher("127.0.0.1:8000", **settings)  # type: ignore[arg-type]


def test_failed_reloads_are_retried_with_backoff_then_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Reloads against a port nothing listens on fail: 2 attempts, 1 s apart, then it gives up."""
    watcher = Watcher(f"127.0.0.1:{free_port()}", retries=2)
    dead = ProbeResult(False, "Stub process 'conv_0_0' is not healthy.", 0.01)
    start = time.monotonic()
    with caplog.at_level("INFO", logger="ge_python_backend.tools.watch"):
        assert not watcher.heal("conv", dead)
    assert time.monotonic() - start >= 1.0  # it waited the backoff between the two
    assert watcher.metrics.value("ge_watch_reloads_total", "conv") == 2
    assert "retrying the reload of 'conv' in 1 s" in caplog.text
    assert "still fails after 2 reloads; giving up" in caplog.text


def test_exit_descriptions_name_the_signal() -> None:
    assert exit_description(-9) == "killed by SIGKILL"
    assert exit_description(-6) == "killed by SIGABRT"
    assert exit_description(1) == "exited with code 1"


# --- `watch` beside a server ----------------------------------------------------------------


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, om_hw: Path) -> Path:
    models = tmp_path_factory.mktemp("watch") / "models"
    scaffold(om_hw, models, name="conv", runtime="emulator")
    return models


@contextlib.contextmanager
def watching(url: str, log: Path, *options: str, model: str = "conv") -> Iterator[int]:
    """`ge-python-model watch --url URL` as a process (its stderr to `log`); its metrics port."""
    port = free_port()
    command = [sys.executable, "-m", "ge_python_backend.cli", "watch", "--url", url]
    command += ["--interval", "0.5", "--timeout", "5", "--metrics-port", str(port), *options]
    with open(log, "wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                if metric(scrape(port), "ge_watch_probes_total", model):
                    break
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the watcher did not probe in time"
            time.sleep(0.2)
        yield port
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(10)


@pytest.mark.e2e
def test_watch_heals_a_killed_stub_and_the_int64_overflow_request(
    repository: Path, tmp_path: Path
) -> None:
    with running_server(
        repository,
        log_path=tmp_path / "triton.log",
        model_control_mode="explicit",
        load_models=["conv"],
    ) as server:
        address = server.urls.http.removeprefix("http://")
        log = tmp_path / "watch.log"
        with watching(address, log) as port:
            stub = live_stub(server)
            stub.kill()
            wait_for_exit(stub.pid, 10)
            healed = seconds_until_it_answers(address)
            assert live_stub(server).pid != stub.pid

            stub = live_stub(server)
            error = send_int64_overflow(server.urls.grpc)
            wait_for_exit(stub.pid, 10)  # the request killed the stub
            healed_overflow = seconds_until_it_answers(address)
            text = scrape(port)
        print(
            f"\nwatch: killed stub healed in {healed:.1f} s; the overflow request got "
            f"{error!r}, healed in {healed_overflow:.1f} s"
        )
    assert metric(text, "ge_watch_reloads_total", "conv") >= 2
    assert metric(text, "ge_watch_failures_total", "conv") >= 2
    logged = log.read_text()
    assert "reloading model 'conv' (attempt 1 of 3): its stub process is dead" in logged
    assert "healed by reload" in logged


@pytest.mark.e2e
def test_watch_reports_what_it_cannot_reload_outside_explicit_mode(
    repository: Path, tmp_path: Path
) -> None:
    with running_server(repository, log_path=tmp_path / "triton.log") as server:
        address = server.urls.http.removeprefix("http://")
        log = tmp_path / "watch.log"
        with watching(address, log) as port:
            stub = live_stub(server)
            stub.kill()
            wait_for_exit(stub.pid, 10)
            deadline = time.monotonic() + HEAL_DEADLINE_S
            while "not in explicit model-control mode" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            text = scrape(port)
        assert not answers(address)  # nothing reloaded it
    assert metric(text, "ge_watch_failures_total", "conv") >= 1


@pytest.mark.e2e
def test_watch_reloads_a_model_whose_inference_hangs(
    om_dynamic_batch: Path, tmp_path: Path
) -> None:
    """The stub's 2nd execution never completes (the watcher's 2nd probe; no warmup): reloaded,
    the new stub answers the probe."""
    models = tmp_path / "models"
    scaffold(om_dynamic_batch, models, name="mlp", runtime="emulator", warmup=False)
    install_faults(models / "mlp", "mdl.execute_async:hang:2")
    with running_server(
        models,
        log_path=tmp_path / "triton.log",
        model_control_mode="explicit",
        load_models=["mlp"],
        exit_timeout=1,
    ) as server:
        address = server.urls.http.removeprefix("http://")
        log = tmp_path / "watch.log"
        with watching(address, log, "--timeout", "2", model="mlp") as port:
            deadline = time.monotonic() + 30
            while "healed by reload" not in log.read_text():
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
            text = scrape(port)
    logged = log.read_text()
    assert "within the 2 s timeout" in logged
    assert "reloading model 'mlp' (attempt 1 of 3): its probe timed out" in logged
    assert metric(text, "ge_watch_reloads_total", "mlp") >= 1  # each new stub hangs again


# --- `serve` ------------------------------------------------------------------------------


class Serve(ServeProcess):
    """`ge-python-model serve` with its watcher on the emulator, its output collected."""

    def __init__(self, repository: Path, log: Path, *options: str) -> None:
        self.http, self.grpc = free_port(), free_port()
        arguments = ["--emulator", "--http-port", str(self.http), "--grpc-port", str(self.grpc)]
        arguments += ["--metrics-port", "0", "--watch-metrics-port", "0", "--log-file", str(log)]
        arguments += ["--watch-interval", "0.5", "--watch-timeout", "5", *options]
        super().__init__(repository, *arguments)


def shm_regions_of(server: psutil.Process) -> set[str]:
    """The /dev/shm files of the server's Python backend (named by its region prefix)."""
    (flag,) = [arg for arg in server.cmdline() if "shm-region-prefix-name=" in arg]
    prefix = flag.rpartition("=")[2]
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)}


@pytest.mark.e2e
def test_serve_heals_a_dead_stub_and_restarts_a_killed_or_aborted_server(
    repository: Path, tmp_path: Path
) -> None:
    serve = Serve(repository, tmp_path / "triton.log")
    address = f"127.0.0.1:{serve.http}"
    try:
        serve.wait_for("Press Ctrl-C")
        assert "conv (version 1): READY" in serve.output
        assert "watcher  every 0.5 s" in serve.output

        # The watcher first: the restarts below also end the dead instance Triton then keeps.
        (stub,) = serve.tritonserver().children(recursive=True)
        stub.kill()
        wait_for_exit(stub.pid, 10)
        healed = seconds_until_it_answers(address)

        server = serve.tritonserver()
        regions = shm_regions_of(server)
        assert regions, "the Python backend made no shared-memory region"
        server.kill()
        serve.wait_for("Triton restarted.")
        assert "tritonserver killed by SIGKILL; restarting it (restart 1 of at most 3" in (
            serve.output
        )
        assert not regions & set(os.listdir("/dev/shm")), "the dead server's regions remain"
        restarted = seconds_until_it_answers(address)

        send_bad_alloc(address)
        serve.wait_for("Triton restarted.", count=2)
        assert "tritonserver killed by SIGABRT; restarting it (restart 2 of" in serve.output
        seconds_until_it_answers(address)
        print(f"\nserve: stub healed in {healed:.1f} s, answers {restarted:.1f} s after restart")
    finally:
        serve.process.send_signal(signal.SIGINT)
        serve.process.wait(60)
    assert serve.process.returncode == 0, serve.output


@pytest.mark.e2e
def test_serve_restarts_a_hung_server_and_ctrl_c_kills_one(
    repository: Path, tmp_path: Path
) -> None:
    """A stopped tritonserver (SIGSTOP) is alive and answers nothing, as a corrupted one."""
    serve = Serve(repository, tmp_path / "triton.log", "--hung-timeout", "3")
    address = f"127.0.0.1:{serve.http}"
    try:
        serve.wait_for("Press Ctrl-C")
        serve.tritonserver().suspend()
        hung = time.monotonic()
        serve.wait_for("Triton restarted.")
        restarted = time.monotonic() - hung
        assert "is alive but answered no health check for 3 s; killing it" in serve.output
        assert "tritonserver killed by SIGKILL; restarting it (restart 1 of" in serve.output
        seconds_until_it_answers(address)

        serve.tritonserver().suspend()
        serve.process.send_signal(signal.SIGINT)
        interrupted = time.monotonic()
        serve.process.wait(20)
        stopped = time.monotonic() - interrupted
    finally:
        serve.process.send_signal(signal.SIGINT)
        serve.process.wait(60)
    print(f"\nserve: hung server restarted {restarted:.1f} s after it hung; Ctrl-C {stopped:.1f} s")
    assert "Triton answers no health check: killing it" in serve.output
    assert serve.process.returncode == 1
    assert stopped < 10  # not the 30 s exit timeout


# --- every instance -----------------------------------------------------------------------

WATCH_INTERVAL_S = 1.0


@pytest.mark.e2e
def test_a_killed_instance_of_a_busy_model_is_healed_within_one_interval(
    om_dynamic_batch: Path, tmp_path: Path
) -> None:
    """Two instances under load: the probe lands on the live one, the instance check does not
    miss the dead one; a merely busy model is never reloaded."""
    models = tmp_path / "models"
    scaffold(om_dynamic_batch, models, name="pair", runtime="emulator", instances=2, warmup=False)
    with running_server(
        models,
        env={"GE_EMULATOR_TIMING": "execute_us=20000"},  # busy: requests queue behind others
        log_path=tmp_path / "triton.log",
        model_control_mode="explicit",
        load_models=["pair"],
    ) as server:
        address = server.urls.http.removeprefix("http://")
        x = np.ones((1, 16), np.float32)
        stop = threading.Event()
        outcomes: list[tuple[float, bool]] = []
        errors: list[str] = []

        def send() -> None:
            with TritonClient(server.urls.grpc, "grpc", timeout_s=10) as client:
                request = client.prepare(typed({"x": x}), None)
                while not stop.is_set():
                    sent = time.monotonic()
                    try:
                        client.send("pair", request)
                        outcomes.append((sent, True))
                    except Exception as exc:  # the dead instance's, then the reload's
                        errors.append(f"{sent - killed:.1f} s: {exc}")
                        outcomes.append((sent, False))
                        stop.wait(0.01)

        killed = killed_again = math.inf
        watcher = Watcher(address, interval=WATCH_INTERVAL_S, timeout=5.0)
        threads = [threading.Thread(target=send) for _ in range(4)]
        threads.append(threading.Thread(target=watcher.run))
        for thread in threads:
            thread.start()
        try:
            time.sleep(3 * WATCH_INTERVAL_S)  # busy, every instance alive: nothing to heal
            assert watcher.metrics.value("ge_watch_reloads_total", "pair") == 0
            old = {p.pid for p in stub_processes(server)}
            stub_processes(server)[0].kill()
            killed = time.monotonic()
            while watcher.metrics.value("ge_watch_reloads_total", "pair") == 0:
                assert time.monotonic() - killed < 3 * WATCH_INTERVAL_S, "no reload"
                time.sleep(0.05)
            noticed = time.monotonic() - killed
            while len(new := new_instances(server, old)) < 2 or not answers_pair(address):
                assert time.monotonic() - killed < 30, "not healed"
                time.sleep(0.05)
            healed = time.monotonic() - killed
            time.sleep(2 * WATCH_INTERVAL_S)  # answering on both new instances
            # Again: an old stub the unload left behind must not stand in for a new dead one.
            second = {p.pid for p in stub_processes(server)}
            next(p for p in stub_processes(server) if p.pid not in old).kill()
            killed_again = time.monotonic()
            while watcher.metrics.value("ge_watch_reloads_total", "pair") == 1:
                assert time.monotonic() - killed_again < 3 * WATCH_INTERVAL_S, "no 2nd reload"
                time.sleep(0.05)
            noticed_again = time.monotonic() - killed_again
            while len(new_instances(server, second)) < 2 or not answers_pair(address):
                assert time.monotonic() - killed_again < 30, "not healed again"
                time.sleep(0.05)
        finally:
            stop.set()
            watcher.stop.set()
            for thread in threads:
                thread.join()
    after_kill = [ok for sent, ok in outcomes if sent > killed]
    # Until 1 s before the second kill: a request in flight on a killed stub waits its deadline.
    after_heal = [ok for sent, ok in outcomes if killed + healed < sent < killed_again - 1.0]
    print(
        f"\nwatch, 2 instances under load: killed stub noticed in {noticed:.2f} s (interval "
        f"{WATCH_INTERVAL_S:g} s), answering on new instances {healed:.1f} s after the kill; "
        f"{after_kill.count(False)} of {len(after_kill)} requests sent after the kill failed, "
        f"0 of {len(after_heal)} after the heal; a new stub killed: noticed in "
        f"{noticed_again:.2f} s"
    )
    # The round's probe first: Triton fails one that lands on the dead stub after about 1 s.
    assert noticed <= WATCH_INTERVAL_S + 2.0
    assert noticed_again <= WATCH_INTERVAL_S + 2.0
    assert healed <= WATCH_INTERVAL_S + DRAIN_TIMEOUT_S + 10.0  # + loading 2 instances
    assert new == ["pair_0_0", "pair_0_1"]
    assert after_heal and all(after_heal), errors[-3:]
    assert watcher.metrics.value("ge_watch_reloads_total", "pair") == 2


def new_instances(server: TritonServer, old: set[int]) -> list[str]:
    """The instance names of the live stub processes not in `old`."""
    names = []
    for stub in stub_processes(server):
        with contextlib.suppress(psutil.Error):  # a zombie, or gone meanwhile
            argv = stub.cmdline()
            if stub.pid not in old and len(argv) > 8 and argv[8] != "pair":  # not autocomplete
                names.append(argv[8])
    return sorted(names)


def answers_pair(address: str) -> bool:
    """Whether model pair answers one request now."""
    try:
        with TritonClient(address, "http", timeout_s=5) as client:
            return client.infer("pair", typed({"x": np.ones((1, 16), np.float32)}))["y"].size == 8
    except Exception:
        return False
