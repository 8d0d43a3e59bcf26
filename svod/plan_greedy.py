"""The greedy planner: GraphKey -> Plan with the obvious fusions, no search.

Its boundaries (`svod.lower.greedy_boundaries`): the forced ones, every matmul (a BLAS
step) and every value shared by several consumers whose inlined cone is heavy; all
other fusion follows from the lowering (`svod.lower.lower`): elementwise chains,
reductions with their prologue and epilogue, row-wise reduce-then-broadcast kernels,
sibling kernels merged, attention chains fused. The search falls back to it for graphs
too big to search and when it fails; `SVOD_SEARCH=0` plans with it.

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


def plan_greedy(key: GraphKey) -> Plan:
    """The greedy plan for `key` (obvious fusions, no search)."""
    return lower(key, greedy_boundaries(key))
