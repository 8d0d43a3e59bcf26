"""The chunk side of `svod.dask`: `LazyChunk`, a lazy svod Tensor that numpy's and dask's
chunk functions take for a numpy array (NEP 13 ufuncs, NEP 18 array functions, operators,
methods), so one region's tasks build one svod graph. Every op gives numpy's result
dtype (when svod's promotion differs, the operands are cast to numpy's result dtype
first, so the arithmetic is numpy's too); anything else raises `Unsupported`."""

from __future__ import annotations

import functools

import numpy as np

import svod
from svod import elementwise as E
from svod import movement as M
from svod import reductions as R
from svod import tensor as T


class Unsupported(Exception):
    """An op or argument svod does not run (the region falls back to numpy)."""


# ----------------------------------------------------------------------------- the lazy chunk


def _tensor(x):
    """An operand as svod takes it: Tensors, weak Python scalars, arrays as realized leaves."""
    if isinstance(x, LazyChunk):
        return x.t
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, (np.ndarray, np.generic)):
        try:
            return svod.asarray(np.asarray(x), copy=False)
        except (TypeError, ValueError) as e:
            raise Unsupported(f"arrays of dtype {np.asarray(x).dtype}: {e}") from None
    raise Unsupported(f"operands of type {type(x).__name__}")


def _probe(x):
    """What numpy's dtype rules see of an operand: an empty array of its dtype and rank
    (Python scalars stay weak, numpy scalars strong)."""
    if isinstance(x, LazyChunk):
        return np.empty((1,) * x.ndim, x.dtype)
    if isinstance(x, np.ndarray):
        return np.empty((1,) * x.ndim, x.dtype)
    return x


def _cast(t, dtype: np.dtype):
    return T.astype(t, dtype) if isinstance(t, T.Tensor) and t.dtype.np != dtype else t


def _as_numpy_would(fn, want: np.dtype, *operands):
    """`fn(*operands)` with the dtype numpy gives: when svod's own promotion differs (an
    integer division, the mean of integers), the operands are cast to numpy's result
    dtype first, so the arithmetic is numpy's too."""
    out = fn(*operands)
    if out.dtype.np != want:
        if want == np.bool_:
            raise Unsupported(f"{getattr(fn, '__name__', fn)} giving {out.dtype}, numpy gives bool")
        out = fn(*(_cast(o, want) for o in operands))
        out = _cast(out, want)
    return out


_UFUNCS = {
    "add": E.add, "subtract": E.subtract, "multiply": E.multiply, "divide": E.divide, "true_divide": E.divide,
    "floor_divide": E.floor_divide, "remainder": E.remainder, "power": E.pow, "negative": E.negative,
    "positive": E.positive, "absolute": E.abs, "exp": E.exp, "expm1": E.expm1, "log": E.log, "log1p": E.log1p,
    "log2": E.log2, "log10": E.log10, "sqrt": E.sqrt, "square": E.square, "sin": E.sin, "cos": E.cos,
    "tan": E.tan, "tanh": E.tanh, "sign": E.sign, "floor": E.floor, "ceil": E.ceil, "trunc": E.trunc,
    "rint": E.round, "maximum": E.maximum, "minimum": E.minimum, "greater": E.greater,
    "greater_equal": E.greater_equal, "less": E.less, "less_equal": E.less_equal, "equal": E.equal,
    "not_equal": E.not_equal, "logical_and": E.logical_and, "logical_or": E.logical_or,
    "logical_xor": E.logical_xor, "logical_not": E.logical_not, "isnan": E.isnan, "isinf": E.isinf,
    "isfinite": E.isfinite, "bitwise_and": E.bitwise_and, "bitwise_or": E.bitwise_or,
    "bitwise_xor": E.bitwise_xor, "invert": E.bitwise_invert, "reciprocal": E.reciprocal, "matmul": R.matmul,
}
_FLOAT_ONLY = {"reciprocal"}  # numpy's integer reciprocal truncates; svod's is a float's
_REDUCE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min", "logical_and": "all",
           "logical_or": "any"}


def _ufunc(ufunc, method: str, *inputs, **kw):
    name = ufunc.__name__
    if method == "reduce" and name in _REDUCE:
        return _reduction(_REDUCE[name], inputs[0], axis=kw.pop("axis", 0), **kw)
    fn = _UFUNCS.get(name)
    if method != "__call__" or fn is None:
        raise Unsupported(f"numpy.{name}{'' if method == '__call__' else '.' + method}")
    if kw.get("out") is not None or kw.get("where", True) is not True or kw.get("casting", "same_kind") != \
            "same_kind" or set(kw) - {"out", "where", "casting", "dtype", "order", "subok"}:
        raise Unsupported(f"numpy.{name} with {', '.join(sorted(kw))}")
    with np.errstate(all="ignore"):
        want = ufunc(*map(_probe, inputs), dtype=kw.get("dtype")).dtype
    if name in _FLOAT_ONLY and want.kind != "f":
        raise Unsupported(f"numpy.{name} of {want}")
    return LazyChunk(_as_numpy_would(fn, want, *map(_tensor, inputs)))


