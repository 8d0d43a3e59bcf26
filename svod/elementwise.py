"""The Array API's elementwise functions, broadcasting and dtype promotion of operands.

`_operands` is the one place operands meet: Tensors, numpy arrays and scalars become
UOps of one dtype (numpy 2 promotion, Python scalars weak as NEP 50 says, a traced
Python scalar of `svod.jit` weak too) and one broadcast shape; every binary function
here and in the frontends builds its node from them. Each function is one op in the
graph (fused like the rest); float functions of integer or bool input compute in the
default float dtype (float32). A mismatch raises `DTypeError` / `ShapeError` naming the
function the user called. NaN, ±inf and -0.0 follow numpy; complex values follow
numpy's loops where they differ from the textbook formula (`abs`, `reciprocal`, `tan`).

>>> import svod
>>> svod.atan2(svod.asarray([1.0, -1.0]), -1.0).numpy().round(4)
array([ 2.3562, -2.3562], dtype=float32)
>>> svod.bitwise_left_shift(svod.asarray([1, 2, 3]), 4).tolist()
[16, 32, 48]
"""

from __future__ import annotations

import builtins
import functools
import math
from typing import Any

import numpy as np

from svod import dtype as dt
from svod.creation import full, zeros_like
from svod.dtype import DType, DTypeError
from svod.errors import ShapeError, named, strip_label
from svod.ir import OP, Ops, UOp, shape_str
from svod.tensor import (
    _KIND_VALUE,
    Tensor,
    WeakScalar,
    _cast,
    _check_shape,
    _const,
    _expand_uop,
    _from,
    _is_scalar,
    _no_complex,
    _node1,
    _node2,
    _scalar_value,
    asarray,
    astype,
    broadcast_shapes,
)

# ----------------------------------------------------------------------------- operands and broadcasting


def _plain(x) -> bool:
    """A Tensor or a subclass of it other than a traced weak scalar (svod.numpy's ndarray)."""
    t = type(x)
    return t is Tensor or t is not WeakScalar and isinstance(x, Tensor)


def _operands(op: str, *xs, dtype_fn=None) -> tuple[list[UOp], DType]:
    """Turn operands (Tensors, arrays, scalars) into UOps of one dtype and one shape."""
    if len(xs) == 2:  # fast paths: two tensors alike, or a float tensor and a Python float/int
        a, b = xs
        ta, tb = _plain(a), _plain(b)
        if ta or tb:
            u = a.uop if ta else b.uop
            d = u.dtype
            if dtype_fn is None or dtype_fn(d) is d:
                if ta and tb:
                    ub = b.uop
                    if ub.dtype is d and ub.shape == u.shape:
                        return [u, ub], d
                elif d.is_float and type(b if ta else a) in (float, int):
                    c = _const(b if ta else a, d, u.shape)
                    return ([u, c] if ta else [c, u]), d
    tensors = [x if isinstance(x, Tensor) and type(x) is not WeakScalar else None for x in xs]
    strong: list[Any] = []
    for i, x in enumerate(xs):
        if type(x) is WeakScalar:  # a traced Python scalar (svod.jit): weak, as the scalar itself
            strong.append(_KIND_VALUE[x.uop.dtype.kind])
            continue
        if tensors[i] is None and (not _is_scalar(x) or isinstance(x, np.generic)):  # NEP 50: numpy scalars are strong
            try:
                tensors[i] = asarray(x)
            except DTypeError as e:  # name the op the user wrote (a complex operand, a uint8 array, ...)
                raise DTypeError(f"{op}: {strip_label(str(e))}") from None
        if tensors[i] is not None:
            strong.append(tensors[i].dtype)
        else:
            strong.append(_scalar_value(x))
    try:
        d = dt.result_type(*strong)
    except DTypeError as e:
        raise DTypeError(f"{op}: {strip_label(str(e))}") from e
    if dtype_fn is not None:
        d = dtype_fn(d)
    shape = broadcast_shapes(*(t.shape for t in tensors if t is not None), op=op)
    uops = []
    for i, x in enumerate(xs):
        if tensors[i] is not None:
            uops.append(_expand_uop(_cast(tensors[i].uop, d), shape))
        elif type(x) is WeakScalar:
            uops.append(_expand_uop(x.cast(d, op), shape))
        else:
            v = _scalar_value(x)
            if d.is_int and isinstance(v, (int, float)) and not isinstance(v, bool):
                if isinstance(v, float) and not v.is_integer():
                    raise DTypeError(f"{op}: cannot use float {v} with an integer array")
                dt.check_scalar(d, v, op)
            uops.append(_const(v, d, shape))
    return uops, d


