"""The device host keeps its models apart: one model's long work (large JPEG decodes) leaves
another model's latency alone, a batch the stub gave up on never writes into a buffer a later
batch uses, a peer cannot shrink a buffer under the host, a full descriptor table does not stop
it, and a model whose `.om` changed on disk is refused with the reason when the host reopens it.
"""

from __future__ import annotations

import io
import os
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnx_models
import pytest
from e2e_helpers import grpc_address, http_address, model_states, running_server
from onnx_models import reference
from reliability_helpers import instance_args, wait_for_exit

from ge_python_backend.client import TritonClient, error_text, typed
from ge_python_backend.devicehost import client
from ge_python_backend.devicehost.buffers import Buffer
from ge_python_backend.devicehost.client import RemoteSession, ReplyLate
from ge_python_backend.devicehost.protocol import RELOAD_NEEDED, host_paths
from ge_python_backend.emulator.faults import ENV as FAULTS_ENV
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.emulator.timing import ENV as TIMING_ENV
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.versions import checksum_path
from ge_python_backend.runtime import placement
from ge_python_backend.runtime.dvpp import ImageInput
from ge_python_backend.tools.probe import ProbeResult
from ge_python_backend.tools.watch import Watcher, needs_reload
from ge_python_backend.triton import testing
from ge_python_backend.triton.instance import ModelInstance

Image = pytest.importorskip("PIL.Image", reason="Pillow is the emulator extra's")

AIPP = onnx_models.AIPP_YUV420SP_ANY_SIZE.replace(
    "input_format: YUV420SP_U8",
    "input_format: YUV420SP_U8\n    src_image_size_w: 256\n    src_image_size_h: 256\n"
    "    crop: true\n    crop_size_w: 16\n    crop_size_h: 16",
)


# The JPEGs' side: VPC scales a side by 1/32 at least, to the model's 256x256 (an 8192x8192 one,
# the largest JPEGD decodes, would do too, and take 4 times as long).
LARGE_SIDE = 4096


def classifier(directory: Path) -> Path:
    """A classifier whose input takes JPEG files (VPC resizes them to 256x256)."""
    directory.mkdir()
    (directory / "aipp.cfg").write_text(AIPP)
    return compile_onnx(
        onnx_models.build_classifier(directory / "model.onnx"),
        directory / "model",
        insert_op_conf=directory / "aipp.cfg",
        input_shape="image:-1,3,16,16",
        dynamic_batch_size="1,4",
        **onnx_models.KEEP_FP32,
    )


