"""Shared-memory buffers between a stub and the device host, and the tensors laid out in them.

The host creates each buffer (`Buffer.create`: an anonymous `memfd` of its own, mode 0600
like every shmem file, never linked into a directory, so nothing is left behind when either
side dies) and hands its descriptor to the one connection it belongs to (`protocol`'s
`SCM_RIGHTS`); both sides map it with `mmap`. A request's tensors are written once into a buffer
by the stub and read in place by the host's `Session` (which stages them into its pinned
buffers); the outputs are written once by the host and read by the stub. Not
`multiprocessing.shared_memory`, whose resource tracker would unlink segments behind us.
Standard library and numpy only: the stub imports it.
"""

from __future__ import annotations

import functools
import logging
import math
import mmap
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["ALIGN", "Buffer", "layout"]

logger = logging.getLogger(__name__)

ALIGN = 64  # every tensor starts on a 64-byte boundary


def _aligned(offset: int) -> int:
    return (offset + ALIGN - 1) // ALIGN * ALIGN


@functools.lru_cache(maxsize=64)
def _dtype(text: str) -> np.dtype[Any]:
    """The numeric dtype `text` names (ValueError for object or structured ones)."""
    dtype = np.dtype(text)
    if dtype.hasobject or dtype.fields is not None:
        raise ValueError(f"not a tensor dtype: {text!r}")
    return dtype


def layout(arrays: Sequence[Mapping[str, np.ndarray]]) -> tuple[list[dict[str, list[Any]]], int]:
    """Where each tensor of each request goes in a buffer, and the bytes it needs."""
    places: list[dict[str, list[Any]]] = []
    offset = 0
    for tensors in arrays:
        here: dict[str, list[Any]] = {}
        for name, array in tensors.items():
            here[name] = [offset, array.dtype.str, list(array.shape)]
            offset = _aligned(offset + array.nbytes)
        places.append(here)
    return places, offset


class Buffer:
    """One shared-memory buffer mapped in this process."""

    def __init__(self, fd: int, nbytes: int) -> None:
        self.fd = fd
        self.nbytes = nbytes
        self._map = mmap.mmap(fd, nbytes)

    @classmethod
    def create(cls, nbytes: int, name: str = "ge-device-host") -> Buffer:
        """A new buffer of `nbytes` (rounded up to whole pages)."""
        nbytes = max(mmap.PAGESIZE, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, nbytes)
            return cls(fd, nbytes)
        except BaseException:
            os.close(fd)
            raise

    def view(self, place: Sequence[Any]) -> np.ndarray:
        """The tensor at `place` ([offset, dtype, shape]); ValueError when it is not inside the
        buffer or not a plain numeric type."""
        offset, dtype_text, shape = place
        dtype = _dtype(dtype_text)
        if type(offset) is not int or offset < 0 or not all(type(n) is int for n in shape):
            raise ValueError(f"not a tensor this buffer can hold: {place!r}")
        if offset + math.prod(shape) * dtype.itemsize > self.nbytes or min(shape, default=0) < 0:
            raise ValueError(
                f"a tensor {dtype} {list(shape)} at {offset} is not inside the buffer of "
                f"{self.nbytes} bytes"
            )
        return np.ndarray(shape, dtype, self._map, offset)

    def write(
        self,
        places: Sequence[Mapping[str, Sequence[Any]]],
        arrays: Sequence[Mapping[str, np.ndarray]],
    ) -> None:
        """Write each tensor to its place (from `layout`)."""
        for here, tensors in zip(places, arrays):
            for name, array in tensors.items():
                self.view(here[name])[...] = array

    def close(self) -> None:
        try:
            self._map.close()
        except BufferError:  # a view of it is still alive: the mapping goes with the last one
            logger.debug("a view of a device host buffer outlives it; unmapped with the view")
        os.close(self.fd)
