"""The watcher (`ge-python-model watch`): heals models whose stub died or whose inference hangs.

Triton 2.51 keeps a model READY after its Python-backend stub process died (killed, or crashed by
a request): every request then fails with `Stub process ... is not healthy`, nothing is logged
and nothing restarts it. The watcher probes every READY model at an interval with the probe's
real inference (`tools.probe`); a model whose stub is dead, whose probe exceeds the timeout, or
one of whose instances serves nothing until the model is reloaded (a device-host instance whose
`.om` changed on disk: the load then fails with the reason, the model UNAVAILABLE) is reloaded
through the model-control API (unload, then load: Triton's load alone keeps the dead stub), which
needs a server in explicit model-control mode. Reloads are retried with a doubling
backoff, at most `retries` times in a row; a server that refuses them (mode none) is reported.
Every probe failure and action is logged; `WatchMetrics` counts them for Prometheus.

One probe reaches one instance, so a model of several instances is also checked through its
processes when the server's are visible (a server on this host, found by the process listening
on the URL's port): each instance runs in a stub process of its own, and a model with fewer
live stubs than its config's instances has a dead one (`dead_instances`). A reload first lets
Triton drain the model (`TritonClient.unload_drained`, at most `DRAIN_TIMEOUT_S`) so that old
and new instances do not execute side by side.
"""

from __future__ import annotations

import collections
import dataclasses
import http.server
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.client import TritonClient, error_text, server_url
from ge_python_backend.devicehost.protocol import RELOAD_NEEDED
from ge_python_backend.errors import UserError
from ge_python_backend.server import listening_pids
from ge_python_backend.tools.probe import DEFAULT_TIMEOUT_S, ProbeResult, probe

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 5.0
DEFAULT_RETRIES = 3
DEFAULT_METRICS_PORT = 8003  # `watch`'s; beside `serve`'s server: metrics_port_beside
# Seconds before the first retry of a failed reload; each further retry waits twice as long.
FIRST_BACKOFF_S = 1.0
# What Triton's Python backend answers once a model's stub process is gone.
DEAD_STUB_TEXT = "is not healthy"
# What the watcher's instance check says of instances without a live stub process.
DEAD_INSTANCE_TEXT = "without a live stub process"
# What Triton answers a load or unload outside explicit model-control mode.
NOT_EXPLICIT_TEXT = "explicit model load / unload is not allowed"
# Seconds a reload waits for Triton to drain the model (answer its executions in flight and
# finalize its instances) before loading it anyway: Triton 2.51 never finishes unloading a model
# one of whose stubs died under a request (still UNLOADING 15 s after, measured).
DRAIN_TIMEOUT_S = 2.0
# The Python backend's stub program, as /proc/<pid>/comm shows it (15 characters).
STUB_COMM = "triton_python_backend_stub"[:15]

METRICS = {
    "ge_watch_probes_total": "Probes (one real inference each) the watcher sent, by model.",
    "ge_watch_failures_total": "Probes that failed (error, malformed answer or timeout), by model.",
    "ge_watch_reloads_total": "Reloads (unload, then load) the watcher made, by model.",
}


def metrics_port_beside(server_ports: Sequence[int]) -> int:
    """The watcher's metrics port beside a server listening on `server_ports` (0: a free one):
    one above the highest fixed one (8003 beside Triton's 8000-8002), so that each server's
    watcher has a port of its own; 0 (a free port) when they are all 0 (or the highest is
    65535)."""
    highest = max(server_ports, default=0)
    return highest + 1 if 0 < highest < 65535 else 0


