"""The template alone serves an `.om` (issue 13), on the real tritonserver, one server for all.

* `zero`: a version directory holding only `model.py` and the `.om` (no config.pbtxt): Triton's
  auto-complete asks the template, which reads the `.om` without a device;
* `minimal`: the same with a config.pbtxt of `backend`, an instance group and a parameter;
* `versions`: version 1 and version 2 (other weights, added by `scaffold --version 2
  --version-policy all`) served side by side, each answering with its own `.om`;
* `hot`: version 2 added and version 1 unloaded while clients keep sending (explicit mode);
* `two_oms`, `no_om`: version directories Triton cannot serve, UNAVAILABLE with their reasons.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from e2e_helpers import grpc_address, model_states, running_server, wait_for_state
from onnx import numpy_helper
from onnx_models import KEEP_FP32, onnx_path_of, reference

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

GEARS = (1, 2, 4, 8)
MODELS = ("zero", "minimal", "versions", "hot", "two_oms", "no_om")
MINIMAL_CONFIG = """\
backend: "python"
instance_group [{ kind: KIND_CPU, count: 1 }]
parameters { key: "pipeline_depth" value { string_value: "2" } }
"""


def reweighted(om: Path, directory: Path, scale: float) -> Path:
    """The batch MLP of `om` with its weights W scaled: another `.om` with the same interface."""
    model = onnx.load(str(onnx_path_of(om)))
    for index, tensor in enumerate(model.graph.initializer):
        if tensor.name == "W":
            weights = numpy_helper.to_array(tensor) * np.float32(scale)
            model.graph.initializer[index].CopyFrom(numpy_helper.from_array(weights, "W"))
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / "mlp.onnx"))
    return compile_onnx(
        directory / "mlp.onnx",
        directory / "mlp",
        input_shape="x:-1,16",
        dynamic_batch_size="1,2,4,8",
        **KEEP_FP32,
    )


def copy_path(repository: Path, name: str, version: int, *oms: Path) -> Path:
    """`mkdir -p R/name/V && cp model.py *.om R/name/V/` (model.py from `template`)."""
    version_dir = repository / name / str(version)
    version_dir.mkdir(parents=True)
    assert main(["template", str(version_dir)]) == 0
    for om in oms:
        shutil.copy(om, version_dir / om.name)
    return version_dir


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path
) -> Iterator[tuple[TritonServer, Path, dict[str, Path]]]:
    root = tmp_path_factory.mktemp("autocomplete")
    repository = root / "models"
    oms = {"v1": om_dynamic_batch, "v2": reweighted(om_dynamic_batch, root / "v2", 3.0)}
    copy_path(repository, "zero", 1, om_dynamic_batch)
    copy_path(repository, "minimal", 1, om_dynamic_batch)
    (repository / "minimal" / "config.pbtxt").write_text(MINIMAL_CONFIG)
    scaffold(om_dynamic_batch, repository, name="versions", runtime="emulator", warmup=False)
    assert (
        main(
            [
                "scaffold",
                str(oms["v2"]),
                "-r",
                str(repository),
                "--name",
                "versions",
                "--version",
                "2",
                "--version-policy",
                "all",
                "--runtime",
                "emulator",
            ]
        )
        == 0
    )
    scaffold(om_dynamic_batch, repository, name="hot", runtime="emulator", warmup=False)
    copy_path(repository, "two_oms", 1, om_dynamic_batch, oms["v2"])
    copy_path(repository, "no_om", 1)
    with running_server(
        repository,
        # a 5 ms device, so concurrent requests queue while both lanes are busy and merge
        env={"GE_PYTHON_BACKEND_ACL": "emulator", "GE_EMULATOR_TIMING": "execute_us=5000"},
        log_path=root / "triton.log",
        model_control_mode="explicit",
        load_models=list(MODELS),
    ) as server:
        yield server, repository, oms


def infer(
    client: TritonClient, model: str, x: np.ndarray, version: str = ""
) -> tuple[np.ndarray, np.ndarray]:
    result = client.infer(model, {"x": (x, "FP32")}, ["y", "z"], version)
    return result["y"], result["z"]


def assert_answers(om: Path, x: np.ndarray, answer: tuple[np.ndarray, np.ndarray]) -> None:
    expected = reference(om, {"x": x})
    np.testing.assert_allclose(answer[0], expected["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(answer[1], expected["z"], rtol=1e-5, atol=1e-4)


def test_zero_and_minimal_config_directories_get_the_om_config(
    served: tuple[TritonServer, Path, dict[str, Path]],
) -> None:
    server, _, _ = served
    with TritonClient(grpc_address(server), "grpc") as client:
        for model in ("zero", "minimal"):
            config = client.model_config(model)
            assert config.max_batch_size == 8
            assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
                ("x", 11, [16])  # TYPE_FP32
            ]
            assert [(t.name, list(t.dims)) for t in config.output] == [("y", [8]), ("z", [1])]
            assert list(config.dynamic_batching.preferred_batch_size) == list(GEARS)
            assert config.dynamic_batching.max_queue_delay_microseconds == 100
        minimal = client.model_config("minimal")
        assert minimal.parameters["pipeline_depth"].string_value == "2"  # the user's, kept


@pytest.mark.parametrize("model", ["zero", "minimal"])
def test_every_batch_size_up_to_the_largest_gear_is_correct(
    served: tuple[TritonServer, Path, dict[str, Path]], model: str
) -> None:
    server, _, oms = served
    rng = np.random.default_rng(13)
    with TritonClient(grpc_address(server), "grpc") as client:
        for rows in range(1, max(GEARS) + 1):
            x = rng.standard_normal((rows, 16)).astype(np.float32)
            assert_answers(oms["v1"], x, infer(client, model, x))


def test_dynamic_batching_merges_concurrent_requests(
    served: tuple[TritonServer, Path, dict[str, Path]],
) -> None:
    server, _, oms = served
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((1, 16)).astype(np.float32) for _ in range(48)]

    def one(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with TritonClient(grpc_address(server), "grpc") as client:
            return infer(client, "zero", x)

    with TritonClient(grpc_address(server), "grpc") as client:
        before = client.inference_statistics("zero")["model_stats"][0]
        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(one, xs))
        after = client.inference_statistics("zero")["model_stats"][0]
    for x, answer in zip(xs, answers):
        assert_answers(oms["v1"], x, answer)
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == 48
    assert executions < inferences, (executions, inferences)


def test_two_versions_serve_side_by_side_with_their_own_om(
    served: tuple[TritonServer, Path, dict[str, Path]],
) -> None:
    server, repository, oms = served
    files = (repository / "versions" / "2").iterdir()
    assert sorted(p.name for p in files if p.name != "__pycache__") == [
        "mlp.om",
        "mlp.om.sha256",
        "model.py",
    ]
    x = np.random.default_rng(2).standard_normal((3, 16)).astype(np.float32)
    with TritonClient(grpc_address(server), "grpc") as client:
        assert client.is_model_ready("versions", "1") and client.is_model_ready("versions", "2")
        one, two = infer(client, "versions", x, "1"), infer(client, "versions", x, "2")
    assert_answers(oms["v1"], x, one)
    assert_answers(oms["v2"], x, two)
    assert not np.allclose(one[0], two[0])


@pytest.mark.parametrize(
    ("model", "fragments"),
    [
        ("two_oms", ("/two_oms/1 holds 2 .om files", "mlp.om, mlp_batch.om", "om_file")),
        ("no_om", ("/no_om/1 holds no .om file", "model.py")),
    ],
)
def test_a_version_without_exactly_one_om_fails_alone(
    served: tuple[TritonServer, Path, dict[str, Path]], model: str, fragments: tuple[str, ...]
) -> None:
    server, _, _ = served
    state, reason = model_states(server)[model]
    assert state == "UNAVAILABLE"
    for fragment in fragments:
        assert fragment in reason, (fragment, reason)
    assert server.poll() is None
    assert model_states(server)["zero"] == ("READY", "")


def test_a_version_added_and_the_old_one_unloaded_under_load_loses_no_request(
    served: tuple[TritonServer, Path, dict[str, Path]],
) -> None:
    """Explicit mode: clients keep sending to `hot` while version 2 is scaffolded next to 1 and
    the model is reloaded (version_policy latest:1: 2 loads, then 1 unloads)."""
    server, repository, oms = served
    x = np.random.default_rng(9).standard_normal((2, 16)).astype(np.float32)
    expected = {key: reference(om, {"x": x})["y"] for key, om in oms.items()}
    stop = threading.Event()
    answers: list[str] = []
    failures: list[str] = []

    def client_loop() -> None:
        with TritonClient(grpc_address(server), "grpc") as client:
            while not stop.is_set():
                try:
                    y, _ = infer(client, "hot", x)
                except Exception as exc:  # every failure is a lost request
                    failures.append(str(exc))
                    continue
                matches = [k for k, ref in expected.items() if np.allclose(y, ref, atol=1e-5)]
                answers.append(matches[0] if matches else "wrong")

    with ThreadPoolExecutor(3) as pool:
        loops = [pool.submit(client_loop) for _ in range(3)]
        time.sleep(0.5)
        assert (
            main(
                [
                    "scaffold",
                    str(oms["v2"]),
                    "-r",
                    str(repository),
                    "--name",
                    "hot",
                    "--version",
                    "2",
                    "--runtime",
                    "emulator",
                ]
            )
            == 0
        )
        with TritonClient(grpc_address(server), "grpc") as client:
            client.load_model("hot")
            wait_for_state(server, "hot", "READY")
            assert client.is_model_ready("hot", "2")
            assert not client.is_model_ready("hot", "1")
        time.sleep(0.5)
        stop.set()
        for loop in loops:
            loop.result()
    assert not failures, failures[:3]
    assert "wrong" not in answers
    assert answers[0] == "v1" and answers[-1] == "v2"
    assert answers.count("v2") > 0 and answers.index("v2") > 0
