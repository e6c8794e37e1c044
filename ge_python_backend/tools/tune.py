"""Find a served model's best serving config under a p99 budget (`ge-python-model tune`).

Against a Triton in explicit model-control mode, each trial unloads the model and loads a variant
of its config through the repository API with a config override (`POST
v2/repository/models/NAME/load`, the config JSON as its `config` parameter), never restarting
Triton; a load that fails is listed with Triton's reason (the next trial loads again). The
first trial measures the config the model has; the original config is loaded back at the end
unless the winner is applied to the repository's config.pbtxt.

A trial is one run of the load function (`LoadFunction`; closed-loop `bench.run_level` by
default) with a `TrialProbe`: the device counters bench reads (`MetricsProbe`), plus the metrics
text and Triton's statistics right before and after the measured window, which give the queue
time, the device memory and the batch sizes Triton formed (`batch_stats`).

The search (`Search`) runs a small grid (instances 1 and 2, pipeline depth 1 and 2, the original
batching and one that waits longer for larger batches), then hill climbs: one knob one step from
the best trial so far (`SearchSpace.neighbors`) while that improves it. Candidates the device
cannot hold (`Limits`: pyACL's processes per device, device memory) are skipped, and a trial
never starts when it cannot finish within the budget (`Budget`), the confirmation that follows
the search included, with a margin. The search's pick is the trial with the most rows/s whose
p99 meets the constraint and whose requests all succeeded; one short window per trial makes that
pick partly luck, so the confirmation (`Confirmation`) re-measures the finalists (the original
config and the best candidates meeting the constraint) in alternating rounds and decides the
winner on them (`confirmed_winner`).

Gear advice (`advise_gears`) picks the batch gears that would have padded the observed batches
least (`padding_of`, with the runtime's own chunk planning).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from ge_python_backend.client import TritonClient, error_text
from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import (
    config_view,
    load_model_config,
    write_model_config,
)
from ge_python_backend.repository.parameters import (
    DEFAULT_PIPELINE_MIN_DEVICE_US,
    ModelParameters,
)
from ge_python_backend.repository.validation import validate_repository
from ge_python_backend.runtime import PIPELINE_DEPTHS
from ge_python_backend.runtime.batching import plan_chunks
from ge_python_backend.tools.bench import (
    DEVICE_METRICS,
    DeviceCounters,
    LevelResult,
    MetricsProbe,
    Target,
    metric_samples,
    run_level,
    run_rate_level,
)

# pyACL serves at most this many processes per device (half of it in a VM); each model instance
# of the Python backend is a stub process of its own.
PROCESSES_PER_DEVICE = 64
PROCESSES_PER_DEVICE_VM = 32
DEFAULT_MAX_INSTANCES = 4
# The rungs of the stepped knobs (the original config's value is added to its ladder).
QUEUE_DELAYS_US = (0, 100, 250, 500, 1000, 2000, 5000, 10000)
PIPELINE_MIN_DEVICE_US = (0, 250, 1000, 4000)
# The grid's batching that waits longer: this many rungs above the original's queue delay.
WAITING_DELAY_STEPS = 3
# A trial's load time before any load was seen (for the budget).
FIRST_LOAD_GUESS_S = 5.0
# Kept in the budget for what follows the search besides loading a config: summary and report.
END_RESERVE_S = 2.0
# Each trial unloads the model before loading the next config: a reload runs the old and the
# new instances side by side, whose ge_* series have the same labels; Triton 2.51 shares and
# then removes their counter (series jump or vanish, a later reload crashed the server once).
UNLOAD_TIMEOUT_S = 60.0
UNLOAD_POLL_S = 0.05
MEMORY_METRIC = "ge_device_memory_bytes"  # one instance's pooled buffers, per device
# The confirmation: this many finalists (the original config first, then the candidates with
# the most rows/s meeting the constraint), loaded and measured in turn, round after round.
CONFIRM_FINALISTS = 3
CONFIRM_ROUNDS = 2
# A candidate beats the original config when its rows/s does in every round and its median
# per-round ratio is more than this above 1.
CONFIRM_MIN_GAIN = 0.03
# The search keeps time for this many rounds more than asked: a trial slower than predicted
# spends the time and raises every finalist's prediction with it (one trial 18% over its
# prediction once left no room for the one round asked). Past the first, a round that no longer
# fits is dropped and said.
CONFIRM_SPARE_ROUNDS = 0.5
FREE_MEMORY_METRIC = "ge_device_memory_free_bytes"

Rung = TypeVar("Rung")
# The load a trial measures: target, probe -> the measured window (`bench.run_level`'s result).
LoadFunction = Callable[[Target, MetricsProbe], LevelResult]


def closed_loop(concurrency: int, duration_s: float, warmup: int) -> LoadFunction:
    """`concurrency` clients, each one request in flight, for `duration_s` after `warmup`."""
    return functools.partial(
        _closed_loop, concurrency=concurrency, duration=duration_s, warmup=warmup
    )


def _closed_loop(
    target: Target, metrics: MetricsProbe, *, concurrency: int, duration: float, warmup: int
) -> LevelResult:
    return run_level(target, concurrency, duration=duration, warmup=warmup, metrics=metrics)


def open_loop(
    rate: float,
    duration_s: float,
    warmup: int,
    *,
    arrival: str,
    max_in_flight: int,
    seed: int = 0,
) -> LoadFunction:
    """`rate` requests per second whatever the answers (`bench.run_rate_level`), for
    `duration_s` after `warmup` requests at that rate."""
    return functools.partial(
        _open_loop,
        rate=rate,
        duration=duration_s,
        warmup=warmup,
        arrival=arrival,
        max_in_flight=max_in_flight,
        seed=seed,
    )


def _open_loop(target: Target, metrics: MetricsProbe, **options: Any) -> LevelResult:
    """`bench.run_rate_level` as a trial's load: the device counters read around its window."""
    return run_rate_level(target, metrics=metrics, **options)


