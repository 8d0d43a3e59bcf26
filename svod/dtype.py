"""dtypes and numpy-2 promotion for the dtypes svod supports.

svod's dtypes: bool (stored as one byte), int8, int16, int32, int64, uint8, uint16,
uint32, uint64, float32, float64, complex64, complex128 (a pair of float32 / float64:
real part, imaginary part, interleaved in memory as numpy's). Promotion between arrays is numpy 2's table (int64
with uint64 gives float64, as numpy; uint8 with int8 gives int16). Python floats (and
lists of floats) default to float32, as in torch and JAX, Python complex numbers to
complex64 (complex128 under `numpy_defaults`); Python scalars are weak
(NEP 50): they take the array's dtype when the kinds allow it, and a Python int that
does not fit the integer dtype it meets raises OverflowError, as in numpy 2.

>>> from svod import dtype as d
>>> d.promote_types(d.int32, d.float32)
float64
>>> d.result_type(d.int32, 3)
int32
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np


def _of_kind(kinds: str, doc: str) -> property:
    """A property: the dtype's numpy kind letter is one of `kinds`."""
    return property(lambda self: self.kind in kinds, doc=doc)


@dataclass(frozen=True, eq=False)
class DType:
    """A svod dtype. Compares equal to itself only (the dtypes are singletons, so
    identity equality and hashing: they sit on the hot path of every op); `np` gives the
    numpy dtype."""

    name: str
    itemsize: int
    kind: str  # numpy's kind letter: 'b' bool, 'i' signed int, 'u' unsigned int, 'f' float, 'c' complex
    priority: int  # order within the promotion lattice (for readable sorting only)

    @property
    def np(self) -> np.dtype:
        return _NP[self.name]

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):  # pickling by name keeps the singletons unique
        return (dtype, (self.name,))

    # numpy interop: np.dtype(svod.float32) works
    @property
    def dtype(self) -> np.dtype:
        return self.np

    @property
    def type(self) -> type:
        """numpy's scalar type (``float64.type(1.5)``, as numpy dtypes have)."""
        return _NP[self.name].type

    def __call__(self, value=0):
        """A numpy scalar of this dtype (``svod.numpy.float64(1.5)``, as numpy's types)."""
        try:
            return _NP[self.name].type(value)
        except (TypeError, ValueError, OverflowError) as e:
            raise DTypeError(f"{self.name}: cannot make a {self.name} scalar of {value!r:.60} ({e})") from None

    is_float = _of_kind("f", "A real float (not complex).")
    is_complex = _of_kind("c", "complex64 or complex128 (`is_float` is False for them: real floats only).")
    is_inexact = _of_kind("fc", "A real or complex float.")
    is_int = _of_kind("iu", "Any integer dtype, signed or unsigned (not bool).")
    is_signed = _of_kind("i", "A signed integer dtype.")
    is_unsigned = _of_kind("u", "An unsigned integer dtype.")
    is_bool = _of_kind("b", "The bool dtype.")

    @property
    def real(self) -> DType:
        """The real dtype of the parts of a complex dtype; a real dtype itself."""
        return _REAL_OF.get(self, self)

    @property
    def bits(self) -> int:
        return 8 * self.itemsize


# the dtypes in promotion-lattice order (`priority`); itemsize and kind are numpy's
(bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float32, float64, complex64, complex128) = (
    DType(name, np.dtype(name).itemsize, np.dtype(name).kind, priority) for priority, name in enumerate(
        ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64",
         "complex64", "complex128")))
_REAL_OF = {complex64: float32, complex128: float64}

SIGNED: tuple[DType, ...] = (int8, int16, int32, int64)
UNSIGNED: tuple[DType, ...] = (uint8, uint16, uint32, uint64)
INTS: tuple[DType, ...] = SIGNED + UNSIGNED
FLOATS: tuple[DType, ...] = (float32, float64)
COMPLEX: tuple[DType, ...] = (complex64, complex128)
NUMERIC: tuple[DType, ...] = INTS + FLOATS + COMPLEX
ALL: tuple[DType, ...] = (bool_,) + NUMERIC

default_int = int64


