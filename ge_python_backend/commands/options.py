"""Command-line options that several subcommands declare: one definition each, with the parsing
of their values."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ge_python_backend.ascend import (
    DEFAULT_SOC,
    PROCESSES_PER_DEVICE,
    PROCESSES_PER_DEVICE_VM,
    SOC_DEVICES,
    soc_device,
)
from ge_python_backend.client import DEFAULT_URLS, PROTOCOLS
from ge_python_backend.commands import size_text
from ge_python_backend.errors import UserError
from ge_python_backend.progress import Progress
from ge_python_backend.repository.budget import (
    DeviceLimits,
    budget,
    footprints,
    host_what_does_not_fit,
)
from ge_python_backend.repository.shm import repository_entries
from ge_python_backend.runtime import RUNTIMES
from ge_python_backend.tools.bench import ARRIVALS, DEFAULT_ARRIVAL, DEFAULT_MAX_IN_FLIGHT
from ge_python_backend.tools.compare import Thresholds
from ge_python_backend.tools.watch import (
    DEFAULT_INTERVAL_S,
    DEFAULT_METRICS_PORT,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_S,
    metrics_port_beside,
)


def port_number(text: str) -> int:
    """An argparse `type` for a TCP port: 0 (a free one) to 65535."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: 0 (a free one) to 65535")
    return port


def add_quiet_option(parser: argparse.ArgumentParser) -> None:
    """`--quiet`: no progress lines (`progress_of`) from a long command."""
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print no progress lines (by default one line per step on stderr); results and "
        "errors are printed all the same",
    )


def progress_of(args: argparse.Namespace) -> Progress:
    """The progress lines of a command with `add_quiet_option` (on stderr)."""
    return Progress(sys.stderr, quiet=args.quiet)


def add_repository_argument(parser: argparse.ArgumentParser) -> None:
    """The positional `repository`: a Triton model repository."""
    parser.add_argument("repository", type=Path, help="the Triton model repository")


def add_tritonserver_options(parser: argparse.ArgumentParser) -> None:
    """`--tritonserver` and `--backend-directory`: the user's own Triton instead of the bundled
    one (`server.find_server`); `--stub-python`: the stub's interpreter (`server.StubPython`)."""
    parser.add_argument("--tritonserver", metavar="PATH", help="your own tritonserver binary")
    parser.add_argument(
        "--backend-directory",
        metavar="DIR",
        help="its backend directory (python/ holding the Python backend and its stub)",
    )
    parser.add_argument(
        "--stub-python",
        metavar="PYTHON",
        help="the Python the Python-backend stub runs model.py with, and whose packages it "
        "imports (e.g. CANN's Python on an Ascend host; default: this interpreter); the "
        "bundled server uses the stub built for its version",
    )


# What chooses the runtime of a command that opens an .om, when --runtime does not
# (`runtime.selected_runtime`).
RUNTIME_BY_CONTAINER = (
    "default: $GE_PYTHON_BACKEND_ACL, else the .om's container: the emulator for an emulator "
    ".om, pyacl for any other"
)


def add_runtime_option(
    parser: argparse.ArgumentParser, purpose: str, default: str | None = None
) -> None:
    """`--runtime pyacl|emulator`; without a `default`, `purpose` says what decides instead
    (`RUNTIME_BY_CONTAINER` for a command that opens an `.om`)."""
    shown = f" (default: {default})" if default else ""
    parser.add_argument("--runtime", choices=RUNTIMES, default=default, help=purpose + shown)


def add_device_budget_options(parser: argparse.ArgumentParser, soc_purpose: str) -> None:
    """`--soc-version` (ATC's `--soc_version`: `soc_purpose` says what it is used for here)
    and `--processes-per-device`: the device a repository is budgeted for (`device_limits`)."""
    parser.add_argument(
        "--soc-version",
        default=DEFAULT_SOC,
        metavar="SOC",
        help=f"{soc_purpose}; its device memory is known for {', '.join(SOC_DEVICES)} "
        f"(default: {DEFAULT_SOC})",
    )
    parser.add_argument(
        "--processes-per-device",
        type=int,
        default=PROCESSES_PER_DEVICE,
        metavar="N",
        help=f"processes pyACL serves per device; each instance is one (default: "
        f"{PROCESSES_PER_DEVICE}; {PROCESSES_PER_DEVICE_VM} in a VM)",
    )


