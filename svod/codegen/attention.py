"""Native attention kernels: ``softmax(scale · q @ kᵀ) @ v`` a few query rows at a time.

The kernel of an `AttentionSpec` (formed by `svod.fuse_attention`) lowers to::

    unit u = (batch index b, block of MR query rows)
      when b changes (per body call, per thread):
        pack kᵀ[b] into NR-column panels Kp (d × NR each)       # the GEMM's B layout
        pack v[b]  into NR-column panels Vp (n × NR each)
      copy the MR query rows into Qb (rows past m repeat row m-1; never stored)
      S  = Qb @ Kp                 # GEMM micro-kernel, MR × n scores in an L1-sized scratch
      t  = S · scale; mᵣ = max t;  e = exp(t - mᵣ);  lᵣ = Σ e    (per row, vectorised)
      Ob = e @ Vp                  # GEMM micro-kernel, MR × dv
      out[b, rows] = Ob / l

The (m, n) score matrix never exists in memory; q, k and v are read once per unit block
from L1/L2 (the panels of one batch index are 2·n·d floats, reused by every row block
of it). Both products use `svod.codegen.gemm`'s register-blocked micro-kernel, the
exponential `svod.codegen.vecmath`'s polynomial. Requirements (`svod.fuse_attention`
checks them): float32, single unmasked operand views (any strides: transposed and
broadcast operands are read through pointer arithmetic while packing), n and dv
multiples of NR (`tile()`). Each output element is ``Σ_j e_j·v_j / Σ_j e_j`` with both sums in a
fixed order, independent of threads and tiling.
"""

from __future__ import annotations

import functools
import math

import llvmlite.ir as ir

from svod.codegen.gemm import _func, _vload, _vstore, emit_microkernel, gemm_config
from svod.codegen.lower import F32, I1, I8, I64, VOID, LoopPlan, Lowered, _i64
from svod.codegen.vecmath import get_math_fn
from svod.kernel import Kernel

__all__ = ["attention_units", "lower_attention", "tile"]


@functools.cache
def _cfg():
    return gemm_config(4)


def tile() -> tuple[int, int]:
    """(MR, NR): query rows per unit and the column width n and dv must be multiples of
    (the GEMM micro-tile of this host: 6 x 16 with AVX2, 12 x 32 with AVX-512)."""
    c = _cfg()
    return c.mr, c.nr


def attention_units(kernel: Kernel) -> int:
    at = kernel.attention
    batch = math.prod(kernel.shape[:-2])
    return batch * -(-at.m // _cfg().mr) if kernel.size else 0


class _Loops:
    def __init__(self, fn: ir.Function, b: ir.IRBuilder):
        self.fn, self.b = fn, b

    def loop(self, start, end, body, name: str, step: int = 1) -> None:
        b = self.b
        pre = b.block
        head = self.fn.append_basic_block(name + ".head")
        blk = self.fn.append_basic_block(name + ".body")
        out = self.fn.append_basic_block(name + ".end")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name)
        i.add_incoming(start, pre)
        b.cbranch(b.icmp_signed("<", i, end), blk, out)
        b.position_at_end(blk)
        body(i)
        i.add_incoming(b.add(i, _i64(step)), b.block)
        b.branch(head)
        b.position_at_end(out)

    def if_then(self, cond, then, name: str) -> None:
        b = self.b
        blk = self.fn.append_basic_block(name + ".then")
        out = self.fn.append_basic_block(name + ".end")
        b.cbranch(cond, blk, out)
        b.position_at_end(blk)
        then()
        b.branch(out)
        b.position_at_end(out)


