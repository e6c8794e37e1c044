"""`ge-python-model tune`: search a served model's serving config under a p99 constraint."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from pathlib import Path
from typing import Any

from ge_python_backend.ascend import PROCESSES_PER_DEVICE_VM
from ge_python_backend.client import TritonClient, server_errors, server_url
from ge_python_backend.commands import add_command
from ge_python_backend.commands.bench_cmd import describe_target
from ge_python_backend.commands.options import (
    add_data_options,
    add_device_budget_options,
    add_load_options,
    add_metrics_url_option,
    add_quiet_option,
    add_server_options,
    device_limits,
    open_loop_settings,
    parse_files,
    parse_levels,
    parse_rates,
    parse_shapes,
    progress_of,
)
from ge_python_backend.errors import UserError
from ge_python_backend.repository.budget import footprints
from ge_python_backend.repository.parameters import parse_device_ids
from ge_python_backend.repository.shm import repository_entries
from ge_python_backend.runtime.batching import normalize_gears
from ge_python_backend.tools.tune import (
    CONFIRM_FINALISTS,
    CONFIRM_ROUNDS,
    DEFAULT_MAX_INSTANCES,
    LoadFunction,
    Search,
    SearchSpace,
    ServedModel,
    apply_winner,
    candidate_of,
    closed_loop,
    format_summary,
    gear_advice,
    open_loop,
    write_report,
)

LOG = logging.getLogger(__name__)
TRITON_METRICS_PORT = 8002  # tritonserver's default --metrics-port
DEFAULT_BUDGET_S = 300.0
DEFAULT_CONCURRENCY = 8
DEFAULT_TRIAL_S = 2.0
DEFAULT_WARMUP = 20

HELP = "find the serving config with the most rows/s under a p99 constraint, live on Triton"

DESCRIPTION = f"""\
Tune a model served by a Triton started with --model-control-mode=explicit, without restarting
it: each trial loads a variant of the model's config through Triton's repository API (a load with
a config override) and measures it under closed-loop load (--concurrency clients, one request in
flight each, for --duration seconds after --warmup requests): rows/s, requests/s, p50/p99, device
utilization (ge_device_busy_seconds_total), padding (ge_padded_rows_total / ge_rows_total), rows
per execution, Triton's queue time and device memory. The first trial is the config the model
has. Varied: instance count, pipeline_depth, pipeline_min_device_us, max_queue_delay_microseconds,
preferred batch sizes (subsets of the compiled gears) and device_ids placement; a small grid,
then hill climbing around the best. Configs the devices cannot hold (pyACL's processes per
device, device memory) are skipped; a trial never starts when it cannot finish within
--budget-s, the confirmation included; configs that fail to load are listed with Triton's
reason. Confirmation: the original config and the best candidates with p99 <= --p99-ms and no
failed request ({CONFIRM_FINALISTS} finalists at most) are loaded and measured again in
--confirm-rounds alternating rounds; a candidate wins only if it met the constraint in every
round and beat the original config's rows/s in every round (and by more than the noise margin
in the median), else the original config is kept. At the end the original config is loaded
back, unless --apply writes the winner into --repository's config.pbtxt (diff printed, checked
with validate) and loads it. Gear advice: from the batch sizes Triton formed (its batch_stats),
the --dynamic_batch_size gears that would have padded least, with the atc command. Exits 1 when
no trial met the constraint.

examples:
  ge-python-model tune --url 127.0.0.1:8000 --model resnet --p99-ms 30 --report tune-resnet
  ge-python-model tune --model resnet --p99-ms 30 --budget-s 120 --shape input:1,3,224,224 \\
      --repository models --apply
  ge-python-model tune --url 127.0.0.1:8001 --protocol grpc --model resnet --p99-ms 20 \\
      --device-ids 0,1 --processes-per-device {PROCESSES_PER_DEVICE_VM}
