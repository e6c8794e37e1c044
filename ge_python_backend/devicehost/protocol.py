"""The device host's wire: length-prefixed frames (JSON messages, a binary record for each
batch) over a Unix stream socket, file descriptors (the shared-memory buffers) passed with
`SCM_RIGHTS`, and one codec each way: every message is a dataclass below, `send_message`
encodes it, `FrameReader.read` decodes it (the receiver gets the dataclass, or a `BatchRecord`).

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON (an object whose `op`
names the message), or, for the two messages of every batch, a fixed binary record
(`BatchRecord`: kind, id, buffer, layout, cpu; its first byte is not JSON's "{"): the fast
encoding of a batch whose layout has a number. A message that hands over descriptors says how
many in its `"fds"` field; they travel in the ancillary data of the frame's first bytes, so a
reader that keeps them in arrival order gives each message its own. Standard library, numpy and
the ground floor only: the stub imports it.

Messages (stub -> host; each one with replies has an `id` they repeat):
  Open (session: `SessionArguments`)            -> Opened (specs, gears, runtime, pid, sha256)
        (sha256: the `.om`'s, which the stub passes when it opens the session again in another
        host)
  GiveBuffer (bytes)                            -> BufferGiven (buffer, bytes; fds: 1)
  NameLayout (layout, feeds)                    (no reply) `buffers.layout`'s places, named
        by a number of the stub's for the batches of that shape (up to MAX_LAYOUTS)
  Submit (buffer, pipelined, layout | feeds, cpu)
        -> pipelined: Accepted (ready) once the session could take the next batch (ready: its
           wait_ready passed), then the answer
        -> inline: the answer only
  SUBMIT record (buffer, layout, cpu)           an inline submit of a named layout (cpu: where
        the stub waits for it, -1 for anywhere)
  answer: Answer (outputs, buffer, layout?, bytes? with fds: 1 for a bigger buffer), naming
        the outputs' places by a number of the host's (`layout`) the first time a shape is seen;
        then an ANSWER record (buffer, layout)
  WaitReady                                     -> Ready   (only after a submit not `ready`)
  Stats                                         -> Counted (counters, memory)
  Free (buffer)                                 (no reply)
A failure is `Failed` (kind input|acl|model|other, message, request?, code?, api?; of a message
without a reply, a line in the host's log), raised in the stub as the session in its own process
raises it (`Failed.exception`, `serving`): `input` an `InputError`, `acl` an `AclError`,
`model` (the `.om` cannot be served: gone, changed, refused by the runtime) `ModelUnavailable`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
from collections import deque
from typing import Any, ClassVar, NamedTuple, Union

import numpy as np

from ge_python_backend.ascend import GearKind
from ge_python_backend.devicehost.buffers import Places
from ge_python_backend.errors import AclError, GeBackendError, InputError, ModelUnavailable
from ge_python_backend.modelinfo import GearInfo, SessionCounters, TensorSpec
from ge_python_backend.processes import RUN_DIR_ENV, NotPrivateError, run_directory

__all__ = [
    "ANSWER",
    "MAX_LAYOUTS",
    "SUBMIT",
    "Accepted",
    "Answer",
    "BatchRecord",
    "BufferGiven",
    "Counted",
    "DeviceHostError",
    "DeviceHostGone",
    "Failed",
    "FrameReader",
    "Free",
    "GiveBuffer",
    "MalformedMessage",
    "Message",
    "NameLayout",
    "Open",
    "Opened",
    "RELOAD_NEEDED",
    "Ready",
    "Request",
    "SessionArguments",
    "Stats",
    "Submit",
    "WaitReady",
    "host_paths",
    "peer_credentials",
    "send_batch",
    "send_message",
]

_LENGTH = struct.Struct(">I")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
MAX_FRAME = 64 << 20  # control messages only: tensors go through shared memory
MAX_FDS = 4
MAX_LAYOUTS = 256  # the layouts each side names on one connection; more go as places
SUBMIT = b"S"
ANSWER = b"A"
_BATCH_FRAME = struct.Struct(">IcIIIi")  # the frame's length, then the record
_BATCH = struct.Struct(">cIIIi")  # kind, id, buffer, layout, cpu
_BATCH_KINDS = frozenset(SUBMIT + ANSWER)  # their first bytes
_encode = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: dumps makes one a call
_decode = json.JSONDecoder().decode


class DeviceHostError(GeBackendError):
    """The device host could not be reached, started or understood."""


class DeviceHostGone(DeviceHostError):
    """The device host went away with this request in flight (it died or was stopped)."""


# What an instance's every failure says once its model cannot be opened again (the watcher
# reloads a model whose probe says it: the load then fails with the reason, the model
# UNAVAILABLE).
RELOAD_NEEDED = "serves nothing until the model is reloaded"


@dataclasses.dataclass(frozen=True)
class HostPaths:
    """The files of device `device`'s host in the user's run directory."""

    socket: str
    start_lock: str  # held by the stub that starts a host
    host_lock: str  # held by the running host, its whole life
    log: str


def peer_credentials(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket (for a connection a stub
    made, the host that listens)."""
    pid, uid, _gid = _PEERCRED.unpack(
        sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    )
    return pid, uid


