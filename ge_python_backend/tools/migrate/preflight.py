"""Checks of an ONNX graph before ATC compiles it: each problem a message naming the model, what
is wrong and what to do.

* What ATC's ONNX parser cannot take (opsets, custom domains, the graph's tensor types):
  `atc_onnx.parse_problems`, the pre-flight `emulator compile` runs too.
* Every input and output of the config has a type the `.om` can hold (`atc_onnx.type_problem`).
* Every -1 axis is set: the batch axis by `max_batch_size`, any other by the config's dims or
  `--gears` (`atc.plan_axes`).
* The config's dims fit the graph (`dims_problems`): an input's rank and every size both fix, an
  output's where the graph fixes its whole shape (exporters leave wrong symbolic output shapes,
  which only the compiled model tells).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import DTYPES_BY_TRITON_CONFIG
from ge_python_backend.atc_onnx import graph_type_problems, parse_problems, type_problem
from ge_python_backend.tools.migrate.atc import GearRequest, graph_inputs, plan_axes

if TYPE_CHECKING:
    import onnx


def preflight(
    model: str, proto: onnx.ModelProto, config: ModelConfig, gears: Sequence[GearRequest] = ()
) -> list[str]:
    """Every problem ATC (or the plan) would meet compiling `proto` for `model`; [] when none."""
    problems = [f"model {model!r}: {problem}" for problem in parse_problems(proto)]
    problems.extend(config_type_problems(model, proto, config))
    problems.extend(dims_problems(model, proto, config))
    for name, axes in plan_axes(model, proto, config, gears).items():
        for axis in axes:
            if axis.problem:
                problems.append(f"model {model!r}, input {name!r}: {axis.problem}")
    return problems


def config_type_problems(model: str, proto: onnx.ModelProto, config: ModelConfig) -> list[str]:
    """A problem per input or output of the config whose type the `.om` cannot hold; a tensor
    the graph's own types already fail (`atc_onnx.graph_type_problems`) is not named again."""
    named = set(graph_type_problems(proto))
    problems = []
    declared = [("input", tensor) for tensor in config.input]
    declared += [("output", tensor) for tensor in config.output]
    for kind, tensor in declared:
        if tensor.data_type == model_config_pb2.TYPE_INVALID or tensor.name in named:
            continue  # the config does not say, or the graph's problem names it
        name = model_config_pb2.DataType.Name(tensor.data_type)
        data_type = DTYPES_BY_TRITON_CONFIG.get(name)
        problem = type_problem(kind, tensor.name, name, data_type, "config.pbtxt")
        if problem:
            named.add(tensor.name)
            problems.append(f"model {model!r}: {problem}")
    return problems


def dims_problems(model: str, proto: onnx.ModelProto, config: ModelConfig) -> list[str]:
    """A problem per config input whose dims (with the batch axis when `max_batch_size` > 0)
    contradict the graph input of its name (rank, or a size both fix), and per config output
    whose dims contradict a graph output of that name whose shape the graph fixes whole."""
    batch = [-1] if config.max_batch_size > 0 else []
    graph = {value.name: ("input", value) for value in graph_inputs(proto)}
    graph.update({value.name: ("output", value) for value in proto.graph.output})
    problems = []
    for kind, tensor in [("input", t) for t in config.input] + [
        ("output", t) for t in config.output
    ]:
        found = graph.get(tensor.name)
        if found is None or found[0] != kind or not tensor.dims:
            continue
        dims = found[1].type.tensor_type.shape.dim
        shape = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in dims]
        if kind == "output" and (not shape or min(shape) < 0):
            continue  # a symbolic output shape: the compiled model tells
        declared = batch + list(tensor.dims)
        if len(declared) != len(shape) or any(
            want >= 0 and have >= 0 and want != have for want, have in zip(declared, shape)
        ):
            problems.append(
                f"model {model!r}, {kind} {tensor.name!r}: the config's dims {list(tensor.dims)} "
                f"({declared} with the batch axis) contradict the graph's {shape} (-1: any size)"
                if batch
                else f"model {model!r}, {kind} {tensor.name!r}: the config's dims "
                f"{list(tensor.dims)} contradict the graph's {shape} (-1: any size)"
            )
    return problems
