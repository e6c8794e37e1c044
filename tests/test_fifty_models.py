"""Fifty realistic-size models on one card (tests/fifty_models.py): the device budget of the
card's set in each memory mode, from GE's plan of its three kinds, and a served subset (the
three kinds at small widths) under the device host with shared work spaces, each model
answering as onnxruntime does. `make bench` section 13 serves the fifty.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import fifty_models
import numpy as np
import pytest
from e2e_helpers import grpc_address, model_states, running_server

from ge_python_backend.ascend import carved_bytes, malloc_reserved
from ge_python_backend.client import TritonClient
from ge_python_backend.emulator.timing import HOST_DIR_ENV
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.repository.budget import DeviceLimits, ModelFootprint, budget
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_DEPTH
from ge_python_backend.runtime.describe import describe_om
from ge_python_backend.runtime.model import LoadSizes
from ge_python_backend.runtime.workspaces import WorkSpaceSettings

MIB = 2**20
# GE's plan of the card's kinds at their largest gear (8), as `make bench` section 13 records
# it (`acl.mdl.query_size` of the emulator's `.om`: work and weight bytes) and a lane's buffers
# (`describe_om`'s lane_bytes).
PLANS = {
    "resnet50": (LoadSizes(work=43352064, weight=51175248), 4849024),
    "yolov8s": (LoadSizes(work=278528000, weight=22371714), 61900928),
    "bert_base": (LoadSizes(work=39870976, weight=219042100), 3195104),
}
# Their inputs' and outputs' bytes at gear 8 (fifty_models' shapes), every one a view of its
# stream's I/O area under the device host's shared work spaces: a lane keeps only its gear input
# (one int64, 64 bytes as malloc reserves it).
TENSORS = {
    "resnet50": (8 * 3 * 224 * 224 * 4, 8 * 1000 * 4),
    "yolov8s": (8 * 3 * 640 * 640 * 4, 8 * 84 * 8400 * 4),
    "bert_base": (8 * 128 * 8, 8 * 128 * 8, 8 * 128 * 8, 8 * 128 * 768 * 4, 8 * 768 * 4),
}
GEAR_INPUT = malloc_reserved(8)


def card_footprints(device_host: bool) -> list[ModelFootprint]:
    """The card's fifty models as `budget.footprints` counts a scaffolded one (2 instances on
    device 0, scaffold's pipeline depth), from `PLANS` and `TENSORS`."""
    found = []
    for kind in fifty_models.CARD:
        sizes, buffers = PLANS[kind.name]
        tensors = TENSORS[kind.name]
        found += [
            ModelFootprint(
                name,
                {0: fifty_models.INSTANCES},
                DEFAULT_PIPELINE_DEPTH,
                sizes.load_bytes + buffers,
                sizes.shared_bytes,
                device_host=device_host,
                buffer_bytes=buffers,
                shared_io_bytes=sum(map(malloc_reserved, tensors)),
                io_area_bytes=sum(map(carved_bytes, tensors)),
            )
            for name in kind.model_names()
        ]
    return found


def test_the_plans_pinned_are_those_the_bench_measured() -> None:
    results = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "all.json"
    kinds = json.loads(results.read_text())["fifty_models"]["kinds"]
    measured = {
        name: (LoadSizes(kind["work_bytes"], kind["weight_bytes"]), kind["lane_buffer_bytes"])
        for name, kind in kinds.items()
    }
    assert measured == PLANS
    for name, tensors in TENSORS.items():  # the tensors are the buffers the bench measured
        assert sum(map(malloc_reserved, tensors)) + GEAR_INPUT == PLANS[name][1]


