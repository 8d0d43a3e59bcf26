"""The oracle: the optimal plan of a small graph by brute force, from the Kernel spec
alone — no e-graph, no rules. Every cover of the graph by legal kernels is a choice of
which values to materialise; `svod.lower.lower` (the lowering stage) builds the kernels
of each choice (recomputing every value that is not materialised, in each kernel that
reads it, then the plan passes) and the cost model prices them. Algebraic rewrites are
off.

Used by the search's optimality tests and by `svod costmodel report` (every variant of
a workload, measured). Broadcast constants are always inlined (a kernel that writes a
constant is never cheaper than reading it as a constant).

With algebra: `reachable_programs` applies the rule sets of search/rules.py, written
again here over GraphKeys from their definitions (docs/algebra.md), to a bounded depth,
and `optimum_over_programs` takes the cheapest cover of any of them: the search, which
saturates the same rules in the e-graph, must never choose a more expensive plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from svod.costing import CostModel, Machine, RooflineModel, fewer_kernels_on_ties, plan_seconds
from svod.ir import Ops, _infer_shape
from svod.kernel import Plan
from svod.key import GraphKey, KeyNode
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


# ----------------------------------------------------------------------------- rewrites
#
# The rule sets of search/rules.py written again over GraphKeys, in Python, from their
# definitions (docs/algebra.md) — no e-graph: the programs they reach from a graph, to a
# bounded depth, and the cheapest cover of each, bound what the search may find.


def _sum_is(key: GraphKey, i: int):
    """The `SumIs` fact of node i (a float sum of an operand of its own dtype), or None."""
    n = key.nodes[i]
    if n.op is not Ops.REDUCE or n.arg[0] != "sum" or not n.dtype.is_float:
        return None
    x = key.nodes[n.src[0]]
    return (n.arg[1], x.shape, n.dtype) if x.dtype == n.dtype else None


def _inverse(p: tuple[int, ...], q: tuple[int, ...]) -> bool:
    """PERMUTE q after PERMUTE p is the identity."""
    return tuple(p[j] for j in q) == tuple(range(len(p)))


class _Editor:
    """A GraphKey being rewritten: new nodes appended, a node's uses redirected."""

    def __init__(self, key: GraphKey):
        self.key = key
        self.nodes = list(key.nodes)

    def new(self, template: int, src: tuple[int, ...]) -> int:
        """Template node's operation on `src` (the e-graph's template terms: the dtype
        is the template's, a movement op's its source's; the shape follows the sources)."""
        o = self.key.nodes[template]
        ins = tuple(self.nodes[s] for s in src)
        dtype = ins[0].dtype if o.op in (Ops.PERMUTE, Ops.RESHAPE, Ops.EXPAND) else o.dtype
        self.nodes.append(KeyNode(o.op, dtype, src, o.arg, _infer_shape(o.op, ins, o.arg)))
        return len(self.nodes) - 1

    def make(self, op: Ops, dtype, src: tuple[int, ...], arg=None) -> int:
        """A node with a new argument (the encoder templates' terms, search.language)."""
        ins = tuple(self.nodes[s] for s in src)
        self.nodes.append(KeyNode(op, dtype, src, arg, _infer_shape(op, ins, arg)))
        return len(self.nodes) - 1

    def const(self, value, dtype, shape: tuple[int, ...]) -> int:
        """A constant broadcast to `shape` (as `Templates.const`: CONST, RESHAPE, EXPAND)."""
        c = self.make(Ops.CONST, dtype, (), value)
        if not shape:
            return c
        r = self.make(Ops.RESHAPE, dtype, (c,), (1,) * len(shape))
        return r if all(d == 1 for d in shape) else self.make(Ops.EXPAND, dtype, (r,), tuple(shape))

    def replace(self, i: int, by: int) -> GraphKey:
        nodes = [KeyNode(n.op, n.dtype, tuple(by if s == i else s for s in n.src), n.arg, n.shape)
                 if j != i else n for j, n in enumerate(self.nodes)]
        outs = tuple(by if o == i else o for o in self.key.outputs)
        return _rebuild(nodes, outs)


