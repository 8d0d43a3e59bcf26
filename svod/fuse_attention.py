"""Attention fusion: a matmul, a row softmax and a matmul become one attention kernel.

``softmax(scale · q @ kᵀ) @ v`` planned as kernels is three steps over an (m, n) score
matrix per batch index — written by the first matmul, read and written by the softmax,
read by the second matmul: 32 MB each way for 8 heads of 1024 x 1024. The attention
kernel (`Kernel.attention`, lowered by `svod.codegen.attention`) computes a few query
rows at a time with the scores in an L1-sized scratch: no (m, n) buffer at all.

`fuse_attention(plan)` rewrites every occurrence of the pattern in a plan, whatever
the search chose for its parts:

1. a matmul kernel (the BLAS step, or generated with at most a scale epilogue
   ``ACC * c``) writing a temporary slot S, its B operand a plain view of shape
   (batch..., d, n) (``kᵀ``, typically a transposed view of k);
2. the row softmax of S over its last axis — ``exp(t - max t) / Σ exp(t - max t)`` of
   ``t = S`` or ``t = S * c`` — as one rowwise kernel writing slot P;
3. a matmul kernel with no epilogue reading P as its A operand;

where S and P are read by nothing else. At most one scale (in 1 or in 2) is folded: the
fused kernel computes ``(q · k) * c`` exactly as the matmul epilogue or the softmax
prologue did. A pattern the native kernel cannot run as planned (not float32, a masked
or chained operand view, n or dv not a multiple of the micro-tile width) is left alone.
"""

from __future__ import annotations

import dataclasses

from svod.dtype import float32
from svod.ir import Ops
from svod.kernel import ACC, LOAD, AttentionSpec, Kernel, KInput, KNode, Plan
from svod.view import ViewChain

__all__ = ["fuse_attention", "softmax_scale"]


def _plain(v: ViewChain) -> bool:
    return len(v.views) == 1 and v.views[0].mask is None


def _matmul_scale(k: Kernel) -> float | None:
    """The epilogue scale of a matmul kernel: 1.0 for none, c for ``ACC * c``; None for
    any other epilogue."""
    if k.matmul is None or len(k.outputs) != 1:
        return None
    nodes, out = k.nodes, k.outputs[0].node
    if len(nodes) == 1 and nodes[0].op == ACC and out == 0:
        return 1.0
    if len(nodes) == 3 and out == 2 and nodes[2].op is Ops.MUL:
        a, b = (nodes[s] for s in nodes[2].src)
        if a.op == ACC and b.op is Ops.CONST or a.op is Ops.CONST and b.op == ACC:
            c = (b if a.op == ACC else a).arg
            return float(c) if isinstance(c, (int, float)) and not isinstance(c, bool) else None
    return None


def softmax_scale(k: Kernel) -> float | None:
    """c when `k` is exactly the row softmax of ``t = LOAD * c`` (1.0: of the load itself)
    over its last axis, in three passes, with one input and one full output; else None."""
    if k.matmul is not None or k.attention is not None or len(k.inputs) != 1 or len(k.outputs) != 1:
        return None
    if k.reduce_axes != (len(k.shape) - 1,) or k.outputs[0].reduced:
        return None
    nodes = k.nodes
    if not nodes or nodes[0].op != LOAD:
        return None
    i, scale = 1, 1.0
    if len(nodes) == 8:  # LOAD, CONST c, MUL
        c, mul = nodes[1], nodes[2]
        if c.op is not Ops.CONST or mul.op is not Ops.MUL or set(mul.src) != {0, 1} or \
                not isinstance(c.arg, (int, float)) or isinstance(c.arg, bool):
            return None
        scale, i = float(c.arg), 3
    elif len(nodes) != 6:
        return None
    t = i - 1
    want = [(Ops.REDUCE, (t,), "max", 0), (Ops.SUB, (t, i), None, None), (Ops.EXP, (i + 1,), None, None),
            (Ops.REDUCE, (i + 2,), "sum", 1), (Ops.DIV, (i + 2, i + 3), None, None)]
    for j, (op, src, arg, pass_) in enumerate(want):
        n = nodes[i + j]
        if n.op is not op or n.src != src or (arg is not None and n.arg != arg) or n.pass_ != pass_:
            return None
    o = k.outputs[0]
    return scale if o.node == i + 4 and o.pass_ == 2 else None


