"""svod: an e-graph based kernel-fusion engine for lazy numpy-like tensor programs.

Write numpy-like code on `svod.Tensor`; nothing runs until a value is needed. Then the
pending graph is compacted into an ID-normalised key, planned (fusion search), compiled
(llvmlite JIT) and cached, so the next call with the same structure only replays.

>>> import svod
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> svod.nn.softmax(x, axis=-1).numpy().round(4)
array([[0.2689, 0.7311],
       [0.2689, 0.7311]], dtype=float32)
"""

from __future__ import annotations

import collections as _collections
import os as _os
import sys as _sys

if "numpy" not in _sys.modules:
    # OpenBLAS's worker threads spin for 2^28 cycles after every BLAS call, so a svod
    # kernel started soon after a numpy matmul would share a core with a spinner; 2^20
    # cycles keeps back-to-back BLAS calls warm (docs/engine.md). Read when OpenBLAS loads
    # (numpy's import): only set here when numpy is not imported yet, never overridden.
    # (svod's own library steps do not wake those threads at all: svod.codegen.blas.)
    _os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "20")

from svod import config, engine, fft, linalg, nn, random  # engine: registers the realizer of svod.tensor
from svod import dtype as _dt
from svod.capture import ConcretizationError, JitError, JitWarning, jit
from svod.config import search_limits
from svod.dtype import (
    DType,
    complex64,
    complex128,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
)
from svod.dtype import bool_ as bool
from svod.elementwise import (
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_left_shift,
    bitwise_right_shift,
    conj,
    copysign,
    cosh,
    hypot,
    imag,
    logaddexp,
    real,
    signbit,
    sinh,
)
from svod.errors import (
    AxisError,
    DTypeError,
    ShapeError,
    SvodError,
    SvodIndexError,
    SvodOverflowError,
    SvodTypeError,
    SvodValueError,
    SvodWarning,
)
from svod.explain import Explanation, explain
from svod.gather import take
from svod.grids import meshgrid
from svod.interop import array_namespace_info as __array_namespace_info__
from svod.interop import from_dlpack
from svod.memory import cache_info, reset
from svod.profiler import profile
from svod.searching import nonzero, searchsorted
from svod.sets import unique_all, unique_counts, unique_inverse, unique_values
from svod.sorting import argsort, sort
from svod.stats import reset_stats, stats
from svod.tensor import (
    Tensor,
    abs,
    add,
    all,
    any,
    arange,
    argmax,
    argmin,
    asarray,
    astype,
    bitwise_and,
    bitwise_invert,
    bitwise_or,
    bitwise_xor,
    broadcast_arrays,
    broadcast_shapes,
    broadcast_to,
    ceil,
    clip,
    concat,
    cos,
    cumulative_sum,
    divide,
    empty,
    empty_like,
    equal,
    erf,
    erfc,
    exp,
    expand_dims,
    expm1,
    eye,
    flip,
    floor,
    floor_divide,
    full,
    full_like,
    greater,
    greater_equal,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    linspace,
    log,
    log1p,
    log2,
    log10,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    matmul,
    matrix_transpose,
    max,
    maximum,
    mean,
    min,
    minimum,
    moveaxis,
    multiply,
    negative,
    not_equal,
    ones,
    ones_like,
    pad,
    permute_dims,
    positive,
    pow,
    prod,
    realize,
    reciprocal,
    remainder,
    repeat,
    reshape,
    result_type,
    roll,
    round,
    rsqrt,
    sign,
    sin,
    sqrt,
    square,
    squeeze,
    stack,
    std,
    subtract,
    sum,
    tan,
    tanh,
    tensordot,
    tile,
    tril,
    triu,
    trunc,
    unstack,
    var,
    vecdot,
    where,
    zeros,
    zeros_like,
)

__version__ = "0.1.0"
__array_api_version__ = "2023.12"

e = 2.718281828459045
pi = 3.141592653589793
inf = float("inf")
nan = float("nan")
newaxis = None


# numpy's names for Array API functions: thin functions of their own (not aliases), so an
# error names the one the user called (svod.errors labels messages by the calling frame)
def concatenate(arrays, /, *, axis=0):
    """numpy's name for `concat`."""
    return concat(arrays, axis=axis)


def transpose(x, /, axes=None):
    """numpy's `transpose`: `permute_dims`, reversing the axes when `axes` is None."""
    x = asarray(x)
    return permute_dims(x, tuple(reversed(range(x.ndim))) if axes is None else axes)


def power(x1, x2, /):
    """numpy's name for `pow`."""
    return pow(x1, x2)


def absolute(x, /):
    """numpy's name for `abs`."""
    return abs(x)


def isdtype(dtype, kind) -> builtins_bool:  # noqa: F821 - annotation only
    """Array API `isdtype`: kind is a dtype, a kind name, or a tuple of those."""
    d = _dt.dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        kinds = {"bool": d.is_bool, "signed integer": d.is_signed, "unsigned integer": d.is_unsigned,
                 "integral": d.is_int, "real floating": d.is_float, "complex floating": d.is_complex,
                 "numeric": not d.is_bool}
        if kind not in kinds:
            raise ValueError(f"isdtype: unknown kind {kind!r}; the kinds are {', '.join(map(repr, kinds))}")
        return kinds[kind]
    return d == _dt.dtype(kind)


def can_cast(from_, to, /) -> builtins_bool:  # noqa: F821
    f = from_.dtype if isinstance(from_, Tensor) else _dt.dtype(from_)
    return _dt.promote_types(f, _dt.dtype(to)) == _dt.dtype(to)


class finfo_object(_collections.namedtuple("finfo_object", "bits eps max min smallest_normal dtype")):
    """Array API `finfo`: Python floats and the svod dtype."""


class iinfo_object(_collections.namedtuple("iinfo_object", "bits max min dtype")):
    """Array API `iinfo`: Python ints and the svod dtype."""


def finfo(type, /) -> finfo_object:  # noqa: A002 - the Array API name
    """Machine limits of a float dtype (or an array's), as Python floats; of a complex
    dtype, those of its parts (dtype float32 for complex64, as the Array API says)."""
    import numpy as np

    d = type.dtype if isinstance(type, Tensor) else _dt.dtype(type)
    f = np.finfo(d.np)
    return finfo_object(int(f.bits), float(f.eps), float(f.max), float(f.min), float(f.smallest_normal), d.real)


def iinfo(type, /) -> iinfo_object:  # noqa: A002
    """Machine limits of an integer dtype (or an array's), as Python ints."""
    import numpy as np

    d = type.dtype if isinstance(type, Tensor) else _dt.dtype(type)
    f = np.iinfo(d.np)
    return iinfo_object(int(f.bits), int(f.max), int(f.min), d)


import builtins  # noqa: E402

builtins_bool = builtins.bool