def _binop(op: Ops, name: str, a, b, *, dtype_fn=None, out_dtype=None) -> Tensor:
    (ua, ub), d = _operands(name, a, b, dtype_fn=dtype_fn)
    return Tensor._from(UOp(op, out_dtype or d, (ua, ub)))


def _unop(op: Ops, name: str, x, float_only=False, allow_bool=True, identity_for_int=False, real_only=False) -> Tensor:
    """One `op` node over `x`. `float_only`: integer and bool input computes in the default
    float dtype; `allow_bool`: bool input raises when False; `identity_for_int`: integer and
    bool input is returned as it is; `real_only`: complex input raises (`_no_complex`)."""
    if _plain(x):  # the common case first: a float tensor takes none of the branches below
        u = x.uop
        if u.dtype.is_float:
            return Tensor._from(UOp(op, u.dtype, (u,)))
    x = asarray(x)
    if real_only:
        _no_complex(name, x.dtype)
    if not allow_bool and x.dtype.is_bool:
        raise DTypeError(f"{name}: not supported for bool input")
    if identity_for_int and not x.dtype.is_inexact:
        return x
    u = x.uop
    if float_only and not x.dtype.is_float:
        u = _cast(u, dt.math_float(u.dtype))
    return Tensor._from(UOp(op, u.dtype, (u,)))


def _float_result(d: DType) -> DType:
    """The dtype of a division or mean of `d` values: the default float for ints and bool."""
    return d if d.is_inexact else dt.default_float


def _math_result(d: DType) -> DType:
    """The dtype of a float function of `d` values (`dtype.math_float`)."""
    return dt.math_float(d)


def broadcast_to(x: Tensor, /, shape) -> Tensor:
    if type(x) is Tensor and type(shape) is tuple:  # the hot case: a shape of plain ints it broadcasts to
        u = x.uop
        s = u.shape
        k = len(shape) - len(s)
        if k >= 0:
            for n in shape:
                if type(n) is not int or n < 0:
                    break
            else:
                for i, n in enumerate(s):
                    if n != 1 and n != shape[k + i]:
                        break
                else:
                    return _from(_expand_uop(u, shape))
    x = asarray(x)
    shape = _check_shape(shape, "broadcast_to")
    if len(shape) < x.ndim or builtins.any(
            a != b and a != 1 for a, b in zip(x.shape, shape[len(shape) - x.ndim:])):
        raise ShapeError(f"broadcast_to: cannot broadcast shape {shape_str(x.shape)} to {shape_str(shape)}")
    return Tensor._from(_expand_uop(x.uop, shape))


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    arrays = [asarray(a) for a in arrays]
    shape = broadcast_shapes(*(a.shape for a in arrays), op="broadcast_arrays")
    return [broadcast_to(a, shape) for a in arrays]



# ----------------------------------------------------------------------------- elementwise


def _fast2(op: Ops, a, b) -> Tensor | None:
    """`op` of a float Tensor `a` and a Python float or int, or a Tensor of its dtype and
    shape, as `_operands` would build it (the scalar weak: `a`'s dtype); None for every
    other case (the general path: promotion, broadcasting, errors). Exact types only: a
    subclass (svod.numpy's ndarray, a traced WeakScalar) takes the general path."""
    if type(a) is Tensor:
        u = a.uop
        d = u.dtype
        if d.kind == "f":
            tb = type(b)
            if tb is float or tb is int:
                return _node2(op, d, u, _const(b, d, u.shape))
            if tb is Tensor:
                v = b.uop
                if v.dtype is d and v.shape == u.shape:
                    return _node2(op, d, u, v)
    return None


def add(a, b, /) -> Tensor:
    r = _fast2(OP.ADD, a, b)
    if r is not None:
        return r
    (ua, ub), d = _operands("add", a, b)
    return Tensor._from(UOp(OP.OR if d.is_bool else OP.ADD, d, (ua, ub)))


