"""The runtime in the Python of an Ascend host (issue 20), proven with the real tritonserver.

Two stub environments (`stub_envs.py`), each holding only numpy, this package installed with
`--no-deps`, onnxruntime for the emulator and protobuf 3.20.3 as CANN pins it: Python 3.9 with
numpy 1.x and Python 3.12 with numpy 2.x. Triton's Python backend runs the stub built for that
version on that interpreter (`TritonServer(stub_python=...)`, what `serve --stub-python` does) and
serves a scaffolded batch-gear model, the copy path (no config.pbtxt: auto-complete) and a
model scaffolded with `--vendor-runtime`. Answers are compared with onnxruntime; every stub
process (auto-complete and each instance) reports which interpreter, numpy and package copy it
ran and whether tritonclient, grpc or google.protobuf were imported, read back from Triton's log.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from e2e_helpers import http_address, model_states, running_server
from stub_envs import (
    CACHE,
    PY39_NUMPY1,
    PY312_NUMPY2,
    PY312_NUMPY2_SUITE,
    ROOT,
    StubEnvSpec,
    build_wheel,
    stub_environment,
)
from test_e2e_triton import reference
from tritonclient.utils import np_to_triton_dtype

from ge_python_backend.repository.model_files import model_template
from ge_python_backend.repository.scaffold import STUB_LEFT_OUT, scaffold
from ge_python_backend.server import describe_python, find_server
from ge_python_backend.tools.doctor import (
    FAIL,
    OK,
    WARN,
    check_stub_environment,
    check_stub_python,
)

pytestmark = pytest.mark.e2e

MODELS = ("batch", "copy", "vendored")  # the mlp: x FP32 -> y, z
# The tests of the runtime and the emulator (they need neither the tools nor a server), also run
# under numpy 2.
RUNTIME_TESTS = (
    "test_emulator_api.py",
    "test_emulator_context.py",
    "test_emulator_faults.py",
    "test_emulator_huawei_flows.py",
    "test_emulator_memory.py",
    "test_emulator_models.py",
    "test_emulator_stats.py",
    "test_emulator_timing.py",
    "test_hot_path.py",
    "test_omfile.py",
    "test_runtime_acl.py",
    "test_runtime_batching.py",
    "test_runtime_errors.py",
    "test_runtime_objects.py",
    "test_runtime_session.py",
)
MIXED = "mixed"  # INT32 and FP16 in, INT32, BOOL and FP16 out
REPORT = "GE-STUB-REPORT "
FORBIDDEN = ("tritonclient", "grpc", "google.protobuf")
# model.py of the served models: the template (as ge_template.py beside it: the version
# directory is on the stub's sys.path) and a report line on stdout, which is Triton's log.
WRAPPER = '''\
"""Test wrapper of the ge-python-backend template: reports what each stub process imported."""
import json
import os
import sys

from ge_template import TritonPythonModel as Template

MODEL = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def report(where):
    import ge_python_backend
    import numpy

    imported = sorted(
        name for name in sys.modules
        if name.split(".")[0] in ("tritonclient", "grpc") or name.startswith("google.protobuf")
    )
    facts = {
        "model": MODEL,
        "where": where,
        "python": "%d.%d" % sys.version_info[:2],
        "executable": sys.executable,
        "numpy": numpy.__version__,
        "package": ge_python_backend.__file__,
        "forbidden": imported,
    }
    print("GE-STUB-REPORT " + json.dumps(facts), flush=True)


class TritonPythonModel(Template):
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        completed = Template.auto_complete_config(auto_complete_model_config)
        report("auto_complete_config")
        return completed

    def initialize(self, args):
        super().initialize(args)
        report("initialize")

    def finalize(self):
        super().finalize()
        report("finalize")
'''


def wrap_template(version_dir: Path) -> None:
    """model.py -> the wrapper, the template beside it as ge_template.py."""
    (version_dir / "ge_template.py").write_text(model_template())
    (version_dir / "model.py").write_text(WRAPPER)


def build_repository(root: Path, om: Path, om_mixed: Path) -> Path:
    repository = root / "models"
    mixed = scaffold(om_mixed, repository, name=MIXED, runtime="emulator")
    wrap_template(mixed.model_py_path.parent)
    batch = scaffold(om, repository, name="batch", runtime="emulator", max_queue_delay_us=20000)
    wrap_template(batch.model_py_path.parent)
    copy = repository / "copy" / "1"
    copy.mkdir(parents=True)
    shutil.copy(om, copy / om.name)
    wrap_template(copy)
    vendored = scaffold(om, repository, name="vendored", runtime="emulator", vendor_runtime=True)
    wrap_template(vendored.model_py_path.parent)
    return repository


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[None]:
    previous = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(previous)


def reports(log: Path) -> list[dict[str, Any]]:
    """Every report in Triton's log. Stubs log concurrently, and Triton may put two stubs'
    messages on one line, so each report is decoded from its marker to the end of its JSON."""
    decoder = json.JSONDecoder()
    chunks = log.read_text(errors="replace").split(REPORT)[1:]
    return [decoder.raw_decode(chunk)[0] for chunk in chunks]


@pytest.fixture(scope="module", params=[PY39_NUMPY1, PY312_NUMPY2], ids=lambda spec: spec.name)
def spec(request: pytest.FixtureRequest) -> StubEnvSpec:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def env_python(spec: StubEnvSpec) -> Path:
    """The stub environment's python (built or reused: `stub_envs.stub_environment`)."""
    return stub_environment(spec)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
    env_python: Path,
    om_dynamic_batch: Path,
    om_mixed_types: Path,
) -> Iterator[tuple[Path, dict[str, list[dict[str, np.ndarray]]]]]:
    """Serve the models from the stub environment, send each concurrent batches of mixed
    sizes; the server log (complete once the server stopped), the feeds and every answer."""
    root = tmp_path_factory.mktemp("stub-env")
    repository = build_repository(root, om_dynamic_batch, om_mixed_types)
    log = root / "triton.log"
    rng = np.random.default_rng(7)
    batches = [rng.standard_normal((1 + i % 5, 16), dtype=np.float32) for i in range(12)]
    mixed_feeds = [
        {
            "x": rng.integers(-100, 100, (rows, 4), dtype=np.int32),
            "h": rng.standard_normal((rows, 4)).astype(np.float16),
        }
        for rows in (1, 3, 4, 2)
    ]
    answers: dict[str, list[dict[str, np.ndarray]]] = {}
    # The stub puts its working directory on sys.path: not this checkout's, or the package would
    # be imported from here rather than from the environment.
    with (
        working_directory(root),
        running_server(
            repository,
            env={"GE_PYTHON_BACKEND_ACL": "emulator"},
            log_path=log,
            stub_python=describe_python(env_python),
        ) as server,
    ):
        states = model_states(server)
        served_models = (*MODELS, MIXED)
        assert {name: states[name][0] for name in served_models} == dict.fromkeys(
            served_models, "READY"
        ), states

        def infer(model: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            with httpclient.InferenceServerClient(http_address(server)) as client:
                tensors = []
                for name, array in feeds.items():
                    tensor = httpclient.InferInput(
                        name, list(array.shape), np_to_triton_dtype(array.dtype)
                    )
                    tensor.set_data_from_numpy(array)
                    tensors.append(tensor)
                result = client.infer(model, tensors)
                return {
                    output["name"]: result.as_numpy(output["name"])
                    for output in result.get_response()["outputs"]
                }

        with ThreadPoolExecutor(6) as pool:
            for model in MODELS:
                answers[model] = list(pool.map(lambda x, m=model: infer(m, {"x": x}), batches))
            answers[MIXED] = list(pool.map(lambda feeds: infer(MIXED, feeds), mixed_feeds))
    answers["inputs"] = [{"x": x} for x in batches]
    answers["mixed_inputs"] = mixed_feeds
    yield log, answers


def test_the_environment_holds_only_what_the_stub_needs(
    spec: StubEnvSpec, env_python: Path
) -> None:
    probe = subprocess.run(
        [
            str(env_python),
            "-c",
            "import importlib.util, json, sys, numpy, google.protobuf as pb; print(json.dumps("
            "[sys.version_info[:2], numpy.__version__, pb.__version__, "
            "[m for m in ('tritonclient', 'grpc') if importlib.util.find_spec(m)]]))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    version, numpy_version, protobuf_version, tools = json.loads(probe.stdout)
    assert f"{version[0]}.{version[1]}" == spec.python_version
    expected_numpy = next(r for r in spec.requirements if r.startswith("numpy=="))
    assert numpy_version == expected_numpy.split("==")[1]
    assert protobuf_version == "3.20.3"
    assert tools == []


def test_models_serve_correct_answers(
    served: tuple[Path, dict[str, list[dict[str, np.ndarray]]]],
    om_dynamic_batch: Path,
    om_mixed_types: Path,
) -> None:
    _, answers = served
    for model in MODELS:
        for feeds, got in zip(answers["inputs"], answers[model]):
            expected = reference(om_dynamic_batch, feeds)
            assert set(got) == set(expected)
            for name in ("y", "z"):
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6)
    for feeds, got in zip(answers["mixed_inputs"], answers[MIXED]):
        expected = reference(om_mixed_types, feeds)
        assert set(got) == set(expected) == {"doubled", "positive", "squared"}
        for name, array in expected.items():
            assert got[name].dtype == array.dtype, name
            np.testing.assert_array_equal(got[name], array)


def test_every_stub_ran_the_environment_without_tritonclient_grpc_or_protobuf(
    served: tuple[Path, dict[str, list[dict[str, np.ndarray]]]],
    spec: StubEnvSpec,
    env_python: Path,
) -> None:
    log, _ = served
    found = reports(log)
    seen = {(report["model"], report["where"]) for report in found}
    for model in (*MODELS, MIXED):  # Triton auto-completes every model, config.pbtxt or not
        for where in ("auto_complete_config", "initialize", "finalize"):
            assert (model, where) in seen, (model, where, log.read_text()[-3000:])
    numpy_major = next(r for r in spec.requirements if r.startswith("numpy==")).split("==")[1][0]
    site = env_python.parent.parent.resolve()
    for report in found:
        assert report["forbidden"] == [], report
        assert report["python"] == spec.python_version, report
        assert report["numpy"].startswith(numpy_major + "."), report
        package = Path(report["package"]).resolve()
        if report["model"] == "vendored":
            assert "_ge_vendor" in package.parts, report
        else:
            assert site in package.parents, report


def test_the_vendored_runtime_is_exactly_what_the_stub_imports(
    tmp_path: Path, om_dynamic_batch: Path
) -> None:
    """Importing the stub's entry points, the device host a stub starts and the emulator from
    the vendored copy alone (in the Python 3.9 environment) loads every vendored module (the
    device host's `__main__` is run, not imported) and no other module of the package."""
    env_python = stub_environment(PY39_NUMPY1)
    result = scaffold(om_dynamic_batch, tmp_path / "m", runtime="emulator", vendor_runtime=True)
    assert result.vendor_dir is not None
    package = result.vendor_dir / "ge_python_backend"
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]);"
        "import ge_python_backend.triton, ge_python_backend.devicehost.host;"
        "import ge_python_backend.emulator.acl;"
        "print(json.dumps(sorted(m.__file__ for n, m in list(sys.modules.items())"
        " if n.split('.')[0] == 'ge_python_backend')))"
    )
    probe = subprocess.run(
        [str(env_python), "-c", code, str(result.vendor_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {Path(path) for path in json.loads(probe.stdout)}
    vendored = set(package.rglob("*.py"))
    assert imported == vendored - {package / "devicehost" / "__main__.py"}
    assert not any(package.joinpath(left).exists() for left in STUB_LEFT_OUT)


def test_a_command_needing_the_cli_extra_says_so(env_python: Path, tmp_path: Path) -> None:
    cli = env_python.parent / "ge-python-model"
    done = subprocess.run(
        [str(cli), "scaffold", "model.om", "--repository", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pip install 'ge-python-backend[cli]'" in done.stderr
    assert "Traceback" not in done.stderr
    listing = subprocess.run([str(cli), "--help"], capture_output=True, text=True)
    assert listing.returncode == 0, listing.stderr  # every command is listed, none crashes
    assert "scaffold" in listing.stdout and "[cli]" in listing.stdout


def test_installing_the_package_keeps_cann_protobuf(tmp_path: Path) -> None:
    """`pip install` of the wheel, dependencies resolved, into a virtualenv holding protobuf
    3.20.3 leaves it at 3.20.3 (offline: from a wheelhouse kept next to the environments)."""
    wheel = build_wheel()
    spec = PY39_NUMPY1
    interpreter = Path(describe_python(stub_environment(spec)).executable)
    wheelhouse = CACHE / "wheelhouse-py39"
    pins = ["protobuf==3.20.3", next(r for r in spec.requirements if r.startswith("numpy"))]
    if not (wheelhouse / ".complete").is_file():
        subprocess.run(
            [str(interpreter), "-m", "pip", "download", "-q", "-d", str(wheelhouse), *pins],
            check=True,
        )
        (wheelhouse / ".complete").write_text("\n".join(pins))
    target = tmp_path / "cann-python"
    subprocess.run(
        [
            str(interpreter),
            "-c",
            "import sys, venv; venv.create(sys.argv[1], with_pip=True)",
            str(target),
        ],
        check=True,
    )
    python = str(target / "bin" / "python")
    offline = ["-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse)]
    subprocess.run([python, *offline, "protobuf==3.20.3"], check=True)
    subprocess.run([python, *offline, str(wheel)], check=True)
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    versions = {item["name"].lower(): item["version"] for item in json.loads(listed.stdout)}
    assert versions["protobuf"] == "3.20.3"
    assert set(versions) - {"pip", "setuptools", "wheel"} == {
        "protobuf",
        "numpy",
        "ge-python-backend",
    }
    subprocess.run([python, "-m", "pip", "check"], check=True)


def test_doctor_checks_the_stub_environment(env_python: Path, spec: StubEnvSpec) -> None:
    python = describe_python(env_python)
    assert python.version == spec.python_version and python.is_virtualenv
    assert python.libpython is not None and python.libpython.is_file()
    found = check_stub_environment(python)
    assert found.status == OK, found
    assert "protobuf 3.20.3" in found.detail and "no pyACL" in found.detail
    bundled = find_server(stub_version=python.version)
    assert check_stub_python(bundled, "", python=python).status == OK
    other = find_server(stub_version="3.11" if spec.python_version != "3.11" else "3.10")
    mismatch = check_stub_python(other, "", python=python)
    assert mismatch.status == FAIL and f"Python {spec.python_version}" in mismatch.detail


def test_doctor_fails_a_stub_python_without_the_package(tmp_path: Path) -> None:
    base = describe_python(stub_environment(PY39_NUMPY1)).libpython
    assert base is not None
    interpreter = base.parent.parent / "bin" / "python3"  # the base 3.9 behind the environment
    empty = tmp_path / "empty"
    subprocess.run([str(interpreter), "-m", "venv", "--without-pip", str(empty)], check=True)
    found = check_stub_environment(describe_python(empty / "bin" / "python"))
    assert found.status == FAIL
    assert "No module named 'numpy'" in found.detail
    assert "--no-deps ge-python-backend" in found.fix


def test_doctor_warns_when_protobuf_is_not_cann_s() -> None:
    """This checkout's own environment has the tools' protobuf, not CANN's 3.20."""
    import google.protobuf

    assert not google.protobuf.__version__.startswith("3.20.")
    found = check_stub_environment(describe_python())
    assert found.status == WARN and "protobuf 3.20.x" in found.detail


def test_the_runtime_and_emulator_tests_pass_under_numpy_2(tmp_path: Path) -> None:
    """The runtime's and the emulator's tests in Python 3.12 with numpy 2, importing the package
    installed there (run from another directory, so not this checkout's copy)."""
    python = stub_environment(PY312_NUMPY2_SUITE)
    located = subprocess.run(
        [
            str(python),
            "-c",
            "import ge_python_backend, numpy; print(ge_python_backend.__file__, numpy.__version__)",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    package, numpy_version = located.stdout.split()
    assert python.parent.parent.resolve() in Path(package).resolve().parents
    assert numpy_version.startswith("2.")
    files = [str(ROOT / "tests" / name) for name in RUNTIME_TESTS]
    done = subprocess.run(
        [
            str(python.parent / "pytest"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(ROOT),
            "-c",
            str(ROOT / "pyproject.toml"),
            *files,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-500:]
