"""Device, context and stream: the ACL objects every other one lives in."""

from __future__ import annotations

import dataclasses
import logging
import threading
import weakref
from collections import Counter
from types import ModuleType

from ge_python_backend.ascend import PROCESSES_PER_DEVICE, PROCESSES_PER_DEVICE_VM, AclCode, RunMode
from ge_python_backend.runtime._acl import ensure_initialized
from ge_python_backend.runtime._resource import Resource, close_all
from ge_python_backend.runtime.errors import AclError, DeviceFullError, check
from ge_python_backend.runtime.placement import describe_holders

__all__ = ["Context", "Device", "DeviceContext", "Event", "Stream"]

logger = logging.getLogger(__name__)

ACL_DDR_MEM, ACL_HBM_MEM = 0, 1  # aclrtMemAttr

# The Context this thread made current last (ACL's current context is per thread). `activate`
# skips acl.rt.set_context when it is already this one; every runtime call that changes the
# thread's current context behind it (set_device, create_context, destroy_context, reset_device)
# updates or forgets it. Code that calls acl.rt.set_context directly must call `forget_current`.
_current = threading.local()


def forget_current() -> None:
    """Make the next `Context.activate` in this thread call acl.rt.set_context."""
    _current.context = _NO_CONTEXT


def _no_context() -> None:
    return None


_NO_CONTEXT = _no_context  # stands for a dead weak reference


# acl.rt.set_device once per (acl module, device) however many Device objects use it, and
# acl.rt.reset_device when the last of them closes.
_devices_lock = threading.Lock()
_device_users: Counter[tuple[int, int]] = Counter()


class Device(Resource):
    """One NPU, opened with `acl.rt.set_device` (after the process-wide `acl.init`).

    `shares_host_memory` is True in RC mode (`acl.rt.get_run_mode` says ACL_DEVICE): host and
    device memory are the same, and copies between them are device-to-device.
    """

    def __init__(self, acl: ModuleType, device_id: int = 0) -> None:
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise ValueError(f"device_id must be a non-negative integer, got {device_id!r}")
        ensure_initialized(acl)
        key = (id(acl), device_id)
        with _devices_lock:
            if not _device_users[key]:
                ret = acl.rt.set_device(device_id)
                if ret == AclCode.UNINITIALIZE:  # acl.finalize was called behind our back
                    ensure_initialized(acl, again=True)
                    ret = acl.rt.set_device(device_id)
                try:
                    check(ret, "acl.rt.set_device", acl)
                except AclError as exc:
                    full = _process_cap_error(exc, device_id)
                    if full is None:
                        raise
                    raise full from exc
                forget_current()  # set_device made the device's default context current
            _device_users[key] += 1
        self.acl = acl
        self.device_id = device_id
        self._own(_release_device, acl, device_id)
        try:
            mode, ret = acl.rt.get_run_mode()
            check(ret, "acl.rt.get_run_mode", acl)
        except BaseException:
            self._abandon()
            raise
        self.shares_host_memory = mode == RunMode.DEVICE

    def memory(self) -> tuple[int, int]:
        """(free, total) bytes of device memory (`acl.rt.get_mem_info`; call under a context of
        this device). HBM where the chip has it, else DDR (UNCONFIRMED which one a 310P reports,
        so the first with a non-zero total wins)."""
        free, total = 0, 0
        for attr in (ACL_HBM_MEM, ACL_DDR_MEM):
            free, total, ret = self.acl.rt.get_mem_info(attr)
            check(ret, "acl.rt.get_mem_info", self.acl)
            if total:
                break
        return int(free), int(total)

    def __repr__(self) -> str:
        return f"Device({self.device_id}{', closed' if self.closed else ''})"


