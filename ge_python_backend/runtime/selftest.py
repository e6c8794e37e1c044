"""Probes of the assumptions the runtime makes about pyACL (`ge-python-model selftest`).

Each probe checks one assumption, through the runtime's own objects where it has them (so a probe
that passes means the runtime's calls work on this pyACL), and says what it saw. Its models are
the tiny ones of `selftest_models`. Probes run one after the other, each on its own device and
context; a failing probe does not stop the others.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import logging
import math
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ge_python_backend.ascend import AclCode, GearKind, MemcpyKind, RunMode, describe_code
from ge_python_backend.runtime._acl import ensure_initialized, load_acl, selected_runtime
from ge_python_backend.runtime.batching import Execution, ExecutionPlanner
from ge_python_backend.runtime.device import Context, Device, Event, Stream
from ge_python_backend.runtime.errors import AclError, check
from ge_python_backend.runtime.gears import GearTable
from ge_python_backend.runtime.lane import Lane
from ge_python_backend.runtime.memory import DeviceBuffer, HostBuffer
from ge_python_backend.runtime.model import Dataset, Model
from ge_python_backend.runtime.selftest_models import (
    MODELS,
    OnnxCompiler,
    PreparedModels,
    SelftestModel,
    prepare_models,
)
from ge_python_backend.runtime.session import Session

__all__ = ["ProbeResult", "SelftestReport", "run_selftest"]

logger = logging.getLogger(__name__)

# What every set_* call returns for a value that is no gear (GE's ge_executor.cc).
NOT_A_GEAR = AclCode.GE_DYNAMIC_BATCH_SIZE_INVALID
SYNC_TIMEOUT_MS = 10_000
TOLERANCE = 1e-3  # inputs are multiples of 1/8: float16 computes these models exactly


class ProbeFailure(Exception):
    """An assumption does not hold; the message says what was found instead."""


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """One probe: the assumption it checks, whether it held, and what was seen."""

    name: str
    assumption: str
    passed: bool
    detail: str


@dataclasses.dataclass
class SelftestReport:
    """Every probe's result and what the run found about the host."""

    runtime: str
    device_id: int
    run_mode: str | None = None  # "host" (ACL_HOST, EP) or "device" (ACL_DEVICE, RC)
    soc: str | None = None
    models: str = ""  # how the models were made
    atc_commands: list[str] = dataclasses.field(default_factory=list)
    missing_models: dict[str, str] = dataclasses.field(default_factory=dict)
    probes: list[ProbeResult] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True only when every probe passed."""
        return bool(self.probes) and all(p.passed for p in self.probes)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (`probes` first)."""
        data = dataclasses.asdict(self)
        return {"probes": data.pop("probes"), "passed": self.passed, **data}


class _Env:
    """What the probes share: the acl module, the device id, the models."""

    def __init__(self, acl: ModuleType, runtime: str, device_id: int) -> None:
        self.acl = acl
        self.runtime = runtime
        self.device_id = device_id
        self.models = PreparedModels(Path(), "not prepared")

    @contextlib.contextmanager
    def opened(self) -> Iterator[Context]:
        """A device and a context on it, current in this thread; closed with all made in it."""
        device = Device(self.acl, self.device_id)
        try:
            yield Context(device)
        finally:
            device.close()

    def model(self, name: str) -> tuple[SelftestModel, Path]:
        """A model's spec and `.om`; ProbeFailure if it could not be made."""
        spec = next(m for m in MODELS if m.name == name)
        if name not in self.models.paths:
            reason = self.models.missing.get(name, "not prepared")
            raise ProbeFailure(f"model {spec.stem}.om is missing: {reason}")
        return spec, self.models.paths[name]

    def session(
        self, name: str, pipeline_depth: int = 1, max_output_bytes: int | None = None
    ) -> tuple[SelftestModel, Session]:
        """A model's spec and a Session on it (given the --input_shape order if it needs it)."""
        spec, path = self.model(name)
        session = Session(
            path,
            self.device_id,
            self.runtime,
            pipeline_depth=pipeline_depth,
            input_shape_order=spec.input_shape_order,
            max_output_bytes=max_output_bytes,
        )
        return spec, session


Probe = Callable[[_Env], str]
_PROBES: list[tuple[str, Probe]] = []


def _probe(name: str) -> Callable[[Probe], Probe]:
    """Register a probe; its docstring is the assumption it checks."""

    def register(function: Probe) -> Probe:
        _PROBES.append((name, function))
        return function

    return register


def _code(ret: int) -> str:
    return f"{ret} {describe_code(ret)[0]}"


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise ProbeFailure(message)


