"""Shared-memory buffers between a stub and the device host, and the tensors laid out in them.

The host creates each buffer (`Buffer.create`: an anonymous `memfd` of its own, mode 0600
like every shmem file, never linked into a directory, so nothing is left behind when either
side dies) and hands its descriptor to the one connection it belongs to (`protocol`'s
`SCM_RIGHTS`); both sides map it with `mmap`. Its size is sealed (`SEALS`: it can neither
shrink nor grow, and no seal can be added): a same-user process that opens it through /proc
and truncates it would otherwise make the next access of either side die of SIGBUS; each side
maps only a buffer so sealed. A request's tensors are written once into a buffer
by the stub and read in place by the host's `Session` (which stages them into its pinned
buffers); the host's `Session` copies the outputs once out of its pinned buffers into the
buffer (`put`) and the stub copies them out once (`copied_out`). Not
`multiprocessing.shared_memory`, whose resource tracker would unlink segments behind us.
Standard library and numpy only: the stub imports it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import logging
import math
import mmap
import os
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "ALIGN",
    "BYTES",
    "Buffer",
    "Layout",
    "Places",
    "buffer_bytes",
    "copied_out",
    "is_bytes_tensor",
    "layout",
    "signature",
]

logger = logging.getLogger(__name__)

ALIGN = 64  # every tensor starts on a 64-byte boundary
MIN_BUFFER = 1 << 20
# A buffer's size is fixed (a bigger one is a new buffer): no shrinking under a mapping (SIGBUS),
# no growing, and no further seal (a write seal would fail the other side's mapping).
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def buffer_bytes(nbytes: int) -> int:
    """The size of the buffer a stub asks for a batch of `nbytes`: a power of two, at least
    1 MiB (so that a few sizes serve every batch)."""
    size = MIN_BUFFER
    while size < nbytes:
        size *= 2
    return size


def _aligned(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


@functools.lru_cache(maxsize=64)
def _dtype(text: str) -> np.dtype[Any]:
    """The numeric dtype `text` names (ValueError for object or structured ones)."""
    dtype = np.dtype(text)
    if dtype.hasobject or dtype.fields is not None:
        raise ValueError(f"not a tensor dtype: {text!r}")
    return dtype


BYTES = "bytes"  # the dtype field of a BYTES tensor's place: its items one after another
Places = list[dict[str, list[Any]]]  # `layout`'s: each request's tensors' places


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a batch of one shape goes in a buffer, as `number` names it on a connection (0:
    not named, its places travel with each batch)."""

    number: int
    places: Places
    nbytes: int


def layout(arrays: Sequence[Mapping[str, np.ndarray]]) -> tuple[Places, int]:
    """Where each tensor of each request goes in a buffer, and the bytes it needs. A numeric
    tensor's place is [offset, dtype, shape]; a BYTES tensor's (an object array of `bytes`, as
    Triton gives them: an image input's JPEG files) is [offset, "bytes", shape, item lengths]."""
    places: Places = []
    offset = 0
    for tensors in arrays:
        here: dict[str, list[Any]] = {}
        for name, array in tensors.items():
            if array.dtype.hasobject:
                lengths = [len(item) for item in array.flat]
                here[name] = [offset, BYTES, list(array.shape), lengths]
                offset = _aligned(offset + sum(lengths))
            else:
                here[name] = [offset, array.dtype.str, list(array.shape)]
                offset = _aligned(offset + array.nbytes)
        places.append(here)
    return places, offset


def signature(arrays: Sequence[Mapping[str, np.ndarray]]) -> Hashable | None:
    """What `layout` depends on, as a key: each request's names, dtypes and shapes in order
    (None when a tensor is a BYTES one: its place depends on its items)."""
    key: list[Any] = []
    for tensors in arrays:
        for name, array in tensors.items():
            if array.dtype.hasobject:
                return None
            key.append((name, array.dtype, array.shape))
        key.append(None)  # where one request ends
    return tuple(key)


