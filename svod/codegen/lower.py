"""Lowering: Kernel -> LLVM IR text (llvmlite.ir), one native entry point per kernel.

Entry ABI (every native kernel)::

    void <symbol>(i8** slots, i64 unit_begin, i64 unit_end)

``slots`` holds one pointer per kernel input (in `Kernel.inputs` order) followed by one
per output (in `Kernel.outputs` order); the runtime splits ``[0, units)`` across threads.
The entry loads the pointers and calls an internal body whose pointer arguments are
``noalias`` (the loop vectoriser needs that to vectorise without runtime checks). A
*rows variant* (``KernelLowering(..., rows=True)``, built by `svod.codegen.rows` for a
size bucket's plan: matmuls, split reductions, one-axis elementwise kernels) has one more
entry after the outputs: its row count ``m`` as an integer, read at run time instead of
the kernel's constant (a matmul's last row tile stops there; a split reduction's launch
of every unit is ``m`` times the units per row; a one-axis elementwise kernel's last chunk
stops at element ``m`` times the elements per row).

Every decision about the loops is the kernel's `Schedule` (svod/codegen/schedule.py:
loop plan, segments, per-row values, the stash, GEMM tiling); this module emits it.
Loop structure (see docs/codegen.md):

* **elementwise**: size-1 axes dropped, adjacent axes merged wherever every view
  allows (a contiguous (4096, 4096) kernel is one loop of 16M). One merged axis: units
  are chunks of `CHUNK` elements and a unit range is one flat loop. More axes: a unit is
  one index of the outer axes (unravelled with div/mod), the inner loop runs the last.
* **column reduce** (a kept innermost axis, `LoopPlan.cols`; svod/codegen/columns.py): a
  unit keeps accumulator tiles for a block of columns (whole rows when they fit) and
  streams the rows, `ROW_UNROLL` at a time, once per pass.
* **reduce / rowwise**: a unit is one row (an index of the kept axes). Per row, pass
  ``p`` loops over the (merged) reduce axes: REDUCE nodes of pass ``p`` accumulate, full
  outputs of pass ``p`` are stored; values that are constant along the row (per-row
  values) are computed once per row, outside the inner loop. Reduced outputs are
  stored after the last pass.
* **matmul**: float matmuls are the packed, register-blocked GEMM of
  `svod/codegen/gemm.py` (a unit is a batch index × row tile × column tile; fused
  epilogue per micro-tile). Integer and bool matmuls: a unit is (batch index, block of
  `MM_ROWS` rows); per block of `MM_COLS` columns an accumulator tile lives on the stack,
  ``for p: for i: for j`` with the j loop vectorised, then the epilogue runs on the tile.

The IR is written clang -O0 style (allocas for loop counters and accumulators); O3's
SROA/mem2reg turns it into SSA, and the loop vectoriser does the SIMD work. Float sums
are blocked: `SUM_BLOCK` elements summed with ``reassoc`` fadds (vector accumulators),
block sums merged by a binary-counter cascade (pairwise order) — deterministic, and
independent of the thread count: a row is cut only into chunks fixed by the shapes
(`LoopPlan.split`, svod/codegen/split.py), whose partials combine in a fixed tree.

>>> from svod.kernel_examples import softmax_kernel
>>> low = lower_kernel(softmax_kernel(4, 8))
>>> low.units, low.symbol.startswith("svod_k_")
(4, True)
"""


from __future__ import annotations

import llvmlite.ir as ir

from svod.codegen.attention import lower_attention
from svod.codegen.columns import ColumnLowering
from svod.codegen.gemm import emit_gemm
from svod.codegen.irbuild import I1, I8, I64, VOID, Fn, Lowered, LoweringError, i64, matrix_ctx, mem_type, reg_type
from svod.codegen.mlp import lower_mlp
from svod.codegen.narrow import lower_narrow
from svod.codegen.reduction import BLOCK_LOOP_HINTS, Reduction
from svod.codegen.rowcol import lower_rowcol
from svod.codegen.scalar import const, emit_op
from svod.codegen.schedule import (
    COSTLY_OPS,
    ILP_INTERLEAVE,
    MM_COLS,
    MM_ROWS,
    STREAM_VECTORS,
    SUM_BLOCK,
    Access,
    Axis,
    Schedule,
    make_access,
    schedule,
    supports_gemm,
)
from svod.codegen.split import SplitScratch, split_blocks
from svod.dtype import DType
from svod.ir import Ops
from svod.kernel import ACC, LOAD, VALID, Kernel
from svod.view import ViewChain


