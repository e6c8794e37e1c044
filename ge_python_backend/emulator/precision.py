"""ATC's operator precision, applied once at compile time to the graph an emulator `.om` keeps.

ATC's `--precision_mode` (or `--precision_mode_v2`), `--keep_dtype` and `--modify_mixlist` choose
the data type each operator computes in, `--output_type` the type of each model output (CANN
8.0.0 ATC pages and hicann/ge's CLI_options pages; see docs/internals/conformance/precision.md).
Before the mode applies, ATC's graph fusion changes what is computed: `fuse_graph` folds what ATC
folds on the host in float32 (a Conv's BatchNorm, ConvBatchnormFusionPass; Constant nodes are
ATC's Const). onnxruntime runs the emulator's graph in float32, so `apply_precision` rewrites it:
every float tensor an FP16 operator reads or writes is rounded to a float16 value (Cast to FLOAT16
and back: values beyond 65504 become inf, as on the device), the float weights FP16 operators read
are stored rounded, except the inputs an operator takes in float32 only (`FP32_INPUTS`, from the
operators' own dtype tables), and each operator computes in float32 between the roundings (the
Cube unit's float32 accumulation; vector kernels of fp16 operands with float32 parameters). The
bfloat16 modes (`BF16_SOCS` only) round to bfloat16 the same way. Executions run the rewritten
graph as it is; nothing is added to the per-execute path.

Imports onnx (compile time only).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ge_python_backend.ascend import (
    ATC_DEFAULT_PRECISION_MODE,
    ATC_OUTPUT_TYPES,
    DTYPES_BY_TRITON,
    PRECISION_MODE_ALIASES,
    PRECISION_MODES_NOT_EMULATED,
    PRECISION_MODES_V2,
    PrecisionMode,
)

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger(__name__)

# Matrix (Cube unit) operators: FP16 inputs, float32 accumulation, in every mode but
# must_keep_origin_dtype (allow_fp32_to_fp16: "for matrix-type operators, use float16").
CUBE_OPS = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm"})
# allow_mix_precision's built-in lists. ATC reads them from `precision_reduce` in the OPP's
# aic-<soc>-ops-info.json (true: white, may run in FP16; false: black, stays FP32; absent: gray,
# follows the operator before it). That file ships with CANN and was not available: these lists
# are the emulator's stand-in (UNCONFIRMED): Cube operators white; exponentials, logarithms,
# powers, divisions, reductions that sum and normalisations black (they overflow or lose the most
# in FP16); everything else gray.
MIX_WHITE = CUBE_OPS
MIX_BLACK = frozenset(
    {
        "Div",
        "Erf",
        "Exp",
        "InstanceNormalization",
        "LayerNormalization",
        "Log",
        "LogSoftmax",
        "LpNormalization",
        "Pow",
        "Reciprocal",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMean",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
        "Softmax",
        "Softplus",
        "Sqrt",
    }
)
# Operators whose float outputs are elements of their float inputs (or 0): float16 inputs give
# float16 outputs, so their outputs need no rounding of their own.
VALUE_PRESERVING = frozenset(
    {
        "Concat",
        "DepthToSpace",
        "Expand",
        "Flatten",
        "Gather",
        "GatherElements",
        "GlobalMaxPool",
        "Identity",
        "Max",
        "MaxPool",
        "Min",
        "ReduceMax",
        "ReduceMin",
        "Relu",
        "Reshape",
        "Slice",
        "SpaceToDepth",
        "Split",
        "Squeeze",
        "Tile",
        "Transpose",
        "Unsqueeze",
    }
)
# Inputs (by index) an operator takes in float32 only, whatever the mode: they are never rounded.
# BatchNormalization is ATC's BatchNorm (ONNX plugin: ai.onnx::8..::BatchNormalization ->
# BatchNorm, is_training false), whose scale, offset, mean and variance are FLOAT32 in every
# dtype combination (hicann/ops-nn norm/batch_norm: README.md and op_host/batch_norm_def.cpp;
# Atlas inference series and A2 alike). LayerNorm's gamma and beta are "x's type or FLOAT"
# (hicann/ops-nn norm/layer_norm/README.md): the float32 combination is kept (which one FE picks
# under force_fp16 is UNCONFIRMED).
FP32_INPUTS: Mapping[str, frozenset[int]] = {
    "BatchNormalization": frozenset({1, 2, 3, 4}),
    "LayerNormalization": frozenset({1, 2}),
}
# Ascend IR operator types `OpType::` lines of a --keep_dtype file and --modify_mixlist entries
# may name, with the ONNX operators ATC's ONNX parser maps to them (its plugins' registrations:
# Div -> RealDiv, Where -> SelectV2, BatchNormalization -> BatchNorm; the Cube mappings are
# UNCONFIRMED); an ONNX operator type is accepted as well (most keep their name).
ASCEND_IR_TYPES: Mapping[str, frozenset[str]] = {
    "RealDiv": frozenset({"Div"}),
    "SelectV2": frozenset({"Where"}),
    "Conv2D": frozenset({"Conv"}),
    "Conv2DTranspose": frozenset({"ConvTranspose"}),
    "MatMulV2": frozenset({"MatMul", "Gemm"}),
    "BatchMatMulV2": frozenset({"MatMul"}),
    "SoftmaxV2": frozenset({"Softmax"}),
    "BatchNorm": frozenset({"BatchNormalization"}),
    "LayerNorm": frozenset({"LayerNormalization"}),
}

# SoCs (--soc_version prefixes) whose ATC runs MatMulBiasAddFusionPass: Atlas A2 (Ascend910B*),
# A3 (Ascend910_93*) and 950 per the pass's page ("Applicable Products"); not the Atlas inference
# series (Ascend310P*).
MATMUL_BIAS_ADD_SOCS = ("Ascend910B", "Ascend910_93", "Ascend950")

# SoCs (--soc_version prefixes) with bfloat16: "bfloat16 only on Atlas A2, Atlas A3, Atlas
# 200I/500 A2 and 950" (hicann/ge --precision_mode.md, --modify_mixlist.md); not Ascend310P*.
BF16_SOCS = ("Ascend910B", "Ascend910_93", "Ascend310B", "Ascend950")
BF16_MODES = frozenset({PrecisionMode.ALLOW_MIX_PRECISION_BF16, PrecisionMode.ALLOW_FP32_TO_BF16})

_FLOAT = 1  # onnx.TensorProto.FLOAT
_FLOAT16 = 10  # onnx.TensorProto.FLOAT16
_BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16


class PrecisionError(ValueError):
    """A precision flag or file ATC would refuse; the compiler reports it as its own error."""


@dataclasses.dataclass(frozen=True)
class KeepDtype:
    """The operators a --keep_dtype file keeps in their original type: names and types."""

    names: frozenset[str] = frozenset()
    types: frozenset[str] = frozenset()

    def keeps(self, name: str, op_type: str) -> bool:
        return name in self.names or op_type in self.types


@dataclasses.dataclass(frozen=True)
class MixLists:
    """allow_mix_precision's lists by ONNX operator type: white may drop to FP16, black stays
    FP32, any other type is gray (follows the operators before it)."""

    white: frozenset[str] = MIX_WHITE
    black: frozenset[str] = MIX_BLACK


def read_modify_mixlist(path: Path, op_types: Sequence[str]) -> MixLists:
    """Apply ATC's --modify_mixlist JSON file to the built-in lists: `{"black-list": {"to-add":
    [...], "to-remove": [...]}, "white-list": {...}}` of Ascend IR (or ONNX) operator types.
    `to-add` moves a type into that list (out of the other), `to-remove` moves it from that
    list to gray (hicann/ge docs/zh/user_guides/atc_tools/CLI_options/--modify_mixlist.md)."""
    import json

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PrecisionError(f"cannot read --modify_mixlist {path}: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise PrecisionError(f"--modify_mixlist {path} is not JSON: {exc}") from exc
    form = (
        'a JSON object with "black-list" and/or "white-list", each an object with "to-add" '
        'and/or "to-remove" lists of operator types, e.g. {"black-list": {"to-add": ["Exp"]}}'
    )
    if not isinstance(data, dict) or not set(data) <= {"black-list", "white-list"}:
        raise PrecisionError(f"--modify_mixlist {path}: expected {form}")
    changes: dict[tuple[str, str], frozenset[str]] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict) or not set(entry) <= {"to-add", "to-remove"}:
            raise PrecisionError(f"--modify_mixlist {path}: {name!r} is not {form}")
        for action, types in entry.items():
            if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
                raise PrecisionError(
                    f"--modify_mixlist {path}: {name}.{action} must be a list of operator types"
                )
            changes[name, action] = frozenset(
                onnx_type for t in types for onnx_type in ASCEND_IR_TYPES.get(t, frozenset({t}))
            )
    empty: frozenset[str] = frozenset()
    to_black, to_white = (
        changes.get(("black-list", "to-add"), empty),
        changes.get(("white-list", "to-add"), empty),
    )
    both = to_black & to_white
    if both:
        raise PrecisionError(
            f"--modify_mixlist {path}: {', '.join(sorted(both))} added to both lists"
        )
    white = (MIX_WHITE - changes.get(("white-list", "to-remove"), empty) - to_black) | to_white
    black = (MIX_BLACK - changes.get(("black-list", "to-remove"), empty) - to_white) | to_black
    for (name, action), types in changes.items():
        listed = MIX_WHITE if name == "white-list" else MIX_BLACK
        if action == "to-remove" and types - listed:
            # ATC's page asks for listed types only; what it does otherwise is UNCONFIRMED
            logger.warning(
                "--modify_mixlist %s: %s.to-remove names %s, not in that list",
                path,
                name,
                ", ".join(sorted(types - listed)),
            )
    unused = (white ^ MIX_WHITE | black ^ MIX_BLACK) - set(op_types)
    if unused:
        logger.info("--modify_mixlist %s: no operator of type %s", path, ", ".join(sorted(unused)))
    return MixLists(frozenset(white), frozenset(black))


def resolve_mode(precision_mode: str | None, precision_mode_v2: str | None) -> PrecisionMode:
    """The mode of ATC's two flags (only one may be given; neither: ATC's default force_fp16)."""
    if precision_mode is not None and precision_mode_v2 is not None:
        raise PrecisionError(
            "--precision_mode and --precision_mode_v2 cannot be used together (ATC refuses "
            "both); give one"
        )
    if precision_mode_v2 is not None:
        mode = PRECISION_MODES_V2.get(precision_mode_v2)
        if mode is None:
            raise PrecisionError(
                _unsupported("--precision_mode_v2", precision_mode_v2, PRECISION_MODES_V2)
            )
        return mode
    if precision_mode is None:
        return ATC_DEFAULT_PRECISION_MODE
    if isinstance(precision_mode, PrecisionMode):
        return precision_mode
    mode = PRECISION_MODE_ALIASES.get(precision_mode)
    if mode is not None:
        return mode
    try:
        return PrecisionMode(precision_mode)
    except ValueError:
        allowed = [m.value for m in PrecisionMode] + list(PRECISION_MODE_ALIASES)
        raise PrecisionError(_unsupported("--precision_mode", precision_mode, allowed)) from None


def check_soc(mode: PrecisionMode, soc_version: str) -> None:
    """Refuse a bfloat16 mode for a SoC without bfloat16, as ATC does."""
    if mode in BF16_MODES and not soc_version.startswith(BF16_SOCS):
        raise PrecisionError(
            f"--precision_mode {mode} computes in bfloat16, which {soc_version} does not have: "
            f"bfloat16 is on Atlas A2/A3, Atlas 200I/500 A2 and 950 "
            f"({', '.join(p + '*' for p in BF16_SOCS)}); use a float16 mode"
        )


def _unsupported(flag: str, value: str, allowed: Sequence[str] | Mapping[str, object]) -> str:
    text = f"{flag} {value!r} is not supported; use one of {', '.join(allowed)}"
    if value in PRECISION_MODES_NOT_EMULATED:
        text += " (ATC's HiFloat8 mode is Ascend 950's; the emulator does not compute it)"
    return text


def read_keep_dtype(path: Path, node_names: Sequence[str], op_types: Sequence[str]) -> KeepDtype:
    """Parse ATC's --keep_dtype file: one operator a line, its name or `OpType::TypeName`
    (blank lines and `#` lines are skipped). Each must match an operator of the graph."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PrecisionError(f"cannot read --keep_dtype {path}: {exc.strerror or exc}") from exc
    names: set[str] = set()
    types: set[str] = set()
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("OpType::"):
            type_name = line.removeprefix("OpType::").strip()
            onnx_types = ASCEND_IR_TYPES.get(type_name, frozenset({type_name}))
            if not onnx_types & set(op_types):
                raise PrecisionError(
                    f"--keep_dtype {path} line {number}: no operator of type {type_name!r}; the "
                    f"graph's types are {', '.join(sorted(set(op_types)))}"
                )
            types |= onnx_types
        elif line in node_names:
            names.add(line)
        else:
            shown = ", ".join(list(node_names)[:20]) + (", ..." if len(node_names) > 20 else "")
            raise PrecisionError(
                f"--keep_dtype {path} line {number}: {line!r} is not an operator of the graph; "
                f"give operator names ({shown}) or OpType::TypeName lines"
            )
    return KeepDtype(frozenset(names), frozenset(types))


