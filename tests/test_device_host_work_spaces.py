"""Shared work spaces in a device host of its own (a process this test starts through
`RemoteSession`): what the device loses as models arrive is read from the emulated device's own
free memory (`acl.rt.get_mem_info`, as the host reports it), every answer is onnxruntime's, and
the metrics carry the host's work spaces and I/O areas; `--work-space per-lane` is today's way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx_models
import pytest
from onnx_models import reference

from ge_python_backend.ascend import malloc_reserved
from ge_python_backend.devicehost.client import RemoteSession
from ge_python_backend.runtime.describe import describe_om


@pytest.fixture
def run_dir(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """conftest's, its hosts with a pool of 2 streams."""
    monkeypatch.setenv("GE_DEVICE_HOST_STREAMS", "2")
    return run_dir


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """mlp (a small work space) and the classifier (a larger one), batch gears 1..8."""
    return onnx_models.compile_batched(
        tmp_path_factory.mktemp("host_work_spaces"), "mlp", "classifier"
    )


def feeds(name: str, rows: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(rows)
    shape = (rows, 16) if name == "mlp" else (rows, 3, 16, 16)
    key = "x" if name == "mlp" else "image"
    return {key: rng.standard_normal(shape).astype(np.float32)}


@pytest.fixture
def opened() -> Iterator[list[RemoteSession]]:
    sessions: list[RemoteSession] = []
    yield sessions
    for session in sessions:
        session.close()


def open_remote(path: Path, opened: list[RemoteSession]) -> RemoteSession:
    session = RemoteSession(path, 0, runtime="emulator", pipeline_depth=2)
    opened.append(session)
    return session


def used(session: RemoteSession) -> int:
    """Device bytes in use now (the host reads its counters and the device's memory at once)."""
    session.counters  # noqa: B018  (asks the host: device_memory() returns what it read then)
    free, total = session.device_memory()
    return total - free


def test_a_host_holds_each_models_weights_once_and_two_work_spaces_of_the_largest(
    run_dir: Path, models: dict[str, Path], opened: list[RemoteSession]
) -> None:
    """2 streams. mlp first: its weights, 2 work spaces of its work and 2 I/O areas of its inputs
    and outputs. Then the classifier x2 instances and mlp again: the device loses the
    classifier's weights once, the growth of the 2 work spaces and the 2 I/O areas to the
    classifier's, and what the new lanes keep of their own (their gear inputs), nothing more."""
    mlp, classifier = (describe_om(models[name], "emulator") for name in ("mlp", "classifier"))
    assert classifier.load.load_bytes > mlp.load.load_bytes
    areas = [malloc_reserved(model.shared_io()[1]) for model in (mlp, classifier)]
    assert areas[1] > areas[0]
    own = [model.lane_bytes - model.shared_io()[0] for model in (mlp, classifier)]
    first = open_remote(models["mlp"], opened)
    before = used(first)
    assert first.counters.work_space_streams == 2
    assert first.counters.work_space_bytes == 2 * mlp.load.load_bytes
    assert first.counters.io_area_bytes == 2 * areas[0]
    assert first.counters.device_bytes_held == 2 * own[0]
    more = [
        open_remote(models["classifier"], opened),
        open_remote(models["classifier"], opened),
        open_remote(models["mlp"], opened),
    ]
    grown = used(first) - before
    buffers = sum(session.counters.device_bytes_held for session in more)
    assert buffers == 2 * 2 * own[1] + 2 * own[0]
    work = 2 * (classifier.load.load_bytes - mlp.load.load_bytes)
    assert grown == classifier.load.shared_bytes + work + 2 * (areas[1] - areas[0]) + buffers
    assert first.counters.work_space_bytes == 2 * classifier.load.load_bytes
    assert first.counters.io_area_bytes == 2 * areas[1]
    for session, name in zip([first, *more], ["mlp", "classifier", "classifier", "mlp"]):
        pending = [(sent, session.submit([sent])) for sent in (feeds(name, 3), feeds(name, 5))]
        for sent, batch in pending:
            (got,) = batch.result()
            for output, expected in reference(models[name], sent).items():
                np.testing.assert_allclose(got[output], expected, rtol=1e-5, atol=1e-6)


def test_per_lane_work_spaces_hold_a_work_space_for_every_lane(
    run_dir: Path,
    models: dict[str, Path],
    opened: list[RemoteSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GE_DEVICE_HOST_WORK_SPACE", "per-lane")
    mlp = describe_om(models["mlp"], "emulator")
    first = open_remote(models["mlp"], opened)
    before = used(first)
    counters = first.counters
    assert (counters.work_space_streams, counters.work_space_bytes, counters.io_area_bytes) == (
        0,
        0,
        0,
    )
    second = open_remote(models["mlp"], opened)
    assert used(first) - before == 2 * (mlp.load.load_bytes + mlp.lane_bytes)
    sent = feeds("mlp", 4)
    (got,) = second.submit([sent]).result()
    np.testing.assert_allclose(got["y"], reference(models["mlp"], sent)["y"], rtol=1e-5)
