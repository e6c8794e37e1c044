"""Check an `.om` against its golden ONNX (and a served model) on the same inputs.

The `.om` runs through a runtime `Session` (pyACL or the emulator), the ONNX through onnxruntime
on the CPU, the served model through tritonclient. Every output is compared with the ONNX output:
max absolute error, max relative error (over elements whose reference magnitude exceeds `atol`)
and cosine similarity, plus top-k agreement for a classifier-like output (`top_k_agreement`).
An output passes when every element satisfies `|x - ref| <= atol + rtol * |ref|` (numpy's
`isclose` rule) and its cosine similarity is at least `min_cosine`; NaN or inf the ONNX output
does not have fails it by itself (`non_finite_problem`); top-k agreement is reported, not judged.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.aipp import AippConfigError, AippOp, bind_static, parse_aipp_config
from ge_python_backend.ascend import DTYPES_BY_NUMPY, Format, tensor_name_of_output
from ge_python_backend.client import (
    TritonClient,
    load_array,
    random_array,
    server_errors,
    server_url,
    typed,
)
from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import first_gear_shapes
from ge_python_backend.repository.model_files import open_session
from ge_python_backend.runtime import GearInfo, InputError, TensorSpec

# onnxruntime's input type ("tensor(float)") -> the numpy dtype to feed it.
_ONNXRUNTIME_DTYPES = {t.onnxruntime_type: t.numpy for t in DTYPES_BY_NUMPY.values()}
# onnxruntime's input type ("tensor(float)") -> its `ascend.DataType`.
DATA_TYPES_BY_ONNXRUNTIME = {t.onnxruntime_type: t for t in DTYPES_BY_NUMPY.values()}


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """When an output passes: every element within `atol + rtol * |ref|`, cosine >= min_cosine.

    The defaults suit an NPU computing in float16 against a float32 ONNX.
    """

    atol: float = 1e-2
    rtol: float = 1e-2
    min_cosine: float = 0.99


@dataclasses.dataclass(frozen=True)
class TopKAgreement:
    """Of `rows` rows of a classifier-like output, how many have the ONNX output's top-1 class
    and the same set of top-5 classes (`top5` None with 5 classes or fewer: always the same)."""

    rows: int
    top1: int
    top5: int | None

    def __add__(self, other: TopKAgreement) -> TopKAgreement:
        top5 = None if self.top5 is None or other.top5 is None else self.top5 + other.top5
        return TopKAgreement(self.rows + other.rows, self.top1 + other.top1, top5)

    @property
    def top1_fraction(self) -> float:
        return self.top1 / self.rows

    @property
    def top5_fraction(self) -> float | None:
        return None if self.top5 is None else self.top5 / self.rows


def top_k_agreement(value: np.ndarray, reference: np.ndarray) -> TopKAgreement | None:
    """Top-1 and top-5 agreement of a classifier-like output: floating point, 2-D
    `[rows, classes]` with at least one row and 2 classes, the same shape as the ONNX output's;
    None for any other output."""
    if (
        value.shape != reference.shape
        or value.ndim != 2
        or value.dtype.kind != "f"
        or value.shape[0] < 1
        or value.shape[1] < 2
    ):
        return None
    rows, classes = value.shape
    x = value.astype(np.float64)
    ref = reference.astype(np.float64)
    top1 = int(np.count_nonzero(x.argmax(axis=1) == ref.argmax(axis=1)))
    if classes <= 5:
        return TopKAgreement(rows, top1, None)
    mine = np.sort(np.argpartition(-x, 4, axis=1)[:, :5], axis=1)
    theirs = np.sort(np.argpartition(-ref, 4, axis=1)[:, :5], axis=1)
    return TopKAgreement(rows, top1, int(np.count_nonzero((mine == theirs).all(axis=1))))


@dataclasses.dataclass(frozen=True)
class OutputComparison:
    """One output of one target (`om` or `served`) against the ONNX output."""

    target: str
    name: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    cosine: float
    mismatched: int  # elements outside atol + rtol * |ref|
    passed: bool
    problem: str = ""  # shape mismatch, missing output, NaN or inf (`non_finite_problem`)
    top_k: TopKAgreement | None = None  # for a classifier-like output (`top_k_agreement`)


@dataclasses.dataclass(frozen=True)
class CompareReport:
    """The inputs sent and every output comparison."""

    inputs: dict[str, np.ndarray]
    comparisons: list[OutputComparison]
    thresholds: Thresholds

    @property
    def passed(self) -> bool:
        return all(item.passed for item in self.comparisons)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two flattened arrays; 1.0 when both are all zeros."""
    x = a.reshape(-1).astype(np.float64)
    y = b.reshape(-1).astype(np.float64)
    norms = float(np.linalg.norm(x)) * float(np.linalg.norm(y))
    if norms == 0.0:
        return 1.0 if not x.any() and not y.any() else 0.0
    return float(np.dot(x, y) / norms)


