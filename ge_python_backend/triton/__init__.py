"""What `model.py` delegates to: auto-complete, request validation, batching on the NPU and
responses."""

from ge_python_backend.triton.autocomplete import auto_complete_config
from ge_python_backend.triton.instance import ModelInstance

__all__ = ["ModelInstance", "auto_complete_config"]
