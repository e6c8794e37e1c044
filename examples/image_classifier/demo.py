"""`make demo`: build a classifier, compile it for the emulator, scaffold, serve, and query it.

Every step is the command a user would type; the client talks to the real tritonserver through
tritonclient. Work files go to ./demo-work (or the directory given as the first argument).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as httpclient

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
MODEL = "classifier"
HTTP_PORT, GRPC_PORT, METRICS_PORT = 18000, 18001, 18002


def run(*command: str) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def wait_until_ready(client: httpclient.InferenceServerClient, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with code {server.returncode}")
        try:
            if client.is_model_ready(MODEL):
                return
        except Exception:  # the server is still starting
            pass
        time.sleep(0.5)
    raise SystemExit("the model did not become ready within 120 s")


def _inputs(images: np.ndarray) -> list[httpclient.InferInput]:
    request = httpclient.InferInput("input", list(images.shape), "FP32")
    request.set_data_from_numpy(images)
    return [request]


def classify(client: httpclient.InferenceServerClient, images: np.ndarray) -> np.ndarray:
    """One blocking request: the logits of each image."""
    result = client.infer(MODEL, _inputs(images))
    return result.as_numpy("logits")


def send(client: httpclient.InferenceServerClient, images: np.ndarray) -> Any:
    """One request in flight; `.get_result()` waits for it."""
    return client.async_infer(MODEL, _inputs(images))


def request_counts(client: httpclient.InferenceServerClient) -> tuple[int, int, int]:
    """Triton's cumulative (requests, images, executions) of the model."""
    stats = client.get_inference_statistics(MODEL)["model_stats"][0]
    requests = int(stats["inference_stats"]["success"]["count"])
    return requests, int(stats["inference_count"]), int(stats["execution_count"])


def batching_sentence(before: tuple[int, int, int], after: tuple[int, int, int]) -> str:
    """What Triton's statistics say the dynamic batcher did between two reads."""
    requests, images, executions = (a - b for a, b in zip(after, before))
    merged = (
        "the dynamic batcher merged requests"
        if executions < requests
        else "the dynamic batcher merged nothing"
    )
    return f"Triton: {requests} requests ({images} images) ran in {executions} executions: {merged}"


def main() -> None:
    work = Path(sys.argv[1] if len(sys.argv) > 1 else "demo-work").resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cli = str(BIN / "ge-python-model")
    run(sys.executable, str(HERE / "build_model.py"), str(work / f"{MODEL}.onnx"))
    run(
        cli,
        "emulator",
        "compile",
        "--model",
        str(work / f"{MODEL}.onnx"),
        "--framework",
        "5",
        "--output",
        str(work / MODEL),
        "--input_shape",
        "input:-1,3,224,224",
        "--dynamic_batch_size",
        "1,2,4,8",
        "--soc_version",
        "Ascend310P3",
    )
    run(cli, "inspect", str(work / f"{MODEL}.om"), "--runtime", "emulator")
    run(
        cli,
        "scaffold",
        str(work / f"{MODEL}.om"),
        "--repository",
        str(work / "models"),
        "--name",
        MODEL,
        "--runtime",
        "emulator",
    )
    command = [
        cli,
        "serve",
        str(work / "models"),
        "--emulator",
        "--http-port",
        str(HTTP_PORT),
        "--grpc-port",
        str(GRPC_PORT),
        "--metrics-port",
        str(METRICS_PORT),
    ]
    print("$", " ".join(command), flush=True)
    server = subprocess.Popen(command)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{HTTP_PORT}", concurrency=8)
    try:
        wait_until_ready(client, server)
        image = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
        logits = classify(client, image)[0]
        top5 = np.argsort(logits)[::-1][:5]
        print("\ntop-5 classes for one [1,3,224,224] image:")
        for rank, cls in enumerate(top5, 1):
            print(f"  {rank}. class {cls:4d}  logit {logits[cls]:9.4f}")
        print("\n16 concurrent requests, 1 to 3 images each (Triton batches them on the device):")
        rng = np.random.default_rng(1)
        batches = [
            rng.random((int(n), 3, 224, 224), dtype=np.float32) for n in rng.integers(1, 4, size=16)
        ]
        before = request_counts(client)
        pending = [send(client, b) for b in batches]
        answers = [p.get_result().as_numpy("logits") for p in pending]
        print("  predicted classes:", [a.argmax(axis=1).tolist() for a in answers])
        print("  " + batching_sentence(before, request_counts(client)))
    finally:
        client.close()  # open keep-alive connections would hold up the server's shutdown
        server.send_signal(signal.SIGINT)
        server.wait(timeout=60)
        print("server stopped")


if __name__ == "__main__":
    main()
