"""numpy's statistics over svod's ops: `cov`, `corrcoef`, `histogram`, `histogram_bin_edges`.

`cov` and `corrcoef` are matmuls and reductions (lazy, fused). `histogram` computes its
bin edges exactly as numpy does (numpy's own edge function on the data's realized minimum
and maximum, so every edge is bit-equal to numpy's), then places the values lazily: each
value's bin by `searchsorted` on the edges, the counts by a `bincount` library step.
"""

from __future__ import annotations

import numpy as np

import svod.tensor as T
from svod import dtype as dt
from svod import elementwise as E
from svod import movement as M
from svod import reductions as R
from svod.creation import library_call
from svod.errors import ShapeError, SvodValueError
from svod.ir import shape_str
from svod.searching import searchsorted
from svod.tensor import Tensor, asarray

__all__ = ["corrcoef", "cov", "histogram", "histogram_bin_edges"]


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    """numpy.cov without weights: variables in rows (`rowvar`), observations in columns."""
    if fweights is not None or aweights is not None:
        raise NotImplementedError("cov: fweights and aweights are not implemented")
    x = asarray(m)
    if x.ndim > 2:
        raise ShapeError(f"cov: m has more than 2 dimensions (shape {shape_str(x.shape)})")
    d = dt.dtype(dtype) if dtype is not None else dt.result_type(x.dtype, dt.default_float)
    x = T.astype(M.reshape(x, (1, -1)) if x.ndim < 2 else x, d, copy=False)
    if not rowvar and x.shape[0] != 1:
        x = x.T
    if y is not None:
        yy = T.astype(M.reshape(asarray(y), (1, -1)) if asarray(y).ndim < 2 else asarray(y), d, copy=False)
        if not rowvar and yy.shape[0] != 1:
            yy = yy.T
        x = M.concat([x, yy], axis=0)
    ddof = (0 if bias else 1) if ddof is None else ddof
    n = x.shape[1]
    xc = E.subtract(x, R.mean(x, axis=1, keepdims=True))
    c = E.divide(R.matmul(xc, xc.T), max(n - ddof, 0))
    return M.squeeze(c) if c.shape == (1, 1) else c


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return E.divide(c, c)
    dg = E.sqrt(M.reshape(R.sum(E.multiply(c, T.asarray(np.eye(c.shape[0], dtype=bool))), axis=1), (-1,)))
    r = E.divide(E.divide(c, M.reshape(dg, (-1, 1))), M.reshape(dg, (1, -1)))
    return E.clip(r, -1, 1)


def histogram_bin_edges(a, bins=10, range=None, weights=None) -> Tensor:  # noqa: A002
    a = asarray(a)
    if isinstance(bins, (str, Tensor, list, tuple, np.ndarray)) and not isinstance(bins, str):
        return asarray(bins)
    if isinstance(bins, str):
        return T._from_numpy(np.histogram_bin_edges(a.numpy(), bins, range), copy=False)
    if range is None:
        if a.size == 0:
            lo_hi = np.array([0, 1], a.dtype.np)
        else:
            lo, hi = T.realize(R.min(a), R.max(a))
            lo_hi = np.array([lo.item(), hi.item()], a.dtype.np)
    else:
        lo_hi = np.array(range, dtype=np.result_type(a.dtype.np, np.float64))
        if not np.all(np.isfinite(lo_hi)):
            raise SvodValueError(f"histogram: range {range} is not finite")
    edges = np.histogram_bin_edges(lo_hi, int(bins), None if range is None else range)
    return T._from_numpy(edges, copy=False)


def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002
    """(counts, edges) as numpy.histogram; values outside the edges are not counted, the
    last bin includes its right edge."""
    a = M.reshape(asarray(a), (-1,))
    edges = histogram_bin_edges(a, bins, range)
    nb = edges.shape[0] - 1
    av = T.astype(a, edges.dtype, copy=False) if a.dtype != edges.dtype else a
    idx = E.subtract(searchsorted(edges, av, side="right"), 1)
    idx = E.where(E.equal(av, edges[-1]), nb - 1, idx)  # the last bin is closed
    ins = [idx]
    wd = dt.int64
    if weights is not None:
        w = M.reshape(asarray(weights), (-1,))
        ins.append(w)
        wd = w.dtype
    counts = library_call("bincount", (nb,), ins, [((nb,), wd)])[0]
    if density:
        widths = E.subtract(edges[1:], edges[:-1])
        total = R.sum(counts)
        counts = E.divide(E.divide(T.astype(counts, edges.dtype if edges.dtype.is_float else dt.default_float),
                                   total), widths)
    return counts, edges
