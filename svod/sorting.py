"""Sorting (Array API): `sort` and `argsort`, stable, as library steps inside the plan.

Both run numpy's stable sort (`svod.library`) on the realized operand when the plan runs:
lazy, fused with their producers' and consumers' kernels like any other step. NaNs sort
to the end (numpy's order); `descending=True` reverses the order of distinct values and
keeps equal ones in their original order, so its NaNs come first. Signed zeros compare
equal (kept in input order).

>>> import svod
>>> svod.argsort(svod.asarray([2, 1, 2, 0]), descending=True).tolist()
[0, 2, 1, 3]
"""

from __future__ import annotations

from svod import dtype as dt
from svod.creation import library_call
from svod.errors import SvodValueError
from svod.tensor import Tensor, _normalize_axis, asarray

__all__ = ["argsort", "sort"]


def _axis(x: Tensor, axis, name: str) -> int:
    if x.ndim == 0:
        raise SvodValueError(f"{name}: a 0-d array has no axis to sort along")
    return _normalize_axis(axis, x.ndim, name)


def sort(x, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The values of `x` sorted along `axis` (stable whatever `stable` says)."""
    x = asarray(x)
    a = _axis(x, axis, "sort")
    return library_call("sort", (a, bool(descending)), [x], [(x.shape, x.dtype)])[0]


def argsort(x, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """Indices (int64) that sort `x` along `axis`, stable."""
    x = asarray(x)
    a = _axis(x, axis, "argsort")
    return library_call("argsort", (a, bool(descending)), [x], [(x.shape, dt.int64)])[0]
