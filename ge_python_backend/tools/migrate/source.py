"""The source repository of a migration: its models, their format, versions and files.

It is only read, never written. Each model is classified as Triton classifies it: by the
config's `platform` or `backend`, and by the model file in its version directories when the
config is silent (`model.onnx`, `model.plan`, `model.pt`, `model.savedmodel/`,
`model.graphdef`, `model.py`).
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import hashlib
import logging
from pathlib import Path

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig

from ge_python_backend.errors import GeBackendError, UserError
from ge_python_backend.repository.config import load_model_config
from ge_python_backend.repository.versions import version_dirs
from ge_python_backend.runtime.checksum import file_sha256

logger = logging.getLogger(__name__)

# Modules only a GPU host has (or that only do work on a GPU): a Python model importing one
# needs rewriting for the NPU host.
GPU_ONLY_MODULES = (
    "cupy",
    "pycuda",
    "tensorrt",
    "torch_tensorrt",
    "torch.cuda",
    "numba.cuda",
    "cudf",
    "cuml",
    "cugraph",
    "nvidia.dali",
    "pynvml",
    "tritonclient.utils.cuda_shared_memory",
)


class SourceFormat(str, enum.Enum):
    """A source model's format, named by Triton's platform (the backend for Python)."""

    ONNX = "onnxruntime_onnx"
    TENSORRT = "tensorrt_plan"
    TORCHSCRIPT = "pytorch_libtorch"
    SAVEDMODEL = "tensorflow_savedmodel"
    GRAPHDEF = "tensorflow_graphdef"
    PYTHON = "python"
    ENSEMBLE = "ensemble"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return str(self.value)

    @property
    def default_file(self) -> str | None:
        """The file (or directory) Triton loads from a version directory by default."""
        return _DEFAULT_FILES.get(self)

    @property
    def converted(self) -> bool:
        """ONNX is compiled with ATC."""
        return self == SourceFormat.ONNX

    @property
    def copied(self) -> bool:
        """Python models and ensembles run on Triton's CPU side and are copied as they are."""
        return self in (SourceFormat.PYTHON, SourceFormat.ENSEMBLE)


_DEFAULT_FILES = {
    SourceFormat.ONNX: "model.onnx",
    SourceFormat.TENSORRT: "model.plan",
    SourceFormat.TORCHSCRIPT: "model.pt",
    SourceFormat.SAVEDMODEL: "model.savedmodel",
    SourceFormat.GRAPHDEF: "model.graphdef",
    SourceFormat.PYTHON: "model.py",
}
_PLATFORMS = {fmt.value: fmt for fmt in SourceFormat if fmt != SourceFormat.PYTHON}
_BACKENDS = {
    "onnxruntime": SourceFormat.ONNX,
    "tensorrt": SourceFormat.TENSORRT,
    "pytorch": SourceFormat.TORCHSCRIPT,
    "python": SourceFormat.PYTHON,
}
# Triton's TensorFlow backend serves both formats: the files tell which.
_TENSORFLOW_FORMATS = (SourceFormat.SAVEDMODEL, SourceFormat.GRAPHDEF)


@dataclasses.dataclass(frozen=True)
class SourceVersion:
    """One version directory: the model file Triton loads from it (None: not there) and the
    SHA-256 of that file (of every file under it, for a directory)."""

    number: int
    path: Path
    model_file: Path | None
    sha256: str | None


@dataclasses.dataclass(frozen=True)
class SourceModel:
    """One model directory of the source repository."""

    name: str
    path: Path
    config: ModelConfig  # config.pbtxt as parsed (empty but its name when there is none)
    has_config: bool
    format: SourceFormat
    versions: tuple[SourceVersion, ...]
    warnings: tuple[str, ...] = ()
    error: str | None = None  # why the directory cannot be read (its config, say)


