"""The tiny models `selftest` runs: ONNX graphs it builds, their ATC flags, NumPy references.

Every model's inputs hold multiples of 1/8 in [-2, 2] (or small integers), so results are exact
even when the NPU computes in float16. With `atc` on PATH the models are compiled for the host's
SoC; without it they are taken prebuilt from a directory, and `atc_command` gives the exact
command that makes each one. For the emulator runtime the caller passes the emulator's compiler
(the runtime does not import the emulator).
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.aipp import StaticAipp, bind_static, parse_aipp_config
from ge_python_backend.ascend import DTYPES_BY_NUMPY, AtcFramework, Format, GearKind

__all__ = [
    "MODELS",
    "OnnxCompiler",
    "PreparedModels",
    "SelftestModel",
    "atc_command",
    "prepare_models",
]

logger = logging.getLogger(__name__)

Shape = tuple[int, ...]
Feeds = dict[str, np.ndarray]
OPSET = 11  # ReduceSum takes its axes as an attribute: what every ATC release parses
ATC_TIMEOUT_S = 900
EMULATOR_SOC = "Ascend310P3"  # what the emulator's models say they are for when the SoC is unknown

# Compiles an ONNX file for the emulator as ATC would: `(onnx_path, output_stem, soc_version=...,
# **atc_flags)`, i.e. `ge_python_backend.emulator.omfile.compile_onnx`.
OnnxCompiler = Callable[..., object]


@dataclasses.dataclass(frozen=True)
class SelftestModel:
    """One model: graph inputs and outputs in graph order, its ATC flags, its NumPy reference."""

    name: str
    inputs: tuple[tuple[str, str], ...]  # (name, numpy dtype name), graph order
    outputs: tuple[tuple[str, str], ...]
    flags: Mapping[str, str]  # ATC flags besides --model/--framework/--output/--soc_version
    reference: Callable[[Feeds], list[np.ndarray]]
    build: Callable[[Path], None]  # writes the ONNX file
    needs_input_shape_order: bool = False  # its dims gears fit both orders of its inputs
    aipp_config: str = ""  # the aipp.cfg of --insert_op_conf (its first input's static AIPP)
    data_dependent: bool = False  # its output shapes depend on the input values

    @property
    def stem(self) -> str:
        return f"selftest_{self.name}"

    def atc_flags(self, directory: Path) -> dict[str, str]:
        """Its ATC flags, with `--insert_op_conf` naming its aipp.cfg in `directory`."""
        flags = dict(self.flags)
        if self.aipp_config:
            flags["insert_op_conf"] = str(directory / f"{self.stem}.aipp.cfg")
        return flags

    @property
    def aipp(self) -> StaticAipp | None:
        """The static AIPP of its first input, bound to the graph's input (NCHW float32)."""
        if not self.aipp_config:
            return None
        name = self.inputs[0][0]
        op = parse_aipp_config(self.aipp_config)[0]
        return bind_static(
            op, self.input_shape[name], Format.NCHW, DTYPES_BY_NUMPY[np.dtype(np.float32)]
        )

    @property
    def kind(self) -> GearKind:
        """The kind of its gears, from the ATC gear option among its flags."""
        return next((k for k in GearKind if k.atc_option in self.flags), GearKind.STATIC)

    @property
    def dynamic_shape(self) -> bool:
        """No gears, but shape ranges (`lo~hi` in `--input_shape`) or data-dependent outputs."""
        return self.data_dependent or "~" in self.flags["input_shape"]

    @property
    def input_shape(self) -> dict[str, Shape]:
        """`--input_shape` parsed, in its order (-1 on dynamic dims and shape ranges)."""
        shapes = {}
        for entry in self.flags["input_shape"].split(";"):
            name, _, dims = entry.rpartition(":")
            shapes[name] = tuple(-1 if "~" in d else int(d) for d in dims.split(","))
        return shapes

    @property
    def input_shape_order(self) -> tuple[str, ...] | None:
        """The `--input_shape` order, for a model whose gears do not reveal it."""
        return tuple(self.input_shape) if self.needs_input_shape_order else None

    @property
    def dims(self) -> dict[str, Shape]:
        """Every input's dims as the runtime serves them (-1 on dynamic axes), graph order: an
        AIPP input's are `get_input_dims_v2`'s (the bytes of the model's size)."""
        given = self.input_shape
        dims = {name: given[name] for name, _ in self.inputs}
        if self.aipp is not None:
            dims[self.inputs[0][0]] = tuple(self.aipp.input_dims_v2)
        return dims

    @property
    def gears(self) -> tuple[tuple[int, ...], ...]:
        """The gears as ACL lists them: (b,), (h, w), or every dim of the `--input_shape`
        inputs in that order."""
        option = self.kind.atc_option
        if option is None:
            return ()
        text = self.flags[option]
        separator = "," if self.kind == GearKind.BATCH else ";"
        values = [tuple(int(v) for v in item.split(",")) for item in text.split(separator)]
        if self.kind != GearKind.DIMS:
            return tuple(values)
        flat = [d for shape in self.input_shape.values() for d in shape]
        return tuple(_fill(flat, gear) for gear in values)

    def input_shapes(self, gear: Sequence[int] | None) -> dict[str, Shape]:
        """Every input's shape at `gear` (None: static), graph order."""
        dims = self.dims
        if gear is None:
            return dims
        if self.kind == GearKind.BATCH:
            return {name: (gear[0], *shape[1:]) for name, shape in dims.items()}
        if self.kind == GearKind.HW:
            return {name: _fill(shape, gear) for name, shape in dims.items()}
        shapes, start = dict(dims), 0
        for name, shape in self.input_shape.items():
            shapes[name] = tuple(gear[start : start + len(shape)])
            start += len(shape)
        return shapes

    def feeds(self, shapes: Mapping[str, Shape], seed: int = 0) -> Feeds:
        """Inputs of these shapes: floats are multiples of 1/8 in [-2, 2], integers small."""
        rng = np.random.default_rng(seed)
        feeds = {}
        for name, dtype in self.inputs:
            if dtype == "uint8":  # raw AIPP image bytes
                feeds[name] = rng.integers(0, 256, shapes[name], dtype=np.uint8)
                continue
            values = rng.integers(-16, 17, shapes[name])
            feeds[name] = (values / 8 if dtype.startswith("float") else values).astype(dtype)
        return feeds

    def output_shapes(self, gear: Sequence[int] | None) -> list[Shape]:
        """The outputs' shapes at `gear`, from the reference."""
        return [out.shape for out in self.reference(self.feeds(self.input_shapes(gear)))]


