"""`ge-python-model bench`: statistics, error counting, JSON and plot, on a real tritonserver.

The served models are hand-written Python-backend models whose behaviour is known: `sleeper`
answers every request after a fixed sleep, `flaky` fails every third request it receives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import grpc_address, http_address, running_server, write_python_model

from ge_python_backend import cli
from ge_python_backend.commands.bench_cmd import parse_levels
from ge_python_backend.errors import UserError
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.tools.bench import (
    LevelResult,
    counters_gained,
    device_counters,
    format_table,
    metric_samples,
    metrics_url,
    percentile,
    plot,
    results_document,
    summarize,
)

SLEEP_MS = 4
FAIL_EVERY = 3
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 8
input {{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }}
output {{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }}
instance_group {{ count: 1 kind: KIND_CPU }}
"""

SLEEPER = f"""\
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep({SLEEP_MS} / 1000)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]
            )
            for r in requests
        ]
"""

FLAKY = f"""\
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.seen = 0

    def execute(self, requests):
        responses = []
        for request in requests:
            self.seen += 1
            if self.seen % {FAIL_EVERY} == 0:
                error = pb_utils.TritonError(f"planned failure of request {{self.seen}}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            else:
                x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x)]))
        return responses
"""


# -- statistics, no server --------------------------------------------------------------------


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert [percentile(values, p) for p in (50, 90, 99, 100)] == [50.0, 90.0, 99.0, 100.0]
    assert percentile([7.0], 99) == 7.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_summary_counts_failures_and_rows_of_successes_only() -> None:
    result = summarize(4, [0.003, 0.001, 0.002, 0.010], errors=2, seconds=2.0, rows_per_request=3)
    assert (result.requests, result.errors, result.rows) == (6, 2, 12)
    assert result.throughput_rps == pytest.approx(2.0)
    assert result.rows_per_s == pytest.approx(6.0)
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == pytest.approx((2.0, 10.0, 10.0))


def test_a_level_where_everything_failed_has_no_latencies() -> None:
    result = summarize(2, [], errors=5, seconds=1.0, rows_per_request=1, error_messages=["boom"])
    entry = result.as_dict()
    assert (entry["requests"], entry["errors"], entry["throughput_rps"]) == (5, 5, 0.0)
    assert entry["p50_ms"] is None and entry["p99_ms"] is None
    assert entry["error_messages"] == ["boom"]


def test_concurrency_levels_are_parsed_and_checked() -> None:
    assert parse_levels("1,4, 16") == [1, 4, 16]
    for bad in ("", "0", "1,x", "-2"):
        with pytest.raises(UserError):
            parse_levels(bad)


def test_plot_writes_a_png_with_one_line_per_series(tmp_path: Path) -> None:
    def level(c: int, rps: float) -> LevelResult:
        return summarize(c, [0.001 * c] * 10, 0, 10 / rps, 1)

    series = [
        (name, [level(c, rps * c).as_dict() for c in (1, 2, 4, 8)])
        for name, rps in (("a", 100.0), ("b", 80.0))
    ]
    path = plot(series, tmp_path / "plots" / "bench.png", title="two models")
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert results_document("m", [])["results"] == []


METRICS_TEXT = """\
# HELP ge_device_busy_seconds_total Device time executing this instance's model
# TYPE ge_device_busy_seconds_total counter
ge_device_busy_seconds_total{device="0",model="mlp",version="1"} 1.5
ge_device_busy_seconds_total{device="0",model="mlp",version="2"} 0.25
ge_device_busy_seconds_total{device="1",model="mlp",version="1"} 2
ge_device_busy_seconds_total{device="0",model="mlp_other",version="1"} 9
ge_device_busy_seconds_total_extra{device="0",model="mlp",version="1"} 7
ge_executions_total{device="0",model="mlp",version="1"} 100 1712345678000
ge_rows_total{model="mlp",version="1",device="0"} 400
ge_padded_rows_total{device="0",model="mlp",version="1"} 12
nv_inference_count{model="mlp",version="1"} 400
"""


