"""What loaded models share in the emulator: one engine per `.om` file per process, and work
memory given to several models by `load_from_file_with_mem`, which GE does not guard (the
emulator reports an overlapping execution on another stream, and the execution of a model whose
given memory was freed)."""

from __future__ import annotations

import gc
import os
import shutil
import weakref
from pathlib import Path

import numpy as np
import pytest
from emulator_helpers import D2H, H2D, Model, dataset_of, malloc
from onnx_models import KEEP_FP32, build_mlp, reference

from ge_python_backend.ascend import AclCode, carved_bytes
from ge_python_backend.emulator import acl
from ge_python_backend.emulator._flights import FLIGHTS
from ge_python_backend.emulator._memory import MEMORY
from ge_python_backend.emulator._models import MODEL_DESCS, MODELS
from ge_python_backend.emulator.omfile import OmModel, compile_onnx

pytestmark = pytest.mark.usefixtures("clean_acl")

GE_FAILURE = 500002
AICORE_EXCEPTION = 507015


@pytest.fixture(scope="module")
def om_other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second static MLP (other weights than `om_static`'s), x [4,16]."""
    directory = tmp_path_factory.mktemp("other")
    onnx_path = build_mlp(directory / "other.onnx", seed=3)
    return compile_onnx(onnx_path, directory / "other", input_shape="x:4,16", **KEEP_FP32)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources of the .om files the emulator reads and parses (OmModel._parse)."""
    seen: list[str] = []
    parse = OmModel._parse.__func__  # type: ignore[attr-defined]

    def counted(cls: type[OmModel], data: bytes, source: str) -> OmModel:
        seen.append(source)
        return parse(cls, data, source)

    monkeypatch.setattr(OmModel, "_parse", classmethod(counted))
    return seen


def test_loads_of_one_file_and_its_hard_links_share_one_engine_while_a_model_or_desc_uses_it(
    ctx: int, om_static: Path, tmp_path: Path, parses: list[str]
) -> None:
    first = tmp_path / "a" / "model.om"
    first.parent.mkdir()
    shutil.copy(om_static, first)
    linked = tmp_path / "b" / "model.om"
    linked.parent.mkdir()
    os.link(first, linked)
    models = [Model(first), Model(first), Model(linked)]
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc_from_file(desc, str(linked)) == 0
    work, weight, ret = acl.mdl.query_size(str(first))
    assert ret == 0 and work > 0 and weight > 0
    assert parses == [str(first)]  # read once, for every load, description and query
    engines = {id(MODELS[m.model_id].om) for m in models}
    described = MODEL_DESCS[desc].model
    assert described is not None and engines == {id(described.om)}
    del described
    rng = np.random.default_rng(1)
    for model in models:  # every model id answers through the one engine
        x = rng.standard_normal((4, 16)).astype(np.float32)
        model.feed([x])
        assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
        for got, want in zip(model.fetch(), reference(om_static, [x]).values()):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="went into its engine"):
        MODELS[models[0].model_id].om.onnx_bytes  # noqa: B018 (not kept beside the engine)
    engine = weakref.ref(MODELS[models[0].model_id].om)
    for model in models:
        assert acl.mdl.unload(model.model_id) == 0
        assert acl.mdl.destroy_desc(model.desc) == 0
    gc.collect()
    assert engine() is not None  # the description from the file still uses it
    assert acl.mdl.destroy_desc(desc) == 0
    gc.collect()
    assert engine() is None  # gone with its last user
    Model(first)
    assert parses.count(str(first)) == 2


def test_a_changed_file_is_read_again(
    ctx: int, om_static: Path, om_dynamic_batch: Path, tmp_path: Path
) -> None:
    path = tmp_path / "model.om"
    shutil.copy(om_static, path)
    static = Model(path)
    path.write_bytes(om_dynamic_batch.read_bytes())  # the same inode, another size and time
    batch = Model(path)
    assert acl.mdl.get_num_inputs(static.desc) == 1
    assert acl.mdl.get_num_inputs(batch.desc) == 2  # x and ascend_mbatch_shape_data
    # rewritten within the clock's tick (size and time kept): its checksum tells
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert acl.mdl.load_from_file(str(path)) == (0, AclCode.PARSE_MODEL)
    assert "fails its SHA-256 check" in acl.get_recent_err_msg()


def _work_space(*oms: Path) -> tuple[int, int]:
    """Device memory for the largest work size query_size reports for `oms`."""
    size = max(acl.mdl.query_size(str(om))[0] for om in oms)
    return malloc(size), size


def _check_answers(models: list[Model], oms: list[Path], inputs: list[np.ndarray]) -> None:
    for model, om, x in zip(models, oms, inputs):
        for got, want in zip(model.fetch(), reference(om, [x]).values()):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_models_sharing_a_work_space_on_one_stream_run_in_turn_and_answer_right(
    ctx: int, om_static: Path, om_other: Path
) -> None:
    oms = [om_static, om_other]
    work = _work_space(*oms)
    models = [Model(om, work) for om in oms]
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((4, 16)).astype(np.float32) for _ in oms]
    for model, x in zip(models, inputs):
        model.feed([x])
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    for _ in range(3):  # queued one after another on the stream, none waited for
        for model in models:
            assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0, acl.get_recent_err_msg()
    _check_answers(models, oms, inputs)
    for model in models:  # synchronous executes, one after the other, share it too
        assert acl.mdl.unload(model.model_id) == 0
    models = [Model(om, work) for om in oms]
    for model, x in zip(models, inputs):
        model.feed([x])
        assert acl.mdl.execute(model.model_id, model.inputs, model.outputs) == 0
    _check_answers(models, oms, inputs)
    assert acl.rt.destroy_stream(stream) == 0


def test_models_sharing_a_work_space_on_two_streams_at_once_fail_with_500002(
    ctx: int, om_static: Path, om_other: Path
) -> None:
    oms = [om_static, om_other]
    work_ptr, size = _work_space(*oms)
    first, second = (Model(om, (work_ptr, size)) for om in oms)
    streams = []
    for _ in range(2):
        stream, ret = acl.rt.create_stream()
        assert ret == 0
        streams.append(stream)
    one, two = streams
    assert acl.mdl.execute_async(first.model_id, first.inputs, first.outputs, one) == 0
    assert acl.mdl.execute_async(second.model_id, second.inputs, second.outputs, two) == 500002
    message = acl.get_recent_err_msg()
    assert f"model {second.model_id} (on stream 0x{two:x}) writes its work memory" in message
    assert f"the work memory of model {first.model_id}, still in flight on stream 0x{one:x}" in (
        message
    )
    assert "neither GE nor the runtime checks" in message and "corrupted" in message
    assert "run the models that share a work space on one stream" in message
    # a synchronous execute is ordered with no stream
    assert acl.mdl.execute(second.model_id, second.inputs, second.outputs) == GE_FAILURE
    assert f"model {second.model_id} (on acl.mdl.execute)" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream(one) == 0
    # once the first has run, the other stream may use the work space
    assert acl.mdl.execute_async(second.model_id, second.inputs, second.outputs, two) == 0
    assert acl.rt.synchronize_stream(two) == 0
    for stream in streams:
        assert acl.rt.destroy_stream(stream) == 0


def test_disjoint_work_spaces_in_one_allocation_may_run_on_two_streams(
    ctx: int, om_static: Path, om_other: Path
) -> None:
    """Only overlapping ranges count: one allocation cut in two work spaces."""
    work_ptr, size = _work_space(om_static, om_other)
    both = malloc(2 * size)
    first, second = Model(om_static, (both, size)), Model(om_other, (both + size, size))
    streams = [acl.rt.create_stream()[0] for _ in range(2)]
    for model, stream in zip((first, second), streams):
        assert acl.mdl.execute_async(model.model_id, model.inputs, model.outputs, stream) == 0
    for stream in streams:
        assert acl.rt.synchronize_stream(stream) == 0
        assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.free(work_ptr) == 0


def test_executing_a_model_whose_work_memory_was_freed_fails_507015(
    ctx: int, om_static: Path
) -> None:
    """GE keeps the pointer and the runtime frees it without knowing (acl.rt.free succeeds);
    on a device the model's tasks then touch freed memory."""
    work_ptr, size = _work_space(om_static)
    synchronous, queued = Model(om_static, (work_ptr, size)), Model(om_static, (work_ptr, size))
    assert acl.rt.free(work_ptr) == 0
    assert acl.mdl.execute(synchronous.model_id, synchronous.inputs, synchronous.outputs) == (
        AICORE_EXCEPTION
    )
    message = acl.get_recent_err_msg()
    assert f"the work memory of model {synchronous.model_id} (0x{work_ptr:x}" in message
    assert "was freed while the model is loaded" in message
    stream, _ = acl.rt.create_stream()
    assert acl.mdl.execute_async(queued.model_id, queued.inputs, queued.outputs, stream) == 0
    assert acl.rt.synchronize_stream(stream) == AICORE_EXCEPTION  # found when it runs
    assert acl.rt.destroy_stream(stream) == 0


def _views(model: Model, area: int) -> tuple[int, int, int]:
    """(inputs, outputs, input 0's bytes): datasets of `model`'s buffers carved one after another
    from the device memory at `area` (as in a device host's stream I/O area)."""
    views = []
    offset = area
    for size in (*model.in_sizes, *model.out_sizes):
        views.append((offset, size))
        offset += carved_bytes(size)
    count = len(model.in_sizes)
    return dataset_of(views[:count]), dataset_of(views[count:]), model.in_sizes[0]


def test_copies_and_executions_on_two_streams_given_overlapping_io_views_fail_with_500002(
    ctx: int, om_static: Path, om_other: Path
) -> None:
    """Two streams given views of one I/O area: the second stream's tasks that write what the
    first's execution in flight reads or writes are refused; reading what it reads is not."""
    first, second = Model(om_static), Model(om_other)
    area = malloc(4096)
    inputs, outputs, in_size = _views(first, area)
    one, two = (acl.rt.create_stream()[0] for _ in range(2))
    assert acl.mdl.execute_async(first.model_id, inputs, outputs, one) == 0
    assert acl.mdl.execute_async(second.model_id, inputs, outputs, two) == GE_FAILURE
    message = acl.get_recent_err_msg()
    assert f"model {second.model_id} (on stream 0x{two:x}) writes its output 0" in message
    assert f"the output 0 of model {first.model_id}, still in flight on stream 0x{one:x}" in (
        message
    )
    assert "neither GE nor the runtime checks" in message and "corrupted" in message
    pinned, ret = acl.rt.malloc_host(in_size)
    assert ret == 0
    assert acl.rt.memcpy_async(area, in_size, pinned, in_size, H2D, two) == GE_FAILURE
    message = acl.get_recent_err_msg()
    assert f"an acl.rt.memcpy_async (on stream 0x{two:x}) writes its destination" in message
    assert f"the input 0 of model {first.model_id}, still in flight on stream 0x{one:x}" in (
        message
    )
    # reading what the execution reads is no clash (one fill buffer copied by every stream)
    assert acl.rt.memcpy_async(pinned, in_size, area, in_size, D2H, two) == 0
    assert acl.rt.synchronize_stream(one) == 0
    # once the first stream has reached its execution, the other may use the views
    assert acl.mdl.execute_async(second.model_id, inputs, outputs, two) == 0
    assert acl.rt.synchronize_stream(two) == 0
    for stream in (one, two):
        assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.free(area) == 0
    assert acl.rt.free_host(pinned) == 0


def test_tasks_ordered_by_stream_wait_event_may_share_io_memory(
    ctx: int, om_static: Path, om_other: Path
) -> None:
    """A stream that waits for an event recorded after another stream's task runs after it,
    also through a third stream's wait; a task ordered after nothing is refused."""
    first = Model(om_static)
    area = malloc(4096)
    inputs, outputs, in_size = _views(first, area)
    one, two, three = (acl.rt.create_stream()[0] for _ in range(3))
    pinned, _ = acl.rt.malloc_host(in_size)
    event, ready = acl.rt.create_event()[0], acl.rt.create_event()[0]
    assert acl.rt.memcpy_async(area, in_size, pinned, in_size, H2D, one) == 0
    assert acl.rt.record_event(event, one) == 0
    assert acl.rt.stream_wait_event(two, event) == 0
    assert acl.rt.record_event(ready, two) == 0
    assert acl.rt.stream_wait_event(three, ready) == 0  # after two, so after one's copy
    assert acl.rt.memcpy_async(area, in_size, pinned, in_size, H2D, three) == 0
    assert acl.rt.synchronize_stream(three) == 0
    assert acl.rt.memcpy_async(area, in_size, pinned, in_size, H2D, one) == 0
    assert acl.mdl.execute_async(first.model_id, inputs, outputs, two) == GE_FAILURE
    assert "the destination of an acl.rt.memcpy_async" in acl.get_recent_err_msg()
    assert acl.rt.record_event(event, one) == 0
    assert acl.rt.stream_wait_event(two, event) == 0
    assert acl.mdl.execute_async(first.model_id, inputs, outputs, two) == 0
    assert acl.rt.synchronize_stream(two) == 0
    for handle in (event, ready):
        assert acl.rt.destroy_event(handle) == 0
    for stream in (one, two, three):
        assert acl.rt.destroy_stream(stream) == 0
    allocation = MEMORY.device_block(area)
    assert allocation in FLIGHTS
    assert acl.rt.free(area) == 0
    assert allocation not in FLIGHTS  # its records go with it
    assert acl.rt.free_host(pinned) == 0
