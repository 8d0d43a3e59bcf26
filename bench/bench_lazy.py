"""The lazy per-call path, stage by stage: W7 (ten elementwise ops on 1,000 float32, built
lazily and realized) and bench_algebra's bcast_sum, against numpy, svod.jit and (with
--jax) jax.jit, in one process.

    python3 bench/bench_lazy.py [--reps 200] [--calls 40] [--jax] [--only w7,bcast_sum] [--ops] [--fresh]

Each contender is timed over `--reps` batches of `--calls` calls, the batches of all
contenders interleaved; printed: the minimum and the median per call (µs). On a shared
machine the minimum is the figure to compare between trees (run the trees alternately);
docs/engine.md ("The lazy per-call path") has the figures and what each stage is.

Stages of W7: `build` (the ten nodes; hash-consing hits, `RECENT` keeps the last graph),
`realize_uops` (the engine's replay hit: signature, plan lookup, the straight-line hit,
result buffer), `hit runner` (the per-signature straight-line hit alone: the kernel's
launch and the result's node, `QuickParts.hit_runner`), `exe.run` (the checked
straight-line runner and the kernel), `realize` (a Tensor of the built node realized: the
tensor layer on top of `realize_uops`), `lazy` (build + realize, as `svod bench` times it),
and with `--fresh` `lazy, new input` (the same over `svod.asarray` of the input each
call: a new leaf, so every node is new — no hash-consing hits — and the replay is by
signature all the same; opt-in and timed last, as its nodes' churn slows whatever
contender runs next by ~1 µs).

`--ops`: first the shares of the build — each op timed alone on its hash-consing hit (its
operands kept alive), a Python floor for comparison (a `__mul__` method that looks a node
up in a dict and returns a new slotted object noted by a weak reference: what any op of a
lazy Python frontend with svod's tensor registry costs), and a realize while the nine
intermediate tensors are alive (each is a live tensor sharing the leaf, visited by the
rebinding) — then the stage table above.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import weakref

import numpy as np

os.environ.setdefault("SVOD_CACHE_DIR", tempfile.mkdtemp(prefix="svod-bench-lazy-"))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import svod  # noqa: E402
from svod import engine, workloads  # noqa: E402
from svod import tensor as T  # noqa: E402
from svod.caches import PLAN_CACHE, REPLAY  # noqa: E402
from svod.ir import signature_of  # noqa: E402


def _w7(jax_on: bool, fresh: bool = False) -> dict:
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
    exe = PLAN_CACHE.use(entry.key_hash)
    arrs = [leaves[j].array for j in entry.perm]
    f = svod.jit(w.build)
    hit = (exe.hits or {}).get(sig)
    pend = [u]
    out = {"lazy": lazy, "build": lambda: w.build(x), "realize_uops": lambda: engine.realize_uops(pend),
           "exe.run": lambda: exe.run(arrs), "realize": lambda: T.realize(T.Tensor._from(u)),
           "jit": lambda: f(x), "numpy": lambda: w.reference(xa)}
    if hit is not None:
        out["hit runner"] = lambda: hit(leaves, pend)
    if fresh:  # (last, and opt-in: its new nodes' churn slows the next contender by ~1 µs)
        out["lazy, new input"] = lambda: T.realize(w.build(T.asarray(xa)))
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
    exe = PLAN_CACHE.use(entry.key_hash)
    arrs = [leaves[j].array for j in entry.perm]
    out = {"lazy": lazy, "build": lambda: bcast_sum(svod, tv), "realize_uops": lambda: engine.realize_uops(us),
           "exe.run": lambda: exe.run(arrs), "numpy": lambda: bcast_sum(np, v)}
    if jax_on:
        import jax
        import jax.numpy as jnp

        jf = jax.jit(lambda v: bcast_sum(jnp, v))
        jv = jnp.asarray(v)
        out["jax.jit"] = lambda: jax.block_until_ready(jf(jv))
    return out


class _Floor:
    """The Python floor of one lazy op (`--ops`): a dunder method, a dict lookup by a
    key tuple, a weak-reference deref, a new slotted object noted in a list."""

    __slots__ = ("uop", "__weakref__")
    _cache: dict = {}
    _noted: list = []

    def __mul__(self, o):
        u = self.uop
        if type(o) is float:
            ref = self._cache.get((0, u, o))
            n = ref() if ref is not None else None
            t = object.__new__(_Floor)
            t.uop = n
            noted = self._noted
            noted.append(weakref.ref(t))
            if len(noted) > 4096:
                noted.clear()
            return t
        return NotImplemented


def _w7_ops() -> dict:
    """W7's ten ops one by one (operands alive: every op a hash-consing hit) and the
    realize's stages."""
    w = workloads.get("w7_small_chain")
    x = T.asarray(w.make_inputs(w.default_shapes, seed=0)["x"])
    for _ in range(50):
        T.realize(w.build(x))
    svod.planner.settle()
    y1 = x * 1.5  # the steps of svod.workloads' _w7
    y2 = y1 + 0.25
    y3 = svod.tanh(y2)
    y4 = y3 * x
    y5 = y4 - 0.5
    y6 = svod.abs(y5)
    y7 = svod.sqrt(y6)
    y8 = -y7
    y9 = svod.exp(y8)
    y10 = svod.maximum(y9, 0.1)
    u = y10.uop
    exe = PLAN_CACHE.use(REPLAY.get(u._sig).key_hash)
    hit = (exe.hits or {}).get(u._sig)
    leaves, pend = u._leaves, [u]
    fl = _Floor()
    fl.uop = u
    _Floor._cache[(0, u, 1.5)] = weakref.ref(u)
    out = {"x * 1.5": lambda: x * 1.5, "y + 0.25": lambda: y1 + 0.25, "tanh(y)": lambda: svod.tanh(y2),
           "y * x": lambda: y3 * x, "y - 0.5": lambda: y4 - 0.5, "abs(y)": lambda: svod.abs(y5),
           "sqrt(y)": lambda: svod.sqrt(y6), "-y": lambda: -y7, "exp(y)": lambda: svod.exp(y8),
           "maximum(y, 0.1)": lambda: svod.maximum(y9, 0.1), "build (all ten)": lambda: w.build(x),
           "Tensor._from": lambda: T.Tensor._from(u), "python floor of an op": lambda: fl * 1.5,
           "realize, 9 holders alive": lambda: T.realize(T.Tensor._from(u))}
    if hit is not None:
        out["hit runner (launch + wrap)"] = lambda: hit(leaves, pend)
    return out


