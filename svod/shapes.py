"""Symbolic row counts: one plan and one compiled object per size *bucket* of a program.

svod keys a plan by the exact shapes of its graph (`svod.key.GraphKey`). A program run
at many row counts (a batch, a data set's length) would search and compile once per
size. This module makes the outermost (row) axis of a graph symbolic, the way
torch.compile's *automatic dynamic* does: a structure is planned for its exact size the
first time; from the second distinct row count on, every other size ``n`` of that
structure is planned and compiled once per bucket ``bucket(n)`` and served from it (the
first size keeps its exact plan: the fastest for it).

Rows of a structure (`row_axis`): a node *carries rows* when its axis 0 is the graph's
row axis of size ``n`` and row ``i`` of it depends only on rows ``i`` of its sources —
inputs with ``n`` rows, elementwise ops over row-carrying operands, reductions, arg-
reductions, reshapes, permutes, flips, pads, shrinks and concatenations that leave axis 0
alone, broadcasts of a one-row value to ``n`` rows, and ``A @ W`` with ``A`` carrying
rows and ``W`` free of them. Any other use of the row axis (a reduction over it, a slice
of it, a library step, a free value of ``n`` rows) keeps the graph exact. Every result
must carry rows or be free of them.

Running a size ``n`` in its bucket ``b`` (`SymbolicCall`): when the plan's launches
allow it (row-wise, reduce and elementwise kernels, attention; GEMMs, MLPs, split
reductions, flat elementwise kernels and 2-D attention through their rows variants;
BLAS steps: `svod.codegen.rows`), its graph program runs at ``n`` rows on the caller's
arrays (`rows_runner`): nothing read or written past row ``n``, no input copied, results
of exactly ``n`` rows. Otherwise — and on a bucket's first run, `SVOD_ROWS=0` — the
bucket's plan runs on ``b``-row inputs and the row-carrying results are the first ``n``
rows of its outputs (at ``n == b``: the inputs as they are).
Rows past ``n`` never reach a result; they must only be readable memory. An input whose
owning array reaches ``b`` rows — made by `with_room` (what `svod.asarray` makes once a
structure is dynamic), a prefix of a bigger array, a bucket's own result — binds as a
view without a copy; any other is copied into a pooled ``b``-row buffer whose extra rows
repeat row ``n - 1``. The memory plan and the pool are those of the bucket
(sized at its upper bound); rows past ``n`` cost compute, at most 1/8 of the row count
(the bucket rule below).

Bucket rule (`bucket`): sizes 0 and 1 stay exact (they change the code: size-1 axes are
dropped, empty graphs have no kernels); 2..16 round up to a power of two; above 16 a
size rounds up to a multiple of 1/8 of its octave, ``2**(e-4)`` for ``2**(e-1) < n <=
2**e`` — at most 12.5% padding, and a bucket never spans more than an eighth of an
octave, so the plan searched at the bucket's size sees the cache regime (L1/L2/L3 fit)
of every size in it within that factor. Inner axes stay exact: the vector-width
divisibility and the unrolling the codegen specialises on do not change.

`SVOD_DYNAMIC=0` turns automatic dynamic off (every size exact, as before); why a plan
was planned again (new shapes, the structure became dynamic, a new bucket, an eviction:
`svod.recompiles`) is kept in `recompiles()` and printed with ``SVOD_LOGS=recompiles``
(or ``SVOD_DEBUG=1``).

>>> bucket(1000), bucket(1003), bucket(1025), bucket(3)
(1024, 1024, 1152, 4)
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from svod.flags import NoteLog
from svod.ir import ELEMENTWISE, Ops
from svod.key import Bindings, GraphKey, KeyNode
from svod.recompiles import RECOMPILES
from svod.stats import Tally

_FREE, _ROW = 0, 1
_ROW_OPS = frozenset(ELEMENTWISE | {Ops.CONTIGUOUS})


def bucket(n: int) -> int:
    """The bucket of row count `n` (module docstring: the rule and why)."""
    if n <= 1:
        return n
    if n <= 16:
        return 1 << (n - 1).bit_length()
    step = 1 << ((n - 1).bit_length() - 4)
    return -(-n // step) * step


def enabled() -> bool:
    return os.environ.get("SVOD_DYNAMIC", "1") not in ("0", "false", "False", "")


def row_axis(key: GraphKey) -> tuple[int, list[int]] | None:
    """(n, classes) when the graph's axis 0 is a row axis of size `n` that may be
    symbolic (module docstring), classes[i] = 1 for the nodes that carry rows; None when
    it may not."""
    n = next((key.nodes[o].shape[0] for o in key.outputs if key.nodes[o].shape), None)
    if n is None or n < 2:
        return None
    cls: list[int] = []
    for node in key.nodes:
        c = _classify(node, key.nodes, cls, n)
        if c is None:
            return None
        cls.append(c)
    if not any(cls[o] for o in key.outputs):
        return None
    return n, cls


def _classify(node: KeyNode, nodes, cls: list[int], n: int) -> int | None:
    """_ROW, _FREE or None (the row axis is used in a way that keeps the graph exact)."""
    op, shape = node.op, node.shape
    if op is Ops.BUFFER:
        return _ROW if shape and shape[0] == n else _FREE
    rows = [cls[s] for s in node.src]
    if not any(rows):
        # NOTE: a free value of n rows would keep its size in the bucket's key while the
        # row-carrying ones change: exact, unless only a broadcast makes it (below)
        if op is Ops.EXPAND and shape and shape[0] == n and nodes[node.src[0]].shape[0] == 1:
            return _ROW
        return None if shape and shape[0] == n else _FREE
    src0 = nodes[node.src[0]]
    if op in _ROW_OPS:
        return _ROW if all(rows) else None
    if op is Ops.REDUCE:
        return _ROW if rows[0] and 0 not in node.arg[1] else None
    if op in (Ops.ARGMAX, Ops.ARGMIN):
        return _ROW if node.arg != 0 else None
    if op is Ops.RESHAPE:
        return _ROW if shape and shape[0] == n and src0.shape[0] == n else None
    if op is Ops.PERMUTE:
        return _ROW if node.arg[0] == 0 else None
    if op is Ops.EXPAND:
        return _ROW if shape[0] == n else None
    if op is Ops.SHRINK:
        return _ROW if tuple(node.arg[0]) == (0, n) else None
    if op is Ops.FLIP:
        return _ROW if 0 not in node.arg else None
    if op is Ops.PAD:
        return _ROW if tuple(node.arg[0][0]) == (0, 0) else None
    if op is Ops.CAT:
        return _ROW if all(rows) and node.arg != 0 else None
    if op is Ops.MATMUL:
        if len(shape) == 2:
            return _ROW if rows == [_ROW, _FREE] else None
        return _ROW if all(rows) else None
    return None


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def rewrite(key: GraphKey, cls: list[int], b: int) -> GraphKey:
    """`key` with the row axis of size n set to `b` in every row-carrying node (shape and
    the args that name it); row-carrying inputs become contiguous `b`-row buffers."""
    nodes = []
    for node, c in zip(key.nodes, cls):
        if not c:
            nodes.append(node)
            continue
        shape = (b,) + node.shape[1:]
        arg = node.arg
        if node.op is Ops.BUFFER:
            arg = (arg[0], _contiguous(shape))
        elif node.op in (Ops.RESHAPE, Ops.EXPAND):
            arg = (b,) + tuple(arg[1:])
        elif node.op is Ops.SHRINK:
            arg = ((0, b),) + tuple(arg[1:])
        nodes.append(KeyNode(node.op, node.dtype, node.src, arg, shape))
    return GraphKey(tuple(nodes), key.outputs)


def with_room(arr: np.ndarray) -> np.ndarray:
    """A read-only C-contiguous copy of `arr` whose memory has room for `bucket(n)` rows,
    the extra rows repeating row n - 1, so that `pad_rows` binds it to its bucket without
    a copy (`svod.asarray` copies this way once a structure of the process is dynamic).
    The array itself has `arr`'s shape."""
    n = arr.shape[0]
    b = bucket(n)
    block = np.empty((b,) + arr.shape[1:], arr.dtype)
    block[:n] = arr
    block[n:] = block[n - 1]
    block.flags.writeable = False
    return block[:n]


