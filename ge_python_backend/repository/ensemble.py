"""Check an ensemble's config (`platform: "ensemble"`) against the models of its repository.

What Triton 2.51 refuses to load, checked in one pass so that every problem is reported at once:

* the ensemble's own fields: `ensemble_scheduling` with at least one step, each naming a model,
  an `input_map` and an `output_map`; no `instance_group`, `optimization` or `model_warmup`;
* each step's model: a directory of the repository (with the version the step asks for), valid,
  and with a `max_batch_size` of 0 or at least the ensemble's;
* each `input_map` key an input of the step's model and each `output_map` key one of its
  outputs (their configs as Triton completes them: `report.ModelReport.served_config`),
  every input of the model fed (unless `optional`), each tensor produced by one step only;
* the data flow: every `input_map` value an ensemble input or another step's output, every
  ensemble input used, every ensemble output produced, every step's output read by a step or
  returned, and every step reachable from the ensemble inputs (no cycle);
* each connection's data type and shape: equal, -1 matching any size, and a batched model's
  dims compared with the batch axis added when the other side gives full shapes (Triton's
  `ValidateTensorConsistency`). The ensemble's own tensors count with their `reshape`.

A step model whose tensors are not known here (a Python model of someone else's without a
config declaring them: its `auto_complete_config` decides) is a note: its tensors are not checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.repository.report import ModelReport

ENSEMBLE_PLATFORM = "ensemble"


def is_ensemble(config: ModelConfig) -> bool:
    """Whether `config` is an ensemble's (its platform, or its scheduler, says so)."""
    return config.platform == ENSEMBLE_PLATFORM or config.HasField("ensemble_scheduling")


@dataclasses.dataclass(frozen=True)
class _Side:
    """One end of a connection: where it is (for messages), its data type and dims."""

    where: str  # "ensemble input 'raw'", "step 0 (model 'pre') output 'OUT'"
    data_type: int
    dims: tuple[int, ...]
    batched: bool

    @property
    def full_dims(self) -> tuple[int, ...]:
        return ((-1,) if self.batched else ()) + self.dims

    def describe(self) -> str:
        type_name = model_config_pb2.DataType.Name(self.data_type)
        return f"{self.where} {type_name} {list(self.full_dims)}"


def _dims_match(left: Sequence[int], right: Sequence[int]) -> bool:
    return len(left) == len(right) and all(
        a == b or a == -1 or b == -1 for a, b in zip(left, right)
    )


def _connection_problem(source: _Side, target: _Side) -> str | None:
    """What makes `source` unfit to feed `target`, or None."""
    if source.data_type != target.data_type:
        return f"data types differ: {source.describe()} feeds {target.describe()}"
    if not _dims_match(source.dims, target.dims) and not _dims_match(
        source.full_dims, target.full_dims
    ):
        return f"shapes differ: {source.describe()} feeds {target.describe()}"
    return None


def _ensemble_side(config: ModelConfig, tensor: Any, kind: str) -> _Side:
    dims = tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims
    return _Side(
        f"ensemble {kind} {tensor.name!r}",
        tensor.data_type,
        tuple(dims),
        config.max_batch_size > 0,
    )


@dataclasses.dataclass
class _Step:
    index: int
    model: str
    inputs: dict[str, str]  # model input -> ensemble tensor
    outputs: dict[str, str]  # model output -> ensemble tensor
    version: int

    @property
    def label(self) -> str:
        return f"step {self.index} (model {self.model!r})"


def _own_fields(config: ModelConfig, steps: Sequence[_Step]) -> list[str]:
    """Problems of the ensemble's own config fields (Triton's checks before any step model)."""
    problems = []
    if config.platform != ENSEMBLE_PLATFORM:
        problems.append(
            f"ensemble_scheduling is set but the platform is {config.platform!r}, not "
            f"{ENSEMBLE_PLATFORM!r}"
        )
    if not config.HasField("ensemble_scheduling"):
        problems.append("platform 'ensemble' needs ensemble_scheduling with its steps")
    elif not steps:
        problems.append("ensemble_scheduling has no step")
    for field, what in (
        ("instance_group", "instance_group"),
        ("model_warmup", "model_warmup"),
    ):
        if len(getattr(config, field)):
            problems.append(f"an ensemble cannot have {what} (Triton refuses it)")
    if config.HasField("optimization"):
        problems.append("an ensemble cannot have optimization (Triton refuses it)")
    for step in steps:
        if not step.model:
            problems.append(f"step {step.index} names no model_name")
        if not step.inputs:
            problems.append(f"{step.label} has no input_map")
        if not step.outputs:
            problems.append(f"{step.label} has no output_map")
    return problems


