"""Graph programs: every native step of a CompiledGraph in one native call.

`compile_graph(graph, programs)` turns the Launch and Copy steps of a CompiledGraph into
LLVM IR functions, so replaying a graph of many kernels costs one ctypes call per
*segment* instead of one Python `Program.run` per kernel::

    gp = compile_graph(graph, programs)   # programs[i] runs graph.kernels[i]
    outs = gp.run(arrays)                 # fresh output arrays from svod.pool.POOL

Design:

* A segment is ``void svod_g<n>(i8** slots, i8** fns, i8* pool)``. ``slots`` holds one
  base pointer per slot of the graph (inputs, temps — storage-shared as the memory plan
  says, so two slots may hold the same pointer — and outputs). Each Launch becomes an
  on-stack argument block filled from ``slots`` in the kernel's slot order and a call
  through ``fns``, a table of entry addresses (``fns[0]`` is the runtime's native
  dispatcher, ``fns[1+i]`` kernel entries). The IR holds no addresses: the table is
  data, and the Programs it points into are referenced by the GraphProgram, so their
  code stays mapped.
* Threads: a Launch with ``threads > 1`` calls ``svod_rt_dispatch`` of `svod.runtime`
  (with the slice counts `run_parallel` would use) when ``pool`` is not null, else it
  runs the whole unit range on the calling thread. Python passes the pool only when it
  got the pool's lock (without waiting) — the rule `run_parallel` follows.
* Copy steps are ``llvm.memcpy``. Library (BLAS) steps stay Python (`np.matmul`): they
  split the graph into native segments around them.
* When any program is interpreted (a compile failure) the GraphProgram is a fallback
  that runs `svod.graph.run_graph` kernel by kernel — slower, same results.
* Temps of small graphs (≤ `SCRATCH_BYTES`) live in scratch blocks owned by the
  GraphProgram (their addresses written once); bigger ones come from the pool per run.
  Outputs are fresh pool blocks every run: they never alias inputs or each other.
* Ownership: a GraphProgram holds its Programs and its segment module; replay closures
  (`QuickParts.runner`, the jit's) hold what their native calls read (`QuickParts.keep`),
  never the GraphProgram itself, so nothing here forms a reference cycle: dropping the
  last owner frees the code at once, without waiting for the garbage collector.
  `nbytes` is the memory it holds besides its programs (measured module, scratch).

>>> import numpy as np, svod
>>> from svod.key import compact
>>> from svod.plan_greedy import plan_greedy
>>> from svod.graph import build_graph
>>> from svod.codegen.program import compile_kernel
>>> key, b = compact([(svod.exp(svod.asarray(np.zeros(4, np.float32))) * 2).uop])
>>> g = build_graph(plan_greedy(key))
>>> gp = compile_graph(g, [compile_kernel(k) for k in g.kernels])
>>> gp.kind, gp.run(b.arrays)[0].tolist()
('native', [2.0, 2.0, 2.0, 2.0])
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import threading

import numpy as np

import svod.pool as _pool
from svod.codegen.buffers import data_address
from svod.codegen.objcache import compiled_ir
from svod.codegen.quick import QuickParts, _Count
from svod.graph import CompiledGraph, Copy, Launch, run_graph, slot_nbytes

log = logging.getLogger("svod")

SCRATCH_BYTES = 1 << 20  # temps up to this size stay allocated with the GraphProgram
_SEGMENT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class GraphProgram:
    """A CompiledGraph ready to replay: `run(arrays) -> outputs`. `kind` is "native"
    (segments of native code between library steps) or "fallback" (`run_graph`)."""

    def __init__(self, graph: CompiledGraph, programs, kind: str, reason: str = ""):
        self.graph = graph
        self.programs = list(programs)
        self.kind = kind
        self.reason = reason
        self.segments: list = []  # ("native", ctypes fn) or ("library", program, slots)
        self.ir = ""  # the segments' LLVM IR as generated (before optimisation)
        self._count = _Count()  # native segment calls (`calls`)
        self._module = None  # the segments' CompiledModule
        self._table = None  # the function table `_fns` points into
        plan = graph.plan
        self.n_inputs = plan.n_inputs
        self._in_specs = []  # per input: (numpy dtype, elements needed)
        need = [0] * plan.n_inputs
        for k in plan.kernels:
            for inp in k.inputs:
                if inp.slot < plan.n_inputs:
                    from svod.codegen.program import _extent

                    need[inp.slot] = max(need[inp.slot], _extent(inp.view))
        for i in range(plan.n_inputs):
            self._in_specs.append((np.dtype(plan.slots[i].dtype.np), need[i]))
        self._out_specs = []  # per output: (slot, shape, numpy dtype, elements, first occurrence?)
        seen: set[int] = set()
        for slot, shape in plan.outputs:
            shape = tuple(int(d) for d in shape)
            self._out_specs.append((slot, shape, np.dtype(plan.slots[slot].dtype.np), math.prod(shape),
                                    slot >= plan.n_inputs and slot not in seen))
            seen.add(slot)
        self._copies = not all(spec[-1] for spec in self._out_specs)
        outs = {s for s, _ in plan.outputs}
        self._temp_storages = sorted({st for slot, st in graph.slot_storage.items() if slot not in outs})
        self._temp_slots = [(slot, st) for slot, st in graph.slot_storage.items() if slot not in outs]
        self._scratch_ok = sum(graph.storage_bytes[st] for st in self._temp_storages) <= SCRATCH_BYTES
        self._n_slots = max([plan.n_inputs - 1, *graph.slot_storage, *outs], default=-1) + 1
        self._lock = threading.Lock()
        self._state = None  # (slot array, its address, temp blocks) reused by uncontended runs
        self._runner = None  # QuickParts.runner, built once the state is
        self._parallel = False
        self._fns = None

    @property
    def calls(self) -> int:
        """Native segment calls so far (tests count them)."""
        return self._count.n

    @property
    def nbytes(self) -> int:
        """Memory held besides the programs: the segment module (measured), scratch temps
        kept between runs, the slot array and function table, the Python side (~2 KB)."""
        n = 2048 + 8 * (self._n_slots + len(self.programs) + 1)
        if self._module is not None:
            n += self._module.nbytes
        rows = self.__dict__.get("_rows_program")  # svod.codegen.rows: its segment module and scratch
        if rows is not None and rows._module is not None:
            n += rows.nbytes
        state = self._state
        if state is not None:
            n += sum(blk.nbytes for blk in state[2].values())
        return n

    # ------------------------------------------------------------------ running

    def _new_state(self, persistent: bool):
        """A slot array with temp addresses filled in (temps: scratch or pool blocks)."""
        from svod.pool import POOL

        slots = (ctypes.c_void_p * max(1, self._n_slots))()
        blocks = {}
        for st in self._temp_storages:
            nb = self.graph.storage_bytes[st]
            blocks[st] = np.empty(max(nb, 1), np.uint8) if persistent else POOL.array((max(nb, 1),), np.uint8)
        for slot, st in self._temp_slots:
            slots[slot] = data_address(blocks[st])
        return slots, ctypes.addressof(slots), blocks

    def _views(self, slots_needed, arrays, outs_by_slot, blocks) -> dict:
        """Flat numpy views of the slots a library step touches."""
        plan = self.graph.plan
        bufs = {}
        for s in slots_needed:
            if s < self.n_inputs:
                bufs[s] = arrays[s].reshape(-1)
            elif s in outs_by_slot:
                bufs[s] = outs_by_slot[s].reshape(-1)
            else:
                info = plan.slots[s]
                nb = slot_nbytes(plan, s)
                bufs[s] = blocks[self.graph.slot_storage[s]][:nb].view(info.dtype.np)
        return bufs

    def _quick(self) -> bool:
        """Whether `run` may take the replay fast path: one native segment, no threads,
        scratch kept between runs, every output small and written by the graph."""
        q = self.__dict__.get("_quick_ok")
        if q is None:
            q = (self.kind == "native" and len(self.segments) == 1 and self.segments[0][0] == "native"
                 and not self._parallel and self._scratch_ok and not self._copies
                 and all(count * dt.itemsize <= _pool.SMALL for _, _, dt, count, _ in self._out_specs))
            self._quick_ok = q
        return q

    def quick_parts(self) -> QuickParts | None:
        """The pieces of the replay hot path (see `QuickParts`), for a caller that inlines
        it; None when the program cannot take the fast path (`_quick`) or has not run yet
        (its state is built by the first run)."""
        if self._state is None or not self._quick():
            return None
        slots, addr, blocks = self._state
        keep = (self._module, self._table, tuple(self.programs), blocks)
        return QuickParts(self._count, keep, slots, addr, self._fns, self.segments[0][1], self._lock,
                          tuple(self._in_specs), tuple((slot, shape, dt) for slot, shape, dt, _, _ in self._out_specs))

    def run(self, arrays) -> list[np.ndarray]:
        """Run the graph on `arrays` (one per input slot); fresh output arrays."""
        if self._state is not None and self._quick():  # the replay hot path (`QuickParts.runner`)
            run = self._runner
            if run is None:
                run = self._runner = self.quick_parts().runner(None)
            outs = run(arrays)
            if outs is not None:
                return outs
        if self.kind != "native":
            return run_graph(self.graph, arrays, self.programs)
        if len(arrays) < self.n_inputs:  # extra arrays: bindings the plan does not read
            raise ValueError(f"graph program: expected {self.n_inputs} input arrays, got {len(arrays)}")
        pool = _pool.POOL
        mine = self._lock.acquire(False)
        try:
            if mine and self._state is not None:
                slots, addr, blocks = self._state
            elif mine and self._scratch_ok:
                slots, addr, blocks = self._state = self._new_state(True)
            else:  # big temps (pool blocks for this run), or another thread is replaying
                slots, addr, blocks = self._new_state(False)
            arrays = list(arrays[:self.n_inputs])
            i = 0
            for a, (want, need) in zip(arrays, self._in_specs):
                if a.dtype is not want or not a.flags.c_contiguous:
                    if a.dtype != want:
                        raise ValueError(f"graph program: input {i} needs dtype {want}, got {a.dtype}")
                    arrays[i] = a = np.ascontiguousarray(a)
                if a.size < need:
                    raise ValueError(f"graph program: input {i} needs at least {need} elements, got {a.size}")
                slots[i] = data_address(a)
                i += 1
            outs = []
            outs_by_slot = {}
            for slot, shape, dt, count, first in self._out_specs:
                o = pool.small_array(shape, dt, count) if count * dt.itemsize <= _pool.SMALL else \
                    pool.array(shape, dt)
                if first:
                    slots[slot] = data_address(o)
                    outs_by_slot[slot] = o
                outs.append(o)
            fns = self._fns
            for seg in self.segments:
                if seg[0] == "native":
                    self._count.n += 1
                    if self._parallel:
                        self._call_parallel(seg[1], addr, fns)
                    else:
                        seg[1](addr, fns, None)
                else:
                    _, prog, needed = seg
                    prog.run(self._views(needed, arrays, outs_by_slot, blocks), 1)
        finally:
            if mine:
                self._lock.release()
        if self._copies:
            for j, (slot, _, _, _, first) in enumerate(self._out_specs):
                if not first:  # an input or a repeated output: a copy of its own
                    src = arrays[slot] if slot < self.n_inputs else outs_by_slot[slot]
                    np.copyto(outs[j].reshape(-1), src.reshape(-1)[:outs[j].size])
        return outs

    def _call_parallel(self, fn, addr: int, fns: int) -> None:
        from svod.runtime import _get_pool

        pool = _get_pool()
        if pool.lock.acquire(False):
            try:
                fn(addr, fns, pool.addr)
            finally:
                pool.lock.release()
        else:  # another Python thread is dispatching: run this segment single-threaded
            fn(addr, fns, None)

    def __repr__(self) -> str:
        nat = sum(1 for s in self.segments if s[0] == "native")
        return f"<GraphProgram {self.kind} {len(self.graph.kernels)} kernel(s) {nat} native segment(s)>"


# ----------------------------------------------------------------------------- compile


def _is_native(prog) -> bool:
    from svod.codegen.program import NativeProgram

    return isinstance(prog, NativeProgram)


def _is_library(prog) -> bool:
    from svod.codegen.program import LibraryProgram

    return isinstance(prog, LibraryProgram)


def _segment_ir(name: str, ops: list, fn_index: dict[int, int], graph: CompiledGraph, programs,
                nworkers: int, rows: dict | None = None) -> tuple[str, bool]:
    """IR of one native segment; also whether it may dispatch to the thread pool.

    `rows` (svod.codegen.rows): the segment takes a fourth argument ``i64 %rows`` and
    the steps it names (by their index in `ops`) size themselves from it at run time —
    a Launch ``("row", k)`` runs ``rows * k`` units, ``("chunk", elems, chunk)`` runs
    ``min(ceil(rows * elems / chunk), units)``, ``("tiles", mt, k)`` (a kernel's rows
    variant: a matmul's row tiles of ``mt`` rows, ``k`` units each; a split reduction's
    ``k`` units a row, ``mt`` 1) runs ``ceil(rows / mt) * k`` units and passes ``rows``
    as one more argument-block entry (an integer after the slot pointers), as a
    ``"chunk"`` launch does too (its rows variant stops at element ``rows * elems``), a Copy
    ``("row", nbytes)`` copies ``rows * nbytes`` bytes; other steps keep their constant
    counts. None: the segment's text is exactly what it was before the option existed."""
    from svod.runtime import SLICES_PER_THREAD

    allocas, body = [], []
    parallel = False
    for j, step in enumerate(ops):
        spec = rows.get(j) if rows is not None else None
        if isinstance(step, Copy):
            nb = slot_nbytes(graph.plan, step.dst)
            if spec is not None:
                body.append(f"  %cn{j} = mul i64 %rows, {spec[1]}")
                nb = f"%cn{j}"
            body += [f"  %cs{j} = getelementptr ptr, ptr %slots, i64 {step.src}",
                     f"  %cd{j} = getelementptr ptr, ptr %slots, i64 {step.dst}",
                     f"  %cps{j} = load ptr, ptr %cs{j}, align 8",
                     f"  %cpd{j} = load ptr, ptr %cd{j}, align 8",
                     f"  call void @llvm.memcpy.p0.p0.i64(ptr %cpd{j}, ptr %cps{j}, i64 {nb}, i1 false)"]
            continue
        prog = programs[step.kernel]
        n = len(prog.slots) + (spec is not None and spec[0] in ("tiles", "chunk"))
        allocas.append(f"  %args{j} = alloca [{max(n, 1)} x ptr], align 8")
        for p, slot in enumerate(prog.slots):
            body += [f"  %s{j}_{p} = getelementptr ptr, ptr %slots, i64 {slot}",
                     f"  %v{j}_{p} = load ptr, ptr %s{j}_{p}, align 8",
                     f"  %a{j}_{p} = getelementptr [{max(n, 1)} x ptr], ptr %args{j}, i64 0, i64 {p}",
                     f"  store ptr %v{j}_{p}, ptr %a{j}_{p}, align 8"]
        if n > len(prog.slots):  # the row count, read by the rows variant's entry
            body += [f"  %rp{j} = inttoptr i64 %rows to ptr",
                     f"  %ra{j} = getelementptr [{n} x ptr], ptr %args{j}, i64 0, i64 {n - 1}",
                     f"  store ptr %rp{j}, ptr %ra{j}, align 8"]
        body += [f"  %fp{j} = getelementptr ptr, ptr %fns, i64 {fn_index[step.kernel]}",
                 f"  %fn{j} = load ptr, ptr %fp{j}, align 8"]
        units = prog.units
        nt = max(1, min(step.threads, nworkers + 1, units))
        if spec is not None:
            units, nt_, slices, go = _runtime_units(j, spec, units, nt, SLICES_PER_THREAD, body)
        if nt <= 1:
            body.append(f"  call void %fn{j}(ptr %args{j}, i64 0, i64 {units})")
            continue
        parallel = True
        if spec is None:
            slices, nt_ = min(units, nt * SLICES_PER_THREAD), nt - 1
            body.append(f"  %hp{j} = icmp ne ptr %pool, null")
            go = f"%hp{j}"
        body += [f"  br i1 {go}, label %par{j}, label %seq{j}",
                 f"par{j}:",
                 f"  %dp{j} = load ptr, ptr %fns, align 8",
                 f"  call void %dp{j}(ptr %pool, ptr %fn{j}, ptr %args{j}, i64 {units}, i64 {slices}, i64 {nt_})",
                 f"  br label %next{j}",
                 f"seq{j}:",
                 f"  call void %fn{j}(ptr %args{j}, i64 0, i64 {units})",
                 f"  br label %next{j}",
                 f"next{j}:"]
    params = "ptr noalias %slots, ptr noalias %fns, ptr %pool" + (", i64 %rows" if rows is not None else "")
    text = "\n".join([f"define void @{name}({params}) {{", "entry:",
                      *allocas, *body, "  ret void", "}"])
    return text, parallel