def _rebuild(nodes: list[KeyNode], outputs: tuple[int, ...]) -> GraphKey:
    """The nodes reachable from `outputs`, in topological order, equal nodes merged; an
    output that is an input or another output is copied (as the search's decoder does)."""
    out_nodes: list[KeyNode] = []
    index: dict[bytes, int] = {}
    done: dict[int, int] = {}

    def add(n: KeyNode) -> int:
        k = n.encode()
        if k not in index:
            index[k] = len(out_nodes)
            out_nodes.append(n)
        return index[k]

    for o in outputs:
        stack = [(o, False)]
        while stack:
            i, ready = stack.pop()
            if i in done:
                continue
            n = nodes[i]
            if not ready:
                stack.append((i, True))
                stack.extend((s, False) for s in n.src if s not in done)
                continue
            done[i] = add(KeyNode(n.op, n.dtype, tuple(done[s] for s in n.src), n.arg, n.shape))
    outs: list[int] = []
    for o in outputs:
        v = done[o]
        if out_nodes[v].op is Ops.BUFFER or v in outs:
            n = out_nodes[v]
            v = add(KeyNode(Ops.CONTIGUOUS, n.dtype, (v,), None, n.shape))
        outs.append(v)
    return GraphKey(tuple(out_nodes), tuple(outs))


