"""config.pbtxt building/parsing, scaffold, validate and the CLI's handling of user mistakes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from ge_python_backend.ascend import GearKind, malloc_reserved
from ge_python_backend.cli import main
from ge_python_backend.errors import UserError
from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.repository.config import (
    ConfigError,
    build_model_config,
    check_model_name,
    config_text,
    config_view,
    load_model_config,
    write_model_config,
)
from ge_python_backend.repository.model_files import model_template
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.scaffold import (
    ScaffoldResult,
    parse_tensor_declaration,
    scaffold,
)
from ge_python_backend.repository.triton_config import compare_config_with_session
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.runtime.describe import describe_om


@pytest.fixture(autouse=True)
def _emulator_left_uninitialised() -> Iterator[None]:
    """Other test files expect a fresh emulator, but a Session keeps ACL initialised for the
    life of the process (the runtime initialises it again when it needs to)."""
    yield
    from ge_python_backend.emulator import acl

    acl.finalize()  # 100037 when nothing was initialised: fine


BATCH_GEARS = GearInfo(GearKind.BATCH, True, (1, 2, 4, 8), max_batch=8)
IMAGES = TensorSpec.declared("images", "FP32", (-1, 3, 224, 224))
IDS = TensorSpec.declared("ids", "INT64", (-1, 16))
LOGITS = TensorSpec.declared("logits", "FP16", (-1, 1000))
LABELS = TensorSpec.declared("labels", "BYTES", (-1, 1))


def build(**overrides: object) -> model_config_pb2.ModelConfig:
    arguments: dict[str, object] = dict(
        name="resnet",
        inputs=[IMAGES, IDS],
        outputs=[LOGITS, LABELS],
        gears=BATCH_GEARS,
        parameters=ModelParameters("resnet.om", "ab" * 32, (0, 3), "emulator"),
        instances=2,
    )
    arguments.update(overrides)
    return build_model_config(**arguments)  # type: ignore[arg-type]


def test_batched_config_fields() -> None:
    config = build(max_queue_delay_us=250)
    assert config.name == "resnet"
    assert config.backend == "python"
    assert config.max_batch_size == 8
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("images", model_config_pb2.TYPE_FP32, [3, 224, 224]),
        ("ids", model_config_pb2.TYPE_INT64, [16]),
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in config.output] == [
        ("logits", model_config_pb2.TYPE_FP16, [1000]),
        ("labels", model_config_pb2.TYPE_STRING, [1]),
    ]
    assert list(config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    [group] = config.instance_group
    assert (group.kind, group.count) == (model_config_pb2.ModelInstanceGroup.KIND_CPU, 2)
    assert {key: value.string_value for key, value in config.parameters.items()} == {
        "om_file": "resnet.om",
        "om_sha256": "ab" * 32,
        "device_ids": "0,3",
        "acl_runtime": "emulator",
        "pipeline_depth": "2",
        "execute_timeout_ms": "20000",
    }


def test_one_warmup_per_batch_gear() -> None:
    config = build()
    assert [(w.batch_size, w.name) for w in config.model_warmup] == [
        (1, "warmup_batch_1"),
        (2, "warmup_batch_2"),
        (4, "warmup_batch_4"),
        (8, "warmup_batch_8"),
    ]
    for warmup in config.model_warmup:
        images, ids = warmup.inputs["images"], warmup.inputs["ids"]
        assert (list(images.dims), images.data_type) == ([3, 224, 224], model_config_pb2.TYPE_FP32)
        assert images.random_data and not images.zero_data
        assert list(ids.dims) == [16] and ids.zero_data  # integer ids: zeros stay in range
    assert not build(warmup=False).model_warmup


def test_config_round_trips_through_text_format(tmp_path: Path) -> None:
    config = build()
    text = config_text(config)
    assert text_format.Parse(text, model_config_pb2.ModelConfig()) == config
    path = write_model_config(config, tmp_path / "config.pbtxt")
    assert load_model_config(path) == config
    assert 'string_value: "0,3"' in path.read_text()


def test_max_batch_size_override() -> None:
    smaller = build(max_batch_size=4)
    assert smaller.max_batch_size == 4
    assert list(smaller.dynamic_batching.preferred_batch_size) == [1, 2, 4]
    assert [w.batch_size for w in smaller.model_warmup] == [1, 2, 4]
    larger = build(max_batch_size=32)  # the runtime splits 32 rows into gear chunks
    assert larger.max_batch_size == 32
    assert list(larger.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
    with pytest.raises(ConfigError, match=">= 1"):
        build(max_batch_size=0)


def test_unbatched_model_keeps_full_shapes_and_warms_up_once() -> None:
    gears = GearInfo(GearKind.STATIC, False)
    config = build(
        inputs=[TensorSpec.declared("x", "FP32", (2, 16))],
        outputs=[TensorSpec.declared("y", "FP32", (2, 8))],
        gears=gears,
    )
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [2, 16]
    assert not config.HasField("dynamic_batching")
    assert [(w.batch_size, list(w.inputs["x"].dims)) for w in config.model_warmup] == [(1, [2, 16])]
    with pytest.raises(ConfigError, match="needs a batched model"):
        build(gears=gears, max_batch_size=4)


def test_hw_and_dims_warmups_use_the_first_gear() -> None:
    hw = GearInfo(GearKind.HW, True, (1,), hw_gears=((320, 256), (640, 512)), max_batch=1)
    config = build(inputs=[TensorSpec.declared("image", "FP32", (1, 3, -1, -1))], gears=hw)
    assert list(config.input[0].dims) == [3, -1, -1]
    assert [list(w.inputs["image"].dims) for w in config.model_warmup] == [[3, 320, 256]]
    dims = GearInfo(
        GearKind.DIMS, True, (1,), dims_gears=(((1, 8), (1, 8)), ((1, 32), (1, 32))), max_batch=1
    )
    specs = [
        TensorSpec.declared("ids", "INT64", (1, -1)),
        TensorSpec.declared("mask", "INT64", (1, -1)),
    ]
    config = build(inputs=specs, gears=dims)
    [warmup] = config.model_warmup
    assert list(warmup.inputs["ids"].dims) == [8] and list(warmup.inputs["mask"].dims) == [8]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"instances": 0}, "instances"),
        ({"max_queue_delay_us": -5}, "max_queue_delay_us"),
        ({"inputs": [TensorSpec.declared("x", "FLOAT", (-1, 2))]}, "unknown Triton data type"),
        ({"name": "../escape"}, "plain directory name"),
    ],
)
def test_build_refuses_bad_settings(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(**overrides)


@pytest.mark.parametrize(
    "name", ["", "..", ".", ".hidden", "a/b", "a\\b", "/abs", "../up", " pad", "tab\tname"]
)
def test_model_names_that_could_escape_are_refused(name: str) -> None:
    with pytest.raises(ConfigError):
        check_model_name(name)


@pytest.mark.parametrize("name", ["resnet50", "my-model_v2.1", "模型"])
def test_plain_model_names_are_accepted(name: str) -> None:
    assert check_model_name(name) == name


def test_load_model_config_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "config.pbtxt"
    bad.write_text("max_batch_size: [\n")
    with pytest.raises(ConfigError, match=r"config\.pbtxt: not a valid Triton model config"):
        load_model_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_model_config(tmp_path / "missing.pbtxt")


def test_compare_config_with_session() -> None:
    config = build()
    inputs, outputs = [IMAGES, IDS], [LOGITS, LABELS]
    assert compare_config_with_session(config_view(config), inputs, outputs, BATCH_GEARS) == []
    problems = compare_config_with_session(
        config_view(config),
        [
            TensorSpec.declared("images", "FP16", (-1, 3, 224, 224)),
            TensorSpec.declared("mask", "INT64", (-1, 16)),
        ],
        [TensorSpec.declared("logits", "FP16", (-1, 10)), LABELS],
        BATCH_GEARS,
    )
    assert problems == [
        "input 'images': config data_type TYPE_FP32 but the .om has TYPE_FP16",
        "config input 'ids' is not an input of the .om (it has: images, mask)",
        "the .om input 'mask' is missing from the config",
        "output 'logits': config dims [1000] but the .om needs [10]",
    ]
    unbatched = compare_config_with_session(
        config_view(config), inputs, outputs, GearInfo(GearKind.STATIC, False)
    )
    assert unbatched and "no batch axis" in unbatched[0]


def test_compare_accepts_dynamic_axes_and_full_shapes_without_batching() -> None:
    config = build(inputs=[TensorSpec.declared("image", "FP32", (1, 3, -1, -1))], outputs=[LOGITS])
    om_inputs = [TensorSpec.declared("image", "FP32", (1, 3, 224, 224))]
    assert compare_config_with_session(config_view(config), om_inputs, [LOGITS], BATCH_GEARS) == []
    config.max_batch_size = 0
    del config.input[0].dims[:]
    config.input[0].dims.extend([1, 3, 224, 224])
    del config.output[0].dims[:]
    config.output[0].dims.extend([-1, 1000])
    assert compare_config_with_session(config_view(config), om_inputs, [LOGITS], BATCH_GEARS) == []
    config.input[0].dims[0] = 2
    assert compare_config_with_session(config_view(config), om_inputs, [LOGITS], BATCH_GEARS) == [
        "input 'image': config dims [2, 3, 224, 224] but the .om needs [1, 3, 224, 224]"
    ]


# --- scaffold with declared tensors (no Session needed) -------------------------------------


def scaffold_declared(om: Path, repository: Path, **options: Any) -> ScaffoldResult:
    """Scaffold a detector declared with --input/--output (no runtime needed)."""
    return scaffold(
        om,
        repository,
        inputs=["images:FP16:-1,3,64,64"],
        outputs=["boxes:fp16:-1,100,6", "count:TYPE_INT32:-1,1"],
        max_batch_size=4,
        **options,
    )


@pytest.fixture()
def om_file(tmp_path: Path) -> Path:
    path = tmp_path / "detector.om"
    path.write_bytes(b"IMOD" + bytes(range(256)) * 8)  # stands in for a real ATC .om
    return path


def test_scaffold_writes_the_model_directory(tmp_path: Path, om_file: Path) -> None:
    repo = tmp_path / "models"
    result = scaffold_declared(om_file, repo, version=3, device_ids=(1, 2))
    model_dir = repo / "detector"
    assert result.written and result.model_dir == model_dir
    assert sorted(p.relative_to(model_dir).as_posix() for p in model_dir.rglob("*")) == [
        "3",
        "3/detector.om",
        "3/detector.om.sha256",
        "3/model.py",
        "config.pbtxt",
    ]
    assert (model_dir / "3" / "detector.om").read_bytes() == om_file.read_bytes()
    assert (model_dir / "3" / "model.py").read_text() == model_template()
    assert "class TritonPythonModel" in model_template()
    config = load_model_config(model_dir / "config.pbtxt")
    assert config == result.config
    assert config.max_batch_size == 4
    assert [list(t.dims) for t in config.output] == [[100, 6], [1]]
    assert config.output[1].data_type == model_config_pb2.TYPE_INT32
    params = ModelParameters.from_config(config_view(config))
    digest = hashlib.sha256(om_file.read_bytes()).hexdigest()
    assert (model_dir / "3" / "detector.om.sha256").read_text() == f"{digest}  detector.om\n"
    assert params.device_ids == (1, 2)
    assert params.om_file is None and params.om_sha256 is None  # per version, not per model
    assert list(repo.iterdir()) == [model_dir]  # no temporary directories left behind


def test_scaffold_dry_run_writes_nothing(tmp_path: Path, om_file: Path) -> None:
    repo = tmp_path / "models"
    result = scaffold_declared(om_file, repo, dry_run=True)
    assert not result.written
    assert not repo.exists()
    assert text_format.Parse(result.config_text, model_config_pb2.ModelConfig()) == result.config


def test_scaffold_refuses_to_overwrite_unless_asked(tmp_path: Path, om_file: Path) -> None:
    repo = tmp_path / "models"
    scaffold_declared(om_file, repo)
    marker = repo / "detector" / "keep.txt"
    marker.write_text("user file")
    with pytest.raises(UserError, match="already exists; choose another --version"):
        scaffold_declared(om_file, repo, instances=3)
    with pytest.raises(UserError, match="already exists"):
        scaffold_declared(om_file, repo, dry_run=True)
    assert marker.exists()
    assert load_model_config(repo / "detector" / "config.pbtxt").instance_group[0].count == 1
    scaffold_declared(om_file, repo, instances=3, overwrite=True)
    assert not marker.exists()
    assert load_model_config(repo / "detector" / "config.pbtxt").instance_group[0].count == 3
    assert sorted(p.name for p in repo.iterdir()) == ["detector"]


@pytest.mark.parametrize("name", ["..", "../outside", ".hidden", "a/b", ""])
def test_scaffold_refuses_escaping_names(tmp_path: Path, om_file: Path, name: str) -> None:
    repo = tmp_path / "models"
    with pytest.raises(ConfigError):
        scaffold_declared(om_file, repo, name=name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["detector.om"]


def test_scaffold_declared_static_model(tmp_path: Path, om_file: Path) -> None:
    result = scaffold(
        om_file, tmp_path / "r", inputs=["x:FP32:2,16"], outputs=["y:FP32:2,8"], name="static"
    )
    assert result.config.max_batch_size == 0
    assert list(result.config.input[0].dims) == [2, 16]
    assert [w.batch_size for w in result.config.model_warmup] == [1]


@pytest.mark.parametrize(
    ("inputs", "outputs", "max_batch", "message"),
    [
        (["x:FP32"], ["y:FP32:1"], None, "NAME:TYPE:DIMS"),
        (["x:FP33:1"], ["y:FP32:1"], None, "unknown Triton data type"),
        (["x:FP32:1,a"], ["y:FP32:1"], None, "comma-separated integers"),
        (["x:FP32:0,2"], ["y:FP32:1"], None, "positive or -1"),
        (["x:FP32:1"], [], None, "both --input and --output"),
        (["x:FP32:8,2"], ["y:FP32:-1,2"], 4, "must be -1 or 4"),
    ],
)
def test_scaffold_refuses_bad_declarations(
    tmp_path: Path,
    om_file: Path,
    inputs: list[str],
    outputs: list[str],
    max_batch: int | None,
    message: str,
) -> None:
    with pytest.raises(UserError, match=message):
        scaffold(om_file, tmp_path / "r", inputs=inputs, outputs=outputs, max_batch_size=max_batch)


def test_parse_tensor_declaration() -> None:
    tensor = parse_tensor_declaration("ids:string:-1,4")
    assert (tensor.name, tensor.triton_dtype, tensor.shape) == ("ids", "BYTES", (-1, 4))


def test_vendor_runtime_copies_what_the_stub_imports(tmp_path: Path, om_file: Path) -> None:
    """What the stub imports, and no tools: the exact import closure is checked in
    test_stub_environments.py."""
    result = scaffold_declared(om_file, tmp_path / "r", vendor_runtime=True)
    vendored = result.model_dir / "1" / "_ge_vendor" / "ge_python_backend"
    assert result.vendor_dir == vendored.parent
    for module in (
        "__init__.py",
        "repository/triton_config.py",
        "triton/instance.py",
        "runtime/session.py",
    ):
        assert (vendored / module).is_file(), module
    assert (vendored / "emulator").is_dir()  # needed for acl_runtime emulator
    for tool in ("repository/config.py", "commands", "tools", "server.py", "client.py"):
        assert not (vendored / tool).exists(), tool
    assert not list(vendored.rglob("__pycache__"))
    assert not (vendored / "templates").exists()
    assert "_ge_vendor" in (result.model_dir / "1" / "model.py").read_text()


# --- scaffold, inspect and validate against emulator .om files -------------------------------


def test_scaffold_reads_the_om(tmp_path: Path, om_dynamic_batch: Path, om_hw: Path) -> None:
    repo = tmp_path / "models"
    batch = scaffold(om_dynamic_batch, repo, runtime="emulator", name="mlp")
    assert batch.config.max_batch_size == 8
    assert list(batch.config.dynamic_batching.preferred_batch_size) == [1, 2, 4, 8]
    assert [list(t.dims) for t in batch.config.input] == [[16]]
    assert ModelParameters.from_config(config_view(batch.config)).acl_runtime == "emulator"
    hw = scaffold(om_hw, repo, runtime="emulator", name="conv")
    assert list(hw.config.input[0].dims) == [3, -1, -1]
    assert [list(w.inputs["image"].dims) for w in hw.config.model_warmup] == [[3, 16, 16]]
    reports = validate_repository(repo)
    assert [(r.name, r.ok, r.problems) for r in reports] == [("conv", True, []), ("mlp", True, [])]


def test_validate_finds_problems(tmp_path: Path, om_static: Path) -> None:
    repo = tmp_path / "models"
    result = scaffold(om_static, repo, runtime="emulator", name="mlp")
    om_copy = result.om_path
    om_copy.write_bytes(om_copy.read_bytes() + b"tampered")
    config = result.config
    config.output[0].dims[0] = 99
    write_model_config(config, result.config_path)
    (repo / "mlp" / "2").mkdir()
    [report] = validate_repository(repo, name="mlp")
    assert not report.ok
    assert report.versions == ["1", "2"]
    empty = (
        f"version 2: version directory {repo / 'mlp' / '2'} holds no .om file (it holds: "
        "nothing); put the model's .om there"
    )
    digest = hashlib.sha256(om_static.read_bytes()).hexdigest()
    assert report.problems == [
        f"version 1: mlp_static.om does not have the SHA-256 {digest}",
        "version 2: model.py is missing",
        empty,
    ]
    om_copy.write_bytes(om_static.read_bytes())
    [report] = validate_repository(repo, name="mlp")
    assert report.problems == [
        "version 1: the config does not match mlp_static.om: output 'y': config dims [99] but "
        "the .om needs [8]",
        "version 2: model.py is missing",
        empty,
    ]


def test_validate_notes_when_the_runtime_is_missing(tmp_path: Path, om_file: Path) -> None:
    scaffold_declared(om_file, tmp_path / "r")
    [report] = validate_repository(tmp_path / "r")
    assert report.ok  # files and checksum are fine; the .om could not be opened here
    assert report.notes and "not checked against the .om" in report.notes[0]


def test_inspect_json(om_dims: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(om_dims), "--runtime", "emulator", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert [(t["name"], t["datatype"], t["shape"]) for t in info["inputs"]] == [
        ("input_ids", "INT64", [1, -1]),
        ("attention_mask", "INT64", [1, -1]),
    ]
    assert info["gears"]["kind"] == "dims"
    assert info["gears"]["dims_gears"][0] == [[1, 8], [1, 8]]
    sizes = describe_om(om_dims, "emulator")
    assert info["device_memory"] == {
        "weight_bytes": malloc_reserved(sizes.load.weight),
        "work_bytes_per_load": malloc_reserved(sizes.load.work),
        "buffer_bytes_per_lane": sizes.lane_bytes,
        "weights_shared": True,
        "device_host_streams": 4,  # the device host's default pool
        # its inputs' and outputs' buffers, in the host's I/O areas; a lane keeps its gear input
        "device_host_io_area_bytes": malloc_reserved(sizes.shared_io()[1]),
        "device_host_buffer_bytes_per_lane": sizes.lane_bytes - sizes.shared_io()[0],
    }
    assert 0 < info["device_memory"]["device_host_buffer_bytes_per_lane"] < sizes.lane_bytes
    assert main(["inspect", str(om_dims), "--runtime", "emulator"]) == 0
    table = capsys.readouterr().out
    assert "input_ids       INT64  int64  [1, -1]" in table
    assert "device_host on: the device host's one process opens the device" in table
    assert "its work in the host's 4 shared work spaces (one per stream" in table
    assert "its inputs and outputs in the host's 4 I/O areas (one per stream" in table


# --- CLI: user mistakes are one line on stderr, exit 2 --------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["scaffold", "missing.om", "--repository", "{tmp}/r", "--runtime", "emulator"],
        [
            "scaffold",
            "{om}",
            "-r",
            "{tmp}/r",
            "--name",
            "../x",
            "--input",
            "x:FP32:1",
            "--output",
            "y:FP32:1",
        ],
        ["scaffold", "{om}", "-r", "{tmp}/r", "--input", "x:FP32", "--output", "y:FP32:1"],
        [
            "scaffold",
            "{om}",
            "-r",
            "{tmp}/r",
            "--instances",
            "0",
            "--input",
            "x:FP32:1",
            "--output",
            "y:FP32:1",
        ],
        ["scaffold", "{om}", "-r", "{tmp}/r", "--runtime", "emulator"],
        ["validate", "{tmp}/no-repo"],
        ["validate", "{tmp}", "--name", "../etc"],
        ["inspect", "{tmp}/missing.om"],
        ["infer", "--model", "m", "--shape", "x:1,a"],
        ["infer", "--model", "m", "--input", "x"],
        ["serve", "{tmp}/no-repo"],
    ],
)
def test_cli_user_errors_exit_2_without_traceback(
    argv: list[str], tmp_path: Path, om_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [a.format(tmp=tmp_path, om=om_file) for a in argv]
    assert main(args) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"ge-python-model {args[0]}: error: ")


def test_cli_scaffold_dry_run_prints_config(
    tmp_path: Path, om_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "scaffold",
        str(om_file),
        "-r",
        str(tmp_path / "r"),
        "--dry-run",
        "--device-ids",
        "0,1",
        "--input",
        "x:FP32:-1,4",
        "--output",
        "y:FP32:-1,2",
        "--max-batch-size",
        "4",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "dry run: nothing written" in out
    assert 'string_value: "0,1"' in out
    assert not (tmp_path / "r").exists()


def test_cli_validate_exit_codes(
    tmp_path: Path, om_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scaffold_declared(om_file, tmp_path / "r")
    assert main(["validate", str(tmp_path / "r")]) == 0
    assert "detector: OK (versions: 1)" in capsys.readouterr().out
    (tmp_path / "r" / "detector" / "1" / "model.py").unlink()
    assert main(["validate", str(tmp_path / "r")]) == 1
    assert "problem: version 1: model.py is missing" in capsys.readouterr().out
