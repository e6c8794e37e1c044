"""Errors shared by every layer. ACL status errors live in `ge_python_backend.runtime.errors`;
`InputError` lives here because the device host's stub side (which imports no runtime) raises it
too (`ge_python_backend.runtime` re-exports it)."""

from __future__ import annotations


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


def command_line_message(exc: BaseException) -> str:
    """The message of `exc` as a command prints it: its `command_line_message` (naming the
    command-line flags where the message names Python arguments) when it has one."""
    return str(getattr(exc, "command_line_message", None) or exc)
