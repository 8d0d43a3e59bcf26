"""Search time of movement-heavy graphs with and without the movement rule sets
(issue 30, docs/algebra.md "Movement algebra": the table of search times).

    python3 bench/bench_movement_search.py [--repeats 5] [--graphs chain2,reshape4,...]
        [--sets default|without|with]

Graphs (float32 8 x 8 values, transposes of square matrices):

- `chain2`: 2 rounds of `x = tanh(T(x)) + T(y); y = T(y); x = reshape(reshape(x) *
  reshape(y))` (reshape to 64 values and back), summed over axis 0 at the end (20 nodes);
  `chain4`: 4 rounds of it (36 nodes);
- `reshape4`: 4 rounds of `x = reshape(tanh(reshape(x)) * reshape(y))` (19 nodes);
- `transpose4`: 4 rounds of `x = tanh(T(x)) + T(y)` (15 nodes);
- `random11`, `random27`: bench/bench_search.py's random graphs;
- `w:NAME`: the workload NAME of svod.workloads at its small shapes (`--graphs
  workloads`: all of them).

For each graph and rule-set choice: median planning time (`plan_search` at the default
limits) over `--repeats` runs after a first one (egglog's session warm), its min-max,
the median CPU time of the process (steadier than wall time on a loaded machine),
the programs the exploration priced, the kernels chosen and the movement ops (PERMUTE,
RESHAPE, EXPAND of non-constants) left in the chosen program. `--sets`: `without` runs
`rules.DEFAULT` minus `movement_reshape` and `movement_reduce`, `with` runs it plus
them, `default` runs `rules.DEFAULT` as it is.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import svod
from svod.key import compact

MOVES = ("movement_reshape", "movement_reduce")


def _mats(seed=0):
    rng = np.random.default_rng(seed)
    return (svod.asarray(rng.standard_normal((8, 8)).astype(np.float32)),
            svod.asarray(rng.standard_normal((8, 8)).astype(np.float32)))


def chain(rounds: int):
    x, y = _mats()
    for _ in range(rounds):
        x = svod.tanh(x.T) + y.T
        y = y.T
        x = svod.reshape(svod.reshape(x, (64,)) * svod.reshape(y, (64,)), (8, 8))
    return svod.sum(x, axis=0)


def reshape_rounds(rounds: int):
    x, y = _mats()
    for _ in range(rounds):
        x = svod.reshape(svod.tanh(svod.reshape(x, (64,))) * svod.reshape(y, (64,)), (8, 8))
    return x


def transpose_rounds(rounds: int):
    x, y = _mats()
    for _ in range(rounds):
        x = svod.tanh(x.T) + y.T
    return x


def workload(name: str):
    """The named workload (svod.workloads) at its small shapes, as a graph of tensors."""
    from svod import workloads

    w = workloads.get(name)
    arrays = {k: np.zeros(s, np.float32) for k, s in w.small_shapes.items()}
    with svod.eager_mode(False):
        out = w.build(**w.tensors(arrays))
    return out if isinstance(out, tuple) else (out,)


def graphs():
    from bench.bench_search import random_graph
    from svod import workloads

    out = {"chain2": lambda: chain(2), "chain4": lambda: chain(4), "reshape4": lambda: reshape_rounds(4),
           "transpose4": lambda: transpose_rounds(4), "random11": lambda: random_graph(11),
           "random27": lambda: random_graph(27)}
    out.update({f"w:{n}": (lambda n=n: workload(n)) for n in workloads.names()})
    return out


def movement_left(key) -> int:
    from svod.ir import Ops
    from svod.lower.cover import const_like

    consts = const_like(key)
    return sum(1 for i, n in enumerate(key.nodes)
               if n.op in (Ops.PERMUTE, Ops.RESHAPE, Ops.EXPAND) and i not in consts)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graphs", default="random11,random27,chain2,reshape4,transpose4")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sets", default="default", choices=("default", "without", "with"))
    args = ap.parse_args(argv)
    from svod.planner import import_search

    import_search()
    from search import plan_search, rules

    names = {"default": rules.DEFAULT, "without": tuple(n for n in rules.DEFAULT if n not in MOVES),
             "with": tuple(dict.fromkeys(rules.DEFAULT + MOVES))}[args.sets]
    gs = graphs()
    print(f"sets: {args.sets} ({', '.join(n for n in MOVES if n in names) or 'no movement_reshape/reduce'})")
    print(f"{'graph':>22} {'nodes':>5} {'median ms':>9} {'min-max ms':>13} {'cpu ms':>7} {'priced':>6} {'kernels':>7} "
          f"{'moves':>5} {'stop':>12}")
    todo = [g for g in gs if g.startswith("w:")] if args.graphs == "workloads" else args.graphs.split(",")
    for g in todo:
        t = gs[g]()
        key, _ = compact([u.uop for u in (t if isinstance(t, tuple) else (t,))])
        plan_search(key, rulesets=names)  # warm: egglog's session for these rule sets
        times, cpu, r = [], [], None
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            r = plan_search(key, rulesets=names)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        a = r.report.algebra
        print(f"{g[:22]:>22} {len(key.nodes):>5} {statistics.median(times) * 1e3:>9.1f} "
              f"{min(times) * 1e3:>6.1f}-{max(times) * 1e3:<6.1f} {statistics.median(cpu) * 1e3:>7.1f} "
              f"{a.tried if a else 0:>6} {len(r.plan.kernels):>7} "
              f"{movement_left(r.decoded if r.decoded is not None else key):>5} "
              f"{(a.stop_reason if a else '-')[:12]:>12}")


if __name__ == "__main__":
    main()
