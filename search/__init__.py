"""The fusion search: GraphKey -> the cheapest Plan, through an egglog e-graph.

    encode (one `let` per node)  ->  saturate (named rule sets, bounded)
    ->  serialise  ->  extract (decode + choose kernel boundaries, priced by a CostModel)

`plan_search` is what the engine calls on a cache miss (imported lazily: egglog costs
~200 ms to import). Graphs above `limits.max_nodes` use the greedy planner (size
policy); any failure falls back to it too. Both cases are flagged provisional, so the
plan is kept in memory only and searched again in a later process.

>>> import svod
>>> from svod.key import compact
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> r = plan_search(compact([svod.nn.softmax(x).uop])[0])
>>> len(r.plan.kernels), r.report.saturation.stop_reason
(1, 'saturated')
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from svod.config import SearchLimits
from svod.config import limits as current_limits
from svod.costing import CostModel, Machine, RooflineModel
from svod.kernel import Plan
from svod.key import GraphKey


@dataclass
class SearchReport:
    planner: str  # "search" | "greedy"
    reason: str  # why this planner/plan: "searched", "size policy: ...", "fallback: ..."
    saturation: object = None  # SaturationReport
    extraction: object = None  # Extraction (without the heavy plans)
    seconds: float = 0.0
    serialize_seconds: float = 0.0

    def __str__(self) -> str:
        lines = [f"planner: {self.planner} ({self.reason}), {self.seconds * 1e3:.1f} ms"]
        if self.saturation is not None:
            lines.append(str(self.saturation))
        if self.extraction is not None:
            e = self.extraction
            how = "exact" if e.exact else "local search"
            lines.append(f"extraction: {how} over {len(e.free)} free boundary choice(s), {e.evaluated} variant(s) "
                         f"priced, {e.fusible_edges} fusible edge(s), {e.seconds * 1e3:.1f} ms ({e.stop_reason}); "
                         f"serialise {self.serialize_seconds * 1e3:.1f} ms")
        return "\n".join(lines)


@dataclass
class SearchResult:
    plan: Plan
    report: SearchReport
    provisional: bool = False
    variants: list = field(default_factory=list)  # extract.Variant, cheapest first
    decoded: GraphKey | None = None
    egraph: dict | None = None  # the saturated e-graph, serialised (for explain / pictures), when kept


def _greedy(key: GraphKey, reason: str, t0: float) -> SearchResult:
    from svod.plan_greedy import plan_greedy

    plan = plan_greedy(key)
    return SearchResult(plan, SearchReport("greedy", reason, seconds=time.perf_counter() - t0), provisional=True)


def plan_search(key: GraphKey, *, cost_model: CostModel | None = None, machine: Machine | None = None,
                k: int = 1, limits: SearchLimits | None = None, rulesets=None, keep_egraph: bool = False
                ) -> SearchResult:
    """Search the cheapest plan for `key`; `k` > 1 also returns the next-best variants."""
    from search import rules
    from search.extract import choose, decode
    from search.saturate import encode, saturate, session

    t0 = time.perf_counter()
    lim = limits or current_limits()
    if len(key.nodes) > lim.max_nodes:
        return _greedy(key, f"size policy: {len(key.nodes)} nodes > {lim.max_nodes}", t0)
    model = cost_model or RooflineModel()
    mach = machine or Machine.host()
    names = tuple(rulesets or rules.DEFAULT)
    with session(names) as eg:
        t0 = time.perf_counter()  # time waiting for the shared e-graph is not search time
        enc = encode(key, names, egraph=eg)
        t_enc = time.perf_counter() - t0
        sat = saturate(enc, lim, encode_seconds=t_enc)
        t1 = time.perf_counter()
        js = enc.serialize()
        t_ser = time.perf_counter() - t1
    decoded, fusible, _ = decode(js, key)
    # 10% headroom: the evaluation under way when the deadline passes still finishes
    ext = choose(decoded, fusible, model, mach, k=k, exact_limit=lim.exact, deadline=t0 + 0.9 * lim.seconds)
    if not ext.variants:
        return _greedy(key, "fallback: no variant could be lowered", t0)
    best = ext.best
    report = SearchReport("search", "searched", sat, ext, time.perf_counter() - t0, t_ser)
    provisional = sat.stop_reason == "time limit" or ext.stop_reason == "time limit"
    return SearchResult(best.plan, report, provisional, ext.variants, decoded, js if keep_egraph else None)
