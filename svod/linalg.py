"""`svod.linalg`: the Array API linear-algebra extension (2023.12), and `lstsq`.

Factorisations and solvers are numpy's LAPACK as library steps inside the plan
(`svod.library`): lazy, cached and replayed like any kernel, their results fused into the
consumers' kernels. Everything else is composed from svod's own ops (norms, traces,
diagonals as strided views, outer products, cross products, matrix powers as matmuls),
so it fuses with its neighbours. Integer and bool inputs compute in the default float
dtype; float32 stays float32 (LAPACK's single-precision routines, as numpy).

Data-dependent failures (a singular matrix for `inv`/`solve`, a matrix that is not
positive definite for `cholesky`) raise numpy's `LinAlgError` when the plan runs, with a
note naming the function; shape and dtype errors raise where the call is written.

>>> import svod
>>> a = svod.asarray([[4.0, 1.0], [1.0, 3.0]])
>>> svod.linalg.solve(a, svod.asarray([1.0, 2.0])).numpy().round(4)
array([0.0909, 0.6364], dtype=float32)
"""

from __future__ import annotations

import builtins
import math
from typing import NamedTuple

import numpy as np

from svod import dtype as dt
from svod.creation import eye, library_call, zeros
from svod.dtype import DTypeError
from svod.elementwise import abs, broadcast_to, multiply, not_equal, pow, sqrt, square, subtract
from svod.errors import ShapeError, SvodTypeError, SvodValueError
from svod.ir import shape_str
from svod.movement import expand_dims, matrix_transpose, reshape, stack
from svod.reductions import matmul, max, min, sum, tensordot, vecdot
from svod.tensor import Tensor, _normalize_axes, _normalize_axis, asarray, astype, broadcast_shapes, realize

__all__ = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "lstsq", "matmul", "matrix_norm",
           "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd",
           "svdvals", "tensordot", "trace", "vecdot", "vector_norm"]


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class LstsqResult(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


def _float(x, name: str) -> Tensor:
    x = asarray(x)
    return x if x.dtype.is_float else astype(x, dt.default_float)


def _matrices(x, name: str, square: bool = False) -> Tensor:
    x = _float(x, name)
    if x.ndim < 2:
        raise ShapeError(f"linalg.{name}: needs a matrix (at least 2 dimensions), got shape {shape_str(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.{name}: needs square matrices, got shape {shape_str(x.shape)}")
    return x


def _eps(d) -> float:
    return float(np.finfo(d.np).eps)


# ----------------------------------------------------------------------------- LAPACK steps


def cholesky(x, /, *, upper: bool = False) -> Tensor:
    """L with x = L L^T (or U with x = U^T U when `upper`); x symmetric positive definite."""
    x = _matrices(x, "cholesky", square=True)
    return library_call("cholesky", (bool(upper),), [x], [(x.shape, x.dtype)])[0]


def det(x, /) -> Tensor:
    x = _matrices(x, "det", square=True)
    return library_call("det", (), [x], [(x.shape[:-2], x.dtype)])[0]


def slogdet(x, /) -> SlogdetResult:
    """(sign, log|det|): the determinant without overflow."""
    x = _matrices(x, "slogdet", square=True)
    return SlogdetResult(*library_call("slogdet", (), [x], [(x.shape[:-2], x.dtype)] * 2))


def eigh(x, /) -> EighResult:
    """Eigenvalues (ascending) and eigenvectors (columns) of symmetric matrices (the
    lower triangle is read, as numpy)."""
    x = _matrices(x, "eigh", square=True)
    return EighResult(*library_call("eigh", (), [x], [(x.shape[:-1], x.dtype), (x.shape, x.dtype)]))


def eigvalsh(x, /) -> Tensor:
    x = _matrices(x, "eigvalsh", square=True)
    return library_call("eigvalsh", (), [x], [(x.shape[:-1], x.dtype)])[0]


def inv(x, /) -> Tensor:
    x = _matrices(x, "inv", square=True)
    return library_call("inv", (), [x], [(x.shape, x.dtype)])[0]


def pinv(x, /, *, rtol=None) -> Tensor:
    """Moore-Penrose pseudo-inverse; singular values below `rtol` times the largest are
    dropped (default max(M, N) * eps, the Array API's). `rtol` is a float, or an array
    broadcast against the stack shape ``x.shape[:-2]`` (one cut-off per matrix), which is
    an operand of the LAPACK step (lazy, like `x`)."""
    x = _matrices(x, "pinv")
    out = [(x.shape[:-2] + (x.shape[-1], x.shape[-2]), x.dtype)]
    if rtol is None or isinstance(rtol, (int, float)) and not isinstance(rtol, bool):
        r = builtins.max(x.shape[-2:]) * _eps(x.dtype) if rtol is None else float(rtol)
        return library_call("pinv", (r,), [x], out)[0]
    t = rtol if isinstance(rtol, Tensor) else asarray(rtol)
    if not (t.dtype.is_float or t.dtype.is_int) or t.dtype.is_complex:
        raise DTypeError(f"linalg.pinv: rtol must be a real number or a real-valued array, got dtype {t.dtype}")
    stack = x.shape[:-2]
    if t.ndim > len(stack) or any(a != b and a != 1 for a, b in zip(reversed(t.shape), reversed(stack))):
        raise ShapeError(f"linalg.pinv: rtol of shape {shape_str(t.shape)} does not broadcast against the "
                         f"stack shape {shape_str(stack)} of x {shape_str(x.shape)}")
    t = broadcast_to(t.astype(x.dtype.real if x.dtype.is_complex else x.dtype), stack)
    return library_call("pinv", ("array",), [x, t], out)[0]


def qr(x, /, *, mode: str = "reduced") -> QRResult:
    """x = Q R; `mode` "reduced" (Q: (..., M, K), K = min(M, N)) or "complete" (Q square)."""
    x = _matrices(x, "qr")
    if mode not in ("reduced", "complete"):
        raise SvodValueError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}")
    m, n = x.shape[-2:]
    k = m if mode == "complete" else builtins.min(m, n)
    b = x.shape[:-2]
    return QRResult(*library_call("qr", (mode,), [x], [(b + (m, k), x.dtype), (b + (k, n), x.dtype)]))


