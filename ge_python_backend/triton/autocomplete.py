"""`model.py`'s `auto_complete_config`: fill the config Triton hands over from the version's `.om`.

Triton 2.51 calls it once per version it loads, in a stub process of its own, with the model's
config (no `config.pbtxt`: only the name, the backend and defaults) and nothing else; the
version directory is the one holding `model.py`. The completion itself is
`repository.autocomplete.complete_version` (shared with `validate` and `inspect --config`);
this module applies its result through `pb_utils.ModelConfig` (`set_max_batch_size`,
`add_input`, `add_output`, `set_dynamic_batching`) and the preferred batch sizes, queue delay,
a scalar's reshape and an image input's format through `as_dict()`, which Triton reads back whole
(checked: they are served).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ge_python_backend.repository.autocomplete import complete_version
from ge_python_backend.repository.triton_config import TritonConfig
from ge_python_backend.triton.log import forward_to_triton

logger = logging.getLogger(__name__)


def auto_complete_config(auto_complete_model_config: Any, model_py: str, pb_utils: Any) -> Any:
    """Complete Triton's `pb_utils.ModelConfig` from the `.om` beside `model_py` (the template's
    `__file__`) and return it; an exception (the model then fails to load) says what is wrong."""
    forward_to_triton(pb_utils)
    version_dir = Path(model_py).resolve().parent
    target = auto_complete_model_config
    given = TritonConfig.from_dict(target.as_dict())
    name = f"{given.name or version_dir.parent.name!r} version {version_dir.name}"
    try:
        completion = complete_version(given, version_dir)
    except Exception as exc:
        logger.error("model %s: auto-complete failed: %s", name, exc)
        raise
    config = completion.config
    if config.max_batch_size != given.max_batch_size:
        target.set_max_batch_size(config.max_batch_size)
    for key, add, tensors in (
        ("input", target.add_input, config.inputs),
        ("output", target.add_output, config.outputs),
    ):
        for tensor in tensors:
            entry = tensor.to_dict()
            # add_* takes neither a reshape (a scalar's) nor an input's format; as_dict() does
            later = {field: entry.pop(field) for field in ("reshape", "format") if field in entry}
            add(entry)
            if later:
                added = next(e for e in target.as_dict()[key] if e["name"] == tensor.name)
                added.update(later)
    if given.dynamic_batching is None and config.dynamic_batching is not None:
        target.set_dynamic_batching()
        batching = target.as_dict()["dynamic_batching"]
        batching["preferred_batch_size"] = list(config.dynamic_batching.preferred_batch_size)
        batching["max_queue_delay_microseconds"] = (
            config.dynamic_batching.max_queue_delay_microseconds
        )
    logger.info(
        "model %s: auto-complete from %s filled %s",
        name,
        completion.om_path.name,
        "; ".join(completion.filled) or "nothing (the config has it all)",
    )
    return target
