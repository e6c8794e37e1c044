"""End to end: JPEG files in, answers out (issue 36): a YUV420SP_U8 AIPP classifier with batch
gears 1,2,4,8 served by the real tritonserver with `image_input`, its files decoded by the
emulator's JPEGD and resized by its VPC straight into the rows of the model's batch.

The reference of every answer is the host's: the same JPEG's own YCbCr planes decoded to NV12
(`_jpeg.decode_nv12`, what JPEGD writes), the same resize (`_jpeg.resize_nv12`: the emulator's
VPC definition; letterbox: `dvpp.letterbox`'s region on the fill), NumPy AIPP
(`aipp.bind_static(...).apply`) and onnxruntime on the ONNX.
"""

from __future__ import annotations

import io
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx_models
import pytest
from e2e_helpers import grpc_address, http_address, running_server
from onnx_models import onnx_path_of, reference
from tritonclient.grpc import model_config_pb2

from ge_python_backend.aipp import bind_static, parse_aipp_config
from ge_python_backend.ascend import DTYPES_BY_NUMPY, Format
from ge_python_backend.client import TritonClient
from ge_python_backend.emulator import _jpeg
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.config import load_model_config, write_model_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.validation import validate_model
from ge_python_backend.runtime import placement
from ge_python_backend.runtime.dvpp import letterbox
from ge_python_backend.server import TritonServer
from ge_python_backend.tools.probe import probe
from ge_python_backend.tools.watch import Watcher

pytestmark = pytest.mark.e2e
Image = pytest.importorskip("PIL.Image", reason="Pillow is the emulator extra's")
from jpeg_files import jpeg, with_frame_size  # noqa: E402  (Pillow's)

W, H = 32, 32  # the AIPP source: NV12 rows of 32 x 32 (1,536 bytes: VPC writes them in place)
MAX_JPEG_BYTES = 60_000
AIPP = onnx_models.aipp_yuv420sp(W, H, 8, 8, 16)  # cropped to the classifier's 16 x 16
FILL = (16, 128, 128)
RESIZE = {"stretch": "stretch", "letterbox": "letterbox", "hosted": "stretch"}  # model -> resize


