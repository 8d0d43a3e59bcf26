"""Soak run for svod's memory bounds (issue 26): many realizes over many shapes, then
many jit signatures, printing RSS along the way as one JSON line.

    python3 -m tests.soak [--realizes 20000] [--shapes 1000] [--jit 300]

Run it with the bounds to check in the environment (`SVOD_PLAN_CACHE_ENTRIES`,
`SVOD_PLAN_CACHE_MB`, `SVOD_POOL_BYTES`, `SVOD_JIT_MAX_TRACES`, ...); tests/test_memory.py
runs it in a fresh process (slow tests). The access pattern is a service's: after a first
pass over every shape, `--hot` (85%) of the realizes go to 100 hot shapes, the rest
spread over all shapes."""

from __future__ import annotations

import argparse
import gc
import json
import time

import numpy as np


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def realize(svod, s: int) -> float:
    x = svod.asarray(np.ones((2 + s, 3), np.float32))
    return float((x * 2 + 1).sum(axis=1).numpy()[0])  # the loop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--realizes", type=int, default=20000)
    ap.add_argument("--shapes", type=int, default=1000)
    ap.add_argument("--jit", type=int, default=300)
    ap.add_argument("--hot", type=float, default=0.85, help="share of realizes on the 100 hot shapes")
    ap.add_argument("--cycle", action="store_true", help="realize the shapes in turn, k %% shapes (the issue's "
                                                             "loop: every realize misses an LRU smaller than that)")
    ap.add_argument("--every", type=int, default=1000, help="RSS sample interval (realizes)")
    args = ap.parse_args()
    import svod

    t0 = time.perf_counter()
    start = rss()
    realize(svod, 0)  # imports, the first search (egglog), the first compile
    warm = rss()
    rng = np.random.default_rng(0)
    order = [k % args.shapes for k in range(args.realizes)] if args.cycle else list(range(args.shapes)) + [
        int(rng.integers(0, 100)) if rng.random() < args.hot else int(rng.integers(0, args.shapes))
        for _ in range(max(0, args.realizes - args.shapes))]
    samples = []
    for k, s in enumerate(order[:args.realizes]):
        assert realize(svod, s) == 9.0  # (1 * 2 + 1) * 3
        if (k + 1) % args.every == 0:
            samples.append((k + 1, rss()))

    def fn(x, y):
        return svod.tanh(x * 1.5) + y

    f = svod.jit(fn, retrace_limit=1 << 30)  # retraces on purpose: no warning

    jit_samples = []
    for j in range(args.jit):
        x = svod.asarray(np.ones((3 + j, 2), np.float32))
        for _ in range(3):  # trace, replay, fast replay
            out = f(x, x)
        assert abs(float(out.numpy()[0, 0]) - (np.tanh(1.5) + 1)) < 1e-5
        if (j + 1) % 50 == 0:
            jit_samples.append((j + 1, rss()))
    gc.collect()
    info = svod.cache_info()
    print(json.dumps({
        "start": start, "warm": warm, "samples": samples, "jit_samples": jit_samples, "end": rss(),
        "seconds": time.perf_counter() - t0, "traces": info["jit"]["traces"],
        "max_traces": getattr(f, "max_traces", None),
        "plan_cache": info["plan_cache"], "programs": info["programs"], "pool": info["pool"],
        "stats": {k: svod.stats()[k] for k in ("searches", "kernels_compiled", "kernels_loaded",
                                               "disk_cache_hits", "plan_cache_evictions")},
    }))


if __name__ == "__main__":
    main()
