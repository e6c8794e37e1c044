"""A loaded `.om`: its description as typed specs and gears, datasets, gear selection, execution."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ge_python_backend.aipp import (
    DYNAMIC_AIPP_INPUT_NAME,
    AippConfigError,
    AippInputFormat,
    AippOp,
    AippType,
    parse_aipp_config,
)
from ge_python_backend.ascend import (
    DTYPES_BY_ACL,
    DTYPES_BY_NUMPY,
    Format,
    GearKind,
    format_name,
    malloc_reserved,
    tensor_name_of_output,
)
from ge_python_backend.modelinfo import GearInfo, Shape, TensorSpec
from ge_python_backend.runtime._resource import Resource, close_all
from ge_python_backend.runtime.device import Context, Stream
from ge_python_backend.runtime.errors import ModelFileError, check, check_handle
from ge_python_backend.runtime.memory import DeviceBuffer, copy_to_array
from ge_python_backend.runtime.placement import Placement

__all__ = [
    "GEAR_INPUT_NAME",
    "read_aipp_config",
    "Dataset",
    "LoadSizes",
    "Model",
    "ModelDescription",
    "TensorInfo",
]

logger = logging.getLogger(__name__)

# The extra input ATC adds to gear models; the set_* calls fill it, callers never see it.
GEAR_INPUT_NAME = "ascend_mbatch_shape_data"
# GE accepts an input buffer up to this many bytes smaller than the model's size
# (davinci_model.cc CheckUserAndModelSize).
SIZE_SLACK = 64


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """A spec plus where the model keeps it."""

    index: int  # the model's input or output index
    spec: TensorSpec
    size: int  # bytes the description reports (the largest gear's; 0 when unbounded)
    # a shape-range input: (lower, upper) per dim (acl.mdl.get_input_dims_range); () otherwise
    ranges: tuple[tuple[int, int], ...] = ()
    aipp: str = ""  # the input's AIPP as get_aipp_type / get_first_aipp_info report it
    # a static-AIPP input served in v2 dims: rows of its H axis per image row (numerator,
    # denominator; YUV420SP_U8 (3, 2): v2's H is h * 1.5, aclmdlGetInputDimsV2.md table 1),
    # which an HW gear (h, w) of the model's image scales
    v2_rows: tuple[int, int] = (1, 1)

    def hw_dims(self, height: int, width: int) -> tuple[int, int]:
        """The values of this input's -1 dims in HW gear (`height`, `width`)."""
        numerator, denominator = self.v2_rows
        return height * numerator // denominator, width


@dataclasses.dataclass(frozen=True)
class ModelDescription:
    """What `acl.mdl.get_desc` reports, gear input set apart."""

    inputs: tuple[TensorInfo, ...]  # without the gear input
    outputs: tuple[TensorInfo, ...]  # shapes as get_output_dims reports (largest gear)
    input_count: int  # including the gear input
    gear_input: int | None  # index of ascend_mbatch_shape_data
    gear_input_size: int
    # the gears as ACL reports them: batched (and max_batch set) only for batch gears, dims gears
    # with every input's full shape per gear (input order); GearTable adds a fixed batch axis
    gears: GearInfo
    dims_values: tuple[tuple[int, ...], ...] = ()  # per gear, the dims as ACL lists them
    # (index, size) of each dynamic-AIPP parameter input: set once per dataset, never fed
    aipp_inputs: tuple[tuple[int, int], ...] = ()
    # no gears but -1 dims (shape-range inputs, data-dependent outputs): every execution sets
    # its inputs' tensor descs and reads its outputs' real shapes from the output descs
    dynamic_shape: bool = False


class Dataset(Resource):
    """An `aclmdlDataset` over device buffers, one data buffer each, in the given order.

    A None buffer (an output of a synchronous execute only) is an empty data buffer (data 0,
    size 0): `acl.mdl.execute` allocates that output's device memory and leaves its address and
    size in the data buffer (aclmdlGetOutputSizeByIndex.md); `take_output` copies it out, frees
    it and empties the buffer again, `release_outputs` only frees.
    """

    def __init__(self, context: Context, buffers: Sequence[DeviceBuffer | None]) -> None:
        acl = context.acl
        handle = check_handle(acl.mdl.create_dataset(), "acl.mdl.create_dataset", acl)
        data_buffers: list[int] = []
        self.context = context
        self.handle = handle
        self.buffers = tuple(buffers)
        self._data_buffers = data_buffers
        self._own(_destroy_dataset, context, handle, data_buffers, self.buffers)
        context._adopt(self)
        try:
            for buffer in self.buffers:
                ptr, size = (0, 0) if buffer is None else (buffer.ptr, buffer.size)
                data_buffer = check_handle(
                    acl.create_data_buffer(ptr, size), "acl.create_data_buffer", acl
                )
                data_buffers.append(data_buffer)
                _, ret = acl.mdl.add_dataset_buffer(handle, data_buffer)
                check(ret, "acl.mdl.add_dataset_buffer", acl)
        except BaseException:
            self._abandon()
            raise

    def take_output(self, index: int, shape: Shape, dtype: np.dtype[Any]) -> np.ndarray:
        """The system-allocated output at `index` as a new array of `shape`: copied out of the
        memory `acl.mdl.execute` allocated, which is then freed (`acl.rt.free`) and its data
        buffer emptied (`acl.update_data_buffer(buf, 0, 0)`), ready for the next execute."""
        array = np.empty(shape, dtype)
        ptr = self.context.acl.get_data_buffer_addr(self._data_buffers[index])
        if not ptr:
            raise RuntimeError(f"output {index} holds no memory after acl.mdl.execute")
        try:
            copy_to_array(self.context, ptr, array)
        finally:
            _release_output(self.context, self._data_buffers[index])
        return array

    def release_outputs(self) -> None:
        """Free the memory `acl.mdl.execute` allocated into the empty data buffers and still
        held (after a failed execution, or one whose outputs were not taken); empty them."""
        for index, buffer in enumerate(self.buffers):
            if buffer is None:
                _release_output(self.context, self._data_buffers[index])


