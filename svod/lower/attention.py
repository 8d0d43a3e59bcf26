"""Attention fusion: a matmul, a row softmax and a matmul become one attention kernel.

``softmax(t(q @ kᵀ)) @ v`` planned as kernels is three steps over an (m, n) score matrix
per batch index — written by the first matmul, read and written by the softmax, read by
the second matmul: 32 MB each way for 8 heads of 1024 x 1024. The attention kernel
(`Kernel.attention`, lowered by `svod.codegen.attention`) computes a few query rows at a
time with the scores in an L1-sized scratch: no (m, n) buffer at all.

Two entry points share one matcher (`_try`):

- `build_attention`, the lowering of the `attention` kernel kind (search/kinds.py): the
  search's e-graph gives the second matmul a variant reading the softmax's body, and a
  choice that leaves the chain inlined is built here (`svod.lower.build.KERNEL_KINDS`)
  and priced by the extraction against the unfused plans.
- `fuse_attention(plan)`, a plan pass of the lowering (`svod.lower.PLAN_PASSES`, after
  sibling merging), run on the greedy planner's plans only (every matmul materialised,
  no softmax ever inlined): it rewrites every occurrence of the pattern in a plan,
  whatever boundaries were chosen for its parts.

The pattern, as kernels:

1. a matmul kernel (the BLAS step, or generated with an elementwise epilogue: a scale,
   a bias) writing a temporary slot S, its B operand a plain view of shape
   (batch..., d, n) (``kᵀ``, typically a transposed view of k);
2. the row softmax over the last axis of ``t``, an elementwise function of S and of
   other inputs (a scale, ``where(causal, s, -inf)``, an additive mask): one rowwise
   kernel ``exp(t - max t) / Σ exp(t - max t)`` writing slot P;
3. a matmul kernel with no epilogue reading P as its A operand;

where S and P are read by nothing else. Between 1 and 2 there may be elementwise kernels
of their own (a boundary chosen inside ``t``: the scale or the mask written to memory),
each the sole reader of the one before; their nodes join ``t``. The kernels are
recognised by structure (the softmax from its output back: `softmax_input`), not by
position. The fused kernel's nodes are the epilogue of 1, those of the kernels between,
then the nodes of 2 that ``t`` is computed from, so ``t`` is computed by the same
operations in the same order. The pass checks the plan it rewrote (`Plan.check`). A
pattern the native kernel cannot run as planned (not float32, a masked or chained view)
is left alone.
"""

from __future__ import annotations

import dataclasses

from svod.dtype import float32
from svod.ir import ELEMENTWISE, Ops
from svod.kernel import ACC, LOAD, AttentionSpec, Kernel, KInput, KNode, KOutput, Plan
from svod.view import ViewChain

__all__ = ["fuse_attention", "build_attention"]

_ELEMENTWISE = ELEMENTWISE | {Ops.CONST}


def _plain(v: ViewChain) -> bool:
    return len(v.views) == 1 and v.views[0].mask is None


def _elementwise(nodes) -> bool:
    return all(n.op in _ELEMENTWISE or n.op in (LOAD, ACC) for n in nodes)


def softmax_input(k: Kernel) -> int | None:
    """The node t when `k` is exactly the row softmax of t over its last axis, else None:
    one full output ``e / Σe`` in pass 2 with ``e = exp(t - max t)``, the max in pass 0
    and the sum in pass 1, and every other node elementwise (loads, constants,
    elementwise ops) and none reading a softmax node. Matched by structure from the
    output, wherever the nodes sit in the body."""
    if k.matmul is not None or k.attention is not None or len(k.outputs) != 1:
        return None
    if k.reduce_axes != (len(k.shape) - 1,) or k.outputs[0].reduced or k.outputs[0].pass_ != 2:
        return None
    nodes = k.nodes
    div = k.outputs[0].node
    if nodes[div].op is not Ops.DIV:
        return None
    e, s = nodes[div].src
    if not _is(nodes[s], Ops.REDUCE, (e,), "sum", 1) or nodes[e].op is not Ops.EXP:
        return None
    (d,) = nodes[e].src
    if nodes[d].op is not Ops.SUB:
        return None
    t, mx = nodes[d].src
    if not _is(nodes[mx], Ops.REDUCE, (t,), "max", 0):
        return None
    softmax = {div, s, e, d, mx}
    rest = [n for i, n in enumerate(nodes) if i not in softmax]
    if len(softmax) != 5 or t in softmax or not _elementwise(rest) or any(x in softmax for n in rest for x in n.src):
        return None
    return t if nodes[t].dtype is float32 else None


