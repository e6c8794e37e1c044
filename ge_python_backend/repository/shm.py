"""Sizing the Python backend's shared memory for a repository: the region flags every
`tritonserver` gets (`shm_sizes_for_repository`) and the `/dev/shm` every stub together needs
(`shm_limit_bytes`). Used by the server launcher, `doctor` and the k8s manifests.

A model directory without `config.pbtxt` (the copy path: only `<version>/model.py` and the `.om`)
is sized from the config Triton's auto-complete builds from its newest version's `.om`
(`repository_entries`), so reading such a repository needs the runtime that reads the `.om`."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from ge_python_backend.ascend import DATA_TYPES
from ge_python_backend.errors import GeBackendError
from ge_python_backend.repository.autocomplete import complete_version
from ge_python_backend.repository.config import (
    ConfigError,
    ModelConfig,
    config_from_view,
    config_view,
    load_model_config,
)
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.versions import version_dirs
from ge_python_backend.runtime.describe import ModelFileDescription

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
# Triton's own default for both shm-default-byte-size and shm-growth-byte-size.
SHM_FLOOR_BYTES = 1 * MIB
# Pre-sizing caps. Larger tensors still work: the backend grows a region by as many growth steps
# as one allocation needs. The caps keep a many-instance server inside a container's /dev/shm.
SHM_DEFAULT_CAP_BYTES = 256 * MIB
SHM_GROWTH_CAP_BYTES = 64 * MIB
# Guess for one TYPE_STRING element, whose size a config does not tell.
STRING_ELEMENT_BYTES = 64
# /dev/shm beyond the Python backend's regions (Triton's own use, a process restarting), and a
# floor: a memory-backed emptyDir only takes the memory that is written to it.
SHM_HEADROOM_BYTES = 64 * MIB
SHM_MIN_BYTES = 256 * MIB

# Bytes per element by config data type name ("TYPE_FP32").
_ELEMENT_BYTES = {
    **{t.triton_config: t.itemsize for t in DATA_TYPES if t.triton_config and t.itemsize},
    "TYPE_STRING": STRING_ELEMENT_BYTES,
}


@dataclasses.dataclass(frozen=True)
class ShmSizes:
    """`--backend-config python,shm-default-byte-size=...,shm-growth-byte-size=...` values."""

    default_bytes: int
    growth_bytes: int


@dataclasses.dataclass(frozen=True)
class RepositoryModel:
    """A model of the repository as shm sizing and the k8s manifests need it."""

    name: str
    instances: int  # stub processes, each with its own shared-memory region
    device_ids: tuple[int, ...]
    acl_runtime: str | None  # None: $GE_PYTHON_BACKEND_ACL in the pod, else the .om's container


def _tensor_bytes(tensor: Any, batch: int, warmup_dims: Mapping[str, list[int]]) -> int:
    """Bytes of one tensor at `batch` rows; -1 axes take the warmup's size, else 1."""
    dims = [int(dim) for dim in tensor.dims]
    known = warmup_dims.get(tensor.name, [])
    sizes = [dim if dim >= 0 else (known[i] if i < len(known) else 1) for i, dim in enumerate(dims)]
    count = batch
    for size in sizes:
        count *= max(size, 1)
    type_name = model_config_pb2.DataType.Name(tensor.data_type)
    return count * _ELEMENT_BYTES.get(type_name, 8)


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """A model directory of a repository and its config, or why there is none; on the copy path
    also the newest version's `.om` as auto-complete described it (read once: `footprints`
    takes it from here)."""

    directory: Path
    config: ModelConfig | None
    error: str = ""
    description: ModelFileDescription | None = None

    @property
    def copy_path(self) -> bool:
        """No `config.pbtxt`: Triton's auto-complete builds the whole config from the `.om`."""
        return not (self.directory / "config.pbtxt").exists()


def read_model_entry(model_dir: Path, runtime: str | None = None) -> ModelEntry:
    """`model_dir` with its config: its `config.pbtxt`, else (the copy path) the one
    auto-complete builds from the newest version's `.om`, read with `runtime`
    (`complete_version`'s rules), and that `.om`'s description. ConfigError, or the runtime's
    GeBackendError when the `.om` cannot be read."""
    path = model_dir / "config.pbtxt"
    if path.exists():
        return ModelEntry(model_dir, load_model_config(path))
    versions = version_dirs(model_dir)
    if not versions:
        raise ConfigError(f"{model_dir.name}: no config.pbtxt and no version directory (e.g. 1/)")
    empty = config_view(ModelConfig(name=model_dir.name, backend="python"))
    completion = complete_version(empty, versions[-1], runtime)
    return ModelEntry(model_dir, config_from_view(completion.config), "", completion.description)


