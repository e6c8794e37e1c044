"""`ge-python-model inspect`: what an `.om` takes and returns, and its gears."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ge_python_backend.ascend import (
    PROCESS_DEVICE_MEMORY,
    PROCESSES_PER_DEVICE,
    PROCESSES_PER_DEVICE_VM,
    GearKind,
    malloc_reserved,
)
from ge_python_backend.commands import add_command, size_text
from ge_python_backend.commands.options import (
    RUNTIME_BY_CONTAINER,
    add_input_shape_order_option,
    add_runtime_option,
)
from ge_python_backend.errors import GeBackendError, UserError
from ge_python_backend.modelinfo import GearInfo, TensorSpec, gears_text
from ge_python_backend.repository.autocomplete import complete_config
from ge_python_backend.repository.budget import host_settings
from ge_python_backend.repository.config import ModelConfig, config_from_view, config_text
from ge_python_backend.repository.model_files import open_session
from ge_python_backend.repository.parameters import parse_input_shape_order
from ge_python_backend.repository.triton_config import TritonConfig
from ge_python_backend.runtime import selected_runtime
from ge_python_backend.runtime.describe import describe_om

HELP = "show the inputs, outputs and gears of an .om"

DESCRIPTION = """\
Show the inputs, outputs (name, Triton data type, numpy dtype, shape, format) and the gears of an
.om, read through pyACL or the CPU emulator (without --runtime, the .om's container decides: an
emulator .om is read by the emulator, any other by pyACL). Shapes are the full .om shapes: axis 0
is included and -1 marks a dynamic axis. Then what it holds on a device (its weights, shared by
the loads of one process; a work space per load; the buffers of a lane) and which processes open
the device for it with device_host off (each instance's stub: a work space per lane) and on (the
device host's one: the weights once, the work in the host's shared work spaces and the inputs
and outputs in its I/O areas, one of each per stream of its pool, each as large as the largest
of the models it serves; a lane keeps of its own only what is written off its stream).