def _runtime_units(j: int, spec: tuple, units: int, nt: int, per_thread: int, body: list) -> tuple:
    """IR computing launch `j`'s unit count from ``%rows`` (`_segment_ir`'s `rows`):
    (units value, workers to wake, slices, the dispatch condition) as IR operands. The
    thread count is the static one capped by the units, so a short run wakes no idle
    workers; a run of one unit never dispatches."""
    if spec[0] == "row":
        body.append(f"  %u{j} = mul i64 %rows, {spec[1]}")
    elif spec[0] == "tiles":  # whole row tiles covering the rows, `k` units each
        _, mt, k = spec
        body += [f"  %ut{j} = add i64 %rows, {mt - 1}",
                 f"  %ud{j} = udiv i64 %ut{j}, {mt}",
                 f"  %u{j} = mul i64 %ud{j}, {k}"]
    else:  # "chunk": whole chunks of `elems` per row, never past the compiled count
        _, elems, chunk = spec
        body += [f"  %ue{j} = mul i64 %rows, {elems}",
                 f"  %uc{j} = add i64 %ue{j}, {chunk - 1}",
                 f"  %ud{j} = udiv i64 %uc{j}, {chunk}",
                 f"  %ul{j} = icmp ult i64 %ud{j}, {units}",
                 f"  %u{j} = select i1 %ul{j}, i64 %ud{j}, i64 {units}"]
    if nt <= 1:
        return f"%u{j}", 0, "", ""
    body += [f"  %tl{j} = icmp ult i64 %u{j}, {nt}",
             f"  %tn{j} = select i1 %tl{j}, i64 %u{j}, i64 {nt}",
             f"  %tw{j} = sub i64 %tn{j}, 1",
             f"  %sm{j} = mul i64 %tn{j}, {per_thread}",
             f"  %sl{j} = icmp ult i64 %u{j}, %sm{j}",
             f"  %sc{j} = select i1 %sl{j}, i64 %u{j}, i64 %sm{j}",
             f"  %hp{j} = icmp ne ptr %pool, null",
             f"  %hm{j} = icmp ugt i64 %tn{j}, 1",
             f"  %go{j} = and i1 %hp{j}, %hm{j}"]
    return f"%u{j}", f"%tw{j}", f"%sc{j}", f"%go{j}"


