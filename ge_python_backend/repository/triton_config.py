"""A model config as Triton hands it to `model.py`: JSON, read into one typed, stdlib-only record.

Inside the Python-backend stub the config arrives as JSON: `args["model_config"]` in
`initialize` and `as_dict()` of the auto-complete object. `TritonConfig.from_dict` reads the fields
this package uses (name, `max_batch_size`, inputs and outputs, `parameters`, the scheduler and
dynamic batching); the rest is kept as given so `to_dict` hands it back whole. The stub never
imports protobuf: the tools build and parse `config.pbtxt` with Triton's protobuf schema
(`repository.config`) and go through this record with `config.config_view` and
`config.config_from_view` (protobuf's JSON mapping), so both sides run the same checks.

Triton writes 64-bit integers as JSON numbers, protobuf's JSON mapping as strings, and field
names as in model_config.proto (`max_batch_size`), protobuf's mapping by default in lowerCamelCase
(`maxBatchSize`): all are read.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ge_python_backend.errors import UserError

if TYPE_CHECKING:
    from ge_python_backend.modelinfo import GearInfo, TensorSpec

# Triton's `DataType` enum (model_config.proto), in its order: index = enum value.
DATA_TYPES = (
    "TYPE_INVALID",
    "TYPE_BOOL",
    "TYPE_UINT8",
    "TYPE_UINT16",
    "TYPE_UINT32",
    "TYPE_UINT64",
    "TYPE_INT8",
    "TYPE_INT16",
    "TYPE_INT32",
    "TYPE_INT64",
    "TYPE_FP16",
    "TYPE_FP32",
    "TYPE_FP64",
    "TYPE_STRING",
    "TYPE_BF16",
)
# Triton's `ModelInput.Format` enum (model_config.proto), in its order: index = enum value.
INPUT_FORMATS = ("FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW")
# How long the dynamic batcher waits to fill a batch, unless configured (scaffold, auto-complete).
DEFAULT_MAX_QUEUE_DELAY_US = 100
# The members of the config's `scheduling_choice` oneof.
SCHEDULERS = ("dynamic_batching", "sequence_batching", "ensemble_scheduling")


def default_preferred_batch_sizes(batch_gears: Sequence[int], max_batch_size: int) -> list[int]:
    """The preferred batch sizes scaffold and auto-complete write: every gear up to
    `max_batch_size`, the smallest included (docs/reference/batching-defaults.md: waiting longer
    without it was no faster when re-measured)."""
    return [gear for gear in batch_gears if gear <= max_batch_size]


class ConfigError(UserError, ValueError):
    """A model configuration that cannot be built, parsed or does not fit the `.om`."""


def _snake(data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with lowerCamelCase keys (protobuf's default JSON names) as model_config.proto's."""
    return {re.sub(r"[A-Z]", lambda m: "_" + m.group().lower(), key): v for key, v in data.items()}


def config_type_name(triton_dtype: str) -> str:
    """`"FP32"` -> `"TYPE_FP32"`; the protocol's `BYTES` is `TYPE_STRING` in a model config."""
    name = "TYPE_" + ("STRING" if triton_dtype == "BYTES" else triton_dtype)
    if name not in DATA_TYPES[1:]:
        raise ConfigError(f"unknown Triton data type {triton_dtype!r}")
    return name


def model_dims(shape: Sequence[int], batched: bool) -> list[int]:
    """Config dims of a tensor: its `.om` shape without axis 0 when that is the batch axis."""
    return list(shape[1:] if batched else shape)


def image_format(spec: TensorSpec, dims: Sequence[int]) -> str:
    """The `format` of a config input with `dims` serving `.om` input `spec`: `FORMAT_NCHW` or
    `FORMAT_NHWC` when the `.om` records that layout for it and the config gives it 3 dims (the
    image without the batch axis: Triton refuses a format on any other rank), else
    `FORMAT_NONE`. Triton's image clients (`image_client.py`) read the layout from it."""
    if spec.format in ("NCHW", "NHWC") and len(dims) == 3:
        return f"FORMAT_{spec.format}"
    return "FORMAT_NONE"


def _enum_name(names: Sequence[str], value: Any, what: str, tensor: Any) -> str:
    """An enum field as its name (`value` given by name or, as protobuf may, by number)."""
    if isinstance(value, int):
        value = names[value] if 0 <= value < len(names) else ""
    if value not in names:
        raise ConfigError(f"tensor {tensor!r}: unknown {what} {value!r}")
    return str(value)


