"""Library steps: numpy's sorting and LAPACK (and later pocketfft) as steps inside a plan.

A function here is a node of the graph like any other op — `Ops.LIBRARY` with arg
``(function, params, result index, shape)``, one node per result of the call — so it is
lazy, keyed, cached and replayed with the rest; the planner makes each call one kernel
of kind "library" (`Kernel.library`, the nodes of one call merged into one multi-output
step) whose operands are read through views of materialised values, and whose results
feed fused kernels like any buffer. Nothing is re-implemented: each entry calls numpy
(LAPACK through `numpy.linalg`, stable sorts through `numpy.sort`), so the results are
numpy's bit for bit.

`svod.creation.library_call` builds the nodes (the frontends in sorting.py, searching.py,
gather.py and linalg.py; it is in the tensor layer, this module below it); `execute` runs a call on numpy arrays
(the compiled graph's library segment and the reference interpreter both use it); `work`
estimates its flops for the cost models.

Contract of an entry: a pure function of its operands and parameters; results in the
dtypes and shapes the frontend declared (they are cast and checked when stored). A
failure the data causes (a singular matrix for `inv`) raises numpy's error when the plan
runs, with a note naming the svod function.

>>> import svod
>>> svod.sort(svod.asarray([3.0, float("nan"), 1.0, 2.0])).tolist()
[1.0, 2.0, 3.0, nan]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ENTRIES", "execute", "store", "work"]


@dataclass(frozen=True)
class Entry:
    run: Callable[..., tuple]  # (params, *operands) -> results
    work: Callable[..., float]  # (params, operand shapes) -> flops, for pricing
    what: str  # the svod function, for error notes


def _n(shapes) -> int:
    return math.prod(shapes[0]) if shapes else 0


def _nlogn(p, shapes) -> float:
    n = _n(shapes)
    return 4.0 * n * math.log2(max(n, 2))


def _linear(p, shapes) -> float:
    return float(sum(math.prod(s) for s in shapes))


def _cubic(p, shapes) -> float:
    s = shapes[0]
    if len(s) < 2:
        return float(_n(shapes))
    m, n = s[-2], s[-1]
    return 4.0 * math.prod(s[:-2]) * m * n * min(m, n)


# ----------------------------------------------------------------------------- sorting


def _argsort(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable argsort; descending keeps equal elements in their order (NaNs first, as
    the ascending order's NaNs-last reversed)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    rev = np.flip(np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable"), axis=axis)
    return (n - 1) - rev


def _sort(p, x):
    axis, descending = p
    if not descending:
        return (np.sort(x, axis=axis, kind="stable"),)
    return (np.take_along_axis(x, _argsort(x, axis, True), axis=axis),)


def _argsort_entry(p, x):
    axis, descending = p
    return (_argsort(x, axis, descending).astype(np.int64, copy=False),)


def _searchsorted(p, x1, x2, *sorter):
    (side,) = p
    return (np.searchsorted(x1, x2, side=side, sorter=sorter[0] if sorter else None).astype(np.int64),)


def _take(p, x, idx):
    (axis,) = p
    return (np.take(x, idx, axis=axis, mode="raise"),)


# ----------------------------------------------------------------------------- linalg (LAPACK)


def _solve(p, a, b):
    return (np.linalg.solve(a, b),)


def _lstsq(p, a, b):
    (rcond,) = p
    x, _res, rank, s = np.linalg.lstsq(a, b, rcond=rcond)
    return x, np.asarray(rank, np.int32), s


def _bincount(p, idx, *weights):
    """Counts (or weight sums) of bins 0..n-1; indices outside are dropped."""
    (n,) = p
    idx = np.where((idx < 0) | (idx >= n), n, idx)
    out = np.bincount(idx.reshape(-1), weights=weights[0].reshape(-1) if weights else None, minlength=n + 1)[:n]
    return (out.astype(weights[0].dtype if weights else np.int64, copy=False),)


# ----------------------------------------------------------------------------- fft (pocketfft)


def _fft(p, x):
    """numpy's pocketfft: p = (transform name, n or s, axis or axes, norm)."""
    name, n, axes, norm = p
    f = getattr(np.fft, name)
    return (f(x, n, axes, norm=norm),)


