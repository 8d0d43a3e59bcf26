"""Contraction recognition (rule set `contract`, reassoc): a sum over axes of a product of
two broadcast operands — `(x[:, None, :] * w[None]).sum(-1)`, the batched
`(a[..., :, None, :] * b[..., None, :, :]).sum(-1)`, sums over a middle axis
`(x[:, :, None] * w[None]).sum(1)`, `(A * v).sum(-1)` against a broadcast vector — gets a
(batched) matmul variant in the e-graph: the operands' bases permuted and reshaped to
`(batch..., M, K)` and `(batch..., K, N)`, one MATMUL, and the result reshaped and
permuted back to the sum's (keepdims) shape. The extraction prices it against the fused
multiply + reduce kernel and keeps the cheaper (docs/algebra.md, "Contraction
recognition").

How the variant gets into the e-graph (terms that need arguments no node of the written
program has: a new permutation, a new shape, a MATMUL):

1. `templates(key)` finds the pattern in the GraphKey (Python: the operands' movement
   chains are read down to their bases) and appends the matmul form's nodes to the key as
   *template* nodes (`KeyNode`s after the program's own; nothing reaches them from the
   outputs). It returns the extended key, which the decoder reads templates from.
2. The encoder writes the form as an F term over those templates — `(E op j srcs)` with
   j a template, the bases loaded as `(Load (Node b))` — and the fact
   `(ContractForm n form)` for the REDUCE node n. The terms have no `(Node j)`/`(Body j)`
   handles, so the extraction counts them as nodes made by a rewrite (ties keep the
   program as written) and explain lists them.
3. The rule of the `contract` rule set unions the form into the REDUCE's class and marks
   it `(Rewritten r "contract")`. Without the rule set (`algebra="exact"`) nothing is
   encoded and nothing changes.

What is recognised: REDUCE ('sum', axes) of a MUL of the same dtype (not bool) whose two
operands are each a chain of EXPAND, PERMUTE and RESHAPEs that only add or drop size-1
axes, over a base value. Every axis of the product of size > 1 is then read by the first
operand, the second, or both (or neither: a broadcast of both — not recognised). Axes in
both are batch axes (kept) or contracted (summed); axes in one only are free (kept). A
summed axis read by one operand only, or an axis read by neither, is not recognised (the
sum would first need a reduction or a count of its own). Row dots — every axis read by
both operands, `(a * b).sum(-1)` of same-shaped a, b — have no cheaper matmul form (a
batch of 1x1 products does the same work worse) and get no variant.
"""

from __future__ import annotations

import math

from svod.ir import Ops, _infer_shape
from svod.key import GraphKey, KeyNode

NAME = "contract"
SIBLINGS = "matmul_siblings"


def _ruleset(name: str, relation: str) -> str:
    """A rule set that unions the form the encoder wrote in `(relation n form)` into node
    n's class (declared after the language, search/language.py: its relation lives here)."""
    return (f"(relation {relation} (i64 F))\n(ruleset {name})\n"
            f"(rule (({relation} n f) (= r (Body n)))\n"
            f'      ((union r f) (Rewritten r "{name}")) :ruleset {name})')


RULESET = _ruleset(NAME, "ContractForm")
# rule set name -> (egglog text, numerical status, on by default): registered by search/rules.py
RULESETS = {NAME: (RULESET + "\n(relation ContractAt (i64))", "reassoc", True),
            SIBLINGS: (_ruleset(SIBLINGS, "SiblingForm") + "\n(relation SiblingAt (i64))", "reassoc", True)}

_CHAIN = (Ops.EXPAND, Ops.PERMUTE, Ops.RESHAPE)


