"""`ge-python-model bench`: statistics, error counting, JSON and plot, closed and open loop and
the latency-threshold search, on a real tritonserver.

The served models are hand-written Python-backend models whose behaviour is known: `sleeper`
answers every request after a fixed sleep, `slow` after a longer one (one instance, one request
per execution: it answers at most 1000 / SLOW_MS requests per second and a request waiting
behind k others takes (k + 1) x SLOW_MS), `flaky` fails every third request it receives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from e2e_helpers import grpc_address, http_address, running_server, write_python_model

from ge_python_backend import cli
from ge_python_backend.commands.options import parse_levels, parse_rates
from ge_python_backend.errors import UserError
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.tools.bench import (
    LevelResult,
    arrival_times,
    counters_gained,
    device_counters,
    format_table,
    metric_samples,
    metrics_url,
    percentile,
    plot,
    results_document,
    search_latency_threshold,
    summarize,
)

SLEEP_MS = 4
SLOW_MS = 40
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

SLEEPER = """\
import time
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        time.sleep({sleep_ms} / 1000)
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


def test_request_rates_are_parsed_and_checked() -> None:
    assert parse_rates("50, 12.5") == [50.0, 12.5]
    for bad in ("", "0", "-1", "x", "inf"):
        with pytest.raises(UserError, match="--request-rate"):
            parse_rates(bad)


def test_open_loop_options_without_a_request_rate_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Refused before any server is asked (nothing listens at this port).
    url = ["--url", "127.0.0.1:9", "--model", "m"]
    assert cli.main(["bench", *url, "--arrival", "poisson"]) == 2
    assert "--arrival is for open-loop load" in capsys.readouterr().err
    assert cli.main(["bench", *url, "--concurrency", "2", "--max-in-flight", "4"]) == 2
    assert "--max-in-flight is for open-loop load" in capsys.readouterr().err
    assert cli.main(["bench", *url, "--request-rate", "5", "--latency-threshold-ms", "0"]) == 2
    assert "--latency-threshold-ms must be a positive number" in capsys.readouterr().err


def test_a_constant_schedule_is_evenly_spaced_from_zero() -> None:
    assert arrival_times(4.0, "constant", count=5) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert arrival_times(10.0, "constant", duration=0.3) == pytest.approx([0.0, 0.1, 0.2])
    assert len(arrival_times(250.0, "constant", duration=2.0)) == 500
    for bad in ({"rate": 0.0}, {"rate": 1.0, "arrival": "bursty"}):
        with pytest.raises(UserError):
            arrival_times(bad["rate"], str(bad.get("arrival", "constant")), count=1)


def test_a_poisson_schedule_is_seeded_and_has_exponential_gaps_of_the_rate() -> None:
    rate, count = 200.0, 20000
    times = np.array(arrival_times(rate, "poisson", seed=7, count=count))
    assert times.tolist() == arrival_times(rate, "poisson", seed=7, count=count)  # seeded
    assert times[:50].tolist() != arrival_times(rate, "poisson", seed=8, count=50)
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert (gaps > 0).all()
    # Exponential gaps: mean 1/rate (the sample mean's sd is 0.7% of it here) and a standard
    # deviation equal to the mean (coefficient of variation 1, its sd about 1% here). Constant
    # gaps have CV 0, uniform jitter around the mean at most 0.58.
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.04)
    # By duration: the arrivals before it, their count ~ Poisson(rate x duration), sd 1.4% here.
    window = arrival_times(rate, "poisson", seed=7, duration=25.0)
    assert max(window) < 25.0 and len(window) == pytest.approx(rate * 25.0, rel=0.06)
    assert window == pytest.approx(times[: len(window)].tolist())  # one process, cut at 25 s


def _synthetic(level: float, p99_ms: float, dropped: int = 0) -> LevelResult:
    result = summarize(int(level), [p99_ms / 1e3] * 100, 0, 1.0, 1)
    result.dropped = dropped
    return result


