"""`ge-python-model migrate`: classification, pre-flight, ATC plans, the dry-run script and one
migration of a small repository on the emulator."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_models
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import PRECISION_LADDER, PrecisionMode
from ge_python_backend.cli import main
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.errors import UserError
from ge_python_backend.repository.versions import read_checksum
from ge_python_backend.runtime.checksum import file_sha256
from ge_python_backend.tools.migrate.atc import parse_gears, plan_atc
from ge_python_backend.tools.migrate.preflight import preflight
from ge_python_backend.tools.migrate.report import dry_run_script
from ge_python_backend.tools.migrate.runner import MigrateOptions, migrate
from ge_python_backend.tools.migrate.source import SourceFormat, discover, gpu_imports, model_dirs

CLASSIFIER_CONFIG = """
name: "classifier"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [8] }, { name: "z" data_type: TYPE_FP32 dims: [1] }]
dynamic_batching { preferred_batch_size: [2, 4] }
instance_group [{ kind: KIND_GPU count: 1 gpus: [0, 1] }]
"""
PYTHON_CONFIG = """
name: "pre"
backend: "python"
max_batch_size: 8
input [{ name: "raw" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "x" data_type: TYPE_FP32 dims: [16] }]
instance_group [{ kind: KIND_GPU }]
"""
ENSEMBLE_CONFIG = """
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [{ name: "raw" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [8] }]
ensemble_scheduling { step [
  { model_name: "pre" model_version: -1 input_map { key: "raw" value: "raw" }
    output_map { key: "x" value: "x" } },
  { model_name: "classifier" model_version: -1 input_map { key: "x" value: "x" }
    output_map { key: "y" value: "y" } } ] }
"""
PLAN_CONFIG = """
name: "detector"
platform: "tensorrt_plan"
max_batch_size: 4
"""
GPU_MODEL_PY = """\
import numpy as np
import cupy
from torch import cuda

class TritonPythonModel:
    def execute(self, requests):
        return []
