"""Section: the public trained models of tests/real_models.py migrated from a GPU team's
repository on the emulator and served on Triton.

`measure` migrates them (`--samples`: the clients' real requests), serves the result once and
sends each model its first client request from `CLIENTS` closed-loop clients for `seconds`;
per model it records the precision mode migrate chose, the operators it kept in FP32, the gate's
figures on each sample, and the requests sent and Triton's executions (report.py's
`real_models_lines` renders the section).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from ge_python_backend.cli import main as cli_main
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.server import TritonServer

CLIENTS = 8


def _closed_loop(url: str, model: str, request: dict[str, Any], seconds: float) -> int:
    """`CLIENTS` clients each sending `request` again as soon as it is answered; requests sent."""
    counts = [0] * CLIENTS
    deadline = time.monotonic() + seconds

    def client(number: int) -> None:
        with TritonClient(url, "http") as connection:
            while time.monotonic() < deadline:
                connection.infer(model, typed(request))
                counts[number] += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts)


def _executions(url: str, model: str) -> int:
    import tritonclient.http as httpclient

    with httpclient.InferenceServerClient(url) as client:
        stats = client.get_inference_statistics(model)["model_stats"][0]
    return int(stats["execution_count"])


def measure(work: Path, logs: Path, seconds: float) -> dict[str, Any]:
    """Migrate, serve and load each real model (see the module docstring)."""
    import real_models  # tests/real_models.py: scenarios puts tests/ on sys.path

    samples = work / "real-samples"
    source = real_models.build_real_repository(work / "real-gpu", samples)
    destination = work / "real-npu"
    gears = [flag for gear in real_models.GEARS for flag in ("--gears", gear)]
    started = time.monotonic()
    code = cli_main(
        ["migrate", str(source), str(destination), "--runtime", "emulator", *gears]
        + ["--samples", str(samples)]
    )
    migrate_s = time.monotonic() - started
    report = json.loads((destination / "migration.json").read_text())
    requests = real_models.client_requests()
    models: dict[str, Any] = {}
    logs.mkdir(parents=True, exist_ok=True)
    server = TritonServer(destination, log_path=logs / "real-models.log")
    server.start()
    try:
        server.wait_ready(300)
        url = server.urls.http.removeprefix("http://")
        for entry in report["models"]:
            name = entry["name"]
            ladder = entry["accuracy"]["1"]
            kept = (
                next(a for a in ladder["attempts"] if a["passed"])
                if ladder["passed_mode"]
                else None
            )
            before = _executions(url, name)
            sent = _closed_loop(url, name, requests[name][0], seconds)
            executions = _executions(url, name) - before
            models[name] = {
                "mode": entry["precision_mode"],
                "fp32_operators": entry["fp32_operators"],
                "gears": entry["gears"],
                "outputs": [] if kept is None else kept["accuracy"]["outputs"],
                "requests": sent,
                "executions": executions,
                "rows_per_request": int(next(iter(requests[name][0].values())).shape[0]),
            }
    finally:
        server.stop()
    return {
        "exit_code": code,
        "migrate_s": migrate_s,
        "seconds": seconds,
        "clients": CLIENTS,
        "models": models,
    }
