"""numpy's ufuncs over svod's elementwise ops: ``np.add(a, b, out)``, ``np.add.outer``,
``.reduce``, ``.accumulate``, ``.at``.

A `ufunc` calls svod's op (lazy, fused like any op) with numpy's conventions: a
positional or keyword ``out`` (a svod tensor is rebound to the result), ``dtype=`` (the
operands are cast first), ``where=`` with ``out``. Its methods:

- ``outer(a, b)``: the op over a's axes followed by b's (lazy broadcast).
- ``reduce(a, axis=0, ...)``: `sum`, `prod`, `max`, `min`, `all`, `any` for add,
  multiply, maximum, minimum, logical_and, logical_or (lazy); other ufuncs raise
  `NotImplementedByNumpyDispatch` naming the method.
- ``accumulate(a, axis=0)``: numpy's on the realized input (eager, as
  `svod.cumulative_sum`).
- ``at(a, indices, b)``: numpy's unbuffered in-place update on the realized value; `a`
  (a svod tensor) is rebound to the result.
"""

from __future__ import annotations

import numpy as np

import svod.tensor as T
from svod import dtype as dt
from svod import elementwise as E
from svod import movement as M
from svod import reductions as R
from svod.errors import SvodError, SvodTypeError, strip_label
from svod.interop import NotImplementedByNumpyDispatch
from svod.numpy import _functions as F
from svod.numpy import _mathfuncs as MF
from svod.tensor import Tensor

__all__ = ["UFUNCS", "ufunc"]

_REDUCE = {"add": F.sum, "multiply": F.prod, "maximum": F.max, "minimum": F.min, "logical_and": F.all,
           "logical_or": F.any, "fmax": F.nanmax, "fmin": F.nanmin}


class ufunc:
    """A numpy-style universal function over a svod op (see the module docstring)."""

    def __init__(self, name: str, fn, nin: int, identity=None):
        self.__name__ = name
        self._fn = fn
        self.nin = nin
        self.nout = 1
        self.nargs = nin + 1
        self.identity = identity

    def __repr__(self) -> str:
        return f"<svod ufunc '{self.__name__}'>"

    def __call__(self, *args, out=None, where=True, dtype=None, casting="same_kind", order="K", subok=True,
                 signature=None):
        if len(args) > self.nin:
            if out is not None or len(args) > self.nin + 1:
                raise SvodTypeError(f"{self.__name__}: takes {self.nin} input(s) and one output")
            args, out = args[:self.nin], args[self.nin]
        if len(args) != self.nin:
            raise SvodTypeError(f"{self.__name__}: takes {self.nin} input(s), got {len(args)}")
        if dtype is not None:
            d = dt.dtype(dtype)
            args = tuple(T.astype(T.asarray(a), d, copy=False) for a in args)
        try:
            res = self._fn(*args)
        except SvodError as e:  # the ufunc's name (`power`), not the svod function it runs (`pow`)
            e.args = (f"{self.__name__}: {strip_label(str(e))}",)
            raise
        if where is not True:
            if out is None:
                raise NotImplementedByNumpyDispatch(f"{self.__name__}: where= without out= leaves elements "
                                                    f"undefined in numpy; svod needs out=")
            base = out[0] if isinstance(out, tuple) else out
            res = E.where(where, res, base)
        return F.store_out(res, out)

    def outer(self, a, b, **kwargs):
        a, b = T.asarray(a), T.asarray(b)
        a = M.reshape(a, a.shape + (1,) * b.ndim)
        return self(a, b, **kwargs)

    def reduce(self, a, axis=0, dtype=None, out=None, keepdims=False, initial=None, where=True):
        fn = _REDUCE.get(self.__name__)
        if fn is None:
            raise NotImplementedByNumpyDispatch(f"numpy.{self.__name__}.reduce is not implemented by svod")
        if where is not True:
            raise NotImplementedByNumpyDispatch(f"numpy.{self.__name__}.reduce(where=...) is not implemented by svod")
        kw = {"initial": initial} if initial is not None else {}
        if self.__name__ in ("add", "multiply"):
            return fn(a, axis, dtype, out, keepdims, **kw)
        if self.__name__ in ("maximum", "minimum"):
            return fn(a, axis, out, keepdims, **kw)
        return fn(a, axis, out, keepdims)

    def accumulate(self, array, axis=0, dtype=None, out=None):
        a = T.asarray(array)
        fn = getattr(np, self.__name__, None)
        if fn is None or not isinstance(fn, np.ufunc) or fn.nin != 2:
            raise NotImplementedByNumpyDispatch(f"numpy.{self.__name__}.accumulate is not implemented by svod")
        res = fn.accumulate(a.numpy(), axis=axis, dtype=None if dtype is None else dt.dtype(dtype).np)
        return F.store_out(T._from_numpy(np.ascontiguousarray(res), copy=False), out)

    def at(self, a, indices, b=None):
        if not isinstance(a, Tensor):
            raise SvodTypeError(f"{self.__name__}.at: the array updated must be a svod tensor, got {type(a).__name__}")
        fn = getattr(np, self.__name__, None)
        if fn is None or not isinstance(fn, np.ufunc):
            raise NotImplementedByNumpyDispatch(f"numpy.{self.__name__}.at is not implemented by svod")
        vals = np.array(a.numpy())
        conv = (lambda i: i.numpy() if isinstance(i, Tensor) else i)
        idx = tuple(conv(i) for i in indices) if isinstance(indices, tuple) else conv(indices)
        if b is None:
            fn.at(vals, idx)
        else:
            fn.at(vals, idx, b.numpy() if isinstance(b, Tensor) else b)
        a.uop = T._from_numpy(vals, copy=False).uop
        T._register(a)

    def reduceat(self, *args, **kwargs):
        raise NotImplementedByNumpyDispatch(f"numpy.{self.__name__}.reduceat is not implemented by svod")


