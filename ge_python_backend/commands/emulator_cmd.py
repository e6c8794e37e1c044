"""`ge-python-model emulator compile`: ONNX -> emulator `.om`, with ATC's flag names."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from typing import Any

from ge_python_backend.ascend import (
    ATC_DEFAULT_PRECISION_MODE,
    ATC_INPUT_FORMATS,
    ATC_OUTPUT_TYPES,
    DTYPES_BY_ACL,
    PRECISION_MODE_ALIASES,
    PRECISION_MODES_V2,
    AtcFramework,
    PrecisionMode,
    tensor_name_of_output,
)
from ge_python_backend.commands import add_command, size_text
from ge_python_backend.emulator.memory_plan import MemoryPlan
from ge_python_backend.emulator.omfile import (
    STAND_IN_FRAMEWORKS,
    OmModel,
    OmTensor,
    compile_onnx,
    ranges_text,
)
from ge_python_backend.errors import UserError
from ge_python_backend.repository.model_files import open_session
from ge_python_backend.runtime.describe import describe_om

# The flags passed on to `atc` unchanged (every flag of this command).
ATC_FLAGS = (
    "model",
    "framework",
    "output",
    "input_shape",
    "dynamic_batch_size",
    "dynamic_image_size",
    "dynamic_dims",
    "input_format",
    "out_nodes",
    "soc_version",
    "insert_op_conf",
    "precision_mode",
    "precision_mode_v2",
    "keep_dtype",
    "modify_mixlist",
    "output_type",
)

COMPILE_HELP = "compile an ONNX model into an emulator .om (ATC's flags)"

COMPILE_DESCRIPTION = """\
Compile an ONNX model into an emulator .om for the CPU emulator of pyACL. The flags are ATC's, with
ATC's meaning; the file written is <output>.om. As ATC does for inference, the model computes in
FP16 unless --precision_mode (or --precision_mode_v2) says otherwise: after ATC's fusions (a
Conv's BatchNorm folded in float32), the emulator rounds weights and the tensors of FP16 operators
to float16 (parameters an operator takes in float32 only stay float32), so its answers differ from
onnxruntime's float32 as the device's do; --precision_mode must_keep_origin_dtype keeps float32.
What ATC's ONNX parser cannot take (custom-domain operators, opsets outside 8-18, string tensors)
is refused with migrate's message.

The result is an emulator .om (the ONNX model plus the description ATC would compile), NOT a real
Ascend .om: real pyACL cannot load it, and the emulator refuses real .om files. For real hardware,
run the same flags through ATC on a machine with CANN installed.

examples:
  ge-python-model emulator compile --model resnet.onnx --framework 5 --output resnet \\
      --input_shape "input:-1,3,224,224" --dynamic_batch_size "1,2,4,8"
  ge-python-model emulator compile --model det.onnx --framework 5 --output det \\
      --input_shape "image:1,3,-1,-1" --dynamic_image_size "224,224;448,448"
  ge-python-model emulator compile --model resnet.onnx --framework 5 --output resnet_aipp \\
      --input_shape "input:1,3,224,224" --insert_op_conf aipp.cfg
  ge-python-model emulator compile --model bert.onnx --framework 5 --output bert \\
      --input_shape "input_ids:1,-1;attention_mask:1,-1" --dynamic_dims "128,128;256,256" \\
      --input_format ND

the real-hardware equivalent of the first example:
  atc --model=resnet.onnx --framework=5 --output=resnet --soc_version=Ascend310P3 \\
      --input_shape="input:-1,3,224,224" --dynamic_batch_size="1,2,4,8" \\
      --precision_mode=force_fp16
