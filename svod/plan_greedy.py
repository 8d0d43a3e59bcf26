"""The greedy planner: GraphKey -> Plan with the obvious fusions, no search.

Its boundaries (`svod.lower.greedy_boundaries`): the forced ones, every matmul (a BLAS
step), every value shared by several consumers whose inlined cone is heavy, and the A
operand of every `rmsnorm` kind site; all other fusion follows from the lowering
(`svod.lower.lower`): elementwise chains, reductions with their prologue and epilogue,
row-wise reduce-then-broadcast kernels, sibling kernels merged, attention chains fused.
The search falls back to it for graphs too big to search and when it fails;
`SVOD_SEARCH=0` plans with it.

**Kernel kinds** (`greedy_kinds`, when the caller passes a cost model): the `mlp` and
`rmsnorm` kinds (search/kinds.py) need a matmul's A operand inlined, which the greedy
boundaries never leave; for each of their sites (`svod.lower.kindsites.kind_sites`, in
node order) the planner lowers the plan with the site's operand (and the MLP's hidden
product) inlined, prices both plans with the model and keeps the cheaper — the kind
where the cost model prefers it, as the search's extraction does. Bounded: at most
`GREEDY_KIND_SITES` sites, graphs of at most `GREEDY_KIND_NODES` nodes (each trial is one
lowering). Attention keeps its plan pass (`svod.lower.passes.ATTENTION_FUSION`).

>>> import svod
>>> from svod.key import compact
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> key, _ = compact([svod.nn.softmax(x).uop])
>>> len(plan_greedy(key).kernels)
1
"""

from __future__ import annotations

from svod.kernel import Plan
from svod.key import GraphKey
from svod.lower import greedy_boundaries, lower

GREEDY_KIND_SITES = 8  # kind sites the greedy planner prices (each: one more lowering)
GREEDY_KIND_NODES = 4000  # graphs above this keep the plain greedy plan (no kind trials)


def plan_greedy(key: GraphKey, model=None, machine=None) -> Plan:
    """The greedy plan for `key` (obvious fusions, no search); with a cost `model`, the
    kernel kinds the model prices cheaper than their operands materialised
    (`greedy_kinds`)."""
    chosen = greedy_boundaries(key)
    plan = lower(key, chosen)
    if model is None:
        return plan
    return greedy_kinds(key, chosen, plan, model, machine)


def greedy_kinds(key: GraphKey, chosen: set[int], plan: Plan, model, machine=None) -> Plan:
    """`plan` (the lowering of `chosen`) with each kind site's kind where `model` prices
    the plan holding it cheaper (see the module docstring); a site whose trial cannot be
    lowered or priced keeps its operand materialised."""
    from svod.costing import Machine, plan_prices
    from svod.lower.kindsites import kind_sites

    if len(key.nodes) > GREEDY_KIND_NODES:
        return plan
    sites = kind_sites(key)[:GREEDY_KIND_SITES]
    if not sites:
        return plan
    machine = machine or Machine.host()

    def cost(p: Plan) -> float:
        return sum(q.seconds for q in plan_prices(p, model, machine))

    try:
        best = cost(plan)
    except Exception:  # noqa: BLE001 - a pricing failure costs the kinds, never a result
        return plan
    for s in sites:
        trial = set(chosen) - {s.operand} - set(s.also)
        try:
            cand = lower(key, trial)
            c = cost(cand)
        except Exception:  # noqa: BLE001 - as above
            continue
        if c < best and any(k.kind == s.kind for k in cand.kernels):
            chosen, plan, best = trial, cand, c
    return plan
