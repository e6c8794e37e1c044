"""The migration's report, DST_REPO/MIGRATION.md and DST_REPO/migration.json, and the shell
script `--dry-run` prints (the ATC commands, for a host with CANN)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ge_python_backend.tools.migrate.atc import AtcPlan
from ge_python_backend.tools.migrate.runner import MigrationReport, ModelResult, Status

REPORT_JSON = "migration.json"
REPORT_MARKDOWN = "MIGRATION.md"


def report_dict(report: MigrationReport) -> dict[str, Any]:
    """The report as migration.json holds it."""
    options = report.options
    return {
        "source": str(options.source),
        "destination": str(options.destination),
        "runtime": options.runtime,
        "soc_version": options.soc_version,
        "precision_mode": options.precision_mode.value,
        "device_ids": list(options.device_ids),
        "thresholds": {
            "atol": options.thresholds.atol,
            "rtol": options.thresholds.rtol,
            "min_cosine": options.thresholds.min_cosine,
        },
        "dry_run": options.dry_run,
        "passed": report.passed,
        "models": [_model_dict(model, options.soc_version) for model in report.models],
        "serving": [
            {"name": p.name, "ok": p.ok, "states": list(p.states), "message": p.message}
            for p in report.serving
        ],
    }


def _model_dict(model: ModelResult, soc_version: str) -> dict[str, Any]:
    return {
        "name": model.name,
        "status": model.status.value,
        "source_format": model.source_format,
        "action": model.action,
        "soc_version": soc_version if model.gears is not None else None,
        "precision_mode": model.precision_mode.value if model.gears is not None else None,
        "gears": model.gears,
        "versions": [
            {
                "version": version.number,
                "source_file": None if version.source_file is None else str(version.source_file),
                "source_sha256": version.source_sha256,
                "atc_command": None if version.plan is None else version.plan.command(),
                "om": None if version.om is None else str(version.om),
                "om_sha256": version.om_sha256,
            }
            for version in model.versions
        ],
        "warnings": model.warnings,
        "errors": model.errors,
        "provide": model.provide,
        "atc_log_tail": model.atc_log_tail,
        "fp32_operators": model.fp32_operators,
        "accuracy": model.accuracy,
        "config_diff": model.config_diff,
    }


def report_markdown(report: MigrationReport) -> str:
    """MIGRATION.md: a table of the models, then each model's commands and notes."""
    options = report.options
    lines = [
        "# Migration report",
        "",
        f"`{options.source}` -> `{options.destination}`: runtime {options.runtime}, SoC "
        f"{options.soc_version}, precision mode {options.precision_mode.value}.",
        "",
        "| model | source format | status | gears | versions | precision mode | FP32 operators |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for model in report.models:
        versions = ", ".join(str(v.number) for v in model.versions) or "-"
        mode = model.precision_mode.value if model.accuracy is not None else "-"
        lines.append(
            f"| {model.name} | {model.source_format} | {model.status.value} | "
            f"{model.gears or '-'} | {versions} | {mode} | {len(model.fp32_operators)} |"
        )
    converted = all(model.status != Status.FAILED for model in report.models)
    lines += [
        "",
        "Every convertible model converted and passed the accuracy gate."
        if converted
        else "Some convertible models FAILED (see below).",
        "",
    ]
    if report.serving:
        lines += [
            "Served once by a throwaway tritonserver (`--check-serving`):",
            "",
            *(f"* {'answered' if p.ok else 'FAILED'}: {p.message}" for p in report.serving),
            "",
        ]
    for model in report.models:
        lines += [f"## {model.name}", "", f"Status: {model.status.value} ({model.action}).", ""]
        for version in model.versions:
            if version.source_file is None:
                lines.append(f"* version {version.number}: no model file")
            else:
                lines.append(
                    f"* version {version.number}: {version.source_file.name} sha256 "
                    f"{version.source_sha256}"
                )
            if version.plan is not None:
                lines += ["", "  ```", f"  {version.plan.command()}", "  ```"]
            if version.om_sha256:
                lines.append(f"  `.om` sha256 {version.om_sha256}")
        if model.provide:
            lines += ["", "To convert it, provide its ONNX and pass `--onnx-from DIR`:"]
            lines += [f"* `{path}`" for path in model.provide]
        for title, items in (("Warnings", model.warnings), ("Errors", model.errors)):
            if items:
                lines += ["", f"{title}:"] + [f"* {item}" for item in items]
        if model.atc_log_tail:
            lines += ["", "ATC's log (tail):", "", "```", model.atc_log_tail, "```"]
        lines += _accuracy_lines(model.accuracy)
        lines += _config_diff_lines(model.config_diff)
        lines.append("")
    return "\n".join(lines)


def _config_diff_lines(diff: dict[str, Any] | None) -> list[str]:
    """The config rewrite: every source field under kept, rewritten, dropped or refused."""
    if diff is None:
        return []
    lines = ["", "The config, field by field:"]
    for kind, changes in diff.items():
        if changes:
            lines += ["", f"{kind.capitalize()}:"]
            lines += [f"* `{change['field']}`: {change['detail']}" for change in changes]
    return lines


def _statistic(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def _figures(item: dict[str, Any]) -> str:
    """A judgement's figures: 'top1 1, cosine 0.9999'."""
    skipped = {"input", "passed", "problem", "name"}
    return ", ".join(
        f"{key} {_statistic(value, 6)}" for key, value in item.items() if key not in skipped
    )


def _accuracy_lines(accuracy: dict[str, Any] | None) -> list[str]:
    """The accuracy gate's ladder per version: one row per output and input set of every mode
    tried, with the operators kept in FP32."""
    if accuracy is None:
        return []
    lines = [
        "",
        "Accuracy against the ONNX (onnxruntime), per precision mode tried:",
        "",
        "| version | precision mode | FP32 operators | output | metric | input | figures "
        "| passed |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for version, ladder in accuracy.items():
        for attempt in ladder["attempts"]:
            mode = attempt["precision_mode"]
            kept = attempt.get("fp32_operators") or []
            island = f"{len(kept)}: {', '.join(kept)}" if kept else "0"
            if attempt["accuracy"] is None:
                error = attempt["compile_error"].splitlines()[0]
                lines.append(
                    f"| {version} | {mode} | {island} | - | - | - | - | compile failed: {error} |"
                )
                continue
            if attempt["accuracy"].get("random_inputs"):
                lines.append(
                    f"| {version} | {mode} | {island} | - | - | random inputs (no --samples "
                    "given) | - | - |"
                )
            for output in attempt["accuracy"]["outputs"]:
                for item in output.get("per_input", []):
                    verdict = (
                        "yes"
                        if item["passed"]
                        else "NO" + (f": {item['problem']}" if item.get("problem") else "")
                    )
                    lines.append(
                        f"| {version} | {mode} | {island} | {output['name']} | "
                        f"{output['metric']} | {item['input']} | {_figures(item)} | {verdict} |"
                    )
    return lines


def write_report(report: MigrationReport) -> tuple[Path, Path]:
    """Write MIGRATION.md and migration.json into the destination; returns their paths."""
    destination = report.options.destination
    markdown = destination / REPORT_MARKDOWN
    data = destination / REPORT_JSON
    markdown.write_text(report_markdown(report), encoding="utf-8")
    data.write_text(json.dumps(report_dict(report), indent=2) + "\n", encoding="utf-8")
    return markdown, data


def dry_run_script(report: MigrationReport) -> str:
    """A bash script of the ATC commands (mkdir, atc and sha256sum per version), the plan as
    its comments: what `--dry-run` prints, to run on a host with CANN."""
    options = report.options
    lines = [
        "#!/usr/bin/env bash",
        f"# ge-python-model migrate --dry-run: {options.source} -> {options.destination}",
        f"# SoC {options.soc_version}, precision mode {options.precision_mode.value}",
    ]
    for model in report.models:
        lines.append(
            f"# {model.name} ({model.source_format}): {model.status.value}, "
            f"{model.action}" + (f", gears {model.gears}" if model.gears else "")
        )
        lines += [f"#   provide {path}" for path in model.provide]
        lines += [f"#   error: {error}" for error in model.errors]
        lines += [f"#   warning: {warning}" for warning in model.warnings]
    lines += ["set -euo pipefail"]
    for model in report.models:
        for version in model.versions:
            if version.plan is not None:
                lines += _version_commands(version.plan)
    return "\n".join(lines) + "\n"


def _version_commands(plan: AtcPlan) -> list[str]:
    directory = shlex.quote(str(plan.om_path.parent))
    om = shlex.quote(plan.om_path.name)
    return [
        f"mkdir -p {directory}",
        plan.command(),
        f"(cd {directory} && sha256sum {om} > {om}.sha256)",
    ]


def summary_lines(report: MigrationReport) -> list[str]:
    """One line per model, as the command prints them."""
    lines = []
    for model in report.models:
        line = f"{model.name:<24} {model.source_format:<22} {model.status.value}"
        if model.gears:
            line += f" ({model.gears})"
        if model.accuracy is not None:
            line += f" at {model.precision_mode.value}"
            if model.fp32_operators:
                line += f", {len(model.fp32_operators)} operators in FP32"
        if model.status == Status.NEEDS_ONNX:
            line += f": provide {', '.join(model.provide)}"
        lines.append(line)
        lines += [f"  error: {error}" for error in model.errors]
        lines += [f"  warning: {warning}" for warning in model.warnings]
    lines += [f"serving: {p.message}" for p in report.serving if not p.ok]
    return lines
