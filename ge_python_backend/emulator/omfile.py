"""The emulator's `.om` container: an ONNX model plus the description ATC would have compiled.

Layout: `MAGIC`, a little-endian u64 header length, the UTF-8 JSON header, the ONNX bytes, and a
32-byte SHA-256 of everything before it. `compile_onnx` writes one from an ONNX file with ATC's
flag semantics (`--input_shape`, shape ranges included, `--dynamic_batch_size`,
`--dynamic_image_size`, `--dynamic_dims`; outputs whose dims depend on the data get -1);
`OmModel.load` reads it back (`OmModel.shared`: once per file in a process) and `OmModel.run`
executes it with onnxruntime on the CPU.

Only numpy is needed to import this module; onnx and onnxruntime are imported when a model is
compiled or run. ACL's codes, data types, formats and gear kinds come from `ascend`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import struct
import threading
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from ge_python_backend.aipp import (
    AippConfigError,
    AippOp,
    StaticAipp,
    bind_static,
    check_with_dynamic_image_size,
    parse_aipp_config,
)
from ge_python_backend.ascend import (
    ATC_INPUT_FORMATS,
    ATC_MAX_GEARS,
    ATC_OM_MAGIC,
    DTYPES_BY_ACL,
    DTYPES_BY_NUMPY,
    DTYPES_BY_ONNX,
    EMULATOR_OM_MAGIC,
    LAYOUT_RANKS,
    NUMPY_BY_ACL,
    AclCode,
    AtcFramework,
    Format,
    GearKind,
    PrecisionMode,
    om_output_path,
)
from ge_python_backend.atc_onnx import parse_problems
from ge_python_backend.emulator import memory_plan, precision
from ge_python_backend.environment import EMULATOR_ORT_THREADS
from ge_python_backend.errors import UserError

if TYPE_CHECKING:
    import onnx
    import onnxruntime

logger = logging.getLogger(__name__)

MAGIC = EMULATOR_OM_MAGIC
REAL_OM_MAGIC = ATC_OM_MAGIC
HEADER_VERSION = 2  # 2: the memory plan (`memory`)
_LENGTH = struct.Struct("<Q")
_TRAILER_SIZE = 32
_MIN_SIZE = len(MAGIC) + _LENGTH.size + _TRAILER_SIZE

# the --framework values accepted
STAND_IN_FRAMEWORKS = (AtcFramework.ONNX, AtcFramework.TENSORFLOW)

Shape = tuple[int, ...]
Gear = tuple[int, ...]
PathLike = Union[str, "os.PathLike[str]"]


class OmFormatError(UserError):
    """An `.om` that cannot be loaded; `acl_code` is what `acl.mdl.load_from_file` returns."""

    def __init__(self, acl_code: int, message: str) -> None:
        super().__init__(message)
        self.acl_code = acl_code


class OmCompileError(UserError):
    """`compile_onnx` was asked for something ATC (or the emulator) does not allow."""


@dataclasses.dataclass(frozen=True)
class OmTensor:
    """One model input or output as the model description reports it."""

    name: str
    acl_dtype: int
    acl_format: int
    dims: Shape  # -1 on dynamic axes (inputs); the largest gear's dims (outputs)
    # shape-range inputs and data-dependent outputs: (lower, upper) per dim, upper -1 when
    # unbounded, lower == upper on static dims; () for a tensor without ranges
    ranges: tuple[tuple[int, int], ...] = ()

    def upper_bytes(self) -> int:
        """Bytes at the ranges' upper bounds (what get_*_size_by_index reports); 0 if any is
        unbounded."""
        uppers = [hi for _, hi in self.ranges] if self.ranges else list(self.dims)
        if any(d < 0 for d in uppers):
            return 0
        return math.prod(uppers) * NUMPY_BY_ACL[self.acl_dtype].itemsize


@dataclasses.dataclass(frozen=True)
class OmDescription:
    """What `acl.mdl.get_desc` reports, plus every gear's concrete output shapes."""

    inputs: tuple[OmTensor, ...]
    outputs: tuple[OmTensor, ...]
    dynamic_kind: GearKind
    # batch: (b,); hw: (h, w); dims: one value per -1 dim, inputs in `shape_order` (ATC assigns
    # --dynamic_dims values in --input_shape order, not in the graph's input order)
    gears: tuple[Gear, ...]
    soc_version: str
    gear_output_shapes: tuple[tuple[Shape, ...], ...]  # per gear in `gears` order; one if static
    # input names in --input_shape order (GE's user_designate_shape_order); () = graph order
    shape_order: tuple[str, ...] = ()
    # ATC's --insert_op_conf text, recorded so the loaded model reports and runs its AIPP
    aipp_config: str = ""

    def aipp_ops(self) -> dict[int, AippOp]:
        """The AIPP op of each graph input that has one (by `related_input_rank`)."""
        if not self.aipp_config:
            return {}
        return {op.related_input_rank: op for op in parse_aipp_config(self.aipp_config)}

    def static_aipp(self, index: int) -> dict[Gear | None, StaticAipp]:
        """Graph input `index`'s static AIPP bound to that input's shape in each gear (key None
        for a model without gears), in gear order: with batch or HW gears ATC puts one AIPP
        node in every gear's branch (insert_aipp_op_util.cc GetAllAipps); {} without one."""
        op = self.aipp_ops().get(index)
        if op is None or not op.is_static:
            return {}
        tensor = self.inputs[index]
        fmt, dtype = Format(tensor.acl_format), DTYPES_BY_ACL[tensor.acl_dtype]
        return {
            gear: bind_static(op, self.input_shapes(gear)[index], fmt, dtype)
            for gear in (self.gears or (None,))
        }

    @property
    def dynamic_shape(self) -> bool:
        """No gears, but -1 dims: shape-range inputs or data-dependent outputs. Executions take
        each input's real dims from its dataset tensor desc and report each output's in an
        output tensor desc."""
        return self.dynamic_kind == GearKind.STATIC and any(
            -1 in t.dims for t in self.inputs + self.outputs
        )

    def ordered_inputs(self) -> list[int]:
        """Indices of the inputs in --input_shape order (graph order without --input_shape)."""
        index = {t.name: i for i, t in enumerate(self.inputs)}
        return [index[name] for name in self.shape_order] or list(range(len(self.inputs)))

    def ordered_dims(self, gear: Sequence[int] | None = None) -> list[int]:
        """Every dim of the inputs in --input_shape order, concatenated: -1 on dynamic dims
        without a gear, else the gear's values (what get_input_dynamic_dims lists per gear)."""
        shapes = self.input_shapes(gear) if gear is not None else [t.dims for t in self.inputs]
        return [d for i in self.ordered_inputs() for d in shapes[i]]

    def input_shapes(self, gear: Sequence[int] | None) -> list[Shape]:
        """Concrete input shapes for `gear` (None for a static model)."""
        self._gear_index(gear)
        return _fill_gear(
            self.dynamic_kind, [t.dims for t in self.inputs], gear, self.ordered_inputs()
        )

    def output_shapes(self, gear: Sequence[int] | None) -> list[Shape]:
        """Output shapes recorded at compile time for `gear` (None for a static model)."""
        return list(self.gear_output_shapes[self._gear_index(gear)])

    def largest_gear(self) -> Gear | None:
        """The gear with the most input elements (what the size queries report); None if static."""
        if not self.gears:
            return None
        return max(self.gears, key=lambda g: _elements(self.input_shapes(g)))

    def _gear_index(self, gear: Sequence[int] | None) -> int:
        if self.dynamic_kind == GearKind.STATIC:
            if gear is not None:
                raise ValueError(f"the model is static: gear must be None, got {tuple(gear)}")
            return 0
        key = None if gear is None else tuple(int(v) for v in gear)
        if key in self.gears:
            return self.gears.index(key)
        label = self.dynamic_kind.atc_description
        allowed = ", ".join(_gear_text(g) for g in self.gears)
        if key is None:
            raise ValueError(f"the model has {label} gears; choose one of: {allowed}")
        raise ValueError(f"{_gear_text(key)} is not one of the model's {label} gears: {allowed}")