"""


def register(subparsers: Any) -> None:
    """Add the `tune` subcommand."""
    parser = add_command(subparsers, "tune", run, HELP, DESCRIPTION)
    add_server_options(parser)
    add_quiet_option(parser)
    parser.add_argument(
        "--p99-ms", type=float, required=True, metavar="MS", help="the p99 latency constraint"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        metavar="S",
        help=f"seconds the whole tuning may take, restoring included (default: "
        f"{DEFAULT_BUDGET_S:g})",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        metavar="REPO",
        help="the model repository Triton serves (needed by --apply)",
    )
    parser.add_argument(
        "--apply",
        action="store_true",
        help="write the winner into REPO/MODEL/config.pbtxt and serve it, instead of loading "
        "the original config back",
    )
    parser.add_argument("--report", type=Path, metavar="DIR", help="write tune.json and TUNE.md")
    add_metrics_url_option(
        parser,
        f"each trial's device counters (default: port {TRITON_METRICS_PORT} of --url's host)",
    )
    add_load_options(parser, str(DEFAULT_CONCURRENCY), "each trial (one value)")
    parser.add_argument(
        "--duration",
        type=float,
        default=DEFAULT_TRIAL_S,
        metavar="S",
        help=f"measured seconds per trial (default: {DEFAULT_TRIAL_S:g})",
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=DEFAULT_WARMUP,
        metavar="N",
        help=f"unmeasured requests before each trial (default: {DEFAULT_WARMUP})",
    )
    parser.add_argument(
        "--confirm-rounds",
        type=int,
        default=CONFIRM_ROUNDS,
        metavar="N",
        help=f"alternating rounds re-measuring the finalists after the search; 0: none, the "
        f"best single window wins (default: {CONFIRM_ROUNDS})",
    )
    add_data_options(parser, "the model metadata's, batch 1")
    parser.add_argument(
        "--gears",
        metavar="G1,G2,...",
        help="the .om's batch gears (as `inspect` prints them): the preferred batch sizes tried "
        "are subsets of them (default: the config's preferred batch sizes)",
    )
    parser.add_argument(
        "--max-instances",
        type=int,
        default=DEFAULT_MAX_INSTANCES,
        metavar="N",
        help=f"the most instances to try (default: {DEFAULT_MAX_INSTANCES}, or the config's)",
    )
    parser.add_argument(
        "--device-ids",
        metavar="ID,...",
        help="the NPUs the model may use: placements tried are prefixes of this list (default: "
        "the config's device_ids)",
    )
    add_device_budget_options(
        parser, "the SoC of the NPUs, whose memory bounds the configs tried before one is measured"
    )


def _memory(repository: Path | None, model: str) -> tuple[int, int]:
    """What one pipeline lane of `model` and what its weights hold on the device, as the device
    budget counts them (a load's work space and the lane's buffers; the weights once per
    instance); 0 without --repository or where the `.om` cannot be read here: tune then
    measures the buffers."""
    if repository is None:
        return 0, 0
    entries = [e for e in repository_entries(repository) if e.directory.name == model]
    return next(((f.lane_bytes or 0, f.weight_bytes) for f in footprints(entries)), (0, 0))


def parse_gears(text: str) -> tuple[int, ...]:
    """`"1,2,4,8"` -> `(1, 2, 4, 8)`."""
    try:
        return normalize_gears([int(part) for part in text.split(",") if part.strip()])
    except ValueError:
        raise UserError(f"--gears {text!r} must be positive integers, e.g. 1,2,4,8") from None


def default_metrics_url(url: str) -> str:
    """Triton's metrics endpoint on the host of `url` (HOST:PORT)."""
    host = url.rsplit(":", 1)[0] if ":" in url else url
    return f"{host}:{TRITON_METRICS_PORT}"


def _check(args: argparse.Namespace) -> None:
    if args.apply and args.repository is None:
        raise UserError("--apply needs --repository REPO, the repository Triton serves")
    if args.warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {args.warmup}")
    if args.duration <= 0:
        raise UserError(f"--duration must be > 0 seconds, got {args.duration:g}")


