"""What auto-complete adds to a model's config from the `.om` of a version directory.

Triton 2.51 calls `model.py`'s `auto_complete_config` for every version it loads, with the
model's config (empty when there is no `config.pbtxt`); `triton/autocomplete.py` hands it to
`complete_version`, as do `validate` and `inspect --config`, so all three show the same result.
Only what the config lacks is filled, and nothing the user wrote is changed:

* `max_batch_size`: the largest gear of a batched `.om`, when the config has 0 and does not
  declare full `.om` shapes (a config that does keeps 0: no Triton batching; so does an `.om`
  with side inputs, since Triton's batch dimension would apply to them too);
* `input` / `output`: every tensor of the `.om` the config lacks (name, `TYPE_*`, dims without
  the batch axis, -1 on dynamic axes), and the data type or dims of a declared one that has none;
  the input the parameter `image_input` names is `TYPE_STRING` `[1]` (one JPEG file per row);
  an image input without a `format` gets the `.om`'s layout (`triton_config.image_format`);
* `dynamic_batching`: the gears up to `max_batch_size` as preferred batch sizes and a queue delay
  of `DEFAULT_MAX_QUEUE_DELAY_US`, when the config is batched and names no scheduler.

A config that then disagrees with the `.om` is a `ConfigError` naming each field. Triton does
not let auto-complete set anything else (instance groups, warmup, parameters: checked on
2.51), so those keep Triton's defaults unless a `config.pbtxt` sets them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.triton_config import (
    DEFAULT_MAX_QUEUE_DELAY_US,
    ConfigError,
    ConfigTensor,
    DynamicBatching,
    TritonConfig,
    compare_config_with_session,
    config_type_name,
    default_preferred_batch_sizes,
    image_format,
)
from ge_python_backend.repository.versions import find_om
from ge_python_backend.runtime.describe import ModelFileDescription, describe_om
from ge_python_backend.runtime.dvpp import served_inputs


@dataclasses.dataclass(frozen=True)
class Completion:
    """The outcome of `complete_version`: the `.om` read, the completed config and what was
    added to it."""

    om_path: Path
    description: ModelFileDescription
    config: TritonConfig
    filled: tuple[str, ...]  # for people: "max_batch_size 8", "input 'x' TYPE_FP32 [16]", ...


def complete_config(
    config: TritonConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    gears: GearInfo,
) -> tuple[TritonConfig, list[str]]:
    """`config` with what it lacks filled from the `.om` description (see the module
    docstring), and what was filled. ConfigError naming every field that disagrees with the
    `.om`."""
    filled: list[str] = []
    full_shapes = _declares_full_shapes(config, [*inputs, *outputs])
    max_batch_size = config.max_batch_size
    if max_batch_size == 0 and gears.every_input_batched and not full_shapes:
        max_batch_size = gears.max_batch
        filled.append(f"max_batch_size {gears.max_batch}")
    batched = max_batch_size > 0
    completed: dict[str, tuple[ConfigTensor, ...]] = {}
    for kind, declared, specs in (
        ("input", config.inputs, inputs),
        ("output", config.outputs, outputs),
    ):
        tensors = list(declared)
        by_name = {tensor.name: index for index, tensor in enumerate(tensors)}
        for spec in specs:
            index = by_name.get(spec.name)
            added = index is None
            if index is None:
                index = len(tensors)
                tensors.append(ConfigTensor(spec.name))
            tensor = tensors[index]
            parts = []
            if tensor.data_type == "TYPE_INVALID":
                tensor = dataclasses.replace(tensor, data_type=config_type_name(spec.triton_dtype))
                parts.append(tensor.data_type)
            if not tensor.dims:
                tensor = tensor.with_om_shape(spec.shape, batched)
                parts.append(str(tensor.served_dims))
            layout = image_format(spec, tensor.dims) if tensor.reshape is None else "FORMAT_NONE"
            if kind == "input" and tensor.format == "FORMAT_NONE" and layout != tensor.format:
                tensor = dataclasses.replace(tensor, format=layout)
                parts.append(layout)
            tensors[index] = tensor
            if parts:
                what = "" if added else " (declared without " + _missing(parts) + ")"
                filled.append(f"{kind} {spec.name!r} {' '.join(parts)}{what}")
        completed[kind] = tuple(tensors)
    batching = config.dynamic_batching
    if batched and config.scheduler is None:
        preferred = default_preferred_batch_sizes(gears.batch_gears, max_batch_size)
        batching = DynamicBatching(tuple(preferred), DEFAULT_MAX_QUEUE_DELAY_US)
        filled.append(
            f"dynamic_batching (preferred_batch_size {preferred}, max_queue_delay_microseconds "
            f"{DEFAULT_MAX_QUEUE_DELAY_US})"
        )
    result = dataclasses.replace(
        config,
        max_batch_size=max_batch_size,
        inputs=completed["input"],
        outputs=completed["output"],
        dynamic_batching=batching,
    )
    problems = compare_config_with_session(result, inputs, outputs, gears)
    if problems:
        raise ConfigError("; ".join(problems))
    return result, filled


def complete_version(
    config: TritonConfig, version_dir: Path, runtime: str | None = None
) -> Completion:
    """Complete `config` from the `.om` of `version_dir` (read without a device).

    The `.om` is the `om_file` parameter's, else the only one in the directory; `runtime`
    (else the `acl_runtime` parameter; `$GE_PYTHON_BACKEND_ACL` overrides both) reads it.
    ConfigError for bad parameters, a directory without exactly one `.om`, or a config that
    disagrees with the `.om`; the runtime's errors when the `.om` cannot be read.
    """
    params = ModelParameters.from_config(config)
    om_path = find_om(version_dir, params.om_file)
    description = describe_om(
        om_path,
        runtime or params.acl_runtime,
        params.input_shape_order,
        params.aipp_config_path(version_dir),
    )
    inputs = description.inputs
    if params.image_input is not None:  # served as JPEG files: BYTES, one per row
        try:
            inputs = served_inputs(inputs, params.image_input)
        except ValueError as exc:
            raise ConfigError(f"{om_path.name}: {exc}") from None
    try:
        completed, filled = complete_config(config, inputs, description.outputs, description.gears)
    except ConfigError as exc:
        raise ConfigError(f"the config does not match {om_path.name}: {exc}") from None
    return Completion(om_path, description, completed, tuple(filled))


def _declares_full_shapes(config: TritonConfig, specs: Sequence[TensorSpec]) -> bool:
    """Whether a declared tensor has as many dims as the `.om` shape, batch axis included."""
    ranks = {spec.name: len(spec.shape) for spec in specs}
    return any(
        len(tensor.dims) == ranks.get(tensor.name)
        for tensor in (*config.inputs, *config.outputs)
        if tensor.dims
    )


def _missing(parts: list[str]) -> str:
    kinds = [
        "data_type"
        if part.startswith("TYPE_")
        else "format"
        if part.startswith("FORMAT_")
        else "dims"
        for part in parts
    ]
    return " and ".join(kinds)
