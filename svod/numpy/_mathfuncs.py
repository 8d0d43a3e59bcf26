"""numpy's elementwise extras (`where`, `around`, `isclose`, `cbrt`, `fmax`, ...), sorting,
searching and set functions, products (`dot`, `inner`, `outer`, `kron`, `trace`, ...)
and array queries (`shape`, `iscomplexobj`, ...), with numpy's calling conventions over
svod's lazy ops — the second half of `svod.numpy`'s functions (the first:
`svod/numpy/_functions.py`, whose contract holds here: numpy's arguments, ``out=``, the
caller's dtype defaults; data-dependent shapes and Python results realize the input).
"""

from __future__ import annotations

import builtins
import math

import numpy as np

import svod.tensor as T
from svod import _ddgraph as D
from svod import creation as C
from svod import dtype as dt
from svod import elementwise as E
from svod import linalg as LA
from svod import movement as M
from svod import nn
from svod import reductions as R
from svod.errors import ShapeError, SvodValueError
from svod.gather import take as _take
from svod.numpy._functions import _arr, _dtype, store_out
from svod.searching import nonzero as _nz
from svod.searching import searchsorted as _ss
from svod.sorting import argsort as _argsort
from svod.sorting import sort as _sort
from svod.tensor import Tensor

# ----------------------------------------------------------------------------- elementwise extras


def where(condition, x=None, y=None):
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise SvodValueError("where: either both or neither of x and y should be given")
    return E.where(condition, x, y)


def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None):  # noqa: A002
    lo = a_min if min is None else min
    hi = a_max if max is None else max
    a = _arr(a)
    if a.dtype.is_int or a.dtype.is_bool:  # numpy's clip promotes (a float bound makes an int array float)
        bounds = [b for b in (lo, hi) if b is not None and not (type(b) is int and a.dtype.is_int)]
        d = T.result_type(a, *bounds) if bounds else a.dtype
        a = T.astype(a, d, copy=False)
    return store_out(E.clip(a, lo, hi), out)


def around(a, decimals=0, out=None):
    a = _arr(a)
    if not a.dtype.is_float and decimals >= 0:
        return store_out(a, out)
    if decimals >= 0:
        f = 10.0 ** decimals
        res = E.divide(E.round(E.multiply(a, f)), f)
    else:
        f = 10.0 ** -decimals
        res = E.multiply(E.round(E.divide(a, f)), f)
    return store_out(T.astype(res, a.dtype, copy=False) if a.dtype.is_int else res, out)


round = around  # noqa: A001


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    a, b = _arr(a), _arr(b)
    d = T.result_type(a, b)
    if not d.is_float:
        a, b = T.astype(a, dt.default_float), T.astype(b, dt.default_float)
    close = E.less_equal(E.abs(E.subtract(a, b)), E.add(atol, E.multiply(rtol, E.abs(b))))
    close = E.logical_and(close, E.logical_and(E.isfinite(a), E.isfinite(b)))
    close = E.logical_or(close, E.logical_and(E.equal(a, b), E.logical_or(E.isinf(a), E.isinf(b))))
    if equal_nan:
        close = E.logical_or(close, E.logical_and(E.isnan(a), E.isnan(b)))
    return close


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    """A Python bool (computes its inputs)."""
    return bool(R.all(isclose(a, b, rtol, atol, equal_nan)))


def array_equal(a1, a2, equal_nan=False) -> bool:
    a1, a2 = _arr(a1), _arr(a2)
    if a1.shape != a2.shape:
        return False
    eq = E.equal(a1, a2)
    if equal_nan:
        eq = E.logical_or(eq, E.logical_and(E.isnan(a1), E.isnan(a2)))
    return bool(R.all(eq))


def array_equiv(a1, a2) -> bool:
    try:
        x, y = E.broadcast_arrays(_arr(a1), _arr(a2))
    except ShapeError:
        return False
    return bool(R.all(E.equal(x, y)))


def deg2rad(x):
    return E.multiply(T.astype(_arr(x), E._math_result(_arr(x).dtype), copy=False), math.pi / 180)


def rad2deg(x):
    return E.multiply(T.astype(_arr(x), E._math_result(_arr(x).dtype), copy=False), 180 / math.pi)


def exp2(x):
    x = _arr(x)
    return E.pow(E._math_result(x.dtype).type(2.0), T.astype(x, E._math_result(x.dtype), copy=False))


