"""End to end on the real tritonserver (issue 21, points 4 and 5): ATC's tensor names and a batch
model with a static side input, each answer checked against onnxruntime on the ONNX.

* `scaled`: `--input_shape "x:-1,4;scale:1" --dynamic_batch_size 1,2,4` (ATC leaves `scale`
  without the batch axis: option_utils.cc CheckDynamicBatchSizeInputShapeValid), scaffolded;
  `scaled_auto`: the same `.om` in a directory without config.pbtxt (auto-complete);
* `long`: a 150-character input and output name (the dims calls convert them,
  aclmdlGetInputDims.md; the names served are the real ones);
* `tf`: a TensorFlow model via ATC (`--framework 3`, ONNX stand-in): outputs `op:idx`, served
  whole (aclmdlGetOutputNameByIndex.md); `tf2onnx`: the same ONNX via ATC as ONNX, outputs
  `op:idx:Identity:0`, served as the ONNX names `Identity:0`; `mlp`: `op:idx:y` served as `y`.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import grpc_address, running_server
from onnx_models import (
    KEEP_FP32,
    build_long_names,
    build_mlp,
    build_scaled,
    build_tf_style,
    reference,
)

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient
from ge_python_backend.emulator.omfile import OmModel, compile_onnx
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

LONG = 150


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path]]:
    root = tmp_path_factory.mktemp("names")
    repository = root / "models"
    scaled = compile_onnx(
        build_scaled(root / "scaled.onnx"),
        root / "scaled",
        input_shape="x:-1,4;scale:1",
        dynamic_batch_size="1,2,4",
        **KEEP_FP32,
    )
    scaffold(scaled, repository, name="scaled", runtime="emulator")
    auto = repository / "scaled_auto" / "1"
    auto.mkdir(parents=True)
    assert main(["template", str(auto)]) == 0
    shutil.copy(scaled, auto / scaled.name)
    long_onnx, long_in, _ = build_long_names(root / "long.onnx", LONG)
    long = compile_onnx(
        long_onnx,
        root / "long",
        input_shape=f"{long_in}:-1,4",
        dynamic_batch_size="1,2",
        **KEEP_FP32,
    )
    scaffold(long, repository, name="long", runtime="emulator")
    tf_onnx = build_tf_style(root / "tf.onnx")
    tf = compile_onnx(
        tf_onnx,
        root / "tf",
        input_shape="x:-1,4",
        dynamic_batch_size="1,2",
        framework=3,
        **KEEP_FP32,
    )
    scaffold(tf, repository, name="tf", runtime="emulator")
    tf2onnx = compile_onnx(
        tf_onnx, root / "tf2onnx", input_shape="x:-1,4", dynamic_batch_size="1,2", **KEEP_FP32
    )
    scaffold(tf2onnx, repository, name="tf2onnx", runtime="emulator")
    mlp = compile_onnx(
        build_mlp(root / "mlp.onnx"), root / "mlp", input_shape="x:2,16", **KEEP_FP32
    )
    scaffold(mlp, repository, name="mlp", runtime="emulator")
    with running_server(
        repository, env={"GE_PYTHON_BACKEND_ACL": "emulator"}, log_path=root / "triton.log"
    ) as server:
        yield server, root


def test_side_input_model_is_configured_without_triton_batching(
    served: tuple[TritonServer, Path],
) -> None:
    server, _ = served
    with TritonClient(grpc_address(server), "grpc") as client:
        for model in ("scaled", "scaled_auto"):
            config = client.model_config(model)
            # Triton's batch dimension would apply to `scale` too: full shapes, -1 for the rows
            assert config.max_batch_size == 0, model
            assert [(t.name, list(t.dims)) for t in config.input] == [
                ("x", [-1, 4]),
                ("scale", [1]),
            ]
            assert [(t.name, list(t.dims)) for t in config.output] == [("y", [-1, 3])]


@pytest.mark.parametrize("model", ["scaled", "scaled_auto"])
def test_side_input_is_passed_to_every_execution(
    served: tuple[TritonServer, Path], model: str
) -> None:
    server, root = served
    rng = np.random.default_rng(21)
    with TritonClient(grpc_address(server), "grpc") as client:
        for rows in (1, 3, 4, 7, 11):  # 7 and 11 rows run as several gear executions
            x = rng.standard_normal((rows, 4)).astype(np.float32)
            scale = np.array([rng.uniform(0.5, 3.0)], np.float32)
            got = client.infer(model, {"x": (x, "FP32"), "scale": (scale, "FP32")}, ["y"])
            want = reference(root / "scaled.onnx", {"x": x, "scale": scale})["y"]
            np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)


def test_concurrent_requests_keep_their_own_side_input(served: tuple[TritonServer, Path]) -> None:
    server, root = served
    rng = np.random.default_rng(5)
    requests = [
        (rng.standard_normal((rows, 4)).astype(np.float32), np.array([i + 1.0], np.float32))
        for i, rows in enumerate((2, 5, 1, 6, 3, 4, 9, 2))
    ]

    def one(request: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        with TritonClient(grpc_address(server), "grpc") as client:
            x, scale = request
            return client.infer("scaled", {"x": (x, "FP32"), "scale": (scale, "FP32")}, ["y"])["y"]

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(one, requests))
    for (x, scale), got in zip(requests, answers):
        want = reference(root / "scaled.onnx", {"x": x, "scale": scale})["y"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_150_character_input_name_is_served_by_its_real_name(
    served: tuple[TritonServer, Path],
) -> None:
    server, root = served
    _, long_in, long_out = build_long_names(root / "again.onnx", LONG)
    assert len(long_in) == len(long_out) == LONG
    x = np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)
    with TritonClient(grpc_address(server), "grpc") as client:
        metadata = client.model_metadata("long")
        assert [item["name"] for item in metadata["inputs"]] == [long_in]
        assert [item["name"] for item in metadata["outputs"]] == [long_out]
        got = client.infer("long", {long_in: (x, "FP32")}, [long_out])
    np.testing.assert_allclose(got[long_out], reference(root / "long.onnx", [x])[long_out])


@pytest.mark.parametrize(
    ("model", "reported", "served_names"),
    [
        ("tf", ["Identity:0", "Identity_1:0"], ["Identity:0", "Identity_1:0"]),
        (
            "tf2onnx",
            ["Identity:0:Identity:0", "Identity_1:0:Identity_1:0"],
            ["Identity:0", "Identity_1:0"],
        ),
        ("mlp", ["Relu_2:0:y", "ReduceSum_3:0:z"], ["y", "z"]),
    ],
)
def test_output_names_follow_acl_formats(
    served: tuple[TritonServer, Path], model: str, reported: list[str], served_names: list[str]
) -> None:
    server, root = served
    om = OmModel.load(root / f"{model}.om")
    assert [t.name for t in om.description.outputs] == reported  # what ACL reports
    onnx_path = root / ("mlp.onnx" if model == "mlp" else "tf.onnx")
    shape = (2, 16) if model == "mlp" else (2, 4)
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    with TritonClient(grpc_address(server), "grpc") as client:
        metadata = client.model_metadata(model)
        assert [item["name"] for item in metadata["outputs"]] == served_names
        got = client.infer(model, {"x": (x, "FP32")}, served_names)
    want = reference(onnx_path, [x])
    for name, onnx_name in zip(served_names, want):
        np.testing.assert_allclose(got[name], want[onnx_name], rtol=1e-5, atol=1e-5)
