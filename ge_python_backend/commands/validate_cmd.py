"""`ge-python-model validate`: check a model repository before serving it, and with `--serve`
serve it once with a throwaway tritonserver that every model must answer.

The serve check is an option of `validate` rather than a mode of `probe`: it checks a repository
on disk (the positional REPO every repository command takes), where `probe` checks one model of a
server already running (`--url`, `--model`); it runs after the static checks, whose verdicts say
why a model that does not load fails.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_device_budget_options,
    add_quiet_option,
    add_repository_argument,
    add_runtime_option,
    add_tritonserver_options,
    budget_check,
    device_limits,
    host_what_does_not_fit_in_stubs,
    progress_of,
)
from ge_python_backend.errors import GeBackendError, UserError
from ge_python_backend.repository.report import ModelReport
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.tools.probe import DEFAULT_LOAD_TIMEOUT_S, probe_repository

HELP = "check a model repository (config, files, checksum, inputs/outputs vs the .om, ensembles)"

DESCRIPTION = """\
Check every model of a repository (or only --name): config.pbtxt (optional) parses and names its
directory, the parameters are usable, each version directory has model.py and exactly one .om (or
om_file's) with the SHA-256 of its <file>.om.sha256 (else om_sha256), and each version's config,
completed as Triton's auto-complete will (reported as a note), fits the .om (opened with --runtime,
else the config's acl_runtime, else the runtime the .om's container is made for: the emulator for an
emulator .om, pyACL for any other). Other Python models (no .om, not our model.py) get Triton's
checks of their config and files; ensembles get theirs: every step's model exists, its tensors are
the model's, and data types and shapes connect from the ensemble's inputs to its outputs. Exits 1
when a model has problems; notes (e.g. the .om cannot be opened on this machine, so its
inputs/outputs were not checked) do not fail.

Then the device budget of the whole repository: per device, the processes its instances open
(each Triton instance is a stub process; device_ids places them) against pyACL's limit
(--processes-per-device: 64, 32 in a VM), and the device memory they hold (per process the
opening of the device and the model's weights, once per device for the instances of a model
under the device host, and per pipeline lane a work space and its buffers) against the
memory of a --soc-version device. A device that cannot hold its share fails the check.

--serve then starts a throwaway tritonserver on the repository (free ports, every model loaded),
sends every model that loads one probe inference of zeros (ensembles included), reports each
model's answer or Triton's reason for not loading it, stops the server, and exits 1 unless every
model answered.

examples:
  ge-python-model validate models
  ge-python-model validate models --name resnet --runtime emulator
  ge-python-model validate models --serve --runtime emulator
  ge-python-model validate models --soc-version Ascend910B3 --processes-per-device 32
"""


def register(subparsers: Any) -> None:
    """Add the `validate` subcommand."""
    parser = add_command(subparsers, "validate", run, HELP, DESCRIPTION)
    add_repository_argument(parser)
    parser.add_argument("--name", help="check only this model")
    add_runtime_option(
        parser,
        "open the .om files with this runtime instead of each config's acl_runtime or the "
        ".om's container (with --serve: the server's models too)",
    )
    add_device_budget_options(parser, "the SoC of the devices the budget is for")
    parser.add_argument(
        "--fix",
        action="store_true",
        help="serve the models of a device that does not fit in their own stubs (processes or "
        "memory) from the device host: write parameter device_host on into their config.pbtxt "
        "(models whose config sets device_host are left as they are)",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="then serve the whole repository once with a throwaway tritonserver: every model "
        "must load and answer a probe",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_LOAD_TIMEOUT_S,
        metavar="S",
        help=f"with --serve: seconds the server may take to start and load every model "
        f"(default: {DEFAULT_LOAD_TIMEOUT_S:g})",
    )
    add_tritonserver_options(parser)
    add_quiet_option(parser)


def _print_report(report: ModelReport) -> None:
    versions = ", ".join(report.versions) or "none"
    verdict = "OK" if report.ok else "INVALID"
    kind = f"; {report.description}" if report.description else ""
    print(f"{report.name}: {verdict} (versions: {versions}{kind})")
    for problem in report.problems:
        print(f"  problem: {problem}")
    for note in report.notes:
        print(f"  note: {note}")


def _serve_check(args: argparse.Namespace) -> bool:
    """Serve the repository once; print one line per model; whether every model answered."""
    log_path = Path(tempfile.mkdtemp(prefix="ge-validate-")) / "tritonserver.log"
    print(f"serving {args.repository} with a throwaway tritonserver (log: {log_path})")
    try:
        results = probe_repository(
            args.repository,
            runtime=args.runtime,
            timeout=args.timeout,
            tritonserver=args.tritonserver,
            backend_directory=args.backend_directory,
            stub_python=args.stub_python,
            log_path=log_path,
            progress=progress_of(args),
        )
    except UserError:
        raise
    except GeBackendError as exc:  # the server failed to start or exited early
        print(f"  the server did not serve the repository: {exc}")
        return False
    if not results:
        print("  Triton lists no model")
    for result in results:
        verdict = "answered" if result.ok else "FAILED"
        print(f"  {result.name} ({', '.join(result.states)}): {verdict}: {result.message}")
    return bool(results) and all(result.ok for result in results)


def run(args: argparse.Namespace) -> int:
    """Print one verdict per model (then, with --serve, one answer per model); 1 if any has
    problems or did not answer."""
    limits = device_limits(args)
    reports = validate_repository(args.repository, name=args.name, runtime=args.runtime)
    for report in reports:
        _print_report(report)
    valid = all(report.ok for report in reports)
    if args.name is None:
        if args.fix:
            host_what_does_not_fit_in_stubs(args.repository, args.runtime, limits)
        valid = budget_check(args.repository, args.runtime, limits) and valid
    served = _serve_check(args) if args.serve else True
    return 0 if valid and served else 1
