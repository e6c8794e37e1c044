"""The device host: one process per NPU that owns the device and serves every stub placed on it.

`serve(device, idle_exit_s)` (`ge-python-model device-host --device N`, or `python -m
ge_python_backend.devicehost --device N` where only the stub's files are installed) holds
`device-host-<N>.lock` for its whole life (a second host of the device exits at once), listens
on `device-host-<N>.sock` (mode 0600) in the user's private run directory, and accepts stubs
whose peer credentials (`SO_PEERCRED`) are this user's. Each connection is one Triton instance:
a thread reads its messages (`protocol`), its `open` loads one runtime `Session` in this process
(the runtime's one data path: every model of the device shares this process's device opening),
its requests are served from buffers this host created for it and no other, and when the stub
goes away (finalize, or its death) the session is closed and its buffers unmapped. A session
that fails to load answers its stub with the error (a `DeviceFullError`'s one line included);
the others keep serving. With `idle_exit_s` > 0 the host stops that long after its last stub
left (the copy path's hosts, started by the first stub that needs one). Its sessions share one
pool of streams and work spaces (`runtime.workspaces`, `--streams N --work-space shared`, the
default) or give each lane its own (`--work-space per-lane`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Hashable
from typing import Any

import numpy as np

from ge_python_backend.allocator import map_large_blocks
from ge_python_backend.devicehost.buffers import (
    Buffer,
    Layout,
    Places,
    buffer_bytes,
    layout,
    signature,
)
from ge_python_backend.devicehost.protocol import (
    ANSWER,
    MAX_LAYOUTS,
    SUBMIT,
    Accepted,
    Answer,
    BatchRecord,
    BufferGiven,
    Counted,
    DeviceHostError,
    Failed,
    FrameReader,
    Free,
    GiveBuffer,
    MalformedMessage,
    Message,
    NameLayout,
    Open,
    Opened,
    Ready,
    SessionArguments,
    Stats,
    Submit,
    WaitReady,
    host_paths,
    peer_credentials,
    send_batch,
    send_message,
)
from ge_python_backend.errors import InputError
from ge_python_backend.runtime import AclError, ModelFileError, PendingBatch, Session
from ge_python_backend.runtime.checksum import file_sha256
from ge_python_backend.runtime.dvpp import ImageInput
from ge_python_backend.runtime.workspaces import (
    DEFAULT_STREAMS,
    MAX_STREAMS,
    SWITCHES,
    WORK_SPACE_MODES,
    WorkSpaces,
    WorkSpaceSettings,
    environment_texts,
)
from ge_python_backend.serving import Completer

__all__ = ["add_arguments", "add_work_space_arguments", "main", "serve", "work_space_settings"]

logger = logging.getLogger(__name__)

_ALLOWED_CPUS = os.sched_getaffinity(0)  # the host's, as started
# How often a thread holding the GIL hands it over to one that waits (Python's default: 5 ms).
# Every model of the device has threads in this process: at 5 ms one model's CPU-bound work (a
# large batch's copies, the emulator's JPEG decodes) delays each step of another model's batch
# by up to 5 ms; at 0.5 ms it waits at most that.
GIL_SWITCH_S = 0.0005
# After accept() fails (EMFILE, ENFILE, ENOBUFS, ...) the host waits this long before the next
# attempt, twice as long after each failure in a row up to the maximum (a full descriptor table
# stays full until connections end: without a wait the loop would spin on the pending one).
FIRST_ACCEPT_BACKOFF_S = 0.05
MAX_ACCEPT_BACKOFF_S = 2.0


class Refused(DeviceHostError):
    """A message this connection may not send (a buffer it was not given, no session yet)."""


class _Connection:
    """One stub: its session, the buffers given to it, its reader and completion threads."""

    def __init__(self, sock: socket.socket, peer_pid: int, work_spaces: WorkSpaces) -> None:
        self.sock = sock
        self.peer_pid = peer_pid
        self.work_spaces = work_spaces
        self.session: Session | None = None
        self.label = "(no model yet)"
        self._send_lock = threading.Lock()
        self._buffers: dict[int, Buffer] = {}
        # The fence: the batch (its message id) each buffer's outputs are due from; a buffer in
        # it takes no other batch, and one the stub frees meanwhile is retired: that batch's
        # outputs are dropped, never written, and the buffer closed after it.
        self._writing: dict[int, Any] = {}
        self._retired: set[int] = set()
        self._buffers_lock = threading.Lock()
        self._buffer_ids = itertools.count(1)
        self._completions: Completer[tuple[int, int, PendingBatch, _Outputs]] = Completer(
            f"ge-host-completions-{peer_pid}", lambda item: self._complete(*item)
        )
        self._feeds_layouts: dict[int, Places] = {}  # named by the stub
        # the outputs' layouts this host named, by signature (under _send_lock: a layout is
        # named on the wire before a record uses it)
        self._answer_layouts: dict[Any, Layout] = {}
        # the CPU the stub's last inline batch waits on (-1: none; None: not one this host has)
        self._cpu: int | None = -1

    def run(self) -> None:
        reader = FrameReader(self.sock, descriptors=False)  # a stub hands over nothing
        try:
            while True:
                try:
                    item = reader.read()
                except MalformedMessage as exc:  # answered (its frame is read): the next one
                    self._send_error(exc.id, Refused(str(exc)))
                    continue
                if item is None:
                    break
                self._work_anywhere()
                self._handle(item[0])
                self._wait_beside_the_stub()
        except (OSError, ValueError, DeviceHostError) as exc:
            logger.warning("stub pid %d (%s): connection ended: %s", self.peer_pid, self.label, exc)
        finally:
            self.close()

    def _send(self, message: Message, fds: tuple[int, ...] = ()) -> None:
        with self._send_lock:
            try:
                send_message(self.sock, message, fds)
            except OSError as exc:  # the stub went away; its reader thread will see it
                logger.info("stub pid %d (%s): cannot answer: %s", self.peer_pid, self.label, exc)

    def _handle(self, message: Message | BatchRecord) -> None:
        if isinstance(message, BatchRecord):  # the one on every inline batch
            self._handle_record(message)
            return
        ident = getattr(message, "id", None)  # a message without replies has none
        try:
            if type(message) is Submit and self.session is not None:
                self._submit(
                    ident,
                    message.buffer,
                    message.feeds,
                    message.layout,
                    bool(message.pipelined),
                    message.cpu,
                )
            elif type(message) is NameLayout and self.session is not None:
                self._name_layout(message.layout, message.feeds)
            elif type(message) is Open:
                self._open(message.id, message.session)
            elif self.session is None:
                raise Refused(f"{message.OP!r} before a session was opened on this connection")
            elif type(message) is GiveBuffer:
                self._give_buffer(message.id, int(message.bytes))
            elif type(message) is WaitReady:
                self.session.wait_ready()
                self._send(Ready(message.id))
            elif type(message) is Stats:
                memory = self.session.device_memory()
                self._send(Counted(message.id, self.session.counters, memory))
            elif type(message) is Free:
                self._free(message.buffer)
            else:
                raise Refused(f"a {message.OP!r} message from a stub (the host sends those)")
        except Exception as exc:  # answered to the stub, which fails that request with it
            self._send_error(ident, exc)

    def _handle_record(self, record: BatchRecord) -> None:
        try:
            if record.kind != SUBMIT:
                raise Refused(f"a {record.kind!r} record from a stub (it sends {SUBMIT!r} ones)")
            if self.session is None:
                raise Refused("a batch before a session was opened on this connection")
            self._submit(record.id, record.buffer, None, record.layout, False, record.cpu)
        except Exception as exc:
            self._send_error(record.id, exc)

    def _send_error(self, ident: Any, exc: BaseException) -> None:
        error = Failed(ident, "other", str(exc))
        if isinstance(exc, InputError):
            error.kind, error.request = "input", exc.request
        elif isinstance(exc, AclError):
            error.kind, error.code, error.api = "acl", exc.code, exc.api
        elif isinstance(exc, ModelFileError):
            error.kind = "model"
        elif not isinstance(exc, (Refused, ValueError, KeyError, TypeError)):
            logger.exception("stub pid %d (%s): serving a request", self.peer_pid, self.label)
        if isinstance(exc, Refused):
            logger.warning("stub pid %d (%s): refused: %s", self.peer_pid, self.label, exc)
        elif ident is None:  # a message without a reply (layout, free): only the log says it
            logger.warning("stub pid %d (%s): %s", self.peer_pid, self.label, exc)
        if ident is not None:
            self._send(error)

    def _open(self, ident: int, arguments: SessionArguments) -> None:
        if self.session is not None:
            raise Refused("this connection already holds a session")
        given = arguments.given()  # Session's arguments (a test holds them equal)
        self.label = str(arguments.label or arguments.om_path)
        image = arguments.image
        if image is not None:  # the image input's settings, as fields
            given["image"] = ImageInput(**{**image, "fill": tuple(image["fill"])})
        try:
            # the digest of what this instance serves: a host that opens it again (after this
            # one stopped) refuses a changed file (Session verifies a digest it is given)
            digest = arguments.sha256 or file_sha256(str(arguments.om_path))
            session = Session(**given, work_spaces=self.work_spaces)
        except Exception as exc:
            logger.error("stub pid %d: %s does not load: %s", self.peer_pid, self.label, exc)
            if isinstance(exc, OSError):  # the .om went away
                raise ModelFileError(f"cannot read {arguments.om_path}: {exc}") from exc
            raise
        self.session = session
        logger.info(
            "stub pid %d: %s loaded (%s, %d lane(s)%s)",
            self.peer_pid,
            self.label,
            session.path.name,
            session.pipeline_depth,
            ", in the shared work spaces" if session.pooled else "",
        )
        self._send(
            Opened(
                ident,
                session.inputs,
                session.outputs,
                session.gears,
                session.runtime,
                os.getpid(),
                digest,
            )
        )

    def _free(self, number: Any) -> None:
        """The stub is done with a buffer: closed now, or, while a batch's outputs are due in
        it (the stub gave that batch up), retired until that batch is over."""
        with self._buffers_lock:
            number = self._buffer_id(number)
            if number in self._writing:
                self._retired.add(number)
                return
            buffer = self._buffers.pop(number)
        buffer.close()

    def _buffer_id(self, value: Any) -> int:
        if not isinstance(value, int) or value not in self._buffers:
            raise Refused(f"buffer {value!r} was not given to this connection")
        return value

    def _new_buffer(self, nbytes: int) -> tuple[int, Buffer]:
        buffer = Buffer.create(nbytes, f"ge-device-host-{self.peer_pid}")
        with self._buffers_lock:
            ident = next(self._buffer_ids)
            self._buffers[ident] = buffer
        return ident, buffer

    def _give_buffer(self, ident: Any, nbytes: int) -> None:
        if not 0 < nbytes <= 1 << 40:
            raise Refused(f"a buffer of {nbytes} bytes")
        number, buffer = self._new_buffer(nbytes)
        self._send(BufferGiven(ident, number, buffer.nbytes), (buffer.fd,))

    def _name_layout(self, number: Any, places: Any) -> None:
        """The stub names the places of its batches of one shape (checked where first used)."""
        if type(number) is not int or not 0 < number <= MAX_LAYOUTS:
            raise Refused(f"layout {number!r}: layouts are numbered 1..{MAX_LAYOUTS}")
        if number in self._feeds_layouts:
            raise Refused(f"layout {number} is already named on this connection")
        if not isinstance(places, list) or not all(isinstance(here, dict) for here in places):
            raise Refused("a layout is a list of each request's places")
        self._feeds_layouts[number] = places

    def _submit(
        self, ident: Any, buffer_number: Any, places: Any, named: Any, pipelined: bool, cpu: Any
    ) -> None:
        """Submit the batch in buffer `buffer_number` at `places` (or at the layout `named`)."""
        assert self.session is not None
        with self._buffers_lock:
            number = self._buffer_id(buffer_number)
            if number in self._retired or number in self._writing:
                raise Refused(
                    f"buffer {number} still waits for the outputs of batch "
                    f"{self._writing.get(number)!r}: a buffer takes one batch at a time"
                )
            buffer = self._buffers[number]
            self._writing[number] = ident
        try:
            self._launch(ident, number, buffer, places, named, pipelined, cpu)
        except BaseException:  # refused before any work: nothing is due in the buffer
            with self._buffers_lock:
                self._writing.pop(number, None)
            raise

    def _launch(
        self,
        ident: Any,
        number: int,
        buffer: Buffer,
        places: Any,
        named: Any,
        pipelined: bool,
        cpu: Any,
    ) -> None:
        """Submit the batch in `buffer` (`_submit` fenced it) and answer it, or hand it to the
        completer (pipelined)."""
        assert self.session is not None
        if named is None:
            if not isinstance(places, list):
                raise Refused("a submit names its feeds' places or a layout")
            feeds_list = buffer.tensors(places)
        elif named in self._feeds_layouts:
            feeds_list = buffer.tensors(self._feeds_layouts[named], ("feeds", named))
        else:
            raise Refused(f"layout {named!r} was not named on this connection")
        if self._cpu is not None:  # an inline batch's stub waits on this CPU (-1: none)
            self._cpu = cpu if type(cpu) is int and 0 <= cpu < 1 << 16 else -1
        outputs = _Outputs(self, number, buffer)
        pending = self.session.submit(feeds_list, pipelined=pipelined, take_outputs=outputs)
        if not pipelined:
            self._complete(ident, number, pending, outputs)
            return
        # accepted once the session could launch the next batch (the batches before this one
        # are with the completer), so the stub's `wait_ready`, which follows every pipelined
        # submit, needs no message of its own (a failure there is its own to report)
        try:
            self.session.wait_ready()
            ready = True
        except Exception:
            logger.debug("stub pid %d: wait_ready after a submit", self.peer_pid, exc_info=True)
            ready = False
        self._send(Accepted(ident, ready))  # before this batch's answer
        self._completions.put((ident, number, pending, outputs))

    def _wait_beside_the_stub(self) -> None:
        """Before reading the next message, keep this connection's thread on the CPU the stub
        waits on (`client.RemoteSession._keep_this_cpu`), so that its next batch hands that
        CPU over instead of waking another; a CPU this host may not run on leaves the thread to
        the scheduler from then on (said once)."""
        cpu = self._cpu
        if cpu is None or cpu < 0:
            return
        try:
            os.sched_setaffinity(0, (cpu,))
        except OSError as exc:
            logger.info(
                "stub pid %d (%s): its batches' CPU %d is not one this host runs on (%s); the "
                "scheduler places this connection's thread",
                self.peer_pid,
                self.label,
                cpu,
                exc,
            )
            self._cpu = None

    def _work_anywhere(self) -> None:
        """Handle a message on any of the host's CPUs (threads started meanwhile, ACL's own
        among them, inherit them): only the wait for the next one stays beside the stub."""
        if self._cpu is not None and self._cpu >= 0:
            os.sched_setaffinity(0, _ALLOWED_CPUS)

    def _complete(self, ident: Any, number: int, pending: PendingBatch, outputs: _Outputs) -> None:
        """Answer a batch once its session wrote its outputs (`_Outputs`): an `ANSWER` record
        when their layout has a number the stub knows, the places otherwise (numbered for the
        next batches when they can be), with the bigger buffer they needed."""
        try:
            pending.result()
        except Exception as exc:
            self._done_writing(number)
            outputs.discard()
            self._send_error(ident, exc)
            return
        if not self._done_writing(number):
            outputs.discard()
            logger.warning(
                "stub pid %d (%s): batch %r finished after the stub gave it up; its outputs "
                "are dropped, buffer %d is freed",
                self.peer_pid,
                self.label,
                ident,
                number,
            )
            return
        assert outputs.places is not None  # put by the batch that succeeded
        try:
            with self._send_lock:
                named = outputs.named
                if named is not None and outputs.given is None:
                    send_batch(self.sock, ANSWER, ident, number, named.number)
                    return
                if outputs.key is not None:
                    named = self._answer_layouts.get(outputs.key)  # by a batch meanwhile
                    if named is None and len(self._answer_layouts) < MAX_LAYOUTS:
                        named = Layout(
                            len(self._answer_layouts) + 1, outputs.places, outputs.nbytes
                        )
                        self._answer_layouts[outputs.key] = named
                given = outputs.given
                answer = Answer(
                    ident,
                    outputs.places,
                    outputs.number,
                    None if named is None else named.number,
                    None if given is None else given.nbytes,
                )
                send_message(self.sock, answer, () if given is None else (given.fd,))
        except OSError as exc:  # the stub went away; its reader thread will see it
            logger.info("stub pid %d (%s): cannot answer: %s", self.peer_pid, self.label, exc)
        except Exception as exc:
            self._send_error(ident, exc)

    def _given_up(self, number: int) -> bool:
        """Whether the stub freed buffer `number` while a batch's outputs were due in it."""
        with self._buffers_lock:
            return number in self._retired

    def _drop_buffer(self, number: int) -> None:
        """Close a buffer this host made that the stub never got."""
        with self._buffers_lock:
            buffer = self._buffers.pop(number)
        buffer.close()

    def _done_writing(self, number: int) -> bool:
        """The batch due in buffer `number` is over: whether the stub still waits for it (False:
        the stub retired the buffer meanwhile, closed here)."""
        with self._buffers_lock:
            self._writing.pop(number, None)
            if number not in self._retired:
                return True
            self._retired.discard(number)
            buffer = self._buffers.pop(number)
        buffer.close()
        return False

    def close(self) -> None:
        """The stub left: answer what is in flight, close the session, free the buffers."""
        self._completions.close()
        if self.session is not None:
            self.session.close()
            logger.info("stub pid %d left: %s closed", self.peer_pid, self.label)
        with self._buffers_lock:
            buffers, self._buffers = list(self._buffers.values()), {}
        for buffer in buffers:
            buffer.close()
        self.sock.close()


