"""The accuracy gate of `migrate`: a compiled `.om` against the model's original ONNX, and the
precision ladder that recompiles a model the gate fails.

`gate_inputs` makes the input sets, in this order:

1. every `model_warmup` entry of the source config, as Triton builds its warmup requests:
   `input_data_file` (raw row-major bytes in `<model_dir>/warmup/`, little-endian; a BYTES element
   is a 4-byte length and its bytes), `zero_data`, `random_data` (the gate draws sane values,
   `client.random_array`, where Triton takes random bytes; BYTES falls back to zeros as in
   Triton). In a batched model the sample is repeated `batch_size` times along the batch axis,
   as Triton sends it (`batch_size` 0 is skipped, as Triton skips it);
2. the samples (`--samples`): every `*.npz` of the model's samples directory, by name, holding
   one array per model input keyed by input name, shaped as a client sends it (with the batch
   axis in a batched model);
3. only when no samples are given, `random_sets` random sets of `RANDOM_ROWS` rows (at most
   `max_batch_size`): floats ~ N(0, 1), integers (token ids, indices) in [0, `client.INT_HIGH`).

Arrays are shaped as the config's dims (and `reshape`, when it has one, as the model receives
them). `check_accuracy` runs every set through the `.om` (a runtime `Session`) and the ONNX
(onnxruntime) and judges each output on each set by the `Metric` that fits what it holds
(`default_metric`, or `--metric`): class scores by top-1 agreement and cosine, probabilities,
logits and maps by cosine and relative error, integers exactly; NaN or inf where the ONNX's
output is finite fails by name. `climb_ladder` compiles and checks up `ascend.PRECISION_LADDER`
until a mode passes; when the first mode fails it first tries that mode with an FP32 island
(`overflowing_operators`, else `bisect_island`) written as ATC's --keep_dtype file
(`write_keep_dtype`). Each result has a JSON-able `as_dict` for migration.json.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import math
import operator
import struct
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.ascend import (
    DTYPES_BY_TRITON,
    DTYPES_BY_TRITON_CONFIG,
    PRECISION_LADDER,
    PrecisionMode,
)
from ge_python_backend.client import cast_array, random_array
from ge_python_backend.errors import UserError
from ge_python_backend.modelinfo import shape_fits
from ge_python_backend.repository.model_files import open_session
from ge_python_backend.runtime import InputError
from ge_python_backend.tools.compare import (
    DATA_TYPES_BY_ONNXRUNTIME,
    OnnxReference,
    OutputComparison,
    Thresholds,
    TopKAgreement,
    compare_outputs,
    cosine_similarity,
    match_outputs,
    non_finite_problem,
)

logger = logging.getLogger(__name__)

DEFAULT_RANDOM_SETS = 3
# Rows of a random set of a batched model (fewer when max_batch_size is smaller): enough rows
# for top-k agreement to mean something, few enough for any model.
RANDOM_ROWS = 8


@dataclasses.dataclass(frozen=True)
class InputSet:
    """One request's inputs, by input name, as the model receives them; `origin` says where they
    came from: "warmup 'w0'", "sample a.npz", "random #1"."""

    origin: str
    arrays: Mapping[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class _ModelInput:
    name: str
    datatype: str  # Triton's: "FP32", "BYTES"
    dims: tuple[int, ...]  # as the config gives them: without the batch axis in a batched model
    reshape: tuple[int, ...] | None  # the config's `reshape`: the dims the model receives


def _datatype(value: int, what: str) -> str:
    """Triton's name of a config `data_type` enum value."""
    name = model_config_pb2.DataType.Name(value)
    if name not in DTYPES_BY_TRITON_CONFIG:
        raise UserError(f"{what} has data_type {name}")
    return str(DTYPES_BY_TRITON_CONFIG[name].triton)


def _numpy_dtype(datatype: str, what: str) -> np.dtype[Any]:
    if datatype == "BYTES":
        return np.dtype(object)
    dtype = DTYPES_BY_TRITON[datatype].numpy
    if dtype is None:
        raise UserError(f"{what} is {datatype}, which numpy cannot hold")
    return dtype


