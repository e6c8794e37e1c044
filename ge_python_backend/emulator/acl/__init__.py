"""The emulated `acl` module: init/finalize, data buffers, tensor descriptions, recent error.

Only names real pyACL's `acl` has (pinned by tests/test_emulator_surface.py): its functions are
implemented in `_base.py` and `_tensor.py`, its sub-modules `rt`, `mdl`, `media` and `util`
likewise. The calling conventions are those of `_base.py`.
"""

from ge_python_backend.emulator.acl import mdl, media, rt, util
from ge_python_backend.emulator.acl._base import (
    app_log,
    create_data_buffer,
    data_type_size,
    destroy_data_buffer,
    finalize,
    get_data_buffer_addr,
    get_data_buffer_size,
    get_data_buffer_size_v2,
    get_recent_err_msg,
    get_soc_name,
    get_version,
    init,
    update_data_buffer,
)
from ge_python_backend.emulator.acl._tensor import (
    create_tensor_desc,
    destroy_tensor_desc,
    get_tensor_desc_dim,
    get_tensor_desc_dim_v2,
    get_tensor_desc_element_count,
    get_tensor_desc_format,
    get_tensor_desc_num_dims,
    get_tensor_desc_size,
    get_tensor_desc_type,
)

__all__ = [
    "app_log",
    "create_data_buffer",
    "create_tensor_desc",
    "data_type_size",
    "destroy_data_buffer",
    "destroy_tensor_desc",
    "finalize",
    "get_data_buffer_addr",
    "get_data_buffer_size",
    "get_data_buffer_size_v2",
    "get_recent_err_msg",
    "get_soc_name",
    "get_tensor_desc_dim",
    "get_tensor_desc_dim_v2",
    "get_tensor_desc_element_count",
    "get_tensor_desc_format",
    "get_tensor_desc_num_dims",
    "get_tensor_desc_size",
    "get_tensor_desc_type",
    "get_version",
    "init",
    "mdl",
    "media",
    "rt",
    "update_data_buffer",
    "util",
]
