"""`ascend`: ACL's and ATC's vocabulary, pinned (exports, codes, data types, formats, kinds)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from ge_python_backend import ascend
from ge_python_backend.ascend import (
    ATC_INPUT_FORMATS,
    ATC_OM_MAGIC,
    DATA_TYPES,
    DTYPES_BY_ACL,
    DTYPES_BY_NUMPY,
    DTYPES_BY_ONNX,
    DTYPES_BY_TRITON,
    EMULATOR_OM_MAGIC,
    AclCode,
    Format,
    GearKind,
    MemcpyKind,
    OmContainer,
    RunMode,
    describe_code,
    format_name,
    om_container,
)

# The project's shared references sit beside the checkout (../shared), in CI as in a session.
REFERENCE = next(
    (
        root / "shared" / "reference" / "pyacl-api.md"
        for root in (Path(__file__).resolve().parents[2], Path("/work"))
        if (root / "shared" / "reference" / "pyacl-api.md").exists()
    ),
    Path("../shared/reference/pyacl-api.md"),
)

# Every code of pyacl-api.md §5 with its name (ranges expanded), as the table must have them.
EXPECTED = {
    0: "ACL_SUCCESS",
    100000: "ACL_ERROR_INVALID_PARAM",
    100001: "ACL_ERROR_UNINITIALIZE",
    100002: "ACL_ERROR_REPEAT_INITIALIZE",
    100003: "ACL_ERROR_INVALID_FILE",
    100006: "ACL_ERROR_PARSE_FILE",
    100011: "ACL_ERROR_INVALID_MODEL_ID",
    100012: "ACL_ERROR_DESERIALIZE_MODEL",
    100013: "ACL_ERROR_PARSE_MODEL",
    100014: "ACL_ERROR_READ_MODEL_FAILURE",
    100017: "ACL_ERROR_MODEL_INPUT_NOT_MATCH",
    100018: "ACL_ERROR_MODEL_OUTPUT_NOT_MATCH",
    100019: "ACL_ERROR_MODEL_NOT_DYNAMIC",
    100026: "ACL_ERROR_UNSUPPORTED_DATA_TYPE",
    100033: "ACL_ERROR_REPEAT_SUBSCRIBE",
    100034: "ACL_ERROR_STREAM_NOT_SUBSCRIBE",
    100035: "ACL_ERROR_THREAD_NOT_SUBSCRIBE",
    100036: "ACL_ERROR_WAIT_CALLBACK_TIMEOUT",
    100037: "ACL_ERROR_REPEAT_FINALIZE",
    100038: "ACL_ERROR_NOT_STATIC_AIPP",
    148046: "ACL_ERROR_PROF_REPEAT_SUBSCRIBE",
    148053: "ACL_ERROR_INVALID_BUNDLE_MODEL_ID",
    200000: "ACL_ERROR_BAD_ALLOC",
    200001: "ACL_ERROR_API_NOT_SUPPORT",
    200002: "ACL_ERROR_INVALID_DEVICE",
    200003: "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED",
    200004: "ACL_ERROR_RESOURCE_NOT_MATCH",
    200005: "ACL_ERROR_INVALID_RESOURCE_HANDLE",
    200006: "ACL_ERROR_FEATURE_UNSUPPORTED",
    300000: "ACL_ERROR_STORAGE_OVER_LIMIT",
    500000: "ACL_ERROR_INTERNAL_ERROR",
    500001: "ACL_ERROR_FAILURE",
    500002: "ACL_ERROR_GE_FAILURE",
    500003: "ACL_ERROR_RT_FAILURE",
    500004: "ACL_ERROR_DRV_FAILURE",
    500005: "ACL_ERROR_PROFILING_FAILURE",
    107000: "ACL_ERROR_RT_PARAM_INVALID",
    107001: "ACL_ERROR_RT_INVALID_DEVICEID",
    107002: "ACL_ERROR_RT_CONTEXT_NULL",
    107003: "ACL_ERROR_RT_STREAM_CONTEXT",
    107004: "ACL_ERROR_RT_MODEL_CONTEXT",
    107005: "ACL_ERROR_RT_STREAM_MODEL",
    107008: "ACL_ERROR_RT_ADDR_UNALIGNED",
    107011: "ACL_ERROR_RT_STREAM_SUBSCRIBE",
    107012: "ACL_ERROR_RT_THREAD_SUBSCRIBE",
    107015: "ACL_ERROR_RT_STREAM_NO_CB_REG",
    107016: "ACL_ERROR_RT_INVALID_MEMORY_TYPE",
    107017: "ACL_ERROR_RT_INVALID_HANDLE",
    107018: "ACL_ERROR_RT_INVALID_MALLOC_TYPE",
    107022: "ACL_ERROR_RT_DEVICE_TASK_ABORT",
    207000: "ACL_ERROR_RT_FEATURE_NOT_SUPPORT",
    207001: "ACL_ERROR_RT_MEMORY_ALLOCATION",
    207002: "ACL_ERROR_RT_MEMORY_FREE",
    207004: "ACL_ERROR_RT_NO_DEVICE",
    207005: "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL",
    207006: "ACL_ERROR_RT_NO_PERMISSION",
    207007: "ACL_ERROR_RT_NO_EVENT_RESOURCE",
    207008: "ACL_ERROR_RT_NO_STREAM_RESOURCE",
    207009: "ACL_ERROR_RT_NO_NOTIFY_RESOURCE",
    207010: "ACL_ERROR_RT_NO_MODEL_RESOURCE",
    207011: "ACL_ERROR_RT_NO_CDQ_RESOURCE",
    207018: "ACL_ERROR_RT_DEVIDE_OOM",
    507000: "ACL_ERROR_RT_INTERNAL_ERROR",
    507001: "ACL_ERROR_RT_TS_ERROR",
    507002: "ACL_ERROR_RT_STREAM_TASK_FULL",
    507003: "ACL_ERROR_RT_STREAM_TASK_EMPTY",
    507004: "ACL_ERROR_RT_STREAM_NOT_COMPLETE",
    507005: "ACL_ERROR_RT_END_OF_SEQUENCE",
    507006: "ACL_ERROR_RT_EVENT_NOT_COMPLETE",
    507010: "ACL_ERROR_RT_LOST_HEARTBEAT",
    507011: "ACL_ERROR_RT_MODEL_EXECUTE",
    507012: "ACL_ERROR_RT_REPORT_TIMEOUT",
    507013: "ACL_ERROR_RT_SYS_DMA",
    507014: "ACL_ERROR_RT_AICORE_TIMEOUT",
    507015: "ACL_ERROR_RT_AICORE_EXCEPTION",
    507016: "ACL_ERROR_RT_AICORE_TRAP_EXCEPTION",
    507017: "ACL_ERROR_RT_AICPU_TIMEOUT",
    507018: "ACL_ERROR_RT_AICPU_EXCEPTION",
    507033: "ACL_ERROR_RT_DEV_SETUP_ERROR",
    507034: "ACL_ERROR_RT_VECTOR_CORE_TIMEOUT",
    507035: "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION",
    507036: "ACL_ERROR_RT_VECTOR_CORE_TRAP_EXCEPTION",
    507053: "ACL_ERROR_RT_DEVICE_MEM_ERROR",
    507054: "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR",
    507055: "ACL_ERROR_RT_SUSPECT_DEVICE_MEM_ERROR",
    507056: "ACL_ERROR_RT_LINK_ERROR",
    507057: "ACL_ERROR_RT_SUSPECT_REMOTE_ERROR",
    507899: "ACL_ERROR_RT_DRV_INTERNAL_ERROR",
    507900: "ACL_ERROR_RT_AICPU_INTERNAL_ERROR",
    507901: "ACL_ERROR_RT_SOCKET_CLOSE",
    145000: "ACL_ERROR_GE_PARAM_INVALID",
    145001: "ACL_ERROR_GE_EXEC_NOT_INIT",
    145002: "ACL_ERROR_GE_EXEC_MODEL_PATH_INVALID",
    145003: "ACL_ERROR_GE_EXEC_MODEL_ID_INVALID",
    145006: "ACL_ERROR_GE_EXEC_MODEL_DATA_SIZE_INVALID",
    145007: "ACL_ERROR_GE_EXEC_MODEL_ADDR_INVALID",
    145009: "ACL_ERROR_GE_EXEC_LOAD_MODEL_REPEATED",
    145011: "ACL_ERROR_GE_DYNAMIC_INPUT_ADDR_INVALID",
    145012: "ACL_ERROR_GE_DYNAMIC_INPUT_LENGTH_INVALID",
    145013: "ACL_ERROR_GE_DYNAMIC_BATCH_SIZE_INVALID",
    145014: "ACL_ERROR_GE_AIPP_BATCH_EMPTY",
    145015: "ACL_ERROR_GE_AIPP_NOT_EXIST",
    145016: "ACL_ERROR_GE_AIPP_MODE_INVALID",
    145020: "ACL_ERROR_GE_FORMAT_INVALID",
    145021: "ACL_ERROR_GE_SHAPE_INVALID",
    145022: "ACL_ERROR_GE_DATATYPE_INVALID",
    245000: "ACL_ERROR_GE_MEMORY_ALLOCATION",
    245001: "ACL_ERROR_GE_MEMORY_OPERATE_FAILED",
    245002: "ACL_ERROR_GE_DEVICE_MEMORY_ALLOCATION_FAILED",
    545000: "ACL_ERROR_GE_INTERNAL_ERROR",
    545001: "ACL_ERROR_GE_LOAD_MODEL",
    545002: "ACL_ERROR_GE_EXEC_LOAD_MODEL_PARTITION_FAILED",
    545003: "ACL_ERROR_GE_EXEC_LOAD_WEIGHT_PARTITION_FAILED",
    545004: "ACL_ERROR_GE_EXEC_LOAD_TASK_PARTITION_FAILED",
    545005: "ACL_ERROR_GE_EXEC_LOAD_KERNEL_PARTITION_FAILED",
    545006: "ACL_ERROR_GE_EXEC_RELEASE_MODEL_DATA",
    545007: "ACL_ERROR_GE_COMMAND_HANDLE",
    545008: "ACL_ERROR_GE_GET_TENSOR_INFO",
    545009: "ACL_ERROR_GE_UNLOAD_MODEL",
}


def test_table_names_every_expected_code() -> None:
    wrong = {code: describe_code(code)[0] for code in EXPECTED}
    wrong = {code: name for code, name in wrong.items() if name != EXPECTED[code]}
    assert not wrong, f"codes with a missing or wrong name: {wrong}"
    assert all(code.explanation for code in AclCode)


@pytest.mark.skipif(not REFERENCE.exists(), reason="the pyACL reference is not on this machine")
def test_table_covers_every_code_of_the_reference() -> None:
    text = REFERENCE.read_text()
    section = text[text.index("## 5. Error codes") : text.index("## 6. Pitfalls")]
    codes: set[int] = set()
    for first, last in re.findall(r"^\| (\d{6})(?:[–/ ]+(\d{6}))?", section, re.MULTILINE):
        codes.update(range(int(first), int(last or first) + 1))
    for first, *rest in re.findall(r"^\| (\d{6}) / (\d{6}) / (\d{6})", section, re.MULTILINE):
        codes.update(int(code) for code in (first, *rest))
    assert len(codes) > 100
    missing = sorted(codes - set(AclCode))
    assert not missing, f"codes of pyacl-api.md §5 missing from AclCode: {missing}"


def test_unknown_codes_are_named_by_their_class() -> None:
    assert describe_code(123456) == (
        "UNKNOWN_ACL_ERROR",
        "unlisted code (caller or environment error)",
    )
    assert describe_code(599999)[1] == "unlisted code (internal software or hardware error)"
    assert describe_code(7)[1] == "unlisted code (code outside ACL's documented ranges)"


def test_exports() -> None:
    public = {name for name in vars(ascend) if not name.startswith("_")}
    imported = {
        "Any",
        "Mapping",
        "Path",
        "MappingProxyType",
        "annotations",
        "dataclasses",
        "enum",
        "np",
        "os",
        "re",
    }
    assert sorted(public - imported) == sorted(ascend.__all__)


def test_codes_carry_name_and_explanation() -> None:
    assert AclCode.SUCCESS == 0 and AclCode(0).acl_name == "ACL_SUCCESS"
    assert AclCode(507011) is AclCode.RT_MODEL_EXECUTE
    assert AclCode(507011).name == "RT_MODEL_EXECUTE"
    assert AclCode(507011).acl_name == "ACL_ERROR_RT_MODEL_EXECUTE"
    assert AclCode(507011).explanation == "model execution failed"
    assert AclCode.GE_DYNAMIC_BATCH_SIZE_INVALID == 145013
    assert f"{AclCode.RT_STREAM_SYNC_TIMEOUT}" == "507046"
    with pytest.raises(ValueError):
        AclCode(123456)


def test_data_types_round_trip() -> None:
    assert [t.acl for t in DATA_TYPES] == sorted(t.acl for t in DATA_TYPES)
    assert len(DTYPES_BY_ACL) == len(DATA_TYPES)
    for data_type in DTYPES_BY_NUMPY.values():
        assert data_type.numpy is not None and data_type.triton is not None
        assert DTYPES_BY_ACL[data_type.acl] is data_type
        assert DTYPES_BY_NUMPY[data_type.numpy] is data_type
        assert DTYPES_BY_TRITON[data_type.triton] is data_type
        assert data_type.onnx is not None and DTYPES_BY_ONNX[data_type.onnx] is data_type
    assert len(DTYPES_BY_NUMPY) == 12  # ACL_FLOAT .. ACL_BOOL without ACL_DT_UNDEFINED
    fp32 = DTYPES_BY_NUMPY[np.dtype(np.float32)]
    assert (fp32.acl, fp32.acl_name, fp32.triton, fp32.triton_config) == (
        0,
        "ACL_FLOAT",
        "FP32",
        "TYPE_FP32",
    )
    assert (fp32.onnx, fp32.onnx_name, fp32.onnxruntime_type) == (1, "FLOAT", "tensor(float)")
    assert DTYPES_BY_ACL[11].numpy == np.dtype(np.float64) and DTYPES_BY_ACL[11].triton == "FP64"
    assert DTYPES_BY_TRITON["BYTES"].triton_config == "TYPE_STRING"
    assert (
        DTYPES_BY_TRITON["BF16"].acl_name == "ACL_BF16" and DTYPES_BY_TRITON["BF16"].numpy is None
    )


def test_formats_memcpy_kinds_and_run_modes() -> None:
    assert (Format.NCHW, Format.ND, Format.NCL) == (0, 2, 47)
    assert format_name(1) == "NHWC" and format_name(99) == "FORMAT_99"
    assert [f.name for f in ATC_INPUT_FORMATS] == ["NCHW", "NHWC", "ND", "NCDHW", "NDHWC"]
    assert [int(k) for k in MemcpyKind] == [0, 1, 2, 3]
    assert MemcpyKind(2).acl_name == "ACL_MEMCPY_DEVICE_TO_HOST"
    assert (RunMode.DEVICE, RunMode.HOST) == (0, 1) and RunMode(1).acl_name == "ACL_HOST"


def test_gear_kinds_keep_their_serialized_values() -> None:
    assert [k.value for k in GearKind] == ["static", "batch", "hw", "dims"]
    assert GearKind("hw") is GearKind.HW and GearKind.HW == "hw"
    assert f"{GearKind.DIMS}" == "dims" and str(GearKind.BATCH) == "batch"
    assert json.dumps({"kind": GearKind.BATCH}) == '{"kind": "batch"}'
    assert [k.label for k in GearKind] == ["static", "batch", "HW", "dims"]
    assert GearKind.HW.atc_description == "dynamic image size"
    assert GearKind.BATCH.atc_option == "dynamic_batch_size" and GearKind.STATIC.atc_option is None
    assert GearKind.DIMS.set_call == "acl.mdl.set_input_dynamic_dims"


def test_item_sizes() -> None:
    for data_type in DTYPES_BY_NUMPY.values():
        assert data_type.numpy is not None and data_type.itemsize == data_type.numpy.itemsize
    assert DTYPES_BY_TRITON["BF16"].itemsize == 2 and DTYPES_BY_TRITON["BYTES"].itemsize is None


def test_om_container_by_the_first_bytes(tmp_path: Path) -> None:
    files = {
        "emulator.om": EMULATOR_OM_MAGIC + bytes(64),
        "newer.om": EMULATOR_OM_MAGIC[:-1] + b"\x09" + bytes(64),  # its reader names the version
        "atc.om": ATC_OM_MAGIC + bytes(64),
        "other.om": b"PK\x03\x04" + bytes(64),
        "short.om": b"GE",
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    assert {name: om_container(tmp_path / name) for name in files} == {
        "emulator.om": OmContainer.EMULATOR,
        "newer.om": OmContainer.EMULATOR,
        "atc.om": OmContainer.ATC,
        "other.om": None,
        "short.om": None,
    }
    assert om_container(tmp_path / "missing.om") is None
