"""A lane: one loaded model id with its stream, pinned host and device buffers, datasets, events.

A `Session` runs every execution on a lane: stage the rows in the lane's pinned buffers, queue
copy in, gear selection, execute and copy out on its stream (`launch`), wait (`finish`), read the
outputs from the pinned buffers. One model id never runs on two streams (GE refuses it), so each
lane loads the `.om` itself. Four events per lane (`LaneEvents`) time the copies and the
execution on the device; they are created once with the lane, never per execution (a timeout
replaces them with the stream). An execution launched untimed records only the "executed" event
(the pipeline's waits need it) and reads no times; one neither timed nor pipelined (its caller
finishes it before launching again) records none.

A lane may instead sit in a device host's stream pool (`workspaces.Seat`): it then runs the copy
of its model loaded into that stream's shared work space, on that stream, which it neither
creates nor destroys; each launch holds the stream (`Seat.launching`), and `finish` waits for the
lane's own "end" event (recorded after every launch), not for the stream, then lets the seat read
the stream's device failures (`Seat.audit`). Its input and output buffers are then views of the
stream's I/O area (`Slot.shared`), carved one after another (`ascend.carved_bytes`), but those
`workspaces.shares_io_buffer` keeps its own; when the pool has replaced the area (grown), the
lane makes its views, datasets and layouts again under its next hold, before queuing anything.

A dynamic-shape model with an unbounded output served without `max_output_bytes` runs
synchronously instead: its lanes hold an empty data buffer for each such output, which ACL fills
with device memory it allocates only in `acl.mdl.execute` (aclmdlGetOutputSizeByIndex.md), so
`launch` copies in and executes at once (nothing on the stream; device times are the host's), and
`finish` copies each such output out, frees it (`acl.rt.free`) and empties its buffer; after a
failure `settle` frees whatever ACL allocated. Pooled buffers (`max_output_bytes`) are faster: no
allocation per execution, and the copies and executions queue on the stream.

Locks, always taken in this order: the session's, then one lane's `lock` (the lane being
launched or finished), then the `_events_lock` of the lane launched before it (held only to
queue the wait on its "executed" event, to record that event late, or to replace its events;
nothing is taken under it).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ge_python_backend.aipp import AippOp
from ge_python_backend.ascend import AclCode, GearKind, MemcpyKind, carved_bytes, malloc_reserved
from ge_python_backend.modelinfo import TensorSpec
from ge_python_backend.runtime._resource import Resource, close_all
from ge_python_backend.runtime.batching import Execution
from ge_python_backend.runtime.device import Context, Event, Stream
from ge_python_backend.runtime.dvpp import DvppBuffer
from ge_python_backend.runtime.errors import AclError, OutputTooLargeError
from ge_python_backend.runtime.gears import GearTable
from ge_python_backend.runtime.memory import DeviceBuffer, DeviceView, HostBuffer, QueuedCopy
from ge_python_backend.runtime.model import Dataset, Model
from ge_python_backend.runtime.workspaces import Seat, shares_io_buffer

__all__ = ["DeviceTimes", "Lane", "LaneEvents", "Layout"]

logger = logging.getLogger(__name__)

Shape = tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Slot:
    """An input or output with its pinned host buffer and device buffer (an output the system
    allocates has no slot: None in `Lane.output_slots`)."""

    spec: TensorSpec
    host: HostBuffer
    device: DeviceBuffer
    # written on the device (an image input: DVPP's VPC writes its rows), never staged or copied
    device_written: bool = False
    # `device` is a view of the seat's stream's I/O area (`workspaces.shares_io_buffer`)
    shared: bool = False


class DeviceTimes(NamedTuple):
    """Seconds one execution spent on the device: copy in, execute, copy out."""

    h2d: float
    execute: float
    d2h: float


class Layout(NamedTuple):
    """What an execution of one (gear, batch, rows) touches on a lane, worked out once per
    lane: its staged inputs (padding rows included) and its outputs' real rows as
    views of the pinned buffers, and the copies in and out (none for an empty tensor)."""

    inputs: list[np.ndarray]
    outputs: list[np.ndarray]
    copies_in: list[QueuedCopy]
    copies_out: list[QueuedCopy]
    in_bytes: int
    out_bytes: int


class LaneEvents(NamedTuple):
    """The events recorded on a lane's stream around one execution."""

    start: Event  # before the copies in
    executing: Event  # before the execution
    executed: Event  # the execution left the execute engine
    end: Event  # the copies out completed


