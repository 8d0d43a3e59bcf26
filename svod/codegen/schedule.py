"""Codegen's decisions for a kernel on a target, made once: the `Schedule`.

`schedule(kernel, target)` computes everything the emitter decides before it writes IR,
and the cost models count over the same object:

* the loop plan (`LoopPlan`: merged axes, units, chunking, column reduce, split
  reduction) and how every input and VALID mask reads the loop space (`Access`);
* the masked-loop segments (`Schedule.segments`, the pieces a loop is cut into where a
  mask starts or ends) and which loops are emitted cut (`row_pieces`, `elementwise_pieces`);
* for reductions: per-row values (`per_row`), the nodes each pass evaluates per element
  (`closures`), the stash (`stash`: expensive values the first pass keeps in a row buffer);
* GEMM tiling (`gemm_config`, `plan_gemm`) and the attention kernel's units.

Pure: no llvmlite import (`tests/test_schedule.py` checks), nothing compiled; the
constants below are the emitter's (svod/codegen/lower.py, columns.py, split.py, gemm.py,
attention.py read them from here). Schedules are cached by (kernel content key,
target); `clear_cache()` forgets them (a test that changes a constant calls it).

>>> from svod.kernel_examples import softmax_kernel
>>> s = schedule(softmax_kernel(4, 8))
>>> s.loops.kind, s.loops.units, sorted(s.stash.values())
('rowwise', 4, [1])
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field

from svod.codegen.target import Target, host_target
from svod.ir import REDUCTIONS, Ops
from svod.kernel import LOAD, VALID, Kernel, view_axes_stride0
from svod.ops import long_latency
from svod.view import View, ViewChain

LOWER_VERSION = "11"  # bump when generated code changes meaning (part of the object-cache key)
CHUNK = 4096  # elements per unit of a one-axis elementwise kernel
STREAM_VECTORS = 8  # vectors of a streaming elementwise kernel's block (computed into L1, then stored)
SUM_BLOCK = 256  # elements per float-sum block (vector accumulators inside, cascade across)
CASCADE_LEVELS = 64  # levels of a float sum's block cascade (2**64 blocks)
MAX_SEGMENTS = 8  # most pieces a loop is cut into at mask boundaries, or blocks unrolled
ILP_INTERLEAVE = 4  # vectors in flight in an elementwise loop with a long chain
STASH_ELEMS = 16384  # longest row whose expensive values are kept between passes (64 KB f32)
COL_BLOCK = 256  # fewest columns per unit of a column reduce (when the tiles budget allows more, more)
COL_TILE_BYTES = 64 << 10  # accumulator tiles of a column-reduce unit (L1/L2): as many columns as fit
COL_GROUPS = 8  # least units of a multi-pass column reduce (its rows cannot be cut)
ROW_UNROLL = 8  # rows of a column reduce combined pairwise before they meet the tile (a power of two)
CHAN_UNROLL = 8  # rows of a variance's sub-chunk combined pairwise before they meet the tiles (a power of two)
CHAN_BYTES = 0  # input a variance's column sub-chunk reads twice from cache (columns.py); 0: half the L2
TILE_SKEW = 576  # bytes between column-reduce tiles past a 4 KiB boundary (columns.py)
SPLIT_MIN_BYTES = 1 << 20  # least input a chunk of a split reduction reads (svod/codegen/split.py)
SPLIT_MAX_CHUNKS = 32  # most chunks a split reduction's axis is cut into
SPLIT_MAX_ROWS = 16  # a reduce kernel with fewer rows than this cuts its rows into chunks
SPLIT_SCRATCH_MAX = 8 << 20  # most bytes of partial results one kernel keeps (globals)
FLAT_VAR_BYTES = 2 << 20  # least input a variance of every element reads as columns, once (`flat_variance`)
FLAT_VAR_COLS = 16  # columns it reads it as (a power of two: one zmm of float32; docs/codegen.md)
FLAT_VAR_MIN_COLS = 8  # fewest, when FLAT_VAR_COLS does not divide its length
FLAT_VAR_MAX_CHUNKS = 1024  # most chunks (units) its rows are cut into
NARROW_MAX = 99  # longest row a row reduce reads across rows (`narrow_rows`, svod/codegen/narrow.py; docs)
NARROW_UNIT_BYTES = 128 << 10  # input a unit of such a reduce reads (whole vector blocks of rows)
MM_ROWS = 16  # integer/bool matmul rows per unit (float matmuls: the GEMM tiling below)
MM_COLS = 256  # integer/bool matmul columns per accumulator tile
SMALL_FLOPS = 2e6  # a BLAS step below this many flops runs as one call on the calling thread (~25 µs)
# ops whose element is a long dependency chain (a polynomial, a divide, a square root):
# their values are stashed between passes, and elementwise loops computing them interleave
COSTLY_OPS = long_latency()  # svod/ops.py's `latency` column



# ----------------------------------------------------------------------------- loop plan


@dataclass(frozen=True)
class Axis:
    """A merged loop axis: original kernel axes `dims` (outer first), `size` in total."""

    dims: tuple[int, ...]
    size: int
    reduce: bool


@dataclass(frozen=True)
class LoopPlan:
    kind: str  # elementwise | reduce | rowwise | matmul | blas | library | attention
    axes: tuple[Axis, ...]  # merged non-size-1 axes in kernel order
    unit_axes: tuple[Axis, ...]  # enumerated by units (row-major)
    inner_axes: tuple[Axis, ...]  # looped inside a unit
    units: int
    chunk: int = 0  # > 0: one-axis elementwise kernel, a unit is `chunk` elements
    cols: int = 0  # > 0: column reduce, a unit is (outer kept index, block of `cols` columns)
    split: int = 0  # > 1: the outermost reduce axis is cut into `split` chunks of `chunk_len`
    chunk_len: int = 0  # (a unit is (group, chunk), partials combined: svod/codegen/split.py)
    narrow: int = 0  # > 0: short rows reduced across rows, a unit is `narrow` rows (svod/codegen/narrow.py)


def _outer_views(kernel: Kernel) -> list[View]:
    """The views that index the kernel space directly (they decide which axes merge)."""
    out = []
    for inp in kernel.inputs:
        if not any(v.fully_masked for v in inp.view.views):
            out.append(inp.view.views[-1])
    for n in kernel.nodes:
        if n.op == VALID and not any(v.fully_masked for v in n.arg.views):
            out.append(n.arg.views[-1])
    return out


def merge_axes(shape: tuple[int, ...], views: list[View], reduce_axes: tuple[int, ...] = ()) -> list[Axis]:
    """Drop size-1 axes; merge adjacent axes of one class (kept/reduced) when every view
    reads them as one strided axis (outer stride = inner stride * inner size, inner unmasked)."""
    red = set(reduce_axes)
    dims = [d for d, n in enumerate(shape) if n != 1]
    groups: list[list[int]] = []
    for d in dims:
        if groups:
            prev = groups[-1][-1]
            ok = (prev in red) == (d in red)
            for v in views:
                lo, hi = v.valid_box()[d]
                if v.strides[prev] != v.strides[d] * shape[d] or (lo, hi) != (0, shape[d]):
                    ok = False
                    break
            if ok:
                groups[-1].append(d)
                continue
        groups.append([d])
    return [Axis(tuple(g), math.prod(shape[d] for d in g), g[0] in red) for g in groups]


def plan_loops(kernel: Kernel, target: Target | None = None) -> LoopPlan:
    """The loop nest and unit count of a kernel (cheap: no IR)."""
    target = target or host_target()
    kind = kernel.kind
    if kind == "library":  # numpy's code, no loops of ours (svod/library.py)
        return LoopPlan(kind, (), (), (), 1)
    if kind == "attention":
        return LoopPlan(kind, (), (), (), attention_units(kernel, target))
    if kind == "mlp":  # row blocks, two GEMMs each (svod/codegen/mlp.py)
        return LoopPlan(kind, (), (), (), mlp_units(kernel, target))
    if kind == "rmsnorm":  # the GEMM's unit tiles, A packed from the row prologue (svod/codegen/rmsnorm.py)
        rs = kernel.rmsnorm
        isz = kernel.inputs[rs.w].dtype.itemsize
        return LoopPlan(kind, (), (), (), gemm_tiling(1, rs.m, rs.n, rs.k, isz, target).units if kernel.size else 0)
    if kind == "rowcol":  # blocks of rows, their column partials combined (svod/codegen/rowcol.py)
        nblk = rowcol_blocks(kernel)[1]
        return LoopPlan(kind, (), (), (), nblk, split=nblk)
    if kind in ("matmul", "blas"):
        mm = kernel.matmul
        batch = math.prod(kernel.shape[:-2])
        units = 1 if kind == "blas" else batch * -(-mm.m // MM_ROWS)
        if supports_gemm(kernel):
            units = plan_gemm(kernel, target).units
        if kernel.size == 0:
            units = 0
        return LoopPlan(kind, (), (), (), units)
    if kernel.size == 0:
        kept = math.prod(n for d, n in enumerate(kernel.shape) if d not in kernel.reduce_axes)
        if kind == "elementwise" or kept == 0:
            return LoopPlan(kind, (), (), (), 0)
    axes = merge_axes(kernel.shape, _outer_views(kernel), kernel.reduce_axes)
    if kind == "elementwise":
        if not axes:
            return LoopPlan(kind, (), (), (), 1 if kernel.size else 0)
        if len(axes) == 1:
            return LoopPlan(kind, tuple(axes), (), tuple(axes), -(-axes[0].size // CHUNK), CHUNK)
        return LoopPlan(kind, tuple(axes), tuple(axes[:-1]), (axes[-1],), math.prod(a.size for a in axes[:-1]))
    unit_axes = tuple(a for a in axes if not a.reduce)
    inner = tuple(a for a in axes if a.reduce)
    flat = flat_variance(kernel, axes)
    if flat:  # a variance of every element: its one axis read as rows of `flat` columns (columns.py)
        rows = axes[0].size // flat
        isz = max([i.dtype.itemsize for i in kernel.inputs] + [1])
        # chunks of >= SPLIT_MIN_BYTES: a chunk's M2 adds its sub-chunks' in order, so
        # up to FLAT_VAR_MAX_CHUNKS of them keep that chain short (then pairwise)
        clen, chunks = chunking(rows, flat, SUM_BLOCK, max(1, SPLIT_MIN_BYTES // isz), FLAT_VAR_MAX_CHUNKS)
        if chunks * flat * _partial_bytes(kernel) > SPLIT_SCRATCH_MAX:
            clen, chunks = rows, 1
        return LoopPlan(kind, tuple(axes), (), inner, chunks, cols=flat, split=chunks if chunks > 1 else 0,
                        chunk_len=clen if chunks > 1 else 0)
    if column_reduce(kernel, axes):
        last = axes[-1]
        cols = _column_width(kernel, last.size, math.prod(a.size for a in unit_axes[:-1]))
        groups = math.prod(a.size for a in unit_axes[:-1]) * -(-last.size // cols)
        inner_rest = math.prod(a.size for a in inner[1:])
        clen, chunks = _split_chunks(kernel, inner[0].size, cols * inner_rest, column=True)
        one_read = kernel.passes == 1 or (len(inner) == 1 and chan_variance(kernel) is not None)
        if not one_read or chunks * groups * cols * _partial_bytes(kernel) > SPLIT_SCRATCH_MAX:
            clen, chunks = inner[0].size, 1
        return LoopPlan(kind, tuple(axes), unit_axes, inner, groups * chunks, cols=cols,
                        split=chunks if chunks > 1 else 0, chunk_len=clen if chunks > 1 else 0)
    rows = math.prod(a.size for a in unit_axes)
    lanes = narrow_rows(kernel, axes, target)
    if lanes:
        item = kernel.inputs[0].dtype.itemsize
        per = max(lanes, NARROW_UNIT_BYTES // (axes[1].size * item) // lanes * lanes)
        return LoopPlan(kind, tuple(axes), unit_axes, inner, -(-rows // per), narrow=per)
    if _row_split(kernel, axes) and rows < SPLIT_MAX_ROWS:
        clen, chunks = _split_chunks(kernel, inner[0].size, math.prod(a.size for a in inner[1:]))
        if chunks > 1:
            return LoopPlan(kind, tuple(axes), unit_axes, inner, rows * chunks, split=chunks, chunk_len=clen)
    # a reduce axis of size 0 is dropped by nothing above: keep it so the loop runs 0 times
    return LoopPlan(kind, tuple(axes), unit_axes, inner, rows)


def _tile_bytes(kernel: Kernel) -> int:
    """Bytes of accumulator per column of a column reduce (a float sum keeps a block tile
    and a total)."""
    n = 0
    for node in kernel.nodes:
        if node.op is Ops.REDUCE:
            n += node.dtype.itemsize * (2 if node.arg == "sum" and node.dtype.is_float else 1)
    return max(n, 1)


def _column_width(kernel: Kernel, ncols: int, outer: int) -> int:
    """Columns per column-reduce unit: whole rows when their tiles fit `COL_TILE_BYTES`
    (a unit then streams memory sequentially), else as many as fit, a multiple of 64. A
    multi-pass kernel cannot cut its rows (a pass needs the whole column's earlier
    results), so there the columns are cut into at least `COL_GROUPS` blocks (`outer`
    kept indices count) of at least `COL_BLOCK` columns, for the threads."""
    fit = COL_TILE_BYTES // _tile_bytes(kernel)
    width = ncols if ncols <= fit else max(COL_BLOCK, fit // 64 * 64)
    if kernel.passes > 1 and outer * -(-ncols // width) < COL_GROUPS and chan_variance(kernel) is None:
        want = -(-ncols // max(1, COL_GROUPS // max(outer, 1)))
        width = min(width, max(COL_BLOCK, -(-want // 64) * 64))
    return width


def _partial_bytes(kernel: Kernel) -> int:
    """Bytes of partial result per column of a split chunk (a variance also keeps its
    mean's low part, `ColumnLowering._chan_unit`)."""
    n = sum(n.dtype.itemsize for n in kernel.nodes if n.op is Ops.REDUCE)
    chan = chan_variance(kernel)
    return n + (kernel.nodes[chan[0]].dtype.itemsize if chan else 0)


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


def _split_chunks(kernel: Kernel, length: int, row_elems: int, column: bool = False) -> tuple[int, int]:
    """Chunks of the outermost reduce axis (its length `length`, `row_elems` elements per
    index): at least `SPLIT_MIN_BYTES` of input each, whole `SUM_BLOCK`s, at most
    `SPLIT_MAX_CHUNKS`. Depends on the shapes only, never on the thread count."""
    if any(n.op is Ops.REDUCE and n.dtype.kind == "c" for n in kernel.nodes):
        return length, 1  # a complex product's partials would need a complex combine: one chunk
    isz = max([i.dtype.itemsize for i in kernel.inputs] + [1])
    # whole SUM_BLOCKs: a row's float sum is blocked along its only axis, a column reduce's
    # along the outer reduce axis; then a chunk's blocks are the unsplit kernel's blocks
    has_float_sum = any(n.op is Ops.REDUCE and n.arg == "sum" and n.dtype.is_float for n in kernel.nodes)
    align = SUM_BLOCK if (row_elems == 1 or column) and has_float_sum else 1
    return chunking(length, row_elems, align, max(1, SPLIT_MIN_BYTES // isz), SPLIT_MAX_CHUNKS)


def _plain_reductions(kernel: Kernel) -> bool:
    """Every output reduced, every reduction a plain REDUCE (an ARGMAX's partial would
    need its index)."""
    if any(not o.reduced for o in kernel.outputs):
        return False
    return all(n.op is Ops.REDUCE for n in kernel.nodes if n.op in REDUCTIONS)


def _row_split(kernel: Kernel, axes: list[Axis]) -> bool:
    """A single-pass reduce of plain reductions may cut its rows into chunks."""
    if kernel.kind != "reduce" or kernel.passes != 1 or not any(a.reduce for a in axes):
        return False
    return _plain_reductions(kernel)


NARROW_OPS = (Ops.ADD, Ops.SUB, Ops.MUL)  # element and per-row ops a narrow reduce computes on vectors
NARROW_FLOAT_OPS = (Ops.NEG, Ops.DIV)


def narrow_rows(kernel: Kernel, axes: list[Axis] | tuple[Axis, ...], target: Target | None = None) -> int:
    """Vector lanes (rows per vector block) when a row reduce is read across rows
    (svod/codegen/narrow.py), else 0: a single-pass reduce over one merged axis of
    2..`NARROW_MAX` elements under one merged axis of at least a vector's worth of rows;
    sum, max or min of float32/64 or int32/64, every node of that one dtype; the nodes
    loads, constants and `NARROW_OPS` (float: `NARROW_FLOAT_OPS`); each input one
    unmasked view reading rows contiguously (row stride = row length, unit stride along
    it), or broadcast along the rows (a vector of the row's length, or a scalar), or --
    only after the reductions -- a per-row vector (unit stride along the rows) or a scalar.
    Rows that short are otherwise a loop of a few iterations per row, which LLVM
    vectorises across rows with gathers (10-70% of the read bandwidth, docs/codegen.md)."""
    if kernel.kind != "reduce" or kernel.passes != 1 or len(axes) != 2 or axes[0].reduce or not axes[1].reduce:
        return 0
    n = axes[1].size
    if not 2 <= n <= NARROW_MAX or not _plain_reductions(kernel) or not kernel.inputs:
        return 0
    nodes = kernel.nodes
    dt = nodes[0].dtype
    if dt.is_bool or dt.is_complex or dt.itemsize not in (4, 8) or any(nd.dtype != dt for nd in nodes):
        return 0
    lanes = max(2, gemm_config(4, target).vw * 4 // dt.itemsize)
    if axes[0].size < lanes:
        return 0
    per_row = per_row_nodes(kernel)
    elem = closure(kernel, [nd.src[0] for nd in nodes if nd.op is Ops.REDUCE], per_row)
    for i, nd in enumerate(nodes):
        if nd.op is Ops.REDUCE:
            if nd.arg not in ("sum", "max", "min"):
                return 0
        elif nd.op == LOAD:
            inp = kernel.inputs[nd.arg]
            if len(inp.view.views) != 1 or inp.view.views[0].mask is not None:
                return 0
            acc = make_access(inp.view, [a.dims for a in axes])
            if acc.dead or acc.masked or acc.offset < 0:
                return 0
            st = dict(acc.terms)
            rs, cs = st.get(axes[0].dims, 0), st.get(axes[1].dims, 0)
            ok = (rs, cs) in ((n, 1), (0, 1), (0, 0)) if i in elem else (rs, cs) in ((0, 0), (1, 0))
            if not ok:
                return 0
        elif nd.op is not Ops.CONST and not (nd.op in NARROW_OPS or (nd.op in NARROW_FLOAT_OPS and dt.is_float)):
            return 0
        if i not in elem and not per_row[i]:
            return 0
    # a value that varies by row feeding the elements would need expanding to the lanes
    uniform = narrow_uniform(kernel)
    if any(not uniform[s] for i in elem for s in nodes[i].src if s not in elem):
        return 0
    return lanes


def narrow_uniform(kernel: Kernel) -> list[bool]:
    """Nodes of one value for the whole kernel: constants, loads broadcast along every
    axis, what only they feed (a narrow reduce computes them once, as scalars)."""
    out: list[bool] = []
    for nd in kernel.nodes:
        if nd.op == LOAD:
            v = kernel.inputs[nd.arg].view.views[-1]
            out.append(all(s == 0 or n == 1 for s, n in zip(v.strides, v.shape)))
        elif nd.op is Ops.CONST:
            out.append(True)
        elif nd.op in REDUCTIONS or nd.op == VALID:
            out.append(False)
        else:
            out.append(all(out[s] for s in nd.src))
    return out


def column_reduce(kernel: Kernel, axes: list[Axis] | tuple[Axis, ...]) -> bool:
    """Reductions over outer axes with a kept innermost axis (sum(x, axis=0), var(x,
    axis=0)): walking each output's column would stride through memory; instead a unit
    keeps a block of columns' accumulators and streams the rows, once per pass."""
    if kernel.kind not in ("reduce", "rowwise") or not axes or axes[-1].reduce:
        return False
    if not any(a.reduce and a.size > 0 for a in axes) or axes[-1].size < 2:
        return False
    return _plain_reductions(kernel)


def chan_variance(kernel: Kernel) -> tuple[int, int, int] | None:
    """(sum node, sum-of-squares node, element node) when `kernel` is a variance over its
    reduce axes in the two-pass form the frontend builds: pass 0 ``s1 = sum(x)``, pass 1
    ``s2 = sum((x - s1 / N) * (x - s1 / N))`` with N the reduce size, float. Such a column
    reduce may read its input once: per sub-chunk of rows in cache, the sub-chunk's mean
    and squared deviations, merged with Chan's formula (`ColumnLowering._chan_unit`)."""
    if kernel.passes != 2 or any(not o.reduced for o in kernel.outputs):
        return None
    nodes = kernel.nodes
    reds = [i for i, n in enumerate(nodes) if n.op in REDUCTIONS]
    if len(reds) != 2 or any(nodes[i].op is not Ops.REDUCE or nodes[i].arg != "sum" or not nodes[i].dtype.is_float
                             for i in reds):
        return None
    r1, r2 = sorted(reds, key=lambda i: nodes[i].pass_)
    if nodes[r1].pass_ != 0 or nodes[r2].pass_ != 1 or nodes[r1].dtype != nodes[r2].dtype:
        return None
    q = nodes[nodes[r2].src[0]]
    if q.op is not Ops.MUL or q.src[0] != q.src[1]:
        return None
    d = nodes[q.src[0]]
    if d.op is not Ops.SUB or d.src[0] != nodes[r1].src[0]:
        return None
    m = nodes[d.src[1]]
    n_red = math.prod(kernel.shape[a] for a in kernel.reduce_axes)
    if m.op is not Ops.DIV or m.src[0] != r1 or nodes[m.src[1]].op is not Ops.CONST:
        return None
    if float(nodes[m.src[1]].arg) != float(n_red) or n_red < 2:
        return None
    if nodes[d.src[0]].dtype != nodes[r1].dtype:
        return None
    return r1, r2, d.src[0]


def flat_variance(kernel: Kernel, axes: list[Axis] | tuple[Axis, ...]) -> int:
    """Columns a variance of every element (`chan_variance`, its reduce axes merged into
    one axis of n elements, float32/float64) is read as, or 0: the axis as n / cols rows
    of cols columns, a column variance of each in one read, split over the threads, and
    the columns' (mean, M2) merged (`ColumnLowering._lower_flat_variance`). Else it is
    one unit reading x twice. cols: `FLAT_VAR_COLS`, halved down to `FLAT_VAR_MIN_COLS`
    until it divides n (few columns: one sequential stream, the tiles in registers);
    taken from `FLAT_VAR_BYTES` of input."""
    if kernel.kind not in ("reduce", "rowwise") or len(axes) != 1 or not axes[0].reduce:
        return 0
    chan = chan_variance(kernel)
    if chan is None or kernel.nodes[chan[0]].dtype.itemsize not in (4, 8):
        return 0
    n = axes[0].size
    if n * max([i.dtype.itemsize for i in kernel.inputs] + [1]) < FLAT_VAR_BYTES:
        return 0
    cols = FLAT_VAR_COLS
    while cols > FLAT_VAR_MIN_COLS and n % cols:
        cols //= 2
    return cols if n % cols == 0 and n // cols >= 2 else 0


def chan_rows(target: Target, cols: int, itemsize: int) -> int:
    """Rows of a variance's column sub-chunk: its `cols` columns of input within
    `CHAN_BYTES` (default half the L2, within [128 KiB, 1 MiB]), at least `ROW_UNROLL`,
    at most `SUM_BLOCK`."""
    budget = CHAN_BYTES or min(1 << 20, max(128 << 10, target.l2 // 2))
    return min(SUM_BLOCK, max(ROW_UNROLL, budget // max(1, cols * itemsize)))


# ----------------------------------------------------------------------------- accesses


@dataclass
class Access:
    """How one ViewChain reads the kernel space: affine terms over loop groups + masks,
    then further chain steps (unravel the linear index into the next view)."""

    dead: bool = False  # fully masked: every element is the pad value
    offset: int = 0
    terms: list[tuple[tuple[int, ...], int]] = field(default_factory=list)  # (group, stride)
    masks: list[tuple[tuple[int, ...], int, int]] = field(default_factory=list)  # (group, lo, hi)
    steps: list[View] = field(default_factory=list)  # inner views, outermost first

    @property
    def masked(self) -> bool:
        return bool(self.masks) or any(v.mask is not None for v in self.steps)


def make_access(chain: ViewChain, groups: list[tuple[int, ...]]) -> Access:
    """Describe `chain` over loop groups (each a tuple of the chain's axes, merged)."""
    if any(v.fully_masked for v in chain.views):
        return Access(dead=True)
    v = chain.views[-1]
    acc = Access(offset=v.offset, steps=list(reversed(chain.views[:-1])))
    covered = set()
    for g in groups:
        covered.update(g)
        inner = math.prod(v.shape[d] for d in g[1:])
        stride = v.strides[g[-1]]
        for a, b in zip(g, g[1:]):  # the planner merged these: re-check, a wrong merge is a wrong read
            if v.strides[a] != v.strides[b] * v.shape[b] or v.valid_box()[b] != (0, v.shape[b]):
                raise AssertionError(f"axes {g} do not merge in view {v}")
        if stride:
            acc.terms.append((g, stride))
        lo, hi = v.valid_box()[g[0]]
        if (lo, hi) != (0, v.shape[g[0]]):
            acc.masks.append((g, lo * inner, hi * inner))
    for d, n in enumerate(v.shape):  # axes outside the groups have size 1 (index 0)
        if d not in covered and n != 1:
            raise AssertionError(f"axis {d} of {v.shape} is not covered by the loop groups {groups}")
    return acc


def _segments(accesses, dims: tuple[int, ...], size: int) -> tuple[tuple[int, int], ...]:
    """The loop over axis group `dims` cut where an access's mask on it starts or ends
    (a concat's inputs, a pad's borders): in each piece every such mask is statically
    true or false, so the loads are plain or constant instead of two masked loads and a
    select. One piece when no mask falls inside, or when there would be more than
    MAX_SEGMENTS."""
    cuts: set[int] = set()
    for acc in accesses:
        for g, lo, hi in acc.masks:
            if g == dims:
                cuts.update(c for c in (lo, hi) if 0 < c < size)
    if not cuts or len(cuts) >= MAX_SEGMENTS:
        return ((0, size),)
    bounds = [0, *sorted(cuts), size]
    return tuple(zip(bounds, bounds[1:]))


# ----------------------------------------------------------------------------- row passes


def per_row_nodes(kernel: Kernel) -> tuple[bool, ...]:
    """Whether each node is constant along a row (computed once per row, outside the
    inner loop): constants, reductions, loads broadcast along every reduce axis, and
    what only they feed."""
    red = set(kernel.reduce_axes)
    per_row = [False] * len(kernel.nodes)
    for i, n in enumerate(kernel.nodes):
        if n.op == LOAD:
            per_row[i] = all(view_axes_stride0(kernel.inputs[n.arg].view, a) for a in red)
        elif n.op == VALID:
            per_row[i] = False
        elif n.op in (Ops.CONST, *REDUCTIONS):
            per_row[i] = True
        else:
            per_row[i] = all(per_row[s] for s in n.src)
    return tuple(per_row)


def pass_targets(kernel: Kernel, p: int) -> list[int]:
    """What pass `p` computes per element: its reductions' sources, then its full outputs."""
    reds = [i for i, n in enumerate(kernel.nodes) if n.op in REDUCTIONS and n.pass_ == p]
    return [kernel.nodes[i].src[0] for i in reds] + [o.node for o in kernel.outputs if not o.reduced and o.pass_ == p]


def closure(kernel: Kernel, targets, per_row, stop=frozenset()) -> set[int]:
    """Nodes evaluated per element for `targets`: their sources, not crossing per-row
    values or `stop`."""
    seen: set[int] = set()
    stack = list(targets)
    while stack:
        i = stack.pop()
        if i in seen or per_row[i] or i in stop:
            continue
        seen.add(i)
        stack.extend(kernel.nodes[i].src)
    return seen


def _stash(kernel: Kernel, inner: tuple[Axis, ...], closures: tuple[frozenset, ...]) -> dict[int, int]:
    """Expensive per-element values a later pass would compute again (softmax's
    exp(x - max): summed in one pass, divided and stored in the next) -> the pass that
    computes and stores them in a row-sized buffer; later passes load them. Values are
    bit-identical to a recompute; only for one merged reduce axis of at most
    STASH_ELEMS elements."""
    if kernel.passes < 2 or len(inner) != 1 or not 0 < inner[0].size <= STASH_ELEMS:
        return {}
    costly: dict[int, bool] = {}
    for i, n in enumerate(kernel.nodes):
        costly[i] = n.op in COSTLY_OPS or any(costly[j] for j in n.src if j in costly)
    stash: dict[int, int] = {}
    for p in range(kernel.passes):
        later = set().union(*closures[p + 1:]) if p + 1 < kernel.passes else set()
        for i in sorted(closures[p] & later):
            n = kernel.nodes[i]
            if i in stash or not costly[i] or n.op in (LOAD, VALID, Ops.CONST) or n.dtype.is_bool:
                continue
            if any(i in closures[q] for q in range(p)):
                continue  # an earlier pass computes it: stashed there
            stash[i] = p
    return stash


# ----------------------------------------------------------------------------- GEMM tiling


@dataclass(frozen=True)
class GemmConfig:
    """Machine-dependent GEMM blocking for one dtype (svod/codegen/gemm.py)."""

    itemsize: int
    vw: int  # lanes per vector register
    mr: int  # rows of the micro-tile (A values broadcast per k step)
    nv: int  # vectors per micro-tile row
    kc: int  # K block
    mc: int  # rows of A packed at once (a multiple of mr)
    nt: int  # widest column tile of a unit (a multiple of nr)
    mt: int  # tallest row tile of a unit (a multiple of mr)
    nc: int = 0  # columns of B packed at once (a multiple of nr; 0: the whole tile)

    @property
    def nr(self) -> int:
        return self.vw * self.nv


def _round(x: int, m: int) -> int:
    return max(m, (x // m) * m)


def _overrides() -> dict[str, int]:
    out: dict[str, int] = {}
    for part in os.environ.get("SVOD_GEMM", "").split(","):
        if "=" in part:
            name, _, val = part.partition("=")
            try:
                out[name.strip()] = max(1, int(val))
            except ValueError:
                pass
    return out


KC_MAX = 384  # the deepest K block (measured: deeper blocks were not faster, docs/codegen.md)


@functools.cache
def gemm_config(itemsize: int, target: Target | None = None, tall: bool = False) -> GemmConfig:
    """Blocking for float32 (itemsize 4) or float64 (8) on `target` (default the host);
    `tall`: the 12 x 2 AVX-512 micro-tile (the same as the default elsewhere), which the
    attention kernel keeps (svod/codegen/attention.py: it was measured with it) and
    `gemm_tiling` takes for products it pads less (narrow columns: `TALL_PADDING`).

    * micro-tile: MR x NV vectors of accumulators within the vector registers, leaving
      room for the NV vectors of B and one broadcast of A: 32 registers (AVX-512) 6 x 4
      (24 accumulators, 4 B vectors, 1 broadcast: 29 registers; per k step 6 broadcasts
      instead of 12 x 2's 12, and a 6-row Ap panel, so KC reaches `KC_MAX`: measured
      1.04-1.10x the 12 x 2 GEMM per core, docs/codegen.md), 16 (AVX2) 6 x 2;
    * KC: the Ap micro-panel (MR x KC), reused by every micro-kernel call of a row of
      panels, fills half of L1 (the Bp panels stream past it); at most `KC_MAX`. A deep
      K block means few passes over C (each K block reads and writes the C tile once);
    * NC: Bp (KC x NC), the columns of B packed at once, three quarters of L2: the
      micro-kernel streams it past the L1-resident Ap panel once per row panel, from L2
      (a Bp of twice L2, streamed from L3, ran the micro-kernel at 90-92% of the FMA
      peak instead of 97-98%);
    * NT: twice L2 over KC: the widest column tile of a unit (wider tiles mean fewer
      units, each repacking its A rows and B columns); MT ~ NT;
    * MC: the rows of A packed at once: the whole row tile (MT), so A is packed once
      per K block however many NC blocks the tile has.

    `SVOD_GEMM` overrides (``"mr=6,nv=2,kc=256,..."``; ``packa=1``: A always packed,
    `gemm_tiling`). Measured choices:
    docs/codegen.md, "Generated matmul"."""
    if target is None:
        return gemm_config(itemsize, host_target(), tall)
    vw = target.lanes(itemsize)
    mr, nv = ((12, 2) if tall else (6, 4)) if target.vector_registers == 32 else (6, 2)
    over = _overrides()
    mr, nv = over.get("mr", mr), over.get("nv", nv)
    nr = vw * nv
    kc = over.get("kc", min(KC_MAX, max(32, _round(target.l1 // 2 // (mr * itemsize), 16))))
    nc = _round(over.get("nc", 3 * target.l2 // 4 // (kc * itemsize)), nr)
    # NOTE: units are independent (no barrier), so each packs its own B and A: large
    # tiles repack less (docs/codegen.md)
    nt = _round(over.get("nt", 2 * target.l2 // (kc * itemsize)), nr)
    mt = -(-over.get("mt", nt) // mr) * mr
    mc = _round(over.get("mc", mt), mr)
    return GemmConfig(itemsize, vw, mr, nv, kc, mc, nt, mt, nc)


def gemm_fingerprint(target: Target | None = None) -> str:
    """What generated GEMM code depends on beyond the kernel (part of the object-cache key)."""
    target = target or host_target()
    out = []
    for tall in (False, True):
        c4, c8 = gemm_config(4, target, tall), gemm_config(8, target, tall)
        out.append(f"g{c4.mr}x{c4.nv}k{c4.kc}m{c4.mc}n{c4.nt}t{c4.mt}c{c4.nc}:g{c8.mr}x{c8.nv}k{c8.kc}m{c8.mc}"
                   f"n{c8.nt}t{c8.mt}c{c8.nc}")
    return ":".join(out) + f":w{target.workers}:pa{int(bool(_overrides().get('packa')))}"


def supports_gemm(kernel: Kernel) -> bool:
    """Float matmuls use the GEMM; integer and bool matmuls keep the simple tile loop."""
    mm = kernel.matmul
    return mm is not None and not mm.library and kernel.inputs[mm.a].dtype.is_float


@dataclass(frozen=True)
class GemmPlan:
    cfg: GemmConfig
    batch: int
    m: int
    n: int
    k: int
    mt: int  # rows per unit tile (a multiple of mr)
    nt: int  # columns per unit tile (a multiple of nr)
    mc: int  # rows of A packed at once inside a unit (a multiple of mr, <= mt)
    kc: int  # K block actually used (balanced: nkb blocks of at most kc)
    nkb: int  # K blocks (1 when k == 0: the epilogue still runs on zeros)
    tiles_m: int
    tiles_n: int
    a_direct: bool = False  # A read in place by the micro-kernel (full MR-row panels), not packed

    @property
    def units(self) -> int:
        return self.batch * self.tiles_m * self.tiles_n


def _balanced(size: int, tiles: int, unit: int) -> int:
    """Tile length (a multiple of `unit`) splitting `size` into `tiles` near-equal tiles."""
    per = -(-size // tiles)
    return -(-per // unit) * unit


def split_tiles(batch: int, m: int, n: int, mr: int, nr: int, mt_max: int, nt_max: int, workers: int,
                columns_first: bool = False) -> tuple[int, int, int, int]:
    """(mt, nt, tiles_m, tiles_n): unit tiles as large as `mt_max` x `nt_max` allow,
    balanced, split (the longer side first) until there are at least 2 units per worker
    thread when the shape allows, then until the units divide evenly among the workers
    (7 equal units on 2 threads take 4 units' time: 8 take 4 too, on smaller tiles); a
    side is not split below 8 micro-tiles.

    `columns_first` (A read in place, `GemmPlan.a_direct`): a column split costs nothing
    (each unit packs only its own columns of B, A is never packed) while a row split packs
    the columns of B once more per row tile, so the columns are split alone when that
    reaches the units wanted with tiles of at least `MIN_COLUMN_PANELS` panels (each unit
    streams A past its packed columns once per K block: narrower tiles read A more often)."""
    want = 2 * workers if workers > 1 else 1
    tm = -(-max(m, 1) // mt_max)
    tn = -(-max(n, 1) // nt_max)
    if columns_first and m and n:
        for t in range(tn, -(-n // (MIN_COLUMN_PANELS * nr)) + 1):
            nt = _balanced(n, t, nr)
            tiles = -(-n // nt)
            units = batch * tm * tiles
            if units >= want and (workers <= 1 or units % workers == 0):
                mt = _balanced(m, tm, mr)
                return mt, nt, -(-m // mt), tiles

    def split() -> bool:
        nonlocal tm, tn
        mt, nt = _balanced(m, tm, mr), _balanced(n, tn, nr)
        can_m, can_n = mt >= 8 * mr, nt >= 8 * nr
        if not (can_m or can_n):
            return False
        if can_m and (mt >= nt or not can_n):
            tm += 1
        else:
            tn += 1
        return True

    while batch * tm * tn < want and split():
        pass
    for _ in range(workers):
        if workers <= 1 or (batch * tm * tn) % workers == 0 or not split():
            break
    mt, nt = _balanced(max(m, 1), tm, mr), _balanced(max(n, 1), tn, nr)
    return (mt, nt) + ((-(-m // mt), -(-n // nt)) if m and n else (0, 0))


MIN_COLUMN_PANELS = 4  # a column-first split (A read in place) keeps unit tiles at least this many NR panels wide
# A read in place (not packed) by a micro-tile of at most this many rows: an MR-row
# micro-panel touches MR lines of one L1 set per k-line when A's row stride is a multiple
# of 4 KiB (2048³: 8 KiB); L1d is 8-way on the x86 cores targeted, and the 12-row tall tile
# read in place ran 10% slower than packed there (docs/codegen.md)
DIRECT_A_MAX_ROWS = 8
TALL_PADDING = 0.95  # the tall micro-tile when its padded m x n is below this share of the default's


def _padded(m: int, n: int, cfg: GemmConfig) -> int:
    return -(-max(m, 1) // cfg.mr) * cfg.mr * (-(-max(n, 1) // cfg.nr) * cfg.nr)


def gemm_tiling(batch: int, m: int, n: int, k: int, itemsize: int, target: Target | None = None,
                a_direct: bool = False) -> GemmPlan:
    """The unit tiles and K blocks of a (batch, m, k) x (k, n) float product on `target`.
    The micro-tile is the target's default unless the tall one computes less padding by
    more than `TALL_PADDING` (AVX-512: 6 x 64 f32 pads n to 64 columns, 12 x 32 to 32 —
    197 x 64 x 197 measured 66-67 GFLOP/s a core with 6 x 64, 74-76 with 12 x 32;
    docs/codegen.md). `a_direct`: A's k axis is contiguous with a fixed row stride (one
    plain strided view, `direct_a`), so the micro-kernel reads its full MR-row panels in
    place (micro-tiles of at most `DIRECT_A_MAX_ROWS` rows): nothing bounds the row tile
    (A is not packed) and the columns are split first (`split_tiles`)."""
    target = target or host_target()
    cfg = gemm_config(itemsize, target)
    tall = gemm_config(itemsize, target, tall=True)
    if tall != cfg and _padded(m, n, tall) < TALL_PADDING * _padded(m, n, cfg):
        cfg = tall
    direct = a_direct and m > 1 and cfg.mr <= DIRECT_A_MAX_ROWS and not _overrides().get("packa")
    # read in place, a row tile has no bound but an explicit SVOD_GEMM mt
    mt_max = -(-max(m, 1) // cfg.mr) * cfg.mr if direct and "mt" not in _overrides() else cfg.mt
    mt, nt, tm, tn = split_tiles(batch, m, n, cfg.mr, cfg.nr, mt_max, cfg.nt, target.workers, columns_first=direct)
    mc = mt if direct else _balanced(mt, -(-mt // cfg.mc), cfg.mr)
    nkb = max(1, -(-k // cfg.kc))
    kc = -(-k // nkb) if k else 0
    return GemmPlan(cfg, batch, m, n, k, mt, nt, mc, kc, nkb, tm, tn, direct)


def direct_a(kernel: Kernel) -> bool:
    """Whether the matmul's A operand is one plain strided view (no mask, no chain) whose
    k axis is contiguous: then the GEMM can read its rows in place (`gemm_tiling`). (The
    rmsnorm kind's inner GEMM normalises A while packing it: `svod.codegen.rmsnorm.lower_rmsnorm`
    gives it the packed tiling.)"""
    mm = kernel.matmul
    if mm is None or mm.m <= 1:
        return False
    view = kernel.inputs[mm.a].view
    acc = make_access(view, [(d,) for d, n in enumerate(view.shape) if n != 1])
    if acc.dead or acc.steps or acc.masks:
        return False
    return dict(acc.terms).get((len(kernel.shape) - 1,), 0) == 1


def plan_gemm(kernel: Kernel, target: Target | None = None) -> GemmPlan:
    """The unit tiles and K blocks of a float matmul kernel on `target` (default the host)."""
    mm = kernel.matmul
    return gemm_tiling(math.prod(kernel.shape[:-2]), mm.m, mm.n, mm.k, kernel.inputs[mm.a].dtype.itemsize, target,
                       a_direct=direct_a(kernel))


ROWCOL_MIN_ROWS = 16  # a row-column kernel's block has at least this many rows
ROWCOL_MAX_BLOCKS = 32  # its units at most (each adds n partials per column reduction to the combine)
ROWCOL_SCRATCH = 8 << 20  # bytes of the partials of all blocks at most (module globals)


def rowcol_partials(kernel: Kernel) -> list[int]:
    """The nodes of a row-column kernel with partials per block: the column reductions,
    then the full reductions of per-row values."""
    from svod.kernel import ALL, COL, ROW

    sp, nodes = kernel.rowcol.spaces, kernel.nodes
    reds = [i for i, n in enumerate(nodes) if n.op is Ops.REDUCE]
    return [i for i in reds if sp[i] == COL] + [i for i in reds if sp[i] == ALL and sp[nodes[i].src[0]] == ROW]


def rowcol_blocks(kernel: Kernel) -> tuple[int, int]:
    """(rows per block, blocks) of a row-column kernel: a function of its shape and
    dtypes only (the results do not depend on the thread count)."""
    m, n = kernel.shape
    per_block = max(1, n * sum(kernel.nodes[i].dtype.itemsize for i in rowcol_partials(kernel)))
    most = max(1, min(ROWCOL_MAX_BLOCKS, ROWCOL_SCRATCH // per_block, -(-m // ROWCOL_MIN_ROWS)))
    rb = -(-m // most)
    return rb, -(-m // rb)


# An MLP kernel's hidden block (R rows x h) holds about this many bytes at most: every row
# block packs w1 and w2 again (the generated GEMM packs per unit), so few large blocks: a
# quarter of L3, not one L2 (W4 per core, CPU ms: R = 60 rows, 9 blocks, 119.8; R = 126,
# 5 blocks, 107.7; R = 258, 2 blocks, 95.6; two GEMMs 94.3-96.2; docs/codegen.md)
MLP_HIDDEN_BYTES = 8 << 20
MLP_MIN_BLOCKS = 2  # the blocks come in multiples of this (even over a 2-core host's workers)


def block_rows(kernel: Kernel, target=None) -> int:
    """R, the rows of x per unit: m split into a multiple of `MLP_MIN_BLOCKS` blocks (the
    blocks even over two workers) with hidden blocks of about `MLP_HIDDEN_BYTES` at most,
    R rounded up to the GEMM micro-tile's MR. A function of the kernel's shape and the
    target only (results do not depend on it: the sums' order depends on K and KC)."""
    ml = kernel.mlp
    isz = kernel.inputs[ml.x].dtype.itemsize
    mr = gemm_config(isz, target).mr
    blocks = max(MLP_MIN_BLOCKS, -(-ml.m * ml.h * isz // MLP_HIDDEN_BYTES))
    blocks = -(-blocks // MLP_MIN_BLOCKS) * MLP_MIN_BLOCKS
    per = -(-ml.m // blocks)
    rows = -(-per // mr) * mr
    return max(1, min(rows, ml.m))


def mlp_units(kernel: Kernel, target=None) -> int:
    """Units of an MLP kernel (svod/codegen/mlp.py): its row blocks."""
    ml = kernel.mlp
    return 0 if kernel.size == 0 else -(-ml.m // block_rows(kernel, target))


def attention_units(kernel: Kernel, target: Target | None = None) -> int:
    """Units of an attention kernel: (batch index, block of the GEMM micro-tile's MR query rows)."""
    at = kernel.attention
    batch = math.prod(kernel.shape[:-2])
    return batch * -(-at.m // gemm_config(4, target, tall=True).mr) if kernel.size else 0


# ----------------------------------------------------------------------------- the schedule


@dataclass(frozen=True, eq=False)
class Schedule:
    """Codegen's decisions for one kernel content on one target (module docstring).
    Read-only: one object is shared by every reader of kernels of that content."""

    target: Target
    loops: LoopPlan
    accesses: tuple[Access, ...] = ()  # per input, over the loop groups (elementwise/reduce/rowwise)
    valid_access: dict = field(default_factory=dict)  # VALID node -> Access
    segments: dict = field(default_factory=dict)  # loop group dims -> its pieces (`_segments`)
    per_row: tuple[bool, ...] = ()  # reduce/rowwise: node constant along a row
    closures: tuple[frozenset, ...] = ()  # per pass: nodes evaluated per element
    stash: dict = field(default_factory=dict)  # node -> the pass that stashes it (insertion order)
    blocked: tuple[bool, ...] = ()  # per pass: float sums blocked by SUM_BLOCK (a cascade)
    pass_inputs: tuple[frozenset, ...] = ()  # per pass: inputs it loads per element
    gemm: GemmPlan | None = None
    # the kernel axis of the innermost loop (the last dim of its merged axis; a matmul's
    # epilogue: the column axis), None when there is no loop
    inner_dim: int | None = None
    # a one-axis elementwise kernel whose one output is larger than the last-level cache:
    # its output is written with streaming (non-temporal) vector stores (`streams`)
    stream: bool = False

    @property
    def column(self) -> bool:
        """A column reduce (`LoopPlan.cols`, svod/codegen/columns.py)."""
        return self.loops.cols > 0

    def pieces(self, axis: Axis) -> tuple[tuple[int, int], ...]:
        """The loop over `axis` cut at the masks on it (`_segments`; one piece: uncut)."""
        return self.segments.get(axis.dims, ((0, axis.size),))

    def elementwise_pieces(self) -> tuple[tuple[int, int], ...] | None:
        """The pieces the inner loop of a multi-axis elementwise kernel is emitted as, or
        None when it is one loop (a one-axis kernel's chunks are never cut)."""
        lp = self.loops
        if lp.kind != "elementwise" or lp.chunk or not lp.inner_axes:
            return None
        segs = self.pieces(lp.inner_axes[0])
        return segs if len(segs) > 1 else None

    def row_pieces(self, p: int) -> tuple[tuple[int, int], ...] | None:
        """The pieces the innermost reduce loop of pass `p` is emitted as (static
        `SUM_BLOCK` blocks, each cut at the masks), or None when it is not cut: one
        piece, a split chunk, or more blocks than MAX_SEGMENTS."""
        lp = self.loops
        if lp.kind == "elementwise" or lp.cols or not lp.inner_axes:
            return None
        ax = lp.inner_axes[-1]
        if lp.split and len(lp.inner_axes) == 1:
            return None
        segs = self.pieces(ax)
        nblocks = -(-ax.size // SUM_BLOCK) if self.blocked[p] else 1
        return segs if len(segs) > 1 and nblocks <= MAX_SEGMENTS else None

    def static_masks(self, index: int) -> bool:
        """Whether every mask of input `index` is resolved statically in every loop that
        reads it (all on the innermost loop, which is emitted cut at them)."""
        acc = self.accesses[index] if index < len(self.accesses) else None
        if acc is None or acc.steps or not acc.masks:
            return False
        lp = self.loops
        inner = lp.inner_axes[-1].dims if lp.inner_axes else None
        if any(g != inner for g, _, _ in acc.masks):
            return False
        if lp.kind == "elementwise":
            return self.elementwise_pieces() is not None
        passes = [p for p, ins in enumerate(self.pass_inputs) if index in ins]
        return bool(passes) and all(self.row_pieces(p) is not None for p in passes)


def _inner_dim(kernel: Kernel, loops: LoopPlan) -> int | None:
    """`Schedule.inner_dim`: a row pass's last reduce axis, else the last loop axis, else
    (matmul, attention, library) the last non-size-1 kernel axis."""
    if loops.kind in ("reduce", "rowwise") and not loops.cols and loops.inner_axes:
        return loops.inner_axes[-1].dims[-1]
    if loops.axes:
        return loops.axes[-1].dims[-1]
    live = [d for d, n in enumerate(kernel.shape) if n != 1]
    return live[-1] if live else None


def _build(kernel: Kernel, target: Target) -> Schedule:
    loops = plan_loops(kernel, target)
    inner_dim = _inner_dim(kernel, loops)
    if kernel.matmul is not None or kernel.attention is not None or kernel.library is not None or \
            kernel.rowcol is not None or kernel.mlp is not None or kernel.rmsnorm is not None:
        gemm = plan_gemm(kernel, target) if supports_gemm(kernel) else None
        return Schedule(target, loops, gemm=gemm, inner_dim=inner_dim)
    groups = [a.dims for a in loops.axes]
    accesses = tuple(make_access(inp.view, groups) for inp in kernel.inputs) if loops.units else ()
    valid = {i: make_access(n.arg, groups) for i, n in enumerate(kernel.nodes) if n.op == VALID} \
        if loops.units else {}
    every = (*accesses, *valid.values())
    segments = {a.dims: _segments(every, a.dims, a.size) for a in loops.axes}
    per_row = per_row_nodes(kernel)
    closures = tuple(frozenset(closure(kernel, pass_targets(kernel, p), per_row)) for p in range(kernel.passes))
    stash = {} if kernel.kind == "elementwise" or loops.cols else _stash(kernel, loops.inner_axes, closures)
    blocked = tuple(any(n.op is Ops.REDUCE and n.arg == "sum" and n.dtype.is_float and n.pass_ == p
                        for n in kernel.nodes) for p in range(kernel.passes))
    loads = tuple(frozenset(kernel.nodes[i].arg for i in c if kernel.nodes[i].op == LOAD) for c in closures)
    return Schedule(target, loops, accesses, valid, segments, per_row, closures, stash, blocked, loads,
                    inner_dim=inner_dim, stream=streams(kernel, loops, target))


def streams(kernel: Kernel, loops: LoopPlan, target: Target) -> bool:
    """Whether a kernel writes its output with streaming (non-temporal) stores: a one-axis
    elementwise kernel (`LoopPlan.chunk`) with one real or integer output, whose output
    and inputs together (each input counted at the kernel's size) are at least the
    last-level cache's size. Its output then cannot stay cached for its consumer anyway,
    and an ordinary store first reads each line it writes (write-allocate: a third more
    DRAM traffic for `a + b`); a streaming store writes whole lines without reading them
    (docs/codegen.md, "Streaming stores")."""
    if kernel.kind != "elementwise" or not loops.chunk or len(kernel.outputs) != 1:
        return False
    dt = kernel.outputs[0].dtype
    if dt.is_bool or dt.is_complex:
        return False
    return kernel.size * (dt.itemsize + sum(i.dtype.itemsize for i in kernel.inputs)) >= target.l3


_CACHE: dict[tuple, Schedule] = {}
_CACHE_MAX = 4096


def schedule(kernel: Kernel, target: Target | None = None) -> Schedule:
    """The schedule of `kernel` on `target` (default the host), cached by content key."""
    target = target or host_target()
    key = (kernel.key(), target)
    s = _CACHE.get(key)
    if s is None:
        if len(_CACHE) >= _CACHE_MAX:
            _CACHE.clear()
        s = _CACHE[key] = _build(kernel, target)
    return s


def clear_cache() -> None:
    """Forget every schedule and GEMM configuration (after changing a constant)."""
    _CACHE.clear()
    gemm_config.cache_clear()


__all__ = ["CHUNK", "COSTLY_OPS", "LOWER_VERSION", "MAX_SEGMENTS", "STASH_ELEMS", "SUM_BLOCK", "Access", "Axis",
           "GemmConfig", "GemmPlan", "LoopPlan", "Schedule", "block_rows", "chan_variance", "chunking", "clear_cache",
           "column_reduce", "direct_a", "flat_variance", "gemm_config", "gemm_fingerprint", "gemm_tiling",
           "make_access", "merge_axes", "mlp_units", "narrow_rows", "narrow_uniform", "plan_gemm", "plan_loops",
           "schedule", "split_tiles", "supports_gemm"]
