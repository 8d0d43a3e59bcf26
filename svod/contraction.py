"""`einsum` and `einsum_path`: numpy's Einstein summation lowered to svod's ops.

Semantics are numpy's (`numpy.einsum`): explicit (``'ij,jk->ik'``) and implicit
(``'ij,jk'``: the labels used once, in ASCII order) subscripts, ellipses (``'...ij'``,
broadcast right-aligned), repeated labels inside one operand (diagonals: ``'ii->i'``),
size-1 dimensions broadcast against the label's size, the interleaved form
``einsum(a, [0, 1], b, [1, 2], [0, 2])``, ``dtype=``/``casting=`` and ``out=``. The
result's dtype is numpy's promotion of the operands' dtypes (an integer einsum wraps,
a bool einsum is the OR of ANDs, as numpy's).

Lowering (what runs): operands are contracted pairwise along a path, each pair as the
cheapest of three forms, all of which svod fuses and compiles:

* no label summed between the two (``'ij,ij->ij'``, outer products): a broadcast
  multiply;
* every label of both operands is kept or summed, none free on one side (row dots
  ``'bi,bi->b'``, ``'i,i->'``): a multiply and a sum (one reduction kernel);
* otherwise a (batched) matmul after transposes and reshapes: batch labels, then the
  labels free in the left operand, the summed labels, the labels free in the right one
  — svod's matmul, i.e. a BLAS/GEMM/GEMV step with fused epilogues (docs/codegen.md).
  ``'ij,jk'``, ``'bij,bjk'``, ``'ij,j'``, ``'bhqd,bhkd->bhqk'`` and tensordot-like
  multi-label contractions all run this way, never as a broadcast (i, j, k) product.

Labels found in one operand only and not kept are summed out before its first
contraction; repeated labels inside one operand become diagonals first.

The path: two operands contract directly. With three or more, ``optimize`` picks the
order: ``'greedy'`` (svod's default, and numpy's choice under ``optimize=True``) and
``'optimal'`` are numpy's `einsum_path` algorithms, computed on the shapes only (nothing
is realized); an explicit ``['einsum_path', (0, 1), ...]`` list is followed as given;
``optimize=False`` contracts left to right. numpy's own default (``False``) evaluates the
whole product in one C loop, whose summation order no pairwise evaluation reproduces
bit for bit anyway, so svod defaults to the cheaper order; results agree with numpy to
float rounding (docs/einsum.md).

A call on realized operands records the nodes it built (a recipe, `_record`); a later
call with operands of the same shapes, dtypes and aliasing under the same options replays
them (`_replay`): the same hash-consed graph for a fraction of the Python.
"""

from __future__ import annotations

import math
import string

import numpy as np

import svod.tensor as T
from svod import dtype as dt
from svod import elementwise as E
from svod import linalg as LA
from svod import movement as M
from svod import reductions as R
from svod.errors import ShapeError, SvodTypeError, SvodValueError
from svod.ir import OP, UOp
from svod.tensor import Tensor, asarray, shape_str

__all__ = ["einsum", "einsum_path"]

_LETTERS = set(string.ascii_letters)
_SUBLIST = string.ascii_uppercase + string.ascii_lowercase  # numpy's C order: 0-25 'A'-'Z', 26-51 'a'-'z'


# ----------------------------------------------------------------------------- parsing


def _sublist_str(sub) -> str:
    out = []
    for s in sub:
        if s is Ellipsis:
            out.append("...")
        elif isinstance(s, (int, np.integer)) and not isinstance(s, bool) and 0 <= int(s) < 52:
            out.append(_SUBLIST[int(s)])
        else:
            raise SvodValueError(f"einsum: subscript {s!r} in a sublist is neither an int in [0, 52) nor Ellipsis")
    return "".join(out)


