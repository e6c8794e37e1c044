"""Fifty models of realistic size on one card: ResNet-50-, YOLOv8s- and BERT-base-shaped graphs
at their real widths with random weights, each compiled once for the emulator, served as many
models through hard links of those few `.om` files.

Each model is a model of its own to Triton and to the runtime (the runtime counts weights per
`.om` path, so every model holds its own weights, as on a device), while the emulator's
processes read one file per kind. `CARD` is `make bench`'s set (section 13); `SMALL` is the
same three kinds at small widths and gears, one model each, which `make test` serves.

The kinds (`Kind`):
- `resnet50`: examples/resnet50 `build_resnet50` at width 64, ResNet-50 v1.5 (25.6 M
  parameters), `input` FP32 [N, 3, 224, 224] -> `logits` FP32 [N, 1000];
- `yolov8s`: examples/yolov8n `build_yolov8` at scale s (11.2 M parameters, batch norm folded),
  `images` FP32 [N, 3, 640, 640] -> `output0` FP32 [N, 84, 8400];
- `bert_base`: examples/bert_base `build_bert` at hidden 768, 12 layers, 12 heads (110 M
  parameters, vocabulary 30522), sequence length 128, `input_ids`, `attention_mask`,
  `token_type_ids` INT64 [N, 128] -> `last_hidden_state` FP32 [N, 128, 768] and
  `pooler_output` FP32 [N, 768].

Every kind is compiled at ATC's default precision (force_fp16) with batch gears, and judged as
`compare` judges a compiled model: each output against onnxruntime on the ONNX, within
`compare.Thresholds` (FP16 against FP32).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
from onnx_models import reference_session

from ge_python_backend.client import TritonClient, typed
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.repository.config import load_model_config, write_model_config
from ge_python_backend.repository.parameters import DEFAULT_EXECUTE_TIMEOUT_MS
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.server import TritonServer
from ge_python_backend.tools.bench import metric_samples
from ge_python_backend.tools.compare import Thresholds, compare_arrays

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
for _example in ("resnet50", "yolov8n", "bert_base"):
    if str(EXAMPLES / _example) not in sys.path:
        sys.path.insert(0, str(EXAMPLES / _example))

from bert_onnx import INPUT_NAMES as BERT_INPUTS  # noqa: E402
from bert_onnx import build_bert  # noqa: E402
from resnet50_onnx import build_resnet50  # noqa: E402
from yolov8n_onnx import build_yolov8  # noqa: E402

INSTANCES = 2  # Triton instances of every model
SEQUENCE = 128  # BERT's sequence length
VOCAB = 30522


def image_request(name: str, side: int) -> Callable[[int, np.random.Generator], dict]:
    def request(rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {name: rng.random((rows, 3, side, side), dtype=np.float32)}

    return request


def token_request(rows: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Token ids of the whole vocabulary, the last quarter of each row padding."""
    ids, mask, types = BERT_INPUTS
    keep = np.arange(SEQUENCE) < SEQUENCE * 3 // 4
    return {
        ids: rng.integers(0, VOCAB, (rows, SEQUENCE)).astype(np.int64),
        mask: np.broadcast_to(keep, (rows, SEQUENCE)).astype(np.int64),
        types: (np.arange(SEQUENCE) >= SEQUENCE // 2).astype(np.int64)[None].repeat(rows, 0),
    }


@dataclasses.dataclass(frozen=True)
class Kind:
    """One graph of the card: how to build its ONNX, compile it, and make a request of it."""

    name: str
    count: int  # models of this kind
    build: Callable[[Path], Path]  # writes the ONNX at the path given
    input_shape: str  # ATC's --input_shape
    gears: str  # ATC's --dynamic_batch_size
    request: Callable[[int, np.random.Generator], dict[str, np.ndarray]]  # rows, rng -> inputs

    def model_names(self) -> list[str]:
        return [f"{self.name}_{number:02d}" for number in range(self.count)]


BERT_SHAPE = ";".join(f"{name}:-1,{SEQUENCE}" for name in BERT_INPUTS)
CARD = (
    Kind(
        "resnet50",
        20,
        lambda path: build_resnet50(path, width=64),
        "input:-1,3,224,224",
        "1,2,4,8",
        image_request("input", 224),
    ),
    Kind(
        "yolov8s",
        20,
        lambda path: build_yolov8(path, "s"),
        "images:-1,3,640,640",
        "1,2,4,8",
        image_request("images", 640),
    ),
    Kind(
        "bert_base",
        10,
        lambda path: build_bert(path, hidden=768, layers=12, heads=12),
        BERT_SHAPE,
        "1,2,4,8",
        token_request,
    ),
)
# `make test`'s: the same graphs at small widths (ResNet-50 at width 16, YOLOv8n, a 2-layer BERT
# of hidden 128), batch gears 1 and 2, one model each.
SMALL = (
    Kind(
        "resnet50",
        1,
        lambda path: build_resnet50(path, width=16),
        "input:-1,3,224,224",
        "1,2",
        image_request("input", 224),
    ),
    Kind(
        "yolov8n",
        1,
        lambda path: build_yolov8(path, "n"),
        "images:-1,3,640,640",
        "1,2",
        image_request("images", 640),
    ),
    Kind(
        "bert",
        1,
        lambda path: build_bert(path, hidden=128, layers=2, heads=4),
        BERT_SHAPE,
        "1,2",
        token_request,
    ),
)


def compile_kinds(work: Path, kinds: Sequence[Kind]) -> dict[str, Path]:
    """Each kind's ONNX built and compiled (force_fp16) under `work`: {kind: .om}."""
    work.mkdir(parents=True, exist_ok=True)
    return {
        kind.name: compile_onnx(
            kind.build(work / f"{kind.name}.onnx"),
            work / kind.name,
            input_shape=kind.input_shape,
            dynamic_batch_size=kind.gears,
        )
        for kind in kinds
    }


def _link_om_copy_rest(source: str, target: str) -> None:
    if source.endswith(".om"):
        os.link(source, target)
    else:
        shutil.copy2(source, target)


def build_repository(
    root: Path,
    oms: Mapping[str, Path],
    kinds: Sequence[Kind],
    device_host: bool | None = True,
    instances: int = INSTANCES,
    execute_timeout_ms: int = DEFAULT_EXECUTE_TIMEOUT_MS,
) -> dict[str, Kind]:
    """Every model of `kinds` under `root`: the first of a kind scaffolded from its `.om` (as
    scaffold writes it: max_batch_size, dynamic batching, warmup), the others copies of it under
    their own names whose `.om` is a hard link of the first's. {model name: its kind}."""
    models: dict[str, Kind] = {}
    for kind in kinds:
        first, *others = kind.model_names()
        scaffold(
            oms[kind.name],
            root,
            name=first,
            runtime="emulator",
            instances=instances,
            device_host=device_host,
            execute_timeout_ms=execute_timeout_ms,
        )
        models[first] = kind
        for name in others:
            shutil.copytree(root / first, root / name, copy_function=_link_om_copy_rest)
            config_path = root / name / "config.pbtxt"
            config = load_model_config(config_path)
            config.name = name
            write_model_config(config, config_path)
            models[name] = kind
    return models


@dataclasses.dataclass(frozen=True)
class Question:
    """A request for one model and onnxruntime's answer to it (the model's ONNX)."""

    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]


