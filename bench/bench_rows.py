"""A bucket's plan at its caller's row count (svod/codegen/rows.py) against the padded
run and the exact plan, interleaved in one process (fresh cache):

    python3 bench/bench_rows.py [--cols 256] [--steady 40]

Programs: row-wise, flat elementwise, a row reduction, a GEMM with bias and ReLU, an MLP
(two GEMMs, GELU). Per program: the first calls of the first size and of the bucket (kernels
compiled: the bucket's include its GEMMs' rows variants), the first call of two new sizes in a
known bucket (the first one builds the
bucket's rows program), then median (and min) ms of steady calls, alternating: the first
size (its exact plan), the first size + 1 in its bucket's plan with the row count read
at run time, and the same with SVOD_ROWS=0 (padded to the bucket: a copy of the input
when it has no room, the padding rows computed). Inputs: `svod.asarray` copies (with
room after the rows once a structure is dynamic) and, "no room", the exact-size result
of another plan. Figures: docs/shapes.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cols", type=int, default=256)
    ap.add_argument("--steady", type=int, default=40)
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--only", default="", help="comma-separated parts of program names")
    a = ap.parse_args()
    os.environ.setdefault("SVOD_CACHE_DIR", tempfile.mkdtemp(prefix="svod-rows-"))
    sys.path.insert(0, ROOT)
    import numpy as np

    import svod

    rng = np.random.default_rng(0)
    cols, n0 = a.cols, a.n
    weights: dict = {}

    def wt(name: str, shape) -> svod.Tensor:  # made on first use (a long-rows run needs none)
        if name not in weights:
            weights[name] = svod.asarray((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32))
        return weights[name]

    w = lambda: wt("w", (cols, cols))  # noqa: E731
    bias = lambda: wt("b", (1, cols)).reshape(cols)  # noqa: E731
    w1 = lambda: wt("w1", (cols, 4 * cols))  # noqa: E731
    w2 = lambda: wt("w2", (4 * cols, cols))  # noqa: E731
    progs = {
        "softmax(layer_norm(x))": lambda x: svod.nn.softmax(svod.nn.layer_norm(x, (cols,))),
        "exp(x) * 2 + 1": lambda x: svod.exp(x) * 2.0 + 1.0,
        "sum(x * x, axis=1)": lambda x: svod.sum(x * x, axis=1),
        "relu(x @ W + b)": lambda x: svod.maximum(x @ w() + bias(), 0.0),
        "gelu(x @ W1) @ W2 + b (MLP)": lambda x: svod.nn.gelu(x @ w1(), approximate="tanh") @ w2() + bias(),
    }
    if a.only:
        progs = {k: v for k, v in progs.items() if any(o in k for o in a.only.split(","))}
    for name, f in progs.items():
        for n in (n0, n0 + 1):
            t = time.perf_counter()
            s0 = svod.stats()
            f(svod.asarray(rng.standard_normal((n, cols)).astype(np.float32))).numpy()
            s1 = svod.stats()
            print(f"{name}: first call at {n} rows {(time.perf_counter() - t) * 1e3:.0f} ms, "
                  f"{s1['kernels_compiled'] - s0['kernels_compiled']} kernel(s) compiled "
                  f"({s1['compile_seconds'] - s0['compile_seconds']:.2f} s)")
        firsts = []
        for n in (n0 + 2, n0 + 3):
            x = rng.standard_normal((n, cols)).astype(np.float32)
            s0 = svod.stats()
            t = time.perf_counter()
            f(svod.asarray(x)).numpy()
            firsts.append((time.perf_counter() - t) * 1e3)
            s1 = svod.stats()
            assert s1["searches"] == s0["searches"] and s1["kernels_compiled"] == s0["kernels_compiled"]
        xa = rng.standard_normal((n0, cols)).astype(np.float32)
        xb = rng.standard_normal((n0 + 1, cols)).astype(np.float32)
        noroom = svod.asarray(xb) * 1.0  # no svod.shapes.with_room room: the result of an exact plan
        noroom.numpy()
        cases = {"exact plan, n": (xa, "1", False), "rows, n + 1": (xb, "1", False),
                 "padded, n + 1": (xb, "0", False), "rows, n + 1, no room": (xb, "1", True),
                 "padded, n + 1, no room": (xb, "0", True)}
        times = {k: [] for k in cases}
        for _ in range(a.steady):
            for k, (x, rows, nr) in cases.items():
                os.environ["SVOD_ROWS"] = rows
                arg = noroom if nr else svod.asarray(x)
                t = time.perf_counter()
                f(arg).numpy()
                times[k].append((time.perf_counter() - t) * 1e3)
        os.environ["SVOD_ROWS"] = "1"
        news = {"1": [], "0": []}  # first calls of new sizes of the bucket, rows on and off alternating
        for n in range(n0 + 4, n0 + 24):
            rows = "1" if n % 2 else "0"
            os.environ["SVOD_ROWS"] = rows
            x = rng.standard_normal((n, cols)).astype(np.float32)
            t = time.perf_counter()
            f(svod.asarray(x)).numpy()
            news[rows].append((time.perf_counter() - t) * 1e3)
        os.environ["SVOD_ROWS"] = "1"
        print(f"{name}, x ({n0}.., {cols}) float32: first call of new sizes in the bucket "
              f"{firsts[0]:.2f}, {firsts[1]:.2f} ms")
        base = sorted(times["exact plan, n"])[a.steady // 2]
        for k, ts in times.items():
            ts = sorted(ts)
            med = ts[a.steady // 2]
            q1, q3 = ts[a.steady // 4], ts[3 * a.steady // 4]
            print(f"  {k:24s} median {med:7.3f} ms  (quartiles {q1:.3f}-{q3:.3f})  min {ts[0]:7.3f} ms  "
                  f"({med / base:.2f}x the exact plan)")
        on, off = (sorted(news[r])[len(news[r]) // 2] for r in ("1", "0"))
        print(f"  first call of a new size (median of 10): rows {on:.2f} ms, padded {off:.2f} ms")


if __name__ == "__main__":
    main()