def host_nv12(data: bytes, resize: str) -> np.ndarray:
    """The host's NV12 row for one file: JPEGD's planes, VPC's resize (stretch or letterbox)."""
    header = _jpeg.read_header(data)
    decoded = _jpeg.decode_nv12(data, header)
    if resize == "stretch":
        return _jpeg.resize_nv12(decoded, H, W)
    h, w = decoded.shape[0] * 2 // 3, decoded.shape[1]
    left, top, pw, ph = letterbox(w, h, W, H)
    canvas = np.empty((H * 3 // 2, W), np.uint8)
    canvas[:H] = FILL[0]
    canvas[H:, 0::2], canvas[H:, 1::2] = FILL[1], FILL[2]
    resized = _jpeg.resize_nv12(decoded, ph, pw)
    canvas[top : top + ph, left : left + pw] = resized[:ph]
    canvas[H + top // 2 : H + (top + ph) // 2, left : left + pw] = resized[ph:]
    return canvas


def host_logits(om: Path, files: list[bytes], resize: str) -> np.ndarray:
    bound = bind_static(
        parse_aipp_config(AIPP)[0], (1, 3, 16, 16), Format.NCHW, DTYPES_BY_NUMPY[np.dtype("f4")]
    )
    rows = [host_nv12(data, resize).reshape(1, H * 3 // 2, W, 1) for data in files]
    images = np.concatenate([bound.apply(row) for row in rows])
    return reference(onnx_path_of(om), [images])["logits"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path]]:
    root = tmp_path_factory.mktemp("jpeg_e2e")
    (root / "aipp.cfg").write_text(AIPP)
    om = compile_onnx(
        onnx_models.build_classifier(root / "classifier.onnx"),
        root / "classifier",
        insert_op_conf=root / "aipp.cfg",
        input_shape="image:-1,3,16,16",
        dynamic_batch_size="1,2,4,8",
        **onnx_models.KEEP_FP32,
    )
    repository = root / "models"
    for name, resize, device_host in (
        ("stretch", None, None),
        ("letterbox", "letterbox", None),
        ("hosted", None, True),  # stretch, served by the device host
    ):
        result = scaffold(
            om,
            repository,
            name=name,
            runtime="emulator",
            image_input="image",
            image_resize=resize,
            device_host=device_host,
        )
        config = load_model_config(result.config_path)
        config.parameters["max_jpeg_bytes"].string_value = str(MAX_JPEG_BYTES)
        config.dynamic_batching.max_queue_delay_microseconds = 20_000
        write_model_config(config, result.config_path)
    env = {"GE_PYTHON_BACKEND_ACL": "emulator"}
    with running_server(repository, env=env, log_path=root / "triton.log") as server:
        yield server, om


def send(server: TritonServer, model: str, files: list[bytes]) -> np.ndarray | str:
    """The logits of one request of `files`, or its error message."""
    array = np.array([[data] for data in files], dtype=object)
    with TritonClient(grpc_address(server), "grpc") as client:
        try:
            result = client.send(model, client.prepare({"image": (array, "BYTES")}, None))
        except Exception as exc:  # the request's own failure, to be checked by the caller
            return str(exc)
    logits: np.ndarray = result.as_numpy("logits")
    return logits


@pytest.mark.parametrize("model", ["stretch", "hosted"])
def test_sixteen_concurrent_requests_of_jpeg_files_batch_and_match_the_host(
    served: tuple[TritonServer, Path], model: str
) -> None:
    server, om = served
    rng = np.random.default_rng(36)
    requests = [
        [
            jpeg(int(rng.integers(40, 200)), int(rng.integers(40, 160)), 100 * i + k)
            for k in range(1 + i % 3)
        ]
        for i in range(16)
    ]
    with TritonClient(http_address(server), "http") as client:
        config = client.model_config(model)
        assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
            ("image", 13, [1])  # TYPE_STRING, one file per row
        ]
        assert config.max_batch_size == 8 and not config.model_warmup
        before = client.inference_statistics(model)["model_stats"][0]
        with ThreadPoolExecutor(len(requests)) as pool:
            answers = list(pool.map(lambda files: send(server, model, files), requests))
        rows = sum(len(files) for files in requests)
        # a pipelined batch is answered through response senders before its execute call
        # returns, and Triton counts it then: wait (bounded) for the count, not for a time
        for _ in range(100):
            after = client.inference_statistics(model)["model_stats"][0]
            if int(after["inference_count"]) - int(before["inference_count"]) >= rows:
                break
            time.sleep(0.1)
    for files, answer in zip(requests, answers):
        assert not isinstance(answer, str), answer
        expected = host_logits(om, files, RESIZE[model])
        assert answer.shape == (len(files), 10)
        assert (answer.argmax(axis=1) == expected.argmax(axis=1)).all()
        np.testing.assert_allclose(answer, expected, rtol=1e-4, atol=1e-4)
    inferences = int(after["inference_count"]) - int(before["inference_count"])
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert inferences == rows
    assert executions < len(requests), (executions, len(requests))


def bad_files() -> dict[str, tuple[bytes, str]]:
    """What DVPP refuses, each with the words its error must carry."""
    png = io.BytesIO()
    Image.new("RGB", (48, 48), (200, 10, 10)).save(png, "PNG")
    good = jpeg(96, 64, 7)
    big = jpeg(320, 320, 8, noise=120)
    assert len(big) > MAX_JPEG_BYTES
    return {
        "png": (png.getvalue(), "500001"),  # libjpeg cannot read it
        "progressive": (jpeg(64, 64, 9, progressive=True), "148052"),  # ACL_ERROR_UNSUPPORTED_JPEG
        "truncated": (good[: len(good) * 2 // 3], "500001"),  # the scan ends early
        "empty": (b"", "empty (0 bytes)"),
        "oversize": (big, f"max_jpeg_bytes allows {MAX_JPEG_BYTES}"),
        "small": (jpeg(20, 64, 10), "JPEGD decodes 32x32"),
        # sizes in the header alone (a decode would fail with 500001): refused before JPEGD
        "8192x8192": (with_frame_size(good, 8192, 8192), "the JPEG is 8192x8192"),
        "4097 wide": (with_frame_size(good, 4097, 64), "VPC scales each side by 1/32 to 16"),
        "8193 wide": (with_frame_size(good, 8193, 64), "JPEGD decodes 32x32 to 8192x8192"),
    }


@pytest.mark.parametrize("model", ["stretch", "letterbox", "hosted"])
def test_a_bad_file_fails_its_request_alone(served: tuple[TritonServer, Path], model: str) -> None:
    server, om = served
    bad = bad_files()
    good = [[jpeg(60 + 10 * i, 50 + 7 * i, 500 + i)] for i in range(len(bad))]
    # each bad file second in its request: the error names file 1
    mixed = [[jpeg(80, 60, 600 + i), data] for i, (data, _) in enumerate(bad.values())]
    requests = [r for pair in zip(good, mixed) for r in pair]
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = list(pool.map(lambda files: send(server, model, files), requests))
    for files, answer in zip(good, answers[0::2]):
        assert not isinstance(answer, str), answer
        expected = host_logits(om, files, RESIZE[model])
        np.testing.assert_allclose(answer, expected, rtol=1e-4, atol=1e-4)
    for (kind, (_, words)), answer in zip(bad.items(), answers[1::2]):
        assert isinstance(answer, str), kind
        assert "input 'image' file 1 (of 2 in this request)" in answer, (kind, answer)
        assert words in answer, (kind, answer)
        assert "INVALID_ARG" in answer, (kind, answer)


def test_the_hosted_model_is_served_by_the_device_host(served: tuple[TritonServer, Path]) -> None:
    """`hosted`'s session (files decoded and resized there) is in the device host, the others'
    in their stubs: the processes the placement records name."""
    send(served[0], "hosted", [jpeg(64, 64, 1)])
    commands = {
        holding.label: Path(f"/proc/{holding.pid}/cmdline").read_bytes().split(b"\0")
        for holding in placement.holders(0)
    }
    assert b"ge_python_backend.devicehost" in commands["hosted"], commands["hosted"]
    assert b"ge_python_backend.devicehost" not in commands["stretch"], commands["stretch"]


def test_probe_and_watcher_find_every_image_model_healthy(
    served: tuple[TritonServer, Path],
) -> None:
    """They send a real JPEG (`probe.PROBE_JPEG`) to the image input, not an empty file."""
    server = served[0]
    for model in RESIZE:
        result = probe(http_address(server), model)
        assert result.ok, result.message
    watcher = Watcher(http_address(server), models=tuple(RESIZE))
    watcher.check_once()
    for model in RESIZE:
        assert watcher.metrics.value("ge_watch_probes_total", model) == 1
        assert watcher.metrics.value("ge_watch_failures_total", model) == 0, model


def test_validate_accepts_what_scaffold_wrote_and_refuses_a_wrong_image_input(
    served: tuple[TritonServer, Path], tmp_path: Path
) -> None:
    repository = Path(served[0].repository)
    for model in RESIZE:
        report = validate_model(repository / model)
        assert report.problems == [], report.problems
    # the image input declared as the .om's own UINT8 rows: Triton would send no JPEG files
    wrong = tmp_path / "stretch"
    shutil.copytree(repository / "stretch", wrong)
    config = load_model_config(wrong / "config.pbtxt")
    config.input[0].data_type = model_config_pb2.TYPE_UINT8
    write_model_config(config, wrong / "config.pbtxt")
    (problem,) = validate_model(wrong).problems
    assert "input 'image': config data_type TYPE_UINT8 but the .om has TYPE_STRING" in problem
