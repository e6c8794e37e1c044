"""Check a model repository (`ge-python-model validate`), with or without `config.pbtxt`.

Per model: the config (when there is one) parses and names the directory, the parameters pass
`ModelParameters.from_config` (the rules the model instance applies), and every version
directory has `model.py` and exactly one `.om` (or the `om_file` one) whose SHA-256 matches its
`<file>.om.sha256` (else `om_sha256`). Each version's config is then completed as Triton's
auto-complete will (`autocomplete.complete_version`, from the `.om` read without a device) and
compared with the `.om` loaded as the model instance loads it
(`triton_config.compare_config_with_session`; an `image_input` takes JPEG files, `TYPE_STRING`).
A model directory name or repository path that `serve` refuses (`config.check_model_name`,
`check_shell_safe_path`) is refused here too. Problems make a model invalid; notes (what
auto-complete will fill, the `.om` cannot be opened on this machine, an outdated `model.py`, no
checksum, parameters this package does not know) do not.

A repository also holds models that are not ours, and they are checked as Triton checks them:
a Python model with no `.om`, none of our parameters and a `model.py` that does not import
ge-python-backend is someone else's (`KIND_PYTHON`): its config parses and names its directory,
and every version directory has its `model.py` (or `default_model_filename`); what that file does
is not checked. An ensemble (`KIND_ENSEMBLE`) is checked against the other models of the
repository (`ensemble.check_ensemble`: steps, tensor names, data types, shapes). Any Python model
asking for `KIND_GPU` instances is refused, as Triton refuses it on a host without NVIDIA GPUs.
"""

from __future__ import annotations

import os
from pathlib import Path

from ge_python_backend.errors import GeBackendError, UserError, command_line_message
from ge_python_backend.repository.autocomplete import complete_version
from ge_python_backend.repository.config import (
    ConfigError,
    ModelConfig,
    check_model_name,
    check_shell_safe_path,
    config_from_view,
    config_view,
    load_model_config,
)
from ge_python_backend.repository.ensemble import check_ensemble, is_ensemble
from ge_python_backend.repository.model_files import model_template, open_session
from ge_python_backend.repository.parameters import (
    PARAMETER_NAMES,
    ModelParameters,
    describe_unknown_parameter,
    unknown_parameters,
)
from ge_python_backend.repository.report import (
    KIND_ENSEMBLE,
    KIND_PYTHON,
    ModelReport,
)
from ge_python_backend.repository.triton_config import TritonConfig, compare_config_with_session
from ge_python_backend.repository.versions import (
    checksum_path,
    expected_sha256,
    find_om,
    version_dirs,
)
from ge_python_backend.runtime.checksum import file_sha256

# The Python backend's parameter naming a packed Python environment, and its placeholder.
EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY_PLACEHOLDER = "$$TRITON_MODEL_DIRECTORY"


def _read_parameters(report: ModelReport, config: TritonConfig) -> ModelParameters | None:
    """The model's parameters, or None after recording why they are unusable."""
    unknown = unknown_parameters(config)
    if unknown:
        described = ", ".join(map(describe_unknown_parameter, unknown))
        report.notes.append(f"parameters not used by ge-python-backend: {described}")
    try:
        return ModelParameters.from_config(config)
    except ConfigError as exc:
        report.problems.append(str(exc))
        return None


