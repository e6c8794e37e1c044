"""The gear table: every input configuration a model runs, how to select it, what it outputs."""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.ascend import GearKind
from ge_python_backend.modelinfo import GearInfo, Shape, gears_text
from ge_python_backend.runtime.batching import normalize_gears
from ge_python_backend.runtime.errors import ModelFileError
from ge_python_backend.runtime.model import Dataset, Model, ModelDescription

__all__ = ["Gear", "GearTable"]

logger = logging.getLogger(__name__)

OutputKey = tuple[int, int]  # (index in the gear table, batch gear or 0)


@dataclasses.dataclass(frozen=True)
class Gear:
    """One input configuration the model runs: a gear, or the static shapes."""

    shapes: tuple[Shape, ...]  # every input's full shape; dynamic batch keeps -1 on axis 0
    values: tuple[int, ...] = ()  # for the set_* call: (h, w), or the dims in the model's order


class GearTable:
    """The gears of a model, its output shapes per gear, and the set_* call for each.

    Output shapes are read once per gear with `acl.mdl.get_cur_output_dims` after selecting it
    (`read_outputs`), so they are what the device will produce.
    """

    def __init__(self, desc: ModelDescription, path: Path) -> None:
        self.kind = desc.gears.kind
        self.gears = _gears(desc, path)
        self.batch_sizes = desc.gears.batch_gears  # the dynamic batch gears (empty otherwise)
        # per input: whether axis 0 is the batch axis (False for a batch model's side inputs;
        # `_gear_info` sets it for the other kinds once the outputs are known)
        self.batched_inputs = tuple(
            self.kind == GearKind.BATCH and info.spec.shape[:1] == (-1,) for info in desc.inputs
        )
        self.output_shapes: dict[OutputKey, list[Shape]] = {}
        self._desc = desc
        self._path = path
        # a dims model whose gears vary the rows: its families run as batch gears do (unless
        # an output lacks those rows on axis 0: `read_outputs` then goes back to plain gears)
        self._plain_gears = self.gears
        self._dims_values = [gear.values for gear in self.gears]
        self._row_gears: dict[tuple[int, int], int] = {}
        families = _row_families(self.gears) if self.kind == GearKind.DIMS else None
        if families is not None:
            self.gears, self._row_gears, self.batch_sizes = families
            self.batched_inputs = tuple(True for _ in desc.inputs)

    def read_outputs(self, model: Model, inputs: Dataset) -> GearInfo:
        """Read every gear's output shapes (selecting it on `model` and `inputs`); the gear info.

        Call once, before any execution: the buffers are sized from these shapes.
        """
        desc = self._desc
        for number in range(len(self.gears)):
            for batch in self.batch_sizes or (0,):
                if self.kind == GearKind.STATIC:
                    shapes = [info.spec.shape for info in desc.outputs]
                else:
                    self.select(model, inputs, number, batch)
                    shapes = model.current_output_shapes()
                self.output_shapes[(number, batch)] = shapes
        if self._row_gears and any(
            not shape or shape[0] != batch
            for (_, batch), shapes in self.output_shapes.items()
            for shape in shapes
        ):
            logger.info(
                "%s: an output lacks the rows of the dims gears on axis 0; each request runs "
                "its gear as sent",
                self._path,
            )
            self.gears, self._row_gears, self.batch_sizes = self._plain_gears, {}, ()
            self.batched_inputs = tuple(False for _ in desc.inputs)
            self.output_shapes.clear()
            return self.read_outputs(model, inputs)
        self.info = self._gear_info(desc, self._path)
        return self.info

    def described_outputs(self) -> tuple[GearInfo, list[Shape]]:
        """The gear info and output shapes from the description alone (no loaded model, so no
        `get_cur_output_dims`): batch gears put the batch on axis 0 of the shapes
        `get_output_dims` reports; HW and dims gears may change any output axis, so every axis
        is -1 but a batch axis 0 shared by all inputs and outputs."""
        desc = self._desc
        reported = [info.spec.shape for info in desc.outputs]
        if self.kind == GearKind.BATCH or self._row_gears:
            for batch in self.batch_sizes:
                self.output_shapes[(0, batch)] = [(batch, *shape[1:]) for shape in reported]
        else:
            self.output_shapes[(0, 0)] = reported
        self.info = self._gear_info(desc, self._path)
        if self.kind in (GearKind.HW, GearKind.DIMS):
            kept = 1 if self.info.batched else 0
            return self.info, [(*s[:kept], *(-1 for _ in s[kept:])) for s in reported]
        return self.info, [self.merged_output_shape(n) for n in range(len(reported))]

    @property
    def input_ranges(self) -> list[tuple[tuple[int, int], ...]]:
        """Each input's shape range ((lower, upper) per dim; () for an input without one)."""
        return [info.ranges for info in self._desc.inputs]

    def select(self, model: Model, inputs: Dataset, gear: int, batch: int) -> None:
        """The set_* call for gear `gear` (batch gear `batch` for a dynamic-batch model)."""
        if self.kind == GearKind.BATCH:
            model.set_dynamic_batch_size(inputs, batch)
        elif self.kind == GearKind.HW:
            height, width = self.gears[gear].values
            model.set_dynamic_hw_size(inputs, height, width)
        elif self.kind == GearKind.DIMS:
            number = self._row_gears[(gear, batch)] if self._row_gears else gear
            model.set_input_dynamic_dims(inputs, self._dims_values[number])

    def output_key(self, gear: int, batch: int) -> OutputKey:
        """The key of `output_shapes` for an execution of `gear` with `batch` rows run."""
        return (gear, batch if self.kind == GearKind.BATCH or self._row_gears else 0)

    def input_shapes(self, gear: int, batch: int) -> list[Shape]:
        """Concrete input shapes of an execution (`batch` 0: as the gear says; side inputs
        keep their shape)."""
        return [
            _with_batch(shape, batch if batched else 0)
            for shape, batched in zip(self.gears[gear].shapes, self.batched_inputs)
        ]

    def input_bytes(self, number: int, dtype: np.dtype[Any]) -> int:
        """Bytes input `number` needs in the largest execution of any gear."""
        largest = max(self.batch_sizes, default=0) if self.batched_inputs[number] else 0
        return max(
            math.prod(_with_batch(g.shapes[number], largest)) * dtype.itemsize for g in self.gears
        )

    def output_bytes(self, number: int, dtype: np.dtype[Any]) -> int:
        """Bytes output `number` needs in the largest execution of any gear."""
        every = [shapes[number] for shapes in self.output_shapes.values()]
        return max(math.prod(shape) * dtype.itemsize for shape in every)

    def merged_output_shape(self, number: int) -> Shape:
        """One shape for output `number` across gears: -1 on axes where gears differ."""
        every = [shapes[number] for shapes in self.output_shapes.values()]
        return tuple(dims[0] if len(set(dims)) == 1 else -1 for dims in zip(*every))

    def text(self) -> str:
        """The gears as messages show them (`modelinfo.gears_text`); after `read_outputs`."""
        return gears_text(self.info, [info.spec for info in self._desc.inputs])

    def _gear_info(self, desc: ModelDescription, path: Path) -> GearInfo:
        """The description's gears, with the batch axis a non-batch-gear model has fixed."""
        if self.kind == GearKind.BATCH or self._row_gears:
            for (_, batch), shapes in self.output_shapes.items():
                for info, shape in zip(desc.outputs, shapes):
                    if not shape or shape[0] != batch:
                        raise ModelFileError(
                            f"{path}: output {info.spec.name!r} has shape {shape} at batch "
                            f"gear {batch}; expected the batch on axis 0"
                        )
            batch_gears = normalize_gears(self.batch_sizes)
        elif desc.dynamic_shape:
            batch_gears = ()  # every execution runs one request with its own shapes
        else:
            every = [s for g in self.gears for s in g.shapes]
            every += [s for shapes in self.output_shapes.values() for s in shapes]
            heads = {shape[0] if shape else 0 for shape in every}
            batch_gears = (heads.pop(),) if len(heads) == 1 and min(heads) > 0 else ()
            self.batched_inputs = tuple(bool(batch_gears) for _ in desc.inputs)
        return dataclasses.replace(
            desc.gears,
            batched=bool(batch_gears),
            batch_gears=batch_gears,
            max_batch=max(batch_gears, default=0),
            side_inputs=tuple(
                info.spec.name
                for info, batched in zip(desc.inputs, self.batched_inputs)
                if batch_gears and not batched
            ),
        )


