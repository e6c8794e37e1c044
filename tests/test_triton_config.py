"""The stub's reader of Triton's JSON config (`triton_config.TritonConfig`) and the tools'
protobuf builder (`repository.config`) cannot drift: every field the project writes or reads goes
through both and comes back the same; the stub's modules never import protobuf or tritonclient."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from ge_python_backend.ascend import GearKind
from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.repository.config import (
    build_model_config,
    config_from_view,
    config_view,
    parse_version_policy,
)
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.triton_config import (
    DATA_TYPES,
    SCHEDULERS,
    ConfigError,
    ConfigTensor,
    DynamicBatching,
    TritonConfig,
    config_type_name,
)

TEMPLATE = Path(__file__).resolve().parent.parent / "model_templates" / "model.py"


EVERY_PARAMETER = ModelParameters(
    om_file="m.om",
    om_sha256="ab" * 32,
    device_ids=(0, 3),
    acl_runtime="emulator",
    pipeline_depth=1,
    execute_timeout_ms=500,
    input_shape_order=("b", "a"),
    pipeline_min_device_us=250,
)


def built() -> model_config_pb2.ModelConfig:
    """A config with every field scaffold writes: tensors of several types, batching with a
    queue policy, instance groups, warmups, every parameter and a version policy."""
    inputs = [
        TensorSpec.declared("a", "FP16", (-1, 3, 4)),
        TensorSpec.declared("b", "INT64", (-1, 7)),
        TensorSpec.declared("c", "BOOL", (-1, 1)),
    ]
    outputs = [
        TensorSpec.declared("y", "FP32", (-1, 10)),
        TensorSpec.declared("s", "BYTES", (-1, 2)),
    ]
    gears = GearInfo(GearKind.BATCH, True, (1, 2, 4, 8), max_batch=8)
    config = build_model_config(
        "every_field",
        inputs,
        outputs,
        gears,
        EVERY_PARAMETER,
        instances=2,
        max_queue_delay_us=250,
        max_queue_size=64,
        queue_timeout_us=5000,
    )
    config.version_policy.CopyFrom(parse_version_policy("specific:1,3"))
    return config


def test_the_data_types_are_triton_s_enum_in_its_order() -> None:
    assert list(DATA_TYPES) == list(model_config_pb2.DataType.keys())
    assert [model_config_pb2.DataType.Value(name) for name in DATA_TYPES] == list(
        range(len(DATA_TYPES))
    )
    assert config_type_name("BYTES") == "TYPE_STRING"
    with pytest.raises(ConfigError, match="unknown Triton data type 'FP8'"):
        config_type_name("FP8")


def test_every_field_reads_the_same_through_both() -> None:
    config = built()
    view = config_view(config)
    assert (view.name, view.backend, view.max_batch_size) == ("every_field", "python", 8)
    for read, written in ((view.inputs, config.input), (view.outputs, config.output)):
        assert read == tuple(
            ConfigTensor(t.name, model_config_pb2.DataType.Name(t.data_type), tuple(t.dims))
            for t in written
        )
    assert view.parameters == {key: value.string_value for key, value in config.parameters.items()}
    assert ModelParameters.from_config(view) == EVERY_PARAMETER
    assert view.dynamic_batching == DynamicBatching((1, 2, 4, 8), 250)
    assert view.scheduler == config.WhichOneof("scheduling_choice") == "dynamic_batching"
    # ... and the builder gets it all back, the fields the reader does not type included.
    assert config_from_view(view) == config


def test_the_reader_keeps_what_it_does_not_type_and_writes_back_what_it_does() -> None:
    config = built()
    view = config_view(config)
    completed = TritonConfig.from_dict(view.to_dict())
    assert completed == view
    changed = config_from_view(
        TritonConfig(
            **{
                **{field: getattr(view, field) for field in ("name", "backend", "parameters")},
                "max_batch_size": 4,
                "inputs": view.inputs[:1],
                "outputs": (ConfigTensor("y", "TYPE_FP32", (10,)),),
                "dynamic_batching": DynamicBatching((1, 4), 100),
                "extra": view.extra,
            }
        )
    )
    assert changed.max_batch_size == 4
    assert [t.name for t in changed.input] == ["a"]
    assert [(t.name, t.data_type, list(t.dims)) for t in changed.output] == [
        ("y", model_config_pb2.TYPE_FP32, [10])
    ]
    assert list(changed.dynamic_batching.preferred_batch_size) == [1, 4]
    assert changed.dynamic_batching.max_queue_delay_microseconds == 100
    # the queue policy, warmups, instance groups and version policy are the user's, untouched
    assert (
        changed.dynamic_batching.default_queue_policy
        == config.dynamic_batching.default_queue_policy
    )
    assert changed.model_warmup == config.model_warmup
    assert changed.instance_group == config.instance_group
    assert changed.version_policy == config.version_policy


@pytest.mark.parametrize("scheduler", SCHEDULERS[1:])
def test_the_other_schedulers_are_seen(scheduler: str) -> None:
    config = model_config_pb2.ModelConfig(name="m", backend="python", max_batch_size=4)
    getattr(config, scheduler).SetInParent()
    view = config_view(config)
    assert view.scheduler == scheduler and view.dynamic_batching is None
    assert config_from_view(view) == config


def test_triton_s_json_numbers_read_as_protobuf_s_strings() -> None:
    """Triton writes int64 fields (dims, queue delay) as numbers, protobuf's mapping as strings."""
    config = built()
    as_protobuf = json_format.MessageToDict(config, preserving_proto_field_name=True)
    assert as_protobuf["input"][0]["dims"] == ["3", "4"]
    as_triton = json.loads(json.dumps(as_protobuf))
    for tensor in (*as_triton["input"], *as_triton["output"]):
        tensor["dims"] = [int(dim) for dim in tensor["dims"]]
    batching = as_triton["dynamic_batching"]
    batching["max_queue_delay_microseconds"] = int(batching["max_queue_delay_microseconds"])
    assert TritonConfig.from_json(json.dumps(as_triton)) == TritonConfig.from_dict(as_protobuf)


