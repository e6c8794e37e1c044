"""Liveness probe that runs a real inference (`ge-python-model probe`).

Triton's `/v2/health/live` and `/v2/health/ready` keep answering while a model's NPU hangs: the
server process is fine, only the executions never finish. `probe` asks the server for the model's
config, sends one request of zeros shaped from it (batch 1; the first gear's shape, taken from the
smallest `model_warmup`, for HW/dims gears; 1 for any other -1 axis) and succeeds only when every
output arrives in time with the configured data type and shape. Kubernetes runs it as the exec
livenessProbe (`ge-python-model k8s`), so a hung device gets its pod restarted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.errors import UserError

PROTOCOLS = ("http", "grpc")
DEFAULT_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """The outcome: `ok`, a message saying what answered or what failed, and the seconds taken."""

    ok: bool
    message: str
    seconds: float


def triton_datatype(data_type: int) -> str:
    """Triton protocol name ("FP32", "BYTES", ...) of a config `DataType` value."""
    name = str(model_config_pb2.DataType.Name(data_type)).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def probe_inputs(config: ModelConfig) -> dict[str, tuple[np.ndarray, str]]:
    """`{input: (zeros, Triton data type)}`: batch 1 for a batched model, the smallest warmup's
    dims (the first HW/dims gear) where the config has one, and 1 for any remaining -1 axis."""
    from tritonclient.utils import triton_to_np_dtype

    warmup = min(config.model_warmup, key=lambda entry: entry.batch_size, default=None)
    batch = [1] if config.max_batch_size > 0 else []
    inputs: dict[str, tuple[np.ndarray, str]] = {}
    for tensor in config.input:
        dims = list(tensor.dims)
        if warmup is not None and tensor.name in warmup.inputs:
            dims = list(warmup.inputs[tensor.name].dims) or dims
        shape = batch + [1 if dim < 0 else int(dim) for dim in dims]
        datatype = triton_datatype(tensor.data_type)
        if datatype == "BYTES":
            array = np.full(shape, b"", dtype=object)
        else:
            array = np.zeros(shape, dtype=triton_to_np_dtype(datatype))
        inputs[tensor.name] = (array, datatype)
    return inputs


def output_problems(
    config: ModelConfig, outputs: Mapping[str, tuple[np.ndarray | None, str | None]]
) -> list[str]:
    """What is wrong with `{output: (array or None, data type or None)}` for `config`."""
    batched = config.max_batch_size > 0
    problems = []
    for tensor in config.output:
        array, datatype = outputs.get(tensor.name, (None, None))
        want_type = triton_datatype(tensor.data_type)
        want_shape = ([1] if batched else []) + list(tensor.dims)
        if array is None:
            problems.append(f"output {tensor.name!r} is missing")
        elif datatype != want_type:
            problems.append(f"output {tensor.name!r} is {datatype}, the config says {want_type}")
        elif len(array.shape) != len(want_shape) or any(
            want >= 0 and want != have for want, have in zip(want_shape, array.shape)
        ):
            problems.append(
                f"output {tensor.name!r} has shape {list(array.shape)}, the config says "
                f"{want_shape} (-1: any)"
            )
    return problems


def _describe(inputs: Mapping[str, tuple[np.ndarray, str]]) -> str:
    return ", ".join(f"{name} {dt} {list(array.shape)}" for name, (array, dt) in inputs.items())


def _message(exc: BaseException) -> str:
    text = getattr(exc, "message", None)
    text = text() if callable(text) else text
    return str(text or exc) or type(exc).__name__


def _connect(url: str, protocol: str, timeout: float) -> Any:
    """A tritonclient client whose connection and network waits end after `timeout` seconds."""
    module = importlib.import_module(f"tritonclient.{protocol}")
    if protocol == "http":
        return module.InferenceServerClient(
            url, connection_timeout=timeout, network_timeout=timeout
        )
    return module.InferenceServerClient(url)


def _model_config(client: Any, protocol: str, model: str, timeout: float) -> ModelConfig:
    if protocol == "grpc":
        return client.get_model_config(model, client_timeout=timeout).config
    config = client.get_model_config(model)
    return json_format.ParseDict(config, ModelConfig(), ignore_unknown_fields=True)


def _infer(
    client: Any,
    protocol: str,
    model: str,
    inputs: Mapping[str, tuple[np.ndarray, str]],
    output_names: Sequence[str],
    timeout: float,
) -> dict[str, tuple[np.ndarray | None, str | None]]:
    """Send the request; `{output: (array, data type)}` of the answer (None for a missing one)."""
    module = importlib.import_module(f"tritonclient.{protocol}")
    tensors = []
    for name, (array, datatype) in inputs.items():
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    wanted = [module.InferRequestedOutput(name) for name in output_names]
    options = {"client_timeout": timeout} if protocol == "grpc" else {}
    result = client.infer(model, tensors, outputs=wanted, **options)
    answer: dict[str, tuple[np.ndarray | None, str | None]] = {}
    for name in output_names:
        meta = result.get_output(name)
        if meta is None:
            answer[name] = (None, None)
        else:
            datatype = meta["datatype"] if protocol == "http" else meta.datatype
            answer[name] = (result.as_numpy(name), str(datatype))
    return answer


def probe(
    url: str, model: str, *, protocol: str = "http", timeout: float = DEFAULT_TIMEOUT_S
) -> ProbeResult:
    """Read `model`'s config from the server at `url` and run one inference shaped from it; ok
    only when a complete, well-formed answer arrives within `timeout` seconds in all."""
    if protocol not in PROTOCOLS:
        raise UserError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    if not timeout > 0:
        raise UserError(f"the timeout must be > 0 seconds, got {timeout}")
    from tritonclient.utils import InferenceServerException

    where = f"model {model!r} at {protocol}://{url}"
    start = time.monotonic()

    def remaining() -> float:
        return max(start + timeout - time.monotonic(), 0.001)

    step = "reading its config"
    try:
        with contextlib.closing(_connect(url, protocol, remaining())) as client:
            config = _model_config(client, protocol, model, remaining())
        inputs = probe_inputs(config)
        step = f"inference on {_describe(inputs)}"
        names = [tensor.name for tensor in config.output]
        with contextlib.closing(_connect(url, protocol, remaining())) as client:
            answer = _infer(client, protocol, model, inputs, names, remaining())
    except (InferenceServerException, OSError) as exc:
        seconds = time.monotonic() - start
        if seconds >= timeout:
            failed = f"no answer to {step} within the {timeout:g} s timeout"
        else:
            failed = f"{step} failed after {seconds:.2f} s"
        return ProbeResult(False, f"{where}: {failed}: {_message(exc)}", seconds)
    seconds = time.monotonic() - start
    problems = output_problems(config, answer)
    if problems:
        return ProbeResult(False, f"{where}: malformed answer: {'; '.join(problems)}", seconds)
    if seconds > timeout:
        return ProbeResult(
            False,
            f"{where}: answered after {seconds:.2f} s, beyond the {timeout:g} s timeout",
            seconds,
        )
    shapes = ", ".join(
        f"{name} {datatype} {list(array.shape)}"
        for name, (array, datatype) in answer.items()
        if array is not None
    )
    return ProbeResult(True, f"{where} answered in {seconds * 1000:.1f} ms: {shapes}", seconds)
