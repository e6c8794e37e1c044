"""`acl.mdl`: model loading, descriptions, datasets, gears and execution."""

from __future__ import annotations

import ctypes
from typing import Any

from ge_python_backend.emulator._api import api, value, zero_ret
from ge_python_backend.emulator._memory import MEMORY
from ge_python_backend.emulator._models import (
    GEAR_CODES,
    KIND_LABELS,
    MBATCH_NAME,
    IoTensor,
    LoadedModel,
    ModelDesc,
    prepare,
    write_gear,
)
from ge_python_backend.emulator._state import (
    LOCK,
    STATE,
    AclFailure,
    Context,
    Dataset,
    current_context,
    require_init,
)
from ge_python_backend.emulator._streams import stream_in
from ge_python_backend.emulator.omfile import OmFormatError, OmModel

MAX_GEAR_QUERY = 4096
RESERVED_INDEX = -1


def _none_ret(code: int, args: tuple[Any, ...]) -> tuple[None, int]:
    return None, code


def _dict_ret(code: int, args: tuple[Any, ...]) -> tuple[dict[str, Any], int]:
    return {}, code


# ----------------------------------------------------------------------------- loading


@api("acl.mdl.load_from_file", str, fail=zero_ret)
def load_from_file(path: str) -> tuple[int, int]:
    """(model_id, ret): load an emulator .om under the current context."""
    ctx = current_context()
    try:
        om = OmModel.load(path)
    except OmFormatError as exc:
        raise AclFailure(exc.acl_code, str(exc)) from exc
    return _register(om, ctx), 0


@api("acl.mdl.load_from_mem", int, int, fail=zero_ret)
def load_from_mem(ptr: int, size: int) -> tuple[int, int]:
    """(model_id, ret): load an emulator .om from `size` bytes of host memory at `ptr`."""
    ctx = current_context()
    if size <= 0:
        raise AclFailure(100000, f"size must be > 0, got {size}")
    with LOCK:
        try:
            span = MEMORY.resolve(ptr, "ptr")
        except AclFailure as exc:
            raise AclFailure(100000, str(exc)) from exc
    if span.on_device:
        raise AclFailure(
            100000, f"ptr 0x{ptr:x} is device memory; the model must be in host memory"
        )
    if span.remaining is not None and size > span.remaining:
        raise AclFailure(100000, f"size {size} runs past the end of the allocation at 0x{ptr:x}")
    try:
        om = OmModel.load(ctypes.string_at(span.address, size))
    except OmFormatError as exc:
        raise AclFailure(exc.acl_code, str(exc)) from exc
    return _register(om, ctx), 0


@api("acl.mdl.unload", int)
def unload(model_id: int) -> int:
    """Unload a model (under the context that loaded it)."""
    ctx = current_context()
    with LOCK:
        model = _model_in(model_id, ctx)
        model.live = False
        del STATE.models[model_id]
        STATE.count("model_unloads")
    return 0


# ----------------------------------------------------------------------------- descriptions


@api("acl.mdl.create_desc", fail=value(0), fault="none")
def create_desc() -> int:
    """A new, empty model description (0 on failure)."""
    require_init()
    desc = ModelDesc(STATE.new_handle())
    with LOCK:
        STATE.descs[desc.handle] = desc
    return desc.handle


@api("acl.mdl.get_desc", int, int, fault="none")
def get_desc(desc: int, model_id: int) -> int:
    """Fill `desc` from a loaded model."""
    require_init()
    with LOCK:
        target = _desc(desc)
        model = _model(model_id)
        target.model = model
    return 0


@api("acl.mdl.destroy_desc", int, fault="none")
def destroy_desc(desc: int) -> int:
    """Destroy a description."""
    require_init()
    with LOCK:
        _desc(desc)
        del STATE.descs[desc]
    return 0


