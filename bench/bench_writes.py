"""The write side of a loop (svod/writes.py): a Python loop writing row i of a realized
array, realizing each step, with region writes on and off, each in a fresh process and
cache:

    python3 bench/bench_writes.py [--rows 64] [--cols 4096] [--steps 50]

Modes: region writes in place (the default: x's own array written when nothing else can
read it), the same copying x per write (`SVOD_WRITES_IN_PLACE=0`), region writes off, automatic
dynamic off. Per mode: the loop's wall time, the median write after the fifth (steady),
writes done in place, searches and kernels compiled, numpy's loop time, and that the result
equals numpy's. `--recurrence` writes ``x[i + 1] = x[i] * 0.5 + y[i + 1]`` (a value reading
the array being written). Figures: docs/shapes.md.
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


def _child(rows: int, cols: int, steps: int, recurrence: bool) -> dict:
    import numpy as np

    import svod

    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, cols))
    y = svod.asarray(a)
    x = svod.asarray(np.zeros((rows, cols)))
    from svod import writes

    s0 = svod.stats()
    p0 = writes.WRITES.in_place
    each = []
    t = time.perf_counter()
    for i in range(steps):
        t1 = time.perf_counter()
        if recurrence:
            x[i + 1] = x[i] * 0.5 + y[i + 1]
        else:
            x[i] = svod.exp(y[i + 1]) * 2.0 + y[i]
        x.numpy()
        each.append((time.perf_counter() - t1) * 1e3)
    ms = (time.perf_counter() - t) * 1e3
    s1 = svod.stats()
    ref = np.zeros((rows, cols))
    t = time.perf_counter()
    for i in range(steps):
        if recurrence:
            ref[i + 1] = ref[i] * 0.5 + a[i + 1]
        else:
            ref[i] = np.exp(a[i + 1]) * 2.0 + a[i]
    np_ms = (time.perf_counter() - t) * 1e3
    late = sorted(each[5:]) or [0.0]
    return {"ms": ms, "numpy_ms": np_ms, "searches": s1["searches"] - s0["searches"],
            "compiled": s1["kernels_compiled"] - s0["kernels_compiled"], "in_place": writes.WRITES.in_place - p0,
            "steady_ms": late[len(late) // 2], "steady_q": (late[len(late) // 4], late[3 * len(late) // 4]),
            "ok": bool(np.allclose(x.numpy(), ref, rtol=1e-12, atol=1e-14))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--recurrence", action="store_true", help="x[i + 1] = x[i] * 0.5 + y[i + 1] (reads x)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each mode, alternating")
    ap.add_argument("--in-place-only", action="store_true", help="only the in-place and copying modes")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        sys.path.insert(0, ROOT)
        print(json.dumps(_child(a.rows, a.cols, a.steps, a.recurrence)))
        return
    modes = (("region writes, in place", {}), ("SVOD_WRITES_IN_PLACE=0", {"SVOD_WRITES_IN_PLACE": "0"}),
             ("SVOD_WRITES=0", {"SVOD_WRITES": "0"}), ("SVOD_DYNAMIC=0", {"SVOD_DYNAMIC": "0"}))
    if a.in_place_only:
        modes = modes[:2]
    for _ in range(a.repeat):
        for label, env in modes:
            with tempfile.TemporaryDirectory(prefix="svod-writes-") as tmp:
                e = dict(os.environ, SVOD_CACHE_DIR=tmp, PYTHONPATH=ROOT, **env)
                cmd = [sys.executable, os.path.abspath(__file__), "--child", "--rows", str(a.rows),
                       "--cols", str(a.cols), "--steps", str(a.steps)] + (["--recurrence"] if a.recurrence else [])
                out = subprocess.run(cmd, env=e, capture_output=True, text=True, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{label:24s} {a.steps} row writes of ({a.rows}, {a.cols}) float64: {r['ms']:9.1f} ms "
                  f"(numpy {r['numpy_ms']:.2f} ms), a write after the 5th: median {r['steady_ms']:.3f} ms "
                  f"(quartiles {r['steady_q'][0]:.3f}-{r['steady_q'][1]:.3f}), in place {r['in_place']}, "
                  f"searches {r['searches']}, compiled {r['compiled']}, equal to numpy: {r['ok']}")


if __name__ == "__main__":
    main()
