"""Figures derived from one run's data (what `scenarios.measure` returns): medians, ratios, the
targets and whether they were met, and every fact the report's sentences state. Numbers only;
`report` turns them into text.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterator
from typing import Any

from scenarios import (
    CLASSIFIER_BATCH,
    COUNTER_REQUESTS,
    CPU_CONCURRENCY,
    DEVICE_HOST_LEVELS,
    EXPERT_MODELS,
    JPEG_LEVELS,
    PIPELINE_LEVELS,
    PIPELINE_TIMING,
    SATURATION_LEVELS,
    SATURATION_TIMING,
    SMALL_GEARS,
    WIDTH,
)

from ge_python_backend.emulator.timing import parse as parse_timing
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_MIN_DEVICE_US

Entry = dict[str, Any]  # one concurrency level of `ge-python-model bench --json`
Rounds = list[list[Entry]]  # per round, the entries of every level

# Targets of the summary table.
OVERHEAD_TARGETS = {1: 0.75, CPU_CONCURRENCY: 0.90}  # ours / floor throughput, by concurrency
NAIVE_LEVEL, NAIVE_TARGET = 16, 3.0  # ours / naive throughput
EFFICIENCY_TARGET = 0.95  # served / in-process
BUSY_TARGET, BUSY_FLOOR = 0.95, 0.90  # device busy with scaffold's defaults
DEFAULTS_LATENCY_TARGET = 1.05  # p50 at concurrency 1, depth 2 / depth 1, at most
PIPELINE_LEVEL, PIPELINE_TARGET = 16, 1.4  # depth 2 / depth 1 throughput
PIPELINE_LATENCY_TARGET = 1.10  # p50 at concurrency 1, depth 2 / depth 1, at most
# Ours / the hand-written pyACL model.py (section 7): (setting, concurrency) -> (figure, target).
# Section 10: device host / in-stub throughput at this many clients, at least; p50 at one client,
# device host - in-stub, at most (microseconds).
DEVICE_HOST_THROUGHPUT_LEVEL, DEVICE_HOST_THROUGHPUT_TARGET = DEVICE_HOST_LEVELS[-1], 0.95
DEVICE_HOST_P50_TARGET_US = 60.0
EXPERT_TARGETS = {
    ("plain", 1): ("throughput_rps", 0.95),
    ("plain", CPU_CONCURRENCY): ("throughput_rps", 0.95),
    ("copy_bound", PIPELINE_LEVELS[-1]): ("rows_per_s", 1.3),
    ("resnet50", SATURATION_LEVELS[-1]): ("rows_per_s", 1.05),
}
# Below these the report says two figures agree: ...
AGREE = 0.10  # ... two ratios within 10% of each other
SAME_BUSY = 0.05  # ... device-busy figures within 0.05 of each other
TUNE_SAME = 0.05  # ... a tuned winner's rows/s within 5% of the defaults' (alternating rounds)
SATURATED = 0.90  # a run used at least this share of the machine's cores
STEADIER = 0.5  # a figure whose rounds spread less than this share of another's is steadier


def at_level(entries: list[Entry], level: int) -> Entry:
    """The entry of concurrency `level`."""
    return next(e for e in entries if e["concurrency"] == level)


def medians(rounds: Rounds) -> list[Entry]:
    """Per level, the entry of the round with the median throughput."""
    result = []
    for entries in zip(*rounds):
        ordered = sorted(entries, key=lambda e: e["throughput_rps"])
        result.append(ordered[(len(ordered) - 1) // 2])
    return result


def paired(ours: Rounds, other: Rounds, level: int, key: str = "throughput_rps") -> list[float]:
    """`key` of ours / of other at `level`, round by round."""
    return [at_level(a, level)[key] / at_level(b, level)[key] for a, b in zip(ours, other)]


def median_at(rounds: Rounds, level: int, key: str) -> float:
    """The median over the rounds of `key` at `level`."""
    return float(statistics.median(at_level(r, level)[key] for r in rounds))


def spread(values: list[float]) -> float:
    """(max - min) / median: how far apart repeated measurements of one figure are."""
    return (max(values) - min(values)) / statistics.median(values)


@dataclasses.dataclass(frozen=True)
class Target:
    """A figure measured once per round, its median checked against a target: at least
    `target` (or at most, `at_most`); `floor`, a lower figure still accepted."""

    rounds: list[float]
    target: float
    at_most: bool = False
    floor: float | None = None

    @property
    def value(self) -> float:
        return float(statistics.median(self.rounds))

    @property
    def met(self) -> bool:
        return self.value <= self.target if self.at_most else self.value >= self.target

    @property
    def verdict(self) -> str:
        """`met`, `floor met` or `not met`."""
        if self.met:
            return "met"
        if self.floor is not None and self.value >= self.floor:
            return "floor met"
        return "not met"


@dataclasses.dataclass(frozen=True)
class Variability:
    """How much the rounds of this run moved: each model's throughput at each level, and each
    ratio of the summary table, as `spread` over the rounds."""

    throughput: float  # median spread of the throughputs
    largest: float
    largest_at: tuple[str, int]  # model and concurrency of the largest spread
    ratios: float  # median spread of the summary table's per-round ratios


def measured_runs(data: dict[str, Any]) -> Iterator[tuple[str, Rounds]]:
    """Each model measured in alternating rounds and its rounds (section 7's models named with
    their setting)."""
    for section in ("overhead", "naive", "pipeline", "saturation"):
        if section in data:
            yield from data[section]["runs"].items()
    for setting, values in data.get("expert", {}).get("settings", {}).items():
        for model, rounds in values["runs"].items():
            yield f"{model} ({setting})", rounds


def variability(data: dict[str, Any], targets: list[Target]) -> Variability | None:
    """None when the run had one round."""
    spreads = {
        (model, entries[0]["concurrency"]): spread([e["throughput_rps"] for e in entries])
        for model, rounds in measured_runs(data)
        for entries in zip(*rounds)
        if len(entries) > 1
    }
    ratios = [spread(t.rounds) for t in targets if len(t.rounds) > 1]
    if not spreads or not ratios:
        return None
    largest_at = max(spreads, key=lambda k: spreads[k])
    return Variability(
        throughput=statistics.median(spreads.values()),
        largest=spreads[largest_at],
        largest_at=largest_at,
        ratios=statistics.median(ratios),
    )


@dataclasses.dataclass(frozen=True)
class CpuUse:
    """CPU per request of one model at `CPU_CONCURRENCY` (microseconds), from the extra run."""

    throughput_rps: float
    client: float
    tritonserver: float
    stub: float
    per_execution: float  # requests per execution

    @property
    def total(self) -> float:
        return self.client + self.tritonserver + self.stub

    @property
    def cores(self) -> float:
        """CPU-seconds per second the three processes used."""
        return self.total * self.throughput_rps / 1e6


@dataclasses.dataclass(frozen=True)
class Overhead:
    """Section 1: ours against the numpy floor."""

    ratios: dict[int, Target]  # ours / floor throughput by concurrency
    senders: dict[int, float]  # floor_sender / floor throughput by concurrency
    cpu: dict[str, CpuUse]
    cpu_count: int | None  # the machine's logical cores (runs saved before it was recorded: None)
    p50_ms: dict[str, float]  # median p50 at concurrency 1
    compute_infer_1: dict[str, float]  # us per request at concurrency 1 (extra run)
    us_per_batch: float  # in-process `execute` of COUNTER_REQUESTS requests (section 2's run)
    acl_share: float  # share of it inside the emulated pyACL calls

    @property
    def acl_us_per_batch(self) -> float:
        return self.us_per_batch * self.acl_share

    @property
    def host_us_per_request(self) -> float:
        """Our Python outside pyACL, per request."""
        return self.us_per_batch * (1 - self.acl_share) / COUNTER_REQUESTS

    @property
    def inline(self) -> bool:
        """Whether the pyACL calls of an execution (the emulated device's work included: with no
        timing model it runs in the calls that synchronize) stayed below
        `pipeline_min_device_us`, so that depth 2 answers these executions inline."""
        return self.acl_us_per_batch < DEFAULT_PIPELINE_MIN_DEVICE_US

    @property
    def senders_slower(self) -> bool:
        return all(value < 1 for value in self.senders.values())

    @property
    def cpu_ratio(self) -> float:
        """The floor's CPU per request over ours."""
        return self.cpu["floor"].total / self.cpu["ours"].total

    @property
    def throughput_ratio(self) -> float:
        """Ours / the floor in the CPU runs."""
        return self.cpu["ours"].throughput_rps / self.cpu["floor"].throughput_rps

    @property
    def follows_cpu(self) -> bool:
        """Whether throughput went with the inverse of the CPU per request."""
        return abs(self.throughput_ratio / self.cpu_ratio - 1) <= AGREE

    @property
    def stub_share(self) -> float | None:
        """Share of the difference in CPU per request that is in the model's stub process (None:
        no difference)."""
        ours, floor = self.cpu["ours"], self.cpu["floor"]
        gap = ours.total - floor.total
        return (ours.stub - floor.stub) / gap if gap else None

    @property
    def saturated(self) -> bool | None:
        """Whether both CPU runs kept the machine's cores busy (None: core count unknown)."""
        if self.cpu_count is None:
            return None
        return all(c.cores >= SATURATED * self.cpu_count for c in self.cpu.values())


