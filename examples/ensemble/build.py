"""Build an image-classification ensemble: Python preprocessing -> ResNet-50-style `.om`.

    python examples/ensemble/build.py models
    ge-python-model serve models --emulator

Writes three models into the repository:

* `classifier`: the ResNet-50-style ONNX of examples/resnet50, compiled with
  `ge-python-model emulator compile` (batch gears 1,2,4,8; the command also prints the `atc`
  equivalent) and scaffolded with `ge-python-model scaffold`;
* `preprocess`: a hand-written Python-backend model (preprocess_model.py) that decodes JPEG/PNG
  bytes from a TYPE_STRING input and outputs the classifier's FP32 [3,224,224];
* `classify_image`: `platform: "ensemble"`, whose two `ensemble_scheduling` steps feed
  `preprocess`'s `pixels` into `classifier`'s `input`: encoded image in, logits out.

Both hand-made configs are `tritonclient.grpc.model_config_pb2.ModelConfig` messages written with
protobuf's text_format.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

EXAMPLES = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(EXAMPLES / "resnet50"))
sys.path.insert(0, str(EXAMPLES))  # example_tools
from example_tools import compile_om, scaffold  # noqa: E402
from resnet50_onnx import INPUT_NAME, NUM_CLASSES, OUTPUT_NAME, build_resnet50  # noqa: E402

HERE = Path(__file__).resolve().parent
CLASSIFIER, PREPROCESS, ENSEMBLE = "classifier", "preprocess", "classify_image"
BATCH_GEARS = "1,2,4,8"
MAX_BATCH = 8  # no more than the classifier's largest gear and the preprocessing's batch
IMAGE_SIZE = 224


def preprocess_config() -> model_config_pb2.ModelConfig:
    """`preprocess`: Python backend, image bytes [1] -> pixels FP32 [3,224,224], batched."""
    config = model_config_pb2.ModelConfig(
        name=PREPROCESS, backend="python", max_batch_size=MAX_BATCH
    )
    config.input.add(name="image", data_type=model_config_pb2.TYPE_STRING, dims=[1])
    config.output.add(
        name="pixels", data_type=model_config_pb2.TYPE_FP32, dims=[3, IMAGE_SIZE, IMAGE_SIZE]
    )
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=1)
    config.dynamic_batching.max_queue_delay_microseconds = 100
    return config


def ensemble_config() -> model_config_pb2.ModelConfig:
    """`classify_image`: image bytes -> preprocess -> classifier -> logits."""
    config = model_config_pb2.ModelConfig(
        name=ENSEMBLE, platform="ensemble", max_batch_size=MAX_BATCH
    )
    config.input.add(name="image", data_type=model_config_pb2.TYPE_STRING, dims=[1])
    config.output.add(name="logits", data_type=model_config_pb2.TYPE_FP32, dims=[NUM_CLASSES])
    decode = config.ensemble_scheduling.step.add(model_name=PREPROCESS, model_version=-1)
    decode.input_map["image"] = "image"  # the step's input name -> an ensemble tensor
    decode.output_map["pixels"] = "pixels"  # the step's output name -> an ensemble tensor
    classify = config.ensemble_scheduling.step.add(model_name=CLASSIFIER, model_version=-1)
    classify.input_map[INPUT_NAME] = "pixels"
    classify.output_map[OUTPUT_NAME] = "logits"
    return config


def write_model(repository: Path, config: model_config_pb2.ModelConfig) -> Path:
    """`<repository>/<name>/config.pbtxt` and an (empty) version directory `1/`."""
    model_dir = repository / config.name
    shutil.rmtree(model_dir, ignore_errors=True)
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(text_format.MessageToString(config))
    return model_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path, help="Triton model repository to write into")
    parser.add_argument(
        "--workdir", type=Path, default=Path("build/ensemble"), help="where the .onnx/.om go"
    )
    parser.add_argument(
        "--width", type=int, default=16, help="classifier stem channels (ResNet-50: 64)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random weights seed")
    args = parser.parse_args()

    onnx_path = build_resnet50(args.workdir / f"{CLASSIFIER}.onnx", args.width, args.seed)
    print(f"wrote {onnx_path} (ResNet-50 topology, width {args.width}, random weights)")
    om = compile_om(
        onnx_path,
        args.workdir / CLASSIFIER,
        input_shape=f"{INPUT_NAME}:-1,3,{IMAGE_SIZE},{IMAGE_SIZE}",
        dynamic_batch_size=BATCH_GEARS,
    )
    scaffold(om, args.repository, CLASSIFIER)
    preprocess_dir = write_model(args.repository, preprocess_config())
    shutil.copyfile(HERE / "preprocess_model.py", preprocess_dir / "1" / "model.py")
    print(f"wrote model {PREPROCESS!r}: {preprocess_dir}/config.pbtxt, 1/model.py")
    ensemble_dir = write_model(args.repository, ensemble_config())
    print(f"wrote model {ENSEMBLE!r}: {ensemble_dir}/config.pbtxt (platform ensemble)")


if __name__ == "__main__":
    main()
