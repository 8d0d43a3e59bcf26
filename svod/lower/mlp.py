"""The fused MLP kind: ``e2(e1(x @ w1) @ w2)`` as one kernel, no (m, h) hidden buffer.

``act(x @ W1 + b1) @ W2 + b2`` planned as kernels is two GEMMs (the bias and the
activation fused into the first one's epilogue, the second bias into the second's) over
an (m, h) hidden layer written by the first and read by the second: 8 MB each way for
W4 (512 x 1024 x 4096 float32). The MLP kernel (`Kernel.mlp`, lowered by
`svod.codegen.mlp`) runs both products a block of rows at a time with the block's
hidden rows in a per-thread buffer.

`build_mlp` is the lowering of search/kinds.py's `mlp` kind: the search's e-graph gives
the second matmul a variant reading its A operand's *body* (the first product's
epilogue) instead of a materialised value, and a choice that leaves that operand inlined
is built here (`svod.lower.build.KERNEL_KINDS`) and priced by the extraction against the
two-GEMM plan (`costmodels.features`: the kind's features are what its blocks run).

The pattern, as kernels (both built by `svod.lower.build` as if the hidden value were
materialised, then merged):

1. a generated matmul kernel over (m, h) — `x @ w1` and an elementwise epilogue e1 (a
   bias row, an activation: anything elementwise, none at all) — writing the hidden
   value P;
2. a matmul kernel over (m, n) whose A operand is P read contiguously, with its own
   elementwise epilogue e2 (a bias, a residual, nothing: a BLAS step's product);

both 2-D, of one real float dtype, every input one unmasked strided view. The fused
kernel's nodes are kernel 1's, then kernel 2's: the same operations in the same order,
so the kind is *exact* in the sense of every fusion (docs/algebra.md, "Kernel kinds").
A chain it cannot run (a batch axis, a masked or chained view, a producer the matmul
kernels cannot inline) is left to the two-GEMM plan: the builder returns None and the
hidden value is materialised.
"""

from __future__ import annotations

import dataclasses
import os

from svod.ir import Ops
from svod.kernel import ACC, LOAD, Kernel, KInput, KNode, MlpSpec
from svod.view import ViewChain

__all__ = ["build_mlp", "fuse_mlp_kernels", "switched_off"]

_EPILOGUE = frozenset({LOAD, ACC})


def switched_off() -> bool:
    """SVOD_FUSE_MLP=0: no MLP kernel (the kind writes no fact; the lowering builds none)."""
    return os.environ.get("SVOD_FUSE_MLP", "1") in ("0", "false", "False")


def _one_view(v: ViewChain) -> bool:
    return len(v.views) == 1 and v.views[0].mask is None and len(v.shape) == 2


def _elementwise(k: Kernel) -> bool:
    from svod.ir import ELEMENTWISE

    return all(n.op in _EPILOGUE or n.op is Ops.CONST or (n.op in ELEMENTWISE and n.op is not Ops.CONTIGUOUS)
               for n in k.nodes)


