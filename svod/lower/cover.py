"""Kernel boundaries before and around the choice: which values of a GraphKey are
materialised whatever the planner chooses, which cost nothing inline, which are up for
choice, and the greedy planner's pick. The one copy the search (`search/`), the oracle
(`search/oracle.py`), the greedy planner (`svod/plan_greedy.py`) and why-not-fused
(`svod/boundaries.py`) read.

Invariants:

- `initial_materialized(key)` (inputs, outputs, explicit `contiguous()`) is a subset of
  every plan's materialised set: `svod.lower.lower` adds it to any choice.
- `const_like(key)` (constants and RESHAPE/EXPAND chains of them) is never materialised
  by a choice: a kernel writing a broadcast constant is never cheaper than computing
  the constant where it is read.
- `candidates(key)` = every node that is neither forced nor constant-like, in graph
  order; a planner's choice is a subset of it.
- `subsets(free)` yields every subset of `free` by size, then in
  `itertools.combinations` order: the empty choice first, deterministic.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from svod.ir import MOVEMENT, Ops
from svod.key import GraphKey


def const_like(key: GraphKey) -> set[int]:
    """Constants and reshapes/broadcasts of them: free to compute wherever they are read."""
    out: set[int] = set()
    for i, n in enumerate(key.nodes):
        if n.op is Ops.CONST or (n.op in (Ops.RESHAPE, Ops.EXPAND) and n.src[0] in out):
            out.add(i)
    return out


def initial_materialized(key: GraphKey) -> set[int]:
    """Nodes that are kernel boundaries before any choice: inputs, outputs, explicit
    `contiguous()`."""
    m = set(key.inputs) | set(key.outputs)
    for i, n in enumerate(key.nodes):
        if n.op is Ops.CONTIGUOUS:
            m.add(i)
    return m


def candidates(key: GraphKey) -> list[int]:
    """Values whose materialisation is a choice: computed, not forced, not constant-like
    (graph order)."""
    forced = initial_materialized(key)
    consts = const_like(key)
    return [i for i in range(len(key.nodes)) if i not in forced and i not in consts]


def subsets(free: Sequence[int]) -> Iterator[frozenset]:
    """Every subset of `free`: by size, then in `itertools.combinations` order."""
    for r in range(len(free) + 1):
        for combo in itertools.combinations(free, r):
            yield frozenset(combo)


def greedy_materialized(key: GraphKey) -> set[int]:
    """The forced boundaries, every matmul (a BLAS step) and the A operands of the
    `rmsnorm` kind's sites (`svod.lower.kindsites.kind_operands`: a kind is the greedy
    planner's only where its priced pass, `svod.plan_greedy`, chose it)."""
    from svod.lower.kindsites import kind_operands

    return initial_materialized(key) | {i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL} | \
        kind_operands(key)


def shared_heavy(key: GraphKey, threshold: int = 12) -> set[int]:
    """Values read by several consumers whose inlined cone is big (more than `threshold`
    computed ops since the last such value): recomputing them in every consumer would
    multiply work and kernel bodies. Cheap shared values (a cast, a scale) are not in it."""
    users = key.users()
    weight = [0] * len(key.nodes)
    out = set()
    for i, n in enumerate(key.nodes):
        if n.op in (Ops.BUFFER, Ops.CONST):
            continue
        w = (0 if n.op in MOVEMENT else 1) + sum(weight[s] for s in n.src)
        weight[i] = min(w, 10_000)
        if len(set(users[i])) >= 2 and weight[i] > threshold and n.op not in MOVEMENT:
            out.add(i)
            weight[i] = 0  # a boundary: consumers load it
    return out


def greedy_boundaries(key: GraphKey) -> set[int]:
    """The greedy planner's choice: `greedy_materialized` and `shared_heavy`. The search
    starts its local search there and falls back to it for regions it has no time for."""
    return greedy_materialized(key) | shared_heavy(key)
