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
   boundary that legality forces, builds kernel kinds — the attention kernel where the
   choice inlines a softmax into a matmul, search/kinds.py — and runs the plan passes)
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

from search.algebra_movement import movement_form
from search.language import Templates, template_facts
from svod.costing import CostModel, Machine, fewer_kernels_on_ties
from svod.ir import BINARY, Ops, _infer_shape
from svod.kernel import Plan
from svod.key import GraphKey, KeyNode
from svod.lower import candidates, greedy_boundaries, initial_materialized, lower, subsets

INF = float("inf")
# ops whose operands must share one dtype (a new term of others is refused)
BINARY_SAME = BINARY | {Ops.MATMUL}


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


def _kind_operands(key: GraphKey) -> set[int]:
    """The nodes read as a MATMUL's A operand (what a kernel kind inlines)."""
    return {n.src[0] for n in key.nodes if n.op is Ops.MATMUL}


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
        # read once: the exploration decodes hundreds of programs over the same e-graph
        self._kids = {nid: [self.nodes[c]["eclass"] for c in n["children"]] for nid, n in self.nodes.items()}
        self.items_memo: dict[str, list[str]] = {}  # list class -> its item classes (`_list_items`)

    def cls(self, nid: str) -> str:
        return self.nodes[nid]["eclass"]

    def op(self, nid: str) -> str:
        return self.nodes[nid]["op"]

    def child_classes(self, nid: str) -> list[str]:
        return self._kids[nid]

    def prim(self, nid: str) -> str:
        return self.nodes[nid]["op"]


def _body_classes(eg: _EG) -> dict[int, str]:
    """Per original node: the class of its `(Body i)` handle (its own expression)."""
    return {int(eg.prim(n["children"][0])): n["eclass"] for n in eg.nodes.values() if n["op"] == "Body"}


# the price of a rewritten e-node in the fewest-ops choice of representatives: on a tie,
# the program as written wins (the extraction then prices the rewrites with the cost model)
NEW_NODE = 1e-3


def _costs(eg: _EG, body: dict[int, str] | None = None):
    """Fewest-ops cost per class and its representative node (worklist to a fixpoint).
    An E-node outside its template's own class (made by a rewrite) costs `NEW_NODE`
    more, so ties keep the program as written."""
    cost: dict[str, float] = defaultdict(lambda: INF)
    rep: dict[str, str] = {}
    body = body if body is not None else _body_classes(eg)

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
            own = body.get(int(eg.prim(kids[1]))) == eg.cls(nid)
            return (1.0 if own else 1.0 + NEW_NODE) + cost[eg.cls(kids[2])]
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
    """F-classes of a source list (lists are never unioned: one Cons per class, so the
    items do not depend on `rep` and are memoised per list class)."""
    hit = eg.items_memo.get(fl_class)
    if hit is not None:
        return hit
    out = []
    c = fl_class
    single = True
    while True:
        single &= len(eg.classes[c]) == 1
        nid = rep.get(c) or eg.classes[c][0]
        if eg.op(nid) != "Cons":
            break
        h, t = eg.child_classes(nid)
        out.append(h)
        c = t
    if single:
        eg.items_memo[fl_class] = out
    return out


class Cycle(Exception):
    """A choice of representatives that makes a value depend on itself."""


