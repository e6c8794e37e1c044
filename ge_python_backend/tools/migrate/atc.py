"""The ATC command of one model version, from its Triton config and its ONNX graph.

`plan_atc` gives an `AtcPlan`: the flags ATC takes (`--model --framework=5 --output
--soc_version --input_shape`, the gears, `--precision_mode`), as a shell command
(`AtcPlan.command`) and as the emulator's compiler call (`AtcPlan.compile_emulator`); with
`--runtime pyacl` it runs the real `atc` (`AtcPlan.run_atc`).

Input shapes: graph input names; on the batch axis (axis 0 when `max_batch_size` > 0) -1 with
`--dynamic_batch_size` from `max_batch_size` and `preferred_batch_size`; every other axis the
config's dims, else the graph's, else the gears `--gears NAME:SPEC` gives it (`parse_gears`,
`plan_axes`; `check_gears_match` refuses a NAME that names no such axis), which make
`--dynamic_dims` with `--input_format=ND`. ATC takes 2 to 100 gears
(atlasatcparam_16_0018 "--dynamic_batch_size": 档位数取值范围为(1,100]; the same range for
--dynamic_dims); a single size is compiled static.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import (
    ATC_DEFAULT_PRECISION_MODE,
    ATC_MAX_GEARS,
    DEFAULT_SOC,
    AtcFramework,
    PrecisionMode,
    om_output_path,
)
from ge_python_backend.errors import UserError

if TYPE_CHECKING:
    import onnx

logger = logging.getLogger(__name__)

DEFAULT_SOC_VERSION = DEFAULT_SOC  # ATC --soc_version when none is given
MIN_GEARS = 2  # ATC refuses a gear option with one gear: one size is a static .om
ATC_LOG_LINES = 40  # lines of ATC's output a failed run keeps for the report


class PlanError(UserError):
    """A model version whose ATC command cannot be made (the message says what to do)."""


class AtcError(UserError):
    """ATC failed; `log_tail` holds the last lines of its output."""

    def __init__(self, message: str, log_tail: str) -> None:
        super().__init__(message)
        self.log_tail = log_tail


@dataclasses.dataclass(frozen=True)
class GearRequest:
    """`--gears [MODEL/]NAME:SPEC`: the sizes an axis compiles for. NAME is the axis' symbolic
    name in the ONNX graph (`seq` of `input_ids[N, seq]`), `INPUT.AXIS` (`input_ids.1`), or an
    input whose one axis without a size it names (`input_ids`: its `seq`, shared by every input
    with that axis); SPEC the sizes, `32,64,128`. MODEL limits it to one model.

    Several axes with sizes in pairs, as ATC's --dynamic_image_size takes height and width:
    `NAME,NAME:SIZExSIZE,...` (`x.2,x.3:96x320,160x640`) gears only those combinations; each
    axis gets its own request, `group` naming the axes and `rows` the combinations."""

    name: str
    sizes: tuple[int, ...]
    model: str | None = None
    group: tuple[str, ...] = ()  # the axes geared together (paired sizes), in SPEC's order
    rows: tuple[tuple[int, ...], ...] = ()  # their sizes, one tuple per gear

    def applies_to(self, model: str) -> bool:
        return self.model is None or self.model == model

    def __str__(self) -> str:
        model = f"{self.model}/" if self.model else ""
        if self.group:
            spec = ",".join("x".join(map(str, row)) for row in self.rows)
            return f"{model}{','.join(self.group)}:{spec}"
        return f"{model}{self.name}:{','.join(map(str, self.sizes))}"


def parse_gears(items: Sequence[str]) -> tuple[GearRequest, ...]:
    """`--gears` values: `["seq:32,64,128", "bert/ids.1:16,32", "det/H,W:96x320,160x640"]` ->
    GearRequests (one per axis of a paired item)."""
    requests = []
    for item in items:
        head, sep, spec = item.rpartition(":")
        model, slash, name = head.rpartition("/")
        names = name.split(",")
        try:
            rows = tuple(tuple(int(size) for size in row.split("x")) for row in spec.split(","))
        except ValueError:
            rows = ()
        if (
            not sep
            or not all(names)
            or (slash and not model)
            or not rows
            or any(len(row) != len(names) or min(row) < 1 for row in rows)
        ):
            raise UserError(
                f"--gears {item!r} must be [MODEL/]NAME:SIZE,SIZE,... with sizes >= 1, NAME an "
                "axis' symbolic name in the ONNX graph, INPUT.AXIS or an input name, e.g. "
                "seq:32,64,128; or NAME,NAME:SIZExSIZE,... for sizes in pairs, e.g. "
                "x.2,x.3:96x320,160x640"
            )
        if len(set(rows)) != len(rows):
            raise UserError(f"--gears {item!r} gives a size twice")
        if len(set(names)) != len(names):
            raise UserError(f"--gears {item!r} names an axis twice")
        if len(names) == 1:
            requests.append(GearRequest(name, tuple(sorted(r[0] for r in rows)), model or None))
            continue
        for column, axis in enumerate(names):
            sizes = tuple(sorted({row[column] for row in rows}))
            requests.append(GearRequest(axis, sizes, model or None, tuple(names), rows))
    return tuple(requests)


def gear_combinations(
    names: Sequence[str], requests: Mapping[str, GearRequest]
) -> list[tuple[int, ...]]:
    """The sizes of the axes `names` per gear, in that order: every combination of the axes'
    sizes, but axes geared in pairs (`GearRequest.group`) only in their pairs."""
    groups: list[tuple[list[str], list[tuple[int, ...]]]] = []
    placed: set[str] = set()
    for name in names:
        if name in placed:
            continue
        request = requests[name]
        members = [axis for axis in request.group if axis in names]
        if request.group and len(members) == len(request.group):
            groups.append((list(request.group), list(request.rows)))
        else:
            members = [name]
            groups.append((members, [(size,) for size in request.sizes]))
        placed.update(members)
    combinations = []
    for picks in itertools.product(*(values for _, values in groups)):
        size_of = {
            axis: size for (axes, _), pick in zip(groups, picks) for axis, size in zip(axes, pick)
        }
        combinations.append(tuple(size_of[name] for name in names))
    return combinations


@dataclasses.dataclass(frozen=True)
class Axis:
    """One axis of a graph input in the plan: a fixed `size`, the batch axis, the axis a gear
    sets (`gear`: its --gears name), or unresolved (`problem` says why)."""

    size: int = -1
    batch: bool = False
    gear: str | None = None
    problem: str | None = None


@dataclasses.dataclass(frozen=True)
class OpenAxis:
    """An axis of a graph input that neither the config nor the graph sizes and that is not the
    batch axis: it needs sizes from `--gears`."""

    input: str
    index: int
    symbol: str  # its symbolic name in the graph (dim_param); "" when it has none

    @property
    def position(self) -> str:
        """`INPUT.AXIS`: the name --gears gives any axis by."""
        return f"{self.input}.{self.index}"

    @property
    def key(self) -> str:
        """What the axis is known by: its symbol (shared by every input with that axis), else
        `INPUT.AXIS`."""
        return self.symbol or self.position


def open_axes(proto: onnx.ModelProto, config: ModelConfig) -> list[OpenAxis]:
    """Every axis of the graph's inputs that needs sizes from `--gears` (see `plan_axes`)."""
    return [
        axis
        for row in _sized_axes(proto, config).values()
        for axis in row
        if isinstance(axis, OpenAxis)
    ]


