"""What the algebra rule sets buy: svod with its default algebra (`reassoc`) against
svod with `algebra="exact"` (no reordering rewrites) and numpy, on programs where a
rewrite changes the work (docs/algebra.md).

    python3 bench/bench_rewrites.py [--n 2048] [--repeats 7]

Each case is a `svod.jit` function, called once to plan and compile, then timed; the
table gives medians (ms) and the spread (min-max) of `--repeats` calls. The machine is
whatever runs this: compare the columns, not figures from another machine.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import svod


def cases(n: int):
    rng = np.random.default_rng(0)

    def m(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    a, b, c, v = m(n, n), m(n, n), m(n, n), m(n)
    x, w = m(n // 4, n // 8), m(n // 4, n // 8)
    return {
        "chain (A @ B) @ v": (lambda A, B, v: (A @ B) @ v, (a, b, v)),
        "chain ((A @ B) @ C) @ v": (lambda A, B, C, v: ((A @ B) @ C) @ v, (a, b, c, v)),
        "A @ B + A @ C": (lambda A, B, C: A @ B + A @ C, (a, b, c)),
        "(A @ B.T).T + C": (lambda A, B, C: (A @ B.T).T + C, (a, b, c)),
        "sum(A, 1) - sum(B, 1)": (lambda A, B: svod.sum(A, axis=1) - svod.sum(B, axis=1), (a, b)),
        # contraction recognition (rule set `contract`): n/4 x n/8 operands, as bench_algebra's contract_bmr
        "(x[:, None] * w[None]).sum(-1)": (lambda x, w: (x[:, None, :] * w[None]).sum(-1), (x, w)),
        "(A * v).sum(-1)": (lambda A, v: (A * v).sum(-1), (a, v)),
    }


def _time(f, args, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = f(*args)
        if hasattr(r, "numpy"):
            r.numpy()
        out.append(time.perf_counter() - t)
    return out


def _fmt(ts: list[float]) -> str:
    return f"{statistics.median(ts) * 1e3:8.2f} ({min(ts) * 1e3:.2f}-{max(ts) * 1e3:.2f})"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    print(f"n = {args.n}, float32, median ms (min-max) of {args.repeats} calls")
    print(f"{'case':32} {'svod (reassoc)':>24} {'svod (exact)':>24} {'numpy':>24}")
    for name, (fn, arrs) in cases(args.n).items():
        xs = [svod.asarray(x) for x in arrs]
        row = []
        for mode in ("reassoc", "exact"):
            with svod.search_limits(algebra=mode):
                f = svod.jit(fn)
                _time(f, xs, 1)  # plan + compile
                row.append(_time(f, xs, args.repeats))
        row.append(_time(fn, arrs, args.repeats) if name != "sum(A, 1) - sum(B, 1)" else
                   _time(lambda A, B: A.sum(1) - B.sum(1), arrs, args.repeats))
        print(f"{name:32} " + " ".join(f"{_fmt(r):>24}" for r in row), flush=True)


if __name__ == "__main__":
    main()