def _gears(desc: ModelDescription, path: Path) -> list[Gear]:
    """The input configurations the model runs, with every input's full shape."""
    shapes = tuple(info.spec.shape for info in desc.inputs)
    names = [info.spec.name for info in desc.inputs]
    gears = desc.gears
    if gears.kind == GearKind.STATIC:
        return [Gear(shapes)]
    if gears.kind == GearKind.BATCH:
        # ATC leaves inputs without -1 unchanged (option_utils.cc
        # CheckDynamicBatchSizeInputShapeValid): those are side inputs, passed whole
        for name, shape in zip(names, shapes):
            if -1 in shape and (shape[0] != -1 or -1 in shape[1:]):
                raise ModelFileError(
                    f"{path}: dynamic-batch input {name!r} has dims {list(shape)}; expected -1 "
                    "on axis 0 only (or no -1: a side input without the batch axis)"
                )
        if not any(shape[:1] == (-1,) for shape in shapes):
            raise ModelFileError(
                f"{path}: the model has batch gears but no input with -1 on axis 0 "
                f"({', '.join(f'{n} {list(s)}' for n, s in zip(names, shapes))})"
            )
        return [Gear(shapes)]
    if gears.kind == GearKind.HW:
        for name, shape in zip(names, shapes):
            if shape.count(-1) not in (0, 2):
                raise ModelFileError(
                    f"{path}: dynamic-HW input {name!r} has dims {list(shape)}; expected -1 on "
                    "exactly the H and W axes"
                )
        return [
            Gear(
                tuple(_fill(shape, info.hw_dims(h, w)) for shape, info in zip(shapes, desc.inputs)),
                (h, w),
            )
            for h, w in gears.hw_gears
        ]
    table = []
    for gear, values in zip(gears.dims_gears, desc.dims_values):
        for name, shape, concrete in zip(names, shapes, gear):
            if len(shape) != len(concrete) or not all(
                s in (-1, c) for s, c in zip(shape, concrete)
            ):
                raise ModelFileError(
                    f"{path}: dims gear {[list(s) for s in gear]} gives input {name!r} the shape "
                    f"{list(concrete)}, which does not fit its dims {list(shape)}"
                )
        table.append(Gear(gear, values))
    return table


