"""Movement algebra beyond cancelling transposes (issue 30; docs/algebra.md, "Movement
algebra"). A movement op relabels elements without computing, so moving it through a
pointwise op changes which tensor the op runs on, never a value: `movement` and
`movement_reshape` are *exact* (bit-identical). `movement_reduce` is *reassoc*: the
same elements are reduced, but svod's kernels sum in a layout-dependent order. Both are
on by default (`movement_reduce` off in the exact algebra mode). They make many
equivalent programs (each position of each view): the extraction prices one program
per *movement form* (`movement_form`, used by `search.extract.explore`), and the sets
repeat within a search iteration (`run_text`).

- `movement` (search/rules.py) gains composed permutations: `T_q(T_p(x)) -> T_{p∘q}(x)`
  for any two permutes (not only inverse pairs; `compose`), and
- `movement_reduce`: a reduction of a permuted value is the permuted reduction over the
  mapped axes, `R_K(T_p(x)) -> T_p(R_{p[K]}(x))` (REDUCE keeps the reduced axes as size
  1, so the same permutation applies), for reductions whose summation order the move
  keeps (`reduce_through`: the mapped axes in the same order).
- `movement_reshape`: reshapes and broadcasts (EXPAND) sunk through pointwise ops —
  `f(R(x)) -> R(f(x))`, `R(a) op R(b) -> R(a op b)` when both views are the same (same
  source and target shape), the same for EXPAND (the op then runs on the unbroadcast
  values) — and reshapes composed or cancelled: `reshape(reshape(x))` is one reshape of x,
  or x itself when it comes back to x's shape; a permute of a reshape that moves whole
  groups of its axes goes below it, `T_p(reshape(x)) -> reshape'(T_p'(x))`
  (`permute_through_reshape`), where it may meet another permute of x.

egglog cannot compute a composed permutation, a reshape's source shape or mapped axes, so
the fact hooks below compute them in Python over the written program, closed under
composition (`perm_closure`, `reshape_closure`: every permutation or reshape a rewrite
can make from the written ones, capped at `CLOSURE_CAP` per rank/graph), and hand them to
the rules as facts naming encoder templates (search/language.py).

Reshape facts name *signatures* ("source shape > target shape"): a written RESHAPE node
is only ever applied, by these rules, to a value of its written source's shape (the sunk
op keeps the shape), and composed reshapes are templates of their own (`Template.shape_in`),
so a signature fact is true of every term its template id appears in.
"""

from __future__ import annotations

import hashlib

from search.language import Templates, register_facts, swaps_last
from svod.ir import Ops, _hash_arg
from svod.ops import fusion_class

CLOSURE_CAP = 24  # permutations per rank, reshape signatures per graph


def compose(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, ...]:
    """The order of `PERMUTE q` after `PERMUTE p`: `T_q(T_p(x)) = T_{compose(p, q)}(x)`
    (axis j of the result is axis p[q[j]] of x)."""
    return tuple(p[j] for j in q)


def inverse(p: tuple[int, ...]) -> tuple[int, ...]:
    out = [0] * len(p)
    for j, a in enumerate(p):
        out[a] = j
    return tuple(out)


def perm_text(p) -> str:
    return ",".join(map(str, p))


def _closed(items: list, step) -> list:
    """`items` closed under `step(a, b)` (a new item or None), breadth first, in a
    deterministic order, at most `CLOSURE_CAP` items."""
    out = list(dict.fromkeys(items))[:CLOSURE_CAP]
    seen = set(out)
    i = 0
    while i < len(out):
        for j in range(i + 1):
            for a, b in ((out[i], out[j]), (out[j], out[i])):
                c = step(a, b)
                if c is not None and c not in seen and len(out) < CLOSURE_CAP:
                    seen.add(c)
                    out.append(c)
        i += 1
    return out


