"""The fusion search: GraphKey -> the cheapest Plan, through an egglog e-graph.

    encode (one `let` per node)  ->  saturate (named rule sets, bounded)
    ->  serialise  ->  extract (decode + choose kernel boundaries, priced by a CostModel)

`plan_search` is what the engine calls on a cache miss (imported lazily, on a thread of
its own: egglog is slow to import, docs/planning.md). Graphs above `limits.max_nodes`
use the greedy planner (size policy); graphs above `limits.region_nodes` are searched
region by region in one pass within the budget (docs/planning.md); any failure falls
back to the greedy planner. A plan cut short by the budget or from the greedy planner is
flagged provisional: the planner persists it as such (later processes use it) and `svod
tune` searches it again.

>>> import svod
>>> from svod.key import compact
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> r = plan_search(compact([svod.nn.softmax(x).uop])[0])
>>> len(r.plan.kernels), r.report.saturation.stop_reason
(1, 'saturated')
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from svod.config import SearchLimits
from svod.config import limits as current_limits
from svod.costing import CostModel, Machine, RooflineModel
from svod.ir import Ops
from svod.kernel import Plan
from svod.key import GraphKey, KeyNode
from svod.lower.cover import const_like


@dataclass
class Rewrite:
    """One rewritten value of the chosen program: the rule sets that made it, the
    original node it replaces (None for a value the rewrites introduced) and the decoded
    node, each in words."""

    rulesets: tuple[str, ...]
    original: int | None
    decoded: int
    now: str
    was: str | None = None

    def __str__(self) -> str:
        head = f"[{', '.join(self.rulesets)}] "
        if self.was is None:
            return head + f"new value %{self.decoded} = {self.now}"
        return head + f"node {self.original}: {self.was}  ->  {self.now}"


@dataclass
class SearchReport:
    planner: str  # "search" | "greedy"
    reason: str  # why this planner/plan: "searched", "size policy: ...", "fallback: ..."
    saturation: object = None  # SaturationReport
    extraction: object = None  # Extraction (without the heavy plans)
    seconds: float = 0.0
    serialize_seconds: float = 0.0
    algebra: object = None  # extract.Exploration: the programs tried
    rewrites: list = field(default_factory=list)  # Rewrite records of the chosen program

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
        a = self.algebra
        if a is not None and a.alternatives:
            same = f", {a.merged} skipped (the movement form of a program already seen)" if a.merged else ""
            lines.append(f"algebra: {a.alternatives} value(s) with another program, {a.tried} program(s) priced{same}, "
                         f"{a.seconds * 1e3:.1f} ms ({a.stop_reason}); {len(self.rewrites)} rewrite(s) chosen")
        lines.extend(f"  {r}" for r in self.rewrites)
        return "\n".join(lines)


@dataclass
class SearchResult:
    plan: Plan
    report: SearchReport
    provisional: bool = False
    variants: list = field(default_factory=list)  # extract.Variant, cheapest first
    decoded: GraphKey | None = None
    egraph: dict | None = None  # the saturated e-graph, serialised (for explain / pictures), when kept
    decoded_to_key: dict = field(default_factory=dict)  # decoded node -> node of the searched key
    program: object = None  # extract.Decoded: the chosen program (its rewrites)


def _greedy(key: GraphKey, reason: str, t0: float) -> SearchResult:
    from svod.plan_greedy import plan_greedy

    plan = plan_greedy(key)
    return SearchResult(plan, SearchReport("greedy", reason, seconds=time.perf_counter() - t0), provisional=True)


def plan_search(key: GraphKey, *, cost_model: CostModel | None = None, machine: Machine | None = None,
                k: int = 1, limits: SearchLimits | None = None, rulesets=None, keep_egraph: bool = False
                ) -> SearchResult:
    """Search the cheapest plan for `key`; `k` > 1 also returns the next-best variants.
    Bounded on every graph shape: above `limits.max_nodes` nodes the greedy planner,
    above `limits.region_nodes` one search per region (never nested: a region is searched
    whole, however many inputs and constants it reads), all within `limits.seconds` plus
    the fixed cost of the region under way when the budget runs out."""
    t0 = time.perf_counter()
    lim = limits or current_limits()
    if len(key.nodes) > lim.max_nodes:
        return _greedy(key, f"size policy: {len(key.nodes)} nodes > {lim.max_nodes}", t0)
    model = cost_model or RooflineModel()
    mach = machine or Machine.host()
    if len(key.nodes) > lim.region_nodes:
        return _search_regions(key, model, mach, lim, rulesets, t0)
    return _search_whole(key, model, mach, lim, rulesets, k, keep_egraph)


def _search_whole(key: GraphKey, model, mach, lim: SearchLimits, rulesets, k: int = 1,
                  keep_egraph: bool = False) -> SearchResult:
    """One e-graph search over all of `key`, whatever its size (the caller applies the
    size policy)."""
    from search import rules
    from search.extract import Program, choose, explore
    from search.saturate import encode, saturate, session

    names = tuple(rulesets or rules.default_rulesets(getattr(lim, "algebra", "reassoc")))
    with session(names) as eg:
        t0 = time.perf_counter()  # time waiting for the shared e-graph is not search time
        enc = encode(key, names, egraph=eg)
        t_enc = time.perf_counter() - t0
        # saturation gets 60% of the budget, encoding included: serialising, decoding and
        # extracting the rest (the search as a whole stays near its budget)
        sat = saturate(enc, replace(lim, seconds=max(0.6 * lim.seconds - t_enc, 0.0)), encode_seconds=t_enc)
        t1 = time.perf_counter()
        js = enc.serialize()
        t_ser = time.perf_counter() - t1
    prog = Program(js, enc.key, enc.templates)  # enc.key: with search/contract.py's template nodes
    # the algebraic choice (which program) within 30% of the budget, then the kernel
    # boundaries of the fewest-ops program and of the cheapest rewritten one
    alg = explore(prog, model, mach, deadline=t0 + 0.7 * lim.seconds, exact_limit=lim.exact)
    # 10% headroom: the evaluation under way when the deadline passes still finishes
    deadline = t0 + 0.9 * lim.seconds
    ext = choose(alg.base.key, alg.base.fusible, model, mach, k=k, exact_limit=lim.exact, deadline=deadline)
    chosen = alg.base
    if alg.best is not alg.base:
        ext2 = choose(alg.best.key, alg.best.fusible, model, mach, k=k, exact_limit=lim.exact, deadline=deadline)
        if ext2.variants and (not ext.variants or ext2.best.seconds < ext.best.seconds):
            ext2.evaluated += ext.evaluated
            ext, chosen = ext2, alg.best
    if not ext.variants:
        return _greedy(key, "fallback: no variant could be lowered", t0)
    best = ext.best
    report = SearchReport("search", "searched", sat, ext, time.perf_counter() - t0, t_ser, alg,
                          _rewrites(chosen, key))
    provisional = sat.stop_reason == "time limit" or ext.stop_reason == "time limit"
    return SearchResult(best.plan, report, provisional, ext.variants, chosen.key, js if keep_egraph else None,
                        chosen.orig_of, chosen)


def _rewrites(d, key: GraphKey) -> list[Rewrite]:
    """The rewrites the chosen program uses, as `Rewrite` records (explain)."""
    out = [Rewrite(names, i, v, describe(d.key, v), describe(key, i)) for i, (v, names) in sorted(d.replaced.items())]
    shown = {v for v, _ in d.replaced.values()}
    shown |= const_like(d.key)  # a rule's new constant is shown where it is used
    out += [Rewrite(names, None, v, describe(d.key, v)) for v, names in sorted(d.rewrites.items()) if v not in shown]
    return out


def describe(key: GraphKey, i: int, depth: int = 2) -> str:
    """Node i of `key` as a short expression: `MATMUL(%0, MATMUL(%1, %4))`, sources
    shown `depth` levels deep (deeper ones, inputs and constants by number)."""
    n = key.nodes[i]
    if n.op is Ops.BUFFER:
        return f"in{n.arg[0]}{list(n.shape)}"
    if n.op is Ops.CONST:
        return repr(n.arg)
    arg = "" if n.arg is None or n.op is Ops.MATMUL else f"[{n.arg}]"
    if depth <= 0:
        return f"%{i}"
    srcs = ", ".join(describe(key, s, depth - 1) for s in n.src)
    return f"{n.op.value.lower()}{arg}({srcs}){list(n.shape)}"


# ----------------------------------------------------------------------------- regions


def regions(key: GraphKey, size: int) -> list[list[int]]:
    """Cut the computed nodes, in topological order, into regions of at most `size`
    nodes; a region also ends after a matmul once it has a quarter of its size (a natural
    boundary: the matmul is its own BLAS step or the head of an epilogue kernel)."""
    consts = const_like(key)
    out: list[list[int]] = []
    cur: list[int] = []
    for i, n in enumerate(key.nodes):
        if n.op is Ops.BUFFER or i in consts:
            continue
        cur.append(i)
        if len(cur) >= size or (n.op is Ops.MATMUL and len(cur) >= size // 4):
            out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _region_outputs(key: GraphKey, region: list[int], rset: set[int], users: list[list[int]],
                    outputs: set[int]) -> list[int]:
    """The region's values read outside it (or graph outputs)."""
    return [i for i in region if i in outputs or any(u not in rset for u in users[i])]


