"""The Array API's statistical and searching reductions (sum, prod, max, min, any, all,
mean, var, std, argmax, argmin, cumulative_sum) and linear algebra products (matmul,
tensordot, vecdot).

A reduction is one REDUCE node over normalised axes (a reshape drops them unless
`keepdims`); accumulation dtypes are numpy 2's (`_acc_dtype`); variance takes two passes,
never E[x²]−E[x]². A complex sum or matmul is built from the float ones of its parts.
An empty max/min/argmax raises `SvodValueError` (no identity), as numpy.

>>> import svod
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> x.sum(axis=0).tolist(), svod.matmul(x, x).tolist()
([4.0, 6.0], [[7.0, 10.0], [15.0, 22.0]])
"""

from __future__ import annotations

import builtins

import numpy as np

from svod import dtype as dt
from svod import eager as _eager
from svod import tensor as _T
from svod.creation import full
from svod.dtype import DType
from svod.elementwise import (
    _as_bool,
    _float_result,
    add,
    conj,
    divide,
    imag,
    multiply,
    real,
    sqrt,
    subtract,
)
from svod.errors import AxisError, ShapeError, SvodTypeError, SvodValueError
from svod.ir import OP, Ops, UOp, shape_str
from svod.ir import ints_node as _ints_node
from svod.ir import reduce_node as _reduce_node
from svod.movement import permute_dims, reshape
from svod.tensor import (
    Tensor,
    _cast,
    _expand_uop,
    _from_numpy,
    _no_complex,
    _normalize_axes,
    _normalize_axis,
    _prod,
    asarray,
    astype,
    broadcast_shapes,
)

# ----------------------------------------------------------------------------- reductions


def _reduce(x, rop: str, axis, keepdims: bool, op: str, out_dtype: DType | None = None) -> Tensor:
    x = asarray(x)
    if rop in ("max", "min"):
        _no_complex(op, x.dtype, "; complex numbers have no order")
    elif rop == "sum" and (out_dtype or x.dtype).is_complex:  # the parts' sums: compiled float reductions
        x = astype(x, out_dtype or x.dtype, copy=False)
        parts = [_reduce(p(x), "sum", axis, keepdims, op) for p in (real, imag)]
        return Tensor._from(UOp(OP.COMPLEX, x.dtype, (parts[0].uop, parts[1].uop)))
    axes = _normalize_axes(axis, x.ndim, op)
    u = x.uop
    if out_dtype is not None and out_dtype != x.dtype:
        u = _cast(u, out_dtype)
    if rop in ("max", "min") and builtins.any(x.shape[a] == 0 for a in axes):
        raise SvodValueError(f"{op}: zero-size array (shape {shape_str(x.shape)}) along axes {axes} has no identity")
    if axes:
        u = UOp(OP.REDUCE, u.dtype, (u,), (rop, axes))
    if not keepdims:
        u = UOp(OP.RESHAPE, u.dtype, (u,), tuple(s for i, s in enumerate(x.shape) if i not in axes))
    return Tensor._from(u)


def _fast_reduce(x, rop: str, axis, keepdims) -> Tensor | None:
    """`_reduce(x, rop, axis, keepdims, ...)` of a float Tensor (exact type, ndim >= 1)
    over `axis` None or one int in range, with the nodes found by their hash-consing keys
    first (`ir.reduce_node`, `ir.ints_node`): the same nodes as `_reduce` builds; None for
    every other case (the general path: casts, complex, errors, axis tuples)."""
    if type(x) is not Tensor:
        return None
    u = x.uop
    d = u.dtype
    shape = u.shape
    nd = len(shape)
    if d.kind != "f" or not nd or (keepdims is not False and keepdims is not True):
        return None
    if axis is None:
        axes = tuple(range(nd))
        rest = ()
    elif type(axis) is int and -nd <= axis < nd:
        a = axis % nd
        axes = (a,)
        rest = shape[:a] + shape[a + 1:]
    else:
        return None
    if rop != "sum" and rop != "prod":
        for a in axes:
            if shape[a] == 0:
                return None  # (the general path raises: no identity)
    r = _reduce_node(d, u, rop, axes)
    return _T._from(r if keepdims else _ints_node(OP.RESHAPE, d, r, rest))


