"""How many streams a device host's pool needs: throughput with shared work spaces on N streams
against a work space per lane, in one process as in a device host, on the emulator.

    python benchmarks/work_spaces.py       # N = 1, 2, 4, 8, 4 zeroed between models, per-lane
    python benchmarks/work_spaces.py --seconds 10 --rounds 5 --streams 2 4

Two loads, each for every setting in turn, in `--rounds` rounds (each round a fresh pool per
setting; the median round is reported, so that a busy spell of the machine does not land on
one setting alone): 4 models x 2
instances (sessions of 2 lanes) with 8 clients per model (4 per instance), and 1 model x 2
instances with 8 clients. A client sends one request of one row and waits for it, again and
again (`Session.infer`). The models take an ImageNet-sized input (1x3x224x224 float32, 602 KB),
compute little on the CPU and are timed by the emulator's device model
(`profile=resnet50-310p3`: 2.26 ms + 0.2 ms per row of execution on one AI Core the streams take
in turns, copies at 10 GB/s on one engine each way, memsets at 204.8 GB/s). Prints one JSON line
per load and setting: requests per second (median, and every round's), and the device memory
the sessions hold (emulator counters).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from ge_python_backend import emulator
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.runtime import Session
from ge_python_backend.runtime.workspaces import WorkSpaces, WorkSpaceSettings

TIMING = "profile=resnet50-310p3"
PIXELS = 3 * 224 * 224


def build_model(directory: Path, number: int) -> Path:
    """`x` FLOAT[N,150528] -> `y` FLOAT[N,1] = sum(x * w) (a weight per pixel: 602 KB)."""
    rng = np.random.default_rng(number)
    weight = helper.make_tensor(
        "w", TensorProto.FLOAT, [PIXELS], rng.standard_normal(PIXELS).astype(np.float32)
    )
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "w"], ["scaled"]),
            helper.make_node("ReduceSum", ["scaled", "axes"], ["y"], keepdims=1),
        ],
        f"model{number}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", PIXELS])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])],
        [weight, axes],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx_path = directory / f"model{number}.onnx"
    onnx.save(model, onnx_path)
    return compile_onnx(
        onnx_path,
        directory / f"model{number}",
        input_shape=f"x:-1,{PIXELS}",
        dynamic_batch_size="1,2,4,8",
    )


def run_load(
    models: list[Path], instances: int, clients: int, settings: WorkSpaceSettings, seconds: float
) -> dict[str, float]:
    """Requests per second of `clients` clients per model over its `instances` sessions."""
    before = emulator.stats()["device_bytes_in_use"]
    spaces = WorkSpaces(settings)
    sessions = [
        Session(path, runtime="emulator", pipeline_depth=2, work_spaces=spaces)
        for path in models
        for _ in range(instances)
    ]
    held = emulator.stats()["device_bytes_in_use"] - before
    x = np.random.default_rng(0).standard_normal((1, PIXELS)).astype(np.float32)
    for session in sessions:
        session.infer({"x": x})  # warm
    counts = [0] * (len(models) * clients)
    stop = threading.Event()

    def client(number: int, session: Session) -> None:
        while not stop.is_set():
            session.infer({"x": x})
            counts[number] += 1

    threads = [
        threading.Thread(target=client, args=(number, sessions[number // (clients // instances)]))
        for number in range(len(counts))
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for session in sessions:
        session.close()
    return {"requests_per_s": round(sum(counts) / elapsed, 1), "device_mib": held / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, nargs="*", default=[1, 2, 4, 8])
    args = parser.parse_args()
    os.environ.pop("GE_PYTHON_BACKEND_ACL", None)
    with tempfile.TemporaryDirectory() as work:
        os.environ.setdefault("GE_EMULATOR_HOST_DIR", str(Path(work) / "host"))
        os.environ.setdefault("GE_PYTHON_BACKEND_RUN_DIR", str(Path(work) / "run"))
        models = [build_model(Path(work), number) for number in range(4)]
        emulator.set_timing(TIMING)
        settings = [WorkSpaceSettings(n) for n in args.streams]
        settings.append(WorkSpaceSettings(zero_between_models=True))  # the default N, zeroed
        settings.append(WorkSpaceSettings(shared=False))
        loads = (("4 models x 2", models, 2), ("1 model x 2", models[:1], 2))
        for name, chosen, instances in loads:
            rounds: list[list[dict[str, float]]] = [[] for _ in settings]
            for _ in range(args.rounds):
                for number, setting in enumerate(settings):
                    rounds[number].append(run_load(chosen, instances, 8, setting, args.seconds))
            for setting, results in zip(settings, rounds):
                rates = sorted(result["requests_per_s"] for result in results)
                line = {
                    "load": name,
                    "mode": setting.mode + (", zeroed" if setting.zero_between_models else ""),
                    "streams": setting.streams if setting.shared else None,
                    "requests_per_s": rates[len(rates) // 2],
                    "rounds": [result["requests_per_s"] for result in results],
                    "device_mib": round(results[0]["device_mib"], 1),
                }
                print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
