"""Feed checks: does a request (input name -> numpy array) fit the model, and which gear runs it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ge_python_backend.ascend import DTYPES_BY_NUMPY
from ge_python_backend.modelinfo import TensorSpec
from ge_python_backend.runtime.errors import InputError
from ge_python_backend.runtime.gears import GearTable

__all__ = ["FeedChecker", "Feeds"]

Feeds = Mapping[str, np.ndarray]
_Signature = tuple[tuple[str, np.dtype[Any], tuple[int, ...]], ...]

_CACHE_SIZE = 256  # request signatures (input names, dtypes, shapes) remembered as valid


class FeedChecker:
    """Matches requests to the gear table; a signature that fitted once is looked up."""

    def __init__(self, inputs: tuple[TensorSpec, ...], table: GearTable) -> None:
        self.inputs = inputs
        self.table = table
        # per input, the axes the gears fix: a batched input's rows (axis 0) are free
        self._first = tuple(1 if batched else 0 for batched in table.batched_inputs)
        self.ranges = table.input_ranges
        self._matched: dict[_Signature, tuple[int, int]] = {}

    def match(self, feeds: Feeds) -> tuple[int, int]:
        """(index in the gear table, rows) of a request; InputError if it does not fit."""
        key = _signature(feeds)
        if key is None:
            return self._check(feeds)
        found = self._matched.get(key)
        if found is None:
            found = self._check(feeds)
            if len(self._matched) < _CACHE_SIZE:
                self._matched[key] = found
        return found

    def inputs_text(self) -> str:
        """The model's inputs as error messages show them."""
        return ", ".join(
            f"{spec.name} {spec.triton_dtype} {_template(spec.shape, bool(first))}"
            for spec, first in zip(self.inputs, self._first)
        )

    def _check(self, feeds: Feeds) -> tuple[int, int]:
        """Every check, with the message of the first failure."""
        if not isinstance(feeds, Mapping):
            raise InputError(
                f"expected a mapping of input name to numpy array, got {type(feeds).__name__}"
            )
        names = [spec.name for spec in self.inputs]
        unknown = [name for name in feeds if name not in names]
        missing = [name for name in names if name not in feeds]
        if unknown or missing:
            problems = [f"unknown input(s) {', '.join(map(repr, unknown))}"] if unknown else []
            problems += [f"missing input(s) {', '.join(missing)}"] if missing else []
            raise InputError(f"{'; '.join(problems)}; the model's inputs are {self.inputs_text()}")
        rows: dict[str, int] = {}
        for spec, first, ranges in zip(self.inputs, self._first, self.ranges):
            array = feeds[spec.name]
            if not isinstance(array, np.ndarray):
                raise InputError(
                    f"input {spec.name!r}: expected a numpy.ndarray of {_dtype_text(spec.dtype)}, "
                    f"got {type(array).__name__}"
                )
            if array.dtype != spec.dtype:
                raise InputError(
                    f"input {spec.name!r}: expected dtype {_dtype_text(spec.dtype)}, got "
                    f"{_dtype_text(array.dtype)}; convert it explicitly (astype)"
                )
            fixed = all(
                want in (-1, got) for want, got in zip(spec.shape[first:], array.shape[first:])
            )
            if array.ndim != len(spec.shape) or not fixed:
                raise InputError(
                    f"input {spec.name!r}: expected shape {_template(spec.shape, bool(first))}, "
                    f"got {array.shape}"
                )
            if ranges and not all(lo <= d <= hi for d, (lo, hi) in zip(array.shape, ranges)):
                allowed = ", ".join(str(lo) if lo == hi else f"{lo}..{hi}" for lo, hi in ranges)
                raise InputError(
                    f"input {spec.name!r}: shape {array.shape} is outside the model's shape "
                    f"range ({allowed})"
                )
            if first:
                if array.shape[0] < 1:
                    raise InputError(f"input {spec.name!r}: expected at least one row, got 0")
                rows[spec.name] = array.shape[0]
        if len(set(rows.values())) > 1:
            counts = ", ".join(f"{name} has {count}" for name, count in rows.items())
            raise InputError(f"inputs must have the same number of rows (axis 0); {counts}")
        for number, gear in enumerate(self.table.gears):
            if all(
                want in (-1, got)
                for spec, shape, first in zip(self.inputs, gear.shapes, self._first)
                for want, got in zip(shape[first:], feeds[spec.name].shape[first:])
            ):
                return number, next(iter(rows.values()), 1)
        got = ", ".join(f"{spec.name} {feeds[spec.name].shape}" for spec in self.inputs)
        raise InputError(
            f"input shapes {got} match none of the model's {self.table.kind.label} gears: "
            f"{self.table.text()}"
        )


def _signature(feeds: Feeds) -> _Signature | None:
    """(name, dtype, shape) of each input when `feeds` is a dict of numpy arrays, else None."""
    if not isinstance(feeds, dict):
        return None
    signature = []
    for name, array in feeds.items():
        if not isinstance(array, np.ndarray):
            return None
        signature.append((name, array.dtype, array.shape))
    return tuple(signature)


def _template(shape: tuple[int, ...], batched: bool) -> str:
    dims = [
        "rows" if batched and axis == 0 else "?" if d == -1 else str(d)
        for axis, d in enumerate(shape)
    ]
    return f"({', '.join(dims)}{',' if len(dims) == 1 else ''})"


def _dtype_text(dtype: np.dtype[Any]) -> str:
    data_type = DTYPES_BY_NUMPY.get(dtype)
    triton = None if data_type is None else data_type.triton
    return f"{dtype} ({triton})" if triton else str(dtype)
