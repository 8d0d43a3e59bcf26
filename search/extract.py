"""Kernel-level extraction over the serialised e-graph, in Python.

The built-in extractors price per e-node and so mis-price fusion (FACTS.md): a tree
cost charges a shared producer once per consumer, and the Rust extractor panics on
non-monotone costs. Here a variant is priced as what it is — a plan of whole kernels —
with the `CostModel`: every kernel once, a producer inlined into two kernels paid in
both (recompute), a materialised producer paid once however many kernels load it.

Two steps:

1. **Decode.** Every e-class gets one representative e-node (fewest ops: the exact
   algebraic rewrites only ever remove ops), which turns the e-graph back into a graph.
   For each value, the e-graph also says whether each of its consumers has a variant
   that reads the value's body instead of loading it — the fusion rules added those.
   A value is a *free choice* when some consumer can fuse it; else it is materialised.
2. **Choose kernel boundaries.** Each free choice is "materialise" or "inline". The
   plan of a choice is built by `svod.lower.lower` (the lowering stage: it adds any
   boundary that legality forces and runs the plan passes, attention fusion included)
   and priced. Exact — every combination —
   up to `exact_limit` free choices; above that a local search (from the greedy plan's
   and the all-fused choice, flip one boundary at a time while the price drops) under
   the time budget. The k cheapest distinct plans are kept, except that among plans
   priced within 1% of the cheapest the one with fewest kernels goes first
   (`svod.costing.fewer_kernels_on_ties`). Results are acyclic: the
   decoded graph is built bottom-up from strictly cheaper representatives.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from svod.costing import CostModel, Machine, fewer_kernels_on_ties
from svod.ir import Ops
from svod.kernel import Plan
from svod.key import GraphKey, KeyNode
from svod.lower import candidates, greedy_boundaries, initial_materialized, lower, subsets

INF = float("inf")


@dataclass
class Variant:
    plan: Plan
    seconds: float  # predicted by the cost model
    materialized: frozenset  # free choices made kernel boundaries (decoded-graph nodes)

    @property
    def kernels(self) -> int:
        return len(self.plan.kernels)


@dataclass
class Extraction:
    key: GraphKey  # the decoded graph (the input graph after algebraic rewrites)
    variants: list[Variant]  # cheapest first
    fixed: frozenset  # boundaries not up for choice
    free: tuple[int, ...]
    exact: bool
    evaluated: int
    seconds: float
    stop_reason: str = "complete"
    fusible_edges: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def best(self) -> Variant:
        return self.variants[0]


# ----------------------------------------------------------------------------- decode


class _EG:
    """The serialised e-graph as plain Python data."""

    def __init__(self, js: dict):
        self.nodes = js["nodes"]
        self.classes: dict[str, list[str]] = defaultdict(list)
        for nid, n in self.nodes.items():
            self.classes[n["eclass"]].append(nid)
        self.parents: dict[str, list[str]] = defaultdict(list)
        for nid, n in self.nodes.items():
            for c in n["children"]:
                self.parents[self.nodes[c]["eclass"]].append(nid)

    def cls(self, nid: str) -> str:
        return self.nodes[nid]["eclass"]

    def op(self, nid: str) -> str:
        return self.nodes[nid]["op"]

    def child_classes(self, nid: str) -> list[str]:
        return [self.nodes[c]["eclass"] for c in self.nodes[nid]["children"]]

    def prim(self, nid: str) -> str:
        return self.nodes[nid]["op"]


def _costs(eg: _EG):
    """Fewest-ops cost per class and its representative node (worklist to a fixpoint)."""
    cost: dict[str, float] = defaultdict(lambda: INF)
    rep: dict[str, str] = {}

    def node_cost(nid: str) -> float:
        op = eg.op(nid)
        kids = eg.nodes[nid]["children"]
        if op in ("Input", "Nil"):
            return 0.0
        if op in ("Node", "Body"):
            return INF  # names, not choices
        if op in ("Kernel", "Load"):
            return cost[eg.cls(kids[0])]
        if op == "Cons":
            return cost[eg.cls(kids[0])] + cost[eg.cls(kids[1])]
        if op == "E":
            return 1.0 + cost[eg.cls(kids[2])]
        return 0.0  # primitives and relation facts

    work = list(eg.nodes)
    queued = set(work)
    while work:
        nid = work.pop()
        queued.discard(nid)
        c = eg.cls(nid)
        v = node_cost(nid)
        if v < cost[c]:
            cost[c] = v
            rep[c] = nid
            for p in eg.parents.get(c, ()):
                if p not in queued:
                    queued.add(p)
                    work.append(p)
    return cost, rep


def _list_items(eg: _EG, rep: dict, fl_class: str) -> list[str]:
    """F-classes of a source list (lists are never unioned: one Cons per class)."""
    out = []
    c = fl_class
    while True:
        nid = rep.get(c) or eg.classes[c][0]
        if eg.op(nid) != "Cons":
            return out
        h, t = eg.child_classes(nid)
        out.append(h)
        c = t


class _Decoder:
    def __init__(self, eg: _EG, key: GraphKey, rep: dict):
        self.eg, self.key, self.rep = eg, key, rep
        self.nodes: list[KeyNode] = []
        self.index: dict[bytes, int] = {}  # by encoding: KeyNode equality has 0.0 == -0.0
        self.value: dict[str, int] = {}  # class -> decoded node index
        self.leaf_of = {n.arg[0]: i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER}
        self.orig_of: dict[int, int] = {}  # decoded node -> original node id

    def add(self, n: KeyNode, orig: int | None = None) -> int:
        k = n.encode()
        if k not in self.index:
            self.index[k] = len(self.nodes)
            self.nodes.append(n)
            if orig is not None:
                self.orig_of[len(self.nodes) - 1] = orig
        return self.index[k]

    def decode(self, cls: str) -> int:
        """The decoded node of an F- or T-class (iterative post-order)."""
        stack = [(cls, False)]
        while stack:
            c, ready = stack.pop()
            if c in self.value:
                continue
            nid = self.rep[c]
            op = self.eg.op(nid)
            deps = self._deps(nid, op)
            if not ready:
                stack.append((c, True))
                stack.extend((d, False) for d in deps if d not in self.value)
                continue
            if op in ("Kernel", "Load"):
                self.value[c] = self.value[deps[0]]
            elif op == "Input":
                k = int(self.eg.prim(self.eg.nodes[nid]["children"][0]))
                i = self.leaf_of[k]
                self.value[c] = self.add(self.key.nodes[i], i)
            elif op == "E":
                i = int(self.eg.prim(self.eg.nodes[nid]["children"][1]))
                o = self.key.nodes[i]
                src = tuple(self.value[d] for d in deps)
                self.value[c] = self.add(KeyNode(o.op, o.dtype, src, o.arg, o.shape), i)
            else:
                raise AssertionError(f"decode: unexpected e-node {op}")
        return self.value[cls]

    def _deps(self, nid: str, op: str) -> list[str]:
        kids = self.eg.child_classes(nid)
        if op in ("Kernel", "Load"):
            return [kids[0]]
        if op == "E":
            return _list_items(self.eg, self.rep, kids[2])
        return []


def _tensor_classes(eg: _EG) -> dict[int, str]:
    """Per original node: its T-class, found through its `(Node i)` handle."""
    return {int(eg.prim(n["children"][0])): n["eclass"] for n in eg.nodes.values() if n["op"] == "Node"}


def decode(js: dict, key: GraphKey):
    """(decoded GraphKey, fusible edges, decoded->original node map) from serialised JSON."""
    eg = _EG(js)
    _, rep = _costs(eg)
    dec = _Decoder(eg, key, rep)
    t_of = _tensor_classes(eg)
    outs: list[int] = []
    for o in key.outputs:
        v = dec.decode(t_of[o])
        if dec.nodes[v].op is Ops.BUFFER or v in outs:
            # an output that simplified to an input (or to another output): copy it
            n = dec.nodes[v]
            v = dec.add(KeyNode(Ops.CONTIGUOUS, n.dtype, (v,), None, n.shape))
        outs.append(v)
    decoded = GraphKey(tuple(dec.nodes), tuple(outs))
    # a fusible edge: the consumer's class has a variant whose source there is the
    # producer's body (an E-class), not a Load of it
    fusible: set[tuple[int, int]] = set()
    for c, nid in rep.items():
        if eg.op(nid) != "E" or c not in dec.value:
            continue
        u = dec.value[c]
        for alt in eg.classes[c]:
            if eg.op(alt) != "E":
                continue
            for cls in _list_items(eg, rep, eg.child_classes(alt)[2]):
                r = rep.get(cls)
                if r is not None and eg.op(r) == "E" and cls in dec.value:
                    fusible.add((u, dec.value[cls]))
    return decoded, fusible, dec.orig_of


# ----------------------------------------------------------------------------- choose


def boundaries(key: GraphKey, fusible: set[tuple[int, int]]) -> tuple[set[int], list[int]]:
    """(fixed boundaries, free choices) of a decoded graph."""
    users = key.users()
    fixed = initial_materialized(key)
    free: list[int] = []
    for i in candidates(key):  # constants (and broadcasts of them) never deserve a kernel
        # free when some consumer can fuse it: a consumer that cannot makes the lowering
        # materialise it for that consumer, while the others may still recompute it
        if users[i] and any((u, i) in fusible for u in users[i]):
            free.append(i)
        else:
            fixed.add(i)
    return fixed, free


def choose(key: GraphKey, fusible: set[tuple[int, int]], model: CostModel, machine: Machine, *, k: int = 1,
           exact_limit: int = 8, deadline: float = INF) -> Extraction:
    """Pick kernel boundaries for the decoded graph `key` (see the module docstring)."""
    t0 = time.perf_counter()
    fixed, free = boundaries(key, fusible)
    seen: dict[frozenset, Variant | None] = {}
    evaluated = 0
    kernels_cache: dict = {}  # root -> kernels built for earlier choices (see svod.lower.lower)
    prices: dict[str, float] = {}  # kernel content key -> predicted seconds (models without price_plan)
    in_plan = getattr(model, "price_plan", None)

    def price(plan: Plan) -> float:
        if in_plan is not None:  # kernels priced in their plan's context (svod.costing.plan_prices)
            return sum(p.seconds for p in in_plan(plan, machine))
        todo = [k for k in plan.kernels if k.key() not in prices]
        for k, p in zip(todo, model.price_batch(todo, machine)):
            prices[k.key()] = p.seconds
        return sum(prices[k.key()] for k in plan.kernels)

    def evaluate(chosen: frozenset) -> Variant | None:
        nonlocal evaluated
        if chosen in seen:
            return seen[chosen]
        evaluated += 1
        try:
            plan = lower(key, fixed | chosen, planner="search", cache=kernels_cache)
        except Exception:  # noqa: BLE001 - a variant that cannot be lowered is not a candidate
            seen[chosen] = None
            return None
        v = Variant(plan, price(plan), chosen)
        seen[chosen] = v
        return v

    exact = len(free) <= exact_limit
    stop = "complete"
    if exact:
        for chosen in subsets(free):
            evaluate(chosen)
            if time.perf_counter() > deadline:
                stop = "time limit"
                break
    else:
        greedy = frozenset(greedy_boundaries(key) & set(free))
        # NOTE: the all-fused start recomputes every shared value everywhere: on big graphs
        # its kernels are huge and slow to lower, and it is rarely the better start
        starts = (greedy, frozenset()) if len(free) <= 64 else (greedy,)
        for start in starts:
            cur = evaluate(start)
            improved = cur is not None
            while improved and stop == "complete":
                improved = False
                for i in free:
                    if time.perf_counter() > deadline:
                        stop = "time limit"
                        break
                    cand = evaluate(cur.materialized ^ {i})
                    if cand is not None and cand.seconds < cur.seconds * (1 - 1e-9):
                        cur, improved = cand, True
    # distinct plans only (different choices can lower to the same kernels)
    best: dict[tuple, Variant] = {}
    for v in seen.values():
        if v is None:
            continue
        sig = tuple(kk.key() for kk in v.plan.kernels)
        if sig not in best or v.seconds < best[sig].seconds:
            best[sig] = v
    ranked = sorted(best.values(), key=lambda v: (v.seconds, len(v.plan.kernels)))
    ranked = fewer_kernels_on_ties(ranked)[:max(k, 1)]
    return Extraction(key, ranked, frozenset(fixed), tuple(free), exact, evaluated, time.perf_counter() - t0,
                      stop, len(fusible))