class OmModel:
    """A loaded emulator `.om`; `run` executes it with onnxruntime on the CPU."""

    def __init__(self, source: str, header: dict[str, Any], onnx_bytes: bytes) -> None:
        self.source = source  # the file name, or a note that the model came from memory
        self.header = header  # the parsed JSON header (flags, ONNX provenance, ...)
        self.description = _description_from_header(header, source)
        try:
            self.memory = memory_plan.MemoryPlan.from_header(header["memory"])
        except (KeyError, TypeError, ValueError) as exc:
            raise OmFormatError(
                AclCode.PARSE_MODEL,
                f"{source} has an invalid memory plan ({type(exc).__name__}: {exc})",
            ) from exc
        # until the engine is made from them (then they would only double what it holds: 835
        # MiB for BERT-base's graph)
        self._onnx_bytes: bytes | None = onnx_bytes
        self._session: onnxruntime.InferenceSession | None = None
        self._session_lock = threading.Lock()

    @classmethod
    def load(cls, path_or_bytes: PathLike | bytes | bytearray | memoryview) -> OmModel:
        """Read and verify an emulator `.om` from a path or from its bytes; raises OmFormatError."""
        if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            data = bytes(path_or_bytes)
            return cls._parse(data, f"model data in memory ({len(data)} bytes)")
        source = os.fspath(path_or_bytes)
        with _read_failure(source), open(source, "rb") as file:
            return cls._parse(file.read(), source)

    @classmethod
    def shared(cls, path: PathLike) -> OmModel:
        """The process's one `OmModel` of the file at `path`, and so one onnxruntime session
        (whose `run` is thread-safe), however many model ids load it: one per file identity
        (device, inode, size, modification time) and checksum (the file's last 32 bytes: a
        rewrite within the clock's tick keeps the time), so hard links share it and a changed
        file is read again. The cache holds weak references: an engine lives while a loaded
        model, a model description or queued work holds it, and goes with the last of them."""
        source = os.fspath(path)
        with _read_failure(source), open(source, "rb") as file:
            info = os.fstat(file.fileno())
            trailer = os.pread(file.fileno(), _TRAILER_SIZE, max(0, info.st_size - _TRAILER_SIZE))
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, trailer)
            with _SHARED_LOCK:
                om = _SHARED.get(key)
            if om is None:
                om = cls._parse(file.read(), source)
                with _SHARED_LOCK:
                    om = _SHARED.setdefault(key, om)  # a thread that read it first wins
        return om

    @classmethod
    def _parse(cls, data: bytes, source: str) -> OmModel:
        header, onnx_bytes = _unpack(data, source)
        return cls(source, header, onnx_bytes)

    def run(
        self, inputs: Sequence[np.ndarray], gear: Sequence[int] | None = None
    ) -> list[np.ndarray]:
        """Run the model on `inputs` (model input order) for `gear`.

        For a dynamic model `gear=None` picks the gear whose shapes match the inputs. Raises
        ValueError when the count, a dtype or a shape does not match the model.
        """
        desc = self.description
        if len(inputs) != len(desc.inputs):
            raise ValueError(
                f"{self.source} has {len(desc.inputs)} inputs "
                f"({', '.join(t.name for t in desc.inputs)}), got {len(inputs)} arrays"
            )
        if gear is None and desc.gears:
            gear = self._gear_of([a.shape for a in inputs])
        shapes = desc.input_shapes(gear)
        feeds = {}
        for tensor, array, shape in zip(desc.inputs, inputs, shapes):
            expected = NUMPY_BY_ACL[tensor.acl_dtype]
            if array.dtype != expected:
                raise ValueError(f"input {tensor.name} must be {expected}, got {array.dtype}")
            if tensor.ranges:
                if not in_ranges(tensor, tuple(array.shape)):
                    raise ValueError(
                        f"input {tensor.name} has shape {list(array.shape)}, outside its range "
                        f"{ranges_text(tensor.ranges)}"
                    )
            elif tuple(array.shape) != shape:
                where = "" if gear is None else f" for {_gear_text(tuple(gear))}"
                raise ValueError(
                    f"input {tensor.name} must have shape {list(shape)}{where}, "
                    f"got {list(array.shape)}"
                )
            feeds[tensor.name] = array
        outputs = self._get_session().run(None, feeds)
        return [np.asarray(out) for out in outputs]

    @property
    def onnx_bytes(self) -> bytes:
        """The ONNX graph the .om carries, until the model first runs (its engine then holds
        the graph; RuntimeError after)."""
        if self._onnx_bytes is None:
            raise RuntimeError(f"{self.source}: the ONNX graph went into its engine")
        return self._onnx_bytes

    def _gear_of(self, shapes: list[tuple[int, ...]]) -> Gear:
        desc = self.description
        for gear in desc.gears:
            if desc.input_shapes(gear) == [tuple(s) for s in shapes]:
                return gear
        allowed = "; ".join(
            f"{_gear_text(g)}: {[list(s) for s in desc.input_shapes(g)]}" for g in desc.gears
        )
        raise ValueError(
            f"input shapes {[list(s) for s in shapes]} match no gear of {self.source}; "
            f"allowed: {allowed}"
        )

    def _get_session(self) -> onnxruntime.InferenceSession:
        with self._session_lock:
            if self._session is None:
                self._session = _new_session(self.onnx_bytes)
                self._onnx_bytes = None
            return self._session


