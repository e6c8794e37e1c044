"""The hand-written anchor: the model.py a skilled engineer writes directly against pyACL.

Calling patterns followed: the Ascend samples' acllite `AclLiteModel` (`Ascend/samples`,
`python/common/acllite/acllite_model.py`: the output dataset and device buffers made once at
load, the gear input found with `get_input_index_by_name("ascend_mbatch_shape_data")`, the gear
chosen with `set_dynamic_batch_size` before executing) and ModelZoo-PyTorch's `ACL_PyTorch`
`acl_net.py` helpers (device buffers and `malloc_host` output buffers allocated once for the
largest shape). Beyond them: Triton's requests are concatenated into one execution of the
smallest gear that fits (padding rows zeroed), staged in page-locked host memory, and the copy
in, `execute_async` and the copy out are queued on one stream and waited for with one
`synchronize_stream` (which releases the GIL). Not `execute`: that would need two synchronous
copies around it, three waits instead of one, and GE refuses mixing both on one model.

Imports `acl` (the CPU emulator's when `GE_PYTHON_BACKEND_ACL=emulator`: the benchmark's only
concession), numpy, ctypes and Triton's utilities; nothing of ge-python-backend. Reads the
config.pbtxt parameters `om_file` (else the version's only `.om`) and `device_ids` (the first).
Written for a PCIe card (host run mode: host and device memory apart, copies host to device).
"""

import ctypes
import json
import os
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

if os.environ.get("GE_PYTHON_BACKEND_ACL") == "emulator":
    from ge_python_backend.emulator import acl
else:
    import acl

ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
GEAR_INPUT = "ascend_mbatch_shape_data"


def check(ret, call):
    if ret != 0:
        raise RuntimeError(f"{call} failed with ACL error {ret}")


def add_device_buffer(dataset, size):
    """Device memory of `size` bytes appended to `dataset`; its address."""
    device, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
    check(ret, "acl.rt.malloc")
    _, ret = acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(device, size))
    check(ret, "acl.mdl.add_dataset_buffer")
    return device


class Buffer:
    """Device memory for one model input or output, its page-locked host twin (a uint8 numpy
    view), and the bytes one row of it takes."""

    def __init__(self, dataset, size, rows):
        self.device = add_device_buffer(dataset, size)
        self.host, ret = acl.rt.malloc_host(size)
        check(ret, "acl.rt.malloc_host")
        self.view = np.frombuffer((ctypes.c_ubyte * size).from_address(self.host), np.uint8)
        self.size, self.row_bytes = size, size // rows

    def rows(self, count, dtype, row_shape):
        """The first `count` rows of the host memory as an array."""
        return self.view[: count * self.row_bytes].view(dtype).reshape(count, *row_shape)

    def copy(self, count, kind, stream):
        """Queue the copy of `count` rows host to device or back on `stream`."""
        nbytes = count * self.row_bytes
        if kind == ACL_MEMCPY_HOST_TO_DEVICE:
            ret = acl.rt.memcpy_async(self.device, self.size, self.host, nbytes, kind, stream)
        else:
            ret = acl.rt.memcpy_async(self.host, self.size, self.device, nbytes, kind, stream)
        check(ret, "acl.rt.memcpy_async")

    def free(self):
        check(acl.rt.free(self.device), "acl.rt.free")
        check(acl.rt.free_host(self.host), "acl.rt.free_host")