def _model_inputs(config: ModelConfig, onnx_path: Path) -> list[_ModelInput]:
    """The config's inputs; a config without them (Triton completes an ONNX model's) takes the
    ONNX graph's, symbolic dims as -1."""
    if config.input:
        return [
            _ModelInput(
                tensor.name,
                _datatype(tensor.data_type, f"input {tensor.name!r}"),
                tuple(tensor.dims),
                tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None,
            )
            for tensor in config.input
        ]
    batched = config.max_batch_size > 0
    inputs = []
    for item in OnnxReference(onnx_path).inputs:
        data_type = DATA_TYPES_BY_ONNXRUNTIME.get(item.type)
        if data_type is None or data_type.triton is None:
            raise UserError(f"{onnx_path}: input {item.name!r} is {item.type}, which Triton lacks")
        shape = [dim if isinstance(dim, int) and dim >= 0 else -1 for dim in item.shape]
        inputs.append(
            _ModelInput(item.name, data_type.triton, tuple(shape[1:] if batched else shape), None)
        )
    return inputs


def _zeros(datatype: str, dims: tuple[int, ...], what: str) -> np.ndarray:
    if datatype == "BYTES":
        return np.full(dims, b"", dtype=object)
    return np.zeros(dims, _numpy_dtype(datatype, what))


def _strings(data: bytes, count: int, source: str) -> np.ndarray:
    """`count` BYTES elements, each a 4-byte little-endian length and that many bytes."""
    elements = []
    offset = 0
    while offset < len(data):
        if offset + 4 > len(data):
            raise UserError(f"{source}: a BYTES element's 4-byte length is cut off at {offset}")
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if offset + length > len(data):
            raise UserError(
                f"{source}: a BYTES element of {length} bytes at {offset - 4} runs past the end"
            )
        elements.append(data[offset : offset + length])
        offset += length
    if len(elements) != count:
        raise UserError(f"{source} holds {len(elements)} BYTES elements, the dims take {count}")
    array = np.empty(count, dtype=object)
    array[:] = elements
    return array


def _warmup_file(path: Path, what: str, datatype: str, dims: tuple[int, ...]) -> np.ndarray:
    """The data of an `input_data_file`: Triton reads the first bytes the dims take (a BYTES
    input: the whole file)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    count = math.prod(dims)
    if datatype == "BYTES":
        return _strings(data, count, f"{what}: {path}").reshape(dims)
    dtype = _numpy_dtype(datatype, what)
    needed = count * dtype.itemsize
    if len(data) < needed:
        raise UserError(
            f"{what}: {path} has {len(data)} bytes, {datatype} dims {list(dims)} take {needed}"
        )
    raw = np.frombuffer(data, dtype=dtype.newbyteorder("<"), count=count)
    return raw.astype(dtype).reshape(dims)


def _warmup_array(
    model_dir: Path,
    what: str,
    spec: _ModelInput,
    data: model_config_pb2.ModelWarmup.Input,
    rng: np.random.Generator,
) -> np.ndarray:
    """One warmup input's sample (without the batch axis in a batched model)."""
    datatype = _datatype(data.data_type, what)
    if datatype != spec.datatype:
        raise UserError(f"{what} is {datatype}, the model takes {spec.datatype}")
    dims = tuple(data.dims)
    if not shape_fits(dims, spec.dims) or any(dim < 0 for dim in dims):
        raise UserError(
            f"{what} has dims {list(dims)}, the model takes {list(spec.dims)} (every warmup dim "
            "fixed, as Triton requires)"
        )
    kind = data.WhichOneof("input_data_type")
    if kind == "input_data_file":
        return _warmup_file(model_dir / "warmup" / data.input_data_file, what, datatype, dims)
    if kind == "random_data" and datatype != "BYTES":
        return random_array(datatype, dims, rng)
    if kind in ("zero_data", "random_data"):
        return _zeros(datatype, dims, what)
    raise UserError(f"{what} sets none of zero_data, random_data and input_data_file")


def _warmup_sets(
    model_dir: Path, config: ModelConfig, inputs: Sequence[_ModelInput], rng: np.random.Generator
) -> list[InputSet]:
    batched = config.max_batch_size > 0
    names = {spec.name for spec in inputs}
    sets = []
    for entry in config.model_warmup:
        origin = f"warmup {entry.name!r}"
        if entry.batch_size == 0:
            logger.info("%s: batch_size 0, skipped as Triton skips it", origin)
            continue
        if not batched and entry.batch_size != 1:
            raise UserError(
                f"{origin} has batch_size {entry.batch_size}; a model without batching "
                "(max_batch_size 0) takes 1"
            )
        others = sorted(set(entry.inputs) - names)
        if others:
            logger.info("%s: %s are no model inputs (control inputs), left out", origin, others)
        arrays = {}
        for spec in inputs:
            if spec.name not in entry.inputs:
                raise UserError(f"{origin} gives no data for input {spec.name!r}")
            what = f"{origin} input {spec.name!r}"
            sample = _warmup_array(model_dir, what, spec, entry.inputs[spec.name], rng)
            arrays[spec.name] = (
                np.repeat(sample[np.newaxis], entry.batch_size, axis=0) if batched else sample
            )
        sets.append(InputSet(origin, arrays))
    return sets


