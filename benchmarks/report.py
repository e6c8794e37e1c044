"""The report of one run as data, BENCHMARKS.md rendered from it, and the run's plots.

`document(data)` turns a run's data and `analysis` of it into the report as data (`report.json`
beside `all.json`): a title, the introduction, the summary table, then each section as blocks of
text and tables (each `Table` its columns and rows of cells). `render_markdown` lays a document
out through the template `BENCHMARKS.md.j2`: the summary table first, then each section's text
and tables. Setup (what was run, and how) is described in fixed words; every sentence that draws
a conclusion is chosen by a figure of the run, so it changes when the numbers do.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Union

import analysis
import jinja2
import timeline as timeline_plot
from analysis import Rounds, Target
from hop import PIPELINED_TIMING
from scenarios import (
    ANSWER_ROWS,
    CLASSIFIER_BATCH,
    COUNTER_BATCHES,
    COUNTER_REQUESTS,
    CPU_CONCURRENCY,
    DEVICE_TIMING,
    EXPERT_MODELS,
    HOP_EVICT_MIB,
    JPEG_CHECK_THREADS,
    JPEG_GEARS,
    JPEG_RESIZES,
    JPEG_SIDE,
    MANY_PER_KIND,
    SATURATION_DELAYS_US,
    SATURATION_ROWS,
    SMALL_GEARS,
    WIDTH,
)

from ge_python_backend.emulator.timing import PROFILES
from ge_python_backend.emulator.timing import parse as parse_timing
from ge_python_backend.repository.parameters import (
    DEFAULT_PIPELINE_DEPTH,
    DEFAULT_PIPELINE_MIN_DEVICE_US,
)
from ge_python_backend.tools.bench import plot
from ge_python_backend.triton.metrics import FLUSH_INTERVAL_S

COUNTER_ROWS = (
    ("malloc_calls", "device allocations (acl.rt.malloc)"),
    ("free_calls", "device frees"),
    ("malloc_host_calls", "pinned host allocations"),
    ("dataset_creations", "dataset creations"),
    ("data_buffer_creations", "data buffer creations"),
    ("memcpy_calls", "copies (acl.rt.memcpy)"),
    ("h2d_bytes", "bytes host to device"),
    ("d2h_bytes", "bytes device to host"),
    ("execute_calls", "model executions"),
    ("set_dynamic_calls", "gear selections"),
)
# What each execution profile of `PROFILES` models, and where its figures come from.
PROFILE_MODELS = {
    "resnet50-310p3": "ResNet-50 (torchvision, 224x224) on an Atlas 300I Pro (Ascend 310P3): "
    "2.46 ms at batch 1, 15.06 ms at batch 64; copies over PCIe 4.0 x16",
}
PROFILE_SOURCES = [
    "- Batch 64: Ascend ModelZoo-PyTorch, `ACL_PyTorch/built-in/cv/Resnet50_Pytorch_Infer/"
    "README.md` (section 模型推理性能&精度, inference through the ACL interface): 310P3, batch 64, "
    "**4,250 images/s**, i.e. 64 / 4250 = 15.06 ms per execution "
    "(https://gitee.com/ascend/ModelZoo-PyTorch, GitHub mirror `Ascend/ModelZoo-PyTorch`).",
    "- Batch 1: the Ascend msit benchmark documentation (`Ascend/msit`, benchmark *Basic Usage*) "
    "runs `pth_resnet50_bs1.om` and reports `NPU_compute_time` mean **2.456 ms** (407 "
    "images/s), device compute only, host-device copies excluded. That page does not name the "
    "chip: UNCONFIRMED that it is a 310P3.",
    "- Fit: `2260 + 200 x batch` us gives 2.46 ms at batch 1 and 15.06 ms at batch 64 (linear "
    "between; real NPUs gain less per row at small batches, so mid-size gears are modelled "
    "slightly slow).",
    "- Copies: PCIe 4.0 x16 carries 16 GT/s on 16 lanes with 128b/130b coding, 31.5 GB/s per "
    "direction (the PCI-SIG figures as tabulated in https://hpc-notes.pages.dev/reference/pcie, "
    "after Wikipedia's PCI Express table). Host-device copies through a driver reach well below "
    "the link rate (packet headers, DMA set-up per copy); `copy_gbps=10`, about a third of the "
    "link, is a conservative effective rate. UNCONFIRMED: an `aclrtMemcpy` rate measured on a "
    "310P card.",
    "- Memsets: a 310P3 chip's LPDDR4X memory moves 204.8 GB/s (the Atlas 300I Duo's two chips "
    "408 GB/s together: Gamers Nexus' teardown as reported by elektronikpraxis.de, \"Huawei zeigt "
    'mit der Atlas 300i Duo ..."); `memset_gbps=204.8` writes at that peak. UNCONFIRMED: the '
    "rate an `aclrtMemsetAsync` reaches on a 310P, and whether it contends with copies (the "
    "emulator's memset holds no copy engine).",
]
PLOTS = (
    ("overhead", "Overhead: our model.py vs the numpy floor"),
    ("naive", "Our model.py vs a sample-style model.py (device timing)"),
    ("scaling", "Instances and dynamic batching (device timing)"),
    ("pipeline", "Pipeline depth 1 vs 2 (device timing)"),
    ("saturation", "Defaults that keep the device busy (ResNet-50 / 310P3 profile)"),
    ("sysalloc", "Data-dependent outputs: allocated by ACL vs pooled (max_output_bytes)"),
    ("jpeg", "JPEG files in (DVPP) vs NV12 rows in, images/s (dvpp-310p3 profile)"),
)
FIGURE_WORDS = {"throughput_rps": "throughput", "rows_per_s": "rows/s"}
# Section 7's settings in words (tables, plot titles).
EXPERT_SETTING_WORDS = {
    "plain": "no timing model",
    "copy_bound": "copy-bound (section 5's timing)",
    "resnet50": "ResNet-50 / 310P3 profile",
}


TEMPLATE = Path(__file__).with_name("BENCHMARKS.md.j2")


@dataclasses.dataclass
class Table:
    """A table of the report: its column headings and its rows, each a list of cells (text)."""

    columns: list[str]
    rows: list[list[str]]


# What a section function yields: Markdown lines (a line "## title" opens a section) and tables.
Item = Union[str, Table]


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def each(values: list[float], digits: int = 2) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)


def span(values: list[float], digits: int = 2) -> str:
    """`0.74-0.76`, or one value when they round alike."""
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return low if low == high else f"{low}-{high}"


def verdict(target: Target) -> str:
    return "**not met**" if target.verdict == "not met" else target.verdict


def target_text(target: Target, shown: str = "") -> str:
    """`>= 0.95`, `<= 1.05`, `>= 0.95 (floor 0.90)`."""
    text = f"{'<=' if target.at_most else '>='} {shown or f'{target.target:.2f}'}"
    return text if target.floor is None else f"{text} (floor {target.floor:.2f})"


COMPARISON_COLUMNS = ["comparison", "ratio (median)", "per round", "target", ""]


def summary_row(
    text: str, target: Target, digits: int, per_round: int | None = None, unit: str = ""
) -> list[str]:
    """One row of a comparison table: median, rounds (`per_round` digits, else `digits`),
    target, verdict; `unit` follows the median and the target."""
    shown = f"{target.target:g}{unit}" if unit else ""
    return [
        text,
        f"{target.value:.{digits}f}{unit}",
        each(target.rounds, digits if per_round is None else per_round),
        target_text(target, shown),
        verdict(target),
    ]


def label(data: dict[str, Any], model: str) -> str:
    """How tables and plots name a model: scaling variants in words."""
    variant = data["scaling"]["variants"].get(model)
    if variant is None:
        return model
    instances, batching = variant
    plural = "s" if instances > 1 else ""
    return f"{instances} instance{plural}, dynamic batching {'on' if batching else 'off'}"


def level_table(runs: dict[str, Rounds]) -> Table:
    columns = ["model", "round", "concurrency", "requests", "errors", "req/s", "rows/s"]
    table = Table([*columns, "p50 ms", "p90 ms", "p99 ms"], [])
    for model, rounds in runs.items():
        for number, entries in enumerate(rounds, 1):
            for e in entries:
                table.rows.append(
                    [
                        model,
                        str(number),
                        str(e["concurrency"]),
                        str(e["requests"]),
                        str(e["errors"]),
                        fmt(e["throughput_rps"]),
                        fmt(e["rows_per_s"]),
                        fmt(e["p50_ms"], 2),
                        fmt(e["p90_ms"], 2),
                        fmt(e["p99_ms"], 2),
                    ]
                )
    return table


def timing_words(spec: str) -> str:
    """What a `GE_EMULATOR_TIMING` spec costs, in words."""
    timing = parse_timing(spec)
    return (
        f"every execution costs {timing.execute_us / 1e3:g} ms plus "
        f"{timing.execute_us_per_row / 1e3:g} ms per row of its gear, copies "
        f"{timing.copy_gbps:g} GB/s"
    )


# -- the summary -------------------------------------------------------------------------------


def introduction(data: dict[str, Any], targets: list[Target]) -> str:
    plan, elapsed = data["plan"], data["elapsed_s"]
    moved = analysis.variability(data, targets)
    if moved is None:
        variation = "One round: how much the figures move between rounds was not measured."
    else:
        model, level = moved.largest_at
        variation = (
            "Across this run's rounds a model's throughput at one concurrency level spread by "
            f"{moved.throughput:.0%} (median; (max - min) / median), at most {moved.largest:.0%} "
            f"({model} at concurrency {level}); the per-round ratios of the table below spread "
            f"by {moved.ratios:.0%} (median), "
            + (
                "less than the throughputs."
                if moved.ratios < moved.throughput
                else "no less than the throughputs."
            )
        )
    return (
        f"Written by `make bench` (`python benchmarks/run.py`) in one run of {elapsed / 60:.1f} "
        "minutes. Every comparison below was measured side by side in that run: the models "
        "compared were served by one server and measured in alternating rounds "
        f"({plan['rounds']} rounds of {plan['seconds']:g} s per concurrency level after "
        f"{plan['warmup']} warmup requests, unless a section says otherwise). Each ratio is the "
        "median of the per-round ratios: a round measures, at each concurrency level, both sides "
        "back to back (each model and level a run of its own; odd rounds take the even rounds' "
        "order backwards, so each level's runs pair up as A B B A over two rounds), so a burst "
        "of other load on the machine spoils one round, not the result, and a drift of its "
        "speed cancels over a pair of rounds. "
        "The load generator is `ge-python-model bench` over gRPC, closed loop (each of C "
        "clients keeps one request in flight). It runs on the same machine as the server, so "
        "client, tritonserver and the model's stub process share its cores. " + variation
    )


def summary_lines(
    over: analysis.Overhead,
    naive: Target,
    eff: analysis.Efficiency,
    sat: analysis.Saturation | None,
    exp: analysis.Expert | None,
    host: analysis.DeviceHost | None = None,
    jpeg: analysis.JpegInputs | None = None,
    fifty: analysis.FiftyModels | None = None,
) -> Table:
    low, high = sorted(over.senders)
    rows = [
        *(
            summary_row(
                f"overhead: our model.py / numpy floor, throughput at concurrency {level}",
                target,
                2 if level == 1 else 3,
                per_round=2,
            )
            for level, target in over.ratios.items()
        ),
        [
            "the floor answering through response senders from a thread (as pipeline depth 2 "
            f"does) / the floor, throughput at concurrency {low} and {high}",
            f"{over.senders[low]:.2f}, {over.senders[high]:.2f}",
            "",
            "",
            "",
        ],
        summary_row(
            "our model.py / naive sample-style model.py, throughput at concurrency "
            f"{analysis.NAIVE_LEVEL}",
            naive,
            1,
            unit="x",
        ),
        summary_row(
            "serving efficiency: classifier through Triton / in-process `Session.infer`, "
            f"batch {CLASSIFIER_BATCH}",
            eff.ratio,
            3,
            per_round=2,
        ),
    ]
    if sat is not None:
        rows.append(
            summary_row(
                f"device busy (timing model) with scaffold's defaults (depth {sat.depth}, "
                f"max_queue_delay_us {sat.delay}), {sat.top} clients of {SATURATION_ROWS} rows",
                sat.busy,
                3,
            )
        )
        if sat.latency is not None:
            rows.append(
                summary_row(
                    "p50 latency at concurrency 1, depth 2 / depth 1 (max_queue_delay_us "
                    f"{sat.delay})",
                    sat.latency,
                    3,
                )
            )
    if exp is not None:
        for (setting, level), target in exp.ratios.items():
            figure = analysis.EXPERT_TARGETS[setting, level][0]
            rows.append(
                summary_row(
                    f"our model.py / hand-written pyACL model.py, {FIGURE_WORDS[figure]} at "
                    f"concurrency {level}, {EXPERT_SETTING_WORDS[setting]}",
                    target,
                    2,
                    unit="" if setting == "plain" else "x",
                )
            )
    if host is not None:
        rows += [
            summary_row(
                "device host / in-stub (section 10), throughput at concurrency "
                f"{analysis.DEVICE_HOST_THROUGHPUT_LEVEL}",
                host.throughput,
                3,
                per_round=2,
            ),
            summary_row(
                "device host - in-stub (section 10), p50 at concurrency 1",
                host.p50_delta_us,
                0,
                unit=" us",
            ),
        ]
    if jpeg is not None:
        rows.append(
            summary_row(
                "JPEG files in (section 11): top-1 equal to the host reference",
                jpeg.top1,
                0,
                unit=" of 100",
            )
        )
    if fifty is not None:
        rows.append(
            summary_row(
                "shared work spaces / a work space per lane (section 13), throughput at "
                f"concurrency {fifty.clients}",
                fifty.throughput,
                3,
                per_round=2,
            )
        )
    return Table(COMPARISON_COLUMNS, rows)


def machine_lines(data: dict[str, Any]) -> list[Item]:
    return [
        "## Machine",
        "",
        Table(["", ""], [[key, value] for key, value in data["machine"]]),
        "",
        "## Commands",
        "",
        "```",
        "make bench          # = .venv/bin/python benchmarks/run.py --output BENCHMARKS.md",
        "```",
        "",
        "Runs, as they were issued (ports were free ports picked at start, `WORK` the "
        "temporary folder the models were built in; raw JSON in `benchmarks/results/`):",
        "",
        "```",
        *data["commands"],
        "```",
        "",
    ]


# -- sections ----------------------------------------------------------------------------------


def overhead_lines(data: dict[str, Any], over: analysis.Overhead) -> list[Item]:
    low, high = sorted(over.ratios)
    ours, floor = over.cpu["ours"], over.cpu["floor"]
    alone = over.compute_infer_1
    p50_gap = (over.p50_ms["ours"] - over.p50_ms["floor"]) * 1e3
    compute_gap = alone["ours"] - alone["floor"]
    if over.senders_slower:
        senders = (
            ": that path costs Triton's Python backend more per request than responses "
            "returned from `execute` (the stub sends a returned list in one message), which is "
            "why pipeline depth 2 pipelines only executions of at least "
            f"{DEFAULT_PIPELINE_MIN_DEVICE_US} us on the device (`pipeline_min_device_us`) and "
            "answers shorter ones inline."
        )
    else:
        senders = ": in this run that path was not slower than responses returned from `execute`."
    cores = "" if over.cpu_count is None else f" of the machine's {over.cpu_count} cores"
    if over.saturated:
        limit = "Both runs kept the cores busy, so CPU per request limited throughput. "
    elif over.saturated is None:
        limit = ""
    else:
        limit = "The cores were not kept busy in both runs. "
    return [
        "## 1. Overhead against the floor",
        "",
        f"The small model `y = 2x + 1` on FP32[N, {WIDTH}], compiled for the emulator with batch "
        f"gears {SMALL_GEARS}, served (a) `ours`: scaffolded with `model.py` (pooled buffers, "
        "gear batching, pyACL emulator; scaffold's defaults here and in sections 2 to 4: "
        f"pipeline depth {DEFAULT_PIPELINE_DEPTH}, which answers executions shorter than "
        f"{DEFAULT_PIPELINE_MIN_DEVICE_US} us on the device inline and pipelines longer "
        "ones, see sections 5 and 6) and "
        "(b) `floor`: the same model directory and "
        "config.pbtxt (dynamic batching, 1 instance) with `benchmarks/floor_model.py`, which "
        "computes `x * 2 + 1` with numpy per request and nothing else; and (c) `floor_sender`: "
        "the same numpy work answered the way pipeline depth 2 answers, through each request's "
        "response sender from a completion thread (`benchmarks/floor_sender_model.py`). No "
        "device timing: the emulator runs the model with onnxruntime as fast as it can.",
        "",
        f"Throughput ratio ours / floor: **{over.ratios[low].value:.2f} at concurrency {low}**, "
        f"**{over.ratios[high].value:.2f} at concurrency {high}**. The floor answering through "
        f"response senders reaches {over.senders[low]:.2f} and {over.senders[high]:.2f} of the "
        "floor" + senders,
        "",
        "![ours and the floor: throughput and p99 latency](benchmarks/results/overhead.png)",
        "",
        f"CPU time per request at concurrency {CPU_CONCURRENCY}, and Triton's `compute_infer` "
        "per request (the model's `execute` call as Triton times it, the round trip to the stub "
        f"included) at concurrency 1 and {CPU_CONCURRENCY} (one extra run each; microseconds):",
        "",
        Table(
            [
                "model",
                "req/s",
                "requests per execution",
                "load generator",
                "tritonserver",
                "model stub process",
                "total",
                "compute_infer at 1",
                f"compute_infer at {CPU_CONCURRENCY}",
            ],
            [
                [
                    model,
                    fmt(c["throughput_rps"]),
                    f"{c['per_execution']:.2f}",
                    fmt(c["client"]),
                    fmt(c["tritonserver"]),
                    fmt(c["stub"]),
                    fmt(c["client"] + c["tritonserver"] + c["stub"]),
                    fmt(alone[model]),
                    fmt(c["compute_infer"]),
                ]
                for model, c in data["overhead"]["cpu"].items()
            ],
        ),
        "",
        f"At concurrency 1 the median p50 was {over.p50_ms['ours']:.2f} ms for ours and "
        f"{over.p50_ms['floor']:.2f} ms for the floor, {fmt(p50_gap)} us apart; `compute_infer` "
        f"at concurrency 1 was {fmt(alone['ours'])} against {fmt(alone['floor'])} us, "
        f"{fmt(compute_gap)} us apart ("
        + (f"{compute_gap / p50_gap:.0%} of the p50 difference; " if p50_gap else "")
        + "the two come from different runs). Served, our `execute` of one request took "
        f"{fmt(alone['ours'])} us; in-process (section 2's counters run) one `execute` of "
        f"{COUNTER_REQUESTS} requests took {fmt(over.us_per_batch)} us.",
        "",
        f"At concurrency {CPU_CONCURRENCY} the load generator, tritonserver and the model's stub "
        f"process used {fmt(ours.total)} us of CPU per request with ours and {fmt(floor.total)} "
        f"with the floor: {ours.cores:.2f} and {floor.cores:.2f} CPU-seconds per second"
        f"{cores}, the load generator {ours.client / ours.total:.0%} and "
        f"{floor.client / floor.total:.0%} of it. " + limit + "The floor needed "
        f"{over.cpu_ratio:.2f} of our CPU per request and ours reached "
        f"{over.throughput_ratio:.2f} of its throughput"
        + (
            ": throughput followed the total CPU per request. "
            if over.follows_cpu
            else ": throughput did not follow the total CPU per request. "
        )
        + f"The model's stub process used {fmt(ours.stub)} against {fmt(floor.stub)} us per "
        "request"
        + (
            ""
            if over.stub_share is None
            else f", {over.stub_share:.0%} of the difference in CPU per request"
        )
        + ". Ours runs every execution "
        "through the emulated device: pyACL calls through the emulator's checking layer, copies "
        "to and from emulated device memory, onnxruntime (its queued stream work runs lazily, "
        "in the thread that synchronizes, when no timing model is set). Of the in-process "
        f"`execute` of {COUNTER_REQUESTS} requests ({fmt(over.us_per_batch)} us), "
        f"{over.acl_share:.0%} was inside those emulated pyACL calls; the rest is our Python "
        "(validation, staging in the pinned buffers, responses): **host time outside pyACL "
        f"{fmt(over.host_us_per_request)} us per request**. The time inside pyACL is the "
        "emulator standing in for the NPU, paid once per execution; Triton's dynamic batcher "
        f"formed executions of {ours.per_execution:.2f} requests on average at concurrency "
        f"{CPU_CONCURRENCY} here. On an Ascend host the same calls go to the driver. Those "
        f"pyACL calls, the emulated device's work included, took {fmt(over.acl_us_per_batch)} "
        "us per execution, "
        + (
            f"below `pipeline_min_device_us` ({DEFAULT_PIPELINE_MIN_DEVICE_US} us): depth "
            f"{DEFAULT_PIPELINE_DEPTH} answers these executions inline."
            if over.inline
            else f"not below `pipeline_min_device_us` ({DEFAULT_PIPELINE_MIN_DEVICE_US} us)."
        ),
        "",
        "Raw results:",
        "",
        level_table(data["overhead"]["runs"]),
        "",
    ]


def naive_lines(data: dict[str, Any], naive: Target) -> list[Item]:
    counters = data["naive"]["counters"]
    return [
        "## 2. Against a naive model.py (sample style)",
        "",
        "`benchmarks/naive_model.py` drives pyACL (through the runtime's `load_acl`, so here "
        "the emulator) the way the Ascend samples and acllite do: for every request, one at a "
        "time, `acl.rt.malloc` for each input, the gear input and each output, data buffers and "
        "two datasets, `acl.rt.memcpy` in, `set_dynamic_batch_size`, `acl.mdl.execute`, each "
        "output copied back through `malloc_host` + `ptr_to_bytes`, then everything freed. Same "
        f"`.om`, same config.pbtxt as `ours`. Emulator device timing `{DEVICE_TIMING}` "
        f"({timing_words(DEVICE_TIMING)}).",
        "",
        f"Throughput ratio ours / naive at concurrency {analysis.NAIVE_LEVEL}: "
        f"**{naive.value:.1f}x**.",
        "",
        "![ours and the naive model.py](benchmarks/results/naive.png)",
        "",
        f"Steady-state emulator counters per batch of {COUNTER_REQUESTS} one-row requests (the "
        f"model's `execute` called in-process with the same {COUNTER_REQUESTS} requests, "
        f"{COUNTER_BATCHES} times after 20 warm-up calls, `benchmarks/inprocess.py counters`; no "
        "device timing):",
        "",
        Table(
            [f"per batch of {COUNTER_REQUESTS} requests", "ours", "naive"],
            [
                *(
                    [
                        text,
                        fmt(counters["ours"]["per_batch"][key], 1),
                        fmt(counters["naive"]["per_batch"][key], 1),
                    ]
                    for key, text in COUNTER_ROWS
                ),
                [
                    "wall time of `execute` (us)",
                    fmt(counters["ours"]["us_per_batch"]),
                    fmt(counters["naive"]["us_per_batch"]),
                ],
                [
                    "share of it inside (emulated) pyACL calls",
                    f"{counters['ours']['acl_share']:.0%}",
                    f"{counters['naive']['acl_share']:.0%}",
                ],
            ],
        ),
        "",
        "Raw results:",
        "",
        level_table(data["naive"]["runs"]),
        "",
    ]


def efficiency_lines(data: dict[str, Any], eff: analysis.Efficiency) -> list[Item]:
    sooner = eff.execute_ms < eff.local_ms
    return [
        "## 3. Serving efficiency on a compute-heavy model",
        "",
        "The ResNet-style classifier of `examples/image_classifier` (input FP32[N, 3, 224, 224], "
        "gears 1, 2, 4, 8). Through Triton: requests of "
        f"{CLASSIFIER_BATCH} images at concurrency 2 (one executing, one waiting: the instance "
        f"never idles; {CLASSIFIER_BATCH}-image requests cannot be merged, so every execution is "
        f"batch {CLASSIFIER_BATCH}). In-process: `Session.infer` on {CLASSIFIER_BATCH} images "
        "in a loop (`benchmarks/inprocess.py session`). Both run onnxruntime with one thread.",
        "",
        f"Served / in-process: **{eff.ratio.value:.3f}** (median of the rounds; median "
        f"throughputs {eff.served:.1f} served and {eff.local:.1f} in-process images/s).",
        "",
        "Where the time went, from Triton's statistics of the run: `model.py`'s `execute` of a "
        f"batch of {CLASSIFIER_BATCH} took {eff.execute_ms:.1f} ms per call on average, one "
        f"`Session.infer` in-process {eff.local_ms:.1f} ms: "
        + (
            "less than a whole inference in-process (at pipeline depth 2 executions longer "
            "than `pipeline_min_device_us` are pipelined: `execute` stages and launches a "
            "batch and returns once the lane for the next one is free)"
            if sooner
            else "no less than a whole inference in-process"
        )
        + f". Triton spent {eff.input_ms:.1f} ms per request on its input handling before "
        "handing it to the model. Both paths make the same copies (the request into the pinned "
        "buffer, then the emulated device copy); served, onnxruntime shares the machine's cores "
        f"with the load generator and tritonserver, which move {eff.megabytes:.1f} MB per "
        "request.",
        "",
        Table(
            [
                "round",
                "in-process images/s",
                "served images/s",
                "ratio",
                "served p50 ms",
                "served p99 ms",
            ],
            [
                [
                    str(n),
                    fmt(lo["rows_per_s"], 1),
                    fmt(se["rows_per_s"], 1),
                    f"{se['rows_per_s'] / lo['rows_per_s']:.2f}",
                    fmt(se["p50_ms"], 1),
                    fmt(se["p99_ms"], 1),
                ]
                for n, (lo, se) in enumerate(
                    zip(data["efficiency"]["local"], data["efficiency"]["served"]), 1
                )
            ],
        ),
        "",
    ]


def scaling_lines(data: dict[str, Any]) -> list[Item]:
    scale = data["scaling"]
    rounds = {len(r) for r in scale["runs"].values()}
    return [
        "## 4. Scaling with instances and dynamic batching",
        "",
        "`ours` on the small model with the device timing of section 2, scaffolded with 1 or 2 "
        "instances (`device_ids` 0,1: each instance drives its own emulated NPU; two instances "
        "on one device would share it, section 8) and with dynamic batching on (the scaffold "
        "default) or off. "
        + ("One round each." if rounds == {1} else f"{span(list(rounds), 0)} rounds each."),
        "",
        "![scaling with instances and batching](benchmarks/results/scaling.png)",
        "",
        Table(
            ["variant", *(f"req/s at {c}" for c in scale["levels"])],
            [
                [label(data, name), *(fmt(e["throughput_rps"]) for e in runs[0])]
                for name, runs in scale["runs"].items()
            ],
        ),
        "",
        "Raw results:",
        "",
        level_table(scale["runs"]),
        "",
    ]


def timeline_words(name: str, line: analysis.Timeline) -> str:
    pairs, lanes = line.batches - 1, line.batches - 2
    return (
        f"{name}: {line.end_ms:.1f} ms; the next batch copied in while one executed "
        f"{line.copy_in_during_execute} of {pairs} times, the previous one copied out while one "
        f"executed {line.copy_out_during_execute} of {pairs} times, batch k+2 copied in only "
        f"after batch k was copied out {line.waited_for_lane} of {lanes} times"
    )


def pipeline_lines(
    data: dict[str, Any], pipe: analysis.Pipeline, sat: analysis.Saturation | None
) -> list[Item]:
    raw = data["pipeline"]
    copy_share = pipe.copy_ms / pipe.execute_ms
    if sat is None:
        busier = ""
    else:
        one, two = (span(sat.busy_at_depth(d, data["saturation"]["variants"])) for d in (1, 2))
        deeper = min(sat.busy_at_depth(2, data["saturation"]["variants"])) > max(
            sat.busy_at_depth(1, data["saturation"]["variants"])
        )
        busier = (
            f" (section 6: under the profile's short copies depth 2 kept the device busy {two} "
            f"of the time at {sat.top} clients, depth 1 {one})"
            if deeper
            else f" (section 6: under the profile's short copies depth 2 did not keep the "
            f"device busier than depth 1 at {sat.top} clients: {two} against {one})"
        )
    return [
        "## 5. Pipeline depth 1 vs 2",
        "",
        "The small model scaffolded twice on one server, `depth1` (`--pipeline-depth 1`) and "
        "`depth2` (`--pipeline-depth 2`: two lanes, each its own loaded model, stream and "
        f"buffers), measured in alternating rounds. Emulator device timing `{raw['timing']}`: "
        f"a {analysis.PIPELINE_LEVEL}-row batch copies for {pipe.copy_ms:.1f} ms in and "
        f"{pipe.copy_ms:.1f} ms out and executes for {pipe.execute_ms:.1f} ms, each copy "
        f"{copy_share:.2f} times as long as execution (three engines per device: copy in, "
        f"execute, copy out). The small model moves {WIDTH * 4} bytes per row each way; the slow "
        "link stands for a fast link with a large model without loading the host with "
        "megabytes of gRPC payload.",
        "",
        Table(
            COMPARISON_COLUMNS,
            [
                summary_row(
                    f"throughput depth 2 / depth 1 at concurrency {analysis.PIPELINE_LEVEL}",
                    pipe.throughput,
                    2,
                    unit="x",
                ),
                summary_row("p50 latency depth 2 / depth 1 at concurrency 1", pipe.latency, 3),
            ],
        ),
        "",
        f"Median p50 at concurrency 1: depth 1 {pipe.p50_ms[1]:.2f} ms, depth 2 "
        f"{pipe.p50_ms[2]:.2f} ms.",
        "",
        "Commands (section-only re-run: `python benchmarks/run.py --only pipeline`):",
        "",
        "```",
        *raw["commands"],
        "```",
        "",
        "![throughput and p99, depth 1 vs 2](benchmarks/results/pipeline.png)",
        "",
        f"Stream timeline: {next(iter(pipe.timelines.values())).batches} batches of "
        f"{analysis.PIPELINE_LEVEL} rows "
        "submitted back to back through a `Session` in one process (`Session.infer` at depth 1, "
        "`Session.infer_async` then `result()` at depth 2), with the emulator's engine trace "
        "(`ge_python_backend.emulator.timing.start_trace`) recording when each engine was "
        "busy; the number on a bar is the batch. At depth 2 a batch waits for its lane (the "
        "copy out of the batch two before it): that wait is the backpressure. "
        + "; ".join(timeline_words(name, line) for name, line in pipe.timelines.items())
        + ".",
        "",
        "![stream timeline, depth 1 vs 2](benchmarks/results/pipeline-timeline.png)",
        "",
        f"Scaffold's default is depth {DEFAULT_PIPELINE_DEPTH}{busier}. Depth 2 loads the `.om` "
        "twice (twice the device memory); choose `--pipeline-depth 1` where device memory is "
        "short.",
        "",
        "Raw results:",
        "",
        level_table(raw["runs"]),
        "",
    ]


def saturation_reading(data: dict[str, Any], sat: analysis.Saturation) -> str:
    """What section 6 measured, in words, from its medians."""
    variants = data["saturation"]["variants"]
    top, middle, delay, table = sat.top, sat.middle, sat.delay, sat.table
    depth1 = sat.busy_at_depth(1, variants)
    lowest = min(SATURATION_DELAYS_US)
    low, chosen = table[f"depth2_delay{lowest}"][middle], table[f"depth2_delay{delay}"][middle]
    fills = sat.rows_per_execution_at_top()
    steady = max(depth1) - min(depth1) <= analysis.SAME_BUSY
    gained = chosen["rows_per_s"] > low["rows_per_s"]
    return (
        f"With scaffold's defaults (pipeline depth {sat.depth}, max_queue_delay_us {delay}) the "
        f"device executed {sat.busy.value:.3f} of the time at {top} clients (median of the "
        f"rounds; target {sat.busy.target:.2f}, floor {sat.busy.floor:.2f}: "
        f"{sat.busy.verdict}). At depth 1 it was busy {span(depth1)} "
        + ("whatever the queue delay" if steady else "depending on the queue delay")
        + " (depth 1 executes, takes the outputs, answers Triton and stages the next batch one "
        "after the other); depth 2, which launches the next batch while one executes: "
        f"{span(sat.busy_at_depth(2, variants))}. At {middle} clients and depth 2, {lowest} us "
        f"of queue delay gave {fmt(low['rows_per_s'])} rows/s in executions of "
        f"{low['rows_per_execution']:.1f} rows, {delay} us gave {fmt(chosen['rows_per_s'])} "
        f"rows/s in executions of {chosen['rows_per_execution']:.1f} rows"
        + (
            " (the batcher waits for the next requests instead of sending one alone)"
            if gained and chosen["rows_per_execution"] > low["rows_per_execution"]
            else ""
        )
        + f"; at {top} clients executions held {span(fills, 1)} rows at every delay (largest "
        f"gear {analysis.largest_gear()}). p50 at one client: "
        f"{table[f'depth1_delay{delay}'][1]['p50_ms']:.2f} ms at depth 1, "
        f"{table[f'depth2_delay{delay}'][1]['p50_ms']:.2f} ms at depth 2."
    )


def saturation_lines(data: dict[str, Any], sat: analysis.Saturation) -> list[Item]:
    raw = data["saturation"]
    table, top = sat.table, sat.top
    timing = parse_timing(raw["timing"])
    gear = analysis.largest_gear()
    window = FLUSH_INTERVAL_S / data["plan"]["seconds"]
    variants = Table(
        [
            "model",
            "pipeline depth",
            "max_queue_delay_us",
            f"rows/s at {top}",
            "share of the limit",
            "busy (model)",
            "busy (events)",
            "rows per execution",
            "p50 ms at 1",
            f"p50 ms at {top}",
            f"p99 ms at {top}",
        ],
        [
            [
                model,
                str(depth),
                str(delay),
                fmt(table[model][top]["rows_per_s"]),
                f"{table[model][top]['limit']:.3f}",
                f"{table[model][top]['model']:.3f}",
                f"{table[model][top]['events']:.3f}",
                f"{table[model][top]['rows_per_execution']:.1f}",
                f"{table[model][1]['p50_ms']:.2f}",
                f"{table[model][top]['p50_ms']:.2f}",
                f"{table[model][top]['p99_ms']:.2f}",
            ]
            for model, (depth, delay) in raw["variants"].items()
        ],
    )
    lines: list[Item] = [
        "## 6. Keeping the device busy: the defaults",
        "",
        f"The small model (gears {SMALL_GEARS}, one instance) under the emulator profile "
        f"`GE_EMULATOR_TIMING={raw['timing']}` (= `execute_us={timing.execute_us:g},"
        f"execute_us_per_row={timing.execute_us_per_row:g},copy_gbps={timing.copy_gbps:g}`: "
        "ResNet-50 fp16 on an Atlas 300I Pro, see Device profiles below), driven by "
        f"{top} gRPC clients of {SATURATION_ROWS}-row requests (small inputs, "
        f"{SATURATION_ROWS * WIDTH * 4} bytes, chosen so that the host can feed the device). The "
        f"device limit is its largest gear back to back: {gear} rows every "
        f"{timing.execute_seconds(gear) * 1e3:.2f} ms = **{analysis.device_limit():,.0f} "
        "rows/s**. Scaffolded once with scaffold's defaults (`defaults`) and at pipeline depth "
        "1 and 2 with each dynamic-batching `max_queue_delay_us`, all on one server, in "
        f"{len(raw['runs']['defaults'])} alternating rounds; medians over the rounds. "
        "`ge-python-model bench --metrics-url` read the model's device counters before and "
        "after each level.",
        "",
        "Device busy is given three ways: *events*, what `ge_device_busy_seconds_total` gained "
        "over the level's seconds (what `bench --metrics-url` prints and `rate()` shows an "
        "operator); *model*, the timing model's execution time per row for the executions and "
        "rows (padding included) the counters saw, "
        f"`({timing.execute_us:g} x executions + {timing.execute_us_per_row:g} x rows) us`, "
        "times the rows/s the clients got: how long the emulated device executed per second; "
        "and *share of the limit*, rows/s over the device limit. The model's execution enters "
        f"the metrics at most every {FLUSH_INTERVAL_S * 1e3:g} ms (they are flushed "
        "from `execute`), so the events' window is off by up to that at each end (about "
        f"{window:.0%} of a {data['plan']['seconds']:g} s level either way); the model figure "
        "takes only ratios from the counters. The emulator runs its work in device "
        "time (work starts when the device could start it, however late its thread wakes on "
        "this loaded host), and at depth 2 a lane's execution waits on its stream "
        "(`stream_wait_event`) for the other lane's to leave the device, so the lanes' "
        "execution times never overlap and are not counted twice.",
        "",
        variants,
        "",
        saturation_reading(data, sat),
        "",
        "Per concurrency (medians over the rounds):",
        "",
        Table(
            ["model", "concurrency", "rows/s"]
            + ["busy (model)", "busy (events)", "p50 ms", "p99 ms"],
            [
                [
                    model,
                    str(level),
                    fmt(row["rows_per_s"]),
                    f"{row['model']:.3f}",
                    f"{row['events']:.3f}",
                    f"{row['p50_ms']:.2f}",
                    f"{row['p99_ms']:.2f}",
                ]
                for model, levels in table.items()
                for level, row in levels.items()
            ],
        ),
        "",
        "Commands (section-only re-run: `python benchmarks/run.py --only saturation`):",
        "",
        "```",
        f"GE_EMULATOR_TIMING={raw['timing']} ge-python-model serve WORK/saturation",
        *raw["commands"],
        "```",
        "",
        "Raw results:",
        "",
        level_table(raw["runs"]),
        "",
    ]
    return lines


def expert_reading(exp: analysis.Expert) -> str:
    """What section 7 measured, in words, from its medians."""
    copy_level, top = analysis.PIPELINE_LEVELS[-1], analysis.SATURATION_LEVELS[-1]
    ours, theirs = (exp.table["copy_bound"][m][copy_level]["rows_per_s"] for m in EXPERT_MODELS)
    resnet = exp.table["resnet50"]
    gap, slower = exp.p50_gap_us, exp.slower
    serial, limit = analysis.serial_limit(), analysis.device_limit()
    verdict = (
        "Ours was at least as fast as the hand-written model.py in every setting measured."
        if not slower
        else "The hand-written model.py was faster in: "
        + "; ".join(
            f"{EXPERT_SETTING_WORDS[setting]} at concurrency {level} (ours "
            f"{exp.ratios[setting, level].value:.2f} of it)"
            for setting, level in slower
        )
        + "."
    )
    return (
        f"{verdict} At one client without a timing model the median p50 was "
        f"{exp.table['plain']['ours'][1]['p50_ms']:.2f} ms for ours and "
        f"{exp.table['plain']['expert'][1]['p50_ms']:.2f} ms for the hand-written model.py: "
        + (
            f"ours answered {fmt(-gap)} us sooner. "
            if gap < 0
            else f"ours answered {fmt(gap)} us later. "
            if gap > 0
            else "the same. "
        )
        + f"Copy-bound at concurrency {copy_level}, a model.py that copies a full "
        f"{analysis.largest_gear()}-row batch in, executes it and copies it out one after the "
        f"other can reach at most {fmt(serial)} rows/s, one whose copies and executions "
        f"overlap {fmt(analysis.pipelined_limit())} rows/s (its slowest engine): the "
        f"hand-written model.py reached {fmt(theirs)} rows/s ({theirs / serial:.0%} of the "
        f"serial limit), ours {fmt(ours)} ({ours / serial:.0%} of it"
        + (", beyond it: its copies and executions overlapped" if ours > serial else "")
        + f"). Under the ResNet-50 profile at {top} clients the device limit is "
        f"{fmt(limit)} rows/s; ours reached {resnet['ours'][top]['rows_per_s'] / limit:.0%} of "
        f"it, the hand-written model.py {resnet['expert'][top]['rows_per_s'] / limit:.0%}."
    )


def clients(level: int) -> str:
    return "one client" if level == 1 else f"{level} clients"


def expert_cpu_reading(exp: analysis.Expert) -> str:
    """What the CPU witness says about the throughput gap without a timing model, and how much
    its ratios moved over the rounds against the throughput ratio of the same runs."""
    words = []
    for level, cpu in exp.cpu.items():
        gap = cpu.stub_gap_us
        words.append(
            f"At {clients(level)} ours' stub process needed {fmt(abs(gap))} us "
            f"{'less' if gap < 0 else 'more'} CPU per request than the expert's: by stub CPU "
            f"per request ours is {cpu.by_stub:.2f} of the expert, by "
            f"`compute_infer` {cpu.by_compute_infer:.2f}; by throughput "
            f"{cpu.by_throughput:.2f} in the same runs and "
            f"{exp.ratios['plain', level].value:.2f} in the throughput rounds above."
        )
    witnesses = list(exp.cpu.values())
    if len(witnesses[0].stub_ratio) < 2:
        return " ".join(words) + " One round: how much the ratios move was not measured."
    words.append(
        "Over the rounds ((max - min) / median) the ratios spread by: "
        + "; ".join(
            f"at {clients(level)} stub CPU {analysis.spread(cpu.stub_ratio):.0%}, "
            f"`compute_infer` {analysis.spread(cpu.compute_ratio):.0%}, throughput of the same "
            f"runs {analysis.spread(cpu.throughput_ratio):.0%}, throughput rounds above "
            f"{analysis.spread(exp.ratios['plain', level].rounds):.0%}"
            for level, cpu in exp.cpu.items()
        )
        + "."
    )
    steadier = [level for level, cpu in exp.cpu.items() if cpu.stub_steadier]
    if len(steadier) == len(witnesses):
        words.append(
            "The stub's CPU time was the steadier witness: it does not count the time the "
            "process waits while the VM's other tenants run, which throughput and "
            "`compute_infer` (wall time) do."
        )
    else:
        words.append(
            f"The stub's CPU ratio spread less than {analysis.STEADIER:.0%} of what the throughput "
            "of the same runs did "
            + (
                "only at " + " and ".join(clients(level) for level in steadier) + "."
                if steadier
                else "at no level: in this run it was not the steadier witness."
            )
        )
    return " ".join(words)


def expert_cpu_lines(exp: analysis.Expert) -> list[Item]:
    """Section 7's CPU witness (nothing for runs saved before it was measured)."""
    if not exp.cpu:
        return []
    rounds = len(next(iter(exp.cpu.values())).stub_ratio)
    return [
        "",
        "CPU per request without a timing model: after the throughput rounds, on the same "
        "server, section 1's CPU run of each model at concurrency "
        + " and ".join(map(str, exp.cpu))
        + f", the models alternating, {rounds} round{'s' if rounds > 1 else ''} (medians over "
        "the rounds, microseconds per request; the stub's figure is the CPU time of the model's "
        "stub process, `compute_infer` Triton's wall time of the model's `execute` call):",
        "",
        Table(
            [
                "concurrency",
                "ours stub CPU",
                "expert stub CPU",
                "ours compute_infer",
                "expert compute_infer",
            ],
            [
                [
                    str(level),
                    fmt(cpu.stub["ours"]),
                    fmt(cpu.stub["expert"]),
                    fmt(cpu.compute_infer["ours"]),
                    fmt(cpu.compute_infer["expert"]),
                ]
                for level, cpu in exp.cpu.items()
            ],
        ),
        "",
        expert_cpu_reading(exp),
    ]