def host_paths(device: int) -> HostPaths:
    """The socket, locks and log of device `device`'s host (the run directory, checked private:
    `DeviceHostError` when another user may enter it)."""
    try:
        directory = run_directory()
    except NotPrivateError as error:
        raise DeviceHostError(
            f"the device host's socket needs a private run directory: {error} (or set "
            f"{RUN_DIR_ENV} to a private directory)"
        ) from None
    base = os.path.join(directory, f"device-host-{device}")
    return HostPaths(f"{base}.sock", f"{base}.start.lock", f"{base}.lock", f"{base}.log")


class BatchRecord(NamedTuple):
    """A `SUBMIT` (stub -> host) or `ANSWER` (host -> stub) record: a batch whose places the
    layout `layout` names (`cpu`: where the stub waits for its answer, -1 for anywhere)."""

    kind: bytes
    id: int
    buffer: int
    layout: int
    cpu: int


class Message:
    """A JSON message: a dataclass whose `OP` names it on the wire, its fields the object's."""

    OP: ClassVar[str]

    def to_json(self) -> dict[str, Any]:
        return {"op": self.OP, **self.__dict__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        return cls(**data)


class Request(Message):
    """A message with replies: `_Link.call` gives it its `id`."""

    id: int


@dataclasses.dataclass
class SessionArguments:
    """`Session`'s arguments as `Open` carries them, None for the session's default: paths as
    text, the image input's settings as their fields."""

    om_path: str
    device_id: int = 0
    runtime: str | None = None
    sha256: str | None = None
    pipeline_depth: int | None = None
    execute_timeout_ms: int | None = None
    input_shape_order: list[str] | None = None
    aipp_config: str | None = None
    max_output_bytes: int | None = None
    device_timing_period: int | None = None
    label: str | None = None
    image: dict[str, Any] | None = None

    def given(self) -> dict[str, Any]:
        """The arguments given: the others keep `Session`'s defaults."""
        return {name: value for name, value in self.__dict__.items() if value is not None}


@dataclasses.dataclass
class Open(Request):
    OP = "open"
    session: SessionArguments
    id: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"op": self.OP, "id": self.id, "session": self.session.__dict__}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Open:
        return cls(SessionArguments(**data["session"]), int(data["id"]))


@dataclasses.dataclass
class GiveBuffer(Request):
    OP = "buffer"
    bytes: int
    id: int = 0


@dataclasses.dataclass
class NameLayout(Message):
    OP = "layout"
    layout: int
    feeds: Places


@dataclasses.dataclass
class Submit(Request):
    """A batch in buffer `buffer`, at the places its layout `layout` names, or at `feeds`."""

    OP = "submit"
    buffer: int
    pipelined: bool
    layout: int | None = None
    feeds: Places | None = None
    cpu: int = -1
    id: int = 0


@dataclasses.dataclass
class WaitReady(Request):
    OP = "wait_ready"
    id: int = 0