def _room(a: np.ndarray, b: int) -> np.ndarray | None:
    """`a` (C-contiguous, n rows) extended to `b` rows in place when the array that owns its
    memory reaches that far (a `with_room` copy, a prefix of a bigger array, a bucket's
    result), else None. Rows past n are whatever that memory holds: they never reach a
    result (row-carrying nodes compute row i from rows i), and every op admitted on a
    row axis is defined on any value (integer division and shifts do not trap, here or
    in the reference interpreter)."""
    base = a.base
    if type(base) is not np.ndarray or not a.flags.c_contiguous or a.ndim == 0:
        return None
    start = a.ctypes.data - base.ctypes.data
    if start < 0 or start + b * a.strides[0] > base.nbytes or a.strides[0] * a.shape[0] != a.nbytes:
        return None
    return np.lib.stride_tricks.as_strided(a, (b,) + a.shape[1:], a.strides, writeable=False)


def pad_rows(a: np.ndarray, b: int) -> np.ndarray:
    """`a` (n rows) as a C-contiguous array of `b` rows: `a` itself when it has `b` rows
    already (a size at its bucket's upper bound: 1,024 rows, 2**20 elements), a view when
    the memory `a` lives in reaches `b` rows (`_room`), else a pooled copy whose rows past
    n repeat row n - 1."""
    if a.ndim and a.shape[0] == b and a.flags.c_contiguous:
        return a
    room = _room(a, b)
    if room is not None:
        return room
    from svod.pool import POOL

    n = a.shape[0]
    out = POOL.array((b,) + a.shape[1:], a.dtype)  # NOTE: pooled: a fresh block pays page faults
    out[:n] = a
    if b > n:
        out[n:] = a[n - 1]
    return out