def symbol_for(kernel: Kernel) -> str:
    return f"svod_k_{kernel.key()[:20]}"


class KernelLowering(ColumnLowering):
    """Lower one Kernel into `module` as function `symbol`."""

    def __init__(self, kernel: Kernel, module: ir.Module, symbol: str, sched: Schedule | None = None,
                 rows: bool = False):
        self.k = kernel
        self.module = module
        self.symbol = symbol
        self.sched = sched or schedule(kernel)  # every decision (loops, segments, stash, tiling) is made there
        self.plan = self.sched.loops
        nin, nout = len(kernel.inputs), len(kernel.outputs)
        ptr_types = [ir.PointerType(mem_type(i.dtype)) for i in kernel.inputs] + \
                    [ir.PointerType(mem_type(o.dtype)) for o in kernel.outputs]
        # `rows` (a rows variant, svod.codegen.rows): the row count m is read at run time from
        # one more entry slot (an integer) and passed to the body as a last argument
        body_ty = ir.FunctionType(VOID, ptr_types + [I64, I64] + ([I64] if rows else []))
        self.body_fn = ir.Function(module, body_ty, symbol + ".body")
        self.body_fn.linkage = "internal"
        for a in self.body_fn.args[:nin + nout]:
            a.add_attribute("noalias")
        self.f = Fn(module, self.body_fn)
        self.in_ptrs = list(self.body_fn.args[:nin])
        self.out_ptrs = list(self.body_fn.args[nin:nin + nout])
        self.ub, self.ue = self.body_fn.args[nin + nout:nin + nout + 2]
        self.rows_m = self.body_fn.args[-1] if rows else None  # run-time row count (a rows variant)
        self.accesses: dict[int, Access] = {}  # input index -> Access (kernel space)
        self.valid_access: dict[int, Access] = {}  # node index -> Access for VALID
        self.out_access: list[Access] = []
        self._ax0_range: tuple[ir.Value, ir.Value] | None = None  # a split reduction's chunk

    # ---- public
    def lower(self) -> None:
        k = self.k
        if k.matmul is not None and k.matmul.library:
            raise LoweringError("a library (BLAS) step has no native code")
        if self.plan.units == 0:  # nothing to compute: an empty body
            pass
        elif k.matmul is not None:
            self._lower_matmul()
        else:
            groups = [a.dims for a in self.plan.axes]
            self.accesses.update(enumerate(self.sched.accesses))
            self.valid_access.update(self.sched.valid_access)
            for o in k.outputs:
                # NOTE: row-major strides computed here, not by View: a View over a shape
                # with a 0 (an empty reduce axis) zeroes every stride.
                shape = k.reduced_shape if o.reduced else k.shape
                strides, acc = [0] * len(shape), 1
                for d in range(len(shape) - 1, -1, -1):
                    strides[d] = 0 if shape[d] == 1 else acc
                    acc *= shape[d]
                self.out_access.append(Access(terms=[(g, strides[g[-1]]) for g in groups if strides[g[-1]]]))
            if k.kind == "elementwise":
                self._lower_elementwise()
            elif self.plan.cols:
                self._lower_columns()
            elif self.plan.narrow:  # short rows read across rows (svod/codegen/narrow.py)
                lower_narrow(self)
            else:
                self._lower_rows()
        self.f.b.ret_void()
        self.f.finish()
        self._entry()

    def _entry(self) -> None:
        k = self.k
        fnty = ir.FunctionType(VOID, [ir.PointerType(ir.PointerType(I8)), I64, I64])
        fn = ir.Function(self.module, fnty, self.symbol)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptrs = []
        types = [i.dtype for i in k.inputs] + [o.dtype for o in k.outputs]
        for j, dt in enumerate(types):
            raw = b.load(b.gep(fn.args[0], [ir.Constant(I64, j)]))
            ptrs.append(b.bitcast(raw, ir.PointerType(mem_type(dt))))
        extra = [b.ptrtoint(b.load(b.gep(fn.args[0], [ir.Constant(I64, len(types))])), I64)] \
            if self.rows_m is not None else []
        b.call(self.body_fn, ptrs + [fn.args[1], fn.args[2]] + extra)
        b.ret_void()

    def _all_units(self):
        """The unit count of a launch that runs every unit: the constant, or for a rows
        variant its run-time row count times the units per row (svod.codegen.rows)."""
        if self.rows_m is None:
            return self.plan.units
        return self.f.b.mul(self.rows_m, i64(self.plan.units // self.k.shape[0]))

    # ---- index helpers
    def _unravel(self, u: ir.Value, axes: tuple[Axis, ...]) -> dict:
        b = self.f.b
        ctx = {}
        for a in reversed(axes):
            if a is axes[0]:
                ctx[a.dims] = u
            else:
                ctx[a.dims] = b.urem(u, i64(a.size))
                u = b.udiv(u, i64(a.size))
        return ctx

    def _address(self, acc: Access, ctx: dict) -> tuple[ir.Value, ir.Value | None]:
        """(element index, validity or None when always valid)."""
        b = self.f.b
        addr: ir.Value = i64(acc.offset)
        for g, s in acc.terms:
            if g in ctx:
                addr = b.add(addr, b.mul(ctx[g], i64(s)))
        valid = None

        def both(c):
            nonlocal valid
            valid = c if valid is None else b.and_(valid, c)

        for g, lo, hi in acc.masks:
            if g not in ctx:
                continue
            known = ctx.get(("known", g))  # the loop runs only over [rlo, rhi) here (`_segments`)
            if known is not None:
                rlo, rhi = known
                if lo <= rlo and rhi <= hi:
                    continue  # valid all along this piece of the loop
                if rhi <= lo or rlo >= hi:
                    both(ir.Constant(I1, 0))  # never valid: the load folds to the pad value
                    continue
            i = ctx[g]
            if lo > 0:
                both(b.icmp_signed(">=", i, i64(lo)))
            both(b.icmp_signed("<", i, i64(hi)))
        for v in acc.steps:  # unravel the linear index into the next (inner) view
            lin = addr
            addr = i64(v.offset)
            w = 1
            for d in range(len(v.shape) - 1, -1, -1):
                n, s = v.shape[d], v.strides[d]
                lo, hi = v.valid_box()[d]
                if n == 1:
                    w *= n
                    continue
                idx = b.srem(b.sdiv(lin, i64(w)), i64(n)) if w > 1 else b.srem(lin, i64(n))
                if s:
                    addr = b.add(addr, b.mul(idx, i64(s)))
                if lo > 0:
                    both(b.icmp_signed(">=", idx, i64(lo)))
                if hi < n:
                    both(b.icmp_signed("<", idx, i64(hi)))
                w *= n
        return addr, valid

    def _load(self, ptr: ir.Value, dt: DType, acc: Access, ctx: dict) -> ir.Value:
        b = self.f.b
        if acc.dead:
            return const(dt, 0)
        addr, valid = self._address(acc, ctx)
        if dt.is_complex:  # (re, im) at 2*addr, 2*addr + 1
            a2 = b.mul(addr, i64(2))
            parts = [(b.gep(ptr, [a2]), ptr.type.pointee), (b.gep(ptr, [b.add(a2, i64(1))]), ptr.type.pointee)]
            if valid is None:
                return tuple(b.load(p) for p, _ in parts)
            out = []
            for p, ty in parts:
                res = self.f.var(ty, ir.Constant(ty, 0.0))
                self.f.if_then(valid, lambda p=p, res=res: b.store(b.load(p), res))
                out.append(b.load(res))
            return tuple(out)
        if valid is None:
            return self._from_mem(b.load(b.gep(ptr, [addr])), dt)
        # NOTE: masked positions must never be read (they may lie outside the buffer):
        # a conditional load, which the vectoriser turns into a masked load.
        res = self.f.var(mem_type(dt), ir.Constant(mem_type(dt), 0))
        self.f.if_then(valid, lambda: b.store(b.load(b.gep(ptr, [addr])), res))
        return self._from_mem(b.load(res), dt)

    def _valid(self, acc: Access, ctx: dict) -> ir.Value:
        if acc.dead:
            return ir.Constant(I1, 0)
        _, valid = self._address(acc, ctx)
        return ir.Constant(I1, 1) if valid is None else valid

    def _from_mem(self, v: ir.Value, dt: DType) -> ir.Value:
        return self.f.b.icmp_unsigned("!=", v, ir.Constant(I8, 0)) if dt.is_bool else v

    def _store(self, ptr: ir.Value, dt: DType, acc: Access, ctx: dict, v: ir.Value) -> None:
        b = self.f.b
        addr, _ = self._address(acc, ctx)
        if dt.is_complex:
            a2 = b.mul(addr, i64(2))
            b.store(v[0], b.gep(ptr, [a2]))
            b.store(v[1], b.gep(ptr, [b.add(a2, i64(1))]))
            return
        if dt.is_bool:
            v = b.zext(v, I8)
        b.store(v, b.gep(ptr, [addr]))

    # ---- node evaluation
    def _eval(self, targets, env: dict, ctx: dict, stop=lambda i: False) -> None:
        """Compute `targets` (and their sources) into `env` at the current position."""
        need: set[int] = set()
        stack = [t for t in targets if t not in env]
        while stack:
            i = stack.pop()
            if i in need or i in env:
                continue
            if stop(i):
                continue
            need.add(i)
            n = self.k.nodes[i]
            if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
                raise AssertionError(f"kernel {self.k.name}: reduction %{i} used before its pass finished")
            stack.extend(n.src)
        for i in sorted(need):
            n = self.k.nodes[i]
            if n.op == LOAD:
                env[i] = self._load(self.in_ptrs[n.arg], n.dtype, self.accesses[n.arg], ctx)
            elif n.op == VALID:
                env[i] = self._valid(self.valid_access[i], ctx)
            elif n.op == ACC:
                raise AssertionError("ACC outside a matmul tile")
            else:
                env[i] = emit_op(self.f, n.op, n.dtype, n.arg, [env[s] for s in n.src],
                                 [self.k.nodes[s].dtype for s in n.src])

    # ---- elementwise
    def _ilp_hints(self) -> tuple:
        """Loop hints for an elementwise loop whose element is a long dependency chain
        (a polynomial exp/tanh/log, a divide or a square root): LLVM's cost model
        interleaves such big bodies once, and one vector's chain (~150 cycles for W7's
        tanh, sqrt, exp) leaves the out-of-order window starved: `ILP_INTERLEAVE` vectors in flight
        (docs/codegen.md)."""
        if any(n.op in COSTLY_OPS and n.dtype.is_float for n in self.k.nodes):
            return (("llvm.loop.interleave.count", ILP_INTERLEAVE),)
        return ()

    def _stream_chunk(self, dims, start: ir.Value, end: ir.Value, element, consts: dict) -> None:
        """Elements [start, end) of a streaming kernel (`Schedule.stream`): the elements
        before the output's first vector-aligned one and after its last whole block go
        through `element`; each block of `STREAM_VECTORS` vectors between is computed into
        an aligned stack tile (a loop LLVM vectorizes, as the plain one) and copied to the
        output with aligned non-temporal vector stores. A fence orders those stores before
        the unit returns (the pool's completion then publishes them). An output pointer
        not aligned to its element size takes the plain loop throughout."""
        k, f, b = self.k, self.f, self.f.b
        o = k.outputs[0]
        elt = mem_type(o.dtype)
        isz = o.dtype.itemsize
        lanes = self.sched.target.lanes(isz)
        vbytes = lanes * isz
        block = lanes * STREAM_VECTORS
        vty = ir.VectorType(elt, lanes)
        out = self.out_ptrs[0]
        acc = self.out_access[0]
        addr = b.ptrtoint(b.gep(out, [b.add(start, i64(acc.offset))]), I64)
        mis = b.urem(addr, i64(vbytes))
        ok = b.icmp_unsigned("==", b.urem(addr, i64(isz)), i64(0))
        lead = b.select(b.icmp_unsigned("==", mis, i64(0)), i64(0), b.udiv(b.sub(i64(vbytes), mis), i64(isz)))
        p0 = b.add(start, lead)
        p0 = b.select(b.icmp_signed("<", p0, end), p0, end)
        nblk = b.sdiv(b.sub(end, p0), i64(block))
        p0 = b.select(ok, p0, end)
        nblk = b.select(ok, nblk, i64(0))
        p1 = b.add(p0, b.mul(nblk, i64(block)))
        f.loop(start, p0, lambda j: element({dims: j}), "s")
        tile = f.alloca(ir.ArrayType(elt, block), name="stile")
        tile.align = vbytes
        base = b.gep(tile, [i64(0), i64(0)])
        nt = self.module.add_metadata([ir.Constant(ir.IntType(32), 1)])

        def one_block(q):
            j0 = b.add(p0, b.mul(q, i64(block)))

            def compute(i):
                env = dict(consts)
                ctx = {dims: b.add(j0, i)}
                self._eval([o.node], env, ctx)
                b.store(env[o.node], b.gep(base, [i]))

            f.loop(i64(0), i64(block), compute, "t", self._ilp_hints())
            for v in range(STREAM_VECTORS):
                src = b.bitcast(b.gep(base, [i64(v * lanes)]), ir.PointerType(vty))
                val = b.load(src, align=vbytes)
                dst = b.gep(out, [b.add(b.add(j0, i64(v * lanes)), i64(acc.offset))])
                st = b.store(val, b.bitcast(dst, ir.PointerType(vty)), align=vbytes)
                st.set_metadata("nontemporal", nt)

        f.loop(i64(0), nblk, one_block, "blk")
        f.loop(p1, end, lambda j: element({dims: j}), "e")
        b.fence("seq_cst")

    def _lower_elementwise(self) -> None:
        k, f, b, plan = self.k, self.f, self.f.b, self.plan
        consts = {i: emit_op(f, n.op, n.dtype, n.arg, [], []) for i, n in enumerate(k.nodes) if n.op is Ops.CONST}
        outs = [o.node for o in k.outputs]

        def element(ctx):
            env = dict(consts)
            self._eval(outs, env, ctx)
            for j, o in enumerate(k.outputs):
                self._store(self.out_ptrs[j], o.dtype, self.out_access[j], ctx, env[o.node])

        if plan.units == 0:
            return
        if not plan.axes:
            f.if_then(b.icmp_signed("<", self.ub, self.ue), lambda: element({}))
            return
        if plan.chunk:
            a = plan.axes[0]
            start = b.mul(self.ub, i64(plan.chunk))
            end = b.mul(self.ue, i64(plan.chunk))
            # a rows variant stops at its run-time row count's last element (svod.codegen.rows)
            last = i64(a.size) if self.rows_m is None else b.mul(self.rows_m, i64(a.size // k.shape[0]))
            end = b.select(b.icmp_signed("<", end, last), end, last)
            if self.sched.stream:
                self._stream_chunk(a.dims, start, end, element, consts)
                return
            f.loop(start, end, lambda j: element({a.dims: j}), "j", self._ilp_hints())
            return
        inner = plan.inner_axes[0]
        hints = self._ilp_hints() if inner.size >= 4 * ILP_INTERLEAVE else ()
        segs = self.sched.elementwise_pieces()

        def unit(u):
            ctx = self._unravel(u, plan.unit_axes)
            if segs is None:
                f.loop(i64(0), i64(inner.size), lambda j: element({**ctx, inner.dims: j}), "j", hints)
                return
            for lo, hi in segs:
                known = {**ctx, ("known", inner.dims): (lo, hi)}
                f.loop(i64(lo), i64(hi), lambda j, known=known: element({**known, inner.dims: j}), "j", hints)

        f.loop(self.ub, self.ue, unit, "u")

    # ---- reductions and row-wise passes
    def _lower_rows(self) -> None:
        k, f, b, plan = self.k, self.f, self.f.b, self.plan
        self.per_row = self.sched.per_row
        # the stash (`Schedule.stash`): a row-sized stack buffer per stashed node
        size = plan.inner_axes[0].size if self.sched.stash else 0
        self.stash = {i: f.alloca(reg_type(k.nodes[i].dtype), size, f"stash{i}") for i in self.sched.stash}

        nch = plan.split or 1
        self._ax0_range = None
        scratch = None
        if nch > 1:
            reds = [i for i, n in enumerate(k.nodes) if n.op is Ops.REDUCE]
            scratch = SplitScratch(f, self.symbol, [reg_type(k.nodes[i].dtype) for i in reds],
                                   plan.units // nch, nch, 1, self.ub, self.ue, self._all_units())

        def unit(u):
            row = b.udiv(u, i64(nch)) if nch > 1 else u
            ctx = self._unravel(row, plan.unit_axes) if plan.unit_axes else {}
            env: dict[int, ir.Value] = {}
            if nch > 1:  # one chunk of the outermost reduce axis
                ch = b.urem(u, i64(nch))
                r0 = b.mul(ch, i64(plan.chunk_len))
                r1 = b.add(r0, i64(plan.chunk_len))
                self._ax0_range = (r0, b.select(b.icmp_signed("<", r1, i64(plan.inner_axes[0].size)), r1,
                                                i64(plan.inner_axes[0].size)))
            for p in range(k.passes):
                self._pass(p, env, ctx)
            reduced = [o.node for o in k.outputs if o.reduced]

            def store(env):
                self._eval(reduced, env, ctx)
                for j, o in enumerate(k.outputs):
                    if o.reduced:
                        self._store(self.out_ptrs[j], o.dtype, self.out_access[j], ctx, env[o.node])

            if scratch is None:
                store(env)
                return
            for ri, i in enumerate(reds):
                b.store(env[i], scratch.slot(ri, row, ch, 0))

            def finish():
                scratch.combine(row, i64(1), [self._merge_fn(Reduction(self, i)) for i in reds])
                fin = {i: b.load(scratch.slot(ri, row, 0, 0)) for ri, i in enumerate(reds)}
                store({**{i: v for i, v in env.items() if i not in fin and self.per_row[i]}, **fin})
            f.if_then(scratch.arrive(row), finish)

        if plan.units:
            f.loop(self.ub, self.ue, unit, "row")
        if scratch is not None:
            scratch.release()

    def _pass(self, p: int, row_env: dict, row_ctx: dict) -> None:
        k, f = self.k, self.f
        reds = [i for i, n in enumerate(k.nodes) if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN) and n.pass_ == p]
        outs = [(j, o) for j, o in enumerate(k.outputs) if not o.reduced and o.pass_ == p]
        if not reds and not outs:
            return
        targets = [k.nodes[i].src[0] for i in reds] + [o.node for _, o in outs]
        # per-row values the pass needs: computed once, before the inner loop
        row_targets: set[int] = set()
        stack = list(targets)
        seen: set[int] = set()
        while stack:
            i = stack.pop()
            if i in seen or i in row_env:
                continue
            seen.add(i)
            if self.per_row[i]:
                row_targets.add(i)
            else:
                stack.extend(k.nodes[i].src)
        self._eval(sorted(row_targets), row_env, row_ctx)
        accs = [Reduction(self, i) for i in reds]
        for a in accs:
            a.init_row()
        inner = self.plan.inner_axes
        blocked = any(a.cascade for a in accs)

        ax_dims = inner[0].dims if len(inner) == 1 else None
        mine = self.sched.closures[p] if self.stash else set()
        loads = [i for i in self.stash if i in mine and self.sched.stash[i] < p]
        stores = [i for i in self.stash if i in mine and self.sched.stash[i] == p]

        def element(ctx, lin):
            env = dict(row_env)
            if loads or stores:
                j = ctx[ax_dims]
                for i in loads:
                    env[i] = f.b.load(f.b.gep(self.stash[i], [j]))
            self._eval(targets, env, ctx, stop=lambda i: self.per_row[i] and i not in row_env)
            for i in stores:
                f.b.store(env[i], f.b.gep(self.stash[i], [j]))
            for a in accs:
                a.update(env[k.nodes[a.node].src[0]], lin)
            for j, o in outs:
                self._store(self.out_ptrs[j], o.dtype, self.out_access[j], ctx, env[o.node])

        # linear index within the reduce space (row-major), for ARGMAX/ARGMIN
        weights = []
        w = 1
        for a in reversed(inner):
            weights.append(w)
            w *= a.size
        weights.reverse()
        need_lin = any(not a.simple for a in accs)

        def in_block(emit) -> None:
            """One SUM_BLOCK block (or the whole loop when sums are not blocked)."""
            for a in accs:
                a.begin_block()
            emit()
            for a in accs:
                a.end_block()

        def block_loop(first, last, hi, body) -> None:
            """Blocks [first, last) of SUM_BLOCK elements, the last one ending at `hi`."""
            def block(jb):
                start = f.b.mul(jb, i64(SUM_BLOCK))
                end = f.b.add(start, i64(SUM_BLOCK))
                end = f.b.select(f.b.icmp_signed("<", end, hi), end, hi)
                in_block(lambda: f.loop(start, end, body, "r"))

            f.loop(first, last, block, "rb", hints=BLOCK_LOOP_HINTS)

        def nest(level: int, ctx: dict, lin):
            b = f.b
            if not inner:  # no loop axis left (reduce axes of size 1): one element
                in_block(lambda: element(ctx, i64(0)))
                return
            if level == len(inner) - 1:
                ax = inner[level]

                def body(j, known=None):
                    lin2 = b.add(lin, b.mul(j, i64(weights[level]))) if need_lin else None
                    c = {**ctx, ax.dims: j}
                    if known is not None:
                        c[("known", ax.dims)] = known
                    element(c, lin2)

                rng = self._ax0_range if level == 0 else None
                pieces = self.sched.row_pieces(p)
                if rng is not None:  # a chunk of a split reduction (its start a whole number of blocks)
                    lo, hi = rng
                    if not blocked:
                        in_block(lambda: f.loop(lo, hi, body, "r"))
                        return
                    split_blocks(f, in_block, lo, hi, body)
                elif pieces is not None:
                    # static blocks (the same SUM_BLOCK cascade), each loop cut at the masks
                    nblocks = -(-ax.size // SUM_BLOCK) if blocked else 1
                    for jb in range(nblocks):
                        s0, s1 = (jb * SUM_BLOCK, min(ax.size, (jb + 1) * SUM_BLOCK)) if blocked else (0, ax.size)

                        def cut(s0=s0, s1=s1):
                            for lo, hi in pieces:
                                lo, hi = max(lo, s0), min(hi, s1)
                                if lo < hi:
                                    f.loop(i64(lo), i64(hi), lambda j, kn=(lo, hi): body(j, kn), "r")

                        in_block(cut)
                elif not blocked or ax.size <= SUM_BLOCK:
                    in_block(lambda: f.loop(i64(0), i64(ax.size), body, "r"))
                else:
                    block_loop(i64(0), i64(-(-ax.size // SUM_BLOCK)), i64(ax.size), body)
                return
            ax = inner[level]
            lo, hi = self._ax0_range if level == 0 and self._ax0_range is not None else (i64(0), i64(ax.size))
            f.loop(lo, hi,
                   lambda j: nest(level + 1, {**ctx, ax.dims: j},
                                  b.add(lin, b.mul(j, i64(weights[level]))) if need_lin else None), "r")

        nest(0, dict(row_ctx), i64(0))
        for a in accs:
            row_env[a.node] = a.finish()

    # ---- matmul
    def _lower_matmul(self) -> None:
        if supports_gemm(self.k):
            emit_gemm(self)  # packed panels + register-blocked micro-kernel (svod/codegen/gemm.py)
            return
        self._lower_matmul_simple()

    def _lower_matmul_simple(self) -> None:
        """Integer and bool matmuls: a stack tile, ``for p: for i: for j`` (j vectorised)."""
        k, f, b = self.k, self.f, self.f.b
        mm = k.matmul
        nd = len(k.shape)
        nb = nd - 2
        dt = k.inputs[mm.a].dtype
        ty = reg_type(dt)
        if self.plan.units == 0:
            return
        # groups: one per non-size-1 axis (no merging: the tile loops are explicit)
        def groups(shape):
            return [(d,) for d, n in enumerate(shape) if n != 1]

        acc_a = make_access(k.inputs[mm.a].view, groups(k.inputs[mm.a].view.shape))
        acc_b = make_access(k.inputs[mm.b].view, groups(k.inputs[mm.b].view.shape))
        kg = groups(k.shape)
        for i, inp in enumerate(k.inputs):
            if i not in (mm.a, mm.b):
                self.accesses[i] = make_access(inp.view, kg)
        for i, n in enumerate(k.nodes):
            if n.op == VALID:
                self.valid_access[i] = make_access(n.arg, kg)
        for _ in k.outputs:
            self.out_access.append(make_access(ViewChain.of(k.shape), kg))
        batch_axes = tuple(Axis((d,), k.shape[d], False) for d in range(nb) if k.shape[d] != 1)
        mblocks = -(-mm.m // MM_ROWS)
        ncols = min(MM_COLS, mm.n)
        tile = f.alloca(ty, MM_ROWS * ncols, "tile")
        zero = const(dt, 0)
        acc_node = next(i for i, n in enumerate(k.nodes) if n.op == ACC)
        consts = {i: emit_op(f, n.op, n.dtype, n.arg, [], []) for i, n in enumerate(k.nodes) if n.op is Ops.CONST}

        def mk(i_val, j_val, p_val, bctx):
            return (matrix_ctx(bctx, nb, i_val, p_val, mm.m, mm.k), matrix_ctx(bctx, nb, p_val, j_val, mm.k, mm.n))

        def unit(u):
            bu = b.udiv(u, i64(mblocks))
            mbk = b.urem(u, i64(mblocks))
            bctx = self._unravel(bu, batch_axes) if batch_axes else {}
            i0 = b.mul(mbk, i64(MM_ROWS))
            i1 = b.add(i0, i64(MM_ROWS))
            m = i64(mm.m) if self.rows_m is None else self.rows_m
            i1 = b.select(b.icmp_signed("<", i1, m), i1, m)
            rows = b.sub(i1, i0)

            def colblock(jb):
                j0 = b.mul(jb, i64(ncols))
                j1 = b.add(j0, i64(ncols))
                j1 = b.select(b.icmp_signed("<", j1, i64(mm.n)), j1, i64(mm.n))
                w = b.sub(j1, j0)

                def zero_row(r):
                    f.loop(i64(0), w, lambda c: b.store(zero, b.gep(tile, [b.add(b.mul(r, i64(ncols)), c)])), "c")

                f.loop(i64(0), rows, zero_row, "z")

                def kstep(p):
                    def row(r):
                        i = b.add(i0, r)
                        ca, _ = mk(i, None, p, bctx)
                        av = self._load(self.in_ptrs[mm.a], dt, acc_a, ca)
                        base = b.mul(r, i64(ncols))

                        def col(c):
                            _, cb = mk(i, b.add(j0, c), p, bctx)
                            bv = self._load(self.in_ptrs[mm.b], dt, acc_b, cb)
                            ptr = b.gep(tile, [b.add(base, c)])
                            cur = b.load(ptr)
                            if dt.is_float:
                                prod = b.fmul(av, bv)
                                prod.flags.append("contract")
                                s = b.fadd(cur, prod)
                                s.flags.append("contract")
                            elif dt.is_bool:
                                s = b.or_(cur, b.and_(av, bv))
                            else:
                                s = b.add(cur, b.mul(av, bv))
                            b.store(s, ptr)

                        f.loop(i64(0), w, col, "c")

                    f.loop(i64(0), rows, row, "r")

                f.loop(i64(0), i64(mm.k), kstep, "p")

                def epi_row(r):
                    i = b.add(i0, r)

                    def epi_col(c):
                        ctx = matrix_ctx(bctx, nb, i, b.add(j0, c), mm.m, mm.n)
                        env = dict(consts)
                        env[acc_node] = b.load(b.gep(tile, [b.add(b.mul(r, i64(ncols)), c)]))
                        self._eval([o.node for o in k.outputs], env, ctx)
                        for jj, o in enumerate(k.outputs):
                            self._store(self.out_ptrs[jj], o.dtype, self.out_access[jj], ctx, env[o.node])

                    f.loop(i64(0), w, epi_col, "c")

                f.loop(i64(0), rows, epi_row, "e")

            f.loop(i64(0), i64(-(-mm.n // ncols)), colblock, "jb")

        f.loop(self.ub, self.ue, unit, "u")

# ----------------------------------------------------------------------------- public


def lower_kernel(kernel: Kernel, symbol: str | None = None) -> Lowered:
    """Kernel -> LLVM IR text with entry ``void symbol(i8** slots, i64 ub, i64 ue)``."""
    symbol = symbol or symbol_for(kernel)
    sched = schedule(kernel)
    if kernel.attention is not None:
        return lower_attention(kernel, symbol, sched)
    if kernel.rowcol is not None:
        return lower_rowcol(kernel, symbol)
    if kernel.mlp is not None:  # its two GEMMs per row block are KernelLowerings
        return lower_mlp(kernel, symbol, sched, KernelLowering)
    if kernel.rmsnorm is not None:  # the GEMM with A packed from the row prologue
        from svod.codegen.rmsnorm import lower_rmsnorm

        return lower_rmsnorm(kernel, symbol, sched, KernelLowering)
    module = ir.Module(name=f"svod_{kernel.name}")
    low = KernelLowering(kernel, module, symbol, sched)
    low.lower()
    return Lowered(str(module), symbol, low.plan.units, low.plan)


__all__ = ["KernelLowering", "Lowered", "LoweringError", "lower_kernel", "symbol_for"]
