"""What a kernel does, counted: the quantities the calibrated model prices and the
learned correction regresses on.

`features(kernel)` counts over the kernel's `svod.codegen.schedule.Schedule`, the object
the emitter reads: its loop plan and units, column reduce, per-row values (computed once
per row), the nodes each pass evaluates per element except what the stash keeps in a row
buffer, the masked loops cut into plain pieces, the GEMM tiling. Elementwise nodes that
only read inputs broadcast along the inner loop are counted once per unit (LLVM hoists
them). Loads are counted per access pattern (contiguous, broadcast, strided, masked,
through a chain of views), since a gather costs far more than a streaming load.

>>> from svod.kernel_examples import softmax_kernel
>>> f = features(softmax_kernel(64, 256))
>>> f.kind, f.rows, f.passes, f.ops["EXP"]
('rowwise', 64, 3, 16384.0)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from svod.codegen.schedule import Schedule, closure, pass_targets, schedule
from svod.costing import complex_units, input_bytes, input_bytes_each
from svod.ir import Ops
from svod.kernel import ACC, LOAD, VALID, Kernel, view_axes_stride0
from svod.ops import feature_classes, feature_units

# op -> cost class (everything else "ALU") and evaluations of it per element: svod/ops.py
OP_CLASS: dict = feature_classes()
OP_UNITS: dict = feature_units()
ACCESS = ("contig", "bcast", "strided", "reverse", "masked", "chain")


@dataclass
class Features:
    kind: str  # elementwise | reduce | rowwise | matmul | blas
    size: int  # elements of the iteration space
    units: int  # parallel work units (rows, chunks, tiles)
    rows: int  # rows of a reduce/rowwise kernel (units of the kept axes), else units
    row_len: int  # elements per row (reduce space), 1 for elementwise
    passes: int
    read_bytes: int  # unique bytes read from the input buffers
    write_bytes: int
    row_bytes: int  # bytes of one row of the inputs read along the row (multi-pass re-reads)
    ops: dict[str, float] = field(default_factory=dict)  # cost class (+ "64" for 8-byte dtypes) -> evaluations
    access: dict[str, float] = field(default_factory=dict)  # access pattern -> element loads
    reduce_elems: float = 0.0  # accumulations (REDUCE/ARGMAX/ARGMIN updates)
    column: bool = False  # column reduce (reduce over outer axes, kept innermost axis)
    flops: float = 0.0  # matmul multiply-adds x 2
    library: bool = False
    matmul_strided: bool = False  # the matmul's B operand is not contiguous along n (a gather per product)
    # elements of a strided B the GEMM packs (each row tile of a unit packs its own panels):
    # the gather a transposed weight costs, against contiguous packing
    b_packed: float = 0.0
    outputs: int = 1
    inputs: int = 0
    calls: dict[str, float] = field(default_factory=dict)  # op classes run as vector-library calls -> evaluations
    # bytes the innermost loop sweeps through a strided (transposed) read, extent x stride:
    # the reach its cache lines and TLB entries need (a (1024, 64) transpose spans 256 KB
    # however large the tensor; a 2048^2 one 16 MB)
    strided_span: float = 0.0
    # bytes of the input buffers read only contiguously: streams that run while the
    # kernel's latency-bound gathers (transposed, chained views) wait on their misses
    contig_read_bytes: int = 0
    # bytes a generated GEMM's epilogue reads (inputs other than A and B): loaded per output
    # tile after its K loop, short row pieces that the prefetchers do not stream
    epilogue_read_bytes: int = 0

    @property
    def working_set(self) -> int:
        return self.read_bytes + self.write_bytes

    def vector(self) -> dict[str, float]:
        """Named numeric features (the learned correction's inputs)."""
        v = {"size": float(self.size), "units": float(self.units), "rows": float(self.rows),
             "passes": float(self.passes), "read_bytes": float(self.read_bytes),
             "write_bytes": float(self.write_bytes), "reduce_elems": self.reduce_elems,
             "flops": self.flops, "column": float(self.column), "inputs": float(self.inputs),
             "matmul_strided": float(self.matmul_strided),
             "outputs": float(self.outputs)}
        for k, x in self.ops.items():
            v["op:" + k] = x
        for k, x in self.access.items():
            v["access:" + k] = x
        v["calls"] = sum(self.calls.values())
        return v


@functools.lru_cache(maxsize=1)
def _library_calls() -> frozenset:
    """(op class) pairs the codegen emits as libmvec calls on this machine."""
    try:
        from svod.codegen.jit import libmvec_enabled
        from svod.codegen.vecmath import libmvec_preferred

        if not libmvec_enabled():
            return frozenset()
    except Exception:  # noqa: BLE001 - no codegen: nothing is a call
        return frozenset()
    # kernels are scalar IR widened by LLVM's loop vectoriser: only the functions routed
    # through vector-variant calls (sin, cos; erf where preferred) are calls in the loop,
    # the rest are inlined polynomials
    names = {"sin": "SIN", "cos": "COS", "erf": "ERF"}
    return frozenset(names[f] + ("64" if dt == "f64" else "") for f, dt in libmvec_preferred() if f in names)


def op_class(op, itemsize: int) -> str:
    c = OP_CLASS.get(op, "ALU")
    return c + "64" if itemsize == 8 else c


def read_bytes_by_slot(kernel: Kernel) -> dict[int, int]:
    """Bytes of each input slot `kernel` reads (broadcast axes once, padding not at all)."""
    per_slot: dict[int, int] = {}
    for inp, nbytes in zip(kernel.inputs, _by_key("input_bytes", kernel, input_bytes_each)):
        per_slot[inp.slot] = max(per_slot.get(inp.slot, 0), nbytes)
    return per_slot


def _unique_read_bytes(kernel: Kernel) -> int:
    return sum(read_bytes_by_slot(kernel).values())


def _write_bytes(kernel: Kernel) -> int:
    return sum(math.prod(o.shape) * o.dtype.itemsize for o in kernel.outputs)


def access_class(kernel: Kernel, index: int, sched: Schedule | None = None) -> str:
    """How input `index` is read along the innermost loop of the kernel's schedule."""
    sched = sched or schedule(kernel)
    inp = kernel.inputs[index]
    if any(v.fully_masked for v in inp.view.views):
        return "bcast"
    if len(inp.view.views) > 1:
        return "chain"
    v = inp.view.views[0]
    d = sched.inner_dim
    if kernel.matmul is None and d is not None and view_axes_stride0(inp.view, d):
        return "bcast"
    if v.mask is not None and not sched.static_masks(index):
        return "masked"  # a loop not cut at the mask: a masked load (and a select)
    if d is None:
        return "contig"
    if v.strides[d] == 0:  # constant along the inner loop (a GEMM epilogue's per-row operand)
        return "bcast"
    return "contig" if v.strides[d] == 1 else "reverse" if v.strides[d] == -1 else "strided"


_BY_KEY: dict[tuple[str, str], object] = {}  # (what, kernel content key) -> counted (a Kernel's
# own hash walks all its views: slower than counting again)


def _by_key(what: str, kernel: Kernel, count):
    k = (what, kernel.key())
    v = _BY_KEY.get(k)
    if v is None:
        if len(_BY_KEY) > 200_000:
            _BY_KEY.clear()
        v = _BY_KEY[k] = count(kernel)
    return v


def features(kernel: Kernel) -> Features:
    """Count what `kernel` does (cached by content key)."""
    return _by_key("features", kernel, _count)


def _count(kernel: Kernel) -> Features:
    k = kernel
    n = k.size
    if k.library is not None:  # numpy's code (svod/library.py): no loops of ours to count
        return Features("library", n, 1, 1, 1, 1, input_bytes(k), _write_bytes(k), 0,
                        outputs=len(k.outputs), inputs=len(k.inputs))
    if k.rowcol is not None:
        return _count_rowcol(k)
    if k.mlp is not None:
        return _count_mlp(k)
    red = set(k.reduce_axes)
    row_len = math.prod(k.shape[a] for a in red) if red else 1
    rows = n // row_len if row_len else math.prod(s for d, s in enumerate(k.shape) if d not in red)
    sched = schedule(k)
    units = sched.loops.units
    column = sched.column
    # a variance of every element read as rows of a few columns (svod.codegen.schedule.
    # flat_variance): one sequential read like a row reduction, not a strided column one
    flat = column and bool(sched.loops.axes) and sched.loops.axes[-1].reduce
    column = column and not flat
    kind = k.kind
    if kind == "elementwise":
        rows = units
    acc_of = [access_class(k, i, sched) for i in range(len(k.inputs))]
    span = 0.0
    d = sched.inner_dim
    for i, a in enumerate(acc_of):
        if a == "strided" and d is not None:
            inp = k.inputs[i]
            span = max(span, float(k.shape[d] * abs(inp.view.views[-1].strides[d]) * inp.dtype.itemsize))
    row_bytes = 0
    if red:
        row_bytes = sum(row_len * inp.dtype.itemsize for i, inp in enumerate(k.inputs) if acc_of[i] != "bcast")
    slot_class: dict[int, set[str]] = {}
    for inp, a in zip(k.inputs, acc_of):
        slot_class.setdefault(inp.slot, set()).add(a)
    contig = sum(nb for slot, nb in read_bytes_by_slot(k).items() if slot_class.get(slot) == {"contig"})
    f = Features(kind, n, units, rows, row_len, 1 if flat else k.passes, _unique_read_bytes(k), _write_bytes(k),
                 row_bytes, column=column, outputs=len(k.outputs), inputs=len(k.inputs), strided_span=span,
                 contig_read_bytes=contig)
    counts = [0.0] * len(k.nodes)  # evaluations of each node
    if k.attention is not None:  # two products, a row softmax of the (m, n) scores in between
        at = k.attention
        batch = n // max(at.m * at.dv, 1)
        scores = float(batch * at.m * at.n)
        f.flops = 2.0 * scores * (at.d + at.dv)
        f.ops = {"EXP": scores, "ALU": 4.0 * scores, "DIV": float(n)}
        for node in k.nodes:  # t: the scale, the mask (elementwise over the scores)
            if node.op not in (ACC, LOAD, Ops.CONST):
                cls = op_class(node.op, node.dtype.itemsize)
                f.ops[cls] = f.ops.get(cls, 0.0) + scores * OP_UNITS.get(node.op, 1.0)
            elif node.op == LOAD:
                f.access["contig"] = f.access.get("contig", 0.0) + scores
        f.reduce_elems = 2.0 * scores
        return f
    if k.matmul is not None:
        mm = k.matmul
        batch = n // max(mm.m * mm.n, 1)
        f.flops = 2.0 * batch * mm.m * mm.n * mm.k
        f.library = mm.library
        bv = k.inputs[mm.b].view
        f.matmul_strided = len(bv.views) > 1 or (mm.n > 1 and abs(bv.views[0].strides[-1]) != 1)
        if f.matmul_strided and not f.library:
            f.b_packed = _b_packed(k, sched)
        if not f.library:
            f.epilogue_read_bytes = sum(nb for i, nb in enumerate(_by_key("input_bytes", k, input_bytes_each))
                                        if i not in (mm.a, mm.b))
        for i, node in enumerate(k.nodes):
            if node.op not in (ACC, Ops.CONST):
                counts[i] = n
    elif kind == "elementwise":
        invariant = [False] * len(k.nodes)
        for i, node in enumerate(k.nodes):
            if node.op == LOAD:
                invariant[i] = d is not None and acc_of[node.arg] == "bcast" and units > 1 and _multi_axis(k)
            elif node.op == Ops.CONST:
                invariant[i] = True
            elif node.op == VALID:
                invariant[i] = False
            else:
                invariant[i] = all(invariant[s] for s in node.src)
            if node.op is not Ops.CONST:
                counts[i] = units if invariant[i] else n
    else:
        per_row = sched.per_row
        if column:  # every reduction's source per element, the rest once per column
            every = set().union(*sched.closures)
            for i in every:
                counts[i] += n
            kept = n // max(row_len, 1)
            for i, node in enumerate(k.nodes):
                if i not in every and node.op not in (Ops.CONST, Ops.REDUCE):
                    counts[i] += kept
        else:
            for p in range(k.passes):
                stop = {i for i, sp in sched.stash.items() if sp < p}
                for i in closure(k, pass_targets(k, p), per_row, stop):
                    counts[i] += n
                for _i in stop & sched.closures[p]:
                    f.access["contig"] = f.access.get("contig", 0.0) + n  # a stash reload
            for i, node in enumerate(k.nodes):
                if per_row[i] and node.op not in (Ops.CONST, Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
                    counts[i] += rows
        for i, node in enumerate(k.nodes):
            if node.op in (Ops.REDUCE, Ops.ARGMAX, Ops.ARGMIN):
                f.reduce_elems += n
                key = "ARG" if node.op is not Ops.REDUCE else ("SUM" if node.arg == "sum" else "MAXR")
                key = "RED_" + key + ("64" if node.dtype.itemsize == 8 else "")
                f.ops[key] = f.ops.get(key, 0.0) + n
                counts[i] = 0.0
    for i, node in enumerate(k.nodes):
        c = counts[i]
        if not c:
            continue
        if node.op == LOAD:
            a = acc_of[node.arg]
            f.access[a] = f.access.get(a, 0.0) + c
        elif node.op == VALID:  # an index compare, no load
            f.ops["ALU"] = f.ops.get("ALU", 0.0) + c
        elif node.op in (Ops.CONST, ACC):
            continue
        else:
            factor, item = complex_units(node.op, [node.dtype] + [k.nodes[s].dtype for s in node.src])
            cls = op_class(node.op, item)
            f.ops[cls] = f.ops.get(cls, 0.0) + c * OP_UNITS.get(node.op, 1.0) * factor
            if cls in _library_calls():
                f.calls[cls] = f.calls.get(cls, 0.0) + c
    return f


MLP_FIELDS = ("flops", "reduce_elems", "b_packed", "epilogue_read_bytes")
# What packing one weight element once more costs, in flops of the generated GEMM: W4 per
# core with 9 row blocks against 2 (7 more packings of w1 and w2, 8.4M elements each) ran
# 24 ms slower (119.8 vs 95.6 ms CPU), 0.4-0.5 ns an element, ~40 flops at its 86 GFLOP/s (docs/codegen.md,
# "The MLP block"). The analytic model prices no contiguous packing (the two-GEMM plan's
# is in its measured GEMM rate): the MLP kernel's extra packings are added as this work.
MLP_PACK_FLOPS = 40.0


def _count_mlp(k: Kernel) -> Features:
    """A fused MLP kernel (svod/codegen/mlp.py) counted as what it runs: per row block,
    the two generated GEMMs over the block's rows (`svod.codegen.mlp.parts`, each
    counted as the GEMM kernel it is), summed over the blocks. What differs from the
    two-GEMM plan is in the bytes: x and the epilogue operands are read once, the output
    written once, no hidden layer written or read, but w1 and w2 are read (and packed)
    once per block — the repacking the extraction weighs against the hidden layer's
    traffic (docs/codegen.md, "The MLP block")."""
    from svod.codegen.mlp import parts
    from svod.codegen.schedule import block_rows

    ml = k.mlp
    sched = schedule(k)
    blocks = sched.loops.units
    rows = block_rows(k, sched.target)
    sizes = [(rows, ml.m // rows), (ml.m % rows, 1 if ml.m % rows else 0)]
    each = input_bytes_each(k)
    weights = each[ml.w1] + each[ml.w2]
    f = Features("mlp", k.size, blocks, blocks, 1, 1, _unique_read_bytes(k) + max(0, blocks - 1) * weights,
                 _write_bytes(k), 0, outputs=len(k.outputs), inputs=len(k.inputs))
    for r, count in sizes:
        if not count or not r:
            continue
        for g in parts(k, r)[:2]:
            sub = features(g)
            for name in MLP_FIELDS:
                setattr(f, name, getattr(f, name) + count * getattr(sub, name))
            f.matmul_strided = f.matmul_strided or sub.matmul_strided
            for table in ("ops", "access", "calls"):
                mine = getattr(f, table)
                for cls, x in getattr(sub, table).items():
                    mine[cls] = mine.get(cls, 0.0) + count * x
    # the packings beyond the two-GEMM plan's: a block packs each weight once (its GEMMs are
    # tiled for one worker), the two-GEMM plan once per row tile of its product
    from svod.codegen.schedule import gemm_tiling

    isz = k.inputs[ml.x].dtype.itemsize
    tiles1 = gemm_tiling(1, ml.m, ml.h, ml.d, isz, sched.target).tiles_m
    tiles2 = gemm_tiling(1, ml.m, ml.n, ml.h, isz, sched.target).tiles_m
    f.flops += MLP_PACK_FLOPS * (max(0, blocks - tiles1) * ml.d * ml.h + max(0, blocks - tiles2) * ml.h * ml.n)
    return f


def _count_rowcol(k: Kernel) -> Features:
    """A row-column kernel (svod/codegen/rowcol.py): its inputs streamed once over the
    (m, n) space, each element value computed once, each reduction of an element value
    one accumulation per element (row lanes in registers, column partials in L1/L2); the
    per-row and per-column values and the full reductions once per row / column."""
    from svod.kernel import ALL, COL, ELEM, ROW

    m, n = k.shape
    sched = schedule(k)
    f = Features("rowcol", k.size, sched.loops.units, m, n, 1, _unique_read_bytes(k), _write_bytes(k),
                 sum(n * i.dtype.itemsize for i in k.inputs), outputs=len(k.outputs), inputs=len(k.inputs))
    f.contig_read_bytes = f.read_bytes
    per = {ELEM: float(k.size), ROW: float(m), COL: float(n), ALL: 1.0}
    for node, space in zip(k.nodes, k.rowcol.spaces):
        if node.op is Ops.CONST:
            continue
        if node.op == LOAD:
            f.access["contig"] = f.access.get("contig", 0.0) + per[space]
            continue
        src = per[k.rowcol.spaces[node.src[0]]] if node.src else 1.0
        if node.op is Ops.REDUCE:
            key = "RED_" + ("SUM" if node.arg == "sum" else "MAXR") + ("64" if node.dtype.itemsize == 8 else "")
            f.ops[key] = f.ops.get(key, 0.0) + src
            f.reduce_elems += src
            continue
        factor, item = complex_units(node.op, [node.dtype] + [k.nodes[s].dtype for s in node.src])
        cls = op_class(node.op, item)
        f.ops[cls] = f.ops.get(cls, 0.0) + per[space] * OP_UNITS.get(node.op, 1.0) * factor
        if cls in _library_calls():
            f.calls[cls] = f.calls.get(cls, 0.0) + per[space]
    return f


def _b_packed(k: Kernel, sched: Schedule) -> float:
    """Elements of B the generated GEMM packs: every unit packs the B panel of its column
    tile for each K block, so B is read once per row tile (per batch)."""
    g = sched.gemm
    return 0.0 if g is None else float(g.batch * g.tiles_m * g.k * g.n)


def _multi_axis(k: Kernel) -> bool:
    return sum(1 for s in k.shape if s != 1) > 1
