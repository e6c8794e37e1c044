"""The device memory GE plans for a compiled graph: what `acl.mdl.query_size` reports.

GE's model builder gives a loaded model two device regions (hicann/ge, compiler/graph/build/
memory/block_mem_assigner.cc; runtime DavinciModel::InitFeatureMapAndP2PMem / InitWeightMem):

- **weights** (`weight size`): the constant tensors at the type and format the compiled operators
  read them in. A float32 weight that only FP16 operators read is stored as float16; a
  convolution's filter in FRACTAL_Z (out and in channels padded to 16) and a matrix's in
  FRACTAL_NZ (its last two dims padded to 16), the Cube unit's formats for FP16.
- **work** (`work size`, the feature map): every tensor the graph's operators write, the model's
  inputs and outputs included, each block aligned to 512 bytes (MEM_ALIGN_SIZE) and reused by
  later tensors once its last reader has run (GE's block reuse by life time). Tensors of FP16
  operators are float16; 4-D ones are in NC1HWC0 (channels padded to 16, C0). A float32 input
  that FP16 operators read gets the Cast/TransData copy ATC inserts after the Data node, a
  float32 output an FP16 operator writes the Cast ATC inserts before the NetOutput node.

The plan is sized at the largest gear (GE sizes one feature map for every gear of a model) and at
the upper bounds of ranged dims. Estimated, and said so where it is shown: operators' own work
spaces (kernel-specific) are not counted, and GE's reuse heuristics differ in detail from the
smallest-fitting-free-block rule used here (see docs/internals/conformance/memory.md,
"Device memory as GE plans it").

Imports onnx (compile time only).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ge_python_backend.emulator.precision import FP32_INPUTS

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger(__name__)

MEM_ALIGN_SIZE = 512  # GE's alignment of every feature-map block (davinci_model.h)
CUBE_BLOCK = 16  # FP16 fractal and C0: FRACTAL_Z / FRACTAL_NZ / NC1HWC0 pad to 16
RULE = (
    "GE plan (estimated): weights at the compiled precision and format; work = every tensor "
    "written, 512-byte blocks reused by life time, at the largest gear; operators' own work "
    "spaces not counted"
)

_FLOAT = 1  # onnx.TensorProto.FLOAT
_ITEMSIZE = {1: 4, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 8, 9: 1, 10: 2, 11: 8, 12: 4, 13: 8, 16: 2}
_FILTER_OPS = frozenset({"Conv", "ConvTranspose"})
_MATRIX_OPS = frozenset({"MatMul", "Gemm"})
_SMALL_WEIGHT = 1024  # elements: weights up to this size keep their values in an outline


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """(work, weight) bytes as GE plans them, with what the figure rests on."""

    work: int
    weight: int
    largest_tensor: int  # the largest single feature-map block, in bytes
    unsized_tensors: int  # tensors whose shape inference could not size (not counted)
    rule: str = RULE

    def to_header(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_header(cls, values: Mapping[str, object]) -> MemoryPlan:
        return cls(
            work=int(values["work"]),  # type: ignore[call-overload]
            weight=int(values["weight"]),  # type: ignore[call-overload]
            largest_tensor=int(values["largest_tensor"]),  # type: ignore[call-overload]
            unsized_tensors=int(values["unsized_tensors"]),  # type: ignore[call-overload]
            rule=str(values["rule"]),
        )


@dataclasses.dataclass
class _Tensor:
    nbytes: int
    first: int  # the step that writes it (-1: before the first operator)
    last: int  # the last step that reads it


def outline(proto: onnx.ModelProto) -> onnx.ModelProto:
    """`proto` without the values of its large weights (their names, dims and types stay):
    what `plan_memory` reads, taken before the precision rewrite changes the graph."""
    import onnx

    light = onnx.ModelProto(ir_version=proto.ir_version)
    light.opset_import.extend(proto.opset_import)
    graph = light.graph
    graph.name = proto.graph.name
    for field in ("node", "input", "output", "value_info"):
        getattr(graph, field).extend(getattr(proto.graph, field))
    for tensor in proto.graph.initializer:
        if math.prod(tensor.dims) <= _SMALL_WEIGHT:  # shape inference may read its values
            graph.initializer.append(tensor)
        else:
            graph.initializer.append(
                onnx.TensorProto(name=tensor.name, dims=tensor.dims, data_type=tensor.data_type)
            )
    return light


def plan_memory(
    graph_outline: onnx.ModelProto,
    input_shapes: Mapping[str, Sequence[int]],
    fp16_nodes: Iterable[int],
) -> MemoryPlan:
    """The plan of `graph_outline` (see `outline`) with its inputs at `input_shapes` and the
    nodes at the indexes `fp16_nodes` computing in FP16."""
    fp16 = set(fp16_nodes)
    graph = graph_outline.graph
    nodes = list(graph.node)
    shapes, types = _inferred(graph_outline, input_shapes)
    readers: dict[str, list[int]] = {}
    for step, node in enumerate(nodes):
        for name in node.input:
            if name:
                readers.setdefault(name, []).append(step)

    def weight_bytes(dims: tuple[int, ...], elem: int, name: str) -> int:
        steps = readers.get(name, [])
        if elem != _FLOAT or not steps or any(step not in fp16 for step in steps):
            return math.prod(dims) * _ITEMSIZE.get(elem, 4)
        read_as = [(nodes[s].op_type, list(nodes[s].input).index(name)) for s in steps]
        if any(i in FP32_INPUTS.get(op, ()) for op, i in read_as):  # e.g. BatchNorm's mean
            return math.prod(dims) * 4
        if len(dims) >= 2 and any(op in _FILTER_OPS and i == 1 for op, i in read_as):
            dims = (_pad(dims[0]), _pad(dims[1]), *dims[2:])
        elif len(dims) >= 2 and any(op in _MATRIX_OPS and i < 2 for op, i in read_as):
            dims = (*dims[:-2], _pad(dims[-2]), _pad(dims[-1]))
        return math.prod(dims) * 2

    weight = sum(weight_bytes(tuple(t.dims), t.data_type, t.name) for t in graph.initializer)
    constants = [out for node in nodes if node.op_type == "Constant" for out in node.output]
    weight += sum(weight_bytes(shapes[n], types[n], n) for n in constants if n in shapes)

    end = len(nodes)
    outputs = {o.name for o in graph.output}
    tensors: list[_Tensor] = []
    unsized = 0

    def add(name: str, first: int, half: bool) -> None:
        nonlocal unsized
        dims = shapes.get(name)
        if dims is None:
            unsized += 1
            return
        elem = types.get(name, _FLOAT)
        half = half and elem == _FLOAT
        last = max(readers.get(name, [first]))
        if name in outputs:
            if half:  # ATC's Cast back to the output's float32, kept to the end
                tensors.append(_Tensor(_align(math.prod(dims) * 4), first, end))
            else:
                last = end
        if half and len(dims) == 4:
            dims = (dims[0], _pad(dims[1]), *dims[2:])
        itemsize = 2 if half else _ITEMSIZE.get(elem, 4)
        tensors.append(_Tensor(_align(math.prod(dims) * itemsize), first, last))

    weights = {t.name for t in graph.initializer}
    for value in graph.input:
        if value.name in weights:
            continue
        add(value.name, -1, half=False)
        fp16_readers = [step for step in readers.get(value.name, []) if step in fp16]
        if fp16_readers and value.name in shapes and types.get(value.name) == _FLOAT:
            # ATC's Cast (and TransData to NC1HWC0) after the Data node, for its FP16 readers
            dims = shapes[value.name]
            if len(dims) == 4:
                dims = (dims[0], _pad(dims[1]), *dims[2:])
            tensors.append(_Tensor(_align(math.prod(dims) * 2), -1, max(fp16_readers)))
    for step, node in enumerate(nodes):
        if node.op_type != "Constant":
            for name in node.output:
                if name:
                    add(name, step, half=step in fp16)
    work, largest = _reuse(tensors)
    return MemoryPlan(work, weight, largest, unsized)


def _reuse(tensors: list[_Tensor]) -> tuple[int, int]:
    """(total, largest) bytes of the blocks that hold `tensors`: a tensor takes the smallest free
    block that fits it, or a new one; a block is free once its tensor's last reader has run."""
    blocks: list[int] = []  # sizes
    free: list[int] = []  # indexes into blocks
    holders: list[tuple[int, int]] = []  # (last step, block)
    for tensor in sorted(tensors, key=lambda t: t.first):
        released = [h for h in holders if h[0] < tensor.first]
        for holder in released:
            holders.remove(holder)
            free.append(holder[1])
        fitting = [b for b in free if blocks[b] >= tensor.nbytes]
        if fitting:
            block = min(fitting, key=lambda b: blocks[b])
            free.remove(block)
        else:
            block = len(blocks)
            blocks.append(tensor.nbytes)
        holders.append((tensor.last, block))
    return sum(blocks), max(blocks, default=0)


