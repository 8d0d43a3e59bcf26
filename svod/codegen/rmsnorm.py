"""Native row-prologue matmul kernels: ``e(A @ w)`` with A = a row normalisation of x,
applied while the GEMM packs A.

The kernel of an `RmsNormSpec` (built by `svod.lower.rmsnorm` for search/kinds.py's
`rmsnorm` kind) lowers to the generated GEMM of `svod.codegen.gemm` — its tiling, its
micro-kernel, its epilogue, unchanged — with two additions (`_PrologueGemm`, a subclass
of the GEMM emitter)::

    unit u = (row tile [i0, i1), column tile)           # the GEMM's units
      at the first K block, when the call's previous unit had another row tile:
        for each row i of the tile:                      # the row statistics
          the prologue's passes over x[i, :] (the row kernel's code: blocked sums)
          -> each REDUCE value in a per-call stack array (MT values each)
      for pc in K step KC: for ic in tile rows step MC:
        pack A[ic:ic+mc, pc:pc+kc]: per row, its per-row values (rsqrt(ms + eps)) once,
          then A[i, p] = the prologue's value at (i, pc + p) (x * s * g) -> Ap
        ... the GEMM's B packing, micro-kernel and epilogue

So the normalised x never exists in memory: each unit reads its rows of x once for the
statistics and once per K block while packing (L2-resident for the tile's MC rows). Every
unit of a row tile recomputes its rows' statistics (``tiles_n`` times per row: m·k·passes
element updates each time, next to the unit's 2·MT·NT·k flops); the cost model counts it.

The row passes are emitted by the row kernel's own lowering (`KernelLowering._pass`,
through a second `KernelLowering` of the prologue kernel whose builder and input
pointers are the GEMM body's), so each row's sums are the row kernel's — the same
``SUM_BLOCK`` blocks and cascade — and A's elements are the same operations as the
two-kernel plan's: with a generated GEMM on both sides the results agree to the last bit
(tests/test_rmsnorm_kind.py).

Depends on these internals of `svod.codegen.gemm._Gemm` (named for the GEMM's owner):
`_kblock(kb)` (overridden: row statistics at kb == 0), `_pack_a(ic, ic1)` (overridden:
the same layout, rows or MR-row panels), and the attributes `i0`, `i1`, `pc`, `kc`,
`Ap`, `a_rows`, `plan`, `cfg`, `f`, `dt`, `_loop`.
"""

from __future__ import annotations

import dataclasses

import llvmlite.ir as ir

from svod.codegen.gemm import _Gemm
from svod.codegen.irbuild import I8, I64, VOID, Fn, Lowered, ceil_div, i64, mem_type, reg_type
from svod.codegen.scalar import const, emit_op
from svod.codegen.schedule import Schedule, gemm_tiling, make_access, per_row_nodes, schedule
from svod.ir import Ops
from svod.kernel import LOAD, Kernel, KInput, KOutput, MatmulSpec
from svod.view import ViewChain

__all__ = ["lower_rmsnorm", "parts"]


def parts(kernel: Kernel) -> tuple[Kernel, Kernel]:
    """(the prologue kernel: nodes ``[:split]`` over (m, k), reducing axis 1 when they hold
    a REDUCE, writing A; the GEMM kernel over (m, n): the fused kernel's inputs, then a
    contiguous (m, k) placeholder as its A operand, nodes ``[split:]``). Slots are
    placeholders (the kernel passes pointers)."""
    rs = kernel.rmsnorm
    n1 = [KInput(i, inp.dtype, inp.view) for i, inp in enumerate(kernel.inputs)]
    pro_nodes = kernel.nodes[:rs.split]
    has_red = any(n.op is Ops.REDUCE for n in pro_nodes)
    dt = kernel.inputs[rs.w].dtype
    # the prologue reads only its own inputs (those viewed over (m, k)); the others are
    # kept (same indices) with an (m, k) view of nothing: never loaded by its nodes
    pro_inputs = tuple(inp if inp.view.shape == (rs.m, rs.k) else KInput(inp.slot, inp.dtype,
                                                                          ViewChain.of((rs.m, rs.k)))
                       for inp in n1)
    avail = [0] * rs.split  # the pass A is ready in (the REDUCE nodes carry theirs)
    for i, n in enumerate(pro_nodes):
        avail[i] = n.pass_ + 1 if n.op is Ops.REDUCE else max((avail[s] for s in n.src), default=0)
    k1 = Kernel(f"{kernel.name}_pro", (rs.m, rs.k), pro_inputs, pro_nodes,
                (KOutput(1000, rs.a, dt, (rs.m, rs.k), False, avail[rs.a]),), (1,) if has_red else ())
    shift = rs.split
    body = tuple(dataclasses.replace(n, src=tuple(s - shift for s in n.src)) for n in kernel.nodes[rs.split:])
    a = len(n1)
    # the GEMM reads B and its epilogue's inputs; the prologue's are passed through (their
    # pointers), viewed as its (m, n) space so its accesses are well formed (never loaded)
    epi = {n.arg for n in body if n.op == LOAD}
    g_in = tuple(inp if i in epi or i == rs.w else KInput(inp.slot, inp.dtype, ViewChain.of(kernel.shape))
                 for i, inp in enumerate(n1))
    g_inputs = g_in + (KInput(2000, dt, ViewChain.of((rs.m, rs.k))),)
    g_outs = tuple(KOutput(1001 + j, o.node - shift, o.dtype, o.shape) for j, o in enumerate(kernel.outputs))
    k2 = Kernel(f"{kernel.name}_gemm", kernel.shape, g_inputs, body, g_outs, (),
                MatmulSpec(a, rs.w, rs.m, rs.n, rs.k))
    return k1, k2


