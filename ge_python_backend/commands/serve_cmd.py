"""`ge-python-model serve`: run Triton on a model repository until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_repository_argument,
    add_tritonserver_options,
)
from ge_python_backend.server import (
    MODEL_CONTROL_MODES,
    ServerError,
    TritonServer,
    describe_python,
    find_server,
)

EXIT_TIMEOUT_S = 30

HELP = "run Triton Inference Server on a model repository"

DESCRIPTION = """\
Start Triton Inference Server on a model repository: the server bundled in nvidia-pytriton, or your
own with --tritonserver (and --backend-directory holding python/ with the Python backend and its
stub). The stub runs model.py on this Python interpreter, so it imports the installed
ge_python_backend, or on --stub-python's (the bundled server then uses the stub built for that
version; the package must be installed there: docs/DEPLOYING.md). It listens on 127.0.0.1
unless --host is given; a port already in use is refused before the server starts (naming the
process listening there), and "ready" is printed only once this server's own process answers. A
model that fails to load stays UNAVAILABLE (shown with its reason) while the others serve; when
none of the models to serve (every one, or the --load-model ones) is available, the command
lists them and exits 1. Ctrl-C or SIGTERM drains the server: Triton answers the requests in
flight (for up to --exit-timeout-secs), unloads the models and exits; the command exits 0 only
when that went cleanly, non-zero if the server dies or could not finish its requests in time.

examples:
  ge-python-model serve models
  ge-python-model serve models --emulator --http-port 0 --grpc-port 0 --metrics-port 0
  ge-python-model serve models --model-control-mode explicit --load-model resnet
  ge-python-model serve models --stub-python /usr/local/python3.9/bin/python3
  ge-python-model serve models --tritonserver /opt/tritonserver/bin/tritonserver \\
      --backend-directory /opt/tritonserver/backends
"""


def register(subparsers: Any) -> None:
    """Add the `serve` subcommand."""
    parser = add_command(subparsers, "serve", run, HELP, DESCRIPTION)
    add_repository_argument(parser)
    for protocol, port in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
        parser.add_argument(
            f"--{protocol}-port",
            type=int,
            default=port,
            metavar="PORT",
            help=f"{protocol} port (default: {port}; 0 picks a free port)",
        )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    parser.add_argument(
        "--model-control-mode",
        choices=MODEL_CONTROL_MODES,
        default="none",
        help="none: load every model; explicit: only --load-model ones (default: none)",
    )
    parser.add_argument(
        "--load-model",
        action="append",
        default=[],
        metavar="NAME",
        help="with --model-control-mode explicit, a model to load at start (repeatable)",
    )
    add_tritonserver_options(parser)
    parser.add_argument(
        "--emulator",
        action="store_true",
        help="run every model on the CPU emulator of pyACL (GE_PYTHON_BACKEND_ACL=emulator)",
    )
    parser.add_argument(
        "--log-file", type=Path, help="server log (default: a new file in the temp directory)"
    )
    parser.add_argument(
        "--exit-timeout-secs",
        type=int,
        default=EXIT_TIMEOUT_S,
        metavar="S",
        help="on Ctrl-C/SIGTERM, how long Triton waits for requests in flight "
        f"(default: {EXIT_TIMEOUT_S})",
    )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _model_lines(index: list[dict[str, Any]]) -> list[str]:
    """One line per model of the repository index: its state and the first line of its
    reason (why an UNAVAILABLE model failed to load)."""
    lines = []
    for entry in index:
        reason = entry.get("reason", "").strip().splitlines()
        detail = f": {reason[0]}" if reason else ""
        version = entry.get("version", "-")
        lines.append(
            f"  {entry['name']} (version {version}): {entry.get('state', 'UNKNOWN')}{detail}"
        )
    return lines


def _none_available(index: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    """Whether the server was to serve models at start (every model of the repository; in
    explicit mode the --load-model ones, if any) and serves none of them."""
    explicit = args.model_control_mode == "explicit"
    if explicit and not args.load_model:
        return False  # models are loaded later, through the model-control API
    wanted = [e for e in index if not explicit or e["name"] in args.load_model]
    return not any(entry.get("state") == "READY" for entry in wanted)


def _print_ready(server: TritonServer, index: list[dict[str, Any]]) -> None:
    urls = server.urls
    print(f"Triton is ready (pid {server.pid}); log: {server.log_path}")
    print(f"  HTTP     {urls.http}")
    print(f"  gRPC     {urls.grpc}")
    print(f"  metrics  {urls.metrics}")
    print("models:" if index else "models: none loaded")
    for line in _model_lines(index):
        print(line)
    print("Press Ctrl-C to stop.", flush=True)


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C/SIGTERM (exit 0) or until the server dies (exit 1)."""
    stub_python = describe_python(args.stub_python)
    binary = find_server(
        args.tritonserver, args.backend_directory, stub_version=stub_python.version
    )
    server = TritonServer(
        args.repository,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        host=args.host,
        model_control_mode=args.model_control_mode,
        load_models=args.load_model,
        env={"GE_PYTHON_BACKEND_ACL": "emulator"} if args.emulator else None,
        log_path=args.log_file,
        binary=binary,
        exit_timeout=args.exit_timeout_secs,
        stub_python=stub_python,
    )
    # SIGINT too: a process started in the background inherits SIGINT ignored, and Python then
    # installs no Ctrl-C handler of its own.
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = [signal.signal(signum, _raise_interrupt) for signum in stop_signals]
    try:
        server.start()
        server.wait_ready()
        index = server.repository_index()
        if _none_available(index, args):
            print(
                f"ge-python-model serve: no model is available (log {server.log_path}):\n"
                + "\n".join(_model_lines(index) or ["  (none loaded)"]),
                file=sys.stderr,
            )
            return 1
        _print_ready(server, index)
        while (code := server.poll()) is None:
            time.sleep(0.5)
        print(
            f"tritonserver exited with code {code}; log {server.log_path}:\n{server.log_tail()}",
            file=sys.stderr,
        )
        return 1
    except ServerError as exc:
        print(f"ge-python-model serve: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("stopping Triton (answering the requests in flight)...", file=sys.stderr)
        code = server.stop()
        if code != 0:
            print(
                f"Triton did not stop cleanly (exit code {code}): requests may have been left "
                f"unanswered; log {server.log_path}:\n{server.log_tail()}",
                file=sys.stderr,
            )
            return 1
        print("Triton stopped (exit code 0)", file=sys.stderr)
        return 0
    finally:
        server.stop()
        for signum, handler in zip(stop_signals, previous):
            signal.signal(signum, handler)
