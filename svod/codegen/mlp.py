"""Native fused-MLP kernels: ``e2(e1(x @ w1) @ w2)`` a block of rows at a time.

The kernel of an `MlpSpec` (built by `svod.lower.mlp` for search/kinds.py's `mlp` kind)
lowers to::

    unit u = block of r = min(R, m - u*R) rows of x (R = `svod.codegen.schedule.block_rows`)
      H  = e1(x[rows] @ w1)        # GEMM 1 with its epilogue (bias, activation) -> H (r x h)
      out[rows] = e2(H @ w2)       # GEMM 2 with its epilogue, A = H
    H: one malloc'ed (R, h) block per body call (per thread), reused by every unit

The (m, h) hidden layer never exists in memory: each thread's H block is written by
GEMM 1 and read back by GEMM 2's packing while it is in L2/L3. Both products are the
generated GEMM of `svod.codegen.gemm`, unchanged: the two products of a block are
ordinary matmul kernels over R rows (`parts`), lowered into the same LLVM module by
`KernelLowering` as *rows variants* (their row count r is an argument: one pair of
GEMMs serves every block, the short last one too) and called here with their operand
pointers moved to the block's first row (every input is one unmasked strided view, so a
block is the same view at an offset). A block's GEMMs run all their units on the
calling thread; the runtime splits the row blocks across threads.

The MLP kernel's own rows variant (``lower_mlp(..., rows=True)``, built by
`svod.codegen.rows` for a bucket plan run at n rows) reads m from the slot after the
outputs and runs the ceil(m / R) blocks that hold rows; no row past m is read or written.


Numerics: each output element is the GEMM's sum, in the GEMM's order (it depends on K
and KC only), of the same epilogue operations the two-kernel plan runs: results equal
the two-GEMM plan's to the last bit when the blocks' GEMM tilings pick the same KC
(they do: KC depends on K only), whatever R is.

What it costs (docs/codegen.md, "The MLP block"): a block's GEMMs are tiled for one
worker (whole-width column tiles), so each block packs w1 and w2 once: ceil(m / R)
packings of each, where the two-GEMM plan packs each once per row tile of its product
(W4: w1 once, w2 twice). The saving (the hidden layer's write and read, one launch) pays
for the difference or not: `costmodels.features` prices both.
"""

from __future__ import annotations

import dataclasses

import llvmlite.ir as ir

from svod.codegen.irbuild import I8, I64, VOID, Fn, Lowered, ceil_div, func, i64, imin, mem_type
from svod.codegen.schedule import Schedule, block_rows, schedule
from svod.kernel import LOAD, Kernel, KInput, KNode, KOutput, MatmulSpec
from svod.view import View, ViewChain

__all__ = ["lower_mlp", "parts", "row_strides"]

def row_strides(kernel: Kernel) -> list[int]:
    """Per input, its element stride along the kernel's row axis (0: the same for every
    row, as the weights w1 and w2 are: their first axis is not m)."""
    ml = kernel.mlp
    return [0 if i in (ml.w1, ml.w2) else inp.view.views[0].strides[0] for i, inp in enumerate(kernel.inputs)]


def lowerable(kernel: Kernel) -> str | None:
    """Why the native MLP kernel cannot run `kernel` (None: it can): every input must be
    one unmasked view over two axes."""
    for i, inp in enumerate(kernel.inputs):
        if len(inp.view.views) != 1 or inp.view.views[0].mask is not None or len(inp.view.shape) != 2:
            return f"input {i} is not one unmasked 2-D view"
    return None


def _block_view(v: ViewChain, rows: int, row_axis: bool) -> ViewChain:
    """The view `v` restricted to its first `rows` rows (when it has a row axis)."""
    w = v.views[0]
    if not row_axis:
        return v
    return ViewChain((View((rows,) + w.shape[1:], w.strides, w.offset, None),), v.pad_value)


def parts(kernel: Kernel, rows: int) -> tuple[Kernel, Kernel, list[int], list[int]]:
    """The two matmul kernels one block of `rows` rows runs: (GEMM 1 over (rows, h) writing
    the hidden value, GEMM 2 over (rows, n) reading it as its A operand, and for each the
    MLP input index of each of its inputs, -1 for H). Their slots are placeholders (the
    MLP kernel passes pointers)."""
    ml = kernel.mlp
    nodes = kernel.nodes

    def part(lo: int, hi: int, a: int | None, b: int, space: tuple[int, int], mm: tuple[int, int, int],
             out_node: int, outs):
        ins: list[int] = []  # MLP input index (-1: H) of each part input
        kin: list[KInput] = []

        def add(i: int, view: ViewChain, dt) -> int:
            ins.append(i)
            kin.append(KInput(len(kin), dt, view))
            return len(kin) - 1

        dt = kernel.inputs[ml.x].dtype
        if a is None:
            ia = add(-1, ViewChain.of((rows, ml.h)), dt)
        else:
            ia = add(a, _block_view(kernel.inputs[a].view, rows, True), dt)
        ib = add(b, kernel.inputs[b].view, dt)
        remap: dict[int, int] = {}
        body: list[KNode] = []
        for i in range(lo, hi):
            n = nodes[i]
            if n.op == LOAD:
                inp = kernel.inputs[n.arg]
                j = next((q for q, src in enumerate(ins) if src == n.arg), None)
                if j is None:
                    j = add(n.arg, _block_view(inp.view, rows, True), inp.dtype)
                n = dataclasses.replace(n, arg=j)
            else:
                n = dataclasses.replace(n, src=tuple(remap[s] for s in n.src))
            body.append(n)
            remap[i] = len(body) - 1
        out = tuple(KOutput(1000 + j, remap[o.node], o.dtype, space) for j, o in enumerate(outs)) if outs else \
            (KOutput(1000, remap[out_node], nodes[out_node].dtype, space),)
        k = Kernel(f"{kernel.name}_g{1 if a is not None else 2}", space, tuple(kin), tuple(body), out,
                   matmul=MatmulSpec(ia, ib, *mm))
        return k, ins

    k1, ins1 = part(0, ml.split, ml.x, ml.w1, (rows, ml.h), (rows, ml.h, ml.d), ml.hidden, None)
    k2, ins2 = part(ml.split, len(nodes), None, ml.w2, (rows, ml.n), (rows, ml.n, ml.h), -1, kernel.outputs)
    return k1, k2, ins1, ins2


