"""Process state of the emulated runtime: init flag, devices, contexts, handles, counters.

Every registry lives here; the `acl` modules mutate it under `LOCK`. The current context and the
recent error message are per OS thread (`threading.local`), as in the real runtime.
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ge_python_backend.emulator._models import LoadedModel, ModelDesc
    from ge_python_backend.emulator._streams import Stream
    from ge_python_backend.emulator.acl._tensor import TensorDesc

DEVICE_ADDRESS_BASE = 0xD000_0000_0000_0000
# Handles (contexts, streams, datasets, data buffers, descs) live above the user-space address
# range, so a handle passed where a host pointer is expected is recognised and refused.
HANDLE_BASE = 0xA000_0000_0000_0000
HANDLE_STEP = 0x40
POISON = 0xA5
DEFAULT_DEVICE_COUNT = 8
DEFAULT_DEVICE_MEMORY = 32 << 30
# aclrtRunMode (acl_rt.h): ACL_DEVICE = 0 (the program runs on the device's own CPU, "RC"),
# ACL_HOST = 1 (a host with a PCIe card, "EP"). GE_EMULATOR_RUN_MODE=device|host chooses.
ACL_DEVICE = 0
ACL_HOST = 1
RUN_MODE_ENV = "GE_EMULATOR_RUN_MODE"

# ACL codes the emulator returns (names from acl_base.h, rt_error_codes.h, ge_error_codes.h).
ERROR_NAMES: dict[int, str] = {
    100000: "ACL_ERROR_INVALID_PARAM",
    100001: "ACL_ERROR_UNINITIALIZE",
    100002: "ACL_ERROR_REPEAT_INITIALIZE",
    100003: "ACL_ERROR_INVALID_FILE",
    100006: "ACL_ERROR_PARSE_FILE",
    100011: "ACL_ERROR_INVALID_MODEL_ID",
    100012: "ACL_ERROR_DESERIALIZE_MODEL",
    100013: "ACL_ERROR_PARSE_MODEL",
    100014: "ACL_ERROR_READ_MODEL_FAILURE",
    100017: "ACL_ERROR_MODEL_INPUT_NOT_MATCH",
    100018: "ACL_ERROR_MODEL_OUTPUT_NOT_MATCH",
    100019: "ACL_ERROR_MODEL_NOT_DYNAMIC",
    100037: "ACL_ERROR_REPEAT_FINALIZE",
    107000: "ACL_ERROR_RT_PARAM_INVALID",
    107001: "ACL_ERROR_RT_INVALID_DEVICEID",
    107002: "ACL_ERROR_RT_CONTEXT_NULL",
    107003: "ACL_ERROR_RT_STREAM_CONTEXT",
    107004: "ACL_ERROR_RT_MODEL_CONTEXT",
    107008: "ACL_ERROR_RT_ADDR_UNALIGNED",
    107017: "ACL_ERROR_RT_INVALID_HANDLE",
    145000: "ACL_ERROR_GE_PARAM_INVALID",
    145006: "ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID",
    145007: "ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID",
    145011: "ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID",
    145012: "ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID",
    145013: "ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID",
    145021: "ACL_ERROR_GE_SHAPE_INVALID",
    207000: "ACL_ERROR_RT_FEATURE_NOT_SUPPORT",
    207001: "ACL_ERROR_RT_MEMORY_ALLOCATION",
    207008: "ACL_ERROR_RT_NO_STREAM_RESOURCE",
    500002: "ACL_ERROR_GE_FAILURE",
    507000: "ACL_ERROR_RT_INTERNAL_ERROR",
    507011: "ACL_ERROR_RT_MODEL_EXECUTE",
    507046: "ACL_ERROR_RT_STREAM_SYNC_TIMEOUT",
    507047: "ACL_ERROR_RT_EVENT_SYNC_TIMEOUT",
}


class AclFailure(Exception):
    """Raised inside the emulator for an ACL failure; the API wrapper turns it into a ret code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def describe(code: int) -> str:
    """`NAME (code)` for messages."""
    return f"{ERROR_NAMES.get(code, 'ACL error')} ({code})"


@dataclass(eq=False)
class Device:
    """One emulated NPU: memory capacity and the reference-counted default context."""

    id: int
    capacity: int
    used: int = 0
    refcount: int = 0
    default_context: Context | None = None


