"""Why-not-fused: for every producer -> consumer edge of a plan that crosses a kernel
boundary, the reason it does; and plans described by what they fuse (op names).

A plan computes the *materialised* nodes of its graph (those with a slot), each in a
kernel that inlines every non-materialised producer below it. An edge q -> c of the
graph is a **boundary** when q is materialised and c reads it from memory, or (a kernel
the merge pass formed, `svod.lower.merge`) q is stored and c uses it in registers in the
same kernel: the detail then says so. Its reason, first match wins:

====================  ==================================================================
``output``            q is an output of the graph: written for the caller anyway
``contiguous()``      q is a user's `contiguous()`
``matmul operand``    c is a matmul: it reads its operands from memory (views fuse in)
``matmul result``     q is a matmul and c is not elementwise: no epilogue to fuse into
``library step``      q or c is a library call (svod/library.py): it reads and writes memory
``no fusion rule``    no enabled rule set fuses q's kind of op into c's
``search budget``     the rule exists, but saturation stopped before it fired, or the
                      extraction's budget ended before it priced the fused variant
``size policy``       the graph was searched in regions and q, c lie in two of them
``greedy planner``    the plan came from the greedy planner (its fixed boundaries)
``reduction over other axes``  the lowering cannot host q's reduction in c's kernel
                      (another iteration space or other reduced axes)
``shared reduction``  q is a reduction that several kernels would each recompute
``kernel size cap``   fusing would exceed the lowering's body or depth cap
``priced higher``     fusing is legal; the cost model prices that plan X µs dearer
``tie``               fusing prices within 1%; the plan with fewer kernels was kept
``tuned``             `svod tune` measured the plan with this boundary fastest
====================  ==================================================================

`boundaries(key, plan, ...)` computes them; `why_not_fused(explanation)` for a
`svod.Explanation` (`Explanation.why_not_fused()`); `describe_plan(plan)` names each
kernel by its ops ("max·sub·exp·sum·div"), `plan_difference(a, b)` says what a variant
fuses or splits relative to another, by op names and source lines.

>>> import svod
>>> from svod.key import compact
>>> from svod.lower import lower
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> key, _ = compact([svod.exp(x.contiguous())])  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

from svod.ir import ELEMENTWISE, MOVEMENT, REDUCTIONS, Ops
from svod.kernel import ACC, LOAD, VALID, Plan
from svod.key import GraphKey
from svod.lower.cover import const_like
from svod.ops import phrase

REASONS = ("output", "contiguous()", "matmul operand", "matmul result", "library step", "no fusion rule",
           "search budget", "size policy", "greedy planner", "reduction over other axes", "shared reduction",
           "kernel size cap", "priced higher", "tie", "tuned", "lowering")


@dataclass(frozen=True)
class Boundary:
    """One producer -> consumer edge that crosses a kernel boundary, and why."""

    producer: int  # node of the planned graph (`key`)
    consumer: int
    reason: str  # one of REASONS
    detail: str  # a sentence with the figures
    producer_label: str
    consumer_label: str
    delta_seconds: float | None = None  # price of the plan fusing it minus the plan's (None: not priced)

    def __str__(self) -> str:
        return f"{self.producer_label} -> {self.consumer_label}: {self.reason} ({self.detail})"


# ----------------------------------------------------------------------------- naming


def op_name(key: GraphKey, i: int) -> str:
    """A short name of node i's operation: `exp`, `max(axis=1)`, `matmul`, `contiguous()`."""
    n = key.nodes[i]
    if n.op is Ops.REDUCE:
        axes = n.arg[1]
        return f"{n.arg[0]}(axis={axes[0] if len(axes) == 1 else tuple(axes)})"
    if n.op in (Ops.ARGMAX, Ops.ARGMIN):
        return f"{n.op.value.lower()}(axis={n.arg})"
    if n.op is Ops.CONTIGUOUS:
        return "contiguous()"
    if n.op is Ops.BUFFER:
        return f"input {n.arg[0]}" + (" (view: offset bound at run time)" if len(n.arg) > 2 else "")
    if n.op is Ops.CONST:
        return f"const {n.arg}"
    return n.op.value.lower()


def node_label(key: GraphKey, i: int, sources: dict[int, str] | None = None) -> str:
    """`op_name` with the node's shape and, when known, its source line."""
    n = key.nodes[i]
    shape = "x".join(map(str, n.shape)) or "scalar"
    src = (sources or {}).get(i)
    return f"{op_name(key, i)} [{shape}]" + (f" at {src}" if src else "")