def device_limits(args: argparse.Namespace) -> DeviceLimits:
    """The `DeviceLimits` of `add_device_budget_options`' values (UserError for bad ones)."""
    if args.processes_per_device < 1:
        raise UserError(f"--processes-per-device must be >= 1, got {args.processes_per_device}")
    try:
        memory = soc_device(args.soc_version).memory
    except ValueError as exc:
        raise UserError(f"--soc-version: {exc}") from None
    return DeviceLimits(args.processes_per_device, memory, soc=args.soc_version)


def budget_check(repository: Path, runtime: str | None, limits: DeviceLimits) -> bool:
    """Print `repository`'s device budget against `limits` (nothing when no model opens a
    device); whether every device can hold its share."""
    devices = budget(footprints(repository_entries(repository, runtime), runtime), limits)
    if not devices.rows:
        return True
    print(devices.table())
    for warning in devices.warnings():
        print(f"  note: {warning}")
    problems = devices.problems()
    for problem in problems:
        print(f"  problem: {problem}")
    return not problems


def host_what_does_not_fit_in_stubs(
    repository: Path, runtime: str | None, limits: DeviceLimits
) -> None:
    """Serve the models of each device that does not fit with them in their own stubs from the
    device host (`budget.host_what_does_not_fit`), and say which and why."""
    entries = repository_entries(repository, runtime)
    models = footprints(entries, runtime)
    before = budget(models, limits)
    names = host_what_does_not_fit(entries, models, limits)
    if not names:
        return
    over = "; ".join(
        f"device {row.device}: {row.processes} processes (of {limits.max_processes}), "
        f"{size_text(row.memory)} (of {size_text(limits.memory)})"
        for row in before.rows
        if before.over(row)
    )
    print(
        f"device host: in their own stubs the models do not fit ({over}); parameter device_host "
        f"on written for {len(names)} model(s): {', '.join(names)} (one process per device "
        "holds their instances and each model's weights once)"
    )


def add_input_shape_order_option(parser: argparse.ArgumentParser) -> None:
    """`--input-shape-order NAME,...`: the parameter `input_shape_order`, for a dims `.om` whose
    gears fit several orders of its inputs (the text is parsed by `parse_input_shape_order`)."""
    parser.add_argument(
        "--input-shape-order",
        metavar="NAME,...",
        help="dynamic-dims .om: its inputs in the order ATC's --input_shape named them (needed "
        "only when the gears do not show it; the error then says so)",
    )


def add_max_output_bytes_option(parser: argparse.ArgumentParser) -> None:
    """`--max-output-bytes BYTES`: the parameter `max_output_bytes`, for an `.om` with
    data-dependent output shapes whose size it leaves unbounded (parsed by
    `parse_max_output_bytes`)."""
    parser.add_argument(
        "--max-output-bytes",
        metavar="BYTES",
        help="an .om with data-dependent output shapes (NonZero, NMS in the graph) whose output "
        "size it leaves unbounded: a pooled buffer of this size for each such output, the most "
        "bytes one answer may take (faster; without it ACL allocates each such output at every "
        "execution)",
    )


def add_server_options(
    parser: argparse.ArgumentParser, *, url_help: str | None = None, required: bool = True
) -> None:
    """`--url`, `--protocol` and `--model`: a model served by Triton (`required=False`: both
    optional, e.g. an extra target)."""
    defaults = f"default: {DEFAULT_URLS['http']} for http, {DEFAULT_URLS['grpc']} for grpc"
    parser.add_argument("--url", metavar="HOST:PORT", help=url_help or f"the server ({defaults})")
    parser.add_argument(
        "--protocol", choices=PROTOCOLS, default="http", help="client protocol (default: http)"
    )
    parser.add_argument("--model", required=required, help="the served model's name")