"""


def _config(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


def _model(repo: Path, name: str, config: str | None, files: dict[str, bytes | None]) -> Path:
    model_dir = repo / name
    model_dir.mkdir(parents=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config)
    for relative, data in files.items():
        path = model_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            path.mkdir()
        else:
            path.write_bytes(data)
    return model_dir


def _gpu_repository(root: Path) -> Path:
    """A repository as a GPU team has it: an ONNX classifier (dynamic batching, two versions), a
    Python model, an ensemble over both, a TensorRT plan."""
    repo = root / "src"
    classifier = _model(repo, "classifier", CLASSIFIER_CONFIG, {})
    for version in (1, 2):
        (classifier / str(version)).mkdir()
        onnx_models.build_mlp(classifier / str(version) / "model.onnx")
    _model(repo, "pre", PYTHON_CONFIG, {"1/model.py": GPU_MODEL_PY.encode()})
    _model(repo, "pipeline", ENSEMBLE_CONFIG, {"1/.keep": b""})
    _model(repo, "detector", PLAN_CONFIG, {"1/model.plan": b"not really a plan"})
    return repo


def _snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): file_sha256(p) for p in root.rglob("*") if p.is_file()}


# ----------------------------------------------------------------------------- classification


def test_models_are_classified_by_platform_backend_and_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _model(repo, "by_platform", 'platform: "onnxruntime_onnx"', {"1/model.onnx": b""})
    _model(repo, "by_backend", 'backend: "pytorch"', {"1/model.pt": b""})
    _model(repo, "by_file", None, {"1/model.plan": b""})
    _model(repo, "saved", 'backend: "tensorflow"', {"1/model.savedmodel": None})
    _model(repo, "named", "", {"1/net.onnx": b"", "1/x": b""})
    (repo / "named" / "config.pbtxt").write_text('default_model_filename: "net.onnx"')
    _model(repo, "pre", 'backend: "python"', {"1/model.py": b"import numpy\n"})
    _model(repo, "ens", 'platform: "ensemble"', {})
    _model(repo, "other", 'backend: "openvino"', {"1/model.xml": b""})
    _model(repo, "broken", "not a config {", {})
    models = {m.name: m for m in discover(repo)}
    assert {name: m.format for name, m in models.items()} == {
        "broken": SourceFormat.UNKNOWN,
        "by_backend": SourceFormat.TORCHSCRIPT,
        "by_file": SourceFormat.TENSORRT,
        "by_platform": SourceFormat.ONNX,
        "ens": SourceFormat.ENSEMBLE,
        "named": SourceFormat.ONNX,
        "other": SourceFormat.UNKNOWN,
        "pre": SourceFormat.PYTHON,
        "saved": SourceFormat.SAVEDMODEL,
    }
    assert models["broken"].error and "not a valid Triton model config" in models["broken"].error
    assert models["by_file"].warnings[0].startswith("no config.pbtxt")
    assert models["named"].versions[0].model_file == repo / "named" / "1" / "net.onnx"
    assert models["saved"].versions[0].sha256 is not None  # a directory's digest
    assert models["pre"].warnings == ()


def test_python_model_gpu_warnings(tmp_path: Path) -> None:
    _model(tmp_path / "repo", "pre", PYTHON_CONFIG, {"1/model.py": GPU_MODEL_PY.encode()})
    (model,) = discover(tmp_path / "repo")
    assert any("KIND_GPU" in warning for warning in model.warnings)
    assert any("cupy, torch.cuda" in warning for warning in model.warnings)


def test_gpu_imports_are_read_with_ast() -> None:
    text = "import tensorrt as trt\nimport torch\nx = torch.cuda.is_available()\n"
    assert gpu_imports(text) == ["tensorrt", "torch.cuda"]
    assert gpu_imports("import torch\nimport numpy as np\n# import cupy\ns = 'cupy'\n") == []
    assert gpu_imports("from pycuda import autoinit\n") == ["pycuda"]


# ----------------------------------------------------------------------------- pre-flight


def _graph(path: Path, opsets: list[tuple[str, int]], op_domain: str = "") -> onnx.ModelProto:
    node = helper.make_node("Relu", ["x"], ["y"], domain=op_domain)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    return model


BATCHED = _config('max_batch_size: 4 input [{ name: "x" data_type: TYPE_FP32 dims: [16] }]')


def test_preflight_passes_a_model_atc_takes(tmp_path: Path) -> None:
    proto = onnx.load(str(onnx_models.build_mlp(tmp_path / "m.onnx")))
    assert preflight("m", proto, BATCHED) == []


def test_preflight_opset_outside_atc_range(tmp_path: Path) -> None:
    (problem,) = preflight("m", _graph(tmp_path, [("", 21)]), BATCHED)
    assert "model 'm'" in problem and "opset 21" in problem and "8 to 18" in problem


def test_preflight_two_versions_of_a_domain(tmp_path: Path) -> None:
    (problem,) = preflight("m", _graph(tmp_path, [("", 13), ("ai.onnx", 17)]), BATCHED)
    assert "2 versions (13, 17)" in problem and "one version per domain" in problem


def test_preflight_custom_domain(tmp_path: Path) -> None:
    proto = _graph(tmp_path, [("", 17), ("com.acme", 1)], op_domain="com.acme")
    (problem,) = preflight("m", proto, BATCHED)
    assert "Relu of custom domain 'com.acme'" in problem and "no ATC parser" in problem


def test_emulator_compile_refuses_what_migrate_refuses_with_its_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    quantized = onnx_models.build_quantized_lstm(tmp_path / "lstm.onnx")
    config = _config('input [{ name: "x" data_type: TYPE_FP32 dims: [5, 1, 4] }]')
    (problem,) = preflight("lstm", onnx.load(str(quantized)), config)
    reason = problem.removeprefix("model 'lstm': ")
    assert reason.startswith("operators DynamicQuantizeLSTM of custom domain 'com.microsoft'")
    command = ["emulator", "compile", "--model", str(quantized), "--framework", "5"]
    assert main([*command, "--output", str(tmp_path / "lstm")]) == 2
    captured = capsys.readouterr()
    assert f"--model {quantized}: {reason}" in captured.err
    assert "atc " not in captured.out and not (tmp_path / "lstm.om").exists()
    onnx.save(_graph(tmp_path, [("", 21)]), str(tmp_path / "new.onnx"))
    with pytest.raises(UserError, match="opset 21 is outside what ATC parses"):
        compile_onnx(tmp_path / "new.onnx", tmp_path / "new")


def test_preflight_axis_the_config_cannot_gear(tmp_path: Path) -> None:
    proto = onnx.load(str(onnx_models.build_dims_model(tmp_path / "d.onnx")))
    config = _config("max_batch_size: 4")
    problems = preflight("bert", proto, config)
    assert problems == [
        f"model 'bert', input {name!r}: axis 1 ('S') is -1 and is not the batch axis; give its "
        "sizes with --gears bert/S:SIZE,SIZE,..."
        for name in ("input_ids", "attention_mask")
    ]
    assert preflight("bert", proto, config, parse_gears(["S:8,16"])) == []
    assert preflight("bert", proto, config, parse_gears(["other/S:8,16"])) != []
    # without a batch axis, axis 0 needs a gear (or config dims) too
    static = _config('input [{ name: "input_ids" dims: [1, 8] }]')
    problems = preflight("bert", proto, static, parse_gears(["S:8,16"]))
    assert (
        len(problems) == 1 and "'attention_mask'" in problems[0] and "axis 0 ('N')" in problems[0]
    )


def test_preflight_gear_by_input_name(tmp_path: Path) -> None:
    """An input with one axis without a size is a name for that axis: its symbol's, shared by
    every input with it, or INPUT.AXIS when the axis has no symbol."""
    proto = onnx.load(str(onnx_models.build_dims_model(tmp_path / "d.onnx")))
    config = _config("max_batch_size: 4")
    assert preflight("bert", proto, config, parse_gears(["input_ids:8,16"])) == []
    by_input = plan_atc(
        "bert",
        tmp_path / "d.onnx",
        proto,
        config,
        tmp_path / "a",
        gears=parse_gears(["input_ids:8,16"]),
    )
    by_symbol = plan_atc(
        "bert", tmp_path / "d.onnx", proto, config, tmp_path / "a", gears=parse_gears(["S:8,16"])
    )
    assert by_input.dynamic_dims == by_symbol.dynamic_dims
    assert by_input.input_shape == by_symbol.input_shape
    node = helper.make_node("Relu", ["x"], ["y"])
    unnamed = helper.make_model(
        helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", None])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", None])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    (problem,) = preflight("m", unnamed, config)
    assert "axis 1 is -1" in problem and "--gears m/x.1:SIZE" in problem
    assert preflight("m", unnamed, config, parse_gears(["x:8,16"])) == []


def test_preflight_gear_naming_an_input_with_two_open_axes(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["image"], ["y"])
    proto = helper.make_model(
        helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    (problem,) = preflight("det", proto, _config("max_batch_size: 2"), parse_gears(["image:8"]))
    assert problem == (
        "model 'det', input 'image': --gears image:8 names this input, which has 2 axes without "
        "a size (axis 2 ('H'), axis 3 ('W')); name each axis instead: --gears det/H:SIZE,SIZE,... "
        "or --gears det/W:SIZE,SIZE,..."
    )


def test_gears_of_two_axes_in_pairs_compile_only_those_pairs(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["image"], ["y"])
    path = tmp_path / "det.onnx"
    onnx.save(
        helper.make_model(
            helper.make_graph(
                [node],
                "g",
                [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, "H", "W"])],
            ),
            opset_imports=[helper.make_opsetid("", 17)],
        ),
        str(path),
    )
    config = _config("max_batch_size: 2")
    paired = parse_gears(["det/H,W:96x320,160x640"])
    assert [str(request) for request in paired] == ["det/H,W:96x320,160x640"] * 2
    assert [(r.name, r.sizes) for r in paired] == [("H", (96, 160)), ("W", (320, 640))]
    plan = plan_atc("det", path, onnx.load(str(path)), config, tmp_path / "det", gears=paired)
    # the batch sizes times the two pairs, not every height with every width
    assert plan.dynamic_dims == "1,96,320;1,160,640;2,96,320;2,160,640"
    every = parse_gears(["det/H:96,160", "det/W:320,640"])
    plan = plan_atc("det", path, onnx.load(str(path)), config, tmp_path / "det", gears=every)
    assert plan.dynamic_dims is not None and len(plan.dynamic_dims.split(";")) == 8
    for bad in ("H,W:96x320,160", "H,W:96x320x1", "H,H:1x2", "H,W:96x320,96x320"):
        with pytest.raises(UserError, match="--gears"):
            parse_gears([bad])


SIMPLE_STRING_CONFIG = """
name: "simple_string"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_STRING dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_STRING dims: [16] }]
"""


def _simple_string(path: Path) -> Path:
    """Triton's `simple_string`, as ONNX: STRING [N, 16] in and out (Identity)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        "simple_string",
        [helper.make_tensor_value_info("INPUT0", TensorProto.STRING, ["N", 16])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, ["N", 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def test_preflight_refuses_string_tensors(tmp_path: Path) -> None:
    proto = onnx.load(str(_simple_string(tmp_path / "s.onnx")))
    problems = preflight("simple_string", proto, _config(SIMPLE_STRING_CONFIG))
    advice = (
        "a string tensor, and ATC compiles no string tensors; keep the model as a Python model, "
        "or move the strings out of the graph"
    )
    assert [p.split(": ", 2)[1] for p in problems] == [
        "input 'INPUT0' is STRING in the ONNX graph",
        "output 'OUTPUT0' is STRING in the ONNX graph",
    ]  # each tensor once, though the config names it too
    assert all(advice in problem for problem in problems)
    # the config alone says so too (a graph that leaves the type out)
    proto.graph.input[0].type.tensor_type.ClearField("elem_type")
    problems = preflight("simple_string", proto, _config(SIMPLE_STRING_CONFIG))
    assert len(problems) == 2 and any(
        p.startswith("model 'simple_string': input 'INPUT0' is TYPE_STRING in config.pbtxt")
        for p in problems
    )


def test_preflight_refuses_types_the_om_cannot_hold(tmp_path: Path) -> None:
    weights = helper.make_tensor("w", TensorProto.COMPLEX64, [1], [1 + 0j])
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        initializer=[weights],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    problems = preflight("m", proto, _config("max_batch_size: 4"))
    assert [p.split(",", 1)[0] for p in problems] == [
        "model 'm': input 'x' is BFLOAT16 in the ONNX graph",
        "model 'm': initializer 'w' is COMPLEX64 in the ONNX graph",
    ]
    assert "ATC and this backend take FLOAT, FLOAT16, INT8" in problems[0]
    assert "cast it to one of those in the graph" in problems[0]


def test_migrate_of_a_string_model_says_why(tmp_path: Path) -> None:
    source = tmp_path / "src"
    _model(source, "simple_string", SIMPLE_STRING_CONFIG, {})
    (source / "simple_string" / "1").mkdir()
    _simple_string(source / "simple_string" / "1" / "model.onnx")
    options = MigrateOptions(
        source, tmp_path / "dst", runtime="emulator", emulator_compiler=compile_onnx
    )
    (model,) = migrate(options).models
    assert model.status == "failed" and len(model.errors) == 2
    assert "version 1: model 'simple_string': input 'INPUT0' is STRING" in model.errors[0]
    assert "ATC compiles no string tensors" in model.errors[0]
    assert not any("no precision mode compiled" in error for error in model.errors)


# ----------------------------------------------------------------------------- ATC flags


def _plan(tmp_path: Path, config: ModelConfig, gears: tuple[str, ...] = (), dims: bool = False):
    build = onnx_models.build_dims_model if dims else onnx_models.build_mlp
    path = build(tmp_path / "m.onnx")
    return plan_atc(
        "m",
        path,
        onnx.load(str(path)),
        config,
        tmp_path / "out" / "model",
        gears=parse_gears(gears),
        soc_version="Ascend910B",
    )


def test_atc_flags_batch_gears(tmp_path: Path) -> None:
    plan = _plan(
        tmp_path, _config("max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 2] }")
    )
    assert plan.argv() == [
        "atc",
        f"--model={tmp_path / 'm.onnx'}",
        "--framework=5",
        f"--output={tmp_path / 'out' / 'model'}",
        "--soc_version=Ascend910B",
        "--input_shape=x:-1,16",
        "--dynamic_batch_size=1,2,4,8",
        "--precision_mode=force_fp16",
    ]
    # without preferred sizes: the powers of two up to max_batch_size
    assert _plan(tmp_path, _config("max_batch_size: 6")).dynamic_batch_size == "1,2,4,6"


def test_atc_flags_single_size_is_static(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _config("max_batch_size: 1"))
    assert (plan.input_shape, plan.dynamic_batch_size, plan.dynamic_dims) == ("x:1,16", None, None)
    assert plan.gears_text == "static"
    unbatched = _plan(tmp_path, _config('input [{ name: "x" dims: [3, 16] }]'))
    assert unbatched.input_shape == "x:3,16" and unbatched.dynamic_batch_size is None


def test_atc_flags_dims_gears(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _config("max_batch_size: 2"), ("S:16,8",), dims=True)
    assert plan.input_shape == "input_ids:-1,-1;attention_mask:-1,-1"
    assert plan.dynamic_dims == "1,8,1,8;1,16,1,16;2,8,2,8;2,16,2,16"
    assert plan.input_format == "ND" and plan.dynamic_batch_size is None
    assert "--dynamic_dims='1,8,1,8;1,16,1,16;2,8,2,8;2,16,2,16'" in plan.command()
    # one combination only: static, the geared axis fixed
    fixed = _plan(tmp_path, _config("max_batch_size: 1"), ("input_ids.1:8", "S:8"), dims=True)
    assert (fixed.input_shape, fixed.dynamic_dims) == ("input_ids:1,8;attention_mask:1,8", None)
    # emulator compile takes the plan as it is
    om = plan.compile_emulator(compile_onnx)
    assert om == tmp_path / "out" / "model.om" and om.is_file()


def test_atc_too_many_gears(tmp_path: Path) -> None:
    sizes = ",".join(str(size) for size in range(1, 52))
    with pytest.raises(UserError, match="102 gears .*at most 100"):
        _plan(tmp_path, _config("max_batch_size: 2"), (f"S:{sizes}",), dims=True)


@pytest.mark.parametrize("spec", ["seq", "seq:", ":8", "seq:0,8", "seq:8,x", "seq:8,8", "/seq:8"])
def test_bad_gears(spec: str) -> None:
    with pytest.raises(UserError, match="--gears"):
        parse_gears([spec])


def test_gears_spec() -> None:
    (request,) = parse_gears(["bert/input_ids.1:128,32"])
    assert (request.model, request.name, request.sizes) == ("bert", "input_ids.1", (32, 128))


# ----------------------------------------------------------------------------- dry run


def test_dry_run_script_runs_atc_per_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _gpu_repository(tmp_path)
    before = _snapshot(source)
    destination = tmp_path / "dst"
    code = main(["migrate", str(source), str(destination), "--dry-run", "--runtime", "pyacl"])
    script, progress = capsys.readouterr()
    assert code == 0 and not destination.exists() and _snapshot(source) == before
    # a line per model on stderr, as it is done; none with --quiet
    lines = progress.splitlines()
    assert lines[0].startswith("model 1 of ") and len(lines) == len(model_dirs(source))
    assert any(": planned" in line for line in lines) and "'detector': needs_onnx" in progress
    assert main(["migrate", str(source), str(destination), "--dry-run", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert script.startswith("#!/usr/bin/env bash\n") and "\nset -euo pipefail\n" in script
    assert "#   provide DIR/detector/1/model.onnx" in script
    options = MigrateOptions(source, destination, dry_run=True)
    plans = [v.plan for m in migrate(options).models for v in m.versions if v.plan]
    assert script == dry_run_script(migrate(options))
    # run it with a fake atc that records its arguments and writes the .om
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "atc"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "with open(os.environ['ATC_LOG'], 'a') as log:\n"
        "    log.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "output = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--output=')][0]\n"
        "open(output + '.om', 'wb').write(b'fake om')\n"
    )
    fake.chmod(0o755)
    (tmp_path / "script.sh").write_text(script)
    log = tmp_path / "atc.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "ATC_LOG": str(log)}
    subprocess.run(["bash", str(tmp_path / "script.sh")], env=env, check=True)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [plan.argv()[1:] for plan in plans] and len(calls) == 2
    for version in (1, 2):
        om = destination / "classifier" / str(version) / "model.om"
        assert read_checksum(om) == file_sha256(om)


# ----------------------------------------------------------------------------- migration


def test_migrate_repository_on_the_emulator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _gpu_repository(tmp_path)
    before = _snapshot(source)
    destination = tmp_path / "dst"
    argv = [
        "migrate",
        str(source),
        str(destination),
        "--runtime",
        "emulator",
        "--jobs",
        "2",
        "--device-ids",
        "0,1",
        "--precision-mode",
        "must_keep_origin_dtype",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "detector" in out and "provide DIR/detector/1/model.onnx" in out
    assert _snapshot(source) == before
    report = json.loads((destination / "migration.json").read_text())
    models = {m["name"]: m for m in report["models"]}
    assert {name: m["status"] for name, m in models.items()} == {
        "classifier": "converted",
        "detector": "needs_onnx",
        "pipeline": "copied",
        "pre": "copied",
    }
    classifier = models["classifier"]
    assert classifier["gears"] == "batch 1,2,4,8"
    assert classifier["precision_mode"] == "must_keep_origin_dtype"
    for entry in classifier["versions"]:
        version_dir = destination / "classifier" / str(entry["version"])
        om = version_dir / "model.om"
        assert entry["om_sha256"] == file_sha256(om) == read_checksum(om)
        assert entry["source_sha256"] == file_sha256(
            source / "classifier" / str(entry["version"]) / "model.onnx"
        )
        assert "--dynamic_batch_size=1,2,4,8" in entry["atc_command"]
        assert (version_dir / "model.py").is_file()
    assert (destination / "classifier" / "config.pbtxt").is_file()
    assert (destination / "pre" / "1" / "model.py").read_text() == GPU_MODEL_PY
    assert (destination / "pipeline" / "config.pbtxt").read_text() == ENSEMBLE_CONFIG
    assert not (destination / "detector").exists()
    assert models["detector"]["provide"] == ["DIR/detector/1/model.onnx"]
    assert any("cupy" in warning for warning in models["pre"]["warnings"])
    for entry in classifier["accuracy"].values():  # the accuracy gate ran on every version
        assert entry["passed_mode"] == "must_keep_origin_dtype"
    diff = classifier["config_diff"]  # the config rewritten field by field
    assert not diff["refused"] and {"field": "name", "detail": "as written"} in diff["kept"]
    markdown = (destination / "MIGRATION.md").read_text()
    assert (
        "| classifier | onnxruntime_onnx | converted | batch 1,2,4,8 | 1, 2 | "
        "must_keep_origin_dtype | 0 |"
    ) in markdown
    assert not [p for p in destination.iterdir() if p.name.startswith(".")]  # staging removed
    # into the same destination again: refused, nothing touched
    assert main(argv) == 2


def test_migrate_converts_onnx_from_and_reports_failures(tmp_path: Path) -> None:
    source = tmp_path / "src"
    _model(source, "detector", PLAN_CONFIG, {"1/model.plan": b"plan"})
    _model(source, "bert", 'max_batch_size: 4\nplatform: "onnxruntime_onnx"', {})
    (source / "bert" / "1").mkdir()
    onnx_models.build_dims_model(source / "bert" / "1" / "model.onnx")
    exported = tmp_path / "exported" / "detector" / "1"
    exported.mkdir(parents=True)
    onnx_models.build_mlp(exported / "model.onnx")
    options = MigrateOptions(
        source,
        tmp_path / "dst",
        runtime="emulator",
        onnx_from=tmp_path / "exported",
        emulator_compiler=compile_onnx,
    )
    report = migrate(options)
    bert, detector = report.models
    assert detector.status == "converted" and detector.gears == "batch 1,2,4"
    assert bert.status == "failed" and "--gears bert/S:SIZE" in bert.errors[0]
    assert not report.passed and not (tmp_path / "dst" / "bert").exists()
    with pytest.raises(UserError, match="outside the source"):
        migrate(MigrateOptions(source, source / "out", runtime="emulator"))


def _sequence_repository(root: Path) -> Path:
    """A repository with the two-input sequence model: `input_ids`, `attention_mask` [N, S]."""
    source = root / "src"
    _model(source, "bert", 'max_batch_size: 2\nplatform: "onnxruntime_onnx"', {})
    (source / "bert" / "1").mkdir()
    onnx_models.build_dims_model(source / "bert" / "1" / "model.onnx")
    return source


def test_migrate_gears_by_input_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _sequence_repository(tmp_path)
    destination = tmp_path / "dst"
    argv = ["migrate", str(source), str(destination), "--runtime", "emulator"]
    assert main([*argv, "--gears", "input_ids:16,8"]) == 0
    report = json.loads((destination / "migration.json").read_text())
    (bert,) = report["models"]
    assert bert["status"] == "converted"
    # input_ids names its axis S, which attention_mask shares: one size for both
    assert bert["gears"] == "dims 1,8,1,8;1,16,1,16;2,8,2,8;2,16,2,16"
    assert (destination / "bert" / "1" / "model.om").is_file()
    assert "device budget (Ascend310P3: 64 processes" in capsys.readouterr().out
    # the converted repository is budgeted for the devices it is for: one process here is over
    assert main([*argv, "--gears", "input_ids:16,8", "--processes-per-device", "0"]) == 2
    rerun = tmp_path / "again"
    again = ["migrate", str(source), str(rerun), "--runtime", "emulator", "--gears", "S:8,16"]
    assert main([*again, "--soc-version", "Ascend910B3"]) == 0
    assert "device budget (Ascend910B3" in capsys.readouterr().out


def test_migrate_gears_naming_no_axis_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _sequence_repository(tmp_path)
    _model(source, "pre", PYTHON_CONFIG, {"1/model.py": GPU_MODEL_PY.encode()})
    destination = tmp_path / "dst"
    argv = ["migrate", str(source), str(destination), "--runtime", "emulator"]
    assert main([*argv, "--gears", "nosuch:8"]) == 2
    message = capsys.readouterr().err
    assert "--gears nosuch:8 names no axis that needs sizes" in message
    assert "bert: S (input_ids.1, attention_mask.1)" in message
    assert "bert: attention_mask, bert: input_ids" in message  # the inputs that could be named
    assert not destination.exists()  # refused before anything is written
    # a model prefix limits the names to that model's axes
    assert main([*argv, "--gears", "pre/S:8"]) == 2
    assert "--gears pre/S:8 names no axis" in capsys.readouterr().err


def test_migrate_pyacl_needs_atc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="ATC, which is not on PATH"):
        migrate(MigrateOptions(_gpu_repository(tmp_path), tmp_path / "dst"))


def test_atc_failing_at_every_precision_mode_fails_the_model_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _gpu_repository(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "atc"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "mode = [a for a in sys.argv if a.startswith('--precision_mode=')][0]\n"
        "print('ATC run start'); print('E19010: no parser for op Foo (' + mode + ')')\n"
        "sys.exit(1)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    report = migrate(MigrateOptions(source, tmp_path / "dst", runtime="pyacl"))
    models = {model.name: model for model in report.models}
    classifier = models["classifier"]
    assert classifier.status == "failed" and not report.passed
    assert "no precision mode compiled" in classifier.errors[0]
    # every rung of the ladder was tried, each compile error recorded
    attempts = classifier.accuracy["1"]["attempts"]
    assert [a["precision_mode"] for a in attempts] == [m.value for m in PRECISION_LADDER]
    assert all(not a["passed"] and "E19010" in a["compile_error"] for a in attempts)
    assert classifier.atc_log_tail is not None
    assert (
        "E19010" in classifier.atc_log_tail and "must_keep_origin_dtype" in classifier.atc_log_tail
    )
    assert models["pre"].status == "copied"  # the others carry on
    assert not (tmp_path / "dst" / "classifier").exists()


def test_preflight_refuses_config_dims_the_graph_contradicts(tmp_path: Path) -> None:
    node = helper.make_node("Relu", ["image"], ["y"])
    proto = helper.make_model(
        helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, 32, 32])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 32, 32])],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    wrong = _config(
        'max_batch_size: 2 input [{ name: "image" dims: [3, 64, 64] }] '
        'output [{ name: "y" dims: [3, 32] }]'
    )
    assert preflight("det", proto, wrong) == [
        "model 'det', input 'image': the config's dims [3, 64, 64] ([-1, 3, 64, 64] with the "
        "batch axis) contradict the graph's [-1, 3, 32, 32] (-1: any size)",
        "model 'det', output 'y': the config's dims [3, 32] ([-1, 3, 32] with the batch axis) "
        "contradict the graph's [2, 3, 32, 32] (-1: any size)",
    ]
    right = _config(
        'max_batch_size: 2 input [{ name: "image" dims: [3, -1, 32] }] '
        'output [{ name: "y" dims: [3, 32, 32] }]'
    )
    assert preflight("det", proto, right) == []


