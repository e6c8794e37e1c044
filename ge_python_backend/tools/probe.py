"""Liveness probe that runs a real inference (`ge-python-model probe`).

Triton's `/v2/health/live` and `/v2/health/ready` keep answering while a model's NPU hangs: the
server process is fine, only the executions never finish. `probe` asks the server for the model's
config, sends one request of zeros shaped from it (batch 1; the first gear's shape, taken from the
smallest `model_warmup`, for HW/dims gears; 1 for any other -1 axis; the input the `image_input`
parameter names gets a real JPEG file, `PROBE_JPEG`) and succeeds only when every output arrives
in time with the configured data type and shape. Kubernetes runs it as the exec
livenessProbe (`ge-python-model k8s`), so a hung device gets its pod restarted.

`probe_repository` checks a whole repository the same way (`validate --serve`, and `migrate` on
the repository it writes): a throwaway tritonserver loads every model, each model READY gets one
probe (ensembles included), each other one is reported with Triton's reason, and the server is
stopped.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import struct
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import common_dvpp_limits
from ge_python_backend.client import CONNECTION_ERRORS, TritonClient, error_text, server_url
from ge_python_backend.errors import UserError
from ge_python_backend.progress import Progress
from ge_python_backend.repository.parameters import parse_image_input
from ge_python_backend.runtime import ENV_VAR
from ge_python_backend.server import TritonServer, describe_python, find_server

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
# How long a throwaway server may take to load every model of a repository.
DEFAULT_LOAD_TIMEOUT_S = 300.0
# Repository-index states of a model whose load has not finished.
LOADING_STATES = ("LOADING",)


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """The outcome: `ok`, a message saying what answered or what failed, the seconds taken and
    whether it failed by exceeding the timeout."""

    ok: bool
    message: str
    seconds: float
    timed_out: bool = False


def grey_jpeg(width: int, height: int) -> bytes:
    """A baseline JPEG of `width` x `height` mid-grey pixels (YCbCr 4:2:0, what cameras write):
    every 8 x 8 block's coefficients are 0, so one Huffman code of one bit (symbol 0: DC
    difference 0, AC end of block) and 2 bits a block make the whole scan."""

    def segment(marker: int, body: bytes) -> bytes:
        return bytes([0xFF, marker]) + struct.pack(">H", len(body) + 2) + body

    one_code = bytes([1] + [0] * 15) + b"\x00"  # one code of length 1, for symbol 0
    frame = struct.pack(">BHHB", 8, height, width, 3) + bytes([1, 0x22, 0, 2, 0x11, 0, 3, 0x11, 0])
    scan_header = bytes([3, 1, 0x00, 2, 0x00, 3, 0x00, 0, 63, 0])
    bits = math.ceil(width / 16) * math.ceil(height / 16) * 6 * 2  # 6 blocks an MCU
    scan = bytes(bits // 8) + (bytes([0xFF >> bits % 8]) if bits % 8 else b"")  # 1s pad
    return b"".join(
        (
            b"\xff\xd8",  # SOI
            segment(0xDB, b"\x00" + bytes([1]) * 64),  # quantisation table 0: all 1
            segment(0xC0, frame),  # baseline frame: Y 2x2, Cb and Cr 1x1, table 0
            segment(0xC4, b"\x00" + one_code + b"\x10" + one_code),  # DC 0 and AC 0 tables
            segment(0xDA, scan_header),
            scan,
            b"\xff\xd9",  # EOI
        )
    )


# The probe's JPEG file: square, of the side VPC scales (1/32 to 16 per side) into any image
# input's rows up to the largest VPC writes on every SoC (4096 x 4096 / 16 = 256), and the
# smallest rows down to 8 x 8; JPEGD decodes it on every SoC (32..8192).
_LIMITS = common_dvpp_limits()
PROBE_JPEG_SIDE = math.ceil(
    max(_LIMITS.vpc_out_max_w, _LIMITS.vpc_out_max_h) / _LIMITS.vpc_max_scale
)
PROBE_JPEG = grey_jpeg(PROBE_JPEG_SIDE, PROBE_JPEG_SIDE)


def triton_datatype(data_type: int) -> str:
    """Triton protocol name ("FP32", "BYTES", ...) of a config `DataType` value."""
    name = str(model_config_pb2.DataType.Name(data_type)).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def probe_inputs(config: ModelConfig) -> dict[str, tuple[np.ndarray, str]]:
    """`{input: (zeros, Triton data type)}`: batch 1 for a batched model, the smallest warmup's
    dims (the first HW/dims gear) where the config has one, and 1 for any remaining -1 axis;
    `PROBE_JPEG` in every element of the input the `image_input` parameter names."""
    from tritonclient.utils import triton_to_np_dtype

    given = config.parameters.get("image_input")
    image_input = parse_image_input(None if given is None else given.string_value)
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
            array = np.full(shape, PROBE_JPEG if tensor.name == image_input else b"", dtype=object)
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


@dataclasses.dataclass(frozen=True)
class ModelProbe:
    """One model of a repository served by `probe_repository`: its state in Triton's
    repository index (per version: `READY`, `UNAVAILABLE`, ...), `ok` when every version is
    READY and the model answered a probe, and a message saying what answered or why not."""

    name: str
    states: tuple[str, ...]
    ok: bool
    message: str


def _index_by_model(index: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    models: dict[str, list[Mapping[str, Any]]] = {}
    for entry in index:
        models.setdefault(str(entry["name"]), []).append(entry)
    return dict(sorted(models.items()))


def _wait_loaded(server: TritonServer, deadline: float) -> dict[str, list[Mapping[str, Any]]]:
    """The repository index by model once no model is loading any more (or at `deadline`)."""
    while True:
        models = _index_by_model(server.repository_index())
        loading = [
            name
            for name, entries in models.items()
            if any(entry.get("state") in LOADING_STATES for entry in entries)
        ]
        if not loading or time.monotonic() > deadline:
            return models
        time.sleep(0.2)


def _not_ready(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """`version 1: UNAVAILABLE: <Triton's reason>` for each entry that is not READY (the first
    line of the reason: a Python model's traceback follows it)."""
    lines = []
    for entry in entries:
        state = entry.get("state") or "not loaded"
        if state == "READY":
            continue
        reason = next(iter(str(entry.get("reason", "")).strip().splitlines()), "")
        version = f"version {entry['version']}: " if entry.get("version") else ""
        lines.append(f"{version}{state}" + (f": {reason}" if reason else ""))
    return lines


def _load_error(server: TritonServer, name: str, timeout: float) -> str | None:
    """Triton's answer to loading `name` once more (explicit model control): None when it
    loads now, else the first line of its error. The index gives no reason for a model that
    was never loaded, e.g. an ensemble whose step failed; the load answer names it."""
    from tritonclient.utils import InferenceServerException

    try:
        with TritonClient(server_url(server.urls.http, "http"), timeout_s=timeout) as client:
            client.load_model(name)
    except (InferenceServerException, *CONNECTION_ERRORS) as exc:
        return next(iter(error_text(exc).strip().splitlines()), "the load failed")
    return None


def probe_repository(
    repository: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    runtime: str | None = None,
    timeout: float = DEFAULT_LOAD_TIMEOUT_S,
    probe_timeout: float = DEFAULT_TIMEOUT_S,
    tritonserver: str | os.PathLike[str] | None = None,
    backend_directory: str | os.PathLike[str] | None = None,
    stub_python: str | os.PathLike[str] | None = None,
    log_path: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> list[ModelProbe]:
    """Serve `repository` with a throwaway tritonserver (free ports, explicit model control
    with every model loaded at start), wait up to `timeout` s for the loads, probe every READY
    model (`probe`, within `probe_timeout` s each), ask Triton why a model never loaded by
    loading it once more, and stop the server; one `ModelProbe` per model, by name.

    `env` is added to the server's environment; `runtime` ("emulator", "pyacl") sets
    `$GE_PYTHON_BACKEND_ACL`, which overrides every config's `acl_runtime`. `tritonserver`,
    `backend_directory` and `stub_python` are `serve`'s options (default: the bundled server,
    this interpreter); `log_path` keeps the server log there; `progress` gets a line when the
    server is ready, when the models have loaded and per model probed. ServerError when the
    server does not start.
    """
    if not timeout > 0:
        raise UserError(f"the load timeout must be > 0 seconds, got {timeout}")
    server_env = dict(env or {})
    if runtime is not None:
        server_env[ENV_VAR] = runtime
    python = describe_python(stub_python)
    server = TritonServer(
        repository,
        model_control_mode="explicit",
        load_models=["*"],
        env=server_env,
        binary=find_server(tritonserver, backend_directory, stub_version=python.version),
        stub_python=python,
        log_path=log_path,
    )
    progress = progress or Progress(quiet=True)
    started = time.monotonic()
    deadline = started + timeout
    progress.begin("starting tritonserver")
    server.start()
    logger.info("tritonserver for %s started; log %s", server.repository, server.log_path)
    try:
        server.wait_ready(timeout)
        progress.done(f"tritonserver ready after {time.monotonic() - started:.1f} s")
        progress.begin("loading the models")
        models = _wait_loaded(server, deadline)
        progress.done(f"{len(models)} model(s) loaded after {time.monotonic() - started:.1f} s")
        results = []
        for number, (name, entries) in enumerate(models.items(), 1):
            progress.begin(f"model {number} of {len(models)} {name!r}: probing")
            results.append(_probe_loaded(server, name, entries, deadline, probe_timeout))
            verdict = "answered" if results[-1].ok else "FAILED"
            progress.done(f"model {number} of {len(models)} {name!r}: {verdict}")
        return results
    finally:
        server.stop()


def _probe_loaded(
    server: TritonServer,
    name: str,
    entries: list[Mapping[str, Any]],
    deadline: float,
    probe_timeout: float,
) -> ModelProbe:
    """The probe of model `name` once the loads are over: why it never loaded (Triton's error
    when it is loaded once more), why a version is not READY, or its answer."""
    if not any(entry.get("state") for entry in entries):  # never loaded: ask why
        error = _load_error(server, name, max(deadline - time.monotonic(), 1.0))
        if error is not None:
            return ModelProbe(name, ("not loaded",), False, error)
        entries = _index_by_model(server.repository_index()).get(name, entries)
    failed = _not_ready(entries)
    if failed:
        states = tuple(str(entry.get("state") or "not loaded") for entry in entries)
        return ModelProbe(name, states, False, "; ".join(failed))
    answer = probe(server.urls.http, name, timeout=probe_timeout)
    return ModelProbe(name, ("READY",) * len(entries), answer.ok, answer.message)
