"""`acl.mdl`: model loading, descriptions, datasets, gears and execution."""

from __future__ import annotations

import ctypes
import numbers
from collections.abc import Sequence
from typing import Any

from ge_python_backend import aipp as _aipp
from ge_python_backend.ascend import AclCode as _AclCode
from ge_python_backend.ascend import GearKind as _GearKind
from ge_python_backend.emulator import _flights
from ge_python_backend.emulator._api import api, value, zero_ret
from ge_python_backend.emulator._memory import MEMORY
from ge_python_backend.emulator._models import (
    MBATCH_NAME,
    MODEL_DESCS,
    MODELS,
    NOT_A_GEAR,
    CallerMemory,
    DescribedModel,
    IoTensor,
    LoadedModel,
    ModelDesc,
    dynamic_images,
    prepare,
    write_gear,
)
from ge_python_backend.emulator._state import (
    LOCK,
    STATE,
    AclFailure,
    Dataset,
    require_init,
)
from ge_python_backend.emulator._streams import Context, current_context, stream_in
from ge_python_backend.emulator._tensors import attach, detach_all
from ge_python_backend.emulator.omfile import OmFormatError, OmModel

MAX_GEAR_QUERY = 4096
_REAL = numbers.Real  # pyACL's "f": a float or an int
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
    om = _read_om(path)
    return _register(om, path, ctx, _mem_sizes(om)), 0


@api("acl.mdl.load_from_mem", int, int, fail=zero_ret)
def load_from_mem(ptr: int, size: int) -> tuple[int, int]:
    """(model_id, ret): load an emulator .om from `size` bytes of host memory at `ptr`."""
    ctx = current_context()
    if size <= 0:
        raise AclFailure(_AclCode.INVALID_PARAM, f"size must be > 0, got {size}")
    with LOCK:
        try:
            span = MEMORY.resolve(ptr, "ptr")
        except AclFailure as exc:
            raise AclFailure(_AclCode.INVALID_PARAM, str(exc)) from exc
    if span.on_device:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"ptr 0x{ptr:x} is device memory; the model must be in host memory",
        )
    if span.remaining is not None and size > span.remaining:
        raise AclFailure(
            _AclCode.INVALID_PARAM, f"size {size} runs past the end of the allocation at 0x{ptr:x}"
        )
    try:
        om = OmModel.load(ctypes.string_at(span.address, size))
    except OmFormatError as exc:
        raise AclFailure(exc.acl_code, str(exc)) from exc
    return _register(om, om.source, ctx, _mem_sizes(om)), 0


@api("acl.mdl.query_size", str, fail=lambda code, args: (0, 0, code), fault="none")
def query_size(path: str) -> tuple[int, int, int]:
    """(work size, weight size, ret) of an .om on disk: what load_from_file_with_mem needs,
    as GE plans them at compile time (feature map and weights; see `emulator.memory_plan`)."""
    require_init()
    return (*_mem_sizes(_read_om(path)), 0)


@api("acl.mdl.load_from_file_with_mem", str, int, int, int, int, fail=zero_ret)
def load_from_file_with_mem(
    path: str, work_ptr: int, work_size: int, weight_ptr: int, weight_size: int
) -> tuple[int, int]:
    """(model_id, ret): load with caller-owned work and weight memory (device memory at least
    query_size's sizes; a 0 pointer with size 0 lets ACL allocate that part)."""
    ctx = current_context()
    om = _read_om(path)
    sizes = _mem_sizes(om)
    given = []
    for what, ptr, size, need in zip(
        ("work", "weight"), (work_ptr, weight_ptr), (work_size, weight_size), sizes
    ):
        if ptr == 0 and size == 0:
            continue
        with LOCK:
            span = MEMORY.resolve(ptr, f"{what}_ptr")
        if span.device is None or span.remaining is None or size > span.remaining:
            raise AclFailure(
                _AclCode.INVALID_PARAM,
                f"{what}_ptr 0x{ptr:x} must be device memory of at least {what}_size bytes",
            )
        given.append(CallerMemory(what, span.device, ptr, ptr + size))
        if size < need:
            # UNCONFIRMED code for memory smaller than query_size reports.
            raise AclFailure(
                _AclCode.GE_PARAM_INVALID,
                f"{what}_size {size} is smaller than the {need} bytes query_size reports",
            )
    # ACL allocates only the parts given as 0 pointer and size 0.
    work, weight = (0 if ptr else need for ptr, need in zip((work_ptr, weight_ptr), sizes))
    return _register(om, path, ctx, (work, weight), given), 0


@api("acl.mdl.unload", int)
def unload(model_id: int) -> int:
    """Unload a model (under the context that loaded it)."""
    ctx = current_context()
    with LOCK:
        model = _model_in(model_id, ctx)
        model.live = False
        _flights.forget(model)
        del MODELS[model_id]
        ctx.device.release(model.device_bytes)
        STATE.count("model_unloads")
    return 0