def kernel_ops(kernel) -> str:
    """The operations of a kernel's body in order, repeats counted: `add·mul×5·tanh`;
    a reduction is named by its combining op (`max`, `sum`); a matmul `matmul` (`+ ...`
    its epilogue); an attention kernel `attention`."""
    if kernel.attention is not None:
        return "attention"
    counts: dict[str, int] = {}
    for nd in kernel.nodes:
        if nd.op in (LOAD, VALID) or nd.op is Ops.CONST:
            continue
        if nd.op == ACC:
            name = "matmul"
        elif nd.op is Ops.REDUCE:
            name = str(nd.arg)
        elif isinstance(nd.op, Ops):
            name = nd.op.value.lower()
        else:
            name = str(nd.op).lower()
        counts[name] = counts.get(name, 0) + 1
    if not counts:
        return "copy"
    return "·".join(name if c == 1 else f"{name}×{c}" for name, c in counts.items())


def describe_plan(plan: Plan) -> str:
    """Each kernel by its ops, in execution order: `max | sub·exp·sum | div`."""
    return " | ".join(kernel_ops(k) for k in plan.kernels)


# ----------------------------------------------------------------------------- structure


def materialized(key: GraphKey, plan: Plan) -> set[int] | None:
    """Nodes of `key` the plan writes to memory (slot `n_inputs + i` holds node i, as
    `svod.lower.lower` numbers them); None when the plan was not lowered from `key`."""
    n_in = plan.n_inputs
    if n_in != len(key.inputs):
        return None
    out: set[int] = set()
    for slot, info in plan.slots.items():
        if slot < n_in:
            continue
        i = slot - n_in
        if i >= len(key.nodes) or tuple(key.nodes[i].shape) != tuple(info.shape) or \
                key.nodes[i].dtype != info.dtype:
            return None
        out.add(i)
    return out


def kernel_nodes(key: GraphKey, plan: Plan, m: set[int] | None = None) -> list[list[int]]:
    """Per kernel of `plan`, the nodes of `key` it computes (its outputs and every
    non-materialised producer below them), in graph order."""
    m = materialized(key, plan) if m is None else m
    if m is None:
        return [[] for _ in plan.kernels]
    n_in = plan.n_inputs
    out = []
    for k in plan.kernels:
        seen: set[int] = set()
        stack = [o.slot - n_in for o in k.outputs if o.slot >= n_in]
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            for s in key.nodes[i].src:
                if s not in m and key.nodes[s].op is not Ops.BUFFER:
                    stack.append(s)
        out.append(sorted(seen))
    return out


def _through_movement(key: GraphKey, i: int, m: set[int]) -> int:
    """The producer behind a chain of non-materialised movement ops."""
    while key.nodes[i].op in MOVEMENT and i not in m and key.nodes[i].src:
        i = key.nodes[i].src[0]
    return i


def edges(key: GraphKey, m: set[int]) -> list[tuple[int, int]]:
    """Boundary edges (q, c): q materialised and computed, c a consumer reading it
    (movement ops between them are looked through; c is never a bare view)."""
    consts = const_like(key)
    out: dict[tuple[int, int], None] = {}
    for c, n in enumerate(key.nodes):
        if n.op is Ops.BUFFER or c in consts or (n.op in MOVEMENT and c not in m):
            continue
        for s in n.src:
            q = _through_movement(key, s, m)
            if q in m and key.nodes[q].op is not Ops.BUFFER and q not in consts:
                out[(q, c)] = None
    return list(out)


# ----------------------------------------------------------------------------- reasons


def _fusible_by_rule(key: GraphKey, q: int, c: int, m: set[int], rulesets) -> str | None:
    """The name of the rule set that fuses q into c (through the movement ops between
    them, each fused into the next), or None."""
    from search.rules import fusing_ruleset

    chain = []  # producer -> consumer pairs from q up to c
    cur = c
    for s in key.nodes[c].src:
        if _through_movement(key, s, m) == q:
            cur = s
            break
    prod = cur
    chain.append((key.nodes[cur].op.value, key.nodes[c].op.value))
    while prod != q:
        nxt = key.nodes[prod].src[0]
        chain.append((key.nodes[nxt].op.value, key.nodes[prod].op.value))
        prod = nxt
    names = None if rulesets is None else tuple(rulesets)
    found = None
    for p, cons in chain:
        found = fusing_ruleset(p, cons, names)
        if found is None:
            return None
    return found


