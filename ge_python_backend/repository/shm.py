"""Sizing the Python backend's shared memory for a repository: the region flags every
`tritonserver` gets (`shm_sizes_for_repository`: sized for the common stub, the few large ones
grow by what they need) and the `/dev/shm` every stub together needs (`shm_limit_bytes`). Used by
the server launcher, `doctor` and the k8s manifests.

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
# Triton's own default for both flags, and the smallest shm-default-byte-size the Python backend
# takes (r24.10 src/python_be.cc, TRITONBACKEND_Initialize).
SHM_FLOOR_BYTES = 1 * MIB
# A region grows by the allocation that did not fit rounded up to the next multiple of the growth
# step (src/shm_manager.cc, GrowIfNeeded): each growth overshoots what it needed by less than one
# step, and a larger step grows no less often (an allocation larger than the step grows once
# whatever the step). So the smallest step Triton uses.
SHM_GROWTH_BYTES = 1 * MIB
# Pre-sizing cap of the default region. Larger tensors still work: the region grows.
SHM_DEFAULT_CAP_BYTES = 256 * MIB
# Exchanges one stub holds in its region at once: a batch's inputs and outputs live until its
# responses are sent (python_be.cc ProcessRequests), and the stub drops the previous batch's
# tensors only after it has answered (pb_stub.cc ProcessRequests): the next batch's may arrive
# before. Measured: at most 1.5 exchanges at 8 clients of full batches, at depth 1 and 2.
EXCHANGES_IN_FLIGHT = 2
# Guess for one TYPE_STRING element, whose size a config does not tell.
STRING_ELEMENT_BYTES = 64
# /dev/shm beyond the Python backend's regions (Triton's own use, a process restarting), and a
# floor: a memory-backed emptyDir only takes the memory that is written to it.
SHM_HEADROOM_BYTES = 64 * MIB
SHM_MIN_BYTES = 256 * MIB
# tritonserver's --model-load-thread-count default: models loading at once, each with a
# short-lived auto-complete stub whose region has the default size beside its instances'.
MODEL_LOAD_THREADS = 4

# Bytes per element by config data type name ("TYPE_FP32").
_ELEMENT_BYTES = {
    **{t.triton_config: t.itemsize for t in DATA_TYPES if t.triton_config and t.itemsize},
    "TYPE_STRING": STRING_ELEMENT_BYTES,
}


@dataclasses.dataclass(frozen=True)
class ModelShm:
    """One model's share of `/dev/shm`: its stubs and what one of them holds in its region."""

    name: str
    instances: int  # stub processes, each with its own region
    need_bytes: int  # EXCHANGES_IN_FLIGHT exchanges at max_batch_size, MiB-rounded, >= 1 MiB


@dataclasses.dataclass(frozen=True)
class ShmSizes:
    """`--backend-config python,shm-default-byte-size=...,shm-growth-byte-size=...` values,
    and the models they were sized for (none when given by hand)."""

    default_bytes: int
    growth_bytes: int
    models: tuple[ModelShm, ...] = ()

    def region_bytes(self, model: ModelShm) -> int:
        """The region `shm_limit_bytes` counts for one stub of `model`: the default, or the
        model's need when larger (a stub grows only as far as its tensors need)."""
        return max(self.default_bytes, model.need_bytes)

    def growing(self) -> list[ModelShm]:
        """The models whose stubs grow beyond the default, largest need first."""
        larger = [model for model in self.models if model.need_bytes > self.default_bytes]
        return sorted(larger, key=lambda model: (-model.need_bytes, model.name))

    def summary(self) -> str:
        """One line for the operator: the flags, which models grow and to about how much, and
        the `/dev/shm` the repository needs."""
        steps = f"growing in {self.growth_bytes // MIB} MiB steps (shm-growth-byte-size)"
        if not self.models:
            return (
                f"Python backend shared memory: every stub starts with a "
                f"{self.default_bytes // MIB} MiB region (shm-default-byte-size, given), {steps}"
            )
        stubs = sum(model.instances for model in self.models)
        growing = self.growing()
        by_need: dict[int, list[str]] = {}
        for model in growing:
            by_need.setdefault(model.need_bytes, []).append(model.name)
        groups = [
            ", ".join(names[:3])
            + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            + f" to about {need // MIB} MiB each"
            for need, names in by_need.items()
        ]
        count = sum(model.instances for model in growing)
        grows = (
            f"{count} {'stub grows' if count == 1 else 'stubs grow'}: {'; '.join(groups)}"
            if groups
            else "no stub needs more"
        )
        return (
            f"Python backend shared memory: each of {stubs} stubs starts with a "
            f"{self.default_bytes // MIB} MiB region (shm-default-byte-size, sized for the median "
            f"stub), {steps}; {grows}; /dev/shm needs about {shm_limit_bytes(self) // MIB} MiB"
        )


