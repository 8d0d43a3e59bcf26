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
search/algebra_movement.py's rule sets declare their own relations (composed orders,
reshape and broadcast signatures, mapped reductions).
`PermPair`, `BinT`, `SumPair`, `SumPairR` hold candidate matches between the two stages
of a rule whose condition joins facts on a value (egglog joins `(PermIs p s) (PermIs q s)`
before the pattern when written in one rule: 0.4 s on a 230-node graph, against 0.5 ms
in two stages).

A node made by a rewrite is an `E` term too: its `i64` names a *template* node whose
operation and argument it uses (the decoder infers its dtype and shape from its sources,
`search.extract`), so rewritten programs decode to GraphKeys with new nodes.

A rule that needs an argument no node of the written program has (a broadcast to a
reduced shape, a constant such as a count, a composed permutation, a new reduction's
axes) uses a template the *encoder* adds: `Templates` numbers them after the GraphKey's
nodes (id `len(key.nodes) + j`), and fact hooks (`register_facts`) — run by the encoder
on every node of the written graph — add them while writing the facts their rules join
on. The decoder reads template ids past the key from the same `Templates`
(`search.extract.Program(js, key, templates)`).

The text form is used rather than egglog-python's expression objects because building
the e-graph is then linear and fast on both egglog lines (13.2: one top-level command
per node is quadratic, so the encoding is batched into rules of 50 actions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from svod.dtype import DType
from svod.ir import Ops
from svod.key import GraphKey

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


def const_value(key, i: int):
    """The value of GraphKey node i when it is a (reshaped, broadcast) constant of a
    number (not a bool), else None."""
    n = key.nodes[i]
    while n.op in (Ops.RESHAPE, Ops.EXPAND):
        n = key.nodes[n.src[0]]
    if n.op is not Ops.CONST or isinstance(n.arg, bool) or not isinstance(n.arg, (int, float)):
        return None
    return n.arg


def swaps_last(perm: tuple[int, ...]) -> bool:
    """Whether a PERMUTE order swaps the last two axes only (a matrix transpose, batched)."""
    n = len(perm)
    return n >= 2 and tuple(perm) == tuple(range(n - 2)) + (n - 1, n - 2)


# ----------------------------------------------------------------------------- new arguments


@dataclass(frozen=True)
class Template:
    """An operation with an argument that no node of the written program has, for the
    terms a rule makes. `dtype` is the result's (None: the first source's, for movement
    ops); `operand` the dtype every source must have (None: any). Its shape is never
    stored: the decoder infers it from the sources (`svod.ir._infer_shape`), and refuses
    the term (never lowers it) when the sources do not fit the operation."""

    op: Ops
    arg: object
    dtype: DType | None = None
    operand: DType | None = None
    shape_in: tuple | None = None  # the source shape the rules apply it to (a composed reshape's)


class Templates:
    """The templates one encoding adds, numbered after the GraphKey's nodes.

    Contract, for any rule module (search/rules.py, search/contract.py, ...):

    - `add(op, arg, dtype, operand, shape_in)` returns the template's id, an `i64` for
      `(E "OP" id srcs)` terms; equal templates share one id (deterministic: ids follow
      the order of the `add` calls, which follow the graph's nodes and the hooks' order).
      `shape_in` keeps apart templates whose facts depend on their source's shape (a
      composed reshape: search/algebra_movement.py); the decoder refuses a term of such a
      template over a source of another shape.
    - `term(op, arg, srcs, ...)` is that `E` term as egglog text over source terms
      `srcs` (each an F term: `(Load (Node i))`, `(Load (Kernel ...))`, an e-class
      variable bound by the rule).
    - `const(value, dtype, shape)` is an F term for a constant broadcast to `shape`
      (CONST, then RESHAPE to rank, then EXPAND), ready as an operand.
    - `get(i)` is template i (a `KeyNode` of the graph for i < `base`, else a `Template`).

    Only the encoder's fact hooks add templates (while the key is being encoded): the
    e-graph's rules cannot compute arguments, so each argument a rule may need is
    computed in Python at the node where the rule may fire, and handed to the rule in a
    fact that names its template id (e.g. `(SumBcast n e t)`)."""

    def __init__(self, key: GraphKey):
        self.key = key
        self.base = len(key.nodes)
        self.extra: list[Template] = []
        self._index: dict[tuple, int] = {}

    def add(self, op: Ops, arg=None, dtype: DType | None = None, operand: DType | None = None,
            shape_in: tuple | None = None) -> int:
        t = Template(op, arg, dtype, operand, shape_in)
        k = (op, repr(arg), dtype and dtype.name, operand and operand.name, shape_in)
        if k not in self._index:
            self._index[k] = self.base + len(self.extra)
            self.extra.append(t)
        return self._index[k]

    def get(self, i: int):
        return self.key.nodes[i] if i < self.base else self.extra[i - self.base]

    def is_new(self, i: int) -> bool:
        return i >= self.base

    def term(self, op: Ops, arg, srcs: list[str], dtype: DType | None = None, operand: DType | None = None) -> str:
        return f'(E "{op.value}" {self.add(op, arg, dtype, operand)} {flist(srcs)})'

    def const(self, value, dtype: DType, shape: tuple[int, ...]) -> str:
        c = f"(Load (Kernel {self.term(Ops.CONST, value, [], dtype)}))"
        if not shape:
            return c
        r = f"(Load (Kernel {self.term(Ops.RESHAPE, (1,) * len(shape), [c])}))"
        if all(d == 1 for d in shape):
            return r
        return f"(Load (Kernel {self.term(Ops.EXPAND, tuple(shape), [r])}))"


# (key, node index, templates) -> egglog actions (facts) for node i of the written graph
FactHook = Callable[[GraphKey, int, Templates], list]
FACT_HOOKS: list[tuple[FactHook, tuple[str, ...]]] = []
# rule sets each of whose rules needs a fact of their hooks: skipped by saturation when
# their hooks wrote no fact for the graph (nothing could fire: no per-iteration cost)
GATED: set[str] = set()


def register_facts(rulesets: tuple[str, ...], gates: bool = True):
    """Decorator registering a fact hook for the rule sets named `rulesets`: the encoder
    calls `hook(key, i, templates)` for every computed node i of the graph it encodes
    and, when one of `rulesets` is active in that search, adds the actions it returns
    (egglog text: relation facts, possibly with terms built by `templates`). A rule
    module registers its hooks at import; its rule set text declares the relations.
    Every hook runs whichever rule sets are active, so template ids depend on the key
    alone (a decoder rebuilds them with `template_facts(key)`). With `gates` (the
    default), every rule of `rulesets` needs one of its hooks' facts: a search whose
    graph got none skips those rule sets (`fed_rulesets`). Registering the same function
    twice has no effect."""
    def deco(hook: FactHook) -> FactHook:
        if all(h is not hook for h, _ in FACT_HOOKS):
            FACT_HOOKS.append((hook, tuple(rulesets)))
            if gates:
                GATED.update(rulesets)
        return hook

    return deco


def template_facts(key: GraphKey, active=None) -> tuple[Templates, list[str]]:
    """Run every registered hook over `key`'s computed nodes: (the templates they
    added, the actions of the hooks of `active` rule sets; None: all). The templates
    are the same whatever `active` is."""
    t, actions, _ = _run_hooks(key, active)
    return t, actions


def _run_hooks(key: GraphKey, active=None, upto: int | None = None) -> tuple[Templates, list[str], set[str]]:
    t = Templates(key)
    actions: list[str] = []
    fed: set[str] = set()
    act = None if active is None else set(active)
    for i, n in enumerate(key.nodes[:upto]):
        if n.op is Ops.BUFFER:
            continue
        for hook, names in FACT_HOOKS:
            out = hook(key, i, t)
            if out and (act is None or act.intersection(names)):
                actions.extend(out)
                fed.update(names)
    return t, actions, fed


def fed_rulesets(key: GraphKey, rulesets, upto: int | None = None) -> tuple[Templates, list[str], tuple[str, ...]]:
    """(templates, the facts of the active `rulesets`' hooks, the rule sets that can
    fire on `key`: `rulesets` without the `GATED` ones none of whose hooks wrote a fact).
    `upto`: the hooks run on `key.nodes[:upto]` only (the written program's nodes when
    `key` carries search/contract.py's template nodes after them); the templates are
    numbered after all of `key`'s nodes."""
    t, actions, fed = _run_hooks(key, rulesets, upto)
    return t, actions, tuple(n for n in rulesets if n not in GATED or n in fed)
