"""The gear advice of `tune`: the batch gears that would have padded the batches a trial
observed least (`advise_gears`, `padding_of` with the runtime's own chunk planning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from ge_python_backend.runtime.batching import plan_chunks
from ge_python_backend.tools.tune.trials import Trial

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
