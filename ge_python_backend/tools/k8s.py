"""Kubernetes manifests serving a model repository on Ascend nodes (`ge-python-model k8s`).

Four documents: a Deployment running `tritonserver` with the Python backend (NPUs requested
through the Ascend device plugin's extended resource, a memory-backed `/dev/shm` sized for the
repository's models, startup and readiness probes on Triton's health endpoints, an exec
livenessProbe running `ge-python-model probe`: a real inference per model, so a hung NPU gets its
pod restarted, and a graceful drain: preStop sleep, then Triton's `--exit-timeout-secs`, inside
`terminationGracePeriodSeconds`), a Service for HTTP, gRPC and metrics, a Prometheus-operator
ServiceMonitor for the metrics port, and an autoscaling/v2 HorizontalPodAutoscaler on a per-pod
custom metric served by Prometheus Adapter (docs/guides/kubernetes.md has the adapter rules): the
average
queue time per request (Triton's `nv_inference_queue_duration_us` and
`nv_inference_request_success`, as `QUEUE_METRIC`; the default), or the utilization of the pod's
busiest NPU (`rate()` of `ge_device_busy_seconds_total`, as `DEVICE_METRIC`).

The server command line is the one `ge_python_backend.server.TritonServer` runs, with two
differences that matter inside a pod: it listens on 0.0.0.0 (on loopback, the kubelet's probes and
the Service could not reach it: they come through the pod's network interface), and readiness is
strict, so a pod whose models did not all load is never Ready and gets no traffic.

The container runs as HwHiAiUser's uid and gid (`HWHIAIUSER_UID`/`HWHIAIUSER_GID`, or
`--run-as-user/--run-as-group`) with every capability dropped: the Ascend device nodes are
HwHiAiUser's, mode 0660, so the group opens them and no capability is needed (a container of
another uid and gid, or root with every capability dropped, cannot: vllm-ascend#9490,
ascend-device-plugin#139). `ASCEND_VISIBLE_DEVICES` is left to the device plugin, which sets it
for the container it allocates NPUs to; the Ascend Docker Runtime then mounts those devices.

With `kserve`, the documents are a KServe `ServingRuntime` for our own model format
(`MODEL_FORMAT`, so KServe never picks NVIDIA's tritonserver image for an Ascend model) and an
`InferenceService` on it (`kserve_manifests`); with `watch_sidecar`, a container beside
tritonserver runs `ge-python-model watch` and tritonserver runs in explicit model-control mode,
so the watcher can reload a dead model; the model-repository API (index, load with file
overrides, unload) is then restricted to the key of a Secret (`repository_key_secret`), which
both containers take as `GE_PYTHON_BACKEND_REPOSITORY_KEY` and tritonserver's arguments expand.
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

from ge_python_backend import repository_key
from ge_python_backend.devicehost.buffers import buffer_bytes
from ge_python_backend.errors import UserError
from ge_python_backend.repository.budget import (
    DeviceLimits,
    ModelFootprint,
    budget,
    footprints,
)
from ge_python_backend.repository.config import check_model_directory_names
from ge_python_backend.repository.shm import (
    MIB,
    RepositoryModel,
    ShmSizes,
    repository_entries,
    repository_models_of,
    shm_limit_bytes,
    shm_sizes,
)

DEFAULT_IMAGE = "ge-python-backend:latest"
DEFAULT_NPU_RESOURCE = "huawei.com/Ascend910"
DEFAULT_CANN_ENV = "/usr/local/Ascend/ascend-toolkit/set_env.sh"
DEFAULT_DRIVER_PATH = "/usr/local/Ascend/driver"
MODELS_PATH = "/models"
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
# HwHiAiUser, the running user of the Ascend driver that owns the device nodes: MindCluster's
# install guide requires its UID and GID to be 1000 on every host and in every container
# (https://www.hiascend.com/document/detail/zh/mindcluster/730/clustersched/dlug/dlug_installation_014.html).
HWHIAIUSER_UID = 1000
HWHIAIUSER_GID = 1000
# No container sets ASCEND_VISIBLE_DEVICES (nor ASCEND_RUNTIME_OPTIONS): the device plugin sets it
# for the container it allocates NPUs to and the Ascend Docker Runtime mounts those devices;
# Ascend's docs say not to fix these in an image or a container spec (MindCluster 7.3, "Usage on
# the Containerd Client", dlruntime_ug_006).
# KServe: the model format our ServingRuntime serves, where the storage initializer puts the
# repository, and the ports of its tritonserver runtime (HTTP 8080, gRPC 9000).
MODEL_FORMAT = "ascend-om"
KSERVE_MODELS_PATH = "/mnt/models"
KSERVE_PORTS = {"http": 8080, "grpc": 9000, "metrics": 8002}
STORAGE_SCHEMES = ("pvc://", "s3://")
DEFAULT_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
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
    run_as_user: int = HWHIAIUSER_UID
    run_as_group: int = HWHIAIUSER_GID
    runtime: str | None = None  # reads copy-path .om files here; None: as selected_runtime says
    watch_sidecar: bool = False  # a `ge-python-model watch` container beside tritonserver
    kserve: bool = False  # ServingRuntime + InferenceService instead of Deployment, Service, ...
    storage_uri: str | None = None  # kserve: the repository; default pvc://<name>-models
    prometheus: str = DEFAULT_PROMETHEUS  # kserve: the server the autoscaler's query goes to
    limits: DeviceLimits = DeviceLimits()  # what one NPU of the node allows (the device budget)


@dataclasses.dataclass(frozen=True)
class Manifests:
    """The documents, and warnings about the repository on Ascend nodes."""

    documents: list[dict[str, Any]]
    warnings: list[str]
    shm_sizes: ShmSizes
    shm_limit_bytes: int
    device_host_bytes: int = 0  # the device hosts' buffers at most (`device_host_memory`)


def tritonserver_args(
    sizes: ShmSizes,
    models_path: str = MODELS_PATH,
    ports: Mapping[str, int] = PORTS,
    explicit: bool = False,
) -> list[str]:
    """The `tritonserver` command line inside the pod; `explicit`: every model loaded at start
    in explicit model-control mode, so a watcher can unload and load one, the model-repository
    API restricted to the key the kubelet expands from the container's environment
    (`repository_key_env`)."""
    control = (
        [
            "--model-control-mode=explicit",
            "--load-model=*",
            *repository_key.server_options(f"$({repository_key.ENV})"),
        ]
        if explicit
        else ["--model-control-mode=none"]
    )
    return [
        "tritonserver",
        f"--model-repository={models_path}",
        f"--http-port={ports['http']}",
        f"--grpc-port={ports['grpc']}",
        f"--metrics-port={ports['metrics']}",
        "--http-address=0.0.0.0",
        "--grpc-address=0.0.0.0",
        "--metrics-address=0.0.0.0",
        "--exit-on-error=false",
        "--strict-readiness=true",
        f"--exit-timeout-secs={EXIT_TIMEOUT_SECONDS}",
        *control,
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
    if options.run_as_user < 0 or options.run_as_group < 0:
        raise UserError("--run-as-user and --run-as-group must be >= 0")
    if options.kserve:
        if options.pvc or options.host_path:
            raise UserError(
                "with --kserve give the repository as --storage-uri, not --pvc/--host-path"
            )
        if len(runtime_name(options)) > 63:
            raise UserError(f"--name {options.name!r} is too long for --kserve (at most 55)")
    if options.storage_uri is not None:
        if not options.kserve:
            raise UserError("--storage-uri needs --kserve")
        scheme, _, where = options.storage_uri.partition("://")
        if f"{scheme}://" not in STORAGE_SCHEMES or not where or re.search(r"\s", where):
            raise UserError(
                f"--storage-uri {options.storage_uri!r} must be pvc://<claim>[/path] or "
                "s3://<bucket>[/path]"
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


def _probe(path: str, period: int, failures: int, port: int | str = "http") -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    }


def liveness_probe(models: Sequence[str], http_port: int = PORTS["http"]) -> dict[str, Any]:
    """The exec livenessProbe: `ge-python-model probe` on each model in turn (a real inference,
    which Triton's health endpoints do not make)."""
    commands = [
        [
            "ge-python-model",
            "probe",
            "--url",
            f"127.0.0.1:{http_port}",
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


def security_context(options: K8sOptions) -> dict[str, Any]:
    """Every container's: HwHiAiUser's ids (or the options'), no capability, no escalation. The
    device nodes are `HwHiAiUser:HwHiAiUser 0660`, opened through the group: no capability."""
    return {
        "runAsUser": options.run_as_user,
        "runAsGroup": options.run_as_group,
        "runAsNonRoot": options.run_as_user != 0,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }


def repository_key_secret(options: K8sOptions) -> str:
    """The Secret holding the key of the model-repository API (under `key`), which the
    operator creates (`secret_command`)."""
    return f"{options.name}-repository-key"


def secret_command(options: K8sOptions) -> str:
    """The command creating `repository_key_secret` with a random key."""
    namespace = f" --namespace {options.namespace}" if options.namespace else ""
    return (
        f"kubectl create secret generic {repository_key_secret(options)}{namespace} "
        '--from-literal=key="$(openssl rand -hex 32)"'
    )


def repository_key_env(options: K8sOptions) -> list[dict[str, Any]]:
    """The environment giving a container the key of `repository_key_secret`: tritonserver's
    arguments expand it, the watcher sends it."""
    secret = {"name": repository_key_secret(options), "key": "key"}
    return [{"name": repository_key.ENV, "valueFrom": {"secretKeyRef": secret}}]


def watch_container(options: K8sOptions, http_port: int) -> dict[str, Any]:
    """The sidecar running `ge-python-model watch` on the pod's tritonserver, with its key."""
    return {
        "name": "watch",
        "image": options.image,
        "command": ["ge-python-model", "watch", "--url", f"127.0.0.1:{http_port}"],
        "env": repository_key_env(options),
        "securityContext": security_context(options),
    }


def _server_command(options: K8sOptions, args: list[str]) -> list[str]:
    if not options.cann_env:
        return args
    return ["/bin/bash", "-c", f"source {shlex.quote(options.cann_env)} && exec {shlex.join(args)}"]


def _server_mounts(options: K8sOptions) -> list[dict[str, Any]]:
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if options.driver_path:
        mounts.append({"name": "ascend-driver", "mountPath": options.driver_path, "readOnly": True})
    return mounts


def _server_volumes(options: K8sOptions, shm_bytes: int) -> list[dict[str, Any]]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": f"{shm_bytes // MIB}Mi"}}
    ]
    if options.driver_path:
        volumes.append({"name": "ascend-driver", "hostPath": {"path": options.driver_path}})
    return volumes


def _drain() -> dict[str, Any]:
    """The preStop sleep before Triton's SIGTERM (see PRESTOP_SLEEP_SECONDS)."""
    return {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SLEEP_SECONDS)]}}}


