"""Checks of an ONNX graph before ATC compiles it: each problem a message naming the model, what
is wrong and what to do.

* The opset of the ONNX domain must be one ATC parses. ATC's ONNX parser registers each operator
  for `ai.onnx::<opset>::<Op>` with opsets 8 to 18 (CANN's `ops/built-in/framework/onnx_plugin/
  *_plugin.cc`, e.g. AveragePool), and CANN's "Supported ONNX Operators" pages give ONNX 1.12.0
  and each operator's opsets (hiascend.com .../aolapi/operatorlist_00177.html).
* One version per domain: a graph importing a domain at two versions is refused by ATC.
* No operators of custom domains: ATC has a parser for the ONNX domain's operators only.
* Every -1 axis is set: the batch axis by `max_batch_size`, any other by the config's dims or
  `--gears` (`atc.plan_axes`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.tools.migrate.atc import GearRequest, plan_axes

if TYPE_CHECKING:
    import onnx

ATC_OPSETS = range(8, 19)
ONNX_DOMAINS = ("", "ai.onnx")


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
    for name, axes in plan_axes(model, proto, config, gears).items():
        for axis in axes:
            if axis.problem:
                problems.append(f"model {model!r}, input {name!r}: {axis.problem}")
    return problems


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of `graph` and of its subgraphs (If, Loop, Scan bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.HasField("g"):
                yield from _nodes(attribute.g)
            for subgraph in attribute.graphs:
                yield from _nodes(subgraph)