class _PrologueGemm(_Gemm):
    """The GEMM emitter with A packed from the row prologue (see the module docstring)."""

    def __init__(self, low, pro, a_node: int):
        super().__init__(low)
        self.pro = pro  # the prologue kernel's lowering, on this body's builder and pointers
        k1 = pro.k
        self.reds = [i for i, n in enumerate(k1.nodes) if n.op is Ops.REDUCE]
        self.npass = max((k1.nodes[i].pass_ + 1 for i in self.reds), default=0)
        self.per_row = per_row_nodes(dataclasses.replace(k1, reduce_axes=(1,)))
        self.a_node = a_node
        m, k = k1.shape
        self.row_dims = (0,) if m != 1 else None
        self.col_dims = (1,) if k != 1 else None
        # A's per-row part: the per-row nodes A's elements read (computed once per row)
        need, stack, seen = set(), [self.a_node], set()
        while stack:
            i = stack.pop()
            if i in seen:
                continue
            seen.add(i)
            if self.per_row[i] and k1.nodes[i].op is not Ops.CONST:
                need.add(i)
            else:
                stack.extend(k1.nodes[i].src)
        self.row_targets = sorted(need)

    def emit(self) -> None:
        if self.plan.units == 0:
            return
        f = self.f
        self.stats = {i: f.alloca(reg_type(self.pro.k.nodes[i].dtype), max(1, self.plan.mt), f"stat{i}")
                      for i in self.reds}
        super().emit()

    def _row_ctx(self, i: ir.Value) -> dict:
        return {self.row_dims: i} if self.row_dims is not None else {}

    def _unit(self, u: ir.Value) -> None:
        # a unit's row tile has fresh statistics to compute unless the previous unit of
        # this call had the same row tile (units run column tiles fastest: a call's
        # consecutive units share their rows, and the statistics stay in the stack arrays)
        b, plan = self.f.b, self.plan
        t = b.urem(u, i64(max(1, plan.tiles_m * plan.tiles_n)))
        self.fresh = b.or_(b.icmp_signed("==", u, self.low.ub),
                           b.icmp_signed("==", b.urem(t, i64(max(1, plan.tiles_n))), i64(0)))
        super()._unit(u)

    def _kblock(self, kb: ir.Value) -> None:
        b = self.f.b
        if self.reds:
            self.f.if_then(b.and_(b.icmp_signed("==", kb, i64(0)), self.fresh), self._row_stats)
        super()._kblock(kb)

    def _row_stats(self) -> None:
        """Each REDUCE value of the unit's rows [i0, i1), by the row kernel's passes."""
        b, pro = self.f.b, self.pro

        def row(r):
            i = b.add(self.i0, r)
            env: dict = {}
            for p in range(self.npass):
                pro._pass(p, env, self._row_ctx(i))
            for j in self.reds:
                b.store(env[j], b.gep(self.stats[j], [r]))

        self._loop(i64(0), b.sub(self.i1, self.i0), row, "sr")

    def _row_env(self, i: ir.Value) -> dict:
        """Row i's REDUCE values (from the statistics) and A's per-row values."""
        b = self.f.b
        env = {j: emit_op(self.f, n.op, n.dtype, n.arg, [], []) for j, n in enumerate(self.pro.k.nodes)
               if n.op is Ops.CONST}
        for j in self.reds:
            env[j] = b.load(b.gep(self.stats[j], [b.sub(i, self.i0)]))
        self.pro._eval(self.row_targets, env, self._row_ctx(i))
        return env

    def _a_value(self, env_row: dict, i: ir.Value, col: ir.Value) -> ir.Value:
        ctx = self._row_ctx(i)
        if self.col_dims is not None:
            ctx[self.col_dims] = col
        env = dict(env_row)
        self.pro._eval([self.a_node], env, ctx)
        return env[self.a_node]

    def _pack_a(self, ic: ir.Value, ic1: ir.Value) -> None:
        """The base class's layout (rows: row r at Ap + r·KC; panels: element (p, r) of
        panel q at Ap + q·kc·MR + p·MR + r), each element A's value computed from x."""
        # A is normalised here: a plan reading A in place would skip it (schedule.direct_a)
        assert not self.a_direct, "the rmsnorm GEMM must pack A"
        b, cfg, plan = self.f.b, self.cfg, self.plan
        mr = cfg.mr
        kc = self.kc
        zero = const(self.dt, 0)
        npi = ceil_div(b, b.sub(ic1, ic), mr)
        kcs = max(plan.kc, 1)

        def dst_of(r):
            if self.a_rows:
                base = b.gep(self.Ap, [b.mul(r, i64(kcs))])
                return lambda p: b.gep(base, [p])
            q, rr = b.udiv(r, i64(mr)), b.urem(r, i64(mr))
            base = b.gep(self.Ap, [b.add(b.mul(q, b.mul(kc, i64(mr))), rr)])
            return lambda p: b.gep(base, [b.mul(p, i64(mr))])

        def row(r):
            i = b.add(ic, r)
            dst = dst_of(r)

            def fill():
                env_row = self._row_env(i)
                self._loop(i64(0), kc, lambda p: b.store(self._a_value(env_row, i, b.add(self.pc, p)), dst(p)), "p")

            def clear():
                self._loop(i64(0), kc, lambda p: b.store(zero, dst(p)), "p")

            self.f.if_else(b.icmp_signed("<", i, ic1), fill, clear)

        self._loop(i64(0), b.mul(npi, i64(mr)), row, "ar")


