"""Triton's conventions in the configs the tools write: an image input's `format` from the `.om`'s
layout (scaffold, auto-complete, migrate) and a classifier output's `label_filename`
(`scaffold --labels`). Triton's image clients read both (tests/test_image_client_e2e.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInput

from ge_python_backend.cli import main
from ge_python_backend.errors import UserError
from ge_python_backend.modelinfo import TensorSpec
from ge_python_backend.repository.autocomplete import complete_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.triton_config import ConfigError, TritonConfig, image_format
from ge_python_backend.runtime.describe import describe_om
from ge_python_backend.tools.migrate.rewrite import rewrite_config


@pytest.fixture(autouse=True)
def _emulator_left_uninitialised() -> Iterator[None]:
    """Reading an `.om` initialises the emulator's ACL; other test files expect it fresh."""
    yield
    from ge_python_backend.emulator import acl

    acl.finalize()


@pytest.fixture
def labels(tmp_path: Path) -> Path:
    path = tmp_path / "imagenet_labels.txt"
    path.write_text("".join(f"class {index}\n" for index in range(10)))
    return path


def spec(layout: str, shape: tuple[int, ...] = (-1, 3, 224, 224)) -> TensorSpec:
    return dataclasses.replace(TensorSpec.declared("image", "FP32", shape), format=layout)


def test_the_format_is_the_oms_layout_on_three_dims() -> None:
    assert image_format(spec("NCHW"), [3, 224, 224]) == "FORMAT_NCHW"
    assert image_format(spec("NHWC", (-1, 224, 224, 3)), [224, 224, 3]) == "FORMAT_NHWC"
    # Triton refuses a format on other ranks: full shapes of a model without batching.
    assert image_format(spec("NCHW"), [-1, 3, 224, 224]) == "FORMAT_NONE"
    assert image_format(spec("ND", (-1, 3, 16)), [3, 16]) == "FORMAT_NONE"
    assert image_format(spec("ND"), [3, 224, 224]) == "FORMAT_NONE"  # a layout ATC did not record


def test_scaffold_writes_the_image_inputs_format(
    tmp_path: Path, om_classifier: Path, om_dynamic_batch: Path
) -> None:
    image = scaffold(om_classifier, tmp_path, dry_run=True).config
    assert ModelInput.Format.Name(image.input[0].format) == "FORMAT_NCHW"
    assert list(image.input[0].dims) == [3, 16, 16]
    features = scaffold(om_dynamic_batch, tmp_path, dry_run=True).config
    assert features.input[0].format == ModelInput.FORMAT_NONE


def test_auto_complete_gives_an_image_input_the_oms_format(om_classifier: Path) -> None:
    om = describe_om(om_classifier, "emulator")
    empty = TritonConfig(name="classifier", backend="python")
    completed, filled = complete_config(empty, om.inputs, om.outputs, om.gears)
    assert completed.inputs[0].format == "FORMAT_NCHW"
    assert "input 'image' TYPE_FP32 [3, 16, 16] FORMAT_NCHW" in filled
    # Declared without a format: given the .om's; a format the config gives is kept.
    declared = TritonConfig.from_dict(
        {"max_batch_size": 4, "input": [{"name": "image", "dims": [3, 16, 16]}]}
    )
    completed, filled = complete_config(declared, om.inputs, om.outputs, om.gears)
    assert completed.inputs[0].format == "FORMAT_NCHW"
    assert "input 'image' TYPE_FP32 FORMAT_NCHW (declared without data_type and format)" in filled
    given = TritonConfig.from_dict(
        {"max_batch_size": 4, "input": [{"name": "image", "dims": [3, 16, 16], "format": 2}]}
    )
    completed, _ = complete_config(given, om.inputs, om.outputs, om.gears)
    assert completed.inputs[0].to_dict()["format"] == "FORMAT_NCHW"  # protobuf's number read
    # the other layout is refused: the runtime does not transpose
    other = dataclasses.replace(
        given, inputs=(dataclasses.replace(given.inputs[0], format="FORMAT_NHWC"),)
    )
    with pytest.raises(
        ConfigError,
        match="input 'image': config format FORMAT_NHWC but the .om's input is FORMAT_NCHW",
    ):
        complete_config(other, om.inputs, om.outputs, om.gears)


def test_migrate_gives_an_image_input_the_oms_format(tmp_path: Path, om_classifier: Path) -> None:
    base = scaffold(om_classifier, tmp_path, name="classifier", dry_run=True).config
    source = text_format.Parse(
        'name: "classifier" platform: "onnxruntime_onnx" max_batch_size: 4 '
        'input { name: "image" data_type: TYPE_FP32 dims: [3, 16, 16] } '
        'output { name: "logits" data_type: TYPE_FP32 dims: [10] }',
        ModelConfig(),
    )
    result = rewrite_config(source, base, device_ids=(0,))
    assert result.config.input[0].format == ModelInput.FORMAT_NCHW
    assert [c.detail for c in result.rewritten if c.field == "input[0].format"] == [
        "none -> FORMAT_NCHW (the .om's input layout)"
    ]
    # Served without batching, in full shapes: no format (Triton takes one on 3 dims only).
    source.max_batch_size = 0
    source.input[0].dims[:] = [-1, 3, 16, 16]
    source.output[0].dims[:] = [-1, 10]
    result = rewrite_config(source, base, device_ids=(0,))
    assert result.convertible, result.refused
    assert result.config.input[0].format == ModelInput.FORMAT_NONE


def test_scaffold_labels_name_the_classifier_output_and_copy_the_file(
    tmp_path: Path, om_classifier: Path, labels: Path
) -> None:
    written = scaffold(om_classifier, tmp_path / "models", labels=labels)
    assert written.config.output[0].label_filename == "imagenet_labels.txt"
    assert written.labels_path == tmp_path / "models" / "classifier" / "imagenet_labels.txt"
    assert written.labels_path.read_text() == labels.read_text()
    assert 'label_filename: "imagenet_labels.txt"' in written.config_path.read_text()


def test_labels_that_fit_no_output_are_refused(
    tmp_path: Path, om_classifier: Path, labels: Path
) -> None:
    labels.write_text("cat\ndog\n")
    with pytest.raises(UserError, match=r"has 2 labels, and no output .*\(logits 10 values\)"):
        scaffold(om_classifier, tmp_path, labels=labels)
    taken = tmp_path / "config.pbtxt"
    taken.write_text("".join(f"{index}\n" for index in range(10)))
    with pytest.raises(UserError, match="its name 'config.pbtxt' is taken in a model directory"):
        scaffold(om_classifier, tmp_path / "models", labels=taken)
    assert not (tmp_path / "models").exists()


def test_cli_scaffold_labels(
    tmp_path: Path, om_classifier: Path, labels: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = ["scaffold", str(om_classifier), "-r", str(tmp_path), "--labels", str(labels)]
    assert main([*command, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert 'label_filename: "imagenet_labels.txt"' in out
    assert f"#   {tmp_path / 'classifier' / 'imagenet_labels.txt'}" in out