def svd(x, /, *, full_matrices: bool = True) -> SVDResult:
    """x = U diag(S) Vh, singular values descending."""
    x = _matrices(x, "svd")
    m, n = x.shape[-2:]
    k = builtins.min(m, n)
    b = x.shape[:-2]
    u, v = (m, n) if full_matrices else (k, k)
    return SVDResult(*library_call("svd", (bool(full_matrices),), [x],
                                   [(b + (m, u), x.dtype), (b + (k,), x.dtype), (b + (v, n), x.dtype)]))


def svdvals(x, /) -> Tensor:
    x = _matrices(x, "svdvals")
    return library_call("svdvals", (), [x], [(x.shape[:-2] + (builtins.min(x.shape[-2:]),), x.dtype)])[0]


def solve(x1, x2, /) -> Tensor:
    """The solution of x1 @ out = x2; x2 is a vector (shape (M,)) only when it is 1-D
    (numpy 2 and the Array API), else (..., M, K); batch axes broadcast."""
    a = _matrices(x1, "solve", square=True)
    b = _float(x2, "solve")
    d = dt.promote_types(a.dtype, b.dtype)
    a, b = astype(a, d, copy=False), astype(b, d, copy=False)
    m = a.shape[-1]
    if b.ndim == 1:
        if b.shape[0] != m:
            raise ShapeError(f"linalg.solve: x2 of shape {shape_str(b.shape)} does not match x1 {shape_str(a.shape)}")
        shape = a.shape[:-1]
    else:
        if b.shape[-2] != m:
            raise ShapeError(f"linalg.solve: x2 of shape {shape_str(b.shape)} does not match x1 {shape_str(a.shape)}")
        shape = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="linalg.solve") + b.shape[-2:]
    return library_call("solve", (), [a, b], [(shape, d)])[0]


def lstsq(x1, x2, /, *, rcond=None) -> LstsqResult:
    """Least squares x1 @ solution ~ x2 (numpy's `lstsq`, LAPACK's gelsd). Realizes its
    result: numpy's `residuals` is empty unless the rank is full and M > N, which the
    data decide; the sums of squared residuals are computed from the solution."""
    a = _matrices(x1, "lstsq")
    b = _float(x2, "lstsq")
    if a.ndim != 2 or b.ndim not in (1, 2) or b.shape[0] != a.shape[0]:
        raise ShapeError(f"linalg.lstsq: needs x1 (M, N) and x2 (M,) or (M, K), got {shape_str(a.shape)} and "
                         f"{shape_str(b.shape)}")
    d = dt.promote_types(a.dtype, b.dtype)
    a, b = astype(a, d, copy=False), astype(b, d, copy=False)
    m, n = a.shape
    k = builtins.min(m, n)
    x, rank, s = library_call("lstsq", (None if rcond is None else float(rcond),), [a, b],
                              [((n,) + b.shape[1:], d), ((), dt.int32), ((k,), d)])
    realize(x, rank, s)
    if int(rank.item()) == n and m > n:
        res = sum(square(subtract(matmul(a, x), b)), axis=0)
        res = reshape(res, (1,)) if b.ndim == 1 else res
    else:
        res = zeros((0,), dtype=d)
    return LstsqResult(x, res, rank, s)


# ----------------------------------------------------------------------------- composed


def diagonal(x, /, *, offset: int = 0) -> Tensor:
    """The `offset` diagonal of the matrices of `x` (a strided view, no copy)."""
    x = asarray(x)
    if x.ndim < 2:
        raise ShapeError(f"linalg.diagonal: needs at least 2 dimensions, got shape {shape_str(x.shape)}")
    m, n = x.shape[-2:]
    k = int(offset)
    length = builtins.max(0, builtins.min(m, n - k) if k >= 0 else builtins.min(m + k, n))
    start = k if k >= 0 else -k * n
    flat = reshape(x, x.shape[:-2] + (m * n,))
    if length == 0:
        return flat[..., 0:0]
    return flat[..., start:start + (length - 1) * (n + 1) + 1:n + 1]