# ----------------------------------------------------------------------------- descriptions


@api("acl.mdl.create_desc", fail=value(0), fault="none")
def create_desc() -> int:
    """A new, empty model description (0 on failure)."""
    require_init()
    desc = ModelDesc(STATE.new_handle())
    with LOCK:
        MODEL_DESCS[desc.handle] = desc
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


@api("acl.mdl.get_desc_from_file", int, str, fault="none")
def get_desc_from_file(desc: int, path: str) -> int:
    """Fill `desc` from the `.om` at `path` without loading it: no context or device needed
    (GE reads the file and describes it on the host: hicann/ge
    api/acl/acl_model/model/model.cpp aclmdlGetDescFromFileImpl). The description serves every
    get_* call except get_cur_output_dims (pyACL's reference says so)."""
    require_init()
    om = _read_om(path)
    with LOCK:
        target = _desc(desc)
        target.model = DescribedModel(om)
    return 0


@api("acl.mdl.destroy_desc", int, fault="none")
def destroy_desc(desc: int) -> int:
    """Destroy a description."""
    require_init()
    with LOCK:
        _desc(desc)
        del MODEL_DESCS[desc]
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
    """Bytes of input `index` for the largest gear, or at a shape range's upper bounds (0 on
    failure or when unbounded)."""
    return _tensor(desc, index, True).size


@api("acl.mdl.get_output_size_by_index", int, int, fail=value(0), fault="none")
def get_output_size_by_index(desc: int, index: int) -> int:
    """Bytes of output `index` for the largest gear, or at its range's upper bounds (0 on
    failure or when unbounded: aclmdlGetOutputSizeByIndex.md)."""
    return _tensor(desc, index, False).size


@api("acl.mdl.get_input_dims", int, int, fail=_dict_ret, fault="none")
def get_input_dims(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"name", "dimCount", "dims"}, ret); -1 on dynamic axes; a name over 127 characters
    converted (aclmdlGetInputDims.md)."""
    return _dims_dict(desc, index, True), 0


@api("acl.mdl.get_input_dims_v2", int, int, fail=_dict_ret, fault="none")
def get_input_dims_v2(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """As get_input_dims, except for a static-AIPP input: dims whose product is its byte size
    (aclmdlGetInputDimsV2.md table 1: YUV420SP_U8 `[n, h*1.5, w, 1]`, ...)."""
    return _dims_dict(desc, index, True, _tensor(desc, index, True).dims_v2), 0


def _range_fail(code: int, args: tuple[Any, ...]) -> tuple[dict[str, Any], int]:
    return {"rangeCount": 0, "range": []}, code


@api("acl.mdl.get_input_dims_range", int, int, fail=_range_fail, fault="none")
def get_input_dims_range(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"rangeCount", "range": [[lo, hi], ...]}, ret): a shape-range input's range per dim,
    lo == hi on static dims and hi -1 where unbounded; a static model's dims as ranges; a gear
    model's rangeCount 0 (aclmdlGetInputDimsRange.md; mdl_wrap.cpp WrapAclMdlGetInputDimsRange)."""
    _tensor(desc, index, True)  # 100000 for an index out of range
    model = _described(desc)
    if model.gears:
        return {"rangeCount": 0, "range": []}, 0
    source = model.om.description.inputs[index]
    ranges = source.ranges or tuple((d, d) for d in source.dims)
    return {"rangeCount": len(ranges), "range": [list(r) for r in ranges]}, 0


@api("acl.mdl.get_output_dims", int, int, fail=_dict_ret, fault="none")
def get_output_dims(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"name", "dimCount", "dims"}, ret) for the largest gear; a name over 127 characters
    converted (aclmdlGetOutputDims.md)."""
    return _dims_dict(desc, index, False), 0


@api("acl.mdl.get_cur_output_dims", int, int, fail=_dict_ret, fault="none")
def get_cur_output_dims(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"name", "dimCount", "dims"}, ret) for the gear the last set_* call selected."""
    _tensor(desc, index, False)  # 100000 for a bad index first
    model = _described(desc)
    if not isinstance(model, LoadedModel):
        # pyACL's reference: a description from get_desc_from_file cannot be used with
        # get_cur_output_dims (hicann/runtime python/docs/zh/api_ref/ge/
        # function-get_desc_from_file.md). UNCONFIRMED code: 100000 (ACL_ERROR_INVALID_PARAM).
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"desc 0x{desc:x} was filled by acl.mdl.get_desc_from_file; get_cur_output_dims "
            "needs a description of a loaded model (acl.mdl.get_desc)",
        )
    model.check_live()
    shapes = model.om.description.output_shapes(model.current_gear)
    return _dims_dict(desc, index, False, shapes[index]), 0


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


