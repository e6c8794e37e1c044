"""The floor answered the way pipeline depth 2 answers: through response senders, from a thread.

Same numpy per request as `floor_model.py`; `execute` hands the requests' senders and inputs to a
completion thread and returns None, and the thread sends each response. The difference from the
floor is what Triton's Python backend charges for that path (`pipeline_min_device_us`).
"""

import queue
import threading

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """One numpy expression per request, each response sent from a completion thread."""

    def initialize(self, args):
        self._batches = queue.Queue(maxsize=2)
        self._thread = threading.Thread(target=self._complete, daemon=True)
        self._thread.start()

    def execute(self, requests):
        batch = [
            (
                request.get_response_sender(),
                pb_utils.get_input_tensor_by_name(request, "x").as_numpy(),
            )
            for request in requests
        ]
        self._batches.put(batch)
        return None

    def _complete(self):
        while True:
            batch = self._batches.get()
            if batch is None:
                return
            for sender, x in batch:
                response = pb_utils.InferenceResponse([pb_utils.Tensor("y", x * 2 + 1)])
                sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        self._batches.put(None)
        self._thread.join()