def expert_setting_words(name: str, setting: dict[str, Any]) -> str:
    """`copy-bound (section 5's timing) (GE_EMULATOR_TIMING=..., 1-row requests, 5 rounds of
    3 s)`; the seconds are those the first round measured, rounded."""
    timing = f"`GE_EMULATOR_TIMING={setting['timing']}`, " if setting["timing"] else ""
    runs = setting["runs"][EXPERT_MODELS[0]]
    rounds = len(runs)
    seconds = f" of {float(runs[0][0]['seconds']):.1f} s" if "seconds" in runs[0][0] else ""
    return (
        f"{EXPERT_SETTING_WORDS[name]} ({timing}{setting['rows']}-row requests, {rounds} "
        f"round{'s' if rounds > 1 else ''}{seconds})"
    )


def expert_lines(data: dict[str, Any], exp: analysis.Expert) -> list[Item]:
    raw = data["expert"]
    settings = raw["settings"]
    lines = [
        "## 7. Against a hand-written pyACL model.py",
        "",
        "`benchmarks/expert_model.py` is the model.py a skilled engineer writes directly against "
        "pyACL (following the calling patterns of the Ascend samples' acllite and ModelZoo's "
        "`acl_net.py`, cited in its docstring), importing `acl` and nothing of ours: device "
        "buffers, page-locked host buffers and both datasets made once at initialize; each "
        "batch of requests from Triton concatenated into the smallest gear that holds it "
        "(padding rows zeroed) in the page-locked input buffer; one `memcpy_async` in, "
        "`set_dynamic_batch_size`, `execute_async`, one `memcpy_async` out of the real rows, "
        "all on one stream, then one `synchronize_stream`; the outputs split per request. "
        "`ours` is scaffold's defaults; `expert` the same model directory and config.pbtxt with "
        "that model.py (`GE_PYTHON_BACKEND_ACL=emulator` makes its `acl` the emulator). Before "
        f"measuring, both answered {len(ANSWER_ROWS)} requests of "
        f"{', '.join(map(str, ANSWER_ROWS))} rows sent at once (Triton batches them) with "
        "exactly `2x + 1` of their own rows. Each setting had its own server, both models on "
        "it, in alternating rounds: "
        + "; ".join(expert_setting_words(name, setting) for name, setting in settings.items())
        + ".",
        "",
        expert_reading(exp),
        "",
        Table(
            [
                "setting",
                "concurrency",
                "ours rows/s",
                "expert rows/s",
                "ours p50 ms",
                "expert p50 ms",
                "ours p99 ms",
                "expert p99 ms",
            ],
            [
                [
                    EXPERT_SETTING_WORDS[setting],
                    str(level),
                    fmt(models["ours"][level]["rows_per_s"]),
                    fmt(models["expert"][level]["rows_per_s"]),
                    f"{models['ours'][level]['p50_ms']:.2f}",
                    f"{models['expert'][level]['p50_ms']:.2f}",
                    f"{models['ours'][level]['p99_ms']:.2f}",
                    f"{models['expert'][level]['p99_ms']:.2f}",
                ]
                for setting, models in exp.table.items()
                for level in settings[setting]["levels"]
            ],
        ),
        *expert_cpu_lines(exp),
        "",
        *(
            f"![ours and the hand-written model.py, {EXPERT_SETTING_WORDS[setting]}]"
            f"(benchmarks/results/expert-{setting}.png)"
            for setting in settings
        ),
        "",
        "Commands (section-only re-run: `python benchmarks/run.py --only expert`):",
        "",
        "```",
        *raw["commands"],
        "```",
        "",
        "Raw results:",
        "",
        level_table(
            {
                f"{model} ({EXPERT_SETTING_WORDS[setting]})": rounds
                for setting, values in settings.items()
                for model, rounds in values["runs"].items()
            }
        ),
        "",
    ]
    return lines


