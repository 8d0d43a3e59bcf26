"""Named rule sets of the fusion search, generated as egglog source. Rules are data:
each set is documented here and selectable by name (`RULESETS`), so tests and notebooks
switch them on and off.

Fusion rules fire at the *consumer*: `(E c n [..., (Load (Kernel body)), ...])` gains
the variant `(E c n [..., body, ...])`. Unioning `(Load (Kernel f))` with `f` itself
would make the unfused variant unextractable (FACTS.md); consumer-level rewriting keeps
the e-graph linear in the graph (at most 2^arity variants per op).

- `fuse_elementwise`: elementwise and movement producers into elementwise and movement
  consumers (elementwise chains; movement becomes index arithmetic in the loads).
- `fuse_reduce_prologue`: elementwise producers into a reduction (its prologue).
- `fuse_epilogue`: a reduction into an elementwise consumer — the epilogue after a
  reduction and reduce-then-broadcast row fusion (softmax, layernorm as one kernel). The
  lowering decides whether the consumer's rows can host the broadcast.
- `fuse_nested_reduce`: a reduction into a reduction over the same rows (the lowering
  hosts it when the inner result is read as a per-row value).
- `fuse_matmul_epilogue`: a matmul into its elementwise consumer (the matmul with a fused
  epilogue) — the alternative, a materialised matmul, is the BLAS library step.
- `fuse_matmul_operand`: movement producers (transposes, broadcasts) into a matmul's
  operands, read through a view instead of materialised.
- `kind_attention` (exact; search/kinds.py, kernel kinds): a matmul whose A operand is the
  row softmax of an elementwise function of a matmul may inline it — the attention
  kernel, priced against the unfused kernels.
- `algebra`: rewrites exact in IEEE arithmetic: x*1, 1*x, x/1, x+(-0.0), (-0.0)+x,
  x-(+0.0), -(-x), max(x,x), min(x,x), where(c,x,x) -> x. (Not x+0.0: -0.0+0.0 = +0.0.)
- `movement` (exact): a transpose of a transpose that undoes it cancels, any other two
  compose into one (`T_q(T_p(x)) -> T_{p∘q}(x)`); a pointwise op of transposed operands
  (same order) becomes the transpose of the op: `f(T(a)) -> T(f(a))`, `T(a) op T(b) ->
  T(a op b)` — so transposes meet and cancel (the rules through pointwise ops are
  `search.algebra_movement.through_pointwise`'s, with its guards).
- `movement_reshape` (exact; search/algebra_movement.py): reshapes and broadcasts moved
  out of pointwise ops (the same view on both operands), reshapes composed or cancelled.
- `movement_reduce` (reassoc; search/algebra_movement.py): a reduction of a permuted
  value is the permuted reduction over the mapped axes.
- `matmul_assoc` (reassoc): `(A @ B) @ C <-> A @ (B @ C)`; the extraction picks the
  association by cost (a chain ending in a vector becomes matrix-vector products).
- `matmul_distribute` (reassoc): `A @ B +- A @ C -> A @ (B +- C)`, and on the right.
- `matmul_transpose` (reassoc): `(A @ B).T <-> B.T @ A.T` (last two axes).
- `sum_merge` (reassoc): `sum(x) + sum(y) -> sum(x + y)` and
  `sum(x) - sum(y) -> sum(x - y)` over the same axes of floating operands of one shape
  and dtype.
- `sum_scale` (reassoc): `sum(c * x) -> c * sum(x) + 0.0`, `sum(x / c) ->
  sum(x) / c + 0.0` (the `+ 0.0`: a sum is never -0.0, a product can be) for a constant
  c that is finite and non-zero (not 0: `0 * sum(x)` is NaN where the sum overflows and
  `sum(0 * x)` is 0; not ±inf: `inf * x` is NaN where x is 0), and a product read by the
  sum alone (`reads`).
- `sum_bcast` (reassoc): `sum(broadcast(y))` over axes including every broadcast one ->
  `y' * count + 0.0` (y' = y summed over the other reduced axes); the count must be exact in
  the dtype.
- `minmax_shift` (exact): `max(x + c) -> max(x) + c` (and min; `c + x`, `x - c`),
  `max(c - x) -> c - min(x)`, c a finite constant, the shifted value read by the
  reduction alone: rounding is monotone, so the results are bit-identical (NaN, ±inf
  and signed zeros included).

Rules that need an argument no node of the written program has (the constant at the
reduced shape, the count, the opposite reduction) get it from a fact hook
(`search.language.register_facts`): computed in Python where the rule may fire, handed
over as encoder templates (`search.language.Templates`).

Every rule set has a numerical status (`STATUS`): `exact` sets give bit-identical
results and are always on; `reassoc` sets reorder floating-point arithmetic (error
bounds in docs/algebra.md) and are on unless the algebra mode is `exact`
(`svod.search_limits(algebra="exact")`, `SVOD_ALGEBRA=exact`): `default_rulesets()`.

Sibling multi-output fusion and recompute-versus-materialise are decided by extraction:
a producer that is not materialised is recomputed in every kernel that reads it, and
kernels over one iteration space that share inputs merge into one multi-output kernel.
"""

