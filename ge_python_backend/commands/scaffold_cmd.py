"""`ge-python-model scaffold`: write the Triton model directory that serves an `.om`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ge_python_backend.commands import add_command
from ge_python_backend.commands.options import (
    add_device_budget_options,
    add_input_shape_order_option,
    add_max_output_bytes_option,
    add_runtime_option,
    device_limits,
    host_what_does_not_fit_in_stubs,
)
from ge_python_backend.errors import UserError
from ge_python_backend.repository.parameters import (
    DEFAULT_EXECUTE_TIMEOUT_MS,
    DEFAULT_PIPELINE_DEPTH,
    DEFAULT_PIPELINE_MIN_DEVICE_US,
    parse_max_output_bytes,
)
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.triton_config import DEFAULT_MAX_QUEUE_DELAY_US
from ge_python_backend.repository.versions import checksum_path
from ge_python_backend.runtime import PIPELINE_DEPTHS
from ge_python_backend.runtime.dvpp import RESIZE_MODES

HELP = "write a Triton model directory (config.pbtxt, model.py, .om) for an .om"

DESCRIPTION = """\
Write <repository>/<name>/ for Triton's Python backend:
  config.pbtxt              inputs/outputs, batching, instances, warmup, the parameters below
  <version>/model.py        the ge-python-backend model
  <version>/<file>.om       a copy of the .om
  <version>/<file>.om.sha256  its SHA-256, checked before every load

The inputs, outputs and gears are read from the .om with --runtime, else the runtime its container
is made for (an emulator .om: the emulator; any other: pyACL), which the config's acl_runtime then
names. Where the .om cannot be opened (a real .om on a machine without CANN), declare them with
--input/--output NAME:TYPE:DIMS, DIMS being the full .om shape with axis 0 and -1 on dynamic axes.
Declared models are static (max_batch_size 0) unless --max-batch-size B is given: then axis 0 is
the batch axis (-1 or B) and B is the model's one batch gear.

A batched .om gets max_batch_size = its largest gear (--max-batch-size raises or lowers it; larger
batches run as several gear executions), dynamic batching that prefers the gears, and one warmup
per gear (random data for floating-point inputs, zeros for integer ones: ids and masks stay in
range). Instance k runs on NPU device_ids[k % len(device_ids)].

When the model directory exists, --version V adds version V to it: the .om must have the inputs
and outputs of the model's config (it is refused otherwise), the config is kept (the options
above are not applied to it) and only --version-policy is written into it. Each version serves
its own .om, so versions with different weights serve side by side.

examples:
  ge-python-model scaffold resnet.om --repository models
  ge-python-model scaffold resnet.om --repository models --runtime emulator --instances 2 \\
      --device-ids 0,1 --dry-run
  ge-python-model scaffold yolo.om --repository models --name detector --max-batch-size 8 \\
      --input images:FP16:-1,3,640,640 --output boxes:FP16:-1,25200,85
  ge-python-model scaffold resnet_v2.om --repository models --name resnet --version 2 \
      --version-policy all
