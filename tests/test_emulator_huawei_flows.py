"""The emulator driven the way Huawei's public pyACL code drives pyACL, written in our own words.

* Ascend/samples python/level2_simple_inference/1_classification/resnet50_imagenet_classification
  src/acl_net.py: static model, device buffers sized by the description, `bytes_to_ptr` H2D,
  outputs copied D2H into `malloc_host` memory and read with `ptr_to_bytes`.
* Ascend/samples python/common/acllite (acllite_resource.py, acllite_model.py, acllite_utils.py,
  acllite_logger.py): the run mode picks the copy kind, the model is loaded from memory, the
  dynamic-batch path sizes the input for the real batch and adds an `ascend_mbatch_shape_data`
  buffer, `acl.app_log` carries the log lines.
* Ascend/ModelZoo-PyTorch ACL_PyTorch/*/acl_net.py (e.g. contrib/audio/WeNet): a tensor
  descriptor on every input of the dataset, `numpy_to_ptr`, `memset`, gears chosen with
  `set_input_dynamic_dims` and the full dims of every input, `ptr_to_numpy` on `malloc_host`.

The unmodified originals were also run by hand on the emulator (see
docs/internals/conformance/index.md).
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pytest
from emulator_helpers import D2D, D2H, H2D
from onnx_models import reference

from ge_python_backend.ascend import AclCode, RunMode
from ge_python_backend.emulator import acl

pytestmark = pytest.mark.usefixtures("clean_acl")

HUGE_FIRST, NORMAL_ONLY = 0, 2
MBATCH = "ascend_mbatch_shape_data"


def ok(ret: int) -> None:
    assert ret == AclCode.SUCCESS, acl.get_recent_err_msg()


def open_device() -> tuple[int, int]:
    """init, set_device, create_context, create_stream: every sample's opening."""
    ok(acl.init())
    ok(acl.rt.set_device(0))
    context, ret = acl.rt.create_context(0)
    ok(ret)
    stream, ret = acl.rt.create_stream()
    ok(ret)
    return context, stream


def close_device(context: int, stream: int) -> None:
    ok(acl.rt.destroy_stream(stream))
    ok(acl.rt.destroy_context(context))
    ok(acl.rt.reset_device(0))
    ok(acl.finalize())


def describe(model_id: int) -> int:
    desc = acl.mdl.create_desc()
    ok(acl.mdl.get_desc(desc, model_id))
    return desc


def dataset(buffers: list[tuple[int, int]]) -> int:
    handle = acl.mdl.create_dataset()
    for ptr, size in buffers:
        _, ret = acl.mdl.add_dataset_buffer(handle, acl.create_data_buffer(ptr, size))
        ok(ret)
    return handle


def release(handle: int) -> None:
    for i in range(acl.mdl.get_dataset_num_buffers(handle)):
        ok(acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(handle, i)))
    ok(acl.mdl.destroy_dataset(handle))


def test_samples_classification_flow(om_static: Path) -> None:
    context, stream = open_device()
    model_id, ret = acl.mdl.load_from_file(str(om_static))
    ok(ret)
    desc = describe(model_id)
    in_size = acl.mdl.get_input_size_by_index(desc, 0)
    out_sizes = [acl.mdl.get_output_size_by_index(desc, i) for i in range(2)]
    device_in, ret = acl.rt.malloc(in_size, HUGE_FIRST)
    ok(ret)
    device_outs = [acl.rt.malloc(size, HUGE_FIRST)[0] for size in out_sizes]
    host_outs = [acl.rt.malloc_host(size)[0] for size in out_sizes]
    x = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)
    data = x.tobytes()
    ok(acl.rt.memcpy(device_in, in_size, acl.util.bytes_to_ptr(data), len(data), H2D))
    inputs = dataset([(device_in, in_size)])
    outputs = dataset(list(zip(device_outs, out_sizes)))
    ok(acl.mdl.execute(model_id, inputs, outputs))
    results = []
    for i, (host, dev, size) in enumerate(zip(host_outs, device_outs, out_sizes)):
        ok(acl.rt.memcpy(host, size, dev, size, D2H))
        dims, ret = acl.mdl.get_output_dims(desc, i)
        ok(ret)
        raw = acl.util.ptr_to_bytes(host, size)
        results.append(np.frombuffer(raw, np.float32).reshape(dims["dims"]))
    for got, want in zip(results, reference(om_static, [x]).values()):
        np.testing.assert_allclose(got, want, rtol=1e-5)
    release(inputs)
    release(outputs)
    for ptr in [device_in, *device_outs]:
        ok(acl.rt.free(ptr))
    for ptr in host_outs:
        ok(acl.rt.free_host(ptr))
    ok(acl.mdl.unload(model_id))
    ok(acl.mdl.destroy_desc(desc))
    close_device(context, stream)


