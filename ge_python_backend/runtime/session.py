"""`Session`: one `.om` on one device, with pooled pinned/device buffers and gear-aware batching.

Everything is allocated once when the session opens: per input and output one pinned host buffer
and one device buffer sized for the largest gear, their data buffers and the two datasets. An
inference then only writes request rows into the pinned buffers (through numpy views), copies the
bytes in use to the device, selects the gear, executes, and copies the bytes in use back.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import math
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, TypeVar, Union

import numpy as np

from ge_python_backend.runtime._acl import load_acl, selected_runtime
from ge_python_backend.runtime._resource import Resource
from ge_python_backend.runtime.batching import Chunk, normalize_gears, plan_chunks
from ge_python_backend.runtime.device import Context, Device, Stream
from ge_python_backend.runtime.errors import AclError, InputError, ModelFileError
from ge_python_backend.runtime.memory import DeviceBuffer, HostBuffer
from ge_python_backend.runtime.model import (
    ACL_DTYPES,
    Dataset,
    GearInfo,
    Model,
    ModelDescription,
    TensorSpec,
)

__all__ = ["PendingBatch", "Session", "SessionCounters"]

Shape = tuple[int, ...]
Feeds = Mapping[str, np.ndarray]
PathLike = Union[str, "os.PathLike[str]"]
_T = TypeVar("_T", bound=Resource)
_Signature = tuple[tuple[str, np.dtype[Any], Shape], ...]

_TRITON_NAMES = {dtype: triton for dtype, triton, _ in ACL_DTYPES.values()}
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
_KIND_LABELS = {"batch": "batch", "hw": "HW", "dims": "dims", "static": "static"}
_MATCH_CACHE_SIZE = 256  # request signatures (input names, dtypes, shapes) remembered as valid
_PLAN_CACHE_SIZE = 256  # row counts whose chunk plan is remembered


@dataclasses.dataclass
class SessionCounters:
    """Cumulative since the session opened; seconds are wall-clock around the ACL calls."""

    executions: int = 0
    rows: int = 0  # real rows run (padding excluded)
    padded_rows: int = 0
    execute_seconds: float = 0.0
    h2d_bytes: int = 0
    h2d_seconds: float = 0.0
    d2h_bytes: int = 0
    d2h_seconds: float = 0.0
    device_bytes_held: int = 0


@dataclasses.dataclass(frozen=True)
class _Gear:
    """One input configuration the model runs: a gear, or the static shapes."""

    shapes: tuple[Shape, ...]  # every input's full shape; dynamic batch keeps -1 on axis 0
    label: str  # how error messages name it
    values: tuple[int, ...] = ()  # for the set_* call: (h, w), or all inputs' dims concatenated


@dataclasses.dataclass(frozen=True)
class _Slot:
    """An input or output with its pinned host buffer and device buffer."""

    spec: TensorSpec
    host: HostBuffer
    device: DeviceBuffer


class _Piece(NamedTuple):
    """Rows [src, src + rows) of request `part` are rows [dst, dst + rows) of an execution."""

    part: int
    src: int
    dst: int
    rows: int

    @property
    def in_part(self) -> slice:
        return slice(self.src, self.src + self.rows)

    @property
    def in_execution(self) -> slice:
        return slice(self.dst, self.dst + self.rows)


class _Lane:
    """One pipeline lane: its own loaded model (model id), stream, pinned and device buffers."""

    def __init__(
        self,
        model: Model,
        stream: Stream,
        input_slots: list[_Slot],
        output_slots: list[_Slot],
        inputs_ds: Dataset,
        outputs_ds: Dataset,
    ) -> None:
        self.model = model
        self.stream = stream
        self.input_slots = input_slots
        self.output_slots = output_slots
        self.inputs_ds = inputs_ds
        self.outputs_ds = outputs_ds
        self.views: dict[tuple[bool, int, int], list[np.ndarray]] = {}
        self.lock = threading.Lock()  # held while staging into or harvesting from the lane
        self.job: _Job | None = None  # the execution queued on the stream, not yet harvested


@dataclasses.dataclass
class _Job:
    """One execution queued on a lane for a `PendingBatch`."""

    batch: PendingBatch
    lane: _Lane
    gear: int
    size: int  # the batch gear (0: unbatched model)
    rows: int
    pieces: list[_Piece]
    h2d_bytes: int = 0
    queued: float = 0.0  # perf_counter when its first copy was queued
    done: bool = False


class PendingBatch:
    """A batch submitted with `Session.submit`; `result()` waits for it.

    `times` holds (lane, queued, finished) perf_counter stamps per execution, once harvested.
    """

    def __init__(self, session: Session, feeds_list: Sequence[Feeds]) -> None:
        self._session = session
        self._feeds_list = feeds_list
        self._results: list[dict[str, np.ndarray]] = [{} for _ in feeds_list]
        self._jobs: list[_Job] = []
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # two lanes may scatter into one request's outputs
        self.times: list[tuple[int, float, float]] = []

    def done(self) -> bool:
        """Whether every execution of the batch was harvested (result() will not block)."""
        return all(job.done for job in self._jobs)

    def result(self) -> list[dict[str, np.ndarray]]:
        """Wait for the batch; its outputs per request, in order. Raises AclError if it failed.

        Callable from any thread (the context is made current in the calling thread first).
        """
        for job in self._jobs:
            self._session._settle(job)  # waits for a harvest under way in another thread
        if self._error is not None:
            raise self._error
        return self._results


class Session(Resource):
    """Serve one `.om` on one device: `infer` any batch size, `infer_many` for request batches.

    `runtime` is "pyacl" (default) or "emulator"; `$GE_PYTHON_BACKEND_ACL` overrides it. With
    `sha256` the file is verified before loading. Usable from any thread; calls are serialized.
    """

    inputs: tuple[TensorSpec, ...]  # never includes ascend_mbatch_shape_data
    outputs: tuple[TensorSpec, ...]  # -1 on axes that differ between gears
    gears: GearInfo

    def __init__(
        self,
        om_path: PathLike,
        device_id: int = 0,
        runtime: str | None = None,
        sha256: str | None = None,
        pipeline_depth: int = 1,
    ) -> None:
        if (
            isinstance(pipeline_depth, bool)
            or not isinstance(pipeline_depth, int)
            or pipeline_depth < 1
        ):
            raise ValueError(f"pipeline_depth must be a positive integer, got {pipeline_depth!r}")
        self.pipeline_depth = pipeline_depth
        self.path = Path(om_path)
        self.device_id = device_id
        self.runtime = selected_runtime(runtime)
        if not self.path.is_file():
            raise ModelFileError(f"model file not found: {self.path}")
        if sha256 is not None:
            _verify_sha256(self.path, sha256)
        acl = load_acl(self.runtime)
        self._lock = threading.Lock()
        self._matched: dict[_Signature, tuple[int, int]] = {}
        self._plans: dict[int, list[Chunk]] = {}
        self._counters_lock = threading.Lock()
        self._counters = SessionCounters()
        self._resources: list[Resource] = []
        self._lanes: list[_Lane] = []
        self._next_lane = 0
        self._own(_close_in_order, self._resources)
        try:
            self._open(acl)
        except BaseException:
            self._finalizer()
            raise

    @property
    def counters(self) -> SessionCounters:
        """A snapshot of the cumulative counters."""
        with self._counters_lock:
            return dataclasses.replace(self._counters)

    def validate(self, feeds: Feeds) -> int:
        """Check `feeds` against the model; return its rows (1 for an unbatched model).

        Raises InputError saying what was expected and what arrived.
        """
        return self._match(feeds)[1]

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        """Run one request of any number of rows; one array per output."""
        return self.infer_many([feeds])[0]

    def infer_many(self, feeds_list: Sequence[Feeds]) -> list[dict[str, np.ndarray]]:
        """Run several requests together; their outputs, in the same order.

        Rows of all requests go straight into the pinned buffers at their row offsets and run as
        gear chunks (requests of different HW/dims gears in separate chunks). Raises InputError
        before any work if a request does not fit, AclError on a device failure (then every
        request failed).
        """
        self._check_open()
        matched = [self._match(feeds) for feeds in feeds_list]
        groups: dict[int, list[int]] = {}
        for part, (gear, _) in enumerate(matched):
            groups.setdefault(gear, []).append(part)
        results: list[dict[str, np.ndarray]] = [{} for _ in feeds_list]
        with self._lock:
            self._check_open()  # again: another thread may have closed it meanwhile
            self._context.activate()
            for gear, parts in groups.items():
                if self.gears.batched:
                    rows = [(part, matched[part][1]) for part in parts]
                    self._run_rows(feeds_list, results, gear, rows)
                else:
                    for part in parts:
                        self._execute(feeds_list, results, gear, 0, 1, [_Piece(part, 0, 0, 1)])
        return results

    def submit(self, feeds_list: Sequence[Feeds]) -> PendingBatch:
        """Queue a batch of requests on the next lane and return without waiting for it.

        The lane's previous batch is harvested first (at most `pipeline_depth` batches are on
        the device): copy in, gear selection, execution and copy out are queued on the lane's
        stream, so they overlap the other lanes' work. Raises InputError before any work if a
        request does not fit; device failures surface from `PendingBatch.result()` and fail
        exactly that batch. Batches of several executions (more rows than the largest gear, or
        several HW/dims gears) run their executions through the lanes in turn.
        """
        self._check_open()
        matched = [self._match(feeds) for feeds in feeds_list]
        batch = PendingBatch(self, feeds_list)
        executions: list[tuple[int, int, int, list[_Piece]]] = []
        groups: dict[int, list[int]] = {}
        for part, (gear, _) in enumerate(matched):
            groups.setdefault(gear, []).append(part)
        for gear, parts in groups.items():
            if self.gears.batched:
                parts_rows = [(part, matched[part][1]) for part in parts]
                for size, count, pieces in self._pieces(parts_rows):
                    executions.append((gear, size, count, pieces))
            else:
                executions += [(gear, 0, 1, [_Piece(part, 0, 0, 1)]) for part in parts]
        with self._lock:
            self._check_open()
            self._context.activate()
            for gear, size, rows, pieces in executions:
                lane = self._lanes[self._next_lane]
                self._next_lane = (self._next_lane + 1) % len(self._lanes)
                with lane.lock:
                    self._finish(lane)  # backpressure: the lane's previous batch completes
                    if batch._error is not None:
                        break
                    self._enqueue(batch, lane, gear, size, rows, pieces)
        return batch

    def infer_async(self, feeds: Feeds) -> PendingBatch:
        """`submit` of one request: `.result()[0]` is its outputs."""
        return self.submit([feeds])

    def close(self) -> None:
        """Wait for submitted batches, then release model(s), datasets, buffers, stream(s),
        context and device (idempotent)."""
        with self._lock:
            for lane in self._lanes:
                with lane.lock, contextlib.suppress(Exception):
                    if not self.closed:
                        self._context.activate()
                        self._finish(lane)
            super().close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{self!r} is closed")

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"Session({str(self.path)!r}, device {self.device_id}, {self.runtime}{state})"

    # -- opening ---------------------------------------------------------------------------

    def _keep(self, resource: _T) -> _T:
        self._resources.append(resource)
        return resource

    def _open(self, acl: ModuleType) -> None:
        device = self._keep(Device(acl, self.device_id))
        self._context = self._keep(Context(device))
        self._stream = self._keep(Stream(self._context))
        self._model = self._keep(Model(self._context, self.path))
        desc = self._model.description
        self._kind = desc.kind
        self._gear_table = _gear_table(desc, self.path)
        largest = max(desc.batch_gears, default=0)

        # Inputs, then the gear input where the model puts it (last), all in one dataset.
        buffers: dict[int, DeviceBuffer] = {}
        self._input_slots: list[_Slot] = []
        for number, info in enumerate(desc.inputs):
            dtype = info.spec.dtype
            needed = max(_nbytes(g.shapes[number], dtype, largest) for g in self._gear_table)
            slot = self._slot(info.spec, max(needed, info.size, 1))
            buffers[info.index] = slot.device
            self._input_slots.append(slot)
        if desc.gear_input is not None:
            if desc.gear_input_size <= 0:
                raise ModelFileError(f"{self.path}: the model reports a 0-byte gear input")
            size = desc.gear_input_size
            buffers[desc.gear_input] = self._keep(DeviceBuffer(self._context, size))
        ordered = [buffers[index] for index in range(desc.input_count)]
        self._inputs_ds = self._keep(Dataset(self._context, ordered))

        # Every gear's output shapes, read once with the gear selected.
        self._output_shapes: dict[tuple[int, int], list[Shape]] = {}
        for number in range(len(self._gear_table)):
            for batch in desc.batch_gears or (0,):
                if desc.kind == "static":
                    shapes = [info.spec.shape for info in desc.outputs]
                else:
                    self._select(number, batch)
                    shapes = self._model.current_output_shapes()
                self._output_shapes[(number, batch)] = shapes
        self.gears = self._gear_info(desc)

        self._output_slots: list[_Slot] = []
        for number, info in enumerate(desc.outputs):
            every = [shapes[number] for shapes in self._output_shapes.values()]
            needed = max(_nbytes(shape, info.spec.dtype, 0) for shape in every)
            self._output_slots.append(self._slot(info.spec, max(needed, info.size, 1)))
        self._outputs_ds = self._keep(
            Dataset(self._context, [s.device for s in self._output_slots])
        )

        self.inputs = tuple(info.spec for info in desc.inputs)
        self.outputs = tuple(
            dataclasses.replace(
                info.spec, shape=_merge([s[n] for s in self._output_shapes.values()])
            )
            for n, info in enumerate(desc.outputs)
        )
        self._open_lanes(desc)
        held = sum(r.size for r in self._resources if isinstance(r, DeviceBuffer))
        self._counters.device_bytes_held = held

    def _open_lanes(self, desc: ModelDescription) -> None:
        """Lane 0 is the session's own model, stream and buffers; each further lane loads the
        `.om` again (a model id must not run on two streams at once) with buffers of its own."""
        self._lanes.append(
            _Lane(
                self._model,
                self._stream,
                self._input_slots,
                self._output_slots,
                self._inputs_ds,
                self._outputs_ds,
            )
        )
        for _ in range(self.pipeline_depth - 1):
            stream = self._keep(Stream(self._context))
            model = self._keep(Model(self._context, self.path))
            buffers: dict[int, DeviceBuffer] = {}
            inputs = []
            for info, first in zip(desc.inputs, self._input_slots):
                slot = self._slot(info.spec, first.host.size)
                buffers[info.index] = slot.device
                inputs.append(slot)
            if desc.gear_input is not None:
                gear = DeviceBuffer(self._context, desc.gear_input_size)
                buffers[desc.gear_input] = self._keep(gear)
            ordered = [buffers[index] for index in range(desc.input_count)]
            inputs_ds = self._keep(Dataset(self._context, ordered))
            outputs = [self._slot(s.spec, s.host.size) for s in self._output_slots]
            outputs_ds = self._keep(Dataset(self._context, [s.device for s in outputs]))
            self._lanes.append(_Lane(model, stream, inputs, outputs, inputs_ds, outputs_ds))

    def _slot(self, spec: TensorSpec, size: int) -> _Slot:
        host = self._keep(HostBuffer(self._context, size))
        return _Slot(spec, host, self._keep(DeviceBuffer(self._context, size)))

    def _gear_info(self, desc: ModelDescription) -> GearInfo:
        if desc.kind == "batch":
            for (_, batch), shapes in self._output_shapes.items():
                for info, shape in zip(desc.outputs, shapes):
                    if not shape or shape[0] != batch:
                        raise ModelFileError(
                            f"{self.path}: output {info.spec.name!r} has shape {shape} at batch "
                            f"gear {batch}; expected the batch on axis 0"
                        )
            batch_gears = normalize_gears(desc.batch_gears)
        else:
            every = [s for g in self._gear_table for s in g.shapes]
            every += [s for shapes in self._output_shapes.values() for s in shapes]
            heads = {shape[0] if shape else 0 for shape in every}
            batch_gears = (heads.pop(),) if len(heads) == 1 and min(heads) > 0 else ()
        return GearInfo(
            kind=desc.kind,
            batched=bool(batch_gears),
            batch_gears=batch_gears,
            hw_gears=desc.hw_gears,
            dims_gears=desc.dims_gears,
            max_batch=max(batch_gears, default=0),
        )

    # -- validation ------------------------------------------------------------------------

    def _match(self, feeds: Feeds) -> tuple[int, int]:
        """(index in the gear table, rows) of a request; InputError if it does not fit.

        A signature (names, dtypes, shapes of numpy arrays) that fitted once is looked up.
        """
        key = _signature(feeds)
        if key is None:
            return self._check(feeds)
        found = self._matched.get(key)
        if found is None:
            found = self._check(feeds)
            if len(self._matched) < _MATCH_CACHE_SIZE:
                self._matched[key] = found
        return found

    def _check(self, feeds: Feeds) -> tuple[int, int]:
        """`_match` without the lookup: every check, with the message of the first failure."""
        if not isinstance(feeds, Mapping):
            raise InputError(
                f"expected a mapping of input name to numpy array, got {type(feeds).__name__}"
            )
        names = [spec.name for spec in self.inputs]
        unknown = [name for name in feeds if name not in names]
        missing = [name for name in names if name not in feeds]
        if unknown or missing:
            problems = [f"unknown input(s) {', '.join(map(repr, unknown))}"] if unknown else []
            problems += [f"missing input(s) {', '.join(missing)}"] if missing else []
            raise InputError(f"{'; '.join(problems)}; the model's inputs are {self._inputs_text()}")
        batched = self.gears.batched
        first = 1 if batched else 0  # the batch axis takes any number of rows
        rows: dict[str, int] = {}
        for spec in self.inputs:
            array = feeds[spec.name]
            if not isinstance(array, np.ndarray):
                raise InputError(
                    f"input {spec.name!r}: expected a numpy.ndarray of {_dtype_text(spec.dtype)}, "
                    f"got {type(array).__name__}"
                )
            if array.dtype != spec.dtype:
                raise InputError(
                    f"input {spec.name!r}: expected dtype {_dtype_text(spec.dtype)}, got "
                    f"{_dtype_text(array.dtype)}; convert it explicitly (astype)"
                )
            fixed = all(
                want in (-1, got) for want, got in zip(spec.shape[first:], array.shape[first:])
            )
            if array.ndim != len(spec.shape) or not fixed:
                raise InputError(
                    f"input {spec.name!r}: expected shape {_template(spec.shape, batched)}, "
                    f"got {array.shape}"
                )
            if batched:
                if array.shape[0] < 1:
                    raise InputError(f"input {spec.name!r}: expected at least one row, got 0")
                rows[spec.name] = array.shape[0]
        if len(set(rows.values())) > 1:
            counts = ", ".join(f"{name} has {count}" for name, count in rows.items())
            raise InputError(f"inputs must have the same number of rows (axis 0); {counts}")
        for number, gear in enumerate(self._gear_table):
            if all(
                want in (-1, got)
                for spec, shape in zip(self.inputs, gear.shapes)
                for want, got in zip(shape[first:], feeds[spec.name].shape[first:])
            ):
                return number, next(iter(rows.values()), 1)
        got = ", ".join(f"{spec.name} {feeds[spec.name].shape}" for spec in self.inputs)
        labels = "; ".join(gear.label for gear in self._gear_table)
        kind = _KIND_LABELS[self._kind]
        raise InputError(f"input shapes {got} match none of the model's {kind} gears: {labels}")

    def _inputs_text(self) -> str:
        return ", ".join(
            f"{spec.name} {spec.triton_dtype} {_template(spec.shape, self.gears.batched)}"
            for spec in self.inputs
        )

    # -- execution -------------------------------------------------------------------------

    def _run_rows(
        self,
        feeds_list: Sequence[Feeds],
        results: list[dict[str, np.ndarray]],
        gear: int,
        parts: list[tuple[int, int]],
    ) -> None:
        """Run requests `parts` ((index, rows) of one gear) as planned batch chunks."""
        for size, rows, pieces in self._pieces(parts):
            self._execute(feeds_list, results, gear, size, rows, pieces)

    def _pieces(self, parts: list[tuple[int, int]]) -> list[tuple[int, int, list[_Piece]]]:
        """(batch gear, rows, pieces) of each planned chunk for requests `parts`."""
        chunks = []
        queue = list(parts)
        taken = 0  # rows of queue[0] already placed
        for chunk in self._plan(sum(rows for _, rows in parts)):
            pieces, filled = [], 0
            while filled < chunk.rows:
                part, rows = queue[0]
                count = min(rows - taken, chunk.rows - filled)
                pieces.append(_Piece(part, taken, filled, count))
                filled += count
                taken += count
                if taken == rows:
                    queue.pop(0)
                    taken = 0
            chunks.append((chunk.gear, chunk.rows, pieces))
        return chunks

    def _plan(self, rows: int) -> list[Chunk]:
        """`plan_chunks` for this model's gears, remembered per row count."""
        plan = self._plans.get(rows)
        if plan is None:
            plan = plan_chunks(rows, self.gears.batch_gears)
            if len(self._plans) < _PLAN_CACHE_SIZE:
                self._plans[rows] = plan
        return plan

    def _execute(
        self,
        feeds_list: Sequence[Feeds],
        results: list[dict[str, np.ndarray]],
        gear: int,
        batch: int,
        rows: int,
        pieces: list[_Piece],
    ) -> None:
        """One execution of `rows` real rows in batch gear `batch` (0: unbatched model).

        Stages `pieces` in the pinned buffers, zeroes the padding, runs, scatters the outputs.
        """
        batched = self.gears.batched
        h2d_bytes, h2d_seconds = 0, 0.0
        key = (gear, batch if self._kind == "batch" else 0)
        for slot, view in zip(self._input_slots, self._staging(self._lanes[0], True, gear, batch)):
            for piece in pieces:
                source = feeds_list[piece.part][slot.spec.name]
                if batched:
                    view[piece.in_execution] = source[piece.in_part]
                else:
                    view[...] = source
            if batch > rows:
                view[rows:] = 0
            started = time.perf_counter()
            slot.device.copy_from_host(slot.host, view.nbytes)
            h2d_seconds += time.perf_counter() - started
            h2d_bytes += view.nbytes

        if self._kind != "static":
            self._select(*key)
        started = time.perf_counter()
        self._model.execute(self._inputs_ds, self._outputs_ds, self._stream)
        execute_seconds = time.perf_counter() - started

        d2h_bytes, d2h_seconds = 0, 0.0
        for slot, whole, shape in zip(
            self._output_slots,
            self._staging(self._lanes[0], False, *key),
            self._output_shapes[key],
        ):
            view = whole[:rows] if batched else whole
            started = time.perf_counter()
            slot.device.copy_to_host(slot.host, view.nbytes)
            d2h_seconds += time.perf_counter() - started
            d2h_bytes += view.nbytes
            name = slot.spec.name
            for piece in pieces:
                outputs = results[piece.part]
                if not batched:
                    outputs[name] = view.copy()
                    continue
                output = outputs.get(name)
                if output is None:
                    total = len(feeds_list[piece.part][self.inputs[0].name])
                    if piece.rows == total:  # the whole request ran in this execution
                        outputs[name] = view[piece.in_execution].copy()
                        continue
                    output = outputs[name] = np.empty((total, *shape[1:]), slot.spec.dtype)
                output[piece.in_part] = view[piece.in_execution]

        with self._counters_lock:
            counters = self._counters
            counters.executions += 1
            counters.rows += rows
            counters.padded_rows += max(batch - rows, 0)
            counters.execute_seconds += execute_seconds
            counters.h2d_bytes += h2d_bytes
            counters.h2d_seconds += h2d_seconds
            counters.d2h_bytes += d2h_bytes
            counters.d2h_seconds += d2h_seconds

    def _select(self, gear: int, batch: int) -> None:
        """The set_* call for gear `gear` (batch gear `batch` for a dynamic-batch model)."""
        self._select_on(self._model, self._inputs_ds, gear, batch)

    def _select_on(self, model: Model, inputs: Dataset, gear: int, batch: int) -> None:
        if self._kind == "batch":
            model.set_dynamic_batch_size(inputs, batch)
        elif self._kind == "hw":
            height, width = self._gear_table[gear].values
            model.set_dynamic_hw_size(inputs, height, width)
        else:
            model.set_input_dynamic_dims(inputs, self._gear_table[gear].values)

    # -- pipelined execution (submit) -------------------------------------------------------

    def _staging(self, lane: _Lane, inputs: bool, gear: int, batch: int) -> list[np.ndarray]:
        """Typed views of a lane's pinned buffers of the inputs (or outputs) for a gear, made once.

        Inputs: `batch` is the execution's batch gear (0: unbatched). Outputs: the key of
        `_output_shapes`.
        """
        key = (inputs, gear, batch)
        views = lane.views.get(key)
        if views is None:
            if inputs:
                shapes = [_concrete(s, batch) for s in self._gear_table[gear].shapes]
                slots = lane.input_slots
            else:
                shapes, slots = self._output_shapes[(gear, batch)], lane.output_slots
            views = [_view(s.host, s.spec.dtype, shape) for s, shape in zip(slots, shapes)]
            lane.views[key] = views
        return views

    def _enqueue(
        self,
        batch: PendingBatch,
        lane: _Lane,
        gear: int,
        size: int,
        rows: int,
        pieces: list[_Piece],
    ) -> None:
        """Stage `pieces` in the (free) lane and queue copy in, execute, copy out on its stream.

        Called with the session lock and `lane.lock` held. A failing call fails the batch; the
        work already queued is waited for so the lane is free again.
        """
        job = _Job(batch, lane, gear, size, rows, pieces, queued=time.perf_counter())
        batch._jobs.append(job)
        batched = self.gears.batched
        key = (gear, size if self._kind == "batch" else 0)
        try:
            for slot, view in zip(lane.input_slots, self._staging(lane, True, gear, size)):
                for piece in pieces:
                    source = batch._feeds_list[piece.part][slot.spec.name]
                    if batched:
                        view[piece.in_execution] = source[piece.in_part]
                    else:
                        view[...] = source
                if size > rows:
                    view[rows:] = 0
                slot.device.copy_from_host_async(slot.host, view.nbytes, lane.stream)
                job.h2d_bytes += view.nbytes
            if self._kind != "static":
                self._select_on(lane.model, lane.inputs_ds, *key)
            lane.model.execute_async(lane.inputs_ds, lane.outputs_ds, lane.stream)
            for slot, whole in zip(lane.output_slots, self._staging(lane, False, *key)):
                view = whole[:rows] if batched else whole
                slot.device.copy_to_host_async(slot.host, view.nbytes, lane.stream)
        except AclError as exc:
            batch._error = exc
            job.done = True
            with contextlib.suppress(AclError):
                lane.stream.synchronize()  # let what was queued finish before the lane is reused
            return
        lane.job = job

    def _settle(self, job: _Job) -> None:
        """Harvest `job` unless that happened already (from `PendingBatch.result`)."""
        with job.lane.lock:
            if job.lane.job is job:
                self._context.activate()
                self._finish(job.lane)

    def _finish(self, lane: _Lane) -> None:
        """Wait for the lane's queued execution and scatter its outputs (lane lock held)."""
        job, lane.job = lane.job, None
        if job is None:
            return
        batch = job.batch
        try:
            lane.stream.synchronize()
        except AclError as exc:
            if batch._error is None:
                batch._error = exc
            with contextlib.suppress(AclError):
                lane.stream.synchronize()  # make sure nothing is still running on the lane
        finished = time.perf_counter()
        with batch._lock:
            self._scatter(lane, job, finished)
        job.done = True

    def _scatter(self, lane: _Lane, job: _Job, finished: float) -> None:
        """Copy a harvested execution's outputs into its batch's results (batch lock held)."""
        batch = job.batch
        batch.times.append((self._lanes.index(lane), job.queued, finished))
        if batch._error is not None:
            return
        batched = self.gears.batched
        key = (job.gear, job.size if self._kind == "batch" else 0)
        d2h_bytes = 0
        for slot, whole, shape in zip(
            lane.output_slots, self._staging(lane, False, *key), self._output_shapes[key]
        ):
            view = whole[: job.rows] if batched else whole
            d2h_bytes += view.nbytes
            name = slot.spec.name
            for piece in job.pieces:
                outputs = batch._results[piece.part]
                if not batched:
                    outputs[name] = view.copy()
                    continue
                output = outputs.get(name)
                if output is None:
                    total = len(batch._feeds_list[piece.part][self.inputs[0].name])
                    if piece.rows == total:
                        outputs[name] = view[piece.in_execution].copy()
                        continue
                    output = outputs[name] = np.empty((total, *shape[1:]), slot.spec.dtype)
                output[piece.in_part] = view[piece.in_execution]
        with self._counters_lock:
            counters = self._counters
            counters.executions += 1
            counters.rows += job.rows
            counters.padded_rows += max(job.size - job.rows, 0)
            # Queued work is not timed call by call: the execution's span covers copy in,
            # execute and copy out on the lane's stream.
            counters.execute_seconds += finished - job.queued
            counters.h2d_bytes += job.h2d_bytes
            counters.d2h_bytes += d2h_bytes


