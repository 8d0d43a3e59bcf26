"""A bucket's graph program run at its caller's row count: units read at run time.

A dynamic structure (svod.shapes) is planned and compiled once per size bucket ``b``.
`rows_program(gp, b, row_inputs, row_outputs)` derives from the bucket's GraphProgram a
`RowsProgram` whose native segments take the row count ``n`` as an argument and size
each launch from it, so a size ``n <= b`` runs on the caller's own ``n``-row arrays: no
padding rows computed, no copy into a ``b``-row buffer, results of exactly ``n`` rows.
The kernels are the bucket's, unchanged (same code, same object files), except each
generated 2-D matmul, which runs as its *rows variant* (below); the segments that launch
them are generated again (split by library steps as the GraphProgram's are), once per
bucket plan.

Which launches follow the row count (`analyse`). Row slots start as the row-carrying
inputs (`SymbolicCall.row_inputs`); a launch reading a row slot is a *row launch* and
its outputs become row slots. Every row launch reads each row slot through one view,
with axis 0 stepping whole rows (stride = the slot's elements / ``b``, unmasked on axis
0), and every other slot broadcast along axis 0 (stride 0), except a matmul's B. A row
launch is one of:

* a row-wise, reduce, column-reduce or multi-axis elementwise kernel of shape ``(b,
  ...)`` that keeps axis 0 and enumerates its units with axis 0 outermost, a whole
  number ``k`` per row (``("row", k)``): it runs ``n * k`` units — only rows ``< n``
  are read or written. A split reduction (units (group, chunk), svod/codegen/split.py)
  runs so as its rows variant (``("tiles", 1, k)``): a launch of all its ``n * k`` units
  on one thread must take private scratch, and only the variant knows that count (the
  kernel's global scratch is for the pool's partial ranges, one job at a time);
* a one-axis elementwise kernel (chunks of `CHUNK` elements that span rows, ``("chunk",
  elements per row, CHUNK)``): it runs the chunks covering ``n`` rows, ``min(ceil(n *
  elems_per_row / CHUNK), units)``, as its rows variant (``rows=True``,
  `svod.codegen.lower`), whose last chunk stops at element ``n * elems_per_row`` (the
  loop and its tail as the constant kernel's last chunk): nothing read or written past
  row ``n``, so its inputs are the caller's arrays and its outputs ``n``-row blocks, and
  its results are bit-identical to the constant kernel's (the same element code);
* a generated ``(b, K) @ (K, N)`` matmul with the rows on A and B free (GEMM, or the
  integer tile loop; ``("tiles", MT, k)``): it runs the row tiles covering ``n`` rows,
  ``ceil(n / MT) * k`` units (``k`` column tiles each), as its rows variant: the same
  kernel lowered with ``rows=True`` (`svod.codegen.lower`), which reads ``n`` from one
  more argument-block entry, so the last row tile, its packing of A and its fused
  epilogue stop at row ``n`` (`svod.codegen.gemm`). Variants are compiled with the
  bucket's rows program (one more compile per GEMM kernel, counted in
  `kernels_compiled`) and kept in the object cache under the kernel's key (a later
  process loads them);
* a fused MLP kernel (`svod.codegen.mlp`) with the rows on x and the weights free
  (``("tiles", R, 1)``, `_mlp_spec`): the ``ceil(n / R)`` row blocks holding rows, run
  by its rows variant (``lower_mlp(..., rows=True)``), whose last block stops at row
  ``n``; a compile per MLP kernel, cached like the GEMM variants;
* a batched matmul whose batch axis 0 is the rows (every operand carries them): whole
  batch indices, ``("row", units per index)``, the kernel unchanged;
* a fused attention kernel (`svod.codegen.attention`) whose first batch axis is the rows
  (q, k, v and a mask carrying them, or a mask free of them): its units (batch index,
  block of query rows) for the batch indices below ``n``, ``("row", blocks)``, the kernel
  unchanged (`_attention_spec`); a 2-D one whose query rows are the rows (k and v free):
  the ``ceil(n / MR)`` blocks of query rows, ``("tiles", MR, 1)``, as its rows variant
  (``lower_attention(..., rows=True)``: the last block stops at row ``n``);
* a BLAS (library) matmul step of either form (``("lib", batched)``): numpy's BLAS on
  views of its operands' first ``n`` rows and of its output's, between the native
  segments (`RowsProgram._library`).

A launch reading no row slot (work on free values: a weight, a mean of a bias) runs its
compiled unit count. No launch reads or writes a row slot past row ``n``: the inputs are
bound by address (a non-contiguous one is made contiguous, as the exact plan does), never
padded to ``b`` rows. A plan with any other launch (a sort or LAPACK step; a row-column
kernel; an output that is an input) keeps the padding path of
`svod.shapes.SymbolicCall` (`analyse` returns the reason, `RowsProgram.reason`).

Memory: temps keep the bucket's memory plan (sized at the upper bound ``b``: one
storage layout per plan, its offsets in the segment module's slot array; a per-call
plan would re-run the memory planner per size and cost at most 12.5% of the temps);
outputs are pool blocks of ``n`` rows.

Steady calls: a program of one native segment without threads and with small outputs
gives `QuickParts` per row count (`quick_parts`, `runner`): straight-line code that binds
the arrays and calls the segment with ``n`` bound, as an exact plan's graph program does
(svod.jit inlines it: `svod.shapes.BucketRun.quick_parts`).
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading

import numpy as np

import svod.pool as _pool
from svod.codegen.buffers import data_address
from svod.codegen.quick import QuickParts, _Count
from svod.flags import flag
from svod.graph import CompiledGraph, Copy, Launch, slot_nbytes
from svod.kernel import VALID

log = logging.getLogger("svod")

_ROWS_SEGMENT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_OK_KINDS = ("rowwise", "reduce", "elementwise")
# launch specs run by a kernel's rows variant (the row count one more argument-block entry)
_VARIANT_SPECS = ("tiles", "chunk")


def analyse(graph: CompiledGraph, programs, b: int, row_inputs, row_outputs):
    """The launch specs by step index for running `graph` at a run-time row count (module
    docstring: the rules), or the reason it cannot, in words."""
    from svod.codegen.schedule import schedule

    plan = graph.plan
    rows_of = {}  # row slot -> elements per row

    def per_row(slot: int) -> int | None:
        e = math.prod(plan.slots[slot].shape)
        return e // b if e % b == 0 and e else None

    for i, r in enumerate(row_inputs):
        if r and i < plan.n_inputs:
            e = per_row(i)
            if e is None or plan.slots[i].shape[:1] != (b,):
                return f"input {i} of shape {plan.slots[i].shape} is not {b} whole rows"
            rows_of[i] = e
    specs: dict[int, tuple] = {}
    for idx, step in enumerate(graph.steps):
        if isinstance(step, Copy):
            if step.src in rows_of:
                if math.prod(plan.slots[step.dst].shape) != math.prod(plan.slots[step.src].shape):
                    return f"a copy of part of row slot {step.src}"
                rows_of[step.dst] = rows_of[step.src]
                specs[idx] = ("row", slot_nbytes(plan, step.dst) // b)
            continue
        if not isinstance(step, Launch):
            continue
        prog = programs[step.kernel]
        k = prog.kernel
        if not any(inp.slot in rows_of for inp in k.inputs):
            if any(o.slot in rows_of for o in k.outputs):
                return f"kernel {k.name} writes a row slot without reading one"
            continue  # free work: its compiled unit count
        spec_of = _mlp_spec if k.mlp is not None else _rmsnorm_spec if k.rmsnorm is not None else \
            _matmul_spec if k.matmul is not None and k.kind in ("matmul", "blas") else \
            _attention_spec if k.attention is not None else None
        if spec_of is not None:  # the kernels with a launch spec of their own
            got = spec_of(k, prog, b, rows_of)
            if isinstance(got, str):
                return got
            specs[idx] = got
            for o in k.outputs:
                e = per_row(o.slot)
                if e is None:
                    return f"kernel {k.name} writes slot {o.slot} of {plan.slots[o.slot].shape}, not {b} rows"
                rows_of[o.slot] = e
            continue
        if k.kind not in _OK_KINDS or k.matmul is not None or k.library is not None:
            return f"kernel {k.name} is a {k.kind} kernel (its units span rows)"
        if getattr(prog, "units", None) is None or not hasattr(prog, "address"):
            return f"kernel {k.name} has no native entry"
        if not k.shape or k.shape[0] != b or 0 in k.reduce_axes:
            return f"kernel {k.name} of shape {k.shape} does not keep the {b} rows on its axis 0"
        for inp in k.inputs:
            if len(inp.view.views) != 1:
                return f"kernel {k.name} reads slot {inp.slot} through a chain of views"
            v = inp.view.views[0]
            if inp.slot in rows_of:
                if v.strides[0] != rows_of[inp.slot] or tuple(v.valid_box()[0]) != (0, b) or v.offset < 0:
                    return f"kernel {k.name} does not read slot {inp.slot} row by row"
            elif v.strides[0] != 0:
                return f"kernel {k.name} reads free slot {inp.slot} along the rows"
        for node in k.nodes:
            if node.op == VALID and (len(node.arg.views) != 1 or tuple(node.arg.views[0].valid_box()[0]) != (0, b)):
                return f"kernel {k.name} masks its rows"
        loops = schedule(k).loops
        if loops.units != prog.units:
            return f"kernel {k.name}: its units are not whole rows ({loops.kind}, cols {loops.cols})"
        if loops.chunk:
            if len(loops.axes) != 1 or loops.axes[0].dims[0] != 0:
                return f"kernel {k.name}: its chunks do not start with the rows"
            specs[idx] = ("chunk", math.prod(k.shape) // b, loops.chunk)
        elif loops.narrow and loops.unit_axes and loops.unit_axes[0].dims[0] == 0:
            # short rows read across rows (svod/codegen/narrow.py): blocks of `narrow` rows, by its rows variant
            specs[idx] = ("tiles", loops.narrow, 1)
        else:
            if not loops.unit_axes or loops.unit_axes[0].dims[0] != 0 or loops.units % b:
                return f"kernel {k.name}: its units do not enumerate the rows outermost"
            # NOTE: a split reduction (units (group, chunk)) runs as its rows variant: its launch
            # of every unit at n rows must use private scratch, not the kernel's globals, which
            # only the pool's one job at a time may use (svod/codegen/split.py)
            specs[idx] = ("tiles", 1, loops.units // b) if loops.split else ("row", loops.units // b)
        for o in k.outputs:
            e = per_row(o.slot)
            if e is None:
                return f"kernel {k.name} writes slot {o.slot} of {plan.slots[o.slot].shape}, not {b} rows"
            rows_of[o.slot] = e
    seen = set()
    for j, ((slot, shape), r) in enumerate(zip(plan.outputs, row_outputs)):
        if slot < plan.n_inputs or slot in seen:
            return f"output {j} is an input or a repeated output (a copy)"
        seen.add(slot)
        if bool(r) != (slot in rows_of) or (r and tuple(shape)[:1] != (b,)):
            return f"output {j} (slot {slot}) {'carries' if r else 'does not carry'} rows, its kernels disagree"
    if not specs:
        return "no launch reads the rows"
    variants = {graph.steps[i].kernel: sp[0] for i, sp in specs.items() if sp[0] in _VARIANT_SPECS}
    for idx, step in enumerate(graph.steps):
        if isinstance(step, Launch) and step.kernel in variants and \
                specs.get(idx, ("",))[0] != variants[step.kernel]:
            return f"kernel {programs[step.kernel].kernel.name} is launched on free values too"
    return specs


def _matmul_spec(k, prog, b: int, rows_of: dict):
    """The launch spec of matmul kernel `k` reading row slots (`analyse`), or why not.

    * ``(b, M) @ (M, N)`` with the rows on ``A``'s axis 0 and ``B`` free: ``("tiles", mt,
      k)`` — whole row tiles of ``mt`` rows (``k`` units per tile: the column tiles),
      run by the kernel's *rows variant*, which reads the row count at run time so the
      last tile stops at row ``n`` (`svod.codegen.lower`, ``rows=True``);
    * a batched product whose batch axis 0 is the rows (every operand carries them):
      ``("row", units per batch index)`` — the batch index is the outermost unit;
    * a BLAS (library) step of either form: ``("lib", batched)`` — numpy's BLAS on the
      operands' first ``n`` rows (views, no copy; `RowsProgram._library`).
    Every operand is read through one view; row slots row by row (axis-0 stride = the
    slot's row, unmasked), epilogue operands free of the rows broadcast along them."""
    from svod.codegen.schedule import MM_ROWS, schedule, supports_gemm

    mm = k.matmul
    if k.attention is not None or k.library is not None:
        return f"kernel {k.name} is a library step (its units span rows)"
    if not k.shape or k.shape[0] != b or getattr(prog, "units", None) is None or \
            not (mm.library or hasattr(prog, "address")):
        return f"kernel {k.name} of shape {k.shape} does not keep the {b} rows on its axis 0"
    batched = len(k.shape) > 2
    for i, inp in enumerate(k.inputs):
        if len(inp.view.views) != 1:
            return f"kernel {k.name} reads slot {inp.slot} through a chain of views"
        v = inp.view.views[0]
        if inp.slot in rows_of:
            if i == mm.b and not batched:
                return f"kernel {k.name}: its B operand (slot {inp.slot}) carries the rows"
            if v.strides[0] != rows_of[inp.slot] or tuple(v.valid_box()[0]) != (0, b) or v.offset < 0 or \
                    (mm.library and v.mask is not None):
                return f"kernel {k.name} does not read slot {inp.slot} row by row"
        elif i == mm.a:
            return f"kernel {k.name}: its A operand (slot {inp.slot}) does not carry the rows"
        elif i != mm.b and v.strides[0] != 0:
            return f"kernel {k.name} reads free slot {inp.slot} along the rows"
        elif i == mm.b and batched:
            return f"kernel {k.name}: its batched B operand (slot {inp.slot}) does not carry the rows"
    for node in k.nodes:
        if node.op == VALID and (len(node.arg.views) != 1 or tuple(node.arg.views[0].valid_box()[0]) != (0, b)):
            return f"kernel {k.name} masks its rows"
    if mm.library:  # BLAS on the operands' first n rows (`RowsProgram._library`)
        if len(k.outputs) != 1:
            return f"kernel {k.name}: a library step with {len(k.outputs)} outputs"
        return ("lib", batched)
    units = prog.units
    if batched:
        if units % b:
            return f"kernel {k.name}: its {units} units are not whole batch indices of {b}"
        return ("row", units // b)
    if supports_gemm(k):
        g = schedule(k).gemm
        if g is None or g.batch != 1 or g.units != units or g.m != b:
            return f"kernel {k.name}: its GEMM tiling does not match its units"
        return ("tiles", g.mt, g.tiles_n)
    if units != -(-b // MM_ROWS):
        return f"kernel {k.name}: its {units} units are not blocks of {MM_ROWS} rows"
    return ("tiles", MM_ROWS, 1)


def _attention_spec(k, prog, b: int, rows_of: dict):
    """The launch spec of attention kernel `k` (`svod.codegen.attention`) reading row
    slots, or why not: ``("row", units per batch index)`` when the rows are its first
    batch axis — its units are (batch index, block of query rows) with the batch index
    outermost, so the first ``n * k`` units are the batch indices below ``n``, the kernel
    unchanged. Every row-carrying operand (q, k, v, a mask) is read row by row (axis-0
    stride = the slot's row, unmasked), every other one broadcast along the rows (stride
    0). Rows on the query axis (a 2-D attention): `_query_rows_spec`."""
    at = k.attention
    if getattr(prog, "units", None) is None or not hasattr(prog, "address") or not k.shape or k.shape[0] != b:
        return f"attention kernel {k.name} of shape {k.shape} does not keep the {b} rows on its axis 0"
    if len(k.shape) == 2:
        return _query_rows_spec(k, prog, b, rows_of)
    for inp in k.inputs:
        if len(inp.view.views) != 1:
            return f"attention kernel {k.name} reads slot {inp.slot} through a chain of views"
        v = inp.view.views[0]
        if inp.slot in rows_of:
            if v.strides[0] != rows_of[inp.slot] or tuple(v.valid_box()[0]) != (0, b) or v.offset < 0 or \
                    v.shape[0] != b:
                return f"attention kernel {k.name} does not read slot {inp.slot} row by row"
        elif v.strides[0] != 0:
            return f"attention kernel {k.name} reads free slot {inp.slot} along the rows"
    for node in k.nodes:
        if node.op == VALID and (len(node.arg.views) != 1 or tuple(node.arg.views[0].valid_box()[0]) != (0, b)):
            return f"attention kernel {k.name} masks its rows"
    units = prog.units
    if units % b or units != math.prod(k.shape[:-2]) * -(-at.m // _attention_rows()):
        return f"attention kernel {k.name}: its {units} units are not whole batch indices of {b}"
    return ("row", units // b)


def _query_rows_spec(k, prog, b: int, rows_of: dict):
    """The launch spec of a 2-D attention kernel whose query rows are the rows (q carries
    them, k and v do not), or why not: ``("tiles", MR, 1)`` — the ``ceil(n / MR)`` blocks
    of query rows, run by the kernel's rows variant (``lower_attention(..., rows=True)``),
    whose last block reads and stores rows below ``n`` only. q (and a mask carrying the
    rows) is read row by row, a mask free of them broadcast along them (stride 0)."""
    at = k.attention
    mr = _attention_rows()
    for i, inp in enumerate(k.inputs):
        if len(inp.view.views) != 1:
            return f"attention kernel {k.name} reads slot {inp.slot} through a chain of views"
        v = inp.view.views[0]
        if i == at.q:
            if inp.slot not in rows_of or v.strides[0] != rows_of[inp.slot] or v.offset < 0 or \
                    tuple(v.valid_box()[0]) != (0, b):
                return f"attention kernel {k.name} does not read its queries (slot {inp.slot}) row by row"
        elif i in (at.k, at.v):
            if inp.slot in rows_of:
                return f"attention kernel {k.name}: its keys or values (slot {inp.slot}) carry the rows"
        elif inp.slot in rows_of:
            if v.strides[0] != rows_of[inp.slot] or v.offset < 0 or tuple(v.valid_box()[0]) != (0, b):
                return f"attention kernel {k.name} does not read slot {inp.slot} row by row"
        elif v.strides[0] != 0:
            return f"attention kernel {k.name} reads free slot {inp.slot} along the rows"
    if at.m != b or prog.units != -(-b // mr):
        return f"attention kernel {k.name}: its {prog.units} units are not blocks of {mr} query rows"
    return ("tiles", mr, 1)


def _attention_rows() -> int:
    from svod.codegen.attention import tile

    return tile()[0]


def _mlp_spec(k, prog, b: int, rows_of: dict):
    """The launch spec of fused MLP kernel `k` (`svod.codegen.mlp`) reading row slots, or
    why not: ``("tiles", R, 1)`` — whole blocks of R rows (`block_rows`: one unit each),
    run by the kernel's rows variant, which reads the row count at run time so the last
    block stops at row ``n``. x carries the rows (read row by row), the weights do not,
    every other operand (a bias, a residual) either carries them row by row or is the
    same for every row."""
    from svod.codegen.schedule import block_rows, schedule

    ml = k.mlp
    if not k.shape or k.shape[0] != b or ml.m != b or getattr(prog, "units", None) is None or \
            not hasattr(prog, "address"):
        return f"MLP kernel {k.name} of shape {k.shape} does not keep the {b} rows on its axis 0"
    for i, inp in enumerate(k.inputs):
        if len(inp.view.views) != 1:
            return f"MLP kernel {k.name} reads slot {inp.slot} through a chain of views"
        v = inp.view.views[0]
        if inp.slot in rows_of:
            if i in (ml.w1, ml.w2):
                return f"MLP kernel {k.name}: its weight (slot {inp.slot}) carries the rows"
            if v.strides[0] != rows_of[inp.slot] or tuple(v.valid_box()[0]) != (0, b) or v.offset < 0 or \
                    v.mask is not None:
                return f"MLP kernel {k.name} does not read slot {inp.slot} row by row"
        elif i == ml.x:
            return f"MLP kernel {k.name}: its x operand (slot {inp.slot}) does not carry the rows"
        elif i not in (ml.w1, ml.w2) and v.strides[0] != 0:
            return f"MLP kernel {k.name} reads free slot {inp.slot} along the rows"
    rows = block_rows(k, schedule(k).target)
    if prog.units != -(-b // rows):
        return f"MLP kernel {k.name}: its {prog.units} units are not blocks of {rows} rows"
    return ("tiles", rows, 1)


def _rmsnorm_spec(k, prog, b: int, rows_of: dict):
    """The launch spec of row-prologue matmul kernel `k` (`svod.codegen.rmsnorm`) reading
    row slots, or why not: the GEMM's ``("tiles", MT, tiles_n)``, run by the kernel's rows
    variant (its GEMM stops at row ``n``, its row statistics too). The prologue's inputs
    carry the rows (read row by row) or are the same for every row (a weight g), B does
    not carry them, the epilogue operands either."""
    from svod.codegen.schedule import gemm_tiling, schedule

    rs = k.rmsnorm
    if not k.shape or k.shape[0] != b or rs.m != b or getattr(prog, "units", None) is None or \
            not hasattr(prog, "address"):
        return f"kernel {k.name} of shape {k.shape} does not keep the {b} rows on its axis 0"
    for i, inp in enumerate(k.inputs):
        if len(inp.view.views) != 1:
            return f"kernel {k.name} reads slot {inp.slot} through a chain of views"
        v = inp.view.views[0]
        if inp.slot in rows_of:
            if i == rs.w:
                return f"kernel {k.name}: its B operand (slot {inp.slot}) carries the rows"
            if v.strides[0] != rows_of[inp.slot] or tuple(v.valid_box()[0]) != (0, b) or v.offset < 0:
                return f"kernel {k.name} does not read slot {inp.slot} row by row"
        elif i != rs.w and v.strides[0] != 0:
            return f"kernel {k.name} reads free slot {inp.slot} along the rows"
    g = gemm_tiling(1, b, rs.n, rs.k, k.inputs[rs.w].dtype.itemsize, schedule(k).target)
    if g.units != prog.units:
        return f"kernel {k.name}: its GEMM tiling does not match its units"
    return ("tiles", g.mt, g.tiles_n)


class RowsProgram:
    """The bucket's graph program with its unit counts read at run time:
    `run(gp, arrays, n) -> outputs` (``n`` rows, ``2 <= n <= b``; the arrays as the exact
    graph binds them: row inputs of ``n`` rows). `ok` is False with `reason` when the
    plan cannot run so (the caller pads instead)."""

    def __init__(self, gp, b: int, row_inputs, row_outputs):
        # NOTE: no reference to `gp`, which keeps this program (`rows_program`): no cycle, so
        # dropping the plan frees its code at once (svod.codegen.graphprog's ownership rule)
        self.b = b
        self.ok = False
        self.reason = ""
        self._count = _Count()  # runs so far, the straight-line runner's included (`runs`)
        self.tally = None  # the plan's Tally of kernels launched per run (set by svod.shapes)
        self._runners: dict = {}  # n -> QuickParts.runner for runs at n rows, or False (`runner`)
        # False under SVOD_VALIDATE until the first run was compared with the padded run
        # (svod.shapes.SymbolicCall._checked); read here once, not per call
        self.checked = not flag("SVOD_VALIDATE")
        self._lock = threading.Lock()
        self._state = None
        self._segments = None  # ("native", ctypes fn) | ("library", program, its slots, spec or None)
        self._module = None
        self._variants: list = []  # the matmul rows variants' modules (kept alive with their table)
        self._table = None  # gp's function table with the rows variants in place of their kernels
        self._fns = None
        got = None
        if gp.kind != "native":
            self.reason = f"the graph program is a fallback ({gp.reason})"
        else:
            got = analyse(gp.graph, gp.programs, b, row_inputs, row_outputs)
            if isinstance(got, str):
                self.reason, got = got, None
        if got is None:
            return
        specs = got
        # step index -> ("row", units per row) | ("chunk", elements per row, chunk) | ("tiles", mt, k)
        # | ("lib", batched)
        self.specs = specs
        plan = gp.graph.plan
        self.row_inputs = tuple(bool(r) for r in row_inputs[:plan.n_inputs])
        # per input: (index, dtype, n rows?, elements needed: per row for a row input)
        self._ins = tuple((i, want, self.row_inputs[i], need // b if self.row_inputs[i] else need)
                          for i, (want, need) in enumerate(gp._in_specs))
        # per output: (slot, shape (without the rows for an n-row output), dtype, rows?, elements (per row))
        self._outs = tuple((slot, shape[1:], dt, True, count // b) if r else (slot, shape, dt, False, count)
                           for (slot, shape, dt, count, _), r in zip(gp._out_specs, row_outputs))
        self._build(gp, specs)
        self.ok = self._segments is not None

    def _build(self, gp, specs: dict) -> None:
        """The segments as `svod.codegen.graphprog.compile_graph` groups them (native
        steps between library steps), the native ones generated again with the row count
        as an argument, in one module; the matmul rows variants compiled or loaded."""
        import hashlib

        from svod.codegen.graphprog import _segment_ir, _segment_module
        from svod.runtime import pool_size

        nworkers = max(1, pool_size() - 1) if pool_size() > 1 else 0
        steps = [s for s in gp.graph.steps if isinstance(s, Copy)
                 or (isinstance(s, Launch) and gp.programs[s.kernel].units > 0)]
        index = {id(s): i for i, s in enumerate(gp.graph.steps)}
        fn_index: dict[int, int] = {}
        for s in gp.graph.steps:  # as compile_graph numbers them (native programs only)
            if isinstance(s, Launch) and gp.programs[s.kernel].units > 0 and hasattr(gp.programs[s.kernel], "address"):
                fn_index.setdefault(s.kernel, len(fn_index) + 1)
        local = {j: specs[index[id(s)]] for j, s in enumerate(steps) if index[id(s)] in specs}
        tiles = sorted({s.kernel for j, s in enumerate(steps) if local.get(j, ("",))[0] in _VARIANT_SPECS})
        if tiles:
            table = (ctypes.c_void_p * len(gp._table))(*gp._table)
            try:
                kernels = [gp.programs[kk].kernel for kk in tiles]
                if len(kernels) > 1 and nworkers:  # LLVM compiles outside the GIL: one thread each
                    from concurrent.futures import ThreadPoolExecutor

                    with ThreadPoolExecutor(min(len(kernels), nworkers + 1)) as ex:
                        built = list(ex.map(_variant, kernels))
                else:
                    built = [_variant(k) for k in kernels]
                for kk, (mod, symbol) in zip(tiles, built):
                    self._variants.append(mod)
                    table[fn_index[kk]] = mod.address(symbol)
            except Exception as e:  # noqa: BLE001 - a bug here must not lose the user's result: pad instead
                log.warning("svod: compiling a rows variant failed (%s); padding to the bucket", e)
                self.reason = f"{type(e).__name__}: {e}"
                return
            self._table = table
            self._fns = ctypes.addressof(table)
        tag = hashlib.blake2b(repr((gp.graph.steps, sorted(local.items()))).encode(), digest_size=6).hexdigest()
        groups: list = []  # ("native", [(step, its spec)]) or ("library", step, its spec)
        for j, s in enumerate(steps):
            if isinstance(s, Launch) and not hasattr(gp.programs[s.kernel], "address"):
                groups.append(("library", s, specs.get(index[id(s)])))
            elif groups and groups[-1][0] == "native":
                groups[-1][1].append((s, local.get(j)))
            else:
                groups.append(("native", [(s, local.get(j))]))
        texts, names, par = [], [], False
        for gi, g in enumerate(groups):
            if g[0] == "native":
                names.append(f"svod_r{tag}_{gi}")
                seg = [s for s, _ in g[1]]
                text, p = _segment_ir(names[-1], seg, fn_index, gp.graph, gp.programs, nworkers,
                                      {j: sp for j, (_, sp) in enumerate(g[1]) if sp is not None})
                texts.append(text)
                par |= p
        ir = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n\n" + "\n\n".join(texts)
        segments = []
        try:
            if names:
                self._module = _segment_module(ir, names, f"rows_{tag}")
        except Exception as e:  # noqa: BLE001 - a bug here must not lose the user's result: pad instead
            log.warning("svod: compiling the rows program %s failed (%s); padding to the bucket", tag, e)
            self.reason = f"{type(e).__name__}: {e}"
            return
        fns = iter(names)
        for g in groups:
            if g[0] == "native":
                segments.append(("native", _ROWS_SEGMENT(self._module.address(next(fns)))))
            else:
                prog = gp.programs[g[1].kernel]
                segments.append(("library", prog, tuple(dict.fromkeys(prog.slots)), g[2]))
        self.ir = ir
        self._parallel = par
        self._segments = segments

    def run(self, gp, arrays, n: int) -> list[np.ndarray]:
        """Run at `n` rows. `gp`: the GraphProgram this was derived from (its kernels, its
        function table and temps; the caller holds it for the call). Row inputs are bound
        by address (their first `n` rows are all any launch reads), outputs are fresh
        blocks of exactly `n` rows."""
        b = self.b
        if not 2 <= n <= b:
            raise ValueError(f"rows program: {n} rows outside the bucket's 2..{b}")
        mine = self._lock.acquire(False)
        try:
            if mine and self._state is not None:
                slots, addr, blocks = self._state
            elif mine and gp._scratch_ok:
                slots, addr, blocks = self._state = gp._new_state(True)
            else:
                slots, addr, blocks = gp._new_state(False)
            arrays = list(arrays[:gp.n_inputs])
            for i, want, r, need in self._ins:
                a = arrays[i]
                if a.dtype != want:
                    raise ValueError(f"rows program: input {i} needs dtype {want}, got {a.dtype}")
                if r:
                    if a.shape[0] != n:
                        raise ValueError(f"rows program: input {i} needs {n} rows, got shape {a.shape}")
                    if not a.flags.c_contiguous:
                        a = np.ascontiguousarray(a)
                    need *= n
                elif not a.flags.c_contiguous:
                    a = np.ascontiguousarray(a)
                if a.size < need:
                    raise ValueError(f"rows program: input {i} needs at least {need} elements, got {a.size}")
                arrays[i] = a
                slots[i] = data_address(a)
            pool = _pool.POOL
            small = _pool.SMALL
            outs = []
            by_slot = {}
            for slot, shape, dt, r, count in self._outs:
                if r:
                    shape = (n,) + shape
                    count *= n
                o = pool.small_array(shape, dt, count) if count * dt.itemsize <= small else pool.array(shape, dt)
                slots[slot] = data_address(o)
                by_slot[slot] = o
                outs.append(o)
            self._count.n += 1
            fns = self._fns or gp._fns
            for seg in self._segments:
                if seg[0] == "library":
                    self._library(gp, seg, n, arrays, by_slot, blocks)
                    continue
                gp._count.n += 1
                fn = seg[1]
                if self._parallel:
                    rt = _runtime_pool()
                    if rt.lock.acquire(False):
                        try:
                            fn(addr, fns, rt.addr, n)
                        finally:
                            rt.lock.release()
                    else:
                        fn(addr, fns, None, n)
                else:
                    fn(addr, fns, None, n)
        finally:
            if mine:
                self._lock.release()
        return outs


    @property
    def runs(self) -> int:
        """Runs so far, straight-line ones included (tests count them)."""
        return self._count.n

    def quick_parts(self, gp, n: int) -> QuickParts | None:
        """The replay hot path's pieces (`svod.codegen.quick.QuickParts`) for runs at `n`
        rows — what svod.jit's inlined replay and `runner` generate straight-line code
        from, as for an exact plan's graph program (`GraphProgram.quick_parts`): the
        segment is called with `n` bound, the inputs are the caller's arrays (row inputs
        of `n` rows, needing ``n *`` their elements per row), the outputs fresh arrays of
        `n` rows. None unless the program runs at all (`ok`), its SVOD_VALIDATE comparison
        is done, a run has built its kept state (scratch temps), and it is one native
        segment without threads whose outputs are small (`svod.pool.SMALL`): the cases
        where the Python around a launch is most of a call."""
        if not (self.ok and self.checked and self._state is not None and 2 <= n <= self.b) or self._parallel \
                or len(self._segments) != 1 or self._segments[0][0] != "native":
            return None
        outs = []
        for slot, shape, dt, r, count in self._outs:
            if r:
                shape, count = (n,) + shape, count * n
            if count * dt.itemsize > _pool.SMALL:
                return None
            outs.append((slot, shape, dt))
        ins = tuple((want, need * n if r else need) for _, want, r, need in self._ins)
        fn = self._segments[0][1]

        def segment(slots_addr, fns, pool, _fn=fn, _n=n):
            _fn(slots_addr, fns, pool, _n)

        slots, addr, blocks = self._state
        # NOTE: the code and tables the call reads, without `gp` (which holds this program)
        keep = (self, self._module, tuple(self._variants), self._table, gp._module, gp._table, tuple(gp.programs),
                blocks)
        return QuickParts(self._count, keep, slots, addr, self._fns or gp._fns, segment, self._lock, ins, tuple(outs))

    def runner(self, gp, n: int):
        """`QuickParts.runner` of `quick_parts(gp, n)` (made once per row count, kept;
        counting on `tally`), or None when there are no parts yet, or False when the
        program cannot have them."""
        got = self._runners.get(n)
        if got is None:
            if not (self.ok and self.checked and self._state is not None):
                return None
            if len(self._runners) >= 256:  # a program run at more sizes of its bucket: the Python path
                return False  # (never build a runner per call that could not be kept)
            parts = self.quick_parts(gp, n)
            got = parts.runner(self.tally) if parts is not None else False
            self._runners[n] = got
        return got

    @staticmethod
    def _library(gp, seg, n: int, arrays, by_slot: dict, blocks: dict) -> None:
        """A library (BLAS) step: on its whole slots when it reads no row slot, else
        numpy's BLAS (`svod.codegen.blas.matmul_into`) on the first `n` rows of its
        row operands and output — views of the slots' memory, bounds checked."""
        _, prog, needed, spec = seg
        bufs = gp._views(needed, arrays, by_slot, blocks)
        if spec is None:
            prog.run(bufs, 1)
            return
        from svod.codegen.blas import matmul_into
        from svod.codegen.program import _operand

        k = prog.kernel
        mm = k.matmul

        def rows(inp) -> np.ndarray:
            flat = bufs[inp.slot]
            v = inp.view.views[0]
            shape = (n,) + tuple(v.shape[1:])
            end = v.offset + sum((d - 1) * st for d, st in zip(shape, v.strides) if d) + 1
            if v.offset < 0 or min(v.strides) < 0 or end > flat.size:
                raise ValueError(f"rows program: {k.name} reads slot {inp.slot} past its {n} rows")
            return np.lib.stride_tricks.as_strided(flat[v.offset:], shape, tuple(st * flat.itemsize for st in
                                                                                  v.strides), writeable=False)

        a = rows(k.inputs[mm.a])
        bm = rows(k.inputs[mm.b]) if spec[1] else _operand(bufs[k.inputs[mm.b].slot], k.inputs[mm.b].view)
        shape = (n,) + tuple(k.shape[1:])
        out = bufs[k.outputs[0].slot][:math.prod(shape)].reshape(shape)
        if out.size and not matmul_into(a, bm, out):
            np.matmul(a, bm, out=out)

    @property
    def nbytes(self) -> int:
        """Memory held: the segment module, the rows variants' code, scratch temps."""
        n = sum(m.nbytes for m in self._variants)
        if self._module is not None:
            n += self._module.nbytes
        if self._state is not None:
            n += sum(blk.nbytes for blk in self._state[2].values())
        return n


def _runtime_pool():
    """`svod.runtime._get_pool()` (imported on first use: the runtime module loads LLVM code)."""
    global _runtime_pool
    from svod.runtime import _get_pool

    _runtime_pool = _get_pool
    return _get_pool()


def _variant(kernel):
    """(module, entry symbol) of the *rows variant* of `kernel` (a matmul, a split
    reduction, a one-axis elementwise kernel): its code with the row count read at run
    time (`svod.codegen.lower`, ``rows=True``), loaded from the object cache (keyed by the
    kernel's content and the target, as kernels are: a warm process lowers nothing) or
    lowered, compiled and stored there. A compile counts in
    `kernels_compiled` (a load in `kernels_loaded`)."""
    import time

    from svod.codegen.objcache import load_cached, object_key, store_object
    from svod.codegen.program import cached_symbol
    from svod.stats import bump

    symbol = cached_symbol(kernel) + "_rows"
    okey = "rows:" + object_key(kernel)
    t0 = time.perf_counter()
    mod = load_cached(okey, [symbol], kernel.name + "_rows")
    if mod is not None:
        bump("kernels_loaded")
        bump("compile_seconds", time.perf_counter() - t0)
        return mod, symbol
    import llvmlite.ir as lir

    from svod.codegen.jit import compile_ir
    from svod.codegen.lower import KernelLowering
    from svod.codegen.schedule import schedule

    if kernel.mlp is not None:  # its entry reads the row count; its GEMMs are rows variants already
        from svod.codegen.mlp import lower_mlp

        text = lower_mlp(kernel, symbol, schedule(kernel), KernelLowering, rows=True).ir
    elif kernel.attention is not None:  # a 2-D attention whose query rows are the rows
        from svod.codegen.attention import lower_attention

        text = lower_attention(kernel, symbol, schedule(kernel), rows=True).ir
    elif kernel.rmsnorm is not None:  # its GEMM is a rows variant, its entry reads the row count
        from svod.codegen.rmsnorm import lower_rmsnorm

        text = lower_rmsnorm(kernel, symbol, schedule(kernel), KernelLowering, rows=True).ir
    else:
        module = lir.Module(name=f"svod_{kernel.name}_rows")
        low = KernelLowering(kernel, module, symbol, schedule(kernel), rows=True)
        low.lower()
        text = str(module)
    mod = compile_ir(text, name=kernel.name + "_rows", lean=True, keep_ir=False)
    bump("kernels_compiled")
    bump("compile_seconds", time.perf_counter() - t0)
    store_object(okey, mod, {"kernel": kernel.name + "_rows", "symbol": symbol})
    return mod, symbol


def rows_program(gp, b: int, row_inputs, row_outputs) -> RowsProgram:
    """The RowsProgram of the bucket's GraphProgram `gp`, built once and kept on it (one
    bucket key has one row binding, so one RowsProgram)."""
    rp = gp.__dict__.get("_rows_program")
    if rp is None:
        with gp._lock:
            rp = gp.__dict__.get("_rows_program")
            if rp is None:
                rp = gp._rows_program = RowsProgram(gp, b, row_inputs, row_outputs)
    return rp
