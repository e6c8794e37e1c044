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

import sys
from pathlib import Path

from bert_onnx import INPUT_NAMES, build_bert

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
from example_tools import build_parser, compile_om, scaffold  # noqa: E402

SEQUENCE_GEARS = (32, 64, 128)


def dims_flags(gears: list[int]) -> tuple[str, str]:
    """`--input_shape` and `--dynamic_dims` values: one -1 (the sequence) per input."""
    input_shape = ";".join(f"{name}:1,-1" for name in INPUT_NAMES)
    dynamic_dims = ";".join(",".join([str(length)] * len(INPUT_NAMES)) for length in gears)
    return input_shape, dynamic_dims


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0], "bert_base")
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
    om = compile_om(
        onnx_path,
        args.workdir / args.name,
        input_shape=input_shape,
        dynamic_dims=dynamic_dims,
        input_format="ND",
    )
    scaffold(om, args.repository, args.name)


if __name__ == "__main__":
    main()