def _signature(feeds: Feeds) -> _Signature | None:
    """(name, dtype, shape) of each input when `feeds` is a dict of numpy arrays, else None."""
    if not isinstance(feeds, dict):
        return None
    signature = []
    for name, array in feeds.items():
        if not isinstance(array, np.ndarray):
            return None
        signature.append((name, array.dtype, array.shape))
    return tuple(signature)


def _close_in_order(resources: list[Resource]) -> None:
    """Model first, then datasets and buffers, stream, context and device (newest first)."""
    ordered: list[Resource] = [r for r in resources if isinstance(r, Model)]
    ordered += [r for r in reversed(resources) if not isinstance(r, Model)]
    first: BaseException | None = None
    for resource in ordered:
        try:
            resource.close()
        except Exception as exc:
            first = first or exc
    resources.clear()
    if first is not None:
        raise first


def _verify_sha256(path: Path, expected: str) -> None:
    if not isinstance(expected, str) or not _SHA256.fullmatch(expected):
        raise ValueError(f"sha256 must be 64 hexadecimal characters, got {expected!r}")
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected.lower():
        raise ModelFileError(
            f"{path}: sha256 mismatch: expected {expected.lower()}, the file has "
            f"{digest.hexdigest()}; refusing to load it"
        )


def _gear_table(desc: ModelDescription, path: Path) -> list[_Gear]:
    """The input configurations the model runs, with every input's full shape."""
    shapes = tuple(info.spec.shape for info in desc.inputs)
    names = [info.spec.name for info in desc.inputs]
    if desc.kind == "static":
        return [_Gear(shapes, "static shapes " + ", ".join(map(str, shapes)))]
    if desc.kind == "batch":
        for name, shape in zip(names, shapes):
            if not shape or shape[0] != -1 or -1 in shape[1:]:
                raise ModelFileError(
                    f"{path}: dynamic-batch input {name!r} has dims {list(shape)}; expected -1 "
                    "on axis 0 only"
                )
        return [_Gear(shapes, ", ".join(map(str, normalize_gears(desc.batch_gears))))]
    if desc.kind == "hw":
        for name, shape in zip(names, shapes):
            if shape.count(-1) not in (0, 2):
                raise ModelFileError(
                    f"{path}: dynamic-HW input {name!r} has dims {list(shape)}; expected -1 on "
                    "exactly the H and W axes"
                )
        return [
            _Gear(tuple(_fill(shape, (h, w)) for shape in shapes), f"{h}x{w}", (h, w))
            for h, w in desc.hw_gears
        ]
    table = []
    for gear in desc.dims_gears:
        for name, shape, concrete in zip(names, shapes, gear):
            if len(shape) != len(concrete) or not all(
                s in (-1, c) for s, c in zip(shape, concrete)
            ):
                raise ModelFileError(
                    f"{path}: dims gear {[list(s) for s in gear]} gives input {name!r} the shape "
                    f"{list(concrete)}, which does not fit its dims {list(shape)}"
                )
        label = ", ".join(f"{name} {shape}" for name, shape in zip(names, gear))
        table.append(_Gear(gear, label, tuple(d for shape in gear for d in shape)))
    return table


