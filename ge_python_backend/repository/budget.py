"""A repository's device budget: per device, the processes its instances open and the memory
they hold, against what one device allows (`DeviceLimits`). Read by `validate`, `migrate`, `k8s`
and `tune` before anything loads.

Each Triton instance of one of our models is a stub process that opens its device (placed by the
`device_ids` parameter: `ModelParameters.instances_per_device`). pyACL allows
`ascend.PROCESSES_PER_DEVICE` processes per device (`PROCESSES_PER_DEVICE_VM` in a VM); each
holds the device memory of opening the device (`ascend.PROCESS_DEVICE_MEMORY`), the model's
weights once (its lanes' loads share them) and, per pipeline lane, a load's work space and the
lane's pooled buffers (`acl.mdl.query_size` as `model.LoadSizes` counts it, and
`describe.ModelFileDescription`). Models with the parameter `device_host` on open no device
in their stubs: the device host of each device they use is one process there (one opening of
the device) holding one copy of each model's weights and, with shared work spaces
(`runtime.workspaces`, the host's default), N work spaces as large as the largest work of its
models and N I/O areas as large as their largest inputs and outputs (N: the host's streams),
each lane keeping of its own only what is not queued on its stream (its gear input, an image
input); else a work space and buffers per lane. A lane's pinned buffers are host memory, not
counted here. The host's settings are those its environment gives it (`DeviceLimits.host`).
Models that open no device (ensembles, other Python models) are not counted.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from ge_python_backend.ascend import (
    DEFAULT_SOC,
    PROCESS_DEVICE_MEMORY,
    PROCESSES_PER_DEVICE,
    PROCESSES_PER_DEVICE_VM,
    malloc_reserved,
    soc_device,
)
from ge_python_backend.errors import GeBackendError
from ge_python_backend.repository.config import (
    ConfigError,
    config_view,
    load_model_config,
    write_model_config,
)
from ge_python_backend.repository.parameters import ModelParameters
from ge_python_backend.repository.shm import ModelEntry
from ge_python_backend.repository.versions import find_om, version_dirs
from ge_python_backend.runtime.describe import describe_om
from ge_python_backend.runtime.workspaces import WorkSpaceSettings

__all__ = [
    "DeviceBudget",
    "DeviceLimits",
    "DeviceRow",
    "ModelFootprint",
    "budget",
    "footprints",
    "host_settings",
    "host_what_does_not_fit",
    "models_to_host",
]

logger = logging.getLogger(__name__)

MIB = 2**20


def host_settings() -> WorkSpaceSettings:
    """The work spaces a device host started here would have (`$GE_DEVICE_HOST_STREAMS`, ...;
    the defaults, said in the log, when the variables are wrong)."""
    try:
        return WorkSpaceSettings.from_environment()
    except ValueError as exc:
        logger.warning("%s; the budget counts the device host's defaults", exc)
        return WorkSpaceSettings()


@dataclasses.dataclass(frozen=True)
class DeviceLimits:
    """What one device allows: processes, memory (bytes) and what opening it costs a process;
    and how its device host gives work spaces (`host`)."""

    max_processes: int = PROCESSES_PER_DEVICE
    memory: int = soc_device(DEFAULT_SOC).memory
    process_memory: int = PROCESS_DEVICE_MEMORY
    soc: str = DEFAULT_SOC
    host: WorkSpaceSettings = dataclasses.field(default_factory=host_settings)

    @classmethod
    def of(cls, soc: str = DEFAULT_SOC, vm: bool = False) -> DeviceLimits:
        """The limits of a `soc` device (`--soc_version`), on a physical machine or in a VM."""
        return cls(
            max_processes=PROCESSES_PER_DEVICE_VM if vm else PROCESSES_PER_DEVICE,
            memory=soc_device(soc).memory,
            soc=soc,
        )


@dataclasses.dataclass(frozen=True)
class ModelFootprint:
    """One model's share of the devices: its instances per device, each with `lanes` pipeline
    lanes of `lane_bytes` (a load's work space and the lane's buffers; None when the `.om` could
    not be read), and `weight_bytes` (its weights) once per process holding the model: each
    instance's stub, or under the device host its one process per device."""

    name: str
    processes: dict[int, int]  # instances per device
    lanes: int
    lane_bytes: int | None
    weight_bytes: int = 0
    device_host: bool = False  # the instances live in the device host's one process
    buffer_bytes: int | None = None  # of `lane_bytes`, the lane's buffers (a batch's tensors)
    # of `buffer_bytes`, what a lane seated in a device host's pool keeps in its stream's I/O
    # area instead, and the bytes of that area it needs (`ModelFileDescription.shared_io`)
    shared_io_bytes: int = 0
    io_area_bytes: int = 0
    # the config sets device_host (on or off) itself: `host_what_does_not_fit` leaves it be;
    # False also for a model on the copy path (no config.pbtxt to write the parameter into)
    host_choice_given: bool = dataclasses.field(default=True, compare=False)

    def device_bytes(self, instances: int, shared_work: bool = False) -> int | None:
        """What `instances` of its instances on one device hold besides the openings of the
        device (None: not known); `shared_work`: without work spaces and shared I/O buffers (the
        device host's work spaces and I/O areas, counted per device)."""
        if self.lane_bytes is None:
            return None
        holders = min(instances, 1) if self.device_host else instances
        own = (self.buffer_bytes or 0) - self.shared_io_bytes
        lane = own if shared_work else self.lane_bytes
        return instances * self.lanes * lane + holders * self.weight_bytes

    @property
    def work_bytes(self) -> int:
        """A load's work space (0: not known)."""
        return (self.lane_bytes or 0) - (self.buffer_bytes or 0)

    @property
    def shares_work(self) -> bool:
        """Whether a device host with shared work spaces seats it in its stream pool: hosted,
        and loaded into memory of ours (query_size sizes its weights; see `LoadSizes.with_mem`)."""
        return self.device_host and self.weight_bytes > 0 and self.lane_bytes is not None