def parse_output_type(
    text: str, outputs: Sequence[tuple[str, int]], out_nodes: str | None
) -> list[str | None]:
    """ATC's --output_type: one type for every output (`FP16`), or `node:idx:TYPE` entries
    separated by `;` (with --out_nodes, as ATC requires). `outputs` are the model outputs'
    producing (node, index). Returns each output's type name, None where it is not set."""
    allowed = ", ".join(ATC_OUTPUT_TYPES)
    forms = f"one of {allowed} for every output, or node:index:TYPE entries separated by ';'"
    if ":" not in text:
        _check_output_type(text.strip(), forms)
        return [text.strip()] * len(outputs)
    if out_nodes is None:
        raise PrecisionError(
            f"--output_type {text!r} sets the type of single outputs, which needs --out_nodes "
            "(ATC's rule)"
        )
    types: list[str | None] = [None] * len(outputs)
    known = {f"{node}:{index}": i for i, (node, index) in enumerate(outputs)}
    for entry in (e.strip() for e in text.split(";") if e.strip()):
        node_index, sep, type_name = entry.rpartition(":")
        if not sep or node_index not in known:
            raise PrecisionError(
                f"--output_type entry {entry!r} names no model output; give {forms} (the "
                f"outputs: {', '.join(known)})"
            )
        _check_output_type(type_name, forms)
        types[known[node_index]] = type_name
    return types