def _release_output(context: Context, data_buffer: int) -> None:
    """Free a system-allocated output's memory, if its data buffer holds any, and empty it."""
    acl = context.acl
    ptr = acl.get_data_buffer_addr(data_buffer)
    if not ptr:
        return
    context.activate()
    try:
        check(acl.rt.free(ptr), "acl.rt.free", acl)
    finally:
        check(acl.update_data_buffer(data_buffer, 0, 0), "acl.update_data_buffer", acl)


def _destroy_dataset(
    context: Context,
    handle: int,
    data_buffers: list[int],
    buffers: tuple[DeviceBuffer | None, ...],
) -> None:
    """Destroy the descriptors (`buffers` are held only so the memory outlives them), after
    freeing memory ACL allocated into an empty data buffer and still held."""
    acl = context.acl
    try:
        for buffer, data_buffer in zip(buffers, data_buffers):
            if buffer is None:
                _release_output(context, data_buffer)
    finally:
        rets = [(acl.destroy_data_buffer(b), "acl.destroy_data_buffer") for b in data_buffers]
        rets.append((acl.mdl.destroy_dataset(handle), "acl.mdl.destroy_dataset"))
        for ret, api in rets:
            check(ret, api, acl)


class Model(Resource):
    """A model loaded with its description: `acl.mdl.load_from_file_with_mem` into a work space
    of its own (or into `work`, a device buffer of at least `sizes.work` bytes others own and
    keep alive: a stream's shared work space, `workspaces.py`) and the weights every load of the
    same `.om` in its context shares (`_load`).

    `input_shape_order` (input names in ATC's `--input_shape` order) is needed only for a
    dynamic-dims model whose gears do not reveal that order (see `_split_dims_gears`).
    `aipp` fixes the AIPP of a dynamic-AIPP model's image inputs: one static-style op per
    input index (`related_input_rank`); such a model is refused without it.
    """

    def __init__(
        self,
        context: Context,
        path: str | Path,
        input_shape_order: Sequence[str] | None = None,
        aipp: Sequence[AippOp] = (),
        sizes: LoadSizes | None = None,
        work: DeviceBuffer | None = None,
    ) -> None:
        acl = context.acl
        context.activate()
        self.context = context
        self.path = Path(path)
        self.aipp = {op.related_input_rank: op for op in aipp}
        # what the load costs (query_size's; given by a further load of the same `.om`)
        self.sizes = LoadSizes.query(acl, self.path) if sizes is None else sizes
        model_id, memory = _load(context, self.path, self.sizes, work)
        self.model_id: int = model_id
        self._weights_key = memory.weights_key  # the weights it shares (`_load`), if any
        desc_holder: list[int] = []
        self._own(_unload, context, model_id, desc_holder, memory)
        context._adopt(self)
        try:
            desc = check_handle(acl.mdl.create_desc(), "acl.mdl.create_desc", acl)
            desc_holder.append(desc)
            check(acl.mdl.get_desc(desc, model_id), "acl.mdl.get_desc", acl)
            self.desc = desc
            described = _describe(acl, desc, self.path, input_shape_order, self.aipp)
            self.description = _with_aipp(acl, model_id, described, self.path)
        except BaseException:
            self._abandon()
            raise

    def record_weights(self, label: str) -> None:
        """Put the weights this load shares in the process's placement records under `label`
        unless a load sharing them did already: one record, removed with the weights' last load
        (a session that closes first leaves them recorded for the others). A load that shares
        none holds its weights in `sizes.load_bytes`."""
        with _weights_lock:
            weights = _weights.get(self._weights_key) if self._weights_key else None
            if weights is not None and weights.record is None:
                device_id = self.context.device.device_id
                weights.record = Placement(device_id, label, self.sizes.shared_bytes)

    def set_dynamic_batch_size(self, inputs: Dataset, batch: int) -> None:
        """Select batch gear `batch` for the next execution."""
        self.context.activate()
        acl = self.context.acl
        ret = acl.mdl.set_dynamic_batch_size(
            self.model_id, inputs.handle, self._gear_input(), batch
        )
        check(ret, "acl.mdl.set_dynamic_batch_size", acl)

    def set_dynamic_hw_size(self, inputs: Dataset, height: int, width: int) -> None:
        """Select HW gear (`height`, `width`) for the next execution."""
        self.context.activate()
        acl = self.context.acl
        ret = acl.mdl.set_dynamic_hw_size(
            self.model_id, inputs.handle, self._gear_input(), height, width
        )
        check(ret, "acl.mdl.set_dynamic_hw_size", acl)

    def set_input_dynamic_dims(self, inputs: Dataset, dims: Sequence[int]) -> None:
        """Select the dims gear whose inputs' shapes, concatenated, are `dims`."""
        self.context.activate()
        acl = self.context.acl
        gear = {"dimCount": len(dims), "name": "", "dims": list(dims)}
        ret = acl.mdl.set_input_dynamic_dims(self.model_id, inputs.handle, self._gear_input(), gear)
        check(ret, "acl.mdl.set_input_dynamic_dims", acl)

    def set_input_aipp(self, inputs: Dataset) -> None:
        """Write the fixed AIPP of each dynamic-AIPP image input into its parameter input
        (`create_aipp`, the `set_aipp_*` calls, `set_input_aipp`, `destroy_aipp`)."""
        self.context.activate()
        acl = self.context.acl
        for index, op in self.aipp.items():
            _, params_index, ret = acl.mdl.get_aipp_type(self.model_id, index)
            check(ret, "acl.mdl.get_aipp_type", acl)
            batch = next(i.spec.shape[0] for i in self.description.inputs if i.index == index)
            if batch < 0:  # batch gears: the largest (CANN "Concepts and Restrictions")
                batch = self.description.gears.max_batch
            handle = check_handle(acl.mdl.create_aipp(batch), "acl.mdl.create_aipp", acl)
            try:
                for api, args in _aipp_calls(op, batch):
                    check(getattr(acl.mdl, api)(handle, *args), f"acl.mdl.{api}", acl)
                ret = acl.mdl.set_input_aipp(self.model_id, inputs.handle, params_index, handle)
                check(ret, "acl.mdl.set_input_aipp", acl)
            finally:
                check(acl.mdl.destroy_aipp(handle), "acl.mdl.destroy_aipp", acl)

    def current_output_shapes(self) -> list[Shape]:
        """Output shapes of the gear selected last (`acl.mdl.get_cur_output_dims`)."""
        self.context.activate()
        acl = self.context.acl
        shapes = []
        for output in self.description.outputs:
            dims, ret = acl.mdl.get_cur_output_dims(self.desc, output.index)
            check(ret, "acl.mdl.get_cur_output_dims", acl)
            shapes.append(_dims(dims))
        return shapes

    def set_input_shapes(self, inputs: Dataset, shapes: Sequence[Shape]) -> None:
        """A dynamic-shape model: give each input's real dims to the next execution
        (`acl.create_tensor_desc` + `acl.mdl.set_dataset_tensor_desc`; the dataset keeps a
        copy, so ours is destroyed at once)."""
        self.context.activate()
        acl = self.context.acl
        for info, shape in zip(self.description.inputs, shapes):
            acl_dtype = DTYPES_BY_NUMPY[info.spec.dtype].acl
            desc = check_handle(
                acl.create_tensor_desc(acl_dtype, [int(d) for d in shape], _format(info.spec)),
                "acl.create_tensor_desc",
                acl,
            )
            try:
                _, ret = acl.mdl.set_dataset_tensor_desc(inputs.handle, desc, info.index)
                check(ret, "acl.mdl.set_dataset_tensor_desc", acl)
            finally:
                acl.destroy_tensor_desc(desc)

    def output_shapes(self, outputs: Dataset) -> list[Shape]:
        """A dynamic-shape model: each output's real shape from the output dataset's tensor
        descs, which GE recreates at every execute. Read them after the stream is synchronized
        (whether they are final when `execute_async` returns is UNCONFIRMED)."""
        self.context.activate()
        acl = self.context.acl
        shapes = []
        for info in self.description.outputs:
            desc = check_handle(
                acl.mdl.get_dataset_tensor_desc(outputs.handle, info.index),
                "acl.mdl.get_dataset_tensor_desc",
                acl,
            )
            dims = []
            for axis in range(acl.get_tensor_desc_num_dims(desc)):
                dim, ret = acl.get_tensor_desc_dim_v2(desc, axis)
                check(ret, "acl.get_tensor_desc_dim_v2", acl)
                dims.append(int(dim))
            shapes.append(tuple(dims))
        return shapes

    def execute_async(self, inputs: Dataset, outputs: Dataset, stream: Stream) -> None:
        """Queue one run of the model on `stream` (results after `stream.synchronize()`).

        How the runtime executes every model but one whose outputs the system allocates
        (`execute`): GE refuses mixing `acl.mdl.execute` and `execute_async` on one model id
        (a model id is used one way only), and one model id must not run on several streams at
        once (a pipelined session loads the `.om` once per lane).
        """
        self.context.activate()
        acl = self.context.acl
        ret = acl.mdl.execute_async(self.model_id, inputs.handle, outputs.handle, stream.handle)
        check(ret, "acl.mdl.execute_async", acl)

    def execute(self, inputs: Dataset, outputs: Dataset) -> None:
        """Run the model now (`acl.mdl.execute`, synchronous): for a model served with
        system-allocated outputs (empty data buffers in `outputs`, which ACL fills only in the
        synchronous call; aclmdlGetOutputSizeByIndex.md). Its model id is never given to
        `execute_async`."""
        self.context.activate()
        acl = self.context.acl
        check(acl.mdl.execute(self.model_id, inputs.handle, outputs.handle), "acl.mdl.execute", acl)

    def _gear_input(self) -> int:
        if self.description.gear_input is None:
            raise RuntimeError(f"{self.path} has no gears to select")
        return self.description.gear_input