def _sample_sets(samples: Path, inputs: Sequence[_ModelInput], batched: bool) -> list[InputSet]:
    if not samples.is_dir():
        raise UserError(f"samples directory {samples} does not exist")
    files = sorted(samples.glob("*.npz"))
    if not files:
        raise UserError(f"{samples} holds no .npz sample (one per set, keyed by input name)")
    names = [spec.name for spec in inputs]
    pickled = any(spec.datatype == "BYTES" for spec in inputs)  # BYTES arrays are object arrays
    sets = []
    for path in files:
        origin = f"sample {path.name}"
        try:
            loaded = np.load(path, allow_pickle=pickled)
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise UserError(f"{origin}: cannot read {path}: {exc}") from None
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise UserError(f"{origin}: {path} is no .npz archive (np.savez)")
        with loaded:
            arrays = {key: loaded[key] for key in loaded.files}
        if sorted(arrays) != sorted(names):
            raise UserError(
                f"{origin} holds {', '.join(sorted(arrays)) or 'nothing'}; the model's inputs "
                f"are {', '.join(names)}"
            )
        for spec in inputs:
            what = f"{origin} input {spec.name!r}"
            array = cast_array(arrays[spec.name], spec.datatype, what)
            declared = ((-1,) if batched else ()) + spec.dims
            if not shape_fits(array.shape, declared):
                raise UserError(
                    f"{what} has shape {list(array.shape)}, the model takes {list(declared)}"
                )
            arrays[spec.name] = array
        sets.append(InputSet(origin, arrays))
    return sets


def _random_dims(
    spec: _ModelInput,
    given: Mapping[str, Sequence[int]],
    known: Sequence[InputSet],
    batched: bool,
) -> tuple[int, ...]:
    """The dims of a random input: `given`, else the config's when fixed, else those of the
    first warmup or sample set."""
    if spec.name in given:
        dims = tuple(given[spec.name])
        if not shape_fits(dims, spec.dims) or any(dim < 0 for dim in dims):
            raise UserError(
                f"dims {list(dims)} given for input {spec.name!r} do not fit {list(spec.dims)}"
            )
        return dims
    if all(dim >= 0 for dim in spec.dims):
        return spec.dims
    if known:
        shape = known[0].arrays[spec.name].shape
        return tuple(shape[1:] if batched else shape)
    raise UserError(
        f"input {spec.name!r} has dims {list(spec.dims)}: random inputs need its -1 sizes from a "
        "warmup entry, a sample or the dims given (e.g. a gear)"
    )


def gate_inputs(
    model_dir: Path,
    config: ModelConfig,
    onnx_path: Path,
    *,
    samples: Path | None,
    random_sets: int = DEFAULT_RANDOM_SETS,
    seed: int = 0,
    dims: Mapping[str, Sequence[int]] | None = None,
) -> list[InputSet]:
    """The gate's input sets for the model in `model_dir` with its SOURCE `config`: warmups,
    then samples, else random (see the module docstring). `dims` gives the -1 sizes of an input's
    config dims (without the batch axis) for the random sets; without it they take the first
    warmup's or sample's."""
    if random_sets < 0:
        raise UserError(f"random_sets must be >= 0, got {random_sets}")
    inputs = _model_inputs(config, onnx_path)
    batched = config.max_batch_size > 0
    rng = np.random.default_rng(seed)
    sets = _warmup_sets(model_dir, config, inputs, rng)
    if samples is not None:  # the user's samples decide: no random set beside them
        sets += _sample_sets(samples, inputs, batched)
        random_sets = 0
    shapes = {spec.name: _random_dims(spec, dims or {}, sets, batched) for spec in inputs}
    rows: tuple[int, ...] = (min(RANDOM_ROWS, config.max_batch_size),) if batched else ()
    sets += [
        InputSet(
            f"random #{number}",
            {
                spec.name: random_array(spec.datatype, rows + shapes[spec.name], rng)
                for spec in inputs
            },
        )
        for number in range(1, random_sets + 1)
    ]
    if not sets:
        raise UserError(f"no input set for {model_dir.name}: no warmup, no sample, no random set")
    return [_reshaped(item, inputs, batched) for item in sets]