# `OmModel.shared`'s engines by file identity (st_dev, st_ino, st_size, st_mtime_ns, trailer)
_SHARED: weakref.WeakValueDictionary[tuple[int, int, int, int, bytes], OmModel] = (
    weakref.WeakValueDictionary()
)
_SHARED_LOCK = threading.Lock()


@contextlib.contextmanager
def _read_failure(source: str) -> Iterator[None]:
    """An OSError reading model file `source` as OmFormatError (ACL's read failure)."""
    try:
        yield
    except OSError as exc:
        raise OmFormatError(
            AclCode.READ_MODEL_FAILURE, f"cannot read model file {source}: {exc.strerror or exc}"
        ) from exc


def compile_onnx(
    model: PathLike,
    output: PathLike,
    *,
    input_shape: str | None = None,
    dynamic_batch_size: str | None = None,
    dynamic_image_size: str | None = None,
    dynamic_dims: str | None = None,
    input_format: str | None = None,
    soc_version: str = "Ascend310P3",
    out_nodes: str | None = None,
    framework: int = AtcFramework.ONNX,
    insert_op_conf: PathLike | None = None,
    precision_mode: PrecisionMode | str | None = None,
    precision_mode_v2: str | None = None,
    keep_dtype: PathLike | None = None,
    output_type: str | None = None,
    modify_mixlist: PathLike | None = None,
) -> Path:
    """Compile an ONNX file into an emulator `.om` as ATC would; returns the path written.

    The file is `<output>.om` (`output` itself if it already ends in `.om`). `input_format`
    defaults to ND with `dynamic_dims` (the only format ATC accepts with it) and NCHW otherwise.
    `out_nodes` is ATC's `--out_nodes` (`node:idx;...` or, for ONNX, output names); `framework`
    3 compiles the ONNX as a stand-in for a TensorFlow model (its outputs get TensorFlow's names).
    Output names are ATC's (see `_output_names`). `insert_op_conf` is ATC's AIPP config file (see
    `aipp.parse_aipp_config`). `precision_mode` or `precision_mode_v2` (ATC's flags, one at
    most; default force_fp16), `keep_dtype` (ATC's file of operators kept in their type),
    `modify_mixlist` (ATC's JSON changes to allow_mix_precision's lists) and `output_type`
    (ATC's `FP16` or `node:idx:FP16;...`) set the precision the compiled graph
    computes in (see `precision`); the header records the resolved mode. Raises OmCompileError
    for anything ATC or the emulator would refuse: first what ATC's ONNX parser cannot take
    (`atc_onnx.parse_problems`, the pre-flight `migrate` runs too).
    """
    import onnx

    model_path = Path(model)
    try:
        source_bytes = model_path.read_bytes()
        proto = onnx.load(str(model_path))
    except OSError as exc:
        raise OmCompileError(f"cannot read --model {model_path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # onnx raises protobuf's DecodeError and others
        raise OmCompileError(f"--model {model_path} is not a valid ONNX model: {exc}") from exc
    refused = parse_problems(proto)
    if refused:
        raise OmCompileError("\n".join(f"--model {model_path}: {problem}" for problem in refused))
    if input_format is None:
        input_format = "ND" if dynamic_dims is not None else "NCHW"
    accepted = [f.name for f in ATC_INPUT_FORMATS]
    if input_format not in accepted:
        raise OmCompileError(
            f"--input_format {input_format!r} is not supported; use one of {', '.join(accepted)}"
        )

    try:
        mode = precision.resolve_mode(precision_mode, precision_mode_v2)
        precision.check_soc(mode, soc_version)
    except precision.PrecisionError as exc:
        raise OmCompileError(str(exc)) from None
    if framework not in STAND_IN_FRAMEWORKS:
        raise OmCompileError(
            f"framework {framework} is not supported: 5 (ONNX) or 3 (an ONNX stand-in for a "
            "TensorFlow model)"
        )
    gear_flags = (dynamic_batch_size, dynamic_image_size, dynamic_dims)
    ranged = all(flag is None for flag in gear_flags)
    inputs, order = _input_tensors(proto, input_shape, Format[input_format], model_path, ranged)
    if dynamic_dims is not None and dynamic_batch_size is None and dynamic_image_size is None:
        _check_dims_inputs(inputs, order, input_format)
    kind, gears = _gears(inputs, order, dynamic_batch_size, dynamic_image_size, dynamic_dims)
    output_names = _output_names(proto, out_nodes, framework)
    graph_outline, fp16_nodes = _apply_precision(
        proto, mode, keep_dtype, output_type, out_nodes, modify_mixlist, soc_version
    )
    aipp_config = "" if insert_op_conf is None else _read_aipp_config(insert_op_conf, kind)
    onnx_bytes = proto.SerializeToString()
    probed = inputs if kind != GearKind.STATIC else _probe_inputs(inputs)
    output_shapes = _probe_outputs(onnx_bytes, probed, kind, gears, order, model_path)
    desc = OmDescription(inputs, (), kind, gears, soc_version, output_shapes, order, aipp_config)
    _check_aipp_inputs(desc)
    largest_shapes = desc.output_shapes(desc.largest_gear())
    nd = Format.ND  # ATC reports outputs as ND
    outputs = tuple(
        OmTensor(name, _acl_dtype(o.type.tensor_type.elem_type, f"output {o.name}"), nd, dims)
        for name, o, dims in zip(output_names, proto.graph.output, largest_shapes)
    )
    if kind == GearKind.STATIC:
        outputs = _static_outputs(proto, inputs, outputs)
        output_shapes = (tuple(t.dims for t in outputs),)
        desc = dataclasses.replace(desc, gear_output_shapes=output_shapes)
    flags = {
        "model": str(model),
        "framework": framework,
        "out_nodes": out_nodes,
        "output": str(output),
        "input_shape": input_shape,
        "dynamic_batch_size": dynamic_batch_size,
        "dynamic_image_size": dynamic_image_size,
        "dynamic_dims": dynamic_dims,
        "input_format": input_format,
        "soc_version": soc_version,
        "insert_op_conf": None if insert_op_conf is None else os.fspath(insert_op_conf),
        "precision_mode": mode.value,
        "precision_mode_v2": precision_mode_v2,
        "keep_dtype": None if keep_dtype is None else os.fspath(keep_dtype),
        "modify_mixlist": None if modify_mixlist is None else os.fspath(modify_mixlist),
        "output_type": output_type,
    }
    header = _description_to_header(dataclasses.replace(desc, outputs=outputs))
    header["memory"] = memory_plan.plan_memory(
        graph_outline, _planned_input_shapes(desc), fp16_nodes
    ).to_header()
    header["flags"] = {k: v for k, v in flags.items() if v is not None}
    header["onnx"] = {
        "path": str(model_path.resolve()),
        "sha256": hashlib.sha256(source_bytes).hexdigest(),
        "size": len(source_bytes),
    }
    return _write(om_output_path(output), header, onnx_bytes)


# ----------------------------------------------------------------------------- container


def _write(path: Path, header: dict[str, Any], onnx_bytes: bytes) -> Path:
    header_bytes = json.dumps(header, sort_keys=True).encode("utf-8")
    body = MAGIC + _LENGTH.pack(len(header_bytes)) + header_bytes + onnx_bytes
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(body + hashlib.sha256(body).digest())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OmCompileError(f"cannot write {path}: {exc.strerror or exc}") from exc
    return path


def _unpack(data: bytes, source: str) -> tuple[dict[str, Any], bytes]:
    if data.startswith(REAL_OM_MAGIC):
        raise OmFormatError(
            AclCode.DESERIALIZE_MODEL,
            f"{source} is a real ATC .om (it starts with b'IMOD'); the emulator only runs .om "
            "files made by `ge-python-model emulator compile`. Real .om files need real pyACL "
            "(CANN) on an Ascend host.",
        )
    if not MAGIC.startswith(data[: len(MAGIC) - 1]):  # a short prefix of MAGIC is truncated
        raise OmFormatError(
            AclCode.PARSE_MODEL,
            f"{source} is not an .om file (unknown content starting with {data[:8]!r})",
        )
    if len(data) >= len(MAGIC) and data[: len(MAGIC)] != MAGIC:
        raise OmFormatError(
            AclCode.PARSE_MODEL,
            f"{source} is an emulator .om of an unknown container version "
            f"{data[len(MAGIC) - 1 : len(MAGIC)]!r}; this build reads version {MAGIC[-1:]!r}",
        )
    header_len = _LENGTH.unpack_from(data, len(MAGIC))[0] if len(data) >= _MIN_SIZE else 0
    if len(data) < _MIN_SIZE + header_len:
        raise OmFormatError(AclCode.PARSE_MODEL, f"{source} is truncated ({len(data)} bytes)")
    body = memoryview(data)[:-_TRAILER_SIZE]  # not copied: the ONNX is, once, below
    if hashlib.sha256(body).digest() != data[-_TRAILER_SIZE:]:
        raise OmFormatError(
            AclCode.PARSE_MODEL,
            f"{source} fails its SHA-256 check: the file is truncated or was altered",
        )
    start = len(MAGIC) + _LENGTH.size
    try:
        header = json.loads(bytes(body[start : start + header_len]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise OmFormatError(
            AclCode.PARSE_MODEL, f"{source} has an unreadable header: {exc}"
        ) from exc
    return header, bytes(body[start + header_len :])


def _description_to_header(desc: OmDescription) -> dict[str, Any]:
    def tensors(items: tuple[OmTensor, ...]) -> list[dict[str, Any]]:
        return [
            {
                "name": t.name,
                "dtype": t.acl_dtype,
                "format": t.acl_format,
                "dims": list(t.dims),
                **({"ranges": [list(r) for r in t.ranges]} if t.ranges else {}),
            }
            for t in items
        ]

    return {
        "version": HEADER_VERSION,
        "soc_version": desc.soc_version,
        "dynamic_kind": desc.dynamic_kind.value,
        "gears": [list(g) for g in desc.gears],
        "inputs": tensors(desc.inputs),
        "outputs": tensors(desc.outputs),
        "output_shapes": [[list(s) for s in shapes] for shapes in desc.gear_output_shapes],
        "shape_order": list(desc.shape_order),
        "aipp_config": desc.aipp_config,
    }


def _description_from_header(header: dict[str, Any], source: str) -> OmDescription:
    def tensors(items: list[dict[str, Any]]) -> tuple[OmTensor, ...]:
        return tuple(
            OmTensor(
                str(t["name"]),
                int(t["dtype"]),
                int(t["format"]),
                _ints(t["dims"]),
                tuple(_range(r) for r in t.get("ranges", [])),
            )
            for t in items
        )

    try:
        if header["version"] != HEADER_VERSION:
            raise ValueError(f"header version {header['version']}, expected {HEADER_VERSION}")
        desc = OmDescription(
            inputs=tensors(header["inputs"]),
            outputs=tensors(header["outputs"]),
            dynamic_kind=_gear_kind(header["dynamic_kind"]),
            gears=tuple(_ints(g) for g in header["gears"]),
            soc_version=str(header["soc_version"]),
            gear_output_shapes=tuple(
                tuple(_ints(s) for s in shapes) for shapes in header["output_shapes"]
            ),
            # files written before the order was recorded listed dims gears in graph order
            shape_order=tuple(str(name) for name in header.get("shape_order", [])),
            aipp_config=str(header.get("aipp_config", "")),
        )
        names = [t.name for t in desc.inputs]
        if any(name not in names for name in desc.shape_order):
            raise ValueError(f"shape_order {list(desc.shape_order)} names unknown inputs")
        unknown = [
            t.acl_dtype for t in desc.inputs + desc.outputs if t.acl_dtype not in NUMPY_BY_ACL
        ]
        if unknown:
            raise ValueError(f"unknown dtype codes {unknown}")
        if len(desc.gear_output_shapes) != max(1, len(desc.gears)):
            raise ValueError("output shapes do not match the gears")
        _check_aipp_inputs(desc)
        if any(t.ranges and len(t.ranges) != len(t.dims) for t in desc.inputs + desc.outputs):
            raise ValueError("ranges do not match the dims")
    except (KeyError, TypeError, ValueError) as exc:
        raise OmFormatError(
            AclCode.PARSE_MODEL, f"{source} has an invalid header ({type(exc).__name__}: {exc})"
        ) from exc
    return desc


# ----------------------------------------------------------------------------- compiling


def _input_tensors(
    proto: onnx.ModelProto,
    input_shape: str | None,
    acl_format: int,
    model_path: Path,
    ranged: bool,
) -> tuple[tuple[OmTensor, ...], tuple[str, ...]]:
    """The graph's real inputs with their dims (`--input_shape` where given, else ONNX's), and
    the names `--input_shape` lists, in its order (() without `--input_shape`). With `ranged`
    (no gear option) the -1 and `lo~hi` dims of `--input_shape` are shape ranges."""
    initializers = {init.name for init in proto.graph.initializer}
    graph_inputs = [i for i in proto.graph.input if i.name not in initializers]
    names = [i.name for i in graph_inputs]
    given_ranges = _parse_input_shape(input_shape, names, ranged) if input_shape else {}
    given = {
        name: tuple(-1 if lo != hi else lo for lo, hi in ranges)
        for name, ranges in given_ranges.items()
    }
    tensors = []
    for value in graph_inputs:
        tensor_type = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise OmCompileError(f"input {value.name} of {model_path} is not a tensor")
        onnx_dims: Shape | None = None
        if tensor_type.HasField("shape"):
            onnx_dims = tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1
                for d in tensor_type.shape.dim
            )
        dims = given.get(value.name, onnx_dims)
        if dims is None:
            raise OmCompileError(
                f"input {value.name} of {model_path} has no shape in the ONNX graph; "
                "give it with --input_shape"
            )
        if onnx_dims is not None and len(dims) != len(onnx_dims):
            raise OmCompileError(
                f"--input_shape gives {value.name} {len(dims)} dims but the ONNX input has "
                f"{len(onnx_dims)} ({_shape_text(onnx_dims)})"
            )
        ranges = given_ranges.get(value.name, ())
        # A layout names the axes of tensors of its rank only; ATC records the others as ND.
        fits = LAYOUT_RANKS.get(acl_format, len(dims)) == len(dims)
        tensors.append(
            OmTensor(
                value.name,
                _acl_dtype(tensor_type.elem_type, f"input {value.name}"),
                acl_format if fits else Format.ND,
                dims,
                ranges if ranged and -1 in dims else (),
            )
        )
    return tuple(tensors), tuple(given)


def _parse_input_shape(
    text: str, names: list[str], ranged: bool
) -> dict[str, tuple[tuple[int, int], ...]]:
    """Parse ATC's `name:d0,d1,...;name2:...` into (lower, upper) per dim: `d` is (d, d); -1 is
    (-1, -1) with a gear option, else a shape range of any size >= 0, (0, -1); `lo~hi` is a
    shape range (--input_shape.md: ranges and -1 without gears make a dynamic-shape model;
    ATC does not combine them with gear options)."""
    shapes: dict[str, tuple[tuple[int, int], ...]] = {}
    for entry in text.split(";"):
        name, sep, dims_text = entry.strip().rpartition(":")
        if not sep or not name:
            raise OmCompileError(
                f'--input_shape entry {entry!r} is not name:dims (example: "x:-1,3,224,224")'
            )
        if name not in names:
            raise OmCompileError(
                f"--input_shape names {name!r}, which is not an input of the model; "
                f"the inputs are: {', '.join(names)}"
            )
        if name in shapes:
            raise OmCompileError(f"--input_shape gives {name!r} twice")
        items = [d.strip() for d in dims_text.split(",")] if dims_text.strip() else []
        ranges = tuple(_parse_dim(item, ranged) for item in items)
        if any(r is None for r in ranges):
            ranges_note = "ranges lo~hi" if ranged else "ranges lo~hi only without gear options"
            raise OmCompileError(
                f"--input_shape dims of {name!r} must be positive integers or -1, got "
                f"{dims_text!r} (also {ranges_note})"
            )
        shapes[name] = tuple(r for r in ranges if r is not None)
    return shapes


def _parse_dim(item: str, ranged: bool) -> tuple[int, int] | None:
    """One `--input_shape` dim as (lower, upper); None if it is not valid."""
    lo_text, tilde, hi_text = item.partition("~")
    try:
        lo, hi = int(lo_text), int(hi_text if tilde else lo_text)
    except ValueError:
        return None
    if tilde:
        return (lo, hi) if ranged and 0 <= lo <= hi and hi > 0 else None
    if lo == -1:
        return (0, -1) if ranged else (-1, -1)
    return (lo, lo) if lo > 0 else None


def _check_dims_inputs(
    inputs: tuple[OmTensor, ...], order: tuple[str, ...], input_format: str
) -> None:
    """ATC's rules for --dynamic_dims (graphengine ge/ir_build/atc_ir_common.cc,
    CheckDynamicDimsInputShapeValid): --input_format ND, 1 to 4 dims per --input_shape entry;
    and every input with -1 dims must be named in --input_shape (its order sets the gears')."""
    if input_format != "ND":
        raise OmCompileError(
            f"E10001: Value [{input_format}] for parameter [--input_format] is invalid. "
            "Reason: input_format must be ND when set dynamic_dims"
        )
    by_name = {t.name: t for t in inputs}
    for name in order:
        count = len(by_name[name].dims)
        if not 1 <= count <= 4:
            raise OmCompileError(
                f"E10001: Value [{count}] for parameter [--input_shape's dim] is invalid. "
                f"Reason: Dim num must within [1, 4] when set dynamic_dims (input {name})"
            )
    unnamed = [t.name for t in inputs if -1 in t.dims and t.name not in order]
    if unnamed:
        raise OmCompileError(
            f"--dynamic_dims: inputs {', '.join(unnamed)} have -1 dims but are not named in "
            "--input_shape, whose order sets the order of each gear's values"
        )


def _gears(
    inputs: tuple[OmTensor, ...],
    order: tuple[str, ...],
    dynamic_batch_size: str | None,
    dynamic_image_size: str | None,
    dynamic_dims: str | None,
) -> tuple[GearKind, tuple[Gear, ...]]:
    """Check the gear option against the inputs' -1 dims; returns (dynamic_kind, gears)."""
    options = {
        "--dynamic_batch_size": dynamic_batch_size,
        "--dynamic_image_size": dynamic_image_size,
        "--dynamic_dims": dynamic_dims,
    }
    chosen = [flag for flag, value in options.items() if value is not None]
    if len(chosen) > 1:
        raise OmCompileError(f"give only one of {', '.join(options)}; got {' and '.join(chosen)}")
    dynamic = [t for t in inputs if -1 in t.dims]
    if not chosen:
        unnamed = [t for t in dynamic if not t.ranges]
        if unnamed:
            # --input_shape.md: a model whose inputs are not fixed needs --input_shape
            listed = "; ".join(f"{t.name}:{_shape_text(t.dims)}" for t in unnamed)
            raise OmCompileError(
                f"inputs have dynamic dims in the ONNX graph ({listed}) that --input_shape does "
                "not give, and no gear option was given: fix them, give shape ranges (lo~hi, "
                "or -1 for any size), or give -1 with --dynamic_batch_size, "
                "--dynamic_image_size or --dynamic_dims"
            )
        return GearKind.STATIC, ()
    flag = chosen[0]
    text = options[flag] or ""
    if not dynamic:
        raise OmCompileError(
            f"{flag} needs -1 dims in the input shapes, but every input is static "
            f"({'; '.join(f'{t.name}:{_shape_text(t.dims)}' for t in inputs)}); "
            "mark the dynamic dims with --input_shape"
        )
    if flag == "--dynamic_batch_size":
        # ATC (option_utils.cc CheckDynamicBatchSizeInputShapeValid, multi_batch_options.cc
        # CheckDynamicBatchShape): inputs without -1 stay as they are (static side inputs); an
        # input with -1 has it on axis 0 only, and at least one input has it.
        for t in dynamic:
            if [i for i, d in enumerate(t.dims) if d == -1] != [0]:
                raise OmCompileError(
                    f"E10018: Only batch N can be -1 when set --dynamic_batch_size; "
                    f"{t.name} is {_shape_text(t.dims)}"
                )
        expected = 'positive batch sizes separated by ",", e.g. "1,2,4,8"'
        return GearKind.BATCH, tuple(sorted(_parse_gears(flag, text.split(","), 1, expected)))
    if flag == "--dynamic_image_size":
        for t in dynamic:
            if t.dims.count(-1) != 2:
                raise OmCompileError(
                    f"--dynamic_image_size needs each dynamic input to have exactly two -1 dims "
                    f"(H and W); {t.name} is {_shape_text(t.dims)}"
                )
        expected = 'gears separated by ";", each "height,width", e.g. "224,224;448,448"'
        return GearKind.HW, _parse_gears(flag, text.split(";"), 2, expected)
    count = sum(t.dims.count(-1) for t in inputs)
    by_name = {t.name: t for t in inputs}
    ordered = [by_name[name] for name in order] or list(inputs)
    order_text = "; ".join(f"{t.name}:{_shape_text(t.dims)}" for t in ordered if -1 in t.dims)
    expected = (
        f'gears separated by ";", each with {count} comma-separated values, one per -1 dim '
        f"of the inputs in --input_shape order ({order_text})"
    )
    return GearKind.DIMS, _parse_gears(flag, text.split(";"), count, expected)


def _parse_gears(flag: str, items: list[str], size: int, expected: str) -> tuple[Gear, ...]:
    """Parse gears of `size` comma-separated values each: positive, unique, at most
    ATC_MAX_GEARS."""
    gears: list[Gear] = []
    for item in items:
        try:
            gear = tuple(int(v) for v in item.split(","))
        except ValueError:
            gear = ()
        if len(gear) != size or min(gear, default=0) <= 0:
            raise OmCompileError(f"{flag}: bad gear {item.strip()!r}; expected {expected}")
        if gear in gears:
            raise OmCompileError(f"{flag}: gear {item.strip()!r} is given twice")
        gears.append(gear)
    if len(gears) > ATC_MAX_GEARS:
        raise OmCompileError(f"{flag} has {len(gears)} gears; ATC allows at most {ATC_MAX_GEARS}")
    return tuple(gears)


def _output_names(proto: onnx.ModelProto, out_nodes: str | None, framework: int) -> list[str]:
    """The outputs' names as ATC writes them (api/atc/omg.cc CreateOutputNodesInfo, read back by
    davinci_model.cc InitOutputDescInfo; aclmdlGetOutputNameByIndex.md): `op:idx:name` for an
    ONNX output (`op` the node making it, unnamed nodes named `<op_type>_<k>` as ATC's ONNX
    parser does), `op:idx` for a TensorFlow model or for ONNX outputs chosen with `--out_nodes
    node:idx`. `--out_nodes` also chooses the outputs (and their order): `proto` is changed to
    return them. Real ATC may name a fused op instead of the source node."""
    producers = _producers(proto)
    graph = proto.graph
    if out_nodes is not None:
        entries = [entry.strip() for entry in out_nodes.split(";") if entry.strip()]
        outputs = {o.name: o for o in graph.output}
        nodes = {f"{node}:{index}": tensor for tensor, (node, index) in producers.items()}
        if entries and all(entry in nodes for entry in entries):
            chosen = [_value_info(proto, nodes[entry]) for entry in entries]
            del graph.output[:]
            graph.output.extend(chosen)
            return entries
        if (
            framework == AtcFramework.TENSORFLOW
            or not entries
            or not all(entry in outputs for entry in entries)
        ):
            forms = f"node:index entries of the graph ({', '.join(sorted(nodes))})"
            if framework != AtcFramework.TENSORFLOW:
                forms += f", or output names ({', '.join(outputs)})"
            raise OmCompileError(f"--out_nodes {out_nodes!r}: give {forms}, one form only")
        chosen = [outputs[entry] for entry in entries]
        del graph.output[:]
        graph.output.extend(chosen)
    names = []
    for output in graph.output:
        node, index = producers.get(output.name, (output.name, 0))  # an input returned as is
        with_tensor = framework != AtcFramework.TENSORFLOW
        names.append(f"{node}:{index}:{output.name}" if with_tensor else f"{node}:{index}")
    return names


def _producers(proto: onnx.ModelProto) -> dict[str, tuple[str, int]]:
    """Tensor name -> (name of the node making it, its output index)."""
    producers: dict[str, tuple[str, int]] = {}
    for node, name in zip(proto.graph.node, _node_names(proto)):
        for index, tensor in enumerate(node.output):
            if tensor:
                producers[tensor] = (name, index)
    return producers


def _node_names(proto: onnx.ModelProto) -> list[str]:
    """Each node's name as ATC's ONNX parser gives it: unnamed nodes are `<op_type>_<k>`."""
    names = []
    unnamed = 0
    for node in proto.graph.node:
        name = node.name
        if not name:
            name = f"{node.op_type}_{unnamed}"
            unnamed += 1
        names.append(name)
    return names


def _apply_precision(
    proto: onnx.ModelProto,
    mode: PrecisionMode,
    keep_dtype: PathLike | None,
    output_type: str | None,
    out_nodes: str | None,
    modify_mixlist: PathLike | None,
    soc_version: str,
) -> tuple[onnx.ModelProto, list[int]]:
    """Rewrite the graph for ATC's precision flags (see `precision`), outputs already chosen;
    returns the graph's outline after ATC's fusions (`memory_plan.outline`, before the
    rewrite) and the indexes of its nodes that compute in FP16."""
    names = _node_names(proto)
    producers = _producers(proto)
    try:
        op_types = [node.op_type for node in proto.graph.node]
        keep = precision.KeepDtype()
        if keep_dtype is not None:
            keep = precision.read_keep_dtype(Path(keep_dtype), names, op_types)
        mix = precision.MixLists()
        if modify_mixlist is not None:
            mix = precision.read_modify_mixlist(Path(modify_mixlist), op_types)
            if mode != PrecisionMode.ALLOW_MIX_PRECISION:
                logger.info(
                    "--modify_mixlist changes allow_mix_precision's lists; %s ignores it", mode
                )
        types: list[str | None] = []
        if output_type is not None:
            outputs = [producers.get(o.name, (o.name, 0)) for o in proto.graph.output]
            types = precision.parse_output_type(output_type, outputs, out_nodes)
        fused = precision.fuse_graph(proto, names)
        graph_outline = memory_plan.outline(proto)
        fp16 = precision.apply_precision(proto, mode, fused, keep, types, mix, soc_version)
    except precision.PrecisionError as exc:
        raise OmCompileError(str(exc)) from None
    logger.debug("%s: %d of %d operators run in FP16", mode, len(fp16), len(fused))
    reduced = set(fp16)
    return graph_outline, [index for index, name in enumerate(fused) if name in reduced]


def _planned_input_shapes(desc: OmDescription) -> dict[str, Shape]:
    """The inputs' shapes GE sizes the feature map for: the largest gear, ranged dims at
    their upper bounds (-1 where unbounded: the plan cannot size what depends on them)."""
    if desc.dynamic_shape:
        return {t.name: tuple(hi for _, hi in t.ranges) or t.dims for t in desc.inputs}
    shapes = desc.input_shapes(desc.largest_gear())
    return {t.name: shape for t, shape in zip(desc.inputs, shapes)}


def _value_info(proto: onnx.ModelProto, tensor: str) -> onnx.ValueInfoProto:
    """The typed value info of an intermediate tensor (ONNX shape inference)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto)
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        if info.name == tensor and info.type.tensor_type.elem_type:
            result = onnx.ValueInfoProto()
            result.CopyFrom(info)
            result.type.tensor_type.ClearField("shape")
            return result
    raise OmCompileError(f"--out_nodes: the type of tensor {tensor!r} cannot be inferred")


def _probe_outputs(
    onnx_bytes: bytes,
    inputs: tuple[OmTensor, ...],
    kind: GearKind,
    gears: tuple[Gear, ...],
    order: tuple[str, ...],
    model_path: Path,
) -> tuple[tuple[Shape, ...], ...]:
    """Run every gear once on zeros; returns each gear's output shapes (one entry if static)."""
    index = {t.name: i for i, t in enumerate(inputs)}
    positions = [index[name] for name in order] or list(range(len(inputs)))
    try:
        session = _new_session(onnx_bytes)
    except Exception as exc:  # onnxruntime raises its own exception types
        raise OmCompileError(f"onnxruntime cannot load {model_path}: {exc}") from exc
    results = []
    for gear in gears or (None,):
        shapes = _fill_gear(kind, [t.dims for t in inputs], gear, positions)
        feeds = {
            t.name: np.zeros(shape, NUMPY_BY_ACL[t.acl_dtype]) for t, shape in zip(inputs, shapes)
        }
        try:
            outputs = session.run(None, feeds)
        except Exception as exc:  # onnxruntime raises its own exception types
            where = "the model" if gear is None else _gear_text(gear)
            given = "; ".join(f"{t.name}:{_shape_text(s)}" for t, s in zip(inputs, shapes))
            raise OmCompileError(
                f"{model_path} does not accept the shapes of {where} ({given}); "
                f"onnxruntime says: {exc}"
            ) from exc
        results.append(tuple(tuple(int(d) for d in np.shape(out)) for out in outputs))
    return tuple(results)


def _read_aipp_config(path: PathLike, kind: GearKind) -> str:
    """The text of `--insert_op_conf`, parsed once to refuse what ATC refuses.

    AIPP with batch or HW gears is built (static AIPP with `--dynamic_image_size` under ATC's
    check, insert_aipp_op_util.cc CheckAndCopyAippOpParams); AIPP with `--dynamic_dims` is
    refused: CANN's "Concepts and Restrictions" page (8.0.0 and 8.5.0 aclcppdevg_000041,
    Community Edition aclcppdevg_000040 and aclpythondevg_0044) makes AIPP and dynamic dims
    (ND) mutually exclusive for one model."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise OmCompileError(
            f"cannot read --insert_op_conf {os.fspath(path)}: {exc.strerror or exc}"
        ) from exc
    try:
        ops = parse_aipp_config(text)
        if kind == GearKind.HW:
            check_with_dynamic_image_size(ops)
    except AippConfigError as exc:
        raise OmCompileError(f"--insert_op_conf {os.fspath(path)}: {exc}") from exc
    if kind == GearKind.DIMS:
        raise OmCompileError(
            "--insert_op_conf cannot be used with --dynamic_dims: for one model, AIPP (static "
            "or dynamic) and dynamic dims (ND format) are mutually exclusive (CANN "
            '"Concepts and Restrictions": aclcppdevg_000041, aclcppdevg_000040, '
            "aclpythondevg_0044); use --dynamic_batch_size or --dynamic_image_size"
        )
    return text


def _check_aipp_inputs(desc: OmDescription) -> None:
    """Each AIPP op names an existing input; a static op binds to it in every gear (ATC's
    checks); a dynamic op feeds a 4-D image input, -1 only on N with batch gears."""
    for rank, op in desc.aipp_ops().items():
        if rank >= len(desc.inputs):
            raise OmCompileError(
                f"aipp_op related_input_rank {rank} is out of range: the model has "
                f"{len(desc.inputs)} inputs"
            )
        tensor = desc.inputs[rank]
        if op.is_static:
            try:
                desc.static_aipp(rank)
            except (AippConfigError, ValueError) as exc:
                raise OmCompileError(f"aipp_op for input {tensor.name}: {exc}") from exc
            continue
        if desc.dynamic_kind == GearKind.HW:
            # ATC builds it (the source size must equal set_dynamic_hw_size's at run time);
            # the emulator does not
            raise OmCompileError(
                "dynamic AIPP with --dynamic_image_size is not supported by the emulator; use "
                "static AIPP (crop and padding off, src_image_size_w/h 0) or --dynamic_batch_size"
            )
        fixed = tensor.dims[1:] if desc.dynamic_kind == GearKind.BATCH else tensor.dims
        if len(tensor.dims) != 4 or min(fixed) <= 0:
            raise OmCompileError(
                f"dynamic AIPP feeds a 4-D image input (-1 only on N, with "
                f"--dynamic_batch_size); {tensor.name} is {_shape_text(tensor.dims)}"
            )


def _probe_inputs(inputs: tuple[OmTensor, ...]) -> tuple[OmTensor, ...]:
    """The inputs of a model without gears as the compile probe runs them: shape ranges at
    their upper bounds (at least 1 where unbounded)."""
    return tuple(
        dataclasses.replace(t, dims=tuple(hi if hi > 0 else max(lo, 1) for lo, hi in t.ranges))
        if t.ranges
        else t
        for t in inputs
    )


def _static_outputs(
    proto: onnx.ModelProto, inputs: tuple[OmTensor, ...], probed: tuple[OmTensor, ...]
) -> tuple[OmTensor, ...]:
    """The outputs of a model without gears as ATC describes them: -1 on every dim that ONNX
    shape inference cannot fix from the inputs' dims (data-dependent: NonZero, NMS, TopK with a
    computed k; or following a shape-range input), with (0, upper) ranges, upper the probe's
    dim when every input range is bounded and the dim is fixed at the upper bounds, else -1.

    `probed` holds the outputs of the probe run at the inputs' upper bounds; an output whose
    rank inference cannot tell keeps the probe's dims."""
    symbolic = _inferred_output_dims(proto, [t.dims for t in inputs])
    bounded = all(hi >= 0 for t in inputs for _, hi in t.ranges)
    at_upper = _inferred_output_dims(proto, [t.dims for t in _probe_inputs(inputs)])
    outputs = []
    for tensor, fixed, upper in zip(probed, symbolic, at_upper):
        if fixed is None or len(fixed) != len(tensor.dims) or -1 not in fixed:
            outputs.append(tensor)
            continue
        ranges = tuple(
            (d, d) if d >= 0 else (0, p if bounded and upper is not None and upper[i] >= 0 else -1)
            for i, (d, p) in enumerate(zip(fixed, tensor.dims))
        )
        outputs.append(dataclasses.replace(tensor, dims=fixed, ranges=ranges))
    return tuple(outputs)


def _inferred_output_dims(proto: onnx.ModelProto, input_dims: list[Shape]) -> list[Shape | None]:
    """Each output's dims by ONNX shape inference for inputs of `input_dims` (-1: unknown), -1
    where inference cannot fix a dim; None for an output whose rank it cannot tell."""
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in initializers]
    for value, dims in zip(graph_inputs, input_dims):
        shape = value.type.tensor_type.shape
        shape.ClearField("dim")
        for axis, d in enumerate(dims):
            if d >= 0:
                shape.dim.add().dim_value = d
            else:
                shape.dim.add().dim_param = f"{value.name}_{axis}"
    for value in model.graph.output:
        value.type.tensor_type.ClearField("shape")
    del model.graph.value_info[:]
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # onnx raises InferenceError and others; the probe's shapes stand
        return [None] * len(model.graph.output)
    result: list[Shape | None] = []
    for value in inferred.graph.output:
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            result.append(None)
            continue
        result.append(
            tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor_type.shape.dim)
        )
    return result


