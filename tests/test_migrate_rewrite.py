"""`migrate`'s config rewrite: a GPU team's config, field by field, for the compiled `.om`.

The base config is scaffold's for `om_dynamic_batch` (mlp: `x` FP32[-1,16] -> `y` FP32[-1,8],
`z` FP32[-1,1], batch gears 1,2,4,8); each rewritten config is written over the scaffolded one and
checked as model.py and validate check it.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import grpc_address, running_server
from google.protobuf import text_format
from google.protobuf.message import Message
from onnx_models import onnx_path_of, reference
from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from ge_python_backend.client import TritonClient
from ge_python_backend.repository.config import (
    ModelConfig,
    config_view,
    load_model_config,
    write_model_config,
)
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.scaffold import ScaffoldResult, scaffold
from ge_python_backend.repository.triton_config import compare_config_with_session
from ge_python_backend.repository.validation import validate_model
from ge_python_backend.server import TritonServer
from ge_python_backend.tools.migrate.rewrite import (
    TOP_LEVEL_FIELDS,
    ConfigRewrite,
    FieldChange,
    refusals,
    rewrite_config,
)

KIND_CPU = ModelInstanceGroup.KIND_CPU

# What a GPU team serves the mlp with: ONNX Runtime with TensorRT on two GPUs, two instances
# on each, dynamic batching with priorities, its own warmup sample and a labels file.
GPU_CONFIG = """
name: "classifier"
platform: "onnxruntime_onnx"
backend: "onnxruntime"
max_batch_size: 8
version_policy { latest { num_versions: 2 } }
input [ { name: "x" data_type: TYPE_FP32 format: FORMAT_NONE dims: [ 16 ] } ]
output [
  { name: "y" data_type: TYPE_FP32 dims: [ 8 ] label_filename: "labels.txt" },
  { name: "z" data_type: TYPE_FP32 dims: [ 1 ] }
]
instance_group [ { name: "gpu" kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 2, 6, 8 ]
  max_queue_delay_microseconds: 500
  priority_levels: 2
  default_priority_level: 1
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 100000
                         max_queue_size: 32 }
  priority_queue_policy { key: 1 value { max_queue_size: 8 } }
}
optimization {
  execution_accelerators {
    gpu_execution_accelerator [ { name: "tensorrt"
                                  parameters { key: "precision_mode" value: "FP16" } } ]
  }
  cuda { graphs: true }
  input_pinned_memory { enable: true }
}
default_model_filename: "model.onnx"
model_warmup [ {
  name: "sample" batch_size: 1
  inputs { key: "x" value { data_type: TYPE_FP32 dims: [ 16 ] input_data_file: "x.bin" } }
} ]
response_cache { enable: true }
metric_tags { key: "team" value: "vision" }
parameters { key: "intra_op_thread_count" value { string_value: "4" } }
parameters { key: "memory.enable_memory_arena_shrinkage" value { string_value: "cpu:0" } }
parameters { key: "team_threshold" value { string_value: "0.5" } }
"""


def parse(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


@pytest.fixture(scope="module")
def scaffolded(om_dynamic_batch: Path, tmp_path_factory: pytest.TempPathFactory) -> ScaffoldResult:
    """The mlp scaffolded as `classifier` for the emulator: its config is the base."""
    repository = tmp_path_factory.mktemp("repository")
    return scaffold(om_dynamic_batch, repository, name="classifier", runtime="emulator")


@pytest.fixture
def model_dir(scaffolded: ScaffoldResult, tmp_path: Path) -> Iterator[Path]:
    """A fresh copy of the scaffolded model directory, to write a rewritten config into."""
    target = tmp_path / "classifier"
    shutil.copytree(scaffolded.model_dir, target)
    yield target


def rewrite(source: ModelConfig, scaffolded: ScaffoldResult, ids: tuple[int, ...] = (0,)):
    return rewrite_config(source, scaffolded.config, device_ids=ids)


def serve_check(result: ConfigRewrite, model_dir: Path, scaffolded: ScaffoldResult) -> None:
    """Write the config, as the runner will, and check it as model.py and validate do."""
    for relative in result.files:  # the data the config names, made up here
        path = model_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"label\n" if relative.endswith(".txt") else bytes(16 * 4))
    write_model_config(result.config, model_dir / "config.pbtxt")
    view = config_view(load_model_config(model_dir / "config.pbtxt"))
    assert (
        compare_config_with_session(view, scaffolded.inputs, scaffolded.outputs, scaffolded.gears)
        == []
    )
    ModelParameters.from_config(view)
    report = validate_model(model_dir, runtime="emulator")
    assert report.problems == []


def leaves(message: Message, prefix: str = "") -> Iterator[str]:
    """The paths of every field set in `message`, down to numbers, strings and empty messages
    (a repeated number is one field; maps are `field[key]`, repeated messages `field[i]`)."""
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key in value:
                entry = value[key]
                if isinstance(entry, Message) and entry.ListFields():
                    yield from leaves(entry, f"{path}[{key}].")
                else:
                    yield f"{path}[{key}]"
        elif field.message_type is not None and not isinstance(value, Message):  # repeated
            for index, item in enumerate(value):
                yield from (
                    leaves(item, f"{path}[{index}].") if item.ListFields() else [f"{path}[{index}]"]
                )
        elif field.message_type is not None and value.ListFields():
            yield from leaves(value, f"{path}.")
        else:
            yield path


def covers(change: FieldChange, leaf: str) -> bool:
    return leaf == change.field or leaf.startswith((change.field + ".", change.field + "["))


def changes(result: ConfigRewrite) -> list[FieldChange]:
    return [*result.kept, *result.rewritten, *result.dropped, *result.refused]


def assert_each_field_in_one_list(source: ModelConfig, result: ConfigRewrite) -> None:
    for leaf in leaves(source):
        placed = [change for change in changes(result) if covers(change, leaf)]
        assert len(placed) == 1, (leaf, placed)


def detail(entries: list[FieldChange], field: str) -> str:
    found = [change.detail for change in entries if change.field == field]
    assert len(found) == 1, (field, entries)
    return found[0]


def test_gpu_config_rewritten_for_the_om(scaffolded: ScaffoldResult, model_dir: Path) -> None:
    source = parse(GPU_CONFIG)
    result = rewrite(source, scaffolded)
    assert result.refused == [] and result.convertible
    config = result.config
    assert config.backend == "python" and not config.platform
    assert config.name == "classifier" and config.max_batch_size == 8
    assert config.version_policy == source.version_policy
    # two instances on each of GPUs 0 and 1 -> four KIND_CPU instances on NPUs 0,1,0,1
    assert len(config.instance_group) == 1
    group = config.instance_group[0]
    assert (group.kind, group.count, group.name) == (KIND_CPU, 4, "gpu")
    params = ModelParameters.from_config(config_view(config))
    assert [params.device_for_instance(f"gpu_{k}") for k in range(4)] == [0, 1, 0, 1]
    assert params.acl_runtime == "emulator"  # the base's own parameters
    # 6 is not a compiled gear
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 8]
    kept_batching = ModelConfig()
    kept_batching.dynamic_batching.CopyFrom(source.dynamic_batching)
    kept_batching.dynamic_batching.ClearField("preferred_batch_size")
    config.dynamic_batching.ClearField("preferred_batch_size")
    assert config.dynamic_batching == kept_batching.dynamic_batching
    assert not config.HasField("optimization") and not config.default_model_filename
    assert [entry.name for entry in config.model_warmup] == [
        "sample",
        *(f"warmup_batch_{size}" for size in (1, 2, 4, 8)),
    ]
    assert config.output[0].label_filename == "labels.txt"
    assert result.files == ["labels.txt", "warmup/x.bin"]
    assert config.response_cache.enable and dict(config.metric_tags) == {"team": "vision"}
    assert config.parameters["team_threshold"].string_value == "0.5"
    assert "intra_op_thread_count" not in config.parameters
    assert "2 on each of GPUs [0, 1] -> 4" in detail(result.rewritten, "instance_group[0].count")
    assert "[2, 6, 8] -> [2, 8]" in detail(
        result.rewritten, "dynamic_batching.preferred_batch_size"
    )
    assert "TensorRT" in detail(result.dropped, "optimization.execution_accelerators")
    result = rewrite(source, scaffolded)  # the config above was changed by the checks
    serve_check(result, model_dir, scaffolded)


def test_every_source_field_lands_in_exactly_one_list(scaffolded: ScaffoldResult) -> None:
    source = parse(GPU_CONFIG)
    result = rewrite(source, scaffolded)
    assert len(list(leaves(source))) > 30
    assert_each_field_in_one_list(source, result)
    assert {change.field for change in result.dropped} == {
        "optimization.execution_accelerators",
        "optimization.cuda",
        "optimization.input_pinned_memory",
        "default_model_filename",
        "parameters[intra_op_thread_count]",
        "parameters[memory.enable_memory_arena_shrinkage]",
    }
    assert {change.field for change in result.rewritten} >= {
        "platform",
        "backend",
        "instance_group[0].kind",
        "instance_group[0].count",
        "instance_group[0].gpus",
        "dynamic_batching.preferred_batch_size",
    }


def test_every_config_field_has_a_rule() -> None:
    assert set(TOP_LEVEL_FIELDS) == set(ModelConfig.DESCRIPTOR.fields_by_name)


REFUSED_SOURCES = {
    "sequence_batching.state": """
        sequence_batching { state [ { input_name: "INPUT_STATE" output_name: "OUTPUT_STATE"
                                      data_type: TYPE_FP32 dims: [ 1 ] } ] }""",
    "sequence_batching.control_input": """
        sequence_batching { control_input [ { name: "START"
            control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] } ] }""",
    "input[1].allow_ragged_batch": """
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] },
                { name: "r" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]""",
    "batch_input": """
        batch_input [ { kind: BATCH_ELEMENT_COUNT target_name: "count" data_type: TYPE_FP32
                        source_input: "x" } ]""",
    "batch_output": """
        batch_output [ { target_name: "y" kind: BATCH_SCATTER_WITH_INPUT_SHAPE
                         source_input: "x" } ]""",
    "input[1].optional": """
        input [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] },
                { name: "mask" data_type: TYPE_FP32 dims: [ 16 ] optional: true } ]""",
    "model_transaction_policy.decoupled": "model_transaction_policy { decoupled: true }",
}


@pytest.mark.parametrize("field", sorted(REFUSED_SOURCES))
def test_unconvertible_fields_are_refused(field: str, scaffolded: ScaffoldResult) -> None:
    source = parse(GPU_CONFIG)
    source.ClearField("dynamic_batching")  # oneof with sequence_batching
    if field.startswith("input"):
        source.ClearField("input")
    source.MergeFrom(parse(REFUSED_SOURCES[field]))
    assert [change.field for change in refusals(source)] == [field]
    result = rewrite(source, scaffolded)
    assert not result.convertible
    assert detail(result.refused, field)
    assert_each_field_in_one_list(source, result)


def test_the_gpu_config_has_no_refusal() -> None:
    assert refusals(parse(GPU_CONFIG)) == []


@pytest.mark.parametrize(
    ("old", "new", "field", "expected"),
    [
        (
            "dims: [ 16 ]",
            "dims: [ 32 ]",
            "input[0].dims",
            "clients send shape [-1, 32], the .om takes [-1, 16]",
        ),
        (
            "TYPE_FP32 format",
            "TYPE_FP16 format",
            "input[0].data_type",
            "send TYPE_FP16, the .om takes TYPE_FP32",
        ),
        ('name: "x"', 'name: "images"', "input[0].name", "'images' is not an input of the .om"),
    ],
)
def test_tensors_that_disagree_with_the_om_are_refused_with_both(
    old: str, new: str, field: str, expected: str, scaffolded: ScaffoldResult
) -> None:
    source = parse(GPU_CONFIG.replace(old, new, 1))
    assert refusals(source) == []  # only the .om shows it
    result = rewrite(source, scaffolded)
    assert expected in detail(result.refused, field)


def test_kind_gpu_without_gpus_uses_the_device_ids(
    scaffolded: ScaffoldResult, model_dir: Path
) -> None:
    source = parse(GPU_CONFIG)
    source.instance_group[0].ClearField("gpus")
    result = rewrite(source, scaffolded, ids=(2, 3))
    group = result.config.instance_group[0]
    assert (group.kind, group.count) == (KIND_CPU, 4)
    assert result.config.parameters["device_ids"].string_value == "2,3,2,3"
    assert "2 on each of NPUs [2, 3] -> 4" in detail(result.rewritten, "instance_group[0].count")
    serve_check(result, model_dir, scaffolded)


def test_instance_groups_merge_into_one_kind_cpu_group(scaffolded: ScaffoldResult) -> None:
    source = parse(GPU_CONFIG)
    source.ClearField("instance_group")
    source.MergeFrom(
        parse(
            """instance_group [ { kind: KIND_GPU count: 1 gpus: [ 3 ] },
                                { kind: KIND_CPU count: 3 } ]"""
        )
    )
    result = rewrite(source, scaffolded, ids=(0, 1))
    assert [(g.kind, g.count) for g in result.config.instance_group] == [(KIND_CPU, 4)]
    assert result.config.parameters["device_ids"].string_value == "3,0,1,0"
    assert detail(result.kept, "instance_group[1].kind").startswith("KIND_CPU as written")
    # no instance group: Triton's one instance per GPU becomes one per NPU
    source.ClearField("instance_group")
    result = rewrite(source, scaffolded, ids=(0, 1))
    assert result.config.instance_group[0].count == 2
    assert result.config.parameters["device_ids"].string_value == "0,1"


def test_a_config_left_to_auto_complete_takes_the_om_tensors(
    scaffolded: ScaffoldResult, model_dir: Path
) -> None:
    source = parse('name: "classifier" platform: "onnxruntime_onnx"')
    result = rewrite(source, scaffolded)
    assert result.convertible
    assert result.config.max_batch_size == 8
    assert [t.name for t in result.config.input] == ["x"]
    assert [t.name for t in result.config.output] == ["y", "z"]
    assert "auto-complete" in detail(result.rewritten, "output[1]")
    serve_check(result, model_dir, scaffolded)


def test_an_output_the_source_leaves_out_is_added(
    scaffolded: ScaffoldResult, model_dir: Path
) -> None:
    source = parse(GPU_CONFIG)
    del source.output[1]
    result = rewrite(source, scaffolded)
    assert [t.name for t in result.config.output] == ["y", "z"]
    assert "z TYPE_FP32 [1]" in detail(result.rewritten, "output[1]")
    serve_check(result, model_dir, scaffolded)


def test_a_source_without_batching_keeps_full_shapes(
    scaffolded: ScaffoldResult, model_dir: Path
) -> None:
    source = parse(
        """name: "classifier" backend: "onnxruntime"
           input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 16 ] } ]
           output [ { name: "y" data_type: TYPE_FP32 dims: [ -1, 8 ] } ]"""
    )
    result = rewrite(source, scaffolded)
    assert result.convertible and result.config.max_batch_size == 0
    assert list(result.config.output[1].dims) == [-1, 1]  # z, added with its full shape
    assert not result.config.model_warmup  # the base's warmups have a batch axis
    serve_check(result, model_dir, scaffolded)


def test_batches_above_the_largest_gear_are_kept(scaffolded: ScaffoldResult) -> None:
    source = parse(GPU_CONFIG.replace("max_batch_size: 8", "max_batch_size: 16"))
    result = rewrite(source, scaffolded)
    assert result.config.max_batch_size == 16
    assert "chunks" in detail(result.kept, "max_batch_size")


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ('"labels.txt"', '"../../secrets.txt"', "output[0].label_filename"),
        ('input_data_file: "x.bin"', 'input_data_file: "/etc/passwd"', "model_warmup[0]"),
    ],
)
def test_files_outside_the_model_directory_are_refused(
    old: str, new: str, field: str, scaffolded: ScaffoldResult
) -> None:
    result = rewrite(parse(GPU_CONFIG.replace(old, new)), scaffolded)
    assert "must be inside" in detail(result.refused, field)
    assert all(".." not in path and not path.startswith("/") for path in result.files)


def test_a_warmup_that_does_not_fit_the_om_is_refused(scaffolded: ScaffoldResult) -> None:
    source = parse(
        GPU_CONFIG.replace("dims: [ 16 ] input_data_file", "dims: [ 4 ] input_data_file")
    )
    result = rewrite(source, scaffolded)
    assert "'x' dims [4], the model takes [16]" in detail(result.refused, "model_warmup[0]")
    assert "warmup/x.bin" not in result.files


@pytest.mark.e2e
def test_the_rewritten_gpu_config_serves_on_tritonserver(
    scaffolded: ScaffoldResult, model_dir: Path, om_dynamic_batch: Path
) -> None:
    """The real tritonserver loads the rewritten config (four KIND_CPU instances, the kept
    batcher, cache and warmups, the label file) and answers as onnxruntime does."""
    result = rewrite(parse(GPU_CONFIG), scaffolded, ids=(0,))
    serve_check(result, model_dir, scaffolded)
    sample = np.random.default_rng(22).standard_normal(16).astype(np.float32)
    (model_dir / "warmup" / "x.bin").write_bytes(sample.tobytes())
    (model_dir / "labels.txt").write_text("".join(f"class{i}\n" for i in range(8)))
    log = model_dir.parent / "triton.log"
    x = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
    with running_server(model_dir.parent, log_path=log) as server:
        served, got = config_and_answer(server, x)
    assert [(g.kind, g.count) for g in served.instance_group] == [(KIND_CPU, 4)]
    assert served.parameters["device_ids"].string_value == "0,1,0,1"
    # each instance on its NPU, as model.py reports it at load
    placed = re.findall(r"instance (gpu_\d): .* on device (\d)", log.read_text())
    assert sorted(placed) == [("gpu_0", "0"), ("gpu_1", "1"), ("gpu_2", "0"), ("gpu_3", "1")]
    want = reference(onnx_path_of(om_dynamic_batch), {"x": x})
    for name in ("y", "z"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def config_and_answer(
    server: TritonServer, x: np.ndarray
) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """The config the server serves `classifier` with, and its answer to `x`."""
    with TritonClient(grpc_address(server), "grpc") as client:
        return client.model_config("classifier"), client.infer("classifier", {"x": (x, "FP32")})


def test_group_settings_kept_when_the_groups_agree_and_dropped_when_not(
    scaffolded: ScaffoldResult,
) -> None:
    source = parse(GPU_CONFIG)
    source.ClearField("instance_group")
    source.MergeFrom(
        parse(
            """instance_group [
                 { kind: KIND_GPU gpus: [ 0 ] rate_limiter { priority: 2 }
                   profile: [ "0" ] secondary_devices [ { kind: KIND_NVDLA device_id: 0 } ] },
                 { kind: KIND_MODEL count: 2 rate_limiter { priority: 2 } },
                 { kind: KIND_GPU gpus: [ 1 ] rate_limiter { priority: 3 } } ]"""
        )
    )
    result = rewrite(source, scaffolded, ids=(4, 5))
    assert_each_field_in_one_list(source, result)
    assert result.config.parameters["device_ids"].string_value == "0,4,5,1"
    assert not result.config.instance_group[0].HasField("rate_limiter")
    assert "differ" in detail(result.dropped, "instance_group[2].rate_limiter")
    assert "TensorRT" in detail(result.dropped, "instance_group[0].profile")
    assert "NVDLA" in detail(result.dropped, "instance_group[0].secondary_devices")
    source.instance_group[2].rate_limiter.priority = 2
    result = rewrite(source, scaffolded, ids=(4, 5))
    assert result.config.instance_group[0].rate_limiter.priority == 2
    assert detail(result.kept, "instance_group[2].rate_limiter") == "as written"


def test_sequence_batching_without_state_is_kept(
    scaffolded: ScaffoldResult, model_dir: Path
) -> None:
    source = parse(GPU_CONFIG)
    source.ClearField("dynamic_batching")
    source.MergeFrom(
        parse("sequence_batching { max_sequence_idle_microseconds: 5000000 oldest { } }")
    )
    result = rewrite(source, scaffolded)
    assert result.convertible
    assert result.config.sequence_batching == source.sequence_batching
    assert not result.config.HasField("dynamic_batching")
    assert detail(result.kept, "sequence_batching.oldest") == "as written"
    assert_each_field_in_one_list(source, result)
    serve_check(result, model_dir, scaffolded)
