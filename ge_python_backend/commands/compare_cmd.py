"""`ge-python-model compare`: an `.om` (and a served model) against its golden ONNX."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from ge_python_backend.client import INT_HIGH
from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    RUNTIME_BY_CONTAINER,
    add_data_options,
    add_input_shape_order_option,
    add_max_output_bytes_option,
    add_runtime_option,
    add_server_options,
    add_tolerance_options,
    parse_files,
    parse_shapes,
    parse_thresholds,
)
from ge_python_backend.repository.parameters import (
    parse_input_shape_order,
    parse_max_output_bytes,
)
from ge_python_backend.tools.compare import CompareReport, OutputComparison, Thresholds, compare

DEFAULTS = Thresholds()

HELP = "compare an .om (and a served model) with its ONNX on the same inputs"

DESCRIPTION = f"""\
Send the same inputs to an .om (run here through pyACL or the CPU emulator, as --runtime or the
.om's container says), to the ONNX it was compiled from (onnxruntime on the CPU) and, with --url and
--model, to the model served by Triton, then report per output the max absolute error, the max
relative error (over elements whose ONNX value exceeds --atol in magnitude) and the cosine
similarity against the ONNX output.

Inputs are random (floats ~ N(0,1), integers in 0..{INT_HIGH - 1}, booleans) in the shapes of the
model's first gear, or --shape, or .npy files with --input. An output passes when every element
satisfies |x - onnx| <= atol + rtol * |onnx| and its cosine similarity is at least --min-cosine.
Exits 0 when every output passes, 1 when one does not.

examples:
  ge-python-model compare --om resnet.om --onnx resnet.onnx
  ge-python-model compare --om bert.om --onnx bert.onnx --shape input_ids:1,128 \\
      --shape attention_mask:1,128 --min-cosine 0.999
  ge-python-model compare --om resnet.om --onnx resnet.onnx --input images=cat.npy \\
      --url 127.0.0.1:8000 --model resnet

defaults: --atol {DEFAULTS.atol:g} --rtol {DEFAULTS.rtol:g} --min-cosine {DEFAULTS.min_cosine:g}
(an NPU computing in float16 against a float32 ONNX)
"""


def register(subparsers: Any) -> None:
    """Add the `compare` subcommand."""
    parser = add_command(subparsers, "compare", run, HELP, DESCRIPTION)
    parser.add_argument("--om", type=Path, required=True, help="the .om file")
    parser.add_argument("--onnx", type=Path, required=True, help="the ONNX it was compiled from")
    add_runtime_option(
        parser, f"run the .om with real pyACL or the CPU emulator ({RUNTIME_BY_CONTAINER})"
    )
    add_input_shape_order_option(parser)
    add_max_output_bytes_option(parser)
    parser.add_argument("--device-id", type=int, default=0, help="NPU id (default: 0)")
    add_data_options(parser, "the first gear's")
    add_tolerance_options(parser)
    add_server_options(parser, url_help="also query the model --model served there", required=False)
    parser.add_argument(
        "--aipp-config",
        type=Path,
        help="an .om with AIPP inputs: the aipp.cfg it was compiled with (or, for dynamic AIPP, "
        "serves it with); the .om gets raw UINT8 images, the ONNX the AIPP steps' output",
    )


def _number(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.4g}"


def _row(item: OutputComparison) -> str:
    verdict = "ok" if item.passed else "FAIL"
    if item.problem and math.isnan(item.max_abs):  # no statistic to show
        return f"  {item.target:<7} {item.name:<20} {verdict}: {item.problem}"
    cosine = "-" if math.isnan(item.cosine) else f"{item.cosine:.6f}"
    text = (
        f"  {item.target:<7} {item.name:<20} {str(list(item.shape)):<16} "
        f"{_number(item.max_abs):>10} {_number(item.max_rel):>10} {cosine:>9}  {verdict}"
    )
    if item.problem:
        text += f": {item.problem}"
    if item.mismatched:
        text += f" ({item.mismatched} elements outside atol + rtol*|onnx|)"
    if item.top_k is not None:
        agreement = item.top_k
        text += f"; top-1 agrees on {agreement.top1} of {agreement.rows} rows"
        if agreement.top5 is not None:
            text += f", top-5 on {agreement.top5}"
    return text


def print_report(report: CompareReport) -> None:
    """The inputs, one line per output comparison, and the verdict."""
    print("inputs:")
    for name, array in report.inputs.items():
        print(f"  {name}  {array.dtype}  {list(array.shape)}")
    print(
        f"  {'target':<7} {'output':<20} {'shape':<16} {'max_abs':>10} {'max_rel':>10} "
        f"{'cosine':>9}"
    )
    for item in report.comparisons:
        print(_row(item))
    limits = report.thresholds
    rule = f"atol {limits.atol:g}, rtol {limits.rtol:g}, cosine >= {limits.min_cosine:g}"
    if report.passed:
        print(f"PASS: every output is within {rule}")
    else:
        failed = sum(not item.passed for item in report.comparisons)
        print(f"FAIL: {failed} of {len(report.comparisons)} outputs are not within {rule}")


def run(args: argparse.Namespace) -> int:
    """Compare, print the report; 0 when every output passes, else 1."""
    report = compare(
        args.om,
        args.onnx,
        runtime=args.runtime,
        device_id=args.device_id,
        shapes=parse_shapes(args.shape),
        files=parse_files(args.input),
        seed=args.seed,
        thresholds=parse_thresholds(args),
        url=args.url,
        model=args.model,
        protocol=args.protocol,
        input_shape_order=parse_input_shape_order(args.input_shape_order),
        aipp_config=args.aipp_config,
        max_output_bytes=parse_max_output_bytes(args.max_output_bytes),
    )
    print_report(report)
    return 0 if report.passed else 1
