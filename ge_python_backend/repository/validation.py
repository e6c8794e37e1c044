"""Check a model repository written by `scaffold` (`ge-python-model validate`).

Per model: the config parses and names the directory, the parameters pass
`ModelParameters.from_config` (the rules the model instance applies), every version has
`model.py` and the `.om` whose SHA-256 matches `om_sha256`, and the config's inputs and outputs
fit the `.om` (`config.compare_config_with_session`). Problems make a model invalid; notes (the
`.om` cannot be opened on this machine, an outdated `model.py`, no `om_sha256`, parameters this
package does not know) do not.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import (
    ConfigError,
    ModelConfig,
    check_model_name,
    compare_config_with_session,
    load_model_config,
)
from ge_python_backend.repository.parameters import ModelParameters, unknown_parameters
from ge_python_backend.repository.scaffold import model_template, open_session
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


def _read_parameters(report: ModelReport, config: ModelConfig) -> ModelParameters | None:
    """The model's parameters, or None after recording why they are unusable."""
    unknown = unknown_parameters(config)
    if unknown:
        report.notes.append(f"parameters not used by ge-python-backend: {', '.join(unknown)}")
    try:
        params = ModelParameters.from_config(config)
    except ConfigError as exc:
        report.problems.append(str(exc))
        return None
    if params.om_sha256 is None:
        report.notes.append("no om_sha256 parameter: the .om is loaded without a checksum")
    return params


def _check_version(
    report: ModelReport,
    config: ModelConfig,
    params: ModelParameters | None,
    version_dir: Path,
    runtime: str | None,
) -> None:
    prefix = f"version {version_dir.name}: "
    model_py = version_dir / "model.py"
    if not model_py.is_file():
        report.problems.append(prefix + "model.py is missing")
    elif model_py.read_text(encoding="utf-8") != model_template():
        report.notes.append(prefix + "model.py differs from this ge-python-backend's template")
    if params is None:
        return
    om_path = version_dir / params.om_file
    if not om_path.is_file():
        report.problems.append(prefix + f"{params.om_file} is missing")
        return
    expected = params.om_sha256
    if expected is not None and file_sha256(om_path) != expected:
        report.problems.append(prefix + f"{params.om_file} does not match om_sha256 {expected}")
        return
    chosen = runtime or params.acl_runtime or "pyacl"
    try:
        with open_session(om_path, chosen, params.input_shape_order) as session:
            problems = compare_config_with_session(
                config, session.inputs, session.outputs, session.gears
            )
    except UserError as exc:
        report.notes.append(prefix + f"inputs/outputs not checked against the .om: {exc}")
        return
    report.problems += [prefix + problem for problem in problems]


def validate_model(model_dir: Path, *, runtime: str | None = None) -> ModelReport:
    """Validate one model directory; `runtime` overrides the config's `acl_runtime`."""
    report = ModelReport(model_dir.name, model_dir)
    try:
        config = load_model_config(model_dir / "config.pbtxt")
    except ConfigError as exc:
        report.problems.append(str(exc))
        return report
    if config.name and config.name != model_dir.name:
        report.problems.append(
            f"config name {config.name!r} differs from its directory name {model_dir.name!r}"
        )
    if config.backend != "python":
        report.problems.append(f"backend is {config.backend!r}, expected 'python'")
    params = _read_parameters(report, config)
    versions = sorted(
        (path for path in model_dir.iterdir() if path.is_dir() and path.name.isdigit()),
        key=lambda path: int(path.name),
    )
    report.versions = [path.name for path in versions]
    if not versions:
        report.problems.append("no version directory (e.g. 1/)")
    for version_dir in versions:
        _check_version(report, config, params, version_dir, runtime)
    return report


def validate_repository(
    repository: str | os.PathLike[str], *, name: str | None = None, runtime: str | None = None
) -> list[ModelReport]:
    """Validate every model directory of `repository` (or only `name`)."""
    root = Path(repository)
    if not root.is_dir():
        raise UserError(f"model repository {root} is not a directory")
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
