"""Triton Python-backend model that serves an Ascend `.om` through ge-python-backend.

Written by `ge-python-model scaffold`. Settings (the `.om` file, NPU ids, pyACL or the emulator)
are `parameters` in config.pbtxt; the work is done by `ge_python_backend.triton.ModelInstance`.
"""

import os
import sys

# A runtime copied next to this file by `scaffold --vendor-runtime` wins over any installed copy.
_VENDORED_RUNTIME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ge_vendor")
if os.path.isdir(_VENDORED_RUNTIME):
    sys.path.insert(0, _VENDORED_RUNTIME)

import triton_python_backend_utils as pb_utils  # noqa: E402

from ge_python_backend.triton import ModelInstance  # noqa: E402


class TritonPythonModel:
    """Requests from Triton's dynamic batcher run together as one NPU batch."""

    def initialize(self, args):
        self.instance = ModelInstance(args, pb_utils)

    def execute(self, requests):
        return self.instance.execute(requests)

    def finalize(self):
        self.instance.close()