def _sized_axes(
    proto: onnx.ModelProto, config: ModelConfig
) -> dict[str, tuple[Axis | OpenAxis, ...]]:
    """Every graph input's axes as the config and the graph set them; an `OpenAxis` where
    neither does (not the batch axis)."""
    by_config = {tensor.name: tensor for tensor in config.input}
    batched = config.max_batch_size > 0
    sized: dict[str, tuple[Axis | OpenAxis, ...]] = {}
    for value in graph_inputs(proto):
        shape = value.type.tensor_type.shape
        dims = [(d.dim_value if d.HasField("dim_value") else -1, d.dim_param) for d in shape.dim]
        entry = by_config.get(value.name)
        config_dims: list[int] | None = None
        if entry is not None and len(entry.dims) and not entry.HasField("reshape"):
            config_dims = ([-1] if batched else []) + list(entry.dims)
            if len(config_dims) != len(dims):
                sized[value.name] = (
                    Axis(
                        problem=f"config.pbtxt gives it dims {list(entry.dims)}"
                        f"{' after the batch axis' if batched else ''}, but the graph has "
                        f"{len(dims)} axes"
                    ),
                )
                continue
        axes: list[Axis | OpenAxis] = []
        for index, (graph_size, symbol) in enumerate(dims):
            wanted = config_dims[index] if config_dims else -1
            if batched and index == 0:
                if graph_size > 0:
                    axes.append(
                        Axis(
                            problem=f"axis 0 is {graph_size} in the graph, but "
                            f"max_batch_size {config.max_batch_size} makes it the "
                            "batch axis; export the ONNX with a dynamic batch axis"
                        )
                    )
                else:
                    axes.append(Axis(batch=True))
            elif wanted > 0 or graph_size > 0:
                axes.append(Axis(size=wanted if wanted > 0 else graph_size))
            else:
                axes.append(OpenAxis(value.name, index, symbol))
        sized[value.name] = tuple(axes)
    return sized


