"""`ge-python-model bench`: closed-loop (perf_analyzer concurrency mode) or open-loop
(request-rate mode) load on a served model, and the latency-threshold search."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ge_python_backend.client import TritonClient, request_arrays, server_errors, server_url
from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_data_options,
    add_load_options,
    add_metrics_url_option,
    add_quiet_option,
    add_server_options,
    open_loop_settings,
    parse_files,
    parse_levels,
    parse_rates,
    parse_shapes,
    progress_of,
)
from ge_python_backend.errors import UserError
from ge_python_backend.tools.bench import (
    LevelResult,
    MetricsProbe,
    Target,
    ThresholdSearch,
    concurrency_measure,
    format_table,
    plot,
    rate_measure,
    search_latency_threshold,
    write_json,
)

DEFAULT_DURATION_S = 5.0
DEFAULT_CONCURRENCY = "1,4,16"
RATE_RESOLUTION = 0.05  # a rate search stops when the bounds are within 5% of each other

HELP = "closed- or open-loop load at several levels: throughput and p50/p90/p95/p99"

DESCRIPTION = """\
Measure a served model under load. Closed loop (--concurrency, the default): at concurrency C,
C clients each keep one request in flight and send the next as soon as the answer arrives
(perf_analyzer's concurrency mode). Open loop (--request-rate): requests are due at R per
second whatever the answers, with constant gaps (--arrival constant, the default, as in
perf_analyzer: the same load every run) or a Poisson process's random ones (--arrival poisson,
seeded by --seed: traffic from many independent users); at most --max-in-flight are sent at
once and a request due while that many are in flight is dropped and counted, never queued.
Open-loop latency runs from each request's scheduled time, so a client that falls behind shows.
Per level it prints requests, errors, throughput (requests/s and rows/s) and p50/p90/p95/p99
latency of the successful requests (open loop: the offered rate, the most in flight, drops);
a failed request is counted as an error, never dropped. --latency-threshold-ms X searches the
highest concurrency or rate whose p99 stays within X ms with no error or drop (perf_analyzer's
--latency-threshold): from the lowest level given (1 if only one is given), doubling, then
bisecting up to the highest given, and reports every level tried. Requests hold random data
shaped from the model metadata (batch 1 unless --shape says otherwise) or .npy files (--input).
Progress goes to stderr, the table to stdout. With --metrics-url (Triton's metrics endpoint)
it adds the device utilization per device: the model's ge_device_busy_seconds_total gained
during the level, divided by the level's seconds.

examples:
  ge-python-model bench --model resnet --concurrency 1,4,16 --duration 10
  ge-python-model bench --model resnet --concurrency 32 --metrics-url 127.0.0.1:8002
  ge-python-model bench --model resnet --request-rate 100,200,400 --arrival poisson
  ge-python-model bench --model resnet --concurrency 64 --latency-threshold-ms 30
  ge-python-model bench --url 127.0.0.1:8001 --protocol grpc --model resnet \\
      --shape input:4,3,224,224 --requests 500 --json bench.json --plot bench.png
"""


def register(subparsers: Any) -> None:
    """Add the `bench` subcommand."""
    parser = add_command(subparsers, "bench", run, HELP, DESCRIPTION)
    add_server_options(parser)
    add_quiet_option(parser)
    add_load_options(parser, DEFAULT_CONCURRENCY, "each level")
    parser.add_argument(
        "--latency-threshold-ms",
        type=float,
        metavar="X",
        help="search the highest concurrency or rate (up to the highest given) whose p99 "
        "latency is at most X ms",
    )
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--requests", type=int, metavar="N", help="measured requests per level")
    amount.add_argument(
        "--duration",
        type=float,
        metavar="S",
        help=f"measured seconds per level (default: {DEFAULT_DURATION_S:g})",
    )
    add_data_options(parser, "the model metadata's, batch 1")
    parser.add_argument(
        "--warmup",
        type=int,
        default=10,
        metavar="N",
        help="unmeasured requests before each level (default: 10)",
    )
    add_metrics_url_option(parser, "adds device_utilization per device to the table and the JSON")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--plot", metavar="PATH.png", help="draw throughput and p99 latency")


def describe_target(
    url: str,
    protocol: str,
    model: str,
    shapes: Mapping[str, tuple[int, ...]],
    seed: int,
    files: Mapping[str, Path] | None = None,
) -> Target:
    """The request to send, shaped from the served model's metadata."""
    with server_errors(url, protocol), TritonClient(url, protocol) as client:
        metadata = client.model_metadata(model)
        batched = client.model_config(model).max_batch_size > 0
    arrays = request_arrays(metadata, batched, shapes, files or {}, seed)
    first = next(iter(arrays.values()), None)
    rows = int(first[0].shape[0]) if batched and first is not None and first[0].ndim else 1
    outputs = [item["name"] for item in metadata.get("outputs", [])]
    return Target(url, protocol, model, arrays, outputs, rows)


def run(args: argparse.Namespace) -> int:
    """Run every level (or the threshold search), print the table, write --json and --plot."""
    open_loop = args.request_rate is not None
    levels: Sequence[float] = (
        parse_rates(args.request_rate)
        if open_loop
        else parse_levels(args.concurrency or DEFAULT_CONCURRENCY)
    )
    if args.warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {args.warmup}")
    arrival, max_in_flight = open_loop_settings(args)
    threshold = args.latency_threshold_ms
    if threshold is not None and not 0 < threshold < float("inf"):
        raise UserError(f"--latency-threshold-ms must be a positive number, got {threshold}")
    url = server_url(args.url, args.protocol)
    target = describe_target(
        url, args.protocol, args.model, parse_shapes(args.shape), args.seed, parse_files(args.input)
    )
    metrics = None
    if args.metrics_url:
        metrics = MetricsProbe(args.metrics_url, args.model)
        metrics.read()  # fail now, not after the first level, if the metrics are not there
    duration = None
    if args.requests is None:
        duration = DEFAULT_DURATION_S if args.duration is None else args.duration
    shapes = ", ".join(f"{n} {list(a.shape)}" for n, (a, _) in target.inputs.items())
    amount = f"{args.requests} requests" if args.requests is not None else f"{duration:g} s"
    shape = (
        f"open loop ({arrival} arrivals, at most {max_in_flight} in flight)"
        if open_loop
        else "closed loop"
    )
    print(
        f"model {args.model!r} at {args.protocol}://{url}: {shapes}; {shape}, {amount} per "
        f"level, {args.warmup} warmup",
        file=sys.stderr,
    )
    common: dict[str, Any] = dict(
        requests=args.requests,
        duration=duration,
        warmup=args.warmup,
        progress=progress_of(args),
        metrics=metrics,
    )
    measure: Callable[[float], LevelResult]
    if open_loop:
        measure = rate_measure(
            target, arrival=arrival, seed=args.seed, max_in_flight=max_in_flight, **common
        )
    else:
        measure = concurrency_measure(target, **common)
    search = None
    if threshold is None:
        results = [measure(level) for level in levels]
    else:
        search = search_latency_threshold(
            measure,
            threshold,
            start=min(levels) if len(levels) > 1 else min(1, levels[0]),
            maximum=max(levels),
            integer=not open_loop,
            resolution=RATE_RESOLUTION if open_loop else 0.0,
        )
        results = search.tried
    print(format_table(results))
    for result in results:
        for message in result.error_messages:
            print(f"{result.load} {result.level:g}: error: {message}", file=sys.stderr)
    if search is not None:
        print(describe_search(search))
    if args.json:
        print(f"wrote {write_json(args.json, args.model, results, search)}", file=sys.stderr)
    if args.plot:
        entries = [r.as_dict() for r in results]
        path = plot([(args.model, entries)], args.plot, title=f"{args.model} ({args.protocol})")
        print(f"wrote {path}", file=sys.stderr)
    return 0


def describe_search(search: ThresholdSearch) -> str:
    """The search's outcome in a line: the chosen level and the lowest one above it (broken)."""
    first = search.tried[0]
    unit = "requests/s" if first.request_rate is not None else "concurrency"
    chosen = search.chosen
    if chosen is None:
        return (
            f"no level met p99 <= {search.threshold_ms:g} ms: the lowest, {unit} "
            f"{first.level:g}, had {_why(first)}"
        )
    line = (
        f"highest {unit} with p99 <= {search.threshold_ms:g} ms: {chosen.level:g} "
        f"(p99 {chosen.p99_ms:.2f} ms, {chosen.throughput_rps:.1f} req/s)"
    )
    above = [r for r in search.tried if r.level > chosen.level]
    if not above:
        return line + "; it is the highest level given"
    broken = min(above, key=lambda r: r.level)
    return line + f"; {broken.level:g} had {_why(broken)}"


def _why(result: LevelResult) -> str:
    """What broke a level: its p99, errors and drops."""
    p99 = "no answer" if result.p99_ms is None else f"p99 {result.p99_ms:.2f} ms"
    counts = ((result.errors, "errors"), (result.dropped, "dropped"))
    extra = [f"{n} {what}" for n, what in counts if n]
    return ", ".join([p99, *extra])