def repository_entries(
    repository: str | os.PathLike[str], runtime: str | None = None
) -> list[ModelEntry]:
    """Every model directory of `repository` (one with `config.pbtxt` or a numbered version
    directory), in name order, with its config (`read_model_entry`) or the error reading it."""
    entries = []
    for directory in sorted(Path(repository).iterdir()):
        if not directory.is_dir():
            continue
        if not (directory / "config.pbtxt").exists() and not version_dirs(directory):
            continue
        try:
            entries.append(read_model_entry(directory, runtime))
        except (ConfigError, GeBackendError) as exc:
            logger.debug("no config for %s: %s", directory.name, exc)
            entries.append(ModelEntry(directory, None, str(exc)))
    return entries


def shm_sizes(entries: Sequence[ModelEntry]) -> ShmSizes:
    """Shared-memory sizes for the Python backend, from the configs of `entries`.

    The largest exchange is the biggest model's request plus response at `max_batch_size` rows
    (1 row for `max_batch_size: 0`); -1 axes take the size of that input's `model_warmup` dims,
    else 1 (so it is a lower bound). Each stub's region starts at twice that (one batch
    arriving while the previous answer leaves), rounded up to MiB, between Triton's 1 MiB and
    256 MiB; it grows in steps of one exchange, between 1 MiB and 64 MiB. Entries without a
    config are skipped: the server reports them itself.
    """
    largest = 0
    for entry in entries:
        config = entry.config
        if config is None:
            continue
        warmup_dims: dict[str, list[int]] = {}
        for warmup in config.model_warmup:
            for name, tensor in warmup.inputs.items():
                previous = warmup_dims.get(name, [])
                dims = [int(dim) for dim in tensor.dims]
                warmup_dims[name] = [max(pair) for pair in zip(dims, previous)] or dims
        batch = max(int(config.max_batch_size), 1)
        exchange = sum(
            _tensor_bytes(tensor, batch, warmup_dims) for tensor in [*config.input, *config.output]
        )
        largest = max(largest, exchange)
    default = min(max(_round_up(2 * largest, MIB), SHM_FLOOR_BYTES), SHM_DEFAULT_CAP_BYTES)
    growth = min(max(_round_up(largest, MIB), SHM_FLOOR_BYTES), SHM_GROWTH_CAP_BYTES)
    return ShmSizes(default, growth)


def shm_sizes_for_repository(
    repository: str | os.PathLike[str], runtime: str | None = None
) -> ShmSizes:
    """`shm_sizes` of every model of `repository` (`repository_entries`)."""
    return shm_sizes(repository_entries(repository, runtime))


def repository_models_of(entries: Sequence[ModelEntry]) -> list[RepositoryModel]:
    """The models of `entries` with a config and valid parameters (the others are logged and
    left out: `ge-python-model validate` explains them)."""
    models = []
    for entry in entries:
        try:
            if entry.config is None:
                raise ConfigError(entry.error)
            config = entry.config
            params = ModelParameters.from_config(config_view(config))
        except ConfigError as exc:
            logger.warning("leaving out %s: %s", entry.directory.name, exc)
            continue
        instances = sum(max(group.count, 1) for group in config.instance_group) or 1
        models.append(
            RepositoryModel(
                config.name or entry.directory.name,
                instances,
                params.device_ids,
                params.acl_runtime,
            )
        )
    return models


def repository_models(
    repository: str | os.PathLike[str], runtime: str | None = None
) -> list[RepositoryModel]:
    """`repository_models_of` every model of `repository` (`repository_entries`)."""
    return repository_models_of(repository_entries(repository, runtime))


def shm_limit_bytes(models: Sequence[RepositoryModel], sizes: ShmSizes) -> int:
    """`/dev/shm` for every stub's region plus one growth step each, and headroom; MiB-rounded,
    at least SHM_MIN_BYTES. Each model instance is a stub process whose region starts at
    `default_bytes`."""
    stubs = sum(model.instances for model in models)
    total = stubs * (sizes.default_bytes + sizes.growth_bytes) + SHM_HEADROOM_BYTES
    return max(-(-total // MIB) * MIB, SHM_MIN_BYTES)