def subtract(a, b, /) -> Tensor:
    r = _fast2(OP.SUB, a, b)
    if r is not None:
        return r
    (ua, ub), d = _operands("subtract", a, b)
    if d.is_bool:
        raise DTypeError("subtract: boolean subtract is not supported, use logical_xor or bitwise_xor")
    return Tensor._from(UOp(OP.SUB, d, (ua, ub)))


def multiply(a, b, /) -> Tensor:
    r = _fast2(OP.MUL, a, b)
    if r is not None:
        return r
    (ua, ub), d = _operands("multiply", a, b)
    return Tensor._from(UOp(OP.AND if d.is_bool else OP.MUL, d, (ua, ub)))


def divide(a, b, /) -> Tensor:
    """True division; integers divide in the default float dtype (float32)."""
    r = _fast2(OP.DIV, a, b)
    if r is not None:
        return r
    return _binop(OP.DIV, "divide", a, b, dtype_fn=_float_result)


def maximum(a, b, /) -> Tensor:
    """Elementwise maximum; NaN propagates (numpy semantics)."""
    r = _fast2(OP.MAX, a, b)
    if r is not None:
        return r
    (ua, ub), d = _operands("maximum", a, b)
    _no_complex("maximum", d, "; complex numbers have no order")
    return Tensor._from(UOp(OP.OR if d.is_bool else OP.MAX, d, (ua, ub)))


def minimum(a, b, /) -> Tensor:
    r = _fast2(OP.MIN, a, b)
    if r is not None:
        return r
    (ua, ub), d = _operands("minimum", a, b)
    _no_complex("minimum", d, "; complex numbers have no order")
    return Tensor._from(UOp(OP.AND if d.is_bool else OP.MIN, d, (ua, ub)))


def _cmp_out_of_range(op: Ops, left, right) -> Tensor | None:
    """`left OP right` when one side is an integer Tensor and the other a Python int outside
    that Tensor's dtype range: numpy 2 compares such values exactly (instead of raising
    OverflowError as arithmetic does), so the result is the same for every element.
    None when that is not the case."""
    if type(right) is int and type(left) not in (int, float, bool):
        x, v, x_left = left, right, True
    elif type(left) is int and type(right) not in (int, float, bool):
        x, v, x_left = right, left, False
    else:
        return None
    if type(x) is WeakScalar:
        return None
    if not isinstance(x, Tensor):
        if not isinstance(x, (np.ndarray, np.generic)) or x.dtype.kind not in "iu":
            return None  # (other dtypes: _operands raises, naming the op)
        x = asarray(x)
    if not x.dtype.is_int or dt.can_cast_scalar(x.dtype, v):
        return None
    if op is OP.CMPEQ or op is OP.CMPNE:
        value = op is OP.CMPNE
    else:  # CMPLT / CMPLE: x < v holds for every x when v is above the range; v < x when below
        value = (v > 0) if x_left else (v < 0)
    return broadcast_to(asarray(value), x.shape)


def _cmp(op: Ops, name: str, a, b, swap=False) -> Tensor:
    if type(a) is int or type(b) is int:
        out = _cmp_out_of_range(op, b, a) if swap else _cmp_out_of_range(op, a, b)
        if out is not None:
            return out
    (ua, ub), d = _operands(name, a, b)
    if op is not OP.CMPEQ and op is not OP.CMPNE:
        _no_complex(name, d, "; complex numbers have no order")
    if swap:
        ua, ub = ub, ua
    return Tensor._from(UOp(op, dt.bool_, (ua, ub)))


def _bitwise(op: Ops, name: str, a, b) -> Tensor:
    (ua, ub), d = _operands(name, a, b)
    if d.is_inexact:
        raise DTypeError(f"{name}: not supported for floating-point operands ({d})")
    return Tensor._from(UOp(op, d, (ua, ub)))


