"""`ge-python-model validate`: check a model repository before serving it."""

from __future__ import annotations

import argparse
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_repository_argument,
    add_runtime_option,
)
from ge_python_backend.repository.validation import validate_repository

HELP = "check a model repository (config, files, checksum, inputs/outputs vs the .om)"

DESCRIPTION = """\
Check every model of a repository (or only --name): config.pbtxt (optional) parses and names its
directory, the parameters are usable, each version directory has model.py and exactly one .om (or
om_file's) with the SHA-256 of its <file>.om.sha256 (else om_sha256), and each version's config,
completed as Triton's auto-complete will (reported as a note), fits the .om (opened with the
config's acl_runtime, or --runtime). Exits 1 when a model has problems; notes (e.g. the .om cannot
be opened on this machine, so its inputs/outputs were not checked) do not fail.

examples:
  ge-python-model validate models
  ge-python-model validate models --name resnet --runtime emulator
"""


def register(subparsers: Any) -> None:
    """Add the `validate` subcommand."""
    parser = add_command(subparsers, "validate", run, HELP, DESCRIPTION)
    add_repository_argument(parser)
    parser.add_argument("--name", help="check only this model")
    add_runtime_option(
        parser, "open the .om files with this runtime instead of each config's acl_runtime"
    )


def run(args: argparse.Namespace) -> int:
    """Print one verdict per model; 1 if any has problems."""
    reports = validate_repository(args.repository, name=args.name, runtime=args.runtime)
    for report in reports:
        versions = ", ".join(report.versions) or "none"
        verdict = "OK" if report.ok else "INVALID"
        print(f"{report.name}: {verdict} (versions: {versions})")
        for problem in report.problems:
            print(f"  problem: {problem}")
        for note in report.notes:
            print(f"  note: {note}")
    return 0 if all(report.ok for report in reports) else 1
