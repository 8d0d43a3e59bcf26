"""numpy's functions with numpy's calling conventions, over svod's ops (`svod.numpy`).

Each takes what numpy takes — positional axes and dtypes (`np.sum(x, 0)`,
`np.zeros(shape, np.int32)`, `np.triu(x, 1)`), `out=`, `keepdims=`, lists and scalars —
and builds svod's lazy ops; the dtype defaults are the caller's (`svod.numpy` wraps these
with numpy's float64, numpy's dispatch to a plain `svod.Tensor` keeps svod's float32).
Where numpy's result shape depends on the data (`unique`, `argwhere`, `bincount`) or
numpy returns a Python value (`allclose`, `array_equal`), the input is realized
(docs/semantics.md). ``out=`` takes a svod tensor (rebound to the result, cast to its
dtype) or a numpy array (the result is computed and copied into it).
"""

from __future__ import annotations

import builtins
import math

import numpy as np

import svod.tensor as T
from svod import creation as C
from svod import dtype as dt
from svod import elementwise as E
from svod import linalg as LA
from svod import movement as M
from svod import reductions as R
from svod.errors import ShapeError, SvodTypeError, SvodValueError
from svod.grids import meshgrid as mg
from svod.ir import shape_str
from svod.sorting import sort as _sort
from svod.tensor import Tensor, asarray

_np = np


def _dtype(d):
    return None if d is None else dt.dtype(d)


def _arr(a) -> Tensor:
    return a if isinstance(a, Tensor) else asarray(a)


def store_out(res, out):
    """numpy's ``out=``: `out` (a svod tensor, rebound; or a numpy array, written) holds the result."""
    if isinstance(out, tuple):
        if len(out) != 1:
            raise SvodValueError(f"out= expects one output, got {len(out)}")
        out = out[0]
    if out is None:
        return res
    res = _arr(res)
    if isinstance(out, Tensor):
        if out.shape != res.shape:
            raise ShapeError(f"out=: the result of shape {shape_str(res.shape)} does not fit out of shape "
                             f"{shape_str(out.shape)}")
        out.uop = T.astype(res, out.dtype, copy=False).uop
        T._register(out)
        return out
    if isinstance(out, np.ndarray):
        np.copyto(out, res.numpy(), casting="same_kind")
        return out
    raise SvodTypeError(f"out must be a svod tensor or a numpy array, got {type(out).__name__}")


def _scalar(x):
    """A size-1 svod tensor as a Python number (creation functions take numbers)."""
    return x.item() if isinstance(x, Tensor) else x


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


# ----------------------------------------------------------------------------- creation


def array(object, dtype=None, *, copy=True, order="K", subok=False, ndmin=0, ndmax=0, like=None):
    a = T.asarray(object, dtype=_dtype(dtype), copy=None if copy is None else bool(copy) or None)
    if ndmin > a.ndim:
        a = M.reshape(a, (1,) * (ndmin - a.ndim) + a.shape)
    return a


def asarray(a, dtype=None, order=None, *, device=None, copy=None, like=None):  # noqa: F811 - numpy's signature
    return T.asarray(a, dtype=_dtype(dtype), copy=copy)


def ascontiguousarray(a, dtype=None, *, like=None):
    return T.asarray(a, dtype=_dtype(dtype))


def copy(a, order="K", subok=False):
    return _arr(a).copy()


def zeros(shape, dtype=None, order="C", *, device=None, like=None):
    return C.zeros(shape, dtype=_dtype(dtype))


def ones(shape, dtype=None, order="C", *, device=None, like=None):
    return C.ones(shape, dtype=_dtype(dtype))


def empty(shape, dtype=None, order="C", *, device=None, like=None):
    return C.zeros(shape, dtype=_dtype(dtype))


def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    return C.full(shape, _scalar(fill_value), dtype=_dtype(dtype))


def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    a = _arr(a)
    return C.zeros(a.shape if shape is None else shape, dtype=_dtype(dtype) or a.dtype)


def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    a = _arr(a)
    return C.ones(a.shape if shape is None else shape, dtype=_dtype(dtype) or a.dtype)


empty_like = zeros_like


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    a = _arr(a)
    return C.full(a.shape if shape is None else shape, fill_value, dtype=_dtype(dtype) or a.dtype)


def arange(start, stop=None, step=None, dtype=None, *, device=None, like=None):
    return C.arange(_scalar(start), _scalar(stop), 1 if step is None else _scalar(step), dtype=_dtype(dtype))


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    start, stop = _scalar(start), _scalar(stop)
    out = C.linspace(start, stop, num, endpoint=endpoint, dtype=_dtype(dtype))
    if retstep:
        return out, (stop - start) / builtins.max(num - (1 if endpoint else 0), 1)
    return out


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    return E.pow(base, C.linspace(_scalar(start), _scalar(stop), num, endpoint=endpoint, dtype=_dtype(dtype)))


