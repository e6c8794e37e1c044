"""Shared fixtures: emulator `.om` files compiled once per test session.

Each fixture returns the `pathlib.Path` of an `.om`; `onnx_models.onnx_path_of(om)` gives the ONNX
it was compiled from (to compare with onnxruntime). Models are in `tests/onnx_models.py`. They are
compiled with `--precision_mode must_keep_origin_dtype` (float32, as their ONNX computes).

* `om_static`: mlp (`x` FLOAT[4,16] -> `y` FLOAT[4,8], `z` FLOAT[4,1]), static batch 4.
* `om_dynamic_batch`: mlp with `x:-1,16`, batch gears 1,2,4,8.
* `om_wide`: wide_mlp (`x` FLOAT[-1,16] -> `y` FLOAT[-1,8], 15.4 MB of weights: a load that
  fills a small device), batch gears 1,2,4,8.
* `om_add_mul`: add_mul (`a`, `b` FLOAT[-1,4] -> `sum`, `product`), batch gears 1,2,4,8.
* `om_mixed_types`: mixed_types (`x` INT32, `h` FLOAT16 [-1,4] -> `doubled` INT32,
  `positive` BOOL, `squared` FLOAT16), batch gears 1,4.
* `om_hw`: conv (`image` FLOAT[1,3,-1,-1] -> `features` FLOAT[1,8]), HW gears 16x16 and 32x32.
* `om_aipp_yuv`, `om_aipp_rgb`, `om_aipp_dynamic`: conv with `image:2,3,8,8` and the AIPP
  configs `onnx_models.AIPP_YUV420SP` (12x10 YUV420SP_U8 cropped to 8x8, CSC, mean/var),
  `AIPP_RGB888` (10x10 RGB888_U8 cropped to 8x8, mean/min/var) and `AIPP_DYNAMIC`
  (max_src_image_size 600); the config file is `<om>.aipp.cfg` beside the `.om`.
* `om_dims`: dims model (`input_ids`, `attention_mask` INT64[1,-1] -> `hidden` FLOAT[1,-1,4]),
  input format ND, dims gears (8,8), (16,16), (32,32): one value per -1 dim, so S is 8, 16
  or 32 for both inputs.

Every test session models a host of its own (`GE_EMULATOR_HOST_DIR` in a session directory,
inherited by the servers and processes it starts): its emulated devices (process slots, memory,
engines under a timing model) are shared only by this session's processes, not with another test
run or a benchmark on the same machine; so are the runtime's placement records
(`GE_PYTHON_BACKEND_RUN_DIR`). Under pytest-xdist (`make test`, `make check`) each worker is a
session of its own with its own base temporary directory (`.../popen-gw<N>/`), so one worker's
devices, engine files and timing are never another's.

A test that starts tritonserver, itself or through a process it runs (`serve`, an example), is
marked `e2e`: `make check` runs the others (`-m "not e2e"`), which must start none. The autouse
fixture `e2e_marked_if_it_starts_a_server` fails an unmarked test that does.

And two fixtures of the emulated pyACL's process-wide state, for the tests that call `acl`
directly (helpers for them are in `tests/emulator_helpers.py`):

* `clean_acl`: the test starts and ends with acl not initialised and no faults or timing
  installed; a module uses it for every test with
  `pytestmark = pytest.mark.usefixtures("clean_acl")`.
* `ctx`: acl.init + set_device(0); the default context (`clean_acl` finalizes).
* `emulator_run_mode`: the test runs twice, with the emulator in host mode (ACL_HOST, EP) and in
  device mode (ACL_DEVICE, RC: `GE_EMULATOR_RUN_MODE=device`); the value is "host" or "device".
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

try:
    import psutil
except ImportError:  # the stub environments run the runtime tests without the dev extra
    psutil = None

sys.path.insert(0, str(Path(__file__).parent))

import onnx_models  # noqa: E402  (needs the sys.path entry above)

from ge_python_backend.emulator import acl, set_faults, set_timing  # noqa: E402
from ge_python_backend.emulator.omfile import compile_onnx  # noqa: E402
from ge_python_backend.emulator.timing import HOST_DIR_ENV  # noqa: E402
from ge_python_backend.runtime.placement import RUN_DIR_ENV  # noqa: E402


def _compile(
    factory: pytest.TempPathFactory,
    build: Callable[[Path], Path],
    name: str,
    **flags: str,
) -> Path:
    directory = factory.mktemp(name)
    onnx_path = build(directory / f"{name}.onnx")
    return compile_onnx(onnx_path, directory / name, **{**onnx_models.KEEP_FP32, **flags})


def _compile_aipp(factory: pytest.TempPathFactory, name: str, config: str) -> Path:
    directory = factory.mktemp(name)
    onnx_path = onnx_models.build_conv(directory / f"{name}.onnx")
    config_path = directory / f"{name}.om.aipp.cfg"
    config_path.write_text(config)
    return compile_onnx(
        onnx_path,
        directory / name,
        input_shape="image:2,3,8,8",
        insert_op_conf=config_path,
        **onnx_models.KEEP_FP32,
    )


@pytest.fixture(scope="session")
def om_aipp_yuv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile_aipp(tmp_path_factory, "aipp_yuv", onnx_models.AIPP_YUV420SP)


@pytest.fixture(scope="session")
def om_aipp_rgb(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile_aipp(tmp_path_factory, "aipp_rgb", onnx_models.AIPP_RGB888)


@pytest.fixture(scope="session")
def om_aipp_dynamic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile_aipp(tmp_path_factory, "aipp_dynamic", onnx_models.AIPP_DYNAMIC)


@pytest.fixture(scope="session")
def om_nonzero(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """NonZero: a data-dependent output and a scalar output (onnx_models.build_nonzero)."""
    return _compile(tmp_path_factory, onnx_models.build_nonzero, "nonzero")


@pytest.fixture(scope="session")
def om_static(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(tmp_path_factory, onnx_models.build_mlp, "mlp_static", input_shape="x:4,16")


@pytest.fixture(scope="session")
def om_dynamic_batch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(
        tmp_path_factory,
        onnx_models.build_mlp,
        "mlp_batch",
        input_shape="x:-1,16",
        dynamic_batch_size="1,2,4,8",
    )


@pytest.fixture(scope="session")
def om_wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(
        tmp_path_factory,
        onnx_models.build_wide_mlp,
        "wide",
        input_shape="x:-1,16",
        dynamic_batch_size="1,2,4,8",
    )


@pytest.fixture(scope="session")
def om_add_mul(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(
        tmp_path_factory,
        onnx_models.build_add_mul,
        "add_mul",
        input_shape="a:-1,4;b:-1,4",
        dynamic_batch_size="1,2,4,8",
    )


@pytest.fixture(scope="session")
def om_mixed_types(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(
        tmp_path_factory,
        onnx_models.build_mixed_types,
        "mixed_types",
        input_shape="x:-1,4;h:-1,4",
        dynamic_batch_size="1,4",
    )


@pytest.fixture(scope="session")
def om_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CNN classifier: NCHW FP32 `image` [N,3,16,16] -> `logits` [N,10], batch gears 1,2,4."""
    return _compile(
        tmp_path_factory,
        onnx_models.build_classifier,
        "classifier",
        input_shape="image:-1,3,16,16",
        dynamic_batch_size="1,2,4",
    )