def _compare(what: str, got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> None:
    """ProbeFailure unless every array has the reference's shape, dtype and values."""
    for index, (out, ref) in enumerate(zip(got, want)):
        if out.shape != ref.shape or out.dtype != ref.dtype:
            raise ProbeFailure(
                f"{what}: output {index} is {out.dtype}{list(out.shape)}, expected "
                f"{ref.dtype}{list(ref.shape)}"
            )
        if not np.allclose(out, ref, rtol=0, atol=TOLERANCE):
            worst = float(np.max(np.abs(out.astype(np.float64) - ref)))
            raise ProbeFailure(f"{what}: output {index} differs from NumPy by up to {worst:g}")


def _copy_kinds(context: Context) -> str:
    if context.device.shares_host_memory:
        return f"device to device ({MemcpyKind.DEVICE_TO_DEVICE:d}, RC mode)"
    return (
        f"host to device ({MemcpyKind.HOST_TO_DEVICE:d}) and device to host "
        f"({MemcpyKind.DEVICE_TO_HOST:d})"
    )


def _current_context(acl: ModuleType) -> int:
    context, ret = acl.rt.get_context()
    check(ret, "acl.rt.get_context", acl)
    return int(context)


def _input_dataset(context: Context, model: Model) -> Dataset:
    """An input dataset over fresh device buffers, the gear input included."""
    desc = model.description
    sizes = {info.index: info.size for info in desc.inputs}
    if desc.gear_input is not None:
        sizes[desc.gear_input] = desc.gear_input_size
    buffers = [DeviceBuffer(context, max(sizes[i], 1)) for i in range(desc.input_count)]
    return Dataset(context, buffers)


def _run_on_lane(lane: Lane, table: GearTable, feeds: Mapping[str, np.ndarray]) -> Execution:
    """Stage and launch one execution of `feeds` on `lane` (not waited for)."""
    rows = len(next(iter(feeds.values())))
    (execution,) = ExecutionPlanner(table.info.batch_gears).plan([(0, rows)])
    lane.stage(table, execution, [feeds])
    lane.launch(table, execution)
    return execution


# ----------------------------------------------------------------------------- probes


@_probe("acl.init")
def _init(env: _Env) -> str:
    """acl.init succeeds once per process; a repeated acl.init returns 100002, which the runtime
    tolerates."""
    ensure_initialized(env.acl)
    ret = env.acl.init()
    _expect(
        ret in (AclCode.SUCCESS, AclCode.REPEAT_INITIALIZE),
        f"a repeated acl.init returned {_code(ret)}; expected {_code(AclCode.REPEAT_INITIALIZE)}",
    )
    return f"acl.init ok; a repeated acl.init returned {_code(ret)}"


@_probe("run mode")
def _run_mode(env: _Env) -> str:
    """acl.rt.get_run_mode returns ACL_HOST (1) or ACL_DEVICE (0); the runtime copies device to
    device in ACL_DEVICE (RC) mode."""
    mode, ret = env.acl.rt.get_run_mode()
    check(ret, "acl.rt.get_run_mode", env.acl)
    _expect(mode in set(RunMode), f"acl.rt.get_run_mode returned mode {mode!r}; expected 0 or 1")
    with env.opened() as context:
        _expect(
            context.device.shares_host_memory == (mode == RunMode.DEVICE),
            "the runtime's Device disagrees with acl.rt.get_run_mode",
        )
        return f"{_run_mode_text(mode)} ({mode}): the runtime copies {_copy_kinds(context)}"


@_probe("context per thread")
def _context_per_thread(env: _Env) -> str:
    """The current context is per thread: acl.rt.create_context makes it current in the creating
    thread only, acl.rt.set_context switches it, and device work then runs in any thread."""
    acl = env.acl
    with env.opened() as main:
        _expect(_current_context(acl) == main.handle, "create_context did not make it current")
        seen: dict[str, Any] = {}

        def worker() -> None:
            try:
                other = Context(main.device)
                seen["created is current"] = _current_context(acl) == other.handle
                main.activate()
                seen["set_context switches"] = _current_context(acl) == main.handle
                DeviceBuffer(main, 64).close()
                other.close()
            except Exception as exc:  # reported below, in the probing thread
                seen["error"] = exc

        thread = threading.Thread(target=worker, name="selftest-context")
        thread.start()
        thread.join()
        if "error" in seen:
            raise ProbeFailure(f"in a second thread: {seen['error']}")
        failed = [what for what, ok in seen.items() if not ok]
        _expect(not failed, f"in a second thread: not true that {', '.join(failed)}")
        _expect(
            _current_context(acl) == main.handle,
            "a context created in another thread became current in this one",
        )
    return (
        "create_context and set_context act on the calling thread; malloc/free in a second thread"
    )


@_probe("device memory info")
def _memory_info(env: _Env) -> str:
    """acl.rt.get_mem_info reports (free, total) device memory, HBM or DDR (the gauge
    ge_device_memory_bytes and Session.device_memory)."""
    with env.opened() as context:
        free, total = context.device.memory()
    _expect(total > 0, f"get_mem_info reported a total of {total} bytes for HBM and DDR")
    _expect(0 <= free <= total, f"get_mem_info reported {free} free of {total} bytes")
    return f"{free / 2**20:.0f} MiB free of {total / 2**20:.0f} MiB"


@_probe("malloc")
def _malloc(env: _Env) -> str:
    """acl.rt.malloc returns distinct 64-byte aligned device addresses; acl.rt.free releases
    them."""
    sizes = (1, 1000, 1 << 20)
    with env.opened() as context:
        buffers = [DeviceBuffer(context, size) for size in sizes]
        pointers = [b.ptr for b in buffers]
        for buffer in buffers:
            buffer.close()
    _expect(len(set(pointers)) == len(pointers), f"malloc returned repeated addresses {pointers}")
    unaligned = [hex(p) for p in pointers if p % 64]
    _expect(not unaligned, f"malloc returned addresses not 64-byte aligned: {unaligned}")
    return f"{len(sizes)} allocations ({', '.join(map(str, sizes))} bytes), 64-byte aligned, freed"


@_probe("malloc_host")
def _malloc_host(env: _Env) -> str:
    """acl.rt.malloc_host returns a 64-byte aligned address of this process's memory, which the
    runtime reads and writes directly (pinned buffers wrapped by NumPy)."""
    size = 4096
    pattern = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)
    with env.opened() as context, HostBuffer(context, size) as host:
        _expect(host.ptr % 64 == 0, f"malloc_host returned 0x{host.ptr:x}, not 64-byte aligned")
        host.array[:] = pattern
        _expect(
            ctypes.string_at(host.ptr, size) == pattern.tobytes(),
            "bytes written through the NumPy view were not at the malloc_host address",
        )
    return f"{size} bytes at a 64-byte aligned host address, written and read back"