def _fill(dims: Sequence[int], values: Sequence[int]) -> Shape:
    """`dims` with its -1 entries replaced by `values`, in order."""
    remaining = iter(values)
    return tuple(next(remaining) if d == -1 else d for d in dims)


# ----------------------------------------------------------------------------- graphs


def _save(
    path: Path,
    nodes: list[Any],
    inputs: list[tuple[str, int, list[Any]]],
    outputs: list[tuple[str, int, list[Any]]],
    constants: Mapping[str, np.ndarray],
) -> None:
    import onnx
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info(*spec) for spec in inputs],
        [helper.make_tensor_value_info(*spec) for spec in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 6  # the IR version of opset 11
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


def _build_static(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("Mul", ["x", "two"], ["x2"]),
            helper.make_node("Add", ["x2", "one"], ["y"]),
            helper.make_node("Add", ["k", "seven"], ["n"]),
        ],
        [("x", T.FLOAT, [2, 8]), ("k", T.INT32, [2, 8])],
        [("y", T.FLOAT, [2, 8]), ("n", T.INT32, [2, 8])],
        {
            "two": np.array(2, np.float32),
            "one": np.array(1, np.float32),
            "seven": np.array(7, np.int32),
        },
    )


def _build_batch(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("ReduceSum", ["x"], ["xs"], axes=[2, 3], keepdims=0),
            helper.make_node("Add", ["xs", "s"], ["y"]),
        ],
        [("x", T.FLOAT, ["N", 3, 4, 4]), ("s", T.FLOAT, ["N", 3])],
        [("y", T.FLOAT, ["N", 3])],
        {},
    )