def cbrt(x):
    """Cube root, <= 1 ulp: pow(|x|, 1/3) alone is off by (1/3's rounding) * |ln x|
    relative (122 ulp in float64 at subnormal x, 17 in float32). float32 computes that in
    float64; float64 adds one Newton step whose residual |x| - y^3 is exact (Dekker,
    svod/_ddgraph.py), |x| < 2**-600 and > 2**900 scaled by 2**600 / 2**-300 first."""
    x = _arr(x)
    xf = T.astype(x, E._math_result(x.dtype), copy=False)
    if xf.dtype != dt.float64:
        y = E.pow(E.abs(T.astype(xf, dt.float64)), 1.0 / 3.0)
        return E.copysign(T.astype(y, xf.dtype), xf)
    a = E.abs(xf)
    tiny, huge = E.less(a, 2.0 ** -600), E.greater(a, 2.0 ** 900)  # Dekker's partial products stay normal
    a = E.where(tiny, E.multiply(a, 2.0 ** 600), E.where(huge, E.multiply(a, 2.0 ** -300), a))
    y = E.pow(a, 1.0 / 3.0)
    p, pe = D.two_prod(y, y)
    q, qe = D.two_prod(p, y)
    res = E.subtract(E.subtract(E.subtract(a, q), qe), E.multiply(y, pe))  # a - y^3 (a - q: Sterbenz)
    yn = E.add(y, E.divide(res, E.multiply(p, 3.0)))
    yn = E.where(E.logical_or(E.equal(y, 0.0), E.isinf(y)), y, yn)  # 0, inf; NaN stays NaN
    return E.copysign(E.where(tiny, E.multiply(yn, 2.0 ** -200), E.where(huge, E.multiply(yn, 2.0 ** 100), yn)), xf)


def logaddexp2(x1, x2):
    """log2(2**x1 + 2**x2) as logaddexp(x1 ln2, x2 ln2) / ln2, with the products' rounding
    put back: logaddexp(a + la, b + lb) = L + w la + (1 - w) lb, w = sigmoid(a - b), so
    where the sum cancels to near 0 the result keeps logaddexp's ~2**-67 absolute error
    (the plain form: |x| 2**-53, 4e9 ulp f32 / 6e10 f64 on results near 0). Computed in
    float64, rounded to the plain form's dtype; non-finite and huge (|x| > 2**990) inputs
    take the plain form."""
    ln2 = math.log(2)
    a, b = T.asarray(x1) if not T._is_scalar(x1) else x1, T.asarray(x2) if not T._is_scalar(x2) else x2
    f = E._math_result(T.result_type(a, b))
    a, b = (T.astype(v, f, copy=False) if isinstance(v, Tensor) else v for v in (a, b))
    plain = E.divide(E.logaddexp(E.multiply(a, ln2), E.multiply(b, ln2)), ln2)
    if not plain.dtype.is_float:
        return plain
    a, b = (T.astype(_arr(v), dt.float64) for v in (a, b))
    ha, la = D.two_prod(a, _LN2[0])
    hb, lb = D.two_prod(b, _LN2[0])
    la, lb = E.add(la, E.multiply(a, _LN2[1])), E.add(lb, E.multiply(b, _LN2[1]))
    w = nn.sigmoid(E.subtract(ha, hb))
    big = E.logaddexp(ha, hb)
    lo = E.add(E.multiply(w, la), E.multiply(E.subtract(1.0, w), lb))
    res = E.add(E.multiply(big, _INV_LN2[0]), E.add(E.multiply(big, _INV_LN2[1]), E.multiply(lo, _INV_LN2[0])))
    ok = E.logical_and(E.less(E.abs(a), 2.0 ** 990), E.less(E.abs(b), 2.0 ** 990))  # False for NaN, inf
    return E.where(ok, T.astype(res, plain.dtype), plain)


_LN2 = (0.6931471805599453, 2.3190468138462996e-17)
_INV_LN2 = (1.4426950408889634, 2.0355273740931033e-17)


def fmax(x1, x2):
    a, b = _arr(x1), _arr(x2)
    return E.where(E.isnan(b), a, E.where(E.isnan(a), b, E.maximum(a, b)))


def fmin(x1, x2):
    a, b = _arr(x1), _arr(x2)
    return E.where(E.isnan(b), a, E.where(E.isnan(a), b, E.minimum(a, b)))


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = _arr(x)
    if not x.dtype.is_float:
        return x
    info = np.finfo(x.dtype.np)
    x = E.where(E.isnan(x), nan, x)
    x = E.where(E.equal(x, math.inf), info.max if posinf is None else posinf, x)
    return E.where(E.equal(x, -math.inf), info.min if neginf is None else neginf, x)


# ----------------------------------------------------------------------------- sorting, searching, sets


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    a = _arr(a)
    if axis is None:
        a, axis = M.reshape(a, (-1,)), 0
    return _sort(a, axis=axis)


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    a = _arr(a)
    if axis is None:
        a, axis = M.reshape(a, (-1,)), 0
    return _argsort(a, axis=axis)


def searchsorted(a, v, side="left", sorter=None):
    res = _ss(_arr(a), _arr(v), side=side, sorter=None if sorter is None else _arr(sorter))
    return res


def nonzero(a):
    a = _arr(a)
    return _nz(M.reshape(a, (1,)) if a.ndim == 0 else a)


def flatnonzero(a):
    return nonzero(M.reshape(_arr(a), (-1,)))[0]


def argwhere(a):
    a = _arr(a)
    return T.asarray(np.argwhere(a.numpy()).astype(np.int64))


