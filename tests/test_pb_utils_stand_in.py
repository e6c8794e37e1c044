"""The shipped `pb_utils` stand-in (`ge_python_backend.triton.testing`) against the real
`triton_python_backend_utils`, read inside tritonserver's Python backend stub.

The same `facts(pb_utils)` runs in a model's `initialize` and `execute` on the real server and
here on the stand-in: names, codes, constructors and accessors that ge_python_backend relies on.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from e2e_helpers import http_address, running_server, write_python_model

from ge_python_backend.client import TritonClient
from ge_python_backend.triton import testing

FACTS = '''
def facts(pb_utils):
    """What ge_python_backend relies on in pb_utils, as JSON-able values."""
    error_codes = ("UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE",
                   "UNSUPPORTED", "ALREADY_EXISTS", "CANCELLED")
    tensor = pb_utils.Tensor("t", np.arange(3, dtype=np.float32))
    response = pb_utils.InferenceResponse(output_tensors=[tensor])
    bad = pb_utils.TritonError("bad input", pb_utils.TritonError.INVALID_ARG)
    failed = pb_utils.InferenceResponse(output_tensors=[], error=bad)
    family = pb_utils.MetricFamily(
        name="stand_in_probe", description="probe", kind=pb_utils.MetricFamily.GAUGE
    )
    gauge = family.Metric(labels={"model": "probe"})
    gauge.set(5.0)
    request = pb_utils.InferenceRequest(
        model_name="probe", inputs=[tensor], requested_output_names=["y"]
    )
    return {
        "error_codes": {name: int(getattr(pb_utils.TritonError, name)) for name in error_codes},
        "default_code": int(pb_utils.TritonError("x").code()),
        "error": [bad.message(), int(bad.code())],
        "metric_kinds": [int(pb_utils.MetricFamily.COUNTER), int(pb_utils.MetricFamily.GAUGE),
                         int(pb_utils.MetricFamily.HISTOGRAM)],
        "gauge_value": gauge.value(),
        "final_flag": int(pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL),
        "tensor": [tensor.name(), tensor.as_numpy().tolist()],
        "response": [response.has_error(), [t.name() for t in response.output_tensors()]],
        "by_name": pb_utils.get_output_tensor_by_name(response, "t").name(),
        "failed": [failed.has_error(), failed.error().message(), len(failed.output_tensors())],
        "request": [[t.name() for t in request.inputs()], list(request.requested_output_names()),
                    pb_utils.get_input_tensor_by_name(request, "t").name()],
        "exception": issubclass(pb_utils.TritonModelException, Exception),
        "logger": [callable(getattr(pb_utils.Logger, m, None))
                   for m in ("log_info", "log_warn", "log_error", "log_verbose")],
    }


def served_request_facts(request):
    """The methods a request that Triton hands to execute offers."""
    methods = ("inputs", "requested_output_names", "get_response_sender")
    return {name: callable(getattr(request, name, None)) for name in methods}
'''

MODEL = (
    """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
"""
    + FACTS
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.out = os.environ["STAND_IN_FACTS"]
        with open(self.out, "w") as handle:
            json.dump(facts(pb_utils), handle)

    def execute(self, requests):
        with open(self.out + ".request", "w") as handle:
            json.dump(served_request_facts(requests[0]), handle)
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            sender = request.get_response_sender()
            response = pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)])
            sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""
)

CONFIG = """\
name: "probe"
backend: "python"
max_batch_size: 0
input { name: "X" data_type: TYPE_FP32 dims: [ 2 ] }
output { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }
"""


def stand_in_facts() -> tuple[dict[str, Any], dict[str, bool]]:
    namespace: dict[str, Any] = {"np": np}
    exec(textwrap.dedent(FACTS), namespace)  # our own source, run on the stand-in
    utils = testing.StandInUtils()
    request = utils.InferenceRequest(inputs=[utils.Tensor("X", np.zeros(2, np.float32))])
    return namespace["facts"](utils), namespace["served_request_facts"](request)


@pytest.mark.e2e
def test_the_stand_in_matches_the_real_pb_utils(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    write_python_model(repository, "probe", CONFIG, MODEL)
    out = tmp_path / "facts.json"
    with running_server(repository, env={"STAND_IN_FACTS": str(out)}) as server:
        with TritonClient(http_address(server), "http") as client:
            result = client.infer("probe", {"X": (np.array([1, 2], np.float32), "FP32")})
        np.testing.assert_array_equal(result["Y"], [2, 3])
    real = json.loads(out.read_text())
    real_request = json.loads(Path(str(out) + ".request").read_text())
    ours, our_request = stand_in_facts()
    assert ours == real
    assert our_request == real_request


def test_the_stand_in_keeps_what_the_model_did(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, testing.MODULE_NAME, None)  # removed again afterwards
    utils = testing.install()
    import triton_python_backend_utils as pb_utils  # what a model.py does

    assert pb_utils is utils
    counter = utils.MetricFamily(name="c", description="", kind=utils.MetricFamily.COUNTER)
    counter.Metric(labels={}).increment(2)
    utils.Logger.log_warn("careful")
    request = utils.InferenceRequest(inputs=[])
    request.get_response_sender().send(None, flags=utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    assert utils.metric_calls == [("increment", "c", 2.0)]
    assert utils.log_lines == [("WARNING", "careful")]
    assert request.sent.get_nowait() == (None, 1) and request.sent.empty()
    assert testing.StandInUtils().metric_calls == []  # each stand-in keeps its own record
