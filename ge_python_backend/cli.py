"""The `ge-python-model` command line; each subcommand lives in `ge_python_backend.commands`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ge_python_backend.errors import UserError

# Subcommand modules, each with `register(subparsers)` that adds its parser and sets `func`.
COMMAND_MODULES = (
    "ge_python_backend.commands.inspect_cmd",
    "ge_python_backend.commands.scaffold_cmd",
    "ge_python_backend.commands.template_cmd",
    "ge_python_backend.commands.validate_cmd",
    "ge_python_backend.commands.serve_cmd",
    "ge_python_backend.commands.infer_cmd",
    "ge_python_backend.commands.probe_cmd",
    "ge_python_backend.commands.emulator_cmd",
    "ge_python_backend.commands.bench_cmd",
    "ge_python_backend.commands.compare_cmd",
    "ge_python_backend.commands.k8s_cmd",
    "ge_python_backend.commands.doctor_cmd",
    "ge_python_backend.commands.selftest_cmd",
)

DESCRIPTION = """\
Serve Ascend NPU .om models behind NVIDIA Triton Inference Server through its Python backend.

examples:
  ge-python-model emulator compile --model resnet.onnx --framework 5 --output resnet \\
      --input_shape "input:-1,3,224,224" --dynamic_batch_size "1,2,4,8"
  ge-python-model inspect resnet.om
  ge-python-model scaffold resnet.om --repository models --runtime emulator
  ge-python-model serve models --emulator
  ge-python-model infer --url 127.0.0.1:8000 --model resnet --shape input:1,3,224,224
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ge-python-model",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        result = args.func(args)
    except UserError as exc:
        print(f"ge-python-model {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
