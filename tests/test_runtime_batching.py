"""Property tests of the gear planner against a brute-force optimum."""

from __future__ import annotations

import itertools

import pytest

from ge_python_backend.runtime.batching import (
    Chunk,
    ExecutionPlanner,
    normalize_gears,
    plan_chunks,
)

GEAR_SETS = [
    (1,),
    (4,),
    (1, 2, 4, 8),
    (2, 4, 8),
    (3, 5),
    (2, 3, 7),
    (5, 6, 7),
    (8, 16, 32),
    (2, 5),
    (3, 4, 10),
    (1, 3, 9, 27),
    (6, 10, 15),
]


def brute_force(rows: int, gears: tuple[int, ...]) -> tuple[int, int]:
    """(executions, padded rows) of the best plan, by enumerating every multiset of gears."""
    for count in itertools.count(1):
        sums = [sum(c) for c in itertools.combinations_with_replacement(gears, count)]
        covering = [s for s in sums if s >= rows]
        if covering:
            return count, min(covering) - rows
    raise AssertionError("unreachable")


@pytest.mark.parametrize("gears", GEAR_SETS, ids=lambda g: "gears" + "-".join(map(str, g)))
def test_plan_is_valid_and_optimal(gears: tuple[int, ...]) -> None:
    for rows in range(1, 4 * max(gears) + 3):
        plan = plan_chunks(rows, gears)
        context = f"rows={rows} gears={gears} plan={plan}"
        assert all(chunk.gear in gears for chunk in plan), context
        assert all(1 <= chunk.rows <= chunk.gear for chunk in plan), context
        assert sum(chunk.rows for chunk in plan) == rows, context
        # only the last chunk carries padding, and chunks come largest first
        assert all(chunk.padded == 0 for chunk in plan[:-1]), context
        assert [c.gear for c in plan] == sorted((c.gear for c in plan), reverse=True), context
        padded = sum(chunk.padded for chunk in plan)
        assert (len(plan), padded) == brute_force(rows, gears), context


def test_examples_from_the_issue() -> None:
    assert plan_chunks(11, [1, 2, 4, 8]) == [Chunk(8, 8), Chunk(4, 3)]
    assert plan_chunks(6, [4]) == [Chunk(4, 4), Chunk(4, 2)]
    assert plan_chunks(3, [1, 2, 4, 8]) == [Chunk(4, 3)]
    assert plan_chunks(8, [8, 4, 2, 1]) == [Chunk(8, 8)]


def test_large_row_counts_are_planned_without_enumeration() -> None:
    plan = plan_chunks(1_000_004, (3, 5, 1000))
    # 1001 executions are needed; 999 x 1000 + 1000 + 5 pads one row, 3 + 3 would need 1002
    assert [c.gear for c in plan] == [1000] * 1000 + [5]
    assert plan[-1] == Chunk(5, 4)


def test_zero_rows_is_an_empty_plan() -> None:
    assert plan_chunks(0, [1, 2]) == []


@pytest.mark.parametrize(
    ("rows", "gears", "message"),
    [
        (-1, [1], "rows must be a non-negative integer, got -1"),
        (2.0, [1], "rows must be a non-negative integer, got 2.0"),
        (1, [], "expected at least one batch gear, got none"),
        (1, [0, 2], r"batch gears must be positive integers, got \[0, 2\]"),
        (1, [True], r"batch gears must be positive integers, got \[True\]"),
    ],
)
def test_bad_arguments_say_what_arrived(rows: object, gears: list[object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_chunks(rows, gears)  # type: ignore[arg-type]


def test_normalize_gears_sorts_and_dedupes() -> None:
    assert normalize_gears([8, 1, 4, 4, 2]) == (1, 2, 4, 8)


def test_remembered_layouts_plan_as_a_fresh_planner_does() -> None:
    planner = ExecutionPlanner((1, 2, 4, 8))
    layouts = [[(0, 1)], [(0, 3), (0, 2)], [(0, 5), (1, 2), (0, 9)], [(0, 1)] * 8]
    for layout in layouts * 2:  # the second pass is answered from what the first remembered
        assert planner.plan(layout) == tuple(ExecutionPlanner((1, 2, 4, 8)).plan(layout))
    assert planner.plan([(0, 3), (0, 2)]) is planner.plan([(0, 3), (0, 2)])