@dataclass(frozen=True)
class SymbolicCall:
    """One call of a dynamic structure: the bucket's key and how to bind this size to it."""

    key: GraphKey  # the bucket's key (row axis of size `b`)
    n: int
    b: int
    row_inputs: tuple[bool, ...]  # per binding: padded to b rows
    row_outputs: tuple[bool, ...]  # per output: its first n rows are the result

    def bind(self, arrays) -> list[np.ndarray]:
        return [pad_rows(a, self.b) if r else a for a, r in zip(arrays, self.row_inputs)]

    def results(self, outs) -> list[np.ndarray]:
        n = self.n
        return [o[:n] if r else o for o, r in zip(outs, self.row_outputs)]

    def run(self, exe, arrays) -> list[np.ndarray]:
        """This size's results from the bucket's plan `exe`: its graph program run at
        ``n`` rows on the arrays as they are (`rows_runner`) when the plan allows it,
        else the padded run (`bind`, the plan at ``b`` rows, `results`). The plan's first
        run is always the padded one (it builds, compiles and validates the plan)."""
        if self.n == self.b:  # the bucket's own size: its plan on the arrays as they are (b rows pad nothing)
            rp = None
            outs = exe.run(arrays)
        else:
            rp = rows_runner(exe, self)
            outs = self.results(exe.run(self.bind(arrays))) if rp is None else None
        if rp is None:
            gp = getattr(exe, "_gp", None)
            if gp is not None and "_rows_program" not in gp.__dict__:
                rows_runner(exe, self)  # the bucket's first run: its rows program now, with the plan's compile
            elif gp is None and getattr(exe, "warm", False) and _rows_on():
                build_later(exe, self)  # a warm record's plan: its graph program and rows program, off the call
            return outs
        if not rp.checked:  # SVOD_VALIDATE when the program was built: compare its first run once
            rp.tally.tick()
            return self._checked(exe, rp, arrays)
        gp = exe._gp
        fast = rp.runner(gp, self.n)
        if fast:  # straight-line code for this row count (`RowsProgram.runner`: it counts on rp.tally)
            outs = fast(arrays)
            if outs is not None:
                return outs
        rp.tally.tick()
        return rp.run(gp, arrays, self.n)

    def _checked(self, exe, rp, arrays) -> list[np.ndarray]:
        """SVOD_VALIDATE (set when the rows program was built, as a plan's validation is read
        when the plan is made): the rows program's first run against the padded run of the
        same arrays (the same kernels on the same rows: bitwise equal); on a difference the
        bucket pads from then on, and says why (`row_mode`)."""
        got = rp.run(exe._gp, arrays, self.n)
        want = self.results(exe.run(self.bind(arrays)))
        rp.checked = True
        if all(g.shape == w.shape and g.dtype == w.dtype and g.tobytes() == w.tobytes() for g, w in zip(got, want)):
            return got
        rp.ok = False
        rp.reason = "its first run differed from the padded run (SVOD_VALIDATE)"
        ROW_MODES[self.key.hash] = rp.reason
        import logging

        logging.getLogger("svod").warning("svod: bucket %d plan %s run at %d rows %s; padding from now on",
                                          self.b, self.key.hash[:12], self.n, rp.reason)
        return want