def _process_cap_error(exc: AclError, device_id: int) -> DeviceFullError | None:
    """The DeviceFullError for a set_device refused for pyACL's process cap: 507033
    (ACL_ERROR_RT_DEV_SETUP_ERROR) whose message carries E30003 (hicann/runtime runtime.cc
    PrintfTsdError); None for other failures (507033 alone also means driver trouble)."""
    if exc.code != AclCode.RT_DEV_SETUP_ERROR or "E30003" not in exc.recent:
        return None
    wall = (
        f"pyACL's limit of processes per device is reached ({PROCESSES_PER_DEVICE} on a "
        f"physical machine, {PROCESSES_PER_DEVICE_VM} in a VM; each Triton instance is one)"
    )
    return DeviceFullError(exc, device_id, wall, describe_holders(device_id))


def _release_device(acl: ModuleType, device_id: int) -> None:
    key = (id(acl), device_id)
    with _devices_lock:
        _device_users[key] -= 1
        if _device_users[key]:
            return
        del _device_users[key]
    forget_current()
    check(acl.rt.reset_device(device_id), "acl.rt.reset_device", acl)


class Context(Resource):
    """An explicit context on a device; `activate()` makes it current for the calling thread."""

    def __init__(self, device: Device) -> None:
        acl = device.acl
        handle, ret = acl.rt.create_context(device.device_id)
        check(ret, "acl.rt.create_context", acl)
        self.acl = acl
        self.device = device
        self.handle: int = handle
        self._own(_destroy_context, acl, handle, device)
        device._adopt(self)
        _current.context = weakref.ref(self)  # create_context made it current in this thread

    def activate(self) -> None:
        """`acl.rt.set_context` for this thread unless it is current already: call it before
        any device work (cheap)."""
        if getattr(_current, "context", _NO_CONTEXT)() is self and self._finalizer.alive:
            return  # (alive: another thread may have closed it since it was made current here)
        if self.closed:
            raise RuntimeError(f"{self!r} is closed; it cannot be made current")
        check(self.acl.rt.set_context(self.handle), "acl.rt.set_context", self.acl)
        _current.context = weakref.ref(self)  # weak: the cache must not keep it alive

    def __repr__(self) -> str:
        state = ", closed" if self.closed else ""
        return f"Context(0x{self.handle:x} on device {self.device.device_id}{state})"


def _destroy_context(acl: ModuleType, handle: int, device: Device) -> None:
    del device  # held only so the device outlives the context
    forget_current()
    check(acl.rt.destroy_context(handle), "acl.rt.destroy_context", acl)


class DeviceContext(Resource):
    """A lease on this process's one context of a device (`context`), shared by every `Session`
    on it: the first lease opens the device and creates the context, the last one's `close()`
    destroys the context and releases the device.

    One context per device and process, as a device host needs: threads of a process may share
    a context (aclrtCreateContext), and each context holds device memory of its own. Whatever is
    created in `context` must be closed before the lease that made it (a `Session` closes its
    lanes first); what its models share (`model.py`'s weights) lives while any of them does.
    """

    def __init__(self, acl: ModuleType, device_id: int = 0) -> None:
        key = (id(acl), device_id)
        with _shared_lock:
            shared = _shared_contexts.get(key)
            if shared is None:
                device = Device(acl, device_id)
                try:
                    shared = _SharedContext(Context(device), device)
                except BaseException:
                    device._abandon()
                    raise
                _shared_contexts[key] = shared
            shared.users += 1
        self.context = shared.context
        self._own(_leave_context, key, shared)

    def __repr__(self) -> str:
        return f"DeviceContext({self.context!r}{', closed' if self.closed else ''})"


@dataclasses.dataclass
class _SharedContext:
    context: Context
    device: Device
    users: int = 0


_shared_lock = threading.Lock()
_shared_contexts: dict[tuple[int, int], _SharedContext] = {}


def _leave_context(key: tuple[int, int], shared: _SharedContext) -> None:
    with _shared_lock:
        shared.users -= 1
        if shared.users:
            return
        del _shared_contexts[key]
    close_all([shared.context, shared.device])


