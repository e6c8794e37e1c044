"""Emulated memory: device allocations in their own address space, pinned host allocations.

Device pointers start at `DEVICE_ADDRESS_BASE`, are 64-byte aligned and never reused; each
allocation is backed by private memory of this process that reads the poison byte until written
(`_poisoned.poisoned`: a large one takes RAM only for the pages written). Host pointers are
real process addresses; every copy is a `ctypes.memmove` between real addresses.
"""

from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass

from ge_python_backend.ascend import AclCode, malloc_reserved
from ge_python_backend.emulator._poisoned import poisoned
from ge_python_backend.emulator._state import (
    DEVICE_ADDRESS_BASE,
    HANDLE_BASE,
    AclFailure,
    Device,
)

ALIGN = 64
GUARD = 0x1000  # unmapped gap after each device allocation
MIN_HOST_ADDRESS = 0x1000
MAX_HOST_ADDRESS = 1 << 48  # user-space addresses on x86-64 and aarch64 are below this


@dataclass(eq=False)
class DeviceAllocation:
    """One `acl.rt.malloc` block; `view` is None once freed."""

    base: int
    size: int
    capacity: int  # rounded size, counted against the device
    device_id: int
    view: ctypes.Array[ctypes.c_char] | None
    address: int  # real process address of the backing memory
    allocator: str = "acl.rt.malloc"  # the call that made it (its free call must match)
    freed_by: str = ""  # how it stopped being live: "freed" or "released by acl.finalize"

    @property
    def live(self) -> bool:
        """False once freed."""
        return self.view is not None


@dataclass(eq=False)
class HostAllocation:
    """One `acl.rt.malloc_host` block (a 64-byte aligned piece of a ctypes buffer)."""

    base: int
    size: int
    raw: ctypes.Array[ctypes.c_char] | None


@dataclass(frozen=True)
class Span:
    """A resolved address: where to memmove, and how many bytes remain in its allocation."""

    on_device: bool
    address: int  # real process address
    remaining: int | None  # None for host memory the emulator did not allocate
    device: DeviceAllocation | None
    host: HostAllocation | None
    keep: ctypes.Array[ctypes.c_char] | None  # keeps the memory alive for queued work

    def check_live(self, what: str) -> None:
        """Raise 107000 if the allocation was freed since the span was resolved."""
        if self.device is not None and not self.device.live:
            raise AclFailure(
                AclCode.RT_PARAM_INVALID, f"{what} device memory 0x{self.device.base:x} was freed"
            )
        if self.host is not None and self.host.raw is None:
            raise AclFailure(
                AclCode.RT_PARAM_INVALID, f"{what} host memory 0x{self.host.base:x} was freed"
            )


