"""Keep sending requests while version 2 of a model is added and loaded; count every answer.

Start the server with explicit model control (see README.md), then run this client against the
repository the server serves:

    ge-python-model serve models --emulator --model-control-mode explicit --load-model NAME
    python examples/hot_reload/client.py --repository models

Sender threads call the model over gRPC without a version (Triton picks the served one) and
record each answer's `model_version` and latency. After `--before` seconds the client runs
`build.py --version N+1`, which adds directory N+1 and points config.pbtxt at its `.om`, then
calls `tritonclient`'s `load_model`: Triton loads the new version while the old one keeps
answering, switches, and unloads the old one (`version_policy` latest 1). The senders go on for
`--after` seconds. The report shows how many requests each version answered, when the switch
happened and how many failed (the exit status is 1 if any did).

The model-repository API (load, unload, index) of a server `serve` runs takes only its key
(docs/guides/reliability/other-users.md): the client sends it in the `ge-repository-key`
header, found as the project's tools find it (`repository_key.find_key`:
`GE_PYTHON_BACKEND_REPOSITORY_KEY`, else the file `serve` left in the run directory for the port,
readable by the server's user only).

Model control goes over HTTP: in Triton 2.51 the HTTP worker thread that handles `load` is busy
for the whole load, so HTTP inference requests that land on that thread (for any model) wait as
long; gRPC inference does not.

`--unload-first` calls `unload_model` before `load_model`, the other way `tritonclient` offers:
then the model is gone between the two calls and the requests sent meanwhile fail (expected, so
the exit status stays 0); the report shows how many.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from ge_python_backend import repository_key

HERE = Path(__file__).resolve().parent
FEATURES = 64


@dataclass(frozen=True)
class Answer:
    sent: float  # seconds since the start
    answered: float
    version: str  # "" when the request failed
    error: str = ""


def sender(url: str, model: str, seed: int, stop: threading.Event, log: list[Answer]) -> None:
    """Send single-row requests back to back until `stop`; append one Answer per request."""
    rng = np.random.default_rng(seed)
    start = time.monotonic()
    with grpcclient.InferenceServerClient(url) as client:
        while not stop.is_set():
            features = rng.standard_normal((1, FEATURES), dtype=np.float32)
            request = grpcclient.InferInput("features", [1, FEATURES], "FP32")
            request.set_data_from_numpy(features)
            sent = time.monotonic() - start
            try:
                result = client.infer(model, [request])
            except InferenceServerException as exc:
                log.append(Answer(sent, time.monotonic() - start, "", str(exc)))
                continue
            answered = time.monotonic() - start
            scores = result.as_numpy("scores")
            if scores is None or scores.shape != (1, 10):
                log.append(Answer(sent, answered, "", f"unexpected scores {scores!r}"))
                continue
            log.append(Answer(sent, answered, result.get_response().model_version))


def settled_versions(
    admin: httpclient.InferenceServerClient, model: str, control: dict[str, str]
) -> list[str]:
    """`version N: STATE (reason)` of the model's versions, once none is still (un)loading.

    Triton unloads the old version after `load_model` returns, when its last request is done.
    """
    deadline = time.monotonic() + 30
    while True:
        index = admin.get_model_repository_index(headers=control)
        entries = [e for e in index if e["name"] == model]
        busy = any(e.get("state") in ("LOADING", "UNLOADING") for e in entries)
        if not busy or time.monotonic() > deadline:
            return [
                f"version {e.get('version')}: {e.get('state')}"
                + (f" ({e['reason']})" if e.get("reason") else "")
                for e in entries
            ]
        time.sleep(0.1)


def next_version(repository: Path, model: str) -> int:
    numbers = [int(p.name) for p in (repository / model).iterdir() if p.name.isdigit()]
    return max(numbers, default=0) + 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url", default="127.0.0.1:8000", help="Triton HTTP address (model control)"
    )
    parser.add_argument(
        "--grpc-url", default="127.0.0.1:8001", help="Triton gRPC address (inference)"
    )
    parser.add_argument("--model", default="tiny_classifier")
    parser.add_argument(
        "--repository", type=Path, required=True, help="the repository the server serves"
    )
    parser.add_argument("--workdir", type=Path, default=Path("build/hot_reload"))
    parser.add_argument(
        "--om", type=Path, help="the new version's .om (e.g. from ATC), passed to build.py"
    )
    parser.add_argument(
        "--runtime", choices=("emulator", "pyacl"), default="emulator", help="passed to build.py"
    )
    parser.add_argument("--senders", type=int, default=2, help="concurrent sender threads")
    parser.add_argument("--before", type=float, default=2.0, help="seconds before the reload")
    parser.add_argument("--after", type=float, default=2.0, help="seconds after the reload")
    parser.add_argument(
        "--unload-first",
        action="store_true",
        help="unload_model before load_model (shows the failures that leaves)",
    )
    args = parser.parse_args(argv)

    # The header of the model-repository API's key (none found: Triton refuses the load).
    control = repository_key.request_headers(repository_key.find_key(args.url), "http")
    with httpclient.InferenceServerClient(args.url) as admin:
        if not admin.is_model_ready(args.model):
            raise SystemExit(
                f"model {args.model!r} is not loaded; start the server with "
                f"--model-control-mode explicit --load-model {args.model}"
            )
        serving = admin.get_model_metadata(args.model)["versions"]
        print(f"{args.model}: serving version(s) {', '.join(serving)}")

        stop = threading.Event()
        logs: list[list[Answer]] = [[] for _ in range(args.senders)]
        threads = [
            threading.Thread(target=sender, args=(args.grpc_url, args.model, n, stop, logs[n]))
            for n in range(args.senders)
        ]
        start = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(args.before)

        version = next_version(args.repository, args.model)
        command = [
            sys.executable,
            str(HERE / "build.py"),
            str(args.repository),
            "--version",
            str(version),
            "--name",
            args.model,
            "--workdir",
            str(args.workdir),
            "--runtime",
            args.runtime,
            *(["--om", str(args.om)] if args.om else []),
        ]
        print(f"[{time.monotonic() - start:5.2f} s] adding version {version}:", flush=True)
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        load_started = time.monotonic() - start
        if args.unload_first:
            print(f"[{load_started:5.2f} s] unload_model({args.model!r}) ...", flush=True)
            admin.unload_model(args.model, headers=control)
            print(f"[{time.monotonic() - start:5.2f} s] unload_model returned", flush=True)
        print(f"[{time.monotonic() - start:5.2f} s] load_model({args.model!r}) ...", flush=True)
        admin.load_model(args.model, headers=control)
        load_ended = time.monotonic() - start
        print(f"[{load_ended:5.2f} s] load_model returned", flush=True)
        time.sleep(args.after)
        stop.set()
        for thread in threads:
            thread.join()
        states = settled_versions(admin, args.model, control)

    answers = sorted((a for log in logs for a in log), key=lambda a: a.sent)
    failed = [a for a in answers if a.error]
    counts = Counter(a.version for a in answers if not a.error)
    print(f"{len(answers)} requests from {args.senders} threads, {len(failed)} failed")
    for name in sorted(counts, key=int):
        times = [a.sent for a in answers if a.version == name]
        print(
            f"  version {name}: {counts[name]} answers, "
            f"sent from {min(times):.2f} s to {max(times):.2f} s"
        )
    during = [
        a.answered - a.sent for a in answers if not a.error and load_started <= a.sent <= load_ended
    ]
    if during:
        print(
            f"  while version {version} loaded: {len(during)} answers, slowest "
            f"{1000 * max(during):.1f} ms"
        )
    if failed:
        print(f"  failed from {failed[0].sent:.2f} s to {failed[-1].sent:.2f} s:")
    for error, count in Counter(a.error for a in failed).most_common(3):
        print(f"    {count} x {error}")
    print(f"repository index: {'; '.join(states)}")
    if failed and args.unload_first:
        print("(expected with --unload-first: nothing serves the model between the two calls)")
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
