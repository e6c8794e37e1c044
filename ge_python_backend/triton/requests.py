"""Turning Triton requests into feeds and session results into Triton responses."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ge_python_backend.runtime import InputError

# The Triton 2.51 stub hands numpy arrays over through a pybind11 older than numpy 2's dtype
# layout: with numpy 2, `as_numpy()` reads zeros and `pb_utils.Tensor(name, array)` makes a
# tensor without data (seen in tests/test_stub_environments.py). DLPack carries them intact, so
# numpy 2 takes it both ways; numpy 1 keeps the numpy path.
DLPACK_TENSORS = int(np.__version__.split(".")[0]) >= 2


class ParsedRequest(NamedTuple):
    """One request that passed validation: its place in `execute`'s list, its input arrays and
    the outputs it wants."""

    position: int
    feeds: dict[str, np.ndarray]
    requested_outputs: tuple[str, ...]


def parse_request(
    request: Any, position: int, output_names: Sequence[str], bytes_inputs: Collection[str] = ()
) -> ParsedRequest:
    """Read a request's input tensors and requested outputs; raise InputError on unknown outputs.
    `bytes_inputs` (BYTES tensors, such as an image input's JPEG files) are read with
    `as_numpy()`: DLPack carries no object arrays.

    A model with one output does not ask which outputs were requested: Triton refuses a request
    for an output the model does not have before `execute`, and the Python backend drops the
    outputs a response carries but the request did not ask for; with more outputs, only the
    requested ones are built.
    """
    feeds = {
        tensor.name(): tensor.as_numpy() if tensor.name() in bytes_inputs else _array(tensor)
        for tensor in request.inputs()
    }
    if len(output_names) == 1:
        return ParsedRequest(position, feeds, ())
    requested = tuple(request.requested_output_names())
    unknown = [name for name in requested if name not in output_names]
    if unknown:
        raise InputError(
            f"requested output(s) {', '.join(map(repr, unknown))} do not exist; "
            f"the model's outputs are {', '.join(map(repr, output_names))}"
        )
    return ParsedRequest(position, feeds, requested)


def build_response(
    pb_utils: Any, outputs: Mapping[str, np.ndarray], requested: Sequence[str]
) -> Any:
    """A response carrying the requested outputs (all of them when none were named). Triton
    has no scalar tensors in a model without batching: a scalar output is served as [1]."""
    names = requested or tuple(outputs)
    make = pb_utils.Tensor.from_dlpack if DLPACK_TENSORS else pb_utils.Tensor
    tensors = []
    for name in names:
        array = outputs[name]
        tensors.append(make(name, array if array.ndim else array.reshape(1)))
    return pb_utils.InferenceResponse(output_tensors=tensors)


def _array(tensor: Any) -> np.ndarray:
    """An input tensor's data as an array (a view of Triton's shared memory)."""
    return np.from_dlpack(tensor) if DLPACK_TENSORS else tensor.as_numpy()


def error_response(pb_utils: Any, message: str, code_name: str) -> Any:
    """A response that fails one request with a Triton error code (e.g. INVALID_ARG, INTERNAL)."""
    error = pb_utils.TritonError(message, getattr(pb_utils.TritonError, code_name))
    return pb_utils.InferenceResponse(output_tensors=[], error=error)
