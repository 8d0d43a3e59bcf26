"""Lowering: Kernel -> LLVM IR text (llvmlite.ir), one native entry point per kernel.

Entry ABI (every native kernel)::

    void <symbol>(i8** slots, i64 unit_begin, i64 unit_end)

``slots`` holds one pointer per kernel input (in `Kernel.inputs` order) followed by one
per output (in `Kernel.outputs` order); the runtime splits ``[0, units)`` across threads.
The entry loads the pointers and calls an internal body whose pointer arguments are
``noalias`` (the loop vectoriser needs that to vectorise without runtime checks).

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

import math
from dataclasses import dataclass, field

import llvmlite.ir as ir
import numpy as np

from svod.codegen.columns import ColumnLowering, chan_variance
from svod.codegen.split import SPLIT_SCRATCH_MAX, SplitScratch
from svod.dtype import DType
from svod.ir import COMPARE, Ops
from svod.kernel import ACC, LOAD, VALID, Kernel, view_axes_stride0
from svod.view import View, ViewChain

LOWER_VERSION = "8"  # bump when generated code changes meaning (part of the object-cache key)
MAX_SEGMENTS = 8  # most pieces a loop is cut into at mask boundaries (`_segments`), or blocks unrolled
ILP_INTERLEAVE = 4  # vectors in flight in an elementwise loop with a long chain (`_ilp_hints`)
_LATENCY_OPS = frozenset({Ops.EXP, Ops.EXPM1, Ops.LOG, Ops.LOG1P,
                          Ops.SQRT, Ops.SIN, Ops.COS, Ops.TANH, Ops.ERF, Ops.ERFC, Ops.DIV, Ops.POW,
                          Ops.ASIN, Ops.ACOS, Ops.ATAN, Ops.SINH, Ops.COSH, Ops.ASINH, Ops.ACOSH, Ops.ATANH,
                          Ops.ATAN2, Ops.HYPOT, Ops.LOGADDEXP})
CHUNK = 4096  # elements per unit of a one-axis elementwise kernel
SUM_BLOCK = 256  # elements per float-sum block (vector accumulators inside, cascade across)
CASCADE_LEVELS = 64
STASH_ELEMS = 16384  # longest row whose expensive values are kept between passes (64 KB f32)
COL_BLOCK = 256  # fewest columns per unit of a column reduce (when the tiles budget allows more, more)
COL_TILE_BYTES = 64 << 10  # accumulator tiles of a column-reduce unit (L1/L2): as many columns as fit
COL_GROUPS = 8  # least units of a multi-pass column reduce (its rows cannot be cut)
ROW_UNROLL = 4  # rows of a column reduce combined before they meet the tile (power of two)
CHAN_BYTES = 0  # input a variance's column sub-chunk reads twice from cache (columns.py); 0: half the L2
TILE_SKEW = 576  # bytes between column-reduce tiles past a 4 KiB boundary (`_column_tiles`)
SPLIT_MIN_BYTES = 1 << 20  # least input a chunk of a split reduction reads (svod/codegen/split.py)
SPLIT_MAX_CHUNKS = 32  # most chunks a split reduction's axis is cut into
SPLIT_MAX_ROWS = 16  # a reduce kernel with fewer rows than this cuts its rows into chunks
MM_ROWS = 16  # integer/bool matmul rows per unit (float matmuls: svod/codegen/gemm.py)
MM_COLS = 256  # integer/bool matmul columns per accumulator tile

F32, F64 = ir.FloatType(), ir.DoubleType()
_COSTLY = frozenset({Ops.EXP, Ops.EXPM1, Ops.LOG, Ops.LOG1P,
                     Ops.TANH, Ops.ERF, Ops.ERFC, Ops.SIN, Ops.COS, Ops.POW, Ops.SQRT, Ops.DIV,
                     Ops.ASIN, Ops.ACOS, Ops.ATAN, Ops.SINH, Ops.COSH, Ops.ASINH, Ops.ACOSH, Ops.ATANH,
                     Ops.ATAN2, Ops.HYPOT, Ops.LOGADDEXP})
I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
VOID = ir.VoidType()

_MATH = {Ops.EXP: "exp", Ops.LOG: "log", Ops.SQRT: "sqrt", Ops.SIN: "sin", Ops.COS: "cos",
         Ops.TANH: "tanh", Ops.ERF: "erf", Ops.ERFC: "erfc", Ops.EXPM1: "expm1", Ops.LOG1P: "log1p"}
# svod/codegen/vecmath_inv.py
_MATH.update({Ops.ASIN: "asin", Ops.ACOS: "acos", Ops.ATAN: "atan", Ops.SINH: "sinh", Ops.COSH: "cosh",
              Ops.ASINH: "asinh", Ops.ACOSH: "acosh", Ops.ATANH: "atanh"})
_MATH2 = {Ops.ATAN2: "atan2", Ops.HYPOT: "hypot", Ops.LOGADDEXP: "logaddexp"}


class LoweringError(NotImplementedError):
    """The kernel uses an op/dtype combination the lowering does not support."""


_REG = {"float32": F32, "float64": F64, "bool": I1}
_INT_TYPES = {8: I8, 16: I16, 32: I32, 64: I64}


def reg_type(dt: DType) -> ir.Type:
    """The register type of a dtype: LLVM integers carry no sign, so int8 and uint8 are
    both i8 and every op that depends on the sign (compare, divide, shift right, widen,
    convert) picks its signed or unsigned instruction from the svod dtype."""
    t = _REG.get(dt.name)
    if t is None:
        if not dt.is_int:
            raise LoweringError(f"no register type for dtype {dt}")
        t = _INT_TYPES[8 * dt.itemsize]
    return t


def mem_type(dt: DType) -> ir.Type:
    """The element type of a buffer pointer: i8 for bool; the parts' float for a complex
    dtype (two elements a value, `svod/codegen/cplx.py`)."""
    if dt.is_complex:
        return reg_type(dt.real)
    return I8 if dt.is_bool else reg_type(dt)


def symbol_for(kernel: Kernel) -> str:
    return f"svod_k_{kernel.key()[:20]}"


# ----------------------------------------------------------------------------- loop plan


@dataclass(frozen=True)
class Axis:
    """A merged loop axis: original kernel axes `dims` (outer first), `size` in total."""

    dims: tuple[int, ...]
    size: int
    reduce: bool


@dataclass(frozen=True)
class LoopPlan:
    kind: str  # elementwise | reduce | rowwise | matmul | blas
    axes: tuple[Axis, ...]  # merged non-size-1 axes in kernel order
    unit_axes: tuple[Axis, ...]  # enumerated by units (row-major)
    inner_axes: tuple[Axis, ...]  # looped inside a unit
    units: int
    chunk: int = 0  # > 0: one-axis elementwise kernel, a unit is `chunk` elements
    cols: int = 0  # > 0: column reduce, a unit is (outer kept index, block of `cols` columns)
    split: int = 0  # > 1: the outermost reduce axis is cut into `split` chunks of `chunk_len`
    chunk_len: int = 0  # (a unit is (group, chunk), partials combined: svod/codegen/split.py)


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


def plan_loops(kernel: Kernel) -> LoopPlan:
    """The loop nest and unit count of a kernel (cheap: no IR)."""
    kind = kernel.kind
    if kind == "library":  # numpy's code, no loops of ours (svod/library.py)
        return LoopPlan(kind, (), (), (), 1)
    if kind == "attention":
        from svod.codegen.attention import attention_units

        return LoopPlan(kind, (), (), (), attention_units(kernel))
    if kind in ("matmul", "blas"):
        mm = kernel.matmul
        batch = math.prod(kernel.shape[:-2])
        units = 1 if kind == "blas" else batch * -(-mm.m // MM_ROWS)
        from svod.codegen.gemm import plan_gemm, supports_gemm

        if supports_gemm(kernel):
            units = plan_gemm(kernel).units
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
    if _column_reduce(kernel, axes):
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
    (a unit then streams memory sequentially; blocks of columns jump by the row stride
    every block, which the prefetchers follow badly: 2048 of 4096 columns ran at a third
    of the speed of whole rows), else as many as fit, a multiple of 64. A multi-pass
    kernel cannot cut its rows (a pass needs the whole column's earlier results), so
    there the columns are cut into at least `COL_GROUPS` blocks (`outer` kept indices
    count) of at least `COL_BLOCK` columns, for the threads."""
    fit = COL_TILE_BYTES // _tile_bytes(kernel)
    width = ncols if ncols <= fit else max(COL_BLOCK, fit // 64 * 64)
    if kernel.passes > 1 and outer * -(-ncols // width) < COL_GROUPS and chan_variance(kernel) is None:
        want = -(-ncols // max(1, COL_GROUPS // max(outer, 1)))
        width = min(width, max(COL_BLOCK, -(-want // 64) * 64))
    return width


def _partial_bytes(kernel: Kernel) -> int:
    return sum(n.dtype.itemsize for n in kernel.nodes if n.op is Ops.REDUCE)


def _split_chunks(kernel: Kernel, length: int, row_elems: int, column: bool = False) -> tuple[int, int]:
    """Chunks of the outermost reduce axis (its length `length`, `row_elems` elements per
    index): at least `SPLIT_MIN_BYTES` of input each, whole `SUM_BLOCK`s, at most
    `SPLIT_MAX_CHUNKS`. Depends on the shapes only, never on the thread count."""
    from svod.codegen.split import chunking

    if any(n.op is Ops.REDUCE and n.dtype.kind == "c" for n in kernel.nodes):
        return length, 1  # a complex product's partials would need a complex combine: one chunk
    isz = max([i.dtype.itemsize for i in kernel.inputs] + [1])
    # whole SUM_BLOCKs: a row's float sum is blocked along its only axis, a column reduce's
    # along the outer reduce axis; then a chunk's blocks are the unsplit kernel's blocks
    align = SUM_BLOCK if (row_elems == 1 or column) and _has_float_sum(kernel) else 1
    return chunking(length, row_elems, align, max(1, SPLIT_MIN_BYTES // isz), SPLIT_MAX_CHUNKS)


def _has_float_sum(kernel: Kernel) -> bool:
    return any(n.op is Ops.REDUCE and n.arg == "sum" and n.dtype.is_float for n in kernel.nodes)


def _row_split(kernel: Kernel, axes: list[Axis]) -> bool:
    """A single-pass reduce whose outputs are all reduced and whose reductions are plain
    REDUCEs (an ARGMAX's partial would need its index) may cut its rows into chunks."""
    if kernel.kind != "reduce" or kernel.passes != 1 or not any(a.reduce for a in axes):
        return False
    if any(not o.reduced for o in kernel.outputs):
        return False
    return all(n.op is Ops.REDUCE for n in kernel.nodes if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN))


def _column_reduce(kernel: Kernel, axes: list[Axis]) -> bool:
    """Reductions over outer axes with a kept innermost axis (sum(x, axis=0), var(x,
    axis=0)): walking each output's column would stride through memory; instead a unit
    keeps a block of columns' accumulators and streams the rows, once per pass."""
    if kernel.kind not in ("reduce", "rowwise") or not axes or axes[-1].reduce:
        return False
    if not any(a.reduce and a.size > 0 for a in axes) or axes[-1].size < 2:
        return False
    if any(not o.reduced for o in kernel.outputs):
        return False
    return all(n.op is Ops.REDUCE for n in kernel.nodes if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN))


# ----------------------------------------------------------------------------- accessors


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


# ----------------------------------------------------------------------------- emitter


def _const(dt: DType, value) -> ir.Constant:
    if dt.is_complex:
        from svod.codegen.cplx import const

        return const(dt, value)
    with np.errstate(all="ignore"):
        v = np.array(value).astype(dt.np)[()]
    if dt.is_float:
        return ir.Constant(reg_type(dt), float(v))
    if dt.is_bool:
        return ir.Constant(I1, int(bool(v)))
    return ir.Constant(reg_type(dt), _signed(int(v), 8 * dt.itemsize))


def _signed(v: int, bits: int) -> int:
    """`v` as the signed integer with the same `bits` low bits (LLVM's integer constants
    are written signed; an unsigned dtype's large values wrap)."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def _tsuf(t: ir.Type) -> str:
    return {id(F32): "f32", id(F64): "f64"}.get(id(t)) or ("f64" if isinstance(t, ir.DoubleType) else
                                                          "f32" if isinstance(t, ir.FloatType) else f"i{t.width}")


class _Fn:
    """Builder state for one function: allocas in the entry block, structured loops."""

    def __init__(self, module: ir.Module, fn: ir.Function):
        self.module = module
        self.fn = fn
        self.entry = fn.append_basic_block("entry")
        self.alloca_b = ir.IRBuilder(self.entry)
        start = fn.append_basic_block("start")
        self.b = ir.IRBuilder(start)
        self._n = 0

    def finish(self) -> None:
        self.alloca_b.branch(self.fn.basic_blocks[1])

    def alloca(self, ty: ir.Type, count: int | None = None, name: str = "") -> ir.Value:
        size = None if count is None else ir.Constant(I32, count)
        return self.alloca_b.alloca(ty, size=size, name=name)

    def var(self, ty: ir.Type, init: ir.Value, name: str = "") -> ir.Value:
        p = self.alloca(ty, name=name)
        self.b.store(init, p)
        return p

    def call_intr(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        return self.b.call(_intrinsic(self.module, name, ret, [a.type for a in args]), args)

    def loop_md(self, hints: tuple[tuple[str, int | None], ...]) -> ir.MDValue:
        """A self-referential ``llvm.loop`` ID carrying `hints` (("llvm.loop.unroll.disable",
        None), ("llvm.loop.interleave.count", 4), ...), one node per distinct hint set."""
        cache = self.module.__dict__.setdefault("_svod_loop_md", {})
        md = cache.get(hints)
        if md is None:
            ops = []
            for k, v in hints:
                ops.append(self.module.add_metadata([ir.MetaDataString(self.module, k)] +
                                                    ([] if v is None else [ir.Constant(I32, v)])))
            md = self.module.add_metadata(ops)
            md.operands = (md,) + tuple(md.operands)  # a loop ID refers to itself
            cache[hints] = md
        return md

    def loop(self, start: ir.Value, end: ir.Value, body, name: str = "i",
             hints: tuple[tuple[str, int | None], ...] = ()) -> None:
        """for (i = start; i < end; i++) body(i)   (signed i64 bounds); `hints` go on the
        latch as ``llvm.loop`` metadata (see `loop_md`)."""
        b = self.b
        self._n += 1
        k = self._n
        ivar = self.var(I64, start, f"{name}{k}")
        cond = self.fn.append_basic_block(f"{name}{k}.cond")
        body_bb = self.fn.append_basic_block(f"{name}{k}.body")
        exit_bb = self.fn.append_basic_block(f"{name}{k}.exit")
        b.branch(cond)
        b.position_at_end(cond)
        i = b.load(ivar)
        b.cbranch(b.icmp_signed("<", i, end), body_bb, exit_bb)
        b.position_at_end(body_bb)
        body(i)
        b.store(b.add(i, ir.Constant(I64, 1)), ivar)
        latch = b.branch(cond)
        if hints:
            latch.set_metadata("llvm.loop", self.loop_md(hints))
        b.position_at_end(exit_bb)

    def if_then(self, cond: ir.Value, then) -> None:
        b = self.b
        self._n += 1
        t = self.fn.append_basic_block(f"then{self._n}")
        e = self.fn.append_basic_block(f"endif{self._n}")
        b.cbranch(cond, t, e)
        b.position_at_end(t)
        then()
        b.branch(e)
        b.position_at_end(e)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, int(v))


class KernelLowering(ColumnLowering):
    """Lower one Kernel into `module` as function `symbol`."""

    def __init__(self, kernel: Kernel, module: ir.Module, symbol: str):
        self.k = kernel
        self.module = module
        self.symbol = symbol
        self.plan = plan_loops(kernel)
        nin, nout = len(kernel.inputs), len(kernel.outputs)
        ptr_types = [ir.PointerType(mem_type(i.dtype)) for i in kernel.inputs] + \
                    [ir.PointerType(mem_type(o.dtype)) for o in kernel.outputs]
        body_ty = ir.FunctionType(VOID, ptr_types + [I64, I64])
        self.body_fn = ir.Function(module, body_ty, symbol + ".body")
        self.body_fn.linkage = "internal"
        for a in self.body_fn.args[:nin + nout]:
            a.add_attribute("noalias")
        self.f = _Fn(module, self.body_fn)
        self.in_ptrs = list(self.body_fn.args[:nin])
        self.out_ptrs = list(self.body_fn.args[nin:nin + nout])
        self.ub, self.ue = self.body_fn.args[nin + nout:]
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
            for i, inp in enumerate(k.inputs):
                self.accesses[i] = make_access(inp.view, groups)
            for i, n in enumerate(k.nodes):
                if n.op == VALID:
                    self.valid_access[i] = make_access(n.arg, groups)
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
        b.call(self.body_fn, ptrs + [fn.args[1], fn.args[2]])
        b.ret_void()

    # ---- index helpers
    def _unravel(self, u: ir.Value, axes: tuple[Axis, ...]) -> dict:
        b = self.f.b
        ctx = {}
        for a in reversed(axes):
            if a is axes[0]:
                ctx[a.dims] = u
            else:
                ctx[a.dims] = b.urem(u, _i64(a.size))
                u = b.udiv(u, _i64(a.size))
        return ctx

    def _address(self, acc: Access, ctx: dict) -> tuple[ir.Value, ir.Value | None]:
        """(element index, validity or None when always valid)."""
        b = self.f.b
        addr: ir.Value = _i64(acc.offset)
        for g, s in acc.terms:
            if g in ctx:
                addr = b.add(addr, b.mul(ctx[g], _i64(s)))
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
                both(b.icmp_signed(">=", i, _i64(lo)))
            both(b.icmp_signed("<", i, _i64(hi)))
        for v in acc.steps:  # unravel the linear index into the next (inner) view
            lin = addr
            addr = _i64(v.offset)
            w = 1
            for d in range(len(v.shape) - 1, -1, -1):
                n, s = v.shape[d], v.strides[d]
                lo, hi = v.valid_box()[d]
                if n == 1:
                    w *= n
                    continue
                idx = b.srem(b.sdiv(lin, _i64(w)), _i64(n)) if w > 1 else b.srem(lin, _i64(n))
                if s:
                    addr = b.add(addr, b.mul(idx, _i64(s)))
                if lo > 0:
                    both(b.icmp_signed(">=", idx, _i64(lo)))
                if hi < n:
                    both(b.icmp_signed("<", idx, _i64(hi)))
                w *= n
        return addr, valid

    def _load(self, ptr: ir.Value, dt: DType, acc: Access, ctx: dict) -> ir.Value:
        b = self.f.b
        if acc.dead:
            return _const(dt, 0)
        addr, valid = self._address(acc, ctx)
        if dt.is_complex:  # (re, im) at 2*addr, 2*addr + 1
            a2 = b.mul(addr, _i64(2))
            parts = [(b.gep(ptr, [a2]), ptr.type.pointee), (b.gep(ptr, [b.add(a2, _i64(1))]), ptr.type.pointee)]
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
            a2 = b.mul(addr, _i64(2))
            b.store(v[0], b.gep(ptr, [a2]))
            b.store(v[1], b.gep(ptr, [b.add(a2, _i64(1))]))
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

    def _segments(self, dims: tuple[int, ...], size: int) -> list[tuple[int, int]]:
        """The loop over axis group `dims` cut where a view's mask on it starts or ends
        (a concat's inputs, a pad's borders): in each piece every such mask is statically
        true or false (`_address` reads the piece from ctx ``("known", dims)``), so the
        loads are plain or constant instead of two masked loads and a select. One piece
        when no mask falls inside, or when there would be more than MAX_SEGMENTS."""
        cuts: set[int] = set()
        for acc in (*self.accesses.values(), *self.valid_access.values()):
            for g, lo, hi in acc.masks:
                if g == dims:
                    cuts.update(c for c in (lo, hi) if 0 < c < size)
        if not cuts or len(cuts) >= MAX_SEGMENTS:
            return [(0, size)]
        bounds = [0, *sorted(cuts), size]
        return list(zip(bounds, bounds[1:]))

    # ---- elementwise
    def _ilp_hints(self) -> tuple:
        """Loop hints for an elementwise loop whose element is a long dependency chain
        (a polynomial exp/tanh/log, a divide or a square root): LLVM's cost model
        interleaves such big bodies once, and one vector's chain (~150 cycles for W7's
        tanh, sqrt, exp) leaves the out-of-order window starved. Four vectors in flight:
        W7's kernel 3.5 -> 2.6 µs on 1,000 float32 (znver4, AVX2)."""
        if any(n.op in _LATENCY_OPS and n.dtype.is_float for n in self.k.nodes):
            return (("llvm.loop.interleave.count", ILP_INTERLEAVE),)
        return ()

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
            start = b.mul(self.ub, _i64(plan.chunk))
            end = b.mul(self.ue, _i64(plan.chunk))
            end = b.select(b.icmp_signed("<", end, _i64(a.size)), end, _i64(a.size))
            f.loop(start, end, lambda j: element({a.dims: j}), "j", self._ilp_hints())
            return
        inner = plan.inner_axes[0]
        hints = self._ilp_hints() if inner.size >= 4 * ILP_INTERLEAVE else ()
        segs = self._segments(inner.dims, inner.size)

        def unit(u):
            ctx = self._unravel(u, plan.unit_axes)
            if len(segs) == 1:
                f.loop(_i64(0), _i64(inner.size), lambda j: element({**ctx, inner.dims: j}), "j", hints)
                return
            for lo, hi in segs:
                known = {**ctx, ("known", inner.dims): (lo, hi)}
                f.loop(_i64(lo), _i64(hi), lambda j, known=known: element({**known, inner.dims: j}), "j", hints)

        f.loop(self.ub, self.ue, unit, "u")

    # ---- reductions and row-wise passes
    def _lower_rows(self) -> None:
        k, f, b, plan = self.k, self.f, self.f.b, self.plan
        red = set(k.reduce_axes)
        per_row = [False] * len(k.nodes)
        for i, n in enumerate(k.nodes):
            if n.op == LOAD:
                per_row[i] = all(view_axes_stride0(k.inputs[n.arg].view, a) for a in red)
            elif n.op == VALID:
                per_row[i] = False
            elif n.op in (Ops.CONST, Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
                per_row[i] = True
            else:
                per_row[i] = all(per_row[s] for s in n.src)
        self.per_row = per_row
        self.stash = self._plan_stash()

        nch = plan.split or 1
        self._ax0_range = None
        scratch = None
        if nch > 1:
            reds = [i for i, n in enumerate(k.nodes) if n.op is Ops.REDUCE]
            scratch = SplitScratch(f, self.symbol, [reg_type(k.nodes[i].dtype) for i in reds],
                                   plan.units // nch, nch, 1, self.ub, self.ue, plan.units)

        def unit(u):
            row = b.udiv(u, _i64(nch)) if nch > 1 else u
            ctx = self._unravel(row, plan.unit_axes) if plan.unit_axes else {}
            env: dict[int, ir.Value] = {}
            if nch > 1:  # one chunk of the outermost reduce axis
                ch = b.urem(u, _i64(nch))
                r0 = b.mul(ch, _i64(plan.chunk_len))
                r1 = b.add(r0, _i64(plan.chunk_len))
                self._ax0_range = (r0, b.select(b.icmp_signed("<", r1, _i64(plan.inner_axes[0].size)), r1,
                                                _i64(plan.inner_axes[0].size)))
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
                scratch.combine(row, _i64(1), [self._merge_fn(_Reduction(self, i)) for i in reds])
                fin = {i: b.load(scratch.slot(ri, row, 0, 0)) for ri, i in enumerate(reds)}
                store({**{i: v for i, v in env.items() if i not in fin and self.per_row[i]}, **fin})
            f.if_then(scratch.arrive(row), finish)

        if plan.units:
            f.loop(self.ub, self.ue, unit, "row")
        if scratch is not None:
            scratch.release()

    def _stash_pass(self, i: int) -> int:
        """The first pass evaluating stashed node i."""
        cache = self.__dict__.setdefault("_closures", {})
        for p in range(self.k.passes):
            if p not in cache:
                cache[p] = self._pass_closure(p)
            if i in cache[p]:
                return p
        raise AssertionError(f"stashed node %{i} is in no pass")

    def _pass_closure(self, p: int) -> set[int]:
        """Nodes a pass evaluates per element (not per row: those come from row_env)."""
        k = self.k
        reds = [i for i, n in enumerate(k.nodes) if n.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN) and n.pass_ == p]
        stack = [k.nodes[i].src[0] for i in reds] + [o.node for o in k.outputs if not o.reduced and o.pass_ == p]
        seen: set[int] = set()
        while stack:
            i = stack.pop()
            if i in seen or self.per_row[i]:
                continue
            seen.add(i)
            stack.extend(k.nodes[i].src)
        return seen

    def _plan_stash(self) -> dict[int, ir.Value]:
        """Expensive per-element values a later pass would compute again (softmax's
        exp(x - max): summed in one pass, divided and stored in the next): the first
        pass stores them in a row-sized stack buffer, later passes load them. Values
        are bit-identical to a recompute; only for one merged reduce axis of at most
        STASH_ELEMS elements."""
        k = self.k
        inner = self.plan.inner_axes
        if k.passes < 2 or len(inner) != 1 or not 0 < inner[0].size <= STASH_ELEMS:
            return {}
        closures = [self._pass_closure(p) for p in range(k.passes)]
        costly: dict[int, bool] = {}
        for i, n in enumerate(k.nodes):
            costly[i] = n.op in _COSTLY or any(costly[j] for j in n.src if j in costly)
        stash: dict[int, ir.Value] = {}
        for p in range(k.passes):
            later = set().union(*closures[p + 1:]) if p + 1 < k.passes else set()
            for i in sorted(closures[p] & later):
                n = k.nodes[i]
                if i in stash or not costly[i] or n.op in (LOAD, VALID, Ops.CONST) or n.dtype.is_bool:
                    continue
                if any(i in closures[q] for q in range(p)):
                    continue  # an earlier pass computes it: stashed there
                stash[i] = self.f.alloca(reg_type(n.dtype), inner[0].size, f"stash{i}")
        return stash

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
        accs = [_Reduction(self, i) for i in reds]
        for a in accs:
            a.init_row()
        inner = self.plan.inner_axes
        blocked = any(a.cascade for a in accs)

        ax_dims = inner[0].dims if len(inner) == 1 else None
        mine = self._pass_closure(p) if self.stash else set()
        loads = [i for i in self.stash if i in mine and self._stash_pass(i) < p]
        stores = [i for i in self.stash if i in mine and self._stash_pass(i) == p]

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

        def nest(level: int, ctx: dict, lin):
            b = f.b
            if level == len(inner) - 1 or not inner:
                if not inner:  # no loop axis left (reduce axes of size 1): one element
                    for a in accs:
                        a.begin_block()
                    element(ctx, _i64(0))
                    for a in accs:
                        a.end_block()
                    return
                ax = inner[level]

                def body(j, known=None):
                    lin2 = b.add(lin, b.mul(j, _i64(weights[level]))) if need_lin else None
                    c = {**ctx, ax.dims: j}
                    if known is not None:
                        c[("known", ax.dims)] = known
                    element(c, lin2)

                segs = self._segments(ax.dims, ax.size)
                nblocks = -(-ax.size // SUM_BLOCK) if blocked else 1
                rng = self._ax0_range if level == 0 else None
                if rng is not None:  # a chunk of a split reduction (its start a whole number of blocks)
                    lo, hi = rng
                    if not blocked:
                        for a in accs:
                            a.begin_block()
                        f.loop(lo, hi, body, "r")
                        for a in accs:
                            a.end_block()
                        return

                    def cblock(jb):
                        start = b.mul(jb, _i64(SUM_BLOCK))
                        end = b.add(start, _i64(SUM_BLOCK))
                        end = b.select(b.icmp_signed("<", end, hi), end, hi)
                        for a in accs:
                            a.begin_block()
                        f.loop(start, end, body, "r")
                        for a in accs:
                            a.end_block()

                    f.loop(b.udiv(lo, _i64(SUM_BLOCK)), b.udiv(b.add(hi, _i64(SUM_BLOCK - 1)), _i64(SUM_BLOCK)),
                           cblock, "rb")
                    return
                if len(segs) > 1 and nblocks <= MAX_SEGMENTS:
                    # static blocks (the same SUM_BLOCK cascade), each loop cut at the masks
                    for jb in range(nblocks):
                        s0, s1 = (jb * SUM_BLOCK, min(ax.size, (jb + 1) * SUM_BLOCK)) if blocked else (0, ax.size)
                        for a in accs:
                            a.begin_block()
                        for lo, hi in segs:
                            lo, hi = max(lo, s0), min(hi, s1)
                            if lo < hi:
                                f.loop(_i64(lo), _i64(hi), lambda j, kn=(lo, hi): body(j, kn), "r")
                        for a in accs:
                            a.end_block()
                elif not blocked or ax.size <= SUM_BLOCK:
                    for a in accs:
                        a.begin_block()
                    f.loop(_i64(0), _i64(ax.size), body, "r")
                    for a in accs:
                        a.end_block()
                else:
                    def block(jb):
                        start = b.mul(jb, _i64(SUM_BLOCK))
                        end = b.add(start, _i64(SUM_BLOCK))
                        end = b.select(b.icmp_signed("<", end, _i64(ax.size)), end, _i64(ax.size))
                        for a in accs:
                            a.begin_block()
                        f.loop(start, end, body, "r")
                        for a in accs:
                            a.end_block()

                    f.loop(_i64(0), _i64(-(-ax.size // SUM_BLOCK)), block, "rb")
                return
            ax = inner[level]
            lo, hi = self._ax0_range if level == 0 and self._ax0_range is not None else (_i64(0), _i64(ax.size))
            f.loop(lo, hi,
                   lambda j: nest(level + 1, {**ctx, ax.dims: j},
                                  b.add(lin, b.mul(j, _i64(weights[level]))) if need_lin else None), "r")

        nest(0, dict(row_ctx), _i64(0))
        for a in accs:
            row_env[a.node] = a.finish()

    # ---- matmul
    def _lower_matmul(self) -> None:
        from svod.codegen.gemm import emit_gemm, supports_gemm

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
        zero = _const(dt, 0)
        acc_node = next(i for i, n in enumerate(k.nodes) if n.op == ACC)
        consts = {i: emit_op(f, n.op, n.dtype, n.arg, [], []) for i, n in enumerate(k.nodes) if n.op is Ops.CONST}

        def mk(i_val, j_val, p_val, bctx):
            ca = dict(bctx)
            if mm.m != 1:
                ca[(nb,)] = i_val
            if mm.k != 1:
                ca[(nb + 1,)] = p_val
            cb = dict(bctx)
            if mm.k != 1:
                cb[(nb,)] = p_val
            if mm.n != 1:
                cb[(nb + 1,)] = j_val
            return ca, cb

        def unit(u):
            bu = b.udiv(u, _i64(mblocks))
            mbk = b.urem(u, _i64(mblocks))
            bctx = self._unravel(bu, batch_axes) if batch_axes else {}
            i0 = b.mul(mbk, _i64(MM_ROWS))
            i1 = b.add(i0, _i64(MM_ROWS))
            i1 = b.select(b.icmp_signed("<", i1, _i64(mm.m)), i1, _i64(mm.m))
            rows = b.sub(i1, i0)

            def colblock(jb):
                j0 = b.mul(jb, _i64(ncols))
                j1 = b.add(j0, _i64(ncols))
                j1 = b.select(b.icmp_signed("<", j1, _i64(mm.n)), j1, _i64(mm.n))
                w = b.sub(j1, j0)

                def zero_row(r):
                    f.loop(_i64(0), w, lambda c: b.store(zero, b.gep(tile, [b.add(b.mul(r, _i64(ncols)), c)])), "c")

                f.loop(_i64(0), rows, zero_row, "z")

                def kstep(p):
                    def row(r):
                        i = b.add(i0, r)
                        ca, _ = mk(i, None, p, bctx)
                        av = self._load(self.in_ptrs[mm.a], dt, acc_a, ca)
                        base = b.mul(r, _i64(ncols))

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

                        f.loop(_i64(0), w, col, "c")

                    f.loop(_i64(0), rows, row, "r")

                f.loop(_i64(0), _i64(mm.k), kstep, "p")

                def epi_row(r):
                    i = b.add(i0, r)

                    def epi_col(c):
                        j = b.add(j0, c)
                        ctx = dict(bctx)
                        if mm.m != 1:
                            ctx[(nb,)] = i
                        if mm.n != 1:
                            ctx[(nb + 1,)] = j
                        env = dict(consts)
                        env[acc_node] = b.load(b.gep(tile, [b.add(b.mul(r, _i64(ncols)), c)]))
                        self._eval([o.node for o in k.outputs], env, ctx)
                        for jj, o in enumerate(k.outputs):
                            self._store(self.out_ptrs[jj], o.dtype, self.out_access[jj], ctx, env[o.node])

                    f.loop(_i64(0), w, epi_col, "c")

                f.loop(_i64(0), rows, epi_row, "e")

            f.loop(_i64(0), _i64(-(-mm.n // ncols)), colblock, "jb")

        f.loop(self.ub, self.ue, unit, "u")


def _combine(f: _Fn, red: _Reduction, cur: ir.Value, x: ir.Value) -> ir.Value:
    """One step of a REDUCE: cur (accumulator) with x.

    NOTE: float max/min stay llvm.maximum/minimum, also on column tiles: the
    select form (x > cur or x is NaN ? x : cur) stored back to the tile becomes a
    masked store (vmaskmovps), microcoded on AMD: 6x slower with two reductions."""
    b, dt, rop = f.b, red.dt, red.n.arg
    if rop == "sum":
        if dt.is_float:
            v = b.fadd(cur, x)
            v.flags.append("reassoc")
            return v
        return b.or_(cur, x) if dt.is_bool else b.add(cur, x)
    if rop == "prod":
        if dt.is_float:
            v = b.fmul(cur, x)
            v.flags.append("reassoc")
            return v
        return b.and_(cur, x) if dt.is_bool else b.mul(cur, x)
    is_max = rop == "max"
    if dt.is_float:
        return f.call_intr(f"llvm.{'maximum' if is_max else 'minimum'}.{_tsuf(red.ty)}", red.ty, [cur, x])
    if dt.is_bool:
        return b.or_(cur, x) if is_max else b.and_(cur, x)
    return b.select(_icmp(b, dt, ">" if is_max else "<", x, cur), x, cur)


def _icmp(b: ir.IRBuilder, dt: DType, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """An integer comparison with the dtype's signedness (bool compares unsigned)."""
    return b.icmp_signed(op, x, y) if dt.is_signed else b.icmp_unsigned(op, x, y)


class _Reduction:
    """One REDUCE/ARGMAX/ARGMIN accumulator over a row pass."""

    def __init__(self, low: KernelLowering, node: int):
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
        if self.complex and not (n.op is Ops.REDUCE and n.arg == "prod"):
            raise LoweringError(f"{n.op.name} {n.arg} of {self.dt}")
        self.ty = reg_type(self.dt.real if self.complex else self.dt)

    def _identity(self) -> ir.Constant:
        dt = self.dt
        if self.op is Ops.REDUCE:
            rop = self.n.arg
            if rop == "sum":
                return _const(dt, 0)
            if rop == "prod":
                return _const(dt, 1)
            if dt.is_float:
                return _const(dt, -math.inf if rop == "max" else math.inf)
            if dt.is_bool:
                return _const(dt, rop == "min")
            info = np.iinfo(dt.np)
            return _const(dt, info.min if rop == "max" else info.max)
        if dt.is_float:
            return _const(dt, -math.inf if self.op is Ops.ARGMAX else math.inf)
        if dt.is_bool:
            return _const(dt, self.op is Ops.ARGMIN)
        info = np.iinfo(dt.np)
        return _const(dt, info.min if self.op is Ops.ARGMAX else info.max)

    def init_row(self) -> None:
        f = self.f
        if self.complex:
            self.acc = (f.var(self.ty, ir.Constant(self.ty, 1.0), "acc.re"), f.var(self.ty, ir.Constant(self.ty, 0.0),
                                                                                 "acc.im"))
            return
        self.acc = f.var(self.ty, self._identity(), "acc")
        if not self.simple:
            self.idx = f.var(I64, _i64(0), "argidx")
        if self.cascade:
            self.stack = f.alloca(self.ty, CASCADE_LEVELS, "cascade")
            self.count = f.var(I64, _i64(0), "ccount")

    def begin_block(self) -> None:
        if self.cascade:
            self.f.b.store(_const(self.dt, 0), self.acc)

    def update(self, x: ir.Value, lin) -> None:
        f, b = self.f, self.f.b
        if self.complex:  # in order, numpy's product (svod/codegen/cplx.py)
            from svod.codegen.cplx import mul

            new = mul(f, (b.load(self.acc[0]), b.load(self.acc[1])), x)
            b.store(new[0], self.acc[0])
            b.store(new[1], self.acc[1])
            return
        cur = b.load(self.acc)
        dt = self.dt
        if self.op is Ops.REDUCE:
            b.store(_combine(f, self, cur, x), self.acc)
            return
        # ARGMAX / ARGMIN: first index; NaN wins (and then stays)
        is_max = self.op is Ops.ARGMAX
        if dt.is_float:
            better = b.fcmp_ordered(">" if is_max else "<", x, cur)
            nan_new = b.and_(b.fcmp_unordered("uno", x, x), b.fcmp_ordered("ord", cur, cur))
            take = b.or_(better, nan_new)
        else:
            take = _icmp(b, dt, ">" if is_max else "<", x, cur)
        # NOTE: the first element always initialises (an all -inf row gives index 0 anyway)
        b.store(b.select(take, x, cur), self.acc)
        b.store(b.select(take, lin, b.load(self.idx)), self.idx)

    def end_block(self) -> None:
        if not self.cascade:
            return
        f, b = self.f, self.f.b
        # binary-counter cascade: level l holds the sum of 2**l blocks (pairwise order)
        carry = f.var(self.ty, b.load(self.acc), "carry")
        lvl = f.var(I64, _i64(0), "lvl")
        cnt = b.load(self.count)
        cond = f.fn.append_basic_block("casc.cond")
        body = f.fn.append_basic_block("casc.body")
        done = f.fn.append_basic_block("casc.done")
        b.branch(cond)
        b.position_at_end(cond)
        lv = b.load(lvl)
        bit = b.and_(b.lshr(cnt, lv), _i64(1))
        b.cbranch(b.icmp_unsigned("!=", bit, _i64(0)), body, done)
        b.position_at_end(body)
        b.store(b.fadd(b.load(b.gep(self.stack, [lv])), b.load(carry)), carry)
        b.store(b.add(lv, _i64(1)), lvl)
        b.branch(cond)
        b.position_at_end(done)
        b.store(b.load(carry), b.gep(self.stack, [b.load(lvl)]))
        b.store(b.add(cnt, _i64(1)), self.count)

    def finish(self) -> ir.Value:
        f, b = self.f, self.f.b
        if self.complex:
            return b.load(self.acc[0]), b.load(self.acc[1])
        if self.simple and not self.cascade:
            return b.load(self.acc)
        if not self.simple:
            return b.load(self.idx)
        total = f.var(self.ty, _const(self.dt, 0), "total")
        cnt = b.load(self.count)

        def level(lv):
            bit = b.and_(b.lshr(cnt, lv), _i64(1))
            f.if_then(b.icmp_unsigned("!=", bit, _i64(0)),
                      lambda: b.store(b.fadd(b.load(total), b.load(b.gep(self.stack, [lv]))), total))

        f.loop(_i64(0), _i64(CASCADE_LEVELS), level, "lv")
        return b.load(total)


# ----------------------------------------------------------------------------- ops


def _fconst(ty: ir.Type, v: float) -> ir.Constant:
    return ir.Constant(ty, v)


def _fptosi(f: _Fn, x: ir.Value, bits: int) -> ir.Value:
    """x86's cvttss2si/cvttsd2si at `bits` (32 or 64): truncation toward zero in range;
    NaN, inf and out of range give the "integer indefinite" value INT_MIN."""
    b = f.b
    ity = ir.IntType(bits)
    lo = _fconst(x.type, -float(2 ** (bits - 1)))
    hi = _fconst(x.type, float(2 ** (bits - 1)))
    inr = b.and_(b.fcmp_ordered(">=", x, lo), b.fcmp_ordered("<", x, hi))
    # NOTE: fptosi of an out-of-range value is poison, but select never propagates the
    # poison of the arm it does not choose.
    return b.select(inr, b.fptosi(x, ity), ir.Constant(ity, -(2 ** (bits - 1))))


def _float_to_int(f: _Fn, x: ir.Value, to: DType) -> ir.Value:
    """numpy's result on x86-64 (the C casts it compiles to; docs/semantics.md): int32 and
    int64 convert at their width; narrower integers convert to int32 and keep the low
    bits; uint32 converts to int64 and keeps the low 32 bits; uint64 converts values from
    2**63 up as ``(x - 2**63) ^ 2**63``. NaN and out-of-range values follow from INT_MIN
    (`_fptosi`): NaN gives 0 for the narrow types and uint32, INT_MIN for int32/int64,
    2**63 for uint64."""
    b = f.b
    bits = 8 * to.itemsize
    ity = reg_type(to)
    if to.is_signed and bits >= 32:
        return _fptosi(f, x, bits)
    if bits < 32:
        return b.trunc(_fptosi(f, x, 32), ity)
    if bits == 32:  # uint32
        return b.trunc(_fptosi(f, x, 64), ity)
    top = _fconst(x.type, float(2 ** 63))
    high = b.xor(_fptosi(f, b.fsub(x, top), 64), ir.Constant(I64, -(2 ** 63)))
    return b.select(b.fcmp_ordered(">=", x, top), high, _fptosi(f, x, 64))


def _cast(f: _Fn, x: ir.Value, src: DType, dst: DType) -> ir.Value:
    b = f.b
    if src == dst:
        return x
    if dst.is_bool:
        if src.is_float:
            return b.fcmp_unordered("!=", x, _fconst(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if src.is_bool:
        return b.uitofp(x, reg_type(dst)) if dst.is_float else b.zext(x, reg_type(dst))
    if src.is_int and dst.is_int:  # widen with the source's sign; narrow keeps the low bits
        if dst.itemsize > src.itemsize:
            return b.sext(x, reg_type(dst)) if src.is_signed else b.zext(x, reg_type(dst))
        return b.trunc(x, reg_type(dst)) if dst.itemsize < src.itemsize else x
    if src.is_int and dst.is_float:
        return b.sitofp(x, reg_type(dst)) if src.is_signed else b.uitofp(x, reg_type(dst))
    if src.is_float and dst.is_float:
        return b.fpext(x, reg_type(dst)) if dst.itemsize > src.itemsize else b.fptrunc(x, reg_type(dst))
    return _float_to_int(f, x, dst)


def _via_f64(f: _Fn, fn, dt: DType, *xs):
    """Evaluate a float function on integer/bool values the way numpy does: in float64,
    then cast back."""
    from svod.dtype import float64

    ys = [_cast(f, x, dt, float64) for x in xs]
    return _cast(f, fn(*ys), float64, dt)


def _math(f: _Fn, name: str, *xs) -> ir.Value:
    from svod.codegen.vecmath_inv import emit_math  # vecmath's, with the inverse functions registered

    return emit_math(f.b, name, *xs)


def _float_divmod(f: _Fn, a: ir.Value, b_: ir.Value, want_div: bool) -> ir.Value:
    """numpy's npy_divmod (floor_divide / remainder) for floats, branch-free."""
    b = f.b
    ty = a.type
    zero = _fconst(ty, 0.0)
    mod = b.frem(a, b_)
    div = b.fdiv(b.fsub(a, mod), b_)
    mod_nz = b.fcmp_unordered("!=", mod, zero)  # `if (mod)`: NaN counts as non-zero
    adj = b.and_(mod_nz, b.xor(b.fcmp_ordered("<", b_, zero), b.fcmp_ordered("<", mod, zero)))
    copysign = lambda m, s: f.call_intr(f"llvm.copysign.{_tsuf(ty)}", ty, [m, s])
    if not want_div:
        mod2 = b.select(adj, b.fadd(mod, b_), mod)
        mod3 = b.select(mod_nz, mod2, copysign(zero, b_))
        return b.select(b.fcmp_ordered("==", b_, zero), mod, mod3)
    div2 = b.select(adj, b.fsub(div, _fconst(ty, 1.0)), div)
    fl = f.call_intr(f"llvm.floor.{_tsuf(ty)}", ty, [div2])
    fl2 = b.select(b.fcmp_ordered(">", b.fsub(div2, fl), _fconst(ty, 0.5)), b.fadd(fl, _fconst(ty, 1.0)), fl)
    q = b.fdiv(a, b_)
    res = b.select(b.fcmp_unordered("!=", div2, zero), fl2, copysign(zero, q))
    return b.select(b.fcmp_ordered("==", b_, zero), q, res)


def _int_divmod(f: _Fn, a: ir.Value, d: ir.Value, dt: DType, want_div: bool) -> ir.Value:
    """Floor division/modulo without traps: 0 for division by zero, INT_MIN // -1 wraps;
    unsigned dtypes divide unsigned (udiv/urem)."""
    b = f.b
    ty = a.type
    bits = 8 * dt.itemsize
    c = lambda v: ir.Constant(ty, v)
    dz = b.icmp_signed("==", d, c(0))
    if bits <= 32:
        return _small_int_divmod(f, a, d, dz, dt, want_div)
    if dt.is_unsigned:  # floor is truncation; only division by zero needs guarding
        ds = b.select(dz, c(1), d)
        return b.select(dz, c(0), b.udiv(a, ds) if want_div else b.urem(a, ds))
    ovf = b.and_(b.icmp_signed("==", a, c(-(2 ** (bits - 1)))), b.icmp_signed("==", d, c(-1)))
    ds = b.select(b.or_(dz, ovf), c(1), d)
    q = b.sdiv(a, ds)
    r = b.srem(a, ds)
    adj = b.and_(b.icmp_signed("!=", r, c(0)), b.icmp_signed("<", b.xor(r, ds), c(0)))
    res = b.select(adj, b.sub(q, c(1)), q) if want_div else b.select(adj, b.add(r, ds), r)
    return b.select(dz, c(0), res)


def _small_int_divmod(f: _Fn, a: ir.Value, d: ir.Value, dz: ir.Value, dt: DType, want_div: bool) -> ir.Value:
    """Floor division/modulo of 8-, 16- and 32-bit integers through float32 (8/16-bit) or
    float64 (32-bit), which vectorise (x86 has no vector integer division: sdiv/udiv run
    one element at a time; 10x on 4M uint8 or int16 pairs, docs/codegen.md). Exact:
    |a|, |d| <= 2**B (B = 16, 32), so a non-integer quotient a/d lies at least 1/|d| from
    every integer, more than the rounding error |a/d| * 2**-P of the float's P-bit
    significand (P = 24, 53; needs |a| < 2**P) -- the rounded quotient has the same floor,
    and an integer quotient is exact. The floor converts at twice the width first
    (-128 // -1 = 128 then wraps to -128, as numpy); the remainder is a - q*d in the
    dtype's own wrapping arithmetic (its sign is the divisor's). Division by zero: 0."""
    b = f.b
    ty = a.type
    c = lambda v: ir.Constant(ty, v)
    ft, wide = (F32, I32) if dt.itemsize <= 2 else (F64, I64)
    ds = b.select(dz, c(1), d)
    if dt.is_signed:
        fa, fd = b.sitofp(a, ft), b.sitofp(ds, ft)
    else:
        fa, fd = b.uitofp(a, ft), b.uitofp(ds, ft)
    q = b.fdiv(fa, fd)
    if dt.is_signed:
        q = f.call_intr(f"llvm.floor.{_tsuf(ft)}", ft, [q])
    q = b.trunc(b.fptosi(q, wide), ty)  # in range: |q| <= 2**(bits-1) (signed) or < 2**bits (unsigned)
    res = q if want_div else b.sub(a, b.mul(q, ds))
    return b.select(dz, c(0), res)


def _int_pow(f: _Fn, a: ir.Value, e: ir.Value, dt: DType) -> ir.Value:
    b = f.b
    ty = a.type
    bits = 8 * dt.itemsize
    c = lambda v: ir.Constant(ty, v)
    res, base = c(1), a
    nbits = bits if dt.is_unsigned else bits - 1  # a signed exponent's top bit is its sign
    for bit in range(nbits):  # square-and-multiply, branch-free (wraps like numpy)
        take = b.icmp_unsigned("!=", b.and_(b.lshr(e, c(bit)), c(1)), c(0))
        res = b.select(take, b.mul(res, base), res)
        if bit < nbits - 1:
            base = b.mul(base, base)
    if dt.is_unsigned:
        return res
    odd = b.icmp_unsigned("!=", b.and_(e, c(1)), c(0))
    negres = b.select(b.icmp_signed("==", a, c(1)), c(1),
                      b.select(b.icmp_signed("==", a, c(-1)), b.select(odd, c(-1), c(1)), c(0)))
    return b.select(b.icmp_signed("<", e, c(0)), negres, res)


def _shift(f: _Fn, a: ir.Value, n: ir.Value, dt: DType, left: bool) -> ir.Value:
    """numpy's shifts: a count outside [0, bits) (negative counts included: numpy compares
    them unsigned) gives 0, or -1 for a negative value shifted right; never LLVM poison.
    Unsigned values shift right logically."""
    b = f.b
    if not dt.is_int:
        raise LoweringError(f"shift of {dt}")
    ty = a.type
    bits = 8 * dt.itemsize
    ok = b.icmp_unsigned("<", n, ir.Constant(ty, bits))
    safe = b.select(ok, n, ir.Constant(ty, 0))
    if left:
        return b.select(ok, b.shl(a, safe), ir.Constant(ty, 0))
    if dt.is_unsigned:
        return b.select(ok, b.lshr(a, safe), ir.Constant(ty, 0))
    return b.select(ok, b.ashr(a, safe), b.ashr(a, ir.Constant(ty, bits - 1)))


_FCMP = {Ops.CMPLT: "<", Ops.CMPLE: "<=", Ops.CMPEQ: "=="}


def emit_op(f: _Fn, op, dt: DType, arg, xs: list[ir.Value], src_dts: list[DType]) -> ir.Value:
    """One body node on scalar registers, numpy semantics (see svod/interp.py); a complex
    value is a (re, im) pair (`svod/codegen/cplx.py`)."""
    b = f.b
    if dt.kind == "c" or (src_dts and any(s.kind == "c" for s in src_dts)):
        from svod.codegen.cplx import emit_complex

        return emit_complex(f, op, dt, arg, xs, src_dts, lambda x, s, d: _cast(f, x, s, d))
    if op is Ops.CONST:
        return _const(dt, arg)
    sdt = src_dts[0] if src_dts else dt
    if op is Ops.CAST:
        return _cast(f, xs[0], sdt, dt)
    if op is Ops.WHERE:
        return b.select(xs[0], xs[1], xs[2])
    if op in COMPARE:
        x, y = xs
        if sdt.is_float:
            return b.fcmp_unordered("!=", x, y) if op is Ops.CMPNE else b.fcmp_ordered(_FCMP[op], x, y)
        cmp = {Ops.CMPLT: "<", Ops.CMPLE: "<=", Ops.CMPEQ: "==", Ops.CMPNE: "!="}[op]
        return _icmp(b, sdt, cmp, x, y)
    if op in (Ops.ISNAN, Ops.ISINF):
        x = xs[0]
        if not sdt.is_float:
            return ir.Constant(I1, 0)
        if op is Ops.ISNAN:
            return b.fcmp_unordered("uno", x, x)
        ax = f.call_intr(f"llvm.fabs.{_tsuf(x.type)}", x.type, [x])
        return b.fcmp_ordered("==", ax, _fconst(x.type, math.inf))
    if op is Ops.SIGNBIT:
        x = xs[0]
        if not sdt.is_float:
            raise LoweringError(f"SIGNBIT of {sdt}")
        ity = ir.IntType(8 * sdt.itemsize)
        return b.icmp_signed("<", b.bitcast(x, ity), ir.Constant(ity, 0))
    ty = reg_type(dt)
    if op in _MATH2 or op is Ops.COPYSIGN:
        if not dt.is_float:
            raise LoweringError(f"{op.name} of {dt}")
        if op is Ops.COPYSIGN:
            return f.call_intr(f"llvm.copysign.{_tsuf(ty)}", ty, [xs[0], xs[1]])
        return _math(f, _MATH2[op], xs[0], xs[1])
    if op in (Ops.SHL, Ops.SHR):
        return _shift(f, xs[0], xs[1], dt, op is Ops.SHL)
    if op in _MATH:
        if dt.is_float:
            return _math(f, _MATH[op], xs[0])
        return _via_f64(f, lambda y: _math(f, _MATH[op], y), dt, xs[0])
    if op is Ops.NEG:
        if dt.is_float:
            return b.fneg(xs[0])
        if dt.is_bool:
            raise LoweringError("NEG of bool (numpy rejects it)")
        return b.sub(ir.Constant(ty, 0), xs[0])
    if op is Ops.ABS:
        if dt.is_float:
            return f.call_intr(f"llvm.fabs.{_tsuf(ty)}", ty, [xs[0]])
        if dt.is_bool or dt.is_unsigned:
            return xs[0]
        return b.select(b.icmp_signed("<", xs[0], ir.Constant(ty, 0)), b.sub(ir.Constant(ty, 0), xs[0]), xs[0])
    if op in (Ops.FLOOR, Ops.CEIL, Ops.ROUND):
        if not dt.is_float:
            return xs[0]
        name = {Ops.FLOOR: "floor", Ops.CEIL: "ceil", Ops.ROUND: "roundeven"}[op]
        return f.call_intr(f"llvm.{name}.{_tsuf(ty)}", ty, [xs[0]])
    if op is Ops.SIGN:
        x = xs[0]
        if dt.is_float:
            z = _fconst(ty, 0.0)
            r = b.select(b.fcmp_ordered("<", x, z), _fconst(ty, -1.0), b.select(b.fcmp_unordered("uno", x, x), x, z))
            return b.select(b.fcmp_ordered(">", x, z), _fconst(ty, 1.0), r)
        if dt.is_bool:
            return x
        z = ir.Constant(ty, 0)
        if dt.is_unsigned:
            return b.zext(b.icmp_unsigned("!=", x, z), ty)
        return b.sub(b.zext(b.icmp_signed(">", x, z), ty), b.zext(b.icmp_signed("<", x, z), ty))
    if op is Ops.NOT:
        if dt.is_float:
            raise LoweringError("NOT of a float")
        return b.xor(xs[0], ir.Constant(ty, -1 if not dt.is_bool else 1))
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        if dt.is_float:
            raise LoweringError(f"{op.name} of floats")
        return {Ops.AND: b.and_, Ops.OR: b.or_, Ops.XOR: b.xor}[op](xs[0], xs[1])
    x, y = xs if len(xs) == 2 else (xs[0], None)
    if op is Ops.ADD:
        return b.fadd(x, y) if dt.is_float else b.or_(x, y) if dt.is_bool else b.add(x, y)
    if op is Ops.SUB:
        return b.fsub(x, y) if dt.is_float else b.xor(x, y) if dt.is_bool else b.sub(x, y)
    if op is Ops.MUL:
        return b.fmul(x, y) if dt.is_float else b.and_(x, y) if dt.is_bool else b.mul(x, y)
    if op is Ops.DIV:
        if dt.is_float:
            return b.fdiv(x, y)
        return _via_f64(f, lambda p, q: b.fdiv(p, q), dt, x, y)
    if op in (Ops.IDIV, Ops.MOD):
        if dt.is_float:
            return _float_divmod(f, x, y, op is Ops.IDIV)
        if dt.is_bool:
            return b.and_(x, y) if op is Ops.IDIV else ir.Constant(I1, 0)
        return _int_divmod(f, x, y, dt, op is Ops.IDIV)
    if op is Ops.POW:
        if dt.is_float:
            return _math(f, "pow", x, y)
        if dt.is_bool:
            return b.or_(x, b.xor(y, ir.Constant(I1, 1)))
        return _int_pow(f, x, y, dt)
    if op in (Ops.MAX, Ops.MIN):
        is_max = op is Ops.MAX
        if dt.is_float:
            # numpy: (a > b || isnan(a)) ? a : b  (NaN propagates from either side)
            take = b.or_(b.fcmp_ordered(">" if is_max else "<", x, y), b.fcmp_unordered("uno", x, x))
            return b.select(take, x, y)
        if dt.is_bool:
            return b.or_(x, y) if is_max else b.and_(x, y)
        return b.select(_icmp(b, dt, ">" if is_max else "<", x, y), x, y)
    raise LoweringError(f"no lowering for {op!r} on {dt}")


# ----------------------------------------------------------------------------- public


@dataclass(frozen=True)
class Lowered:
    ir: str  # unoptimised LLVM IR text
    symbol: str
    units: int
    plan: LoopPlan


def lower_kernel(kernel: Kernel, symbol: str | None = None) -> Lowered:
    """Kernel -> LLVM IR text with entry ``void symbol(i8** slots, i64 ub, i64 ue)``."""
    symbol = symbol or symbol_for(kernel)
    if kernel.attention is not None:
        from svod.codegen.attention import lower_attention

        return lower_attention(kernel, symbol)
    module = ir.Module(name=f"svod_{kernel.name}")
    low = KernelLowering(kernel, module, symbol)
    low.lower()
    return Lowered(str(module), symbol, low.plan.units, low.plan)


__all__ = ["CHUNK", "LOWER_VERSION", "LoopPlan", "Lowered", "LoweringError", "SUM_BLOCK", "emit_op",
           "lower_kernel", "merge_axes", "plan_loops", "symbol_for"]
