"""The end of `tune`: the winner applied to config.pbtxt (`apply_winner`), tune.json, TUNE.md
and its plot (`write_report`), and the summary printed (`format_summary`).
"""

from __future__ import annotations

import difflib
import json
import statistics
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import load_model_config, write_model_config
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.tools.tune.advice import GearAdvice
from ge_python_backend.tools.tune.confirmation import Confirmation, _each
from ge_python_backend.tools.tune.search import SearchResult, _ms
from ge_python_backend.tools.tune.space import Candidate, with_candidate
from ge_python_backend.tools.tune.trials import Measurement, Trial

# -- apply and report --------------------------------------------------------------------------


def apply_winner(repository: Path, model: str, candidate: Candidate) -> str:
    """Write the candidate into `<repository>/<model>/config.pbtxt` (built with Triton's
    protobuf, all else kept) and check the repository's model with `validate`; the diff. A
    config that does not validate is put back and refused (UserError)."""
    path = repository / model / "config.pbtxt"
    if not path.parent.is_dir():
        raise UserError(f"no model {model!r} in {repository}")
    before = path.read_text(encoding="utf-8") if path.exists() else None
    config = load_model_config(path) if before is not None else ModelConfig(name=model)
    if before is None:
        config.backend = "python"
    write_model_config(with_candidate(config, candidate), path)
    after = path.read_text(encoding="utf-8")
    (report,) = validate_repository(repository, name=model)
    if not report.ok:
        if before is None:
            path.unlink()
        else:
            path.write_text(before, encoding="utf-8")
        raise UserError(
            f"the tuned config of {model!r} does not validate, so it was not applied: "
            + "; ".join(report.problems)
        )
    diff = difflib.unified_diff(
        (before or "").splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"{path} (before)",
        f"{path} (tuned)",
    )
    return "".join(diff)


def tune_document(result: SearchResult, p99_ms: float, advice: GearAdvice | None) -> dict[str, Any]:
    """What tune.json holds."""
    return {
        "p99_ms": p99_ms,
        "trials": [trial.as_dict() for trial in result.trials],
        "winner": result.winner,
        "search_winner": result.search_winner,
        "confirmation": result.confirmation.as_list(),
        "confirmation_rounds": result.confirmation.rounds,
        "confirmation_verdict": result.confirmation.verdict,
        "skipped": [{"config": c.as_dict(), "reason": r} for c, r in result.skipped],
        "elapsed_s": round(result.elapsed_s, 3),
        "gear_advice": None if advice is None else advice.as_dict(),
    }


def measured_points(trials: Sequence[Trial]) -> list[tuple[int, float, float]]:
    """(index in `trials`, p99 ms, rows/s) of each trial that was measured."""
    measured = [(i, t.measurement) for i, t in enumerate(trials) if t.measurement is not None]
    return [(i, m.p99_ms, m.rows_per_s) for i, m in measured if m.p99_ms is not None]


def confirmation_points(confirmation: Confirmation) -> list[tuple[int, float, float]]:
    """(the finalist's trial index, p99 ms, rows/s) of each confirmation round measured."""
    return [
        (finalist.trial, p99, rows)
        for finalist in confirmation.finalists
        for _, p99, rows in measured_points(finalist.rounds)
    ]