_NoValue = getattr(np, "_NoValue", None)


def _reduction(name: str, a, axis=None, dtype=None, out=None, keepdims=False, initial=_NoValue, where=_NoValue,
               ddof=0, **rest):
    """numpy's reduction `name` (sum, mean, var, ...) with numpy's result dtype."""
    if out is not None or initial is not _NoValue or where not in (_NoValue, True) or rest:
        raise Unsupported(f"numpy.{name} with out/initial/where/{', '.join(rest)}")
    axis = tuple(axis) if isinstance(axis, list) else axis
    np_fn = getattr(np, name)
    kw = {"axis": axis, "keepdims": keepdims}
    extra = {"dtype": dtype} if dtype is not None and name not in ("max", "min", "argmax", "argmin") else {}
    if name in ("var", "std"):
        kw["ddof"] = ddof
    with np.errstate(all="ignore"):
        want = np.asarray(np_fn(_probe(a), **kw, **extra)).dtype
    t = _tensor(a)
    if name in ("sum", "prod", "mean", "var", "std") and t.dtype.np != want:
        t = T.astype(t, want)  # accumulate in numpy's dtype (int32 sums in int64, means of ints in float64)
    fn = getattr(R, name)
    if name in ("var", "std"):
        out_t = fn(t, axis=axis, correction=ddof, keepdims=keepdims)
    else:
        out_t = fn(t, axis=axis, keepdims=keepdims)
    return LazyChunk(_cast(out_t, want))


def _where(condition, x=None, y=None):
    if x is None or y is None:
        raise Unsupported("numpy.where with one argument (data-dependent shape)")
    want = np.result_type(_probe(x), _probe(y))
    return LazyChunk(_cast(E.where(_tensor(condition), _cast(_tensor(x), want), _cast(_tensor(y), want)), want))


def _clip(a, a_min=None, a_max=None, out=None, **kw):
    if out is not None or kw:
        raise Unsupported("numpy.clip with out or keyword arguments")
    want = np.clip(_probe(a), a_min, a_max).dtype if not isinstance(a_min, LazyChunk | np.ndarray) and \
        not isinstance(a_max, LazyChunk | np.ndarray) else None
    if want is None or want != np.dtype(a.dtype):
        raise Unsupported("numpy.clip with array bounds or a dtype change")
    return LazyChunk(E.clip(_tensor(a), a_min, a_max))


def _matmul_like(fn):
    def run(a, b, *args, **kw):
        want = np.result_type(_probe(a), _probe(b))
        return LazyChunk(fn(_cast(_tensor(a), want), _cast(_tensor(b), want), *args, **kw))

    return run


def _tensordot(a, b, axes=2):
    return _matmul_like(lambda x, y: R.tensordot(x, y, axes=axes))(a, b)


def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    if out is not None or dtype is not None or casting != "same_kind":
        raise Unsupported("numpy.concatenate with out/dtype/casting")
    want = np.result_type(*map(_probe, arrays))
    return LazyChunk(M.concat([_cast(_tensor(a), want) for a in arrays], axis=axis))


def _stack(arrays, axis=0, out=None, **kw):
    if out is not None or kw:
        raise Unsupported("numpy.stack with out or dtype")
    want = np.result_type(*map(_probe, arrays))
    return LazyChunk(M.stack([_cast(_tensor(a), want) for a in arrays], axis=axis))


def _axes_arg(axes):
    if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
        return tuple(axes[0])
    return tuple(axes) if axes else None


def _functions() -> dict:
    red = {getattr(np, n): functools.partial(_reduction, n) for n in
           ("sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "argmax", "argmin")}
    red[np.amax] = functools.partial(_reduction, "max")
    red[np.amin] = functools.partial(_reduction, "min")
    return {
        **red,
        np.where: _where, np.clip: _clip, np.dot: _matmul_like(R.matmul), np.tensordot: _tensordot,
        np.concatenate: _concatenate, np.stack: _stack,
        np.transpose: lambda a, axes=None: LazyChunk(M.permute_dims(_tensor(a), tuple(axes) if axes is not None
                                                                    else tuple(reversed(range(a.ndim))))),
        np.reshape: lambda a, shape=None, order="C", **kw: a.reshape(shape, order=order, **kw),
        np.squeeze: lambda a, axis=None: LazyChunk(M.squeeze(_tensor(a), axis)),
        np.expand_dims: lambda a, axis: LazyChunk(M.expand_dims(_tensor(a), axis)),
        np.broadcast_to: lambda a, shape, subok=False: LazyChunk(E.broadcast_to(_tensor(a), tuple(shape))),
        np.ndim: lambda a: a.ndim, np.shape: lambda a: a.shape, np.size: lambda a, axis=None: (
            a.size if axis is None else a.shape[axis]),
        np.result_type: lambda *xs: np.result_type(*map(_probe, xs)),
        np.round: lambda a, decimals=0, out=None: _round(a, decimals, out),
        np.around: lambda a, decimals=0, out=None: _round(a, decimals, out),
    }


def _round(a, decimals, out):
    if decimals != 0 or out is not None:
        raise Unsupported("numpy.round with decimals or out")
    return _ufunc(np.rint, "__call__", a)


_FUNCS: dict = {}


def _basic_index(key) -> bool:
    key = key if isinstance(key, tuple) else (key,)
    return all(k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer)) and not isinstance(k, bool)
               for k in key)


