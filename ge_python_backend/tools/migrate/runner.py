"""Migrate a Triton model repository: every model of SRC_REPO converted or copied into DST_REPO.

ONNX models (and models whose ONNX `--onnx-from` provides) are checked (`preflight`), planned
(`atc.plan_atc`), compiled per version with ATC or the emulator's compiler, and written with
scaffold's model directory (`repository.scaffold`): each version its own `.om`, checksum and
model.py. Python models and ensembles are copied as they are; TensorRT, TorchScript and
TensorFlow models are not converted (the report says which ONNX to provide). SRC_REPO is only
read. `--jobs N` migrates N models at once, each in its own process.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import enum
import itertools
import logging
import multiprocessing
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from ge_python_backend.ascend import ATC_DEFAULT_PRECISION_MODE, PRECISION_LADDER, PrecisionMode
from ge_python_backend.errors import GeBackendError, UserError, command_line_message
from ge_python_backend.progress import Progress
from ge_python_backend.repository.config import first_gear_shapes, write_model_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.runtime.describe import describe_om
from ge_python_backend.tools.compare import Thresholds
from ge_python_backend.tools.migrate.atc import (
    DEFAULT_SOC_VERSION,
    AtcError,
    AtcPlan,
    GearRequest,
    OpenAxis,
    atc_missing_message,
    check_gears_match,
    open_axes,
    plan_atc,
)
from ge_python_backend.tools.migrate.gate import (
    AccuracyResult,
    InputSet,
    LadderAttempt,
    MetricChoice,
    bisect_island,
    check_accuracy,
    climb_ladder,
    float_operators,
    gate_inputs,
    overflowing_operators,
    write_keep_dtype,
)
from ge_python_backend.tools.migrate.preflight import preflight
from ge_python_backend.tools.migrate.rewrite import ConfigRewrite, refusals, rewrite_config
from ge_python_backend.tools.migrate.source import (
    SourceModel,
    SourceVersion,
    model_dirs,
    read_model,
    read_model_dir,
)
from ge_python_backend.tools.probe import ModelProbe, probe_repository

logger = logging.getLogger(__name__)

OM_NAME = "model"  # each version's .om is <version>/model.om
KEEP_DTYPE_FILE = "keep_dtype.cfg"  # the FP32 island, ATC's --keep_dtype, next to the .om
# compiles and checks the bisection for an FP32 island may spend on one model version (a few
# operators out of a thousand take about 2 * log2(1000) per operator)
BISECTION_CHECKS = 40
ONNX_FROM_FILE = "model.onnx"  # --onnx-from DIR/<model>/<version>/model.onnx


class Status(str, enum.Enum):
    """What became of a model."""

    CONVERTED = "converted"  # compiled and written
    PLANNED = "planned"  # --dry-run: would be converted or copied
    COPIED = "copied"  # a Python model or an ensemble, copied as it is
    NEEDS_ONNX = "needs_onnx"  # not convertible as it is: the report says what to provide
    FAILED = "failed"  # convertible, but pre-flight, ATC or writing it failed

    def __str__(self) -> str:
        return str(self.value)


@dataclasses.dataclass(frozen=True)
class MigrateOptions:
    """What `migrate` does (the command line's options)."""

    source: Path
    destination: Path
    runtime: str = "pyacl"
    soc_version: str = DEFAULT_SOC_VERSION
    device_ids: tuple[int, ...] = (0,)
    precision_mode: PrecisionMode = ATC_DEFAULT_PRECISION_MODE
    onnx_from: Path | None = None
    gears: tuple[GearRequest, ...] = ()
    samples: Path | None = None  # inputs of the accuracy gate
    thresholds: Thresholds = Thresholds()  # the accuracy gate's limits
    metrics: tuple[MetricChoice, ...] = ()  # --metric: outputs judged otherwise than by default
    dry_run: bool = False
    jobs: int = 1
    check_serving: bool = False  # then serve DST_REPO once with a throwaway tritonserver
    # the emulator's compiler (`emulator.omfile.compile_onnx`) for --runtime emulator: the
    # command hands it in, so the tools do not import the emulator
    emulator_compiler: Callable[..., Path] | None = None


@dataclasses.dataclass
class VersionResult:
    """One version of a model: its source file and, when converted, its ATC plan and `.om`."""

    number: int
    source_file: Path | None
    source_sha256: str | None
    plan: AtcPlan | None = None
    om: Path | None = None
    om_sha256: str | None = None


@dataclasses.dataclass
class ModelResult:
    """One model of the migration, as the report shows it."""

    name: str
    source_format: str
    action: str  # "convert", "copy" or "provide ONNX"
    status: Status = Status.PLANNED
    versions: list[VersionResult] = dataclasses.field(default_factory=list)
    precision_mode: PrecisionMode = ATC_DEFAULT_PRECISION_MODE
    warnings: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    provide: list[str] = dataclasses.field(default_factory=list)  # files that would convert it
    atc_log_tail: str | None = None
    accuracy: dict[str, object] | None = None  # the accuracy gate's result, per output
    fp32_operators: list[str] = dataclasses.field(default_factory=list)  # the FP32 island
    config_diff: dict[str, object] | None = None  # the config rewrite's kept/rewritten/...

    @property
    def gears(self) -> str | None:
        plans = [v.plan for v in self.versions if v.plan is not None]
        return plans[0].gears_text if plans else None


@dataclasses.dataclass(frozen=True)
class MigrationReport:
    """Every model's result and, with `check_serving`, every model's answer from a throwaway
    tritonserver on DST_REPO; `passed` when every convertible model converted and passed the
    gate, and every model served answered."""

    options: MigrateOptions
    models: tuple[ModelResult, ...]
    serving: tuple[ModelProbe, ...] = ()

    @property
    def passed(self) -> bool:
        converted = all(model.status != Status.FAILED for model in self.models)
        return converted and all(probe.ok for probe in self.serving)


def migrate(options: MigrateOptions, progress: Progress | None = None) -> MigrationReport:
    """Migrate `options.source` into `options.destination` (`dry_run`: plan only, write nothing).

    Refuses (UserError) a destination inside the source or holding one of its models,
    `--runtime pyacl` without ATC on PATH, and a `--gears` naming no axis that needs sizes; a
    model that fails is reported and the others carry on. `progress` gets a line per model.
    """
    _check_options(options)
    paths = model_dirs(options.source)
    if options.gears:
        _check_gears(paths, options)
    if not options.dry_run:
        taken = [p.name for p in paths if (options.destination / p.name).exists()]
        if taken:
            raise UserError(
                f"{options.destination} already holds models {', '.join(taken)}; migrate into "
                "an empty or new directory"
            )
        options.destination.mkdir(parents=True, exist_ok=True)
    progress = progress or Progress(quiet=True)
    results = []
    if options.jobs > 1 and len(paths) > 1:
        context = multiprocessing.get_context("spawn")  # the emulator runs threads: no fork
        workers = min(options.jobs, len(paths))
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
            for result in pool.map(_migrate_dir, paths, [options] * len(paths)):
                results.append(result)
                progress.done(_progress_line(result, len(results), len(paths)))
    else:
        for path in paths:
            progress.begin(f"model {len(results) + 1} of {len(paths)} {path.name!r}: migrating")
            results.append(_migrate_dir(path, options))
            progress.done(_progress_line(results[-1], len(results), len(paths)))
    serving: tuple[ModelProbe, ...] = ()
    if options.check_serving and not options.dry_run:
        runtime = "emulator" if options.runtime == "emulator" else None
        serving = tuple(probe_repository(options.destination, runtime=runtime))
        for probe in serving:
            (logger.info if probe.ok else logger.error)("%s", probe.message)
    return MigrationReport(options, tuple(results), serving)


def _progress_line(result: ModelResult, number: int, total: int) -> str:
    """`model 2 of 5 'resnet': converted (force_fp16)`, or its first error when it failed."""
    line = f"model {number} of {total} {result.name!r}: {result.status}"
    if result.status == Status.CONVERTED:
        return f"{line} ({result.precision_mode.value})"
    if result.status == Status.FAILED and result.errors:
        return f"{line}: {result.errors[0]}"
    return line


def _migrate_dir(path: Path, options: MigrateOptions) -> ModelResult:
    """Read and migrate one model directory (in a worker process with --jobs: configs are
    protobuf messages, which do not pickle, so each worker reads its own)."""
    return migrate_model(read_model_dir(path), options)


def _check_options(options: MigrateOptions) -> None:
    source, destination = options.source.resolve(), options.destination.resolve()
    if not source.is_dir():
        raise UserError(f"source repository {options.source} is not a directory")
    if destination == source or source in destination.parents or destination in source.parents:
        raise UserError(
            f"the destination {options.destination} must lie outside the source repository "
            f"{options.source} (and not hold it): migrate never writes into the source"
        )
    for flag, path in (("--onnx-from", options.onnx_from), ("--samples", options.samples)):
        if path is not None and not path.is_dir():
            raise UserError(f"{flag} {path} is not a directory")
    if options.jobs < 1:
        raise UserError(f"--jobs must be >= 1, got {options.jobs}")
    if options.runtime == "pyacl" and not options.dry_run and shutil.which("atc") is None:
        raise UserError(atc_missing_message())
    if options.runtime == "emulator" and not options.dry_run and options.emulator_compiler is None:
        raise UserError(
            "--runtime emulator needs the emulator's compiler: pass "
            "emulator_compiler=ge_python_backend.emulator.omfile.compile_onnx"
        )


def migrate_model(model: SourceModel, options: MigrateOptions) -> ModelResult:
    """Convert, copy or report one model (never raises for the model's own problems)."""
    fmt = model.format
    action = "convert" if fmt.converted else "copy" if fmt.copied else "provide ONNX"
    result = ModelResult(
        model.name,
        str(fmt),
        action,
        versions=[VersionResult(v.number, v.model_file, v.sha256) for v in model.versions],
        precision_mode=options.precision_mode,
        warnings=list(model.warnings),
    )
    if model.error is not None:
        return _failed(result, model.error)
    if fmt.copied:
        if not options.dry_run:
            shutil.copytree(
                model.path,
                options.destination / model.name,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
            result.status = Status.COPIED
        return result
    if not model.versions:
        return _failed(result, f"model {model.name!r} has no version directory")
    if fmt.converted:
        missing = [v for v in model.versions if v.model_file is None]
        if missing:
            return _failed(
                result,
                f"model {model.name!r}: version {missing[0].number} has no "
                f"{model.config.default_model_filename or fmt.default_file}",
            )
        return _convert(model, _onnx_files(model, options), options, result)
    given = _onnx_files(model, options)
    if given and len(given) == len(model.versions):
        result.action = f"convert the ONNX from --onnx-from {options.onnx_from}"
        return _convert(model, given, options, result)
    result.status = Status.NEEDS_ONNX
    result.provide = [
        str(_onnx_from(options, model, v)) for v in model.versions if v.number not in given
    ]
    logger.info("model %s (%s): not converted; provide %s", model.name, fmt, result.provide)
    return result


def _onnx_files(model: SourceModel, options: MigrateOptions) -> dict[int, Path]:
    """The ONNX file of each version of `model` there is one for: its own (an ONNX model), else
    `--onnx-from`'s (a model not in ONNX is converted when there is one for every version)."""
    if model.format.converted:
        return {v.number: v.model_file for v in model.versions if v.model_file is not None}
    if options.onnx_from is None:
        return {}
    wanted = {v.number: _onnx_from(options, model, v) for v in model.versions}
    return {number: path for number, path in wanted.items() if path.is_file()}


def _check_gears(paths: Sequence[Path], options: MigrateOptions) -> None:
    """Refuse (UserError) a `--gears` that names no axis needing sizes in the ONNX of any model
    of `paths` it applies to, before anything compiles (`atc.check_gears_match`). A model that
    cannot be read is left to its own migration, which reports why."""
    import onnx

    axes: dict[str, list[OpenAxis]] = {}
    for path in paths:
        try:
            model = read_model(path)
        except GeBackendError as exc:
            logger.debug("--gears check: model %s skipped: %s", path.name, exc)
            continue
        found = axes.setdefault(model.name, [])
        for onnx_path in _onnx_files(model, options).values():
            try:
                proto = onnx.load(str(onnx_path), load_external_data=False)
            except Exception as exc:  # onnx raises protobuf's DecodeError and others
                logger.debug("--gears check: %s skipped: %s", onnx_path, exc)
                continue
            found.extend(open_axes(proto, model.config))
    check_gears_match(options.gears, axes)


def _onnx_from(options: MigrateOptions, model: SourceModel, version: SourceVersion) -> Path:
    root = options.onnx_from if options.onnx_from is not None else Path("DIR")
    return root / model.name / str(version.number) / ONNX_FROM_FILE


def _failed(result: ModelResult, *errors: str) -> ModelResult:
    result.status = Status.FAILED
    result.errors.extend(errors)
    for error in errors:
        logger.error("%s", error)
    return result


def _convert(
    model: SourceModel, onnx_files: dict[int, Path], options: MigrateOptions, result: ModelResult
) -> ModelResult:
    """Pre-flight and plan every version; unless a dry run, compile and write them."""
    import onnx

    problems = []
    for version in result.versions:
        path = onnx_files[version.number]
        try:
            proto = onnx.load(str(path), load_external_data=False)
        except Exception as exc:  # onnx raises protobuf's DecodeError and others
            problems.append(f"model {model.name!r}: {path} is not a readable ONNX model: {exc}")
            continue
        found = preflight(model.name, proto, model.config, options.gears) + [
            f"config field {change.field}: {change.detail}" for change in refusals(model.config)
        ]
        if found:
            problems.extend(f"version {version.number}: {problem}" for problem in found)
            continue
        output = options.destination / model.name / str(version.number) / OM_NAME
        try:
            version.plan = plan_atc(
                model.name,
                path.resolve(),
                proto,
                model.config,
                output,
                soc_version=options.soc_version,
                precision_mode=options.precision_mode,
                gears=options.gears,
            )
        except UserError as exc:
            problems.append(f"version {version.number}: {command_line_message(exc)}")
    if problems:
        return _failed(result, *problems)
    if options.dry_run:
        return result
    staging = Path(tempfile.mkdtemp(prefix=f".migrate-{model.name}-", dir=options.destination))
    try:
        staged = {}
        ungated = []
        for version in result.versions:
            where = f"model {model.name!r} version {version.number}"
            try:
                attempt = _compile_and_gate(
                    model, version, onnx_files[version.number], staging, options, result
                )
            except UserError as exc:  # the gate's inputs could not be made or run
                return _failed(result, f"{where}: {command_line_message(exc)}")
            if attempt is None:
                return _failed(result, f"{where}: no precision mode compiled (see the ATC log)")
            if not attempt.passed:
                ungated.append(version.number)
            assert attempt.om is not None  # kept attempts compiled
            staged[version.number] = attempt.om
        result.precision_mode = max(
            (v.plan.precision_mode for v in result.versions if v.plan is not None),
            key=_ladder_rank,
        )
        try:
            _write_model(model, result, staged, options)
        except UserError as exc:
            shutil.rmtree(options.destination / model.name, ignore_errors=True)
            return _failed(result, f"model {model.name!r}: {command_line_message(exc)}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if ungated:
        return _failed(
            result,
            f"model {model.name!r} version(s) {', '.join(map(str, ungated))}: no precision mode "
            f"passed the accuracy gate ({options.thresholds}); written at the last mode tried",
        )
    result.status = Status.CONVERTED
    return result


def _ladder_rank(mode: PrecisionMode) -> int:
    """How far up the precision ladder `mode` is (a mode off the ladder: above it)."""
    return PRECISION_LADDER.index(mode) if mode in PRECISION_LADDER else len(PRECISION_LADDER)


def _compile_and_gate(
    model: SourceModel,
    version: VersionResult,
    onnx_path: Path,
    staging: Path,
    options: MigrateOptions,
    result: ModelResult,
) -> LadderAttempt | None:
    """Compile `version` at `options.precision_mode` and check it against its ONNX, climbing
    the precision ladder until a mode passes. Records the ladder in `result.accuracy` and the
    plan of the mode kept in `version.plan`; returns the attempt kept: the one that passed, else
    the last that compiled (None when none did)."""
    plan = version.plan
    assert plan is not None
    inputs: list[InputSet] = []
    log_tails: list[str] = []  # of the compiles that failed

    islands = itertools.count(1)
    # an island tried while searching is not compiled or checked again when the ladder keeps it
    compiles: dict[tuple[PrecisionMode, tuple[str, ...]], Path] = {}
    checked: dict[Path, AccuracyResult] = {}

    def compile_at(mode: PrecisionMode, keep: Sequence[str]) -> Path:
        key = (mode, tuple(keep))
        if key not in compiles:
            compiles[key] = compile_new(mode, keep)
        return compiles[key]

    def compile_new(mode: PrecisionMode, keep: Sequence[str]) -> Path:
        # each island its own directory: a loaded .om is not written over
        suffix = f"-island{next(islands)}" if keep else ""
        where = staging / str(version.number) / (mode.value + suffix)
        keep_file = write_keep_dtype(where / KEEP_DTYPE_FILE, keep) if keep else None
        staged = (
            plan.with_precision_mode(mode).with_keep_dtype(keep_file).with_output(where / OM_NAME)
        )
        try:
            if options.emulator_compiler is not None:  # --runtime emulator (checked)
                return staged.compile_emulator(options.emulator_compiler)
            return staged.run_atc()
        except AtcError as exc:
            log_tails.append(exc.log_tail)
            raise
        except UserError as exc:  # the emulator's compiler: its message is ATC's log
            log_tails.append(command_line_message(exc))
            raise

    def check(om: Path) -> AccuracyResult:
        if not inputs:  # made once, with the -1 sizes of the first .om's first gear
            inputs.extend(_gate_inputs(model, onnx_path, om, options))
        if om not in checked:
            checked[om] = check_accuracy(
                onnx_path,
                om,
                inputs,
                options.thresholds,
                runtime=options.runtime,
                metrics=options.metrics,
                model=model.name,
            )
        return checked[om]

    def passes(keep: Sequence[str]) -> bool:
        try:
            return check(compile_at(options.precision_mode, keep)).passed
        except UserError as exc:
            logger.info("%s: an island of %d operators failed: %s", label, len(keep), exc)
            return False

    def island() -> list[str]:
        """The operators whose FP16 values overflow when keeping them passes, else the
        bisection's island over the graph ([] when none passes)."""
        found = overflowing_operators(onnx_path, inputs)
        if found and passes(found):
            return found
        return bisect_island(float_operators(onnx_path), passes, BISECTION_CHECKS)

    label = f"model {model.name!r} version {version.number}"
    ladder = climb_ladder(options.precision_mode, compile_at, check, island=island, label=label)
    accuracy = result.accuracy if result.accuracy is not None else {}
    accuracy[str(version.number)] = ladder.as_dict()
    result.accuracy = accuracy
    compiled = [attempt for attempt in ladder.attempts if attempt.om is not None]
    kept = ladder.passed_attempt or (compiled[-1] if compiled else None)
    if kept is None:  # no mode compiled: the report shows the last ATC log
        result.atc_log_tail = log_tails[-1]
    else:
        staged_om = kept.om if kept.fp32_operators else None
        keep_file = None if staged_om is None else staged_om.parent / KEEP_DTYPE_FILE
        version.plan = plan.with_precision_mode(kept.mode).with_keep_dtype(keep_file)
        result.fp32_operators = list(kept.fp32_operators)
    return kept


def _gate_inputs(
    model: SourceModel, onnx_path: Path, om: Path, options: MigrateOptions
) -> list[InputSet]:
    """The gate's inputs for `model`: its warmups, its samples (`--samples DIR/<model>`, when
    that directory exists) and random sets, whose -1 sizes come from the `.om`'s first gear."""
    description = describe_om(om, options.runtime)
    batched = model.config.max_batch_size > 0
    dims = {
        spec.name: shape[1:] if batched else shape
        for spec, shape in zip(
            description.inputs, first_gear_shapes(description.inputs, description.gears)
        )
    }
    samples = None if options.samples is None else options.samples / model.name
    return gate_inputs(
        model.path,
        model.config,
        onnx_path,
        samples=samples if samples is not None and samples.is_dir() else None,
        dims=dims,
    )


def _write_model(
    model: SourceModel, result: ModelResult, staged: dict[int, Path], options: MigrateOptions
) -> None:
    """DST_REPO/<model>/: the first version with its config, rewritten from the source config
    (`rewrite.rewrite_config`) with the files it names copied, then the other versions."""
    for index, version in enumerate(result.versions):
        written = scaffold(
            staged[version.number],
            options.destination,
            name=model.name,
            version=version.number,
            device_ids=options.device_ids,
            runtime=options.runtime,
        )
        if index == 0:
            rewrite = rewrite_config(model.config, written.config, device_ids=options.device_ids)
            result.config_diff = _config_diff(rewrite)
            if not rewrite.convertible:
                refused = "; ".join(f"{c.field}: {c.detail}" for c in rewrite.refused)
                raise UserError(f"its config cannot be served from the .om: {refused}")
            for relative in rewrite.files:
                target = written.model_dir / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(model.path / relative, target)
            write_model_config(rewrite.config, written.config_path)
        version.om = written.om_path
        version.om_sha256 = written.om_sha256
        if version.plan is not None and version.plan.keep_dtype is not None:
            # the island's file next to the .om, as the printed atc command names it
            keep_file = written.om_path.parent / KEEP_DTYPE_FILE
            shutil.copy2(version.plan.keep_dtype, keep_file)
            version.plan = version.plan.with_keep_dtype(keep_file)


def _config_diff(rewrite: ConfigRewrite) -> dict[str, object]:
    """Where each source field went, as the report shows it."""
    return {
        kind: [{"field": change.field, "detail": change.detail} for change in changes]
        for kind, changes in (
            ("kept", rewrite.kept),
            ("rewritten", rewrite.rewritten),
            ("dropped", rewrite.dropped),
            ("refused", rewrite.refused),
        )
    }