def _readers(plan: Plan) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for ki, k in enumerate(plan.kernels):
        for inp in k.inputs:
            out.setdefault(inp.slot, []).append(ki)
    for slot, _ in plan.outputs:
        out.setdefault(slot, []).append(-1)  # a graph output: read by the user
    return out


def _try(plan: Plan, i: int, readers: dict, nr: int) -> tuple[int, int, Kernel] | None:
    """(second matmul index, softmax index, fused kernel) when kernel `i` starts the pattern."""
    k1 = plan.kernels[i]
    c1 = _matmul_scale(k1)
    if c1 is None or len(k1.outputs) != 1:
        return None
    s_slot = k1.outputs[0].slot
    r = readers.get(s_slot, [])
    if len(r) != 1 or r[0] < 0:
        return None
    j2 = r[0]
    k2 = plan.kernels[j2]
    c2 = softmax_scale(k2)
    if c2 is None or k2.shape != k1.shape or not k2.inputs[0].view.is_contiguous or k2.inputs[0].slot != s_slot:
        return None
    if c1 != 1.0 and c2 != 1.0:
        return None  # two roundings ((q·k)·c1)·c2: not what one scale computes
    p_slot = k2.outputs[0].slot
    r = readers.get(p_slot, [])
    if len(r) != 1 or r[0] < 0:
        return None
    j3 = r[0]
    k3 = plan.kernels[j3]
    mm1, mm3 = k1.matmul, k3.matmul
    if mm3 is None or _matmul_scale(k3) != 1.0 or len(k3.nodes) != 1:
        return None
    a3 = k3.inputs[mm3.a]
    if a3.slot != p_slot or not a3.view.is_contiguous or k3.inputs[mm3.b].slot == p_slot:
        return None
    batch = k1.shape[:-2]
    if k3.shape[:-2] != batch or mm3.m != mm1.m or mm3.k != mm1.n:
        return None
    q, kt, v = k1.inputs[mm1.a], k1.inputs[mm1.b], k3.inputs[mm3.b]
    if not all(x.dtype is float32 and _plain(x.view) for x in (q, kt, v)):
        return None
    if mm1.n % nr or mm3.n % nr or mm1.k == 0 or mm1.m == 0:
        return None
    nd = len(k1.shape)
    kv = ViewChain((kt.view.views[0].permute(tuple(range(nd - 2)) + (nd - 1, nd - 2)),), kt.view.pad_value)
    spec = AttentionSpec(0, 1, 2, mm1.m, mm1.n, mm1.k, mm3.n, c1 * c2)
    fused = Kernel(f"{k1.name}_{k2.name}_{k3.name}_attn", k3.shape,
                   (q, KInput(kt.slot, kt.dtype, kv), v), (KNode(ACC, float32),), k3.outputs, attention=spec)
    return j3, j2, fused


def fuse_attention(plan: Plan) -> Plan:
    """`plan` with every matmul-softmax-matmul chain as one attention kernel (see the
    module docstring); the plan itself when there is none."""
    from svod.codegen.attention import tile

    nr = tile()[1]
    kernels = list(plan.kernels)
    slots = dict(plan.slots)
    changed = False
    i = 0
    while i < len(kernels):
        cur = dataclasses.replace(plan, kernels=tuple(kernels), slots=slots)
        got = _try(cur, i, _readers(cur), nr)
        if got is None:
            i += 1
            continue
        j3, j2, fused = got
        dead = {kernels[i].outputs[0].slot, kernels[j2].outputs[0].slot}
        # the fused kernel runs where the second matmul ran: every input is written by then
        kernels[j3] = fused
        kernels = [k for idx, k in enumerate(kernels) if idx not in (i, j2)]
        for s in dead:
            slots.pop(s, None)
        changed = True
    if not changed:
        return plan
    out = dataclasses.replace(plan, kernels=tuple(kernels), slots=slots)
    out.check()
    return out
