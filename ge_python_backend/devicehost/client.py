"""The stub's side of the device host: `RemoteSession`, a `Session` that lives in the host.

`RemoteSession(om_path, device_id, ...)` takes `Session`'s arguments, connects to the host of
`device_id` (starting one when none runs: `start_host`, under a lock so that one starts per
device) and opens the session there. It is a `serving.ServingSession`, as `Session` is, and
fails as one: what the host's session raised comes back as the same error (`AclError` with its
code, name and message, `InputError` with its `request`, `ModelUnavailable`). A request's
tensors are written once into a buffer the host gave this connection and its outputs copied once
out of it (the host reuses the buffer for the next batch). A batch whose answer is later than
the reply timeout fails (`ReplyLate`) and its buffer is retired, never reused: the host may
still write its outputs there. The waits before the session is open are bounded as well: the
host's start by `START_TIMEOUT_S`, its taking the connection and answering the opening by
`load_timeout_s` (a stalled, deadlocked or stopped host fails the load with `LoadLate`, naming
its socket and the parameter to raise).

The host dying fails every request in flight at once (`DeviceHostGone`); the next `submit`
starts a host again and reopens the session (`counters` keep counting across hosts) on the very
`.om` this instance loaded (its sha256, from the first host): when that file changed or went
away meanwhile, every later `submit` raises `ModelUnavailable` with the reason, until the model
is reloaded. Standard library, numpy and the ground floor only: no `acl`, no runtime.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import fcntl
import itertools
import logging
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

import ge_python_backend
from ge_python_backend.devicehost.buffers import (
    Buffer,
    Layout,
    Places,
    buffer_bytes,
    copied_out,
    is_bytes_tensor,
    layout,
    signature,
)
from ge_python_backend.devicehost.protocol import (
    MAX_LAYOUTS,
    RELOAD_NEEDED,
    SUBMIT,
    Accepted,
    Answer,
    BatchRecord,
    BufferGiven,
    Counted,
    DeviceHostError,
    DeviceHostGone,
    Failed,
    FrameReader,
    Free,
    GiveBuffer,
    HostPaths,
    Message,
    NameLayout,
    Open,
    Opened,
    Ready,
    Received,
    Request,
    SessionArguments,
    Stats,
    Submit,
    WaitReady,
    host_paths,
    peer_credentials,
    send_batch,
    send_message,
)
from ge_python_backend.environment import DEVICE_HOST_IDLE_EXIT_S, DEVICE_HOST_SHARE_CPU
from ge_python_backend.errors import InputError, ModelUnavailable
from ge_python_backend.modelinfo import SessionCounters

__all__ = [
    "DEFAULT_LOAD_TIMEOUT_S",
    "IDLE_EXIT_ENV",
    "LoadLate",
    "RemoteBatch",
    "RemoteSession",
    "ReplyLate",
    "python_interpreter",
    "start_host",
]

logger = logging.getLogger(__name__)

# Seconds a host started by a stub stays up after its last stub left (a model reloading, or
# Triton restarting a stub, finds it still there).
IDLE_EXIT_ENV = DEVICE_HOST_IDLE_EXIT_S.name
# "0": an inline batch's hop leaves the CPUs to the scheduler (`_keep_this_cpu`).
SHARE_CPU_ENV = DEVICE_HOST_SHARE_CPU.name
DEFAULT_IDLE_EXIT_S = 10.0
START_TIMEOUT_S = 120.0
# Seconds a stub waits for the host to take its connection and answer the opening of its model
# (the model parameter device_host_load_timeout_s): above a large .om's load onto a device (tens
# of seconds) and the host's queue of opens when a repository's models load at once (with shared
# work spaces it loads one model at a time); the time validate --serve gives a whole repository.
DEFAULT_LOAD_TIMEOUT_S = 300.0
# The parameter that sets it, named in the error of a load that waited that long.
LOAD_TIMEOUT_PARAMETER = "device_host_load_timeout_s"
# Seconds a reply may take beyond every lane's execute_timeout_ms before the host counts as stuck.
REPLY_MARGIN_S = 30.0
_OPEN_ATTEMPTS = 3
_started: list[subprocess.Popen[bytes]] = []  # hosts this process started, reaped when they end


def python_interpreter() -> str:
    """The Python to run the host with: this process's own. Inside Triton's stub
    `sys.executable` is the stub binary (or empty), so the interpreter of `sys.prefix` (the
    environment whose packages the stub imports) comes first."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [
        os.path.join(sys.prefix, "bin", f"python{version}"),
        os.path.join(sys.prefix, "bin", "python3"),
        sys.executable,
        getattr(sys, "_base_executable", ""),
        shutil.which(f"python{version}") or "",
        shutil.which("python3") or "",
    ]
    for candidate in candidates:
        if (
            candidate
            and os.path.basename(candidate).startswith("python")
            and os.access(candidate, os.X_OK)
        ):
            return candidate
    raise DeviceHostError(
        f"no Python {version} interpreter to run the device host with (looked for "
        f"{', '.join(c for c in candidates if c)}); start it yourself: ge-python-model "
        "device-host --device N"
    )