def _check_output_type(type_name: str, forms: str) -> None:
    if type_name not in ATC_OUTPUT_TYPES:
        raise PrecisionError(f"--output_type {type_name!r} is not supported; give {forms}")
    if type_name not in ("FP32", "FP16"):
        # how ATC converts float results to integers (scaling, saturation) is UNCONFIRMED
        raise PrecisionError(
            f"--output_type {type_name} is ATC's, but the emulator only emulates FP32 and FP16 "
            "outputs"
        )


def apply_precision(
    proto: onnx.ModelProto,
    mode: PrecisionMode,
    node_names: Sequence[str],
    keep: KeepDtype = KeepDtype(),
    output_types: Sequence[str | None] = (),
    mix: MixLists = MixLists(),
    soc_version: str = "Ascend310P3",
) -> list[str]:
    """Rewrite `proto` (as `fuse_graph` left it) in place to compute as ATC builds it: `mode`
    per operator (`mix`: allow_mix_precision's lists) with the fusions of `soc_version` that
    change precision. `node_names` are the nodes' names as ATC reports them, `output_types`
    each graph output's --output_type (None: the graph's). Returns the names of the nodes that
    run in FP16 (their inputs rounded)."""
    fused = keep.names - set(node_names)
    if fused:  # what ATC does with a --keep_dtype name its fusion removed is UNCONFIRMED
        logger.warning("--keep_dtype names %s, fused into another operator", ", ".join(fused))
    floats = _float_tensors(proto)
    plan = _plan(proto, mode, node_names, keep, floats, mix, soc_version)
    rewriter = _Rewriter(proto, floats, _BFLOAT16 if mode in BF16_MODES else _FLOAT16)
    rewriter.rewrite(plan)
    for value, type_name in zip(list(proto.graph.output), output_types):
        if type_name is not None:
            rewriter.set_output_type(value, DTYPES_BY_TRITON[type_name].onnx or _FLOAT)
    return [name for name, (fp16_in, _) in zip(node_names, plan) if fp16_in]