def _split_args(args) -> tuple[str, list]:
    """(subscripts, operands) from either calling form."""
    if not args:
        raise SvodTypeError("einsum: no subscripts given")
    if isinstance(args[0], str):
        return args[0], list(args[1:])
    # interleaved: op0, sub0, op1, sub1, ..., [sub_out]
    ops, subs = list(args[0::2]), list(args[1::2])
    out = None
    if len(args) % 2 == 1:  # a trailing output sublist
        out = ops.pop()
        if len(subs) != len(ops):
            raise SvodValueError("einsum: the interleaved form takes (operand, sublist) pairs and an optional "
                                 "output sublist")
    for s in subs + ([out] if out is not None else []):
        if isinstance(s, (str, bytes)) or not hasattr(s, "__iter__"):
            raise SvodTypeError(f"einsum: the first argument is not a subscripts string, so each operand must be "
                                f"followed by a list of int labels; got {type(s).__name__}")
    text = ",".join(_sublist_str(s) for s in subs)
    if out is not None:
        text += "->" + _sublist_str(out)
    return text, ops


def _term(t: str, k: int, shape: tuple, spare_ell: str) -> str:
    """One operand's subscripts with its ellipsis replaced by its share of `spare_ell`."""
    if "." in t:
        if t.count(".") != 3 or "..." not in t:
            raise SvodValueError(f"einsum: subscripts {t!r} of operand {k} contain a '.' that is not part of one "
                                 f"ellipsis ('...')")
    for c in t.replace("...", ""):
        if c not in _LETTERS:
            raise SvodValueError(f"einsum: invalid subscript {c!r} in {t!r}: subscripts must be letters")
    named = len(t) - (3 if "..." in t else 0)
    if named > len(shape) or (named < len(shape) and "..." not in t):
        raise SvodValueError(f"einsum: subscripts {t!r} of operand {k} name {named} dimensions, but the operand "
                             f"has shape {shape_str(shape)}")
    if "..." in t:
        n = len(shape) - named
        t = t.replace("...", spare_ell[len(spare_ell) - n:] if n else "")
    return t


def parse(subscripts: str, shapes: list[tuple]) -> tuple[list[str], str, dict[str, int]]:
    """(per-operand labels, output labels, label -> size) of `subscripts` for operands of
    `shapes`. Ellipsis dimensions get labels outside the letters (they sort first in the
    implicit output, as numpy's). Raises numpy's errors (ValueError subclasses) naming
    einsum with the subscripts and shapes."""
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    if "->" in rhs or "-" in lhs or ">" in lhs or (arrow and ("-" in rhs or ">" in rhs)):
        raise SvodValueError(f"einsum: subscripts {subscripts!r} contain a '-' or '>' that is not one '->'")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise SvodValueError(f"einsum: subscripts {subscripts!r} name {len(terms)} operands, but "
                             f"{len(shapes)} were given")
    ell_nd = 0
    for t, shp in zip(terms, shapes):
        if "..." in t:
            ell_nd = max(ell_nd, len(shp) - (len(t) - 3))
    # labels of the ellipsis dimensions: control characters, never a user's label
    spare = "".join(chr(1 + i) for i in range(ell_nd))
    labels = [_term(t, k, tuple(shp), spare) for k, (t, shp) in enumerate(zip(terms, shapes))]
    sizes: dict[str, int] = {}
    where: dict[str, int] = {}
    for k, (ls, shp) in enumerate(zip(labels, shapes)):
        for c in set(ls):
            own = {n for lc, n in zip(ls, shp) if lc == c}
            if len(own) > 1:  # a diagonal: numpy broadcasts no size-1 side here
                raise ShapeError(f"einsum: label {c!r} repeats in operand {k} (shape {shape_str(tuple(shp))}) with "
                                 f"sizes {' and '.join(map(str, sorted(own)))} in {subscripts!r}; a diagonal needs "
                                 f"equal sizes")
        for c, n in zip(ls, shp):
            if c not in sizes or sizes[c] == 1:
                if c in sizes and n != 1:
                    where[c] = k
                sizes[c] = n if c not in sizes or n != 1 else sizes[c]
                where.setdefault(c, k)
            elif n not in (1, sizes[c]):
                j = where[c]
                what = f"label {c!r}" if c in _LETTERS else "the ellipsis (broadcast dimensions)"
                raise ShapeError(f"einsum: {what} has size {sizes[c]} in operand {j} (shape "
                                 f"{shape_str(tuple(shapes[j]))}) and {n} in operand {k} (shape "
                                 f"{shape_str(tuple(shp))}) in {subscripts!r}; sizes must match or be 1")
    if arrow:
        for c in rhs.replace("...", ""):
            if c not in _LETTERS:
                raise SvodValueError(f"einsum: invalid output subscript {c!r} in {subscripts!r}: subscripts must "
                                     f"be letters")
        if "." in rhs and (rhs.count(".") != 3 or "..." not in rhs):
            raise SvodValueError(f"einsum: output subscripts {rhs!r} contain a '.' that is not one ellipsis")
        out = rhs.replace("...", spare)
        if "..." not in rhs and ell_nd:
            raise SvodValueError(f"einsum: the ellipsis of {subscripts!r} stands for {ell_nd} dimension(s) that "
                                 f"the output does not name: add '...' to the output subscripts")
        for c in out:
            if out.count(c) > 1:
                raise SvodValueError(f"einsum: output subscript {c!r} appears more than once in {subscripts!r}")
            if c not in sizes:
                raise SvodValueError(f"einsum: output subscript {c!r} of {subscripts!r} appears in no operand")
    else:
        counts: dict[str, int] = {}
        for ls in labels:
            for c in ls:
                counts[c] = counts.get(c, 0) + 1
        out = spare + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in spare))
    return labels, out, sizes