def plan_axes(
    model: str, proto: onnx.ModelProto, config: ModelConfig, gears: Sequence[GearRequest]
) -> dict[str, tuple[Axis, ...]]:
    """Every graph input's axes as the config and `gears` set them (see the module docstring);
    an axis neither does has a `problem` (its hint names the axis with `model`'s name: exporters
    reuse axis names in every graph), as has an input a gear names whose axes without a size are
    more than one.

    A gear names an axis by its symbol, by `INPUT.AXIS`, or by the name of an input with one
    axis without a size, which names that axis' symbol (every input with it) when it has one.
    """
    requests = {g.name: g for g in gears if g.applies_to(model)}
    sized = _sized_axes(proto, config)
    unsized = {
        name: [axis for axis in row if isinstance(axis, OpenAxis)] for name, row in sized.items()
    }
    by_input = {  # an axis' key -> the request naming the one input it is the open axis of
        axes[0].key: requests[name]
        for name, axes in unsized.items()
        if name in requests and len(axes) == 1
    }
    planned: dict[str, tuple[Axis, ...]] = {}
    for name, row in sized.items():
        if name in requests and len(unsized[name]) > 1:
            choices = ", ".join(
                f"axis {a.index}" + (f" ({a.symbol!r})" if a.symbol else "") for a in unsized[name]
            )
            names = " or ".join(f"--gears {model}/{a.key}:SIZE,SIZE,..." for a in unsized[name])
            planned[name] = (
                Axis(
                    problem=f"--gears {requests[name]} names this input, which has "
                    f"{len(unsized[name])} axes without a size ({choices}); name each axis "
                    f"instead: {names}"
                ),
            )
            continue
        axes: list[Axis] = []
        for axis in row:
            if isinstance(axis, Axis):
                axes.append(axis)
                continue
            request = requests.get(axis.symbol) if axis.symbol else None
            request = request or requests.get(axis.position) or by_input.get(axis.key)
            if request is not None:
                axes.append(Axis(gear=request.name))
            else:
                label = f" ({axis.symbol!r})" if axis.symbol else ""
                axes.append(
                    Axis(
                        problem=f"axis {axis.index}{label} is -1 and is not the batch axis; "
                        f"give its sizes with --gears {model}/{axis.key}:SIZE,SIZE,..."
                    )
                )
        planned[name] = tuple(axes)
    return planned


def check_gears_match(
    gears: Sequence[GearRequest], models: Mapping[str, Sequence[OpenAxis]]
) -> None:
    """UserError for a gear that names no axis needing sizes of the models it applies to
    (`models`: each model's `open_axes`, of every version), naming the axes that need sizes."""
    unmatched = []
    for gear in gears:
        axes = [a for model, found in models.items() if gear.applies_to(model) for a in found]
        names = {a.symbol for a in axes if a.symbol} | {a.position for a in axes}
        if gear.name not in names | {a.input for a in axes}:
            unmatched.append(gear)
    if not unmatched:
        return
    needs = []
    for model, found in sorted(models.items()):
        keys: dict[str, list[str]] = {}
        for axis in found:
            keys.setdefault(axis.key, []).append(axis.position)
        for key, positions in keys.items():
            where = f" ({', '.join(positions)})" if positions != [key] else ""
            needs.append(f"{model}: {key}{where}")
    inputs = sorted(
        f"{model}: {name}"
        for model, found in models.items()
        for name, count in collections.Counter(axis.input for axis in found).items()
        if count == 1
    )
    given = ", ".join(f"--gears {gear}" for gear in unmatched)
    if not needs:
        raise UserError(
            f"{given} names no axis: no model has a -1 axis that needs sizes (the batch axis "
            "takes max_batch_size); leave it out"
        )
    hint = f"; or name an input with one such axis: {', '.join(inputs)}" if inputs else ""
    raise UserError(
        f"{given} names no axis that needs sizes; the axes without a size are "
        f"{'; '.join(needs)} (give --gears [MODEL/]NAME:SIZE,... with NAME the axis' "
        f"symbolic name or INPUT.AXIS{hint})"
    )


