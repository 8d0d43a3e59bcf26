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
- `algebra`: rewrites exact in IEEE arithmetic: x*1, 1*x, x/1, x+(-0.0), (-0.0)+x,
  x-(+0.0), -(-x), max(x,x), min(x,x), where(c,x,x) -> x. (Not x+0.0: -0.0+0.0 = +0.0.)
- `movement` (exact): a transpose of a transpose that undoes it cancels; a pointwise op
  of transposed operands (same order) becomes the transpose of the op:
  `f(T(a)) -> T(f(a))`, `T(a) op T(b) -> T(a op b)` — so transposes meet and cancel.
- `matmul_assoc` (reassoc): `(A @ B) @ C <-> A @ (B @ C)`; the extraction picks the
  association by cost (a chain ending in a vector becomes matrix-vector products).
- `matmul_distribute` (reassoc): `A @ B +- A @ C -> A @ (B +- C)`, and on the right.
- `matmul_transpose` (reassoc): `(A @ B).T <-> B.T @ A.T` (last two axes).
- `sum_merge` (reassoc, opt-in: not in `DEFAULT`): `sum(x) + sum(y) -> sum(x + y)` and
  `sum(x) - sum(y) -> sum(x - y)` over the same axes of floating operands of one shape
  and dtype.

Every rule set has a numerical status (`STATUS`): `exact` sets give bit-identical
results and are always on; `reassoc` sets reorder floating-point arithmetic (error
bounds in docs/algebra.md) and are on unless the algebra mode is `exact`
(`svod.search_limits(algebra="exact")`, `SVOD_ALGEBRA=exact`): `default_rulesets()`.

Sibling multi-output fusion and recompute-versus-materialise are decided by extraction:
a producer that is not materialised is recomputed in every kernel that reads it, and
kernels over one iteration space that share inputs merge into one multi-output kernel.
"""

from __future__ import annotations

from search import contract as _contract
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
        f'(rule ((= r (E op n (Cons {T("p", "x")} (Nil)))) (Pointwise op))\n'
        f'      ((union r (E "PERMUTE" p (Cons (Load (Kernel (E op n (Cons x (Nil)))))  (Nil)))) '
        f'{_mark("movement")} {_mark("movement", "(E op n (Cons x (Nil)))")}) :ruleset movement)',
        f'(rule ((= r (E op n (Cons {T("p", "x")} (Cons {T("q", "y")} (Nil))))) (Pointwise op))\n'
        f'      ((BinT r op n p q x y)) :ruleset movement)',
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

    out = ["(ruleset sum_merge)"]
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
RULESETS["matmul_assoc"] = _matmul_assoc()
RULESETS["sum_merge"] = _sum_merge()
RULESETS["matmul_distribute"] = _matmul_distribute()
RULESETS["matmul_transpose"] = _matmul_transpose()
# contraction recognition and sibling products (search/contract.py)
RULESETS.update({n: text for n, (text, _, _) in _contract.RULESETS.items()})

# numerical status of each rule set (docs/algebra.md): "exact" = bit-identical results,
# "reassoc" = floating-point reassociation within a documented error bound
STATUS: dict[str, str] = {name: "exact" for name in RULESETS}
STATUS["matmul_assoc"] = "reassoc"
STATUS["sum_merge"] = "reassoc"
STATUS["matmul_distribute"] = "reassoc"
STATUS["matmul_transpose"] = "reassoc"
STATUS.update({n: st for n, (_, st, _) in _contract.RULESETS.items()})
# the rule sets that rewrite the program
ALGEBRA_SETS = ("algebra", "movement", "matmul_assoc", "sum_merge", "matmul_distribute", "matmul_transpose",
                *_contract.RULESETS)
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
# rule sets that run only when named: `sum_merge` gives one reduction instead of two, but
# svod's generated row sum of `x - y` measured 2-5x slower than the two row sums
# (docs/algebra.md), and the cost model prices both alike
OPT_IN = ("sum_merge", *(n for n, (_, _, on) in _contract.RULESETS.items() if not on))
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
    """One iteration of every named rule set, as an egglog schedule."""
    return "(run-schedule " + " ".join(f"(run {n})" for n in names) + ")"
