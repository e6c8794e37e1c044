"""`ge-python-model selftest`: probe every assumption the runtime makes about pyACL."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import add_runtime_option
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.errors import UserError
from ge_python_backend.runtime import selected_runtime
from ge_python_backend.runtime.selftest import ProbeResult, SelftestReport, run_selftest

HELP = "probe pyACL on this host: every assumption of the runtime, pass/fail"

DESCRIPTION = """\
The first command to run on a new Ascend host, after `doctor`: each probe checks one assumption
the runtime makes about pyACL (init, device and context per thread, run mode, memory and copies of
every kind the runtime uses, events, stream timeouts, datasets, model descriptions, gear discovery
and set_* for batch, HW and dims gears (with an --input_shape order that differs from the graph's),
get_cur_output_dims, execute_async against NumPy, two lanes on two streams, the codes for a
non-gear value and a corrupt .om, teardown order) and says what it saw.

Its models are tiny ONNX graphs it builds itself. With `atc` on PATH it compiles them for the
host's SoC (acl.get_soc_name()); without it, it takes them prebuilt from --om-dir, writes their
ONNX files there and prints the atc commands that make them. The emulator compiles them itself.

Exits 0 only when every probe passes; --json writes the report for a bug report.

examples:
  ge-python-model selftest
  ge-python-model selftest --device 1 --json selftest.json
  ge-python-model selftest --om-dir selftest-models     # host without atc: models built elsewhere
  ge-python-model selftest --runtime emulator
"""


def register(subparsers: Any) -> None:
    """Add the `selftest` subcommand."""
    parser = add_command(subparsers, "selftest", run, HELP, DESCRIPTION)
    add_runtime_option(parser, "the ACL to probe (default: $GE_PYTHON_BACKEND_ACL, else pyacl)")
    parser.add_argument(
        "--device", type=_device_id, default=0, metavar="N", help="NPU to probe (default: 0)"
    )
    parser.add_argument(
        "--om-dir",
        type=Path,
        metavar="DIR",
        help="where the selftest models are: prebuilt ones are read from it when atc is not on "
        "PATH; otherwise they are compiled into it (default: a temporary directory)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report as JSON")


def _device_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a device id >= 0, got {text!r}")
    return value


def _print_result(result: ProbeResult) -> None:
    print(f"[{'PASS' if result.passed else 'FAIL'}] {result.name}: {result.detail}", flush=True)


def print_summary(report: SelftestReport) -> None:
    """What the run found, the atc commands when models were missing, and the verdict."""
    print(
        f"runtime {report.runtime}, device {report.device_id}, run mode {report.run_mode}, "
        f"SoC {report.soc}"
    )
    print(f"models: {report.models}")
    if report.missing_models and report.runtime == "pyacl":
        print("make the selftest models with ATC (the ONNX files are next to each --output):")
        for command in report.atc_commands:
            print(f"  {command}")
    failed = [p.name for p in report.probes if not p.passed]
    total = len(report.probes)
    if failed:
        print(f"FAILED: {len(failed)} of {total} probes: {', '.join(failed)}")
    else:
        print(f"all {total} probes passed")


def run(args: argparse.Namespace) -> int:
    """Run the probes, printing each as it finishes; 1 unless every probe passed."""
    if args.om_dir is not None and args.om_dir.exists() and not args.om_dir.is_dir():
        raise UserError(f"--om-dir {args.om_dir} is not a directory")
    runtime = selected_runtime(args.runtime)
    report = run_selftest(
        runtime,
        args.device,
        args.om_dir,
        on_result=_print_result,
        compile_onnx=compile_onnx if runtime == "emulator" else None,
    )
    print_summary(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    return 0 if report.passed else 1
