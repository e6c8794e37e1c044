"""`Session`: one `.om` on one device, with pooled pinned/device buffers and gear-aware batching.

Everything is allocated once when the session opens: `pipeline_depth` lanes (`lane.py`), each a
loaded model id with its stream and one pinned host and one device buffer per input and output,
sized for the largest gear. Every call runs through one data path: requests are checked
(`feeds.py`), planned into executions (`batching.py`), and each execution takes the next lane
round robin. Taking a lane first completes the execution still pending on it (whoever submitted
it), then stages the rows in the lane's pinned buffers and queues copy in, gear selection,
execute and copy out on the lane's stream. `infer_many` is `submit(...).result()`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Union

import numpy as np

from ge_python_backend.aipp import AippOp
from ge_python_backend.ascend import AclCode, malloc_reserved
from ge_python_backend.modelinfo import GearInfo, SessionCounters, TensorSpec
from ge_python_backend.runtime._acl import load_acl, selected_runtime
from ge_python_backend.runtime._resource import Resource, close_all
from ge_python_backend.runtime.batching import Execution, ExecutionPlanner
from ge_python_backend.runtime.checksum import verify_sha256
from ge_python_backend.runtime.describe import describe_file
from ge_python_backend.runtime.device import DeviceContext
from ge_python_backend.runtime.dvpp import (
    YUV420SP_ROWS,
    DecodedBatch,
    ImageInput,
    ImageStage,
    served_inputs,
)
from ge_python_backend.runtime.errors import (
    AclError,
    DeviceFullError,
    ExecuteTimeoutError,
    InputError,
    ModelFileError,
)
from ge_python_backend.runtime.feeds import FeedChecker, Feeds
from ge_python_backend.runtime.lane import DeviceTimes, Lane
from ge_python_backend.runtime.memory import DeviceBuffer
from ge_python_backend.runtime.model import LoadSizes, Model, TensorInfo, read_aipp_config
from ge_python_backend.runtime.placement import Placement, describe_holders
from ge_python_backend.runtime.workspaces import Seat, WorkSpaces, model_key

__all__ = [
    "DEVICE_TIMING_PERIOD",
    "PIPELINE_DEPTHS",
    "DeviceTimeSampler",
    "OutputTaker",
    "PendingBatch",
    "Session",
    "SessionCounters",
]

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]
# `Session.submit`'s `take_outputs`: given a batch's outputs per request (views of a lane's pinned
# buffers, valid during the call only), copies them where it keeps them and returns those arrays.
OutputTaker = Callable[[list[dict[str, np.ndarray]]], list[dict[str, np.ndarray]]]
PIPELINE_DEPTHS = (1, 2)  # lanes a session may run; 2 overlaps one execution's copies and waits
# pyACL parses timeouts and device ids as a C int: larger values raise OverflowError in the call.
ACL_INT_MAX = 2**31 - 1
# One execution in this many of each gear and batch is timed with events (`DeviceTimeSampler`).
DEVICE_TIMING_PERIOD = 16
# Codes of a load or allocation the device has no memory for: aclrtMalloc's driver OOM
# (hicann/runtime errcode_manage.cc), GE's weight or feature-map allocation at load (hicann/ge
# davinci_model.cc InitWeightMem, InitFeatureMapAndP2PMem) and its device variant.
OUT_OF_DEVICE_MEMORY = frozenset(
    {
        AclCode.RT_MEMORY_ALLOCATION,
        AclCode.GE_MEMORY_ALLOCATION,
        AclCode.GE_DEVICE_MEMORY_ALLOCATION_FAILED,
    }
)


# What a lane's wait past `execute_timeout_ms` raises: its stream's (a lane of its own) or its end
# event's (a lane seated in a device host's stream pool).
TIMEOUT_CODES = frozenset({ExecuteTimeoutError.CODE, AclCode.RT_EVENT_SYNC_TIMEOUT})


class DeviceTimeSampler:
    """Which executions are timed with the lanes' events, and the device times of the others.

    Timing an execution costs three more event records on its stream and three elapsed-time
    reads after it (docs/internals/design/lanes.md). An `.om` runs one gear and batch in nearly the
    same device time every time once warm, so the first `period` executions of each (gear,
    batch) and then one in `period` are timed; every other one is credited with that layout's
    recent timed times (an exponential mean, weight `RECENT_WEIGHT`: a slow first execution
    fades, a device that slows down or speeds up is followed). A layout none of whose timed
    executions has finished yet is timed again. `period` 1 times every execution (a
    dynamic-shape model's, whose times differ by request, always).
    """

    RECENT_WEIGHT = 0.25

    def __init__(self, period: int) -> None:
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise ValueError(f"device_timing_period must be a positive integer, got {period!r}")
        self.period = period
        self._launched: dict[tuple[int, int], int] = {}
        self._recent: dict[tuple[int, int], DeviceTimes] = {}

    def wants(self, execution: Execution) -> bool:
        """Whether to time `execution`, about to launch (one launch at a time)."""
        key = (execution.gear, execution.batch)
        count = self._launched.get(key, 0)
        self._launched[key] = count + 1
        return count < self.period or count % self.period == 0 or key not in self._recent

    def times(self, execution: Execution, measured: DeviceTimes | None) -> DeviceTimes:
        """The device times to count for a finished execution: `measured` (and remembered),
        else its layout's recent ones (one finish at a time)."""
        key = (execution.gear, execution.batch)
        if measured is None:  # `wants` said so: the layout had a timed execution by then
            return self._recent[key]
        recent = self._recent.get(key)
        weight = self.RECENT_WEIGHT
        self._recent[key] = (
            measured
            if recent is None
            else DeviceTimes(*(old + weight * (new - old) for old, new in zip(recent, measured)))
        )
        return measured


@dataclasses.dataclass
class _Job:
    """One execution launched on a lane for a `PendingBatch` (held weakly: a batch nobody
    waits for is dropped, its execution still completes)."""

    batch_ref: weakref.ref[PendingBatch]
    lane: Lane
    execution: Execution
    h2d_bytes: int
    d2h_bytes: int
    queued: float  # perf_counter when it was launched
    done: bool = False


class PendingBatch:
    """A batch submitted with `Session.submit`; `result()` waits for it.

    `times` holds (lane, queued, finished) perf_counter stamps per execution, once finished.
    """

    def __init__(
        self,
        session: Session,
        feeds_list: Sequence[Feeds],
        executions: int,
        take: OutputTaker | None = None,
    ) -> None:
        self._session = session
        self._feeds_list = feeds_list
        self._results: list[dict[str, np.ndarray]] = [{} for _ in feeds_list]
        self._unscattered = executions  # the last one scattered goes to `take`
        self._take = take  # until it took the outputs
        self._jobs: list[_Job] = []
        self._error: BaseException | None = None
        self._lock = threading.Lock()  # two lanes may scatter into one request's outputs
        self.times: list[tuple[int, float, float]] = []

    def done(self) -> bool:
        """Whether every execution of the batch finished (result() will not block)."""
        return all(job.done for job in self._jobs)

    def result(self) -> list[dict[str, np.ndarray]]:
        """Wait for the batch; its outputs per request, in order. Raises AclError if it failed.

        Callable from any thread (the context is made current in the calling thread first).
        """
        for job in self._jobs:
            self._session._settle(job)
        with self._lock:
            take, self._take = self._take, None
            if take is not None and self._error is None:  # no execution (no rows) took them
                self._results = take(self._results)
        if self._error is not None:
            raise self._error
        return self._results

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error


class Session(Resource):
    """Serve one `.om` on one device: `infer` any batch size, `infer_many` for request batches,
    `submit` to queue a batch and collect it later.

    `runtime` is "pyacl" or "emulator"; `$GE_PYTHON_BACKEND_ACL` overrides it; without either,
    the `.om`'s container decides (an emulator `.om`: emulator; else pyacl). With
    `sha256` the file is verified before loading. `pipeline_depth` lanes run executions
    concurrently (2: one is copied while the other executes). `execute_timeout_ms` > 0 bounds
    the wait for each execution: past it the batch fails and the lane gets a new stream.
    `input_shape_order` names the inputs in ATC's `--input_shape` order, needed only for a
    dynamic-dims model whose gears do not show it. `aipp_config` is an ATC-syntax aipp.cfg
    fixing the AIPP of a dynamic-AIPP model (needed by such a model only; written once per
    lane with `set_input_aipp`). A dynamic-shape model (shape-range inputs, data-dependent
    outputs) runs each request alone and answers with each output's real shape; its outputs
    whose size the model leaves unbounded get pooled buffers of `max_output_bytes`, or without
    it are allocated by ACL at each execution (synchronous `acl.mdl.execute`, each freed after
    its copy out: slower, and `execute_timeout_ms` cannot bound such an execution).
    `device_timing_period` N times one execution in N of each gear and batch with events
    (`DeviceTimeSampler`; 1: every one). `label` names the session in the host's placement
    records (`placement.py`; default the `.om`'s file name): a device that refuses a process or a
    load names the labels holding it (`DeviceFullError`). `image` makes one YUV420SP_U8 AIPP
    input take JPEG files (BYTES, one per row), decoded and resized on the device by DVPP
    (`dvpp.py`); `inputs` then shows it as BYTES `[rows, 1]`, and a file DVPP refuses is an
    `ImageError` naming its request. `work_spaces` (a device host's, `workspaces.py`) seats the
    lanes in its stream pool when it shares work spaces: each lane runs the pool's copy of the
    model on one of the pool's streams, with the work space of that stream, instead of a load,
    stream and work space of its own (a model `acl.mdl.query_size` cannot size keeps its own).
    Any mix of calls from any threads is safe.
    """

    inputs: tuple[TensorSpec, ...]  # never includes ascend_mbatch_shape_data
    outputs: tuple[TensorSpec, ...]  # -1 on axes that differ between gears
    gears: GearInfo
    aipp: dict[str, str]  # input name -> its AIPP (source format, crop, normalisation)

    def __init__(
        self,
        om_path: PathLike,
        device_id: int = 0,
        runtime: str | None = None,
        sha256: str | None = None,
        pipeline_depth: int = 1,
        execute_timeout_ms: int = 0,
        input_shape_order: Sequence[str] | None = None,
        aipp_config: PathLike | None = None,
        max_output_bytes: int | None = None,
        device_timing_period: int = DEVICE_TIMING_PERIOD,
        label: str | None = None,
        image: ImageInput | None = None,
        work_spaces: WorkSpaces | None = None,
    ) -> None:
        self._image = image
        self._work_spaces = work_spaces
        self.pooled = False  # whether the lanes are seated in `work_spaces`' pool
        self._images: ImageStage | None = None
        if max_output_bytes is not None and (
            isinstance(max_output_bytes, bool)
            or not isinstance(max_output_bytes, int)
            or max_output_bytes < 1
        ):
            raise ValueError(
                f"max_output_bytes must be a positive integer (or None), got {max_output_bytes!r}"
            )
        self.max_output_bytes = max_output_bytes
        if pipeline_depth not in PIPELINE_DEPTHS or isinstance(pipeline_depth, bool):
            raise ValueError(
                f"pipeline_depth must be one of {PIPELINE_DEPTHS}, got {pipeline_depth!r}"
            )
        if (
            isinstance(execute_timeout_ms, bool)
            or not isinstance(execute_timeout_ms, int)
            or not 0 <= execute_timeout_ms <= ACL_INT_MAX
        ):
            raise ValueError(
                f"execute_timeout_ms must be an integer 0..{ACL_INT_MAX} ms (0: no timeout), got "
                f"{execute_timeout_ms!r}"
            )
        self.pipeline_depth = pipeline_depth
        self.execute_timeout_ms = execute_timeout_ms
        self._sampler = DeviceTimeSampler(device_timing_period)
        self.path = Path(om_path)
        self.label = label or self.path.name
        self.device_id = device_id
        self.host_pid = os.getpid()  # the process it runs in (`serving.ServingSession`)
        self.runtime = selected_runtime(runtime, self.path)
        if not self.path.is_file():
            raise ModelFileError(f"model file not found: {self.path}")
        if sha256 is not None:
            verify_sha256(self.path, sha256)
        aipp = () if aipp_config is None else read_aipp_config(Path(aipp_config))
        acl = load_acl(self.runtime, self.path)
        self._lock = threading.Lock()  # taking lanes in turn
        self._counters_lock = threading.Lock()
        self._counters = SessionCounters()
        self._lanes: list[Lane] = []
        self._next_lane = 0
        self._launched_last: Lane | None = None  # the lane of the newest launched execution
        self._parts: list[Resource] = []
        self._own(_close_newest_first, self._parts)
        try:
            self._open(acl, input_shape_order, aipp)
        except BaseException:
            self._finalizer()
            raise

    @property
    def counters(self) -> SessionCounters:
        """A snapshot of the cumulative counters (and of the stream pool's work spaces and I/O
        areas)."""
        streams, work, io = (0, 0, 0)
        if self.pooled and self._work_spaces is not None:
            streams, work, io = self._work_spaces.totals()
        with self._counters_lock:
            return dataclasses.replace(
                self._counters,
                work_space_bytes=work,
                work_space_streams=streams,
                io_area_bytes=io,
            )

    def device_memory(self) -> tuple[int, int]:
        """(free, total) bytes of the session's device memory, as ACL reports them now."""
        self._check_open()
        self._context.activate()
        return self._context.device.memory()

    def validate(self, feeds: Feeds) -> int:
        """Check `feeds` against the model; return its rows (1 for an unbatched model).

        Raises InputError saying what was expected and what arrived.
        """
        if self._images is not None:
            feeds = self._images.stand_in(feeds)[0]
        return self._feeds.match(feeds)[1]

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        """Run one request of any number of rows; one array per output."""
        return self.submit([feeds], pipelined=False).result()[0]

    def infer_many(self, feeds_list: Sequence[Feeds]) -> list[dict[str, np.ndarray]]:
        """Run several requests together and wait; their outputs, in the same order.

        Rows of all requests go straight into the pinned buffers at their row offsets and run as
        gear chunks (requests of different HW/dims gears in separate executions). Raises
        InputError before any work if a request does not fit, AclError on a device failure (then
        every request of the call failed).
        """
        return self.submit(feeds_list, pipelined=False).result()

    def infer_async(self, feeds: Feeds) -> PendingBatch:
        """`submit` of one request: `.result()[0]` is its outputs."""
        return self.submit([feeds])

    def submit(
        self,
        feeds_list: Sequence[Feeds],
        pipelined: bool = True,
        take_outputs: OutputTaker | None = None,
    ) -> PendingBatch:
        """Queue a batch of requests on the lanes and return without waiting for it.

        Each execution takes the next lane, whose pending execution completes first (so at most
        `pipeline_depth` executions are ever on the device). Raises InputError before any work if
        a request does not fit (its `request` says which); device failures surface from
        `PendingBatch.result()` and fail exactly that batch. `pipelined` False: the caller waits
        for this batch (`result()`) before it submits the next, so its last execution records no
        event for a next one to wait on (one ACL call less; another thread's submit meanwhile is
        still correct). With an image input, every file is decoded first (an `ImageError`
        names the first one DVPP refuses) and each execution's rows are resized into its lane.

        `take_outputs` (the device host's: its shared buffer) is called once the batch's last
        execution finished, in the thread that finishes it, with every request's outputs: views
        of that lane's pinned buffers for the requests it ran whole, arrays of the batch's own
        for the others (run earlier, or split over executions); it copies them where it keeps
        them before it returns (the lane serves the next execution after it) and returns those
        arrays, which `result()` returns. It runs after every execution of the batch was staged,
        so it may overwrite the memory the batch's feeds were read from. Without it, each
        finished execution's outputs are copied out into arrays of the batch's own.
        """
        self._check_open()
        if self._images is None:
            return self._submit(feeds_list, pipelined, None, take_outputs)
        with self._images.lock:  # the pool's pictures are the batch's until its VPC is queued
            decoded = self._images.decode(feeds_list)
            return self._submit(decoded.feeds_list, pipelined, decoded, take_outputs)

    def _submit(
        self,
        feeds_list: Sequence[Feeds],
        pipelined: bool,
        decoded: DecodedBatch | None,
        take_outputs: OutputTaker | None,
    ) -> PendingBatch:
        """`submit` once the files of an image input are decoded (`decoded`)."""
        matched = []
        for number, feeds in enumerate(feeds_list):
            try:
                matched.append(self._feeds.match(feeds))
            except InputError as exc:
                exc.request = number
                raise
        executions = self._planner.plan(matched)
        batch = PendingBatch(self, feeds_list, len(executions), take_outputs)
        with self._lock:
            self._check_open()  # again: another thread may have closed it meanwhile
            self._context.activate()
            last = executions[-1] if executions else None
            for execution in executions:
                lane = self._lanes[self._next_lane]
                self._next_lane = (self._next_lane + 1) % len(self._lanes)
                with lane.lock:
                    self._finish(lane)
                    if batch._error is not None:
                        break
                    self._launch(
                        batch, lane, execution, pipelined or execution is not last, decoded
                    )
        return batch

    def wait_ready(self) -> None:
        """Block until the execution pending on the lane the next `submit` takes has left the
        device's execute engine (its copy out may still run), so that the next batch launches
        right behind the execution running now.

        A server that calls this before taking its next batch lets requests gather meanwhile.
        The wait is bounded by `execute_timeout_ms` (`acl.rt.synchronize_event_with_timeout`);
        past it, when the wait reports an error, with a pyACL that lacks that call, or for an
        execution submitted not pipelined (it recorded no event), the pending execution is
        completed as `submit` would complete it (a failed or hung one fails its batch; a hung
        one's lane gets a new stream).
        """
        with self._lock:
            if self.closed:
                return
            lane = self._lanes[self._next_lane]
            with lane.lock:
                if lane.job is None:
                    return
                self._context.activate()
                try:
                    reached = (
                        lane.events.executed.reached(self.execute_timeout_ms or -1)
                        if lane.executed_recorded
                        else None
                    )
                except AclError:  # the device reports a failure: completing hands it to the batch
                    reached = None
                if not reached:  # timed out (then it is over), or no event wait to make
                    self._finish(lane, 1 if reached is False else None)

    def close(self) -> None:
        """Complete what is pending, then release the lanes, context and device (idempotent).

        A failure while completing goes to its batch's `result()`, or to the log when nobody
        holds that batch any more.
        """
        with self._lock:
            if not self.closed:
                self._context.activate()
                for lane in self._lanes:
                    with lane.lock:
                        self._finish(lane)
            super().close()

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"{self!r} is closed")

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"Session({str(self.path)!r}, device {self.device_id}, {self.runtime}{state})"

    # -- opening ---------------------------------------------------------------------------

    def _open(
        self,
        acl: ModuleType,
        input_shape_order: Sequence[str] | None,
        aipp: Sequence[AippOp],
    ) -> None:
        lease = DeviceContext(acl, self.device_id)  # the process's one context of the device
        self._parts.append(lease)
        self._context = lease.context
        try:
            self._open_lanes(input_shape_order, aipp)
        except AclError as exc:
            if exc.code not in OUT_OF_DEVICE_MEMORY:
                raise
            raise self._memory_wall(exc, acl, input_shape_order, aipp) from exc
        model = self._lanes[0].model
        model.record_weights(self.label)  # once per process and `.om`: every session shares them
        held = self._counters.device_bytes_held
        if not self.pooled:  # a pool records its work spaces itself
            held += len(self._lanes) * model.sizes.load_bytes
        self._parts.append(Placement(self.device_id, self.label, held))

    def _memory_wall(
        self,
        exc: AclError,
        acl: ModuleType,
        input_shape_order: Sequence[str] | None,
        aipp: Sequence[AippOp],
    ) -> DeviceFullError:
        """The one-line error for a load or allocation the device has no memory for."""
        try:
            free, total = self._context.device.memory()
        except AclError:
            free = total = 0
        sizes = LoadSizes.query(acl, self.path)
        depth = self.pipeline_depth
        if self._work_spaces is not None and self._shares_work(sizes):
            asked = self._pool_arithmetic(sizes, acl, input_shape_order, aipp)
        elif sizes.with_mem:
            asked = (
                f"weights of {sizes.shared_bytes} bytes (one copy for its loads) and {depth} "
                f"work space(s) of {sizes.load_bytes} bytes (acl.mdl.query_size) plus its buffers"
            )
        else:
            asked = (
                f"{depth} load(s) of {sizes.load_bytes} bytes (acl.mdl.query_size) plus its buffers"
            )
        wall = f"{self.path.name} needs {asked}, {free} of {total} bytes are free"
        return DeviceFullError(exc, self.device_id, wall, describe_holders(self.device_id))

    def _pool_arithmetic(
        self,
        sizes: LoadSizes,
        acl: ModuleType,
        input_shape_order: Sequence[str] | None,
        aipp: Sequence[AippOp],
    ) -> str:
        """What a pooled session needs, as the device budget counts it: its weights once, the
        pool's N work spaces and N I/O areas (each the pool's or this model's, the larger), and
        what each lane keeps of its own."""
        assert self._work_spaces is not None
        streams, work, io = self._work_spaces.per_stream(self._context)
        image = None if self._image is None else self._image.name
        try:
            description = describe_file(acl, self.path, input_shape_order, aipp)
        except (AclError, ModelFileError) as exc:
            logger.warning(
                "%s: cannot describe it for the out-of-memory error: %s", self.label, exc
            )
            own_io = own = 0
        else:
            kept, need = description.shared_io(image)
            own_io, own = malloc_reserved(need) if need else 0, description.lane_bytes - kept
        work = max(work, sizes.load_bytes)
        io = max(io, own_io)
        depth = self.pipeline_depth
        total = sizes.shared_bytes + streams * (work + io) + depth * own
        return (
            f"weights of {sizes.shared_bytes} bytes (once), the device host pool's {streams} "
            f"work spaces of {work} bytes (the largest work of its models, this one's "
            f"{sizes.load_bytes}: acl.mdl.query_size) and {streams} I/O areas of {io} bytes "
            f"(their largest inputs and outputs, this one's {own_io}), and {own} bytes for "
            f"each of its {depth} lane(s) (what a lane keeps of its own: a gear input, an "
            f"image input): {sizes.shared_bytes} + {streams} x {work} + {streams} x {io} + "
            f"{depth} x {own} = {total} bytes"
        )

    def _open_lanes(
        self,
        input_shape_order: Sequence[str] | None,
        aipp: Sequence[AippOp],
    ) -> None:
        image = self._image
        seats = self._seats(input_shape_order, aipp)
        first, table = Lane.open_first(
            self._context,
            self.path,
            input_shape_order,
            aipp,
            self.max_output_bytes,
            () if image is None else (image.name,),
            seats[0] if seats else None,
        )
        self._parts.append(first)
        self._lanes.append(first)
        desc = first.model.description
        self.gears = table.info
        self._table = table
        self.inputs = tuple(info.spec for info in desc.inputs)
        self.aipp = {info.spec.name: info.aipp for info in desc.inputs if info.aipp}
        self.outputs = tuple(
            dataclasses.replace(info.spec, shape=table.merged_output_shape(n))
            for n, info in enumerate(desc.outputs)
        )
        self._feeds = FeedChecker(self.inputs, table)
        if desc.dynamic_shape:  # each execution has its request's shapes: time every one
            self._sampler = DeviceTimeSampler(1)
        self._planner = ExecutionPlanner(self.gears.batch_gears, not self.gears.side_inputs)
        # the input whose axis 0 counts a request's rows (side inputs have no batch axis)
        self._rows_input = next(
            (s.name for s, batched in zip(self.inputs, table.batched_inputs) if batched), ""
        )
        for index in range(1, self.pipeline_depth):
            seat = seats[index] if seats else None
            lane = Lane.load(index, self._context, self.path, input_shape_order, first, seat)
            self._parts.append(lane)
            self._lanes.append(lane)
        if image is not None:
            self._open_images(image, desc.inputs)
        self._counters.device_bytes_held = sum(lane.device_bytes for lane in self._lanes)
        logger.debug(
            "opened %s on device %d (%s): %s gears %s, %d lane(s)%s",
            self.path,
            self.device_id,
            self.runtime,
            self.gears.kind,
            table.text(),
            self.pipeline_depth,
            "".join(f", lane {n} on stream {seat.index}" for n, seat in enumerate(seats)),
        )

    def _seats(self, input_shape_order: Sequence[str] | None, aipp: Sequence[AippOp]) -> list[Seat]:
        """The lanes' seats in the device host's stream pool (none: each lane loads its own)."""
        spaces = self._work_spaces
        if spaces is None or not spaces.settings.shared:
            return []
        context = self._context
        sizes = LoadSizes.query(context.acl, self.path)
        if not self._shares_work(sizes):
            logger.info(
                "%s: acl.mdl.query_size does not size it, so it cannot share the stream pool's "
                "work spaces: each lane loads it with memory ACL allocates",
                self.label,
            )
            return []

        def load(work: DeviceBuffer) -> Model:
            return Model(context, self.path, input_shape_order, aipp, sizes, work)

        key = model_key(self.path, sizes, input_shape_order, aipp)
        seats = spaces.seats(context, self.path, sizes, self.pipeline_depth, load, key)
        self._parts.extend(seats)  # left if a lane fails to open (a lane holds its own too)
        self.pooled = True
        return seats

    def _shares_work(self, sizes: LoadSizes) -> bool:
        """Whether the lanes sit in the device host's stream pool: shared work spaces, and a
        model `acl.mdl.query_size` sizes (`sizes`)."""
        spaces = self._work_spaces
        return spaces is not None and spaces.settings.shared and sizes.with_mem

    def _open_images(self, image: ImageInput, inputs: Sequence[TensorInfo]) -> None:
        """The DVPP stage of the image input; the input is served as BYTES files."""
        try:
            self.inputs = served_inputs(self.inputs, image.name)
        except ValueError as exc:
            raise ModelFileError(f"{self.path}: {exc}") from None
        info = next(info for info in inputs if info.spec.name == image.name)
        if info.v2_rows != YUV420SP_ROWS:
            raise ModelFileError(
                f"{self.path}: image_input {image.name!r} has {info.aipp or 'no AIPP'}; DVPP "
                "writes YUV420SP (NV12): the input needs a static AIPP with input_format "
                "YUV420SP_U8"
            )
        rows = max(self.gears.max_batch, info.spec.shape[0], 1)
        self._images = ImageStage(self._context, image, info.spec, rows, self.pipeline_depth)
        self._parts.append(self._images)

    # -- the data path ---------------------------------------------------------------------

    def _launch(
        self,
        batch: PendingBatch,
        lane: Lane,
        execution: Execution,
        pipelined: bool,
        decoded: DecodedBatch | None = None,
    ) -> None:
        """Stage and launch one execution on a free lane (lane lock held); `pipelined` as in
        `Lane.launch`; `decoded`: the batch's pictures, resized into the lane's image input
        ahead of the execution.

        A failing call fails the batch; whatever was queued is waited for so the lane is free.
        """
        queued = time.perf_counter()
        try:
            h2d_bytes = lane.stage(self._table, execution, batch._feeds_list)
            if decoded is not None:
                self._resize_images(decoded, lane, execution)
            timed = self._sampler.wants(execution)
            d2h_bytes = lane.launch(self._table, execution, self._launched_last, timed, pipelined)
        except Exception as exc:  # any failure fails the batch; the lane is settled below
            batch._fail(exc)
            lane.settle()
            with self._counters_lock:
                self._counters.failed_executions += 1
            return
        self._launched_last = lane
        job = _Job(weakref.ref(batch), lane, execution, h2d_bytes, d2h_bytes, queued)
        batch._jobs.append(job)
        lane.job = job

    def _resize_images(self, decoded: DecodedBatch, lane: Lane, execution: Execution) -> None:
        """Queue the execution's VPC jobs into the lane's image input (on its stream)."""
        assert self._images is not None and self._image is not None
        buffer = lane.input_buffer(self._image.name)
        self._images.queue_resize(decoded, lane.index, buffer, execution, lane.stream)

    def _settle(self, job: _Job) -> None:
        """Finish `job` unless that happened already (from `PendingBatch.result`)."""
        lane = job.lane
        with lane.lock:
            if lane.job is job:
                self._context.activate()
                self._finish(lane)

    def _finish(self, lane: Lane, timeout_ms: int | None = None) -> None:
        """Wait for the lane's pending execution and scatter its outputs (lane lock held); the
        wait is bounded by `timeout_ms`, by default `execute_timeout_ms`."""
        job, lane.job = lane.job, None
        if job is None:
            return
        batch = job.batch_ref()
        try:
            measured = lane.finish(self.execute_timeout_ms if timeout_ms is None else timeout_ms)
        except Exception as exc:  # the execution failed: its batch fails, the lane is settled
            error: Exception = exc
            if isinstance(exc, AclError) and exc.code in TIMEOUT_CODES:
                error = ExecuteTimeoutError(exc, self.execute_timeout_ms)
                lane.replace_stream()
            else:
                lane.settle()
            job.done = True
            if batch is not None:
                batch._fail(error)
                batch.times.append((lane.index, job.queued, time.perf_counter()))
            else:
                logger.warning("%r: an execution nobody waits for failed: %s", self, error)
            with self._counters_lock:
                self._counters.failed_executions += 1
            return
        finished = time.perf_counter()
        if batch is not None:
            with batch._lock:
                batch.times.append((lane.index, job.queued, finished))
                if batch._error is None:
                    self._scatter(lane, batch, job.execution)
        job.done = True
        execution = job.execution
        with self._counters_lock:
            times = self._sampler.times(execution, measured)
            counters = self._counters
            counters.executions += 1
            counters.rows += execution.rows
            counters.padded_rows += max(execution.batch - execution.rows, 0)
            counters.execute_seconds += times.execute
            counters.h2d_bytes += job.h2d_bytes
            counters.h2d_seconds += times.h2d
            counters.d2h_bytes += job.d2h_bytes
            counters.d2h_seconds += times.d2h

    def _scatter(self, lane: Lane, batch: PendingBatch, execution: Execution) -> None:
        """Copy a finished execution's outputs out of the lane's pinned buffers (batch lock
        held): into the batch's results, one copy of each output of which each request whose
        rows all ran here gets its rows as a view, a request split over executions assembled in
        an array of its own; the batch's last execution, with a `take_outputs`, straight to it."""
        views = lane.output_views(self._table, execution)
        batch._unscattered -= 1
        taker = batch._take if batch._unscattered == 0 else None
        take = taker is not None
        for spec, view in zip(self.outputs, views):
            name = spec.name
            copied = None
            for piece in execution.pieces:
                outputs = batch._results[piece.part]
                if not execution.batch:  # unbatched: one request, one execution
                    outputs[name] = view if take else view.copy()
                elif piece.whole:  # the whole request ran in this execution
                    if take:
                        outputs[name] = view[piece.in_execution]
                        continue
                    if copied is None:
                        copied = view.copy()
                    outputs[name] = copied[piece.in_execution]
                else:
                    output = outputs.get(name)
                    if output is None:
                        total = len(batch._feeds_list[piece.part][self._rows_input])
                        output = outputs[name] = np.empty((total, *view.shape[1:]), view.dtype)
                    output[piece.in_part] = view[piece.in_execution]
        if taker is not None:
            batch._take = None
            try:
                batch._results = taker(batch._results)
            except Exception as exc:  # its batch's failure, whichever thread finished it
                batch._fail(exc)


def _close_newest_first(parts: list[Resource]) -> None:
    """Lanes (models, buffers, streams) first, then context and device."""
    ordered = parts[::-1]
    parts.clear()
    close_all(ordered)
