"""The real models' files and answers without a server: the quantized CRNN refused before
anything compiles, and the task answers onnxruntime gives on the real inputs."""

from __future__ import annotations

import onnx
import real_models
from onnx_models import reference
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.tools.migrate.preflight import preflight


def test_the_onnxruntime_quantized_model_is_refused_before_compiling() -> None:
    proto = onnx.load(str(real_models.onnx_file("quantized")))
    problem, *_ = preflight("quantized", proto, ModelConfig())  # then its open width axis
    assert "DynamicQuantizeLSTM" in problem and "'com.microsoft'" in problem


def test_onnxruntime_reads_the_real_inputs_as_a_user_would() -> None:
    requests = real_models.client_requests()
    rec = requests["ocr_rec"][0]
    text = real_models.answer(
        "ocr_rec", [reference(real_models.onnx_file("ocr_rec"), rec)["softmax_11.tmp_0"]]
    )
    assert text == [real_models.TEXT]
    cls = reference(real_models.onnx_file("ocr_cls"), requests["ocr_cls"][0])
    assert real_models.answer("ocr_cls", list(cls.values())) == [0, 1]  # upright, upside down
    labels = real_models.magika_labels()
    scores = reference(real_models.onnx_file("magika"), requests["magika"][0])
    found = [labels[k] for k in real_models.answer("magika", list(scores.values()))]
    assert found[:4] == ["python", "txt", "rst", "python"]
    page = reference(real_models.onnx_file("ocr_det"), requests["ocr_det"][0])
    (boxes,) = real_models.answer("ocr_det", list(page.values()))
    assert len(boxes) == len(real_models.PAGE)  # one box per line of text