@_probe("memcpy_async round trip")
def _memcpy_async(env: _Env) -> str:
    """acl.rt.memcpy_async with the kinds the runtime uses (host to device and back, or device to
    device in RC mode) copies exactly the bytes asked for, once the stream is synchronized."""
    size, count = 4096, 3000
    pattern = np.random.default_rng(2).integers(0, 256, size, dtype=np.uint8)
    with env.opened() as context:
        source, target = HostBuffer(context, size), HostBuffer(context, size)
        device = DeviceBuffer(context, size)
        stream = Stream(context)
        source.array[:] = pattern
        target.array[:] = 0x5A
        device.copy_from_host_async(source, count, stream)
        device.copy_to_host_async(target, count, stream)
        stream.synchronize()
        _expect(
            np.array_equal(target.array[:count], pattern[:count]),
            "the bytes copied to the device and back differ from those sent",
        )
        _expect(
            bool(np.all(target.array[count:] == 0x5A)),
            f"bytes past the {count} copied were changed",
        )
        return f"{count} of {size} bytes there and back, {_copy_kinds(context)}"


@_probe("events")
def _events(env: _Env) -> str:
    """Events recorded on a stream time the work between them: acl.rt.create_event,
    record_event and event_elapsed_time give the device times of copies and executions."""
    size = 1 << 20
    with env.opened() as context:
        host, device = HostBuffer(context, size), DeviceBuffer(context, size)
        stream = Stream(context)
        start, copied_in, copied_out = (Event(context) for _ in range(3))
        start.record(stream)
        device.copy_from_host_async(host, size, stream)
        copied_in.record(stream)
        device.copy_to_host_async(host, size, stream)
        copied_out.record(stream)
        stream.synchronize()
        h2d, d2h = copied_in.seconds_since(start), copied_out.seconds_since(copied_in)
        total = copied_out.seconds_since(start)
    for what, seconds in (("copy in", h2d), ("copy out", d2h), ("both", total)):
        _expect(
            math.isfinite(seconds) and 0 <= seconds < 60,
            f"event_elapsed_time gave {seconds!r} s for {what}",
        )
    _expect(total + 1e-6 >= max(h2d, d2h), f"the whole ({total} s) is shorter than a part")
    return f"1 MiB copied in {h2d * 1e6:.0f} us and out {d2h * 1e6:.0f} us (device time)"


@_probe("synchronize with timeout")
def _sync_timeout(env: _Env) -> str:
    """acl.rt.synchronize_stream_with_timeout returns 0 once the stream's work is done (the
    runtime's execute_timeout_ms waits with it), and acl.rt.synchronize_event_with_timeout
    once the stream reached the event (depth 2 waits with it for a lane's execution to leave
    the execute engine; without it the lane is waited for whole)."""
    with env.opened() as context:
        host, device = HostBuffer(context, 4096), DeviceBuffer(context, 4096)
        stream = Stream(context)
        copied = Event(context)
        device.copy_from_host_async(host, 4096, stream)
        copied.record(stream)
        reached = copied.reached(SYNC_TIMEOUT_MS)
        stream.synchronize(SYNC_TIMEOUT_MS)
        stream.synchronize(1)  # idle
    _expect(reached is not False, f"the event was not reached within {SYNC_TIMEOUT_MS} ms")
    event = "event: 0" if reached else "acl.rt.synchronize_event_with_timeout: not in this pyACL"
    return (
        f"busy stream within {SYNC_TIMEOUT_MS} ms and idle stream within 1 ms: 0; {event} (the "
        "timeout codes 507046 and 507047 need a hung stream; the emulator's hang fault tests "
        "them)"
    )


