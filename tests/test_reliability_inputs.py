"""Bad and extreme requests against models served by the real tritonserver (one server).

Each bad request gets an error that says what was expected, extreme values are passed through,
and afterwards the server, every model and every stub process are still the ones that started.
Each case records which layer answered: Triton core (the request does not fit config.pbtxt, so
model.py never sees it) or our model.py (the request fits the config but not the `.om`).
The same server checks the listening addresses and the shared-memory flags.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
from e2e_helpers import grpc_address, http_address, model_states, running_server
from onnx_models import reference
from reliability_helpers import MIB, compile_scale, stub_processes
from tritonclient.utils import InferenceServerException

from ge_python_backend.client import TritonClient
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.shm import shm_sizes_for_repository
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

WIDE_WIDTH = 262_144  # FP32 values per row of the "wide" model: 1 MiB per row
WIDE_ROWS = 4  # its largest gear and max_batch_size
MODELS = ("mlp", "add_mul", "mixed", "hw", "dims", "wide")


@dataclasses.dataclass(frozen=True)
class Served:
    server: TritonServer
    repository: Path
    stub_pids: frozenset[int]
    oms: dict[str, Path]


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    om_dynamic_batch: Path,
    om_add_mul: Path,
    om_mixed_types: Path,
    om_hw: Path,
    om_dims: Path,
) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("inputs")
    repository = root / "models"
    wide = compile_scale(root / "src", "wide", WIDE_WIDTH, 2.0)
    oms = {
        "mlp": om_dynamic_batch,
        "add_mul": om_add_mul,
        "mixed": om_mixed_types,
        "hw": om_hw,
        "dims": om_dims,
        "wide": wide,
    }
    for name, om in oms.items():
        # A long queue delay makes the dynamic batcher merge concurrent requests.
        batch = {"hw": 4}.get(name)
        scaffold(
            om,
            repository,
            name=name,
            runtime="emulator",
            max_batch_size=batch,
            max_queue_delay_us=20000,
        )
    # A 5 ms device, so the concurrent requests of the batching test queue while both lanes are
    # busy and Triton's batcher merges them (pipeline depth 2 returns from `execute` at once).
    timing = {"GE_EMULATOR_TIMING": "execute_us=5000"}
    with running_server(repository, env=timing, log_path=root / "triton.log") as server:
        pids = frozenset(stub.pid for stub in stub_processes(server))
        yield Served(server, repository, pids, oms)


Tensor = tuple[str, np.ndarray, str]  # name, data, Triton data type


def _infer(
    protocol: str, address: str, model: str, tensors: list[Tensor], outputs: tuple[str, ...]
) -> Any:
    """One request over `protocol` ("http" or "grpc"); tritonclient's result. No `outputs`:
    none named, so the server returns all."""
    inputs = {name: (data, dtype) for name, data, dtype in tensors}
    with TritonClient(address, protocol) as client:
        return client.send(model, client.prepare(inputs, list(outputs) or None))


def http_infer(
    server: TritonServer, model: str, tensors: list[Tensor], outputs: tuple[str, ...] = ()
) -> Any:
    return _infer("http", http_address(server), model, tensors, outputs)


def grpc_infer(
    server: TritonServer, model: str, tensors: list[Tensor], outputs: tuple[str, ...] = ()
) -> Any:
    return _infer("grpc", grpc_address(server), model, tensors, outputs)


def f32(*shape: int) -> np.ndarray:
    return np.ones(shape, np.float32)


def ids(length: int) -> list[Tensor]:
    """One sequence of `length` token ids (vocabulary of 32) and its attention mask."""
    return [
        ("input_ids", np.arange(length, dtype=np.int64).reshape(1, length) % 32, "INT64"),
        ("attention_mask", np.ones((1, length), np.int64), "INT64"),
    ]


@dataclasses.dataclass(frozen=True)
class BadCase:
    model: str
    tensors: list[Tensor]
    expected: tuple[str, ...]  # fragments the error message must contain
    layer: str  # "core": Triton core refuses it against config.pbtxt; "model.py": we do
    protocol: str = "http"
    outputs: tuple[str, ...] = ()


BAD_CASES = {
    "wrong dtype": BadCase(
        "mlp",
        [("x", np.ones((2, 16), np.float64), "FP64")],
        ("input 'x'", "'FP64'", "expects 'FP32'"),
        "core",
    ),
    "wrong dtype over gRPC": BadCase(
        "mlp",
        [("x", np.ones((2, 16), np.int64), "INT64")],
        ("input 'x'", "'INT64'", "expects 'FP32'"),
        "core",
        protocol="grpc",
    ),
    "FP32 for an FP16 input": BadCase(
        "mixed",
        [("x", np.ones((1, 4), np.int32), "INT32"), ("h", f32(1, 4), "FP32")],
        ("input 'h'", "'FP32'", "expects 'FP16'"),
        "core",
    ),
    "wrong inner shape": BadCase(
        "mlp", [("x", f32(2, 15), "FP32")], ("input 'x'", "Expected [-1,16], got [2,15]"), "core"
    ),
    "wrong rank": BadCase(
        "mlp",
        [("x", f32(2, 16, 1), "FP32")],
        ("input 'x'", "Expected [-1,16], got [2,16,1]"),
        "core",
    ),
    "wrong channel count": BadCase(
        "hw",
        [("image", f32(1, 4, 16, 16), "FP32")],
        ("input 'image'", "Expected [-1,3,-1,-1], got [1,4,16,16]"),
        "core",
    ),
    "missing input": BadCase(
        "add_mul", [("a", f32(2, 4), "FP32")], ("missing required input(s) ['b']",), "core"
    ),
    "unknown input": BadCase(
        "mlp",
        [("x", f32(2, 16), "FP32"), ("w", f32(2, 16), "FP32")],
        ("expected 1 inputs but got 2", "'w'"),
        "core",
    ),
    "inputs with different row counts": BadCase(
        "add_mul",
        [("a", f32(2, 4), "FP32"), ("b", f32(3, 4), "FP32")],
        ("batch size does not match other inputs",),
        "core",
    ),
    "batch above max_batch_size": BadCase(
        "mlp", [("x", f32(9, 16), "FP32")], ("batch-size must be <= 8", "'mlp'"), "core"
    ),
    "batch above max_batch_size over gRPC": BadCase(
        "wide",
        [("x", f32(5, WIDE_WIDTH), "FP32")],
        ("batch-size must be <= 4", "'wide'"),
        "core",
        protocol="grpc",
    ),
    "empty batch": BadCase(
        "mlp", [("x", f32(0, 16), "FP32")], ("input 'x'", "Expected 64, got 0"), "core"
    ),
    "BYTES for a numeric input": BadCase(
        "mlp",
        [("x", np.array([[b"1.0"] * 16] * 2, dtype=np.object_), "BYTES")],
        ("input 'x'", "'BYTES'", "expects 'FP32'"),
        "core",
    ),
    "dims shape that is not a gear": BadCase(
        "dims",
        ids(12),
        ("match none of the model's dims gears", "(1, 12)", "(1, 8)", "(1, 16)", "(1, 32)"),
        "model.py",
    ),
    "dims shape that is not a gear over gRPC": BadCase(
        "dims", ids(40), ("match none of the model's dims gears", "(1, 40)"), "model.py", "grpc"
    ),
    "image size that is not an HW gear": BadCase(
        "hw",
        [("image", f32(1, 3, 20, 24), "FP32")],
        ("match none of the model's HW gears", "(1, 3, 20, 24)", "16x16", "32x32"),
        "model.py",
    ),
    "unknown output": BadCase(
        "mlp",
        [("x", f32(2, 16), "FP32")],
        ("unexpected inference output 'nope'", "'mlp'"),
        "core",
        outputs=("nope",),
    ),
    "unknown output over gRPC": BadCase(
        "mlp",
        [("x", f32(2, 16), "FP32")],
        ("unexpected inference output 'nope'",),
        "core",
        protocol="grpc",
        outputs=("y", "nope"),
    ),
}


@pytest.mark.parametrize("case", BAD_CASES.values(), ids=BAD_CASES.keys())
def test_a_bad_request_gets_an_error_saying_what_was_expected(
    served: Served, case: BadCase
) -> None:
    infer = grpc_infer if case.protocol == "grpc" else http_infer
    executions = execution_stats(served.server, case.model)[1]
    with pytest.raises(InferenceServerException) as caught:
        infer(served.server, case.model, case.tensors, case.outputs)
    message = str(caught.value)
    for fragment in case.expected:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    # model.py answered if Triton called execute for it; Triton core refuses before that. At
    # pipeline depth 2 the answer goes out through the response sender, which may reach the
    # client before Triton counts the execution: give the statistics a moment.
    expected = 1 if case.layer == "model.py" else 0
    deadline = time.monotonic() + 5
    reached_model = execution_stats(served.server, case.model)[1] - executions
    while reached_model < expected and time.monotonic() < deadline:
        time.sleep(0.05)
        reached_model = execution_stats(served.server, case.model)[1] - executions
    assert reached_model == expected, message


def test_nan_passes_through(served: Served) -> None:
    x = np.random.default_rng(1).standard_normal((3, 16), dtype=np.float32)
    x[0, 0] = np.nan
    x[2, :] = np.nan
    result = http_infer(served.server, "mlp", [("x", x, "FP32")])
    expected = reference(served.oms["mlp"], {"x": x})
    for name in ("y", "z"):
        assert np.isnan(result.as_numpy(name)).any()
        np.testing.assert_allclose(result.as_numpy(name), expected[name], rtol=1e-5, equal_nan=True)


def test_infinities_pass_through(served: Served) -> None:
    a = np.array([[np.inf, -np.inf, 1.0, np.inf]] * 2, np.float32)
    b = np.array([[1.0, 2.0, np.inf, -np.inf]] * 2, np.float32)
    result = grpc_infer(served.server, "add_mul", [("a", a, "FP32"), ("b", b, "FP32")])
    with np.errstate(invalid="ignore"):  # inf + -inf and inf * 0 are nan
        np.testing.assert_array_equal(result.as_numpy("sum"), a + b)
        np.testing.assert_array_equal(result.as_numpy("product"), a * b)


def test_fp16_overflow_and_int32_wraparound_pass_through(served: Served) -> None:
    x = np.array([[2**31 - 1, -(2**31), 0, -1]], np.int32)
    h = np.array([[60000, -300, np.nan, np.inf]], np.float16)
    result = http_infer(served.server, "mixed", [("x", x, "INT32"), ("h", h, "FP16")])
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(result.as_numpy("doubled"), x + x)
        np.testing.assert_array_equal(result.as_numpy("squared"), h * h)
    np.testing.assert_array_equal(result.as_numpy("positive"), x > 0)


def test_every_dims_gear_answers(served: Served) -> None:
    for length in (8, 16, 32):
        tensors = ids(length)
        result = http_infer(served.server, "dims", tensors)
        expected = reference(served.oms["dims"], {name: data for name, data, _ in tensors})
        np.testing.assert_allclose(result.as_numpy("hidden"), expected["hidden"], rtol=1e-6)


def test_the_largest_batch_of_the_widest_model_is_answered(served: Served) -> None:
    """4 MiB in and 4 MiB out, the most config.pbtxt allows: the shm sized for it holds it."""
    x = np.random.default_rng(2).standard_normal((WIDE_ROWS, WIDE_WIDTH), dtype=np.float32)
    for infer in (http_infer, grpc_infer):
        result = infer(served.server, "wide", [("x", x, "FP32")])
        np.testing.assert_array_equal(result.as_numpy("y"), x * np.float32(2))


def test_shm_flags_fit_the_median_stub_and_reach_the_stubs(served: Served) -> None:
    exchange = WIDE_ROWS * WIDE_WIDTH * 4 * 2  # the wide model's request plus response
    sizes = shm_sizes_for_repository(served.repository)
    # Five of the six stubs need Triton's 1 MiB; the wide model's stub grows to two exchanges.
    assert (sizes.default_bytes, sizes.growth_bytes) == (MIB, MIB)
    assert [(model.name, model.need_bytes) for model in sizes.growing()] == [("wide", 2 * exchange)]
    assert 2 * exchange == 16 * MIB
    command = served.server.command()
    assert f"--backend-config=python,shm-default-byte-size={sizes.default_bytes}" in command
    assert f"--backend-config=python,shm-growth-byte-size={sizes.growth_bytes}" in command
    for stub in stub_processes(served.server):
        assert str(sizes.default_bytes) in stub.cmdline(), stub.cmdline()


def region_bytes(stub: psutil.Process) -> int:
    """The `/dev/shm` a stub's region holds: its allocated blocks (the backend commits a region
    with posix_fallocate when it creates or grows it). The region's name is the stub's second
    argument, its `model.py` path the first."""
    return os.stat(Path("/dev/shm") / stub.cmdline()[2].lstrip("/")).st_blocks * 512


def test_only_the_wide_models_region_grows_and_it_answers(served: Served) -> None:
    """Concurrent full batches of the wide model grow its stub's region from the 1 MiB default
    by what they need, within the region and growth step `shm_limit_bytes` counts for it; the
    other stubs (their warmup ran their largest batch) stay at the default."""
    sizes = shm_sizes_for_repository(served.repository)
    (wide,) = sizes.growing()
    x = np.random.default_rng(3).standard_normal((WIDE_ROWS, WIDE_WIDTH), dtype=np.float32)
    expected = reference(served.oms["wide"], {"x": x})["y"]
    with ThreadPoolExecutor(8) as pool:
        answers = list(
            pool.map(lambda _: grpc_infer(served.server, "wide", [("x", x, "FP32")]), range(24))
        )
    for answer in answers:
        np.testing.assert_allclose(answer.as_numpy("y"), expected, rtol=1e-6)
    regions = {
        Path(stub.cmdline()[1]).parent.parent.name: region_bytes(stub)
        for stub in stub_processes(served.server)
    }
    assert sorted(regions) == sorted(MODELS)
    wide_bytes = regions.pop("wide")
    assert regions == dict.fromkeys(regions, sizes.default_bytes)
    assert sizes.default_bytes + 2 * WIDE_ROWS * WIDE_WIDTH * 4 <= wide_bytes
    assert wide_bytes <= sizes.region_bytes(wide) + sizes.growth_bytes
    assert served.server.log_path is not None
    assert "Failed to increase the shared memory" not in served.server.log_path.read_text()


def test_requests_batched_with_bad_ones_succeed(served: Served) -> None:
    rng = np.random.default_rng(5)
    good = [rng.standard_normal((1, 16), dtype=np.float32) for _ in range(16)]
    bad = [f32(1, 15), f32(9, 16), np.ones((1, 16), np.float64)]
    requests: list[list[Tensor]] = [[("x", x, "FP32")] for x in good]
    requests += [[("x", x, "FP64" if x.dtype == np.float64 else "FP32")] for x in bad * 2]
    order = rng.permutation(len(requests))

    def send(index: int) -> Any:
        try:
            return http_infer(served.server, "mlp", requests[index])
        except InferenceServerException as exc:
            return exc

    before = execution_stats(served.server, "mlp")
    with ThreadPoolExecutor(len(requests)) as pool:
        results = dict(zip(order, pool.map(send, order)))
    inferences, executions = (a - b for a, b in zip(execution_stats(served.server, "mlp"), before))
    for index, x in enumerate(good):
        assert not isinstance(results[index], Exception), results[index]
        expected = reference(served.oms["mlp"], {"x": x})["y"]
        np.testing.assert_allclose(results[index].as_numpy("y"), expected, rtol=1e-5, atol=1e-6)
    assert all(isinstance(results[i], InferenceServerException) for i in range(16, len(requests)))
    assert inferences == len(good)
    assert executions < inferences, f"{inferences} good requests ran in {executions} executions"


def execution_stats(server: TritonServer, model: str) -> tuple[int, int]:
    with TritonClient(http_address(server), "http") as client:
        stats = client.inference_statistics(model)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def test_the_server_listens_on_loopback_only(served: Served) -> None:
    assert served.server.pid is not None
    listening = [
        conn.laddr
        for conn in psutil.Process(served.server.pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]
    assert len(listening) == 3, listening  # HTTP, gRPC, metrics
    for address in map(ipaddress.ip_address, (laddr.ip for laddr in listening)):
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped  # gRPC reports 127.0.0.1 as ::ffff:127.0.0.1
        assert address.is_loopback, listening
    for stub in stub_processes(served.server):
        assert not [c for c in stub.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]


def test_the_server_and_every_model_stayed_up(served: Served) -> None:
    """Runs last: after every case above, nothing restarted."""
    assert served.server.poll() is None
    states = model_states(served.server)
    assert {name: states[name][0] for name in MODELS} == dict.fromkeys(MODELS, "READY")
    assert frozenset(stub.pid for stub in stub_processes(served.server)) == served.stub_pids
    assert len(served.stub_pids) == len(MODELS)
    x = np.full((2, 16), 0.5, np.float32)
    result = http_infer(served.server, "mlp", [("x", x, "FP32")])
    expected = reference(served.oms["mlp"], {"x": x})["y"]
    np.testing.assert_allclose(result.as_numpy("y"), expected, rtol=1e-5, atol=1e-6)