@api("acl.mdl.get_num_inputs", int, fail=value(0), fault="none")
def get_num_inputs(desc: int) -> int:
    """Inputs, including ascend_mbatch_shape_data of a gear model (0 for a bad desc)."""
    return len(_described(desc).inputs)


@api("acl.mdl.get_num_outputs", int, fail=value(0), fault="none")
def get_num_outputs(desc: int) -> int:
    """Outputs (0 for a bad desc)."""
    return len(_described(desc).outputs)


@api("acl.mdl.get_input_size_by_index", int, int, fail=value(0), fault="none")
def get_input_size_by_index(desc: int, index: int) -> int:
    """Bytes of input `index` for the largest gear (0 on failure)."""
    return _tensor(desc, index, True).size


@api("acl.mdl.get_output_size_by_index", int, int, fail=value(0), fault="none")
def get_output_size_by_index(desc: int, index: int) -> int:
    """Bytes of output `index` for the largest gear (0 on failure)."""
    return _tensor(desc, index, False).size


@api("acl.mdl.get_input_dims", int, int, fail=_dict_ret, fault="none")
def get_input_dims(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"name", "dimCount", "dims"}, ret); -1 on dynamic axes."""
    return _tensor(desc, index, True).dims_dict(), 0


@api("acl.mdl.get_output_dims", int, int, fail=_dict_ret, fault="none")
def get_output_dims(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"name", "dimCount", "dims"}, ret) for the largest gear."""
    return _tensor(desc, index, False).dims_dict(), 0


@api("acl.mdl.get_cur_output_dims", int, int, fail=_dict_ret, fault="none")
def get_cur_output_dims(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"name", "dimCount", "dims"}, ret) for the gear the last set_* call selected."""
    tensor = _tensor(desc, index, False)
    model = _described(desc)
    model.check_live()
    shapes = model.om.description.output_shapes(model.current_gear)
    return tensor.dims_dict(shapes[index]), 0


@api("acl.mdl.get_input_data_type", int, int, fail=value(-1), fault="none")
def get_input_data_type(desc: int, index: int) -> int:
    """aclDataType of input `index` (-1 on failure)."""
    return _tensor(desc, index, True).acl_dtype


@api("acl.mdl.get_output_data_type", int, int, fail=value(-1), fault="none")
def get_output_data_type(desc: int, index: int) -> int:
    """aclDataType of output `index` (-1 on failure)."""
    return _tensor(desc, index, False).acl_dtype


@api("acl.mdl.get_input_format", int, int, fail=value(-1), fault="none")
def get_input_format(desc: int, index: int) -> int:
    """aclFormat of input `index` (-1 on failure)."""
    return _tensor(desc, index, True).acl_format


@api("acl.mdl.get_output_format", int, int, fail=value(-1), fault="none")
def get_output_format(desc: int, index: int) -> int:
    """aclFormat of output `index` (-1 on failure)."""
    return _tensor(desc, index, False).acl_format


@api("acl.mdl.get_input_name_by_index", int, int, fail=value(None), fault="none")
def get_input_name_by_index(desc: int, index: int) -> str:
    """Name of input `index` (None on failure)."""
    return _tensor(desc, index, True).name


@api("acl.mdl.get_output_name_by_index", int, int, fail=value(None), fault="none")
def get_output_name_by_index(desc: int, index: int) -> str:
    """Name of output `index` (None on failure)."""
    return _tensor(desc, index, False).name


def _index_fail(code: int, args: tuple[Any, ...]) -> tuple[int, int]:
    return -1, code


@api("acl.mdl.get_input_index_by_name", int, str, fail=_index_fail, fault="none")
def get_input_index_by_name(desc: int, name: str) -> tuple[int, int]:
    """(index, ret); an unknown name gives (-1, 100000)."""
    return _index_of(_described(desc).inputs, name, "input"), 0


@api("acl.mdl.get_output_index_by_name", int, str, fail=_index_fail, fault="none")
def get_output_index_by_name(desc: int, name: str) -> tuple[int, int]:
    """(index, ret); an unknown name gives (-1, 100000)."""
    return _index_of(_described(desc).outputs, name, "output"), 0


# ----------------------------------------------------------------------------- gears


@api("acl.mdl.get_dynamic_batch", int, fail=_dict_ret, fault="none")
def get_dynamic_batch(desc: int) -> tuple[dict[str, Any], int]:
    """({"batchCount", "batch"}, ret); count 0 when the model has no batch gears."""
    model = _described(desc)
    batches = [g[0] for g in model.gears] if model.kind == "batch" else []
    return {"batchCount": len(batches), "batch": batches}, 0


@api("acl.mdl.get_dynamic_hw", int, int, fail=_dict_ret, fault="none")
def get_dynamic_hw(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"hwCount", "hw": [[h, w], ...]}, ret); `index` is -1 (reserved) or an input index."""
    model = _described(desc)
    if index != RESERVED_INDEX and not 0 <= index < len(model.inputs):
        raise AclFailure(100000, f"index must be -1 or an input index, got {index}")
    hw = [list(g) for g in model.gears] if model.kind == "hw" else []
    return {"hwCount": len(hw), "hw": hw}, 0


