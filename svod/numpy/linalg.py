"""`svod.numpy.linalg`: numpy.linalg's names over `svod.linalg` (LAPACK library steps),
with numpy's signatures and defaults. `eig` and `eigvals` are eager: numpy's result
dtype depends on the data (real when every eigenvalue is, complex otherwise), so they
realize their operand and return numpy's LAPACK results (`eigh`/`eigvalsh` stay lazy).
"""

from __future__ import annotations

import numpy as np

import svod.tensor as T
from svod import elementwise as E
from svod import linalg as LA
from svod import movement as M
from svod import reductions as R
from svod.errors import SvodValueError
from svod.numpy._functions import store_out
from svod.numpy._ndarray import SCALAR_FUNCTIONS, numpy_function
from svod.tensor import asarray

LinAlgError = np.linalg.LinAlgError


def _eigh(a, UPLO="L"):  # noqa: N803 - numpy's name
    a = asarray(a)
    if UPLO == "U":
        a = a.mT
    return LA.eigh(a)


def _eigvalsh(a, UPLO="L"):  # noqa: N803
    a = asarray(a)
    return LA.eigvalsh(a.mT if UPLO == "U" else a)


def _qr(a, mode="reduced"):
    if mode == "r":
        return LA.qr(a, mode="reduced").R
    return LA.qr(a, mode=mode)


def _svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    return LA.svd(a, full_matrices=full_matrices) if compute_uv else LA.svdvals(a)


def _pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    if rtol is not np._NoValue:
        return LA.pinv(a, rtol=rtol)
    return LA.pinv(a, rtol=1e-15 if rcond is None else rcond)


def _matrix_rank(A, tol=None, hermitian=False, *, rtol=None):  # noqa: N803
    A = asarray(A)
    if A.ndim < 2:
        return T.astype(R.any(E.not_equal(A, 0)), "int64")
    if tol is None:
        return LA.matrix_rank(A, rtol=rtol)
    s = LA.svdvals(A)
    return R.sum(T.astype(E.greater(s, tol), "int64"), axis=-1)


def _norm(x, ord=None, axis=None, keepdims=False):  # noqa: A002
    x = asarray(x)
    if axis is None and ord is None:
        r = E.sqrt(R.sum(E.square(T.astype(x, E._float_result(x.dtype), copy=False))))
        return M.reshape(r, (1,) * x.ndim) if keepdims else r
    if axis is None:
        axis = tuple(range(x.ndim))
    if isinstance(axis, (int, np.integer)) or len(axis) == 1:
        return LA.vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)
    if len(axis) == 2:
        moved = M.moveaxis(x, tuple(axis), (-2, -1))
        r = LA.matrix_norm(moved, keepdims=False, ord="fro" if ord is None else ord)
        if keepdims:
            a0, a1 = sorted(a % x.ndim for a in axis)
            r = M.expand_dims(M.expand_dims(r, a0), a1)
        return r
    raise SvodValueError(f"norm: improper number of dimensions to norm ({axis})")


def _cond(x, p=None):
    x = asarray(x)
    if p is None or p in (2, -2):
        s = LA.svdvals(x)
        hi, lo = R.max(s, axis=-1), R.min(s, axis=-1)
        return E.divide(lo, hi) if p == -2 else E.divide(hi, lo)
    return E.multiply(_norm(x, p, axis=(-2, -1)), _norm(LA.inv(x), p, axis=(-2, -1)))


def _multi_dot(arrays, *, out=None):
    arrays = [asarray(a) for a in arrays]
    res = arrays[0]
    for a in arrays[1:]:
        res = R.matmul(res, a)
    return store_out(res, out)


def _lstsq(a, b, rcond=None):
    return tuple(LA.lstsq(a, b, rcond=rcond))


def _eig(a):
    """numpy's eig, eager (the result dtype depends on the eigenvalues)."""
    r = np.linalg.eig(asarray(a).numpy())
    return type(r)(asarray(r.eigenvalues), asarray(r.eigenvectors))


def _eigvals(a):
    return asarray(np.linalg.eigvals(asarray(a).numpy()))


IMPL = {
    "cholesky": lambda a, upper=False: LA.cholesky(a, upper=upper), "det": LA.det, "slogdet": LA.slogdet,
    "eigh": _eigh, "eigvalsh": _eigvalsh, "inv": LA.inv, "pinv": _pinv, "qr": _qr, "svd": _svd,
    "svdvals": LA.svdvals, "solve": LA.solve, "lstsq": _lstsq, "matrix_power": LA.matrix_power,
    "matrix_rank": _matrix_rank, "norm": _norm, "cond": _cond, "multi_dot": _multi_dot,
    "matrix_norm": LA.matrix_norm, "vector_norm": LA.vector_norm, "diagonal": LA.diagonal, "trace": LA.trace,
    "cross": LA.cross, "outer": LA.outer, "vecdot": LA.vecdot, "tensordot": LA.tensordot, "matmul": LA.matmul,
    "matrix_transpose": LA.matrix_transpose, "eig": _eig, "eigvals": _eigvals,
}

for _name, _fn in IMPL.items():
    globals()[_name] = numpy_function(_fn, _name, f"linalg.{_name}" in SCALAR_FUNCTIONS)

__all__ = ["LinAlgError", *IMPL]
