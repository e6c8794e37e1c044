"""Triton's image classification client against a scaffolded classifier, on the real tritonserver.

Triton's `image_client.py` (client repository, src/python/examples) ships in no PyPI distribution
(not in any tritonclient wheel, nvidia-pytriton, triton-model-analyzer or
triton-model-navigator), so this test cannot fetch it; the client below does what it does, step by
step, through tritonclient: it takes the model only when it has one input of 3 dims (after the
batch axis) with `format` FORMAT_NCHW or FORMAT_NHWC in its config (read as the enum over gRPC and
as its name over HTTP) and one FP32 vector output; it fits JPEG images to the input with Pillow
in that layout, asks for the top classes with `class_count` (Triton's classification extension)
and reads the `score:index:label` answers, synchronously, asynchronously (a batch of 4) and over a
gRPC stream. The answers must be onnxruntime's top classes with the labels of `scaffold --labels`.
A copy-path model (template and `.om`, no config.pbtxt) gets its `format` from auto-complete.
"""

from __future__ import annotations

import io
import queue
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from e2e_helpers import grpc_address, http_address, running_server
from onnx_models import reference
from PIL import Image
from tritonclient.grpc import model_config_pb2

from ge_python_backend.cli import main
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

CLASSES = 3  # the top classes asked for
LABELS = [f"label {index}" for index in range(10)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, om_classifier: Path) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("image_client")
    labels = root / "labels.txt"
    labels.write_text("\n".join(LABELS) + "\n")
    repository = root / "models"
    scaffold(om_classifier, repository, name="classifier", labels=labels, runtime="emulator")
    copied = repository / "copied" / "1"
    copied.mkdir(parents=True)
    assert main(["template", str(copied)]) == 0
    shutil.copy(om_classifier, copied / om_classifier.name)
    with running_server(repository) as server:
        yield server


def jpeg_images(count: int) -> list[Image.Image]:
    """`count` JPEG pictures of other sizes than the model's input, as a client reads them."""
    rng = np.random.default_rng(7)
    images = []
    for index in range(count):
        pixels = rng.integers(0, 256, (20 + 4 * index, 24, 3), dtype=np.uint8)
        encoded = io.BytesIO()
        Image.fromarray(pixels).save(encoded, format="JPEG")
        images.append(Image.open(io.BytesIO(encoded.getvalue())))
    return images


class ImageModel:
    """What Triton's image client takes from a model's metadata and config, and refuses."""

    def __init__(self, metadata: Any, config: Any, grpc: bool) -> None:
        inputs, outputs = (
            (metadata.inputs, metadata.outputs)
            if grpc
            else (
                metadata["inputs"],
                metadata["outputs"],
            )
        )
        get = getattr if grpc else dict.__getitem__
        assert len(inputs) == 1 and len(outputs) == 1, "expecting 1 input and 1 output"
        assert get(outputs[0], "datatype") == "FP32"
        self.max_batch_size = int(get(config, "max_batch_size"))
        shape = list(get(inputs[0], "shape"))[1 if self.max_batch_size else 0 :]
        assert len(shape) == 3, f"expecting an image input of 3 dims, got {shape}"
        layout = get(get(config, "input")[0], "format")
        if not grpc:  # the JSON config names the enum value
            layout = model_config_pb2.ModelInput.Format.Value(layout)
        assert layout in (model_config_pb2.ModelInput.FORMAT_NCHW,) + (
            model_config_pb2.ModelInput.FORMAT_NHWC,
        ), f"unexpected input format {model_config_pb2.ModelInput.Format.Name(layout)}"
        self.nchw = layout == model_config_pb2.ModelInput.FORMAT_NCHW
        channels, height, width = shape if self.nchw else (shape[2], shape[0], shape[1])
        self.size, self.channels = (width, height), channels
        self.input_name = get(inputs[0], "name")
        self.output_name = get(outputs[0], "name")

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """The picture resized to the input, scaled as INCEPTION scaling does, in its layout."""
        picture = image.convert("RGB" if self.channels == 3 else "L").resize(
            self.size, Image.BILINEAR
        )
        pixels = np.asarray(picture, dtype=np.float32).reshape(self.size[1], self.size[0], -1)
        scaled = pixels / 127.5 - 1
        return np.ascontiguousarray(scaled.transpose(2, 0, 1) if self.nchw else scaled)


