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

The package, bottom up: `space` (candidates and the search space), `trials` (load functions,
measurements, trials), `confirmation`, `search` (limits, budget, search), `served` (the
evaluator against Triton), `advice` (gear advice) and `report` (apply, tune.json, TUNE.md, the
summary). Every public name is importable from the package itself.
"""

from __future__ import annotations

from ge_python_backend.tools.tune.advice import (
    GearAdvice,
    GearOption,
    advise_gears,
    atc_command,
    gear_advice,
    padding_of,
)
from ge_python_backend.tools.tune.confirmation import (
    CONFIRM_FINALISTS,
    CONFIRM_MIN_GAIN,
    CONFIRM_ROUNDS,
    Confirmation,
    Finalist,
    confirmed_winner,
)
from ge_python_backend.tools.tune.report import (
    apply_winner,
    confirmation_markdown,
    confirmation_points,
    format_summary,
    measured_points,
    plot_trials,
    tune_document,
    tune_markdown,
    write_report,
)
from ge_python_backend.tools.tune.search import (
    CONFIRM_SPARE_ROUNDS,
    END_RESERVE_S,
    FIRST_LOAD_GUESS_S,
    Budget,
    Evaluator,
    Limits,
    LoadFailed,
    Search,
    SearchResult,
)
from ge_python_backend.tools.tune.served import (
    UNLOAD_TIMEOUT_S,
    ServedModel,
    load_reason,
)
from ge_python_backend.tools.tune.space import (
    DEFAULT_MAX_INSTANCES,
    PIPELINE_MIN_DEVICE_US,
    QUEUE_DELAYS_US,
    WAITING_DELAY_STEPS,
    Candidate,
    Rung,
    SearchSpace,
    candidate_of,
    config_json,
    with_candidate,
)
from ge_python_backend.tools.tune.trials import (
    FREE_MEMORY_METRIC,
    MEASURED_FIELDS,
    MEMORY_METRIC,
    LoadFunction,
    Measurement,
    Snapshot,
    Trial,
    TrialProbe,
    batch_histogram,
    closed_loop,
    device_gauge,
    measurement_of,
    open_loop,
    queue_ms,
    winner_of,
)

__all__ = [
    "Budget",
    "CONFIRM_FINALISTS",
    "CONFIRM_MIN_GAIN",
    "CONFIRM_ROUNDS",
    "CONFIRM_SPARE_ROUNDS",
    "Candidate",
    "Confirmation",
    "DEFAULT_MAX_INSTANCES",
    "END_RESERVE_S",
    "Evaluator",
    "FIRST_LOAD_GUESS_S",
    "FREE_MEMORY_METRIC",
    "Finalist",
    "GearAdvice",
    "GearOption",
    "Limits",
    "LoadFailed",
    "LoadFunction",
    "MEASURED_FIELDS",
    "MEMORY_METRIC",
    "Measurement",
    "PIPELINE_MIN_DEVICE_US",
    "QUEUE_DELAYS_US",
    "Rung",
    "Search",
    "SearchResult",
    "SearchSpace",
    "ServedModel",
    "Snapshot",
    "Trial",
    "TrialProbe",
    "UNLOAD_TIMEOUT_S",
    "WAITING_DELAY_STEPS",
    "advise_gears",
    "apply_winner",
    "atc_command",
    "batch_histogram",
    "candidate_of",
    "closed_loop",
    "config_json",
    "confirmation_markdown",
    "confirmation_points",
    "confirmed_winner",
    "device_gauge",
    "format_summary",
    "gear_advice",
    "load_reason",
    "measured_points",
    "measurement_of",
    "open_loop",
    "padding_of",
    "plot_trials",
    "queue_ms",
    "tune_document",
    "tune_markdown",
    "winner_of",
    "with_candidate",
    "write_report",
]
