"""`config.pbtxt` for a served `.om`: built, read and checked with Triton's own protobuf schema.

The config is a `tritonclient.grpc.model_config_pb2.ModelConfig` message, written and parsed with
`google.protobuf.text_format`; no text is ever assembled by hand. The model settings live in
`parameters` (all `string_value`), read and written only through
`repository.parameters.ModelParameters` (see docs/internals/design/triton-layer.md). The checks and
auto-complete run on `triton_config.TritonConfig`, the record the stub reads Triton's JSON into:
`config_view` and `config_from_view` go between the two through protobuf's JSON mapping.
This module is for the tools; the stub never imports it (it imports protobuf).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import GearKind
from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.triton_config import (
    DEFAULT_MAX_QUEUE_DELAY_US,
    ConfigError,
    ConfigTensor,
    TritonConfig,
    config_type_name,
    default_preferred_batch_sizes,
    image_format,
    model_dims,
    on_every_input,
)

# Warmup feeds random data to floating-point inputs and zeros to the others (token ids,
# masks and indices, where random values would be out of range).
RANDOM_WARMUP_DTYPES = ("FP16", "FP32", "FP64", "BF16")
# Characters a shell interprets in an unquoted word. Triton 2.51's Python backend starts every stub
# with `bash -c "exec <stub> <repository>/<model>/<version>/model.py ..."`, paths unquoted, so
# model names and repository paths must not contain any of them.
SHELL_UNSAFE_CHARACTERS = frozenset(" \t\n\r|&;()<>\\'\"$`*?[]#~{}!")


def shell_unsafe_characters(text: str) -> str:
    """The characters of `text` a shell would interpret (control characters included), in order."""
    found = dict.fromkeys(c for c in text if c in SHELL_UNSAFE_CHARACTERS or ord(c) < 32)
    return "".join(found)


def check_shell_safe_path(what: str, path: str | os.PathLike[str]) -> None:
    """Refuse (ConfigError) a path Triton's Python backend would hand to a shell unquoted."""
    unsafe = shell_unsafe_characters(os.fspath(path))
    if unsafe:
        raise ConfigError(
            f"{what} {os.fspath(path)!r} contains {unsafe!r}: Triton's Python backend starts "
            "each model through a shell command line holding this path, unquoted, where these "
            "characters would be interpreted; rename or move it"
        )


def check_model_directory_names(repository: str | os.PathLike[str]) -> None:
    """Refuse (ConfigError) a repository holding a model directory whose name a shell would
    interpret (`check_shell_safe_path`), wherever the repository itself is mounted."""
    for path in sorted(Path(repository).iterdir()):
        if path.is_dir():
            check_shell_safe_path("model directory", path.name)


def config_data_type(triton_dtype: str) -> int:
    """`"FP32"` -> `TYPE_FP32` (the enum value; `triton_config.config_type_name` has the rules)."""
    return int(model_config_pb2.DataType.Value(config_type_name(triton_dtype)))


def check_model_name(name: str) -> str:
    """Return `name` if it is a safe model directory name; refuse anything that could escape."""
    if not name or name.strip() != name:
        raise ConfigError(f"model name {name!r} must be non-empty without surrounding spaces")
    separators = {"/", "\\", os.sep, os.altsep or "/"}
    if any(sep in name for sep in separators) or name.startswith("."):
        raise ConfigError(
            f"model name {name!r} must be a plain directory name (no path separators, "
            "no leading dot, not '..')"
        )
    if any(ord(char) < 32 for char in name):
        raise ConfigError(f"model name {name!r} contains control characters")
    unsafe = shell_unsafe_characters(name)
    if unsafe:
        raise ConfigError(
            f"model name {name!r} contains {unsafe!r}: Triton's Python backend starts the model "
            "through a shell command line holding its path, where these characters would be "
            "interpreted; use letters, digits, '_', '-' and '.'"
        )
    return name


def set_tensor_dims(tensor: Any, shape: Sequence[int], batched: bool) -> None:
    """Write a protobuf config input's or output's dims for a tensor of `.om` shape `shape`, by
    the rule of `ConfigTensor.with_om_shape` (scalars: `[1]`, with `reshape { shape: [] }` when
    batched)."""
    entry = ConfigTensor(tensor.name).with_om_shape(shape, batched)
    tensor.dims.extend(entry.dims)
    if entry.reshape is not None:
        tensor.reshape.SetInParent()
        tensor.reshape.shape.extend(entry.reshape)


