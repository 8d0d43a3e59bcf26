"""The lowering: GraphKey + chosen kernel boundaries -> Plan. One stage, shared by the
search (`search/`), the oracle (`search/oracle.py`) and the greedy planner
(`svod/plan_greedy.py`): every plan any of them prices, times or runs comes from
`lower`.

    materialised set ──build──▶ one Kernel per materialised node ──plan passes──▶ Plan
      (cover.py)               (build.py: an explicit worklist)    (passes.py: sibling
                                                                    merge, attention fusion)

- `cover.py`: the boundaries around the choice — forced ones (`initial_materialized`),
  constant-like values (`const_like`), the values up for choice (`candidates`), their
  exhaustive enumeration (`subsets`) and the greedy choice (`greedy_boundaries`).
- `build.py`: a kernel per materialised node, inlining every producer that is not
  materialised; legality adds boundaries (a producer a kernel cannot compute is
  materialised, a reduction two merged kernels would both compute is materialised once).
- `passes.py`: `PLAN_PASSES`, named Plan -> Plan rewrites in order — `merge.py` (sibling
  kernels over one iteration space as one multi-output kernel, and an elementwise
  kernel's stored output with its element-for-element elementwise consumer: computed
  once, stored, used in registers; opt-in: `SVOD_MERGE_STORED=1`),
  `attention.py` (matmul -> row softmax -> matmul as one attention kernel),
  `rowcol.py` (reductions of one 2-D input over axis 1 and axis 0, and full reductions
  of them, as one row-column kernel; `SVOD_FUSE_ROWCOL=0` turns it off).

Contract of `lower(key, materialized)`: the plan computes `key`'s outputs into their
slots; every node of `materialized` and of `initial_materialized(key)` that a pass does
not fuse away has a slot (`n_inputs + node`), and so does every producer legality forces;
nothing else does. Deterministic: the same key and set give the same plan text. Under
`SVOD_VALIDATE` the built plan and each plan a pass changes pass `Plan.check`. No Python
recursion and no exception for control flow: the expression depth below a kernel is
bounded by `MAX_DEPTH` as a plan decision (compile time), not by the interpreter's stack.

>>> import svod
>>> from svod.key import compact
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> key, _ = compact([svod.nn.softmax(x).uop])
>>> plan = lower(key, initial_materialized(key))
>>> len(plan.kernels), plan.kernels[0].reduce_axes
(1, (1,))
>>> [p.name for p in PLAN_PASSES]
['sibling merge', 'attention fusion', 'row-column fusion']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from svod.kernel import Plan
from svod.key import GraphKey
from svod.lower.build import MAX_BODY, MAX_DEPTH, build_plan
from svod.lower.cover import (
    candidates,
    const_like,
    greedy_boundaries,
    greedy_materialized,
    initial_materialized,
    shared_heavy,
    subsets,
)
from svod.lower.merge import MERGE_MAX_BODY, MERGE_WINDOW, sibling_groups
from svod.lower.passes import PLAN_PASSES, SIBLING_MERGE, PlanPass, check, run_passes, validating

__all__ = ["lower", "PLAN_PASSES", "PlanPass", "run_passes", "initial_materialized", "greedy_materialized",
           "greedy_boundaries", "shared_heavy", "const_like", "candidates", "subsets", "MAX_BODY", "MAX_DEPTH",
           "MERGE_WINDOW", "MERGE_MAX_BODY"]


def lower(key: GraphKey, materialized: Iterable[int], *, merge_siblings: bool = True, planner: str = "greedy",
          cache: dict | None = None, passes: Sequence[PlanPass] = PLAN_PASSES) -> Plan:
    """The Plan whose kernels compute the `materialized` nodes of `key` (plus the forced
    boundaries and any producer legality forces to materialise), through `passes`
    (default `PLAN_PASSES`; `merge_siblings=False` leaves out the sibling merge).
    `planner` names the planner in the plan's text; `cache` (a dict kept across calls
    on one key) reuses kernels built for earlier choices. Raises AssertionError when the
    choice cannot be lowered (a planner skips that choice)."""
    if not merge_siblings:
        passes = tuple(p for p in passes if p is not SIBLING_MERGE)
    merging = SIBLING_MERGE in passes and SIBLING_MERGE.enabled()
    outs = {key.nodes[o].arg[0] if o in key.inputs else len(key.inputs) + o for o in key.outputs}  # their slots
    group = (lambda ks: sibling_groups(ks, outputs=outs)) if merging else None
    plan = build_plan(key, materialized, planner=planner, cache=cache, group=group)
    if validating():
        check(plan, "building the kernels")
    return run_passes(plan, passes)
