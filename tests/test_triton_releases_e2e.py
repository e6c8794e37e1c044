"""The served slice on every Triton release of `triton_releases.RELEASES` (2.39, 2.44, 2.51).

One `serve` per release, through `--tritonserver --backend-directory` for the releases other
than the installed one, with one repository: the MLP scaffolded and copied (template and `.om`,
auto-complete fills the config), each with the device host off and on. Each model answers a few
requests as onnxruntime does; the server reports the release; serve prints no warning about
records that are not its own.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from onnx_models import reference
from test_serve_leftovers import Serve
from triton_releases import RELEASES, TritonRelease, serve_options

from ge_python_backend.cli import main
from ge_python_backend.client import TritonClient, typed
from ge_python_backend.processes import RUN_DIR_ENV
from ge_python_backend.repository.scaffold import scaffold

pytestmark = pytest.mark.e2e

MODELS = ("scaffolded", "scaffolded_hosted", "copied", "copied_hosted")
HOSTED_CONFIG = (
    'backend: "python"\nparameters { key: "device_host" value { string_value: "on" } }\n'
)


def repository_of(root: Path, om: Path) -> Path:
    repository = root / "models"
    scaffold(om, repository, name="scaffolded", runtime="emulator")
    scaffold(om, repository, name="scaffolded_hosted", runtime="emulator", device_host=True)
    for name in ("copied", "copied_hosted"):
        version = repository / name / "1"
        version.mkdir(parents=True)
        assert main(["template", str(version)]) == 0
        shutil.copy(om, version / om.name)
    (repository / "copied_hosted" / "config.pbtxt").write_text(HOSTED_CONFIG)
    return repository


@pytest.fixture(scope="module", params=RELEASES, ids=lambda release: release.triton)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, om_dynamic_batch: Path
) -> Iterator[tuple[TritonRelease, Serve]]:
    release: TritonRelease = request.param
    root = tmp_path_factory.mktemp(f"triton-{release.triton}")
    repository = repository_of(root, om_dynamic_batch)
    options = serve_options(release, root / "cache")
    with pytest.MonkeyPatch.context() as patch:  # a host of its own: devices, records
        patch.setenv("GE_EMULATOR_HOST_DIR", str(root / "host"))
        patch.setenv(RUN_DIR_ENV, str(root / "run"))
        serve = Serve(repository, root / "tmp", "--no-watch", *options)
        try:
            serve.wait_ready(180)
            yield release, serve
        finally:
            assert serve.stop() == 0, serve.output


def test_the_release_serves_every_model_of_the_slice(
    served: tuple[TritonRelease, Serve], om_dynamic_batch: Path
) -> None:
    release, serve = served
    http = serve.value(r"HTTP\s+(\S+)")
    with urllib.request.urlopen(f"{http}/v2", timeout=10) as reply:
        assert json.load(reply)["version"] == release.triton
    for name in MODELS:
        assert f"{name} (version 1): READY" in serve.output
    assert "ignoring" not in serve.output and "not a server record" not in serve.output
    rng = np.random.default_rng(3)
    with TritonClient(serve.value(r"gRPC\s+(\S+)"), "grpc", timeout_s=60) as client:
        for name in MODELS:
            for rows in (1, 3):
                x = rng.standard_normal((rows, 16)).astype(np.float32)
                got = client.infer(name, typed({"x": x}))
                for output, want in reference(om_dynamic_batch, {"x": x}).items():
                    np.testing.assert_allclose(got[output], want, rtol=1e-5, atol=1e-5)