def in_ranges(tensor: OmTensor, shape: Shape) -> bool:
    """Whether `shape` lies in the tensor's ranges (GE: IsOriginShapeInRange)."""
    return len(shape) == len(tensor.ranges) and all(
        lo <= d and (hi < 0 or d <= hi) for d, (lo, hi) in zip(shape, tensor.ranges)
    )


def ranges_text(ranges: tuple[tuple[int, int], ...]) -> str:
    """Ranges as ATC writes them: `1~16,3,224,224` (-1 unbounded)."""
    return ",".join(
        str(lo) if lo == hi else ("-1" if hi < 0 and lo == 0 else f"{lo}~{hi}") for lo, hi in ranges
    )


def _acl_dtype(onnx_elem_type: int, what: str) -> int:
    """The aclDataType of an ONNX element type numpy holds; OmCompileError for any other."""
    data_type = DTYPES_BY_ONNX.get(onnx_elem_type)
    if data_type is None or data_type.numpy is None:
        import onnx

        name = onnx.TensorProto.DataType.Name(onnx_elem_type)
        supported = ", ".join(str(t.onnx_name) for t in DTYPES_BY_NUMPY.values())
        raise OmCompileError(
            f"{what} has ONNX type {name}, which the emulator does not support; "
            f"supported: {supported}"
        )
    return data_type.acl


