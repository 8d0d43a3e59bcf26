"""Split reductions: one reduction's rows cut into chunks that run as separate units, and
a deterministic combine of the chunks' partial results.

A unit of a split kernel is (group, chunk): a group is what one reduction result (a row,
or a block of columns of a column reduce) depends on, a chunk a fixed slice of the
outermost reduce axis. Each unit writes its partial results into a scratch array laid out
``[group][chunk][lane]`` and counts itself done on its group's counter; the unit that
completes a group (an atomic add returns the last count) combines the group's chunks in a
fixed pairwise tree (chunk 0 += chunk 1, 2 += 3, ..., then 0 += 2, ...) and stores the
outputs. Chunk boundaries depend on the shapes only and the tree's order on the chunk
count only, so the result is bit-identical for every thread count and slicing
(`test_split_reductions_bit_identical_across_threads`).

Where the scratch lives:

* a body call that runs every unit (``ub == 0 and ue == units``: one thread, the calling
  thread when the pool is busy, `runtime.repeat`) uses a private `malloc`ed scratch and
  counters, so two such calls of one Program may run at once from two Python threads;
* a call over part of the units comes from `svod.runtime`'s pool, which runs one job at a
  time: those use the module's zero-initialised globals (the combining unit sets its
  counter back to 0 for the next launch; the dispatcher's wait orders it before that).

A process forked while another of its threads is inside a pool launch inherits that
launch's half-counted counters: ``i64* <symbol>.split.counts()`` returns their address,
and `svod.codegen.program` zeroes them in the child (`os.register_at_fork`).
"""

from __future__ import annotations

import llvmlite.ir as ir

from svod.codegen.irbuild import I8, I64, VOID, func, i64