def rows_runner(exe, call: SymbolicCall):
    """The `svod.codegen.rows.RowsProgram` running `exe` (a bucket's plan) at a run-
    time row count, or None: the plan has not run yet (or not validated), has no graph
    program built in this process yet (a `svod.warmplan` record replays without one:
    `build_later` builds it off the call), `SVOD_ROWS=0`, or its kernels cannot (the
    program's `reason`)."""
    if not getattr(exe, "_validated", False) or not _rows_on():
        return None
    gp = getattr(exe, "_gp", None)
    if gp is None:  # not run yet, or a WarmPlan replaying its record: its programs are built off the
        return None  # call (`build_later`: ~0.7 s measured in a warm process); until then it pads
    rp = gp.__dict__.get("_rows_program")
    if rp is None or (rp.ok and rp.tally is None):  # (one built without its plan's Tally: by hand)
        rp = _rows_program(exe, gp, call)
    return rp if rp.ok else None


def _rows_program(exe, gp, call: SymbolicCall):
    from svod.codegen.rows import rows_program

    rp = rows_program(gp, call.b, call.row_inputs, call.row_outputs)
    if rp.ok and rp.tally is None:
        rp.tally = Tally((("kernels_launched", exe._n_kernels), ("nodes_evaluated", exe._n_nodes)))
    if len(ROW_MODES) >= 4096:
        ROW_MODES.clear()
    ROW_MODES[call.key.hash] = "" if rp.ok else rp.reason
    return rp


_LATER_LOCK = threading.Lock()


def build_later(exe, call: SymbolicCall) -> threading.Thread | None:
    """Build a warm record's plan (`svod.executable.WarmPlan`: it replays shared libraries,
    without Kernels or a GraphProgram) as a GraphProgram, and its rows program, on a
    background thread, once per plan: its kernels load from the object cache, but the
    plan's Kernels, the LLVM import and the graph program cost ~0.7 s, which no call waits
    for. The calls meanwhile pad to the bucket (the warm runner); once it is built,
    `rows_runner` finds it. Returns the thread (None when one was started before)."""
    with _LATER_LOCK:
        if exe.__dict__.get("_rows_later") is not None:
            return None
        exe._rows_later = t = threading.Thread(target=_build, args=(exe, call), name="svod-rows-build", daemon=True)
    t.start()
    return t