from __future__ import annotations

import math

from search import algebra_movement as _mv
from search import contract as _contract
from search import kinds as _kinds
from search.language import Templates, const_value, register_facts
from svod.ir import Ops
from svod.ops import fusion_class

# the op classes of the fusion rules: projections of the op table (svod.ops); movement ops
# are elementwise too; CONTIGUOUS is a consumer only: as a producer it is always materialised
ELEMENTWISE_OPS = sorted(fusion_class("Elementwise"))
MOVEMENT_OPS = sorted(fusion_class("Movement"))
REDUCTION_OPS = fusion_class("Reduction")
MATMUL_OPS = fusion_class("Matmul")
MAX_POSITION = 6  # consumer operand positions the fusion rules cover (a CAT may have more)


def facts() -> str:
    """The op classification, as egglog facts."""
    out = [f'(Elementwise "{o}")' for o in ELEMENTWISE_OPS]
    out += [f'(Movement "{o}")' for o in MOVEMENT_OPS]
    out += [f'(Reduction "{o}")' for o in REDUCTION_OPS]
    out += [f'(Matmul "{o}")' for o in MATMUL_OPS]
    out += [f'(Pointwise "{o}")' for o in POINTWISE_OPS]
    return "\n".join(out)


def _list_at(pos: int, item: str) -> str:
    out = f"(Cons {item} rest)"
    for i in reversed(range(pos)):
        out = f"(Cons x{i} {out})"
    return out


def _fusion(name: str, producer: str, consumer: str) -> str:
    rules = [f"(ruleset {name})"]
    for pos in range(MAX_POSITION):
        loaded = f"(E cop cn {_list_at(pos, '(Load (Kernel (E pop pn ps)))')})"
        fused = f"(E cop cn {_list_at(pos, '(E pop pn ps)')})"
        rules.append(f"(rule ((= a {loaded}) ({producer} pop) ({consumer} cop))\n"
                     f"      ((union a {fused})) :ruleset {name})")
    return "\n".join(rules)


# the exact identities with a constant operand: (op, the constant's position, its kind
# (search.language.const_kind)) -> the other operand. x * 1, 1 * x, x / 1, x + -0.0,
# -0.0 + x, x - +0.0 (x + 0.0 is not x for x = -0.0). The egglog rules (`_algebra`) and
# the rewrite oracle (search/oracle.py) both read this table.
CONST_IDENTITIES = (("MUL", 1, "one"), ("MUL", 0, "one"), ("DIV", 1, "one"),
                    ("ADD", 1, "-zero"), ("ADD", 0, "-zero"), ("SUB", 1, "+zero"))


def _algebra() -> str:
    def keep(lhs: str, cond: str = "") -> str:
        return f"(rule ((= a {lhs}){cond}) ((union a x)) :ruleset algebra)"

    def with_const(op: str, pos: int, kind: str) -> str:
        args = ("x", "c") if pos == 1 else ("c", "x")
        return keep(f'(E "{op}" n (Cons {args[0]} (Cons {args[1]} (Nil))))', f' (ConstIs c "{kind}")')

    return "\n".join([
        "(ruleset algebra)",
        *(with_const(*ident) for ident in CONST_IDENTITIES),
        keep('(E "NEG" n (Cons (E "NEG" m (Cons x (Nil))) (Nil)))'),
        keep('(E "MAX" n (Cons x (Cons x (Nil))))'),
        keep('(E "MIN" n (Cons x (Cons x (Nil))))'),
        keep('(E "WHERE" n (Cons c (Cons x (Cons x (Nil)))))'),
    ])


def _mark(name: str, var: str = "r") -> str:
    return f'(Rewritten {var} "{name}")'


def _movement() -> str:
    """Transposes cancel, and move outwards through pointwise ops (exact). Rules whose
    condition compares two nodes' orders run in two stages (see search/language.py)."""
    def T(p: str, x: str) -> str:
        return f'(Load (Kernel (E "PERMUTE" {p} (Cons {x} (Nil)))))'

    return "\n".join([
        "(ruleset movement)",
        f'(rule ((= r (E "PERMUTE" q (Cons {T("p", "x")} (Nil))))) ((PermPair r p q x)) :ruleset movement)',
        f'(rule ((PermPair r p q x) (PermIs p s) (PermInvIs q s))\n'
        f'      ((union r x) {_mark("movement")}) :ruleset movement)',
        *_mv.through_pointwise("movement", "PERMUTE", None, "BinT r"),
        _mv.composed_perm_rule(),
        f'(rule ((BinT r op n p q x y) (PermIs p s) (PermIs q s))\n'
        f'      ((union r (E "PERMUTE" p (Cons (Load (Kernel (E op n (Cons x (Cons y (Nil))))))  (Nil)))) '
        f'{_mark("movement")} {_mark("movement", "(E op n (Cons x (Cons y (Nil))))")}) :ruleset movement)',
    ])