def rewrites(key: GraphKey, rulesets) -> list[tuple[str, GraphKey]]:
    """Every program one rule application away from `key`: (rule set, program)."""
    from search import algebra_movement as M
    from search import rules as R
    from search.language import const_kind, swaps_last

    names = set(rulesets)
    out: list[tuple[str, GraphKey]] = []
    nodes = key.nodes
    for i, n in enumerate(nodes):
        src = n.src
        if "algebra" in names:
            x = None
            if len(src) == 2:
                kinds = [const_kind(key, s) for s in src]
                x = next((src[1 - pos] for op, pos, kind in R.CONST_IDENTITIES
                          if n.op.value == op and kinds[pos] == kind), None)
            if x is None and n.op is Ops.NEG and nodes[src[0]].op is Ops.NEG:
                x = nodes[src[0]].src[0]
            if x is None and n.op in (Ops.MAX, Ops.MIN) and src[0] == src[1]:
                x = src[0]
            if x is None and n.op is Ops.WHERE and src[1] == src[2]:
                x = src[1]
            if x is not None:
                out.append(("algebra", _Editor(key).replace(i, x)))
        if "movement" in names:
            if n.op is Ops.PERMUTE and nodes[src[0]].op is Ops.PERMUTE and _inverse(nodes[src[0]].arg, n.arg):
                out.append(("movement", _Editor(key).replace(i, nodes[src[0]].src[0])))
            if n.op.value in R.POINTWISE_OPS and 1 <= len(src) <= 2 and all(nodes[s].op is Ops.PERMUTE for s in src) \
                    and len({nodes[s].arg for s in src}) == 1:
                ed = _Editor(key)
                inner = ed.new(i, tuple(nodes[s].src[0] for s in src))
                out.append(("movement", ed.replace(i, ed.new(src[0], (inner,)))))
        if "movement" in names and n.op is Ops.PERMUTE and nodes[src[0]].op is Ops.PERMUTE \
                and not _inverse(nodes[src[0]].arg, n.arg):  # T_q(T_p(x)) -> T_{p∘q}(x)
            ed = _Editor(key)
            inner = nodes[src[0]]
            out.append(("movement", ed.replace(i, ed.make(Ops.PERMUTE, inner.dtype, (inner.src[0],),
                                                          M.compose(inner.arg, n.arg)))))
        if "movement_reduce" in names and n.op is Ops.REDUCE and nodes[src[0]].op is Ops.PERMUTE:
            t = nodes[src[0]]  # R_K(T_p(x)) -> T_p(R_{p[K]}(x))
            arg = M.reduce_through(n.arg, t.arg)
            if arg is not None:
                ed = _Editor(key)
                r = ed.make(Ops.REDUCE, n.dtype, (t.src[0],), arg)
                out.append(("movement_reduce", ed.replace(i, ed.new(src[0], (r,)))))
        if "movement_reshape" in names:
            out += _reshape_rewrites(key, i)
        if "matmul_assoc" in names and n.op is Ops.MATMUL:
            a, c = src
            if nodes[a].op is Ops.MATMUL:  # (A @ B) @ C -> A @ (B @ C)
                ed = _Editor(key)
                inner = ed.new(a, (nodes[a].src[1], c))
                out.append(("matmul_assoc", ed.replace(i, ed.new(i, (nodes[a].src[0], inner)))))
            if nodes[c].op is Ops.MATMUL:  # A @ (B @ C) -> (A @ B) @ C
                ed = _Editor(key)
                inner = ed.new(c, (a, nodes[c].src[0]))
                out.append(("matmul_assoc", ed.replace(i, ed.new(i, (inner, nodes[c].src[1])))))
        if "sum_merge" in names and n.op in (Ops.ADD, Ops.SUB):
            p, q = src
            ra = None
            if nodes[p].op is Ops.RESHAPE and nodes[q].op is Ops.RESHAPE:
                ra, p, q = p, nodes[p].src[0], nodes[q].src[0]
            s1, s2 = _sum_is(key, p), _sum_is(key, q)
            if s1 is not None and s1 == s2:
                ed = _Editor(key)
                merged = ed.new(p, (ed.new(i, (nodes[p].src[0], nodes[q].src[0])),))
                out.append(("sum_merge", ed.replace(i, ed.new(ra, (merged,)) if ra is not None else merged)))
        if "matmul_distribute" in names and n.op in (Ops.ADD, Ops.SUB) and \
                all(nodes[s].op is Ops.MATMUL for s in src):
            (a1, b1), (a2, b2) = nodes[src[0]].src, nodes[src[1]].src
            if a1 == a2:  # A @ B +- A @ C -> A @ (B +- C)
                ed = _Editor(key)
                out.append(("matmul_distribute", ed.replace(i, ed.new(src[0], (a1, ed.new(i, (b1, b2)))))))
            if b1 == b2:  # B @ A +- C @ A -> (B +- C) @ A
                ed = _Editor(key)
                out.append(("matmul_distribute", ed.replace(i, ed.new(src[0], (ed.new(i, (a1, a2)), b1)))))
        if "matmul_transpose" in names:
            if n.op is Ops.PERMUTE and swaps_last(n.arg) and nodes[src[0]].op is Ops.MATMUL:
                a, b = nodes[src[0]].src
                ed = _Editor(key)
                out.append(("matmul_transpose", ed.replace(i, ed.new(src[0], (ed.new(i, (b,)), ed.new(i, (a,)))))))
            if n.op is Ops.MATMUL and all(nodes[s].op is Ops.PERMUTE and swaps_last(nodes[s].arg) for s in src):
                x, y = (nodes[s].src[0] for s in src)
                ed = _Editor(key)
                out.append(("matmul_transpose", ed.replace(i, ed.new(src[0], (ed.new(i, (y, x)),)))))
        if "sum_scale" in names and (hit := R.scale_match(key, i)) is not None:
            k, v, pos, _ = hit  # sum(c * x) -> c * sum(x) + 0.0, ...
            prod = src[0]
            x = nodes[prod].src[1 - pos]
            ed = _Editor(key)
            s, ct = ed.new(i, (x,)), ed.const(v, n.dtype, n.shape)
            p = ed.new(prod, (s, ct) if pos == 1 else (ct, s))
            out.append(("sum_scale", ed.replace(i, ed.make(Ops.ADD, n.dtype, (p, ed.const(0.0, n.dtype, n.shape))))))
        if "sum_bcast" in names and (hit := R.bcast_match(key, i)) is not None:
            y, count, rest = hit  # sum(broadcast(y)) -> y' * count + 0.0
            ed = _Editor(key)
            if rest:
                y = ed.make(Ops.REDUCE, n.dtype, (y,), ("sum", rest))
            p = ed.make(Ops.MUL, n.dtype, (y, ed.const(float(count), n.dtype, n.shape)))
            out.append(("sum_bcast", ed.replace(i, ed.make(Ops.ADD, n.dtype, (p, ed.const(0.0, n.dtype, n.shape))))))
        if "sum_bcast" in names and (hit := R.bcast_reshape_match(key, i)) is not None:
            at, y, count = hit  # reshape(sum(broadcast(y))) -> y at the reshape's shape * count + 0.0
            ed = _Editor(key)
            if at is None:
                at = ed.make(Ops.RESHAPE, nodes[y].dtype, (y,), tuple(n.shape))
            p = ed.make(Ops.MUL, n.dtype, (at, ed.const(float(count), n.dtype, n.shape)))
            out.append(("sum_bcast", ed.replace(i, ed.make(Ops.ADD, n.dtype, (p, ed.const(0.0, n.dtype, n.shape))))))
        if "minmax_shift" in names and (hit := R.shift_match(key, i)) is not None:
            k, v, pos, op = hit  # max(x + c) -> max(x) + c, max(c - x) -> c - min(x)
            a = src[0]
            x = nodes[a].src[1 - pos]
            ed = _Editor(key)
            ct = ed.const(v, n.dtype, n.shape)
            if op == "SUB" and pos == 0:
                flip = "min" if n.arg[0] == "max" else "max"
                s = ed.make(Ops.REDUCE, n.dtype, (x,), (flip, n.arg[1]))
            else:
                s = ed.new(i, (x,))
            out.append(("minmax_shift", ed.replace(i, ed.new(a, (s, ct) if pos == 1 else (ct, s)))))
    from search import contract  # contraction forms and sibling products: their own module

    out += contract.rewritten_programs(key, rulesets)
    return out