def test_protobuf_s_camel_case_names_read_as_the_proto_s() -> None:
    config = built()
    camel = json_format.MessageToDict(config)
    assert "maxBatchSize" in camel and "stringValue" in camel["parameters"]["om_file"]
    view = TritonConfig.from_dict(camel)
    assert view == config_view(config)
    assert config_from_view(view) == config


def test_a_config_that_is_not_json_or_names_an_unknown_type_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not JSON"):
        TritonConfig.from_json("{")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        TritonConfig.from_json("[]")
    with pytest.raises(ConfigError, match="unknown data_type 'TYPE_FP8'"):
        TritonConfig.from_dict({"input": [{"name": "x", "data_type": "TYPE_FP8"}]})


def test_the_stub_imports_no_tritonclient_grpc_or_protobuf(tmp_path: Path) -> None:
    """The template and what it imports, in a fresh interpreter of this environment (which has
    all three installed), with an empty stand-in for Triton's `triton_python_backend_utils`."""
    (tmp_path / "triton_python_backend_utils.py").write_text("")
    code = (
        "import importlib.util, json, sys\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "import ge_python_backend.triton.instance, ge_python_backend.triton.autocomplete\n"
        "import ge_python_backend.emulator.acl\n"
        f"spec = importlib.util.spec_from_file_location('model', {str(TEMPLATE)!r})\n"
        "spec.loader.exec_module(importlib.util.module_from_spec(spec))\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = json.loads(done.stdout)
    assert "ge_python_backend.triton.instance" in modules
    forbidden = [
        name
        for name in modules
        if name.split(".")[0] in ("tritonclient", "grpc") or name.startswith("google.protobuf")
    ]
    assert forbidden == []
