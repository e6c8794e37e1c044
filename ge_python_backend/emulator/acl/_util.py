"""`acl.util`: conversions between Python objects and host pointers.

Only host addresses can be read here: a device pointer read from the host would crash the real
process, so the emulator raises RuntimeError with the fix instead.
"""

from __future__ import annotations

import ctypes
import math
import warnings
from typing import Any

import numpy as np

from ge_python_backend.emulator._api import api
from ge_python_backend.emulator._memory import MAX_HOST_ADDRESS, MEMORY, MIN_HOST_ADDRESS
from ge_python_backend.emulator._state import DEVICE_ADDRESS_BASE, HANDLE_BASE, LOCK

# NumPy C type numbers accepted by ptr_to_numpy.
NPY_TYPES: dict[int, np.dtype[Any]] = {
    code: np.dtype(t)
    for code, t in {
        0: np.bool_,
        1: np.int8,
        2: np.uint8,
        3: np.int16,
        4: np.uint16,
        5: np.int32,
        6: np.uint32,
        7: np.int64,
        8: np.uint64,
        9: np.longlong,
        10: np.ulonglong,
        11: np.float32,
        12: np.float64,
        23: np.float16,
    }.items()
}


@api("acl.util.bytes_to_ptr", object, fault="none")
def bytes_to_ptr(data: object) -> int:
    """Address of the internal buffer of a `bytes` object (zero copy; keep it alive)."""
    if not isinstance(data, bytes):
        raise ValueError("needs an byte as argument")
    address = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value
    assert address is not None
    return address


@api("acl.util.ptr_to_bytes", int, int, fault="none")
def ptr_to_bytes(ptr: int, size: int) -> bytes:
    """A new `bytes` holding a copy of `size` bytes of host memory at `ptr`."""
    _check_host_read("acl.util.ptr_to_bytes", ptr, size)
    return ctypes.string_at(ptr, size)


@api("acl.util.numpy_to_ptr", object, fault="none")
def numpy_to_ptr(array: object) -> int:
    """Address of an ndarray's data (zero copy). Deprecated: warns on every call."""
    warnings.warn(
        "acl.util.numpy_to_ptr will be deprecated, please use acl.util.bytes_to_ptr",
        Warning,
        stacklevel=3,
    )
    if not isinstance(array, np.ndarray):
        raise ValueError("acl.util.numpy_to_ptr needs a numpy.ndarray")
    if not array.flags.c_contiguous:
        # Stricter than pyACL, which only warns and then copies the wrong bytes.
        raise ValueError(
            "acl.util.numpy_to_ptr needs a C-contiguous array (use np.ascontiguousarray); "
            "real pyACL only warns here and the copy reads the wrong bytes"
        )
    return int(array.ctypes.data)


@api("acl.util.ptr_to_numpy", int, tuple, int, fault="none")
def ptr_to_numpy(ptr: int, shape: tuple[int, ...], npy_type: int) -> np.ndarray:
    """A writeable ndarray over host memory at `ptr` (no copy). Deprecated: warns."""
    warnings.warn(
        "acl.util.ptr_to_numpy will be deprecated, please use acl.util.ptr_to_bytes",
        Warning,
        stacklevel=3,
    )
    dtype = NPY_TYPES.get(npy_type)
    if dtype is None:
        raise ValueError(f"acl.util.ptr_to_numpy: unsupported numpy type number {npy_type}")
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"acl.util.ptr_to_numpy: bad shape {shape!r}")
    nbytes = math.prod(shape) * dtype.itemsize
    _check_host_read("acl.util.ptr_to_numpy", ptr, nbytes)
    buffer = (ctypes.c_char * nbytes).from_address(ptr)
    return np.frombuffer(memoryview(buffer), dtype).reshape(shape)


def _check_host_read(name: str, ptr: int, size: int) -> None:
    """Raise RuntimeError where the real call would read memory it must not."""
    if ptr >= DEVICE_ADDRESS_BASE:
        raise RuntimeError(
            f"{name}: 0x{ptr:x} is a device pointer (acl.rt.malloc), not a host address; real "
            "pyACL would crash reading it. Copy the data to host memory first with "
            "acl.rt.memcpy(host_ptr, size, dev_ptr, size, 2)  # ACL_MEMCPY_DEVICE_TO_HOST"
        )
    if ptr >= HANDLE_BASE:
        raise RuntimeError(f"{name}: 0x{ptr:x} is an ACL handle, not a host address")
    if not MIN_HOST_ADDRESS <= ptr < MAX_HOST_ADDRESS or size < 0:
        raise RuntimeError(f"{name}: cannot read {size} bytes at 0x{ptr:x}")
    with LOCK:
        block = MEMORY.host_block(ptr)
    if block is not None and ptr + size > block.base + block.size:
        raise RuntimeError(
            f"{name}: {size} bytes at 0x{ptr:x} run past the end of the malloc_host "
            f"allocation at 0x{block.base:x} ({block.size} bytes)"
        )
