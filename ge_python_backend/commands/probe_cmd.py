"""`ge-python-model probe`: one real inference as a liveness check (exit 0 on a good answer)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import add_server_options
from ge_python_backend.tools.probe import DEFAULT_TIMEOUT_S, probe

HELP = "liveness check: one real inference; exit 0 only on a well-formed answer in time"

DESCRIPTION = """\
Check that a served model really answers: read its config from the server, send one request of
zeros shaped from it (batch 1, the first gear of HW/dims gear models, 1 for other dynamic axes)
and exit 0 only when every output arrives within --timeout with the configured data type and
shape. Otherwise print what failed to stderr and exit 1. Triton's own health endpoints stay
healthy while an NPU hangs; this is the check that notices (the Kubernetes livenessProbe that
`ge-python-model k8s` writes runs it).

examples:
  ge-python-model probe --url 127.0.0.1:8000 --model resnet
  ge-python-model probe --url 127.0.0.1:8001 --protocol grpc --model resnet --timeout 5
"""


def register(subparsers: Any) -> None:
    """Add the `probe` subcommand."""
    parser = add_command(subparsers, "probe", run, HELP, DESCRIPTION)
    add_server_options(parser)
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds for reading the config and the inference together "
        f"(default: {DEFAULT_TIMEOUT_S:g})",
    )


def run(args: argparse.Namespace) -> int:
    """Probe once: the result on stdout (0) or stderr (1)."""
    result = probe(args.url, args.model, protocol=args.protocol, timeout=args.timeout)
    if result.ok:
        print(f"ok: {result.message}")
        return 0
    print(f"ge-python-model probe: FAILED: {result.message}", file=sys.stderr)
    return 1
