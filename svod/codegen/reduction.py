"""Reduction accumulators in generated code: one REDUCE/ARGMAX/ARGMIN over a row pass
(`Reduction`: identity, update, blocked float sums merged by a binary-counter cascade)
and one combine step (`combine`), shared by the row and column lowerings.

Float sums are blocked: `SUM_BLOCK` elements summed with ``reassoc`` fadds (vector
accumulators), block sums merged by a binary-counter cascade (pairwise order), so the
order depends on the shapes only.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from svod.codegen.cplx import mul as complex_mul
from svod.codegen.irbuild import I64, Fn, LoweringError, i64, reg_type, tsuf
from svod.codegen.scalar import const, icmp
from svod.codegen.schedule import CASCADE_LEVELS
from svod.ir import Ops

# Loop hints of the loop over a row's SUM_BLOCK blocks (`svod.codegen.lower`, "rb"): not
# unrolled. The block's own loop is vectorised and interleaved by LLVM (4 vector
# accumulators); when the row is a few blocks long and the body small (`sum(a - b, 1)`
# over 2048 columns: 8 blocks) LLVM unrolled the block loop too, into one straight-line
# row of 256 vector loads, and that row ran 1.5-2x slower than the loop (1.75-2.7 ms
# against 1.1-1.3 ms for 2048² float32, one thread; docs/algebra.md, "sum_merge"): each
# load instruction then runs once per row, 8 KB apart, and the hardware's per-instruction
# stride prefetcher no longer follows the row. The hint changes no arithmetic (the
# block's and the cascade's order are the same), only the code layout.
BLOCK_LOOP_HINTS = (("llvm.loop.unroll.disable", None),)


def combine(f: Fn, red: Reduction, cur: ir.Value, x: ir.Value) -> ir.Value:
    """One step of a REDUCE: cur (accumulator) with x.

    NOTE: float max/min stay llvm.maximum/minimum, also on column tiles: the
    select form (x > cur or x is NaN ? x : cur) stored back to the tile becomes a
    masked store (vmaskmovps), microcoded on AMD: 6x slower with two reductions."""
    b, dt, rop = f.b, red.dt, red.n.arg
    if rop in ("sum", "prod"):  # bool: or / and
        fop, bop, iop = (b.fadd, b.or_, b.add) if rop == "sum" else (b.fmul, b.and_, b.mul)
        if dt.is_float:
            v = fop(cur, x)
            v.flags.append("reassoc")
            return v
        return bop(cur, x) if dt.is_bool else iop(cur, x)
    is_max = rop == "max"
    if dt.is_float:
        return f.call_intr(f"llvm.{'maximum' if is_max else 'minimum'}.{tsuf(red.ty)}", red.ty, [cur, x])
    if dt.is_bool:
        return b.or_(cur, x) if is_max else b.and_(cur, x)
    return b.select(icmp(b, dt, ">" if is_max else "<", x, cur), x, cur)



class Reduction:
    """One REDUCE/ARGMAX/ARGMIN accumulator over a row pass."""

    def __init__(self, low, node: int):
        self.low = low
        self.f = low.f
        self.node = node
        n = low.k.nodes[node]
        self.n = n
        self.op = n.op
        self.dt = low.k.nodes[n.src[0]].dtype if n.op is not Ops.REDUCE else n.dtype
        self.simple = n.op is Ops.REDUCE
        self.cascade = n.op is Ops.REDUCE and n.arg == "sum" and n.dtype.is_float
        self.complex = self.dt.kind == "c"  # a product (the frontend sums the parts): (re, im) accumulators
        # a float max/min beside a blocked float sum restarts every block and meets the
        # row's running value after it (exact: max/min are associative), so the next
        # block's vector loop does not wait for this block's horizontal reduction
        blocked = low.sched.blocked if getattr(low, "sched", None) is not None else ()
        self.per_block = (n.op is Ops.REDUCE and n.arg in ("max", "min") and self.dt.is_float
                          and n.pass_ < len(blocked) and blocked[n.pass_])
        if self.complex and not (n.op is Ops.REDUCE and n.arg == "prod"):
            raise LoweringError(f"{n.op.name} {n.arg} of {self.dt}")
        self.ty = reg_type(self.dt.real if self.complex else self.dt)

    def _identity(self) -> ir.Constant:
        dt = self.dt
        if self.op is Ops.REDUCE:
            rop = self.n.arg
            if rop == "sum":
                return const(dt, 0)
            if rop == "prod":
                return const(dt, 1)
            if dt.is_float:
                return const(dt, -math.inf if rop == "max" else math.inf)
            if dt.is_bool:
                return const(dt, rop == "min")
            info = np.iinfo(dt.np)
            return const(dt, info.min if rop == "max" else info.max)
        if dt.is_float:
            return const(dt, -math.inf if self.op is Ops.ARGMAX else math.inf)
        if dt.is_bool:
            return const(dt, self.op is Ops.ARGMIN)
        info = np.iinfo(dt.np)
        return const(dt, info.min if self.op is Ops.ARGMAX else info.max)

    def init_row(self) -> None:
        f = self.f
        if self.complex:
            self.acc = (f.var(self.ty, ir.Constant(self.ty, 1.0), "acc.re"), f.var(self.ty, ir.Constant(self.ty, 0.0),
                                                                                 "acc.im"))
            return
        self.acc = f.var(self.ty, self._identity(), "acc")
        if self.per_block:
            self.total = f.var(self.ty, self._identity(), "total")
        if not self.simple:
            self.idx = f.var(I64, i64(0), "argidx")
        if self.cascade:
            self.stack = f.alloca(self.ty, CASCADE_LEVELS, "cascade")
            self.count = f.var(I64, i64(0), "ccount")

    def begin_block(self) -> None:
        if self.cascade:
            self.f.b.store(const(self.dt, 0), self.acc)
        elif self.per_block:
            self.f.b.store(self._identity(), self.acc)

    def update(self, x: ir.Value, lin) -> None:
        f, b = self.f, self.f.b
        if self.complex:  # in order, numpy's product (svod/codegen/cplx.py)
            new = complex_mul(f, (b.load(self.acc[0]), b.load(self.acc[1])), x)
            b.store(new[0], self.acc[0])
            b.store(new[1], self.acc[1])
            return
        cur = b.load(self.acc)
        dt = self.dt
        if self.op is Ops.REDUCE:
            b.store(combine(f, self, cur, x), self.acc)
            return
        # ARGMAX / ARGMIN: first index; NaN wins (and then stays)
        is_max = self.op is Ops.ARGMAX
        if dt.is_float:
            better = b.fcmp_ordered(">" if is_max else "<", x, cur)
            nan_new = b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("ord", cur, cur))
            take = b.or_(better, nan_new)
        else:
            take = icmp(b, dt, ">" if is_max else "<", x, cur)
        # NOTE: the first element always initialises (an all -inf row gives index 0 anyway)
        b.store(b.select(take, x, cur), self.acc)
        b.store(b.select(take, lin, b.load(self.idx)), self.idx)

    def end_block(self) -> None:
        if self.per_block:
            b = self.f.b
            b.store(combine(self.f, self, b.load(self.total), b.load(self.acc)), self.total)
            return
        if not self.cascade:
            return
        f, b = self.f, self.f.b
        # binary-counter cascade: level l holds the sum of 2**l blocks (pairwise order)
        carry = f.var(self.ty, b.load(self.acc), "carry")
        lvl = f.var(I64, i64(0), "lvl")
        cnt = b.load(self.count)
        cond = f.fn.append_basic_block("casc.cond")
        body = f.fn.append_basic_block("casc.body")
        done = f.fn.append_basic_block("casc.done")
        b.branch(cond)
        b.position_at_end(cond)
        lv = b.load(lvl)
        bit = b.and_(b.lshr(cnt, lv), i64(1))
        b.cbranch(b.icmp_unsigned("!=", bit, i64(0)), body, done)
        b.position_at_end(body)
        b.store(b.fadd(b.load(b.gep(self.stack, [lv])), b.load(carry)), carry)
        b.store(b.add(lv, i64(1)), lvl)
        b.branch(cond)
        b.position_at_end(done)
        b.store(b.load(carry), b.gep(self.stack, [b.load(lvl)]))
        b.store(b.add(cnt, i64(1)), self.count)

    def finish(self) -> ir.Value:
        f, b = self.f, self.f.b
        if self.complex:
            return b.load(self.acc[0]), b.load(self.acc[1])
        if self.per_block:
            return b.load(self.total)
        if self.simple and not self.cascade:
            return b.load(self.acc)
        if not self.simple:
            return b.load(self.idx)
        total = f.var(self.ty, const(self.dt, 0), "total")
        cnt = b.load(self.count)

        def level(lv):
            bit = b.and_(b.lshr(cnt, lv), i64(1))
            f.if_then(b.icmp_unsigned("!=", bit, i64(0)),
                      lambda: b.store(b.fadd(b.load(total), b.load(b.gep(self.stack, [lv]))), total))

        f.loop(i64(0), i64(CASCADE_LEVELS), level, "lv")
        return b.load(total)

__all__ = ["BLOCK_LOOP_HINTS", "Reduction", "combine"]
