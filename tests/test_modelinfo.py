"""`modelinfo`: the one tensor record, the one gear record and the one rendering of gears."""

from __future__ import annotations

import numpy as np

from ge_python_backend.ascend import GearKind
from ge_python_backend.modelinfo import GearInfo, TensorSpec, gears_text, shape_fits

X = TensorSpec("x", np.dtype(np.float32), "FP32", (1, 8))
Y = TensorSpec("y", np.dtype(np.float32), "FP32", (1, 8))


def test_a_declared_tensor_takes_its_numpy_dtype_from_its_triton_type() -> None:
    assert TensorSpec.declared("ids", "INT64", (-1, 4)) == TensorSpec(
        "ids", np.dtype(np.int64), "INT64", (-1, 4), "ND"
    )
    assert TensorSpec.declared("text", "BYTES", (1,)).dtype == np.dtype(object)
    assert TensorSpec.declared("half", "BF16", (1,)).dtype == np.dtype(object)


def test_the_default_gear_table_is_static_without_a_batch_axis() -> None:
    assert GearInfo() == GearInfo(GearKind.STATIC, False, (), (), (), 0)


def test_gears_text_for_every_kind() -> None:
    batch = GearInfo(GearKind.BATCH, True, (1, 2, 4, 8), max_batch=8)
    assert gears_text(batch, [X]) == "1,2,4,8"
    hw = GearInfo(GearKind.HW, True, (1,), hw_gears=((16, 16), (32, 32)), max_batch=1)
    assert gears_text(hw, [X]) == "16x16; 32x32"
    dims = GearInfo(GearKind.DIMS, dims_gears=(((1, 8), (1, 8)), ((1, 16), (1, 16))))
    assert gears_text(dims, [X, Y]) == "x (1, 8), y (1, 8); x (1, 16), y (1, 16)"
    assert gears_text(GearInfo(), [X, Y]) == "static shapes (1, 8), (1, 8)"


def test_shape_fits_declared_dims() -> None:
    assert shape_fits((2, 3, 16), (-1, 3, 16))
    assert not shape_fits((2, 3, 8), (-1, 3, 16))  # a fixed axis differs
    assert not shape_fits((3, 16), (-1, 3, 16))  # another rank
    assert shape_fits((-1, 16), (-1, 16)) and not shape_fits((-1, 16), (4, 16))