def fuse_mlp_kernels(k1: Kernel, k2: Kernel) -> Kernel | None:
    """The MLP kernel computing k2 with k1's output (the hidden value) inlined, when k1 is
    a generated matmul kernel with an elementwise epilogue writing the value k2 reads,
    contiguously, as its A operand and nothing else, both 2-D of one real float dtype
    with every input one unmasked view; else None."""
    mm1, mm2 = k1.matmul, k2.matmul
    if mm1 is None or mm2 is None or mm1.library or len(k1.outputs) != 1 or len(k1.shape) != 2 or \
            len(k2.shape) != 2 or k1.reduce_axes or k2.reduce_axes:
        return None
    dt = k1.inputs[mm1.a].dtype
    if not dt.is_float or dt.is_complex or any(k.inputs[i].dtype != dt for k in (k1, k2)
                                                for i in (k.matmul.a, k.matmul.b)):
        return None
    o1 = k1.outputs[0]
    if k1.nodes[o1.node].dtype != dt or not _elementwise(k1) or not _elementwise(k2):
        return None
    m, h = k1.shape
    if 0 in (m, h, mm1.k, mm2.n):  # an empty product: the two-GEMM plan's edge cases
        return None
    a2 = k2.inputs[mm2.a]
    if a2.slot != o1.slot or not a2.view.is_contiguous or a2.view.shape != (m, h) or mm2.m != m or mm2.k != h:
        return None
    if any(inp.slot == o1.slot for i, inp in enumerate(k2.inputs) if i != mm2.a):
        return None
    if not all(_one_view(inp.view) for k in (k1, k2) for i, inp in enumerate(k.inputs) if inp.slot != o1.slot):
        return None
    inputs = [k1.inputs[mm1.a], k1.inputs[mm1.b], k2.inputs[mm2.b]]

    def index(inp: KInput) -> int:
        for i, have in enumerate(inputs[3:], 3):
            if have == inp:
                return i
        inputs.append(inp)
        return len(inputs) - 1

    nodes: list[KNode] = []
    for k, shift in ((k1, 0), (k2, len(k1.nodes))):
        for n in k.nodes:
            if n.op == LOAD:
                n = dataclasses.replace(n, arg=index(k.inputs[n.arg]))
            elif shift:
                n = dataclasses.replace(n, src=tuple(s + shift for s in n.src))
            nodes.append(n)
    split = len(k1.nodes)
    outs = tuple(dataclasses.replace(o, node=o.node + split) for o in k2.outputs)
    spec = MlpSpec(0, 1, 2, m, mm1.k, h, mm2.n, split, o1.node)
    fused = Kernel(f"{k1.name}_{k2.name}_mlp", k2.shape, tuple(inputs), tuple(nodes), outs, mlp=spec)
    fused.check()
    return fused


def _consumer(key, root: int, materialized: set[int]) -> int | None:
    """The MATMUL node `root` is, or the one matmul its value is an elementwise epilogue
    of (through elementwise ops on values not materialised), else None."""
    from svod.ir import ELEMENTWISE

    todo, found, seen = [root], None, set()
    while todo:
        i = todo.pop()
        if i in seen or (i in materialized and i != root):
            continue
        seen.add(i)
        n = key.nodes[i]
        if n.op is Ops.MATMUL:
            if found is not None:
                return None
            found = i
        elif n.op in ELEMENTWISE or n.op in (Ops.RESHAPE, Ops.EXPAND):
            todo.extend(n.src)
        if len(seen) > 512:
            return None
    return found


def build_mlp(key, root: int, materialized: set[int], slot_of: dict[int, int], build):
    """The MLP kernel computing node `root` of `key` — a MATMUL, or the elementwise
    epilogue of one — with the matmul's A operand's producer (not materialised) inlined:
    the lowering of search/kinds.py's `mlp` kind, called by `svod.lower.build`. Returns
    (kernel, inlined reductions, seen) like `build` (`svod.lower.build._build_kernel`), or
    None when the chain is not one the MLP kernel runs (the caller then materialises the
    operand).

    How: the two matmul kernels are built as if the hidden value P were materialised
    (its slot is where it would live) and merged by `fuse_mlp_kernels`; P's value gets no
    slot in the plan. `seen` holds every node whose boundary status the kernel depends on
    (both kernels' and P's)."""
    if switched_off():
        return None
    n_in = len(key.inputs)
    mm2 = _consumer(key, root, materialized)
    if mm2 is None:
        return None
    p = key.nodes[mm2].src[0]
    pn = key.nodes[p]
    if p in materialized or len(pn.shape) != 2 or len(key.nodes[mm2].shape) != 2 or pn.op in \
            (Ops.MATMUL, Ops.CONTIGUOUS, Ops.BUFFER) or not pn.dtype.is_float or \
            _consumer(key, p, materialized | {p}) is None:  # no product below p: cheap, before any build
        return None
    m = set(materialized) | {p}
    slots = dict(slot_of)
    slots[p] = n_in + p
    got1 = build(key, p, m, slots, f"k{p}")
    if not isinstance(got1, tuple):  # a Cut: P's kernel needs another producer materialised
        return None
    got2 = build(key, root, m, slots, f"k{root}")
    if not isinstance(got2, tuple):
        return None
    (k1, red1, seen1), (k2, red2, seen2) = got1, got2
    if red1 or red2:
        return None
    fused = fuse_mlp_kernels(k1, k2)
    if fused is None:
        return None
    return fused, set(), set(seen1) | set(seen2) | {root, mm2, p}
