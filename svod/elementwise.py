"""The Array API elementwise functions beyond tensor.py's core set: inverse trigonometric
and hyperbolic functions, atan2, hypot, logaddexp, copysign, signbit, the bit shifts, and
conj/real/imag for real dtypes.

Each is one op in the graph (fused like the rest, compiled by `svod/codegen/vecmath_inv.py`
for the float functions), with the dtype rules of tensor.py: float functions of integer
or bool input compute in the default float dtype (float32), two operands promote as numpy
2 with weak Python scalars (NEP 50). Shifts take integers only; a float or bool operand
raises `DTypeError` naming the function, as do the other mismatches, where the call is
written.

>>> import svod
>>> svod.atan2(svod.asarray([1.0, -1.0]), -1.0).numpy().round(4)
array([ 2.3562, -2.3562], dtype=float32)
>>> svod.bitwise_left_shift(svod.asarray([1, 2, 3]), 4).tolist()
[16, 32, 48]
"""

from __future__ import annotations

from svod import dtype as dt
from svod.dtype import DTypeError
from svod.ir import OP, UOp
from svod.tensor import Tensor, _binop, _math_result, _no_complex, _operands, _unop, asarray, full, less, zeros_like

__all__ = ["acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "bitwise_left_shift",
           "bitwise_right_shift", "conj", "copysign", "cosh", "hypot", "imag", "logaddexp", "real", "signbit",
           "sinh"]


def asin(x, /) -> Tensor:
    """Inverse sine; NaN outside [-1, 1]."""
    return _unop(OP.ASIN, "asin", x, float_only=True)


def acos(x, /) -> Tensor:
    """Inverse cosine; NaN outside [-1, 1]."""
    return _unop(OP.ACOS, "acos", x, float_only=True)


def atan(x, /) -> Tensor:
    return _unop(OP.ATAN, "atan", x, float_only=True)


def sinh(x, /) -> Tensor:
    return _unop(OP.SINH, "sinh", x, float_only=True)


def cosh(x, /) -> Tensor:
    return _unop(OP.COSH, "cosh", x, float_only=True)


def asinh(x, /) -> Tensor:
    return _unop(OP.ASINH, "asinh", x, float_only=True)


def acosh(x, /) -> Tensor:
    """Inverse hyperbolic cosine; NaN below 1."""
    return _unop(OP.ACOSH, "acosh", x, float_only=True)


def atanh(x, /) -> Tensor:
    """Inverse hyperbolic tangent; ±inf at ±1, NaN outside [-1, 1]."""
    return _unop(OP.ATANH, "atanh", x, float_only=True)


def atan2(x1, x2, /) -> Tensor:
    """The angle of the point (x2, x1) in [-pi, pi] (C99's table for zeros and infinities)."""
    return _real_binop(OP.ATAN2, "atan2", x1, x2)


def hypot(x1, x2, /) -> Tensor:
    """sqrt(x1**2 + x2**2) without intermediate overflow; inf if either is infinite."""
    return _real_binop(OP.HYPOT, "hypot", x1, x2)


def logaddexp(x1, x2, /) -> Tensor:
    """log(exp(x1) + exp(x2)), computed as numpy does (no overflow)."""
    return _real_binop(OP.LOGADDEXP, "logaddexp", x1, x2)


def copysign(x1, x2, /) -> Tensor:
    """|x1| with the sign bit of x2 (-0.0 and negative NaNs count as negative)."""
    return _real_binop(OP.COPYSIGN, "copysign", x1, x2)


def signbit(x, /) -> Tensor:
    """Whether the sign bit is set: True for -0.0 and negative NaNs; `x < 0` for integers."""
    x = asarray(x)
    _no_complex("signbit", x.dtype)
    if x.dtype.is_float:
        return Tensor._from(UOp(OP.SIGNBIT, dt.bool_, (x.uop,)))
    if x.dtype.is_bool:
        return full(x.shape, False, dtype=dt.bool_)
    return less(x, 0)


def _real_binop(op, name: str, x1, x2) -> Tensor:
    """A binary float function defined for real operands only (atan2, hypot, ...)."""
    out = _binop(op, name, x1, x2, dtype_fn=_math_result)
    _no_complex(name, out.dtype)
    return out


def _shift(op, name: str, a, b) -> Tensor:
    (ua, ub), d = _operands(name, a, b)
    if not d.is_int:
        what = "floating-point" if d.is_inexact else "bool"
        raise DTypeError(f"{name}: not supported for {what} operands ({d}); shifts need integer arrays")
    return Tensor._from(UOp(op, d, (ua, ub)))


def bitwise_left_shift(x1, x2, /) -> Tensor:
    """x1 << x2 for integers; a shift count outside [0, bits) gives 0 (numpy)."""
    return _shift(OP.SHL, "bitwise_left_shift", x1, x2)


def bitwise_right_shift(x1, x2, /) -> Tensor:
    """Arithmetic x1 >> x2 for integers; a count outside [0, bits) gives 0, or -1 for a
    negative x1 (numpy)."""
    return _shift(OP.SHR, "bitwise_right_shift", x1, x2)


def conj(x, /) -> Tensor:
    """Complex conjugate (the imaginary part negated: -0.0 for a +0.0 part); the input's
    value for real dtypes (a new tensor object)."""
    x = asarray(x)
    if x.dtype.is_complex:
        return Tensor._from(UOp(OP.CONJ, x.dtype, (x.uop,)))
    return Tensor._from(x.uop)


def real(x, /) -> Tensor:
    """Real part, in the parts' float dtype (complex64 -> float32); the input's value for
    real dtypes (a new tensor object)."""
    x = asarray(x)
    if x.dtype.is_complex:
        return Tensor._from(UOp(OP.REAL, x.dtype.real, (x.uop,)))
    return Tensor._from(x.uop)


def imag(x, /) -> Tensor:
    """Imaginary part, in the parts' float dtype; zeros of the input's dtype for real dtypes."""
    x = asarray(x)
    if x.dtype.is_complex:
        return Tensor._from(UOp(OP.IMAG, x.dtype.real, (x.uop,)))
    return zeros_like(x)
