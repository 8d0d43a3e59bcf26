"""`import svod.numpy as np`: a namespace a numpy program can swap in.

The same names and calling conventions as numpy for what svod implements (creation,
ufuncs with ``out=`` and their ``outer``/``reduce``/``accumulate``/``at`` methods,
reductions with positional axes and dtypes, joining and splitting, sorting and searching,
`dot`/`einsum`/`tensordot`, `cov`/`corrcoef`/`histogram`/`median`/`quantile`, `linalg`,
`fft`, `random`), over svod's lazy ops: the program's arithmetic is fused
and compiled. numpy's defaults hold in this namespace: Python floats and creation
functions give float64, integer division and means give float64 (`svod` itself keeps
float32). Arrays are `svod.numpy.ndarray` (a `svod.Tensor`); ``isinstance(x, np.ndarray)``
holds for any svod tensor. dtypes are svod's (`np.float64` is `svod.float64`, callable as
numpy's scalar type: ``np.float64(1.5)``).

What stays out (docs/semantics.md): float16, `linalg.eig`; structured and
string arrays; numpy's ``order=`` memory layouts and in-place views (slices are values:
``x[1:3] = v`` updates `x`, but a slice taken earlier does not see it); `np.matrix`;
`ufunc.reduceat`. Calling numpy itself on svod arrays stays in svod (see `svod.interop`).

>>> import svod.numpy as np
>>> x = np.arange(6) / 4
>>> x.dtype, type(x).__name__
(float64, 'ndarray')
>>> np.add.outer(np.arange(3), np.arange(2)).tolist()
[[0, 1], [1, 2], [2, 3]]
"""

from __future__ import annotations

import numpy as _np

from svod import dtype as _dt
from svod import interop as _interop
from svod import tensor as _tensor
from svod.numpy import _einsum, _fast, _functions, _index_tricks, _mathfuncs, _stats, _ufuncs, fft, linalg, random  # noqa: F401
from svod.numpy._ndarray import SCALAR_FUNCTIONS as _SCALAR_FUNCTIONS
from svod.numpy._ndarray import ndarray, numpy_function, retag, scalar_of  # noqa: F401

# dtypes (svod's, callable as numpy's scalar types) and numpy's abstract scalar classes
bool_ = bool = _dt.bool_  # noqa: A001
int32, int64, float32, float64 = _dt.int32, _dt.int64, _dt.float32, _dt.float64
complex64, complex128 = _dt.complex64, _dt.complex128
cdouble = complex_ = _dt.complex128
csingle = _dt.complex64
int8, int16, uint8, uint16, uint32, uint64 = (_dt.int8, _dt.int16, _dt.uint8, _dt.uint16, _dt.uint32,
                                              _dt.uint64)
int_ = intp = longlong = _dt.int64
byte, short, intc = int8, int16, int32
ubyte, ushort, uintc, uint, uintp, ulonglong = uint8, uint16, uint32, uint64, uint64, uint64
double = float_ = _dt.float64
single = _dt.float32
generic, number, integer, signedinteger, floating, inexact = (_np.generic, _np.number, _np.integer,
                                                             _np.signedinteger, _np.floating, _np.inexact)
unsignedinteger, complexfloating = _np.unsignedinteger, _np.complexfloating

pi, e, inf, nan, newaxis, euler_gamma = _np.pi, _np.e, _np.inf, _np.nan, None, _np.euler_gamma
errstate, seterr, geterr = _np.errstate, _np.seterr, _np.geterr
set_printoptions, get_printoptions, printoptions = _np.set_printoptions, _np.get_printoptions, _np.printoptions
isscalar = _np.isscalar


def dtype(x):
    """The svod dtype of `x` (a dtype, a name, a Python or numpy type)."""
    return _dt.dtype(x)


def _np_dtype(x):
    return x.np if isinstance(x, _dt.DType) else x


def issubdtype(arg1, arg2) -> bool:
    return _np.issubdtype(_np_dtype(_dt.dtype(arg1) if not isinstance(arg1, type) else arg1), _np_dtype(arg2))


