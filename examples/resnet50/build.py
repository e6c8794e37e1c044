"""Build the ResNet-50-style classifier, compile it for the emulator, scaffold it into a repository.

    python examples/resnet50/build.py models
    ge-python-model serve models --emulator

Steps (each command is printed as it runs):
1. write `<workdir>/resnet50.onnx` (random weights, see resnet50_onnx.py);
2. `ge-python-model emulator compile` with batch gears 1,2,4,8,16 (it also prints the `atc`
   command that compiles the same ONNX for real Ascend hardware);
3. `ge-python-model scaffold` the `.om` into `<repository>/<name>/` (replacing an existing one).

`--aipp` builds the ModelZoo layout instead (model `resnet50_aipp`): the same batch gears,
compiled with ATC's `--insert_op_conf aipp.cfg` (written beside the `.om`): RGB888_U8 256x256
sources cropped to 224x224 at (16, 16), mean/var normalisation in the AIPP, each image of a
batch through the same AIPP; clients send uint8 HWC images.

`--jpeg` builds the DVPP layout (model `resnet50_jpeg`): the AIPP takes YUV420SP_U8 256x256
(JPEG's full-range YCbCr converted to RGB, then the same crop and normalisation), and the
scaffold sets `image_input`, so clients send JPEG files: each is decoded by DVPP's JPEGD and
resized by its VPC to 256x256 straight into its row of the batch (docs/guides/image-inputs.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

from resnet50_onnx import IMAGE_SIZE, INPUT_NAME, build_resnet50

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # examples/: example_tools
from example_tools import build_parser, compile_om, scaffold  # noqa: E402

BATCH_GEARS = "1,2,4,8,16"
SOURCE_SIZE = 256  # --aipp: the source images' width and height (center-cropped to 224)
# ModelZoo's ResNet-50 aipp.cfg: (x - mean) * var_reci = (x / 255 - ImageNet mean) / ImageNet std
# with mean = 255 * (0.485, 0.456, 0.406) rounded and var_reci = 1 / (255 * (0.229, 0.224, 0.225)).
AIPP_CONFIG = f"""\
aipp_op {{
    aipp_mode: static
    input_format: RGB888_U8
    src_image_size_w: {SOURCE_SIZE}
    src_image_size_h: {SOURCE_SIZE}
    crop: true
    load_start_pos_w: {(SOURCE_SIZE - IMAGE_SIZE) // 2}
    load_start_pos_h: {(SOURCE_SIZE - IMAGE_SIZE) // 2}
    crop_size_w: {IMAGE_SIZE}
    crop_size_h: {IMAGE_SIZE}
    csc_switch: false
    rbuv_swap_switch: false
    mean_chn_0: 124
    mean_chn_1: 117
    mean_chn_2: 104
    var_reci_chn_0: 0.0171247538
    var_reci_chn_1: 0.0175070028
    var_reci_chn_2: 0.0174291938
}}
"""


# --jpeg: what JPEGD writes (YUV420SP: NV12) through the same crop and normalisation; the CSC
# matrix is JPEG's full-range BT.601 YCbCr to RGB in AIPP's fixed point (x 256), as Ascend's
# samples write it for JPEGD output.
JPEG_AIPP_CONFIG = AIPP_CONFIG.replace("RGB888_U8", "YUV420SP_U8").replace(
    "    csc_switch: false\n",
    "    csc_switch: true\n"
    "    matrix_r0c0: 256\n    matrix_r0c1: 0\n    matrix_r0c2: 359\n"
    "    matrix_r1c0: 256\n    matrix_r1c1: -88\n    matrix_r1c2: -183\n"
    "    matrix_r2c0: 256\n    matrix_r2c1: 454\n    matrix_r2c2: 0\n"
    "    input_bias_0: 0\n    input_bias_1: 128\n    input_bias_2: 128\n",
)


def main() -> None:
    parser = build_parser(__doc__.splitlines()[0], "resnet50")
    parser.add_argument(
        "--width",
        type=int,
        default=16,
        help="stem channels; 64 is the real ResNet-50 (default 16)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random weights seed")
    parser.add_argument("--gears", default=BATCH_GEARS, help=f"batch gears (default {BATCH_GEARS})")
    parser.add_argument(
        "--aipp",
        action="store_true",
        help="the ModelZoo layout: static AIPP (uint8 RGB 256x256 in, crop and normalise on the "
        "device), model resnet50_aipp",
    )
    parser.add_argument(
        "--jpeg",
        action="store_true",
        help="the DVPP layout: JPEG files in, decoded and resized on the device into a "
        "YUV420SP AIPP (image_input), model resnet50_jpeg",
    )
    args = parser.parse_args()
    if args.aipp and args.jpeg:
        parser.error("--aipp and --jpeg are two layouts: give one")
    layout = "aipp" if args.aipp else "jpeg" if args.jpeg else None
    name = f"resnet50_{layout}" if layout and args.name == "resnet50" else args.name

    onnx_path = build_resnet50(args.workdir / f"{args.name}.onnx", args.width, args.seed)
    print(f"wrote {onnx_path} (ResNet-50 topology, width {args.width}, random weights)")
    flags = {
        "input_shape": f"{INPUT_NAME}:-1,3,{IMAGE_SIZE},{IMAGE_SIZE}",
        "dynamic_batch_size": args.gears,
    }
    if layout:
        config = args.workdir / ("jpeg_aipp.cfg" if args.jpeg else "aipp.cfg")
        config.write_text(JPEG_AIPP_CONFIG if args.jpeg else AIPP_CONFIG)
        source = "YUV420SP_U8" if args.jpeg else "RGB888_U8"
        print(f"wrote {config} ({source} {SOURCE_SIZE}x{SOURCE_SIZE} -> crop 224, mean/var)")
        flags["insert_op_conf"] = str(config)
    om = compile_om(onnx_path, args.workdir / name, **flags)
    scaffold(om, args.repository, name, image_input=INPUT_NAME if args.jpeg else None)


if __name__ == "__main__":
    main()
