"""The lowering's plan passes: named Plan -> Plan rewrites, run in a listed order on the
Plan `svod.lower.build.build_plan` makes, before any planner prices, times or runs it.

Contract of a pass: it returns a Plan computing the same outputs in the same slots (the
plan itself when it changes nothing), and a plan it returns passes `Plan.check`. Under
`SVOD_VALIDATE` the runner checks the built plan and each plan a pass changes, and a
failing check raises `KernelError` naming the pass. A pass that raises leaves the plan as
it was, with one warning: a pass costs speed when it fails, never a result. A pass with a
`switch` variable is skipped when that variable is 0 (`SVOD_FUSE_ATTENTION=0`), one with
`planners` runs on those planners' plans only (attention fusion: the greedy planner's).

Adding a pass: append a `PlanPass` to `PLAN_PASSES` (its position is its order).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from svod.flags import PLAN_SWITCHES, flag, plan_switches, warn_once  # noqa: F401 - re-exported
from svod.kernel import KernelError, Plan
from svod.lower.attention import fuse_attention
from svod.lower.merge import merge_siblings
from svod.lower.rowcol import fuse_rowcol


@dataclass(frozen=True)
class PlanPass:
    """One named plan pass; `switch`: the environment variable that turns it off with 0;
    `planners`: the planners (`Plan.planner`) whose plans it rewrites (None: all)."""

    name: str
    run: Callable[[Plan], Plan]
    switch: str | None = None
    planners: tuple[str, ...] | None = None

    def enabled(self) -> bool:
        return self.switch is None or os.environ.get(self.switch, "1") not in ("0", "false", "False")

    def applies(self, plan: Plan) -> bool:
        return self.enabled() and (self.planners is None or plan.planner in self.planners)


SIBLING_MERGE = PlanPass("sibling merge", merge_siblings)
# Only for the greedy planner's plans (SVOD_SEARCH=0, graphs with no fusion choice): the
# search and the oracle choose the attention kernel themselves — the `attention` kernel
# kind (search/kinds.py, built by svod.lower.build) priced against the unfused kernels —
# and a pass fusing their unfused variants too would make that choice moot. The greedy
# planner materialises every matmul and never inlines a softmax into one, so it keeps
# the pass (docs/planning.md, "Attention").
ATTENTION_FUSION = PlanPass("attention fusion", fuse_attention, "SVOD_FUSE_ATTENTION", ("greedy",))

# Reductions of one 2-D input over axis 1 and axis 0 as one kernel reading it once
# (svod/lower/rowcol.py); on every planner's plans: it never adds work or a read.
ROWCOL_FUSION = PlanPass("row-column fusion", fuse_rowcol, "SVOD_FUSE_ROWCOL")

# In order. Sibling merging first: attention fusion matches the merged kernels (a softmax
# merged with a sibling is not a lone row softmax, and stays unfused), and row-column
# fusion pairs the merged row and column kernels.
PLAN_PASSES: tuple[PlanPass, ...] = (SIBLING_MERGE, ATTENTION_FUSION, ROWCOL_FUSION)


def validating() -> bool:
    """SVOD_VALIDATE is on (`svod.flags.flag`, the engine's reading)."""
    return flag("SVOD_VALIDATE")


def check(plan: Plan, after: str) -> None:
    """`plan.check()`, its failure raised as a KernelError saying what produced the plan."""
    try:
        plan.check()
    except Exception as e:  # noqa: BLE001 - re-raised with the pass named
        raise KernelError(f"lowering: the plan after {after} is invalid: {type(e).__name__}: {e}") from e


def run_passes(plan: Plan, passes: Sequence[PlanPass] = PLAN_PASSES, *, validate: bool | None = None) -> Plan:
    """`plan` through `passes` in order (see the module docstring); `validate` defaults to
    SVOD_VALIDATE."""
    validate = validating() if validate is None else validate
    for p in passes:
        if not p.applies(plan):
            continue
        try:
            out = p.run(plan)
        except Exception as e:  # noqa: BLE001 - a pass bug costs speed, never a result
            warn_once(p.name, f"svod: {p.name} failed ({type(e).__name__}: {e}); keeping the plan without it")
            continue
        if out is not plan and validate:
            check(out, f"the plan pass {p.name!r}")
        plan = out
    return plan
