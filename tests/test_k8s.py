"""`ge-python-model k8s`: manifests checked against the Kubernetes schemas and run for real.

Deployment and Service are validated with kubernetes-validate, which ships the official JSON
schemas (strict variant: unknown fields are errors) for Kubernetes 1.25 onwards. The
ServiceMonitor is a prometheus-operator CRD: it is validated with the pydantic models that
cloudcoil-models-prometheus-operator generates from that CRD's schema; they ignore unknown
fields, so the test also requires that nothing is dropped when the parsed object is dumped back.
The KServe ServingRuntime and InferenceService are validated against the facts of their CRDs'
schemas in kserve_crd_facts.json (its `source` names the files and the kserve commit): the
types, required fields and enums of every field `k8s --kserve` writes, with undeclared fields an
error (the API server prunes them); their pod parts also against the Kubernetes Pod schema.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from e2e_helpers import free_ports
from onnx_models import KEEP_FP32, build_mlp
from tritonclient.utils import InferenceServerException

from ge_python_backend import repository_key
from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient
from ge_python_backend.devicehost.buffers import buffer_bytes
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.errors import UserError
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.shm import (
    MIB,
    SHM_MIN_BYTES,
    repository_entries,
    repository_models_of,
    shm_limit_bytes,
    shm_sizes_for_repository,
)
from ge_python_backend.runtime import ENV_VAR
from ge_python_backend.runtime.describe import describe_om
from ge_python_backend.server import find_server, server_environment
from ge_python_backend.tools.bench import metric_samples
from ge_python_backend.tools.k8s import (
    DEVICE_METRIC,
    EXIT_TIMEOUT_SECONDS,
    GRACE_PERIOD_SECONDS,
    HWHIAIUSER_GID,
    HWHIAIUSER_UID,
    MODEL_FORMAT,
    PRESTOP_SLEEP_SECONDS,
    QUEUE_METRIC,
    K8sOptions,
    build_manifests,
    repository_key_env,
    to_yaml,
)

KUBERNETES_VERSIONS = ("1.27", kubernetes_validate.utils.latest_version())


@pytest.fixture
def repository(
    tmp_path: Path, om_dynamic_batch: Path, om_hw: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Two models configured for pyACL (described here through the emulator)."""
    monkeypatch.setenv("GE_PYTHON_BACKEND_ACL", "emulator")
    repo = tmp_path / "models"
    scaffold(om_dynamic_batch, repo, name="mlp", runtime="pyacl", instances=2)
    scaffold(om_hw, repo, name="conv", runtime="pyacl")
    monkeypatch.delenv("GE_PYTHON_BACKEND_ACL")
    return repo


def validate_core(document: dict[str, Any]) -> None:
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(document, version, strict=True)


def validate_service_monitor(document: dict[str, Any]) -> None:
    monitoring = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    parsed = monitoring.ServiceMonitor.model_validate(document)
    dumped = parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    assert dumped == document, "fields unknown to the ServiceMonitor CRD were dropped"


