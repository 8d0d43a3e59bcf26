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
from svod import methods as _methods  # noqa: F401 - binds Tensor's operators and delegating methods
from svod.capture import ConcretizationError, JitError, JitWarning, jit
from svod.config import search_limits
from svod.contraction import einsum, einsum_path
from svod.creation import arange, empty, empty_like, eye, full, full_like, linspace, ones, ones_like, zeros, zeros_like
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
from svod.eager import eager_mode
from svod.elementwise import (
    abs,
    acos,
    acosh,
    add,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    broadcast_arrays,
    broadcast_to,
    ceil,
    clip,
    conj,
    copysign,
    cos,
    cosh,
    divide,
    equal,
    erf,
    erfc,
    exp,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    hypot,
    imag,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    positive,
    pow,
    real,
    reciprocal,
    remainder,
    round,
    rsqrt,
    sign,
    signbit,
    sin,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
    where,
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
from svod.interop import from_dlpack, isdtype
from svod.memory import cache_info, reset
from svod.movement import (
    concat,
    expand_dims,
    flip,
    matrix_transpose,
    moveaxis,
    pad,
    permute_dims,
    repeat,
    reshape,
    roll,
    squeeze,
    stack,
    tile,
    tril,
    triu,
    unstack,
)
from svod.profiler import profile
from svod.reductions import (
    all,
    any,
    argmax,
    argmin,
    cumulative_sum,
    matmul,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    tensordot,
    var,
    vecdot,
)
from svod.searching import nonzero, searchsorted
from svod.sets import unique_all, unique_counts, unique_inverse, unique_values
from svod.sorting import argsort, sort
from svod.stats import reset_stats, stats
from svod.tensor import Tensor, asarray, astype, broadcast_shapes, realize, result_type

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
