"""Replay overhead: W7 (a ten-op elementwise chain on 1,000 float32) per call.

    python3 bench/bench_replay.py [--repeats 31] [--inner 200]

Contenders, each called `inner` times per timing and every contender timed once per
repeat (interleaved), medians over repeats:

* numpy eager: the ten ops as numpy expressions (`svod.workloads` W7 reference);
* svod.jit replay: the traced function called again (one graph-program call);
* svod lazy: build the Tensor graph and realize it, every call (plan cache hit);
* svod graph program: `GraphProgram.run` alone (no Tensor wrapping), for reference;
* numba / jax.jit / torch.compile of the same ten ops when importable (else skipped).

Ratios are against numpy eager. Targets (issue 6): jit ≤ 0.5×, lazy ≤ 2×.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("SVOD_VALIDATE", "0")

import svod  # noqa: E402
from svod import workloads  # noqa: E402

W7 = workloads.get("w7_small_chain")


def _contenders(x_np: np.ndarray) -> dict:
    out = {}
    out["numpy eager"] = lambda: W7.reference(x_np)
    x = svod.asarray(x_np)
    f = svod.jit(W7.build)
    out["svod.jit replay"] = lambda: f(x)
    out["svod lazy (build + realize)"] = lambda: W7.build(x).realize()
    f(x)
    exe = next(iter(f._entries.values())).exe
    gp = exe.graph_program()
    arrays = [x.numpy()]
    out[f"svod graph program alone ({gp.kind})"] = lambda: gp.run(arrays)
    try:
        import numba

        nf = numba.njit(W7.reference)
        nf(x_np)
        out["numba njit"] = lambda: nf(x_np)
    except Exception as e:  # noqa: BLE001 - optional peer
        print(f"numba: skipped ({type(e).__name__})")
    try:
        import jax
        import jax.numpy as jnp

        def jref(v):
            y = jnp.sqrt(jnp.abs(jnp.tanh(v * 1.5 + 0.25) * v - 0.5))
            return jnp.maximum(jnp.exp(-y), 0.1)

        jf = jax.jit(jref)
        xj = jnp.asarray(x_np)
        jf(xj).block_until_ready()
        out["jax.jit"] = lambda: jf(xj).block_until_ready()
    except Exception as e:  # noqa: BLE001
        print(f"jax: skipped ({type(e).__name__})")
    try:
        import torch

        def tref(v):
            y = torch.sqrt(torch.abs(torch.tanh(v * 1.5 + 0.25) * v - 0.5))
            return torch.clamp_min(torch.exp(-y), 0.1)

        tf = torch.compile(tref)
        xt = torch.from_numpy(x_np)
        tf(xt)
        out["torch.compile"] = lambda: tf(xt)
    except Exception as e:  # noqa: BLE001
        print(f"torch.compile: skipped ({type(e).__name__})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=31)
    ap.add_argument("--inner", type=int, default=200)
    args = ap.parse_args()
    x_np = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    got = svod.jit(W7.build)(svod.asarray(x_np)).numpy()
    np.testing.assert_allclose(got, W7.reference(x_np), rtol=W7.rtol, atol=W7.atol)
    cs = _contenders(x_np)
    for fn in cs.values():  # warm up
        for _ in range(args.inner):
            fn()
    times: dict[str, list[float]] = {k: [] for k in cs}
    for _ in range(args.repeats):
        for name, fn in cs.items():
            t0 = time.perf_counter()
            for _ in range(args.inner):
                fn()
            times[name].append((time.perf_counter() - t0) / args.inner)
    base = statistics.median(times["numpy eager"])
    print(f"W7: ten elementwise ops on 1,000 float32; medians of {args.repeats} interleaved repeats "
          f"x {args.inner} calls")
    print(f"{'contender':<38} {'µs/call':>9} {'× numpy':>8}")
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"{name:<38} {m * 1e6:9.2f} {m / base:8.2f}")
    print("targets: svod.jit replay ≤ 0.50× numpy, svod lazy ≤ 2.00× numpy")


if __name__ == "__main__":
    main()