def test_an_island_without_overflow_is_found_by_bisection(tmp_path: Path) -> None:
    """(x + 1000) - 1000 loses x's digits in float16 without leaving its range: no operator
    overflows, so the bisection finds the two that must stay in FP32."""
    shift = numpy_helper.from_array(np.array([1000.0], np.float32), "shift")
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["x", "shift"], ["up"], name="add_shift"),
            helper.make_node("Sub", ["up", "shift"], ["y"], name="sub_shift"),
        ],
        "digits",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])],
        [shift],
    )
    source = tmp_path / "src"
    _model(source, "digits", 'max_batch_size: 4\nplatform: "onnxruntime_onnx"', {})
    (source / "digits" / "1").mkdir()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(source / "digits" / "1" / "model.onnx"))
    options = MigrateOptions(
        source, tmp_path / "dst", runtime="emulator", emulator_compiler=compile_onnx
    )
    (result,) = migrate(options).models
    assert result.status == "converted" and result.precision_mode == PrecisionMode.FORCE_FP16
    assert result.fp32_operators == ["add_shift", "sub_shift"]
    keep_file = tmp_path / "dst" / "digits" / "1" / "keep_dtype.cfg"
    assert keep_file.read_text() == "add_shift\nsub_shift\n"
    assert f"--keep_dtype={keep_file}" in result.versions[0].plan.command()
