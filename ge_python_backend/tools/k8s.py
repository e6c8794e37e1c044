"""Kubernetes manifests serving a model repository on Ascend nodes (`ge-python-model k8s`).

Four documents: a Deployment running `tritonserver` with the Python backend (NPUs requested
through the Ascend device plugin's extended resource, a memory-backed `/dev/shm` sized for the
repository's models, startup and readiness probes on Triton's health endpoints, an exec
livenessProbe running `ge-python-model probe`: a real inference per model, so a hung NPU gets its
pod restarted, and a graceful drain: preStop sleep, then Triton's `--exit-timeout-secs`, inside
`terminationGracePeriodSeconds`), a Service for HTTP, gRPC and metrics, a Prometheus-operator
ServiceMonitor for the metrics port, and an autoscaling/v2 HorizontalPodAutoscaler on a per-pod
custom metric served by Prometheus Adapter (docs/DEPLOYING.md has the adapter rules): the average
queue time per request (Triton's `nv_inference_queue_duration_us` and
`nv_inference_request_success`, as `QUEUE_METRIC`; the default), or the utilization of the pod's
busiest NPU (`rate()` of `ge_device_busy_seconds_total`, as `DEVICE_METRIC`).

The server command line is the one `ge_python_backend.server.TritonServer` runs, with two
differences that matter inside a pod: it listens on 0.0.0.0 (on loopback, the kubelet's probes and
the Service could not reach it: they come through the pod's network interface), and readiness is
strict, so a pod whose models did not all load is never Ready and gets no traffic.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import check_model_directory_names
from ge_python_backend.repository.shm import (
    MIB,
    RepositoryModel,
    ShmSizes,
    repository_models,
    shm_limit_bytes,
    shm_sizes_for_repository,
)

DEFAULT_IMAGE = "ge-python-backend:latest"
DEFAULT_NPU_RESOURCE = "huawei.com/Ascend910"
DEFAULT_CANN_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
DEFAULT_DRIVER_PATH = "/usr/local/Ascend/driver"
MODELS_PATH = "/models"
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
# Drain: the preStop sleep lets the Service stop routing to the pod before Triton gets SIGTERM;
# Triton then answers the requests in flight for up to EXIT_TIMEOUT_SECONDS and unloads the
# models. The grace period covers all of it (the kubelet kills the pod when it ends).
PRESTOP_SLEEP_SECONDS = 10
EXIT_TIMEOUT_SECONDS = 25
GRACE_PERIOD_SECONDS = PRESTOP_SLEEP_SECONDS + EXIT_TIMEOUT_SECONDS + 15
# Liveness: `ge-python-model probe` per model, each within PROBE_TIMEOUT_SECONDS (plus Python's
# start); a pod failing LIVENESS_FAILURES probes in a row, LIVENESS_PERIOD_SECONDS apart, restarts.
PROBE_TIMEOUT_SECONDS = 10
PROBE_START_SECONDS = 5
LIVENESS_PERIOD_SECONDS = 30
LIVENESS_FAILURES = 3
# Autoscaling: the custom per-pod metrics Prometheus Adapter serves (average queue time per
# request, microseconds; busy seconds per second of the pod's busiest NPU) and default targets.
SCALE_ON = ("queue", "device")
QUEUE_METRIC = "triton_queue_us_per_request"
DEFAULT_SCALE_QUEUE_MS = 50.0
DEVICE_METRIC = "ge_device_utilization"
DEFAULT_SCALE_UTILIZATION = 70.0  # percent
_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_RESOURCE_NAME = re.compile(
    r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?\Z"
)


@dataclasses.dataclass(frozen=True)
class K8sOptions:
    """What `ge-python-model k8s` takes besides the repository."""

    name: str
    image: str = DEFAULT_IMAGE
    npu_resource: str = DEFAULT_NPU_RESOURCE
    npus: int = 1  # per pod
    replicas: int = 1
    namespace: str | None = None
    pvc: str | None = None  # claim holding the repository; default "<name>-models"
    host_path: str | None = None  # node directory holding the repository, instead of a claim
    cann_env: str = DEFAULT_CANN_ENV  # sourced before tritonserver; "" when the image sets it
    driver_path: str = DEFAULT_DRIVER_PATH  # host NPU driver mounted read-only; "" to skip
    ready_model: str | None = None  # readiness on this model's endpoint instead of the server's
    live_models: tuple[str, ...] = ()  # models the liveness probe runs; () = every model
    max_replicas: int | None = None  # the autoscaler's ceiling; None: twice the replicas (>= 2)
    scale_on: str = "queue"  # one of SCALE_ON
    scale_queue_ms: float = DEFAULT_SCALE_QUEUE_MS  # scale out beyond this queue time / request
    scale_utilization: float = DEFAULT_SCALE_UTILIZATION  # or beyond this busiest-NPU percentage
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    monitor_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Manifests:
    """The documents, and warnings about the repository on Ascend nodes."""

    documents: list[dict[str, Any]]
    warnings: list[str]
    shm_sizes: ShmSizes
    shm_limit_bytes: int


def tritonserver_args(sizes: ShmSizes, models_path: str = MODELS_PATH) -> list[str]:
    """The `tritonserver` command line inside the pod."""
    return [
        "tritonserver",
        f"--model-repository={models_path}",
        f"--http-port={PORTS['http']}",
        f"--grpc-port={PORTS['grpc']}",
        f"--metrics-port={PORTS['metrics']}",
        "--http-address=0.0.0.0",
        "--grpc-address=0.0.0.0",
        "--metrics-address=0.0.0.0",
        "--exit-on-error=false",
        "--strict-readiness=true",
        f"--exit-timeout-secs={EXIT_TIMEOUT_SECONDS}",
        "--model-control-mode=none",
        f"--backend-config=python,shm-default-byte-size={sizes.default_bytes}",
        f"--backend-config=python,shm-growth-byte-size={sizes.growth_bytes}",
    ]


def _check_options(options: K8sOptions, models: Sequence[RepositoryModel]) -> None:
    if not _DNS_LABEL.match(options.name):
        raise UserError(
            f"--name {options.name!r} must be a DNS label: lowercase letters, digits and '-', "
            "starting with a letter, at most 63 characters"
        )
    if not _RESOURCE_NAME.match(options.npu_resource):
        raise UserError(
            f"--npu-resource {options.npu_resource!r} must be an extended resource name such "
            "as huawei.com/Ascend910 or huawei.com/Ascend310P"
        )
    if options.npus < 1 or options.replicas < 0:
        raise UserError("--npus must be >= 1 and --replicas >= 0")
    if options.pvc and options.host_path:
        raise UserError("give either --pvc or --host-path, not both")
    names = {m.name for m in models}
    if options.ready_model is not None and options.ready_model not in names:
        raise UserError(f"--ready-model {options.ready_model!r} is not a model of the repository")
    unknown = sorted(set(options.live_models) - names)
    if unknown:
        raise UserError(f"--live-model {', '.join(unknown)}: not a model of the repository")
    if options.max_replicas is not None and options.max_replicas < max(options.replicas, 1):
        raise UserError("--max-replicas must be >= --replicas and >= 1")
    if options.scale_on not in SCALE_ON:
        raise UserError(
            f"--scale-on must be one of {', '.join(SCALE_ON)}, got {options.scale_on!r}"
        )
    if not options.scale_queue_ms > 0:
        raise UserError(f"--scale-queue-ms must be > 0, got {options.scale_queue_ms}")
    if not 0 < options.scale_utilization <= 100:
        raise UserError(
            f"--scale-utilization must be a percentage in (0, 100], got {options.scale_utilization}"
        )


def repository_warnings(models: Sequence[RepositoryModel], npus: int) -> list[str]:
    """What in the repository will not work on Ascend nodes with `npus` NPUs per pod."""
    warnings = []
    for model in models:
        if model.acl_runtime not in (None, "pyacl"):
            warnings.append(
                f"model {model.name!r} has acl_runtime {model.acl_runtime!r}: on Ascend nodes "
                "it must be pyacl (scaffold --runtime pyacl)"
            )
        beyond = [device for device in model.device_ids if device >= npus]
        if beyond:
            warnings.append(
                f"model {model.name!r} uses device_ids {','.join(map(str, model.device_ids))} "
                f"but a pod gets {npus} NPU(s), numbered 0..{npus - 1} inside the container "
                "(raise --npus or scaffold with --device-ids in that range)"
            )
    return warnings


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def liveness_probe(models: Sequence[str]) -> dict[str, Any]:
    """The exec livenessProbe: `ge-python-model probe` on each model in turn (a real inference,
    which Triton's health endpoints do not make)."""
    commands = [
        [
            "ge-python-model",
            "probe",
            "--url",
            f"127.0.0.1:{PORTS['http']}",
            "--model",
            model,
            "--timeout",
            str(PROBE_TIMEOUT_SECONDS),
        ]
        for model in models
    ]
    if len(commands) == 1:
        command = commands[0]
    else:
        command = ["/bin/sh", "-c", " && ".join(shlex.join(c) for c in commands)]
    return {
        "exec": {"command": command},
        "periodSeconds": LIVENESS_PERIOD_SECONDS,
        "timeoutSeconds": len(commands) * (PROBE_TIMEOUT_SECONDS + PROBE_START_SECONDS),
        "failureThreshold": LIVENESS_FAILURES,
    }


def _container(options: K8sOptions, sizes: ShmSizes, models: Sequence[str]) -> dict[str, Any]:
    server = shlex.join(tritonserver_args(sizes))
    if options.cann_env:
        command = ["/bin/bash", "-c", f"source {shlex.quote(options.cann_env)} && exec {server}"]
    else:
        command = tritonserver_args(sizes)
    ready_path = (
        f"/v2/models/{options.ready_model}/ready" if options.ready_model else "/v2/health/ready"
    )
    mounts = [
        {"name": "models", "mountPath": MODELS_PATH, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    if options.driver_path:
        mounts.append({"name": "ascend-driver", "mountPath": options.driver_path, "readOnly": True})
    npus = {options.npu_resource: options.npus}
    return {
        "name": "tritonserver",
        "image": options.image,
        "command": command,
        "ports": [
            {"name": name, "containerPort": port, "protocol": "TCP"} for name, port in PORTS.items()
        ],
        "resources": {"requests": dict(npus), "limits": dict(npus)},
        # Model loading (and warmup) happens before Triton answers at all.
        "startupProbe": _probe("/v2/health/live", 5, 120),
        "readinessProbe": _probe(ready_path, 5, 3),
        "livenessProbe": liveness_probe(models),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_SECONDS)]}}},
        "volumeMounts": mounts,
    }