def _matmul_assoc() -> str:
    """(A @ B) @ C <-> A @ (B @ C): the new product takes the inner matmul as template."""
    def mm(n: str, a: str, b: str) -> str:
        return f'(E "MATMUL" {n} (Cons {a} (Cons {b} (Nil))))'

    def ld(x: str) -> str:
        return f"(Load (Kernel {x}))"

    return "\n".join([
        "(ruleset matmul_assoc)",
        f'(rule ((= r {mm("n", ld(mm("m", "a", "b")), "c")}))\n'
        f'      ((union r {mm("n", "a", ld(mm("m", "b", "c")))}) {_mark("matmul_assoc")} '
        f'{_mark("matmul_assoc", mm("m", "b", "c"))}) :ruleset matmul_assoc)',
        f'(rule ((= r {mm("n", "a", ld(mm("m", "b", "c")))}))\n'
        f'      ((union r {mm("n", ld(mm("m", "a", "b")), "c")}) {_mark("matmul_assoc")} '
        f'{_mark("matmul_assoc", mm("m", "a", "b"))}) :ruleset matmul_assoc)',
    ])


def _sum_merge() -> str:
    """sum(x) +- sum(y) over the same axes of same-shaped, same-dtype operands ->
    sum(x +- y): one reduction instead of two (`SumIs`: axes, shape and dtype as text)."""
    def s(p: str, x: str) -> str:
        return f'(Load (Kernel (E "REDUCE" {p} (Cons {x} (Nil)))))'

    out = ["(ruleset sum_merge)", "(relation SumMergeable (i64))"]
    for op in ("ADD", "SUB"):
        out.append(f'(rule ((= r (E "{op}" n (Cons {s("p", "x")} (Cons {s("q", "y")} (Nil))))))\n'
                   f'      ((SumPair r "{op}" n p q x y)) :ruleset sum_merge)')
        # sums without keepdims: the same reshape of each reduction
        out.append(f'(rule ((= r (E "{op}" n (Cons (Load (Kernel (E "RESHAPE" a (Cons {s("p", "x")} (Nil)))))\n'
                   f'                          (Cons (Load (Kernel (E "RESHAPE" b (Cons {s("q", "y")} (Nil)))))'
                   f' (Nil))))))\n'
                   f'      ((SumPairR r "{op}" n a p q x y)) :ruleset sum_merge)')
    out.append(f'(rule ((SumPair r op n p q x y) (SumIs p k) (SumIs q k))\n'
               f'      ((union r (E "REDUCE" p (Cons (Load (Kernel (E op n (Cons x (Cons y (Nil)))))) (Nil)))) '
               f'{_mark("sum_merge")} {_mark("sum_merge", "(E op n (Cons x (Cons y (Nil))))")}) :ruleset sum_merge)')
    merged = '(E "REDUCE" p (Cons (Load (Kernel (E op n (Cons x (Cons y (Nil)))))) (Nil)))'
    out.append(f'(rule ((SumPairR r op n a p q x y) (SumIs p k) (SumIs q k))\n'
               f'      ((union r (E "RESHAPE" a (Cons (Load (Kernel {merged})) (Nil)))) {_mark("sum_merge")} '
               f'{_mark("sum_merge", "(E op n (Cons x (Cons y (Nil))))")} {_mark("sum_merge", merged)})'
               f' :ruleset sum_merge)')
    return "\n".join(out)


def _sum_signature(key, i: int) -> str | None:
    """Node i's `SumIs` text (search.saturate: axes, operand shape, dtype) when it is a
    float sum of an operand of its dtype, else None."""
    n = key.nodes[i]
    if n.op is not Ops.REDUCE or n.arg[0] != "sum" or not n.dtype.is_float:
        return None
    x = key.nodes[n.src[0]]
    return f"{n.arg[1]}|{x.shape}|{n.dtype}" if x.dtype == n.dtype else None


@register_facts(("sum_merge",))
def _merge_facts(key, i: int, t: Templates) -> list[str]:
    """(SumMergeable n): the written sum n has the `SumIs` signature of another written
    sum. `sum_merge` pairs two sums by their templates' signatures, and every sum term,
    rewritten or not, has a written sum as template; so a graph with no two written sums
    of one signature gives the rule set nothing to merge and the search skips it (the
    gate: it costs no egglog run per iteration there)."""
    sig = _sum_signature(key, i)
    if sig is None:
        return []
    counts = key.__dict__.get("_svod_sum_sigs")
    if counts is None:
        counts = {}
        for j in range(len(key.nodes)):
            g = _sum_signature(key, j)
            if g is not None:
                counts[g] = counts.get(g, 0) + 1
        object.__setattr__(key, "_svod_sum_sigs", counts)
    return [f"(SumMergeable {i})"] if counts[sig] > 1 else []


