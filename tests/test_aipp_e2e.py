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
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx_models
import pytest
from e2e_helpers import grpc_address, http_address, running_server
from onnx_models import onnx_path_of, reference

from ge_python_backend.aipp import bind_static, parse_aipp_config
from ge_python_backend.ascend import DTYPES_BY_NUMPY, Format
from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, typed
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
DYNAMIC_CONFIG = """\
backend: "python"
parameters { key: "aipp_config" value { string_value: "aipp.cfg" } }
"""


def numpy_aipp_then_onnxruntime(om: Path, config: str, raw: np.ndarray) -> np.ndarray:
    """The reference: the AIPP steps in NumPy on each image, then onnxruntime on the ONNX."""
    bound = bind_static(
        parse_aipp_config(config)[0],
        (1, *MODEL_DIMS[1:]),
        Format.NCHW,
        DTYPES_BY_NUMPY[np.dtype(np.float32)],
    )
    images = np.concatenate([bound.apply(image) for image in raw])
    return reference(onnx_path_of(om), [images])["features"]


def template_dir(repository: Path, name: str, om: Path) -> Path:
    """`R/name/1` holding model.py (the template) and the `.om`."""
    version_dir = repository / name / "1"
    version_dir.mkdir(parents=True)
    assert main(["template", str(version_dir)]) == 0
    shutil.copy(om, version_dir / om.name)
    return version_dir


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
    template_dir(repository, "rgb888", om_aipp_rgb)
    version_dir = template_dir(repository, "dynamic", om_aipp_dynamic)
    (version_dir / "aipp.cfg").write_text(onnx_models.AIPP_RGB888)
    (repository / "dynamic" / "config.pbtxt").write_text(DYNAMIC_CONFIG)
    env = {"GE_PYTHON_BACKEND_ACL": "emulator"}
    with running_server(repository, env=env, log_path=root / "triton.log") as server:
        # the dynamic model's answers are the RGB config's: compare with the RGB model's ONNX
        yield server, {"yuv420sp": om_aipp_yuv, "rgb888": om_aipp_rgb, "dynamic": om_aipp_rgb}


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