class _Outputs:
    """Where the host's session puts one batch's outputs (`Session.submit`'s `take_outputs`):
    copied once, straight out of the lane's pinned buffers, into the batch's buffer, at the
    places of their layout (named on this connection, or new), or into a bigger buffer made for
    them when they do not fit (sized by the stub's rule, as the budget counts it); nothing
    when the stub gave the batch up (its buffer is retired: never written). Called in the
    thread that finishes the batch's last execution; `_complete` answers with what it wrote."""

    def __init__(self, connection: _Connection, number: int, buffer: Buffer) -> None:
        self._connection = connection
        self.number = number  # the buffer holding them
        self.buffer = buffer
        self.given: Buffer | None = None  # a bigger one made for them
        self.places: Places | None = None  # None: not written
        self.nbytes = 0
        self.key: Hashable | None = None
        self.named: Layout | None = None  # their layout, named on the wire when they were put

    def __call__(self, arrays: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        connection = self._connection
        if connection._given_up(self.number):
            return [{} for _ in arrays]
        key = signature(arrays)
        named = connection._answer_layouts.get(key) if key is not None else None
        if named is None:
            places, nbytes = layout(arrays)
        else:
            places, nbytes = named.places, named.nbytes
        if nbytes > self.buffer.nbytes:
            self.number, self.given = connection._new_buffer(buffer_bytes(nbytes))
            self.buffer = self.given
        views = self.buffer.put(
            places, arrays, None if named is None else ("outputs", named.number)
        )
        self.key, self.places, self.nbytes, self.named = key, places, nbytes, named
        return views

    def discard(self) -> None:
        """The batch is not answered with them: a buffer made for them is closed."""
        if self.given is not None:
            self._connection._drop_buffer(self.number)
            self.given = None


def _admit(sock: socket.socket, work_spaces: WorkSpaces) -> _Connection | None:
    """The connection of a stub of this user on `sock`; None (closed) for another user's."""
    pid, uid = peer_credentials(sock)
    if uid != os.getuid():
        logger.warning("refused a connection from pid %d of uid %d (not ours)", pid, uid)
        sock.close()
        return None
    sock.settimeout(None)
    return _Connection(sock, pid, work_spaces)


def _listen(path: str) -> socket.socket:
    """A listening socket at `path` (mode 0600; a dead host's is replaced: the caller holds the
    lock). The path appears only once the socket listens (bound under a name of its own, then
    renamed over it): a stub that connects as soon as it sees the path is never refused."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bound = f"{path}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(bound)
    listener.bind(bound)
    os.chmod(bound, 0o600)
    listener.listen(128)
    os.rename(bound, path)
    return listener


def serve(device: int, idle_exit_s: float = 0.0, settings: WorkSpaceSettings | None = None) -> int:
    """Run the device host of `device` until SIGTERM/SIGINT (or, with `idle_exit_s` > 0, that
    long after the last stub left), its work spaces as `settings` say (default: the
    environment's); 0 also when another host of the device already runs."""
    work_spaces = WorkSpaces(settings or WorkSpaceSettings.from_environment())
    paths = host_paths(device)
    lock = os.open(paths.host_lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        logger.info(
            "a device host of device %d already runs (%s is locked)", device, paths.host_lock
        )
        os.close(lock)
        return 0
    sys.setswitchinterval(GIL_SWITCH_S)
    map_large_blocks()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    listener = _listen(paths.socket)
    listener.settimeout(0.2)
    logger.info(
        "device host of device %d listening on %s (pid %d, %s%s)",
        device,
        paths.socket,
        os.getpid(),
        work_spaces.settings.text(),
        f", stops {idle_exit_s:g} s after its last stub left" if idle_exit_s > 0 else "",
    )
    connections: set[_Connection] = set()
    changed = threading.Lock()
    idle_since = time.monotonic()

    def run(connection: _Connection) -> None:
        nonlocal idle_since
        try:
            connection.run()
        finally:
            with changed:
                connections.discard(connection)
                idle_since = time.monotonic()

    backoff = 0.0
    try:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except socket.timeout:
                with changed:
                    idle = not connections and time.monotonic() - idle_since >= idle_exit_s
                if idle_exit_s > 0 and idle:
                    logger.info(
                        "no stub for %g s: the device host of device %d stops", idle_exit_s, device
                    )
                    break
                continue
            except OSError as exc:  # the stubs connected keep being served meanwhile
                backoff = min(MAX_ACCEPT_BACKOFF_S, backoff * 2 or FIRST_ACCEPT_BACKOFF_S)
                logger.error(
                    "cannot accept a connection: %s (%d stub(s) connected); retrying in %g s",
                    exc,
                    len(connections),
                    backoff,
                )
                stop.wait(backoff)
                continue
            backoff = 0.0
            admitted = None
            try:
                admitted = _admit(sock, work_spaces)
                if admitted is None:
                    continue
                with changed:
                    connections.add(admitted)
                threading.Thread(
                    target=run,
                    args=(admitted,),
                    name=f"ge-host-stub-{admitted.peer_pid}",
                    daemon=True,
                ).start()
            except (OSError, RuntimeError) as exc:  # e.g. no thread can start: refused alone
                logger.error("cannot serve a new connection: %s; closed", exc)
                if admitted is not None:
                    with changed:
                        connections.discard(admitted)
                sock.close()
    finally:
        os.unlink(paths.socket)
        listener.close()
        with changed:
            remaining = list(connections)
        for connection in remaining:  # their threads close their sessions
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                logger.debug("stub pid %d already gone", connection.peer_pid)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with changed:
                if not connections:
                    break
            time.sleep(0.05)
        os.close(lock)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The device host's options (`ge-python-model device-host`, `python -m
    ge_python_backend.devicehost`)."""
    parser.add_argument("--device", type=int, default=0, help="NPU id (default 0)")
    parser.add_argument(
        "--idle-exit",
        type=float,
        default=0.0,
        metavar="S",
        help="stop S seconds after the last model left (default 0: never)",
    )
    add_work_space_arguments(parser)


def add_work_space_arguments(parser: argparse.ArgumentParser, prefix: str = "") -> None:
    """The options of a host's work spaces: the device host's, and `serve`'s for the hosts it
    starts (`prefix` "device-host-"). Their defaults are the environment's
    (`GE_DEVICE_HOST_STREAMS`, ...), which a host started by a stub reads;
    `work_space_settings` checks them."""
    streams, mode, zero = environment_texts()
    parser.add_argument(
        f"--{prefix}streams",
        default=streams,
        metavar="N",
        help=f"streams of the device host's pool, 1..{MAX_STREAMS}: each has one work space and "
        "one I/O area the models placed on it share (default "
        f"{DEFAULT_STREAMS}, or $GE_DEVICE_HOST_STREAMS)",
    )
    parser.add_argument(
        f"--{prefix}work-space",
        default=mode,
        metavar="|".join(WORK_SPACE_MODES),
        help="shared: one work space and one I/O area per stream of the device host, as large "
        "as the largest model's, shared by the models of the stream; per-lane: a work space "
        "and buffers for each lane of each model (default shared, or "
        "$GE_DEVICE_HOST_WORK_SPACE)",
    )
    parser.add_argument(
        f"--{prefix}zero-work-space",
        default=zero,
        metavar="|".join(SWITCHES),
        help="on: zero a shared work space before an execution of another model than the "
        "stream's last one (default off, or $GE_DEVICE_HOST_ZERO_WORK_SPACE)",
    )


def work_space_settings(args: argparse.Namespace, prefix: str = "") -> WorkSpaceSettings:
    """The settings `add_work_space_arguments`' options give; ValueError saying what is wrong."""
    names = [f"{prefix}{name}" for name in ("streams", "work-space", "zero-work-space")]
    streams, mode, zero = (getattr(args, name.replace("-", "_")) for name in names)
    given = ", ".join(f"--{name}" for name in names)
    return WorkSpaceSettings.parse(streams, mode, zero, f"{given} or $GE_DEVICE_HOST_STREAMS, ...")


def main(args: argparse.Namespace) -> int:
    """Log to stderr and serve the device `args` name until told to stop."""
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s device-host[{args.device}] %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = work_space_settings(args)
    except ValueError as exc:
        logger.error("%s", exc)
        return 2
    return serve(args.device, args.idle_exit, settings)