def perm_closure(key) -> dict[int, list[tuple[int, ...]]]:
    """rank -> the written PERMUTE orders of that rank, and those a permute moved below
    a written reshape gets (`permute_through_reshape`), closed under composition
    (identities dropped: an inverse pair cancels, `movement`'s first rule)."""
    by_rank: dict[int, list] = {}
    for n in key.nodes:
        if n.op is Ops.PERMUTE:
            by_rank.setdefault(len(n.arg), []).append(tuple(n.arg))
    for q, _, _ in _through(key):
        by_rank.setdefault(len(q), []).append(q)

    def step(a, b):
        c = compose(a, b)
        return None if c == tuple(range(len(c))) else c

    return {r: _closed(ps, step) for r, ps in by_rank.items()}


def _views(key, op: Ops) -> list[tuple[int, tuple, tuple]]:
    """(node, source shape, target shape) of the written `op` nodes (RESHAPE or EXPAND)
    that are not views of a constant (a broadcast constant is inlined wherever it is read:
    moving it gains nothing)."""
    out = []
    for i, n in enumerate(key.nodes):
        if n.op is op and not _of_const(key, i):
            out.append((i, tuple(key.nodes[n.src[0]].shape), tuple(n.shape)))
    return out


def _of_const(key, i: int) -> bool:
    n = key.nodes[i]
    while n.op in (Ops.RESHAPE, Ops.EXPAND):
        n = key.nodes[n.src[0]]
    return n.op is Ops.CONST


def sig(src: tuple, dst: tuple) -> str:
    """A reshape's or broadcast's signature: its source and target shapes."""
    return f"{perm_text(src)}>{perm_text(dst)}"


def reshape_closure(key) -> list[tuple[tuple, tuple]]:
    """The written reshapes' (source, target) shapes, and those of the reshapes a
    permute moved below one makes (`permute_through_reshape`), closed under composition
    (a chain back to its source is a cancellation, not a reshape)."""
    def step(a, b):
        return (a[0], b[1]) if a[1] == b[0] and a[0] != b[1] else None

    sigs = [(s, d) for _, s, d in _views(key, Ops.RESHAPE)]
    return _closed(sigs + [(mid, out) for _, mid, out in _through(key)], step)


def _through(key) -> list[tuple[tuple, tuple, tuple]]:
    """`permute_through_reshape` of every written PERMUTE over every written reshape
    signature (not of constants) where it applies."""
    perms = list(dict.fromkeys(tuple(n.arg) for n in key.nodes if n.op is Ops.PERMUTE))
    sigs = list(dict.fromkeys((s, d) for _, s, d in _views(key, Ops.RESHAPE)))
    out = []
    for p in perms:
        for s, d in sigs:
            r = permute_through_reshape(s, d, p)
            if r is not None:
                out.append(r)
    return out


def reduce_through(arg, perm: tuple[int, ...]):
    """The REDUCE argument over x that `REDUCE arg` over `T_perm(x)` is, or None when the
    move would change the order of the reduced axes (kernels visit reduced axes in axis
    order: the same order keeps the same summation order)."""
    mapped = tuple(perm[k] for k in sorted(arg[1]))
    if list(mapped) != sorted(mapped):
        return None
    return (arg[0], mapped, *arg[2:])


def reshape_groups(src: tuple, dst: tuple) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """A reshape `src -> dst` as groups of consecutive axes, (src axes, dst axes) with
    equal products, each as fine as possible: the reshape splits or merges within each
    group only (row-major order). None for shapes with a zero-size axis or of different
    sizes. Size-1 axes at the end join the last group."""
    if 0 in src or 0 in dst or _prod(src) != _prod(dst):
        return None
    out: list = []
    i = j = 0
    while i < len(src) or j < len(dst):
        a, b, pa, pb = [], [], 1, 1
        while not (a and b and pa == pb) or (i < len(src) and src[i] == 1 and not b) \
                or (j < len(dst) and dst[j] == 1 and not a):
            if (pa <= pb or j >= len(dst)) and i < len(src):
                pa *= src[i]
                a.append(i)
                i += 1
            elif j < len(dst):
                pb *= dst[j]
                b.append(j)
                j += 1
            else:
                break
        if not a or not b:  # trailing size-1 axes of one side
            if not out:
                return None
            la, lb = out[-1]
            out[-1] = (la + tuple(a), lb + tuple(b))
            continue
        out.append((tuple(a), tuple(b)))
    return out


