"""A source model's `config.pbtxt` rewritten, field by field, to serve its compiled `.om`.

`rewrite_config(source, base, device_ids=...)` takes the config a team serves an ONNX model with
(ONNX Runtime or TensorRT, usually on GPUs) and `base`, the config scaffold builds for the
compiled `.om` (`repository.config.build_model_config`: backend python, the `.om`'s tensors and
gears, our parameters), and returns the config that serves the `.om` through `model.py` the way
the team's clients already call the model. Every field set in the source lands in exactly one
list of the `ConfigRewrite`:

- kept as written: name, version_policy, the dynamic batcher's delays, queue policies and
  priorities, the user's warmup, label files, response_cache, metric_tags, model_metrics, the
  user's own parameters, and the inputs and outputs as the clients send them (names, data types
  and dims must agree with the `.om`'s in `base`, else they are refused with both);
- rewritten: platform/backend to the Python backend, preferred_batch_size to the compiled gears,
  an image input without a format to the `.om`'s layout (FORMAT_NCHW / FORMAT_NHWC),
  instance groups to one KIND_CPU group whose instance k runs on NPU `device_ids[k % len]`;
- dropped with a note: GPU, ONNX Runtime and TensorRT settings the `.om` has no use for;
- refused with a reason: what model.py cannot serve for an `.om` (`refusals(source)` lists the
  ones the source alone shows, for a pre-flight before compiling).

Field paths are Triton's: `instance_group[0].kind`, `parameters[key]`, a repeated number as one
field (`dynamic_batching.preferred_batch_size`); an entry the source does not have (an output or
warmup added from `base`) is named by its index in the new config.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import Any, Union

from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelConfig, ModelInstanceGroup

from ge_python_backend.modelinfo import shape_fits
from ge_python_backend.repository.config import config_view
from ge_python_backend.repository.parameters import (
    PARAMETER_NAMES,
    ModelParameters,
    parse_device_ids,
)

KEPT, REWRITTEN, DROPPED, REFUSED = "kept", "rewritten", "dropped", "refused"

# The ONNX Runtime and TensorRT backends' own parameters (their READMEs): thread pools, memory
# arenas, cuDNN and TensorRT settings of the session the `.om` replaces.
FRAMEWORK_PARAMETERS = frozenset(
    {
        "intra_op_thread_count",
        "inter_op_thread_count",
        "execution_mode",
        "enable_mem_arena",
        "enable_mem_pattern",
        "arena_extend_strategy",
        "gpu_mem_limit",
        "do_copy_in_default_stream",
        "use_device_allocator_for_initializers",
        "execution_context_allocation_strategy",
    }
)
FRAMEWORK_PARAMETER_PREFIXES = ("memory.", "cudnn_", "trt_")

_TENSOR_REFUSALS = {
    "allow_ragged_batch": "ragged batching (requests of different shapes batched without "
    "padding) cannot run on the .om's fixed gears",
    "optional": "an optional input: the .om needs every input in every request",
    "is_shape_tensor": "a TensorRT shape tensor: an .om has no shape tensors",
}
_SEQUENCE_REFUSALS = {
    "state": "implicit state: Triton keeps state tensors between a sequence's requests only for "
    "backends that read and write them, which model.py does not",
    "control_input": "Triton adds control tensors (START, END, READY, CORRID) to each request as "
    "inputs the .om does not have",
    "iterative_sequence": "iterative sequences need a model that reschedules its own requests; "
    "model.py answers each request once",
}
_DECOUPLED = (
    "a decoupled model answers a request with any number of responses; the .om answers each "
    "request with one"
)
_OPTIMIZATION_NOTES = {
    "graph": "the framework's graph optimization level: ATC optimized the graph when it compiled "
    "the .om",
    "priority": "a model priority only the TensorFlow backend reads",
    "cuda": "CUDA settings (CUDA graphs, busy-wait events, output copy stream) are GPU-only",
    "execution_accelerators": "ONNX Runtime's execution providers (TensorRT, CUDA, OpenVINO): "
    "the .om runs on the NPU as ATC compiled it",
    "input_pinned_memory": "pinned host buffers for GPU copies: the NPU runtime keeps its own",
    "output_pinned_memory": "pinned host buffers for GPU copies: the NPU runtime keeps its own",
    "gather_kernel_buffer_threshold": "a GPU gather kernel setting",
    "eager_batching": "a TensorRT backend setting",
}
_INSTANCE_NOTES = {
    "secondary_devices": "TensorRT's NVDLA secondary devices are GPU-only",
    "profile": "TensorRT optimization profiles: the .om's gears take their place",
}
# Group fields kept on the one KIND_CPU group when every source group agrees on them.
_SHARED_GROUP_FIELDS = ("name", "rate_limiter", "passive", "host_policy")


@dataclasses.dataclass(frozen=True)
class FieldChange:
    """What became of one field of the source config; `field` is its Triton config path."""

    field: str
    detail: str


@dataclasses.dataclass(frozen=True)
class ConfigRewrite:
    """The new config and where each source field went. `files` are paths relative to the
    source model directory to copy beside the new config (label files, warmup data files)."""

    config: ModelConfig
    kept: list[FieldChange]
    rewritten: list[FieldChange]
    dropped: list[FieldChange]
    refused: list[FieldChange]
    files: list[str]

    @property
    def convertible(self) -> bool:
        """No field was refused: `config` serves the `.om` as the source served the ONNX."""
        return not self.refused


def refusals(source: ModelConfig) -> list[FieldChange]:
    """The fields that make the source model unconvertible whatever its `.om` (a pre-flight);
    `rewrite_config` adds those that depend on the `.om` (tensors that disagree with it)."""
    found = []
    for field, _ in source.ListFields():
        rule = TOP_LEVEL_FIELDS.get(
            field.name, (REFUSED, "a config field this migration cannot carry")
        )
        if isinstance(rule, tuple) and rule[0] == REFUSED:
            found.append(FieldChange(field.name, rule[1]))
    for kind in ("input", "output"):
        for index, tensor in enumerate(getattr(source, kind)):
            for field, _ in tensor.ListFields():
                if field.name in _TENSOR_REFUSALS:
                    path = f"{kind}[{index}].{field.name}"
                    found.append(FieldChange(path, _TENSOR_REFUSALS[field.name]))
    if source.HasField("sequence_batching"):
        for field, _ in source.sequence_batching.ListFields():
            if field.name in _SEQUENCE_REFUSALS:
                path = f"sequence_batching.{field.name}"
                found.append(FieldChange(path, _SEQUENCE_REFUSALS[field.name]))
    if source.model_transaction_policy.decoupled:
        found.append(FieldChange("model_transaction_policy.decoupled", _DECOUPLED))
    return found


def rewrite_config(
    source: ModelConfig, base: ModelConfig, *, device_ids: Sequence[int]
) -> ConfigRewrite:
    """`source` rewritten to serve the `.om` that `base` describes (see the module docstring).

    `device_ids` are the NPUs for groups that name no device (KIND_GPU without `gpus`, KIND_CPU,
    KIND_MODEL, no instance group). With refusals the config is still built, but is not to be
    served.
    """
    rewriter = _Rewriter(source, base, parse_device_ids(list(device_ids)))
    rewriter.run()
    lists = rewriter.lists
    return ConfigRewrite(
        rewriter.config,
        lists[KEPT],
        lists[REWRITTEN],
        lists[DROPPED],
        lists[REFUSED],
        rewriter.files,
    )


def _only(message: Message, name: str) -> Message:
    """A copy of `message` with only its field `name` set (to merge one field into another)."""
    part = type(message)()
    part.CopyFrom(message)
    for field, _ in message.ListFields():
        if field.name != name:
            part.ClearField(field.name)
    return part


def _served_dims(tensor: Any) -> list[int]:
    """The dims a config tensor gives the backend: its `reshape` shape when it has one."""
    return list(tensor.reshape.shape if tensor.HasField("reshape") else tensor.dims)


def _type_name(data_type: int) -> str:
    return str(model_config_pb2.DataType.Name(data_type))


def _inside_directory(path_text: str) -> bool:
    """A relative path that stays inside the directory it is relative to."""
    path = PurePosixPath(path_text)
    return bool(path_text) and not path.is_absolute() and ".." not in path.parts


def _is_framework_parameter(key: str) -> bool:
    return key in FRAMEWORK_PARAMETERS or key.startswith(FRAMEWORK_PARAMETER_PREFIXES)


class _Rewriter:
    """Builds the new config and the four lists from one source and base config."""

    def __init__(self, source: ModelConfig, base: ModelConfig, device_ids: tuple[int, ...]):
        self.source = source
        self.base = base
        self.device_ids = device_ids
        self.config = ModelConfig(name=source.name or base.name, backend="python")
        refused = refusals(source)
        self.lists: dict[str, list[FieldChange]] = {
            KEPT: [],
            REWRITTEN: [],
            DROPPED: [],
            REFUSED: refused,
        }
        self.claimed = {change.field for change in refused}
        self.files: list[str] = []
        self.gears: list[int] = []
        self.devices: list[int] = []
        # a batched source whose .om carries the batch axis in its dims gears: served with
        # full shapes and max_batch_size 0, each request as the client sent it
        self.batch_in_dims = False

    def record(self, kind: str, field: str, detail: str) -> bool:
        """Put `field` in list `kind`, unless `refusals` placed it already (then False)."""
        if field in self.claimed:
            return False
        self.lists[kind].append(FieldChange(field, detail))
        return True

    def run(self) -> None:
        self._max_batch_size()
        for field, _ in self.source.ListFields():
            rule = TOP_LEVEL_FIELDS.get(field.name)
            if callable(rule):
                rule(self)
            elif rule is not None and self.record(rule[0], field.name, rule[1]) and rule[0] == KEPT:
                self.config.MergeFrom(_only(self.source, field.name))
        self._tensors("input")
        self._tensors("output")
        self._instance_groups()
        self._parameters()
        self._warmup()

    # -- batching ---------------------------------------------------------------------------

    def _max_batch_size(self) -> None:
        source, base = self.source, self.base
        if source.max_batch_size or source.input or source.output:
            size = source.max_batch_size
        else:  # nothing declared: the ONNX backend's auto-complete filled it in
            size = base.max_batch_size
            if size:
                self.record(
                    REWRITTEN,
                    "max_batch_size",
                    f"none (auto-complete) -> {size}, the .om's largest batch gear",
                )
        self.config.max_batch_size = size
        if size and base.max_batch_size:
            self.gears = [g for g in base.dynamic_batching.preferred_batch_size if g <= size]
        if not source.max_batch_size:
            return
        if (
            not base.max_batch_size
            and base.input
            and all(tensor.dims and tensor.dims[0] == -1 for tensor in base.input)
        ):
            self.batch_in_dims = True
            self.config.max_batch_size = 0
            self.record(
                REWRITTEN,
                "max_batch_size",
                f"{size} -> 0: the .om's dims gears carry the batch axis, so the config takes "
                "full shapes ([batch, ...]) and each request runs as its client sent it",
            )
        elif not base.max_batch_size:
            self.record(
                REFUSED,
                "max_batch_size",
                f"{size}: the clients send a batch axis, but the .om has none on every input "
                "(compile it with a dynamic batch axis)",
            )
        elif size > base.max_batch_size:
            self.record(
                KEPT,
                "max_batch_size",
                f"{size} as written: batches above the .om's largest gear "
                f"{base.max_batch_size} run in chunks of its gears",
            )
        else:
            self.record(KEPT, "max_batch_size", f"{size} as written")

    def _submessage(
        self, name: str, notes: dict[str, str], kind: str, default: str, skip: str = ""
    ) -> None:
        """Each field set in the source's message `name` but `skip` goes to list `kind` with
        its note in `notes` (else `default`); kept ones are copied. An empty message is one
        field."""
        message = getattr(self.source, name)
        target = getattr(self.config, name)
        fields = [field.name for field, _ in message.ListFields()]
        if not fields and self.record(kind, name, f"(empty) {default}") and kind == KEPT:
            target.SetInParent()
        for field in fields:
            if (
                field != skip
                and self.record(kind, f"{name}.{field}", notes.get(field, default))
                and kind == KEPT
            ):
                target.MergeFrom(_only(message, field))

    def _dynamic_batching(self) -> None:
        if self.batch_in_dims:
            self.record(
                DROPPED,
                "dynamic_batching",
                "max_batch_size is 0 (the batch axis is in the .om's dims gears): Triton "
                "batches no requests together",
            )
            return
        self._submessage("dynamic_batching", {}, KEPT, "as written", skip="preferred_batch_size")
        self.config.dynamic_batching.SetInParent()
        sizes = list(self.source.dynamic_batching.preferred_batch_size)
        compiled = [size for size in sizes if size in self.gears] or list(self.gears)
        self.config.dynamic_batching.preferred_batch_size.extend(compiled)
        field = "dynamic_batching.preferred_batch_size"
        if sizes and sizes == compiled:
            self.record(KEPT, field, f"{sizes} as written: all are compiled gears")
        elif sizes or compiled:
            self.record(
                REWRITTEN,
                field,
                f"{sizes or 'none'} -> {compiled or 'none'} (the .om's batch gears are "
                f"{self.gears or 'none'})",
            )

    def _sequence_batching(self) -> None:
        self._submessage("sequence_batching", {}, KEPT, "as written")

    def _optimization(self) -> None:
        self._submessage(
            "optimization", _OPTIMIZATION_NOTES, DROPPED, "a GPU backend optimization setting"
        )

    def _transaction_policy(self) -> None:
        self._submessage("model_transaction_policy", {}, KEPT, "as written")

    def _platform(self) -> None:
        self.record(
            REWRITTEN,
            "platform",
            f"{self.source.platform!r} -> none: backend 'python' serves the .om through model.py",
        )

    def _backend(self) -> None:
        self.record(
            REWRITTEN,
            "backend",
            f"{self.source.backend!r} -> 'python', serving the .om through model.py",
        )

    def _runtime(self) -> None:
        self.record(
            REWRITTEN,
            "runtime",
            f"{self.source.runtime!r} -> none: the Python backend's own runtime",
        )

    # -- inputs and outputs -----------------------------------------------------------------

    def _full_dims(self, tensor: Any, batched: bool) -> list[int]:
        dims = _served_dims(tensor)
        return [-1, *dims] if batched else dims

    def _from_om(self, om: Any) -> Any:
        """The base's (the `.om`'s) entry as the new config needs it: with full shapes when the
        source serves without batching what the `.om` batches."""
        entry = type(om)()
        entry.CopyFrom(om)
        if self.base.max_batch_size and not self.config.max_batch_size:
            full = self._full_dims(om, True)
            entry.ClearField("reshape")
            entry.ClearField("dims")
            entry.dims.extend(full)
            if isinstance(entry, model_config_pb2.ModelInput):
                entry.ClearField("format")  # Triton takes a format on 3 dims only
        return entry

    def _describe(self, tensor: Any) -> str:
        return f"{tensor.name} {_type_name(tensor.data_type)} {_served_dims(tensor)}"

    def _tensors(self, kind: str) -> None:
        declared = getattr(self.source, kind)
        target = getattr(self.config, kind)
        om_tensors = {tensor.name: tensor for tensor in getattr(self.base, kind)}
        for index, tensor in enumerate(declared):
            entry = target.add()
            entry.CopyFrom(tensor)
            self._tensor(f"{kind}[{index}]", kind, tensor, entry, om_tensors)
        listed = {tensor.name for tensor in declared}
        for name, om in om_tensors.items():
            if name in listed:
                continue
            path = f"{kind}[{len(target)}]"
            added = self._from_om(om)
            if kind == "input" and declared:
                self.record(
                    REFUSED,
                    path,
                    f"the .om's input {self._describe(added)} is missing from the source config: "
                    "its clients do not send it",
                )
                continue
            target.add().CopyFrom(added)
            why = "an output of the .om the source does not list" if declared else "auto-complete"
            self.record(REWRITTEN, path, f"none ({why}) -> {self._describe(added)}")

    def _tensor(
        self, path: str, kind: str, tensor: Any, entry: Any, om_tensors: dict[str, Any]
    ) -> None:
        om = om_tensors.get(tensor.name)
        if om is not None:
            if not tensor.data_type:
                entry.data_type = om.data_type
            if not tensor.dims:
                entry.MergeFrom(_only(self._from_om(om), "dims"))
                entry.MergeFrom(_only(self._from_om(om), "reshape"))
            if kind == "input":
                self._image_format(f"{path}.format", tensor, entry, om)
        for field, _ in tensor.ListFields():
            name = field.name
            where = f"{path}.{name}"
            if where in self.claimed:
                entry.ClearField(name)
            elif name == "name" and om is None:
                self.record(
                    REFUSED,
                    where,
                    f"{tensor.name!r} is not an {kind} of the .om (it has: "
                    f"{', '.join(om_tensors) or 'none'})",
                )
            elif name == "data_type" and om is not None and tensor.data_type != om.data_type:
                self.record(
                    REFUSED,
                    where,
                    f"{tensor.name!r}: the clients send {_type_name(tensor.data_type)}, the .om "
                    f"takes {_type_name(om.data_type)}",
                )
            elif name == "dims" and self.batch_in_dims and om is not None:
                full = self._full_dims(tensor, True)
                if self._check_dims(where, tensor, om, sent=full):
                    del entry.dims[:]
                    entry.dims.extend(full)
                    self.record(REWRITTEN, where, f"{_served_dims(tensor)} -> {full} (full shape)")
            elif name == "dims" and om is not None:
                self._check_dims(where, tensor, om, output=kind == "output")
            elif name == "label_filename":
                self._label_file(where, tensor.label_filename)
            elif name == "is_non_linear_format_io":
                entry.ClearField(name)
                self.record(
                    DROPPED, where, "TensorRT's non-linear I/O formats: the .om takes ND tensors"
                )
            elif name in ("name", "data_type", "dims", "reshape", "format"):
                self.record(KEPT, where, "as written")
            else:
                entry.ClearField(name)
                self.record(REFUSED, where, f"a {kind} field this migration cannot carry")

    def _image_format(self, where: str, tensor: Any, entry: Any, om: Any) -> None:
        """Give an input the source left without a format the `.om`'s image layout (the base's
        `format`, `triton_config.image_format`), where its dims take one (3, no reshape)."""
        fits = len(entry.dims) == 3 and not entry.HasField("reshape")
        if tensor.format or not om.format or not fits:
            return
        entry.format = om.format
        name = model_config_pb2.ModelInput.Format.Name(om.format)
        self.record(REWRITTEN, where, f"none -> {name} (the .om's input layout)")

    def _check_dims(
        self,
        where: str,
        tensor: Any,
        om: Any,
        sent: list[int] | None = None,
        *,
        output: bool = False,
    ) -> bool:
        """Refuse `tensor`'s dims when the full shape its clients send (`sent`, default from
        the config) does not fit the `.om`'s, or, for an `output`, when the `.om`'s shape and
        the config's differ on an axis both fix (-1: any size); keep them as written when it
        does and `sent` was not given. Whether they fit."""
        given = sent is not None
        if sent is None:
            sent = self._full_dims(tensor, self.config.max_batch_size > 0)
        takes = self._full_dims(om, self.base.max_batch_size > 0)
        compatible = len(takes) == len(sent) and all(
            have < 0 or want < 0 or have == want for have, want in zip(takes, sent)
        )
        if output and not compatible:
            self.record(
                REFUSED,
                where,
                f"output {tensor.name!r}: the config declares shape {sent}, the .om gives "
                f"{takes} (-1: any size)",
            )
            return False
        if not output and not shape_fits(sent, takes):
            self.record(
                REFUSED,
                where,
                f"{tensor.name!r}: the clients send shape {sent}, the .om takes {takes} "
                "(-1: any size)",
            )
            return False
        if not given:
            self.record(KEPT, where, f"{_served_dims(tensor)} as written (the .om takes {takes})")
        return True

    def _label_file(self, where: str, file_name: str) -> None:
        if _inside_directory(file_name):
            self.files.append(file_name)
            self.record(KEPT, where, f"{file_name!r} as written, the file copied")
        else:
            self.record(
                REFUSED, where, f"label file {file_name!r} must be inside the model directory"
            )

    # -- instances --------------------------------------------------------------------------

    def _instance_groups(self) -> None:
        groups = list(self.source.instance_group)
        ids = list(self.device_ids)
        for index, group in enumerate(groups):
            self._instance_group(f"instance_group[{index}]", group, groups)
        if not groups:  # Triton's default: one instance on each GPU
            self.devices = ids
            self.record(
                REWRITTEN,
                "instance_group",
                f"none (one instance per GPU) -> KIND_CPU count {len(ids)}, one per NPU {ids}",
            )
        self.config.instance_group.add(kind=ModelInstanceGroup.KIND_CPU, count=len(self.devices))
        for name in _SHARED_GROUP_FIELDS:
            if groups and all(getattr(g, name) == getattr(groups[0], name) for g in groups):
                self.config.instance_group[0].MergeFrom(_only(groups[0], name))

    def _instance_group(self, path: str, group: Any, groups: list[Any]) -> None:
        ids = list(self.device_ids)
        count = group.count or 1
        kind_name = ModelInstanceGroup.Kind.Name(group.kind)
        on_cpu = group.kind == ModelInstanceGroup.KIND_CPU
        if on_cpu or (group.kind == ModelInstanceGroup.KIND_MODEL and not group.gpus):
            placed = [ids[k % len(ids)] for k in range(count)]
            how = f"{count} over NPUs {ids}"
        else:  # KIND_GPU, KIND_AUTO: `count` instances on each listed (else each) device
            devices = list(group.gpus) or ids
            placed = [device for _ in range(count) for device in devices]
            how = f"{count} on each of {'GPUs' if group.gpus else 'NPUs'} {devices}"
        self.devices.extend(placed)
        for field, _ in group.ListFields():
            where = f"{path}.{field.name}"
            name = field.name
            if name == "kind" and on_cpu:
                self.record(KEPT, where, "KIND_CPU as written; its instances run on NPUs")
            elif name == "kind":
                self.record(
                    REWRITTEN,
                    where,
                    f"{kind_name} -> KIND_CPU: instance k runs on NPU device_ids[k % len] "
                    "(Triton gives a Python-backend instance no NPU)",
                )
            elif name == "count" and len(groups) == 1 and len(placed) == count:
                self.record(KEPT, where, f"{count} as written")
            elif name == "count":
                self.record(REWRITTEN, where, f"{how} -> {len(placed)} of the one KIND_CPU group")
            elif name == "gpus" and on_cpu:
                self.record(DROPPED, where, "Triton ignores the gpus of a KIND_CPU group")
            elif name == "gpus":
                self.record(
                    REWRITTEN,
                    where,
                    f"{list(group.gpus)} -> parameters[device_ids] {','.join(map(str, placed))}",
                )
            elif name in _INSTANCE_NOTES:
                self.record(DROPPED, where, _INSTANCE_NOTES[name])
            elif name in _SHARED_GROUP_FIELDS:
                if all(getattr(other, name) == getattr(group, name) for other in groups):
                    self.record(KEPT, where, "as written")
                else:
                    self.record(
                        DROPPED,
                        where,
                        "the instance groups differ in it; they become one KIND_CPU group "
                        "(device_ids is one list per model), which has none",
                    )
            else:
                self.record(REFUSED, where, "an instance group field this migration cannot carry")

    # -- parameters and warmup --------------------------------------------------------------

    def _parameters(self) -> None:
        ours = dataclasses.replace(
            ModelParameters.from_config(config_view(self.base)), device_ids=tuple(self.devices)
        )
        for key, value in self.source.parameters.items():
            if key not in PARAMETER_NAMES and not _is_framework_parameter(key):
                self.config.parameters[key].CopyFrom(value)
        ours.to_config(self.config)
        for key, value in self.source.parameters.items():
            where = f"parameters[{key}]"
            if key in PARAMETER_NAMES:
                given = self.config.parameters.get(key)
                now = None if given is None else given.string_value
                self.record(
                    REWRITTEN,
                    where,
                    f"{value.string_value!r} -> {now!r}: one of ge-python-backend's own "
                    "parameters, set for the .om",
                )
            elif _is_framework_parameter(key):
                self.record(
                    DROPPED,
                    where,
                    "an ONNX Runtime or TensorRT backend setting: the .om runs through pyACL",
                )
            else:
                self.record(KEPT, where, "the model's own parameter, as written")

    def _warmup(self) -> None:
        inputs = {tensor.name: tensor for tensor in self.config.input}
        for index, warmup in enumerate(self.source.model_warmup):
            problems = []
            files = []
            for name, data in warmup.inputs.items():
                tensor = inputs.get(name)
                if tensor is None:
                    problems.append(f"{name!r} is not an input of the model")
                elif data.dims and not shape_fits(list(data.dims), _served_dims(tensor)):
                    problems.append(
                        f"{name!r} dims {list(data.dims)}, the model takes {_served_dims(tensor)}"
                    )
                if data.input_data_file and _inside_directory(data.input_data_file):
                    files.append(f"warmup/{data.input_data_file}")
                elif data.input_data_file:
                    problems.append(
                        f"{name!r}: input_data_file {data.input_data_file!r} must be inside the "
                        "model's warmup directory"
                    )
            where = f"model_warmup[{index}]"
            if problems:
                self.record(REFUSED, where, "; ".join(problems))
                continue
            self.config.model_warmup.add().CopyFrom(warmup)
            self.files.extend(files)
            copied = f", {', '.join(files)} copied" if files else ""
            self.record(KEPT, where, f"{warmup.name!r} as written{copied}")
        if bool(self.base.max_batch_size) != bool(self.config.max_batch_size):
            return  # the base's warmup shapes have the .om's batch axis, the clients' do not
        names = {warmup.name for warmup in self.config.model_warmup}
        limit = self.config.max_batch_size
        for warmup in self.base.model_warmup:
            if warmup.name in names or (limit and warmup.batch_size > limit):
                continue
            where = f"model_warmup[{len(self.config.model_warmup)}]"
            self.config.model_warmup.add().CopyFrom(warmup)
            self.record(REWRITTEN, where, f"none -> {warmup.name!r}: a warmup of the .om's gear")


_Rule = Union[tuple[str, str], Callable[[_Rewriter], None], None]
# What becomes of each top-level field of ModelConfig: a list and its note, a handler, or None
# for the fields `_Rewriter.run` handles whether the source sets them or not.
TOP_LEVEL_FIELDS: dict[str, _Rule] = {
    "name": (KEPT, "as written"),
    "platform": _Rewriter._platform,
    "backend": _Rewriter._backend,
    "runtime": _Rewriter._runtime,
    "version_policy": (KEPT, "as written"),
    "max_batch_size": None,
    "input": None,
    "output": None,
    "batch_input": (
        REFUSED,
        "batch inputs are tensors Triton computes for ragged batches (element counts, shapes, "
        "offsets), which the .om does not take",
    ),
    "batch_output": (
        REFUSED,
        "batch outputs scatter a ragged batch's outputs per request, which needs ragged batching",
    ),
    "optimization": _Rewriter._optimization,
    "dynamic_batching": _Rewriter._dynamic_batching,
    "sequence_batching": _Rewriter._sequence_batching,
    "ensemble_scheduling": (
        REFUSED,
        "an ensemble is copied, not converted: its steps are models of their own",
    ),
    "instance_group": None,
    "default_model_filename": (
        DROPPED,
        "model.py serves each version's .om (parameter om_file names it when there are several)",
    ),
    "cc_model_filenames": (
        DROPPED,
        "model files per GPU compute capability: one .om serves every NPU of its SoC",
    ),
    "metric_tags": (KEPT, "as written"),
    "parameters": None,
    "model_warmup": None,
    "model_operations": (
        DROPPED,
        "ONNX Runtime custom-op libraries: ATC compiled the graph into the .om",
    ),
    "model_transaction_policy": _Rewriter._transaction_policy,
    "model_repository_agents": (
        DROPPED,
        "repository agents act on the source model's files (e.g. checksums of model.onnx); the "
        ".om carries its own SHA-256",
    ),
    "response_cache": (KEPT, "as written"),
    "model_metrics": (KEPT, "as written"),
}
