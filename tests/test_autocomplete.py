"""Auto-complete without Triton (issue 13): the `.om` read without a device, what the config gets
filled with (never overriding the user), versions added by scaffold, validate and inspect on
model directories without config.pbtxt. The real server runs in test_autocomplete_e2e.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.cli import main
from ge_python_backend.errors import UserError
from ge_python_backend.repository.autocomplete import complete_config, complete_version
from ge_python_backend.repository.config import (
    ConfigError,
    config_from_view,
    config_view,
    load_model_config,
    parse_version_policy,
)
from ge_python_backend.repository.model_files import model_template
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.triton_config import DEFAULT_MAX_QUEUE_DELAY_US, TritonConfig
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.runtime import Session, describe_om

pytestmark = pytest.mark.usefixtures("clean_acl")  # describe_om and Session initialise acl


@pytest.mark.parametrize("fixture", ["om_static", "om_dynamic_batch", "om_hw", "om_dims"])
def test_describe_om_agrees_with_a_loaded_session(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """Same inputs and gears as Session; outputs equal, or -1 where only loading tells (HW and
    dims gears), so a config from the description fits the loaded model."""
    om: Path = request.getfixturevalue(fixture)
    described = describe_om(om, "emulator")
    with Session(om, runtime="emulator") as session:
        assert described.inputs == session.inputs
        assert described.gears == session.gears
        for mine, loaded in zip(described.outputs, session.outputs, strict=True):
            assert (mine.name, mine.triton_dtype) == (loaded.name, loaded.triton_dtype)
            assert len(mine.shape) == len(loaded.shape)
            assert all(a in (-1, b) for a, b in zip(mine.shape, loaded.shape))
            if session.gears.kind in ("static", "batch"):
                assert mine.shape == loaded.shape


def completed(om: Path, text: str = "") -> tuple[ModelConfig, list[str]]:
    config = config_view(text_format.Parse(text, ModelConfig()))
    described = describe_om(om, "emulator")
    done, filled = complete_config(config, described.inputs, described.outputs, described.gears)
    return config_from_view(done), filled


def test_an_empty_config_gets_everything_from_the_om(om_dynamic_batch: Path) -> None:
    config, filled = completed(om_dynamic_batch)
    assert config.max_batch_size == 8
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("x", model_config_pb2.TYPE_FP32, [16])
    ]
    assert [(t.name, list(t.dims)) for t in config.output] == [("y", [8]), ("z", [1])]
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 100
    assert filled[0] == "max_batch_size 8"


def test_a_static_model_gets_its_full_shapes(om_static: Path) -> None:
    """mlp_static is x FLOAT[4,16]: batched with the one gear 4 (axis 0 shared by all)."""
    config, _ = completed(om_static)
    assert config.max_batch_size == 4
    assert list(config.input[0].dims) == [16]
    assert list(config.dynamic_batching.preferred_batch_size) == [4]


def test_what_the_user_wrote_is_kept(om_dynamic_batch: Path) -> None:
    config, filled = completed(
        om_dynamic_batch,
        'max_batch_size: 4 input { name: "x" } '
        "dynamic_batching { max_queue_delay_microseconds: 7 }",
    )
    assert config.max_batch_size == 4
    assert (config.input[0].data_type, list(config.input[0].dims)) == (
        model_config_pb2.TYPE_FP32,
        [16],
    )
    assert "input 'x' TYPE_FP32 [16] (declared without data_type and dims)" in filled
    assert config.dynamic_batching.max_queue_delay_microseconds == 7
    assert not config.dynamic_batching.preferred_batch_size  # the user's batching, untouched
    assert not any(item.startswith(("max_batch_size", "dynamic_batching")) for item in filled)
    # Full .om shapes declared with max_batch_size 0: served without Triton batching.
    full, _ = completed(om_dynamic_batch, 'input { name: "x" data_type: TYPE_FP32 dims: [-1, 16] }')
    assert full.max_batch_size == 0 and not full.HasField("dynamic_batching")
    assert [list(t.dims) for t in full.output] == [[-1, 8], [-1, 1]]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('input { name: "x" data_type: TYPE_FP16 }', "input 'x': config data_type TYPE_FP16 but"),
        ('output { name: "y" dims: [9] }', "output 'y': config dims [9] but the .om needs [8]"),
        ('input { name: "image" }', "config input 'image' is not an input of the .om"),
    ],
)
def test_a_config_that_disagrees_is_an_error_naming_the_field(
    om_dynamic_batch: Path, text: str, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        completed(om_dynamic_batch, text)


def test_complete_version_finds_the_om_and_names_a_bad_directory(
    tmp_path: Path, om_dynamic_batch: Path, om_static: Path
) -> None:
    version = tmp_path / "m" / "1"
    version.mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"holds no \.om file \(it holds: nothing\)"):
        complete_version(TritonConfig(), version, "emulator")
    shutil.copy(om_dynamic_batch, version)
    assert complete_version(TritonConfig(), version, "emulator").om_path.name == "mlp_batch.om"
    shutil.copy(om_static, version)
    with pytest.raises(ConfigError, match=r"holds 2 \.om files \(mlp_batch\.om, mlp_static\.om\)"):
        complete_version(TritonConfig(), version, "emulator")
    config = TritonConfig(parameters={"om_file": "mlp_static.om"})
    assert complete_version(config, version, "emulator").om_path.name == "mlp_static.om"


def test_scaffold_adds_a_version_that_fits_and_refuses_one_that_does_not(
    tmp_path: Path, om_dynamic_batch: Path, om_hw: Path
) -> None:
    repo = tmp_path / "models"
    first = scaffold(om_dynamic_batch, repo, name="m", runtime="emulator")
    before = first.config_path.read_text()
    added = scaffold(om_dynamic_batch, repo, name="m", version=2, runtime="emulator")
    assert added.added_version and added.written
    assert first.config_path.read_text() == before  # the config is kept
    assert (repo / "m" / "2" / "mlp_batch.om.sha256").is_file()
    with pytest.raises(UserError, match="does not fit model 'm'") as caught:
        scaffold(om_hw, repo, name="m", version=3, runtime="emulator")
    assert "config input 'x' is not an input of the .om" in str(caught.value)
    assert not (repo / "m" / "3").exists()
    scaffold(om_dynamic_batch, repo, name="m", version=3, runtime="emulator", version_policy="all")
    assert load_model_config(first.config_path).version_policy.HasField("all")
    assert sorted(p.name for p in (repo / "m").iterdir()) == ["1", "2", "3", "config.pbtxt"]


def test_a_version_added_to_a_zero_config_model_fits_its_auto_completed_config(
    tmp_path: Path, om_dynamic_batch: Path, om_hw: Path
) -> None:
    version = tmp_path / "models" / "z" / "1"
    version.mkdir(parents=True)
    shutil.copy(om_dynamic_batch, version)
    (version / "model.py").write_text(model_template())
    with pytest.raises(UserError, match="its config.pbtxt, as auto-complete makes it"):
        scaffold(om_hw, tmp_path / "models", name="z", version=2, runtime="emulator")
    scaffold(om_dynamic_batch, tmp_path / "models", name="z", version=2, runtime="emulator")
    assert not (tmp_path / "models" / "z" / "config.pbtxt").exists()  # still zero-config
    scaffold(
        om_dynamic_batch,
        tmp_path / "models",
        name="z",
        version=3,
        runtime="emulator",
        version_policy="latest:2",
    )
    written = load_model_config(tmp_path / "models" / "z" / "config.pbtxt")
    assert written == text_format.Parse(
        'backend: "python" version_policy { latest { num_versions: 2 } }', ModelConfig()
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all", "all {\n}\n"),
        ("latest:2", "latest {\n  num_versions: 2\n}\n"),
        ("specific:1,3", "specific {\n  versions: 1\n  versions: 3\n}\n"),
    ],
)
def test_version_policies(text: str, expected: str) -> None:
    assert text_format.MessageToString(parse_version_policy(text)) == expected


@pytest.mark.parametrize("text", ["", "latest", "latest:0", "latest:1,2", "all:1", "specific:"])
def test_bad_version_policies_say_what_is_allowed(text: str) -> None:
    with pytest.raises(ConfigError, match="must be latest:K .*, all, or specific:1,3"):
        parse_version_policy(text)


def test_validate_reports_what_auto_complete_will_fill(
    tmp_path: Path, om_dynamic_batch: Path, om_static: Path
) -> None:
    repo = tmp_path / "models"
    for version in ("1", "2"):
        (repo / "z" / version).mkdir(parents=True)
        (repo / "z" / version / "model.py").write_text(model_template())
    shutil.copy(om_dynamic_batch, repo / "z" / "1")
    [report] = validate_repository(repo, runtime="emulator")
    assert report.problems == [
        f"version 2: version directory {repo / 'z' / '2'} holds no .om file (it holds: "
        "model.py); put the model's .om there"
    ]
    assert report.notes[0] == "no config.pbtxt: Triton's auto-complete builds the config"
    assert (
        "version 1: auto-complete will fill max_batch_size 8; input 'x' TYPE_FP32 [16]; output "
        "'y' TYPE_FP32 [8]; output 'z' TYPE_FP32 [1]; dynamic_batching (preferred_batch_size "
        "[1, 2, 4, 8], max_queue_delay_microseconds 100)"
    ) in report.notes
    shutil.copy(om_static, repo / "z" / "2")
    [report] = validate_repository(repo, runtime="emulator")
    assert report.ok, report.problems


def test_inspect_config_and_template_commands(
    tmp_path: Path, om_dynamic_batch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(om_dynamic_batch), "--runtime", "emulator", "--config"]) == 0
    printed = text_format.Parse(capsys.readouterr().out, ModelConfig())
    expected, _ = completed(om_dynamic_batch, 'name: "mlp_batch" backend: "python"')
    assert printed == expected
    assert main(["template", str(tmp_path)]) == 0
    assert (tmp_path / "model.py").read_text() == model_template()
    (tmp_path / "model.py").write_text("# mine\n")
    assert main(["template", str(tmp_path)]) == 2
    assert "differs from the template; pass --overwrite" in capsys.readouterr().err
    assert main(["template", str(tmp_path), "--overwrite"]) == 0


def test_auto_complete_batches_as_scaffold_does(om_dynamic_batch: Path, tmp_path: Path) -> None:
    """The dynamic batching both write comes from one place, so they agree."""
    scaffolded = load_model_config(
        scaffold(om_dynamic_batch, tmp_path / "models", name="m", runtime="emulator").config_path
    )
    config, _ = completed(om_dynamic_batch)
    assert list(config.dynamic_batching.preferred_batch_size) == list(
        scaffolded.dynamic_batching.preferred_batch_size
    )
    assert (
        config.dynamic_batching.max_queue_delay_microseconds
        == scaffolded.dynamic_batching.max_queue_delay_microseconds
        == DEFAULT_MAX_QUEUE_DELAY_US
    )