# -- configs -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Candidate:
    """The fields a trial varies; instance k runs on `device_ids[k % len(device_ids)]`."""

    instances: int
    pipeline_depth: int
    pipeline_min_device_us: int
    max_queue_delay_us: int
    preferred_batch_sizes: tuple[int, ...]
    device_ids: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        """The `config` of a trial in tune.json."""
        return {
            "instances": self.instances,
            "pipeline_depth": self.pipeline_depth,
            "pipeline_min_device_us": self.pipeline_min_device_us,
            "max_queue_delay_microseconds": self.max_queue_delay_us,
            "preferred_batch_size": list(self.preferred_batch_sizes),
            "device_ids": list(self.device_ids),
        }

    def describe(self) -> str:
        """One line: `2 instances on 0, depth 2 (min 1000 us), delay 100 us, preferred 4,8`."""
        preferred = ",".join(map(str, self.preferred_batch_sizes)) or "none"
        depth = f"depth {self.pipeline_depth}"
        if self.pipeline_depth > 1:
            depth += f" (min {self.pipeline_min_device_us} us)"
        devices = ",".join(map(str, self.device_ids))
        return (
            f"{self.instances} instance{'s' * (self.instances > 1)} on {devices}, {depth}, "
            f"delay {self.max_queue_delay_us} us, preferred {preferred}"
        )

    def instances_per_device(self) -> dict[int, int]:
        """Device id -> how many of the instances run on it."""
        ids = self.device_ids
        return dict(Counter(ids[k % len(ids)] for k in range(self.instances)))


def candidate_of(config: ModelConfig) -> Candidate:
    """The varied fields of a config (instances summed over its instance groups)."""
    params = ModelParameters.from_config(config_view(config))
    batching = config.dynamic_batching
    return Candidate(
        instances=sum(max(group.count, 1) for group in config.instance_group) or 1,
        pipeline_depth=params.pipeline_depth,
        pipeline_min_device_us=round(params.pipeline_min_device_s * 1e6),
        max_queue_delay_us=batching.max_queue_delay_microseconds,
        preferred_batch_sizes=tuple(batching.preferred_batch_size),
        device_ids=params.device_ids,
    )