@pytest.mark.parametrize("run_mode", ["host", "device"])
def test_acllite_dynamic_batch_flow(
    om_dynamic_batch: Path,
    run_mode: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("GE_EMULATOR_RUN_MODE", run_mode)
    context, stream = open_device()
    mode, ret = acl.rt.get_run_mode()
    ok(ret)
    copy_kind = H2D if mode == RunMode.HOST else D2D
    model_bytes = om_dynamic_batch.read_bytes()
    model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(model_bytes), len(model_bytes))
    ok(ret)
    desc = describe(model_id)
    out_sizes = [acl.mdl.get_output_size_by_index(desc, i) for i in range(2)]
    outputs = dataset([(acl.rt.malloc(size, NORMAL_ONLY)[0], size) for size in out_sizes])

    x = np.random.default_rng(6).standard_normal((2, 16)).astype(np.float32)  # 2 of gear 2
    data = x.tobytes()
    device_in, ret = acl.rt.malloc(len(data), NORMAL_ONLY)  # the real batch's bytes only
    ok(ret)
    ok(acl.rt.memcpy(device_in, len(data), acl.util.bytes_to_ptr(data), len(data), copy_kind))
    if len(data) != acl.mdl.get_input_size_by_index(desc, 0):
        with caplog.at_level(logging.WARNING, "ge_python_backend.emulator.app_log"):
            acl.app_log(2, "input size differs from the om size")  # acllite only warns
    index, ret = acl.mdl.get_input_index_by_name(desc, MBATCH)
    ok(ret)
    mbatch_size = acl.mdl.get_input_size_by_index(desc, index)
    mbatch, ret = acl.rt.malloc(mbatch_size, NORMAL_ONLY)
    ok(ret)
    inputs = dataset([(device_in, len(data)), (mbatch, mbatch_size)])
    batches, ret = acl.mdl.get_dynamic_batch(desc)
    ok(ret)
    assert 2 in batches["batch"]
    ok(acl.mdl.set_dynamic_batch_size(model_id, inputs, index, 2))
    ok(acl.mdl.execute(model_id, inputs, outputs))
    want = list(reference(om_dynamic_batch, [x]).values())
    for i, size in enumerate(out_sizes):
        buf = acl.mdl.get_dataset_buffer(outputs, i)
        dims, ret = acl.mdl.get_output_dims(desc, i)  # acllite shapes by the largest gear
        ok(ret)
        out = bytes(size)
        kind = D2H if mode == RunMode.HOST else D2D
        ok(
            acl.rt.memcpy(
                acl.util.bytes_to_ptr(out), size, acl.get_data_buffer_addr(buf), size, kind
            )
        )
        got = np.frombuffer(out, np.float32).reshape(dims["dims"])[:2]  # the real rows
        np.testing.assert_allclose(got, want[i], rtol=1e-5)
    assert [r.getMessage() for r in caplog.records] == ["input size differs from the om size"]
    release(inputs)
    release(outputs)
    ok(acl.mdl.unload(model_id))
    ok(acl.mdl.destroy_desc(desc))
    close_device(context, stream)


def test_modelzoo_acl_net_flow(om_static: Path, om_dynamic_batch: Path, om_dims: Path) -> None:
    context, stream = open_device()
    rng = np.random.default_rng(7)
    cases = [
        (om_static, [rng.standard_normal((4, 16)).astype(np.float32)], None),
        (om_dynamic_batch, [rng.standard_normal((4, 16)).astype(np.float32)], [4, 16]),
        (
            om_dims,
            [rng.integers(0, 32, (1, 16)).astype(np.int64), np.ones((1, 16), np.int64)],
            [1, 16, 1, 16],
        ),
    ]
    for om, arrays, full_dims in cases:
        model_id, ret = acl.mdl.load_from_file(str(om))
        ok(ret)
        desc = describe(model_id)
        n_in, n_out = acl.mdl.get_num_inputs(desc), acl.mdl.get_num_outputs(desc)
        in_sizes = [acl.mdl.get_input_size_by_index(desc, i) for i in range(n_in)]
        out_sizes = [acl.mdl.get_output_size_by_index(desc, i) for i in range(n_out)]
        in_ptrs = [acl.rt.malloc(size, HUGE_FIRST)[0] for size in in_sizes]
        for ptr, size in zip(in_ptrs, in_sizes):
            ok(acl.rt.memset(ptr, size, 0, size))
        out_ptrs = [acl.rt.malloc(size, HUGE_FIRST)[0] for size in out_sizes]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy_to_ptr warns that it will be deprecated
            for ptr, array in zip(in_ptrs, arrays):
                ok(
                    acl.rt.memcpy(
                        ptr, array.nbytes, acl.util.numpy_to_ptr(array), array.nbytes, H2D
                    )
                )
        inputs = dataset(list(zip(in_ptrs, in_sizes)))
        outputs = dataset(list(zip(out_ptrs, out_sizes)))
        if full_dims is None:  # the helper's static path: a descriptor on every input
            for i, array in enumerate(arrays):
                dtype = acl.mdl.get_input_data_type(desc, i)
                fmt = acl.mdl.get_input_format(desc, i)
                tensor = acl.create_tensor_desc(dtype, list(array.shape), fmt)
                handle, ret = acl.mdl.set_dataset_tensor_desc(inputs, tensor, i)
                assert (handle, ret) == (inputs, 0)
        else:
            index, ret = acl.mdl.get_input_index_by_name(desc, MBATCH)
            ok(ret)
            gear = {"dimCount": len(full_dims), "name": "", "dims": full_dims}
            ok(acl.mdl.set_input_dynamic_dims(model_id, inputs, index, gear))
        ok(acl.mdl.execute(model_id, inputs, outputs))
        for i, want in enumerate(reference(om, arrays).values()):
            dims, ret = acl.mdl.get_cur_output_dims(desc, i)
            ok(ret)
            host, ret = acl.rt.malloc_host(out_sizes[i])
            ok(ret)
            ok(acl.rt.memcpy(host, out_sizes[i], out_ptrs[i], out_sizes[i], D2H))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                raw = acl.util.ptr_to_numpy(host, (out_sizes[i],), 1)  # int8 view, as the helper
            count = int(np.prod(dims["dims"]))
            got = np.frombuffer(bytearray(raw[: count * 4]), np.float32).reshape(dims["dims"])
            np.testing.assert_allclose(got, want, rtol=1e-5)
            ok(acl.rt.free_host(host))
        release(inputs)
        release(outputs)
        for ptr in in_ptrs + out_ptrs:
            ok(acl.rt.free(ptr))
        ok(acl.mdl.unload(model_id))
        ok(acl.mdl.destroy_desc(desc))
    close_device(context, stream)