--config prints instead the config.pbtxt Triton's auto-complete will produce for the .om in a
model directory without config.pbtxt (inputs, outputs, max_batch_size, dynamic batching; read
from the file without a device, as model.py's auto_complete_config does).

examples:
  ge-python-model inspect resnet.om
  ge-python-model inspect resnet.om --json
  ge-python-model inspect resnet.om --config --name resnet
"""


def register(subparsers: Any) -> None:
    """Add the `inspect` subcommand."""
    parser = add_command(subparsers, "inspect", run, HELP, DESCRIPTION)
    parser.add_argument("om", type=Path, help="the .om file")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--config",
        action="store_true",
        help="print the config auto-complete produces for this .om (protobuf text)",
    )
    parser.add_argument(
        "--name", help="with --config: the model name (default: the .om file name without .om)"
    )
    add_runtime_option(
        parser, f"open the .om with real pyACL or the CPU emulator ({RUNTIME_BY_CONTAINER})"
    )
    add_input_shape_order_option(parser)


def _tensor(spec: TensorSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "datatype": spec.triton_dtype,
        "numpy_dtype": str(spec.dtype),
        "shape": list(spec.shape),
        "format": spec.format,
    }


def _read(
    om: Path, runtime: str | None, input_shape_order: str | None
) -> tuple[list[TensorSpec], list[TensorSpec], GearInfo, dict[str, str]]:
    """What the `.om` takes, returns and runs, and its inputs' AIPP (`input_shape_order`:
    `--input-shape-order`)."""
    if not om.is_file():
        raise UserError(f".om file {om} does not exist")
    order = parse_input_shape_order(input_shape_order)
    with open_session(om, runtime, order) as session:
        return list(session.inputs), list(session.outputs), session.gears, dict(session.aipp)


def _as_json(
    om: Path, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], gears: GearInfo
) -> dict[str, Any]:
    """The JSON-ready description of the `.om`."""
    return {
        "file": str(om),
        "inputs": [_tensor(spec) for spec in inputs],
        "outputs": [_tensor(spec) for spec in outputs],
        "gears": {
            "kind": gears.kind.value,
            "batched": gears.batched,
            "batch_gears": list(gears.batch_gears),
            "hw_gears": [list(gear) for gear in gears.hw_gears],
            "dims_gears": [[list(shape) for shape in gear] for gear in gears.dims_gears],
            "max_batch": gears.max_batch,
        },
    }


def _gears_line(gears: GearInfo, inputs: Sequence[TensorSpec]) -> str:
    """One line describing the gears and the batch axis."""
    kind = "" if gears.kind == GearKind.STATIC else f"{gears.kind.label} gears "
    if gears.batched:
        axis = f"axis 0 is the batch axis (max {gears.max_batch} per execution)"
    else:
        axis = "no batch axis"
    return f"{kind}{gears_text(gears, inputs)}; {axis}"


def _table(rows: list[dict[str, Any]]) -> list[str]:
    header = ("NAME", "TYPE", "NUMPY", "SHAPE", "FORMAT")
    cells = [
        (row["name"], row["datatype"], row["numpy_dtype"], str(row["shape"]), row["format"])
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    return [
        "  " + "  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
        for line in [header, *cells]
    ]


def completed_config(
    om: Path, runtime: str | None, name: str | None, input_shape_order: str | None = None
) -> ModelConfig:
    """The config auto-complete makes for `om` in a model directory without config.pbtxt."""
    if not om.is_file():
        raise UserError(f".om file {om} does not exist")
    config = TritonConfig(name=name or om.stem, backend="python")
    try:
        described = describe_om(om, runtime, parse_input_shape_order(input_shape_order))
        config, _ = complete_config(config, described.inputs, described.outputs, described.gears)
    except UserError:
        raise
    except GeBackendError as exc:
        chosen = selected_runtime(runtime, om)
        raise UserError(f"cannot read {om} with the {chosen} runtime: {exc}") from None
    return config_from_view(config)


def run(args: argparse.Namespace) -> int:
    """Print the description of `args.om`."""
    if args.config:
        config = completed_config(args.om, args.runtime, args.name, args.input_shape_order)
        print(config_text(config), end="")
        return 0
    inputs, outputs, gears, aipp = _read(args.om, args.runtime, args.input_shape_order)
    info = _as_json(args.om, inputs, outputs, gears)
    info["aipp"] = aipp
    described = describe_om(args.om, args.runtime, parse_input_shape_order(args.input_shape_order))
    host = host_settings()
    pooled = host.shared and described.load.with_mem
    shared_io, io_area = described.shared_io() if pooled else (0, 0)
    info["device_memory"] = {
        "weight_bytes": described.load.shared_bytes,
        "work_bytes_per_load": described.load.load_bytes,
        "buffer_bytes_per_lane": described.lane_bytes,
        "weights_shared": described.load.with_mem,
        # under the device host: its pool's streams (each with a shared work space at least
        # this model's work and an I/O area at least its inputs and outputs), 0 when the host
        # gives each lane a work space and buffers of its own
        "device_host_streams": host.streams if pooled else 0,
        "device_host_io_area_bytes": malloc_reserved(io_area) if io_area else 0,
        "device_host_buffer_bytes_per_lane": described.lane_bytes - shared_io,
    }
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"{info['file']}")
    print(f"gears: {_gears_line(gears, inputs)}")
    print("inputs:")
    print("\n".join(_table(info["inputs"])))
    print("outputs:")
    print("\n".join(_table(info["outputs"])))
    for name, text in aipp.items():
        print(f"AIPP of {name}: {text}")
    print("\n".join(_device_lines(info["device_memory"])))
    return 0


def _device_lines(memory: dict[str, Any]) -> list[str]:
    """What the model holds on its device, and which processes open it, in either mode."""
    work, buffers = (
        size_text(memory["work_bytes_per_load"]),
        size_text(memory["buffer_bytes_per_lane"]),
    )
    load = (
        f"weights {size_text(memory['weight_bytes'])} shared by its loads in a process, work space "
        f"{work}"
        if memory["weights_shared"]
        else f"{work} of work space and weights (ACL allocates them)"
    )
    own = size_text(memory["device_host_buffer_bytes_per_lane"])
    return [
        f"device memory: {load} per load (acl.mdl.query_size: GE's plan of the compiled "
        f"graph); buffers {buffers} per lane (the largest gear); a lane per pipeline_depth",
        f"  device_host off: each instance's stub opens the device: a process of the "
        f"{PROCESSES_PER_DEVICE} a device allows ({PROCESSES_PER_DEVICE_VM} in a VM), "
        f"~{size_text(PROCESS_DEVICE_MEMORY)} for opening it, the weights, its lanes",
        "  device_host on: the device host's one process opens the device for every instance: "
        f"the weights once per device, {_hosted_work(memory)}, each lane keeping {own} of "
        "buffers of its own",
    ]


def _hosted_work(memory: dict[str, Any]) -> str:
    """Where the device host puts the model's work space."""
    streams = memory["device_host_streams"]
    if not streams:
        return "a work space per lane"
    return (
        f"its work in the host's {streams} shared work spaces (one per stream, each as large as "
        f"the largest work of the models it serves: {streams} x "
        f"{size_text(memory['work_bytes_per_load'])} when this one is the largest), its inputs "
        f"and outputs in the host's {streams} I/O areas (one per stream, each as large as the "
        f"largest inputs and outputs of its models: {streams} x "
        f"{size_text(memory['device_host_io_area_bytes'])} when these are the largest)"
    )