def _volumes(options: K8sOptions, shm_bytes: int) -> list[dict[str, Any]]:
    if options.host_path:
        models: dict[str, Any] = {"hostPath": {"path": options.host_path, "type": "Directory"}}
    else:
        claim = options.pvc or f"{options.name}-models"
        models = {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    volumes = [
        {"name": "models", **models},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_bytes // MIB}Mi"}},
    ]
    if options.driver_path:
        volumes.append({"name": "ascend-driver", "hostPath": {"path": options.driver_path}})
    return volumes


def build_manifests(repository: str | os.PathLike[str], options: K8sOptions) -> Manifests:
    """Deployment, Service and ServiceMonitor for serving `repository` (mounted at /models)."""
    if not Path(repository).is_dir():
        raise UserError(f"model repository {repository} is not a directory")
    check_model_directory_names(repository)  # mounted at /models: its own path never reaches bash
    models = repository_models(repository)
    if not models:
        raise UserError(f"no */config.pbtxt in {repository}: scaffold a model into it first")
    _check_options(options, models)
    names = {model.name for model in models}
    sizes = shm_sizes_for_repository(repository)
    shm_bytes = shm_limit_bytes(models, sizes)
    labels = {"app.kubernetes.io/name": options.name, "app.kubernetes.io/component": "triton"}

    def metadata(extra_labels: Mapping[str, str]) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": options.name, "labels": {**labels, **extra_labels}}
        if options.namespace:
            meta["namespace"] = options.namespace
        return meta

    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": GRACE_PERIOD_SECONDS,
        "containers": [_container(options, sizes, options.live_models or sorted(names))],
        "volumes": _volumes(options, shm_bytes),
    }
    if options.node_selector:
        pod_spec["nodeSelector"] = dict(options.node_selector)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata({}),
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": dict(labels)},
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata({}),
        "spec": {
            "selector": dict(labels),
            "ports": [
                {"name": name, "port": port, "targetPort": name, "protocol": "TCP"}
                for name, port in PORTS.items()
            ],
        },
    }
    monitor = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(options.monitor_labels),
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s"}],
        },
    }
    documents = [deployment, service, monitor]
    if options.replicas:
        documents.append(autoscaler(options, metadata({})))
    return Manifests(
        documents,
        repository_warnings(models, options.npus),
        sizes,
        shm_bytes,
    )


