"""`svod demo`: a model block on built-in data — the plan, the speed-up, the cache.

The block is `softmax(layer_norm(x) * w + b)` over rows: two row-wise reductions and a
chain of elementwise ops that a fusion engine should run as few passes over memory.
The first call plans and compiles; later calls (and later processes, through the
persistent plan cache) only replay.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import TextIO

import numpy as np

import svod


def block(x, w, b):
    """The demo's model block on svod Tensors."""
    y = svod.nn.layer_norm(x, x.shape[-1:], w, b)
    return svod.nn.softmax(y, axis=-1)


def block_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    m = x.mean(axis=-1, keepdims=True)
    d = x - m
    v = (d * d).mean(axis=-1, keepdims=True)
    y = d / np.sqrt(v + np.float32(1e-5)) * w + b
    e = np.exp(y - y.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_demo(rows: int = 2048, cols: int = 1024, repeats: int = 7, out: TextIO = sys.stdout) -> dict:
    """Run the demo, print a report to `out`, and return its figures."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((rows, cols), dtype=np.float32)
    w_np = rng.standard_normal(cols, dtype=np.float32)
    b_np = rng.standard_normal(cols, dtype=np.float32)
    p = lambda *a: print(*a, file=out)

    p(f"svod demo: softmax(layer_norm(x) * w + b), x of shape ({rows}, {cols}) float32\n")
    x, w, b = svod.asarray(x_np), svod.asarray(w_np), svod.asarray(b_np)
    before = svod.stats()
    result = block(x, w, b)
    n_ops = len(result.uop.toposort())
    from svod.engine import plan_for

    t0 = time.perf_counter()
    result.realize()
    first_ms = (time.perf_counter() - t0) * 1e3
    after = svod.stats()
    exe = plan_for([block(x, w, b)])[1]
    n_kernels = len(exe.plan.kernels) if hasattr(exe, "plan") else 0
    p(f"pending graph: {n_ops} ops -> fused into {n_kernels} kernel(s)")
    p(exe.describe())
    hit_disk = after["disk_cache_hits"] > before["disk_cache_hits"]
    planned = after["searches"] > before["searches"]
    p(f"\nfirst call: {first_ms:.1f} ms ("
      + ("plan loaded from the persistent cache" if hit_disk else "planned" if planned else "cached")
      + f", {int(after['kernels_compiled'] - before['kernels_compiled'])} kernels compiled)")

    ref = block_numpy(x_np, w_np, b_np)
    err = float(np.max(np.abs(result.numpy() - ref)))
    p(f"max |svod - numpy| = {err:.2e}")

    def run_svod():
        block(svod.asarray(x_np, copy=False), w, b).realize()

    hits0 = svod.stats()["graph_cache_hits"]
    svod_ms = _median_ms(run_svod, repeats)
    numpy_ms = _median_ms(lambda: block_numpy(x_np, w_np, b_np), repeats)
    hits = svod.stats()["graph_cache_hits"] - hits0
    p(f"\nsteady state (median of {repeats}): svod {svod_ms:.2f} ms, numpy {numpy_ms:.2f} ms "
      f"-> speed-up over numpy {numpy_ms / svod_ms:.2f}x")
    p(f"plan cache: {hits} of {repeats} calls were cache hits (no planning, no compiling)")
    if hit_disk:
        p("cache hit: this process loaded the plan and the compiled kernels from the persistent cache "
          "(no search, no compile)")
    else:
        p("run `svod demo` again: a new process will load the plan and the kernels from the persistent cache "
          "(`svod cache info` shows it)")
    return {"first_ms": first_ms, "svod_ms": svod_ms, "numpy_ms": numpy_ms, "max_err": err,
            "disk_hit": hit_disk, "cache_hits": hits}
