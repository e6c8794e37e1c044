"""Emulated pyACL: devices, per-thread contexts and asynchronous streams."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pytest
from emulator_helpers import D2D, D2H, H2D, in_thread, malloc

from ge_python_backend.emulator import acl, set_timing

pytestmark = pytest.mark.usefixtures("clean_acl")


def test_set_device_checks_the_id(ctx: int) -> None:
    assert acl.rt.set_device(8) == 107001
    assert acl.rt.set_device(-1) == 107001
    assert acl.rt.create_context(8) == (0, 107001)


def test_a_new_thread_has_no_context_until_it_sets_one(ctx: int) -> None:
    def worker() -> list[Any]:
        seen: list[Any] = [acl.rt.malloc(64, 0), acl.rt.get_context(), acl.rt.create_stream()]
        seen.append(acl.get_recent_err_msg())
        seen.append(acl.rt.set_context(ctx))
        ptr, ret = acl.rt.malloc(64, 0)
        seen.append((ret, acl.rt.free(ptr), acl.rt.get_context()))
        return seen

    no_ctx_malloc, no_ctx_get, no_ctx_stream, message, set_ret, after = in_thread(worker)
    assert no_ctx_malloc == (0, 107002)
    assert no_ctx_get == (0, 107002)
    assert no_ctx_stream == (0, 107002)
    assert "set_context" in message
    assert set_ret == 0
    assert after == (0, 0, (ctx, 0))


def test_set_device_makes_the_shared_default_context_current_in_each_thread(ctx: int) -> None:
    assert in_thread(lambda: (acl.rt.set_device(0), acl.rt.get_context())) == (0, (ctx, 0))
    assert acl.rt.reset_device(0) == 0  # the other thread's reference
    assert acl.rt.get_context() == (ctx, 0)


def test_explicit_contexts(ctx: int) -> None:
    explicit, ret = acl.rt.create_context(1)
    assert ret == 0 and explicit != ctx
    assert acl.rt.get_context() == (explicit, 0)
    assert acl.rt.get_device() == (1, 0)
    assert acl.rt.set_context(ctx) == 0
    assert acl.rt.get_device() == (0, 0)
    assert acl.rt.destroy_context(ctx) == 107000
    assert "default context" in acl.get_recent_err_msg()
    assert acl.rt.destroy_context(explicit) == 0
    assert acl.rt.destroy_context(explicit) == 107017
    assert acl.rt.set_context(explicit) == 107017
    assert acl.rt.set_context(12345) == 107017


def test_the_current_context_dies_with_destroy_context(ctx: int) -> None:
    explicit, _ = acl.rt.create_context(0)
    assert acl.rt.destroy_context(explicit) == 0
    assert acl.rt.malloc(64, 0) == (0, 107002)
    assert "destroyed" in acl.get_recent_err_msg()


def test_context_with_streams_cannot_be_destroyed(ctx: int) -> None:
    explicit, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.destroy_context(explicit) == 107000
    assert "stream" in acl.get_recent_err_msg()
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_context(explicit) == 0


def test_reset_device_is_reference_counted_and_refused_with_explicit_contexts(ctx: int) -> None:
    assert acl.rt.set_device(0) == 0
    assert acl.rt.reset_device(0) == 0
    assert acl.rt.get_context() == (ctx, 0)
    explicit, _ = acl.rt.create_context(0)
    assert acl.rt.reset_device(0) == 107000
    assert "create_context" in acl.get_recent_err_msg()
    assert acl.rt.destroy_context(explicit) == 0
    assert acl.rt.set_context(ctx) == 0
    assert acl.rt.reset_device(0) == 0
    assert acl.rt.get_context() == (0, 107002)
    assert acl.rt.set_context(ctx) == 107017
    assert acl.rt.reset_device(0) == 107000


def test_stream_handles(ctx: int) -> None:
    stream, ret = acl.rt.create_stream()
    assert ret == 0 and stream != 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.rt.synchronize_stream(0) == 0  # the default stream
    assert acl.rt.synchronize_device() == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_stream(stream) == 107017
    assert acl.rt.synchronize_stream(stream) == 107017
    assert acl.rt.destroy_stream(0) == 107000


def test_a_stream_of_another_context_is_refused(ctx: int) -> None:
    stream, _ = acl.rt.create_stream()
    explicit, _ = acl.rt.create_context(0)
    host, _ = acl.rt.malloc_host(64)
    dev = malloc(64)
    assert acl.rt.memcpy_async(dev, 64, host, 64, H2D, stream) == 107003
    assert "belongs to context" in acl.get_recent_err_msg()
    assert acl.rt.synchronize_stream(stream) == 107003
    assert acl.rt.destroy_stream(stream) == 107003
    assert acl.rt.set_context(ctx) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.destroy_context(explicit) == 0


def test_streams_run_queued_work_in_order(ctx: int) -> None:
    set_timing("copy_gbps=0.00001")  # 256 bytes take ~26 ms
    stream, _ = acl.rt.create_stream()
    host_in, _ = acl.rt.malloc_host(256)
    host_out, _ = acl.rt.malloc_host(256)
    ctypes.memmove(host_in, bytes(range(256)), 256)
    chain = [malloc(256) for _ in range(4)]
    assert acl.rt.memcpy_async(chain[0], 256, host_in, 256, H2D, stream) == 0
    for src, dst in zip(chain, chain[1:]):
        assert acl.rt.memcpy_async(dst, 256, src, 256, D2D, stream) == 0
    assert acl.rt.memcpy_async(host_out, 256, chain[-1], 256, D2H, stream) == 0
    assert acl.rt.synchronize_stream(stream) == 0
    assert ctypes.string_at(host_out, 256) == bytes(range(256))
    assert acl.rt.destroy_stream(stream) == 0


def test_synchronize_returns_the_first_failure_since_the_last_synchronize(ctx: int) -> None:
    set_timing("copy_gbps=0.000001")  # 200 bytes take 200 ms
    stream, _ = acl.rt.create_stream()
    host, _ = acl.rt.malloc_host(256)
    slow, first, second = malloc(256), malloc(64), malloc(64)
    assert acl.rt.memcpy_async(slow, 256, host, 200, H2D, stream) == 0
    assert acl.rt.memcpy_async(host, 64, first, 64, D2H, stream) == 0
    assert acl.rt.memcpy_async(second, 64, host, 64, H2D, stream) == 0
    assert acl.rt.free(first) == 0  # before the queued copies run
    assert acl.rt.free(second) == 0
    assert acl.rt.synchronize_stream(stream) == 107000
    message = acl.get_recent_err_msg()
    assert "acl.rt.synchronize_stream failed" in message
    assert "queued acl.rt.memcpy_async failed: src device memory" in message
    assert acl.rt.synchronize_stream(stream) == 0
    assert acl.rt.destroy_stream(stream) == 0


def test_destroy_stream_waits_for_the_queued_work(ctx: int) -> None:
    set_timing("copy_gbps=0.000001")
    stream, _ = acl.rt.create_stream()
    host, _ = acl.rt.malloc_host(128)
    dev = malloc(128)
    assert acl.rt.memset(dev, 128, 9, 128) == 0
    start = time.monotonic()
    assert acl.rt.memcpy_async(host, 128, dev, 128, D2H, stream) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert time.monotonic() - start >= 0.1
    assert ctypes.string_at(host, 128) == b"\x09" * 128


def test_synchronize_device_waits_for_every_stream(ctx: int) -> None:
    set_timing("copy_gbps=0.000001")
    streams = [acl.rt.create_stream()[0] for _ in range(2)]
    host, _ = acl.rt.malloc_host(128)
    dev = malloc(128)
    assert acl.rt.memset(dev, 128, 5, 128) == 0
    for i, stream in enumerate(streams):
        assert acl.rt.memcpy_async(host + 64 * i, 64, dev, 64, D2H, stream) == 0
    assert acl.rt.synchronize_device() == 0
    assert ctypes.string_at(host, 128) == b"\x05" * 128
    for stream in streams:
        assert acl.rt.destroy_stream(stream) == 0


def test_finalize_kills_contexts_and_streams_of_every_thread(ctx: int) -> None:
    stream, _ = acl.rt.create_stream()
    assert acl.finalize() == 0
    assert acl.init() == 0
    assert acl.rt.malloc(64, 0) == (0, 107002)
    assert acl.rt.set_context(ctx) == 107017
    assert acl.rt.set_device(0) == 0
    assert acl.rt.synchronize_stream(stream) == 107017


def test_the_stream_worker_runs_under_the_streams_context(ctx: int) -> None:
    from ge_python_backend.emulator._streams import current_context, stream_in

    stream, _ = acl.rt.create_stream()
    seen: list[Any] = []
    worker = stream_in(stream, current_context())
    worker.submit("test", lambda: seen.append(acl.rt.get_context()))
    assert acl.rt.synchronize_stream(stream) == 0
    assert seen == [(ctx, 0)]
    assert acl.rt.destroy_stream(stream) == 0