def model_dirs(repository: Path) -> list[Path]:
    """The model directories of `repository`, in name order (hidden directories skipped)."""
    if not repository.is_dir():
        raise UserError(f"source repository {repository} is not a directory")
    return [p for p in sorted(repository.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def discover(repository: Path) -> list[SourceModel]:
    """Every model of `repository` (`model_dirs`), read by `read_model_dir`."""
    return [read_model_dir(path) for path in model_dirs(repository)]


def read_model_dir(path: Path) -> SourceModel:
    """`read_model`, or a model of UNKNOWN format with the `error` that stops reading it."""
    try:
        return read_model(path)
    except GeBackendError as exc:
        logger.warning("model %s: %s", path.name, exc)
        has_config = (path / "config.pbtxt").is_file()
        empty = ModelConfig(name=path.name)
        return SourceModel(
            path.name, path, empty, has_config, SourceFormat.UNKNOWN, (), error=str(exc)
        )


def read_model(model_dir: Path) -> SourceModel:
    """A model directory: its config, format, versions and the warnings about it."""
    config_path = model_dir / "config.pbtxt"
    has_config = config_path.is_file()
    config = load_model_config(config_path) if has_config else ModelConfig(name=model_dir.name)
    if not config.name:
        config.name = model_dir.name
    fmt = classify(config, model_dir)
    versions = tuple(
        _version(path, _model_file_name(config, fmt)) for path in version_dirs(model_dir)
    )
    warnings: list[str] = []
    if not has_config:
        warnings.append("no config.pbtxt: the model is read as Triton's auto-complete would")
    if fmt == SourceFormat.PYTHON:
        warnings.extend(python_model_warnings(config, versions))
    return SourceModel(
        model_dir.name, model_dir, config, has_config, fmt, versions, tuple(warnings)
    )


def classify(config: ModelConfig, model_dir: Path) -> SourceFormat:
    """The model's format from `platform`, then `backend`, then the model file in its version
    directories (`default_model_filename` by its suffix)."""
    if config.platform:
        return _PLATFORMS.get(config.platform, SourceFormat.UNKNOWN)
    if config.backend in _BACKENDS:
        return _BACKENDS[config.backend]
    if config.backend and config.backend != "tensorflow":
        return SourceFormat.UNKNOWN
    candidates = _TENSORFLOW_FORMATS if config.backend else tuple(_DEFAULT_FILES)
    for version in version_dirs(model_dir):
        for fmt in candidates:
            if (version / str(fmt.default_file)).exists():
                return fmt
        named = config.default_model_filename
        if named and (version / named).exists():
            suffix = Path(named).suffix
            for fmt in candidates:
                if Path(str(fmt.default_file)).suffix == suffix:
                    return fmt
    return SourceFormat.UNKNOWN


def _model_file_name(config: ModelConfig, fmt: SourceFormat) -> str | None:
    return config.default_model_filename or fmt.default_file


def _version(path: Path, file_name: str | None) -> SourceVersion:
    number = int(path.name)
    if file_name is None or not (path / file_name).exists():
        return SourceVersion(number, path, None, None)
    model_file = path / file_name
    return SourceVersion(number, path, model_file, tree_sha256(model_file))


def tree_sha256(path: Path) -> str:
    """The SHA-256 of a file, or of a directory's files (relative names and contents, in name
    order)."""
    if path.is_file():
        return file_sha256(path)
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(item.relative_to(path).as_posix().encode("utf-8") + b"\0")
        digest.update(bytes.fromhex(file_sha256(item)))
    return digest.hexdigest()


def python_model_warnings(config: ModelConfig, versions: tuple[SourceVersion, ...]) -> list[str]:
    """What in a Python model needs a GPU: KIND_GPU instance groups and GPU-only imports in its
    `.py` files (read with ast, never imported)."""
    warnings = []
    if any(g.kind == model_config_pb2.ModelInstanceGroup.KIND_GPU for g in config.instance_group):
        warnings.append(
            "instance_group asks for KIND_GPU: Triton refuses to load it on a host without GPUs "
            "(use KIND_CPU)"
        )
    for version in versions:
        for path in sorted(version.path.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            try:
                found = gpu_imports(path.read_text(encoding="utf-8"), str(path))
            except (OSError, UnicodeDecodeError, SyntaxError) as exc:
                warnings.append(f"cannot read {path} to check its imports: {exc}")
                continue
            if found:
                relative = path.relative_to(version.path.parent)
                warnings.append(
                    f"{relative} uses GPU-only libraries ({', '.join(found)}): port it to the "
                    "CPU or the NPU before serving it on Ascend"
                )
    return warnings


def gpu_imports(text: str, filename: str = "<model.py>") -> list[str]:
    """The GPU-only modules (`GPU_ONLY_MODULES`) `text` imports or reaches by attribute
    (`torch.cuda.synchronize()`), in order of first use."""
    found: dict[str, None] = {}
    for node in ast.walk(ast.parse(text, filename)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Attribute):
            names = [_dotted(node)]
        for name in names:
            for module in GPU_ONLY_MODULES:
                if name == module or name.startswith(module + "."):
                    found[module] = None
    return list(found)


def _dotted(node: ast.expr) -> str:
    """`a.b.c` for an attribute chain on a name; "" for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))
