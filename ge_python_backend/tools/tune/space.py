"""The search space of `tune`: the fields a trial varies (`Candidate`), read from a model config
and written into one, and the values each may take around the original config
(`SearchSpace`: the grid, and each candidate's neighbors).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any, TypeVar

from google.protobuf import json_format
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from ge_python_backend.errors import UserError
from ge_python_backend.repository.config import config_view
from ge_python_backend.repository.parameters import DEFAULT_PIPELINE_MIN_DEVICE_US, ModelParameters
from ge_python_backend.runtime import PIPELINE_DEPTHS

DEFAULT_MAX_INSTANCES = 4
# The rungs of the stepped knobs (the original config's value is added to its ladder).
QUEUE_DELAYS_US = (0, 100, 250, 500, 1000, 2000, 5000, 10000)
PIPELINE_MIN_DEVICE_US = (0, 250, 1000, 4000)
# The grid's batching that waits longer: this many rungs above the original's queue delay.
WAITING_DELAY_STEPS = 3

Rung = TypeVar("Rung")


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
