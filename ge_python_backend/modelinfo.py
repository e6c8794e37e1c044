"""What a model takes, returns and runs: one tensor record, one gear record, and their text.

The runtime fills them from an `.om`; scaffold also builds them from `NAME:TYPE:DIMS`
declarations; the repository layer and the tools read them. A gear is one input shape choice
compiled into the model; `GearInfo` is the model's gear table. `SessionCounters` is what a
session counts (a `Session` in this process, or one in the device host). Imports only numpy and
`ascend`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ge_python_backend.ascend import DTYPES_BY_TRITON, GearKind

__all__ = ["GearInfo", "SessionCounters", "Shape", "TensorSpec", "gears_text", "shape_fits"]

Shape = tuple[int, ...]


def shape_fits(shape: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether every tensor of `shape` fits `dims` (-1: any size on that axis): the same rank and
    every fixed axis of `dims` equal; a -1 in `shape` (a declared shape) fits only a -1."""
    return len(shape) == len(dims) and all(
        want < 0 or want == have for have, want in zip(shape, dims)
    )


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A model input or output as callers see it."""

    name: str
    dtype: np.dtype[Any]  # numpy dtype; object for a declared type numpy cannot hold (BYTES, BF16)
    triton_dtype: str  # Triton protocol name: "FP32", "INT64", ...
    shape: Shape  # full .om shape, batch axis included, -1 on dynamic axes
    format: str = "ND"  # "NCHW", "ND", ... (Format names)

    @classmethod
    def declared(cls, name: str, triton_dtype: str, shape: Shape) -> TensorSpec:
        """A tensor declared by its Triton type (e.g. `NAME:TYPE:DIMS`), without an `.om`."""
        data_type = DTYPES_BY_TRITON.get(triton_dtype)
        numpy = None if data_type is None else data_type.numpy
        return cls(name, np.dtype(object) if numpy is None else numpy, triton_dtype, shape)


@dataclasses.dataclass(frozen=True)
class GearInfo:
    """The model's gear table: what shapes it runs (default: static, no batch axis).

    `batch_gears` are the row counts one execution takes: the gears of a dynamic-batch model, or
    the fixed axis 0 of any other batched model. `dims_gears` holds, per gear, every input's full
    shape. `side_inputs` are the inputs of a dynamic-batch model without the batch axis (ATC
    leaves inputs without -1 as they are): every execution gets them whole.
    """

    kind: GearKind = GearKind.STATIC
    batched: bool = False  # axis 0 of every output and every input but side_inputs is a batch axis
    batch_gears: tuple[int, ...] = ()
    hw_gears: tuple[tuple[int, int], ...] = ()
    dims_gears: tuple[tuple[Shape, ...], ...] = ()
    max_batch: int = 0  # most rows one execution takes (0 when not batched)
    side_inputs: tuple[str, ...] = ()

    @property
    def every_input_batched(self) -> bool:
        """Batched with the batch axis on every input: what Triton's batch dimension (a
        `max_batch_size` above 0) needs, since it applies to every input."""
        return self.batched and not self.side_inputs


def gears_text(gears: GearInfo, inputs: Sequence[TensorSpec]) -> str:
    """The gears as messages and logs show them: `1,2,4,8` (batch sizes), `16x16; 32x32`
    (height x width), `a (1, 8), b (1, 8); a (2, 16), b (2, 16)` (every input's shape per dims
    gear), or `static shapes (2, 8), (2, 8)`."""
    if gears.kind == GearKind.BATCH:
        return ",".join(map(str, gears.batch_gears))
    if gears.kind == GearKind.HW:
        return "; ".join(f"{height}x{width}" for height, width in gears.hw_gears)
    if gears.kind == GearKind.DIMS:
        return "; ".join(
            ", ".join(f"{spec.name} {shape}" for spec, shape in zip(inputs, gear))
            for gear in gears.dims_gears
        )
    return "static shapes " + ", ".join(str(spec.shape) for spec in inputs)


@dataclasses.dataclass
class SessionCounters:
    """Cumulative since the session opened, the same at every pipeline depth.

    Seconds are device time, measured with ACL events recorded on each lane's stream around the
    execution (`execute_seconds`: its rate is the share of time the device was executing for this
    session) and around the copies (`h2d_seconds`, `d2h_seconds`), on the executions
    `DeviceTimeSampler` times; the others add their gear's recent times. Failed executions count
    in `failed_executions` only.
    """

    executions: int = 0
    rows: int = 0  # real rows run (padding excluded)
    padded_rows: int = 0
    execute_seconds: float = 0.0
    h2d_bytes: int = 0
    h2d_seconds: float = 0.0
    d2h_bytes: int = 0
    d2h_seconds: float = 0.0
    failed_executions: int = 0
    device_bytes_held: int = 0
    # held now, not cumulative: the shared work spaces of the stream pool the session's lanes
    # are seated in (a device host's, `runtime/workspaces.py`), its streams and their I/O areas
    # (the seated lanes' input and output buffers); 0 without one
    work_space_bytes: int = 0
    work_space_streams: int = 0
    io_area_bytes: int = 0

    @property
    def device_seconds(self) -> float:
        """Device time of the executions: copy in, execute, copy out."""
        return self.h2d_seconds + self.execute_seconds + self.d2h_seconds