def _inferred(
    graph_outline: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]]
) -> tuple[dict[str, tuple[int, ...]], dict[str, int]]:
    """Fully known shapes and the element types of the graph's tensors, the inputs fixed to
    `input_shapes` (ONNX shape inference with data propagation)."""
    import onnx

    fixed = onnx.ModelProto()
    fixed.CopyFrom(graph_outline)
    for value in fixed.graph.input:
        if value.name in input_shapes:
            value.type.tensor_type.shape.ClearField("dim")
            for size in input_shapes[value.name]:
                value.type.tensor_type.shape.dim.add().dim_value = int(size)
    try:
        inferred = onnx.shape_inference.infer_shapes(fixed, data_prop=True)
    except Exception as exc:  # onnx raises InferenceError and others: declared shapes stand
        logger.debug("shape inference failed, sizing the declared shapes only: %s", exc)
        inferred = fixed
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, int] = {}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        kind = value.type.tensor_type
        types[value.name] = kind.elem_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in kind.shape.dim)
        if kind.HasField("shape") and all(d >= 0 for d in dims):
            shapes[value.name] = dims
    for tensor in graph_outline.graph.initializer:
        shapes[tensor.name] = tuple(tensor.dims)
        types[tensor.name] = tensor.data_type
    return shapes, types


def _pad(size: int) -> int:
    return -(-size // CUBE_BLOCK) * CUBE_BLOCK


def _align(nbytes: int) -> int:
    return -(-nbytes // MEM_ALIGN_SIZE) * MEM_ALIGN_SIZE