def result_type(*arrays_and_dtypes):
    with _dt.numpy_defaults():
        return _tensor.result_type(*arrays_and_dtypes)


def promote_types(type1, type2):
    return _dt.promote_types(_dt.dtype(type1), _dt.dtype(type2))


def can_cast(from_, to, casting="safe"):
    return _np.can_cast(_np_dtype(from_.dtype if hasattr(from_, "uop") else _dt.dtype(from_)), _np_dtype(_dt.dtype(to)),
                        casting)


def finfo(dtype):
    """numpy's finfo (eps, tiny, resolution, ...) of a svod dtype or array."""
    return _np.finfo(_np_dtype(dtype.dtype if hasattr(dtype, "uop") else _dt.dtype(dtype)))


def iinfo(dtype):
    return _np.iinfo(_np_dtype(dtype.dtype if hasattr(dtype, "uop") else _dt.dtype(dtype)))


from_dlpack = _interop.from_dlpack


class _NumpyUfunc:
    """A `svod.numpy._ufuncs.ufunc` run with numpy's defaults (ndarray results)."""

    def __init__(self, u):
        self._u = u
        self.__name__ = u.__name__
        self.nin, self.nout, self.nargs, self.identity = u.nin, u.nout, u.nargs, u.identity
        for m in ("outer", "reduce", "accumulate", "at", "reduceat"):
            setattr(self, m, numpy_function(getattr(u, m), f"{u.__name__}.{m}", m == "reduce"))
        self._call = numpy_function(u.__call__, u.__name__, True)  # (a 0-d result: numpy's scalar)

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<ufunc '{self.__name__}'>"


ufunc = _NumpyUfunc
for _name, _u in _ufuncs.UFUNCS.items():
    globals()[_name] = _NumpyUfunc(_u)
abs = absolute  # noqa: A001, F821 - defined by the loop above
bitwise_not = invert  # noqa: F821
conj = conjugate  # noqa: F821
bitwise_invert, bitwise_left_shift, bitwise_right_shift = invert, left_shift, right_shift  # noqa: F821
acos, asin, atan, atan2 = arccos, arcsin, arctan, arctan2  # noqa: F821
acosh, asinh, atanh, pow = arccosh, arcsinh, arctanh, power  # noqa: A001, F821

_FUNCTIONS = {n: getattr(_functions, n) for n in _functions.__all__}
_FUNCTIONS.update({n: getattr(_mathfuncs, n) for n in _mathfuncs.__all__})
_FUNCTIONS.update({n: getattr(_stats, n) for n in _stats.__all__})
_FUNCTIONS["einsum"] = _einsum.einsum
for _name, _fn in _FUNCTIONS.items():
    globals()[_name] = numpy_function(_fn, _name, _name in _SCALAR_FUNCTIONS)
concat = concatenate  # noqa: F821
einsum_path = numpy_function(_einsum.einsum_path, "einsum_path")  # no tensors out: not in the dispatch table


_fast.install(ndarray, globals())  # numpy called directly for small realized operands (svod/numpy/_fast.py)


class _NumpyGrid:
    def __init__(self, grid):
        self._grid = grid

    def __getitem__(self, key):
        with _dt.numpy_defaults():
            return retag(self._grid[key])


mgrid, ogrid = _NumpyGrid(_index_tricks.mgrid), _NumpyGrid(_index_tricks.ogrid)


def _dispatch_table() -> dict:
    """numpy's function names (``linalg.inv``, ``fft.fftshift``) -> svod's implementation,
    for numpy's dispatch to svod tensors (`svod.interop.array_function`)."""
    table = dict(_FUNCTIONS)
    table.update({"round_": _mathfuncs.around, "amax": _functions.max, "amin": _functions.min,
                  "result_type": _tensor.result_type})
    table.update({f"linalg.{n}": f for n, f in linalg.IMPL.items()})
    table.update({f"fft.{n}": f for n, f in fft.IMPL.items()})
    return table


__all__ = [n for n in dir() if not n.startswith("_")]
