"""`ge-python-model infer`: send one request to a served model and summarise the outputs."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.errors import UserError

DEFAULT_URLS = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
FIRST_VALUES = 6

DESCRIPTION = """\
Send one inference request and print, per output, its data type, shape, min/max/mean and first
values. Inputs are random data of the model's data types (or .npy files with --input). Shapes come
from the model metadata: a batched model gets 1 row, and dynamic axes need --shape.

examples:
  ge-python-model infer --model resnet --shape images:1,3,224,224
  ge-python-model infer --url 127.0.0.1:8001 --protocol grpc --model resnet \\
      --input images=cat.npy
"""


def register(subparsers: Any) -> None:
    """Add the `infer` subcommand."""
    parser = subparsers.add_parser(
        "infer",
        help="send one request (random data or .npy files) and summarise the outputs",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--url", help="server HOST:PORT (default: 127.0.0.1:8000 for http, :8001 for grpc)"
    )
    parser.add_argument("--model", required=True, help="model name")
    parser.add_argument(
        "--protocol", choices=("http", "grpc"), default="http", help="(default: http)"
    )
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D0,D1,...",
        help="full request shape of an input, batch axis included (repeatable)",
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="send this array instead of random data (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random data seed (default: 0)")
    parser.set_defaults(func=run)


def parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`["x:1,3,224,224"]` -> `{"x": (1, 3, 224, 224)}`."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        try:
            shape = tuple(int(dim) for dim in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(dim < 0 for dim in shape):
            raise UserError(f"--shape {item!r} must be NAME:D0,D1,... with sizes >= 0")
        shapes[name] = shape
    return shapes


def parse_files(items: Sequence[str]) -> dict[str, Path]:
    """`["x=a.npy"]` -> `{"x": Path("a.npy")}`."""
    files: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(f"--input {item!r} must be NAME=FILE.npy")
        files[name] = Path(path)
    return files


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


def random_array(datatype: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random data of a Triton data type."""
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
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def load_array(name: str, path: Path, datatype: str) -> np.ndarray:
    """An `.npy` input, cast to the model's data type when that keeps its kind."""
    try:
        array = np.load(path, allow_pickle=datatype == "BYTES")
    except (OSError, ValueError) as exc:
        raise UserError(f"--input {name}: cannot read {path}: {exc}") from None
    if datatype == "BYTES":
        return np.asarray(array, dtype=object)
    from tritonclient.utils import triton_to_np_dtype

    dtype = np.dtype(triton_to_np_dtype(datatype))
    if array.dtype != dtype:
        if not np.can_cast(array.dtype, dtype, casting="same_kind"):
            raise UserError(
                f"--input {name}: {path} holds {array.dtype}, the model takes {datatype}"
            )
        array = array.astype(dtype)
    return array


def summary(name: str, datatype: str, array: np.ndarray) -> str:
    """One line: name, data type, shape, min/max/mean and the first values."""
    flat = array.reshape(-1)
    first = flat[:FIRST_VALUES].tolist()
    more = ", ..." if flat.size > FIRST_VALUES else ""
    text = f"  {name}  {datatype}  {list(array.shape)}"
    if flat.size and array.dtype.kind in "biuf":
        values = flat.astype(np.float64)
        text += f"  min {values.min():.6g}  max {values.max():.6g}  mean {values.mean():.6g}"
    shown = ", ".join(repr(v) if isinstance(v, bytes) else f"{v:.6g}" for v in first)
    return text + f"  first [{shown}{more}]"


def _describe(client: Any, protocol: str, model: str) -> tuple[dict[str, Any], int]:
    """The model metadata as a dict and its max_batch_size."""
    if protocol == "grpc":
        metadata = client.get_model_metadata(model, as_json=True)
        config = client.get_model_config(model, as_json=True)["config"]
    else:
        metadata = client.get_model_metadata(model)
        config = client.get_model_config(model)
    return metadata, int(config.get("max_batch_size", 0))


def request_arrays(
    metadata: Mapping[str, Any],
    batched: bool,
    shapes: Mapping[str, tuple[int, ...]],
    files: Mapping[str, Path],
    seed: int = 0,
) -> dict[str, tuple[np.ndarray, str]]:
    """`{input name: (array, Triton data type)}` for the model described by `metadata`."""
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
            request_shape(name, declared, batched, tuple(array.shape))
        else:
            array = random_array(
                datatype, request_shape(name, declared, batched, shapes.get(name)), rng
            )
        arrays[name] = (array, datatype)
    return arrays


def infer_once(
    url: str,
    protocol: str,
    model: str,
    shapes: Mapping[str, tuple[int, ...]],
    files: Mapping[str, Path],
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, str]], float]:
    """Send one request: (inputs sent, {output: (array, data type)}, seconds)."""
    from tritonclient.utils import InferenceServerException

    # Imported here: the clients are slow to import and only this command needs them.
    module = importlib.import_module(f"tritonclient.{protocol}")
    try:
        with contextlib.closing(module.InferenceServerClient(url)) as client:
            metadata, max_batch_size = _describe(client, protocol, model)
            arrays = request_arrays(metadata, max_batch_size > 0, shapes, files, seed)
            request = []
            for name, (array, datatype) in arrays.items():
                tensor = module.InferInput(name, list(array.shape), datatype)
                tensor.set_data_from_numpy(array)
                request.append(tensor)
            output_meta = metadata.get("outputs", [])
            wanted = [module.InferRequestedOutput(item["name"]) for item in output_meta]
            start = time.perf_counter()
            result = client.infer(model, request, outputs=wanted)
            seconds = time.perf_counter() - start
    except InferenceServerException as exc:
        raise UserError(f"{protocol}://{url}: {exc.message() or exc}") from None
    except OSError as exc:
        raise UserError(f"cannot reach Triton at {protocol}://{url}: {exc}") from None
    outputs = {
        item["name"]: (result.as_numpy(item["name"]), item["datatype"]) for item in output_meta
    }
    return {name: array for name, (array, _) in arrays.items()}, outputs, seconds


def run(args: argparse.Namespace) -> int:
    """Send the request and print the summaries."""
    url = args.url or DEFAULT_URLS[args.protocol]
    url = url.removeprefix("http://").removeprefix("https://")
    sent, outputs, seconds = infer_once(
        url,
        args.protocol,
        args.model,
        parse_shapes(args.shape),
        parse_files(args.input),
        args.seed,
    )
    print(f"model {args.model!r} at {args.protocol}://{url}: {seconds * 1000:.2f} ms")
    print("inputs:")
    for name, array in sent.items():
        print(f"  {name}  {array.dtype}  {list(array.shape)}")
    print("outputs:")
    for name, (array, datatype) in outputs.items():
        print(summary(name, datatype, array))
    return 0
