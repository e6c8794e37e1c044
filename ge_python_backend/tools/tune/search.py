"""The search of `tune`: the grid, then hill climbing (`Search`), within what the devices can
hold (`Limits`) and the time budget (`Budget`), the confirmation that follows included.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from ge_python_backend.errors import UserError
from ge_python_backend.progress import Progress
from ge_python_backend.repository.budget import DeviceLimits, ModelFootprint, budget
from ge_python_backend.tools.tune.confirmation import (
    CONFIRM_FINALISTS,
    CONFIRM_ROUNDS,
    Confirmation,
    Finalist,
    confirmed_winner,
)
from ge_python_backend.tools.tune.space import Candidate, SearchSpace
from ge_python_backend.tools.tune.trials import Measurement, Trial, winner_of

# A trial's load time before any load was seen (for the budget).
FIRST_LOAD_GUESS_S = 5.0
# Kept in the budget for what follows the search besides loading a config: summary and report.
END_RESERVE_S = 2.0
# The search keeps time for this many rounds more than asked: a trial slower than predicted
# spends the time and raises every finalist's prediction with it (one trial 18% over its
# prediction once left no room for the one round asked). Past the first, a round that no longer
# fits is dropped and said.
CONFIRM_SPARE_ROUNDS = 0.5


# -- constraints -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Limits:
    """What the devices can hold of the model, counted as the repository's device budget counts
    it (`repository.budget`: each instance a process holding the opening of its device, the
    model's weights once and a load's work space and its buffers per lane): pyACL's processes
    per device always, device memory once measured."""

    device: DeviceLimits = DeviceLimits()
    lane_bytes: int = 0  # one pipeline lane of one instance: its buffers and work (0: unknown)
    weight_bytes: int = 0  # the weights, once per instance (0: unknown)
    device_bytes: Mapping[int, int] = dataclasses.field(default_factory=dict)  # for the model

    @classmethod
    def measured(
        cls,
        default: Candidate,
        measurement: Measurement,
        device: DeviceLimits,
        lane_bytes: int = 0,
        weight_bytes: int = 0,
    ) -> Limits:
        """From the original config's trial: what a lane costs (`lane_bytes`, the budget's
        figure from the `.om`: a load's work space and its buffers; else the instances'
        measured pooled bytes, a lane's share), what an instance's weights cost (`weight_bytes`,
        from the `.om`) and the device's free memory give what the model may hold on each
        device (free, plus what its instances hold)."""
        per_device = default.instances_per_device()
        held = {int(d): b for d, b in measurement.device_memory_bytes.items() if d.isdigit()}
        free = {int(d): b for d, b in measurement.device_memory_free_bytes.items() if d.isdigit()}
        lane = lane_bytes or max(held.values(), default=0) // default.pipeline_depth
        instance = device.process_memory + weight_bytes + default.pipeline_depth * lane
        available = {d: free[d] + instance * per_device.get(d, 0) for d in free}
        return cls(device, lane, weight_bytes, available)

    def refusal(self, candidate: Candidate) -> str | None:
        """Why the devices cannot hold the candidate (None: they can, as far as known)."""
        footprint = ModelFootprint(
            "",
            candidate.instances_per_device(),
            candidate.pipeline_depth,
            self.lane_bytes,
            self.weight_bytes,
        )
        for row in budget([footprint], self.device).rows:
            if row.processes > self.device.max_processes:
                return (
                    f"{row.processes} instances on device {row.device}: pyACL serves at most "
                    f"{self.device.max_processes} processes per device"
                )
            available = self.device_bytes.get(row.device)
            if available is not None and self.lane_bytes and row.memory > available:
                return (
                    f"needs {row.memory} bytes of device {row.device}'s memory (its processes, "
                    f"weights, work spaces and buffers), {available} are free for this model"
                )
        return None


# -- the search --------------------------------------------------------------------------------


class LoadFailed(Exception):
    """A trial's config did not load; the message is Triton's reason."""


class Evaluator(Protocol):
    """Puts a candidate in service and measures what is in service."""

    def load(self, candidate: Candidate) -> None:
        """Serve `candidate` (raises LoadFailed with the reason)."""

    def measure(self) -> Measurement:
        """Measure the config in service."""


class Budget:
    """Whether the next trial fits in the time left, predicted from the trials so far: the
    longest measurement plus the longest load seen at its instance count (else the longest
    load per instance times its instances), with one load of the original config (putting it
    back at the end) and `END_RESERVE_S` kept in reserve, and the seconds the caller keeps for
    the confirmation (`confirmation`: each round loads and measures every finalist)."""

    def __init__(
        self, seconds: float, clock: Callable[[], float], default_instances: int = 1
    ) -> None:
        if seconds <= 0:
            raise UserError(f"the budget must be > 0 seconds, got {seconds:g}")
        self.seconds = seconds
        self.clock = clock
        self.default_instances = default_instances
        self.started = clock()
        self.measure_s = 0.0
        self.load_s: dict[int, float] = {}  # instances -> the longest load seen

    def elapsed(self) -> float:
        return self.clock() - self.started

    def record(self, trial: Trial) -> None:
        self.measure_s = max(self.measure_s, trial.measure_s)
        if not trial.default:
            instances = trial.candidate.instances
            self.load_s[instances] = max(self.load_s.get(instances, 0.0), trial.load_s)

    def load(self, instances: int) -> float:
        """Predicted seconds of loading a config with this many instances."""
        if instances in self.load_s:
            return self.load_s[instances]
        if not self.load_s:
            return FIRST_LOAD_GUESS_S * instances
        return max(seconds / n for n, seconds in self.load_s.items()) * instances

    def predicted(self, candidate: Candidate) -> float:
        """Seconds a trial of `candidate` may take."""
        return self.measure_s + self.load(candidate.instances)

    def reserve(self) -> float:
        """Seconds kept for the end: loading the original config, the summary and report."""
        return self.load(self.default_instances) + END_RESERVE_S

    def confirmation(self, finalists: Sequence[Candidate], rounds: float) -> float:
        """Seconds `rounds` confirmation rounds of these finalists may take."""
        return rounds * sum(self.predicted(candidate) for candidate in finalists)

    def left(self) -> float:
        """Seconds left besides the reserve."""
        return self.seconds - self.elapsed() - self.reserve()

    def fits(self, candidate: Candidate, kept_s: float = 0.0) -> bool:
        """Whether a trial of `candidate` fits, `kept_s` seconds kept for after it."""
        return self.predicted(candidate) + kept_s <= self.left()

    def trials_left(self, candidate: Candidate, kept_s: float = 0.0) -> int:
        """About how many more trials like `candidate` fit, `kept_s` seconds kept."""
        return max(0, math.floor((self.left() - kept_s) / max(self.predicted(candidate), 1e-3)))

    def rounds_left(self, finalists: Sequence[Candidate], wanted: int) -> int:
        """How many confirmation rounds of these finalists fit, at most `wanted`."""
        per_round = max(self.confirmation(finalists, 1), 1e-3)
        return max(0, min(wanted, math.floor(self.left() / per_round)))


@dataclasses.dataclass
class SearchResult:
    """The trials run (the first is the original config), the candidates skipped, the
    confirmation, and the winner: the confirmation's, else the search's pick."""

    trials: list[Trial]
    skipped: list[tuple[Candidate, str]]
    winner: int | None
    elapsed_s: float
    confirmation: Confirmation
    search_winner: int | None  # the trial with the most rows/s meeting p99 in its one window


class Search:
    """Grid, then hill climbing, within a budget (see the module docstring)."""

    def __init__(
        self,
        evaluator: Evaluator,
        space: SearchSpace,
        *,
        p99_ms: float,
        budget_s: float,
        device: DeviceLimits | None = None,
        lane_bytes: int = 0,
        weight_bytes: int = 0,
        confirm_rounds: int = CONFIRM_ROUNDS,
        clock: Callable[[], float] = time.monotonic,
        progress: Progress | None = None,
    ) -> None:
        if p99_ms <= 0:
            raise UserError(f"the p99 constraint must be > 0 ms, got {p99_ms:g}")
        if confirm_rounds < 0:
            raise UserError(f"the confirmation rounds must be >= 0, got {confirm_rounds}")
        self.confirm_rounds = confirm_rounds
        self.evaluator = evaluator
        self.space = space
        self.p99_ms = p99_ms
        self.budget = Budget(budget_s, clock, space.default.instances)
        self.device = device or DeviceLimits()
        self.lane_bytes = lane_bytes
        self.weight_bytes = weight_bytes
        self.limits = Limits(self.device)
        self.progress = progress
        self.trials: list[Trial] = []
        self.skipped: list[tuple[Candidate, str]] = []
        self._seen: set[Candidate] = set()

    def run(self) -> SearchResult:
        """Measure the original config, then search; the trials in the order run."""
        default = self.space.default
        self._seen.add(default)
        first = self._trial(default, default=True, phase="original config", planned=None)
        if first.measurement is not None:
            self.limits = Limits.measured(
                default, first.measurement, self.device, self.lane_bytes, self.weight_bytes
            )
        grid = self.space.grid()
        if self._run_all(grid, "grid", len(grid) + 1):
            self._climb()
        picked = winner_of(self.trials, self.p99_ms)
        confirmation = self._confirm(picked)
        return SearchResult(
            self.trials,
            self.skipped,
            confirmation.winner,
            self.budget.elapsed(),
            confirmation,
            picked,
        )

    def finalists(self) -> list[int]:
        """The original config's trial, then the best candidates meeting the constraint (at
        most `CONFIRM_FINALISTS` in all)."""
        meeting = [i for i, trial in enumerate(self.trials[1:], 1) if trial.meets(self.p99_ms)]
        meeting.sort(key=lambda i: self.trials[i].score(self.p99_ms), reverse=True)
        return [0, *meeting[: CONFIRM_FINALISTS - 1]]

    def _kept_for_confirmation(self, candidate: Candidate) -> float:
        """Seconds the search keeps for the confirmation should `candidate` become a
        finalist: the finalists so far with it, the slowest to confirm kept where it may take
        a place, for the rounds asked and `CONFIRM_SPARE_ROUNDS`."""
        if not self.confirm_rounds:
            return 0.0
        chosen = [self.trials[i].candidate for i in self.finalists()[1:]] + [candidate]
        chosen.sort(key=self.budget.predicted, reverse=True)
        finalists = [self.space.default, *chosen[: CONFIRM_FINALISTS - 1]]
        return self.budget.confirmation(finalists, self.confirm_rounds + CONFIRM_SPARE_ROUNDS)

    def _confirm(self, picked: int | None) -> Confirmation:
        """Re-measure the finalists in alternating rounds, as many as the budget allows."""
        indices = self.finalists()
        wanted = self.confirm_rounds
        if not wanted:
            return Confirmation(0, 0, [], picked, "no confirmation (0 rounds asked for)")
        if len(indices) < 2:
            tried = len(self.trials) - 1
            verdict = (
                f"none of the {tried} other candidates met p99 <= {self.p99_ms:g} ms: nothing to "
                "confirm"
                if tried
                else "the budget ran no candidate besides the original config: nothing to confirm"
            )
            return Confirmation(wanted, 0, [], picked, verdict)
        finalists = [Finalist(i, self.trials[i].candidate) for i in indices]
        rounds = self.budget.rounds_left([f.candidate for f in finalists], wanted)
        if not rounds:
            verdict = (
                f"the budget left no time to confirm the {len(finalists)} finalists "
                "(raise --budget-s): the winner is the best single window"
            )
            self._say(f"confirmation: {verdict}")
            return Confirmation(wanted, 0, [], picked, verdict)
        if rounds < wanted:
            self._say(f"confirmation: the budget allows {rounds} of the {wanted} rounds")
        for number in range(1, rounds + 1):
            for finalist in finalists:
                header = (
                    f"confirmation round {number} of {rounds} ({self.budget.elapsed():.1f} s of "
                    f"{self.budget.seconds:g} s): trial {finalist.trial + 1}, "
                    f"{finalist.candidate.describe()}"
                )
                if self.progress is not None:
                    self.progress.begin(header)
                measured = self._measured(finalist.candidate, load=True)
                finalist.rounds.append(measured)
                self._say(f"{header}: {self._measured_words(measured)}")
        winner, verdict = confirmed_winner(finalists, self.p99_ms)
        self._say(f"confirmation: {verdict}")
        return Confirmation(wanted, rounds, finalists, winner, verdict)

    def _run_all(self, candidates: Sequence[Candidate], phase: str, planned: int) -> bool:
        """Try each; False once the budget is spent."""
        return all(self._try(c, phase, planned) is not False for c in candidates)

    def _climb(self) -> None:
        while True:
            best = max(self.trials, key=lambda t: t.score(self.p99_ms))
            for neighbor in self.space.neighbors(best.candidate):
                outcome = self._try(neighbor, "hill climbing", None)
                if outcome is False:
                    return
                if isinstance(outcome, Trial) and outcome.score(self.p99_ms) > best.score(
                    self.p99_ms
                ):
                    break  # climb on from the better one
            else:
                return  # no neighbor is better: a local optimum

    def _try(self, candidate: Candidate, phase: str, planned: int | None) -> Trial | bool:
        """The trial of a candidate; True if seen before or refused; False if out of budget."""
        if candidate in self._seen:
            return True
        refusal = self.limits.refusal(candidate)
        if refusal is not None:
            self._seen.add(candidate)
            self.skipped.append((candidate, refusal))
            self._say(f"skipped {candidate.describe()}: {refusal}")
            return True
        kept = self._kept_for_confirmation(candidate)
        if not self.budget.fits(candidate, kept):
            self._say(
                f"budget: {self.budget.elapsed():.1f} of {self.budget.seconds:g} s spent, the "
                f"next trial may take {self.budget.predicted(candidate):.1f} s and "
                f"{kept:.1f} s are kept for the confirmation; stopping"
            )
            return False
        self._seen.add(candidate)
        return self._trial(candidate, default=False, phase=phase, planned=planned)

    def _trial(
        self, candidate: Candidate, *, default: bool, phase: str, planned: int | None
    ) -> Trial:
        number = len(self.trials) + 1
        left = self.budget.trials_left(candidate, self._kept_for_confirmation(candidate))
        total = planned or max(number, number - 1 + left)
        header = (
            f"trial {number} of {'at most ' * (planned is None)}{total} ({phase}, "
            f"{self.budget.elapsed():.1f} s of {self.budget.seconds:g} s): {candidate.describe()}"
        )
        if self.progress is not None:
            self.progress.begin(header)
        trial = self._measured(candidate, load=not default)
        self.trials.append(trial)
        self._say(f"{header}: {self._outcome(trial)}")
        return trial

    def _measured(self, candidate: Candidate, *, load: bool) -> Trial:
        """A trial of `candidate`: loaded (unless `load` is False: the config in service, the
        original one), measured, its seconds recorded in the budget."""
        trial = Trial(candidate, default=not load)
        clock = self.budget.clock
        started = clock()
        try:
            if load:
                self.evaluator.load(candidate)
        except LoadFailed as exc:
            trial.error = str(exc)
        trial.load_s = clock() - started
        if trial.error is None:
            started = clock()
            trial.measurement = self.evaluator.measure()
            trial.measure_s = clock() - started
            errors = trial.measurement.errors
            if errors:
                first = next(iter(trial.measurement.error_messages), "")
                trial.error = f"{errors} of {trial.measurement.requests} requests failed: {first}"
        self.budget.record(trial)
        return trial

    def _measured_words(self, trial: Trial) -> str:
        m = trial.measurement
        if m is None:
            return f"not loaded: {trial.error}"
        text = f"{m.rows_per_s:,.1f} rows/s, p99 {_ms(m.p99_ms)}"
        text += "" if trial.meets(self.p99_ms) else f" (misses p99 <= {self.p99_ms:g} ms)"
        return text + (f"; {trial.error}" if trial.error else "")

    def _outcome(self, trial: Trial) -> str:
        text = self._measured_words(trial)
        winner = winner_of(self.trials, self.p99_ms)
        if winner is None:
            return text + "; best so far: none meets the constraint"
        best = self.trials[winner].measurement
        assert best is not None
        return (
            text + f"; best so far: trial {winner + 1}, {best.rows_per_s:,.1f} rows/s at p99 "
            f"{_ms(best.p99_ms)}"
        )

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress.done(text)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"