def run(args: argparse.Namespace) -> int:
    """Search, apply or restore, print the summary and the gear advice, write --report."""
    _check(args)
    url = server_url(args.url, args.protocol)
    target = describe_target(
        url, args.protocol, args.model, parse_shapes(args.shape), args.seed, parse_files(args.input)
    )
    metrics_url = args.metrics_url or default_metrics_url(url)
    load = _load(args)
    applied = None
    with server_errors(url, args.protocol, args.model), TritonClient(url, args.protocol) as client:
        if not client.is_model_ready(args.model):
            raise UserError(f"model {args.model!r} is not ready: load it before tuning it")
        inputs = client.model_metadata(args.model).get("inputs", [])
        served = ServedModel(client, target, metrics_url, load)
        default = candidate_of(served.original)
        gears = parse_gears(args.gears) if args.gears else default.preferred_batch_sizes
        space = SearchSpace.around(
            default,
            gears,
            batched=served.original.HasField("dynamic_batching"),
            max_instances=args.max_instances,
            device_ids=parse_device_ids(args.device_ids) if args.device_ids else (),
        )
        lane_bytes, weight_bytes = _memory(args.repository, args.model)
        search = Search(
            served,
            space,
            p99_ms=args.p99_ms,
            budget_s=args.budget_s,
            device=device_limits(args),
            lane_bytes=lane_bytes,
            weight_bytes=weight_bytes,
            confirm_rounds=args.confirm_rounds,
            progress=progress_of(args),
        )
        try:
            result = search.run()
            if args.apply and result.winner is not None:
                winner = result.trials[result.winner].candidate
                diff = apply_winner(args.repository, args.model, winner)
                print(diff or "config.pbtxt already holds the winner", file=sys.stderr)
                served.load_repository_config(winner)
                applied = args.repository / args.model / "config.pbtxt"
        except BaseException:
            if applied is None:
                _restore_after_failure(served)
            raise
        if applied is None:
            served.restore()
    observed = 0 if result.winner is None else result.winner
    advice = gear_advice(result.trials, observed, gears, args.model, inputs)
    for line in format_summary(result, args.p99_ms):
        print(line)
    if advice is not None:
        print(
            f"gear advice (batch sizes of trial {observed + 1}): "
            + "; ".join(
                f"{o.label} {','.join(map(str, o.gears))} pad {o.padding_ratio:.3f}"
                for o in advice.options
            )
        )
        print(advice.atc_command or "the compiled gears already pad least")
    outcome = (
        f"The winner was applied to {applied}."
        if applied
        else "The original config was loaded back."
    )
    print(outcome)
    if args.report:
        command = _command_line(args, url)
        paths = write_report(args.report, args.model, command, result, args.p99_ms, advice, outcome)
        print("wrote " + ", ".join(map(str, paths)), file=sys.stderr)
    return 0 if result.winner is not None else 1


def _one(values: list[Any], flag: str) -> Any:
    if len(values) != 1:
        raise UserError(f"{flag} takes one value for tune (every trial runs the same load)")
    return values[0]


def _load(args: argparse.Namespace) -> LoadFunction:
    """The load every trial runs: closed loop at --concurrency, or open loop at --request-rate."""
    arrival, max_in_flight = open_loop_settings(args)
    if args.request_rate is not None:
        rate = _one(parse_rates(args.request_rate), "--request-rate")
        return open_loop(
            rate,
            args.duration,
            args.warmup,
            arrival=arrival,
            max_in_flight=max_in_flight,
            seed=args.seed,
        )
    concurrency = _one(parse_levels(args.concurrency or str(DEFAULT_CONCURRENCY)), "--concurrency")
    return closed_loop(concurrency, args.duration, args.warmup)


def _restore_after_failure(served: ServedModel) -> None:
    """Load the original config back while another error is on its way (which it keeps)."""
    try:
        served.restore()
    except Exception:
        LOG.exception("tune failed, and loading model %r's original config failed", served.model)


def _command_line(args: argparse.Namespace, url: str) -> str:
    words = ["ge-python-model", "tune", "--url", url, "--protocol", args.protocol]
    words += ["--model", args.model, "--p99-ms", f"{args.p99_ms:g}"]
    words += ["--budget-s", f"{args.budget_s:g}"]
    if args.request_rate is not None:
        words += ["--request-rate", args.request_rate, "--arrival", open_loop_settings(args)[0]]
    else:
        words += ["--concurrency", args.concurrency or str(DEFAULT_CONCURRENCY)]
    words += ["--duration", f"{args.duration:g}", "--warmup", str(args.warmup)]
    words += ["--confirm-rounds", str(args.confirm_rounds)]
    for shape in args.shape:
        words += ["--shape", shape]
    if args.apply:
        words += ["--repository", str(args.repository), "--apply"]
    return shlex.join(words)
