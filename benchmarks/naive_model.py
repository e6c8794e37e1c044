"""The naive baseline: a Python-backend model written the way the Ascend samples drive pyACL.

Per request, one at a time (requests of a batch are never concatenated): allocate device memory
for every input, the gear input and every output, wrap it in data buffers and two datasets, copy
the input bytes to the device, select the batch gear, `acl.mdl.execute`, copy every output buffer
back through pinned host memory (`malloc_host` + `ptr_to_bytes`), then free it all. This is what
the ResNet-50 sample's `AclModel` and acllite do for each inference. It reads the same
config.pbtxt parameters as `model.py` (`ModelParameters`: `om_file`, `acl_runtime`, the first of
`device_ids`), finds the version's `.om` as it does (`versions.find_om`), and gets pyACL or the
emulator through the runtime's `load_acl`.
"""

import json
import os
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils

from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.triton_config import TritonConfig
from ge_python_backend.repository.versions import find_om
from ge_python_backend.runtime import load_acl

ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
GEAR_INPUT = "ascend_mbatch_shape_data"
NUMPY_TYPES = {
    0: np.float32,
    1: np.float16,
    2: np.int8,
    3: np.int32,
    4: np.uint8,
    6: np.int16,
    7: np.uint16,
    8: np.uint32,
    9: np.int64,
    10: np.uint64,
    11: np.float64,
    12: np.bool_,
}


def check(ret, api):
    if ret != 0:
        raise RuntimeError(f"{api} failed with {ret}")


class TritonPythonModel:
    """Sample-style pyACL: fresh device memory and datasets for every request."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = ModelParameters.from_config(TritonConfig.from_json(args["model_config"]))
        self.input_names = [item["name"] for item in config["input"]]
        self.output_names = [item["name"] for item in config["output"]]
        self.acl = acl = load_acl(params.acl_runtime)
        self.device_id = params.device_ids[0]
        check(acl.init(), "acl.init")
        check(acl.rt.set_device(self.device_id), "acl.rt.set_device")
        self.context, ret = acl.rt.create_context(self.device_id)
        check(ret, "acl.rt.create_context")
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        path = str(find_om(Path(version_dir), params.om_file))
        self.model_id, ret = acl.mdl.load_from_file(path)
        check(ret, "acl.mdl.load_from_file")
        self.desc = acl.mdl.create_desc()
        check(acl.mdl.get_desc(self.desc, self.model_id), "acl.mdl.get_desc")
        self.gear_index, ret = acl.mdl.get_input_index_by_name(self.desc, GEAR_INPUT)
        if ret != 0:
            self.gear_index, self.gears = None, []
        else:
            gears, ret = acl.mdl.get_dynamic_batch(self.desc)
            check(ret, "acl.mdl.get_dynamic_batch")
            self.gears = sorted(gears["batch"])

    def execute(self, requests):
        responses = []
        for request in requests:
            try:
                arrays = [
                    pb_utils.get_input_tensor_by_name(request, name).as_numpy()
                    for name in self.input_names
                ]
                outputs = self.infer(arrays)
                tensors = [pb_utils.Tensor(n, a) for n, a in zip(self.output_names, outputs)]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as exc:
                error = pb_utils.TritonError(str(exc))
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
        return responses

    def infer(self, arrays):
        """One request: allocate, copy in, execute, copy out, free."""
        acl = self.acl
        check(acl.rt.set_context(self.context), "acl.rt.set_context")
        rows = arrays[0].shape[0]
        keep = []  # host bytes must outlive their copies
        input_dataset = acl.mdl.create_dataset()
        output_dataset = acl.mdl.create_dataset()
        try:
            index = 0
            for i in range(acl.mdl.get_num_inputs(self.desc)):
                size = acl.mdl.get_input_size_by_index(self.desc, i)
                device, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
                check(ret, "acl.rt.malloc")
                self._add(input_dataset, device, size)
                if i == self.gear_index:
                    continue
                data = np.ascontiguousarray(arrays[index]).tobytes()
                index += 1
                keep.append(data)
                ptr = acl.util.bytes_to_ptr(data)
                ret = acl.rt.memcpy(device, size, ptr, len(data), ACL_MEMCPY_HOST_TO_DEVICE)
                check(ret, "acl.rt.memcpy")
            if self.gear_index is not None:
                gear = next(g for g in self.gears if g >= rows)
                ret = acl.mdl.set_dynamic_batch_size(
                    self.model_id, input_dataset, self.gear_index, gear
                )
                check(ret, "acl.mdl.set_dynamic_batch_size")
            for i in range(acl.mdl.get_num_outputs(self.desc)):
                size = acl.mdl.get_output_size_by_index(self.desc, i)
                device, ret = acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST)
                check(ret, "acl.rt.malloc")
                self._add(output_dataset, device, size)
            check(acl.mdl.execute(self.model_id, input_dataset, output_dataset), "acl.mdl.execute")
            return [self._read(output_dataset, i, rows) for i in range(len(self.output_names))]
        finally:
            for dataset in (input_dataset, output_dataset):
                self._destroy(dataset)

    def _add(self, dataset, device, size):
        acl = self.acl
        buffer = acl.create_data_buffer(device, size)
        if not buffer:
            acl.rt.free(device)
            raise RuntimeError("acl.create_data_buffer failed")
        _, ret = acl.mdl.add_dataset_buffer(dataset, buffer)
        check(ret, "acl.mdl.add_dataset_buffer")

    def _read(self, dataset, i, rows):
        """Output `i`: the whole buffer through pinned memory, shaped by the selected gear."""
        acl = self.acl
        buffer = acl.mdl.get_dataset_buffer(dataset, i)
        device = acl.get_data_buffer_addr(buffer)
        size = acl.get_data_buffer_size_v2(buffer)
        host, ret = acl.rt.malloc_host(size)
        check(ret, "acl.rt.malloc_host")
        try:
            ret = acl.rt.memcpy(host, size, device, size, ACL_MEMCPY_DEVICE_TO_HOST)
            check(ret, "acl.rt.memcpy")
            data = acl.util.ptr_to_bytes(host, size)
        finally:
            check(acl.rt.free_host(host), "acl.rt.free_host")
        dims, ret = acl.mdl.get_cur_output_dims(self.desc, i)
        check(ret, "acl.mdl.get_cur_output_dims")
        dtype = NUMPY_TYPES[acl.mdl.get_output_data_type(self.desc, i)]
        count = int(np.prod(dims["dims"]))
        array = np.frombuffer(data, dtype, count).reshape(dims["dims"])
        return array[:rows] if self.gear_index is not None else array

    def _destroy(self, dataset):
        acl = self.acl
        for i in range(acl.mdl.get_dataset_num_buffers(dataset)):
            buffer = acl.mdl.get_dataset_buffer(dataset, i)
            check(acl.rt.free(acl.get_data_buffer_addr(buffer)), "acl.rt.free")
            check(acl.destroy_data_buffer(buffer), "acl.destroy_data_buffer")
        check(acl.mdl.destroy_dataset(dataset), "acl.mdl.destroy_dataset")

    def finalize(self):
        acl = self.acl
        acl.mdl.destroy_desc(self.desc)
        acl.mdl.unload(self.model_id)
        acl.rt.destroy_context(self.context)
        acl.rt.reset_device(self.device_id)
        acl.finalize()
