"""The only layer that talks to ACL (real pyACL or the CPU emulator, chosen explicitly, or by
the container of the `.om` opened when nothing chooses: `selected_runtime`).

Importing this package does not import `acl`; `load_acl` (called by `Session`) does.
"""

from __future__ import annotations

from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.runtime._acl import (
    ENV_VAR,
    RUNTIMES,
    AclProbe,
    load_acl,
    om_runtime,
    probe_acl,
    selected_runtime,
)
from ge_python_backend.runtime.batching import Chunk, plan_chunks
from ge_python_backend.runtime.describe import ModelFileDescription, describe_om
from ge_python_backend.runtime.device import Context, Device, Stream
from ge_python_backend.runtime.errors import (
    AclError,
    ExecuteTimeoutError,
    InputError,
    ModelFileError,
    RuntimeSelectionError,
    check,
)
from ge_python_backend.runtime.memory import DeviceBuffer, HostBuffer
from ge_python_backend.runtime.model import Dataset, Model
from ge_python_backend.runtime.session import (
    ACL_INT_MAX,
    DEVICE_TIMING_PERIOD,
    PIPELINE_DEPTHS,
    PendingBatch,
    Session,
    SessionCounters,
)

__all__ = [
    "ACL_INT_MAX",
    "DEVICE_TIMING_PERIOD",
    "ENV_VAR",
    "RUNTIMES",
    "PIPELINE_DEPTHS",
    "AclError",
    "AclProbe",
    "Chunk",
    "Context",
    "Dataset",
    "Device",
    "ExecuteTimeoutError",
    "DeviceBuffer",
    "GearInfo",
    "HostBuffer",
    "InputError",
    "Model",
    "ModelFileDescription",
    "ModelFileError",
    "PendingBatch",
    "RuntimeSelectionError",
    "Session",
    "SessionCounters",
    "Stream",
    "TensorSpec",
    "check",
    "describe_om",
    "load_acl",
    "om_runtime",
    "plan_chunks",
    "probe_acl",
    "selected_runtime",
]
