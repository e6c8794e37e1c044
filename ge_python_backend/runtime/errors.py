"""Runtime errors and the one status funnel, `check`, every ACL return code goes through."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ge_python_backend.errors import GeBackendError, UserError

__all__ = [
    "ACL_ERRORS",
    "AclError",
    "ExecuteTimeoutError",
    "InputError",
    "ModelFileError",
    "RuntimeSelectionError",
    "check",
    "check_handle",
    "describe_code",
]

# code -> (name, one-line explanation). Every code of pyacl-api.md §5, ranges expanded.
ACL_ERRORS: dict[int, tuple[str, str]] = {
    0: ("ACL_SUCCESS", "success"),
    # acl_base.h: caller and environment errors
    100000: ("ACL_ERROR_INVALID_PARAM", "a parameter failed ACL's checks"),
    100001: (
        "ACL_ERROR_UNINITIALIZE",
        "acl.init was not called (or a dump/profiling init is missing)",
    ),
    100002: ("ACL_ERROR_REPEAT_INITIALIZE", "already initialised or loaded"),
    100003: ("ACL_ERROR_INVALID_FILE", "the file is missing or unreadable"),
    100006: ("ACL_ERROR_PARSE_FILE", "the file content could not be parsed"),
    100011: ("ACL_ERROR_INVALID_MODEL_ID", "the model id is invalid or the model is not loaded"),
    100012: (
        "ACL_ERROR_DESERIALIZE_MODEL",
        "the .om cannot be deserialised by this CANN; rebuild it with a matching ATC",
    ),
    100013: ("ACL_ERROR_PARSE_MODEL", "the .om cannot be parsed by this CANN; rebuild it with ATC"),
    100014: ("ACL_ERROR_READ_MODEL_FAILURE", "the model file is missing or unreadable"),
    100017: ("ACL_ERROR_MODEL_INPUT_NOT_MATCH", "the input dataset does not match the model"),
    100018: ("ACL_ERROR_MODEL_OUTPUT_NOT_MATCH", "the output dataset does not match the model"),
    100019: ("ACL_ERROR_MODEL_NOT_DYNAMIC", "a dynamic-gear API was used on a static model"),
    100026: ("ACL_ERROR_UNSUPPORTED_DATA_TYPE", "the data type is not supported"),
    100033: ("ACL_ERROR_REPEAT_SUBSCRIBE", "the stream is already subscribed for callbacks"),
    100034: ("ACL_ERROR_STREAM_NOT_SUBSCRIBE", "the stream is not subscribed for callbacks"),
    100035: ("ACL_ERROR_THREAD_NOT_SUBSCRIBE", "the thread is not subscribed for callbacks"),
    100036: ("ACL_ERROR_WAIT_CALLBACK_TIMEOUT", "waiting for a callback timed out"),
    100037: ("ACL_ERROR_REPEAT_FINALIZE", "acl.finalize was already called"),
    100038: ("ACL_ERROR_NOT_STATIC_AIPP", "the model has no static AIPP (deprecated, now 145015)"),
    148046: ("ACL_ERROR_PROF_REPEAT_SUBSCRIBE", "profiling is already subscribed"),
    148047: ("ACL_ERROR_PROF_API_CONFLICT", "conflicting profiling APIs were used"),
    148048: ("ACL_ERROR_INVALID_MAX_OPQUEUE_NUM_CONFIG", "invalid operator cache configuration"),
    148049: ("ACL_ERROR_INVALID_OPP_PATH", "ASCEND_OPP_PATH is unset or wrong"),
    148050: ("ACL_ERROR_OP_UNSUPPORTED_DYNAMIC", "the operator does not support dynamic shapes"),
    148051: ("ACL_ERROR_RELATIVE_RESOURCE_NOT_CLEARED", "a related resource was not released"),
    148052: ("ACL_ERROR_UNSUPPORTED_JPEG", "the JPEG encoding is not supported"),
    148053: ("ACL_ERROR_INVALID_BUNDLE_MODEL_ID", "invalid bundle model id"),
    # acl_base.h: resources and API/hardware mismatch
    200000: ("ACL_ERROR_BAD_ALLOC", "memory allocation failed"),
    200001: ("ACL_ERROR_API_NOT_SUPPORT", "the API is not supported"),
    200002: ("ACL_ERROR_INVALID_DEVICE", "invalid device (deprecated, now 107001)"),
    200003: ("ACL_ERROR_MEMORY_ADDRESS_UNALIGNED", "the memory address is not aligned"),
    200004: ("ACL_ERROR_RESOURCE_NOT_MATCH", "the stream or context passed does not match"),
    200005: ("ACL_ERROR_INVALID_RESOURCE_HANDLE", "the handle was already destroyed or is in use"),
    200006: ("ACL_ERROR_FEATURE_UNSUPPORTED", "the feature is not supported"),
    300000: ("ACL_ERROR_STORAGE_OVER_LIMIT", "storage is over its limit"),
    500000: ("ACL_ERROR_INTERNAL_ERROR", "internal ACL error"),
    500001: ("ACL_ERROR_FAILURE", "internal ACL failure"),
    500002: ("ACL_ERROR_GE_FAILURE", "internal graph engine failure"),
    500003: ("ACL_ERROR_RT_FAILURE", "internal runtime failure"),
    500004: ("ACL_ERROR_DRV_FAILURE", "internal driver failure"),
    500005: ("ACL_ERROR_PROFILING_FAILURE", "internal profiling failure"),
    # rt_error_codes.h
    107000: ("ACL_ERROR_RT_PARAM_INVALID", "a runtime parameter is invalid"),
    107001: ("ACL_ERROR_RT_INVALID_DEVICEID", "invalid device id"),
    107002: (
        "ACL_ERROR_RT_CONTEXT_NULL",
        "no context is current in this thread; call acl.rt.set_context or set_device first",
    ),
    107003: ("ACL_ERROR_RT_STREAM_CONTEXT", "the stream is not in the current context"),
    107004: ("ACL_ERROR_RT_MODEL_CONTEXT", "the model is not in the current context"),
    107005: ("ACL_ERROR_RT_STREAM_MODEL", "the stream is not bound to the model"),
    107008: ("ACL_ERROR_RT_ADDR_UNALIGNED", "the memory address is not aligned"),
    107011: ("ACL_ERROR_RT_STREAM_SUBSCRIBE", "stream subscription failed"),
    107012: ("ACL_ERROR_RT_THREAD_SUBSCRIBE", "thread subscription failed"),
    107015: ("ACL_ERROR_RT_STREAM_NO_CB_REG", "the callback stream is not subscribed"),
    107016: ("ACL_ERROR_RT_INVALID_MEMORY_TYPE", "invalid memory type"),
    107017: ("ACL_ERROR_RT_INVALID_HANDLE", "invalid handle"),
    107018: ("ACL_ERROR_RT_INVALID_MALLOC_TYPE", "invalid malloc type"),
    107022: ("ACL_ERROR_RT_DEVICE_TASK_ABORT", "device tasks were aborted"),
    207000: ("ACL_ERROR_RT_FEATURE_NOT_SUPPORT", "the runtime does not support this feature"),
    207001: ("ACL_ERROR_RT_MEMORY_ALLOCATION", "out of memory"),
    207002: ("ACL_ERROR_RT_MEMORY_FREE", "freeing memory failed"),
    207004: ("ACL_ERROR_RT_NO_DEVICE", "no device is available"),
    207005: ("ACL_ERROR_RT_RESOURCE_ALLOC_FAIL", "runtime resource allocation failed"),
    207006: ("ACL_ERROR_RT_NO_PERMISSION", "no permission (is the user in the HwHiAiUser group?)"),
    207007: ("ACL_ERROR_RT_NO_EVENT_RESOURCE", "no event resource left"),
    207008: ("ACL_ERROR_RT_NO_STREAM_RESOURCE", "no stream resource left"),
    207009: ("ACL_ERROR_RT_NO_NOTIFY_RESOURCE", "no notify resource left"),
    207010: ("ACL_ERROR_RT_NO_MODEL_RESOURCE", "no model resource left"),
    207011: ("ACL_ERROR_RT_NO_CDQ_RESOURCE", "no CDQ resource left"),
    207018: ("ACL_ERROR_RT_DEVIDE_OOM", "device memory is exhausted"),
    507000: ("ACL_ERROR_RT_INTERNAL_ERROR", "internal runtime error"),
    507001: ("ACL_ERROR_RT_TS_ERROR", "task scheduler error"),
    507002: ("ACL_ERROR_RT_STREAM_TASK_FULL", "the stream's task queue is full"),
    507003: ("ACL_ERROR_RT_STREAM_TASK_EMPTY", "the stream's task queue is empty"),
    507004: ("ACL_ERROR_RT_STREAM_NOT_COMPLETE", "the stream has not completed"),
    507005: ("ACL_ERROR_RT_END_OF_SEQUENCE", "end of sequence"),
    507006: ("ACL_ERROR_RT_EVENT_NOT_COMPLETE", "the event has not completed"),
    507010: ("ACL_ERROR_RT_LOST_HEARTBEAT", "the task scheduler lost its heartbeat"),
    507011: ("ACL_ERROR_RT_MODEL_EXECUTE", "model execution failed"),
    507012: ("ACL_ERROR_RT_REPORT_TIMEOUT", "report timeout"),
    507013: ("ACL_ERROR_RT_SYS_DMA", "system DMA error"),
    507014: ("ACL_ERROR_RT_AICORE_TIMEOUT", "AI Core kernel timed out"),
    507015: ("ACL_ERROR_RT_AICORE_EXCEPTION", "AI Core kernel exception"),
    507016: ("ACL_ERROR_RT_AICORE_TRAP_EXCEPTION", "AI Core trap exception"),
    507017: ("ACL_ERROR_RT_AICPU_TIMEOUT", "AI CPU kernel timed out"),
    507018: ("ACL_ERROR_RT_AICPU_EXCEPTION", "AI CPU kernel exception"),
    507033: (
        "ACL_ERROR_RT_DEV_SETUP_ERROR",
        "opening the device failed (driver, firmware or hardware trouble)",
    ),
    507034: ("ACL_ERROR_RT_VECTOR_CORE_TIMEOUT", "vector core timed out"),
    507035: ("ACL_ERROR_RT_VECTOR_CORE_EXCEPTION", "vector core exception"),
    507036: ("ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION", "vector core trap exception"),
    507046: ("ACL_ERROR_RT_STREAM_SYNC_TIMEOUT", "waiting for the stream timed out"),
    507047: ("ACL_ERROR_RT_EVENT_SYNC_TIMEOUT", "waiting for the event timed out"),
    507053: ("ACL_ERROR_RT_DEVICE_MEM_ERROR", "device memory error"),
    507054: ("ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR", "HBM multi-bit ECC error"),
    507055: ("ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR", "suspected device memory error"),
    507056: ("ACL_ERROR_RT_LINK_ERROR", "inter-device link error"),
    507057: ("ACL_ERROR_RT_SUSPECT_REMOTE_ERROR", "suspected error on a remote device"),
    507899: ("ACL_ERROR_RT_DRV_INTERNAL_ERROR", "internal driver error"),
    507900: ("ACL_ERROR_RT_AICPU_INTERNAL_ERROR", "internal AI CPU error"),
    507901: ("ACL_ERROR_RT_SOCKET_CLOSE", "the host-device connection (HDC) closed"),
    # ge_error_codes.h
    145000: ("ACL_ERROR_GE_PARAM_INVALID", "a graph engine parameter is invalid"),
    145001: ("ACL_ERROR_GE_EXEC_NOT_INIT", "the graph engine executor is not initialised"),
    145002: ("ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID", "the model path is invalid"),
    145003: ("ACL_ERROR_GE_EXEC_MODEL_ID_INVALID", "the model id is invalid"),
    145006: ("ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID", "the model data size is invalid"),
    145007: ("ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID", "the model data address is invalid"),
    145009: ("ACL_ERROR_GE_EXEC_LOAD_MODEL_REPEATED", "the model is already loaded"),
    145011: (
        "ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID",
        "the dynamic-gear input address is invalid",
    ),
    145012: ("ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID", "the dynamic-gear input size is invalid"),
    # GE ge_executor.cc: every set_* call (batch, HW, dims) returns it, also on a gearless model
    145013: (
        "ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID",
        "the batch size, HW size or dims given to the set_* gear call is not one of the "
        "model's compiled gears (or the model has no gears)",
    ),
    145014: ("ACL_ERROR_GE_AIPP_BATCH_EMPTY", "the AIPP batch is empty"),
    145015: ("ACL_ERROR_GE_AIPP_NOT_EXIST", "the model has no AIPP"),
    145016: ("ACL_ERROR_GE_AIPP_MODE_INVALID", "invalid AIPP mode"),
    145020: ("ACL_ERROR_GE_FORMAT_INVALID", "invalid format"),
    145021: ("ACL_ERROR_GE_SHAPE_INVALID", "invalid shape"),
    145022: ("ACL_ERROR_GE_DATATYPE_INVALID", "invalid data type"),
    245000: ("ACL_ERROR_GE_MEMORY_ALLOCATION", "graph engine memory allocation failed"),
    245001: ("ACL_ERROR_GE_MEMORY_OPERATE_FAILED", "graph engine memory operation failed"),
    245002: (
        "ACL_ERROR_GE_DEVICE_MEMORY_ALLOCATION_FAILED",
        "graph engine device memory allocation failed",
    ),
    545000: ("ACL_ERROR_GE_INTERNAL_ERROR", "internal graph engine error"),
    545001: ("ACL_ERROR_GE_LOAD_MODEL", "loading the model failed"),
    545002: ("ACL_ERROR_GE_EXEC_LOAD_MODEL_PARTITION_FAILED", "loading the model partition failed"),
    545003: (
        "ACL_ERROR_GE_EXEC_LOAD_WEIGHT_PARTITION_FAILED",
        "loading the weight partition failed",
    ),
    545004: ("ACL_ERROR_GE_EXEC_LOAD_TASK_PARTITION_FAILED", "loading the task partition failed"),
    545005: (
        "ACL_ERROR_GE_EXEC_LOAD_KERNEL_PARTITION_FAILED",
        "loading the kernel partition failed",
    ),
    545006: ("ACL_ERROR_GE_EXEC_RELEASE_MODEL_DATA", "releasing the model data failed"),
    545007: ("ACL_ERROR_GE_COMMAND_HANDLE", "graph engine command handling failed"),
    545008: ("ACL_ERROR_GE_GET_TENSOR_INFO", "reading tensor information failed"),
    545009: ("ACL_ERROR_GE_UNLOAD_MODEL", "unloading the model failed"),
}

_CLASS_EXPLANATIONS = {
    1: "caller or environment error",
    2: "resource shortage or API/hardware mismatch",
    3: "business-state error (queue full or empty)",
    5: "internal software or hardware error",
}


def describe_code(code: int) -> tuple[str, str]:
    """Return `(name, explanation)` for an ACL code, also for codes missing from the table."""
    if code in ACL_ERRORS:
        return ACL_ERRORS[code]
    kind = _CLASS_EXPLANATIONS.get(code // 100000, "code outside ACL's documented ranges")
    return "UNKNOWN_ACL_ERROR", f"unlisted code ({kind})"


class AclError(GeBackendError):
    """An ACL call returned a non-zero status (or a null handle)."""

    def __init__(self, code: int, api: str, detail: str = "", recent: str = "") -> None:
        self.code = code
        self.name, self.explanation = describe_code(code)
        self.api = api
        self.recent = recent  # acl.get_recent_err_msg() at the time of the failure
        message = f"{api} failed with {code} {self.name}: {self.explanation}"
        if detail:
            message += f" ({detail})"
        if recent:
            message += f"; ACL says: {recent}"
        super().__init__(message)


class ExecuteTimeoutError(AclError):
    """An execution did not finish within the session's `execute_timeout_ms`."""

    CODE = 507046  # ACL_ERROR_RT_STREAM_SYNC_TIMEOUT from synchronize_stream_with_timeout

    def __init__(self, cause: AclError, timeout_ms: int) -> None:
        super().__init__(
            cause.code,
            cause.api,
            f"the execution timed out: it did not finish within execute_timeout_ms="
            f"{timeout_ms} ms; the lane's stream was replaced",
            cause.recent,
        )
        self.timeout_ms = timeout_ms