def documents_of(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_manifests_pass_the_kubernetes_schemas(repository: Path) -> None:
    manifests = build_manifests(
        repository,
        K8sOptions(
            name="resnet",
            namespace="inference",
            npu_resource="huawei.com/Ascend310P",
            npus=2,
            replicas=3,
            node_selector={"accelerator": "huawei-Ascend310P"},
            monitor_labels={"release": "prometheus"},
            ready_model="mlp",
        ),
    )
    deployment, service, monitor, autoscaler = documents_of(to_yaml(manifests.documents))
    assert [deployment, service, monitor, autoscaler] == manifests.documents  # faithful YAML
    validate_core(deployment)
    validate_core(service)
    validate_service_monitor(monitor)
    validate_core(autoscaler)
    assert manifests.warnings == []


def test_validators_reject_broken_manifests(repository: Path) -> None:
    deployment, service, monitor, autoscaler = build_manifests(
        repository, K8sOptions(name="m")
    ).documents
    typo = copy.deepcopy(deployment)
    container = typo["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        validate_core(typo)
    wrong_type = copy.deepcopy(service)
    wrong_type["spec"]["ports"][0]["port"] = "8000"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(wrong_type)
    unknown = copy.deepcopy(monitor)
    unknown["spec"]["endpoints"][0]["prot"] = "metrics"
    with pytest.raises(AssertionError, match="dropped"):
        validate_service_monitor(unknown)
    bad_interval = copy.deepcopy(monitor)
    bad_interval["spec"]["endpoints"][0]["interval"] = "15 seconds"
    with pytest.raises(ValueError, match="interval"):
        validate_service_monitor(bad_interval)
    no_target = copy.deepcopy(autoscaler)
    del no_target["spec"]["metrics"][0]["pods"]["target"]
    with pytest.raises(kubernetes_validate.ValidationError, match="target"):
        validate_core(no_target)


def test_deployment_contents(repository: Path) -> None:
    manifests = build_manifests(repository, K8sOptions(name="mlp", npus=2))
    deployment, service, monitor, _ = manifests.documents
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"huawei.com/Ascend910": 2}
    assert container["resources"]["requests"] == {"huawei.com/Ascend910": 2}
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    sizes = shm_sizes_for_repository(repository)
    models = repository_models_of(repository_entries(repository))
    assert sum(model.instances for model in models) == 3
    assert [(model.name, model.instances) for model in sizes.models] == [
        (model.name, model.instances) for model in models
    ]
    limit = shm_limit_bytes(sizes)
    assert manifests.shm_limit_bytes == limit
    regions = sum(
        model.instances * (sizes.region_bytes(model) + sizes.growth_bytes) for model in sizes.models
    )
    assert limit >= max(regions + 4 * sizes.default_bytes, SHM_MIN_BYTES)
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["sizeLimit"] == f"{limit // 2**20}Mi"
    assert volumes[mounts["/models"]]["persistentVolumeClaim"]["claimName"] == "mlp-models"
    assert mounts["/usr/local/Ascend/driver"] == "ascend-driver"
    shell = container["command"][2]
    assert shell.startswith("source /usr/local/Ascend/ascend-toolkit/set_env.sh && exec ")
    args = shlex.split(shell.split(" && exec ", 1)[1])
    assert "--http-address=0.0.0.0" in args and "--model-repository=/models" in args
    assert f"--backend-config=python,shm-default-byte-size={sizes.default_bytes}" in args
    assert f"--backend-config=python,shm-growth-byte-size={sizes.growth_bytes}" in args
    assert [port["name"] for port in service["spec"]["ports"]] == ["http", "grpc", "metrics"]
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"] == service["metadata"]["labels"]


def test_options_change_volumes_and_command(repository: Path) -> None:
    options = K8sOptions(name="mlp", host_path="/srv/models", cann_env="", driver_path="")
    deployment = build_manifests(repository, options).documents[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][0] == "tritonserver"
    assert {volume["name"] for volume in pod["volumes"]} == {"models", "dshm"}
    assert pod["volumes"][0]["hostPath"] == {"path": "/srv/models", "type": "Directory"}
    validate_core(deployment)


def test_liveness_probe_runs_an_inference_on_every_model(repository: Path) -> None:
    deployment = build_manifests(repository, K8sOptions(name="m")).documents[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    liveness = container["livenessProbe"]
    shell, dash_c, script = liveness["exec"]["command"]
    assert (shell, dash_c) == ("/bin/sh", "-c")
    probes = [shlex.split(part) for part in script.split(" && ")]
    assert [args[args.index("--model") + 1] for args in probes] == ["conv", "mlp"]
    assert probes[0][:4] == ["ge-python-model", "probe", "--url", "127.0.0.1:8000"]
    timeout = int(probes[0][probes[0].index("--timeout") + 1])
    assert liveness["timeoutSeconds"] > 2 * timeout  # both probes, each with Python's start
    one = build_manifests(repository, K8sOptions(name="m", live_models=("mlp",))).documents[0]
    command = one["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["exec"]["command"]
    assert command[:2] == ["ge-python-model", "probe"] and "mlp" in command


def test_graceful_drain_fits_in_the_grace_period(repository: Path) -> None:
    deployment = build_manifests(repository, K8sOptions(name="m")).documents[0]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["lifecycle"]["preStop"]["exec"]["command"] == [
        "sleep",
        str(PRESTOP_SLEEP_SECONDS),
    ]
    args = shlex.split(container["command"][2].split(" && exec ", 1)[1])
    assert f"--exit-timeout-secs={EXIT_TIMEOUT_SECONDS}" in args
    assert "--strict-readiness=true" in args
    assert pod["terminationGracePeriodSeconds"] == GRACE_PERIOD_SECONDS
    assert GRACE_PERIOD_SECONDS > PRESTOP_SLEEP_SECONDS + EXIT_TIMEOUT_SECONDS


def test_autoscaler_scales_the_deployment_on_queue_time(repository: Path) -> None:
    options = K8sOptions(name="m", replicas=2, max_replicas=6, scale_queue_ms=20, namespace="ns")
    deployment, _, _, autoscaler = build_manifests(repository, options).documents
    assert autoscaler["metadata"]["namespace"] == "ns"
    spec = autoscaler["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": deployment["apiVersion"],
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 6)
    assert spec["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": QUEUE_METRIC},
                "target": {"type": "AverageValue", "averageValue": "20000"},
            },
        }
    ]
    validate_core(autoscaler)
    none = build_manifests(repository, K8sOptions(name="m", replicas=0)).documents
    assert [doc["kind"] for doc in none] == ["Deployment", "Service", "ServiceMonitor"]