def _check_version(
    report: ModelReport,
    config: TritonConfig,
    params: ModelParameters,
    version_dir: Path,
    runtime: str | None,
) -> None:
    prefix = f"version {version_dir.name}: "
    model_py = version_dir / "model.py"
    if not model_py.is_file():
        report.problems.append(prefix + "model.py is missing")
    elif model_py.read_text(encoding="utf-8") != model_template():
        report.notes.append(prefix + "model.py differs from this ge-python-backend's template")
    try:
        om_path = find_om(version_dir, params.om_file)
        expected = expected_sha256(om_path, params)
    except ConfigError as exc:
        report.problems.append(prefix + str(exc))
        return
    if expected is None:
        report.notes.append(
            prefix
            + f"{om_path.name} is loaded without a checksum (no {checksum_path(om_path).name}"
            " and no om_sha256 parameter)"
        )
    elif file_sha256(om_path) != expected:
        report.problems.append(prefix + f"{om_path.name} does not have the SHA-256 {expected}")
        return
    try:
        completion = complete_version(config, version_dir, runtime)
    except ConfigError as exc:
        report.problems.append(prefix + str(exc))
        return
    except GeBackendError as exc:
        report.notes.append(
            prefix + f"inputs/outputs not checked against the .om: {command_line_message(exc)}"
        )
        return
    if completion.filled:
        report.notes.append(prefix + "auto-complete will fill " + "; ".join(completion.filled))
    report.served_config = config_from_view(completion.config)  # the highest version's last
    try:
        with open_session(
            om_path,
            runtime or params.acl_runtime,
            params.input_shape_order,
            max_output_bytes=params.max_output_bytes,
            image=params.image,
        ) as session:
            problems = compare_config_with_session(
                completion.config, session.inputs, session.outputs, session.gears
            )
    except UserError as exc:
        report.notes.append(
            prefix + f"not loaded to check the config against it: {command_line_message(exc)}"
        )
        return
    report.problems += [prefix + problem for problem in problems]


def _is_ours(config: ModelConfig, versions: list[Path]) -> bool:
    """Whether a Python model serves an `.om` through ge-python-backend: a version directory
    holds an `.om`, the config sets one of our parameters, or a `model.py` imports us."""
    if any(name in config.parameters for name in PARAMETER_NAMES):
        return True
    for version_dir in versions:
        if any(path.suffix == ".om" for path in version_dir.iterdir()):
            return True
        model_py = version_dir / "model.py"
        if model_py.is_file() and "ge_python_backend" in model_py.read_text(errors="replace"):
            return True
    return False


def _instance_group_problems(config: ModelConfig) -> list[str]:
    gpu = [group for group in config.instance_group if group.kind == group.KIND_GPU]
    if not gpu:
        return []
    return [
        "instance_group has kind KIND_GPU: Triton refuses it on a host without NVIDIA GPUs "
        '("has kind KIND_GPU but no GPUs are available"); use KIND_CPU (ours: with the NPUs '
        "in the device_ids parameter)"
    ]


def _check_python_model(
    report: ModelReport, config: ModelConfig, model_dir: Path, versions: list[Path]
) -> None:
    """Triton's checks of someone else's Python model: its file in every version directory
    and a packed environment that exists; the config it serves when it declares its tensors."""
    filename = config.default_model_filename or "model.py"
    for version_dir in versions:
        if not (version_dir / filename).is_file():
            report.problems.append(f"version {version_dir.name}: {filename} is missing")
    environment = config.parameters.get(EXECUTION_ENV_PATH)
    if environment is not None:
        path = Path(environment.string_value.replace(MODEL_DIRECTORY_PLACEHOLDER, str(model_dir)))
        if not path.is_file():
            report.problems.append(
                f"parameter {EXECUTION_ENV_PATH} names {environment.string_value!r}, and "
                f"{path} does not exist"
            )
    if config.input and config.output:
        report.served_config = config
    else:
        report.served_config_unknown = (
            "its config.pbtxt does not declare both inputs and outputs (its model.py's "
            "auto_complete_config gives them)"
        )