@api("acl.mdl.get_tensor_real_name", int, str, fail=value(None), fault="none")
def get_tensor_real_name(desc: int, name: str) -> str:
    """The real name of input or output `name`: a tensor's own name maps to itself, a name the
    dims calls converted (over 127 characters) to the tensor's; None for any other name."""
    real = _described(desc).real_name(name)
    if real is None:
        raise AclFailure(_AclCode.INVALID_PARAM, f"the model has no input or output named {name!r}")
    return real


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
    batches = [g[0] for g in model.gears] if model.kind == _GearKind.BATCH else []
    return {"batchCount": len(batches), "batch": batches}, 0


@api("acl.mdl.get_dynamic_hw", int, int, fail=_dict_ret, fault="none")
def get_dynamic_hw(desc: int, index: int) -> tuple[dict[str, Any], int]:
    """({"hwCount", "hw": [[h, w], ...]}, ret); `index` is -1 (reserved) or an input index."""
    model = _described(desc)
    if index != RESERVED_INDEX and not 0 <= index < len(model.inputs):
        raise AclFailure(_AclCode.INVALID_PARAM, f"index must be -1 or an input index, got {index}")
    hw = [list(g) for g in model.gears] if model.kind == _GearKind.HW else []
    return {"hwCount": len(hw), "hw": hw}, 0


@api("acl.mdl.get_input_dynamic_gear_count", int, int, fail=zero_ret, fault="none")
def get_input_dynamic_gear_count(desc: int, index: int) -> tuple[int, int]:
    """(number of dynamic-dims gears, ret); `index` must be -1 (reserved)."""
    model = _described(desc)
    _reserved(index)
    return (len(model.gears) if model.kind == _GearKind.DIMS else 0), 0


@api("acl.mdl.get_input_dynamic_dims", int, int, int, fail=_none_ret, fault="none")
def get_input_dynamic_dims(desc: int, index: int, gear_count: int) -> tuple[list[Any], int]:
    """(one {"name": "", "dimCount", "dims"} per gear, ret): each gear's dims of every input
    concatenated in --input_shape order (GE: dataNameOrder / user_designate_shape_order, hicann/ge
    api/acl/acl_model/model/model_om2.cpp aclmdlGetInputDynamicDimsImplOm2), not graph order."""
    if gear_count > MAX_GEAR_QUERY:
        raise AclFailure(
            _AclCode.INVALID_PARAM, f"gear count {gear_count} exceeds {MAX_GEAR_QUERY}"
        )
    model = _described(desc)
    _reserved(index)
    gears = model.gears if model.kind == _GearKind.DIMS else ()
    if gear_count != len(gears):
        # Stricter reading: the count must be what get_input_dynamic_gear_count returned.
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"gear count {gear_count} differs from the model's {len(gears)} gears",
        )
    result = []
    for gear in gears:
        dims = model.om.description.ordered_dims(gear)
        result.append({"name": "", "dimCount": len(dims), "dims": dims})
    return result, 0


@api("acl.mdl.set_dynamic_batch_size", int, int, int, int)
def set_dynamic_batch_size(model_id: int, dataset: int, index: int, batch_size: int) -> int:
    """Write batch gear `batch_size` into the ascend_mbatch_shape_data buffer at `index`;
    0 is 100000, a value that is no batch gear (or a model without batch gears) 145013."""
    if batch_size <= 0:
        raise AclFailure(_AclCode.INVALID_PARAM, f"batch size must be > 0, got {batch_size}")
    with LOCK:
        model, target = _gear_target(model_id, dataset, index)
        _check_gear(model, _GearKind.BATCH, (batch_size,), f"batch size {batch_size}")
        write_gear(model, target, index, (batch_size,))
    return 0


@api("acl.mdl.set_dynamic_hw_size", int, int, int, int, int)
def set_dynamic_hw_size(model_id: int, dataset: int, index: int, height: int, width: int) -> int:
    """Write HW gear (height, width) into the ascend_mbatch_shape_data buffer at `index`;
    0 is 100000, a pair that is no HW gear (or a model without HW gears) 145013."""
    if height <= 0 or width <= 0:
        raise AclFailure(
            _AclCode.INVALID_PARAM, f"height and width must be > 0, got {height},{width}"
        )
    with LOCK:
        model, target = _gear_target(model_id, dataset, index)
        _check_gear(model, _GearKind.HW, (height, width), f"height,width {height},{width}")
        write_gear(model, target, index, (height, width))
    return 0