def take(a, indices, axis=None, out=None, mode="raise"):
    if mode != "raise":
        raise NotImplementedError(f"take: only mode='raise' is implemented, got {mode!r}")
    idx = _arr(indices)
    return store_out(_take(_arr(a), idx, axis=axis), out)


def take_along_axis(arr, indices, axis):
    a, idx = _arr(arr), _arr(indices)
    return T.asarray(np.take_along_axis(a.numpy(), idx.numpy(), axis))


def unique(ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *, equal_nan=True):
    res = np.unique(_arr(ar).numpy(), return_index, return_inverse, return_counts, axis, equal_nan=equal_nan)
    if isinstance(res, tuple):
        return tuple(T.asarray(r.astype(np.int64) if i else r) for i, r in enumerate(res))
    return T.asarray(res)


def bincount(x, weights=None, minlength=0):
    w = None if weights is None else _arr(weights).numpy()
    res = np.bincount(_arr(x).numpy(), w, minlength)
    return T.asarray(res.astype(np.int64) if res.dtype.kind == "i" else res)


# ----------------------------------------------------------------------------- products


def dot(a, b, out=None):
    """numpy.dot: scalars multiply, 1-D inner products, 2-D matmul, N-D a sum over a's
    last axis and b's second-to-last."""
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        res = E.multiply(a, b)
    elif b.ndim <= 2 or a.ndim == 1:
        res = R.matmul(a, b)
    else:
        res = R.tensordot(a, b, axes=((a.ndim - 1,), (b.ndim - 2,)))
    return store_out(res, out)


def vdot(a, b):
    return R.matmul(M.reshape(_arr(a), (-1,)), M.reshape(_arr(b), (-1,)))


def inner(a, b):
    a, b = _arr(a), _arr(b)
    if a.ndim == 0 or b.ndim == 0:
        return E.multiply(a, b)
    return R.tensordot(a, b, axes=((a.ndim - 1,), (b.ndim - 1,)))


def outer(a, b, out=None):
    return store_out(LA.outer(M.reshape(_arr(a), (-1,)), M.reshape(_arr(b), (-1,))), out)


def matmul(x1, x2, out=None, **kw):
    return store_out(R.matmul(x1, x2), out)


def tensordot(a, b, axes=2):
    return R.tensordot(_arr(a), _arr(b), axes=axes)


def kron(a, b):
    a, b = _arr(a), _arr(b)
    nd = builtins.max(a.ndim, b.ndim)
    a = M.reshape(a, (1,) * (nd - a.ndim) + a.shape)
    b = M.reshape(b, (1,) * (nd - b.ndim) + b.shape)
    inter_a = tuple(x for s in a.shape for x in (s, 1))
    inter_b = tuple(x for s in b.shape for x in (1, s))
    return M.reshape(E.multiply(M.reshape(a, inter_a), M.reshape(b, inter_b)),
                     tuple(p * q for p, q in zip(a.shape, b.shape)))


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    return store_out(R.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=_dtype(dtype)), out)


def diagonal(a, offset=0, axis1=0, axis2=1):
    a = _arr(a)
    return LA.diagonal(M.moveaxis(a, (axis1, axis2), (-2, -1)), offset=offset)


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = M.moveaxis(_arr(a), axisa, -1), M.moveaxis(_arr(b), axisb, -1)
    if a.shape[-1] != 3 or b.shape[-1] != 3:
        raise NotImplementedError("cross: only 3-element vectors are implemented")
    return M.moveaxis(LA.cross(a, b, axis=-1), -1, axisc)


def shape(a) -> tuple:
    return _arr(a).shape if not isinstance(a, np.ndarray) else a.shape


def ndim(a) -> int:
    return len(shape(a))


def size(a, axis=None) -> int:
    s = shape(a)
    return math.prod(s) if axis is None else s[axis]


def real(val):
    """The real part (the value itself for a real array)."""
    return E.real(val)


def imag(val):
    """The imaginary part (zeros of the dtype for a real array)."""
    return E.imag(val)


def angle(z, deg=False):
    """The argument of a complex value, atan2(imag, real) (radians, or degrees)."""
    z = T.asarray(z)
    a = E.atan2(E.imag(z), E.real(z)) if z.dtype.is_complex else E.atan2(C.zeros_like(T.astype(z, dt.math_float(
        z.dtype))), T.astype(z, dt.math_float(z.dtype)))
    return E.multiply(a, 180.0 / math.pi) if deg else a


def iscomplexobj(x):
    return T.asarray(x).dtype.is_complex


def isrealobj(x):
    return not T.asarray(x).dtype.is_complex


def iscomplex(x):
    """Elementwise: a nonzero imaginary part."""
    return E.not_equal(E.imag(T.asarray(x)), 0)


def isreal(x):
    return E.equal(E.imag(T.asarray(x)), 0)

# numpy's names defined here (svod.numpy wraps each with numpy's defaults)
__all__ = sorted(n for n, v in list(globals().items())
                 if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == __name__)
