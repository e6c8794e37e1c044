"""What `make bench` runs and measures: the models, the servers, the scenarios; plain data.

Each comparison is measured side by side: the models compared are served by the same server and
measured in alternating rounds (so a slow spell of the machine hits both). The load generator is
`ge-python-model bench` (gRPC, closed loop) on the same machine as the server. Models are built
into a temporary folder. `measure` returns one JSON-ready dict (also written to
`benchmarks/results/all.json`) that `analysis` and `report` read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import queue
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import psutil
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "examples" / "image_classifier"))
sys.path.insert(0, str(ROOT / "tests"))

from build_model import build_classifier  # noqa: E402
from onnx_models import (  # noqa: E402
    aipp_yuv420sp,
    build_dims_model,
    build_mlp,
    build_nms,
    onnx_path_of,
    reference,
)
from onnx_models import build_classifier as build_small_classifier  # noqa: E402

from ge_python_backend.aipp import bind_static, parse_aipp_config  # noqa: E402
from ge_python_backend.ascend import DTYPES_BY_NUMPY, SOC_DEVICES, Format  # noqa: E402
from ge_python_backend.client import TritonClient, typed  # noqa: E402
from ge_python_backend.devicehost.client import IDLE_EXIT_ENV  # noqa: E402
from ge_python_backend.emulator import _jpeg  # noqa: E402
from ge_python_backend.emulator import device_holders as ledger_holders  # noqa: E402
from ge_python_backend.emulator.omfile import compile_onnx  # noqa: E402
from ge_python_backend.emulator.timing import HOST_DIR_ENV  # noqa: E402
from ge_python_backend.processes import RUN_DIR_ENV  # noqa: E402
from ge_python_backend.repository.config import (  # noqa: E402
    config_view,
    load_model_config,
    write_model_config,
)
from ge_python_backend.repository.parameters import ModelParameters  # noqa: E402
from ge_python_backend.repository.scaffold import scaffold  # noqa: E402
from ge_python_backend.server import TritonServer  # noqa: E402
from ge_python_backend.tools.tune import Candidate, apply_winner  # noqa: E402

CLI = str(Path(sys.executable).with_name("ge-python-model"))
PROTOCOL = "grpc"
WIDTH = 64  # the small model: x FP32[N, 64] -> y = 2x + 1
SMALL_GEARS = "1,2,4,8,16"
# The emulator's device timing model for the comparisons that need a device that takes time.
DEVICE_TIMING = "execute_us=2000,execute_us_per_row=100,copy_gbps=5"
CLASSIFIER_BATCH = 8
# The overhead scenario's extra runs: CPU per request at this concurrency (and at 1).
CPU_CONCURRENCY = 8
# The emulator counters run (in-process): batches of this many one-row requests, this many times.
COUNTER_REQUESTS = 8
COUNTER_BATCHES = 200
# Pipeline depth: each copy about as long as execution. The small model moves 256 bytes per row
# each way; at 1 MB/s a 16-row batch copies for 4.1 ms in and 4.1 ms out and executes for 3.6 ms.
# (A slow link with the small model stands for a fast link with a large one without loading the
# 2-core host with megabytes of gRPC payload.)
PIPELINE_TIMING = "execute_us=2000,execute_us_per_row=100,copy_gbps=0.001"
PIPELINE_LEVELS = [1, 16]
# Keeping the device busy: the calibrated ResNet-50 / Atlas 300I Pro profile
# (= execute_us=2260,execute_us_per_row=200,copy_gbps=10), 32 clients of 4-row requests, one
# instance; scaffolded at pipeline depth 1 and 2 with several dynamic-batching queue delays.
SATURATION_TIMING = "profile=resnet50-310p3"
SATURATION_LEVELS = [1, 8, 32]
SATURATION_ROWS = 4
SATURATION_DELAYS_US = (0, 100, 1000)
SATURATION_ROUNDS = 3
# Against the hand-written pyACL model.py (`expert_model.py`), each setting on its own server:
# GE_EMULATOR_TIMING (None: no timing model), the concurrency levels and the rows per request.
EXPERT_SETTINGS: dict[str, tuple[str | None, list[int], int]] = {
    "plain": (None, [1, CPU_CONCURRENCY], 1),
    "copy_bound": (PIPELINE_TIMING, PIPELINE_LEVELS, 1),
    "resnet50": (SATURATION_TIMING, SATURATION_LEVELS[-1:], SATURATION_ROWS),
}
EXPERT_MODELS = ("ours", "expert")
# Without a timing model one round of 3 s moved ours/expert by up to +-0.2 on this shared VM (a
# noisy moment hits one model's window): that setting splits the same seconds into this many
# shorter rounds, so the median of the paired ratios rests on more of them.
EXPERT_PLAIN_ROUNDS = 9
# After those rounds, on the same server, section 1's CPU per request of both models at
# concurrency 1 and CPU_CONCURRENCY, alternating, in this many rounds of the same shorter seconds
# (3 x 2 x 2 runs of ~1.7 s plus the load generator's start: ~30 s of `make bench`).
EXPERT_CPU_ROUNDS = 3
# Scaffold's defaults against `tune`'s winner (section 8): the small model under the calibrated
# profile, tuned live at low, medium and saturating closed-loop load (clients of SATURATION_ROWS
# rows) under one p99 budget. 30 ms would be out of reach at 32 clients whatever the config: 128
# rows in flight at the device limit of ~2,930 rows/s wait 43.7 ms (Little's law).
TUNE_LEVELS = [2, 8, 32]
TUNE_P99_MS = 50.0
# Up to two instances: under a timing model the emulator's device is shared by every process of
# the host (one stub per instance), so two instances on device 0 contend for one modelled device
# as on an NPU (before, each stub modelled a device of its own: 4,104 rows/s with 2 instances,
# beyond the one device's 2,930).
TUNE_MAX_INSTANCES = 2
# `tune --budget-s` per level: this many times the plan's seconds (78 s in `make bench`); each
# trial measures half the plan's seconds, and tune keeps part of the budget for its own
# confirmation (its finalists re-measured in alternating rounds, docs/guides/tune.md). Then the
# winner is re-measured against the defaults by `bench` in SATURATION_ROUNDS alternating rounds:
# a witness independent of tune's own load generator and windows, which the report sets beside
# tune's confirmation.
TUNE_BUDGET_PER_PLAN_SECOND = 26.0
# Each winner is also measured against the defaults at one client of 1-row requests: what a
# config tuned for a load costs a lone request (a longer queue delay without gear 1 makes it
# wait for company that never comes).
LONE_SHAPE = f"x:1,{WIDTH}"
# Section 9: an NMS detector (tests/onnx_models.py build_nms: boxes FP32[1,B,4], scores
# FP32[1,C,B] -> selected INT64[K,3], picked FP32[K,4], K unbounded) served with its outputs
# allocated by ACL at each execution and with pooled buffers of max_output_bytes.
NMS_BOXES, NMS_CLASSES = 20, 3
SYSALLOC_LEVELS = [1, 8]
SYSALLOC_MAX_OUTPUT_BYTES = NMS_BOXES * NMS_CLASSES * 3 * 8  # every box of every class kept
# Section 10: one model served in-stub (`stub`, device_host off) and by the device host (`host`),
# same server, alternating rounds, at these levels; then a repository of MANY_KINDS x
# MANY_PER_KIND models (tests/onnx_models.py's small builders), MANY_INSTANCES instances each, on
# one emulated Ascend310P3 device, started once per mode (device_host off, on), each on a host of
# its own (emulator ledger, placement records, device host socket).
DEVICE_HOST_MODELS = {"stub": None, "host": True}  # name -> device_host
DEVICE_HOST_LEVELS = [1, 8]
# The one-model comparison's seconds split into this many rounds: a burst of other load on this
# shared VM moved one 3 s round's ratio by up to +-0.3 (0.50 .. 1.41 in one run), so the median
# rests on more, shorter pairs (as EXPERT_PLAIN_ROUNDS).
DEVICE_HOST_ROUNDS = 9
MANY_KINDS = ("classifier", "sequence", "mlp")
MANY_PER_KIND = 20
MANY_INSTANCES = 2
MANY_MODES = {"in_stub": None, "device_host": True}  # mode -> device_host
MANY_READY_TIMEOUT_S = 3600.0
# The correctness check: requests of these many rows sent at once (Triton batches them together).
ANSWER_ROWS = (1, 3, 2, 5, 4, 1)
# Section 11: JPEG files in (`image_input`: the emulator's JPEGD decodes each, its VPC resizes it
# into its row of the batch) against the raw tensor in (the same `.om` scaffolded without
# image_input: NV12 rows from the client), one server under the emulator's DVPP profile of the
# 310P3 (model execution untimed: onnxruntime's host time). The classifier
# (`build_jpeg_classifier`) takes YUV420SP_U8 224x224 through a static AIPP (JPEG's full-range
# YCbCr to RGB, ImageNet mean/std) with batch gears; it is cheap (a strided conv, pooling, a
# linear layer) so that the host figures are the serving's, not onnxruntime's, and its top-1
# follows the image's content (a random ResNet answers the same few classes for any image).
JPEG_SIDE = 224
JPEG_GEARS = "1,2,4,8"
JPEG_CLASSES = 1000
JPEG_TIMING = "profile=dvpp-310p3"
JPEG_MODELS = ("jpeg", "raw")
JPEG_LEVELS = [1, CPU_CONCURRENCY]
JPEG_CPU_ROUNDS = 3
JPEG_FILES, JPEG_SEED, JPEG_TOP1_TARGET = 100, 36, 99
JPEG_CHECK_THREADS = 8  # the correctness pass: this many requests in flight (Triton batches them)
# The closed-loop runs' one file: width, height, quality, noise (a camera's: +-8 levels).
JPEG_BENCH_FILE = (640, 480, 85, 8)
JPEG_AIPP = aipp_yuv420sp(JPEG_SIDE, JPEG_SIDE, csc="full")  # a JPEG's full-range YCbCr


@dataclasses.dataclass
class Plan:
    """How long to measure (the defaults are `make bench`'s)."""

    rounds: int = 5
    seconds: float = 3.0
    warmup: int = 20


def command_line(command: list[str], output: Path) -> str:
    """A `ge-python-model` command line as the report shows it: `output` relative to the
    checkout when it is inside it."""
    relative = str(output.relative_to(ROOT)) if output.is_relative_to(ROOT) else str(output)
    parts = [relative if part == str(output) else part for part in command[1:]]
    return shlex.join(["ge-python-model", *parts])


class Recorder:
    """Runs `ge-python-model bench` and remembers each command line for the report."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self.commands: list[str] = []

    def bench(
        self,
        server: TritonServer,
        model: str,
        levels: Sequence[int],
        plan: Plan,
        label: str,
        shape: str | None = None,
        metrics: bool = False,
        inputs: Sequence[str] = (),
    ) -> list[dict[str, Any]]:
        """One closed-loop run per level (with the device counters from the server's metrics
        endpoint when `metrics`; `inputs`: `--input NAME=FILE` values); the JSON results."""
        path = self.results / f"{label}.json"
        command = [
            CLI,
            "bench",
            "--url",
            server.urls.grpc,
            "--protocol",
            PROTOCOL,
            "--model",
            model,
            "--concurrency",
            ",".join(map(str, levels)),
            "--duration",
            f"{plan.seconds:g}",
            "--warmup",
            str(plan.warmup),
            "--json",
            str(path),
        ]
        if shape:
            command += ["--shape", shape]
        for given in inputs:
            command += ["--input", given]
        if metrics:
            command += ["--metrics-url", server.urls.metrics]
        self.commands.append(command_line(command, path))
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        results: list[dict[str, Any]] = json.loads(path.read_text())["results"]
        for entry in results:
            if entry["errors"]:
                raise SystemExit(f"{model}: {entry['errors']} failed requests: {entry}")
        return results

    def tune(
        self, server: TritonServer, model: str, level: int, plan: Plan, budget_s: float
    ) -> dict[str, Any]:
        """`ge-python-model tune` at `level` closed-loop clients; its tune.json (a run whose
        trials all missed the budget exits 1 and has no winner, which the report says)."""
        report = self.results / f"tune-c{level}"
        command = [
            CLI,
            "tune",
            "--url",
            server.urls.http.removeprefix("http://"),
            "--metrics-url",
            server.urls.metrics,
            "--model",
            model,
            "--p99-ms",
            f"{TUNE_P99_MS:g}",
            "--budget-s",
            f"{budget_s:g}",
            "--max-instances",
            str(TUNE_MAX_INSTANCES),
            "--concurrency",
            str(level),
            "--duration",
            f"{plan.seconds / 2:g}",
            "--warmup",
            str(plan.warmup),
            "--shape",
            f"x:{SATURATION_ROWS},{WIDTH}",
            "--report",
            str(report),
        ]
        self.commands.append(command_line(command, report))
        code = subprocess.run(command, check=False, stdout=subprocess.DEVNULL).returncode
        if code not in (0, 1):
            raise SystemExit(f"tune at {level} clients failed (exit {code})")
        result: dict[str, Any] = json.loads((report / "tune.json").read_text())
        return result

    def inprocess(self, work: Path, *args: str) -> dict[str, Any]:
        """Run `benchmarks/inprocess.py` in a fresh process (the emulator is per process)."""
        shown = [a.replace(str(work), "WORK") for a in args]
        self.commands.append(shlex.join(["python", "benchmarks/inprocess.py", *shown]))
        return inprocess(*args)


def say(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


# -- models ------------------------------------------------------------------------------------


def build_small_model(work: Path) -> Path:
    """The small model (`y = 2x + 1` on FP32[N, 64]) as an emulator `.om` with batch gears."""
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["doubled"]),
        helper.make_node("Add", ["doubled", "one"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", WIDTH])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", WIDTH])],
        [
            numpy_helper.from_array(np.array(2, np.float32), "two"),
            numpy_helper.from_array(np.array(1, np.float32), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(work / "affine.onnx"))
    return compile_onnx(
        work / "affine.onnx",
        work / "affine",
        input_shape=f"x:-1,{WIDTH}",
        dynamic_batch_size=SMALL_GEARS,
        # the graph the baselines run, unchanged: the bench measures serving overhead, and the FP16
        # rounding of ATC's default force_fp16 would add Cast nodes only the .om computes
        precision_mode="must_keep_origin_dtype",
    )


def build_classifier_om(work: Path) -> Path:
    """The ResNet-style example classifier as an emulator `.om` (batch gears 1, 2, 4, 8)."""
    onnx_path = build_classifier(work / "classifier.onnx")
    return compile_onnx(
        onnx_path,
        work / "classifier",
        input_shape="input:-1,3,224,224",
        dynamic_batch_size="1,2,4,8",
        # the graph the baselines run, unchanged: the bench measures serving overhead, and the FP16
        # rounding of ATC's default force_fp16 would add Cast nodes only the .om computes
        precision_mode="must_keep_origin_dtype",
    )


def build_nms_om(work: Path) -> Path:
    """The NMS detector of section 9 as an emulator `.om` (static inputs, data-dependent
    outputs whose size the model leaves unbounded)."""
    return compile_onnx(
        build_nms(work / "nms.onnx"),
        work / "nms",
        input_shape=f"boxes:1,{NMS_BOXES},4;scores:1,{NMS_CLASSES},{NMS_BOXES}",
        precision_mode="must_keep_origin_dtype",
    )


def add_variant(repository: Path, source: str, name: str, model_py: Path) -> None:
    """A copy of model `source` (same config, same `.om`) whose model.py is `model_py`."""
    shutil.copytree(repository / source, repository / name)
    config_path = repository / name / "config.pbtxt"
    config = load_model_config(config_path)
    config.name = name
    write_model_config(config, config_path)
    shutil.copyfile(model_py, repository / name / "1" / "model.py")


def without_dynamic_batching(model_dir: Path) -> None:
    config_path = model_dir / "config.pbtxt"
    config = load_model_config(config_path)
    config.ClearField("dynamic_batching")
    write_model_config(config, config_path)


def check_answers(server: TritonServer, model: str) -> None:
    """Send `ANSWER_ROWS` requests at once and check each answer is exactly `2x + 1` of its own
    rows (integer inputs below 512: exact in FP16 too); SystemExit names the first wrong one."""
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-500, 500, (rows, WIDTH)).astype(np.float32) for rows in ANSWER_ROWS]
    answers: queue.Queue[tuple[int, Any, Exception | None]] = queue.Queue()
    with TritonClient(server.urls.grpc, "grpc") as client:
        for index, x in enumerate(inputs):
            client.send_async(
                model,
                client.prepare({"x": (x, "FP32")}, ["y"]),
                lambda result, error, index=index: answers.put((index, result, error)),
            )
        for _ in inputs:
            index, result, error = answers.get(timeout=60)
            if error is not None:
                raise SystemExit(f"{model}: request {index} failed: {error}")
            if not np.array_equal(result.as_numpy("y"), inputs[index] * 2 + 1):
                raise SystemExit(
                    f"{model}: wrong answer to request {index} ({ANSWER_ROWS[index]} rows)"
                )


@contextlib.contextmanager
def serving(repository: Path, logs: Path, env: dict[str, str] | None = None) -> Iterator[Any]:
    server = TritonServer(repository, env=env, log_path=logs / f"{repository.name}.log")
    with server:
        yield server


# -- measurements ------------------------------------------------------------------------------


def shorter_rounds(plan: Plan, count: int) -> Plan:
    """`plan`'s seconds split into `count` rounds (a plan of one round stays one)."""
    if plan.rounds <= 1:
        return plan
    return dataclasses.replace(
        plan, rounds=count, seconds=round(plan.seconds * plan.rounds / count, 1)
    )


def alternate(
    recorder: Recorder,
    server: TritonServer,
    models: Sequence[str],
    levels: Sequence[int],
    plan: Plan,
    label: str,
    shape: str | None = None,
    metrics: bool = False,
    inputs: dict[str, Sequence[str]] | None = None,
    servers: dict[str, TritonServer] | None = None,
) -> dict[str, list[list[dict[str, Any]]]]:
    """`plan.rounds` rounds; in each, at each level, every model runs in turn (one run per model
    and level, so the runs compared are next to each other; `inputs`: each model's `--input`
    values; `servers`: the server of each model not on `server`). Odd rounds take the even rounds'
    order backwards, so each level's runs pair up as A B B A over two rounds: no model always
    runs first, and a drift of the machine's speed cancels over the pair. {model: [round
    results, one entry per level in `levels` order]}."""
    runs: dict[str, list[list[dict[str, Any]]]] = {model: [] for model in models}
    order = [(level, model) for level in levels for model in models]
    for number in range(plan.rounds):
        measured: dict[tuple[str, int], dict[str, Any]] = {}
        for level, model in order if number % 2 == 0 else order[::-1]:
            say(f"{label}: {model}, round {number + 1}/{plan.rounds}, concurrency {level}")
            run_label = f"{label}-{model}-c{level}-{number + 1}"
            [measured[model, level]] = recorder.bench(
                (servers or {}).get(model, server),
                model,
                [level],
                plan,
                run_label,
                shape,
                metrics,
                (inputs or {}).get(model, ()),
            )
        for model in models:
            runs[model].append([measured[model, level] for level in levels])
    return runs


def cpu_per_request(
    recorder: Recorder,
    server: TritonServer,
    model: str,
    level: int,
    plan: Plan,
    label: str,
    inputs: Sequence[str] = (),
) -> dict[str, float]:
    """CPU microseconds per request of the load generator, tritonserver and the model's stub,
    and Triton's own time per request in the model's `execute` (`compute_infer`); `inputs`:
    the requests' `--input` values."""
    process = psutil.Process(server.pid)
    stub = next(c for c in process.children() if f"/{model}/" in " ".join(c.cmdline()))

    def used(p: psutil.Process) -> float:
        times = p.cpu_times()
        return times.user + times.system

    before = used(process), used(stub), triton_counts(server, model)
    children = psutil.Process().cpu_times()
    entry = recorder.bench(server, model, [level], plan, label, inputs=inputs)[0]
    after = used(process), used(stub), triton_counts(server, model)
    client = psutil.Process().cpu_times()
    requests = entry["requests"]
    spent = (client.children_user + client.children_system) - (
        children.children_user + children.children_system
    )
    return {
        "throughput_rps": entry["throughput_rps"],
        "client": spent / requests * 1e6,
        "tritonserver": (after[0] - before[0]) / requests * 1e6,
        "stub": (after[1] - before[1]) / requests * 1e6,
        "per_execution": (after[2][0] - before[2][0]) / max(after[2][1] - before[2][1], 1),
        "compute_infer": (after[2][2] - before[2][2]) / max(after[2][0] - before[2][0], 1) / 1e3,
    }


def triton_stats(server: TritonServer, model: str) -> dict[str, Any]:
    """Triton's own statistics of a model (`/v2/models/<model>/stats`)."""
    import tritonclient.http as httpclient

    with httpclient.InferenceServerClient(server.urls.http.removeprefix("http://")) as client:
        stats: dict[str, Any] = client.get_inference_statistics(model)["model_stats"][0]
    return stats


def triton_counts(server: TritonServer, model: str) -> tuple[int, int, int]:
    """Triton's cumulative requests, executions and `compute_infer` nanoseconds of a model (each
    request counts the whole `execute` call it was part of, the round trip to the stub
    included), from one read of its statistics."""
    stats = triton_stats(server, model)
    compute = int(stats["inference_stats"]["compute_infer"].get("ns", 0))
    return int(stats["inference_count"]), int(stats["execution_count"]), compute


def inprocess(*args: str) -> dict[str, Any]:
    """Run `benchmarks/inprocess.py` in a fresh process; its JSON answer."""
    command = [sys.executable, str(HERE / "inprocess.py"), *args]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return result


# -- scenarios ---------------------------------------------------------------------------------


def scenario_overhead(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    repository = work / "overhead"
    scaffold(om, repository, name="ours", runtime="emulator")
    add_variant(repository, "ours", "floor", HERE / "floor_model.py")
    add_variant(repository, "ours", "floor_sender", HERE / "floor_sender_model.py")
    levels = [1, 2, 4, 8, 16]
    with serving(repository, logs) as server:
        models = ["ours", "floor", "floor_sender"]
        runs = alternate(recorder, server, models, levels, plan, "overhead")
        say(f"overhead: CPU per request at concurrency {CPU_CONCURRENCY}, execute time at 1 too")
        cpu = {
            model: cpu_per_request(
                recorder, server, model, CPU_CONCURRENCY, plan, f"overhead-cpu-{model}"
            )
            for model in ("ours", "floor")
        }
        alone = {
            model: cpu_per_request(recorder, server, model, 1, plan, f"overhead-one-{model}")
            for model in ("ours", "floor")
        }
    return {"runs": runs, "levels": levels, "cpu": cpu, "alone": alone}


def scenario_naive(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    repository = work / "naive"
    scaffold(om, repository, name="ours", runtime="emulator")
    add_variant(repository, "ours", "naive", HERE / "naive_model.py")
    levels = [1, 4, 16]
    with serving(repository, logs, env={"GE_EMULATOR_TIMING": DEVICE_TIMING}) as server:
        runs = alternate(recorder, server, ["ours", "naive"], levels, plan, "naive")
    say(f"counters: ours and naive, in-process, {COUNTER_REQUESTS} one-row requests per batch")
    counters = {
        model: recorder.inprocess(
            work, "counters", str(repository / model), str(COUNTER_REQUESTS), str(COUNTER_BATCHES)
        )
        for model in ("ours", "naive")
    }
    return {"runs": runs, "levels": levels, "counters": counters}


def scenario_efficiency(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    repository = work / "efficiency"
    scaffold(om, repository, name="classifier", runtime="emulator")
    shape = f"input:{CLASSIFIER_BATCH},3,224,224"
    long = dataclasses.replace(plan, seconds=plan.seconds * 2, warmup=2)
    served, local = [], []
    with serving(repository, logs) as server:
        for number in range(plan.rounds):
            say(f"efficiency: Session.infer in-process, round {number + 1}/{plan.rounds}")
            local.append(
                recorder.inprocess(
                    work, "session", str(om), str(CLASSIFIER_BATCH), f"{long.seconds:g}"
                )
            )
            say(f"efficiency: through Triton, round {number + 1}/{plan.rounds}")
            (entry,) = recorder.bench(
                server, "classifier", [2], long, f"efficiency-{number + 1}", shape
            )
            served.append(entry)
        stats = triton_stats(server, "classifier")
    return {"served": served, "local": local, "stats": stats}


def scenario_scaling(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    repository = work / "scaling"
    variants = {}
    for instances in (1, 2):
        for batching in (True, False):
            name = f"i{instances}_{'batching' if batching else 'nobatching'}"
            result = scaffold(
                om,
                repository,
                name=name,
                runtime="emulator",
                instances=instances,
                device_ids=list(range(instances)),
            )
            if not batching:
                without_dynamic_batching(result.model_dir)
            variants[name] = (instances, batching)
    levels = [1, 4, 16]
    single = dataclasses.replace(plan, rounds=1)
    with serving(repository, logs, env={"GE_EMULATOR_TIMING": DEVICE_TIMING}) as server:
        runs = alternate(recorder, server, list(variants), levels, single, "scaling")
    return {"runs": runs, "levels": levels, "variants": variants}


def scenario_pipeline(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    """The small model scaffolded with pipeline depth 1 and 2, same server, alternating rounds;
    then in-process stream timelines of both depths."""
    import timeline

    repository = work / "pipeline"
    for depth in (1, 2):
        scaffold(om, repository, name=f"depth{depth}", runtime="emulator", pipeline_depth=depth)
    first = len(recorder.commands)
    with serving(repository, logs, env={"GE_EMULATOR_TIMING": PIPELINE_TIMING}) as server:
        runs = alternate(recorder, server, ["depth1", "depth2"], PIPELINE_LEVELS, plan, "pipeline")
    say("pipeline: stream timelines in-process")
    traces = {
        f"pipeline_depth {depth}": timeline.record(om, depth, 6, 16, PIPELINE_TIMING)
        for depth in (1, 2)
    }
    return {
        "runs": runs,
        "levels": PIPELINE_LEVELS,
        "timing": PIPELINE_TIMING,
        "timeline": traces,
        "commands": recorder.commands[first:],
    }


def scenario_saturation(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    """The small model under the calibrated profile: scaffold's defaults, and depth 1 and 2 with
    each queue delay, same server, alternating rounds, device counters from the metrics."""
    repository = work / "saturation"
    defaults = scaffold(om, repository, name="defaults", runtime="emulator")
    config = load_model_config(defaults.config_path)
    variants = {
        "defaults": (
            ModelParameters.from_config(config_view(config)).pipeline_depth,
            config.dynamic_batching.max_queue_delay_microseconds,
        )
    }
    for depth in (1, 2):
        for delay in SATURATION_DELAYS_US:
            name = f"depth{depth}_delay{delay}"
            scaffold(
                om,
                repository,
                name=name,
                runtime="emulator",
                pipeline_depth=depth,
                max_queue_delay_us=delay,
            )
            variants[name] = (depth, delay)
    first = len(recorder.commands)
    rounds = dataclasses.replace(plan, rounds=min(plan.rounds, SATURATION_ROUNDS))
    shape = f"x:{SATURATION_ROWS},{WIDTH}"
    with serving(repository, logs, env={"GE_EMULATOR_TIMING": SATURATION_TIMING}) as server:
        runs = alternate(
            recorder, server, list(variants), SATURATION_LEVELS, rounds, "saturation", shape, True
        )
    return {
        "runs": runs,
        "variants": variants,
        "levels": SATURATION_LEVELS,
        "timing": SATURATION_TIMING,
        "commands": recorder.commands[first:],
    }


def expert_cpu(
    recorder: Recorder, server: TritonServer, levels: Sequence[int], plan: Plan
) -> dict[str, list[list[dict[str, Any]]]]:
    """`cpu_per_request` of each of `EXPERT_MODELS` at each level, the models alternating, in up
    to `EXPERT_CPU_ROUNDS` rounds of `plan.seconds`: {model: [per round, one entry per level,
    with its `concurrency`]} (the shape of `alternate`'s rounds)."""
    count = min(plan.rounds, EXPERT_CPU_ROUNDS)
    cpu: dict[str, list[list[dict[str, Any]]]] = {model: [] for model in EXPERT_MODELS}
    for number in range(count):
        say(f"expert-plain: CPU per request, round {number + 1}/{count}, concurrency {levels}")
        for model in EXPERT_MODELS:
            cpu[model].append([])
        for level in levels:
            for model in EXPERT_MODELS:
                label = f"expert-plain-cpu-{model}-c{level}-{number + 1}"
                used = cpu_per_request(recorder, server, model, level, plan, label)
                cpu[model][-1].append({"concurrency": level, **used})
    return cpu


def scenario_expert(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    """`ours` (scaffold's defaults) against `expert` (`benchmarks/expert_model.py`, same config
    and `.om`) in each of `EXPERT_SETTINGS`: one server per setting, both models checked for
    correct answers, then measured in alternating rounds; without a timing model, then also CPU
    per request (`expert_cpu`)."""
    first = len(recorder.commands)
    settings = {}
    for setting, (timing, levels, rows) in EXPERT_SETTINGS.items():
        repository = work / f"expert-{setting}"
        scaffold(om, repository, name="ours", runtime="emulator")
        add_variant(repository, "ours", "expert", HERE / "expert_model.py")
        env = {"GE_PYTHON_BACKEND_ACL": "emulator"}
        if timing:
            env["GE_EMULATOR_TIMING"] = timing
        rounds = plan
        if setting == "resnet50":
            rounds = dataclasses.replace(plan, rounds=min(plan.rounds, SATURATION_ROUNDS))
        elif setting == "plain":
            rounds = shorter_rounds(plan, EXPERT_PLAIN_ROUNDS)
        with serving(repository, logs, env=env) as server:
            for model in EXPERT_MODELS:
                check_answers(server, model)
            runs = alternate(
                recorder,
                server,
                EXPERT_MODELS,
                levels,
                rounds,
                f"expert-{setting}",
                f"x:{rows},{WIDTH}",
            )
            settings[setting] = {"runs": runs, "levels": levels, "timing": timing, "rows": rows}
            if setting == "plain":
                settings[setting]["cpu"] = expert_cpu(recorder, server, levels, rounds)
    return {"settings": settings, "commands": recorder.commands[first:]}


def tuned_candidate(config: dict[str, Any]) -> Candidate:
    """The `Candidate` of a trial's `config` in tune.json."""
    return Candidate(
        instances=config["instances"],
        pipeline_depth=config["pipeline_depth"],
        pipeline_min_device_us=config["pipeline_min_device_us"],
        max_queue_delay_us=config["max_queue_delay_microseconds"],
        preferred_batch_sizes=tuple(config["preferred_batch_size"]),
        device_ids=tuple(config["device_ids"]),
    )


def scenario_tune(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    """`ge-python-model tune` on the small model scaffolded with scaffold's defaults, under the
    calibrated profile, once per load of `TUNE_LEVELS` (each tune loads the original config
    back at its end); then the winner, written into a copy of the model (`winner_cN`) and
    loaded beside it, against the defaults in alternating `bench` rounds at that load and at one
    client of 1-row requests."""
    repository = work / "tune"
    scaffold(om, repository, name="tuned", runtime="emulator")
    first = len(recorder.commands)
    budget_s = TUNE_BUDGET_PER_PLAN_SECOND * plan.seconds
    rounds = dataclasses.replace(plan, rounds=min(plan.rounds, SATURATION_ROUNDS))
    shape = f"x:{SATURATION_ROWS},{WIDTH}"
    env = {"GE_EMULATOR_TIMING": SATURATION_TIMING}
    levels: dict[str, Any] = {}
    remeasured: dict[str, Any] = {}
    with TritonServer(
        repository,
        env=env,
        log_path=logs / "tune.log",
        model_control_mode="explicit",
        load_models=["tuned"],
    ) as server:
        for level in TUNE_LEVELS:
            say(f"tune: {level} clients, p99 <= {TUNE_P99_MS:g} ms, budget {budget_s:g} s")
            document = recorder.tune(server, "tuned", level, plan, budget_s)
            levels[str(level)] = document
            if not document["winner"]:  # none met the budget, or the defaults (trial 0) won
                continue
            name = f"winner_c{level}"
            shutil.copytree(repository / "tuned", repository / name)
            config = load_model_config(repository / name / "config.pbtxt")
            config.name = name
            write_model_config(config, repository / name / "config.pbtxt")
            winner = document["trials"][document["winner"]]["config"]
            apply_winner(repository, name, tuned_candidate(winner))
            with TritonClient(server.urls.http.removeprefix("http://")) as client:
                client.load_model(name)
                runs = alternate(
                    recorder, server, ["tuned", name], [level], rounds, f"tune-{name}", shape
                )
                lone = alternate(
                    recorder, server, ["tuned", name], [1], rounds, f"tune-{name}-lone", LONE_SHAPE
                )
                client.unload_model(name)
            remeasured[str(level)] = {
                "defaults": runs["tuned"],
                "winner": runs[name],
                "lone": {"defaults": lone["tuned"], "winner": lone[name]},
            }
    return {
        "levels": levels,
        "remeasured": remeasured,
        "p99_ms": TUNE_P99_MS,
        "budget_s": budget_s,
        "max_instances": TUNE_MAX_INSTANCES,
        "timing": SATURATION_TIMING,
        "rows": SATURATION_ROWS,
        "commands": recorder.commands[first:],
    }


# A fixed pure-Python snippet timed at the start and the end of a run: these machines are shared
# and their speed changes from day to day (seen here: 0.48 to 0.91 us), so runs are compared by it.
def scenario_sysalloc(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    """The NMS detector scaffolded twice, same server, alternating rounds, no timing model (the
    difference is host work per execution): `system` without max_output_bytes (synchronous
    `acl.mdl.execute`, ACL allocates `selected` and `picked`, copied out and freed every
    execution) and `pooled` with it (buffers allocated once, `execute_async` on the stream)."""
    repository = work / "sysalloc"
    scaffold(om, repository, name="system", runtime="emulator")
    scaffold(
        om,
        repository,
        name="pooled",
        runtime="emulator",
        max_output_bytes=SYSALLOC_MAX_OUTPUT_BYTES,
    )
    with serving(repository, logs) as server:
        runs = alternate(recorder, server, ["system", "pooled"], SYSALLOC_LEVELS, plan, "sysalloc")
    return {
        "runs": runs,
        "levels": SYSALLOC_LEVELS,
        "max_output_bytes": SYSALLOC_MAX_OUTPUT_BYTES,
    }


def scenario_device_host(
    recorder: Recorder, work: Path, om: Path, plan: Plan, logs: Path
) -> dict[str, Any]:
    """The small model scaffolded twice, same server, alternating rounds: `stub` (its stub opens
    the device) and `host` (device_host on: the device host serves it), both checked for correct
    answers first."""
    repository = work / "device-host"
    for name, device_host in DEVICE_HOST_MODELS.items():
        scaffold(om, repository, name=name, runtime="emulator", device_host=device_host)
    first = len(recorder.commands)
    env = {
        HOST_DIR_ENV: str(work / "device-host-emulator"),
        RUN_DIR_ENV: str(work / "device-host-run"),
        IDLE_EXIT_ENV: "1",
    }
    rounds = shorter_rounds(plan, DEVICE_HOST_ROUNDS)
    with serving(repository, logs, env=env) as server:
        for name in DEVICE_HOST_MODELS:
            check_answers(server, name)
        runs = alternate(
            recorder, server, list(DEVICE_HOST_MODELS), DEVICE_HOST_LEVELS, rounds, "devicehost"
        )
    return {
        "runs": runs,
        "levels": DEVICE_HOST_LEVELS,
        "seconds": rounds.seconds,
        "hop": hop_rounds(recorder, work, om, plan),
        "commands": recorder.commands[first:],
    }


HOP_EVICT_MIB = 8  # read between batches: four times the L2 of a core of this VM (2 MiB)
# The hop without Triton (`benchmarks/hop.py`): the session in the client's process (also with
# HOP_EVICT_MIB read between batches, as a second process's work evicts the caches), then the
# device host on the client's CPU, then on the other CPU (left out on a one-CPU machine); a bare
# socket ping-pong on each (the floor of any hop); depth-2 pipelining in the client's process
# and through the device host on the other CPU.
HOP_VARIANTS = {
    "local": ["local"],
    "local_evicted": ["local", "--evict-mib", str(HOP_EVICT_MIB)],
    "same_cpu": ["remote", "--host-cpu", "0"],
    "ping_same_cpu": ["ping", "--host-cpu", "0"],
    "pipelined_local": ["local", "--pipelined"],
}
HOP_OTHER_CPU = {
    "other_cpu": ["remote", "--host-cpu", "1"],
    "ping_other_cpu": ["ping", "--host-cpu", "1"],
    "pipelined_remote": ["remote", "--pipelined", "--host-cpu", "1"],
}


def hop_rounds(
    recorder: Recorder, work: Path, om: Path, plan: Plan
) -> dict[str, list[dict[str, float]]]:
    """Each variant once per round (p50/p90 of one batch at a time, or the batches per second
    of pipelining), rounds alternating."""
    variants = {**HOP_VARIANTS, **(HOP_OTHER_CPU if len(os.sched_getaffinity(0)) > 1 else {})}
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    shown = str(om).replace(str(work), "WORK")
    for args in variants.values():
        recorder.commands.append(shlex.join(["python", "benchmarks/hop.py", shown, *args]))
    for _ in range(plan.rounds):
        for name, args in variants.items():
            command = [sys.executable, str(HERE / "hop.py"), str(om), *args]
            output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            rounds[name].append(json.loads(output.strip().splitlines()[-1]))
    say(
        "device host hop: "
        + ", ".join(
            f"{n} {r[-1]['batches_per_s']:.0f} batches/s"
            if "batches_per_s" in r[-1]
            else f"{n} {r[-1]['p50_us']:.0f} us"
            for n, r in rounds.items()
        )
    )
    return rounds


def build_many_models(work: Path) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """Section 10's repository models: {name: (.om, a request's inputs)}. Classifiers with batch
    gears (`image` FP32[N,3,16,16], 10 + i classes), sequence models with dims gears
    (`input_ids`, `attention_mask` INT64[1,S], S 8, 16 or 32) and static MLPs (`x` FP32[4,16],
    weights of seed i): every classifier and MLP computes something of its own, so an answer
    from another model would not match."""
    rng = np.random.default_rng(10)
    sources = work / "many-onnx"
    sources.mkdir(parents=True)
    sequence = compile_onnx(
        build_dims_model(sources / "sequence.onnx"),
        sources / "sequence",
        input_shape="input_ids:1,-1;attention_mask:1,-1",
        dynamic_dims="8,8;16,16;32,32",
        precision_mode="must_keep_origin_dtype",
    )
    models: dict[str, tuple[Path, dict[str, np.ndarray]]] = {}
    for i in range(MANY_PER_KIND):
        classifier = compile_onnx(
            build_small_classifier(sources / f"classifier{i}.onnx", classes=10 + i),
            sources / f"classifier{i}",
            input_shape="image:-1,3,16,16",
            dynamic_batch_size="1,2,4,8",
            precision_mode="must_keep_origin_dtype",
        )
        image = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
        models[f"classifier{i:02d}"] = (classifier, {"image": image})
        ids = rng.integers(0, 32, (1, 16)).astype(np.int64)
        mask = (rng.random((1, 16)) < 0.8).astype(np.int64)
        models[f"sequence{i:02d}"] = (sequence, {"input_ids": ids, "attention_mask": mask})
        mlp = compile_onnx(
            build_mlp(sources / f"mlp{i}.onnx", seed=100 + i),
            sources / f"mlp{i}",
            input_shape="x:4,16",
            precision_mode="must_keep_origin_dtype",
        )
        models[f"mlp{i:02d}"] = (mlp, {"x": rng.standard_normal((4, 16)).astype(np.float32)})
    return models


def device_holders(host_dir: Path, device: int = 0) -> list[dict[str, int]]:
    """The live processes the emulator's ledger of `device` counts, with the bytes each holds."""
    return [
        {"pid": h.pid, "contexts": h.contexts, "bytes": h.bytes}
        for h in ledger_holders(str(host_dir), device)
        if h.contexts
    ]


def served_figures(
    states: dict[str, str],
    ready: list[str],
    wrong: dict[str, str],
    holders: list[dict[str, int]],
) -> dict[str, Any]:
    """What serving a repository showed: the models READY, answering right (`wrong`: model ->
    what was wrong) and not READY, and the processes holding the device with their bytes."""
    return {
        "ready": len(ready),
        "answered": len(ready) - len(wrong),
        "wrong": wrong,
        "not_ready": sorted(set(states) - set(ready)),
        "device_processes": len(holders),
        "device_bytes": sum(h["bytes"] for h in holders),
    }


def host_memory(pids: set[int]) -> dict[str, float]:
    """Resident and proportional set sizes (bytes) summed over the live processes of `pids`."""
    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            info = psutil.Process(pid).memory_full_info()
            rss, pss = rss + info.rss, pss + info.pss
    return {"rss_bytes": rss, "pss_bytes": pss, "processes": len(pids)}


def answers_correctly(
    server: TritonServer, model: str, om: Path, inputs: dict[str, np.ndarray]
) -> str:
    """One request to `model`: "" when every output matches onnxruntime on the `.om`'s ONNX,
    else what was wrong."""
    try:
        with TritonClient(server.urls.grpc, "grpc", timeout_s=60) as client:
            answer = client.infer(model, typed(inputs))
    except Exception as error:  # tritonclient's InferenceServerException
        return f"failed: {error}"
    expected = reference(om, inputs)
    wrong = [
        name
        for name, value in expected.items()
        if not np.allclose(answer[name], value, rtol=1e-5, atol=1e-6)
    ]
    return f"wrong {', '.join(wrong)}" if wrong else ""


def serve_many(
    work: Path, models: dict[str, tuple[Path, dict[str, np.ndarray]]], mode: str, logs: Path
) -> dict[str, Any]:
    """Section 10's repository in one mode on a host of its own: started, timed to the end of
    loading, then device 0's holders (the emulator's ledger), host memory of tritonserver, its
    stubs and the device host, each READY model's answer checked, the shared-device lines of
    Triton's log."""
    repository = work / f"many-{mode}"
    for name, (om, _) in models.items():
        scaffold(
            om,
            repository,
            name=name,
            runtime="emulator",
            instances=MANY_INSTANCES,
            device_host=MANY_MODES[mode],
        )
    host_dir = work / f"many-{mode}-emulator"
    env = {
        HOST_DIR_ENV: str(host_dir),
        RUN_DIR_ENV: str(work / f"many-{mode}-run"),
        IDLE_EXIT_ENV: "1",
        "GE_EMULATOR_SOC": "Ascend310P3",
    }
    log = logs / f"many-{mode}.log"
    server = TritonServer(repository, env=env, log_path=log)
    say(f"many models, {mode}: {len(models)} models x {MANY_INSTANCES} instances, starting")
    started = time.monotonic()
    server.start()
    try:
        server.wait_ready(timeout=MANY_READY_TIMEOUT_S)
        loaded_s = time.monotonic() - started
        states = {e["name"]: e.get("state", "") for e in server.repository_index()}
        ready = sorted(name for name, state in states.items() if state == "READY")
        say(f"many models, {mode}: {len(ready)} READY after {loaded_s:.0f} s")
        holders = device_holders(host_dir)
        tritonserver = psutil.Process(server.pid)
        children = tritonserver.children(recursive=True)
        pids = {tritonserver.pid, *(c.pid for c in children), *(h["pid"] for h in holders)}
        memory = host_memory(pids)  # the device host is a stub's child, and holds device 0
        stubs = sum(1 for c in children if c.name().startswith("triton_python_"))  # the stubs
        wrong = {
            name: problem
            for name in ready
            if (problem := answers_correctly(server, name, *models[name]))
        }
    finally:
        server.stop()
    ours = [
        line
        for line in log.read_text(errors="replace").splitlines()
        if "device 0 is full" in line and '] "ge_python_backend.' in line
    ]
    return {
        "models": len(models),
        "instances": MANY_INSTANCES,
        "loaded_s": loaded_s,
        **served_figures(states, ready, wrong, holders),
        "device_capacity": SOC_DEVICES["Ascend310P3"].memory,
        "stub_processes": stubs,
        **memory,
        "refusals": len(ours),
        # the message of the first: `E... pb_stub.cc:...] "ge_python_backend....: text"`
        "first_refusal": ours[0].split('] "', 1)[-1].removesuffix('"') if ours else "",
    }


def scenario_many_models(recorder: Recorder, work: Path, plan: Plan, logs: Path) -> dict[str, Any]:
    """Section 10's repository on one emulated 310P3 device, in-stub and under the device host,
    one mode after the other (`plan` does not apply: each mode is one start)."""
    say(f"building {len(MANY_KINDS) * MANY_PER_KIND} models in {work}")
    models = build_many_models(work)
    started = time.monotonic()
    modes = {mode: serve_many(work, models, mode, logs) for mode in MANY_MODES}
    return {"modes": modes, "elapsed_s": time.monotonic() - started}


def build_jpeg_classifier(work: Path) -> Path:
    """Section 11's classifier as an emulator `.om`: `image` YUV420SP_U8 224x224 through
    `JPEG_AIPP` -> conv 8x8 stride 8 (16 channels) -> relu -> average pool 4x4 -> linear ->
    `logits` FP32[N, JPEG_CLASSES]; batch gears `JPEG_GEARS`."""
    rng = np.random.default_rng(JPEG_SEED)
    features = 16 * (JPEG_SIDE // 32) ** 2
    weights = {
        "conv_w": rng.standard_normal((16, 3, 8, 8)) / 14,
        "conv_b": rng.standard_normal(16) / 4,
        "fc_w": rng.standard_normal((features, JPEG_CLASSES)) / np.sqrt(features),
        "fc_b": np.zeros(JPEG_CLASSES),
    }
    nodes = [
        helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["conv"], strides=[8, 8]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("AveragePool", ["relu"], ["pooled"], kernel_shape=[4, 4], strides=[4, 4]),
        helper.make_node("Flatten", ["pooled"], ["features"], axis=1),
        helper.make_node("Gemm", ["features", "fc_w", "fc_b"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes,
        "jpeg_classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, JPEG_SIDE, JPEG_SIDE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", JPEG_CLASSES])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(work / "jpeg_classifier.onnx"))
    (work / "jpeg_aipp.cfg").write_text(JPEG_AIPP)
    return compile_onnx(
        work / "jpeg_classifier.onnx",
        work / "jpeg_classifier",
        input_shape=f"image:-1,3,{JPEG_SIDE},{JPEG_SIDE}",
        dynamic_batch_size=JPEG_GEARS,
        insert_op_conf=work / "jpeg_aipp.cfg",
        precision_mode="must_keep_origin_dtype",
    )


# Section 11's host references: how each resizes the decoded NV12 picture to the model's size.
JPEG_RESIZES = {
    "vpc": "bilinear, half-pixel centres, rounded half up (`_jpeg.resize_nv12`: VPC's resize as "
    "the emulator defines it, OpenCV's INTER_LINEAR)",
    "affine": "Pillow's bilinear affine transform (the same sampling, truncated)",
    "filtered": "Pillow's `resize` with its antialiased bilinear filter",
}


def host_nv12(data: bytes, resize: str) -> np.ndarray:
    """The host's NV12 row of one JPEG (`[JPEG_SIDE * 3 // 2, JPEG_SIDE]` uint8): Pillow decodes
    the file's YCbCr to NV12 (`_jpeg.decode_nv12`, JPEGD's output) and each plane is resized by
    `resize` (`JPEG_RESIZES`)."""
    from PIL import Image

    nv12 = _jpeg.decode_nv12(data, _jpeg.read_header(data))
    if resize == "vpc":
        return _jpeg.resize_nv12(nv12, JPEG_SIDE, JPEG_SIDE)
    h, half = nv12.shape[0] * 2 // 3, JPEG_SIDE // 2

    def sample(plane: np.ndarray, side: int) -> np.ndarray:
        image, bilinear = Image.fromarray(plane), Image.Resampling.BILINEAR
        if resize == "filtered":
            return np.asarray(image.resize((side, side), bilinear))
        scale = (image.width / side, 0, 0, 0, image.height / side, 0)
        return np.asarray(image.transform((side, side), Image.Transform.AFFINE, scale, bilinear))

    uv = nv12[h:].reshape(h // 2, -1, 2)
    chroma = np.stack([sample(uv[:, :, 0].copy(), half), sample(uv[:, :, 1].copy(), half)], -1)
    return np.concatenate([sample(nv12[:h], JPEG_SIDE), chroma.reshape(half, JPEG_SIDE)])


def host_logits(om: Path, rows: list[np.ndarray]) -> np.ndarray:
    """The host reference's logits of NV12 rows: NumPy AIPP (`JPEG_AIPP`) and onnxruntime on the
    classifier's ONNX."""
    bound = bind_static(
        parse_aipp_config(JPEG_AIPP)[0],
        (1, 3, JPEG_SIDE, JPEG_SIDE),
        Format.NCHW,
        DTYPES_BY_NUMPY[np.dtype("f4")],
    )
    images = np.concatenate([bound.apply(row.reshape(1, *row.shape, 1)) for row in rows])
    logits: np.ndarray = reference(onnx_path_of(om), [images])["logits"]
    return logits


def received_bytes(port: int) -> int:
    """TCP payload bytes received so far on the open connections to local `port` (`ss`'s
    `bytes_received` of each: what clients sent, gRPC and HTTP/2 framing included)."""
    listing = subprocess.run(
        ["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sum(int(n) for n in re.findall(r"bytes_received:(\d+)", listing))


def served_top1(
    server: TritonServer, model: str, requests: list[tuple[np.ndarray, str]]
) -> tuple[np.ndarray, float]:
    """Each request (one row: a JPEG file or an NV12 row) sent `JPEG_CHECK_THREADS` at a time
    over one gRPC connection: the top-1 of each answer, and the bytes the server received per
    request."""
    from concurrent.futures import ThreadPoolExecutor

    port = int(server.urls.grpc.rsplit(":", 1)[1])
    with TritonClient(server.urls.grpc, "grpc", timeout_s=60) as client:
        client.is_model_ready(model)  # connected: the connection is counted from here
        prepared = [client.prepare({"image": request}, ["logits"]) for request in requests]
        before = received_bytes(port)
        with ThreadPoolExecutor(JPEG_CHECK_THREADS) as pool:
            answers = list(pool.map(lambda request: client.send(model, request), prepared))
        received = received_bytes(port) - before
    top1 = np.array([int(answer.as_numpy("logits")[0].argmax()) for answer in answers])
    return top1, received / len(requests)


def host_work_us(files: list[bytes]) -> dict[str, float]:
    """CPU microseconds per file of this process: what a client of the raw model does before it
    sends (Pillow decodes and resizes: `host_nv12` "filtered"), and the emulator's stand-ins for
    JPEGD and VPC (`_jpeg`: host work here, DVPP's on an NPU)."""

    def per_file(work: Any) -> float:
        started = time.process_time()
        for data in files:
            work(data)
        return (time.process_time() - started) / len(files) * 1e6

    return {
        "host_decode": per_file(lambda data: host_nv12(data, "filtered")),
        "emulated_dvpp": per_file(lambda data: host_nv12(data, "vpc")),
    }


def scenario_jpeg(recorder: Recorder, work: Path, plan: Plan, logs: Path) -> dict[str, Any]:
    """Section 11: `build_jpeg_classifier` scaffolded as `jpeg` (image_input) and `raw` (NV12
    rows) on one server under `JPEG_TIMING`. First `JPEG_FILES` generated photo-like JPEGs
    through `jpeg`, and their host NV12 rows through `raw`, each top-1 against the host
    reference; then both models in alternating closed-loop rounds of one `JPEG_BENCH_FILE` file
    (its NV12 row for `raw`) per request, and CPU per request at `CPU_CONCURRENCY` clients."""
    from jpeg_files import jpeg, photo_like

    say(f"jpeg: building the classifier and {JPEG_FILES} JPEGs in {work}")
    om = build_jpeg_classifier(work)
    repository = work / "jpeg-inputs"  # not a model's name: cpu_per_request finds stubs by it
    for name in JPEG_MODELS:
        image_input = "image" if name == "jpeg" else None
        scaffold(om, repository, name=name, runtime="emulator", image_input=image_input)
    files = photo_like(JPEG_FILES, JPEG_SEED)
    rows = {resize: [host_nv12(data, resize) for data in files] for resize in JPEG_RESIZES}
    logits = {resize: host_logits(om, rows[resize]) for resize in JPEG_RESIZES}
    ranked = np.sort(logits["vpc"], axis=1)
    width, height, quality, noise = JPEG_BENCH_FILE
    bench_file = jpeg(width, height, JPEG_SEED, noise=noise, quality=quality, shapes=6)
    (work / "bench.jpg").write_bytes(bench_file)
    np.save(work / "bench-nv12.npy", host_nv12(bench_file, "vpc")[None, :, :, None])
    inputs = {"jpeg": [f"image={work / 'bench.jpg'}"], "raw": [f"image={work / 'bench-nv12.npy'}"]}
    first = len(recorder.commands)
    with serving(repository, logs, env={"GE_EMULATOR_TIMING": JPEG_TIMING}) as server:
        say(f"jpeg: {JPEG_FILES} files through jpeg, their host NV12 rows through raw")
        before = triton_counts(server, "jpeg")
        served_jpeg, jpeg_read = served_top1(
            server, "jpeg", [(np.array([[data]], dtype=object), "BYTES") for data in files]
        )
        served_raw, raw_read = served_top1(
            server, "raw", [(row[None, :, :, None], "UINT8") for row in rows["vpc"]]
        )
        # read after the raw pass: Triton counts a pipelined batch when its execute call returns
        executions = triton_counts(server, "jpeg")[1] - before[1]
        runs = alternate(
            recorder, server, list(JPEG_MODELS), JPEG_LEVELS, plan, "jpeg", None, False, inputs
        )
        count = min(plan.rounds, JPEG_CPU_ROUNDS)
        cpu: dict[str, list[dict[str, float]]] = {name: [] for name in JPEG_MODELS}
        for number in range(count):
            say(f"jpeg: CPU per request, round {number + 1}/{count}")
            for name in JPEG_MODELS if number % 2 == 0 else JPEG_MODELS[::-1]:
                label = f"jpeg-cpu-{name}-c{CPU_CONCURRENCY}-{number + 1}"
                cpu[name].append(
                    cpu_per_request(
                        recorder, server, name, CPU_CONCURRENCY, plan, label, inputs[name]
                    )
                )
    sizes = [len(data) for data in files]
    return {
        "runs": runs,
        "levels": JPEG_LEVELS,
        "cpu": cpu,
        "timing": JPEG_TIMING,
        "files": len(files),
        "file_bytes": {
            "min": min(sizes),
            "median": float(np.median(sizes)),
            "mean": float(np.mean(sizes)),
            "max": max(sizes),
        },
        "raw_row_bytes": rows["vpc"][0].nbytes,
        "bench_file": {
            "width": width,
            "height": height,
            "quality": quality,
            "noise": noise,
            "bytes": len(bench_file),
        },
        "top1": {
            "jpeg": {r: int((served_jpeg == v.argmax(axis=1)).sum()) for r, v in logits.items()},
            "raw": int((served_raw == logits["vpc"].argmax(axis=1)).sum()),
            "classes": len(set(logits["vpc"].argmax(axis=1).tolist())),
            "margin_median": float(np.median(ranked[:, -1] - ranked[:, -2])),
            "target": JPEG_TOP1_TARGET,
            "executions": executions,
        },
        "wire_in": {"jpeg": jpeg_read, "raw": raw_read},
        "host_work_us": {
            "files": host_work_us(files),
            "bench_file": host_work_us([bench_file] * 20),
        },
        "commands": recorder.commands[first:],
    }


PYTHON_SPEED_SNIPPET = "sum(range(50))"


def python_speed_ns() -> float:
    """Nanoseconds per `PYTHON_SPEED_SNIPPET` in this process now (timeit, best of 5)."""
    number = 200_000
    return min(timeit.repeat(PYTHON_SPEED_SNIPPET, number=number, repeat=5)) / number * 1e9


def machine(python_speed: tuple[float, float]) -> list[tuple[str, str]]:
    """What the run ran on; `python_speed` is `python_speed_ns()` at its start and its end."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        # what this run writes does not count as a change to what it measured
        ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no", "--", "."]
        + [":(exclude)BENCHMARKS.md", ":(exclude)benchmarks/results"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    return [
        ("date", datetime.datetime.now().strftime("%Y-%m-%d %H:%M")),
        ("CPU", f"{cpu}, {os.cpu_count()} logical cores"),
        ("memory", f"{psutil.virtual_memory().total / 2**30:.1f} GiB"),
        ("OS", platform.platform()),
        ("Python", platform.python_version()),
        (
            "Python speed",
            f"`{PYTHON_SPEED_SNIPPET}` took {python_speed[0]:.0f} ns at the start of the run and "
            f"{python_speed[1]:.0f} ns at its end (timeit, best of 5; lower is faster)",
        ),
        (
            "packages",
            ", ".join(
                f"{n} {version(n)}"
                for n in ("nvidia-pytriton", "tritonclient", "numpy", "onnxruntime")
            )
            + " (Triton Inference Server 2.51 from nvidia-pytriton)",
        ),
        ("commit", (commit or "unknown") + (" with uncommitted changes" if dirty else "")),
    ]


def measure(plan: Plan, results: Path) -> dict[str, Any]:
    """Every scenario, in a temporary folder; the data the report is written from."""
    started = time.monotonic()
    speed_at_start = python_speed_ns()
    shutil.rmtree(results, ignore_errors=True)
    results.mkdir(parents=True)
    recorder = Recorder(results)
    with tempfile.TemporaryDirectory(prefix="ge-bench-") as temp:
        work = Path(temp)
        logs = work / "logs"
        say(f"building the models in {work}")
        small = build_small_model(work)
        classifier = build_classifier_om(work)
        nms = build_nms_om(work)
        data: dict[str, Any] = {
            "overhead": scenario_overhead(recorder, work, small, plan, logs),
            "naive": scenario_naive(recorder, work, small, plan, logs),
            "efficiency": scenario_efficiency(recorder, work, classifier, plan, logs),
            "scaling": scenario_scaling(recorder, work, small, plan, logs),
            "pipeline": scenario_pipeline(recorder, work, small, plan, logs),
            "saturation": scenario_saturation(recorder, work, small, plan, logs),
            "expert": scenario_expert(recorder, work, small, plan, logs),
            "tune": scenario_tune(recorder, work, small, plan, logs),
            "sysalloc": scenario_sysalloc(recorder, work, nms, plan, logs),
            "device_host": scenario_device_host(recorder, work, small, plan, logs),
            "many_models": scenario_many_models(recorder, work, plan, logs),
            "jpeg": scenario_jpeg(recorder, work, plan, logs),
            "real_models": scenario_real_models(recorder, work, plan, logs),
            "fifty_models": scenario_fifty_models(recorder, work, plan, logs),
        }
    data["commands"] = recorder.commands
    data["plan"] = dataclasses.asdict(plan)
    data["machine"] = machine((speed_at_start, python_speed_ns()))
    data["cpu_count"] = os.cpu_count()
    data["elapsed_s"] = time.monotonic() - started
    (results / "all.json").write_text(json.dumps(data, indent=1))
    return data


SMALL_MODEL_SCENARIOS = {
    "pipeline": scenario_pipeline,
    "saturation": scenario_saturation,
    "expert": scenario_expert,
    "tune": scenario_tune,
    "device_host": scenario_device_host,
}


# Sections that build models of their own.
def scenario_real_models(recorder: Recorder, work: Path, plan: Plan, logs: Path) -> dict[str, Any]:
    """Section 12: the public trained models of tests/real_models.py migrated and served
    (`real_models_bench.measure`), each loaded for the plan's seconds."""
    import real_models_bench

    say(f"real models: migrating and serving them in {work}")
    return real_models_bench.measure(work, logs, plan.seconds)


def scenario_fifty_models(recorder: Recorder, work: Path, plan: Plan, logs: Path) -> dict[str, Any]:
    """Section 13: fifty realistic-size models on one card in three memory modes, and the
    throughput of one under the device host with shared work spaces against a work space per
    lane (`fifty_models_bench.measure`)."""
    import fifty_models_bench

    return fifty_models_bench.measure(recorder, work, plan, logs)


OWN_MODEL_SCENARIOS = {
    "many_models": scenario_many_models,
    "jpeg": scenario_jpeg,
    "real_models": scenario_real_models,
    "fifty_models": scenario_fifty_models,
}
ONLY_SCENARIOS = [*SMALL_MODEL_SCENARIOS, *OWN_MODEL_SCENARIOS]


def measure_only(name: str, plan: Plan, results: Path) -> dict[str, Any]:
    """Only one section of `ONLY_SCENARIOS` (raw JSON next to the others); it also records
    when it was measured, from which commit, and for how long."""
    recorder = Recorder(results)
    started = time.monotonic()
    speed_at_start = python_speed_ns()
    with tempfile.TemporaryDirectory(prefix="ge-bench-") as temp:
        work = Path(temp)
        logs = work / "logs"
        if name in OWN_MODEL_SCENARIOS:
            section = OWN_MODEL_SCENARIOS[name](recorder, work, plan, logs)
        else:
            say(f"building the small model in {work}")
            scenario = SMALL_MODEL_SCENARIOS[name]
            section = scenario(recorder, work, build_small_model(work), plan, logs)
    section["machine"] = machine((speed_at_start, python_speed_ns()))
    section["section_elapsed_s"] = time.monotonic() - started
    return section