@api("acl.mdl.set_input_dynamic_dims", int, int, int, dict)
def set_input_dynamic_dims(model_id: int, dataset: int, index: int, dims: dict[str, Any]) -> int:
    """Select a gear from every dim of the inputs in --input_shape order, as GE does
    (hicann/ge ge_executor.cc SetDynamicDims, GetCurDynamicDims, IsDynmaicDimsSizeMatchModel):
    the values at the -1 dims must equal a gear of any kind (dims; a batch gear for a
    one-input batch model; an HW gear for a one-input HW model). Wrong count or a static dim
    changed: 145012; no gear matches (or the model has none): 145013; dimCount 0: 100000."""
    values = dims.get("dims")
    count = dims.get("dimCount")
    if (
        not isinstance(values, list)
        or not all(isinstance(v, int) for v in values)
        or count != len(values)
    ):
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            'dims must be {"dimCount": n, "name": "", "dims": [n ints]}: every dim of every '
            "input, concatenated in --input_shape order",
        )
    if not values:
        raise AclFailure(_AclCode.INVALID_PARAM, "dimCount must not be 0")
    with LOCK:
        model, target = _gear_target(model_id, dataset, index)
        desc = model.om.description
        raw = desc.ordered_dims() if model.gears else []
        names = ", ".join(desc.inputs[i].name for i in desc.ordered_inputs())
        if len(values) != len(raw):
            raise AclFailure(
                _AclCode.GE_DYNAMIC_INPUT_LENGTH_INVALID,
                f"dims has {len(values)} values; the model's inputs in --input_shape order "
                f"({names}) have {len(raw)} dims ({raw})",
            )
        for i, (given, fixed) in enumerate(zip(values, raw)):
            if fixed >= 0 and given != fixed:
                raise AclFailure(
                    _AclCode.GE_DYNAMIC_INPUT_LENGTH_INVALID,
                    f"dim {i} is static ({fixed}) but dims gives {given} (all dims: {raw})",
                )
        gear = tuple(v for v, fixed in zip(values, raw) if fixed < 0)
        if gear not in model.gears:
            choices = "; ".join(str(desc.ordered_dims(g)) for g in model.gears) or "none"
            raise AclFailure(
                NOT_A_GEAR,
                f"dims {values} are not a compiled gear; the gears (inputs' dims in "
                f"--input_shape order: {names}) are: {choices}",
            )
        write_gear(model, target, index, gear)
    return 0


# ----------------------------------------------------------------------------- AIPP


@api("acl.mdl.get_aipp_type", int, int, fail=lambda code, args: (0, 0, code), fault="none")
def get_aipp_type(model_id: int, index: int) -> tuple[int, int, int]:
    """(aclmdlInputAippType, dynamicAttachedDataIndex, ret) of input `index` of a loaded model
    (aclmdlGetAippType.md): the index is the parameter input's for a dynamic-AIPP input and
    0xFFFFFFFF otherwise."""
    with LOCK:
        model = _model(model_id)
    _input_index(model, index)
    if index in model.static_aipp:
        return int(_aipp.AippType.STATIC), _aipp.ACL_INVALID_NODE_INDEX, 0
    if index in model.dynamic_aipp:
        return int(_aipp.AippType.DYNAMIC), model.dynamic_aipp[index], 0
    if index in model.dynamic_aipp.values():
        return int(_aipp.AippType.DYNAMIC_PARAMS), _aipp.ACL_INVALID_NODE_INDEX, 0
    return int(_aipp.AippType.NONE), _aipp.ACL_INVALID_NODE_INDEX, 0


@api("acl.mdl.get_first_aipp_info", int, int, fail=_none_ret, fault="none")
def get_first_aipp_info(model_id: int, index: int) -> tuple[dict[str, Any], int]:
    """(aclAippInfo as pyACL's dict, ret) of a static-AIPP input; (None, 145015) for an input
    without static AIPP (acl_aipp.cpp aclmdlGetFirstAippInfoImpl: ACL_ERROR_GE_AIPP_NOT_EXIST)."""
    with LOCK:
        model = _model(model_id)
    _input_index(model, index)
    bounds = model.static_aipp.get(index)
    if bounds is None:
        raise AclFailure(
            _AclCode.GE_AIPP_NOT_EXIST, f"input {index} of model {model_id} has no static AIPP"
        )
    return _aipp.first_aipp_info(list(bounds.values()), model.inputs[index].name), 0


@api("acl.mdl.get_aipp_data_size", int, fail=zero_ret, fault="none")
def get_aipp_data_size(batch_size: int) -> tuple[int, int]:
    """(bytes of the dynamic-AIPP parameter block for `batch_size` images, ret): 64 + 96 n
    (acl_aipp_om2.cpp aclmdlGetAippDataSizeImplOm2); 0 images is 100000."""
    return _aipp_size(batch_size), 0


@api("acl.mdl.create_aipp", int, fail=value(0), fault="none")
def create_aipp(batch_size: int) -> int:
    """A new aclmdlAIPP for `batch_size` images (0 on failure): zeros, var_reci 1.0."""
    require_init()
    _aipp_size(batch_size)
    handle = STATE.new_handle()
    with LOCK:
        STATE.aipps[handle] = _aipp.DynamicAippParams.create(batch_size)
    return handle