def lower_attention(kernel: Kernel, symbol: str) -> Lowered:
    """Kernel (with `attention`) -> LLVM IR text with entry ``void symbol(i8** slots, i64 ub, i64 ue)``."""
    at = kernel.attention
    cfg = _cfg()
    mr, nr, vw = cfg.mr, cfg.nr, cfg.vw
    m, n, d, dv = at.m, at.n, at.d, at.dv
    if n % nr or dv % nr or kernel.inputs[0].dtype.itemsize != 4:
        raise ValueError(f"attention kernel {kernel.name}: needs float32 and n, dv multiples of {nr}")
    views = [kernel.inputs[i].view.views[0] for i in (at.q, at.k, at.v)]
    if any(len(inp.view.views) != 1 or inp.view.views[0].mask is not None for inp in kernel.inputs):
        raise ValueError(f"attention kernel {kernel.name}: operands must be single unmasked views")
    units = attention_units(kernel)
    batch_shape = kernel.shape[:-2]
    blocks = -(-m // mr)

    module = ir.Module(name=f"svod_{kernel.name}")
    pt = ir.PointerType(F32)
    vt = ir.VectorType(F32, vw)
    body = ir.Function(module, ir.FunctionType(VOID, [pt, pt, pt, pt, I64, I64]), symbol + ".body")
    body.linkage = "internal"
    for a in body.args[:4]:
        a.add_attribute("noalias")
    qp, kp, vp, op, ub, ue = body.args
    b = ir.IRBuilder(body.append_basic_block("entry"))
    L = _Loops(body, b)
    uk_qk = emit_microkernel(module, symbol + ".uk_qk", F32, cfg, d, 1)
    uk_pv = emit_microkernel(module, symbol + ".uk_pv", F32, cfg, n, 1)
    exp = get_math_fn(module, "exp", vt)
    maxnum = _func(module, f"llvm.maxnum.v{vw}f32", vt, [vt, vt])
    smax = _func(module, "llvm.maxnum.f32", F32, [F32, F32])
    i8p = ir.PointerType(I8)

    # stack slots first, in the entry block (mem2reg makes the loop-carried ones registers)
    cur = b.alloca(I64, name="cur")  # the batch index the panels hold
    lsum = b.alloca(F32, mr, name="lsum")
    mx_slot = b.alloca(vt, name="mx")
    sum_slot = b.alloca(vt, name="sum")
    # scratch: Kp | Vp | S | Qb | Ob, each 64-byte aligned
    sizes = [n * d, n * dv, mr * n, mr * d, mr * dv]
    offs, total = [], 0
    for s in sizes:
        offs.append(total)
        total += -(-s * 4 // 64) * 64
    raw = b.call(_func(module, "malloc", i8p, [I64]), [_i64(total + 64)])
    L.if_then(b.icmp_unsigned("==", b.ptrtoint(raw, I64), _i64(0)),
              lambda: b.call(_func(module, "llvm.trap", VOID, []), []), "oom")
    base = b.and_(b.add(b.ptrtoint(raw, I64), _i64(63)), _i64(-64))
    Kp, Vp, S, Qb, Ob = (b.inttoptr(b.add(base, _i64(o)), pt) for o in offs)
    b.store(_i64(-1), cur)
    i32 = ir.IntType(32)

    def _lane(k):
        return ir.Constant(i32, k)

    def _splat(x):
        one = b.insert_element(ir.Constant(vt, ir.Undefined), x, _lane(0))
        return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(i32, vw), [0] * vw))

    def _splat_c(c):
        return ir.Constant(vt, [c] * vw)
    null = ir.Constant(pt, None)
    no = ir.Constant(I1, 0)
    zero_v = ir.Constant(vt, [0.0] * vw)

    def at_(ptr, idx):
        return b.gep(ptr, [idx])

    def unit(u):
        bi = b.sdiv(u, _i64(blocks))
        i0 = b.mul(b.srem(u, _i64(blocks)), _i64(mr))
        # batch offsets of q, k, v (row-major batch index, each operand's own strides)
        offsets = [_i64(v.offset) for v in views]
        rem = bi
        for t in range(len(batch_shape) - 1, -1, -1):
            idx = b.srem(rem, _i64(batch_shape[t]))
            rem = b.sdiv(rem, _i64(batch_shape[t]))
            offsets = [b.add(o, b.mul(idx, _i64(v.strides[t]))) for o, v in zip(offsets, views)]
        qoff, koff, voff = offsets
        (_, sq_m, sq_d), (_, sk_n, sk_d), (_, sv_n, sv_c) = ((None,) + v.strides[-2:] for v in views)

        def pack():
            def krow(j):
                panel = b.mul(b.sdiv(j, _i64(nr)), _i64(d * nr))
                col = b.srem(j, _i64(nr))
                src = b.add(koff, b.mul(j, _i64(sk_n)))

                def kcol(kk):
                    x = b.load(at_(kp, b.add(src, b.mul(kk, _i64(sk_d)))))
                    b.store(x, at_(Kp, b.add(panel, b.add(b.mul(kk, _i64(nr)), col))))
                L.loop(_i64(0), _i64(d), kcol, "pk.d")
            L.loop(_i64(0), _i64(n), krow, "pk.n")

            def vrow(j):
                src = b.add(voff, b.mul(j, _i64(sv_n)))

                def vcol(c):
                    x = b.load(at_(vp, b.add(src, b.mul(c, _i64(sv_c)))))
                    dst = b.add(b.mul(b.add(b.mul(b.sdiv(c, _i64(nr)), _i64(n)), j), _i64(nr)), b.srem(c, _i64(nr)))
                    b.store(x, at_(Vp, dst))
                L.loop(_i64(0), _i64(dv), vcol, "pv.c")
            L.loop(_i64(0), _i64(n), vrow, "pv.n")
            b.store(bi, cur)

        L.if_then(b.icmp_signed("!=", b.load(cur), bi), pack, "repack")

        # the query rows of this block (rows past m repeat the last one; never stored)
        def qrow(r):
            row = b.add(i0, r)
            row = b.select(b.icmp_signed("<", row, _i64(m)), row, _i64(m - 1))
            src = b.add(qoff, b.mul(row, _i64(sq_m)))

            def qcol(kk):
                x = b.load(at_(qp, b.add(src, b.mul(kk, _i64(sq_d)))))
                b.store(x, at_(Qb, b.add(b.mul(r, _i64(d)), kk)))
            L.loop(_i64(0), _i64(d), qcol, "q.d")
        L.loop(_i64(0), _i64(mr), qrow, "q.r")

        # scores: S[r, p·NR : p·NR + NR] for every column panel p
        L.loop(_i64(0), _i64(n // nr), lambda p: b.call(uk_qk, [
            Qb, at_(Kp, b.mul(p, _i64(d * nr))), _i64(d), null, _i64(0), no, at_(S, b.mul(p, _i64(nr))), _i64(n)]),
            "qk")

        # row softmax numerators in place, and each row's sum
        def srow(r):
            rowp = at_(S, b.mul(r, _i64(n)))
            b.store(ir.Constant(vt, [-math.inf] * vw), mx_slot)

            def pmax(j):  # t = S * scale (stored back), running vector max
                ptr = at_(rowp, j)
                x = _vload(b, ptr, vt, 4)
                if at.scale != 1.0:
                    x = b.fmul(x, _splat_c(at.scale))
                    _vstore(b, x, ptr, vt, 4)
                b.store(b.call(maxnum, [b.load(mx_slot), x]), mx_slot)
            L.loop(_i64(0), _i64(n), pmax, "mx", step=vw)
            mv = b.load(mx_slot)
            mx = b.extract_element(mv, _lane(0))
            for lane in range(1, vw):
                mx = b.call(smax, [mx, b.extract_element(mv, _lane(lane))])
            msplat = _splat(mx)
            b.store(zero_v, sum_slot)

            def pexp(j):  # e = exp(t - max), stored back, running vector sum
                ptr = at_(rowp, j)
                e = b.call(exp, [b.fsub(_vload(b, ptr, vt, 4), msplat)])
                _vstore(b, e, ptr, vt, 4)
                b.store(b.fadd(b.load(sum_slot), e), sum_slot)
            L.loop(_i64(0), _i64(n), pexp, "ex", step=vw)
            sv = b.load(sum_slot)
            tot = b.extract_element(sv, _lane(0))
            for lane in range(1, vw):
                tot = b.fadd(tot, b.extract_element(sv, _lane(lane)))
            b.store(tot, at_(lsum, r))
        L.loop(_i64(0), _i64(mr), srow, "sm.r")

        # Ob = e @ V, then the normalised rows that exist
        L.loop(_i64(0), _i64(dv // nr), lambda c: b.call(uk_pv, [
            S, at_(Vp, b.mul(c, _i64(n * nr))), _i64(n), null, _i64(0), no, at_(Ob, b.mul(c, _i64(nr))), _i64(dv)]),
            "pv")
        rows = b.sub(_i64(m), i0)
        rows = b.select(b.icmp_signed("<", rows, _i64(mr)), rows, _i64(mr))
        obase = b.mul(b.add(b.mul(bi, _i64(m)), i0), _i64(dv))

        def orow(r):
            lsp = _splat(b.load(at_(lsum, r)))

            def ocol(c):
                x = _vload(b, at_(Ob, b.add(b.mul(r, _i64(dv)), c)), vt, 4)
                _vstore(b, b.fdiv(x, lsp), at_(op, b.add(obase, b.add(b.mul(r, _i64(dv)), c))), vt, 4)
            L.loop(_i64(0), _i64(dv), ocol, "o.c", step=vw)
        L.loop(_i64(0), rows, orow, "o.r")

    L.loop(ub, ue, unit, "u")
    b.call(_func(module, "free", VOID, [i8p]), [raw])
    b.ret_void()

    fn = ir.Function(module, ir.FunctionType(VOID, [ir.PointerType(i8p), I64, I64]), symbol)
    eb = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs = [eb.bitcast(eb.load(eb.gep(fn.args[0], [_i64(j)])), pt) for j in range(4)]
    eb.call(body, ptrs + [fn.args[1], fn.args[2]])
    eb.ret_void()
    return Lowered(str(module), symbol, units, LoopPlan("attention", (), (), (), units))
