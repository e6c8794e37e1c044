"""Per-process accounting, and the `GE_EMULATOR_STATS_DIR` file written at finalize and at exit."""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import warnings
from pathlib import Path

from ge_python_backend.emulator._memory import MEMORY
from ge_python_backend.emulator._models import MODEL_DESCS, MODELS
from ge_python_backend.emulator._state import LOCK, STATE
from ge_python_backend.emulator._streams import CONTEXTS, STREAMS
from ge_python_backend.emulator._tensors import TENSOR_DESCS
from ge_python_backend.environment import EMULATOR_STATS_DIR

ENV = EMULATOR_STATS_DIR.name

# Counters always present in `stats()` (zero until something happens).
COUNTERS = (
    "malloc_calls",
    "malloc_host_calls",
    "free_calls",
    "free_host_calls",
    "memcpy_calls",
    "memcpy_async_calls",
    "memcpy_bytes",
    "h2d_bytes",
    "d2h_bytes",
    "d2d_bytes",
    "h2h_bytes",
    "memset_calls",
    "memset_async_calls",
    "execute_calls",
    "execute_async_calls",
    "jpegd_calls",
    "vpc_calls",
    "dvpp_channels_created",
    "output_allocations",  # device memory ACL allocated for empty output buffers (sync execute)
    "set_dynamic_calls",
    "model_loads",
    "model_unloads",
    "dataset_creations",
    "data_buffer_creations",
    "stream_creations",
    "context_creations",
    "failures",
    "async_failures",
    "faults_injected",
    # what acl.finalize found still live and released
    "leaked_device_allocations",
    "leaked_host_allocations",
    "leaked_data_buffers",
    "leaked_datasets",
    "leaked_model_descs",
    "leaked_tensor_descs",
    "leaked_models",
    "leaked_streams",
    "leaked_contexts",
)


def stats() -> dict[str, int]:
    """Live resources and cumulative counters of this process (never reset by acl.finalize)."""
    with LOCK:
        result = {
            "live_device_allocations": MEMORY.live_device,
            "device_bytes_in_use": MEMORY.device_bytes,
            "live_host_allocations": MEMORY.live_host,
            "host_bytes_in_use": MEMORY.host_bytes,
            "live_data_buffers": len(STATE.data_buffers),
            "live_datasets": len(STATE.datasets),
            "live_model_descs": len(MODEL_DESCS),
            "live_tensor_descs": len(TENSOR_DESCS),
            "loaded_models": len(MODELS),
            "live_streams": len(STREAMS),
            "live_contexts": len(CONTEXTS),
        }
        result.update({name: STATE.counters[name] for name in COUNTERS})
    return result


def write_file() -> None:
    """Write `<GE_EMULATOR_STATS_DIR>/emulator-<pid>.json` atomically (if the variable is set)."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    path = Path(directory) / f"emulator-{os.getpid()}.json"
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    document = {"pid": os.getpid(), "argv": list(sys.argv), "stats": stats()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(document, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError as exc:
        warnings.warn(f"{ENV}: cannot write {path}: {exc}", RuntimeWarning, stacklevel=2)


atexit.register(write_file)
