"""The device host's hop without Triton: one client sends one batch at a time and waits for it.

    python benchmarks/hop.py OM local                 # Session in this process, on CPU 0
    python benchmarks/hop.py OM remote --host-cpu C   # RemoteSession; its device host on CPU C
    python benchmarks/hop.py OM ping --host-cpu C     # the floor: a bare socket ping-pong
    python benchmarks/hop.py OM local|remote --pipelined   # depth 2, batches per second
    python benchmarks/hop.py OM local --evict-mib 8   # 8 MiB read between batches (untimed)
    python benchmarks/hop.py OM local|remote --rows 16   # batches of 16 rows (default 1)

The client runs on CPU 0 (`sched_setaffinity`); `remote` starts a device host of its own (a
private run directory and emulated host) pinned to CPU C, so `--host-cpu 0` (both on one CPU:
each message hands the CPU over) and `--host-cpu 1` (each message wakes the other CPU) take the
same hop with and without the machine's cross-CPU wake-ups; `ping` sends 64 bytes to a process
on CPU C that sends them back, what any hop costs at least on this machine. Prints one JSON
line: p50 and p90 of `submit(...).result()` (or of the ping) in microseconds over `--requests`
batches of `--rows` rows of ones (the model's first input, its other axes as the `.om` has
them), after a warm-up; with `--pipelined`, the batches per second of Triton's
depth-2 pattern (submit pipelined, a completion thread takes the results, `wait_ready` before
the next) for `PIPELINED_S` seconds, executions emulated at `PIPELINED_TIMING`. Either way also
the CPU time per batch of the client's process (with the session in it: `local`) and of the
device host's process (`remote`), which other load on the machine changes far less than the
wall time. With
`--evict-mib N` the client reads N MiB between batches, outside the timing: what another
process's work on the CPU (a device host's, a stub's) does to the caches a batch finds.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.devicehost.client import RemoteSession
from ge_python_backend.devicehost.protocol import host_paths
from ge_python_backend.emulator.timing import HOST_DIR_ENV
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.runtime import Session

WARMUP = 300
CLIENT_CPU = 0
PIPELINED_TIMING = "execute_us=300"
PIPELINED_S = 3.0
PING_BYTES = 64


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


def batch_input(session: Session | RemoteSession, rows: int) -> np.ndarray:
    """`rows` rows of ones for the model's first input."""
    spec = session.inputs[0]
    return np.ones((rows, *spec.shape[1:]), spec.dtype)


def host_cpu_s(session: Session | RemoteSession) -> float:
    """CPU seconds (user and system) the device host's process used so far; 0 for a session in
    this process."""
    if session.host_pid == os.getpid():
        return 0.0
    fields = Path(f"/proc/{session.host_pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def cpu_per_batch(client_s: float, host_s: float, batches: int) -> dict[str, float]:
    return {"client_cpu_us": client_s / batches * 1e6, "host_cpu_us": host_s / batches * 1e6}


def measure(
    session: Session | RemoteSession, requests: int, evict_mib: int, rows: int
) -> dict[str, float]:
    x = batch_input(session, rows)
    name = session.inputs[0].name
    for _ in range(WARMUP):
        session.submit([{name: x}], pipelined=False).result()
    evicting = np.ones(evict_mib << 17)  # float64: 8 bytes each
    times = []
    client_s, host_started = 0.0, host_cpu_s(session)
    for _ in range(requests):
        evicting.sum()
        cpu, start = time.process_time(), time.perf_counter()
        session.submit([{name: x}], pipelined=False).result()
        times.append(time.perf_counter() - start)
        client_s += time.process_time() - cpu
    host_s = host_cpu_s(session) - host_started
    times.sort()
    return {
        "p50_us": times[len(times) // 2] * 1e6,
        "p90_us": times[len(times) * 9 // 10] * 1e6,
        **cpu_per_batch(client_s, host_s, requests),
    }


def measure_pipelined(session: Session | RemoteSession, rows: int) -> dict[str, float]:
    """Batches per second of `rows` rows, depth 2 as `triton.ModelInstance` pipelines them."""
    x = batch_input(session, rows)
    name = session.inputs[0].name
    batches: queue.Queue[Any] = queue.Queue(maxsize=2)
    completed = 0

    def complete() -> None:
        nonlocal completed
        while (batch := batches.get()) is not None:
            batch.result()
            completed += 1

    completer = threading.Thread(target=complete)
    completer.start()
    for _ in range(WARMUP):
        batches.put(session.submit([{name: x}], pipelined=True))
        session.wait_ready()
    start, warm = time.perf_counter(), completed
    cpu, host_started = time.process_time(), host_cpu_s(session)
    while time.perf_counter() - start < PIPELINED_S:
        batches.put(session.submit([{name: x}], pipelined=True))
        session.wait_ready()
    batches.put(None)
    completer.join()
    done = completed - warm
    return {
        "batches_per_s": done / (time.perf_counter() - start),
        **cpu_per_batch(time.process_time() - cpu, host_cpu_s(session) - host_started, done),
    }


def ping(cpu: int, requests: int) -> dict[str, float]:
    """p50/p90 of a bare ping-pong with a process on CPU `cpu` over a Unix socket pair."""
    ours, theirs = socket.socketpair()
    echo = os.fork()
    if echo == 0:
        ours.close()
        os.sched_setaffinity(0, {cpu})
        while data := theirs.recv(1 << 16):
            theirs.sendall(data)
        os._exit(0)
    theirs.close()
    message, times = b"x" * PING_BYTES, []
    for number in range(WARMUP + requests):
        start = time.perf_counter()
        ours.sendall(message)
        ours.recv(1 << 16)
        if number >= WARMUP:
            times.append(time.perf_counter() - start)
    ours.close()
    os.waitpid(echo, 0)
    times.sort()
    return {"p50_us": times[len(times) // 2] * 1e6, "p90_us": times[len(times) * 9 // 10] * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("om", type=Path)
    parser.add_argument("mode", choices=["local", "remote", "ping"])
    parser.add_argument("--host-cpu", type=int, default=1)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--pipelined", action="store_true")
    parser.add_argument("--evict-mib", type=int, default=0, metavar="N")
    parser.add_argument("--rows", type=int, default=1)
    args = parser.parse_args()

    def run(session: Session | RemoteSession) -> dict[str, float]:
        if args.pipelined:
            return measure_pipelined(session, args.rows)
        return measure(session, args.requests, args.evict_mib, args.rows)

    depth = 2 if args.pipelined else 1
    with tempfile.TemporaryDirectory(prefix="ge-hop-") as private:
        os.environ[RUN_DIR_ENV] = os.path.join(private, "run")
        os.environ[HOST_DIR_ENV] = os.path.join(private, "emulator")
        if args.pipelined:
            os.environ["GE_EMULATOR_TIMING"] = PIPELINED_TIMING  # the host inherits it
        os.sched_setaffinity(0, {CLIENT_CPU})
        if args.mode == "ping":
            result = ping(args.host_cpu, args.requests)
        elif args.mode == "local":
            with Session(args.om, runtime="emulator", pipeline_depth=depth) as session:
                result = run(session)
        else:
            host = start_host(args.host_cpu)
            try:
                remote = RemoteSession(args.om, 0, runtime="emulator", pipeline_depth=depth)
                try:
                    result = run(remote)
                finally:
                    remote.close()
            finally:
                host.terminate()
                host.wait(30)
    shown = {"mode": args.mode, "host_cpu": args.host_cpu, "depth": depth, "rows": args.rows}
    print(json.dumps({**result, **shown}))


if __name__ == "__main__":
    main()