class _Defaults(threading.local):
    """Per-thread default float dtype: float32 (svod's, as torch and JAX), float64 while
    `svod.numpy` runs a function (numpy's); read as `dtype.default_float`."""

    float_dtype: DType = float32


_DEFAULTS = _Defaults()


def __getattr__(name: str):
    if name == "default_float":  # NOTE: module attribute, read when used (the current thread's)
        return _DEFAULTS.float_dtype
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def math_float(d: DType) -> DType:
    """The float dtype a float function (sqrt, exp, sin, atan2, ...) of a `d` value computes
    in: a float keeps its dtype; bool and integers give the default float -- except under
    `numpy_defaults`, where numpy's loops give float16 for 1-byte and float32 for 2-byte
    integers (and bool): svod, without float16, gives float32 for both. (Division and
    means are not float functions: they give the default float, as numpy's.)"""
    if d.kind in "fc":
        return d
    f = _DEFAULTS.float_dtype
    return float32 if f is float64 and d.itemsize <= 2 else f


# Called (then dropped) the first time any thread enters `numpy_defaults`: svod.eager arms
# its per-op check there (in the "auto" policy eager small work runs only under numpy's
# defaults or an `eager_mode` block, so until then no op needs the check; svod/eager.py).
_ON_FIRST_NUMPY_DEFAULTS = None


class numpy_defaults:
    """Context: this thread's default float dtype is float64 (numpy's) inside; re-entrant."""

    __slots__ = ("_saved",)

    def __enter__(self):
        if _ON_FIRST_NUMPY_DEFAULTS is not None:
            _ON_FIRST_NUMPY_DEFAULTS()
        self._saved = _DEFAULTS.float_dtype
        _DEFAULTS.float_dtype = float64
        return self

    def __exit__(self, *exc):
        _DEFAULTS.float_dtype = self._saved
        return False

_BY_NAME = {d.name: d for d in ALL}
_BY_NAME["bool_"] = bool_
_NP = {d.name: np.dtype(d.name) for d in ALL}
_BY_NP = {np.dtype(d.name): d for d in ALL}  # NOTE: np.dtype.name is slow; a dict lookup is not


from svod.errors import DTypeError, SvodOverflowError  # noqa: E402 - defined with the other error classes


def dtype(x) -> DType:
    """Convert a svod dtype, numpy dtype, Python type or name into a svod `DType`."""
    if isinstance(x, DType):
        return x
    if x is bool:
        return bool_
    if x is int:
        return default_int
    if x is float:
        return _DEFAULTS.float_dtype
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    try:
        npd = np.dtype(x)
    except (TypeError, ValueError) as e:
        raise DTypeError(f"svod does not support dtype {x!r:.60}; supported: {', '.join(d.name for d in ALL)}") from e
    if npd.name in _BY_NAME:
        return _BY_NAME[npd.name]
    raise DTypeError(f"svod does not support dtype {npd} ({x!r}); supported: {', '.join(d.name for d in ALL)}")


def from_numpy(npd: np.dtype, what: str = "array") -> DType:
    """The svod dtype of a numpy dtype; narrow ints/floats are not silently widened."""
    d = _BY_NP.get(npd)
    if d is not None:
        return d
    raise DTypeError(
        f"asarray: {what} has dtype {npd}, which svod does not support "
        f"(supported: {', '.join(d.name for d in ALL)}); convert it with .astype() first"
    )


_LIMITS = {d: (int(np.iinfo(d.np).min), int(np.iinfo(d.np).max)) for d in INTS}

# numpy 2 promotion table restricted to svod's dtypes.
_PROMOTE: dict[tuple[DType, DType], DType] = {}
for _a in ALL:
    for _b in ALL:
        _PROMOTE[(_a, _b)] = _BY_NAME[np.promote_types(_a.np, _b.np).name]


def promote_types(a: DType, b: DType) -> DType:
    """numpy 2 promotion between two svod dtypes (int32 with float32 gives float64)."""
    return _PROMOTE[(dtype(a), dtype(b))]


