"""`ge-python-model serve`: run Triton on a model repository until Ctrl-C."""

from __future__ import annotations

import argparse
import collections
import logging
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from ge_python_backend import repository_key
from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_repository_argument,
    add_tritonserver_options,
    add_watch_options,
    port_number,
    watch_metrics_port,
)
from ge_python_backend.commands.watch_cmd import watcher_from
from ge_python_backend.devicehost.client import start_host
from ge_python_backend.devicehost.host import add_work_space_arguments, work_space_settings
from ge_python_backend.devicehost.protocol import DeviceHostError, host_paths
from ge_python_backend.environment import ACL_RUNTIME
from ge_python_backend.errors import UserError
from ge_python_backend.repository.budget import footprints
from ge_python_backend.repository.shm import repository_entries
from ge_python_backend.server import (
    MODEL_CONTROL_MODES,
    ServerError,
    TritonServer,
    check_port_free,
    describe_python,
    exit_description,
    find_server,
    remove_dead_servers_regions,
)
from ge_python_backend.tools.watch import Watcher, WatchMetrics, serve_metrics

logger = logging.getLogger(__name__)

EXIT_TIMEOUT_S = 30
MAX_RESTARTS = 3
RESTART_WINDOW_S = 600.0
HUNG_TIMEOUT_S = 30.0
LIVENESS_INTERVAL_S = 2.0  # how often serve asks /v2/health/live
WATCH_PREFIX = "watch-"

HELP = "run Triton Inference Server on a model repository"

DESCRIPTION = """\
Start Triton Inference Server on a model repository: the server bundled in nvidia-pytriton, or your
own with --tritonserver (and --backend-directory holding python/ with the Python backend and its
stub). The stub runs model.py on this Python interpreter, so it imports the installed
ge_python_backend, or on --stub-python's (the bundled server then uses the stub built for that
version; the package must be installed there: docs/guides/deploy/index.md). It listens on 127.0.0.1
unless --host is given; a port already in use is refused before the server starts (naming the
process listening there), and "ready" is printed only once this server's own process answers. A
model that fails to load stays UNAVAILABLE (shown with its reason) while the others serve; when
none of the models to serve (every one, or the --load-model ones) is available, the command
lists them and exits 1. Ctrl-C or SIGTERM drains the server: Triton answers the requests in
flight (for up to --exit-timeout-secs), unloads the models and exits; the command exits 0 only
when that went cleanly, non-zero if the server dies or could not finish its requests in time.

Unless --no-watch is given, the watcher of `ge-python-model watch` runs beside the server: it
probes every READY model each --watch-interval seconds and reloads one whose stub process died
or whose inference hangs. So that it can reload, the server runs in explicit model-control mode
with every model loaded (--model-control-mode none turns reloads off). The watcher's Prometheus
counters are on --watch-metrics-port (at --host; by default the port above Triton's highest, a
free one when Triton's are all 0). When tritonserver dies by a signal (a crash, SIGKILL), serve
removes what the dead server left in /dev/shm and starts it again on the same ports, at most
--max-restarts times in --restart-window seconds; an exit without a signal ends serve. A
tritonserver that is alive but answers no health check for --hung-timeout seconds (a corrupted
heap leaves it so) is killed and restarted the same way; Ctrl-C kills a server that does not
answer at once, instead of waiting for it to drain.

Triton's model-repository API (index, load with file overrides, unload) takes only a key made
fresh at each server start (header ge-repository-key, gRPC metadata
triton-grpc-protocol-ge-repository-key): the watcher, `watch` and `tune` of this user find it in
the run directory (a 0600 file per port; GE_PYTHON_BACKEND_REPOSITORY_KEY overrides it), other
users get 403 (gRPC: UNAVAILABLE). Triton takes the key on its command line only; serve
overwrites it there once Triton has read it, or says why it could not
(docs/guides/reliability/other-users.md).

The server log goes to a new directory in the temp directory, removed when the server stops
cleanly (a --log-file stays). Who owns each server's shared-memory regions is recorded in
/dev/shm/ge-python-backend-<uid>/servers; at start, serve removes the regions of servers that died
with their serve (kill -9 of both), never those of a server whose serve or tritonserver runs.

examples:
  ge-python-model serve models
  ge-python-model serve models --emulator --http-port 0 --grpc-port 0 --metrics-port 0
  ge-python-model serve models --model-control-mode explicit --load-model resnet
  ge-python-model serve models --no-watch --model-control-mode none
  ge-python-model serve models --stub-python /usr/local/python3.9/bin/python3
  ge-python-model serve models --tritonserver /opt/tritonserver/bin/tritonserver \\
      --backend-directory /opt/tritonserver/backends
"""


