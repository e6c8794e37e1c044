"""`ge-python-model k8s`: print Kubernetes manifests serving a model repository on Ascend nodes."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    RUNTIME_BY_CONTAINER,
    add_device_budget_options,
    add_repository_argument,
    add_runtime_option,
    device_limits,
)
from ge_python_backend.errors import UserError
from ge_python_backend.tools.k8s import (
    DEFAULT_CANN_ENV,
    DEFAULT_DRIVER_PATH,
    DEFAULT_IMAGE,
    DEFAULT_NPU_RESOURCE,
    DEFAULT_PROMETHEUS,
    DEFAULT_SCALE_QUEUE_MS,
    DEFAULT_SCALE_UTILIZATION,
    HWHIAIUSER_GID,
    HWHIAIUSER_UID,
    KSERVE_MODELS_PATH,
    MIB,
    MODEL_FORMAT,
    MODELS_PATH,
    SCALE_ON,
    K8sOptions,
    build_manifests,
    repository_key_secret,
    secret_command,
    to_yaml,
)

HELP = "print Kubernetes manifests (Deployment, Service, ServiceMonitor, autoscaler)"

DESCRIPTION = f"""\
Print YAML for serving repository R on Ascend nodes: a Deployment running tritonserver with the
Python backend (NPUs requested from the Ascend device plugin, a memory-backed /dev/shm sized for
R's models, startup and strict readiness probes on Triton's health endpoints, a livenessProbe
running `ge-python-model probe`, a real inference per model, so a hung NPU restarts the pod, and
a graceful drain: preStop, then Triton's --exit-timeout-secs within the pod's grace period), a
Service for HTTP 8000, gRPC 8001 and metrics 8002, a Prometheus-operator ServiceMonitor for the
metrics port, and a HorizontalPodAutoscaler on each pod's average queue time per request or, with
--scale-on device, its busiest NPU's utilization (custom metrics served by Prometheus Adapter;
docs/guides/kubernetes.md has the rules).

R is read here to size /dev/shm and the Python backend's shared memory (a model without
config.pbtxt from its .om, read with --runtime or as its container says); the pod mounts R at
{MODELS_PATH} from a PersistentVolumeClaim (default <name>-models) or --host-path. Containers run
as HwHiAiUser ({HWHIAIUSER_UID}:{HWHIAIUSER_GID}, the owner of the Ascend device nodes) with every
capability dropped; the device plugin sets ASCEND_VISIBLE_DEVICES. The image needs tritonserver,
CANN and ge-python-backend installed into the Python that the Python backend's stub runs (see
docs/guides/deploy/index.md). Warnings about R go to stderr.

With --kserve: a KServe ServingRuntime for the model format {MODEL_FORMAT} (tritonserver on HTTP
8080 and gRPC 9000) and an InferenceService serving R from --storage-uri (at {KSERVE_MODELS_PATH})
on it, autoscaled by KEDA on the same metric from Prometheus (--prometheus). --watch-sidecar adds
a container running `ge-python-model watch --url 127.0.0.1:<http port>` and starts tritonserver
in explicit model-control mode, so the watcher can reload a model whose stub died; the
model-repository API (load with file overrides, unload, index) then takes only the key of the
Secret <name>-repository-key, which you create (the command is printed as a comment).

examples:
  ge-python-model k8s models --name resnet > resnet.yaml
  ge-python-model k8s models --name resnet --image registry.example.com/ge-triton:1.0 \\
      --npu-resource huawei.com/Ascend310P --replicas 2 --monitor-label release=prometheus
  ge-python-model k8s models --name resnet --scale-on device --scale-utilization 60
  ge-python-model k8s models --name resnet --kserve --storage-uri s3://models/resnet \\
      --watch-sidecar