def _price(plan: Plan, model, machine) -> float:
    from svod.costing import plan_prices

    return sum(p.seconds for p in plan_prices(plan, model, machine))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} µs" if abs(seconds) < 1e-3 else f"{seconds * 1e3:.3f} ms"


class _Context:
    """What the reasons need beyond the graph and the plan: how it was planned."""

    def __init__(self, key, plan, m, model, machine, report, fusible, rulesets, origin):
        self.key, self.plan, self.m = key, plan, m
        self.model, self.machine = model, machine
        self.report, self.fusible, self.rulesets, self.origin = report, fusible, rulesets, origin
        self.users = key.users()
        self._alt: dict[int, tuple] = {}
        self._base: float | None = None

    @property
    def base(self) -> float:
        if self._base is None:
            self._base = _price(self.plan, self.model, self.machine)
        return self._base

    def alternative(self, q: int):
        """(plan lowered with q not materialised, or None, error text, q still forced)."""
        if q not in self._alt:
            from svod.lower import lower

            try:
                alt = lower(self.key, self.m - {q}, planner=self.plan.planner)
                am = materialized(self.key, alt) or set()
                self._alt[q] = (alt, "", q in am)
            except Exception as e:  # noqa: BLE001 - a variant that cannot be lowered is a reason
                self._alt[q] = (None, f"{type(e).__name__}: {e}", True)
        return self._alt[q]


def _forced(ctx: _Context, q: int, c: int, alt: Plan | None, err: str) -> tuple[str, str]:
    """Why the lowering keeps q materialised even when the choice says fuse it."""
    from svod.lower import build

    key = ctx.key
    n = key.nodes[q]
    if alt is None:
        return "lowering", f"the fused variant cannot be lowered ({err})"
    if n.op in REDUCTIONS:
        axes = tuple(n.arg[1]) if n.op is Ops.REDUCE else (n.arg,)
        in_shape = tuple(key.nodes[n.src[0]].shape)
        am = materialized(key, alt) or set()
        host = next((k for k, nodes in zip(alt.kernels, kernel_nodes(key, alt, am)) if c in nodes), None)
        if host is not None and (tuple(host.shape) != in_shape or
                                 (host.reduce_axes and tuple(host.reduce_axes) != axes)):
            space = "x".join(map(str, host.shape))
            over = f", reducing axes {tuple(host.reduce_axes)}" if host.reduce_axes else ""
            return ("reduction over other axes",
                    f"{op_name(key, q)} of a {'x'.join(map(str, in_shape))} value cannot run inside the kernel of "
                    f"{op_name(key, c)}, whose loop is over {space}{over}")
        readers = sum(1 for nodes in kernel_nodes(key, alt, am) if any(u in nodes for u in ctx.users[q]))
        if readers > 1:
            return "shared reduction", (f"{readers} kernels read {op_name(key, q)}: it is computed once rather "
                                        "than once in each")
    if n.op is Ops.MATMUL:
        return "matmul result", "a kernel holds one matmul with an elementwise epilogue; this one does not fit"
    am = materialized(key, alt) or set()
    where = kernel_nodes(key, alt, am)
    host = next((k for k, nodes in zip(alt.kernels, where) if c in nodes), None)
    own = next((k for k, nodes in zip(alt.kernels, where) if q in nodes), None)
    size = len(host.nodes) + len(own.nodes) if host is not None and own is not None else 0
    if size > min(build.MAX_BODY, build.MAX_DEPTH):
        return "kernel size cap", (f"one kernel computing both would have about {size} body nodes, over the "
                                   f"lowering's caps ({build.MAX_BODY} body nodes, {build.MAX_DEPTH} deep)")
    return "lowering", "the lowering keeps it materialised (a view or concatenation it cannot index through)"