def large_jpeg(side: int) -> bytes:
    """A `side` x `side` JPEG of smooth noise (cheap to make, slow to decode)."""
    rng = np.random.default_rng(7)
    small = rng.integers(0, 256, (side // 64, side // 64, 3), np.uint8)
    out = io.BytesIO()
    Image.fromarray(small).resize((side, side)).save(out, "JPEG", quality=90)
    return out.getvalue()


def two_models(tmp_path: Path, om: Path) -> tuple[RemoteSession, RemoteSession]:
    """The classifier taking JPEG files and `om`, in one device host."""
    images = RemoteSession(
        classifier(tmp_path / "c"), 0, runtime="emulator", image=ImageInput("image"), label="images"
    )
    try:
        other = RemoteSession(om, 0, runtime="emulator", label="other")
    except BaseException:
        images.close()
        raise
    assert images.host_pid == other.host_pid
    return images, other


def latencies(session: RemoteSession, count: int) -> np.ndarray:
    """The seconds each of `count` requests of 8 rows took, one after another."""
    x = np.ones((8, 16), np.float32)
    seconds = []
    for _ in range(count):
        start = time.perf_counter()
        session.submit([{"x": x}], pipelined=False).result()
        seconds.append(time.perf_counter() - start)
    return np.array(seconds)


def beside_decodes(
    images: RemoteSession, other: RemoteSession, rounds: int, quiet_count: int
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """The other model's latencies while nothing else runs and while the classifier decodes a
    request of four 4096x4096 JPEGs, in turns (both see the machine's load), and
    how long those requests took."""
    files = np.array([[large_jpeg(LARGE_SIDE)]] * 4, dtype=object)
    latencies(other, 10)  # warm
    quiet: list[float] = []
    busy: list[float] = []
    batches: list[float] = []

    def decode() -> None:
        start = time.perf_counter()
        images.submit([{"image": files}], pipelined=False).result()
        batches.append(time.perf_counter() - start)

    for _round in range(rounds):
        quiet.extend(latencies(other, quiet_count))
        worker = threading.Thread(target=decode)
        worker.start()
        while worker.is_alive():
            busy.extend(latencies(other, 2))
        worker.join()
    assert len(batches) == rounds
    return np.array(quiet), np.array(busy), batches


@pytest.mark.soak
def test_another_models_p99_beside_large_jpegs_stays_within_2x_of_its_quiet_p99(
    tmp_path: Path, run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two models in one host under the 310P's DVPP rates and executions of 2 ms + 6 ms a row:
    while the classifier decodes 4096x4096 JPEGs (JPEGD's channel and the emulator's decode,
    about 1 s a request, then one execution of 26 ms), the other model's p99 (50 ms
    executions) stays within 2x of its quiet p99. (The emulator decodes on the host's CPUs,
    holding the GIL part of the time, which a device does not: executions this long keep that
    out of the comparison.)"""
    monkeypatch.setenv(TIMING_ENV, "profile=dvpp-310p3,execute_us=2000,execute_us_per_row=6000")
    images, other = two_models(tmp_path, om_dynamic_batch)
    try:
        quiet, busy, batches = beside_decodes(images, other, rounds=3, quiet_count=25)
        quiet_p99, busy_p99 = np.percentile(quiet, 99), np.percentile(busy, 99)
        assert busy_p99 <= 2 * quiet_p99, (
            f"p99 {busy_p99 * 1e3:.2f} ms beside the decodes ({len(busy)} requests, batches of "
            f"{min(batches):.2f}..{max(batches):.2f} s), quiet {quiet_p99 * 1e3:.2f} ms"
        )
    finally:
        images.close()
        other.close()


def test_without_a_timing_model_no_request_of_another_model_waits_for_a_decode(
    tmp_path: Path, run_dir: Path, om_dynamic_batch: Path
) -> None:
    """Lazy streams (no timing model: each stream's work runs in the thread that waits for it):
    the other model's requests never wait for the classifier's decodes, which took the whole
    request (p99 10 s) when one thread at a time ran the lazy work of every stream of the
    process; its p99 stays far below one decoding request."""
    images, other = two_models(tmp_path, om_dynamic_batch)
    try:
        quiet, busy, batches = beside_decodes(images, other, rounds=2, quiet_count=50)
        busy_p99 = np.percentile(busy, 99)
        assert busy_p99 < min(batches) / 4, (
            f"p99 {busy_p99 * 1e3:.2f} ms beside decoding requests of {min(batches):.2f} s"
        )
    finally:
        images.close()
        other.close()


def test_another_models_batches_share_the_ai_core_with_a_long_execution(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two models in one host, executions of 50 ms a row: one runs 8-row batches (400 ms each)
    back to back, the other's 1-row batches (50 ms) take the AI Core in turns with them (about
    100 ms: half the rate), instead of waiting for each long execution to end (about 450 ms,
    when an execution held the execute engine for its whole length)."""
    monkeypatch.setenv(TIMING_ENV, "execute_us_per_row=50000")
    long = RemoteSession(om_dynamic_batch, 0, runtime="emulator", label="long")
    short = RemoteSession(om_dynamic_batch, 0, runtime="emulator", label="short")
    try:
        stop = threading.Event()

        def run_long() -> None:
            while not stop.is_set():
                long.submit([{"x": np.ones((8, 16), np.float32)}], pipelined=False).result()

        worker = threading.Thread(target=run_long)
        worker.start()
        time.sleep(0.1)
        x = np.ones((1, 16), np.float32)
        seconds = []
        for _ in range(15):
            start = time.perf_counter()
            short.submit([{"x": x}], pipelined=False).result()
            seconds.append(time.perf_counter() - start)
        stop.set()
        worker.join()
        p99 = np.percentile(seconds, 99)
        assert p99 < 0.25, f"p99 {p99 * 1e3:.1f} ms beside executions of 400 ms"
    finally:
        long.close()
        short.close()


@pytest.mark.parametrize("pipelined", [False, True], ids=["inline", "pipelined"])
def test_a_batch_answered_after_the_reply_timeout_never_writes_into_a_later_ones_buffer(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch, pipelined: bool
) -> None:
    """The host stalls 2 s in its second launch (`mdl.execute_async:stall=2000:2`), past the
    stub's reply timeout (1.2 s: 100 ms per lane and a margin of 1 s here), then resumes and
    writes that batch's outputs. The stub gave the batch up and retired its buffer, so the
    batch it sends meanwhile goes in another buffer and is answered right (it was answered
    with the stalled batch's outputs over its inputs, with a success status)."""
    monkeypatch.setattr(client, "REPLY_MARGIN_S", 1.0)
    monkeypatch.setenv(FAULTS_ENV, "mdl.execute_async:stall=2000:2")
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator", execute_timeout_ms=100)
    try:
        assert session.reply_timeout_s == pytest.approx(1.2)
        inputs = [np.full((2, 16), value, np.float32) for value in (1.0, 2.0, 3.0, 4.0)]
        answers = []

        def infer(x: np.ndarray) -> np.ndarray:
            return session.submit([{"x": x}], pipelined=pipelined).result()[0]["y"]

        answers.append(infer(inputs[0]))
        used = {slot.number for slot in session._free}
        with pytest.raises(ReplyLate, match="did not answer within 1.2 s"):
            infer(inputs[1])
        answers.append(infer(inputs[2]))  # sent while the host still stalls
        answers.append(infer(inputs[3]))
        for x, y in zip(inputs[:1] + inputs[2:], answers):
            np.testing.assert_allclose(y, reference(om_dynamic_batch, {"x": x})["y"], rtol=1e-5)
        assert not used & {slot.number for slot in session._free}  # retired, never pooled
    finally:
        session.close()


def host_memfds(pid: int) -> list[str]:
    """The /proc paths of process `pid`'s descriptors of device host buffers."""
    directory = Path(f"/proc/{pid}/fd")
    found = []
    for entry in directory.iterdir():
        try:
            if "memfd:ge-device-host" in os.readlink(entry):
                found.append(str(entry))
        except OSError:  # closed meanwhile
            continue
    return found


def test_a_peer_cannot_shrink_or_grow_a_buffer_under_the_host(
    run_dir: Path, om_dynamic_batch: Path
) -> None:
    """A same-user process opens the host's buffers through /proc and truncates them: refused
    (sealed), where the host died of SIGBUS at its next access and logged nothing."""
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator")
    try:
        x = np.ones((2, 16), np.float32)
        expected = reference(om_dynamic_batch, {"x": x})["y"]
        np.testing.assert_allclose(session.submit([{"x": x}]).result()[0]["y"], expected, rtol=1e-5)
        paths = host_memfds(session.host_pid)
        assert paths
        for path in paths:
            fd = os.open(path, os.O_RDWR)
            try:
                for size in (0, 1 << 30):
                    with pytest.raises(PermissionError):
                        os.ftruncate(fd, size)
            finally:
                os.close(fd)
        for _ in range(3):
            y = session.submit([{"x": x}], pipelined=False).result()[0]["y"]
            np.testing.assert_allclose(y, expected, rtol=1e-5)
        os.kill(session.host_pid, 0)  # alive
    finally:
        session.close()


def test_neither_side_maps_a_buffer_whose_size_is_not_sealed() -> None:
    fd = os.memfd_create("not-sealed", os.MFD_CLOEXEC)
    try:
        os.ftruncate(fd, 1 << 20)
        with pytest.raises(ValueError, match="a buffer's size is sealed"):
            Buffer(fd, 1 << 20)
    finally:
        os.close(fd)
    buffer = Buffer.create(1 << 20)
    again = os.dup(buffer.fd)
    try:
        with pytest.raises(ValueError, match="1048576 bytes"):
            Buffer(again, 2 << 20)  # more than it holds
    finally:
        os.close(again)
        buffer.close()


def test_the_host_survives_a_full_descriptor_table_and_serves_once_it_has_room(
    run_dir: Path, om_dynamic_batch: Path
) -> None:
    """A host limited to 64 descriptors, 100 connections at once: accept() fails with EMFILE,
    logged with a backoff (it exited on the uncaught error); once they are gone a stub opens a
    session in that same host and is answered right."""
    run_dir.mkdir(mode=0o700)
    paths = host_paths(0)
    with open(paths.log, "wb") as log:
        host = subprocess.Popen(
            [sys.executable, "-m", "ge_python_backend.devicehost", "--device", "0"],
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)),
        )
    flood: list[socket.socket] = []
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(paths.socket) and time.monotonic() < deadline:
            time.sleep(0.05)
        for _ in range(100):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(paths.socket)
            flood.append(sock)
        deadline = time.monotonic() + 30
        while "Too many open files" not in Path(paths.log).read_text():
            assert time.monotonic() < deadline and host.poll() is None, Path(paths.log).read_text()
            time.sleep(0.05)
        for sock in flood:
            sock.close()
        time.sleep(0.5)
        assert host.poll() is None
        session = RemoteSession(om_dynamic_batch, 0, runtime="emulator")
        try:
            assert session.host_pid == host.pid
            x = np.ones((2, 16), np.float32)
            y = session.submit([{"x": x}], pipelined=False).result()[0]["y"]
            np.testing.assert_allclose(y, reference(om_dynamic_batch, {"x": x})["y"], rtol=1e-5)
        finally:
            session.close()
        log_text = Path(paths.log).read_text()
        assert "cannot accept a connection: [Errno 24] Too many open files" in log_text
        assert "Traceback" not in log_text
    finally:
        for sock in flood:
            sock.close()
        host.terminate()
        host.wait(30)


def retrained(tmp_path: Path) -> Path:
    """The `om_dynamic_batch` model with other weights: the same inputs, outputs and gears, other
    answers (what a replaced `.om` that still fits the config looks like)."""
    return compile_onnx(
        onnx_models.build_mlp(tmp_path / "retrained.onnx", seed=17),
        tmp_path / "retrained",
        input_shape="x:-1,16",
        dynamic_batch_size="1,2,4,8",
        **onnx_models.KEEP_FP32,
    )


@pytest.mark.parametrize("checksum", [True, False], ids=["checksum-file", "no-checksum-file"])
def test_an_om_changed_on_disk_is_refused_with_the_reason_when_the_host_reopens_it(
    tmp_path: Path,
    run_dir: Path,
    om_dynamic_batch: Path,
    checksum: bool,
) -> None:
    """The host restarts after the instance's `.om` was replaced: the session is not opened on
    the new file (it was, or failed every request as INTERNAL): every request is answered
    UNAVAILABLE with the reason, the same digest check with or without a checksum file (the
    first host's digest of what the instance loaded)."""
    result = scaffold(om_dynamic_batch, tmp_path / "models", name="m", runtime="emulator")
    om = next(result.model_dir.glob("1/*.om"))
    if not checksum:
        checksum_path(om).unlink()
    pb_utils = testing.StandInUtils()
    instance = ModelInstance(instance_args(result, "m", device_host="on"), pb_utils)
    try:
        x = np.ones((2, 16), np.float32)
        request = testing.InferenceRequest([pb_utils.Tensor("x", x)], ["y"])
        (answer,) = instance.execute([request])
        assert answer.error() is None
        first_host = instance.session.host_pid
        os.kill(first_host, signal.SIGKILL)
        wait_for_exit(first_host, 10)
        om.write_bytes(retrained(tmp_path).read_bytes())  # replaced while no host runs
        (answer,) = instance.execute([request])  # (may still find the old host dying)
        error = answer.error()
        assert error is not None
        if error.code() != testing.TritonError.UNAVAILABLE:
            assert "went away" in error.message(), error.message()
        for _ in range(2):  # then each at once, from what reopening it found
            (answer,) = instance.execute([request])
            error = answer.error()
            assert error is not None
            message = error.message()
            assert error.code() == testing.TritonError.UNAVAILABLE, message
            assert "sha256 mismatch" in message and RELOAD_NEEDED in message, message
        assert needs_reload(ProbeResult(False, message, 0.1))
    finally:
        instance.close()


@pytest.mark.e2e
def test_through_triton_a_changed_om_answers_unavailable_and_the_watcher_makes_it_unavailable(
    tmp_path: Path, run_dir: Path, om_dynamic_batch: Path
) -> None:
    """tritonserver (explicit model control), one device-host model: its host killed and its
    `.om` replaced, a request is answered UNAVAILABLE with the reason; the watcher's round
    reloads the model, whose load fails with it: the model is UNAVAILABLE in the repository
    index, its reason the sha256 mismatch (it stayed READY, failing every request)."""
    result = scaffold(
        om_dynamic_batch, tmp_path / "models", name="m", runtime="emulator", device_host=True
    )
    om = next(result.model_dir.glob("1/*.om"))
    x = np.ones((2, 16), np.float32)
    with running_server(
        tmp_path / "models",
        log_path=tmp_path / "triton.log",
        model_control_mode="explicit",
        load_models=["m"],
    ) as server:
        with TritonClient(grpc_address(server), "grpc", timeout_s=60) as triton:
            assert triton.infer("m", typed({"x": x}))["y"].shape == (2, 8)
            (hosting,) = {holding.pid for holding in placement.holders(0)}
            os.kill(hosting, signal.SIGKILL)
            wait_for_exit(hosting, 10)
            om.write_bytes(retrained(tmp_path).read_bytes())
            errors = []
            for _ in range(2):  # (the first may still find the old host dying)
                with pytest.raises(Exception) as caught:
                    triton.infer("m", typed({"x": x}))
                errors.append(error_text(caught.value))
            assert "sha256 mismatch" in errors[-1] and RELOAD_NEEDED in errors[-1], errors
        Watcher(http_address(server), retries=1).check_once()
        state, reason = model_states(server)["m"]
        assert state == "UNAVAILABLE" and "sha256 mismatch" in reason, (state, reason)