def with_candidate(config: ModelConfig, candidate: Candidate) -> ModelConfig:
    """A copy of `config` with the candidate's fields (all else kept): one instance group of
    its kind, the parameters through `ModelParameters`, dynamic batching if it has any."""
    result = ModelConfig()
    result.CopyFrom(config)
    if len(result.instance_group) == 1:
        result.instance_group[0].count = candidate.instances
    else:
        kind = config.instance_group[0].kind if config.instance_group else None
        del result.instance_group[:]
        result.instance_group.add(
            kind=ModelInstanceGroup.KIND_CPU if kind is None else kind, count=candidate.instances
        )
    params = ModelParameters.from_config(config_view(config))
    min_device_us: int | None = candidate.pipeline_min_device_us
    if params.pipeline_min_device_us is None and min_device_us == DEFAULT_PIPELINE_MIN_DEVICE_US:
        min_device_us = None  # the default stays implicit
    dataclasses.replace(
        params,
        pipeline_depth=candidate.pipeline_depth,
        pipeline_min_device_us=min_device_us,
        device_ids=candidate.device_ids,
    ).to_config(result)
    if config.HasField("dynamic_batching"):
        batching = result.dynamic_batching
        batching.max_queue_delay_microseconds = candidate.max_queue_delay_us
        del batching.preferred_batch_size[:]
        batching.preferred_batch_size.extend(candidate.preferred_batch_sizes)
    return result


def config_json(config: ModelConfig) -> str:
    """The config as the JSON Triton's load API takes as its `config` parameter."""
    return str(json_format.MessageToJson(config, preserving_proto_field_name=True))


# -- the search space --------------------------------------------------------------------------


def _ladder(rungs: Sequence[int], value: int) -> tuple[int, ...]:
    return tuple(sorted({*rungs, value}))