def _reshaped(item: InputSet, inputs: Sequence[_ModelInput], batched: bool) -> InputSet:
    """`item` with each input of a config `reshape` in the dims the model receives."""
    arrays = dict(item.arrays)
    for spec in inputs:
        if spec.reshape is not None:
            array = arrays[spec.name]
            rows = array.shape[:1] if batched else ()
            arrays[spec.name] = array.reshape(rows + spec.reshape)
    return InputSet(item.origin, arrays)


class Metric(str, enum.Enum):
    """How the gate judges one output against the ONNX's (`default_metric` picks one; `--metric`
    chooses another)."""

    CLASSES = "classes"  # class scores: top-1 agreement over the rows (ties count), and cosine
    VALUES = "values"  # probabilities, logits, maps: cosine and relative error (L2)
    COORDINATES = "coordinates"  # boxes, points: every element within a tolerance in its units
    EXACT = "exact"  # integers (indices, labels, masks): every element equal
    ELEMENTS = "elements"  # every element within atol + rtol * |ref| (compare's rule)

    def __str__(self) -> str:
        return str(self.value)


# A class-scores output passes with the ONNX's top-1 class on this share of its rows (and the
# cosine of `Thresholds.min_cosine`); a values output with an L2 error of at most this share of
# the ONNX output's norm. FP16 against FP32 stays well inside both where it gives the same
# answers (cosine >= 0.999 and relative error < 1% on the real models of tests/real_models.py).
MIN_TOP1_AGREEMENT = 0.99
MAX_RELATIVE_ERROR = 0.05
DEFAULT_COORDINATE_TOLERANCE = 0.5  # in the output's own units (half a pixel)
TIE_SHARE = 1e-3  # classes whose ONNX scores are this share of the row's range apart tie


@dataclasses.dataclass(frozen=True)
class MetricChoice:
    """`--metric [MODEL/]OUTPUT=METRIC[:TOLERANCE]`: how to judge one output (of one model)."""

    output: str
    metric: Metric
    tolerance: float | None = None
    model: str | None = None

    def applies_to(self, model: str, output: str) -> bool:
        return self.output == output and (self.model is None or self.model == model)


def parse_metrics(items: Sequence[str]) -> tuple[MetricChoice, ...]:
    """`--metric` values: `["yolo/boxes=coordinates:0.5", "ids=exact"]` -> MetricChoices."""
    choices = []
    for item in items:
        head, sep, spec = item.partition("=")
        model, slash, output = head.rpartition("/")
        kind, colon, tolerance = spec.partition(":")
        try:
            metric = Metric(kind)
            value = float(tolerance) if colon else None
        except ValueError:
            metric, value = None, None
        if not sep or not output or (slash and not model) or metric is None:
            raise UserError(
                f"--metric {item!r} must be [MODEL/]OUTPUT=METRIC[:TOLERANCE], METRIC one of "
                f"{', '.join(m.value for m in Metric)}, e.g. yolo/boxes=coordinates:0.5"
            )
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise UserError(f"--metric {item!r}: the tolerance must be a finite number >= 0")
        choices.append(MetricChoice(output, metric, value, model or None))
    return tuple(choices)


def default_metric(reference: np.ndarray) -> Metric:
    """The metric of an output from the ONNX's answer: integers exact; class scores (a 2-D
    [rows, classes] float output, or rows of probabilities summing to 1 along the last axis)
    by top-1 and cosine; any other float output by cosine and relative error."""
    if reference.dtype.kind in "iub":
        return Metric.EXACT
    if reference.dtype.kind != "f" or reference.ndim < 2 or reference.shape[-1] < 2:
        return Metric.VALUES
    if reference.ndim == 2:
        return Metric.CLASSES
    rows = reference.astype(np.float64).reshape(-1, reference.shape[-1])
    softmax = bool(np.all(rows >= 0) and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3))
    return Metric.CLASSES if softmax else Metric.VALUES


@dataclasses.dataclass(frozen=True)
class Judgement:
    """One output on one input set: passed, the metric's figures (by name) and the problem."""

    passed: bool
    figures: Mapping[str, float]
    problem: str = ""