def _axes(key: GraphKey, i: int) -> tuple[int, list[int | None]] | None:
    """(base, axis map) of value i read through its movement chain: for each axis of
    node i, the axis of the base it reads (None: a broadcast or size-1 axis). None when
    the chain has a RESHAPE that does more than add or drop size-1 axes."""
    chain = []
    n = key.nodes[i]
    while n.op in _CHAIN:
        if n.op is Ops.RESHAPE:
            src = key.nodes[n.src[0]].shape
            if [d for d in src if d != 1] != [d for d in n.shape if d != 1]:
                break
        chain.append(n)
        i = n.src[0]
        n = key.nodes[i]
    if not all(isinstance(d, int) for d in n.shape):
        return None
    m: list[int | None] = [a if d != 1 else None for a, d in enumerate(n.shape)]
    for c in reversed(chain):
        if c.op is Ops.PERMUTE:
            m = [m[p] for p in c.arg]
        elif c.op is Ops.RESHAPE:  # the axes of size > 1 keep their order (and what they read)
            src_shape = key.nodes[c.src[0]].shape
            kept = iter([a for a, d in zip(m, src_shape) if d != 1])
            m = [next(kept) if d != 1 else None for d in c.shape]
        # EXPAND: only size-1 axes grow, and those map to None already
    return i, m


def _squeeze_order(key: GraphKey, base: int) -> dict[int, int]:
    """base axis -> its position among the base's axes of size > 1."""
    shape = key.nodes[base].shape
    out, k = {}, 0
    for a, d in enumerate(shape):
        if d != 1:
            out[a] = k
            k += 1
    return out


class _Builder:
    """Appends template nodes to a growing node list (deduplicated by content)."""

    def __init__(self, key: GraphKey):
        self.nodes = list(key.nodes)
        self.first = len(key.nodes)
        self._index: dict[bytes, int] | None = None  # built on the first add (most graphs have no form)

    @property
    def index(self) -> dict[bytes, int]:
        if self._index is None:
            self._index = {n.encode(): j for j, n in enumerate(self.nodes)}
        return self._index

    def add(self, op: Ops, src: tuple[int, ...], arg) -> int:
        ins = tuple(self.nodes[s] for s in src)
        dtype = ins[0].dtype
        shape = _infer_shape(op, ins, arg)
        n = KeyNode(op, dtype, src, arg, shape)
        k = n.encode()
        if k not in self.index:
            self.index[k] = len(self.nodes)
            self.nodes.append(n)
        return self.index[k]

    def reshape(self, i: int, shape: tuple[int, ...]) -> int:
        return i if self.nodes[i].shape == tuple(shape) else self.add(Ops.RESHAPE, (i,), tuple(shape))

    def permute(self, i: int, perm: tuple[int, ...]) -> int:
        return i if tuple(perm) == tuple(range(len(perm))) else self.add(Ops.PERMUTE, (i,), tuple(perm))


def _operand(b: _Builder, key: GraphKey, base: int, amap: list, groups: list[list[int]], shape: tuple) -> int:
    """The base's data axes in the order of `groups` (lists of product axes), reshaped to
    `shape` (one axis per group after the batch axes)."""
    sq = _squeeze_order(key, base)
    x = b.reshape(base, tuple(d for d in key.nodes[base].shape if d != 1))
    order = [sq[amap[ax]] for g in groups for ax in g]
    x = b.permute(x, tuple(order))
    return b.reshape(x, shape)