def read_aipp_config(path: Path) -> list[AippOp]:
    """The aipp_op blocks of an ATC-syntax aipp.cfg (`aipp_config`); ModelFileError naming it."""
    try:
        return parse_aipp_config(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ModelFileError(f"cannot read aipp_config {path}: {exc.strerror or exc}") from exc
    except AippConfigError as exc:
        raise ModelFileError(f"aipp_config {path}: {exc}") from exc


def _aipp_calls(op: AippOp, batch: int) -> list[tuple[str, tuple[Any, ...]]]:
    """The set_aipp_* calls of acl.mdl (arguments after the handle) for `op` on each image."""
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("set_aipp_input_format", (int(op.input_format),)),
        ("set_aipp_src_image_size", (op.src_image_size_w, op.src_image_size_h)),
        (
            "set_aipp_csc_params",
            (
                int(op.csc_switch),
                *(v for row in op.matrix for v in row),
                *op.output_bias,
                *op.input_bias,
            ),
        ),
        ("set_aipp_rbuv_swap_switch", (int(op.rbuv_swap_switch),)),
        ("set_aipp_ax_swap_switch", (int(op.ax_swap_switch),)),
    ]
    for b in range(batch):
        calls += [
            (
                "set_aipp_crop_params",
                (
                    int(op.crop),
                    op.load_start_pos_w,
                    op.load_start_pos_h,
                    op.crop_size_w,
                    op.crop_size_h,
                    b,
                ),
            ),
            (
                "set_aipp_padding_params",
                (
                    int(op.padding),
                    op.top_padding_size,
                    op.bottom_padding_size,
                    op.left_padding_size,
                    op.right_padding_size,
                    b,
                ),
            ),
            ("set_aipp_dtc_pixel_mean", (*op.mean_chn, b)),
            ("set_aipp_dtc_pixel_min", (*op.min_chn, b)),
            ("set_aipp_pixel_var_reci", (*op.var_reci_chn, b)),
        ]
    return calls