@_probe("dataset and data buffers")
def _dataset(env: _Env) -> str:
    """acl.mdl.add_dataset_buffer returns (dataset, ret) and keeps the order; each data buffer
    records the address and size it was created with."""
    acl = env.acl
    sizes = (64, 100, 4096)
    with env.opened() as context:
        buffers = [DeviceBuffer(context, size) for size in sizes]
        with Dataset(context, buffers) as dataset:
            count = acl.mdl.get_dataset_num_buffers(dataset.handle)
            _expect(count == len(buffers), f"the dataset has {count} buffers, expected 3")
            get_size = getattr(acl, "get_data_buffer_size_v2", acl.get_data_buffer_size)
            for index, buffer in enumerate(buffers):
                data_buffer = acl.mdl.get_dataset_buffer(dataset.handle, index)
                found = (acl.get_data_buffer_addr(data_buffer), get_size(data_buffer))
                _expect(
                    found == (buffer.ptr, buffer.size),
                    f"data buffer {index} holds (0x{found[0]:x}, {found[1]}), expected "
                    f"(0x{buffer.ptr:x}, {buffer.size})",
                )
    return f"{len(sizes)} data buffers in order with their addresses and sizes; released"


@_probe("model description")
def _description(env: _Env) -> str:
    """get_input_dims/get_output_dims give {"name", "dimCount", "dims"} with -1 on dynamic axes;
    data types and formats are aclDataType and aclFormat codes the runtime knows; the gear input
    ascend_mbatch_shape_data is found by name."""
    acl = env.acl
    seen = []
    with env.opened() as context:
        for spec in MODELS:
            _, path = env.model(spec.name)
            with Model(context, path, spec.input_shape_order) as model:
                desc = model.description
                dims, ret = acl.mdl.get_input_dims(model.desc, desc.inputs[0].index)
                check(ret, "acl.mdl.get_input_dims", acl)
                missing = {"name", "dimCount", "dims"} - set(dims)
                _expect(not missing, f"{spec.stem}: get_input_dims lacks keys {sorted(missing)}")
                got = [(i.spec.name, str(i.spec.dtype), i.spec.shape) for i in desc.inputs]
                want = [(name, dtype, spec.dims[name]) for name, dtype in spec.inputs]
                _expect(got == want, f"{spec.stem}: inputs {got}, expected {want}")
                got_out = [(o.spec.name, str(o.spec.dtype)) for o in desc.outputs]
                _expect(
                    got_out == list(spec.outputs),
                    f"{spec.stem}: outputs {got_out}, expected {list(spec.outputs)}",
                )
                _expect(
                    desc.dynamic_shape == spec.dynamic_shape,
                    f"{spec.stem}: dynamic shape {desc.dynamic_shape}, expected the opposite",
                )
                if spec.kind == GearKind.STATIC and not spec.dynamic_shape:
                    shapes = [o.spec.shape for o in desc.outputs]
                    want_shapes = spec.output_shapes(None)
                    _expect(shapes == want_shapes, f"outputs {shapes}, expected {want_shapes}")
                formats = {t.spec.format for t in (*desc.inputs, *desc.outputs)}
                unknown = sorted(f for f in formats if f.startswith("FORMAT_"))
                _expect(not unknown, f"{spec.stem}: unknown formats {unknown}")
                _expect(
                    (desc.gear_input is None) == (spec.kind == GearKind.STATIC),
                    f"{spec.stem}: gear input at {desc.gear_input} for a {spec.kind} model",
                )
                seen.append(f"{spec.name} {'/'.join(sorted(formats))}")
    return f"{len(seen)} models as compiled (formats: {', '.join(seen)})"


def _gear_probe(env: _Env, name: str) -> str:
    """Discovery, then every gear (and, for batch, a padded row count) run through a Session."""
    spec, session = env.session(name)
    with session:
        info = session.gears
        _expect(info.kind == spec.kind, f"the runtime sees a {info.kind} model")
        if spec.kind == GearKind.BATCH:
            found: Any = info.batch_gears
            want: Any = tuple(sorted(g[0] for g in spec.gears))
        elif spec.kind == GearKind.HW:
            found, want = info.hw_gears, spec.gears
        else:
            found = info.dims_gears
            want = tuple(tuple(spec.input_shapes(g).values()) for g in spec.gears)
        _expect(found == want, f"the runtime found gears {found}, expected {want}")
        runs = [spec.input_shapes(g) for g in spec.gears]
        if spec.kind == GearKind.BATCH:
            runs.append(spec.input_shapes((3,)))  # not a gear: padded to 4
        for shapes in runs:
            feeds = spec.feeds(shapes, seed=len(runs))
            outputs = session.infer(feeds)
            _compare(f"inputs {dict(shapes)}", list(outputs.values()), spec.reference(feeds))
    return f"gears {', '.join(','.join(map(str, g)) for g in spec.gears)}: each selected and run"


@_probe("gears: batch")
def _gears_batch(env: _Env) -> str:
    """acl.mdl.get_dynamic_batch lists the batch gears; set_dynamic_batch_size selects each and
    the outputs equal NumPy's (also for 3 rows padded to gear 4); --input_shape lists the
    inputs in another order than the graph."""
    return _gear_probe(env, "batch") + "; 3 rows padded to 4"


