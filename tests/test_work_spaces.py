"""Shared work spaces (`runtime/workspaces.py`): the sessions of a device host's process seated
on a pool of streams, each stream with one work space and one I/O area the models placed on it
share.

What a device holds then is read from the emulator's memory counters: each model's weights once,
N work spaces of the largest model's work, N I/O areas of the largest model's inputs and outputs,
and what stays a lane's own (its gear input; an image input DVPP writes); every answer is
onnxruntime's; a failing execution fails its batch alone; per-lane is today's way."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx_models
import pytest
from emulator_helpers import live
from onnx_models import reference

from ge_python_backend import cli, emulator
from ge_python_backend.ascend import AclCode, malloc_reserved
from ge_python_backend.commands.serve_cmd import HOST_PREFIX
from ge_python_backend.devicehost.host import work_space_settings
from ge_python_backend.runtime import AclError, ExecuteTimeoutError, Session, placement
from ge_python_backend.runtime.describe import describe_om
from ge_python_backend.runtime.dvpp import ImageInput
from ge_python_backend.runtime.errors import DeviceFullError
from ge_python_backend.runtime.memory import DeviceView
from ge_python_backend.runtime.workspaces import (
    DEFAULT_STREAMS,
    WorkSpaces,
    WorkSpaceSettings,
)

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def _emulator_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.delenv("GE_PYTHON_BACKEND_ACL", raising=False)
    monkeypatch.setenv(placement.RUN_DIR_ENV, str(tmp_path / "run"))
    emulator.set_faults(None)
    yield
    emulator.set_faults(None)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three models of different work sizes, mlp (small), classifier and a wider mlp, and
    add_mul (no weights: query_size gives no weight size)."""
    return onnx_models.compile_batched(
        tmp_path_factory.mktemp("work_spaces"), "mlp", "classifier", "add_mul", "wide"
    )


