"""The `ge-python-model` command line; each subcommand lives in `ge_python_backend.commands`."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from ge_python_backend import __version__
from ge_python_backend.errors import UserError, command_line_message

# Subcommand modules, each with `register(subparsers)` that adds its parser and sets `func`.
COMMAND_MODULES = (
    "ge_python_backend.commands.inspect_cmd",
    "ge_python_backend.commands.scaffold_cmd",
    "ge_python_backend.commands.template_cmd",
    "ge_python_backend.commands.validate_cmd",
    "ge_python_backend.commands.serve_cmd",
    "ge_python_backend.commands.infer_cmd",
    "ge_python_backend.commands.probe_cmd",
    "ge_python_backend.commands.watch_cmd",
    "ge_python_backend.commands.emulator_cmd",
    "ge_python_backend.commands.bench_cmd",
    "ge_python_backend.commands.tune_cmd",
    "ge_python_backend.commands.compare_cmd",
    "ge_python_backend.commands.migrate_cmd",
    "ge_python_backend.commands.k8s_cmd",
    "ge_python_backend.commands.doctor_cmd",
    "ge_python_backend.commands.selftest_cmd",
    "ge_python_backend.commands.device_host_cmd",
)

# The extra that installs each optional top-level module a command may need.
EXTRA_OF_MODULE = {
    "tritonclient": "cli",
    "google": "cli",
    "grpc": "cli",
    "gevent": "cli",
    "onnxruntime": "emulator",
    "onnx": "emulator",
    "pytriton": "server",
}

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


def missing_extra(exc: ModuleNotFoundError) -> UserError:
    """The error for a module an uninstalled extra provides; `exc` itself for any other."""
    module = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(module)
    if extra is None:
        raise exc
    return UserError(
        f"this command needs {module}, which ge-python-backend installs with its [{extra}] "
        f"extra: pip install 'ge-python-backend[{extra}]' (not into the Python of Triton's "
        "stub on an Ascend host: see docs/guides/deploy/index.md)"
    )


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand; one whose module needs an uninstalled extra is still listed and says
    which extra to install when run."""
    parser = argparse.ArgumentParser(
        prog="ge-python-model",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {__version__} (Python {sys.version.split()[0]})",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            error = missing_extra(exc)
            name = module_name.rsplit(".", 1)[-1].removesuffix("_cmd")
            unavailable = subparsers.add_parser(name, help=f"(unavailable: {error})")
            unavailable.add_argument("arguments", nargs=argparse.REMAINDER)
            unavailable.set_defaults(func=_raiser(error))
        else:
            module.register(subparsers)
    return parser


def _raiser(error: UserError) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        raise error

    return run


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        try:
            result = args.func(args)
        except ModuleNotFoundError as exc:  # a module imported when the command runs
            raise missing_extra(exc) from exc
    except UserError as exc:
        print(
            f"ge-python-model {args.command}: error: {command_line_message(exc)}",
            file=sys.stderr,
        )
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