def _acc_dtype(d: DType, dtype) -> DType:
    """The accumulation dtype of sum/prod/cumulative_sum (numpy 2 on a 64-bit platform, and
    the Array API's default): floats keep theirs, unsigned ints give uint64, signed ints
    and bool int64."""
    if dtype is not None:
        return dt.dtype(dtype)
    return d if d.is_inexact else dt.uint64 if d.is_unsigned else dt.int64


def sum(x, /, *, axis=None, dtype=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    if dtype is None:
        r = _fast_reduce(x, "sum", axis, keepdims)
        if r is not None:
            return r
    x = asarray(x)
    return _reduce(x, "sum", axis, keepdims, "sum", _acc_dtype(x.dtype, dtype))


def prod(x, /, *, axis=None, dtype=None, keepdims: bool = False) -> Tensor:
    if dtype is None:
        r = _fast_reduce(x, "prod", axis, keepdims)
        if r is not None:
            return r
    x = asarray(x)
    return _reduce(x, "prod", axis, keepdims, "prod", _acc_dtype(x.dtype, dtype))


def max(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum along axes; NaN wins (numpy semantics)."""
    r = _fast_reduce(x, "max", axis, keepdims)
    return r if r is not None else _reduce(x, "max", axis, keepdims, "max")


def min(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    r = _fast_reduce(x, "min", axis, keepdims)
    return r if r is not None else _reduce(x, "min", axis, keepdims, "min")


def any(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(_as_bool(x), "max", axis, keepdims, "any") if _count(x, axis, "any") else \
        _reduce_empty(x, False, axis, keepdims, "any")


def all(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(_as_bool(x), "min", axis, keepdims, "all") if _count(x, axis, "all") else \
        _reduce_empty(x, True, axis, keepdims, "all")


def _count(x, axis, op: str = "reduce") -> int:
    x = asarray(x)
    axes = _normalize_axes(axis, x.ndim, op)
    return _prod(x.shape[a] for a in axes)


def _reduce_empty(x, value, axis, keepdims, op) -> Tensor:
    x = asarray(x)
    axes = _normalize_axes(axis, x.ndim, op)
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdims else \
        tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return full(shape, value, dtype=dt.bool_)


def mean(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean; integers average in the default float dtype (float32)."""
    x = asarray(x)
    f = _float_result(x.dtype)
    n = _count(x, axis, "mean")
    s = _reduce(x, "sum", axis, keepdims, "mean", f)
    return divide(s, n) if n else multiply(s, float("nan"))


def var(x, /, *, axis=None, correction=0.0, keepdims: bool = False) -> Tensor:
    """Variance, two passes (mean, then squared deviations) — never E[x²]−E[x]²; of
    complex values the mean of |x - mean|², real (numpy's)."""
    x = asarray(x)
    f = _float_result(x.dtype)
    xf = astype(x, f, copy=False)
    n = _count(x, axis, "var")
    m = mean(xf, axis=axis, keepdims=True)
    d = subtract(xf, m)
    if f.is_complex:  # |d|² = re² + im², in the parts' float dtype (numpy's real result)
        re, im = real(d), imag(d)
        d2 = add(multiply(re, re), multiply(im, im))
    else:
        d2 = multiply(d, d)
    ss = _reduce(d2, "sum", axis, keepdims, "var")
    denom = n - correction
    return divide(ss, denom) if denom > 0 else multiply(ss, float("inf")) if denom == 0 and n else \
        multiply(ss, float("nan"))


def std(x, /, *, axis=None, correction=0.0, keepdims: bool = False) -> Tensor:
    return sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def _argreduce(op: Ops, name: str, x, axis, keepdims) -> Tensor:
    x = asarray(x)
    _no_complex(name, x.dtype, "; complex numbers have no order")
    if axis is None:
        if x.size == 0:
            raise SvodValueError(f"{name}: attempt to get {name} of an empty sequence")
        flat = reshape(x, (-1,))
        u = UOp(op, dt.int64, (flat.uop,), 0)
        return Tensor._from(UOp(OP.RESHAPE, dt.int64, (u,), (1,) * x.ndim if keepdims else ()))
    a = _normalize_axis(axis, x.ndim, name)
    if x.shape[a] == 0:
        raise SvodValueError(f"{name}: attempt to get {name} of an empty sequence (axis {a} of shape "
                         f"{shape_str(x.shape)})")
    u = UOp(op, dt.int64, (x.uop,), a)
    if not keepdims:
        u = UOp(OP.RESHAPE, dt.int64, (u,), tuple(s for i, s in enumerate(x.shape) if i != a))
    return Tensor._from(u)


def argmax(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """Index of the first maximum; NaN wins (numpy semantics)."""
    return _argreduce(OP.ARGMAX, "argmax", x, axis, keepdims)


def argmin(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    return _argreduce(OP.ARGMIN, "argmin", x, axis, keepdims)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False) -> Tensor:
    """Cumulative sum (computed eagerly: a scan is not a fusion target yet)."""
    x = asarray(x)
    if axis is None:
        if x.ndim > 1:
            raise SvodValueError("cumulative_sum: axis is required for arrays with more than one dimension")
        axis = 0
    a = _normalize_axis(axis, x.ndim, "cumulative_sum")
    d = _acc_dtype(x.dtype, dtype)
    out = np.cumsum(x.numpy(), axis=a, dtype=d.np)
    if include_initial:
        pad = [(0, 0)] * x.ndim
        pad[a] = (1, 0)
        out = np.pad(out, pad)
    return _from_numpy(out, copy=False)


# ----------------------------------------------------------------------------- matmul


_MATMUL = _eager._INTERP[OP.MATMUL]


def _eager_matmul(a: Tensor, b: Tensor, d) -> Tensor | None:
    """`a @ b` of two realized operands of dtype `d` (shapes checked) computed at once when
    eager small work is on and operands and result are small (svod.eager): the op table's
    MATMUL (`np.matmul` in `d`), whose 1-D promotion and batch broadcasting are svod's."""
    lim = _eager.limit()
    if not lim or _T._READ_HOOK is not None or a.size > lim or b.size > lim:
        return None
    x, y = a.uop.arg.array, b.uop.arg.array
    out = np.asarray(_eager.run(_MATMUL, [x, y], d.np, None))
    if out.size > lim or out.dtype != d.np:
        return None
    if out.base is not None or not out.flags.owndata or not out.flags.c_contiguous:
        out = np.array(out, order="C", copy=True)
    out.flags.writeable = False
    return Tensor._from(UOp.buffer(out, d))


def matmul(a, b, /) -> Tensor:
    """numpy.matmul: batch dims broadcast, 1-D operands promoted and squeezed.

    >>> import svod
    >>> (svod.ones((2, 3)) @ svod.ones((3,))).tolist()
    [3.0, 3.0]
    """
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must be at least 1-D, got shapes {shape_str(a.shape)} and "
                         f"{shape_str(b.shape)}; use * for scalars")
    d = dt.promote_types(a.dtype, b.dtype)
    if (a.uop.op is OP.BUFFER and b.uop.op is OP.BUFFER and a.dtype is d and b.dtype is d and a.ndim <= 2
            and b.ndim <= 2 and a.shape[-1] == b.shape[0]):  # (no batch axes: numpy's 1-D rules are svod's)
        r = _eager_matmul(a, b, d)
        if r is not None:
            return r
    if d.is_complex:  # four real matmuls (the float GEMM), recombined
        a, b = astype(a, d, copy=False), astype(b, d, copy=False)
        ar, ai, br, bi = real(a), imag(a), real(b), imag(b)
        re, im = subtract(matmul(ar, br), matmul(ai, bi)), add(matmul(ar, bi), matmul(ai, br))
        return Tensor._from(UOp(OP.COMPLEX, d, (re.uop, im.uop)))
    ua, ub = _cast(a.uop, d), _cast(b.uop, d)
    squeeze_a = a.ndim == 1
    squeeze_b = b.ndim == 1
    if squeeze_a:
        ua = UOp(OP.RESHAPE, d, (ua,), (1,) + ua.shape)
    if squeeze_b:
        ub = UOp(OP.RESHAPE, d, (ub,), ub.shape + (1,))
    if ua.shape[-1] != ub.shape[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {shape_str(a.shape)} @ {shape_str(b.shape)} "
                         f"({ua.shape[-1]} != {ub.shape[-2]})")
    try:
        batch = broadcast_shapes(ua.shape[:-2], ub.shape[:-2], op="matmul")
    except ShapeError as e:
        raise ShapeError(f"matmul: batch dimensions of {shape_str(a.shape)} and {shape_str(b.shape)} "
                         f"cannot be broadcast together") from e
    ua = _expand_uop(ua, batch + ua.shape[-2:])
    ub = _expand_uop(ub, batch + ub.shape[-2:])
    out = UOp(OP.MATMUL, d, (ua, ub))
    shape = out.shape
    if squeeze_a:
        shape = shape[:-2] + shape[-1:]
    if squeeze_b:
        shape = shape[:-1]
    if shape != out.shape:
        out = UOp(OP.RESHAPE, d, (out,), shape)
    return Tensor._from(out)


def tensordot(a, b, /, *, axes=2) -> Tensor:
    a, b = asarray(a), asarray(b)
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        n = int(axes)
        if not 0 <= n <= builtins.min(a.ndim, b.ndim):
            raise AxisError(f"tensordot: axes={n} must be between 0 and the dimensions of both operands, "
                            f"shapes {shape_str(a.shape)} and {shape_str(b.shape)}")
        ax_a = tuple(range(a.ndim - n, a.ndim))
        ax_b = tuple(range(n))
    else:
        try:
            sa, sb = axes
            sa = (sa,) if isinstance(sa, (int, np.integer)) else tuple(sa)
            sb = (sb,) if isinstance(sb, (int, np.integer)) else tuple(sb)
        except (TypeError, ValueError):
            raise SvodTypeError(f"tensordot: axes must be an int or a pair of axis sequences, got {axes!r}") from None
        if len(sa) != len(sb):
            raise ShapeError(f"tensordot: axes {axes!r} contract {len(sa)} axes of the first operand (shape "
                             f"{shape_str(a.shape)}) but {len(sb)} of the second (shape {shape_str(b.shape)})")
        ax_a = tuple(_normalize_axis(x, a.ndim, "tensordot") for x in sa)
        ax_b = tuple(_normalize_axis(x, b.ndim, "tensordot") for x in sb)
        if len(set(ax_a)) != len(ax_a) or len(set(ax_b)) != len(ax_b):
            raise AxisError(f"tensordot: repeated axis in {axes!r}")
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"tensordot: contracted axes differ in size: {shape_str(a.shape)} and "
                             f"{shape_str(b.shape)} over {ax_a} / {ax_b}")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = _prod(a.shape[i] for i in ax_a)
    am = reshape(permute_dims(a, free_a + list(ax_a)), (_prod(a.shape[i] for i in free_a), k))
    bm = reshape(permute_dims(b, list(ax_b) + free_b), (k, _prod(b.shape[i] for i in free_b)))
    return reshape(matmul(am, bm), tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))


def vecdot(x1, x2, /, *, axis: int = -1) -> Tensor:
    """Dot products along `axis` (a negative axis, counted from the end of both); the other
    axes broadcast, the contracted one must have one size in both; result dtype: the
    operands' promoted dtype. Complex operands: sum(conj(x1) * x2), as the standard says."""
    x1, x2 = asarray(x1), asarray(x2)
    if x1.dtype.is_complex:
        x1 = conj(x1)
    shape = broadcast_shapes(x1.shape, x2.shape, op="vecdot")
    ax = _normalize_axis(axis, len(shape), "vecdot")
    k = ax - len(shape)  # the same axis counted from the end in both operands
    if -k > builtins.min(x1.ndim, x2.ndim) or x1.shape[k] != x2.shape[k]:
        raise ShapeError(f"vecdot: the contracted axis {axis} differs in size: shapes {shape_str(x1.shape)} and "
                         f"{shape_str(x2.shape)}")
    d = dt.promote_types(x1.dtype, x2.dtype)
    return sum(multiply(x1, x2), axis=ax, dtype=d if not d.is_bool else None)