def tune_config_words(config: dict[str, Any]) -> str:
    """A trial's config as tune's progress line says it, from its tune.json fields."""
    depth = f"depth {config['pipeline_depth']}"
    if config["pipeline_depth"] > 1:
        depth += f" (min {config['pipeline_min_device_us']} us)"
    preferred = ",".join(map(str, config["preferred_batch_size"])) or "none"
    instances = config["instances"]
    return (
        f"{instances} instance{'s' * (instances > 1)}, {depth}, delay "
        f"{config['max_queue_delay_microseconds']} us, preferred {preferred}"
    )


def tune_changes(level: analysis.TuneLevel) -> str:
    """`max_queue_delay_microseconds 100 -> 1000; preferred_batch_size [1, 2] -> [2]`."""
    if level.winner is None:
        return "no winner"
    if not level.changed:
        return "none (the defaults won)"
    return "; ".join(f"{key} {old} -> {new}" for key, (old, new) in level.changed.items())


def confirmation_words(level: analysis.TuneLevel) -> str:
    """What tune's own confirmation rounds showed at one load, in words."""
    confirmation = level.confirmation
    if confirmation is None:
        return ""
    if not confirmation.rounds:
        return f" tune itself confirmed nothing ({confirmation.verdict})."
    text = (
        f" tune's own confirmation ({confirmation.rounds} alternating "
        f"round{'s' * (confirmation.rounds != 1)} of "
        f"{confirmation.finalists} finalists, the defaults among them) "
    )
    kept = level.winner is not None and not level.changed
    if confirmation.gain is None or confirmation.compared is None:
        return text + ("kept the defaults." if kept else f"found: {confirmation.verdict}.")
    figures = (
        f"trial {confirmation.compared + 1} at {confirmation.gain:.2f}x the defaults' rows/s "
        f"(per round {each(confirmation.ratios)})"
    )
    if kept:
        return text + f"kept the defaults: the best other finalist was {figures}."
    if level.winner is None:
        return text + f"found no winner ({confirmation.verdict}); the best other was {figures}."
    return text + f"chose {figures}."