def compare_arrays(
    target: str, name: str, value: np.ndarray, reference: np.ndarray, thresholds: Thresholds
) -> OutputComparison:
    """Errors of `value` against `reference`. NaN or inf in `value` where the reference does
    not hold the same is a failure of its own, named in `problem`: the statistics then cover
    the elements finite in both (NaN when there are none: no statistic, never a perfect one)."""
    if value.shape != reference.shape:
        return OutputComparison(
            target,
            name,
            tuple(value.shape),
            math.nan,
            math.nan,
            math.nan,
            int(reference.size),
            False,
            f"shape {list(value.shape)} but the ONNX output is {list(reference.shape)}",
        )
    x = value.astype(np.float64)
    ref = reference.astype(np.float64)
    mismatched = int(
        np.count_nonzero(
            ~np.isclose(x, ref, rtol=thresholds.rtol, atol=thresholds.atol, equal_nan=True)
        )
    )
    problem = non_finite_problem(x, ref)
    finite = np.isfinite(x) & np.isfinite(ref)
    if not finite.any():
        max_abs = max_rel = cosine = math.nan
    else:
        diff = np.abs(x[finite] - ref[finite])
        magnitude = np.abs(ref[finite])
        large = magnitude > thresholds.atol
        max_abs = float(diff.max())
        max_rel = float((diff[large] / magnitude[large]).max()) if large.any() else 0.0
        cosine = cosine_similarity(x[finite], ref[finite])
    passed = not problem and mismatched == 0 and cosine >= thresholds.min_cosine
    return OutputComparison(
        target,
        name,
        tuple(value.shape),
        max_abs,
        max_rel,
        cosine,
        mismatched,
        passed,
        problem,
        top_k_agreement(value, reference),
    )


def non_finite_problem(value: np.ndarray, reference: np.ndarray) -> str:
    """The NaN and inf `value` holds where `reference` (same shape, numbers) holds no such
    value: "NaN in 12 and inf in 3 of 100 elements, where the ONNX output has none"; "" when
    there are none. An inf of the reference's sign at the same element (a mask) is an answer,
    not a failure; NaN is one only where the reference has NaN too."""
    nan = np.isnan(value) & ~np.isnan(reference)
    inf = np.isinf(value) & (value != reference)
    if not nan.any() and not inf.any():
        return ""
    counts = [
        f"{kind} in {int(np.count_nonzero(mask))}"
        for kind, mask in (("NaN", nan), ("inf", inf))
        if mask.any()
    ]
    return f"{' and '.join(counts)} of {value.size} elements, where the ONNX output has none"


def default_shapes(
    inputs: Sequence[TensorSpec], gears: GearInfo
) -> dict[str, tuple[int, ...] | None]:
    """Input shapes of the model's first gear (`config.first_gear_shapes`); None for an input
    left with a dynamic axis."""
    return {
        spec.name: None if any(dim < 0 for dim in shape) else tuple(shape)
        for spec, shape in zip(inputs, first_gear_shapes(inputs, gears))
    }


