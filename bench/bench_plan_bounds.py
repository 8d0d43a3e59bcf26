"""Planning time on the graph shapes of issues 26.4 and 28.2, one case per process.

    python3 bench/bench_plan_bounds.py CASE N      # CASE: outs | leaves | move | chain | jacobi

outs N: realize N outputs `x * i + 1` at once (wide); leaves N: a sum of N leaves; move N:
an N-step transpose/reshape/flip/add chain; chain N: N `y * 1.0001 + 1` steps; jacobi N:
N Jacobi-1-D steps (N = 3,200) realizing nothing inside the loop. Prints the wall time
of the case (build + plan + compile + run), the planner's time (`search_seconds`), the
plans made and the kernels they hold, and whether the result equals numpy's. Run with a
fresh `SVOD_CACHE_DIR` for a cold plan; the same one again shows the stored plan in use.
"""

from __future__ import annotations

import sys
import time
import warnings

import numpy as np

import svod


def run(case: str, n: int) -> tuple[list, list]:
    if case == "outs":
        x = svod.asarray(np.arange(10, dtype=np.float32))
        got = [t.numpy() for t in svod.realize(*[x * i + 1 for i in range(n)])]
        return got, [np.arange(10, dtype=np.float32) * np.float32(i) + np.float32(1) for i in range(n)]
    if case == "chain":
        x = svod.asarray(np.arange(10, dtype=np.float32))
        r = np.arange(10, dtype=np.float32)
        for _ in range(n):
            x, r = x * 1.0001 + 1, r * np.float32(1.0001) + np.float32(1)
        return [x.numpy()], [r]
    if case == "leaves":
        arrs = [np.full(8, i, dtype=np.float32) for i in range(n)]
        s = svod.asarray(arrs[0])
        for a in arrs[1:]:
            s = s + svod.asarray(a)
        return [s.numpy()], [sum(arrs[1:], arrs[0])]
    if case == "move":
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        x, r = svod.asarray(a), a
        for i in range(n):
            k = i % 4
            if k == 0:
                x, r = x.T, r.T
            elif k == 1:
                x, r = x.reshape(x.shape[::-1]), r.reshape(r.shape[::-1])
            elif k == 2:
                x, r = svod.flip(x, axis=0), np.flip(r, axis=0)
            else:
                x, r = x + 1, r + np.float32(1)
        return [x.numpy()], [r]
    if case == "jacobi":
        a = np.linspace(0, 1, 3200).astype(np.float32)
        b = np.zeros(3200, np.float32)
        A, B = svod.asarray(a.copy()), svod.asarray(b.copy())
        for _ in range(n):
            B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
            A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
            b[1:-1] = np.float32(0.33333) * (a[:-2] + a[1:-1] + a[2:])
            a[1:-1] = np.float32(0.33333) * (b[:-2] + b[1:-1] + b[2:])
        return [A.numpy(), B.numpy()], [a, b]
    raise SystemExit(f"bench_plan_bounds: unknown case {case!r} (outs, leaves, move, chain, jacobi)")


def main() -> None:
    case, n = sys.argv[1], int(sys.argv[2])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        got, want = run(case, n)
        t = time.perf_counter() - t0
    ok = all(np.allclose(g, w, rtol=1e-4, atol=1e-5) for g, w in zip(got, want))
    st = svod.stats()
    print(f"{case} {n}: {t:.2f} s, planning {st['search_seconds']:.2f} s in {st['searches']} plan(s) "
          f"({st['kernels_planned']} kernels), disk-cache plans {st['disk_cache_hits']}, "
          f"realizes {st['realizes']}, equal to numpy: {ok}, warnings: {len(caught)}")
    for w in caught:
        print(f"  warning: {w.message}")


if __name__ == "__main__":
    main()