def _is(n: KNode, op, src: tuple[int, ...], arg, pass_: int) -> bool:
    return n.op is op and n.src == src and n.arg == arg and n.pass_ == pass_


def _cone(k: Kernel, top: int) -> list[int]:
    """The body nodes `top` is computed from (itself included), in body order."""
    seen = {top}
    todo = [top]
    while todo:
        for s in k.nodes[todo.pop()].src:
            if s not in seen:
                seen.add(s)
                todo.append(s)
    return sorted(seen)


def _readers(kernels: list[Kernel], outputs) -> dict[int, list[int]]:
    """slot -> indices of the kernels reading it (-1: a graph output, read by the user)."""
    out: dict[int, list[int]] = {}
    for ki, k in enumerate(kernels):
        for inp in k.inputs:
            out.setdefault(inp.slot, []).append(ki)
    for slot, _ in outputs:
        out.setdefault(slot, []).append(-1)
    return out


def _sole_reader(readers: dict, slot: int) -> int | None:
    """The index of the one kernel reading `slot` (once), when nothing else reads it."""
    r = readers.get(slot, [])
    return r[0] if len(r) == 1 and r[0] >= 0 else None


class _Builder:
    """The fused kernel's inputs and nodes, merged from the two kernels' bodies."""

    def __init__(self, operands: list[KInput]):
        self.inputs = list(operands)
        self.nodes: list[KNode] = []

    def input(self, inp: KInput) -> int:
        for i, have in enumerate(self.inputs[3:], 3):
            if have.slot == inp.slot and have.view == inp.view and have.dtype == inp.dtype:
                return i
        self.inputs.append(inp)
        return len(self.inputs) - 1

    def copy(self, k: Kernel, which, bound: dict[int, int]) -> dict[int, int]:
        """Append the nodes of k numbered `which` (ascending) but those `bound` (old node
        -> new node); the remapping."""
        remap = dict(bound)
        for i in which:
            n = k.nodes[i]
            if i in remap:
                continue
            if n.op == LOAD:
                n = dataclasses.replace(n, arg=self.input(k.inputs[n.arg]))
            else:
                n = dataclasses.replace(n, src=tuple(remap[s] for s in n.src))
            self.nodes.append(n)
            remap[i] = len(self.nodes) - 1
        return remap


def _pointwise(k: Kernel, shape: tuple[int, ...]) -> bool:
    """`k` is one elementwise float32 value over `shape` (a scale or a mask of the scores
    in a kernel of its own)."""
    return k.matmul is None and k.attention is None and k.library is None and not k.reduce_axes and \
        len(k.outputs) == 1 and k.shape == shape and _elementwise(k.nodes) and \
        k.nodes[k.outputs[0].node].dtype is float32


def _loads_of(k: Kernel, slot: int) -> list[int] | None:
    """The body nodes of `k` loading `slot`; None when one reads it through a
    non-contiguous view (the fused kernel reads the scores in their own order)."""
    loads = [n_i for n_i, n in enumerate(k.nodes) if n.op == LOAD and k.inputs[n.arg].slot == slot]
    return None if any(not k.inputs[k.nodes[n_i].arg].view.is_contiguous for n_i in loads) else loads


