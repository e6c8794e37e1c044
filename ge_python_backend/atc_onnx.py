"""What ATC's ONNX parser cannot take: the one pre-flight of `emulator compile` and `migrate`.

* The opset of the ONNX domain must be one ATC parses. ATC's ONNX parser registers each operator
  for `ai.onnx::<opset>::<Op>` with opsets 8 to 18 (CANN's `ops/built-in/framework/onnx_plugin/
  *_plugin.cc`, e.g. AveragePool), and CANN's "Supported ONNX Operators" pages give ONNX 1.12.0
  and each operator's opsets (hiascend.com .../aolapi/operatorlist_00177.html).
* One version per domain: a graph importing a domain at two versions is refused by ATC.
* No operators of custom domains (com.microsoft's DynamicQuantizeLSTM, QLinear*, ...): ATC has
  a parser for the ONNX domain's operators only.
* Every tensor of the graph's inputs, outputs and initializers has a type the `.om` can hold:
  one of `ascend.DATA_TYPES` numpy holds. ATC compiles no string tensors.

Each problem is a sentence saying what is wrong and what to do, without the model's name: the
caller puts it in front (`migrate` its model name, `emulator compile` its --model file).

Imports onnx only for type checking; the protos are the caller's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ge_python_backend.ascend import DTYPES_BY_NUMPY, DTYPES_BY_ONNX, DataType

if TYPE_CHECKING:
    import onnx

ATC_OPSETS = range(8, 19)
ONNX_DOMAINS = ("", "ai.onnx")
GRAPH = "the ONNX graph"


def parse_problems(proto: onnx.ModelProto) -> list[str]:
    """Every reason ATC's ONNX parser refuses `proto`: opsets, custom domains, tensor types."""
    problems = []
    versions: dict[str, set[int]] = {}
    for opset in proto.opset_import:
        domain = "" if opset.domain in ONNX_DOMAINS else opset.domain
        versions.setdefault(domain, set()).add(opset.version)
    for domain, found in sorted(versions.items()):
        if len(found) > 1:
            problems.append(
                f"the graph imports domain {domain or 'ai.onnx'!r} at {len(found)} versions "
                f"({', '.join(map(str, sorted(found)))}); ATC takes one version per domain: "
                "convert the graph to one opset (onnx.version_converter.convert_version)"
            )
    for version in sorted(versions.get("", set())):
        if version not in ATC_OPSETS:
            problems.append(
                f"ONNX opset {version} is outside what ATC parses ({ATC_OPSETS.start} to "
                f"{ATC_OPSETS.stop - 1}): export the model again with an opset in that range, "
                "or convert it (onnx.version_converter.convert_version)"
            )
    custom: dict[str, set[str]] = {}
    for node in _nodes(proto.graph):
        if node.domain not in ONNX_DOMAINS:
            custom.setdefault(node.domain, set()).add(node.op_type)
    for domain, ops in sorted(custom.items()):
        problems.append(
            f"operators {', '.join(sorted(ops))} of custom domain {domain!r} have no ATC "
            "parser: replace them with ONNX operators before exporting (an onnxruntime-quantized "
            "model: compile its float model, and quantize for Ascend with AMCT), or register a "
            "custom operator plugin with CANN"
        )
    problems.extend(graph_type_problems(proto).values())
    return problems


def graph_type_problems(proto: onnx.ModelProto) -> dict[str, str]:
    """Tensor name -> its problem, for each graph input, output and initializer whose type the
    `.om` cannot hold (a tensor named twice is named once)."""
    import onnx

    found: dict[str, str] = {}
    graph = proto.graph
    initializers = {init.name for init in graph.initializer}
    tensors = [("input", value) for value in graph.input if value.name not in initializers]
    tensors += [("output", value) for value in graph.output]
    for kind, value in tensors:
        elem_type = value.type.tensor_type.elem_type
        if elem_type:  # 0: the graph does not say
            name = onnx.TensorProto.DataType.Name(elem_type)
            problem = type_problem(kind, value.name, name, DTYPES_BY_ONNX.get(elem_type), GRAPH)
            if problem:
                found.setdefault(value.name, problem)
    for initializer in graph.initializer:
        name = onnx.TensorProto.DataType.Name(initializer.data_type)
        data_type = DTYPES_BY_ONNX.get(initializer.data_type)
        problem = type_problem("initializer", initializer.name, name, data_type, GRAPH)
        if problem:
            found.setdefault(initializer.name, problem)
    return found


def type_problem(
    kind: str, tensor: str, type_name: str, data_type: DataType | None, where: str
) -> str | None:
    """What to do about `tensor` of type `type_name` (as `where` names it: `GRAPH` or a config
    file); None when the `.om` holds it."""
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
        str(t.onnx_name if where == GRAPH else t.triton_config) for t in DTYPES_BY_NUMPY.values()
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