class _Decoder:
    def __init__(self, eg: _EG, key: GraphKey, rep: dict, body: dict[int, str] | None = None,
                 base: dict | None = None, templates: Templates | None = None):
        self.eg, self.key, self.rep = eg, key, rep
        self.templates = templates if templates is not None else Templates(key)
        # the fewest-ops representatives: an E-node chosen in a class it is itself an
        # operand of (`x * 1` in the class of `x`) reads that operand as ("base", class)
        self.base = base if base is not None else rep
        self.body = body if body is not None else _body_classes(eg)
        self.nodes: list[KeyNode] = []
        self.index: dict[bytes, int] = {}  # by encoding: KeyNode equality has 0.0 == -0.0
        self.value: dict[str, int] = {}  # class -> decoded node index
        self.leaf_of = {n.arg[0]: i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER}
        self.orig_of: dict[int, int] = {}  # decoded node -> original node id
        self.made: dict[int, str] = {}  # decoded node -> the class it decodes (E-classes)

    def add(self, n: KeyNode, orig: int | None = None) -> int:
        k = n.encode()
        if k not in self.index:
            self.index[k] = len(self.nodes)
            self.nodes.append(n)
        if orig is not None:  # (a node a rule made first, e.g. a constant, may also be an original one)
            self.orig_of.setdefault(self.index[k], orig)
        return self.index[k]

    def decode(self, cls: str) -> int:
        """The decoded node of an F- or T-class (iterative post-order); raises `Cycle`
        when the representatives make a value its own operand."""
        stack = [(cls, False)]
        pending: set[str] = set()
        while stack:
            c, ready = stack.pop()
            if c in self.value:
                continue
            if not ready and c in pending:
                raise Cycle(c)
            nid = self.base[c[1]] if isinstance(c, tuple) else self.rep[c]
            op = self.eg.op(nid)
            deps = self._deps(nid, op, c)
            if not ready:
                pending.add(c)
                stack.append((c, True))
                stack.extend((d, False) for d in deps if d not in self.value)
                continue
            pending.discard(c)
            if op in ("Kernel", "Load"):
                self.value[c] = self.value[deps[0]]
            elif op == "Input":
                k = int(self.eg.prim(self.eg.nodes[nid]["children"][0]))
                i = self.leaf_of[k]
                self.value[c] = self.add(self.key.nodes[i], i)
            elif op == "E":
                i = int(self.eg.prim(self.eg.nodes[nid]["children"][1]))
                src = tuple(self.value[d] for d in deps)
                node = self._node(i, src)
                cc = c[1] if isinstance(c, tuple) else c
                own = self.body.get(i) == cc
                self.value[c] = self.add(node, i if own else None)
                self.made.setdefault(self.value[c], cc)
            else:
                raise AssertionError(f"decode: unexpected e-node {op}")
        return self.value[cls]

    def _node(self, i: int, src: tuple[int, ...]) -> KeyNode:
        """Template node i's operation on decoded sources `src`: the template's own node
        when the sources have its operands' shapes and dtypes, else a new node whose shape
        and dtype follow from the sources (a node made by a rewrite). Ids past the key are
        the encoder's templates (`search.language.Templates`): always a new node. An
        ill-typed term raises `Cycle` (refused: never lowered)."""
        if i >= len(self.key.nodes):
            return self._new_node(i, src)
        o = self.key.nodes[i]
        ins = [self.nodes[s] for s in src]
        if all(a.shape == self.key.nodes[b].shape and a.dtype == self.key.nodes[b].dtype
               for a, b in zip(ins, o.src)) and len(ins) == len(o.src):
            return KeyNode(o.op, o.dtype, src, o.arg, o.shape)
        if o.op is Ops.MATMUL and (len(ins) != 2 or ins[0].dtype != ins[1].dtype):
            raise Cycle(f"decode: a rewritten matmul of {[n.dtype for n in ins]}")
        if o.op in (Ops.PERMUTE, Ops.RESHAPE, Ops.EXPAND):
            dtype = ins[0].dtype
        elif ins and any(n.dtype != self.key.nodes[b].dtype for n, b in zip(ins, o.src)):
            raise Cycle(f"decode: a rewritten {o.op.value} of other dtypes")
        else:
            dtype = o.dtype
        try:
            shape = _infer_shape(o.op, tuple(ins), o.arg)
        except AssertionError as e:  # a rule made an ill-shaped term: not a program
            raise Cycle(f"decode: {e}") from None
        return KeyNode(o.op, dtype, src, o.arg, shape)

    def _new_node(self, i: int, src: tuple[int, ...]) -> KeyNode:
        """A node of encoder template i (an operation with a new argument) on `src`."""
        if i - self.templates.base >= len(self.templates.extra):
            raise Cycle(f"decode: no template {i} (the e-graph was encoded with other templates)")
        t = self.templates.get(i)
        ins = tuple(self.nodes[s] for s in src)
        if t.operand is not None and any(n.dtype is not t.operand for n in ins):
            raise Cycle(f"decode: a rewritten {t.op.value} of {[n.dtype.name for n in ins]}, "
                        f"not {t.operand.name}")
        if t.shape_in is not None and any(n.shape != t.shape_in for n in ins):
            raise Cycle(f"decode: a {t.op.value} template of {t.shape_in} over {[n.shape for n in ins]}")
        if t.op is Ops.CONST:
            if ins or t.dtype is None:
                raise Cycle("decode: a constant template with sources or no dtype")
            return KeyNode(Ops.CONST, t.dtype, (), t.arg, ())
        if not ins:
            raise Cycle(f"decode: a {t.op.value} template without sources")
        if t.op in BINARY_SAME and any(n.dtype is not ins[0].dtype for n in ins):
            raise Cycle(f"decode: a rewritten {t.op.value} of {[n.dtype.name for n in ins]}")
        dtype = t.dtype if t.dtype is not None else ins[0].dtype
        try:
            shape = _infer_shape(t.op, ins, t.arg)
        except (AssertionError, IndexError, TypeError) as e:  # an ill-shaped term: not a program
            raise Cycle(f"decode: {e}") from None
        return KeyNode(t.op, dtype, tuple(src), t.arg, shape)

    def _deps(self, nid: str, op: str, c=None) -> list:
        kids = self.eg.child_classes(nid)
        if op in ("Kernel", "Load"):
            return [kids[0]]
        if op == "E":
            items = _list_items(self.eg, self.rep, kids[2])
            if isinstance(c, str) and self.rep.get(c) != self.base.get(c):
                items = [("base", d) if d == c else d for d in items]
            return items
        return []