def _probes(
    options: K8sOptions, models: Sequence[str], port: int | str, http_port: int
) -> dict[str, Any]:
    ready_path = (
        f"/v2/models/{options.ready_model}/ready" if options.ready_model else "/v2/health/ready"
    )
    return {
        # Model loading (and warmup) happens before Triton answers at all.
        "startupProbe": _probe("/v2/health/live", 5, 120, port),
        "readinessProbe": _probe(ready_path, 5, 3, port),
        "livenessProbe": liveness_probe(models, http_port),
    }


def _container(options: K8sOptions, sizes: ShmSizes, models: Sequence[str]) -> dict[str, Any]:
    args = tritonserver_args(sizes, explicit=options.watch_sidecar)
    npus = {options.npu_resource: options.npus}
    return {
        "name": "tritonserver",
        "image": options.image,
        "command": _server_command(options, args),
        "ports": [
            {"name": name, "containerPort": port, "protocol": "TCP"} for name, port in PORTS.items()
        ],
        **({"env": repository_key_env(options)} if options.watch_sidecar else {}),
        "resources": {"requests": dict(npus), "limits": dict(npus)},
        **_probes(options, models, "http", PORTS["http"]),
        "lifecycle": _drain(),
        "securityContext": security_context(options),
        "volumeMounts": [
            {"name": "models", "mountPath": MODELS_PATH, "readOnly": True},
            *_server_mounts(options),
        ],
    }