def lower_mlp(kernel: Kernel, symbol: str, sched: Schedule, lowering, rows: bool = False) -> Lowered:
    """Kernel (with `mlp`) -> LLVM IR text with entry ``void symbol(i8** slots, i64 ub,
    i64 ue)`` over its row blocks (see the module docstring). `lowering`: the class
    lowering one kernel into a module (`svod.codegen.lower.KernelLowering`; passed in,
    lower.py dispatches here). `rows` (the *rows variant*, `svod.codegen.rows`): the row
    count m is read at run time from the slot after the last output (an integer, at most
    the kernel's m), and only its ceil(m / R) blocks have work; the rows past it are
    neither read nor written."""
    why = lowerable(kernel)
    if why is not None:
        raise ValueError(f"MLP kernel {kernel.name}: {why}")
    ml = kernel.mlp
    target = sched.target
    runtime_rows = rows
    rows = block_rows(kernel, target)
    units = sched.loops.units
    # a block's GEMMs run on the calling thread: tiled for one worker (whole-width column
    # tiles: each weight packed once per block; the same KC, so the same sums), their row
    # count read at run time (GEMM rows variants: one pair serves every block, the short
    # last one too)
    one = dataclasses.replace(target, workers=1)
    module = ir.Module(name=f"svod_{kernel.name}")
    nin, nout = len(kernel.inputs), len(kernel.outputs)
    dt = kernel.inputs[ml.x].dtype
    ty = mem_type(dt)
    hty = ir.PointerType(ty)
    k1, k2, ins1, ins2 = parts(kernel, rows)
    gs = []
    for k, name in ((k1, "g1"), (k2, "g2")):
        low = lowering(k, module, f"{symbol}.{name}", schedule(k, one), rows=True)
        low.lower()
        module.get_global(f"{symbol}.{name}").linkage = "internal"
        gs.append(low)
    g1, g2 = gs

    fnty = ir.FunctionType(VOID, [ir.PointerType(ir.PointerType(I8)), I64, I64])
    fn = ir.Function(module, fnty, symbol)
    f = Fn(module, fn)
    b = f.b
    types = [i.dtype for i in kernel.inputs] + [o.dtype for o in kernel.outputs]
    ptrs = [b.bitcast(b.load(b.gep(fn.args[0], [i64(j)])), ir.PointerType(mem_type(t))) for j, t in enumerate(types)]
    strides = row_strides(kernel)
    isz = dt.itemsize
    m = i64(ml.m) if not runtime_rows else b.ptrtoint(b.load(b.gep(fn.args[0], [i64(len(types))])), I64)
    ue = imin(b, fn.args[2], imin(b, ceil_div(b, m, rows), i64(units)) if runtime_rows else i64(units))
    i8p = ir.PointerType(I8)
    raw = b.call(func(module, "malloc", i8p, [I64]), [i64(max(1, rows * ml.h) * isz + 64)])
    # NOTE: no memory for the hidden block: stop here (SIGILL) rather than return garbage
    f.if_then(b.icmp_unsigned("==", b.ptrtoint(raw, I64), i64(0)),
              lambda: b.call(func(module, "llvm.trap", VOID, []), []))
    hid = b.inttoptr(b.and_(b.add(b.ptrtoint(raw, I64), i64(63)), i64(-64)), hty)

    def moved(i, r0):  # MLP input i's pointer at row r0
        return ptrs[i] if strides[i] == 0 else b.gep(ptrs[i], [b.mul(r0, i64(strides[i]))])

    def gemm(g, args, r):  # one rows-variant GEMM over r rows: its row tiles covering r
        p = g.sched.gemm
        n_units = b.mul(ceil_div(b, r, p.mt), i64(p.tiles_n))
        b.call(g.body_fn, args + [i64(0), n_units, r])

    def block(r0, r):  # the r rows from r0: GEMM 1 into the hidden block, GEMM 2 from it
        a1 = [moved(i, r0) for i in ins1] + [hid]
        gemm(g1, a1, r)
        outs = [b.gep(ptrs[nin + j], [b.mul(r0, i64(ml.n))]) for j in range(nout)]
        a2 = [hid if i < 0 else moved(i, r0) for i in ins2] + outs
        gemm(g2, a2, r)

    def unit(u):
        r0 = b.mul(u, i64(rows))
        block(r0, imin(b, i64(rows), b.sub(m, r0)))

    f.loop(fn.args[1], ue, unit, "blk")
    b.call(func(module, "free", VOID, [i8p]), [raw])
    b.ret_void()
    f.finish()
    return Lowered(str(module), symbol, units, sched.loops)
