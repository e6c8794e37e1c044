"""Loaded models, model descriptions and the execution of a model on datasets.

A gear model reports one extra, last input `ascend_mbatch_shape_data` (INT64, ND). `set_*` calls
write the selected gear into its device buffer as int64 values and `execute` reads it back from
there, as on the real device.

An AIPP input reports what ACL reports for it (UINT8, NHWC, the source image's dims and size);
`execute` runs the AIPP steps (`aipp.StaticAipp.apply`) on its raw bytes before the graph. A
dynamic-AIPP image input has a parameter input `ascend_dynamic_aipp_data` after the user inputs,
filled by `set_input_aipp`; `execute` decodes that block and applies it per image.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import string
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ge_python_backend.aipp import (
    DYNAMIC_AIPP_INPUT_NAME,
    AippConfigError,
    DynamicAippParams,
    StaticAipp,
    aipp_data_size,
    bind_static,
)
from ge_python_backend.ascend import (
    DIMS_NAME_LIMIT,
    DTYPES_BY_ACL,
    DTYPES_BY_NUMPY,
    NUMPY_BY_ACL,
    AclCode,
    Format,
    converted_tensor_name,
)
from ge_python_backend.emulator import _flights, timing
from ge_python_backend.emulator._memory import MEMORY, DeviceAllocation, Span, device_malloc
from ge_python_backend.emulator._state import (
    LOCK,
    POISON,
    STATE,
    AclFailure,
    DataBuffer,
    Dataset,
    device_mode,
)
from ge_python_backend.emulator._streams import Context, Stream
from ge_python_backend.emulator._tensors import desc_dims, fill_desc, renew_descs
from ge_python_backend.emulator.omfile import OmModel, OmTensor, in_ranges, ranges_text

MBATCH_NAME = "ascend_mbatch_shape_data"
ACL_INT64 = DTYPES_BY_NUMPY[np.dtype(np.int64)].acl
ACL_UINT8 = DTYPES_BY_NUMPY[np.dtype(np.uint8)].acl
# "Not a compiled gear", for every gear kind and for set_* on a model without gears: GE's
# ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID (hicann/ge runtime/v1/executor/ge_executor.cc,
# SetDynamicBatchSize / SetDynamicImageSize / SetDynamicDims).
NOT_A_GEAR = AclCode.GE_DYNAMIC_BATCH_SIZE_INVALID
# Input or output buffer too small for the model (GE's ACL_ERROR_GE_PARAM_INVALID from
# DavinciModel::CheckUserAndModelSize); GE accepts a buffer up to 64 bytes short.
BUFFER_TOO_SMALL = AclCode.GE_PARAM_INVALID
SIZE_SLACK = 64
# An empty output buffer (data 0, size 0) given to execute_async: older GE refuses it in
# UpdateIoTaskArgs ("data_buf.data is nullptr", ACL_ERROR_GE_PARAM_INVALID); current GE's
# check of the size returns ge::FAILED (500002 through ACL_GET_ERRCODE_GE): UNCONFIRMED which.
EMPTY_ASYNC_OUTPUT = AclCode.GE_PARAM_INVALID
# GE's tensor sizes: the bytes rounded up to 32, plus 32 bytes of padding, never 0 (hicann/ge
# graph_metadef/exe_graph/lowering/shape_utils.cc CalcAlignedSizeByShape, kAlignBytes 32 and
# tensor_size_utils.cc kDefaultPaddingSize 32).
TENSOR_ALIGN = 32
TENSOR_PADDING = 32

Gear = tuple[int, ...]


@dataclass(frozen=True)
class IoTensor:
    """One input or output as the description reports it."""

    name: str
    acl_dtype: int
    acl_format: int
    dims: tuple[int, ...]  # -1 on dynamic input axes; the largest gear for outputs
    size: int  # bytes, for the largest gear
    dims_v2: tuple[int, ...] | None = None  # get_input_dims_v2 where it differs (static AIPP)

    def dims_dict(self, dims: tuple[int, ...] | None = None) -> dict[str, object]:
        """`{"name", "dimCount", "dims"}` as get_input_dims returns it."""
        shown = self.dims if dims is None else dims
        return {"name": self.name, "dimCount": len(shown), "dims": list(shown)}


def _nhwc_dynamic_axes(tensor: OmTensor) -> tuple[int, ...]:
    """The axes of an NHWC AIPP input where the graph input has -1 (GE converts an NCHW
    input's dims to NHWC: insert_aipp_op_util.cc ConvertShape2Nhwc)."""
    nhwc = (0, 3, 1, 2) if tensor.acl_format == Format.NCHW else (0, 1, 2, 3)
    return tuple(nhwc[axis] for axis, d in enumerate(tensor.dims) if d == -1)


def _masked(dims: Sequence[int], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(-1 if axis in axes else int(d) for axis, d in enumerate(dims))


def _nbytes(acl_dtype: int, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * NUMPY_BY_ACL[acl_dtype].itemsize


def tensor_size(nbytes: int) -> int:
    """The size GE gives a tensor of `nbytes` bytes (CalcAlignedSizeByShape): what ACL
    allocates for a system-allocated output and reports as its buffer's size."""
    return (nbytes + TENSOR_ALIGN - 1) // TENSOR_ALIGN * TENSOR_ALIGN + TENSOR_PADDING


def _max_nbytes(tensor: OmTensor, index: int, per_gear: list[list[Gear]]) -> int:
    if tensor.ranges:  # a dynamic-shape model: the ranges' upper bounds (0 if unbounded)
        return tensor.upper_bytes()
    return max(_nbytes(tensor.acl_dtype, shapes[index]) for shapes in per_gear)


class DescribedModel:
    """What a model description reports of an OM: inputs (with the mbatch input of a gear model),
    outputs, sizes and gears. get_desc_from_file fills a desc with one (nothing loaded)."""

    def __init__(self, om: OmModel) -> None:
        self.om = om
        # the model id in converted tensor names: 0 for a desc of get_desc_from_file, whose
        # aclmdlDesc is cleared and never given one (UNCONFIRMED on hardware)
        self.id = 0
        desc = om.description
        self.kind = desc.dynamic_kind
        self.gears = desc.gears
        self.largest = desc.largest_gear()
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
                IoTensor(MBATCH_NAME, ACL_INT64, Format.ND, dims, _nbytes(ACL_INT64, dims))
            )
        # static-AIPP input -> its op bound in each gear (key None without gears)
        self.static_aipp: dict[int, dict[Gear | None, StaticAipp]] = {}
        self.dynamic_aipp: dict[int, int] = {}  # dynamic-AIPP image input -> its parameter input
        self._describe_aipp(inputs)
        self.inputs = tuple(inputs)
        self.outputs = tuple(
            IoTensor(t.name, t.acl_dtype, t.acl_format, t.dims, _max_nbytes(t, i, out_shapes))
            for i, t in enumerate(desc.outputs)
        )

    def dims_name(self, index: int, is_input: bool) -> str:
        """The name the dims calls report for a tensor: its own, or ACL's converted name when
        it is longer than DIMS_NAME_LIMIT (hicann/ge model_common.cpp GetTensorDescNameToDims):
        `acl_modelId_<id>_input_<i>`, with `_` and the first free letters a..z (up to three)
        appended when a tensor already has that name."""
        name = (self.inputs if is_input else self.outputs)[index].name
        if len(name) <= DIMS_NAME_LIMIT:
            return name
        base = converted_tensor_name(self.id, is_input, index)
        taken = {t.name for t in self.inputs + self.outputs}
        if base not in taken:
            return base
        for length in range(1, 4):
            for letters in itertools.product(string.ascii_lowercase, repeat=length):
                candidate = f"{base}_{''.join(letters)}"
                if candidate not in taken:
                    return candidate
        return base  # ACL warns of the conflict and uses it

    def real_name(self, name: str) -> str | None:
        """What get_tensor_real_name returns (hicann/ge model_om2.cpp
        aclmdlGetTensorRealNameImplOm2): a tensor's own name as is; else a converted name
        `acl_modelId_<this id>_input|output_<i>[_<suffix>]` gives tensor i's name; else None."""
        if any(t.name == name for t in self.inputs + self.outputs):
            return name
        parts = name.split("_")
        if len(parts) not in (5, 6) or parts[:2] != ["acl", "modelId"]:
            return None
        if not parts[2].isdigit() or int(parts[2]) != self.id or not parts[4].isdigit():
            return None
        tensors = {"input": self.inputs, "output": self.outputs}.get(parts[3])
        index = int(parts[4])
        if tensors is None or index >= len(tensors):
            return None
        return tensors[index].name

    def _describe_aipp(self, inputs: list[IoTensor]) -> None:
        """Replace each AIPP input by what ACL reports for it; add dynamic parameter inputs.

        Static: UINT8, NHWC, v1 `[n,h,w,c]`, v2 and size by the source format (davinci_model.cc
        CreateInputDimsInfo; aclmdlGetInputDimsV2.md table 1). With batch or HW gears GE keeps
        -1 on the axes the gears vary, moved to NHWC (insert_aipp_op_util.cc
        UpdateMultiBatchInputDims for v1, SetModelInputDims for v2), and the size is the
        largest gear's (UpdateCaseNode: the Data node takes the largest AIPP input).
        Dynamic: the image input is UINT8 NHWC `[n,-1,-1,-1]` (aipp_op.cc CreateAippData: n
        is -1 with batch gears) sized `max_src_image_size` (ACL checks a whole batch's source
        bytes against it: aipp_param_check.cpp GetSrcImageSize); the parameter input is UINT8
        ND `[64 + 96n]` for the largest batch n (aipp_op.cc AddNodeToGraph, CalcMaxSize; CANN
        "Concepts and Restrictions": the buffer is sized for the largest batch), named
        `ascend_dynamic_aipp_data` for the first and `ascend_dynamic_aipp_data_<aipp node>`
        after (the emulator names the node `aipp_<rank>`).
        """
        desc = self.om.description
        for index, op in sorted(desc.aipp_ops().items()):
            tensor = inputs[index]
            bounds = desc.static_aipp(index)
            if bounds:
                self.static_aipp[index] = bounds
                largest = bounds[self.largest]
                varied = _nhwc_dynamic_axes(desc.inputs[index])
                inputs[index] = IoTensor(
                    tensor.name,
                    largest.input_dtype.acl,
                    largest.input_format,
                    _masked(largest.input_dims_v1, varied),
                    max(bound.input_size for bound in bounds.values()),
                    _masked(largest.input_dims_v2, varied),
                )
                continue
            inputs[index] = IoTensor(
                tensor.name,
                ACL_UINT8,
                Format.NHWC,
                (tensor.dims[0], -1, -1, -1),
                op.max_src_image_size,
            )
            name = DYNAMIC_AIPP_INPUT_NAME
            if self.dynamic_aipp:
                name = f"{DYNAMIC_AIPP_INPUT_NAME}_aipp_{index}"
            size = aipp_data_size(self.aipp_batch(index))
            self.dynamic_aipp[index] = len(inputs)
            inputs.append(IoTensor(name, ACL_UINT8, Format.ND, (size,), size))

    def aipp_batch(self, index: int) -> int:
        """N of graph input `index` in the largest gear: the images of a dynamic-AIPP block
        (set_input_aipp's aclmdlAIPP must hold this many: acl_aipp.cpp GetModelOriDims takes
        the N of the largest gear)."""
        return self.om.description.input_shapes(self.largest)[index][0]

    def gear_text(self) -> str:
        """The compiled gears, for messages."""
        return "; ".join(",".join(str(v) for v in g) for g in self.gears)

    def rows(self, gear: Gear | None) -> int:
        """Dim 0 for `gear` of the first input with -1 there, else of the first input (what the
        timing model scales with; a batch model's side inputs have no batch axis)."""
        desc = self.om.description
        shapes = desc.input_shapes(gear)
        first = next((i for i, t in enumerate(desc.inputs) if t.dims[:1] == (-1,)), 0)
        return shapes[first][0] if shapes and shapes[first] else 1


@dataclass(frozen=True)
class CallerMemory:
    """Device memory a caller gave a load (`load_from_file_with_mem`): [start, end) of
    `allocation`, the model's `what` ("work" or "weight") memory."""

    what: str
    allocation: DeviceAllocation
    start: int
    end: int

    def check_live(self, model_id: int) -> None:
        """507015 (an AI Core exception, UNCONFIRMED code) once the memory was freed: GE keeps
        the pointer and the runtime does not know a model uses it, so on a device the model's
        tasks would access freed memory (a fault, or silent corruption once it is reused)."""
        if not self.allocation.live:
            raise AclFailure(
                AclCode.RT_AICORE_EXCEPTION,
                f"the {self.what} memory of model {model_id} (0x{self.start:x}, "
                f"{self.end - self.start} bytes, given to acl.mdl.load_from_file_with_mem) was "
                f"{self.allocation.freed_by} while the model is loaded; neither GE nor the "
                "runtime checks this and on a device the model would access freed memory: free "
                "a model's memory only after acl.mdl.unload",
            )


class LoadedModel(DescribedModel):
    """A model id's state: the OM, the loading context, the device memory its load holds, the
    memory its caller gave it and the gear last selected by set_* (on any dataset: GE keeps it
    per model, DavinciModel::SetDynamicSize, and get_cur_output_dims reads it)."""

    def __init__(
        self,
        model_id: int,
        om: OmModel,
        context: Context,
        device_bytes: int,
        given: Sequence[CallerMemory] = (),
    ) -> None:
        super().__init__(om)
        self.id = model_id
        self.context = context
        self.device_bytes = device_bytes  # the device memory ACL allocated for it at load
        self.given = tuple(given)  # work and weight memory from load_from_file_with_mem
        work = next((m for m in self.given if m.what == "work"), None)
        # what its executions write of the memory given to it (`_flights`)
        self.work = (
            None
            if work is None
            else _flights.Access(work.allocation, work.start, work.end, True, _flights.WORK)
        )
        self.task = _flights.Task(f"model {model_id}", self)
        # what its executions' accesses are called (made once: executions are the hot path)
        self.io_names = (
            tuple(f"input {i}" for i in range(len(self.inputs))),
            tuple(f"output {i}" for i in range(len(self.outputs))),
        )
        self.live = True
        self.current_gear = self.largest
        # GE refuses to mix execute and execute_async on one model ("NnExecute not support mix
        # execute"): the first execution fixes the mode.
        self.exec_mode: str | None = None
        # (stream, ticket) of the last execute_async: one model id must not run on two streams
        # at once (GE rebinds the model to each execute's stream and rewrites its task args).
        self.queued: tuple[Stream, int] | None = None

    def claim(
        self, mode: str, runner: _flights.Runner, accesses: Sequence[_flights.Access]
    ) -> None:
        """Refuse an execution GE does not allow (caller holds LOCK): a mode other than the
        model's first (500002, ACL_ERROR_GE_FAILURE: GE's INTERNAL_ERROR from
        DavinciModel::InitModelStream), execute_async on a stream other than the one where this
        model id still runs (500002 too: GE has no check and races, see below), or one whose
        `accesses` clash with another stream's tasks in flight (`_flights.check`)."""
        if self.exec_mode not in (None, mode):
            raise AclFailure(
                AclCode.GE_FAILURE,
                f"model {self.id} was executed with acl.mdl.{self.exec_mode} before; GE does not "
                "support mixing execute and execute_async on one model id (NnExecute not "
                "support mix execute): load the .om again for the other mode",
            )
        busy = self.queued
        if busy is not None and busy[0] is not runner and not busy[0].reached(busy[1]):
            # GE does not check this: each execute rebinds the model to the new stream and
            # rewrites the task arguments while the first run may still read them (a race that
            # corrupts results). The emulator reports it with GE's code for misuse of a model id.
            raise AclFailure(
                AclCode.GE_FAILURE,
                f"model {self.id} is still executing on stream 0x{busy[0].handle:x}; one model "
                "id must not run on two streams at once (load the .om once per stream)",
            )
        _flights.check(self.task, accesses, runner)
        self.exec_mode = mode

    def check_live(self) -> None:
        """100011 if unloaded or loaded before acl.finalize."""
        if not self.live or not self.context.live:
            raise AclFailure(AclCode.INVALID_MODEL_ID, f"model {self.id} is no longer loaded")


@dataclass(eq=False)
class ModelDesc:
    """`aclmdlDesc`: empty until get_desc fills it from a loaded model, or get_desc_from_file
    from an `.om` on disk (a `DescribedModel` only)."""

    handle: int
    model: DescribedModel | None = None


# The process's live model descriptions (by handle) and loaded models (by model id); callers
# hold LOCK.
MODEL_DESCS: dict[int, ModelDesc] = {}
MODELS: dict[int, LoadedModel] = {}


@dataclass(frozen=True)
class Execution:
    """A validated execute: where each input and output lives."""

    model: LoadedModel
    inputs: tuple[Span, ...]  # user inputs, then the mbatch buffer of a gear model
    # None: an empty data buffer (data 0, size 0) of a synchronous execute, which ACL fills
    # with device memory it allocates (`run`)
    outputs: tuple[Span | None, ...]
    # a dynamic-shape model: each input's dims from its dataset tensor desc (else the model's)
    input_shapes: tuple[tuple[int, ...], ...] | None
    output_descs: tuple[int, ...]  # the output dataset's new tensor descs, filled by `run`
    output_buffers: tuple[DataBuffer, ...]  # the output dataset's data buffers

    def accesses(self) -> list[_flights.Access]:
        """The device memory the execution reads (inputs) and writes (outputs, work memory
        given to its model), for `_flights`."""
        inputs, outputs = self.model.io_names
        touched = [
            _flights.span_access(span, False, what) for span, what in zip(self.inputs, inputs)
        ]
        touched += [
            _flights.span_access(span, True, what) for span, what in zip(self.outputs, outputs)
        ]
        touched.append(self.model.work)
        return [access for access in touched if access is not None]

    def read_gear(self) -> Gear | None:
        """The gear written into the mbatch buffer; 145013 if it is not a compiled gear."""
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
                f"{model.kind.set_call} on the input dataset before execute"
            )
        else:
            hint = f"select a gear with {model.kind.set_call}"
        raise AclFailure(
            NOT_A_GEAR,
            f"{MBATCH_NAME} (input {model.mbatch_index}) holds {list(gear)}, which is not a "
            f"compiled {model.kind.atc_description} gear ({model.gear_text()}); {hint}",
        )

    def _graph_input(
        self, index: int, span: Span, acl_dtype: int, shape: tuple[int, ...], gear: Gear | None
    ) -> np.ndarray:
        """What graph input `index` receives for `gear`: the buffer's data, or AIPP's output."""
        model = self.model
        bounds = model.static_aipp.get(index)
        if bounds is not None:
            bound = bounds[gear]
            return bound.apply(_read(span, ACL_UINT8, (bound.input_size,)))
        params_index = model.dynamic_aipp.get(index)
        if params_index is None:
            return _read(span, acl_dtype, shape)
        params_span = self.inputs[params_index]
        raw = _read(params_span, ACL_UINT8, (model.inputs[params_index].size,))
        try:
            params = DynamicAippParams.unpack(raw.tobytes())
            images = dynamic_images(params, model.om.description.inputs[index], shape)
        except (AippConfigError, ValueError) as exc:
            # UNCONFIRMED: the code GE returns for a parameter block it cannot use.
            raise AclFailure(
                AclCode.GE_PARAM_INVALID,
                f"the dynamic AIPP parameters of input {index} ({model.inputs[index].name}) "
                f"cannot be applied: {exc}; fill them with acl.mdl.set_input_aipp",
            ) from exc
        need = sum(b.input_size for b in images)
        if span.remaining is not None and span.remaining < need:
            raise AclFailure(
                BUFFER_TOO_SMALL,
                f"input {index} ({model.inputs[index].name}) holds {span.remaining} bytes; "
                f"the source images set by set_input_aipp need {need}",
            )
        data = _read(span, ACL_UINT8, (need,))
        out, start = [], 0
        for bound in images:
            out.append(bound.apply(data[start : start + bound.input_size]))
            start += bound.input_size
        return np.concatenate(out)

    def _input_bytes(
        self, index: int, acl_dtype: int, shape: tuple[int, ...], gear: Gear | None
    ) -> int:
        """Bytes graph input `index`'s buffer holds for `gear`: the source images of a
        static-AIPP input, 0 for a dynamic-AIPP one (its parameters say, `_graph_input`)."""
        bounds = self.model.static_aipp.get(index)
        if bounds is not None:
            return bounds[gear].input_size
        if index in self.model.dynamic_aipp:
            return 0
        return _nbytes(acl_dtype, shape)

    def run(self) -> None:
        """Read the inputs for the selected gear, run the model, write the outputs.

        An empty output buffer (synchronous execute only) gets device memory ACL allocates,
        as `acl.rt.malloc` would (the caller frees it with `acl.rt.free`): before the run
        when the output's size is known (`get_output_size_by_index` > 0), else after it, GE's
        size of the real output (`tensor_size`), which the output is copied into (hicann/ge
        api/acl/acl_model/model/model.cpp ModelExecute and RuntimeV2ModelExecute). The data
        buffer then holds that address and size; it stays so after a failed run.
        """
        model = self.model
        model.check_live()
        for memory in model.given:
            memory.check_live(model.id)
        for i, span in enumerate(self.inputs + self.outputs):
            if span is not None:
                span.check_live(f"buffer {i}")
        outputs = [
            self._system_output(i, tensor.size) if span is None and tensor.size else span
            for i, (tensor, span) in enumerate(zip(model.outputs, self.outputs))
        ]
        gear = self.read_gear()
        desc = model.om.description
        dynamic = self.input_shapes is not None
        arrays = []
        for i, (t, span, shape) in enumerate(
            zip(desc.inputs, self.inputs, self.input_shapes or desc.input_shapes(gear))
        ):
            need = self._input_bytes(i, t.acl_dtype, shape, gear)
            if (
                (gear is not None or dynamic)
                and span.remaining is not None
                and span.remaining < need
            ):
                # GE copies what the buffer has and runs on stale device memory; refused here.
                # UNCONFIRMED code for a dynamic-shape input buffer smaller than its dims.
                where = f" of gear {list(gear)}" if gear is not None else f" {list(shape)}"
                raise AclFailure(
                    BUFFER_TOO_SMALL,
                    f"input {i} ({t.name}){where} needs {need} bytes, its buffer "
                    f"has {span.remaining}",
                )
            arrays.append(self._graph_input(i, span, t.acl_dtype, shape, gear))
        rows = arrays[0].shape[0] if dynamic and arrays and arrays[0].ndim else model.rows(gear)
        seconds = timing.current().execute_seconds(rows)
        with timing.shared_engine(model.context.device.id, "execute", seconds):
            try:
                results = model.om.run(arrays, gear)
            except Exception as exc:  # onnxruntime raises its own exception types
                raise AclFailure(
                    AclCode.RT_MODEL_EXECUTE, f"model {model.id} failed to execute: {exc}"
                ) from exc
        arrays = []
        for i, (tensor, span, result, shape) in enumerate(
            zip(model.outputs, outputs, results, desc.output_shapes(gear))
        ):
            array = np.asarray(result, order="C")  # ascontiguousarray makes a scalar [1]
            expected = NUMPY_BY_ACL[tensor.acl_dtype]
            fits = len(array.shape) == len(shape) and all(
                want in (-1, got) for want, got in zip(shape, array.shape)
            )
            if array.dtype != expected or not fits:
                raise AclFailure(
                    AclCode.RT_MODEL_EXECUTE,
                    f"output {tensor.name} came out {array.dtype}{list(array.shape)}, "
                    f"the description says {expected}{list(shape)}",
                )
            arrays.append(array)
            if span is None:
                continue  # ACL allocates it below, once the execution has succeeded
            room = span.remaining if span.remaining is not None else array.nbytes
            if gear is not None and room < array.nbytes:
                # GE writes the whole output past the user's buffer; refused here (stricter).
                raise AclFailure(
                    BUFFER_TOO_SMALL,
                    f"output {i} ({tensor.name}) of gear {list(gear)} needs {array.nbytes} "
                    f"bytes, its buffer has {room}",
                )
            if dynamic and room < array.nbytes:
                # hicann/ge runtime/v2/kernel/common_kernel_impl/memory_copy.cc TensorToOut
                # (aclmdlGetOutputSizeByIndex.md, 方式二: the error says the size needed);
                # UNCONFIRMED code (that check returns ge::GRAPH_FAILED).
                raise AclFailure(
                    BUFFER_TOO_SMALL,
                    "Failed to copy output tensor data to the given buffer, given buffer size "
                    f"{room} is less than output tensor size {array.nbytes} (output {i} "
                    f"{tensor.name} {list(array.shape)} needs {array.nbytes} bytes)",
                )
        for i, (span, array) in enumerate(zip(outputs, arrays)):
            if span is None:
                span = self._system_output(i, tensor_size(array.nbytes))
            room = span.remaining if span.remaining is not None else array.nbytes
            # A static model's buffer may be up to SIZE_SLACK bytes short (prepare checked).
            ctypes.memmove(span.address, array.ctypes.data, min(room, array.nbytes))
        with LOCK:
            for handle, tensor, result in zip(self.output_descs, model.outputs, results):
                fill_desc(handle, tensor.acl_dtype, np.shape(result), tensor.acl_format)

    def _system_output(self, index: int, size: int) -> Span:
        """Device memory ACL allocates for output `index`'s empty data buffer (`aclrtMalloc`,
        counted as the process's device memory; 207001 when the device has no room), bound to
        that buffer: its address and `size`."""
        model = self.model
        buf = self.output_buffers[index]
        with LOCK:
            alloc = device_malloc(
                model.context.device, size, f"output {index} of model {model.id} ({size} bytes)"
            )
            buf.addr, buf.size = alloc.base, size
            STATE.count("output_allocations")
        return Span(True, alloc.address, size, alloc, None, alloc.view)


def dynamic_images(
    params: DynamicAippParams, tensor: OmTensor, shape: tuple[int, ...]
) -> list[StaticAipp]:
    """One binding per image of dynamic-AIPP graph input `tensor` of `shape` (its shape in the
    gear run): image i takes batch record i of the block (ValueError or AippConfigError when
    they do not fit the input). With batch gears the block holds the largest batch's records
    and a smaller gear uses the first ones (UNCONFIRMED on hardware)."""
    n = shape[0]
    if len(params.batches) < n:
        raise ValueError(f"the block has {len(params.batches)} batches, the model takes {n}")
    one = (1, *shape[1:])
    fmt, dtype = Format(tensor.acl_format), DTYPES_BY_ACL[tensor.acl_dtype]
    return [bind_static(params.static_op(i), one, fmt, dtype) for i in range(n)]


def _read(span: Span, acl_dtype: int, shape: tuple[int, ...]) -> np.ndarray:
    """The input of `shape` at `span`; bytes past the allocation (a static model's buffer may be
    up to SIZE_SLACK bytes short) read as zeros."""
    need = _nbytes(acl_dtype, shape)
    have = need if span.remaining is None else min(need, span.remaining)
    data = ctypes.string_at(span.address, have) + bytes(need - have)
    return np.frombuffer(data, NUMPY_BY_ACL[acl_dtype]).reshape(shape)


def prepare(model: LoadedModel, inputs: Dataset, outputs: Dataset, synchronous: bool) -> Execution:
    """Validate datasets against the model (caller holds LOCK). An empty output buffer (data
    0, size 0) is for ACL to allocate, which it does only in a `synchronous` execute
    (aclmdlExecute.md; model.cpp ModelExecute mallocs only `!basync`): execute_async
    refuses it."""
    for dataset in (inputs, outputs):
        if not dataset.live:
            raise AclFailure(AclCode.INVALID_PARAM, f"dataset 0x{dataset.handle:x} was destroyed")
    if len(inputs.buffers) != len(model.inputs):
        raise AclFailure(
            AclCode.MODEL_INPUT_NOT_MATCH,
            f"the input dataset has {len(inputs.buffers)} buffers, model {model.id} has "
            f"{len(model.inputs)} inputs ({', '.join(t.name for t in model.inputs)})",
        )
    if len(outputs.buffers) != len(model.outputs):
        raise AclFailure(
            AclCode.MODEL_OUTPUT_NOT_MATCH,
            f"the output dataset has {len(outputs.buffers)} buffers, model {model.id} has "
            f"{len(model.outputs)} outputs ({', '.join(t.name for t in model.outputs)})",
        )
    # GE skips the size check once a set_* call chose a gear for the input dataset
    # (ge_executor.cc ExecModel -> SetDynamicInputDataFlag; DavinciModel::CheckUserAndModelSize).
    # and for a dynamic-AIPP model ("no need to judge smaller user size", the same function).
    # A dynamic-shape model's buffers are checked against the real dims at execution.
    desc = model.om.description
    sized = not (inputs.gear_set and model.gears) and not model.dynamic_aipp
    sized = sized and not desc.dynamic_shape
    input_shapes = _dataset_input_shapes(model, inputs) if desc.dynamic_shape else None
    return Execution(
        model,
        tuple(
            _buffer_span(model, buf, t, f"input {i} ({t.name})", sized)
            for i, (buf, t) in enumerate(zip(inputs.buffers, model.inputs))
        ),
        tuple(
            _output_span(model, i, buf, t, sized, synchronous)
            for i, (buf, t) in enumerate(zip(outputs.buffers, model.outputs))
        ),
        input_shapes,
        # GE recreates every output's tensor desc at each execute (hicann/ge api/acl/acl_model/
        # model/model.cpp, ModelExecute): undefined until the execution has run
        renew_descs(outputs.tensor_descs, len(model.outputs)),
        tuple(outputs.buffers),
    )


def _output_span(
    model: LoadedModel, index: int, buf: DataBuffer, tensor: IoTensor, sized: bool, sync: bool
) -> Span | None:
    """Output `index`'s span; None for an empty data buffer of a synchronous execute (ACL
    allocates it), EMPTY_ASYNC_OUTPUT for one of execute_async."""
    what = f"output {index} ({tensor.name})"
    if buf.live and buf.addr == 0:
        if sync:
            return None
        raise AclFailure(
            EMPTY_ASYNC_OUTPUT,
            f"data_buf.data is nullptr, index={index}, model_id:{model.id}: the data buffer of "
            f"{what} is empty (data 0, size 0), which ACL fills with memory it allocates only "
            "in the synchronous acl.mdl.execute; execute_async needs device memory of "
            "get_output_size_by_index bytes (or more, for an unbounded output)",
        )
    return _buffer_span(model, buf, tensor, what, sized)


def _dataset_input_shapes(model: LoadedModel, inputs: Dataset) -> tuple[tuple[int, ...], ...]:
    """A dynamic-shape model's input dims: each input's dataset tensor desc (set with
    set_dataset_tensor_desc), else the model's dims; 100000 when they are outside the input's
    range (hicann/ge model.cpp: "Input [i] shape out of shape range", IsOriginShapeInRange)."""
    shapes = []
    for i, tensor in enumerate(model.om.description.inputs):
        handle = inputs.tensor_descs.get(i)
        shape = tensor.dims if handle is None else desc_dims(handle)
        if tensor.ranges and not in_ranges(tensor, shape):
            hint = "" if handle else " (no tensor desc was set: set_dataset_tensor_desc)"
            raise AclFailure(
                AclCode.INVALID_PARAM,
                f"input {i} ({tensor.name}) shape {list(shape)} is out of its shape range "
                f"{ranges_text(tensor.ranges)}{hint}",
            )
        if not tensor.ranges and shape != tensor.dims:
            raise AclFailure(
                AclCode.INVALID_PARAM,
                f"input {i} ({tensor.name}) is static {list(tensor.dims)}; its tensor desc "
                f"gives {list(shape)}",
            )
        shapes.append(shape)
    return tuple(shapes)


def _buffer_span(
    model: LoadedModel, buf: DataBuffer, tensor: IoTensor, what: str, sized: bool
) -> Span:
    if not buf.live:
        raise AclFailure(
            AclCode.INVALID_PARAM, f"the data buffer of {what} (0x{buf.handle:x}) was destroyed"
        )
    if buf.addr == 0:
        raise AclFailure(
            AclCode.GE_EXEC_MODEL_ADDR_INVALID, f"the data buffer of {what} is empty (address 0)"
        )
    try:
        span = MEMORY.resolve(buf.addr, what)
    except AclFailure as exc:
        raise AclFailure(AclCode.GE_EXEC_MODEL_ADDR_INVALID, str(exc)) from exc
    if device_mode() and span.host is not None:
        return _sized(span, buf, tensor, what, sized)  # RC: malloc_host memory is device memory
    if span.device is None or span.remaining is None:
        raise AclFailure(
            AclCode.GE_EXEC_MODEL_ADDR_INVALID,
            f"{what} is host memory (0x{buf.addr:x}); in ACL_HOST run mode model inputs and "
            "outputs must be device memory from acl.rt.malloc, filled with acl.rt.memcpy",
        )
    if span.device.device_id != model.context.device.id:
        raise AclFailure(
            AclCode.GE_EXEC_MODEL_ADDR_INVALID,
            f"{what} is memory of device {span.device.device_id}, but model {model.id} runs "
            f"on device {model.context.device.id}",
        )
    return _sized(span, buf, tensor, what, sized)


def _sized(span: Span, buf: DataBuffer, tensor: IoTensor, what: str, sized: bool) -> Span:
    """Check the buffer's size; `sized` False (a gear is set) skips the model-size check."""
    assert span.remaining is not None
    if buf.size > span.remaining:
        raise AclFailure(
            AclCode.GE_EXEC_MODEL_ADDR_INVALID,
            f"the data buffer of {what} claims {buf.size} bytes at 0x{buf.addr:x}, but only "
            f"{span.remaining} bytes of that allocation remain",
        )
    if sized and buf.size + SIZE_SLACK < tensor.size:
        # hicann/ge davinci_model.cc CheckUserAndModelSize reports E13025 (error_code.json:
        # "Input tensor is invalid. Reason: %s."), for outputs too
        raise AclFailure(
            BUFFER_TOO_SMALL,
            "E13025: Input tensor is invalid. Reason: The input memory size set by the user is "
            f"invalid.The provided {buf.size} bytes of buffer size plus the aligned "
            f"{SIZE_SLACK} bytes is less than the tensor size {tensor.size} bytes required by "
            f"the model ({what}; get_input/output_size_by_index)",
        )
    return Span(span.on_device, span.address, buf.size, span.device, span.host, span.keep)


def write_gear(model: LoadedModel, dataset: Dataset, index: int, gear: Gear) -> None:
    """Write `gear` as int64 into the mbatch buffer at `index` of `dataset` (caller holds LOCK)."""
    if not dataset.live:
        raise AclFailure(AclCode.INVALID_PARAM, f"dataset 0x{dataset.handle:x} was destroyed")
    if index >= len(dataset.buffers):
        raise AclFailure(
            AclCode.GE_DYNAMIC_INPUT_ADDR_INVALID,
            f"the dataset has no buffer at index {index} ({len(dataset.buffers)} buffers): "
            f"add the {MBATCH_NAME} buffer to the input dataset first",
        )
    buf = dataset.buffers[index]
    if not buf.live:
        raise AclFailure(AclCode.INVALID_PARAM, f"the data buffer at index {index} was destroyed")
    try:
        span = MEMORY.resolve(buf.addr, f"the {MBATCH_NAME} buffer")
    except AclFailure as exc:
        raise AclFailure(AclCode.GE_DYNAMIC_INPUT_ADDR_INVALID, str(exc)) from exc
    usable = span.device is not None or (device_mode() and span.host is not None)
    if not usable or span.remaining is None:
        raise AclFailure(
            AclCode.GE_DYNAMIC_INPUT_ADDR_INVALID,
            f"the {MBATCH_NAME} buffer 0x{buf.addr:x} is not device memory",
        )
    need = 8 * len(gear)
    if min(buf.size, span.remaining) < need:
        raise AclFailure(
            AclCode.GE_DYNAMIC_INPUT_LENGTH_INVALID,
            f"the {MBATCH_NAME} buffer has {buf.size} bytes; it needs {need}",
        )
    data = struct.pack(f"<{len(gear)}q", *gear)
    ctypes.memmove(span.address, data, len(data))
    model.current_gear = gear
    dataset.gear_set = True
    STATE.count("set_dynamic_calls")
