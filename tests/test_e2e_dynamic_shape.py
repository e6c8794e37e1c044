"""End to end: dynamic-shape `.om` models served by the real tritonserver.

A NonZero model and an NMS detector (data-dependent rows, static inputs) and a shape-range
classifier (`--input_shape x:1~16,16`) are scaffolded and auto-completed; concurrent requests each
come back with their own rows, checked against onnxruntime. Their configs say Triton must not
merge requests (`max_batch_size: 0`, no dynamic batching) and give `-1` output dims. Sources:
hicann/ge docs/zh/user_guides/atc_tools/CLI_options/--input_shape.md (ranges; set input tensor
descs before executing, read output tensor descs after), aclmdlGetOutputSizeByIndex.md (0 when
unbounded: the caller sizes the buffer, here the parameter max_output_bytes, or passes an empty
one that ACL allocates during the synchronous execute).

The same NonZero and NMS `.om` files are also served through the copy path (`model.py` from
`template` and the `.om`, no config, no parameter): their unbounded outputs are allocated by ACL
at each execution and freed after each copy out, so 1,000 requests leave the emulated device's
memory (shared by every process of the host, as `acl.rt.get_mem_info` reports it) where it was.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx_models
import pytest
from e2e_helpers import http_address, running_server
from onnx_models import KEEP_FP32
from tritonclient.utils import InferenceServerException

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.emulator import acl
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

BOXES, CLASSES = 20, 3
COPY_PATH = {"nonzero_copy": "nonzero", "nms_copy": "nms"}  # served from model.py + .om only


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("dd_models")
    return {
        "nonzero": compile_onnx(
            onnx_models.build_nonzero(root / "nz.onnx"), root / "nz", **KEEP_FP32
        ),
        "nms": compile_onnx(
            onnx_models.build_nms(root / "nms.onnx"),
            root / "nms",
            input_shape=f"boxes:1,{BOXES},4;scores:1,{CLASSES},{BOXES}",
            **KEEP_FP32,
        ),
        "ranged": compile_onnx(
            onnx_models.build_mlp(root / "mlp.onnx"),
            root / "mlp",
            input_shape="x:1~16,16",
            **KEEP_FP32,
        ),
    }


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, models: dict[str, Path]
) -> Iterator[tuple[TritonServer, Path]]:
    root = tmp_path_factory.mktemp("dd_e2e")
    repository = root / "models"
    for name, om in models.items():
        scaffold(om, repository, name=name, runtime="emulator", max_output_bytes=1 << 16)
    for name, source in COPY_PATH.items():
        version_dir = repository / name / "1"
        version_dir.mkdir(parents=True)
        assert main(["template", str(version_dir)]) == 0
        shutil.copy(models[source], version_dir / models[source].name)
    env = {"GE_PYTHON_BACKEND_ACL": "emulator"}  # the copy path has no acl_runtime parameter
    with running_server(repository, env=env, log_path=root / "triton.log") as server:
        yield server, repository


def _detections(rng: np.random.Generator) -> dict[str, np.ndarray]:
    corners = rng.random((1, BOXES, 2), dtype=np.float32) * 0.8
    sizes = rng.random((1, BOXES, 2), dtype=np.float32) * 0.3 + 0.05
    boxes = np.concatenate([corners, corners + sizes], axis=2)
    return {"boxes": boxes, "scores": rng.random((1, CLASSES, BOXES), dtype=np.float32)}


def _infer(server: TritonServer, model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with TritonClient(http_address(server), "http") as client:
        result = client.send(model, client.prepare(typed(feeds), None))
    response = result.get_response()
    return {output["name"]: result.as_numpy(output["name"]) for output in response["outputs"]}


def test_configs_never_merge_requests(served: tuple[TritonServer, Path]) -> None:
    _, repository = served
    for name in ("nonzero", "nms", "ranged"):
        config = load_model_config(repository / name / "config.pbtxt")
        assert config.max_batch_size == 0
        assert not config.HasField("dynamic_batching")
    nms = load_model_config(repository / "nms" / "config.pbtxt")
    assert [list(o.dims) for o in nms.output] == [[-1, 3], [-1, 4]]
    assert nms.parameters["max_output_bytes"].string_value == str(1 << 16)
    ranged = load_model_config(repository / "ranged" / "config.pbtxt")
    assert [list(i.dims) for i in ranged.input] == [[-1, 16]]


def test_nonzero_answers_each_request_with_its_own_rows(
    served: tuple[TritonServer, Path], models: dict[str, Path]
) -> None:
    server, _ = served
    rng = np.random.default_rng(7)
    feeds = [{"x": rng.random((4, 4), dtype=np.float32)} for _ in range(16)]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda f: _infer(server, "nonzero", f), feeds))
    counts = set()
    for feed, result in zip(feeds, results):
        want = onnx_models.reference(models["nonzero"], feed)
        np.testing.assert_array_equal(result["indices"], want["indices"])
        assert result["count"].reshape(()) == want["count"]
        counts.add(want["indices"].shape[1])
    assert len(counts) > 1  # the rows really differ between requests


def test_nms_detector_answers_each_request_with_its_own_boxes(
    served: tuple[TritonServer, Path], models: dict[str, Path]
) -> None:
    server, _ = served
    rng = np.random.default_rng(11)
    feeds = [_detections(rng) for _ in range(12)]
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda f: _infer(server, "nms", f), feeds))
    kept = set()
    for feed, result in zip(feeds, results):
        want = onnx_models.reference(models["nms"], feed)
        np.testing.assert_array_equal(result["selected"], want["selected"])
        np.testing.assert_array_equal(result["picked"], want["picked"])
        kept.add(len(want["selected"]))
    assert len(kept) > 1


def _feeds(source: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if source == "nonzero":
        return {"x": rng.random((4, 4), dtype=np.float32)}
    return _detections(rng)


def _device_free() -> int:
    """Free memory of emulated device 0 as every process of this host leaves it (the ledger
    `acl.rt.get_mem_info` and Triton's ge_device_memory_free_bytes read), from this process."""
    assert acl.init() == 0
    try:
        assert acl.rt.set_device(0) == 0
        free, _, ret = acl.rt.get_mem_info(1)
        assert ret == 0
        assert acl.rt.reset_device(0) == 0
        return int(free)
    finally:
        acl.finalize()


@pytest.mark.usefixtures("clean_acl")
def test_copy_path_serves_unbounded_outputs_through_system_allocation(
    served: tuple[TritonServer, Path], models: dict[str, Path]
) -> None:
    """No config and no max_output_bytes: Triton's auto-complete gives `max_batch_size: 0`
    and -1 dims; the instance logs that ACL allocates the outputs; 1,000 concurrent requests
    each get their own rows, and the device's free memory is back where it started."""
    server, _ = served
    with TritonClient(http_address(server), "http") as client:
        for name in COPY_PATH:
            config = client.model_config(name)
            assert config.max_batch_size == 0 and "max_output_bytes" not in config.parameters
    log = server.log_path.read_text(errors="replace") if server.log_path else ""
    assert log.count("ACL allocates them at each execution") >= len(COPY_PATH), log[-4000:]
    rng = np.random.default_rng(21)
    work = [(name, _feeds(source, rng)) for _ in range(500) for name, source in COPY_PATH.items()]
    for name, feeds in work[:2]:  # each instance has run (and allocated) before the start
        _infer(server, name, feeds)
    start = _device_free()
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda job: _infer(server, *job), work))
    assert _device_free() == start
    rows = {name: set() for name in COPY_PATH}
    for (name, feeds), result in zip(work, results):
        want = onnx_models.reference(models[COPY_PATH[name]], feeds)
        for output, expected in want.items():
            np.testing.assert_array_equal(result[output].reshape(expected.shape), expected)
        rows[name].add(want["indices"].shape[1] if "indices" in want else len(want["selected"]))
    assert all(len(kept) > 1 for kept in rows.values()), rows  # the rows differ by request


def test_shape_range_input_serves_every_size_in_its_range(
    served: tuple[TritonServer, Path], models: dict[str, Path]
) -> None:
    server, _ = served
    rng = np.random.default_rng(5)
    for rows in (1, 9, 16):
        x = rng.random((rows, 16), dtype=np.float32)
        result = _infer(server, "ranged", {"x": x})
        want = onnx_models.reference(models["ranged"], {"x": x})
        np.testing.assert_allclose(result["y"], want["y"], rtol=1e-5, atol=1e-6)
    with pytest.raises(InferenceServerException, match="outside the model's shape range"):
        _infer(server, "ranged", {"x": np.zeros((17, 16), np.float32)})