@dataclasses.dataclass
class _Weights:
    """The weights of one `.om` in one context, shared by its loads, and their placement record
    (`Model.record_weights`)."""

    buffer: DeviceBuffer
    users: int = 0
    record: Placement | None = None


_weights_lock = threading.Lock()
_weights: dict[tuple[int, str, int, int, int], _Weights] = {}


@dataclasses.dataclass
class _LoadMemory:
    """The device memory a load was given: its work space and its share of the weights."""

    work: DeviceBuffer | None = None
    weights_key: tuple[int, str, int, int, int] | None = None

    def release(self) -> None:
        """Free the work space and leave the weights (freed, and their record removed, with
        their last load)."""
        resources: list[Resource] = [] if self.work is None else [self.work]
        key, self.weights_key, self.work = self.weights_key, None, None
        if key is not None:
            with _weights_lock:
                weights = _weights[key]
                weights.users -= 1
                if not weights.users:
                    del _weights[key]
                    resources.append(weights.buffer)
                    if weights.record is not None:
                        resources.append(weights.record)
        close_all(resources)


@dataclasses.dataclass(frozen=True)
class LoadSizes:
    """What loading one `.om` costs the device, as `_load` loads it: `acl.mdl.query_size`'s
    work and weight sizes (0 when it cannot tell).

    A model query_size sizes (`with_mem`) holds its weights once per context, every load of it
    there sharing them (`shared_bytes`), and a work space per load (`load_bytes`), both from
    `acl.rt.malloc` (as it reserves them); any other is loaded with `load_from_file`, ACL
    allocating work and weights for each load (`load_bytes`; 0 when query_size failed).
    `Session`'s placement record and out-of-memory error and the device budget count with it."""

    work: int = 0
    weight: int = 0

    @classmethod
    def query(cls, acl: ModuleType, path: Path) -> LoadSizes:
        """The sizes of the `.om` at `path` (0 and 0 when query_size fails)."""
        work, weight, ret = acl.mdl.query_size(str(path))
        return cls(work, weight) if ret == 0 else cls()

    @property
    def with_mem(self) -> bool:
        """Loaded into memory of ours (`load_from_file_with_mem`), the weights shared.
        Dynamic-shape models compiled with --input_shape_range report no work size."""
        return self.work > 0 and self.weight > 0

    @property
    def shared_bytes(self) -> int:
        """Device bytes held once per context by all loads of the model there: the weights."""
        return malloc_reserved(self.weight) if self.with_mem else 0

    @property
    def load_bytes(self) -> int:
        """Device bytes each load holds of its own."""
        return malloc_reserved(self.work) if self.with_mem else self.work + self.weight