def _build(exe, call: SymbolicCall) -> None:
    import logging

    try:
        gp = exe.graph_program()
        if "_rows_program" not in gp.__dict__:
            _rows_program(exe, gp, call)
    except Exception as e:  # noqa: BLE001 - an optimisation: the calls keep padding
        logging.getLogger("svod").debug("svod: building the rows program of a warm plan failed: %s", e)


# bucket key hash -> "" (its plan runs a size's n rows, the row count read at run time)
# or why it pads to the bucket (`svod.codegen.rows.analyse`); for `Dynamic.peek`
ROW_MODES: dict[str, str] = {}


def row_mode(call: SymbolicCall) -> str:
    """How a size runs in its bucket's plan, in words (`svod.explain`)."""
    if not _rows_on():
        return f"padded to {call.b} rows (SVOD_ROWS=0)"
    why = ROW_MODES.get(call.key.hash)
    if why is None:
        return (f"the bucket's first run pads to {call.b} rows; later sizes run their own rows "
                "when its kernels allow it")
    if why:
        return f"padded to {call.b} rows: {why}"
    return f"runs its {call.n} rows on the arrays as they are (the row count read at run time)"


def _rows_on() -> bool:
    return os.environ.get("SVOD_ROWS", "1") not in ("0", "false", "False", "")


class BucketRun:
    """An Executable-like pair (the bucket's plan, this size's binding): `run(arrays)`
    binds the size, runs the plan and returns this size's results (`svod.jit` traces
    hold it as their executable)."""

    def __init__(self, exe, call: SymbolicCall):
        self.exe = exe
        self.call = call
        self.key = call.key
        self.origin = getattr(exe, "origin", "")
        self.provisional = getattr(exe, "provisional", False)

    def run(self, arrays) -> list[np.ndarray]:
        return self.call.run(self.exe, arrays)

    def quick_parts(self):
        """(QuickParts, Tally) for svod.jit's inlined replay of this size (`svod.capture`),
        or None: at the bucket's own size the plan's (its inputs are bound as they are, its
        outputs are this size's), else the rows program's at this row count
        (`RowsProgram.quick_parts`). The inlined replay is made once per argument layout
        and does not read SVOD_ROWS again (the general path reads it per call)."""
        exe, call = self.exe, self.call
        if call.n == call.b:
            qp = getattr(exe, "quick_parts", None)
            return qp() if qp is not None else None
        rp = rows_runner(exe, call)
        if rp is None or rp.tally is None:
            return None
        parts = rp.quick_parts(exe._gp, call.n)
        return None if parts is None else (parts, rp.tally)

    def describe(self) -> str:
        return f"bucket {self.call.b} for {self.call.n} rows\n" + self.exe.describe()


