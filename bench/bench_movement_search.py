"""Search time of movement-heavy graphs with and without the movement rule sets
(issue 30, docs/algebra.md "Movement algebra": the table of search times).

    python3 bench/bench_movement_search.py [--repeats 5] [--graphs chain2,reshape4,...]
        [--sets default|without|with|no_reshape] [--ab]

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
them, `no_reshape` runs it minus `movement_reshape`, `default` runs `rules.DEFAULT` as it
is. `--ab`: each graph planned with `rules.DEFAULT` and with `--sets` (default:
`no_reshape`) alternately in this process, `--repeats` times each after a warm-up; prints
the median CPU time of each, their ratio and both saturations' e-node counts.
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
    ap.add_argument("--sets", default="default", choices=("default", "without", "with", "no_reshape"))
    ap.add_argument("--ab", action="store_true", help="rules.DEFAULT against --sets, interleaved")
    args = ap.parse_args(argv)
    from svod.planner import import_search

    import_search()
    from search import plan_search, rules

    names = {"default": rules.DEFAULT, "without": tuple(n for n in rules.DEFAULT if n not in MOVES),
             "with": tuple(dict.fromkeys(rules.DEFAULT + MOVES)),
             "no_reshape": tuple(n for n in rules.DEFAULT if n != "movement_reshape")}[args.sets]
    gs = graphs()
    todo = [g for g in gs if g.startswith("w:")] if args.graphs == "workloads" else args.graphs.split(",")
    if args.ab:
        other = names if args.sets != "default" else tuple(n for n in rules.DEFAULT if n != "movement_reshape")
        _ab(gs, todo, rules.DEFAULT, other, args.repeats)
        return
    print(f"sets: {args.sets} ({', '.join(n for n in MOVES if n in names) or 'no movement_reshape/reduce'})")
    print(f"{'graph':>22} {'nodes':>5} {'median ms':>9} {'min-max ms':>13} {'cpu ms':>7} {'priced':>6} {'kernels':>7} "
          f"{'moves':>5} {'stop':>12}")
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


def _ab(gs, todo, a_sets, b_sets, repeats: int) -> None:
    from search import plan_search

    print(f"A: rules.DEFAULT; B: without {', '.join(sorted(set(a_sets) - set(b_sets))) or '-'}; "
          f"median CPU ms of {repeats} alternating calls each")
    print(f"{'graph':>22} {'nodes':>5} {'A ms':>7} {'B ms':>7} {'A/B':>5} {'A e-nodes':>9} {'B e-nodes':>9} "
          f"{'A stop':>10}")
    ratios = []
    for g in todo:
        t = gs[g]()
        key, _ = compact([u.uop for u in (t if isinstance(t, tuple) else (t,))])
        cpu: dict = {0: [], 1: []}
        rep: dict = {}
        for sets in (a_sets, b_sets):
            plan_search(key, rulesets=sets)  # warm
        for i in range(2 * repeats):
            j = (i + i // 2) % 2  # A B B A A B ...
            c0 = time.process_time()
            rep[j] = plan_search(key, rulesets=(a_sets, b_sets)[j]).report
            cpu[j].append(time.process_time() - c0)
        a, b = statistics.median(cpu[0]), statistics.median(cpu[1])
        ratios.append(a / b)
        print(f"{g[:22]:>22} {len(key.nodes):>5} {a * 1e3:>7.1f} {b * 1e3:>7.1f} {a / b:>5.2f} "
              f"{rep[0].saturation.enodes:>9} {rep[1].saturation.enodes:>9} {rep[0].saturation.stop_reason[:10]:>10}")
    if ratios:
        print(f"A/B over {len(ratios)} graphs: median {statistics.median(ratios):.2f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f}")


if __name__ == "__main__":
    main()
