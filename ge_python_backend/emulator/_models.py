"""Loaded models, model descriptions and the execution of a model on datasets.

A gear model reports one extra, last input `ascend_mbatch_shape_data` (INT64, ND). `set_*` calls
write the selected gear into its device buffer as int64 values and `execute` reads it back from
there, as on the real device.
"""

from __future__ import annotations

import ctypes
import math
import struct
from dataclasses import dataclass

import numpy as np

from ge_python_backend.emulator import timing
from ge_python_backend.emulator._memory import MEMORY, Span
from ge_python_backend.emulator._state import (
    POISON,
    STATE,
    AclFailure,
    Context,
    DataBuffer,
    Dataset,
)
from ge_python_backend.emulator.omfile import ACL_DTYPE_TO_NUMPY, OmModel, OmTensor

MBATCH_NAME = "ascend_mbatch_shape_data"
ACL_INT64 = 9
ACL_FORMAT_ND = 2
KIND_LABELS = {"batch": "dynamic batch", "hw": "dynamic image size", "dims": "dynamic dims"}
SET_CALLS = {
    "batch": "acl.mdl.set_dynamic_batch_size",
    "hw": "acl.mdl.set_dynamic_hw_size",
    "dims": "acl.mdl.set_input_dynamic_dims",
}
# Code for "not a compiled gear". UNCONFIRMED for hw and dims (145021 follows the HW sample).
GEAR_CODES = {"batch": 145013, "hw": 145021, "dims": 145021}

Gear = tuple[int, ...]


@dataclass(frozen=True)
class IoTensor:
    """One input or output as the description reports it."""

    name: str
    acl_dtype: int
    acl_format: int
    dims: tuple[int, ...]  # -1 on dynamic input axes; the largest gear for outputs
    size: int  # bytes, for the largest gear

    def dims_dict(self, dims: tuple[int, ...] | None = None) -> dict[str, object]:
        """`{"name", "dimCount", "dims"}` as get_input_dims returns it."""
        shown = self.dims if dims is None else dims
        return {"name": self.name, "dimCount": len(shown), "dims": list(shown)}