def _sched_getcpu() -> Any:
    """libc's `sched_getcpu` (the CPU the calling thread runs on), or None where it is missing."""
    try:
        return ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        logger.info("no sched_getcpu here: the device host's hop leaves the CPUs to the scheduler")
        return None


_current_cpu = _sched_getcpu()


def share_cpu_wanted() -> bool:
    """`GE_DEVICE_HOST_SHARE_CPU`: "1" (the default) or "0"; DeviceHostError otherwise."""
    text = os.environ.get(SHARE_CPU_ENV, "1")
    if text not in ("0", "1"):
        raise DeviceHostError(f"{SHARE_CPU_ENV} must be 0 or 1, got {text!r}")
    return text == "1" and _current_cpu is not None


class LoadLate(DeviceHostError):
    """The device host did not take the connection, or did not answer the opening of the model,
    within the load timeout."""


def _load_late(
    device: int, paths: HostPaths, waited_for: str, timeout_s: float, pid: int = 0
) -> LoadLate:
    """What an operator needs when the host of `device` (`pid`, 0 unknown) did not do
    `waited_for` in time."""
    process = f"pid {pid}, " if pid else ""
    return LoadLate(
        f"the device host of device {device} ({process}socket {paths.socket}) {waited_for} within "
        f"{timeout_s:g} s: it may be stalled, deadlocked or stopped (its log: {paths.log}). If "
        "opening the model takes longer (a large .om, many models loading at once), raise the "
        f"config.pbtxt parameter {LOAD_TIMEOUT_PARAMETER} (now {timeout_s:g})"
    )


def _connect(device: int, paths: HostPaths, timeout_s: float) -> socket.socket | None:
    """A connection to the host of `device`; None when none listens. A host whose queue of
    connections stays full (it does not accept them) for `timeout_s` is `LoadLate`."""
    deadline = time.monotonic() + timeout_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)  # a full queue: EAGAIN at once rather than a wait without end
        try:
            sock.connect(paths.socket)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            return None
        except BlockingIOError:
            sock.close()
            if time.monotonic() >= deadline:
                raise _load_late(device, paths, "did not take the connection", timeout_s) from None
            time.sleep(0.02)
            continue
        sock.setblocking(True)
        return sock


def _log_tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as log:
            return " | ".join(line.strip() for line in log.readlines()[-lines:])
    except OSError as exc:
        return f"(cannot read it: {exc})"