def _segment_module(ir: str, names: list[str], name: str):
    """The segments' native code: loaded from the object cache (keyed by the IR text and
    the target, like kernels) or compiled and stored there — a plan loaded from disk, in
    a new process or after an eviction, costs a ~1 ms load instead of an O3 compile."""
    return compiled_ir("graph", ir, names, name)


def compile_graph(graph: CompiledGraph, programs) -> GraphProgram:
    """The GraphProgram of `graph` (`programs[i]` runs `graph.kernels[i]`). Falls back to
    `run_graph` when a program is neither native nor a library step, or the IR fails."""
    programs = list(programs)
    bad = [p for p in programs if not (_is_native(p) or _is_library(p))]
    if bad:
        return GraphProgram(graph, programs, "fallback", f"{len(bad)} interpreted kernel(s)")
    from svod.runtime import pool_size

    nworkers = max(1, pool_size() - 1) if pool_size() > 1 else 0
    # group steps into native segments split by library launches
    groups: list = []
    cur: list = []
    for s in graph.steps:
        if isinstance(s, Launch):
            prog = programs[s.kernel]
            if _is_library(prog):
                if cur:
                    groups.append(("native", cur))
                    cur = []
                groups.append(("library", s))
            elif prog.units > 0:
                cur.append(s)
        elif isinstance(s, Copy):
            cur.append(s)
    if cur:
        groups.append(("native", cur))
    fn_index: dict[int, int] = {}
    for s in graph.steps:
        if isinstance(s, Launch) and _is_native(programs[s.kernel]) and programs[s.kernel].units > 0:
            fn_index.setdefault(s.kernel, len(fn_index) + 1)
    texts, names = [], []
    parallel = False
    tag = hashlib.blake2b(repr(graph.steps).encode(), digest_size=6).hexdigest()
    for gi, (kind, item) in enumerate(groups):
        if kind == "native":
            name = f"svod_g{tag}_{gi}"
            text, par = _segment_ir(name, item, fn_index, graph, programs, nworkers)
            parallel |= par
            texts.append(text)
            names.append(name)
    gp = GraphProgram(graph, programs, "native")
    gp._parallel = parallel
    table = (ctypes.c_void_p * (len(fn_index) + 1))()
    if parallel:
        from svod.runtime import _runtime_module

        table[0] = _runtime_module().address("svod_rt_dispatch")
    for k, i in fn_index.items():
        table[i] = programs[k].address
    gp._table = table
    gp._fns = ctypes.addressof(table)
    if names:
        ir = "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)\n\n" + "\n\n".join(texts)
        try:
            gp._module = _segment_module(ir, names, f"graph_{tag}")
        except Exception as e:  # noqa: BLE001 - a graph-IR bug must not lose the user's result
            log.warning("svod: compiling graph program %s failed (%s); running kernel by kernel", tag, e)
            return GraphProgram(graph, programs, "fallback", f"{type(e).__name__}: {e}")
        gp.ir = ir
    seg_fns = iter(names)
    for kind, item in groups:
        if kind == "native":
            gp.segments.append(("native", _SEGMENT(gp._module.address(next(seg_fns)))))
        else:
            prog = programs[item.kernel]
            gp.segments.append(("library", prog, tuple(dict.fromkeys(prog.slots))))
    return gp


__all__ = ["GraphProgram", "QuickParts", "compile_graph", "data_address"]