def _volumes(options: K8sOptions, shm_bytes: int) -> list[dict[str, Any]]:
    if options.host_path:
        models: dict[str, Any] = {"hostPath": {"path": options.host_path, "type": "Directory"}}
    else:
        claim = options.pvc or f"{options.name}-models"
        models = {"persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    return [{"name": "models", **models}, *_server_volumes(options, shm_bytes)]


def build_manifests(repository: str | os.PathLike[str], options: K8sOptions) -> Manifests:
    """Deployment, Service and ServiceMonitor (and autoscaler) for serving `repository`
    (mounted at /models); with `options.kserve`, `kserve_manifests`. Models without
    `config.pbtxt` are read from their `.om` with `options.runtime`."""
    if not Path(repository).is_dir():
        raise UserError(f"model repository {repository} is not a directory")
    check_model_directory_names(repository)  # mounted at /models: its own path never reaches bash
    entries = repository_entries(repository, options.runtime)
    unreadable = [entry for entry in entries if entry.config is None and entry.copy_path]
    if unreadable:
        raise UserError(
            "; ".join(f"model {e.directory.name!r}: {e.error}" for e in unreadable)
            + " (a model without config.pbtxt is sized from its .om, which must be readable here)"
        )
    models = repository_models_of(entries)
    if not models:
        raise UserError(
            f"no model in {repository} (no */config.pbtxt and no */<version>/ with an .om): "
            "scaffold a model into it first"
        )
    _check_options(options, models)
    models_on_devices = footprints(entries, options.runtime)
    devices = budget(models_on_devices, options.limits)
    if devices.problems():
        raise UserError(
            "the pod's NPUs cannot hold the repository: "
            + "; ".join(devices.problems())
            + "\n"
            + devices.table()
        )
    names = {model.name for model in models}
    sizes = shm_sizes(entries)
    shm_bytes = shm_limit_bytes(sizes)
    live = options.live_models or sorted(names)
    warnings = repository_warnings(models, options.npus) + devices.warnings()
    if options.kserve:
        return Manifests(
            kserve_manifests(options, sizes, shm_bytes, live),
            warnings,
            sizes,
            shm_bytes,
            device_host_memory(models_on_devices),
        )
    labels = {"app.kubernetes.io/name": options.name, "app.kubernetes.io/component": "triton"}

    def metadata(extra_labels: Mapping[str, str]) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": options.name, "labels": {**labels, **extra_labels}}
        if options.namespace:
            meta["namespace"] = options.namespace
        return meta

    containers = [_container(options, sizes, live)]
    if options.watch_sidecar:
        containers.append(watch_container(options, PORTS["http"]))
    pod_spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": GRACE_PERIOD_SECONDS,
        "containers": containers,
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
    return Manifests(documents, warnings, sizes, shm_bytes, device_host_memory(models_on_devices))


# Batches one instance may have in the device host at once: pipeline_depth waiting in its
# completion queue, the one being answered and the one being submitted (`triton.instance`).
BATCHES_IN_FLIGHT_BEYOND_DEPTH = 2


def device_host_memory(models: Sequence[ModelFootprint]) -> int:
    """The most memory the device hosts' buffers take: per instance with `device_host` on, a
    buffer per batch in flight, sized as the stub asks for its lane's tensors
    (`buffers.buffer_bytes`). memfd memory: the container's memory counts it, /dev/shm does
    not."""
    total = 0
    for model in models:
        if model.device_host and model.buffer_bytes is not None:
            batches = model.lanes + BATCHES_IN_FLIGHT_BEYOND_DEPTH
            total += sum(model.processes.values()) * batches * buffer_bytes(model.buffer_bytes)
    return total


def runtime_name(options: K8sOptions) -> str:
    """The KServe ServingRuntime's name."""
    return f"{options.name}-runtime"


def _ceiling(options: K8sOptions) -> int:
    return options.max_replicas or max(2 * options.replicas, 2)


def _target(options: K8sOptions) -> tuple[str, str]:
    """The autoscaler's metric name and target: queue time per request in microseconds, or the
    busiest NPU's busy seconds per second as a quantity in thousandths ("700m")."""
    if options.scale_on == "device":
        return DEVICE_METRIC, f"{round(options.scale_utilization * 10)}m"
    return QUEUE_METRIC, str(round(options.scale_queue_ms * 1000))


def prometheus_query(options: K8sOptions) -> str:
    """The PromQL the KServe autoscaler scales on, over the InferenceService's predictor pods:
    the average queue time per request (us; the divisor kept above 0, so idle pods read 0), or
    the mean over pods of the busiest NPU's busy seconds per second, its instances added up (as
    Prometheus Adapter's rules in docs/guides/kubernetes.md compute them per pod)."""
    matchers = f'pod=~"{options.name}-predictor-.*"'
    if options.namespace:
        matchers += f',namespace="{options.namespace}"'
    if options.scale_on == "device":
        busy = f"rate(ge_device_busy_seconds_total{{{matchers}}}[1m])"
        return f"avg(max by (pod) (sum by (pod, device) ({busy})))"
    return (
        f"sum(rate(nv_inference_queue_duration_us{{{matchers}}}[1m])) / "
        f"clamp_min(sum(rate(nv_inference_request_success{{{matchers}}}[1m])), 1e-9)"
    )


def kserve_manifests(
    options: K8sOptions, sizes: ShmSizes, shm_bytes: int, live: Sequence[str]
) -> list[dict[str, Any]]:
    """A KServe ServingRuntime (serving.kserve.io/v1alpha1) running tritonserver for
    `MODEL_FORMAT` on ports 8080/9000, and an InferenceService (v1beta1) serving the repository
    at `storage_uri` on it in RawDeployment mode: NPUs, a memory-backed /dev/shm, and KEDA
    autoscaling on an external Prometheus query (`prometheus_query`)."""
    http = KSERVE_PORTS["http"]
    args = tritonserver_args(sizes, KSERVE_MODELS_PATH, KSERVE_PORTS, options.watch_sidecar)

    def metadata(name: str, **extra: Any) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, **extra}
        if options.namespace:
            meta["namespace"] = options.namespace
        return meta

    runtime: dict[str, Any] = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "ServingRuntime",
        "metadata": metadata(runtime_name(options)),
        "spec": {
            "annotations": {
                "prometheus.kserve.io/port": str(KSERVE_PORTS["metrics"]),
                "prometheus.kserve.io/path": "/metrics",
            },
            "supportedModelFormats": [
                {"name": MODEL_FORMAT, "version": "1", "autoSelect": True, "priority": 1}
            ],
            "protocolVersions": ["v2", "grpc-v2"],
            "multiModel": False,
            "containers": [
                {
                    "name": "kserve-container",
                    "image": options.image,
                    "command": _server_command(options, args),
                    **({"env": repository_key_env(options)} if options.watch_sidecar else {}),
                    "ports": [
                        {"name": "http1", "containerPort": http, "protocol": "TCP"},
                        {"name": "h2c", "containerPort": KSERVE_PORTS["grpc"], "protocol": "TCP"},
                    ],
                    **_probes(options, live, http, http),
                    "lifecycle": _drain(),
                    "securityContext": security_context(options),
                }
            ],
        },
    }
    if options.node_selector:
        runtime["spec"]["nodeSelector"] = dict(options.node_selector)
    _, target = _target(options)
    npus = {options.npu_resource: options.npus}
    predictor: dict[str, Any] = {
        "minReplicas": options.replicas,
        "maxReplicas": _ceiling(options),
        "autoScaling": {
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {
                            "backend": "prometheus",
                            "serverAddress": options.prometheus,
                            "query": prometheus_query(options),
                        },
                        "target": {"type": "Value", "value": target},
                    },
                }
            ]
        },
        "terminationGracePeriodSeconds": GRACE_PERIOD_SECONDS,
        "model": {
            "modelFormat": {"name": MODEL_FORMAT, "version": "1"},
            "runtime": runtime_name(options),
            "storageUri": options.storage_uri or f"pvc://{options.name}-models",
            "resources": {"requests": dict(npus), "limits": dict(npus)},
            "volumeMounts": _server_mounts(options),
        },
        "volumes": _server_volumes(options, shm_bytes),
    }
    if options.watch_sidecar:
        predictor["containers"] = [watch_container(options, http)]
    service = {
        "apiVersion": "serving.kserve.io/v1beta1",
        "kind": "InferenceService",
        "metadata": metadata(
            options.name,
            annotations={
                "serving.kserve.io/deploymentMode": "RawDeployment",
                "serving.kserve.io/autoscalerClass": "keda",
            },
        ),
        "spec": {"predictor": predictor},
    }
    return [runtime, service]


def autoscaler(options: K8sOptions, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """An autoscaling/v2 HorizontalPodAutoscaler of the Deployment between `replicas` and
    `max_replicas`, on the pods' average queue time per request (`QUEUE_METRIC`) or their
    busiest NPU's utilization (`DEVICE_METRIC`), both from Prometheus Adapter."""
    ceiling = _ceiling(options)
    metric, target = _target(options)
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
