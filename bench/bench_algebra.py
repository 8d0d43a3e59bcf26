"""Programs where algebra matters (issue 30), each written once and run as written by
numpy, svod and the installed peers (torch eager, torch.compile, jax.jit) in one run
(svod/bench/algebra.py has the programs and the method):

    python3 bench/bench_algebra.py [--sizes default|quick|tiny] [--repeats 5]
                                   [--only chain_vec,einsum] [--peers "torch eager,torch.compile"] [--json out.json]

Per program: each contender's median time of interleaved repeats (min-max beside it), its
ratio to svod's (> 1: svod is faster), svod's first call and kernels per call, and the
check of svod's result against numpy's. Also `svod bench --only algebra` (default or
--quick sizes, every available peer).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from svod.bench import algebra  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="default", choices=sorted(algebra.SIZES))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--only", default=None, help=f"comma-separated programs of: {', '.join(algebra.PROGRAMS)}")
    ap.add_argument("--peers", default=None, help="comma-separated peers (default: every installed one; '' none): "
                                                  + ", ".join(algebra.available_peers()))
    ap.add_argument("--json", default=None, help="also write the rows as JSON here")
    a = ap.parse_args()
    only = a.only.split(",") if a.only else None
    peers = None if a.peers is None else tuple(p.strip() for p in a.peers.split(",") if p.strip())
    rows = algebra.run(sizes=a.sizes, repeats=a.repeats, only=only, peers=peers)
    print(algebra.format_rows(rows))
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