class WatchMetrics:
    """Counters of `METRICS` by model, thread-safe, in Prometheus's text format (`render`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, collections.Counter[str]] = {
            name: collections.Counter() for name in METRICS
        }

    def count(self, metric: str, model: str) -> None:
        with self._lock:
            self._counts[metric][model] += 1

    def value(self, metric: str, model: str) -> int:
        with self._lock:
            return self._counts[metric][model]

    def render(self) -> str:
        lines = []
        with self._lock:
            for name, help_text in METRICS.items():
                lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
                for model, count in sorted(self._counts[name].items()):
                    escaped = model.replace("\\", "\\\\").replace('"', '\\"')
                    lines.append(f'{name}{{model="{escaped}"}} {count}')
        return "\n".join(lines) + "\n"


def serve_metrics(
    metrics: WatchMetrics, port: int, host: str = "0.0.0.0"
) -> http.server.ThreadingHTTPServer:
    """Serve `GET /metrics` on `host:port` (0: a free port; see `server_address`) in a daemon
    thread; `shutdown()` the returned server to stop."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = metrics.render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            logger.debug("metrics endpoint: " + format, *args)

    try:
        httpd = http.server.ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise UserError(f"cannot serve the watcher's metrics on {host}:{port}: {exc}") from None
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, name="ge-watch-metrics", daemon=True).start()
    return httpd


@dataclasses.dataclass(frozen=True)
class StubProcess:
    """A live stub process of the Python backend: the model (its directory's name), version
    and model instance it serves."""

    pid: int
    model: str
    version: str
    instance: str


