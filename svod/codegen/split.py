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

I1, I8, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(64)
VOID = ir.VoidType()

SPLIT_SCRATCH_MAX = 8 << 20  # most bytes of partial results one kernel keeps (globals)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, int(v))


def _func(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


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
        self.full = b.and_(b.icmp_signed("==", ub, _i64(0)), b.icmp_signed("==", ue, _i64(units)))
        # private storage for a call that runs every unit (NULL otherwise: free(NULL) is a no-op)
        calloc = _func(module, "calloc", i8p, [I64, I64])
        size = b.select(self.full, _i64(total + cnt_bytes), _i64(0))
        raw = b.call(calloc, [b.select(self.full, _i64(1), _i64(0)), size])
        self.raw = raw
        f.if_then(b.and_(self.full, b.icmp_unsigned("==", b.ptrtoint(raw, I64), _i64(0))),
                  lambda: b.call(_func(module, "llvm.trap", VOID, []), []))
        base = b.select(self.full, raw, b.bitcast(gscratch, i8p))
        cnt_raw = b.select(self.full, b.gep(raw, [_i64(total)]), b.bitcast(gcount, i8p))
        self.counts = b.bitcast(cnt_raw, ir.PointerType(I64))
        self.arrays = [b.bitcast(b.gep(base, [_i64(o)]), ir.PointerType(t)) for o, t in zip(offs, types)]

    def slot(self, r: int, group: ir.Value, chunk, lane) -> ir.Value:
        """Pointer to the partial of reduction `r` at (group, chunk, lane)."""
        b = self.f.b
        idx = b.add(b.mul(b.add(b.mul(group, _i64(self.chunks)), chunk if isinstance(chunk, ir.Value)
                                else _i64(chunk)), _i64(self.lanes)), lane if isinstance(lane, ir.Value)
                    else _i64(lane))
        return b.gep(self.arrays[r], [idx])

    def arrive(self, group: ir.Value) -> ir.Value:
        """Count this unit done in `group`; true for the unit that completes the group
        (then the counter is reset for the next launch)."""
        b = self.f.b
        ptr = b.gep(self.counts, [group])
        old = b.atomic_rmw("add", ptr, _i64(1), "acq_rel")
        last = b.icmp_signed("==", old, _i64(self.chunks - 1))
        self.f.if_then(last, lambda: b.store(_i64(0), ptr))
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
                f.loop(_i64(0), width, lane, "cmb")
            step *= 2

    def release(self) -> None:
        b, module = self.f.b, self.f.module
        b.call(_func(module, "free", VOID, [ir.PointerType(I8)]), [self.raw])


def chunking(length: int, row_elems: int, align: int, min_elems: int, max_chunks: int) -> tuple[int, int]:
    """(chunk length, chunks) for cutting an axis of `length` whose index carries
    `row_elems` elements of work: chunks of at least `min_elems` elements, a multiple of
    `align` long, at most `max_chunks` of them. (length, 1) when it should not be cut."""
    if length <= 0 or row_elems <= 0:
        return length, 1
    per = max(1, -(-min_elems // row_elems))
    per = -(-per // align) * align
    per = max(per, -(-length // max_chunks))
    per = -(-per // align) * align
    chunks = -(-length // per)
    if chunks < 2:
        return length, 1
    return per, chunks


__all__ = ["SPLIT_SCRATCH_MAX", "SplitScratch", "chunking"]
