"""Emulated pyACL memory: device address space, poison, capacity, memcpy/memset strictness."""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
from dataclasses import dataclass

import pytest
from emulator_helpers import D2D, D2H, H2D, H2H, from_device, malloc, to_device

from ge_python_backend.emulator import _poisoned, acl, set_timing
from ge_python_backend.emulator._memory import MEMORY
from ge_python_backend.emulator._state import DEVICE_ADDRESS_BASE

pytestmark = pytest.mark.usefixtures("clean_acl")


def test_device_pointers_are_aligned_poisoned_and_not_host_addresses(ctx: int) -> None:
    ptrs = [malloc(size) for size in (1, 100, 4096)]
    assert all(p >= DEVICE_ADDRESS_BASE and p % 64 == 0 for p in ptrs)
    assert len(set(ptrs)) == 3
    assert from_device(ptrs[1], 100) == b"\xa5" * 100


def test_malloc_refuses_bad_size_and_policy(ctx: int) -> None:
    assert acl.rt.malloc(0, 0) == (0, 100000)  # hicann/runtime aclMallocMemInner
    assert acl.rt.malloc(-5, 0) == (0, 100000)
    assert acl.rt.malloc(64, 6) == (0, 107000)
    assert "policy" in acl.get_recent_err_msg()
    for policy in range(6):
        ptr, ret = acl.rt.malloc(64, policy)
        assert ret == 0 and acl.rt.free(ptr) == 0


def test_capacity_rounding_and_exhaustion(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GE_EMULATOR_DEVICE_MEMORY", str(1 << 20))
    monkeypatch.setenv("GE_EMULATOR_PROCESS_MEMORY", "0")  # only the allocations below count
    assert acl.init() == 0
    try:
        assert acl.rt.set_device(0) == 0
        free, total, ret = acl.rt.get_mem_info(0)
        assert (free, total, ret) == (1 << 20, 1 << 20, 0)
        ptr = malloc(1)  # reserves 32 + 32
        assert acl.rt.get_mem_info(0)[0] == free - 64
        ptr33 = malloc(33)  # reserves 64 + 32
        assert acl.rt.get_mem_info(0)[0] == free - 64 - 96
        remaining = acl.rt.get_mem_info(0)[0]
        assert acl.rt.malloc(remaining, 0) == (0, 207001)
        assert "out of memory" in acl.get_recent_err_msg()
        big = malloc(remaining - 32)
        assert acl.rt.get_mem_info(0)[0] == 0
        assert acl.rt.malloc(1, 0) == (0, 207001)
        for p in (ptr, ptr33, big):
            assert acl.rt.free(p) == 0
        assert acl.rt.get_mem_info(0)[0] == 1 << 20
    finally:
        acl.finalize()


def test_free_refuses_double_free_and_non_allocations(ctx: int) -> None:
    ptr = malloc(128)
    assert acl.rt.free(ptr + 64) == 107000
    assert acl.rt.free(ptr) == 0
    assert acl.rt.free(ptr) == 107000
    assert "double free" in acl.get_recent_err_msg()
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.free(host) == 107000
    assert "free_host" in acl.get_recent_err_msg()
    assert acl.rt.free_host(malloc(64)) == 107000
    assert acl.rt.free_host(host) == 0
    assert acl.rt.free_host(host) == 107000


def test_memcpy_copies_in_every_direction(ctx: int) -> None:
    data = bytes(range(200))
    dev = to_device(data)
    dev2 = malloc(200)
    assert acl.rt.memcpy(dev2, 200, dev, 200, D2D) == 0
    assert from_device(dev2, 200) == data
    host, _ = acl.rt.malloc_host(200)
    assert acl.rt.memcpy(host, 200, dev2, 200, D2H) == 0
    assert ctypes.string_at(host, 200) == data
    out = bytes(200)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), 200, host, 200, H2H) == 0
    assert out == data
    assert acl.rt.memcpy(dev + 10, 20, host + 100, 20, H2D) == 0
    assert from_device(dev, 40)[10:30] == data[100:120]


def test_memcpy_checks_sizes_and_bounds(ctx: int) -> None:
    dev = malloc(100)
    src = bytes(200)
    src_ptr = acl.util.bytes_to_ptr(src)
    assert acl.rt.memcpy(dev, 50, src_ptr, 60, H2D) == 107000
    assert "dest_max" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(dev, 101, src_ptr, 100, H2D) == 107000
    assert "bytes left in the destination" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(dev + 60, 50, src_ptr, 50, H2D) == 107000
    assert acl.rt.memcpy(dev + 100, 1, src_ptr, 1, H2D) == 107000
    out = bytes(200)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), 200, dev, 101, D2H) == 107000
    assert "past the end of the source" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(dev, 100, src_ptr, 0, H2D) == 107000
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.memcpy(host, 65, dev, 64, D2H) == 107000
    assert acl.rt.memcpy(dev, 100, host, 65, H2D) == 107000
    assert acl.rt.memcpy(dev, 100, src_ptr, 100, H2D) == 0


