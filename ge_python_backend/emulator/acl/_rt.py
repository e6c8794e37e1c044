"""`acl.rt`: devices, contexts, streams and memory of the emulated runtime."""

from __future__ import annotations

import contextlib
import ctypes
from dataclasses import dataclass

from ge_python_backend.ascend import AclCode as _AclCode
from ge_python_backend.ascend import MemcpyKind as _MemcpyKind
from ge_python_backend.emulator import _events, _flights, timing
from ge_python_backend.emulator._api import api, zero_ret
from ge_python_backend.emulator._memory import MEMORY, DeviceAllocation, Span, device_malloc
from ge_python_backend.emulator._state import (
    DEVICE_ADDRESS_BASE,
    LOCK,
    STATE,
    AclFailure,
    Device,
    device_mode,
    env_run_mode,
    require_init,
)
from ge_python_backend.emulator._streams import (
    CONTEXTS,
    CURRENT,
    DEFAULT_CONTEXTS,
    STREAMS,
    Context,
    Stream,
    current_context,
    live_context,
    stream_in,
)

MAX_STREAMS_PER_DEVICE = 1024
MAX_POLICY = 5  # ACL_MEM_MALLOC_NORMAL_ONLY_P2P
MAX_MEM_ATTR = 9  # last aclrtMemAttr value (ACL_HBM_MEM_P2P_NORMAL)
ASYNC_ALIGN = 64
# the tasks of the device memory witness (`_flights`)
COPY = _flights.Task("an acl.rt.memcpy_async")
MEMSET = _flights.Task("an acl.rt.memset_async")


# ----------------------------------------------------------------------------- devices


@api("acl.rt.set_device", int)
def set_device(device_id: int) -> int:
    """Open the device (reference counted) and make its default context current."""
    require_init()
    with LOCK:
        device = _device(device_id)
        ctx = DEFAULT_CONTEXTS.get(device_id)
        if ctx is None:
            device.open_context()
            ctx = Context(STATE.new_handle(), device, explicit=False)
            CONTEXTS[ctx.handle] = ctx
            DEFAULT_CONTEXTS[device_id] = ctx
        device.refcount += 1
        CURRENT.context = ctx
    return 0


@api("acl.rt.reset_device", int)
def reset_device(device_id: int) -> int:
    """Drop one set_device reference; the last one destroys the default context and its streams."""
    require_init()
    with LOCK:
        device = _device(device_id)
        if device.refcount == 0:
            # Stricter reading: an unmatched reset_device is refused.
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"reset_device({device_id}) without a matching set_device",
            )
        streams: list[Stream] = []
        if device.refcount == 1:
            explicit = [c for c in CONTEXTS.values() if c.device is device and c.explicit]
            if explicit:
                # Stricter reading: the docs require destroying explicit contexts first.
                raise AclFailure(
                    _AclCode.RT_PARAM_INVALID,
                    f"device {device_id} still has {len(explicit)} context(s) from "
                    "create_context; destroy them before the last reset_device",
                )
            ctx = DEFAULT_CONTEXTS.pop(device_id, None)
            if ctx is not None:
                streams = _kill_context(ctx)
                device.close_context()
        device.refcount -= 1
    for stream in streams:
        stream.stop()
    return 0


@api("acl.rt.get_device", fail=zero_ret)
def get_device() -> tuple[int, int]:
    """(device id of the current context, ret)."""
    return current_context().device.id, 0


@api("acl.rt.get_device_count", fail=zero_ret)
def get_device_count() -> tuple[int, int]:
    """(number of emulated devices, ret)."""
    require_init()
    return STATE.device_count, 0


@api("acl.rt.get_run_mode", fail=zero_ret)
def get_run_mode() -> tuple[int, int]:
    """(run mode, ret): ACL_HOST (1, a host with a PCIe card; the default) or ACL_DEVICE (0,
    GE_EMULATOR_RUN_MODE=device: the device's own CPU). Needs no acl.init, as in ACL."""
    return int(STATE.run_mode if STATE.initialized else env_run_mode()), 0