class Memory:
    """Registries of device and pinned host allocations (callers hold `_state.LOCK`)."""

    def __init__(self) -> None:
        self._next_device = DEVICE_ADDRESS_BASE
        self._device_bases: list[int] = []  # every allocation ever made, ascending
        self._device: list[DeviceAllocation] = []
        self._host_bases: list[int] = []  # live host allocations, ascending
        self._host: dict[int, HostAllocation] = {}
        self._released_host: list[ctypes.Array[ctypes.c_char] | None] = []
        self.live_device = 0
        self.device_bytes = 0
        self.live_host = 0
        self.host_bytes = 0

    def allocate_device(
        self, size: int, device_id: int, align: int = ALIGN, allocator: str = "acl.rt.malloc"
    ) -> DeviceAllocation:
        """A new poisoned device block of `size` bytes at an `align`-byte aligned address
        (a multiple of 64), made by `allocator`."""
        view = poisoned(size)
        alloc = DeviceAllocation(
            base=(self._next_device + align - 1) // align * align,
            size=size,
            capacity=malloc_reserved(size),
            device_id=device_id,
            view=view,
            address=ctypes.addressof(view),
            allocator=allocator,
        )
        self._next_device = (alloc.base + size + GUARD + ALIGN - 1) // ALIGN * ALIGN
        self._device_bases.append(alloc.base)
        self._device.append(alloc)
        self.live_device += 1
        self.device_bytes += alloc.capacity
        return alloc

    def device_block(self, addr: int) -> DeviceAllocation | None:
        """The allocation (live or freed) whose [base, base+size) contains `addr`."""
        i = bisect.bisect_right(self._device_bases, addr) - 1
        if i < 0:
            return None
        alloc = self._device[i]
        return alloc if addr < alloc.base + alloc.size else None

    def free_device(self, alloc: DeviceAllocation, how: str = "freed") -> None:
        """Release a live device block: its memory goes with the last reference to `view`
        (queued work keeps its own)."""
        alloc.view = None
        alloc.freed_by = how
        self.live_device -= 1
        self.device_bytes -= alloc.capacity

    def allocate_host(self, size: int) -> HostAllocation:
        """A new poisoned, 64-byte aligned host block at a real address."""
        raw = poisoned(size + ALIGN)
        base = (ctypes.addressof(raw) + ALIGN - 1) // ALIGN * ALIGN
        alloc = HostAllocation(base=base, size=size, raw=raw)
        bisect.insort(self._host_bases, base)
        self._host[base] = alloc
        self.live_host += 1
        self.host_bytes += size
        return alloc

    def host_block(self, addr: int) -> HostAllocation | None:
        """The live host allocation containing `addr`."""
        i = bisect.bisect_right(self._host_bases, addr) - 1
        if i < 0:
            return None
        alloc = self._host[self._host_bases[i]]
        return alloc if addr < alloc.base + alloc.size else None

    def host_at(self, base: int) -> HostAllocation | None:
        """The live host allocation starting exactly at `base`."""
        return self._host.get(base)

    def free_host(self, alloc: HostAllocation) -> None:
        """Release a live host block: its memory goes with the last reference to `raw`
        (queued work keeps its own)."""
        del self._host[alloc.base]
        self._host_bases.remove(alloc.base)
        alloc.raw = None
        self.live_host -= 1
        self.host_bytes -= alloc.size

    def release_all(self) -> tuple[int, int]:
        """acl.finalize: release every live block; returns (device, host) blocks released.

        Host blocks stay referenced (never reused) so a stale pointer cannot corrupt the process.
        """
        device = [a for a in self._device if a.live]
        for alloc in device:
            self.free_device(alloc, "released by acl.finalize")
        host = list(self._host.values())
        for block in host:
            self._released_host.append(block.raw)
            self.free_host(block)
        return len(device), len(host)

    def resolve(self, addr: int, what: str) -> Span:
        """Classify `addr` (device, pinned host, other host) or raise 107000 saying why not."""
        if addr >= DEVICE_ADDRESS_BASE:
            alloc = self.device_block(addr)
            if alloc is None:
                raise AclFailure(
                    AclCode.RT_PARAM_INVALID,
                    f"{what} 0x{addr:x} is not inside any device allocation",
                )
            if not alloc.live:
                raise AclFailure(
                    AclCode.RT_PARAM_INVALID,
                    f"{what} 0x{addr:x} is in device memory 0x{alloc.base:x} that was "
                    f"{alloc.freed_by}",
                )
            offset = addr - alloc.base
            return Span(True, alloc.address + offset, alloc.size - offset, alloc, None, alloc.view)
        if addr >= HANDLE_BASE:
            raise AclFailure(
                AclCode.RT_PARAM_INVALID,
                f"{what} 0x{addr:x} is an ACL handle (context, stream, dataset, ...), "
                "not a memory address",
            )
        if not MIN_HOST_ADDRESS <= addr < MAX_HOST_ADDRESS:
            raise AclFailure(AclCode.RT_PARAM_INVALID, f"{what} 0x{addr:x} is not a valid address")
        host = self.host_block(addr)
        if host is None:
            return Span(False, addr, None, None, None, None)
        return Span(False, addr, host.base + host.size - addr, None, host, host.raw)


MEMORY = Memory()


def device_malloc(
    device: Device,
    size: int,
    what: str,
    align: int = ALIGN,
    allocator: str = "acl.rt.malloc",
) -> DeviceAllocation:
    """`size` bytes of `device`'s memory the way `acl.rt.malloc` takes them (caller holds LOCK),
    the one allocation path of `acl.rt.malloc`, `acl.media.dvpp_malloc` (`allocator`, `align`)
    and the outputs ACL allocates at execute: the runtime's reserve (`malloc_reserved`) charged
    to the device's ledger, so every process on the host sees it. 207001 when the host's
    processes left too little (hicann/runtime npu_driver_mem.cc: halMemAlloc's
    DRV_ERROR_OUT_OF_MEMORY, errcode_manage.cc "driver error:out of memory", reported as
    EL0004). `what` names the allocation in that message."""
    need = malloc_reserved(size)
    device.charge(need, AclCode.RT_MEMORY_ALLOCATION, f"EL0004 {what} ({need} reserved)")
    try:
        return MEMORY.allocate_device(size, device.id, align, allocator)
    except MemoryError as exc:
        device.release(need)
        raise AclFailure(
            AclCode.RT_MEMORY_ALLOCATION, f"the host running the emulator cannot back {size} bytes"
        ) from exc
