"""Tensor descriptors (`aclTensorDesc`): top-level `acl.create_tensor_desc` and its getters.

GE keeps a descriptor attached to a dataset (`acl.mdl.set_dataset_tensor_desc`) and uses it
only for dynamic-shape models (shape-range inputs, data-dependent outputs): their executions
take each input's dims from it, and every execute gives the output dataset new descriptors that
hold each output's real dims once the execution has run. Signatures and return shapes follow pyACL's
`py_init_acl.cpp` (hicann/runtime python/pyACL): bare values for the getters, `(dim, ret)` for
`get_tensor_desc_dim_v2`, None from `destroy_tensor_desc`. The descriptors and their registries
are `_tensors.py`'s.
"""

from __future__ import annotations

import math
from typing import Any

from ge_python_backend.ascend import NUMPY_BY_ACL as _NUMPY_BY_ACL
from ge_python_backend.ascend import AclCode as _AclCode
from ge_python_backend.emulator._api import api, value
from ge_python_backend.emulator._state import LOCK, STATE, AclFailure, require_init
from ge_python_backend.emulator._tensors import (
    ACL_DT_UNDEFINED,
    ACL_FORMAT_UNDEFINED,
    TENSOR_DESCS,
    TensorDesc,
    tensor_desc,
)


def _dims_list(dims: Any) -> tuple[int, ...]:
    # pyACL: CHECK_NULL(PyList_Check(...), "argument 2 is not list") raises TypeError.
    if not isinstance(dims, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in dims
    ):
        raise TypeError("argument 2 is not list")
    return tuple(dims)


@api("acl.create_tensor_desc", int, object, int, fail=value(0), fault="none")
def create_tensor_desc(dtype: int, dims: Any, acl_format: int) -> int:
    """A descriptor of `dtype`, `dims` (a list; -1 allowed) and `acl_format` (0 on failure)."""
    shape = _dims_list(dims)
    require_init()
    desc = TensorDesc(STATE.new_handle(), dtype, shape, acl_format)
    with LOCK:
        TENSOR_DESCS[desc.handle] = desc
    return desc.handle


@api("acl.destroy_tensor_desc", int, fail=value(None), fault="none")
def destroy_tensor_desc(desc: int) -> None:
    """Destroy a descriptor (None, as pyACL returns; a bad handle is recorded as an error)."""
    require_init()
    with LOCK:
        tensor_desc(desc)
        del TENSOR_DESCS[desc]


@api("acl.get_tensor_desc_num_dims", int, fail=value(0), fault="none")
def get_tensor_desc_num_dims(desc: int) -> int:
    """Number of dims (0 for a bad handle)."""
    require_init()
    return len(tensor_desc(desc).dims)


@api("acl.get_tensor_desc_dim_v2", int, int, fail=lambda code, args: (-1, code), fault="none")
def get_tensor_desc_dim_v2(desc: int, index: int) -> tuple[int, int]:
    """(dim `index`, ret)."""
    require_init()
    return _dim(tensor_desc(desc), index), 0


@api("acl.get_tensor_desc_dim", int, int, fail=value(-1), fault="none")
def get_tensor_desc_dim(desc: int, index: int) -> int:
    """Deprecated: dim `index` (-1 on failure)."""
    require_init()
    return _dim(tensor_desc(desc), index)


@api("acl.get_tensor_desc_type", int, fail=value(ACL_DT_UNDEFINED), fault="none")
def get_tensor_desc_type(desc: int) -> int:
    """aclDataType recorded (-1 for a bad handle)."""
    require_init()
    return tensor_desc(desc).dtype


@api("acl.get_tensor_desc_format", int, fail=value(ACL_FORMAT_UNDEFINED), fault="none")
def get_tensor_desc_format(desc: int) -> int:
    """aclFormat recorded (-1 for a bad handle)."""
    require_init()
    return tensor_desc(desc).format


@api("acl.get_tensor_desc_element_count", int, fail=value(0), fault="none")
def get_tensor_desc_element_count(desc: int) -> int:
    """Product of the dims (0 for a bad handle or a -1 dim)."""
    require_init()
    dims = tensor_desc(desc).dims
    return 0 if any(d < 0 for d in dims) else math.prod(dims)


@api("acl.get_tensor_desc_size", int, fail=value(0), fault="none")
def get_tensor_desc_size(desc: int) -> int:
    """Bytes: element count times the dtype size (0 if either is unknown)."""
    require_init()
    tensor = tensor_desc(desc)
    dtype = _NUMPY_BY_ACL.get(tensor.dtype)
    if dtype is None or any(d < 0 for d in tensor.dims):
        return 0
    return math.prod(tensor.dims) * dtype.itemsize


def _dim(desc: TensorDesc, index: int) -> int:
    if not 0 <= index < len(desc.dims):
        raise AclFailure(
            _AclCode.INVALID_PARAM,
            f"dim index {index} is out of range (the descriptor has {len(desc.dims)})",
        )
    return desc.dims[index]