def _step(ladder: Sequence[Rung], value: Rung, offset: int) -> Rung | None:
    index = ladder.index(value) + offset
    return ladder[index] if 0 <= index < len(ladder) else None


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The values each knob may take around the original config (`around`)."""

    default: Candidate
    gears: tuple[int, ...]  # the .om's batch gears: preferred batch sizes are subsets of them
    max_instances: int
    placements: tuple[tuple[int, ...], ...]
    queue_delays_us: tuple[int, ...]
    min_device_us: tuple[int, ...]

    @classmethod
    def around(
        cls,
        default: Candidate,
        gears: Sequence[int],
        *,
        batched: bool = True,
        max_instances: int = DEFAULT_MAX_INSTANCES,
        device_ids: Sequence[int] = (),
    ) -> SearchSpace:
        """The space of a model whose config is `default`: placements are the prefixes of
        `device_ids` (the NPUs it may use; default: the config's) besides the config's own;
        without dynamic batching (`batched=False`) its batching is not varied."""
        if max_instances < 1:
            raise UserError(f"the most instances to try must be >= 1, got {max_instances}")
        pool = tuple(device_ids) or default.device_ids
        prefixes = [pool[: n + 1] for n in range(len(pool))]
        placements = tuple(dict.fromkeys([default.device_ids, *prefixes]))
        delays = _ladder(QUEUE_DELAYS_US, default.max_queue_delay_us) if batched else ()
        return cls(
            default=default,
            gears=tuple(sorted(set(gears))) if batched else (),
            max_instances=max(max_instances, default.instances),
            placements=placements,
            queue_delays_us=delays or (default.max_queue_delay_us,),
            min_device_us=_ladder(PIPELINE_MIN_DEVICE_US, default.pipeline_min_device_us),
        )

    def canonical(self, candidate: Candidate) -> Candidate:
        """At depth 1 `pipeline_min_device_us` does nothing: the original's value stands."""
        if candidate.pipeline_depth == 1:
            return dataclasses.replace(
                candidate, pipeline_min_device_us=self.default.pipeline_min_device_us
            )
        return candidate

    def grid(self) -> list[Candidate]:
        """Instances 1 and 2 x depth 1 and 2 x (the original batching, one that waits longer
        for batches without the smallest gear); the original itself left out."""
        batching = [(self.default.max_queue_delay_us, self.default.preferred_batch_sizes)]
        if len(self.queue_delays_us) > 1:
            waiting = self.queue_delays_us.index(self.default.max_queue_delay_us)
            delay = self.queue_delays_us[
                min(waiting + WAITING_DELAY_STEPS, len(self.queue_delays_us) - 1)
            ]
            larger = self.gears[1:] if len(self.gears) > 1 else self.gears
            batching.append((delay, larger))
        grid = []
        for instances in sorted({1, min(2, self.max_instances)}):
            for depth in PIPELINE_DEPTHS:
                for delay, preferred in batching:
                    candidate = self.canonical(
                        dataclasses.replace(
                            self.default,
                            instances=instances,
                            pipeline_depth=depth,
                            max_queue_delay_us=delay,
                            preferred_batch_sizes=preferred,
                        )
                    )
                    if candidate != self.default and candidate not in grid:
                        grid.append(candidate)
        return grid

    def neighbors(self, candidate: Candidate) -> list[Candidate]:
        """Every candidate one knob one step away: instances +-1, the other depth, the next
        rung of the minimum device time (depth 2) and queue delay, one gear added to or taken
        from the preferred sizes, the next placement."""
        changes: list[dict[str, Any]] = []
        for offset in (1, -1):
            if 1 <= candidate.instances + offset <= self.max_instances:
                changes.append({"instances": candidate.instances + offset})
        for depth in PIPELINE_DEPTHS:
            if depth != candidate.pipeline_depth:
                changes.append({"pipeline_depth": depth})
        for offset in (1, -1):
            delay = _step(self.queue_delays_us, candidate.max_queue_delay_us, offset)
            if delay is not None:
                changes.append({"max_queue_delay_us": delay})
            if candidate.pipeline_depth > 1:
                floor = _step(self.min_device_us, candidate.pipeline_min_device_us, offset)
                if floor is not None:
                    changes.append({"pipeline_min_device_us": floor})
        for gear in self.gears:
            chosen = set(candidate.preferred_batch_sizes) ^ {gear}
            changes.append({"preferred_batch_sizes": tuple(sorted(chosen))})
        for offset in (1, -1):
            if candidate.device_ids in self.placements:
                placement = _step(self.placements, candidate.device_ids, offset)
                if placement is not None:
                    changes.append({"device_ids": placement})
        found: list[Candidate] = []
        for change in changes:
            neighbor = self.canonical(dataclasses.replace(candidate, **change))
            if neighbor != candidate and neighbor not in found:
                found.append(neighbor)
        return found


# -- measurements ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The metrics text and Triton's statistics of the model at one moment."""

    metrics: str
    statistics: Mapping[str, Any]


class TrialProbe(MetricsProbe):
    """bench's `MetricsProbe` that keeps a `Snapshot` with each read (the load function reads
    it right before and after the measured window)."""

    def __init__(self, url: str, model: str, statistics: Callable[[], Mapping[str, Any]]):
        super().__init__(url, model)
        self._statistics = statistics
        self.snapshots: list[Snapshot] = []

    def read(self) -> DeviceCounters:
        text = self.fetch()
        self.snapshots.append(Snapshot(text, self._statistics()))
        return self.counters(text)


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one trial measured over its window."""

    rows_per_s: float
    requests_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    requests: int
    errors: int
    error_messages: tuple[str, ...] = ()
    device_utilization: float | None = None  # mean over the devices used
    padding_ratio: float | None = None  # padded rows / real rows
    rows_per_execution: float | None = None
    queue_ms: float | None = None  # mean time a request waited in Triton's queue
    device_memory_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    device_memory_free_bytes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    batch_sizes: Mapping[int, int] = dataclasses.field(default_factory=dict)  # size -> count


def _model_stats(statistics: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(statistics.get("model_stats", []))


def _count(value: Any) -> int:
    return int(value or 0)  # gRPC's JSON gives 64-bit counts as strings


def queue_ms(before: Mapping[str, Any], after: Mapping[str, Any]) -> float | None:
    """Mean queue time (ms) of the requests between two statistics (None: no request)."""

    def totals(statistics: Mapping[str, Any]) -> tuple[int, int]:
        queues = [s.get("inference_stats", {}).get("queue", {}) for s in _model_stats(statistics)]
        return sum(_count(q.get("count")) for q in queues), sum(_count(q.get("ns")) for q in queues)

    (count0, ns0), (count1, ns1) = totals(before), totals(after)
    return (ns1 - ns0) / (count1 - count0) / 1e6 if count1 > count0 else None


def batch_histogram(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[int, int]:
    """Batch size -> executions Triton formed between two statistics (`batch_stats`)."""

    def counts(statistics: Mapping[str, Any]) -> Counter[int]:
        found: Counter[int] = Counter()
        for stats in _model_stats(statistics):
            for entry in stats.get("batch_stats", []):
                infer = entry.get("compute_infer", {})
                found[_count(entry.get("batch_size"))] += _count(infer.get("count"))
        return found

    gained = counts(after)
    gained.subtract(counts(before))
    return {size: count for size, count in sorted(gained.items()) if count > 0}


def device_gauge(text: str, name: str, model: str) -> dict[str, int]:
    """Device label -> the model's gauge `name` (the largest of its versions)."""
    found: dict[str, int] = {}
    for labels, value in metric_samples(text, name):
        if labels.get("model") == model:
            device = labels.get("device", "")
            found[device] = max(found.get(device, 0), int(value))
    return found


def measurement_of(
    result: LevelResult, before: Snapshot, after: Snapshot, model: str
) -> Measurement:
    """A trial's measurement from the load function's result and the snapshots around it."""
    gained = result.device or {}
    total = {key: sum(values[key] for values in gained.values()) for key in DEVICE_METRICS}
    utilization = result.device_utilization
    rows, executions = total["rows"], total["executions"]
    return Measurement(
        rows_per_s=result.rows_per_s,
        requests_per_s=result.throughput_rps,
        p50_ms=result.p50_ms,
        p99_ms=result.p99_ms,
        requests=result.requests,
        errors=result.errors,
        error_messages=tuple(result.error_messages),
        device_utilization=sum(utilization.values()) / len(utilization) if utilization else None,
        padding_ratio=total["padded_rows"] / rows if rows else None,
        rows_per_execution=rows / executions if executions else None,
        queue_ms=queue_ms(before.statistics, after.statistics),
        device_memory_bytes=device_gauge(after.metrics, MEMORY_METRIC, model),
        device_memory_free_bytes=device_gauge(after.metrics, FREE_MEMORY_METRIC, model),
        batch_sizes=batch_histogram(before.statistics, after.statistics),
    )


# -- trials and constraints --------------------------------------------------------------------


@dataclasses.dataclass
class Trial:
    """One config tried: its measurement, or why it was not measured (`error`)."""

    candidate: Candidate
    default: bool
    measurement: Measurement | None = None
    error: str | None = None  # Triton's reason a load failed, or the requests' first failure
    load_s: float = 0.0
    measure_s: float = 0.0

    @property
    def loaded(self) -> bool:
        return self.measurement is not None

    def meets(self, p99_ms: float) -> bool:
        """Loaded, every request answered, p99 within the constraint."""
        m = self.measurement
        return m is not None and not m.errors and m.p99_ms is not None and m.p99_ms <= p99_ms

    def score(self, p99_ms: float) -> tuple[int, float]:
        """Higher is better: meeting the constraint with more rows/s, else a lower p99."""
        m = self.measurement
        if self.meets(p99_ms) and m is not None:
            return (2, m.rows_per_s)
        if m is not None and not m.errors and m.p99_ms is not None:
            return (1, -m.p99_ms)
        return (0, 0.0)

    def as_dict(self) -> dict[str, Any]:
        """The trial's entry in tune.json."""
        m = self.measurement
        entry: dict[str, Any] = {
            "config": self.candidate.as_dict(),
            "default": self.default,
            "loaded": self.loaded,
            "error": self.error,
        }
        for key in MEASURED_FIELDS:
            entry[key] = _rounded(getattr(m, key) if m else None)
        entry["requests"] = m.requests if m else 0
        entry["errors"] = m.errors if m else 0
        entry["device_memory_bytes"] = dict(m.device_memory_bytes) if m else {}
        entry["device_memory_free_bytes"] = dict(m.device_memory_free_bytes) if m else {}
        entry["batch_sizes"] = {str(k): v for k, v in m.batch_sizes.items()} if m else {}
        entry["load_s"] = round(self.load_s, 3)
        entry["measure_s"] = round(self.measure_s, 3)
        return entry


MEASURED_FIELDS = (
    "rows_per_s",
    "requests_per_s",
    "p50_ms",
    "p99_ms",
    "device_utilization",
    "padding_ratio",
    "rows_per_execution",
    "queue_ms",
)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def winner_of(trials: Sequence[Trial], p99_ms: float) -> int | None:
    """Index of the trial with the most rows/s meeting the constraint (None: none does)."""
    meeting = [i for i, trial in enumerate(trials) if trial.meets(p99_ms)]
    return max(meeting, key=lambda i: trials[i].score(p99_ms), default=None)


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


@dataclasses.dataclass(frozen=True)
class Limits:
    """What a device can hold: pyACL's processes per device, and device memory when known."""

    processes_per_device: int = PROCESSES_PER_DEVICE
    lane_bytes: int = 0  # device memory one pipeline lane of one instance pools (0: unknown)
    device_bytes: Mapping[int, int] = dataclasses.field(default_factory=dict)  # for the model

    @classmethod
    def measured(
        cls, default: Candidate, measurement: Measurement, processes_per_device: int
    ) -> Limits:
        """From the original config's trial: its instances' pooled bytes and the device's free
        memory give the bytes of a lane and what the model may hold on each device."""
        per_device = default.instances_per_device()
        held = {int(d): b for d, b in measurement.device_memory_bytes.items() if d.isdigit()}
        free = {int(d): b for d, b in measurement.device_memory_free_bytes.items() if d.isdigit()}
        lanes = max(held.values(), default=0) // default.pipeline_depth
        available = {d: free[d] + held.get(d, 0) * per_device.get(d, 0) for d in free}
        return cls(processes_per_device, lanes, available)

    def refusal(self, candidate: Candidate) -> str | None:
        """Why the devices cannot hold the candidate (None: they can, as far as known)."""
        for device, count in sorted(candidate.instances_per_device().items()):
            if count > self.processes_per_device:
                return (
                    f"{count} instances on device {device}: pyACL serves at most "
                    f"{self.processes_per_device} processes per device"
                )
            available = self.device_bytes.get(device)
            need = count * candidate.pipeline_depth * self.lane_bytes
            if available is not None and self.lane_bytes and need > available:
                return (
                    f"needs {need} bytes of device {device}'s memory for its buffers, "
                    f"{available} are free for this model"
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
        processes_per_device: int = PROCESSES_PER_DEVICE,
        confirm_rounds: int = CONFIRM_ROUNDS,
        clock: Callable[[], float] = time.monotonic,
        progress: TextIO | None = None,
    ) -> None:
        if p99_ms <= 0:
            raise UserError(f"the p99 constraint must be > 0 ms, got {p99_ms:g}")
        if confirm_rounds < 0:
            raise UserError(f"the confirmation rounds must be >= 0, got {confirm_rounds}")
        self.confirm_rounds = confirm_rounds
        self.evaluator = evaluator
        self.space = space
        self.p99_ms = p99_ms
        if processes_per_device < 1:
            raise UserError(f"processes per device must be >= 1, got {processes_per_device}")
        self.budget = Budget(budget_s, clock, space.default.instances)
        self.processes_per_device = processes_per_device
        self.limits = Limits(processes_per_device)
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
            self.limits = Limits.measured(default, first.measurement, self.processes_per_device)
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
                self._say(
                    f"confirmation round {number} of {rounds} ({self.budget.elapsed():.1f} s of "
                    f"{self.budget.seconds:g} s): trial {finalist.trial + 1}, "
                    f"{finalist.candidate.describe()}"
                )
                measured = self._measured(finalist.candidate, load=True)
                finalist.rounds.append(measured)
                self._say("  " + self._measured_words(measured))
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
        self._say(
            f"trial {number} of {'at most ' * (planned is None)}{total} ({phase}, "
            f"{self.budget.elapsed():.1f} s of {self.budget.seconds:g} s): {candidate.describe()}"
        )
        trial = self._measured(candidate, load=not default)
        self.trials.append(trial)
        self._say("  " + self._outcome(trial))
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
            self.progress.write(text + "\n")
            self.progress.flush()


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


# -- the served model --------------------------------------------------------------------------


def load_reason(exc: BaseException) -> str:
    """Triton's reason a load failed, without the Python traceback its stub appends."""
    return error_text(exc).split("\n\nAt:")[0].strip()


class ServedModel:
    """The `Evaluator` of a model served by a Triton in explicit model-control mode."""

    def __init__(
        self,
        client: TritonClient,
        target: Target,
        metrics_url: str,
        load: LoadFunction,
    ) -> None:
        self.client = client
        self.target = target
        self.model = target.model
        self.original = client.model_config(self.model)
        self.probe = TrialProbe(
            metrics_url, self.model, lambda: client.inference_statistics(self.model)
        )
        self._load_function = load

    def load(self, candidate: Candidate) -> None:
        self._load(config_json(with_candidate(self.original, candidate)))

    def _load(self, config: str | None) -> None:
        """Unload the model, wait until it is, load it with `config` (None: config.pbtxt)."""
        from tritonclient.utils import InferenceServerException

        self.client.unload_model(self.model)
        deadline = time.monotonic() + UNLOAD_TIMEOUT_S
        while self._state() in ("READY", "UNLOADING"):
            if time.monotonic() > deadline:
                raise UserError(f"model {self.model!r} did not unload in {UNLOAD_TIMEOUT_S:g} s")
            time.sleep(UNLOAD_POLL_S)
        try:
            self.client.load_model(self.model, config=config)
        except InferenceServerException as exc:
            raise LoadFailed(load_reason(exc)) from None

    def _state(self) -> str:
        entries = [e for e in self.client.repository_index() if e.get("name") == self.model]
        return str(entries[0].get("state", "")) if entries else ""

    def measure(self) -> Measurement:
        self.probe.snapshots.clear()
        result = self._load_function(self.target, self.probe)
        before, after = self.probe.snapshots[0], self.probe.snapshots[-1]
        return measurement_of(result, before, after, self.model)

    def restore(self) -> None:
        """Load the original config again (a load without override would not: Triton sees no
        change in the repository) and check that it serves."""
        try:
            self._load(config_json(self.original))
        except LoadFailed as exc:
            raise UserError(
                f"could not load model {self.model!r}'s original config: {exc}"
            ) from None
        self.expect(candidate_of(self.original), "the original config")

    def load_repository_config(self, expected: Candidate) -> None:
        """Load the model from its config.pbtxt (e.g. just applied) and check it serves it."""
        try:
            self._load(None)
        except LoadFailed as exc:
            raise UserError(f"the applied config of {self.model!r} did not load: {exc}") from None
        self.expect(expected, "the applied config")

    def expect(self, expected: Candidate, what: str) -> None:
        served = candidate_of(self.client.model_config(self.model))
        if served != expected:
            raise UserError(
                f"model {self.model!r} serves {served.describe()}, not {what} "
                f"({expected.describe()})"
            )


# -- gear advice -------------------------------------------------------------------------------


def padding_of(histogram: Mapping[int, int], gears: Sequence[int]) -> tuple[int, int]:
    """(padded rows, real rows) the gears would have run on the observed batch sizes, each
    batch planned as the runtime plans it (`plan_chunks`)."""
    padded = rows = 0
    for size, count in histogram.items():
        padded += count * sum(chunk.padded for chunk in plan_chunks(size, gears))
        rows += count * size
    return padded, rows


def advise_gears(histogram: Mapping[int, int], largest: int, count: int) -> tuple[int, ...]:
    """The `count` gears (or fewer) up to and including `largest` that pad the observed batches
    least: each batch runs on the smallest gear that holds it (an exact dynamic program over the
    observed sizes; batches above `largest` are split as always and do not change the choice)."""
    if count < 1 or largest < 1:
        raise ValueError(f"need at least one gear up to a largest >= 1, got {count}, {largest}")
    sizes = sorted({s for s in histogram if 0 < s < largest} | {largest})
    weight = [histogram.get(s, 0) for s in sizes]

    def cost(low: int, high: int) -> int:  # sizes[low + 1 .. high] run on gear sizes[high]
        return sum(weight[k] * (sizes[high] - sizes[k]) for k in range(low + 1, high + 1))

    # best[m][j]: least padding of sizes[0..j] with m gears, the largest being sizes[j]
    last = len(sizes) - 1
    best = [[cost(-1, j) for j in range(len(sizes))]]
    choice: list[list[int]] = [[-1] * len(sizes)]
    for _ in range(1, min(count, len(sizes))):
        row, picks = [], []
        for j in range(len(sizes)):
            options = [(best[-1][i] + cost(i, j), i) for i in range(j)] or [(best[-1][j], -1)]
            value, pick = min(options)
            row.append(value)
            picks.append(pick)
        best.append(row)
        choice.append(picks)
    level = min(range(len(best)), key=lambda m: (best[m][last], m))
    gears, j = [], last
    while j >= 0 and level >= 0:
        gears.append(sizes[j])
        j = choice[level][j]
        level -= 1
    return tuple(sorted(gears))


@dataclasses.dataclass(frozen=True)
class GearOption:
    """A gear set and the padding it would have cost on the observed traffic."""

    label: str
    gears: tuple[int, ...]
    padded_rows: int
    rows: int

    @property
    def padding_ratio(self) -> float:
        return self.padded_rows / self.rows if self.rows else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "gears": list(self.gears),
            "padded_rows": self.padded_rows,
            "rows": self.rows,
            "padding_ratio": round(self.padding_ratio, 4),
        }


