"""Benchmark fused complex elementwise chains against numpy (and numexpr, JAX, PyTorch
where installed): medians of interleaved repeats.

    python3 bench/bench_complex.py [--repeats 9] [--n 1000000] [--threads N] [--dtypes complex64,complex128]

Chains (each one svod kernel: complex values as (re, im) register pairs, interleaved
loads and stores), against numpy's temporaries:

- ``arith``: ``(a*b + conj(a)) / (b + (1+2j)) - a*0.5j``
- ``expabs``: ``abs(exp(a*1j) + a*conj(a))`` (complex in, real out)
- ``poly``: a degree-6 complex polynomial in ``a`` by Horner's rule
- ``asin``: ``asin(a*2 + 1) * a`` (svod/codegen/cplx_inv.py)

Each repeat runs every contender once with a fresh output. Reported: the milliseconds of
the compiled kernel on 1 and on N threads (svod's kernel runner, no graph lookup), the
user-level call (``chain(svod.asarray(a), ...).numpy()``, graph cache included), numpy,
and the peers; the speed-up is numpy's median over svod's best.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_kernels import interleaved, plan_of, runner  # noqa: E402

import svod  # noqa: E402
from svod import runtime  # noqa: E402

_POLY = [(0.5 - 0.25j), (1.0 + 0.5j), (-0.75 + 0.0j), (0.2 - 1.0j), (1.5 + 0.5j), (-0.3 + 0.1j), (1.0 + 0.0j)]


def _poly(a, c):
    acc = c(_POLY[0])
    for k in _POLY[1:]:
        acc = acc * a + c(k)
    return acc


CHAINS = {
    "arith": (lambda a, b, c, m: (a * b + m.conj(a)) / (b + c(1 + 2j)) - a * c(0.5j)),
    "expabs": (lambda a, b, c, m: m.abs(m.exp(a * c(1j)) + a * m.conj(a))),
    "poly": (lambda a, b, c, m: _poly(a, c)),
    "asin": (lambda a, b, c, m: m.asin(a * c(2) + c(1)) * a),
}
_NP = type("np_ns", (), {"conj": staticmethod(np.conj), "abs": staticmethod(np.abs),
                         "exp": staticmethod(np.exp), "asin": staticmethod(np.arcsin)})


def _peers(name: str, a, b, d) -> dict:
    """numexpr / JAX / PyTorch versions of chain `name` on (a, b), those installed."""
    out: dict = {}
    fn = CHAINS[name]
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        ns = type("t", (), {"conj": staticmethod(torch.conj), "abs": staticmethod(torch.abs),
                            "exp": staticmethod(torch.exp), "asin": staticmethod(torch.asin)})
        out["torch"] = lambda: fn(ta, tb, lambda v: complex(v), ns).resolve_conj()
    except ImportError:
        pass
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
        ja, jb = jnp.asarray(a), jnp.asarray(b)
        jf = jax.jit(lambda x, y: fn(x, y, lambda v: jnp.asarray(v, d), jnp))
        out["jax"] = lambda: jf(ja, jb).block_until_ready()
    except ImportError:
        pass
    try:
        import numexpr as ne

        exprs = {"arith": "(a*b + conj(a)) / (b + (1+2j)) - a*0.5j", "expabs": "abs(exp(a*1j) + a*conj(a))",
                 "asin": None, "poly": None}
        if exprs[name]:
            out["numexpr"] = lambda: ne.evaluate(exprs[name], local_dict={"a": a, "b": b})
    except ImportError:
        pass
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--threads", type=int, default=runtime.pool_size())
    ap.add_argument("--dtypes", default="complex64,complex128")
    ap.add_argument("--chains", default=",".join(CHAINS))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    tn = f"svod_{args.threads}t"
    for dname in args.dtypes.split(","):
        d = np.dtype(dname).type
        a, b = ((rng.standard_normal(args.n) + 1j * rng.standard_normal(args.n)).astype(d) for _ in range(2))
        for name in args.chains.split(","):
            fn = CHAINS[name]
            k, arrs = plan_of(lambda x, y, fn=fn: fn(x, y, lambda v: v, svod), a, b)
            f1, _ = runner(k, arrs, 1)
            fT, _ = runner(k, arrs, args.threads)

            def np_chain(fn=fn, a=a, b=b, d=d):
                return fn(a, b, lambda v: d(v), _NP)

            def user(fn=fn, a=a, b=b):
                return fn(svod.asarray(a), svod.asarray(b), lambda v: v, svod).numpy()

            want = np_chain()
            tol = 1e-4 if d == np.complex64 else 1e-10
            for got in (f1(), user()):
                np.testing.assert_allclose(got.reshape(want.shape), want, rtol=tol, atol=tol)
            contenders = {"svod_1t": f1, tn: fT, "svod_user": user, "numpy": np_chain, **_peers(name, a, b, d)}
            t = interleaved(contenders, args.repeats)
            best = min(t["svod_1t"], t[tn])
            rest = ", ".join(f"{p} {t[p] * 1e3:.2f}" for p in contenders if p not in ("svod_1t", tn, "svod_user"))
            print(f"{np.dtype(d).name:>10} {name:>6} n={args.n}: svod 1t {t['svod_1t'] * 1e3:.2f} ms, "
                  f"{args.threads}t {t[tn] * 1e3:.2f}, user call {t['svod_user'] * 1e3:.2f}; {rest} ms; "
                  f"numpy/svod {t['numpy'] / best:.1f}x (1 thread {t['numpy'] / t['svod_1t']:.1f}x, "
                  f"user call {t['numpy'] / t['svod_user']:.1f}x)", flush=True)


if __name__ == "__main__":
    main()