@api("acl.rt.synchronize_device", fault="after")
def synchronize_device() -> int:
    """Wait for every stream of the current device; the first failure among them."""
    ctx = current_context()
    with LOCK:
        contexts = [c for c in CONTEXTS.values() if c.device is ctx.device]
        streams = [s for c in contexts for s in c.streams.values()]
        streams += [c.default_stream for c in contexts if c.default_stream is not None]
    failures = [f for f in (s.wait() for s in streams) if f is not None]
    if failures:
        raise failures[0]
    return 0


# ----------------------------------------------------------------------------- contexts


@api("acl.rt.create_context", int, fail=zero_ret)
def create_context(device_id: int) -> tuple[int, int]:
    """(context, ret); the new context becomes current for the calling thread."""
    require_init()
    with LOCK:
        device = _device(device_id)
        device.open_context()
        ctx = Context(STATE.new_handle(), device, explicit=True)
        CONTEXTS[ctx.handle] = ctx
        STATE.count("context_creations")
    CURRENT.context = ctx
    return ctx.handle, 0


@api("acl.rt.set_context", int)
def set_context(context: int) -> int:
    """Make `context` current for the calling thread."""
    require_init()
    CURRENT.context = live_context(context)
    return 0


@api("acl.rt.get_context", fail=zero_ret)
def get_context() -> tuple[int, int]:
    """(current context of the calling thread, ret)."""
    return current_context().handle, 0


@api("acl.rt.destroy_context", int)
def destroy_context(context: int) -> int:
    """Destroy an explicit context (it must have no streams left)."""
    require_init()
    with LOCK:
        ctx = live_context(context)
        if not ctx.explicit:
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"0x{context:x} is the default context of device {ctx.device.id}; it cannot be "
                "destroyed (reset_device releases it)",
            )
        if ctx.streams:
            # Stricter reading: destroy the context's streams first.
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"context 0x{context:x} still has {len(ctx.streams)} stream(s); "
                "destroy_stream them first",
            )
        streams = _kill_context(ctx)
        ctx.device.close_context()
    for stream in streams:
        stream.stop()
    return 0


# ----------------------------------------------------------------------------- streams


@api("acl.rt.create_stream", fail=zero_ret)
def create_stream() -> tuple[int, int]:
    """(stream, ret): a new stream in the current context."""
    ctx = current_context()
    with LOCK:
        on_device = sum(1 for s in STREAMS.values() if s.context.device is ctx.device)
        if on_device >= MAX_STREAMS_PER_DEVICE:
            raise AclFailure(
                _AclCode.RT_NO_STREAM_RESOURCE,
                f"device {ctx.device.id} already has {on_device} streams (the maximum)",
            )
        stream = Stream(STATE.new_handle(), ctx)
        STREAMS[stream.handle] = stream
        ctx.streams[stream.handle] = stream
        STATE.count("stream_creations")
    return stream.handle, 0


@api("acl.rt.destroy_stream", int)
def destroy_stream(stream: int) -> int:
    """Wait for the stream's queued work, then destroy it."""
    ctx = current_context()
    if stream == 0:
        raise AclFailure(_AclCode.RT_PARAM_INVALID, "the default stream (0) cannot be destroyed")
    target = stream_in(stream, ctx)
    with LOCK:
        STREAMS.pop(stream, None)
        ctx.streams.pop(stream, None)
    target.stop()
    return 0


@api("acl.rt.synchronize_stream", int, fault="after")
def synchronize_stream(stream: int) -> int:
    """Wait for the stream's queued work; the first failure since the last synchronize."""
    failure = stream_in(stream, current_context()).wait()
    if failure is not None:
        raise failure
    return 0


@api("acl.rt.synchronize_stream_with_timeout", int, int, fault="after")
def synchronize_stream_with_timeout(stream: int, timeout: int) -> int:
    """synchronize_stream waiting at most `timeout` ms (-1: no limit); 507046
    (ACL_ERROR_RT_STREAM_SYNC_TIMEOUT) when the work has not finished by then."""
    if not -(2**31) <= timeout < 2**31:  # parsed as a C int ("i"), as pyACL does
        side = "greater than maximum" if timeout > 0 else "less than minimum"
        raise OverflowError(f"signed integer is {side}")
    if timeout < -1 or timeout == 0:
        # ACL refuses < -1 with 107000; 0 is refused too (stricter reading: the documented
        # values are -1 and > 0).
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID, f"timeout must be -1 (no limit) or > 0 ms, got {timeout}"
        )
    failure = stream_in(stream, current_context()).wait(timeout)
    if failure is not None:
        raise failure
    return 0