def test_metric_samples_are_read_from_the_prometheus_text_format() -> None:
    samples = metric_samples(METRICS_TEXT, "ge_device_busy_seconds_total")
    assert [(labels["model"], labels["device"], value) for labels, value in samples] == [
        ("mlp", "0", 1.5),
        ("mlp", "0", 0.25),
        ("mlp", "1", 2.0),
        ("mlp_other", "0", 9.0),
    ]
    assert metric_samples(METRICS_TEXT, "ge_executions_total")[0][1] == 100.0  # timestamp dropped
    escaped = 'm{model="a\\"b\\\\c",device="0"} 3'
    assert metric_samples(escaped, "m") == [({"model": 'a"b\\c', "device": "0"}, 3.0)]


def test_device_counters_sum_the_model_s_versions_per_device_and_gains_are_deltas() -> None:
    before = device_counters(METRICS_TEXT, "mlp")
    assert before == {
        "0": {"busy_seconds": 1.75, "executions": 100.0, "rows": 400.0, "padded_rows": 12.0},
        "1": {"busy_seconds": 2.0, "executions": 0.0, "rows": 0.0, "padded_rows": 0.0},
    }
    assert device_counters(METRICS_TEXT, "missing") == {}
    later = METRICS_TEXT.replace("} 1.5", "} 2.5").replace("} 100 ", "} 130 ")
    gained = counters_gained(before, device_counters(later, "mlp"))
    assert gained["0"] == {"busy_seconds": 1.0, "executions": 30.0, "rows": 0.0, "padded_rows": 0.0}
    assert gained["1"]["busy_seconds"] == 0.0


def test_device_utilization_is_busy_seconds_gained_over_the_window() -> None:
    result = summarize(4, [0.01] * 10, 0, 2.0, 1)
    assert result.device_utilization is None and result.as_dict()["device_utilization"] is None
    assert "device utilization" not in format_table([result])
    result.device = {
        "0": {"busy_seconds": 1.9, "executions": 1.0, "rows": 1.0, "padded_rows": 0.0},
        "1": {"busy_seconds": 1.0, "executions": 1.0, "rows": 1.0, "padded_rows": 0.0},
    }
    assert result.device_utilization == pytest.approx({"0": 0.95, "1": 0.5})
    assert result.as_dict()["device_utilization"] == {"0": 0.95, "1": 0.5}
    assert result.as_dict()["device_counters"]["0"]["busy_seconds"] == 1.9
    table = format_table([result])
    assert "device utilization" in table and "device 0: 0.950, device 1: 0.500" in table
    del result.device["1"]
    assert format_table([result]).splitlines()[1].endswith("  0.950")


def test_the_metrics_url_defaults_to_http_and_the_metrics_path() -> None:
    assert metrics_url("127.0.0.1:8002") == "http://127.0.0.1:8002/metrics"
    assert metrics_url("http://h:8002/") == "http://h:8002/metrics"
    assert metrics_url("https://h/triton/metrics") == "https://h/triton/metrics"
    for bad in ("ftp://h:8002/metrics", "http://"):
        with pytest.raises(UserError, match="--metrics-url"):
            metrics_url(bad)


# -- a real server -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("bench")
    repository = root / "models"
    for name, model_py in (("sleeper", SLEEPER), ("flaky", FLAKY)):
        write_python_model(repository, name, CONFIG.format(name=name), model_py)
    with running_server(repository, log_path=root / "triton.log") as running:
        yield running


def bench(server: Any, protocol: str, *args: str) -> int:
    url = http_address(server) if protocol == "http" else grpc_address(server)
    return cli.main(["bench", "--url", url, "--protocol", protocol, *args])