def _matmul_distribute() -> str:
    """A @ B +- A @ C -> A @ (B +- C) and B @ A +- C @ A -> (B +- C) @ A: one product
    instead of two (reassoc)."""
    def mm(n: str, a: str, b: str) -> str:
        return f'(E "MATMUL" {n} (Cons {a} (Cons {b} (Nil))))'

    def ld(x: str) -> str:
        return f"(Load (Kernel {x}))"

    out = ["(ruleset matmul_distribute)"]
    for op in ("ADD", "SUB"):
        for left in (True, False):
            p1, p2 = (mm("m", "a", "b"), mm("k", "a", "c")) if left else (mm("m", "b", "a"), mm("k", "c", "a"))
            inner = f'(E "{op}" n (Cons b (Cons c (Nil))))'
            merged = mm("m", "a", ld(inner)) if left else mm("m", ld(inner), "a")
            out.append(f'(rule ((= r (E "{op}" n (Cons {ld(p1)} (Cons {ld(p2)} (Nil))))))\n'
                       f'      ((union r {merged}) {_mark("matmul_distribute")} {_mark("matmul_distribute", inner)})'
                       f' :ruleset matmul_distribute)')
    return "\n".join(out)


def _matmul_transpose() -> str:
    """(A @ B).T <-> B.T @ A.T for transposes of the last two axes (reassoc: the dot
    products are the same, their summation order is the kernel's)."""
    def T(p: str, x: str) -> str:
        return f'(Load (Kernel (E "PERMUTE" {p} (Cons {x} (Nil)))))'

    def mm(n: str, a: str, b: str) -> str:
        return f'(E "MATMUL" {n} (Cons {a} (Cons {b} (Nil))))'

    name = "matmul_transpose"
    return "\n".join([
        f"(ruleset {name})",
        f'(rule ((= r (E "PERMUTE" p (Cons (Load (Kernel {mm("m", "a", "b")})) (Nil)))) (SwapLast p))\n'
        f'      ((union r {mm("m", T("p", "b"), T("p", "a"))}) {_mark(name)}) :ruleset {name})',
        f'(rule ((= r {mm("m", T("p", "x"), T("q", "y"))}) (SwapLast p) (SwapLast q))\n'
        f'      ((union r (E "PERMUTE" p (Cons (Load (Kernel {mm("m", "y", "x")})) (Nil)))) {_mark(name)} '
        f'{_mark(name, mm("m", "y", "x"))}) :ruleset {name})',
    ])


# ----------------------------------------------------------------------------- reduction algebra
#
# Rules whose result needs an argument no node of the written program has (a constant
# at the reduced shape, a count, the opposite reduction): their fact hooks compute it in
# Python at the node where the rule may fire and hand it over as a term built from
# encoder templates (search.language.Templates).


def _finite_nonzero(v) -> bool:
    return v is not None and math.isfinite(v) and v != 0


def _sum_of(key, i: int):
    """Node i as a float sum whose operand has its dtype: (node, operand node), or None."""
    n = key.nodes[i]
    if n.op is not Ops.REDUCE or n.arg[0] != "sum" or not n.dtype.is_float:
        return None
    x = key.nodes[n.src[0]]
    return (n, x) if x.dtype is n.dtype else None


# how far below a reduction its fact hooks look for the operand a rewrite may give it
# (`sum_scale` then `sum_bcast`: sum(c * broadcast(v)) -> c * sum(broadcast(v)) -> ...)
OPERAND_DEPTH = 3


def operands(key, i: int, ops: tuple) -> list[int]:
    """Node i's operand and the nodes up to `OPERAND_DEPTH` levels below it with one of
    `ops` and the operand's shape: the operands a rewrite of node i's operand may give
    it (facts are written for the program as written; rules fire on rewritten terms)."""
    s = key.nodes[i].src[0]
    shape = key.nodes[s].shape
    out, seen, level = [], {s}, [s]
    for _ in range(OPERAND_DEPTH):
        out += [j for j in level if key.nodes[j].op in ops and key.nodes[j].shape == shape]
        level = [t for j in level for t in key.nodes[j].src if t not in seen and not seen.add(t)]
    return out


def reads(key, j: int) -> int:
    """How many times node j is read: by other nodes' operands and as an output (counted
    once per key, kept on it)."""
    counts = key.__dict__.get("_svod_reads")
    if counts is None:
        counts = [0] * len(key.nodes)
        for n in key.nodes:
            for s in n.src:
                counts[s] += 1
        for o in key.outputs:
            counts[o] += 1
        object.__setattr__(key, "_svod_reads", counts)
    return counts[j]


