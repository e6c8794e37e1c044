"""Serve Ascend NPU ``.om`` models behind Triton through the Python backend."""

__version__ = "0.1.0"
