"""The calling convention shared by every emulated pyACL function.

`api(...)` wraps an implementation that takes parsed positional arguments and raises
`AclFailure` for ACL errors. The wrapper raises `TypeError("<acl.xxx> args parse failed")` for a
wrong argument count or type (as the C extension does), injects configured faults, records the
recent error message of the thread and returns the failure in the function's return shape.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from ge_python_backend.emulator import faults
from ge_python_backend.emulator._state import STATE, TLS, AclFailure, describe

F = TypeVar("F", bound=Callable[..., Any])
Failure = Callable[[int, tuple[Any, ...]], Any]


def ret(code: int, args: tuple[Any, ...]) -> int:
    """Failure shape of functions returning a bare ret."""
    return code


def zero_ret(code: int, args: tuple[Any, ...]) -> tuple[int, int]:
    """Failure shape `(0, ret)`."""
    return 0, code


def value(result: Any) -> Failure:
    """Failure shape of functions returning a bare value: that value."""
    return lambda code, args: result


def record(code: int, message: str) -> int:
    """Remember `message` as the calling thread's recent error; returns `code`."""
    TLS.recent_error = f"{TLS.api} failed with {describe(code)}: {message}"
    STATE.count("failures")
    return code


def api(
    name: str,
    *types: type,
    optional: int = 0,
    fail: Failure = ret,
    fault: str = "before",
    hangable: bool = False,
) -> Callable[[F], F]:
    """Declare pyACL function `name` taking arguments of `types` (the last `optional` may be
    omitted). `fault` is "before" (an injected fault replaces the call), "after" (the call runs,
    then the fault replaces its result) or "none" (not injectable). A `hangable` call queues work
    on a stream; under a hang fault it runs, and the work it queues never completes."""
    call = name.removeprefix("acl.")
    if fault != "none":
        faults.INJECTABLE.add(call)
    if hangable:
        faults.HANGABLE.add(call)

    fewest = len(types) - optional
    # The public module the function is declared in (`acl.rt`), wherever it is implemented.
    module = f"{__name__.rpartition('.')[0]}.{name.rpartition('.')[0]}"

    def decorate(impl: F) -> F:
        @functools.wraps(impl)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if (
                kwargs
                or not fewest <= len(args) <= len(types)
                or not all(map(isinstance, args, types))
            ):
                raise TypeError(f"<{name}> args parse failed")
            TLS.api = name
            before = faults.take(call) if fault == "before" else None
            if before is not None and before.stall_s:
                _stall(before)
                before = None
            if before is not None:
                if not before.hang:
                    return fail(_injected(before), args)
                STATE.count("faults_injected")
                faults.set_hanging(before)
            try:
                result = impl(*args)
            except AclFailure as exc:
                result = fail(record(exc.code, str(exc)), args)
            finally:
                if before is not None:
                    faults.set_hanging(None)
            injected = faults.take(call) if fault == "after" else None
            if injected is not None and injected.stall_s:
                _stall(injected)
            elif injected is not None:
                return fail(_injected(injected), args)
            return result

        wrapper.__module__ = module
        return cast(F, wrapper)

    return decorate


def _stall(fault: faults.Fault) -> None:
    """The calling thread stalls in the call for the fault's time (then the call goes on)."""
    STATE.count("faults_injected")
    time.sleep(fault.stall_s)


def _injected(fault: faults.Fault) -> int:
    STATE.count("faults_injected")
    nth = "every call" if fault.nth is None else f"call #{fault.nth}"
    return record(fault.code, f"injected fault {fault.call}:{fault.code} ({nth}, {faults.ENV})")
