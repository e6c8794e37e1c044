"""What auto-complete adds to a model's config from the `.om` of a version directory.

Triton 2.51 calls `model.py`'s `auto_complete_config` for every version it loads, with the
model's config (empty when there is no `config.pbtxt`); `triton/autocomplete.py` hands it to
`complete_version`, as do `validate` and `inspect --config`, so all three show the same result.
Only what the config lacks is filled, and nothing the user wrote is changed:

* `max_batch_size`: the largest gear of a batched `.om`, when the config has 0 and does not
  declare full `.om` shapes (a config that does keeps 0: no Triton batching);
* `input` / `output`: every tensor of the `.om` the config lacks (name, `TYPE_*`, dims without
  the batch axis, -1 on dynamic axes), and the data type or dims of a declared one that has none;
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

from tritonclient.grpc import model_config_pb2

from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.repository.config import (
    DEFAULT_MAX_QUEUE_DELAY_US,
    ConfigError,
    ModelConfig,
    compare_config_with_session,
    config_data_type,
    served_dims,
    set_tensor_dims,
)
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.versions import find_om
from ge_python_backend.runtime.describe import ModelFileDescription, describe_om


@dataclasses.dataclass(frozen=True)
class Completion:
    """The outcome of `complete_version`: the `.om` read and what was added to the config."""

    om_path: Path
    description: ModelFileDescription
    filled: tuple[str, ...]  # for people: "max_batch_size 8", "input 'x' TYPE_FP32 [16]", ...


def complete_config(
    config: ModelConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    gears: GearInfo,
) -> list[str]:
    """Fill what `config` lacks from the `.om` description (see the module docstring), in place;
    return what was filled. ConfigError naming every field that disagrees with the `.om`."""
    filled: list[str] = []
    full_shapes = _declares_full_shapes(config, [*inputs, *outputs])
    if config.max_batch_size == 0 and gears.batched and not full_shapes:
        config.max_batch_size = gears.max_batch
        filled.append(f"max_batch_size {gears.max_batch}")
    batched = config.max_batch_size > 0
    for kind, declared, specs in (
        ("input", config.input, inputs),
        ("output", config.output, outputs),
    ):
        by_name = {str(tensor.name): tensor for tensor in declared}
        for spec in specs:
            tensor = by_name.get(spec.name)
            added = tensor is None
            if tensor is None:
                tensor = declared.add(name=spec.name)
            parts = []
            if tensor.data_type == model_config_pb2.TYPE_INVALID:
                tensor.data_type = config_data_type(spec.triton_dtype)
                parts.append(model_config_pb2.DataType.Name(tensor.data_type))
            if not tensor.dims:
                set_tensor_dims(tensor, spec.shape, batched)
                parts.append(str(served_dims(tensor)))
            if parts:
                what = "" if added else " (declared without " + _missing(parts) + ")"
                filled.append(f"{kind} {spec.name!r} {' '.join(parts)}{what}")
    if batched and config.WhichOneof("scheduling_choice") is None:
        preferred = [gear for gear in gears.batch_gears if gear <= config.max_batch_size]
        config.dynamic_batching.max_queue_delay_microseconds = DEFAULT_MAX_QUEUE_DELAY_US
        config.dynamic_batching.preferred_batch_size.extend(preferred)
        filled.append(
            f"dynamic_batching (preferred_batch_size {preferred}, max_queue_delay_microseconds "
            f"{DEFAULT_MAX_QUEUE_DELAY_US})"
        )
    problems = compare_config_with_session(config, inputs, outputs, gears)
    if problems:
        raise ConfigError("; ".join(problems))
    return filled


def complete_version(
    config: ModelConfig, version_dir: Path, runtime: str | None = None
) -> Completion:
    """Complete `config` in place from the `.om` of `version_dir` (read without a device).

    The `.om` is the `om_file` parameter's, else the only one in the directory; `runtime`
    (else the `acl_runtime` parameter; `$GE_PYTHON_BACKEND_ACL` overrides both) reads it.
    ConfigError for bad parameters, a directory without exactly one `.om`, or a config that
    disagrees with the `.om`; the runtime's errors when the `.om` cannot be read.
    """
    params = ModelParameters.from_config(config)
    om_path = find_om(version_dir, params.om_file)
    description = describe_om(om_path, runtime or params.acl_runtime, params.input_shape_order)
    try:
        filled = complete_config(config, description.inputs, description.outputs, description.gears)
    except ConfigError as exc:
        raise ConfigError(f"the config does not match {om_path.name}: {exc}") from None
    return Completion(om_path, description, tuple(filled))


def _declares_full_shapes(config: ModelConfig, specs: Sequence[TensorSpec]) -> bool:
    """Whether a declared tensor has as many dims as the `.om` shape, batch axis included."""
    ranks = {spec.name: len(spec.shape) for spec in specs}
    return any(
        len(tensor.dims) == ranks.get(str(tensor.name))
        for tensor in (*config.input, *config.output)
        if tensor.dims
    )


def _missing(parts: list[str]) -> str:
    kinds = ["data_type" if part.startswith("TYPE_") else "dims" for part in parts]
    return " and ".join(kinds)