def _tensor_classes(eg: _EG) -> dict[int, str]:
    """Per original node: its T-class, found through its `(Node i)` handle."""
    return {int(eg.prim(n["children"][0])): n["eclass"] for n in eg.nodes.values() if n["op"] == "Node"}


@dataclass
class Decoded:
    """One program read back from the e-graph: its GraphKey, fusible edges, decoded node
    -> original node, and the rewrites it uses (decoded node -> rule sets)."""

    key: GraphKey
    fusible: set
    orig_of: dict
    rewrites: dict = field(default_factory=dict)
    choice: dict = field(default_factory=dict)  # class -> e-node overriding the fewest-ops representative
    classes: tuple = ()  # the E-classes the program computes (where another choice may apply)
    replaced: dict = field(default_factory=dict)  # original node -> (decoded node, rule sets) where rewritten
    pending: object = field(default=None, repr=False, compare=False)  # `Program.complete`'s input (lazy decode)


class Program:
    """The saturated e-graph of one search, ready to decode programs: the fewest-ops one
    (`decode()`), or one with other representatives in some classes (`decode(choice)`)."""

    def __init__(self, js: dict, key: GraphKey, templates: Templates | None = None):
        self.eg = eg = _EG(js)
        self.key = key
        # the encoder's templates (ids past the key); rebuilt from the key when not given
        self.templates = templates if templates is not None else template_facts(key)[0]
        self.body = _body_classes(eg)
        self.cost, self.rep = _costs(eg, self.body)
        self.t_of = _tensor_classes(eg)
        self.marks: dict[str, set[str]] = defaultdict(set)  # class -> rule sets that rewrote it
        self._e_classes: set[str] | None = None  # classes holding an E-node (built on first decode)
        for n in eg.nodes.values():
            if n["op"] == "Rewritten":
                c, name = n["children"]
                self.marks[eg.cls(c)].add(eg.prim(name).strip('"'))

    def reps(self, choice: dict | None) -> tuple[dict, dict]:
        """(representatives, representatives of self-operands) under `choice`: class ->
        e-node, or (e-node, e-node of its operand in its own class) for an e-node that
        reads its own class (`x * 1` chosen in the class of `x`, over a rewritten `x`)."""
        if not choice:
            return self.rep, self.rep
        rep, base = dict(self.rep), dict(self.rep)
        for c, v in choice.items():
            if isinstance(v, tuple):
                rep[c], base[c] = v
            else:
                rep[c] = v
        return rep, base

    def self_operand(self, nid: str) -> bool:
        """Whether E-node `nid` reads its own class (directly)."""
        c = self.eg.cls(nid)
        return c in _list_items(self.eg, self.rep, self.eg.child_classes(nid)[2])

    def alternatives(self, cls: str, rep: dict) -> list[str]:
        """The E-nodes of `cls` that decode to a different program from `rep`'s choice
        there (fusion variants of one node are one program), each with finite cost."""
        eg = self.eg
        seen: dict[tuple, str] = {}
        for nid in eg.classes[cls]:
            if eg.op(nid) != "E":
                continue
            kids = eg.child_classes(nid)
            if any(self.cost[c] == INF for c in _list_items(eg, rep, kids[2]) if c != cls):
                continue
            sig = (eg.prim(eg.nodes[nid]["children"][0]), eg.prim(eg.nodes[nid]["children"][1]),
                   tuple(self._value_class(c, rep) for c in _list_items(eg, rep, kids[2])))
            seen.setdefault(sig, nid)
        cur = rep.get(cls)
        if cur is None:
            return []
        if eg.op(cur) != "E":  # a value a rewrite made equal to another one: each E-node is another program
            return list(seen.values())
        kids = eg.child_classes(cur)
        mine = (eg.prim(eg.nodes[cur]["children"][0]), eg.prim(eg.nodes[cur]["children"][1]),
                tuple(self._value_class(c, rep) for c in _list_items(eg, rep, kids[2])))
        return [nid for sig, nid in seen.items() if sig != mine]

    def _value_class(self, c: str, rep: dict) -> str:
        """The class whose expression an F- or T-class computes (through Load/Kernel)."""
        for _ in range(64):
            nid = rep.get(c)
            if nid is None or self.eg.op(nid) not in ("Load", "Kernel"):
                return c
            c = self.eg.child_classes(nid)[0]
        return c

    def decode(self, choice: dict | None = None, *, lazy: bool = False) -> Decoded:
        """The program with `choice`'s representatives (class -> E-node) where given;
        raises `Cycle` when they make a value its own operand. `lazy`: the GraphKey, node
        map and classes only — the fusible edges and rewrites follow from
        `complete(d)` (the exploration decodes many programs it has seen already)."""
        eg, key = self.eg, self.key
        rep, base = self.reps(choice)
        dec = _Decoder(eg, key, rep, self.body, base, self.templates)
        outs: list[int] = []
        for o in key.outputs:
            v = dec.decode(self.t_of[o])
            if dec.nodes[v].op is Ops.BUFFER or v in outs:
                # an output that simplified to an input (or to another output): copy it
                n = dec.nodes[v]
                v = dec.add(KeyNode(Ops.CONTIGUOUS, n.dtype, (v,), None, n.shape))
            outs.append(v)
        decoded = GraphKey(tuple(dec.nodes), tuple(outs))
        if self._e_classes is None:
            self._e_classes = {c for c, ns in eg.classes.items() if any(eg.op(m) == "E" for m in ns)}
        classes = tuple(sorted(c for c in dec.value if isinstance(c, str) and c in rep and c in self._e_classes))
        d = Decoded(decoded, set(), dec.orig_of, {}, dict(choice or {}), classes, {})
        d.pending = (dec, rep, base)
        return d if lazy else self.complete(d)

    def complete(self, d: Decoded) -> Decoded:
        """Fill in the fusible edges and the rewrites of a program `decode(lazy=True)` made
        (nothing to do for one decoded in full)."""
        if d.pending is None:
            return d
        (dec, rep, base), d.pending = d.pending, None
        eg, key = self.eg, self.key
        # a fusible edge: the consumer's class has a variant whose source there is the
        # producer's body (an E-class), not a Load of it
        fusible = d.fusible
        for kc, u in dec.value.items():
            c = kc[1] if isinstance(kc, tuple) else kc
            nid = base.get(c) if isinstance(kc, tuple) else rep.get(c)
            if nid is None or eg.op(nid) != "E":
                continue
            for alt in eg.classes[c]:
                if eg.op(alt) != "E":
                    continue
                for cls in _list_items(eg, rep, eg.child_classes(alt)[2]):
                    k, r = cls, rep.get(cls)
                    if cls == c and ("base", c) in dec.value:  # the self-operand: read as the class's base
                        k, r = ("base", c), base.get(c)
                    if r is not None and eg.op(r) == "E" and k in dec.value and dec.value[k] != u:
                        fusible.add((u, dec.value[k]))
        # the rewrites the program uses: original nodes computed another way (or by another
        # node), and values no original node computes, with the rule sets that made them
        rewrites, replaced = d.rewrites, d.replaced
        back = {o: v for v, o in dec.orig_of.items()}
        for i, bc in self.body.items():
            v = dec.value.get(bc)
            if v is None:
                continue
            names = tuple(sorted(self.marks.get(bc, ()))) or ("rewrite",)
            j = dec.orig_of.get(v)
            if j is not None and j != i and self.body.get(j) == bc:
                continue  # i's value is computed as written by node j (an exact identity made them one class)
            if j != i:
                replaced[i] = (v, names)
            elif dec.nodes[v].src != tuple(back.get(s, -1) for s in key.nodes[i].src):
                replaced[i] = (v, names)
        for v, c in dec.made.items():
            if v not in dec.orig_of:
                rewrites[v] = tuple(sorted(self.marks.get(c, ()))) or ("rewrite",)
        return d