def validate_model(model_dir: Path, *, runtime: str | None = None) -> ModelReport:
    """Validate one model directory (with or without config.pbtxt); `runtime` overrides the
    config's `acl_runtime`. An ensemble's steps are checked by `validate_repository`, which
    knows the other models."""
    report = ModelReport(model_dir.name, model_dir)
    try:
        check_model_name(model_dir.name)
    except ConfigError as exc:
        report.problems.append(str(exc))
    config_path = model_dir / "config.pbtxt"
    if config_path.exists():
        try:
            config = load_model_config(config_path)
        except ConfigError as exc:
            report.problems.append(str(exc))
            return report
        if config.name and config.name != model_dir.name:
            report.problems.append(
                f"config name {config.name!r} differs from its directory name {model_dir.name!r}"
            )
    else:
        config = ModelConfig(name=model_dir.name, backend="python")
        report.notes.append("no config.pbtxt: Triton's auto-complete builds the config")
    ensemble = is_ensemble(config)
    if not ensemble:
        if config.backend != "python":
            report.problems.append(f"backend is {config.backend!r}, expected 'python'")
        report.problems += _instance_group_problems(config)
    versions = version_dirs(model_dir)
    report.versions = [path.name for path in versions]
    if not versions:
        report.problems.append("no version directory (e.g. 1/)")
    if ensemble:
        report.kind = KIND_ENSEMBLE
        report.served_config = config
        return report
    if config.backend == "python" and not _is_ours(config, versions):
        report.kind = KIND_PYTHON
        _check_python_model(report, config, model_dir, versions)
        return report
    view = config_view(config)
    params = _read_parameters(report, view)
    if params is None:
        return report
    for version_dir in versions:
        _check_version(report, view, params, version_dir, runtime)
    if report.served_config is None:
        report.served_config_unknown = (
            "its .om could not be read here (see its notes)"
            if report.ok
            else "it is invalid (see its problems)"
        )
    return report


def _check_ensembles(reports: dict[str, ModelReport]) -> None:
    """Check every ensemble among `reports` against the others (its problems and notes), an
    ensemble used as a step before the ensembles using it, so that they see its verdict."""
    checked: set[str] = set()

    def check(report: ModelReport, using: frozenset[str]) -> None:
        if report.name in checked or report.name in using or report.served_config is None:
            return
        for index, step in enumerate(report.served_config.ensemble_scheduling.step):
            inner = reports.get(step.model_name)
            if inner is None or inner.kind != KIND_ENSEMBLE:
                continue
            if inner.name in using | {report.name}:
                report.problems.append(
                    f"step {index} (model {inner.name!r}): the ensemble uses itself through its "
                    "steps; Triton refuses a circular dependency"
                )
            else:
                check(inner, using | {report.name})
        problems, notes = check_ensemble(report.served_config, reports)
        report.problems += problems
        report.notes += notes
        checked.add(report.name)

    for report in reports.values():
        if report.kind == KIND_ENSEMBLE:
            check(report, frozenset())


def validate_repository(
    repository: str | os.PathLike[str], *, name: str | None = None, runtime: str | None = None
) -> list[ModelReport]:
    """Validate every model directory of `repository` (or only `name`, with the models its
    steps use when it is an ensemble); a repository path `serve` would refuse is refused
    (UserError)."""
    root = Path(repository)
    if not root.is_dir():
        raise UserError(f"model repository {root} is not a directory")
    check_shell_safe_path("model repository", root.resolve())
    if name is not None:
        model_dir = root / check_model_name(name)
        if not model_dir.is_dir():
            raise UserError(f"no model {name!r} in {root}")
        report = validate_model(model_dir, runtime=runtime)
        if report.kind == KIND_ENSEMBLE and report.served_config is not None:
            steps = {step.model_name for step in report.served_config.ensemble_scheduling.step}
            present = {path.name for path in root.iterdir() if path.is_dir()}
            reports = {
                step: validate_model(root / step, runtime=runtime)
                for step in sorted(steps & present - {name})
            }
            _check_ensembles({name: report, **reports})
        return [report]
    models = sorted(
        path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")
    )
    if not models:
        raise UserError(f"model repository {root} has no model directories")
    reports = {path.name: validate_model(path, runtime=runtime) for path in models}
    _check_ensembles(reports)
    return list(reports.values())