def judge(
    value: np.ndarray,
    reference: np.ndarray,
    metric: Metric,
    thresholds: Thresholds,
    tolerance: float | None = None,
) -> Judgement:
    """Judge `value` (the .om's) against `reference` (the ONNX's) by `metric`. NaN or inf where
    the ONNX's output is finite fails whatever the metric, and is named."""
    if value.shape != reference.shape:
        return Judgement(
            False, {}, f"shape {list(value.shape)}, the ONNX's {list(reference.shape)}"
        )
    problem = non_finite_problem(value, reference) if value.dtype.kind == "f" else ""
    if problem:
        return Judgement(False, {}, problem)
    x = value.astype(np.float64)
    ref = reference.astype(np.float64)
    if metric == Metric.EXACT:
        equal = float(np.count_nonzero(x == ref)) / max(x.size, 1)
        return Judgement(equal == 1.0, {"equal": equal})
    if metric == Metric.COORDINATES:
        limit = DEFAULT_COORDINATE_TOLERANCE if tolerance is None else tolerance
        error = float(np.abs(x - ref).max()) if x.size else 0.0
        return Judgement(error <= limit, {"max_abs": error, "tolerance": limit})
    if metric == Metric.ELEMENTS:
        close = np.isclose(x, ref, rtol=thresholds.rtol, atol=thresholds.atol, equal_nan=True)
        mismatched = int(np.count_nonzero(~close))
        return Judgement(mismatched == 0, {"mismatched": float(mismatched)})
    cosine = cosine_similarity(x, ref)
    if metric == Metric.CLASSES:
        rows_x = x.reshape(-1, x.shape[-1])
        rows_ref = ref.reshape(-1, ref.shape[-1])
        # a row agrees when the class the .om picks is the ONNX's best or ties with it (within
        # TIE_SHARE of the row's range): a tie broken the other way is the same answer
        picked = rows_ref[np.arange(len(rows_ref)), rows_x.argmax(axis=1)]
        best = rows_ref.max(axis=1)
        ties = TIE_SHARE * (best - rows_ref.min(axis=1))
        top1 = float(np.mean(picked >= best - ties))
        least = MIN_TOP1_AGREEMENT if tolerance is None else tolerance
        passed = top1 >= least and cosine >= thresholds.min_cosine
        return Judgement(passed, {"top1": top1, "cosine": cosine})
    norm = float(np.linalg.norm(ref))
    relative = float(np.linalg.norm(x - ref)) / norm if norm else float(np.linalg.norm(x) > 0)
    most = MAX_RELATIVE_ERROR if tolerance is None else tolerance
    passed = cosine >= thresholds.min_cosine and relative <= most
    return Judgement(passed, {"cosine": cosine, "relative_error": relative})


def _number(value: float) -> float | None:
    """A statistic for JSON: None for NaN (no statistic: a shape mismatch, a missing output)."""
    return None if math.isnan(value) else value


@dataclasses.dataclass(frozen=True)
class SetJudgement:
    """One output on one input set (`origin`): compare's statistics and the metric's judgement."""

    origin: str
    comparison: OutputComparison
    judgement: Judgement

    def as_dict(self) -> dict[str, Any]:
        return {
            "input": self.origin,
            "passed": self.judgement.passed,
            **{name: _number(value) for name, value in self.judgement.figures.items()},
            "problem": self.judgement.problem or None,
        }


@dataclasses.dataclass(frozen=True)
class OutputAccuracy:
    """One `.om` output over every input set, judged by `metric` on each (`sets`): the largest
    errors, the lowest cosine, the elements outside compare's tolerance in all, top-k agreement
    over every row (None unless classifier-like in every set), passed when every set passed, and
    the worst set's origin (the first failing one, else the lowest cosine) with its problem
    (NaN or inf named, a shape mismatch, no ONNX output)."""

    name: str
    metric: Metric
    max_abs: float
    max_rel: float
    cosine: float
    mismatched: int
    top_k: TopKAgreement | None
    passed: bool
    worst: str
    problem: str = ""
    sets: tuple[SetJudgement, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric.value,
            "passed": self.passed,
            "max_abs": _number(self.max_abs),
            "max_rel": _number(self.max_rel),
            "cosine": _number(self.cosine),
            "mismatched": self.mismatched,
            "top1": None if self.top_k is None else self.top_k.top1_fraction,
            "top5": None if self.top_k is None else self.top_k.top5_fraction,
            "worst_input": self.worst,
            "problem": self.problem,
            "per_input": [item.as_dict() for item in self.sets],
        }


