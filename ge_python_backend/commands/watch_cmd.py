"""`ge-python-model watch`: probe the models of a running Triton and reload the dead or hung."""

from __future__ import annotations

import argparse
import logging
import signal
from typing import Any

from ge_python_backend.client import server_url
from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_server_options,
    add_watch_options,
    watch_metrics_port,
    watch_option,
)
from ge_python_backend.tools.watch import DRAIN_TIMEOUT_S, Watcher, WatchMetrics, serve_metrics

logger = logging.getLogger(__name__)

HELP = "probe every READY model at an interval; reload those whose stub died or hangs"
DESCRIPTION = f"""\
Watch a running tritonserver (bare host, container or Kubernetes sidecar): every --interval
seconds, send each READY model one real inference shaped from its config (as `probe` does). A
model whose Python-backend stub process is dead (Triton 2.51 keeps such a model READY, failing
every request with `Stub process ... is not healthy`) or whose inference exceeds --timeout is
reloaded through the model-control API, unload then load, up to --retries times in a row with a
doubling backoff. One probe reaches one instance: when the server's processes are visible (a
server on this host), each model's live stub processes are also counted against its config's
instances, so that a dead one of several instances is reloaded too. A reload first waits
(at most {DRAIN_TIMEOUT_S:g} s) for Triton to answer the model's executions in flight and
finalize its instances, then loads. Reloads need the server in explicit model-control mode
(`--model-control-mode=explicit`, e.g. with `--load-model=*`); otherwise the failure is
reported. Every failure and action is logged to stderr. Prometheus counters
ge_watch_probes_total, ge_watch_failures_total and ge_watch_reloads_total, labelled by model,
are served on http://0.0.0.0:--metrics-port/metrics. --model watches that model alone. Runs
until SIGINT (Ctrl-C) or SIGTERM.

A server whose model-repository API is restricted (as `serve` and `k8s --watch-sidecar` run
it) takes its key: from GE_PYTHON_BACKEND_REPOSITORY_KEY or, for a `serve` of this user on this
machine, from the file it left in the run directory (as `tune` finds it).

examples:
  ge-python-model watch --url 127.0.0.1:8000
  ge-python-model watch --url 127.0.0.1:8001 --protocol grpc --interval 2 --timeout 5
"""


def register(subparsers: Any) -> None:
    """Add the `watch` subcommand."""
    parser = add_command(subparsers, "watch", run, HELP, DESCRIPTION)
    add_server_options(parser, required=False)
    add_watch_options(parser)


def watcher_from(
    args: argparse.Namespace,
    url: str | None,
    protocol: str = "http",
    prefix: str = "",
    metrics: WatchMetrics | None = None,
) -> Watcher:
    """The `Watcher` of `url` that the values of `add_watch_options(parser, prefix)` describe
    (`--model`, where given, limits it to that model), counting into `metrics` (None: new)."""
    return Watcher(
        server_url(url, protocol),
        protocol,
        models=tuple(filter(None, [getattr(args, "model", None)])),
        interval=watch_option(args, "interval", prefix),
        timeout=watch_option(args, "timeout", prefix),
        retries=watch_option(args, "retries", prefix),
        metrics=metrics or WatchMetrics(),
    )


def run(args: argparse.Namespace) -> int:
    """Watch until SIGINT or SIGTERM (exit 0)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    watcher = watcher_from(args, args.url, args.protocol)
    metrics_server = serve_metrics(watcher.metrics, watch_metrics_port(args))
    port = metrics_server.server_address[1]
    logger.info("watcher metrics on http://0.0.0.0:%d/metrics", port)
    # A signal sets `stop` rather than raising: tritonclient's gevent hub may swallow a
    # KeyboardInterrupt raised inside a request.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: watcher.stop.set())
    try:
        watcher.run()
        logger.info("watcher stopped")
    finally:
        metrics_server.shutdown()
        metrics_server.server_close()
    return 0
