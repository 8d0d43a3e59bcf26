"""The lazy per-call path, stage by stage: W7 (ten elementwise ops on 1,000 float32, built
lazily and realized) and bench_algebra's bcast_sum, against numpy, svod.jit and (with
--jax) jax.jit, in one process.

    python3 bench/bench_lazy.py [--reps 200] [--calls 40] [--jax] [--only w7,bcast_sum]

Each contender is timed over `--reps` batches of `--calls` calls, the batches of all
contenders interleaved; printed: the minimum and the median per call (µs). On a shared
machine the minimum is the figure to compare between trees (run the trees alternately);
docs/engine.md ("The lazy per-call path") has the figures and what each stage is.

Stages of W7: `build` (the ten nodes; hash-consing hits, `RECENT` keeps the last graph),
`realize_uops` (the engine's replay hit: signature, plan lookup, runner, result buffer),
`exe.run` (the straight-line runner and the kernel), `realize` (a Tensor of the built
node realized: the tensor layer on top of `realize_uops`), `lazy` (build + realize, as
`svod bench` times it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("SVOD_CACHE_DIR", tempfile.mkdtemp(prefix="svod-bench-lazy-"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import svod  # noqa: E402
from svod import engine, workloads  # noqa: E402
from svod import tensor as T  # noqa: E402
from svod.caches import PLAN_CACHE, REPLAY  # noqa: E402
from svod.ir import signature_of  # noqa: E402


def _w7(jax_on: bool) -> dict:
    w = workloads.get("w7_small_chain")
    arrays = w.make_inputs(w.default_shapes, seed=0)
    x, xa = T.asarray(arrays["x"]), arrays["x"]

    def lazy():
        T.realize(w.build(x))

    for _ in range(50):
        lazy()
    svod.planner.settle()
    u = w.build(x).uop
    sig, leaves = signature_of([u])
    entry = REPLAY.get(sig)
    exe = PLAN_CACHE.use(entry[0])
    arrs = [leaves[j].array for j in entry[1]]
    f = svod.jit(w.build)
    out = {"lazy": lazy, "build": lambda: w.build(x), "realize_uops": lambda: engine.realize_uops([u]),
           "exe.run": lambda: exe.run(arrs), "realize": lambda: T.realize(T.Tensor._from(u)),
           "jit": lambda: f(x), "numpy": lambda: w.reference(xa)}
    if jax_on:
        import jax
        import jax.numpy as jnp

        jf = jax.jit(lambda x: jnp.maximum(jnp.exp(-jnp.sqrt(jnp.abs(jnp.tanh(x * 1.5 + 0.25) * x - 0.5))), 0.1))
        jx = jnp.asarray(xa)
        out["jax.jit"] = lambda: jax.block_until_ready(jf(jx))
    return out


def _bcast_sum(jax_on: bool) -> dict:
    from svod.bench.algebra import bcast_sum

    v = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    tv = svod.asarray(v)

    def lazy():
        svod.realize(*bcast_sum(svod, tv))

    for _ in range(20):
        lazy()
    svod.planner.settle()
    us = [t.uop for t in bcast_sum(svod, tv)]
    sig, leaves = signature_of(us)
    entry = REPLAY.get(sig)
    exe = PLAN_CACHE.use(entry[0])
    arrs = [leaves[j].array for j in entry[1]]
    out = {"lazy": lazy, "build": lambda: bcast_sum(svod, tv), "realize_uops": lambda: engine.realize_uops(us),
           "exe.run": lambda: exe.run(arrs), "numpy": lambda: bcast_sum(np, v)}
    if jax_on:
        import jax
        import jax.numpy as jnp

        jf = jax.jit(lambda v: bcast_sum(jnp, v))
        jv = jnp.asarray(v)
        out["jax.jit"] = lambda: jax.block_until_ready(jf(jv))
    return out


def measure(contenders: dict, reps: int, calls: int) -> dict[str, tuple[float, float]]:
    """name -> (min, median) seconds per call over `reps` interleaved batches of `calls`."""
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(reps):
        for k, fn in contenders.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            times[k].append((time.perf_counter() - t0) / calls)
    return {k: (min(v), statistics.median(v)) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--jax", action="store_true", help="time jax.jit too (jax importable)")
    ap.add_argument("--only", default="w7,bcast_sum")
    a = ap.parse_args(argv)
    print(f"svod {os.path.dirname(svod.__file__)}, python {sys.version.split()[0]}, cpus {os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.1f}")
    for name in a.only.split(","):
        cont = {"w7": _w7, "bcast_sum": _bcast_sum}[name.strip()](a.jax)
        for fn in cont.values():  # warm every contender (jax compiles on its first call)
            fn()
        res = measure(cont, a.reps, a.calls)
        print(name)
        for k, (lo, med) in res.items():
            print(f"  {k:14s} min {lo * 1e6:8.2f} us   median {med * 1e6:8.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
