"""Generated GEMM: packed panels, a register-blocked micro-kernel, fused epilogues.

A float matmul kernel (`Kernel.matmul`, not `library`) lowers to the Goto/BLIS loop
nest, written into the kernel's body function by `emit_gemm` (called from
`svod/codegen/lower.py`):

    unit u = (batch index, row tile of MT rows, column tile of NT columns)
      for pc in K step KC:                    # K blocks (sizes balanced, ≤ KC)
        for ic in tile rows step MC:          # MC = MT: A packed once per K block
          pack A[ic:ic+mc, pc:pc+kc] → Ap     # rows (A's k contiguous) or MR-row panels, zero-padded;
                                              # read in place: only a partial last panel
          for jc in tile cols step NC:
            pack B[pc:pc+kc, jc:jc+nc] → Bp   # NR-column panels, kc × NR each, zero-padded
            for ir in panels of Ap:           # an MR × kc micro-panel of A
              for jr in panels of Bp:         # Bp (KC × NC, ¾ of L2) streamed past it
              micro-kernel: MR × NR accumulators in vector registers,
              kc rank-1 updates (NV vector loads of B, MR broadcasts of A, MR·NV fmuladds)

A whose k axis is contiguous with a fixed row stride (`GemmPlan.a_direct`, a micro-tile of
at most `DIRECT_A_MAX_ROWS` rows) is not packed: the micro-kernel ``.ukd`` broadcasts its
full MR-row panels straight from A (row stride A's own), only a partial last panel is
packed (rows, at Ap) and runs ``.uk``; the units then split the columns first, so each
column of B is packed once per K block in all.

Partial sums between K blocks live in the kernel's first output of the accumulator
dtype (read back by the next K block), else in a scratch tile. After the last K block the
fused epilogue (bias, activation, residual, scaling: every elementwise node after ACC)
runs once per output element on the micro-tile just computed (a small stack tile, hot in
L1); a kernel whose only output is ACC itself stores the registers straight to C.

Packing reads the operands through their views — pointer arithmetic for one plain
strided view, `KernelLowering._load` for masked or chained views — so transposes and
broadcast batch dims cost nothing extra. Partial tiles (edges) are zero-padded in the
panels and masked on the way out. Ap/Bp (and the
scratch tile) are one `malloc`ed block per body call (per slice of units, per thread),
64-byte aligned and freed at the end.

The sum order of each output element depends on K and KC only — never on the tiling or
the thread count — so results are deterministic.

The blocking (`GemmConfig`: MR × NV vectors, KC, MC, NT, MT, NC) and the unit tiles
(`GemmPlan`) are the schedule's (`svod.codegen.schedule.gemm_config`, `plan_gemm`): the
cost models price the same tiling this code runs.

>>> from svod.codegen.schedule import plan_gemm
>>> from svod.kernel_examples import matmul_bias_gelu_kernel
>>> p = plan_gemm(matmul_bias_gelu_kernel(100, 300, 70))
>>> p.units >= 1, p.kc <= p.cfg.kc, p.nkb * p.kc >= 300
(True, True, True)
"""

from __future__ import annotations

import llvmlite.ir as ir

from svod.codegen.irbuild import I1, I8, I64, VOID, ceil_div, func, i64, imin, matrix_ctx, reg_type, vload, vstore
from svod.codegen.scalar import const, emit_op
from svod.codegen.schedule import Access, Axis, GemmConfig, make_access
from svod.ir import Ops
from svod.kernel import ACC, LOAD, VALID
from svod.view import ViewChain

__all__ = ["C_PREFETCH_STEPS", "emit_gemm", "emit_microkernel"]

# the GEMM's micro-kernel prefetches the C rows it writes this many k steps before the end
# of its k loop (`emit_microkernel`): late enough that the Bp panel streaming through L1
# does not evict them first (64 steps of a 6 x 64 f32 tile stream 16 KiB of Bp), early
# enough for a miss to DRAM to complete under the FMAs left (docs/codegen.md)
C_PREFETCH_STEPS = 64


# ----------------------------------------------------------------------------- IR helpers