def questions(
    oms: Mapping[str, Path],
    models: Mapping[str, Kind],
    rows: int,
    rng: np.random.Generator,
) -> dict[str, Question]:
    """A request of `rows` rows for each of `models` with onnxruntime's answers, asked before any
    server starts and kind by kind: one reference session is held at a time (a YOLOv8s or
    BERT-base session holds hundreds of MiB the served card needs)."""
    asked: dict[str, Question] = {}
    for kind_name, om in oms.items():
        names = [name for name, kind in models.items() if kind.name == kind_name]
        if not names:
            continue
        session = reference_session(om)
        outputs = [output.name for output in session.get_outputs()]
        for name in names:
            inputs = models[name].request(rows, rng)
            expected = dict(zip(outputs, session.run(outputs, dict(inputs))))
            asked[name] = Question(inputs, expected)
        del session
    return asked


def answer_problem(client: TritonClient, model: str, question: Question) -> str:
    """`question` asked of `model`: "" when every output passes `compare`'s thresholds against
    onnxruntime's answer, else what was wrong."""
    try:
        served = client.infer(model, typed(question.inputs))
    except Exception as error:  # tritonclient's InferenceServerException
        return f"failed: {error}"
    wrong = []
    for name, expected in question.expected.items():
        found = compare_arrays("served", name, served[name], expected, Thresholds())
        if not found.passed:
            problem = found.problem or f"{found.mismatched} elements outside the thresholds"
            wrong.append(f"{name}: {problem}, cosine {found.cosine:.4f}")
    return "; ".join(wrong)


def host_work_spaces(server: TritonServer) -> dict[str, int]:
    """The device host's shared work spaces and I/O areas as the instances' metrics show them
    (the largest figure of any instance: 0 in-stub or with a work space per lane)."""
    with urllib.request.urlopen(server.urls.metrics, timeout=30) as response:
        text = response.read().decode()
    return {
        key: int(max((value for _, value in metric_samples(text, name)), default=0))
        for key, name in (
            ("streams", "ge_device_host_streams"),
            ("work_space_bytes", "ge_device_host_work_space_bytes"),
            ("io_area_bytes", "ge_device_host_io_area_bytes"),
        )
    }