def first_gear_shapes(inputs: Sequence[TensorSpec], gears: GearInfo) -> list[list[int]]:
    """Full shapes of every input for the model's first gear (a static model's own shapes):
    axis 0 is the first batch gear, the last two free axes the first HW gear, or the first dims
    gear's shapes; -1 stays on any other dynamic axis."""
    if gears.kind == GearKind.DIMS and gears.dims_gears:
        return [list(shape) for shape in gears.dims_gears[0]]
    shapes = [list(spec.shape) for spec in inputs]
    for shape in shapes:
        if gears.kind == GearKind.BATCH and gears.batch_gears and shape and shape[0] < 0:
            shape[0] = gears.batch_gears[0]
        if gears.kind == GearKind.HW and gears.hw_gears:
            free = [axis for axis, dim in enumerate(shape) if dim < 0 and axis > 0]
            for axis, value in zip(free[-2:], gears.hw_gears[0]):
                shape[axis] = value
    return shapes


def build_model_config(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    gears: GearInfo,
    parameters: ModelParameters,
    *,
    instances: int,
    max_batch_size: int | None = None,
    max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US,
    max_queue_size: int = 0,
    queue_timeout_us: int = 0,
    warmup: bool = True,
) -> ModelConfig:
    """The Triton config serving an `.om` through `model.py` with `parameters`.

    An image input (NCHW or NHWC in the `.om`) gets its `format` (`image_format`).
    A batched `.om` gets `max_batch_size` = its largest gear (or `max_batch_size` when given: the
    runtime splits larger batches into gear chunks), dynamic batching that prefers the gears and
    one warmup per gear (gears above `max_batch_size` are left out); a model without a batch
    axis, or with side inputs that lack it, gets `max_batch_size: 0` (full shapes, -1 on the
    batch axis) and one warmup. HW/dims models warm up on their first gear.
    `max_queue_size` and `queue_timeout_us` (0: no limit) shed load: the dynamic batcher's
    `default_queue_policy` refuses (REJECT) requests beyond that many waiting, or waiting longer.
    """
    check_model_name(name)
    if instances < 1:
        raise ConfigError(f"instances must be >= 1, got {instances}")
    if max_queue_delay_us < 0:
        raise ConfigError(f"max_queue_delay_us must be >= 0, got {max_queue_delay_us}")
    if max_queue_size < 0 or queue_timeout_us < 0:
        raise ConfigError(
            f"max_queue_size and queue_timeout_us must be >= 0 (0: no limit), got "
            f"{max_queue_size} and {queue_timeout_us}"
        )
    if gears.every_input_batched:
        batch = gears.max_batch if max_batch_size is None else max_batch_size
        if batch < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {batch}")
    elif max_batch_size:
        raise ConfigError(
            f"max_batch_size {max_batch_size} needs a batched model, but axis 0 of this model's "
            f"inputs and outputs is not a batch axis {on_every_input(gears)}".rstrip()
        )
    else:
        batch = 0
    if (max_queue_size or queue_timeout_us) and not batch:
        raise ConfigError(
            "max_queue_size and queue_timeout_us limit the dynamic batcher's queue, which only a "
            "batched model has (axis 0 of this model's inputs and outputs is not a batch axis)"
        )

    config = model_config_pb2.ModelConfig(name=name, backend="python", max_batch_size=batch)
    for spec in inputs:
        tensor = config.input.add(name=spec.name, data_type=config_data_type(spec.triton_dtype))
        set_tensor_dims(tensor, spec.shape, batch > 0)
        tensor.format = model_config_pb2.ModelInput.Format.Value(image_format(spec, tensor.dims))
    for spec in outputs:
        tensor = config.output.add(name=spec.name, data_type=config_data_type(spec.triton_dtype))
        set_tensor_dims(tensor, spec.shape, batch > 0)
    config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU, count=instances)
    served_gears = [gear for gear in gears.batch_gears if gear <= batch]
    if batch:
        config.dynamic_batching.max_queue_delay_microseconds = max_queue_delay_us
        if max_queue_size or queue_timeout_us:
            policy = config.dynamic_batching.default_queue_policy
            policy.timeout_action = model_config_pb2.ModelQueuePolicy.REJECT
            policy.default_timeout_microseconds = queue_timeout_us
            policy.max_queue_size = max_queue_size
        config.dynamic_batching.preferred_batch_size.extend(
            default_preferred_batch_sizes(served_gears, batch)
        )
    parameters.to_config(config)
    shapes = first_gear_shapes(inputs, gears)
    # a shape-range input has -1 left: no one shape is known to be valid, so no warmup
    if warmup and all(dim >= 0 for shape in shapes for dim in shape):
        for size in served_gears if batch else [1]:
            entry = config.model_warmup.add(name=f"warmup_batch_{size}", batch_size=size)
            for spec, shape in zip(inputs, shapes):
                entry.inputs[spec.name].data_type = config_data_type(spec.triton_dtype)
                entry.inputs[spec.name].dims.extend(model_dims(shape, batch > 0))
                if spec.triton_dtype in RANDOM_WARMUP_DTYPES:
                    entry.inputs[spec.name].random_data = True
                else:  # ids, masks, indices: zeros are always in range
                    entry.inputs[spec.name].zero_data = True
    return config


