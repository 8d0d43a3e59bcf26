"""Loop-heavy numpy programs written the plain numpy way, run unchanged with numpy and with
`svod.numpy` in one run (svod/bench/loops.py has the programs):

    python3 bench/bench_loops.py [--n 32] [--repeats 5] [--only lu,cholesky] [--budget 30] [--eager off] [--cpu]

Per program: numpy's median call, svod's first call and median later call, their ratio
(`--cpu`: CPU time of this process and the fastest later call — steadier on a loaded machine),
and svod's searches / kernels compiled / realizes over all calls (issue 28's check: each
within 2x numpy after the first call, searches + compiles bounded by a small constant);
then how many ops took svod.numpy's fast path, went through the frontend eagerly, or ran
with numpy because their structure had made its bounded number of plans (svod.eager).
Also `svod bench --only loops`.

Where it stands (2026-11-28, `--cpu`, a 2-core machine shared with other jobs, load 9-14;
ratios of svod's fastest steady call to numpy's, two runs; docs/semantics.md, "numpy
scalars" and "Big parts are views, and what a fast op costs"): at n = 200 row_normalise
1.3-1.4x, lu 1.5-1.6x, jacobi_1d 1.5x (issue 28's 2x met), cholesky 3.8-4.2x,
gauss_seidel_2d 4.4-4.6x, forward_solve 5.4-5.7x; at n = 32 2.5x (row_normalise) to 5.4x
(forward_solve). Searches and compiles after the first call: 0 for every program. Element
reads, dot products and sums give numpy scalars, whose arithmetic is numpy's own; what is
left is the per-op cost of row-sized array ops (~10,000 CPU instructions of Python over
numpy's 2,000-8,000).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from svod.bench import loops  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=32, help="problem side (Jacobi: 100 n points)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=None, help="comma-separated program names")
    ap.add_argument("--budget", type=float, default=30.0, help="skip later calls when the first takes longer (s)")
    ap.add_argument("--eager", choices=("auto", "on", "off"), default="auto",
                    help="svod's eager small work (svod.eager_mode): auto = the process policy (SVOD_EAGER)")
    ap.add_argument("--cpu", action="store_true",
                    help="time with time.process_time and take the fastest later call (a loaded machine)")
    a = ap.parse_args()
    only = a.only.split(",") if a.only else None
    eager = {"auto": None, "on": True, "off": False}[a.eager]
    from svod import eager as _eager
    from svod.numpy import _fast

    print(loops.format_rows(loops.run(n=a.n, repeats=a.repeats, only=only, budget_s=a.budget, eager=eager,
                                          cpu=a.cpu)))
    e, f = _eager.stats(), _fast.stats()
    print(f"svod.numpy fast path: {f['fast']} ops ({f['learned']} op/dtype combinations learned); eager ops through "
          f"the frontend: {e['ops']}; written values of a structure past its {_eager.PLANS_PER_STRUCTURE} plans, "
          f"run with numpy: {e['structure_fallbacks']}")


if __name__ == "__main__":
    main()
