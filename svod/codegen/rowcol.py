"""Row-column kernels (`Kernel.rowcol`, formed by `svod.lower.rowcol`): reductions over
axis 1 and axis 0 of an (m, n) space, and full reductions of those, in one read.

The kernel lowers to::

    unit u = block of RB rows [u·RB, min(m, (u+1)·RB))     # RB from the shape only (`blocks`)
      Pc[u][0:n] = identity                                # column partials of the block (scratch)
      for each row i of the block:
        Tr[0:W] = identity                                 # W lanes per row reduction (registers)
        for each column j (W at a time, the tail unrolled):
          v = elementwise nodes at (i, j)                  # loaded and computed once for all
          Tr[j % W] = fold(Tr[j % W], v)  ;  Pc[u][j] = fold(Pc[u][j], v)
        r_i = pairwise fold of Tr's lanes; per-row nodes; store the per-row outputs
        Ar = fold(Ar, r_i)                                 # full reductions of per-row values
      Pa[u] = Ar ; arrive on the counter
      the unit that completes the count:
        Pc[0], Pa[0] = pairwise tree over the blocks (block 0 += 1, 2 += 3, ..., 0 += 2, ...)
        per-column nodes over Pc[0]; store the per-column outputs; fold them into W lanes
        full-reduction nodes; store them

Every order (the W lanes of a row, the rows of a block, the tree over the blocks, the
lanes over the columns) depends on the shapes only: the results are bit-identical for
any thread count and any slicing of the units. The partials live in `SplitScratch`
(svod/codegen/split.py: private for a call that runs every unit, module globals for the
pool's launches, a counter the last unit resets). The lanes are written unrolled (W
scalar chains, consecutive columns): the SLP vectoriser makes vectors of them; the
column partials of a block (n values per column reduction) stay in L1/L2 while x
streams from memory once. Float max/min are ``llvm.maximum``/``minimum`` (NaN
propagates, as numpy's), float sums plain adds in the order above.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from svod.codegen.irbuild import (
    I8,
    I32,
    I64,
    VOID,
    Fn,
    Lowered,
    LoweringError,
    i64,
    mem_type,
    reg_type,
    vload,
    vstore,
)
from svod.codegen.scalar import const, emit_op, icmp
from svod.codegen.schedule import LoopPlan
from svod.codegen.schedule import rowcol_blocks as blocks
from svod.codegen.schedule import rowcol_partials as _partials
from svod.codegen.split import SplitScratch
from svod.ir import Ops
from svod.kernel import ALL, COL, ELEM, LOAD, ROW, Kernel

__all__ = ["LANES", "lower_rowcol"]

LANES = 16  # W: independent accumulators per row reduction (and per full reduction of columns)


def _identity(dt, fn: str) -> ir.Constant:
    if fn == "sum":
        return const(dt, 0)
    if dt.is_float:
        return const(dt, -math.inf if fn == "max" else math.inf)
    if dt.is_bool:
        return const(dt, fn == "min")
    info = np.iinfo(dt.np)
    return const(dt, info.min if fn == "max" else info.max)


def _fold(f: Fn, dt, fn: str, cur: ir.Value, x: ir.Value) -> ir.Value:
    """One reduction step, numpy's semantics (max/min: NaN wins, whichever side it is on;
    of equal values, signed zeros included, the accumulated one stays, so -0.0 vs 0.0
    depends on the order, as in numpy; bool sum: or). Not ``llvm.maximum``: its
    signed-zero ordering costs six instructions a step on x86, this three (the NaN test
    of x is off the accumulator's chain and shared by the row and column folds)."""
    b = f.b
    if fn == "sum":
        if dt.is_float:
            return b.fadd(cur, x)
        return b.or_(cur, x) if dt.is_bool else b.add(cur, x)
    is_max = fn == "max"
    if dt.is_float:  # x wins when it is larger (smaller) or NaN: a NaN on either side stays
        take = b.or_(b.fcmp_ordered(">" if is_max else "<", x, cur), b.fcmp_unordered("uno", x, x))
        return b.select(take, x, cur)
    if dt.is_bool:
        return b.or_(cur, x) if is_max else b.and_(cur, x)
    return b.select(icmp(b, dt, ">" if is_max else "<", x, cur), x, cur)


def _tree(f: Fn, dt, fn: str, vals: list[ir.Value]) -> ir.Value:
    """Pairwise fold of `vals` (lane 0 with 1, 2 with 3, ...; then the pairs)."""
    while len(vals) > 1:
        vals = [_fold(f, dt, fn, vals[a], vals[a + 1]) if a + 1 < len(vals) else vals[a]
                for a in range(0, len(vals), 2)]
    return vals[0]


def _vector_lanes(kernel: Kernel, reds: list[int]) -> int:
    """Columns per vector step: two of the host's vector registers of the widest
    reduced dtype (with the rows of a group: several independent accumulator chains per
    row reduction, a float max's chain being several instructions deep)."""
    from svod.codegen.schedule import gemm_config

    vbytes = gemm_config(4).vw * 4
    item = max((kernel.nodes[i].dtype.itemsize for i in reds), default=4)
    return max(4, 2 * vbytes // item)


def _row_group(kernel: Kernel, row_reds: list[int]) -> int:
    """Rows streamed together (each column partial loaded and stored once per group):
    as many as keep the rows' accumulators (two registers each) within half the vector
    registers (32 with AVX-512, 16 with AVX2), at most 4."""
    from svod.codegen.schedule import gemm_config

    regs = 32 if gemm_config(4).vw >= 16 else 16
    g = 4
    while g > 1 and g * 2 * max(1, len(row_reds)) > regs // 2:
        g //= 2
    return g


def _skewed(n: int, nblk: int, parts: list[int], nodes) -> int:
    """Lanes per block row of the partials: n, padded so that the partial arrays of two
    reductions do not start at the same address modulo 4 KiB (a store to one and a load
    of the other at the same column would alias in the load/store unit)."""
    item = max((nodes[i].dtype.itemsize for i in parts), default=4)
    pad = 0
    while len(parts) > 1 and not 1024 <= (nblk * (n + pad) * item) % 4096 <= 3072 and pad < 4096:
        pad += 64 // item
    return n + pad


def _vectorisable(kernel: Kernel, order: list[int]) -> bool:
    """The element nodes in `order` are loads along a unit-stride (or broadcast) row and
    `svod.lower.rowcol.VECTOR_OPS` (float `VECTOR_FLOAT_OPS`), whose instructions take
    vectors as they take scalars (`emit_op` on vectors); values of the whole: constants."""
    from svod.lower.rowcol import VECTOR_FLOAT_OPS, VECTOR_OPS

    sp = kernel.rowcol.spaces
    for i in order:
        nd = kernel.nodes[i]
        if nd.op == LOAD:
            if kernel.inputs[nd.arg].view.views[0].strides[1] not in (0, 1):
                return False
        elif sp[i] == ALL:
            if nd.op is not Ops.CONST:
                return False
        elif not (nd.op in VECTOR_OPS or (nd.op in VECTOR_FLOAT_OPS and nd.dtype.is_float)):
            return False
    return True


def lower_rowcol(kernel: Kernel, symbol: str) -> Lowered:
    """Kernel (with `rowcol`) -> LLVM IR text with entry ``void symbol(i8** slots, i64 ub,
    i64 ue)`` over its blocks of rows (see the module docstring)."""
    m, n = kernel.shape
    nodes, sp = kernel.nodes, kernel.rowcol.spaces
    if any(len(i.view.views) != 1 or i.view.views[0].mask is not None for i in kernel.inputs):
        raise LoweringError(f"row-column kernel {kernel.name}: inputs must be single unmasked views")
    if any(nd.dtype.is_complex for nd in nodes):
        raise LoweringError(f"row-column kernel {kernel.name}: complex values")
    rb, nblk = blocks(kernel)
    reds = [i for i, nd in enumerate(nodes) if nd.op is Ops.REDUCE]
    row_reds = [i for i in reds if sp[i] == ROW]
    col_reds = [i for i in reds if sp[i] == COL]
    all_col = [i for i in reds if sp[i] == ALL and sp[nodes[i].src[0]] == COL]
    parts = _partials(kernel)
    all_row = parts[len(col_reds):]
    views = [inp.view.views[0] for inp in kernel.inputs]

    module = ir.Module(name=f"svod_{kernel.name}")
    nin, nout = len(kernel.inputs), len(kernel.outputs)
    ptypes = [ir.PointerType(mem_type(x.dtype)) for x in kernel.inputs] + \
        [ir.PointerType(mem_type(o.dtype)) for o in kernel.outputs]
    body = ir.Function(module, ir.FunctionType(VOID, ptypes + [I64, I64]), symbol + ".body")
    body.linkage = "internal"
    for a in body.args[:nin + nout]:
        a.add_attribute("noalias")
    ins, outs = list(body.args[:nin]), list(body.args[nin:nin + nout])
    ub, ue = body.args[nin + nout], body.args[nin + nout + 1]
    f = Fn(module, body)
    b = f.b

    def ty(i):
        return reg_type(nodes[i].dtype)

    def fold(i, cur, x):
        return _fold(f, nodes[i].dtype, nodes[i].arg, cur, x)

    def ident(i):
        return _identity(nodes[i].dtype, nodes[i].arg)

    def needed(targets) -> list[int]:
        """The nodes `targets` are computed from (REDUCE nodes as leaves), in body order."""
        seen: set[int] = set()
        todo = list(targets)
        while todo:
            i = todo.pop()
            if i in seen:
                continue
            seen.add(i)
            if nodes[i].op is not Ops.REDUCE:
                todo.extend(nodes[i].src)
        return sorted(seen)

    def evaluate(order: list[int], env: dict, row=None, col=None) -> None:
        for i in order:
            if i in env:
                continue
            nd = nodes[i]
            if nd.op == LOAD:
                v = views[nd.arg]
                addr = b.add(row[nd.arg], col if v.strides[1] == 1 else b.mul(col, i64(v.strides[1])))
                x = b.load(b.gep(ins[nd.arg], [addr]))
                env[i] = b.icmp_unsigned("!=", x, ir.Constant(I8, 0)) if nd.dtype.is_bool else x
            elif nd.op is Ops.REDUCE:
                raise LoweringError(f"row-column kernel {kernel.name}: node %{i} read before it is reduced")
            else:
                env[i] = emit_op(f, nd.op, nd.dtype, nd.arg, [env[s] for s in nd.src],
                                 [nodes[s].dtype for s in nd.src])

    def store(j: int, index, value) -> None:
        o = kernel.outputs[j]
        if o.dtype.is_bool:
            value = b.zext(value, I8)
        b.store(value, b.gep(outs[j], [index]))

    out_of = {s: [j for j, o in enumerate(kernel.outputs) if sp[o.node] == s] for s in (ROW, COL, ALL)}
    elem_order = needed([nodes[i].src[0] for i in row_reds + col_reds])
    row_order = needed([kernel.outputs[j].node for j in out_of[ROW]] + [nodes[i].src[0] for i in all_row])
    col_order = needed([kernel.outputs[j].node for j in out_of[COL]] + [nodes[i].src[0] for i in all_col])
    all_order = needed([kernel.outputs[j].node for j in out_of[ALL]])
    if any(sp[i] == ELEM for i in row_order + col_order + all_order):
        raise LoweringError(f"row-column kernel {kernel.name}: an element value after a reduction")

    scratch = SplitScratch(f, symbol, [ty(i) for i in parts], 1, nblk, _skewed(n, nblk, parts, nodes), ub, ue, nblk)
    zero = i64(0)
    vl = _vector_lanes(kernel, row_reds + col_reds)
    vec = _vectorisable(kernel, elem_order) and n >= vl
    nfull, tail = divmod(n, vl if vec else LANES)
    group = _row_group(kernel, row_reds) if vec else 1
    if vec:  # one vl-wide vector per row reduction and row of a group
        vtile = {(i, q): f.alloca(ir.VectorType(ty(i), vl), name=f"v{i}.{q}") for i in row_reds
                 for q in range(group)}
    else:  # LANES scalar chains per row reduction (the SLP vectoriser's to combine)
        tiles = {i: [f.alloca(ty(i), name=f"t{i}.{lane}") for lane in range(LANES)] for i in row_reds}

    def splat(x):
        vt = ir.VectorType(x.type, vl)
        one = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, vl), [0] * vl))

    def halves(i, v):
        """Lane 0 of the pairwise fold of vector `v` by halves (lanes l and l + w/2, then
        of the half, ...): log2(vl) vector steps."""
        w = vl
        while w > 1:
            h = w // 2
            undef = ir.Constant(v.type, ir.Undefined)
            lo = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, h), list(range(h))))
            hi = b.shuffle_vector(v, undef, ir.Constant(ir.VectorType(I32, h), list(range(h, w))))
            v = vfold(i, lo, hi)
            w = h
        return b.extract_element(v, ir.Constant(I32, 0))

    def vfold(i, cur, x):
        return _fold(f, nodes[i].dtype, nodes[i].arg, cur, x)

    def evaluate_vec(base, j0) -> dict:
        """The element nodes at columns [j0, j0 + vl) of the row at `base`, as vectors
        (constants and values of the whole: scalars, splat where a vector op reads them)."""
        env: dict = {}
        scal: dict = {}
        for i in elem_order:
            nd = nodes[i]
            if sp[i] == ALL:
                scal[i] = emit_op(f, nd.op, nd.dtype, nd.arg, [scal[s] for s in nd.src],
                                  [nodes[s].dtype for s in nd.src])
                continue
            if nd.op == LOAD:
                v = views[nd.arg]
                mt = mem_type(nd.dtype)
                if v.strides[1] == 0:
                    x = splat(b.load(b.gep(ins[nd.arg], [base[nd.arg]])))
                else:
                    x = vload(b, b.gep(ins[nd.arg], [b.add(base[nd.arg], j0)]), ir.VectorType(mt, vl),
                              nd.dtype.itemsize)
                if nd.dtype.is_bool:
                    x = b.icmp_unsigned("!=", x, ir.Constant(x.type, None))
                env[i] = x
                continue
            xs = [env[s] if sp[s] != ALL else splat(scal[s]) for s in nd.src]
            env[i] = emit_op(f, nd.op, nd.dtype, nd.arg, xs, [nodes[s].dtype for s in nd.src])
        return env
    lanes_c = {i: [f.alloca(ty(i), name=f"c{i}.{lane}") for lane in range(LANES)] for i in all_col}
    acc_r = {i: f.alloca(ty(i), name=f"a{i}") for i in all_row}
    pc = {i: None for i in col_reds}

    def columns(step) -> None:
        """step(j, lane) for every column: LANES lanes per iteration, the tail unrolled."""
        full, rest = divmod(n, LANES)

        def chunk(jc):
            base = b.mul(jc, i64(LANES))
            for lane in range(LANES):
                step(b.add(base, i64(lane)), lane)
        if full:
            f.loop(zero, i64(full), chunk, "jc")
        for lane in range(rest):
            step(i64(full * LANES + lane), lane)

    def unit(u):
        r0 = b.mul(u, i64(rb))
        r1 = b.add(r0, i64(rb))
        r1 = b.select(b.icmp_signed("<", r1, i64(m)), r1, i64(m))
        for q, i in enumerate(col_reds):
            pc[i] = scratch.slot(q, zero, u, zero)
            f.loop(zero, i64(n), lambda j, i=i: b.store(ident(i), b.gep(pc[i], [j])), "ci")
        for i in all_row:
            b.store(ident(i), acc_r[i])

        def scalar_row(r):  # the scalar form: LANES chains per row reduction
            base = [b.add(i64(v.offset), b.mul(r, i64(v.strides[0]))) for v in views]
            for i in row_reds:
                for t in tiles[i]:
                    b.store(ident(i), t)

            def element(j, lane):
                env: dict = {}
                evaluate(elem_order, env, base, j)
                for i in row_reds:
                    t = tiles[i][lane]
                    b.store(fold(i, b.load(t), env[nodes[i].src[0]]), t)
                for i in col_reds:
                    p = b.gep(pc[i], [j])
                    b.store(fold(i, b.load(p), env[nodes[i].src[0]]), p)
            columns(element)
            finish_row(r, {i: _tree(f, nodes[i].dtype, nodes[i].arg, [b.load(t) for t in tiles[i]])
                           for i in row_reds})

        def vector_rows(rows):
            """Rows `rows` (consecutive) together: each column partial is loaded once,
            folded with the rows' values in row order, stored once."""
            bases = [[b.add(i64(v.offset), b.mul(r, i64(v.strides[0]))) for v in views] for r in rows]
            for q in range(len(rows)):
                for i in row_reds:
                    b.store(splat(ident(i)), vtile[i, q])

            def chunk(jc):  # vl columns of each row as vectors
                j0 = b.mul(jc, i64(vl))
                envs = [evaluate_vec(base, j0) for base in bases]
                for q, env in enumerate(envs):
                    for i in row_reds:
                        b.store(vfold(i, b.load(vtile[i, q]), env[nodes[i].src[0]]), vtile[i, q])
                for i in col_reds:
                    vt = ir.VectorType(ty(i), vl)
                    p = b.gep(pc[i], [j0])
                    acc = vload(b, p, vt, nodes[i].dtype.itemsize)
                    for env in envs:
                        acc = vfold(i, acc, env[nodes[i].src[0]])
                    vstore(b, acc, p, vt, nodes[i].dtype.itemsize)

            def element(j, lane):  # a tail column
                envs = []
                for base in bases:
                    env: dict = {}
                    evaluate(elem_order, env, base, j)
                    envs.append(env)
                for q, env in enumerate(envs):
                    for i in row_reds:
                        t = b.load(vtile[i, q])
                        x = fold(i, b.extract_element(t, ir.Constant(I32, lane)), env[nodes[i].src[0]])
                        b.store(b.insert_element(t, x, ir.Constant(I32, lane)), vtile[i, q])
                for i in col_reds:
                    p = b.gep(pc[i], [j])
                    acc = b.load(p)
                    for env in envs:
                        acc = fold(i, acc, env[nodes[i].src[0]])
                    b.store(acc, p)
            if nfull:
                f.loop(zero, i64(nfull), chunk, "jc")
            for lane in range(tail):
                element(i64(nfull * vl + lane), lane)
            for q, r in enumerate(rows):
                finish_row(r, {i: halves(i, b.load(vtile[i, q])) for i in row_reds})

        def finish_row(r, env):
            """Row r's reductions are `env`: its per-row values, outputs, full reductions."""
            evaluate(row_order, env)
            for j in out_of[ROW]:
                store(j, r, env[kernel.outputs[j].node])
            for i in all_row:
                b.store(fold(i, b.load(acc_r[i]), env[nodes[i].src[0]]), acc_r[i])

        if vec:  # groups of `group` rows, then the block's last rows one at a time
            ngrp = b.sdiv(b.sub(r1, r0), i64(group))
            f.loop(zero, ngrp, lambda g: vector_rows(
                [b.add(b.add(r0, b.mul(g, i64(group))), i64(q)) for q in range(group)]), "rg")
            f.loop(b.add(r0, b.mul(ngrp, i64(group))), r1, lambda r: vector_rows([r]), "r")
        else:
            f.loop(r0, r1, scalar_row, "r")
        for q, i in enumerate(all_row, len(col_reds)):
            b.store(b.load(acc_r[i]), scratch.slot(q, zero, u, zero))
        f.if_then(scratch.arrive(zero), finish)

    def finish():
        step = 1  # the blocks' partials: a pairwise tree, in place, into block 0
        while step < nblk:
            for c in range(0, nblk - step, 2 * step):
                for q, i in enumerate(parts):
                    width = n if q < len(col_reds) else 1
                    vw = vl if vec and width >= vl else 1  # vl lanes at a time, then the rest

                    def vlane(jv, q=q, i=i, c=c, step=step):
                        j = b.mul(jv, i64(vl))
                        vt = ir.VectorType(ty(i), vl)
                        pa, pb = scratch.slot(q, zero, c, j), scratch.slot(q, zero, c + step, j)
                        al = nodes[i].dtype.itemsize
                        vstore(b, vfold(i, vload(b, pa, vt, al), vload(b, pb, vt, al)), pa, vt, al)

                    def lane(j, q=q, i=i, c=c, step=step):
                        pa, pb = scratch.slot(q, zero, c, j), scratch.slot(q, zero, c + step, j)
                        b.store(fold(i, b.load(pa), b.load(pb)), pa)
                    done = width // vw * vw if vw > 1 else 0
                    if vw > 1:
                        f.loop(zero, i64(width // vw), vlane, "cmbv")
                    f.loop(i64(done), i64(width), lane, "cmb")
            step *= 2
        for i in all_col:
            for t in lanes_c[i]:
                b.store(ident(i), t)

        def column(j, lane):
            env = {i: b.load(scratch.slot(q, zero, zero, j)) for q, i in enumerate(col_reds)}
            evaluate(col_order, env)
            for jo in out_of[COL]:
                store(jo, j, env[kernel.outputs[jo].node])
            for i in all_col:
                t = lanes_c[i][lane]
                b.store(fold(i, b.load(t), env[nodes[i].src[0]]), t)
        if col_order:
            columns(column)
        env = {i: _tree(f, nodes[i].dtype, nodes[i].arg, [b.load(t) for t in lanes_c[i]]) for i in all_col}
        for q, i in enumerate(all_row, len(col_reds)):
            env[i] = b.load(scratch.slot(q, zero, zero, zero))
        evaluate(all_order, env)
        for j in out_of[ALL]:
            store(j, zero, env[kernel.outputs[j].node])

    f.loop(ub, ue, unit, "u")
    scratch.release()
    b.ret_void()
    f.finish()

    i8p = ir.PointerType(I8)
    fn = ir.Function(module, ir.FunctionType(VOID, [ir.PointerType(i8p), I64, I64]), symbol)
    eb = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs = [eb.bitcast(eb.load(eb.gep(fn.args[0], [i64(j)])), t) for j, t in enumerate(ptypes)]
    eb.call(body, ptrs + [fn.args[1], fn.args[2]])
    eb.ret_void()
    return Lowered(str(module), symbol, nblk, LoopPlan("rowcol", (), (), (), nblk, split=nblk))