def _try(kernels: list[Kernel], i: int, readers: dict) -> tuple[int, list[int], Kernel] | None:
    """(second matmul index, indices of the kernels it replaces besides `i`, fused kernel)
    when kernel `i` starts the pattern."""
    k1 = kernels[i]
    mm1 = k1.matmul
    if mm1 is None or len(k1.outputs) != 1 or not _elementwise(k1.nodes) or k1.nodes[k1.outputs[0].node].dtype \
            is not float32:
        return None
    # the kernels from the scores to the softmax: elementwise kernels of their own (the
    # boundaries chosen inside t), each the sole reader of the one before
    between: list[tuple[int, list[int]]] = []
    prev = k1.outputs[0].slot
    while True:
        j = _sole_reader(readers, prev)
        loads = None if j is None else _loads_of(kernels[j], prev)
        if loads is None:
            return None
        t = softmax_input(kernels[j])
        if t is not None:
            break
        if not _pointwise(kernels[j], k1.shape):
            return None
        between.append((j, loads))
        prev = kernels[j].outputs[0].slot
    j2, k2, s_loads = j, kernels[j], loads
    if k2.shape != k1.shape:
        return None
    p_slot = k2.outputs[0].slot
    j3 = _sole_reader(readers, p_slot)
    if j3 is None:
        return None
    k3 = kernels[j3]
    mm3 = k3.matmul
    if mm3 is None or len(k3.nodes) != 1 or k3.nodes[0].op != ACC or len(k3.outputs) != 1:
        return None
    a3 = k3.inputs[mm3.a]
    if a3.slot != p_slot or not a3.view.is_contiguous or k3.inputs[mm3.b].slot == p_slot:
        return None
    batch = k1.shape[:-2]
    if k3.shape[:-2] != batch or mm3.m != mm1.m or mm3.k != mm1.n:
        return None
    q, kt, v = k1.inputs[mm1.a], k1.inputs[mm1.b], k3.inputs[mm3.b]
    if mm1.k == 0 or mm1.m == 0 or mm1.n == 0 or not _plain(kt.view):
        return None
    nd = len(k1.shape)
    kv = ViewChain((kt.view.views[0].permute(tuple(range(nd - 2)) + (nd - 1, nd - 2)),), kt.view.pad_value)
    b = _Builder([q, KInput(kt.slot, kt.dtype, kv), v])
    remap = b.copy(k1, range(len(k1.nodes)), {})  # a matmul kernel never loads its operands elementwise
    value = remap[k1.outputs[0].node]
    for j, loads in between:
        kj = kernels[j]
        value = b.copy(kj, _cone(kj, kj.outputs[0].node), {n_i: value for n_i in loads})[kj.outputs[0].node]
    second = b.copy(k2, _cone(k2, t), {n_i: value for n_i in s_loads})
    if not all(x.dtype is float32 for x in b.inputs[:3]) or not all(_plain(x.view) for x in b.inputs):
        return None
    o3 = k3.outputs[0]
    names = [k1.name] + [kernels[j].name for j, _ in between] + [k2.name, k3.name]
    fused = Kernel("_".join(names) + "_attn", k3.shape, tuple(b.inputs), tuple(b.nodes),
                   (KOutput(o3.slot, second[t], o3.dtype, o3.shape),),
                   attention=AttentionSpec(0, 1, 2, mm1.m, mm1.n, mm1.k, mm3.n))
    return j3, [j for j, _ in between] + [j2], fused


