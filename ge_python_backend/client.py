"""Talking to a Triton server with `tritonclient`: what `infer`, `compare` and `bench` share.

`TritonClient` wraps one HTTP or gRPC client (tritonclient's HTTP clients are gevent based: one
per thread, never shared) behind one interface for both protocols; `prepare` builds the
`InferInput`/`InferRequestedOutput` objects of a request once, `send` sends them (`send_async`:
without waiting, gRPC), `infer` does both and returns the outputs by name. `server_errors`
turns the failures of a block into one-line `UserError`s for the CLI, `error_text` gives the
message of one. `random_array`, `load_array` and `cast_array` make request data of a Triton data
type. The `tritonclient` protocol modules are imported only when a client is made: they are
slow to import.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import importlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend import repository_key
from ge_python_backend.errors import UserError

PROTOCOLS = ("http", "grpc")
DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
# Random integer inputs lie in [0, INT_HIGH): valid token ids, class ids and indices for nearly
# any model (embedding tables have more rows than that).
INT_HIGH = 32
# Request inputs: name -> (array, Triton data type).
TypedArrays = Mapping[str, tuple[np.ndarray, str]]
# What a client raises when nothing, or no server of its protocol, answers at the address:
# refused or reset connections (OSError) and replies that are not HTTP/1.1 (tritonclient.http's
# geventhttpclient raises HTTPParseError, an http.client.HTTPException, e.g. at a gRPC port).
CONNECTION_ERRORS = (OSError, http.client.HTTPException)
DRAIN_POLL_S = 0.05  # how often `unload_drained` reads the model's state


def server_url(url: str | None, protocol: str) -> str:
    """HOST:PORT of the server: `url` without an http(s):// prefix, else the protocol's default."""
    if protocol not in PROTOCOLS:
        raise UserError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    return (url or DEFAULT_URLS[protocol]).removeprefix("http://").removeprefix("https://")


def error_text(exc: BaseException) -> str:
    """The message of an exception (tritonclient's `message()` when it has one); a reply that
    is not HTTP/1.1 says so."""
    if isinstance(exc, http.client.HTTPException):
        detail = exc.args[0] if exc.args else type(exc).__name__
        return f"the reply is not HTTP/1.1 ({detail}): is this Triton's HTTP port?"
    text = getattr(exc, "message", None)
    text = text() if callable(text) else text
    text = str(text or exc) or type(exc).__name__
    if "is restricted, expecting header" in text and f"{repository_key.HEADER}'" in text:
        text += (
            f" (the server's model-repository API needs its key: {repository_key.ENV}, or "
            "the file its `serve` left in the run directory, readable by its user only)"
        )
    return text


@contextlib.contextmanager
def server_errors(url: str, protocol: str, model: str | None = None) -> Iterator[None]:
    """Re-raise what tritonclient raises in the block as a one-line `UserError`."""
    from tritonclient.utils import InferenceServerException

    where = f"{protocol}://{url}" + (f" model {model!r}" if model else "")
    try:
        yield
    except InferenceServerException as exc:
        raise UserError(f"{where}: {error_text(exc)}") from None
    except CONNECTION_ERRORS as exc:
        raise UserError(f"cannot reach Triton at {protocol}://{url}: {error_text(exc)}") from None


@dataclasses.dataclass(frozen=True)
class PreparedRequest:
    """The tritonclient objects of one request, built once and sent any number of times."""

    inputs: list[Any]
    outputs: list[Any] | None  # None: no outputs named, the server returns all of them