def live_stubs(server_pid: int) -> list[StubProcess]:
    """The live stub processes of the tritonserver `server_pid`, from /proc.

    A stub's command line is `<stub> <model dir>/<version>/model.py <shm region> <sizes> <parent
    pid> <python dir> <ipc handle> <instance name> <runtime>` (python_backend's
    src/stub_launcher.cc). A killed stub stays a zombie until Triton waits for it, with an empty
    command line, so it is not listed.
    """
    stubs = []
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_bytes()
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            comm = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode(errors="replace")
            state, ppid = stat[stat.rfind(b")") + 2 :].split()[:2]
            if comm != STUB_COMM or int(ppid) != server_pid or state == b"Z":
                continue
            argv = (stat_path.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
        if len(argv) > 8:
            version_dir = Path(os.fsdecode(argv[1])).parent
            stubs.append(
                StubProcess(
                    int(stat_path.parent.name),
                    version_dir.parent.name,
                    version_dir.name,
                    os.fsdecode(argv[8]),
                )
            )
    return stubs


def configured_instances(config: ModelConfig) -> int:
    """How many instances (stub processes) Triton runs for `config`: each instance group's
    count, per GPU for a group that names GPUs."""
    return sum(group.count * max(1, len(group.gpus)) for group in config.instance_group)


def dead_instances(model: str, expected: int, stubs: Sequence[StubProcess]) -> int:
    """How many of the `expected` instances of `model` (of all its READY versions) have no live
    stub in `stubs` (a model being reloaded has the old and the new ones: counted by version
    and instance name)."""
    # The stub that auto-completes a config at load is named after the model itself.
    live = {(s.version, s.instance) for s in stubs if s.model == model and s.instance != model}
    return max(expected - len(live), 0)


@dataclasses.dataclass
class Watcher:
    """Watch the models of the server at `url` (HOST:PORT over `protocol`); `models` limits it
    to those names (empty: every READY model). `run` loops until `stop` is set."""

    url: str
    protocol: str = "http"
    models: tuple[str, ...] = ()
    interval: float = DEFAULT_INTERVAL_S
    timeout: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    metrics: WatchMetrics = dataclasses.field(default_factory=WatchMetrics)
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.url = server_url(self.url, self.protocol)
        if not self.interval > 0:
            raise UserError(f"the interval must be > 0 seconds, got {self.interval}")
        if not self.timeout > 0:
            raise UserError(f"the timeout must be > 0 seconds, got {self.timeout}")
        if self.retries < 1:
            raise UserError(f"retries must be >= 1, got {self.retries}")
        self._given_up: set[str] = set()  # models whose reloads all failed, until they recover
        self._server_pid: int | None = None  # the tritonserver listening at `url`, if visible
        self._unseen_logged = False
        self._retired: set[int] = set()  # stubs of instances unloaded by a reload

    def run(self) -> None:
        """Probe and heal at every interval until `stop` is set."""
        logger.info(
            "watching %s://%s every %g s (timeout %g s, %d reload attempts)",
            self.protocol,
            self.url,
            self.interval,
            self.timeout,
            self.retries,
        )
        while not self.stop.is_set():
            started = time.monotonic()
            self.check_once()
            self.stop.wait(max(self.interval - (time.monotonic() - started), 0.0))

    def ready_models(self) -> dict[str, int]:
        """The READY models to watch, with how many versions of each are READY (none when the
        server does not answer: logged)."""
        try:
            with TritonClient(self.url, self.protocol, timeout_s=self.timeout) as client:
                index = client.repository_index()
        except Exception as exc:  # tritonclient raises its own and OSError-like errors
            logger.warning(
                "cannot read the model index of %s://%s: %s",
                self.protocol,
                self.url,
                error_text(exc),
            )
            return {}
        ready = [entry["name"] for entry in index if entry.get("state") == "READY"]
        return {
            name: count
            for name, count in collections.Counter(ready).items()
            if not self.models or name in self.models
        }

    def check_once(self) -> None:
        """One round: probe every READY model, count its live stubs against its instances when
        the server's processes are visible, and heal the ones that need it."""
        models = self.ready_models()
        stubs = self._stubs() if models else None
        for model, versions in models.items():
            if self.stop.is_set():
                return
            result = self._probe(model)
            if result.ok and stubs is not None:
                result = self._check_instances(model, versions, stubs)
            if result.ok:
                if model in self._given_up:
                    logger.info("model %r answers again", model)
                    self._given_up.discard(model)
                continue
            if not needs_reload(result):
                continue  # an error the model itself returns: reloading would not change it
            if model in self._given_up:
                logger.error("model %r still fails; reloads gave up, needs an operator", model)
                continue
            self.heal(model, result)

    def _stubs(self) -> list[StubProcess] | None:
        """The live stubs of the server at `url`, but those of instances this watcher unloaded
        (an unload Triton never finishes leaves them); None when its processes are not visible
        (a server on another host, in another PID namespace or of another user: logged once)."""
        if self._server_pid is None or not os.path.isdir(f"/proc/{self._server_pid}"):
            port = int(self.url.rpartition(":")[2])
            pids = listening_pids(port)
            self._server_pid = min(pids) if len(pids) == 1 else None
            if self._server_pid is None:
                if not self._unseen_logged:
                    logger.warning(
                        "the processes of the server at %s are not visible from here: one probe "
                        "per model, so a dead stub of one of several instances may go unseen",
                        self.url,
                    )
                    self._unseen_logged = True
                return None
        stubs = live_stubs(self._server_pid)
        self._retired &= {stub.pid for stub in stubs}
        return [stub for stub in stubs if stub.pid not in self._retired]

    def _check_instances(self, model: str, versions: int, stubs: list[StubProcess]) -> ProbeResult:
        """A failed result when an instance of `model` (`versions` READY) has no live stub, else
        an ok one."""
        try:
            with TritonClient(self.url, self.protocol, timeout_s=self.timeout) as client:
                expected = versions * configured_instances(client.model_config(model))
        except Exception as exc:  # tritonclient's errors: the model went away meanwhile
            logger.warning("cannot read the config of model %r: %s", model, error_text(exc))
            return ProbeResult(True, "config not read", 0.0)
        dead = dead_instances(model, expected, stubs)
        if not dead:
            return ProbeResult(True, f"{expected} instances alive", 0.0)
        self.metrics.count("ge_watch_failures_total", model)
        message = f"model {model!r}: {dead} of its {expected} instances {DEAD_INSTANCE_TEXT}"
        logger.warning("instance check failed: %s", message)
        return ProbeResult(False, message, 0.0)

    def _probe(self, model: str) -> ProbeResult:
        self.metrics.count("ge_watch_probes_total", model)
        result = probe(self.url, model, protocol=self.protocol, timeout=self.timeout)
        if result.ok:
            logger.debug("probe ok: %s", result.message)
        else:
            self.metrics.count("ge_watch_failures_total", model)
            logger.warning("probe failed: %s", result.message)
        return result

    def heal(self, model: str, failure: ProbeResult) -> bool:
        """Reload `model` (unload, then load) until a probe passes, at most `retries` times with
        a doubling backoff; False if it still fails or the server refuses reloads."""
        why = reload_reason(failure)
        for attempt, backoff in enumerate(_backoffs(self.retries), start=1):
            if attempt > 1:
                logger.info("retrying the reload of %r in %g s", model, backoff)
                if self.stop.wait(backoff):
                    return False
            logger.warning(
                "reloading model %r (attempt %d of %d): %s", model, attempt, self.retries, why
            )
            try:
                self.metrics.count("ge_watch_reloads_total", model)
                self._reload(model)
            except Exception as exc:  # tritonclient's errors, or the server went away
                text = error_text(exc)
                if NOT_EXPLICIT_TEXT in text:
                    logger.error(
                        "cannot reload model %r: the server is not in explicit model-control "
                        "mode (%s); restart the model or the server by hand",
                        model,
                        text,
                    )
                    self._given_up.add(model)
                    return False
                logger.error("reload of model %r failed: %s", model, text)
                continue
            result = self._probe(model)
            if result.ok:
                logger.info("model %r healed by reload: %s", model, result.message)
                return True
        logger.error(
            "model %r still fails after %d reloads; giving up until it answers again",
            model,
            self.retries,
        )
        self._given_up.add(model)
        return False

    def _reload(self, model: str) -> None:
        # A load alone keeps a dead stub: Triton reuses the loaded instance.
        stubs = self._stubs()
        old = {stub.pid for stub in stubs or () if stub.model == model}
        with TritonClient(self.url, self.protocol) as client:
            if stubs is not None and not old:
                client.unload_model(model)  # no stub of it is alive: nothing to drain
            elif not client.unload_drained(model, DRAIN_TIMEOUT_S):
                # Its old instances linger beside the new ones until the server exits.
                logger.warning(
                    "model %r still unloading after %g s (an execution in flight, or a stub "
                    "that died under a request: Triton 2.51 never finishes that unload); "
                    "loading it beside its old instances",
                    model,
                    DRAIN_TIMEOUT_S,
                )
            self._retired |= old
            client.load_model(model)


def needs_reload(result: ProbeResult) -> bool:
    """Whether a failed probe or instance check shows a dead stub, a hang, or an instance that
    serves nothing until it is reloaded (a reload fixes those, or the load fails with the
    reason)."""
    return result.timed_out or any(
        text in result.message for text in (DEAD_STUB_TEXT, DEAD_INSTANCE_TEXT, RELOAD_NEEDED)
    )


def reload_reason(result: ProbeResult) -> str:
    """Why a failed probe (one that `needs_reload`) calls for a reload, in a few words."""
    if result.timed_out:
        return "its probe timed out"
    if DEAD_STUB_TEXT in result.message:
        return "its stub process is dead"
    if DEAD_INSTANCE_TEXT in result.message:
        return f"an instance is {DEAD_INSTANCE_TEXT}"
    return f"an instance {RELOAD_NEEDED} (its .om cannot be opened again)"


def _backoffs(retries: int) -> Iterator[float]:
    """The wait before each of `retries` attempts: 0, then FIRST_BACKOFF_S doubling."""
    yield 0.0
    for attempt in range(retries - 1):
        yield FIRST_BACKOFF_S * 2**attempt
