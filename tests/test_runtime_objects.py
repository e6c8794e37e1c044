"""Device, context, stream, buffers, datasets and models on the emulator: lifetimes and threads."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from emulator_helpers import live

from ge_python_backend import emulator
from ge_python_backend.runtime import (
    AclError,
    Context,
    Dataset,
    Device,
    DeviceBuffer,
    HostBuffer,
    Model,
    Stream,
    load_acl,
)

# A failing release in a finalizer would otherwise only be printed.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture()
def acl() -> Iterator[ModuleType]:
    emulator.set_faults(None)
    before = live()
    yield load_acl("emulator")
    emulator.set_faults(None)
    gc.collect()
    assert live() == before, "the test left ACL objects alive"


def test_objects_close_idempotently_and_as_context_managers(acl: ModuleType) -> None:
    with Device(acl, 0) as device, Context(device) as context:
        with Stream(context) as stream, DeviceBuffer(context, 100) as buffer:
            assert not stream.closed and not buffer.closed
        assert stream.closed and buffer.closed
        stream.close()
        buffer.close()
    assert context.closed and device.closed
    device.close()
    context.close()


def test_host_to_device_round_trip_through_pinned_views(acl: ModuleType) -> None:
    with Device(acl, 0) as device, Context(device) as context:
        source, target = HostBuffer(context, 64), HostBuffer(context, 64)
        device_buffer = DeviceBuffer(context, 64)
        source.array[:] = np.arange(64, dtype=np.uint8)
        device_buffer.copy_from_host(source, 40)
        device_buffer.copy_to_host(target, 40)
        assert target.array[:40].tolist() == list(range(40))
        with pytest.raises(ValueError, match="cannot copy 65 bytes .* expected 1 to 64 bytes"):
            device_buffer.copy_from_host(source, 65)


def test_closing_a_parent_closes_its_children_first(acl: ModuleType) -> None:
    device = Device(acl, 0)
    context = Context(device)
    stream = Stream(context)
    device_buffer, host_buffer = DeviceBuffer(context, 32), HostBuffer(context, 32)
    dataset = Dataset(context, [device_buffer])
    device.close()
    assert all(r.closed for r in (context, stream, dataset, device_buffer, host_buffer))


def test_garbage_collection_releases_in_a_safe_order(acl: ModuleType) -> None:
    device = Device(acl, 0)
    context = Context(device)
    DeviceBuffer(context, 32)  # dropped at once; holds the context
    stream = Stream(context)
    del device, context
    assert emulator.stats()["live_streams"] >= 1
    del stream
    gc.collect()  # the fixture checks that everything is gone


def test_devices_are_reference_counted(acl: ModuleType) -> None:
    first, second = Device(acl, 0), Device(acl, 0)
    first.close()
    with Context(second) as context:
        DeviceBuffer(context, 16).close()  # device 0 is still open
    second.close()


def test_a_new_thread_gets_the_context_made_current(acl: ModuleType) -> None:
    with Device(acl, 0) as device, Context(device) as context:
        made: list[DeviceBuffer] = []
        errors: list[BaseException] = []

        def work() -> None:
            try:
                made.append(DeviceBuffer(context, 16))
                Stream(context).synchronize()
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                errors.append(exc)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        assert not errors
        made[0].close()


def test_a_thread_without_a_context_gets_error_107002(acl: ModuleType) -> None:
    # What the runtime protects callers from: raw pyACL in a fresh thread has no context.
    with Device(acl, 0):
        box: dict[str, int] = {}
        thread = threading.Thread(target=lambda: box.update(ret=acl.rt.malloc(16, 0)[1]))
        thread.start()
        thread.join()
    assert box["ret"] == 107002


def test_activate_after_close_is_refused(acl: ModuleType) -> None:
    with Device(acl, 0) as device:
        context = Context(device)
        context.close()
        with pytest.raises(
            RuntimeError, match=r"Context\(0x[0-9a-f]+ on device 0, closed\) is closed"
        ):
            context.activate()


def test_activate_is_refused_where_another_thread_closed_the_current_context(
    acl: ModuleType,
) -> None:
    with Device(acl, 0) as device:
        context = Context(device)
        context.activate()  # current in this thread (remembered, so the next call is cheap)
        thread = threading.Thread(target=context.close)
        thread.start()
        thread.join()
        with pytest.raises(RuntimeError, match=r"is closed; it cannot be made current"):
            context.activate()


def test_failures_carry_the_acl_code_name(acl: ModuleType) -> None:
    with Device(acl, 0) as device, Context(device) as context:
        emulator.set_faults("rt.malloc:207001:1")
        with pytest.raises(AclError) as caught:
            DeviceBuffer(context, 16)
        assert (caught.value.code, caught.value.name, caught.value.api) == (
            207001,
            "ACL_ERROR_RT_MEMORY_ALLOCATION",
            "acl.rt.malloc",
        )
    with pytest.raises(AclError, match="acl.rt.set_device failed with 107001"):
        Device(acl, 4096)


def test_bad_arguments(acl: ModuleType) -> None:
    with pytest.raises(ValueError, match="device_id must be a non-negative integer, got -1"):
        Device(acl, -1)
    message = "buffer size must be a positive integer, got 0"
    with Device(acl, 0) as device, Context(device) as ctx, pytest.raises(ValueError, match=message):
        DeviceBuffer(ctx, 0)


def test_model_description_and_unload(acl: ModuleType, om_dynamic_batch: Path) -> None:
    with Device(acl, 0) as device, Context(device) as context:
        model = Model(context, om_dynamic_batch)
        desc = model.description
        assert desc.gears.kind == "batch" and desc.gears.batch_gears == (1, 2, 4, 8)
        assert [info.spec.name for info in desc.inputs] == ["x"]
        assert desc.gear_input == desc.input_count - 1  # the model orders it last
        assert desc.gear_input_size == 8
        assert [info.size for info in desc.outputs] == [8 * 8 * 4, 8 * 1 * 4]
        model.close()
        assert model.closed


def test_rc_mode_copies_device_to_device(acl: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    # On the device's own CPU (ACL_DEVICE run mode) host and device memory are one memory.
    kinds: list[int] = []
    real_memcpy = acl.rt.memcpy

    def memcpy(dst: int, dest_max: int, src: int, count: int, kind: int) -> int:
        kinds.append(kind)
        return real_memcpy(dst, dest_max, src, count, 1 if dst > src else 2)

    monkeypatch.setattr(acl.rt, "get_run_mode", lambda: (0, 0))
    monkeypatch.setattr(acl.rt, "memcpy", memcpy)
    with Device(acl, 0) as device, Context(device) as context:
        assert device.shares_host_memory
        host, device_buffer = HostBuffer(context, 16), DeviceBuffer(context, 16)
        device_buffer.copy_from_host(host, 16)
        device_buffer.copy_to_host(host, 16)
    assert kinds == [3, 3]


@pytest.mark.parametrize("fault", ["rt.get_run_mode:507033:1", "mdl.add_dataset_buffer:100000:2"])
def test_a_failed_constructor_releases_what_it_made(acl: ModuleType, fault: str) -> None:
    # The fixture checks that nothing stays alive (no reliance on garbage collection).
    gc.disable()
    try:
        with Device(acl, 1) as device, Context(device) as context:
            buffers = [DeviceBuffer(context, 16), DeviceBuffer(context, 16)]
            emulator.set_faults(fault)
            with pytest.raises(AclError) as caught:
                Device(acl, 2) if fault.startswith("rt.") else Dataset(context, buffers)
            assert caught.value.code == int(fault.split(":")[1])
            stats = emulator.stats()  # device 1's default context and `context` only
            assert (stats["live_contexts"], stats["live_data_buffers"]) == (2, 0)
            assert stats["live_datasets"] == 0
        del caught
    finally:
        gc.enable()