"""


def register(subparsers: Any) -> None:
    """Add the `scaffold` subcommand."""
    parser = add_command(subparsers, "scaffold", run, HELP, DESCRIPTION)
    parser.add_argument("om", type=Path, help="the .om file to serve")
    parser.add_argument(
        "--repository", "-r", type=Path, required=True, help="the Triton model repository"
    )
    parser.add_argument("--name", help="model name (default: the .om file name without .om)")
    parser.add_argument(
        "--version",
        type=int,
        default=1,
        help="model version (default: 1); a new version of an existing model is added to it",
    )
    parser.add_argument(
        "--version-policy",
        metavar="POLICY",
        help="versions Triton serves: latest:K (the K highest), all, or specific:1,3 "
        "(default: Triton's latest:1)",
    )
    parser.add_argument(
        "--instances", type=int, default=1, help="model instances (stub processes; default: 1)"
    )
    parser.add_argument(
        "--device-ids",
        default="0",
        metavar="IDS",
        help="comma-separated NPU ids shared round-robin by the instances (default: 0)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        metavar="B",
        help="Triton max_batch_size (default: the largest batch gear of the .om)",
    )
    parser.add_argument(
        "--max-queue-delay-us",
        type=int,
        default=DEFAULT_MAX_QUEUE_DELAY_US,
        metavar="US",
        help=f"how long the dynamic batcher waits to fill a batch (default: "
        f"{DEFAULT_MAX_QUEUE_DELAY_US})",
    )
    parser.add_argument(
        "--max-queue-size",
        type=int,
        default=0,
        metavar="N",
        help="shed load: refuse requests at once while N wait in the queue (default: 0, no limit)",
    )
    parser.add_argument(
        "--queue-timeout-us",
        type=int,
        default=0,
        metavar="US",
        help="shed load: refuse requests that waited longer than this in the queue "
        "(default: 0, no limit)",
    )
    add_runtime_option(
        parser,
        "read and serve the .om with pyACL on an NPU or the CPU emulator (default: the .om's "
        "container: the emulator for an emulator .om, pyacl for any other)",
    )
    parser.add_argument(
        "--pipeline-depth",
        type=int,
        default=DEFAULT_PIPELINE_DEPTH,
        help=f"batches in flight per instance, one of {', '.join(map(str, PIPELINE_DEPTHS))}: 2 "
        "overlaps copies and execution of consecutive batches on two streams (the device "
        "executes while the host prepares the next batch), loading the .om twice "
        f"(default: {DEFAULT_PIPELINE_DEPTH})",
    )
    parser.add_argument(
        "--execute-timeout-ms",
        type=int,
        default=DEFAULT_EXECUTE_TIMEOUT_MS,
        metavar="MS",
        help="fail a batch whose execution has not finished after MS milliseconds (a hung "
        "device), rebuild its stream and serve on; 0 waits forever "
        f"(default: {DEFAULT_EXECUTE_TIMEOUT_MS})",
    )
    parser.add_argument(
        "--pipeline-min-device-us",
        type=int,
        default=None,
        metavar="US",
        help="at pipeline depth 2, pipeline only executions that take at least US microseconds "
        "on the device on average (shorter ones are answered inline: Triton's response senders "
        "cost more than they would hide); 0 pipelines all "
        f"(default: {DEFAULT_PIPELINE_MIN_DEVICE_US})",
    )
    add_input_shape_order_option(parser)
    add_max_output_bytes_option(parser)
    parser.add_argument(
        "--image-input",
        metavar="NAME",
        help="serve the YUV420SP_U8 AIPP input NAME as JPEG files (TYPE_STRING [1], one file "
        "per row), decoded and resized on the NPU by DVPP (parameter image_input; no "
        "model_warmup then)",
    )
    parser.add_argument(
        "--image-resize",
        choices=RESIZE_MODES,
        help="how --image-input's pictures are fitted: stretch (default) or letterbox (aspect "
        "kept, centred, parameter image_fill around)",
    )
    parser.add_argument(
        "--labels",
        type=Path,
        metavar="FILE",
        help="a label file (one class name a line): copied into the model directory and set "
        "as label_filename of the output with one value per label, so that clients asking for "
        "class_count get score:index:label (Triton's classification extension)",
    )
    parser.add_argument(
        "--device-host",
        choices=("on", "off"),
        default=None,
        help="parameter device_host: on serves the model from the NPU's device host (one "
        "process opens the device for every model placed on it; the stub opens no device) "
        "(default: left out, off)",
    )
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME:TYPE:DIMS",
        help="declare an input instead of reading the .om (repeat per input)",
    )
    parser.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME:TYPE:DIMS",
        help="declare an output instead of reading the .om (repeat per output)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the config and the files; write nothing"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing model directory"
    )
    parser.add_argument(
        "--no-warmup",
        action="store_true",
        help="leave model_warmup out of config.pbtxt (by default one warmup per batch gear)",
    )
    add_device_budget_options(
        parser,
        "the SoC of the devices: when the repository's models no longer fit one in their own "
        "stubs, those that leave device_host to its default are served from the device host",
    )
    parser.add_argument(
        "--vendor-runtime",
        action="store_true",
        help="copy ge_python_backend into <version>/_ge_vendor so the server needs no install",
    )


def run(args: argparse.Namespace) -> int:
    """Scaffold the model directory, or show it with --dry-run."""
    if args.instances < 1:
        raise UserError(f"--instances must be >= 1, got {args.instances}")
    if args.max_batch_size is not None and args.max_batch_size < 1:
        raise UserError(f"--max-batch-size must be >= 1, got {args.max_batch_size}")
    result = scaffold(
        args.om,
        args.repository,
        name=args.name,
        version=args.version,
        instances=args.instances,
        device_ids=args.device_ids,
        max_batch_size=args.max_batch_size,
        max_queue_delay_us=args.max_queue_delay_us,
        max_queue_size=args.max_queue_size,
        queue_timeout_us=args.queue_timeout_us,
        runtime=args.runtime,
        pipeline_depth=args.pipeline_depth,
        execute_timeout_ms=args.execute_timeout_ms,
        input_shape_order=args.input_shape_order,
        pipeline_min_device_us=args.pipeline_min_device_us,
        max_output_bytes=parse_max_output_bytes(args.max_output_bytes),
        device_host=None if args.device_host is None else args.device_host == "on",
        inputs=args.input,
        outputs=args.output,
        dry_run=args.dry_run,
        overwrite=args.overwrite,
        vendor_runtime=args.vendor_runtime,
        warmup=not args.no_warmup,
        version_policy=args.version_policy,
        image_input=args.image_input,
        image_resize=args.image_resize,
        labels=args.labels,
    )
    planned = [result.model_py_path, result.om_path, checksum_path(result.om_path)]
    if result.labels_path is not None:
        planned.insert(0, result.labels_path)
    if not result.added_version or args.version_policy is not None:
        planned.insert(0, result.config_path)
    if result.vendor_dir is not None:
        planned.append(result.vendor_dir / "ge_python_backend")
    if args.dry_run:
        print(f"# {result.config_path} (dry run: nothing written)")
        print(result.config_text, end="")
        print("# would write:")
        for path in planned:
            print(f"#   {path}")
        return 0
    what = f"version {args.version} of model" if result.added_version else "model"
    print(f"wrote {what} {result.model_dir.name!r} (sha256 {result.om_sha256[:12]}...):")
    for path in planned:
        print(f"  {path}")
    host_what_does_not_fit_in_stubs(args.repository, args.runtime, device_limits(args))
    print(f"next: ge-python-model validate {args.repository} --name {result.model_dir.name}")
    print(f"      ge-python-model serve {args.repository}")
    return 0
