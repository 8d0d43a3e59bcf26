"""The row-prologue matmul kind: ``e(A @ w)`` with A a row normalisation of x (RMSNorm,
layer norm, any row-wise function of x over its last axis) computed while the GEMM packs
A — no (m, k) normalised buffer.

``rmsnorm(x) @ W`` planned as kernels is a row-wise kernel (two passes: the row's mean
square, then ``x * rsqrt(ms + eps) * g`` written out) and a GEMM reading what it wrote:
the (m, k) normalised value goes to memory and comes back. The kind's kernel
(`Kernel.rmsnorm`, lowered by `svod.codegen.rmsnorm`) runs the GEMM's own tiling; each
unit (a tile of rows x columns of the output) first computes the row statistics of its
rows (the prologue's reductions, with the row kernel's own code), then packs A by
evaluating the prologue's value element by element from x — the normalisation is
applied while packing A.

`build_rmsnorm` is the lowering of search/kinds.py's `rmsnorm` kind: the e-graph gives
the matmul a variant reading its A operand's *body* instead of a materialised value, and
a choice that leaves A inlined is built here (`svod.lower.build.KERNEL_KINDS`) and priced
by the extraction against the row kernel + GEMM plan (`costmodels.features`).

The pattern, as kernels (both built by `svod.lower.build` as if A were materialised,
then merged by `fuse_rmsnorm_kernels`):

1. a row-wise kernel over (m, k) reducing axis 1 with one full output, A, of the
   operands' dtype (a choice that materialised the row statistics leaves an elementwise
   prologue: not this kind, A is materialised);
2. a matmul kernel over (m, n) (the generated GEMM or the BLAS step, with any
   elementwise epilogue) whose A operand is A read contiguously, and nothing else
   reading it;

both 2-D (a batch of rows times one weight, ``x3 @ W``, is folded into the 2-D product of
all rows by `_flat_rows`), one real float dtype, no empty dimension, no VALID node. The fused kernel's
nodes are kernel 1's, then kernel 2's: the same operations. A chain it cannot run is
left to the two-kernel plan (the builder returns None and A is materialised).
"""

from __future__ import annotations

import dataclasses
import os

from svod.ir import ELEMENTWISE, Ops
from svod.kernel import ACC, LOAD, VALID, Kernel, KInput, KNode, RmsNormSpec

__all__ = ["build_rmsnorm", "fuse_rmsnorm_kernels", "switched_off"]


def switched_off() -> bool:
    """SVOD_FUSE_RMSNORM=0: no row-prologue matmul kernel (no fact, none built)."""
    return os.environ.get("SVOD_FUSE_RMSNORM", "1") in ("0", "false", "False")


def _prologue_ok(k: Kernel) -> bool:
    """k computes one full (m, k) value by elementwise ops and reductions over axis 1."""
    if k.matmul is not None or k.attention is not None or k.library is not None or k.rowcol is not None or \
            k.mlp is not None or k.rmsnorm is not None or len(k.shape) != 2 or k.reduce_axes not in ((), (1,)):
        return False
    if len(k.outputs) != 1 or k.outputs[0].reduced:
        return False
    for n in k.nodes:
        if n.op in (LOAD, Ops.CONST, Ops.REDUCE):
            continue
        if n.op in (ACC, VALID, Ops.ARGMAX, Ops.ARGMIN) or n.op not in ELEMENTWISE or n.op is Ops.CONTIGUOUS:
            return False
    return True


def _flat_rows(k1: Kernel, k2: Kernel) -> tuple[Kernel, Kernel] | None:
    """(k1, k2) with their batch axes folded into the rows when k2 is a batched product
    ``(b..., m, k) @ (b..., k, n)`` whose B is the same matrix for every batch index (a
    weight broadcast along the batch: ``x3 @ W``): then it is the 2-D product of the
    b·m rows. Inputs are re-viewed by a reshape (a chain of views where one view cannot
    say it); None when B varies along the batch or a view is masked along it."""
    nb = len(k2.shape) - 2
    if nb == 0:
        return k1, k2
    mm = k2.matmul
    bv = k2.inputs[mm.b].view
    if len(bv.views) != 1:
        return None
    v = bv.views[0]
    if any(v.strides[d] != 0 for d in range(nb)) or (v.mask is not None and any(
            v.mask[d] != (0, v.shape[d]) for d in range(nb))):
        return None
    from svod.view import View, ViewChain

    rows = 1
    for d in k2.shape[:-1]:
        rows *= d
    kdim, ndim = v.shape[-2:]
    b_in = KInput(k2.inputs[mm.b].slot, k2.inputs[mm.b].dtype,
                  ViewChain((View((kdim, ndim), v.strides[-2:], v.offset, None if v.mask is None else v.mask[-2:]),),
                            bv.pad_value))
    if len(k1.shape) != nb + 2 or k1.shape[:-1] != k2.shape[:-1] or k1.reduce_axes != (nb + 1,):
        return None

    def flat(k: Kernel, cols: int, inputs, reduce_axes) -> Kernel:
        ins = []
        for inp in inputs:  # every view over (b..., m, c) becomes one over (b·m, c); B is 2-D already
            sh = inp.view.shape
            ins.append(inp if len(sh) != nb + 2 else KInput(inp.slot, inp.dtype, inp.view.reshape((rows, sh[-1]))))
        outs = tuple(dataclasses.replace(o, shape=o.shape) for o in k.outputs)
        return dataclasses.replace(k, shape=(rows, cols), inputs=tuple(ins), outputs=outs, reduce_axes=reduce_axes)

    f1 = flat(k1, k1.shape[-1], k1.inputs, (1,))
    ins2 = [b_in if i == mm.b else inp for i, inp in enumerate(k2.inputs)]
    f2 = flat(k2, ndim, ins2, ())
    f2 = dataclasses.replace(f2, matmul=dataclasses.replace(mm, m=rows))
    return f1, f2


