"""`ModelParameters`: the one rule and message of every config.pbtxt parameter, the round trip
through a `ModelConfig`, and the device of each model instance."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.cli import main
from ge_python_backend.repository.config import (
    ConfigError,
    config_view,
    load_model_config,
    write_model_config,
)
from ge_python_backend.repository.parameters import (
    ModelParameters,
    describe_unknown_parameter,
    instance_index,
    unknown_parameters,
)
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.runtime import DEVICE_TIMING_PERIOD
from ge_python_backend.runtime.dvpp import ImageInput

SHA = "0123456789abcdef" * 4

MESSAGES = {
    "om_file": "parameter om_file must name the .om file inside the version directory "
    "(a plain file name such as 'resnet.om'; or be left out: the only .om of each version "
    "directory), got ",
    "om_sha256": "parameter om_sha256 must be the .om file's SHA-256 as 64 hexadecimal "
    "characters (or be left out to skip the check), got ",
    "device_ids": "parameter device_ids must be comma-separated NPU ids 0..2147483647 such as "
    "'0' or '0,1', got ",
    "acl_runtime": "parameter acl_runtime must be one of pyacl, emulator (or be left out: "
    "$GE_PYTHON_BACKEND_ACL, else the .om's container: emulator for an emulator .om, else "
    "pyacl), got ",
    "pipeline_depth": "parameter pipeline_depth must be one of 1, 2, got ",
    "execute_timeout_ms": "parameter execute_timeout_ms must be 0..2147483647 ms (a whole "
    "number; 0: no timeout), got ",
    "pipeline_min_device_us": "parameter pipeline_min_device_us must be 0..2147483647 "
    "microseconds (a whole number; 0: pipeline every execution), got ",
    "device_timing_period": "parameter device_timing_period must be 1..2147483647 (a whole "
    "number; time one execution in that many of each gear and batch with ACL events; 1: every "
    "one), got ",
    "input_shape_order": "parameter input_shape_order must be the model's input names in ATC's "
    "--input_shape order, comma-separated and each once, such as 'b,a' (or be left out: found "
    "from the gears), got ",
    "aipp_config": "parameter aipp_config must name an ATC-syntax AIPP config file inside the "
    "version directory (a plain file name such as 'aipp.cfg', whose aipp_op blocks with "
    "aipp_mode: static fix the AIPP of a dynamic-AIPP model), got ",
}


def config_with(**parameters: str) -> ModelConfig:
    config = ModelConfig(name="m")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return config


def test_defaults_when_only_om_file_is_given() -> None:
    params = ModelParameters.from_config(config_view(config_with(om_file="m.om")))
    assert params == ModelParameters("m.om", None, (0,), None, 2, 20000, None)


@pytest.mark.parametrize(
    ("name", "text", "value"),
    [
        ("om_file", "resnet.om", "resnet.om"),
        ("om_file", "model v2.om", "model v2.om"),
        ("om_sha256", SHA.upper(), SHA),
        ("device_ids", "3", (3,)),
        ("device_ids", "0, 1,3", (0, 1, 3)),
        ("device_ids", "1,1", (1, 1)),
        ("acl_runtime", "pyacl", "pyacl"),
        ("acl_runtime", "emulator", "emulator"),
        ("pipeline_depth", "1", 1),
        ("pipeline_depth", "2", 2),
        ("execute_timeout_ms", "0", 0),
        ("execute_timeout_ms", "2500", 2500),
        ("pipeline_min_device_us", "0", 0),
        ("pipeline_min_device_us", "250", 250),
        ("device_timing_period", "1", 1),
        ("device_timing_period", "64", 64),
        ("input_shape_order", "b,a", ("b", "a")),
        ("input_shape_order", " b , a,c", ("b", "a", "c")),
        ("input_shape_order", "x", ("x",)),
    ],
)
def test_accepted_values(name: str, text: str, value: object) -> None:
    config = config_with(**{"om_file": "m.om", name: text})
    assert getattr(ModelParameters.from_config(config_view(config)), name) == value


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("om_file", ""),
        ("om_file", "../m.om"),
        ("om_file", "sub/m.om"),
        ("om_file", "sub\\m.om"),
        ("om_file", ".."),
        ("om_file", " m.om"),
        ("om_sha256", ""),
        ("om_sha256", "ab" * 31),
        ("om_sha256", "xy" * 32),
        ("device_ids", ""),
        ("device_ids", "0,,1"),
        ("device_ids", " , "),
        ("device_ids", "0,-1"),
        ("device_ids", "npu0"),
        ("device_ids", "1.5"),
        ("acl_runtime", ""),
        ("acl_runtime", "cuda"),
        ("acl_runtime", "PyACL"),
        ("pipeline_depth", "0"),
        ("pipeline_depth", "3"),
        ("pipeline_depth", "two"),
        ("execute_timeout_ms", "-1"),
        ("execute_timeout_ms", "1.5"),
        ("execute_timeout_ms", ""),
        ("execute_timeout_ms", "99999999999999999999"),
        ("execute_timeout_ms", "2147483648"),
        ("device_ids", "0,2147483648"),
        ("pipeline_min_device_us", "99999999999999999999"),
        ("pipeline_min_device_us", "-1"),
        ("pipeline_min_device_us", "1ms"),
        ("device_timing_period", "0"),
        ("device_timing_period", "-4"),
        ("device_timing_period", "2147483648"),
        ("device_timing_period", "every"),
        ("input_shape_order", ""),
        ("input_shape_order", "b,,a"),
        ("input_shape_order", "b,a,b"),
        ("input_shape_order", " , "),
        ("aipp_config", ""),
        ("aipp_config", "../aipp.cfg"),
    ],
)
def test_refused_values_name_the_parameter_and_what_is_allowed(name: str, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelParameters.from_config(config_view(config_with(**{"om_file": "m.om", name: text})))
    assert str(caught.value) == MESSAGES[name] + repr(text)


def test_without_om_file_each_version_serves_its_only_om() -> None:
    assert ModelParameters.from_config(config_view(config_with(device_ids="0"))).om_file is None
    assert ModelParameters.from_config(config_view(ModelConfig())) == ModelParameters()


def test_every_problem_is_reported_at_once() -> None:
    config = config_with(om_file="m.om", device_ids="0,,1", pipeline_depth="3")
    with pytest.raises(ConfigError) as caught:
        ModelParameters.from_config(config_view(config))
    assert str(caught.value) == (
        MESSAGES["device_ids"] + "'0,,1'; " + MESSAGES["pipeline_depth"] + "'3'"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("device_ids", ()),
        ("device_ids", (-1,)),
        ("device_ids", (True,)),
        ("pipeline_depth", 3),
        ("pipeline_depth", True),
        ("execute_timeout_ms", -5),
        ("execute_timeout_ms", 2**31),
        ("input_shape_order", ()),
        ("input_shape_order", ("a", "")),
        ("input_shape_order", ("a", 1)),
        ("acl_runtime", "cuda"),
        ("om_sha256", "ab"),
    ],
)
def test_typed_values_follow_the_same_rules(name: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        ModelParameters("m.om", **{name: value})  # type: ignore[arg-type]
    assert str(caught.value) == MESSAGES[name] + repr(value)


def test_round_trip_through_a_model_config() -> None:
    params = ModelParameters("resnet.om", SHA, (2, 0, 5), "emulator", 2, 1500, ("b", "a"), 0)
    config = ModelConfig(name="resnet")
    params.to_config(config)
    assert {key: value.string_value for key, value in config.parameters.items()} == {
        "om_file": "resnet.om",
        "om_sha256": SHA,
        "device_ids": "2,0,5",
        "acl_runtime": "emulator",
        "pipeline_depth": "2",
        "execute_timeout_ms": "1500",
        "input_shape_order": "b,a",
        "pipeline_min_device_us": "0",
    }
    assert ModelParameters.from_config(config_view(config)) == params
    defaults = ModelParameters("resnet.om")
    defaults.to_config(config)  # None fields remove their keys
    assert not {"om_sha256", "acl_runtime", "input_shape_order", "pipeline_min_device_us"} & set(
        config.parameters
    )
    assert ModelParameters.from_config(config_view(config)) == defaults


def test_round_trip_through_config_pbtxt(tmp_path: Path) -> None:
    params = ModelParameters("m.om", SHA, (1,), "pyacl", 2)
    config = ModelConfig(name="m")
    params.to_config(config)
    path = write_model_config(config, tmp_path / "config.pbtxt")
    assert ModelParameters.from_config(config_view(load_model_config(path))) == params


def test_other_parameters_are_left_out_and_listed() -> None:
    config = config_with(om_file="m.om", pipline_depth="2", EXECUTION_ENV_PATH="$$TRITON/env")
    assert ModelParameters.from_config(config_view(config)).pipeline_depth == 2  # the default
    assert unknown_parameters(config_view(config)) == ["pipline_depth"]
    ModelParameters("m.om", pipeline_depth=2).to_config(config)
    assert config.parameters["EXECUTION_ENV_PATH"].string_value == "$$TRITON/env"
    assert sorted(config.parameters) == [
        "EXECUTION_ENV_PATH",
        "device_ids",
        "execute_timeout_ms",
        "om_file",
        "pipeline_depth",
        "pipline_depth",
    ]


def test_the_largest_c_int_is_accepted() -> None:
    config = config_with(om_file="m.om", execute_timeout_ms="2147483647", device_ids="2147483647")
    params = ModelParameters.from_config(config_view(config))
    assert (params.execute_timeout_ms, params.device_ids) == (2**31 - 1, (2**31 - 1,))


@pytest.mark.parametrize(
    ("name", "described"),
    [
        ("pipeline_dept", "'pipeline_dept' (did you mean 'pipeline_depth'?)"),
        ("execute_timeout", "'execute_timeout' (did you mean 'execute_timeout_ms'?)"),
        ("EXECUTION_ENV_PAT", "'EXECUTION_ENV_PAT' (did you mean 'EXECUTION_ENV_PATH'?)"),
        ("colour", "'colour'"),
    ],
)
def test_unknown_parameters_name_the_one_they_nearly_spell(name: str, described: str) -> None:
    assert describe_unknown_parameter(name) == described


@pytest.mark.parametrize(
    ("name", "index"), [("resnet_0_0", 0), ("resnet_0_3", 3), ("my_model_1_12", 12)]
)
def test_instance_index_is_the_last_number_of_the_instance_name(name: str, index: int) -> None:
    assert instance_index(name) == index


def test_instance_index_rejects_names_without_an_index() -> None:
    with pytest.raises(ValueError, match="model_instance_name 'resnet'"):
        instance_index("resnet")


def test_instances_round_robin_over_device_ids() -> None:
    params = ModelParameters.from_config(
        config_view(config_with(om_file="m.om", device_ids="0, 1,3"))
    )
    devices = [params.device_for_instance(f"m_0_{k}") for k in range(5)]
    assert devices == [0, 1, 3, 0, 1]
    assert ModelParameters("m.om").device_for_instance("m_0_7") == 0


@pytest.mark.usefixtures("clean_acl")  # a Session keeps the emulator initialised
def test_validate_applies_the_same_rules(tmp_path: Path, om_static: Path) -> None:
    repo = tmp_path / "models"
    result = scaffold(om_static, repo, runtime="emulator", name="mlp")
    config = result.config
    config.parameters["device_ids"].string_value = "0,,1"
    config.parameters["pipline_depth"].string_value = "2"
    write_model_config(config, result.config_path)
    [report] = validate_repository(repo)
    assert report.problems == [MESSAGES["device_ids"] + "'0,,1'"]
    assert (
        "parameters not used by ge-python-backend: 'pipline_depth' (did you mean "
        "'pipeline_depth'?)" in report.notes
    )
    config.parameters["device_ids"].string_value = "0"
    write_model_config(config, result.config_path)
    [report] = validate_repository(repo)
    assert report.ok
    (result.om_path.parent / "mlp_static.om.sha256").unlink()
    [report] = validate_repository(repo)
    assert (
        "version 1: mlp_static.om is loaded without a checksum (no mlp_static.om.sha256 and no "
        "om_sha256 parameter)"
    ) in report.notes


@pytest.mark.usefixtures("clean_acl")
def test_scaffold_refuses_bad_parameters_with_the_same_messages(
    tmp_path: Path, om_static: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "models"
    with pytest.raises(ConfigError, match=re.escape(MESSAGES["pipeline_depth"] + "3")):
        scaffold(om_static, repo, runtime="emulator", pipeline_depth=3)
    with pytest.raises(ConfigError, match=re.escape(MESSAGES["acl_runtime"] + "'cuda'")):
        scaffold(om_static, repo, runtime="cuda")
    code = main(["scaffold", str(om_static), "-r", str(repo), "--device-ids", "0,,1"])
    assert code == 2
    assert MESSAGES["device_ids"] + "'0,,1'" in capsys.readouterr().err
    assert not repo.exists() or not any(repo.iterdir())


def test_depth_2_pipelines_executions_of_a_millisecond_unless_told_otherwise() -> None:
    assert ModelParameters("m.om").pipeline_min_device_s == 0.001
    assert ModelParameters("m.om", pipeline_min_device_us=0).pipeline_min_device_s == 0.0
    assert ModelParameters("m.om", pipeline_min_device_us="2500").pipeline_min_device_s == 0.0025


def test_one_execution_in_16_is_timed_with_events_unless_told_otherwise() -> None:
    assert ModelParameters("m.om").effective_device_timing_period == DEVICE_TIMING_PERIOD == 16
    assert ModelParameters("m.om", device_timing_period="1").effective_device_timing_period == 1


def test_scaffold_writes_pipeline_min_device_us_only_when_given(
    om_dynamic_batch: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "models"
    scaffold(om_dynamic_batch, repo, name="default", runtime="emulator", warmup=False)
    code = main(
        ["scaffold", str(om_dynamic_batch), "-r", str(repo), "--name", "given"]
        + ["--runtime", "emulator", "--pipeline-min-device-us", "250", "--no-warmup"]
    )
    assert code == 0, capsys.readouterr().err
    default = load_model_config(repo / "default" / "config.pbtxt")
    given = load_model_config(repo / "given" / "config.pbtxt")
    assert "pipeline_min_device_us" not in default.parameters
    assert given.parameters["pipeline_min_device_us"].string_value == "250"
    assert ModelParameters.from_config(config_view(given)).pipeline_min_device_s == 0.00025
    code = main(
        ["scaffold", str(om_dynamic_batch), "-r", str(repo), "--name", "bad"]
        + ["--runtime", "emulator", "--pipeline-min-device-us", "-1"]
    )
    assert code == 2
    assert "pipeline_min_device_us must be 0..2147483647 microseconds" in (capsys.readouterr().err)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"image_input": "image"}, ImageInput("image", "stretch", (16, 128, 128), 4 << 20)),
        (
            {
                "image_input": "img",
                "image_resize": "letterbox",
                "image_fill": "114",
                "max_jpeg_bytes": "65536",
            },
            ImageInput("img", "letterbox", (114, 128, 128), 65536),
        ),
        ({"image_input": "img", "image_fill": "0, 100,200"}, ImageInput("img", fill=(0, 100, 200))),
    ],
)
def test_image_parameters_make_the_image_input(given: dict[str, str], expected: object) -> None:
    params = ModelParameters.from_config(config_view(config_with(**given)))
    assert params.image == expected
    config = ModelConfig()
    params.to_config(config)
    assert ModelParameters.from_config(config_view(config)) == params  # the round trip
    assert ModelParameters().image is None


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"image_input": " image"}, "parameter image_input must name"),
        ({"image_input": "i", "image_resize": "crop"}, "must be one of stretch, letterbox"),
        ({"image_input": "i", "image_fill": "1,2"}, "Y,U,V bytes 0..255"),
        ({"image_input": "i", "image_fill": "0,0,256"}, "Y,U,V bytes 0..255"),
        ({"image_input": "i", "max_jpeg_bytes": "0"}, "max_jpeg_bytes must be 1..2147483647"),
        ({"image_resize": "letterbox"}, "image_resize need image_input"),
    ],
)
def test_image_parameters_are_checked(given: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ModelParameters.from_config(config_view(config_with(**given)))
