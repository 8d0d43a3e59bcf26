"""The oracle: the optimal plan of a small graph by brute force, from the Kernel spec
alone — no e-graph, no rules. Every cover of the graph by legal kernels is a choice of
which values to materialise; `svod.lower.lower` (the lowering stage) builds the kernels
of each choice (recomputing every value that is not materialised, in each kernel that
reads it, then the plan passes) and the cost model prices them. Algebraic rewrites are
off.

Used by the search's optimality tests and by `svod costmodel report` (every variant of
a workload, measured). Broadcast constants are always inlined (a kernel that writes a
constant is never cheaper than reading it as a constant).
"""

from __future__ import annotations

from dataclasses import dataclass

from svod.costing import CostModel, Machine, RooflineModel, fewer_kernels_on_ties, plan_seconds
from svod.kernel import Plan
from svod.key import GraphKey
from svod.lower import candidates, initial_materialized, lower, subsets


@dataclass
class Cover:
    plan: Plan
    seconds: float
    materialized: frozenset


def choices(key: GraphKey) -> list[int]:
    """Values whose materialisation is a choice: computed, not forced, not constants
    (`svod.lower.candidates`)."""
    return candidates(key)


def all_covers(key: GraphKey, model: CostModel | None = None, machine: Machine | None = None,
               max_choices: int = 14) -> list[Cover]:
    """Every distinct plan of `key` (cheapest first); refuses graphs with too many choices."""
    model = model or RooflineModel()
    machine = machine or Machine()
    free = choices(key)
    if len(free) > max_choices:
        raise ValueError(f"oracle: {len(free)} choices > {max_choices}; the oracle is for small graphs")
    base = initial_materialized(key)
    plans: dict[tuple, Cover] = {}
    for m in subsets(free):
        try:
            plan = lower(key, base | m, planner="oracle")
        except Exception:  # noqa: BLE001 - an illegal cover is not a cover
            continue
        secs = plan_seconds(plan, model, machine)
        sig = tuple(k.key() for k in plan.kernels)
        if sig not in plans or secs < plans[sig].seconds:
            plans[sig] = Cover(plan, secs, m)
    return fewer_kernels_on_ties(sorted(plans.values(), key=lambda c: (c.seconds, len(c.plan.kernels))))


def optimum(key: GraphKey, model: CostModel | None = None, machine: Machine | None = None) -> Cover:
    return all_covers(key, model, machine)[0]