def decode(js: dict, key: GraphKey, templates: Templates | None = None):
    """(decoded GraphKey, fusible edges, decoded->original node map) from serialised JSON:
    the fewest-ops program (the program as written on ties); `templates` are the
    encoder's (rebuilt from `key` when not given)."""
    d = Program(js, key, templates).decode()
    return d.key, d.fusible, d.orig_of


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


def _pricer(model: CostModel, machine: Machine):
    """plan -> predicted seconds, as `choose` prices (kernels priced once per content)."""
    prices: dict[str, float] = {}  # kernel content key -> predicted seconds (models without price_plan)
    in_plan = getattr(model, "price_plan", None)

    def price(plan: Plan) -> float:
        if in_plan is not None:  # kernels priced in their plan's context (svod.costing.plan_prices)
            return sum(p.seconds for p in in_plan(plan, machine))
        todo = [k for k in plan.kernels if k.key() not in prices]
        for k, p in zip(todo, model.price_batch(todo, machine)):
            prices[k.key()] = p.seconds
        return sum(prices[k.key()] for k in plan.kernels)

    return price


@dataclass
class Exploration:
    """The algebraic choice: the programs the e-graph holds, tried by the cost model."""

    base: Decoded  # the fewest-ops program (the program as written on ties)
    best: Decoded  # the cheapest program found (priced with greedy boundaries)
    tried: int = 0  # programs priced (none when every other program is of the base's movement form)
    merged: int = 0  # programs not priced: another of their movement form was (`movement_form`)
    alternatives: int = 0  # classes of the base program with another program
    seconds: float = 0.0
    stop_reason: str = "complete"