def copied_out(tensors: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """The stub's one copy of a batch's outputs out of its buffer (which then serves the next
    batch while Triton still holds these)."""
    return [{name: np.array(view) for name, view in here.items()} for here in tensors]


def is_bytes_tensor(array: np.ndarray) -> bool:
    """An object array holding only `bytes` (what `layout` can place as a BYTES tensor)."""
    return array.dtype.hasobject and all(isinstance(item, bytes) for item in array.flat)


class Buffer:
    """One shared-memory buffer mapped in this process."""

    def __init__(self, fd: int, nbytes: int) -> None:
        """Map `nbytes` of the buffer `fd` (ValueError unless its size is sealed and holds
        them)."""
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        size = os.fstat(fd).st_size
        if seals & SEALS != SEALS or size < nbytes:
            raise ValueError(
                f"not a device host buffer of {nbytes} bytes: {size} bytes, seals {seals:#x} "
                f"(a buffer's size is sealed: {SEALS:#x})"
            )
        self.fd = fd
        self.nbytes = nbytes
        self._map = mmap.mmap(fd, nbytes)
        self._kept: dict[Hashable, list[dict[str, np.ndarray]]] = {}

    @classmethod
    def create(cls, nbytes: int, name: str = "ge-device-host") -> Buffer:
        """A new buffer of `nbytes` (rounded up to whole pages)."""
        nbytes = max(mmap.PAGESIZE, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
            return cls(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise

    def view(self, place: Sequence[Any]) -> np.ndarray:
        """The tensor at `place` (from `layout`): a view of a numeric one, a BYTES one's items
        copied out; ValueError when it is not inside the buffer or not a tensor."""
        if len(place) == 4 and place[1] == BYTES:
            return self._bytes_tensor(*place)
        offset, dtype_text, shape = place
        dtype = _dtype(dtype_text)
        self._check_inside(offset, shape, math.prod(shape) * dtype.itemsize)
        return np.ndarray(shape, dtype, self._map, offset)

    def tensors(
        self, places: Sequence[Mapping[str, Sequence[Any]]], key: Hashable | None = None
    ) -> list[dict[str, np.ndarray]]:
        """Each request's tensors at `places` (as `view` gives them); with a `key`, the views
        made the first time that key came (every batch laid out the same way shares them)."""
        if key is not None:
            kept = self._kept.get(key)
            if kept is None:
                kept = self._kept[key] = self.tensors(places)
            return kept
        return [{name: self.view(place) for name, place in here.items()} for here in places]

    def _bytes_tensor(self, offset: int, _kind: str, shape: list[int], lengths: list[int]) -> Any:
        if not all(type(n) is int and n >= 0 for n in lengths) or len(lengths) != math.prod(shape):
            raise ValueError(f"not the item lengths of a BYTES tensor {shape}: {lengths!r}")
        self._check_inside(offset, shape, sum(lengths))
        items = np.empty(len(lengths), dtype=object)
        for index, length in enumerate(lengths):
            items[index] = self._map[offset : offset + length]
            offset += length
        return items.reshape(shape)

    def _check_inside(self, offset: Any, shape: Any, nbytes: int) -> None:
        if type(offset) is not int or offset < 0 or not all(type(n) is int for n in shape):
            raise ValueError(f"not a tensor this buffer can hold: offset {offset!r}, {shape!r}")
        if offset + nbytes > self.nbytes or min(shape, default=0) < 0:
            raise ValueError(
                f"a tensor {list(shape)} of {nbytes} bytes at {offset} is not inside the buffer "
                f"of {self.nbytes} bytes"
            )

    def write(
        self,
        places: Sequence[Mapping[str, Sequence[Any]]],
        arrays: Sequence[Mapping[str, np.ndarray]],
        key: Hashable | None = None,
    ) -> None:
        """Write each tensor to the place `layout` gave it (for these very arrays: not checked
        again); with a `key` (a numeric layout's), through the views `tensors` keeps."""
        if key is not None:
            self.put(places, arrays, key)
            return
        for here, tensors in zip(places, arrays):
            for name, array in tensors.items():
                place = here[name]
                if place[1] == BYTES:
                    self._map[place[0] : place[0] + sum(place[3])] = b"".join(array.flat)
                else:
                    np.ndarray(array.shape, array.dtype, self._map, place[0])[...] = array

    def put(
        self,
        places: Sequence[Mapping[str, Sequence[Any]]],
        arrays: Sequence[Mapping[str, np.ndarray]],
        key: Hashable | None = None,
    ) -> list[dict[str, np.ndarray]]:
        """Copy numeric `arrays` to their places (as `write`) through views of them (`tensors`,
        kept under `key`), and return the views: the arrays now in the buffer."""
        views = self.tensors(places, key)
        for here, tensors in zip(views, arrays):
            for name, array in tensors.items():
                here[name][...] = array
        return views

    def close(self) -> None:
        self._kept.clear()
        try:
            self._map.close()
        except BufferError:  # a view of it is still alive: the mapping goes with the last one
            logger.debug("a view of a device host buffer outlives it; unmapped with the view")
        os.close(self.fd)