def fuse_attention(plan: Plan) -> Plan:
    """`plan` with every matmul-softmax-matmul chain as one attention kernel (see the
    module docstring); the plan itself when there is none."""
    kernels = list(plan.kernels)
    slots = dict(plan.slots)
    changed = False
    readers = _readers(kernels, plan.outputs)
    i = 0
    while i < len(kernels):
        got = _try(kernels, i, readers)
        if got is None:
            i += 1
            continue
        j3, replaced, fused = got
        dead = {kernels[j].outputs[0].slot for j in [i] + replaced}
        # the fused kernel runs where the second matmul ran: every input is written by then
        kernels[j3] = fused
        kernels = [k for idx, k in enumerate(kernels) if idx != i and idx not in replaced]
        for s in dead:
            slots.pop(s, None)
        readers = _readers(kernels, plan.outputs)
        changed = True
    if not changed:
        return plan
    out = dataclasses.replace(plan, kernels=tuple(kernels), slots=slots)
    out.check()
    return out


# ----------------------------------------------------------------------------- the kind


def build_attention(key, root: int, materialized: set[int], slot_of: dict[int, int], build):
    """The attention kernel computing MATMUL node `root` of `key` with its A operand's
    producer (the row softmax, not materialised) inlined — the lowering of search/kinds.py's
    `attention` kind, called by `svod.lower.build` when the chosen boundaries leave the
    softmax inlined into the matmul. Returns (kernel, inlined reductions, seen) like
    `build` (`svod.lower.build._build_kernel`), or None when the chain is not one the
    attention kernel runs as planned (the caller then materialises the softmax).

    How: the chain's kernels are built as if the softmax were materialised — the second
    matmul, the softmax, and each producer the softmax's kernel cannot inline (the first
    matmul) — and `_try` fuses them exactly as the plan pass does; every one of them must
    be replaced, and their values (not materialised in `materialized`) get no slot. `seen`
    holds every node whose boundary status the kernel depends on (a materialised first
    matmul or scale means no attention kernel here)."""
    if switched_off():
        return None
    n = key.nodes[root]
    d = n.src[0]
    if d in materialized or key.nodes[d].op is not Ops.DIV:
        return None
    mm1 = _scores_matmul(key, d, materialized)
    if mm1 is None:
        return None
    n_in = len(key.inputs)
    m = set(materialized) | {d, mm1}
    slots = dict(slot_of)
    slots[d], slots[mm1] = n_in + d, n_in + mm1
    built: dict[int, Kernel] = {}
    seen: set[int] = {root, d, mm1}
    todo = [root, d, mm1]
    while todo:
        r = todo.pop()
        got = build(key, r, m, slots, f"k{r}")
        if not isinstance(got, tuple):  # a Cut: a producer the chain's kernels cannot inline
            c = got.node
            if c in m or c == r or len(built) + len(todo) >= 4:
                return None
            m.add(c)
            slots[c] = n_in + c
            seen.add(c)
            todo += [r, c]
            continue
        k, _, s = got
        built[r] = k
        seen |= s
    kernels = [built[r] for r in sorted(built)]
    readers = _readers(kernels, ((slot_of[root], n.shape),))
    for i in range(len(kernels)):
        got = _try(kernels, i, readers)
        if got is not None:
            j3, replaced, fused = got
            if sorted([i, j3, *replaced]) == list(range(len(kernels))):
                return fused, set(), seen
            return None
    return None


def _scores_matmul(key, d: int, materialized: set[int]) -> int | None:
    """The one MATMUL the softmax node d is computed from (through values not
    materialised), when it is not materialised itself; else None."""
    found, todo, seen = None, [d], set()
    while todo:
        i = todo.pop()
        if i in seen:
            continue
        seen.add(i)
        n = key.nodes[i]
        if n.op is Ops.MATMUL:
            if found is not None or i in materialized:
                return None
            found = i
        elif n.op is not Ops.BUFFER and (i == d or i not in materialized):
            todo.extend(n.src)
        if len(seen) > 256:
            return None
    return found


def switched_off() -> bool:
    """SVOD_FUSE_ATTENTION=0: no attention kernel (the plan pass and the kind alike)."""
    import os

    return os.environ.get("SVOD_FUSE_ATTENTION", "1") in ("0", "false", "False")