class TritonClient:
    """One tritonclient client of `url` (HOST:PORT) over `protocol`. Over HTTP use it from one
    thread; tritonclient's gRPC client may be shared by threads.

    `timeout_s` bounds connecting and each call (None: tritonclient's defaults). The calls of
    the model-repository API (index, load, unload) carry `repository_key`, by default the one
    `repository_key.find_key` finds for `url`.
    """

    def __init__(
        self,
        url: str,
        protocol: str = "http",
        *,
        timeout_s: float | None = None,
        repository_key: str | None = None,
    ):
        self.url = server_url(url, protocol)
        self.protocol = protocol
        self._repository_key = repository_key
        self._module = importlib.import_module(f"tritonclient.{protocol}")
        self._options: dict[str, Any] = {}  # per call: gRPC's client_timeout
        if protocol == "http" and timeout_s is not None:
            self._client = self._module.InferenceServerClient(
                self.url, connection_timeout=timeout_s, network_timeout=timeout_s
            )
        else:
            self._client = self._module.InferenceServerClient(self.url)
            if timeout_s is not None:
                self._options["client_timeout"] = timeout_s

    def __enter__(self) -> TritonClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._client.close()

    def model_metadata(self, model: str) -> dict[str, Any]:
        """`{"name", "inputs": [{"name", "datatype", "shape"}], "outputs": [...], ...}`."""
        if self.protocol == "grpc":
            return dict(self._client.get_model_metadata(model, as_json=True, **self._options))
        return dict(self._client.get_model_metadata(model))

    def model_config(self, model: str) -> ModelConfig:
        """The served model's config."""
        if self.protocol == "grpc":
            return self._client.get_model_config(model, **self._options).config
        config = self._client.get_model_config(model)
        return json_format.ParseDict(config, ModelConfig(), ignore_unknown_fields=True)

    def inference_statistics(self, model: str) -> dict[str, Any]:
        """`GET v2/models/<model>/stats` as JSON (`{"model_stats": [{"inference_count", ...}]}`;
        gRPC gives its 64-bit counts as strings)."""
        if self.protocol == "grpc":
            return dict(self._client.get_inference_statistics(model, as_json=True, **self._options))
        return dict(self._client.get_inference_statistics(model))

    def is_model_ready(self, model: str, version: str = "") -> bool:
        """Whether `version` of `model` ("": the server's choice of version) is ready."""
        return bool(self._client.is_model_ready(model, version, **self._options))

    def repository_index(self) -> list[dict[str, Any]]:
        """Every model of the repository: `{"name", "version", "state", "reason"}` (a model
        never loaded has no version or state)."""
        options = self._repository_options()
        if self.protocol == "grpc":
            index = self._client.get_model_repository_index(as_json=True, **options)
            return list(index.get("models", []))
        return list(self._client.get_model_repository_index(**options))

    def load_model(self, model: str, config: str | None = None) -> None:
        """Load (or reload) `model`; needs `--model-control-mode=explicit`. `config` (the
        model config as JSON) overrides the repository's config.pbtxt for this load."""
        self._client.load_model(model, config=config, **self._repository_options())

    def unload_model(self, model: str) -> None:
        """Unload `model`; needs `--model-control-mode=explicit`."""
        self._client.unload_model(model, **self._repository_options())

    def _repository_options(self) -> dict[str, Any]:
        """The call options of a model-repository call: the key's header, where there is one."""
        if self._repository_key is None:
            self._repository_key = repository_key.find_key(self.url)
        headers = repository_key.request_headers(self._repository_key, self.protocol)
        return {**self._options, "headers": headers} if headers else self._options

    def unload_drained(self, model: str, timeout_s: float) -> bool:
        """Unload `model` and wait until Triton has drained it: answered its executions in
        flight and finalized its instances (no version READY or UNLOADING in the index; Triton's
        unload call returns before). False when that took more than `timeout_s` seconds."""
        self.unload_model(model)
        deadline = time.monotonic() + timeout_s
        while any(
            entry.get("name") == model and entry.get("state") in ("READY", "UNLOADING")
            for entry in self.repository_index()
        ):
            if time.monotonic() > deadline:
                return False
            time.sleep(DRAIN_POLL_S)
        return True

    def prepare(self, inputs: TypedArrays, outputs: Sequence[str] | None) -> PreparedRequest:
        """The request carrying `inputs` and asking for `outputs` (binary data over HTTP; None:
        name none, so that the server returns every output)."""
        tensors = []
        for name, (array, datatype) in inputs.items():
            tensor = self._module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        if outputs is None:
            return PreparedRequest(tensors, None)
        return PreparedRequest(tensors, [self._module.InferRequestedOutput(n) for n in outputs])

    def send(self, model: str, request: PreparedRequest, version: str = "") -> Any:
        """Send a prepared request to `version` of `model` ("": the server's choice);
        tritonclient's result (`.as_numpy(name)`), or it raises."""
        return self._client.infer(
            model, request.inputs, model_version=version, outputs=request.outputs, **self._options
        )

    def send_async(
        self,
        model: str,
        request: PreparedRequest,
        callback: Callable[[Any, Exception | None], None],
        version: str = "",
    ) -> None:
        """Send without waiting (gRPC only); `callback(result, error)` runs when it is answered."""
        if self.protocol != "grpc":
            raise UserError("send_async needs the grpc protocol")
        self._client.async_infer(
            model,
            request.inputs,
            callback,
            model_version=version,
            outputs=request.outputs,
            **self._options,
        )

    def infer(
        self,
        model: str,
        inputs: TypedArrays,
        outputs: Sequence[str] | None = None,
        version: str = "",
    ) -> dict[str, np.ndarray]:
        """One request: `{output name: array}` for every name of `outputs` (None: every output
        the server returned, in its order)."""
        result = self.send(model, self.prepare(inputs, outputs), version)
        names = self._output_names(result) if outputs is None else outputs
        return {name: result.as_numpy(name) for name in names}

    def _output_names(self, result: Any) -> list[str]:
        response = result.get_response()
        if self.protocol == "grpc":
            return [output.name for output in response.outputs]
        return [output["name"] for output in response.get("outputs", [])]


