"""What an `.om` takes and returns, read from the file without loading it or opening a device.

`describe_om` uses `acl.init` and `acl.mdl.get_desc_from_file` only (GE reads the file on the
host: hicann/ge api/acl/acl_model/model/model.cpp `aclmdlGetDescFromFileImpl`), so it can run
where a device is busy or absent: Triton's auto-complete, `validate`, `inspect --config`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Union

from ge_python_backend.aipp import AippOp
from ge_python_backend.ascend import carved_bytes, malloc_reserved
from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.runtime._acl import ensure_initialized, load_acl
from ge_python_backend.runtime.errors import ModelFileError, check, check_handle
from ge_python_backend.runtime.gears import GearTable
from ge_python_backend.runtime.model import LoadSizes, _describe, read_aipp_config
from ge_python_backend.runtime.workspaces import shares_io_buffer

__all__ = ["ModelFileDescription", "describe_file", "describe_om"]

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]


@dataclasses.dataclass(frozen=True)
class ModelFileDescription:
    """An `.om`'s inputs, outputs and gears as `Session` reports them, read without a device.

    Output shapes: a batch gear model's outputs carry the batch on axis 0 (-1 when there are
    several gears); HW and dims gears may change any output axis, and only a loaded model tells
    which (`acl.mdl.get_cur_output_dims`), so every output axis but a shared batch axis 0 is -1.
    """

    path: Path
    inputs: tuple[TensorSpec, ...]  # never includes ascend_mbatch_shape_data
    outputs: tuple[TensorSpec, ...]
    gears: GearInfo
    # device memory its loads hold: weights once per context, work per load (query_size)
    load: LoadSizes = LoadSizes()
    # device memory one session lane pools: a buffer per input (the gear input and dynamic-AIPP
    # parameters included) and output at its described size, as malloc reserves it
    lane_bytes: int = 0
    # the described sizes of the input and output buffers, and whether its shapes are dynamic
    input_sizes: tuple[int, ...] = ()
    output_sizes: tuple[int, ...] = ()
    dynamic_shape: bool = False

    def shared_io(self, image_input: str | None = None) -> tuple[int, int]:
        """Under a device host with shared work spaces, a lane's buffers that are views of its
        stream's I/O area (`workspaces.shares_io_buffer`; `image_input`: the input DVPP writes):
        (the bytes of `lane_bytes` it no longer holds itself, the bytes it needs of the area)."""
        dynamic = self.dynamic_shape
        inputs = [
            size
            for spec, size in zip(self.inputs, self.input_sizes)
            if shares_io_buffer(False, spec.name == image_input, dynamic)
        ]
        outputs = [n for n in self.output_sizes if shares_io_buffer(True, False, dynamic)]
        shared = [max(n, 1) for n in (*inputs, *outputs)]
        return sum(map(malloc_reserved, shared)), sum(map(carved_bytes, shared))


def describe_om(
    om_path: PathLike,
    runtime: str | None = None,
    input_shape_order: Sequence[str] | None = None,
    aipp_config: PathLike | None = None,
) -> ModelFileDescription:
    """Describe the `.om` at `om_path` with `runtime` (`$GE_PYTHON_BACKEND_ACL` overrides it;
    without either, the runtime its container is made for: `selected_runtime`).

    Raises ModelFileError for a missing or unusable file, AclError when ACL refuses it.
    `input_shape_order` and `aipp_config` are `Session`'s (dims models whose gears do not
    show the order; dynamic-AIPP models).
    """
    path = Path(om_path)
    if not path.is_file():
        raise ModelFileError(f"model file not found: {path}")
    acl = load_acl(runtime, path)
    aipp = () if aipp_config is None else read_aipp_config(Path(aipp_config))
    return describe_file(acl, path, input_shape_order, aipp)


def describe_file(
    acl: ModuleType,
    path: Path,
    input_shape_order: Sequence[str] | None = None,
    aipp: Sequence[AippOp] = (),
) -> ModelFileDescription:
    """`describe_om` with `acl` loaded and the AIPP parameters (`aipp`) read: what `Session`
    knows when it opens."""
    ensure_initialized(acl)
    handle = acl.mdl.create_desc()
    if not handle:  # acl.finalize was called behind our back
        ensure_initialized(acl, again=True)
        handle = acl.mdl.create_desc()
    desc = check_handle(handle, "acl.mdl.create_desc", acl)
    try:
        check(acl.mdl.get_desc_from_file(desc, str(path)), "acl.mdl.get_desc_from_file", acl)
        ops = {op.related_input_rank: op for op in aipp}
        description = _describe(acl, desc, path, input_shape_order, ops)
    except BaseException:
        ret = acl.mdl.destroy_desc(desc)  # the first failure is the one reported
        if ret:
            logger.warning("acl.mdl.destroy_desc failed with %d after a failed description", ret)
        raise
    check(acl.mdl.destroy_desc(desc), "acl.mdl.destroy_desc", acl)
    gears, output_shapes = GearTable(description, path).described_outputs()
    buffers = [info.size for info in (*description.inputs, *description.outputs)]
    buffers += [size for _, size in description.aipp_inputs]
    if description.gear_input is not None:
        buffers.append(description.gear_input_size)
    return ModelFileDescription(
        path=path,
        inputs=tuple(info.spec for info in description.inputs),
        outputs=tuple(
            dataclasses.replace(info.spec, shape=shape)
            for info, shape in zip(description.outputs, output_shapes)
        ),
        gears=gears,
        load=LoadSizes.query(acl, path),
        lane_bytes=sum(map(malloc_reserved, buffers)),
        input_sizes=tuple(info.size for info in description.inputs),
        output_sizes=tuple(info.size for info in description.outputs),
        dynamic_shape=description.dynamic_shape,
    )
