"""Emulated pyACL: calling conventions, init/finalize, recent error messages, data buffers, util."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ge_python_backend.ascend import soc_device
from ge_python_backend.emulator import acl
from ge_python_backend.emulator._state import DEVICE_ADDRESS_BASE

pytestmark = pytest.mark.usefixtures("clean_acl")


def test_init_twice_and_finalize_twice_return_the_repeat_codes() -> None:
    assert acl.init() == 0
    assert acl.init() == 100002
    assert "already" in acl.get_recent_err_msg()
    assert acl.finalize() == 0
    assert acl.finalize() == 100037
    assert "acl.finalize" in acl.get_recent_err_msg()


def test_init_checks_its_config_file(tmp_path: Path) -> None:
    assert acl.init(str(tmp_path / "missing.json")) == 100003
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert acl.init(str(bad)) == 100006
    good = tmp_path / "acl.json"
    good.write_text("{}")
    assert acl.init(str(good)) == 0
    assert acl.finalize() == 0


@pytest.mark.parametrize(
    ("call", "args", "expected"),
    [
        (acl.rt.set_device, (0,), 100001),
        (acl.rt.malloc, (64, 0), (0, 100001)),
        (acl.rt.create_context, (0,), (0, 100001)),
        (acl.mdl.load_from_file, ("x.om",), (0, 100001)),
        (acl.mdl.create_dataset, (), 0),
        (acl.create_data_buffer, (0, 0), 0),
    ],
)
def test_calls_before_init_return_100001(call: Any, args: tuple[Any, ...], expected: Any) -> None:
    assert call(*args) == expected
    assert "acl.init" in acl.get_recent_err_msg()


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (acl.rt.malloc, ("64", 0)),
        (acl.rt.malloc, (64,)),
        (acl.rt.malloc, (64.0, 0)),
        (acl.rt.malloc, (np.int64(64), 0)),
        (acl.rt.memcpy, (1, 2, 3, 4)),
        (acl.rt.set_device, (None,)),
        (acl.init, (1,)),
        (acl.init, ("a", "b")),
        (acl.mdl.load_from_file, (Path("x.om"),)),
        (acl.mdl.set_input_dynamic_dims, (1, 2, 3, [1, 2])),
        (acl.mdl.get_desc, (1,)),
        (acl.util.ptr_to_numpy, (1, [2], 11)),
    ],
)
def test_unparsable_arguments_raise_type_error(call: Any, args: tuple[Any, ...]) -> None:
    name = f"{call.__module__.replace('ge_python_backend.emulator.', '')}.{call.__name__}"
    with pytest.raises(TypeError, match=rf"^<{name}> args parse failed$"):
        call(*args)


def test_keyword_arguments_are_refused() -> None:
    with pytest.raises(TypeError, match="<acl.rt.malloc> args parse failed"):
        acl.rt.malloc(size=64, policy=0)


def test_return_shapes_follow_the_reference(ctx: int) -> None:
    assert acl.rt.get_run_mode() == (1, 0)
    assert acl.rt.get_device_count() == (8, 0)
    assert acl.rt.get_device() == (0, 0)
    assert acl.rt.get_context() == (ctx, 0)
    free, total, ret = acl.rt.get_mem_info(1)
    assert (total, ret) == (soc_device("Ascend310P3").memory, 0) and 0 < free <= total
    assert acl.get_version() == (8, 0, 0, 0)
    assert acl.data_type_size(0) == 4
    assert acl.data_type_size(1) == 2
    assert acl.data_type_size(9) == 8
    assert acl.data_type_size(999) == 0


def test_device_count_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GE_EMULATOR_DEVICE_COUNT", "2")
    assert acl.init() == 0
    try:
        assert acl.rt.get_device_count() == (2, 0)
        assert acl.rt.set_device(2) == 107001
        assert "GE_EMULATOR_DEVICE_COUNT" in acl.get_recent_err_msg()
    finally:
        acl.finalize()


def test_every_failure_names_the_call_and_code(ctx: int) -> None:
    assert acl.rt.malloc(0, 0) == (0, 100000)
    message = acl.get_recent_err_msg()
    assert message.startswith("acl.rt.malloc failed with ACL_ERROR_INVALID_PARAM (100000)")
    assert acl.rt.free(12345) == 107000
    assert acl.get_recent_err_msg().startswith("acl.rt.free failed")
    assert acl.mdl.get_num_inputs(777) == 0
    assert "acl.mdl.get_num_inputs" in acl.get_recent_err_msg()


def test_recent_error_message_is_per_thread(ctx: int) -> None:
    assert acl.rt.malloc(0, 0)[1] == 100000
    seen: list[str] = []
    thread = threading.Thread(target=lambda: seen.append(acl.get_recent_err_msg()))
    thread.start()
    thread.join()
    assert seen == [""]
    assert "acl.rt.malloc" in acl.get_recent_err_msg()


def test_data_buffer_lifecycle(ctx: int) -> None:
    ptr, ret = acl.rt.malloc(256, 0)
    assert ret == 0
    buf = acl.create_data_buffer(ptr, 256)
    assert buf != 0
    assert acl.get_data_buffer_addr(buf) == ptr
    assert acl.get_data_buffer_size_v2(buf) == 256
    assert acl.get_data_buffer_size(buf) == 256
    assert acl.update_data_buffer(buf, ptr, 128) == 0
    assert acl.get_data_buffer_size_v2(buf) == 128
    assert acl.destroy_data_buffer(buf) == 0
    assert acl.destroy_data_buffer(buf) == 100000
    assert acl.get_data_buffer_addr(buf) == 0
    assert acl.get_data_buffer_size_v2(buf) == 0
    assert acl.update_data_buffer(buf, ptr, 128) == 100000
    empty = acl.create_data_buffer(0, 0)
    assert empty != 0 and acl.get_data_buffer_size_v2(empty) == 0
    assert acl.create_data_buffer(0, 16) == 0
    assert acl.destroy_data_buffer(empty) == 0
    assert acl.rt.free(ptr) == 0


def test_bytes_to_ptr_is_zero_copy_and_ptr_to_bytes_copies() -> None:
    data = b"emulated pyACL"
    ptr = acl.util.bytes_to_ptr(data)
    assert acl.util.ptr_to_bytes(ptr, len(data)) == data
    with pytest.raises(ValueError, match="needs an byte"):
        acl.util.bytes_to_ptr(bytearray(data))


def test_numpy_helpers_warn_and_wrap_host_memory() -> None:
    array = np.arange(6, dtype=np.float32)
    with pytest.warns(Warning, match="deprecated"):
        ptr = acl.util.numpy_to_ptr(array)
    assert ptr == array.ctypes.data
    with pytest.warns(Warning, match="deprecated"):
        view = acl.util.ptr_to_numpy(ptr, (2, 3), 11)
    assert view.shape == (2, 3) and view.dtype == np.float32
    view[0, 0] = 42.0
    assert array[0] == 42.0
    with pytest.warns(Warning), pytest.raises(ValueError, match="ndarray"):
        acl.util.numpy_to_ptr([1, 2])
    with pytest.warns(Warning), pytest.raises(ValueError, match="C-contiguous"):
        acl.util.numpy_to_ptr(np.zeros((4, 4))[:, 1])


def test_reading_a_device_pointer_from_the_host_raises(ctx: int) -> None:
    ptr, _ = acl.rt.malloc(64, 0)
    assert ptr >= DEVICE_ADDRESS_BASE
    with pytest.raises(RuntimeError, match="device pointer.*not a host address.*memcpy"):
        acl.util.ptr_to_bytes(ptr, 64)
    with pytest.warns(Warning), pytest.raises(RuntimeError, match="device pointer"):
        acl.util.ptr_to_numpy(ptr, (16,), 11)
    with pytest.raises(RuntimeError, match="ACL handle"):
        acl.util.ptr_to_bytes(ctx, 8)
    host, _ = acl.rt.malloc_host(64)
    assert len(acl.util.ptr_to_bytes(host, 64)) == 64
    with pytest.raises(RuntimeError, match="past the end of the malloc_host"):
        acl.util.ptr_to_bytes(host, 65)
    assert acl.rt.free_host(host) == 0
    assert acl.rt.free(ptr) == 0