def _fill(shape: Shape, values: Sequence[int]) -> Shape:
    """`shape` with its -1 dims replaced by `values`, in order."""
    remaining = iter(values)
    return tuple(next(remaining) if d == -1 else d for d in shape)


def _concrete(shape: Shape, batch: int) -> Shape:
    """`shape` with axis 0 set to `batch` (unless `batch` is 0)."""
    return (batch, *shape[1:]) if batch else shape


def _nbytes(shape: Shape, dtype: np.dtype[Any], batch: int) -> int:
    return math.prod(_concrete(shape, batch)) * dtype.itemsize


def _merge(shapes: list[Shape]) -> Shape:
    """One shape for all of `shapes`: -1 on axes where they differ."""
    return tuple(dims[0] if len(set(dims)) == 1 else -1 for dims in zip(*shapes))


def _view(host: HostBuffer, dtype: np.dtype[Any], shape: Shape) -> np.ndarray:
    """A typed view of the start of a pinned buffer."""
    nbytes = math.prod(shape) * dtype.itemsize
    return host.array[:nbytes].view(dtype).reshape(shape)


def _template(shape: Shape, batched: bool) -> str:
    dims = [
        "rows" if batched and axis == 0 else "?" if d == -1 else str(d)
        for axis, d in enumerate(shape)
    ]
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _dtype_text(dtype: np.dtype[Any]) -> str:
    triton = _TRITON_NAMES.get(dtype)
    return f"{dtype} ({triton})" if triton else str(dtype)