def _reachable(d: Decoded) -> Decoded:
    """`d` with its choice restricted to the classes it computes (the others are not
    read: the same program)."""
    keep = set(d.classes)
    if any(c not in keep for c in d.choice):
        d.choice = {c: v for c, v in d.choice.items() if c in keep}
    return d


def explore(prog, model: CostModel, machine: Machine, *, deadline: float = INF, max_tries: int = 256,
            exact_limit: int = 6, by_form: bool = True) -> Exploration:
    """Choose among the programs of the e-graph `prog` (a `Program`), best first: from
    the fewest-ops program, the cheapest program found so far is expanded by switching
    one of its e-classes to another of its e-nodes (each distinct program priced once).
    A program with at most `exact_limit` free boundary choices is priced by its optimal
    cover (`choose`, exact), a bigger one by its greedy kernel boundaries. Exhaustive
    when the e-graph holds fewer than `max_tries` programs reachable that way and time
    allows (small graphs); else bounded by `max_tries` and `deadline`. Choices that make
    a cycle are skipped (the programs are acyclic by construction).

    `by_form`: programs that differ only in where their views (permutes, reshapes,
    broadcasts) sit — one *movement form*, `search.algebra_movement.movement_form` —
    are priced and expanded once, by the first found of the best rank (fewest views,
    then fewest elements computed); a later one of that form and a better rank is
    priced too. The movement rule sets make such programs by the dozen (each position
    of each view), all lowered to the same kernels where the views are fused; pricing
    them one by one took the exploration to its time limit on chains of transposes and
    reshapes (docs/algebra.md, "Movement algebra"). `by_form=False` prices every
    program (the tests compare the two)."""
    import heapq

    t0 = time.perf_counter()
    base = prog.decode()
    ex = Exploration(base, base)
    ex.alternatives = sum(1 for c in base.classes if prog.alternatives(c, prog.rep))
    if not ex.alternatives:
        ex.seconds = time.perf_counter() - t0
        return ex
    price = _pricer(model, machine)

    def cost(d: Decoded) -> float:
        fixed, free = boundaries(d.key, d.fusible)
        if len(free) <= exact_limit:
            e = choose(d.key, d.fusible, model, machine, exact_limit=exact_limit, deadline=deadline)
            return e.best.seconds if e.variants else INF
        try:  # the greedy planner's plan of the program (its plan passes: attention fused as it would be)
            plan = lower(d.key, fixed | (greedy_boundaries(d.key) & set(free)), planner="greedy")
        except Exception:  # noqa: BLE001 - a program that cannot be lowered is not a candidate
            return INF
        return price(plan)

    # the base is priced once another program is (all others may be of its movement form)
    best_cost: float | None = None
    seen = {base.key.hash}
    # choices decoded already: a program is decoded once per choice of the classes it
    # computes (switches made in another order, or in classes the program no longer
    # reads, give the same choice: `_reachable`)
    decoded: set[frozenset] = {frozenset()}
    # one program per movement form: programs that differ only in where their views sit
    # are priced and expanded once, by the best-ranked one found (fewest views first)
    forms: dict[bytes, tuple[int, int]] = {}
    sig, rank = movement_form(base.key)
    forms[sig] = rank
    heap = [(0.0, 0, base)]
    n = 0
    while heap and ex.stop_reason == "complete":
        _, _, d = heapq.heappop(heap)
        rep, _ = prog.reps(d.choice)
        for c in d.classes:
            alts: list = prog.alternatives(c, rep)
            cur = d.choice.get(c)
            outer = cur[0] if isinstance(cur, tuple) else cur
            if outer is not None and prog.self_operand(outer):  # and what its self-operand reads
                alts = alts + [(outer, a) for a in prog.eg.classes[c]
                               if prog.eg.op(a) == "E" and not prog.self_operand(a)]
            for alt in alts:
                if ex.tried >= max_tries or time.perf_counter() > deadline:
                    ex.stop_reason = "time limit" if ex.tried < max_tries else "try limit"
                    break
                choice = {**d.choice, c: alt}
                fc = frozenset(choice.items())
                if fc in decoded:
                    continue
                decoded.add(fc)
                try:
                    new = _reachable(prog.decode(choice, lazy=True))
                except Cycle:
                    continue
                decoded.add(frozenset(new.choice.items()))
                if new.key.hash in seen:
                    continue
                seen.add(new.key.hash)
                if by_form:
                    sig, rank = movement_form(new.key)
                    if sig in forms and forms[sig] <= rank:
                        ex.merged += 1
                        continue
                    forms[sig] = rank
                if best_cost is None:
                    best_cost = cost(base)
                    ex.tried += 1
                ex.tried += 1
                v = cost(prog.complete(new))
                if v < best_cost * (1 - 1e-9):
                    ex.best, best_cost = new, v
                n += 1
                heapq.heappush(heap, (v, n, new))
            if ex.stop_reason != "complete":
                break
    ex.seconds = time.perf_counter() - t0
    return ex


def choose(key: GraphKey, fusible: set[tuple[int, int]], model: CostModel, machine: Machine, *, k: int = 1,
           exact_limit: int = 8, deadline: float = INF) -> Extraction:
    """Pick kernel boundaries for the decoded graph `key` (see the module docstring)."""
    t0 = time.perf_counter()
    fixed, free = boundaries(key, fusible)
    seen: dict[frozenset, Variant | None] = {}
    evaluated = 0
    kernels_cache: dict = {}  # root -> kernels built for earlier choices (see svod.lower.lower)
    price = _pricer(model, machine)

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
        # a kernel kind's choice (search/kinds.py: a matmul's A operand inlined) also starts
        # materialised — the plan without the kinds — so a kind priced dearer than that plan
        # cannot lead the first-improvement climb away from it
        operands = frozenset(i for i in free if i in _kind_operands(key))
        if operands:
            starts += (operands,)
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