@dataclasses.dataclass(frozen=True)
class GearAdvice:
    """Gear sets compared on the batch sizes of one trial; `recommended` (the best set of as
    many gears as compiled or one more) is None when the compiled gears already pad least."""

    trial: int  # index of the trial whose traffic was observed
    histogram: Mapping[int, int]
    options: tuple[GearOption, ...]
    recommended: GearOption | None
    atc_command: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "batch_sizes": {str(k): v for k, v in self.histogram.items()},
            "options": [option.as_dict() for option in self.options],
            "recommended": None if self.recommended is None else list(self.recommended.gears),
            "atc_command": self.atc_command,
        }


def atc_command(model: str, inputs: Sequence[Mapping[str, Any]], gears: Sequence[int]) -> str:
    """The `atc` command compiling the model with these batch gears (ONNX file and SoC left to
    fill in); `inputs` are the model metadata's (shapes with the batch axis first)."""
    shapes = ";".join(
        f"{item['name']}:" + ",".join(["-1", *(str(d) for d in list(item["shape"])[1:])])
        for item in inputs
    )
    return (
        f"atc --model=MODEL.onnx --framework=5 --output={model} --soc_version=SOC "
        f'--input_shape="{shapes}" --dynamic_batch_size="{",".join(map(str, gears))}"'
    )


