"""The floor: the cheapest Python-backend model computing the benchmark arithmetic, `y = 2x + 1`.

Numpy per request, nothing else: what any Python-backend model pays at least. It replaces
`model.py` in a copy of the scaffolded model directory, so config and batching are the same.
"""

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """One numpy expression and one response per request."""

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x * 2 + 1)]))
        return responses
