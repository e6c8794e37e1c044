"""Shared work spaces: the models of a device run on a pool of streams, each stream with one work
space that the models placed on it share (the device host's default, `--work-space shared`).

GE gives a loaded model a work space (its feature map: intermediate tensors and operators' work
memory) that it uses only while it executes. Models that run one after another may share one,
each loaded into it with `aclmdlLoadFromFileWithMem` (the work pointer and size; MindSpore Lite's
ModelGroup SHARE_WORKSPACE does the same), and one loaded model id must not execute on two
streams at once (aclmdlExecuteAsync). So `StreamPool`, one per device context, holds N streams,
each with one work space as large as the largest work (`acl.mdl.query_size`) of the models
placed in the pool, and loads every model placed there once per stream into that stream's work
space, with the model's one copy of weights (`model._load`). The stream's order keeps the
executions that share a work space one after another.

* Placing (`StreamPool.seats`): the first session of a model loads its copy on every stream at
  once, at open, before its first execution: each load writes the model's weights into their
  one buffer, so no load rewrites them under a running execution. Each load runs with its
  stream idle (launches held, the stream synchronised): whether a load writes into its work
  space is not documented (UNCONFIRMED), so none does under another model's execution.
* Seats: lane i of a session runs the copy of stream (start + i) mod N, `start` being the stream
  with the fewest lanes, so a 2-lane session still overlaps its executions on two streams. A lane
  holds a `Seat`, never the stream or the copy: the copies are unloaded when the last lane of
  the model leaves (the weights are freed with the last load, as ever).
* Growth: a model whose work is larger than the streams' grows every stream's work space, all
  streams held idle: per stream a larger work space is allocated, its copies are loaded again
  into it (the same weights), the old one is freed; a log line says what and what it cost. Work
  spaces do not shrink when their largest model leaves (that would reload every copy with every
  stream held, and a model that leaves usually comes back: a reload, a new version); they are
  freed with the pool's last model.
* I/O areas: each stream also has one device area for the inputs and outputs of the lanes seated
  on it, as large as the largest I/O of the models placed in the pool (their buffers at the
  largest gear, carved as `ascend.carved_bytes` says); a seated lane's buffers are views of it
  (`Lane`), so a device holds N such areas instead of a set per lane. Everything that touches
  those bytes is queued on that one stream while the lane holds it (`Seat.launching`): copy in,
  execute, copy out; a stream runs its tasks in the order they entered it (CANN's "Stream
  concept" page; aclrtMemcpyAsync and aclmdlExecuteAsync only deliver a task to the stream given;
  aclmdlExecuteAsync's page asks callers that share a model's input and output memory between
  threads to hold a lock across refreshing it with aclrtMemcpyAsync and executing, on one stream:
  what `launching` holds), so the next lane's copy in runs after the previous lane's copy out.
  Buffers that something else touches stay a lane's own (`shares_io_buffer`): an input DVPP
  writes (its resize jobs run on other streams), a dynamic-shape model's outputs (copied out by
  `finish`, after the hold), outputs ACL allocates, the gear input and AIPP parameters (GE writes
  them with a synchronous aclrtMemcpy: hicann/ge GeExecutor::SetDynamicBatchSize and others).
  The areas grow as the work spaces do (`_grow`, every stream held idle) and never shrink; a
  lane whose views point into a replaced area makes them again under its next hold.
* Zeroing: a work space passes from one model to the next as the last execution left it. GE
  plans a feature map assuming nothing of its content (a model executing twice finds its own
  previous intermediates there; what must start at zero, atomic outputs, GE clears with its own
  tasks inside the execution), so nothing is zeroed by default; `zero_between_models` queues
  `acl.rt.memset_async` of the work space before an execution whose model differs from the
  stream's last one, for a CANN where that does not hold (docs/internals/design/device-host.md).
* Completion and failures: a lane waits for its own execution (its "end" event, recorded after
  its copies out), never for the stream. A call that fails when queued fails its batch alone.
  A task that fails on the device leaves its error with its stream, which
  `acl.rt.synchronize_stream` returns once and clears; `synchronize_event` does not return it
  (hicann/runtime: `Stream::Synchronize` ends with `Stream::GetError`, `ApiImpl::EventSynchronize`
  checks only the context's failure, set in STOP_ON_FAILURE mode, not in the default
  CONTINUE_ON_FAILURE). So the pool synchronises a stream where that costs no wait (a lane
  finishing the last work launched there) and, under load, once in `AUDIT_PERIOD` executions;
  a failure found then fails the batch that found it (not necessarily the one that failed), and
  the other streams keep serving. A stream that timed out is replaced for every lane on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ge_python_backend.ascend import malloc_reserved
from ge_python_backend.environment import (
    DEVICE_HOST_STREAMS,
    DEVICE_HOST_WORK_SPACE,
    DEVICE_HOST_ZERO_WORK_SPACE,
)
from ge_python_backend.runtime._resource import Resource, close_all
from ge_python_backend.runtime.device import Context, Stream
from ge_python_backend.runtime.errors import AclError, ExecuteTimeoutError, check
from ge_python_backend.runtime.gears import GearTable
from ge_python_backend.runtime.memory import DeviceBuffer
from ge_python_backend.runtime.model import LoadSizes, Model
from ge_python_backend.runtime.placement import Placement

__all__ = [
    "AUDIT_PERIOD",
    "DEFAULT_STREAMS",
    "MAX_STREAMS",
    "WORK_SPACE_MODES",
    "Seat",
    "StreamPool",
    "WorkSpaceSettings",
    "WorkSpaces",
    "environment_texts",
    "model_key",
    "shares_io_buffer",
]

logger = logging.getLogger(__name__)

DEFAULT_STREAMS = 4  # measured: docs/internals/design/work-spaces.md, "Why 4 streams"
MAX_STREAMS = 64
WORK_SPACE_MODES = ("shared", "per-lane")
SWITCHES = ("on", "off")
# Under load a stream is synchronised (its device failures read) at least once in this many
# executions, waiting for the work queued behind the one that finished.
AUDIT_PERIOD = 16
# The longest a load, a growth or a synchronous execution waits for a stream to be idle.
IDLE_TIMEOUT_MS = 60_000


@dataclasses.dataclass(frozen=True)
class WorkSpaceSettings:
    """How a device host gives its models work spaces: shared by the models of each of
    `streams` streams (`shared`), zeroed between two different models when
    `zero_between_models`; or one per lane (`shared` False, today's in-stub way)."""

    streams: int = DEFAULT_STREAMS
    shared: bool = True
    zero_between_models: bool = False

    def __post_init__(self) -> None:
        streams = self.streams
        if isinstance(streams, bool) or not isinstance(streams, int):
            raise ValueError(f"streams must be an integer 1..{MAX_STREAMS}, got {streams!r}")
        if not 1 <= streams <= MAX_STREAMS:
            raise ValueError(f"streams must be 1..{MAX_STREAMS}, got {streams}")

    @property
    def mode(self) -> str:
        """`shared` or `per-lane`."""
        return WORK_SPACE_MODES[0] if self.shared else WORK_SPACE_MODES[1]

    @classmethod
    def parse(
        cls, streams: str | int, mode: str, zero: str = "off", source: str = ""
    ) -> WorkSpaceSettings:
        """The settings from their texts (an option's or a variable's); ValueError saying which
        is wrong (`source` names where they came from) and what is allowed."""
        where = f" ({source})" if source else ""
        try:
            count = int(streams)
        except ValueError:
            raise ValueError(f"streams{where} must be an integer, got {streams!r}") from None
        if not 1 <= count <= MAX_STREAMS:
            raise ValueError(f"streams{where} must be 1..{MAX_STREAMS}, got {count}")
        if mode not in WORK_SPACE_MODES:
            raise ValueError(f"work space{where} must be one of {WORK_SPACE_MODES}, got {mode!r}")
        if zero not in SWITCHES:
            raise ValueError(f"zero work space{where} must be one of {SWITCHES}, got {zero!r}")
        return cls(count, mode == WORK_SPACE_MODES[0], zero == "on")

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> WorkSpaceSettings:
        """The settings `$GE_DEVICE_HOST_STREAMS`, `$GE_DEVICE_HOST_WORK_SPACE` and
        `$GE_DEVICE_HOST_ZERO_WORK_SPACE` give (the defaults where unset); ValueError naming a
        bad one."""
        streams, mode, zero = environment_texts(environ)
        return cls.parse(streams, mode, zero, ", ".join(v.name for v in _VARIABLES))

    def environment(self) -> dict[str, str]:
        """The variables that give these settings to a host a stub starts (`start_host`)."""
        texts = (str(self.streams), self.mode, SWITCHES[not self.zero_between_models])
        return {variable.name: text for variable, text in zip(_VARIABLES, texts)}

    def text(self) -> str:
        """One line for the log: `4 streams, shared work spaces`."""
        if not self.shared:
            return "a work space per lane"
        zeroed = ", zeroed between models" if self.zero_between_models else ""
        return f"{self.streams} stream(s) with shared work spaces{zeroed}"


_VARIABLES = (DEVICE_HOST_STREAMS, DEVICE_HOST_WORK_SPACE, DEVICE_HOST_ZERO_WORK_SPACE)


def shares_io_buffer(output: bool, device_written: bool, dynamic_shape: bool) -> bool:
    """Whether a seated lane's buffer is a view of its stream's I/O area: every access to it is
    then queued on that stream under the lane's hold. Not an input DVPP writes (on other
    streams), nor a dynamic-shape model's output (`Lane.finish` copies it out after the hold)."""
    return not device_written and not (output and dynamic_shape)


def environment_texts(environ: Mapping[str, str] = os.environ) -> tuple[str, str, str]:
    """The texts of the streams, work space and zeroing settings in `environ` (the defaults'
    where unset), unchecked (`WorkSpaceSettings.parse` checks them)."""
    defaults = WorkSpaceSettings().environment()
    streams, mode, zero = (environ.get(name) or text for name, text in defaults.items())
    return streams, mode, zero


class _PoolStream:
    """One stream of a pool: the `Stream`, its work space and I/O area, the lock every launch
    and load on it takes, the model that ran there last, and its audit state."""

    def __init__(self, index: int, context: Context) -> None:
        self.index = index
        self.stream = Stream(context)
        self.work: DeviceBuffer | None = None
        self.io: DeviceBuffer | None = None  # the seated lanes' input and output buffers
        self.lock = threading.Lock()
        self.lanes = 0  # lanes seated here
        self.last_model: Model | None = None  # the copy that launched here last
        self.launched = 0  # launches so far (a lane's ticket is the count after its own)
        self.unaudited = 0  # executions finished since the stream was last synchronised

    def synchronize(self, why: str, timeout_ms: int = 0) -> AclError | None:
        """Wait for the stream's queued work (at most `timeout_ms` when > 0: past it the
        timeout's AclError is raised); the failure it reports, logged with `why`."""
        try:
            self.stream.synchronize(timeout_ms)
        except AclError as exc:
            if exc.code == ExecuteTimeoutError.CODE:
                raise
            logger.error(
                "stream %d of the pool reported a failure when %s: %s (the executions that "
                "finished on it since it was last synchronised are not known to be right)",
                self.index,
                why,
                exc,
            )
            return exc
        finally:
            self.unaudited = 0
        return None

    @contextlib.contextmanager
    def idle(self, why: str) -> Iterator[None]:
        """Hold launches on the stream and wait until its work is done (failures logged; a
        stream whose work does not finish within `IDLE_TIMEOUT_MS` raises the timeout)."""
        with self.lock:
            self.synchronize(why, IDLE_TIMEOUT_MS)
            yield


@dataclasses.dataclass(eq=False)
class _Copies:
    """One model placed in a pool: its copy on each stream, the lanes seated, its gear table
    (read once, by the first session: the copies are shared)."""

    key: tuple[Any, ...]
    path: Path
    sizes: LoadSizes
    load: Callable[[DeviceBuffer], Model]
    models: list[Model] = dataclasses.field(default_factory=list)
    lanes: int = 0
    table: GearTable | None = None  # once read
    opening: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class Seat(Resource):
    """A lane's place in a pool: the copy of its model on one stream. `close()` leaves it (the
    copies go with the model's last lane, the pool with its last model)."""

    def __init__(self, pool: StreamPool, copies: _Copies, stream: _PoolStream) -> None:
        self.pool = pool
        self.copies = copies
        self._stream = stream
        self._own(pool._leave, copies, stream)

    @property
    def model(self) -> Model:
        """The model's copy loaded into this stream's work space."""
        return self.copies.models[self._stream.index]

    @property
    def stream(self) -> Stream:
        """The pool's stream (a timed-out one is replaced for every lane: read it each time)."""
        return self._stream.stream

    @property
    def index(self) -> int:
        """The stream's place in the pool."""
        return self._stream.index

    @property
    def io(self) -> DeviceBuffer | None:
        """The stream's I/O area now (a grown pool replaces it: read it under `launching`)."""
        return self._stream.io

    def io_area(self, nbytes: int) -> DeviceBuffer:
        """The stream's I/O area, every stream's grown first to `nbytes` when smaller (not while
        this seat's stream is held)."""
        return self.pool._io_area(self._stream, nbytes, self.copies.path)

    @contextlib.contextmanager
    def launching(self, synchronous: bool = False) -> Iterator[int]:
        """Hold the stream while a lane queues one execution; yields its ticket. Before an
        execution of another model than the last one, the work space is zeroed when the pool
        says so. `synchronous` (an execution outside the stream, `acl.mdl.execute`): the
        stream's work is waited for first, and the stream is held until it returns."""
        here = self._stream
        with here.lock:
            if synchronous:
                here.synchronize("made idle for a synchronous execution", IDLE_TIMEOUT_MS)
            model = self.model
            if here.last_model is not model:
                if self.pool.settings.zero_between_models and here.last_model is not None:
                    self.pool._zero(here)
                here.last_model = model
            here.launched += 1
            yield here.launched

    def audit(self, ticket: int, timeout_ms: int = 0) -> None:
        """After the lane's own execution (`ticket`) finished: read the stream's device failures
        when that costs no wait (nothing launched after it) or, waiting at most `timeout_ms`
        (> 0) for the work queued behind it, once in `AUDIT_PERIOD`; AclError if the stream
        reports one."""
        here = self._stream
        failure = None
        with here.lock:
            here.unaudited += 1
            quiet = here.launched == ticket
            if quiet:
                failure = here.synchronize("an execution finished")
        if not quiet and here.unaudited >= AUDIT_PERIOD:
            why = f"{AUDIT_PERIOD} executions had finished unchecked"
            try:
                failure = here.synchronize(why, timeout_ms)
            except AclError as exc:  # the later work is not done: its own lanes time out
                logger.warning("stream %d of the pool: no check now: %s", here.index, exc)
        if failure is not None:
            raise failure

    def replace_stream(self, hung: Stream) -> None:
        """The stream `hung` timed out: give the pool's stream a new one (unless another lane
        did already); its work space and copies are kept."""
        self.pool._replace(self._stream, hung)


class StreamPool(Resource):
    """The streams of one device context and their shared work spaces (`settings.streams`),
    and the models placed on them (`seats`)."""

    def __init__(
        self,
        context: Context,
        settings: WorkSpaceSettings,
        registry: threading.RLock,
        gone: Callable[[StreamPool], None],
    ) -> None:
        if settings.zero_between_models and not hasattr(context.acl.rt, "memset_async"):
            raise ValueError(
                "this pyACL has no acl.rt.memset_async: shared work spaces cannot be zeroed "
                "between models; leave zeroing off"
            )
        self.context = context
        self.settings = settings
        # placing and leaving (taken after `_registry`); re-entrant, as both are: a session
        # collected unclosed leaves its seats from a finalizer, in whatever thread runs it
        self._lock = threading.RLock()
        self._registry = registry  # the lock of the pools of the process
        self._gone = gone  # forgets the pool (registry lock held) once its last model left
        self._models: dict[tuple[Any, ...], _Copies] = {}
        self._streams: list[_PoolStream] = []
        self._record: list[Placement] = []
        self._own(_close_pool, self._models, self._streams, self._record)
        try:
            context.activate()
            for index in range(settings.streams):
                self._streams.append(_PoolStream(index, context))
        except BaseException:
            self._abandon()
            raise

    @property
    def work_bytes(self) -> int:
        """Device bytes the work spaces hold (as malloc reserves them)."""
        return sum(malloc_reserved(s.work.size) for s in self._streams if s.work is not None)

    @property
    def io_bytes(self) -> int:
        """Device bytes the I/O areas hold (as malloc reserves them)."""
        return sum(malloc_reserved(s.io.size) for s in self._streams if s.io is not None)

    @property
    def stream_count(self) -> int:
        return len(self._streams)

    def seats(
        self,
        path: Path,
        sizes: LoadSizes,
        lanes: int,
        load: Callable[[DeviceBuffer], Model],
        key: tuple[Any, ...],
    ) -> list[Seat]:
        """Seats for a session's `lanes` lanes of the model at `path`: its copies (`load` loads
        one into a work space) placed on every stream first if they are not (growing the work
        spaces when it needs more); lane i on stream (start + i) mod N, start the stream with
        the fewest lanes."""
        with self._lock:
            copies = self._models.get(key)
            if copies is None:
                copies = self._place(key, path, sizes, load)
            count = len(self._streams)
            start = min(range(count), key=lambda i: (self._streams[i].lanes, i))
            chosen = [self._streams[(start + i) % count] for i in range(lanes)]
            for stream in chosen:
                stream.lanes += 1
            copies.lanes += lanes
        return [Seat(self, copies, stream) for stream in chosen]

    def _place(
        self,
        key: tuple[Any, ...],
        path: Path,
        sizes: LoadSizes,
        load: Callable[[DeviceBuffer], Model],
    ) -> _Copies:
        """Load a model's copy into every stream's work space (pool lock held)."""
        if any(s.work is None or s.work.size < sizes.work for s in self._streams):
            self._grow(path, work=sizes.work)
        copies = _Copies(key, path, sizes, load)
        try:
            for here in self._streams:
                assert here.work is not None
                with here.idle(f"made idle to load {path.name}"):
                    copies.models.append(load(here.work))
        except BaseException:
            close_all(list[Resource](copies.models))
            raise
        self._models[key] = copies
        logger.info(
            "%s placed on %d stream(s): work %d bytes in shared work spaces of %d bytes, "
            "weights %d bytes once",
            path.name,
            len(self._streams),
            sizes.work,
            self._streams[0].work.size if self._streams[0].work else 0,
            sizes.shared_bytes,
        )
        return copies

    def _io_area(self, here: _PoolStream, nbytes: int, path: Path) -> DeviceBuffer:
        """`here`'s I/O area, every stream's grown to `nbytes` first when smaller."""
        with self._lock:
            if here.io is None or here.io.size < nbytes:
                self._grow(path, io=nbytes)
            assert here.io is not None
            return here.io

    def _grow(self, path: Path, work: int = 0, io: int = 0) -> None:
        """Give every stream a work space of `work` bytes and an I/O area of `io` bytes where
        its own are smaller (pool lock held): every stream held idle; per stream a new work
        space allocated and its copies loaded into it (the same weights), then the old copies
        unloaded and the old work space freed; a new I/O area allocated and the old one freed
        (the lanes make their views again under their next hold). A stream whose new memory or
        copies fail keeps its old ones (the error is raised)."""
        started = time.perf_counter()
        before = self._largest()
        placed = list(self._models.values())
        with contextlib.ExitStack() as held:
            for here in self._streams:
                held.enter_context(here.idle(f"made idle to grow its memory for {path.name}"))
            for here in self._streams:
                if work and (here.work is None or here.work.size < work):
                    self._grow_work(here, work, placed)
                if io and (here.io is None or here.io.size < io):
                    grown = DeviceBuffer(self.context, io)
                    old, here.io = here.io, grown
                    if old is not None:
                        old.close()
        self._update_record()
        held_ms = (time.perf_counter() - started) * 1000
        reloaded = f"{len(placed) * len(self._streams)} model copies loaded again; "
        for what, old_size, new_size, also in (
            ("work spaces", before[0], work, reloaded),
            ("I/O areas", before[1], io, ""),
        ):
            if old_size and new_size > old_size:
                logger.warning(
                    "shared %s grown for %s: %d stream(s) from %d to %d bytes each (%severy "
                    "stream held for %.1f ms)",
                    what,
                    path.name,
                    len(self._streams),
                    old_size,
                    new_size,
                    also,
                    held_ms,
                )

    def _grow_work(self, here: _PoolStream, work: int, placed: list[_Copies]) -> None:
        """A new work space of `work` bytes for `here` (held idle), its copies loaded into it."""
        grown = DeviceBuffer(self.context, work)
        fresh: list[Model] = []
        try:
            for copies in placed:
                fresh.append(copies.load(grown))
        except BaseException:
            close_all([*fresh, grown])
            raise
        old: list[Resource] = [copies.models[here.index] for copies in placed]
        for copies, model in zip(placed, fresh):
            copies.models[here.index] = model
        if here.work is not None:
            old.append(here.work)
        here.work, here.last_model = grown, None
        close_all(old)

    def _largest(self) -> tuple[int, int]:
        """The largest work space and I/O area of the streams (0: none yet)."""
        works = [s.work.size for s in self._streams if s.work is not None]
        areas = [s.io.size for s in self._streams if s.io is not None]
        return max(works, default=0), max(areas, default=0)

    def _update_record(self) -> None:
        """The pool's placement records: its work spaces and I/O areas."""
        close_all(list[Resource](self._record))
        self._record.clear()
        device_id = self.context.device.device_id
        for what, held in (("work spaces", self.work_bytes), ("I/O areas", self.io_bytes)):
            if held:
                label = f"shared {what} ({len(self._streams)} streams)"
                self._record.append(Placement(device_id, label, held))

    @property
    def empty(self) -> bool:
        """No model is placed."""
        return not self._models

    def _leave(self, copies: _Copies, stream: _PoolStream) -> None:
        """A seat leaves: the model's copies are unloaded with its last lane, the pool closed
        with its last model."""
        with self._registry, self._lock:
            stream.lanes -= 1
            copies.lanes -= 1
            if copies.lanes:
                return
            del self._models[copies.key]
            for here in self._streams:
                if here.last_model in copies.models:
                    here.last_model = None
            models, copies.models = copies.models, []
            last = not self._models
            if last:
                self._gone(self)  # no session is handed this pool any more
        try:
            close_all(list[Resource](models))
        finally:
            logger.info(
                "%s left the stream pool: its %d copies unloaded", copies.path.name, len(models)
            )
            if last:
                self.close()

    def _zero(self, here: _PoolStream) -> None:
        """Queue the zeroing of the stream's work space (stream lock held)."""
        acl = self.context.acl
        assert here.work is not None
        work = here.work
        ret = acl.rt.memset_async(work.ptr, work.size, 0, work.size, here.stream.handle)
        check(ret, "acl.rt.memset_async", acl)

    def _replace(self, here: _PoolStream, hung: Stream) -> None:
        with here.lock:
            if here.stream is not hung:
                return  # another lane replaced it already
            self.context.activate()
            here.stream = Stream(self.context)
            here.last_model = None
        logger.warning(
            "stream %d of the pool timed out: replaced for its %d lane(s)", here.index, here.lanes
        )
        try:
            hung.close()
        except AclError as exc:
            logger.warning("releasing the timed-out stream %d: %s", here.index, exc)


def _close_pool(
    models: dict[tuple[Any, ...], _Copies], streams: list[_PoolStream], record: list[Placement]
) -> None:
    """Copies first, then work spaces, I/O areas, streams and the records."""
    resources: list[Resource] = [m for copies in models.values() for m in copies.models]
    models.clear()
    resources += [s.work for s in streams if s.work is not None]
    resources += [s.io for s in streams if s.io is not None]
    resources += [s.stream for s in streams]
    resources += record
    streams.clear()
    close_all(resources)


class WorkSpaces:
    """A process's stream pools by `settings` (one per device context, made by the first session
    that needs it and closed with its last model), for `Session(..., work_spaces=...)`."""

    def __init__(self, settings: WorkSpaceSettings) -> None:
        self.settings = settings
        self._lock = threading.RLock()  # taken before any pool's own
        self._pools: dict[int, StreamPool] = {}

    def seats(
        self,
        context: Context,
        path: Path,
        sizes: LoadSizes,
        lanes: int,
        load: Callable[[DeviceBuffer], Model],
        key: tuple[Any, ...],
    ) -> list[Seat]:
        """`StreamPool.seats` in the pool of `context` (made here when it has none)."""
        with self._lock:
            pool = self._pools.get(id(context))
            if pool is None:
                pool = StreamPool(context, self.settings, self._lock, self._forget)
                self._pools[id(context)] = pool
            try:
                return pool.seats(path, sizes, lanes, load, key)
            except BaseException:
                if pool.empty:
                    self._forget(pool)
                    pool.close()
                raise

    def _forget(self, pool: StreamPool) -> None:
        """Stop handing `pool` out (registry lock held)."""
        if self._pools.get(id(pool.context)) is pool:
            del self._pools[id(pool.context)]

    def per_stream(self, context: Context) -> tuple[int, int, int]:
        """(streams, bytes of each work space, bytes of each I/O area) of `context`'s pool, as
        malloc reserves them; the settings' streams and no bytes while it has none."""
        with self._lock:
            pool = self._pools.get(id(context))
            if pool is None or not pool.stream_count:
                return self.settings.streams, 0, 0
            count = pool.stream_count
            return count, pool.work_bytes // count, pool.io_bytes // count

    def totals(self) -> tuple[int, int, int]:
        """(streams, work space bytes, I/O area bytes) of every pool of the process."""
        with self._lock:
            pools = list(self._pools.values())
            return (
                sum(p.stream_count for p in pools),
                sum(p.work_bytes for p in pools),
                sum(p.io_bytes for p in pools),
            )


def model_key(
    path: Path, sizes: LoadSizes, shape_order: Sequence[str] | None, aipp: Any
) -> tuple[Any, ...]:
    """What makes two sessions' models one in a pool: the same file (path, size, mtime), input
    order and AIPP parameters."""
    info = os.stat(path)
    order = None if shape_order is None else tuple(shape_order)
    return (os.path.realpath(path), info.st_size, info.st_mtime_ns, sizes, order, repr(aipp))