"""


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def register(subparsers: Any) -> None:
    """Add the `k8s` subcommand."""
    parser = add_command(subparsers, "k8s", run, HELP, DESCRIPTION)
    add_repository_argument(parser)
    parser.add_argument("--name", required=True, help="name of the Deployment, Service, ...")
    parser.add_argument("--namespace", help="namespace of every object (default: none set)")
    parser.add_argument(
        "--image", default=DEFAULT_IMAGE, help=f"server image (default: {DEFAULT_IMAGE})"
    )
    parser.add_argument(
        "--npu-resource",
        default=DEFAULT_NPU_RESOURCE,
        help=f"the device plugin's resource (default: {DEFAULT_NPU_RESOURCE})",
    )
    parser.add_argument("--npus", type=int, default=1, help="NPUs per pod (default: 1)")
    parser.add_argument("--replicas", type=int, default=1, help="pods (default: 1)")
    parser.add_argument(
        "--pvc", help="PersistentVolumeClaim holding the repository (default: <name>-models)"
    )
    parser.add_argument("--host-path", help="node directory holding the repository, not a PVC")
    parser.add_argument(
        "--cann-env",
        default=DEFAULT_CANN_ENV,
        help=f"script sourced before tritonserver (default: {DEFAULT_CANN_ENV}; '' for none)",
    )
    parser.add_argument(
        "--driver-path",
        default=DEFAULT_DRIVER_PATH,
        help=f"host NPU driver mounted read-only (default: {DEFAULT_DRIVER_PATH}; '' for none)",
    )
    parser.add_argument(
        "--ready-model", metavar="MODEL", help="readiness on this model instead of the server"
    )
    parser.add_argument(
        "--live-model",
        action="append",
        default=[],
        metavar="MODEL",
        help="the liveness probe infers on this model (repeatable; default: every model)",
    )
    parser.add_argument(
        "--max-replicas",
        type=int,
        help="the autoscaler's ceiling (default: twice --replicas, at least 2)",
    )
    parser.add_argument(
        "--scale-on",
        choices=SCALE_ON,
        default="queue",
        help="the autoscaler's metric: Triton's queue time per request, or the utilization of "
        "each pod's busiest NPU from ge_device_busy_seconds_total (default: queue)",
    )
    parser.add_argument(
        "--scale-queue-ms",
        type=float,
        default=DEFAULT_SCALE_QUEUE_MS,
        help="--scale-on queue: scale out when the pods' average queue time per request exceeds "
        f"this (default: {DEFAULT_SCALE_QUEUE_MS:g})",
    )
    parser.add_argument(
        "--scale-utilization",
        type=float,
        default=DEFAULT_SCALE_UTILIZATION,
        metavar="PERCENT",
        help="--scale-on device: scale out when the pods' busiest NPU is busier than this on "
        f"average (default: {DEFAULT_SCALE_UTILIZATION:g})",
    )
    parser.add_argument(
        "--node-selector",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="schedule only on nodes with this label (repeatable), e.g. "
        "accelerator=huawei-Ascend910",
    )
    parser.add_argument(
        "--monitor-label",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="label the ServiceMonitor so Prometheus selects it (repeatable)",
    )
    parser.add_argument(
        "--run-as-user",
        type=int,
        default=HWHIAIUSER_UID,
        metavar="UID",
        help=f"containers' uid (default: {HWHIAIUSER_UID}, HwHiAiUser's)",
    )
    parser.add_argument(
        "--run-as-group",
        type=int,
        default=HWHIAIUSER_GID,
        metavar="GID",
        help=f"containers' gid; the device nodes' group (default: {HWHIAIUSER_GID}, HwHiAiUser's)",
    )
    add_runtime_option(
        parser,
        "the ACL that reads the .om of models without config.pbtxt here, to size shared memory "
        f"({RUNTIME_BY_CONTAINER})",
    )
    add_device_budget_options(
        parser,
        "the SoC of the nodes' NPUs: the device budget refuses a repository they cannot hold",
    )
    parser.add_argument(
        "--watch-sidecar",
        action="store_true",
        help="add a container running `ge-python-model watch` beside tritonserver",
    )
    parser.add_argument(
        "--kserve",
        action="store_true",
        help="print a KServe ServingRuntime and InferenceService instead",
    )
    parser.add_argument(
        "--storage-uri",
        metavar="URI",
        help="--kserve: the repository, pvc://CLAIM[/PATH] or s3://BUCKET[/PATH] "
        "(default: pvc://<name>-models)",
    )
    parser.add_argument(
        "--prometheus",
        default=DEFAULT_PROMETHEUS,
        metavar="URL",
        help=f"--kserve: the Prometheus the autoscaler queries (default: {DEFAULT_PROMETHEUS})",
    )


def run(args: argparse.Namespace) -> int:
    """Print the manifests on stdout, warnings on stderr."""
    if not args.repository.is_dir():
        raise UserError(f"model repository {args.repository} is not a directory")
    options = K8sOptions(
        name=args.name,
        image=args.image,
        npu_resource=args.npu_resource,
        npus=args.npus,
        replicas=args.replicas,
        namespace=args.namespace,
        pvc=args.pvc,
        host_path=args.host_path,
        cann_env=args.cann_env,
        driver_path=args.driver_path,
        ready_model=args.ready_model,
        live_models=tuple(args.live_model),
        max_replicas=args.max_replicas,
        scale_on=args.scale_on,
        scale_queue_ms=args.scale_queue_ms,
        scale_utilization=args.scale_utilization,
        node_selector=dict(args.node_selector),
        monitor_labels=dict(args.monitor_label),
        run_as_user=args.run_as_user,
        run_as_group=args.run_as_group,
        runtime=args.runtime,
        watch_sidecar=args.watch_sidecar,
        kserve=args.kserve,
        storage_uri=args.storage_uri,
        prometheus=args.prometheus,
        limits=device_limits(args),
    )
    manifests = build_manifests(args.repository, options)
    hosts = (
        f"; device host buffers up to {-(-manifests.device_host_bytes // MIB)} MiB (memfd: "
        "counted in the container's memory, not in /dev/shm)"
        if manifests.device_host_bytes
        else ""
    )
    print(
        f"# ge-python-model k8s {args.repository} --name {args.name}: "
        f"{manifests.shm_sizes.summary()}{hosts}"
    )
    if options.watch_sidecar:
        print(
            "# the model-repository API takes only the key of Secret "
            f"{repository_key_secret(options)}; create it first: {secret_command(options)}"
        )
    print(to_yaml(manifests.documents), end="")
    for warning in manifests.warnings:
        print(f"ge-python-model k8s: warning: {warning}", file=sys.stderr)
    return 0
