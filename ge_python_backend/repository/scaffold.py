"""Write a Triton model directory serving one `.om`, or add a version to one (`scaffold`).

```
<repository>/<name>/config.pbtxt
<repository>/<name>/<labels file>           only with labels: the classifier output's labels
<repository>/<name>/<version>/model.py       copy of model_templates/model.py
<repository>/<name>/<version>/<file>.om
<repository>/<name>/<version>/<file>.om.sha256   its SHA-256, checked before every load
<repository>/<name>/<version>/_ge_vendor/ge_python_backend/   only with vendor_runtime
```
The model's inputs, outputs and gears come from the `.om` itself (opened with pyACL or the
emulator), or from `NAME:TYPE:DIMS` declarations when the `.om` cannot be opened on this machine.
Each version holds its own `.om` and checksum, so versions with different `.om` files serve side
by side; adding a version refuses an `.om` that does not fit the model's config.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2

import ge_python_backend
from ge_python_backend.ascend import GearKind
from ge_python_backend.errors import GeBackendError, UserError, command_line_message
from ge_python_backend.modelinfo import GearInfo, TensorSpec
from ge_python_backend.repository.autocomplete import complete_version
from ge_python_backend.repository.config import (
    ModelConfig,
    build_model_config,
    check_model_name,
    config_data_type,
    config_from_view,
    config_text,
    config_view,
    load_model_config,
    parse_version_policy,
    read_labels,
    set_label_file,
    write_model_config,
)
from ge_python_backend.repository.model_files import model_template, open_session
from ge_python_backend.repository.parameters import (
    DEFAULT_EXECUTE_TIMEOUT_MS,
    DEFAULT_PIPELINE_DEPTH,
    ModelParameters,
    parse_device_ids,
    parse_input_shape_order,
)
from ge_python_backend.repository.triton_config import (
    DEFAULT_MAX_QUEUE_DELAY_US,
    TritonConfig,
    compare_config_with_session,
)
from ge_python_backend.repository.versions import version_dirs, write_checksum
from ge_python_backend.runtime import om_runtime
from ge_python_backend.runtime.checksum import file_sha256
from ge_python_backend.runtime.dvpp import served_inputs

VENDOR_DIR = "_ge_vendor"
# What Triton's stub imports from the package (model.py's imports and theirs, the emulator
# included: it is imported only when `acl_runtime`, $GE_PYTHON_BACKEND_ACL or an emulator .om
# choose it), which
# `--vendor-runtime` copies; the tools (commands/, tools/, config.pbtxt's protobuf builder, the
# server and client) and the self-test are left out.
STUB_FILES = (
    "__init__.py",
    "aipp.py",
    "allocator.py",
    "ascend.py",
    "atc_onnx.py",
    "environment.py",
    "errors.py",
    "modelinfo.py",
    "processes.py",
    "serving.py",
    "devicehost/*.py",
    "triton/*.py",
    "runtime/*.py",
    "emulator/**/*.py",
    "repository/__init__.py",
    "repository/autocomplete.py",
    "repository/parameters.py",
    "repository/triton_config.py",
    "repository/versions.py",
)
STUB_LEFT_OUT = ("runtime/selftest.py", "runtime/selftest_models.py", "triton/testing.py")


@dataclasses.dataclass(frozen=True)
class ScaffoldResult:
    """What `scaffold` wrote (or, for a dry run, would write)."""

    model_dir: Path
    config_path: Path
    model_py_path: Path
    om_path: Path  # the copy inside the version directory
    config: ModelConfig
    config_text: str
    om_sha256: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    gears: GearInfo
    vendor_dir: Path | None = None
    labels_path: Path | None = None  # the label file's copy in the model directory
    written: bool = False
    added_version: bool = False  # a version added to an existing model (its config kept)


def parse_tensor_declaration(text: str) -> TensorSpec:
    """`"images:FP32:-1,3,224,224"` -> TensorSpec (TYPE is a Triton name, e.g. FP16, INT64)."""
    parts = text.split(":")
    if len(parts) != 3 or not parts[0]:
        raise UserError(f"tensor {text!r} must be NAME:TYPE:DIMS, e.g. images:FP32:-1,3,224,224")
    name, dtype, dims = parts
    dtype = dtype.upper().removeprefix("TYPE_")
    dtype = "BYTES" if dtype == "STRING" else dtype
    config_data_type(dtype)  # refuses unknown types
    try:
        shape = tuple(int(dim) for dim in dims.split(","))
    except ValueError:
        raise UserError(f"tensor {text!r}: DIMS must be comma-separated integers") from None
    if any(dim == 0 or dim < -1 for dim in shape):
        raise UserError(f"tensor {text!r}: dims must be positive or -1")
    return TensorSpec.declared(name, dtype, shape)


def declared_model(
    inputs: Sequence[str], outputs: Sequence[str], max_batch_size: int | None
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...], GearInfo]:
    """Inputs, outputs and gears from `NAME:TYPE:DIMS` declarations.

    Without `max_batch_size` the model is static (no batch axis, full shapes in the config).
    With it, axis 0 of every tensor is the batch axis (-1 or `max_batch_size`) and the model has
    the one batch gear `max_batch_size`.
    """
    if not inputs or not outputs:
        raise UserError("declaring the model needs both --input and --output")
    declared_in = tuple(parse_tensor_declaration(text) for text in inputs)
    declared_out = tuple(parse_tensor_declaration(text) for text in outputs)
    if max_batch_size is None:
        return declared_in, declared_out, GearInfo()
    if max_batch_size < 1:
        raise UserError(f"--max-batch-size must be >= 1, got {max_batch_size}")
    for tensor in (*declared_in, *declared_out):
        if tensor.shape[0] not in (-1, max_batch_size):
            raise UserError(
                f"tensor {tensor.name!r}: with --max-batch-size {max_batch_size} axis 0 is the "
                f"batch axis and must be -1 or {max_batch_size}, got {tensor.shape[0]}"
            )
    gears = GearInfo(GearKind.BATCH, True, (max_batch_size,), max_batch=max_batch_size)
    return declared_in, declared_out, gears


def describe_om(
    om_path: Path,
    runtime: str | None,
    input_shape_order: Sequence[str] | None = None,
    max_output_bytes: int | None = None,
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...], GearInfo]:
    """Inputs, outputs and gears read from the `.om` by opening a runtime Session."""
    try:
        with open_session(
            om_path, runtime, input_shape_order, max_output_bytes=max_output_bytes
        ) as session:
            return tuple(session.inputs), tuple(session.outputs), session.gears
    except UserError as exc:
        raise UserError(
            f"{command_line_message(exc)} (where the .om cannot be opened, declare the model with "
            "--input/--output NAME:TYPE:DIMS)"
        ) from None


@contextlib.contextmanager
def _replacing_directory(target: Path, overwrite: bool) -> Iterator[Path]:
    """Yield a fresh directory that replaces `target` when the block succeeds."""
    if target.exists() and not overwrite:
        raise UserError(f"{target} already exists; pass --overwrite to replace it")
    build = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    try:
        yield build
        if target.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            target.rename(trash / target.name)
            build.rename(target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            build.rename(target)
    finally:
        shutil.rmtree(build, ignore_errors=True)


def _ordinary_permissions(root: Path, dir_mode: int) -> None:
    """Directories `dir_mode`, files the same without execute bits; never group/world-writable.

    `dir_mode` is what the umask left of rwxr-xr-x on a directory just made (the build directory
    itself comes from mkdtemp, which makes it private).
    """
    dir_mode &= 0o755
    root.chmod(dir_mode)
    for path in root.rglob("*"):
        path.chmod(dir_mode if path.is_dir() else dir_mode & 0o644)


def _vendor_package(destination: Path) -> None:
    """Copy what the stub imports of the installed `ge_python_backend` (`STUB_FILES`) to
    `destination`."""
    source = Path(ge_python_backend.__file__).parent
    for pattern in STUB_FILES:
        for path in sorted(source.glob(pattern)):
            relative = path.relative_to(source)
            if relative.as_posix() in STUB_LEFT_OUT or "__pycache__" in relative.parts:
                continue
            (destination / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, destination / relative)


def scaffold(
    om_path: str | os.PathLike[str],
    repository: str | os.PathLike[str],
    *,
    name: str | None = None,
    version: int = 1,
    instances: int = 1,
    device_ids: Sequence[int] | str = (0,),
    max_batch_size: int | None = None,
    max_queue_delay_us: int = DEFAULT_MAX_QUEUE_DELAY_US,
    max_queue_size: int = 0,
    queue_timeout_us: int = 0,
    runtime: str | None = None,
    pipeline_depth: int = DEFAULT_PIPELINE_DEPTH,
    execute_timeout_ms: int = DEFAULT_EXECUTE_TIMEOUT_MS,
    input_shape_order: Sequence[str] | str | None = None,
    pipeline_min_device_us: int | None = None,
    max_output_bytes: int | None = None,
    device_host: bool | None = None,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    dry_run: bool = False,
    overwrite: bool = False,
    vendor_runtime: bool = False,
    warmup: bool = True,
    version_policy: str | None = None,
    image_input: str | None = None,
    image_resize: str | None = None,
    labels: str | os.PathLike[str] | None = None,
) -> ScaffoldResult:
    """Write `<repository>/<name>/` serving `om_path` (see the module docstring).

    `name` defaults to the `.om` file's stem. The model directory is built next to its final
    place and renamed in, so a failure leaves nothing half-written; an existing directory is
    replaced only with `overwrite`. `dry_run` writes nothing and returns the config it would
    write. `device_ids`, `runtime`, `pipeline_depth`, `execute_timeout_ms`,
    `input_shape_order`, `pipeline_min_device_us`, `max_output_bytes` and `device_host` (None:
    left out, its default applies) become the config's parameters (`ModelParameters`: the rules
    and messages of the model instance); `runtime` also reads the `.om`, and without it the
    runtime its container is made for does both (`runtime.om_runtime`). `warmup=False` leaves
    out `model_warmup` (when a warmup request fails, Triton 2.51 sometimes crashes with SIGSEGV
    instead of marking the model UNAVAILABLE). `version_policy` (`latest:K`, `all`,
    `specific:1,3`) becomes Triton's `version_policy`. `image_input` (with `image_resize`) names
    the YUV420SP_U8 AIPP input served as JPEG files: the config takes it as `TYPE_STRING` `[1]`
    and has no `model_warmup` (Triton's generated warmup data is no JPEG). `labels` is a label
    file (one label a line) copied into the model directory and named as the `label_filename`
    of the output with one value per label (`config.set_label_file`).

    When the model directory exists and has no version `version`, the version is added to it
    (without `overwrite`): the `.om` must fit the model's config (its inputs and outputs; for a
    model without config.pbtxt, the config auto-complete makes of its highest version), the
    config is kept (model-level options, `labels` included, are not applied) and only
    `version_policy` is written
    into it. The version directory is built next to its place and renamed in.
    """
    source = Path(om_path)
    if not source.is_file():
        raise UserError(f".om file {source} does not exist")
    try:
        with open(source, "rb"):
            pass
    except OSError as exc:
        raise UserError(f"cannot read .om file {source}: {exc.strerror or exc}") from None
    if version < 1:
        raise UserError(f"version must be >= 1, got {version}")
    model_name = check_model_name(name if name is not None else source.stem)
    sha256 = file_sha256(source)
    policy = parse_version_policy(version_policy) if version_policy is not None else None
    parameters = ModelParameters(
        device_ids=parse_device_ids(device_ids),
        acl_runtime=om_runtime(source, runtime),
        pipeline_depth=pipeline_depth,
        execute_timeout_ms=execute_timeout_ms,
        input_shape_order=parse_input_shape_order(input_shape_order),
        pipeline_min_device_us=pipeline_min_device_us,
        max_output_bytes=max_output_bytes,
        image_input=image_input,
        image_resize=image_resize,
        device_host=device_host,
    )
    specs_in: Sequence[TensorSpec]
    specs_out: Sequence[TensorSpec]
    gears: GearInfo
    if inputs or outputs:
        specs_in, specs_out, gears = declared_model(inputs or (), outputs or (), max_batch_size)
    else:
        specs_in, specs_out, gears = describe_om(
            source, runtime, parameters.input_shape_order, parameters.max_output_bytes
        )
    if image_input is not None:
        try:
            specs_in = served_inputs(specs_in, image_input)
        except ValueError as exc:
            raise UserError(f"{source}: {exc}") from None
    root = Path(repository)
    model_dir = root / model_name
    if model_dir.is_symlink():
        raise UserError(
            f"{model_dir} is a symbolic link; refusing to write through or replace it "
            "(remove the link or choose another --name)"
        )
    version_dir = model_dir / str(version)
    if model_dir.exists() and not overwrite:
        if version_dir.exists():
            raise UserError(
                f"{version_dir} already exists; choose another --version to add a version, or "
                "pass --overwrite to replace the whole model directory"
            )
        return _add_version(
            source,
            version_dir,
            sha256,
            (tuple(specs_in), tuple(specs_out), gears),
            runtime=runtime,
            policy=policy,
            dry_run=dry_run,
            vendor_runtime=vendor_runtime,
        )
    config = build_model_config(
        model_name,
        specs_in,
        specs_out,
        gears,
        parameters,
        instances=instances,
        max_batch_size=max_batch_size,
        max_queue_delay_us=max_queue_delay_us,
        max_queue_size=max_queue_size,
        queue_timeout_us=queue_timeout_us,
        warmup=warmup and image_input is None,
    )
    if policy is not None:
        config.version_policy.CopyFrom(policy)
    labels_source = None if labels is None else _labels_file(Path(labels))
    if labels_source is not None:
        set_label_file(config, labels_source.name, len(read_labels(labels_source)))
    result = ScaffoldResult(
        model_dir=model_dir,
        config_path=model_dir / "config.pbtxt",
        model_py_path=version_dir / "model.py",
        om_path=version_dir / source.name,
        config=config,
        config_text=config_text(config),
        om_sha256=sha256,
        inputs=tuple(specs_in),
        outputs=tuple(specs_out),
        gears=gears,
        vendor_dir=version_dir / VENDOR_DIR if vendor_runtime else None,
        labels_path=None if labels_source is None else model_dir / labels_source.name,
    )
    if dry_run:
        return result
    template = model_template()
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    with _replacing_directory(model_dir, overwrite) as build:
        (build / "config.pbtxt").write_text(result.config_text, encoding="utf-8")
        if labels_source is not None:
            shutil.copyfile(labels_source, build / labels_source.name)
        _write_version(build / str(version), source, source.name, sha256, template, vendor_runtime)
        _ordinary_permissions(build, stat.S_IMODE((build / str(version)).stat().st_mode))
    return dataclasses.replace(result, written=True)


def _labels_file(path: Path) -> Path:
    """`path` if its name can sit beside config.pbtxt and the version directories."""
    if path.name == "config.pbtxt" or path.name.isdigit() or path.name.startswith("."):
        raise UserError(
            f"label file {path}: its name {path.name!r} is taken in a model directory (by "
            "config.pbtxt or a version directory); rename it"
        )
    return path


def _write_version(
    target: Path, source: Path, om_name: str, sha256: str, template: str, vendor: bool
) -> None:
    """A version directory: model.py, the `.om` as `om_name`, its checksum, the vendored
    runtime."""
    target.mkdir(mode=0o755)
    (target / "model.py").write_text(template, encoding="utf-8")
    shutil.copyfile(source, target / om_name)
    write_checksum(target / om_name, sha256)
    if vendor:
        _vendor_package(target / VENDOR_DIR / "ge_python_backend")


def _model_config(model_dir: Path, runtime: str | None) -> tuple[ModelConfig, bool]:
    """The config of an existing model and whether it has a config.pbtxt; without one, the
    config auto-complete makes of its highest version."""
    path = model_dir / "config.pbtxt"
    if path.exists():
        return load_model_config(path), True
    versions = version_dirs(model_dir)
    if not versions:
        raise UserError(
            f"{model_dir} exists but has neither config.pbtxt nor a version directory; remove "
            "it or pass --overwrite"
        )
    try:
        completion = complete_version(
            TritonConfig(name=model_dir.name, backend="python"), versions[-1], runtime
        )
    except GeBackendError as exc:
        raise UserError(
            f"cannot read the config of model {model_dir.name!r} from its version "
            f"{versions[-1].name}: {exc}"
        ) from None
    return config_from_view(completion.config), False


def _add_version(
    source: Path,
    version_dir: Path,
    sha256: str,
    described: tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...], GearInfo],
    *,
    runtime: str | None,
    policy: model_config_pb2.ModelVersionPolicy | None,
    dry_run: bool,
    vendor_runtime: bool,
) -> ScaffoldResult:
    """Add `version_dir` serving `source` to its existing model (see `scaffold`)."""
    model_dir = version_dir.parent
    config, has_file = _model_config(model_dir, runtime)
    specs_in, specs_out, gears = described
    view = config_view(config)
    problems = compare_config_with_session(view, specs_in, specs_out, gears)
    if problems:
        raise UserError(
            f"{source} does not fit model {model_dir.name!r} (its config.pbtxt"
            f"{'' if has_file else ', as auto-complete makes it'}): " + "; ".join(problems)
        )
    # A model-level om_file names the .om of every version: the copy takes that name.
    om_name = ModelParameters.from_config(view).om_file or source.name
    written = config if has_file else ModelConfig(backend="python")
    if policy is not None:
        written.version_policy.CopyFrom(policy)
    result = ScaffoldResult(
        model_dir=model_dir,
        config_path=model_dir / "config.pbtxt",
        model_py_path=version_dir / "model.py",
        om_path=version_dir / om_name,
        config=config,
        config_text=config_text(written),
        om_sha256=sha256,
        inputs=specs_in,
        outputs=specs_out,
        gears=gears,
        vendor_dir=version_dir / VENDOR_DIR if vendor_runtime else None,
        added_version=True,
    )
    if dry_run:
        return result
    build = Path(tempfile.mkdtemp(prefix=f".{version_dir.name}.new-", dir=model_dir))
    try:
        _write_version(build / "v", source, om_name, sha256, model_template(), vendor_runtime)
        _ordinary_permissions(build / "v", stat.S_IMODE(model_dir.stat().st_mode))
        (build / "v").rename(version_dir)
    finally:
        shutil.rmtree(build, ignore_errors=True)
    if policy is not None:
        # Replaced in one rename, so Triton never reads half a file.
        staged = write_model_config(written, build.with_suffix(".pbtxt"))
        staged.rename(model_dir / "config.pbtxt")
    return dataclasses.replace(result, written=True)