@_probe("gears: HW")
def _gears_hw(env: _Env) -> str:
    """acl.mdl.get_dynamic_hw lists the (height, width) gears; set_dynamic_hw_size selects each
    and the outputs equal NumPy's."""
    return _gear_probe(env, "hw")


@_probe("gears: dims in --input_shape order")
def _gears_dims(env: _Env) -> str:
    """get_input_dynamic_dims lists each gear's dims in ATC's --input_shape order (b, a) even
    though the graph lists a first; the runtime finds that order and set_input_dynamic_dims
    runs each gear with the outputs NumPy gives."""
    return _gear_probe(env, "dims") + " (--input_shape b:2,-1;a:1,-1, found by the runtime)"


@_probe("gears: dims, order given")
def _gears_dims_named(env: _Env) -> str:
    """With inputs whose gears fit both orders, the --input_shape order given to the Session
    (input_shape_order) splits the gears the way ACL means them."""
    return _gear_probe(env, "dims_named") + " (--input_shape b:1,-1;a:1,-1, given)"


@_probe("get_cur_output_dims before execute")
def _cur_output_dims(env: _Env) -> str:
    """After a set_* call and before any execution, acl.mdl.get_cur_output_dims gives that
    gear's output dims (the runtime sizes its buffers and views from them)."""
    checked = 0
    with env.opened() as context:
        for name in ("batch", "hw", "dims", "dims_named"):
            spec, path = env.model(name)
            with Model(context, path, spec.input_shape_order) as model:
                table = GearTable(model.description, path)
                table.read_outputs(model, _input_dataset(context, model))
                for (number, batch), shapes in table.output_shapes.items():
                    gear = _gear_values(spec, table, number, batch)
                    want = spec.output_shapes(gear)
                    _expect(
                        shapes == want,
                        f"{spec.stem} gear {list(gear)}: get_cur_output_dims gave {shapes}, "
                        f"expected {want}",
                    )
                    checked += 1
    return f"{checked} gears of 4 models, each read right after its set_* call"


@_probe("tensor names")
def _tensor_names(env: _Env) -> str:
    """get_input_name_by_index and get_output_name_by_index keep a 150-character name whole;
    get_input_dims/get_output_dims report another name for it (ACL converts names over 127
    characters to acl_modelId_<id>_input_<i>...) that get_tensor_real_name maps back; an ONNX
    output's ACL name is op:idx:name, served as name; a Session serves the real names."""
    acl = env.acl
    spec, path = env.model("names")
    with env.opened() as context, Model(context, path) as model:
        desc = model.desc
        converted = []
        calls = [
            ("input", spec.inputs[0][0], acl.mdl.get_input_name_by_index, "get_input_dims"),
            ("output", spec.outputs[0][0], acl.mdl.get_output_name_by_index, "get_output_dims"),
        ]
        for what, real, name_call, dims_call in calls:
            reported = name_call(desc, 0)  # the input's name; op:idx:name for the output
            _expect(
                reported == real or (what == "output" and reported.endswith(f":{real}")),
                f"the {what} name by index is {reported!r}, expected {real!r} (whole)",
            )
            dims, ret = getattr(acl.mdl, dims_call)(desc, 0)
            check(ret, f"acl.mdl.{dims_call}", acl)
            shown = dims["name"]
            _expect(shown != reported, f"{dims_call} reports the {len(shown)}-character name")
            back = acl.mdl.get_tensor_real_name(desc, shown)
            _expect(back == reported, f"get_tensor_real_name({shown!r}) is {back!r}")
            converted.append(shown)
        acl_name = acl.mdl.get_output_name_by_index(desc, 1)
        parts = acl_name.split(":")
        _expect(
            len(parts) == 3 and parts[1].isdigit() and parts[2] == "plus_one",
            f"output 1 is named {acl_name!r}, expected op:idx:plus_one",
        )
        served = [o.spec.name for o in model.description.outputs]
        _expect(served == [o for o, _ in spec.outputs], f"the runtime serves outputs {served}")
    _, session = env.session("names")
    with session:
        feeds = spec.feeds(spec.input_shapes(None), seed=3)
        outputs = session.infer(feeds)
        _compare("long names", [outputs[o] for o, _ in spec.outputs], spec.reference(feeds))
    return f"dims names {', '.join(converted)} map back; output 1 is {acl_name}; served as named"