@api("acl.mdl.get_input_dynamic_gear_count", int, int, fail=zero_ret, fault="none")
def get_input_dynamic_gear_count(desc: int, index: int) -> tuple[int, int]:
    """(number of dynamic-dims gears, ret); `index` must be -1 (reserved)."""
    model = _described(desc)
    _reserved(index)
    return (len(model.gears) if model.kind == "dims" else 0), 0


@api("acl.mdl.get_input_dynamic_dims", int, int, int, fail=_none_ret, fault="none")
def get_input_dynamic_dims(desc: int, index: int, gear_count: int) -> tuple[list[Any], int]:
    """(one {"name": "", "dimCount", "dims"} per gear, all inputs' dims concatenated, ret)."""
    if gear_count > MAX_GEAR_QUERY:
        raise AclFailure(100000, f"gear count {gear_count} exceeds {MAX_GEAR_QUERY}")
    model = _described(desc)
    _reserved(index)
    gears = model.gears if model.kind == "dims" else ()
    if gear_count != len(gears):
        # Stricter reading: the count must be what get_input_dynamic_gear_count returned.
        raise AclFailure(
            100000, f"gear count {gear_count} differs from the model's {len(gears)} gears"
        )
    result = []
    for gear in gears:
        dims = [d for shape in model.om.description.input_shapes(gear) for d in shape]
        result.append({"name": "", "dimCount": len(dims), "dims": dims})
    return result, 0


@api("acl.mdl.set_dynamic_batch_size", int, int, int, int)
def set_dynamic_batch_size(model_id: int, dataset: int, index: int, batch_size: int) -> int:
    """Write batch gear `batch_size` into the ascend_mbatch_shape_data buffer at `index`."""
    with LOCK:
        model, target = _gear_target(model_id, dataset, index, "batch")
        _check_gear(model, (batch_size,), f"batch size {batch_size}")
        write_gear(model, target, index, (batch_size,))
    return 0


@api("acl.mdl.set_dynamic_hw_size", int, int, int, int, int)
def set_dynamic_hw_size(model_id: int, dataset: int, index: int, height: int, width: int) -> int:
    """Write HW gear (height, width) into the ascend_mbatch_shape_data buffer at `index`."""
    with LOCK:
        model, target = _gear_target(model_id, dataset, index, "hw")
        _check_gear(model, (height, width), f"height,width {height},{width}")
        write_gear(model, target, index, (height, width))
    return 0