def eye(N, M=None, k=0, dtype=float, order="C", *, device=None, like=None):
    return C.eye(N, M, k=k, dtype=_dtype(dtype))


def identity(n, dtype=None, *, like=None):
    return C.eye(n, dtype=_dtype(dtype))


def tri(N, M=None, k=0, dtype=float, *, like=None):
    return T.asarray(np.tri(N, M, k, dtype=dt.dtype(dtype).np))


def tril(m, k=0):
    return M.tril(_arr(m), k=k)


def triu(m, k=0):
    return M.triu(_arr(m), k=k)


def diag(v, k=0):
    v = _arr(v)
    if v.ndim == 2:
        return LA.diagonal(v, offset=k)
    if v.ndim != 1:
        raise ShapeError(f"diag: input must be 1-D or 2-D, got shape {shape_str(v.shape)}")
    n = v.shape[0] + builtins.abs(k)
    padded = M.pad(v, (0, builtins.abs(k)))
    vals = M.reshape(padded, (n, 1) if k >= 0 else (1, n))
    return E.where(T.asarray(np.eye(n, k=k, dtype=bool)), vals, C.zeros((), dtype=v.dtype))


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    xs = [M.reshape(_arr(x), (-1,)) for x in xi]
    if not sparse:
        return mg(*xs, indexing=indexing)
    n, out = len(xs), []
    for i, x in enumerate(xs):
        ax = {0: 1, 1: 0}.get(i, i) if indexing == "xy" and n >= 2 else i
        out.append(M.reshape(x, tuple(x.shape[0] if d == ax else 1 for d in range(n))))
    return out


# ----------------------------------------------------------------------------- reductions


def _reduce(fn, a, axis, cast, out, keepdims, **kw):
    """`fn` over `axis`; `cast`: the dtype the input is converted to first."""
    a = _arr(a)
    if cast is not None:
        a = T.astype(a, dt.dtype(cast), copy=False)
    return store_out(fn(a, axis=_axis(axis), keepdims=bool(keepdims), **kw), out)


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    res = _reduce(R.sum, a, axis, None, None, keepdims, dtype=_dtype(dtype))
    return store_out(res if initial is None else E.add(res, initial), out)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    res = _reduce(R.prod, a, axis, None, None, keepdims, dtype=_dtype(dtype))
    return store_out(res if initial is None else E.multiply(res, initial), out)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    return _reduce(R.mean, a, axis, dtype, out, keepdims)


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    c = ddof if correction is None else correction
    return _reduce(R.var, a, axis, dtype, out, keepdims, correction=c)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    c = ddof if correction is None else correction
    return _reduce(R.std, a, axis, dtype, out, keepdims, correction=c)


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    res = _reduce(R.max, a, axis, None, None, keepdims)
    return store_out(res if initial is None else E.maximum(res, initial), out)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    res = _reduce(R.min, a, axis, None, None, keepdims)
    return store_out(res if initial is None else E.minimum(res, initial), out)


amax, amin = max, min


