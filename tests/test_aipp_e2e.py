"""End to end: static-AIPP `.om` models served by the real tritonserver (issue 21, item 1).

Two emulator `.om` files of the conv model (`image` FLOAT[2,3,8,8]), compiled with ATC's
`--insert_op_conf`: a 12x10 YUV420SP_U8 source (crop, CSC, mean/var) and a 10x10 RGB888_U8
source (crop, mean/min/var). Clients send the raw UINT8 bytes in the shape whose bytes equal
`get_input_size_by_index` (v2 for YUV420SP: `[n, h*1.5, w, 1]`, aclmdlGetInputDimsV2.md table 1).
Each answer must equal the documented AIPP steps in NumPy (`aipp.StaticAipp.apply`, steps of
config_file_template.md) followed by onnxruntime on the original ONNX. The YUV model is
scaffolded; the RGB model is served from a directory without config.pbtxt (auto-complete); a
dynamic-AIPP model (`ascend_dynamic_aipp_data`) is served with the RGB config fixed by the
parameter `aipp_config`, its config.pbtxt otherwise auto-completed.

Issue 35: AIPP with gears. A classifier (`image` FLOAT[-1,3,16,16]) compiled with batch gears
1,2,4,8 and a 20x20 RGB888_U8 AIPP (crop 16x16, mean/var) is scaffolded: 16 concurrent
requests of 1 to 3 images each equal NumPy AIPP per image + onnxruntime, and Triton's
dynamic batcher runs them in fewer executions than requests. The conv model compiled with
`--dynamic_image_size 8,8;12,16` and a YUV420SP_U8 AIPP without crop or padding (CANN's
"Concepts and Restrictions": src_image_size 0, the source is each gear's size) is served
auto-completed and answers both sizes (`[1, h*1.5, w, 1]` bytes each).
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import onnx_models
import pytest
from e2e_helpers import grpc_address, http_address, running_server
from onnx_models import onnx_path_of, reference

from ge_python_backend.aipp import bind_static, parse_aipp_config
from ge_python_backend.ascend import DTYPES_BY_NUMPY, Format
from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

MODEL_DIMS = (2, 3, 8, 8)  # the conv model's input, NCHW
# model name -> (aipp.cfg text, per-request dims Triton serves: v2 without the batch axis)
MODELS = {
    "yuv420sp": (onnx_models.AIPP_YUV420SP, [15, 12, 1]),  # 10 * 1.5 rows of 12, one channel
    "rgb888": (onnx_models.AIPP_RGB888, [10, 10, 3]),
    "dynamic": (onnx_models.AIPP_RGB888, [10, 10, 3]),
}
CLASSIFIER_GEARS = "1,2,4,8"
CLASSIFIER_AIPP = """
aipp_op {
    aipp_mode: static
    input_format: RGB888_U8
    src_image_size_w: 20
    src_image_size_h: 20
    crop: true
    load_start_pos_w: 2
    load_start_pos_h: 2
    crop_size_w: 16
    crop_size_h: 16
    mean_chn_0: 124
    mean_chn_1: 117
    mean_chn_2: 104
    var_reci_chn_0: 0.0171247538
    var_reci_chn_1: 0.0175070028
    var_reci_chn_2: 0.0174291938
}
"""
HW_GEARS = ((8, 8), (12, 16))
DYNAMIC_CONFIG = """\
backend: "python"
parameters { key: "aipp_config" value { string_value: "aipp.cfg" } }
"""


def numpy_aipp_then_onnxruntime(
    om: Path,
    config: str,
    raw: np.ndarray,
    image_dims: tuple[int, ...] = (1, *MODEL_DIMS[1:]),
    output: str = "features",
) -> np.ndarray:
    """The reference: the AIPP steps in NumPy on each image (the model input of one image is
    `image_dims`), then onnxruntime on the ONNX."""
    bound = bind_static(
        parse_aipp_config(config)[0],
        image_dims,
        Format.NCHW,
        DTYPES_BY_NUMPY[np.dtype(np.float32)],
    )
    images = np.concatenate([bound.apply(image) for image in raw])
    return reference(onnx_path_of(om), [images])[output]


def compile_with_aipp(directory: Path, build: Any, config: str, **flags: str) -> Path:
    """An emulator `.om` of `build`'s ONNX with `config` as `--insert_op_conf`."""
    directory.mkdir()
    (directory / "aipp.cfg").write_text(config)
    return compile_onnx(
        build(directory / "model.onnx"),
        directory / "model",
        insert_op_conf=directory / "aipp.cfg",
        **onnx_models.KEEP_FP32,
        **flags,
    )


def template_dir(repository: Path, name: str, om: Path) -> Path:
    """`R/name/1` holding model.py (the template) and the `.om`."""
    version_dir = repository / name / "1"
    version_dir.mkdir(parents=True)
    assert main(["template", str(version_dir)]) == 0
    shutil.copy(om, version_dir / om.name)
    return version_dir


