"""Triton Python-backend model that serves an Ascend `.om` through ge-python-backend.

Copy it next to the `.om` (`<repository>/<model>/<version>/`; `ge-python-model template DIR`
writes it) or let `ge-python-model scaffold` write the whole model directory. Without a
config.pbtxt, Triton asks `auto_complete_config` for the inputs, outputs and batching, read from
the version's `.om`. Settings (NPU ids, pyACL or the emulator, ...) are optional `parameters` in
config.pbtxt; the work is done by `ge_python_backend.triton`.
"""

import os
import sys

# A runtime copied next to this file by `scaffold --vendor-runtime` wins over any installed copy.
_VENDORED_RUNTIME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ge_vendor")
if os.path.isdir(_VENDORED_RUNTIME):
    sys.path.insert(0, _VENDORED_RUNTIME)

import triton_python_backend_utils as pb_utils  # noqa: E402

from ge_python_backend.triton import ModelInstance, auto_complete_config  # noqa: E402


class TritonPythonModel:
    """Requests from Triton's dynamic batcher run together as one NPU batch."""

    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        return auto_complete_config(auto_complete_model_config, __file__, pb_utils)

    def initialize(self, args):
        self.instance = ModelInstance(args, pb_utils)

    def execute(self, requests):
        return self.instance.execute(requests)

    def finalize(self):
        self.instance.close()