def fuse_graph(proto: onnx.ModelProto, node_names: Sequence[str]) -> list[str]:
    """ATC's graph changes before precision, in place: Constant nodes become constants (ATC's
    Const), a Conv's BatchNorm is folded into the Conv's filter and bias in float32
    (`_fold_conv_batchnorm`), and constants no operator reads are dropped. Returns the names of
    the nodes left, in graph order."""
    from onnx import numpy_helper

    graph = proto.graph
    outputs = {value.name for value in graph.output}
    kept: list[tuple[onnx.NodeProto, str]] = []
    for node, name in zip(graph.node, node_names):
        value = next((a.t for a in node.attribute if a.name == "value"), None)
        if node.op_type == "Constant" and value is not None and node.output[0] not in outputs:
            graph.initializer.append(
                numpy_helper.from_array(numpy_helper.to_array(value), node.output[0])
            )
        else:
            kept.append((node, name))
    folded = _fold_conv_batchnorm(proto, kept)
    if folded:
        logger.debug("BatchNorm folded into Conv (ConvBatchnormFusionPass): %s", folded)
    kept = [(node, name) for node, name in kept if name not in folded]
    del graph.node[:]
    graph.node.extend(node for node, _ in kept)
    read = {value.name for value in [*graph.input, *graph.output]} | _read_tensors(graph)
    unread = [t for t in graph.initializer if t.name not in read]  # the folded ones' constants
    for tensor in unread:
        graph.initializer.remove(tensor)
    return [name for _, name in kept]


