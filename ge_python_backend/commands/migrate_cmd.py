"""`ge-python-model migrate`: a Triton model repository converted for Ascend NPUs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ge_python_backend.ascend import ATC_DEFAULT_PRECISION_MODE, PrecisionMode
from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_device_budget_options,
    add_metric_option,
    add_quiet_option,
    add_runtime_option,
    add_tolerance_options,
    budget_check,
    device_limits,
    host_what_does_not_fit_in_stubs,
    parse_thresholds,
    progress_of,
)
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.parameters import parse_device_ids
from ge_python_backend.tools.migrate.atc import parse_gears
from ge_python_backend.tools.migrate.gate import parse_metrics
from ge_python_backend.tools.migrate.report import dry_run_script, summary_lines, write_report
from ge_python_backend.tools.migrate.runner import MigrateOptions, migrate

HELP = "migrate a Triton model repository (ONNX, Python, ensembles) to Ascend NPUs"

DESCRIPTION = """\
Read every model of SRC_REPO (never written) and write DST_REPO for Ascend:
  ONNX models          checked, compiled with ATC (--runtime pyacl, ATC on PATH) or the
                       emulator's compiler (--runtime emulator), every version to its own
                       .om + .sha256, served by the template model.py
  Python, ensembles    copied as they are (a Python model importing GPU-only libraries, or
                       asking for KIND_GPU, gets a warning)
  TensorRT, TorchScript, TensorFlow
                       not converted: the report names the ONNX to provide as
                       --onnx-from DIR/<model>/<version>/model.onnx, which is then converted
and DST_REPO/MIGRATION.md and migration.json: per model its status, source format and SHA-256,
the exact ATC command, SoC, precision mode, gears and .om SHA-256 (ATC's log tail on a failure).

The ATC command comes from the config and the graph: --input_shape with the graph's input names,
-1 on the batch axis (max_batch_size > 0) with --dynamic_batch_size = preferred_batch_size and
max_batch_size (without preferred sizes, the powers of two up to max_batch_size); ATC takes 2 to
100 gears, so a single size compiles a static .om. Any other -1 axis takes the config's dims, or
--gears [MODEL/]NAME:SIZE,SIZE,...: NAME is the axis' symbolic name in the ONNX graph (seq of
input_ids[batch, seq]; every input with that axis shares the size), INPUT.AXIS (input_ids.1) or
an input with one such axis (input_ids: its seq); MODEL limits it to one model. A NAME naming no
such axis is refused, with the axes that need sizes. Geared axes compile --dynamic_dims (with
--input_format=ND) over every combination of their sizes and the batch sizes; sizes given in
pairs, --gears [MODEL/]NAME,NAME:SIZExSIZE,... (det/H,W:96x320,160x640, as ATC's
--dynamic_image_size takes them), compile only those pairs. A batched model whose dims gears are
its batch sizes times other sizes keeps Triton's batching: rows are padded within the gears of
the same other sizes, as batch gears pad them.

The accuracy gate runs the .om and the ONNX on the model's warmups and --samples (random inputs
only when no sample is given; the report says so) and judges each output by what it holds: class
scores by top-1 agreement and cosine, probabilities and logits by cosine and relative error,
integers exactly, or as --metric says; NaN or inf fails by name. A precision mode that fails is
compiled again with the operators whose FP16 values overflow (else those a bisection over the
graph finds) kept in FP32 (--keep_dtype, written next to the .om); the ladder climbs only when
that fails too.

Pre-flight, per model (the others carry on): the ONNX opset within what ATC parses, one version
per domain, no custom-domain operators, no tensor of a type the .om cannot hold (ATC compiles no
strings: TYPE_STRING models stay Python models), every -1 axis set.

Exits 0 when every convertible model converted, 1 otherwise, 2 on a usage error.

examples:
  ge-python-model migrate gpu_models npu_models --runtime emulator
  ge-python-model migrate gpu_models npu_models --soc-version Ascend310P3 --device-ids 0,1 \\
      --gears seq:32,64,128 --onnx-from exported --jobs 4
  ge-python-model migrate gpu_models npu_models --dry-run > atc_commands.sh
"""


def register(subparsers: Any) -> None:
    """Add the `migrate` subcommand."""
    parser = add_command(subparsers, "migrate", run, HELP, DESCRIPTION)
    parser.add_argument("source", type=Path, metavar="SRC_REPO", help="the Triton repository")
    parser.add_argument("destination", type=Path, metavar="DST_REPO", help="the Ascend one")
    add_quiet_option(parser)
    add_runtime_option(
        parser, "compile with ATC and serve with pyACL, or the CPU emulator's both", "pyacl"
    )
    add_device_budget_options(
        parser, "ATC's --soc_version, and the SoC the converted repository's device budget is for"
    )
    parser.add_argument(
        "--device-ids",
        default="0",
        metavar="IDS",
        help="comma-separated NPU ids the models' instances run on (default: 0)",
    )
    parser.add_argument(
        "--precision-mode",
        choices=[mode.value for mode in PrecisionMode],
        default=ATC_DEFAULT_PRECISION_MODE.value,
        help=f"ATC's --precision_mode (default: ATC's, {ATC_DEFAULT_PRECISION_MODE.value})",
    )
    parser.add_argument(
        "--gears",
        action="append",
        default=[],
        metavar="[MODEL/]NAME:SPEC",
        help="sizes of a -1 axis the config cannot gear, by its symbolic name, INPUT.AXIS or "
        "input name, e.g. seq:32,64,128 (repeatable)",
    )
    parser.add_argument(
        "--onnx-from",
        type=Path,
        metavar="DIR",
        help="ONNX exports of the models not in ONNX: DIR/<model>/<version>/model.onnx",
    )
    parser.add_argument(
        "--samples",
        type=Path,
        metavar="DIR",
        help="inputs for the accuracy gate: DIR/<model>/*.npz, one request per file, one array "
        "per input name (batch axis included)",
    )
    add_tolerance_options(parser)
    add_metric_option(parser)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and a bash script of the atc commands; compile and write nothing "
        "(needs no CANN)",
    )
    parser.add_argument(
        "--check-serving",
        action="store_true",
        help="then serve DST_REPO once with a throwaway tritonserver (as validate --serve): "
        "every model must load and answer a probe",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, metavar="N", help="models migrated at once (default: 1)"
    )


def run(args: argparse.Namespace) -> int:
    """Migrate (or print the plan); 0 when every convertible model converted, else 1."""
    limits = device_limits(args)
    options = MigrateOptions(
        source=args.source,
        destination=args.destination,
        runtime=args.runtime,
        soc_version=args.soc_version,
        device_ids=parse_device_ids(args.device_ids),
        precision_mode=PrecisionMode(args.precision_mode),
        onnx_from=args.onnx_from,
        gears=parse_gears(args.gears),
        samples=args.samples,
        thresholds=parse_thresholds(args),
        metrics=parse_metrics(args.metric),
        dry_run=args.dry_run,
        jobs=args.jobs,
        check_serving=args.check_serving,
        emulator_compiler=compile_onnx if args.runtime == "emulator" else None,
    )
    report = migrate(options, progress_of(args))
    if options.dry_run:
        print(dry_run_script(report), end="")
        return 0 if report.passed else 1
    for line in summary_lines(report):
        print(line)
    markdown, data = write_report(report)
    print(f"report: {markdown} and {data}")
    host_what_does_not_fit_in_stubs(args.destination, args.runtime, limits)
    fits = budget_check(args.destination, args.runtime, limits)
    return 0 if report.passed and fits else 1