def overhead(data: dict[str, Any]) -> Overhead:
    runs, counters = data["overhead"]["runs"], data["naive"]["counters"]["ours"]
    return Overhead(
        ratios={
            level: Target(paired(runs["ours"], runs["floor"], level), target)
            for level, target in OVERHEAD_TARGETS.items()
        },
        senders={
            level: statistics.median(paired(runs["floor_sender"], runs["floor"], level))
            for level in OVERHEAD_TARGETS
        },
        cpu={
            model: CpuUse(**{f.name: c[f.name] for f in dataclasses.fields(CpuUse)})
            for model, c in data["overhead"]["cpu"].items()
        },
        cpu_count=data.get("cpu_count"),
        p50_ms={model: median_at(runs[model], 1, "p50_ms") for model in ("ours", "floor")},
        compute_infer_1={m: a["compute_infer"] for m, a in data["overhead"]["alone"].items()},
        us_per_batch=counters["us_per_batch"],
        acl_share=counters["acl_share"],
    )


def naive(data: dict[str, Any]) -> Target:
    """Section 2: ours / naive throughput."""
    runs = data["naive"]["runs"]
    return Target(paired(runs["ours"], runs["naive"], NAIVE_LEVEL), NAIVE_TARGET)


@dataclasses.dataclass(frozen=True)
class Efficiency:
    """Section 3: the classifier through Triton against in-process `Session.infer`."""

    ratio: Target
    served: float  # median images/s
    local: float
    execute_ms: float  # Triton's compute_infer per execution of a full batch
    input_ms: float  # Triton's compute_input per request
    megabytes: float  # input per request

    @property
    def local_ms(self) -> float:
        """One `Session.infer` of a batch in-process."""
        return CLASSIFIER_BATCH / self.local * 1e3


