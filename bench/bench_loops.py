"""Loop-heavy numpy programs written the plain numpy way, run unchanged with numpy and with
`svod.numpy` in one run (svod/bench/loops.py has the programs):

    python3 bench/bench_loops.py [--n 32] [--repeats 5] [--only lu,cholesky] [--budget 30] [--eager off]

Per program: numpy's median call, svod's first call and median later call, their ratio,
and svod's searches / kernels compiled / realizes over all calls (issue 28's check: each
within 2x numpy after the first call, searches + compiles bounded by a small constant).
Also `svod bench --only loops`.
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
    a = ap.parse_args()
    only = a.only.split(",") if a.only else None
    eager = {"auto": None, "on": True, "off": False}[a.eager]
    print(loops.format_rows(loops.run(n=a.n, repeats=a.repeats, only=only, budget_s=a.budget, eager=eager)))


if __name__ == "__main__":
    main()
