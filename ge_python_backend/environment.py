"""Every environment variable the package reads, declared once: name, default and meaning.

A module reads a variable through the name declared here (`os.environ.get(ACL_RUNTIME.name)`),
so this list is complete: a test fails on a `GE_*` name written anywhere else in the package,
and the documentation's reference page is generated from `VARIABLES`. Standard library only:
Triton's stub imports it (the runtime and the device host's client read variables).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentVariable:
    name: str
    default: str  # what applies when it is unset, as the reference shows it
    meaning: str  # one line; the reference links its section in environment-details
    reader: str  # which processes read it


SERVER = "the server's processes (stubs, device hosts) and the commands"
EMULATOR = "every process using the emulator"
DEVICE_HOST = "the stubs of `device_host` models and the device hosts"

ACL_RUNTIME = EnvironmentVariable(
    "GE_PYTHON_BACKEND_ACL",
    "unset",
    "`pyacl` or `emulator`: overrides every model's `acl_runtime` and the commands' `--runtime`",
    SERVER,
)
RUN_DIR = EnvironmentVariable(
    "GE_PYTHON_BACKEND_RUN_DIR",
    "`/dev/shm/ge-python-backend-<uid>`",
    "where processes record what they hold on each device (`placement/`), and the device hosts' "
    "sockets and logs",
    SERVER,
)
REPOSITORY_KEY = EnvironmentVariable(
    "GE_PYTHON_BACKEND_REPOSITORY_KEY",
    "the key `serve` left for the server's port in the run directory",
    "the key of Triton's model-repository API (load, unload, index) the project's clients send",
    "the commands (`watch`, `tune`, `serve`'s watcher)",
)
DEVICE_HOST_SHARE_CPU = EnvironmentVariable(
    "GE_DEVICE_HOST_SHARE_CPU",
    "`1`",
    "`1`: an inline batch's stub and device host hand one CPU over; `0`: the scheduler picks",
    DEVICE_HOST,
)
DEVICE_HOST_IDLE_EXIT_S = EnvironmentVariable(
    "GE_DEVICE_HOST_IDLE_EXIT_S",
    "`10`",
    "seconds a device host started by a stub stays up after its last stub left; `0` never stops",
    DEVICE_HOST,
)
DEVICE_HOST_STREAMS = EnvironmentVariable(
    "GE_DEVICE_HOST_STREAMS",
    "`4`",
    "streams of a device host's pool (1..64), each with one work space and one I/O area its "
    "models share",
    DEVICE_HOST,
)
DEVICE_HOST_WORK_SPACE = EnvironmentVariable(
    "GE_DEVICE_HOST_WORK_SPACE",
    "`shared`",
    "`shared`: a device host's models share one work space and one I/O area per stream; "
    "`per-lane`: a work space and buffers per lane",
    DEVICE_HOST,
)
DEVICE_HOST_ZERO_WORK_SPACE = EnvironmentVariable(
    "GE_DEVICE_HOST_ZERO_WORK_SPACE",
    "`off`",
    "`on`: zero a shared work space before an execution of another model than the last one",
    DEVICE_HOST,
)
EMULATOR_DEVICE_COUNT = EnvironmentVariable(
    "GE_EMULATOR_DEVICE_COUNT", "`8`", "number of emulated NPUs (≥ 1), read at `acl.init`", EMULATOR
)
EMULATOR_SOC = EnvironmentVariable(
    "GE_EMULATOR_SOC",
    "`Ascend310P3`",
    "the SoC the emulated NPUs are, which gives their memory; read at `acl.init`",
    EMULATOR,
)
EMULATOR_DEVICE_MEMORY = EnvironmentVariable(
    "GE_EMULATOR_DEVICE_MEMORY",
    "the SoC's",
    "bytes of memory per emulated NPU, shared by every process of the emulated host",
    EMULATOR,
)
EMULATOR_MAX_PROCESSES = EnvironmentVariable(
    "GE_EMULATOR_MAX_PROCESSES",
    "`64`",
    "processes that may open one emulated NPU (pyACL's limit; `32` as in a VM)",
    EMULATOR,
)
EMULATOR_PROCESS_MEMORY = EnvironmentVariable(
    "GE_EMULATOR_PROCESS_MEMORY",
    "`117440512` (112 MiB)",
    "device memory a process holds once it has opened an emulated NPU",
    EMULATOR,
)
EMULATOR_RUN_MODE = EnvironmentVariable(
    "GE_EMULATOR_RUN_MODE",
    "`host`",
    "`host` (EP: a card in a host) or `device` (RC: the device's own CPU; host memory is device's)",
    EMULATOR,
)
EMULATOR_ORT_THREADS = EnvironmentVariable(
    "GE_EMULATOR_ORT_THREADS",
    "`1`",
    "onnxruntime intra-op threads per loaded emulator model (≥ 1)",
    EMULATOR,
)
EMULATOR_FAULTS = EnvironmentVariable(
    "GE_EMULATOR_FAULTS",
    "unset",
    "fault injection: `<call>:<code>:<n>` entries (`mdl.execute_async:507011:3`)",
    EMULATOR,
)
EMULATOR_TIMING = EnvironmentVariable(
    "GE_EMULATOR_TIMING",
    "unset: no sleeping",
    "device timing model: `execute_us=...,copy_gbps=...` or `profile=resnet50-310p3`",
    EMULATOR,
)
EMULATOR_HOST_DIR = EnvironmentVariable(
    "GE_EMULATOR_HOST_DIR",
    "`/dev/shm/ge-emulator-<uid>`",
    "the emulated host: processes with the same directory share its devices",
    EMULATOR,
)
EMULATOR_STATS_DIR = EnvironmentVariable(
    "GE_EMULATOR_STATS_DIR",
    "unset",
    "each process writes `<dir>/emulator-<pid>.json` (calls, bytes, memory held) at exit",
    EMULATOR,
)

VARIABLES = (
    ACL_RUNTIME,
    RUN_DIR,
    REPOSITORY_KEY,
    DEVICE_HOST_SHARE_CPU,
    DEVICE_HOST_IDLE_EXIT_S,
    DEVICE_HOST_STREAMS,
    DEVICE_HOST_WORK_SPACE,
    DEVICE_HOST_ZERO_WORK_SPACE,
    EMULATOR_DEVICE_COUNT,
    EMULATOR_SOC,
    EMULATOR_DEVICE_MEMORY,
    EMULATOR_MAX_PROCESSES,
    EMULATOR_PROCESS_MEMORY,
    EMULATOR_RUN_MODE,
    EMULATOR_ORT_THREADS,
    EMULATOR_FAULTS,
    EMULATOR_TIMING,
    EMULATOR_HOST_DIR,
    EMULATOR_STATS_DIR,
)