@api("acl.mdl.set_input_dynamic_dims", int, int, int, dict)
def set_input_dynamic_dims(model_id: int, dataset: int, index: int, dims: dict[str, Any]) -> int:
    """Select the dims gear whose concatenated input dims equal `dims["dims"]`."""
    values = dims.get("dims")
    count = dims.get("dimCount")
    if (
        not isinstance(values, list)
        or not all(isinstance(v, int) for v in values)
        or count != len(values)
    ):
        raise AclFailure(
            100000,
            'dims must be {"dimCount": n, "name": "", "dims": [n ints]}: every dim of every '
            "input, concatenated in input order",
        )
    with LOCK:
        model, target = _gear_target(model_id, dataset, index, "dims")
        desc = model.om.description
        for gear in model.gears:
            if [d for shape in desc.input_shapes(gear) for d in shape] == values:
                write_gear(model, target, index, gear)
                return 0
        choices = "; ".join(
            str([d for shape in desc.input_shapes(g) for d in shape]) for g in model.gears
        )
        # UNCONFIRMED code for a dims value that is not a gear: 145021 (SHAPE_INVALID).
        raise AclFailure(
            GEAR_CODES["dims"],
            f"dims {values} are not a compiled gear; the gears (all inputs' dims "
            f"concatenated) are: {choices}",
        )


# ----------------------------------------------------------------------------- datasets


@api("acl.mdl.create_dataset", fail=value(0), fault="none")
def create_dataset() -> int:
    """A new empty dataset (0 on failure)."""
    require_init()
    dataset = Dataset(STATE.new_handle())
    with LOCK:
        STATE.datasets[dataset.handle] = dataset
        STATE.count("dataset_creations")
    return dataset.handle


@api("acl.mdl.add_dataset_buffer", int, int, fail=lambda code, args: (args[0], code))
def add_dataset_buffer(dataset: int, data_buffer: int) -> tuple[int, int]:
    """(dataset, ret): append a data buffer."""
    require_init()
    with LOCK:
        target = _dataset(dataset)
        buf = STATE.data_buffers.get(data_buffer)
        if buf is None:
            raise AclFailure(100000, f"0x{data_buffer:x} is not a live data buffer handle")
        target.buffers.append(buf)
    return dataset, 0


@api("acl.mdl.get_dataset_buffer", int, int, fail=value(0), fault="none")
def get_dataset_buffer(dataset: int, index: int) -> int:
    """The data buffer at `index` (0 on failure)."""
    require_init()
    buffers = _dataset(dataset).buffers
    if not 0 <= index < len(buffers):
        raise AclFailure(100000, f"index {index} is out of range ({len(buffers)} buffers)")
    return buffers[index].handle


@api("acl.mdl.get_dataset_num_buffers", int, fail=value(0), fault="none")
def get_dataset_num_buffers(dataset: int) -> int:
    """Number of buffers (0 for a bad dataset)."""
    require_init()
    return len(_dataset(dataset).buffers)


@api("acl.mdl.destroy_dataset", int)
def destroy_dataset(dataset: int) -> int:
    """Destroy the dataset (not its data buffers)."""
    require_init()
    with LOCK:
        _dataset(dataset).live = False
        del STATE.datasets[dataset]
    return 0


# ----------------------------------------------------------------------------- execution


@api("acl.mdl.execute", int, int, int)
def execute(model_id: int, input: int, output: int) -> int:
    """Run the model synchronously on device memory datasets."""
    ctx = current_context()
    with LOCK:
        execution = prepare(_model_in(model_id, ctx), _dataset(input), _dataset(output))
    execution.run()
    STATE.count("execute_calls")
    return 0


@api("acl.mdl.execute_async", int, int, int, int, hangable=True)
def execute_async(model_id: int, input: int, output: int, stream: int) -> int:
    """Validate now, run on the stream's worker; results after synchronize_stream."""
    ctx = current_context()
    target = stream_in(stream, ctx)
    with LOCK:
        execution = prepare(_model_in(model_id, ctx), _dataset(input), _dataset(output))
    execution.read_gear()
    target.submit("acl.mdl.execute_async", execution.run)
    with LOCK:
        STATE.count("execute_calls")
        STATE.count("execute_async_calls")
    return 0


# ----------------------------------------------------------------------------- helpers


