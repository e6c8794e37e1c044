"""ACL's and ATC's vocabulary as typed values, defined once for every layer.

Return codes (`AclCode`), data types (`DataType` records), tensor formats (`Format`), memcpy kinds
(`MemcpyKind`), run modes (`RunMode`), gear kinds (`GearKind`), ATC's framework codes, gear limit
and output naming, its precision modes (`PrecisionMode`), and how an `.om` starts (`om_container`:
ATC's or the emulator's). The runtime, the emulator, the
tools and the tests take them from here. Imports only the standard library and numpy, and nothing
from the project, so any module (the Triton stub's included) may import it.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = [
    "ATC_DEFAULT_PRECISION_MODE",
    "ATC_INPUT_FORMATS",
    "ATC_MAX_GEARS",
    "ATC_OM_MAGIC",
    "ATC_OUTPUT_TYPES",
    "DEFAULT_SOC",
    "LAYOUT_RANKS",
    "DATA_TYPES",
    "DIMS_NAME_LIMIT",
    "DTYPES_BY_ACL",
    "DTYPES_BY_NUMPY",
    "DTYPES_BY_ONNX",
    "DTYPES_BY_TRITON",
    "DTYPES_BY_TRITON_CONFIG",
    "EMULATOR_OM_MAGIC",
    "NUMPY_BY_ACL",
    "DVPP_LIMITS",
    "PRECISION_LADDER",
    "PRECISION_MODES_NOT_EMULATED",
    "PRECISION_MODES_V2",
    "PRECISION_MODE_ALIASES",
    "PROCESSES_PER_DEVICE",
    "PROCESS_DEVICE_MEMORY",
    "PROCESSES_PER_DEVICE_VM",
    "SOC_DEVICES",
    "AclCode",
    "AtcFramework",
    "DataType",
    "Format",
    "GearKind",
    "DvppLimits",
    "MemcpyKind",
    "OmContainer",
    "PixelFormat",
    "PrecisionMode",
    "RunMode",
    "SocDevice",
    "common_dvpp_limits",
    "converted_tensor_name",
    "describe_code",
    "dvpp_limits",
    "format_name",
    "carved_bytes",
    "malloc_reserved",
    "om_container",
    "om_output_path",
    "soc_device",
    "tensor_name_of_output",
]


class AclCode(enum.IntEnum):
    """An ACL return code with its ACL name and a one-line explanation.

    `AclCode.RT_MODEL_EXECUTE == 507011`; `AclCode(507011).acl_name` is
    "ACL_ERROR_RT_MODEL_EXECUTE" and `.explanation` says what it means. Every code of pyacl-api.md
    section 5, ranges expanded, from acl_base.h, rt_error_codes.h and ge_error_codes.h.
    """

    explanation: str

    def __new__(cls, value: int, explanation: str = "") -> AclCode:
        member = int.__new__(cls, value)
        member._value_ = value
        member.explanation = explanation
        return member

    @property
    def acl_name(self) -> str:
        """The name ACL's headers give the code: `ACL_SUCCESS`, `ACL_ERROR_<member name>`."""
        return "ACL_SUCCESS" if self == 0 else f"ACL_ERROR_{self.name}"

    SUCCESS = 0, "success"
    # acl_base.h: caller and environment errors
    INVALID_PARAM = 100000, "a parameter failed ACL's checks"
    UNINITIALIZE = 100001, "acl.init was not called (or a dump/profiling init is missing)"
    REPEAT_INITIALIZE = 100002, "already initialised or loaded"
    INVALID_FILE = 100003, "the file is missing or unreadable"
    PARSE_FILE = 100006, "the file content could not be parsed"
    INVALID_MODEL_ID = 100011, "the model id is invalid or the model is not loaded"
    DESERIALIZE_MODEL = (
        100012,
        "the .om cannot be deserialised by this CANN; rebuild it with a matching ATC",
    )
    PARSE_MODEL = 100013, "the .om cannot be parsed by this CANN; rebuild it with ATC"
    READ_MODEL_FAILURE = 100014, "the model file is missing or unreadable"
    MODEL_INPUT_NOT_MATCH = 100017, "the input dataset does not match the model"
    MODEL_OUTPUT_NOT_MATCH = 100018, "the output dataset does not match the model"
    MODEL_NOT_DYNAMIC = 100019, "a dynamic-gear API was used on a static model"
    FORMAT_NOT_MATCH = 100027, "the format is not one the call supports"
    UNSUPPORTED_DATA_TYPE = 100026, "the data type is not supported"
    REPEAT_SUBSCRIBE = 100033, "the stream is already subscribed for callbacks"
    STREAM_NOT_SUBSCRIBE = 100034, "the stream is not subscribed for callbacks"
    THREAD_NOT_SUBSCRIBE = 100035, "the thread is not subscribed for callbacks"
    WAIT_CALLBACK_TIMEOUT = 100036, "waiting for a callback timed out"
    REPEAT_FINALIZE = 100037, "acl.finalize was already called"
    NOT_STATIC_AIPP = 100038, "the model has no static AIPP (deprecated, now 145015)"
    PROF_REPEAT_SUBSCRIBE = 148046, "profiling is already subscribed"
    PROF_API_CONFLICT = 148047, "conflicting profiling APIs were used"
    INVALID_MAX_OPQUEUE_NUM_CONFIG = 148048, "invalid operator cache configuration"
    INVALID_OPP_PATH = 148049, "ASCEND_OPP_PATH is unset or wrong"
    OP_UNSUPPORTED_DYNAMIC = 148050, "the operator does not support dynamic shapes"
    RELATIVE_RESOURCE_NOT_CLEARED = 148051, "a related resource was not released"
    UNSUPPORTED_JPEG = 148052, "the JPEG encoding is not supported"
    INVALID_BUNDLE_MODEL_ID = 148053, "invalid bundle model id"
    # acl_base.h: resources and API/hardware mismatch
    BAD_ALLOC = 200000, "memory allocation failed"
    API_NOT_SUPPORT = 200001, "the API is not supported"
    INVALID_DEVICE = 200002, "invalid device (deprecated, now 107001)"
    MEMORY_ADDRESS_UNALIGNED = 200003, "the memory address is not aligned"
    RESOURCE_NOT_MATCH = 200004, "the stream or context passed does not match"
    INVALID_RESOURCE_HANDLE = 200005, "the handle was already destroyed or is in use"
    FEATURE_UNSUPPORTED = 200006, "the feature is not supported"
    STORAGE_OVER_LIMIT = 300000, "storage is over its limit"
    INTERNAL_ERROR = 500000, "internal ACL error"
    FAILURE = 500001, "internal ACL failure"
    GE_FAILURE = 500002, "internal graph engine failure"
    RT_FAILURE = 500003, "internal runtime failure"
    DRV_FAILURE = 500004, "internal driver failure"
    PROFILING_FAILURE = 500005, "internal profiling failure"
    # rt_error_codes.h
    RT_PARAM_INVALID = 107000, "a runtime parameter is invalid"
    RT_INVALID_DEVICEID = 107001, "invalid device id"
    RT_CONTEXT_NULL = (
        107002,
        "no context is current in this thread; call acl.rt.set_context or set_device first",
    )
    RT_STREAM_CONTEXT = 107003, "the stream is not in the current context"
    RT_MODEL_CONTEXT = 107004, "the model is not in the current context"
    RT_STREAM_MODEL = 107005, "the stream is not bound to the model"
    RT_ADDR_UNALIGNED = 107008, "the memory address is not aligned"
    RT_STREAM_SUBSCRIBE = 107011, "stream subscription failed"
    RT_THREAD_SUBSCRIBE = 107012, "thread subscription failed"
    RT_STREAM_NO_CB_REG = 107015, "the callback stream is not subscribed"
    RT_INVALID_MEMORY_TYPE = 107016, "invalid memory type"
    RT_INVALID_HANDLE = 107017, "invalid handle"
    RT_INVALID_MALLOC_TYPE = 107018, "invalid malloc type"
    RT_DEVICE_TASK_ABORT = 107022, "device tasks were aborted"
    RT_FEATURE_NOT_SUPPORT = 207000, "the runtime does not support this feature"
    RT_MEMORY_ALLOCATION = 207001, "out of memory"
    RT_MEMORY_FREE = 207002, "freeing memory failed"
    RT_NO_DEVICE = 207004, "no device is available"
    RT_RESOURCE_ALLOC_FAIL = 207005, "runtime resource allocation failed"
    RT_NO_PERMISSION = 207006, "no permission (is the user in the HwHiAiUser group?)"
    RT_NO_EVENT_RESOURCE = 207007, "no event resource left"
    RT_NO_STREAM_RESOURCE = 207008, "no stream resource left"
    RT_NO_NOTIFY_RESOURCE = 207009, "no notify resource left"
    RT_NO_MODEL_RESOURCE = 207010, "no model resource left"
    RT_NO_CDQ_RESOURCE = 207011, "no CDQ resource left"
    RT_DEVIDE_OOM = 207018, "device memory is exhausted"
    RT_INTERNAL_ERROR = 507000, "internal runtime error"
    RT_TS_ERROR = 507001, "task scheduler error"
    RT_STREAM_TASK_FULL = 507002, "the stream's task queue is full"
    RT_STREAM_TASK_EMPTY = 507003, "the stream's task queue is empty"
    RT_STREAM_NOT_COMPLETE = 507004, "the stream has not completed"
    RT_END_OF_SEQUENCE = 507005, "end of sequence"
    RT_EVENT_NOT_COMPLETE = 507006, "the event has not completed"
    RT_LOST_HEARTBEAT = 507010, "the task scheduler lost its heartbeat"
    RT_MODEL_EXECUTE = 507011, "model execution failed"
    RT_REPORT_TIMEOUT = 507012, "report timeout"
    RT_SYS_DMA = 507013, "system DMA error"
    RT_AICORE_TIMEOUT = 507014, "AI Core kernel timed out"
    RT_AICORE_EXCEPTION = 507015, "AI Core kernel exception"
    RT_AICORE_TRAP_EXCEPTION = 507016, "AI Core trap exception"
    RT_AICPU_TIMEOUT = 507017, "AI CPU kernel timed out"
    RT_AICPU_EXCEPTION = 507018, "AI CPU kernel exception"
    RT_DEV_SETUP_ERROR = 507033, "opening the device failed (driver, firmware or hardware trouble)"
    RT_VECTOR_CORE_TIMEOUT = 507034, "vector core timed out"
    RT_VECTOR_CORE_EXCEPTION = 507035, "vector core exception"
    RT_VECTOR_CORE_TRAP_EXCEPTION = 507036, "vector core trap exception"
    RT_STREAM_SYNC_TIMEOUT = 507046, "waiting for the stream timed out"
    RT_EVENT_SYNC_TIMEOUT = 507047, "waiting for the event timed out"
    RT_DEVICE_MEM_ERROR = 507053, "device memory error"
    RT_HBM_MULTI_BIT_ECC_ERROR = 507054, "HBM multi-bit ECC error"
    RT_SUSPECT_DEVICE_MEM_ERROR = 507055, "suspected device memory error"
    RT_LINK_ERROR = 507056, "inter-device link error"
    RT_SUSPECT_REMOTE_ERROR = 507057, "suspected error on a remote device"
    RT_DRV_INTERNAL_ERROR = 507899, "internal driver error"
    RT_AICPU_INTERNAL_ERROR = 507900, "internal AI CPU error"
    RT_SOCKET_CLOSE = 507901, "the host-device connection (HDC) closed"
    # ge_error_codes.h
    GE_PARAM_INVALID = 145000, "a graph engine parameter is invalid"
    GE_EXEC_NOT_INIT = 145001, "the graph engine executor is not initialised"
    GE_EXEC_MODEL_PATH_INVALID = 145002, "the model path is invalid"
    GE_EXEC_MODEL_ID_INVALID = 145003, "the model id is invalid"
    GE_EXEC_MODEL_DATA_SIZE_INVALID = 145006, "the model data size is invalid"
    GE_EXEC_MODEL_ADDR_INVALID = 145007, "the model data address is invalid"
    GE_EXEC_LOAD_MODEL_REPEATED = 145009, "the model is already loaded"
    GE_DYNAMIC_INPUT_ADDR_INVALID = 145011, "the dynamic-gear input address is invalid"
    GE_DYNAMIC_INPUT_LENGTH_INVALID = 145012, "the dynamic-gear input size is invalid"
    # GE ge_executor.cc: every set_* call (batch, HW, dims) returns it, also on a gearless model
    GE_DYNAMIC_BATCH_SIZE_INVALID = (
        145013,
        "the batch size, HW size or dims given to the set_* gear call is not one of the "
        "model's compiled gears (or the model has no gears)",
    )
    GE_AIPP_BATCH_EMPTY = 145014, "the AIPP batch is empty"
    GE_AIPP_NOT_EXIST = 145015, "the model has no AIPP"
    GE_AIPP_MODE_INVALID = 145016, "invalid AIPP mode"
    GE_FORMAT_INVALID = 145020, "invalid format"
    GE_SHAPE_INVALID = 145021, "invalid shape"
    GE_DATATYPE_INVALID = 145022, "invalid data type"
    GE_MEMORY_ALLOCATION = 245000, "graph engine memory allocation failed"
    GE_MEMORY_OPERATE_FAILED = 245001, "graph engine memory operation failed"
    GE_DEVICE_MEMORY_ALLOCATION_FAILED = 245002, "graph engine device memory allocation failed"
    GE_INTERNAL_ERROR = 545000, "internal graph engine error"
    GE_LOAD_MODEL = 545001, "loading the model failed"
    GE_EXEC_LOAD_MODEL_PARTITION_FAILED = 545002, "loading the model partition failed"
    GE_EXEC_LOAD_WEIGHT_PARTITION_FAILED = 545003, "loading the weight partition failed"
    GE_EXEC_LOAD_TASK_PARTITION_FAILED = 545004, "loading the task partition failed"
    GE_EXEC_LOAD_KERNEL_PARTITION_FAILED = 545005, "loading the kernel partition failed"
    GE_EXEC_RELEASE_MODEL_DATA = 545006, "releasing the model data failed"
    GE_COMMAND_HANDLE = 545007, "graph engine command handling failed"
    GE_GET_TENSOR_INFO = 545008, "reading tensor information failed"
    GE_UNLOAD_MODEL = 545009, "unloading the model failed"


