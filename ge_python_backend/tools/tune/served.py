"""The `Evaluator` of `tune` for a model served by a Triton in explicit model-control mode
(`ServedModel`): each trial's config loaded through the repository API, then measured.
"""

from __future__ import annotations

from ge_python_backend.client import TritonClient, error_text
from ge_python_backend.errors import UserError
from ge_python_backend.tools.bench import Target
from ge_python_backend.tools.tune.search import LoadFailed
from ge_python_backend.tools.tune.space import Candidate, candidate_of, config_json, with_candidate
from ge_python_backend.tools.tune.trials import (
    LoadFunction,
    Measurement,
    TrialProbe,
    measurement_of,
)

# Each trial unloads the model and waits until Triton has drained it before loading the next
# config: no trial's instances measure beside the previous trial's (docs/guides/tune.md).
UNLOAD_TIMEOUT_S = 60.0


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

        if not self.client.unload_drained(self.model, UNLOAD_TIMEOUT_S):
            raise UserError(f"model {self.model!r} did not unload in {UNLOAD_TIMEOUT_S:g} s")
        try:
            self.client.load_model(self.model, config=config)
        except InferenceServerException as exc:
            raise LoadFailed(load_reason(exc)) from None

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