@api("acl.mdl.destroy_aipp", int, fault="none")
def destroy_aipp(aipp: int) -> int:
    """Destroy an aclmdlAIPP."""
    require_init()
    with LOCK:
        _aipp_params(aipp)
        del STATE.aipps[aipp]
    return 0


@api("acl.mdl.set_aipp_input_format", int, int, fault="none")
def set_aipp_input_format(aipp: int, input_format: int) -> int:
    """The source format, an aclAippInputFormat (stored as its CCE code in the block)."""
    with LOCK:
        params = _aipp_params(aipp)
        try:
            fmt = _aipp.AippInputFormat(input_format)
            fmt.cce_code  # noqa: B018 - KeyError for a format the block cannot hold
        except (ValueError, KeyError):
            raise AclFailure(
                _AclCode.INVALID_PARAM, f"{input_format} is not an aclAippInputFormat"
            ) from None
        params.input_format = fmt
    return 0


@api("acl.mdl.set_aipp_csc_params", int, *([int] * 16), fault="none")
def set_aipp_csc_params(aipp: int, csc_switch: int, *values: int) -> int:
    """CSC switch, the 3x3 matrix by rows, output biases R0..R2, input biases R0..R2."""
    with LOCK:
        params = _aipp_params(aipp)
        params.csc_switch = csc_switch
        params.matrix = list(values[:9])
        params.output_bias = list(values[9:12])
        params.input_bias = list(values[12:15])
    return 0


@api("acl.mdl.set_aipp_rbuv_swap_switch", int, int, fault="none")
def set_aipp_rbuv_swap_switch(aipp: int, switch: int) -> int:
    """Swap R and B (U and V for YUV sources)."""
    with LOCK:
        _aipp_params(aipp).rbuv_swap_switch = switch
    return 0


@api("acl.mdl.set_aipp_ax_swap_switch", int, int, fault="none")
def set_aipp_ax_swap_switch(aipp: int, switch: int) -> int:
    """Move the leading X/A byte of a 4-channel source last."""
    with LOCK:
        _aipp_params(aipp).ax_swap_switch = switch
    return 0


@api("acl.mdl.set_aipp_src_image_size", int, int, int, fault="none")
def set_aipp_src_image_size(aipp: int, width: int, height: int) -> int:
    """The source image's width and height."""
    with LOCK:
        params = _aipp_params(aipp)
        params.src_image_size_w, params.src_image_size_h = width, height
    return 0


@api("acl.mdl.set_aipp_crop_params", int, int, int, int, int, int, int, fault="none")
def set_aipp_crop_params(
    aipp: int, switch: int, start_w: int, start_h: int, size_w: int, size_h: int, batch: int
) -> int:
    """Crop of image `batch`: switch, start W/H, size W/H."""
    with LOCK:
        b = _aipp_batch(aipp, batch)
        b.crop_switch, b.crop_start_w, b.crop_start_h = switch, start_w, start_h
        b.crop_size_w, b.crop_size_h = size_w, size_h
    return 0


@api("acl.mdl.set_aipp_padding_params", int, int, int, int, int, int, int, fault="none")
def set_aipp_padding_params(
    aipp: int, switch: int, top: int, bottom: int, left: int, right: int, batch: int
) -> int:
    """Padding of image `batch`: switch, top, bottom, left, right."""
    with LOCK:
        b = _aipp_batch(aipp, batch)
        b.padding_switch = switch
        b.padding_top, b.padding_bottom, b.padding_left, b.padding_right = top, bottom, left, right
    return 0


@api("acl.mdl.set_aipp_dtc_pixel_mean", int, int, int, int, int, int, fault="none")
def set_aipp_dtc_pixel_mean(aipp: int, c0: int, c1: int, c2: int, c3: int, batch: int) -> int:
    """DTC channel means (int16) of image `batch`."""
    with LOCK:
        _aipp_batch(aipp, batch).mean = [c0, c1, c2, c3]
    return 0


@api("acl.mdl.set_aipp_dtc_pixel_min", int, _REAL, _REAL, _REAL, _REAL, int, fault="none")
def set_aipp_dtc_pixel_min(
    aipp: int, c0: float, c1: float, c2: float, c3: float, batch: int
) -> int:
    """DTC channel minimums of image `batch` (held as fp16)."""
    with LOCK:
        _aipp_batch(aipp, batch).min = [c0, c1, c2, c3]
    return 0


@api("acl.mdl.set_aipp_pixel_var_reci", int, _REAL, _REAL, _REAL, _REAL, int, fault="none")
def set_aipp_pixel_var_reci(
    aipp: int, c0: float, c1: float, c2: float, c3: float, batch: int
) -> int:
    """DTC channel reciprocal variances of image `batch` (held as fp16)."""
    with LOCK:
        _aipp_batch(aipp, batch).var_reci = [c0, c1, c2, c3]
    return 0