# ----------------------------------------------------------------------------- memory


@api("acl.rt.malloc", int, int, fail=zero_ret)
def malloc(size: int, policy: int) -> tuple[int, int]:
    """(device pointer, ret): poisoned device memory, 64-byte aligned."""
    ctx = current_context()
    if size <= 0:
        # hicann/runtime memory.cpp aclMallocMemInner: ACL_REQUIRES_POSITIVE_REPORT(size).
        raise AclFailure(_AclCode.INVALID_PARAM, f"size must be > 0, got {size}")
    if not 0 <= policy <= MAX_POLICY:
        # Stricter than the runtime, which treats an unknown policy as HUGE_FIRST-like.
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID, f"policy must be 0..{MAX_POLICY} (aclrtMemMallocPolicy)"
        )
    return allocate_device(ctx, size, "acl.rt.malloc").base, 0


def allocate_device(
    ctx: Context, size: int, allocator: str, align: int = ASYNC_ALIGN
) -> DeviceAllocation:
    """Device memory of `ctx`'s device for `acl.rt.malloc` or `acl.media.dvpp_malloc`
    (`allocator` names the call): `_memory.device_malloc`, counted."""
    with LOCK:
        alloc = device_malloc(ctx.device, size, f"{allocator}({size})", align, allocator)
        STATE.count("malloc_calls")
    return alloc


@api("acl.rt.free", int)
def free(dev_ptr: int) -> int:
    """Free device memory from `malloc` (the pointer it returned)."""
    current_context()  # stricter reading: freeing is a runtime call that needs a context
    free_device(dev_ptr, "acl.rt.malloc", "acl.rt.free")
    return 0


def free_device(dev_ptr: int, allocator: str, call: str) -> None:
    """Free the device memory `allocator` returned at `dev_ptr` (`call` is the freeing call)
    and release it in the device's ledger; 107000 for anything else, memory of the other
    allocator included (stricter: named with its own free call)."""
    with LOCK:
        alloc = MEMORY.device_block(dev_ptr) if dev_ptr >= DEVICE_ADDRESS_BASE else None
        if alloc is None or alloc.base != dev_ptr:
            hint = " (it is host memory: use free_host)" if MEMORY.host_at(dev_ptr) else ""
            # UNCONFIRMED code for freeing a non-allocation: ACL_ERROR_RT_PARAM_INVALID.
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"0x{dev_ptr:x} is not a pointer from {allocator}{hint}",
            )
        if alloc.allocator != allocator:
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"0x{dev_ptr:x} is from {alloc.allocator}: {call} does not free it",
            )
        if not alloc.live:
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"double free: 0x{dev_ptr:x} was already {alloc.freed_by}",
            )
        MEMORY.free_device(alloc)
        _flights.freed(alloc)
        STATE.devices[alloc.device_id].release(alloc.capacity)
        STATE.count("free_calls")


@api("acl.rt.malloc_host", int, fail=zero_ret)
def malloc_host(size: int) -> tuple[int, int]:
    """(host pointer, ret): poisoned page-locked host memory, 64-byte aligned."""
    current_context()
    if size <= 0:
        raise AclFailure(_AclCode.RT_PARAM_INVALID, f"size must be > 0, got {size}")
    with LOCK:
        try:
            alloc = MEMORY.allocate_host(size)
        except MemoryError as exc:
            raise AclFailure(
                _AclCode.RT_MEMORY_ALLOCATION, f"cannot allocate {size} bytes of host memory"
            ) from exc
        STATE.count("malloc_host_calls")
    return alloc.base, 0


@api("acl.rt.free_host", int)
def free_host(host_ptr: int) -> int:
    """Free memory from `malloc_host`."""
    current_context()
    with LOCK:
        alloc = MEMORY.host_at(host_ptr)
        if alloc is None:
            hint = " (it is device memory: use free)" if host_ptr >= DEVICE_ADDRESS_BASE else ""
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"0x{host_ptr:x} is not a live pointer from acl.rt.malloc_host "
                f"(double free?){hint}",
            )
        MEMORY.free_host(alloc)
        STATE.count("free_host_calls")
    return 0


