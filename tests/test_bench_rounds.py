"""How `make bench` orders its alternating runs (`benchmarks/scenarios.alternate`), with a
recorder that only notes what it was asked to run: nothing is served or measured."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import scenarios  # noqa: E402


class NotingRecorder:
    """`Recorder.bench`'s signature; each run's throughput is its place in the sequence."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, int]] = []

    def bench(
        self, server: Any, model: str, levels: Sequence[int], plan: Any, label: str, *rest: Any
    ) -> list[dict[str, Any]]:
        assert label == f"demo-{model}-c{levels[0]}-{len(self.runs) // 4 + 1}"
        self.runs.append((model, levels[0]))
        return [{"concurrency": level, "throughput_rps": len(self.runs)} for level in levels]


def test_each_level_is_its_own_run_and_the_models_pair_up_a_b_b_a_over_two_rounds() -> None:
    recorder = NotingRecorder()
    plan = scenarios.Plan(rounds=3)
    runs = scenarios.alternate(recorder, None, ["a", "b"], [1, 8], plan, "demo")  # type: ignore[arg-type]
    first_round = [("a", 1), ("b", 1), ("a", 8), ("b", 8)]
    assert recorder.runs == first_round + first_round[::-1] + first_round
    # per model, per round, one entry per level in the levels' order, from its own run
    assert runs == {
        "a": [
            [{"concurrency": 1, "throughput_rps": 1}, {"concurrency": 8, "throughput_rps": 3}],
            [{"concurrency": 1, "throughput_rps": 8}, {"concurrency": 8, "throughput_rps": 6}],
            [{"concurrency": 1, "throughput_rps": 9}, {"concurrency": 8, "throughput_rps": 11}],
        ],
        "b": [
            [{"concurrency": 1, "throughput_rps": 2}, {"concurrency": 8, "throughput_rps": 4}],
            [{"concurrency": 1, "throughput_rps": 7}, {"concurrency": 8, "throughput_rps": 5}],
            [{"concurrency": 1, "throughput_rps": 10}, {"concurrency": 8, "throughput_rps": 12}],
        ],
    }