@pytest.mark.e2e
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_statistics_on_a_model_of_known_latency(
    server: Any, protocol: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    json_path, png_path = tmp_path / "out.json", tmp_path / "out.png"
    code = bench(
        server,
        protocol,
        "--model",
        "sleeper",
        "--concurrency",
        "1,3",
        "--requests",
        "24",
        "--warmup",
        "2",
        "--shape",
        "x:4,4",
        "--json",
        str(json_path),
        "--plot",
        str(png_path),
    )
    assert code == 0
    document = json.loads(json_path.read_text())
    assert document["model"] == "sleeper"
    assert [e["concurrency"] for e in document["results"]] == [1, 3]
    for entry in document["results"]:
        for field in ("throughput_rps", "rows_per_s", "p50_ms", "p90_ms", "p99_ms"):
            assert isinstance(entry[field], float), (field, entry)
        assert (entry["requests"], entry["errors"]) == (24, 0)
        assert entry["rows"] == 24 * 4  # every request carried 4 rows
        assert entry["rows_per_s"] == pytest.approx(4 * entry["throughput_rps"], rel=1e-3)
        assert SLEEP_MS <= entry["p50_ms"] <= entry["p90_ms"] <= entry["p99_ms"]
    assert png_path.read_bytes().startswith(PNG_MAGIC)
    out, err = capsys.readouterr()
    assert "p99 ms" in out and "concurrency 3:" in err  # the table, and progress on stderr


@pytest.mark.e2e
def test_a_duration_level_runs_until_the_deadline(server: Any, tmp_path: Path) -> None:
    json_path = tmp_path / "out.json"
    args = ["--model", "sleeper", "--concurrency", "2", "--duration", "0.5", "--warmup", "0"]
    assert bench(server, "grpc", *args, "--json", str(json_path)) == 0
    (entry,) = json.loads(json_path.read_text())["results"]
    assert entry["errors"] == 0 and entry["requests"] >= 2
    assert entry["rows"] == entry["requests"]  # batch 1 by default


@pytest.mark.e2e
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_failed_request_is_counted(server: Any, protocol: str, tmp_path: Path) -> None:
    # Any 30 consecutive requests to `flaky` hold exactly 10 that it fails.
    json_path = tmp_path / "out.json"
    code = bench(
        server,
        protocol,
        "--model",
        "flaky",
        "--concurrency",
        "1,4",
        "--requests",
        "30",
        "--warmup",
        "0",
        "--json",
        str(json_path),
    )
    assert code == 0
    levels = json.loads(json_path.read_text())["results"]
    for entry in levels:
        assert (entry["requests"], entry["errors"]) == (30, 30 // FAIL_EVERY)
        assert entry["rows"] == 30 - 30 // FAIL_EVERY
        assert entry["p50_ms"] is not None
        assert any("planned failure of request" in m for m in entry["error_messages"])


@pytest.mark.e2e
def test_an_unknown_model_is_a_one_line_error(
    server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench(server, "http", "--model", "missing", "--requests", "1") == 2
    assert "missing" in capsys.readouterr().err


@pytest.mark.e2e
def test_device_utilization_and_busy_seconds_follow_the_timing_model(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    # Every execution holds the emulated device for E + R * (rows of its gear) microseconds, so
    # the busy seconds the metrics gained must be that sum over the executions the counters saw,
    # with the rows the load generator got answered: ge_device_busy_seconds_total's rate agrees
    # with rows/s under the timing model.
    execute_us, per_row_us = 10000.0, 1000.0  # long enough that sleep overshoot is noise
    repository = tmp_path / "models"
    scaffold(om_dynamic_batch, repository, name="mlp", runtime="emulator", pipeline_depth=1)
    env = {"GE_EMULATOR_TIMING": f"execute_us={execute_us:g},execute_us_per_row={per_row_us:g}"}
    json_path = tmp_path / "out.json"
    with running_server(repository, env=env, log_path=tmp_path / "triton.log") as running:
        args = ["--model", "mlp", "--concurrency", "1,8", "--duration", "2", "--warmup", "5"]
        args += ["--shape", "x:2,16", "--metrics-url", running.urls.metrics]
        assert bench(running, "grpc", *args, "--json", str(json_path)) == 0
    levels = json.loads(json_path.read_text())["results"]
    for entry in levels:
        assert entry["errors"] == 0
        (utilization,) = entry["device_utilization"].values()
        gained = entry["device_counters"]["0"]
        expected = (
            execute_us * gained["executions"]
            + per_row_us * (entry["rows_per_s"] * entry["seconds"] + gained["padded_rows"])
        ) / 1e6
        assert gained["busy_seconds"] == pytest.approx(expected, rel=0.10), entry
        assert utilization == pytest.approx(gained["busy_seconds"] / entry["seconds"], rel=1e-3)
        assert 0.2 < utilization <= 1.02, entry
    # Eight clients keep a batch waiting while one executes: the device is the bottleneck.
    assert levels[1]["device_utilization"]["0"] > 0.6, levels[1]
