"""Contexts and their streams: queued work runs in submission order, lazily or on a worker thread.

A context and its streams name each other, so both live here with their registries (`CONTEXTS`,
`STREAMS`, `DEFAULT_CONTEXTS`) and the calling thread's current context (`CURRENT`, per OS thread
as in the real runtime); callers of the registries hold `LOCK`.

Without a timing model (nothing sleeps) a stream is lazy: its work runs when somebody waits for
it (`wait`, `wait_for`), in the waiting thread, one thread at a time per stream (its `_runner`;
the others wait for it, holding nothing):
the streams of a process run their work side by side, as a device's engines do (a long JPEG
decode on one stream holds no other stream). That is at least as strict as a device that runs
the work early (results exist only after a synchronize; a host write to a pinned buffer before
the synchronize lands in the queued copy, as a DMA that has not started yet would read it) and
costs no thread hand-off per call. Under a timing model the work must overlap the host and the
other streams, so the first submit starts one worker thread per stream and the worker runs it.

Work queued under a hang fault (`faults.hanging()`) never completes: the stream stops there (a
worker is a daemon thread, so the process still exits) until the stream is stopped, and waiters
block until their timeout or until the stream is destroyed."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ge_python_backend.ascend import AclCode
from ge_python_backend.emulator import faults, timing
from ge_python_backend.emulator._state import (
    LOCK,
    STATE,
    TLS,
    AclFailure,
    Device,
    Handled,
    require_init,
)

Work = Callable[[], None]  # raises AclFailure when the queued operation fails


@dataclass(eq=False)
class Context(Handled):
    """A runtime context; `streams` are the ones created in it (not its default stream)."""

    device: Device
    explicit: bool
    streams: dict[int, Stream] = field(default_factory=dict)
    default_stream: Stream | None = None


class _Current(threading.local):
    context: Context | None = None


CURRENT = _Current()  # the calling thread's current context
# The process's live contexts (default and explicit) and streams (not the default ones) by
# handle, and each opened device's default context by device id.
CONTEXTS: dict[int, Context] = {}
STREAMS: dict[int, Stream] = {}
DEFAULT_CONTEXTS: dict[int, Context] = {}


class Mark:
    """Queued instead of a work by an event record: nothing runs, the stream stamps it with the
    device time it reaches it (its submission, or the end of the stream's previous work if
    later), as a device stamps an event between two tasks."""

    stamp: float | None = None  # None until the stream reached it


class StreamHung(Exception):
    """Raised into a queued wait (`stream_wait_event`) whose event sits behind hung work: the
    waiting stream hangs too, as on a device, instead of blocking its runner."""


class Stream:
    """An `aclrtStream`; its worker makes the stream's context current for itself."""

    def __init__(self, handle: int, context: Context) -> None:
        self.handle = handle
        self.context = context
        self._lock = threading.RLock()  # taken directly (cheaper than through the condition)
        # the one thread running this stream's lazy work, None while none does (the same
        # thread may run it again within: a work waiting for another stream's event runs that
        # stream's work, which may wait for this one's)
        self._runner: int | None = None
        self._cond = threading.Condition(self._lock)
        # (api, work, hang fault, perf_counter when submitted)
        self._queue: collections.deque[tuple[str, Work | Mark, faults.Fault | None, float]] = (
            collections.deque()
        )
        self._clock = 0.0  # device time at which the stream's last work ended
        self._submitted = 0
        self._completed = 0
        self._failure: AclFailure | None = None  # first failure since the last `wait`
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._hung = ""  # what the stream is stuck on (a hang fault), "" while it is not
        self._taken: tuple[str, Work | Mark, float] = ("", Mark(), 0.0)  # what `_take` popped
        # per other stream, the ticket up to which its work runs before the work queued here
        # from now on (`acl.rt.stream_wait_event`, directly or through the waits of the stream
        # waited for); replaced, never changed in place, so a record can keep it as it is
        self.after: Mapping[Stream, int] = {}

    def submit(self, api: str, work: Work | Mark) -> int:
        """Queue `work` or a `Mark` (from call `api`); returns its ticket for `wait_for`."""
        with self._lock:
            if self._stopping:
                raise AclFailure(
                    AclCode.RT_INVALID_HANDLE, f"stream 0x{self.handle:x} was destroyed"
                )
            self._queue.append((api, work, faults.hanging(), time.perf_counter()))
            self._submitted += 1
            if self._thread is None and timing.current().sleeps:
                self._thread = threading.Thread(
                    target=self._run, name=f"acl-stream-0x{self.handle:x}", daemon=True
                )
                self._thread.start()
            if self._thread is not None:  # only the worker waits for submissions
                self._cond.notify_all()
            return self._submitted

    def order_after(self, stream: Stream, ticket: int, after: Mapping[Stream, int]) -> None:
        """Work queued here from now on runs after `stream`'s work up to `ticket`, and after
        what that work runs after (`after`, `stream`'s own at the time)."""
        with self._lock:
            merged = dict(self.after)
            for other, last in (*after.items(), (stream, ticket)):
                if other is not self and merged.get(other, 0) < last:
                    merged[other] = last
            self.after = merged

    def reached(self, ticket: int) -> bool:
        """True once the work with `ticket` has run (or the stream was stopped)."""
        with self._lock:
            return self._completed >= ticket or self._stopping

    def wait_for(
        self, ticket: int, give_up_if_hung: bool = False, timeout: float | None = None
    ) -> bool:
        """Block until the work with `ticket` (and everything before it) has run, or the stream
        is stopped, at most `timeout` seconds (None: no limit); False if it timed out. With
        `give_up_if_hung`, StreamHung if hung work stands before it."""
        self._run_lazily(ticket)
        with self._lock:
            if give_up_if_hung and self._hung and self._completed < ticket:
                raise StreamHung(f"stream 0x{self.handle:x}: {self._hung}")
            return self._cond.wait_for(lambda: self._completed >= ticket or self._stopping, timeout)

    def wait(self, timeout_ms: int = -1) -> AclFailure | None:
        """Block until everything queued so far has run (at most `timeout_ms`, -1: no limit);
        return and forget the first failure. Past the timeout: 507046 (the work keeps running);
        a stream destroyed while its work hangs: 107017."""
        with self._lock:
            target = self._submitted
        self._run_lazily(target)
        with self._lock:
            done = self._cond.wait_for(
                lambda: self._completed >= target or self._stopping,
                None if timeout_ms < 0 else timeout_ms / 1000,
            )
            if not done:
                hung = f"; {self._hung}" if self._hung else ""
                return AclFailure(
                    AclCode.RT_STREAM_SYNC_TIMEOUT,
                    f"stream 0x{self.handle:x}: the queued work did not finish within "
                    f"{timeout_ms} ms{hung}",
                )
            if self._completed < target:
                return AclFailure(
                    AclCode.RT_INVALID_HANDLE,
                    f"stream 0x{self.handle:x} was destroyed while its work hung",
                )
            failure, self._failure = self._failure, None
            return failure

    def stop(self) -> None:
        """Wait for the queued work (up to work that hangs, which is abandoned with everything
        queued after it), then end the worker thread."""
        with self._lock:
            target = self._submitted
        self._run_lazily(target)
        with self._lock:
            self._cond.wait_for(lambda: self._completed >= target or bool(self._hung))
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        """The worker thread (streams under a timing model)."""
        CURRENT.context = self.context
        while True:
            with self._lock:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue or not self._take():
                    return
                api, work, submitted = self._taken
                if isinstance(work, Mark):  # stamped at once, no work to run
                    self._complete_mark(work, submitted)
                    continue
            if not self._execute(api, work, submitted):
                with self._lock:
                    self._cond.wait_for(lambda: self._stopping)
                return

    def _run_lazily(self, ticket: int) -> None:
        """Run the queued work up to `ticket` in the calling thread, unless a worker runs it.

        One thread at a time runs a stream's lazy work (`_runner`); a work that waits for another
        stream's event (`stream_wait_event`) runs that stream's work itself. A thread that finds
        another running this stream's work waits until that one reaches `ticket` or stops
        running it, without holding anything the running one may need: two streams whose
        runners each wait for work the other has already passed must not hang (waiting for each
        other's lock they did, with four threads on two streams). Two streams' runners wait
        for each other only when each waits for work the other has not reached, which hangs a
        device too.
        """
        if self.reached(ticket):
            return
        me = threading.get_ident()
        with self._lock:
            self._cond.wait_for(
                lambda: self._runner in (None, me) or self._completed >= ticket or self._stopping
            )
            if self._completed >= ticket or self._stopping:
                return
            outermost = self._runner is None
            self._runner = me
        try:
            self._run_queued(ticket)
        finally:
            if outermost:
                with self._lock:
                    self._runner = None
                    self._cond.notify_all()

    def _run_queued(self, ticket: int) -> None:
        """`_run_lazily`'s loop, in the stream's runner: the queued work up to `ticket`."""
        while True:
            with self._lock:
                if (
                    self._thread is not None
                    or self._stopping
                    or self._hung
                    or self._completed >= ticket
                    or not self._queue
                    or not self._take()
                ):
                    return
                api, work, submitted = self._taken
                if isinstance(work, Mark):  # stamped at once, no work to run
                    self._complete_mark(work, submitted)
                    continue
            saved = CURRENT.context, TLS.api
            CURRENT.context = self.context
            try:
                if not self._execute(api, work, submitted):
                    return
            finally:
                CURRENT.context, TLS.api = saved

    def _take(self) -> bool:
        """Pop the next work into `_taken` (lock held); False if it hangs (it never completes:
        waiters time out, `stop` abandons it)."""
        api, work, hang, submitted = self._queue.popleft()
        if hang is not None:
            nth = "every call" if hang.nth is None else f"call #{hang.nth}"
            self._hung = (
                f"queued {api} never completes (injected fault {hang.call}:hang, {nth}, "
                f"{faults.ENV})"
            )
            self._cond.notify_all()
            if self._thread is not None:
                self._cond.wait_for(lambda: self._stopping)
            return False
        self._taken = (api, work, submitted)
        return True

    def _complete_mark(self, mark: Mark, submitted: float) -> None:
        """Stamp a reached `Mark` with the stream's device time and complete it (lock held)."""
        self._clock = mark.stamp = max(submitted, self._clock)
        self._completed += 1
        self._cond.notify_all()

    def _execute(self, api: str, work: Work, submitted: float) -> bool:
        """Run one queued work and record its completion (and first failure); False if it
        hangs (it waited for hung work of another stream). In device time the work starts once
        it was submitted and the stream's previous work ended (`timing.begin_work`)."""
        TLS.api = api
        failure = None
        outer = timing.begin_work(max(submitted, self._clock))
        try:
            work()
        except StreamHung as exc:
            with self._lock:
                self._hung = f"queued {api} waits for work that never completes ({exc})"
                self._cond.notify_all()
            return False
        except AclFailure as exc:
            failure = AclFailure(exc.code, f"queued {api} failed: {exc}")
        except Exception as exc:  # a bug in the emulator must not kill the stream silently
            failure = AclFailure(
                AclCode.RT_INTERNAL_ERROR, f"queued {api} hit an emulator error: {exc!r}"
            )
        finally:
            self._clock = timing.end_work(outer)
        if failure is not None:
            STATE.count("async_failures")
        with self._lock:
            self._completed += 1
            if failure is not None and self._failure is None:
                self._failure = failure
            self._cond.notify_all()
        return True


