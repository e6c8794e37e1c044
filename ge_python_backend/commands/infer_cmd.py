"""`ge-python-model infer`: send one request to a served model and summarise the outputs."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.client import TritonClient, request_arrays, server_errors, server_url
from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_data_options,
    add_server_options,
    parse_files,
    parse_shapes,
)

FIRST_VALUES = 6

HELP = "send one request (random data or .npy files) and summarise the outputs"

DESCRIPTION = """\
Send one inference request and print, per output, its data type, shape, min/max/mean and first
values. Inputs are random data of the model's data types (or .npy files with --input; for a BYTES
input such as an image input, any other file is sent as one element: a JPEG file is one row). Shapes
come from the model metadata: a batched model gets 1 row, and dynamic axes need --shape.

examples:
  ge-python-model infer --model resnet --shape images:1,3,224,224
  ge-python-model infer --url 127.0.0.1:8001 --protocol grpc --model resnet \\
      --input images=cat.npy
  ge-python-model infer --model classifier --input image=cat.jpg
"""


def register(subparsers: Any) -> None:
    """Add the `infer` subcommand."""
    parser = add_command(subparsers, "infer", run, HELP, DESCRIPTION)
    add_server_options(parser)
    add_data_options(parser, "the model metadata's, batch 1")


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


def infer_once(
    url: str,
    protocol: str,
    model: str,
    shapes: Mapping[str, tuple[int, ...]],
    files: Mapping[str, Path],
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], dict[str, tuple[np.ndarray, str]], float]:
    """Send one request: (inputs sent, {output: (array, data type)}, seconds)."""
    with server_errors(url, protocol), TritonClient(url, protocol) as client:
        metadata = client.model_metadata(model)
        batched = client.model_config(model).max_batch_size > 0
        arrays = request_arrays(metadata, batched, shapes, files, seed)
        output_meta = metadata.get("outputs", [])
        request = client.prepare(arrays, [item["name"] for item in output_meta])
        start = time.perf_counter()
        result = client.send(model, request)
        seconds = time.perf_counter() - start
    outputs = {
        item["name"]: (result.as_numpy(item["name"]), item["datatype"]) for item in output_meta
    }
    return {name: array for name, (array, _) in arrays.items()}, outputs, seconds


def run(args: argparse.Namespace) -> int:
    """Send the request and print the summaries."""
    url = server_url(args.url, args.protocol)
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
