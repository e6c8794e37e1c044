"""The outcome of checking one model directory (`ModelReport`): what `validation` reports per
model, and what the ensemble check (`ensemble.check_ensemble`) reads of each step's model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tritonclient.grpc.model_config_pb2 import ModelConfig

# What a model directory holds: one of ours, someone else's Python model, an ensemble.
KIND_OURS = "ge-python-backend"
KIND_PYTHON = "python"
KIND_ENSEMBLE = "ensemble"
KIND_DESCRIPTIONS = {
    KIND_OURS: "",
    KIND_PYTHON: "python model, not ours: config checked, files not",
    KIND_ENSEMBLE: "ensemble: steps and their tensors checked",
}


@dataclasses.dataclass
class ModelReport:
    """The outcome of validating one model directory. `served_config` is its config as Triton
    will serve it (ours: completed from the highest version's `.om`), for the ensembles that
    use it; None when not known here, `served_config_unknown` then says why."""

    name: str
    path: Path
    kind: str = KIND_OURS
    versions: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    served_config: ModelConfig | None = None
    served_config_unknown: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def description(self) -> str:
        """What kind of model it is and how far it was checked ("" for ours)."""
        return KIND_DESCRIPTIONS[self.kind]
