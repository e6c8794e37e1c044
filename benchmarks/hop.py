"""The device host's hop without Triton: one client sends one batch at a time and waits for it.

    python benchmarks/hop.py OM local                 # Session in this process, on CPU 0
    python benchmarks/hop.py OM remote --host-cpu C   # RemoteSession; its device host on CPU C

The client runs on CPU 0 (`sched_setaffinity`); `remote` starts a device host of its own (a
private run directory and emulated host) pinned to CPU C, so `--host-cpu 0` (both on one CPU:
each message hands the CPU over) and `--host-cpu 1` (each message wakes the other CPU) take the
same hop with and without the machine's cross-CPU wake-ups. Prints one JSON line: p50 and p90 of
`submit(...).result()` in microseconds over `--requests` batches of one row, after a warm-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ge_python_backend.devicehost.client import RemoteSession
from ge_python_backend.devicehost.protocol import host_paths
from ge_python_backend.emulator.timing import HOST_DIR_ENV
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.runtime import Session

WARMUP = 300
CLIENT_CPU = 0


def start_host(cpu: int) -> subprocess.Popen[bytes]:
    """A device host of device 0 on CPU `cpu`, listening once this returns."""
    command = [sys.executable, "-m", "ge_python_backend.devicehost", "--device", "0"]
    host = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    socket_path = Path(host_paths(0).socket)
    deadline = time.monotonic() + 60
    while not socket_path.exists():
        if host.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the device host did not start (exit {host.returncode})")
        time.sleep(0.05)
    return host


def measure(session: Session | RemoteSession, requests: int) -> dict[str, float]:
    x = np.ones((1, int(session.inputs[0].shape[1])), np.float32)
    name = session.inputs[0].name
    for _ in range(WARMUP):
        session.submit([{name: x}], pipelined=False).result()
    times = []
    for _ in range(requests):
        start = time.perf_counter()
        session.submit([{name: x}], pipelined=False).result()
        times.append(time.perf_counter() - start)
    times.sort()
    return {"p50_us": times[len(times) // 2] * 1e6, "p90_us": times[len(times) * 9 // 10] * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("om", type=Path)
    parser.add_argument("mode", choices=["local", "remote"])
    parser.add_argument("--host-cpu", type=int, default=1)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ge-hop-") as private:
        os.environ[RUN_DIR_ENV] = os.path.join(private, "run")
        os.environ[HOST_DIR_ENV] = os.path.join(private, "emulator")
        os.sched_setaffinity(0, {CLIENT_CPU})
        if args.mode == "local":
            with Session(args.om, runtime="emulator") as session:
                result = measure(session, args.requests)
        else:
            host = start_host(args.host_cpu)
            try:
                remote = RemoteSession(args.om, 0, runtime="emulator")
                try:
                    result = measure(remote, args.requests)
                finally:
                    remote.close()
            finally:
                host.terminate()
                host.wait(30)
    print(json.dumps({**result, "mode": args.mode, "host_cpu": args.host_cpu}))


if __name__ == "__main__":
    main()
