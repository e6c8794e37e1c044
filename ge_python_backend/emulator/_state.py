"""Process state of the emulated runtime, below every module that holds a resource: the init flag,
the devices, data buffers and datasets, handles, counters, `LOCK` and `AclFailure`.

Each other registry lives next to its type, above this module: contexts, streams and the
calling thread's current context in `_streams.py`, tensor descriptors in `_tensors.py`, model
descriptions and loaded models in `_models.py`. The `acl` modules mutate them under `LOCK`. The
recent error message is per OS thread (`threading.local`), as in the real runtime.
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass, field

from ge_python_backend.aipp import DynamicAippParams
from ge_python_backend.ascend import AclCode, RunMode, describe_code
from ge_python_backend.emulator._ledger import DeviceLedger, Refusal
from ge_python_backend.environment import EMULATOR_RUN_MODE

DEVICE_ADDRESS_BASE = 0xD000_0000_0000_0000
# Handles (contexts, streams, datasets, data buffers, descs) live above the user-space address
# range, so a handle passed where a host pointer is expected is recognised and refused.
HANDLE_BASE = 0xA000_0000_0000_0000
HANDLE_STEP = 0x40
POISON = 0xA5
DEFAULT_DEVICE_COUNT = 8
# The run mode (RunMode.HOST, "EP", or RunMode.DEVICE, "RC"): GE_EMULATOR_RUN_MODE=host|device.
RUN_MODE_ENV = EMULATOR_RUN_MODE.name


class AclFailure(Exception):
    """Raised inside the emulator for an ACL failure; the API wrapper turns it into a ret code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = int(code)  # a plain int, as real pyACL returns


def describe(code: int) -> str:
    """`NAME (code)` for messages."""
    return f"{describe_code(code)[0]} ({code})"


@dataclass(eq=False)
class Device:
    """One emulated NPU: this process's row in the host's ledger of it (`_ledger.py`: the
    processes that opened it, the memory each holds) and the count of `set_device` calls its
    default context (`_streams.DEFAULT_CONTEXTS`) serves. Callers hold `LOCK`."""

    id: int
    ledger: DeviceLedger
    refcount: int = 0

    @property
    def capacity(self) -> int:
        """The device's memory in bytes."""
        return self.ledger.capacity

    def free(self) -> int:
        """Bytes of device memory no process on the host holds."""
        return self.capacity - self.ledger.used()

    def open_context(self) -> None:
        """Count a new context of this process on the device; 507033 (E30003) for a process
        over the cap, 207001 when the memory of opening the device is not free."""
        refusal = self.ledger.open_context()
        if refusal is None:
            return
        if refusal.processes >= self.ledger.max_processes:
            # hicann/runtime: the TSD open fails with E30003, runtime.cc PrintfTsdError logs
            # it, and DeviceRetain's failure reaches aclrtSetDevice as RT_ERROR_DEVICE_RETAIN.
            raise AclFailure(
                AclCode.RT_DEV_SETUP_ERROR,
                f"E30003 TsdOpen failed:The number of started NN processes exceeds the limit. "
                f"devId={self.id}: {refusal.processes} processes hold the device, at most "
                f"{self.ledger.max_processes} (GE_EMULATOR_MAX_PROCESSES); device retain error",
            )
        raise self._out_of_memory(refusal, self.ledger.process_memory, "opening the device")

    def close_context(self) -> None:
        """A context of this process on the device is gone."""
        self.ledger.close_context()

    def charge(self, nbytes: int, code: int, purpose: str) -> None:
        """Hold `nbytes` of the device's memory for `purpose`, else fail with `code`."""
        refusal = self.ledger.charge(nbytes)
        if refusal is not None:
            raise self._out_of_memory(refusal, nbytes, purpose, code)

    def release(self, nbytes: int) -> None:
        """Give back `nbytes` held by `charge`."""
        self.ledger.release(nbytes)

    def _out_of_memory(
        self, refusal: Refusal, nbytes: int, purpose: str, code: int = AclCode.RT_MEMORY_ALLOCATION
    ) -> AclFailure:
        holders = ", ".join(
            f"pid {h.pid} {h.bytes} bytes" for h in sorted(refusal.holders, key=lambda h: -h.bytes)
        )
        return AclFailure(
            code,
            f"device {self.id} is out of memory: {purpose} needs {nbytes} bytes, "
            f"{self.capacity - refusal.used} of {self.capacity} free "
            f"(GE_EMULATOR_DEVICE_MEMORY); held by {holders or 'nobody'}",
        )


@dataclass(eq=False)
class Handled:
    """An object the runtime hands out as a handle (an int); `live` until it is destroyed."""

    handle: int
    live: bool = field(default=True, init=False)


@dataclass(eq=False)
class DataBuffer(Handled):
    """`aclDataBuffer`: an address and a size; owns no memory."""

    addr: int
    size: int


@dataclass(eq=False)
class Dataset(Handled):
    """`aclmdlDataset`: an ordered list of data buffers; owns none of them. `gear_set` records
    that a set_* call chose a gear for it (GE then skips the input size check); `tensor_descs`
    holds the descriptors of set_dataset_tensor_desc by buffer index."""

    buffers: list[DataBuffer] = field(default_factory=list)
    gear_set: bool = False
    tensor_descs: dict[int, int] = field(default_factory=dict)


class _Tls(threading.local):
    recent_error: str = ""
    api: str = "acl"


class State:
    """The process's init flag, devices, data buffers, datasets, dynamic AIPP parameters,
    handles and counters (one instance: `STATE`)."""

    def __init__(self) -> None:
        self.initialized = False
        self.run_mode = RunMode.HOST
        self.soc = ""
        self.device_count = DEFAULT_DEVICE_COUNT
        self.devices: dict[int, Device] = {}
        self.data_buffers: dict[int, DataBuffer] = {}
        self.datasets: dict[int, Dataset] = {}
        self.aipps: dict[int, DynamicAippParams] = {}  # aclmdlAIPP handles of create_aipp
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


def env_run_mode() -> RunMode:
    """The run mode GE_EMULATOR_RUN_MODE names (default host); ValueError if unknown."""
    text = os.environ.get(RUN_MODE_ENV, "").strip().lower() or "host"
    modes = {mode.name.lower(): mode for mode in RunMode}
    if text not in modes:
        raise ValueError(f"{RUN_MODE_ENV} must be 'host' or 'device', got {text!r}")
    return modes[text]


def device_mode() -> bool:
    """True when the emulator runs as on the device's own CPU (RC): host memory is device memory."""
    return STATE.run_mode == RunMode.DEVICE


def require_init() -> None:
    """100001 unless `acl.init` succeeded."""
    if not STATE.initialized:
        raise AclFailure(
            AclCode.UNINITIALIZE, "acl.init has not been called (or acl.finalize already was)"
        )
