"""A stand-in for Triton's `triton_python_backend_utils` (`pb_utils`), to run a model.py or a
`ModelInstance` in a plain Python process: our tests and benchmarks, or your own tests.

`pb_utils` exists only inside the Python backend's stub. `StandInUtils()` is a module object with
the parts ge_python_backend uses, under the real names, codes and call forms (checked against the
real module inside tritonserver by `tests/test_pb_utils_stand_in.py`): `Tensor`,
`InferenceRequest` (`inputs`, `requested_output_names`, `get_response_sender`),
`InferenceResponse`, `TritonError` and its codes, `TritonModelException`, `MetricFamily` and its
`Metric`, `Logger`, `TRITONSERVER_RESPONSE_COMPLETE_FINAL`, `get_input_tensor_by_name` and
`get_output_tensor_by_name`. What the model did is kept on the stand-in: `metric_calls`,
`log_lines`, and each request's `sent` queue of `(response, flags)` from its response sender.

`install()` puts a fresh stand-in in `sys.modules`, so that `import triton_python_backend_utils`
in a model.py finds it. Nothing in the served path imports this module.
"""

from __future__ import annotations

import queue
import sys
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["MODULE_NAME", "StandInUtils", "install"]

MODULE_NAME = "triton_python_backend_utils"


class TritonError:
    """`pb_utils.TritonError(message, code)`; the codes are TRITONSERVER_Error_Code's."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    """What a model raises from `execute` to fail the whole batch."""


class Tensor:
    """`pb_utils.Tensor(name, array)`; it holds a copy, as the real one copies to shared memory."""

    def __init__(self, name: str, numpy_array: np.ndarray) -> None:
        self._name, self._array = name, np.array(numpy_array)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceResponse:
    def __init__(self, output_tensors: Sequence[Tensor], error: TritonError | None = None) -> None:
        self._tensors, self._error = list(output_tensors), error

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class ResponseSender:
    """A request's response sender: each `send` lands in the request's `sent` queue."""

    def __init__(self, request: InferenceRequest) -> None:
        self._request = request

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        self._request.sent.put((response, flags))


class InferenceRequest:
    """A request as `execute` receives it (the keywords are the real constructor's)."""

    def __init__(
        self,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_name: str = "",
    ) -> None:
        self._inputs, self._requested = list(inputs), list(requested_output_names)
        self._model_name = model_name
        self.sent: queue.SimpleQueue[tuple[InferenceResponse | None, int]] = queue.SimpleQueue()

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested

    def model_name(self) -> str:
        return self._model_name

    def get_response_sender(self) -> ResponseSender:
        return ResponseSender(self)


class Metric:
    def __init__(self, family: MetricFamily, labels: Mapping[str, str]) -> None:
        self._family, self.labels, self._value = family, dict(labels), 0.0

    def increment(self, value: float) -> None:
        self._value += value
        self._family.calls.append(("increment", self._family.name, float(value)))

    def set(self, value: float) -> None:
        self._value = float(value)
        self._family.calls.append(("set", self._family.name, float(value)))

    def value(self) -> float:
        return self._value


class MetricFamily:
    """`pb_utils.MetricFamily(name, description, kind)`; `calls` is the stand-in's record."""

    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    calls: list[tuple[str, str, float]]  # set by StandInUtils: (method, family name, value)

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.description, self.kind = name, description, kind

    def Metric(self, labels: Mapping[str, str]) -> Metric:  # noqa: N802 (Triton's name)
        return Metric(self, labels)


def _log_at(level: str) -> classmethod[Logger, [str], None]:
    """A `Logger` method keeping `(level, message)` in the class's `lines`."""

    def log(cls: type[Logger], message: str) -> None:
        cls.lines.append((level, message))

    return classmethod(log)


class Logger:
    """`pb_utils.Logger`: what would reach Triton's log goes to `lines` as (level, message)."""

    lines: list[tuple[str, str]]  # set by StandInUtils
    log_info = _log_at("INFO")
    log_warn = _log_at("WARNING")
    log_error = _log_at("ERROR")
    log_verbose = _log_at("VERBOSE")


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((tensor for tensor in request.inputs() if tensor.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((tensor for tensor in response.output_tensors() if tensor.name() == name), None)


class StandInUtils(ModuleType):
    """One `pb_utils` with its own record of metric calls and log lines."""

    TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
    TritonError = TritonError
    TritonModelException = TritonModelException
    Tensor = Tensor
    InferenceRequest = InferenceRequest
    InferenceResponse = InferenceResponse
    get_input_tensor_by_name = staticmethod(get_input_tensor_by_name)
    get_output_tensor_by_name = staticmethod(get_output_tensor_by_name)

    def __init__(self) -> None:
        super().__init__(MODULE_NAME)
        self.metric_calls: list[tuple[str, str, float]] = []
        self.log_lines: list[tuple[str, str]] = []
        # Subclasses per stand-in, so that each keeps its own record.
        self.MetricFamily: Any = type("MetricFamily", (MetricFamily,), {"calls": self.metric_calls})
        self.Logger: Any = type("Logger", (Logger,), {"lines": self.log_lines})


def install() -> StandInUtils:
    """A fresh stand-in as `sys.modules["triton_python_backend_utils"]` (replacing any)."""
    utils = StandInUtils()
    sys.modules[MODULE_NAME] = utils
    return utils