def _extreme(values: Sequence[float], pick: Callable[[list[float]], float]) -> float:
    known = [value for value in values if not math.isnan(value)]
    return pick(known) if known else math.nan


def _over_sets(name: str, metric: Metric, results: Sequence[SetJudgement]) -> OutputAccuracy:
    def badness(result: SetJudgement) -> tuple[bool, float]:
        cosine = result.comparison.cosine
        return result.judgement.passed, -math.inf if math.isnan(cosine) else cosine

    worst = min(results, key=badness)
    items = [result.comparison for result in results]
    agreements = [item.top_k for item in items if item.top_k is not None]
    top_k = functools.reduce(operator.add, agreements) if len(agreements) == len(items) else None
    return OutputAccuracy(
        name,
        metric,
        _extreme([item.max_abs for item in items], max),
        _extreme([item.max_rel for item in items], max),
        _extreme([item.cosine for item in items], min),
        sum(item.mismatched for item in items),
        top_k,
        all(result.judgement.passed for result in results),
        worst.origin,
        worst.judgement.problem or worst.comparison.problem,
        tuple(results),
    )


@dataclasses.dataclass(frozen=True)
class AccuracyResult:
    """Every output of an `.om` against the ONNX over the input sets (`origins`, in order), each
    judged by its metric; `random` says the sets are random (no sample was given)."""

    outputs: list[OutputAccuracy]
    origins: list[str]
    thresholds: Thresholds
    random: bool = False

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(output.passed for output in self.outputs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "thresholds": dataclasses.asdict(self.thresholds),
            "input_sets": list(self.origins),
            "random_inputs": self.random,
            "outputs": [output.as_dict() for output in self.outputs],
        }


def _metric_of(
    model: str, output: str, reference: np.ndarray, choices: Sequence[MetricChoice]
) -> tuple[Metric, float | None]:
    chosen = next((c for c in choices if c.applies_to(model, output)), None)
    if chosen is not None:
        return chosen.metric, chosen.tolerance
    return default_metric(reference), None


def check_accuracy(
    onnx_path: Path,
    om_path: Path,
    inputs: Sequence[InputSet],
    thresholds: Thresholds,
    *,
    runtime: str,
    metrics: Sequence[MetricChoice] = (),
    model: str = "",
) -> AccuracyResult:
    """Run every input set through the `.om` (a `runtime` Session) and the ONNX (onnxruntime);
    each output judged by its metric (`metrics` chosen for `model`, else `default_metric`) on
    each set, folded over the sets (`OutputAccuracy`)."""
    if not inputs:
        raise UserError("the accuracy gate needs at least one input set")
    if not om_path.is_file():
        raise UserError(f".om file {om_path} does not exist")
    reference = OnnxReference(onnx_path)
    by_output: dict[str, list[SetJudgement]] = {}
    chosen: dict[str, tuple[Metric, float | None]] = {}
    with open_session(om_path, runtime) as session:
        if session.aipp:
            raise UserError(
                f"{om_path.name} has AIPP on {', '.join(sorted(session.aipp))}; the gate checks "
                "models without AIPP (compare --aipp-config checks one with it)"
            )
        for input_set in inputs:
            try:
                outputs = session.infer(dict(input_set.arrays))
            except InputError as exc:
                raise UserError(f"{input_set.origin} does not fit {om_path.name}: {exc}") from None
            expected = reference.run(input_set.arrays)
            matched = match_outputs(list(outputs), list(expected))
            for item in compare_outputs("om", outputs, expected, thresholds):
                if item.name in matched:
                    wanted = expected[matched[item.name]]
                    metric, tolerance = chosen.setdefault(
                        item.name, _metric_of(model, item.name, wanted, metrics)
                    )
                    verdict = judge(outputs[item.name], wanted, metric, thresholds, tolerance)
                else:
                    chosen.setdefault(item.name, (Metric.VALUES, None))
                    verdict = Judgement(False, {}, item.problem)
                by_output.setdefault(item.name, []).append(
                    SetJudgement(input_set.origin, item, verdict)
                )
    result = AccuracyResult(
        [_over_sets(name, chosen[name][0], results) for name, results in by_output.items()],
        [input_set.origin for input_set in inputs],
        thresholds,
        random=all(input_set.origin.startswith("random") for input_set in inputs),
    )
    failed = [f"{o.name} ({o.problem or o.worst})" for o in result.outputs if not o.passed]
    logger.info(
        "%s against %s on %d input sets: %s",
        om_path.name,
        onnx_path.name,
        len(inputs),
        "passed" if result.passed else f"failed on {', '.join(failed)}",
    )
    return result