def model_of(server: TritonServer, name: str, grpc: bool) -> tuple[ImageModel, Any]:
    if grpc:
        client: Any = grpcclient.InferenceServerClient(grpc_address(server))
        config = client.get_model_config(name).config
    else:
        client = httpclient.InferenceServerClient(http_address(server), concurrency=4)
        config = client.get_model_config(name)
    return ImageModel(client.get_model_metadata(name), config, grpc), client


def request(model: ImageModel, batch: np.ndarray, grpc: bool) -> tuple[list[Any], list[Any]]:
    """The image client's one request: the batch, and the top `CLASSES` of its one output."""
    module: Any = grpcclient if grpc else httpclient
    infer_input = module.InferInput(model.input_name, list(batch.shape), "FP32")
    infer_input.set_data_from_numpy(batch)
    return [infer_input], [module.InferRequestedOutput(model.output_name, class_count=CLASSES)]


def expected(om: Path, batch: np.ndarray, labels: list[str] | None) -> list[list[str]]:
    """onnxruntime's top classes of `batch` as the classification extension writes them."""
    (logits,) = reference(om, [batch]).values()
    rows = []
    for row in logits:
        top = np.argsort(-row)[:CLASSES]
        rows.append([int(index) for index in top])
    return [
        [f"{index}" if labels is None else f"{index}:{labels[index]}" for index in row]
        for row in rows
    ]


def answers(result: Any, model: ImageModel) -> list[list[str]]:
    """Each row's classes as `index:label` (the score, first, is left out)."""
    rows = result.as_numpy(model.output_name)
    return [[entry.decode().split(":", 1)[1] for entry in row] for row in rows]


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_the_image_client_classifies_with_the_labels(
    served: TritonServer, om_classifier: Path, grpc: bool
) -> None:
    model, client = model_of(served, "classifier", grpc)
    assert model.nchw and model.max_batch_size == 4 and model.size == (16, 16)
    images = np.stack([model.preprocess(image) for image in jpeg_images(4)])
    want = expected(om_classifier, images, LABELS)
    # synchronous, one image a request
    for index in range(len(images)):
        inputs, outputs = request(model, images[index : index + 1], grpc)
        assert answers(client.infer("classifier", inputs, outputs=outputs), model) == [want[index]]
    # asynchronous, a batch of 4
    inputs, outputs = request(model, images, grpc)
    if grpc:
        done: queue.Queue[tuple[Any, Any]] = queue.Queue()
        client.async_infer(
            "classifier", inputs, lambda result, error: done.put((result, error)), outputs=outputs
        )
        result, error = done.get(timeout=60)
        assert error is None, error
    else:
        result = client.async_infer("classifier", inputs, outputs=outputs).get_result()
    assert answers(result, model) == want
    client.close()


def test_the_image_client_streams_over_grpc(served: TritonServer, om_classifier: Path) -> None:
    model, client = model_of(served, "classifier", grpc=True)
    images = np.stack([model.preprocess(image) for image in jpeg_images(2)])
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(lambda result, error: done.put((result, error)))
    for index in range(len(images)):
        inputs, outputs = request(model, images[index : index + 1], grpc=True)
        client.async_stream_infer("classifier", inputs, outputs=outputs, request_id=str(index))
    got = {}
    for _ in range(len(images)):
        result, error = done.get(timeout=60)
        assert error is None, error
        got[result.get_response().id] = answers(result, model)[0]
    client.stop_stream()
    client.close()
    want = expected(om_classifier, images, LABELS)
    assert [got[str(index)] for index in range(len(images))] == want


def test_a_copied_classifier_gets_its_format_from_auto_complete(
    served: TritonServer, om_classifier: Path
) -> None:
    model, client = model_of(served, "copied", grpc=False)
    assert model.nchw
    images = np.stack([model.preprocess(image) for image in jpeg_images(2)])
    inputs, outputs = request(model, images, grpc=False)
    result = client.infer("copied", inputs, outputs=outputs)
    assert answers(result, model) == expected(om_classifier, images, None)  # no label file
    client.close()
