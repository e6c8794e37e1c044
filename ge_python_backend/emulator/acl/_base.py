"""The emulated `acl` module's own functions: init/finalize, data buffers, recent error message.

Calling conventions follow pyACL: ret last in tuples, bare values where the C function returns a
value, `TypeError("<acl.xxx> args parse failed")` for unparsable arguments, and integer ACL codes
(never exceptions) for runtime failures; `get_recent_err_msg()` says why the last call failed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from ge_python_backend.ascend import DEFAULT_SOC as _DEFAULT_SOC
from ge_python_backend.ascend import NUMPY_BY_ACL as _NUMPY_BY_ACL
from ge_python_backend.ascend import PROCESS_DEVICE_MEMORY as _PROCESS_DEVICE_MEMORY
from ge_python_backend.ascend import PROCESSES_PER_DEVICE as _PROCESSES_PER_DEVICE
from ge_python_backend.ascend import AclCode as _AclCode
from ge_python_backend.ascend import soc_device as _soc_device
from ge_python_backend.emulator import _stats, timing
from ge_python_backend.emulator._api import api, value
from ge_python_backend.emulator._flights import FLIGHTS
from ge_python_backend.emulator._ledger import DeviceLedger
from ge_python_backend.emulator._memory import MEMORY
from ge_python_backend.emulator._models import MODEL_DESCS, MODELS
from ge_python_backend.emulator._state import (
    DEFAULT_DEVICE_COUNT,
    LOCK,
    STATE,
    TLS,
    AclFailure,
    DataBuffer,
    Device,
    env_int,
    env_run_mode,
    require_init,
)
from ge_python_backend.emulator._streams import CONTEXTS, CURRENT, DEFAULT_CONTEXTS, STREAMS
from ge_python_backend.emulator._tensors import TENSOR_DESCS
from ge_python_backend.environment import (
    EMULATOR_DEVICE_COUNT,
    EMULATOR_DEVICE_MEMORY,
    EMULATOR_MAX_PROCESSES,
    EMULATOR_PROCESS_MEMORY,
    EMULATOR_SOC,
)

# The CANN version the emulator reports (the calling conventions it follows are 8.x's).
VERSION = (8, 0, 0)
# The SoC the emulated devices are (acl.get_soc_name), and so their memory: GE_EMULATOR_SOC.
SOC_ENV = EMULATOR_SOC.name
# aclLogLevel (acl_base.h): ACL_DEBUG 0, ACL_INFO 1, ACL_WARNING 2, ACL_ERROR 3.
_LOG_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR}
_APP_LOG = logging.getLogger("ge_python_backend.emulator.app_log")


@api("acl.init", str, optional=1)
def init(config_path: str = "") -> int:
    """Initialise; `config_path` (optional) must name a readable JSON file."""
    with LOCK:
        if STATE.initialized:
            raise AclFailure(
                _AclCode.REPEAT_INITIALIZE,
                "acl.init was already called in this process (call acl.finalize first)",
            )
        if config_path:
            _check_config(config_path)
        count = env_int(EMULATOR_DEVICE_COUNT.name, DEFAULT_DEVICE_COUNT, 1)
        soc = os.environ.get(SOC_ENV, "").strip() or _DEFAULT_SOC
        memory = env_int(EMULATOR_DEVICE_MEMORY.name, _soc_device(soc).memory, 1)
        max_processes = env_int(EMULATOR_MAX_PROCESSES.name, _PROCESSES_PER_DEVICE, 1)
        process_memory = env_int(EMULATOR_PROCESS_MEMORY.name, _PROCESS_DEVICE_MEMORY, 0)
        run_mode = env_run_mode()
        directory = timing.host_directory()
        STATE.initialized = True
        STATE.run_mode = run_mode
        STATE.soc = soc
        STATE.device_count = count
        STATE.devices = {
            i: Device(i, DeviceLedger(directory, i, memory, max_processes, process_memory))
            for i in range(count)
        }
    return 0


@api("acl.finalize")
def finalize() -> int:
    """Wait for every stream, write the stats file (live_* show what leaked), then release all
    the process still holds, adding it to the leaked_* counters."""
    with LOCK:
        if not STATE.initialized:
            raise AclFailure(_AclCode.REPEAT_FINALIZE, "acl.finalize without a matching acl.init")
        STATE.initialized = False
        streams = list(STREAMS.values())
        for ctx in CONTEXTS.values():
            ctx.live = False
            if ctx.default_stream is not None:
                streams.append(ctx.default_stream)
    for stream in streams:
        stream.stop()
    _stats.write_file()
    with LOCK:
        _release_everything()
    CURRENT.context = None
    return 0


@api("acl.get_recent_err_msg", fault="none")
def get_recent_err_msg() -> str:
    """Why the last failing call of this thread failed ("" if none did)."""
    return TLS.recent_error


@api("acl.app_log", int, str, fail=value(None), fault="none")
def app_log(level: int, message: str) -> None:
    """Write `message` to the application log (here: logging, logger
    ge_python_backend.emulator.app_log); pyACL's returns None and needs no acl.init."""
    _APP_LOG.log(_LOG_LEVELS.get(level, logging.ERROR), "%s", message)