def add_metrics_url_option(parser: argparse.ArgumentParser, purpose: str) -> None:
    """`--metrics-url URL`: Triton's metrics endpoint (read by `tools.bench.MetricsProbe`);
    `purpose` says what it is used for (and its default, if any)."""
    parser.add_argument(
        "--metrics-url",
        metavar="URL",
        help="Triton's metrics endpoint, e.g. http://127.0.0.1:8002/metrics (HOST:PORT is "
        f"enough): {purpose}",
    )


def add_load_options(parser: argparse.ArgumentParser, concurrency_default: str, what: str) -> None:
    """Closed loop (`--concurrency`) or open loop (`--request-rate`, `--arrival`,
    `--max-in-flight`): the load shape of `bench` and `tune`; `what` names what a value is for
    ("each level", "each trial")."""
    load = parser.add_mutually_exclusive_group()
    load.add_argument(
        "--concurrency",
        metavar="C1,C2,...",
        help=f"closed loop: requests in flight for {what} (default: {concurrency_default})",
    )
    load.add_argument(
        "--request-rate",
        metavar="R1,R2,...",
        help=f"open loop: requests per second for {what}",
    )
    parser.add_argument(
        "--arrival",
        choices=ARRIVALS,
        help=f"open loop: gaps between requests (default: {DEFAULT_ARRIVAL})",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        metavar="N",
        help="open loop: requests sent at once at most; one due beyond that is dropped "
        f"(default: {DEFAULT_MAX_IN_FLIGHT})",
    )


def parse_levels(text: str) -> list[int]:
    """`--concurrency "1,4,16"` -> `[1, 4, 16]`."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise UserError(f"--concurrency {text!r} must be positive integers, e.g. 1,4,16")
    return levels


def parse_rates(text: str) -> list[float]:
    """`--request-rate "50,100.5"` -> `[50.0, 100.5]` (requests per second)."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        rates = []
    if not rates or not all(0 < rate < float("inf") for rate in rates):
        raise UserError(f"--request-rate {text!r} must be positive numbers, e.g. 50,100,200")
    return rates


def open_loop_settings(args: argparse.Namespace) -> tuple[str, int]:
    """`--arrival` and `--max-in-flight` (defaults filled); refused without `--request-rate`."""
    given = [name for name in ("arrival", "max_in_flight") if getattr(args, name) is not None]
    if given and args.request_rate is None:
        flag = "--" + given[0].replace("_", "-")
        raise UserError(f"{flag} is for open-loop load: give --request-rate with it")
    max_in_flight = DEFAULT_MAX_IN_FLIGHT if args.max_in_flight is None else args.max_in_flight
    if max_in_flight < 1:
        raise UserError(f"--max-in-flight must be >= 1, got {max_in_flight}")
    return args.arrival or DEFAULT_ARRIVAL, max_in_flight


def add_data_options(parser: argparse.ArgumentParser, shape_default: str) -> None:
    """`--shape` (parsed by `parse_shapes`), `--input` (`parse_files`) and `--seed`: the input
    data, random unless given as `.npy` files."""
    parser.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME:D0,D1,...",
        help=f"full shape of an input, batch axis included (repeatable; default: {shape_default})",
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="send this array instead of random data (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random data seed (default: 0)")