def scalar_kind(x) -> str | None:
    """'b', 'i', 'f' or 'c' for a Python (or numpy) scalar, None if not a scalar (numpy's
    unsigned scalars are 'i' too: this is the kind of a *value*, not of a dtype)."""
    if isinstance(x, (bool, np.bool_)):
        return "b"
    if isinstance(x, (int, np.integer)):
        return "i"
    if isinstance(x, (float, np.floating)):
        return "f"
    if isinstance(x, (complex, np.complexfloating)):
        return "c"
    return None


# weak promotion (NEP 50): a Python scalar raises the array's kind only when its own is
# higher; a Python int fits any integer kind
_KIND_ORDER = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}


def weak_result(arr: DType, scalar) -> DType:
    """NEP 50: a Python scalar takes the array's dtype unless its kind is higher.

    bool array with int scalar -> int64; int or bool array with float scalar -> the
    default float dtype (float32, as in JAX); a complex scalar with a float array gives
    the complex dtype of the float's width (float32 -> complex64), with an int or bool
    array the default complex (complex64, complex128 under `numpy_defaults`); otherwise the
    array's dtype.
    """
    k = scalar_kind(scalar)
    if k is None:
        raise DTypeError(f"{type(scalar).__name__} is not a scalar svod can use")
    if _KIND_ORDER[k] <= _KIND_ORDER[arr.kind]:
        return arr
    if k == "c":
        return complex_of(arr if arr.kind == "f" else _DEFAULTS.float_dtype)
    return default_int if k == "i" else _DEFAULTS.float_dtype


def complex_of(d: DType) -> DType:
    """The complex dtype with parts of float dtype `d` (float64 -> complex128); a complex
    dtype itself."""
    return complex128 if d is float64 or d is complex128 else complex64


def _strong_dtype(x) -> DType:
    if isinstance(x, DType):  # NOTE: DType.dtype is the numpy dtype (interop): check first
        return x
    d = getattr(x, "dtype", x)
    return d if isinstance(d, DType) else dtype(d)


def result_type(*args) -> DType:
    """Result dtype of mixing arrays/dtypes (strong) with Python scalars (weak)."""
    strong = [a for a in args if scalar_kind(a) is None]
    weak = [a for a in args if scalar_kind(a) is not None]
    if not strong:
        kinds = [scalar_kind(a) for a in weak]
        if "c" in kinds:
            return complex_of(_DEFAULTS.float_dtype)
        if "f" in kinds:
            return _DEFAULTS.float_dtype
        if "i" in kinds:
            return default_int
        return bool_
    if len(strong) > 2:
        # numpy promotes a sequence at once, not pairwise: int8, uint16, float32 -> float32,
        # where (int8 + uint16) + float32 = int32 + float32 = float64. Every pair of
        # `_PROMOTE` is numpy's, so three or more dtypes take numpy's sequence rule.
        out = _BY_NP[np.result_type(*[_strong_dtype(s).np for s in strong])]
    else:
        out = _strong_dtype(strong[0])
        for s in strong[1:]:
            out = _PROMOTE[(out, _strong_dtype(s))]
    for w in weak:
        out = weak_result(out, w)
    return out


def can_cast_scalar(d: DType, value) -> bool:
    """Whether a Python int fits the integer dtype (for weak-scalar overflow checks)."""
    if d.is_int and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        lo, hi = _LIMITS[d]
        return lo <= int(value) <= hi
    return True


def check_scalar(d: DType, value, op: str) -> None:
    """Raise OverflowError (numpy 2's error for a weak Python int out of the integer
    dtype's range) naming `op`."""
    if not can_cast_scalar(d, value):
        lo, hi = _LIMITS[d]
        raise SvodOverflowError(f"{op}: Python integer {int(value)} out of bounds for {d} (range {lo} to {hi})")


def int_limits(d: DType) -> tuple[int, int]:
    """(min, max) of an integer dtype as Python ints."""
    return _LIMITS[d]


def min_value(d: DType):
    """The identity of `max` for this dtype (-inf, the smallest int, False)."""
    return _extreme(d, 0)


def max_value(d: DType):
    """The identity of `min` for this dtype (inf, the largest int, True)."""
    return _extreme(d, 1)


def _extreme(d: DType, top: int):
    if d.is_float:
        return float("inf") if top else float("-inf")
    return _LIMITS[d][top] if d.is_int else bool(top)
