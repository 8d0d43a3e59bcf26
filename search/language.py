"""The e-graph language svod saturates, as egglog source (run through egglog's bindings).

Sorts:

- `T`, a materialised tensor: `(Input i)` — the i-th bound input — or `(Kernel body)`.
- `F`, an in-kernel expression: `(Load t)` reads a materialised tensor;
  `(E op node srcs)` applies GraphKey node `node`'s operation (`op` names it for the
  rules; the GraphKey holds dtype, shape and arguments) to its sources.
- `FL`, the sources as a cons list (`Cons`, `Nil`): one constructor for every arity.

Names: `(Node i)` is graph node i's tensor and `(Body i)` its own expression — handles
for encoding, relations and decoding, unioned with the terms they name.

Relations classify ops for the fusion rules (`Elementwise`, `Movement`, `Reduction`,
`Matmul`) and mark broadcast constants (`ConstIs`) for the exact algebraic rules.
The algebra rule sets (docs/algebra.md) also read `Pointwise` (elementwise ops that are
not movement), `PermIs`/`PermInvIs` (a PERMUTE node's order / its inverse, as text), and
record what they did in `(Rewritten value rule-set)` (explain, the e-graph picture).
`PermPair`, `BinT`, `SumPair`, `SumPairR` hold candidate matches between the two stages
of a rule whose condition joins facts on a value (egglog joins `(PermIs p s) (PermIs q s)`
before the pattern when written in one rule: 0.4 s on a 230-node graph, against 0.5 ms
in two stages).

A node made by a rewrite is an `E` term too: its `i64` names a *template* node whose
operation and argument it uses (the decoder infers its dtype and shape from its sources,
`search.extract`), so rewritten programs decode to GraphKeys with new nodes.

The text form is used rather than egglog-python's expression objects because building
the e-graph is then linear and fast on both egglog lines (13.2: one top-level command
per node is quadratic, so the encoding is batched into rules of 50 actions).
"""

from __future__ import annotations

from svod.ir import Ops

DECLARATIONS = """
(sort T)
(sort F)
(sort FL)
(constructor Input (i64) T)
(constructor Kernel (F) T)
(constructor Load (T) F)
(constructor E (String i64 FL) F)
(constructor Cons (F FL) FL)
(constructor Nil () FL)
(constructor Node (i64) T)
(constructor Body (i64) F)
(relation Elementwise (String))
(relation Movement (String))
(relation Reduction (String))
(relation Matmul (String))
(relation ConstIs (F String))
(relation Pointwise (String))
(relation PermIs (i64 String))
(relation PermInvIs (i64 String))
(relation SumIs (i64 String))
(relation SwapLast (i64))
(relation PermPair (F i64 i64 F))
(relation BinT (F String i64 i64 i64 F F))
(relation SumPair (F String i64 i64 i64 F F))
(relation SumPairR (F String i64 i64 i64 i64 F F))
(relation Rewritten (F String))
"""

# e-node operators that are names, not choices (decoding ignores them)
HANDLES = ("Node", "Body")


def flist(items: list[str]) -> str:
    out = "(Nil)"
    for x in reversed(items):
        out = f"(Cons {x} {out})"
    return out


def quote(s: str) -> str:
    return '"' + s.replace("\\\\", "\\\\\\\\").replace('"', '\\\\"') + '"'


def const_kind(key, i: int) -> str | None:
    """'one', '+zero' or '-zero' when GraphKey node i is a (broadcast) constant of that
    value (the `ConstIs` facts of the exact algebra rules)."""
    n = key.nodes[i]
    while n.op in (Ops.RESHAPE, Ops.EXPAND):
        n = key.nodes[n.src[0]]
    if n.op is not Ops.CONST or isinstance(n.arg, bool):
        return None
    if n.arg == 1:
        return "one"
    if n.arg == 0:
        return "-zero" if isinstance(n.arg, float) and str(n.arg) == "-0.0" else "+zero"
    return None


def swaps_last(perm: tuple[int, ...]) -> bool:
    """Whether a PERMUTE order swaps the last two axes only (a matrix transpose, batched)."""
    n = len(perm)
    return n >= 2 and tuple(perm) == tuple(range(n - 2)) + (n - 1, n - 2)
