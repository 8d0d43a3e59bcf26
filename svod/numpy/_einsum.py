"""numpy.einsum lowered to svod's ops: per operand, repeated labels become diagonals and
labels used nowhere else are summed out; then operands are contracted pairwise, left to
right, each pair as one (batched) matmul — the existing matmul kernels (BLAS step or the
generated GEMM with its epilogue) — and the result is permuted to the output's labels.
"""

from __future__ import annotations

import math
import string

import svod.tensor as T
from svod import elementwise as E
from svod import linalg as LA
from svod import movement as M
from svod import reductions as R
from svod.errors import ShapeError, SvodTypeError, SvodValueError
from svod.numpy._functions import store_out
from svod.tensor import Tensor, asarray

__all__ = ["einsum"]


def _parse(subscripts: str, ops: list[Tensor]) -> tuple[list[str], str]:
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ops):
        raise SvodValueError(f"einsum: {len(terms)} operand subscripts for {len(ops)} operands")
    used = set(c for c in s if c.isalpha())
    spare = [c for c in string.ascii_letters if c not in used]
    ell_nd = max((o.ndim - (len(t) - 3) for t, o in zip(terms, ops) if "..." in t), default=0)
    ell = "".join(spare[:ell_nd])
    out_terms = []
    for t, o in zip(terms, ops):
        if "..." in t:
            k = o.ndim - (len(t) - 3)
            t = t.replace("...", ell[ell_nd - k:])
        if len(t) != o.ndim or not all(c.isalpha() for c in t):
            raise SvodValueError(f"einsum: subscripts {t!r} do not fit an operand of {o.ndim} dimensions")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {}
        for t in out_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return out_terms, out


def _diagonals(t: Tensor, labels: str) -> tuple[Tensor, str]:
    while True:
        dup = next((c for c in labels if labels.count(c) > 1), None)
        if dup is None:
            return t, labels
        i = labels.index(dup)
        j = labels.index(dup, i + 1)
        t = LA.diagonal(M.moveaxis(t, (i, j), (-2, -1)))
        labels = "".join(c for k, c in enumerate(labels) if k not in (i, j)) + dup


def _sum_out(t: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return t, labels
    return R.sum(t, axis=axes), "".join(c for c in labels if c in keep)


def _contract(a: Tensor, la: str, b: Tensor, lb: str, keep: set[str]) -> tuple[Tensor, str]:
    sizes = {}
    for t, ls in ((a, la), (b, lb)):
        for c, n in zip(ls, t.shape):
            if sizes.get(c, 1) != 1 and n not in (1, sizes[c]):
                raise ShapeError(f"einsum: label {c!r} has sizes {sizes[c]} and {n}")
            sizes[c] = max(sizes.get(c, 1), n)
    batch = [c for c in la if c in lb and c in keep]
    con = [c for c in la if c in lb and c not in keep]
    fa = [c for c in la if c not in lb]
    fb = [c for c in lb if c not in la]
    a = E.broadcast_to(a, tuple(sizes[c] for c in la))
    b = E.broadcast_to(b, tuple(sizes[c] for c in lb))
    pa = M.permute_dims(a, tuple(la.index(c) for c in batch + fa + con))
    pb = M.permute_dims(b, tuple(lb.index(c) for c in batch + con + fb))
    nb, nfa, nfb, nk = (math.prod(sizes[c] for c in g) for g in (batch, fa, fb, con))
    out = R.matmul(M.reshape(pa, (nb, nfa, nk)), M.reshape(pb, (nb, nk, nfb)))
    labels = "".join(batch + fa + fb)
    return M.reshape(out, tuple(sizes[c] for c in labels)), labels


def einsum(subscripts: str, *operands, out=None, optimize=False, dtype=None, casting="safe", order="K"):
    """numpy.einsum for explicit and implicit subscripts, ellipses, repeated labels."""
    if not isinstance(subscripts, str):
        raise SvodTypeError("einsum: only the subscripts-string form is implemented")
    ops = [asarray(o) for o in operands]
    if dtype is not None:
        ops = [T.astype(o, dtype) for o in ops]
    terms, out_labels = _parse(subscripts, ops)
    cur, labels = None, ""
    for i, (t, ls) in enumerate(zip(ops, terms)):
        t, ls = _diagonals(t, ls)
        later = set(out_labels) | set("".join(terms[i + 1:])) | set(labels)
        t, ls = _sum_out(t, ls, later)
        if cur is None:
            cur, labels = t, ls
            continue
        keep = set(out_labels) | set("".join(terms[i + 1:]))
        cur, labels = _contract(cur, labels, t, ls, keep)
    cur, labels = _sum_out(cur, labels, set(out_labels))
    if sorted(labels) != sorted(out_labels):
        raise SvodValueError(f"einsum: output subscripts {out_labels!r} name labels the operands do not have")
    res = M.permute_dims(cur, tuple(labels.index(c) for c in out_labels)) if labels else cur
    return store_out(res, out)