def efficiency(data: dict[str, Any]) -> Efficiency:
    eff = data["efficiency"]
    stats = eff["stats"]
    full = next(b for b in stats["batch_stats"] if int(b["batch_size"]) == CLASSIFIER_BATCH)
    inputs = stats["inference_stats"]["compute_input"]
    return Efficiency(
        ratio=Target(
            [se["rows_per_s"] / lo["rows_per_s"] for se, lo in zip(eff["served"], eff["local"])],
            EFFICIENCY_TARGET,
        ),
        served=statistics.median(e["rows_per_s"] for e in eff["served"]),
        local=statistics.median(e["rows_per_s"] for e in eff["local"]),
        execute_ms=int(full["compute_infer"]["ns"]) / int(full["compute_infer"]["count"]) / 1e6,
        input_ms=int(inputs["ns"]) / max(int(inputs["count"]), 1) / 1e6,
        megabytes=CLASSIFIER_BATCH * 3 * 224 * 224 * 4 / 1e6,
    )


@dataclasses.dataclass(frozen=True)
class Timeline:
    """One stream timeline (section 5): when it ended and which engines overlapped."""

    end_ms: float
    batches: int
    copy_in_during_execute: int  # batches k+1 copied in while batch k executed
    copy_out_during_execute: int  # batches k-1 copied out while batch k executed
    waited_for_lane: int  # batches k+2 copied in only after batch k was copied out


def overlaps(a: Entry, b: Entry) -> bool:
    return bool(a["start_ms"] < b["end_ms"] and b["start_ms"] < a["end_ms"])


def timeline(spans: list[Entry]) -> Timeline:
    by_engine: dict[str, dict[int, Entry]] = {}
    for s in spans:
        by_engine.setdefault(s["engine"], {})[s["batch"]] = s
    h2d, execute, d2h = by_engine["h2d"], by_engine["execute"], by_engine["d2h"]
    batches = len(execute)
    return Timeline(
        end_ms=max(s["end_ms"] for s in spans),
        batches=batches,
        copy_in_during_execute=sum(overlaps(h2d[k + 1], execute[k]) for k in range(batches - 1)),
        copy_out_during_execute=sum(overlaps(d2h[k - 1], execute[k]) for k in range(1, batches)),
        waited_for_lane=sum(h2d[k + 2]["start_ms"] >= d2h[k]["end_ms"] for k in range(batches - 2)),
    )


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """Section 5: depth 2 against depth 1."""

    throughput: Target  # depth 2 / depth 1 at PIPELINE_LEVEL
    latency: Target  # p50 depth 2 / depth 1 at concurrency 1
    p50_ms: dict[int, float]  # median p50 at concurrency 1, by depth
    copy_ms: float  # one copy of a PIPELINE_LEVEL-row batch, each way
    execute_ms: float  # its execution
    timelines: dict[str, Timeline]