def _parsed(subscripts: str, shapes: list[tuple]) -> tuple[tuple[str, ...], str, dict[str, int]]:
    """`parse`, memoised per (subscripts, shapes) like `_path`: a loop calls einsum with the
    same ones, and parsing was a third of einsum's Python time (docs/einsum.md). Only
    successful parses are kept (an error is raised again, with its message, each call);
    callers must not mutate the result (the labels come back as a tuple)."""
    key = (subscripts, tuple(tuple(s) for s in shapes))
    hit = _PARSED.get(key)
    if hit is None:
        labels, out, sizes = parse(subscripts, shapes)
        hit = (tuple(labels), out, sizes)
        if len(_PARSED) >= 1024:
            _PARSED.clear()
        _PARSED[key] = hit
    return hit


_PARSED: dict = {}


# ----------------------------------------------------------------------------- the path


def _standins(shapes, dtype) -> list[np.ndarray]:
    """Zero-stride numpy arrays of `shapes` (no memory): numpy's path code reads shapes only."""
    z = np.zeros((), dtype=dtype)
    return [np.broadcast_to(z, tuple(s)) for s in shapes]


def einsum_path(*args, optimize="greedy", einsum_call=False):
    """numpy.einsum_path: ``(path, report)`` for the contraction order `einsum` follows
    with the same `optimize`, computed on the operands' shapes only (svod tensors are not
    realized). `optimize`: ``'greedy'`` (default), ``'optimal'``, ``True`` (greedy),
    ``False`` (left to right) or an explicit ``['einsum_path', (i, j), ...]`` list."""
    if einsum_call:
        raise SvodValueError("einsum_path: einsum_call=True (numpy's internal form) is not supported")
    subscripts, ops = _split_args(args)
    shapes = [_shape_of(o) for o in ops]
    parse(subscripts, shapes)  # svod's errors, naming einsum_path with the shapes
    if optimize is False or optimize is None:
        path = ["einsum_path"] + [(0, 1)] * (len(shapes) - 1) if len(shapes) > 1 else ["einsum_path", (0,)]
        return path, f"  Left-to-right contraction of {len(shapes)} operands (optimize=False)"
    try:
        return np.einsum_path(subscripts, *_standins(shapes, np.float64), optimize=optimize)
    except (ValueError, TypeError, KeyError) as e:
        raise SvodValueError(f"einsum_path: {e} (subscripts {subscripts!r}, shapes "
                             f"{', '.join(shape_str(tuple(s)) for s in shapes)}, optimize={optimize!r})") from None


