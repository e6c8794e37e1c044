"""Build the BERT-style encoder, compile it with sequence-length gears and scaffold it.

    python examples/bert_base/build.py models
    ge-python-model serve models --emulator

Steps (each command is printed as it runs):
1. write `<workdir>/bert_base.onnx` (random weights, see bert_onnx.py);
2. `ge-python-model emulator compile` with `--input_shape` giving every input [1,-1] and
   `--dynamic_dims` gears 32, 64 and 128 on the sequence axis (one value per -1 dim, inputs in
   order: "32,32,32;64,64,64;128,128,128"), `--input_format ND` as ATC needs for dims gears; it
   also prints the `atc` command for real Ascend hardware;
3. `ge-python-model scaffold` the `.om` into `<repository>/<name>/` (replacing an existing one).
   Every tensor has axis 0 = 1, so the config gets `max_batch_size: 1` and dims [-1] on the
   sequence axis; a request must have one of the gear lengths (the client pads to one).
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from bert_onnx import INPUT_NAMES, build_bert

SEQUENCE_GEARS = (32, 64, 128)


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


def dims_flags(gears: list[int]) -> tuple[str, str]:
    """`--input_shape` and `--dynamic_dims` values: one -1 (the sequence) per input."""
    input_shape = ";".join(f"{name}:1,-1" for name in INPUT_NAMES)
    dynamic_dims = ";".join(",".join([str(length)] * len(INPUT_NAMES)) for length in gears)
    return input_shape, dynamic_dims


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repository", type=Path, help="Triton model repository to write into")
    parser.add_argument("--name", default="bert_base", help="model name (default: bert_base)")
    parser.add_argument(
        "--workdir", type=Path, default=Path("build/bert_base"), help="where the .onnx/.om go"
    )
    parser.add_argument("--hidden", type=int, default=128, help="hidden size (BERT-base: 768)")
    parser.add_argument("--layers", type=int, default=2, help="encoder layers (BERT-base: 12)")
    parser.add_argument("--heads", type=int, default=4, help="attention heads (BERT-base: 12)")
    parser.add_argument("--seed", type=int, default=0, help="random weights seed")
    parser.add_argument(
        "--gears",
        default=",".join(map(str, SEQUENCE_GEARS)),
        help="sequence-length gears (default 32,64,128)",
    )
    args = parser.parse_args()

    onnx_path = build_bert(
        args.workdir / f"{args.name}.onnx", args.hidden, args.layers, args.heads, args.seed
    )
    print(
        f"wrote {onnx_path} (BERT-style encoder, hidden {args.hidden}, {args.layers} layers, "
        f"{args.heads} heads, random weights)"
    )
    input_shape, dynamic_dims = dims_flags([int(g) for g in args.gears.split(",")])
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
        input_shape,
        "--dynamic_dims",
        dynamic_dims,
        "--input_format",
        "ND",
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