def pipeline(data: dict[str, Any]) -> Pipeline:
    pipe = data["pipeline"]
    runs, timing = pipe["runs"], parse_timing(pipe["timing"])
    rows = PIPELINE_LEVEL
    return Pipeline(
        throughput=Target(paired(runs["depth2"], runs["depth1"], PIPELINE_LEVEL), PIPELINE_TARGET),
        latency=Target(
            paired(runs["depth2"], runs["depth1"], 1, "p50_ms"),
            PIPELINE_LATENCY_TARGET,
            at_most=True,
        ),
        p50_ms={depth: median_at(runs[f"depth{depth}"], 1, "p50_ms") for depth in (1, 2)},
        copy_ms=timing.copy_seconds(rows * WIDTH * 4) * 1e3,
        execute_ms=timing.execute_seconds(rows) * 1e3,
        timelines={name: timeline(spans) for name, spans in pipe["timeline"].items()},
    )


@dataclasses.dataclass(frozen=True)
class SystemAllocation:
    """Section 9: pooled buffers (max_output_bytes) against outputs ACL allocates."""

    levels: list[int]
    throughput: dict[int, list[float]]  # pooled / system req/s, round by round, by level
    p50_ms: dict[str, dict[int, float]]  # median p50 by variant and level


def system_allocation(data: dict[str, Any]) -> SystemAllocation:
    raw = data["sysalloc"]
    runs, levels = raw["runs"], raw["levels"]
    return SystemAllocation(
        levels=levels,
        throughput={c: paired(runs["pooled"], runs["system"], c) for c in levels},
        p50_ms={
            name: {c: median_at(rounds, c, "p50_ms") for c in levels}
            for name, rounds in runs.items()
        },
    )


def largest_gear() -> int:
    return int(SMALL_GEARS.split(",")[-1])


def device_limit() -> float:
    """Rows/s of the saturation profile's device running only its largest gear."""
    gear = largest_gear()
    return gear / parse_timing(SATURATION_TIMING).execute_seconds(gear)


def device_figures(entry: Entry) -> dict[str, float]:
    """Device utilization of one level three ways: from the events (`ge_device_busy_seconds`),
    from the timing model, and rows/s over the device limit.

    The model's figure is the modelled device time per row the counters saw (executions and
    padding included) times the rows the clients got per second: the counters reach the metrics
    endpoint every 100 ms, so their window is off by up to that at each end, the clients' is not.
    """
    timing = parse_timing(SATURATION_TIMING)
    (counters,) = entry["device_counters"].values()
    (events,) = entry["device_utilization"].values()
    modelled = (
        timing.execute_us * counters["executions"]
        + timing.execute_us_per_row * (counters["rows"] + counters["padded_rows"])
    ) / 1e6
    return {
        "events": events,
        "model": modelled / max(counters["rows"], 1) * entry["rows_per_s"],
        "limit": entry["rows_per_s"] / device_limit(),
        "rows_per_execution": counters["rows"] / max(counters["executions"], 1),
    }