class TritonPythonModel:
    """Each batch of requests runs as one execution at the smallest gear that holds it."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        version = Path(args["model_repository"]) / args["model_version"]
        (om,) = [version / params["om_file"]] if "om_file" in params else version.glob("*.om")
        self.device_id = int(params.get("device_ids", "0").split(",")[0])
        self.input_names = [item["name"] for item in config["input"]]
        self.output_names = [item["name"] for item in config["output"]]
        self.output_types = [
            pb_utils.triton_string_to_numpy(o["data_type"]) for o in config["output"]
        ]
        check(acl.init(), "acl.init")
        check(acl.rt.set_device(self.device_id), "acl.rt.set_device")
        self.context, ret = acl.rt.create_context(self.device_id)
        check(ret, "acl.rt.create_context")
        self.stream, ret = acl.rt.create_stream()
        check(ret, "acl.rt.create_stream")
        self.model_id, ret = acl.mdl.load_from_file(str(om))
        check(ret, "acl.mdl.load_from_file")
        self.desc = acl.mdl.create_desc()
        check(acl.mdl.get_desc(self.desc, self.model_id), "acl.mdl.get_desc")
        self.gear_index, ret = acl.mdl.get_input_index_by_name(self.desc, GEAR_INPUT)
        if ret == 0:
            gears, ret = acl.mdl.get_dynamic_batch(self.desc)
            check(ret, "acl.mdl.get_dynamic_batch")
            self.gears = sorted(gears["batch"])
        else:  # a static model: its one batch size
            dims, ret = acl.mdl.get_input_dims(self.desc, 0)
            check(ret, "acl.mdl.get_input_dims")
            self.gear_index, self.gears = None, [dims["dims"][0]]
        largest = self.gears[-1]
        self.input_dataset = acl.mdl.create_dataset()
        self.inputs = []
        for i in range(acl.mdl.get_num_inputs(self.desc)):
            size = acl.mdl.get_input_size_by_index(self.desc, i)
            if i == self.gear_index:  # set_dynamic_batch_size fills it
                self.gear_device = add_device_buffer(self.input_dataset, size)
            else:
                self.inputs.append(Buffer(self.input_dataset, size, largest))
        self.output_dataset = acl.mdl.create_dataset()
        self.outputs, self.output_shapes = [], []
        for i in range(acl.mdl.get_num_outputs(self.desc)):
            size = acl.mdl.get_output_size_by_index(self.desc, i)
            self.outputs.append(Buffer(self.output_dataset, size, largest))
            dims, ret = acl.mdl.get_output_dims(self.desc, i)
            check(ret, "acl.mdl.get_output_dims")
            self.output_shapes.append(dims["dims"][1:])

    def execute(self, requests):
        """Requests in arrival order, as many per execution as the largest gear holds."""
        responses, group, rows = [], [], 0
        for request in requests:
            arrays = [
                pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                for name in self.input_names
            ]
            if group and rows + len(arrays[0]) > self.gears[-1]:
                responses += self.answer(group, rows)
                group, rows = [], 0
            group.append(arrays)
            rows += len(arrays[0])
        return responses + self.answer(group, rows)

    def answer(self, group, rows):
        """One response per request of `group` (`rows` rows in all): its rows of the outputs,
        or the execution's error."""
        try:
            outputs = self.infer(group, rows)
        except Exception as exc:
            pb_utils.Logger.log_error(f"expert model: {len(group)} request(s) failed: {exc}")
            error = pb_utils.TritonError(str(exc))
            return [pb_utils.InferenceResponse(output_tensors=[], error=error) for _ in group]
        responses, start = [], 0
        for arrays in group:
            end = start + len(arrays[0])
            tensors = [pb_utils.Tensor(n, o[start:end]) for n, o in zip(self.output_names, outputs)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start = end
        return responses

    def infer(self, group, rows):
        """Stage the group at the smallest fitting gear, queue copy in, execute and copy out on
        the stream, wait once; the outputs' first `rows` rows (views of the host memory)."""
        gear = next((g for g in self.gears if g >= rows), None)
        if gear is None:
            raise ValueError(f"{rows} rows exceed the largest batch gear {self.gears[-1]}")
        check(acl.rt.set_context(self.context), "acl.rt.set_context")
        for buffer, parts in zip(self.inputs, zip(*group)):
            staged = buffer.rows(gear, parts[0].dtype, parts[0].shape[1:])
            np.concatenate(parts, out=staged[:rows])
            staged[rows:] = 0
            buffer.copy(gear, ACL_MEMCPY_HOST_TO_DEVICE, self.stream)
        if self.gear_index is not None:
            ret = acl.mdl.set_dynamic_batch_size(
                self.model_id, self.input_dataset, self.gear_index, gear
            )
            check(ret, "acl.mdl.set_dynamic_batch_size")
        ret = acl.mdl.execute_async(
            self.model_id, self.input_dataset, self.output_dataset, self.stream
        )
        check(ret, "acl.mdl.execute_async")
        for buffer in self.outputs:
            buffer.copy(rows, ACL_MEMCPY_DEVICE_TO_HOST, self.stream)
        check(acl.rt.synchronize_stream(self.stream), "acl.rt.synchronize_stream")
        return [
            buffer.rows(rows, dtype, shape)
            for buffer, dtype, shape in zip(self.outputs, self.output_types, self.output_shapes)
        ]

    def finalize(self):
        for dataset in (self.input_dataset, self.output_dataset):
            for i in range(acl.mdl.get_dataset_num_buffers(dataset)):
                acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(dataset, i))
            acl.mdl.destroy_dataset(dataset)
        for buffer in self.inputs + self.outputs:
            buffer.free()
        if self.gear_index is not None:
            acl.rt.free(self.gear_device)
        acl.mdl.unload(self.model_id)
        acl.mdl.destroy_desc(self.desc)
        acl.rt.destroy_stream(self.stream)
        acl.rt.destroy_context(self.context)
        acl.rt.reset_device(self.device_id)
        acl.finalize()