def scale_match(key, i: int, prod_node: int | None = None):
    """`sum_scale` at node i: (constant operand node, its value, its position, op name)
    when node i sums `c * x`, `x * c` or `x / c` (node `prod_node`, default its operand;
    c a constant of the sum's dtype, finite and non-zero) that nothing else reads, else
    None. A product read elsewhere too is computed anyway (`f - mean(f)` with `f = c *
    x`): the rewrite saves the multiply in the reduction's pass only, which a
    memory-bound kernel does not notice, and it measured 3-8% slower on workload
    `flip_center` (docs/algebra.md, "Reduction algebra on by default")."""
    m = _sum_of(key, i)
    j = m and (m[0].src[0] if prod_node is None else prod_node)
    prod = m and key.nodes[j]
    if m is None or prod.op not in (Ops.MUL, Ops.DIV) or prod.dtype is not m[0].dtype or reads(key, j) != 1:
        return None
    for pos in ((0, 1) if prod.op is Ops.MUL else (1,)):
        k = prod.src[pos]
        v = const_value(key, k)
        if _finite_nonzero(v) and key.nodes[k].dtype is m[0].dtype:
            return k, v, pos, prod.op.value
    return None


@register_facts(("sum_scale",))
def _scale_facts(key, i: int, t: Templates) -> list[str]:
    """(ScaleBy n c ct a z): the sum n of a product with the constant term c has the
    constant at n's (reduced) shape as ct, and its result is made `+ 0.0` (template a,
    the zero z) — a sum is never -0.0 (svod's and numpy's start at +0.0) where `c * sum`
    can be (c < 0, or an underflow)."""
    if _sum_of(key, i) is None:
        return []
    n = key.nodes[i]
    out, seen = [], set()
    for p in operands(key, i, (Ops.MUL, Ops.DIV)):
        hit = scale_match(key, i, p)
        if hit is None or hit[0] in seen:
            continue
        k, v, _, _ = hit
        seen.add(k)
        a = t.add(Ops.ADD, None, n.dtype, n.dtype)
        out.append(f"(ScaleBy {i} (Load (Node {k})) {t.const(v, n.dtype, n.shape)} {a} "
                   f"{t.const(0.0, n.dtype, n.shape)})")
    return out


def bcast_match(key, i: int, expand: int | None = None):
    """`sum_bcast` at node i: (y, count, remaining axes) when node i sums EXPAND(y) (node
    `expand`, default its operand) over axes that include every axis the EXPAND
    broadcasts: the sum is `y' * count`, y' = y summed over the remaining reduced axes of
    length > 1 (none: y itself), count the product of the broadcast lengths, exactly
    representable in the dtype. Else None."""
    m = _sum_of(key, i)
    e = m and key.nodes[m[0].src[0] if expand is None else expand]
    if m is None or e.op is not Ops.EXPAND or e.shape != m[1].shape:
        return None
    n = m[0]
    y = key.nodes[e.src[0]]
    axes = set(n.arg[1])
    grown = {j for j, (a, b) in enumerate(zip(y.shape, e.shape)) if a != b}
    if not grown or not grown <= axes or y.dtype is not n.dtype:
        return None
    count = math.prod(e.shape[j] for j in grown)
    if float(n.dtype.np.type(count)) != count:  # the count itself would round
        return None
    rest = tuple(sorted(j for j in axes - grown if y.shape[j] > 1))
    return e.src[0], count, rest


@register_facts(("sum_bcast",))
def _bcast_facts(key, i: int, t: Templates) -> list[str]:
    """(SumBcast n e res): the sum n of the broadcast e is the term res (`y' * count +
    0.0`: a sum is never -0.0, `-0.0 * count` is)."""
    if _sum_of(key, i) is None:
        return []
    out = []
    for e in operands(key, i, (Ops.EXPAND,)):
        out += _bcast_fact(key, i, e, t)
    return out


def _bcast_fact(key, i: int, e: int, t: Templates) -> list[str]:
    hit = bcast_match(key, i, e)
    if hit is None:
        return []
    y, count, rest = hit
    n = key.nodes[i]
    yt = f"(Load (Node {y}))"
    out = []
    if rest:
        inner = t.term(Ops.REDUCE, ('sum', rest), [yt], n.dtype, n.dtype)
        yt = f"(Load (Kernel {inner}))"
        out.append(f'(Rewritten {inner} "sum_bcast")')
    mul = t.term(Ops.MUL, None, [yt, t.const(float(count), n.dtype, n.shape)], n.dtype, n.dtype)
    out.append(f'(Rewritten {mul} "sum_bcast")')
    res = t.term(Ops.ADD, None, [f"(Load (Kernel {mul}))", t.const(0.0, n.dtype, n.shape)], n.dtype, n.dtype)
    return [f"(SumBcast {i} {e} {res})", *out]


def bcast_reshape_match(key, i: int, expand: int | None = None):
    """`sum_bcast` through the reshape that drops the summed axes (keepdims=False): (y at
    node i's shape — an existing node, or None: a new reshape of y — , y, count) when
    node i is a RESHAPE of a sum of a broadcast that sums nothing else
    (`bcast_match` with no remaining axes), else None. The product is then computed at
    the reshape's shape: elementwise kernels of `sum(broadcast_to(v, (n, n)), 0)` and of
    `v * 2` share one iteration space (and merge)."""
    r = key.nodes[i]
    if r.op is not Ops.RESHAPE or _sum_of(key, r.src[0]) is None:
        return None
    hit = bcast_match(key, r.src[0], expand)
    if hit is None or hit[2]:
        return None
    y, count, _ = hit
    yn = key.nodes[y]
    if yn.shape == r.shape:
        return y, y, count
    if yn.op is Ops.RESHAPE and key.nodes[yn.src[0]].shape == r.shape:
        return yn.src[0], y, count
    return None, y, count