@dataclasses.dataclass(frozen=True)
class DeviceRow:
    """One device's line of the budget."""

    device: int
    processes: int
    memory: int  # bytes, the models whose `.om` could not be read left out
    models: tuple[str, ...]  # with their process counts: "resnet x2"
    unknown: tuple[str, ...]  # models whose memory is not known
    # the device host's shared work spaces: streams x the largest work of its pooled models
    work_spaces: int = 0
    # its I/O areas: streams x the largest inputs and outputs of its pooled models
    io_areas: int = 0


@dataclasses.dataclass(frozen=True)
class DeviceBudget:
    """Every device a repository uses, against `limits`."""

    rows: tuple[DeviceRow, ...]
    limits: DeviceLimits

    def over(self, row: DeviceRow) -> bool:
        """Whether `row` needs more processes or memory than a device has."""
        return row.processes > self.limits.max_processes or row.memory > self.limits.memory

    def problems(self) -> list[str]:
        """Why the repository cannot be served on these devices (empty: it fits)."""
        found = []
        for row in self.rows:
            if row.processes > self.limits.max_processes:
                found.append(
                    f"device {row.device}: {row.processes} processes (one per instance) but "
                    f"pyACL allows {self.limits.max_processes} per device "
                    f"({PROCESSES_PER_DEVICE} on a physical machine, {PROCESSES_PER_DEVICE_VM} "
                    "in a VM): serve fewer instances, spread the models over more devices "
                    "(parameter device_ids), or serve them from the device host (parameter "
                    "device_host on: one process per device)"
                )
            if row.memory > self.limits.memory:
                found.append(
                    f"device {row.device}: {row.memory / MIB:,.0f} MiB of device memory needed, "
                    f"a {self.limits.soc} has {self.limits.memory / MIB:,.0f} MiB: serve fewer "
                    "instances or lanes (pipeline_depth), or spread the models over more devices"
                )
        return found

    def warnings(self) -> list[str]:
        """What the budget could not count."""
        return [
            f"device {row.device}: the memory of {', '.join(row.unknown)} is not counted (its "
            ".om could not be read here)"
            for row in self.rows
            if row.unknown
        ]

    def table(self) -> str:
        """The per-device table, one line a device."""
        limits = self.limits
        lines = [
            f"device budget ({limits.soc}: {limits.max_processes} processes, "
            f"{limits.memory / MIB:,.0f} MiB; {limits.process_memory / MIB:,.0f} MiB per process)",
            f"  {'device':>6}  {'processes':>9}  {'memory MiB':>18}  models",
        ]
        for row in self.rows:
            over = self.over(row)
            memory = f"{row.memory / MIB:,.0f} / {limits.memory / MIB:,.0f}"
            shown = ", ".join(row.models[:6]) + (
                f", {len(row.models) - 6} more" if len(row.models) > 6 else ""
            )
            lines.append(
                f"  {row.device:>6}  {f'{row.processes} / {limits.max_processes}':>9}  "
                f"{memory:>18}  {shown}{'  DOES NOT FIT' if over else ''}"
            )
            if row.work_spaces:
                streams = limits.host.streams
                lines.append(
                    f"  {'':>6}  {'':>9}  {'':>18}  of its memory, {row.work_spaces / MIB:,.1f} "
                    f"MiB are the device host's {streams} shared work spaces of "
                    f"{row.work_spaces / streams / MIB:,.1f} MiB (its largest model's work) and "
                    f"{row.io_areas / MIB:,.1f} MiB its {streams} I/O areas of "
                    f"{row.io_areas / streams / MIB:,.1f} MiB (its largest inputs and outputs)"
                )
        return "\n".join(lines)