def tune_level_words(level: analysis.TuneLevel, rows: int) -> str:
    """What tune found at one load, what its confirmation and re-measuring it by `bench`
    showed, in words."""
    return tune_search_words(level, rows) + lone_words(level) + confirmation_words(level)


def lone_words(level: analysis.TuneLevel) -> str:
    """What the winner costs a lone client of 1-row requests, against the defaults."""
    lone = level.lone
    if lone is None:
        return ""
    return (
        f" At one client of 1-row requests the same winner gave {lone.gain:.2f}x the defaults' "
        f"rows/s (per round {each(lone.ratios)}) at p50 {lone.p50_ms[1]:.2f} ms against "
        f"{lone.p50_ms[0]:.2f} ms"
        + (
            ": what a config tuned for this load costs a lone request."
            if level.costs_lone_client
            else "."
        )
    )


def tune_search_words(level: analysis.TuneLevel, rows: int) -> str:
    """What tune's trials found at one load and what `bench` re-measuring the winner showed."""
    default, winner, again = level.default, level.winner, level.remeasured
    text = (
        f"At {level.clients} clients scaffold's defaults gave {fmt(default['rows_per_s'])} "
        f"rows/s at p99 {fmt(default['p99_ms'], 2)} ms in tune's first trial ("
        + ("within" if level.default_meets else "over")
        + f" the {level.p99_ms:g} ms budget; Little's law puts the least mean latency at the "
        f"device limit at {analysis.little_bound_ms(level.clients, rows):.1f} ms)"
    )
    if winner is None:
        confirmation = level.confirmation
        if confirmation is not None and confirmation.rounds:
            return text + "; no finalist kept the budget in every round of tune's confirmation."
        return text + f"; none of the {level.trials} trials met the budget."
    if not level.changed or again is None:
        return text + f"; no other of the {level.trials} trials beat them."
    won = (
        f"; the winner ({tune_config_words(winner['config'])}) gave "
        f"{fmt(winner['rows_per_s'])} rows/s at p99 {fmt(winner['p99_ms'], 2)} ms there. "
        f"Re-measured side by side in {len(again.ratios)} alternating rounds, the winner gave "
        f"{again.gain:.2f}x the defaults' rows/s (per round {each(again.ratios)}; "
        f"{fmt(again.rows_per_s[1])} against {fmt(again.rows_per_s[0])}) at p99 "
        f"{again.p99_ms[1]:.2f} ms against {again.p99_ms[0]:.2f} ms: "
    )
    if again.p99_ms[1] > level.p99_ms:
        return text + won + "it missed the budget, so it is no evidence against the defaults."
    if again.p99_ms[0] > level.p99_ms:
        return text + won + "it kept the budget the defaults missed."
    return (
        text
        + won
        + (
            f"more than the {analysis.TUNE_SAME:.0%} the report counts as noise."
            if level.beats_defaults
            else f"within the {analysis.TUNE_SAME:.0%} the report counts as noise: no evidence "
            "against the defaults."
        )
    )