def plot_trials(result: SearchResult, p99_ms: float, path: Path) -> Path:
    """Rows/s against p99 of every measured trial, each confirmation round joined to its
    finalist's trial; the original config and the winner marked, the constraint a dashed
    line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axis = plt.subplots(figsize=(7.5, 4.8), constrained_layout=True)
    points = measured_points(result.trials)
    axis.scatter(
        [p for _, p, _ in points], [r for _, _, r in points], color="tab:blue", s=24, label="trials"
    )
    for index, p99, rows in points:
        axis.annotate(
            str(index + 1), (p99, rows), textcoords="offset points", xytext=(4, 3), fontsize=7
        )
    searched = {index: (p99, rows) for index, p99, rows in points}
    rounds = [point for point in confirmation_points(result.confirmation) if point[0] in searched]
    for index, p99, rows in rounds:
        trial_p99, trial_rows = searched[index]
        axis.plot([trial_p99, p99], [trial_rows, rows], color="tab:gray", linewidth=0.6)
    if rounds:
        axis.scatter(
            [p for _, p, _ in rounds],
            [r for _, _, r in rounds],
            facecolors="none",
            edgecolors="tab:gray",
            s=40,
            label="confirmation rounds",
            zorder=2,
        )
    winner = result.winner
    marks = [(0, "s", "tab:orange", "original config")]
    if winner is not None:
        marks.append((winner, "*", "tab:green", "winner"))
    for index, marker, color, label in marks:
        for i, p99, rows in points:
            if i == index:
                axis.scatter(
                    [p99], [rows], marker=marker, color=color, s=160, label=label, zorder=3
                )
    axis.axvline(p99_ms, color="tab:red", linestyle="--", label=f"p99 <= {p99_ms:g} ms")
    axis.set_xlabel("p99 latency (ms)")
    axis.set_ylabel("rows / s")
    axis.set_title("Tuning trials: throughput against p99 (up and left is better)")
    axis.set_ylim(0, max((r for _, _, r in points + rounds), default=1.0) * 1.15)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=8, loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def tune_markdown(
    model: str,
    command: str,
    result: SearchResult,
    p99_ms: float,
    advice: GearAdvice | None,
    plot_name: str,
    outcome: str,
) -> str:
    """TUNE.md: the trials, the confirmation, the winner, what was skipped, the gear advice."""
    lines = [
        f"# Tuning `{model}`",
        "",
        f"Command: `{command}`",
        "",
        f"Constraint: p99 <= {p99_ms:g} ms. {len(result.trials)} trials in "
        f"{result.elapsed_s:.1f} s. {outcome}",
        "",
        f"![rows/s against p99]({plot_name})",
        "",
        "| # | config | loaded | rows/s | req/s | p50 ms | p99 ms | device util. | padding "
        "| rows/exec. | queue ms | note |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, trial in enumerate(result.trials, 1):
        m = trial.measurement

        def cell(key: str, form: str, m: Measurement | None = m) -> str:
            value = None if m is None else getattr(m, key)
            return "-" if value is None else format(value, form)

        notes = []
        if trial.default:
            notes.append("original")
        if result.winner == number - 1:
            notes.append("**winner**")
        if trial.error:
            notes.append(trial.error.replace("|", "\\|").replace("\n", " "))
        lines.append(
            f"| {number} | {trial.candidate.describe()} | {'yes' if m else 'no'} | "
            f"{cell('rows_per_s', ',.1f')} | {cell('requests_per_s', ',.1f')} | "
            f"{cell('p50_ms', '.2f')} | {cell('p99_ms', '.2f')} | "
            f"{cell('device_utilization', '.3f')} | {cell('padding_ratio', '.3f')} | "
            f"{cell('rows_per_execution', '.2f')} | {cell('queue_ms', '.2f')} | "
            f"{'; '.join(notes)} |"
        )
    lines += confirmation_markdown(result)
    if result.skipped:
        lines += ["", "Not tried (the devices cannot hold them):", ""]
        lines += [f"- {c.describe()}: {reason}" for c, reason in result.skipped]
    lines += ["", "## Gear advice", ""]
    if advice is None:
        lines.append("No batch statistics were observed, so there is no gear advice.")
    else:
        sizes = ", ".join(f"{size}: {count}" for size, count in advice.histogram.items())
        lines += [
            f"Batch sizes Triton formed in trial {advice.trial + 1} (size: executions): {sizes}.",
            "",
            "| gear set | gears | padded rows | padding ratio |",
            "|---|---|---|---|",
        ]
        for option in advice.options:
            gears = ",".join(map(str, option.gears))
            lines.append(
                f"| {option.label} | {gears} | {option.padded_rows} of {option.rows} rows | "
                f"{option.padding_ratio:.3f} |"
            )
        lines.append("")
        if advice.recommended is None:
            lines.append("The compiled gears already pad least (against one gear more, too).")
        else:
            lines += ["Recompile with:", "", "```", str(advice.atc_command), "```"]
    return "\n".join(lines) + "\n"


def confirmation_markdown(result: SearchResult) -> list[str]:
    """TUNE.md's confirmation: each finalist's rounds, and the verdict."""
    confirmation = result.confirmation
    lines = ["", "## Confirmation", ""]
    if not confirmation.rounds:
        return lines + [f"No confirmation rounds: {confirmation.verdict}."]
    default = confirmation.finalists[0]
    lines += [
        f"The finalists loaded and measured in turn, {confirmation.rounds} alternating rounds "
        f"(of {confirmation.wanted} asked for).",
        "",
        "| trial | config | rows/s per round | median rows/s | p99 ms per round | "
        "rows/s vs original per round |",
        "|---|---|---|---|---|---|",
    ]
    for finalist in confirmation.finalists:
        rows = finalist.rows_per_s()
        p99 = ", ".join(
            "-"
            if r.measurement is None or r.measurement.p99_ms is None
            else f"{r.measurement.p99_ms:.2f}"
            for r in finalist.rounds
        )
        mark = " **winner**" if finalist.trial == result.winner else ""
        lines.append(
            f"| {finalist.trial + 1}{mark} | {finalist.candidate.describe()} | {_each(rows)} | "
            f"{statistics.median(rows):,.1f} | {p99} | "
            f"{_each(finalist.ratios(default), '.3f')} |"
        )
    return lines + ["", f"Verdict: {confirmation.verdict}."]


def write_report(
    directory: Path,
    model: str,
    command: str,
    result: SearchResult,
    p99_ms: float,
    advice: GearAdvice | None,
    outcome: str,
) -> list[Path]:
    """`tune.json`, `TUNE.md` and its plot `tune.png` in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    document = directory / "tune.json"
    document.write_text(json.dumps(tune_document(result, p99_ms, advice), indent=2) + "\n")
    picture = plot_trials(result, p99_ms, directory / "tune.png")
    markdown = directory / "TUNE.md"
    markdown.write_text(
        tune_markdown(model, command, result, p99_ms, advice, picture.name, outcome)
    )
    return [document, markdown, picture]