def typed(arrays: Mapping[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    """`{name: (array, Triton data type of its numpy dtype)}`."""
    from tritonclient.utils import np_to_triton_dtype

    return {name: (array, np_to_triton_dtype(array.dtype)) for name, array in arrays.items()}


def random_array(datatype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random data of a Triton data type: floats ~ N(0, 1), integers in [0, INT_HIGH), booleans
    half true, BYTES short texts."""
    if datatype == "BYTES":
        return np.array([f"text {i}".encode() for i in range(int(np.prod(shape)))], dtype=object)
    from tritonclient.utils import triton_to_np_dtype

    dtype = triton_to_np_dtype(datatype)
    if dtype is None:
        raise UserError(f"cannot make random {datatype} data; pass the input with --input")
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, INT_HIGH, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def load_array(name: str, path: Path, datatype: str) -> np.ndarray:
    """An `.npy` input, cast to the Triton data type `datatype` when that keeps its kind; for a
    BYTES input any other file (a JPEG for an image input) is one element: its bytes, 0-d."""
    if datatype == "BYTES" and path.suffix.lower() != ".npy":
        try:
            return np.array(path.read_bytes(), dtype=object)
        except OSError as exc:
            raise UserError(f"--input {name}: cannot read {path}: {exc.strerror or exc}") from None
    try:
        array = np.load(path, allow_pickle=datatype == "BYTES")
    except (OSError, ValueError) as exc:
        raise UserError(f"--input {name}: cannot read {path}: {exc}") from None
    return cast_array(array, datatype, f"--input {name}: {path}")


def cast_array(array: np.ndarray, datatype: str, source: str) -> np.ndarray:
    """`array` as the Triton data type `datatype` when that keeps its kind (`source` names the
    data in the error otherwise)."""
    if datatype == "BYTES":
        return np.asarray(array, dtype=object)
    from tritonclient.utils import triton_to_np_dtype

    dtype = np.dtype(triton_to_np_dtype(datatype))
    if array.dtype != dtype:
        if not np.can_cast(array.dtype, dtype, casting="same_kind"):
            raise UserError(f"{source} holds {array.dtype}, the model takes {datatype}")
        array = array.astype(dtype)
    return array


def request_shape(
    name: str, declared: Sequence[int], batched: bool, given: tuple[int, ...] | None
) -> tuple[int, ...]:
    """The shape to send: `given` checked against the metadata, else the metadata's own."""
    if given is not None:
        fits = len(given) == len(declared) and all(
            want < 0 or want == have for want, have in zip(declared, given)
        )
        if not fits:
            raise UserError(f"--shape for {name!r} is {list(given)} but the model takes {declared}")
        return given
    shape = list(declared)
    if batched and shape and shape[0] < 0:
        shape[0] = 1
    if any(dim < 0 for dim in shape):
        example = ",".join("1" if dim < 0 else str(dim) for dim in shape)
        raise UserError(
            f"input {name!r} has dynamic axes {declared}; give its shape, e.g. "
            f"--shape {name}:{example}"
        )
    return tuple(shape)


def request_arrays(
    metadata: Mapping[str, Any],
    batched: bool,
    shapes: Mapping[str, tuple[int, ...]],
    files: Mapping[str, Path],
    seed: int = 0,
) -> dict[str, tuple[np.ndarray, str]]:
    """`{input name: (array, Triton data type)}` for the model described by `metadata`: the
    `.npy` of `files`, else random data of `shapes` or the metadata's shape (batch 1)."""
    inputs_meta = metadata.get("inputs", [])
    known = [item["name"] for item in inputs_meta]
    unknown = sorted((set(shapes) | set(files)) - set(known))
    if unknown:
        raise UserError(
            f"model {metadata.get('name', '')!r} has no input {', '.join(unknown)} "
            f"(inputs: {', '.join(known)})"
        )
    rng = np.random.default_rng(seed)
    arrays: dict[str, tuple[np.ndarray, str]] = {}
    for item in inputs_meta:
        name, datatype = item["name"], item["datatype"]
        declared = [int(dim) for dim in item["shape"]]
        if name in files:
            array = load_array(name, files[name], datatype)
            if array.ndim == 0:  # one file's bytes: the one element of a [1, 1] request
                shape = request_shape(name, declared, batched, shapes.get(name))
                if math.prod(shape) != 1:
                    raise UserError(
                        f"--input {name}={files[name]}: one file is one element, but the "
                        f"request's shape is {list(shape)}"
                    )
                array = array.reshape(shape)
            request_shape(name, declared, batched, tuple(array.shape))
        else:
            array = random_array(
                datatype, request_shape(name, declared, batched, shapes.get(name)), rng
            )
        arrays[name] = (array, datatype)
    return arrays
