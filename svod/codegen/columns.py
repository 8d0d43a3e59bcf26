"""Column reduces: the part of `KernelLowering` (svod/codegen/lower.py) for a reduce whose
innermost axis is kept (``sum(x, axis=0)``, ``var(x, axis=0)``; `LoopPlan.cols` > 0).

A unit owns accumulator tiles for a block of columns (whole rows when they fit
`COL_TILE_BYTES`) and streams the rows of the reduce axes once per pass, `ROW_UNROLL`
rows combined pairwise before they meet the tile; float sums are blocked by `SUM_BLOCK`
rows. A single-pass kernel may cut its outer reduce axis into chunks (`LoopPlan.split`)
whose partial tiles are combined by svod/codegen/split.py. See docs/codegen.md.

The methods read lower.py's helpers (`lw.*`) at call time: lower.py imports this module.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir


class _Lower:
    """lower.py's names, looked up when used (lower.py imports this module)."""

    def __getattr__(self, name: str):
        from svod.codegen import lower

        return getattr(lower, name)


lw = _Lower()


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
        outer = plan.unit_axes[:-1]
        red_axes = plan.inner_axes
        ax0 = red_axes[0]
        nblk = -(-last.size // plan.cols)
        nch = plan.split or 1
        consts = {i: lw.emit_op(f, n.op, n.dtype, n.arg, [], []) for i, n in enumerate(k.nodes) if n.op is lw.Ops.CONST}
        reds = [lw._Reduction(self, i) for i, n in enumerate(k.nodes) if n.op is lw.Ops.REDUCE]
        blocked = any(r.cascade for r in reds) and ax0.size > lw.SUM_BLOCK
        tiles, totals = self._column_tiles(reds, blocked)
        groups = math.prod(a.size for a in outer) * nblk
        scratch = lw.SplitScratch(f, self.symbol, [r.ty for r in reds], groups, nch, plan.cols, self.ub, self.ue,
                               plan.units) if nch > 1 else None

        def unit(u):
            g = b.udiv(u, lw._i64(nch)) if nch > 1 else u
            ctx = self._unravel(b.udiv(g, lw._i64(nblk)), outer) if outer else {}
            c0 = b.mul(b.urem(g, lw._i64(nblk)), lw._i64(plan.cols))
            c1 = b.add(c0, lw._i64(plan.cols))
            c1 = b.select(b.icmp_signed("<", c1, lw._i64(last.size)), c1, lw._i64(last.size))
            w = b.sub(c1, c0)
            if nch > 1:
                ch = b.urem(u, lw._i64(nch))
                r0 = b.mul(ch, lw._i64(plan.chunk_len))
                r1 = b.add(r0, lw._i64(plan.chunk_len))
                r1 = b.select(b.icmp_signed("<", r1, lw._i64(ax0.size)), r1, lw._i64(ax0.size))
            else:
                r0, r1 = lw._i64(0), lw._i64(ax0.size)

            result = [tot if (blocked and r.cascade) else t for r, t, tot in zip(reds, tiles, totals)]
            for p in range(k.passes):  # a pass streams the rows once; later passes read earlier results
                mine = [i for i, r in enumerate(reds) if r.n.pass_ == p]
                if mine:
                    self._column_pass(p, mine, reds, tiles, totals, result, consts, blocked, ctx, c0, w, r0, r1)

            def store(c, src_of):
                env = dict(consts)
                cctx = {**ctx, last.dims: b.add(c0, c)}
                for r, src in zip(reds, src_of):
                    env[r.node] = b.load(src(c))
                self._eval([o.node for o in k.outputs], env, cctx)
                for j, o in enumerate(k.outputs):
                    self._store(self.out_ptrs[j], o.dtype, self.out_access[j], cctx, env[o.node])

            if scratch is None:
                f.loop(lw._i64(0), w, lambda c: store(c, [lambda c, t=t: b.gep(t, [c]) for t in result]), "cs")
                return

            def put(c):
                for ri, t in enumerate(result):
                    b.store(b.load(b.gep(t, [c])), scratch.slot(ri, g, ch, c))
            f.loop(lw._i64(0), w, put, "cp")

            def finish():
                scratch.combine(g, w, [self._merge_fn(r) for r in reds])
                f.loop(lw._i64(0), w, lambda c: store(c, [lambda c, ri=ri: scratch.slot(ri, g, 0, c)
                                                       for ri in range(len(reds))]), "cs")
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
                    b.store(reds[i]._identity(), b.gep(arrs[i], [c]))
            f.loop(lw._i64(0), w, col, "ci")

        def values(c, rctx):
            env = dict(consts)
            for i in prev:  # per-column results of earlier passes (a mean for a variance)
                env[reds[i].node] = b.load(b.gep(result[i], [c]))
            cctx = {**rctx, last.dims: b.add(c0, c)}
            self._eval([reds[i].n.src[0] for i in mine], env, cctx)
            return [env[reds[i].n.src[0]] for i in mine]

        def rows(level: int, rctx: dict):
            if level == len(red_axes):
                def col(c):
                    for i, v in zip(mine, values(c, rctx)):
                        ptr = b.gep(tiles[i], [c])
                        b.store(lw._combine(f, reds[i], b.load(ptr), v), ptr)
                f.loop(lw._i64(0), w, col, "c")
                return
            ax = red_axes[level]
            lo, hi = (r0, r1) if level == 0 else (lw._i64(0), lw._i64(ax.size))
            stream(level, lo, hi, rctx)

        def stream(level: int, lo, hi, rctx: dict):
            """Rows [lo, hi) of reduce axis `level`; the innermost one ROW_UNROLL rows at a
            time: their values combined pairwise, then once into the tile (a quarter of the
            tile traffic; the order is fixed by the shapes, so still thread-independent)."""
            ax = red_axes[level]
            if level != len(red_axes) - 1 or lw.ROW_UNROLL < 2:
                f.loop(lo, hi, lambda j: rows(level + 1, {**rctx, ax.dims: j}), "r")
                return
            u = lw.ROW_UNROLL
            nq = b.sdiv(b.sub(hi, lo), lw._i64(u))

            def quad(q):
                j0 = b.add(lo, b.mul(q, lw._i64(u)))

                def col(c):
                    vals = [values(c, {**rctx, ax.dims: b.add(j0, lw._i64(d))}) for d in range(u)]
                    for m, i in enumerate(mine):
                        level_vals = [v[m] for v in vals]
                        while len(level_vals) > 1:
                            level_vals = [lw._combine(f, reds[i], level_vals[a], level_vals[a + 1])
                                          for a in range(0, len(level_vals), 2)]
                        ptr = b.gep(tiles[i], [c])
                        b.store(lw._combine(f, reds[i], b.load(ptr), level_vals[0]), ptr)
                f.loop(lw._i64(0), w, col, "c")

            f.loop(lw._i64(0), nq, quad, "rq")
            f.loop(b.add(lo, b.mul(nq, lw._i64(u))), hi, lambda j: rows(level + 1, {**rctx, ax.dims: j}), "r")

        fill(tiles)
        if not blocked:
            rows(0, dict(ctx))
            return
        fill(totals)

        def block(jb):
            start = b.mul(jb, lw._i64(lw.SUM_BLOCK))
            end = b.add(start, lw._i64(lw.SUM_BLOCK))
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
            f.loop(lw._i64(0), w, add, "ca")

        # r0 is a whole number of SUM_BLOCKs (`_split_chunks`)
        sb = lw.SUM_BLOCK
        f.loop(b.udiv(r0, lw._i64(sb)), b.udiv(b.add(r1, lw._i64(sb - 1)), lw._i64(sb)), block, "rb")

    def _column_tiles(self, reds: list[lw._Reduction], blocked: bool) -> tuple[list, list]:
        """The accumulator tiles of a column reduce: one 64-byte aligned stack block, tile
        i starting `TILE_SKEW` bytes further past a 4 KiB boundary than tile i - 1.

        NOTE: separate allocas of 16 KiB came out exactly 32 KiB apart, so a load of one
        tile's column hit the 4K-aliasing stall behind the store to the other tile's
        same column (every vector: sum+max over axis 0 ran at 10 GB/s from L3)."""
        f, b, cols = self.f, self.f.b, self.plan.cols
        want = [(r.ty, r._identity()) for r in reds] + [(r.ty, None) for r in reds if blocked]
        offs, pos = [], 0
        for i, (ty, _) in enumerate(want):
            isz = 8 if isinstance(ty, ir.DoubleType) or ty == lw.I64 else 4 if ty in (lw.F32, lw.I32) else 1
            pos = -(-pos // 4096) * 4096 + lw.TILE_SKEW * i if i else 0
            offs.append(pos)
            pos += cols * isz
        block = f.alloca(lw.I8, pos + 64, "ctiles")
        block.align = 64
        ptrs = [b.bitcast(b.gep(block, [lw._i64(o)]), ir.PointerType(ty)) for o, (ty, _) in zip(offs, want)]
        tiles = ptrs[:len(reds)]
        totals = ptrs[len(reds):] if blocked else [None] * len(reds)
        return tiles, totals

    def _merge_fn(self, red: lw._Reduction):
        """How two partial results of `red` combine (a float sum: a plain fadd)."""
        b = self.f.b
        if red.cascade:
            return lambda x, y: b.fadd(x, y)
        return lambda x, y: lw._combine(self.f, red, x, y)
