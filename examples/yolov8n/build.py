"""Build the YOLOv8n-style detector, compile it for the emulator, scaffold it into a repository.

    python examples/yolov8n/build.py models
    ge-python-model serve models --emulator

Steps (each command is printed as it runs):
1. write `<workdir>/yolov8n.onnx` (random weights, see yolov8n_onnx.py);
2. `ge-python-model emulator compile` with batch gears 1,2,4 (it also prints the `atc` command
   that compiles the same ONNX for real Ascend hardware);
3. `ge-python-model scaffold` the `.om` into `<repository>/<name>/` (replacing an existing one):
   three outputs, `boxes`, `scores` (FP32) and `labels` (INT64).

With `--nms-in-graph` the detector ends in NonMaxSuppression: one image per request (no gears),
outputs `det_boxes`, `det_scores`, `det_labels` with one row per detection (a data-dependent
shape, -1 in the config; each request runs alone), buffers of `--max-output-bytes` each.
"""

from __future__ import annotations

import sys
from pathlib import Path

from yolov8n_onnx import IMAGE_SIZE, INPUT_NAME, NMS_MAX_PER_CLASS, NUM_CLASSES, build_yolov8n

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
from example_tools import build_parser, compile_om, scaffold  # noqa: E402

BATCH_GEARS = "1,2,4"
# The most detections NMS can keep (every class's maximum), as FP32 x1,y1,x2,y2: det_boxes' bytes.
MAX_OUTPUT_BYTES = NUM_CLASSES * NMS_MAX_PER_CLASS * 4 * 4


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0], "yolov8n")
    parser.add_argument(
        "--width", type=int, default=16, help="first conv's channels (default 16, as YOLOv8n)"
    )
    parser.add_argument("--seed", type=int, default=0, help="random weights seed")
    parser.add_argument("--gears", default=BATCH_GEARS, help=f"batch gears (default {BATCH_GEARS})")
    parser.add_argument(
        "--nms-in-graph",
        action="store_true",
        help="end the graph in NonMaxSuppression: one image per request, one row per detection",
    )
    args = parser.parse_args()

    onnx_path = build_yolov8n(
        args.workdir / f"{args.name}.onnx", args.width, args.seed, nms=args.nms_in_graph
    )
    kind = " with NMS in the graph" if args.nms_in_graph else ""
    print(f"wrote {onnx_path} (YOLOv8n-style detector{kind}, width {args.width}, random weights)")
    if args.nms_in_graph:
        om = compile_om(
            onnx_path,
            args.workdir / args.name,
            input_shape=f"{INPUT_NAME}:1,3,{IMAGE_SIZE},{IMAGE_SIZE}",
        )
        scaffold(om, args.repository, args.name, max_output_bytes=MAX_OUTPUT_BYTES)
        return
    om = compile_om(
        onnx_path,
        args.workdir / args.name,
        input_shape=f"{INPUT_NAME}:-1,3,{IMAGE_SIZE},{IMAGE_SIZE}",
        dynamic_batch_size=args.gears,
    )
    scaffold(om, args.repository, args.name)


if __name__ == "__main__":
    main()
