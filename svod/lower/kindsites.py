"""Where a kernel kind could apply in a GraphKey: the structural pre-filters of the kinds
that inline a matmul's A operand (search/kinds.py writes their e-graph facts from these;
the greedy planner, `svod.plan_greedy`, prices them), in svod's core so that both read
one copy and `import svod` needs no search.

A *site* is (kind, consumer MATMUL node, A operand node p, nodes the kind also needs
inlined): for `mlp` the hidden product below p, for `rmsnorm` nothing more. A site is a
pre-filter: the lowering (`svod.lower.build.KERNEL_KINDS`) decides legality.

>>> import numpy as np, svod
>>> from svod.key import compact
>>> x, g, w = svod.asarray(np.ones((4, 8), np.float32)), svod.ones(8), svod.asarray(np.ones((8, 3), np.float32))
>>> key, _ = compact([(svod.nn.rms_norm(x, (8,), g) @ w).uop])
>>> [s.kind for s in kind_sites(key)]
['rmsnorm']
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from svod.ir import ELEMENTWISE, Ops
from svod.key import GraphKey

__all__ = ["KindSite", "hidden_matmul", "kind_operands", "kind_sites", "one_matmul", "row_prologue"]


def _on(switch: str) -> bool:
    return os.environ.get(switch, "1") not in ("0", "false", "False")


def one_matmul(key: GraphKey, start: int, shape, dtype, views: tuple, limit: int) -> int | None:
    """The one MATMUL node of `shape` and `dtype` that `start` is computed from through
    elementwise ops (not copies) and the movement ops in `views`, else None: none, two,
    another shape or dtype, or a cone of more than `limit` nodes."""
    found, todo, seen = None, [start], set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        m = key.nodes[i]
        if m.op is Ops.MATMUL:
            if found is not None or m.shape != shape or m.dtype is not dtype:
                return None
            found = i
        elif (m.op in ELEMENTWISE and m.op is not Ops.CONTIGUOUS) or m.op in views:
            todo.extend(m.src)
        if len(seen) > limit:
            return None
    return found


def hidden_matmul(key: GraphKey, p: int) -> int | None:
    """The MATMUL node the hidden value p is an elementwise function of — p elementwise
    (a bias, an activation: not itself a matmul or a copy), 2-D, real float, computed
    through elementwise ops and broadcasts from exactly one MATMUL of p's shape — else
    None (the `mlp` kind's pre-filter; `svod.lower.mlp` decides legality)."""
    n = key.nodes[p]
    if n.op not in ELEMENTWISE or n.op is Ops.CONTIGUOUS or len(n.shape) != 2 or not n.dtype.is_float or \
            n.dtype.is_complex:
        return None
    # an epilogue is a few dozen ops (a tanh GELU ~40): a big cone is not this pattern
    return one_matmul(key, p, n.shape, n.dtype, (Ops.EXPAND, Ops.RESHAPE), 256)


def row_prologue(key: GraphKey, p: int) -> bool:
    """Whether the A operand p is a row normalisation: p elementwise (not a copy), of two
    or more axes (the leading ones a batch of rows), real float, computed through
    elementwise ops, broadcasts and reshapes from values of which at least one is a
    REDUCE over the last axis of a tensor of p's shape (RMSNorm's
    mean square, layer norm's mean and variance), with no MATMUL below (the attention and
    MLP kinds' patterns) within a cone of 256 nodes (the `rmsnorm` kind's pre-filter;
    `svod.lower.rmsnorm` decides legality)."""
    n = key.nodes[p]
    if n.op not in ELEMENTWISE or n.op is Ops.CONTIGUOUS or len(n.shape) < 2 or not n.dtype.is_float or \
            n.dtype.is_complex:
        return False
    last = len(n.shape) - 1
    found, todo, seen = False, [p], set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        m = key.nodes[i]
        if m.op is Ops.MATMUL or len(seen) > 256:
            return False
        if m.op is Ops.REDUCE:
            src = key.nodes[m.src[0]]
            found = found or (src.shape == n.shape and tuple(m.arg[1]) == (last,))
            todo.extend(m.src)
        elif (m.op in ELEMENTWISE and m.op is not Ops.CONTIGUOUS) or m.op in (Ops.EXPAND, Ops.RESHAPE):
            todo.extend(m.src)
    return found


@dataclass(frozen=True)
class KindSite:
    kind: str  # "mlp" | "rmsnorm"
    consumer: int  # the MATMUL node
    operand: int  # its A operand p, inlined by the kind
    also: frozenset = frozenset()  # other nodes the kind needs inlined (mlp: the hidden product)


def kind_sites(key: GraphKey) -> list[KindSite]:
    """The sites of the `mlp` and `rmsnorm` kinds in `key` whose switches are on
    (`SVOD_FUSE_MLP`, `SVOD_FUSE_RMSNORM`), in node order."""
    mlp_on, rms_on = _on("SVOD_FUSE_MLP"), _on("SVOD_FUSE_RMSNORM")
    out = []
    if not (mlp_on or rms_on):
        return out
    for i, n in enumerate(key.nodes):
        if n.op is not Ops.MATMUL or len(n.src) != 2 or len(n.shape) < 2 or not n.dtype.is_float:
            continue
        p = n.src[0]
        if mlp_on and len(n.shape) == 2:
            h = hidden_matmul(key, p)
            if h is not None:
                out.append(KindSite("mlp", i, p, frozenset({h})))
                continue
        if rms_on and row_prologue(key, p):
            out.append(KindSite("rmsnorm", i, p))
    return out


def kind_operands(key: GraphKey) -> set[int]:
    """The A operands of the `rmsnorm` sites: the greedy boundaries materialise them, so a
    plan built without a price (the greedy planner's, a region the search did not reach)
    never holds a kind its cost model did not choose (the mlp kind needs its hidden
    product inlined, which the greedy boundaries never do)."""
    return {s.operand for s in kind_sites(key) if s.kind == "rmsnorm"}
