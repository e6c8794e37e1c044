"""Plan a batch of rows into executions the model can run (pure; no ACL).

A batched model runs one of its batch gears per execution. `plan_chunks` picks the gears for `rows`
rows: fewest executions first, then fewest padded rows.

With largest gear M, no plan can use fewer than k = ceil(rows / M) executions, and k copies of M
always fit, so k is the optimum. A k-gear plan pads `k*M - rows - sum(M - g_i)` rows, so the best
plan replaces some M's by smaller gears whose deficits `M - g` add up to as much as possible of the
slack `k*M - rows` (< M). That is a small unbounded subset-sum over values below M, independent of
`rows`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

__all__ = ["Chunk", "Execution", "ExecutionPlanner", "Piece", "normalize_gears", "plan_chunks"]

_PLAN_CACHE_SIZE = 256  # row counts whose chunk plan, and batch layouts whose plan, are remembered


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One execution: the model runs `gear` rows, of which the first `rows` are real."""

    gear: int
    rows: int

    @property
    def padded(self) -> int:
        """Rows of padding (zeros) this execution carries."""
        return self.gear - self.rows


def normalize_gears(gears: Sequence[int]) -> tuple[int, ...]:
    """Sorted distinct gears; raises ValueError unless every gear is a positive integer."""
    if not gears:
        raise ValueError("expected at least one batch gear, got none")
    bad = [g for g in gears if isinstance(g, bool) or not isinstance(g, int) or g <= 0]
    if bad:
        raise ValueError(f"batch gears must be positive integers, got {list(gears)}")
    return tuple(sorted(set(gears)))


def plan_chunks(rows: int, gears: Sequence[int]) -> list[Chunk]:
    """Split `rows` rows into gear-sized executions: fewest executions, then fewest padded rows.

    Chunks come largest gear first; real rows fill them in order, so only the last may be padded
    (e.g. gears (1, 2, 4, 8) and 11 rows give [Chunk(8, 8), Chunk(4, 3)]).
    """
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError(f"rows must be a non-negative integer, got {rows!r}")
    ordered = normalize_gears(gears)
    if rows == 0:
        return []
    largest = ordered[-1]
    count = -(-rows // largest)
    slack = count * largest - rows
    deficits = sorted(largest - g for g in ordered[:-1])  # rows saved by g instead of `largest`

    # fewest[s]: fewest deficits summing to exactly s (unreachable: more than `count`);
    # last[s]: one deficit of such a sum.
    unreachable = count + 1
    fewest = [0] + [unreachable] * slack
    last = [0] * (slack + 1)
    for total in range(1, slack + 1):
        for deficit in deficits:
            if deficit > total:
                break
            if fewest[total - deficit] + 1 < fewest[total]:
                fewest[total] = fewest[total - deficit] + 1
                last[total] = deficit
    best = max(s for s in range(slack + 1) if fewest[s] <= count)

    chosen: list[int] = []
    remaining = best
    while remaining:
        chosen.append(largest - last[remaining])
        remaining -= last[remaining]
    plan = sorted([largest] * (count - len(chosen)) + chosen, reverse=True)

    chunks = []
    left = rows
    for gear in plan:
        used = min(gear, left)
        chunks.append(Chunk(gear, used))
        left -= used
    return chunks


@dataclasses.dataclass(frozen=True)
class Piece:
    """Rows [src, src + rows) of request `part` are rows [dst, dst + rows) of an execution;
    `whole` when they are all of that request's rows. The slices are made once, with the plan."""

    part: int
    src: int
    dst: int
    rows: int
    whole: bool
    in_part: slice = dataclasses.field(init=False, repr=False, compare=False)
    in_execution: slice = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "in_part", slice(self.src, self.src + self.rows))
        object.__setattr__(self, "in_execution", slice(self.dst, self.dst + self.rows))


@dataclasses.dataclass(frozen=True)
class Execution:
    """One run of the model: gear `gear` of the gear table with `batch` rows (0: unbatched),
    of which the first `rows` are real and come from `pieces`."""

    gear: int
    batch: int
    rows: int
    pieces: tuple[Piece, ...]


class ExecutionPlanner:
    """Turns matched requests into executions: requests of one gear share executions (batched
    models, planned by `plan_chunks`); an unbatched model runs each request alone. With
    `shared` False (a model with side inputs, whose values differ between requests) each
    request's rows get executions of their own."""

    def __init__(self, batch_gears: Sequence[int], shared: bool = True) -> None:
        self.batch_gears = tuple(batch_gears)
        self.shared = shared
        self._plans: dict[int, list[Chunk]] = {}
        self._layouts: dict[tuple[tuple[int, int], ...], tuple[Execution, ...]] = {}

    def plan(self, matched: Sequence[tuple[int, int]]) -> tuple[Execution, ...]:
        """Executions for requests whose (gear, rows) are `matched`, in request order per gear
        (remembered per layout: a server sees the same few again and again)."""
        layout = tuple(matched)
        executions = self._layouts.get(layout)
        if executions is None:
            executions = tuple(self._plan(layout))
            if len(self._layouts) < _PLAN_CACHE_SIZE:
                self._layouts[layout] = executions
        return executions

    def _plan(self, matched: Sequence[tuple[int, int]]) -> list[Execution]:
        groups: dict[int, list[tuple[int, int]]] = {}
        for part, (gear, rows) in enumerate(matched):
            groups.setdefault(gear, []).append((part, rows))
        executions: list[Execution] = []
        for gear, parts in groups.items():
            if not self.batch_gears:
                executions += [
                    Execution(gear, 0, 1, (Piece(part, 0, 0, 1, True),)) for part, _ in parts
                ]
            elif self.shared:
                executions += self._fill(gear, parts)
            else:
                for one in parts:
                    executions += self._fill(gear, [one])
        return executions

    def _fill(self, gear: int, parts: list[tuple[int, int]]) -> list[Execution]:
        """Requests' rows laid into the planned chunks in order; a request may span chunks."""
        executions = []
        queue = list(parts)
        taken = 0  # rows of queue[0] already placed
        for chunk in self._chunks(sum(rows for _, rows in parts)):
            pieces, filled = [], 0
            while filled < chunk.rows:
                part, rows = queue[0]
                count = min(rows - taken, chunk.rows - filled)
                pieces.append(Piece(part, taken, filled, count, count == rows))
                filled += count
                taken += count
                if taken == rows:
                    queue.pop(0)
                    taken = 0
            executions.append(Execution(gear, chunk.gear, chunk.rows, tuple(pieces)))
        return executions

    def _chunks(self, rows: int) -> list[Chunk]:
        """`plan_chunks` for the gears, remembered per row count."""
        plan = self._plans.get(rows)
        if plan is None:
            plan = plan_chunks(rows, self.batch_gears)
            if len(self._plans) < _PLAN_CACHE_SIZE:
                self._plans[rows] = plan
        return plan
