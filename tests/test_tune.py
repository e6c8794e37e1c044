"""`ge-python-model tune`: the search on synthetic response surfaces (a fake clock, no server),
the constraints, gear advice on given batch statistics, configs, apply and the report."""

from __future__ import annotations

import dataclasses
import io
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from ge_python_backend.errors import UserError
from ge_python_backend.progress import Progress
from ge_python_backend.repository.budget import DeviceLimits
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.tools.bench import LevelResult
from ge_python_backend.tools.tune import (
    CONFIRM_MIN_GAIN,
    END_RESERVE_S,
    Budget,
    Candidate,
    Finalist,
    Limits,
    LoadFailed,
    Measurement,
    Search,
    SearchSpace,
    Snapshot,
    Trial,
    advise_gears,
    apply_winner,
    atc_command,
    batch_histogram,
    candidate_of,
    confirmation_points,
    confirmed_winner,
    gear_advice,
    load_reason,
    measurement_of,
    padding_of,
    queue_ms,
    tune_document,
    winner_of,
    with_candidate,
    write_report,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GEARS = (1, 2, 4, 8)
DEFAULT = Candidate(
    instances=1,
    pipeline_depth=2,
    pipeline_min_device_us=1000,
    max_queue_delay_us=100,
    preferred_batch_sizes=GEARS,
    device_ids=(0,),
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


Surface = Callable[[Candidate], tuple[float, float]]  # candidate -> (rows/s, p99 ms)


class SyntheticModel:
    """An `Evaluator` whose rows/s and p99 are functions of the candidate; loads and
    measurements advance the fake clock by fixed costs."""

    def __init__(
        self,
        surface: Surface,
        clock: FakeClock,
        *,
        load_s_per_instance: float = 2.0,
        measure_s: float = 1.0,
        fails: Callable[[Candidate], str | None] = lambda c: None,
        memory: tuple[int, int] = (0, 0),  # (bytes one instance holds, free bytes)
    ) -> None:
        self.surface, self.clock, self.fails = surface, clock, fails
        self.load_s_per_instance, self.measure_s, self.memory = (
            load_s_per_instance,
            measure_s,
            memory,
        )
        self.serving = DEFAULT
        self.loads: list[Candidate] = []

    def load(self, candidate: Candidate) -> None:
        self.clock.now += self.load_s_per_instance * candidate.instances
        self.loads.append(candidate)
        reason = self.fails(candidate)
        if reason:
            raise LoadFailed(reason)
        self.serving = candidate

    def measure(self) -> Measurement:
        self.clock.now += self.measure_s
        rows, p99 = self.surface(self.serving)
        held, free = self.memory
        return Measurement(
            rows_per_s=rows,
            requests_per_s=rows,
            p50_ms=p99 / 2,
            p99_ms=p99,
            requests=100,
            errors=0,
            device_memory_bytes={"0": held} if held else {},
            device_memory_free_bytes={"0": free} if free else {},
        )


def surface(candidate: Candidate) -> tuple[float, float]:
    """A smooth surface peaking at 3 instances, depth 1, a 1000 us delay and preferred sizes
    without 1; p99 grows with the delay and the instances."""
    rows = 1000.0
    rows -= 120 * (candidate.instances - 3) ** 2
    rows += 80 if candidate.pipeline_depth == 1 else 0
    rows -= abs(candidate.max_queue_delay_us - 1000) / 20
    rows += 60 if 1 not in candidate.preferred_batch_sizes else 0
    p99 = 10 + candidate.max_queue_delay_us / 200 + 3 * candidate.instances
    return rows, p99


def run_search(model: SyntheticModel, clock: FakeClock, **options: object) -> Search:
    space_options = {"max_instances": 4}
    space = SearchSpace.around(DEFAULT, GEARS, **space_options)  # type: ignore[arg-type]
    settings: dict[str, object] = {"p99_ms": 30.0, "budget_s": 1000.0, "clock": clock}
    settings.update(options)
    return Search(model, space, **settings)  # type: ignore[arg-type]


def test_grid_then_hill_climbing_finds_the_peak_of_the_surface() -> None:
    clock = FakeClock()
    model = SyntheticModel(surface, clock)
    result = run_search(model, clock).run()
    trials = result.trials
    assert trials[0].default and trials[0].candidate == DEFAULT
    assert model.loads[0] == trials[1].candidate  # the original config was measured as served
    assert all(not t.default for t in trials[1:])
    assert len({t.candidate for t in trials}) == len(trials)  # no config tried twice
    grid = SearchSpace.around(DEFAULT, GEARS, max_instances=4).grid()
    assert [t.candidate for t in trials[1 : 1 + len(grid)]] == grid
    assert {c.instances for c in grid} == {1, 2} and {c.pipeline_depth for c in grid} == {1, 2}
    assert result.winner is not None
    best = trials[result.winner]
    assert best.candidate.instances == 3
    assert best.candidate.pipeline_depth == 1
    assert best.candidate.max_queue_delay_us == 1000
    assert 1 not in best.candidate.preferred_batch_sizes
    # every trial that meets p99 <= 30 has at most the winner's rows/s
    meeting = [t for t in trials if t.meets(30.0)]
    assert best.measurement is not None
    assert all(
        t.measurement and t.measurement.rows_per_s <= best.measurement.rows_per_s for t in meeting
    )


def test_the_winner_meets_the_p99_constraint_even_when_faster_configs_do_not() -> None:
    clock = FakeClock()
    result = run_search(SyntheticModel(surface, clock), clock, p99_ms=22.0).run()
    assert result.winner is not None
    winner = result.trials[result.winner]
    assert winner.measurement is not None and winner.measurement.p99_ms is not None
    assert winner.measurement.p99_ms <= 22.0
    faster = [
        t
        for t in result.trials
        if t.measurement and t.measurement.rows_per_s > winner.measurement.rows_per_s
    ]
    assert faster and all(not t.meets(22.0) for t in faster)


def test_no_winner_when_nothing_meets_the_constraint() -> None:
    clock = FakeClock()
    result = run_search(SyntheticModel(surface, clock), clock, p99_ms=1.0).run()
    assert result.winner is None and len(result.trials) > 1
    others = len(result.trials) - 1
    assert result.confirmation.verdict == (
        f"none of the {others} other candidates met p99 <= 1 ms: nothing to confirm"
    )


@pytest.mark.parametrize("confirm_rounds", [0, 2])
@pytest.mark.parametrize("budget_s", [9.0, 25.0, 60.0])
def test_the_budget_holds_the_trials_and_the_restore(budget_s: float, confirm_rounds: int) -> None:
    clock = FakeClock()
    model = SyntheticModel(surface, clock, load_s_per_instance=3.0, measure_s=1.0)
    search = run_search(model, clock, budget_s=budget_s, confirm_rounds=confirm_rounds)
    result = search.run()
    model.load(DEFAULT)  # what tune does next: the original config back
    spent = clock.now - search.budget.started
    assert spent + END_RESERVE_S <= budget_s  # room left for the summary and the report
    assert result.elapsed_s <= budget_s
    if budget_s >= 60:
        # the search kept the confirmation's time: fewer trials, every round confirmed
        assert len(result.trials) > (5 if confirm_rounds == 0 else 3)
        assert result.confirmation.rounds == confirm_rounds
    full = run_search(SyntheticModel(surface, FakeClock()), FakeClock()).run()
    assert len(result.trials) < len(full.trials)  # the budget, not the search, ended it


def test_a_budget_too_small_for_one_load_measures_only_the_original_config() -> None:
    clock = FakeClock()
    model = SyntheticModel(surface, clock)
    result = run_search(model, clock, budget_s=3.0).run()
    assert len(result.trials) == 1 and model.loads == []
    assert "the budget ran no candidate besides the original config" in (
        result.confirmation.verdict
    )


class NoisyModel(SyntheticModel):
    """A `SyntheticModel` whose n-th window of a candidate is off by `noise[candidate][n]` (a
    factor on its rows/s; 1 past the list): the machine's noise, window by window."""

    def __init__(
        self, surface: Surface, clock: FakeClock, noise: dict[Candidate, list[float]], **options
    ) -> None:
        super().__init__(surface, clock, **options)
        self.noise = noise
        self.windows: Counter[Candidate] = Counter()

    def measure(self) -> Measurement:
        measured = super().measure()
        factors = self.noise.get(self.serving, [])
        window = self.windows[self.serving]
        self.windows[self.serving] += 1
        factor = factors[window] if window < len(factors) else 1.0
        return dataclasses.replace(measured, rows_per_s=measured.rows_per_s * factor)


BETTER = dataclasses.replace(DEFAULT, instances=2, pipeline_depth=1)  # in the grid
LUCKY = dataclasses.replace(DEFAULT, instances=2)  # in the grid


def flat(rows: dict[Candidate, float]) -> Surface:
    """900 rows/s at p99 10 ms everywhere but at the given candidates."""
    return lambda candidate: (rows.get(candidate, 900.0), 10.0)


def test_the_confirmation_overturns_a_lucky_single_window() -> None:
    clock, progress = FakeClock(), io.StringIO()
    # LUCKY's one search window was 15% high: 1,207.5 against BETTER's 1,100
    model = NoisyModel(flat({BETTER: 1100.0, LUCKY: 1050.0}), clock, {LUCKY: [1.15]})
    result = run_search(model, clock, progress=Progress(progress)).run()
    index = {t.candidate: i for i, t in enumerate(result.trials)}
    assert result.search_winner == index[LUCKY]
    assert result.winner == index[BETTER]
    confirmation = result.confirmation
    assert confirmation.rounds == 2
    finalists = [f.trial for f in confirmation.finalists]
    assert finalists == [0, index[LUCKY], index[BETTER]]  # the original, then by rows/s
    # alternating rounds: each finalist loaded (the same load path) once a round, in turn
    order = [DEFAULT, LUCKY, BETTER]
    assert model.loads[-6:] == order + order
    entries = confirmation.as_list()
    assert [e["rows_per_s"] for e in entries] == [[900.0, 900.0], [1050.0, 1050.0], [1100.0] * 2]
    assert entries[2]["vs_default"] == [round(1100 / 900, 4)] * 2
    assert "faster in every round: it wins" in confirmation.verdict
    lines = progress.getvalue().splitlines()
    assert "confirmation round 2 of 2" in progress.getvalue()
    # one line a trial, as each ends: what was tried and what it measured
    first = next(line for line in lines if line.startswith("trial 1 of "))
    assert "900.0 rows/s, p99 10.00 ms; best so far: trial 1" in first


def test_the_plot_joins_each_confirmation_round_to_its_finalist() -> None:
    clock = FakeClock()
    model = NoisyModel(flat({BETTER: 1100.0, LUCKY: 1050.0}), clock, {LUCKY: [1.15]})
    result = run_search(model, clock).run()
    index = {t.candidate: i for i, t in enumerate(result.trials)}
    # 2 rounds of the 3 finalists, each at its round's measured rows/s (the flat surface's p99)
    assert sorted(confirmation_points(result.confirmation)) == sorted(
        [(0, 10.0, 900.0)] * 2
        + [(index[LUCKY], 10.0, 1050.0)] * 2
        + [(index[BETTER], 10.0, 1100.0)] * 2
    )
    clock = FakeClock()
    unconfirmed = run_search(SyntheticModel(surface, clock), clock, confirm_rounds=0).run()
    assert confirmation_points(unconfirmed.confirmation) == []


def test_a_candidate_within_the_noise_of_the_original_config_does_not_win() -> None:
    clock = FakeClock()
    # truly 1% faster; its search window 12% high, the rounds' windows +4% and -1%
    model = NoisyModel(flat({LUCKY: 909.0}), clock, {LUCKY: [1.12, 1.04, 0.99]})
    result = run_search(model, clock).run()
    assert result.search_winner == [t.candidate for t in result.trials].index(LUCKY)
    assert result.winner == 0  # the original config is kept
    assert result.confirmation.rounds == 2
    assert "no config beats the defaults beyond the noise" in result.confirmation.verdict
    assert "per round 1.050, 1.000" in result.confirmation.verdict
    # faster in both rounds but by less than the margin in the median: kept as well
    clock = FakeClock()
    slight = 1 + CONFIRM_MIN_GAIN / 2
    model = NoisyModel(flat({LUCKY: 900.0 * slight}), clock, {LUCKY: [1.12]})
    assert run_search(model, clock).run().winner == 0


def test_a_budget_without_room_for_the_confirmation_says_so(tmp_path: Path) -> None:
    clock, progress = FakeClock(), io.StringIO()
    # the first load (guessed 5 s) takes 12: afterwards not one round of 2 finalists fits
    model = SyntheticModel(flat({DEFAULT: 800.0}), clock, load_s_per_instance=12.0)
    search = run_search(model, clock, budget_s=50.0, progress=Progress(progress))
    result = search.run()
    model.load(DEFAULT)
    assert clock.now - search.budget.started + END_RESERVE_S <= 50.0
    assert len(result.trials) == 2 and result.trials[1].meets(30.0)
    assert result.confirmation.rounds == 0 and len(model.loads) == 2
    assert "the budget left no time to confirm" in result.confirmation.verdict
    assert "the budget left no time to confirm" in progress.getvalue()
    assert result.winner == result.search_winner == 1  # the best single window
    write_report(tmp_path, "mlp", "ge-python-model tune ...", result, 30.0, None, "")
    document = json.loads((tmp_path / "tune.json").read_text())
    assert document["confirmation"] == [] and document["confirmation_rounds"] == 0
    assert "the budget left no time" in document["confirmation_verdict"]
    assert "No confirmation rounds: the budget left no time" in (tmp_path / "TUNE.md").read_text()


def test_a_budget_for_one_round_confirms_in_one() -> None:
    clock, progress = FakeClock(), io.StringIO()
    model = SyntheticModel(flat({BETTER: 1000.0}), clock, load_s_per_instance=8.0)
    result = run_search(model, clock, budget_s=52.0, progress=Progress(progress)).run()
    assert result.confirmation.rounds == 1 and result.confirmation.wanted == 2
    assert "the budget allows 1 of the 2 rounds" in progress.getvalue()


class SlowingModel(SyntheticModel):
    """A `SyntheticModel` whose loads take `factor` times longer from the `after`-th on: a
    machine that gets loaded while the search runs."""

    def __init__(self, surface: Surface, clock: FakeClock, after: int, factor: float) -> None:
        super().__init__(surface, clock, load_s_per_instance=3.0)
        self.after, self.factor = after, factor

    def load(self, candidate: Candidate) -> None:
        if len(self.loads) == self.after:
            self.load_s_per_instance *= self.factor
        super().load(candidate)


@pytest.mark.parametrize("budget_s", [60.0, 90.0])
@pytest.mark.parametrize("after", range(2, 7))
def test_a_trial_slower_than_predicted_leaves_the_confirmation_its_rounds(
    after: int, budget_s: float
) -> None:
    # loads 40% over the longest seen spend the time and raise every finalist's prediction:
    # the time kept for the confirmation still holds its round, and the restore its reserve
    clock = FakeClock()
    model = SlowingModel(flat({BETTER: 1000.0, LUCKY: 950.0}), clock, after, 1.4)
    search = run_search(model, clock, budget_s=budget_s, confirm_rounds=1)
    result = search.run()
    assert len(model.loads) > after + 1  # the slowdown came during the search
    assert result.confirmation.rounds == 1, result.confirmation.verdict
    model.load(DEFAULT)
    assert clock.now - search.budget.started + END_RESERVE_S <= budget_s


def confirmed(trial: int, *rounds: tuple[float, float]) -> Finalist:
    measured = [Trial(DEFAULT, False, Measurement(r, r, p, p, 10, 0)) for r, p in rounds]
    return Finalist(trial, DEFAULT, measured)


def test_the_confirmed_winner_keeps_p99_in_every_round() -> None:
    default = confirmed(0, (900, 10), (900, 40))  # missed p99 <= 30 in its second round
    fast = confirmed(3, (1200, 20), (1200, 35))
    steady = confirmed(5, (950, 12), (1000, 12))
    assert confirmed_winner([default, fast, steady], 30.0)[0] == 5
    assert confirmed_winner([default, fast], 30.0)[0] is None
    kept, verdict = confirmed_winner([confirmed(0, (900, 10), (900, 10)), fast], 30.0)
    assert kept == 0 and "no other finalist met p99 <= 30 ms in every round" in verdict


def test_the_confirmation_can_be_turned_off() -> None:
    clock = FakeClock()
    model = NoisyModel(flat({BETTER: 1100.0, LUCKY: 1050.0}), clock, {LUCKY: [1.15]})
    result = run_search(model, clock, confirm_rounds=0).run()
    assert result.confirmation.rounds == 0 and result.winner == result.search_winner
    assert result.trials[result.winner].candidate == LUCKY


def test_budget_predictions_follow_the_loads_seen() -> None:
    clock = FakeClock()
    budget = Budget(100.0, clock, default_instances=1)
    two = dataclasses.replace(DEFAULT, instances=2)
    budget.record(Trial(DEFAULT, True, measure_s=1.5))
    budget.record(Trial(two, False, load_s=6.0, measure_s=1.0))
    assert budget.load(2) == 6.0
    assert budget.load(4) == 12.0  # the longest per instance, times 4
    assert budget.predicted(dataclasses.replace(DEFAULT, instances=4)) == 13.5
    # exactly one 2-instance trial and the reserve (a 1-instance load, 3 s, and the end) left
    clock.now += 100 - 1.5 - 6.0 - 3.0 - END_RESERVE_S
    assert budget.fits(two)
    clock.now += 0.01
    assert not budget.fits(two)


def test_failed_loads_are_trials_with_triton_s_reason() -> None:
    clock = FakeClock()

    def fails(candidate: Candidate) -> str | None:
        return "out of device memory" if candidate.instances == 2 else None

    result = run_search(SyntheticModel(surface, clock, fails=fails), clock).run()
    failed = [t for t in result.trials if not t.loaded]
    assert failed and all(t.candidate.instances == 2 for t in failed)
    entry = failed[0].as_dict()
    assert entry["loaded"] is False and entry["error"] == "out of device memory"
    assert entry["rows_per_s"] is None and entry["p99_ms"] is None
    assert result.winner is not None and result.trials[result.winner].loaded


def test_memory_and_process_limits_skip_what_the_device_cannot_hold() -> None:
    # One instance at depth 2 holds 100 bytes for its process and 1000 in buffers (500 a lane);
    # 2500 are free: the model may hold 3600 bytes, i.e. at most 3 instances at depth 2 (3300)
    # and 6 at depth 1 (600 each).
    device = DeviceLimits(max_processes=64, process_memory=100)
    measurement = Measurement(
        1.0,
        1.0,
        1.0,
        1.0,
        1,
        0,
        device_memory_bytes={"0": 1000},
        device_memory_free_bytes={"0": 2500},
    )
    limits = Limits.measured(DEFAULT, measurement, device)
    assert (limits.lane_bytes, dict(limits.device_bytes)) == (500, {0: 3600})
    assert limits.refusal(dataclasses.replace(DEFAULT, instances=3)) is None
    refusal = limits.refusal(dataclasses.replace(DEFAULT, instances=4))
    assert refusal is not None and "4400 bytes" in refusal and "3600" in refusal
    assert limits.refusal(dataclasses.replace(DEFAULT, instances=6, pipeline_depth=1)) is None
    assert limits.refusal(dataclasses.replace(DEFAULT, instances=7, pipeline_depth=1))
    # a lane's cost from the .om (the budget's figure) wins over the measured buffers, and an
    # instance's weights count once: 4300 bytes, 3 instances at depth 2 (100 + 300 + 2 x 700)
    from_om = Limits.measured(DEFAULT, measurement, device, lane_bytes=700, weight_bytes=300)
    assert (from_om.lane_bytes, dict(from_om.device_bytes)) == (700, {0: 2500 + 1800})
    assert from_om.refusal(dataclasses.replace(DEFAULT, instances=2)) is None
    refusal = from_om.refusal(dataclasses.replace(DEFAULT, instances=3))
    assert refusal is not None and "5400 bytes" in refusal

    processes = Limits(DeviceLimits(max_processes=2))
    crowded = dataclasses.replace(DEFAULT, instances=3)
    assert "at most 2 processes per device" in str(processes.refusal(crowded))
    assert processes.refusal(dataclasses.replace(crowded, device_ids=(0, 1))) is None

    clock = FakeClock()
    model = SyntheticModel(surface, clock, memory=(1000, 1500))  # 2500 bytes, 5 lanes
    result = run_search(model, clock, device=DeviceLimits(process_memory=0)).run()
    assert all(c.instances * c.pipeline_depth <= 5 for c in model.loads)
    skipped = [c for c, _ in result.skipped]
    assert skipped and all(c.instances * c.pipeline_depth > 5 for c in skipped)


def test_process_limit_in_the_search() -> None:
    clock = FakeClock()
    model = SyntheticModel(surface, clock)
    result = run_search(model, clock, device=DeviceLimits(max_processes=2)).run()
    assert all(c.instances <= 2 for c in model.loads)
    assert any(c.instances == 3 for c, _ in result.skipped)


def test_neighbors_change_one_knob_one_step() -> None:
    space = SearchSpace.around(DEFAULT, GEARS, max_instances=4, device_ids=(0, 1))
    assert space.placements == ((0,), (0, 1))
    neighbors = space.neighbors(DEFAULT)
    fields = [f.name for f in dataclasses.fields(Candidate)]
    for neighbor in neighbors:
        changed = [f for f in fields if getattr(neighbor, f) != getattr(DEFAULT, f)]
        assert len(changed) == 1, neighbor
    assert dataclasses.replace(DEFAULT, instances=2) in neighbors
    assert dataclasses.replace(DEFAULT, max_queue_delay_us=250) in neighbors
    assert dataclasses.replace(DEFAULT, max_queue_delay_us=0) in neighbors
    assert dataclasses.replace(DEFAULT, preferred_batch_sizes=(2, 4, 8)) in neighbors
    assert dataclasses.replace(DEFAULT, pipeline_min_device_us=250) in neighbors
    assert dataclasses.replace(DEFAULT, device_ids=(0, 1)) in neighbors
    assert dataclasses.replace(DEFAULT, pipeline_depth=1) in neighbors
    # at depth 1 the minimum device time is not varied
    depth1 = dataclasses.replace(DEFAULT, pipeline_depth=1)
    assert all(n.pipeline_min_device_us == 1000 for n in space.neighbors(depth1))


def test_a_model_without_dynamic_batching_varies_instances_and_depth_only() -> None:
    config = ModelConfig(name="m", backend="python")
    original = candidate_of(config)
    assert (original.instances, original.max_queue_delay_us, original.preferred_batch_sizes) == (
        1,
        0,
        (),
    )
    space = SearchSpace.around(original, (), batched=False)
    varied = [*space.grid(), *space.neighbors(original)]
    assert varied and all(c.max_queue_delay_us == 0 and not c.preferred_batch_sizes for c in varied)
    changed = with_candidate(config, dataclasses.replace(original, instances=2))
    assert not changed.HasField("dynamic_batching")
    assert [(g.kind, g.count) for g in changed.instance_group] == [(ModelInstanceGroup.KIND_CPU, 2)]


def test_winner_is_the_most_rows_meeting_the_constraint_without_errors() -> None:
    def trial(rows: float, p99: float, errors: int = 0) -> Trial:
        return Trial(DEFAULT, False, Measurement(rows, rows, p99, p99, 10, errors))

    trials = [trial(100, 10), trial(300, 40), trial(200, 20), trial(250, 15, errors=1)]
    assert winner_of(trials, 30.0) == 2
    assert winner_of(trials, 5.0) is None


# -- measurements ------------------------------------------------------------------------------


def stats(queue: tuple[int, int], batches: dict[int, int], as_text: bool = False) -> dict:
    def number(value: int) -> object:
        return str(value) if as_text else value  # gRPC's JSON gives 64-bit counts as strings

    return {
        "model_stats": [
            {
                "inference_stats": {"queue": {"count": number(queue[0]), "ns": number(queue[1])}},
                "batch_stats": [
                    {"batch_size": number(size), "compute_infer": {"count": number(count)}}
                    for size, count in batches.items()
                ],
            }
        ]
    }


@pytest.mark.parametrize("as_text", [False, True])
def test_queue_time_and_batch_sizes_are_the_window_s_deltas(as_text: bool) -> None:
    before = stats((10, 5_000_000), {1: 4, 2: 1}, as_text)
    after = stats((30, 45_000_000), {1: 4, 2: 6, 8: 3}, as_text)
    assert queue_ms(before, after) == pytest.approx(2.0)  # 40 ms over 20 requests
    assert batch_histogram(before, after) == {2: 5, 8: 3}
    assert queue_ms(after, after) is None


def test_a_measurement_combines_the_level_and_the_snapshots() -> None:
    result = LevelResult(8, 100, 0, 2.0, 400, p50_ms=5.0, p90_ms=8.0, p95_ms=8.5, p99_ms=9.0)
    result.device = {
        "0": {"busy_seconds": 1.5, "executions": 50.0, "rows": 400.0, "padded_rows": 40.0}
    }
    metrics = (
        'ge_device_memory_bytes{device="0",model="m",version="1"} 4096\n'
        'ge_device_memory_free_bytes{device="0",model="m",version="1"} 1000000\n'
        'ge_device_memory_bytes{device="0",model="other",version="1"} 9\n'
    )
    before = Snapshot("", stats((0, 0), {}))
    after = Snapshot(metrics, stats((100, 300_000_000), {8: 50}))
    m = measurement_of(result, before, after, "m")
    assert (m.rows_per_s, m.requests_per_s, m.p99_ms) == (200.0, 50.0, 9.0)
    assert m.device_utilization == pytest.approx(0.75)
    assert m.padding_ratio == pytest.approx(0.1) and m.rows_per_execution == 8.0
    assert m.queue_ms == pytest.approx(3.0)
    assert dict(m.device_memory_bytes) == {"0": 4096}
    assert dict(m.device_memory_free_bytes) == {"0": 1000000}
    assert dict(m.batch_sizes) == {8: 50}


def test_load_reason_drops_the_stub_s_traceback() -> None:
    class Failure(Exception):
        def message(self) -> str:
            return "load failed for model 'm': ConfigError: bad\n\nAt:\n  model.py(28): x\n"

    assert load_reason(Failure()) == "load failed for model 'm': ConfigError: bad"


# -- gear advice -------------------------------------------------------------------------------


def test_padding_follows_the_runtime_s_chunk_plan() -> None:
    histogram = {3: 10, 5: 2, 11: 1}  # 3 -> gear 4, 5 -> 8, 11 -> 8 + 4 (3 real)
    assert padding_of(histogram, GEARS) == (10 * 1 + 2 * 3 + 1, 30 + 10 + 11)


def test_advised_gears_pad_least_for_their_number() -> None:
    histogram = {3: 100, 6: 50, 8: 10, 1: 5}
    assert advise_gears(histogram, 8, 1) == (8,)
    assert advise_gears(histogram, 8, 2) == (3, 8)
    assert advise_gears(histogram, 8, 3) == (3, 6, 8)
    assert advise_gears(histogram, 8, 4) == (1, 3, 6, 8)
    assert advise_gears(histogram, 8, 9) == (1, 3, 6, 8)  # never more gears than sizes
    # exhaustively: no other set of 3 gears ending at 8 pads less
    best = padding_of(histogram, (3, 6, 8))[0]
    for low in range(1, 8):
        for mid in range(low + 1, 8):
            assert padding_of(histogram, (low, mid, 8))[0] >= best


def test_gear_advice_compares_sets_and_prints_the_atc_command() -> None:
    measurement = Measurement(1, 1, 1, 1, 1, 0, batch_sizes={3: 100, 6: 50, 8: 10, 1: 5})
    trials = [Trial(DEFAULT, True, measurement)]
    inputs = [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}]
    advice = gear_advice(trials, 0, GEARS, "mlp", inputs)
    assert advice is not None
    by_label = {o.label: o for o in advice.options}
    assert by_label["compiled gears"].gears == GEARS
    assert by_label["compiled gears"].padded_rows == 100 * 1 + 50 * 2
    assert by_label["best 4 gears"].gears == (1, 3, 6, 8)
    assert by_label["best 4 gears"].padded_rows == 0
    assert advice.recommended is not None and advice.recommended.gears == (1, 3, 6, 8)
    assert advice.atc_command == (
        "atc --model=MODEL.onnx --framework=5 --output=mlp --soc_version=SOC "
        '--input_shape="x:-1,16" --dynamic_batch_size="1,3,6,8"'
    )
    # gears already fitting the traffic: nothing recommended
    fitting = [Trial(DEFAULT, True, dataclasses.replace(measurement, batch_sizes={4: 9, 8: 1}))]
    calm = gear_advice(fitting, 0, GEARS, "mlp", inputs)
    assert calm is not None and calm.recommended is None and calm.atc_command is None
    empty = [Trial(DEFAULT, True, dataclasses.replace(measurement, batch_sizes={}))]
    assert gear_advice(empty, 0, GEARS, "mlp", inputs) is None


def test_atc_command_names_every_input_with_a_free_batch_axis() -> None:
    inputs = [{"name": "a", "shape": [-1, 4]}, {"name": "b", "shape": [-1, 2, 3]}]
    assert '--input_shape="a:-1,4;b:-1,2,3"' in atc_command("m", inputs, (1, 8))


# -- configs, apply, report --------------------------------------------------------------------


@pytest.fixture
def repository(tmp_path: Path, om_dynamic_batch: Path) -> Path:
    repo = tmp_path / "models"
    scaffold(om_dynamic_batch, repo, name="mlp", runtime="emulator")
    return repo


def test_a_candidate_round_trips_through_the_config(repository: Path) -> None:
    config = load_model_config(repository / "mlp" / "config.pbtxt")
    original = candidate_of(config)
    assert original == Candidate(1, 2, 1000, 100, GEARS, (0,))
    assert "pipeline_min_device_us" not in config.parameters
    tuned = Candidate(3, 2, 250, 1000, (4, 8), (0, 1))
    changed = with_candidate(config, tuned)
    assert candidate_of(changed) == tuned
    assert changed.parameters["pipeline_min_device_us"].string_value == "250"
    assert changed.input == config.input and changed.model_warmup == config.model_warmup
    # the original's default minimum device time stays implicit
    same = with_candidate(config, original)
    assert same == config


def test_apply_writes_a_config_that_validates_and_prints_the_diff(repository: Path) -> None:
    tuned = Candidate(2, 1, 1000, 1000, (2, 4, 8), (0,))
    diff = apply_winner(repository, "mlp", tuned)
    assert "-  count: 1" in diff and "+  count: 2" in diff
    assert '-    string_value: "2"\n+    string_value: "1"' in diff  # pipeline_depth
    assert "max_queue_delay_microseconds: 1000" in diff
    assert candidate_of(load_model_config(repository / "mlp" / "config.pbtxt")) == tuned
    (report,) = validate_repository(repository, name="mlp")
    assert report.ok, report.problems
    assert apply_winner(repository, "mlp", tuned) == ""  # already applied: no diff


def test_apply_refuses_a_missing_model(repository: Path) -> None:
    with pytest.raises(UserError, match="no model 'other'"):
        apply_winner(repository, "other", DEFAULT)


def test_the_report_holds_tune_json_as_specified_and_a_plot(tmp_path: Path) -> None:
    clock = FakeClock()

    def fails(candidate: Candidate) -> str | None:
        return "bad config" if candidate.instances == 2 and candidate.pipeline_depth == 1 else None

    result = run_search(SyntheticModel(surface, clock, fails=fails), clock).run()
    paths = write_report(
        tmp_path / "report",
        "mlp",
        "ge-python-model tune ...",
        result,
        30.0,
        None,
        "The original config was loaded back.",
    )
    document = json.loads((tmp_path / "report" / "tune.json").read_text())
    assert document == json.loads(json.dumps(tune_document(result, 30.0, None)))
    assert document["winner"] == result.winner
    assert document["trials"][0]["default"] is True
    assert all(t["default"] is False for t in document["trials"][1:])
    for entry in document["trials"]:
        for key in (
            "config",
            "default",
            "loaded",
            "error",
            "rows_per_s",
            "requests_per_s",
            "p50_ms",
            "p99_ms",
            "device_utilization",
            "padding_ratio",
            "rows_per_execution",
        ):
            assert key in entry, key
        assert set(entry["config"]) == {
            "instances",
            "pipeline_depth",
            "pipeline_min_device_us",
            "max_queue_delay_microseconds",
            "preferred_batch_size",
            "device_ids",
        }
    assert any(
        entry["loaded"] is False and entry["error"] == "bad config" for entry in document["trials"]
    )
    rounds = document["confirmation_rounds"]
    assert rounds == 2 and document["confirmation"][0]["trial"] == 0
    for entry in document["confirmation"]:
        assert len(entry["rows_per_s"]) == len(entry["p99_ms"]) == rounds
    markdown = (tmp_path / "report" / "TUNE.md").read_text()
    assert "**winner**" in markdown and "original" in markdown and "tune.png" in markdown
    assert "## Confirmation" in markdown and result.confirmation.verdict in markdown
    assert (tmp_path / "report" / "tune.png").read_bytes().startswith(PNG_MAGIC)
    assert len(paths) == 3