@api("acl.mdl.set_input_aipp", int, int, int, int, fault="none")
def set_input_aipp(model_id: int, dataset: int, index: int, aipp: int) -> int:
    """Write `aipp`'s block into the buffer of dynamic-AIPP parameter input `index` of the
    input dataset (acl_aipp.cpp aclmdlSetInputAIPPImpl: the index must be a parameter input,
    the batch count and the output W/H after crop and padding must equal the model's, a whole
    batch's source bytes must not exceed max_src_image_size: else 100000)."""
    ctx = current_context()
    with LOCK:
        model = _model_in(model_id, ctx)
        target = _dataset(dataset)
        params = _aipp_params(aipp)
        images = [i for i, p in model.dynamic_aipp.items() if p == index]
        if not images:
            raise AclFailure(
                _AclCode.INVALID_PARAM,
                f"input {index} of model {model_id} is not a dynamic AIPP parameter input",
            )
        image = images[0]
        _check_dynamic_params(model, image, params)
        if index >= len(target.buffers):
            raise AclFailure(_AclCode.INVALID_PARAM, f"the dataset has no buffer at index {index}")
        block = params.pack()
        buf = target.buffers[index]
        span = MEMORY.resolve(buf.addr, f"the buffer of input {index}")
        room = min(buf.size, span.remaining if span.remaining is not None else buf.size)
        if room < len(block):
            raise AclFailure(
                _AclCode.GE_PARAM_INVALID,
                f"the buffer of input {index} has {room} bytes; the AIPP block needs {len(block)}",
            )
        ctypes.memmove(span.address, block, len(block))
    return 0


def _check_dynamic_params(model: LoadedModel, image: int, params: _aipp.DynamicAippParams) -> None:
    """set_input_aipp's checks against the model (100000 when one fails); with batch gears
    the batch count must be the largest gear's (acl_aipp.cpp GetModelOriDims)."""
    desc = model.om.description
    graph_input = desc.inputs[image]
    op = desc.aipp_ops()[image]
    n = model.aipp_batch(image)
    if len(params.batches) != n:
        largest = " (the largest batch gear)" if model.largest is not None else ""
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"the aipp object has {len(params.batches)} batches; input {image} takes {n} "
            f"images{largest}: create it with acl.mdl.create_aipp({n})",
        )
    if params.input_format is _aipp.AippInputFormat.UNDEFINED:
        raise AclFailure(_AclCode.INVALID_PARAM, "set the source format (set_aipp_input_format)")
    layout = params.input_format.layout
    size = n * layout.image_bytes(params.src_image_size_h, params.src_image_size_w)
    if size > op.max_src_image_size:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"the source images need {size} bytes, more than max_src_image_size "
            f"{op.max_src_image_size}",
        )
    try:
        dynamic_images(params, graph_input, desc.input_shapes(model.largest)[image])
    except (_aipp.AippConfigError, ValueError) as exc:
        raise AclFailure(_AclCode.INVALID_PARAM, f"the AIPP parameters are invalid: {exc}") from exc


def _aipp_size(batch_size: int) -> int:
    try:
        return _aipp.aipp_data_size(batch_size)
    except ValueError as exc:
        raise AclFailure(_AclCode.INVALID_PARAM, str(exc)) from exc


def _aipp_params(handle: int) -> _aipp.DynamicAippParams:
    params = STATE.aipps.get(handle)
    if params is None:
        raise AclFailure(_AclCode.INVALID_PARAM, f"0x{handle:x} is not a live aclmdlAIPP handle")
    return params


def _aipp_batch(handle: int, batch: int) -> _aipp.DynamicAippBatch:
    params = _aipp_params(handle)
    if not 0 <= batch < len(params.batches):
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"batch index {batch} is out of range (the aipp object has {len(params.batches)})",
        )
    return params.batches[batch]


def _input_index(model: DescribedModel, index: int) -> None:
    if not 0 <= index < len(model.inputs):
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"input index {index} is out of range (the model has {len(model.inputs)})",
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
            raise AclFailure(
                _AclCode.INVALID_PARAM, f"0x{data_buffer:x} is not a live data buffer handle"
            )
        target.buffers.append(buf)
    return dataset, 0


@api("acl.mdl.get_dataset_buffer", int, int, fail=value(0), fault="none")
def get_dataset_buffer(dataset: int, index: int) -> int:
    """The data buffer at `index` (0 on failure)."""
    require_init()
    buffers = _dataset(dataset).buffers
    if not 0 <= index < len(buffers):
        raise AclFailure(
            _AclCode.INVALID_PARAM, f"index {index} is out of range ({len(buffers)} buffers)"
        )
    return buffers[index].handle


@api("acl.mdl.get_dataset_num_buffers", int, fail=value(0), fault="none")
def get_dataset_num_buffers(dataset: int) -> int:
    """Number of buffers (0 for a bad dataset)."""
    require_init()
    return len(_dataset(dataset).buffers)