class Dynamic:
    """Automatic dynamic: the row counts seen per structure, and the recompile log.

    A structure is the key with its row axis made a symbol. The first row count of a
    structure is planned exactly; a second distinct one makes it dynamic, and from then
    on `lookup` maps every size (0 and 1 excepted) to its bucket. Bounded (LRU of
    structures); safe from several threads (one lock)."""

    def __init__(self, max_structures: int = 4096, max_log: int = 256):
        self.max_structures = max_structures
        self._seen: OrderedDict[str, tuple[int, set]] = OrderedDict()  # structure -> (first n, buckets planned)
        self._dynamic: set[str] = set()
        self.active = False  # whether a structure ever turned dynamic (`with_room` from then on)
        self.log = NoteLog(max_log)
        self._lock = threading.Lock()

    def lookup(self, key: GraphKey, bindings: Bindings) -> SymbolicCall | None:
        """The bucket call for this graph when its structure is dynamic, else None (plan
        `key` exactly). Records the reason of every new structure, transition and bucket."""
        found = row_axis(key)
        if found is None:
            return None
        n, cls = found
        struct = rewrite(key, cls, -1).hash
        b = bucket(n)
        with self._lock:
            seen = self._seen.get(struct)
            if seen is None:
                self._seen[struct] = (n, set())
                if len(self._seen) > self.max_structures:
                    old, _ = self._seen.popitem(last=False)
                    self._dynamic.discard(old)
                return None
            self._seen.move_to_end(struct)
            first, buckets = seen
            if n == first:
                return None  # the size planned exactly: its plan is the fastest
            if struct not in self._dynamic:
                self._dynamic.add(struct)
                self.active = True
                self._note(struct, f"structure {struct[:12]} is dynamic in its rows: sizes {first} and {n} seen")
            if n < 2:
                return None  # 0/1 rows: specialised, exact
            if b not in buckets:
                buckets.add(b)
                self._note(struct, f"structure {struct[:12]}: new bucket {b} for {n} rows "
                                   f"(buckets so far {sorted(buckets)})")
        bkey = rewrite(key, cls, b)
        ins = tuple(bool(cls[i]) for i in bkey.inputs)
        outs = tuple(bool(cls[o]) for o in key.outputs)
        return SymbolicCall(bkey, n, b, ins, outs)

    def peek(self, key: GraphKey) -> tuple[SymbolicCall | None, str]:
        """What `lookup` would do for `key`, recording nothing: (the bucket call or None,
        why in words) — for `svod.explain`, which must show the plan realize runs."""
        found = row_axis(key) if enabled() else None
        if found is None:
            why = "automatic dynamic is off (SVOD_DYNAMIC=0)" if not enabled() else \
                "exact shapes: the row axis is not used row by row (svod.shapes.row_axis)"
            return None, why
        n, cls = found
        struct = rewrite(key, cls, -1).hash
        with self._lock:
            seen = self._seen.get(struct)
            dynamic = struct in self._dynamic
            notes = [msg for s, msg in self.log if s == struct]
        if seen is None or n == seen[0]:
            return None, (f"exact shapes: the first row count ({n}) of structure {struct[:12]}; "
                          "a second one makes it dynamic")
        if n < 2:
            return None, f"exact shapes: {n} rows are specialised (structure {struct[:12]} is dynamic)"
        b = bucket(n)
        state = "dynamic" if dynamic else "made dynamic by this size"
        why = f"bucket {b} for {n} rows: structure {struct[:12]} is {state}"
        if notes:
            why += "\n" + "\n".join("  " + m for m in notes)
        bkey = rewrite(key, cls, b)
        call = SymbolicCall(bkey, n, b, tuple(bool(cls[i]) for i in bkey.inputs),
                            tuple(bool(cls[o]) for o in key.outputs))
        why = why.replace("\n", f"; {row_mode(call)}\n", 1) if "\n" in why else f"{why}; {row_mode(call)}"
        return call, why

    def _note(self, struct: str, msg: str) -> None:
        self.log.add(struct, msg)

    @property
    def noted(self) -> int:
        return self.log.noted

    def notes_since(self, count: int) -> tuple[str, ...]:
        """The notes made after `noted` was `count` (a lookup's notes: the engine passes
        them to the recompile record of the plan they cause, svod.recompiles)."""
        with self._lock:
            return self.log.since(count)

    def __len__(self) -> int:
        """Structures seen (each with its first row count, or dynamic)."""
        return len(self._seen)

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()
            self._dynamic.clear()
            self.active = False
            self.log.clear()
            ROW_MODES.clear()
        RECOMPILES.clear()


DYNAMIC = Dynamic()


def recompiles() -> list[str]:
    """Why plans were made again for structures planned before in this process, one line
    per plan, oldest first (`svod.recompiles`): new shapes (naming the first difference),
    new arguments, a structure turned dynamic and its new buckets, a plan evicted from the
    memory cache. A first plan of a structure is not a recompile (it is in
    `svod.recompiles.RECOMPILES.log` as "new structure")."""
    return [f"{r.reason}: {r.detail}; graph {r.key}" for r in RECOMPILES.log if r.reason != "new structure"]
