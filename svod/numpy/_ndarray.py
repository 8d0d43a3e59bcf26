"""`svod.numpy.ndarray`: svod's Tensor with numpy's dtype defaults, and the wrappers that
give `svod.numpy`'s functions those defaults.

An `ndarray` is a `svod.Tensor` (same data, same laziness) whose operators and methods
run with float64 as the default float dtype — Python floats, integer true division,
`mean` of integers, transcendentals of integers all give float64, as in numpy — and
return `ndarray`s. `isinstance(t, svod.numpy.ndarray)` is true for every svod tensor
(a program's type checks accept both); plain `svod.Tensor`s keep svod's float32 default.

The defaults are per thread (`svod.dtype.numpy_defaults`), switched around each call.

0-d results that numpy gives as numpy scalars (an element `A[i, j]`, a reduction over all
axes, a ufunc of scalars, `dot` of two vectors) are numpy scalars here too when svod has
computed them (`scalar_of`: a realized 0-d result, no `svod.jit` trace running); a lazy
one stays a 0-d `ndarray` (docs/semantics.md, "numpy scalars").
"""

from __future__ import annotations

import math

import numpy as np

from svod import dtype as dt
from svod import tensor as _T
from svod.creation import zeros
from svod.errors import SvodTypeError, named
from svod.ir import Ops
from svod.tensor import Tensor

__all__ = ["SCALAR_FUNCTIONS", "SCALAR_METHODS", "call_numpy", "call_svod", "ndarray", "numpy_function", "retag",
           "scalar_of", "scalar_result"]

_BUFFER = Ops.BUFFER

# the functions of `svod.numpy` (and `svod.numpy.linalg`) whose 0-d result numpy gives as a numpy
# scalar (probed against numpy 2.4: reductions over all axes, products of vectors, ufunc-like
# functions of scalars); `tests/test_numpy_scalars.py` checks each against numpy's type
SCALAR_FUNCTIONS = frozenset((
    "all", "any", "amax", "amin", "max", "min", "argmax", "argmin", "average", "count_nonzero", "dot", "vdot",
    "inner", "matmul", "mean", "median", "nanmax", "nanmean", "nanmin", "nansum", "prod", "ptp", "std", "var",
    "sum", "trace", "cbrt", "exp2", "angle", "around", "round", "clip", "nan_to_num", "fmax", "fmin", "deg2rad",
    "rad2deg", "logaddexp2", "take", "quantile", "percentile", "einsum",
    "linalg.det", "linalg.norm", "linalg.cond", "linalg.matrix_rank", "linalg.vector_norm", "linalg.matrix_norm",
    "linalg.trace", "linalg.vecdot"))
# `ndarray` methods likewise (`x.sum()`, `x.max()`, `x.dot(y)`, ...)
SCALAR_METHODS = frozenset(("sum", "prod", "max", "min", "mean", "std", "var", "any", "all", "argmax", "argmin",
                            "dot", "trace", "ptp"))
# operators: numpy gives every operator of 0-d arrays (`z ** 2`, `z % 3`, `-z`) a scalar result
_OPERATORS_0D = frozenset(f"__{p}{n}__" for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul",
                                                  "and", "or", "xor", "lshift", "rshift") for p in ("", "r")) | \
    frozenset(("__neg__", "__pos__", "__abs__", "__invert__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__",
               "__ne__"))


def scalar_of(out):
    """`out` as the numpy scalar numpy would return when it is a realized 0-d svod array and
    no `svod.jit` trace runs (its value read now: a numpy scalar is a copy, as numpy's);
    anything else — a lazy 0-d array, an array, a tuple — as it is."""
    t = type(out)
    if (t is ndarray or t is Tensor) and _T._READ_HOOK is None:
        u = out.uop
        if u.op is _BUFFER and u.shape == ():
            a = getattr(u, "_a", None)  # (an unmaterialized `svod.eager.Fresh`: its value, else None)
            if a is None:
                a = u.arg.array
            return a[()] if type(a) is np.ndarray else a
    return out


class _NdarrayType(type):
    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, Tensor)

    def __subclasscheck__(cls, sub) -> bool:
        return isinstance(sub, type) and issubclass(sub, Tensor)


def retag(out):
    """`out` with its svod Tensors (also inside tuples, lists, named tuples) as ndarrays."""
    t = type(out)
    if t is Tensor:
        out.__class__ = ndarray
        return out
    if t is tuple or t is list:
        return t(retag(o) for o in out)
    if isinstance(out, tuple) and hasattr(out, "_fields"):  # a named tuple (eigh, svd, unique_*)
        return t(*(retag(o) for o in out))
    return out


