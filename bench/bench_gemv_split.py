"""Transposed matrix-vector products (y = Aᵀ x of a row-major A): svod's row split against the
output bands, per core and on the pool (docs/codegen.md, "Matrix-vector products: output bands
or bands of rows").

    python3 bench/bench_gemv_split.py [--repeats 9] [--threads 1] [--pattern | --short]

Default: `Aᵀ @ x` (A 5000 x 4000) and `A @ x` (A 4000 x 5000) through `svod.codegen.blas.matmul_into`
on `--threads` threads -- the row split, the output bands (the row split switched off) and
numpy with OpenBLAS set to the same thread count -- interleaved, wall and CPU time (min / median).
On one thread, CPU time is the per-core cost and robust to other load; on more, the process's
CPU time includes svod's workers (and their spinning).

--short: `A @ x` with few rows (8 x 2,000,000 and 64 x 250,000): the column split against
the output bands (SHORT_OUTPUT = 0: one band per 16 rows, so 8 rows run on one thread) and numpy.

--pattern: one thread reads the whole matrix the way one thread of an nt-thread split does
(all nt column bands in turn, against all nt row bands in turn; the same bytes), for nt = 1 ... 32:
the cost per byte of the short strided runs of the column split, measurable on a small machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from svod.codegen import blas  # noqa: E402

R, C = 5000, 4000


@contextlib.contextmanager
def openblas_threads(n: int):
    lib = blas.blas()
    old = lib.get_threads()
    lib.set_threads(n)
    try:
        yield
    finally:
        lib.set_threads(old)


@contextlib.contextmanager
def row_split(on: bool):
    old = blas.MIN_BAND_ROWS
    blas.MIN_BAND_ROWS = old if on else 1 << 62
    blas._plan.cache_clear()
    try:
        yield
    finally:
        blas.MIN_BAND_ROWS = old
        blas._plan.cache_clear()


def stats(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"{xs[0] * 1e3:6.2f} / {xs[len(xs) // 2] * 1e3:6.2f}"


def timed(fns: dict, repeats: int) -> dict:
    """name -> (wall times, CPU times), interleaved repeats after one warm-up each."""
    for f in fns.values():
        f()
    out = {k: ([], []) for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            time.sleep(0.02)
            c0, t0 = time.process_time(), time.perf_counter()
            f()
            out[k][0].append(time.perf_counter() - t0)
            out[k][1].append(time.process_time() - c0)
    return out


def splits(threads: int, repeats: int) -> None:
    print(f"| case ({threads} thread(s)) | contender | wall min / median ms | CPU min / median ms | split |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        A = rng.standard_normal((R, C)).astype(dt)
        B = rng.standard_normal((C, R)).astype(dt)
        x = rng.standard_normal((R, 1)).astype(dt)
        y = np.empty((C, 1), dt)

        def run(a, on, x=x, y=y):
            def f():
                with row_split(on):
                    blas.matmul_into(a, x, y, threads=threads)
            return f

        def np_run(a, x=x):
            def f():
                with openblas_threads(threads):
                    np.matmul(a, x)
            return f

        with row_split(True):
            s_on = blas.gemv_split(A.T, x, y, threads)
        with row_split(False):
            s_off = blas.gemv_split(A.T, x, y, threads)
        s_ax = blas.gemv_split(B, x, y, threads)
        fns = {"Aᵀx row split": run(A.T, True), "Aᵀx output bands": run(A.T, False), "Aᵀx numpy": np_run(A.T),
               "Ax svod": run(B, True), "Ax numpy": np_run(B)}
        words = {"Aᵀx row split": s_on, "Aᵀx output bands": s_off, "Ax svod": s_ax}
        for k, (wall, cpu) in timed(fns, repeats).items():
            print(f"| {np.dtype(dt).name} | {k} | {stats(wall)} | {stats(cpu)} | {words.get(k, 'OpenBLAS')} |")


@contextlib.contextmanager
def column_split(on: bool):
    old = blas.SHORT_OUTPUT
    blas.SHORT_OUTPUT = old if on else 0
    blas._plan.cache_clear()
    try:
        yield
    finally:
        blas.SHORT_OUTPUT = old
        blas._plan.cache_clear()


def short(threads: int, repeats: int) -> None:
    print(f"| case ({threads} thread(s)) | contender | wall min / median ms | CPU min / median ms | split |")
    print("|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for dt in (np.float32, np.float64):
        for m, k in ((8, 2_000_000), (64, 250_000)):
            A = rng.standard_normal((m, k)).astype(dt)
            x = rng.standard_normal((k, 1)).astype(dt)
            y = np.empty((m, 1), dt)

            def run(on, A=A, x=x, y=y):
                def f():
                    with column_split(on):
                        blas.matmul_into(A, x, y, threads=threads)
                return f

            def np_run(A=A, x=x):
                with openblas_threads(threads):
                    np.matmul(A, x)

            words = {}
            for on, name in ((True, "column split"), (False, "output bands")):
                with column_split(on):
                    words[name] = blas.gemv_split(A, x, y, threads)
            fns = {"column split": run(True), "output bands": run(False), "numpy": np_run}
            for name, (wall, cpu) in timed(fns, repeats).items():
                print(f"| {np.dtype(dt).name} {m} x {k} | {name} | {stats(wall)} | {stats(cpu)} | "
                      f"{words.get(name, 'OpenBLAS')} |")


def pattern(repeats: int) -> None:
    print("| dtype | nt simulated | run per row | column bands CPU min / median ms | row bands CPU min / median ms |"
          " columns / rows (medians) |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    with row_split(False):  # every call below is one gemv on the calling thread
        for dt in (np.float32, np.float64):
            A = rng.standard_normal((R, C)).astype(dt)
            x = rng.standard_normal((R, 1)).astype(dt)
            y = np.empty((C, 1), dt)
            for nt in (1, 2, 4, 8, 16, 32):
                cviews = [(A[:, i * C // nt:(i + 1) * C // nt].T, y[i * C // nt:(i + 1) * C // nt]) for i in range(nt)]
                rviews = [(A[i * R // nt:(i + 1) * R // nt].T, x[i * R // nt:(i + 1) * R // nt], np.empty((C, 1), dt))
                          for i in range(nt)]

                def cols(cviews=cviews, x=x):
                    for a, o in cviews:
                        blas.matmul_into(a, x, o, threads=1)

                def rows(rviews=rviews):
                    for a, xx, o in rviews:
                        blas.matmul_into(a, xx, o, threads=1)

                t = timed({"cols": cols, "rows": rows}, repeats)
                c, r = sorted(t["cols"][1]), sorted(t["rows"][1])
                print(f"| {np.dtype(dt).name} | {nt} | {C // nt * A.itemsize} B | {stats(c)} | {stats(r)} | "
                      f"{c[len(c) // 2] / r[len(r) // 2]:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--pattern", action="store_true")
    ap.add_argument("--short", action="store_true")
    opts = ap.parse_args()
    if not blas.available():
        raise SystemExit("no OpenBLAS binding (svod.codegen.blas.available() is False)")
    if opts.pattern:
        pattern(opts.repeats)
    elif opts.short:
        short(opts.threads, opts.repeats)
    else:
        splits(opts.threads, opts.repeats)


if __name__ == "__main__":
    main()
