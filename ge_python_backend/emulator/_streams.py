"""Streams: one worker thread per stream runs the queued work in submission order."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable

from ge_python_backend.emulator._state import LOCK, STATE, TLS, AclFailure, Context

Work = Callable[[], None]  # raises AclFailure when the queued operation fails


class Stream:
    """An `aclrtStream`; its worker makes the stream's context current for itself."""

    def __init__(self, handle: int, context: Context) -> None:
        self.handle = handle
        self.context = context
        self._cond = threading.Condition()
        self._queue: collections.deque[tuple[str, Work]] = collections.deque()
        self._submitted = 0
        self._completed = 0
        self._failure: AclFailure | None = None  # first failure since the last `wait`
        self._thread: threading.Thread | None = None
        self._stopping = False

    def submit(self, api: str, work: Work) -> int:
        """Queue `work` (from call `api`); returns its ticket for `wait_for`."""
        with self._cond:
            if self._stopping:
                raise AclFailure(107017, f"stream 0x{self.handle:x} was destroyed")
            self._queue.append((api, work))
            self._submitted += 1
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"acl-stream-0x{self.handle:x}", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
            return self._submitted

    def wait_for(self, ticket: int) -> None:
        """Block until the work with `ticket` (and everything before it) has run."""
        with self._cond:
            while self._completed < ticket:
                self._cond.wait()

    def wait(self) -> AclFailure | None:
        """Block until everything queued so far has run; return and forget the first failure."""
        with self._cond:
            target = self._submitted
            while self._completed < target:
                self._cond.wait()
            failure, self._failure = self._failure, None
            return failure

    def stop(self) -> None:
        """Wait for the queued work, then end the worker thread."""
        self.wait()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        TLS.context = self.context
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                api, work = self._queue.popleft()
            TLS.api = api
            failure = None
            try:
                work()
            except AclFailure as exc:
                failure = AclFailure(exc.code, f"queued {api} failed: {exc}")
            except Exception as exc:  # a bug in the emulator must not kill the stream silently
                failure = AclFailure(507000, f"queued {api} hit an emulator error: {exc!r}")
            if failure is not None:
                STATE.count("async_failures")
            with self._cond:
                self._completed += 1
                if failure is not None and self._failure is None:
                    self._failure = failure
                self._cond.notify_all()


def stream_in(handle: int, ctx: Context) -> Stream:
    """Stream `handle` (0: the context's default stream) used under `ctx`; else 107017/107003."""
    with LOCK:
        if handle == 0:
            if ctx.default_stream is None:
                ctx.default_stream = Stream(STATE.new_handle(), ctx)
            return ctx.default_stream
        stream = STATE.streams.get(handle)
        if stream is None:
            raise AclFailure(107017, f"0x{handle:x} is not a live stream handle")
        if stream.context is not ctx:
            raise AclFailure(
                107003,
                f"stream 0x{handle:x} belongs to context 0x{stream.context.handle:x}, but the "
                f"current context of this thread is 0x{ctx.handle:x}",
            )
        return stream