@register_facts(("sum_bcast",))
def _bcast_reshape_facts(key, i: int, t: Templates) -> list[str]:
    """(SumBcastR q n e res): the reshape q of the sum n of the broadcast e is res."""
    r = key.nodes[i]
    if r.op is not Ops.RESHAPE or _sum_of(key, r.src[0]) is None:
        return []
    out = []
    for e in operands(key, r.src[0], (Ops.EXPAND,)):
        hit = bcast_reshape_match(key, i, e)
        if hit is None:
            continue
        at, y, count = hit
        yt = f"(Load (Node {at}))" if at is not None else \
            f"(Load (Kernel {t.term(Ops.RESHAPE, tuple(r.shape), [f'(Load (Node {y}))'])}))"
        mul = t.term(Ops.MUL, None, [yt, t.const(float(count), r.dtype, r.shape)], r.dtype, r.dtype)
        res = t.term(Ops.ADD, None, [f"(Load (Kernel {mul}))", t.const(0.0, r.dtype, r.shape)], r.dtype, r.dtype)
        out += [f"(SumBcastR {i} {r.src[0]} {e} {res})", f'(Rewritten {mul} "sum_bcast")']
    return out


def _minmax(key, i: int) -> bool:
    n = key.nodes[i]
    return n.op is Ops.REDUCE and n.arg[0] in ("max", "min") and n.dtype.is_float


def shift_match(key, i: int, add_node: int | None = None):
    """`minmax_shift` at node i: (constant operand node, its value, its position, op
    name) when node i is a float max or min of `x + c`, `c + x`, `x - c` or `c - x`
    (node `add_node`, default its operand; c a finite constant of the reduction's
    dtype) that nothing else reads (as `scale_match`: a shifted value read elsewhere is
    computed anyway), else None."""
    n = key.nodes[i]
    if not _minmax(key, i):
        return None
    j = n.src[0] if add_node is None else add_node
    a = key.nodes[j]
    if a.op not in (Ops.ADD, Ops.SUB) or a.dtype is not n.dtype or a.shape != key.nodes[n.src[0]].shape \
            or reads(key, j) != 1:
        return None
    for pos in (1, 0):
        k = a.src[pos]
        v = const_value(key, k)
        if v is not None and math.isfinite(v) and key.nodes[k].dtype is n.dtype:
            return k, v, pos, a.op.value
    return None


@register_facts(("minmax_shift",))
def _shift_facts(key, i: int, t: Templates) -> list[str]:
    """(ShiftBy n c ct): the max/min n of a sum with the constant term c has it at n's
    shape as ct; (Flip n f): f is the opposite reduction over n's axes (for `c - x`)."""
    if not _minmax(key, i):
        return []
    n = key.nodes[i]
    out, seen = [], set()
    for a in operands(key, i, (Ops.ADD, Ops.SUB)):
        hit = shift_match(key, i, a)
        if hit is None or hit[0] in seen:
            continue
        k, v, pos, op = hit
        seen.add(k)
        out.append(f"(ShiftBy {i} (Load (Node {k})) {t.const(v, n.dtype, n.shape)})")
        if op == "SUB" and pos == 0 and not any(o.startswith("(Flip") for o in out):
            other = "min" if n.arg[0] == "max" else "max"
            out.append(f"(Flip {i} {t.add(Ops.REDUCE, (other, n.arg[1]), n.dtype, n.dtype)})")
    return out


def _red(n: str, x: str) -> str:
    return f'(E "REDUCE" {n} (Cons {x} (Nil)))'


def _bin(op: str, n: str, a: str, b: str) -> str:
    return f'(E "{op}" {n} (Cons {a} (Cons {b} (Nil))))'


def _ld(x: str) -> str:
    return f"(Load (Kernel {x}))"


def _sum_scale() -> str:
    """sum(c * x) -> c * sum(x), sum(x * c) -> sum(x) * c, sum(x / c) -> sum(x) / c for
    a finite non-zero constant c (`ScaleBy`): one multiply per output, not per element."""
    name = "sum_scale"
    out = [f"(ruleset {name})", "(relation ScaleBy (i64 F F i64 F))"]
    for op, pos in (("MUL", 1), ("MUL", 0), ("DIV", 1)):
        args = ("x", "c") if pos == 1 else ("c", "x")
        new = ("(Load (Kernel s))", "ct") if pos == 1 else ("ct", "(Load (Kernel s))")
        out.append(f'(rule ((= r {_red("n", _ld(_bin(op, "m", *args)))}) (ScaleBy n c ct a z))\n'
                   f'      ((let s {_red("n", "x")}) (let p {_bin(op, "m", *new)})\n'
                   f'       (union r {_bin("ADD", "a", "(Load (Kernel p))", "z")}) {_mark(name)} '
                   f'{_mark(name, "s")} {_mark(name, "p")}) :ruleset {name})')
    return "\n".join(out)


