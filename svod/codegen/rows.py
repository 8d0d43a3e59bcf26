"""A bucket's graph program run at its caller's row count: units read at run time.

A dynamic structure (svod.shapes) is planned and compiled once per size bucket ``b``.
`rows_program(gp, b, row_inputs, row_outputs)` derives from the bucket's GraphProgram a
`RowsProgram` whose native segment takes the row count ``n`` as an argument and sizes
each launch from it, so a size ``n <= b`` runs on the caller's own ``n``-row arrays: no
padding rows computed, no copy into a ``b``-row buffer, results of exactly ``n`` rows.
The kernels are the bucket's, unchanged (same code, same object files); only the
segment that launches them is generated again, once per bucket plan.

Which launches follow the row count (`analyse`). Row slots start as the row-carrying
inputs (`SymbolicCall.row_inputs`); a launch reading a row slot is a *row launch* and
its outputs become row slots. A row launch must

* be a generated kernel (not a library step, GEMM, attention or sort) of shape
  ``(b, ...)`` that keeps axis 0 (not reduced), with no reshape chain in its reads;
* read every row slot with axis 0 stepping whole rows (stride = the slot's elements /
  ``b``, unmasked on axis 0) and every other slot broadcast along axis 0 (stride 0);
* enumerate its units with axis 0 outermost and a whole number ``k`` per row (row-wise
  and reduce kernels, multi-axis elementwise kernels, without a split reduction or a
  column reduce): it runs ``n * k`` units — only rows ``< n`` are read or written; or
* be a one-axis elementwise kernel (chunks of `CHUNK` elements that span rows): it runs
  the chunks covering ``n`` rows, ``min(ceil(n * elems_per_row / CHUNK), units)``: up
  to one chunk (4,096 elements) past row ``n``, never the bucket's whole padding. The
  row slots it touches must then reach past row ``n``: such an input is bound as
  `svod.shapes.pad_rows` does (a view when its memory has room for ``b`` rows — what
  `svod.asarray` makes once a structure is dynamic — else a copy), and such an output is
  a ``b``-row pool block whose first ``n`` rows are the result.

A launch reading no row slot (work on free values: a weight, a mean of a bias) runs its
compiled unit count. A plan with any other launch (GEMM row tiles span rows, a library
step, a column reduce, an output that is an input) keeps the padding path of
`svod.shapes.SymbolicCall` (`analyse` returns the reason, `RowsProgram.reason`).

Memory: temps keep the bucket's memory plan (sized at the upper bound ``b``: one
storage layout per plan, its offsets in the segment module's slot array; a per-call
plan would re-run the memory planner per size and cost at most 12.5% of the temps);
outputs are pool blocks of ``n`` rows.
"""

from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

import svod.pool as _pool
from svod.codegen.buffers import data_address
from svod.graph import CompiledGraph, Copy, Launch, slot_nbytes
from svod.kernel import VALID

_ROWS_SEGMENT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_OK_KINDS = ("rowwise", "reduce", "elementwise")


