"""`ge-python-model doctor`: check this host before deploying."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_runtime_option,
    add_tritonserver_options,
)
from ge_python_backend.errors import UserError
from ge_python_backend.runtime import selected_runtime
from ge_python_backend.tools.doctor import FAIL, CheckResult, run_checks

HELP = "check this host (CANN, pyACL, NPUs, stub Python, /dev/shm, tritonserver)"

DESCRIPTION = """\
Check this host before serving .om models: Python and ge_python_backend, $GE_PYTHON_BACKEND_ACL,
the CANN environment (set_env.sh sourced), pyACL importable, NPU devices (device nodes and pyACL's
device count), the device nodes' owner, group and mode against this process's uid, groups and
capabilities, each device the repository uses (or every device) opening with acl.rt.set_device
(507033 when another process or container holds it), ASCEND_VISIBLE_DEVICES and
ASCEND_RT_VISIBLE_DEVICES against the configs' device_ids, the CPU emulator, the Python version of
Triton's Python backend stub against the stub's Python (this one, or --stub-python's) and pyACL's,
what the stub's Python holds (numpy, ge_python_backend, pyACL, CANN's protobuf 3.20.x), the size of
/dev/shm (against what --repository needs) and tritonserver (started on an empty repository to read
its version). Every failed check says what to do.

Exits 1 when a check required for the runtime fails: with pyacl (the default) the CANN, pyACL, NPU
and device-node checks are required; with --runtime emulator they are reported but not required,
and the emulator check is.

examples:
  ge-python-model doctor
  ge-python-model doctor --runtime emulator --repository models
  ge-python-model doctor --stub-python /usr/local/python3.9/bin/python3
  ge-python-model doctor --tritonserver /opt/tritonserver/bin/tritonserver \\
      --backend-directory /opt/tritonserver/backends
"""


def register(subparsers: Any) -> None:
    """Add the `doctor` subcommand."""
    parser = add_command(subparsers, "doctor", run, HELP, DESCRIPTION)
    add_runtime_option(
        parser, "the runtime the models will use (default: $GE_PYTHON_BACKEND_ACL, else pyacl)"
    )
    parser.add_argument(
        "--repository",
        type=Path,
        help="size the /dev/shm check and check the device ids for this model repository",
    )
    add_tritonserver_options(parser)
    parser.add_argument(
        "--no-server", action="store_true", help="do not start tritonserver to read its version"
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _label(result: CheckResult) -> str:
    if result.status == FAIL and not result.required:
        return "WARN"  # failed, but not needed by this runtime
    return result.status


def print_results(results: list[CheckResult], runtime: str) -> None:
    """One block per check, then the verdict."""
    for result in results:
        note = "" if result.required or result.status != FAIL else " (not required)"
        print(f"[{_label(result):<4}] {result.title}: {result.detail}{note}")
        if result.fix and result.status != "OK":
            print(f"       fix: {result.fix}")
    blocking = [result for result in results if result.blocking]
    no_npu = any(r.name == "npu" and r.status == FAIL for r in results)
    if blocking:
        names = ", ".join(result.title for result in blocking)
        print(
            f"NOT READY for the {runtime} runtime: {len(blocking)} required check(s) failed: "
            f"{names}"
        )
    else:
        print(f"ready for the {runtime} runtime")
    if no_npu:
        print(
            "no NPU is present on this host: real .om files cannot run here"
            + ("" if runtime == "emulator" else "; --runtime emulator checks the CPU emulator")
        )


def run(args: argparse.Namespace) -> int:
    """Run the checks and print them; 1 when a required one failed."""
    if args.repository is not None and not args.repository.is_dir():
        raise UserError(f"model repository {args.repository} is not a directory")
    results = run_checks(
        args.runtime,
        repository=args.repository,
        tritonserver=args.tritonserver,
        backend_directory=args.backend_directory,
        stub_python=args.stub_python,
        start_server=not args.no_server,
    )
    runtime = selected_runtime(args.runtime)
    if args.json:
        rows = [{**dataclasses.asdict(r), "blocking": r.blocking} for r in results]
        print(json.dumps({"runtime": runtime, "checks": rows}, indent=2))
    else:
        print_results(results, runtime)
    return 1 if any(result.blocking for result in results) else 0