def format_summary(result: SearchResult, p99_ms: float) -> Iterator[str]:
    """The lines printed at the end: the original config, the confirmation, the winner, the
    trials that did not load."""
    first = result.trials[0]
    if first.measurement is not None:
        m = first.measurement
        yield (
            f"original config: {first.candidate.describe()}: {m.rows_per_s:,.1f} rows/s, "
            f"p99 {_ms(m.p99_ms)}"
        )
    confirmation = result.confirmation
    if confirmation.rounds:
        yield (
            f"confirmed in {confirmation.rounds} alternating rounds of "
            f"{len(confirmation.finalists)} finalists: {confirmation.verdict}"
        )
    else:
        yield f"not confirmed: {confirmation.verdict}"
    if result.winner is None:
        yield f"no config met p99 <= {p99_ms:g} ms"
        return
    best = result.trials[result.winner]
    assert best.measurement is not None
    yield (
        f"winner (trial {result.winner + 1} of {len(result.trials)}): "
        f"{best.candidate.describe()}: {best.measurement.rows_per_s:,.1f} rows/s, p99 "
        f"{_ms(best.measurement.p99_ms)} in its trial"
    )
    for number, trial in enumerate(result.trials, 1):
        if not trial.loaded:
            yield f"trial {number} did not load ({trial.candidate.describe()}): {trial.error}"