def _producers(steps: Sequence[_Step]) -> tuple[dict[str, tuple[_Step, str]], list[str]]:
    """`{ensemble tensor: (step, model output)}` and the tensors written more than once."""
    producers: dict[str, tuple[_Step, str]] = {}
    problems = []
    for step in steps:
        for output, tensor in step.outputs.items():
            if tensor in producers:
                first, first_output = producers[tensor]
                problems.append(
                    f"tensor {tensor!r} is written by {first.label} output {first_output!r} "
                    f"and by {step.label} output {output!r}; each tensor has one producer"
                )
            else:
                producers[tensor] = (step, output)
    return producers, problems


def _data_flow(
    config: ModelConfig, steps: Sequence[_Step], producers: Mapping[str, tuple[_Step, str]]
) -> list[str]:
    """Problems of the graph: unfed or unreachable steps, unused inputs and tensors, ensemble
    outputs never written."""
    problems = []
    inputs = [tensor.name for tensor in config.input]
    outputs = {tensor.name for tensor in config.output}
    read = {tensor for step in steps for tensor in step.inputs.values()}
    for step in steps:
        for model_input, tensor in step.inputs.items():
            if tensor not in inputs and tensor not in producers:
                problems.append(
                    f"{step.label} input {model_input!r} reads {tensor!r}, which is neither an "
                    "ensemble input nor any step's output"
                )
    for name in inputs:
        if name not in read:
            problems.append(f"ensemble input {name!r} is not read by any step")
    ready = set(inputs)
    pending = list(steps)
    while True:
        runnable = [step for step in pending if set(step.inputs.values()) <= ready]
        if not runnable:
            break
        for step in runnable:
            ready |= set(step.outputs.values())
            pending.remove(step)
    for step in pending:  # the unfed ones are reported above
        if all(tensor in inputs or tensor in producers for tensor in step.inputs.values()):
            waiting = sorted(tensor for tensor in step.inputs.values() if tensor not in ready)
            problems.append(
                f"{step.label} never runs: its inputs {waiting} are written by steps "
                "that never run (a cycle)"
            )
    for name in sorted(outputs):
        if name not in producers:
            problems.append(f"ensemble output {name!r} is not written by any step")
        elif name not in ready:
            problems.append(
                f"ensemble output {name!r} is written by {producers[name][0].label}, "
                "which never runs"
            )
    for tensor, (step, output) in producers.items():
        if tensor not in outputs and tensor not in read:
            problems.append(
                f"{step.label} output {output!r} writes {tensor!r}, which no step reads and "
                "is not an ensemble output (Triton refuses unused tensors)"
            )
    return problems


@dataclasses.dataclass(frozen=True)
class _Tensors:
    """The known sides of the ensemble's tensors: its inputs, its outputs and what the steps
    whose models are known write."""

    inputs: Mapping[str, _Side]
    outputs: Mapping[str, _Side]
    written: Mapping[str, _Side]


def _model_side(step: _Step, kind: str, name: str, entry: Any, batched: bool) -> _Side:
    return _Side(f"{step.label} {kind} {name!r}", entry.data_type, tuple(entry.dims), batched)