def _fft_work(p, shapes) -> float:
    n = max(_n(shapes), 1)
    return 5.0 * n * math.log2(max(n, 2))


ENTRIES: dict[str, Entry] = {
    "fft": Entry(_fft, _fft_work, "fft"),
    "sort": Entry(_sort, _nlogn, "sort"),
    "argsort": Entry(_argsort_entry, _nlogn, "argsort"),
    "searchsorted": Entry(_searchsorted, _nlogn, "searchsorted"),
    "take": Entry(_take, _linear, "take"),
    "bincount": Entry(_bincount, _linear, "numpy.histogram"),
    "cholesky": Entry(lambda p, a: (np.linalg.cholesky(a, upper=p[0]),), _cubic, "linalg.cholesky"),
    "det": Entry(lambda p, a: (np.asarray(np.linalg.det(a)),), _cubic, "linalg.det"),
    "eigh": Entry(lambda p, a: tuple(np.linalg.eigh(a)), _cubic, "linalg.eigh"),
    "eigvalsh": Entry(lambda p, a: (np.linalg.eigvalsh(a),), _cubic, "linalg.eigvalsh"),
    "inv": Entry(lambda p, a: (np.linalg.inv(a),), _cubic, "linalg.inv"),
    "pinv": Entry(lambda p, a, *r: (np.linalg.pinv(a, rcond=r[0] if r else p[0]),), _cubic, "linalg.pinv"),
    "qr": Entry(lambda p, a: tuple(np.linalg.qr(a, mode=p[0])), _cubic, "linalg.qr"),
    "slogdet": Entry(lambda p, a: tuple(np.asarray(v) for v in np.linalg.slogdet(a)), _cubic, "linalg.slogdet"),
    "solve": Entry(_solve, _cubic, "linalg.solve"),
    "svd": Entry(lambda p, a: tuple(np.linalg.svd(a, full_matrices=p[0])), _cubic, "linalg.svd"),
    "svdvals": Entry(lambda p, a: (np.linalg.svd(a, compute_uv=False),), _cubic, "linalg.svdvals"),
    "lstsq": Entry(_lstsq, _cubic, "linalg.lstsq"),
}


def execute(fn: str, params: tuple, operands: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Run library function `fn` on numpy operands; numpy's errors carry a note naming
    the svod function."""
    entry = ENTRIES.get(fn)
    if entry is None:
        raise KeyError(f"svod.library: no library function {fn!r} (known: {', '.join(sorted(ENTRIES))})")
    try:
        with np.errstate(all="ignore"):
            return tuple(entry.run(params, *operands))
    except Exception as e:
        e.add_note(f"raised by numpy in svod.{entry.what} when the plan ran (operand shapes "
                   f"{[tuple(o.shape) for o in operands]})")
        raise


def work(fn: str, params: tuple, shapes: Sequence[tuple[int, ...]]) -> float:
    """Estimated flops of a call (the cost models' compute term)."""
    entry = ENTRIES.get(fn)
    return entry.work(params, list(shapes)) if entry is not None else _linear(params, list(shapes))


def store(kernel, results: Sequence[np.ndarray], buffers) -> None:
    """Write a library kernel's results into its output slots (flat buffers, allocated
    by the caller), checking each result's size against the declared shape."""
    for o in kernel.outputs:
        r = np.asarray(results[kernel.nodes[o.node].arg])
        size = math.prod(o.shape)
        if r.size != size:
            raise AssertionError(f"library step {kernel.library.fn}: result of shape {r.shape} for an output "
                                 f"of shape {o.shape}")
        dst = buffers[o.slot]
        np.copyto(dst[:size], r.reshape(-1), casting="unsafe")