def _bcast_sum_ops() -> dict:
    """bcast_sum's six ops one by one (operands alive) and its realize."""
    from svod.bench.algebra import bcast_sum

    v = svod.asarray(np.random.default_rng(0).standard_normal(4096).astype(np.float32))
    for _ in range(20):
        svod.realize(*bcast_sum(svod, v))
    svod.planner.settle()
    n = v.shape[0]
    b1 = svod.broadcast_to(v, (n, n))
    vv = v[:, None]
    b2 = svod.broadcast_to(vv, (n, n))
    s2 = svod.sum(b2, axis=1)
    return {"broadcast_to(v, (n, n))": lambda: svod.broadcast_to(v, (n, n)), "v[:, None]": lambda: v[:, None],
            "broadcast_to(v[:, None], (n, n))": lambda: svod.broadcast_to(vv, (n, n)),
            "sum(., axis=0)": lambda: svod.sum(b1, axis=0), "sum(., axis=1)": lambda: svod.sum(b2, axis=1),
            "s / n": lambda: s2 / n, "build (all six)": lambda: bcast_sum(svod, v)}


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
    ap.add_argument("--ops", action="store_true", help="the shares: each op and realize stage alone")
    ap.add_argument("--fresh", action="store_true", help="W7 over a new input array each call too")
    a = ap.parse_args(argv)
    print(f"svod {os.path.dirname(svod.__file__)}, python {sys.version.split()[0]}, cpus {os.cpu_count()}, "
          f"load {os.getloadavg()[0]:.1f}")
    for name in a.only.split(","):
        key = name.strip()
        tables = [(key, (lambda j: _w7(j, a.fresh)) if key == "w7" else _bcast_sum)]
        if a.ops:  # the ops alone first (their operands alive), then the stages (none alive)
            ops = {"w7": _w7_ops, "bcast_sum": _bcast_sum_ops}[key]
            tables.insert(0, (f"{key}: each op on its hash-consing hit", lambda _jax, ops=ops: ops()))
        for title, make in tables:
            cont = make(a.jax)
            for fn in cont.values():  # warm every contender (jax compiles on its first call)
                fn()
            res = measure(cont, a.reps, a.calls)
            del cont
            print(title)
            for k, (lo, med) in res.items():
                print(f"  {k:32s} min {lo * 1e6:8.2f} us   median {med * 1e6:8.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
