"""`ge-python-model bench`: closed-loop load on a served model (perf_analyzer concurrency mode)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ge_python_backend.client import TritonClient, request_arrays, server_errors, server_url
from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_data_options,
    add_metrics_url_option,
    add_server_options,
    parse_files,
    parse_shapes,
)
from ge_python_backend.errors import UserError
from ge_python_backend.tools.bench import (
    MetricsProbe,
    Target,
    format_table,
    plot,
    run_benchmark,
    write_json,
)

DEFAULT_DURATION_S = 5.0

HELP = "closed-loop load at several concurrency levels: throughput and p50/p90/p99"

DESCRIPTION = """\
Measure a served model under closed-loop load: at concurrency C, C clients each keep one request
in flight and send the next as soon as the answer arrives (perf_analyzer's concurrency mode).
Per level it prints requests, errors, throughput (requests/s and rows/s) and p50/p90/p99 latency
of the successful requests; a failed request is counted as an error, never dropped. Requests hold
random data shaped from the model metadata (batch 1 unless --shape says otherwise) or .npy files
(--input). Progress goes to stderr, the table to stdout. With --metrics-url (Triton's metrics
endpoint) it adds the device utilization per device: the model's ge_device_busy_seconds_total
gained during the level, divided by the level's seconds.

examples:
  ge-python-model bench --model resnet --concurrency 1,4,16 --duration 10
  ge-python-model bench --model resnet --concurrency 32 --metrics-url 127.0.0.1:8002
  ge-python-model bench --url 127.0.0.1:8001 --protocol grpc --model resnet \\
      --shape input:4,3,224,224 --requests 500 --json bench.json --plot bench.png
"""


def register(subparsers: Any) -> None:
    """Add the `bench` subcommand."""
    parser = add_command(subparsers, "bench", run, HELP, DESCRIPTION)
    add_server_options(parser)
    parser.add_argument(
        "--concurrency",
        default="1,4,16",
        metavar="C1,C2,...",
        help="requests in flight at each level (default: 1,4,16)",
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


def parse_levels(text: str) -> list[int]:
    """`"1,4,16"` -> `[1, 4, 16]`."""
    try:
        levels = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise UserError(f"--concurrency {text!r} must be positive integers, e.g. 1,4,16")
    return levels


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
    """Run every level, print the table, write --json and --plot."""
    levels = parse_levels(args.concurrency)
    if args.warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {args.warmup}")
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
    print(
        f"model {args.model!r} at {args.protocol}://{url}: {shapes}; {amount} per level, "
        f"{args.warmup} warmup",
        file=sys.stderr,
    )
    results = run_benchmark(
        target,
        levels,
        requests=args.requests,
        duration=duration,
        warmup=args.warmup,
        progress=sys.stderr,
        metrics=metrics,
    )
    print(format_table(results))
    for result in results:
        for message in result.error_messages:
            print(f"concurrency {result.concurrency}: error: {message}", file=sys.stderr)
    if args.json:
        print(f"wrote {write_json(args.json, args.model, results)}", file=sys.stderr)
    if args.plot:
        entries = [r.as_dict() for r in results]
        path = plot([(args.model, entries)], args.plot, title=f"{args.model} ({args.protocol})")
        print(f"wrote {path}", file=sys.stderr)
    return 0