def _step_problems(
    config: ModelConfig, step: _Step, report: ModelReport, tensors: _Tensors, notes: list[str]
) -> list[str]:
    """Problems of one step against its model's served config (notes: what is not checked)."""
    if step.version > 0 and str(step.version) not in report.versions:
        return [
            f"{step.label} asks for version {step.version}, which the model does not have "
            f"(versions: {', '.join(report.versions) or 'none'})"
        ]
    problems = []
    if not report.ok and report.name != config.name:  # itself: a cycle, reported as one
        problems.append(
            f"{step.label}: the model is invalid (see its problems), so Triton will not load "
            "this ensemble"
        )
    served = report.served_config
    if served is None:
        if report.ok:  # an invalid model's problem above says it all
            notes.append(f"{step.label}: tensors not checked: {report.served_config_unknown}")
        return problems
    if 0 < served.max_batch_size < config.max_batch_size:
        problems.append(
            f"{step.label} has max_batch_size {served.max_batch_size}, below the ensemble's "
            f"{config.max_batch_size}"
        )
    batched = served.max_batch_size > 0
    model_inputs = {tensor.name: tensor for tensor in served.input}
    model_outputs = {tensor.name: tensor for tensor in served.output}
    for name, tensor in step.inputs.items():
        if name not in model_inputs:
            problems.append(
                f"{step.label}: input_map key {name!r} (fed from {tensor!r}) is not an input "
                f"of the model; it has {sorted(model_inputs)}"
            )
            continue
        source = tensors.inputs.get(tensor) or tensors.written.get(tensor)
        target = _model_side(step, "input", name, model_inputs[name], batched)
        problem = None if source is None else _connection_problem(source, target)
        if problem:
            problems.append(f"tensor {tensor!r}: {problem}")
    for name, entry in model_inputs.items():
        if name not in step.inputs and not entry.optional:
            problems.append(
                f"{step.label}: model input {name!r} is not fed (no input_map entry for it)"
            )
    for name, tensor in step.outputs.items():
        if name not in model_outputs:
            problems.append(
                f"{step.label}: output_map key {name!r} (writing {tensor!r}) is not an output "
                f"of the model; it has {sorted(model_outputs)}"
            )
            continue
        returned = tensors.outputs.get(tensor)
        source = _model_side(step, "output", name, model_outputs[name], batched)
        problem = None if returned is None else _connection_problem(source, returned)
        if problem:
            problems.append(f"tensor {tensor!r}: {problem}")
    return problems


def _written(steps: Sequence[_Step], models: Mapping[str, ModelReport]) -> dict[str, _Side]:
    """`{ensemble tensor: the step output writing it}` for the steps whose models are known."""
    sides = {}
    for step in steps:
        report = models.get(step.model)
        served = report.served_config if report is not None else None
        if served is None:
            continue
        outputs = {tensor.name: tensor for tensor in served.output}
        for name, tensor in step.outputs.items():
            if name in outputs and tensor not in sides:
                batched = served.max_batch_size > 0
                sides[tensor] = _model_side(step, "output", name, outputs[name], batched)
    return sides


def _steps(config: ModelConfig) -> list[_Step]:
    return [
        _Step(
            index,
            step.model_name,
            dict(sorted(step.input_map.items())),  # protobuf maps have no order
            dict(sorted(step.output_map.items())),
            int(step.model_version),
        )
        for index, step in enumerate(config.ensemble_scheduling.step)
    ]


def check_ensemble(
    config: ModelConfig, models: Mapping[str, ModelReport]
) -> tuple[list[str], list[str]]:
    """`(problems, notes)` of the ensemble `config` among the repository's validated `models`
    (by name); see the module docstring for what is checked."""
    steps = _steps(config)
    problems = _own_fields(config, steps)
    producers, written_twice = _producers(steps)
    problems += written_twice
    problems += _data_flow(config, steps, producers)
    tensors = _Tensors(
        inputs={tensor.name: _ensemble_side(config, tensor, "input") for tensor in config.input},
        outputs={tensor.name: _ensemble_side(config, tensor, "output") for tensor in config.output},
        written=_written(steps, models),
    )
    notes: list[str] = []
    for step in steps:
        if not step.model:
            continue
        report = models.get(step.model)
        if report is None:
            problems.append(f"{step.label}: no model {step.model!r} in the repository")
        else:
            problems += _step_problems(config, step, report, tensors, notes)
    return problems, notes