@dataclasses.dataclass(frozen=True)
class LadderAttempt:
    """One step of the ladder: the `.om` compiled at `mode` and its result, or the compile
    error's text (`om` and `result` None)."""

    mode: PrecisionMode
    om: Path | None
    result: AccuracyResult | None
    error: str = ""
    fp32_operators: tuple[str, ...] = ()  # the island kept in FP32 (ATC's --keep_dtype)

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.passed

    def as_dict(self) -> dict[str, Any]:
        return {
            "precision_mode": self.mode.value,
            "fp32_operators": list(self.fp32_operators),
            "passed": self.passed,
            "compile_error": self.error or None,
            "accuracy": None if self.result is None else self.result.as_dict(),
        }


@dataclasses.dataclass(frozen=True)
class LadderResult:
    """Every attempt, in order; the last one passed when any did."""

    attempts: list[LadderAttempt]

    @property
    def passed_attempt(self) -> LadderAttempt | None:
        return next((attempt for attempt in self.attempts if attempt.passed), None)

    @property
    def passed_mode(self) -> PrecisionMode | None:
        """The precision mode whose `.om` passed; None when none did."""
        attempt = self.passed_attempt
        return None if attempt is None else attempt.mode

    def as_dict(self) -> dict[str, Any]:
        mode = self.passed_mode
        attempt = self.passed_attempt
        return {
            "passed_mode": None if mode is None else mode.value,
            "fp32_operators": [] if attempt is None else list(attempt.fp32_operators),
            "attempts": [attempt.as_dict() for attempt in self.attempts],
        }


def ladder_from(start: PrecisionMode) -> list[PrecisionMode]:
    """The modes to try from `start`: `ascend.PRECISION_LADDER` from it upward; a mode off the
    ladder (`force_fp32`) alone."""
    if start not in PRECISION_LADDER:
        return [start]
    return list(PRECISION_LADDER[PRECISION_LADDER.index(start) :])


# Modes whose failure an FP32 island can mend: those that compute some operators in FP16.
ISLAND_MODES = frozenset(PRECISION_LADDER) - {PrecisionMode.MUST_KEEP_ORIGIN_DTYPE}


def climb_ladder(
    start: PrecisionMode,
    compile_at: Callable[[PrecisionMode, Sequence[str]], Path],
    check: Callable[[Path], AccuracyResult],
    *,
    island: Callable[[], Sequence[str]] | None = None,
    label: str | None = None,
) -> LadderResult:
    """Compile at each mode of `ladder_from(start)` and check the `.om`, up to the first that
    passes. When `start` fails, `island()` names the operators to keep in FP32 (the smallest
    set: those whose FP16 values overflow) and `start` is compiled again keeping them; the
    ladder climbs on only when that fails too. A compile error (a `UserError`, as ATC's and the
    emulator's are) is recorded and the ladder goes on. `label` names the model in the log
    (default: the `.om`'s file name)."""
    attempts: list[LadderAttempt] = []

    def attempt(mode: PrecisionMode, keep: Sequence[str]) -> bool:
        try:
            om = compile_at(mode, keep)
        except UserError as exc:
            logger.warning("%s: compiling at precision mode %s failed: %s", label, mode, exc)
            attempts.append(LadderAttempt(mode, None, None, str(exc), tuple(keep)))
            return False
        result = check(om)
        attempts.append(LadderAttempt(mode, om, result, fp32_operators=tuple(keep)))
        kept = f" with {len(keep)} operators in FP32" if keep else ""
        if result.passed:
            logger.info("%s passes the accuracy gate at %s%s", label or om.name, mode, kept)
            return True
        failed = ", ".join(
            f"{output.name} ({output.problem or output.worst})"
            for output in result.outputs
            if not output.passed
        )
        logger.warning(
            "%s fails the accuracy gate at %s%s on %s", label or om.name, mode, kept, failed
        )
        return False

    for mode in ladder_from(start):
        if attempt(mode, ()):
            break
        if mode == start and island is not None and mode in ISLAND_MODES:
            keep = list(island())
            if keep and attempt(mode, keep):
                break
    return LadderResult(attempts)