def _load(
    context: Context, path: Path, sizes: LoadSizes, work: DeviceBuffer | None = None
) -> tuple[int, _LoadMemory]:
    """Load `path` (of `sizes`) in `context`: (model id, the memory given to it).

    Two loads of the same model may share one weight buffer, which the model only reads during
    inference (aclmdlLoadFromFileWithMem, weightPtr): so the lanes of a `Session`, and in a
    device host every instance of a model, hold one copy of its weights per device. Each load
    gets a work space of its own (ACL's samples allocate both with aclrtMalloc), or the start
    of `work` (a stream's, shared by the models that run one after another on it; the caller
    keeps it). A model `acl.mdl.query_size` cannot size (`LoadSizes.with_mem`) is loaded with
    `load_from_file`, ACL allocating its memory."""
    acl = context.acl
    if not sizes.with_mem:
        model_id, ret = acl.mdl.load_from_file(str(path))
        check(ret, "acl.mdl.load_from_file", acl)
        return model_id, _LoadMemory()
    info = os.stat(path)
    key = (id(context), os.path.realpath(path), info.st_size, info.st_mtime_ns, sizes.weight)
    memory = _LoadMemory()
    try:
        with _weights_lock:
            weights = _weights.get(key)
            if weights is None:
                weights = _weights[key] = _Weights(DeviceBuffer(context, sizes.weight))
            weights.users += 1
            memory.weights_key = key
        if work is None:
            work = memory.work = DeviceBuffer(context, sizes.work)
        elif work.size < sizes.work:
            raise ValueError(f"{path} needs a work space of {sizes.work} bytes, given {work!r}")
        context.activate()
        model_id, ret = acl.mdl.load_from_file_with_mem(
            str(path), work.ptr, sizes.work, weights.buffer.ptr, sizes.weight
        )
        check(ret, "acl.mdl.load_from_file_with_mem", acl)
    except BaseException:
        try:
            memory.release()
        except Exception:  # the load's own error is the one to report
            logger.warning("releasing the memory of a failed load of %s", path, exc_info=True)
        raise
    return model_id, memory


def _unload(context: Context, model_id: int, desc_holder: list[int], memory: _LoadMemory) -> None:
    acl = context.acl
    context.activate()
    rets = [(acl.mdl.destroy_desc(desc), "acl.mdl.destroy_desc") for desc in desc_holder]
    rets.append((acl.mdl.unload(model_id), "acl.mdl.unload"))
    memory.release()  # after the unload: the model no longer uses it
    for ret, api in rets:
        check(ret, api, acl)


def _dims(dims: dict[str, Any]) -> Shape:
    return tuple(int(d) for d in dims["dims"][: dims["dimCount"]])


def _dtype(code: int, what: str, path: Path) -> tuple[np.dtype[Any], str]:
    """(numpy dtype, Triton name) of an aclDataType; ModelFileError for one numpy cannot hold."""
    data_type = DTYPES_BY_ACL.get(code)
    if data_type is None or data_type.numpy is None or data_type.triton is None:
        name = f"aclDataType {code}" if data_type is None else data_type.acl_name
        supported = ", ".join(t.acl_name for t in DTYPES_BY_NUMPY.values())
        raise ModelFileError(
            f"{path}: {what} has data type {name}, which this backend cannot serve; "
            f"supported: {supported}"
        )
    return data_type.numpy, data_type.triton


def _output_names(mdl: Any, desc: int, path: Path) -> list[str]:
    """The outputs' served names: the tensor name of each ACL output name
    (`ascend.tensor_name_of_output`), taken from get_output_name_by_index, which keeps names
    over 127 characters whole (the dims calls convert them); ModelFileError if two collide."""
    reported = [mdl.get_output_name_by_index(desc, i) for i in range(mdl.get_num_outputs(desc))]
    names = [tensor_name_of_output(name) for name in reported]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        listed = ", ".join(f"{name!r} (from {acl!r})" for name, acl in zip(names, reported))
        raise ModelFileError(
            f"{path}: outputs would be served under the same name ({', '.join(repeated)}); the "
            f"outputs are {listed}"
        )
    return names


def _format(spec: TensorSpec) -> int:
    """The aclFormat code of a spec's format name (ND for a name `Format` does not list)."""
    return int(Format.__members__.get(spec.format, Format.ND))


