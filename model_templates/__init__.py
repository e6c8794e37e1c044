"""The Triton model.py template; the wheel ships this folder as `ge_python_backend.templates`."""
