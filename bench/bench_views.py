"""Folded view leaves against exact slices (svod.viewfold), interleaved in one process:

    python3 bench/bench_views.py [--n 4000000] [--repeats 30]

A stencil ``x[i:i+m] + x[i+1:i+m+1] + x[i+2:i+m+2]`` (float32) over a realized array: offset
i = 0 runs its exact plan (offsets as key data: the first offsets of the structure), i = 1
the folded plan (the slices bound as views at run time, contiguous: no copy). Also a
strided case, the column block ``y[i:i+r, 1:] * 2 + y[i+1:i+r+1, :-1]`` of a 2-D array,
where a folded (non-contiguous) view is copied by the graph program. Prints medians and minima
and their ratios; the two run alternately so that machine load hits both alike.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import svod  # noqa: E402


def _ab(fn, repeats: int) -> tuple[float, float, float, float]:
    fn(0), fn(1), fn(0), fn(1)  # plan, compile, and turn the structure dynamic
    ta, tb = [], []
    for _ in range(repeats):
        for i, ts in ((0, ta), (1, tb)):
            t0 = time.perf_counter()
            fn(i)
            ts.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb), min(ta), min(tb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--repeats", type=int, default=30)
    a = ap.parse_args()
    x = svod.asarray(np.random.default_rng(0).random(a.n + 3).astype(np.float32))
    m = a.n

    def stencil(i):
        return (x[i:i + m] + x[i + 1:i + m + 1] + x[i + 2:i + m + 2]).numpy()

    side = int(a.n ** 0.5)
    y = svod.asarray(np.random.default_rng(1).random((side + 2, side)).astype(np.float32))

    def block(i):
        return (y[i:i + side, 1:] * 2 + y[i + 1:i + side + 1, :-1]).numpy()

    for name, fn in (("stencil 1-D, contiguous views", stencil), ("2-D block, strided views", block)):
        ea, fb, ma, mb = _ab(fn, a.repeats)
        print(f"{name}: median exact {ea * 1e3:.3f} ms, folded {fb * 1e3:.3f} ms ({fb / ea:.3f}x); "
              f"min exact {ma * 1e3:.3f} ms, folded {mb * 1e3:.3f} ms ({mb / ma:.3f}x)")
    print("recompiles:", *svod.viewfold.recompiles(), sep="\n  ")


if __name__ == "__main__":
    main()