def _describe(
    acl: ModuleType,
    desc: int,
    path: Path,
    input_shape_order: Sequence[str] | None,
    aipp: Mapping[int, AippOp] | None = None,
) -> ModelDescription:
    mdl = acl.mdl
    input_count = mdl.get_num_inputs(desc)
    gear_index, ret = mdl.get_input_index_by_name(desc, GEAR_INPUT_NAME)
    gear_input = gear_index if ret == 0 else None  # non-zero: the model has no gears
    names = [mdl.get_input_name_by_index(desc, index) for index in range(input_count)]
    # ACL itself finds the parameter input by this name (acl_aipp.cpp CheckAippDataIndex)
    aipp_inputs = tuple(
        (index, mdl.get_input_size_by_index(desc, index))
        for index, name in enumerate(names)
        if name.startswith(DYNAMIC_AIPP_INPUT_NAME)
    )
    if aipp and not aipp_inputs:
        logger.warning(
            "%s: aipp_config is ignored: the model has no dynamic AIPP input (static AIPP is "
            "compiled into the model and needs no parameters)",
            path,
        )
        aipp = None
    if aipp_inputs and not aipp:
        raise ModelFileError(
            f"{path}: the model has dynamic AIPP ({', '.join(names[i] for i, _ in aipp_inputs)}"
            " takes the AIPP parameters of each execution); to serve it, fix them per model: "
            "set the parameter aipp_config to an ATC-syntax aipp.cfg (aipp_op blocks with "
            "aipp_mode: static, related_input_rank, input_format, src_image_size_w/h, ...)"
        )

    inputs = []
    for index, name in enumerate(names):
        if index == gear_input or index in dict(aipp_inputs):
            continue
        dims, ret = mdl.get_input_dims(desc, index)
        check(ret, "acl.mdl.get_input_dims", acl)
        dtype, triton = _dtype(mdl.get_input_data_type(desc, index), f"input {name!r}", path)
        fmt = mdl.get_input_format(desc, index)
        size = mdl.get_input_size_by_index(desc, index)
        op = (aipp or {}).get(index) if aipp_inputs else None
        if op is not None:
            shape, size = _dynamic_aipp_dims(op, _dims(dims), size, name, path)
        else:
            shape = _served_dims(acl, desc, index, name, dtype, _dims(dims), size, path)
        spec = TensorSpec(name, dtype, triton, shape, format_name(fmt))
        inputs.append(TensorInfo(index, spec, size))

    outputs = []
    for index, name in enumerate(_output_names(mdl, desc, path)):
        dims, ret = mdl.get_output_dims(desc, index)
        check(ret, "acl.mdl.get_output_dims", acl)
        dtype, triton = _dtype(mdl.get_output_data_type(desc, index), f"output {name!r}", path)
        fmt = mdl.get_output_format(desc, index)
        spec = TensorSpec(name, dtype, triton, _dims(dims), format_name(fmt))
        outputs.append(TensorInfo(index, spec, mdl.get_output_size_by_index(desc, index)))

    kind = GearKind.STATIC
    batch_gears: tuple[int, ...] = ()
    hw_gears: tuple[tuple[int, int], ...] = ()
    dims_gears: tuple[tuple[Shape, ...], ...] = ()
    dims_values: tuple[tuple[int, ...], ...] = ()
    if gear_input is not None:
        kind, batch_gears, hw_gears, dims_values = _gears(acl, desc, path)
        if kind == GearKind.DIMS:
            dims_gears = _split_dims_gears(dims_values, inputs, path, input_shape_order)
    else:
        inputs = [_with_ranges(acl, desc, info, path) for info in inputs]
    dynamic_shape = gear_input is None and any(
        -1 in info.spec.shape for info in (*inputs, *outputs)
    )
    return ModelDescription(
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        input_count=input_count,
        gear_input=gear_input,
        gear_input_size=(
            0 if gear_input is None else mdl.get_input_size_by_index(desc, gear_input)
        ),
        gears=GearInfo(
            kind=kind,
            batched=kind == GearKind.BATCH,
            batch_gears=batch_gears,
            hw_gears=hw_gears,
            dims_gears=dims_gears,
            max_batch=max(batch_gears, default=0),
        ),
        dims_values=dims_values,
        aipp_inputs=aipp_inputs,
        dynamic_shape=dynamic_shape,
    )