@pytest.mark.parametrize(
    ("kind", "dst_device", "src_device"),
    [
        (H2D, False, False),
        (H2D, True, True),
        (D2H, True, True),
        (D2H, False, False),
        (D2D, True, False),
        (D2D, False, True),
        (H2H, True, False),
        (H2H, False, True),
    ],
)
def test_memcpy_checks_the_direction(
    ctx: int, kind: int, dst_device: bool, src_device: bool
) -> None:
    host = bytes(64)
    dst = malloc(64) if dst_device else acl.util.bytes_to_ptr(host)
    src = malloc(64) if src_device else acl.util.bytes_to_ptr(host)
    assert acl.rt.memcpy(dst, 64, src, 64, kind) == 107000
    assert "memory" in acl.get_recent_err_msg()


def test_memcpy_refuses_freed_null_handles_and_unknown_kinds(ctx: int) -> None:
    dev = malloc(64)
    host = bytes(64)
    host_ptr = acl.util.bytes_to_ptr(host)
    # an unknown kind is ACL_ERROR_INVALID_PARAM (hicann/runtime memory.cpp MemcpyKindTranslate)
    assert acl.rt.memcpy(dev, 64, host_ptr, 64, 4) == 100000
    assert acl.rt.memcpy(0, 64, host_ptr, 64, H2H) == 107000
    assert acl.rt.memcpy(host_ptr, 64, ctx, 8, H2H) == 107000
    assert "ACL handle" in acl.get_recent_err_msg()
    assert acl.rt.free(dev) == 0
    assert acl.rt.memcpy(dev, 64, host_ptr, 64, H2D) == 107000
    assert "freed" in acl.get_recent_err_msg()
    assert acl.rt.memcpy(host_ptr, 64, dev, 64, D2H) == 107000


def test_device_memory_does_not_survive_finalize() -> None:
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    dev = malloc(64)
    assert acl.finalize() == 0
    assert acl.init() == 0
    try:
        assert acl.rt.set_device(0) == 0
        out = bytes(64)
        assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), 64, dev, 64, D2H) == 107000
        assert "released by acl.finalize" in acl.get_recent_err_msg()
    finally:
        acl.finalize()


def test_malloc_host_is_aligned_poisoned_host_memory(ctx: int) -> None:
    host, ret = acl.rt.malloc_host(100)
    assert ret == 0 and host % 64 == 0 and host < DEVICE_ADDRESS_BASE
    assert ctypes.string_at(host, 100) == b"\xa5" * 100
    assert acl.rt.malloc_host(0) == (0, 107000)
    assert acl.rt.free_host(host) == 0


def test_memset(ctx: int) -> None:
    dev = malloc(100)
    assert acl.rt.memset(dev, 100, 0, 60) == 0
    assert from_device(dev, 100) == b"\0" * 60 + b"\xa5" * 40
    assert acl.rt.memset(dev + 50, 50, 7, 50) == 0
    assert from_device(dev, 100)[50:] == b"\x07" * 50
    assert acl.rt.memset(dev, 50, 0, 60) == 107000
    assert acl.rt.memset(dev, 101, 0, 10) == 107000
    assert acl.rt.memset(dev, 100, 256, 10) == 107000
    host, _ = acl.rt.malloc_host(64)
    assert acl.rt.memset(host, 64, 0, 64) == 107000
    assert "host memory" in acl.get_recent_err_msg()


