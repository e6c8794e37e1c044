"""The model settings of a served `.om`: the `config.pbtxt` parameters as a typed value.

Triton hands `model.py` the config's `parameters` map (every value a `string_value`).
`ModelParameters` is the one place that reads, checks and writes it: scaffold writes it with
`to_config`, and validate and the model instance read it with `from_config`, so every parameter
has one rule and one message (see docs/internals/design/triton-layer.md).

| parameter | value | when absent |
|---|---|---|
| `om_file` | the `.om` file name inside each version directory | the only `.om` there |
| `om_sha256` | the `.om` file's SHA-256, 64 hex characters (model-level) | `<file>.om.sha256` |
| `device_ids` | comma-separated NPU ids (C ints); instance k uses `device_ids[k % len]` | `0` |
| `acl_runtime` | `pyacl` or `emulator` | `$GE_PYTHON_BACKEND_ACL`, else the `.om`'s container |
| `pipeline_depth` | batches in flight per instance, `runtime.PIPELINE_DEPTHS` (1 or 2) | `2` |
| `execute_timeout_ms` | bound on each execution's wait (`Session`, a C int); 0 = none | `20000` |
| `pipeline_min_device_us` | depth 2 pipelines executions this long on the device (mean) | `1000` |
| `device_timing_period` | one execution in N per gear and batch is timed with ACL events | `16` |
| `input_shape_order` | dims models: the inputs in ATC's `--input_shape` order, `b,a` | found |
| `aipp_config` | dynamic-AIPP models: an ATC-syntax aipp.cfg in the version dir | refused |
| `max_output_bytes` | pooled buffer per output a dynamic-shape `.om` leaves unbounded | by ACL |
| `image_input` | the YUV420SP_U8 AIPP input that takes JPEG files (BYTES, one per row) | none |
| `image_resize` | `stretch` or `letterbox` (aspect kept, centred) | `stretch` |
| `image_fill` | letterbox bars: `Y,U,V` bytes, or a gray `G` (`G,128,128`) | `16,128,128` |
| `max_jpeg_bytes` | the largest JPEG file an image input takes | `4194304` (4 MiB) |
| `device_host` | `on`: the NPU's device host serves the model; the stub opens no device | `off` |
| `device_host_load_timeout_s` | seconds a stub waits for the device host to open it | `300` |

Other parameters are kept out of `ModelParameters` and left alone in the config (Triton's Python
backend reads a few of its own from the same map, e.g. `EXECUTION_ENV_PATH`). They are not an
error, but a misspelt name (`pipline_depth`) would silently fall back to the default, so
`unknown_parameters(config)` names them for the caller to report (`describe_unknown_parameter`
adds the parameter a name nearly spells): validate lists them as a note, the model instance logs
them as a warning in Triton's log at load. Numbers are bounded by pyACL's C int (`ACL_INT_MAX`).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ge_python_backend.repository.triton_config import ConfigError, TritonConfig
from ge_python_backend.runtime import (
    ACL_INT_MAX,
    DEVICE_TIMING_PERIOD,
    ENV_VAR,
    PIPELINE_DEPTHS,
    RUNTIMES,
)
from ge_python_backend.runtime.checksum import check_digest
from ge_python_backend.runtime.dvpp import (
    DEFAULT_FILL,
    DEFAULT_MAX_JPEG_BYTES,
    RESIZE_MODES,
    ImageInput,
)

if TYPE_CHECKING:  # the protobuf message (the stub never imports tritonclient)
    from tritonclient.grpc.model_config_pb2 import ModelConfig

# Parameters Triton's Python backend reads itself from a model's config: never warned about.
TRITON_PARAMETERS = ("EXECUTION_ENV_PATH", "FORCE_CPU_ONLY_INPUT_TENSORS")
_NUMBER = re.compile(r"[0-9]+")
# The longest device_host_load_timeout_s: a larger value is a typo.
MAX_LOAD_TIMEOUT_S = 86_400
# Far above any healthy execution, below the liveness probe's restart, the clients' own timeouts
# and the drain's exit timeout (docs/reference/parameter-details.md#execute_timeout_ms).
DEFAULT_EXECUTE_TIMEOUT_MS = 20_000
# Two batches in flight keep the device executing while the host prepares the next batch
# (BENCHMARKS.md, section 6, sets the device's busy share and the p50 at one client of depth 2
# against depth 1).
DEFAULT_PIPELINE_DEPTH = 2
# Depth 2 answers through response senders, which cost the Python backend more than responses
# returned from `execute` (BENCHMARKS.md, section 1, `floor_sender`). Pipelining hides at most
# one execution's device time, so shorter executions (mean over the last 100 ms) are answered
# inline.
DEFAULT_PIPELINE_MIN_DEVICE_US = 1000
# The largest output buffer max_output_bytes may ask for per output and lane (64 GiB, the HBM of
# the largest Ascend device): a larger value is a typo.
MAX_OUTPUT_BYTES = 64 << 30


def _shown(value: object) -> str:
    return "nothing" if value is None else repr(value)


def _whole_number(value: object) -> int | None:
    """`value` as an int in 0..`ACL_INT_MAX` if it is one (an int, or its decimal text), else
    None."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= ACL_INT_MAX:
        return value
    return None


