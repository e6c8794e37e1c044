"""The emulator's witness of device memory used on two streams at once.

A stream runs its tasks in the order they entered it, two streams side by side. Neither the
runtime nor GE checks that a task queued on one stream leaves alone the device memory a task
still in flight on another stream reads or writes: an execution's work memory given to several
models (`load_from_file_with_mem`), an input or output buffer given to executions or copies on
two streams. On a device both tasks then see each other's bytes and their results are silently
corrupted. So the emulator keeps, per device allocation and per runner (a stream, or a
synchronous `acl.mdl.execute` while it runs), the ranges its tasks in flight read or write, and
refuses a task (500002, GE's code for misuse of a model id; the emulator's choice for copies
too) whose range overlaps one of another runner's when either writes, unless the task's stream
is ordered after it (`acl.rt.stream_wait_event` on an event recorded after it, directly or
through the waits of other streams). A runner's reached tasks leave from the front of its
queue; a freed allocation's records go with it. Callers hold `_state.LOCK`.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple, Union

from ge_python_backend.ascend import AclCode
from ge_python_backend.emulator._memory import DeviceAllocation, Span
from ge_python_backend.emulator._state import AclFailure
from ge_python_backend.emulator._streams import Stream

WORK = "work memory"


class SyncRun:
    """A synchronous `acl.mdl.execute` in flight, in the place of a stream: `reached` once it
    returned (`done`); nothing is ordered after it but by the host."""

    ticket = 1
    after: Mapping[Stream, int] = MappingProxyType({})  # waits for no stream's work

    def __init__(self) -> None:
        self.done = False

    def reached(self, ticket: int) -> bool:
        """True once the execute returned."""
        return self.done


Runner = Union[Stream, SyncRun]


class Access(NamedTuple):
    """Device addresses [start, end) of `allocation` that a task reads or `writes`: its `what`
    ("work memory", "input 0", "destination", ...)."""

    allocation: DeviceAllocation
    start: int
    end: int
    writes: bool
    what: str

    def clashes(self, other: Access) -> bool:
        """Whether the two share a byte and one of them writes it."""
        return (self.writes or other.writes) and self.start < other.end and other.start < self.end


def span_access(
    span: Span | None, writes: bool, what: str, size: int | None = None
) -> Access | None:
    """`size` bytes at `span` (None: the bytes it has) as an `Access`; None for host memory,
    or no span."""
    if span is None or span.device is None:
        return None
    allocation = span.device
    start = allocation.base + span.address - allocation.address
    length = (span.remaining or 0) if size is None else size
    return Access(allocation, start, start + length, writes, what)


class Task(NamedTuple):
    """Who queued an access: `name` ("model 3", "an acl.rt.memcpy_async"), the model whose
    execution it is (`owner`, None for a copy)."""

    name: str
    owner: object = None


Flight = tuple[Task, Access, int]  # with the ticket of the task on its runner
# A runner's own reached tasks are dropped once this many are recorded on an allocation (the
# other runners' checks drop them too): fewer lookups per call, a few records kept longer.
PRUNE_AT = 8
# The tasks in flight per allocation and per runner, in submission order.
FLIGHTS: dict[DeviceAllocation, dict[Runner, collections.deque[Flight]]] = {}


def _pending(runner: Runner, flights: collections.deque[Flight]) -> collections.deque[Flight]:
    """`flights` without the tasks `runner` has reached."""
    while flights and runner.reached(flights[0][2]):
        flights.popleft()
    return flights


def check(task: Task, accesses: Sequence[Access], runner: Runner) -> None:
    """500002 when one of `accesses`, about to be queued on `runner`, clashes with a task in
    flight on another runner that `runner` is not ordered after. One model's own executions do
    not clash with each other: `LoadedModel.claim` refuses one model id on two streams, and GE
    runs synchronous executions on the model's own stream (UNCONFIRMED whether two threads'
    synchronous executions of one model id are serialised there)."""
    after = runner.after
    for mine in accesses:
        runners = FLIGHTS.get(mine.allocation)
        if not runners or (len(runners) == 1 and runner in runners):
            continue
        for other, flights in list(runners.items()):
            if other is runner:
                continue
            if not _pending(other, flights):
                del runners[other]
                continue
            ordered = after.get(other, 0) if isinstance(other, Stream) else 0
            for their_task, theirs, ticket in flights:
                if ticket <= ordered or (task.owner is not None and their_task.owner is task.owner):
                    continue
                if mine.clashes(theirs):
                    raise AclFailure(
                        AclCode.GE_FAILURE, _clash(task, mine, runner, their_task, theirs, other)
                    )


def record(task: Task, accesses: Sequence[Access], runner: Runner, ticket: int) -> None:
    """Note `accesses` of `task`, queued on `runner` with `ticket`."""
    for access in accesses:
        runners = FLIGHTS.get(access.allocation)
        if runners is None:
            runners = FLIGHTS[access.allocation] = {}
        flights = runners.get(runner)
        if flights is None:
            flights = runners[runner] = collections.deque()
        elif len(flights) >= PRUNE_AT:
            _pending(runner, flights)
        flights.append((task, access, ticket))


def end_synchronous(run: SyncRun, accesses: Sequence[Access]) -> None:
    """A synchronous execute `run` with `accesses` returned."""
    run.done = True
    for access in accesses:
        FLIGHTS.get(access.allocation, {}).pop(run, None)


def forget(owner: object) -> None:
    """Drop the tasks of `owner` (a model unloaded)."""
    for runners in FLIGHTS.values():
        for flights in runners.values():
            kept = [flight for flight in flights if flight[0].owner is not owner]
            if len(kept) != len(flights):
                flights.clear()
                flights.extend(kept)


def freed(allocation: DeviceAllocation) -> None:
    """Drop the records of a freed allocation (its addresses are never reused)."""
    FLIGHTS.pop(allocation, None)


def _where(runner: Runner) -> str:
    return f"stream 0x{runner.handle:x}" if isinstance(runner, Stream) else "acl.mdl.execute"


def _clash(
    task: Task, mine: Access, runner: Runner, their_task: Task, theirs: Access, other: Runner
) -> str:
    """The refusal's message: both tasks, their runners and memory, and what to do."""
    verb = "writes" if mine.writes else "reads"
    if mine.what == theirs.what == WORK:
        hint = "run the models that share a work space on one stream"
    else:
        hint = (
            "queue the copies and executions that use one buffer on one stream, or order them "
            "(acl.rt.stream_wait_event, or wait for the first on the host)"
        )
    return (
        f"{task.name} (on {_where(runner)}) {verb} its {mine.what} at 0x{mine.start:x} "
        f"({mine.end - mine.start} bytes), which overlaps the {theirs.what} of "
        f"{their_task.name}, still in flight on {_where(other)}; neither GE nor the runtime "
        "checks that device memory is used by one stream at a time, and on a device the two "
        f"tasks would overwrite each other's bytes (results silently corrupted): {hint}"
    )