def recognise(key: GraphKey, r: int, b: _Builder) -> int | None:
    """The template node computing REDUCE node r as a matmul (added to `b`), or None."""
    n = key.nodes[r]
    if n.op is not Ops.REDUCE or n.arg[0] != "sum" or n.dtype.is_bool:
        return None
    mul = key.nodes[n.src[0]]
    if mul.op is not Ops.MUL or mul.dtype != n.dtype or len(mul.src) != 2:
        return None
    if not all(isinstance(d, int) for d in mul.shape):
        return None
    sides = [_axes(key, s) for s in mul.src]
    if any(s is None for s in sides):
        return None
    (ba, ma), (bb, mb) = sides
    if key.nodes[ba].dtype != n.dtype or key.nodes[bb].dtype != n.dtype:
        return None
    red = set(n.arg[1])
    batch, con, fa, fb = [], [], [], []
    for ax, d in enumerate(mul.shape):
        if d == 1:
            continue
        ina, inb = ma[ax] is not None, mb[ax] is not None
        if ina and inb:
            (con if ax in red else batch).append(ax)
        elif ina and ax not in red:
            fa.append(ax)
        elif inb and ax not in red:
            fb.append(ax)
        else:  # summed on one side only, or read by neither operand
            return None
    if not con or not (fa or fb):
        return None
    S = mul.shape
    lead = tuple(S[ax] for ax in batch)
    M, K, N = (math.prod(S[ax] for ax in g) for g in (fa, con, fb))
    a = _operand(b, key, ba, ma, [batch, fa, con], lead + (M, K))
    c = _operand(b, key, bb, mb, [batch, con, fb], lead + (K, N))
    mm = b.add(Ops.MATMUL, (a, c), None)
    kept = batch + fa + fb  # the matmul's axes, grouped; the sum keeps them in S's order
    out = b.reshape(mm, tuple(S[ax] for ax in kept))
    out = b.permute(out, tuple(kept.index(ax) for ax in sorted(kept)))
    return b.reshape(out, n.shape)


def _contractions(key: GraphKey, b: _Builder) -> dict[int, int]:
    forms: dict[int, int] = {}
    for r, n in enumerate(key.nodes):
        if n.op is Ops.REDUCE:
            try:
                top = recognise(key, r, b)
            except AssertionError:  # a shape the matmul form cannot take: no variant
                top = None
            if top is not None and top >= b.first:
                forms[r] = top
    return forms


def templates(key: GraphKey, siblings: bool = False) -> tuple[GraphKey, dict[int, int]]:
    """(key with the template nodes appended, REDUCE node -> its matmul form's top node;
    with `siblings`, MATMUL nodes -> their slice of the merged product too). The key is
    `key` itself when nothing is recognised."""
    b = _Builder(key)
    forms = _contractions(key, b)
    if siblings:
        forms.update(_siblings(key, b))
    if not forms:
        return key, {}
    return GraphKey(tuple(b.nodes), key.outputs), forms


# ----------------------------------------------------------------------------- sibling products


def _reaches(key: GraphKey, i: int, targets: set[int], floor: int) -> bool:
    """Whether value i depends on one of `targets` (nodes below `floor` cannot)."""
    stack, seen = [i], set()
    while stack:
        j = stack.pop()
        if j in targets:
            return True
        if j < floor or j in seen:
            continue
        seen.add(j)
        stack.extend(key.nodes[j].src)
    return False


# the most flops (2 * batch * m * k * (n_1 + n_2 + ...)) a group of sibling products may
# have to get the merged form. Measured (docs/algebra.md, "Sibling products"): for x (n, 3n/8)
# times three (3n/8)² weights the merged plan ran 1.1-2x faster up to n = 256 (14 Mflop:
# three library calls' fixed cost dominates) and 10-50% slower from n = 512 (113 Mflop)
# to 1024, where the cost model still chose it: it prices each library step on one thread
# and a wider GEMM as more efficient, which OpenBLAS is not by enough to pay for the copy
# of the weights and of the slices out (a 2% predicted saving against 13% measured loss).
SIBLING_MAX_FLOPS = 32e6


