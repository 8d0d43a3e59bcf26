"""The write side of a loop (svod/writes.py): a Python loop writing row i of a realized
array, realizing each step, with region writes on and off, each in a fresh process and
cache:

    python3 bench/bench_writes.py [--rows 64] [--cols 4096] [--steps 50]

Per mode: the loop's wall time, searches and kernels compiled, numpy's loop time, and
that the result equals numpy's. Figures: docs/shapes.md.
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


def _child(rows: int, cols: int, steps: int) -> dict:
    import numpy as np

    import svod

    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, cols))
    y = svod.asarray(a)
    x = svod.asarray(np.zeros((rows, cols)))
    s0 = svod.stats()
    t = time.perf_counter()
    for i in range(steps):
        x[i] = svod.exp(y[i + 1]) * 2.0 + y[i]
        x.numpy()
    ms = (time.perf_counter() - t) * 1e3
    s1 = svod.stats()
    ref = np.zeros((rows, cols))
    t = time.perf_counter()
    for i in range(steps):
        ref[i] = np.exp(a[i + 1]) * 2.0 + a[i]
    np_ms = (time.perf_counter() - t) * 1e3
    return {"ms": ms, "numpy_ms": np_ms, "searches": s1["searches"] - s0["searches"],
            "compiled": s1["kernels_compiled"] - s0["kernels_compiled"],
            "ok": bool(np.allclose(x.numpy(), ref, rtol=1e-12, atol=1e-14))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, ROOT)
        print(json.dumps(_child(a.rows, a.cols, a.steps)))
        return
    for label, env in (("region writes (default)", {}), ("SVOD_WRITES=0", {"SVOD_WRITES": "0"}),
                       ("SVOD_DYNAMIC=0", {"SVOD_DYNAMIC": "0"})):
        with tempfile.TemporaryDirectory(prefix="svod-writes-") as tmp:
            e = dict(os.environ, SVOD_CACHE_DIR=tmp, PYTHONPATH=ROOT, **env)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--rows", str(a.rows),
                                  "--cols", str(a.cols), "--steps", str(a.steps)],
                                 env=e, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{label:24s} {a.steps} row writes of ({a.rows}, {a.cols}) float64: {r['ms']:9.1f} ms "
              f"(numpy {r['numpy_ms']:.2f} ms), searches {r['searches']}, compiled {r['compiled']}, "
              f"equal to numpy: {r['ok']}")


if __name__ == "__main__":
    main()