def _dynamic_aipp_dims(
    op: AippOp, dims: Shape, size: int, name: str, path: Path
) -> tuple[Shape, int]:
    """(shape, bytes) a dynamic-AIPP image input is served with under `op`: n source images
    in the v2 layout of `op`'s format (aclmdlGetInputDimsV2.md table 1); with batch gears n is
    -1 (GE reports `[-1,-1,-1,-1]`) and the bytes are the model's size."""
    if len(dims) != 4 or dims[0] == 0 or dims[0] < -1:
        raise ModelFileError(f"{path}: dynamic AIPP input {name!r} reports dims {list(dims)}")
    if not (op.is_static and op.src_image_size_w and op.src_image_size_h):
        raise ModelFileError(
            f"{path}: aipp_config for input {name!r} must be an aipp_mode: static block with "
            "input_format and src_image_size_w/h (the fixed parameters of each execution)"
        )
    layout = op.input_format.layout
    h, w = op.src_image_size_h, op.src_image_size_w
    shape = (dims[0], h * layout.h_num // layout.h_den, w, layout.v2_channels)
    return shape, (math.prod(shape) if dims[0] > 0 else size)


def _served_dims(
    acl: ModuleType,
    desc: int,
    index: int,
    name: str,
    dtype: np.dtype[Any],
    dims: Shape,
    size: int,
    path: Path,
) -> Shape:
    """The shape input `index` is served with: its bytes must be the model's size.

    v1 (`get_input_dims`) where its bytes are the size (within GE's slack below it); else v2
    (`get_input_dims_v2`) where its bytes are exactly the size: a static-AIPP input from a
    YUV420SP_U8 image reports v1 `[n,h,w,3]` but takes `n*h*w*1.5` bytes, v2 `[n,h*1.5,w,1]`
    (aclmdlGetInputDimsV2.md table 1). Any other disagreement is refused, naming both. An
    input with gears (-1 dims, sized per gear) is served in v2 where v2 differs: GE keeps the
    -1 of both on the same axes for a static-AIPP input (insert_aipp_op_util.cc
    UpdateMultiBatchInputDims, SetModelInputDims).
    """
    if -1 in dims:
        v2, ret = acl.mdl.get_input_dims_v2(desc, index)
        check(ret, "acl.mdl.get_input_dims_v2", acl)
        v2_dims = _dims(v2)
        if v2_dims == dims:
            return dims
        if len(v2_dims) != len(dims) or [d < 0 for d in v2_dims] != [d < 0 for d in dims]:
            raise ModelFileError(
                f"{path}: input {name!r} reports dims {list(dims)} and dims_v2 "
                f"{list(v2_dims)}, with -1 on different axes; neither can be served per gear"
            )
        return v2_dims
    v1_bytes = math.prod(dims) * dtype.itemsize
    if size - SIZE_SLACK <= v1_bytes <= size:
        return dims
    v2, ret = acl.mdl.get_input_dims_v2(desc, index)
    check(ret, "acl.mdl.get_input_dims_v2", acl)
    v2_dims = _dims(v2)
    v2_bytes = math.prod(v2_dims) * dtype.itemsize
    if v2_bytes == size:
        return v2_dims
    raise ModelFileError(
        f"{path}: input {name!r} reports dims {list(dims)} ({v1_bytes} bytes of {dtype}) and "
        f"dims_v2 {list(v2_dims)} ({v2_bytes} bytes), but its size is {size} bytes "
        "(get_input_size_by_index); neither shape can be served"
    )


def _with_aipp(
    acl: ModuleType, model_id: int, description: ModelDescription, path: Path
) -> ModelDescription:
    """The description with each input's AIPP kind (`get_aipp_type`, `get_first_aipp_info`),
    logged at load."""
    inputs = []
    for info in description.inputs:
        kind, _, ret = acl.mdl.get_aipp_type(model_id, info.index)
        check(ret, "acl.mdl.get_aipp_type", acl)
        text = ""
        rows = (1, 1)
        if kind == AippType.STATIC:
            aipp, ret = acl.mdl.get_first_aipp_info(model_id, info.index)
            check(ret, "acl.mdl.get_first_aipp_info", acl)
            text = aipp_text(aipp)
            rows = _v2_rows(aipp, info)
        elif kind != AippType.NONE:
            text = f"{AippType(kind).name.lower()} AIPP"
        if text:
            logger.info(
                "%s: input %s has %s; served as %s %s",
                path,
                info.spec.name,
                text,
                info.spec.triton_dtype,
                list(info.spec.shape),
            )
        inputs.append(dataclasses.replace(info, aipp=text, v2_rows=rows))
    return dataclasses.replace(description, inputs=tuple(inputs))


def _v2_rows(aipp: dict[str, Any], info: TensorInfo) -> tuple[int, int]:
    """`TensorInfo.v2_rows` of a static-AIPP input: its source format's v2 rows per image row
    when it is served in v2 dims (NHWC, C of v2), else (1, 1)."""
    try:
        layout = AippInputFormat(aipp["inputFormat"]).layout
    except (ValueError, KeyError):
        return (1, 1)  # a format the pipeline does not lay out: served as reported
    shape = info.spec.shape
    if len(shape) != 4 or shape[3] != layout.v2_channels:
        return (1, 1)
    return (layout.h_num, layout.h_den)


def aipp_text(info: dict[str, Any]) -> str:
    """One line of what `get_first_aipp_info` reports: source format, crop, CSC, normalisation."""
    try:
        source = AippInputFormat(info["inputFormat"]).name
    except ValueError:
        source = f"input format {info['inputFormat']}"
    parts = [f"static AIPP from {source} {info['srcImageSizeW']}x{info['srcImageSizeH']}"]
    if info["cropSwitch"]:
        parts.append(
            f"crop {info['cropSizeW']}x{info['cropSizeH']} at "
            f"({info['loadStartPosW']},{info['loadStartPosH']})"
        )
    if info["cscSwitch"]:
        parts.append("CSC")
    if info["rbuvSwapSwitch"]:
        parts.append("R/B (U/V) swap")
    if info["axSwapSwitch"]:
        parts.append("AX swap")
    channels = range(3)
    parts.append(
        "(x - mean - min) * var_reci with mean "
        f"{[info[f'meanChn{i}'] for i in channels]}, min "
        f"{[round(info[f'minChn{i}'], 6) for i in channels]}, var_reci "
        f"{[round(info[f'varReciChn{i}'], 6) for i in channels]}"
    )
    if info["paddingSwitch"]:
        parts.append(
            "padding top/bottom/left/right "
            f"{info['topPaddingSize']}/{info['bottomPaddingSize']}/"
            f"{info['leftPaddingSize']}/{info['rightPaddingSize']}"
        )
    return ", ".join(parts)


def _with_ranges(acl: ModuleType, desc: int, info: TensorInfo, path: Path) -> TensorInfo:
    """A shape-range input (-1 dims, no gears) with its ranges; ModelFileError if a range has
    no upper bound (its buffers could not be sized)."""
    if -1 not in info.spec.shape:
        return info
    found, ret = acl.mdl.get_input_dims_range(desc, info.index)
    check(ret, "acl.mdl.get_input_dims_range", acl)
    ranges = tuple((int(lo), int(hi)) for lo, hi in found["range"][: found["rangeCount"]])
    if len(ranges) != len(info.spec.shape) or any(hi < 0 for _, hi in ranges):
        raise ModelFileError(
            f"{path}: input {info.spec.name!r} has dims {list(info.spec.shape)} with the shape "
            f"range {[list(r) for r in ranges]}, which has no upper bound, so its buffers "
            'cannot be sized; compile it with bounded ranges (--input_shape "x:1~16,...") or '
            "with gears (--dynamic_batch_size, --dynamic_image_size, --dynamic_dims)"
        )
    return dataclasses.replace(info, ranges=ranges)


def _gears(
    acl: ModuleType, desc: int, path: Path
) -> tuple[GearKind, tuple[int, ...], tuple[tuple[int, int], ...], tuple[tuple[int, ...], ...]]:
    """(kind, batch gears, HW gears, dims gears as ACL lists them)."""
    mdl = acl.mdl
    batch, ret = mdl.get_dynamic_batch(desc)
    check(ret, "acl.mdl.get_dynamic_batch", acl)
    if batch["batchCount"]:
        return GearKind.BATCH, tuple(int(b) for b in batch["batch"][: batch["batchCount"]]), (), ()

    hw, ret = mdl.get_dynamic_hw(desc, -1)
    check(ret, "acl.mdl.get_dynamic_hw", acl)
    if hw["hwCount"]:
        return GearKind.HW, (), tuple((int(h), int(w)) for h, w in hw["hw"][: hw["hwCount"]]), ()

    count, ret = mdl.get_input_dynamic_gear_count(desc, -1)
    check(ret, "acl.mdl.get_input_dynamic_gear_count", acl)
    if not count:
        raise ModelFileError(f"{path}: the model has {GEAR_INPUT_NAME} but reports no gears")
    gears, ret = mdl.get_input_dynamic_dims(desc, -1, count)
    check(ret, "acl.mdl.get_input_dynamic_dims", acl)
    return GearKind.DIMS, (), (), tuple(_dims(gear) for gear in gears)


def _split_dims_gears(
    gears: Sequence[tuple[int, ...]],
    inputs: Sequence[TensorInfo],
    path: Path,
    input_shape_order: Sequence[str] | None,
) -> tuple[tuple[Shape, ...], ...]:
    """Every input's full shape per dims gear, in the model's input order.

    ACL lists each gear as the full dims of the inputs named in ATC's `--input_shape`, in that
    order (GE's user-designate order, which no ACL call reports; inputs not named there keep
    their dims). The order is `input_shape_order` when given; otherwise it is found as the only
    order of inputs whose dims fit every gear (static dims equal, dynamic dims anywhere). Orders
    that fit but disagree (e.g. two inputs (1, -1) with different values) need the caller's order.
    """
    names = [info.spec.name for info in inputs]
    templates = {info.spec.name: info.spec.shape for info in inputs}
    if input_shape_order is not None:
        unknown = [name for name in input_shape_order if name not in templates]
        if unknown:
            raise ModelFileError(
                f"{path}: input_shape_order names {', '.join(unknown)}, which the model does "
                f"not have; its inputs are {', '.join(names)}"
            )
        orders = [tuple(input_shape_order)] if _fits(input_shape_order, templates, gears) else []
    else:
        orders = _fitting_orders(templates, gears)
    splits = {_split(order, templates, gears) for order in orders}
    if not splits:
        described = ", ".join(f"{name} {list(templates[name])}" for name in names)
        given = f" in the given input_shape_order {list(input_shape_order or ())}"
        raise ModelFileError(
            f"{path}: acl.mdl.get_input_dynamic_dims reported gears {[list(g) for g in gears]}, "
            f"which fit no order of the inputs {described}{given if input_shape_order else ''}"
        )
    if len(splits) > 1:
        raise ModelFileError(
            f"{path}: the dims gears {[list(g) for g in gears]} fit several orders of the inputs "
            f"{', '.join(names)} (ACL lists them in ATC's --input_shape order, which it does not "
            "report); give that order as input_shape_order (e.g. the parameter input_shape_order "
            "in config.pbtxt)"
        )
    return splits.pop()


def _fitting_orders(
    templates: dict[str, Shape], gears: Sequence[tuple[int, ...]]
) -> list[tuple[str, ...]]:
    """Orders of inputs (every dynamic input, any static ones) whose dims fit every gear."""
    names = list(templates)
    dynamic = [n for n in names if -1 in templates[n]]
    static = [n for n in names if n not in dynamic]
    found = []
    for extra in range(len(static) + 1):
        for chosen in itertools.combinations(static, extra):
            for order in itertools.permutations(dynamic + list(chosen)):
                if _fits(order, templates, gears):
                    found.append(order)
    return found


def _fits(
    order: Sequence[str], templates: dict[str, Shape], gears: Sequence[tuple[int, ...]]
) -> bool:
    if any(-1 in shape for name, shape in templates.items() if name not in order):
        return False
    flat = [d for name in order for d in templates[name]]
    return all(
        len(gear) == len(flat) and all(t in (-1, g) and g > 0 for t, g in zip(flat, gear))
        for gear in gears
    )


def _split(
    order: Sequence[str], templates: dict[str, Shape], gears: Sequence[tuple[int, ...]]
) -> tuple[tuple[Shape, ...], ...]:
    result = []
    for gear in gears:
        shapes = dict(templates)
        start = 0
        for name in order:
            shapes[name] = tuple(gear[start : start + len(templates[name])])
            start += len(templates[name])
        result.append(tuple(shapes.values()))
    return tuple(result)