def _row_families(
    gears: Sequence[Gear],
) -> tuple[list[Gear], dict[tuple[int, int], int], tuple[int, ...]] | None:
    """Dims gears that vary the rows, as batch gears of families: when axis 0 of every input
    takes one size per gear, shared by every input, and every family of gears equal past axis 0
    has the same sizes there (ATC's gears of batch sizes times other sizes, as `migrate`
    compiles them). Returns the families (axis 0 -1), the dims gear of each (family, rows) and
    the row sizes; None for any other dims model (its requests run their gear as sent)."""
    families: dict[tuple[Shape, ...], dict[int, int]] = {}
    for number, gear in enumerate(gears):
        heads = {shape[0] if shape else 0 for shape in gear.shapes}
        if len(heads) != 1 or min(heads) < 1:
            return None
        rest = tuple(shape[1:] for shape in gear.shapes)
        families.setdefault(rest, {})[heads.pop()] = number
    sizes = {tuple(sorted(rows)) for rows in families.values()}
    if len(sizes) != 1:
        return None
    (batch_sizes,) = sizes
    if len(batch_sizes) < 2:
        return None
    table = [Gear(tuple((-1, *shape) for shape in rest)) for rest in families]
    numbers = {
        (family, rows): number
        for family, by_rows in enumerate(families.values())
        for rows, number in by_rows.items()
    }
    return table, numbers, batch_sizes


def _fill(shape: Shape, values: Sequence[int]) -> Shape:
    """`shape` with its -1 dims replaced by `values`, in order."""
    remaining = iter(values)
    return tuple(next(remaining) if d == -1 else d for d in shape)


def _with_batch(shape: Shape, batch: int) -> Shape:
    """`shape` with axis 0 set to `batch` (unless `batch` is 0)."""
    return (batch, *shape[1:]) if batch else shape