@dataclasses.dataclass(frozen=True)
class ConfigTensor:
    """One `input` or `output` entry; `data_type` is `TYPE_INVALID` and `dims` empty when the
    config does not give them; `reshape` is the `reshape { shape }` it gives, if any; `format`
    an input's image layout (`FORMAT_NONE`: none given)."""

    name: str
    data_type: str = "TYPE_INVALID"
    dims: tuple[int, ...] = ()
    reshape: tuple[int, ...] | None = None
    format: str = "FORMAT_NONE"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ConfigTensor:
        data = _snake(data)
        name = data.get("name")
        data_type = _enum_name(DATA_TYPES, data.get("data_type", DATA_TYPES[0]), "data_type", name)
        layout = _enum_name(INPUT_FORMATS, data.get("format", INPUT_FORMATS[0]), "format", name)
        dims = tuple(int(dim) for dim in data.get("dims", ()))
        given = data.get("reshape")
        reshape = None if given is None else tuple(int(dim) for dim in given.get("shape", ()))
        return cls(str(data.get("name", "")), data_type, dims, reshape, layout)

    def to_dict(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "data_type": self.data_type,
            "dims": list(self.dims),
        }
        if self.reshape is not None:
            entry["reshape"] = {"shape": list(self.reshape)}
        if self.format != INPUT_FORMATS[0]:
            entry["format"] = self.format
        return entry

    def with_om_shape(self, shape: Sequence[int], batched: bool) -> ConfigTensor:
        """This entry with the dims of an `.om` tensor of `shape`. Triton refuses empty dims: a
        batched `[N]` tensor is `dims: [1]` with `reshape { shape: [] }`; a scalar of a model
        without batching, which Triton cannot reshape to [], is served as [1]
        (`triton.requests.build_response`)."""
        dims = model_dims(shape, batched)
        reshape = () if not dims and batched else None
        return dataclasses.replace(self, dims=tuple(dims or [1]), reshape=reshape)

    @property
    def served_dims(self) -> list[int]:
        """The dims the entry gives the backend: its `reshape` shape when it has one."""
        return list(self.dims if self.reshape is None else self.reshape)


@dataclasses.dataclass(frozen=True)
class DynamicBatching:
    """The dynamic batcher's sizes this package sets and reads."""

    preferred_batch_size: tuple[int, ...] = ()
    max_queue_delay_microseconds: int = 0


@dataclasses.dataclass(frozen=True)
class TritonConfig:
    """The fields of a model config this package reads; `extra` holds every other field as given
    (the schedulers' entries included: `dynamic_batching` is their typed view)."""

    name: str = ""
    backend: str = ""
    max_batch_size: int = 0
    inputs: tuple[ConfigTensor, ...] = ()
    outputs: tuple[ConfigTensor, ...] = ()
    parameters: Mapping[str, str] = dataclasses.field(default_factory=dict)
    dynamic_batching: DynamicBatching | None = None
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, text: str) -> TritonConfig:
        """`args["model_config"]` as a record; ConfigError when it is not a JSON object."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"the model config is not JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TritonConfig:
        """A config in Triton's (or protobuf's) JSON form, field names as in model_config.proto."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"the model config must be a JSON object, got {type(data).__name__}")
        data = _snake(data)
        batching = data.get("dynamic_batching")
        if batching is not None:
            batching = data["dynamic_batching"] = _snake(batching)
        return cls(
            name=str(data.get("name", "")),
            backend=str(data.get("backend", "")),
            max_batch_size=int(data.get("max_batch_size", 0)),
            inputs=tuple(ConfigTensor.from_dict(item) for item in data.get("input", ())),
            outputs=tuple(ConfigTensor.from_dict(item) for item in data.get("output", ())),
            parameters={
                str(key): str(_snake(value).get("string_value", ""))
                for key, value in (data.get("parameters") or {}).items()
            },
            dynamic_batching=None
            if batching is None
            else DynamicBatching(
                tuple(int(size) for size in batching.get("preferred_batch_size", ())),
                int(batching.get("max_queue_delay_microseconds", 0)),
            ),
            extra={key: value for key, value in data.items() if key not in _TYPED_FIELDS},
        )

    @property
    def scheduler(self) -> str | None:
        """The `scheduling_choice` the config gives (one of SCHEDULERS), or None."""
        if self.dynamic_batching is not None:
            return "dynamic_batching"
        return next((name for name in SCHEDULERS if name in self.extra), None)

    def to_dict(self) -> dict[str, Any]:
        """The config in JSON form: the typed fields over the others, as `from_dict` reads it."""
        data: dict[str, Any] = json.loads(json.dumps(dict(self.extra)))
        data.update(name=self.name, backend=self.backend, max_batch_size=self.max_batch_size)
        data["input"] = [tensor.to_dict() for tensor in self.inputs]
        data["output"] = [tensor.to_dict() for tensor in self.outputs]
        data["parameters"] = {
            key: {"string_value": value} for key, value in self.parameters.items()
        }
        if self.dynamic_batching is not None:
            batching = data.setdefault("dynamic_batching", {})
            batching["preferred_batch_size"] = list(self.dynamic_batching.preferred_batch_size)
            batching["max_queue_delay_microseconds"] = (
                self.dynamic_batching.max_queue_delay_microseconds
            )
        return data