@dataclasses.dataclass(frozen=True)
class RepositoryModel:
    """A model of the repository as the k8s manifests and `doctor` need it."""

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


def exchange_bytes(config: ModelConfig) -> int:
    """One exchange of a model: its request plus response at `max_batch_size` rows (1 row for
    `max_batch_size: 0`); -1 axes take the size of that input's `model_warmup` dims, else 1 (so
    it is a lower bound)."""
    warmup_dims: dict[str, list[int]] = {}
    for warmup in config.model_warmup:
        for name, tensor in warmup.inputs.items():
            previous = warmup_dims.get(name, [])
            dims = [int(dim) for dim in tensor.dims]
            warmup_dims[name] = [max(pair) for pair in zip(dims, previous)] or dims
    batch = max(int(config.max_batch_size), 1)
    return sum(
        _tensor_bytes(tensor, batch, warmup_dims) for tensor in [*config.input, *config.output]
    )


def instance_count(config: ModelConfig) -> int:
    """Stub processes Triton starts for `config`: the counts of its instance groups."""
    return sum(max(group.count, 1) for group in config.instance_group) or 1


def median_need(models: Sequence[ModelShm]) -> int:
    """The need of the median stub (each model counted once per instance): the smallest need
    that at least half of the stubs fit in; 0 without models."""
    needs = sorted(need for model in models for need in [model.need_bytes] * model.instances)
    return needs[(len(needs) - 1) // 2] if needs else 0


def shm_sizes(entries: Sequence[ModelEntry]) -> ShmSizes:
    """Shared-memory sizes for the Python backend, from the configs of `entries`.

    A model's need is EXCHANGES_IN_FLIGHT exchanges (`exchange_bytes`), MiB-rounded. The flags
    are server-wide (one value for every stub), so each stub's region starts at the need of the
    median stub (`median_need`), between Triton's 1 MiB and 256 MiB: most stubs fit in it, and
    the stubs of larger models grow by what their tensors need, in steps of SHM_GROWTH_BYTES.
    Entries without a config are skipped: the server reports them itself.
    """
    models = tuple(
        ModelShm(
            entry.config.name or entry.directory.name,
            instance_count(entry.config),
            max(
                _round_up(EXCHANGES_IN_FLIGHT * exchange_bytes(entry.config), MIB), SHM_FLOOR_BYTES
            ),
        )
        for entry in entries
        if entry.config is not None
    )
    default = min(max(median_need(models), SHM_FLOOR_BYTES), SHM_DEFAULT_CAP_BYTES)
    return ShmSizes(default, SHM_GROWTH_BYTES, models)


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
        models.append(
            RepositoryModel(
                config.name or entry.directory.name,
                instance_count(config),
                params.device_ids,
                params.acl_runtime,
            )
        )
    return models


def shm_limit_bytes(sizes: ShmSizes) -> int:
    """`/dev/shm` for every stub's region (`ShmSizes.region_bytes`) plus one growth step each,
    the auto-complete stubs of the models loading at once, and headroom; MiB-rounded, at least
    SHM_MIN_BYTES."""
    regions = sum(
        model.instances * (sizes.region_bytes(model) + sizes.growth_bytes) for model in sizes.models
    )
    total = regions + MODEL_LOAD_THREADS * sizes.default_bytes + SHM_HEADROOM_BYTES
    return max(_round_up(total, MIB), SHM_MIN_BYTES)