class InputError(GeBackendError, ValueError):
    """Caller data does not fit the model (dtype, shape, missing or unknown input, no gear)."""


class ModelFileError(UserError):
    """The `.om` is missing, fails its sha256 check, or cannot be served by this runtime."""


class RuntimeSelectionError(UserError, ImportError):
    """The requested ACL implementation is unknown or cannot be imported."""


def _recent_message(acl: ModuleType | None) -> str:
    if acl is None:
        return ""
    get_message = getattr(acl, "get_recent_err_msg", None)  # absent from some old pyACL builds
    if get_message is None:
        return ""
    message = get_message()
    return message.strip() if isinstance(message, str) else ""


def check(ret: Any, api: str, acl: ModuleType | None = None) -> None:
    """Raise `AclError` unless `ret` is 0; `acl` adds `acl.get_recent_err_msg()` to the error."""
    if ret == 0 and isinstance(ret, int):
        return
    if not isinstance(ret, int):
        raise TypeError(f"{api} returned {ret!r} where an integer status code was expected")
    raise AclError(ret, api, recent=_recent_message(acl))


def check_handle(handle: Any, api: str, acl: ModuleType | None = None) -> int:
    """Return `handle` if it is a non-null integer; a 0 from a create call means it failed."""
    if not isinstance(handle, int):
        raise TypeError(f"{api} returned {handle!r} where an integer handle was expected")
    if handle == 0:
        # The C function returned NULL; the docs give allocation failure as the cause.
        raise AclError(200000, api, "it returned a null handle", _recent_message(acl))
    return handle