@api("acl.mdl.destroy_dataset", int)
def destroy_dataset(dataset: int) -> int:
    """Destroy the dataset (not its data buffers; its tensor desc copies go with it)."""
    require_init()
    with LOCK:
        target = _dataset(dataset)
        target.live = False
        detach_all(target.tensor_descs)
        del STATE.datasets[dataset]
    return 0


@api("acl.mdl.set_dataset_tensor_desc", int, int, int, fail=lambda code, args: (args[0], code))
def set_dataset_tensor_desc(dataset: int, desc: int, index: int) -> tuple[int, int]:
    """(dataset, ret): the dataset keeps a copy of tensor desc `desc` for buffer `index` (0
    drops it). GE uses it only for dynamic-shape models: their executions take each input's
    real dims from it (hicann/ge api/acl/acl_model/model/model.cpp, SetInputData)."""
    require_init()
    with LOCK:
        target = _dataset_with_buffer(dataset, index)
        attach(target.tensor_descs, desc, index)
    return dataset, 0


@api("acl.mdl.get_dataset_tensor_desc", int, int, fail=value(0), fault="none")
def get_dataset_tensor_desc(dataset: int, index: int) -> int:
    """The dataset's tensor desc for buffer `index` (0 if none): an input's copy from
    set_dataset_tensor_desc, or an output's, new at every execute and holding the output's real
    dims once the execution has run (after execute returns; after synchronize_stream for
    execute_async)."""
    require_init()
    with LOCK:
        target = _dataset_with_buffer(dataset, index)
        return target.tensor_descs.get(index, 0)


# ----------------------------------------------------------------------------- execution


@api("acl.mdl.execute", int, int, int)
def execute(model_id: int, input: int, output: int) -> int:
    """Run the model synchronously on device memory datasets (500002 after execute_async).
    An empty output data buffer (data 0, size 0) gets device memory ACL allocates, its address
    and size in that buffer afterwards: the caller frees it (`acl.rt.free`) and resets the
    buffer (`acl.update_data_buffer(buf, 0, 0)`) before the next execute
    (aclmdlGetOutputSizeByIndex.md, aclmdlExecute.md)."""
    ctx = current_context()
    with LOCK:
        model = _model_in(model_id, ctx)
        execution = prepare(model, _dataset(input), _dataset(output), synchronous=True)
        run = _flights.SyncRun()
        accesses = execution.accesses()
        model.claim("execute", run, accesses)
        _flights.record(model.task, accesses, run, run.ticket)
    try:
        execution.run()
    finally:
        with LOCK:
            _flights.end_synchronous(run, accesses)
    STATE.count("execute_calls")
    return 0


@api("acl.mdl.execute_async", int, int, int, int, hangable=True)
def execute_async(model_id: int, input: int, output: int, stream: int) -> int:
    """Validate now, run on the stream's worker; results after synchronize_stream. 500002
    after execute, or while the model still runs on another stream; an empty output buffer
    (data 0, size 0) is refused: ACL allocates outputs only for the synchronous execute."""
    ctx = current_context()
    target = stream_in(stream, ctx)
    with LOCK:
        model = _model_in(model_id, ctx)
        execution = prepare(model, _dataset(input), _dataset(output), synchronous=False)
        execution.read_gear()
        accesses = execution.accesses()
        model.claim("execute_async", target, accesses)
        model.queued = (target, target.submit("acl.mdl.execute_async", execution.run))
        _flights.record(model.task, accesses, target, model.queued[1])
    with LOCK:
        STATE.count("execute_calls")
        STATE.count("execute_async_calls")
    return 0


# ----------------------------------------------------------------------------- helpers


def _dataset_with_buffer(dataset: int, index: int) -> Dataset:
    """Dataset `dataset` (LOCK held), which must have a buffer `index`; else 100000."""
    target = _dataset(dataset)
    if not 0 <= index < len(target.buffers):
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"index {index} must be smaller than the dataset's {len(target.buffers)} buffers",
        )
    return target


def _read_om(path: str) -> OmModel:
    """The .om file at `path`: the process's one engine of that file (`OmModel.shared`)."""
    try:
        return OmModel.shared(path)
    except OmFormatError as exc:
        raise AclFailure(exc.acl_code, str(exc)) from exc


def _mem_sizes(om: OmModel) -> tuple[int, int]:
    """(work, weight) bytes the emulator reports for `om`: GE's memory plan of the compiled
    graph (see `emulator.memory_plan`)."""
    return om.memory.work, om.memory.weight