def _build_hw(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("Mul", ["image", "two"], ["doubled"]),
            helper.make_node("Add", ["doubled", "one"], ["out"]),
            helper.make_node("ReduceSum", ["image"], ["pooled"], axes=[2, 3], keepdims=0),
        ],
        [("image", T.FLOAT, [1, 3, "H", "W"])],
        [("out", T.FLOAT, [1, 3, "H", "W"]), ("pooled", T.FLOAT, [1, 3])],
        {"two": np.array(2, np.float32), "one": np.array(1, np.float32)},
    )


def _build_dims(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("Mul", ["a", "three"], ["a3"]),
            helper.make_node("ReduceSum", ["b"], ["bsum"], axes=[0], keepdims=1),
        ],
        [("a", T.FLOAT, [1, "Sa"]), ("b", T.FLOAT, ["Rb", "Sb"])],
        [("a3", T.FLOAT, [1, "Sa"]), ("bsum", T.FLOAT, [1, "Sb"])],
        {"three": np.array(3, np.float32)},
    )


def _build_aipp(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("Mul", ["image", "two"], ["doubled"]),
            helper.make_node("Add", ["doubled", "one"], ["out"]),
        ],
        [("image", T.FLOAT, [1, 1, 4, 6])],
        [("out", T.FLOAT, [1, 1, 4, 6])],
        {"two": np.array(2, np.float32), "one": np.array(1, np.float32)},
    )


# A YUV420SP_U8 8x6 source cropped to 6x4 at (2, 2) feeding a one-channel input: the model reads
# the Y plane only (no CSC, no chroma), scaled by 1/8 (exact in float16). v1 is [1,6,8,3], v2
# [1,9,8,1] (aclmdlGetInputDimsV2.md table 1): 72 bytes, the model's size.
AIPP_V2_CONFIG = """\
aipp_op {
    aipp_mode: static
    input_format: YUV420SP_U8
    src_image_size_w: 8
    src_image_size_h: 6
    crop: true
    load_start_pos_w: 2
    load_start_pos_h: 2
    crop_size_w: 6
    crop_size_h: 4
    var_reci_chn_0: 0.125
}
"""


def _aipp_v2(feeds: Feeds) -> list[np.ndarray]:
    model = next(m for m in MODELS if m.name == "aipp_v2")
    assert model.aipp is not None
    return [model.aipp.apply(feeds["image"]) * 2 + 1]


def _build_nonzero(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("Greater", ["x", "half"], ["mask"]),
            helper.make_node("NonZero", ["mask"], ["indices"]),
        ],
        [("x", T.FLOAT, [4, 8])],
        [("indices", T.INT64, [2, "K"])],
        {"half": np.array(0.5, np.float32)},
    )


def _build_ranged(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("Mul", ["x", "two"], ["x2"]),
            helper.make_node("Add", ["x2", "one"], ["y"]),
        ],
        [("x", T.FLOAT, ["N", 8])],
        [("y", T.FLOAT, ["N", 8])],
        {"two": np.array(2, np.float32), "one": np.array(1, np.float32)},
    )


def _nonzero(feeds: Feeds) -> list[np.ndarray]:
    return [np.stack(np.nonzero(feeds["x"] > 0.5)).astype(np.int64)]


def _ranged(feeds: Feeds) -> list[np.ndarray]:
    return [feeds["x"] * 2 + 1]


# Names over 127 characters (the dims calls convert them, aclmdlGetInputDims.md) and an output
# whose ACL name is op:idx:name (aclmdlGetOutputNameByIndex.md).
LONG_INPUT = "long_input_" + "x" * 139  # 150 characters
LONG_OUTPUT = "long_output_" + "y" * 138