def test_memset_async_runs_in_its_stream_s_order(ctx: int) -> None:
    """aclrtMemsetAsync: the bytes change when the stream reaches it, after the work queued
    before it; the same refusals as memset, and a bad stream's."""
    stream, _ = acl.rt.create_stream()
    dev = malloc(128)
    host, _ = acl.rt.malloc_host(128)
    out, _ = acl.rt.malloc_host(128)
    ctypes.memset(host, 2, 128)
    assert acl.rt.memcpy_async(dev, 128, host, 128, H2D, stream) == 0
    assert acl.rt.memset_async(dev, 128, 0, 64, stream) == 0  # over the copy's first half
    assert acl.rt.memcpy_async(out, 128, dev, 128, D2H, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert ctypes.string_at(out, 128) == b"\0" * 64 + b"\x02" * 64
    assert acl.rt.memset_async(dev, 50, 0, 60, stream) == 107000
    assert acl.rt.memset_async(dev, 128, 256, 10, stream) == 107000
    assert acl.rt.memset_async(host, 128, 0, 64, stream) == 107000
    assert acl.rt.memset_async(dev, 128, 0, 64, 0xDEAD) == 107017
    assert acl.rt.destroy_stream(stream) == 0


def test_a_memset_takes_device_time_at_the_device_s_memory_bandwidth(ctx: int) -> None:
    set_timing("memset_gbps=0.001")  # 50,000 bytes take 50 ms
    stream, _ = acl.rt.create_stream()
    start, end = acl.rt.create_event()[0], acl.rt.create_event()[0]
    dev = malloc(50_000)
    assert acl.rt.record_event(start, stream) == 0
    assert acl.rt.memset_async(dev, 50_000, 0, 50_000, stream) == 0
    assert acl.rt.record_event(end, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    ms, ret = acl.rt.event_elapsed_time(start, end)
    assert ret == 0 and 49.999 <= ms < 75.0
    for event in (start, end):
        assert acl.rt.destroy_event(event) == 0
    assert acl.rt.destroy_stream(stream) == 0


def test_memcpy_async_rules(ctx: int) -> None:
    stream, ret = acl.rt.create_stream()
    assert ret == 0
    dev = malloc(256)
    host, _ = acl.rt.malloc_host(256)
    other, _ = acl.rt.malloc_host(256)
    assert acl.rt.memcpy_async(dev + 8, 200, host, 64, H2D, stream) == 107008
    assert acl.rt.memcpy_async(dev, 256, host + 8, 64, H2D, stream) == 107008
    assert "aligned" in acl.get_recent_err_msg()
    assert acl.rt.memcpy_async(other, 256, host, 64, H2H, stream) == 207000
    assert acl.rt.memcpy_async(dev, 64, host, 128, H2D, stream) == 107000
    assert acl.rt.memcpy_async(dev, 256, host, 64, H2D, 0xDEAD) == 107017
    ctypes.memmove(host, bytes(range(256)), 256)
    assert acl.rt.memcpy_async(dev, 256, host, 256, H2D, stream) == 0
    assert acl.rt.memcpy_async(other, 256, dev, 256, D2H, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert ctypes.string_at(other, 256) == bytes(range(256))
    assert acl.rt.destroy_stream(stream) == 0


def test_memcpy_async_is_queued_for_pinned_memory(ctx: int) -> None:
    set_timing("copy_gbps=0.000001")  # 100 bytes take 100 ms
    stream, _ = acl.rt.create_stream()
    slow_host, _ = acl.rt.malloc_host(100)
    dev = malloc(64)
    host, _ = acl.rt.malloc_host(64)
    ctypes.memset(host, 1, 64)
    assert acl.rt.memcpy_async(malloc(100), 100, slow_host, 100, H2D, stream) == 0
    assert acl.rt.memcpy_async(dev, 64, host, 64, H2D, stream) == 0
    assert acl.rt.memcpy_async(host, 64, dev, 64, D2H, stream) == 0
    ctypes.memset(host, 2, 64)  # the H2D of `host` waits behind the slow copy
    assert acl.rt.synchronize_stream(stream) == 0
    assert ctypes.string_at(host, 64) == b"\x02" * 64
    assert acl.rt.destroy_stream(stream) == 0


def test_memcpy_async_with_pageable_memory_returns_after_the_copy(ctx: int) -> None:
    set_timing("copy_gbps=0.000001")
    stream, _ = acl.rt.create_stream()
    dev = to_device(b"\x03" * 64)
    out = bytearray(128)
    address = ctypes.addressof((ctypes.c_char * 128).from_buffer(out))
    aligned = (address + 63) // 64 * 64
    assert acl.rt.memcpy_async(aligned, 64, dev, 64, D2H, stream) == 0
    offset = aligned - address
    assert bytes(out[offset : offset + 64]) == b"\x03" * 64
    assert acl.rt.destroy_stream(stream) == 0


LARGE = 2 * _poisoned.CHUNK + 100  # a mapped block: two chunks of the poison file and a piece
POISON_FILE = "/memfd:ge-emulator-poison"


@dataclass(frozen=True)
class Mapping:
    """A mapping of this process (/proc/self/smaps): its name and its private anonymous kB."""

    name: str
    anonymous_kb: int


def mappings_over(address: int, size: int) -> list[Mapping]:
    """The mappings of this process overlapping [address, address + size)."""
    found: list[Mapping] = []
    overlaps = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):
                start, end = (int(x, 16) for x in fields[0].split("-"))
                overlaps = start < address + size and address < end
                if overlaps:
                    found.append(Mapping(" ".join(fields[5:]), 0))
            elif overlaps and fields[0] == "Anonymous:":
                found[-1] = Mapping(found[-1].name, int(fields[1]))
    return found


def maps_the_poison_file(address: int) -> bool:
    """Whether a mapping of the poison file covers part of a LARGE block at `address`."""
    return any(m.name.startswith(POISON_FILE) for m in mappings_over(address, LARGE))


def device_address(ptr: int) -> int:
    """The process address backing device pointer `ptr`."""
    alloc = MEMORY.device_block(ptr)
    assert alloc is not None
    return alloc.address


needs_memfd = pytest.mark.skipif(
    not hasattr(os, "memfd_create"), reason="large blocks are bytearrays without memfd_create"
)


@needs_memfd
def test_large_blocks_read_poison_and_take_ram_only_for_the_pages_written(ctx: int) -> None:
    devs = [malloc(LARGE), malloc(LARGE)]
    hosts = [acl.rt.malloc_host(LARGE)[0], acl.rt.malloc_host(LARGE)[0]]
    page = mmap.PAGESIZE
    assert from_device(devs[0], LARGE) == b"\xa5" * LARGE
    assert ctypes.string_at(hosts[0], LARGE) == b"\xa5" * LARGE
    written = bytes(range(256)) * (page // 256)
    at = _poisoned.CHUNK  # page-aligned: one page of each first block is written
    assert acl.rt.memcpy(devs[0] + at, page, acl.util.bytes_to_ptr(written), page, H2D) == 0
    ctypes.memmove(hosts[0] + at, written, page)
    assert from_device(devs[0] + at - 1, page + 2) == b"\xa5" + written + b"\xa5"
    assert ctypes.string_at(hosts[0] + at - 1, page + 2) == b"\xa5" + written + b"\xa5"
    assert from_device(devs[1] + at, page) == b"\xa5" * page  # writes are private to a block
    assert ctypes.string_at(hosts[1] + at, page) == b"\xa5" * page
    for address in (device_address(devs[0]), hosts[0]):
        blocks = mappings_over(address, LARGE)
        assert all(m.name.startswith(POISON_FILE) for m in blocks)
        assert sum(m.anonymous_kb for m in blocks) == page // 1024  # reads took no RAM
    for address in (device_address(devs[1]), hosts[1]):
        assert sum(m.anonymous_kb for m in mappings_over(address, LARGE)) == 0


@needs_memfd
def test_freeing_a_large_block_unmaps_it(ctx: int) -> None:
    dev = malloc(LARGE)
    host, _ = acl.rt.malloc_host(LARGE)
    address = device_address(dev)
    assert maps_the_poison_file(address) and maps_the_poison_file(host)
    assert acl.rt.free(dev) == 0 and acl.rt.free_host(host) == 0
    assert not maps_the_poison_file(address) and not maps_the_poison_file(host)
    assert acl.rt.memcpy(malloc(64), 64, dev, 64, D2D) == 107000


@needs_memfd
def test_a_block_the_host_cannot_map_is_out_of_memory(
    ctx: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_memory(*arguments: object) -> int:
        ctypes.set_errno(errno.ENOMEM)
        return ctypes.c_size_t(-1).value  # MAP_FAILED

    poison_file = _poisoned._BACKING.poison_file_or_none()
    assert poison_file is not None
    monkeypatch.setattr(poison_file, "_mmap", no_memory)
    free = acl.rt.get_mem_info(0)[0]
    assert acl.rt.malloc(LARGE, 0) == (0, 207001)
    assert "cannot back" in acl.get_recent_err_msg()
    assert acl.rt.get_mem_info(0)[0] == free
    assert acl.rt.malloc_host(LARGE) == (0, 207001)


def test_large_blocks_are_bytearrays_without_memfd_create(
    ctx: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_poisoned, "_BACKING", _poisoned._Backing())
    monkeypatch.delattr(os, "memfd_create", raising=False)
    with caplog.at_level(logging.DEBUG, _poisoned.__name__):
        dev = malloc(LARGE)
    assert "backed by bytearrays: no memfd_create" in caplog.text
    host, _ = acl.rt.malloc_host(LARGE)
    assert not maps_the_poison_file(device_address(dev)) and not maps_the_poison_file(host)
    assert acl.rt.memcpy(dev + 8, 4, acl.util.bytes_to_ptr(b"\x01" * 4), 4, H2D) == 0
    assert from_device(dev, 16) == b"\xa5" * 8 + b"\x01" * 4 + b"\xa5" * 4
    assert ctypes.string_at(host + LARGE - 4, 4) == b"\xa5" * 4
    assert acl.rt.free(dev) == 0 and acl.rt.free_host(host) == 0