def fuse_rmsnorm_kernels(k1: Kernel, k2: Kernel) -> Kernel | None:
    """The kernel computing k2 with k1's output (A) computed while packing A, when k1 is a
    row-wise kernel over (m, k), reducing axis 1, writing A and k2 a 2-D matmul kernel
    reading A contiguously as its A operand and nothing else, of one real float dtype;
    else None."""
    if k2.matmul is None or k2.reduce_axes or len(k2.shape) < 2:
        return None
    flat = _flat_rows(k1, k2)  # a batch of rows times one weight: the 2-D product of all rows
    if flat is None:
        return None
    k1, k2 = flat
    mm = k2.matmul
    if len(k2.shape) != 2 or not _prologue_ok(k1) or k1.reduce_axes != (1,):
        return None  # NOTE: a prologue without a row reduction (relu(x) @ w) is not this kind's
    o1 = k1.outputs[0]
    a_in, b_in = k2.inputs[mm.a], k2.inputs[mm.b]
    dt = b_in.dtype
    if not dt.is_float or dt.is_complex or a_in.dtype != dt or o1.dtype != dt or k1.nodes[o1.node].dtype != dt:
        return None
    m, k = k1.shape
    if 0 in (m, k, mm.n) or (mm.m, mm.k) != (m, k) or k2.shape != (m, mm.n):
        return None
    if a_in.slot != o1.slot or not a_in.view.is_contiguous or a_in.view.shape != (m, k):
        return None
    if any(inp.slot == o1.slot for i, inp in enumerate(k2.inputs) if i != mm.a):
        return None
    if any(n.op == VALID or n.op is Ops.REDUCE for n in k2.nodes):
        return None
    w = len(k1.inputs)
    inputs = list(k1.inputs) + [b_in]
    index = {mm.b: w}
    for i, inp in enumerate(k2.inputs):
        if i not in (mm.a, mm.b):
            index[i] = len(inputs)
            inputs.append(inp)
    nodes: list[KNode] = list(k1.nodes)
    split = len(nodes)
    for n in k2.nodes:
        if n.op == LOAD:
            n = dataclasses.replace(n, arg=index[n.arg])
        else:
            n = dataclasses.replace(n, src=tuple(s + split for s in n.src))
        nodes.append(n)
    outs = tuple(dataclasses.replace(o, node=o.node + split) for o in k2.outputs)
    spec = RmsNormSpec(w, m, k, mm.n, split, o1.node)
    fused = Kernel(f"{k1.name}_{k2.name}_rmsnorm", k2.shape, tuple(inputs), tuple(nodes), outs, rmsnorm=spec)
    fused.check()
    return fused


def build_rmsnorm(key, root: int, materialized: set[int], slot_of: dict[int, int], build):
    """The row-prologue matmul kernel computing node `root` of `key` — a MATMUL, or the
    elementwise epilogue of one — with the matmul's A operand's producer (not
    materialised) computed while packing A: the lowering of search/kinds.py's `rmsnorm`
    kind, called by `svod.lower.build`. Returns (kernel, inlined reductions, seen) like
    `build` (`svod.lower.build._build_kernel`), or None when the chain is not one the
    kernel runs (the caller then materialises the operand).

    How: the row kernel of A and the matmul kernel are built as if A were materialised
    (its slot is where it would live) and merged by `fuse_rmsnorm_kernels`; A's value
    gets no slot in the plan. The reductions the row kernel hosts are the fused kernel's
    (returned, so a reduction two kernels would compute is materialised once)."""
    if switched_off():
        return None
    from svod.lower.mlp import _consumer

    mm2 = _consumer(key, root, materialized)
    if mm2 is None:
        return None
    p = key.nodes[mm2].src[0]
    pn = key.nodes[p]
    if p in materialized or len(pn.shape) < 2 or len(key.nodes[mm2].shape) != len(pn.shape) or pn.op in \
            (Ops.MATMUL, Ops.CONTIGUOUS, Ops.BUFFER) or not pn.dtype.is_float or pn.dtype.is_complex:
        return None
    from svod.lower.kindsites import row_prologue

    # this kind's own sites only (its pre-filter, on the written graph): a softmax of
    # materialised scores is the attention kind's chain, an activation of a product the
    # MLP kind's, even where the choice materialised their product
    if not row_prologue(key, p):
        return None
    m = set(materialized) | {p}
    slots = dict(slot_of)
    slots[p] = len(key.inputs) + p
    got1 = build(key, p, m, slots, f"k{p}")
    if not isinstance(got1, tuple):  # a Cut: A's kernel needs another producer materialised
        return None
    got2 = build(key, root, m, slots, f"k{root}")
    if not isinstance(got2, tuple):
        return None
    (k1, red1, seen1), (k2, red2, seen2) = got1, got2
    if red2:
        return None
    fused = fuse_rmsnorm_kernels(k1, k2)
    if fused is None:
        return None
    return fused, set(red1), set(seen1) | set(seen2) | {root, mm2, p}