def _prod(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


def permute_through_reshape(src: tuple, dst: tuple, p: tuple[int, ...]):
    """`T_p(reshape_dst(x)) = reshape'(T_p'(x))` for x of shape `src`: (p', the shape of
    T_p'(x), the shape of the result) when the permutation keeps every group of the
    reshape (`reshape_groups`) together and in order, so it moves whole groups; else None
    (also when p' is the identity or the reshape does nothing)."""
    if src == dst or len(p) != len(dst):
        return None
    groups = reshape_groups(src, dst)
    if groups is None:
        return None
    at = {b[0]: g for g, (_, b) in enumerate(groups)}  # first dst axis -> its group
    order, k = [], 0
    while k < len(p):
        g = at.get(p[k])
        if g is None:
            return None
        b = groups[g][1]
        if tuple(p[k:k + len(b)]) != b:
            return None
        order.append(g)
        k += len(b)
    q = tuple(a for g in order for a in groups[g][0])
    if q == tuple(range(len(src))):
        return None
    return q, tuple(src[a] for a in q), tuple(dst[a] for a in p)


VIEWS = (Ops.PERMUTE, Ops.RESHAPE, Ops.EXPAND)  # the movement ops the rules move


def movement_form(key) -> tuple[bytes, tuple[int, int]]:
    """(signature, rank) of a program for the extraction's exploration
    (`search.extract.explore`). The signature is the program with its views (`VIEWS`)
    read through — each value hashed from its op, dtype, argument, its sources' hashes
    and (but for pointwise ops, whose shape is where the views sit) its shape, a view
    hashed as its source — so programs that differ only in where their views sit (and
    how many there are: `T(T(x))` and `x`) share it; anything else (another op, argument,
    operand or reduction) makes another signature. The rank orders the programs of one
    signature: fewest views of computed values first (each is index arithmetic in a
    kernel at best, a copy at worst), then fewest elements computed by the other ops (a
    pointwise op before a broadcast runs on fewer values)."""
    h: list[bytes] = []
    views = elements = 0
    const = [False] * len(key.nodes)
    for i, n in enumerate(key.nodes):
        if n.op in VIEWS:
            h.append(h[n.src[0]])
            const[i] = const[n.src[0]]
            views += not const[i]
            continue
        const[i] = n.op is Ops.CONST
        d = hashlib.blake2b(digest_size=16)
        d.update(n.op.value.encode() + b"|" + n.dtype.name.encode() + b"|" + _arg_bytes(n))
        for s in n.src:
            d.update(h[s])
        h.append(d.digest())
        if n.op is not Ops.BUFFER and not const[i]:
            size = 1
            for e in n.shape:
                size *= e
            elements += size
    return b"".join(h[o] for o in key.outputs), (views, elements)


def _arg_bytes(n) -> bytes:
    # a pointwise op's shape is where the views around it sit (`T(f(x))`, `f(T(x))`); any
    # other op's result shape is part of what it computes (a reduction of x or of x.T)
    return _hash_arg(n.arg) + (b"" if n.op.value in _POINTWISE else b"|" + repr(n.shape).encode())


# search.rules.POINTWISE_OPS (this module is imported by search/rules.py)
_POINTWISE = frozenset(fusion_class("Elementwise")) - frozenset(fusion_class("Movement")) \
    - {"CONST", "CAT", "CONTIGUOUS"}


_memo: dict = {}


def _closures(key):
    """(perm_closure, the first PERMUTE node, reshape_closure) of `key`, memoised for the
    one key being encoded (the hooks run once per node; searches may run on threads)."""
    k = (id(key), key.hash)
    hit = _memo.get(k)
    if hit is None:
        first_perm = next((i for i, n in enumerate(key.nodes) if n.op is Ops.PERMUTE), None)
        hit = (perm_closure(key), first_perm, reshape_closure(key))
        if len(_memo) > 8:
            _memo.clear()
        _memo[k] = hit
    return hit


@register_facts(("movement",), gates=False)
def _perm_facts(key, i: int, t: Templates) -> list[str]:
    """At the first PERMUTE node: (PermComp "p" "q" c) for every two orders of the
    closure whose composition is not the identity, with c the composed order's template
    (and its PermIs / PermInvIs / SwapLast facts, so the other movement rules read it)."""
    perms, first, _ = _closures(key)
    if i != first:
        return []
    out = []
    tid: dict[tuple, int] = {}
    for ps in perms.values():
        for p in ps:
            tid[p] = t.add(Ops.PERMUTE, p)
            out.append(f'(PermIs {tid[p]} "{perm_text(p)}")')
            out.append(f'(PermInvIs {tid[p]} "{perm_text(inverse(p))}")')
            if swaps_last(p):
                out.append(f"(SwapLast {tid[p]})")
    for ps in perms.values():
        for p in ps:
            for q in ps:
                c = compose(p, q)
                if c in tid:
                    out.append(f'(PermComp "{perm_text(p)}" "{perm_text(q)}" {tid[c]})')
    return out


@register_facts(("movement_reduce",))
def _reduce_facts(key, i: int, t: Templates) -> list[str]:
    """(RedPerm n "p" r): the reduction n of `T_p(x)` is `T_p(r(x))`, r the reduction
    over the mapped axes (a template), for every order p of n's rank in the closure."""
    n = key.nodes[i]
    if n.op is not Ops.REDUCE:
        return []
    perms, _, _ = _closures(key)
    x = key.nodes[n.src[0]]
    out = []
    for p in perms.get(len(n.shape), ()):
        arg = reduce_through(n.arg, p)
        if arg is not None:
            out.append(f'(RedPerm {i} "{perm_text(p)}" {t.add(Ops.REDUCE, arg, n.dtype, x.dtype)})')
    return out


@register_facts(("movement_reshape",))
def _reshape_facts(key, i: int, t: Templates) -> list[str]:
    """(ReshapeIs r "sig") / (ExpandIs e "sig") for the written views (not of constants);
    at the first RESHAPE: (ReshapeInv "s1" "s2") for a pair that comes back to its
    source, (ReshapeComp "s1" "s2" u) with u the composed reshape's template."""
    n = key.nodes[i]
    if n.op not in (Ops.RESHAPE, Ops.EXPAND) or _of_const(key, i):
        return []
    src = tuple(key.nodes[n.src[0]].shape)
    if n.op is Ops.EXPAND:
        return [f'(ExpandIs {i} "{sig(src, tuple(n.shape))}")']
    out = [f'(ReshapeIs {i} "{sig(src, tuple(n.shape))}")']
    views = _views(key, Ops.RESHAPE)
    if views[0][0] != i:
        return out
    perms, _, sigs = _closures(key)
    written = {(s, d) for _, s, d in views}
    for a in sigs:
        if a not in written:
            u = t.add(Ops.RESHAPE, a[1], shape_in=a[0])
            out.append(f'(ReshapeIs {u} "{sig(*a)}")')
    for a in sigs:
        for b in sigs:
            if a[1] != b[0]:
                continue
            if a[0] == b[1]:
                out.append(f'(ReshapeInv "{sig(*a)}" "{sig(*b)}")')
            elif (a[0], b[1]) in sigs:
                u = t.add(Ops.RESHAPE, b[1], shape_in=a[0])
                out.append(f'(ReshapeComp "{sig(*a)}" "{sig(*b)}" {u})')
    # a permute of a reshape that moves whole groups of its axes: (PermReshape "p" "sig"
    # p' r'), p' the permute of the source (with its PermIs facts, so `movement` composes
    # or cancels it), r' the reshape after it
    for a in sigs:
        for p in perms.get(len(a[1]), ()):
            r = permute_through_reshape(a[0], a[1], p)
            if r is None:
                continue
            q, mid, res = r
            pq, rq = t.add(Ops.PERMUTE, q), t.add(Ops.RESHAPE, res, shape_in=mid)
            out += [f'(PermReshape "{perm_text(p)}" "{sig(*a)}" {pq} {rq})', f'(PermIs {pq} "{perm_text(q)}")',
                    f'(PermInvIs {pq} "{perm_text(inverse(q))}")', f'(ReshapeIs {rq} "{sig(mid, res)}")']
            if swaps_last(q):
                out.append(f"(SwapLast {pq})")
    return out


# ----------------------------------------------------------------------------- the rules

# The movement sets move a view one level per run (a pointwise op at a time): a chain of
# k ops needs k runs, and every run of the search's iteration runs every rule set (the
# fusion sets re-match whatever changed). Within one iteration they are repeated up to
# `REPEAT` times: the iterations go on until no rule set changes anything, so this
# changes the order in which rules fire, not the saturated e-graph (measured on the
# chains of docs/algebra.md's table: 13-14 iterations -> 3-5, the same e-node count,
# saturation 2-3x faster). A bound, not `saturate`: the search's e-node and time limits
# are checked between iterations only.
REPEATED = ("movement", "movement_reshape", "movement_reduce")
REPEAT = 8


def run_text(name: str) -> str:
    """The egglog schedule of rule set `name` within one iteration of the search."""
    return f"(repeat {REPEAT} (run {name}))" if name in REPEATED else f"(run {name})"



def _mark(name: str, var: str = "r") -> str:
    return f'(Rewritten {var} "{name}")'


def through_pointwise(name: str, view: str, rel: str | None, pair: str) -> list[str]:
    """The rules of rule set `name` that move the view `view` (PERMUTE, RESHAPE, EXPAND;
    `rel`: the relation `(rel p s)` naming the view template's signature, None: any) out
    of a pointwise op: `f(V_p(x)) -> V_p(f(x))` and `V_p(x) op V_q(y) -> V_p(x op y)` when
    p and q have one signature (stage two: the fact `(pair op n p q x y)`, `pair` naming
    the relation and its leading fields, joined with the signatures by the caller's rule).

    Three guards keep the e-graph finite (docs/algebra.md, "Why the movement sets grew
    the e-graph without bound"). A class may hold one view over several *sources* that
    are one value in different e-classes (a value and its materialised
    `Load(Kernel(.))` form, the forms the fusion rules add); a binary rule that formed
    every pair of them made |S|^2 new classes per op, squared again by the next op of a
    chain (`a + a`, `(a + a) * (a + a)`, ...: 4 -> 20 -> 272 -> 65,792 within one
    iteration), or fed them back into the op's own class. The first two guards are the
    fix (each of the programs that grew saturates with them alone); the third skips a
    rewrite that adds nothing:
    - the sources are loads (`(Load t)`: the written views' and this rule's results; the
      fused forms of them are made by the fusion rules from these);
    - an op of one operand twice (`a + a`) is rewritten with the same source twice, not
      every pair (`(!= a b)` for the general rule);
    - an e-node in the class of its own operand is not rewritten (`(!= r a)`): an
      idempotent identity (`max(x, x) = x`, search/rules.py's `algebra`) puts `max(C, C)`
      into C, and the rule would add `V(max(s_i, s_j))` to C for every two sources, C's
      sources squared every run (5 -> 42 -> 1,302 -> 915,306)."""
    cond = "" if rel is None else f" ({rel} p s)"
    mark = f'(Rewritten r "{name}")'

    def v(p: str, t: str) -> str:
        return f'(Load (Kernel (E "{view}" {p} (Cons (Load {t}) (Nil)))))'

    def out_(inner: str) -> str:
        return (f'((union r (E "{view}" p (Cons (Load (Kernel {inner})) (Nil)))) {mark} '
                f'(Rewritten {inner} "{name}"))')

    un = "(E op n (Cons (Load t) (Nil)))"
    diag = "(E op n (Cons (Load t) (Cons (Load t) (Nil))))"
    return [
        f'(rule ((= r (E op n (Cons a (Nil)))) (Pointwise op) (= a {v("p", "t")}) (!= r a){cond})\n'
        f'      {out_(un)} :ruleset {name})',
        f'(rule ((= r (E op n (Cons a (Cons a (Nil))))) (Pointwise op) (= a {v("p", "t")}) (!= r a){cond})\n'
        f'      {out_(diag)} :ruleset {name})',
        f'(rule ((= r (E op n (Cons a (Cons b (Nil))))) (Pointwise op) (= a {v("p", "t")}) (= b {v("q", "u")})'
        f' (!= a b) (!= r a) (!= r b))\n'
        f'      (({pair} op n p q (Load t) (Load u))) :ruleset {name})',
    ]


def _view(op: str, v: str, x: str) -> str:
    return f'(Load (Kernel (E "{op}" {v} (Cons {x} (Nil)))))'


def composed_perm_rule() -> str:
    """The `movement` rule composing two permutes (PermPair: stage one of the existing
    cancellation rule, search/rules.py)."""
    return ('(relation PermComp (String String i64))\n'
            f'(rule ((PermPair r p q x) (PermIs p s1) (PermIs q s2) (PermComp s1 s2 c))\n'
            f'      ((union r (E "PERMUTE" c (Cons x (Nil)))) {_mark("movement")}) :ruleset movement)')


def movement_reduce() -> str:
    name = "movement_reduce"
    red = '(E "REDUCE" t (Cons x (Nil)))'
    return "\n".join([
        f"(ruleset {name})", "(relation RedPerm (i64 String i64))", "(relation RedT (F i64 i64 F))",
        f'(rule ((= r (E "REDUCE" n (Cons {_view("PERMUTE", "p", "x")} (Nil))))) ((RedT r n p x)) :ruleset {name})',
        f'(rule ((RedT r n p x) (PermIs p s) (RedPerm n s t))\n'
        f'      ((union r (E "PERMUTE" p (Cons (Load (Kernel {red})) (Nil)))) {_mark(name)} {_mark(name, red)})'
        f' :ruleset {name})',
    ])


def movement_reshape() -> str:
    name = "movement_reshape"
    out = [f"(ruleset {name})", "(relation ReshapeIs (i64 String))", "(relation ExpandIs (i64 String))",
           "(relation ReshapeInv (String String))", "(relation ReshapeComp (String String i64))",
           "(relation RPair (F i64 i64 F))", "(relation BinV (F String String i64 i64 i64 F F))"]
    out.append(f'(rule ((= r (E "RESHAPE" q (Cons {_view("RESHAPE", "p", "x")} (Nil))))) ((RPair r p q x))'
               f' :ruleset {name})')
    out.append(f'(rule ((RPair r p q x) (ReshapeIs p s1) (ReshapeIs q s2) (ReshapeInv s1 s2))\n'
               f'      ((union r x) {_mark(name)}) :ruleset {name})')
    out.append(f'(rule ((RPair r p q x) (ReshapeIs p s1) (ReshapeIs q s2) (ReshapeComp s1 s2 u))\n'
               f'      ((union r (E "RESHAPE" u (Cons x (Nil)))) {_mark(name)}) :ruleset {name})')
    # T_p(reshape(x)) -> reshape'(T_p'(x)) where p moves whole groups of the reshape's axes
    tp = '(E "PERMUTE" p2 (Cons x (Nil)))'
    out.append("(relation PermReshape (String String i64 i64))\n(relation PRPair (F i64 i64 F))")
    out.append(f'(rule ((= r (E "PERMUTE" p (Cons {_view("RESHAPE", "q", "x")} (Nil))))) ((PRPair r p q x))'
               f' :ruleset {name})')
    out.append(f'(rule ((PRPair r p q x) (PermIs p s1) (ReshapeIs q s2) (PermReshape s1 s2 p2 q2))\n'
               f'      ((union r (E "RESHAPE" q2 (Cons (Load (Kernel {tp})) (Nil)))) {_mark(name)} '
               f'{_mark(name, tp)}) :ruleset {name})')
    for op, rel in (("RESHAPE", "ReshapeIs"), ("EXPAND", "ExpandIs")):
        out += through_pointwise(name, op, rel, f'BinV r "{op}"')
        bi = '(E op n (Cons x (Cons y (Nil))))'
        out.append(f'(rule ((BinV r "{op}" op n p q x y) ({rel} p s) ({rel} q s))\n'
                   f'      ((union r (E "{op}" p (Cons (Load (Kernel {bi})) (Nil)))) {_mark(name)} '
                   f'{_mark(name, bi)}) :ruleset {name})')
    return "\n".join(out)