def _shape_of(o) -> tuple:
    if isinstance(o, Tensor):
        return o.shape
    return np.shape(o)


def _path(subscripts: str, shapes: list[tuple], optimize) -> list[tuple]:
    """The path, memoised per (subscripts, shapes, optimize) when `optimize` is hashable
    (numpy's greedy search costs ~0.2 ms a call; a loop calls einsum with the same ones)."""
    try:
        key = (subscripts, tuple(tuple(s) for s in shapes), optimize if not isinstance(optimize, list)
               else tuple(tuple(x) if isinstance(x, (list, tuple)) else x for x in optimize))
        hash(key)
    except TypeError:
        return _compute_path(subscripts, shapes, optimize)
    hit = _PATHS.get(key)
    if hit is None:
        hit = _compute_path(subscripts, shapes, optimize)
        if len(_PATHS) >= 1024:
            _PATHS.clear()
        _PATHS[key] = hit
    return hit


_PATHS: dict = {}


def _compute_path(subscripts: str, shapes: list[tuple], optimize) -> list[tuple]:
    """The list of contraction steps (tuples of positions in the current operand list;
    the result goes to the end), as numpy's `einsum_path` defines them."""
    n = len(shapes)
    if optimize is False or optimize is None or n <= 2:
        if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
            return _check_path(list(optimize[1:]), n)
        return [tuple(range(n))] if n > 1 else []
    if isinstance(optimize, (list, tuple)) and optimize and optimize[0] == "einsum_path":
        return _check_path(list(optimize[1:]), n)
    if optimize is True:
        optimize = "greedy"
    if optimize not in ("greedy", "optimal", "auto", "auto-hq", "dp") and not isinstance(optimize, tuple):
        raise SvodValueError(f"einsum: optimize={optimize!r} is none of False, True, 'greedy', 'optimal' or an "
                             f"['einsum_path', ...] list")
    try:
        path, _ = np.einsum_path(subscripts, *_standins(shapes, np.float64), optimize=optimize)
    except (ValueError, TypeError, KeyError) as e:
        if isinstance(optimize, str):  # a valid einsum (svod's parse passed) numpy's path code refuses: any order
            return [tuple(range(n))]  # gives the same values
        raise SvodValueError(f"einsum: optimize={optimize!r}: {e}") from None
    return [tuple(p) for p in path[1:]]


def _check_path(path: list, n: int) -> list[tuple]:
    left = n
    out = []
    for step in path:
        step = tuple(int(i) for i in step)
        if not step or len(set(step)) != len(step) or any(i < 0 or i >= left for i in step):
            raise SvodValueError(f"einsum: the explicit path step {step} does not name distinct operands among "
                                 f"the {left} left")
        left -= len(step) - 1
        out.append(step)
    if left != 1:
        raise SvodValueError(f"einsum: the explicit path leaves {left} operands uncontracted")
    return out


# ----------------------------------------------------------------------------- lowering


def _sum(t: Tensor, axes: tuple[int, ...]) -> Tensor:
    """numpy einsum's sum: the operand's own dtype (an integer sum wraps; a bool sum is any)."""
    if not axes:
        return t
    if t.dtype == dt.bool_:
        return R.any(t, axis=axes)
    return R.sum(t, axis=axes, dtype=t.dtype)


def _diagonals(t: Tensor, labels: str) -> tuple[Tensor, str]:
    while True:
        dup = next((c for c in labels if labels.count(c) > 1), None)
        if dup is None:
            return t, labels
        i = labels.index(dup)
        j = labels.index(dup, i + 1)
        t = LA.diagonal(M.moveaxis(t, (i, j), (-2, -1)))
        labels = "".join(c for k, c in enumerate(labels) if k not in (i, j)) + dup


