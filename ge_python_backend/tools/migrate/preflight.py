"""Checks of an ONNX graph before ATC compiles it: each problem a message naming the model, what
is wrong and what to do.

* The opset of the ONNX domain must be one ATC parses. ATC's ONNX parser registers each operator
  for `ai.onnx::<opset>::<Op>` with opsets 8 to 18 (CANN's `ops/built-in/framework/onnx_plugin/
  *_plugin.cc`, e.g. AveragePool), and CANN's "Supported ONNX Operators" pages give ONNX 1.12.0
  and each operator's opsets (hiascend.com .../aolapi/operatorlist_00177.html).
* One version per domain: a graph importing a domain at two versions is refused by ATC.
* No operators of custom domains: ATC has a parser for the ONNX domain's operators only.
* Every tensor of the graph's inputs, outputs and initializers, and every input and output of
  the config, has a type the `.om` can hold: one of `ascend.DATA_TYPES` numpy holds (the types
  the emulator compiles and the runtime serves). ATC compiles no string tensors (Triton's
  TYPE_STRING, ONNX STRING): such a model stays a Python model, or its strings move out of the
  graph.
* Every -1 axis is set: the batch axis by `max_batch_size`, any other by the config's dims or
  `--gears` (`atc.plan_axes`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import (
    DTYPES_BY_NUMPY,
    DTYPES_BY_ONNX,
    DTYPES_BY_TRITON_CONFIG,
    DataType,
)
from ge_python_backend.tools.migrate.atc import GearRequest, graph_inputs, plan_axes

if TYPE_CHECKING:
    import onnx

ATC_OPSETS = range(8, 19)
ONNX_DOMAINS = ("", "ai.onnx")
_GRAPH = "the ONNX graph"


def preflight(
    model: str, proto: onnx.ModelProto, config: ModelConfig, gears: Sequence[GearRequest] = ()
) -> list[str]:
    """Every problem ATC (or the plan) would meet compiling `proto` for `model`; [] when none."""
    problems = []
    versions: dict[str, set[int]] = {}
    for opset in proto.opset_import:
        domain = "" if opset.domain in ONNX_DOMAINS else opset.domain
        versions.setdefault(domain, set()).add(opset.version)
    for domain, found in sorted(versions.items()):
        if len(found) > 1:
            problems.append(
                f"model {model!r}: the graph imports domain {domain or 'ai.onnx'!r} at "
                f"{len(found)} versions ({', '.join(map(str, sorted(found)))}); ATC takes one "
                "version per domain: convert the graph to one opset "
                "(onnx.version_converter.convert_version)"
            )
    for version in sorted(versions.get("", set())):
        if version not in ATC_OPSETS:
            problems.append(
                f"model {model!r}: ONNX opset {version} is outside what ATC parses "
                f"({ATC_OPSETS.start} to {ATC_OPSETS.stop - 1}): export the model again with an "
                f"opset in that range, or convert it (onnx.version_converter.convert_version)"
            )
    custom: dict[str, set[str]] = {}
    for node in _nodes(proto.graph):
        if node.domain not in ONNX_DOMAINS:
            custom.setdefault(node.domain, set()).add(node.op_type)
    for domain, ops in sorted(custom.items()):
        problems.append(
            f"model {model!r}: operators {', '.join(sorted(ops))} of custom domain {domain!r} "
            "have no ATC parser: replace them with ONNX operators before exporting, or register "
            "a custom operator plugin with CANN"
        )
    problems.extend(type_problems(model, proto, config))
    for name, axes in plan_axes(model, proto, config, gears).items():
        for axis in axes:
            if axis.problem:
                problems.append(f"model {model!r}, input {name!r}: {axis.problem}")
    return problems


def type_problems(model: str, proto: onnx.ModelProto, config: ModelConfig) -> list[str]:
    """A problem per tensor of the graph (inputs, outputs, initializers) or the config (inputs,
    outputs) whose type the `.om` cannot hold; a tensor both give is named once."""
    import onnx

    found: dict[str, str] = {}  # tensor name -> its problem
    graph = proto.graph
    tensors = [("input", value) for value in graph_inputs(proto)]
    tensors += [("output", value) for value in graph.output]
    for kind, value in tensors:
        elem_type = value.type.tensor_type.elem_type
        if elem_type:  # 0: the graph does not say
            name = onnx.TensorProto.DataType.Name(elem_type)
            data_type = DTYPES_BY_ONNX.get(elem_type)
            problem = _type_problem(kind, value.name, name, data_type, _GRAPH)
            if problem:
                found.setdefault(value.name, problem)
    for initializer in graph.initializer:
        name = onnx.TensorProto.DataType.Name(initializer.data_type)
        data_type = DTYPES_BY_ONNX.get(initializer.data_type)
        problem = _type_problem("initializer", initializer.name, name, data_type, _GRAPH)
        if problem:
            found.setdefault(initializer.name, problem)
    declared = [("input", tensor) for tensor in config.input]
    declared += [("output", tensor) for tensor in config.output]
    for kind, tensor in declared:
        if tensor.data_type == model_config_pb2.TYPE_INVALID:  # the config does not say
            continue
        name = model_config_pb2.DataType.Name(tensor.data_type)
        data_type = DTYPES_BY_TRITON_CONFIG.get(name)
        problem = _type_problem(kind, tensor.name, name, data_type, "config.pbtxt")
        if problem:
            found.setdefault(tensor.name, problem)
    return [f"model {model!r}, {problem}" for problem in found.values()]


def _type_problem(
    kind: str, tensor: str, type_name: str, data_type: DataType | None, where: str
) -> str | None:
    """What to do about `tensor` of type `type_name` (as `where` names it); None when the `.om`
    holds it."""
    if data_type is not None and data_type.numpy is not None:
        return None
    what = f"{kind} {tensor!r} is {type_name} in {where}"
    if data_type is not None and data_type.acl_name == "ACL_STRING":
        return (
            f"{what}: a string tensor, and ATC compiles no string tensors; keep the model as a "
            "Python model, or move the strings out of the graph (turn them into numbers, e.g. "
            "token ids, in a Python model or ensemble step before it)"
        )
    supported = ", ".join(
        str(t.onnx_name if where == _GRAPH else t.triton_config) for t in DTYPES_BY_NUMPY.values()
    )
    return (
        f"{what}, a type the .om cannot hold (ATC and this backend take {supported}); cast it "
        "to one of those in the graph, or keep the model as a Python model"
    )


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of `graph` and of its subgraphs (If, Loop, Scan bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)