def _bounded_whole(name: str, value: object, low: int, high: int, unit: str, meaning: str) -> int:
    """`value` as a whole number in `low`..`high`, else the ConfigError saying parameter `name`
    must be one (in `unit`, "" for none), what the number means, and what it got."""
    number = _whole_number(value)
    if number is None or not low <= number <= high:
        bounds = f"{low}..{high} {unit}".rstrip()
        raise ConfigError(
            f"parameter {name} must be {bounds} (a whole number; {meaning}), got {_shown(value)}"
        )
    return number


def _is_plain_file_name(value: str) -> bool:
    """A file name inside the version directory: no path, no surrounding blanks, not . or .."""
    return (
        value.strip() == value
        and value not in ("", ".", "..")
        and "/" not in value
        and "\\" not in value
    )


def parse_om_file(value: object) -> str | None:
    """None (the only `.om` of each version directory), or a plain file name."""
    if value is None:
        return None
    if not isinstance(value, str) or not _is_plain_file_name(value):
        raise ConfigError(
            "parameter om_file must name the .om file inside the version directory (a plain file "
            "name such as 'resnet.om'; or be left out: the only .om of each version directory), "
            f"got {_shown(value)}"
        )
    return value


def parse_aipp_config_file(value: object) -> str | None:
    """None (only dynamic-AIPP models need it), or the plain file name of an ATC-syntax
    aipp.cfg in each version directory (`aipp_config_path` finds it)."""
    if value is None:
        return None
    if not isinstance(value, str) or not _is_plain_file_name(value):
        raise ConfigError(
            "parameter aipp_config must name an ATC-syntax AIPP config file inside the version "
            "directory (a plain file name such as 'aipp.cfg', whose aipp_op blocks with "
            "aipp_mode: static fix the AIPP of a dynamic-AIPP model), got "
            f"{_shown(value)}"
        )
    return value


def parse_om_sha256(value: object) -> str | None:
    """None (not checked), or the SHA-256 in lower case."""
    if value is None:
        return None
    try:
        return check_digest(value)
    except ValueError:
        raise ConfigError(
            "parameter om_sha256 must be the .om file's SHA-256 as 64 hexadecimal characters "
            f"(or be left out to skip the check), got {_shown(value)}"
        ) from None


def parse_device_ids(value: object) -> tuple[int, ...]:
    """`"0,1"` or `(0, 1)` -> `(0, 1)`; at least one id, every id >= 0, no empty item."""
    items: list[object] = []
    if isinstance(value, str):
        items = list(value.split(","))
    elif isinstance(value, (tuple, list)):
        items = list(value)
    ids = [_whole_number(item) for item in items]
    if not ids or any(device is None for device in ids):
        raise ConfigError(
            f"parameter device_ids must be comma-separated NPU ids 0..{ACL_INT_MAX} such as '0' "
            f"or '0,1', got {_shown(value)}"
        )
    return tuple(device for device in ids if device is not None)


def parse_acl_runtime(value: object) -> str | None:
    """None (the runtime's default), or one of the runtimes."""
    if value is None:
        return None
    if isinstance(value, str) and value in RUNTIMES:
        return value
    raise ConfigError(
        f"parameter acl_runtime must be one of {', '.join(RUNTIMES)} (or be left out: "
        f"${ENV_VAR}, else the .om's container: emulator for an emulator .om, else pyacl), got "
        f"{_shown(value)}"
    )


