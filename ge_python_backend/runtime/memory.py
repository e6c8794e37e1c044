"""Device memory (`acl.rt.malloc`) and pinned host memory (`acl.rt.malloc_host`)."""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import NamedTuple

import numpy as np

from ge_python_backend.ascend import MemcpyKind
from ge_python_backend.runtime._resource import Resource
from ge_python_backend.runtime.device import Context, Stream, create_in_context
from ge_python_backend.runtime.errors import check

__all__ = ["DeviceBuffer", "DeviceView", "HostBuffer", "QueuedCopy", "copy_to_array"]

# aclrtMemMallocPolicy (acl_rt.h); pyACL exports no constants.
ACL_MEM_MALLOC_HUGE_FIRST = 0


def _check_size(size: int) -> None:
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"buffer size must be a positive integer, got {size!r}")


class HostBuffer(Resource):
    """Page-locked host memory; `array` is a writable uint8 numpy view of all of it.

    The view (and anything made from it) must not be used after `close()`.
    """

    def __init__(self, context: Context, size: int) -> None:
        _check_size(size)
        self.context = context
        self.ptr = create_in_context(self, context, "malloc_host", "free_host", size)
        self.size = size
        # pyACL hands out a bare address; ctypes wraps real host memory without copying.
        memory = memoryview((ctypes.c_ubyte * size).from_address(self.ptr)).cast("B")
        self.array: np.ndarray = np.frombuffer(memory, np.uint8)

    def __repr__(self) -> str:
        return f"HostBuffer(0x{self.ptr:x}, {self.size} bytes{', closed' if self.closed else ''})"


class QueuedCopy(NamedTuple):
    """An `acl.rt.memcpy_async` with its arguments but the stream (`DeviceBuffer.queued_copy`)."""

    acl: ModuleType
    args: tuple[int, int, int, int, int]

    def queue(self, stream: Stream) -> None:
        """Queue the copy on `stream` (its context current); the buffers must outlive it."""
        check(self.acl.rt.memcpy_async(*self.args, stream.handle), "acl.rt.memcpy_async", self.acl)

    def run(self) -> None:
        """Copy now (`acl.rt.memcpy`, the context current)."""
        check(self.acl.rt.memcpy(*self.args), "acl.rt.memcpy", self.acl)