def bitwise_invert(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_inexact:
        raise DTypeError(f"bitwise_invert: not supported for {x.dtype}")
    return Tensor._from(UOp(OP.NOT, x.dtype, (x.uop,)))


def _as_bool(x) -> Tensor:
    x = asarray(bool(x)) if _is_scalar(x) else asarray(x)  # NOTE: 1e-50 must not round to a float32 zero
    return x if x.dtype.is_bool else not_equal(x, 0)


def logical_not(x, /) -> Tensor:
    x = _as_bool(x)
    return Tensor._from(UOp(OP.NOT, dt.bool_, (x.uop,)))


def positive(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_bool:
        raise DTypeError("positive: not supported for bool input")
    return x


def abs(x, /) -> Tensor:  # noqa: A001
    """|x|; of a complex value its modulus in the parts' float dtype, computed as numpy's
    SIMD loop: ``max * sqrt(1 + (min/max)**2)`` of the parts' magnitudes; inf if either
    part is infinite (even with a NaN), else NaN if either is NaN."""
    if type(x) is Tensor:  # a real float tensor: one node (the hot case)
        d = x.uop.dtype
        if d.kind == "f":
            return _node1(OP.ABS, d, x.uop)
    x = asarray(x)
    if x.dtype.is_complex:
        return Tensor._from(UOp(OP.ABS, x.dtype.real, (x.uop,)))
    return x if x.dtype.is_bool else _unop(OP.ABS, "abs", x)


def rsqrt(x, /) -> Tensor:
    return reciprocal(sqrt(x))


def tan(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_complex:  # tan(z) = -i tanh(i z): glibc's ctan special values too
        iz = Tensor._from(UOp(OP.COMPLEX, x.dtype, (negative(imag(x)).uop, real(x).uop)))
        t = tanh(iz)
        return Tensor._from(UOp(OP.COMPLEX, x.dtype, (imag(t).uop, negative(real(t)).uop)))
    return divide(sin(x), cos(x))


def _scaled_log(x, c: float) -> Tensor:
    """log(x) * c, c rounded to the result's float dtype; a complex log scales each part
    (numpy's: an infinite real part keeps a zero imaginary part)."""
    x = asarray(x)
    f = _math_result(x.dtype)
    lg = log(x)
    if f.is_complex:
        k = np.array(c, dtype=f.real.np).item()
        return Tensor._from(UOp(OP.COMPLEX, f, (multiply(real(lg), k).uop, multiply(imag(lg), k).uop)))
    return multiply(lg, np.array(c, dtype=f.np).item())


def log2(x, /) -> Tensor:
    return _scaled_log(x, 1 / math.log(2))


def log10(x, /) -> Tensor:
    return _scaled_log(x, 1 / math.log(10))


def trunc(x, /) -> Tensor:
    x = asarray(x)
    _no_complex("trunc", x.dtype)
    if not x.dtype.is_float:
        return x
    return where(less(x, 0), ceil(x), floor(x))


def reciprocal(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_complex:  # numpy's own loop (not 1/x by Smith's division): r = im/re, d = re + im r, ...
        re, im = real(x), imag(x)
        first = less_equal(abs(im), abs(re))
        r1 = divide(im, re)
        d1 = add(re, multiply(im, r1))
        r2 = divide(re, im)
        d2 = add(multiply(re, r2), im)
        out_re = where(first, divide(1, d1), divide(r2, d2))
        out_im = where(first, divide(negative(r1), d1), divide(-1, d2))
        return Tensor._from(UOp(OP.COMPLEX, x.dtype, (out_re.uop, out_im.uop)))
    return divide(1, x)


def square(x, /) -> Tensor:
    x = asarray(x)
    return multiply(x, x)


def isnan(x, /) -> Tensor:
    """NaN test; a complex value is NaN when either part is."""
    x = asarray(x)
    if not x.dtype.is_inexact:
        return full(x.shape, False, dtype=dt.bool_)
    return Tensor._from(UOp(OP.ISNAN, dt.bool_, (x.uop,)))


def isinf(x, /) -> Tensor:
    """Infinity test; a complex value is infinite when either part is."""
    x = asarray(x)
    if not x.dtype.is_inexact:
        return full(x.shape, False, dtype=dt.bool_)
    return Tensor._from(UOp(OP.ISINF, dt.bool_, (x.uop,)))


def isfinite(x, /) -> Tensor:
    return logical_not(logical_or(isnan(x), isinf(x)))


def where(condition, x1, x2, /) -> Tensor:
    """Elementwise select; numpy broadcasting and promotion between `x1` and `x2`."""
    scalar = _is_scalar(condition)
    c = _as_bool(condition) if not scalar else asarray(bool(condition))
    (u1, u2), d = _operands("where", x1, x2)
    shape = broadcast_shapes(c.shape, u1.shape, op="where")
    k = c.uop
    while k.op is OP.EXPAND or k.op is OP.RESHAPE:
        k = k.src[0]
    if scalar or k.op is OP.CONST:  # a constant condition selects one side (`x[:] = v` makes one)
        return Tensor._from(_expand_uop(u1 if (bool(condition) if scalar else k.arg) else u2, shape))
    return Tensor._from(UOp(OP.WHERE, d, (_expand_uop(c.uop, shape), _expand_uop(u1, shape),
                                           _expand_uop(u2, shape))))


def clip(x, /, min=None, max=None) -> Tensor:  # noqa: A002
    """Clamp to [min, max]; NaN in `x` propagates. Keeps `x`'s dtype. As numpy 2, a Python
    int bound beyond an integer `x`'s range that clamps nothing (a min below it, a max
    above it) is ignored; one that would clamp raises OverflowError."""
    x = asarray(x)
    _no_complex("clip", x.dtype, "; complex numbers have no order")
    if x.dtype.is_int:
        lo_, hi_ = dt.int_limits(x.dtype)
        if type(min) is int and min < lo_:
            min = None  # noqa: A001
        if type(max) is int and max > hi_:
            max = None  # noqa: A001
        for v in (min, max):
            if type(v) is int:
                dt.check_scalar(x.dtype, v, "clip")
    out = x
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return astype(out, x.dtype, copy=False) if out.dtype != x.dtype else out


# ----------------------------------------------------------------------------- inverse trig, float pairs, shifts, parts


def signbit(x, /) -> Tensor:
    """Whether the sign bit is set: True for -0.0 and negative NaNs; `x < 0` for integers."""
    x = asarray(x)
    _no_complex("signbit", x.dtype)
    if x.dtype.is_float:
        return Tensor._from(UOp(OP.SIGNBIT, dt.bool_, (x.uop,)))
    if x.dtype.is_bool:
        return full(x.shape, False, dtype=dt.bool_)
    return less(x, 0)


def _arith(op: Ops, name: str, a, b, real_only: bool = False) -> Tensor:
    """`a op b` for non-bool operands (pow; floor division and remainder: real ones only)."""
    (ua, ub), d = _operands(name, a, b)
    if real_only:
        _no_complex(name, d)
    if d.is_bool:
        raise DTypeError(f"{name}: not supported for bool operands")
    return Tensor._from(UOp(op, d, (ua, ub)))


def _logical(op: Ops, name: str, a, b) -> Tensor:
    return _bitwise(op, name, _as_bool(a), _as_bool(b))


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


# ----------------------------------------------------------------------------- the one-op functions, by table
# Each is one `op` node through a shared body (`_unop`, `_cmp`, `_bitwise`, ...): a plain
# function with its own name (errors and tracebacks name it) and docstring, as cheap to
# call as a hand-written one (the body is called with positional arguments).


def _unary(name: str, op: Ops, doc: str | None = None, *, float_only=False, allow_bool=True,
           identity_for_int=False, real_only=False):
    def fn(x, /) -> Tensor:
        if type(x) is Tensor:  # a real float tensor: one node of its dtype (`_unop`'s first case, inline)
            u = x.uop
            d = u.dtype
            if d.kind == "f":
                return _node1(op, d, u)
        return _unop(op, name, x, float_only, allow_bool, identity_for_int, real_only)

    fn.__doc__ = doc
    return named(fn, name)


def _binary(name: str, op: Ops, body, doc: str | None = None):
    def fn(x1, x2, /) -> Tensor:
        return body(op, name, x1, x2)

    fn.__doc__ = doc
    return named(fn, name)


_FLOAT = {"float_only": True}
negative = _unary("negative", OP.NEG, allow_bool=False)
sign = _unary("sign", OP.SIGN, allow_bool=False)
round = _unary("round", OP.ROUND, "Round half to even (numpy semantics).", identity_for_int=True)  # noqa: A001
floor = _unary("floor", OP.FLOOR, identity_for_int=True, real_only=True)
ceil = _unary("ceil", OP.CEIL, identity_for_int=True, real_only=True)
exp = _unary("exp", OP.EXP, **_FLOAT)
log = _unary("log", OP.LOG, **_FLOAT)
sqrt = _unary("sqrt", OP.SQRT, **_FLOAT)
sin = _unary("sin", OP.SIN, **_FLOAT)
cos = _unary("cos", OP.COS, **_FLOAT)
tanh = _unary("tanh", OP.TANH, **_FLOAT)
erf = _unary("erf", OP.ERF, real_only=True, **_FLOAT)
erfc = _unary("erfc", OP.ERFC, "1 - erf(x), within a few ulp also where it is tiny (an op of its own: no "
              "cancellation; down to the subnormals, x < 26.6 in float64, x < 10.05 in float32).", **_FLOAT)
expm1 = _unary("expm1", OP.EXPM1, "exp(x) - 1, accurate for tiny x (an op of its own: no cancellation); "
               "-0.0 stays -0.0.", **_FLOAT)
log1p = _unary("log1p", OP.LOG1P, "log(1 + x), accurate for tiny x (an op of its own: no rounding of 1 + x); "
               "-0.0 stays -0.0.", **_FLOAT)
asin = _unary("asin", OP.ASIN, "Inverse sine; NaN outside [-1, 1].", **_FLOAT)
acos = _unary("acos", OP.ACOS, "Inverse cosine; NaN outside [-1, 1].", **_FLOAT)
atan = _unary("atan", OP.ATAN, **_FLOAT)
sinh = _unary("sinh", OP.SINH, **_FLOAT)
cosh = _unary("cosh", OP.COSH, **_FLOAT)
asinh = _unary("asinh", OP.ASINH, **_FLOAT)
acosh = _unary("acosh", OP.ACOSH, "Inverse hyperbolic cosine; NaN below 1.", **_FLOAT)
atanh = _unary("atanh", OP.ATANH, "Inverse hyperbolic tangent; ±inf at ±1, NaN outside [-1, 1].", **_FLOAT)

pow = _binary("pow", OP.POW, _arith)  # noqa: A001 - the Array API name
floor_divide = _binary("floor_divide", OP.IDIV, functools.partial(_arith, real_only=True))
remainder = _binary("remainder", OP.MOD, functools.partial(_arith, real_only=True))
less = _binary("less", OP.CMPLT, _cmp)
less_equal = _binary("less_equal", OP.CMPLE, _cmp)
greater = _binary("greater", OP.CMPLT, functools.partial(_cmp, swap=True))
greater_equal = _binary("greater_equal", OP.CMPLE, functools.partial(_cmp, swap=True))
equal = _binary("equal", OP.CMPEQ, _cmp)
not_equal = _binary("not_equal", OP.CMPNE, _cmp)
bitwise_and = _binary("bitwise_and", OP.AND, _bitwise)
bitwise_or = _binary("bitwise_or", OP.OR, _bitwise)
bitwise_xor = _binary("bitwise_xor", OP.XOR, _bitwise)
logical_and = _binary("logical_and", OP.AND, _logical)
logical_or = _binary("logical_or", OP.OR, _logical)
logical_xor = _binary("logical_xor", OP.XOR, _logical)
atan2 = _binary("atan2", OP.ATAN2, _real_binop,
                "The angle of the point (x2, x1) in [-pi, pi] (C99's table for zeros and infinities).")
hypot = _binary("hypot", OP.HYPOT, _real_binop, "sqrt(x1**2 + x2**2) without intermediate overflow; inf if either "
                "is infinite.")
logaddexp = _binary("logaddexp", OP.LOGADDEXP, _real_binop, "log(exp(x1) + exp(x2)), computed as numpy does (no "
                    "overflow).")
copysign = _binary("copysign", OP.COPYSIGN, _real_binop, "|x1| with the sign bit of x2 (-0.0 and negative NaNs "
                   "count as negative).")
bitwise_left_shift = _binary("bitwise_left_shift", OP.SHL, _shift, "x1 << x2 for integers; a shift count outside "
                             "[0, bits) gives 0 (numpy).")
bitwise_right_shift = _binary("bitwise_right_shift", OP.SHR, _shift, "Arithmetic x1 >> x2 for integers; a count "
                              "outside [0, bits) gives 0, or -1 for a negative x1 (numpy).")