def _subkey(key: GraphKey, region: list[int], users: list[list[int]], consts: set[int],
            outputs: set[int] | None = None):
    """The region as a graph of its own: values from outside are inputs (constants are
    copied in), values used outside (or graph outputs) are its outputs."""
    rset = set(region)
    need_consts: list[int] = []
    inputs: list[int] = []
    seen: set[int] = set()
    stack = [s for i in region for s in key.nodes[i].src]
    while stack:
        s = stack.pop()
        if s in rset or s in seen:
            continue
        seen.add(s)
        if s in consts:
            need_consts.append(s)
            stack.extend(key.nodes[s].src)
        else:
            inputs.append(s)
    inputs.sort()
    index: dict[int, int] = {}
    nodes: list[KeyNode] = []
    for j, s in enumerate(inputs):
        n = key.nodes[s]
        strides, acc = [], 1
        for d in reversed(n.shape):
            strides.append(acc)
            acc *= d
        index[s] = len(nodes)
        nodes.append(KeyNode(Ops.BUFFER, n.dtype, (), (j, tuple(reversed(strides))), n.shape))
    for i in sorted(need_consts) + region:
        n = key.nodes[i]
        index[i] = len(nodes)
        nodes.append(KeyNode(n.op, n.dtype, tuple(index[s] for s in n.src), n.arg, n.shape))
    outs = _region_outputs(key, region, rset, users, set(key.outputs) if outputs is None else outputs)
    sub = GraphKey(tuple(nodes), tuple(index[o] for o in outs))
    back = {index[i]: i for i in region}
    return sub, back, outs


