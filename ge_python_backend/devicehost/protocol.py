"""The device host's wire: length-prefixed frames (JSON messages, a binary record for each
batch) over a Unix stream socket, file descriptors (the shared-memory buffers) passed with
`SCM_RIGHTS`, and the JSON forms of the specs, gears and counters they carry.

A frame is a 4-byte big-endian length and that many bytes of UTF-8 JSON (an object), or, for
the two messages of every batch, a fixed binary record (`BatchFrame`: kind, id, buffer, layout,
cpu; its first byte is not JSON's "{"). A message that hands over descriptors says how many in
its `"fds"` field; they travel in the ancillary data of the frame's first bytes, so a reader
that keeps them in arrival order gives each message its own. Standard library, numpy and the
ground floor only: the stub imports it.

Messages (stub -> host; each one with replies has an `id` they repeat):
  open {session: Session's keyword arguments}   -> {inputs, outputs, gears, runtime, pid, sha256}
        (paths as text, the image input's settings as their fields; sha256: the `.om`'s, which
        the stub passes when it opens the session again in another host)
  buffer {bytes}                                -> {buffer, bytes, fds: 1}
  layout {layout, feeds: [{name: place}]}       (no reply) `buffers.layout`'s places, named
        by a number of the stub's for the batches of that shape (up to MAX_LAYOUTS)
  submit {buffer, pipelined, feeds: [{name: place}] | layout}
        -> pipelined: {more, ready} once the session could take the next batch (ready: its
           wait_ready passed), then the answer
        -> inline: the answer only
  SUBMIT record (buffer, layout, cpu)           an inline submit of a named layout (cpu: where
        the stub waits for it, -1 for anywhere)
  answer: {outputs: [...], buffer[, layout][, fds: 1 with a bigger buffer]}, naming the
        outputs' places by a number of the host's (`layout`) the first time a shape is seen;
        then an ANSWER record (buffer, layout)
  wait_ready {}                                 -> {}   (only after a submit not `ready`)
  stats {}                                      -> {counters, device_memory}
  free {buffer}                                 (no reply)
A failure is `{id, error: {kind: input|acl|model|other, message, request?, code?, api?}}` (of
a message without a reply, a line in the host's log), raised in the stub as the session in its
own process raises it (`serving`): `input` an `InputError`, `acl` an `AclError`, `model`
(the `.om` cannot be served: gone, changed, refused by the runtime) `ModelUnavailable`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
from collections import deque
from typing import Any

import numpy as np

from ge_python_backend.ascend import GearKind
from ge_python_backend.errors import GeBackendError
from ge_python_backend.modelinfo import GearInfo, SessionCounters, TensorSpec
from ge_python_backend.processes import RUN_DIR_ENV, NotPrivateError, run_directory

__all__ = [
    "ANSWER",
    "MAX_LAYOUTS",
    "SUBMIT",
    "BatchFrame",
    "DeviceHostError",
    "DeviceHostGone",
    "FrameReader",
    "RELOAD_NEEDED",
    "counters_from_json",
    "gears_from_json",
    "gears_to_json",
    "host_paths",
    "send_batch",
    "send_message",
    "specs_from_json",
    "specs_to_json",
]

_LENGTH = struct.Struct(">I")
MAX_FRAME = 64 << 20  # control messages only: tensors go through shared memory
MAX_FDS = 4
MAX_LAYOUTS = 256  # the layouts each side names on one connection; more go as places
SUBMIT = b"S"
ANSWER = b"A"
_BATCH = struct.Struct(">IcIIIi")  # the frame's length, then kind, id, buffer, layout, cpu
_BATCH_BODY = _BATCH.size - _LENGTH.size
_BATCH_KINDS = frozenset(SUBMIT + ANSWER)  # their first bytes
BatchFrame = tuple[bytes, int, int, int, int]  # kind, id, buffer, layout, cpu
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


def send_message(sock: socket.socket, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    """Send one frame (the caller serializes senders); `fds` travel with it (the message's
    `"fds"` field is set to their count)."""
    if fds:
        message["fds"] = len(fds)
    body = _encode(message).encode()
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
    sock.sendall(_BATCH.pack(_BATCH_BODY, kind, ident, buffer, layout, cpu))


class FrameReader:
    """Reads frames from one socket, one reader at a time; with `descriptors`, the descriptors
    they carry too (without, the kernel drops any a peer passes: the host takes none)."""

    def __init__(self, sock: socket.socket, descriptors: bool = True) -> None:
        self._sock = sock
        self._descriptors = descriptors
        self._data = bytearray()
        self._fds: deque[int] = deque()

    def read(self) -> tuple[dict[str, Any] | BatchFrame, list[int]] | None:
        """The next message (a JSON object or a batch record) and its descriptors; None at the
        end of the stream."""
        data = self._data
        while True:
            if len(data) >= _LENGTH.size:
                (length,) = _LENGTH.unpack_from(data)
                if length > MAX_FRAME:
                    raise DeviceHostError(f"a frame of {length} bytes is over {MAX_FRAME}")
                end = _LENGTH.size + length
                if len(data) >= end:
                    if length == _BATCH_BODY and data[_LENGTH.size] in _BATCH_KINDS:
                        record: BatchFrame = _BATCH.unpack_from(data)[1:]
                        del data[:end]
                        return record, []
                    message = _decode(data[_LENGTH.size : end].decode())
                    del data[:end]
                    if not isinstance(message, dict):
                        raise DeviceHostError("a message that is not a JSON object")
                    count = message.get("fds", 0)
                    if not count:
                        return message, []
                    if count > len(self._fds):
                        raise DeviceHostError("a message announces descriptors it did not bring")
                    return message, [self._fds.popleft() for _ in range(count)]
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


def specs_to_json(specs: tuple[TensorSpec, ...]) -> list[list[Any]]:
    return [[s.name, s.dtype.str, s.triton_dtype, list(s.shape), s.format] for s in specs]


def specs_from_json(items: list[list[Any]]) -> tuple[TensorSpec, ...]:
    return tuple(
        TensorSpec(name, np.dtype(dtype), triton, tuple(shape), fmt)
        for name, dtype, triton, shape, fmt in items
    )


def gears_to_json(gears: GearInfo) -> dict[str, Any]:
    return {
        "kind": gears.kind.value,
        "batched": gears.batched,
        "batch_gears": list(gears.batch_gears),
        "hw_gears": [list(hw) for hw in gears.hw_gears],
        "dims_gears": [[list(shape) for shape in gear] for gear in gears.dims_gears],
        "max_batch": gears.max_batch,
        "side_inputs": list(gears.side_inputs),
    }


def gears_from_json(data: dict[str, Any]) -> GearInfo:
    return GearInfo(
        kind=GearKind(data["kind"]),
        batched=bool(data["batched"]),
        batch_gears=tuple(data["batch_gears"]),
        hw_gears=tuple((int(h), int(w)) for h, w in data["hw_gears"]),
        dims_gears=tuple(tuple(tuple(shape) for shape in gear) for gear in data["dims_gears"]),
        max_batch=int(data["max_batch"]),
        side_inputs=tuple(data["side_inputs"]),
    )


def counters_from_json(data: dict[str, Any]) -> SessionCounters:
    names = {field.name for field in dataclasses.fields(SessionCounters)}
    return SessionCounters(**{name: value for name, value in data.items() if name in names})
