"""Check a model repository written by `scaffold` (`ge-python-model validate`).

Per model: the config parses and names the directory, the parameters are usable, every version
has `model.py` and the `.om` whose SHA-256 matches `om_sha256`, and the config's inputs and
outputs fit the `.om` (`config.compare_config_with_session`). Problems make a model invalid;
notes (the `.om` cannot be opened on this machine, an outdated `model.py`) do not.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import (
    ACL_RUNTIMES,
    PIPELINE_DEPTHS,
    REQUIRED_PARAMETERS,
    ConfigError,
    ModelConfig,
    check_model_name,
    compare_config_with_session,
    load_model_config,
    read_parameters,
)
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


def _check_parameters(params: dict[str, str]) -> list[str]:
    problems = [f"parameter {key!r} is missing" for key in REQUIRED_PARAMETERS if key not in params]
    if "acl_runtime" in params and params["acl_runtime"] not in ACL_RUNTIMES:
        problems.append(f"parameter acl_runtime must be one of {ACL_RUNTIMES}")
    if "pipeline_depth" in params and params["pipeline_depth"] not in map(str, PIPELINE_DEPTHS):
        problems.append(f"parameter pipeline_depth must be one of {PIPELINE_DEPTHS}")
    if "device_ids" in params:
        parts = params["device_ids"].split(",")
        if not all(part.strip().isdigit() for part in parts):
            problems.append(f"parameter device_ids {params['device_ids']!r} must be like '0,1'")
    return problems


def _check_version(
    report: ModelReport,
    config: ModelConfig,
    params: dict[str, str],
    version_dir: Path,
    runtime: str | None,
) -> None:
    prefix = f"version {version_dir.name}: "
    model_py = version_dir / "model.py"
    if not model_py.is_file():
        report.problems.append(prefix + "model.py is missing")
    elif model_py.read_text(encoding="utf-8") != model_template():
        report.notes.append(prefix + "model.py differs from this ge-python-backend's template")
    om_file = params.get("om_file")
    if not om_file:
        return
    om_path = version_dir / om_file
    if not om_path.is_file():
        report.problems.append(prefix + f"{om_file} is missing")
        return
    expected = params.get("om_sha256", "").lower()
    if expected and file_sha256(om_path) != expected:
        report.problems.append(prefix + f"{om_file} does not match om_sha256 {expected}")
        return
    chosen = runtime or params.get("acl_runtime") or "pyacl"
    try:
        with open_session(om_path, chosen) as session:
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
    params = read_parameters(config)
    report.problems += _check_parameters(params)
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