@_probe("static AIPP dims v2")
def _aipp_v2(env: _Env) -> str:
    """A YUV420SP_U8 static-AIPP input (atc --insert_op_conf) is UINT8 NHWC; get_input_dims
    gives the source's [n,h,w,3], get_input_dims_v2 [n,h*1.5,w,1] whose bytes equal
    get_input_size_by_index; get_aipp_type says static (1) and get_first_aipp_info names the
    source format; raw bytes in give the crop of the Y plane through the model."""
    acl = env.acl
    spec, path = env.model("aipp_v2")
    assert spec.aipp is not None
    with env.opened() as context, Model(context, path) as model:
        index = model.description.inputs[0].index
        v1, ret = acl.mdl.get_input_dims(model.desc, index)
        check(ret, "acl.mdl.get_input_dims", acl)
        v2, ret = acl.mdl.get_input_dims_v2(model.desc, index)
        check(ret, "acl.mdl.get_input_dims_v2", acl)
        size = acl.mdl.get_input_size_by_index(model.desc, index)
        dims = (list(v1["dims"]), list(v2["dims"]), size)
        want = (spec.aipp.input_dims_v1, spec.aipp.input_dims_v2, spec.aipp.input_size)
        _expect(dims == want, f"v1, v2 and size are {dims}, expected {want}")
        dtype = acl.mdl.get_input_data_type(model.desc, index)
        fmt = acl.mdl.get_input_format(model.desc, index)
        _expect(
            (dtype, fmt) == (spec.aipp.input_dtype.acl, int(spec.aipp.input_format)),
            f"the AIPP input is aclDataType {dtype}, aclFormat {fmt}; expected UINT8 (4), NHWC (1)",
        )
        kind, _, ret = acl.mdl.get_aipp_type(model.model_id, index)
        check(ret, "acl.mdl.get_aipp_type", acl)
        _expect(kind == 1, f"get_aipp_type gave {kind}, expected 1 (static)")
        info, ret = acl.mdl.get_first_aipp_info(model.model_id, index)
        check(ret, "acl.mdl.get_first_aipp_info", acl)
        _expect(
            info["inputFormat"] == int(spec.aipp.op.input_format),
            f"get_first_aipp_info inputFormat {info['inputFormat']}, expected 1 (YUV420SP_U8)",
        )
    _, session = env.session("aipp_v2")
    with session:
        served = session.inputs[0].shape
        feeds = spec.feeds({"image": served})
        _compare("raw YUV420SP bytes", list(session.infer(feeds).values()), spec.reference(feeds))
    return f"v1 {dims[0]}, v2 {dims[1]}, {size} bytes; served as UINT8 {list(served)}; static"


@_probe("execute_async")
def _execute_async(env: _Env) -> str:
    """acl.mdl.execute_async between the copies on one stream (as a lane queues it) gives the
    outputs NumPy computes, FP32 and INT32."""
    spec, path = env.model("static")
    feeds = spec.feeds(spec.input_shapes(None), seed=5)
    with env.opened() as context:
        lane, table = Lane.open_first(context, path)
        execution = _run_on_lane(lane, table, feeds)
        times = lane.finish()
        outputs = [view.copy() for view in lane.output_views(table, execution)]
    _compare("static model", outputs, spec.reference(feeds))
    assert times is not None  # launched timed
    return (
        f"outputs equal NumPy; device time: copy in {times.h2d * 1e6:.0f} us, execute "
        f"{times.execute * 1e6:.0f} us, copy out {times.d2h * 1e6:.0f} us"
    )


@_probe("two lanes on two streams")
def _two_lanes(env: _Env) -> str:
    """The .om loaded twice gives two model ids; each runs on its own stream with both
    executions in flight at once (pipeline_depth 2)."""
    spec, path = env.model("static")
    first_feeds = spec.feeds(spec.input_shapes(None), seed=6)
    second_feeds = spec.feeds(spec.input_shapes(None), seed=7)
    with env.opened() as context:
        first, table = Lane.open_first(context, path)
        second = Lane.load(1, context, path, None, first)
        ids = (first.model.model_id, second.model.model_id)
        _expect(ids[0] != ids[1], f"two loads of the .om gave the same model id {ids[0]}")
        _expect(first.stream.handle != second.stream.handle, "the lanes share a stream")
        runs = [
            (lane, _run_on_lane(lane, table, feeds), feeds)
            for lane, feeds in ((first, first_feeds), (second, second_feeds))
        ]
        for lane, execution, feeds in reversed(runs):
            lane.finish()
            outputs = [view.copy() for view in lane.output_views(table, execution)]
            _compare(f"lane {lane.index}", outputs, spec.reference(feeds))
    return f"model ids {ids[0]} and {ids[1]} ran at once on two streams; outputs equal NumPy"


@_probe("non-gear value: 145013")
def _non_gear(env: _Env) -> str:
    """A batch size, HW size or dims that is no gear is refused with 145013 by every set_* call,
    and a gear selected afterwards still works."""
    codes = []
    with env.opened() as context:
        for name in ("batch", "hw", "dims"):
            spec, path = env.model(name)
            with Model(context, path, spec.input_shape_order) as model:
                dataset = _input_dataset(context, model)
                bad = _non_gear_values(spec)
                try:
                    _set_gear(model, dataset, spec.kind, bad)
                except AclError as exc:
                    codes.append(f"{spec.kind} {bad}: {_code(exc.code)}")
                    _expect(
                        exc.code == NOT_A_GEAR,
                        f"{spec.stem}: {exc.api} with {bad} returned {_code(exc.code)}; "
                        f"expected {_code(NOT_A_GEAR)}",
                    )
                else:
                    raise ProbeFailure(f"{spec.stem}: the non-gear value {bad} was accepted")
                table = GearTable(model.description, path)
                batch = spec.gears[0][0] if spec.kind == GearKind.BATCH else 0
                table.select(model, dataset, 0, batch)
                want = spec.output_shapes(_gear_values(spec, table, 0, batch))
                shapes = model.current_output_shapes()
                _expect(shapes == want, f"{spec.stem}: a gear set after the refusal gave {shapes}")
    return "; ".join(codes) + "; a valid gear selected afterwards works"


