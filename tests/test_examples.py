"""End to end: every example in examples/ built by its build script, served by one real
tritonserver (explicit model control) and queried by its client.

Each test runs the example's `build.py` into the shared repository (small widths keep it quick),
loads its models with `load_model`, runs `client.py` as a user would and checks what it printed,
then checks the served answers against onnxruntime on the ONNX the build wrote.
"""

from __future__ import annotations

import importlib.util
import io
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from e2e_helpers import grpc_address, http_address, model_states, running_server
from onnx_models import reference
from tritonclient.utils import InferenceServerException

from ge_python_backend.aipp import bind_static, parse_aipp_config
from ge_python_backend.ascend import DTYPES_BY_NUMPY, Format
from ge_python_backend.client import TritonClient
from ge_python_backend.emulator import _jpeg
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.shm import MIB, ShmSizes
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@dataclass(frozen=True)
class Served:
    server: TritonServer
    repository: Path
    workdir: Path

    @property
    def url(self) -> str:
        return http_address(self.server)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("examples")
    repository = root / "models"
    repository.mkdir()
    # The repository is empty at start (models are loaded as each test builds them), so the
    # shared-memory sizes cannot come from its configs: room for a 16-image ResNet batch.
    with running_server(
        repository,
        model_control_mode="explicit",
        shm_sizes=ShmSizes(32 * MIB, 16 * MIB),
        env={"GE_PYTHON_BACKEND_ACL": "emulator"},
        log_path=root / "triton.log",
    ) as server:
        yield Served(server, repository, root / "build")


def example_module(example: str, filename: str) -> ModuleType:
    """Import `examples/<example>/<filename>` under a unique name (clients share file names)."""
    path = EXAMPLES / example / filename
    name = f"example_{example}_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.parent))  # its sibling modules (e.g. the ONNX builder)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(path.parent))
    return module