def test_the_card_fits_one_310p3_only_with_shared_work_spaces() -> None:
    limits = DeviceLimits.of("Ascend310P3")
    assert [kind.count for kind in fifty_models.CARD] == [20, 20, 10]
    hosted = card_footprints(device_host=True)
    (in_stub,) = budget(card_footprints(device_host=False), limits).rows
    # a process per instance, each with the device's opening, the weights and its lanes
    assert in_stub.processes == 100 > limits.max_processes
    assert round(in_stub.memory / MIB) == 49476
    per_lane = WorkSpaceSettings(shared=False)
    (row,) = budget(hosted, dataclasses.replace(limits, host=per_lane)).rows
    # one process; weights once per model, a work space and buffers per lane (200 lanes)
    assert row.processes == 1 and row.work_spaces == 0
    assert round(row.memory / MIB) == 34897 > limits.memory / MIB == 21525
    shared = WorkSpaceSettings(streams=4)
    (row,) = budget(hosted, dataclasses.replace(limits, host=shared)).rows
    # one opening, the weights once per model, 4 work spaces of YOLOv8s's work, 4 I/O areas of
    # its input and output (62 MB), and each of the 200 lanes' gear input
    yolo_work = PLANS["yolov8s"][0].load_bytes
    assert row.work_spaces == 4 * yolo_work
    yolo_io = malloc_reserved(sum(map(carved_bytes, TENSORS["yolov8s"])))
    assert row.io_areas == 4 * yolo_io and round(yolo_io / MIB, 1) == 59.0
    weights = sum(PLANS[k.name][0].shared_bytes * k.count for k in fifty_models.CARD)
    lanes = sum(k.count * 2 * DEFAULT_PIPELINE_DEPTH for k in fifty_models.CARD)
    assert lanes == 200
    own = lanes * GEAR_INPUT
    assert row.memory == limits.process_memory + weights + own + 4 * yolo_work + 4 * yolo_io
    # was 9,881 MiB with every lane's buffers its own (5,214 MiB of them)
    assert round(row.memory / MIB) == 4902 < 21525


@pytest.fixture(scope="module")
def small_card(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict, dict, tuple[int, int]]:
    """`SMALL` under the device host: its root, {model: kind}, {rows: {model: question}} for 1
    and 2 rows, and the largest work space and I/O area of the three (as malloc reserves
    them)."""
    root = tmp_path_factory.mktemp("card")
    oms = fifty_models.compile_kinds(root / "onnx", fifty_models.SMALL)
    models = fifty_models.build_repository(root / "models", oms, fifty_models.SMALL)
    described = [describe_om(om, "emulator") for om in oms.values()]
    work = max(d.load.load_bytes for d in described)
    io = malloc_reserved(max(d.shared_io()[1] for d in described))
    rng = np.random.default_rng(44)
    asked = {rows: fifty_models.questions(oms, models, rows, rng) for rows in (1, 2)}
    return root, models, asked, (work, io)


@pytest.mark.e2e
def test_the_three_kinds_answer_as_onnxruntime_under_shared_work_spaces(
    small_card: tuple[Path, dict, dict, tuple[int, int]],
) -> None:
    root, models, asked, (work, io) = small_card
    host = WorkSpaceSettings(streams=2)
    env = {
        HOST_DIR_ENV: str(root / "emulator"),
        RUN_DIR_ENV: str(root / "run"),
        **host.environment(),
    }
    with running_server(root / "models", env=env, log_path=root / "triton.log") as server:
        states = model_states(server)
        assert {name: states[name][0] for name in models} == dict.fromkeys(models, "READY")
        with TritonClient(grpc_address(server), "grpc", timeout_s=120) as client:
            for name in models:
                for rows, questions in asked.items():
                    problem = fifty_models.answer_problem(client, name, questions[name])
                    assert not problem, (name, rows, problem)
        # the host's 2 streams, each a work space of the largest work of the three (YOLOv8n's)
        # and an I/O area of their largest inputs and outputs
        assert fifty_models.host_work_spaces(server) == {
            "streams": 2,
            "work_space_bytes": 2 * work,
            "io_area_bytes": 2 * io,
        }