@_probe("corrupt .om")
def _corrupt_om(env: _Env) -> str:
    """acl.mdl.load_from_file refuses a truncated .om and one of random bytes with an error code
    (the runtime raises AclError naming it; a model that fails to load stays unavailable)."""
    spec, path = env.model("static")
    data = path.read_bytes()
    found = []
    with tempfile.TemporaryDirectory(prefix="ge-selftest-") as scratch, env.opened() as context:
        noise = np.random.default_rng(8).integers(0, 256, len(data), dtype=np.uint8).tobytes()
        for what, content in (("truncated", data[: len(data) // 2]), ("random bytes", noise)):
            corrupt = Path(scratch) / f"{spec.stem}_{what.replace(' ', '_')}.om"
            corrupt.write_bytes(content)
            try:
                Model(context, corrupt).close()
            except AclError as exc:
                _expect(
                    exc.api == "acl.mdl.load_from_file",
                    f"{what}: loaded, then {exc.api} failed with {_code(exc.code)}",
                )
                found.append(f"{what}: {_code(exc.code)}")
            else:
                raise ProbeFailure(f"a {what} .om loaded without error")
    return "; ".join(found)


@_probe("session")
def _session(env: _Env) -> str:
    """A Session at pipeline depth 2 runs requests of 2, 3 and 6 rows together (several
    executions over both lanes, padding zeroed) and splits the outputs back."""
    spec, session = env.session("batch", pipeline_depth=2)
    with session:
        requests = [spec.feeds(spec.input_shapes((rows,)), seed=rows) for rows in (2, 3, 6)]
        results = session.infer_many(requests)
        counters = session.counters
    for rows, feeds, outputs in zip((2, 3, 6), requests, results):
        _compare(f"request of {rows} rows", list(outputs.values()), spec.reference(feeds))
    return (
        f"11 rows in {counters.executions} executions, {counters.padded_rows} row(s) padded; "
        f"outputs equal NumPy; device time executing {counters.execute_seconds * 1e6:.0f} us"
    )


@_probe("data-dependent output descriptors")
def _data_dependent(env: _Env) -> str:
    """A NonZero model with static inputs reports -1 in get_output_dims; after each
    execute_async and the stream's synchronize, get_dataset_tensor_desc of the output dataset
    holds that execution's real dims (get_tensor_desc_num_dims, get_tensor_desc_dim_v2), and
    the rows read with them equal NumPy's, request after request on both lanes."""
    spec, path = env.model("nonzero")
    with env.opened() as context, Model(context, path) as model:
        dims, ret = env.acl.mdl.get_output_dims(model.desc, 0)
        check(ret, "acl.mdl.get_output_dims", env.acl)
        size = env.acl.mdl.get_output_size_by_index(model.desc, 0)
    _expect(-1 in dims["dims"], f"get_output_dims gave {dims['dims']}, expected a -1")
    _, session = env.session("nonzero", pipeline_depth=2, max_output_bytes=2 * 4 * 8 * 8)
    with session:
        requests = [spec.feeds({"x": (4, 8)}, seed=seed) for seed in range(4)]
        results = session.infer_many(requests)
    rows = []
    for feeds, outputs in zip(requests, results):
        _compare("NonZero indices", list(outputs.values()), spec.reference(feeds))
        rows.append(outputs["indices"].shape[1])
    return f"get_output_dims {dims['dims']}, size {size}; rows per request {rows} equal NumPy"


@_probe("shape-range inputs")
def _shape_range(env: _Env) -> str:
    """`--input_shape x:1~8,8` (no gears): get_input_dims has -1, get_input_dims_range gives
    {"rangeCount": 2, "range": [[1, 8], [8, 8]]}, get_input_size_by_index the upper bound; a
    Session sets each request's real dims with set_dataset_tensor_desc and reads the outputs'
    from the output descriptors."""
    spec, path = env.model("ranged")
    acl = env.acl
    with env.opened() as context, Model(context, path) as model:
        found, ret = acl.mdl.get_input_dims_range(model.desc, 0)
        check(ret, "acl.mdl.get_input_dims_range", acl)
        size = acl.mdl.get_input_size_by_index(model.desc, 0)
    ranges = [list(r) for r in found["range"][: found["rangeCount"]]]
    _expect(ranges == [[1, 8], [8, 8]], f"get_input_dims_range gave {found}")
    _expect(size == 8 * 8 * 4, f"get_input_size_by_index gave {size}, expected {8 * 8 * 4}")
    _, session = env.session("ranged", pipeline_depth=2)
    with session:
        requests = [spec.feeds({"x": (rows, 8)}, seed=rows) for rows in (1, 5, 8)]
        results = session.infer_many(requests)
    for feeds, outputs in zip(requests, results):
        _compare(f"{len(feeds['x'])} rows", list(outputs.values()), spec.reference(feeds))
    return f"range {ranges}, size {size}; 1, 5 and 8 rows equal NumPy"


@_probe("teardown order")
def _teardown(env: _Env) -> str:
    """Releasing in the runtime's order succeeds call by call: unload and destroy the model
    description, destroy datasets and data buffers, free device and host memory, destroy
    events, stream and context, then reset the device; the device opens again afterwards."""
    spec, path = env.model("static")
    device = Device(env.acl, env.device_id)
    try:
        context = Context(device)
        lane, table = Lane.open_first(context, path)
        _run_on_lane(lane, table, spec.feeds(spec.input_shapes(None)))
        lane.finish()
        lane.close()  # model first, then datasets, buffers, events, stream
        context.close()
    finally:
        device.close()  # acl.rt.reset_device once no other user holds the device
    with env.opened() as again:
        DeviceBuffer(again, 64).close()
    return "every release returned 0; set_device, create_context and malloc work afterwards"


def _non_gear_values(spec: SelftestModel) -> list[int]:
    """A batch size, (height, width) or dims list of `spec` that is none of its gears."""
    if spec.kind == GearKind.BATCH:
        return [3]
    if spec.kind == GearKind.HW:
        return [9, 9]
    return [3 if d == -1 else d for shape in spec.input_shape.values() for d in shape]


def _set_gear(model: Model, dataset: Dataset, kind: GearKind, values: Sequence[int]) -> None:
    """The set_* call of `kind` with `values` as it takes them."""
    if kind == GearKind.BATCH:
        model.set_dynamic_batch_size(dataset, values[0])
    elif kind == GearKind.HW:
        model.set_dynamic_hw_size(dataset, values[0], values[1])
    else:
        model.set_input_dynamic_dims(dataset, values)


def _gear_values(spec: SelftestModel, table: GearTable, number: int, batch: int) -> tuple[int, ...]:
    """The gear as `spec.input_shapes` takes it: (batch,), or the values of the set_* call."""
    return (batch,) if spec.kind == GearKind.BATCH else table.gears[number].values


# ----------------------------------------------------------------------------- running


def run_selftest(
    runtime: str | None = None,
    device_id: int = 0,
    om_dir: Path | None = None,
    on_result: Callable[[ProbeResult], None] | None = None,
    compile_onnx: OnnxCompiler | None = None,
) -> SelftestReport:
    """Run every probe on `device_id` (`on_result` is called as each finishes).

    For the emulator runtime `compile_onnx` (the emulator's `omfile.compile_onnx`, required
    there and only there) compiles the models; for pyACL `atc` does when it is on PATH, else
    they are taken from `om_dir` (see `selftest_models.prepare_models`). Raises
    RuntimeSelectionError when the runtime cannot be imported.
    """
    name = selected_runtime(runtime)
    if (name == "emulator") != (compile_onnx is not None):
        raise ValueError(
            "run_selftest: the emulator runtime needs compile_onnx (the emulator's compiler) "
            f"and pyacl takes none; got runtime {name!r} with compile_onnx={compile_onnx!r}"
        )
    acl = load_acl(name)
    env = _Env(acl, name, device_id)
    report = SelftestReport(runtime=name, device_id=device_id)
    with tempfile.TemporaryDirectory(prefix="ge-selftest-") as scratch:
        for index, (probe_name, probe) in enumerate(_PROBES):
            if index == 1:  # after acl.init: what the models need
                report.soc = _soc_name(acl)
                report.run_mode = _run_mode_name(acl)
                env.models = prepare_models(compile_onnx, report.soc, om_dir, Path(scratch))
                report.models = env.models.how
                report.atc_commands = env.models.atc_commands
                report.missing_models = env.models.missing
            result = _run_probe(env, probe_name, probe)
            report.probes.append(result)
            if on_result is not None:
                on_result(result)
    return report


def _run_probe(env: _Env, name: str, probe: Probe) -> ProbeResult:
    assumption = " ".join((probe.__doc__ or "").split())
    try:
        detail, passed = probe(env), True
    except ProbeFailure as exc:
        detail, passed = str(exc), False
    except Exception as exc:  # any error is this probe's failure, reported in its detail
        logger.debug("selftest probe %r", name, exc_info=True)
        detail, passed = f"{type(exc).__name__}: {exc}", False
    return ProbeResult(name, assumption, passed, detail)


def _soc_name(acl: ModuleType) -> str | None:
    name = acl.get_soc_name()
    return name if isinstance(name, str) and name else None


def _run_mode_name(acl: ModuleType) -> str | None:
    mode, ret = acl.rt.get_run_mode()
    return _run_mode_text(mode) if ret == 0 and mode in set(RunMode) else None


def _run_mode_text(mode: int) -> str:
    """The name GE_EMULATOR_RUN_MODE gives the run mode `mode`: "host" or "device"."""
    return RunMode(mode).name.lower()