def tune_reading(levels: list[analysis.TuneLevel]) -> str:
    """Whether the evidence moves scaffold's defaults, from every level."""
    better = [level for level in levels if level.beats_defaults]
    if not better:
        return (
            "At no load did a tuned config, re-measured, beat scaffold's defaults by more than "
            "the noise, so this run is no evidence to change them."
        )
    fields = sorted({key for level in better for key in level.changed})
    common = [key for key in fields if all(key in level.changed for level in better)]
    return (
        "Re-measured, a tuned config beat the defaults by more than the noise at "
        + ", ".join(f"{level.clients}" for level in better)
        + " clients, changing "
        + (
            ", ".join(common) + " every time"
            if common
            else "no field in common (each load wanted another change)"
        )
        + (
            "; at the other loads the defaults held."
            if len(better) < len(levels)
            else "; at every load measured."
        )
        + lone_reading(better)
    )


def lone_reading(better: list[analysis.TuneLevel]) -> str:
    """Whether the winners that beat the defaults cost a lone client more than the noise."""
    costly = [level for level in better if level.costs_lone_client]
    if not costly:
        return ""
    return (
        " Those winners are load-specific, not defaults: at one client of 1-row requests "
        + ", ".join(
            f"the {level.clients}-client winner gave {level.lone.gain:.2f}x the defaults' rows/s"
            for level in costly
            if level.lone
        )
        + " (tune finds them per deployment)."
    )


def tune_row(level: analysis.TuneLevel, budget_s: float) -> list[str]:
    default, winner, again = level.default, level.winner or {}, level.remeasured
    return [
        str(level.clients),
        fmt(default["rows_per_s"]),
        fmt(default["p99_ms"], 2),
        fmt(winner.get("rows_per_s")),
        fmt(winner.get("p99_ms"), 2),
        tune_changes(level),
        f"{level.trials} ({level.skipped})",
        f"{level.elapsed_s:.0f} of {budget_s:g}",
        "-" if again is None else f"{again.gain:.2f}",
        "-" if again is None else f"{again.p99_ms[0]:.2f}, {again.p99_ms[1]:.2f}",
    ]


def tune_lines(data: dict[str, Any], levels: list[analysis.TuneLevel]) -> list[Item]:
    raw = data["tune"]
    lines = [
        "## 8. Scaffold's defaults against `tune`",
        "",
        f"The small model (gears {SMALL_GEARS}) scaffolded with scaffold's defaults, served by "
        f"one Triton in explicit model-control mode under `GE_EMULATOR_TIMING={raw['timing']}`, "
        "tuned live by `ge-python-model tune` (docs/guides/tune.md) at each load: closed loop, "
        f"{', '.join(str(level.clients) for level in levels)} clients of {raw['rows']}-row "
        f"requests, p99 budget {raw['p99_ms']:g} ms, `--budget-s {raw['budget_s']:g}`, "
        f"`--max-instances {raw['max_instances']}` (instances on one device share the emulated "
        "device, as on an NPU). The first trial is scaffold's defaults as served; each trial "
        "is one short window (half a round's seconds)"
        + (
            "; after the search tune re-measures its finalists (the defaults and the best "
            "candidates within the budget) in alternating rounds and keeps the defaults unless "
            "a candidate beat them in every round (docs/guides/tune.md#confirmation)"
            if any(level.confirmation is not None for level in levels)
            else ""
        )
        + ". Then the winner was written into a copy of the model (`tune --apply`'s "
        "`apply_winner`), loaded beside it, and both were measured by `bench` in alternating "
        f"rounds at that load; a re-measured gain within {analysis.TUNE_SAME:.0%} counts as "
        "noise.",
        "",
        Table(
            [
                "clients",
                "defaults rows/s (tune)",
                "p99 ms",
                "winner rows/s (tune)",
                "p99 ms",
                "the winner's changes",
                "trials (skipped)",
                "seconds used",
                "re-measured winner / defaults",
                "p99 ms defaults, winner",
            ],
            [tune_row(level, raw["budget_s"]) for level in levels],
        ),
        "",
        *(tune_level_words(level, raw["rows"]) + "\n" for level in levels),
        tune_reading(levels),
        "",
        "Commands (section-only re-run: `python benchmarks/run.py --only tune`; each tune "
        "writes `tune.json`, `TUNE.md` and `tune.png` into its report folder):",
        "",
        "```",
        f"GE_EMULATOR_TIMING={raw['timing']} ge-python-model serve WORK/tune "
        "--model-control-mode explicit --load-model tuned",
        *raw["commands"],
        "```",
        "",
    ]
    return lines