def gear_advice(
    trials: Sequence[Trial],
    observed: int,
    gears: Sequence[int],
    model: str,
    inputs: Sequence[Mapping[str, Any]],
) -> GearAdvice | None:
    """Compare gear sets on the batch sizes trial `observed` formed: the compiled `gears`, the
    best set of as many gears, of one more, and every observed size (None: no batches seen)."""
    measurement = trials[observed].measurement
    histogram = dict(measurement.batch_sizes) if measurement else {}
    if not histogram or not gears:
        return None
    compiled = tuple(sorted(set(gears)))
    largest = compiled[-1]
    sets = {
        "compiled gears": compiled,
        f"best {len(compiled)} gears": advise_gears(histogram, largest, len(compiled)),
        f"best {len(compiled) + 1} gears": advise_gears(histogram, largest, len(compiled) + 1),
        "every observed size": tuple(sorted({s for s in histogram if s < largest} | {largest})),
    }
    options: list[GearOption] = []
    for label, chosen in sets.items():
        if all(option.gears != chosen for option in options):
            options.append(GearOption(label, chosen, *padding_of(histogram, chosen)))
    current = options[0]
    fewest = [o for o in options if o.label.startswith("best ")]
    best = min(fewest, key=lambda o: (o.padded_rows, len(o.gears)), default=current)
    recommended = best if best.padded_rows < current.padded_rows else None
    command = atc_command(model, inputs, recommended.gears) if recommended else None
    return GearAdvice(observed, histogram, tuple(options), recommended, command)


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
