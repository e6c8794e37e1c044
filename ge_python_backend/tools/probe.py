"""Liveness probe that runs a real inference (`ge-python-model probe`).

Triton's `/v2/health/live` and `/v2/health/ready` keep answering while a model's NPU hangs: the
server process is fine, only the executions never finish. `probe` asks the server for the model's
config, sends one request of zeros shaped from it (batch 1; the first gear's shape, taken from the
smallest `model_warmup`, for HW/dims gears; 1 for any other -1 axis) and succeeds only when every
output arrives in time with the configured data type and shape. Kubernetes runs it as the exec
livenessProbe (`ge-python-model k8s`), so a hung device gets its pod restarted.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.client import CONNECTION_ERRORS, TritonClient, error_text, server_url
from ge_python_backend.errors import UserError

DEFAULT_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """The outcome: `ok`, a message saying what answered or what failed, the seconds taken and
    whether it failed by exceeding the timeout."""

    ok: bool
    message: str
    seconds: float
    timed_out: bool = False


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


def _infer(
    client: TritonClient,
    model: str,
    inputs: Mapping[str, tuple[np.ndarray, str]],
    output_names: Sequence[str],
) -> dict[str, tuple[np.ndarray | None, str | None]]:
    """Send the request; `{output: (array, data type)}` of the answer (None for a missing one)."""
    result = client.send(model, client.prepare(inputs, output_names))
    answer: dict[str, tuple[np.ndarray | None, str | None]] = {}
    for name in output_names:
        meta = result.get_output(name)
        if meta is None:
            answer[name] = (None, None)
        else:
            datatype = meta["datatype"] if client.protocol == "http" else meta.datatype
            answer[name] = (result.as_numpy(name), str(datatype))
    return answer


def probe(
    url: str | None, model: str, *, protocol: str = "http", timeout: float = DEFAULT_TIMEOUT_S
) -> ProbeResult:
    """Read `model`'s config from the server at `url` (None: the protocol's default port on
    127.0.0.1) and run one inference shaped from it; ok only when a complete, well-formed answer
    arrives within `timeout` seconds in all."""
    address = server_url(url, protocol)
    if not timeout > 0:
        raise UserError(f"the timeout must be > 0 seconds, got {timeout}")
    from tritonclient.utils import InferenceServerException

    where = f"model {model!r} at {protocol}://{address}"
    start = time.monotonic()

    def remaining() -> float:
        return max(start + timeout - time.monotonic(), 0.001)

    step = "reading its config"
    try:
        with TritonClient(address, protocol, timeout_s=remaining()) as client:
            config = client.model_config(model)
        inputs = probe_inputs(config)
        step = f"inference on {_describe(inputs)}"
        names = [tensor.name for tensor in config.output]
        with TritonClient(address, protocol, timeout_s=remaining()) as client:
            answer = _infer(client, model, inputs, names)
    except (InferenceServerException, *CONNECTION_ERRORS) as exc:
        seconds = time.monotonic() - start
        timed_out = seconds >= timeout
        if timed_out:
            failed = f"no answer to {step} within the {timeout:g} s timeout"
        else:
            failed = f"{step} failed after {seconds:.2f} s"
        return ProbeResult(False, f"{where}: {failed}: {error_text(exc)}", seconds, timed_out)
    seconds = time.monotonic() - start
    problems = output_problems(config, answer)
    if problems:
        return ProbeResult(False, f"{where}: malformed answer: {'; '.join(problems)}", seconds)
    if seconds > timeout:
        return ProbeResult(
            False,
            f"{where}: answered after {seconds:.2f} s, beyond the {timeout:g} s timeout",
            seconds,
            timed_out=True,
        )
    shapes = ", ".join(
        f"{name} {datatype} {list(array.shape)}"
        for name, (array, datatype) in answer.items()
        if array is not None
    )
    return ProbeResult(True, f"{where} answered in {seconds * 1000:.1f} ms: {shapes}", seconds)
