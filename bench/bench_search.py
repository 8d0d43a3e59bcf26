"""Planning time of the fusion search (measured apart from compiling), by graph size.

    python3 bench/bench_search.py [--sizes 10,20,200,1000,5000] [--repeats 3]

Graphs: random DAGs of elementwise ops, broadcasts, reductions with broadcast-back and
matmuls (the shape of real model code), built with svod's frontend. For each size:
median planning time (encode + saturate + serialise + extract), the saturation stop
reason, e-nodes, and the number of kernels chosen (against the greedy planner's).
Targets (issue 7): <= 50 ms for <= 20 ops, <= 2 s for 1,000 ops, <= 15 s for 5,000 ops.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import svod
from svod.config import limits
from svod.key import compact
from svod.plan_greedy import plan_greedy


def random_graph(n_ops: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = svod.asarray(rng.standard_normal((64, 64)).astype(np.float32))
    w = svod.asarray(rng.standard_normal((64, 64)).astype(np.float32) / 8)
    vals = [x]
    ops = 0
    while ops < n_ops:
        a = vals[int(rng.integers(max(0, len(vals) - 8), len(vals)))]
        b = vals[int(rng.integers(max(0, len(vals) - 8), len(vals)))]
        k = rng.integers(0, 10)
        if k < 3:
            v = [svod.tanh, svod.exp, svod.abs][int(k)](a * 0.5)
        elif k < 6:
            v = [svod.add, svod.multiply, svod.maximum][int(k) - 3](a, b)
        elif k == 6:
            v = a - svod.max(a, axis=1, keepdims=True)
        elif k == 7:
            v = a / (svod.sum(svod.abs(a), axis=0, keepdims=True) + 1.0)
        elif k == 8 and ops % 5 == 0:
            v = a @ w
        else:
            v = svod.where(a > b, a, b * 0.25)
        vals.append(v)
        ops = len(compact([v.uop])[0].nodes)
    return vals[-1]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,20,200,1000,5000")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    from svod.planner import import_search as _import_search

    _import_search()
    from search import plan_search

    lim = limits()
    print(f"limits: {lim}")
    print(f"{'nodes':>6} {'median ms':>10} {'planner':>8} {'stop':>16} {'e-nodes':>8} {'kernels':>8} {'greedy':>7}")
    for size in (int(s) for s in args.sizes.split(",")):
        t = random_graph(size)
        key, _ = compact([t.uop])
        times, r = [], None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            r = plan_search(key, limits=lim)
            times.append(time.perf_counter() - t0)
        g = plan_greedy(key)
        sat = r.report.saturation
        print(f"{len(key.nodes):>6} {statistics.median(times) * 1e3:>10.1f} {r.report.planner:>8} "
              f"{(sat.stop_reason if sat else r.report.reason)[:16]:>16} {sat.enodes if sat else 0:>8} "
              f"{len(r.plan.kernels):>8} {len(g.kernels):>7}")


if __name__ == "__main__":
    main()