def _build_names(path: Path) -> None:
    from onnx import TensorProto as T
    from onnx import helper

    _save(
        path,
        [
            helper.make_node("Mul", [LONG_INPUT, "two"], [LONG_OUTPUT], name="double"),
            helper.make_node("Add", [LONG_INPUT, "one"], ["plus_one"], name="add_one"),
        ],
        [(LONG_INPUT, T.FLOAT, [2, 4])],
        [(LONG_OUTPUT, T.FLOAT, [2, 4]), ("plus_one", T.FLOAT, [2, 4])],
        {"two": np.array(2, np.float32), "one": np.array(1, np.float32)},
    )


def _names(feeds: Feeds) -> list[np.ndarray]:
    return [feeds[LONG_INPUT] * 2, feeds[LONG_INPUT] + 1]


def _static(feeds: Feeds) -> list[np.ndarray]:
    return [feeds["x"] * 2 + 1, feeds["k"] + np.int32(7)]


def _batch(feeds: Feeds) -> list[np.ndarray]:
    return [feeds["x"].sum(axis=(2, 3)) + feeds["s"]]


def _hw(feeds: Feeds) -> list[np.ndarray]:
    image = feeds["image"]
    return [image * 2 + 1, image.sum(axis=(2, 3))]


def _dims(feeds: Feeds) -> list[np.ndarray]:
    return [feeds["a"] * 3, feeds["b"].sum(axis=0, keepdims=True)]


# The dims models list b before a in --input_shape while the graph lists a first: gear (4, 8)
# gives b 4 and a 8. In `dims` the static dims (b has 2 rows) reveal that order; in `dims_named`
# both orders fit, so the runtime is given it (Session's input_shape_order).
MODELS = (
    SelftestModel(
        "static",
        (("x", "float32"), ("k", "int32")),
        (("y", "float32"), ("n", "int32")),
        {"input_shape": "x:2,8;k:2,8"},
        _static,
        _build_static,
    ),
    SelftestModel(
        "batch",
        (("x", "float32"), ("s", "float32")),
        (("y", "float32"),),
        {"input_shape": "s:-1,3;x:-1,3,4,4", "dynamic_batch_size": "1,2,4"},
        _batch,
        _build_batch,
    ),
    SelftestModel(
        "hw",
        (("image", "float32"),),
        (("out", "float32"), ("pooled", "float32")),
        {"input_shape": "image:1,3,-1,-1", "dynamic_image_size": "8,8;16,12"},
        _hw,
        _build_hw,
    ),
    SelftestModel(
        "dims",
        (("a", "float32"), ("b", "float32")),
        (("a3", "float32"), ("bsum", "float32")),
        {"input_shape": "b:2,-1;a:1,-1", "dynamic_dims": "4,8;8,16", "input_format": "ND"},
        _dims,
        _build_dims,
    ),
    SelftestModel(
        "dims_named",
        (("a", "float32"), ("b", "float32")),
        (("a3", "float32"), ("bsum", "float32")),
        {"input_shape": "b:1,-1;a:1,-1", "dynamic_dims": "4,8;8,16", "input_format": "ND"},
        _dims,
        _build_dims,
        needs_input_shape_order=True,
    ),
    SelftestModel(
        "names",
        ((LONG_INPUT, "float32"),),
        ((LONG_OUTPUT, "float32"), ("plus_one", "float32")),
        {"input_shape": f"{LONG_INPUT}:2,4"},
        _names,
        _build_names,
    ),
    SelftestModel(
        "aipp_v2",
        (("image", "uint8"),),
        (("out", "float32"),),
        {"input_shape": "image:1,1,4,6"},
        _aipp_v2,
        _build_aipp,
        aipp_config=AIPP_V2_CONFIG,
    ),
    SelftestModel(
        "nonzero",
        (("x", "float32"),),
        (("indices", "int64"),),
        {"input_shape": "x:4,8"},
        _nonzero,
        _build_nonzero,
        data_dependent=True,
    ),
    SelftestModel(
        "ranged",
        (("x", "float32"),),
        (("y", "float32"),),
        {"input_shape": "x:1~8,8"},
        _ranged,
        _build_ranged,
    ),
)


# ----------------------------------------------------------------------------- compiling