def all(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    return _reduce(R.all, a, axis, None, out, keepdims)


def any(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    return _reduce(R.any, a, axis, None, out, keepdims)


def argmax(a, axis=None, out=None, *, keepdims=False):
    return store_out(R.argmax(_arr(a), axis=axis, keepdims=keepdims), out)


def argmin(a, axis=None, out=None, *, keepdims=False):
    return store_out(R.argmin(_arr(a), axis=axis, keepdims=keepdims), out)


def ptp(a, axis=None, out=None, keepdims=False):
    a = _arr(a)
    return store_out(E.subtract(R.max(a, axis=_axis(axis), keepdims=keepdims),
                                R.min(a, axis=_axis(axis), keepdims=keepdims)), out)


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    a = _arr(a)
    if weights is None:
        avg = R.mean(a, axis=_axis(axis), keepdims=keepdims)
        wsum = C.full(avg.shape, R._count(a, _axis(axis)), dtype=avg.dtype)
    else:
        w = _arr(weights)
        if w.shape != a.shape:
            w = E.broadcast_to(M.reshape(w, tuple(w.shape[0] if i == (axis % a.ndim) else 1
                                                  for i in range(a.ndim))), a.shape)
        wsum = R.sum(w, axis=_axis(axis), keepdims=keepdims)
        avg = E.divide(R.sum(E.multiply(a, w), axis=_axis(axis), keepdims=keepdims), wsum)
    return (avg, T.astype(wsum, avg.dtype, copy=False)) if returned else avg


def count_nonzero(a, axis=None, *, keepdims=False):
    return R.sum(T.astype(E.not_equal(_arr(a), 0), dt.int64), axis=_axis(axis), keepdims=keepdims)


def _nan_to(a, value):
    a = _arr(a)
    return E.where(E.isnan(a), value, a) if a.dtype.is_float else a


def nansum(a, axis=None, dtype=None, out=None, keepdims=False):
    return sum(_nan_to(a, 0), axis, dtype, out, keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False):
    a = _arr(a)
    n = count_nonzero(E.logical_not(E.isnan(a)), axis, keepdims=keepdims)
    return store_out(E.divide(sum(_nan_to(a, 0), axis, dtype, None, keepdims), n), out)


def nanmax(a, axis=None, out=None, keepdims=False):
    return max(_nan_to(a, -math.inf), axis, out, keepdims)


def nanmin(a, axis=None, out=None, keepdims=False):
    return min(_nan_to(a, math.inf), axis, out, keepdims)


def _accumulate(ufunc_name: str, a, axis, dtype):
    """numpy's cumulative ufuncs on the realized input (eager, as svod.cumulative_sum)."""
    a = _arr(a)
    res = getattr(np, ufunc_name).accumulate(a.numpy().reshape(-1) if axis is None else a.numpy(),
                                             axis=0 if axis is None else axis,
                                             dtype=None if dtype is None else dt.dtype(dtype).np)
    if dtype is None and not a.dtype.is_float and ufunc_name in ("add", "multiply"):  # numpy's cumsum/cumprod
        res = res.astype(np.uint64 if a.dtype.is_unsigned else np.int64)
    return T._from_numpy(np.ascontiguousarray(res), copy=False)


def cumsum(a, axis=None, dtype=None, out=None):
    return store_out(_accumulate("add", a, axis, dtype), out)


def cumprod(a, axis=None, dtype=None, out=None):
    return store_out(_accumulate("multiply", a, axis, dtype), out)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return quantile(a, 0.5, axis=axis, out=out, keepdims=keepdims)


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None):
    """numpy's 'linear' quantile: the sorted values (a library sort) interpolated; NaN
    when the slice holds a NaN, as numpy."""
    if method != "linear" or weights is not None:
        raise NotImplementedError(f"quantile: only method='linear' without weights is implemented, got {method!r}")
    a = _arr(a)
    if not a.dtype.is_float:
        a = T.astype(a, dt.default_float)
    if axis is None:
        a, ax = M.reshape(a, (-1,)), 0
    else:
        ax = T._normalize_axis(axis, a.ndim, "quantile")
    s = M.moveaxis(_sort(a, axis=ax), ax, -1)
    n = s.shape[-1]
    qs = np.asarray(q, dtype=np.float64)
    outs = []
    for qv in qs.reshape(-1):
        pos = qv * (n - 1)
        lo, hi = int(math.floor(pos)), int(math.ceil(pos))
        t = pos - lo
        va, vb = s[..., lo], s[..., hi]
        diff = E.subtract(vb, va)
        v = E.where(t >= 0.5, E.subtract(vb, E.multiply(diff, 1 - t)), E.add(va, E.multiply(diff, t)))
        outs.append(E.where(R.any(E.isnan(s), axis=-1), math.nan, v))
    res = outs[0] if qs.ndim == 0 else M.reshape(M.stack(outs), qs.shape + outs[0].shape)
    if keepdims:
        shape = list(_arr(a).shape) if axis is not None else [1] * _arr(a).ndim
        if axis is not None:
            shape[ax] = 1
        res = M.reshape(res, qs.shape + tuple(shape))
    return store_out(res, out)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None):
    return quantile(a, np.asarray(q, np.float64) / 100, axis, out, overwrite_input, method, keepdims)


# ----------------------------------------------------------------------------- shape and joining


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if order not in ("C", "A"):
        raise NotImplementedError(f"reshape: only order='C' is implemented, got {order!r}")
    return M.reshape(_arr(a), shape if shape is not None else newshape)


def ravel(a, order="C"):
    return M.reshape(_arr(a), (-1,))


def transpose(a, axes=None):
    a = _arr(a)
    return a.T if axes is None else M.permute_dims(a, axes)


def swapaxes(a, axis1, axis2):
    return _arr(a).swapaxes(axis1, axis2)


def moveaxis(a, source, destination):
    return M.moveaxis(_arr(a), source, destination)


def expand_dims(a, axis):
    return M.expand_dims(_arr(a), axis=_axis(axis))


def squeeze(a, axis=None):
    return M.squeeze(_arr(a), axis=_axis(axis))


def atleast_1d(*arys):
    out = [M.reshape(_arr(a), (1,)) if _arr(a).ndim == 0 else _arr(a) for a in arys]
    return out[0] if len(out) == 1 else out


def atleast_2d(*arys):
    out = []
    for a in arys:
        a = _arr(a)
        out.append(M.reshape(a, (1,) * (2 - a.ndim) + a.shape) if a.ndim < 2 else a)
    return out[0] if len(out) == 1 else out