def stream_in(handle: int, ctx: Context) -> Stream:
    """Stream `handle` (0: the context's default stream) used under `ctx`; else 107017/107003."""
    with LOCK:
        if handle == 0:
            if ctx.default_stream is None:
                ctx.default_stream = Stream(STATE.new_handle(), ctx)
            return ctx.default_stream
        stream = STREAMS.get(handle)
        if stream is None:
            raise AclFailure(AclCode.RT_INVALID_HANDLE, f"0x{handle:x} is not a live stream handle")
        if stream.context is not ctx:
            raise AclFailure(
                AclCode.RT_STREAM_CONTEXT,
                f"stream 0x{handle:x} belongs to context 0x{stream.context.handle:x}, but the "
                f"current context of this thread is 0x{ctx.handle:x}",
            )
        return stream


def current_context() -> Context:
    """The calling thread's live current context, else 107002 (after the init check)."""
    require_init()
    ctx = CURRENT.context
    if ctx is None:
        raise AclFailure(
            AclCode.RT_CONTEXT_NULL,
            f"no current context in thread {threading.current_thread().name!r}: every thread "
            "must call acl.rt.set_context(context) (or acl.rt.set_device) before runtime calls",
        )
    if not ctx.live:
        raise AclFailure(
            AclCode.RT_CONTEXT_NULL,
            f"the current context 0x{ctx.handle:x} of thread {threading.current_thread().name!r} "
            "was destroyed (destroy_context, reset_device or finalize); set a live context",
        )
    return ctx


def live_context(handle: int) -> Context:
    """A live context by handle, else 107017."""
    ctx = CONTEXTS.get(handle)
    if ctx is None or not ctx.live:
        raise AclFailure(AclCode.RT_INVALID_HANDLE, f"0x{handle:x} is not a live context handle")
    return ctx
