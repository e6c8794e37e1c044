"""The emulator `.om` container, its ONNX compiler, the model runner and `emulator compile`."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import (
    KEEP_FP32,
    build_add_mul,
    build_conv,
    build_dims_model,
    build_mlp,
    onnx_path_of,
    reference_session,
)

from ge_python_backend import cli
from ge_python_backend.ascend import (
    DTYPES_BY_NUMPY,
    DTYPES_BY_ONNX,
    NUMPY_BY_ACL,
    Format,
    om_output_path,
)
from ge_python_backend.emulator.omfile import (
    MAGIC,
    OmCompileError,
    OmDescription,
    OmFormatError,
    OmModel,
    compile_onnx,
)

FIXTURES = ["om_static", "om_dynamic_batch", "om_add_mul", "om_mixed_types", "om_hw", "om_dims"]


def gears_of(desc: OmDescription) -> list[tuple[int, ...] | None]:
    return list(desc.gears) if desc.gears else [None]


def random_inputs(desc: OmDescription, gear: tuple[int, ...] | None, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for tensor, shape in zip(desc.inputs, desc.input_shapes(gear)):
        dtype = NUMPY_BY_ACL[tensor.acl_dtype]
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dtype))
        else:  # ints in [0, 32) are valid token ids for the dims model
            arrays.append(rng.integers(0, 32, shape).astype(dtype))
    return arrays


def reseal(data: bytes) -> bytes:
    """Recompute the SHA-256 trailer of an altered container."""
    body = data[:-32]
    return body + hashlib.sha256(body).digest()


# ----------------------------------------------------------------------------- round trip


def test_round_trip_from_path_and_bytes(om_dynamic_batch: Path) -> None:
    from_path = OmModel.load(om_dynamic_batch)
    from_bytes = OmModel.load(om_dynamic_batch.read_bytes())
    assert from_path.description == from_bytes.description
    assert om_dynamic_batch.read_bytes().startswith(MAGIC)
    assert from_path.source == str(om_dynamic_batch)
    assert "in memory" in from_bytes.source
    x = np.ones((2, 16), np.float32)
    for got, want in zip(from_path.run([x]), from_bytes.run([x])):
        np.testing.assert_array_equal(got, want)


def test_header_records_flags_and_onnx_sha256(om_dims: Path) -> None:
    header = OmModel.load(om_dims).header
    onnx_path = onnx_path_of(om_dims)
    assert header["onnx"]["sha256"] == hashlib.sha256(onnx_path.read_bytes()).hexdigest()
    assert header["onnx"]["size"] == onnx_path.stat().st_size
    assert header["flags"] == {
        "model": str(onnx_path),
        "framework": 5,
        "output": str(om_dims.with_suffix("")),
        "input_shape": "input_ids:1,-1;attention_mask:1,-1",
        "dynamic_dims": "8,8;16,16;32,32",
        "input_format": "ND",
        "soc_version": "Ascend310P3",
        "precision_mode": "must_keep_origin_dtype",
    }


# ----------------------------------------------------------------------------- description


def test_static_description(om_static: Path) -> None:
    desc = OmModel.load(om_static).description
    assert desc.dynamic_kind == "static"
    assert desc.gears == ()
    assert desc.soc_version == "Ascend310P3"
    assert [(t.name, t.acl_dtype, t.acl_format, t.dims) for t in desc.inputs] == [
        ("x", 0, Format.ND, (4, 16))
    ]
    assert [(t.name, t.acl_dtype, t.acl_format, t.dims) for t in desc.outputs] == [
        # ATC's op:idx:name, unnamed nodes named <op_type>_<k> (onnx_parser.cc
        # UpdateNodeNameAndOpType; api/atc/omg.cc CreateOutputNodesInfo)
        ("Relu_2:0:y", 0, Format.ND, (4, 8)),
        ("ReduceSum_3:0:z", 0, Format.ND, (4, 1)),
    ]
    assert desc.largest_gear() is None
    assert desc.input_shapes(None) == [(4, 16)]
    assert desc.output_shapes(None) == [(4, 8), (4, 1)]


def test_dynamic_batch_description(om_dynamic_batch: Path) -> None:
    desc = OmModel.load(om_dynamic_batch).description
    assert desc.dynamic_kind == "batch"
    assert desc.gears == ((1,), (2,), (4,), (8,))
    assert desc.inputs[0].dims == (-1, 16)
    assert [t.dims for t in desc.outputs] == [(8, 8), (8, 1)]  # the largest gear
    assert desc.largest_gear() == (8,)
    assert desc.input_shapes((2,)) == [(2, 16)]
    assert desc.output_shapes([2]) == [(2, 8), (2, 1)]


def test_hw_description(om_hw: Path) -> None:
    desc = OmModel.load(om_hw).description
    assert desc.dynamic_kind == "hw"
    assert desc.gears == ((16, 16), (32, 32))
    assert desc.inputs[0].dims == (1, 3, -1, -1)
    assert desc.input_shapes((16, 16)) == [(1, 3, 16, 16)]
    assert desc.largest_gear() == (32, 32)
    assert desc.outputs[0].dims == (1, 8)


def test_dims_description(om_dims: Path) -> None:
    desc = OmModel.load(om_dims).description
    assert desc.dynamic_kind == "dims"
    assert desc.gears == ((8, 8), (16, 16), (32, 32))
    assert [t.acl_dtype for t in desc.inputs] == [9, 9]  # INT64
    assert [t.acl_format for t in desc.inputs] == [Format.ND] * 2
    assert desc.input_shapes((16, 16)) == [(1, 16), (1, 16)]
    assert desc.largest_gear() == (32, 32)
    assert desc.outputs[0].dims == (1, 32, 4)


def test_mixed_types_description(om_mixed_types: Path) -> None:
    desc = OmModel.load(om_mixed_types).description
    assert [t.acl_dtype for t in desc.inputs] == [3, 1]  # INT32, FLOAT16
    assert [t.acl_dtype for t in desc.outputs] == [3, 12, 1]  # INT32, BOOL, FLOAT16


def test_largest_gear_is_most_input_elements(tmp_path: Path) -> None:
    onnx_path = build_dims_model(tmp_path / "dims.onnx")
    om = compile_onnx(
        onnx_path,
        tmp_path / "dims",
        input_shape="input_ids:-1,-1;attention_mask:-1,-1",
        dynamic_dims="1,64,1,64;8,4,8,4;4,32,4,32",
        **KEEP_FP32,
    )
    # elements: 2*64=128, 2*32=64, 2*128=256 -> the last gear, though not the largest first value
    assert OmModel.load(om).description.largest_gear() == (4, 32, 4, 32)


def test_gear_arguments_are_checked(om_static: Path, om_dynamic_batch: Path) -> None:
    with pytest.raises(ValueError, match=r"static: gear must be None, got \(4,\)"):
        OmModel.load(om_static).description.input_shapes((4,))
    desc = OmModel.load(om_dynamic_batch).description
    with pytest.raises(ValueError, match=r"dynamic batch gears; choose one of: gear \(1\)"):
        desc.output_shapes(None)
    with pytest.raises(ValueError, match=r"gear \(3\) is not one of .* gear \(8\)"):
        desc.input_shapes((3,))


@pytest.mark.parametrize("fixture", FIXTURES)
def test_output_shapes_per_gear_match_onnxruntime(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    om = request.getfixturevalue(fixture)
    desc = OmModel.load(om).description
    session = reference_session(om)
    for gear in gears_of(desc):
        feeds = {t.name: a for t, a in zip(desc.inputs, random_inputs(desc, gear, 0))}
        want = [tuple(o.shape) for o in session.run(None, feeds)]
        assert desc.output_shapes(gear) == want, gear


@pytest.mark.parametrize("fixture", FIXTURES)
def test_run_matches_onnxruntime_on_the_onnx(fixture: str, request: pytest.FixtureRequest) -> None:
    om = request.getfixturevalue(fixture)
    model = OmModel.load(om)
    desc = model.description
    session = reference_session(om)
    for seed, gear in enumerate(gears_of(desc)):
        arrays = random_inputs(desc, gear, seed)
        want = session.run(None, {t.name: a for t, a in zip(desc.inputs, arrays)})
        for explicit in (gear, None):  # gear=None finds the gear from the shapes
            got = model.run(arrays, explicit)
            assert len(got) == len(desc.outputs)
            for out, tensor, expected in zip(got, desc.outputs, want):
                assert out.dtype == NUMPY_BY_ACL[tensor.acl_dtype]
                np.testing.assert_array_equal(out, expected)


# ----------------------------------------------------------------------------- run errors


def test_run_rejects_wrong_inputs(om_add_mul: Path) -> None:
    model = OmModel.load(om_add_mul)
    a = np.ones((2, 4), np.float32)
    with pytest.raises(ValueError, match=r"has 2 inputs \(a, b\), got 1 arrays"):
        model.run([a])
    with pytest.raises(ValueError, match="input b must be float32, got float64"):
        model.run([a, a.astype(np.float64)])
    with pytest.raises(ValueError, match=r"input b must have shape \[2, 4\] for gear \(2\)"):
        model.run([a, np.ones((4, 4), np.float32)], (2,))
    with pytest.raises(ValueError, match=r"match no gear .* gear \(1\): \[\[1, 4\], \[1, 4\]\]"):
        model.run([np.ones((3, 4), np.float32)] * 2)
    with pytest.raises(ValueError, match=r"gear \(3\) is not one of"):
        model.run([np.ones((3, 4), np.float32)] * 2, (3,))


def test_run_rejects_wrong_shape_on_static_model(om_static: Path) -> None:
    with pytest.raises(ValueError, match=r"input x must have shape \[4, 16\], got \[2, 16\]"):
        OmModel.load(om_static).run([np.ones((2, 16), np.float32)])


def test_ort_threads_from_environment(om_static: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.ones((4, 16), np.float32)
    monkeypatch.setenv("GE_EMULATOR_ORT_THREADS", "2")
    assert OmModel.load(om_static).run([x])[0].shape == (4, 8)
    monkeypatch.setenv("GE_EMULATOR_ORT_THREADS", "zero")
    with pytest.raises(ValueError, match="GE_EMULATOR_ORT_THREADS must be a positive integer"):
        OmModel.load(om_static).run([x])


def test_an_engine_keeps_no_arena_between_runs(om_static: Path) -> None:
    """onnxruntime's arena would keep each engine's largest need for good (GiBs in a device
    host); the memory pattern, one allocation per run, stays."""
    om = OmModel.load(om_static)
    om.run([np.ones((4, 16), np.float32)])
    options = om._get_session().get_session_options()
    assert not options.enable_cpu_mem_arena
    assert options.enable_mem_pattern


# ----------------------------------------------------------------------------- load errors


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.om"
    with pytest.raises(OmFormatError, match=f"cannot read model file {missing}") as info:
        OmModel.load(missing)
    assert info.value.acl_code == 100014
    with pytest.raises(OmFormatError) as info:
        OmModel.load(tmp_path)  # a directory
    assert info.value.acl_code == 100014


@pytest.mark.parametrize("keep", [0, 5, 20, 60, -1])
def test_truncated_file(om_static: Path, tmp_path: Path, keep: int) -> None:
    bad = tmp_path / "truncated.om"
    bad.write_bytes(om_static.read_bytes()[:keep])
    with pytest.raises(OmFormatError, match=f"{bad} .*truncated") as info:
        OmModel.load(bad)
    assert info.value.acl_code == 100013


@pytest.mark.parametrize("where", ["header", "onnx", "trailer"])
def test_flipped_byte(om_static: Path, tmp_path: Path, where: str) -> None:
    data = bytearray(om_static.read_bytes())
    header_len = struct.unpack_from("<Q", data, 8)[0]
    offset = {"header": 20, "onnx": 16 + header_len + 40, "trailer": len(data) - 1}[where]
    data[offset] ^= 0x01
    bad = tmp_path / "flipped.om"
    bad.write_bytes(bytes(data))
    with pytest.raises(OmFormatError, match=f"{bad} fails its SHA-256 check") as info:
        OmModel.load(bad)
    assert info.value.acl_code == 100013


def test_real_atc_om_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "resnet.om"
    fake.write_bytes(b"IMOD" + bytes(252))
    with pytest.raises(OmFormatError, match=f"{fake} is a real ATC .om.*real pyACL") as info:
        OmModel.load(fake)
    assert info.value.acl_code == 100012


def test_unknown_content(tmp_path: Path) -> None:
    with pytest.raises(OmFormatError, match="not an .om file") as info:
        OmModel.load(b"\x89PNG\r\n\x1a\n" + bytes(100))
    assert info.value.acl_code == 100013


def test_unknown_container_version(om_static: Path) -> None:
    data = bytearray(om_static.read_bytes())
    data[7] = 2
    with pytest.raises(OmFormatError, match="unknown container version") as info:
        OmModel.load(reseal(bytes(data)))
    assert info.value.acl_code == 100013


def test_invalid_header_with_valid_checksum(om_static: Path) -> None:
    data = om_static.read_bytes()
    header_len = struct.unpack_from("<Q", data, 8)[0]
    header = json.loads(data[16 : 16 + header_len])
    del header["gears"]
    new_header = json.dumps(header).encode()
    body = MAGIC + struct.pack("<Q", len(new_header)) + new_header + data[16 + header_len : -32]
    with pytest.raises(OmFormatError, match=r"invalid header \(KeyError: 'gears'\)") as info:
        OmModel.load(reseal(body + bytes(32)))
    assert info.value.acl_code == 100013


# ----------------------------------------------------------------------------- compiling


def test_output_name_rule(tmp_path: Path) -> None:
    assert om_output_path("models/resnet") == Path("models/resnet.om")
    assert om_output_path("models/resnet.om") == Path("models/resnet.om")
    assert om_output_path("model.v1") == Path("model.v1.om")
    onnx_path = build_add_mul(tmp_path / "am.onnx")
    written = compile_onnx(
        onnx_path, tmp_path / "sub" / "am", input_shape="a:2,4;b:2,4", **KEEP_FP32
    )
    assert written == tmp_path / "sub" / "am.om" and written.is_file()
    again = compile_onnx(onnx_path, tmp_path / "am.om", input_shape="a:2,4;b:2,4", **KEEP_FP32)
    assert again == tmp_path / "am.om" and again.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["am.om", "am.onnx", "sub"]


def test_onnx_shapes_used_when_input_shape_omitted(tmp_path: Path) -> None:
    om = compile_onnx(
        build_mlp(tmp_path / "mlp.onnx"), tmp_path / "m", dynamic_batch_size="4,1", **KEEP_FP32
    )
    desc = OmModel.load(om).description
    assert desc.inputs[0].dims == (-1, 16)
    assert desc.gears == ((1,), (4,))  # sorted


def test_dtype_tables_agree_with_onnx() -> None:
    for onnx_type, data_type in DTYPES_BY_ONNX.items():
        assert TensorProto.DataType.Name(onnx_type) == data_type.onnx_name
        if data_type.numpy is not None:
            assert helper.tensor_dtype_to_np_dtype(onnx_type) == data_type.numpy
    assert DTYPES_BY_ONNX[TensorProto.FLOAT].acl == 0
    assert DTYPES_BY_ONNX[TensorProto.BOOL].acl == 12
    assert DTYPES_BY_NUMPY[np.dtype(np.int64)].acl == 9


def build_string_model(path: Path, string_input: bool) -> Path:
    """A model with a STRING input (identity) or a STRING output (cast)."""
    if string_input:
        node = helper.make_node("Identity", ["x"], ["y"])
        io_types = (TensorProto.STRING, TensorProto.STRING)
    else:
        node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)
        io_types = (TensorProto.FLOAT, TensorProto.STRING)
    graph = helper.make_graph(
        [node],
        "strings",
        [helper.make_tensor_value_info("x", io_types[0], [2])],
        [helper.make_tensor_value_info("y", io_types[1], [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return path


def test_unsupported_dtypes(tmp_path: Path) -> None:
    # migrate's pre-flight (atc_onnx.parse_problems), with its advice
    with pytest.raises(OmCompileError, match="input 'x' is STRING.*ATC compiles no string"):
        compile_onnx(build_string_model(tmp_path / "in.onnx", True), tmp_path / "in")
    with pytest.raises(OmCompileError, match="output 'y' is STRING in the ONNX graph"):
        compile_onnx(build_string_model(tmp_path / "out.onnx", False), tmp_path / "out")


MANY_GEARS = ",".join(str(b) for b in range(1, 102))

COMPILE_ERRORS = [
    # (builder, flags, message pattern)
    (build_mlp, {"input_shape": "q:1,16"}, r"names 'q', which is not an input.*inputs are: x"),
    (build_mlp, {"input_shape": "x:4,16;x:4,16"}, r"gives 'x' twice"),
    (build_mlp, {"input_shape": "4,16"}, r"entry '4,16' is not name:dims"),
    (build_mlp, {"input_shape": "x:0,16"}, r"must be positive integers or -1, got '0,16'"),
    (build_mlp, {"input_shape": "x:a,16"}, r"must be positive integers or -1, got 'a,16'"),
    (build_mlp, {"input_shape": "x:4,16,1"}, r"gives x 3 dims but the ONNX input has 2 \(-1,16\)"),
    (build_mlp, {}, r"dynamic dims in the ONNX graph \(x:-1,16\) that --input_shape does not give"),
    (
        build_mlp,
        {"dynamic_batch_size": "1,2", "dynamic_dims": "1;2"},
        r"only one of .*got --dynamic_batch_size and --dynamic_dims",
    ),
    (build_mlp, {"input_shape": "x:4,16", "dynamic_batch_size": "1,2"}, r"every input is static"),
    (
        build_conv,
        {"input_shape": "image:1,3,-1,-1", "dynamic_batch_size": "1,2"},
        r"E10018: Only batch N can be -1 when set --dynamic_batch_size; image is 1,3,-1,-1",
    ),
    (
        build_add_mul,
        {"input_shape": "a:-1,4;b:2,-1", "dynamic_batch_size": "1,2"},
        r"Only batch N can be -1.*b is 2,-1",
    ),
    (build_mlp, {"dynamic_batch_size": "1,2,2"}, r"gear '2' is given twice"),
    (build_mlp, {"dynamic_batch_size": "1,0"}, r"bad gear '0'; expected positive batch sizes"),
    (build_mlp, {"dynamic_batch_size": "1,-4"}, r"bad gear '-4'"),
    (build_mlp, {"dynamic_batch_size": "1;2"}, r"bad gear '1;2'"),
    (build_mlp, {"dynamic_batch_size": MANY_GEARS}, r"has 101 gears; ATC allows at most 100"),
    (
        build_conv,
        {"input_shape": "image:1,3,-1,16", "dynamic_image_size": "16,16"},
        r"exactly two -1 dims \(H and W\); image is 1,3,-1,16",
    ),
    (
        build_conv,
        {"input_shape": "image:1,3,-1,-1", "dynamic_image_size": "16,16;32"},
        r"bad gear '32'; expected .* \"height,width\"",
    ),
    (
        build_dims_model,
        {"input_shape": "input_ids:1,-1;attention_mask:1,-1", "dynamic_dims": "8,8;16"},
        r"bad gear '16'; expected .* each with 2 comma-separated values",
    ),
    (
        build_mlp,
        {"input_shape": "x:-1,17", "dynamic_batch_size": "1,2"},
        r"does not accept the shapes of gear \(1\) \(x:1,17\); onnxruntime says: .*",
    ),
    (
        build_mlp,
        {"input_shape": "x:4,16", "input_format": "nchw"},
        r"--input_format 'nchw' is not supported; use one of NCHW, NHWC, ND",
    ),
]


@pytest.mark.parametrize(("build", "flags", "pattern"), COMPILE_ERRORS)
def test_compile_errors(
    tmp_path: Path, build: Callable[[Path], Path], flags: dict[str, str], pattern: str
) -> None:
    onnx_path = build(tmp_path / "model.onnx")
    with pytest.raises(OmCompileError, match=pattern):
        compile_onnx(onnx_path, tmp_path / "model", **flags)
    assert not (tmp_path / "model.om").exists()


def test_compile_missing_or_invalid_model(tmp_path: Path) -> None:
    with pytest.raises(OmCompileError, match=f"cannot read --model {tmp_path}/absent.onnx"):
        compile_onnx(tmp_path / "absent.onnx", tmp_path / "x")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff" * 64)
    with pytest.raises(OmCompileError, match=f"--model {junk} is not a valid ONNX model"):
        compile_onnx(junk, tmp_path / "x")


# ----------------------------------------------------------------------------- the CLI


def test_cli_compile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = build_conv(tmp_path / "conv.onnx")
    code = cli.main(
        [
            "emulator",
            "compile",
            f"--model={onnx_path}",
            "--framework=5",
            "--output",
            str(tmp_path / "conv"),
            "--input_shape",
            "image:1,3,-1,-1",
            "--dynamic_image_size",
            "16,16;24,32",
            "--soc_version",
            "Ascend910B3",
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert out[0] == str(tmp_path / "conv.om")
    assert out[1] == (
        "inputs: image FLOAT[1,3,-1,-1]; outputs: features FLOAT[1,8]; hw gears 16,16;24,32"
    )
    plan = OmModel.load(tmp_path / "conv.om").memory
    assert out[2].startswith("device memory per load: work ") and out[2].endswith(f"({plan.rule})")
    assert out[3].startswith(f"on Ascend hardware: atc --model={onnx_path} --framework=5 ")
    assert "--dynamic_image_size='16,16;24,32'" in out[3]
    desc = OmModel.load(tmp_path / "conv.om").description
    assert desc.soc_version == "Ascend910B3"
    assert desc.gears == ((16, 16), (24, 32))


def test_a_layout_format_applies_to_inputs_of_its_rank(tmp_path: Path) -> None:
    conv = build_conv(tmp_path / "conv.onnx")
    om = compile_onnx(
        conv, tmp_path / "conv", input_shape="image:1,3,16,16", input_format="NHWC", **KEEP_FP32
    )
    assert OmModel.load(om).description.inputs[0].acl_format == Format.NHWC
    mlp = build_mlp(tmp_path / "mlp.onnx")
    om = compile_onnx(mlp, tmp_path / "mlp", input_shape="x:4,16", input_format="NHWC", **KEEP_FP32)
    assert OmModel.load(om).description.inputs[0].acl_format == Format.ND


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--framework", "0"], "--framework 0 is not supported by the emulator: 5 (ONNX) or 3"),
        (["--framework", "5", "--input_shape", "q:1,16"], "names 'q', which is not an input"),
        (["--framework", "5"], "no gear option was given"),
    ],
)
def test_cli_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    onnx_path = build_mlp(tmp_path / "mlp.onnx")
    argv = ["emulator", "compile", "--model", str(onnx_path), "--output", str(tmp_path / "m")]
    code = cli.main(argv + extra)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err.startswith("ge-python-model emulator: error: ")
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""
    assert not (tmp_path / "m.om").exists()


def test_cli_help_mentions_emulator_and_atc(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["emulator", "compile", "--help"])
    text = capsys.readouterr().out
    assert "NOT a real" in text
    assert "atc --model=resnet.onnx --framework=5" in text


def test_mixed_types_run_dtype_check(om_mixed_types: Path) -> None:
    model = OmModel.load(om_mixed_types)
    x = np.array([[-1, 0, 1, 2]], np.int32)
    h = np.array([[0.5, 1, 2, 3]], np.float16)
    doubled, positive, squared = model.run([x, h])
    np.testing.assert_array_equal(doubled, 2 * x)
    np.testing.assert_array_equal(positive, x > 0)
    np.testing.assert_array_equal(squared, h * h)
    with pytest.raises(ValueError, match="input x must be int32, got int64"):
        model.run([x.astype(np.int64), h])


def test_run_from_many_threads(om_dynamic_batch: Path) -> None:
    model = OmModel.load(om_dynamic_batch)
    arrays = [np.full((b, 16), b / 10, np.float32) for b in (1, 2, 4, 8)] * 4
    want = [model.run([a]) for a in arrays]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda a: model.run([a]), arrays))
    for outputs, expected in zip(got, want):
        for out, ref in zip(outputs, expected):
            np.testing.assert_array_equal(out, ref)