def budget(models: Sequence[ModelFootprint], limits: DeviceLimits) -> DeviceBudget:
    """The per-device sums of `models` against `limits`: per device, each process's opening
    and what its models hold; for the device host, one opening, each model's weights once and,
    with shared work spaces, `limits.host.streams` work spaces of the largest work of its pooled
    models and as many I/O areas of their largest inputs and outputs, beside what each lane
    keeps of its own (else a work space and buffers per lane)."""
    devices = sorted({device for model in models for device in model.processes})
    shared = limits.host.shared
    rows = []
    for device in devices:
        here = [(m, m.processes[device]) for m in models if m.processes.get(device)]
        hosted = any(m.device_host for m, _ in here)
        processes = sum(count for m, count in here if not m.device_host) + int(hosted)
        pooled = [m for m, _ in here if shared and m.shares_work]
        work_spaces = limits.host.streams * max((m.work_bytes for m in pooled), default=0)
        largest_io = max((m.io_area_bytes for m in pooled), default=0)
        io_areas = limits.host.streams * malloc_reserved(largest_io) if largest_io else 0
        rows.append(
            DeviceRow(
                device=device,
                processes=processes,
                memory=processes * limits.process_memory
                + work_spaces
                + io_areas
                + sum(m.device_bytes(count, shared and m.shares_work) or 0 for m, count in here),
                models=tuple(
                    f"{m.name} x{count}{' (device host)' if m.device_host else ''}"
                    for m, count in here
                ),
                unknown=tuple(m.name for m, _ in here if m.lane_bytes is None),
                work_spaces=work_spaces,
                io_areas=io_areas,
            )
        )
    return DeviceBudget(tuple(rows), limits)


def footprints(entries: Sequence[ModelEntry], runtime: str | None = None) -> list[ModelFootprint]:
    """The footprint of every model of ours among `entries` (their newest version's `.om`, read
    with `runtime`, else with the runtime its container is made for); models without an `.om`
    open no device."""
    found = []
    for entry in entries:
        config = entry.config
        versions = version_dirs(entry.directory)
        if config is None or config.platform == "ensemble" or config.backend != "python":
            continue
        if not versions:
            continue
        try:
            params = ModelParameters.from_config(config_view(config))
            om_path = find_om(versions[-1], params.om_file)
        except ConfigError as exc:
            logger.debug("%s opens no device here: %s", entry.directory.name, exc)
            continue  # no .om (not ours), or parameters validate explains
        description = entry.description  # the copy path: read by repository_entries
        if description is None:
            try:  # read here by whatever reads it: `runtime`, else its container decides
                description = describe_om(
                    om_path,
                    runtime,
                    params.input_shape_order,
                    params.aipp_config_path(versions[-1]),
                )
            except GeBackendError as exc:
                logger.debug("%s: memory not known: %s", entry.directory.name, exc)
        lane_bytes: int | None = None
        buffer_bytes: int | None = None
        weight_bytes = shared_io = io_area = 0
        if description is not None:
            buffer_bytes = description.lane_bytes
            lane_bytes = description.load.load_bytes + buffer_bytes
            weight_bytes = description.load.shared_bytes
            shared_io, io_area = description.shared_io(params.image_input)
        counts = [max(group.count, 1) for group in config.instance_group] or [1]
        found.append(
            ModelFootprint(
                config.name or entry.directory.name,
                params.instances_per_device(counts),
                params.pipeline_depth,
                lane_bytes,
                weight_bytes,
                device_host=params.in_device_host,
                buffer_bytes=buffer_bytes,
                shared_io_bytes=shared_io,
                io_area_bytes=io_area,
                host_choice_given=params.device_host is not None or entry.copy_path,
            )
        )
    return found


def models_to_host(models: Sequence[ModelFootprint], limits: DeviceLimits) -> list[str]:
    """The models to serve from the device host so that `models` fit `limits`: on every device
    that does not fit with them in their stubs, each model whose config leaves device_host to
    its default. What still does not fit then, `budget(...).problems()` says."""
    devices = budget(models, limits)
    over = {row.device for row in devices.rows if devices.over(row)}
    return sorted(
        m.name
        for m in models
        if not m.device_host and not m.host_choice_given and over & set(m.processes)
    )


def host_what_does_not_fit(
    entries: Sequence[ModelEntry], models: Sequence[ModelFootprint], limits: DeviceLimits
) -> list[str]:
    """Write parameter device_host on into the config.pbtxt of each model `models_to_host` names
    (`models`: the footprints of `entries`, a repository's); returns their names."""
    names = models_to_host(models, limits)
    for entry in entries:
        if entry.config is not None and (entry.config.name or entry.directory.name) in names:
            path = entry.directory / "config.pbtxt"
            config = load_model_config(path)
            params = ModelParameters.from_config(config_view(config))
            dataclasses.replace(params, device_host=True).to_config(config)
            write_model_config(config, path)
            logger.info("%s: parameter device_host on written into %s", entry.directory.name, path)
    return names
