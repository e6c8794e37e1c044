"""Device memory (`acl.rt.malloc`) and pinned host memory (`acl.rt.malloc_host`)."""

from __future__ import annotations

import ctypes

import numpy as np

from ge_python_backend.ascend import MemcpyKind
from ge_python_backend.runtime._resource import Resource
from ge_python_backend.runtime.device import Context, Stream
from ge_python_backend.runtime.errors import check

__all__ = ["DeviceBuffer", "HostBuffer"]

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
        context.activate()
        ptr, ret = context.acl.rt.malloc_host(size)
        check(ret, "acl.rt.malloc_host", context.acl)
        self.context = context
        self.ptr: int = ptr
        self.size = size
        self._own(_free_host, context, ptr)
        context._adopt(self)
        # pyACL hands out a bare address; ctypes wraps real host memory without copying.
        memory = memoryview((ctypes.c_ubyte * size).from_address(ptr)).cast("B")
        self.array: np.ndarray = np.frombuffer(memory, np.uint8)

    def __repr__(self) -> str:
        return f"HostBuffer(0x{self.ptr:x}, {self.size} bytes{', closed' if self.closed else ''})"


def _free_host(context: Context, ptr: int) -> None:
    context.activate()
    check(context.acl.rt.free_host(ptr), "acl.rt.free_host", context.acl)


class DeviceBuffer(Resource):
    """Device memory of `size` bytes; never read from the host, only copied."""

    def __init__(
        self, context: Context, size: int, policy: int = ACL_MEM_MALLOC_HUGE_FIRST
    ) -> None:
        _check_size(size)
        context.activate()
        ptr, ret = context.acl.rt.malloc(size, policy)
        check(ret, "acl.rt.malloc", context.acl)
        self.context = context
        self.ptr: int = ptr
        self.size = size
        self._own(_free, context, ptr)
        context._adopt(self)

    def copy_from_host(self, host: HostBuffer, nbytes: int) -> None:
        """Copy the first `nbytes` of `host` to the start of this buffer (synchronous)."""
        kind = self._check_copy(host, nbytes, MemcpyKind.HOST_TO_DEVICE)
        self.context.activate()
        acl = self.context.acl
        check(acl.rt.memcpy(self.ptr, self.size, host.ptr, nbytes, kind), "acl.rt.memcpy", acl)

    def copy_to_host(self, host: HostBuffer, nbytes: int) -> None:
        """Copy the first `nbytes` of this buffer to the start of `host` (synchronous)."""
        kind = self._check_copy(host, nbytes, MemcpyKind.DEVICE_TO_HOST)
        self.context.activate()
        acl = self.context.acl
        check(acl.rt.memcpy(host.ptr, host.size, self.ptr, nbytes, kind), "acl.rt.memcpy", acl)

    def copy_from_host_async(self, host: HostBuffer, nbytes: int, stream: Stream) -> None:
        """Queue a copy of the first `nbytes` of `host` to this buffer on `stream`.

        Both buffers start 64-byte aligned and `host` is page-locked, so `acl.rt.memcpy_async`
        returns at once; `host` must not change until the stream is synchronized.
        """
        kind = self._check_copy(host, nbytes, MemcpyKind.HOST_TO_DEVICE)
        self.context.activate()
        acl = self.context.acl
        ret = acl.rt.memcpy_async(self.ptr, self.size, host.ptr, nbytes, kind, stream.handle)
        check(ret, "acl.rt.memcpy_async", acl)

    def copy_to_host_async(self, host: HostBuffer, nbytes: int, stream: Stream) -> None:
        """Queue a copy of the first `nbytes` of this buffer to `host` on `stream`."""
        kind = self._check_copy(host, nbytes, MemcpyKind.DEVICE_TO_HOST)
        self.context.activate()
        acl = self.context.acl
        ret = acl.rt.memcpy_async(host.ptr, host.size, self.ptr, nbytes, kind, stream.handle)
        check(ret, "acl.rt.memcpy_async", acl)

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


def _free(context: Context, ptr: int) -> None:
    context.activate()
    check(context.acl.rt.free(ptr), "acl.rt.free", context.acl)
