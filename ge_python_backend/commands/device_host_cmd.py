"""`ge-python-model device-host`: the process that owns one NPU for every model placed on it."""

from __future__ import annotations

from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.devicehost.host import add_arguments, main

HELP = "own one NPU for every model with device_host on (Triton's stubs become proxies)"
DESCRIPTION = """\
Run the device host of NPU --device: one process that opens the device once and serves every
model instance placed on it whose config.pbtxt sets the parameter device_host to on. Triton's
stub of such an instance imports no acl and opens no device; it hands its requests to this
process through shared memory and a Unix socket (device-host-N.sock, mode 0600, in
$GE_PYTHON_BACKEND_RUN_DIR, default /dev/shm/ge-python-backend-<uid>, mode 0700). The first stub
that needs a host starts one itself (with --idle-exit); run it yourself to keep it up. Only
processes of this user may connect. Logs to stderr. Runs until SIGINT or SIGTERM.

examples:
  ge-python-model device-host --device 0
  ge-python-model device-host --device 1 --idle-exit 30
"""


def register(subparsers: Any) -> None:
    """Add the `device-host` subcommand."""
    parser = add_command(subparsers, "device-host", main, HELP, DESCRIPTION)
    add_arguments(parser)