EXECUTE_US = 20_000


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    om_aipp_yuv: Path,
    om_aipp_rgb: Path,
    om_aipp_dynamic: Path,
) -> Iterator[tuple[TritonServer, dict[str, Path]]]:
    root = tmp_path_factory.mktemp("aipp_e2e")
    repository = root / "models"
    scaffold(om_aipp_yuv, repository, name="yuv420sp", runtime="emulator")
    classifier = compile_with_aipp(
        root / "classifier",
        onnx_models.build_classifier,
        CLASSIFIER_AIPP,
        input_shape="image:-1,3,16,16",
        dynamic_batch_size=CLASSIFIER_GEARS,
    )
    scaffold(classifier, repository, name="classifier", runtime="emulator")
    any_size = compile_with_aipp(
        root / "any_size",
        onnx_models.build_conv,
        onnx_models.AIPP_YUV420SP_ANY_SIZE,
        input_shape="image:1,3,-1,-1",
        dynamic_image_size=";".join(f"{h},{w}" for h, w in HW_GEARS),
    )
    template_dir(repository, "any_size", any_size)
    template_dir(repository, "rgb888", om_aipp_rgb)
    version_dir = template_dir(repository, "dynamic", om_aipp_dynamic)
    (version_dir / "aipp.cfg").write_text(onnx_models.AIPP_RGB888)
    (repository / "dynamic" / "config.pbtxt").write_text(DYNAMIC_CONFIG)
    # Each execution holds the emulated device EXECUTE_US: while the first of the classifier's
    # concurrent requests runs, the others queue and the batcher joins them. Without it, on a CI
    # machine loaded by the parallel tests, 16 requests sent together arrived one by one at an
    # idle instance (a lone request is a preferred batch of 1) and ran in 16 executions.
    env = {"GE_PYTHON_BACKEND_ACL": "emulator", "GE_EMULATOR_TIMING": f"execute_us={EXECUTE_US}"}
    with running_server(repository, env=env, log_path=root / "triton.log") as server:
        # the dynamic model's answers are the RGB config's: compare with the RGB model's ONNX
        yield (
            server,
            {
                "yuv420sp": om_aipp_yuv,
                "rgb888": om_aipp_rgb,
                "dynamic": om_aipp_rgb,
                "classifier": classifier,
                "any_size": any_size,
            },
        )


def test_the_configs_take_uint8_in_the_bytes_of_the_model_size(
    served: tuple[TritonServer, dict[str, Path]],
) -> None:
    server, _ = served
    with TritonClient(grpc_address(server), "grpc") as client:
        for model, (_, dims) in MODELS.items():
            config = client.model_config(model)
            assert config.max_batch_size == MODEL_DIMS[0]
            assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
                ("image", 2, dims)  # TYPE_UINT8
            ], model


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_answers_equal_numpy_aipp_then_onnxruntime(
    served: tuple[TritonServer, dict[str, Path]], model: str, protocol: str
) -> None:
    server, oms = served
    config, dims = MODELS[model]
    rng = np.random.default_rng(21)
    address = http_address(server) if protocol == "http" else grpc_address(server)
    requests = [rng.integers(0, 256, (1 + i % 2, *dims), dtype=np.uint8) for i in range(8)]

    def send(raw: np.ndarray) -> np.ndarray:
        with TritonClient(address, protocol) as client:
            result = client.send(model, client.prepare(typed({"image": raw}), None))
            return result.as_numpy("features")

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(send, requests))
    for raw, answer in zip(requests, answers):
        expected = numpy_aipp_then_onnxruntime(oms[model], config, raw)
        assert answer.shape == (raw.shape[0], 8)
        np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-5)


def test_a_classifier_with_batch_gears_batches_concurrent_requests(
    served: tuple[TritonServer, dict[str, Path]],
) -> None:
    server, oms = served
    rng = np.random.default_rng(35)
    requests = [rng.integers(0, 256, (1 + i % 3, 20, 20, 3), dtype=np.uint8) for i in range(16)]
    connected = threading.Barrier(len(requests))

    def send(raw: np.ndarray) -> np.ndarray:
        with TritonClient(grpc_address(server), "grpc") as client:
            prepared = client.prepare(typed({"image": raw}), None)
            assert client.is_model_ready("classifier")  # connected before the others send
            connected.wait(60)  # sent together, not one connection's setup after another
            return client.send("classifier", prepared).as_numpy("logits")

    with TritonClient(http_address(server), "http") as client:
        config = client.model_config("classifier")
        assert config.max_batch_size == 8  # scaffold: the largest gear, dynamic batching
        assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
        assert [(t.data_type, list(t.dims)) for t in config.input] == [(2, [20, 20, 3])]
        before = client.inference_statistics("classifier")["model_stats"][0]
        with ThreadPoolExecutor(len(requests)) as pool:
            answers = list(pool.map(send, requests))
        after = client.inference_statistics("classifier")["model_stats"][0]
    for raw, answer in zip(requests, answers):
        expected = numpy_aipp_then_onnxruntime(
            oms["classifier"], CLASSIFIER_AIPP, raw, (1, 3, 16, 16), "logits"
        )
        np.testing.assert_allclose(answer, expected, rtol=1e-5, atol=1e-5)
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == sum(len(raw) for raw in requests)
    assert executions < len(requests), (executions, len(requests))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_yuv420sp_model_with_dynamic_image_size_serves_both_sizes(
    served: tuple[TritonServer, dict[str, Path]], protocol: str
) -> None:
    server, oms = served
    rng = np.random.default_rng(36)
    address = http_address(server) if protocol == "http" else grpc_address(server)
    with TritonClient(address, protocol) as client:
        config = client.model_config("any_size")  # auto-completed: v2 dims, H and W per gear
        assert (config.max_batch_size, [list(t.dims) for t in config.input]) == (1, [[-1, -1, 1]])
        for h, w in (*HW_GEARS, *HW_GEARS):
            raw = rng.integers(0, 256, (1, h * 3 // 2, w, 1), dtype=np.uint8)  # NV12 bytes
            result = client.send("any_size", client.prepare(typed({"image": raw}), None))
            expected = numpy_aipp_then_onnxruntime(
                oms["any_size"], onnx_models.AIPP_YUV420SP_ANY_SIZE, raw, (1, 3, h, w)
            )
            np.testing.assert_allclose(result.as_numpy("features"), expected, rtol=1e-5, atol=1e-5)
