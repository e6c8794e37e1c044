"""The confirmation of `tune`: the finalists re-measured in alternating rounds (`Finalist`,
`Confirmation`) and the winner decided on them (`confirmed_winner`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Any

from ge_python_backend.tools.tune.space import Candidate
from ge_python_backend.tools.tune.trials import Trial, _rounded

# The confirmation: this many finalists (the original config first, then the candidates with
# the most rows/s meeting the constraint), loaded and measured in turn, round after round.
CONFIRM_FINALISTS = 3
CONFIRM_ROUNDS = 2
# A candidate beats the original config when its rows/s does in every round and its median
# per-round ratio is more than this above 1.
CONFIRM_MIN_GAIN = 0.03


@dataclasses.dataclass
class Finalist:
    """A trial re-measured in the confirmation: one measurement (a `Trial` of its own) a round."""

    trial: int  # index into the search's trials
    candidate: Candidate
    rounds: list[Trial] = dataclasses.field(default_factory=list)

    def meets(self, p99_ms: float) -> bool:
        """Every round loaded, answered every request and kept p99 within the constraint."""
        return bool(self.rounds) and all(r.meets(p99_ms) for r in self.rounds)

    def rows_per_s(self) -> list[float]:
        """Each round's rows/s (0 for a round that did not load)."""
        return [r.measurement.rows_per_s if r.measurement else 0.0 for r in self.rounds]

    def ratios(self, default: Finalist) -> list[float]:
        """Per round, this finalist's rows/s over the original config's in the same round."""
        return [
            mine / max(theirs, 1e-9)
            for mine, theirs in zip(self.rows_per_s(), default.rows_per_s())
        ]

    def as_dict(self, default: Finalist) -> dict[str, Any]:
        """The finalist's entry in tune.json's `confirmation`."""
        measured = [r.measurement for r in self.rounds]
        return {
            "trial": self.trial,
            "rows_per_s": [_rounded(m.rows_per_s if m else None) for m in measured],
            "p99_ms": [_rounded(m.p99_ms if m else None) for m in measured],
            "errors": [m.errors if m else 0 for m in measured],
            "error": next((r.error for r in self.rounds if r.error), None),
            "vs_default": [round(ratio, 4) for ratio in self.ratios(default)],
        }


@dataclasses.dataclass
class Confirmation:
    """The finalists re-measured in alternating rounds (the original config first), or why
    there were none (`rounds` 0); `winner` is the trial the search's result declares."""

    wanted: int  # rounds asked for
    rounds: int  # rounds run
    finalists: list[Finalist]
    winner: int | None
    verdict: str

    def as_list(self) -> list[dict[str, Any]]:
        """tune.json's `confirmation`: one entry a finalist."""
        if not self.finalists:
            return []
        default = self.finalists[0]
        return [finalist.as_dict(default) for finalist in self.finalists]


def confirmed_winner(finalists: Sequence[Finalist], p99_ms: float) -> tuple[int | None, str]:
    """The winner of the confirmation rounds (a trial index) and the verdict in words;
    `finalists[0]` is the original config.

    A finalist can win only when every round met the constraint. Rounds alternate (A B C A B C)
    so the noise of a moment hits every finalist of that round alike; each candidate is judged
    by its per-round ratio to the original config's rows/s, which cancels that shared noise, and
    by the median of those ratios, which one disturbed round cannot move far (pooling the rounds
    would let it). The search's own window is left out: the best of many noisy windows is biased
    upwards. A candidate beats the original config when it did in every round and its median
    ratio exceeds 1 + `CONFIRM_MIN_GAIN`; the one with the highest median wins, else the original
    config is kept. An original config that missed the constraint in a round loses to the
    candidate with the most median rows/s meeting it in every round."""
    default, candidates = finalists[0], finalists[1:]
    meeting = [f for f in candidates if f.meets(p99_ms)]
    if not default.meets(p99_ms):
        if not meeting:
            return None, f"no finalist met p99 <= {p99_ms:g} ms in every round"
        best = max(meeting, key=lambda f: statistics.median(f.rows_per_s()))
        return best.trial, (
            f"the original config missed p99 <= {p99_ms:g} ms in a round; trial "
            f"{best.trial + 1} met it in every round with the most rows/s (median "
            f"{statistics.median(best.rows_per_s()):,.1f}, per round {_each(best.rows_per_s())})"
        )
    if not meeting:
        return default.trial, (
            f"no other finalist met p99 <= {p99_ms:g} ms in every round: the original config "
            "is kept"
        )

    def beats(finalist: Finalist) -> bool:
        ratios = finalist.ratios(default)
        return min(ratios) > 1 and statistics.median(ratios) > 1 + CONFIRM_MIN_GAIN

    beating = [f for f in meeting if beats(f)]
    best = max(beating or meeting, key=lambda f: statistics.median(f.ratios(default)))
    ratios = best.ratios(default)
    figures = (
        f"trial {best.trial + 1} gave {statistics.median(ratios):.3f}x the original config's "
        f"rows/s (per round {_each(ratios, '.3f')}; spread {min(ratios):.3f}-{max(ratios):.3f})"
    )
    if beating:
        return best.trial, f"{figures}, faster in every round: it wins"
    return default.trial, (
        f"no config beats the defaults beyond the noise ({figures}; winning needs faster in "
        f"every round and a median above {1 + CONFIRM_MIN_GAIN:.2f}x): the original config is "
        "kept"
    )


def _each(values: Sequence[float], form: str = ",.1f") -> str:
    return ", ".join(format(value, form) for value in values)