def lower_rmsnorm(kernel: Kernel, symbol: str, sched: Schedule, lowering, rows: bool = False) -> Lowered:
    """Kernel (with `rmsnorm`) -> LLVM IR text with entry ``void symbol(i8** slots, i64 ub,
    i64 ue)`` over the GEMM's units (see the module docstring). `lowering`: the class
    lowering one kernel into a module (`svod.codegen.lower.KernelLowering`; passed in,
    lower.py dispatches here). `rows` (a rows variant, `svod.codegen.rows`): the row count
    m is read at run time from the slot after the last output; no row past it is read or
    written."""
    k1, k2 = parts(kernel)
    module = ir.Module(name=f"svod_{kernel.name}")
    sched2 = schedule(k2, sched.target)
    if sched2.gemm is not None and sched2.gemm.a_direct:
        # A is normalised while it is packed, never read in place (k2's A is a virtual
        # contiguous operand): the packed tiling, whose units the kernel's schedule counts
        g = sched2.gemm
        sched2 = dataclasses.replace(sched2, gemm=gemm_tiling(g.batch, g.m, g.n, g.k, g.cfg.itemsize, sched.target))
    low = lowering(k2, module, f"{symbol}.g", sched2, rows=rows)
    # the prologue's lowering: its own schedule (row passes, accesses), on the GEMM body
    pro = lowering(k1, module, f"{symbol}.p", schedule(k1, sched.target))
    pro.f.b.ret_void()  # its own (unused) body: empty
    pro.f.finish()
    pro.f = low.f
    pro.in_ptrs = low.in_ptrs[:len(kernel.inputs)]
    groups = [(d,) for d, n in enumerate(k1.shape) if n != 1]
    pro.accesses = {i: make_access(inp.view, groups) for i, inp in enumerate(k1.inputs)}
    pro.per_row = pro.sched.per_row if k1.reduce_axes else per_row_nodes(dataclasses.replace(k1, reduce_axes=(1,)))
    pro.stash = {}
    pro._ax0_range = None
    pro.k = dataclasses.replace(k1, outputs=())  # the passes accumulate; nothing is stored
    gemm = _PrologueGemm(low, pro, kernel.rmsnorm.a)
    gemm.emit()
    low.f.b.ret_void()
    low.f.finish()

    fnty = ir.FunctionType(VOID, [ir.PointerType(ir.PointerType(I8)), I64, I64])
    fn = ir.Function(module, fnty, symbol)
    f = Fn(module, fn)
    b = f.b
    nin = len(kernel.inputs)
    types = [i.dtype for i in kernel.inputs] + [o.dtype for o in kernel.outputs]
    ptrs = [b.bitcast(b.load(b.gep(fn.args[0], [i64(j)])), ir.PointerType(mem_type(t))) for j, t in enumerate(types)]
    a_ptr = ir.Constant(ir.PointerType(mem_type(k2.inputs[-1].dtype)), None)  # never read: A is computed
    extra = [b.ptrtoint(b.load(b.gep(fn.args[0], [i64(len(types))])), I64)] if rows else []
    b.call(low.body_fn, ptrs[:nin] + [a_ptr] + ptrs[nin:] + [fn.args[1], fn.args[2]] + extra)
    b.ret_void()
    f.finish()
    return Lowered(str(module), symbol, sched.loops.units, sched.loops)