def create_in_context(
    owner: Resource, context: Context, create: str, release: str, *args: object
) -> int:
    """`acl.rt.<create>(*args)` in `context`: the new object's handle (or address), which
    `acl.rt.<release>(handle)` releases when `owner` closes (before `context` does)."""
    context.activate()
    handle, ret = getattr(context.acl.rt, create)(*args)
    check(ret, f"acl.rt.{create}", context.acl)
    owner._own(_release_in_context, context, release, handle)
    context._adopt(owner)
    return handle


def _release_in_context(context: Context, release: str, handle: int) -> None:
    context.activate()
    check(getattr(context.acl.rt, release)(handle), f"acl.rt.{release}", context.acl)


class Stream(Resource):
    """A stream in `context` for queued work (`acl.mdl.execute_async`)."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.handle = create_in_context(self, context, "create_stream", "destroy_stream")

    def synchronize(self, timeout_ms: int = 0) -> None:
        """Block until all work queued on the stream has finished (releases the GIL).

        With `timeout_ms` > 0 it waits at most that long (`synchronize_stream_with_timeout`);
        a stream still busy then raises AclError with ACL's timeout code.
        """
        self.context.activate()
        acl = self.context.acl
        with_timeout = getattr(acl.rt, "synchronize_stream_with_timeout", None)
        if timeout_ms > 0 and with_timeout is not None:
            check(
                with_timeout(self.handle, timeout_ms), "acl.rt.synchronize_stream_with_timeout", acl
            )
            return
        if timeout_ms > 0 and not _warned_no_timeout:
            _warn_no_timeout()
        check(acl.rt.synchronize_stream(self.handle), "acl.rt.synchronize_stream", acl)

    def wait(self, event: Event) -> None:
        """Work queued on this stream from now on waits until `event`'s last record has
        completed (`acl.rt.stream_wait_event`); the host does not wait."""
        acl = self.context.acl
        check(acl.rt.stream_wait_event(self.handle, event.handle), "acl.rt.stream_wait_event", acl)


_warned_no_timeout = False


def _warn_no_timeout() -> None:
    """Older CANN releases may lack the call (UNCONFIRMED which): say so once, wait unbounded."""
    global _warned_no_timeout
    _warned_no_timeout = True
    logger.warning(
        "this pyACL has no acl.rt.synchronize_stream_with_timeout; execute_timeout_ms is not "
        "enforced and a hung execution blocks its instance"
    )


class Event(Resource):
    """An event in `context`: recorded on a stream, it marks a point of the stream's work."""

    def __init__(self, context: Context) -> None:
        self.context = context
        self.handle = create_in_context(self, context, "create_event", "destroy_event")

    def record(self, stream: Stream) -> None:
        """Queue the event on `stream`; it completes when the work queued before it has run."""
        acl = self.context.acl
        check(acl.rt.record_event(self.handle, stream.handle), "acl.rt.record_event", acl)

    def synchronize(self) -> None:
        """Block until the event's last record has completed (`acl.rt.synchronize_event`)."""
        acl = self.context.acl
        self.context.activate()
        check(acl.rt.synchronize_event(self.handle), "acl.rt.synchronize_event", acl)

    def reached(self, timeout_ms: int) -> bool | None:
        """Wait until the event's last record has completed, at most `timeout_ms` (-1: no
        limit; `acl.rt.synchronize_event_with_timeout`): True if it has, False if not by then,
        None when this pyACL lacks the call (older CANN)."""
        acl = self.context.acl
        with_timeout = getattr(acl.rt, "synchronize_event_with_timeout", None)
        if with_timeout is None:
            return None
        self.context.activate()
        ret = with_timeout(self.handle, timeout_ms)
        if ret == AclCode.RT_EVENT_SYNC_TIMEOUT:
            return False
        check(ret, "acl.rt.synchronize_event_with_timeout", acl)
        return True

    def seconds_since(self, start: Event) -> float:
        """Device time from `start` to this event (both completed), in seconds."""
        acl = self.context.acl
        ms, ret = acl.rt.event_elapsed_time(start.handle, self.handle)
        check(ret, "acl.rt.event_elapsed_time", acl)
        return float(ms) / 1000.0