def parse_shapes(items: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`--shape` values: `["x:1,3,224,224"]` -> `{"x": (1, 3, 224, 224)}`."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items:
        name, sep, dims = item.rpartition(":")
        try:
            shape = tuple(int(dim) for dim in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not name or not shape or any(dim < 0 for dim in shape):
            raise UserError(f"--shape {item!r} must be NAME:D0,D1,... with sizes >= 0")
        shapes[name] = shape
    return shapes


def parse_files(items: Sequence[str]) -> dict[str, Path]:
    """`--input` values: `["x=a.npy"]` -> `{"x": Path("a.npy")}`."""
    files: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UserError(
                f"--input {item!r} must be NAME=FILE (.npy, or a JPEG for a BYTES input)"
            )
        files[name] = Path(path)
    return files


def add_tolerance_options(parser: argparse.ArgumentParser) -> None:
    """`--atol`, `--rtol` and `--min-cosine`: when an output matches its ONNX output (read back
    with `parse_thresholds`)."""
    defaults = Thresholds()
    parser.add_argument("--atol", type=float, default=defaults.atol, help="absolute tolerance")
    parser.add_argument("--rtol", type=float, default=defaults.rtol, help="relative tolerance")
    parser.add_argument(
        "--min-cosine", type=float, default=defaults.min_cosine, help="lowest cosine similarity"
    )


def parse_thresholds(args: argparse.Namespace) -> Thresholds:
    """The `Thresholds` of `add_tolerance_options`' values, checked."""
    if args.atol < 0 or args.rtol < 0:
        raise UserError("--atol and --rtol must be >= 0")
    if not -1.0 <= args.min_cosine <= 1.0:
        raise UserError(f"--min-cosine must be between -1 and 1, got {args.min_cosine}")
    return Thresholds(args.atol, args.rtol, args.min_cosine)


def add_watch_options(
    parser: argparse.ArgumentParser, prefix: str = "", *, beside_server: bool = False
) -> None:
    """`--interval`, `--timeout`, `--retries` and `--metrics-port` of the watcher
    (`tools.watch.Watcher`); `prefix` ("watch-") names them `--watch-interval`, ... where they
    sit beside a server's own options (read them back with `watch_option`, the port with
    `watch_metrics_port`). `beside_server`: the watcher runs beside a server this command
    starts, and its port follows the server's (`tools.watch.metrics_port_beside`)."""
    parser.add_argument(
        f"--{prefix}interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help=f"seconds between two rounds of probes (default: {DEFAULT_INTERVAL_S:g})",
    )
    parser.add_argument(
        f"--{prefix}timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="seconds a probe may take (config and inference) before its model counts as hung "
        f"(default: {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        f"--{prefix}retries",
        type=int,
        default=DEFAULT_RETRIES,
        metavar="N",
        help=f"reloads of a failing model in a row before giving up on it until it answers "
        f"again (default: {DEFAULT_RETRIES})",
    )
    default = (
        "one above the server's highest fixed port, e.g. 8003; a free port when the server's "
        "are all 0"
        if beside_server
        else str(DEFAULT_METRICS_PORT)
    )
    parser.add_argument(
        f"--{prefix}metrics-port",
        type=port_number,
        default=None if beside_server else DEFAULT_METRICS_PORT,
        metavar="PORT",
        help=f"port of the watcher's Prometheus /metrics (default: {default}; 0 picks a free port)",
    )


def watch_option(args: argparse.Namespace, name: str, prefix: str = "") -> Any:
    """The value of watcher option `name` ("interval") declared by `add_watch_options`."""
    return getattr(args, prefix.replace("-", "_") + name)


def watch_metrics_port(
    args: argparse.Namespace, prefix: str = "", server_ports: Sequence[int] = ()
) -> int:
    """The watcher's metrics port: `--metrics-port` as given, else (`beside_server`) the one
    that follows `server_ports`."""
    port = watch_option(args, "metrics_port", prefix)
    return metrics_port_beside(server_ports) if port is None else int(port)


def add_metric_option(parser: argparse.ArgumentParser) -> None:
    """`--metric [MODEL/]OUTPUT=METRIC[:TOLERANCE]` (repeatable; read back with
    `tools.migrate.gate.parse_metrics`): how the accuracy gate judges an output whose default
    metric does not fit."""
    parser.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="[MODEL/]OUTPUT=METRIC[:TOL]",
        help="judge an output by METRIC: classes (top-1 share, default 0.99, and cosine), values "
        "(cosine and relative L2 error, default 0.05), coordinates (max error in the output's "
        "units, default 0.5), exact, or elements (--atol/--rtol); e.g. yolo/boxes=coordinates:1 "
        "(repeatable; default: integers exact, class scores classes, other floats values)",
    )