def system_allocation_words(level: int, ratios: list[float]) -> str:
    """What the pooled / system throughput ratios of one level's rounds say."""
    median = sorted(ratios)[(len(ratios) - 1) // 2]
    if min(ratios) > 1:
        verdict = "the pooled buffers served more requests per second in every round"
    elif max(ratios) < 1:
        verdict = "system allocation served more requests per second in every round"
    else:
        verdict = "neither served more in every round"
    return (
        f"At {clients(level)}: pooled / system {median:.2f} (median of {each(ratios)}); {verdict}."
    )


def system_allocation_lines(data: dict[str, Any], alloc: analysis.SystemAllocation) -> list[Item]:
    raw = data["sysalloc"]
    rounds = {len(r) for r in raw["runs"].values()}
    return [
        "## 9. Data-dependent outputs: allocated by ACL or pooled (`max_output_bytes`)",
        "",
        "An NMS detector whose outputs (`selected` INT64[K,3], `picked` FP32[K,4]) have no "
        "upper bound (`get_output_size_by_index` 0), scaffolded twice on one server, no timing "
        "model (what differs is host work per execution), closed loop, alternating rounds "
        f"({span(list(rounds), 0)} of {data['plan']['seconds']:g} s): `system` without "
        "`max_output_bytes` (synchronous `acl.mdl.execute`; ACL allocates both outputs, each "
        "copied out with `acl.rt.memcpy` and freed with `acl.rt.free` every execution) and "
        f"`pooled` with `max_output_bytes: {raw['max_output_bytes']}` (buffers allocated once, "
        "copies and `execute_async` queued on the stream). Each request is one execution "
        "(`max_batch_size: 0`).",
        "",
        "![system allocation vs pooled buffers](benchmarks/results/sysalloc.png)",
        "",
        Table(
            ["variant", *(f"{what} at {c}" for c in alloc.levels for what in ("req/s", "p50 ms"))],
            [
                [
                    name,
                    *(
                        cell
                        for c in alloc.levels
                        for cell in (
                            fmt(analysis.median_at(rounds_, c, "throughput_rps")),
                            fmt(alloc.p50_ms[name][c], 2),
                        )
                    ),
                ]
                for name, rounds_ in raw["runs"].items()
            ],
        ),
        "",
        *(system_allocation_words(c, alloc.throughput[c]) + "\n" for c in alloc.levels),
        "Raw results:",
        "",
        level_table(raw["runs"]),
        "",
    ]


REFUSAL_SHOWN = 300  # characters of the first shared-device refusal the report shows
MANY_MODE_WORDS = {"in_stub": "in-stub (device_host off)", "device_host": "device host (on)"}


def mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


def many_models_words(modes: dict[str, analysis.ManyModels]) -> list[str]:
    """What each mode of the repository did, in words chosen by its figures."""
    lines = []
    for mode, m in modes.items():
        words = MANY_MODE_WORDS[mode]
        text = (
            f"{words[0].upper()}{words[1:]}: {m.ready} of {m.models} models READY after "
            f"{m.loaded_s:.0f} s, {m.answered} of them answering correctly, "
            f"{m.device_processes} process{'es' * (m.device_processes != 1)} holding device 0"
        )
        if m.refusals:
            shown = m.first_refusal[:REFUSAL_SHOWN] + "..." * (len(m.first_refusal) > REFUSAL_SHOWN)
            text += (
                f"; {m.refusals} instance{'s' * (m.refusals != 1)} refused with the "
                f"shared-device line, the first (up to {REFUSAL_SHOWN} characters): "
                f"`{shown}`"
            )
        lines.append(text + ".")
    stub, host = modes.get("in_stub"), modes.get("device_host")
    if stub is not None and host is not None:
        lines.append(
            (
                "With the device host the whole repository was served"
                if host.all_served
                else "Even with the device host not every model was served"
            )
            + f"; it used {host.device_bytes / max(stub.device_bytes, 1):.2f}x the device "
            f"memory and {host.pss_bytes / max(stub.pss_bytes, 1):.2f}x the host memory (PSS) "
            f"of in-stub serving, which served {stub.ready} models."
        )
    return lines


def hop_lines(figures: analysis.DeviceHost, rounds: int) -> list[str]:
    """What the hop itself costs, without Triton (`benchmarks/hop.py`), against the floor of
    any hop on this machine (a bare ping-pong), and what it leaves of pipelining."""
    hop_us, per_s = figures.hop_us, figures.hop_batches_per_s
    if not hop_us:
        return []
    local, same = hop_us["local"], hop_us["same_cpu"]
    words = (
        "The hop itself, without Triton (`benchmarks/hop.py`: one client on CPU 0 submitting one "
        f"row at a time and waiting for it, p50, median of {rounds} alternating rounds): the "
        f"session in the client's process took {fmt(local)} us, through a device host on the "
        f"client's own CPU {fmt(same)} us (+{fmt(same - local)} us: the messages, the copies "
        "through the memfd and the host's Python)"
    )
    if "other_cpu" in hop_us:
        other = hop_us["other_cpu"]
        words += (
            f", through a device host on the other CPU {fmt(other)} us (+{fmt(other - local)} "
            f"us): on this machine a request's two wake-ups of a process on another CPU cost "
            f"{fmt(other - same)} us of that"
        )
    lines = [words + ".", ""]
    if "local_evicted" in hop_us:
        evicted = hop_us["local_evicted"]
        lines += [
            f"What a second process costs the caches: the session in the client's process with "
            f"{HOP_EVICT_MIB} MiB read between its batches (outside the timing: a stand-in for "
            f"the other process's work on the CPU, which leaves each batch caches that hold "
            f"another process's data) took {fmt(evicted)} "
            f"us ({evicted - local:+,.0f} us), of the hop's +{fmt(same - local)} us without a "
            "message sent.",
            "",
        ]
    if "ping_same_cpu" in hop_us:
        floor = (
            "The floor of any hop here, a bare Unix-socket ping-pong of 64 bytes between two "
            f"processes (one message each way): {fmt(hop_us['ping_same_cpu'])} us on one CPU"
        )
        if "ping_other_cpu" in hop_us:
            ping, target = hop_us["ping_other_cpu"], analysis.DEVICE_HOST_P50_TARGET_US
            beside = (
                f"more than the +{fmt(target)} us the one-client target allows the whole hop"
                if ping > target
                else f"within the +{fmt(target)} us target"
            )
            floor += (
                f", {fmt(ping)} us across the two CPUs of this VM (each message wakes a process "
                f"on the other virtual CPU): {beside}"
            )
        lines += [floor + ".", ""]
    if "pipelined_remote" in per_s:
        lines += [
            "Pipelined (`--pipelined`: depth 2 as an instance pipelines long executions, one row "
            f"per batch, executions emulated at `{PIPELINED_TIMING}`): "
            f"{fmt(per_s['pipelined_remote'])} batches/s through a device host on the other CPU "
            f"against {fmt(per_s['pipelined_local'])} in the client's process "
            f"({per_s['pipelined_remote'] / per_s['pipelined_local']:.2f}x).",
            "",
        ]
    return lines


def device_host_lines(data: dict[str, Any]) -> list[Item]:
    lines: list[Item] = [
        "## 10. One device, many models: the device host",
        "",
    ]
    if "many_models" in data:
        raw = data["many_models"]
        modes = analysis.many_models(data)
        some = next(iter(modes.values()))
        lines += [
            f"A repository of {some.models} models (`benchmarks/scenarios.py` "
            "`build_many_models`, from the small builders of `tests/onnx_models.py`: "
            f"{MANY_PER_KIND} classifiers with batch gears 1, 2, 4, 8, {MANY_PER_KIND} sequence "
            f"models with dims gears S = 8, 16, 32, {MANY_PER_KIND} static MLPs; "
            f"{some.instances} instances each, {some.models * some.instances} Triton instances), "
            "scaffolded for one emulated Ascend310P3 device, served by the real tritonserver "
            "once per mode, each start on a host of its own (emulator ledger, placement "
            "records, device host socket). Measured when loading ended: processes holding "
            "device 0 and the device memory they hold (the emulator's ledger rows: each "
            "process's opening of the device, contexts, weights and work memory), host memory "
            "summed over tritonserver, its stubs and the device host (RSS counts shared pages "
            "once per process; PSS shares them out), then one request to each READY model, "
            f"checked against onnxruntime. Both modes took {raw['elapsed_s'] / 60:.1f} min "
            "(starts, checks and stops).",
            "",
            Table(
                [
                    "mode",
                    "models READY",
                    "answered correctly",
                    "processes on device 0",
                    "device memory used",
                    "host RSS",
                    "host PSS",
                    "stub processes",
                    "start to end of loading",
                    "shared-device refusals",
                ],
                [
                    [
                        MANY_MODE_WORDS[mode],
                        f"{m.ready} of {m.models}",
                        str(m.answered),
                        str(m.device_processes),
                        f"{mib(m.device_bytes)} of {mib(m.device_capacity)} ({m.device_share:.1%})",
                        mib(m.rss_bytes),
                        mib(m.pss_bytes),
                        str(m.stub_processes),
                        f"{m.loaded_s:.0f} s",
                        str(m.refusals),
                    ]
                    for mode, m in modes.items()
                ],
            ),
            "",
            *(line + "\n" for line in many_models_words(modes)),
        ]
    if "device_host" in data:
        raw = data["device_host"]
        figures = analysis.device_host(data)
        top = analysis.DEVICE_HOST_THROUGHPUT_LEVEL
        lines += [
            f"One model, the small `y = 2x + 1` (FP32[N, {WIDTH}], gears {SMALL_GEARS}), "
            "scaffolded twice on one server, no timing model, alternating rounds "
            f"({len(raw['runs']['stub'])} of {raw.get('seconds', data['plan']['seconds']):g} s): "
            "`stub` (its stub opens the device) and `host` (`device_host` on: its stub hands each "
            "batch to the device host through a memfd and a Unix socket); both checked for "
            "correct answers first.",
            "",
            Table(
                ["comparison", "median", *COMPARISON_COLUMNS[2:]],
                [
                    summary_row(
                        f"device host / in-stub, throughput at concurrency {top}",
                        figures.throughput,
                        3,
                        per_round=2,
                    ),
                    summary_row(
                        "device host - in-stub, p50 at concurrency 1",
                        figures.p50_delta_us,
                        0,
                        unit=" us",
                    ),
                ],
            ),
            "",
            f"At {top} clients the device host served {fmt(figures.throughput_rps['host'])} "
            f"requests/s against {fmt(figures.throughput_rps['stub'])} in-stub; at one client "
            f"its p50 was {fmt(figures.p50_us['host'])} us against "
            f"{fmt(figures.p50_us['stub'])} us.",
            "",
            *hop_lines(figures, len(raw.get("hop", {}).get("local", []))),
            "Raw results:",
            "",
            level_table(raw["runs"]),
            "",
        ]
    lines += ["Commands (section-only re-runs):", "", "```"]
    if "many_models" in data:
        lines.append("python benchmarks/run.py --only many_models")
    if "device_host" in data:
        lines += ["python benchmarks/run.py --only device_host", *data["device_host"]["commands"]]
    lines += ["```", ""]
    for name in ("many_models", "device_host"):
        if "machine" in data.get(name, {}):
            measured = dict(data[name]["machine"])
            lines.append(
                f"`--only {name}` was measured on {measured['date']} at commit "
                f"{measured['commit']} ({data[name]['section_elapsed_s'] / 60:.1f} min; Python "
                f"speed: {measured['Python speed']})."
            )
    return [*lines, ""]


def median(values: list[float]) -> float:
    return sorted(values)[(len(values) - 1) // 2]


def ratio_cell(ratios: list[float]) -> str:
    """`1.23 (1.20-1.25)`: the median of per-round ratios and their range."""
    return f"{median(ratios):.2f} ({span(ratios)})"


def jpeg_bytes_words(raw: dict[str, Any]) -> str:
    """What the bytes per request say, chosen by them."""
    jpeg, nv12 = raw["wire_in"]["jpeg"], raw["wire_in"]["raw"]
    fp32 = 3 * JPEG_SIDE * JPEG_SIDE * 4
    sizes = raw["file_bytes"]
    more = "more" if jpeg > nv12 else "fewer"
    return (
        f"Bytes: the {raw['files']} files are {sizes['min']:,} to {sizes['max']:,} bytes (median "
        f"{sizes['median']:,.0f}, mean {sizes['mean']:,.0f}); the server received "
        f"{jpeg:,.0f} bytes per JPEG request and {nv12:,.0f} per NV12 request "
        f"({raw['raw_row_bytes']:,} bytes of pixels): JPEG in moved {jpeg / nv12:.2f}x the "
        f"bytes of raw NV12 in ({more}), because a client sending raw rows has already decoded "
        f"and shrunk each picture to {JPEG_SIDE}x{JPEG_SIDE}. Against the FP32 tensor a model "
        f"without AIPP takes ({fp32:,} bytes per image) JPEG in moved {fp32 / jpeg:.1f}x fewer. "
        f"The closed-loop runs' file is {raw['bench_file']['bytes']:,} bytes."
    )


def jpeg_cpu_words(raw: dict[str, Any], figures: analysis.JpegInputs) -> str:
    """Server CPU per image, with the emulator's stand-ins for DVPP's work set apart."""
    jpeg, nv12 = median(figures.server_cpu_us["jpeg"]), median(figures.server_cpu_us["raw"])
    emulated = raw["host_work_us"]["bench_file"]["emulated_dvpp"]
    client = raw["host_work_us"]["bench_file"]["host_decode"]
    rest = jpeg - emulated
    return (
        f"Host CPU: the JPEG model's server processes used {jpeg:,.0f} us per image against "
        f"{nv12:,.0f} for raw rows ({median(figures.cpu_ratio):.2f}x). On the emulator the "
        "decode and resize run on the host, in the stub: the emulator's JPEGD and VPC "
        f"stand-ins (`_jpeg`, Pillow and NumPy) took {emulated:,.0f} us per decode and resize "
        "of the same file in the bench process, work DVPP does on an NPU; without it the JPEG "
        f"model's server CPU would be about {rest:,.0f} us per image ({rest / nv12:.2f}x raw's; "
        "an estimate: two measurements subtracted). A client sending raw rows spends about "
        f"{client:,.0f} us per file decoding and resizing it (Pillow, the same machine) before "
        "it sends."
    )


def jpeg_rate_words(raw: dict[str, Any], figures: analysis.JpegInputs) -> str:
    """Images/s, and what bounds them here."""
    bench = raw["bench_file"]
    channel, chip = parse_timing(raw["timing"]).dvpp_seconds(
        "jpegd", bench["width"] * bench["height"]
    )
    emulated = raw["host_work_us"]["bench_file"]["emulated_dvpp"] / 1e6
    top = max(figures.images_per_s)
    bound = (
        "the host's emulation of the decode, not the profile, bounds the JPEG model here"
        if emulated > channel
        else "the profile's JPEGD channel time is longer than the host's emulation of it"
    )
    return (
        f"Images/s: at {clients(top)} JPEG in served {median(figures.images_per_s[top]):.2f}x "
        f"the images/s of raw in (per round {each(figures.images_per_s[top])}). The profile "
        f"gives one {bench['width']}x{bench['height']} decode {channel * 1e3:.2f} ms of a JPEGD "
        f"channel ({chip * 1e3:.3f} ms of the chip); the emulator took {emulated * 1e3:.1f} ms "
        f"of host CPU for it: {bound}. These are ratios of one run on this host, not a "
        "device's rates."
    )


def jpeg_lines(data: dict[str, Any], figures: analysis.JpegInputs) -> list[Item]:
    raw = data["jpeg"]
    top1 = raw["top1"]
    rounds = len(raw["runs"]["jpeg"])
    cpu_rounds = len(raw["cpu"]["jpeg"])
    bench = raw["bench_file"]
    levels = sorted(figures.images_per_s)
    others = "; ".join(
        f"{JPEG_RESIZES[name]}: {count} of {raw['files']}"
        for name, count in figures.top1_other.items()
    )
    lines = [
        "## 11. JPEG files in, decoded by DVPP, against raw NV12 rows in",
        "",
        "One classifier (`benchmarks/scenarios.py` `build_jpeg_classifier`: a static AIPP "
        f"taking YUV420SP_U8 {JPEG_SIDE}x{JPEG_SIDE}, JPEG's full-range YCbCr to RGB and "
        "ImageNet's mean and deviation, then a stride-8 convolution, pooling and a 1000-way "
        f"linear layer with random weights; batch gears {JPEG_GEARS}; cheap on purpose, so "
        "that the host figures are the serving's and not onnxruntime's) scaffolded twice on one "
        "server: `jpeg` with `image_input` (each request one JPEG file, decoded by the "
        "emulator's JPEGD and resized by its VPC into its row of the batch) and `raw` without "
        "it (each request one NV12 row of 224x224 made by the client). The server ran under "
        f"`GE_EMULATOR_TIMING={raw['timing']}` (JPEGD and VPC device time of an Ascend 310P3, "
        "docs/internals/conformance/dvpp.md; model execution untimed). First "
        f"{raw['files']} generated photo-like JPEGs (`tests/jpeg_files.py` `photo_like`: "
        "gradients, a blob, up to 12 shapes, noise, quality 40-94, subsampling 4:4:4, 4:2:2 "
        f"or 4:2:0, sides 48-1279) were sent {JPEG_CHECK_THREADS} at a time over one gRPC "
        "connection to `jpeg`, and the host's NV12 rows of the same files to `raw`; then both "
        f"models in alternating closed-loop rounds ({rounds} of {data['plan']['seconds']:g} "
        f"s) of one file, {bench['width']}x{bench['height']} quality {bench['quality']} "
        f"({bench['bytes']:,} bytes), or its NV12 row, and server CPU per image at "
        f"{clients(CPU_CONCURRENCY)} ({cpu_rounds} rounds).",
        "",
        Table(
            [
                "",
                "JPEG in (`jpeg`)",
                "raw NV12 in (`raw`)",
                "jpeg / raw, median (per-round range)",
            ],
            [
                [
                    f"bytes the server received per request ({raw['files']} files)",
                    fmt(raw["wire_in"]["jpeg"]),
                    fmt(raw["wire_in"]["raw"]),
                    f"{raw['wire_in']['jpeg'] / raw['wire_in']['raw']:.2f}",
                ],
                [
                    f"server CPU per image (tritonserver + stub), {clients(CPU_CONCURRENCY)}",
                    f"{fmt(median(figures.server_cpu_us['jpeg']))} us",
                    f"{fmt(median(figures.server_cpu_us['raw']))} us",
                    ratio_cell(figures.cpu_ratio),
                ],
                *(
                    [
                        f"images/s at {clients(c)}",
                        fmt(figures.rates["jpeg"][c], 1),
                        fmt(figures.rates["raw"][c], 1),
                        ratio_cell(figures.images_per_s[c]),
                    ]
                    for c in levels
                ),
            ],
        ),
        "",
        f"Top-1 of the {raw['files']} files through `jpeg` equal to the host reference's "
        f"(Pillow decodes the file's YCbCr to NV12 as JPEGD writes it, resized "
        f"{JPEG_RESIZES['vpc']}; NumPy AIPP; onnxruntime): **{top1['jpeg']['vpc']} of "
        f"{raw['files']}** (target >= {top1['target']}: {verdict(figures.top1)}); "
        f"{top1['classes']} different classes among the "
        f"reference's answers; the {raw['files']} requests ran as {top1['executions']} "
        f"executions. The NV12 rows through `raw`: {top1['raw']} of {raw['files']}. Against "
        f"host references resizing otherwise, the same answers agree less ({others}): this "
        "classifier's 1000 random classes are close (median top-2 margin "
        f"{top1['margin_median']:.2f} logits), so a resize that differs by one level flips "
        "some.",
        "",
        jpeg_bytes_words(raw),
        "",
        jpeg_cpu_words(raw, figures),
        "",
        jpeg_rate_words(raw, figures),
        "",
        "![JPEG in vs NV12 in](benchmarks/results/jpeg.png)",
        "",
        "Raw results:",
        "",
        level_table(raw["runs"]),
        "",
        "Commands (section-only re-run):",
        "",
        "```",
        "python benchmarks/run.py --only jpeg --output BENCHMARKS.md",
        *raw["commands"],
        "```",
        "",
    ]
    if "machine" in raw:
        measured = dict(raw["machine"])
        lines += [
            f"`--only jpeg` was measured on {measured['date']} at commit {measured['commit']} "
            f"({raw['section_elapsed_s'] / 60:.1f} min; Python speed: "
            f"{measured['Python speed']}).",
            "",
        ]
    return lines


def real_models_lines(raw: dict[str, Any]) -> list[Item]:
    """Section 12: per real model (`real_models_bench.measure`) the precision mode migrate chose,
    the operators it kept in FP32, the gate's figures per sample and executions per request."""
    clients = raw["clients"]
    items: list[Item] = [
        "## 12. Public trained models, migrated and served",
        "",
        f"Six public trained models from PyPI wheels (`tests/real_models.py`), migrated from a "
        f"GPU team's repository with their clients' real requests as `--samples` "
        f"({raw['migrate_s']:.0f} s for all), served on the emulator, and loaded by {clients} "
        f"closed-loop clients for {raw['seconds']:.0f} s each (one model at a time; its first "
        "client request); the seventh, an onnxruntime-quantized CRNN, is refused before "
        "anything compiles (`tests/test_real_models.py`).",
        "",
    ]
    for name, model in raw["models"].items():
        kept = model["fp32_operators"]
        island = f"{len(kept)}: " + ", ".join(f"`{op}`" for op in kept) if kept else "none"
        rows = [
            ["precision mode chosen", model["mode"]],
            ["operators in FP32", island],
        ]
        for output in model["outputs"]:
            for item in output["per_input"]:
                figures = ", ".join(
                    f"{key} {value:.4g}"
                    for key, value in item.items()
                    if key not in ("input", "passed", "problem") and value is not None
                )
                rows.append(
                    [f"gate: {output['name']} ({output['metric']}), {item['input']}", figures]
                )
        per_request = model["executions"] / max(model["requests"], 1)
        rows.append(
            [
                f"executions per request at {clients} clients",
                f"{per_request:.2f} ({model['executions']} for {model['requests']} requests of "
                f"{model['rows_per_request']} rows)",
            ]
        )
        items += [f"**{name}** ({model['gears']})", "", Table(["figure", "value"], rows), ""]
    return items


FIFTY_MODE_WORDS = {
    "in_stub": "in-stub (device_host off)",
    "per_lane": "device host, a work space per lane",
    "shared": "device host, work spaces shared per stream",
}


def fifty_kinds_table(raw: dict[str, Any]) -> Table:
    """Each kind of section 13: its size and GE's plan of its `.om`."""
    return Table(
        [
            "kind",
            "models",
            "input",
            "parameters",
            "batch gears",
            ".om file",
            "work space (GE's plan, largest gear)",
            "weights (FP16)",
            "a lane's buffers",
            "compile",
        ],
        [
            [
                f"`{name}`",
                str(kind["count"]),
                f"`{kind['input_shape']}`",
                f"{kind['parameters'] / 1e6:.2f} M",
                kind["gears"],
                mib(kind["om_bytes"]),
                mib(kind["work_bytes"]),
                mib(kind["weight_bytes"]),
                mib(kind["lane_buffer_bytes"]),
                f"{kind['compile_s']:.0f} s",
            ]
            for name, kind in raw["kinds"].items()
        ],
    )


def fifty_modes_table(raw: dict[str, Any]) -> Table:
    """Each memory mode of section 13: its budget and, when it was served, what serving did."""
    budgets = raw["budgets"]
    rows = []
    for mode, words in FIFTY_MODE_WORDS.items():
        figures = budgets["modes"].get(mode)
        served = raw["served"].get(mode)
        row = [
            words,
            "-" if figures is None else f"{figures['processes']} of {budgets['max_processes']}",
            "-"
            if figures is None
            else f"{mib(figures['memory_bytes'])} of {mib(budgets['capacity_bytes'])}",
            "-" if figures is None else ("yes" if figures["fits"] else "**no**"),
        ]
        if served is None:
            row += ["not served", "", "", "", "", ""]
        else:
            ram = served["ram"]
            row += [
                f"{served['ready']} of {served['models']} READY",
                f"{served['ready_s']:.0f} s",
                f"{served['answered']} of {served['models']}",
                f"{mib(served['device_bytes'])} (budget of those served: "
                f"{mib(served['budget_bytes'])})",
                mib(served["pss_bytes"]),
                f"{mib(ram['peak_used_bytes'])} / {mib(ram['least_available_bytes'])} "
                f"(of {mib(ram['total_bytes'])})",
            ]
        rows.append(row)
    return Table(
        [
            "mode",
            "processes on the device",
            "device memory (budget)",
            "fits",
            "served",
            "start to every model READY",
            "answered correctly",
            "device memory held (emulator)",
            "host PSS",
            "machine RAM: peak used / least available",
        ],
        rows,
    )


def fifty_models_lines(data: dict[str, Any]) -> list[Item]:
    """Section 13: fifty realistic-size models on one card in three memory modes, and one
    model's throughput with shared work spaces against a work space per lane."""
    raw = data["fifty_models"]
    figures = analysis.fifty_models(data)
    kinds = raw["kinds"]
    mix = ", ".join(f"{kind['count']} `{name}`" for name, kind in kinds.items())
    lines: list[Item] = [
        "## 13. Fifty realistic-size models on one card: shared work spaces",
        "",
        f"{figures.models} models ({mix}; `tests/fifty_models.py`: ResNet-50 v1.5 at width "
        "64, YOLOv8s at 640x640 with its C2f backbone, SPPF, PAN neck and decoupled DFL head, "
        "BERT-base at hidden 768, 12 layers, 12 heads, sequence 128; real widths, random "
        "weights), each kind compiled once for the emulator at force_fp16 and served as many "
        "models through hard links of its `.om` (each model holds weights of its own, as on a "
        f"device), {raw['instances']} instances each, scaffold's defaults (pipeline depth 2, "
        f"dynamic batching, a warmup per gear), on one emulated {raw['soc']} "
        f"({mib(raw['capacity_bytes'])}). GE's plan of each kind (`acl.mdl.query_size` as the "
        "runtime reads it; the work space and a lane's buffers at the largest gear):",
        "",
        fifty_kinds_table(raw),
        "",
        "Device memory in each mode from the project's own arithmetic (`repository/budget.py`, "
        "what `validate` prints); the modes that fit served by the real tritonserver, each start "
        "on a host of its own: time from tritonserver's start to every model READY (loads and "
        "Triton's warmups, executed by onnxruntime on this machine's CPU), then one request to "
        "each model checked as `compare` checks a compiled model (every output within "
        "atol 1e-2 + rtol 1e-2 of onnxruntime on the ONNX, cosine >= 0.99), the machine's RAM "
        "sampled every 0.5 s throughout (the emulator backs the device memory written with RAM):",
        "",
        fifty_modes_table(raw),
        "",
    ]
    for mode, reason in raw["not_served"].items():
        lines += [f"Not served, {FIFTY_MODE_WORDS[mode]}: {reason}.", ""]
    for mode, served in raw["served"].items():
        if served["wrong"] or served["not_ready"]:
            lines += [
                f"{FIFTY_MODE_WORDS[mode]}: not READY {', '.join(served['not_ready']) or 'none'}"
                f"; wrong answers: {served['wrong'] or 'none'}.",
                "",
            ]
    throughput = raw["throughput"]
    lines += [
        f"One `{throughput['model']}` ({raw['instances']} instances, gears "
        f"{kinds[throughput['model']]['gears']}) under the device host in each work-space "
        "mode, two servers started side by side (each on a host of its own), "
        f"{figures.clients} closed-loop clients of one image, alternating rounds "
        f"({len(throughput['runs']['shared'])} of {throughput['seconds']:g} s each), no timing "
        "model (onnxruntime's CPU time is the device's):",
        "",
        Table(
            ["comparison", "median", *COMPARISON_COLUMNS[2:]],
            [
                summary_row(
                    "shared work spaces / a work space per lane, throughput at "
                    f"{figures.clients} clients",
                    figures.throughput,
                    3,
                    per_round=2,
                )
            ],
        ),
        "",
        f"With shared work spaces {fmt(figures.throughput_rps['shared'], 1)} requests/s, with a "
        f"work space per lane {fmt(figures.throughput_rps['per_lane'], 1)}.",
        "",
        "Raw results:",
        "",
        level_table(throughput["runs"]),
        "",
        "Commands (section-only re-run):",
        "",
        "```",
        "python benchmarks/run.py --only fifty_models",
        *raw["commands"],
        "```",
        "",
    ]
    if "machine" in raw:
        measured = dict(raw["machine"])
        lines.append(
            f"`--only fifty_models` was measured on {measured['date']} at commit "
            f"{measured['commit']} ({raw['section_elapsed_s'] / 60:.1f} min; Python speed: "
            f"{measured['Python speed']})."
        )
    return [*lines, ""]


def profile_lines() -> list[Item]:
    return [
        "## Device profiles",
        "",
        "`GE_EMULATOR_TIMING=profile=NAME` starts the emulator's timing model from a named "
        "profile (`PROFILES` in `ge_python_backend/emulator/timing.py`; other keys override its "
        "values).",
        "",
        Table(
            ["profile", "execute_us", "execute_us_per_row", "copy_gbps", "memset_gbps", "models"],
            [
                [
                    f"`{name}`",
                    f"{t.execute_us:g}",
                    f"{t.execute_us_per_row:g}",
                    f"{t.copy_gbps:g}",
                    f"{t.memset_gbps:g}",
                    PROFILE_MODELS[name],
                ]
                for name, t in PROFILES.items()
                if name in PROFILE_MODELS  # the DVPP profiles: docs/internals/conformance/dvpp.md
            ],
        ),
        "",
        "Sources:",
        "",
        *PROFILE_SOURCES,
        "",
    ]


# -- the document ------------------------------------------------------------------------------


def document(data: dict[str, Any]) -> dict[str, Any]:
    """The report of a run (`scenarios.measure`, or `all.json` read back) as data: `title`,
    `introduction`, the `summary` table, then `sections`, each a `title` and `blocks` of
    `{"text": Markdown}` or `{"table": {"columns", "rows"}}`. JSON as it is (`report.json`)."""
    over, naive, eff = analysis.overhead(data), analysis.naive(data), analysis.efficiency(data)
    sat = analysis.saturation(data) if "saturation" in data else None
    exp = analysis.expert(data) if "expert" in data else None
    targets = [*over.ratios.values(), naive, eff.ratio]
    if sat is not None:
        targets += [sat.busy, *([sat.latency] if sat.latency else [])]
    if exp is not None:
        targets += exp.ratios.values()
    summary = summary_lines(
        over,
        naive,
        eff,
        sat,
        exp,
        analysis.device_host(data) if "device_host" in data else None,
        analysis.jpeg_inputs(data) if "jpeg" in data else None,
        analysis.fifty_models(data) if "fifty_models" in data else None,
    )
    items: list[Item] = [
        *machine_lines(data),
        *overhead_lines(data, over),
        *naive_lines(data, naive),
        *efficiency_lines(data, eff),
        *scaling_lines(data),
    ]
    if "pipeline" in data:
        items += pipeline_lines(data, analysis.pipeline(data), sat)
    if sat is not None:
        items += saturation_lines(data, sat)
    if exp is not None:
        items += expert_lines(data, exp)
    if "tune" in data:
        items += tune_lines(data, analysis.tune(data))
    if "sysalloc" in data:
        items += system_allocation_lines(data, analysis.system_allocation(data))
    if "device_host" in data or "many_models" in data:
        items += device_host_lines(data)
    if "jpeg" in data:
        items += jpeg_lines(data, analysis.jpeg_inputs(data))
    if "real_models" in data:
        items += real_models_lines(data["real_models"])
    if "fifty_models" in data:
        items += fifty_models_lines(data)
    items += profile_lines()
    return {
        "title": "Benchmarks",
        "introduction": introduction(data, targets),
        "summary": dataclasses.asdict(summary),
        "sections": sections(items),
    }


def sections(items: list[Item]) -> list[dict[str, Any]]:
    """The sections the items make: a line `## title` opens one; the lines up to a table or the
    next section are one text block."""
    found: list[dict[str, Any]] = []
    text: list[str] = []

    def end_text() -> None:
        block = "\n".join(text).strip("\n")
        if block:
            found[-1]["blocks"].append({"text": block})
        text.clear()

    for item in items:
        if isinstance(item, Table):
            end_text()
            found[-1]["blocks"].append({"table": dataclasses.asdict(item)})
        elif item.startswith("## "):
            if found:
                end_text()
            found.append({"title": item[3:], "blocks": []})
        else:
            text.append(item)
    end_text()
    return found


def markdown_table(table: dict[str, list[Any]]) -> str:
    """A table of a document as Markdown: one line per row."""

    def line(cells: list[str]) -> str:
        return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|"

    return "\n".join(
        [line(table["columns"]), "|" + "---|" * len(table["columns"]), *map(line, table["rows"])]
    )


def render_markdown(report: dict[str, Any]) -> str:
    """BENCHMARKS.md from a document (`document`, or `report.json` read back), through the
    template: the summary table first, then each section's text and tables."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE.parent),
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        undefined=jinja2.StrictUndefined,
        autoescape=False,
    )
    environment.filters["table"] = markdown_table
    return environment.get_template(TEMPLATE.name).render(report)


def render(data: dict[str, Any]) -> str:
    """BENCHMARKS.md from a run's data: `render_markdown(document(data))`."""
    return render_markdown(document(data))


def draw(data: dict[str, Any], results: Path) -> None:
    """The report's plots, into `results`."""
    for name, title in PLOTS:
        if name not in data:
            continue
        series = [
            (label(data, model), analysis.medians(rounds))
            for model, rounds in data[name]["runs"].items()
        ]
        plot(series, results / f"{name}.png", title=title)
    for setting, values in data.get("expert", {}).get("settings", {}).items():
        series = [(model, analysis.medians(rounds)) for model, rounds in values["runs"].items()]
        title = f"Our model.py vs a hand-written pyACL one: {EXPERT_SETTING_WORDS[setting]}"
        plot(series, results / f"expert-{setting}.png", title=title)
    if "pipeline" in data:
        timeline_plot.draw(
            data["pipeline"]["timeline"],
            results / "pipeline-timeline.png",
            f"Stream timeline, {analysis.PIPELINE_LEVEL}-row batches "
            f"({data['pipeline']['timing']})",
        )