def _itemsize(t: ir.Type) -> int:
    if isinstance(t, ir.DoubleType):
        return 8
    if isinstance(t, ir.FloatType):
        return 4
    return max(1, t.width // 8)


class SplitScratch:
    """Partial results of `types` (one per reduction) for `groups` x `chunks` x `lanes`,
    and one counter per group. Build it at the start of the body (`__init__` emits the
    choice between private and global storage) and call `release` before returning."""

    def __init__(self, f, symbol: str, types: list[ir.Type], groups: int, chunks: int, lanes: int,
                 ub: ir.Value, ue: ir.Value, units: int):
        b, module = f.b, f.module
        self.f, self.groups, self.chunks, self.lanes = f, groups, chunks, lanes
        n = groups * chunks * lanes
        i8p = ir.PointerType(I8)
        self.sizes = [n * _itemsize(t) for t in types]
        offs, total = [], 0
        for s in self.sizes:
            offs.append(total)
            total += -(-s // 64) * 64
        cnt_bytes = groups * 8
        gscratch = ir.GlobalVariable(module, ir.ArrayType(I8, total), symbol + ".split")
        gscratch.linkage = "internal"
        gscratch.initializer = ir.Constant(ir.ArrayType(I8, total), None)
        gscratch.align = 64
        gcount = ir.GlobalVariable(module, ir.ArrayType(I64, groups), symbol + ".split.count")
        gcount.linkage = "internal"
        gcount.initializer = ir.Constant(ir.ArrayType(I64, groups), None)
        gcount.align = 64
        getter = ir.Function(module, ir.FunctionType(ir.PointerType(I64), []), symbol + ".split.counts")
        gb = ir.IRBuilder(getter.append_basic_block("e"))
        gb.ret(gb.bitcast(gcount, ir.PointerType(I64)))
        # `units` an IR value: a rows variant's unit count at its run-time row count (svod.codegen.rows)
        every = units if isinstance(units, ir.Value) else i64(units)
        self.full = b.and_(b.icmp_signed("==", ub, i64(0)), b.icmp_signed("==", ue, every))
        # private storage for a call that runs every unit (NULL otherwise: free(NULL) is a no-op)
        calloc = func(module, "calloc", i8p, [I64, I64])
        size = b.select(self.full, i64(total + cnt_bytes), i64(0))
        raw = b.call(calloc, [b.select(self.full, i64(1), i64(0)), size])
        self.raw = raw
        f.if_then(b.and_(self.full, b.icmp_unsigned("==", b.ptrtoint(raw, I64), i64(0))),
                  lambda: b.call(func(module, "llvm.trap", VOID, []), []))
        base = b.select(self.full, raw, b.bitcast(gscratch, i8p))
        cnt_raw = b.select(self.full, b.gep(raw, [i64(total)]), b.bitcast(gcount, i8p))
        self.counts = b.bitcast(cnt_raw, ir.PointerType(I64))
        self.arrays = [b.bitcast(b.gep(base, [i64(o)]), ir.PointerType(t)) for o, t in zip(offs, types)]

    def slot(self, r: int, group: ir.Value, chunk, lane) -> ir.Value:
        """Pointer to the partial of reduction `r` at (group, chunk, lane)."""
        b = self.f.b
        idx = b.add(b.mul(b.add(b.mul(group, i64(self.chunks)), chunk if isinstance(chunk, ir.Value)
                                else i64(chunk)), i64(self.lanes)), lane if isinstance(lane, ir.Value)
                    else i64(lane))
        return b.gep(self.arrays[r], [idx])

    def arrive(self, group: ir.Value) -> ir.Value:
        """Count this unit done in `group`; true for the unit that completes the group
        (then the counter is reset for the next launch)."""
        b = self.f.b
        ptr = b.gep(self.counts, [group])
        old = b.atomic_rmw("add", ptr, i64(1), "acq_rel")
        last = b.icmp_signed("==", old, i64(self.chunks - 1))
        self.f.if_then(last, lambda: b.store(i64(0), ptr))
        return last

    def combine(self, group: ir.Value, width: ir.Value, combine_fns) -> None:
        """Pairwise tree over the group's chunks, in place: afterwards chunk 0 of each
        lane < `width` holds the result. `combine_fns[r](a, b)` combines two partials."""
        f, b = self.f, self.f.b
        step = 1
        while step < self.chunks:
            for c in range(0, self.chunks - step, 2 * step):
                def lane(j, c=c, step=step):
                    for r, fn in enumerate(combine_fns):
                        pa, pb = self.slot(r, group, c, j), self.slot(r, group, c + step, j)
                        b.store(fn(b.load(pa), b.load(pb)), pa)
                f.loop(i64(0), width, lane, "cmb")
            step *= 2

    def release(self) -> None:
        b, module = self.f.b, self.f.module
        b.call(func(module, "free", VOID, [ir.PointerType(I8)]), [self.raw])


def split_blocks(f, in_block, lo: ir.Value, hi: ir.Value, body) -> None:
    """The rows [lo, hi) of a split chunk (`lo` a whole number of `SUM_BLOCK`s) as float-sum
    blocks, in order: the full blocks with a constant trip count (``body(start + i)``
    for i in [0, SUM_BLOCK): the vectoriser unrolls it and drops its bound checks), then
    the partial last block of the axis if this chunk holds it. The same blocks, hence the
    same bits, as blocks of ``[start, min(start + SUM_BLOCK, hi))``; `in_block(emit)`
    wraps each (the cascade's begin/end)."""
    from svod.codegen.schedule import SUM_BLOCK

    b, sb = f.b, SUM_BLOCK
    first = b.udiv(lo, i64(sb))
    full = b.udiv(hi, i64(sb))  # blocks ending at or before hi

    def block(jb):
        start = b.mul(jb, i64(sb))
        in_block(lambda: f.loop(i64(0), i64(sb), lambda i: body(b.add(start, i)), "r"))

    f.loop(first, full, block, "rb")
    tail = b.mul(full, i64(sb))
    f.if_then(b.icmp_signed("<", tail, hi), lambda: in_block(lambda: f.loop(tail, hi, body, "r")))


__all__ = ["SplitScratch", "split_blocks"]