"""


def register(subparsers: Any) -> None:
    """Add `emulator` with its `compile` subcommand."""
    parser = subparsers.add_parser(
        "emulator",
        help="tools for the CPU emulator of pyACL (compile ONNX into an emulator .om)",
        description="Tools for the CPU emulator of pyACL.",
    )
    commands = parser.add_subparsers(dest="emulator_command", metavar="SUBCOMMAND", required=True)
    compile_parser = add_command(
        commands, "compile", run_compile, COMPILE_HELP, COMPILE_DESCRIPTION
    )
    compile_parser.add_argument("--model", required=True, help="the ONNX model file")
    compile_parser.add_argument(
        "--framework",
        required=True,
        help="ATC's framework code: 5 (ONNX), or 3 to compile the ONNX as a stand-in for a "
        "TensorFlow model (ATC's TensorFlow output names, op:idx)",
    )
    compile_parser.add_argument(
        "--output", required=True, help="output path without .om (ATC adds it), e.g. models/resnet"
    )
    compile_parser.add_argument(
        "--input_shape",
        help='input shapes, -1 on dynamic dims, e.g. "x:-1,3,224,224;y:-1,4"; without a gear '
        'option, shape ranges: "x:1~16,3,224,224" (-1: any size)',
    )
    compile_parser.add_argument(
        "--dynamic_batch_size", help='batch gears for the -1 batch axis, e.g. "1,2,4,8"'
    )
    compile_parser.add_argument(
        "--dynamic_image_size", help='(height,width) gears, e.g. "224,224;448,448"'
    )
    compile_parser.add_argument(
        "--dynamic_dims",
        help="gears with one value per -1 dim of the inputs in --input_shape order, e.g. "
        '"20,20,1;40,40,2" (needs --input_format ND, 1 to 4 dims per input)',
    )
    compile_parser.add_argument(
        "--input_format",
        help="format recorded for the inputs: "
        f"{', '.join(f.name for f in ATC_INPUT_FORMATS)} (default ND with --dynamic_dims, the "
        "only one ATC accepts with it; NCHW otherwise)",
    )
    compile_parser.add_argument(
        "--out_nodes",
        help='the outputs, as node:index entries ("conv1:0;fc:0"; outputs named op:idx) or, for '
        'ONNX, output names ("prob;boxes"; named op:idx:name)',
    )
    compile_parser.add_argument(
        "--soc_version", default="Ascend310P3", help="SoC recorded in the .om (default Ascend310P3)"
    )
    compile_parser.add_argument(
        "--insert_op_conf",
        help="ATC's AIPP config (aipp_op { aipp_mode: static input_format: RGB888_U8 ... }): the "
        "input then takes raw UINT8 NHWC images and the AIPP steps run in front of the graph",
    )
    modes = [m.value for m in PrecisionMode] + list(PRECISION_MODE_ALIASES)
    compile_parser.add_argument(
        "--precision_mode",
        help=f"the precision the operators compute in: {', '.join(modes)} (ATC's default for "
        f"inference: {ATC_DEFAULT_PRECISION_MODE}); not with --precision_mode_v2",
    )
    compile_parser.add_argument(
        "--precision_mode_v2",
        help=f"ATC's newer spelling of the precision mode: {', '.join(PRECISION_MODES_V2)} "
        "(default fp16); not with --precision_mode",
    )
    compile_parser.add_argument(
        "--keep_dtype",
        help="a file of operators that keep their original type (float32), one a line: an "
        "operator name, or OpType::TypeName (no effect with must_keep_origin_dtype)",
    )
    compile_parser.add_argument(
        "--modify_mixlist",
        help="allow_mix_precision: a JSON file moving operator types between its lists, e.g. "
        '{"black-list": {"to-add": ["Exp"]}, "white-list": {"to-remove": ["MatMulV2"]}}',
    )
    compile_parser.add_argument(
        "--output_type",
        help=f"the outputs' data type: one of {', '.join(ATC_OUTPUT_TYPES)} for all outputs, or "
        '"node:index:TYPE;..." per output with --out_nodes (emulated: FP32, FP16)',
    )


def run_compile(args: argparse.Namespace) -> int:
    """Compile, then print the path written, a summary and the equivalent `atc` command."""
    if args.framework not in [str(code) for code in STAND_IN_FRAMEWORKS]:
        known = ", ".join(f"{code.value}={code.name}" for code in AtcFramework)
        raise UserError(
            f"--framework {args.framework} is not supported by the emulator: 5 (ONNX) or 3 (an "
            f"ONNX stand-in for a TensorFlow model) (ATC's codes: {known})"
        )
    path = compile_onnx(
        args.model,
        args.output,
        input_shape=args.input_shape,
        dynamic_batch_size=args.dynamic_batch_size,
        dynamic_image_size=args.dynamic_image_size,
        dynamic_dims=args.dynamic_dims,
        input_format=args.input_format,
        soc_version=args.soc_version,
        out_nodes=args.out_nodes,
        framework=int(args.framework),
        insert_op_conf=args.insert_op_conf,
        precision_mode=args.precision_mode,
        precision_mode_v2=args.precision_mode_v2,
        keep_dtype=args.keep_dtype,
        output_type=args.output_type,
        modify_mixlist=args.modify_mixlist,
    )
    model = OmModel.load(path)
    print(path)
    # the output shapes as `inspect` reads them: through a session on the emulator; a
    # dynamic-shape model's through its description (no device: the -1 dims as ACL reports them)
    if model.description.dynamic_shape:
        print(summary(model, [spec.shape for spec in describe_om(path, "emulator").outputs]))
    else:
        with open_session(path, "emulator", model.description.shape_order or None) as session:
            print(summary(model, [spec.shape for spec in session.outputs]))
    print(memory_line(model.memory))
    # the format the compiler resolved (ND for --dynamic_dims), so the command is one ATC accepts
    args.input_format = model.header["flags"]["input_format"]
    # the mode always shows, ATC's default included, so the command says what ATC will do
    if args.precision_mode_v2 is None and args.precision_mode is None:
        args.precision_mode = model.header["flags"]["precision_mode"]
    print(f"on Ascend hardware: {atc_command(args)}")
    return 0


def summary(model: OmModel, output_shapes: Sequence[Sequence[int]]) -> str:
    """One line: inputs, outputs and gears of a compiled model, with ATC's data types and the
    names `inspect`, `Session` and the config use (an output's tensor name, not ATC's
    `op:idx:name`); `output_shapes` are the session's, as `inspect` shows them (-1 on the batch
    axis of batch gears, where the file records the largest gear's)."""
    desc = model.description

    def tensors(items: tuple[OmTensor, ...], shapes: Sequence[Sequence[int]]) -> str:
        return ", ".join(
            f"{tensor_name_of_output(t.name)} "
            f"{DTYPES_BY_ACL[t.acl_dtype].acl_name.removeprefix('ACL_')}"
            f"[{ranges_text(t.ranges) if t.ranges else ','.join(map(str, shape))}]"
            for t, shape in zip(items, shapes)
        )

    if desc.gears:
        gears = f"{desc.dynamic_kind} gears " + ";".join(",".join(map(str, g)) for g in desc.gears)
    else:
        gears = "dynamic shape (no gears)" if desc.dynamic_shape else "static"
    aipp = "".join(
        f"; {desc.inputs[rank].name}: {op.aipp_mode.config_name} AIPP"
        + (f" from {op.input_format.name}" if op.is_static else "")
        for rank, op in sorted(desc.aipp_ops().items())
    )
    inputs = tensors(desc.inputs, [t.dims for t in desc.inputs])
    outputs = tensors(desc.outputs, output_shapes)
    return f"inputs: {inputs}; outputs: {outputs}; {gears}{aipp}"


def memory_line(plan: MemoryPlan) -> str:
    """One line: the device memory a load of the model takes, as `acl.mdl.query_size` reports it."""
    unsized = f"; {plan.unsized_tensors} tensor(s) of unknown size not counted" * bool(
        plan.unsized_tensors
    )
    return (
        f"device memory per load: work {size_text(plan.work)} (largest tensor "
        f"{size_text(plan.largest_tensor)}), weights {size_text(plan.weight)} "
        f"({plan.rule}{unsized})"
    )


def atc_command(args: argparse.Namespace) -> str:
    """The `atc` command line with the same flags."""
    parts = ["atc"]
    for flag in ATC_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            parts.append(f"--{flag}={shlex.quote(str(value))}")
    return " ".join(parts)