class Lane(Resource):
    """One model id, its stream and buffer set; `index` is its place in the session. `model` is
    the lane's own loaded model, or its `Seat` in a stream pool (the pool's copy and stream)."""

    def __init__(
        self,
        index: int,
        context: Context,
        model: Model | Seat,
        input_sizes: Sequence[int],
        device_written: Collection[str] = (),
    ) -> None:
        self.index = index
        self.context = context
        self.seat = model if isinstance(model, Seat) else None
        self._model = model if isinstance(model, Model) else None
        self._parts: list[Resource] = [model]
        self._own(_close_parts, self._parts)
        try:
            self._stream = None if self.seat is not None else self._keep(Stream(context))
            self.events = self._new_events()
            desc = self.model.description
            self.dynamic = desc.dynamic_shape
            self._area: DeviceBuffer | None = None  # the I/O area the shared slots view
            written = [info.spec.name in device_written for info in desc.inputs]
            shared = [self._shares(False, w) for w in written]
            # the area asked for the outputs too (their described sizes), so that it grows once
            described = [max(info.size, 1) for info in desc.outputs if self._shares(True)]
            wanted = [n for n, s in zip(input_sizes, shared) if s]
            views = iter(self._carve(wanted, sum(map(carved_bytes, described))))
            self.input_slots = [
                self._slot(info.spec, size, w, next(views) if s else None)
                for info, size, w, s in zip(desc.inputs, input_sizes, written, shared)
            ]
            self._fixed: dict[int, DeviceBuffer] = {}  # gear input, AIPP parameters: its own
            if desc.gear_input is not None:
                gear_buffer = DeviceBuffer(context, desc.gear_input_size)
                self._fixed[desc.gear_input] = self._keep(gear_buffer)
            for index, size in desc.aipp_inputs:
                self._fixed[index] = self._keep(DeviceBuffer(context, size))
            self.inputs = self._input_dataset(set_aipp=True)
            self.output_slots: list[Slot | None] = []  # None: the system allocates it
            self.outputs: Dataset | None = None
            self.synchronous = False  # executes with acl.mdl.execute (`open_outputs`)
        except BaseException:
            self._abandon()
            raise
        self._layouts: dict[tuple[int, int, int], Layout] = {}
        self._staged = Layout([], [], [], [], 0, 0)  # the layout `launch` queues
        # a dynamic-shape model: the shapes of the execution staged (inputs) and finished
        # (outputs, read from the output tensor descs)
        self._input_shapes: list[Shape] = []
        self._output_shapes: list[Shape] = []
        self._taken: dict[int, np.ndarray] = {}  # system-allocated outputs, copied out
        self._host_times = DeviceTimes(0.0, 0.0, 0.0)  # a synchronous execution's, measured
        self.lock = threading.Lock()  # held while staging into, or finishing, the lane
        self._events_lock = threading.Lock()  # replacing `events` vs another lane waiting on them
        self.job: Any = None  # the session's execution launched here and not yet finished
        self._launched = 0.0
        self._ticket = 0  # a seated lane's last launch on the pool's stream (`Seat.audit`)
        self._timed = True  # whether the work launched last records its timing events
        self.executed_recorded = True  # whether it records its "executed" event
        self._events_work = True

    @property
    def model(self) -> Model:
        """The loaded model the lane executes (a seat's copy may be reloaded by its pool)."""
        if self.seat is not None:
            return self.seat.model
        assert self._model is not None
        return self._model

    @property
    def stream(self) -> Stream:
        """The stream the lane queues its work on (a pool's is replaced for all its lanes)."""
        if self.seat is not None:
            return self.seat.stream
        assert self._stream is not None
        return self._stream

    @classmethod
    def open_first(
        cls,
        context: Context,
        path: Path,
        input_shape_order: Sequence[str] | None = None,
        aipp: Sequence[AippOp] = (),
        max_output_bytes: int | None = None,
        device_written: Collection[str] = (),
        seat: Seat | None = None,
    ) -> tuple[Lane, GearTable]:
        """Lane 0 and the model's gear table: the `.om` loaded (or `seat`'s copy, whose table
        the first session of the model read), the gears' output shapes read on this lane, every
        buffer sized for the largest execution of any gear (`aipp`: the fixed parameters of a
        dynamic-AIPP model, see `Model`). A dynamic-shape model's buffers take the sizes the
        model reports (range upper bounds); an output whose size is unbounded (0) takes
        `max_output_bytes`, without which the system allocates it at each (synchronous)
        execution. The inputs `device_written` names get DVPP memory the device writes
        (`dvpp.ImageStage`), never staged or copied."""
        if seat is not None:
            with seat.copies.opening:  # the copies are shared: one session reads the gears
                return cls._open_first(
                    context, path, seat, max_output_bytes, device_written, seat.copies.table
                )
        model = Model(context, path, input_shape_order, aipp)
        return cls._open_first(context, path, model, max_output_bytes, device_written, None)

    @classmethod
    def _open_first(
        cls,
        context: Context,
        path: Path,
        source: Model | Seat,
        max_output_bytes: int | None,
        device_written: Collection[str],
        known: GearTable | None,
    ) -> tuple[Lane, GearTable]:
        """`open_first` with the model loaded (`source`), its gear table given when `known`."""
        desc = source.model.description if isinstance(source, Seat) else source.description
        try:
            table = known if known is not None else GearTable(desc, path)
            if desc.dynamic_shape:
                input_sizes = [max(info.size, 1) for info in desc.inputs]
            else:
                input_sizes = [
                    max(table.input_bytes(n, info.spec.dtype), info.size, 1)
                    for n, info in enumerate(desc.inputs)
                ]
            lane = cls(0, context, source, input_sizes, device_written)
        except BaseException:
            source.close()
            raise
        try:
            if known is None:
                table.read_outputs(lane.model, lane.inputs)
                if lane.seat is not None:
                    lane.seat.copies.table = table
            output_sizes: list[int | None]
            if desc.dynamic_shape:
                output_sizes = _dynamic_output_sizes(desc.outputs, max_output_bytes, path)
            else:
                output_sizes = [
                    max(table.output_bytes(n, info.spec.dtype), info.size, 1)
                    for n, info in enumerate(desc.outputs)
                ]
            lane.open_outputs(output_sizes)
        except BaseException:
            lane.close()
            raise
        return lane, table

    @classmethod
    def load(
        cls,
        index: int,
        context: Context,
        path: Path,
        input_shape_order: Sequence[str] | None,
        like: Lane,
        seat: Seat | None = None,
    ) -> Lane:
        """A further lane: the `.om` loaded again (or `seat`'s copy), with buffers sized like
        those of `like`."""
        model: Model | Seat
        if seat is not None:
            model = seat
        else:
            aipp = tuple(like.model.aipp.values())
            model = Model(context, path, input_shape_order, aipp, like.model.sizes)
        try:
            written = [slot.spec.name for slot in like.input_slots if slot.device_written]
            sizes = [slot.device.size for slot in like.input_slots]
            lane = cls(index, context, model, sizes, written)
        except BaseException:
            model.close()
            raise
        try:
            lane.open_outputs(
                [None if slot is None else slot.host.size for slot in like.output_slots]
            )
        except BaseException:
            lane.close()
            raise
        return lane

    def open_outputs(self, sizes: Sequence[int | None]) -> None:
        """The output buffers and dataset (sizes are known once the gears were read); a size
        None is an output the system allocates (an empty data buffer), which makes the lane
        execute synchronously. A seated lane's shared outputs are carved after its inputs (the
        area grown to hold both when smaller: the inputs' views are then made again)."""
        desc = self.model.description
        shared = [n is not None and self._shares(True) for n in sizes]
        before = [slot.device.size for slot in self.input_slots if slot.shared]
        views = self._carve(before + [n for n, s in zip(sizes, shared) if s and n is not None])
        outputs = iter(views[len(before) :])
        self.output_slots = [
            None if n is None else self._slot(info.spec, n, False, next(outputs) if s else None)
            for info, n, s in zip(desc.outputs, sizes, shared)
        ]
        self.synchronous = None in self.output_slots
        if views:  # the inputs' views made again: the area may have grown for the outputs
            self._rebind(views[0].area)
        else:
            self.outputs = self._output_dataset()

    @property
    def device_bytes(self) -> int:
        """Device memory the lane's own buffers hold, as malloc reserves it (not the model's
        weights and work space, nor a seated lane's views of its stream's I/O area)."""
        return sum(malloc_reserved(p.size) for p in self._parts if isinstance(p, DeviceBuffer))

    def stage(self, table: GearTable, execution: Execution, feeds_list: Sequence[Any]) -> int:
        """Write the execution's rows into the pinned input buffers, zero the padding rows;
        the bytes to copy in."""
        layout = self._staged = self._layout(table, execution, feeds_list)
        for slot, view, batched in zip(self.input_slots, layout.inputs, table.batched_inputs):
            if slot.device_written:
                continue
            if not (batched and execution.batch):  # whole: unbatched, or a side input
                view[...] = feeds_list[execution.pieces[0].part][slot.spec.name]
                continue
            name = slot.spec.name
            for piece in execution.pieces:
                rows = feeds_list[piece.part][name]
                view[piece.in_execution] = rows if piece.whole else rows[piece.in_part]
            if execution.batch > execution.rows:
                view[execution.rows :] = 0
        return layout.in_bytes

    def launch(
        self,
        table: GearTable,
        execution: Execution,
        after: Lane | None = None,
        timed: bool = True,
        pipelined: bool = True,
    ) -> int:
        """Queue copy in, gear selection, execute and copy out on the stream; the bytes to copy
        out. The inputs must have been staged (`stage`: its layout is the one queued). `timed`
        False records no timing events: `finish` then returns no device times. Neither timed
        nor `pipelined` (the caller finishes it before launching anything else): not even the
        "executed" event, which only waits for a pending execution need.

        With `after` (the lane launched before, on the same device), the execution waits for
        that lane's execution to leave the device: copies still overlap it, executions do not,
        so each lane's execute events time only its own device time (their sum is the device's
        busy time, never more than the wall time). A lane with nothing pending (its execution
        was waited for) needs no such wait.
        """
        assert self.outputs is not None
        layout = self._staged
        self.context.activate()
        self._launched = time.perf_counter()
        if self.seat is None:
            self._queue(layout, table, execution, after, timed, pipelined)
        else:  # the pool's stream is held meanwhile; its end event tells `finish` it is done
            with self.seat.launching(self.synchronous) as self._ticket:
                area = self.seat.io
                if self._area is not None and area is not self._area:  # the pool grew it
                    assert area is not None
                    self._rebind(area)
                    layout = self._staged = self._restaged(table, execution)
                self._queue(layout, table, execution, after, timed, pipelined)
        return layout.out_bytes

    def _queue(
        self,
        layout: Layout,
        table: GearTable,
        execution: Execution,
        after: Lane | None,
        timed: bool,
        pipelined: bool,
    ) -> None:
        """`launch`'s work queued on the stream (or run now, a synchronous lane)."""
        if self.synchronous:
            self._execute_now(layout)
            return
        events = self.events
        stream = self.stream
        assert self.outputs is not None
        self._timed = timed
        self.executed_recorded = timed or pipelined
        if timed:
            events.start.record(stream)
        for copy in layout.copies_in:
            copy.queue(stream)
        if table.kind != GearKind.STATIC:
            table.select(self.model, self.inputs, execution.gear, execution.batch)
        if self.dynamic:
            self.model.set_input_shapes(self.inputs, self._input_shapes)
        if after is not None and after is not self:
            after.queue_wait_for_execution(stream)
        if timed:
            events.executing.record(stream)
        self.model.execute_async(self.inputs, self.outputs, stream)
        if self.executed_recorded:
            events.executed.record(stream)
        for copy in layout.copies_out:  # none for a dynamic-shape model: `finish` copies
            copy.queue(stream)
        if timed or self.seat is not None:  # a seated lane waits for its own end event
            events.end.record(stream)

    def _execute_now(self, layout: Layout) -> None:
        """A lane whose outputs the system allocates: copy in, set the inputs' dims and run
        the model with `acl.mdl.execute` (ACL allocates those outputs meanwhile); nothing is
        queued on the stream, so nothing records an event, and the host times each part."""
        self._timed = False
        self.executed_recorded = False
        started = self._launched
        for copy in layout.copies_in:
            copy.run()
        copied = time.perf_counter()
        self.model.set_input_shapes(self.inputs, self._input_shapes)
        assert self.outputs is not None
        self.model.execute(self.inputs, self.outputs)
        self._host_times = DeviceTimes(copied - started, time.perf_counter() - copied, 0.0)

    def queue_wait_for_execution(self, stream: Stream) -> None:
        """Make work queued on `stream` (another lane's) from now on wait until this lane's
        pending execution has left the execute engine; no wait when none is pending. An
        execution launched without its "executed" event (not pipelined, and another thread
        submitted meanwhile) gets it recorded now, behind its copies out: the wait is longer,
        the executions still never overlap.

        The caller holds its own lane's lock, not this one's: `_events_lock` keeps a timeout
        finishing this lane in another thread from destroying the event meanwhile
        (`replace_stream`). A `job` read just as it is finished only adds or skips a wait on an
        event that exists.
        """
        with self._events_lock:
            if self.job is not None:
                if not self.executed_recorded:
                    self.events.executed.record(self.stream)
                stream.wait(self.events.executed)

    def finish(self, timeout_ms: int = 0) -> DeviceTimes | None:
        """Wait for the launched work (at most `timeout_ms` when > 0; a seated lane waits for its
        end event, not for the pool's stream); its device times (None when it was launched
        untimed and events can time).

        A dynamic-shape model's outputs are read here: their real shapes from the output
        tensor descs (final once the stream is synchronized), then their bytes, copied out; a
        system-allocated output into an array of its own, its memory then freed. A synchronous
        lane has nothing on its stream: its times are the host's (the copy out's measured here).
        """
        if self.synchronous:
            started = time.perf_counter()
            self._read_dynamic_outputs()
            h2d, execute, _ = self._host_times
            return DeviceTimes(h2d, execute, time.perf_counter() - started)
        if self.seat is None:
            self.stream.synchronize(timeout_ms)
        else:
            self._wait_for_end(timeout_ms)
            self.seat.audit(self._ticket, timeout_ms)
        times = self._times() if self._timed or not self._events_work else None
        if self.dynamic:
            self._read_dynamic_outputs()
        return times

    def _wait_for_end(self, timeout_ms: int) -> None:
        """Wait until the stream has reached the lane's end event (at most `timeout_ms` when
        > 0: past it AclError with ACL's event timeout code); a pyACL without
        `synchronize_event_with_timeout` waits without a bound."""
        end = self.events.end
        reached = end.reached(timeout_ms if timeout_ms > 0 else -1)
        if reached is None:
            end.synchronize()
        elif not reached:
            raise AclError(
                AclCode.RT_EVENT_SYNC_TIMEOUT,
                "acl.rt.synchronize_event_with_timeout",
                f"lane {self.index}'s execution did not finish within {timeout_ms} ms",
            )

    def _read_dynamic_outputs(self) -> None:
        """Each output's real shape from the output tensor descs, and its bytes copied out:
        into the pinned buffer, or taken from the system-allocated memory (freed); whatever
        the system allocated is freed however this ends."""
        assert self.outputs is not None
        outputs = self.outputs
        self._taken = {}
        try:
            self._output_shapes = self.model.output_shapes(outputs)
            for index, (slot, shape) in enumerate(zip(self.output_slots, self._output_shapes)):
                info = self.model.description.outputs[index]
                if slot is None:
                    self._taken[index] = outputs.take_output(index, shape, info.spec.dtype)
                    continue
                nbytes = math.prod(shape) * slot.spec.dtype.itemsize
                if nbytes > slot.host.size:
                    raise OutputTooLargeError(slot.spec.name, shape, nbytes, slot.host.size)
                if nbytes:
                    slot.device.copy_to_host(slot.host, nbytes)
        finally:
            if self.synchronous:
                outputs.release_outputs()

    def settle(self) -> None:
        """After a failure: wait until nothing of the lane's work still runs (a seated lane: its
        own work, an end event recorded behind it; the pool's stream goes on serving), and free
        what the system allocated for its outputs (errors logged)."""
        try:
            if self.seat is not None:
                self.events.end.record(self.stream)
                self.events.end.synchronize()
            else:
                self.stream.synchronize()
        except AclError as exc:
            logger.debug("lane %d: synchronize after a failure reported %s", self.index, exc)
        if self.synchronous and self.outputs is not None:
            try:
                self.outputs.release_outputs()
            except AclError as exc:
                logger.warning("lane %d: freeing the outputs ACL allocated: %s", self.index, exc)

    def replace_stream(self) -> None:
        """A stream that timed out may never finish: destroy it and its events, make new ones
        (a seated lane: the pool replaces its stream for every lane seated there).

        The buffers and the model are kept.
        """
        self.context.activate()
        hung = self.stream
        if self.seat is not None:
            self.seat.replace_stream(hung)
            stream = None
        else:
            stream = self._keep(Stream(self.context))
        events = self._new_events()
        with self._events_lock:
            old: list[Resource] = list(self.events)
            if stream is not None:
                old.append(hung)
                self._stream = stream
            self.events = events
        for resource in old:
            self._parts.remove(resource)
            try:
                resource.close()
            except AclError as exc:
                logger.warning("lane %d: releasing the timed-out stream: %s", self.index, exc)

    def output_views(self, table: GearTable, execution: Execution) -> list[np.ndarray]:
        """The pinned output buffers of an execution as arrays (trimmed to its real rows)."""
        if self.dynamic:
            return [
                self._taken[index] if s is None else _view(s.host, s.spec.dtype, shape)
                for index, (s, shape) in enumerate(zip(self.output_slots, self._output_shapes))
            ]
        return self._layout(table, execution).outputs

    def _layout(
        self, table: GearTable, execution: Execution, feeds_list: Sequence[Any] = ()
    ) -> Layout:
        """The execution's `Layout`, remembered per (gear, batch, rows). A dynamic-shape model's
        is made for its request's input shapes (from `feeds_list`, kept for `launch`) and
        copies no outputs at launch (`finish` does, once their shapes are known)."""
        if self.dynamic:
            (piece,) = execution.pieces
            feeds = feeds_list[piece.part]
            self._input_shapes = [feeds[slot.spec.name].shape for slot in self.input_slots]
            return self._new_layout(self._input_shapes, [])
        key = (execution.gear, execution.batch, execution.rows)
        layout = self._layouts.get(key)
        if layout is None:
            outputs = table.output_shapes[table.output_key(execution.gear, execution.batch)]
            if execution.batch:
                outputs = [(execution.rows, *shape[1:]) for shape in outputs]
            inputs = table.input_shapes(execution.gear, execution.batch)
            layout = self._layouts[key] = self._new_layout(inputs, outputs)
        return layout

    def _new_layout(self, inputs: Sequence[Shape], outputs: Sequence[Shape]) -> Layout:
        views_in = [
            np.empty((0,), s.spec.dtype) if s.device_written else _view(s.host, s.spec.dtype, shape)
            for s, shape in zip(self.input_slots, inputs)
        ]
        views_out = [  # (`outputs` is empty for a dynamic-shape model, the only kind with None)
            _view(s.host, s.spec.dtype, shape)
            for s, shape in zip(self.output_slots, outputs)
            if s is not None
        ]
        copied = [
            (slot, view)
            for slot, view in zip(self.input_slots, views_in)
            if view.nbytes  # a zero-size tensor (or a device-written input) has nothing to copy
        ]
        copies_in = [
            slot.device.queued_copy(slot.host, view.nbytes, MemcpyKind.HOST_TO_DEVICE)
            for slot, view in copied
        ]
        copies_out = [
            slot.device.queued_copy(slot.host, view.nbytes, MemcpyKind.DEVICE_TO_HOST)
            for slot, view in zip(self.output_slots, views_out)
            if slot is not None and view.nbytes
        ]
        return Layout(
            views_in,
            views_out,
            copies_in,
            copies_out,
            sum(view.nbytes for _, view in copied),
            sum(view.nbytes for view in views_out),
        )

    def _times(self) -> DeviceTimes:
        """Device times from the events; the host's wall time if events cannot be timed."""
        events = self.events
        if self._events_work:
            try:
                return DeviceTimes(
                    events.executing.seconds_since(events.start),
                    events.executed.seconds_since(events.executing),
                    events.end.seconds_since(events.executed),
                )
            except AclError as exc:
                # UNCONFIRMED on hardware: whether default events can be timed on every CANN.
                self._events_work = False
                logger.warning(
                    "lane %d: device timing with events failed (%s); execute time is measured "
                    "on the host from now on",
                    self.index,
                    exc,
                )
        return DeviceTimes(0.0, time.perf_counter() - self._launched, 0.0)

    def _new_events(self) -> LaneEvents:
        return LaneEvents(*(self._keep(Event(self.context)) for _ in LaneEvents._fields))

    def _slot(
        self, spec: TensorSpec, size: int, device_written: bool, view: DeviceView | None = None
    ) -> Slot:
        """A slot with its pinned buffer and device memory: `view` (of the stream's I/O area)
        when given, DVPP memory when `device_written`, else a device buffer of its own."""
        if device_written:  # the host buffer only gives the layout its (unused) view
            host = self._keep(HostBuffer(self.context, 1))
            return Slot(spec, host, self._keep(DvppBuffer(self.context, size)), True)
        host = self._keep(HostBuffer(self.context, size))
        if view is not None:
            return Slot(spec, host, view, shared=True)
        return Slot(spec, host, self._keep(DeviceBuffer(self.context, size)))

    def _shares(self, output: bool, device_written: bool = False) -> bool:
        """Whether a buffer of this lane is a view of its stream's I/O area."""
        return self.seat is not None and shares_io_buffer(output, device_written, self.dynamic)

    def _carve(self, sizes: Sequence[int], more: int = 0) -> list[DeviceView]:
        """Views of the seat's stream's I/O area for buffers of `sizes`, one after another (the
        area grown first when they and `more` bytes do not fit: not while the stream is held)."""
        if not sizes:
            return []
        assert self.seat is not None
        return _views(self.seat.io_area(sum(map(carved_bytes, sizes)) + more), sizes)

    def _rebind(self, area: DeviceBuffer) -> None:
        """Make the shared slots views of `area` (inputs, then outputs, as `_carve` placed
        them), and the datasets and layouts that hold their addresses, again."""
        shared = [s for s in (*self.input_slots, *self.output_slots) if s is not None and s.shared]
        views = iter(_views(area, [slot.device.size for slot in shared]))
        self.input_slots = [
            dataclasses.replace(s, device=next(views)) if s.shared else s for s in self.input_slots
        ]
        self.output_slots = [
            dataclasses.replace(s, device=next(views)) if s is not None and s.shared else s
            for s in self.output_slots
        ]
        old = [self.inputs, self.outputs]
        self.inputs, self.outputs = self._input_dataset(), self._output_dataset()
        for dataset in old:
            if dataset is not None:
                self._parts.remove(dataset)
                dataset.close()
        self._layouts.clear()
        self._area = area

    def _input_dataset(self, set_aipp: bool = False) -> Dataset:
        """The inputs' dataset: the slots' device memory, the gear input and AIPP parameters,
        written into their buffer when `set_aipp` (once per lane: GE copies them into the
        buffer, hicann/ge GeExecutor::SetDynamicAippData, so a later dataset over it has them)."""
        desc = self.model.description
        buffers = {info.index: s.device for info, s in zip(desc.inputs, self.input_slots)}
        buffers.update(self._fixed)
        dataset = self._keep(Dataset(self.context, [buffers[i] for i in range(desc.input_count)]))
        if set_aipp and desc.aipp_inputs:
            self.model.set_input_aipp(dataset)
        return dataset

    def _output_dataset(self) -> Dataset:
        """The outputs' dataset (an empty data buffer for an output the system allocates)."""
        devices = [None if s is None else s.device for s in self.output_slots]
        return self._keep(Dataset(self.context, devices))

    def _restaged(self, table: GearTable, execution: Execution) -> Layout:
        """The staged execution's layout made again (its views of the pinned buffers, which
        hold the staged rows, are the same; its copies use the new device addresses)."""
        if self.dynamic:
            return self._new_layout(self._input_shapes, [])
        return self._layout(table, execution)

    def input_buffer(self, name: str) -> DeviceBuffer:
        """The device buffer of input `name`."""
        return next(slot.device for slot in self.input_slots if slot.spec.name == name)

    def _keep(self, resource: Any) -> Any:
        self._parts.append(resource)
        return resource

    def __repr__(self) -> str:
        seat = f", stream {self.seat.index} of the pool" if self.seat is not None else ""
        closed = ", closed" if self.closed else ""
        return f"Lane({self.index}, model {self.model.model_id}{seat}{closed})"


