"""The status funnel and the runtime's errors."""

from __future__ import annotations

import types

import pytest

from ge_python_backend.errors import GeBackendError, UserError
from ge_python_backend.runtime.errors import (
    AclError,
    InputError,
    ModelFileError,
    RuntimeSelectionError,
    check,
    check_handle,
)


def test_check_passes_zero_and_raises_with_code_name_api_and_explanation() -> None:
    check(0, "acl.rt.malloc")
    with pytest.raises(AclError) as caught:
        check(507011, "acl.mdl.execute")
    error = caught.value
    assert (error.code, error.name, error.api) == (
        507011,
        "ACL_ERROR_RT_MODEL_EXECUTE",
        "acl.mdl.execute",
    )
    assert error.explanation == "model execution failed"
    assert str(error) == (
        "acl.mdl.execute failed with 507011 ACL_ERROR_RT_MODEL_EXECUTE: model execution failed"
    )
    assert isinstance(error, GeBackendError)


def test_check_adds_the_recent_error_message() -> None:
    fake_acl = types.SimpleNamespace(get_recent_err_msg=lambda: "  device 0 is on fire \n")
    with pytest.raises(AclError) as caught:
        check(207001, "acl.rt.malloc", fake_acl)  # type: ignore[arg-type]
    assert caught.value.recent == "device 0 is on fire"
    assert str(caught.value).endswith("out of memory; ACL says: device 0 is on fire")


def test_check_without_a_recent_message_api() -> None:
    with pytest.raises(AclError, match=r"^acl.init failed with 100001 ACL_ERROR_UNINITIALIZE"):
        check(100001, "acl.init", types.SimpleNamespace())  # type: ignore[arg-type]


def test_check_refuses_a_non_integer_status() -> None:
    with pytest.raises(TypeError, match=r"acl.rt.malloc returned \(1, 0\) where an integer"):
        check((1, 0), "acl.rt.malloc")


def test_check_handle() -> None:
    assert check_handle(0xA000, "acl.mdl.create_dataset") == 0xA000
    with pytest.raises(AclError) as caught:
        check_handle(0, "acl.mdl.create_dataset")
    assert caught.value.name == "ACL_ERROR_BAD_ALLOC"
    assert "it returned a null handle" in str(caught.value)
    with pytest.raises(TypeError, match="returned None where an integer handle"):
        check_handle(None, "acl.mdl.create_desc")


def test_hierarchy_is_small_and_flat() -> None:
    assert issubclass(InputError, GeBackendError) and issubclass(InputError, ValueError)
    assert issubclass(ModelFileError, UserError)
    assert issubclass(RuntimeSelectionError, UserError)
    assert issubclass(RuntimeSelectionError, ImportError)
    assert not issubclass(AclError, UserError)