class LazyChunk:
    """A lazy svod Tensor posing as a numpy chunk inside a region: numpy's ufuncs and
    functions (NEP 13/18), its operators and methods build svod graph nodes instead of
    computing; a conversion to numpy (`np.asarray`) is refused (`Unsupported`), so
    nothing is computed chunk-op by chunk-op behind the region's back."""

    __slots__ = ("t",)
    __array_priority__ = 50.0

    def __init__(self, t):
        self.t = t

    shape = property(lambda self: tuple(self.t.shape))
    ndim = property(lambda self: len(self.t.shape))
    size = property(lambda self: int(np.prod(self.t.shape, dtype=np.int64)))
    dtype = property(lambda self: self.t.dtype.np)
    T = property(lambda self: LazyChunk(M.permute_dims(self.t, tuple(reversed(range(self.ndim))))))

    def __repr__(self) -> str:
        return f"LazyChunk(shape={self.shape}, dtype={self.dtype})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d chunk")
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        raise Unsupported("a conversion to a numpy array (np.asarray)")

    def __reduce__(self):
        raise Unsupported("sending a lazy chunk out of its region")

    def __array_ufunc__(self, ufunc, method, *inputs, **kw):
        return _ufunc(ufunc, method, *inputs, **kw)

    def __array_function__(self, func, types, args, kwargs):
        if not _FUNCS:
            _FUNCS.update(_functions())
        fn = _FUNCS.get(func)
        if fn is None:
            raise Unsupported(f"numpy.{getattr(func, '__name__', func)}")
        return fn(*args, **kwargs)

    def __getitem__(self, key):
        if not _basic_index(key):
            raise Unsupported("indexing with arrays or masks")
        return LazyChunk(self.t[key])

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if order != "K" or casting != "unsafe":
            raise Unsupported("astype with order or casting")
        dt = np.dtype(dtype)
        if dt == self.dtype:
            return self
        try:
            return LazyChunk(T.astype(self.t, dt))
        except (TypeError, ValueError) as e:
            raise Unsupported(f"astype to {dt}: {e}") from None

    def reshape(self, *shape, order="C", copy=None):
        if order != "C":
            raise Unsupported("reshape in Fortran order")
        return LazyChunk(M.reshape(self.t, _axes_arg(shape)))

    def transpose(self, *axes):
        return np.transpose(self, _axes_arg(axes))

    def squeeze(self, axis=None):
        return LazyChunk(M.squeeze(self.t, axis))

    def copy(self, order="C"):
        return self

    def round(self, decimals=0, out=None):
        return _round(self, decimals, out)

    def clip(self, min=None, max=None, out=None, **kw):  # noqa: A002
        return _clip(self, min, max, out, **kw)


def _method(name):
    return lambda self, *a, **kw: _reduction(name, self, *a, **kw)


for _n in ("sum", "prod", "max", "min", "mean", "var", "std", "any", "all", "argmax", "argmin"):
    setattr(LazyChunk, _n, _method(_n))


def _binary(uf, reflected=False):
    if reflected:
        return lambda self, other: _ufunc(uf, "__call__", other, self)
    return lambda self, other: _ufunc(uf, "__call__", self, other)


for _name, _uf in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("truediv", np.true_divide),
                   ("floordiv", np.floor_divide), ("mod", np.remainder), ("pow", np.power),
                   ("matmul", np.matmul), ("and", np.bitwise_and), ("or", np.bitwise_or), ("xor", np.bitwise_xor),
                   ("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                   ("eq", np.equal), ("ne", np.not_equal)):
    setattr(LazyChunk, f"__{_name}__", _binary(_uf))
    if _name not in ("lt", "le", "gt", "ge", "eq", "ne"):
        setattr(LazyChunk, f"__r{_name}__", _binary(_uf, True))
def _unary(uf):
    return lambda self: _ufunc(uf, "__call__", self)


for _name, _uf in (("neg", np.negative), ("pos", np.positive), ("abs", np.absolute), ("invert", np.invert)):
    setattr(LazyChunk, f"__{_name}__", _unary(_uf))
LazyChunk.__hash__ = None  # type: ignore[assignment] - __eq__ is elementwise, as numpy's


__all__ = ["LazyChunk", "Unsupported"]