class DeviceBuffer(Resource):
    """Device memory of `size` bytes; never read from the host, only copied."""

    def __init__(
        self, context: Context, size: int, policy: int = ACL_MEM_MALLOC_HUGE_FIRST
    ) -> None:
        _check_size(size)
        self.context = context
        self.ptr = create_in_context(self, context, "malloc", "free", size, policy)
        self.size = size

    def copy_from_host(self, host: HostBuffer, nbytes: int) -> None:
        """Copy the first `nbytes` of `host` to the start of this buffer (synchronous)."""
        self._copy(host, nbytes, MemcpyKind.HOST_TO_DEVICE)

    def copy_to_host(self, host: HostBuffer, nbytes: int) -> None:
        """Copy the first `nbytes` of this buffer to the start of `host` (synchronous)."""
        self._copy(host, nbytes, MemcpyKind.DEVICE_TO_HOST)

    def copy_from_host_async(self, host: HostBuffer, nbytes: int, stream: Stream) -> None:
        """Queue a copy of the first `nbytes` of `host` to this buffer on `stream`.

        Both buffers start 64-byte aligned and `host` is page-locked, so `acl.rt.memcpy_async`
        returns at once; `host` must not change until the stream is synchronized.
        """
        self._copy(host, nbytes, MemcpyKind.HOST_TO_DEVICE, stream)

    def copy_to_host_async(self, host: HostBuffer, nbytes: int, stream: Stream) -> None:
        """Queue a copy of the first `nbytes` of this buffer to `host` on `stream`."""
        self._copy(host, nbytes, MemcpyKind.DEVICE_TO_HOST, stream)

    def _copy(
        self, host: HostBuffer, nbytes: int, direction: MemcpyKind, stream: Stream | None = None
    ) -> None:
        """`acl.rt.memcpy` now, or `acl.rt.memcpy_async` queued on `stream`."""
        self.context.activate()
        if stream is not None:
            self.queued_copy(host, nbytes, direction).queue(stream)
            return
        acl = self.context.acl
        check(acl.rt.memcpy(*self.copy_args(host, nbytes, direction)), "acl.rt.memcpy", acl)

    def queued_copy(self, host: HostBuffer, nbytes: int, direction: MemcpyKind) -> QueuedCopy:
        """The copy of `nbytes` between the starts of `host` and this buffer the way
        `direction` (HOST_TO_DEVICE or DEVICE_TO_HOST) says, checked now, to queue later (as
        often as needed, with the context current)."""
        return QueuedCopy(self.context.acl, self.copy_args(host, nbytes, direction))

    def copy_args(
        self, host: HostBuffer, nbytes: int, direction: MemcpyKind
    ) -> tuple[int, int, int, int, int]:
        """`acl.rt.memcpy`'s arguments (dst, dst size, src, count, kind) for a copy of `nbytes`
        between the starts of `host` and this buffer; ValueError unless `nbytes` fits both."""
        kind = self._check_copy(host, nbytes, direction)
        if direction == MemcpyKind.HOST_TO_DEVICE:
            return self.ptr, self.size, host.ptr, nbytes, kind
        return host.ptr, host.size, self.ptr, nbytes, kind

    def _check_copy(self, host: HostBuffer, nbytes: int, kind: MemcpyKind) -> MemcpyKind:
        """The memcpy kind to use; ValueError unless `nbytes` fits both buffers."""
        if not 0 < nbytes <= min(self.size, host.size):
            raise ValueError(
                f"cannot copy {nbytes} bytes between {self!r} and {host!r}: expected 1 to "
                f"{min(self.size, host.size)} bytes"
            )
        if self.context.device.shares_host_memory:
            return MemcpyKind.DEVICE_TO_DEVICE
        return kind

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"DeviceBuffer(0x{self.ptr:x}, {self.size} bytes{state})"


class DeviceView(DeviceBuffer):
    """`size` bytes at `offset` of `area`, a `DeviceBuffer` that stays their owner: a view frees
    nothing and is used like any device buffer while `area` is open (carved as
    `ascend.carved_bytes` says by its user)."""

    def __init__(self, area: DeviceBuffer, offset: int, size: int) -> None:
        _check_size(size)
        if offset < 0 or offset + size > area.size:
            raise ValueError(f"{size} bytes at offset {offset} do not fit in {area!r}")
        self.context = area.context
        self.area = area
        self.ptr = area.ptr + offset
        self.size = size
        self._own(_nothing_to_free, area)

    def __repr__(self) -> str:
        return f"DeviceView(0x{self.ptr:x}, {self.size} bytes of {self.area!r})"


def _nothing_to_free(area: DeviceBuffer) -> None:
    """A view's release: its memory is `area`'s (held here so that it outlives the view)."""


def copy_to_array(context: Context, ptr: int, array: np.ndarray) -> None:
    """Copy `array.nbytes` bytes from device address `ptr` (memory ACL allocated, not a
    `DeviceBuffer`) into `array`, a C-contiguous host array (synchronous `acl.rt.memcpy`;
    device-to-device in RC mode, where host memory is device memory)."""
    if not array.nbytes:
        return
    context.activate()
    acl = context.acl
    kind = (
        MemcpyKind.DEVICE_TO_DEVICE
        if context.device.shares_host_memory
        else MemcpyKind.DEVICE_TO_HOST
    )
    address = array.ctypes.data
    check(acl.rt.memcpy(address, array.nbytes, ptr, array.nbytes, kind), "acl.rt.memcpy", acl)
