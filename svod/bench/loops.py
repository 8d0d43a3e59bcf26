"""Loop-heavy numpy programs, written the plain numpy way, run unchanged on numpy and on
`svod.numpy` (issue 28's benchmark; `bench/bench_loops.py`, `svod bench --only loops`).

Each program takes the array module as its first argument, so the same source runs on
both. What is measured per program and module:

* ``first``: the first call (svod: planning and compiling every new graph shape);
* ``steady``: the median of later calls (svod: plan-cache hits, or new plans when the
  loop's graphs keep changing);
* svod's counters over all calls (`svod.stats()` deltas): searches, kernels compiled,
  realizes.

A program whose first call takes longer than `budget_s` is stopped after that call (the
row says so) rather than holding the benchmark for minutes: loops over slices re-plan per
iteration until svod's symbolic sizes land, and that is what this benchmark is for.

>>> rows = run(n=4, repeats=1, only=["row_normalise"])
>>> rows[0]["program"], rows[0]["ok"], rows[0]["calls"]
('row_normalise', True, 2)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np


def gauss_seidel_2d(xp, a, sweeps: int = 2):
    """In-place Gauss-Seidel sweeps of the 5-point Laplacian (interior points, row order)."""
    n = a.shape[0]
    for _ in range(sweeps):
        for i in range(1, n - 1):
            a[i, 1:-1] = 0.25 * (a[i - 1, 1:-1] + a[i + 1, 1:-1] + a[i, :-2] + a[i, 2:])
    return a


def lu(xp, a):
    """Doolittle LU without pivoting, in place (a diagonally dominant matrix)."""
    n = a.shape[0]
    for k in range(n - 1):
        a[k + 1:, k] = a[k + 1:, k] / a[k, k]
        a[k + 1:, k + 1:] = a[k + 1:, k + 1:] - xp.outer(a[k + 1:, k], a[k, k + 1:])
    return a


def cholesky(xp, a):
    """Right-looking Cholesky, lower triangle, column by column."""
    n = a.shape[0]
    ell = xp.zeros_like(a)
    for j in range(n):
        d = a[j, j] - xp.dot(ell[j, :j], ell[j, :j])
        ell[j, j] = xp.sqrt(d)
        if j + 1 < n:
            ell[j + 1:, j] = (a[j + 1:, j] - ell[j + 1:, :j] @ ell[j, :j]) / ell[j, j]
    return ell


def forward_solve(xp, ell, b):
    """Forward substitution L x = b, one row at a time."""
    n = b.shape[0]
    x = xp.zeros_like(b)
    for i in range(n):
        x[i] = (b[i] - xp.dot(ell[i, :i], x[:i])) / ell[i, i]
    return x


def jacobi_1d(xp, a, steps: int = 100):
    """Jacobi 1-D, iterated: two half steps per step, nothing read inside the loop."""
    b = xp.zeros_like(a)
    for _ in range(steps):
        b[1:-1] = 0.33333 * (a[:-2] + a[1:-1] + a[2:])
        a[1:-1] = 0.33333 * (b[:-2] + b[1:-1] + b[2:])
    return a


def row_normalise(xp, a):
    """Each row scaled to unit norm, one row per iteration."""
    out = xp.empty_like(a)
    for i in range(a.shape[0]):
        r = a[i]
        out[i] = r / xp.sqrt(xp.sum(r * r))
    return out


def _spd(n: int, rng) -> np.ndarray:
    m = rng.standard_normal((n, n))
    return m @ m.T + n * np.eye(n)


def programs(n: int) -> dict[str, tuple[Callable, Callable[[np.random.Generator], tuple]]]:
    """name -> (program, inputs(rng)): float64 inputs of side `n` (Jacobi: 100 n points)."""
    return {
        "gauss_seidel_2d": (gauss_seidel_2d, lambda r: (r.random((n, n)),)),
        "lu": (lu, lambda r: (_spd(n, r),)),
        "cholesky": (cholesky, lambda r: (_spd(n, r),)),
        "forward_solve": (forward_solve, lambda r: (np.linalg.cholesky(_spd(n, r)), r.random(n))),
        "jacobi_1d": (jacobi_1d, lambda r: (r.random(100 * n),)),
        "row_normalise": (row_normalise, lambda r: (r.random((n, 4 * n)),)),
    }


def _counters():
    import svod

    s = svod.stats()
    return {k: s.get(k, 0) for k in ("searches", "kernels_compiled", "realizes")}


def _call(xp, fn, arrays, eager: bool | None = None, timer=time.perf_counter):
    import contextlib

    import svod

    args = [xp.asarray(a.copy()) if xp is not np else a.copy() for a in arrays]
    mode = svod.eager_mode(eager) if eager is not None and xp is not np else contextlib.nullcontext()
    with mode:
        t0 = timer()
        out = fn(xp, *args)
        if xp is not np:
            out = svod.asarray(out).numpy()
        return timer() - t0, out


def run(n: int = 32, repeats: int = 5, only: list[str] | None = None, budget_s: float = 30.0,
        eager: bool | None = None, cpu: bool = False) -> list[dict]:
    """One row per program: numpy and svod first/steady seconds, svod's counters, and
    whether svod's result equals numpy's (rtol 1e-9 in float64). `eager`: run svod with
    eager small work on or off (`svod.eager_mode`; None: the process policy, by default
    on inside svod.numpy). `cpu`: time with `time.process_time` (this process's CPU time,
    which other jobs on a loaded machine disturb less than wall time) and take the
    minimum of the later calls instead of the median (the least disturbed call)."""
    timer = time.process_time if cpu else time.perf_counter
    pick = min if cpu else statistics.median
    import svod.numpy as snp

    rows = []
    for name, (fn, make) in programs(n).items():
        if only and name not in only:
            continue
        arrays = make(np.random.default_rng(0))
        row: dict = {"program": name, "n": n}
        for label, xp in (("numpy", np), ("svod", snp)):
            before = _counters() if xp is snp else None
            first, out = _call(xp, fn, arrays, eager, timer)
            times = []
            if first <= budget_s:
                times = [_call(xp, fn, arrays, eager, timer)[0] for _ in range(repeats)]
            row[f"{label}_first_s"] = first
            row[f"{label}_steady_s"] = pick(times) if times else None
            row[f"{label}_out"] = out
            if before is not None:
                after = _counters()
                row.update({k: after[k] - before[k] for k in after})
                row["calls"] = 1 + len(times)
        want, got = row.pop("numpy_out"), row.pop("svod_out")
        row["ok"] = bool(np.allclose(got, want, rtol=1e-9, atol=1e-12))
        if row["svod_steady_s"] is not None:
            row["ratio"] = row["svod_steady_s"] / row["numpy_steady_s"]
        rows.append(row)
    return rows


def format_rows(rows: list[dict]) -> str:
    head = (f"{'program':16} {'numpy':>9} {'svod first':>11} {'svod steady':>12} {'ratio':>7} "
            f"{'searches':>9} {'compiled':>9} {'realizes':>9}  ok")
    lines = [head]
    for r in rows:
        steady = f"{r['svod_steady_s'] * 1e3:10.2f}ms" if r["svod_steady_s"] is not None else "   (budget)"
        ratio = f"{r['ratio']:6.1f}x" if "ratio" in r else "      -"
        lines.append(f"{r['program']:16} {r['numpy_steady_s'] * 1e3:7.2f}ms {r['svod_first_s'] * 1e3:9.1f}ms "
                     f"{steady} {ratio} {r['searches']:9d} {r['kernels_compiled']:9d} {r['realizes']:9d}  "
                     f"{'yes' if r['ok'] else 'NO'}")
    return "\n".join(lines)


__all__ = ["programs", "run", "format_rows"]
