"""Build version N of a small classifier and add it to the model repository (hot-reload example).

    python examples/hot_reload/build.py models --version 1    # a new model directory
    python examples/hot_reload/build.py models --version 2    # adds 2/ next to 1/

Each version is the same network (`features` FP32 [N,64] -> `scores` FP32 [N,10], two dense
layers) with different random weights (seed = version), compiled with `ge-python-model emulator
compile` (batch gears 1,2,4,8; the `atc` equivalent is printed) and scaffolded with
`ge-python-model scaffold --version N`. The config gets `version_policy` latest with
`num_versions: 1` (Triton's default, written out): Triton serves the highest version present.

Version 1 creates `<repository>/<name>/`. A later version is scaffolded into a staging
repository next to it; its `N/` directory (the `.om` and its `.om.sha256` checksum) is moved
into the model directory in one rename and `config.pbtxt` is replaced in another, so a reader
never sees half a version. (`ge-python-model scaffold NEW.om --repository R --name N --version V`
adds a version in place too.) Nothing changes for the server until someone asks it to
load the model again (`tritonclient`'s `load_model`, or `POST /v2/repository/models/<name>/load`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ge_python_backend.repository.config import load_model_config, write_model_config

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
import example_tools  # noqa: E402

FEATURES, HIDDEN, CLASSES = 64, 32, 10
BATCH_GEARS = "1,2,4,8"
INPUT_NAME, OUTPUT_NAME = "features", "scores"


def build_onnx(path: Path, seed: int) -> Path:
    """`features` FP32 [N,64] -> relu(dense 32) -> dense 10 -> `scores` FP32 [N,10]."""
    rng = np.random.default_rng(seed)
    weights = {
        "w1": rng.normal(0, np.sqrt(2 / FEATURES), (FEATURES, HIDDEN)),
        "b1": rng.normal(0, 0.1, HIDDEN),
        "w2": rng.normal(0, np.sqrt(1 / HIDDEN), (HIDDEN, CLASSES)),
        "b2": rng.normal(0, 0.1, CLASSES),
    }
    nodes = [
        helper.make_node("MatMul", [INPUT_NAME, "w1"], ["h0"]),
        helper.make_node("Add", ["h0", "b1"], ["h1"]),
        helper.make_node("Relu", ["h1"], ["h2"]),
        helper.make_node("MatMul", ["h2", "w2"], ["s0"]),
        helper.make_node("Add", ["s0", "b2"], [OUTPUT_NAME]),
    ]
    graph = helper.make_graph(
        nodes,
        f"tiny_classifier_seed{seed}",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, ["N", FEATURES])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, ["N", CLASSES])],
        [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime accepts for opset 17
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


def scaffold(om: Path, repository: Path, name: str, version: int, runtime: str) -> None:
    example_tools.scaffold(om, repository, name, version=version, runtime=runtime)
    config_path = repository / name / "config.pbtxt"
    config = load_model_config(config_path)
    config.version_policy.latest.num_versions = 1
    write_model_config(config, config_path)


def add_version(om: Path, repository: Path, name: str, version: int, runtime: str) -> None:
    """Put version `version` next to the existing ones and switch the config to its `.om`."""
    model_dir = repository / name
    if (model_dir / str(version)).exists():
        raise SystemExit(f"{model_dir / str(version)} already exists")
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-v{version}-", dir=repository.parent))
    try:
        scaffold(om, staging, name, version, runtime)
        (staging / name / str(version)).rename(model_dir / str(version))
        new_config = model_dir / f".config.pbtxt.v{version}"
        shutil.copyfile(staging / name / "config.pbtxt", new_config)
        os.replace(new_config, model_dir / "config.pbtxt")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    versions = sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit())
    print(f"{model_dir}: versions {versions}; config.pbtxt now serves version {version}")


def compile_version(workdir: Path, name: str, version: int) -> Path:
    """Build version `version`'s ONNX and compile it for the emulator; the `.om` path."""
    onnx_path = build_onnx(workdir / f"{name}.onnx", seed=version)
    print(f"wrote {onnx_path} (version {version}: random weights, seed {version})")
    return example_tools.compile_om(
        onnx_path,
        workdir / name,
        input_shape=f"{INPUT_NAME}:-1,{FEATURES}",
        dynamic_batch_size=BATCH_GEARS,
        input_format="ND",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path, help="Triton model repository")
    parser.add_argument("--version", type=int, default=1, help="version to build (default 1)")
    parser.add_argument("--name", default="tiny_classifier", help="model name")
    parser.add_argument(
        "--workdir", type=Path, default=Path("build/hot_reload"), help="where the .onnx/.om go"
    )
    parser.add_argument(
        "--om", type=Path, help="use this .om (e.g. from ATC) instead of building and compiling one"
    )
    parser.add_argument(
        "--runtime",
        choices=("emulator", "pyacl"),
        default="emulator",
        help="runtime written into the config (pyacl for a real .om on an Ascend host)",
    )
    args = parser.parse_args()
    if args.version < 1:
        raise SystemExit("--version must be >= 1")
    om = args.om or compile_version(args.workdir / f"v{args.version}", args.name, args.version)
    args.repository.mkdir(parents=True, exist_ok=True)
    if (args.repository / args.name).exists() and args.version > 1:
        add_version(om, args.repository, args.name, args.version, args.runtime)
    else:
        scaffold(om, args.repository, args.name, args.version, args.runtime)


if __name__ == "__main__":
    main()