def _reshape_rewrites(key: GraphKey, i: int) -> list[tuple[str, GraphKey]]:
    """`movement_reshape` at node i: reshapes composed or cancelled, reshapes and
    broadcasts (not of constants, as the fact hooks) moved out of pointwise ops, a
    permute moved below a reshape whose groups of axes it keeps together."""
    from search import algebra_movement as M
    from search import rules as R

    nodes, n = key.nodes, key.nodes[i]
    out = []
    views = (Ops.RESHAPE, Ops.EXPAND)
    if n.op is Ops.RESHAPE and nodes[n.src[0]].op is Ops.RESHAPE and not M._of_const(key, n.src[0]):
        x = nodes[n.src[0]].src[0]
        ed = _Editor(key)
        by = x if nodes[x].shape == n.shape else ed.make(Ops.RESHAPE, n.dtype, (x,), n.arg)
        out.append(("movement_reshape", ed.replace(i, by)))
    if n.op is Ops.PERMUTE and nodes[n.src[0]].op is Ops.RESHAPE and not M._of_const(key, n.src[0]):
        r = nodes[n.src[0]]  # T_p(reshape(x)) -> reshape'(T_p'(x)) when p moves whole groups of axes
        x = r.src[0]
        hit = M.permute_through_reshape(nodes[x].shape, r.shape, n.arg)
        if hit is not None:
            ed = _Editor(key)
            t = ed.make(Ops.PERMUTE, n.dtype, (x,), hit[0])
            out.append(("movement_reshape", ed.replace(i, ed.make(Ops.RESHAPE, n.dtype, (t,), hit[2]))))
    if n.op.value in R.POINTWISE_OPS and 1 <= len(n.src) <= 2:
        ins = [nodes[s] for s in n.src]
        if all(m.op in views and m.op is ins[0].op and not M._of_const(key, s) for m, s in zip(ins, n.src)) \
                and len({(m.arg, nodes[m.src[0]].shape) for m in ins}) == 1:
            ed = _Editor(key)
            inner = ed.new(i, tuple(m.src[0] for m in ins))
            out.append(("movement_reshape", ed.replace(i, ed.new(n.src[0], (inner,)))))
    return out


def reachable_programs(key: GraphKey, rulesets, depth: int = 3, limit: int = 200) -> list[GraphKey]:
    """The programs the rule sets reach from `key` in at most `depth` rewrites (`key`
    first; breadth first, at most `limit` programs)."""
    seen = {key.hash: key}
    frontier = [key]
    for _ in range(depth):
        nxt = []
        for k in frontier:
            for _, p in rewrites(k, rulesets):
                if p.hash not in seen and len(seen) < limit:
                    seen[p.hash] = p
                    nxt.append(p)
        frontier = nxt
    return list(seen.values())


def optimum_over_programs(key: GraphKey, rulesets, model: CostModel | None = None, machine: Machine | None = None,
                          depth: int = 3) -> tuple[GraphKey, Cover]:
    """The cheapest cover of any program reachable from `key` (`reachable_programs`)."""
    best = None
    for p in reachable_programs(key, rulesets, depth):
        c = all_covers(p, model, machine)[0]
        if best is None or c.seconds < best[1].seconds:
            best = (p, c)
    return best
