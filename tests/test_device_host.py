"""The device host without Triton: a `ModelInstance` with `device_host` on in a process of its
own imports no `acl` and opens no device, the host refuses what a connection was not given, its
socket and directory are the user's alone, and the parameter has one rule."""

from __future__ import annotations

import dataclasses
import fcntl
import inspect
import json
import os
import queue
import socket
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx_models
import pytest
from google.protobuf import json_format
from onnx_models import reference

from ge_python_backend import emulator
from ge_python_backend.devicehost import client
from ge_python_backend.devicehost.buffers import BYTES, Buffer, is_bytes_tensor, layout
from ge_python_backend.devicehost.client import RemoteSession, _reply
from ge_python_backend.devicehost.protocol import (
    ANSWER,
    MAX_LAYOUTS,
    SUBMIT,
    Answer,
    DeviceHostError,
    FrameReader,
    NameLayout,
    Open,
    Opened,
    SessionArguments,
    Submit,
    host_paths,
    send_batch,
)
from ge_python_backend.emulator.faults import ENV as FAULTS_ENV
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.errors import AclError
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.parameters import ConfigError, ModelParameters
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.runtime import Session

STUB = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from ge_python_backend.triton import testing
    from ge_python_backend.triton.instance import ModelInstance

    pb_utils = testing.StandInUtils()
    instance = ModelInstance(json.loads(sys.argv[1]), pb_utils)
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    good = testing.InferenceRequest([pb_utils.Tensor("x", x)], ["y"])
    bad = testing.InferenceRequest([pb_utils.Tensor("x", x[:, :3].copy())], ["y"])
    responses = instance.execute([good, bad])
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "acl" or ".emulator" in m)
    print(json.dumps({
        "y": responses[0].output_tensors()[0].as_numpy().tolist(),
        "bad": responses[1].error().message(),
        "loaded": loaded,
        "host_pid": instance.session.host_pid,
        "executions": instance.session.counters.executions,
    }))
    instance.close()
    """
)


def test_a_stub_under_the_device_host_imports_no_acl_and_answers_as_the_session(
    tmp_path: Path, run_dir: Path, om_dynamic_batch: Path
) -> None:
    result = scaffold(om_dynamic_batch, tmp_path / "models", name="m", runtime="emulator")
    config = load_model_config(result.config_path)
    config.parameters["device_host"].string_value = "on"
    args = {
        "model_config": json.dumps(json_format.MessageToDict(config)),
        "model_instance_kind": "CPU",
        "model_instance_name": "m_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(result.model_dir),
        "model_version": "1",
        "model_name": "m",
    }
    out = subprocess.run(
        [sys.executable, "-c", STUB, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    report = json.loads(out.splitlines()[-1])
    assert report["loaded"] == []  # neither pyACL nor the emulator in the stub
    assert report["host_pid"] != os.getpid() and report["executions"] == 1
    assert "expected shape (rows, 16), got (2, 3)" in report["bad"]
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    np.testing.assert_allclose(
        report["y"], reference(om_dynamic_batch, {"x": x})["y"], rtol=1e-5, atol=1e-6
    )


def test_the_host_refuses_a_buffer_it_did_not_give_and_keeps_its_files_private(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator", label="m")
    try:
        link = session._current()
        with pytest.raises(DeviceHostError, match="buffer 99 was not given to this connection"):
            _reply(link, link.call(Submit(99, False, feeds=[])), Answer)
        with pytest.raises(DeviceHostError, match="this connection already holds a session"):
            _reply(link, link.call(Open(SessionArguments(str(om_dynamic_batch)))), Opened)
        x = np.ones((3, 16), np.float32)
        assert session.submit([{"x": x}], pipelined=False).result()[0]["y"].shape == (3, 8)
        paths = host_paths(0)
        assert stat.S_IMODE(os.stat(paths.socket).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
    finally:
        session.close()
    open_dir = run_dir.parent / "shared"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    monkeypatch.setenv(RUN_DIR_ENV, str(open_dir))
    with pytest.raises(DeviceHostError, match="mode 0700"):
        host_paths(0)


def test_batches_of_a_known_shape_travel_as_records_and_the_rest_as_places(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each shape of batch is named once per connection (up to the limit; after it, and for a
    new host, places again), inline and pipelined, and every answer is the session's."""
    monkeypatch.setattr(client, "MAX_LAYOUTS", 3)
    sent: list[bytes] = []
    monkeypatch.setattr(client, "send_batch", lambda *a: (sent.append(a[1]), send_batch(*a)))
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator", pipeline_depth=2)
    try:
        shapes = [[1], [2], [1], [1, 1], [3], [2, 2], [1], [3], [2]]  # requests' rows per batch
        for pipelined in (False, True, False):
            for rows in shapes:
                feeds = [{"x": np.full((n, 16), n + k, np.float32)} for k, n in enumerate(rows)]
                results = session.submit(feeds, pipelined=pipelined).result()
                if pipelined:
                    session.wait_ready()
                for request, answer in zip(feeds, results):
                    expected = reference(om_dynamic_batch, request)["y"]
                    np.testing.assert_allclose(answer["y"], expected, rtol=1e-5, atol=1e-6)
        link = session._current()
        assert len(link._layouts) == 3  # the first three shapes: the others go as places
        named = [[1], [2], [1, 1]]
        assert sent == [SUBMIT] * 2 * sum(rows in named for rows in shapes)  # the inline ones
        assert sorted(link._answer_places) == list(range(1, len(link._answer_places) + 1))
    finally:
        session.close()