@dataclasses.dataclass
class Stats(Request):
    OP = "stats"
    id: int = 0


@dataclasses.dataclass
class Free(Message):
    OP = "free"
    buffer: int


@dataclasses.dataclass
class Opened(Message):
    OP = "opened"
    id: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    gears: GearInfo
    runtime: str
    pid: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {
            **super().to_json(),
            "inputs": _specs_to_json(self.inputs),
            "outputs": _specs_to_json(self.outputs),
            "gears": _gears_to_json(self.gears),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Opened:
        return cls(
            id=int(data["id"]),
            inputs=_specs_from_json(data["inputs"]),
            outputs=_specs_from_json(data["outputs"]),
            gears=_gears_from_json(data["gears"]),
            runtime=str(data["runtime"]),
            pid=int(data["pid"]),
            sha256=str(data["sha256"]),
        )


@dataclasses.dataclass
class BufferGiven(Message):
    OP = "given"
    id: int
    buffer: int
    bytes: int


@dataclasses.dataclass
class Accepted(Message):
    """A pipelined submit's first reply; `ready`: the session could launch the next batch."""

    OP = "accepted"
    id: int
    ready: bool


@dataclasses.dataclass
class Answer(Message):
    """A batch's outputs at `outputs` in buffer `buffer`: a bigger one given with it (`bytes`,
    one descriptor) when they did not fit the batch's; `layout` numbers those places."""

    OP = "answer"
    id: int
    outputs: Places
    buffer: int
    layout: int | None = None
    bytes: int | None = None


@dataclasses.dataclass
class Ready(Message):
    OP = "ready"
    id: int


@dataclasses.dataclass
class Counted(Message):
    OP = "counted"
    id: int
    counters: SessionCounters
    memory: tuple[int, int]  # (free, total) bytes of the device

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "counters": dataclasses.asdict(self.counters)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Counted:
        names = {field.name for field in dataclasses.fields(SessionCounters)}
        counters = SessionCounters(**{k: v for k, v in data["counters"].items() if k in names})
        free, total = data["memory"]
        return cls(int(data["id"]), counters, (int(free), int(total)))


@dataclasses.dataclass
class Failed(Message):
    """What failed a message: `kind` input|acl|model|other, with the request (`input`), the
    code and API (`acl`)."""

    OP = "failed"
    id: int
    kind: str
    message: str
    request: int | None = None
    code: int = 0
    api: str = ""

    def exception(self) -> Exception:
        """The error as the session in the stub's own process raises it: InputError (with
        `request`), AclError, ModelUnavailable; DeviceHostError for anything else."""
        if self.kind == "input":
            error = InputError(self.message)
            error.request = self.request
            return error
        if self.kind == "acl":
            return AclError.reported(self.code, self.api, self.message)
        if self.kind == "model":
            return ModelUnavailable(self.message)
        return DeviceHostError(f"the device host failed: {self.message}")


class MalformedMessage(DeviceHostError):
    """A frame that is no message of this protocol; `id`: the one it says, when it says one."""

    def __init__(self, text: str, ident: int | None) -> None:
        super().__init__(text)
        self.id = ident


_MESSAGES: dict[str, type[Message]] = {
    kind.OP: kind
    for kind in (Open, GiveBuffer, NameLayout, Submit, WaitReady, Stats, Free)
    + (Opened, BufferGiven, Accepted, Answer, Ready, Counted, Failed)
}
# What `FrameReader.read` returns: a message or a batch record, and the descriptors it carried.
Received = tuple[Union[Message, BatchRecord], list[int]]


def _decode_message(data: Any) -> Message:
    """The message a JSON object holds (MalformedMessage when it holds none)."""
    if not isinstance(data, dict):
        raise MalformedMessage("a message that is not a JSON object", None)
    ident = data.get("id") if type(data.get("id")) is int else None
    op = data.pop("op", None)
    kind = _MESSAGES.get(op)
    if kind is None:
        raise MalformedMessage(f"unknown message {op!r}", ident)
    try:
        return kind.from_json(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedMessage(f"a {kind.OP!r} message that does not parse: {exc}", ident) from exc


def send_message(sock: socket.socket, message: Message, fds: tuple[int, ...] = ()) -> None:
    """Send one message (the caller serializes senders); `fds` travel with it (its `"fds"`
    field says how many)."""
    data = message.to_json()
    if fds:
        data["fds"] = len(fds)
    body = _encode(data).encode()
    frame = _LENGTH.pack(len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [frame], list(fds))
        frame = frame[sent:]
    if frame:
        sock.sendall(frame)


def send_batch(
    sock: socket.socket, kind: bytes, ident: int, buffer: int, layout: int, cpu: int = -1
) -> None:
    """Send one `SUBMIT` or `ANSWER` record (the caller serializes senders)."""
    sock.sendall(_BATCH_FRAME.pack(_BATCH.size, kind, ident, buffer, layout, cpu))


_record = BatchRecord._make


class FrameReader:
    """Reads frames from one socket, one reader at a time; with `descriptors`, the descriptors
    they carry too (without, the kernel drops any a peer passes: the host takes none)."""

    def __init__(self, sock: socket.socket, descriptors: bool = True) -> None:
        self._sock = sock
        self._descriptors = descriptors
        self._data = bytearray()
        self._fds: deque[int] = deque()

    def read(self) -> Received | None:
        """The next message (decoded) or batch record and its descriptors; None at the end of
        the stream. A message that does not parse raises MalformedMessage (its frame read)."""
        data = self._data
        while True:
            if len(data) >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(data)
                if length > MAX_FRAME:
                    raise DeviceHostError(f"a frame of {length} bytes is over {MAX_FRAME}")
                end = _LENGTH.size + length
                if len(data) >= end:
                    if length == _BATCH.size and data[_LENGTH.size] in _BATCH_KINDS:
                        record = _record(_BATCH.unpack_from(data, _LENGTH.size))
                        del data[:end]
                        return record, []
                    decoded = _decode(data[_LENGTH.size : end].decode())
                    del data[:end]
                    count = decoded.pop("fds", 0) if isinstance(decoded, dict) else 0
                    if count > len(self._fds):
                        raise DeviceHostError("a message announces descriptors it did not bring")
                    fds = [self._fds.popleft() for _ in range(count)]
                    try:
                        return _decode_message(decoded), fds
                    except MalformedMessage:
                        for fd in fds:
                            os.close(fd)
                        raise
            if self._descriptors:
                chunk, fds, _flags, _address = socket.recv_fds(self._sock, 1 << 16, MAX_FDS)
                self._fds.extend(fds)
            else:
                chunk = self._sock.recv(1 << 16)
            if not chunk:
                for fd in self._fds:
                    os.close(fd)
                self._fds.clear()
                return None
            data += chunk


def _specs_to_json(specs: tuple[TensorSpec, ...]) -> list[list[Any]]:
    return [[s.name, s.dtype.str, s.triton_dtype, list(s.shape), s.format] for s in specs]


def _specs_from_json(items: list[list[Any]]) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(name, np.dtype(dtype), triton, tuple(shape), fmt)
        for name, dtype, triton, shape, fmt in items
    )


def _gears_to_json(gears: GearInfo) -> dict[str, Any]:
    return {
        "kind": gears.kind.value,
        "batched": gears.batched,
        "batch_gears": list(gears.batch_gears),
        "hw_gears": [list(hw) for hw in gears.hw_gears],
        "dims_gears": [[list(shape) for shape in gear] for gear in gears.dims_gears],
        "max_batch": gears.max_batch,
        "side_inputs": list(gears.side_inputs),
    }


def _gears_from_json(data: dict[str, Any]) -> GearInfo:
    return GearInfo(
        kind=GearKind(data["kind"]),
        batched=bool(data["batched"]),
        batch_gears=tuple(data["batch_gears"]),
        hw_gears=tuple((int(h), int(w)) for h, w in data["hw_gears"]),
        dims_gears=tuple(tuple(tuple(shape) for shape in gear) for gear in data["dims_gears"]),
        max_batch=int(data["max_batch"]),
        side_inputs=tuple(data["side_inputs"]),
    )