def parse_pipeline_depth(value: object) -> int:
    """One of `PIPELINE_DEPTHS`."""
    depth = _whole_number(value)
    if depth not in PIPELINE_DEPTHS:
        raise ConfigError(
            "parameter pipeline_depth must be one of "
            f"{', '.join(map(str, PIPELINE_DEPTHS))}, got {_shown(value)}"
        )
    return depth


def parse_execute_timeout_ms(value: object) -> int:
    """Milliseconds 0..`ACL_INT_MAX` (pyACL's C int); 0 means no timeout."""
    return _bounded_whole("execute_timeout_ms", value, 0, ACL_INT_MAX, "ms", "0: no timeout")


def parse_pipeline_min_device_us(value: object) -> int | None:
    """None (the default, `DEFAULT_PIPELINE_MIN_DEVICE_US`) or microseconds 0..`ACL_INT_MAX`;
    0 pipelines every execution."""
    if value is None:
        return None
    return _bounded_whole(
        "pipeline_min_device_us",
        value,
        0,
        ACL_INT_MAX,
        "microseconds",
        "0: pipeline every execution",
    )


def parse_device_timing_period(value: object) -> int | None:
    """None (the default, `DEVICE_TIMING_PERIOD`) or 1..`ACL_INT_MAX`; 1 times every execution."""
    if value is None:
        return None
    return _bounded_whole(
        "device_timing_period",
        value,
        1,
        ACL_INT_MAX,
        "",
        "time one execution in that many of each gear and batch with ACL events; 1: every one",
    )


def parse_input_shape_order(value: object) -> tuple[str, ...] | None:
    """None (found from the gears), or `"b,a"` / `("b", "a")` -> `("b", "a")`: at least one
    name, none empty or repeated."""
    if value is None:
        return None
    items: list[object] = []
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
    elif isinstance(value, (tuple, list)):
        items = list(value)
    names = tuple(item for item in items if isinstance(item, str) and item)
    if not names or len(names) != len(items) or len(set(names)) != len(names):
        raise ConfigError(
            "parameter input_shape_order must be the model's input names in ATC's --input_shape "
            "order, comma-separated and each once, such as 'b,a' (or be left out: found from "
            f"the gears), got {_shown(value)}"
        )
    return names


def parse_max_output_bytes(value: object) -> int | None:
    """None (ACL allocates each output whose size the model leaves unbounded at every
    execution), or bytes in 1..MAX_OUTPUT_BYTES: the pooled buffer of each such output
    (data-dependent shapes)."""
    if value is None:
        return None
    return _bounded_whole(
        "max_output_bytes",
        value,
        1,
        MAX_OUTPUT_BYTES,
        "bytes",
        "the buffer of each output whose shape depends on the data",
    )


def parse_image_input(value: object) -> str | None:
    """None (no image input), or the name of the input that takes JPEG files."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or value.strip() != value:
        raise ConfigError(
            "parameter image_input must name the model's YUV420SP_U8 AIPP input that takes "
            f"JPEG files (such as 'image'), got {_shown(value)}"
        )
    return value


def parse_image_resize(value: object) -> str | None:
    """None (`stretch`), or one of `RESIZE_MODES`."""
    if value is None or value in RESIZE_MODES:
        return None if value is None else str(value)
    raise ConfigError(
        f"parameter image_resize must be one of {', '.join(RESIZE_MODES)} (stretch: resized to "
        "the input's size; letterbox: aspect kept, centred, the rest image_fill), got "
        f"{_shown(value)}"
    )


def parse_image_fill(value: object) -> tuple[int, int, int] | None:
    """None (`DEFAULT_FILL`), `"Y,U,V"` / a 3-tuple of bytes, or one gray value `"G"` (Y G,
    U and V 128)."""
    if value is None:
        return None
    items: list[object] = []
    if isinstance(value, str):
        items = [item.strip() for item in value.split(",")]
    elif isinstance(value, (tuple, list)):
        items = list(value)
    numbers = [_whole_number(item) for item in items]
    if len(numbers) == 1 and numbers[0] is not None:
        numbers = [numbers[0], 128, 128]
    if len(numbers) != 3 or any(n is None or n > 255 for n in numbers):
        raise ConfigError(
            "parameter image_fill must be the letterbox fill as Y,U,V bytes 0..255 such as "
            f"'16,128,128' (black), or one gray value such as '128', got {_shown(value)}"
        )
    y, u, v = (int(n or 0) for n in numbers)
    return (y, u, v)


def parse_max_jpeg_bytes(value: object) -> int | None:
    """None (`DEFAULT_MAX_JPEG_BYTES`), or bytes 1..`ACL_INT_MAX`."""
    if value is None:
        return None
    return _bounded_whole(
        "max_jpeg_bytes",
        value,
        1,
        ACL_INT_MAX,
        "bytes",
        "the largest JPEG file an image input takes",
    )


def parse_device_host(value: object) -> bool | None:
    """None (off: the stub opens the device), or `on`/`off` (a bool is taken as it is)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("on", "off"):
        return value.strip().lower() == "on"
    raise ConfigError(
        "parameter device_host must be 'on' (the device host of the NPU serves the model: one "
        "process opens the device for every model placed on it) or 'off' (each instance's stub "
        f"opens the device itself; the default), got {_shown(value)}"
    )