def _search_regions(key: GraphKey, model, mach, lim: SearchLimits, rulesets, t0: float) -> SearchResult:
    """Size policy for big graphs: search each region on its own (values crossing a
    region boundary are materialised), then lower the whole graph with the union of the
    regions' kernel boundaries.

    Bounded: one loop over the regions (no recursion), each searched whole with an equal
    share of what is left of `lim.seconds`; once the budget is spent, the remaining
    regions take the greedy planner's boundaries (the plan is then provisional)."""
    from search import contract, rules
    from svod.lower import greedy_boundaries, initial_materialized, lower

    names = tuple(rulesets or rules.default_rulesets(getattr(lim, "algebra", "reassoc")))
    key = contract.with_preferred_forms(key, names, lambda alone: any(  # contractions the regions cannot rewrite
        "contract" in w.rulesets for w in _search_whole(alone, model, mach, lim, names).report.rewrites))
    users = key.users()
    consts = const_like(key)
    outputs = set(key.outputs)
    parts = regions(key, lim.region_nodes)
    deadline = t0 + lim.seconds
    m: set[int] = set(initial_materialized(key))
    greedy_cuts: set[int] | None = None
    provisional = False
    stops: dict[str, int] = {}
    from svod.progress import bar

    pb = bar(len(parts), f"search {len(key.nodes)} nodes", unit="region", delay=2.0)  # shows after 2 s
    for j, region in enumerate(parts):
        pb.update(1)
        left = deadline - time.perf_counter()
        if left <= 0:  # out of time: this region keeps the greedy planner's cuts
            if greedy_cuts is None:
                greedy_cuts = greedy_boundaries(key)
            rset = set(region)
            m.update(_region_outputs(key, region, rset, users, outputs))
            m.update(i for i in region if i in greedy_cuts)
            provisional = True
            stops["not searched: out of time"] = stops.get("not searched: out of time", 0) + 1
            continue
        sub, back, outs = _subkey(key, region, users, consts, outputs)
        m.update(outs)
        sub_limits = replace(lim, seconds=left / (len(parts) - j))
        r = _search_whole(sub, model, mach, sub_limits, rulesets)
        provisional |= r.provisional
        reason = r.report.saturation.stop_reason if r.report.saturation else r.report.reason
        stops[reason] = stops.get(reason, 0) + 1
        n_in = len(r.decoded.inputs) if r.decoded is not None else len(sub.inputs)
        for slot in r.plan.slots:
            if slot < n_in:
                continue
            d = slot - n_in
            # a value the algebra made has no node in the region's graph: the region's
            # boundaries are kept, its rewrites are not (the whole graph is lowered as written)
            node = r.decoded_to_key.get(d) if r.decoded is not None else d
            if node is not None and node in back:
                m.add(back[node])
    pb.close()
    plan = lower(key, m, planner="search")
    reason = (f"size policy: {len(parts)} regions of <= {lim.region_nodes} nodes searched apart "
              f"({', '.join(f'{v} {k}' for k, v in stops.items())})")
    report = SearchReport("search", reason, seconds=time.perf_counter() - t0)
    return SearchResult(plan, report, provisional)