def _reason(ctx: _Context, q: int, c: int) -> tuple[str, str, float | None]:
    key = ctx.key
    qn, cn = key.nodes[q], key.nodes[c]
    if q in key.outputs:
        return "output", f"{op_name(key, q)} is an output of the graph, written to memory for the caller"
    if qn.op is Ops.CONTIGUOUS:
        return "contiguous()", "the program asks for this value in memory with contiguous()"
    if cn.op is Ops.MATMUL:
        return "matmul operand", ("a matmul reads its operands from memory; only views (transposes, "
                                  "broadcasts) fuse into them")
    if cn.op is Ops.LIBRARY or qn.op is Ops.LIBRARY:
        return "library step", ("a library step (numpy's sort, LAPACK: svod/library.py) reads its operands from "
                                "memory and writes its results there")
    if qn.op is Ops.MATMUL and cn.op not in ELEMENTWISE:
        return "matmul result", f"a matmul fuses only into an elementwise epilogue, not into {phrase(cn.op)}"
    report = ctx.report
    sat = getattr(report, "saturation", None)
    planner = getattr(report, "planner", None) or ctx.plan.planner
    if planner == "greedy":
        why = getattr(report, "reason", "") or "the search did not run"
        if qn.op is Ops.MATMUL:
            return "greedy planner", f"the greedy planner runs every matmul as a BLAS step ({why})"
        return "greedy planner", f"the greedy planner materialises a value shared by heavy consumers ({why})"
    rule = _fusible_by_rule(key, q, c, ctx.m, ctx.rulesets)
    if rule is None:
        return "no fusion rule", f"no enabled rule set fuses {phrase(qn.op)} into {phrase(cn.op)}"
    if ctx.fusible is not None and not _edge_fusible(ctx, q, c):
        stop = getattr(sat, "stop_reason", "saturated")
        if stop != "saturated":
            return "search budget", f"saturation stopped ({stop}) before {rule} added the fused variant"
        return "no fusion rule", f"{rule} did not apply here (an operand position its rules do not cover)"
    reason_text = getattr(report, "reason", "") or ""
    if reason_text.startswith("size policy") and getattr(report, "extraction", None) is None:
        first = reason_text.split(" (")[0]  # the outer clause: regions of regions nest their reasons
        return "size policy", f"{first}: this edge crosses two regions, each searched on its own"
    alt, err, still = ctx.alternative(q)
    if still:
        r, d = _forced(ctx, q, c, alt, err)
        return r, d, None
    delta = _price(alt, ctx.model, ctx.machine) - ctx.base
    fused = (f"fusing it gives {len(alt.kernels)} kernel(s) priced {_us(ctx.base + delta)} against "
             f"{_us(ctx.base)}")
    users = len(set(ctx.users[q]))
    recompute = f" ({op_name(key, q)} would be recomputed by its {users} consumers)" if users > 1 else ""
    if ctx.origin == "tuned":
        return "tuned", f"svod tune measured this plan fastest; {fused}", delta
    if delta > 0:
        return "priced higher", f"{fused}: {_us(delta)} more{recompute}", delta
    ext = getattr(report, "extraction", None)
    if ext is not None and ext.exact and ext.stop_reason == "complete" and delta >= -0.01 * ctx.base:
        return "tie", f"{fused}: within 1%, and the plan with fewer kernels goes first", delta
    how = "local search" if ext is not None and not ext.exact else "extraction"
    stop = getattr(ext, "stop_reason", "?")
    return "search budget", f"{fused}, {_us(-delta)} less: the {how} ({stop}) did not reach that variant", delta


def _edge_fusible(ctx: _Context, q: int, c: int) -> bool:
    """Whether every pair on the path q -> (views) -> c is a fusible edge of the e-graph."""
    key, m = ctx.key, ctx.m
    cur = next((s for s in key.nodes[c].src if _through_movement(key, s, m) == q), None)
    if cur is None or (c, cur) not in ctx.fusible:
        return False
    while cur != q:
        nxt = key.nodes[cur].src[0]
        if (cur, nxt) not in ctx.fusible:
            return False
        cur = nxt
    return True


def boundaries(key: GraphKey, plan: Plan, *, model=None, machine=None, report=None, fusible=None,
               rulesets=None, origin: str = "search", sources: dict[int, str] | None = None) -> list[Boundary]:
    """Every boundary edge of `plan` (lowered from `key`) with its reason.

    `report` is the search's `SearchReport` (planner, saturation stop, extraction), and
    `fusible` the e-graph's fusible (consumer, producer) pairs when known (else rule
    sets decide); `origin="tuned"` for a plan `svod tune` chose; `sources`: node ->
    source line for the labels. Raises ValueError when the plan is not one of `key`."""
    from svod.costing import Machine, RooflineModel

    m = materialized(key, plan)
    if m is None:
        raise ValueError("why-not-fused: the plan was not lowered from this graph (its slots do not match)")
    ctx = _Context(key, plan, m, model or RooflineModel(), machine or Machine.host(), report, fusible, rulesets,
                   origin)
    out = []
    # kernels that store a value and use it in registers (svod.lower.merge): the edge is
    # a store, not a launch between the two
    together = [set(ns) for ns, k in zip(kernel_nodes(key, plan, m), plan.kernels) if len(k.outputs) > 1]
    for q, c in edges(key, m):
        r = _reason(ctx, q, c)
        reason, detail = r[0], r[1]
        delta = r[2] if len(r) > 2 else None
        if any(q in ns and c in ns for ns in together):
            detail = f"{detail}; stored, and used in registers by its consumer in the same kernel"
        out.append(Boundary(q, c, reason, detail, node_label(key, q, sources), node_label(key, c, sources), delta))
    return out