def parse_device_host_load_timeout_s(value: object) -> int | None:
    """None (the device host client's `DEFAULT_LOAD_TIMEOUT_S`), or seconds
    1..`MAX_LOAD_TIMEOUT_S`."""
    if value is None:
        return None
    return _bounded_whole(
        "device_host_load_timeout_s",
        value,
        1,
        MAX_LOAD_TIMEOUT_S,
        "s",
        "how long a stub waits for the device host to take its connection and open the model",
    )


# The one parser of each parameter: it takes the config text or the typed value alike.
_PARSERS: dict[str, Callable[[object], Any]] = {
    "om_file": parse_om_file,
    "om_sha256": parse_om_sha256,
    "device_ids": parse_device_ids,
    "acl_runtime": parse_acl_runtime,
    "pipeline_depth": parse_pipeline_depth,
    "execute_timeout_ms": parse_execute_timeout_ms,
    "pipeline_min_device_us": parse_pipeline_min_device_us,
    "device_timing_period": parse_device_timing_period,
    "input_shape_order": parse_input_shape_order,
    "aipp_config": parse_aipp_config_file,
    "max_output_bytes": parse_max_output_bytes,
    "image_input": parse_image_input,
    "image_resize": parse_image_resize,
    "image_fill": parse_image_fill,
    "max_jpeg_bytes": parse_max_jpeg_bytes,
    "device_host": parse_device_host,
    "device_host_load_timeout_s": parse_device_host_load_timeout_s,
}
# Parameters that mean something only with image_input.
IMAGE_OPTIONS = ("image_resize", "image_fill", "max_jpeg_bytes")
PARAMETER_NAMES = tuple(_PARSERS)


def instance_index(instance_name: str) -> int:
    """Index of an instance within its group: Triton names instances `<group>_<index>`."""
    suffix = instance_name.rsplit("_", 1)[-1]
    if not suffix.isdigit():
        raise ValueError(
            f"cannot read an instance index from model_instance_name {instance_name!r}"
        )
    return int(suffix)


def unknown_parameters(config: TritonConfig) -> list[str]:
    """The config's parameters that are neither ours nor Triton's Python backend's."""
    known = (*PARAMETER_NAMES, *TRITON_PARAMETERS)
    return sorted(name for name in config.parameters if name not in known)


def describe_unknown_parameter(name: str) -> str:
    """`name` quoted, with the parameter it nearly spells: `'pipeline_dept' (did you mean
    'pipeline_depth'?)`."""
    close = difflib.get_close_matches(name, (*PARAMETER_NAMES, *TRITON_PARAMETERS), n=1)
    return f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)


