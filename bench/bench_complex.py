"""Benchmark a fused complex elementwise chain against numpy (interleaved medians).

    python3 bench/bench_complex.py [--repeats 9] [--n 4194304] [--threads N]

The chain ``(a*b + conj(a)) / (b + (1+2j)) - a*0.5j`` on complex64 (and complex128):
one svod kernel (complex values as (re, im) register pairs, interleaved loads and
stores) against numpy's five temporaries. Each repeat runs every contender once, with
a fresh output; the figure is the ratio of medians.
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


def chain(a, b):
    return (a * b + svod.conj(a)) / (b + (1 + 2j)) - a * 0.5j


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--threads", type=int, default=runtime.pool_size())
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for d in (np.complex64, np.complex128):
        a, b = ((rng.standard_normal(args.n) + 1j * rng.standard_normal(args.n)).astype(d) for _ in range(2))
        k, arrs = plan_of(chain, a, b)
        f1, _ = runner(k, arrs, 1)
        fT, _ = runner(k, arrs, args.threads)
        c, h = d(1 + 2j), d(0.5j)

        def np_chain(a=a, b=b, c=c, h=h):
            return (a * b + np.conj(a)) / (b + c) - a * h

        np.testing.assert_allclose(f1(), np_chain(), rtol=1e-5 if d == np.complex64 else 1e-12)
        t = interleaved({"svod_1t": f1, f"svod_{args.threads}t": fT, "numpy": np_chain}, args.repeats)
        best = min(t["svod_1t"], t[f"svod_{args.threads}t"])
        print(f"{np.dtype(d).name:>10} n={args.n}: svod 1t {t['svod_1t'] * 1e3:.2f} ms, "
              f"{args.threads}t {t[f'svod_{args.threads}t'] * 1e3:.2f} ms, numpy {t['numpy'] * 1e3:.2f} ms, "
              f"speed-up {t['numpy'] / best:.1f}x (1 thread {t['numpy'] / t['svod_1t']:.1f}x)")


if __name__ == "__main__":
    main()