@api("acl.rt.get_mem_info", int, fail=lambda code, args: (0, 0, code))
def get_mem_info(attr: int) -> tuple[int, int, int]:
    """(free, total, ret) of the current device's memory: total is the device's, free what
    every process on the host left (as the driver's counters of the device are; HBM and DDR
    attributes report the same memory, as on a 310P, whose HBM queries read DDR)."""
    device = current_context().device
    if not 0 <= attr <= MAX_MEM_ATTR:
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID, f"attr must be an aclrtMemAttr value 0..{MAX_MEM_ATTR}"
        )
    with LOCK:
        return device.free(), device.capacity, 0


@dataclass(frozen=True)
class _Copy:
    dst: Span
    src: Span
    count: int
    kind: int

    def run(self) -> None:
        self.dst.check_live("dst")
        self.src.check_live("src")
        with self._engine():
            ctypes.memmove(self.dst.address, self.src.address, self.count)

    def accesses(self) -> list[_flights.Access]:
        """The device memory the copy writes and reads (`_flights`)."""
        touched = (
            _flights.span_access(self.dst, True, "destination", self.count),
            _flights.span_access(self.src, False, "source", self.count),
        )
        return [access for access in touched if access is not None]

    def _engine(self) -> contextlib.AbstractContextManager[None]:
        seconds = timing.current().copy_seconds(self.count)
        if self.kind == _MemcpyKind.HOST_TO_DEVICE and self.dst.device is not None:
            return timing.engine(self.dst.device.device_id, "h2d", seconds)
        if self.kind == _MemcpyKind.DEVICE_TO_HOST and self.src.device is not None:
            return timing.engine(self.src.device.device_id, "d2h", seconds)
        return contextlib.nullcontext()


@api("acl.rt.memcpy", int, int, int, int, int)
def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> int:
    """Synchronous copy of `count` bytes from `src` to `dst` (kind 0 H2H, 1 H2D, 2 D2H, 3 D2D)."""
    current_context()
    copy = _plan_copy(dst, dest_max, src, count, kind)
    copy.run()
    _count_copy(copy, None)
    return 0


@api("acl.rt.memcpy_async", int, int, int, int, int, int, hangable=True)
def memcpy_async(dst: int, dest_max: int, src: int, count: int, kind: int, stream: int) -> int:
    """Queue the copy on `stream`; src and dst must be 64-byte aligned; no host-to-host."""
    target = stream_in(stream, current_context())
    if kind == _MemcpyKind.HOST_TO_HOST and not device_mode():
        raise AclFailure(
            _AclCode.RT_FEATURE_NOT_SUPPORT,
            "async host-to-host copies are not supported in ACL_HOST mode",
        )
    copy = _plan_copy(dst, dest_max, src, count, kind)
    for name, addr in (("dst", dst), ("src", src)):
        if addr % ASYNC_ALIGN:
            raise AclFailure(
                _AclCode.RT_ADDR_UNALIGNED, f"{name} 0x{addr:x} is not {ASYNC_ALIGN}-byte aligned"
            )
    accesses = copy.accesses()
    with LOCK:
        _flights.check(COPY, accesses, target)
        ticket = target.submit("acl.rt.memcpy_async", copy.run)
        _flights.record(COPY, accesses, target, ticket)
        _count_copy(copy, "memcpy_async_calls")
    if any(s.remaining is None for s in (copy.dst, copy.src)):
        # Pageable host memory (not from malloc_host): the real call returns after the copy.
        target.wait_for(ticket)
    return 0


@dataclass(frozen=True)
class _Memset:
    span: Span
    value: int
    count: int

    def run(self) -> None:
        """Write the bytes, taking the device time of `count` bytes at the device's memory
        bandwidth (`timing.Timing.memset_seconds`) on the running stream work."""
        self.span.check_live("dev_ptr")
        with timing.channel(timing.current().memset_seconds(self.count)):
            ctypes.memset(self.span.address, self.value, self.count)


@api("acl.rt.memset", int, int, int, int)
def memset(dev_ptr: int, max_count: int, value: int, count: int) -> int:
    """Set `count` bytes of device memory at `dev_ptr` to `value`."""
    current_context()
    _plan_memset(dev_ptr, max_count, value, count).run()
    STATE.count("memset_calls")
    return 0