@api("acl.get_soc_name", fail=value(None), fault="none")
def get_soc_name() -> str:
    """The SoC name (GE_EMULATOR_SOC, default Ascend310P3; None before acl.init, as a NULL C
    string)."""
    require_init()
    return STATE.soc


@api("acl.get_version", fail=lambda code, args: (0, 0, 0, code))
def get_version() -> tuple[int, int, int, int]:
    """(major, minor, patch, ret)."""
    return (*VERSION, 0)


@api("acl.data_type_size", int, fail=value(0), fault="none")
def data_type_size(dtype: int) -> int:
    """Element size in bytes of an aclDataType (0 if unknown)."""
    numpy_dtype = _NUMPY_BY_ACL.get(dtype)
    return 0 if numpy_dtype is None else numpy_dtype.itemsize


@api("acl.create_data_buffer", int, int, fail=value(0), fault="none")
def create_data_buffer(ptr: int, size: int) -> int:
    """A data buffer recording (ptr, size); (0, 0) makes an empty one. 0 on failure."""
    require_init()
    if ptr < 0 or size < 0 or (ptr == 0) != (size == 0):
        raise AclFailure(_AclCode.INVALID_PARAM, f"invalid data buffer ptr=0x{ptr:x} size={size}")
    buf = DataBuffer(STATE.new_handle(), ptr, size)
    with LOCK:
        STATE.data_buffers[buf.handle] = buf
        STATE.count("data_buffer_creations")
    return buf.handle


@api("acl.destroy_data_buffer", int, fault="none")
def destroy_data_buffer(data_buffer: int) -> int:
    """Destroy the descriptor only (the memory is not freed)."""
    require_init()
    with LOCK:
        buf = _data_buffer(data_buffer)
        buf.live = False
        del STATE.data_buffers[data_buffer]
    return 0


@api("acl.get_data_buffer_addr", int, fail=value(0), fault="none")
def get_data_buffer_addr(data_buffer: int) -> int:
    """The buffer's address (0 for a bad handle)."""
    require_init()
    return _data_buffer(data_buffer).addr


@api("acl.get_data_buffer_size_v2", int, fail=value(0), fault="none")
def get_data_buffer_size_v2(data_buffer: int) -> int:
    """The buffer's size in bytes (0 for a bad handle)."""
    require_init()
    return _data_buffer(data_buffer).size


@api("acl.get_data_buffer_size", int, fail=value(0), fault="none")
def get_data_buffer_size(data_buffer: int) -> int:
    """Deprecated: the size as the C uint32 the old API returns."""
    require_init()
    return _data_buffer(data_buffer).size & 0xFFFF_FFFF


@api("acl.update_data_buffer", int, int, int, fault="none")
def update_data_buffer(data_buffer: int, ptr: int, size: int) -> int:
    """Rebind the buffer to (ptr, size); the old memory is not freed."""
    require_init()
    if ptr < 0 or size < 0 or (ptr == 0) != (size == 0):
        raise AclFailure(_AclCode.INVALID_PARAM, f"invalid data buffer ptr=0x{ptr:x} size={size}")
    with LOCK:
        buf = _data_buffer(data_buffer)
        buf.addr, buf.size = ptr, size
    return 0


def _release_everything() -> None:
    """Drop every resource (caller holds LOCK); handles and pointers become invalid."""
    devices, hosts = MEMORY.release_all()
    for device in STATE.devices.values():
        device.ledger.leave()
    leaks = {
        "leaked_device_allocations": devices,
        "leaked_host_allocations": hosts,
        "leaked_data_buffers": len(STATE.data_buffers),
        "leaked_datasets": len(STATE.datasets),
        "leaked_model_descs": len(MODEL_DESCS),
        "leaked_tensor_descs": len(TENSOR_DESCS),
        "leaked_models": len(MODELS),
        "leaked_streams": len(STREAMS),
        "leaked_contexts": len(CONTEXTS),
    }
    for name, count in leaks.items():
        STATE.count(name, count)
    for buf in STATE.data_buffers.values():
        buf.live = False
    for dataset in STATE.datasets.values():
        dataset.live = False
    for model in MODELS.values():
        model.live = False
    for registry in (
        STATE.data_buffers,
        STATE.datasets,
        MODEL_DESCS,
        TENSOR_DESCS,
        MODELS,
        FLIGHTS,
        STREAMS,
        CONTEXTS,
        DEFAULT_CONTEXTS,
    ):
        registry.clear()
    STATE.devices = {}


def _check_config(config_path: str) -> None:
    try:
        text = Path(config_path).read_text()
    except OSError as exc:
        raise AclFailure(_AclCode.INVALID_FILE, f"cannot read config {config_path}: {exc}") from exc
    try:
        json.loads(text)
    except ValueError as exc:
        raise AclFailure(
            _AclCode.PARSE_FILE, f"config {config_path} is not valid JSON: {exc}"
        ) from exc


def _data_buffer(handle: int) -> DataBuffer:
    buf = STATE.data_buffers.get(handle)
    if buf is None:
        raise AclFailure(_AclCode.INVALID_PARAM, f"0x{handle:x} is not a live data buffer handle")
    return buf