def _register(
    om: OmModel,
    source: str,
    ctx: Context,
    allocate: tuple[int, int],
    given: Sequence[CallerMemory] = (),
) -> int:
    """A model id for `om` (read from `source`) under `ctx`, holding the (work, weight) bytes
    ACL `allocate`s on the device (weights first, then the feature map (work), as GE's
    DavinciModel::Init does; either not free is 245000 ACL_ERROR_GE_MEMORY_ALLOCATION:
    InitWeightMem, InitFeatureMapAndP2PMem) and the memory its caller `given` it."""
    work, weight = allocate
    with LOCK:
        if not ctx.live:
            raise AclFailure(
                _AclCode.RT_CONTEXT_NULL, "the current context was destroyed during the load"
            )
        model_id = STATE.next_model_id
        code = _AclCode.GE_MEMORY_ALLOCATION
        ctx.device.charge(weight, code, f"the weights of {source}")
        try:
            ctx.device.charge(work, code, f"the feature map (work memory) of {source}")
        except AclFailure:
            ctx.device.release(weight)
            raise
        STATE.next_model_id += 1
        MODELS[model_id] = LoadedModel(model_id, om, ctx, work + weight, given)
        STATE.count("model_loads")
    return model_id


def _model(model_id: int) -> LoadedModel:
    model = MODELS.get(model_id)
    if model is None:
        raise AclFailure(_AclCode.INVALID_MODEL_ID, f"model id {model_id} is not loaded")
    model.check_live()
    return model


def _model_in(model_id: int, ctx: Context) -> LoadedModel:
    """A loaded model usable under `ctx` (107004 if another context loaded it)."""
    model = _model(model_id)
    if model.context is not ctx:
        raise AclFailure(
            _AclCode.RT_MODEL_CONTEXT,
            f"model {model_id} was loaded under context 0x{model.context.handle:x}, but the "
            f"current context is 0x{ctx.handle:x}; load, execute and unload must share one",
        )
    return model


def _desc(handle: int) -> ModelDesc:
    desc = MODEL_DESCS.get(handle)
    if desc is None:
        raise AclFailure(_AclCode.INVALID_PARAM, f"0x{handle:x} is not a live model desc handle")
    return desc


def _described(handle: int) -> DescribedModel:
    """The model a desc was filled from (100000 if the desc is bad or empty)."""
    require_init()
    model = _desc(handle).model
    if model is None:
        raise AclFailure(
            _AclCode.INVALID_PARAM, f"desc 0x{handle:x} is empty: call acl.mdl.get_desc first"
        )
    return model


def _tensor(desc: int, index: int, is_input: bool) -> IoTensor:
    tensors = _described(desc).inputs if is_input else _described(desc).outputs
    if not 0 <= index < len(tensors):
        what = "input" if is_input else "output"
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"{what} index {index} is out of range (the model has {len(tensors)})",
        )
    return tensors[index]


def _dims_dict(
    desc: int, index: int, is_input: bool, dims: tuple[int, ...] | None = None
) -> dict[str, Any]:
    """The dims dict of a tensor with the name the dims calls report (`dims_name`)."""
    shown = _tensor(desc, index, is_input).dims_dict(dims)
    shown["name"] = _described(desc).dims_name(index, is_input)
    return shown


def _index_of(tensors: tuple[IoTensor, ...], name: str, what: str) -> int:
    for i, tensor in enumerate(tensors):
        if tensor.name == name:
            return i
    # UNCONFIRMED code for an unknown name: 100000 (ACL_ERROR_INVALID_PARAM).
    raise AclFailure(
        _AclCode.INVALID_PARAM,
        f"the model has no {what} named {name!r}; {what}s: {', '.join(t.name for t in tensors)}",
    )


def _reserved(index: int) -> None:
    if index != RESERVED_INDEX:
        raise AclFailure(_AclCode.INVALID_PARAM, f"index is reserved and must be -1, got {index}")


def _dataset(handle: int) -> Dataset:
    dataset = STATE.datasets.get(handle)
    if dataset is None:
        raise AclFailure(_AclCode.INVALID_PARAM, f"0x{handle:x} is not a live dataset handle")
    return dataset


def _gear_target(model_id: int, dataset: int, index: int) -> tuple[LoadedModel, Dataset]:
    """Checks shared by the set_* calls (caller holds LOCK)."""
    ctx = current_context()
    # Stricter reading: set_* is accepted only under the context that loaded the model.
    model = _model_in(model_id, ctx)
    target = _dataset(dataset)
    if model.mbatch_index is None:
        raise AclFailure(
            NOT_A_GEAR, f"model {model_id} is static: it has no gears to choose (no {MBATCH_NAME})"
        )
    if index != model.mbatch_index:
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"index {index} is not the {MBATCH_NAME} input; use {model.mbatch_index} "
            f"(get_input_index_by_name(desc, {MBATCH_NAME!r}))",
        )
    return model, target


def _check_gear(model: LoadedModel, kind: _GearKind, gear: tuple[int, ...], text: str) -> None:
    """145013 unless `gear` is a gear of `kind` (GE checks every kind's call this way)."""
    if model.kind != kind or gear not in model.gears:
        raise AclFailure(
            NOT_A_GEAR,
            f"{text} is not a compiled {kind.atc_description} gear; the model has "
            f"{model.kind.atc_description} gears ({model.gear_text()})",
        )