def _read_tensors(graph: onnx.GraphProto) -> set[str]:
    """Every tensor a node of `graph` or of its subgraphs reads."""
    read = {t for node in graph.node for t in node.input}
    for node in graph.node:
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                read |= _read_tensors(subgraph)
    return read


def _fold_conv_batchnorm(
    proto: onnx.ModelProto, nodes: Sequence[tuple[onnx.NodeProto, str]]
) -> dict[str, str]:
    """ATC's ConvBatchnormFusionPass (FE graph fusion, every SoC): a 2-D or 3-D Conv (Conv2D,
    DepthwiseConv2D, Conv3D) whose only consumer is an inference BatchNorm with constant
    scale, offset, mean and variance gets filter W * s and bias (b - mean) * s + offset, s =
    scale / sqrt(variance + epsilon), computed on the host (ConvBnFilterHost, ConvBnBiasHost)
    in float32; the BatchNorm is gone. The Conv takes the BatchNorm's output tensor. Returns
    {folded BatchNorm name: Conv name}."""
    from onnx import numpy_helper

    graph = proto.graph
    constants = {t.name: t for t in graph.initializer}
    consumers: dict[str, int] = {}
    for node, _ in nodes:
        for tensor in node.input:
            consumers[tensor] = consumers.get(tensor, 0) + 1
    outputs = {value.name for value in graph.output}
    producers = {node.output[0]: (node, name) for node, name in nodes if node.output}
    taken = set(constants) | {t for node, _ in nodes for t in [*node.input, *node.output]}
    folded: dict[str, str] = {}
    for bn, bn_name in nodes:
        if bn.op_type != "BatchNormalization" or bn.input[0] not in producers:
            continue
        conv, conv_name = producers[bn.input[0]]
        training = any(a.name == "training_mode" and a.i for a in bn.attribute)
        params = list(bn.input[1:5])
        weights = conv.input[1] if len(conv.input) > 1 else ""
        bias = conv.input[2] if len(conv.input) > 2 and conv.input[2] else None
        if (
            conv.op_type != "Conv"
            or training
            or len([t for t in bn.output if t]) != 1
            or consumers.get(conv.output[0]) != 1
            or conv.output[0] in outputs
            or not all(t in constants for t in [*params, weights])
            or (bias is not None and bias not in constants)
            or len(constants[weights].dims) not in (4, 5)
        ):
            continue
        scale, offset, mean, variance = (
            numpy_helper.to_array(constants[t]).astype(np.float32) for t in params
        )
        epsilon = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        factor = scale / np.sqrt(variance + np.float32(epsilon))
        filter_ = numpy_helper.to_array(constants[weights]).astype(np.float32)
        shape = (-1,) + (1,) * (filter_.ndim - 1)
        old_bias = (
            numpy_helper.to_array(constants[bias]).astype(np.float32)
            if bias is not None
            else np.zeros_like(mean)
        )
        new_filter = _unique(f"{conv_name}/bn_folded_filter", taken)
        new_bias = _unique(f"{conv_name}/bn_folded_bias", taken)
        graph.initializer.extend(
            [
                numpy_helper.from_array(
                    (filter_ * factor.reshape(shape)).astype(np.float32), new_filter
                ),
                numpy_helper.from_array(
                    ((old_bias - mean) * factor + offset).astype(np.float32), new_bias
                ),
            ]
        )
        del conv.input[1:]
        conv.input.extend([new_filter, new_bias])
        conv.output[0] = bn.output[0]
        folded[bn_name] = conv_name
    return folded