def graph_inputs(proto: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The graph's real inputs (initializers listed as inputs left out)."""
    initializers = {init.name for init in proto.graph.initializer}
    return [value for value in proto.graph.input if value.name not in initializers]


def batch_gears(config: ModelConfig) -> tuple[int, ...]:
    """The batch sizes to compile: 1, the config's preferred batch sizes up to `max_batch_size`
    and `max_batch_size` itself (a request of one row runs unpadded); without preferred sizes,
    the powers of two below it too."""
    largest = config.max_batch_size
    if largest < 1:
        return ()
    preferred = {size for size in config.dynamic_batching.preferred_batch_size if size <= largest}
    if not preferred:
        preferred = {2**k for k in range(largest.bit_length()) if 2**k < largest}
    return tuple(sorted(preferred | {1, largest}))


@dataclasses.dataclass(frozen=True)
class AtcPlan:
    """ATC's flags for one model version (`output` without `.om`, as ATC takes it)."""

    model: Path
    output: Path
    soc_version: str
    input_shape: str
    precision_mode: PrecisionMode
    dynamic_batch_size: str | None = None
    dynamic_dims: str | None = None
    input_format: str | None = None
    keep_dtype: Path | None = None  # ATC's file of the operators kept in FP32 (the gate's island)

    def flags(self) -> list[tuple[str, str]]:
        """(flag, value) in ATC's order, the flags not given left out."""
        items = [
            ("model", str(self.model)),
            ("framework", str(AtcFramework.ONNX.value)),
            ("output", str(self.output)),
            ("soc_version", self.soc_version),
            ("input_shape", self.input_shape),
            ("input_format", self.input_format),
            ("dynamic_batch_size", self.dynamic_batch_size),
            ("dynamic_dims", self.dynamic_dims),
            ("precision_mode", self.precision_mode.value),
            ("keep_dtype", None if self.keep_dtype is None else str(self.keep_dtype)),
        ]
        return [(flag, value) for flag, value in items if value is not None]

    def argv(self) -> list[str]:
        """The `atc` command as a process' arguments."""
        return ["atc", *(f"--{flag}={value}" for flag, value in self.flags())]

    def command(self) -> str:
        """The `atc` command as a shell line (values quoted where a shell needs it)."""
        return " ".join(["atc", *(f"--{flag}={shlex.quote(v)}" for flag, v in self.flags())])

    @property
    def om_path(self) -> Path:
        return om_output_path(self.output)

    @property
    def gears_text(self) -> str:
        """The gears as the report shows them."""
        if self.dynamic_batch_size:
            return f"batch {self.dynamic_batch_size}"
        if self.dynamic_dims:
            return f"dims {self.dynamic_dims}"
        return "static"

    def with_output(self, output: Path) -> AtcPlan:
        """The same plan writing elsewhere (a staging directory)."""
        return dataclasses.replace(self, output=output)

    def with_precision_mode(self, mode: PrecisionMode) -> AtcPlan:
        """The same plan compiling at another precision mode (the accuracy gate's ladder)."""
        return dataclasses.replace(self, precision_mode=mode)

    def with_keep_dtype(self, path: Path | None) -> AtcPlan:
        """The same plan keeping the operators `path` lists in FP32 (ATC's --keep_dtype)."""
        return dataclasses.replace(self, keep_dtype=path)

    def compile_emulator(self, compile_onnx: Callable[..., Path]) -> Path:
        """Compile with the emulator's compiler `compile_onnx` (an emulator .om, see
        `emulator.omfile.compile_onnx`); returns the .om."""
        return compile_onnx(
            self.model,
            self.output,
            input_shape=self.input_shape,
            dynamic_batch_size=self.dynamic_batch_size,
            dynamic_dims=self.dynamic_dims,
            input_format=self.input_format,
            soc_version=self.soc_version,
            precision_mode=self.precision_mode,
            keep_dtype=self.keep_dtype,
        )

    def run_atc(self) -> Path:
        """Run the real `atc` (on PATH); returns the .om. AtcError keeps its log's tail."""
        if shutil.which("atc") is None:
            raise UserError(atc_missing_message())
        self.output.parent.mkdir(parents=True, exist_ok=True)
        logger.info("running %s", self.command())
        result = subprocess.run(
            self.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False
        )
        lines = result.stdout.splitlines()
        tail = "\n".join(lines[-ATC_LOG_LINES:])
        if result.returncode != 0 or not self.om_path.is_file():
            # ATC's error codes (E19010, ...) start its error lines: the last one says why
            errors = [line for line in lines if re.match(r"\s*\[?E[A-Z0-9]{5}\b", line)]
            raise AtcError(
                f"atc exited with {result.returncode}"
                + ("" if result.returncode else f" without writing {self.om_path}")
                + (f": {errors[-1].strip()}" if errors else ""),
                tail,
            )
        return self.om_path


def atc_missing_message() -> str:
    return (
        "--runtime pyacl compiles with ATC, which is not on PATH: source CANN's set_env.sh "
        "(e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh), or use --dry-run for the script "
        "of ATC commands, or --runtime emulator"
    )


def plan_atc(
    model: str,
    onnx_path: Path,
    proto: onnx.ModelProto,
    config: ModelConfig,
    output: Path,
    *,
    soc_version: str = DEFAULT_SOC_VERSION,
    precision_mode: PrecisionMode | str = ATC_DEFAULT_PRECISION_MODE,
    gears: Sequence[GearRequest] = (),
) -> AtcPlan:
    """The ATC command compiling `onnx_path` to `output` (.om added) for model `model`.

    PlanError when an axis cannot be set (preflight reports the same, per input) or the
    gears are more than ATC takes.
    """
    axes = plan_axes(model, proto, config, gears)
    problems = [
        f"input {name!r}: {a.problem}" for name, row in axes.items() for a in row if a.problem
    ]
    if problems:
        raise PlanError(f"model {model!r}: " + "; ".join(problems))
    batches = batch_gears(config)
    requests = {g.name: g for g in gears if g.applies_to(model)}
    # the gear names in --input_shape order, the batch axis first
    names = list(dict.fromkeys(a.gear for row in axes.values() for a in row if a.gear))
    batch_in_dims = bool(names) and len(batches) > 1
    geared = gear_combinations(names, requests)
    combos = [(batch, *sizes) for batch in batches for sizes in geared] if batch_in_dims else geared
    if len(combos) > ATC_MAX_GEARS or len(batches) > ATC_MAX_GEARS:
        count = max(len(combos), len(batches))
        raise PlanError(
            f"model {model!r}: {count} gears (every combination of "
            f"{', '.join(['batch', *names] if len(batches) > 1 else names)}); ATC takes at "
            f"most {ATC_MAX_GEARS}: give fewer sizes"
        )
    single_batch = batches[0] if len(batches) == 1 else None
    dynamic_batch = len(batches) > 1 and not names
    dims_dynamic = len(combos) >= MIN_GEARS and bool(names)
    fixed = dict(zip(names, combos[0])) if names and not dims_dynamic else {}

    def dim(axis: Axis) -> int:
        if axis.batch:
            return single_batch if single_batch is not None else -1
        if axis.gear is not None:
            return fixed.get(axis.gear, -1)
        return axis.size

    input_shape = ";".join(
        f"{name}:{','.join(str(dim(a)) for a in row)}" for name, row in axes.items()
    )
    dynamic_dims = None
    if dims_dynamic:
        # each -1 of --input_shape in its order: the batch size or its gear's size
        position = {name: i + batch_in_dims for i, name in enumerate(names)}
        slots = [
            position[a.gear] if a.gear is not None else 0
            for row in axes.values()
            for a in row
            if a.gear is not None or (a.batch and batch_in_dims)
        ]
        per_gear = []
        for combo in combos:
            values = [combo[slot] for slot in slots]
            per_gear.append(",".join(map(str, values)))
        dynamic_dims = ";".join(per_gear)
    return AtcPlan(
        model=onnx_path,
        output=output,
        soc_version=soc_version,
        input_shape=input_shape,
        precision_mode=PrecisionMode(precision_mode),
        dynamic_batch_size=",".join(map(str, batches)) if dynamic_batch else None,
        dynamic_dims=dynamic_dims,
        input_format="ND" if dynamic_dims else None,
    )