@pytest.mark.parametrize("pipelined", [False, True])
def test_an_acl_failure_reaches_the_stub_as_the_sessions_own_acl_error(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch, pipelined: bool
) -> None:
    """The second execution fails (`mdl.execute_async:507011:2`) in this process and in the
    device host alike: an `AclError` with the same code, name, API and message, and the batch
    after it is answered."""
    fault = "mdl.execute_async:507011:2"
    monkeypatch.setenv(FAULTS_ENV, fault)  # the host reads it when it starts
    x = np.ones((2, 16), np.float32)
    failures = []
    for opening in (Session, RemoteSession):
        session = opening(om_dynamic_batch, 0, runtime="emulator", pipeline_depth=2)
        if opening is Session:
            emulator.set_faults(fault)  # counted from here in this process
        try:
            session.submit([{"x": x}], pipelined=pipelined).result()
            with pytest.raises(AclError) as failed:
                session.submit([{"x": x}], pipelined=pipelined).result()
            failures.append(failed.value)
            y = session.submit([{"x": x}], pipelined=pipelined).result()[0]["y"]
            np.testing.assert_allclose(y, reference(om_dynamic_batch, {"x": x})["y"], rtol=1e-5)
        finally:
            emulator.set_faults(None)
            session.close()
    local, remote = failures
    assert (remote.code, remote.name, remote.api) == (507011, local.name, local.api)
    assert remote.name != "UNKNOWN_ACL_ERROR" and str(remote) == str(local)


def test_the_host_refuses_layouts_and_records_it_did_not_name_or_take(
    run_dir: Path, om_dynamic_batch: Path
) -> None:
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator")
    try:
        session.submit([{"x": np.ones((1, 16), np.float32)}], pipelined=False).result()
        link = session._current()
        buffer = session._free[0].number
        for record, words in (
            ((SUBMIT, buffer, 99), "layout 99 was not named on this connection"),
            ((ANSWER, buffer, 1), "a b'A' record from a stub"),
            ((SUBMIT, 77, 1), "buffer 77 was not given to this connection"),
        ):
            call, ident = link._new_call()
            with link._send_lock:
                send_batch(link._sock, record[0], ident, record[1], record[2], -1)
            with pytest.raises(DeviceHostError, match=words):
                _reply(link, call, Answer)
        for frame, words in (  # answered, and the connection serves on
            ({"op": "submit", "buffer": buffer, "bogus": 1}, "a 'submit' message that does not"),
            ({"op": "answer", "outputs": [], "buffer": buffer}, "a 'answer' message from a stub"),
            ({"op": "shutdown"}, "unknown message 'shutdown'"),
        ):
            call, ident = link._new_call()
            body = json.dumps({**frame, "id": ident}).encode()
            with link._send_lock:
                link._sock.sendall(struct.pack(">I", len(body)) + body)
            with pytest.raises(DeviceHostError, match=words):
                _reply(link, call, Answer)
        refusals = (
            (MAX_LAYOUTS + 1, [], f"layout {MAX_LAYOUTS + 1}: layouts are numbered 1.."),
            (1, [], "layout 1 is already named"),
            (5, {"x": [0, "<f4", [1, 16]]}, "a layout is a list of each request's places"),
        )
        for number, places, _words in refusals:  # no replies: the host's log says it
            link.tell(NameLayout(number, places))  # type: ignore[arg-type]
        with pytest.raises(DeviceHostError, match="layout 5 was not named"):
            _reply(link, link.call(Submit(buffer, False, layout=5)), Answer)
        x = np.full((2, 16), 3, np.float32)
        y = session.submit([{"x": x}], pipelined=False).result()[0]["y"]
        np.testing.assert_allclose(y, reference(om_dynamic_batch, {"x": x})["y"], rtol=1e-5)
    finally:
        session.close()
    log = Path(host_paths(0).log).read_text()
    for _number, _places, words in refusals:
        assert f"refused: {words}" in log


