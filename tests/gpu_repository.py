"""A Triton model repository as a GPU team has it, for the migration tests.

`build_gpu_repository(root)` writes, with configs as such a team writes them by hand:
- `classifier`: ONNX CNN on `KIND_GPU` gpus [0, 1], dynamic batching with delays, a warmup
  reading a file, a labels file, ONNX Runtime's TensorRT accelerator and a thread parameter;
- `tagger`: a two-input INT64 sequence model whose sequence axis is -1 (geared by `--gears`);
- `scorer`: an MLP in two versions with different weights, both served (`version_policy all`);
- `overflow`: a model whose intermediate values exceed float16's range;
- `preprocess`: a Python model turning UINT8 images into the classifier's FP32 input;
- `classify_raw`: an ensemble of `preprocess` and `classifier`;
- `detector`: a TensorRT plan, which cannot be converted.
`CLIENT_INPUTS` says what the team's clients send each model (name -> input -> dtype, shape).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from onnx_models import build_classifier, build_dims_model, build_fp16_overflow, build_mlp

CLASSES = 10
LABELS = [f"class_{k}" for k in range(CLASSES)]

CLIENT_INPUTS: dict[str, dict[str, tuple[type, tuple[int, ...]]]] = {
    "classifier": {"image": (np.float32, (3, 3, 16, 16))},
    "tagger": {"input_ids": (np.int64, (2, 16)), "attention_mask": (np.int64, (2, 16))},
    "scorer": {"x": (np.float32, (2, 16))},
    "overflow": {"x": (np.float32, (2, 4))},
    "classify_raw": {"raw": (np.uint8, (2, 3, 16, 16))},
}

CLASSIFIER_CONFIG = """\
name: "classifier"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 16, 16 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "labels.txt" } ]
instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 500
  priority_levels: 2
  default_priority_level: 1
}
optimization {
  execution_accelerators { gpu_execution_accelerator: [ { name: "tensorrt" } ] }
}
parameters { key: "intra_op_thread_count" value: { string_value: "4" } }
parameters { key: "team" value: { string_value: "vision" } }
model_warmup [
  {
    name: "sample_image"
    batch_size: 1
    inputs {
      key: "image"
      value: { data_type: TYPE_FP32 dims: [ 3, 16, 16 ] input_data_file: "image.bin" }
    }
  }
]
"""

TAGGER_CONFIG = """\
name: "tagger"
backend: "onnxruntime"
max_batch_size: 4
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [ { name: "hidden" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
dynamic_batching { }
"""

SCORER_CONFIG = """\
name: "scorer"
platform: "onnxruntime_onnx"
max_batch_size: 4
version_policy: { all { } }
input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [
  { name: "y" data_type: TYPE_FP32 dims: [ 8 ] },
  { name: "z" data_type: TYPE_FP32 dims: [ 1 ] }
]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] }
"""

OVERFLOW_CONFIG = """\
name: "overflow"
platform: "onnxruntime_onnx"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_GPU count: 1 } ]
dynamic_batching { preferred_batch_size: [ 2, 4 ] }
"""

PREPROCESS_CONFIG = """\
name: "preprocess"
backend: "python"
max_batch_size: 8
input [ { name: "raw" data_type: TYPE_UINT8 dims: [ 3, 16, 16 ] } ]
output [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 16, 16 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""

PREPROCESS_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            raw = pb_utils.get_input_tensor_by_name(request, "raw").as_numpy()
            image = (raw.astype(np.float32) / 255.0).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("image", image)]))
        return responses
"""

ENSEMBLE_CONFIG = """\
name: "classify_raw"
platform: "ensemble"
max_batch_size: 8
input [ { name: "raw" data_type: TYPE_UINT8 dims: [ 3, 16, 16 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "preprocess"
      model_version: -1
      input_map { key: "raw" value: "raw" }
      output_map { key: "image" value: "preprocessed" }
    },
    {
      model_name: "classifier"
      model_version: -1
      input_map { key: "image" value: "preprocessed" }
      output_map { key: "logits" value: "logits" }
    }
  ]
}
"""

DETECTOR_CONFIG = """\
name: "detector"
platform: "tensorrt_plan"
max_batch_size: 8
input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 640, 640 ] } ]
output [ { name: "boxes" data_type: TYPE_FP32 dims: [ -1, 6 ] } ]
instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]
"""


def _model_dir(root: Path, name: str, config: str) -> Path:
    model_dir = root / name
    model_dir.mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(config)
    return model_dir


def _version(model_dir: Path, version: int) -> Path:
    version_dir = model_dir / str(version)
    version_dir.mkdir()
    return version_dir


def build_gpu_repository(root: Path) -> Path:
    """Write the repository under `root` (created); returns `root`."""
    root.mkdir(parents=True)
    classifier = _model_dir(root, "classifier", CLASSIFIER_CONFIG)
    build_classifier(_version(classifier, 1) / "model.onnx", CLASSES)
    (classifier / "labels.txt").write_text("\n".join(LABELS) + "\n")
    (classifier / "warmup").mkdir()
    image = np.random.default_rng(7).random((3, 16, 16), dtype=np.float32)
    (classifier / "warmup" / "image.bin").write_bytes(image.tobytes())

    tagger = _model_dir(root, "tagger", TAGGER_CONFIG)
    build_dims_model(_version(tagger, 1) / "model.onnx")

    scorer = _model_dir(root, "scorer", SCORER_CONFIG)
    build_mlp(_version(scorer, 1) / "model.onnx", seed=16)
    build_mlp(_version(scorer, 2) / "model.onnx", seed=17)

    overflow = _model_dir(root, "overflow", OVERFLOW_CONFIG)
    build_fp16_overflow(_version(overflow, 1) / "model.onnx")

    preprocess = _model_dir(root, "preprocess", PREPROCESS_CONFIG)
    (_version(preprocess, 1) / "model.py").write_text(textwrap.dedent(PREPROCESS_MODEL))

    ensemble = _model_dir(root, "classify_raw", ENSEMBLE_CONFIG)
    _version(ensemble, 1)

    detector = _model_dir(root, "detector", DETECTOR_CONFIG)
    (_version(detector, 1) / "model.plan").write_bytes(b"serialized TensorRT engine\x00" * 8)
    return root
