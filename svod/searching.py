"""Searching (Array API): `searchsorted` (a library step) and `nonzero` (eager).

`nonzero`'s output shape depends on the data, so it realizes its input and returns
realized index arrays (docs/semantics.md: data-dependent shapes are eager).

>>> import svod
>>> svod.searchsorted(svod.asarray([1.0, 2.0, 4.0]), svod.asarray([0.5, 2.0, 9.0])).tolist()
[0, 1, 3]
>>> [i.tolist() for i in svod.nonzero(svod.asarray([[0, 3], [5, 0]]))]
[[0, 1], [1, 0]]
"""

from __future__ import annotations

import numpy as np

from svod import dtype as dt
from svod.creation import library_call
from svod.dtype import DTypeError
from svod.errors import ShapeError, SvodValueError
from svod.ir import shape_str
from svod.tensor import Tensor, _from_numpy, asarray, astype

__all__ = ["nonzero", "searchsorted"]


def searchsorted(x1, x2, /, *, side: str = "left", sorter=None) -> Tensor:
    """Indices (int64) where the elements of `x2` would be inserted into the sorted 1-D
    `x1` (ascending; `sorter` gives the order of an unsorted `x1`)."""
    if side not in ("left", "right"):
        raise SvodValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    x1, x2 = asarray(x1), asarray(x2)
    if x1.ndim != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-D, got shape {shape_str(x1.shape)}")
    d = dt.promote_types(x1.dtype, x2.dtype)
    ins = [astype(x1, d, copy=False), astype(x2, d, copy=False)]
    if sorter is not None:
        sorter = asarray(sorter)
        if sorter.shape != x1.shape or not sorter.dtype.is_int:
            raise DTypeError(f"searchsorted: sorter must be an integer array of x1's shape {shape_str(x1.shape)}, "
                             f"got {sorter.dtype} {shape_str(sorter.shape)}")
        ins.append(sorter)
    return library_call("searchsorted", (side,), ins, [(x2.shape, dt.int64)])[0]


def nonzero(x, /) -> tuple[Tensor, ...]:
    """The indices (int64, one array per axis) of the non-zero elements; eager."""
    x = asarray(x)
    if x.ndim == 0:
        raise SvodValueError("nonzero: a 0-d array has no axes to index (use nonzero(atleast_1d(x)))")
    return tuple(_from_numpy(i.astype(np.int64, copy=False), copy=False) for i in np.nonzero(x.numpy()))
