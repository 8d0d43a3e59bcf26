"""`take` (Array API): elements of an array at integer indices along an axis, as a
library step inside the plan (numpy's `take`).

The indices are data: they are realized where `take` is called and checked against the
axis (an out-of-range index raises `IndexError` naming `take` there, negative ones count
from the end as in numpy); the gather itself stays lazy and fuses with the rest of the
plan like any library step.

>>> import svod
>>> svod.take(svod.asarray([[1, 2], [3, 4]]), svod.asarray([1, 0, 1]), axis=0).tolist()
[[3, 4], [1, 2], [3, 4]]
"""

from __future__ import annotations

from svod.creation import library_call
from svod.dtype import DTypeError
from svod.errors import SvodIndexError, SvodValueError
from svod.ir import shape_str
from svod.movement import reshape
from svod.tensor import Tensor, _normalize_axis, asarray

__all__ = ["take"]


def take(x, indices, /, *, axis: int | None = None) -> Tensor:
    """`x`'s elements at `indices` along `axis` (of the flattened `x` when None; the
    Array API asks for an axis when `x` has more than one dimension, numpy does not)."""
    x = asarray(x)
    idx = asarray(indices)
    if not idx.dtype.is_int:
        raise DTypeError(f"take: indices must be integers, got {idx.dtype}")
    if axis is None:
        x, a = reshape(x, (-1,)), 0
    else:
        if x.ndim == 0:
            raise SvodValueError("take: a 0-d array has no axis to take along")
        a = _normalize_axis(axis, x.ndim, "take")
    n = x.shape[a]
    vals = idx.numpy()  # data: realized here, so a bad index raises at the call
    if vals.size and (int(vals.min()) < -n or int(vals.max()) >= n):
        bad = vals[(vals < -n) | (vals >= n)].flat[0]
        raise SvodIndexError(f"take: index {int(bad)} is out of bounds for axis {a} with size {n} "
                             f"(array of shape {shape_str(x.shape)})")
    if n == 0 and idx.size:
        raise SvodIndexError(f"take: cannot take from an empty axis {a} (array of shape {shape_str(x.shape)})")
    shape = x.shape[:a] + idx.shape + x.shape[a + 1:]
    return library_call("take", (a,), [x, idx], [(shape, x.dtype)])[0]