def feeds(model: str, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if model == "add_mul":
        return {name: rng.standard_normal((rows, 4)).astype(np.float32) for name in ("a", "b")}
    if model == "classifier":
        return {"image": rng.standard_normal((rows, 3, 16, 16)).astype(np.float32)}
    return {"x": rng.standard_normal((rows, 16)).astype(np.float32)}


def assert_right(session: Session, model: str, got: dict[str, np.ndarray], sent: dict) -> None:
    want = reference(session.path, sent)
    assert got.keys() == want.keys(), model
    for name, expected in want.items():
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def sizes(path: Path) -> tuple[int, int]:
    work, weight, ret = emulator.acl.mdl.query_size(str(path))
    assert ret == 0 and work > 0 and weight > 0
    return work, weight


def io_area(path: Path) -> tuple[int, int]:
    """(bytes of a lane's buffers it keeps in its stream's I/O area instead, the area it needs)."""
    return describe_om(path, "emulator").shared_io()


def test_models_share_n_work_spaces_of_the_largest_and_each_holds_its_weights_once(
    models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """2 streams; mlp x2 instances, the wider mlp, then the classifier (each of the last two
    grows the streams' work spaces, the classifier their I/O areas), 2 lanes each: the device
    holds each model's weights once, 2 work spaces of the largest work, 2 I/O areas of the
    largest inputs and outputs, and what the lanes keep of their own (their gear inputs); 3
    models x 2 streams loaded; every answer is right, also for batches in flight on all of them
    at once."""
    before = emulator.stats()
    spaces = WorkSpaces(WorkSpaceSettings(streams=2))
    order = ["mlp", "mlp", "wide", "classifier"]
    with caplog.at_level(logging.INFO, "ge_python_backend.runtime.workspaces"):
        sessions = [
            Session(models[name], runtime="emulator", pipeline_depth=2, work_spaces=spaces)
            for name in order
        ]
    try:
        assert all(s.pooled for s in sessions)
        assert f"grown for wide.om: 2 stream(s) from {sizes(models['mlp'])[0]} " in caplog.text
        largest = max(sizes(models[name])[0] for name in order)
        assert largest == sizes(models["classifier"])[0] > sizes(models["wide"])[0]
        assert f"grown for classifier.om: 2 stream(s) from {sizes(models['wide'])[0]} to " in (
            caplog.text
        )
        assert "shared I/O areas grown for classifier.om: 2 stream(s) from " in caplog.text
        weights = sum(malloc_reserved(sizes(models[name])[1]) for name in set(order))
        buffers = sum(s.counters.device_bytes_held for s in sessions)
        own = [describe_om(models[n], "emulator").lane_bytes - io_area(models[n])[0] for n in order]
        assert buffers == 2 * sum(own) > 0  # the gear inputs
        area = max(io_area(models[name])[1] for name in order)
        assert area == io_area(models["classifier"])[1]
        now = emulator.stats()
        held = now["device_bytes_in_use"] - before["device_bytes_in_use"]
        assert held == weights + 2 * malloc_reserved(largest) + 2 * malloc_reserved(area) + buffers
        assert now["loaded_models"] - before["loaded_models"] == 3 * 2
        assert spaces.totals() == (2, 2 * malloc_reserved(largest), 2 * malloc_reserved(area))
        # a session's two lanes are on the two streams
        pending = [
            (session, name, sent, session.submit([sent]))
            for number in range(3)
            for session, name in zip(sessions, order)
            for sent in [feeds(name, 1 + number, seed=number)]
        ]
        for session, name, sent, batch in pending:
            assert_right(session, name, batch.result()[0], sent)
    finally:
        for session in sessions:
            session.close()
    assert live(emulator.stats()) == live(before)
    assert spaces.totals() == (0, 0, 0)


def test_the_copies_go_with_the_models_last_lane_and_the_work_spaces_do_not_shrink(
    models: dict[str, Path],
) -> None:
    before = emulator.stats()
    spaces = WorkSpaces(WorkSpaceSettings(streams=3))
    wide = Session(models["wide"], runtime="emulator", work_spaces=spaces)
    small = Session(models["mlp"], runtime="emulator", work_spaces=spaces)
    loaded = emulator.stats()["loaded_models"] - before["loaded_models"]
    assert loaded == 2 * 3
    wide.close()  # the largest leaves: its copies go, the work spaces stay as large
    assert emulator.stats()["loaded_models"] - before["loaded_models"] == 3
    work, area = sizes(models["wide"])[0], max(io_area(models[n])[1] for n in ("wide", "mlp"))
    assert spaces.totals() == (3, 3 * malloc_reserved(work), 3 * malloc_reserved(area))
    sent = feeds("mlp", 5)
    assert_right(small, "mlp", small.infer(sent), sent)
    small.close()
    assert live(emulator.stats()) == live(before)


def test_a_failing_execution_fails_its_batch_and_the_other_streams_keep_serving(
    models: dict[str, Path],
) -> None:
    """One lane each, on streams 0 and 1: the 2nd execute_async call (classifier's, stream 1)
    fails: that batch fails with the code, mlp's batch beside it is right, and both go on."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=2))
    with (
        Session(models["mlp"], runtime="emulator", work_spaces=spaces) as mlp,
        Session(models["classifier"], runtime="emulator", work_spaces=spaces) as classifier,
    ):
        emulator.set_faults("mdl.execute_async:507011:2")
        first = mlp.submit([feeds("mlp", 2)])
        failing = classifier.submit([feeds("classifier", 2)])
        with pytest.raises(AclError) as caught:
            failing.result()
        assert caught.value.code == 507011
        assert_right(mlp, "mlp", first.result()[0], feeds("mlp", 2))
        for session, name in ((mlp, "mlp"), (classifier, "classifier")):
            sent = feeds(name, 3, seed=1)
            assert_right(session, name, session.infer(sent), sent)


def test_the_emulator_refuses_two_streams_given_one_io_area(models: dict[str, Path]) -> None:
    """A deliberately wrong pool, stream 1 given stream 0's I/O area: a session's two lanes (on
    streams 0 and 1) copy into the same views, and the emulator's witness fails the second
    batch with 500002 naming both streams (on a device both results would be corrupted); with
    an area per stream both answer (every other test here)."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=2))
    with Session(models["mlp"], runtime="emulator", pipeline_depth=2, work_spaces=spaces) as mlp:
        first, second = next(iter(spaces._pools.values()))._streams
        handles = first.stream.handle, second.stream.handle
        own, second.io = second.io, first.io
        try:
            sent = [feeds("mlp", 2, seed=n) for n in range(2)]
            batches = [mlp.submit([rows]) for rows in sent]
            assert_right(mlp, "mlp", batches[0].result()[0], sent[0])
            with pytest.raises(AclError) as caught:
                batches[1].result()
        finally:
            second.io = own
    assert caught.value.code == AclCode.GE_FAILURE
    message = str(caught.value)
    assert f"(on stream 0x{handles[1]:x}) writes its destination" in message
    assert f"still in flight on stream 0x{handles[0]:x}" in message


def test_a_pooled_model_the_device_has_no_memory_for_says_the_pools_arithmetic(
    models: dict[str, Path],
) -> None:
    """The pool holds mlp's 2 work spaces and I/O areas; the classifier's weights do not fit:
    its error states weights once + 2 larger work spaces + 2 larger I/O areas + what each of its
    2 lanes keeps, with the figures the pool and the budget use."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=2))
    with Session(models["mlp"], runtime="emulator", work_spaces=spaces, pipeline_depth=2):
        streams, pool_work, pool_io = spaces.totals()
        assert streams == 2 and pool_work and pool_io
        emulator.set_faults("rt.malloc:207001:*")
        with pytest.raises(DeviceFullError) as refused:
            Session(models["classifier"], runtime="emulator", work_spaces=spaces, pipeline_depth=2)
        emulator.set_faults(None)
    work, weight = sizes(models["classifier"])
    kept, need = io_area(models["classifier"])
    own = describe_om(models["classifier"], "emulator").lane_bytes - kept
    assert malloc_reserved(work) > pool_work // 2 and malloc_reserved(need) > pool_io // 2
    work, io, weights = malloc_reserved(work), malloc_reserved(need), malloc_reserved(weight)
    total = weights + 2 * work + 2 * io + 2 * own
    message = str(refused.value)
    assert f"device 0 is full: classifier.om needs weights of {weights} bytes (once)" in message
    assert f"the device host pool's 2 work spaces of {work} bytes" in message
    assert f"2 I/O areas of {io} bytes" in message
    assert f"{own} bytes for each of its 2 lane(s)" in message
    assert f"{weights} + 2 x {work} + 2 x {io} + 2 x {own} = {total} bytes" in message
    assert "207001" in message


def test_a_failure_the_stream_reports_fails_the_batch_that_reads_it_and_no_other(
    models: dict[str, Path],
) -> None:
    """A device failure comes back from acl.rt.synchronize_stream of the stream (here the next
    one, injected): the batch whose finish reads it fails with it; the next batches are right."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=2))
    with Session(models["mlp"], runtime="emulator", work_spaces=spaces) as mlp:
        emulator.set_faults(f"rt.synchronize_stream:{int(AclCode.RT_AICORE_EXCEPTION)}:1")
        with pytest.raises(AclError) as caught:
            mlp.infer(feeds("mlp", 2))
        assert caught.value.code == AclCode.RT_AICORE_EXCEPTION
        sent = feeds("mlp", 4, seed=2)
        assert_right(mlp, "mlp", mlp.infer(sent), sent)
        assert mlp.counters.failed_executions == 1


def test_per_lane_work_spaces_are_todays(models: dict[str, Path]) -> None:
    """--work-space per-lane: each lane loads its model into a work space of its own (as a
    model does that query_size gives no weights in a shared pool: add_mul)."""
    before = emulator.stats()
    spaces = WorkSpaces(WorkSpaceSettings(shared=False))
    with Session(models["mlp"], runtime="emulator", pipeline_depth=2, work_spaces=spaces) as s:
        assert not s.pooled
        work, weight = sizes(models["mlp"])
        held = emulator.stats()["device_bytes_in_use"] - before["device_bytes_in_use"]
        assert held == s.counters.device_bytes_held + 2 * malloc_reserved(work) + malloc_reserved(
            weight
        )
        sent = feeds("mlp", 3)
        assert_right(s, "mlp", s.infer(sent), sent)
    assert spaces.totals() == (0, 0, 0)
    shared = WorkSpaces(WorkSpaceSettings())
    with Session(models["add_mul"], runtime="emulator", work_spaces=shared) as weightless:
        assert not weightless.pooled and shared.totals() == (0, 0, 0)
        sent = feeds("add_mul", 2)
        assert_right(weightless, "add_mul", weightless.infer(sent), sent)


def test_settings_come_from_options_or_the_environment_and_say_what_is_wrong() -> None:
    assert WorkSpaceSettings.from_environment({}) == WorkSpaceSettings(DEFAULT_STREAMS, True)
    given = {
        "GE_DEVICE_HOST_STREAMS": "2",
        "GE_DEVICE_HOST_WORK_SPACE": "per-lane",
        "GE_DEVICE_HOST_ZERO_WORK_SPACE": "on",
    }
    settings = WorkSpaceSettings.from_environment(given)
    assert settings == WorkSpaceSettings(2, False, True)
    assert settings.environment() == given
    with pytest.raises(ValueError, match=r"streams must be 1\.\.64, got 0"):
        WorkSpaceSettings.parse("0", "shared")
    with pytest.raises(ValueError, match=r"must be one of \('shared', 'per-lane'\), got 'pooled'"):
        WorkSpaceSettings.from_environment({"GE_DEVICE_HOST_WORK_SPACE": "pooled"})


def test_a_stream_that_times_out_is_replaced_and_the_others_never_wait(
    models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """mlp on stream 0 hangs (its 1st execute_async never completes): its batch fails after
    execute_timeout_ms, the pool gives stream 0 a new stream, and the classifier on stream 1
    answers meanwhile and after; mlp answers again on the new stream."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=2))
    with (
        Session(
            models["mlp"], runtime="emulator", work_spaces=spaces, execute_timeout_ms=300
        ) as mlp,
        Session(models["classifier"], runtime="emulator", work_spaces=spaces) as classifier,
    ):
        emulator.set_faults("mdl.execute_async:hang:1")
        hung = mlp.submit([feeds("mlp", 2)])
        sent = feeds("classifier", 2)
        assert_right(classifier, "classifier", classifier.infer(sent), sent)
        with pytest.raises(ExecuteTimeoutError):
            hung.result()
        assert "stream 0 of the pool timed out: replaced for its 1 lane(s)" in caplog.text
        for session, name in ((mlp, "mlp"), (classifier, "classifier")):
            sent = feeds(name, 3, seed=4)
            assert_right(session, name, session.infer(sent), sent)


@pytest.mark.parametrize("zero", [False, True])
def test_zeroing_queues_a_memset_of_the_work_space_only_when_the_model_changes(
    models: dict[str, Path], zero: bool
) -> None:
    """One stream: mlp, mlp, classifier, classifier, mlp run on it. With zeroing on, the work
    space is zeroed before the 3rd and the 5th (the model changed; not before the first model's
    first); off (the default), never. The answers are right either way."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=1, zero_between_models=zero))
    with (
        Session(models["mlp"], runtime="emulator", work_spaces=spaces) as mlp,
        Session(models["classifier"], runtime="emulator", work_spaces=spaces) as classifier,
    ):
        before = emulator.stats()["memset_async_calls"]
        for session, name in [(mlp, "mlp")] * 2 + [(classifier, "classifier")] * 2 + [(mlp, "mlp")]:
            sent = feeds(name, 2)
            assert_right(session, name, session.infer(sent), sent)
        assert emulator.stats()["memset_async_calls"] - before == (2 if zero else 0)


def test_serve_and_the_device_host_take_the_same_options_and_pass_them_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`serve --device-host-...` gives the hosts it (or a stub) starts the variables the device
    host reads; the device host's own options default to those variables."""
    parser = cli.build_parser()
    args = parser.parse_args(
        ["serve", "models", "--device-host-streams", "2", "--device-host-work-space", "per-lane"]
    )
    given = work_space_settings(args, HOST_PREFIX).environment()
    assert given == {
        "GE_DEVICE_HOST_STREAMS": "2",
        "GE_DEVICE_HOST_WORK_SPACE": "per-lane",
        "GE_DEVICE_HOST_ZERO_WORK_SPACE": "off",
    }
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    host = cli.build_parser().parse_args(["device-host", "--device", "1"])
    assert work_space_settings(host) == WorkSpaceSettings(2, shared=False)
    bad = cli.build_parser().parse_args(["device-host", "--streams", "0"])
    with pytest.raises(ValueError, match=r"streams \(--streams, .*\) must be 1\.\.64, got 0"):
        work_space_settings(bad)


@pytest.mark.parametrize("streams", [1, 2])
def test_work_spaces_grow_under_a_model_that_keeps_executing(
    models: dict[str, Path], streams: int
) -> None:
    """mlp's two lanes execute without pause from a thread while the wider mlp and the
    classifier arrive and grow the work spaces (on one stream both lanes share its copy): every
    answer of every model is right, nothing fails."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=streams))
    with Session(models["mlp"], runtime="emulator", pipeline_depth=2, work_spaces=spaces) as mlp:
        stop = threading.Event()
        answered: list[int] = []
        failures: list[BaseException] = []

        def keep_executing() -> None:
            number = 0
            while not stop.is_set():
                number += 1
                sent = feeds("mlp", 1 + number % 8, seed=number)
                try:
                    pending = [mlp.submit([sent]), mlp.submit([sent])]
                    for batch in pending:
                        assert_right(mlp, "mlp", batch.result()[0], sent)
                except BaseException as exc:  # noqa: BLE001  (the test reports it)
                    failures.append(exc)
                    return
                answered.append(number)

        thread = threading.Thread(target=keep_executing)
        thread.start()
        try:
            for name in ("wide", "classifier"):
                with Session(models[name], runtime="emulator", work_spaces=spaces) as other:
                    sent = feeds(name, 3)
                    assert_right(other, name, other.infer(sent), sent)
        finally:
            stop.set()
            thread.join()
        assert not failures, failures
        assert answered
        largest = sizes(models["classifier"])[0]
        area = malloc_reserved(io_area(models["classifier"])[1])
        assert spaces.totals() == (streams, streams * malloc_reserved(largest), streams * area)


@pytest.mark.parametrize("max_output_bytes", [None, 4096])
def test_a_data_dependent_model_shares_the_stream_with_another(
    models: dict[str, Path], om_nonzero: Path, max_output_bytes: int | None
) -> None:
    """NonZero (its output's size known only after it ran) and mlp on one stream: with pooled
    outputs it queues there like any model; with outputs ACL allocates it executes
    synchronously, the stream made idle first and held until it returns. Answers right."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=1))
    with (
        Session(models["mlp"], runtime="emulator", work_spaces=spaces) as mlp,
        Session(
            om_nonzero, runtime="emulator", work_spaces=spaces, max_output_bytes=max_output_bytes
        ) as nonzero,
    ):
        assert nonzero.pooled
        for number in range(3):
            x = np.random.default_rng(number).random((4, 4)).astype(np.float32)
            pending = mlp.submit([feeds("mlp", 2, seed=number)])
            got = nonzero.infer({"x": x})
            want = reference(om_nonzero, {"x": x})
            np.testing.assert_array_equal(got["indices"], want["indices"])
            assert_right(mlp, "mlp", pending.result()[0], feeds("mlp", 2, seed=number))


def test_many_lanes_of_different_models_share_their_streams_io_areas_each_answering_right(
    models: dict[str, Path],
) -> None:
    """2 streams: mlp x2 instances, the wider mlp and the classifier, 2 lanes each, so each
    stream's I/O area serves a lane of every session (4 lanes of 3 models). Batches of every
    model in flight at once, from 4 threads, rows changing gears: on each stream a lane's copy
    in runs after the copy out of the lane before it (stream order), so every answer is
    onnxruntime's and nothing fails (the emulator fails an execution whose work memory another
    stream's execution still uses, 500002)."""
    spaces = WorkSpaces(WorkSpaceSettings(streams=2))
    order = ["mlp", "mlp", "wide", "classifier"]
    sessions = [
        Session(models[name], runtime="emulator", pipeline_depth=2, work_spaces=spaces)
        for name in order
    ]
    try:
        failures: list[BaseException] = []

        def serve(number: int) -> None:
            try:
                for round_ in range(6):
                    pending = [
                        (session, name, sent, session.submit([sent]))
                        for session, name in zip(sessions, order)
                        for sent in [feeds(name, 1 + (number + round_) % 8, seed=number + round_)]
                    ]
                    for session, name, sent, batch in pending:
                        assert_right(session, name, batch.result()[0], sent)
            except BaseException as exc:  # noqa: BLE001  (the test reports it)
                failures.append(exc)

        threads = [threading.Thread(target=serve, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        assert sum(s.counters.failed_executions for s in sessions) == 0
        assert sum(s.counters.executions for s in sessions) >= 4 * 6 * 4
        # every lane ran since the classifier grew the areas: its views are of its stream's one
        lanes = [lane for session in sessions for lane in session._lanes]
        assert len(lanes) == 8 and all(slot.shared for lane in lanes for slot in lane.input_slots)
        areas: dict[int, set[int]] = {0: set(), 1: set()}  # stream: its lanes' areas
        for lane in lanes:
            assert lane.seat is not None
            views = [slot.device for slot in lane.input_slots]
            areas[lane.seat.index] |= {id(v.area) for v in views if isinstance(v, DeviceView)}
        assert [len(found) for found in areas.values()] == [1, 1]
        assert areas[0] != areas[1]
    finally:
        for session in sessions:
            session.close()
    assert spaces.totals() == (0, 0, 0)


def test_an_image_input_keeps_its_own_device_buffers_beside_shared_outputs(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """A classifier whose input DVPP writes (its resize jobs run on other streams) and mlp on
    one stream: the image input stays each lane's own DVPP memory, its output is a view of the
    stream's I/O area; each picture answers as in a session of its own, mlp's batches beside it
    as onnxruntime."""
    pytest.importorskip("PIL.Image", reason="Pillow is the emulator extra's")
    from test_runtime_dvpp import classifier, files, jpeg

    om = classifier(tmp_path / "images", 32, 32)
    image = ImageInput("image")
    with Session(om, runtime="emulator", image=image) as alone:
        want = {v: alone.infer({"image": files(jpeg(64, 48, v))})["logits"] for v in (0, 200)}
    spaces = WorkSpaces(WorkSpaceSettings(streams=1))
    with (
        Session(om, runtime="emulator", image=image, pipeline_depth=2, work_spaces=spaces) as pics,
        Session(models["mlp"], runtime="emulator", pipeline_depth=2, work_spaces=spaces) as mlp,
    ):
        for lane in pics._lanes:
            (picture,) = lane.input_slots
            assert picture.device_written and not picture.shared
            assert all(slot is not None and slot.shared for slot in lane.output_slots)
        for number in range(3):
            values = (0, 200) if number % 2 else (200, 0)
            sent = feeds("mlp", 2 + number, seed=number)
            pending = [(v, pics.submit([{"image": files(jpeg(64, 48, v))}])) for v in values] + [
                (None, mlp.submit([sent]))
            ]
            for value, batch in pending:
                (got,) = batch.result()
                if value is None:
                    assert_right(mlp, "mlp", got, sent)
                else:
                    np.testing.assert_allclose(got["logits"], want[value], rtol=1e-5, atol=1e-5)


def test_a_dynamic_aipp_model_keeps_its_parameters_when_the_areas_grow_under_it(
    models: dict[str, Path], om_aipp_dynamic: Path, tmp_path: Path
) -> None:
    """A dynamic-AIPP model (its AIPP parameters a buffer of each lane's own, set into each
    dataset) answers on one stream as in a session of its own, before and after the classifier
    grows the stream's I/O area, which makes the lanes build their datasets again."""
    config = tmp_path / "aipp.cfg"
    config.write_text(onnx_models.AIPP_RGB888)
    rng = np.random.default_rng(9)
    raws = [rng.integers(0, 256, (1 + n % 2, 10, 10, 3), dtype=np.uint8) for n in range(4)]
    with Session(om_aipp_dynamic, runtime="emulator", aipp_config=config) as alone:
        want = [alone.infer({"image": raw})["features"] for raw in raws]
    spaces = WorkSpaces(WorkSpaceSettings(streams=1))
    with Session(
        om_aipp_dynamic,
        runtime="emulator",
        pipeline_depth=2,
        aipp_config=config,
        work_spaces=spaces,
    ) as aipp:
        before = spaces.totals()[2]
        for raw, expected in zip(raws, want):
            np.testing.assert_allclose(aipp.infer({"image": raw})["features"], expected)
        with Session(models["classifier"], runtime="emulator", work_spaces=spaces) as grows:
            assert spaces.totals()[2] > before
            sent = feeds("classifier", 2)
            assert_right(grows, "classifier", grows.infer(sent), sent)
            for raw, expected in zip(raws, want):
                np.testing.assert_allclose(aipp.infer({"image": raw})["features"], expected)