# numpy name -> (svod function, inputs, identity)
def _float(x) -> Tensor:
    """`x` in the float dtype numpy's float-only ufuncs (fabs, rint) compute integers in."""
    x = T.asarray(x)
    return T.astype(x, dt.math_float(x.dtype), copy=False)


_TABLE = {
    "add": (E.add, 2, 0), "subtract": (E.subtract, 2, None), "multiply": (E.multiply, 2, 1),
    "divide": (E.divide, 2, None), "true_divide": (E.divide, 2, None), "floor_divide": (E.floor_divide, 2, None),
    "remainder": (E.remainder, 2, None), "mod": (E.remainder, 2, None), "power": (E.pow, 2, None),
    "float_power": (lambda a, b: E.pow(T.astype(T.asarray(a), dt.float64), T.astype(T.asarray(b), dt.float64)), 2,
                    None),
    "maximum": (E.maximum, 2, None), "minimum": (E.minimum, 2, None), "fmax": (MF.fmax, 2, None),
    "fmin": (MF.fmin, 2, None),
    "greater": (E.greater, 2, None), "greater_equal": (E.greater_equal, 2, None), "less": (E.less, 2, None),
    "less_equal": (E.less_equal, 2, None), "equal": (E.equal, 2, None), "not_equal": (E.not_equal, 2, None),
    "logical_and": (E.logical_and, 2, True), "logical_or": (E.logical_or, 2, False),
    "logical_xor": (E.logical_xor, 2, False), "bitwise_and": (E.bitwise_and, 2, -1),
    "bitwise_or": (E.bitwise_or, 2, 0), "bitwise_xor": (E.bitwise_xor, 2, 0),
    "left_shift": (E.bitwise_left_shift, 2, None), "right_shift": (E.bitwise_right_shift, 2, None),
    "arctan2": (E.atan2, 2, None), "hypot": (E.hypot, 2, 0), "logaddexp": (E.logaddexp, 2, None),
    "logaddexp2": (MF.logaddexp2, 2, None), "copysign": (E.copysign, 2, None),
    "negative": (E.negative, 1, None), "positive": (E.positive, 1, None), "absolute": (E.abs, 1, None),
    "fabs": (lambda x: E.abs(_float(x)), 1, None), "sign": (E.sign, 1, None), "exp": (E.exp, 1, None),
    "exp2": (MF.exp2, 1, None),
    "expm1": (E.expm1, 1, None), "log": (E.log, 1, None), "log2": (E.log2, 1, None), "log10": (E.log10, 1, None),
    "log1p": (E.log1p, 1, None), "sqrt": (E.sqrt, 1, None), "cbrt": (MF.cbrt, 1, None), "square": (E.square, 1, None),
    "reciprocal": (E.reciprocal, 1, None), "sin": (E.sin, 1, None), "cos": (E.cos, 1, None),
    "tan": (E.tan, 1, None), "arcsin": (E.asin, 1, None), "arccos": (E.acos, 1, None), "arctan": (E.atan, 1, None),
    "sinh": (E.sinh, 1, None), "cosh": (E.cosh, 1, None), "tanh": (E.tanh, 1, None), "arcsinh": (E.asinh, 1, None),
    "arccosh": (E.acosh, 1, None), "arctanh": (E.atanh, 1, None), "deg2rad": (MF.deg2rad, 1, None),
    "radians": (MF.deg2rad, 1, None), "rad2deg": (MF.rad2deg, 1, None), "degrees": (MF.rad2deg, 1, None),
    "floor": (E.floor, 1, None), "ceil": (E.ceil, 1, None), "trunc": (E.trunc, 1, None),
    "rint": (lambda x: E.round(_float(x)), 1, None),
    "isnan": (E.isnan, 1, None), "isinf": (E.isinf, 1, None), "isfinite": (E.isfinite, 1, None),
    "signbit": (E.signbit, 1, None), "logical_not": (E.logical_not, 1, None), "invert": (E.bitwise_invert, 1, None),
    "conjugate": (E.conj, 1, None),
    # generalised ufuncs (core dimensions): called, not .outer / .reduce
    "matmul": (R.matmul, 2, None), "vecdot": (lambda a, b: R.vecdot(a, b), 2, None),
}

UFUNCS: dict[str, ufunc] = {name: ufunc(name, fn, nin, ident) for name, (fn, nin, ident) in _TABLE.items()}
