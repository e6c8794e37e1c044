"""Tensor descriptors (`aclTensorDesc`) the process holds: the type and its registries.

`acl.create_tensor_desc` makes the caller's own (`TENSOR_DESCS`); a dataset owns copies
(`DATASET_TENSOR_DESCS`): the one `acl.mdl.set_dataset_tensor_desc` attaches, and the output
descriptors each execute gives the output dataset, which hold each output's real dims once the
execution has run. The `acl` functions on them are `acl/_tensor.py`'s; callers of the
registries hold `LOCK`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ge_python_backend.ascend import AclCode
from ge_python_backend.emulator._state import STATE, AclFailure

ACL_DT_UNDEFINED = -1
ACL_FORMAT_UNDEFINED = -1


@dataclass(frozen=True)
class TensorDesc:
    """What `acl.create_tensor_desc` recorded."""

    handle: int
    dtype: int
    dims: tuple[int, ...]
    format: int


# Live descriptors by handle: the caller's (create_tensor_desc), and the copies datasets own.
TENSOR_DESCS: dict[int, TensorDesc] = {}
DATASET_TENSOR_DESCS: dict[int, TensorDesc] = {}


def tensor_desc(handle: int) -> TensorDesc:
    """A live descriptor, the caller's or a dataset's, by handle; else 100000."""
    desc = TENSOR_DESCS.get(handle) or DATASET_TENSOR_DESCS.get(handle)
    if desc is None:
        raise AclFailure(AclCode.INVALID_PARAM, f"0x{handle:x} is not a live tensor desc handle")
    return desc


def attach(dataset_descs: dict[int, int], desc: int, index: int) -> None:
    """set_dataset_tensor_desc: the dataset keeps a copy of `desc` at `index` (GE copies it, so
    the caller may destroy its own); 0 drops the copy. Caller holds LOCK."""
    old = dataset_descs.pop(index, None)
    if old is not None:
        del DATASET_TENSOR_DESCS[old]
    if desc:
        source = tensor_desc(desc)
        copy = TensorDesc(STATE.new_handle(), source.dtype, source.dims, source.format)
        DATASET_TENSOR_DESCS[copy.handle] = copy
        dataset_descs[index] = copy.handle


def renew_descs(dataset_descs: dict[int, int], count: int) -> tuple[int, ...]:
    """An execute: replace the output dataset's tensor descs by `count` new, undefined ones
    (GE recreates them at every execute; a handle read before is stale). Caller holds LOCK."""
    handles = []
    for index in range(count):
        attach(dataset_descs, 0, index)
        desc = TensorDesc(STATE.new_handle(), ACL_DT_UNDEFINED, (), ACL_FORMAT_UNDEFINED)
        DATASET_TENSOR_DESCS[desc.handle] = desc
        dataset_descs[index] = desc.handle
        handles.append(desc.handle)
    return tuple(handles)


def fill_desc(handle: int, dtype: int, dims: tuple[int, ...], acl_format: int) -> None:
    """An execution finished: its output desc `handle` gets the output's real dims, unless the
    dataset was destroyed or executed again meanwhile. Caller holds LOCK."""
    if handle in DATASET_TENSOR_DESCS:
        DATASET_TENSOR_DESCS[handle] = TensorDesc(handle, dtype, tuple(dims), acl_format)


def desc_dims(handle: int) -> tuple[int, ...]:
    """The dims of a live tensor desc. Caller holds LOCK."""
    return tensor_desc(handle).dims


def detach_all(dataset_descs: dict[int, int]) -> None:
    """destroy_dataset: free the dataset's copies (caller holds LOCK)."""
    for handle in dataset_descs.values():
        DATASET_TENSOR_DESCS.pop(handle, None)
    dataset_descs.clear()
