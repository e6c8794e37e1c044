"""The hop's copies: a batch through `RemoteSession` and the device host is copied once each way
on the hop (the stub's inputs into the shared buffer, the outputs out of it), and the host's
session reads the inputs in place and writes the outputs straight out of its lanes' pinned
buffers into the shared buffer: no array in between.

The host runs in this process here (its accept loop in a thread, each connection as `serve`
runs it), so that the test sees both sides' copies."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx_models import reference

from ge_python_backend.devicehost import buffers, client, host
from ge_python_backend.devicehost.buffers import Buffer
from ge_python_backend.devicehost.client import RemoteSession
from ge_python_backend.devicehost.protocol import host_paths
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.runtime.lane import Lane
from ge_python_backend.runtime.workspaces import WorkSpaces, WorkSpaceSettings


@pytest.fixture
def host_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """A device host of device 0 in this process, its work spaces as `serve` sets them up; its
    connections, as they come. A connection it cannot serve is closed at once (the stub fails
    instead of waiting) and the reason raised at the end."""
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path / "run"))
    monkeypatch.setenv(client.SHARE_CPU_ENV, "0")  # this process's threads keep their CPUs
    work_spaces = WorkSpaces(WorkSpaceSettings.from_environment())
    listener = host._listen(host_paths(0).socket)
    listener.settimeout(0.05)
    connections: list[Any] = []
    threads: list[threading.Thread] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                continue
            try:
                connection = host._admit(sock, work_spaces)
                assert connection is not None
            except BaseException as exc:
                failures.append(exc)
                sock.close()
                continue
            connections.append(connection)
            threads.append(threading.Thread(target=connection.run, name="device-host"))
            threads[-1].start()

    acceptor = threading.Thread(target=accept)
    acceptor.start()
    try:
        yield connections
    finally:
        stop.set()
        acceptor.join()
        listener.close()
        for thread in threads:
            thread.join(10)
    if failures:
        raise failures[0]


def in_any(array: np.ndarray, memories: Sequence[np.ndarray]) -> bool:
    return any(np.shares_memory(array, memory) for memory in memories)


@pytest.mark.parametrize("pipelined", [False, True], ids=["inline", "pipelined"])
def test_a_batch_crosses_the_hop_with_one_copy_each_way(
    host_here: list[Any],
    om_dynamic_batch: Path,
    monkeypatch: pytest.MonkeyPatch,
    pipelined: bool,
) -> None:
    """Two requests (2 and 3 rows of `x` FP32[., 16] -> `y` FP32[., 8], `z` FP32[., 1]) per
    batch, twice (the second batch of a shape travels as records through the views each side
    keeps): per batch the stub writes the 320 bytes of inputs into the buffer once, the host's
    lane stages them from views of that buffer, the host writes the 180 bytes of outputs once,
    from views of its lane's pinned buffers, and the stub copies them out once."""
    copies: list[tuple[str, int]] = []
    staged_from_buffer: list[bool] = []
    put_from_lane: list[bool] = []
    real_write, real_put, real_copied_out, real_stage = (
        Buffer.write,
        Buffer.put,
        buffers.copied_out,
        Lane.stage,
    )

    def nbytes(arrays: Sequence[dict[str, np.ndarray]]) -> int:
        return sum(array.nbytes for tensors in arrays for array in tensors.values())

    def shared_memory() -> list[np.ndarray]:
        (connection,) = host_here
        return [np.frombuffer(b._map, np.uint8) for b in connection._buffers.values()]

    def pinned_outputs() -> list[np.ndarray]:
        (connection,) = host_here
        lanes = connection.session._lanes
        return [slot.host.array for lane in lanes for slot in lane.output_slots]

    def write(self: Buffer, places: Any, arrays: Any, key: Any = None) -> None:
        copies.append(("stub: into the buffer", nbytes(arrays)))
        real_write(self, places, arrays, key)

    def put(self: Buffer, places: Any, arrays: Any, key: Any = None) -> Any:
        if threading.current_thread() is not threading.main_thread():  # the host's
            copies.append(("host: into the buffer", nbytes(arrays)))
            memory = pinned_outputs()
            put_from_lane.extend(in_any(a, memory) for t in arrays for a in t.values())
        return real_put(self, places, arrays, key)

    def copied_out(tensors: Any) -> Any:
        copies.append(("stub: out of the buffer", nbytes(tensors)))
        return real_copied_out(tensors)

    def stage(self: Lane, table: Any, execution: Any, feeds_list: Any) -> int:
        memory = shared_memory()
        staged_from_buffer.extend(in_any(a, memory) for f in feeds_list for a in f.values())
        return real_stage(self, table, execution, feeds_list)

    monkeypatch.setattr(Buffer, "write", write)
    monkeypatch.setattr(Buffer, "put", put)
    monkeypatch.setattr(client, "copied_out", copied_out)
    monkeypatch.setattr(Lane, "stage", stage)
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator", pipeline_depth=2)
    try:
        for batch in range(2):
            feeds = [{"x": np.full((rows, 16), rows + batch, np.float32)} for rows in (2, 3)]
            results = session.submit(feeds, pipelined=pipelined).result()
            if pipelined:
                session.wait_ready()
            for request, answer in zip(feeds, results):
                expected = reference(om_dynamic_batch, request)
                for name in ("y", "z"):
                    np.testing.assert_allclose(answer[name], expected[name], rtol=1e-5, atol=1e-5)
                    assert not in_any(answer[name], shared_memory())  # the stub's own
    finally:
        session.close()
    one_batch = [
        ("stub: into the buffer", 5 * 16 * 4),
        ("host: into the buffer", 5 * 9 * 4),
        ("stub: out of the buffer", 5 * 9 * 4),
    ]
    assert copies == one_batch * 2
    assert staged_from_buffer == [True] * 4  # each request's `x`, in place
    assert put_from_lane == [True] * 8  # each request's `y` and `z`, straight from the lane


def test_a_batch_of_several_executions_is_put_once_and_answered_right(
    host_here: list[Any], om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """6 and 5 rows with gears up to 8 run as two executions (8 rows, then 3): the first request
    whole in the first, the second split over both. The host still writes the outputs into the
    buffer once, the first execution's rows from arrays it was copied out into first (the lane
    serves the second execution before the batch is over), and every row is the model's."""
    put: list[int] = []
    real_put = Buffer.put

    def counted_put(self: Buffer, places: Any, arrays: Any, key: Any = None) -> Any:
        if threading.current_thread() is not threading.main_thread():
            put.append(sum(a.nbytes for t in arrays for a in t.values()))
        return real_put(self, places, arrays, key)

    monkeypatch.setattr(Buffer, "put", counted_put)
    session = RemoteSession(om_dynamic_batch, 0, runtime="emulator")
    try:
        rng = np.random.default_rng(44)
        feeds = [{"x": rng.standard_normal((rows, 16)).astype(np.float32)} for rows in (6, 5)]
        results = session.submit(feeds, pipelined=False).result()
        for request, answer in zip(feeds, results):
            expected = reference(om_dynamic_batch, request)
            for name in ("y", "z"):
                np.testing.assert_allclose(answer[name], expected[name], rtol=1e-5, atol=1e-5)
        assert session.counters.executions == 2
    finally:
        session.close()
    assert put == [11 * 9 * 4]