def autoscaler(options: K8sOptions, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """An autoscaling/v2 HorizontalPodAutoscaler of the Deployment between `replicas` and
    `max_replicas`, on the pods' average queue time per request (`QUEUE_METRIC`) or their
    busiest NPU's utilization (`DEVICE_METRIC`), both from Prometheus Adapter."""
    ceiling = options.max_replicas or max(2 * options.replicas, 2)
    if options.scale_on == "device":
        # busy seconds per second: a fraction, written as a quantity in thousandths ("700m")
        metric, target = DEVICE_METRIC, f"{round(options.scale_utilization * 10)}m"
    else:
        metric, target = QUEUE_METRIC, str(round(options.scale_queue_ms * 1000))
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": dict(metadata),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": options.name},
            "minReplicas": options.replicas,
            "maxReplicas": ceiling,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": target},
                    },
                }
            ],
        },
    }


_PLAIN = re.compile(r"[A-Za-z_/.][A-Za-z0-9_./-]*\Z")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return json.dumps(text)  # a JSON string is a valid double-quoted YAML scalar


def _block(value: Any, indent: int) -> list[str]:
    """Block-style YAML lines of a mapping or a sequence, `indent` levels deep."""
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{_scalar(key)}:")
                lines += _block(item, indent + 1)
            else:
                lines.append(f"{pad}{_scalar(key)}: {_inline(item)}")
        return lines
    for item in value:
        if isinstance(item, (dict, list)) and item:
            nested = _block(item, indent + 1)
            lines.append(f"{pad}- {nested[0].lstrip()}")
            lines += nested[1:]
        else:
            lines.append(f"{pad}- {_inline(item)}")
    return lines


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def to_yaml(documents: Sequence[Mapping[str, Any]]) -> str:
    """Documents as multi-document YAML."""
    return "".join("---\n" + "\n".join(_block(dict(doc), 0)) + "\n" for doc in documents)