_CLASS_EXPLANATIONS = {
    1: "caller or environment error",
    2: "resource shortage or API/hardware mismatch",
    3: "business-state error (queue full or empty)",
    5: "internal software or hardware error",
}


def describe_code(code: int) -> tuple[str, str]:
    """`(ACL name, explanation)` of a code; a code missing from `AclCode` is named by its class."""
    try:
        member = AclCode(code)
    except ValueError:
        kind = _CLASS_EXPLANATIONS.get(code // 100000, "code outside ACL's documented ranges")
        return "UNKNOWN_ACL_ERROR", f"unlisted code ({kind})"
    return member.acl_name, member.explanation


@dataclasses.dataclass(frozen=True)
class DataType:
    """One `aclDataType` (acl_base.h) and what it is called elsewhere."""

    acl: int  # the aclDataType value
    acl_name: str  # "ACL_FLOAT"
    numpy: np.dtype[Any] | None  # None: numpy cannot hold it, so this backend cannot serve it
    triton: str | None  # Triton's protocol name ("FP32"); None: Triton has no such type
    onnx: int | None  # onnx.TensorProto.DataType value (fixed by onnx.proto); None: no such type
    onnx_name: str | None  # onnx.TensorProto.DataType name ("FLOAT")
    itemsize: int | None  # bytes per element (aclDataTypeSize); None: variable or under a byte

    @property
    def triton_config(self) -> str | None:
        """The type's name in a Triton model config: `TYPE_FP32`; Triton's BYTES is TYPE_STRING."""
        if self.triton is None:
            return None
        return "TYPE_STRING" if self.triton == "BYTES" else f"TYPE_{self.triton}"

    @property
    def onnxruntime_type(self) -> str | None:
        """How onnxruntime names the type of a tensor: `tensor(float)`."""
        return None if self.onnx_name is None else f"tensor({self.onnx_name.lower()})"


def _dtype(
    acl: int, name: str, numpy: Any, triton: Any, onnx: Any, onnx_name: Any, itemsize: Any = None
) -> DataType:
    """A record; a type numpy holds takes its itemsize from numpy."""
    dtype = None if numpy is None else np.dtype(numpy)
    size = dtype.itemsize if dtype is not None else itemsize
    return DataType(acl, name, dtype, triton, onnx, onnx_name, size)


# Every aclDataType up to ACL_COMPLEX32, in code order.
DATA_TYPES: tuple[DataType, ...] = (
    _dtype(-1, "ACL_DT_UNDEFINED", None, None, None, None),
    _dtype(0, "ACL_FLOAT", np.float32, "FP32", 1, "FLOAT"),
    _dtype(1, "ACL_FLOAT16", np.float16, "FP16", 10, "FLOAT16"),
    _dtype(2, "ACL_INT8", np.int8, "INT8", 3, "INT8"),
    _dtype(3, "ACL_INT32", np.int32, "INT32", 6, "INT32"),
    _dtype(4, "ACL_UINT8", np.uint8, "UINT8", 2, "UINT8"),
    _dtype(6, "ACL_INT16", np.int16, "INT16", 5, "INT16"),
    _dtype(7, "ACL_UINT16", np.uint16, "UINT16", 4, "UINT16"),
    _dtype(8, "ACL_UINT32", np.uint32, "UINT32", 12, "UINT32"),
    _dtype(9, "ACL_INT64", np.int64, "INT64", 7, "INT64"),
    _dtype(10, "ACL_UINT64", np.uint64, "UINT64", 13, "UINT64"),
    _dtype(11, "ACL_DOUBLE", np.float64, "FP64", 11, "DOUBLE"),
    _dtype(12, "ACL_BOOL", np.bool_, "BOOL", 9, "BOOL"),
    _dtype(13, "ACL_STRING", None, "BYTES", 8, "STRING"),
    _dtype(16, "ACL_COMPLEX64", None, None, 14, "COMPLEX64", 8),
    _dtype(17, "ACL_COMPLEX128", None, None, 15, "COMPLEX128", 16),
    _dtype(27, "ACL_BF16", None, "BF16", 16, "BFLOAT16", 2),
    _dtype(29, "ACL_INT4", None, None, 22, "INT4"),
    _dtype(30, "ACL_UINT1", None, None, None, None),
    _dtype(33, "ACL_COMPLEX32", None, None, None, None, 4),
)
DTYPES_BY_ACL: Mapping[int, DataType] = MappingProxyType({t.acl: t for t in DATA_TYPES})
# The types numpy holds (the ones the runtime serves and the emulator compiles), by numpy dtype.
DTYPES_BY_NUMPY: Mapping[np.dtype[Any], DataType] = MappingProxyType(
    {t.numpy: t for t in DATA_TYPES if t.numpy is not None}
)
# aclDataType value -> numpy dtype, for the types numpy holds.
NUMPY_BY_ACL: Mapping[int, np.dtype[Any]] = MappingProxyType(
    {t.acl: t.numpy for t in DATA_TYPES if t.numpy is not None}
)
DTYPES_BY_ONNX: Mapping[int, DataType] = MappingProxyType(
    {t.onnx: t for t in DATA_TYPES if t.onnx is not None}
)
DTYPES_BY_TRITON: Mapping[str, DataType] = MappingProxyType(
    {t.triton: t for t in DATA_TYPES if t.triton is not None}
)
# By the name a Triton model config gives the type ("TYPE_FP32", "TYPE_STRING").
DTYPES_BY_TRITON_CONFIG: Mapping[str, DataType] = MappingProxyType(
    {t.triton_config: t for t in DATA_TYPES if t.triton_config is not None}
)


class Format(enum.IntEnum):
    """`aclFormat` (acl_base.h): the layout a model reports for a tensor."""

    UNDEFINED = -1
    NCHW = 0
    NHWC = 1
    ND = 2
    NC1HWC0 = 3
    FRACTAL_Z = 4
    NC1HWC0_C04 = 12
    HWCN = 16
    NDHWC = 27
    FRACTAL_NZ = 29
    NCDHW = 30
    NDC1HWC0 = 32
    FRACTAL_Z_3D = 33
    NC = 35
    NCL = 47


# The formats ATC's --input_format accepts for model inputs.
ATC_INPUT_FORMATS: tuple[Format, ...] = (
    Format.NCHW,
    Format.NHWC,
    Format.ND,
    Format.NCDHW,
    Format.NDHWC,
)
# The rank of the tensors each layout format describes; ATC records other ranks as ND (a 2-D
# input compiled with --input_format NCHW is ND).
LAYOUT_RANKS: dict[int, int] = {Format.NCHW: 4, Format.NHWC: 4, Format.NCDHW: 5, Format.NDHWC: 5}


def format_name(code: int) -> str:
    """`"NCHW"` for an aclFormat value; `FORMAT_<code>` for a value `Format` does not list."""
    try:
        return Format(code).name
    except ValueError:
        return f"FORMAT_{code}"


class MemcpyKind(enum.IntEnum):
    """`aclrtMemcpyKind` (acl_rt.h). ACL_MEMCPY_DEFAULT (4) exists only in newer CANN."""

    HOST_TO_HOST = 0
    HOST_TO_DEVICE = 1
    DEVICE_TO_HOST = 2
    DEVICE_TO_DEVICE = 3

    @property
    def acl_name(self) -> str:
        return f"ACL_MEMCPY_{self.name}"


class RunMode(enum.IntEnum):
    """`aclrtRunMode` (acl_rt.h), what `acl.rt.get_run_mode` returns.

    DEVICE: the program runs on the device's own CPU ("RC"), host memory is device memory; HOST:
    a host with a PCIe card ("EP").
    """

    DEVICE = 0
    HOST = 1

    @property
    def acl_name(self) -> str:
        return f"ACL_{self.name}"


class GearKind(str, enum.Enum):
    """How a model's gears vary: not at all, the batch, the image size or any input's dims.

    A gear is one input shape choice ATC compiled into the model; the value is the string the
    emulator's `.om` headers, logs and JSON outputs carry.
    """

    STATIC = "static"
    BATCH = "batch"
    HW = "hw"
    DIMS = "dims"

    def __str__(self) -> str:
        return str(self.value)

    @property
    def label(self) -> str:
        """How messages name the kind of a gear: "static", "batch", "HW", "dims"."""
        return "HW" if self is GearKind.HW else self.value

    @property
    def atc_description(self) -> str:
        """ATC's words: "dynamic batch", "dynamic image size", "dynamic dims" (or "static")."""
        return _ATC_DESCRIPTIONS[self]

    @property
    def atc_option(self) -> str | None:
        """The ATC option that compiles gears of this kind (without "--"); None for static."""
        return _ATC_OPTIONS.get(self)

    @property
    def set_call(self) -> str | None:
        """The pyACL call that selects a gear of this kind; None for static."""
        return _SET_CALLS.get(self)


_ATC_DESCRIPTIONS = {
    GearKind.STATIC: "static",
    GearKind.BATCH: "dynamic batch",
    GearKind.HW: "dynamic image size",
    GearKind.DIMS: "dynamic dims",
}
_ATC_OPTIONS = {
    GearKind.BATCH: "dynamic_batch_size",
    GearKind.HW: "dynamic_image_size",
    GearKind.DIMS: "dynamic_dims",
}
_SET_CALLS = {
    GearKind.BATCH: "acl.mdl.set_dynamic_batch_size",
    GearKind.HW: "acl.mdl.set_dynamic_hw_size",
    GearKind.DIMS: "acl.mdl.set_input_dynamic_dims",
}


# ----------------------------------------------------------------------------- ATC


class AtcFramework(enum.IntEnum):
    """ATC's `--framework` codes: the kind of model it converts."""

    CAFFE = 0
    MINDSPORE = 1
    TENSORFLOW = 3
    ONNX = 5


ATC_MAX_GEARS = 100  # ATC's limit for every gear option (--dynamic_batch_size and the others)


# How an .om starts: a real one made by ATC, and the emulator's container (`emulator/omfile.py`),
# whose last byte is its format version.
ATC_OM_MAGIC = b"IMOD"
EMULATOR_OM_MAGIC = b"GEEMUOM\x01"


class OmContainer(str, enum.Enum):
    """What made an `.om`, as its first bytes tell (`om_container`)."""

    ATC = "atc"  # a real ATC .om: pyACL (CANN) reads it
    EMULATOR = "emulator"  # `ge-python-model emulator compile`'s: the emulator reads it

    def __str__(self) -> str:
        return str(self.value)


def om_container(path: str | os.PathLike[str]) -> OmContainer | None:
    """The container of the `.om` at `path` by its first bytes (an emulator `.om` of any format
    version: its reader names the version); None for other content, or a file that cannot be
    read, whose reader then says why."""
    try:
        with open(path, "rb") as file:
            head = file.read(len(EMULATOR_OM_MAGIC))
    except OSError:  # missing or unreadable: the runtime reports it when it opens the file
        return None
    if head.startswith(EMULATOR_OM_MAGIC[:-1]):
        return OmContainer.EMULATOR
    if head.startswith(ATC_OM_MAGIC):
        return OmContainer.ATC
    return None


def om_output_path(output: str | os.PathLike[str]) -> Path:
    """ATC's naming rule for `--output`: `<output>.om`, unless `output` already ends in `.om`."""
    text = os.fspath(output)
    return Path(text if text.endswith(".om") else text + ".om")


# ----------------------------------------------------------------------------- precision


class PrecisionMode(str, enum.Enum):
    """ATC's `--precision_mode`: the data type the compiled operators compute in.

    The value is ATC's own spelling. ATC's default for inference models is `force_fp16`.
    """

    FORCE_FP16 = "force_fp16"
    ALLOW_MIX_PRECISION = "allow_mix_precision"
    ALLOW_FP32_TO_FP16 = "allow_fp32_to_fp16"
    MUST_KEEP_ORIGIN_DTYPE = "must_keep_origin_dtype"
    FORCE_FP32 = "force_fp32"
    # bfloat16: Atlas A2/A3, Atlas 200I/500 A2 and 950 only (`emulator.precision.BF16_SOCS`)
    ALLOW_MIX_PRECISION_BF16 = "allow_mix_precision_bf16"
    ALLOW_FP32_TO_BF16 = "allow_fp32_to_bf16"

    def __str__(self) -> str:
        return str(self.value)


ATC_DEFAULT_PRECISION_MODE = PrecisionMode.FORCE_FP16

# Other spellings --precision_mode accepts for the same mode (CANN 8.0.0 ATC pages: "force_fp32 has
# the same effect as cube_fp16in_fp32out"; allow_mix_precision_fp16 is allow_mix_precision).
PRECISION_MODE_ALIASES: Mapping[str, PrecisionMode] = MappingProxyType(
    {
        "cube_fp16in_fp32out": PrecisionMode.FORCE_FP32,
        "allow_mix_precision_fp16": PrecisionMode.ALLOW_MIX_PRECISION,
    }
)
# ATC's --precision_mode_v2 values and the --precision_mode each means (allow_fp32_to_fp16 has
# none); ATC refuses --precision_mode and --precision_mode_v2 together. Its default is fp16.
PRECISION_MODES_V2: Mapping[str, PrecisionMode] = MappingProxyType(
    {
        "fp16": PrecisionMode.FORCE_FP16,
        "origin": PrecisionMode.MUST_KEEP_ORIGIN_DTYPE,
        "cube_fp16in_fp32out": PrecisionMode.FORCE_FP32,
        "mixed_float16": PrecisionMode.ALLOW_MIX_PRECISION,
        "mixed_bfloat16": PrecisionMode.ALLOW_MIX_PRECISION_BF16,
    }
)
# The HiFloat8 mode ATC has for Ascend 950 only; not emulated.
PRECISION_MODES_NOT_EMULATED = ("mixed_hif8",)
# ATC's --output_type names (one for all outputs, or per output `node:idx:TYPE`); they are
# Triton's type names too. CANN 8.0.0 lists these four; later CANN adds more.
ATC_OUTPUT_TYPES = ("FP32", "FP16", "UINT8", "INT8")

# The order an accuracy gate retries a model in: each step keeps more of the model in float32.
PRECISION_LADDER = (
    PrecisionMode.FORCE_FP16,
    PrecisionMode.ALLOW_MIX_PRECISION,
    PrecisionMode.ALLOW_FP32_TO_FP16,
    PrecisionMode.MUST_KEEP_ORIGIN_DTYPE,
)


# ----------------------------------------------------------------------------- tensor names

# The longest name the `name` of aclmdlIODims holds (char[128] with its NUL): a longer tensor
# name comes back converted in the dims of get_input_dims/get_output_dims (aclmdlGetInputDims.md).
DIMS_NAME_LIMIT = 127


def converted_tensor_name(model_id: int, is_input: bool, index: int) -> str:
    """The name ACL puts in the dims of a tensor whose name is over `DIMS_NAME_LIMIT`:
    `acl_modelId_<id>_input_<index>` (`_output_` for outputs). ACL appends `_` and letters only
    when that name is already a tensor's (hicann/ge api/acl/acl_model/model/model_common.cpp
    GetConvertTensorName, TransConvertTensorNameToLegal); `get_tensor_real_name` maps it back."""
    return f"acl_modelId_{model_id}_{'input' if is_input else 'output'}_{index}"


_ATC_OUTPUT_NAME = re.compile(r"(?P<op>.+?):(?P<index>\d+)(?::(?P<tensor>.+))?")


def tensor_name_of_output(acl_name: str) -> str:
    """The tensor name in an output name as ACL reports it (aclmdlGetOutputNameByIndex.md):
    `op:idx:name` (ONNX via ATC; Caffe `op:idx:top`) gives the name after `op:idx:`, which may
    hold colons itself (tf2onnx's `Identity:0`); `op:idx` (TensorFlow via ATC, ONNX built with
    `--out_nodes node:idx`) is TensorFlow's own tensor name and is kept whole, as is any other
    form (the graph API's `output_<i>_<op>_<idx>`, a plain name)."""
    match = _ATC_OUTPUT_NAME.fullmatch(acl_name)
    if match is None or match.group("tensor") is None:
        return acl_name
    return match.group("tensor")


# ----------------------------------------------------------------------------- sharing a device

# pyACL runs at most this many user processes on one device of a physical machine, and
# `PROCESSES_PER_DEVICE_VM` in a virtual machine (CANN 8.2 pyACL restrictions page
# aclpythondevg_0094; CANN 6.0.1 aclcppdevg_000198; Atlas A2: 63). Triton's Python backend runs
# one process per model instance, each opening its device.
PROCESSES_PER_DEVICE = 64
PROCESSES_PER_DEVICE_VM = 32
# Device memory a process holds once it has opened a device (its primary context, default streams
# and runtime state), before any allocation or model: 107 MB per process in npu-smi on 910B
# (vllm-ascend PR #7107), about 112 MB (xLLM PR #2095); both torch_npu processes, no public figure
# for 310P or for a bare pyACL set_device. The larger figure, so a budget errs on fitting fewer.
PROCESS_DEVICE_MEMORY = 112 * 2**20


def malloc_reserved(size: int) -> int:
    """Device bytes `acl.rt.malloc(size)` reserves: rounded up to 32, plus 32 of padding
    (hicann/runtime src/acl/aclrt_impl/memory.cpp aclMallocMemInner, DATA_MEMORY_ALIGN_SIZE and
    DATA_MEMORY_PADDING_SIZE)."""
    return (size + 31) // 32 * 32 + 32


def carved_bytes(size: int) -> int:
    """Bytes one buffer of `size` takes when carved out of a larger `acl.rt.malloc`: rounded up
    to 32 plus 32 (as `malloc_reserved`), the next one starting 64-byte aligned (CANN's secondary
    memory allocation page, aclcppdevg_000086 / aclpythondevg_0075: m = ALIGN_UP(len, 32) + 32,
    start ALIGN_UP(m, 64); aclrtMemcpyAsync wants 64-byte aligned addresses)."""
    return (malloc_reserved(size) + 63) // 64 * 64


@dataclasses.dataclass(frozen=True)
class SocDevice:
    """One SoC as a device: its memory per chip (bytes) and the product it was seen on."""

    soc: str
    memory: int
    product: str


_MIB = 2**20
# Device memory per chip as `acl.rt.get_mem_info` reports its total (what applications can use:
# the system's reservation excluded), by `--soc_version`. Huawei's product pages were not in the
# sources read; the figures are npu-smi's totals in field reports, cited in
# docs/guides/many-models.md, where the UNCONFIRMED ones are marked.
SOC_DEVICES: Mapping[str, SocDevice] = MappingProxyType(
    {
        device.soc: device
        for device in (
            SocDevice("Ascend310B1", 4 * 2**30, "Atlas 200I DK A2: 4 GB LPDDR4X"),
            SocDevice("Ascend310P3", 21525 * _MIB, "Atlas 300I Pro (24 GB card)"),
            SocDevice("Ascend910B1", 65536 * _MIB, "Atlas 800T A2: 64 GB HBM per NPU"),
            SocDevice("Ascend910B2", 65536 * _MIB, "Atlas 800T A2: 64 GB HBM per NPU"),
            SocDevice("Ascend910B3", 65536 * _MIB, "Atlas 800T A2: 64 GB HBM per NPU"),
            SocDevice("Ascend910B4", 32768 * _MIB, "Atlas 800I A2 (910B4): 32 GB HBM per NPU"),
        )
    }
)
DEFAULT_SOC = "Ascend310P3"  # the SoC ATC's examples and `emulator compile` target by default


def soc_device(soc: str) -> SocDevice:
    """The device of `soc`; ValueError naming the SoCs known, for one that is not."""
    device = SOC_DEVICES.get(soc)
    if device is None:
        raise ValueError(
            f"no device memory is known for SoC {soc!r}; known: {', '.join(SOC_DEVICES)} "
            "(give the memory explicitly)"
        )
    return device


class PixelFormat(enum.IntEnum):
    """`acldvppPixelFormat` values the project uses (acl/ops/acl_dvpp.h)."""

    YUV_400 = 0
    YUV_SEMIPLANAR_420 = 1  # NV12: a Y plane, then one plane of interleaved U, V at half H and W
    YVU_SEMIPLANAR_420 = 2  # NV21: V before U
    UNKNOWN = 10000  # JPEGD: decode in the source's own subsampling


@dataclasses.dataclass(frozen=True)
class DvppLimits:
    """What DVPP's JPEGD and VPC accept on one SoC family (sources in
    docs/internals/conformance/dvpp.md): JPEG sides in [jpegd_min, jpegd_max]; JPEGD's NV12
    output width stride a multiple of `jpegd_width_align` and height stride of
    `jpegd_height_align`; VPC reads pictures of `vpc_min_w` x `vpc_min_h` to `vpc_in_max` x
    `vpc_in_max`, writes `vpc_min_w` x `vpc_min_h` to `vpc_out_max_w` x `vpc_out_max_h` and
    scales each side by `vpc_min_scale` to `vpc_max_scale`; JPEGD 1080p frames per second per
    channel and per chip (all channels).

    The `*_refusal` methods say why a size breaks a limit (None when it does not): the one
    wording of the emulator's JPEGD and VPC and of the runtime's checks before decoding."""

    family: str
    jpegd_min: int
    jpegd_max: int
    jpegd_width_align: int
    jpegd_height_align: int
    vpc_min_w: int
    vpc_min_h: int
    vpc_in_max: int
    vpc_out_max_w: int
    vpc_out_max_h: int
    vpc_min_scale: float
    vpc_max_scale: float
    jpegd_channel_fps: float
    jpegd_chip_fps: float

    def jpegd_refusal(self, width: int, height: int) -> str | None:
        """Why JPEGD refuses a `width` x `height` JPEG."""
        low, high = self.jpegd_min, self.jpegd_max
        if low <= width <= high and low <= height <= high:
            return None
        return (
            f"the JPEG is {width}x{height}; JPEGD decodes {low}x{low} to {high}x{high} "
            f"({self.family})"
        )

    def vpc_input_refusal(self, width: int, height: int) -> str | None:
        """Why VPC refuses to read a `width` x `height` picture."""
        if (
            self.vpc_min_w <= width <= self.vpc_in_max
            and self.vpc_min_h <= height <= self.vpc_in_max
        ):
            return None
        return (
            f"VPC's input is {width}x{height}; VPC reads {self.vpc_min_w}x{self.vpc_min_h} to "
            f"{self.vpc_in_max}x{self.vpc_in_max} ({self.family})"
        )

    def vpc_output_refusal(self, width: int, height: int) -> str | None:
        """Why VPC refuses to write a `width` x `height` picture."""
        w_ok = self.vpc_min_w <= width <= self.vpc_out_max_w
        if w_ok and self.vpc_min_h <= height <= self.vpc_out_max_h:
            return None
        return (
            f"VPC's output is {width}x{height}; VPC writes {self.vpc_min_w}x{self.vpc_min_h} to "
            f"{self.vpc_out_max_w}x{self.vpc_out_max_h} ({self.family})"
        )

    def vpc_scale_refusal(self, source: tuple[int, int], target: tuple[int, int]) -> str | None:
        """Why VPC refuses to resize a `source` (width, height) region to `target`."""
        ratios = [to / side for side, to in zip(source, target)]
        if all(self.vpc_min_scale <= ratio <= self.vpc_max_scale for ratio in ratios):
            return None
        return (
            f"VPC would resize {source[0]}x{source[1]} to {target[0]}x{target[1]} (by "
            f"{' x '.join(map(_ratio_text, ratios))}); VPC scales each side by "
            f"{_ratio_text(self.vpc_min_scale)} to {_ratio_text(self.vpc_max_scale)} "
            f"({self.family})"
        )


def _ratio_text(ratio: float) -> str:
    """`1/32`, `16`, `1/36.6`: a scale as people write it."""
    return f"{ratio:.3g}" if ratio >= 1 else f"1/{1 / ratio:.3g}"


# By SoC (the prefix of `--soc_version`); every source is in docs/internals/conformance/dvpp.md.
# JPEG sides 32..8192 on every family (hicann ImageProcessor::acldvppJpegPredictDecSize; JPEGD
# restrictions pages). JPEGD output strides: Ascend310 128/16 (CANN 6.0.1 aclcppdevg_03_0187),
# the others 64/16 (CANN 8.0.RC1 aclpythondevg_01_0321). VPC (CANN 8.5/9.0 "VPC restrictions",
# aclcppdevg_03_0337, aclpythondevg_01_0295): input 10x6 to 8192x8192 (above 4096: YUV420SP
# among others, on every family); output 10x6 to 4096x4096 on Atlas inference (310P) and
# training (910), 4096 wide x 8192 high on the A2/A3 series (910B) and Atlas 200I/500 A2 (310B);
# Ascend310's (Atlas 200/300/500) output 4096x4096 (atlasdvpp_07_0004). Scaling 1/32 to 16 per
# side: Ascend310's VPC page and mxVision's VpcResize (every family); not on the acldvpp pages
# of 310P/310B/910B (UNCONFIRMED there, kept: a refusal by VPC fails the whole batch). JPEGD
# rates: Ascend310 128 fps on one channel, 256 on two or more (6.0.1 aclcppdevg_03_0187); 310P
# n x 128 up to 16 channels, 2048 beyond (6.0.1 aclcppdevg_03_0279); 310B, 910B: not read
# (UNCONFIRMED, 310P's used).
DVPP_LIMITS: Mapping[str, DvppLimits] = MappingProxyType(
    {
        limits.family: limits
        for limits in (
            DvppLimits(
                "Ascend310", 32, 8192, 128, 16, 10, 6, 8192, 4096, 4096, 1 / 32, 16, 128.0, 256.0
            ),
            DvppLimits(
                "Ascend310P", 32, 8192, 64, 16, 10, 6, 8192, 4096, 4096, 1 / 32, 16, 128.0, 2048.0
            ),
            DvppLimits(
                "Ascend310B", 32, 8192, 64, 16, 10, 6, 8192, 4096, 8192, 1 / 32, 16, 128.0, 2048.0
            ),
            DvppLimits(
                "Ascend910B", 32, 8192, 64, 16, 10, 6, 8192, 4096, 8192, 1 / 32, 16, 128.0, 2048.0
            ),
        )
    }
)


def dvpp_limits(soc: str) -> DvppLimits:
    """The DVPP limits of `soc` (its longest known family prefix); ValueError for another."""
    for family in sorted(DVPP_LIMITS, key=len, reverse=True):
        if soc.startswith(family) and (soc[len(family) :][:1].isdigit() or family == soc):
            return DVPP_LIMITS[family]
    raise ValueError(f"no DVPP limits are known for SoC {soc!r}; known: {', '.join(DVPP_LIMITS)}")


# The limits whose strictest value is the largest (lower bounds, alignments); of the others
# (upper bounds, rates) it is the smallest.
_DVPP_LOWER_LIMITS = frozenset(
    {
        "jpegd_min",
        "jpegd_width_align",
        "jpegd_height_align",
        "vpc_min_w",
        "vpc_min_h",
        "vpc_min_scale",
    }
)


def common_dvpp_limits() -> DvppLimits:
    """What every family of `DVPP_LIMITS` takes (the strictest of each limit; JPEGD strides
    aligned for all), for a SoC whose family is not known."""
    strictest = {
        field.name: (max if field.name in _DVPP_LOWER_LIMITS else min)(
            getattr(limits, field.name) for limits in DVPP_LIMITS.values()
        )
        for field in dataclasses.fields(DvppLimits)
        if field.name != "family"
    }
    return DvppLimits("every SoC family known", **strictest)
