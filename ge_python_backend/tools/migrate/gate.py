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
3. `random_sets` random sets of `RANDOM_ROWS` rows (at most `max_batch_size`): floats ~ N(0, 1),
   integers (token ids, indices) in [0, `client.INT_HIGH`).

Arrays are shaped as the config's dims (and `reshape`, when it has one, as the model receives
them). `check_accuracy` runs every set through the `.om` (a runtime `Session`) and the ONNX
(onnxruntime) and folds compare's per-output comparisons over the sets; `climb_ladder` compiles
and checks up `ascend.PRECISION_LADDER` until a mode passes. Each result has a JSON-able
`as_dict` for migration.json.
"""

from __future__ import annotations

import dataclasses
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
    then samples, then random (see the module docstring). `dims` gives the -1 sizes of an input's
    config dims (without the batch axis) for the random sets; without it they take the first
    warmup's or sample's."""
    if random_sets < 0:
        raise UserError(f"random_sets must be >= 0, got {random_sets}")
    inputs = _model_inputs(config, onnx_path)
    batched = config.max_batch_size > 0
    rng = np.random.default_rng(seed)
    sets = _warmup_sets(model_dir, config, inputs, rng)
    if samples is not None:
        sets += _sample_sets(samples, inputs, batched)
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


def _number(value: float) -> float | None:
    """A statistic for JSON: None for NaN (no statistic: a shape mismatch, a missing output)."""
    return None if math.isnan(value) else value


@dataclasses.dataclass(frozen=True)
class OutputAccuracy:
    """One `.om` output over every input set: the largest errors, the lowest cosine, the elements
    outside the tolerance in all, top-k agreement over every row (None unless classifier-like,
    `compare.top_k_agreement`, in every set), passed when it passed on every set, and the worst
    set's origin (a failing set before a passing one, then the most elements outside, then the
    lowest cosine) with its problem (a shape mismatch, no ONNX output)."""

    name: str
    max_abs: float
    max_rel: float
    cosine: float
    mismatched: int
    top_k: TopKAgreement | None
    passed: bool
    worst: str
    problem: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "passed": self.passed,
            "max_abs": _number(self.max_abs),
            "max_rel": _number(self.max_rel),
            "cosine": _number(self.cosine),
            "mismatched": self.mismatched,
            "top1": None if self.top_k is None else self.top_k.top1_fraction,
            "top5": None if self.top_k is None else self.top_k.top5_fraction,
            "worst_input": self.worst,
            "problem": self.problem,
        }


def _extreme(values: Sequence[float], pick: Callable[[list[float]], float]) -> float:
    known = [value for value in values if not math.isnan(value)]
    return pick(known) if known else math.nan


def _over_sets(name: str, results: Sequence[tuple[str, OutputComparison]]) -> OutputAccuracy:
    def badness(result: tuple[str, OutputComparison]) -> tuple[bool, int, float]:
        item = result[1]
        return item.passed, -item.mismatched, -math.inf if math.isnan(item.cosine) else item.cosine

    worst_origin, worst = min(results, key=badness)
    items = [item for _, item in results]
    agreements = [item.top_k for item in items if item.top_k is not None]
    top_k = functools.reduce(operator.add, agreements) if len(agreements) == len(items) else None
    return OutputAccuracy(
        name,
        _extreme([item.max_abs for item in items], max),
        _extreme([item.max_rel for item in items], max),
        _extreme([item.cosine for item in items], min),
        sum(item.mismatched for item in items),
        top_k,
        all(item.passed for item in items),
        worst_origin,
        worst.problem,
    )


@dataclasses.dataclass(frozen=True)
class AccuracyResult:
    """Every output of an `.om` against the ONNX over the input sets (`origins`, in order).
    Top-k agreement is reported, not judged: `thresholds` decide."""

    outputs: list[OutputAccuracy]
    origins: list[str]
    thresholds: Thresholds

    @property
    def passed(self) -> bool:
        return bool(self.outputs) and all(output.passed for output in self.outputs)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "thresholds": dataclasses.asdict(self.thresholds),
            "input_sets": list(self.origins),
            "outputs": [output.as_dict() for output in self.outputs],
        }


def check_accuracy(
    onnx_path: Path,
    om_path: Path,
    inputs: Sequence[InputSet],
    thresholds: Thresholds,
    *,
    runtime: str,
) -> AccuracyResult:
    """Run every input set through the `.om` (a `runtime` Session) and the ONNX (onnxruntime);
    each output compared as `compare` does, folded over the sets (`OutputAccuracy`)."""
    if not inputs:
        raise UserError("the accuracy gate needs at least one input set")
    if not om_path.is_file():
        raise UserError(f".om file {om_path} does not exist")
    reference = OnnxReference(onnx_path)
    by_output: dict[str, list[tuple[str, OutputComparison]]] = {}
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
            for item in compare_outputs("om", outputs, expected, thresholds):
                by_output.setdefault(item.name, []).append((input_set.origin, item))
    result = AccuracyResult(
        [_over_sets(name, results) for name, results in by_output.items()],
        [input_set.origin for input_set in inputs],
        thresholds,
    )
    failed = [output.name for output in result.outputs if not output.passed]
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

    @property
    def passed(self) -> bool:
        return self.result is not None and self.result.passed

    def as_dict(self) -> dict[str, Any]:
        return {
            "precision_mode": self.mode.value,
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
        return {
            "passed_mode": None if mode is None else mode.value,
            "attempts": [attempt.as_dict() for attempt in self.attempts],
        }


def ladder_from(start: PrecisionMode) -> list[PrecisionMode]:
    """The modes to try from `start`: `ascend.PRECISION_LADDER` from it upward; a mode off the
    ladder (`force_fp32`) alone."""
    if start not in PRECISION_LADDER:
        return [start]
    return list(PRECISION_LADDER[PRECISION_LADDER.index(start) :])


def climb_ladder(
    start: PrecisionMode,
    compile_at: Callable[[PrecisionMode], Path],
    check: Callable[[Path], AccuracyResult],
    *,
    label: str | None = None,
) -> LadderResult:
    """Compile at each mode of `ladder_from(start)` and check the `.om`, up to the first that
    passes. A compile error (a `UserError`, as ATC's and the emulator's are) is recorded and the
    ladder goes on. `label` names the model in the log (default: the `.om`'s file name)."""
    attempts = []
    for mode in ladder_from(start):
        try:
            om = compile_at(mode)
        except UserError as exc:
            logger.warning("%s: compiling at precision mode %s failed: %s", label, mode, exc)
            attempts.append(LadderAttempt(mode, None, None, str(exc)))
            continue
        result = check(om)
        attempts.append(LadderAttempt(mode, om, result))
        if result.passed:
            logger.info("%s passes the accuracy gate at precision mode %s", label or om.name, mode)
            break
        failed = ", ".join(output.name for output in result.outputs if not output.passed)
        logger.warning(
            "%s fails the accuracy gate at precision mode %s on %s", label or om.name, mode, failed
        )
    return LadderResult(attempts)