def _take_start_lock(device: int, paths: HostPaths) -> int:
    """The descriptor of `paths.start_lock`, locked: waited for while another stub starts the
    host (which takes at most `START_TIMEOUT_S`)."""
    lock = os.open(paths.start_lock, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(lock)
                raise DeviceHostError(
                    f"another process has held {paths.start_lock} for {START_TIMEOUT_S:g} s, "
                    f"longer than starting the device host of device {device} may take: it may "
                    f"be stopped or stuck (see {paths.log}); or start the host yourself: "
                    f"ge-python-model device-host --device {device}"
                ) from None
            time.sleep(0.02)


def start_host(
    device: int,
    paths: HostPaths,
    extra_env: dict[str, str] | None = None,
    load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
) -> socket.socket:
    """A connection to the host of `device`, started here when none runs (one stub at a time
    starts one: `paths.start_lock`), with this process's environment and `extra_env`. A host
    that does not take the connection within `load_timeout_s` is `LoadLate`."""
    sock = _connect(device, paths, load_timeout_s)
    if sock is not None:
        return sock
    for process in list(_started):
        if process.poll() is not None:
            _started.remove(process)
    lock = _take_start_lock(device, paths)
    try:
        sock = _connect(device, paths, load_timeout_s)
        if sock is not None:
            return sock
        package_root = os.path.dirname(os.path.dirname(os.path.abspath(ge_python_backend.__file__)))
        env = {**os.environ, **(extra_env or {})}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        idle = os.environ.get(IDLE_EXIT_ENV) or str(DEFAULT_IDLE_EXIT_S)
        command = [
            python_interpreter(),
            "-m",
            "ge_python_backend.devicehost",
            "--device",
            str(device),
            "--idle-exit",
            idle,
        ]
        logger.info(
            "starting the device host of device %d: %s (log %s)",
            device,
            " ".join(command),
            paths.log,
        )
        with open(os.open(paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,  # Triton's signals to the stub are not the host's
            )
        _started.append(process)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            sock = _connect(device, paths, load_timeout_s)
            if sock is not None:
                return sock
            if process.poll() is not None:
                raise DeviceHostError(
                    f"the device host of device {device} exited with {process.returncode} while "
                    f"starting; its log {paths.log} ends: {_log_tail(paths.log)}"
                )
            time.sleep(0.02)
        raise DeviceHostError(
            f"the device host of device {device} did not listen within {START_TIMEOUT_S:g} s; "
            f"see {paths.log}"
        )
    finally:
        os.close(lock)  # releases the lock


class ReplyLate(DeviceHostError):
    """The device host did not answer within the reply timeout; it may still (its buffer is
    retired)."""


class _Call:
    """The replies to one message, as the link's reader hands them over."""

    def __init__(self) -> None:
        self.replies: collections.deque[Received] = collections.deque()
        self.error: BaseException | None = None


class _Link:
    """One connection to the host. No thread of its own: a caller waiting for a reply reads
    the socket itself (one at a time: the others wait for it to hand their replies over), so an
    inline batch's answer wakes the thread that waits for it and nothing else. When the
    connection ends every call still waiting fails at once; an idle link finds out in
    `alive`."""

    def __init__(self, sock: socket.socket, device: int) -> None:
        self._sock = sock
        self._device = device
        self._timeout_s: float | None = None
        self._frames = FrameReader(sock)
        self._send_lock = threading.Lock()
        self._state = threading.Condition()  # guards _calls, _reading and lost
        self._calls: dict[int, _Call] = {}
        self._given_up: set[int] = set()  # calls whose reply came too late: dropped when it does
        self._reading = False
        self._ids = itertools.count(1)
        self._layouts: dict[Any, Layout] = {}  # the batches' shapes named on this connection
        self._layouts_lock = threading.Lock()
        self._answer_places: dict[int, Places] = {}  # the host's names, in the order they came
        self.host_pid = peer_credentials(sock)[0]
        self.lost: BaseException | None = None

    def settimeout(self, timeout_s: float | None) -> None:
        """Bound each wait for a reply (and the small sends) by `timeout_s` (None: no bound)."""
        self._sock.settimeout(timeout_s)
        self._timeout_s = timeout_s

    def _new_call(self) -> tuple[_Call, int]:
        call = _Call()
        with self._state:
            if self.lost is not None:
                raise self.lost
            ident = next(self._ids)
            self._calls[ident] = call
        return call, ident

    def call(self, message: Request) -> _Call:
        """Send `message` (given its `id`); its replies come through `reply`."""
        call, message.id = self._new_call()
        try:
            with self._send_lock:
                send_message(self._sock, message)
        except OSError as exc:
            self._lose(exc)
        return call

    def submit_inline(self, buffer: int, layout_number: int, cpu: int) -> _Call:
        """Send an inline batch of a named layout as a `SUBMIT` record."""
        call, ident = self._new_call()
        try:
            with self._send_lock:
                send_batch(self._sock, SUBMIT, ident, buffer, layout_number, cpu)
        except OSError as exc:
            self._lose(exc)
        return call

    def layout(self, arrays: Sequence[Mapping[str, np.ndarray]]) -> Layout:
        """Where `arrays` go in a buffer: named to the host the first time their shape comes
        (up to `MAX_LAYOUTS` shapes; the rest, and BYTES tensors, travel as places)."""
        key = signature(arrays)
        with self._layouts_lock:
            known = self._layouts.get(key) if key is not None else None
            if known is not None:
                return known
            places, nbytes = layout(arrays)
            if key is None or len(self._layouts) >= MAX_LAYOUTS:
                return Layout(0, places, nbytes)
            known = Layout(len(self._layouts) + 1, places, nbytes)
            self.tell(NameLayout(known.number, places))
            self._layouts[key] = known  # after the host was told: no batch names it before
            return known

    def answer_places(self, number: int) -> Places:
        """The places of the outputs' layout the host named `number`."""
        try:
            return self._answer_places[number]
        except KeyError:
            raise DeviceHostError(
                f"the device host answered with layout {number} it never named"
            ) from None

    def tell(self, message: Message) -> None:
        """A message without a reply."""
        try:
            with self._send_lock:
                send_message(self._sock, message)
        except OSError as exc:
            self._lose(exc)

    def reply(self, call: _Call) -> Received:
        """The next reply to `call`, read by this thread unless another is reading."""
        deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
        while True:
            with self._state:
                while not call.replies and call.error is None and self._reading:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        raise self._late(call)
                    self._state.wait(left)
                if call.replies:
                    return call.replies.popleft()
                if call.error is not None:
                    raise call.error
                if deadline is not None and time.monotonic() > deadline:
                    raise self._late(call)  # (the others' replies kept coming, not this one's)
                self._reading = True
            try:
                self._read_one(call)
            finally:
                with self._state:
                    self._reading = False
                    self._state.notify_all()

    def _read_one(self, waiting: _Call) -> None:
        """Read one frame and hand it to its call (the caller, waiting for `waiting`, holds the
        reading turn)."""
        try:
            item = self._frames.read()
        except socket.timeout:
            with self._state:
                late = self._late(waiting)
            raise late from None
        except (OSError, ValueError, DeviceHostError) as exc:
            self._lose(exc)
            return
        if item is None:
            self._lose(None)
            return
        reply, fds = item
        with self._state:
            if isinstance(reply, BatchRecord):  # an ANSWER record
                ident, more = reply.id, False
                call = self._calls.pop(ident, None)
            else:
                ident = getattr(reply, "id", 0)
                more = type(reply) is Accepted  # the batch's answer follows
                call = self._calls.get(ident) if more else self._calls.pop(ident, None)
                if type(reply) is Answer and reply.layout is not None:  # named before any
                    self._answer_places[reply.layout] = reply.outputs  # record uses it
            if call is not None:
                call.replies.append((reply, fds))
                return
            given_up = ident in self._given_up
            if given_up and not more:
                self._given_up.discard(ident)  # its last reply
        if given_up:
            logger.info("the device host answered message %d after it was given up; dropped", ident)
        else:
            logger.warning("the device host answered a message never sent: %s", reply)
        for fd in fds:
            os.close(fd)

    def _late(self, call: _Call) -> ReplyLate:
        """Give up on `call` (state held): a reply that comes after is dropped."""
        for ident, waiting in list(self._calls.items()):
            if waiting is call:
                del self._calls[ident]
                self._given_up.add(ident)
        return ReplyLate(
            f"the device host did not answer within {self._timeout_s:g} s (the reply timeout: "
            f"execute_timeout_ms for each lane and {REPLY_MARGIN_S:g} s); this batch's buffer is "
            "retired"
        )

    def alive(self) -> bool:
        """Whether the host is still at the other end (an idle link reads nobody's replies:
        a host that went away shows here, before a message is sent to it)."""
        with self._state:
            if self.lost is None and not self._calls:
                try:
                    readable, _, _ = select.select([self._sock], [], [], 0)
                    if readable and not self._sock.recv(1, socket.MSG_PEEK):
                        self.lost = self._gone(None)  # the end of the stream
                except OSError as exc:
                    self.lost = self._gone(exc)
            return self.lost is None

    def _gone(self, cause: BaseException | None) -> DeviceHostGone:
        pid = f" (pid {self.host_pid})" if self.host_pid else ""
        why = f": {cause}" if cause else ""
        return DeviceHostGone(
            f"the device host of device {self._device}{pid} went away with this request "
            f"in flight{why}; the next request starts it again"
        )

    def _lose(self, cause: BaseException | None) -> None:
        with self._state:
            if self.lost is None:
                self.lost = self._gone(cause)
            calls, self._calls = list(self._calls.values()), {}
            for call in calls:
                call.error = self.lost
            self._state.notify_all()

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            logger.debug("the device host connection was already closed")
        self._sock.close()


Replied = TypeVar("Replied", bound=Message)


def _reply(link: _Link, call: _Call, kind: type[Replied]) -> tuple[Replied, list[int]]:
    """The next reply to `call`, a `kind` message (`_expect`)."""
    return _expect(link.reply(call), kind)


def _expect(received: Received, kind: type[Replied]) -> tuple[Replied, list[int]]:
    """A reply that must be a `kind` message; what the host reported as a failure raised as the
    session in this process raises it."""
    reply, fds = received
    if type(reply) is kind:
        return reply, fds
    for fd in fds:
        os.close(fd)
    if type(reply) is Failed:
        raise reply.exception()
    raise DeviceHostError(f"the device host answered a {kind.OP!r} message with {reply!r}")


@dataclasses.dataclass
class _Slot:
    """A buffer the host gave this connection."""

    number: int
    buffer: Buffer


def _given_slot(number: int, nbytes: int | None, fds: list[int]) -> _Slot:
    """The buffer `number` of `nbytes` a host's reply gives (DeviceHostError, its descriptor
    closed, when it is not one a device host makes)."""
    try:
        return _Slot(number, Buffer(fds[0], int(nbytes or 0)))
    except (ValueError, OSError, IndexError) as exc:
        for fd in fds:
            os.close(fd)
        raise DeviceHostError(f"the device host gave a buffer this stub cannot map: {exc}") from exc


class RemoteBatch:
    """A batch submitted to the device host; `result()` waits for it (like `PendingBatch`)."""

    def __init__(self, session: RemoteSession, link: _Link, call: _Call, slot: _Slot) -> None:
        self._session = session
        self._link = link
        self._call = call
        self._slot: _Slot | None = slot
        self._lock = threading.Lock()
        self._results: list[dict[str, np.ndarray]] | None = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._results is not None or self._error is not None

    def result(self) -> list[dict[str, np.ndarray]]:
        with self._lock:
            if not self.done():
                self._receive()
        if self._error is not None:
            raise self._error
        assert self._results is not None
        return self._results

    def _receive(self) -> None:
        slot = self._slot
        assert slot is not None
        self._slot = None
        try:
            received = self._link.reply(self._call)
            record = received[0]
            if not isinstance(record, BatchRecord):
                answer, fds = _expect(received, Answer)
        except BaseException as exc:
            self._error = exc
            self._session._give_back(self._link, slot, exc)
            return
        if isinstance(record, BatchRecord):  # an ANSWER: the outputs' layout has a number
            number = record.layout
            try:
                places = self._link.answer_places(number)
            except DeviceHostError as exc:
                self._error = exc
                self._session._give_back(self._link, slot)
                return
            tensors = slot.buffer.tensors(places, ("outputs", number))
        else:
            if fds:  # the outputs needed a bigger buffer: it replaces this one
                self._link.tell(Free(slot.number))
                slot.buffer.close()
                slot = _given_slot(answer.buffer, answer.bytes, fds)
            key = None if answer.layout is None else ("outputs", answer.layout)
            tensors = slot.buffer.tensors(answer.outputs, key)
        self._results = copied_out(tensors)
        self._session._give_back(self._link, slot)


class RemoteSession:
    """A `Session` in the device host of `device_id` (see the module docstring)."""

    def __init__(
        self,
        om_path: str | os.PathLike[str],
        device_id: int = 0,
        *,
        load_timeout_s: float | None = None,
        **arguments: Any,
    ) -> None:
        self.device_id = device_id
        # (the model parameter device_host_load_timeout_s; None: the default)
        self.load_timeout_s = DEFAULT_LOAD_TIMEOUT_S if load_timeout_s is None else load_timeout_s
        self._arguments = SessionArguments(
            os.fspath(om_path),
            device_id,
            **{name: _plain(value) for name, value in arguments.items()},
        )
        timeout_ms = int(self._arguments.execute_timeout_ms or 0)
        depth = int(self._arguments.pipeline_depth or 1)
        # The host bounds every execution by execute_timeout_ms; a reply later than every lane's
        # timeout and a margin means the host itself is stuck.
        self.reply_timeout_s = (
            timeout_ms / 1000 * (depth + 1) + REPLY_MARGIN_S if timeout_ms else None
        )
        self._paths = host_paths(device_id)
        self._lock = threading.Lock()  # (re)connecting
        self._free: list[_Slot] = []
        self._free_lock = threading.Lock()
        self._base = SessionCounters()  # what earlier hosts counted
        self._last = SessionCounters()
        self._memory = (0, 0)
        self._memory_read = False  # with the last counters, not yet returned by device_memory
        self._ready = False  # the last submit's acceptance said the session could take the next
        self._share_cpu = share_cpu_wanted()
        self._closed = False
        self._unavailable: ModelUnavailable | None = None  # the model cannot be opened again
        self._link: _Link | None = None
        opened = self._open()
        self._arguments.sha256 = opened.sha256  # a host that opens it again checks it
        self.inputs = opened.inputs
        self.outputs = opened.outputs
        self.gears = opened.gears
        self.runtime = opened.runtime
        self.host_pid = opened.pid

    def _open(self) -> Opened:
        """Connect (starting the host if needed) and open the session: the host's answer, within
        `load_timeout_s` of the connection (`LoadLate`)."""
        for _attempt in range(_OPEN_ATTEMPTS):
            sock = start_host(self.device_id, self._paths, load_timeout_s=self.load_timeout_s)
            link = _Link(sock, self.device_id)
            link.settimeout(self.load_timeout_s)
            try:
                opened, _ = _reply(link, link.call(Open(self._arguments)), Opened)
            except DeviceHostGone:  # it was stopping as we connected: start another
                link.close()
                continue
            except ReplyLate:
                link.close()
                raise _load_late(
                    self.device_id,
                    self._paths,
                    "took the connection but did not answer the opening of "
                    f"{self._arguments.label or self._arguments.om_path}",
                    self.load_timeout_s,
                    link.host_pid,
                ) from None
            except BaseException:
                link.close()
                raise
            link.host_pid = opened.pid
            link.settimeout(self.reply_timeout_s)  # the replies' bound from now on
            self._link = link
            return opened
        raise DeviceHostError(
            f"the device host of device {self.device_id} went away {_OPEN_ATTEMPTS} times while "
            f"opening {self._arguments.om_path}; see {self._paths.log}"
        )

    def _current(self) -> _Link:
        """The live connection; after the host went away, a new host and the session reopened."""
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            link = self._link
            if link is not None and link.alive():
                return link
            if self._unavailable is not None:
                raise self._unavailable
            if link is not None:
                logger.warning("%s; reconnecting", link.lost)
                link.close()
                self._link = None
                with self._free_lock:
                    slots, self._free = self._free, []
                for slot in slots:
                    slot.buffer.close()
                self._base = _add(self._base, self._last)
                self._last = SessionCounters()
            try:
                self._open()
            except ModelUnavailable as exc:
                self._unavailable = ModelUnavailable(
                    f"{self._arguments.label or self._arguments.om_path} cannot be "
                    f"opened again in the device host of device {self.device_id}: {exc}; this "
                    f"instance {RELOAD_NEEDED}"
                )
                logger.error("%s", self._unavailable)
                raise self._unavailable from exc
            logger.info(
                "the session of %s is open again in the device host of device %d",
                self._arguments.label or self._arguments.om_path,
                self.device_id,
            )
            assert self._link is not None
            return self._link

    def _take(self, link: _Link, nbytes: int) -> _Slot:
        """A free buffer of at least `nbytes`, else a new one: the free ones too small for this
        batch are freed then (a larger one serves their batches with the pages it has; kept,
        a YOLOv8s instance held 8, 16 and 32 MiB beside its 64 MiB one)."""
        with self._free_lock:
            for index, slot in enumerate(self._free):
                if slot.buffer.nbytes >= nbytes:
                    return self._free.pop(index)
            smaller, self._free = self._free, []
        for slot in smaller:
            link.tell(Free(slot.number))
            slot.buffer.close()
        size = buffer_bytes(nbytes)
        given, fds = _reply(link, link.call(GiveBuffer(size)), BufferGiven)
        return _given_slot(given.buffer, given.bytes, fds)

    def _give_back(self, link: _Link, slot: _Slot, failure: BaseException | None = None) -> None:
        """Return `slot` to the pool once its batch is over: unless the host went away, or the
        batch's answer was late (`failure` a `ReplyLate`), when the host may still write it:
        then it is retired (the host told to free it once that batch is done), never reused."""
        if isinstance(failure, ReplyLate) and link.lost is None:
            logger.warning(
                "%r: buffer %d retired: its batch was given up, the device host may still write it",
                self,
                slot.number,
            )
            link.tell(Free(slot.number))
            slot.buffer.close()
        elif link is self._link and link.lost is None:
            with self._free_lock:
                self._free.append(slot)
        else:
            slot.buffer.close()

    def submit(
        self, feeds_list: Sequence[Mapping[str, Any]], pipelined: bool = True
    ) -> RemoteBatch:
        """Send a batch to the host's session; InputError (with `request`) if one does not fit,
        raised before any work as `Session.submit` raises it."""
        arrays = []
        for number, feeds in enumerate(feeds_list):
            tensors = {}
            for name, value in feeds.items():
                array = value if type(value) is np.ndarray else np.asarray(value)
                if array.dtype.hasobject and not is_bytes_tensor(array):
                    error = InputError(
                        f"input {name!r} holds Python objects other than bytes; the model takes "
                        "numeric tensors (and BYTES ones for an image input)"
                    )
                    error.request = number
                    raise error
                tensors[name] = array
            arrays.append(tensors)
        self._ready = False
        link = self._current()
        plan = link.layout(arrays)
        slot = self._take(link, plan.nbytes)
        key = ("feeds", plan.number) if plan.number else None
        slot.buffer.write(plan.places, arrays, key)
        if pipelined:
            call = link.call(_submit_message(slot, plan, pipelined=True))
            batch = RemoteBatch(self, link, call, slot)
            try:
                accepted, _ = _reply(link, call, Accepted)  # (or refused before any work)
            except BaseException as exc:
                self._give_back(link, slot, exc)
                raise
            self._ready = accepted.ready
            return batch
        cpu, allowed = self._keep_this_cpu()
        try:
            if plan.number:
                call = link.submit_inline(slot.number, plan.number, cpu)
            else:
                call = link.call(_submit_message(slot, plan, pipelined=False, cpu=cpu))
            batch = RemoteBatch(self, link, call, slot)
            try:
                batch.result()
            except InputError:
                raise
            except Exception:  # the batch's own failure: result() raises it again
                logger.debug("a batch failed in the device host", exc_info=True)
        finally:
            if allowed is not None:
                os.sched_setaffinity(0, allowed)
        return batch

    def _keep_this_cpu(self) -> tuple[int, set[int] | None]:
        """While an inline batch waits for its answer, keep the calling thread on the CPU it
        runs on and ask the host's thread to run there too (the CPU returned, -1 for none):
        each message then hands that CPU over instead of waking another, which on a VM costs
        far more (BENCHMARKS.md section 10: a bare ping-pong on one CPU and across two). The
        CPUs returned with it are the thread's own, to give back afterwards."""
        if not self._share_cpu:
            return -1, None
        try:
            allowed = os.sched_getaffinity(0)
            cpu = int(_current_cpu())
            if cpu < 0:  # sched_getcpu's failure
                raise OSError(ctypes.get_errno(), "sched_getcpu failed")
            os.sched_setaffinity(0, (cpu,))
        except OSError as exc:
            logger.info("%r: the hop leaves the CPUs to the scheduler: %s", self, exc)
            self._share_cpu = False
            return -1, None
        return cpu, allowed

    def wait_ready(self) -> None:
        """Wait until the host's session could launch the next batch (`Session.wait_ready`):
        at once after a pipelined submit the host accepted when it was so."""
        if self._ready:
            self._ready = False
            return
        link = self._link
        if link is not None and link.lost is None:
            _reply(link, link.call(WaitReady()), Ready)

    def _stats(self) -> None:
        link = self._link
        if link is None or link.lost is not None:
            return
        try:
            counted, _ = _reply(link, link.call(Stats()), Counted)
        except DeviceHostGone:
            return  # the counts so far stand; the next request reconnects
        self._last = counted.counters
        self._memory = counted.memory

    @property
    def counters(self) -> SessionCounters:
        """The session's counters, across every host it was open in."""
        self._stats()
        self._memory_read = True
        return _add(self._base, self._last)

    def device_memory(self) -> tuple[int, int]:
        """(free, total) bytes of the device, as the host's session reads them: read with the
        `counters` just asked for (the instance's metrics ask for both: one message)."""
        if not self._memory_read:
            self._stats()
        self._memory_read = False
        return self._memory

    def close(self) -> None:
        """Leave the host: it closes the session (idempotent)."""
        with self._lock:
            self._closed = True
            link, self._link = self._link, None
        if link is not None:
            link.close()
        with self._free_lock:
            slots, self._free = self._free, []
        for slot in slots:
            slot.buffer.close()

    def __repr__(self) -> str:
        return f"RemoteSession({self._arguments.om_path!r}, device {self.device_id})"


def _submit_message(slot: _Slot, plan: Layout, pipelined: bool, cpu: int = -1) -> Submit:
    """A `Submit` of the batch in `slot`: naming its layout, or with its places when unnamed."""
    if plan.number:
        return Submit(slot.number, pipelined, layout=plan.number, cpu=cpu)
    return Submit(slot.number, pipelined, feeds=plan.places, cpu=cpu)


def _plain(value: Any) -> Any:
    """A `Session` argument as the host's `open` message carries it: paths as text, a
    dataclass (the image input's settings) as its fields, a sequence (the input shape order) as
    a list."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, tuple):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _add(before: SessionCounters, now: SessionCounters) -> SessionCounters:
    """Cumulative counters of two hosts; what is held now (`device_bytes_held`, the work
    spaces) is the newer one's."""
    summed = {
        field.name: getattr(before, field.name) + getattr(now, field.name)
        for field in dataclasses.fields(SessionCounters)
    }
    for held in ("device_bytes_held", "work_space_bytes", "work_space_streams", "io_area_bytes"):
        summed[held] = getattr(now, held)
    return SessionCounters(**summed)
