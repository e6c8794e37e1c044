"""`Session` on the emulator, in host and device (RC) mode: results against onnxruntime, pooling,
errors, threads, teardown."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from emulator_helpers import LIVE_KEYS, delta, live
from onnx_models import KEEP_FP32, build_dims_model, reference

from ge_python_backend import emulator
from ge_python_backend.ascend import malloc_reserved
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.runtime import (
    AclError,
    GearInfo,
    InputError,
    ModelFileError,
    Session,
    TensorSpec,
    load_acl,
    placement,
)

pytestmark = [
    # A failing release in a finalizer would otherwise only be printed.
    pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.usefixtures("emulator_run_mode"),  # every test in host (EP) and device (RC) mode
]


@pytest.fixture(autouse=True)
def _emulator_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("GE_PYTHON_BACKEND_ACL", raising=False)
    emulator.set_faults(None)
    yield
    emulator.set_faults(None)


def assert_outputs_equal(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype, name
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def assert_copied(changed: Mapping[str, Any], run_mode: str, bytes_in: int, bytes_out: int) -> None:
    """The emulator's copy counters: host to device in and device to host out, or both device
    to device in device (RC) mode, where host memory is device memory."""
    if run_mode == "device":
        assert "h2d_bytes" not in changed and "d2h_bytes" not in changed
        assert changed["d2d_bytes"] == bytes_in + bytes_out
    else:
        assert "d2d_bytes" not in changed
        assert (changed["h2d_bytes"], changed["d2h_bytes"]) == (bytes_in, bytes_out)


def mlp_rows(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((rows, 16)).astype(np.float32)}


# -- description ----------------------------------------------------------------------------


def test_dynamic_batch_description(om_dynamic_batch: Path) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        (x,) = session.inputs
        assert (x.name, x.dtype, x.triton_dtype, x.shape) == ("x", np.float32, "FP32", (-1, 16))
        assert isinstance(x.format, str)
        assert [(o.name, o.triton_dtype, o.shape) for o in session.outputs] == [
            ("y", "FP32", (-1, 8)),
            ("z", "FP32", (-1, 1)),
        ]
        assert session.gears == GearInfo("batch", True, (1, 2, 4, 8), (), (), 8)


def test_static_description(om_static: Path) -> None:
    with Session(om_static, runtime="emulator") as session:
        assert [s.shape for s in session.inputs] == [(4, 16)]
        assert [s.shape for s in session.outputs] == [(4, 8), (4, 1)]
        assert session.gears == GearInfo("static", True, (4,), (), (), 4)


def test_hw_description_hides_the_gear_input(om_hw: Path) -> None:
    with Session(om_hw, runtime="emulator") as session:
        assert session.inputs == (
            TensorSpec("image", np.dtype(np.float32), "FP32", (1, 3, -1, -1), "NCHW"),
        )
        assert [(s.name, s.shape) for s in session.outputs] == [("features", (1, 8))]
        assert session.gears == GearInfo("hw", True, (1,), ((16, 16), (32, 32)), (), 1)


def test_dims_description(om_dims: Path) -> None:
    with Session(om_dims, runtime="emulator") as session:
        assert [(s.name, s.triton_dtype, s.shape, s.format) for s in session.inputs] == [
            ("input_ids", "INT64", (1, -1), "ND"),
            ("attention_mask", "INT64", (1, -1), "ND"),
        ]
        assert [(s.name, s.shape) for s in session.outputs] == [("hidden", (1, -1, 4))]
        assert session.gears.kind == "dims" and session.gears.batched
        assert session.gears.dims_gears == (
            ((1, 8), (1, 8)),
            ((1, 16), (1, 16)),
            ((1, 32), (1, 32)),
        )
        assert session.gears.max_batch == 1


# -- results against onnxruntime ------------------------------------------------------------


def test_dynamic_batch_matches_onnxruntime_for_every_batch_size(om_dynamic_batch: Path) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        for rows in range(1, 2 * 8 + 4):
            feeds = mlp_rows(rows, seed=rows)
            assert_outputs_equal(session.infer(feeds), reference(om_dynamic_batch, feeds))


def test_static_batch_matches_onnxruntime_for_every_batch_size(om_static: Path) -> None:
    with Session(om_static, runtime="emulator") as session:
        for rows in range(1, 2 * 4 + 3):
            feeds = mlp_rows(rows, seed=rows)
            assert_outputs_equal(session.infer(feeds), reference(om_static, feeds))
        # 6 rows on a static batch-4 model run as 4 + 4 with two padded rows
        before = session.counters
        session.infer(mlp_rows(6))
        after = session.counters
        assert (after.executions - before.executions, after.padded_rows - before.padded_rows) == (
            2,
            2,
        )


def test_hw_gears_match_onnxruntime(om_hw: Path) -> None:
    rng = np.random.default_rng(7)
    with Session(om_hw, runtime="emulator") as session:
        for size in (16, 32):
            for rows in range(1, 4):
                feeds = {"image": rng.standard_normal((rows, 3, size, size)).astype(np.float32)}
                assert_outputs_equal(session.infer(feeds), reference(om_hw, feeds))


def test_dims_gears_match_onnxruntime(om_dims: Path) -> None:
    rng = np.random.default_rng(8)
    with Session(om_dims, runtime="emulator") as session:
        for length in (8, 16, 32):
            for rows in range(1, 4):
                feeds = {
                    "input_ids": rng.integers(0, 32, (rows, length), dtype=np.int64),
                    "attention_mask": rng.integers(0, 2, (rows, length), dtype=np.int64),
                }
                assert_outputs_equal(session.infer(feeds), reference(om_dims, feeds))


def test_mixed_dtypes_match_onnxruntime(om_mixed_types: Path) -> None:
    rng = np.random.default_rng(9)
    with Session(om_mixed_types, runtime="emulator") as session:
        assert [s.triton_dtype for s in session.outputs] == ["INT32", "BOOL", "FP16"]
        for rows in range(1, 10):
            feeds: dict[str, np.ndarray] = {
                "x": rng.integers(-5, 5, (rows, 4), dtype=np.int32),
                "h": rng.standard_normal((rows, 4)).astype(np.float16),
            }
            assert_outputs_equal(session.infer(feeds), reference(om_mixed_types, feeds))


def test_infer_many_packs_parts_and_splits_them_back(om_dynamic_batch: Path) -> None:
    parts = [mlp_rows(rows, seed=rows) for rows in (3, 5, 1, 9, 2)]  # 20 rows: 8 + 8 + 4
    with Session(om_dynamic_batch, runtime="emulator") as session:
        results = session.infer_many(parts)
        counters = session.counters
        assert session.infer_many([]) == []
    for feeds, result in zip(parts, results):
        assert_outputs_equal(result, reference(om_dynamic_batch, feeds))
    assert (counters.executions, counters.rows, counters.padded_rows) == (3, 20, 0)


def test_infer_many_runs_different_hw_gears_in_separate_chunks(om_hw: Path) -> None:
    rng = np.random.default_rng(10)
    parts = [
        {"image": rng.standard_normal((rows, 3, size, size)).astype(np.float32)}
        for rows, size in ((1, 16), (2, 32), (1, 16))
    ]
    with Session(om_hw, runtime="emulator") as session:
        results = session.infer_many(parts)
        assert session.counters.executions == 4
    for feeds, result in zip(parts, results):
        assert_outputs_equal(result, reference(om_hw, feeds))


def test_non_contiguous_inputs_are_accepted(om_add_mul: Path) -> None:
    rng = np.random.default_rng(11)
    wide = rng.standard_normal((6, 8)).astype(np.float32)
    transposed = np.asfortranarray(rng.standard_normal((6, 4)).astype(np.float32))
    feeds = {"a": wide[:, ::2], "b": transposed}
    assert not feeds["a"].flags.c_contiguous and not feeds["b"].flags.c_contiguous
    with Session(om_add_mul, runtime="emulator") as session:
        assert_outputs_equal(session.infer(feeds), reference(om_add_mul, feeds))


# -- pooling --------------------------------------------------------------------------------


def test_steady_state_allocates_nothing_and_copies_once_per_tensor(
    om_dynamic_batch: Path, emulator_run_mode: str
) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        session.infer(mlp_rows(4))  # warm-up
        before, counters_before = emulator.stats(), session.counters
        session.infer(mlp_rows(4, seed=1))  # exactly gear 4
        after, counters_after = emulator.stats(), session.counters
    used_in, used_out = 4 * 16 * 4, 4 * (8 + 1) * 4
    changed = delta(before, after)
    for key in ("malloc_calls", "malloc_host_calls", "dataset_creations", "data_buffer_creations"):
        assert key not in changed, f"{key} changed by {changed.get(key)} in steady state"
    assert changed["memcpy_calls"] == 1 + 2  # one copy in for x, one out each for y and z
    assert_copied(changed, emulator_run_mode, used_in, used_out)
    assert changed["execute_async_calls"] == 1
    assert changed["set_dynamic_calls"] == 1
    assert counters_after.h2d_bytes - counters_before.h2d_bytes == used_in
    assert counters_after.d2h_bytes - counters_before.d2h_bytes == used_out
    assert counters_after.executions - counters_before.executions == 1


def test_padded_chunk_copies_the_gear_in_and_the_real_rows_out(
    om_dynamic_batch: Path, emulator_run_mode: str
) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        session.infer(mlp_rows(8))  # warm-up at the largest gear
        before = emulator.stats()
        session.infer(mlp_rows(3))  # runs gear 4 with one zeroed row
        changed = delta(before, emulator.stats())
        assert session.counters.padded_rows == 1
    assert changed["memcpy_calls"] == 3
    assert_copied(changed, emulator_run_mode, 4 * 16 * 4, 3 * (8 + 1) * 4)
    assert "malloc_calls" not in changed and "dataset_creations" not in changed


@pytest.mark.parametrize("depth", [1, 2])
def test_padded_rows_are_zeroed_before_the_copy(om_add_mul: Path, depth: int) -> None:
    # Rows of a previous, larger request stay in the reused pinned buffer unless zeroed; the
    # model is elementwise, so a stale row could only show up if it was copied to the device.
    with Session(om_add_mul, runtime="emulator", pipeline_depth=depth) as session:
        full = np.full((4, 4), 7, np.float32)
        for _ in range(depth):  # every lane runs the larger request once
            session.infer({"a": full, "b": full})
        ones = np.ones((3, 4), np.float32)
        pending = [session.infer_async({"a": ones, "b": ones}) for _ in range(depth)]
        for batch in pending:
            batch.result()
        for lane in session._lanes:
            padded_row = lane.input_slots[0].host.array[3 * 4 * 4 : 4 * 4 * 4].view(np.float32)
            assert (padded_row == 0).all()


def test_counters_report_device_bytes_held(om_dynamic_batch: Path) -> None:
    before = emulator.stats()["device_bytes_in_use"]
    with Session(om_dynamic_batch, runtime="emulator") as session:
        # x, ascend_mbatch_shape_data (one int64), y and z, each for the largest gear (8 rows),
        # as the runtime reserves them (a multiple of 32, plus 32): 544 + 64 + 288 + 64
        assert session.counters.device_bytes_held == 960
        # ... and the model's work space and weights, which the runtime allocates for the load
        work, weight, _ = emulator.acl.mdl.query_size(str(om_dynamic_batch))
        model_bytes = malloc_reserved(work) + malloc_reserved(weight)
        assert emulator.stats()["device_bytes_in_use"] - before == 960 + model_bytes


# -- teardown -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ["om_static", "om_dynamic_batch", "om_hw", "om_dims"])
def test_close_releases_everything_and_is_idempotent(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    om = request.getfixturevalue(fixture)
    before = live(emulator.stats())
    session = Session(om, runtime="emulator")
    assert live(emulator.stats()) != before
    session.close()
    session.close()
    assert session.closed
    assert live(emulator.stats()) == before
    assert before == dict.fromkeys(LIVE_KEYS, 0)
    with pytest.raises(RuntimeError, match="is closed"):
        session.infer(mlp_rows(1))


def test_teardown_order_is_model_buffers_stream_context_device(
    om_dynamic_batch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acl = load_acl("emulator")
    calls: list[str] = []

    def recording(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls.append(name)
            return real(*args)

        return call

    for module, names in (
        (acl, ["destroy_data_buffer"]),
        (acl.mdl, ["unload", "destroy_desc", "destroy_dataset"]),
        (acl.rt, ["free", "free_host", "destroy_stream", "destroy_context", "reset_device"]),
    ):
        for name in names:
            monkeypatch.setattr(module, name, recording(name, getattr(module, name)))
    Session(om_dynamic_batch, runtime="emulator").close()
    assert calls[:2] in (["destroy_desc", "unload"], ["unload", "destroy_desc"])
    assert calls[2:4] == ["free", "free"]  # the load's work space and weights, once unloaded
    middle = calls[4:-3]
    assert set(middle) == {"destroy_data_buffer", "destroy_dataset", "free", "free_host"}
    # each dataset's descriptors go before the memory they describe
    assert middle.index("destroy_dataset") < middle.index("free")
    assert calls[-3:] == ["destroy_stream", "destroy_context", "reset_device"]


def test_garbage_collection_releases_an_unclosed_session(om_dynamic_batch: Path) -> None:
    before = live(emulator.stats())
    session = Session(om_dynamic_batch, runtime="emulator")
    session.infer(mlp_rows(2))
    del session
    assert live(emulator.stats()) == before


def test_two_sessions_share_the_device(om_dynamic_batch: Path, om_static: Path) -> None:
    before = live(emulator.stats())
    first = Session(om_dynamic_batch, runtime="emulator")
    with Session(om_static, runtime="emulator") as second:
        first.close()  # must not reset the device under the second session
        assert second.infer(mlp_rows(2))["y"].shape == (2, 8)
    assert live(emulator.stats()) == before


def test_sessions_of_a_device_share_one_context_and_each_models_weights(
    om_dynamic_batch: Path, om_static: Path
) -> None:
    """Every lane of every session of one `.om` in a process (a device host's instances) loads
    with one weight buffer (aclmdlLoadFromFileWithMem, weightPtr) and a work space of its own,
    all in the process's one context of the device."""
    before = emulator.stats()
    first = Session(om_dynamic_batch, runtime="emulator", pipeline_depth=2)
    opened = emulator.stats()
    work, weight, ret = emulator.acl.mdl.query_size(str(om_dynamic_batch))
    assert ret == 0 and work > 0 and weight > 0
    # the device opened (its default context) and one context created; 2 lanes' work spaces and
    # one copy of the weights, with the lanes' buffers
    assert opened["live_contexts"] - before["live_contexts"] == 2
    lanes = first.counters.device_bytes_held
    model_bytes = 2 * malloc_reserved(work) + malloc_reserved(weight)
    assert opened["device_bytes_in_use"] - before["device_bytes_in_use"] == lanes + model_bytes
    with Session(om_dynamic_batch, runtime="emulator", pipeline_depth=2) as second:
        grown = delta(opened, emulator.stats())
        assert "live_contexts" not in grown  # the same context
        assert grown["device_bytes_in_use"] == lanes + 2 * malloc_reserved(work)  # no weights
        with Session(om_static, runtime="emulator") as other:  # another model: its own weights
            own_work, own_weight, _ = emulator.acl.mdl.query_size(str(om_static))
            assert delta(opened, emulator.stats())["device_bytes_in_use"] == (
                grown["device_bytes_in_use"]
                + other.counters.device_bytes_held
                + malloc_reserved(own_work)
                + malloc_reserved(own_weight)
            )
            first.close()  # the weights stay while the second session uses them
            assert_outputs_equal(
                second.infer(mlp_rows(3)), reference(om_dynamic_batch, mlp_rows(3))
            )
    assert live(emulator.stats()) == live(before)


def test_the_placement_records_hold_the_weights_once_and_a_work_space_per_lane(
    om_dynamic_batch: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the sessions of one `.om` in a process record on the device (`Placement`) is what
    they hold there: each one's lanes and work spaces, and the weights they share once, under
    the first one's label, for as long as any of them holds them (also after the first one
    closed)."""
    monkeypatch.setenv(placement.RUN_DIR_ENV, str(tmp_path / "run"))
    before = emulator.stats()["device_bytes_in_use"]

    def recorded() -> dict[str, int]:
        by_label: dict[str, int] = {}
        for holding in placement.holders(0):
            by_label[holding.label] = by_label.get(holding.label, 0) + holding.bytes
        return by_label

    first = Session(om_dynamic_batch, runtime="emulator", pipeline_depth=2, label="a")
    with Session(om_dynamic_batch, runtime="emulator", pipeline_depth=2, label="b") as second:
        work, weight, ret = emulator.acl.mdl.query_size(str(om_dynamic_batch))
        assert ret == 0
        lanes = first.counters.device_bytes_held
        assert lanes == second.counters.device_bytes_held
        assert recorded() == {
            "a": lanes + 2 * malloc_reserved(work) + malloc_reserved(weight),
            "b": lanes + 2 * malloc_reserved(work),
        }
        assert sum(recorded().values()) == emulator.stats()["device_bytes_in_use"] - before
        first.close()
        assert recorded() == {"a": malloc_reserved(weight), "b": lanes + 2 * malloc_reserved(work)}
        assert sum(recorded().values()) == emulator.stats()["device_bytes_in_use"] - before
    assert placement.holders(0) == []


# -- threads --------------------------------------------------------------------------------


def test_a_session_works_from_another_thread(om_dynamic_batch: Path) -> None:
    feeds = mlp_rows(5)
    with Session(om_dynamic_batch, runtime="emulator") as session:
        box: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: box.update(result=session.infer(feeds)))
        thread.start()
        thread.join()
        assert_outputs_equal(box["result"], reference(om_dynamic_batch, feeds))


def test_concurrent_calls_are_serialized(om_dynamic_batch: Path) -> None:
    requests = [mlp_rows(rows, seed=rows) for rows in range(1, 13)]
    results: dict[int, Any] = {}
    errors: list[BaseException] = []
    with Session(om_dynamic_batch, runtime="emulator") as session:

        def work(index: int) -> None:
            try:
                for _ in range(3):
                    results[index] = session.infer(requests[index])
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(requests))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert not errors
    for index, feeds in enumerate(requests):
        assert_outputs_equal(results[index], reference(om_dynamic_batch, feeds))


def test_close_from_another_thread(om_dynamic_batch: Path) -> None:
    before = live(emulator.stats())
    session = Session(om_dynamic_batch, runtime="emulator")
    thread = threading.Thread(target=session.close)
    thread.start()
    thread.join()
    assert session.closed
    assert live(emulator.stats()) == before


# -- device errors --------------------------------------------------------------------------


def test_execute_failure_raises_acl_error_with_its_name(om_dynamic_batch: Path) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        emulator.set_faults("mdl.execute_async:507011:1")
        with pytest.raises(AclError) as caught:
            session.infer(mlp_rows(3))
        error = caught.value
        assert (error.code, error.name, error.api) == (
            507011,
            "ACL_ERROR_RT_MODEL_EXECUTE",
            "acl.mdl.execute_async",
        )
        assert error.explanation == "model execution failed"
        assert "ACL_ERROR_RT_MODEL_EXECUTE" in str(error)
        # the next call works again
        feeds = mlp_rows(3)
        assert_outputs_equal(session.infer(feeds), reference(om_dynamic_batch, feeds))


def test_a_failure_reported_at_synchronize_is_raised(om_dynamic_batch: Path) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        emulator.set_faults("rt.synchronize_stream:507015:1")
        with pytest.raises(AclError) as caught:
            session.infer(mlp_rows(1))
        assert (caught.value.name, caught.value.api) == (
            "ACL_ERROR_RT_AICORE_EXCEPTION",
            "acl.rt.synchronize_stream",
        )


def test_a_copy_failure_is_raised(om_dynamic_batch: Path) -> None:
    with Session(om_dynamic_batch, runtime="emulator") as session:
        emulator.set_faults("rt.memcpy_async:507013:2")  # the D2H of `y`
        with pytest.raises(
            AclError, match="acl.rt.memcpy_async failed with 507013 ACL_ERROR_RT_SYS_DMA"
        ):
            session.infer(mlp_rows(2))


@pytest.mark.parametrize(
    "call", ["rt.malloc:207001:3", "rt.malloc_host:207001:2", "rt.create_stream:207008:1"]
)
def test_a_failure_while_opening_releases_what_was_made(om_dynamic_batch: Path, call: str) -> None:
    before = live(emulator.stats())
    emulator.set_faults(call)
    with pytest.raises(AclError) as caught:
        Session(om_dynamic_batch, runtime="emulator")
    assert caught.value.code == int(call.split(":")[1])
    assert live(emulator.stats()) == before


def test_a_model_the_emulator_cannot_parse(tmp_path: Path) -> None:
    om = tmp_path / "broken.om"
    om.write_bytes(b"not a model")
    before = live(emulator.stats())
    with pytest.raises(AclError) as caught:
        Session(om, runtime="emulator")
    assert (caught.value.name, caught.value.api) == (
        "ACL_ERROR_PARSE_MODEL",
        "acl.mdl.load_from_file",
    )
    assert caught.value.recent  # the runtime's own reason is attached
    assert live(emulator.stats()) == before


# -- model file checks ----------------------------------------------------------------------


def test_sha256_is_verified_before_loading(om_static: Path) -> None:
    digest = hashlib.sha256(om_static.read_bytes()).hexdigest()
    with Session(om_static, runtime="emulator", sha256=digest.upper()):
        pass
    loads = emulator.stats()["model_loads"]
    wrong = "0" * 64
    with pytest.raises(ModelFileError) as caught:
        Session(om_static, runtime="emulator", sha256=wrong)
    assert str(caught.value) == (
        f"{om_static}: sha256 mismatch: expected {wrong}, the file has {digest}; "
        "refusing to load it"
    )
    assert emulator.stats()["model_loads"] == loads
    with pytest.raises(ValueError, match="sha256 must be 64 hexadecimal characters, got 'abc'"):
        Session(om_static, runtime="emulator", sha256="abc")


def test_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match=r"model file not found: .*nothing\.om"):
        Session(tmp_path / "nothing.om", runtime="emulator")


# -- input errors ---------------------------------------------------------------------------


@pytest.fixture()
def add_mul_session(om_add_mul: Path) -> Iterator[Session]:
    with Session(om_add_mul, runtime="emulator") as session:
        yield session


def ab(rows_a: int = 2, rows_b: int = 2, dtype: Any = np.float32) -> dict[str, Any]:
    return {"a": np.zeros((rows_a, 4), dtype), "b": np.zeros((rows_b, 4), np.float32)}


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        (
            ab(dtype=np.float64),
            "input 'a': expected dtype float32 (FP32), got float64 (FP64); convert it explicitly",
        ),
        (
            {"a": np.zeros((2, 5), np.float32), "b": np.zeros((2, 4), np.float32)},
            r"input 'a': expected shape (rows, 4), got (2, 5)",
        ),
        (
            {"a": np.zeros(4, np.float32), "b": np.zeros((1, 4), np.float32)},
            r"input 'a': expected shape (rows, 4), got (4,)",
        ),
        (
            {"a": np.zeros((2, 4), np.float32)},
            "missing input(s) b; the model's inputs are a FP32 (rows, 4), b FP32 (rows, 4)",
        ),
        ({**ab(), "c": np.zeros(1)}, "unknown input(s) 'c'; the model's inputs are a FP32"),
        (
            {"a": [[0.0] * 4] * 2, "b": np.zeros((2, 4), np.float32)},
            "input 'a': expected a numpy.ndarray of float32 (FP32), got list",
        ),
        (
            ab(rows_a=2, rows_b=3),
            "inputs must have the same number of rows (axis 0); a has 2, b has 3",
        ),
        (ab(rows_a=0, rows_b=0), "input 'a': expected at least one row, got 0"),
        ([np.zeros((2, 4))], "expected a mapping of input name to numpy array, got list"),
    ],
)
def test_input_errors_say_what_was_expected_and_what_arrived(
    add_mul_session: Session, feeds: Any, message: str
) -> None:
    with pytest.raises(InputError) as caught:
        add_mul_session.validate(feeds)
    assert message in str(caught.value)
    with pytest.raises(InputError):
        add_mul_session.infer(feeds)


def test_validate_returns_rows(add_mul_session: Session) -> None:
    assert add_mul_session.validate(ab(rows_a=5, rows_b=5)) == 5


def test_infer_many_checks_every_part_before_running(add_mul_session: Session) -> None:
    executions = add_mul_session.counters.executions
    with pytest.raises(InputError) as caught:
        add_mul_session.infer_many([ab(), ab(), ab(dtype=np.float64), ab(dtype=np.float64)])
    assert add_mul_session.counters.executions == executions
    assert caught.value.request == 2  # the first one that does not fit
    with pytest.raises(InputError) as caught:
        add_mul_session.validate(ab(dtype=np.float64))
    assert caught.value.request is None


def test_hw_shape_that_is_not_a_gear(om_hw: Path) -> None:
    with Session(om_hw, runtime="emulator") as session:
        with pytest.raises(InputError) as caught:
            session.validate({"image": np.zeros((1, 3, 20, 16), np.float32)})
        assert str(caught.value) == (
            "input shapes image (1, 3, 20, 16) match none of the model's HW gears: 16x16; 32x32"
        )
        with pytest.raises(
            InputError, match=r"expected shape \(rows, 3, \?, \?\), got \(1, 4, 16, 16\)"
        ):
            session.validate({"image": np.zeros((1, 4, 16, 16), np.float32)})


def test_dims_shape_that_is_not_a_gear(om_dims: Path) -> None:
    with Session(om_dims, runtime="emulator") as session:
        ids = np.zeros((1, 8), np.int64)
        with pytest.raises(InputError) as caught:
            session.validate({"input_ids": ids, "attention_mask": np.zeros((1, 16), np.int64)})
        assert str(caught.value) == (
            "input shapes input_ids (1, 8), attention_mask (1, 16) match none of the model's dims "
            "gears: input_ids (1, 8), attention_mask (1, 8); input_ids (1, 16), attention_mask "
            "(1, 16); input_ids (1, 32), attention_mask (1, 32)"
        )
        assert session.validate({"input_ids": ids, "attention_mask": ids}) == 1


def _dims_om(directory: Path, dynamic_dims: str) -> Path:
    """The dims model (`build_dims_model`) compiled in `directory` with `dynamic_dims`."""
    return compile_onnx(
        build_dims_model(directory / "dims.onnx"),
        directory / "dims",
        input_shape="input_ids:-1,-1;attention_mask:-1,-1",
        dynamic_dims=dynamic_dims,
        input_format="ND",
        **KEEP_FP32,
    )


def _dims_requests(
    rng: np.random.Generator, shapes: tuple[tuple[int, int], ...]
) -> list[dict[str, np.ndarray]]:
    """A request to the dims model per shape in `shapes`."""
    return [
        {
            "input_ids": rng.integers(0, 32, shape, dtype=np.int64),
            "attention_mask": rng.integers(0, 2, shape, dtype=np.int64),
        }
        for shape in shapes
    ]


@pytest.fixture(scope="module")
def om_dims_unbatched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dims model with axis 0 among the gear dims: no batch axis, whole inputs per gear."""
    return _dims_om(tmp_path_factory.mktemp("dims_unbatched"), "1,8,1,8;2,16,2,16")


def test_an_unbatched_model_runs_whole_requests(om_dims_unbatched: Path) -> None:
    parts = _dims_requests(np.random.default_rng(12), ((2, 16), (1, 8), (2, 16)))
    with Session(om_dims_unbatched, runtime="emulator") as session:
        assert session.gears == GearInfo(
            "dims", False, (), (), (((1, 8), (1, 8)), ((2, 16), (2, 16))), 0
        )
        assert [s.shape for s in session.inputs] == [(-1, -1), (-1, -1)]
        assert session.validate(parts[0]) == 1
        results = session.infer_many(parts)
        assert session.counters.executions == 3
        with pytest.raises(
            InputError, match=r"input_ids \(2, 8\), attention_mask \(2, 8\) match none"
        ):
            session.validate({name: array[:, :8] for name, array in parts[0].items()})
    for feeds, result in zip(parts, results):
        assert_outputs_equal(result, reference(om_dims_unbatched, feeds))


@pytest.fixture(scope="module")
def om_dims_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dims model with gears of batch sizes 1, 4 times lengths 8, 16 (as migrate compiles a
    batched model with a geared axis)."""
    return _dims_om(tmp_path_factory.mktemp("dims_rows"), "1,8,1,8;1,16,1,16;4,8,4,8;4,16,4,16")


def test_dims_gears_of_batch_sizes_pad_rows_as_batch_gears_do(om_dims_rows: Path) -> None:
    parts = _dims_requests(np.random.default_rng(13), ((3, 16), (6, 8), (1, 8)))
    with Session(om_dims_rows, runtime="emulator") as session:
        assert session.gears.batched and session.gears.batch_gears == (1, 4)
        assert [s.shape for s in session.inputs] == [(-1, -1), (-1, -1)]
        results = [session.infer(feeds) for feeds in parts]
        # 3 rows of length 16 on the 4-row gear; 6 rows of length 8 on two; 1 row on one
        assert session.counters.executions == 1 + 2 + 1
        with pytest.raises(
            InputError, match=r"input_ids \(2, 12\), attention_mask \(2, 12\) match"
        ):
            session.validate({name: array[:2, :12] for name, array in parts[0].items()})
    for feeds, result in zip(parts, results):
        assert_outputs_equal(result, reference(om_dims_rows, feeds))


def test_dims_gears_whose_outputs_lack_the_rows_run_each_gear_as_sent(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, save

    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=0, noop_with_empty_axes=0)],
        "column_sums",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    onnx_path = tmp_path / "sums.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(onnx_path))
    om = compile_onnx(
        onnx_path,
        tmp_path / "sums",
        input_shape="x:-1,-1",
        dynamic_dims="1,8;1,16;4,8;4,16",
        input_format="ND",
        **KEEP_FP32,
    )
    feeds = {"x": np.arange(32, dtype=np.float32).reshape(4, 8)}
    with Session(om, runtime="emulator") as session:
        assert not session.gears.batched  # padding rows would change the sum
        np.testing.assert_allclose(session.infer(feeds)["y"], feeds["x"].sum())
        with pytest.raises(InputError, match="match none"):
            session.validate({"x": feeds["x"][:3]})


@pytest.mark.parametrize("timeout", [-1, 2**31, True, 1.5])
def test_execute_timeout_outside_a_c_int_is_refused_before_loading(
    om_static: Path, timeout: object
) -> None:
    with pytest.raises(ValueError, match=r"execute_timeout_ms must be an integer 0\.\.2147483647"):
        Session(om_static, runtime="emulator", execute_timeout_ms=timeout)  # type: ignore[arg-type]
