"""Broken or mismatched model directories next to a healthy model on the real tritonserver.

Each broken model stays UNAVAILABLE with a reason in Triton's repository index that names the file
and the cause, while the server and the healthy model keep serving.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from e2e_helpers import grpc_address, model_states, running_server
from tritonclient.grpc import model_config_pb2

from ge_python_backend.client import TritonClient, typed
from ge_python_backend.repository.config import load_model_config, write_model_config
from ge_python_backend.repository.scaffold import scaffold
from ge_python_backend.repository.versions import write_checksum
from ge_python_backend.server import TritonServer

pytestmark = pytest.mark.e2e

# model -> fragments its load-failure reason must contain ({om} is the .om file's path)
BROKEN = {
    "truncated": ("{om}", "100013 ACL_ERROR_PARSE_MODEL", "truncated"),
    "garbage": ("{om}", "100013 ACL_ERROR_PARSE_MODEL", "is not an .om file"),
    "atc_om": ("{om}", "100012 ACL_ERROR_DESERIALIZE_MODEL", "real pyACL"),
    "bad_checksum": ("{om}", "sha256 mismatch", "expected " + "0" * 64),
    "mismatched": (
        "the config does not match mlp_batch.om",
        "output 'y': config dims [10] but the .om needs [8]",
        "output 'z': config data_type TYPE_INT32 but the .om has TYPE_FP32",
    ),
    "missing_om": ("{om_dir} holds no .om file", "model.py", "put the model's .om there"),
}


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path
) -> Iterator[tuple[TritonServer, dict[str, Path]]]:
    root = tmp_path_factory.mktemp("repository")
    repository = root / "models"
    scaffold(om_dynamic_batch, repository, name="healthy", runtime="emulator")
    oms = {}
    for name in BROKEN:
        result = scaffold(om_dynamic_batch, repository, name=name, runtime="emulator")
        oms[name] = result.om_path
    data = oms["truncated"].read_bytes()
    oms["truncated"].write_bytes(data[: len(data) // 3])
    oms["garbage"].write_bytes(hashlib.sha256(b"garbage").digest() * 64)
    oms["atc_om"].write_bytes(b"IMOD" + bytes(252))
    oms["missing_om"].unlink()
    for name in ("truncated", "garbage", "atc_om"):  # checksums that match the broken content
        write_checksum(oms[name], hashlib.sha256(oms[name].read_bytes()).hexdigest())
    write_checksum(oms["bad_checksum"], "0" * 64)
    config = load_model_config(repository / "mismatched" / "config.pbtxt")
    outputs = {tensor.name: tensor for tensor in config.output}
    outputs["y"].dims[:] = [10]
    outputs["z"].data_type = model_config_pb2.TYPE_INT32
    write_model_config(config, repository / "mismatched" / "config.pbtxt")
    with running_server(repository, log_path=root / "triton.log") as server:
        yield server, oms


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_model_fails_to_load_with_the_file_and_the_cause(
    served: tuple[TritonServer, dict[str, Path]], name: str
) -> None:
    server, oms = served
    state, reason = model_states(server)[name]
    assert state == "UNAVAILABLE"
    for fragment in BROKEN[name]:
        fragment = fragment.format(om=oms[name], om_dir=oms[name].parent)
        assert fragment in reason, f"{fragment!r} not in {reason!r}"


def test_the_server_and_the_healthy_model_keep_serving(
    served: tuple[TritonServer, dict[str, Path]],
) -> None:
    server, _ = served
    assert server.poll() is None
    assert model_states(server)["healthy"] == ("READY", "")
    with TritonClient(grpc_address(server), "grpc") as client:
        result = client.infer("healthy", typed({"x": np.ones((3, 16), np.float32)}))
    assert result["y"].shape == (3, 8)


@pytest.mark.e2e
def test_parameters_are_checked_at_load_and_near_misses_warned_in_tritons_log(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    """A timeout beyond pyACL's C int fails the load naming the parameter and its range (it
    used to fail at warmup with `signed integer is greater than maximum`); a misspelt parameter
    loads with a WARNING in Triton's log naming the parameter it nearly spells."""
    repository = tmp_path / "models"
    for name, key, value in (
        ("huge", "execute_timeout_ms", "99999999999999999999"),
        ("typo", "pipeline_dept", "1"),
    ):
        result = scaffold(om_dynamic_batch, repository, name=name, runtime="emulator")
        result.config.parameters[key].string_value = value
        write_model_config(result.config, result.config_path)
    with running_server(repository, log_path=tmp_path / "triton.log") as server:
        states = model_states(server)
    assert states["typo"][0] == "READY"
    assert states["huge"][0] == "UNAVAILABLE"
    assert "parameter execute_timeout_ms must be 0..2147483647 ms" in states["huge"][1]
    assert "got '99999999999999999999'" in states["huge"][1]
    warnings = [
        line
        for line in (tmp_path / "triton.log").read_text().splitlines()
        if line.startswith("W") and "'typo' version 1" in line
    ]
    assert len(warnings) == 1, warnings
    assert (
        "parameter 'pipeline_dept' (did you mean 'pipeline_depth'?) is not one of ours"
        in (warnings[0])
    )