def test_autoscaler_scales_the_deployment_on_device_utilization(
    repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = K8sOptions(name="m", replicas=2, scale_on="device", scale_utilization=65)
    deployment, _, _, autoscaler = build_manifests(repository, options).documents
    assert autoscaler["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert autoscaler["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": DEVICE_METRIC},
                "target": {"type": "AverageValue", "averageValue": "650m"},
            },
        }
    ]
    validate_core(autoscaler)
    code = main(["k8s", str(repository), "--name", "m", "--scale-on", "device"])
    *_, printed = documents_of(capsys.readouterr().out)
    assert code == 0
    assert printed["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "700m"
    validate_core(printed)
    for bad in ("0", "120"):
        code = main(["k8s", str(repository), "--name", "m", "--scale-utilization", bad])
        assert code == 2
        assert "--scale-utilization must be a percentage in (0, 100]" in capsys.readouterr().err
    with pytest.raises(UserError, match="--scale-on must be one of queue, device, got 'gpu'"):
        build_manifests(repository, K8sOptions(name="m", scale_on="gpu"))


def test_repository_warnings(tmp_path: Path, om_dynamic_batch: Path) -> None:
    repo = tmp_path / "models"
    scaffold(om_dynamic_batch, repo, name="mlp", runtime="emulator", device_ids=(0, 3))
    warnings = build_manifests(repo, K8sOptions(name="mlp", npus=2)).warnings
    assert any("acl_runtime 'emulator'" in warning for warning in warnings)
    assert any("device_ids 0,3" in warning and "0..1" in warning for warning in warnings)


def test_cli_prints_valid_yaml(repository: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["k8s", str(repository), "--name", "mlp", "--replicas", "2", "--node-selector", "a=b"]
    )
    captured = capsys.readouterr()
    assert code == 0 and captured.err == ""
    deployment, service, monitor, autoscaler = documents_of(captured.out)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["nodeSelector"] == {"a": "b"}
    assert autoscaler["spec"]["maxReplicas"] == 4
    validate_core(deployment)
    validate_core(service)
    validate_service_monitor(monitor)
    validate_core(autoscaler)


def test_cli_user_mistakes_exit_2(
    repository: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["k8s", str(repository), "--name", "Bad_Name"]) == 2
    assert "DNS label" in capsys.readouterr().err
    assert main(["k8s", str(repository), "--name", "m", "--npu-resource", "Ascend910"]) == 2
    assert "extended resource" in capsys.readouterr().err
    assert main(["k8s", str(repository), "--name", "m", "--ready-model", "nope"]) == 2
    assert main(["k8s", str(repository), "--name", "m", "--live-model", "nope"]) == 2
    assert "--live-model nope: not a model" in capsys.readouterr().err
    assert (
        main(["k8s", str(repository), "--name", "m", "--replicas", "3", "--max-replicas", "2"]) == 2
    )
    assert "--max-replicas must be >= --replicas" in capsys.readouterr().err
    assert main(["k8s", str(tmp_path / "missing"), "--name", "m"]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["k8s", str(tmp_path / "empty"), "--name", "m"]) == 2
    assert "no */config.pbtxt" in capsys.readouterr().err


def copy_path(repository: Path, name: str, om: Path) -> None:
    """`mkdir -p R/name/1 && cp model.py name.om R/name/1/`: no config.pbtxt."""
    version_dir = repository / name / "1"
    version_dir.mkdir(parents=True)
    assert main(["template", str(version_dir)]) == 0
    shutil.copy(om, version_dir / f"{name}.om")


@pytest.fixture(scope="module")
def om_large_batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MLP with batch gears up to 65536 rows: a 6.5 MB exchange, beyond Triton's 1 MiB."""
    directory = tmp_path_factory.mktemp("large_batch")
    onnx = build_mlp(directory / "mlp.onnx")
    return compile_onnx(
        onnx, directory / "mlp", input_shape="x:-1,16", dynamic_batch_size="1,65536", **KEEP_FP32
    )


def test_copy_path_repository_is_sized_from_its_om(
    tmp_path: Path,
    om_large_batch: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    copied = tmp_path / "copied"
    copy_path(copied, "mlp", om_large_batch)
    scaffolded = tmp_path / "scaffolded"
    scaffold(om_large_batch, scaffolded, name="mlp", runtime="emulator", warmup=False)
    # the emulator's .om says what reads it: no runtime given
    manifests = build_manifests(copied, K8sOptions(name="m"))
    assert manifests.shm_sizes == shm_sizes_for_repository(scaffolded, "emulator")
    assert manifests.shm_sizes == shm_sizes_for_repository(copied)  # serve's sizing too
    default = manifests.shm_sizes.default_bytes
    assert default == 13 * MIB  # twice the 65536-row exchange (not Triton's 1 MiB)
    deployment = manifests.documents[0]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = shlex.split(container["command"][2].split(" && exec ", 1)[1])
    assert f"--backend-config=python,shm-default-byte-size={default}" in args
    assert container["livenessProbe"]["exec"]["command"][:2] == ["ge-python-model", "probe"]
    assert manifests.warnings == []
    validate_core(deployment)
    # An explicit runtime still wins: pyACL, which is not here, cannot read it.
    with pytest.raises(UserError, match="model 'mlp': cannot import pyACL .*must be readable"):
        build_manifests(copied, K8sOptions(name="m", runtime="pyacl"))
    capsys.readouterr()
    assert main(["k8s", str(copied), "--name", "m"]) == 0
    assert documents_of(capsys.readouterr().out)[0]["kind"] == "Deployment"
    assert main(["validate", str(copied)]) == 0
    out = capsys.readouterr().out
    assert "mlp: OK (versions: 1)" in out and "auto-complete will fill max_batch_size 65536" in out
    assert "not checked" not in out and "not loaded" not in out  # read and loaded


def containers_of(document: dict[str, Any]) -> list[dict[str, Any]]:
    if document["kind"] == "Deployment":
        return list(document["spec"]["template"]["spec"]["containers"])
    if document["kind"] == "ServingRuntime":
        return list(document["spec"]["containers"])
    predictor = document["spec"]["predictor"]
    return [predictor["model"], *predictor.get("containers", [])]


def test_containers_run_as_hwhiaiuser_without_capabilities(repository: Path) -> None:
    for options in (
        K8sOptions(name="m", watch_sidecar=True),
        K8sOptions(name="m", watch_sidecar=True, kserve=True),
    ):
        documents = build_manifests(repository, options).documents
        contexts = [
            container["securityContext"]
            for document in documents
            if document["kind"] in ("Deployment", "ServingRuntime", "InferenceService")
            for container in containers_of(document)
            if "securityContext" in container
        ]
        assert len(contexts) == 2  # tritonserver and the watcher
        for context in contexts:
            assert (context["runAsUser"], context["runAsGroup"]) == (HWHIAIUSER_UID, 1000)
            assert HWHIAIUSER_GID == 1000 and context["runAsNonRoot"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["allowPrivilegeEscalation"] is False
        # ASCEND_VISIBLE_DEVICES is the device plugin's to set, for the container it allocates
        # NPUs to: no container sets it, nor any env but the model-repository key.
        for document in documents:
            if document["kind"] in ("Deployment", "ServingRuntime", "InferenceService"):
                for container in containers_of(document):
                    names = [variable["name"] for variable in container.get("env", [])]
                    assert names in ([], [repository_key.ENV])
    root = build_manifests(repository, K8sOptions(name="m", run_as_user=0, run_as_group=1001))
    context = root.documents[0]["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["runAsNonRoot"]) == (
        0,
        1001,
        False,
    )
    validate_core(root.documents[0])
    with pytest.raises(UserError, match="--run-as-user and --run-as-group must be >= 0"):
        build_manifests(repository, K8sOptions(name="m", run_as_group=-1))


def test_watch_sidecar_runs_the_watcher_on_an_explicit_mode_server(repository: Path) -> None:
    deployment = build_manifests(repository, K8sOptions(name="m", watch_sidecar=True)).documents[0]
    server, watch = deployment["spec"]["template"]["spec"]["containers"]
    assert watch["command"] == ["ge-python-model", "watch", "--url", "127.0.0.1:8000"]
    assert "resources" not in watch  # the NPUs are tritonserver's
    args = shlex.split(server["command"][2].split(" && exec ", 1)[1])
    assert "--model-control-mode=explicit" in args and "--load-model=*" in args
    # The model-repository API takes the Secret's key, which both containers get.
    key = "$(GE_PYTHON_BACKEND_REPOSITORY_KEY)"
    assert f"--http-restricted-api=model-repository:ge-repository-key={key}" in args
    assert f"--grpc-restricted-protocol=model-repository:ge-repository-key={key}" in args
    secret = {"secretKeyRef": {"name": "m-repository-key", "key": "key"}}
    for container in (server, watch):
        assert container["env"] == [{"name": repository_key.ENV, "valueFrom": secret}]
    validate_core(deployment)
    plain = build_manifests(repository, K8sOptions(name="m")).documents[0]
    assert len(plain["spec"]["template"]["spec"]["containers"]) == 1
    assert (
        "--model-control-mode=none"
        in plain["spec"]["template"]["spec"]["containers"][0]["command"][2]
    )
    assert "restricted" not in plain["spec"]["template"]["spec"]["containers"][0]["command"][2]


KSERVE_FACTS = json.loads((Path(__file__).parent / "kserve_crd_facts.json").read_text())


def _closed(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with undeclared fields an error at every object that declares its fields."""
    closed = {key: value for key, value in schema.items()}
    if "properties" in schema:
        closed["properties"] = {k: _closed(v) for k, v in schema["properties"].items()}
        closed["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            closed[key] = _closed(schema[key])
    return closed


def validate_kserve(document: dict[str, Any]) -> None:
    facts = KSERVE_FACTS[document["kind"]]
    assert document["apiVersion"] == facts["apiVersion"]
    assert set(document) == {"apiVersion", "kind", "metadata", "spec"}
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": document["metadata"]},
        kubernetes_validate.utils.latest_version(),
        strict=True,
    )  # the metadata is an ObjectMeta
    jsonschema.validate(document["spec"], _closed(facts["spec"]))


def kserve_pod(runtime: dict[str, Any], service: dict[str, Any]) -> dict[str, Any]:
    """The predictor pod KServe builds: the runtime's container merged with the model's fields
    (KServe's merge of `kserve-container`), the sidecars and the volumes."""
    predictor = service["spec"]["predictor"]
    model = {k: v for k, v in predictor["model"].items() if k not in KSERVE_MODEL_ONLY}
    server = {**runtime["spec"]["containers"][0], **model}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [server, *predictor.get("containers", [])],
            "volumes": predictor["volumes"],
            "terminationGracePeriodSeconds": predictor["terminationGracePeriodSeconds"],
        },
    }


KSERVE_MODEL_ONLY = ("modelFormat", "runtime", "storageUri")


def test_kserve_objects_pass_the_crd_schemas(repository: Path) -> None:
    options = K8sOptions(
        name="resnet",
        namespace="inference",
        kserve=True,
        watch_sidecar=True,
        storage_uri="s3://models/resnet",
        node_selector={"accelerator": "huawei-Ascend310P"},
        ready_model="mlp",
    )
    manifests = build_manifests(repository, options)
    runtime, service = documents_of(to_yaml(manifests.documents))
    assert [runtime, service] == manifests.documents  # faithful YAML
    validate_kserve(runtime)
    validate_kserve(service)
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(kserve_pod(runtime, service), version, strict=True)
    device = build_manifests(repository, K8sOptions(name="m", kserve=True, scale_on="device"))
    for document in device.documents:
        validate_kserve(document)
    (metric,) = device.documents[1]["spec"]["predictor"]["autoScaling"]["metrics"]
    assert metric["external"]["metric"]["query"] == (
        "avg(max by (pod) (sum by (pod, device) "
        '(rate(ge_device_busy_seconds_total{pod=~"m-predictor-.*"}[1m]))))'
    )
    assert metric["external"]["target"] == {"type": "Value", "value": "700m"}
    # The checks fail on what the CRDs refuse.
    typo = copy.deepcopy(service)
    typo["spec"]["predictor"]["autoscaling"] = typo["spec"]["predictor"].pop("autoScaling")
    with pytest.raises(jsonschema.ValidationError, match="autoscaling"):
        validate_kserve(typo)
    no_name = copy.deepcopy(service)
    del no_name["spec"]["predictor"]["model"]["modelFormat"]["name"]
    with pytest.raises(jsonschema.ValidationError, match="'name' is a required property"):
        validate_kserve(no_name)
    wrong_type = copy.deepcopy(runtime)
    wrong_type["spec"]["supportedModelFormats"][0]["autoSelect"] = "true"
    with pytest.raises(jsonschema.ValidationError, match="is not of type 'boolean'"):
        validate_kserve(wrong_type)
    bad_backend = copy.deepcopy(service)
    external = bad_backend["spec"]["predictor"]["autoScaling"]["metrics"][0]["external"]
    external["metric"]["backend"] = "datadog"
    with pytest.raises(jsonschema.ValidationError, match="datadog"):
        validate_kserve(bad_backend)
    no_containers = copy.deepcopy(runtime)
    del no_containers["spec"]["containers"]
    with pytest.raises(jsonschema.ValidationError, match="'containers' is a required property"):
        validate_kserve(no_containers)


def test_kserve_contents(repository: Path) -> None:
    manifests = build_manifests(repository, K8sOptions(name="mlp", kserve=True, npus=2))
    runtime, service = manifests.documents
    # Our own model format: KServe's tritonserver runtime (NVIDIA's image) serves tensorrt,
    # tensorflow, onnx, pytorch and triton, so an Ascend model never auto-selects it.
    assert runtime["spec"]["supportedModelFormats"][0]["name"] == MODEL_FORMAT
    assert MODEL_FORMAT not in ("tensorrt", "tensorflow", "onnx", "pytorch", "triton")
    predictor = service["spec"]["predictor"]
    model = predictor["model"]
    assert model["modelFormat"]["name"] == MODEL_FORMAT
    assert model["runtime"] == runtime["metadata"]["name"] == "mlp-runtime"
    assert model["storageUri"] == "pvc://mlp-models"
    assert model["resources"]["limits"] == {"huawei.com/Ascend910": 2}
    container = runtime["spec"]["containers"][0]
    args = shlex.split(container["command"][2].split(" && exec ", 1)[1])
    assert "--model-repository=/mnt/models" in args
    assert "--http-port=8080" in args and "--grpc-port=9000" in args
    assert [port["containerPort"] for port in container["ports"]] == [8080, 9000]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": 8080}
    assert container["startupProbe"]["httpGet"]["port"] == 8080
    script = container["livenessProbe"]["exec"]["command"][2]
    assert "--url 127.0.0.1:8080 --model conv" in script and "--model mlp" in script
    volumes = {volume["name"]: volume for volume in predictor["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in model["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {
        "medium": "Memory",
        "sizeLimit": f"{manifests.shm_limit_bytes // 2**20}Mi",
    }
    assert service["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == (
        "RawDeployment"
    )
    assert (predictor["minReplicas"], predictor["maxReplicas"]) == (1, 2)
    (metric,) = predictor["autoScaling"]["metrics"]
    assert metric["type"] == "External"
    query = metric["external"]["metric"]["query"]
    assert query == (
        'sum(rate(nv_inference_queue_duration_us{pod=~"mlp-predictor-.*"}[1m])) / '
        'clamp_min(sum(rate(nv_inference_request_success{pod=~"mlp-predictor-.*"}[1m])), 1e-9)'
    )
    assert metric["external"]["target"] == {"type": "Value", "value": "50000"}
    assert "containers" not in predictor  # no sidecar unless asked
    watched = build_manifests(repository, K8sOptions(name="m", kserve=True, watch_sidecar=True))
    sidecar = watched.documents[1]["spec"]["predictor"]["containers"][0]
    assert sidecar["command"] == ["ge-python-model", "watch", "--url", "127.0.0.1:8080"]
    server = watched.documents[0]["spec"]["containers"][0]
    assert sidecar["env"] == server["env"] == repository_key_env(K8sOptions(name="m"))
    assert (
        "model-repository:ge-repository-key=$(GE_PYTHON_BACKEND_REPOSITORY_KEY)"
        in (server["command"][2])
    )


def test_kserve_cli(repository: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["k8s", str(repository), "--name", "m", "--kserve", "--storage-uri", "pvc://claim/models"]
    )
    runtime, service = documents_of(capsys.readouterr().out)
    assert code == 0
    assert service["spec"]["predictor"]["model"]["storageUri"] == "pvc://claim/models"
    validate_kserve(runtime)
    validate_kserve(service)
    code = main(
        ["k8s", str(repository), "--name", "m", "--kserve", "--watch-sidecar"]
        + ["--run-as-user", "2000", "--run-as-group", "3000", "--prometheus", "http://p:9090"]
    )
    printed = capsys.readouterr().out
    runtime, service = documents_of(printed)
    assert code == 0
    assert (
        "# the model-repository API takes only the key of Secret m-repository-key; create it "
        'first: kubectl create secret generic m-repository-key --from-literal=key="$(openssl '
        'rand -hex 32)"' in printed
    )
    for container in (
        runtime["spec"]["containers"][0],
        *service["spec"]["predictor"]["containers"],
    ):
        context = container["securityContext"]
        assert (context["runAsUser"], context["runAsGroup"]) == (2000, 3000)
    metric = service["spec"]["predictor"]["autoScaling"]["metrics"][0]["external"]["metric"]
    assert metric["serverAddress"] == "http://p:9090"
    for args, message in (
        (["--kserve", "--storage-uri", "gs://bucket"], "must be pvc://<claim>"),
        (["--kserve", "--storage-uri", "pvc://"], "must be pvc://<claim>"),
        (["--storage-uri", "s3://bucket"], "--storage-uri needs --kserve"),
        (["--kserve", "--pvc", "claim"], "not --pvc/--host-path"),
    ):
        assert main(["k8s", str(repository), "--name", "m", *args]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.e2e
@pytest.mark.parametrize("watch_sidecar", [False, True], ids=["none", "explicit"])
def test_the_pod_command_line_serves_the_repository(
    repository: Path, tmp_path: Path, watch_sidecar: bool
) -> None:
    """The container's tritonserver flags, run here: only paths, ports and addresses differ
    (with the watch sidecar, explicit model-control mode loading every model at start, its
    model-repository API closed to a client without the Secret's key, which the kubelet
    expands into the arguments)."""
    options = K8sOptions(name="mlp", cann_env="", watch_sidecar=watch_sidecar)
    deployment = build_manifests(repository, options).documents[0]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    assert ("--load-model=*" in args) is watch_sidecar
    binary = find_server()
    http, metrics, grpc = free_ports(3)
    local = {
        "--model-repository": str(repository),
        "--http-port": str(http),
        "--grpc-port": str(grpc),
        "--metrics-port": str(metrics),
        "--http-address": "127.0.0.1",
        "--grpc-address": "127.0.0.1",
        "--metrics-address": "127.0.0.1",
    }
    command = [str(binary.executable), f"--backend-directory={binary.backend_directory}"]
    key = repository_key.new_key()  # the kubelet expands $(VAR) of the container's env
    for arg in args[1:]:
        flag, _, value = arg.partition("=")
        value = value.replace(f"$({repository_key.ENV})", key)
        command.append(f"{flag}={local.get(flag, value)}")
    env = server_environment(binary, {"GE_PYTHON_BACKEND_ACL": "emulator"})
    with open(tmp_path / "triton.log", "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while not ready(f"http://127.0.0.1:{http}/v2/health/ready"):
            assert process.poll() is None, (tmp_path / "triton.log").read_text()
            assert time.monotonic() < deadline, "not ready in 120 s"
            time.sleep(0.2)
        for model in ("mlp", "conv"):
            assert ready(f"http://127.0.0.1:{http}/v2/models/{model}/ready")
        if watch_sidecar:
            stranger = TritonClient(f"127.0.0.1:{http}", repository_key="not the key")
            with stranger, pytest.raises(InferenceServerException, match="restricted"):
                stranger.unload_model("mlp")
            with TritonClient(f"127.0.0.1:{http}", repository_key=key) as client:
                client.unload_model("mlp")
                client.load_model("mlp")
            assert ready(f"http://127.0.0.1:{http}/v2/models/mlp/ready")
        liveness = deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
        script = liveness["exec"]["command"][2].replace("127.0.0.1:8000", f"127.0.0.1:{http}")
        path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
        probe = subprocess.run(
            ["/bin/sh", "-c", script],
            env={**os.environ, "PATH": path},
            capture_output=True,
            text=True,
            timeout=liveness["timeoutSeconds"],
        )
        assert probe.returncode == 0, probe.stderr
        assert probe.stdout.count("ok: model") == 2
        # The series the device-utilization adapter rule reads (docs/guides/kubernetes.md), per
        # device.
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as reply:
            exported = reply.read().decode()
        busy = metric_samples(exported, "ge_device_busy_seconds_total")
        for model in ("mlp", "conv"):  # a series per instance
            assert {(s["device"], s["version"]) for s, _ in busy if s["model"] == model} == {
                ("0", "1")
            }, busy
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(60)
        finally:  # the model stubs share the server's process group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_device_host_buffers_are_sized_in_the_header(
    tmp_path: Path, om_dynamic_batch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each instance under the device host: a buffer per batch in flight (pipeline_depth + 2),
    sized as its stub asks for its lane's tensors; memfd memory, not /dev/shm."""
    repository = tmp_path / "models"
    scaffold(
        om_dynamic_batch,
        repository,
        name="hosted",
        runtime="emulator",
        device_host=True,
        instances=2,
        pipeline_depth=2,
    )
    scaffold(om_dynamic_batch, repository, name="stub", runtime="emulator", instances=3)
    lane = describe_om(om_dynamic_batch, "emulator").lane_bytes
    assert main(["k8s", str(repository), "--name", "mix", "--runtime", "emulator"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    expected = 2 * (2 + 2) * buffer_bytes(lane)  # 2 hosted instances at depth 2; stubs none
    assert f"device host buffers up to {expected // 2**20} MiB (memfd" in header, header