def _sum_bcast() -> str:
    """sum(broadcast(y)) over the broadcast axes -> y * count (`SumBcast` holds the
    replacement, built by the encoder with the count and the remaining sum's axes), also
    through the reshape that drops the summed axes (`SumBcastR`: the product at the
    reshape's shape)."""
    name = "sum_bcast"
    expand = '(E "EXPAND" e (Cons y (Nil)))'
    return "\n".join([
        f"(ruleset {name})", "(relation SumBcast (i64 i64 F))", "(relation SumBcastR (i64 i64 i64 F))",
        f'(rule ((= r {_red("n", _ld(expand))}) '
        f'(SumBcast n e res))\n      ((union r res) {_mark(name)}) :ruleset {name})',
        f'(rule ((= r (E "RESHAPE" q (Cons {_ld(_red("n", _ld(expand)))} (Nil)))) '
        f'(SumBcastR q n e res))\n      ((union r res) {_mark(name)}) :ruleset {name})',
    ])


def _minmax_shift() -> str:
    """max(x + c) -> max(x) + c (and min; c + x, x - c) and max(c - x) -> c - min(x),
    c a finite constant (`ShiftBy`; `Flip` names the opposite reduction): exact, rounding
    is monotone."""
    name = "minmax_shift"
    out = [f"(ruleset {name})", "(relation ShiftBy (i64 F F))", "(relation Flip (i64 i64))"]
    for op, pos in (("ADD", 1), ("ADD", 0), ("SUB", 1)):
        args = ("x", "c") if pos == 1 else ("c", "x")
        new = ("(Load (Kernel s))", "ct") if pos == 1 else ("ct", "(Load (Kernel s))")
        out.append(f'(rule ((= r {_red("n", _ld(_bin(op, "a", *args)))}) (ShiftBy n c ct))\n'
                   f'      ((let s {_red("n", "x")}) (union r {_bin(op, "a", *new)}) {_mark(name)} '
                   f'{_mark(name, "s")}) :ruleset {name})')
    out.append(f'(rule ((= r {_red("n", _ld(_bin("SUB", "a", "c", "x")))}) (ShiftBy n c ct) (Flip n f))\n'
               f'      ((let s {_red("f", "x")}) (union r {_bin("SUB", "a", "ct", "(Load (Kernel s))")}) '
               f'{_mark(name)} {_mark(name, "s")}) :ruleset {name})')
    return "\n".join(out)


@register_facts((_contract.NAME,))
def _contract_gate(key, i: int, t: Templates) -> list[str]:
    """(ContractAt n): node n is a sum of a product, the pattern every `contract` form
    starts from (search.contract.recognise); a graph without one skips the rule set."""
    n = key.nodes[i]
    if n.op is Ops.REDUCE and n.arg[0] == "sum" and key.nodes[n.src[0]].op is Ops.MUL:
        return [f"(ContractAt {i})"]
    return []


@register_facts((_contract.SIBLINGS,))
def _siblings_gate(key, i: int, t: Templates) -> list[str]:
    """(SiblingAt n): the product n shares its left operand with another product, which
    every `matmul_siblings` form needs (search.contract._siblings); a graph without such a
    pair skips the rule set."""
    n = key.nodes[i]
    if n.op is not Ops.MATMUL:
        return []
    left = key.__dict__.get("_svod_mm_left")
    if left is None:
        left = {}
        for m in key.nodes:
            if m.op is Ops.MATMUL:
                left[m.src[0]] = left.get(m.src[0], 0) + 1
        object.__setattr__(key, "_svod_mm_left", left)
    return [f"(SiblingAt {i})"] if left.get(n.src[0], 0) > 1 else []


# fusion rule set -> (producer class, consumer class): the relations of `facts()`
FUSIONS: dict[str, tuple[str, str]] = {
    "fuse_elementwise": ("Elementwise", "Elementwise"),
    "fuse_reduce_prologue": ("Elementwise", "Reduction"),
    "fuse_epilogue": ("Reduction", "Elementwise"),
    "fuse_nested_reduce": ("Reduction", "Reduction"),
    "fuse_matmul_epilogue": ("Matmul", "Elementwise"),
    "fuse_matmul_operand": ("Movement", "Matmul"),
}
CLASSES: dict[str, list[str]] = {"Elementwise": ELEMENTWISE_OPS, "Movement": MOVEMENT_OPS,
                                 "Reduction": REDUCTION_OPS, "Matmul": MATMUL_OPS}