_TYPED_FIELDS = frozenset({"name", "backend", "max_batch_size", "input", "output", "parameters"})


def _dims_conflict(config_dims: Sequence[int], om_dims: Sequence[int]) -> bool:
    """Different rank, or an axis fixed on both sides to different sizes (-1 fits anything)."""
    if len(config_dims) != len(om_dims):
        return True
    return any(a >= 0 and b >= 0 and a != b for a, b in zip(config_dims, om_dims))


def _compare_tensors(
    kind: str, declared: Sequence[ConfigTensor], specs: Sequence[TensorSpec], batched: bool
) -> list[str]:
    """Problems between the config's `input`/`output` entries and the `.om` tensors."""
    problems: list[str] = []
    by_name = {spec.name: spec for spec in specs}
    seen: set[str] = set()
    for tensor in declared:
        name = tensor.name
        seen.add(name)
        spec = by_name.get(name)
        if spec is None:
            problems.append(
                f"config {kind} {name!r} is not an {kind} of the .om (it has: "
                f"{', '.join(by_name) or 'none'})"
            )
            continue
        expected_type = config_type_name(spec.triton_dtype)
        if tensor.data_type != expected_type:
            problems.append(
                f"{kind} {name!r}: config data_type {tensor.data_type} "
                f"but the .om has {expected_type}"
            )
        dims = tensor.served_dims
        expected = model_dims(spec.shape, batched)
        if not expected and tensor.reshape is None:
            expected = [1]  # a scalar of a model without batching is served as [1]
        if _dims_conflict(dims, expected):
            problems.append(f"{kind} {name!r}: config dims {dims} but the .om needs {expected}")
        layout = image_format(spec, tensor.dims)
        if "FORMAT_NONE" not in (tensor.format, layout) and tensor.format != layout:
            problems.append(
                f"{kind} {name!r}: config format {tensor.format} but the .om's input is {layout}"
            )
    for name in by_name:
        if name not in seen:
            problems.append(f"the .om {kind} {name!r} is missing from the config")
    return problems


def on_every_input(gears: GearInfo) -> str:
    """For messages: why a batched model still needs `max_batch_size: 0` (or nothing)."""
    if not gears.side_inputs:
        return ""
    return (
        f"on every input (side inputs {', '.join(gears.side_inputs)} have none, and Triton's "
        "batch dimension applies to every input) "
    )


def compare_config_with_session(
    config: TritonConfig,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    gears: GearInfo,
) -> list[str]:
    """What in `config` does not fit the `.om` description; empty when they agree.

    `max_batch_size > 0` needs a batched `.om` and dims without axis 0; `max_batch_size: 0`
    takes the full `.om` shapes. A -1 on either side fits any size.
    """
    problems: list[str] = []
    batched = config.max_batch_size > 0
    if batched and not gears.every_input_batched:
        problems.append(
            f"config max_batch_size is {config.max_batch_size} but the .om has no batch axis "
            f"{on_every_input(gears)}(use max_batch_size: 0 and full shapes)"
        )
        return problems
    problems += _compare_tensors("input", config.inputs, inputs, batched)
    problems += _compare_tensors("output", config.outputs, outputs, batched)
    return problems