@dataclass(eq=False)
class Context:
    """A runtime context; `streams` are the ones created in it (not its default stream)."""

    handle: int
    device: Device
    explicit: bool
    live: bool = True
    streams: dict[int, Stream] = field(default_factory=dict)
    default_stream: Stream | None = None


@dataclass(eq=False)
class DataBuffer:
    """`aclDataBuffer`: an address and a size; owns no memory."""

    handle: int
    addr: int
    size: int
    live: bool = True


@dataclass(eq=False)
class Dataset:
    """`aclmdlDataset`: an ordered list of data buffers; owns none of them. `gear_set` records
    that a set_* call chose a gear for it (GE then skips the input size check); `tensor_descs`
    holds the descriptors of set_dataset_tensor_desc by buffer index."""

    handle: int
    buffers: list[DataBuffer] = field(default_factory=list)
    gear_set: bool = False
    tensor_descs: dict[int, int] = field(default_factory=dict)
    live: bool = True


class _Tls(threading.local):
    context: Context | None = None
    recent_error: str = ""
    api: str = "acl"


class State:
    """Every registry of the process (one instance: `STATE`)."""

    def __init__(self) -> None:
        self.initialized = False
        self.run_mode = ACL_HOST
        self.device_count = DEFAULT_DEVICE_COUNT
        self.devices: dict[int, Device] = {}
        self.contexts: dict[int, Context] = {}
        self.streams: dict[int, Stream] = {}
        self.data_buffers: dict[int, DataBuffer] = {}
        self.datasets: dict[int, Dataset] = {}
        self.descs: dict[int, ModelDesc] = {}
        self.tensor_descs: dict[int, TensorDesc] = {}
        self.dataset_tensor_descs: dict[int, TensorDesc] = {}  # copies datasets own
        self.models: dict[int, LoadedModel] = {}
        self.next_model_id = 1
        self.counters: collections.Counter[str] = collections.Counter()
        self._next_handle = HANDLE_BASE

    def new_handle(self) -> int:
        """A fresh handle value; handles are never reused, so stale ones are always detected."""
        with LOCK:
            self._next_handle += HANDLE_STEP
            return self._next_handle

    def count(self, name: str, amount: int = 1) -> None:
        """Add to a per-process counter (never reset)."""
        with LOCK:
            self.counters[name] += amount


LOCK = threading.RLock()
STATE = State()
TLS = _Tls()


def env_int(name: str, default: int, minimum: int) -> int:
    """Integer environment setting; a bad value raises ValueError naming the variable."""
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = int(text.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {text!r}")
    return value


def env_run_mode() -> int:
    """ACL_DEVICE or ACL_HOST from GE_EMULATOR_RUN_MODE (default host); ValueError if unknown."""
    text = os.environ.get(RUN_MODE_ENV, "").strip().lower() or "host"
    modes = {"host": ACL_HOST, "device": ACL_DEVICE}
    if text not in modes:
        raise ValueError(f"{RUN_MODE_ENV} must be 'host' or 'device', got {text!r}")
    return modes[text]


def device_mode() -> bool:
    """True when the emulator runs as on the device's own CPU (RC): host memory is device memory."""
    return STATE.run_mode == ACL_DEVICE


def require_init() -> None:
    """100001 unless `acl.init` succeeded."""
    if not STATE.initialized:
        raise AclFailure(100001, "acl.init has not been called (or acl.finalize already was)")


def current_context() -> Context:
    """The calling thread's live current context, else 107002 (after the init check)."""
    require_init()
    ctx = TLS.context
    if ctx is None:
        raise AclFailure(
            107002,
            f"no current context in thread {threading.current_thread().name!r}: every thread "
            "must call acl.rt.set_context(context) (or acl.rt.set_device) before runtime calls",
        )
    if not ctx.live:
        raise AclFailure(
            107002,
            f"the current context 0x{ctx.handle:x} of thread {threading.current_thread().name!r} "
            "was destroyed (destroy_context, reset_device or finalize); set a live context",
        )
    return ctx


def live_context(handle: int) -> Context:
    """A live context by handle, else 107017."""
    ctx = STATE.contexts.get(handle)
    if ctx is None or not ctx.live:
        raise AclFailure(107017, f"0x{handle:x} is not a live context handle")
    return ctx
