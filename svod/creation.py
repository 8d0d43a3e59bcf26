"""The Array API creation functions beyond `asarray`: constants (`full`, `zeros`, `ones`,
`empty` and their `_like` forms), ranges (`arange`, `linspace`) and `eye`.

A constant is one broadcast CONST node (`svod.tensor._const`, memoised), never a buffer;
ranges and `eye` are computed by numpy at construction (small, and their values are data).
Python floats give svod's default float (float32), Python ints int64, unless `dtype` says.
`library_call` creates the lazy results of a library function (`svod.library`): one
`Ops.LIBRARY` node per result.

>>> import svod
>>> svod.full((2, 2), 3).tolist(), svod.arange(1.0, 2.0, 0.5).dtype
([[3, 3], [3, 3]], float32)
"""

from __future__ import annotations

import builtins
import math
import numbers
from collections.abc import Sequence

import numpy as np

from svod import dtype as dt
from svod.errors import SvodOverflowError, SvodTypeError, SvodValueError
from svod.ir import OP, UOp, check_size
from svod.library import ENTRIES
from svod.tensor import Tensor, _check_int, _check_shape, _const, _from_numpy, _is_scalar, _scalar_value, asarray


def full(shape, fill_value, *, dtype=None, device=None) -> Tensor:
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if not _is_scalar(fill_value):
        raise SvodTypeError(f"full: fill_value must be a scalar, got {type(fill_value).__name__}")
    d = dt.dtype(dtype) if dtype is not None else dt.from_numpy(fill_value.dtype) \
        if isinstance(fill_value, np.generic) else dt.result_type(_scalar_value(fill_value))  # np scalars: strong
    shape = _check_shape(shape, "full", d)
    if d.is_int and not dt.can_cast_scalar(d, fill_value):
        raise SvodOverflowError(f"full: fill value {fill_value} does not fit {d}")
    return Tensor._from(_const(fill_value, d, shape))


def zeros(shape, *, dtype=None, device=None) -> Tensor:
    return full(shape, 0, dtype=dtype or dt.default_float)


def ones(shape, *, dtype=None, device=None) -> Tensor:
    return full(shape, 1, dtype=dtype or dt.default_float)


def empty(shape, *, dtype=None, device=None) -> Tensor:
    return zeros(shape, dtype=dtype)


def full_like(x: Tensor, fill_value, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return full(x.shape, fill_value, dtype=dtype or x.dtype)


def zeros_like(x: Tensor, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return full(x.shape, 0, dtype=dtype or x.dtype)


def ones_like(x: Tensor, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return full(x.shape, 1, dtype=dtype or x.dtype)


def empty_like(x: Tensor, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return zeros_like(x, dtype=dtype)


def arange(start, /, stop=None, step=1, *, dtype=None, device=None) -> Tensor:
    """Like numpy.arange; int arguments give int64, floats float32."""
    if stop is None:
        start, stop = 0, start
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, Tensor):
            v = v.item()
        if not isinstance(v, (numbers.Real, np.integer, np.floating)) or isinstance(v, (bool, np.bool_)):
            raise SvodTypeError(f"arange: {what} must be a real number, got {v!r} ({type(v).__name__})")
        if not math.isfinite(v):
            raise SvodValueError(f"arange: {what} must be finite, got {v!r} (arange({start!r}, {stop!r}, {step!r}) "
                                 f"has no length)")
    if step == 0:
        raise SvodValueError("arange: step must not be zero")
    d = dt.dtype(dtype) if dtype is not None else dt.result_type(start, stop, step)
    n = builtins.max(0, math.ceil((stop - start) / step))
    check_size((n,), d)
    arr = (start + step * np.arange(n, dtype=np.float64 if d.is_float else np.int64)).astype(d.np)
    return _from_numpy(arr, copy=False)


def linspace(start, stop, /, num: int, *, dtype=None, device=None, endpoint: bool = True) -> Tensor:
    d = dt.dtype(dtype) if dtype is not None else dt.default_float
    num = _check_int(num, "num", "linspace", 0)
    check_size((num,), d)
    return _from_numpy(np.linspace(start, stop, num, endpoint=endpoint, dtype=np.float64).astype(d.np), copy=False)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype=None, device=None) -> Tensor:
    d = dt.dtype(dtype) if dtype is not None else dt.default_float
    n_rows = _check_int(n_rows, "n_rows", "eye", 0)
    n_cols = n_rows if n_cols is None else _check_int(n_cols, "n_cols", "eye", 0)
    k = _check_int(k, "k", "eye")
    check_size((n_rows, n_cols), d)
    return _from_numpy(np.eye(n_rows, n_cols, k=k, dtype=d.np), copy=False)


# ----------------------------------------------------------------------------- library results


def library_call(fn: str, params: tuple, inputs: Sequence, outs: Sequence[tuple[tuple[int, ...], object]]) -> list:
    """Lazy results of a library call: one Tensor per (shape, dtype) in `outs`, each an
    `Ops.LIBRARY` node over the `inputs` (Tensors, in call order)."""
    if fn not in ENTRIES:
        raise KeyError(f"svod.library: no library function {fn!r}")
    srcs = tuple(t.uop for t in inputs)
    return [Tensor._from(UOp(OP.LIBRARY, d, srcs, (fn, params, j, tuple(int(n) for n in shape))))
            for j, (shape, d) in enumerate(outs)]
