"""Column reduces: the part of `KernelLowering` (svod/codegen/lower.py) for a reduce whose
innermost axis is kept (``sum(x, axis=0)``, ``var(x, axis=0)``; `LoopPlan.cols` > 0).

A unit owns accumulator tiles for a block of columns (whole rows when they fit
`COL_TILE_BYTES`) and streams the rows of the reduce axes once per pass, `ROW_UNROLL`
rows combined pairwise before they meet the tile; float sums are blocked by `SUM_BLOCK`
rows. A single-pass kernel may cut its outer reduce axis into chunks (`LoopPlan.split`)
whose partial tiles are combined by svod/codegen/split.py. See docs/codegen.md.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from svod.codegen.cplx import mul as complex_mul
from svod.codegen.irbuild import F32, I8, I32, I64, LoweringError, i64, tsuf
from svod.codegen.reduction import Reduction, combine
from svod.codegen.scalar import emit_op
from svod.codegen.schedule import CHAN_UNROLL, ROW_UNROLL, SUM_BLOCK, TILE_SKEW, chan_rows, chan_variance
from svod.codegen.split import SplitScratch
from svod.ir import Ops


class ColumnLowering:
    """Mixin of `svod.codegen.lower.KernelLowering`: the column-reduce lowering."""

    def _lower_columns(self) -> None:
        """Column reduce (plan.cols): per unit, accumulators for a block of columns of the
        innermost kept axis (whole rows when they fit `COL_TILE_BYTES`); the reduce loops
        stream row segments (sequential memory), the column loop inside is what
        vectorises. Float sums are blocked over the outermost reduce axis: SUM_BLOCK rows
        into a block tile, block tiles added into the total in order. With plan.split the
        outermost reduce axis is cut into chunks (a unit is (group, chunk)), whose partial
        tiles are combined pairwise by the unit that completes the group (split.py).
        Deterministic; independent of the thread count."""
        k, f, b, plan = self.k, self.f, self.f.b, self.plan
        last = plan.axes[-1]
        if last.reduce:  # no kept axis: a variance of every element (schedule.flat_variance)
            self._lower_flat_variance()
            return
        outer = plan.unit_axes[:-1]
        red_axes = plan.inner_axes
        ax0 = red_axes[0]
        nblk = -(-last.size // plan.cols)
        nch = plan.split or 1
        consts = {i: emit_op(f, n.op, n.dtype, n.arg, [], []) for i, n in enumerate(k.nodes) if n.op is Ops.CONST}
        reds = [Reduction(self, i) for i, n in enumerate(k.nodes) if n.op is Ops.REDUCE]
        chan = chan_variance(k) if len(red_axes) == 1 else None
        if any(r.complex for r in reds) and (nch > 1 or chan):  # schedule.py never splits these
            raise LoweringError("a complex product over columns in split chunks or beside a variance")
        n_red = ax0.size
        blocked = chan is not None or (any(r.cascade for r in reds) and ax0.size > SUM_BLOCK)
        tiles, totals = self._column_tiles(reds, blocked)
        # a variance's running mean is hi + lo: the lo tile, skewed past the other tiles (4K aliasing)
        low = self._column_tiles(reds[:1], False, skew=len(reds) * 2)[0][0] if chan else None
        groups = math.prod(a.size for a in outer) * nblk
        types = [r.ty for r in reds] + ([reds[0].ty] if chan else [])  # a variance: its mean's low part too
        scratch = SplitScratch(f, self.symbol, types, groups, nch, plan.cols, self.ub, self.ue,
                               self._all_units()) if nch > 1 else None

        def unit(u):
            g = b.udiv(u, i64(nch)) if nch > 1 else u
            ctx = self._unravel(b.udiv(g, i64(nblk)), outer) if outer else {}
            c0 = b.mul(b.urem(g, i64(nblk)), i64(plan.cols))
            c1 = b.add(c0, i64(plan.cols))
            c1 = b.select(b.icmp_signed("<", c1, i64(last.size)), c1, i64(last.size))
            w = b.sub(c1, c0)
            if nch > 1:
                ch = b.urem(u, i64(nch))
                r0 = b.mul(ch, i64(plan.chunk_len))
                r1 = b.add(r0, i64(plan.chunk_len))
                r1 = b.select(b.icmp_signed("<", r1, i64(ax0.size)), r1, i64(ax0.size))
            else:
                r0, r1 = i64(0), i64(ax0.size)

            result = [tot if (blocked and r.cascade) else t for r, t, tot in zip(reds, tiles, totals)]
            if chan:  # result: the mean (high, low) and the sum of squared deviations of rows [r0, r1)
                self._chan_unit(chan, reds, tiles, result, low, consts, ctx, c0, w, r0, r1)
                result = result + [low]
            else:
                for p in range(k.passes):  # a pass streams the rows once; later passes read earlier results
                    mine = [i for i, r in enumerate(reds) if r.n.pass_ == p]
                    if mine:
                        self._column_pass(p, mine, reds, tiles, totals, result, consts, blocked, ctx, c0, w, r0, r1)

            def store(c, src_of):
                env = dict(consts)
                cctx = {**ctx, last.dims: b.add(c0, c)}
                for r, src in zip(reds, src_of):
                    env[r.node] = _load(b, src(c))
                if chan:  # the first reduction is the sum: (mean + its low part) x N
                    mean = b.fadd(env[chan[0]], _load(b, src_of[len(reds)](c)))
                    env[chan[0]] = b.fmul(mean, ir.Constant(reds[0].ty, float(n_red)))
                self._eval([o.node for o in k.outputs], env, cctx)
                for j, o in enumerate(k.outputs):
                    self._store(self.out_ptrs[j], o.dtype, self.out_access[j], cctx, env[o.node])

            if scratch is None:
                f.loop(i64(0), w, lambda c: store(c, [lambda c, t=t: _gep(b, t, c) for t in result]), "cs")
                return

            def put(c):
                for ri, t in enumerate(result):
                    b.store(b.load(b.gep(t, [c])), scratch.slot(ri, g, ch, c))
            f.loop(i64(0), w, put, "cp")

            def finish():
                if chan:
                    self._chan_combine(scratch, g, w, reds, ax0.size)
                else:
                    scratch.combine(g, w, [self._merge_fn(r) for r in reds])
                f.loop(i64(0), w, lambda c: store(c, [lambda c, ri=ri: scratch.slot(ri, g, 0, c)
                                                       for ri in range(len(result))]), "cs")
            f.if_then(scratch.arrive(g), finish)

        f.loop(self.ub, self.ue, unit, "u")
        if scratch is not None:
            scratch.release()

    def _column_pass(self, p, mine, reds, tiles, totals, result, consts, blocked, ctx, c0, w, r0, r1) -> None:
        """Pass `p` of a column reduce over rows [r0, r1) of the outer reduce axis and
        columns [c0, c0 + w): the reductions `mine` (indices into `reds`) accumulate into
        their tiles; values of earlier passes' reductions are read from `result`."""
        f, b = self.f, self.f.b
        last = self.plan.axes[-1]
        red_axes = self.plan.inner_axes
        ax0 = red_axes[0]
        prev = [i for i, r in enumerate(reds) if r.n.pass_ < p]
        blocked = blocked and any(reds[i].cascade for i in mine)

        def fill(arrs):
            def col(c):
                for i in mine:
                    r = reds[i]
                    if r.complex and not isinstance(arrs[i], tuple):  # a complex product has no totals
                        continue
                    one = (ir.Constant(r.ty, 1.0), ir.Constant(r.ty, 0.0)) if r.complex else r._identity()
                    _store(b, one, _gep(b, arrs[i], c))
            f.loop(i64(0), w, col, "ci")

        def values(c, rctx):
            env = dict(consts)
            for i in prev:  # per-column results of earlier passes (a mean for a variance)
                env[reds[i].node] = _load(b, _gep(b, result[i], c))
            cctx = {**rctx, last.dims: b.add(c0, c)}
            self._eval([reds[i].n.src[0] for i in mine], env, cctx)
            return [env[reds[i].n.src[0]] for i in mine]

        def rows(level: int, rctx: dict):
            if level == len(red_axes):
                def col(c):
                    for i, v in zip(mine, values(c, rctx)):
                        ptr = _gep(b, tiles[i], c)
                        _store(b, self._fold(reds[i], _load(b, ptr), v), ptr)
                f.loop(i64(0), w, col, "c")
                return
            ax = red_axes[level]
            lo, hi = (r0, r1) if level == 0 else (i64(0), i64(ax.size))
            stream(level, lo, hi, rctx)

        def stream(level: int, lo, hi, rctx: dict):
            """Rows [lo, hi) of reduce axis `level`; the innermost one ROW_UNROLL rows at a
            time: their values combined pairwise, then once into the tile (1/ROW_UNROLL of
            the tile traffic; the order is fixed by the shapes, so still thread-independent)."""
            ax = red_axes[level]
            if level != len(red_axes) - 1 or ROW_UNROLL < 2:
                f.loop(lo, hi, lambda j: rows(level + 1, {**rctx, ax.dims: j}), "r")
                return
            u = ROW_UNROLL
            nq = b.sdiv(b.sub(hi, lo), i64(u))

            def quad(q):
                j0 = b.add(lo, b.mul(q, i64(u)))

                def col(c):
                    vals = [values(c, {**rctx, ax.dims: b.add(j0, i64(d))}) for d in range(u)]
                    for m, i in enumerate(mine):
                        level_vals = [v[m] for v in vals]
                        if reds[i].complex:  # a complex product in row order (numpy's, bit for bit)
                            ptr = _gep(b, tiles[i], c)
                            acc = _load(b, ptr)
                            for v in level_vals:
                                acc = complex_mul(f, acc, v)
                            _store(b, acc, ptr)
                            continue
                        while len(level_vals) > 1:
                            level_vals = [combine(f, reds[i], level_vals[a], level_vals[a + 1])
                                          for a in range(0, len(level_vals), 2)]
                        ptr = b.gep(tiles[i], [c])
                        b.store(combine(f, reds[i], b.load(ptr), level_vals[0]), ptr)
                f.loop(i64(0), w, col, "c")

            f.loop(i64(0), nq, quad, "rq")
            f.loop(b.add(lo, b.mul(nq, i64(u))), hi, lambda j: rows(level + 1, {**rctx, ax.dims: j}), "r")

        fill(tiles)
        if not blocked:
            rows(0, dict(ctx))
            return
        fill(totals)

        def block(jb):
            start = b.mul(jb, i64(SUM_BLOCK))
            end = b.add(start, i64(SUM_BLOCK))
            end = b.select(b.icmp_signed("<", end, r1), end, r1)
            if len(red_axes) == 1:
                stream(0, start, end, ctx)
            else:
                f.loop(start, end, lambda j: rows(1, {**ctx, ax0.dims: j}), "r")

            def add(c):
                for i in mine:
                    if reds[i].cascade:  # float sums: block into total, block restarts
                        pt, po = b.gep(tiles[i], [c]), b.gep(totals[i], [c])
                        b.store(b.fadd(b.load(po), b.load(pt)), po)
                        b.store(reds[i]._identity(), pt)
            f.loop(i64(0), w, add, "ca")

        # r0 is a whole number of SUM_BLOCKs (`_split_chunks`)
        sb = SUM_BLOCK
        f.loop(b.udiv(r0, i64(sb)), b.udiv(b.add(r1, i64(sb - 1)), i64(sb)), block, "rb")

    def _lower_flat_variance(self) -> None:
        """A variance of every element (`schedule.flat_variance`): its one axis of n
        elements read as R = n / L rows of L columns (L = plan.cols, a power of two). A
        unit is a chunk of rows (`plan.split`, else one unit of all R): `_chan_unit` takes
        each column's (mean high, mean low, M2) over the chunk in one read, the chunks
        merge in the split's fixed tree (`_chan_combine`), then the L columns in a
        pairwise tree (`_merge_lanes`), and the outputs see s1 = mean * n and s2 = M2.
        Every order depends on the shape only: bit-identical for any thread count."""
        k, f, b, plan = self.k, self.f, self.f.b, self.plan
        L, n = plan.cols, plan.axes[0].size
        R, nch = n // L, plan.split or 1
        consts = {i: emit_op(f, nd.op, nd.dtype, nd.arg, [], []) for i, nd in enumerate(k.nodes) if nd.op is Ops.CONST}
        reds = [Reduction(self, i) for i, nd in enumerate(k.nodes) if nd.op is Ops.REDUCE]
        chan = chan_variance(k)
        tiles, totals = self._column_tiles(reds, True)
        low = self._column_tiles(reds[:1], False, skew=len(reds) * 2)[0][0]
        i1 = next(i for i, r in enumerate(reds) if r.node == chan[0])
        i2 = next(i for i, r in enumerate(reds) if r.node == chan[1])
        il = len(reds)
        scratch = SplitScratch(f, self.symbol, [r.ty for r in reds] + [reds[0].ty], 1, nch, L, self.ub, self.ue,
                               plan.units) if nch > 1 else None

        def finish(ptr):
            """Merge the L columns' partials (`ptr(r, column)`) and store the outputs."""
            self._merge_lanes(ptr, i1, i2, il, reds[i1].ty, L, R)
            env = dict(consts)
            mean = b.fadd(b.load(ptr(i1, i64(0))), b.load(ptr(il, i64(0))))
            env[chan[0]] = b.fmul(mean, ir.Constant(reds[i1].ty, float(n)))
            env[chan[1]] = b.load(ptr(i2, i64(0)))
            self._eval([o.node for o in k.outputs], env, {})
            for j, o in enumerate(k.outputs):
                self._store(self.out_ptrs[j], o.dtype, self.out_access[j], {}, env[o.node])

        def unit(u):
            if nch > 1:
                r0 = b.mul(u, i64(plan.chunk_len))
                r1 = b.add(r0, i64(plan.chunk_len))
                r1 = b.select(b.icmp_signed("<", r1, i64(R)), r1, i64(R))
            else:
                r0, r1 = i64(0), i64(R)
            result = [tot if r.cascade else t for r, t, tot in zip(reds, tiles, totals)]
            self._chan_unit(chan, reds, tiles, result, low, consts, {}, i64(0), i64(L), r0, r1)
            result = result + [low]
            if scratch is None:
                finish(lambda ri, c: b.gep(result[ri], [c]))
                return

            def put(c):
                for ri, t in enumerate(result):
                    b.store(b.load(b.gep(t, [c])), scratch.slot(ri, i64(0), u, c))
            f.loop(i64(0), i64(L), put, "cp")

            def last():
                self._chan_combine(scratch, i64(0), i64(L), reds, R)
                finish(lambda ri, c: scratch.slot(ri, i64(0), 0, c))
            f.if_then(scratch.arrive(i64(0)), last)

        f.loop(self.ub, self.ue, unit, "u")
        if scratch is not None:
            scratch.release()

    def _merge_lanes(self, ptr, i1: int, i2: int, il: int, ty, lanes: int, rows: int) -> None:
        """Pairwise tree over `lanes` (a power of two) columns of `rows` rows each, in
        place (column 0 ends with the whole): column c merges column c + step, both of
        rows * step rows, ``d = (hb - ha) + (lb - la); M2 += M2b + d^2 rows step / 2;
        (h, l) = two_sum(ha, la + d / 2)`` (`_chan_combine` with equal counts)."""
        f, b = self.f, self.f.b
        half = ir.Constant(ty, 0.5)
        step = 1
        while step < lanes:
            wab = ir.Constant(ty, rows * step / 2)

            def pair(p, step=step, wab=wab):
                ca = b.mul(p, i64(2 * step))
                cb = b.add(ca, i64(step))
                ph, pl, pq = ptr(i1, ca), ptr(il, ca), ptr(i2, ca)
                ha, la = b.load(ph), b.load(pl)
                d = b.fadd(b.fsub(b.load(ptr(i1, cb)), ha), b.fsub(b.load(ptr(il, cb)), la))
                b.store(b.fadd(b.fadd(b.load(pq), b.load(ptr(i2, cb))), b.fmul(b.fmul(d, d), wab)), pq)
                h, lo = two_sum(b, ha, b.fadd(la, b.fmul(d, half)))
                b.store(h, ph)
                b.store(lo, pl)
            f.loop(i64(0), i64(lanes // (2 * step)), pair, "lm")
            step *= 2

    def _column_tiles(self, reds: list[Reduction], blocked: bool, skew: int = 0) -> tuple[list, list]:
        """The accumulator tiles of a column reduce: one 64-byte aligned stack block, tile
        i starting `TILE_SKEW` bytes further past a 4 KiB boundary than tile i - 1.

        NOTE: separate allocas can come out a multiple of 4 KiB apart, and then a load of
        one tile's column stalls (4K aliasing) behind the store to the other tile's same
        column, every vector (docs/codegen.md)."""
        f, b, cols = self.f, self.f.b, self.plan.cols
        want = [(r.ty, None) for r in reds for _ in range(2 if r.complex else 1)]
        want += [(r.ty, None) for r in reds if blocked]
        offs, pos = [], 0
        for i, (ty, _) in enumerate(want):
            isz = 8 if isinstance(ty, ir.DoubleType) or ty == I64 else 4 if ty in (F32, I32) else 1
            pos = -(-pos // 4096) * 4096 + TILE_SKEW * (i + skew) if i or skew else 0
            offs.append(pos)
            pos += cols * isz
        block = f.alloca(I8, pos + 64, "ctiles")
        block.align = 64
        ptrs = [b.bitcast(b.gep(block, [i64(o)]), ir.PointerType(ty)) for o, (ty, _) in zip(offs, want)]
        tiles, at = [], 0
        for r in reds:  # a complex product's tile: (re tile, im tile)
            tiles.append((ptrs[at], ptrs[at + 1]) if r.complex else ptrs[at])
            at += 2 if r.complex else 1
        totals = ptrs[at:] if blocked else [None] * len(reds)
        return tiles, totals

    def _fold(self, red: Reduction, cur, x):
        """`cur` combined with the next row's value `x` (a complex product: numpy's)."""
        return complex_mul(self.f, cur, x) if red.complex else combine(self.f, red, cur, x)

    def _merge_fn(self, red: Reduction):
        """How two partial results of `red` combine (a float sum: a plain fadd)."""
        b = self.f.b
        if red.cascade:
            return lambda x, y: b.fadd(x, y)
        return lambda x, y: combine(self.f, red, x, y)

    def _chan_unit(self, chan, reds, tiles, result, low, consts, ctx, c0, w, r0, r1) -> None:
        """A variance over rows [r0, r1) in one read, as a running mean ``m = hi + lo``
        (`two_sum`: the low part keeps what rounding the high part lost) and M2 per column.

        Every sub-chunk of `schedule.chan_rows` rows is read once shifted by ``hi``:
        ``s1 = sum(x - hi)``, ``s2 = sum((x - hi)^2)``, then, with ``na`` rows before it,
        ``nb`` in it, ``n = na + nb`` (Chan et al.'s merge written for a shifted sub-chunk)::

            M2 += max(s2 - s1^2 / n, 0) + (na / n) lo (nb lo - 2 s1)
            (hi, lo) = two_sum(hi, s1 / n + lo na / n)

        The first sub-chunk starts from ``hi = sum(x) / nb`` (one more read, from cache).
        The cancellation in ``s2 - s1^2 / n`` is bounded by the merge term the same
        sub-chunk adds to M2, and the mean's rounding never enters M2 to first order, so
        drifting columns stay as accurate as numpy's two-pass variance. ``llvm.maximum``
        keeps a NaN; squares that overflow give +inf (numpy's sum of squares does)."""
        f, b = self.f, self.f.b
        last = self.plan.axes[-1]
        ax0 = self.plan.inner_axes[0]
        i1 = next(i for i, r in enumerate(reds) if r.node == chan[0])
        i2 = next(i for i, r in enumerate(reds) if r.node == chan[1])
        ty = reds[i1].ty
        s_t, q_t, hi_t, m2_t = tiles[i1], tiles[i2], result[i1], result[i2]
        zero = ir.Constant(ty, 0.0)
        rows = chan_rows(self.sched.target, self.plan.cols, 8 if isinstance(ty, ir.DoubleType) else 4)
        u = CHAN_UNROLL
        assert u >= 1 and u & (u - 1) == 0, "CHAN_UNROLL must be a power of two (pairwise)"

        def col_loop(fn, name):
            f.loop(i64(0), w, fn, name)

        def x_at(j, c):
            env = dict(consts)
            if last.reduce:  # a flat variance (`_lower_flat_variance`): row j, column c of its one axis
                at = {**ctx, last.dims: b.add(b.mul(j, i64(self.plan.cols)), b.add(c0, c))}
            else:
                at = {**ctx, ax0.dims: j, last.dims: b.add(c0, c)}
            self._eval([chan[2]], env, at)
            return env[chan[2]]

        def pairwise(vals):
            while len(vals) > 1:
                vals = [b.fadd(vals[a], vals[a + 1]) for a in range(0, len(vals), 2)]
            return vals[0]

        def rows_into(s0, s1, body, name):
            """body(c, [row indices]) over rows [s0, s1): `u` rows at a time, then one by one."""
            nq = b.sdiv(b.sub(s1, s0), i64(u))

            def quad(q):
                j0 = b.add(s0, b.mul(q, i64(u)))
                col_loop(lambda c: body(c, [b.add(j0, i64(d)) for d in range(u)]), "c")

            f.loop(i64(0), nq, quad, name + "q")
            f.loop(b.add(s0, b.mul(nq, i64(u))), s1, lambda j: col_loop(lambda c: body(c, [j]), "c"), name)

        def add_to(tile, c, v):
            p = b.gep(tile, [c])
            b.store(b.fadd(b.load(p), v), p)

        def shifted(c, js):
            m = b.load(b.gep(hi_t, [c]))
            ds = [b.fsub(x_at(j, c), m) for j in js]
            add_to(s_t, c, pairwise(ds))
            add_to(q_t, c, pairwise([b.fmul(d, d) for d in ds]))

        def sub_chunk(s0, s1):
            na = b.sitofp(b.sub(s0, r0), ty)
            nb = b.sitofp(b.sub(s1, s0), ty)
            inv = b.fdiv(ir.Constant(ty, 1.0), b.fadd(na, nb))
            wa = b.fmul(na, inv)
            col_loop(lambda c: (b.store(zero, b.gep(s_t, [c])), b.store(zero, b.gep(q_t, [c]))), "cf")
            rows_into(s0, s1, shifted, "rs")

            def merge(c):
                ph, pl, pq = b.gep(hi_t, [c]), b.gep(low, [c]), b.gep(m2_t, [c])
                s, lo = b.load(b.gep(s_t, [c])), b.load(pl)
                sn = b.fmul(s, inv)
                s2, t = b.load(b.gep(q_t, [c])), b.fmul(s, sn)
                inc = b.fsub(s2, t)
                # squares that overflowed (s1 finite, s1^2 / n and so s2 infinite): +inf, as
                # numpy's sum of squares; an infinite input (s1 not finite) stays NaN
                inf = ir.Constant(ty, math.inf)
                fabs = f"llvm.fabs.{tsuf(ty)}"
                over = b.and_(b.fcmp_ordered("==", f.call_intr(fabs, ty, [t]), inf),
                              b.fcmp_ordered("<", f.call_intr(fabs, ty, [s]), inf))
                inc = b.select(over, inf, inc)
                corr = b.fmul(b.fmul(wa, lo), b.fsub(b.fmul(nb, lo), b.fadd(s, s)))
                m2 = b.fadd(b.fadd(b.load(pq), inc), corr)
                b.store(f.call_intr(f"llvm.maximum.{tsuf(ty)}", ty, [m2, zero]), pq)
                h, l2 = two_sum(b, b.load(ph), b.fadd(sn, b.fmul(lo, wa)))
                b.store(h, ph)
                b.store(l2, pl)
            col_loop(merge, "cc")

        # the first sub-chunk: its plain mean is the first shift
        e0 = b.add(r0, i64(rows))
        e0 = b.select(b.icmp_signed("<", e0, r1), e0, r1)
        col_loop(lambda c: (b.store(zero, b.gep(hi_t, [c])), b.store(zero, b.gep(m2_t, [c])),
                            b.store(zero, b.gep(low, [c]))), "cz")
        rows_into(r0, e0, lambda c, js: add_to(hi_t, c, pairwise([x_at(j, c) for j in js])), "ra")
        inv0 = b.fdiv(ir.Constant(ty, 1.0), b.sitofp(b.sub(e0, r0), ty))
        col_loop(lambda c: b.store(b.fmul(b.load(b.gep(hi_t, [c])), inv0), b.gep(hi_t, [c])), "cm")
        sub_chunk(r0, e0)

        def later(i):
            s0 = b.add(r0, b.mul(i, i64(rows)))
            s1 = b.add(s0, i64(rows))
            sub_chunk(s0, b.select(b.icmp_signed("<", s1, r1), s1, r1))

        nsub = b.sdiv(b.add(b.sub(r1, r0), i64(rows - 1)), i64(rows))
        f.loop(i64(1), nsub, later, "sc")

    def _chan_combine(self, scratch, g, w, reds, size: int) -> None:
        """The chunks' (mean high, mean low, M2) partials of group `g` merged in the
        split's pairwise tree (chunk c += chunk c + step), with each side's row count
        known from the shapes: ``d = (hb - ha) + (lb - la); M2 = M2a + M2b + d^2 na nb / n;
        (h, l) = two_sum(ha, la + d nb / n)``."""
        f, b = self.f, self.f.b
        chan = chan_variance(self.k)
        i1 = next(i for i, r in enumerate(reds) if r.node == chan[0])
        i2 = next(i for i, r in enumerate(reds) if r.node == chan[1])
        il = len(reds)  # the means' low parts
        ty = reds[i1].ty
        clen, nch = self.plan.chunk_len, scratch.chunks

        def rows(c0: int, c1: int) -> int:
            return max(0, min(size, c1 * clen) - c0 * clen)

        step = 1
        while step < nch:
            for c in range(0, nch - step, 2 * step):
                na, nb = rows(c, c + step), rows(c + step, min(c + 2 * step, nch))
                wb, wab = ir.Constant(ty, nb / (na + nb)), ir.Constant(ty, na * nb / (na + nb))

                def lane(j, c=c, step=step, wb=wb, wab=wab):
                    ph, pl, pq = scratch.slot(i1, g, c, j), scratch.slot(il, g, c, j), scratch.slot(i2, g, c, j)
                    ha, la = b.load(ph), b.load(pl)
                    hb, lb = b.load(scratch.slot(i1, g, c + step, j)), b.load(scratch.slot(il, g, c + step, j))
                    d = b.fadd(b.fsub(hb, ha), b.fsub(lb, la))
                    b.store(b.fadd(b.fadd(b.load(pq), b.load(scratch.slot(i2, g, c + step, j))),
                                   b.fmul(b.fmul(d, d), wab)), pq)
                    h, lo = two_sum(b, ha, b.fadd(la, b.fmul(d, wb)))
                    b.store(h, ph)
                    b.store(lo, pl)
                f.loop(i64(0), w, lane, "cmb")
            step *= 2


def two_sum(b, x, y):
    """(s, e) with s = fl(x + y) and s + e = x + y exactly (Knuth; plain fadds, which
    LLVM never reassociates without fast-math flags)."""
    s = b.fadd(x, y)
    bb = b.fsub(s, x)
    return s, b.fadd(b.fsub(x, b.fsub(s, bb)), b.fsub(y, bb))


def _gep(b, tile, c):
    """Column `c` of a tile: a pointer, or a (re, im) pair of pointers for a complex one."""
    return tuple(b.gep(t, [c]) for t in tile) if isinstance(tile, tuple) else b.gep(tile, [c])


def _load(b, ptr):
    return tuple(b.load(p) for p in ptr) if isinstance(ptr, tuple) else b.load(ptr)


def _store(b, value, ptr) -> None:
    if isinstance(ptr, tuple):
        for v, p in zip(value, ptr):
            b.store(v, p)
    else:
        b.store(value, ptr)
