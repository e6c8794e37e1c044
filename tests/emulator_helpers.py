"""Helpers for the tests that call the emulated pyACL (`acl`) or read its `stats()`.

    from emulator_helpers import H2D, D2H, malloc

* `H2H`, `H2D`, `D2H`, `D2D`: the `acl.rt.memcpy` kinds (`ascend.MemcpyKind`), short.
* `malloc`, `to_device`, `from_device`: device memory that must succeed (asserted).
* `dataset_of`: an `aclmdlDataset` holding one data buffer per (pointer, size).
* `model_datasets`: the input and output datasets of a model desc, a new device buffer each.
* `in_thread`: run a function in a new thread and return its result.
* `Model`: a loaded `.om` with a device buffer per input and output (`feed`, `fetch`); `select`
  sets a gear on it; `example_inputs` gives inputs for a conftest model fixture at a gear.
* `LIVE_KEYS`, `live`, `delta`: the emulator's live-object counts, and what changed between two
  `stats()`.

The fixtures `clean_acl` and `ctx` are in conftest.py.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend import emulator
from ge_python_backend.ascend import NUMPY_BY_ACL, MemcpyKind
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


MBATCH = "ascend_mbatch_shape_data"


class Model:
    """A loaded model with one device buffer per input and output, sized as the desc says;
    `work` (pointer, size): loaded with that work memory (`load_from_file_with_mem`)."""

    def __init__(self, om: Path, work: tuple[int, int] | None = None) -> None:
        if work is None:
            self.model_id, ret = acl.mdl.load_from_file(str(om))
        else:
            self.model_id, ret = acl.mdl.load_from_file_with_mem(str(om), *work, 0, 0)
        assert ret == 0, acl.get_recent_err_msg()
        self.desc = acl.mdl.create_desc()
        assert acl.mdl.get_desc(self.desc, self.model_id) == 0
        n_in = acl.mdl.get_num_inputs(self.desc)
        n_out = acl.mdl.get_num_outputs(self.desc)
        self.in_sizes = [acl.mdl.get_input_size_by_index(self.desc, i) for i in range(n_in)]
        self.out_sizes = [acl.mdl.get_output_size_by_index(self.desc, i) for i in range(n_out)]
        self.in_ptrs = [malloc(size) for size in self.in_sizes]
        self.out_ptrs = [malloc(size) for size in self.out_sizes]
        self.inputs = dataset_of(list(zip(self.in_ptrs, self.in_sizes)))
        self.outputs = dataset_of(list(zip(self.out_ptrs, self.out_sizes)))
        self.mbatch, ret = acl.mdl.get_input_index_by_name(self.desc, MBATCH)
        if ret != 0:
            self.mbatch = -1

    def feed(self, arrays: list[np.ndarray]) -> None:
        for ptr, size, array in zip(self.in_ptrs, self.in_sizes, arrays):
            data = np.ascontiguousarray(array).tobytes()
            assert acl.rt.memcpy(ptr, size, acl.util.bytes_to_ptr(data), len(data), H2D) == 0

    def fetch(self) -> list[np.ndarray]:
        results = []
        for i, ptr in enumerate(self.out_ptrs):
            dims, ret = acl.mdl.get_cur_output_dims(self.desc, i)
            assert ret == 0
            dtype = NUMPY_BY_ACL[acl.mdl.get_output_data_type(self.desc, i)]
            nbytes = int(np.prod(dims["dims"])) * dtype.itemsize
            out = bytes(nbytes)
            assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), nbytes, ptr, nbytes, D2H) == 0
            results.append(np.frombuffer(out, dtype).reshape(dims["dims"]))
        return results

    def mbatch_values(self, count: int) -> tuple[int, ...]:
        out = bytes(8 * count)
        ptr = self.in_ptrs[self.mbatch]
        assert acl.rt.memcpy(acl.util.bytes_to_ptr(out), len(out), ptr, len(out), D2H) == 0
        return struct.unpack(f"<{count}q", out)


def select(model: Model, kind: str, gear: tuple[int, ...], dims: list[int]) -> int:
    if kind == "batch":
        return acl.mdl.set_dynamic_batch_size(model.model_id, model.inputs, model.mbatch, *gear)
    if kind == "hw":
        return acl.mdl.set_dynamic_hw_size(model.model_id, model.inputs, model.mbatch, *gear)
    value = {"dimCount": len(dims), "name": "", "dims": dims}
    return acl.mdl.set_input_dynamic_dims(model.model_id, model.inputs, model.mbatch, value)


def example_inputs(name: str, gear: tuple[int, ...], rng: np.random.Generator) -> list[np.ndarray]:
    if name in ("om_static", "om_dynamic_batch"):
        batch = gear[0] if gear else 4
        return [rng.standard_normal((batch, 16)).astype(np.float32)]
    if name == "om_mixed_types":
        x = rng.integers(-50, 50, (gear[0], 4)).astype(np.int32)
        return [x, rng.standard_normal((gear[0], 4)).astype(np.float16)]
    if name == "om_hw":
        return [rng.standard_normal((1, 3, *gear)).astype(np.float32)]
    ids = rng.integers(0, 32, (1, gear[0])).astype(np.int64)
    return [ids, rng.integers(0, 2, (1, gear[0])).astype(np.int64)]
