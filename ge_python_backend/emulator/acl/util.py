"""`acl.util` of the emulated pyACL: conversions between Python objects and host pointers.

Only names real pyACL's `acl.util` has (pinned by tests/test_emulator_surface.py); they are
implemented in `_util.py`.
"""

from ge_python_backend.emulator.acl._util import (
    bytes_to_ptr,
    numpy_to_ptr,
    ptr_to_bytes,
    ptr_to_numpy,
)

__all__ = [
    "bytes_to_ptr",
    "numpy_to_ptr",
    "ptr_to_bytes",
    "ptr_to_numpy",
]
