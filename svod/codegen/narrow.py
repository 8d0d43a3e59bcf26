"""Row reductions of short rows, read across rows (`LoopPlan.narrow`, `schedule.narrow_rows`).

``x.sum(axis=1)`` of a (1M, 16) float32 array is a million rows of 16 elements: as a loop
per row (the row lowering) LLVM vectorises the *row* loop instead, reading each column with
gathers, and reached 7-15% of the read bandwidth for rows of 12-99 elements, 56-78% for
2-8 (docs/codegen.md, "Short rows read across rows"). Here a vector block of ``V`` rows (the lanes of the
widest register of the dtype: 16 float32 with AVX-512) is read with contiguous vector
loads and reduced by shuffles:

* **packed** (the row length ``L`` padded to ``P``, the next power of two, ``P <= V``):
  ``P`` vectors hold the block, each ``R = V / P`` rows as segments of ``P`` lanes (one
  unaligned load of ``R·L`` elements and, when ``L < P``, one shuffle spreading the rows
  to their segments; lanes past ``L`` in a segment take the reduction's identity after the
  element values are computed);
* **wide** (``P > V``): each row is ``C = ceil(L / V)`` vector loads, folded in order
  into one vector (the last one's lanes past the row: the identity) -- ``V`` vectors of
  one row each, segments of ``V`` lanes;
* then a **halving tree**: pairs of vectors (A, B) become ``fold(lo, hi)`` where ``lo``
  takes the first half of every segment of A and then of B, ``hi`` the second halves;
  segments halve and rows double per vector at each level, until one vector holds the
  ``V`` rows' results in row order (``log2`` levels, two shuffles and one fold per pair).

Per row this is a fixed order -- the chunks in order, then lane ``c`` with ``c + w/2`` of
each width ``w`` -- that depends on ``L`` and ``V`` only. Rows outside whole vector blocks
(the last ``M mod V``, and the blocks whose last load would read past the input's last
row) take a scalar path computing the same tree, so every row's result is the same bits
wherever it lies and whichever thread runs it. A unit is `LoopPlan.narrow` rows (whole
blocks; about `NARROW_UNIT_BYTES` of input). Float sums fold with plain ``fadd`` (the
pad lanes' identity is ``-0.0``, and ``+ 0.0`` ends the row: a row of ``-0.0`` sums to
``+0.0`` as in numpy, which starts from ``+0.0``), float max/min
with numpy's NaN rule (`svod.codegen.rowcol._fold`). Element values (loads, constants,
``+ - *``, float ``neg`` and ``/``) are computed on the vectors before the fold, values
after the reductions (a mean's scale, ``sum(a, 1) - sum(b, 1)`` kept as two reductions)
on the vector of ``V`` row results, stored with one vector store.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from svod.codegen.irbuild import I1, I32, i64, reg_type, vload, vstore
from svod.codegen.rowcol import _fold
from svod.codegen.scalar import const, emit_op
from svod.codegen.schedule import closure, narrow_rows, narrow_uniform
from svod.ir import Ops
from svod.kernel import LOAD

__all__ = ["lower_narrow", "narrow_order"]


def _identity(dt, fn: str) -> ir.Constant:
    if fn == "sum":
        return const(dt, -0.0) if dt.is_float else const(dt, 0)
    if dt.is_float:
        return const(dt, -math.inf if fn == "max" else math.inf)
    info = __import__("numpy").iinfo(dt.np)
    return const(dt, int(info.min if fn == "max" else info.max))


def narrow_order(n: int, lanes: int) -> list:
    """The fold order of one row of `n` elements read `lanes` rows at a time, as a nested
    pair tree of column indices (None: an identity lane), for the docs and the tests."""
    p = 1 << (n - 1).bit_length()
    if p <= lanes:
        vals: list = [c if c < n else None for c in range(p)]
    else:
        vals = []
        for lane in range(lanes):
            acc = lane
            for c in range(1, -(-n // lanes)):
                if c * lanes + lane < n:
                    acc = (acc, c * lanes + lane)
            vals.append(acc)
    while len(vals) > 1:
        h = len(vals) // 2
        vals = [vals[c] if vals[c + h] is None else vals[c + h] if vals[c] is None else (vals[c], vals[c + h])
                for c in range(h)]
    return vals[0]


def lower_narrow(low) -> None:
    """Emit the body of narrow row reduce `low.k` (a `KernelLowering`): units of
    `plan.narrow` rows, vector blocks of V rows, scalar rows for the rest."""
    k, f = low.k, low.f
    b = f.b
    plan = low.plan
    rax, cax = plan.axes
    m, n = rax.size, cax.size
    lanes = narrow_rows(k, plan.axes, low.sched.target)
    assert lanes, f"kernel {k.name} is not a narrow row reduce"
    nodes = k.nodes
    dt = nodes[0].dtype
    ty = reg_type(dt)
    vt = ir.VectorType(ty, lanes)
    isz = dt.itemsize
    p = 1 << (n - 1).bit_length()
    packed = p <= lanes
    chunks = 1 if packed else -(-n // lanes)
    per_row = low.sched.per_row
    uniform = narrow_uniform(k)
    reds = [i for i, nd in enumerate(nodes) if nd.op is Ops.REDUCE]
    elem = sorted(closure(k, [nodes[i].src[0] for i in reds], per_row))
    row_nodes = [i for i in range(len(nodes)) if i not in elem and not uniform[i]]
    uni_nodes = [i for i in range(len(nodes)) if uniform[i]]
    strides = {}
    for j, acc in enumerate(low.sched.accesses):
        st = dict(acc.terms)
        strides[j] = (acc.offset, st.get(rax.dims, 0), st.get(cax.dims, 0))
    for j, o in enumerate(k.outputs):
        assert o.reduced and dict(low.out_access[j].terms).get(rax.dims) == 1, "narrow reduce output not per row"
    # a vector block reads exactly its rows (n aligned vectors of `lanes` elements); a rows
    # variant (svod/codegen/rows.py) reads its row count at run time
    rows_m = i64(m) if low.rows_m is None else low.rows_m
    safe_blocks = b.udiv(rows_m, i64(lanes))

    def splat(x):
        one = b.insert_element(ir.Constant(vt, ir.Undefined), x, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(vt, ir.Undefined), ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))

    def op(i, xs):
        nd = nodes[i]
        return emit_op(f, nd.op, nd.dtype, nd.arg, xs, [nodes[s].dtype for s in nd.src])

    def fold(i, cur, x):
        return _fold(f, dt, nodes[i].arg, cur, x)

    def signed_zero(i, v, vector: bool):
        """numpy's float sum starts from +0.0: a row of -0.0 sums to +0.0 (v + 0.0; any
        other value, NaN included, unchanged)."""
        if nodes[i].arg != "sum" or not dt.is_float:
            return v
        return b.fadd(v, splat(const(dt, 0.0)) if vector else const(dt, 0.0))

    def lane_mask(valid: list[bool]):
        return ir.Constant(ir.VectorType(I1, lanes), [1 if v else 0 for v in valid])

    # per unit: the uniform values (scalars) and the column-broadcast inputs' vectors
    def unit(u):
        r0 = b.mul(u, i64(plan.narrow))
        r1 = b.add(r0, i64(plan.narrow))
        r1 = b.select(b.icmp_signed("<", r1, rows_m), r1, rows_m)
        scal: dict[int, ir.Value] = {}
        for i in uni_nodes:
            nd = nodes[i]
            if nd.op == LOAD:
                scal[i] = b.load(b.gep(low.in_ptrs[nd.arg], [i64(strides[nd.arg][0])]))
            else:
                scal[i] = op(i, [scal[s] for s in nd.src])
        colvec: dict[tuple, ir.Value] = {}  # (input, columns) -> that vector of a broadcast row

        def column(j, c):
            return b.load(b.gep(low.in_ptrs[j], [i64(strides[j][0] + c)]))

        colval: dict[tuple[int, int], ir.Value] = {}

        def column_vector(j, cols):
            if (j, cols) not in colvec:
                v = ir.Constant(vt, ir.Undefined)
                for q_, c in enumerate(cols):
                    if (j, c) not in colval:
                        colval[j, c] = column(j, c)
                    v = b.insert_element(v, colval[j, c], ir.Constant(I32, q_))
                colvec[j, cols] = v
            return colvec[j, cols]

        def vec_elements(q, flat: list, src: dict):
            """The element nodes on one vector whose lane l holds the block's element
            `flat[l]` (row-major index from the block's first row `q`; None: a pad lane);
            `src`: the block's aligned source vectors loaded so far, per (input, index)."""
            env: dict[int, ir.Value] = {}
            cols = tuple((x % n) if x is not None else 0 for x in flat)
            for i in elem:
                nd = nodes[i]
                if nd.op == LOAD:
                    off, rs, cs = strides[nd.arg]
                    if rs == 0:
                        env[i] = column_vector(nd.arg, cols)
                        continue
                    env[i] = spread(nd.arg, off, q, flat, src)
                else:
                    env[i] = op(i, [env[s] if s in env else splat(scal[s]) for s in nd.src])
            return env

        def spread(j, off, q, flat, src):
            """Lanes `flat` of input j's block, from at most two of its aligned vectors."""
            used = sorted({x // lanes for x in flat if x is not None})
            assert 1 <= len(used) <= 2, (flat, used)
            vs = []
            for t in used:
                if (j, t) not in src:
                    ptr = b.gep(low.in_ptrs[j], [b.add(i64(off + t * lanes), b.mul(q, i64(n)))])
                    src[j, t] = vload(b, ptr, vt, isz)
                vs.append(src[j, t])
            idx = [used[0] * lanes if x is None else x for x in flat]
            mask = [x - used[0] * lanes for x in idx]
            if len(used) == 1 and mask == list(range(lanes)):
                return vs[0]
            other = vs[1] if len(vs) > 1 else ir.Constant(vt, ir.Undefined)
            return b.shuffle_vector(vs[0], other, ir.Constant(ir.VectorType(I32, lanes), mask))

        def pair(i, a, c, w: int):
            """Vectors a, c of segments of width w -> one of width w/2 (rows of a, then of c)."""
            h = w // 2
            segs = lanes // w
            lo = [s_ * w + x for s_ in range(segs) for x in range(h)]
            hi = [s_ * w + h + x for s_ in range(segs) for x in range(h)]
            mlo = ir.Constant(ir.VectorType(I32, lanes), lo + [lanes + x for x in lo])
            mhi = ir.Constant(ir.VectorType(I32, lanes), hi + [lanes + x for x in hi])
            return fold(i, b.shuffle_vector(a, c, mlo), b.shuffle_vector(a, c, mhi))

        def push(i, stack: list, v, w: int) -> None:
            """The halving tree, emitted as its vectors arrive (a binary counter: the same
            pairs as level by level, fewer vectors live at once)."""
            lvl = 0
            while stack and stack[-1][0] == lvl:
                v = pair(i, stack.pop()[1], v, w >> lvl)
                lvl += 1
            stack.append((lvl, v))

        def block(jb):
            q = b.mul(jb, i64(lanes))
            parts: dict[int, list] = {i: [] for i in reds}
            src: dict = {}
            if packed:
                rpv = lanes // p  # rows per vector
                pad = lane_mask([q_ % p < n for q_ in range(lanes)])
                for vi in range(p):
                    flat = [(vi * rpv + q_ // p) * n + q_ % p if q_ % p < n else None for q_ in range(lanes)]
                    env = vec_elements(q, flat, src)
                    for i in reds:
                        x = env[nodes[i].src[0]]
                        if n != p:
                            x = b.select(pad, x, splat(_identity(dt, nodes[i].arg)))
                        push(i, parts[i], x, p)
            else:
                for r in range(lanes):
                    acc: dict[int, ir.Value] = {}
                    for c in range(chunks):
                        flat = [r * n + c * lanes + q_ if c * lanes + q_ < n else None for q_ in range(lanes)]
                        env = vec_elements(q, flat, src)
                        for i in reds:
                            x = env[nodes[i].src[0]]
                            if (c + 1) * lanes > n:
                                x = b.select(lane_mask([c * lanes + q_ < n for q_ in range(lanes)]), x,
                                             splat(_identity(dt, nodes[i].arg)))
                            acc[i] = x if c == 0 else fold(i, acc[i], x)
                    for i in reds:
                        push(i, parts[i], acc[i], lanes)
            assert all(len(st) == 1 for st in parts.values())
            env = {i: signed_zero(i, parts[i][0][1], True) for i in reds}
            finish(env, q, vector=True)

        def finish(env, q, vector: bool):
            """Values after the reductions (rows from `q`: V of them as vectors, or one) and
            the stores."""
            for i in row_nodes:
                if i in env:
                    continue
                nd = nodes[i]
                if nd.op == LOAD:
                    off, rs, cs = strides[nd.arg]
                    ptr = b.gep(low.in_ptrs[nd.arg], [b.add(i64(off), q)])
                    env[i] = vload(b, ptr, vt, isz) if vector else b.load(ptr)
                else:
                    env[i] = op(i, [env[s] if s in env else (splat(scal[s]) if vector else scal[s]) for s in nd.src])
            for j, o in enumerate(k.outputs):
                v = env[o.node] if o.node in env else (splat(scal[o.node]) if vector else scal[o.node])
                ptr = b.gep(low.out_ptrs[j], [q])
                if vector:
                    vstore(b, v, ptr, vt, isz)
                else:
                    b.store(v, ptr)

        def scalar_row(r):
            env: dict[int, ir.Value] = {}
            cols: list[dict] = []
            for c in range(n):
                e: dict[int, ir.Value] = {}
                for i in elem:
                    nd = nodes[i]
                    if nd.op == LOAD:
                        off, rs, cs = strides[nd.arg]
                        e[i] = column(nd.arg, c) if rs == 0 else \
                            b.load(b.gep(low.in_ptrs[nd.arg], [b.add(i64(off + c), b.mul(r, i64(n)))]))
                    else:
                        e[i] = op(i, [e[s] if s in e else scal[s] for s in nd.src])
                cols.append(e)
            for i in reds:
                src = nodes[i].src[0]
                row = _scalar_tree(lambda x, y, i=i: fold(i, x, y), [e[src] for e in cols], lanes)
                env[i] = signed_zero(i, row, False)
            finish(env, r, vector=False)

        for i in elem:  # the broadcast rows' vectors, before the loop (each block reads them)
            nd = nodes[i]
            if nd.op == LOAD and strides[nd.arg][1] == 0:
                for c in range(chunks):
                    column_vector(nd.arg, tuple(q_ % p % n if packed else (c * lanes + q_) % n for q_ in range(lanes)))
        first = b.udiv(r0, i64(lanes))
        last = b.udiv(r1, i64(lanes))
        last = b.select(b.icmp_signed("<", last, safe_blocks), last, safe_blocks)
        f.loop(first, last, block, "nb")
        rest = b.mul(last, i64(lanes))
        rest = b.select(b.icmp_signed("<", rest, r0), r0, rest)
        f.loop(rest, r1, scalar_row, "nr")

    f.loop(low.ub, low.ue, unit, "nu")


def _scalar_tree(fold, xs: list, lanes: int):
    """One row's values `xs` folded in the vector path's order (`narrow_order`)."""
    n = len(xs)
    p = 1 << (n - 1).bit_length()
    if p <= lanes:
        vals: list = [xs[c] if c < n else None for c in range(p)]
    else:
        vals = []
        for lane in range(lanes):
            acc = xs[lane]
            for c in range(1, -(-n // lanes)):
                if c * lanes + lane < n:
                    acc = fold(acc, xs[c * lanes + lane])
            vals.append(acc)
    while len(vals) > 1:
        h = len(vals) // 2
        vals = [vals[c] if vals[c + h] is None else vals[c + h] if vals[c] is None else fold(vals[c], vals[c + h])
                for c in range(h)]
    return vals[0]