@api("acl.rt.memset_async", int, int, int, int, int, hangable=True)
def memset_async(dev_ptr: int, max_count: int, value: int, count: int, stream: int) -> int:
    """Queue `memset` on `stream`: the bytes change when the stream reaches it, after the work
    queued before it (aclrtMemsetAsync; results after synchronize_stream)."""
    target = stream_in(stream, current_context())
    memset = _plan_memset(dev_ptr, max_count, value, count)
    written = _flights.span_access(memset.span, True, "memory", count)
    accesses = [] if written is None else [written]
    with LOCK:
        _flights.check(MEMSET, accesses, target)
        ticket = target.submit("acl.rt.memset_async", memset.run)
        _flights.record(MEMSET, accesses, target, ticket)
        STATE.count("memset_calls")
        STATE.count("memset_async_calls")
    return 0


def _plan_memset(dev_ptr: int, max_count: int, value: int, count: int) -> _Memset:
    """Validate a memset (107000 for each refusal, UNCONFIRMED codes)."""
    if not 0 < count <= max_count:
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID, f"count {count} must be > 0 and <= max_count {max_count}"
        )
    if not 0 <= value <= 0xFF:
        # Stricter reading: only byte values are accepted.
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID, f"value must be a byte value 0..255, got {value}"
        )
    with LOCK:
        span = MEMORY.resolve(dev_ptr, "dev_ptr")
    if not span.on_device or span.remaining is None:
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID, f"dev_ptr 0x{dev_ptr:x} is host memory, not device memory"
        )
    if max_count > span.remaining:
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID,
            f"max_count {max_count} exceeds the {span.remaining} bytes left in the allocation",
        )
    return _Memset(span, value, count)


# ----------------------------------------------------------------------------- helpers


def _device(device_id: int) -> Device:
    device = STATE.devices.get(device_id)
    if device is None:
        raise AclFailure(
            _AclCode.RT_INVALID_DEVICEID,
            f"device id {device_id} does not exist: the emulator has {STATE.device_count} "
            "devices (GE_EMULATOR_DEVICE_COUNT)",
        )
    return device


def _kill_context(ctx: Context) -> list[Stream]:
    """Mark `ctx` and its streams dead (caller holds LOCK); returns the streams to stop."""
    ctx.live = False
    CONTEXTS.pop(ctx.handle, None)
    streams = list(ctx.streams.values())
    if ctx.default_stream is not None:
        streams.append(ctx.default_stream)
    for stream in streams:
        STREAMS.pop(stream.handle, None)
    ctx.streams.clear()
    return streams


def _plan_copy(dst: int, dest_max: int, src: int, count: int, kind: int) -> _Copy:
    """Validate a copy. An unknown kind is 100000 (hicann/runtime src/acl/aclrt_impl/memory.cpp,
    MemcpyKindTranslate);
    UNCONFIRMED codes: every other refusal here is 107000 (ACL_ERROR_RT_PARAM_INVALID). In
    device (RC) mode host memory is device memory, so no kind is checked against addresses."""
    if kind not in tuple(_MemcpyKind):
        # ACL_MEMCPY_DEFAULT (4) exists only in newer CANN: refused (stricter).
        raise AclFailure(_AclCode.INVALID_PARAM, f"kind must be 0..3 (aclrtMemcpyKind), got {kind}")
    if count <= 0:
        raise AclFailure(_AclCode.RT_PARAM_INVALID, f"count must be > 0, got {count}")
    if count > dest_max:
        raise AclFailure(_AclCode.RT_PARAM_INVALID, f"count {count} exceeds dest_max {dest_max}")
    with LOCK:
        dst_span = MEMORY.resolve(dst, "dst")
        src_span = MEMORY.resolve(src, "src")
    to_device = (_MemcpyKind.HOST_TO_DEVICE, _MemcpyKind.DEVICE_TO_DEVICE)
    from_device = (_MemcpyKind.DEVICE_TO_HOST, _MemcpyKind.DEVICE_TO_DEVICE)
    for name, span, want_device in (
        ("dst", dst_span, kind in to_device),
        ("src", src_span, kind in from_device),
    ):
        if span.on_device != want_device and not device_mode():
            addr = dst if name == "dst" else src
            raise AclFailure(
                _AclCode.RT_PARAM_INVALID,
                f"kind {kind} ({_MemcpyKind(kind).acl_name}) needs {name} in "
                f"{'device' if want_device else 'host'} memory, but 0x{addr:x} is "
                f"{'device' if span.on_device else 'host'} memory",
            )
    if dst_span.remaining is not None and dest_max > dst_span.remaining:
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID,
            f"dest_max {dest_max} exceeds the {dst_span.remaining} bytes left in the "
            f"destination allocation at 0x{dst:x}",
        )
    if src_span.remaining is not None and count > src_span.remaining:
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID,
            f"count {count} runs past the end of the source allocation at 0x{src:x} "
            f"({src_span.remaining} bytes left)",
        )
    return _Copy(dst_span, src_span, count, kind)