def analyse(graph: CompiledGraph, programs, b: int, row_inputs, row_outputs):
    """(launch specs by step index, row slots that need room for ``b`` rows) for running
    `graph` at a run-time row count (module docstring: the rules), or the reason it
    cannot, in words."""
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
    room: set[int] = set()
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
        if k.kind not in _OK_KINDS or k.matmul is not None or k.attention is not None or k.library is not None:
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
        if loops.units != prog.units or loops.split or loops.cols:
            return (f"kernel {k.name}: its units are not whole rows ({loops.kind}, split {loops.split}, "
                    f"cols {loops.cols})")
        if loops.chunk:
            if len(loops.axes) != 1 or loops.axes[0].dims[0] != 0:
                return f"kernel {k.name}: its chunks do not start with the rows"
            specs[idx] = ("chunk", math.prod(k.shape) // b, loops.chunk)
            room.update(inp.slot for inp in k.inputs if inp.slot in rows_of)
            room.update(o.slot for o in k.outputs)
        else:
            if not loops.unit_axes or loops.unit_axes[0].dims[0] != 0 or loops.units % b:
                return f"kernel {k.name}: its units do not enumerate the rows outermost"
            specs[idx] = ("row", loops.units // b)
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
    return specs, room


class RowsProgram:
    """The bucket's graph program with its unit counts read at run time:
    `run(gp, arrays, n, pad_rows) -> outputs` (``n`` rows, ``2 <= n <= b``; the arrays as the exact
    graph binds them: row inputs of ``n`` rows). `ok` is False with `reason` when the
    plan cannot run so (the caller pads instead)."""

    def __init__(self, gp, b: int, row_inputs, row_outputs):
        # NOTE: no reference to `gp`, which keeps this program (`rows_program`): no cycle, so
        # dropping the plan frees its code at once (svod.codegen.graphprog's ownership rule)
        self.b = b
        self.ok = False
        self.reason = ""
        self.runs = 0  # runs so far (tests count them)
        self.checked = False  # SVOD_VALIDATE: the first run was compared with the padded run
        self._lock = threading.Lock()
        self._state = None
        self._fn = None
        self._module = None
        got = None
        if gp.kind != "native":
            self.reason = f"the graph program is a fallback ({gp.reason})"
        elif any(s[0] != "native" for s in gp.segments) or len(gp.segments) != 1:
            self.reason = "library steps split the graph program"
        else:
            got = analyse(gp.graph, gp.programs, b, row_inputs, row_outputs)
            if isinstance(got, str):
                self.reason, got = got, None
        if got is None:
            return
        specs, room = got
        self.specs = specs  # step index -> ("row", units per row) | ("chunk", elements per row, chunk)
        plan = gp.graph.plan
        self.row_inputs = tuple(bool(r) for r in row_inputs[:plan.n_inputs])
        # per input: (index, dtype, 0 free / 1 n rows / 2 b rows, elements needed, per row for 1 and 2)
        self._ins = tuple((i, want, (2 if i in room else 1) if self.row_inputs[i] else 0,
                           need // b if self.row_inputs[i] else need)
                          for i, (want, need) in enumerate(gp._in_specs))
        # per output: (slot, shape (without the rows for an n-row output), dtype, rows?, b rows?, elements)
        self._outs = tuple((slot, shape[1:], dt, True, False, count // b) if r and slot not in room else
                           (slot, shape, dt, bool(r), bool(r) and slot in room, count)
                           for (slot, shape, dt, count, _), r in zip(gp._out_specs, row_outputs))
        self._build(gp, specs)
        self.ok = self._fn is not None

    def _build(self, gp, specs: dict) -> None:
        import hashlib

        from svod.codegen.graphprog import _segment_ir, _segment_module, log
        from svod.runtime import pool_size

        nworkers = max(1, pool_size() - 1) if pool_size() > 1 else 0
        steps = [s for s in gp.graph.steps if isinstance(s, Copy)
                 or (isinstance(s, Launch) and gp.programs[s.kernel].units > 0)]
        index = {id(s): i for i, s in enumerate(gp.graph.steps)}
        fn_index: dict[int, int] = {}
        for s in gp.graph.steps:
            if isinstance(s, Launch) and gp.programs[s.kernel].units > 0:
                fn_index.setdefault(s.kernel, len(fn_index) + 1)
        local = {j: specs[index[id(s)]] for j, s in enumerate(steps) if index[id(s)] in specs}
        tag = hashlib.blake2b(repr((gp.graph.steps, sorted(local.items()))).encode(), digest_size=6).hexdigest()
        name = f"svod_r{tag}"
        text, par = _segment_ir(name, steps, fn_index, gp.graph, gp.programs, nworkers, local)
        ir = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n\n" + text
        try:
            self._module = _segment_module(ir, [name], f"rows_{tag}")
        except Exception as e:  # noqa: BLE001 - a bug here must not lose the user's result: pad instead
            log.warning("svod: compiling the rows program %s failed (%s); padding to the bucket", tag, e)
            self.reason = f"{type(e).__name__}: {e}"
            return
        self.ir = ir
        self._parallel = par
        self._fn = _ROWS_SEGMENT(self._module.address(name))

    def run(self, gp, arrays, n: int, pad_rows) -> list[np.ndarray]:
        """Run at `n` rows. `gp`: the GraphProgram this was derived from (its kernels, its
        function table and temps; the caller holds it for the call); `pad_rows(a, b)`
        binds a row input a chunk may read past row n (svod.shapes)."""
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
            for i, want, kind, need in self._ins:
                a = arrays[i]
                if a.dtype != want:
                    raise ValueError(f"rows program: input {i} needs dtype {want}, got {a.dtype}")
                if kind:
                    if a.shape[0] != n:
                        raise ValueError(f"rows program: input {i} needs {n} rows, got shape {a.shape}")
                    if not a.flags.c_contiguous:
                        a = np.ascontiguousarray(a)
                    if kind == 2:  # a chunk may read up to a chunk past row n: b rows (a view when it has room)
                        a = pad_rows(a, b)
                        need *= b
                    else:
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
            for slot, shape, dt, r, room, count in self._outs:
                if r and not room:
                    shape = (n,) + shape
                    count *= n
                o = pool.small_array(shape, dt, count) if count * dt.itemsize <= small else pool.array(shape, dt)
                slots[slot] = data_address(o)
                outs.append(o[:n] if room else o)
            gp._count.n += 1
            self.runs += 1
            if self._parallel:
                from svod.runtime import _get_pool

                rt = _get_pool()
                if rt.lock.acquire(False):
                    try:
                        self._fn(addr, gp._fns, rt.addr, n)
                    finally:
                        rt.lock.release()
                else:
                    self._fn(addr, gp._fns, None, n)
            else:
                self._fn(addr, gp._fns, None, n)
        finally:
            if mine:
                self._lock.release()
        return outs


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
