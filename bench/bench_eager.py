"""Where eager small work stops paying: svod's lazy realize of a chain of elementwise ops
(plan cached: the steady cost) against the same chain run eagerly (svod.eager: numpy per
op; and `svod.numpy`'s arrays, whose operators call numpy directly: svod/numpy/_fast.py)
and against numpy itself, by size (float32 vectors; svod.eager.DEFAULT_MAX comes
from this measurement, docs/semantics.md "Eager small work"):

    python3 bench/bench_eager.py [--sizes 256,4096,65536] [--chain 1,4] [--repeats 7]

Per size and chain length: median microseconds per chain for numpy, svod eager and svod
lazy (interleaved rounds, so a loaded machine slows all three alike).
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
import svod.numpy as snp  # noqa: E402


def _chain(xp, x, length: int):
    y = x
    for i in range(length):
        y = y * 1.5 + 0.25 if i % 2 == 0 else xp.maximum(y, 0.5) - 1.0
    return y


def _time(fn, inner: int) -> float:
    t = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t) / inner * 1e6


def measure(sizes, chains, repeats: int = 7) -> list[dict]:
    rows = []
    for n in sizes:
        a = np.random.default_rng(0).random(n, dtype=np.float32)
        x = svod.asarray(a)
        xn = snp.asarray(a)
        for length in chains:
            def run_numpy(a=a, length=length):
                return _chain(np, a, length)

            def run_eager(x=x, n=n, length=length):
                with svod.eager_mode(max_elements=max(n, 1)):
                    return _chain(svod, x, length).numpy()

            def run_fast(xn=xn, n=n, length=length):  # svod.numpy: its fast path
                with svod.eager_mode(max_elements=max(n, 1)):
                    return _chain(snp, xn, length).numpy()

            def run_lazy(x=x, length=length):
                with svod.eager_mode(False):
                    return _chain(svod, x, length).numpy()

            np.testing.assert_allclose(run_eager(), run_numpy(), rtol=1e-6)
            np.testing.assert_allclose(run_lazy(), run_numpy(), rtol=1e-6)
            np.testing.assert_allclose(run_fast(), run_numpy(), rtol=1e-6)
            inner = max(3, min(2000, 2_000_000 // max(n * length, 1)))
            t = {"numpy": [], "eager": [], "svod.numpy": [], "lazy": []}
            for _ in range(repeats):  # interleaved
                t["numpy"].append(_time(run_numpy, inner))
                t["eager"].append(_time(run_eager, inner))
                t["svod.numpy"].append(_time(run_fast, inner))
                t["lazy"].append(_time(run_lazy, inner))
            rows.append({"size": n, "chain": length, **{k: statistics.median(v) for k, v in t.items()}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="16,256,1024,4096,16384,65536,262144")
    ap.add_argument("--chain", default="1,4")
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    rows = measure([int(s) for s in a.sizes.split(",")], [int(c) for c in a.chain.split(",")], a.repeats)
    print(f"{'size':>8} {'ops':>4} {'numpy us':>10} {'eager us':>10} {'svod.numpy':>11} {'lazy us':>10} "
          f"{'lazy/eager':>11}")
    for r in rows:
        print(f"{r['size']:8d} {2 * r['chain']:4d} {r['numpy']:10.1f} {r['eager']:10.1f} {r['svod.numpy']:11.1f} "
              f"{r['lazy']:10.1f} {r['lazy'] / r['eager']:10.2f}x")


if __name__ == "__main__":
    main()