def _unique(name: str, taken: set[str]) -> str:
    candidate, k = name, 1
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    taken.add(candidate)
    return candidate


def _float_tensors(proto: onnx.ModelProto) -> set[str]:
    """Names of the graph's float32 tensors (ONNX shape inference for the intermediate ones)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception as exc:  # onnx raises InferenceError and others; declared types stand
        logger.debug("shape inference failed, using the declared types: %s", exc)
        inferred = proto
    graph = inferred.graph
    values = [*graph.input, *graph.output, *graph.value_info]
    floats = {v.name for v in values if v.type.tensor_type.elem_type == _FLOAT}
    floats |= {t.name for t in graph.initializer if t.data_type == _FLOAT}
    return floats


def _plan(
    proto: onnx.ModelProto,
    mode: PrecisionMode,
    node_names: Sequence[str],
    keep: KeepDtype,
    floats: set[str],
    mix: MixLists,
    soc_version: str,
) -> list[tuple[bool, bool]]:
    """Per node (graph order): (its float inputs are reduced, its float outputs are reduced),
    reduced: float16, or bfloat16 in the bfloat16 modes."""
    initializers = {t.name for t in proto.graph.initializer}
    reduced: set[str] = set()  # tensors made by FP16 nodes (allow_mix_precision's gray rule)
    plan = []
    for node, name in zip(proto.graph.node, node_names):
        op = node.op_type
        uses_float = any(t in floats for t in [*node.input, *node.output])
        if not uses_float or mode == PrecisionMode.MUST_KEEP_ORIGIN_DTYPE or keep.keeps(name, op):
            step = (False, False)
        elif mode == PrecisionMode.FORCE_FP16:
            step = (True, True)
        elif mode == PrecisionMode.ALLOW_FP32_TO_FP16:
            step = (op in CUBE_OPS, op in CUBE_OPS)
        elif mode == PrecisionMode.FORCE_FP32:
            step = (op in CUBE_OPS, False)  # cube_fp16in_fp32out
        elif mode == PrecisionMode.ALLOW_FP32_TO_BF16:
            step = (False, False)  # "float32 kept where the AI Core has it" (all assumed to)
        elif op in mix.white:
            step = (True, True)
        elif op in mix.black:
            step = (False, False)
        else:
            made = [t for t in node.input if t in floats and t not in initializers]
            gray = bool(made) and all(t in reduced for t in made)
            step = (gray, gray)
        if step[1]:
            reduced.update(node.output)
        plan.append(step)
    if soc_version.startswith(MATMUL_BIAS_ADD_SOCS) and mode not in BF16_MODES:
        _fuse_matmul_bias(proto, plan)
    return plan


def _fuse_matmul_bias(proto: onnx.ModelProto, plan: list[tuple[bool, bool]]) -> None:
    """ATC's MatMulBiasAddFusionPass in `plan`: a MatMul whose only consumer is an Add of a
    constant 1-D bias as long as the MatMul's last axis, both in FP16, becomes one MatMul that
    takes the bias into its float32 accumulator: the MatMul's result is not rounded, neither is
    the bias, the sum is ("If BiasAdd/Add is computed in FP16 before fusion, bias is accumulated
    inside matmul in FP32 after fusion"). An Add in FP32 after an FP16 MatMul stays as it is
    (what the pass does then is UNCONFIRMED)."""
    graph = proto.graph
    constants = {t.name: t for t in graph.initializer}
    index = {node.output[0]: i for i, node in enumerate(graph.node) if node.output}
    consumers: dict[str, int] = {}
    for node in graph.node:
        for tensor in node.input:
            consumers[tensor] = consumers.get(tensor, 0) + 1
    outputs = {value.name for value in graph.output}
    for i, add in enumerate(graph.node):
        if add.op_type != "Add" or len(add.input) != 2:
            continue
        for made, bias in (add.input, reversed(add.input)):
            j = index.get(made)
            if j is None or graph.node[j].op_type != "MatMul" or bias not in constants:
                continue
            matmul = graph.node[j]
            weights = constants.get(matmul.input[1])
            columns = weights.dims[-1] if weights is not None and weights.dims else None
            shape = tuple(constants[bias].dims)
            if consumers.get(made) != 1 or made in outputs or shape != (columns,):
                continue
            if plan[j] == plan[i] == (True, True):
                plan[j], plan[i] = (True, False), (False, True)
            break


class _Rewriter:
    """Inserts the rounding to `half` (FLOAT16 or BFLOAT16) into a graph: `Cast(half)` then
    `Cast(FLOAT)`."""

    def __init__(self, proto: onnx.ModelProto, floats: set[str], half: int) -> None:
        self.graph = proto.graph
        self.floats = floats
        self.half = half
        self.suffix = "fp16" if half == _FLOAT16 else "bf16"
        self.names = {t for n in self.graph.node for t in [*n.input, *n.output]}
        self.names |= {v.name for v in [*self.graph.input, *self.graph.output]}
        self.names |= {t.name for t in self.graph.initializer}
        self.rounded: dict[str, str] = {}  # tensor -> its rounded copy
        self.fp16_valued: set[str] = set()  # tensors holding `half` values already
        self.count = 0

    def rewrite(self, plan: list[tuple[bool, bool]]) -> None:
        initializers = {t.name: t for t in self.graph.initializer}
        nodes: list[onnx.NodeProto] = []
        for node, (fp16_in, fp16_out) in zip(list(self.graph.node), plan):
            if fp16_in:
                fp32_only = FP32_INPUTS.get(node.op_type, frozenset())
                for i, tensor in enumerate(node.input):
                    if i in fp32_only:
                        continue
                    if tensor in self.floats and tensor not in self.fp16_valued:
                        node.input[i] = self._rounded_input(tensor, initializers, nodes)
            nodes.append(node)
            if not fp16_out:
                continue
            for i, tensor in enumerate(node.output):
                if tensor not in self.floats:
                    continue
                if node.op_type not in VALUE_PRESERVING:
                    node.output[i] = self._fresh(f"{tensor}/fp32")
                    nodes.extend(self._round(node.output[i], tensor))
                self.fp16_valued.add(tensor)
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        # A weight every reader of which now reads its rounded copy is not kept beside it (a
        # device holds it once, at the compiled precision; kept, it doubled the .om and the
        # emulator's engine: ResNet-50's 97 MiB of FP32 weights twice)
        graph_io = [*self.graph.input, *self.graph.output]
        read = {value.name for value in graph_io} | _read_tensors(self.graph)
        replaced = [t for t in self.graph.initializer if t.name in self.rounded]
        for weight in replaced:
            if weight.name not in read:
                self.graph.initializer.remove(weight)

    def set_output_type(self, value: onnx.ValueInfoProto, elem_type: int) -> None:
        """Make graph output `value` of `elem_type` (ATC's --output_type) with a final Cast."""
        import onnx

        current = value.type.tensor_type.elem_type
        if current == elem_type:
            return
        if current not in (_FLOAT, _FLOAT16):
            raise PrecisionError(
                f"--output_type sets output {value.name} to a float type, but it is "
                f"{onnx.TensorProto.DataType.Name(current)}"
            )
        if value.name in {v.name for v in self.graph.input}:
            raise PrecisionError(f"--output_type: output {value.name} is a model input")
        stale = [v for v in self.graph.value_info if v.name == value.name]
        for info in stale:
            self.graph.value_info.remove(info)
        inner = self._fresh(f"{value.name}/{onnx.TensorProto.DataType.Name(current).lower()}")
        for node in self.graph.node:
            node.input[:] = [inner if t == value.name else t for t in node.input]
            node.output[:] = [inner if t == value.name else t for t in node.output]
        self.graph.node.append(
            onnx.helper.make_node("Cast", [inner], [value.name], to=elem_type, name=inner)
        )
        value.type.tensor_type.elem_type = elem_type

    def _rounded_input(
        self,
        tensor: str,
        initializers: dict[str, onnx.TensorProto],
        nodes: list[onnx.NodeProto],
    ) -> str:
        from onnx import numpy_helper

        if tensor not in self.rounded:
            name = self._fresh(f"{tensor}/{self.suffix}")
            if tensor in initializers:
                values = numpy_helper.to_array(initializers[tensor]).astype(np.float32)
                rounded = _to_bfloat16(values) if self.half == _BFLOAT16 else _to_float16(values)
                self.graph.initializer.append(numpy_helper.from_array(rounded, name))
            else:
                nodes.extend(self._round(tensor, name))
            self.rounded[tensor] = name
            self.fp16_valued.add(name)
        return self.rounded[tensor]

    def _round(self, source: str, target: str) -> list[onnx.NodeProto]:
        from onnx import helper

        self.count += 1
        half = self._fresh(f"{target}/half")
        prefix = f"ge_emulator_{self.suffix}_{self.count}"
        return [
            helper.make_node(
                "Cast", [source], [half], to=self.half, name=f"{prefix}_to_{self.suffix}"
            ),
            helper.make_node("Cast", [half], [target], to=_FLOAT, name=f"{prefix}_to_fp32"),
        ]

    def _fresh(self, name: str) -> str:
        candidate, k = name, 1
        while candidate in self.names:
            candidate, k = f"{name}_{k}", k + 1
        self.names.add(candidate)
        self.floats.add(candidate)
        return candidate


def _to_float16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to float16's (to nearest even; beyond 65504: inf, as on the
    device), as float32."""
    with np.errstate(over="ignore"):
        return values.astype(np.float16).astype(np.float32)


def _to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16's (to nearest even, as onnxruntime's Cast), as
    float32: the high 16 bits of each float32 after rounding the low 16 away; NaN stays NaN."""
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    result = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(values), values, result)