def read_labels(path: str | os.PathLike[str]) -> list[str]:
    """The labels of a label file, one a line as Triton reads them; ConfigError for a file that
    cannot be read or holds none."""
    source = Path(path)
    try:
        labels = source.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read label file {source}: {exc}") from None
    if not labels:
        raise ConfigError(f"label file {source} holds no label (one label a line)")
    return labels


def set_label_file(config: ModelConfig, file_name: str, classes: int) -> str:
    """Name `file_name` (a file in the model directory) as the `label_filename` of the
    classifier output: the one output with `classes` values a batch row (Triton's classification
    extension then answers `class_count` requests with `score:index:label`). The output's name;
    ConfigError naming every output's count when none or several have `classes`."""
    counts = {}
    for output in config.output:
        # what Triton ranks: the values of a batch row (of the whole tensor without batching)
        dims = list(output.reshape.shape if output.HasField("reshape") else output.dims)
        counts[output.name] = math.prod(dims) if all(d > 0 for d in dims) else -1
    matching = [output for output in config.output if counts[output.name] == classes]
    if len(matching) != 1:
        shown = ", ".join(
            f"{name} {count if count >= 0 else 'a dynamic count of'} values"
            for name, count in counts.items()
        )
        raise ConfigError(
            f"the label file has {classes} labels, and "
            f"{f'{len(matching)} outputs' if matching else 'no output'} of the model have as many "
            f"values a row ({shown}); one classifier output needs one label per value"
        )
    matching[0].label_filename = file_name
    return matching[0].name


def parse_version_policy(text: str) -> model_config_pb2.ModelVersionPolicy:
    """`latest:K`, `all` or `specific:1,3` as Triton's `version_policy` (the versions served)."""
    kind, _, values = text.partition(":")
    policy = model_config_pb2.ModelVersionPolicy()
    try:
        numbers = [int(value) for value in values.split(",")] if values else []
    except ValueError:
        numbers = []
    if kind == "all" and not values:
        policy.all.SetInParent()
    elif kind == "latest" and len(numbers) == 1 and numbers[0] >= 1:
        policy.latest.num_versions = numbers[0]
    elif kind == "specific" and numbers and min(numbers) >= 1:
        policy.specific.versions.extend(numbers)
    else:
        raise ConfigError(
            f"version policy must be latest:K (the K highest versions), all, or specific:1,3 "
            f"(those versions), versions and K >= 1; got {text!r}"
        )
    return policy


def config_text(config: ModelConfig) -> str:
    """The `config.pbtxt` text of a config."""
    return str(text_format.MessageToString(config))


def write_model_config(config: ModelConfig, path: str | os.PathLike[str]) -> Path:
    """Write `config` as text protobuf to `path` (usually `<repository>/<name>/config.pbtxt`)."""
    target = Path(path)
    target.write_text(config_text(config), encoding="utf-8")
    return target


def load_model_config(path: str | os.PathLike[str]) -> ModelConfig:
    """Parse a `config.pbtxt`; a missing file or bad syntax raises `ConfigError` naming it."""
    source = Path(path)
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read {source}: {exc.strerror or exc}") from None
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigError(f"{source}: not a valid Triton model config: {exc}") from None


def config_view(config: ModelConfig) -> TritonConfig:
    """The record of `config` the checks and auto-complete read (as the stub reads Triton's)."""
    return TritonConfig.from_dict(
        json_format.MessageToDict(config, preserving_proto_field_name=True)
    )


def config_from_view(view: TritonConfig) -> ModelConfig:
    """The `ModelConfig` of a record (e.g. a completed one), every field of it kept."""
    return json_format.ParseDict(view.to_dict(), ModelConfig(), ignore_unknown_fields=True)
