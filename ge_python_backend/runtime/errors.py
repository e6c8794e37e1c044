"""Runtime errors and the one status funnel, `check`, every ACL return code goes through."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ge_python_backend.ascend import AclCode
from ge_python_backend.errors import AclError, GeBackendError, InputError, UserError

__all__ = [
    "AclError",
    "DeviceFullError",
    "ExecuteTimeoutError",
    "InputError",
    "ModelFileError",
    "OutputTooLargeError",
    "RuntimeSelectionError",
    "check",
    "check_handle",
]


class ExecuteTimeoutError(AclError):
    """An execution did not finish within the session's `execute_timeout_ms`."""

    CODE = AclCode.RT_STREAM_SYNC_TIMEOUT  # from synchronize_stream_with_timeout

    def __init__(self, cause: AclError, timeout_ms: int) -> None:
        super().__init__(
            cause.code,
            cause.api,
            f"the execution timed out: it did not finish within execute_timeout_ms="
            f"{timeout_ms} ms; the lane's stream was replaced",
            cause.recent,
        )
        self.timeout_ms = timeout_ms


class DeviceFullError(AclError):
    """The device refused this process (pyACL's process cap) or this model (its memory): one line
    naming the device, the wall, who holds the device, and what to do."""

    ADVICE = (
        "serve fewer instances (instance_group count), or place the model on another device "
        "(parameter device_ids)"
    )

    def __init__(self, cause: AclError, device_id: int, wall: str, held_by: str) -> None:
        AclError.__init__(self, cause.code, cause.api, recent=cause.recent)
        self.device_id = device_id
        held = f"; held by {held_by}" if held_by else ""
        self.args = (f"device {device_id} is full: {wall}{held}; {self.ADVICE} ({cause})",)


class OutputTooLargeError(GeBackendError):
    """A data-dependent output came out larger than its buffer (`max_output_bytes`)."""

    def __init__(self, name: str, shape: tuple[int, ...], nbytes: int, room: int) -> None:
        super().__init__(
            f"output {name!r} came out with shape {list(shape)}, {nbytes} bytes, but its buffer "
            f"holds {room}; raise the parameter max_output_bytes"
        )


class ModelFileError(UserError):
    """The `.om` is missing, fails its sha256 check, or cannot be served by this runtime."""


class RuntimeSelectionError(UserError, ImportError):
    """The requested ACL implementation is unknown or cannot be imported.

    `command_line_message` is the message as a command prints it: the `--runtime` flag where the
    message names the Python argument `runtime=`.
    """

    def __init__(self, message: str, command_line_message: str | None = None) -> None:
        super().__init__(message)
        self.command_line_message = command_line_message or message


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
        raise AclError(AclCode.BAD_ALLOC, api, "it returned a null handle", _recent_message(acl))
    return handle
