"""Model files run in this process, without Triton, through the shipped stand-in for `pb_utils`.

`triton_python_backend_utils` exists only inside the Python backend's stub. `load_model(path)`
imports a `model.py` with `ge_python_backend.triton.testing`'s stand-in in its place (`install`),
so the emulator's counters and the time of `execute` can be read per batch with nothing else in
the process. `run_batches` collects the responses at any pipeline depth (at depth 2 they arrive
through each request's response sender).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.repository.config import load_model_config
from ge_python_backend.triton import testing

# Warm-up before counting: at pipeline depth 2 the instance decides every 0.1 s whether its
# executions are long enough to pipeline (`pipeline_min_device_us`); served, it runs settled.
WARMUP_S = 0.5


def load_model(model_dir: Path, version: str = "1") -> Any:
    """`TritonPythonModel()` of `<model_dir>/<version>/model.py`, initialized as Triton would."""
    testing.install()
    path = model_dir / version / "model.py"
    spec = importlib.util.spec_from_file_location(f"bench_model_{model_dir.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = load_model_config(model_dir / "config.pbtxt")
    from google.protobuf import json_format

    args = {
        "model_config": json.dumps(
            json_format.MessageToDict(config, preserving_proto_field_name=True)
        ),
        "model_instance_kind": "CPU",
        "model_instance_name": f"{model_dir.name}_0_0",
        "model_instance_device_id": "0",
        "model_repository": str(model_dir),
        "model_version": version,
        "model_name": model_dir.name,
    }
    model = module.TritonPythonModel()
    if hasattr(model, "initialize"):
        model.initialize(args)
    return model


def requests_of(feeds: Sequence[Mapping[str, np.ndarray]]) -> list[testing.InferenceRequest]:
    """Stand-in requests carrying `feeds` (one request per mapping)."""
    return [
        testing.InferenceRequest(inputs=[testing.Tensor(n, a) for n, a in f.items()]) for f in feeds
    ]


def run_batches(
    model: Any, requests: Sequence[testing.InferenceRequest], times: int
) -> list[testing.InferenceResponse]:
    """`model.execute(requests)` `times` times back to back; the responses of the last call.

    At pipeline depth 2 `execute` returns None and the responses come through the requests'
    response senders: they are collected once every call was made (the model's own bounded
    completion queue keeps at most its depth of batches in flight meanwhile).
    """
    answered = None
    for _ in range(times):
        answered = model.execute(requests)
    if answered is not None:
        return list(answered)
    sent = [[request.sent.get(timeout=60)[0] for _ in range(times)] for request in requests]
    return [responses[-1] for responses in sent]


def measure_counters(model_dir: Path, requests: int, batches: int) -> dict[str, Any]:
    """Emulator counters and wall time per `execute` of `requests` one-row requests."""
    from ge_python_backend import emulator

    config = load_model_config(model_dir / "config.pbtxt")
    width = int(config.input[0].dims[-1])
    rng = np.random.default_rng(0)
    batch = requests_of(
        [{config.input[0].name: rng.standard_normal((1, width), np.float32)}] * requests
    )
    model = load_model(model_dir)
    warm_until = time.perf_counter() + WARMUP_S
    while time.perf_counter() < warm_until:
        run_batches(model, batch, 20)
    before = emulator.stats()
    started = time.perf_counter()
    responses = run_batches(model, batch, batches)
    seconds = time.perf_counter() - started
    after = emulator.stats()
    failed = [r.error().message() for r in responses if r.error() is not None]
    if failed:
        raise RuntimeError(f"{model_dir.name}: {failed[0]}")
    with acl_clock() as inside:
        started = time.perf_counter()
        run_batches(model, batch, batches)
        timed = time.perf_counter() - started
    if hasattr(model, "finalize"):
        model.finalize()
    per_batch = {key: (after[key] - before[key]) / batches for key in after}
    return {
        "per_batch": per_batch,
        "us_per_batch": seconds / batches * 1e6,
        "acl_share": inside[0] / timed,  # of the wall time of `execute`, inside pyACL calls
    }


@contextlib.contextmanager
def acl_clock() -> Iterator[list[float]]:
    """Seconds spent inside the emulator's pyACL functions while the block runs (outermost calls).

    Every function of `acl`, `acl.rt`, `acl.mdl` and `acl.util` is wrapped for the block; the
    models look them up on the module at each call, so they call the wrappers.
    """
    from ge_python_backend.emulator import acl

    spent = [0.0]
    depth = threading.local()

    def timed(function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            if getattr(depth, "value", 0):
                return function(*args)
            depth.value = 1
            started = time.perf_counter()
            try:
                return function(*args)
            finally:
                spent[0] += time.perf_counter() - started
                depth.value = 0

        return wrapper

    originals = [
        (module, name, value)
        for module in (acl, acl.rt, acl.mdl, acl.util)
        for name, value in vars(module).items()
        if hasattr(value, "__wrapped__")  # the emulator's `api` functions
    ]
    for module, name, value in originals:
        setattr(module, name, timed(value))
    try:
        yield spent
    finally:
        for module, name, value in originals:
            setattr(module, name, value)


def measure_session(om_path: Path, rows: int, seconds: float) -> dict[str, Any]:
    """Rows per second of `Session.infer` on batches of `rows` random rows, for `seconds`."""
    from ge_python_backend.runtime import Session

    with Session(om_path, runtime="emulator") as session:
        spec = session.inputs[0]
        shape = (rows, *spec.shape[1:])
        feeds = {spec.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
        session.infer(feeds)
        calls, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            session.infer(feeds)
            calls += 1
        elapsed = time.perf_counter() - started
    return {"rows": rows, "calls": calls, "seconds": elapsed, "rows_per_s": calls * rows / elapsed}


def main() -> None:
    """`counters MODEL_DIR N BATCHES` or `session OM ROWS SECONDS`: one JSON line on stdout."""
    kind, path, first, second = sys.argv[1:5]
    if kind == "counters":
        result = measure_counters(Path(path), int(first), int(second))
    else:
        result = measure_session(Path(path), int(first), float(second))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
