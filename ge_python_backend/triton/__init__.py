"""What `model.py` delegates to: request validation, batching on the NPU and responses."""

from ge_python_backend.triton.instance import ModelInstance

__all__ = ["ModelInstance"]