def _gear_kind(value: Any) -> GearKind:
    try:
        return GearKind(value)
    except ValueError:
        raise ValueError(f"unknown dynamic kind {value!r}") from None


# ----------------------------------------------------------------------------- helpers


def _new_session(onnx_bytes: bytes) -> onnxruntime.InferenceSession:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = _ort_threads()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # No arena: it keeps the largest memory its runs ever needed at once, per engine, for
    # good (a device host running YOLOv8s at batch 8 on 4 streams: 2.9 GiB, ResNet-50 0.5 GiB);
    # without it a run's memory goes when the run ends. The memory pattern stays: one
    # allocation per run. Measured at batch 8, alternating (load 5-7): ResNet-50 takes 1.09x
    # the time one at a time, 1.13x four at once; YOLOv8s 0.98x and 1.10x.
    options.enable_cpu_mem_arena = False
    return onnxruntime.InferenceSession(
        onnx_bytes, sess_options=options, providers=["CPUExecutionProvider"]
    )


def _ort_threads() -> int:
    text = os.environ.get(EMULATOR_ORT_THREADS.name, "1")
    try:
        threads = int(text)
    except ValueError:
        threads = 0
    if threads < 1:
        raise ValueError(f"GE_EMULATOR_ORT_THREADS must be a positive integer, got {text!r}")
    return threads