@dataclasses.dataclass(frozen=True)
class ModelParameters:
    """The settings of a served `.om` (see the module docstring); checked on construction.

    Each field also takes its `config.pbtxt` text (`device_ids="0,1"`), so
    `ModelParameters(**strings)` and `from_config` apply the same rules.
    """

    om_file: str | None = None
    om_sha256: str | None = None
    device_ids: tuple[int, ...] = (0,)
    acl_runtime: str | None = None
    pipeline_depth: int = DEFAULT_PIPELINE_DEPTH
    execute_timeout_ms: int = DEFAULT_EXECUTE_TIMEOUT_MS
    input_shape_order: tuple[str, ...] | None = None
    pipeline_min_device_us: int | None = None
    device_timing_period: int | None = None
    aipp_config: str | None = None
    max_output_bytes: int | None = None
    image_input: str | None = None
    image_resize: str | None = None
    image_fill: tuple[int, int, int] | None = None
    max_jpeg_bytes: int | None = None
    device_host: bool | None = None  # None: off
    device_host_load_timeout_s: int | None = None

    def __post_init__(self) -> None:
        problems = []
        for name, parse in _PARSERS.items():
            try:
                object.__setattr__(self, name, parse(getattr(self, name)))
            except ConfigError as exc:
                problems.append(str(exc))
        orphans = [name for name in IMAGE_OPTIONS if getattr(self, name) is not None]
        if orphans and self.image_input is None:
            problems.append(
                f"parameter(s) {', '.join(orphans)} need image_input (the input they apply to)"
            )
        if problems:
            raise ConfigError("; ".join(problems))

    @classmethod
    def from_config(cls, config: TritonConfig) -> ModelParameters:
        """The parameters of `config` (others are ignored: `unknown_parameters`; a missing one
        takes its default); ConfigError naming every bad one."""
        given: dict[str, Any] = {
            name: config.parameters[name] for name in PARAMETER_NAMES if name in config.parameters
        }
        return cls(**given)

    def to_config(self, config: ModelConfig) -> None:
        """Write the parameters into the protobuf `config` (a None field removes its key)."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                if field.name in config.parameters:
                    del config.parameters[field.name]
            elif isinstance(value, bool):  # device_host
                config.parameters[field.name].string_value = "on" if value else "off"
            elif isinstance(value, tuple):  # device_ids, input_shape_order
                config.parameters[field.name].string_value = ",".join(map(str, value))
            else:
                config.parameters[field.name].string_value = str(value)

    @property
    def pipeline_min_device_s(self) -> float:
        """Seconds: at depth 2, executions shorter on average on the device are answered
        inline (`pipeline_min_device_us`, else its default)."""
        given = self.pipeline_min_device_us
        return (DEFAULT_PIPELINE_MIN_DEVICE_US if given is None else given) / 1e6

    @property
    def effective_device_timing_period(self) -> int:
        """One execution in this many of each gear and batch is timed with ACL events."""
        given = self.device_timing_period
        return DEVICE_TIMING_PERIOD if given is None else given

    @property
    def image(self) -> ImageInput | None:
        """The image input with its settings (None without `image_input`)."""
        if self.image_input is None:
            return None
        return ImageInput(
            self.image_input,
            self.image_resize or RESIZE_MODES[0],
            self.image_fill or DEFAULT_FILL,
            self.max_jpeg_bytes or DEFAULT_MAX_JPEG_BYTES,
        )

    @property
    def in_device_host(self) -> bool:
        """Whether the device host serves the model (`device_host` on)."""
        return bool(self.device_host)

    def aipp_config_path(self, version_dir: Path) -> Path | None:
        """The `aipp_config` file of a version (None without the parameter)."""
        return None if self.aipp_config is None else version_dir / self.aipp_config

    def device_for_instance(self, instance_name: str) -> int:
        """The NPU of a model instance: instance k of a group uses `device_ids[k % len]`.

        Triton passes device id 0 for KIND_CPU instances, so NPU ids come from the parameters;
        `instance_name` is Triton's `model_instance_name` (`<group>_<k>`).
        """
        return self.device_ids[instance_index(instance_name) % len(self.device_ids)]

    def instances_per_device(self, group_counts: Sequence[int]) -> dict[int, int]:
        """Device id -> instances on it, for instance groups of `group_counts` instances (each
        group's instance k on `device_ids[k % len]`, as `device_for_instance` places it)."""
        placed: dict[int, int] = {}
        for count in group_counts:
            for index in range(count):
                device = self.device_ids[index % len(self.device_ids)]
                placed[device] = placed.get(device, 0) + 1
        return placed