def _nbytes(acl_dtype: int, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * ACL_DTYPE_TO_NUMPY[acl_dtype].itemsize


def _max_nbytes(tensor: OmTensor, index: int, per_gear: list[list[Gear]]) -> int:
    return max(_nbytes(tensor.acl_dtype, shapes[index]) for shapes in per_gear)


class LoadedModel:
    """A model id's state: the OM, the loading context and the gear last selected by set_*."""

    def __init__(self, model_id: int, om: OmModel, context: Context) -> None:
        self.id = model_id
        self.om = om
        self.context = context
        self.live = True
        desc = om.description
        self.kind = desc.dynamic_kind
        self.gears = desc.gears
        self.largest = desc.largest_gear()
        self.current_gear = self.largest
        # Sizes are the largest gear's; taking the maximum over gears per tensor gives the same
        # for every model whose tensors grow together, and is never too small for any gear.
        gears: tuple[Gear | None, ...] = desc.gears or (None,)
        in_shapes = [desc.input_shapes(g) for g in gears]
        out_shapes = [desc.output_shapes(g) for g in gears]
        inputs = [
            IoTensor(t.name, t.acl_dtype, t.acl_format, t.dims, _max_nbytes(t, i, in_shapes))
            for i, t in enumerate(desc.inputs)
        ]
        self.mbatch_index: int | None = None
        self.mbatch_count = 0
        if self.largest is not None:
            # dims [1] for batch and [2] for HW gears (observed); one int64 per dynamic dim for
            # dims gears is UNCONFIRMED (the reference presumes it).
            self.mbatch_index = len(inputs)
            self.mbatch_count = len(self.largest)
            dims = (self.mbatch_count,)
            inputs.append(
                IoTensor(MBATCH_NAME, ACL_INT64, ACL_FORMAT_ND, dims, _nbytes(ACL_INT64, dims))
            )
        self.inputs = tuple(inputs)
        self.outputs = tuple(
            IoTensor(t.name, t.acl_dtype, t.acl_format, t.dims, _max_nbytes(t, i, out_shapes))
            for i, t in enumerate(desc.outputs)
        )

    def check_live(self) -> None:
        """100011 if unloaded or loaded before acl.finalize."""
        if not self.live or not self.context.live:
            raise AclFailure(100011, f"model {self.id} is no longer loaded")

    def gear_text(self) -> str:
        """The compiled gears, for messages."""
        return "; ".join(",".join(str(v) for v in g) for g in self.gears)

    def rows(self, gear: Gear | None) -> int:
        """Dim 0 of the first input for `gear` (what the timing model scales with)."""
        shapes = self.om.description.input_shapes(gear)
        return shapes[0][0] if shapes and shapes[0] else 1


@dataclass(eq=False)
class ModelDesc:
    """`aclmdlDesc`: empty until get_desc fills it from a model."""

    handle: int
    model: LoadedModel | None = None


@dataclass(frozen=True)
class Execution:
    """A validated execute: where each input and output lives."""

    model: LoadedModel
    inputs: tuple[Span, ...]  # user inputs, then the mbatch buffer of a gear model
    outputs: tuple[Span, ...]

    def read_gear(self) -> Gear | None:
        """The gear written into the mbatch buffer; 145013/145021 if it is not a compiled gear."""
        model = self.model
        if model.mbatch_index is None:
            return None
        span = self.inputs[model.mbatch_index]
        raw = ctypes.string_at(span.address, 8 * model.mbatch_count)
        gear = struct.unpack(f"<{model.mbatch_count}q", raw)
        if gear in model.gears:
            return gear
        if raw == bytes([POISON]) * len(raw):
            hint = (
                "it holds uninitialised device memory (0xA5 poison): call "
                f"{SET_CALLS[model.kind]} on the input dataset before execute"
            )
        else:
            hint = f"select a gear with {SET_CALLS[model.kind]}"
        raise AclFailure(
            GEAR_CODES[model.kind],
            f"{MBATCH_NAME} (input {model.mbatch_index}) holds {list(gear)}, which is not a "
            f"compiled {KIND_LABELS[model.kind]} gear ({model.gear_text()}); {hint}",
        )

    def run(self) -> None:
        """Read the inputs for the selected gear, run the model, write the outputs."""
        model = self.model
        model.check_live()
        for i, span in enumerate(self.inputs + self.outputs):
            span.check_live(f"buffer {i}")
        gear = self.read_gear()
        desc = model.om.description
        arrays = []  # buffers hold every gear: prepare() checked them against IoTensor.size
        for t, span, shape in zip(desc.inputs, self.inputs, desc.input_shapes(gear)):
            data = ctypes.string_at(span.address, _nbytes(t.acl_dtype, shape))
            arrays.append(np.frombuffer(data, ACL_DTYPE_TO_NUMPY[t.acl_dtype]).reshape(shape))
        seconds = timing.current().execute_seconds(model.rows(gear))
        with timing.engine(model.context.device.id, "execute", seconds):
            try:
                results = model.om.run(arrays, gear)
            except Exception as exc:  # onnxruntime raises its own exception types
                raise AclFailure(507011, f"model {model.id} failed to execute: {exc}") from exc
        for tensor, span, result, shape in zip(
            model.outputs, self.outputs, results, desc.output_shapes(gear)
        ):
            array = np.ascontiguousarray(result)
            expected = ACL_DTYPE_TO_NUMPY[tensor.acl_dtype]
            if array.dtype != expected or array.shape != shape:
                raise AclFailure(
                    507011,
                    f"output {tensor.name} came out {array.dtype}{list(array.shape)}, "
                    f"the description says {expected}{list(shape)}",
                )
            ctypes.memmove(span.address, array.ctypes.data, array.nbytes)


def prepare(model: LoadedModel, inputs: Dataset, outputs: Dataset) -> Execution:
    """Validate datasets against the model (caller holds LOCK)."""
    for dataset in (inputs, outputs):
        if not dataset.live:
            raise AclFailure(100000, f"dataset 0x{dataset.handle:x} was destroyed")
    if len(inputs.buffers) != len(model.inputs):
        raise AclFailure(
            100017,
            f"the input dataset has {len(inputs.buffers)} buffers, model {model.id} has "
            f"{len(model.inputs)} inputs ({', '.join(t.name for t in model.inputs)})",
        )
    if len(outputs.buffers) != len(model.outputs):
        raise AclFailure(
            100018,
            f"the output dataset has {len(outputs.buffers)} buffers, model {model.id} has "
            f"{len(model.outputs)} outputs ({', '.join(t.name for t in model.outputs)})",
        )
    return Execution(
        model,
        tuple(
            _buffer_span(model, buf, t, f"input {i} ({t.name})")
            for i, (buf, t) in enumerate(zip(inputs.buffers, model.inputs))
        ),
        tuple(
            _buffer_span(model, buf, t, f"output {i} ({t.name})")
            for i, (buf, t) in enumerate(zip(outputs.buffers, model.outputs))
        ),
    )


def _buffer_span(model: LoadedModel, buf: DataBuffer, tensor: IoTensor, what: str) -> Span:
    if not buf.live:
        raise AclFailure(100000, f"the data buffer of {what} (0x{buf.handle:x}) was destroyed")
    if buf.addr == 0:
        raise AclFailure(145007, f"the data buffer of {what} is empty (address 0)")
    try:
        span = MEMORY.resolve(buf.addr, what)
    except AclFailure as exc:
        raise AclFailure(145007, str(exc)) from exc
    if span.device is None or span.remaining is None:
        raise AclFailure(
            145007,
            f"{what} is host memory (0x{buf.addr:x}); in ACL_HOST run mode model inputs and "
            "outputs must be device memory from acl.rt.malloc, filled with acl.rt.memcpy",
        )
    if span.device.device_id != model.context.device.id:
        raise AclFailure(
            145007,
            f"{what} is memory of device {span.device.device_id}, but model {model.id} runs "
            f"on device {model.context.device.id}",
        )
    if buf.size > span.remaining:
        raise AclFailure(
            145007,
            f"the data buffer of {what} claims {buf.size} bytes at 0x{buf.addr:x}, but only "
            f"{span.remaining} bytes of that allocation remain",
        )
    if buf.size < tensor.size:
        # Whether smaller-than-largest-gear buffers are accepted is UNCONFIRMED: refused here.
        raise AclFailure(
            145006,
            f"the data buffer of {what} has {buf.size} bytes; the model needs {tensor.size} "
            "(get_input/output_size_by_index: the largest gear's size)",
        )
    return span


def write_gear(model: LoadedModel, dataset: Dataset, index: int, gear: Gear) -> None:
    """Write `gear` as int64 into the mbatch buffer at `index` of `dataset` (caller holds LOCK)."""
    if not dataset.live:
        raise AclFailure(100000, f"dataset 0x{dataset.handle:x} was destroyed")
    if index >= len(dataset.buffers):
        raise AclFailure(
            145011,
            f"the dataset has no buffer at index {index} ({len(dataset.buffers)} buffers): "
            f"add the {MBATCH_NAME} buffer to the input dataset first",
        )
    buf = dataset.buffers[index]
    if not buf.live:
        raise AclFailure(100000, f"the data buffer at index {index} was destroyed")
    try:
        span = MEMORY.resolve(buf.addr, f"the {MBATCH_NAME} buffer")
    except AclFailure as exc:
        raise AclFailure(145011, str(exc)) from exc
    if span.device is None or span.remaining is None:
        raise AclFailure(145011, f"the {MBATCH_NAME} buffer 0x{buf.addr:x} is not device memory")
    need = 8 * len(gear)
    if min(buf.size, span.remaining) < need:
        raise AclFailure(145012, f"the {MBATCH_NAME} buffer has {buf.size} bytes; it needs {need}")
    data = struct.pack(f"<{len(gear)}q", *gear)
    ctypes.memmove(span.address, data, len(data))
    model.current_gear = gear
    STATE.count("set_dynamic_calls")
