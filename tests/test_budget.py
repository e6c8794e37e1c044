"""The device budget of a repository (repository/budget.py): processes and device memory per
device, counted before anything loads, as `validate` prints and enforces them."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from ge_python_backend import cli
from ge_python_backend.ascend import PROCESS_DEVICE_MEMORY, malloc_reserved, soc_device
from ge_python_backend.emulator import acl
from ge_python_backend.errors import UserError
from ge_python_backend.repository.budget import DeviceLimits, ModelFootprint, budget, footprints
from ge_python_backend.repository.config import write_model_config
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_DEPTH
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.shm import repository_entries
from ge_python_backend.runtime.workspaces import WorkSpaceSettings
from ge_python_backend.tools.k8s import K8sOptions, build_manifests

PER_LANE = WorkSpaceSettings(shared=False)  # a device host giving each lane its work space
# om_dynamic_batch's buffers a lane seated in the device host's pool keeps in its stream's I/O
# area (x [8,16] f32, y [8,8] f32, z [8,1] f32; not the gear input): as malloc reserves them
# (544 + 288 + 64), and carved one after another at 64-byte starts (576 + 320 + 64)
SHARED_IO = {"shared_io_bytes": 896, "io_area_bytes": 960}


def test_a_footprint_is_the_weights_per_process_and_work_and_buffers_per_lane_by_device_ids(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    result = scaffold(
        om_dynamic_batch,
        tmp_path / "models",
        name="m",
        runtime="emulator",
        instances=3,
        device_ids="0,1",
        pipeline_depth=2,
    )
    assert acl.init() in (0, 100002)
    work, weight, ret = acl.mdl.query_size(str(result.om_path))
    assert ret == 0
    # x [8,16] f32, ascend_mbatch_shape_data (one int64), y [8,8] f32, z [8,1] f32
    buffers = sum(map(malloc_reserved, (512, 8, 256, 32)))
    lane = malloc_reserved(work) + buffers
    (model,) = footprints(repository_entries(tmp_path / "models"))
    assert model == ModelFootprint(
        "m", {0: 2, 1: 1}, 2, lane, malloc_reserved(weight), buffer_bytes=buffers, **SHARED_IO
    )
    # each of the two stubs on device 0 holds the weights once, its two lanes a work space each
    assert model.device_bytes(2) == 2 * (malloc_reserved(weight) + 2 * lane)
    (row, _) = budget([model], DeviceLimits()).rows
    assert row.memory == 2 * PROCESS_DEVICE_MEMORY + 2 * malloc_reserved(weight) + 4 * lane


def test_a_copy_path_om_is_read_once_for_its_config_and_its_footprint(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    result = scaffold(om_dynamic_batch, tmp_path / "models", name="m")
    assert acl.init() in (0, 100002)
    work, weight, ret = acl.mdl.query_size(str(result.om_path))
    assert ret == 0
    result.config_path.unlink()  # the copy path: auto-complete builds the config from the .om
    entries = repository_entries(tmp_path / "models")
    result.om_path.write_bytes(b"no .om any more")  # a second read would not know its memory
    (model,) = footprints(entries)
    buffers = sum(map(malloc_reserved, (512, 8, 256, 32)))
    lane = malloc_reserved(work) + buffers
    weights = malloc_reserved(weight)
    assert model == ModelFootprint(
        "m", {0: 1}, DEFAULT_PIPELINE_DEPTH, lane, weights, buffer_bytes=buffers, **SHARED_IO
    )


def test_the_budget_refuses_a_device_over_the_process_cap_or_its_memory() -> None:
    limits = DeviceLimits(max_processes=4, memory=10 * PROCESS_DEVICE_MEMORY, soc="Ascend310P3")
    models = [
        ModelFootprint("a", {0: 3, 1: 1}, 1, PROCESS_DEVICE_MEMORY),
        ModelFootprint("b", {0: 2}, 2, None),
        ModelFootprint("c", {1: 2}, 3, PROCESS_DEVICE_MEMORY),
    ]
    devices = budget(models, limits)
    assert [(r.device, r.processes, r.memory) for r in devices.rows] == [
        (0, 5, 3 * 2 * PROCESS_DEVICE_MEMORY + 2 * PROCESS_DEVICE_MEMORY),
        (1, 3, 2 * PROCESS_DEVICE_MEMORY + 2 * 4 * PROCESS_DEVICE_MEMORY),
    ]
    problems = devices.problems()
    assert len(problems) == 1 and "device 0: 5 processes" in problems[0]
    assert "pyACL allows 4 per device" in problems[0]
    assert devices.warnings() == [
        "device 0: the memory of b is not counted (its .om could not be read here)"
    ]
    tight = DeviceLimits(max_processes=64, memory=9 * PROCESS_DEVICE_MEMORY)
    (problem,) = budget(models, tight).problems()
    assert problem.startswith("device 1: 1,120 MiB of device memory needed, a Ascend310P3 has")
    assert "DOES NOT FIT" in budget(models, tight).table().splitlines()[3]


def test_validate_refuses_60_models_of_2_instances_on_one_310p3_naming_the_process_cap(
    tmp_path: Path, om_dynamic_batch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repository = tmp_path / "models"
    first = scaffold(om_dynamic_batch, repository, name="m00", runtime="emulator", instances=2)
    for number in range(1, 60):  # the same model directory sixty times (no config reads again)
        shutil.copytree(repository / "m00", repository / f"m{number:02}")
        first.config.name = f"m{number:02}"
        write_model_config(first.config, repository / f"m{number:02}" / "config.pbtxt")
    assert cli.main(["validate", str(repository), "--runtime", "emulator"]) == 1
    out = capsys.readouterr().out
    assert out.count(": OK (versions: 1)") == 60
    table = out[out.index("device budget (Ascend310P3: 64 processes") :]
    memory = soc_device("Ascend310P3").memory // 2**20
    assert f"{memory:,} MiB; 112 MiB per process)" in table.splitlines()[0]
    row = table.splitlines()[2].split()
    assert row[:4] == ["0", "120", "/", "64"] and "DOES NOT FIT" in table
    assert "m00 x2, m01 x2" in table and "54 more" in table
    assert "problem: device 0: 120 processes (one per instance) but pyACL allows 64" in out
    # 32 models of 2 instances fit in the processes of one device, their memory too
    for number in range(32, 60):
        shutil.rmtree(repository / f"m{number:02}")
    assert cli.main(["validate", str(repository), "--runtime", "emulator"]) == 0
    assert "64 / 64" in capsys.readouterr().out


def test_k8s_refuses_a_repository_the_pods_npus_cannot_hold(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    scaffold(om_dynamic_batch, tmp_path / "models", name="m", runtime="emulator", instances=3)
    options = K8sOptions(name="classifier", limits=DeviceLimits(max_processes=2))
    with pytest.raises(UserError) as refused:
        build_manifests(tmp_path / "models", options)
    assert "the pod's NPUs cannot hold the repository: device 0: 3 processes" in str(refused.value)
    assert "m x3  DOES NOT FIT" in str(refused.value)
    assert build_manifests(tmp_path / "models", K8sOptions(name="classifier")).documents


def test_under_the_device_host_a_device_holds_one_process_and_each_models_weights_once(
    tmp_path: Path, om_dynamic_batch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    limits = DeviceLimits(max_processes=4, memory=100 * PROCESS_DEVICE_MEMORY, host=PER_LANE)
    mib = 2**20
    models = [
        ModelFootprint("a", {0: 3}, 1, PROCESS_DEVICE_MEMORY, 10 * mib, device_host=True),
        ModelFootprint("b", {0: 2, 1: 1}, 1, PROCESS_DEVICE_MEMORY, 20 * mib, device_host=True),
        ModelFootprint("c", {0: 2}, 1, PROCESS_DEVICE_MEMORY, 40 * mib),  # stubs of their own
    ]
    devices = budget(models, limits)
    assert [(r.device, r.processes, r.memory) for r in devices.rows] == [
        # the device host and c's two stubs; 7 lanes; a's and b's weights once, c's twice
        (0, 3, 3 * PROCESS_DEVICE_MEMORY + 7 * PROCESS_DEVICE_MEMORY + (10 + 20 + 2 * 40) * mib),
        (1, 1, PROCESS_DEVICE_MEMORY + PROCESS_DEVICE_MEMORY + 20 * mib),
    ]
    assert not devices.problems()
    assert "a x3 (device host), b x2 (device host), c x2" in devices.table()
    # 60 models of 2 instances in the device host: one process on device 0, and validate says so
    repository = tmp_path / "models"
    first = scaffold(
        om_dynamic_batch, repository, name="m00", runtime="emulator", instances=2, device_host=True
    )
    for number in range(1, 60):
        shutil.copytree(repository / "m00", repository / f"m{number:02}")
        first.config.name = f"m{number:02}"
        write_model_config(first.config, repository / f"m{number:02}" / "config.pbtxt")
    assert cli.main(["validate", str(repository), "--runtime", "emulator"]) == 0
    table = capsys.readouterr().out.split("device budget (")[1]
    assert table.splitlines()[2].split()[:4] == ["0", "1", "/", "64"]
    # ... holding each model's weights once and a work space and buffers for each of 120 x depth
    work, weight, ret = acl.mdl.query_size(str(first.om_path))
    assert ret == 0
    buffers = sum(map(malloc_reserved, (512, 8, 256, 32)))
    lane = malloc_reserved(work) + buffers
    found = footprints(repository_entries(repository, "emulator"), "emulator")
    assert found[0] == ModelFootprint(
        "m00",
        {0: 2},
        DEFAULT_PIPELINE_DEPTH,
        lane,
        malloc_reserved(weight),
        device_host=True,
        buffer_bytes=buffers,
        **SHARED_IO,
    )
    (row,) = budget(found, DeviceLimits(host=PER_LANE)).rows
    assert row.memory == (
        PROCESS_DEVICE_MEMORY + 60 * malloc_reserved(weight) + 120 * DEFAULT_PIPELINE_DEPTH * lane
    )
    # the host's default: 4 shared work spaces and 4 I/O areas instead of 240 of each; each lane
    # keeps its gear input
    (row,) = budget(found, DeviceLimits()).rows
    assert buffers - SHARED_IO["shared_io_bytes"] == malloc_reserved(8)
    assert row.memory == (
        PROCESS_DEVICE_MEMORY
        + 60 * malloc_reserved(weight)
        + 120 * DEFAULT_PIPELINE_DEPTH * malloc_reserved(8)
        + 4 * malloc_reserved(work)
        + 4 * malloc_reserved(SHARED_IO["io_area_bytes"])
    )
    assert row.work_spaces == 4 * malloc_reserved(work)
    assert row.io_areas == 4 * malloc_reserved(SHARED_IO["io_area_bytes"])


def test_with_shared_work_spaces_the_host_holds_n_work_spaces_of_its_largest_models_work() -> None:
    """By hand, in MiB: a (work 30, buffers 2 of which 1.5 in the I/O area, weights 10) x2
    instances, b (work 50, buffers 4 of which 3 in the I/O area, weights 20) x1, 2 lanes each,
    in the device host of 3 streams; c (work 70, buffers 1, weights 5) in its own stub; d hosted
    but without weights query_size sizes (loaded by ACL, its work per lane: 8 + buffers 1)."""
    mib = 2**20
    limits = DeviceLimits(
        memory=10_000 * mib, process_memory=100 * mib, host=WorkSpaceSettings(streams=3)
    )

    def model(
        name: str, instances: int, work: int, buffers: int, io: float, weights: int, hosted: bool
    ) -> ModelFootprint:
        return ModelFootprint(
            name,
            {0: instances},
            2,
            (work + buffers) * mib,
            weights * mib,
            device_host=hosted,
            buffer_bytes=buffers * mib,
            shared_io_bytes=int(io * mib),
            io_area_bytes=int(io * mib),
        )

    models = [
        model("a", 2, 30, 2, 1.5, 10, True),
        model("b", 1, 50, 4, 3, 20, True),
        model("c", 1, 70, 1, 1, 5, False),
        model("d", 1, 8, 1, 1, 0, True),
    ]
    (row,) = budget(models, limits).rows
    areas = 3 * malloc_reserved(3 * mib)  # b's inputs and outputs, as malloc reserves an area
    host = 100 + (10 + 20) + 3 * 50 + (2 * 2 * 0.5 + 1 * 2 * 1) + 1 * 2 * (8 + 1)
    stub = 100 + 5 + 2 * (70 + 1)
    assert (row.processes, row.memory, row.work_spaces, row.io_areas) == (
        2,
        (host + stub) * mib + areas,
        150 * mib,
        areas,
    )
    assert (
        "150.0 MiB are the device host's 3 shared work spaces of 50.0 MiB (its largest model's "
        "work) and 9.0 MiB its 3 I/O areas of 3.0 MiB" in budget(models, limits).table()
    )
    # per lane: every hosted lane its own work space
    (row,) = budget(models, dataclasses.replace(limits, host=PER_LANE)).rows
    per_lane = 100 + 30 + (2 * 2 * 32 + 1 * 2 * 54) + 1 * 2 * 9
    assert (row.memory, row.work_spaces) == ((per_lane + stub) * mib, 0)