@dataclasses.dataclass
class PreparedModels:
    """Where each model's `.om` is, or why it is missing; how they were made."""

    directory: Path
    how: str
    paths: dict[str, Path] = dataclasses.field(default_factory=dict)
    missing: dict[str, str] = dataclasses.field(default_factory=dict)
    atc_commands: list[str] = dataclasses.field(default_factory=list)


def atc_command(model: SelftestModel, directory: Path, soc: str) -> list[str]:
    """The `atc` command line that compiles `model` (its ONNX in `directory`) for `soc`."""
    return [
        "atc",
        f"--model={directory / (model.stem + '.onnx')}",
        f"--framework={AtcFramework.ONNX.value}",
        f"--output={directory / model.stem}",
        f"--soc_version={soc}",
        *(f"--{flag}={value}" for flag, value in model.atc_flags(directory).items()),
    ]


def prepare_models(
    compile_onnx: OnnxCompiler | None, soc: str | None, om_dir: Path | None, scratch: Path
) -> PreparedModels:
    """Make the models: `compile_onnx` (the emulator's compiler) compiles them when given;
    otherwise `atc` (on PATH) does, for `soc`; without `atc` they are read from `om_dir` (their
    ONNX files are written there for ATC).

    Compiled models go to `om_dir` when given, else to `scratch`.
    """
    directory = om_dir or scratch
    emulator = compile_onnx is not None
    atc = None if emulator else shutil.which("atc")
    soc_text = soc or "<SoC: npu-smi info shows it>"
    kept = f" into {om_dir}" if om_dir else ""
    if emulator:
        how = f"compiled by the emulator{kept}"
    elif atc:
        how = f"compiled by {atc} for {soc_text}{kept}"
    else:
        how = f"atc is not on PATH: prebuilt models taken from {om_dir}"
    prepared = PreparedModels(directory, how)
    prepared.atc_commands = [shlex.join(atc_command(m, directory, soc_text)) for m in MODELS]
    if not emulator and not atc and om_dir is None:
        prepared.how = "atc is not on PATH and no --om-dir was given"
        for model in MODELS:
            prepared.missing[model.name] = (
                "atc is not on PATH: give --om-dir DIR with the models built by the printed atc "
                "commands (the ONNX files are written into DIR)"
            )
        return prepared
    directory.mkdir(parents=True, exist_ok=True)
    for model in MODELS:
        om = directory / (model.stem + ".om")
        try:
            if not emulator and not atc:
                if om.is_file():
                    prepared.paths[model.name] = om
                    continue
                _write_onnx(model, directory)
                raise RuntimeError(f"{om} is missing; make it with the printed atc command")
            _write_onnx(model, directory)
            if compile_onnx is not None:
                compile_onnx(
                    directory / (model.stem + ".onnx"),
                    directory / model.stem,
                    soc_version=soc or EMULATOR_SOC,
                    **model.atc_flags(directory),
                )
            elif soc is None:
                raise RuntimeError("acl.get_soc_name() reported no SoC, so atc cannot be run")
            else:
                _compile_atc(model, directory, soc)
            prepared.paths[model.name] = om
        except Exception as exc:  # every failure is reported on the probes that need the model
            logger.debug("selftest model %s", model.name, exc_info=True)
            prepared.missing[model.name] = f"{type(exc).__name__}: {exc}"
    return prepared


def _write_onnx(model: SelftestModel, directory: Path) -> None:
    try:
        import onnx  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"the onnx package is needed to build the selftest's ONNX models ({exc}); "
            "pip install onnx"
        ) from exc
    model.build(directory / (model.stem + ".onnx"))
    if model.aipp_config:
        (directory / f"{model.stem}.aipp.cfg").write_text(model.aipp_config)


def _compile_atc(model: SelftestModel, directory: Path, soc: str) -> None:
    argv = atc_command(model, directory, soc)
    logger.info("selftest: %s", shlex.join(argv))
    result = subprocess.run(
        argv, capture_output=True, text=True, timeout=ATC_TIMEOUT_S, check=False
    )
    if result.returncode != 0 or not (directory / (model.stem + ".om")).is_file():
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"atc exited with {result.returncode}: {tail}")
