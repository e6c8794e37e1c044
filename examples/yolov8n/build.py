"""Build the YOLOv8n-style detector, compile it for the emulator, scaffold it into a repository.

    python examples/yolov8n/build.py models
    ge-python-model serve models --emulator

Steps (each command is printed as it runs):
1. write `<workdir>/yolov8n.onnx` (random weights, see yolov8n_onnx.py);
2. `ge-python-model emulator compile` with batch gears 1,2,4 (it also prints the `atc` command
   that compiles the same ONNX for real Ascend hardware);
3. `ge-python-model scaffold` the `.om` into `<repository>/<name>/` (replacing an existing one):
   three outputs, `boxes`, `scores` (FP32) and `labels` (INT64).
"""

from __future__ import annotations

import sys
from pathlib import Path

from yolov8n_onnx import IMAGE_SIZE, INPUT_NAME, build_yolov8n

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
from example_tools import build_parser, compile_om, scaffold  # noqa: E402

BATCH_GEARS = "1,2,4"


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0], "yolov8n")
    parser.add_argument(
        "--width", type=int, default=16, help="first conv's channels (default 16, as YOLOv8n)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random weights seed")
    parser.add_argument("--gears", default=BATCH_GEARS, help=f"batch gears (default {BATCH_GEARS})")
    args = parser.parse_args()

    onnx_path = build_yolov8n(args.workdir / f"{args.name}.onnx", args.width, args.seed)
    print(f"wrote {onnx_path} (YOLOv8n-style detector, width {args.width}, random weights)")
    om = compile_om(
        onnx_path,
        args.workdir / args.name,
        input_shape=f"{INPUT_NAME}:-1,3,{IMAGE_SIZE},{IMAGE_SIZE}",
        dynamic_batch_size=args.gears,
    )
    scaffold(om, args.repository, args.name)


if __name__ == "__main__":
    main()