def _siblings(key: GraphKey, b: _Builder) -> dict[int, int]:
    """Products of one left operand, `x @ W1`, `x @ W2`, ... (rule set `matmul_siblings`):
    each gets the form `(x @ concat(W1, W2, ...))[..., off:off + n_i]` — one wider product,
    sliced. Right operands must agree in every axis but the last, with one dtype, and none
    may depend on a product of the group (the form would read itself). The concatenation
    is a node of the form: it is priced with it (a copy of the weights every call). Groups
    over `SIBLING_MAX_FLOPS` get no form (measured slower there, where the cost model
    still preferred it)."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(key.nodes):
        if n.op is Ops.MATMUL and len(n.src) == 2 and all(isinstance(d, int) for d in n.shape):
            groups.setdefault(n.src[0], []).append(i)
    forms: dict[int, int] = {}
    for x, mms in groups.items():
        ws = [key.nodes[m].src[1] for m in mms]
        if len(mms) < 2 or len(set(ws)) < len(ws):
            continue
        w0 = key.nodes[ws[0]]
        if any(key.nodes[w].shape[:-1] != w0.shape[:-1] or key.nodes[w].dtype != w0.dtype for w in ws):
            continue
        if any(key.nodes[m].dtype != key.nodes[mms[0]].dtype for m in mms):
            continue
        if any(_reaches(key, w, set(mms), min(mms)) for w in ws):
            continue
        flops = 2 * sum(math.prod(key.nodes[m].shape) * key.nodes[x].shape[-1] for m in mms)
        if flops > SIBLING_MAX_FLOPS:
            continue
        axis = len(w0.shape) - 1
        cat = b.add(Ops.CAT, tuple(ws), axis)
        mm = b.add(Ops.MATMUL, (x, cat), None)
        off = 0
        for m, w in zip(mms, ws):
            width = key.nodes[w].shape[-1]
            bounds = tuple((0, d) for d in b.nodes[mm].shape[:-1]) + ((off, off + width),)
            forms[m] = b.add(Ops.SHRINK, (mm,), bounds)
            off += width
    return forms


def _term(ext: GraphKey, j: int, first: int, memo: dict[int, str] | None = None) -> str:
    """Template j as an F term: template sources as loaded kernels, program nodes as
    loads of their `(Node i)` handles (recursive over the form's few templates; `memo`
    shares the text of templates several forms use)."""
    memo = {} if memo is None else memo
    if j in memo:
        return memo[j]
    n = ext.nodes[j]
    srcs = []
    for s in n.src:
        srcs.append(f"(Load (Kernel {_term(ext, s, first, memo)}))" if s >= first else f"(Load (Node {s}))")
    items = "(Nil)"
    for x in reversed(srcs):
        items = f"(Cons {x} {items})"
    memo[j] = f'(E "{n.op.value}" {j} {items})'
    return memo[j]


def encode_actions(key: GraphKey, rulesets) -> tuple[GraphKey, list[str]]:
    """The encoder's hook: (the key the decoder reads templates from, egglog actions:
    one `ContractForm` / `SiblingForm` fact per recognised node, and `Rewritten` marks on
    the forms' inner terms). Nothing (and `key` itself) when neither rule set is among
    `rulesets`."""
    todo = [(name, rel) for name, rel in ((NAME, "ContractForm"), (SIBLINGS, "SiblingForm")) if name in rulesets]
    if not todo:
        return key, []
    b = _Builder(key)
    first = len(key.nodes)
    found = []
    for name, rel in todo:
        forms = _contractions(key, b) if name == NAME else _siblings(key, b)
        found += [(name, rel, r, top) for r, top in forms.items()]
    if not found:
        return key, []
    ext = GraphKey(tuple(b.nodes), key.outputs)
    actions = []
    memo: dict[int, str] = {}
    for name, rel, r, top in found:
        actions.append(f"({rel} {r} {_term(ext, top, first, memo)})")
        for j in _inner(ext, top, first):
            actions.append(f'(Rewritten {_term(ext, j, first, memo)} "{name}")')
    return ext, actions


def _inner(ext: GraphKey, top: int, first: int) -> list[int]:
    out, stack = [], [top]
    while stack:
        j = stack.pop()
        for s in ext.nodes[j].src:
            if s >= first and s not in out:
                out.append(s)
                stack.append(s)
    return out


def rewritten_programs(key: GraphKey, rulesets) -> list[tuple[str, GraphKey]]:
    """Every program one `contract` / `matmul_siblings` rewrite away from `key` (those of
    `rulesets`): (rule set, the program with one recognised node computed by its form),
    each a GraphKey in topological order holding only what the outputs reach (inputs keep
    their slots). For the rewrite oracle (search/oracle.py), which enumerates programs
    from the rule definitions; the e-graph holds the same forms."""
    out: list[tuple[str, GraphKey]] = []
    for name in (NAME, SIBLINGS):
        if name not in rulesets:
            continue
        b = _Builder(key)
        forms = _contractions(key, b) if name == NAME else _siblings(key, b)
        ext = GraphKey(tuple(b.nodes), key.outputs)
        for r, top in forms.items():
            out.append((name, _substitute(ext, {r: top})))
    return out


def _substitute(ext: GraphKey, sub: dict[int, int]) -> GraphKey:
    """`ext` with every read of node r (and output r) replaced by node sub[r], rebuilt from
    the outputs in post-order (iterative)."""
    nodes: list[KeyNode] = []
    index: dict[bytes, int] = {}
    new: dict[int, int] = {}
    for o in ext.outputs:
        stack = [(sub.get(o, o), False)]
        while stack:
            i, ready = stack.pop()
            if i in new:
                continue
            srcs = [sub.get(s, s) for s in ext.nodes[i].src]
            if not ready:
                stack.append((i, True))
                stack.extend((s, False) for s in srcs if s not in new)
                continue
            n = ext.nodes[i]
            kn = KeyNode(n.op, n.dtype, tuple(new[s] for s in srcs), n.arg, n.shape)
            k = kn.encode()
            if k not in index:
                index[k] = len(nodes)
                nodes.append(kn)
            new[i] = index[k]
    return GraphKey(tuple(nodes), tuple(new[sub.get(o, o)] for o in ext.outputs))


# ----------------------------------------------------------------------------- graphs searched by regions

# contraction (its own small GraphKey's hash) -> whether the search prefers the matmul form
_PREFERRED: dict[str, bool] = {}


def with_preferred_forms(key: GraphKey, rulesets, decide) -> GraphKey:
    """`key` with each recognised contraction computed by its matmul form where
    `decide(alone)` — the search of the contraction alone (`alone`: its product and sum
    over its operands' chains, the bases as inputs) — prefers the form; `key` itself when
    none is. For graphs searched region by region (search/__init__.py), which keep the
    program as written: a broadcast-multiply-sum there, einsum's included, would else stay
    a fused kernel whatever its size. Decisions are memoised per contraction (a model
    repeats its shapes). Nothing when `contract` is not among `rulesets`."""
    if NAME not in rulesets:
        return key
    b = _Builder(key)
    forms = _contractions(key, b)
    if not forms:
        return key
    chosen: dict[int, int] = {}
    for r, top in forms.items():
        alone = _alone(key, r)
        if alone.hash not in _PREFERRED:
            if len(_PREFERRED) >= 4096:
                _PREFERRED.clear()
            _PREFERRED[alone.hash] = bool(decide(alone))
        if _PREFERRED[alone.hash]:
            chosen[r] = top
    return _substitute(GraphKey(tuple(b.nodes), key.outputs), chosen) if chosen else key


def _alone(key: GraphKey, r: int) -> GraphKey:
    """REDUCE node r's product and sum over its operands' movement chains, as a GraphKey
    of its own: the chains' bases become contiguous inputs 0 and 1 (one input when both
    operands read one base)."""
    mul = key.nodes[key.nodes[r].src[0]]
    nodes: list[KeyNode] = []
    new: dict[int, int] = {}
    for s in mul.src:
        base, _ = _axes(key, s)
        if base not in new:
            n = key.nodes[base]
            strides, acc = [], 1
            for d in reversed(n.shape):
                strides.append(acc)
                acc *= d
            new[base] = len(nodes)
            nodes.append(KeyNode(Ops.BUFFER, n.dtype, (), (len(new) - 1, tuple(reversed(strides))), n.shape))
    chain: list[int] = []
    for s in mul.src:
        i = s
        while i not in new and i not in chain:
            chain.append(i)
            i = key.nodes[i].src[0]
    for i in sorted(chain) + [key.nodes[r].src[0], r]:
        n = key.nodes[i]
        new[i] = len(nodes)
        nodes.append(KeyNode(n.op, n.dtype, tuple(new[s] for s in n.src), n.arg, n.shape))
    return GraphKey(tuple(nodes), (new[r],))
