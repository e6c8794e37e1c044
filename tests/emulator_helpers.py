"""Helpers for the tests that call the emulated pyACL (`acl`) or read its `stats()`.

    from emulator_helpers import H2D, D2H, malloc

* `H2H`, `H2D`, `D2H`, `D2D`: the `acl.rt.memcpy` kinds (`ascend.MemcpyKind`), short.
* `malloc`, `to_device`, `from_device`: device memory that must succeed (asserted).
* `dataset_of`: an `aclmdlDataset` holding one data buffer per (pointer, size).
* `model_datasets`: the input and output datasets of a model desc, a new device buffer each.
* `in_thread`: run a function in a new thread and return its result.
* `LIVE_KEYS`, `live`, `delta`: the emulator's live-object counts, and what changed between two
  `stats()`.

The fixtures `clean_acl` and `ctx` are in conftest.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from ge_python_backend import emulator
from ge_python_backend.ascend import MemcpyKind
from ge_python_backend.emulator import acl

H2H = MemcpyKind.HOST_TO_HOST
H2D = MemcpyKind.HOST_TO_DEVICE
D2H = MemcpyKind.DEVICE_TO_HOST
D2D = MemcpyKind.DEVICE_TO_DEVICE

LIVE_KEYS = (
    "live_device_allocations",
    "live_host_allocations",
    "live_data_buffers",
    "live_datasets",
    "live_model_descs",
    "loaded_models",
    "live_streams",
    "live_contexts",
)


def malloc(size: int) -> int:
    ptr, ret = acl.rt.malloc(size, 0)
    assert ret == 0, acl.get_recent_err_msg()
    return ptr


def to_device(data: bytes) -> int:
    ptr = malloc(len(data))
    assert acl.rt.memcpy(ptr, len(data), acl.util.bytes_to_ptr(data), len(data), H2D) == 0
    return ptr


def from_device(ptr: int, size: int) -> bytes:
    out = bytes(size)
    assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), size, ptr, size, D2H) == 0
    return out


def dataset_of(ptrs_and_sizes: list[tuple[int, int]]) -> int:
    dataset = acl.mdl.create_dataset()
    for ptr, size in ptrs_and_sizes:
        assert acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(ptr, size)) == (
            dataset,
            0,
        )
    return dataset


def model_datasets(desc: int) -> list[int]:
    """[inputs, outputs]: a dataset with a new device buffer (sized as `desc` says) for each of
    the model's inputs, and one for its outputs (the dataset calls' return codes unchecked)."""
    datasets = []
    for count, size_of in (
        (acl.mdl.get_num_inputs(desc), acl.mdl.get_input_size_by_index),
        (acl.mdl.get_num_outputs(desc), acl.mdl.get_output_size_by_index),
    ):
        dataset = acl.mdl.create_dataset()
        for i in range(count):
            size = size_of(desc, i)
            acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(malloc(size), size))
        datasets.append(dataset)
    return datasets


def in_thread(func: Callable[[], Any]) -> Any:
    """Run `func` in a new thread and return its result."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(func()))
    thread.start()
    thread.join()
    return result[0]


def live(stats: Mapping[str, int] | None = None) -> dict[str, int]:
    """The counts of live ACL objects (`LIVE_KEYS`) in `stats` (default: `emulator.stats()`)."""
    if stats is None:
        stats = emulator.stats()
    return {key: stats[key] for key in LIVE_KEYS}


def delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """The counters of `after` that differ from `before`, as `after - before`."""
    return {key: after[key] - before[key] for key in after if after[key] != before[key]}