FLOAT16_MAX = float(np.finfo(np.float16).max)


def overflowing_operators(onnx_path: Path, inputs: Sequence[InputSet]) -> list[str]:
    """The nodes of the ONNX (by name, in graph order) that read or write a float value beyond
    float16's range (65504) when onnxruntime runs `inputs` in FP32: in FP16 those values are
    inf, so these operators are the FP32 island ATC's --keep_dtype keeps. Weights are left out
    (ATC's fusions fold or keep them); nodes without a name cannot be listed and are logged."""
    import onnx
    import onnxruntime

    model = onnx.load(str(onnx_path))
    weights = {item.name for item in model.graph.initializer}
    listed = {item.name for item in model.graph.output}
    for node in model.graph.node:
        for name in node.output:
            if name and name not in listed:
                model.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
                listed.add(name)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    names = [item.name for item in session.get_outputs()]
    largest: dict[str, float] = {}
    for input_set in inputs:
        for name, value in zip(names, session.run(None, dict(input_set.arrays))):
            array = np.asarray(value)
            if array.dtype.kind == "f" and array.size:
                peak = float(np.abs(array.astype(np.float64)).max())
                largest[name] = max(peak, largest.get(name, 0.0))
        for item in session.get_inputs():
            array = np.asarray(input_set.arrays.get(item.name, np.zeros(0)))
            if array.dtype.kind == "f" and array.size:
                largest[item.name] = float(np.abs(array).max())
    island = []
    for node in model.graph.node:
        tensors = [name for name in (*node.input, *node.output) if name and name not in weights]
        if any(largest.get(name, 0.0) > FLOAT16_MAX for name in tensors):
            if node.name:
                island.append(node.name)
            else:
                logger.warning(
                    "%s: an unnamed %s node overflows float16", onnx_path.name, node.op_type
                )
    return island


# Operators that compute no float values of their own: never worth keeping in FP32.
_NO_ARITHMETIC = frozenset(
    {"Constant", "ConstantOfShape", "Shape", "Size", "Cast", "Identity", "Reshape", "Squeeze"}
    | {"Unsqueeze", "Flatten", "Transpose", "Gather", "Slice", "Concat", "Split", "Expand"}
)


def float_operators(onnx_path: Path) -> list[str]:
    """The named nodes of the ONNX that compute (the bisection's candidates), in graph order."""
    import onnx

    model = onnx.load(str(onnx_path), load_external_data=False)
    return [
        node.name for node in model.graph.node if node.name and node.op_type not in _NO_ARITHMETIC
    ]


class _BudgetSpent(Exception):
    pass


def bisect_island(
    candidates: Sequence[str], passes: Callable[[Sequence[str]], bool], budget: int
) -> list[str]:
    """The smallest set of `candidates` found whose keeping in FP32 `passes`, by bisection over
    the graph (keep one half; else the other; else both, each shrunk in turn) in at most
    `budget` checks; [] when keeping them all fails or the budget runs out."""
    spent = 0

    def check(keep: Sequence[str]) -> bool:
        nonlocal spent
        if spent >= budget:
            raise _BudgetSpent
        spent += 1
        return passes(keep)

    def shrink(kept: list[str], part: list[str]) -> list[str]:
        if len(part) <= 1:
            return part
        first, second = part[: len(part) // 2], part[len(part) // 2 :]
        if check(kept + first):
            return shrink(kept, first)
        if check(kept + second):
            return shrink(kept, second)
        found = shrink(kept + second, first)
        return found + shrink(kept + found, second)

    try:
        if not candidates or not check(list(candidates)):
            return []
        found = shrink([], list(candidates))
    except _BudgetSpent:
        logger.warning("the FP32 island's bisection stopped after %d checks", budget)
        return []
    order = {name: index for index, name in enumerate(candidates)}
    return sorted(found, key=order.__getitem__)


def write_keep_dtype(path: Path, operators: Sequence[str]) -> Path:
    """ATC's --keep_dtype file: one operator name a line (CANN's ATC parameter page
    atlasatcparam_16_0074; `OpType::Type` lines would name types). ATC ignores it under
    must_keep_origin_dtype, where every operator keeps its type anyway."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name}\n" for name in operators))
    return path