def atleast_3d(*arys):
    out = []
    for a in arys:
        a = _arr(a)
        shape = {0: (1, 1, 1), 1: (1, a.size, 1), 2: a.shape + (1,)}.get(a.ndim, a.shape)
        out.append(M.reshape(a, shape))
    return out[0] if len(out) == 1 else out


def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    res = M.concat([_arr(a) for a in arrays], axis=axis)
    return store_out(res if dtype is None else T.astype(res, dt.dtype(dtype)), out)


def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    res = M.stack([_arr(a) for a in arrays], axis=axis)
    return store_out(res if dtype is None else T.astype(res, dt.dtype(dtype)), out)


def hstack(tup, *, dtype=None, casting="same_kind"):
    arrs = [atleast_1d(a) for a in tup]
    return concatenate(arrs, axis=0 if arrs[0].ndim == 1 else 1, dtype=dtype)


def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([atleast_2d(a) for a in tup], axis=0, dtype=dtype)


row_stack = vstack


def dstack(tup):
    return concatenate([atleast_3d(a) for a in tup], axis=2)


def column_stack(tup):
    cols = []
    for a in tup:
        a = _arr(a)
        cols.append(M.reshape(a, (-1, 1)) if a.ndim < 2 else a)
    return concatenate(cols, axis=1)


def split(ary, indices_or_sections, axis=0):
    a = _arr(ary)
    n = a.shape[T._normalize_axis(axis, a.ndim, "split")]
    if isinstance(indices_or_sections, (int, np.integer)) and n % int(indices_or_sections):
        raise SvodValueError(f"split: array of size {n} along axis {axis} does not divide into "
                         f"{indices_or_sections} equal sections")
    return array_split(a, indices_or_sections, axis)


def array_split(ary, indices_or_sections, axis=0):
    a = _arr(ary)
    ax = T._normalize_axis(axis, a.ndim, "array_split")
    n = a.shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        q, r = divmod(n, k)
        bounds = np.cumsum([0] + [q + 1] * r + [q] * (k - r)).tolist()
    else:
        bounds = [0] + [builtins.min(builtins.max(int(i), 0), n) for i in indices_or_sections] + [n]
    return [a[(slice(None),) * ax + (slice(lo, builtins.max(lo, hi)),)] for lo, hi in zip(bounds[:-1], bounds[1:])]


def tile(A, reps):
    return M.tile(_arr(A), (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps))


def repeat(a, repeats, axis=None):
    if not isinstance(repeats, (int, np.integer)):
        r = np.asarray(repeats)
        if r.size == 1:
            repeats = int(r.reshape(()))
        else:  # per-element counts: the output shape depends on them (eager)
            return T.asarray(np.repeat(_arr(a).numpy(), r, axis=axis))
    return M.repeat(_arr(a), int(repeats), axis=axis)


def roll(a, shift, axis=None):
    return M.roll(_arr(a), shift, axis=_axis(axis))


def flip(m, axis=None):
    return M.flip(_arr(m), axis=_axis(axis))


def fliplr(m):
    return M.flip(_arr(m), axis=1)


def flipud(m):
    return M.flip(_arr(m), axis=0)


def broadcast_to(array, shape, subok=False):
    return E.broadcast_to(_arr(array), shape)


def broadcast_arrays(*args, subok=False):
    return E.broadcast_arrays(*[_arr(a) for a in args])


def pad(array, pad_width, mode="constant", **kwargs):
    return M.pad(_arr(array), pad_width, mode=mode, constant_values=kwargs.get("constant_values", 0))


def diff(a, n=1, axis=-1, prepend=None, append=None):
    a = _arr(a)
    ax = T._normalize_axis(axis, a.ndim, "diff")
    parts = [a]
    if prepend is not None:
        p = _arr(prepend)
        parts.insert(0, E.broadcast_to(p, a.shape[:ax] + (1,) + a.shape[ax + 1:]) if p.ndim == 0 else p)
    if append is not None:
        p = _arr(append)
        parts.append(E.broadcast_to(p, a.shape[:ax] + (1,) + a.shape[ax + 1:]) if p.ndim == 0 else p)
    if len(parts) > 1:
        a = M.concat(parts, axis=ax)
    for _ in range(n):
        hi = a[(slice(None),) * ax + (slice(1, None),)]
        lo = a[(slice(None),) * ax + (slice(None, -1),)]
        a = E.not_equal(hi, lo) if a.dtype.is_bool else E.subtract(hi, lo)
    return a

# numpy's names defined here (svod.numpy wraps each with numpy's defaults)
__all__ = sorted(n for n, v in list(globals().items())
                 if not n.startswith("_") and callable(v) and getattr(v, "__module__", None) == __name__)