def _register(om: OmModel, ctx: Context) -> int:
    with LOCK:
        if not ctx.live:
            raise AclFailure(107002, "the current context was destroyed during the load")
        model_id = STATE.next_model_id
        STATE.next_model_id += 1
        STATE.models[model_id] = LoadedModel(model_id, om, ctx)
        STATE.count("model_loads")
    return model_id


def _model(model_id: int) -> LoadedModel:
    model = STATE.models.get(model_id)
    if model is None:
        raise AclFailure(100011, f"model id {model_id} is not loaded")
    model.check_live()
    return model


def _model_in(model_id: int, ctx: Context) -> LoadedModel:
    """A loaded model usable under `ctx` (107004 if another context loaded it)."""
    model = _model(model_id)
    if model.context is not ctx:
        raise AclFailure(
            107004,
            f"model {model_id} was loaded under context 0x{model.context.handle:x}, but the "
            f"current context is 0x{ctx.handle:x}; load, execute and unload must share one",
        )
    return model


def _desc(handle: int) -> ModelDesc:
    desc = STATE.descs.get(handle)
    if desc is None:
        raise AclFailure(100000, f"0x{handle:x} is not a live model desc handle")
    return desc


def _described(handle: int) -> LoadedModel:
    """The model a desc was filled from (100000 if the desc is bad or empty)."""
    require_init()
    model = _desc(handle).model
    if model is None:
        raise AclFailure(100000, f"desc 0x{handle:x} is empty: call acl.mdl.get_desc first")
    return model


def _tensor(desc: int, index: int, is_input: bool) -> IoTensor:
    tensors = _described(desc).inputs if is_input else _described(desc).outputs
    if not 0 <= index < len(tensors):
        what = "input" if is_input else "output"
        raise AclFailure(
            100000, f"{what} index {index} is out of range (the model has {len(tensors)})"
        )
    return tensors[index]


def _index_of(tensors: tuple[IoTensor, ...], name: str, what: str) -> int:
    for i, tensor in enumerate(tensors):
        if tensor.name == name:
            return i
    # UNCONFIRMED code for an unknown name: 100000 (ACL_ERROR_INVALID_PARAM).
    raise AclFailure(
        100000,
        f"the model has no {what} named {name!r}; {what}s: {', '.join(t.name for t in tensors)}",
    )


def _reserved(index: int) -> None:
    if index != RESERVED_INDEX:
        raise AclFailure(100000, f"index is reserved and must be -1, got {index}")


def _dataset(handle: int) -> Dataset:
    dataset = STATE.datasets.get(handle)
    if dataset is None:
        raise AclFailure(100000, f"0x{handle:x} is not a live dataset handle")
    return dataset


def _gear_target(model_id: int, dataset: int, index: int, kind: str) -> tuple[LoadedModel, Dataset]:
    """Checks shared by the set_* calls (caller holds LOCK)."""
    ctx = current_context()
    # Stricter reading: set_* is accepted only under the context that loaded the model.
    model = _model_in(model_id, ctx)
    if model.kind != kind:
        have = "is static" if model.kind == "static" else f"has {KIND_LABELS[model.kind]} gears"
        raise AclFailure(100019, f"model {model_id} {have}, not {KIND_LABELS[kind]} gears")
    target = _dataset(dataset)
    if index != model.mbatch_index:
        raise AclFailure(
            100000,
            f"index {index} is not the {MBATCH_NAME} input; use {model.mbatch_index} "
            f"(get_input_index_by_name(desc, {MBATCH_NAME!r}))",
        )
    return model, target


def _check_gear(model: LoadedModel, gear: tuple[int, ...], text: str) -> None:
    if gear not in model.gears:
        # UNCONFIRMED codes: 145013 for batch (acllite), 145021 for HW (the HW sample).
        raise AclFailure(
            GEAR_CODES[model.kind],
            f"{text} is not a compiled {KIND_LABELS[model.kind]} gear ({model.gear_text()})",
        )