def run_script(example: str, script: str, *args: str, timeout: float = 180) -> str:
    """Run `examples/<example>/<script>` with this interpreter; its stdout (fails on exit != 0)."""
    command = [sys.executable, str(EXAMPLES / example / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{' '.join(command)} exited {done.returncode}\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done.stdout


def build(served: Served, example: str, *args: str) -> str:
    return run_script(
        example,
        "build.py",
        str(served.repository),
        "--workdir",
        str(served.workdir / example),
        *args,
    )


def load(served: Served, *names: str) -> None:
    with TritonClient(served.url, "http", timeout_s=180) as client:
        for name in names:
            client.load_model(name)
    states = model_states(served.server)
    for name in names:
        assert states[name][0] == "READY", states[name]


def atc_line(build_output: str) -> str:
    lines = [line for line in build_output.splitlines() if line.startswith("on Ascend hardware:")]
    assert len(lines) == 1, build_output
    return lines[0]


# ---------------------------------------------------------------------------------- resnet50


def test_resnet50_classifies_batches_through_its_gears(served: Served, tmp_path: Path) -> None:
    output = build(served, "resnet50", "--width", "8")
    assert "--dynamic_batch_size=1,2,4,8,16" in atc_line(output)
    assert "--input_shape=input:-1,3,224,224" in atc_line(output)
    config = load_model_config(served.repository / "resnet50" / "config.pbtxt")
    assert config.max_batch_size == 16
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8, 16]
    assert [list(t.dims) for t in config.input] == [[3, 224, 224]]
    assert [list(t.dims) for t in config.output] == [[1000]]
    load(served, "resnet50")

    client = example_module("resnet50", "client.py")
    onnx_path = served.workdir / "resnet50" / "resnet50.onnx"
    # 11 synthetic images: one request the server runs as gear 8 + gear 4 (one padded row).
    printed = run_script("resnet50", "client.py", "--url", served.url, "--synthetic", "11")
    images = client.synthetic_images(11)
    expected = reference(onnx_path, {"input": images})["logits"]
    served_logits = client.classify(served.url, "resnet50", images)
    np.testing.assert_allclose(served_logits, expected, rtol=1e-4, atol=1e-4)
    rows = [line for line in printed.splitlines() if "top-5" in line]
    assert len(rows) == 11, printed
    for row, logits in zip(rows, expected):
        assert re.findall(r"class (\d+)", row) == [str(c) for c, _ in client.top5(logits)], row

    # An image file goes through the client's own resize and normalisation.
    from PIL import Image

    picture = tmp_path / "picture.png"
    gradient = np.linspace(0, 255, 300 * 200 * 3).reshape(200, 300, 3).astype(np.uint8)
    Image.fromarray(gradient, "RGB").save(picture)
    printed = run_script("resnet50", "client.py", "--url", served.url, str(picture))
    pixels = client.load_image(picture)[None]
    assert pixels.shape == (1, 3, 224, 224)
    best = client.top5(reference(onnx_path, {"input": pixels})["logits"][0])[0][0]
    assert f"{picture}: top-5 class {best} " in printed, printed


def assert_classified(
    client: Any, served: Served, model: str, inputs: Any, expected: np.ndarray, printed: str
) -> None:
    """`model` answers `inputs` with the `expected` logits, and the example's client printed
    each one's top-5 classes (three images)."""
    np.testing.assert_allclose(
        client.classify(served.url, model, inputs), expected, rtol=1e-4, atol=1e-4
    )
    rows = [line for line in printed.splitlines() if "top-5" in line]
    assert len(rows) == 3, printed
    for row, logits in zip(rows, expected):
        assert re.findall(r"class (\d+)", row) == [str(c) for c, _ in client.top5(logits)], row


def test_resnet50_aipp_takes_uint8_images_and_crops_and_normalises_them(
    served: Served, tmp_path: Path
) -> None:
    output = build(served, "resnet50", "--width", "8", "--aipp", "--gears", "1,2,4")
    assert "--insert_op_conf=" in atc_line(output)
    assert "--input_shape=input:-1,3,224,224" in atc_line(output)
    assert "--dynamic_batch_size=1,2,4" in atc_line(output)
    config = load_model_config(served.repository / "resnet50_aipp" / "config.pbtxt")
    assert config.max_batch_size == 4
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4]
    assert [(t.data_type, list(t.dims)) for t in config.input] == [(2, [256, 256, 3])]  # UINT8
    load(served, "resnet50_aipp")
    client = example_module("resnet50", "client.py")
    workdir = served.workdir / "resnet50"
    printed = run_script("resnet50", "client.py", "--url", served.url, "--aipp", "--synthetic", "3")
    # 3 uint8 256x256 images: 589,824 bytes against FP32's 1,806,336
    assert "request: 589824 bytes of uint8 (FP32 [N,3,224,224]: 1806336 bytes, 1216512 more)" in (
        printed
    ), printed
    sources = client.synthetic_sources(3)
    # the reference: the aipp.cfg's steps in NumPy (crop at 16,16, (x - mean) * var_reci), then
    # onnxruntime on the ONNX
    op = parse_aipp_config((workdir / "aipp.cfg").read_text())[0]
    bound = bind_static(op, (1, 3, 224, 224), Format.NCHW, DTYPES_BY_NUMPY[np.dtype(np.float32)])
    pixels = np.concatenate([bound.apply(image) for image in sources])
    expected = reference(workdir / "resnet50.onnx", {"input": pixels})["logits"]
    assert_classified(client, served, "resnet50_aipp", sources, expected, printed)


def test_resnet50_jpeg_takes_jpeg_files_decoded_and_resized_on_the_device(
    served: Served, tmp_path: Path
) -> None:
    output = build(served, "resnet50", "--width", "8", "--jpeg", "--gears", "1,2,4")
    assert "--insert_op_conf=" in atc_line(output)
    config = load_model_config(served.repository / "resnet50_jpeg" / "config.pbtxt")
    assert config.parameters["image_input"].string_value == "input"
    assert [(t.data_type, list(t.dims)) for t in config.input] == [(13, [1])]  # TYPE_STRING
    load(served, "resnet50_jpeg")
    client = example_module("resnet50", "client.py")
    workdir = served.workdir / "resnet50"
    printed = run_script("resnet50", "client.py", "--url", served.url, "--jpeg", "--synthetic", "3")
    files = client.synthetic_jpegs(3)
    carried = sum(len(data) for data in files[:, 0])
    assert f"request: {carried} bytes of JPEG files (FP32 [N,3,224,224]: 1806336 bytes" in printed
    # the reference: JPEGD's NV12 of each file and VPC's resize to 256x256 as the emulator
    # defines them (tests/test_jpeg_e2e.py compares those with the served rows), the
    # jpeg_aipp.cfg's steps in NumPy, onnxruntime on the ONNX
    op = parse_aipp_config((workdir / "jpeg_aipp.cfg").read_text())[0]
    bound = bind_static(op, (1, 3, 224, 224), Format.NCHW, DTYPES_BY_NUMPY[np.dtype(np.float32)])
    rows = [
        _jpeg.resize_nv12(_jpeg.decode_nv12(data, _jpeg.read_header(data)), 256, 256)
        for data in files[:, 0]
    ]
    pixels = np.concatenate([bound.apply(row.reshape(1, 384, 256, 1)) for row in rows])
    expected = reference(workdir / "resnet50.onnx", {"input": pixels})["logits"]
    assert_classified(client, served, "resnet50_jpeg", files, expected, printed)
    # a file on disk is sent as it is
    picture = tmp_path / "picture.jpg"
    picture.write_bytes(files[0, 0])
    printed = run_script("resnet50", "client.py", "--url", served.url, "--jpeg", str(picture))
    best = client.top5(expected[0])[0][0]
    assert f"{picture}: top-5 class {best} " in printed, printed