def _dynamic_output_sizes(
    outputs: Sequence[Any], max_output_bytes: int | None, path: Path
) -> list[int | None]:
    """Output buffer sizes of a dynamic-shape model: the size the model reports (its range's
    upper bound), else `max_output_bytes`, else None (no upper bound: the system allocates the
    output at each synchronous execution, aclmdlGetOutputSizeByIndex.md)."""
    sizes: list[int | None] = []
    for info in outputs:
        if info.size == 0 and -1 in info.spec.shape:
            sizes.append(max_output_bytes)
        else:
            sizes.append(max(info.size, 1))
    unbounded = [info.spec.name for info, size in zip(outputs, sizes) if size is None]
    if unbounded:
        logger.info(
            "%s: outputs %s have data-dependent shapes with no upper bound "
            "(acl.mdl.get_output_size_by_index is 0): ACL allocates them at each execution "
            "(acl.mdl.execute, synchronous); the parameter max_output_bytes would pool them",
            path,
            ", ".join(unbounded),
        )
    return sizes


def _views(area: DeviceBuffer, sizes: Sequence[int]) -> list[DeviceView]:
    """Views of `area` for buffers of `sizes`, one after another (`ascend.carved_bytes`)."""
    views, offset = [], 0
    for size in sizes:
        views.append(DeviceView(area, offset, size))
        offset += carved_bytes(size)
    return views


def _close_parts(parts: list[Resource]) -> None:
    """Model (or seat) first (it uses the rest), then datasets, buffers, events, stream (newest
    first)."""
    ordered: list[Resource] = [p for p in parts if isinstance(p, (Model, Seat))]
    ordered += [p for p in reversed(parts) if not isinstance(p, (Model, Seat))]
    parts.clear()
    close_all(ordered)


def _view(host: HostBuffer, dtype: np.dtype[Any], shape: Shape) -> np.ndarray:
    """A typed view of the start of a pinned buffer."""
    nbytes = math.prod(shape) * dtype.itemsize
    return host.array[:nbytes].view(dtype).reshape(shape)