def _count_copy(copy: _Copy, counter: str | None) -> None:
    """Count an accepted copy in memcpy_calls (plus `counter`) and the byte counters."""
    direction = ("h2h", "h2d", "d2h", "d2d")[copy.kind]
    with LOCK:
        STATE.count("memcpy_calls")
        if counter is not None:
            STATE.count(counter)
        STATE.count("memcpy_bytes", copy.count)
        STATE.count(f"{direction}_bytes", copy.count)


# ----------------------------------------------------------------------------- events


@api("acl.rt.create_event", fail=zero_ret)
def create_event() -> tuple[int, int]:
    """(event, ret): a new event in the current context."""
    current_context()
    event = _events.Event(STATE.new_handle())
    _events.add_event(event)
    STATE.count("event_creations")
    return event.handle, 0


@api("acl.rt.destroy_event", int)
def destroy_event(event: int) -> int:
    """Destroy an event (its queued stamp, if any, still runs harmlessly)."""
    current_context()
    _events.remove_event(event)
    return 0


@api("acl.rt.record_event", int, int)
def record_event(event: int, stream: int) -> int:
    """Queue the event on `stream`: it completes when the stream's earlier work has run."""
    target = stream_in(stream, current_context())
    _events.find_event(event).record(target)
    return 0


@api("acl.rt.synchronize_event", int, fault="after")
def synchronize_event(event: int) -> int:
    """Block until the stream has reached the event."""
    current_context()
    _events.find_event(event).wait()
    return 0


@api("acl.rt.synchronize_event_with_timeout", int, int, fault="after")
def synchronize_event_with_timeout(event: int, timeout: int) -> int:
    """synchronize_event waiting at most `timeout` ms (-1: no limit, 0: only look); 507047
    (ACL_ERROR_RT_EVENT_SYNC_TIMEOUT) when the stream has not reached the event by then, 107000
    for a timeout below -1 (hicann/ge aclrtSynchronizeEventWithTimeoutImpl; the binding parses
    the timeout as a C int)."""
    if not -(2**31) <= timeout < 2**31:
        side = "greater than maximum" if timeout > 0 else "less than minimum"
        raise OverflowError(f"signed integer is {side}")
    if timeout < -1:
        raise AclFailure(
            _AclCode.RT_PARAM_INVALID, f"timeout must be in [-1, INT_MAX] ms, got {timeout}"
        )
    current_context()
    if not _events.find_event(event).wait(None if timeout < 0 else timeout / 1000):
        raise AclFailure(
            _AclCode.RT_EVENT_SYNC_TIMEOUT,
            f"event 0x{event:x}: its stream did not reach it within {timeout} ms",
        )
    return 0


@api("acl.rt.stream_wait_event", int, int)
def stream_wait_event(stream: int, event: int) -> int:
    """Work queued on `stream` after this waits until the event's last record has completed
    (an event never recorded does not hold it)."""
    target = stream_in(stream, current_context())
    waited = _events.find_event(event)
    target.submit("acl.rt.stream_wait_event", waited.waiter())
    waited.order(target)
    return 0


@api("acl.rt.event_elapsed_time", int, int, fail=lambda code, args: (0.0, code))
def event_elapsed_time(start: int, end: int) -> tuple[float, int]:
    """(ms, ret): stream time from `start` to `end`; 507006 unless both have completed."""
    current_context()
    begun = _events.find_event(start).stamp()
    ended = _events.find_event(end).stamp()
    return (ended - begun) * 1000.0, 0
