"""Emulated pyACL accounting: `stats()` and the `GE_EMULATOR_STATS_DIR` file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from emulator_helpers import delta

from ge_python_backend.emulator import acl, stats

REQUIRED = {
    "live_device_allocations",
    "live_host_allocations",
    "live_data_buffers",
    "live_datasets",
    "loaded_models",
    "live_streams",
    "live_contexts",
    "malloc_calls",
    "malloc_host_calls",
    "memcpy_calls",
    "memcpy_bytes",
    "execute_calls",
    "device_bytes_in_use",
    "h2d_bytes",
    "d2h_bytes",
    "dataset_creations",
    "data_buffer_creations",
}


pytestmark = pytest.mark.usefixtures("clean_acl")


def test_stats_count_live_resources_and_calls(om_static: Path) -> None:
    assert set(stats()) >= REQUIRED
    before = stats()
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    dev, _ = acl.rt.malloc(100, 0)
    host, _ = acl.rt.malloc_host(100)
    stream, _ = acl.rt.create_stream()
    assert acl.rt.memcpy(dev, 100, host, 100, 1) == 0
    assert acl.rt.memcpy(host, 100, dev, 40, 2) == 0
    buf = acl.create_data_buffer(dev, 100)
    dataset = acl.mdl.create_dataset()
    model_id, _ = acl.mdl.load_from_file(str(om_static))
    assert delta(before, stats()) == {
        "live_device_allocations": 1,
        "device_bytes_in_use": 160,
        "live_host_allocations": 1,
        "host_bytes_in_use": 100,
        "live_data_buffers": 1,
        "live_datasets": 1,
        "loaded_models": 1,
        "live_streams": 1,
        "live_contexts": 1,
        "malloc_calls": 1,
        "malloc_host_calls": 1,
        "memcpy_calls": 2,
        "memcpy_bytes": 140,
        "h2d_bytes": 100,
        "d2h_bytes": 40,
        "data_buffer_creations": 1,
        "dataset_creations": 1,
        "stream_creations": 1,
        "model_loads": 1,
    }
    assert acl.mdl.unload(model_id) == 0
    assert acl.mdl.destroy_dataset(dataset) == 0
    assert acl.destroy_data_buffer(buf) == 0
    assert acl.rt.destroy_stream(stream) == 0
    assert acl.rt.free(dev) == 0
    assert acl.rt.free_host(host) == 0
    assert acl.finalize() == 0
    after = stats()
    live = [k for k in after if k.startswith("live_") or k.endswith("_in_use")]
    assert {k: after[k] for k in live} == {k: before[k] for k in live}
    assert after["malloc_calls"] == before["malloc_calls"] + 1  # not reset by finalize


def test_finalize_releases_what_leaked_and_counts_it(om_static: Path) -> None:
    before = stats()
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    dev, _ = acl.rt.malloc(64, 0)
    acl.rt.malloc_host(64)
    acl.rt.create_stream()
    buf = acl.create_data_buffer(dev, 64)
    dataset = acl.mdl.create_dataset()
    acl.mdl.create_desc()
    model_id, _ = acl.mdl.load_from_file(str(om_static))
    assert acl.finalize() == 0
    changes = delta(before, stats())
    leaked = {k: v for k, v in changes.items() if k.startswith(("live_", "leaked_"))}
    assert leaked == {
        "leaked_device_allocations": 1,
        "leaked_host_allocations": 1,
        "leaked_data_buffers": 1,
        "leaked_datasets": 1,
        "leaked_model_descs": 1,
        "leaked_models": 1,
        "leaked_streams": 1,
        "leaked_contexts": 1,
    }
    assert acl.init() == 0
    try:
        assert acl.rt.set_device(0) == 0
        assert acl.get_data_buffer_addr(buf) == 0
        assert acl.mdl.destroy_dataset(dataset) == 100000
        assert acl.mdl.unload(model_id) == 100011
        assert acl.rt.free(dev) == 107000
        assert "released by acl.finalize" in acl.get_recent_err_msg()
    finally:
        acl.finalize()


def _run(code: str, directory: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GE_EMULATOR_STATS_DIR": str(directory)}
    return subprocess.run(
        [sys.executable, "-c", code, "first-arg"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_stats_dir_gets_a_file_at_finalize_and_at_exit(tmp_path: Path, om_static: Path) -> None:
    code = (
        "import os, json\n"
        "from ge_python_backend.emulator import acl\n"
        "acl.init(); acl.rt.set_device(0)\n"
        "ptr, _ = acl.rt.malloc(64, 0)\n"
        f"model_id, _ = acl.mdl.load_from_file({str(om_static)!r})\n"
        "print(model_id)\n"
        "acl.finalize()\n"
        "path = os.path.join(os.environ['GE_EMULATOR_STATS_DIR'], f'emulator-{os.getpid()}.json')\n"
        "print(json.dumps(json.load(open(path))))\n"
        "acl.init(); acl.rt.set_device(0); acl.rt.malloc(64, 0)\n"
    )
    result = _run(code, tmp_path)
    assert result.returncode == 0, result.stderr
    model_id, at_finalize = result.stdout.splitlines()
    assert model_id == "1"  # model ids start at 1
    files = list(tmp_path.iterdir())
    assert len(files) == 1
    at_exit = json.loads(files[0].read_text())
    assert set(at_exit) == {"pid", "argv", "stats"}
    assert files[0].name == f"emulator-{at_exit['pid']}.json"
    assert at_exit["argv"] == ["-c", "first-arg"]
    assert set(at_exit["stats"]) >= REQUIRED
    finalize_stats = json.loads(at_finalize)["stats"]
    assert finalize_stats["live_device_allocations"] == 1
    assert finalize_stats["loaded_models"] == 1
    assert finalize_stats["malloc_calls"] == 1
    exit_stats = at_exit["stats"]
    assert exit_stats["malloc_calls"] == 2  # rewritten at exit, without a second finalize
    assert exit_stats["live_device_allocations"] == 1
    assert exit_stats["loaded_models"] == 0
    assert exit_stats["leaked_device_allocations"] == 1
    assert exit_stats["leaked_models"] == 1
