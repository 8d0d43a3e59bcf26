"""A/B of the warm first call between two svod trees, in alternating fresh processes.

    git archive REV | tar -x -C /tmp/before
    python3 bench/ab_warm_first_call.py /tmp/before [--rounds 9]

For `exp(x) * 2 + 1` and `softmax(layer_norm(x) * a + b)` on (1024, 256) float32
(`bench_first_call.CHILD`): each tree gets its own cache directory, filled by one cold
process per program, then `--settle` seconds (the search process persists the searched
plan after a tiered cold process exits) and one warm process each, not counted; then
`--rounds` rounds of one warm process per tree and program, the trees' order
alternating by round. Prints the median and the spread (min-max) of the wall time from
`import svod` done to the result and of the process's CPU seconds over it. On a loaded
machine the CPU figure is the steadier one; note the load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_first_call import CHILD, ROOT, _child  # noqa: E402

PROGS = ("exp", "softmax_ln")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("other", help="the other tree (a directory holding svod/, search/, costmodels/)")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--settle", type=float, default=8.0)
    args = ap.parse_args(argv)
    trees = {"other": os.path.abspath(args.other), "this": ROOT}
    base = dict(os.environ)
    base.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode cached
    with tempfile.TemporaryDirectory() as tmp:
        envs = {t: dict(base, PYTHONPATH=path, SVOD_CACHE_DIR=os.path.join(tmp, t)) for t, path in trees.items()}
        for t in trees:
            for p in PROGS:
                _child(CHILD, [p, "one"], envs[t])
        time.sleep(args.settle)
        for t in trees:
            for p in PROGS:
                _child(CHILD, [p, "one"], envs[t])
        res: dict = {}
        for i in range(args.rounds):
            for t in (list(trees) if i % 2 == 0 else list(trees)[::-1]):
                for p in PROGS:
                    o = _child(CHILD, [p, "one"], envs[t])
                    res.setdefault((p, t), []).append(o)
    for (p, t), outs in sorted(res.items()):
        w = [o["first"] * 1e3 for o in outs]
        c = [o["cpu"]["first"] * 1e3 for o in outs]
        print(f"{p:<11} {t:<5} wall {statistics.median(w):6.1f} ms ({min(w):.1f}-{max(w):.1f})  "
              f"CPU {statistics.median(c):6.1f} ms ({min(c):.1f}-{max(c):.1f})  n={len(outs)}  "
              f"warm records run={sorted({o.get('warm_records', 0) for o in outs})}")


if __name__ == "__main__":
    main()