def _chosen_program(e, key: GraphKey):
    """The explanation's chosen program (`search.extract.Decoded`) when it is the graph
    `key` the plan was made on: after a rewrite won, the program as written (the e-graph's
    fewest-ops decoding) is another graph, whose edges and node map do not apply."""
    program = getattr(e, "program", None)
    return program if program is not None and getattr(program, "key", None) == key else None


def why_not_fused(explanation) -> list[Boundary]:
    """`boundaries` of a `svod.Explanation`'s chosen plan, with node labels of the
    graph the user wrote (the search plans a decoded copy; sources map back)."""
    e = explanation
    report = e.report
    origin = "tuned" if str(getattr(e, "origin", "") or "").startswith("tun") else "search"
    # the plan analysed: the search's pick (its plan passes ran in the lowering: what the
    # search priced is what runs) unless realize runs svod tune's choice
    chosen = e.plan if origin == "tuned" else getattr(e, "searched", None) or e.plan
    ext = getattr(report, "extraction", None)
    key = ext.key if ext is not None and materialized(ext.key, chosen) is not None else e.key
    fusible = None
    program = _chosen_program(e, key)
    if program is not None:
        fusible = program.fusible
    elif e.egraph_json and key is not e.key:
        from search.extract import decode

        _, fusible, _ = decode(e.egraph_json, e.key)
    sources = getattr(e, "sources", None) or {}
    if sources and key is not e.key:
        if program is not None:
            back = dict(program.orig_of)
        else:
            from svod.viz import match_nodes

            back = match_nodes(key, e.key)
        sources = {d: sources[o] for d, o in back.items() if o in sources}
    rulesets = getattr(getattr(report, "saturation", None), "rulesets", None) or None
    return boundaries(key, chosen, model=e.cost_model, machine=e.machine, report=report, fusible=fusible,
                      rulesets=rulesets, origin=origin, sources=sources)


def debug_text(key: GraphKey, plan: Plan, report=None, model=None) -> str:
    """The why-not-fused lines SVOD_DEBUG prints for a newly planned graph (`report`: the
    search's, from `svod.engine.LAST_SEARCH`; None for a greedy or loaded plan)."""
    ext = getattr(report, "extraction", None)
    planned = ext.key if ext is not None and materialized(ext.key, plan) is not None else key
    try:
        bs = boundaries(planned, plan, model=model, report=report,
                        rulesets=getattr(getattr(report, "saturation", None), "rulesets", None) or None)
    except Exception as e:  # noqa: BLE001 - a debug line, never a failure
        return f"svod why not fused {key.hash[:12]}: not available ({type(e).__name__}: {e})"
    return f"svod why not fused {key.hash[:12]}:\n{format_boundaries(bs)}"


def format_boundaries(bs: list[Boundary]) -> str:
    """One line per boundary, grouped by reason."""
    if not bs:
        return "no kernel boundary between two computed values: everything is fused"
    lines = []
    for b in sorted(bs, key=lambda b: (REASONS.index(b.reason) if b.reason in REASONS else 99, b.producer)):
        lines.append(f"  {b.producer_label} -> {b.consumer_label}\n      {b.reason}: {b.detail}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- variants


def plan_difference(plan: Plan, chosen: Plan, key: GraphKey, sources: dict[int, str] | None = None,
                    limit: int = 4) -> str:
    """What `plan` does differently from `chosen` (both lowered from `key`), by op
    names: `splits after exp [4x8]; fuses sum(axis=1) [4x1]`; "same boundaries" when
    none differ; the kernels' ops when the plans cannot be compared."""
    a, b = materialized(key, plan), materialized(key, chosen)
    if a is None or b is None:
        return describe_plan(plan)
    more, fewer = sorted(a - b), sorted(b - a)
    parts = []
    if more:
        parts.append("materialises " + ", ".join(node_label(key, i, sources) for i in more[:limit]) +
                     (f" and {len(more) - limit} more" if len(more) > limit else ""))
    if fewer:
        parts.append("fuses " + ", ".join(node_label(key, i, sources) for i in fewer[:limit]) +
                     (f" and {len(fewer) - limit} more" if len(fewer) > limit else "") + " into its consumers")
    return "; ".join(parts) or "the same boundaries, kernels ordered or merged differently"