def trace(x, /, *, offset: int = 0, dtype=None) -> Tensor:
    return sum(diagonal(x, offset=offset), axis=-1, dtype=dtype)


def outer(x1, x2, /) -> Tensor:
    x1, x2 = asarray(x1), asarray(x2)
    if x1.ndim != 1 or x2.ndim != 1:
        raise ShapeError(f"linalg.outer: needs 1-D arrays, got shapes {shape_str(x1.shape)} and {shape_str(x2.shape)}")
    return multiply(reshape(x1, (-1, 1)), reshape(x2, (1, -1)))


def cross(x1, x2, /, *, axis: int = -1) -> Tensor:
    """The cross product of 3-element vectors along `axis` (operands broadcast)."""
    x1, x2 = asarray(x1), asarray(x2)
    shape = broadcast_shapes(x1.shape, x2.shape, op="linalg.cross")
    ax = _normalize_axis(axis, len(shape), "linalg.cross")
    if shape[ax] != 3:
        raise ShapeError(f"linalg.cross: axis {axis} must have size 3, got shapes {shape_str(x1.shape)} and "
                         f"{shape_str(x2.shape)}")
    a, b = broadcast_to(x1, shape), broadcast_to(x2, shape)

    def c(t, i):
        return t[(slice(None),) * ax + (i,)]

    return stack([subtract(multiply(c(a, 1), c(b, 2)), multiply(c(a, 2), c(b, 1))),
                  subtract(multiply(c(a, 2), c(b, 0)), multiply(c(a, 0), c(b, 2))),
                  subtract(multiply(c(a, 0), c(b, 1)), multiply(c(a, 1), c(b, 0)))], axis=ax)


def matrix_power(x, n: int, /) -> Tensor:
    """x to the integer power `n` by repeated squaring (matmuls); negative `n` inverts."""
    x = asarray(x)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.matrix_power: needs square matrices, got shape {shape_str(x.shape)}")
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise SvodTypeError(f"linalg.matrix_power: exponent must be an int, got {type(n).__name__}")
    n = int(n)
    if n == 0:
        return broadcast_to(eye(x.shape[-1], dtype=x.dtype), x.shape)
    if n < 0:
        x, n = inv(x), -n
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def matrix_rank(x, /, *, rtol=None) -> Tensor:
    """The number of singular values above `rtol` times the largest (int64)."""
    x = _matrices(x, "matrix_rank")
    s = svdvals(x)
    r = builtins.max(x.shape[-2:]) * _eps(x.dtype) if rtol is None else rtol
    if s.shape[-1] == 0:
        return zeros(s.shape[:-1], dtype=dt.int64)
    tol = multiply(max(s, axis=-1, keepdims=True), r if not isinstance(r, Tensor) else expand_dims(r, -1))
    return sum(astype(s > tol, dt.int64), axis=-1)


def vector_norm(x, /, *, axis=None, keepdims: bool = False, ord=2) -> Tensor:
    """The `ord`-norm over `axis` (all axes when None): 2, 1, inf, -inf, 0 (the count of
    non-zeros) or any other p (sum |x|^p)^(1/p)."""
    x = _float(x, "vector_norm")
    axes = _normalize_axes(axis, x.ndim, "linalg.vector_norm")
    a = abs(x)
    if ord == 2:
        return sqrt(sum(square(a), axis=axes, keepdims=keepdims))
    if ord == 1:
        return sum(a, axis=axes, keepdims=keepdims)
    if ord == math.inf:
        return max(a, axis=axes, keepdims=keepdims)
    if ord == -math.inf:
        return min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
        return sum(astype(not_equal(x, 0), x.dtype), axis=axes, keepdims=keepdims)
    p = float(ord)
    return pow(sum(pow(a, p), axis=axes, keepdims=keepdims), 1.0 / p)


def matrix_norm(x, /, *, keepdims: bool = False, ord="fro") -> Tensor:
    """'fro', 'nuc', 1, -1, 2, -2, inf, -inf over the last two axes."""
    x = _matrices(x, "matrix_norm")

    def keep(t):
        return expand_dims(t, (-2, -1)) if keepdims else t

    if ord == "fro":
        return sqrt(sum(square(x), axis=(-2, -1), keepdims=keepdims))
    if ord in ("nuc", 2, -2):
        s = svdvals(x)
        return keep(sum(s, axis=-1) if ord == "nuc" else max(s, axis=-1) if ord == 2 else min(s, axis=-1))
    if ord in (1, -1, math.inf, -math.inf):
        col = ord in (1, -1)
        sums = sum(abs(x), axis=-2 if col else -1)
        return keep(max(sums, axis=-1) if ord in (1, math.inf) else min(sums, axis=-1))
    raise SvodValueError(f"linalg.matrix_norm: ord must be 'fro', 'nuc', ±1, ±2 or ±inf, got {ord!r}")


__all__ += ["EighResult", "QRResult", "SlogdetResult", "SVDResult", "LstsqResult"]
