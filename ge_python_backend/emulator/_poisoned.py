"""Backing memory of emulated allocations: writable bytes that read the poison byte until written.

A block of `LAZY_MIN` bytes or more is a private copy-on-write mapping of one poison file per
process (a memfd of `CHUNK` poison bytes, mapped over the block chunk after chunk with
MAP_PRIVATE|MAP_FIXED): a byte never written reads the poison from the file's one page cache,
and a write copies only its page into the process's memory. So what the emulator never writes
(a model's weights and work space, the unused tail of an I/O buffer) takes none of the host's
RAM. Smaller blocks, and every block where memfd_create or a C library's mmap is missing (not
Linux), are a `bytearray` filled with the poison byte.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import sys
from collections.abc import Callable

from ge_python_backend.emulator._state import POISON

logger = logging.getLogger(__name__)

# Measured: a mapping costs ~7 us to make and ~2 us per page at its first write; a bytearray
# of 1 MiB costs ~13 us to make, so below 1 MiB a mapping saves little RAM for its cost.
LAZY_MIN = 1 << 20
# The poison file's size: the RAM it takes per process, and a mapping per CHUNK bytes of a
# block (256 MiB maps in ~0.3 ms; 9.9 GiB of device memory is ~2,500 of the host's
# vm.max_map_count, 65,530 by default).
CHUNK = 4 << 20
_MAP_FIXED = 0x10  # Linux's value on x86-64 and aarch64; the mmap module does not export it
_PROT_READ_WRITE = mmap.PROT_READ | mmap.PROT_WRITE


class _PoisonFile:
    """A memfd of `CHUNK` poison bytes and the C library's mmap, to map it over blocks."""

    def __init__(self, fd: int, libc_mmap: Callable[..., int | None]) -> None:
        self._fd = fd
        self._mmap = libc_mmap

    def map(self, size: int) -> ctypes.Array[ctypes.c_char]:
        """`size` poisoned bytes: an anonymous mapping reserves the addresses (and unmaps the
        whole range when the returned array, which holds it, is collected), the poison file
        is mapped over it."""
        try:
            reserved = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
        except OSError as exc:
            if exc.errno == errno.ENOMEM:
                raise MemoryError(f"cannot reserve {size} bytes of addresses: {exc}") from exc
            raise
        block = (ctypes.c_char * size).from_buffer(reserved)
        base = ctypes.addressof(block)
        for offset in range(0, size, CHUNK):
            at = base + offset
            length = min(CHUNK, size - offset)
            flags = mmap.MAP_PRIVATE | _MAP_FIXED
            if self._mmap(at, length, _PROT_READ_WRITE, flags, self._fd, 0) != at:
                raise _memory_error(ctypes.get_errno(), size)
        return block


def _memory_error(code: int, size: int) -> Exception:
    """MemoryError for ENOMEM (the caller reports it as the host failing to back the block),
    the OSError of `code` otherwise."""
    message = f"cannot map {size} bytes of poisoned memory: {os.strerror(code)}"
    return MemoryError(message) if code == errno.ENOMEM else OSError(code, message)


def _open_poison_file() -> _PoisonFile | None:
    """The process's poison file, or None (said at debug level) where this host cannot map it."""
    memfd_create = getattr(os, "memfd_create", None)
    if memfd_create is None or not sys.platform.startswith("linux"):
        logger.debug("emulated memory is backed by bytearrays: no memfd_create on %s", sys.platform)
        return None
    try:
        libc_mmap = ctypes.CDLL(None, use_errno=True).mmap
        fd = memfd_create("ge-emulator-poison", os.MFD_CLOEXEC)
    except (OSError, AttributeError) as exc:
        logger.debug("emulated memory is backed by bytearrays: %s", exc)
        return None
    libc_mmap.restype = ctypes.c_void_p
    libc_mmap.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    )
    with os.fdopen(fd, "wb", closefd=False) as file:
        file.write(bytes([POISON]) * CHUNK)
    return _PoisonFile(fd, libc_mmap)


class _Backing:
    """Whether the process maps large blocks: decided at its first large block."""

    def __init__(self) -> None:
        self.decided = False
        self.poison_file: _PoisonFile | None = None

    def poison_file_or_none(self) -> _PoisonFile | None:
        """The poison file, opened on the first call (None where unavailable)."""
        if not self.decided:
            self.poison_file = _open_poison_file()
            self.decided = True
        return self.poison_file


_BACKING = _Backing()


def poisoned(size: int) -> ctypes.Array[ctypes.c_char]:
    """`size` (> 0) writable bytes that read POISON until written, alive as long as the
    returned array (a mapping is unmapped when the array is collected). MemoryError when the
    host cannot back them. Callers hold `_state.LOCK`."""
    poison_file = _BACKING.poison_file_or_none() if size >= LAZY_MIN else None
    if poison_file is not None:
        return poison_file.map(size)
    return (ctypes.c_char * size).from_buffer(bytearray([POISON]) * size)