@dataclasses.dataclass(frozen=True)
class Saturation:
    """Section 6: scaffold's defaults and each depth and queue delay under the profile."""

    table: dict[str, dict[int, dict[str, float]]]  # model -> level -> medians over the rounds
    levels: list[int]
    depth: int  # scaffold's defaults
    delay: int
    busy: Target  # device busy (model) with the defaults at the top level
    latency: Target | None  # p50 at 1, depth 2 / depth 1 at the defaults' delay

    @property
    def top(self) -> int:
        return self.levels[-1]

    @property
    def middle(self) -> int:
        return sorted(self.levels)[len(self.levels) // 2]

    def busy_at_depth(self, depth: int, variants: dict[str, Any]) -> list[float]:
        """Device busy (model) at the top level of every variant of `depth`."""
        return [self.table[m][self.top]["model"] for m, (d, _) in variants.items() if d == depth]

    def rows_per_execution_at_top(self) -> list[float]:
        return [levels[self.top]["rows_per_execution"] for levels in self.table.values()]


def saturation(data: dict[str, Any]) -> Saturation:
    sat = data["saturation"]
    levels = sat["levels"]
    top = levels[-1]
    table: dict[str, dict[int, dict[str, float]]] = {}
    for model, rounds in sat["runs"].items():
        table[model] = {}
        for level in levels:
            entries = [at_level(r, level) for r in rounds]
            figures = [device_figures(e) for e in entries]
            table[model][level] = {
                "rows_per_s": statistics.median(e["rows_per_s"] for e in entries),
                "p50_ms": statistics.median(e["p50_ms"] for e in entries),
                "p99_ms": statistics.median(e["p99_ms"] for e in entries),
                **{k: statistics.median(f[k] for f in figures) for k in figures[0]},
            }
    depth, delay = sat["variants"]["defaults"]
    one, two = (f"depth{d}_delay{delay}" for d in (1, 2))
    latency = None
    if one in sat["runs"] and two in sat["runs"]:
        latency = Target(
            paired(sat["runs"][two], sat["runs"][one], 1, "p50_ms"),
            DEFAULTS_LATENCY_TARGET,
            at_most=True,
        )
    return Saturation(
        table=table,
        levels=levels,
        depth=depth,
        delay=delay,
        busy=Target(
            [device_figures(at_level(r, top))["model"] for r in sat["runs"]["defaults"]],
            BUSY_TARGET,
            floor=BUSY_FLOOR,
        ),
        latency=latency,
    )


@dataclasses.dataclass(frozen=True)
class ExpertCpu:
    """Section 7's CPU witness at one concurrency without a timing model: alternating rounds of
    section 1's CPU run of both models; medians over the rounds (microseconds per request) and
    the per-round ratios."""

    stub: dict[str, float]  # model -> the model's stub process CPU per request
    compute_infer: dict[str, float]  # model -> Triton's compute_infer per request
    stub_ratio: list[float]  # expert / ours stub CPU per request, per round
    compute_ratio: list[float]  # expert / ours compute_infer per request, per round
    throughput_ratio: list[float]  # ours / expert throughput of the same runs, per round

    @property
    def by_stub(self) -> float:
        """Ours as a share of the expert by stub CPU per request (median of the rounds)."""
        return float(statistics.median(self.stub_ratio))

    @property
    def by_compute_infer(self) -> float:
        return float(statistics.median(self.compute_ratio))

    @property
    def by_throughput(self) -> float:
        return float(statistics.median(self.throughput_ratio))

    @property
    def stub_gap_us(self) -> float:
        """How much more stub CPU per request ours needed (median ours - median expert)."""
        return self.stub["ours"] - self.stub["expert"]

    @property
    def stub_steadier(self) -> bool:
        """Whether the stub-CPU ratio spread over the rounds less than `STEADIER` of what the
        throughput ratio of the same runs did."""
        return spread(self.stub_ratio) < STEADIER * spread(self.throughput_ratio)


def expert_cpu(rounds: dict[str, Rounds], level: int) -> ExpertCpu:
    """The CPU witness at `level` from `scenarios.expert_cpu`'s rounds."""
    ours, other = (rounds[model] for model in EXPERT_MODELS)
    return ExpertCpu(
        stub={m: median_at(rounds[m], level, "stub") for m in EXPERT_MODELS},
        compute_infer={m: median_at(rounds[m], level, "compute_infer") for m in EXPERT_MODELS},
        stub_ratio=paired(other, ours, level, "stub"),
        compute_ratio=paired(other, ours, level, "compute_infer"),
        throughput_ratio=paired(ours, other, level),
    )


@dataclasses.dataclass(frozen=True)
class Expert:
    """Section 7: ours against the hand-written pyACL model.py, setting by setting."""

    ratios: dict[tuple[str, int], Target]  # ours / expert, keyed as EXPERT_TARGETS
    table: dict[str, dict[str, dict[int, dict[str, float]]]]  # setting -> model -> level -> medians
    cpu: dict[int, ExpertCpu]  # by concurrency, no timing model (runs saved before it: empty)

    @property
    def slower(self) -> list[tuple[str, int]]:
        """Where ours was slower than the expert (median ratio below 1)."""
        return [key for key, target in self.ratios.items() if target.value < 1]

    @property
    def p50_gap_us(self) -> float:
        """Median p50 at one client without a timing model, ours minus the expert."""
        plain = self.table["plain"]
        return (plain["ours"][1]["p50_ms"] - plain["expert"][1]["p50_ms"]) * 1e3


def serial_limit() -> float:
    """Rows/s of a model.py that copies a full largest-gear batch in, executes it and copies it
    out one after the other (as the expert does) in the copy-bound setting."""
    gear, timing = largest_gear(), parse_timing(PIPELINE_TIMING)
    copy = timing.copy_seconds(gear * WIDTH * 4)
    return gear / (2 * copy + timing.execute_seconds(gear))


def pipelined_limit() -> float:
    """Rows/s in the copy-bound setting when the three engines overlap: its slowest engine."""
    gear, timing = largest_gear(), parse_timing(PIPELINE_TIMING)
    return gear / max(timing.copy_seconds(gear * WIDTH * 4), timing.execute_seconds(gear))


def expert(data: dict[str, Any]) -> Expert:
    settings = data["expert"]["settings"]
    ours, other = EXPERT_MODELS
    ratios = {
        (setting, level): Target(
            paired(settings[setting]["runs"][ours], settings[setting]["runs"][other], level, key),
            target,
        )
        for (setting, level), (key, target) in EXPERT_TARGETS.items()
    }
    keys = ("throughput_rps", "rows_per_s", "p50_ms", "p99_ms")
    table = {
        setting: {
            model: {
                level: {key: median_at(rounds, level, key) for key in keys}
                for level in values["levels"]
            }
            for model, rounds in values["runs"].items()
        }
        for setting, values in settings.items()
    }
    plain = settings["plain"]
    cpu = (
        {level: expert_cpu(plain["cpu"], level) for level in plain["levels"]}
        if "cpu" in plain
        else {}
    )
    return Expert(ratios=ratios, table=table, cpu=cpu)


Trial = dict[str, Any]  # one trial of `ge-python-model tune`'s tune.json


def meets(trial: Trial, p99_ms: float) -> bool:
    """As `tools.tune.Trial.meets`: loaded, every request answered, p99 within the budget."""
    p99 = trial["p99_ms"]
    return bool(trial["loaded"]) and not trial["errors"] and p99 is not None and p99 <= p99_ms


@dataclasses.dataclass(frozen=True)
class Remeasured:
    """The winner against the defaults in alternating `bench` rounds at one load."""

    ratios: list[float]  # winner / defaults rows/s, per round
    rows_per_s: tuple[float, float]  # medians: defaults, winner
    p99_ms: tuple[float, float]
    p50_ms: tuple[float, float]

    @property
    def gain(self) -> float:
        return statistics.median(self.ratios)


def remeasured(defaults: Rounds, won: Rounds, level: int) -> Remeasured:
    """The winner's rounds against the defaults' at `level` clients."""
    return Remeasured(
        ratios=paired(won, defaults, level, "rows_per_s"),
        rows_per_s=(median_at(defaults, level, "rows_per_s"), median_at(won, level, "rows_per_s")),
        p99_ms=(median_at(defaults, level, "p99_ms"), median_at(won, level, "p99_ms")),
        p50_ms=(median_at(defaults, level, "p50_ms"), median_at(won, level, "p50_ms")),
    )


@dataclasses.dataclass(frozen=True)
class Confirmed:
    """tune's own confirmation at one load (tune.json's `confirmation`): the finalists
    re-measured in alternating rounds; `compared` is the winner, or with the defaults kept the
    other finalist with the highest median ratio to them."""

    rounds: int  # 0: not confirmed (`verdict` says why)
    finalists: int
    verdict: str
    compared: int | None  # trial index
    ratios: list[float]  # compared / defaults rows/s, per round

    @property
    def gain(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None


def confirmed(document: dict[str, Any]) -> Confirmed | None:
    """The confirmation of one tune.json (None: a tune that had no confirmation phase yet)."""
    if "confirmation_rounds" not in document:
        return None
    entries = document["confirmation"]
    verdict = str(document["confirmation_verdict"])
    others = [e for e in entries[1:] if e["vs_default"]]
    won = [e for e in others if e["trial"] == document["winner"]]
    best = won or sorted(others, key=lambda e: statistics.median(e["vs_default"]))[-1:]
    return Confirmed(
        rounds=int(document["confirmation_rounds"]),
        finalists=len(entries),
        verdict=verdict,
        compared=best[0]["trial"] if best else None,
        ratios=[float(r) for r in best[0]["vs_default"]] if best else [],
    )


@dataclasses.dataclass(frozen=True)
class TuneLevel:
    """Section 8 at one load: scaffold's defaults (the first trial) against tune's winner."""

    clients: int
    default: Trial
    winner: Trial | None
    trials: int  # run, loaded or not
    skipped: int
    elapsed_s: float
    p99_ms: float
    remeasured: Remeasured | None  # None without a winner
    lone: Remeasured | None  # the winner against the defaults at one client of 1-row requests
    confirmation: Confirmed | None

    @property
    def default_meets(self) -> bool:
        return meets(self.default, self.p99_ms)

    @property
    def gain(self) -> float | None:
        """Winner / defaults, rows/s in tune's own trials (None without a winner)."""
        if self.winner is None:
            return None
        return float(self.winner["rows_per_s"]) / max(float(self.default["rows_per_s"]), 1e-9)

    @property
    def beats_defaults(self) -> bool:
        """Re-measured, the winner kept the budget and beat the defaults by more than the
        noise, or kept the budget the defaults missed."""
        again = self.remeasured
        if again is None or again.p99_ms[1] > self.p99_ms:
            return False
        return again.p99_ms[0] > self.p99_ms or again.gain > 1 + TUNE_SAME

    @property
    def costs_lone_client(self) -> bool:
        """At one client of 1-row requests the winner gave less than the defaults' rows/s, by
        more than the noise."""
        return self.lone is not None and self.lone.gain < 1 - TUNE_SAME

    @property
    def changed(self) -> dict[str, tuple[Any, Any]]:
        """The winner's config fields that differ from the defaults': field -> (default, won)."""
        if self.winner is None:
            return {}
        before, after = self.default["config"], self.winner["config"]
        return {key: (before[key], after[key]) for key in before if before[key] != after[key]}


def little_bound_ms(clients: int, rows: int) -> float:
    """The least mean latency of `clients` closed-loop clients of `rows`-row requests when the
    device runs at its limit (Little's law): the rows in flight over the device's rows/s."""
    return clients * rows / device_limit() * 1e3


def tune(data: dict[str, Any]) -> list[TuneLevel]:
    section = data["tune"]
    result = []
    for clients, document in section["levels"].items():
        trials = document["trials"]
        winner = document["winner"]
        again = section["remeasured"].get(clients)
        level = int(clients)
        at_load = lone = None
        if again is not None:
            at_load = remeasured(again["defaults"], again["winner"], level)
            if "lone" in again:  # runs before it measured no lone client
                lone = remeasured(again["lone"]["defaults"], again["lone"]["winner"], 1)
        result.append(
            TuneLevel(
                clients=level,
                default=trials[0],
                winner=None if winner is None else trials[winner],
                trials=len(trials),
                skipped=len(document["skipped"]),
                elapsed_s=float(document["elapsed_s"]),
                p99_ms=float(document["p99_ms"]),
                remeasured=at_load,
                lone=lone,
                confirmation=confirmed(document),
            )
        )
    return result


@dataclasses.dataclass(frozen=True)
class DeviceHost:
    """Section 10, one model: served by the device host against in-stub, alternating rounds."""

    throughput: Target  # host / stub throughput at DEVICE_HOST_THROUGHPUT_LEVEL clients
    p50_delta_us: Target  # host - stub p50 at one client, microseconds, per round
    p50_us: dict[str, float]  # median p50 at one client by model
    throughput_rps: dict[str, float]  # median throughput at the top level by model
    hop_us: dict[str, float]  # `hop.py`'s median p50 by variant (local, same_cpu, ping_*, ...)
    hop_batches_per_s: dict[str, float]  # its pipelined variants' median batches per second


def device_host(data: dict[str, Any]) -> DeviceHost:
    runs = data["device_host"]["runs"]
    hop = data["device_host"].get("hop", {})  # runs before the hop was measured have none
    host, stub = runs["host"], runs["stub"]
    level = DEVICE_HOST_THROUGHPUT_LEVEL
    return DeviceHost(
        throughput=Target(paired(host, stub, level), DEVICE_HOST_THROUGHPUT_TARGET),
        p50_delta_us=Target(
            [
                (at_level(a, 1)["p50_ms"] - at_level(b, 1)["p50_ms"]) * 1e3
                for a, b in zip(host, stub)
            ],
            DEVICE_HOST_P50_TARGET_US,
            at_most=True,
        ),
        p50_us={model: median_at(rounds, 1, "p50_ms") * 1e3 for model, rounds in runs.items()},
        throughput_rps={
            model: median_at(rounds, level, "throughput_rps") for model, rounds in runs.items()
        },
        hop_us={
            name: statistics.median(r["p50_us"] for r in rounds)
            for name, rounds in hop.items()
            if "p50_us" in rounds[0]
        },
        hop_batches_per_s={
            name: statistics.median(r["batches_per_s"] for r in rounds)
            for name, rounds in hop.items()
            if "batches_per_s" in rounds[0]
        },
    )


@dataclasses.dataclass(frozen=True)
class ManyModels:
    """Section 10, the repository of many models in one mode (`scenarios.serve_many`)."""

    models: int
    instances: int
    ready: int
    answered: int  # READY models whose one request was answered correctly
    loaded_s: float  # tritonserver's start to the end of loading (every model READY or failed)
    device_processes: int  # processes the emulator's ledger of device 0 counts
    device_bytes: int  # what they hold there
    device_capacity: int
    stub_processes: int
    rss_bytes: int  # tritonserver, its stubs and the device host
    pss_bytes: int
    refusals: int  # our shared-device ERROR lines in Triton's log
    first_refusal: str

    @property
    def all_served(self) -> bool:
        """Every model READY and answering correctly."""
        return self.ready == self.answered == self.models

    @property
    def device_share(self) -> float:
        return self.device_bytes / self.device_capacity


def many_models(data: dict[str, Any]) -> dict[str, ManyModels]:
    """By mode (`scenarios.MANY_MODES`)."""
    fields = [f.name for f in dataclasses.fields(ManyModels)]
    return {
        mode: ManyModels(**{name: figures[name] for name in fields})
        for mode, figures in data["many_models"]["modes"].items()
    }


@dataclasses.dataclass(frozen=True)
class JpegInputs:
    """Section 11: JPEG files in (`jpeg`) against NV12 rows in (`raw`), one classifier."""

    top1: Target  # served JPEG answers equal to the host reference (VPC's resize), of the files
    top1_other: dict[str, int]  # the same answers against the other host resizes
    images_per_s: dict[int, list[float]]  # jpeg / raw images/s, round by round, by level
    rates: dict[str, dict[int, float]]  # median images/s by model and level
    server_cpu_us: dict[str, list[float]]  # tritonserver + stub CPU per image, by model, per round
    cpu_ratio: list[float]  # jpeg / raw of that, round by round

    @staticmethod
    def server_cpu(entry: Entry) -> float:
        return float(entry["tritonserver"] + entry["stub"])


def jpeg_inputs(data: dict[str, Any]) -> JpegInputs:
    raw = data["jpeg"]
    runs, top1 = raw["runs"], raw["top1"]
    cpu = {
        model: [JpegInputs.server_cpu(e) for e in rounds] for model, rounds in raw["cpu"].items()
    }
    return JpegInputs(
        top1=Target([float(top1["jpeg"]["vpc"])], float(top1["target"])),
        top1_other={k: v for k, v in top1["jpeg"].items() if k != "vpc"},
        images_per_s={c: paired(runs["jpeg"], runs["raw"], c, "rows_per_s") for c in JPEG_LEVELS},
        rates={
            model: {c: median_at(rounds, c, "rows_per_s") for c in JPEG_LEVELS}
            for model, rounds in runs.items()
        },
        server_cpu_us=cpu,
        cpu_ratio=[a / b for a, b in zip(cpu["jpeg"], cpu["raw"])],
    )


# Section 13: shared work spaces / a work space per lane, throughput at the section's clients.
FIFTY_THROUGHPUT_TARGET = 0.95


@dataclasses.dataclass(frozen=True)
class FiftyModels:
    """Section 13, fifty realistic-size models on one card (`fifty_models_bench.measure`)."""

    throughput: Target  # shared / per-lane throughput at `clients` clients, per round
    throughput_rps: dict[str, float]  # median by work-space mode
    clients: int
    models: int  # in the card
    fits: dict[str, bool]  # by memory mode, the budget's verdict
    all_served: dict[str, bool]  # by served mode: every model READY and answering correctly


def fifty_models(data: dict[str, Any]) -> FiftyModels:
    raw = data["fifty_models"]
    runs, clients = raw["throughput"]["runs"], raw["throughput"]["clients"]
    return FiftyModels(
        throughput=Target(
            paired(runs["shared"], runs["per_lane"], clients), FIFTY_THROUGHPUT_TARGET
        ),
        throughput_rps={
            mode: median_at(rounds, clients, "throughput_rps") for mode, rounds in runs.items()
        },
        clients=clients,
        models=sum(kind["count"] for kind in raw["kinds"].values()),
        fits={mode: figures["fits"] for mode, figures in raw["budgets"]["modes"].items()},
        all_served={
            mode: served["ready"] == served["answered"] == served["models"]
            for mode, served in raw["served"].items()
        },
    )
