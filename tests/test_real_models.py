"""The real models' files and answers without a server: the quantized CRNN refused before
anything compiles, and the task answers onnxruntime gives on the real inputs."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
import real_models
from onnx_models import reference
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.cli import main
from ge_python_backend.tools.migrate.preflight import preflight


def test_the_onnxruntime_quantized_model_is_refused_before_compiling(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = real_models.onnx_file("quantized")
    problem, *_ = preflight("quantized", onnx.load(str(path)), ModelConfig())  # then its width
    assert "DynamicQuantizeLSTM" in problem and "'com.microsoft'" in problem
    # emulator compile refuses it with the same words, as ATC would
    argv = ["emulator", "compile", f"--model={path}", "--framework=5"]
    flags = ["--output", str(tmp_path / "quantized"), "--input_shape", "input1:1,1,64,192"]
    assert main([*argv, *flags]) == 2
    assert problem.split(": ", 1)[1].split(" (")[0] in capsys.readouterr().err
    assert not (tmp_path / "quantized.om").exists()


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
