"""Changing sizes (issue 28): softmax(layer_norm(x)) at several row counts in one process,
with automatic dynamic (svod/shapes.py) on and off, each in a fresh process and cache:

    python3 bench/bench_sizes.py [--sizes 1000,1001,1002,1003] [--cols 256] [--steady 30]

Per size: searches, kernels compiled and the ms of its first call; then the median ms of
a steady call at the last size (its plan: the bucket's when dynamic, the exact one when
not) and numpy's; then steady calls at the first size (its exact plan) and at the first
size + 1 (its bucket's plan when dynamic), interleaved. Figures: docs/shapes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(sizes: list[int], cols: int, steady: int) -> dict:
    import numpy as np

    import svod

    rng = np.random.default_rng(0)

    def prog(x):
        return svod.nn.softmax(svod.nn.layer_norm(x, (cols,)))

    def ref(x):
        m = x.mean(-1, keepdims=True)
        y = (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5)
        e = np.exp(y - y.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    rows = []
    for n in sizes:
        x = rng.standard_normal((n, cols)).astype(np.float32)
        s0 = svod.stats()
        t = time.perf_counter()
        out = prog(svod.asarray(x)).numpy()
        ms = (time.perf_counter() - t) * 1e3
        s1 = svod.stats()
        rows.append({"n": n, "searches": s1["searches"] - s0["searches"],
                     "compiled": s1["kernels_compiled"] - s0["kernels_compiled"], "ms": ms,
                     "err": float(np.abs(out - ref(x)).max())})

    def median_ms(f) -> float:
        ts = []
        for _ in range(steady):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
        return sorted(ts)[len(ts) // 2] * 1e3

    x = rng.standard_normal((sizes[-1], cols)).astype(np.float32)
    out = {"rows": rows, "steady_ms": median_ms(lambda: prog(svod.asarray(x)).numpy()),
           "numpy_ms": median_ms(lambda: ref(x))}
    # interleaved A/B on one machine state: the first size (its exact plan) against the
    # first size + 1 (its bucket's plan when dynamic), alternating calls
    xa = rng.standard_normal((sizes[0], cols)).astype(np.float32)
    xb = rng.standard_normal((sizes[0] + 1, cols)).astype(np.float32)
    prog(svod.asarray(xb)).numpy()
    ta, tb = [], []
    for _ in range(steady):
        for x, ts in ((xa, ta), (xb, tb)):
            t = time.perf_counter()
            prog(svod.asarray(x)).numpy()
            ts.append(time.perf_counter() - t)
    out["ab"] = (sorted(ta)[steady // 2] * 1e3, sorted(tb)[steady // 2] * 1e3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,1001,1002,1003")
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--steady", type=int, default=30)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.child:
        sys.path.insert(0, ROOT)
        print(json.dumps(_child(sizes, a.cols, a.steady)))
        return
    for dynamic in ("0", "1"):
        with tempfile.TemporaryDirectory(prefix="svod-sizes-") as tmp:
            env = dict(os.environ, SVOD_DYNAMIC=dynamic, SVOD_CACHE_DIR=tmp, PYTHONPATH=ROOT)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--sizes", a.sizes,
                                  "--cols", str(a.cols), "--steady", str(a.steady)],
                                 env=env, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"SVOD_DYNAMIC={dynamic}: softmax(layer_norm(x)), x ({{n}}, {a.cols}) float32")
        for row in r["rows"]:
            print(f"  n={row['n']:6d}  searches {row['searches']}  compiled {row['compiled']}  "
                  f"first call {row['ms']:8.1f} ms  max err {row['err']:.1e}")
        print(f"  steady call at n={sizes[-1]}: {r['steady_ms']:.3f} ms (numpy {r['numpy_ms']:.3f} ms)")
        a_ms, b_ms = r["ab"]
        print(f"  interleaved steady calls: n={sizes[0]} {a_ms:.3f} ms, n={sizes[0] + 1} {b_ms:.3f} ms "
              f"({b_ms / a_ms:.2f}x)")
        print(f"  total searches {sum(x['searches'] for x in r['rows'])}, "
              f"compiled {sum(x['compiled'] for x in r['rows'])}")


if __name__ == "__main__":
    main()
