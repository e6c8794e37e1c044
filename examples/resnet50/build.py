"""Build the ResNet-50-style classifier, compile it for the emulator, scaffold it into a repository.

    python examples/resnet50/build.py models
    ge-python-model serve models --emulator

Steps (each command is printed as it runs):
1. write `<workdir>/resnet50.onnx` (random weights, see resnet50_onnx.py);
2. `ge-python-model emulator compile` with batch gears 1,2,4,8,16 (it also prints the `atc`
   command that compiles the same ONNX for real Ascend hardware);
3. `ge-python-model scaffold` the `.om` into `<repository>/<name>/` (replacing an existing one).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from resnet50_onnx import IMAGE_SIZE, INPUT_NAME, build_resnet50

BATCH_GEARS = "1,2,4,8,16"


def cli() -> str:
    """The `ge-python-model` of this interpreter's environment (else the one on PATH)."""
    local = Path(sys.executable).parent / "ge-python-model"
    found = str(local) if local.is_file() else shutil.which("ge-python-model")
    if found is None:
        raise SystemExit("ge-python-model not found: install the project (make setup)")
    return found


def run(*command: str) -> None:
    print("$", shlex.join(command), flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path, help="Triton model repository to write into")
    parser.add_argument("--name", default="resnet50", help="model name (default: resnet50)")
    parser.add_argument(
        "--workdir", type=Path, default=Path("build/resnet50"), help="where the .onnx/.om go"
    )
    parser.add_argument(
        "--width", type=int, default=16, help="stem channels; 64 is the real ResNet-50 (default 16)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random weights seed")
    parser.add_argument("--gears", default=BATCH_GEARS, help=f"batch gears (default {BATCH_GEARS})")
    args = parser.parse_args()

    onnx_path = build_resnet50(args.workdir / f"{args.name}.onnx", args.width, args.seed)
    print(f"wrote {onnx_path} (ResNet-50 topology, width {args.width}, random weights)")
    run(
        cli(),
        "emulator",
        "compile",
        "--model",
        str(onnx_path),
        "--framework",
        "5",
        "--output",
        str(args.workdir / args.name),
        "--input_shape",
        f"{INPUT_NAME}:-1,3,{IMAGE_SIZE},{IMAGE_SIZE}",
        "--dynamic_batch_size",
        args.gears,
        "--soc_version",
        "Ascend310P3",
    )
    run(
        cli(),
        "scaffold",
        str(args.workdir / f"{args.name}.om"),
        "--repository",
        str(args.repository),
        "--name",
        args.name,
        "--runtime",
        "emulator",
        "--overwrite",
    )


if __name__ == "__main__":
    main()