def _perm(t: Tensor, perm: tuple[int, ...]) -> Tensor:
    return t if perm == tuple(range(t.ndim)) else M.permute_dims(t, perm)


def _reshape(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    return t if t.shape == shape else M.reshape(t, shape)


def _bcast(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    return t if t.shape == shape else E.broadcast_to(t, shape)


def _keep_only(t: Tensor, labels: str, keep: set[str]) -> tuple[Tensor, str]:
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    return _sum(t, axes), "".join(c for c in labels if c in keep)


def _align(t: Tensor, labels: str, order: str, sizes: dict[str, int]) -> Tensor:
    """`t` permuted to `order`'s labels it has, with size-1 axes for those it lacks."""
    own = [c for c in order if c in labels]
    t = _perm(t, tuple(labels.index(c) for c in own))
    return _reshape(t, tuple(t.shape[own.index(c)] if c in labels else 1 for c in order))


def _contract(a: Tensor, la: str, b: Tensor, lb: str, keep: set[str], exact: bool = False) -> tuple[Tensor, str]:
    """The pair's product, summed over the labels they share that `keep` lacks (labels of
    one operand only are kept: `_keep_only` ran first). Returns (tensor, its labels).

    Written as numpy's definition reads: both operands aligned to one label order
    (shared kept labels, then each side's own, then the summed ones), multiplied with
    broadcasting and summed over the summed labels. The fusion search turns a sum that is
    a matrix product into a (batched) matmul when that is cheaper (the `contract` rule
    set, search/contract.py); in `algebra="exact"` mode, where that rule set does not run,
    the pair is written as the matmul directly (`_matmul_form`; `exact`: that mode, read once
    per einsum call by the caller)."""
    sizes = {c: n for c, n in zip(la, a.shape)}
    for c, n in zip(lb, b.shape):
        sizes[c] = n if sizes.get(c, 1) == 1 else sizes[c]
    batch = [c for c in la if c in lb and c in keep]
    con = [c for c in la if c in lb and c not in keep]
    fa = [c for c in la if c not in lb]
    fb = [c for c in lb if c not in la]
    if not con:  # nothing summed: an elementwise / outer product
        order = "".join(batch + fa + fb)
        return E.multiply(_align(a, la, order, sizes), _align(b, lb, order, sizes)), order
    if (fa or fb) and exact:
        return _matmul_form(a, la, b, lb, sizes, batch, con, fa, fb)
    order = "".join(batch + fa + fb + con)
    prod = E.multiply(_align(a, la, order, sizes), _align(b, lb, order, sizes))
    kept = len(order) - len(con)
    return _sum(prod, tuple(range(kept, len(order)))), order[:kept]


def _exact_mode() -> bool:
    from svod.config import algebra

    return algebra() == "exact"


def _matmul_form(a: Tensor, la: str, b: Tensor, lb: str, sizes: dict[str, int], batch, con, fa, fb):
    """The pair as a (batched) matmul: batch labels, then the left operand's free labels,
    the summed labels, the right operand's free ones (each group merged into one axis;
    batch axes kept apart: merging them could force a copy of a view)."""
    shared = {c: sizes[c] for c in batch + con}
    a = _bcast(a, tuple(shared.get(c, n) for c, n in zip(la, a.shape)))
    b = _bcast(b, tuple(shared.get(c, n) for c, n in zip(lb, b.shape)))
    pa = _perm(a, tuple(la.index(c) for c in batch + fa + con))
    pb = _perm(b, tuple(lb.index(c) for c in batch + con + fb))
    nfa, nfb, nk = (math.prod(sizes[c] for c in g) for g in (fa, fb, con))
    lead = tuple(sizes[c] for c in batch)
    pa = _reshape(pa, lead + (nfa, nk))
    pb = _reshape(pb, lead + (nk, nfb))
    out = R.matmul(pa, pb)
    labels = "".join(batch + fa + fb)
    return _reshape(out, tuple(sizes[c] for c in labels)), labels


def _operand(o) -> Tensor:
    """A svod tensor as is; anything else as numpy reads it (a Python float is float64)."""
    return o if isinstance(o, Tensor) else asarray(np.asarray(o))


def _store_out(res: Tensor, out):
    if out is None:
        return res
    from svod.numpy._functions import store_out  # out= as every svod.numpy function takes it

    return store_out(res, out)


def einsum(*args, out=None, optimize="greedy", dtype=None, casting="safe", order="K"):
    """numpy.einsum on svod tensors (lazy): ``einsum('ij,jk->ik', a, b)``, implicit
    subscripts, ellipses, repeated labels, the interleaved ``einsum(a, [0, 1], b, [1, 2])``
    form. Contractions run as matmuls (BLAS/GEMM steps), multiplies or fused reductions;
    three or more operands contract pairwise in `optimize`'s order (default numpy's
    greedy path; see the module docstring). `dtype` casts the operands first (allowed by
    `casting`, numpy's rule); `order` is accepted and ignored (svod arrays have no layout).

    >>> import svod
    >>> a, b = svod.ones((2, 3)), svod.ones((3, 4))
    >>> svod.einsum('ij,jk->ik', a, b).shape
    (2, 4)
    >>> svod.einsum('ii', svod.eye(3)).item()
    3.0
    """
    if order not in ("K", "C", "F", "A"):
        raise SvodValueError(f"einsum: order must be one of 'K', 'C', 'F', 'A', got {order!r}")
    subscripts, raw = _split_args(args)
    ops = [_operand(o) for o in raw]
    key = _recipe_key(subscripts, ops, optimize, dtype, casting)
    if key is not None:
        recipe = _RECIPES.get(key)
        if recipe is not None:
            return _store_out(_replay(recipe, ops), out)
    res = _build(subscripts, ops, optimize, dtype, casting)
    if key is not None:
        recipe = _record(res.uop, [o.uop for o in ops])
        if recipe is not None:
            if len(_RECIPES) >= 256:
                _RECIPES.clear()
            _RECIPES[key] = recipe
    return _store_out(res, out)


# ----------------------------------------------------------------------------- recipes
# An einsum call builds 5-10 lazy ops (operands aligned, multiplied, summed), ~80 us of
# Python against ~15 us for `x @ w.T`. Each graph node is hash-consed (svod.ir.UOp), so the
# nodes einsum builds are a function of the operand nodes, the subscripts, the shapes and
# dtypes and the mode: the first call records them as a recipe (op, dtype, sources by
# position, arg), later calls with realized operands of the same shapes replay it: the
# same nodes, each through `Tensor._from` as the op functions do (eager small work
# included), at a fraction of the cost.


def _recipe_key(subscripts, ops, optimize, dtype, casting):
    """The memo key of a call whose graph a recipe may give, or None: operands realized
    (BUFFER nodes: no operand is derived from another, so no node einsum builds can be
    one of them), `optimize` hashable, ``algebra`` mode and the eager limit in the key."""
    if not isinstance(subscripts, str) or not all(o.uop.op is _BUFFER for o in ops):
        return None
    uops = [o.uop for o in ops]
    alias = tuple(uops.index(u) for u in uops)  # the same tensor twice gives other nodes
    try:
        opt = optimize if not isinstance(optimize, list) else \
            tuple(tuple(x) if isinstance(x, (list, tuple)) else x for x in optimize)
        key = (subscripts, tuple((o.shape, o.dtype) for o in ops), alias, opt,
               None if dtype is None else dt.dtype(dtype), casting, _exact_mode(), _eager_limit())
        hash(key)
    except Exception:  # noqa: BLE001 - an unhashable `optimize`, a bad dtype: the plain path (and its error)
        return None
    return key


def _eager_limit():
    from svod.eager import limit

    return limit()


def _record(root, operands) -> tuple | None:
    """The nodes from `operands` to `root` in build order as (op, dtype, sources, arg),
    a source being ("in", k) for operand k, ("n", i) for recipe step i or ("c", node) for a
    node built from no operand (a constant); None when a step cannot be replayed: a
    realized buffer that is not an operand (eager small work ran) or a deep graph."""
    index = {}
    for k, u in enumerate(operands):
        index.setdefault(id(u), ("in", k))
    steps: list = []
    order: list = []
    todo = [(root, False)]
    seen: set = set()
    while todo:
        u, done = todo.pop()
        if id(u) in index:
            continue
        if done:
            srcs = tuple(index.get(id(s)) or ("c", s) for s in u.src)
            index[id(u)] = ("n", len(steps))
            steps.append((u.op, u.dtype, srcs, u.arg))
            order.append(u)
            continue
        if id(u) in seen:
            continue
        seen.add(id(u))
        if u.op is _BUFFER or len(seen) > 64:
            return None
        if not _depends(u, operands):
            index[id(u)] = ("c", u)
            continue
        todo.append((u, True))
        todo.extend((s, False) for s in u.src)
    if index.get(id(root), ("", 0))[0] != "n":
        return None
    return tuple(steps)


def _depends(u, operands) -> bool:
    """Whether node `u` reads one of `operands` (a small walk: einsum's graphs are)."""
    ids = {id(o) for o in operands}
    todo, seen = [u], set()
    while todo:
        v = todo.pop()
        if id(v) in ids:
            return True
        if id(v) in seen:
            continue
        seen.add(id(v))
        todo.extend(v.src)
    return False


def _replay(recipe: tuple, ops: list) -> Tensor:
    """The recipe's nodes over `ops`' nodes (each through `Tensor._from`, as an op builds it)."""
    made: list = []
    t = None
    for op, dtype, srcs, arg in recipe:
        src = tuple(ops[i].uop if kind == "in" else made[i].uop if kind == "n" else i for kind, i in srcs)
        t = Tensor._from(UOp(op, dtype, src, arg))
        made.append(t)
    return t


_RECIPES: dict = {}
_BUFFER = OP.BUFFER


def _build(subscripts: str, ops: list, optimize, dtype, casting) -> Tensor:
    """einsum's graph over `ops` (svod tensors), without `out=`."""
    shapes = [o.shape for o in ops]
    labels, out_labels, sizes = _parsed(subscripts, shapes)
    d = dt.result_type(*[o.dtype for o in ops]) if ops else dt.float64
    if dtype is not None:
        target = dt.dtype(dtype)
        for k, o in enumerate(ops):
            if not np.can_cast(o.dtype.np, target.np, casting=casting):
                raise SvodTypeError(f"einsum: cannot cast operand {k} from {o.dtype} to {target} under "
                                    f"casting={casting!r}")
        d = target
    ops = [T.astype(o, d, copy=False) for o in ops]
    path = _path(subscripts, shapes, optimize)
    exact = _exact_mode()
    cur = []
    for k, (o, ls) in enumerate(zip(ops, labels)):
        o, ls = _diagonals(o, ls)
        need = set(out_labels).union(*(labels[:k] + labels[k + 1:]))
        cur.append(_keep_only(o, ls, need))
    for step in path:
        picked = [cur[i] for i in step]
        for i in sorted(step, reverse=True):
            del cur[i]
        t, ls = picked[0]
        for k, (u, lu) in enumerate(picked[1:], start=1):
            keep = set(out_labels).union(*(lv for _, lv in cur), *(lv for _, lv in picked[k + 1:]))
            t, ls = _contract(t, ls, u, lu, keep, exact)
        keep = set(out_labels).union(*(lv for _, lv in cur))
        cur.append(_keep_only(t, ls, keep))
    (res, ls), = cur
    res, ls = _keep_only(res, ls, set(out_labels))
    res = _perm(res, tuple(ls.index(c) for c in out_labels))
    full = tuple(sizes[c] for c in out_labels)
    if res.shape != full:  # a label of size 1 in the operands that kept it, broadcast elsewhere
        res = _bcast(res, full)
    return res