# ----------------------------------------------------------------------------------- yolov8n


def test_yolov8n_answers_three_outputs_and_the_client_draws_boxes(served: Served) -> None:
    output = build(served, "yolov8n", "--width", "8")
    assert "--dynamic_batch_size=1,2,4" in atc_line(output)
    config = load_model_config(served.repository / "yolov8n" / "config.pbtxt")
    outputs = {t.name: (list(t.dims), t.data_type) for t in config.output}
    assert outputs == {
        "boxes": ([8400, 4], 11),  # TYPE_FP32
        "scores": ([8400], 11),
        "labels": ([8400], 9),  # TYPE_INT64
    }
    load(served, "yolov8n")

    client = example_module("yolov8n", "client.py")
    printed = run_script("yolov8n", "client.py", "--url", served.url)
    images = np.stack(
        [client.synthetic_scene(0), client.synthetic_scene(1), client.synthetic_scene(2)]
    )
    expected = reference(served.workdir / "yolov8n" / "yolov8n.onnx", {"images": images})
    got = client.detect_raw(served.url, "yolov8n", images)  # 3 rows: gear 4 with one padded row
    assert got["labels"].dtype == np.int64 and got["boxes"].shape == (3, 8400, 4)
    np.testing.assert_allclose(got["boxes"], expected["boxes"], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got["scores"], expected["scores"], rtol=1e-4, atol=1e-6)
    # Labels are an argmax: tolerate a near-tie flipping, nothing more.
    assert np.mean(got["labels"] != expected["labels"]) < 1e-3

    for index, scene in enumerate(printed.split("  synthetic scene ")[1:]):
        found = client.postprocess(
            expected["boxes"][index], expected["scores"][index], expected["labels"][index]
        )
        assert scene.startswith(f"{index}: {len(found)} detection(s)"), scene
        lines = [line.strip() for line in scene.splitlines()[1:]]
        assert lines == [str(d) for d in found[:10]]
        for i, first in enumerate(found):  # NMS left no same-class pair overlapping > 0.45
            for second in found[i + 1 :]:
                if first.label == second.label:
                    iou = client._iou(np.array(first.box), np.array([second.box]))[0]
                    assert iou <= 0.45
    assert "synthetic scene 0: 0 detection" not in printed, printed  # there is something to see


def test_yolov8n_with_nms_in_the_graph_answers_each_image_with_its_own_rows(
    served: Served,
) -> None:
    """build.py --nms-in-graph: NonMaxSuppression in the graph gives data-dependent rows; the
    config says -1 and never merges requests; every answer equals onnxruntime's."""
    build(served, "yolov8n", "--width", "8", "--nms-in-graph", "--name", "yolov8n_nms")
    config = load_model_config(served.repository / "yolov8n_nms" / "config.pbtxt")
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert {t.name: list(t.dims) for t in config.output} == {
        "det_boxes": [-1, 4],
        "det_scores": [-1],
        "det_labels": [-1],
    }
    load(served, "yolov8n_nms")
    client = example_module("yolov8n", "client.py")
    onnx_path = served.workdir / "yolov8n" / "yolov8n_nms.onnx"
    counts = set()
    for seed in range(3):
        image = client.synthetic_scene(seed)
        got = client.detect_in_graph(served.url, "yolov8n_nms", image)
        expected = reference(onnx_path, {"images": image[None]})
        for name in ("det_boxes", "det_scores", "det_labels"):
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-3)
        counts.add(len(got["det_scores"]))
    assert len(counts) > 1, counts  # the rows differ from image to image
    printed = run_script(
        "yolov8n", "client.py", "--url", served.url, "--model", "yolov8n_nms", "--nms-in-graph"
    )
    first = client.in_graph_detections(
        reference(onnx_path, {"images": client.synthetic_scene(0)[None]})
    )
    assert f"synthetic scene 0: {len(first)} detection(s) (NMS in the graph)" in printed, printed


# --------------------------------------------------------------------------------- bert_base