def _fill_gear(
    kind: GearKind, dims: list[Shape], gear: Sequence[int] | None, order: Sequence[int]
) -> list[Shape]:
    """Replace the -1 dims by the gear's values: batch/hw per input; dims across the inputs in
    `order` (input indices in --input_shape order), as ATC assigns --dynamic_dims values."""
    if gear is None:
        return list(dims)
    if kind != GearKind.DIMS:
        return [_fill_one(input_dims, iter(gear)) for input_dims in dims]
    shapes = list(dims)
    values = iter(gear)
    for i in order:
        shapes[i] = _fill_one(dims[i], values)
    return shapes


def _fill_one(dims: Shape, values: Iterator[int]) -> Shape:
    return tuple(next(values) if d == -1 else d for d in dims)


def _elements(shapes: list[Shape]) -> int:
    return sum(math.prod(s) for s in shapes)


def _ints(values: Any) -> tuple[int, ...]:
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        raise ValueError(f"expected a list of integers, got {values!r}")
    return tuple(values)


def _range(value: Any) -> tuple[int, int]:
    lo, hi = _ints(value)
    return lo, hi


def _gear_text(gear: Gear) -> str:
    return f"gear ({','.join(str(v) for v in gear)})"


def _shape_text(dims: Shape) -> str:
    return ",".join(str(d) for d in dims)