def test_the_threshold_search_doubles_then_bisects_to_the_highest_level_within_it() -> None:
    # p99 = 10 ms x concurrency: 33 ms allows concurrency 3.
    search = search_latency_threshold(
        lambda c: _synthetic(c, 10.0 * c), 33.0, start=1, maximum=64, integer=True
    )
    assert [r.level for r in search.tried] == [1, 2, 4, 3]
    assert search.chosen is search.tried[3] and search.as_dict() == {"p99_ms": 33.0, "chosen": 3}
    # Bounded by the maximum: the last doubling stops there and it is chosen when it holds.
    capped = search_latency_threshold(
        lambda c: _synthetic(c, 1.0), 33.0, start=3, maximum=10, integer=True
    )
    assert [r.level for r in capped.tried] == [3, 6, 10] and capped.chosen is capped.tried[-1]
    # The first level already breaks it: nothing is chosen.
    none = search_latency_threshold(
        lambda c: _synthetic(c, 50.0), 33.0, start=1, maximum=8, integer=True
    )
    assert [r.level for r in none.tried] == [1] and none.chosen is None


def test_a_rate_search_stops_within_its_resolution_and_drops_break_the_threshold() -> None:
    def measure(rate: float) -> LevelResult:  # fine up to 70 requests/s, then requests drop
        result = _synthetic(1, 5.0, dropped=0 if rate <= 70 else 3)
        result.request_rate = rate
        return result

    search = search_latency_threshold(
        measure, 20.0, start=10.0, maximum=1000.0, integer=False, resolution=0.05
    )
    levels = [r.level for r in search.tried]
    assert levels[:4] == [10.0, 20.0, 40.0, 80.0]
    assert search.chosen is not None and 70 * 0.95 <= search.chosen.level <= 70
    above = min(level for level in levels if level > search.chosen.level)
    assert above > 70 and above - search.chosen.level <= 0.05 * search.chosen.level
    with pytest.raises(UserError, match="resolution"):
        search_latency_threshold(measure, 20.0, start=1.0, maximum=2.0, integer=False)


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
    models = (
        ("sleeper", SLEEPER.format(sleep_ms=SLEEP_MS)),
        ("slow", SLEEPER.format(sleep_ms=SLOW_MS)),
        ("flaky", FLAKY),
    )
    for name, model_py in models:
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
def test_an_open_loop_level_sends_on_schedule_and_measures_from_it(
    server: Any, protocol: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `sleeper` answers within a few ms: at these rates nothing waits, so every request due is
    # sent and the answered rate is the offered one.
    json_path, png_path = tmp_path / "out.json", tmp_path / "out.png"
    args = ["--model", "sleeper", "--request-rate", "40,80", "--duration", "1", "--warmup", "2"]
    args += ["--json", str(json_path), "--plot", str(png_path)]
    assert bench(server, protocol, *args) == 0
    levels = json.loads(json_path.read_text())["results"]
    assert [(e["load"], e["request_rate"], e["arrival"]) for e in levels] == [
        ("request_rate", 40.0, "constant"),
        ("request_rate", 80.0, "constant"),
    ]
    for entry in levels:
        rate = entry["request_rate"]
        assert (entry["requests"], entry["dropped"], entry["errors"]) == (rate, 0, 0), entry
        assert entry["max_in_flight"] == 64 and 1 <= entry["concurrency"] < 64
        assert entry["seconds"] >= 1.0  # the window lasts the schedule
        assert 0.8 * rate <= entry["throughput_rps"] <= rate  # answered about as offered
        assert SLEEP_MS <= entry["p50_ms"] <= entry["p90_ms"] <= entry["p95_ms"] <= entry["p99_ms"]
    assert png_path.read_bytes().startswith(PNG_MAGIC)
    out, err = capsys.readouterr()
    assert "offered/s" in out and "dropped" in out and "80 requests/s constant:" in err


@pytest.mark.e2e
def test_requests_due_while_max_in_flight_are_answered_are_dropped(
    server: Any, tmp_path: Path
) -> None:
    # 100 requests/s for 1 s against `slow`, which answers 25 per second, at most 2 in flight:
    # one executing and one waiting take up to 2 x SLOW_MS, and most requests find both busy.
    json_path = tmp_path / "out.json"
    args = ["--model", "slow", "--request-rate", "100", "--duration", "1", "--warmup", "0"]
    args += ["--max-in-flight", "2", "--json", str(json_path)]
    assert bench(server, "grpc", *args) == 0
    (entry,) = json.loads(json_path.read_text())["results"]
    assert entry["requests"] + entry["dropped"] == 100  # every request due was sent or dropped
    assert entry["errors"] == 0 and entry["concurrency"] == 2
    assert entry["dropped"] >= 50, entry
    assert entry["throughput_rps"] <= 1.25 * 1000 / SLOW_MS, entry
    assert entry["p50_ms"] >= SLOW_MS and entry["p99_ms"] >= 1.5 * SLOW_MS, entry


@pytest.mark.e2e
def test_the_concurrency_search_finds_the_level_the_next_one_breaks(
    server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Closed loop on `slow`: at concurrency c each request waits behind c - 1 others, p99 about
    # c x SLOW_MS. A threshold of 3.5 x SLOW_MS allows 3 and no more on an idle host (levels 1,
    # 2, 4, then 3); beside other tests a slow request can break a lower level (p99 of 12 is
    # their slowest), so the levels measured and the one chosen are checked against what the
    # search's rule gives for the p99s measured (the rule itself: the threshold search's tests).
    json_path = tmp_path / "out.json"
    threshold = 3.5 * SLOW_MS
    args = ["--model", "slow", "--concurrency", "16", "--requests", "12", "--warmup", "2"]
    args += ["--latency-threshold-ms", f"{threshold:g}", "--json", str(json_path)]
    assert bench(server, "grpc", *args) == 0
    document = json.loads(json_path.read_text())
    levels = document["results"]
    measured = {entry["concurrency"]: entry for entry in levels}
    assert len(measured) == len(levels) >= 2, levels  # no level twice; doubled at least once
    replay = search_latency_threshold(
        lambda level: SimpleNamespace(**measured[int(level)]),  # as bench measured it
        threshold,
        start=1,
        maximum=16,
        integer=True,
    )
    assert [e.concurrency for e in replay.tried] == [e["concurrency"] for e in levels]
    assert replay.chosen is not None, levels  # one request at a time meets 3.5 x SLOW_MS
    chosen = levels[document["latency_threshold"]["chosen"]]
    assert chosen["concurrency"] == replay.chosen.concurrency
    assert chosen["p99_ms"] <= threshold < measured[chosen["concurrency"] + 1]["p99_ms"]
    printed = f"highest concurrency with p99 <= 140 ms: {chosen['concurrency']}"
    assert printed in capsys.readouterr().out


@pytest.mark.e2e
def test_the_rate_search_finds_the_rate_the_model_keeps_up_with(
    server: Any, tmp_path: Path
) -> None:
    # Open loop on `slow`, which answers 1000 / SLOW_MS = 25 requests/s at most (fewer on a busy
    # machine): at a rate it keeps up with, a request waits for nobody and p99 is about SLOW_MS;
    # past it the backlog grows with every request and p99 passes 100 ms within the second.
    json_path = tmp_path / "out.json"
    args = ["--model", "slow", "--request-rate", "5,80", "--duration", "1", "--warmup", "2"]
    args += ["--max-in-flight", "8", "--latency-threshold-ms", "100", "--json", str(json_path)]
    assert bench(server, "grpc", *args) == 0
    document = json.loads(json_path.read_text())
    levels = document["results"]
    assert levels[0]["request_rate"] == 5.0 and len(levels) >= 3, levels
    chosen = levels[document["latency_threshold"]["chosen"]]
    assert 5.0 <= chosen["request_rate"] <= 1000 / SLOW_MS, levels
    assert chosen["p99_ms"] <= 100 and chosen["dropped"] == 0
    assert chosen["throughput_rps"] >= 0.9 * chosen["request_rate"]  # it kept up
    above = min(
        (e for e in levels if e["request_rate"] > chosen["request_rate"]),
        key=lambda e: e["request_rate"],
    )
    assert above["request_rate"] <= 1.05 * chosen["request_rate"]  # bisected that close
    assert above["p99_ms"] > 100 or above["dropped"] > 0, above


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
    json_path, rate_path = tmp_path / "out.json", tmp_path / "rate.json"
    with running_server(repository, env=env, log_path=tmp_path / "triton.log") as running:
        args = ["--model", "mlp", "--duration", "2", "--warmup", "5", "--shape", "x:2,16"]
        args += ["--metrics-url", running.urls.metrics]
        assert bench(running, "grpc", *args, "--concurrency", "1,8", "--json", str(json_path)) == 0
        # Open loop at 50 requests/s (Poisson): the device busy for about half of each second.
        rate = ["--request-rate", "50", "--arrival", "poisson", "--json", str(rate_path)]
        assert bench(running, "grpc", *args, *rate) == 0
    levels = json.loads(json_path.read_text())["results"]
    (open_level,) = json.loads(rate_path.read_text())["results"]
    assert open_level["arrival"] == "poisson" and open_level["dropped"] == 0
    for entry in [*levels, open_level]:
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