def _bert_infer(grpc: TritonClient, encoded: object) -> Any:
    """tritonclient's result for the example client's encoded text (every output)."""
    feeds = encoded.feeds()  # type: ignore[attr-defined]
    inputs = {name: (array, "INT64") for name, array in feeds.items()}
    return grpc.send("bert_base", grpc.prepare(inputs, None))


def test_bert_base_runs_each_sequence_gear(served: Served) -> None:
    output = build(served, "bert_base", "--hidden", "64")
    atc = atc_line(output)
    assert "--dynamic_dims='32,32,32;64,64,64;128,128,128'" in atc, atc
    assert "--input_format=ND" in atc
    config = load_model_config(served.repository / "bert_base" / "config.pbtxt")
    assert config.max_batch_size == 1
    assert {t.name: (list(t.dims), t.data_type) for t in config.input} == {
        name: ([-1], 9) for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    load(served, "bert_base")

    printed = run_script("bert_base", "client.py", "--url", served.url)
    assert "-> gear 32;" in printed and "-> gear 64;" in printed, printed
    assert "cosine similarity" in printed

    client = example_module("bert_base", "client.py")
    onnx_path = served.workdir / "bert_base" / "bert_base.onnx"
    long_text = " ".join(f"word{i}" for i in range(100))
    with TritonClient(grpc_address(served.server), "grpc") as grpc:
        pooled = {}
        for text, gear in [("short sentence ||| second part", 32), (long_text, 128)]:
            encoded = client.encode(text)
            assert encoded.gear == gear
            result = _bert_infer(grpc, encoded)
            expected = reference(onnx_path, encoded.feeds())
            for name in ("last_hidden_state", "pooler_output"):
                np.testing.assert_allclose(
                    result.as_numpy(name), expected[name], rtol=1e-4, atol=1e-5
                )
            pooled[gear] = result.as_numpy("pooler_output")
        assert encoded.tokens == 102 and encoded.token_type_ids.sum() == 0

        # The attention mask hides padding: the same sentence at gear 32 and 128 embeds alike.
        short, padded = (
            client.encode("the same words", (32,)),
            client.encode("the same words", (128,)),
        )
        at_32 = _bert_infer(grpc, short).as_numpy("pooler_output")
        at_128 = _bert_infer(grpc, padded).as_numpy("pooler_output")
        np.testing.assert_allclose(at_32, at_128, rtol=1e-4, atol=1e-5)

        # A length that is no gear is refused with the gears named.
        odd = client.encode("forty tokens", (40,))
        with pytest.raises(InferenceServerException, match="match none of the model's"):
            _bert_infer(grpc, odd)


# ---------------------------------------------------------------------------------- ensemble


def _reference_pixels(data: bytes) -> np.ndarray:
    """What the README says preprocess does: RGB, 224x224 bilinear, /255, ImageNet mean/std."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = np.asarray(image.convert("RGB").resize((224, 224), Image.BILINEAR), np.float32)
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    return ((rgb / 255.0 - mean) / std).astype(np.float32).transpose(2, 0, 1)


def test_ensemble_decodes_image_bytes_and_classifies(served: Served) -> None:
    build(served, "ensemble", "--width", "8")
    ensemble = load_model_config(served.repository / "classify_image" / "config.pbtxt")
    assert ensemble.platform == "ensemble"
    steps = [
        (s.model_name, dict(s.input_map), dict(s.output_map))
        for s in ensemble.ensemble_scheduling.step
    ]
    assert steps == [
        ("preprocess", {"image": "image"}, {"pixels": "pixels"}),
        ("classifier", {"input": "pixels"}, {"logits": "logits"}),
    ]
    load(served, "classify_image")  # loads the two composing models too
    states = model_states(served.server)
    assert states["preprocess"][0] == "READY" and states["classifier"][0] == "READY", states

    printed = run_script("ensemble", "client.py", "--url", served.url)
    assert "synthetic.jpg: top-5" in printed and "synthetic.png: top-5" in printed, printed

    client = example_module("ensemble", "client.py")
    encoded = [client.synthetic_image(3, "JPEG", (500, 375)), client.synthetic_image(4, "PNG")]
    logits = client.classify_bytes(served.url, "classify_image", encoded)
    pixels = np.stack([_reference_pixels(data) for data in encoded])
    onnx_path = served.workdir / "ensemble" / "classifier.onnx"
    expected = reference(onnx_path, {"input": pixels})["logits"]
    np.testing.assert_allclose(logits, expected, rtol=1e-3, atol=1e-3)

    with pytest.raises(InferenceServerException, match="cannot decode the image bytes"):
        client.classify_bytes(served.url, "classify_image", [b"not an image"])


# -------------------------------------------------------------------------------- hot_reload


def run_hot_reload_client(served: Served, *args: str) -> str:
    """examples/hot_reload/client.py against the served repository (HTTP control, gRPC infer)."""
    return run_script(
        "hot_reload",
        "client.py",
        "--url",
        served.url,
        "--grpc-url",
        grpc_address(served.server),
        "--repository",
        str(served.repository),
        "--workdir",
        str(served.workdir / "hot_reload"),
        *args,
    )


def test_hot_reload_switches_to_version_2_without_failed_requests(served: Served) -> None:
    build(served, "hot_reload", "--version", "1")
    load(served, "tiny_classifier")
    model_dir = served.repository / "tiny_classifier"
    assert load_model_config(model_dir / "config.pbtxt").version_policy.latest.num_versions == 1

    printed = run_hot_reload_client(served, "--before", "1", "--after", "1")
    assert re.search(r"\d+ requests from 2 threads, 0 failed", printed), printed
    answered = dict(re.findall(r"version (\d+): (\d+) answers", printed))
    assert set(answered) == {"1", "2"} and min(map(int, answered.values())) > 10, printed
    assert "version 1: UNAVAILABLE (unloaded); version 2: READY" in printed, printed
    assert sorted(p.name for p in model_dir.iterdir() if p.is_dir()) == ["1", "2"]

    features = np.random.default_rng(7).standard_normal((3, 64), dtype=np.float32)
    with TritonClient(served.url, "http") as client:
        result = client.send(
            "tiny_classifier", client.prepare({"features": (features, "FP32")}, None)
        )
    assert result.get_response()["model_version"] == "2"
    onnx_of = {v: served.workdir / "hot_reload" / f"v{v}" / "tiny_classifier.onnx" for v in (1, 2)}
    v2 = reference(onnx_of[2], {"features": features})["scores"]
    v1 = reference(onnx_of[1], {"features": features})["scores"]
    np.testing.assert_allclose(result.as_numpy("scores"), v2, rtol=1e-5, atol=1e-5)
    assert not np.allclose(v1, v2, atol=1e-2)

    # unload_model then load_model: the model is gone in between and those requests fail.
    printed = run_hot_reload_client(served, "--before", "0.5", "--after", "0.5", "--unload-first")
    failed = int(re.search(r"requests from 2 threads, (\d+) failed", printed).group(1))  # type: ignore[union-attr]
    assert failed > 0 and "has no available versions" in printed, printed
    assert "version 3: READY" in printed


# ------------------------------------------------------------------------------------- docs


@pytest.mark.parametrize("example", ["resnet50", "yolov8n", "bert_base", "ensemble", "hot_reload"])
def test_each_example_readme_shows_its_commands(example: str) -> None:
    text = (EXAMPLES / example / "README.md").read_text()
    assert f"examples/{example}/build.py" in text
    assert f"examples/{example}/client.py" in text
    assert "atc --model=" in text


@pytest.mark.usefixtures("clean_acl")
def test_the_session_page_example_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs' `Session` page: make mlp.onnx, compile it, run the session; the specs it
    shows in comments are the ones the session reports."""
    from ge_python_backend.cli import main

    section = (EXAMPLES.parent / "docs" / "learn" / "session.md").read_text()
    make_onnx, run_session = re.findall(r"```python\n(.*?)```", section, re.S)[:2]
    [compile_command] = re.findall(r"```bash\n(.*?)```", section, re.S)[:1]
    monkeypatch.chdir(tmp_path)
    exec(make_onnx, {})
    argv = shlex.split(compile_command.replace("\\\n", " "), comments=True)
    assert argv[0] == "ge-python-model" and main(argv[1:]) == 0
    namespace: dict[str, Any] = {}
    exec(run_session, namespace)
    session = namespace["session"]
    for name in ("inputs", "outputs"):
        shown = re.search(rf"session\.{name} +# (.*)", run_session).group(1)  # type: ignore[union-attr]
        # the page writes numpy's dtype('float32') as float32
        assert repr(getattr(session, name)).replace("dtype('float32')", "float32") == shown


def test_the_demo_says_what_the_batcher_did() -> None:
    demo = example_module("image_classifier", "demo.py")
    merged = demo.batching_sentence((1, 1, 1), (17, 33, 6))
    assert merged == (
        "Triton: 16 requests (32 images) ran in 5 executions: the dynamic batcher merged requests"
    )
    alone = demo.batching_sentence((1, 1, 1), (17, 33, 17))
    assert alone.endswith("ran in 16 executions: the dynamic batcher merged nothing")
