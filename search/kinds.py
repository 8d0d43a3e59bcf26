"""Kernel kinds as e-graph choices (docs/algebra.md, "Kernel kinds"): a kind is a kernel
that computes a consumer together with a producer that no ordinary kernel could inline
(a matmul operand must be a view of a materialised value). A rule set per kind adds, at
the consumer, the variant that reads the producer's *body* instead of loading it; the
extraction then prices "materialise the producer" against "inline it" with the cost
model, like any other fusion choice, and the lowering (`svod.lower.build`) builds the
kind's kernel where the producer is inlined, or materialises it when the kind's kernel
cannot run the chain as written (legality adds boundaries, never removes them).

Registered kinds:

- `attention` (rule set `kind_attention`, status exact): at a MATMUL whose A operand is
  the row softmax (over the last axis) of an elementwise function of a MATMUL — a scale,
  `where(causal, s, -inf)`, an additive mask — the variant with the softmax inlined into
  the second matmul. Lowered by `svod.lower.attention.build_attention` to one
  `Kernel.attention` (`svod.codegen.attention`): no (m, n) score buffer. Off with
  `SVOD_FUSE_ATTENTION=0` (no fact is written; the lowering builds no attention kernel).

- `mlp` (rule set `kind_mlp`, status exact): at a 2-D MATMUL whose A operand is an
  elementwise function (a bias row, an activation, none) of exactly one 2-D MATMUL — the
  MLP block ``act(x @ W1 + b1) @ W2 + b2`` — the variant with the hidden value inlined
  into the second matmul. Lowered by `svod.lower.mlp.build_mlp` to one `Kernel.mlp`
  (`svod.codegen.mlp`): the two products a block of rows at a time, no (m, h) hidden
  buffer. Off with `SVOD_FUSE_MLP=0`.

- `rmsnorm` (rule set `kind_rmsnorm`, status exact): at a 2-D MATMUL whose A operand is a
  row normalisation — elementwise over at least one REDUCE over the last axis of a tensor
  of its shape, no MATMUL below: RMSNorm ``x * rsqrt(mean(x²) + eps) * g``, layer norm —
  the variant with the normalised value inlined into the matmul. Lowered by
  `svod.lower.rmsnorm.build_rmsnorm` to one `Kernel.rmsnorm` (`svod.codegen.rmsnorm`): the
  generated GEMM computing the normalised x while packing A, no (m, k) buffer. Off with
  `SVOD_FUSE_RMSNORM=0`.

The mlp and rmsnorm pre-filters live in svod's core (`svod.lower.kindsites`), where the
greedy planner (`svod.plan_greedy`) reads them too.

How a rule set gets its facts: `_facts` (a `search.language.register_facts` hook, run by
the encoder on every node of the written graph) calls each kind's `match(key, i)`, a
cheap structural pre-filter in Python; for a match it writes `(<Rel> i p)` (consumer i,
inlined producer p). The rule of the kind unions
`(E op i [... (Load (Node p)) ...])` with `(E op i [... (Body p) ...])`. The rule sets
are gated on their facts: a graph without the pattern pays nothing per iteration.

Adding a kind (the fused MLP and RMSNorm + matmul above were added this way):

1. a `Kind` here — its name, the consumer op and operand position, a `match` pre-filter —
   appended to `KINDS` (search/rules.py registers every kind's rule set with
   `RULESETS`/`STATUS`, in `DEFAULT`);
2. a builder in `svod.lower` registered in `svod.lower.build.KERNEL_KINDS` (consumer op
   -> builders): given the consumer and the non-materialised producer, it builds the
   kind's `Kernel` or returns None (the producer is then materialised, as without the
   kind);
3. a `Kernel` kind the code generator and the cost model know (`svod.kernel`,
   `svod.codegen`, `costmodels`) — the part that makes the kernel fast.

The extraction and `svod.explain` need nothing more: the choice is a fusible edge, and
the explain's variants table shows each variant's kernels by kind.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from search.language import register_facts
from svod.dtype import float32
from svod.ir import Ops
from svod.key import GraphKey
from svod.lower.kindsites import hidden_matmul, one_matmul, row_prologue  # noqa: F401 - re-exported


@dataclass(frozen=True)
class Kind:
    """One kernel kind: at a node of op `consumer`, operand `position`'s producer (found
    by `match(key, i)`, None: no match) may be inlined. `switch`: the environment
    variable that turns the kind off with 0."""

    name: str
    consumer: Ops
    position: int
    match: Callable[[GraphKey, int], int | None]
    switch: str | None = None

    @property
    def ruleset(self) -> str:
        return f"kind_{self.name}"

    @property
    def relation(self) -> str:
        return f"Kind{self.name.capitalize()}At"

    def enabled(self) -> bool:
        return self.switch is None or os.environ.get(self.switch, "1") not in ("0", "false", "False")

    def text(self) -> str:
        """The rule set, as egglog source (declares its relation)."""
        def at(item: str) -> str:
            out = f"(Cons {item} rest)"
            for j in reversed(range(self.position)):
                out = f"(Cons x{j} {out})"
            return out

        op = self.consumer.value
        return (f"(relation {self.relation} (i64 i64))\n(ruleset {self.ruleset})\n"
                f"(rule (({self.relation} n p) (= r (E \"{op}\" n {at('(Load (Node p))')})))\n"
                f"      ((union r (E \"{op}\" n {at('(Body p)')}))) :ruleset {self.ruleset})")


# ----------------------------------------------------------------------------- attention


def _through(key: GraphKey, i: int, op: Ops) -> int | None:
    """Node i, or what an EXPAND/RESHAPE chain over it reads, when that is an `op` node."""
    n = key.nodes[i]
    while n.op in (Ops.EXPAND, Ops.RESHAPE):
        i = n.src[0]
        n = key.nodes[i]
    return i if n.op is op else None


def _row(key: GraphKey, r: int | None, fn: str, x: int) -> bool:
    """Node r is REDUCE(fn) of x over its last axis."""
    if r is None:
        return False
    n = key.nodes[r]
    return n.arg[0] == fn and n.src == (x,) and tuple(n.arg[1]) == (len(key.nodes[x].shape) - 1,)


def softmax_matmul(key: GraphKey, d: int) -> int | None:
    """The MATMUL node whose scores node d is the row softmax of — d =
    `e / Σe`, e = `exp(t - max t)` over the last axis, t an elementwise function (through
    broadcasts and reshapes) of exactly one MATMUL of t's shape — else None. float32 only
    (the attention kernel's dtype). A pre-filter: the lowering decides legality."""
    n = key.nodes[d]
    if n.op is not Ops.DIV or n.dtype is not float32 or len(n.shape) < 2:
        return None
    e, s = n.src
    if key.nodes[e].op is not Ops.EXP or not _row(key, _through(key, s, Ops.REDUCE), "sum", e):
        return None
    sub = key.nodes[key.nodes[e].src[0]]
    if sub.op is not Ops.SUB:
        return None
    t, mx = sub.src
    if not _row(key, _through(key, mx, Ops.REDUCE), "max", t) or key.nodes[t].shape != n.shape:
        return None
    # a prologue is a few ops: a big cone is not this pattern
    return one_matmul(key, t, n.shape, float32, (), 64)


def _attention(key: GraphKey, i: int) -> int | None:
    """MATMUL node i = softmax(t(q @ kᵀ)) @ v: its A operand (the softmax node), else None."""
    n = key.nodes[i]
    if n.op is not Ops.MATMUL or n.dtype is not float32 or len(n.src) != 2:
        return None
    d = n.src[0]
    return d if softmax_matmul(key, d) is not None else None


ATTENTION = Kind("attention", Ops.MATMUL, 0, _attention, "SVOD_FUSE_ATTENTION")


# ----------------------------------------------------------------------------- the MLP


def _mlp(key: GraphKey, i: int) -> int | None:
    """MATMUL node i = e1(x @ w1) @ w2, 2-D: its A operand (the hidden value), else None."""
    n = key.nodes[i]
    if n.op is not Ops.MATMUL or len(n.src) != 2 or len(n.shape) != 2 or not n.dtype.is_float:
        return None
    p = n.src[0]
    return p if hidden_matmul(key, p) is not None else None


MLP = Kind("mlp", Ops.MATMUL, 0, _mlp, "SVOD_FUSE_MLP")


# ----------------------------------------------------------------------------- row prologue (RMSNorm, layer norm)


def _rmsnorm(key: GraphKey, i: int) -> int | None:
    """MATMUL node i = f(x) @ w, f a row normalisation of x (rows of a batch too): its A
    operand, else None."""
    n = key.nodes[i]
    if n.op is not Ops.MATMUL or len(n.src) != 2 or len(n.shape) < 2 or not n.dtype.is_float:
        return None
    p = n.src[0]
    return p if row_prologue(key, p) else None


RMSNORM = Kind("rmsnorm", Ops.MATMUL, 0, _rmsnorm, "SVOD_FUSE_RMSNORM")
KINDS: tuple[Kind, ...] = (ATTENTION, MLP, RMSNORM)
# rule set name -> (egglog text, numerical status, on by default): registered by search/rules.py.
# exact: the kind's kernel computes the written operations (to the tolerance every
# fused kernel has: its sums and products in another order), not a rewritten program
RULESETS = {k.ruleset: (k.text(), "exact", True) for k in KINDS}


@register_facts(tuple(RULESETS))
def _facts(key: GraphKey, i: int, templates) -> list[str]:
    """`(<Rel> i p)` for every kind matching at node i (its switch on)."""
    n = key.nodes[i]
    out = []
    for k in KINDS:
        if n.op is k.consumer and k.enabled():
            p = k.match(key, i)
            if p is not None:
                out.append(f"({k.relation} {i} {p})")
    return out