HOST_PREFIX = "device-host-"  # of the device hosts' options (`--device-host-streams`, ...)


def register(subparsers: Any) -> None:
    """Add the `serve` subcommand."""
    parser = add_command(subparsers, "serve", run, HELP, DESCRIPTION)
    add_repository_argument(parser)
    for protocol, port in (("http", 8000), ("grpc", 8001), ("metrics", 8002)):
        parser.add_argument(
            f"--{protocol}-port",
            type=port_number,
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
        help="none: load every model; explicit: only --load-model ones (default: explicit "
        "with every model loaded while the watcher runs, else none)",
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
    add_work_space_arguments(parser, HOST_PREFIX)
    parser.add_argument(
        "--log-file",
        type=Path,
        help="server log, kept (default: a new directory in the temp directory, removed when "
        "the server stops cleanly)",
    )
    parser.add_argument(
        "--exit-timeout-secs",
        type=int,
        default=EXIT_TIMEOUT_S,
        metavar="S",
        help="on Ctrl-C/SIGTERM, how long Triton waits for requests in flight "
        f"(default: {EXIT_TIMEOUT_S})",
    )
    parser.add_argument(
        "--no-watch",
        dest="watch",
        action="store_false",
        help="do not run the watcher (nothing then reloads a model whose stub died)",
    )
    add_watch_options(parser, WATCH_PREFIX, beside_server=True)
    parser.add_argument(
        "--max-restarts",
        type=int,
        default=MAX_RESTARTS,
        metavar="N",
        help=f"restarts of a tritonserver killed by a signal within --restart-window "
        f"(default: {MAX_RESTARTS}; 0: never restart)",
    )
    parser.add_argument(
        "--restart-window",
        type=float,
        default=RESTART_WINDOW_S,
        metavar="S",
        help=f"seconds over which --max-restarts counts (default: {RESTART_WINDOW_S:g})",
    )
    parser.add_argument(
        "--hung-timeout",
        type=float,
        default=HUNG_TIMEOUT_S,
        metavar="S",
        help="kill and restart a tritonserver whose /v2/health/live answers nothing for this "
        f"long (default: {HUNG_TIMEOUT_S:g})",
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


class RestartBudget:
    """At most `limit` restarts in any `window` seconds."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit = limit
        self.window = window
        self._times: collections.deque[float] = collections.deque()

    def take(self) -> bool:
        """Count one restart now; False when that would exceed the budget."""
        now = time.monotonic()
        while self._times and now - self._times[0] > self.window:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True

    def __len__(self) -> int:
        return len(self._times)


class Liveness:
    """Whether a running tritonserver still answers `/v2/health/live`, asked at most every
    `LIVENESS_INTERVAL_S`: `hung()` once it has answered nothing for `timeout` seconds."""

    def __init__(self, server: TritonServer, timeout: float) -> None:
        self.server = server
        self.timeout = timeout
        self.reset()

    def reset(self) -> None:
        """Count from now (a server just started)."""
        self._answered = self._asked = time.monotonic()

    def hung(self) -> bool:
        now = time.monotonic()
        if now - self._asked < LIVENESS_INTERVAL_S:
            return False
        self._asked = now
        if self.server.is_live():
            self._answered = now
            return False
        return now - self._answered >= self.timeout


def _model_control(args: argparse.Namespace) -> tuple[str, list[str]]:
    """The model-control mode and the models to load: explicit with every model (`*`) when
    the watcher runs and no mode was given, so that it can reload them."""
    if args.model_control_mode is not None:
        return args.model_control_mode, args.load_model
    if args.watch:
        return "explicit", args.load_model or ["*"]
    return "none", args.load_model


def _start_watcher(
    args: argparse.Namespace, server: TritonServer, endpoint: Any, metrics: WatchMetrics
) -> Watcher:
    """The watcher of `server` (counting into `metrics`, served by `endpoint`), running in a
    daemon thread."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    watcher = watcher_from(args, server.urls.http, prefix=WATCH_PREFIX, metrics=metrics)
    host, port = endpoint.server_address[:2]
    print(f"  watcher  every {watcher.interval:g} s; metrics http://{host}:{port}/metrics")
    threading.Thread(target=watcher.run, name="ge-watch", daemon=True).start()
    return watcher


def _stop_watcher(watcher: Watcher | None, endpoint: Any) -> None:
    if watcher is not None:
        watcher.stop.set()
    if endpoint is not None:
        endpoint.shutdown()
        endpoint.server_close()


def _print_removed(regions: list[Path], whose: str) -> None:
    if regions:
        print(
            f"removed {len(regions)} shared-memory regions of {whose}: "
            + ", ".join(path.name for path in regions),
            file=sys.stderr,
        )


def _left_unanswered(server: TritonServer) -> str:
    """What a server that did not stop cleanly left unanswered, as far as its last look while
    stopping saw (`TritonServer.in_flight_at_stop`: the requests queued; Triton counts none of
    those executing)."""
    executing = "any still executing (Triton counts none of them)"
    if server.in_flight_at_stop == 0:
        return f"no request was queued at the end; {executing} may be left unanswered"
    if server.in_flight_at_stop is None:
        return "requests may have been left unanswered"
    queued = server.in_flight_at_stop
    return f"{queued} requests queued at the end may be left unanswered, and {executing}"


def _print_ready(server: TritonServer, index: list[dict[str, Any]]) -> None:
    urls = server.urls
    print(f"Triton is ready (pid {server.pid}); log: {server.log_path}")
    print(f"  HTTP     {urls.http}")
    print(f"  gRPC     {urls.grpc}")
    print(f"  metrics  {urls.metrics}")
    if server.repository_key is not None:
        key_file = repository_key.key_path(int(urls.http.rsplit(":", 1)[1]))
        print(
            f"  model-repository API (index, load, unload) restricted to header "
            f"{repository_key.HEADER}; its key: {key_file} (this user's only)"
        )
    if server.shm_sizes is not None:
        print(f"  {server.shm_sizes.summary()}")
    print("models:" if index else "models: none loaded")
    for line in _model_lines(index):
        print(line)


class DeviceHosts:
    """The device hosts `serve` keeps up: one for each device its `device_host` models use,
    started before Triton (so the first load does not wait for one) and started again when one
    dies. A connection of `serve`'s own keeps each alive while `serve` runs; the stubs would
    start a missing one too, at their next request."""

    def __init__(self, repository: Path, env: dict[str, str]) -> None:
        models = footprints(repository_entries(repository))
        self.devices = sorted({d for m in models if m.device_host for d in m.processes})
        self.env = env
        self.links: dict[int, socket.socket] = {}

    def start(self) -> None:
        """Start (or join) the host of every device; UserError when the run directory cannot
        take its files (full, or not private)."""
        for device in self.devices:
            try:
                self.links[device] = start_host(device, host_paths(device), self.env)
            except (OSError, DeviceHostError) as exc:
                raise UserError(f"cannot start the device host of device {device}: {exc}") from None
            print(f"device host of device {device}: {host_paths(device).log}", flush=True)

    def keep_up(self) -> None:
        """Start again each host whose connection ended (the host died)."""
        for device, link in list(self.links.items()):
            try:
                ended = link.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                ended = False
            except OSError:
                ended = True
            if ended:
                link.close()
                print(
                    f"the device host of device {device} died; starting it again (log "
                    f"{host_paths(device).log})",
                    file=sys.stderr,
                    flush=True,
                )
                self.links[device] = start_host(device, host_paths(device), self.env)

    def close(self) -> None:
        """Let the hosts go (each stops once its last stub has left)."""
        for link in self.links.values():
            link.close()
        self.links.clear()


def run(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C/SIGTERM (exit 0) or until the server dies for good (exit 1)."""
    mode, load_models = _model_control(args)
    stub_python = describe_python(args.stub_python)
    binary = find_server(
        args.tritonserver, args.backend_directory, stub_version=stub_python.version
    )
    env = {ACL_RUNTIME.name: "emulator"} if args.emulator else {}
    try:  # the device hosts' settings, for the hosts serve or a stub starts
        env.update(work_space_settings(args, HOST_PREFIX).environment())
    except ValueError as exc:
        raise UserError(str(exc)) from None
    server = TritonServer(
        args.repository,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        host=args.host,
        model_control_mode=mode,
        load_models=load_models,
        env=env or None,
        log_path=args.log_file,
        binary=binary,
        exit_timeout=args.exit_timeout_secs,
        stub_python=stub_python,
    )
    budget = RestartBudget(args.max_restarts, args.restart_window)
    for record, regions in remove_dead_servers_regions():
        owners = ", ".join(f"pid {pid}" for pid, _ in record.owners) or "unknown pids"
        _print_removed(
            regions, f"a server that died with its launcher ({owners}; log {record.log_path})"
        )
    metrics = WatchMetrics()
    endpoint = None
    if args.watch:
        # Bound before Triton starts, so that a port in use fails before anything runs.
        server.check_ports()
        ports = (args.http_port, args.grpc_port, args.metrics_port)
        port = watch_metrics_port(args, WATCH_PREFIX, ports)
        if port:
            check_port_free(args.host, port, "watcher's metrics")
        endpoint = serve_metrics(metrics, port, host=args.host)
    # SIGINT too: a process started in the background inherits SIGINT ignored, and Python then
    # installs no Ctrl-C handler of its own.
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    previous = [signal.signal(signum, _raise_interrupt) for signum in stop_signals]
    watcher: Watcher | None = None
    liveness: Liveness | None = None  # once the server is ready
    hosts = DeviceHosts(args.repository, env)
    try:
        hosts.start()
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
        if endpoint is not None:
            watcher = _start_watcher(args, server, endpoint, metrics)
        print("Press Ctrl-C to stop.", flush=True)
        liveness = Liveness(server, args.hung_timeout)
        while True:
            while (code := server.poll()) is None:
                time.sleep(0.5)
                hosts.keep_up()
                if liveness.hung():
                    print(
                        f"tritonserver (pid {server.pid}) is alive but answered no health check "
                        f"for {args.hung_timeout:g} s; killing it",
                        file=sys.stderr,
                        flush=True,
                    )
                    server.kill()
            ended = f"tritonserver {exit_description(code)}"
            if code >= 0 or not budget.take():
                if code >= 0:
                    limit = ""
                elif args.max_restarts == 0:
                    limit = " (not restarted: --max-restarts 0)"
                else:
                    limit = (
                        f" (not restarted: its {args.max_restarts} restarts in "
                        f"{args.restart_window:g} s are used up)"
                    )
                print(
                    f"{ended}{limit}; log {server.log_path}:\n{server.log_tail()}",
                    file=sys.stderr,
                )
                return 1
            print(
                f"{ended}; restarting it (restart {len(budget)} of at most "
                f"{args.max_restarts} in {args.restart_window:g} s); log {server.log_path}:\n"
                f"{server.log_tail(10)}",
                file=sys.stderr,
                flush=True,
            )
            _print_removed(server.restart(), "the dead server")
            server.wait_ready()
            liveness.reset()
            _print_ready(server, server.repository_index())
            print("Triton restarted.", flush=True)
    except ServerError as exc:
        print(f"ge-python-model serve: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _stop_watcher(watcher, endpoint)  # no reloads while the server drains
        if liveness is not None and server.poll() is None and not server.is_live():
            print("Triton answers no health check: killing it", file=sys.stderr, flush=True)
            server.kill()
            return 1
        print("stopping Triton (answering the requests in flight)...", file=sys.stderr)
        code = server.stop()
        if code != 0:
            print(
                f"Triton did not stop cleanly (exit code {code}): {_left_unanswered(server)}; "
                f"log {server.log_path}:\n{server.log_tail()}",
                file=sys.stderr,
            )
            return 1
        print("Triton stopped (exit code 0)", file=sys.stderr)
        server.remove_log()
        return 0
    finally:
        _stop_watcher(watcher, endpoint)
        server.stop()
        hosts.close()
        for signum, handler in zip(stop_signals, previous):
            signal.signal(signum, handler)