def make_inputs(
    inputs: Sequence[TensorSpec],
    gears: GearInfo,
    shapes: Mapping[str, tuple[int, ...]],
    files: Mapping[str, Path],
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """One array per model input: from `files`, else random of `shapes` or the first gear.

    In a batched model, inputs left to the defaults take the rows of the inputs given.
    """
    names = [spec.name for spec in inputs]
    unknown = sorted((set(shapes) | set(files)) - set(names))
    if unknown:
        raise UserError(f"the .om has no input {', '.join(unknown)} (inputs: {', '.join(names)})")
    defaults = default_shapes(inputs, gears)
    arrays = {
        name: load_array(name, path, next(s for s in inputs if s.name == name).triton_dtype)
        for name, path in files.items()
    }
    given = [*shapes.values(), *(array.shape for array in arrays.values())]
    rng = np.random.default_rng(seed)
    for spec in inputs:
        if spec.name in arrays:
            continue
        shape = shapes.get(spec.name) or defaults[spec.name]
        if shape is not None and gears.batched and given and given[0]:
            shape = (given[0][0], *shape[1:])  # the rows of the inputs that were given
        if shape is None:
            example = ",".join("1" if dim < 0 else str(dim) for dim in spec.shape)
            raise UserError(
                f"input {spec.name!r} has dynamic axes {list(spec.shape)}; give its shape, "
                f"e.g. --shape {spec.name}:{example}"
            )
        arrays[spec.name] = random_array(spec.triton_dtype, shape, rng)
    return arrays


class OnnxReference:
    """onnxruntime (CPU) on one ONNX file, loaded once, run on any number of feeds."""

    def __init__(self, onnx_path: Path):
        import onnxruntime

        self.path = onnx_path
        try:
            self._session = onnxruntime.InferenceSession(
                str(onnx_path), providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types for bad files
            raise UserError(f"onnxruntime cannot load {onnx_path}: {exc}") from None

    @property
    def inputs(self) -> list[Any]:
        """onnxruntime's `NodeArg` of every graph input (`name`, `type`, `shape`)."""
        return list(self._session.get_inputs())

    def run(
        self, feeds: Mapping[str, np.ndarray], aipp: Mapping[str, AippOp] | None = None
    ) -> dict[str, np.ndarray]:
        """Every output for `feeds`, cast to the ONNX input types (`aipp`: see `run_onnx`)."""
        onnx_inputs = {item.name: item.type for item in self.inputs}
        if set(onnx_inputs) != set(feeds):
            raise UserError(
                f"{self.path} takes inputs {sorted(onnx_inputs)} but the .om takes {sorted(feeds)}"
            )
        if aipp:
            shapes = {item.name: item.shape for item in self.inputs}
            feeds = {
                name: _through_aipp(aipp[name], array, shapes[name], onnx_inputs[name])
                if name in aipp
                else array
                for name, array in feeds.items()
            }
        cast = {
            name: array.astype(_ONNXRUNTIME_DTYPES.get(onnx_inputs[name], array.dtype), copy=False)
            for name, array in feeds.items()
        }
        names = [item.name for item in self._session.get_outputs()]
        try:
            values = self._session.run(names, cast)
        except Exception as exc:
            raise UserError(f"onnxruntime failed on {self.path}: {exc}") from None
        return {name: np.asarray(value) for name, value in zip(names, values)}


def run_onnx(
    onnx_path: Path, feeds: Mapping[str, np.ndarray], aipp: Mapping[str, AippOp] | None = None
) -> dict[str, np.ndarray]:
    """Outputs of the ONNX model on the CPU; inputs are cast to the ONNX input types. An input
    in `aipp` holds the raw bytes of a static-AIPP `.om` input: the ONNX gets what the AIPP steps
    make of them (`aipp.StaticAipp.apply`, image by image)."""
    return OnnxReference(onnx_path).run(feeds, aipp)


def _through_aipp(op: AippOp, raw: np.ndarray, shape: Sequence[Any], type_name: str) -> np.ndarray:
    """What the AIPP steps of `op` feed an ONNX input of `shape` (NCHW, as ONNX and ATC's
    default --input_format) from the raw images `raw` (one per row). H and W are the AIPP
    output's (crop, else the source, plus padding: ATC requires them to be the model's)."""
    data_type = DATA_TYPES_BY_ONNXRUNTIME.get(type_name)
    channels = shape[1] if len(shape) == 4 else None
    if data_type is None or not isinstance(channels, int) or channels <= 0:
        raise UserError(f"the ONNX input {shape} ({type_name}) is no NCHW image input for AIPP")
    height = (op.crop_size_h if op.crop else op.src_image_size_h) + (
        op.top_padding_size + op.bottom_padding_size
    )
    width = (op.crop_size_w if op.crop else op.src_image_size_w) + (
        op.left_padding_size + op.right_padding_size
    )
    dims = (1, channels, height, width)
    try:
        bound = bind_static(op, dims, Format.NCHW, data_type)
        return np.concatenate([bound.apply(image) for image in raw])
    except (AippConfigError, ValueError) as exc:
        raise UserError(f"the AIPP config does not fit the ONNX input: {exc}") from None


def aipp_ops(path: Path | None) -> list[AippOp]:
    """The aipp_op blocks of `--aipp-config` (none without it)."""
    if path is None:
        return []
    try:
        return parse_aipp_config(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read --aipp-config {path}: {exc.strerror or exc}") from None
    except AippConfigError as exc:
        raise UserError(f"--aipp-config {path}: {exc}") from None


def run_om(
    om_path: Path,
    runtime: str | None,
    device_id: int,
    shapes: Mapping[str, tuple[int, ...]],
    files: Mapping[str, Path],
    seed: int,
    input_shape_order: Sequence[str] | None = None,
    aipp_config: Path | None = None,
    max_output_bytes: int | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, AippOp]]:
    """(inputs, outputs, AIPP op by input name) of one run of the `.om` through a runtime
    `Session`; a data-dependent output comes with its real shape, which the comparison checks
    against the ONNX output's. An AIPP input needs `aipp_config`, the aipp.cfg the `.om` was
    compiled with (a dynamic-AIPP model: the parameters to serve it with): pyACL reports only
    part of the CSC matrix (`get_first_aipp_info`)."""
    if not om_path.is_file():
        raise UserError(f".om file {om_path} does not exist")
    ops = aipp_ops(aipp_config)
    with open_session(
        om_path, runtime, input_shape_order, device_id, aipp_config, max_output_bytes
    ) as session:
        names = [spec.name for spec in session.inputs]
        by_name = {
            names[op.related_input_rank]: op for op in ops if op.related_input_rank < len(names)
        }
        missing = sorted(set(session.aipp) - set(by_name))
        if missing:
            raise UserError(
                f"{om_path.name} has AIPP on {', '.join(missing)}: give --aipp-config, the "
                "aipp.cfg it was compiled with (the ONNX reference runs the same AIPP steps)"
            )
        feeds = make_inputs(session.inputs, session.gears, shapes, files, seed)
        try:
            outputs = session.infer(feeds)
        except InputError as exc:
            raise UserError(f"the inputs do not fit {om_path.name}: {exc}") from None
    return feeds, outputs, by_name


def run_served(
    url: str, protocol: str, model: str, feeds: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Outputs of a model served by Triton for one request carrying `feeds`."""
    url = server_url(url, protocol)
    with server_errors(url, protocol, model), TritonClient(url, protocol) as client:
        names = [item["name"] for item in client.model_metadata(model).get("outputs", [])]
        return client.infer(model, typed(feeds), names)


def match_outputs(names: Sequence[str], reference_names: Sequence[str]) -> dict[str, str]:
    """For each output name, the ONNX output it is: the same name, else the tensor name of ATC's
    `node:index:tensor` form (`ascend.tensor_name_of_output`), else the ONNX output at the same
    position."""
    matched: dict[str, str] = {}
    for position, name in enumerate(names):
        tail = tensor_name_of_output(name)
        if name in reference_names:
            matched[name] = name
        elif tail in reference_names:
            matched[name] = tail
        elif len(names) == len(reference_names):
            matched[name] = reference_names[position]
    return matched


def compare_outputs(
    target: str,
    outputs: Mapping[str, np.ndarray],
    reference: Mapping[str, np.ndarray],
    thresholds: Thresholds,
) -> list[OutputComparison]:
    """One comparison per output of `target`; an output without an ONNX match fails."""
    matched = match_outputs(list(outputs), list(reference))
    results = []
    for name, array in outputs.items():
        if name not in matched:
            results.append(
                OutputComparison(
                    target,
                    name,
                    tuple(array.shape),
                    math.nan,
                    math.nan,
                    math.nan,
                    int(array.size),
                    False,
                    f"no ONNX output matches (ONNX outputs: {', '.join(reference)})",
                )
            )
            continue
        results.append(compare_arrays(target, name, array, reference[matched[name]], thresholds))
    return results


def compare(
    om_path: Path,
    onnx_path: Path,
    *,
    runtime: str | None = None,
    device_id: int = 0,
    shapes: Mapping[str, tuple[int, ...]] | None = None,
    files: Mapping[str, Path] | None = None,
    seed: int = 0,
    thresholds: Thresholds | None = None,
    url: str | None = None,
    model: str | None = None,
    protocol: str = "http",
    input_shape_order: Sequence[str] | None = None,
    aipp_config: Path | None = None,
    max_output_bytes: int | None = None,
) -> CompareReport:
    """Run the `.om` (with `runtime`; None: the one its container is made for), the ONNX and
    (with `url` and `model`) the served model on the same inputs (AIPP inputs: raw UINT8 to the
    `.om`, the AIPP steps of `aipp_config` to the ONNX)."""
    if (url is None) != (model is None):
        raise UserError("--url and --model go together (the served model to compare)")
    if not onnx_path.is_file():
        raise UserError(f"ONNX file {onnx_path} does not exist")
    limits = thresholds or Thresholds()
    feeds, om_outputs, aipp = run_om(
        om_path,
        runtime,
        device_id,
        shapes or {},
        files or {},
        seed,
        input_shape_order,
        aipp_config,
        max_output_bytes,
    )
    reference = run_onnx(onnx_path, feeds, aipp)
    comparisons = compare_outputs("om", om_outputs, reference, limits)
    if url is not None and model is not None:
        served = run_served(url, protocol, model, feeds)
        comparisons += compare_outputs("served", served, reference, limits)
    return CompareReport(feeds, comparisons, limits)