RULESETS: dict[str, str] = {name: _fusion(name, p, c) for name, (p, c) in FUSIONS.items()}
RULESETS["algebra"] = _algebra()
RULESETS["movement"] = _movement()
RULESETS["movement_reshape"] = _mv.movement_reshape()
RULESETS["movement_reduce"] = _mv.movement_reduce()
RULESETS["matmul_assoc"] = _matmul_assoc()
RULESETS["sum_merge"] = _sum_merge()
RULESETS["matmul_distribute"] = _matmul_distribute()
RULESETS["matmul_transpose"] = _matmul_transpose()
RULESETS["sum_scale"] = _sum_scale()
RULESETS["sum_bcast"] = _sum_bcast()
RULESETS["minmax_shift"] = _minmax_shift()
# contraction recognition and sibling products (search/contract.py)
RULESETS.update({n: text for n, (text, _, _) in _contract.RULESETS.items()})
# kernel kinds: the attention chain as one kernel (search/kinds.py)
RULESETS.update({n: text for n, (text, _, _) in _kinds.RULESETS.items()})

# numerical status of each rule set (docs/algebra.md): "exact" = bit-identical results,
# "reassoc" = floating-point reassociation within a documented error bound
STATUS: dict[str, str] = {name: "exact" for name in RULESETS}
STATUS["matmul_assoc"] = "reassoc"
STATUS["sum_merge"] = "reassoc"
STATUS["matmul_distribute"] = "reassoc"
STATUS["matmul_transpose"] = "reassoc"
STATUS["sum_scale"] = "reassoc"
STATUS["sum_bcast"] = "reassoc"
STATUS["movement_reduce"] = "reassoc"  # svod's kernels sum in a layout-dependent order (docs/algebra.md)
STATUS.update({n: st for n, (_, st, _) in _contract.RULESETS.items()})
STATUS.update({n: st for n, (_, st, _) in _kinds.RULESETS.items()})
# the rule sets that rewrite the program
ALGEBRA_SETS = ("algebra", "movement", "movement_reshape", "movement_reduce",
                "matmul_assoc", "sum_merge", "matmul_distribute", "matmul_transpose",
                "sum_scale", "sum_bcast", "minmax_shift", *_contract.RULESETS)
MODES = ("reassoc", "exact")
# Pointwise: elementwise ops with their own arithmetic (not movement, not sources or CAT)
POINTWISE_OPS = sorted(set(ELEMENTWISE_OPS) - set(MOVEMENT_OPS) - {"CONST", "CAT", "CONTIGUOUS"})


def fusing_ruleset(producer: str, consumer: str, names=None) -> str | None:
    """The rule set (of `names`, default all) that fuses an op named `producer` (an
    `Ops` value) into one named `consumer`, or None when no rule does."""
    for name, (p, c) in FUSIONS.items():
        if (names is None or name in names) and producer in CLASSES[p] and consumer in CLASSES[c]:
            return name
    return None
FUSION = tuple(n for n in RULESETS if n.startswith("fuse_"))
# rule sets that run only when named (docs/algebra.md): the contraction forms marked off in
# search.contract.RULESETS. The movement sets are on: their rules through pointwise ops
# keep the e-graph finite (search.algebra_movement.through_pointwise; docs/algebra.md, "Why
# the movement sets grew the e-graph without bound"; tests/test_algebra_movement.py,
# test_movement_heavy_programs_search_in_bounded_memory) and the exploration prices one
# program per movement form (search.algebra_movement.movement_form).
# `matmul_siblings` is on: its forms are made for small groups only
# (search.contract.SIBLING_MAX_FLOPS). The reduction algebra (`sum_merge`, `sum_scale`,
# `minmax_shift`) is on: where the cost model prices the rewritten and the written program
# alike the written one is kept (a rewritten e-node costs 0.001 more), and the merged row
# sum that made `sum_merge` opt-in runs as fast as the two sums since its block loop is no
# longer unrolled (svod.codegen.reduction.BLOCK_LOOP_HINTS; docs/algebra.md, "Measured")
OPT_IN = tuple(n for n, (_, _, on) in _contract.RULESETS.items() if not on)
DEFAULT = tuple(n for n in RULESETS if n not in OPT_IN)
ALL = tuple(RULESETS)
EXACT = tuple(n for n in DEFAULT if STATUS[n] == "exact")


def default_rulesets(mode: str = "reassoc") -> tuple[str, ...]:
    """The rule sets the search runs in algebra `mode`: the default sets (all but
    `OPT_IN`) in "reassoc" mode, their `exact` ones in "exact" mode."""
    if mode not in MODES:
        raise ValueError(f"search_limits: algebra must be one of {MODES}, got {mode!r}")
    return DEFAULT if mode == "reassoc" else EXACT


def program(names=DEFAULT) -> str:
    """Declarations of the named rule sets."""
    unknown = set(names) - set(RULESETS)
    if unknown:
        raise ValueError(f"unknown rule set(s) {sorted(unknown)}; known: {sorted(RULESETS)}")
    return "\n".join(RULESETS[n] for n in names)


def schedule(names=DEFAULT) -> str:
    """One iteration of every named rule set, as an egglog schedule (the movement sets
    repeated up to a bound within it: `search.algebra_movement.run_text`)."""
    return "(run-schedule " + " ".join(_mv.run_text(n) for n in names) + ")"