@pytest.fixture(scope="session")
def om_hw(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(
        tmp_path_factory,
        onnx_models.build_conv,
        "conv_hw",
        input_shape="image:1,3,-1,-1",
        dynamic_image_size="16,16;32,32",
    )


@pytest.fixture(scope="session")
def om_b_first(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The concat model with --input_shape naming b before a (the graph lists a first)."""
    return _compile(
        tmp_path_factory,
        onnx_models.build_concat,
        "concat",
        input_shape="b:1,-1;a:1,-1",
        dynamic_dims="4,8;8,16",
    )


@pytest.fixture(scope="session")
def om_dims(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _compile(
        tmp_path_factory,
        onnx_models.build_dims_model,
        "dims",
        input_shape="input_ids:1,-1;attention_mask:1,-1",
        dynamic_dims="8,8;16,16;32,32",
        input_format="ND",
    )


@pytest.fixture(scope="session", autouse=True)
def emulator_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This session's emulated host: the directory of its shared device engines and ledgers, and
    the runtime's placement records of what its processes hold on each device."""
    directory = tmp_path_factory.mktemp("emulator-host")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(HOST_DIR_ENV, str(directory))
        patch.setenv(RUN_DIR_ENV, str(tmp_path_factory.mktemp("placements")))
        yield directory


SERVER_PROCESS = "tritonserver"


def _started_servers(stop: threading.Event, found: list[str]) -> None:
    """Until `stop` is set, look every 0.1 s for a tritonserver among this process's
    descendants; the first one's command line goes to `found`."""
    me = psutil.Process()
    while True:
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # it may have ended meanwhile
                if child.name() == SERVER_PROCESS:
                    found.append(" ".join(child.cmdline()[:2]))
                    return
        if stop.wait(0.1):
            return


@pytest.fixture(autouse=True)
def e2e_marked_if_it_starts_a_server(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test not marked `e2e` fails if a tritonserver ran under it (`make check` selects the
    tests that are not, to answer in a minute without starting any server)."""
    if request.node.get_closest_marker("e2e") is not None or psutil is None:
        yield
        return
    stop = threading.Event()
    found: list[str] = []
    watcher = threading.Thread(target=_started_servers, args=(stop, found), daemon=True)
    watcher.start()
    yield
    stop.set()
    watcher.join()
    if found:
        pytest.fail(f"this test started {found[0]}: mark it @pytest.mark.e2e", pytrace=False)


@pytest.fixture
def clean_acl() -> Iterator[None]:
    """Each test starts and ends with acl not initialised and no faults or timing installed
    (another test module may have left the process-wide acl.init of the runtime layer)."""
    acl.finalize()
    set_faults(None)
    set_timing(None)
    yield
    acl.finalize()
    set_faults(None)
    set_timing(None)


@pytest.fixture(params=["host", "device"])
def emulator_run_mode(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """Host or device (RC) mode. The emulator reads the mode at acl.init, so an acl initialised
    in the other mode is finalized first (the runtime initialises again when it next opens a
    device), and a test in device mode finalizes after itself, back to host mode for others."""
    mode: str = request.param
    monkeypatch.setenv("GE_EMULATOR_RUN_MODE", mode)
    in_force, _ = acl.rt.get_run_mode()  # the initialised mode, else the environment's
    if in_force != {"host": 1, "device": 0}[mode]:
        acl.finalize()
    yield mode
    if mode == "device":
        acl.finalize()


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run directory of the test's own (not made: a device host makes it, mode 0700), whose
    device hosts stop 0.5 s after their last stub left."""
    directory = tmp_path / "run"
    monkeypatch.setenv(RUN_DIR_ENV, str(directory))
    monkeypatch.setenv("GE_DEVICE_HOST_IDLE_EXIT_S", "0.5")
    return directory


@pytest.fixture
def ctx(clean_acl: None) -> int:
    """acl.init + set_device(0); returns the default context (clean_acl finalizes)."""
    assert acl.init() == 0
    assert acl.rt.set_device(0) == 0
    context, ret = acl.rt.get_context()
    assert ret == 0
    return int(context)
