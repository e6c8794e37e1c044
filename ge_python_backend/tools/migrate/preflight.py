"""Checks of an ONNX graph before ATC compiles it: each problem a message naming the model, what
is wrong and what to do.

* What ATC's ONNX parser cannot take (opsets, custom domains, the graph's tensor types):
  `atc_onnx.parse_problems`, the pre-flight `emulator compile` runs too.
* Every input and output of the config has a type the `.om` can hold (`atc_onnx.type_problem`).
* Every -1 axis is set: the batch axis by `max_batch_size`, any other by the config's dims or
  `--gears` (`atc.plan_axes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import DTYPES_BY_TRITON_CONFIG
from ge_python_backend.atc_onnx import graph_type_problems, parse_problems, type_problem
from ge_python_backend.tools.migrate.atc import GearRequest, plan_axes

if TYPE_CHECKING:
    import onnx


def preflight(
    model: str, proto: onnx.ModelProto, config: ModelConfig, gears: Sequence[GearRequest] = ()
) -> list[str]:
    """Every problem ATC (or the plan) would meet compiling `proto` for `model`; [] when none."""
    problems = [f"model {model!r}: {problem}" for problem in parse_problems(proto)]
    problems.extend(config_type_problems(model, proto, config))
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