def _transpose(b: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The n x n transpose of `n` vectors of n lanes (n a power of two): log2(n) rounds
    of interleaving vector i with vector i + n/2 (low halves, then high halves)."""
    n = len(rows)
    i32 = ir.IntType(32)
    lo = ir.Constant(ir.VectorType(i32, n), [x for i in range(n // 2) for x in (i, i + n)])
    hi = ir.Constant(ir.VectorType(i32, n), [x for i in range(n // 2, n) for x in (i, i + n)])
    v = list(rows)
    for _ in range(n.bit_length() - 1):
        v = [s for i in range(n // 2) for s in (b.shuffle_vector(v[i], v[i + n // 2], lo),
                                                b.shuffle_vector(v[i], v[i + n // 2], hi))]
    return v


def _prefetch_lines(b: ir.IRBuilder, module: ir.Module, row: ir.Value, n: int, itemsize: int, write: bool) -> None:
    """Prefetch every cache line of the `n` elements at `row` into L1 (for writing or
    reading): what a tile row of C, or of an epilogue operand, is about to need."""
    i8p = ir.PointerType(I8)
    i32 = ir.IntType(32)
    prefetch = func(module, "llvm.prefetch.p0", VOID, [i8p, i32, i32, i32])
    for off in sorted(set(range(0, n, max(1, 64 // itemsize))) | {n - 1}):
        b.call(prefetch, [b.bitcast(b.gep(row, [i64(off)]), i8p), ir.Constant(i32, int(write)), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])


def emit_microkernel(module: ir.Module, name: str, ty: ir.Type, cfg: GemmConfig, a_row: int, a_k: int,
                     c_prefetch: int | None = None) -> ir.Function:
    """``void uk(T* ap, T* bp, i64 kc, T* cin, i64 ldin, i1 load, T* cout, i64 ldout)``:
    ``cout[r, :NR] = Σ_p ap[r·a_row + p·a_k] · bp[p·NR : p·NR + NR] (+ cin[r, :NR] if load)``
    for r < MR. The MR × NV accumulator vectors are phis of the k loop (registers); the
    sums of C are added after the loop. The C rows the call writes are prefetched (write
    intent) so their misses overlap the FMAs: at entry (`c_prefetch` None), or
    `c_prefetch` k steps before the end, the k loop then running in two parts — the Bp
    panel streaming through L1 (kc · NR elements) evicts lines prefetched at entry before
    the sums reach them (the GEMM's `C_PREFETCH_STEPS`, docs/codegen.md)."""
    mr, nv, vw = cfg.mr, cfg.nv, cfg.vw
    nr = cfg.nr
    isz = cfg.itemsize
    vt = ir.VectorType(ty, vw)
    pt = ir.PointerType(ty)
    fn = ir.Function(module, ir.FunctionType(VOID, [pt, pt, I64, pt, I64, I1, pt, I64]), name)
    fn.linkage = "internal"
    fn.attributes.add("noinline")  # one copy: the callers differ only in pointers and flags
    ap, bp, kc, cin, ldin, load, cout, ldout = fn.args
    ap.add_attribute("noalias")
    bp.add_attribute("noalias")
    fmuladd = func(module, f"llvm.fmuladd.v{vw}f{8 * isz}", vt, [vt, vt, vt])
    i32 = ir.IntType(32)
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def prefetch_c():  # the C rows this call writes (and reads): into L1 while FMAs run
        for r in range(mr):
            _prefetch_lines(b, module, b.gep(cout, [b.mul(ldout, i64(r))]), nr, isz, write=True)

    zero = ir.Constant(vt, None)
    mask = ir.Constant(ir.VectorType(i32, vw), [0] * vw)

    def kloop(start: ir.Value, end: ir.Value, init: list[ir.Value], tag: str) -> list[ir.Value]:
        """The accumulators after the k steps [start, end) from `init`; `b` continues in
        the block after the loop."""
        pre = b.block
        loop = fn.append_basic_block("loop" + tag)
        after = fn.append_basic_block("done" + tag)
        b.cbranch(b.icmp_signed(">", end, start), loop, after)
        b.position_at_end(loop)
        p = b.phi(I64, "p")
        p.add_incoming(start, pre)
        accs = []
        for x in init:
            ph = b.phi(vt)
            ph.add_incoming(x, pre)
            accs.append(ph)
        acol = b.gep(ap, [b.mul(p, i64(a_k))])
        brow = b.gep(bp, [b.mul(p, i64(nr))])
        # Bp is 64-byte aligned and every vector of it starts at a multiple of the vector size
        bvs = [vload(b, b.gep(brow, [i64(v * vw)]), vt, min(64, vw * isz)) for v in range(nv)]
        new = []
        for r in range(mr):
            s = b.load(b.gep(acol, [i64(r * a_row)]), align=isz)
            sv = b.shuffle_vector(b.insert_element(ir.Constant(vt, ir.Undefined), s, ir.Constant(i32, 0)),
                                  ir.Constant(vt, ir.Undefined), mask)
            for v in range(nv):
                new.append(b.call(fmuladd, [sv, bvs[v], accs[r * nv + v]]))
        p1 = b.add(p, i64(1))
        p.add_incoming(p1, loop)
        for ph, x in zip(accs, new):
            ph.add_incoming(x, loop)
        b.cbranch(b.icmp_signed("<", p1, end), loop, after)
        b.position_at_end(after)
        out = []
        for x0, x in zip(init, new):
            ph = b.phi(vt)
            ph.add_incoming(x0, pre)
            ph.add_incoming(x, loop)
            out.append(ph)
        return out

    if c_prefetch is None:
        prefetch_c()
        sums = kloop(i64(0), kc, [zero] * (mr * nv), "")
    else:
        split = b.sub(kc, i64(c_prefetch))
        split = b.select(b.icmp_signed(">", split, i64(0)), split, i64(0))
        sums = kloop(i64(0), split, [zero] * (mr * nv), "")
        prefetch_c()
        sums = kloop(split, kc, sums, ".tail")
    done = b.block
    addc = fn.append_basic_block("addc")
    store = fn.append_basic_block("store")
    b.cbranch(load, addc, store)
    b.position_at_end(addc)
    added = []
    for r in range(mr):
        row = b.gep(cin, [b.mul(ldin, i64(r))])
        for v in range(nv):
            added.append(b.fadd(sums[r * nv + v], vload(b, b.gep(row, [i64(v * vw)]), vt, isz)))
    b.branch(store)
    b.position_at_end(store)
    outs = []
    for x, y in zip(sums, added):
        ph = b.phi(vt)
        ph.add_incoming(x, done)
        ph.add_incoming(y, addc)
        outs.append(ph)
    for r in range(mr):
        row = b.gep(cout, [b.mul(ldout, i64(r))])
        for v in range(nv):
            vstore(b, outs[r * nv + v], b.gep(row, [i64(v * vw)]), vt, isz)
    b.ret_void()
    return fn


# ----------------------------------------------------------------------------- the loop nest


def emit_gemm(low) -> None:
    """Emit the GEMM loop nest into `low` (a `lower.KernelLowering` of a float matmul)."""
    _Gemm(low).emit()


class _Operand:
    """How one matmul operand, viewed as (batch..., rows, cols), is read: `strides`
    (row, col) when one plain strided view suffices (explicit pointer arithmetic), else
    None (every element through `KernelLowering._load`: masks, view chains)."""

    def __init__(self, gemm: _Gemm, index: int, rows: int, cols: int):
        low = gemm.low
        self.g = gemm
        self.ptr = low.in_ptrs[index]
        view = low.k.inputs[index].view
        self.acc = make_access(view, [(d,) for d, n in enumerate(view.shape) if n != 1])
        self.rows, self.cols = rows, cols
        nb = gemm.nb
        if self.acc.dead or self.acc.steps or self.acc.masks:
            self.strides = None
        else:
            st = dict(self.acc.terms)
            self.strides = (st.get((nb,), 0), st.get((nb + 1,), 0))

    def base(self) -> ir.Value:
        """Element index of (row 0, col 0) of the current batch (simple operands)."""
        addr, _ = self.g.low._address(self.acc, self.g.bctx)
        return addr

    def load(self, row: ir.Value, col: ir.Value) -> ir.Value:
        g = self.g
        b = g.f.b
        if self.strides is not None:
            sr, sc = self.strides
            idx = b.add(self.base_idx, b.add(b.mul(row, i64(sr)), b.mul(col, i64(sc))))
            return b.load(b.gep(self.ptr, [idx]))
        return g.low._load(self.ptr, g.dt, self.acc, matrix_ctx(g.bctx, g.nb, row, col, self.rows, self.cols))


class _Gemm:
    def __init__(self, low):
        self.low = low
        self.k = low.k
        self.f = low.f
        mm = self.k.matmul
        self.mm = mm
        self.dt = self.k.inputs[mm.a].dtype
        self.ty = reg_type(self.dt)
        self.plan = low.sched.gemm  # the tiling (svod/codegen/schedule.py)
        self.cfg = self.plan.cfg
        self.nb = len(self.k.shape) - 2

    # ---- setup
    def emit(self) -> None:
        low, k, f, mm, nb = self.low, self.k, self.f, self.mm, self.nb
        b = f.b
        plan, cfg, ty = self.plan, self.cfg, self.ty
        if plan.units == 0:
            return
        self.A = _Operand(self, mm.a, plan.m, plan.k)
        self.B = _Operand(self, mm.b, plan.k, plan.n)
        kg = [(d,) for d, n in enumerate(k.shape) if n != 1]
        for i, inp in enumerate(k.inputs):
            if i not in (mm.a, mm.b):
                low.accesses[i] = make_access(inp.view, kg)
        self.epi_prefetch = self._epilogue_prefetches()
        # a long epilogue (exp, divide: GELU, SiLU) is a dependency chain per vector: its
        # column loop interleaves vectors as elementwise kernels do (docs/codegen.md)
        self.epi_hints = low._ilp_hints()
        for i, n in enumerate(k.nodes):
            if n.op == VALID:
                low.valid_access[i] = make_access(n.arg, kg)
        for _ in k.outputs:
            low.out_access.append(make_access(ViewChain.of(k.shape), kg))
        self.batch_axes = tuple(Axis((d,), k.shape[d], False) for d in range(nb) if k.shape[d] != 1)
        self.acc_nodes = [i for i, n in enumerate(k.nodes) if n.op == ACC]
        self.consts = {i: emit_op(f, n.op, n.dtype, n.arg, [], []) for i, n in enumerate(k.nodes)
                       if n.op is Ops.CONST}
        outs = k.outputs
        self.plain = len(outs) == 1 and outs[0].node in self.acc_nodes and outs[0].dtype == self.dt
        # partial sums between K blocks: the first output of the accumulator dtype, else scratch
        self.pout = next((j for j, o in enumerate(outs) if o.dtype == self.dt), None)
        need_scratch_c = plan.nkb > 1 and self.pout is None
        # A packed as row-major rows (row stride KC) when its k axis is contiguous: a copy
        # of row segments; otherwise as MR-row panels, element (p, r) at p·MR + r. Read in
        # place (`plan.a_direct`): full MR-row panels straight from A (row stride A's), only
        # a partial last panel packed as rows, at Ap
        self.a_rows = self.A.strides is not None and self.A.strides[1] == 1 and plan.m > 1
        self.a_direct = plan.a_direct and self.a_rows
        kcs = max(plan.kc, 1)
        a_row, a_k = (kcs, 1) if self.a_rows else (1, cfg.mr)
        # a static row count that is a multiple of MR has no partial panel: no packed kernel
        self.a_edges = not self.a_direct or getattr(low, "rows_m", None) is not None or plan.m % cfg.mr != 0
        self.uk = emit_microkernel(low.module, low.symbol + ".uk", ty, cfg, a_row, a_k, C_PREFETCH_STEPS) \
            if self.a_edges else None
        self.uk_direct = emit_microkernel(low.module, low.symbol + ".ukd", ty, cfg, self.A.strides[0], 1,
                                          C_PREFETCH_STEPS) if self.a_direct else None

        isz = cfg.itemsize
        self.nc = min(cfg.nc, plan.nt) if cfg.nc else plan.nt
        ap_elems = (cfg.mr if self.a_direct else plan.mc) * kcs
        bp_elems = self.nc * kcs
        cs_elems = plan.mt * plan.nt if need_scratch_c else 0
        ap_bytes = -(-ap_elems * isz // 64) * 64
        bp_bytes = -(-bp_elems * isz // 64) * 64
        total = ap_bytes + bp_bytes + cs_elems * isz + 64
        i8p = ir.PointerType(I8)
        malloc = func(low.module, "malloc", i8p, [I64])
        free = func(low.module, "free", VOID, [i8p])
        raw = b.call(malloc, [i64(total)])
        # NOTE: no memory for the panels: stop here (SIGILL) rather than return garbage
        f.if_then(b.icmp_unsigned("==", b.ptrtoint(raw, I64), i64(0)),
                  lambda: b.call(func(low.module, "llvm.trap", VOID, []), []))
        addr = b.and_(b.add(b.ptrtoint(raw, I64), i64(63)), i64(-64))
        pt = ir.PointerType(ty)
        self.Ap = b.inttoptr(addr, pt)
        self.Bp = b.inttoptr(b.add(addr, i64(ap_bytes)), pt)
        self.Cs = b.inttoptr(b.add(addr, i64(ap_bytes + bp_bytes)), pt) if need_scratch_c else None
        self.ct = f.alloca(ty, cfg.mr * cfg.nr, "ctile")
        self.ct.align = 64
        self._loop(low.ub, low.ue, self._unit, "u")
        b.call(free, [raw])

    # ---- one unit: a (batch, row tile, column tile) block of C
    def _unit(self, u: ir.Value) -> None:
        b, plan = self.f.b, self.plan
        per_batch = plan.tiles_m * plan.tiles_n
        bu = b.udiv(u, i64(per_batch))
        t = b.urem(u, i64(per_batch))
        ti = b.udiv(t, i64(plan.tiles_n))
        tj = b.urem(t, i64(plan.tiles_n))
        self.bctx = self.low._unravel(bu, self.batch_axes) if self.batch_axes else {}
        for op in (self.A, self.B):
            if op.strides is not None:
                op.base_idx = op.base()
        self.cbase = b.mul(bu, i64(plan.m * plan.n))  # element offset of this batch's C
        self.i0 = b.mul(ti, i64(plan.mt))
        # a rows variant (svod.codegen.rows) reads its row count at run time: no row past it
        m = i64(plan.m) if getattr(self.low, "rows_m", None) is None else self.low.rows_m
        self.i1 = imin(b, b.add(self.i0, i64(plan.mt)), m)
        self.j0 = b.mul(tj, i64(plan.nt))
        self.j1 = imin(b, b.add(self.j0, i64(plan.nt)), i64(plan.n))
        self._loop(i64(0), i64(plan.nkb), self._kblock, "kb")

    def _kblock(self, kb: ir.Value) -> None:
        b, plan, cfg = self.f.b, self.plan, self.cfg
        self.pc = b.mul(kb, i64(plan.kc))
        self.kc = imin(b, i64(plan.kc), b.sub(i64(plan.k), self.pc))
        self.first = b.icmp_signed("==", kb, i64(0))
        self.last = b.icmp_signed("==", kb, i64(plan.nkb - 1))
        nic = ceil_div(b, b.sub(self.i1, self.i0), plan.mc)
        nc = self.nc

        def iblock(q):
            ic = b.add(self.i0, b.mul(q, i64(plan.mc)))
            ic1 = imin(b, b.add(ic, i64(plan.mc)), self.i1)
            self._pack_a(ic, ic1)
            npi = ceil_div(b, b.sub(ic1, ic), cfg.mr)

            def jblock(qc):  # NC columns of B packed (L2), swept by every Ap row panel
                self.jb0 = b.add(self.j0, b.mul(qc, i64(nc)))
                self.jb1 = imin(b, b.add(self.jb0, i64(nc)), self.j1)
                self._pack_b()
                npj = ceil_div(b, b.sub(self.jb1, self.jb0), cfg.nr)

                # an Ap micro-panel (MR x kc) stays in L1 while the Bp panels stream from
                # L2 past it; each C row segment is written left to right (docs/codegen.md)
                def ipanel(qi):
                    self._loop(i64(0), npj, lambda qj: self._tile(ic, ic1, qi, qj), "jr")

                self._loop(i64(0), npi, ipanel, "ir")

            self._loop(i64(0), ceil_div(b, b.sub(self.j1, self.j0), nc), jblock, "jc")

        self._loop(i64(0), nic, iblock, "ic")

    # ---- packing
    def _pack_b(self) -> None:
        """Bp panel q (columns jb0 + q·NR ... of the NC block [jb0, jb1)) at Bp + q·kc·NR,
        element (p, c) at p·NR + c."""
        f, b, cfg = self.f, self.f.b, self.cfg
        nr, vw, isz = cfg.nr, cfg.vw, cfg.itemsize
        B = self.B
        kc = self.kc
        zero = const(self.dt, 0)
        vt = ir.VectorType(self.ty, vw)
        width = b.sub(self.jb1, self.jb0)
        nfull = b.sdiv(width, i64(nr))
        npj = ceil_div(b, width, nr)
        panel_elems = b.mul(kc, i64(nr))

        def put(q, p, c):
            jq = b.add(self.jb0, b.mul(q, i64(nr)))
            dst = b.gep(self.Bp, [b.add(b.mul(q, panel_elems), b.add(b.mul(p, i64(nr)), c))])
            b.store(B.load(b.add(self.pc, p), b.add(jq, c)), dst)

        if B.strides is not None and B.strides[1] == 1:
            # rows of B are contiguous: per k, one sequential sweep over the tile's columns
            def row(p):
                src = b.gep(B.ptr, [b.add(B.base_idx, b.add(b.mul(b.add(self.pc, p), i64(B.strides[0])), self.jb0))])

                def panel(q):
                    s = b.gep(src, [b.mul(q, i64(nr))])
                    d = b.gep(self.Bp, [b.add(b.mul(q, panel_elems), b.mul(p, i64(nr)))])
                    for v in range(cfg.nv):
                        vstore(b, vload(b, b.gep(s, [i64(v * vw)]), vt, isz), b.gep(d, [i64(v * vw)]), vt,
                                min(64, vw * isz))

                self._loop(i64(0), nfull, panel, "bq")

            self._loop(i64(0), kc, row, "p")
        elif B.strides is not None and B.strides[0] == 1:
            self._pack_b_transposed(nfull, panel_elems, put)
        else:
            self._loop(i64(0), nfull, lambda q: self._loop(i64(0), kc, lambda p: self._loop(
                i64(0), i64(nr), lambda c: put(q, p, c), "c"), "p"), "bq")

        def edge():  # the last, partial panel: zero-padded
            cols = b.sub(width, b.mul(nfull, i64(nr)))

            def elem(p, c):
                dst = b.gep(self.Bp, [b.add(b.mul(nfull, panel_elems), b.add(b.mul(p, i64(nr)), c))])
                b.store(zero, dst)
                f.if_then(b.icmp_signed("<", c, cols), lambda: put(nfull, p, c))

            self._loop(i64(0), kc, lambda p: self._loop(i64(0), i64(nr), lambda c: elem(p, c), "c"), "p")

        f.if_then(b.icmp_signed("<", nfull, npj), edge)

    def _pack_b_transposed(self, nfull: ir.Value, panel_elems: ir.Value, put) -> None:
        """Full Bp panels of a B whose k axis is contiguous (``x @ w.T``): per VW x VW
        block, VW vector loads along k (one per column), an in-register transpose, VW
        aligned vector stores of panel rows; the last kc % VW rows element by element
        (docs/codegen.md: what it saves)."""
        b, cfg, B = self.f.b, self.cfg, self.B
        vw, nr, isz = cfg.vw, cfg.nr, cfg.itemsize
        vt = ir.VectorType(self.ty, vw)
        nblk = b.sdiv(self.kc, i64(vw))

        def panel(q):
            jq = b.add(self.jb0, b.mul(q, i64(nr)))
            dst = b.gep(self.Bp, [b.mul(q, panel_elems)])

            def block(pb):
                p0 = b.mul(pb, i64(vw))
                k0 = b.add(B.base_idx, b.add(self.pc, p0))
                for v in range(cfg.nv):
                    cols = [vload(b, b.gep(B.ptr, [b.add(k0, b.mul(b.add(jq, i64(v * vw + i)), i64(B.strides[1])))]),
                                   vt, isz) for i in range(vw)]
                    for pp, row in enumerate(_transpose(b, cols)):
                        d = b.gep(dst, [b.add(b.mul(b.add(p0, i64(pp)), i64(nr)), i64(v * vw))])
                        vstore(b, row, d, vt, min(64, vw * isz))

            self._loop(i64(0), nblk, block, "pb")
            self._loop(b.mul(nblk, i64(vw)), self.kc,
                       lambda p: self._loop(i64(0), i64(nr), lambda c: put(q, p, c), "c"), "pt")

        self._loop(i64(0), nfull, panel, "bq")

    def _pack_a(self, ic: ir.Value, ic1: ir.Value) -> None:
        """Rows mode: row r of the block at Ap + r·KC (rows past the block zeroed up to a
        multiple of MR); read in place, only the rows of a partial last panel, from Ap.
        Panels mode: panel q (rows ic + q·MR ...) at Ap + q·kc·MR, element (p, r) at
        p·MR + r."""
        f, b, cfg, plan = self.f, self.f.b, self.cfg, self.plan
        mr = cfg.mr
        A = self.A
        kc = self.kc
        zero = const(self.dt, 0)
        npi = ceil_div(b, b.sub(ic1, ic), mr)
        if self.a_rows:
            kcs = max(plan.kc, 1)
            # read in place: only the rows of a partial last panel, at Ap
            first = b.mul(b.sdiv(b.sub(ic1, ic), i64(mr)), i64(mr)) if self.a_direct else i64(0)

            def row(r):
                i = b.add(ic, r)
                dst = b.gep(self.Ap, [b.mul(b.sub(r, first), i64(kcs))])

                def copy():
                    src = b.gep(A.ptr, [b.add(A.base_idx, b.add(b.mul(i, i64(A.strides[0])), self.pc))])
                    self._loop(i64(0), kc, lambda p: b.store(b.load(b.gep(src, [p])), b.gep(dst, [p])), "p")

                def clear():
                    self._loop(i64(0), kc, lambda p: b.store(zero, b.gep(dst, [p])), "p")

                self.f.if_else(b.icmp_signed("<", i, ic1), copy, clear)

            self._loop(first, b.mul(npi, i64(mr)), row, "ar")
            return

        def panel(q):
            iq = b.add(ic, b.mul(q, i64(mr)))
            rows = imin(b, i64(mr), b.sub(ic1, iq))
            base = b.gep(self.Ap, [b.mul(q, b.mul(kc, i64(mr)))])

            def full():
                def put(p, r):
                    b.store(A.load(b.add(iq, r), b.add(self.pc, p)), b.gep(base, [b.add(b.mul(p, i64(mr)), r)]))
                self._loop(i64(0), kc, lambda p: self._loop(i64(0), i64(mr), lambda r: put(p, r), "r"), "p")

            def edge():
                def put(p, r):
                    dst = b.gep(base, [b.add(b.mul(p, i64(mr)), r)])
                    b.store(zero, dst)
                    f.if_then(b.icmp_signed("<", r, rows),
                              lambda: b.store(A.load(b.add(iq, r), b.add(self.pc, p)), dst))
                self._loop(i64(0), kc, lambda p: self._loop(i64(0), i64(mr), lambda r: put(p, r), "r"), "p")

            self.f.if_else(b.icmp_signed("==", rows, i64(mr)), full, edge)

        self._loop(i64(0), npi, panel, "aq")

    def _loop(self, start: ir.Value, end: ir.Value, body, name: str, unroll: bool = False,
              hints: tuple = ()) -> None:
        """`_Fn.loop` whose latch carries ``llvm.loop.unroll.disable`` unless `unroll`:
        runtime unrolling of the many packing/tile/edge loops costs compile time and buys
        no speed (docs/codegen.md); `hints`: more ``llvm.loop`` hints."""
        self.f.loop(start, end, body, name, hints=hints if unroll else (("llvm.loop.unroll.disable", None),) + hints)

    # ---- one micro-tile
    def _epilogue_prefetches(self) -> list[tuple[int, Access, int]]:
        """(input, access, column stride) of the epilogue operands worth prefetching: read
        by a LOAD, changing along the rows (a row bias stays hot in L1 after the first
        tile) and contiguous or constant along the columns (one or two cache lines a row,
        not one per element). Their tile rows are read once per output tile, cold, after
        the k loop: without a prefetch each row is a cache miss nothing overlaps
        (docs/codegen.md)."""
        k, nb, low = self.k, self.nb, self.low
        loaded = {n.arg for n in k.nodes if n.op == LOAD}
        out = []
        for i in sorted(loaded):
            acc = low.accesses.get(i)
            if acc is None or acc.dead or acc.steps or acc.masks:
                continue
            st = dict(acc.terms)
            rows, cols = st.get((nb,), 0), st.get((nb + 1,), 0)
            if rows and cols in (0, 1) and self.mm.m > 1:
                out.append((i, acc, cols))
        return out

    def _prefetch_epilogue(self, i: ir.Value, j: ir.Value) -> None:
        """Prefetch the MR rows of the tile at (i, j) of every `epi_prefetch` operand, so
        their misses overlap the micro-kernel's FMAs (as the C rows' do). Rows past the
        matrix are harmless: a prefetch never faults."""
        b, cfg, nb = self.f.b, self.cfg, self.nb
        for idx, acc, cols in self.epi_prefetch:
            for r in range(cfg.mr):
                ctx = dict(self.bctx)
                ctx[(nb,)] = b.add(i, i64(r))
                ctx[(nb + 1,)] = j
                addr, _ = self.low._address(acc, ctx)
                # a per-row operand (constant along the columns) is one element a row
                _prefetch_lines(b, self.low.module, b.gep(self.low.in_ptrs[idx], [addr]), cfg.nr if cols else 1,
                                self.k.inputs[idx].dtype.itemsize, write=False)

    def _partial(self, i: ir.Value, j: ir.Value) -> tuple[ir.Value, ir.Value]:
        """(pointer to the partial sum of C[i, j], its row stride)."""
        b, plan = self.f.b, self.plan
        if self.Cs is not None:
            idx = b.add(b.mul(b.sub(i, self.i0), i64(plan.nt)), b.sub(j, self.j0))
            return b.gep(self.Cs, [idx]), i64(plan.nt)
        idx = b.add(self.cbase, b.add(b.mul(i, i64(plan.n)), j))
        return b.gep(self.low.out_ptrs[self.pout], [idx]), i64(plan.n)

    def _tile(self, ic: ir.Value, ic1: ir.Value, qi: ir.Value, qj: ir.Value) -> None:
        f, b, cfg, plan = self.f, self.f.b, self.cfg, self.plan
        mr, nr = cfg.mr, cfg.nr
        i = b.add(ic, b.mul(qi, i64(mr)))
        j = b.add(self.jb0, b.mul(qj, i64(nr)))
        rows = imin(b, i64(mr), b.sub(ic1, i))
        cols = imin(b, i64(nr), b.sub(self.jb1, j))
        a_step = mr * max(plan.kc, 1) if self.a_rows else None
        if self.a_direct:  # a partial panel is the only one packed
            ap = self.Ap
        else:
            ap = b.gep(self.Ap, [b.mul(qi, i64(a_step) if a_step else b.mul(self.kc, i64(mr)))])
        bp = b.gep(self.Bp, [b.mul(qj, b.mul(self.kc, i64(nr)))])
        not_first = b.xor(self.first, ir.Constant(I1, 1))
        uk = self._kernel_call(i, rows)
        full = b.and_(b.icmp_signed("==", rows, i64(mr)), b.icmp_signed("==", cols, i64(nr)))
        ps, ldp = self._partial(i, j) if (self.Cs is not None or self.pout is not None) else (None, None)
        ct, ldt = self.ct, i64(nr)
        no = ir.Constant(I1, 0)
        if self.epi_prefetch and not self.plain:  # only the last K block runs the epilogue
            if ps is None:
                self._prefetch_epilogue(i, j)
            else:
                self.f.if_then(self.last, lambda: self._prefetch_epilogue(i, j))

        def full_tile():
            if ps is None:  # one K block, no partial sums: the tile goes to ct, then the epilogue
                uk([ap, bp, self.kc, ct, ldt, no, ct, ldt])
                self._epilogue(i, j, i64(mr), i64(nr))
                return

            def last():
                if self.plain:
                    uk([ap, bp, self.kc, ps, ldp, not_first, ps, ldp])
                else:
                    uk([ap, bp, self.kc, ps, ldp, not_first, ct, ldt])
                    self._epilogue(i, j, i64(mr), i64(nr))

            self.f.if_else(self.last, last, lambda: uk([ap, bp, self.kc, ps, ldp, not_first, ps, ldp]))

        def edge_tile():
            if ps is not None:
                f.if_then(not_first, lambda: self._copy(ps, ldp, ct, ldt, rows, cols))
            uk([ap, bp, self.kc, ct, ldt, no if ps is None else not_first, ct, ldt])
            if ps is None:
                self._epilogue(i, j, rows, cols)
                return
            self.f.if_else(self.last, lambda: self._epilogue(i, j, rows, cols),
                          lambda: self._copy(ct, ldt, ps, ldp, rows, cols))

        self.f.if_else(full, full_tile, edge_tile)

    def _kernel_call(self, i: ir.Value, rows: ir.Value):
        """``call(args)``: the micro-kernel call of the tile at row `i` (`rows` valid rows),
        `args` those of ``uk`` with the packed Ap panel first. Read in place, a full panel
        calls ``ukd`` on A's own rows (row i, column pc), a partial one ``uk`` on Ap."""
        b = self.f.b
        if not self.a_direct:
            return lambda args: b.call(self.uk, args)
        A = self.A
        direct = b.gep(A.ptr, [b.add(A.base_idx, b.add(b.mul(i, i64(A.strides[0])), self.pc))])
        if not self.a_edges:
            return lambda args: b.call(self.uk_direct, [direct] + args[1:])
        full = b.icmp_signed("==", rows, i64(self.cfg.mr))
        return lambda args: self.f.if_else(full, lambda: b.call(self.uk_direct, [direct] + args[1:]),
                                           lambda: b.call(self.uk, args))

    def _copy(self, src, lds, dst, ldd, rows, cols) -> None:
        b = self.f.b

        def row(r):
            s, d = b.gep(src, [b.mul(r, lds)]), b.gep(dst, [b.mul(r, ldd)])
            self._loop(i64(0), cols, lambda c: b.store(b.load(b.gep(s, [c])), b.gep(d, [c])), "cc")

        self._loop(i64(0), rows, row, "cr")

    def _epilogue(self, i, j, rows, cols) -> None:
        """The fused epilogue on the micro-tile in ct: once per output element."""
        low, k, b, nb = self.low, self.k, self.f.b, self.nb
        nr = self.cfg.nr
        outs = [o.node for o in k.outputs]

        def element(r, c):
            ctx = dict(self.bctx)
            if self.mm.m != 1:
                ctx[(nb,)] = b.add(i, r)
            if self.mm.n != 1:
                ctx[(nb + 1,)] = b.add(j, c)
            env = dict(self.consts)
            acc = b.load(b.gep(self.ct, [b.add(b.mul(r, i64(nr)), c)]))
            for a in self.acc_nodes:
                env[a] = acc
            low._eval(outs, env, ctx)
            for jj, o in enumerate(k.outputs):
                low._store(low.out_ptrs[jj], o.dtype, low.out_access[jj], ctx, env[o.node])

        self._loop(i64(0), rows, lambda r: self._loop(i64(0), cols, lambda c: element(r, c), "ec",
                                                       hints=self.epi_hints), "er")