def host_buffers(pid: int) -> list[int]:
    """The sizes of the device host's buffers mapped in process `pid` (/proc's maps)."""
    sizes = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        if "memfd:ge-device-host" in line:
            start, end = (int(address, 16) for address in line.split()[0].split("-"))
            sizes.append(end - start)
    return sizes


def host_buffers_once_freed(pid: int, timeout: float = 5.0) -> list[int]:
    """`host_buffers(pid)` once at most one is left (the host unmaps a buffer the stub freed
    when told), or as they are after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(host_buffers(pid)) > 1:
        time.sleep(0.05)
    return host_buffers(pid)


def test_outputs_larger_than_their_buffer_come_in_a_bigger_one_that_replaces_it(
    tmp_path: Path, run_dir: Path
) -> None:
    """Inputs of 64 bytes a row in a 1 MiB buffer, outputs of 1.28 MB a row: the host answers
    in a bigger buffer (the stub frees the old one), then in that one, every answer right."""
    om = compile_onnx(
        onnx_models.build_tile(tmp_path / "tile.onnx"),
        tmp_path / "tile",
        input_shape="x:-1,16",
        dynamic_batch_size="1,2",
        **onnx_models.KEEP_FP32,
    )
    session = RemoteSession(om, 0, runtime="emulator")
    try:
        for rows in (1, 1, 2, 1, 2):
            x = np.arange(rows * 16, dtype=np.float32).reshape(rows, 16) + rows
            y = session.submit([{"x": x}], pipelined=False).result()[0]["y"]
            np.testing.assert_array_equal(y, np.tile(x, (1, 20_000)))
        assert [slot.buffer.nbytes for slot in session._free] == [4 << 20]  # 2.56 MB: 4 MiB
        assert host_buffers_once_freed(session.host_pid) == [4 << 20]
    finally:
        session.close()


def test_a_batch_larger_than_every_free_buffer_frees_them_for_its_bigger_one(
    tmp_path: Path, run_dir: Path
) -> None:
    """Inputs of 786 KB a row: 1, 2 and 4 rows take buffers of 1, 2 and 4 MiB; each bigger one
    frees the smaller (on both sides), and the 4 MiB one serves every batch after."""
    om = compile_onnx(
        onnx_models.build_conv(tmp_path / "conv.onnx"),
        tmp_path / "conv",
        input_shape="image:-1,3,256,256",
        dynamic_batch_size="1,2,4",
        **onnx_models.KEEP_FP32,
    )
    session = RemoteSession(om, 0, runtime="emulator")
    rng = np.random.default_rng(2)
    try:
        for rows in (1, 2, 4, 1, 2):
            image = rng.random((rows, 3, 256, 256), dtype=np.float32)
            answer = session.submit([{"image": image}], pipelined=False).result()[0]
            want = reference(om, [image])["features"]
            np.testing.assert_allclose(answer["features"], want, rtol=1e-5, atol=1e-6)
        assert [slot.buffer.nbytes for slot in session._free] == [4 << 20]
        assert host_buffers(os.getpid()) == [4 << 20]
        assert host_buffers_once_freed(session.host_pid) == [4 << 20]
    finally:
        session.close()


def test_the_metrics_read_counters_and_device_memory_in_one_message(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ops: list[str] = []
    real = client.send_message
    monkeypatch.setattr(client, "send_message", lambda s, m, *f: (ops.append(m.OP), real(s, m, *f)))
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator")
    try:
        session.submit([{"x": np.ones((1, 16), np.float32)}], pipelined=False).result()
        assert session.counters.executions == 1
        free, total = session.device_memory()
        assert 0 < free < total
        assert session.device_memory() == (free, total)  # alone: a message of its own
        assert ops.count("stats") == 2
    finally:
        session.close()


def test_open_carries_sessions_arguments_and_nothing_else() -> None:
    fields = {field.name for field in dataclasses.fields(SessionArguments)}
    # work_spaces is the host's own (its stream pool), never a stub's
    assert fields == set(inspect.signature(Session).parameters) - {"work_spaces"}


def test_device_host_is_on_or_off() -> None:
    assert ModelParameters(device_host="on").in_device_host
    assert not ModelParameters(device_host="off").in_device_host
    assert not ModelParameters().in_device_host
    with pytest.raises(ConfigError, match="parameter device_host must be 'on'"):
        ModelParameters(device_host="yes")


def test_a_buffer_carries_numeric_and_bytes_tensors_and_refuses_places_outside_it() -> None:
    files = np.array([[b"\xff\xd8first"], [b""], [b"third file"]], dtype=object)
    requests = [{"x": np.arange(6, dtype=np.float16).reshape(2, 3), "image": files}]
    places, nbytes = layout(requests)
    assert places[0]["image"][1:] == [BYTES, [3, 1], [7, 0, 10]]
    buffer = Buffer.create(nbytes)
    try:
        buffer.write(places, requests)
        np.testing.assert_array_equal(buffer.view(places[0]["x"]), requests[0]["x"])
        got = buffer.view(places[0]["image"])
        assert got.dtype == object and got.shape == (3, 1) and got.tolist() == files.tolist()
        offset = places[0]["x"][0]
        for place, words in (
            ([buffer.nbytes - 2, "<f4", [1]], "not inside the buffer"),
            ([offset, "<f4", [-1]], "not inside the buffer"),
            ([offset, "|O", [1]], "not a tensor dtype"),
            ([offset, BYTES, [2], [1]], "item lengths"),
            ([offset, BYTES, [1], [buffer.nbytes + 1]], "not inside the buffer"),
        ):
            with pytest.raises(ValueError, match=words):
                buffer.view(place)
    finally:
        buffer.close()
    assert is_bytes_tensor(files) and not is_bytes_tensor(np.array(["text"], dtype=object))


def test_callers_hand_each_other_their_replies_without_a_reader_thread(
    run_dir: Path, om_dynamic_batch: Path
) -> None:
    """Pipelined batches completed by one thread while another submits, waits for the lanes and
    reads the counters: whoever reads the socket hands the others their replies."""
    threads_before = threading.active_count()
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator", pipeline_depth=2)
    try:
        batches: queue.Queue[Any] = queue.Queue()
        answers: list[np.ndarray] = []

        def complete() -> None:
            while (item := batches.get()) is not None:
                answers.append(item.result()[0]["y"])

        completer = threading.Thread(target=complete)
        completer.start()
        inputs = [np.full((1 + n % 4, 16), n, np.float32) for n in range(40)]
        for x in inputs:
            batches.put(session.submit([{"x": x}], pipelined=True))
            session.wait_ready()
            assert session.counters.executions >= 0
        batches.put(None)
        completer.join(60)
        assert not completer.is_alive()
        assert [a.shape for a in answers] == [(len(x), 8) for x in inputs]
        for x, y in zip(inputs, answers):
            expected = reference(om_dynamic_batch, {"x": x})["y"]
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
        assert threading.active_count() == threads_before  # no thread of the session's own
    finally:
        session.close()


def on_one_cpu(pid: int) -> int:
    """How many threads of process `pid` may run on one CPU only (/proc's Cpus_allowed_list)."""
    count = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        allowed = next(line for line in status.splitlines() if line.startswith("Cpus_allowed_list"))
        count += allowed.split(":")[1].strip().isdigit()
    return count


def test_an_inline_batch_and_its_host_thread_share_the_stubs_cpu(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stub's thread keeps its CPU while it waits, the host's thread moves to it, and the
    stub's thread gets its own CPUs back; GE_DEVICE_HOST_SHARE_CPU=0 leaves them alone."""
    allowed = os.sched_getaffinity(0)
    x = np.ones((2, 16), np.float32)
    for share, pinned in (("1", 1), ("0", 0)):
        monkeypatch.setenv("GE_DEVICE_HOST_SHARE_CPU", share)
        session = RemoteSession(om_dynamic_batch, 0, runtime="emulator")
        try:
            session.submit([{"x": x}], pipelined=False).result()
            assert os.sched_getaffinity(0) == allowed
            if len(allowed) > 1:  # the host pins its thread once it sent the answer
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and on_one_cpu(session.host_pid) != pinned:
                    time.sleep(0.05)
                assert on_one_cpu(session.host_pid) == pinned
        finally:
            session.close()
    monkeypatch.setenv("GE_DEVICE_HOST_SHARE_CPU", "yes")
    with pytest.raises(DeviceHostError, match="GE_DEVICE_HOST_SHARE_CPU must be 0 or 1"):
        RemoteSession(om_dynamic_batch, 0, runtime="emulator")


def listening(path: str, backlog: int) -> socket.socket:
    """A socket listening at a device host's path that no host serves."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(backlog)
    return listener


def test_a_host_that_takes_the_connection_and_never_answers_fails_the_open_in_its_timeout(
    run_dir: Path, om_dynamic_batch: Path
) -> None:
    """A stalled host (a socket that takes the connection and reads the open, never answering)
    fails the open after load_timeout_s with an error naming the host, what was waited for,
    how long and the parameter to raise."""
    paths = host_paths(3)
    taken: queue.Queue[tuple[socket.socket, Any]] = queue.Queue()
    with listening(paths.socket, 8) as listener:

        def take() -> None:
            connection, _ = listener.accept()
            opening = FrameReader(connection, descriptors=False).read()
            taken.put((connection, opening))  # kept open, never answered

        threading.Thread(target=take, daemon=True).start()
        started = time.monotonic()
        with pytest.raises(client.LoadLate) as late:
            RemoteSession(om_dynamic_batch, 3, runtime="emulator", label="m", load_timeout_s=0.5)
        waited = time.monotonic() - started
        connection, opening = taken.get(timeout=5)
        connection.close()
    assert opening is not None and type(opening[0]) is Open and opening[0].session.label == "m"
    assert 0.5 <= waited < 30  # bounded: the timeout, not the host, ended the wait
    assert (
        f"the device host of device 3 (pid {os.getpid()}, socket {paths.socket}) took the "
        "connection but did not answer the opening of m within 0.5 s: it may be stalled, "
        f"deadlocked or stopped (its log: {paths.log})" in str(late.value)
    )
    assert "raise the config.pbtxt parameter device_host_load_timeout_s (now 0.5)" in str(
        late.value
    )


def test_a_host_that_takes_no_connection_or_a_start_that_never_ends_fail_in_bounded_time(
    run_dir: Path, om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose queue of connections stays full (stopped: it accepts none) fails the open
    after load_timeout_s; a start lock another process holds past a start's own bound fails it
    too, naming the lock."""
    paths = host_paths(3)
    with listening(paths.socket, 0) as listener, socket.socket(socket.AF_UNIX) as queued:
        queued.connect(paths.socket)  # the queue of a backlog of 0 is full with one
        with pytest.raises(client.LoadLate, match="did not take the connection within 0.5 s"):
            RemoteSession(om_dynamic_batch, 3, runtime="emulator", load_timeout_s=0.5)
        del listener
    os.unlink(paths.socket)  # no host listens: this stub would start one, after the lock
    monkeypatch.setattr(client, "START_TIMEOUT_S", 0.3)
    held = os.open(paths.start_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        held_too_long = f"another process has held {paths.start_lock} for 0.3 s"
        with pytest.raises(DeviceHostError, match=held_too_long):
            RemoteSession(om_dynamic_batch, 3, runtime="emulator")
    finally:
        os.close(held)


def test_the_load_timeout_is_a_whole_number_of_seconds() -> None:
    assert ModelParameters().device_host_load_timeout_s is None  # the client's default
    assert ModelParameters(device_host_load_timeout_s="900").device_host_load_timeout_s == 900
    with pytest.raises(ConfigError, match=r"device_host_load_timeout_s must be 1\.\.86400 s"):
        ModelParameters(device_host_load_timeout_s="0")