def call_numpy(fn, args, kwargs):
    """`fn(*args, **kwargs)` with numpy's defaults; Tensor results as ndarrays."""
    with dt.numpy_defaults():
        return retag(fn(*args, **kwargs))


def call_svod(fn, args, kwargs):
    return fn(*args, **kwargs)


def _small_realized(args, kwargs) -> bool:
    """Whether every svod array among `args` and `kwargs`' values (and in their lists and
    tuples) is realized and has at most the eager limit's elements (svod.eager's rule for
    running an op at once), and eager small work is on."""
    from svod import eager

    lim = eager.numpy_limit()
    if not lim:
        return False
    stack = [*args, *kwargs.values()]
    while stack:
        o = stack.pop()
        if isinstance(o, Tensor):
            u = o.uop
            if u.op is not _BUFFER or math.prod(u.shape) > lim:
                return False
        elif type(o) is list or type(o) is tuple:
            stack.extend(o)
    return True


def scalar_result(out, args, kwargs):
    """`scalar_of(out)`, where a lazy 0-d `out` of small realized operands (`_small_realized`:
    a library step — `median`'s sort, `linalg.det`'s LAPACK call, `take`'s gather — which eager
    small work leaves in the plan) is realized first, as numpy computes it at once."""
    if type(out) is ndarray and _T._READ_HOOK is None and out.uop.op is not _BUFFER and out.uop.shape == () and \
            _small_realized(args, kwargs):
        out.realize()
    return scalar_of(out)


def numpy_function(fn, name: str | None = None, scalar: bool = False):
    """`fn` as a function of the numpy namespace (numpy's defaults, ndarray results;
    `scalar`: a realized 0-d result as a numpy scalar, `scalar_of`)."""

    if scalar:
        def wrapper(*args, **kwargs):
            with dt.numpy_defaults():
                return scalar_result(retag(fn(*args, **kwargs)), args, kwargs)
    else:
        def wrapper(*args, **kwargs):
            with dt.numpy_defaults():
                return retag(fn(*args, **kwargs))

    named(wrapper, name or fn.__name__)
    wrapper.__doc__ = fn.__doc__
    wrapper.__wrapped__ = fn
    return wrapper


class ndarray(Tensor, metaclass=_NdarrayType):
    """numpy's array type in `svod.numpy` (see the module docstring).

    ``svod.numpy.ndarray(shape, dtype=float)`` makes a zero-filled array (numpy's is
    uninitialised); numpy's `buffer`, `offset`, `strides` and `order` are not supported.
    """

    __slots__ = ()

    def __new__(cls, shape=(), dtype=float, buffer=None, offset=0, strides=None, order=None):
        if buffer is not None or offset or strides is not None:
            raise SvodTypeError("svod.numpy.ndarray: buffer, offset and strides are not supported; use "
                            "svod.numpy.asarray(numpy_array)")
        with dt.numpy_defaults():
            return retag(zeros(shape, dtype=dt.dtype(dtype)))

    def __init__(self, *args, **kwargs):  # NOTE: __new__ made it; Tensor.__init__ must not run
        pass

    def __repr__(self) -> str:
        return "array" + Tensor.__repr__(self)[len("tensor"):]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


_KEEP = {"__init__", "__new__", "__hash__", "__repr__", "__str__", "__format__", "__len__", "__iter__", "__bool__",
         "__float__", "__int__", "__index__", "__complex__", "__array__", "__array_ufunc__", "__array_function__",
         "__array_namespace__", "__dlpack__", "__dlpack_device__", "__reduce__", "__setstate__", "__class__",
         "__getattribute__", "__setattr__", "__delattr__", "__init_subclass__", "__subclasshook__", "__dir__",
         "__sizeof__", "__reduce_ex__", "__getstate__", "_from", "_np", "_scalar", "_inplace", "numpy", "tolist",
         "item", "realize"}


def _method(name: str, fn):
    if name in SCALAR_METHODS or name in _OPERATORS_0D:
        def method(self, *args, **kwargs):
            with dt.numpy_defaults():
                return scalar_result(retag(fn(self, *args, **kwargs)), (self, *args), kwargs)
    else:
        def method(self, *args, **kwargs):
            with dt.numpy_defaults():
                return retag(fn(self, *args, **kwargs))

    named(method, name)
    method.__doc__ = fn.__doc__
    return method


def _install() -> None:
    for name, attr in vars(Tensor).items():
        if name in _KEEP or name.startswith("__") and not callable(attr) and not isinstance(attr, property):
            continue
        if isinstance(attr, property):
            if name in ("T", "mT", "real", "imag"):
                setattr(ndarray, name, property(_method(name, attr.fget)))
        elif callable(attr) and not isinstance(attr, (staticmethod, classmethod, type)):
            setattr(ndarray, name, _method(name, attr))


_install()
