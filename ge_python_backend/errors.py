"""Errors shared by every layer. `InputError`, `AclError` and `ModelUnavailable` live here
because a session fails with them wherever it runs: the device host's stub side (which imports no
runtime) raises them from the host's reports (`ge_python_backend.runtime` re-exports the first
two; the runtime's own errors live in `ge_python_backend.runtime.errors`)."""

from __future__ import annotations

from ge_python_backend.ascend import describe_code


class GeBackendError(Exception):
    """Base class of every error this package raises on purpose."""


class UserError(GeBackendError):
    """A mistake in what the user asked for (bad flag, missing file, ...).

    The CLI prints these as one line on stderr and exits non-zero, without a traceback.
    """


class InputError(GeBackendError, ValueError):
    """Caller data does not fit the model (dtype, shape, missing or unknown input, no gear).

    From `Session.submit` (and `infer_many`, `infer`), `request` is the index of the first
    request of the list that does not fit; None where no list was given (`validate`).
    """

    request: int | None = None


class AclError(GeBackendError):
    """An ACL call returned a non-zero status (or a null handle), in this process or in the
    device host (`reported`: the stub raises the host's again)."""

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

    @classmethod
    def reported(cls, code: int, api: str, message: str) -> AclError:
        """The error another process raised, from its code, API and message."""
        error = cls(code, api)
        error.args = (message,)
        return error


class ModelUnavailable(GeBackendError):
    """The session cannot serve its `.om` any more (it changed or went away since the instance
    loaded it, or the runtime refuses it): its requests are answered UNAVAILABLE."""


def command_line_message(exc: BaseException) -> str:
    """The message of `exc` as a command prints it: its `command_line_message` (naming the
    command-line flags where the message names Python arguments) when it has one."""
    return str(getattr(exc, "command_line_message", None) or exc)
