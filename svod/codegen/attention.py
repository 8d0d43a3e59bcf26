"""Native attention kernels: ``softmax(t(q @ kᵀ)) @ v`` a few query rows at a time.

The kernel of an `AttentionSpec` (formed by `svod.fuse_attention`) lowers to::

    unit u = (batch index b, block of MR query rows)
      when b changes (per body call, per thread):
        pack kᵀ[b] into NR-column panels Kp (d × NR each)       # the GEMM's B layout
        pack v[b]  into NR-column panels Vp (n × NR each)
      copy the MR query rows into Qb (rows past m repeat row m-1; never stored)
      S  = Qb @ Kp                 # GEMM micro-kernel, MR × n scores in an L1-sized scratch
      S  = t(S, other inputs)      # the kernel's nodes (scale, mask), when there are any
      mᵣ = max S;  e = exp(S - mᵣ);  lᵣ = Σ e                    (per row, vectorised)
      Ob = e @ Vp                  # GEMM micro-kernel, MR × dv
      out[b, rows] = Ob / l

The (m, n) score matrix never exists in memory; q, k and v are read once per unit block
from L1/L2 (the panels of one batch index are 2·n·d floats, reused by every row block
of it). Both products use `svod.codegen.gemm`'s register-blocked micro-kernel, the
exponential `svod.codegen.vecmath`'s polynomial, the nodes `scalar.emit_op` (numpy
semantics, as in every kernel). Requirements (`svod.fuse_attention` checks them):
float32 operands, single unmasked views (any strides: transposed and broadcast operands
and masks are read through pointer arithmetic); n and dv are padded to whole NR-wide
panels (`tile()`) with zeros, the padded scores with -inf.
Each output element is ``Σ_j e_j·v_j / Σ_j e_j`` with both sums in a fixed order,
independent of threads and tiling.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from svod.codegen.gemm import emit_microkernel
from svod.codegen.irbuild import F32, I1, I8, I32, I64, VOID, Fn, Lowered, func, i64, mem_type, vload, vstore
from svod.codegen.scalar import const, emit_op
from svod.codegen.schedule import LoopPlan, Schedule, gemm_config
from svod.codegen.vecmath import get_math_fn
from svod.ir import Ops
from svod.kernel import ACC, LOAD, Kernel

__all__ = ["lower_attention", "tile"]


def tile() -> tuple[int, int]:
    """(MR, NR): query rows per unit and the panel width n and dv are padded to (the
    attention tile of this host, `gemm_config(4, tall=True)`: 6 x 16 with AVX2, 12 x
    32 with AVX-512, where the GEMM itself uses 6 x 64)."""
    c = gemm_config(4, tall=True)
    return c.mr, c.nr


def lower_attention(kernel: Kernel, symbol: str, sched: Schedule, rows: bool = False) -> Lowered:
    """Kernel (with `attention`) -> LLVM IR text with entry ``void symbol(i8** slots, i64 ub,
    i64 ue)``, over the units of its schedule (the GEMM micro-tile of its target).

    `rows` (a *rows variant*, svod.codegen.rows; no batch axis): the query row count is
    read at run time from one more slot after the output (an integer), so the last block
    of query rows reads and stores rows below it only (the padding rows of a block repeat
    the last real one, as at the compiled count)."""
    at = kernel.attention
    cfg = gemm_config(4, sched.target, tall=True)
    mr, nr, vw = cfg.mr, cfg.nr, cfg.vw
    m, n, d, dv = at.m, at.n, at.d, at.dv
    if kernel.inputs[at.q].dtype.itemsize != 4:
        raise ValueError(f"attention kernel {kernel.name}: needs float32 operands")
    # n and dv rounded up to whole panels: the packed panels are zero past n / dv and the
    # scores past n are -inf (a zero weight), so the edge tiles need no code of their own
    np_, dp = -(-n // nr) * nr, -(-dv // nr) * nr
    if any(len(inp.view.views) != 1 or inp.view.views[0].mask is not None for inp in kernel.inputs):
        raise ValueError(f"attention kernel {kernel.name}: inputs must be single unmasked views")
    views = [inp.view.views[0] for inp in kernel.inputs]
    units = sched.loops.units
    batch_shape = kernel.shape[:-2]
    blocks = -(-m // mr)
    t_node = kernel.outputs[0].node
    scores_only = kernel.nodes[t_node].op == ACC

    module = ir.Module(name=f"svod_{kernel.name}")
    pt = ir.PointerType(F32)
    vt = ir.VectorType(F32, vw)
    nin = len(kernel.inputs)
    in_types = [ir.PointerType(mem_type(i.dtype)) for i in kernel.inputs]
    if rows and batch_shape:
        raise ValueError(f"attention kernel {kernel.name}: a rows variant needs no batch axis")
    body = ir.Function(module, ir.FunctionType(VOID, in_types + [pt, I64, I64] + ([I64] if rows else [])),
                       symbol + ".body")
    body.linkage = "internal"
    for a in body.args[:nin + 1]:
        a.add_attribute("noalias")
    ins, op, ub, ue = list(body.args[:nin]), body.args[nin], body.args[nin + 1], body.args[nin + 2]
    m_rows = body.args[nin + 3] if rows else None  # the run-time query row count (a rows variant)
    qp, kp, vp = (ins[i] for i in at.operands)
    f = Fn(module, body)
    b = f.b
    uk_qk = emit_microkernel(module, symbol + ".uk_qk", F32, cfg, d, 1)
    uk_pv = emit_microkernel(module, symbol + ".uk_pv", F32, cfg, np_, 1)
    exp = get_math_fn(module, "exp", vt)
    maxnum = func(module, f"llvm.maxnum.v{vw}f32", vt, [vt, vt])
    smax = func(module, "llvm.maxnum.f32", F32, [F32, F32])
    i8p = ir.PointerType(I8)

    def loop(start, end, fn, name, step=1):
        """for (i = start; i < end; i += step): `f.loop` over the count."""
        if step == 1:
            f.loop(start, end, fn, name)
        else:
            f.loop(i64(0), b.sdiv(b.sub(end, start), i64(step)), lambda c: fn(b.add(start, b.mul(c, i64(step)))),
                   name)

    def at_(ptr, idx):
        return b.gep(ptr, [idx])

    def lane(k):
        return ir.Constant(I32, k)

    def splat(x):
        one = b.insert_element(ir.Constant(vt, ir.Undefined), x, lane(0))
        return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, vw), [0] * vw))

    cur = f.var(I64, i64(-1), "cur")  # the batch index the panels hold
    lsum = f.alloca(F32, mr, "lsum")
    mx_slot = f.alloca(vt, name="mx")
    sum_slot = f.alloca(vt, name="sum")
    # scratch: Kp | Vp | S | Qb | Ob, each 64-byte aligned
    offs, total = [], 0
    for size in (np_ * d, np_ * dp, mr * np_, mr * d, mr * dp):
        offs.append(total)
        total += -(-size * 4 // 64) * 64
    raw = b.call(func(module, "malloc", i8p, [I64]), [i64(total + 64)])
    f.if_then(b.icmp_unsigned("==", b.ptrtoint(raw, I64), i64(0)),
              lambda: b.call(func(module, "llvm.trap", VOID, []), []))
    base = b.and_(b.add(b.ptrtoint(raw, I64), i64(63)), i64(-64))
    Kp, Vp, S, Qb, Ob = (b.inttoptr(b.add(base, i64(o)), pt) for o in offs)
    if np_ > n or dp > dv:  # the panels' padding: zero once, packing never writes there
        memset = func(module, "llvm.memset.p0.i64", VOID, [i8p, I8, I64, I1])
        b.call(memset, [b.inttoptr(base, i8p), ir.Constant(I8, 0), i64(offs[2]), ir.Constant(I1, 0)])
    null = ir.Constant(pt, None)
    no = ir.Constant(I1, 0)

    def unit(u):
        bi = b.sdiv(u, i64(blocks))
        i0 = b.mul(b.srem(u, i64(blocks)), i64(mr))
        # each input's offset at this batch index (row-major batch index, its own strides)
        offsets = [i64(v.offset) for v in views]
        rem = bi
        for t in range(len(batch_shape) - 1, -1, -1):
            idx = b.srem(rem, i64(batch_shape[t]))
            rem = b.sdiv(rem, i64(batch_shape[t]))
            offsets = [b.add(o, b.mul(idx, i64(v.strides[t]))) for o, v in zip(offsets, views)]
        qoff, koff, voff = (offsets[i] for i in at.operands)
        (sq_m, sq_d), (sk_n, sk_d), (sv_n, sv_c) = (views[i].strides[-2:] for i in at.operands)

        def pack():
            def krow(j):  # kᵀ panels: Kp[(j / NR) · d · NR + kk · NR + j % NR] = k[j, kk]
                dst = b.add(b.mul(b.sdiv(j, i64(nr)), i64(d * nr)), b.srem(j, i64(nr)))
                src = b.add(koff, b.mul(j, i64(sk_n)))
                f.loop(i64(0), i64(d), lambda kk: b.store(
                    b.load(at_(kp, b.add(src, b.mul(kk, i64(sk_d))))),
                    at_(Kp, b.add(dst, b.mul(kk, i64(nr))))), "pk.d")
            f.loop(i64(0), i64(n), krow, "pk.n")

            def vrow(j):  # v panels: Vp[(c / NR) · n · NR + j · NR + c % NR] = v[j, c]
                src = b.add(voff, b.mul(j, i64(sv_n)))
                f.loop(i64(0), i64(dv), lambda c: b.store(
                    b.load(at_(vp, b.add(src, b.mul(c, i64(sv_c))))),
                    at_(Vp, b.add(b.mul(b.add(b.mul(b.sdiv(c, i64(nr)), i64(np_)), j), i64(nr)),
                                  b.srem(c, i64(nr))))), "pv.c")
            f.loop(i64(0), i64(n), vrow, "pv.n")
            b.store(bi, cur)

        f.if_then(b.icmp_signed("!=", b.load(cur), bi), pack)

        def clamp(r):  # the query row of block row r (rows past m repeat the last one)
            row = b.add(i0, r)
            if m_rows is not None:
                return b.select(b.icmp_signed("<", row, m_rows), row, b.sub(m_rows, i64(1)))
            return b.select(b.icmp_signed("<", row, i64(m)), row, i64(m - 1))

        def qrow(r):
            src = b.add(qoff, b.mul(clamp(r), i64(sq_m)))
            f.loop(i64(0), i64(d), lambda kk: b.store(
                b.load(at_(qp, b.add(src, b.mul(kk, i64(sq_d))))), at_(Qb, b.add(b.mul(r, i64(d)), kk))), "q.d")
        f.loop(i64(0), i64(mr), qrow, "q.r")

        # scores: S[r, p·NR : p·NR + NR] for every column panel p
        f.loop(i64(0), i64(np_ // nr), lambda p: b.call(uk_qk, [
            Qb, at_(Kp, b.mul(p, i64(d * nr))), i64(d), null, i64(0), no, at_(S, b.mul(p, i64(nr))), i64(np_)]),
            "qk")

        if not scores_only:  # t = the kernel's nodes over each score (and the other inputs there)
            def trow(r):
                row = clamp(r)
                srow = b.mul(r, i64(np_))

                def tcol(j):
                    vals: list = []
                    for nd in kernel.nodes:
                        if nd.op == ACC:
                            x = b.load(at_(S, b.add(srow, j)))
                        elif nd.op == LOAD:
                            v = views[nd.arg]
                            addr = b.add(b.add(offsets[nd.arg], b.mul(row, i64(v.strides[-2]))),
                                         b.mul(j, i64(v.strides[-1])))
                            x = b.load(at_(ins[nd.arg], addr))
                            if nd.dtype.is_bool:
                                x = b.icmp_unsigned("!=", x, ir.Constant(I8, 0))
                        elif nd.op is Ops.CONST:
                            x = const(nd.dtype, nd.arg)
                        else:
                            x = emit_op(f, nd.op, nd.dtype, nd.arg, [vals[s] for s in nd.src],
                                        [kernel.nodes[s].dtype for s in nd.src])
                        vals.append(x)
                    b.store(vals[t_node], at_(S, b.add(srow, j)))
                f.loop(i64(0), i64(n), tcol, "t.n")
            f.loop(i64(0), i64(mr), trow, "t.r")
        if np_ > n:  # the padded columns weigh nothing
            minf = ir.Constant(F32, -math.inf)
            f.loop(i64(0), i64(mr), lambda r: f.loop(i64(n), i64(np_), lambda j: b.store(
                minf, at_(S, b.add(b.mul(r, i64(np_)), j))), "pad.n"), "pad.r")

        # row softmax numerators in place, and each row's sum
        def srow(r):
            rowp = at_(S, b.mul(r, i64(np_)))
            b.store(ir.Constant(vt, [-math.inf] * vw), mx_slot)
            loop(i64(0), i64(np_), lambda j: b.store(
                b.call(maxnum, [b.load(mx_slot), vload(b, at_(rowp, j), vt, 4)]), mx_slot), "mx", vw)
            mv = b.load(mx_slot)
            mx = b.extract_element(mv, lane(0))
            for k in range(1, vw):
                mx = b.call(smax, [mx, b.extract_element(mv, lane(k))])
            msplat = splat(mx)
            b.store(ir.Constant(vt, [0.0] * vw), sum_slot)

            def pexp(j):
                ptr = at_(rowp, j)
                e = b.call(exp, [b.fsub(vload(b, ptr, vt, 4), msplat)])
                vstore(b, e, ptr, vt, 4)
                b.store(b.fadd(b.load(sum_slot), e), sum_slot)
            loop(i64(0), i64(np_), pexp, "ex", vw)
            sv = b.load(sum_slot)
            tot = b.extract_element(sv, lane(0))
            for k in range(1, vw):
                tot = b.fadd(tot, b.extract_element(sv, lane(k)))
            b.store(tot, at_(lsum, r))
        f.loop(i64(0), i64(mr), srow, "sm.r")

        # Ob = e @ V, then the normalised rows that exist
        f.loop(i64(0), i64(dp // nr), lambda c: b.call(uk_pv, [
            S, at_(Vp, b.mul(c, i64(np_ * nr))), i64(np_), null, i64(0), no, at_(Ob, b.mul(c, i64(nr))),
            i64(dp)]), "pv")
        rows = b.sub(i64(m) if m_rows is None else m_rows, i0)
        rows = b.select(b.icmp_signed("<", rows, i64(mr)), rows, i64(mr))
        obase = b.mul(b.add(b.mul(bi, i64(m)), i0), i64(dv))

        def orow(r):
            lr = b.load(at_(lsum, r))
            if dv % vw == 0:
                lsp = splat(lr)
                loop(i64(0), i64(dv), lambda c: vstore(
                    b, b.fdiv(vload(b, at_(Ob, b.add(b.mul(r, i64(dp)), c)), vt, 4), lsp),
                    at_(op, b.add(obase, b.add(b.mul(r, i64(dv)), c))), vt, 4), "o.c", vw)
            else:
                f.loop(i64(0), i64(dv), lambda c: b.store(
                    b.fdiv(b.load(at_(Ob, b.add(b.mul(r, i64(dp)), c))), lr),
                    at_(op, b.add(obase, b.add(b.mul(r, i64(dv)), c)))), "o.c")
        f.loop(i64(0), rows, orow, "o.r")

    f.loop(ub, ue, unit, "u")
    b.call(func(module, "free", VOID, [i8p]), [raw])
    b.ret_void()
    f.finish()

    fn = ir.Function(module, ir.FunctionType(VOID, [ir.PointerType(i8p), I64, I64]), symbol)
    eb = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs = [eb.bitcast(eb.load(eb.gep(fn.args[0], [i64(j)])), t) for j, t in enumerate(in_types + [pt])]
    extra = [eb.ptrtoint(eb.load(eb.gep(fn.args[0], [i64(nin + 1)])), I64)] if rows else []
    eb.call(body, ptrs + [fn.args[1], fn.args[2]] + extra)
    eb.ret_void()
    return Lowered(str(module), symbol, units, LoopPlan("attention", (), (), (), units))
