"""Device host against in-stub serving for one model: throughput at 8 clients, p50 at 1 client.

One tritonserver serves the small model (`y = 2x + 1`, FP32[N, 64], batch gears) twice: `stub`
(its stub opens the device, device_host off) and `host` (device_host on: the device host serves
it); answers are checked, then each level runs for both in alternating rounds (A B B A). Prints
one JSON document (the per-round results and the ratios) on stdout. Not part of `make bench`
yet:

    PYTHONPATH=. .venv/bin/python benchmarks/device_host.py [--rounds 4] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
from scenarios import WIDTH, build_small_model, check_answers, say, serving

from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.tools.bench import Target, run_level

MODELS = {"stub": None, "host": True}  # name -> device_host


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ge-bench-device-host-") as work:
        root = Path(work)
        om = build_small_model(root)
        repository = root / "models"
        for name, device_host in MODELS.items():
            scaffold(om, repository, name=name, runtime="emulator", device_host=device_host)
        results: dict[str, dict[int, list[dict[str, float]]]] = {
            name: {1: [], 8: []} for name in MODELS
        }
        with serving(repository, root) as server:
            for name in MODELS:
                check_answers(server, name)
            x = np.ones((1, WIDTH), np.float32)
            order = [(level, name) for level in (1, 8) for name in MODELS]
            for number in range(options.rounds):
                for level, name in order if number % 2 == 0 else order[::-1]:
                    say(f"device host: {name}, round {number + 1}, concurrency {level}")
                    target = Target(server.urls.grpc, "grpc", name, {"x": (x, "FP32")}, ["y"])
                    result = run_level(target, level, duration=options.seconds, warmup=20)
                    results[name][level].append(
                        {"throughput_rps": result.throughput_rps, "p50_ms": result.p50_ms or 0.0}
                    )
    median = {
        name: {
            "throughput_8": statistics.median(r["throughput_rps"] for r in by_level[8]),
            "p50_1_us": statistics.median(r["p50_ms"] for r in by_level[1]) * 1000,
        }
        for name, by_level in results.items()
    }
    summary = {
        "throughput_ratio_8_clients": median["host"]["throughput_8"]
        / median["stub"]["throughput_8"],
        "p50_delta_1_client_us": median["host"]["p50_1_us"] - median["stub"]["p50_1_us"],
        "median": median,
        "rounds": results,
        "command": " ".join(sys.argv),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
