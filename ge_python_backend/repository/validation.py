"""Check a model repository (`ge-python-model validate`), with or without `config.pbtxt`.

Per model: the config (when there is one) parses and names the directory, the parameters pass
`ModelParameters.from_config` (the rules the model instance applies), and every version
directory has `model.py` and exactly one `.om` (or the `om_file` one) whose SHA-256 matches its
`<file>.om.sha256` (else `om_sha256`). Each version's config is then completed as Triton's
auto-complete will (`autocomplete.complete_version`, from the `.om` read without a device) and
compared with the `.om` loaded (`triton_config.compare_config_with_session`). A model directory
name or repository path that `serve` refuses (`config.check_model_name`, `check_shell_safe_path`)
is refused here too. Problems make a model
invalid; notes (what auto-complete will fill, the `.om` cannot be opened on this machine, an
outdated `model.py`, no checksum, parameters this package does not know) do not.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ge_python_backend.errors import GeBackendError, UserError, command_line_message
from ge_python_backend.repository.autocomplete import complete_version
from ge_python_backend.repository.config import (
    ConfigError,
    ModelConfig,
    check_model_name,
    check_shell_safe_path,
    config_view,
    load_model_config,
)
from ge_python_backend.repository.model_files import model_template, open_session
from ge_python_backend.repository.parameters import (
    ModelParameters,
    describe_unknown_parameter,
    unknown_parameters,
)
from ge_python_backend.repository.triton_config import TritonConfig, compare_config_with_session
from ge_python_backend.repository.versions import (
    checksum_path,
    expected_sha256,
    find_om,
    version_dirs,
)
from ge_python_backend.runtime.checksum import file_sha256


@dataclasses.dataclass
class ModelReport:
    """The outcome of validating one model directory."""

    name: str
    path: Path
    versions: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


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
    chosen = runtime or params.acl_runtime or "pyacl"
    try:
        with open_session(
            om_path, chosen, params.input_shape_order, max_output_bytes=params.max_output_bytes
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


def validate_model(model_dir: Path, *, runtime: str | None = None) -> ModelReport:
    """Validate one model directory (with or without config.pbtxt); `runtime` overrides the
    config's `acl_runtime`."""
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
        if config.backend != "python":
            report.problems.append(f"backend is {config.backend!r}, expected 'python'")
    else:
        config = ModelConfig(name=model_dir.name, backend="python")
        report.notes.append("no config.pbtxt: Triton's auto-complete builds the config")
    view = config_view(config)
    params = _read_parameters(report, view)
    versions = version_dirs(model_dir)
    report.versions = [path.name for path in versions]
    if not versions:
        report.problems.append("no version directory (e.g. 1/)")
    if params is None:
        return report
    for version_dir in versions:
        _check_version(report, view, params, version_dir, runtime)
    return report


def validate_repository(
    repository: str | os.PathLike[str], *, name: str | None = None, runtime: str | None = None
) -> list[ModelReport]:
    """Validate every model directory of `repository` (or only `name`); a repository path
    `serve` would refuse is refused (UserError)."""
    root = Path(repository)
    if not root.is_dir():
        raise UserError(f"model repository {root} is not a directory")
    check_shell_safe_path("model repository", root.resolve())
    if name is not None:
        model_dir = root / check_model_name(name)
        if not model_dir.is_dir():
            raise UserError(f"no model {name!r} in {root}")
        return [validate_model(model_dir, runtime=runtime)]
    models = sorted(
        path for path in root.iterdir() if path.is_dir() and not path.name.startswith(".")
    )
    if not models:
        raise UserError(f"model repository {root} has no model directories")
    return [validate_model(path, runtime=runtime) for path in models]
