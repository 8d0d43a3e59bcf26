"""The one orchestrator: realize pending UOps along the pipeline of DESIGN.md.

    compact -> plan (svod.planner.decide: memory cache, tuning database, disk cache,
               search, plan passes) -> build -> compile -> run

`realize_uops` is the path; the plan of a key comes from `svod.planner.decide`, the one
function every tool asks (realize, svod.jit, explain, tune, the cost-model report).

>>> import svod
>>> x = svod.asarray([1.0, 2.0]) * 2
>>> _ = svod.realize(x); x.numpy()
array([2., 4.], dtype=float32)
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from svod.interp import eval_key
from svod.ir import Ops, UOp, signature_of
from svod.key import Bindings, GraphKey, compact
from svod.shapes import DYNAMIC
from svod.shapes import enabled as dynamic_enabled
from svod.stats import Tally, bump, bump_many
from svod.stats import stats as snapshot

log = logging.getLogger("svod")


class Executable:
    """A runnable plan for one GraphKey: `run(arrays) -> outputs`."""

    key: GraphKey
    # a plan from a budget-limited search or a fallback: correct, persisted marked as such,
    # searched again by `svod tune` (svod.planner)
    provisional: bool = False
    origin: str = ""  # where svod.planner.decide found or made it ("search", "disk cache", ...)

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def to_json(self) -> dict | None:
        """A JSON form for the persistent plan cache (None: not persistable)."""
        return None

    def nbytes(self) -> int:
        """Memory this entry holds, its programs included (`footprint` splits it)."""
        own, progs = self.footprint()
        return own + sum(progs.values())

    def footprint(self) -> tuple[int, dict[int, int]]:
        """(bytes of its own, {program identity: bytes}) — programs may be shared with
        other plans, so a total over several plans counts each identity once. Its own:
        the key and plan objects, 768 bytes a key node (tracemalloc: ~8 KB for the key
        and greedy plan of an 11-node graph)."""
        return 768 * len(self.key.nodes), {}


class InterpretedGraph(Executable):
    """Evaluate the whole GraphKey with the numpy reference interpreter."""

    def __init__(self, key: GraphKey):
        self.key = key
        self.n_compute = sum(1 for n in key.nodes if n.op not in (Ops.BUFFER, Ops.CONST))

    def describe(self) -> str:
        lines = str(self.key).splitlines()
        body = "\n".join("  " + ln for ln in lines[:40])
        more = f"\n  ... {len(lines) - 40} more" if len(lines) > 40 else ""
        return f"plan: the whole graph in the numpy interpreter ({self.n_compute} ops)\n{body}{more}"

    def to_json(self) -> dict:
        return {"kind": "interpreted"}

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        bump("interpreter_fallbacks")
        bump("nodes_evaluated", self.n_compute)
        return eval_key(self.key, arrays)


class InterpretedKernel:
    """A kernel run by the numpy kernel interpreter (the codegen's fallback)."""

    def __init__(self, kernel):
        self.kernel = kernel

    def run(self, buffers: dict, threads: int = 1) -> None:
        from svod.interp import run_kernel

        bump("interpreter_fallbacks")
        run_kernel(self.kernel, buffers)


def _programs(plan) -> list:
    """One program per kernel: compiled when the codegen is available, else interpreted."""
    compile_kernel = _codegen()
    out = []
    for k in plan.kernels:
        out.append(compile_kernel(k) if compile_kernel is not None else InterpretedKernel(k))
    return out


def _codegen():
    """The codegen's compile_kernel, or None (SVOD_CODEGEN=0, or llvmlite unusable)."""
    if os.environ.get("SVOD_CODEGEN", "1") in ("0", "false", "False"):
        return None
    try:
        from svod.codegen.program import compile_kernel
    except ImportError:
        return None
    return compile_kernel


class KernelPlan(Executable):
    """A Plan of Kernels, built into a CompiledGraph (Allocate/Copy/Launch/Free over slots
    with a memory plan) and run with one program per kernel."""

    def __init__(self, key: GraphKey, plan, provisional: bool = False):
        self.key = key
        self.plan = plan
        self.provisional = provisional
        self._validated = not _flag("SVOD_VALIDATE")
        self._graph = None
        self._programs = None
        self._gp = None  # GraphProgram, built on the first run
        self._tally = None  # Tally of inlined replays (`quick_parts`)
        self._fast = None  # QuickParts.runner once set up; False: the program has none
        self._n_kernels = len(plan.kernels)
        self._n_nodes = sum(len(k.nodes) for k in plan.kernels)
        self._footprint = None  # (own bytes, {program identity: bytes}) once settled
        self._lock = threading.Lock()

    @property
    def graph(self):
        if self._graph is None:
            from svod.graph import build_graph

            self._graph = build_graph(self.plan, threads=kernel_threads(self.plan))
        return self._graph

    def programs(self) -> list:
        with self._lock:
            if self._programs is None:
                t0 = time.perf_counter()
                self._programs = _programs(self.plan)
                bump("compile_seconds", time.perf_counter() - t0)
            return self._programs

    def graph_program(self):
        """The GraphProgram replaying the whole graph (native segments between library
        steps; kernel by kernel when a kernel is interpreted)."""
        gp = self._gp
        if gp is None:
            from svod.codegen.graphprog import GraphProgram, compile_graph

            programs = self.programs()
            with self._lock:
                if self._gp is None:
                    t0 = time.perf_counter()
                    if _codegen() is None:
                        self._gp = GraphProgram(self.graph, programs, "fallback", "codegen disabled")
                    else:
                        self._gp = compile_graph(self.graph, programs)
                    bump("compile_seconds", time.perf_counter() - t0)
                gp = self._gp
        return gp

    def describe(self) -> str:
        return str(self.plan)

    def footprint(self) -> tuple[int, dict[int, int]]:
        """Its own bytes include the graph program (its segment module, measured, and the
        scratch temps it keeps between runs); its programs' measured sizes come apart.
        Kept once it cannot change (the graph program built, its scratch made): the plan
        cache re-reads every entry's footprint on each insert. Callers must not mutate."""
        fp = self._footprint
        if fp is not None:
            return fp
        own, progs = super().footprint()
        gp = self._gp
        if gp is not None:
            own += gp.nbytes
        for p in self._programs or ():
            f = getattr(p, "footprint", None)
            if f is not None:
                i, n = f()
                progs[i] = n
        if gp is not None and (gp._state is not None or gp.kind != "native" or not gp._scratch_ok):
            self._footprint = (own, progs)
        return own, progs

    def to_json(self) -> dict:
        from svod.kernel import plan_to_json

        return {"kind": "plan", "plan": plan_to_json(self.plan)}

    def quick_parts(self):
        """The graph program's replay pieces (`GraphProgram.quick_parts`) and this plan's
        `Tally` (one count per replay); None until a validated run has built the
        program's state, or when the program cannot take the fast path."""
        gp = self._gp
        if gp is None or not self._validated:
            return None
        parts = gp.quick_parts()
        if parts is None:
            return None
        if self._tally is None:
            self._tally = Tally((("kernels_launched", self._n_kernels), ("nodes_evaluated", self._n_nodes)))
        return parts, self._tally

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        fast = self._fast
        if fast:
            outs = fast(arrays)
            if outs is not None:
                return outs
        bump_many((("kernels_launched", self._n_kernels), ("nodes_evaluated", self._n_nodes)))
        outs = (self._gp or self.graph_program()).run(arrays)
        if not self._validated:
            validate_outputs(self.key, arrays, outs, self.describe)
            self._validated = True
        elif fast is None:  # from the second run: the straight-line runner, when the program has one
            got = self.quick_parts()
            self._fast = got[0].runner(got[1]) if got is not None else False
        return outs


class ValidationError(AssertionError):
    """SVOD_VALIDATE: a plan's results differ from the reference interpreter."""


def validate_outputs(key: GraphKey, arrays, outs, describe) -> None:
    """Compare a plan's outputs with the numpy reference interpreter (SVOD_VALIDATE=1).

    Float outputs agree within 1e-4 (float32) / 1e-10 (float64) of the output's scale,
    plus, when that fails, the result's own sensitivity to rounding: how far the
    reference moves when its float inputs move by a few ulps (`_rounding_slack`). A
    layer norm of a constant row is 0 exactly in one summation order and ~1e-3 in
    another (x - mean(x) is pure rounding, divided by sqrt(eps)); both are right."""
    ref = eval_key(key, arrays)
    slack = None
    for i, (got, want) in enumerate(zip(outs, ref)):
        ok = got.shape == want.shape and got.dtype == want.dtype
        if ok and want.dtype.kind == "c":  # each part, as a float output (no rounding slack)
            tol = 1e-4 if want.dtype == np.complex64 else 1e-10
            ok = all(bool(np.allclose(getattr(got, p), w, rtol=tol, equal_nan=True,
                                      atol=tol * float(np.max(np.abs(w[np.isfinite(w)]), initial=1.0))))
                     for p in ("real", "imag") for w in [getattr(want, p)])
        elif ok and want.dtype.kind == "f":
            tol = 1e-4 if want.dtype == np.float32 else 1e-10
            scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=1.0))
            ok = bool(np.allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True))
            if not ok:
                slack = slack if slack is not None else _rounding_slack(key, arrays, ref)
                ok = bool(np.all(np.isclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True) |
                                 (np.abs(got.astype(np.float64) - want) <= slack[i])))
        elif ok:
            ok = bool(np.array_equal(got, want))
        if not ok:
            raise ValidationError(f"SVOD_VALIDATE: output {i} of graph {key.hash[:12]} differs from the "
                                  f"reference interpreter\n{describe()}")


def _rounding_slack(key: GraphKey, arrays, ref) -> list[np.ndarray]:
    """Per output element: 4x the largest move of the reference over two evaluations with
    every float input nudged by up to 4 ulps (seeded random signs): a well-conditioned
    result moves by a few ulps, an ill-conditioned one by as much as rounding can."""
    rng = np.random.default_rng(0)
    moves = [np.zeros(r.shape, np.float64) for r in ref]
    for _ in range(2):
        nudged = []
        for a in arrays:
            a = np.asarray(a)
            if a.dtype.kind == "f" and a.size:
                step = np.spacing(np.abs(a)).astype(a.dtype)
                a = (a + step * rng.integers(-4, 5, a.shape).astype(a.dtype)).astype(a.dtype)
            nudged.append(a)
        for m, r, r2 in zip(moves, ref, eval_key(key, nudged)):
            if r.dtype.kind == "f" and r2.shape == r.shape:
                d = np.abs(r2.astype(np.float64) - r)
                np.maximum(m, np.where(np.isfinite(d), d, 0.0), out=m)
    return [4.0 * m for m in moves]


def _flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


_warned: set[str] = set()


def _warn_once(tag: str, msg: str) -> None:
    import warnings

    from svod.errors import SvodWarning, user_stacklevel

    if tag not in _warned:
        _warned.add(tag)
        warnings.warn(msg, SvodWarning, stacklevel=user_stacklevel())  # the user's line


def fuse_plan(plan):
    """`plan` after the plan passes (`svod.planner.plan_passes`; kept for callers of the
    old name)."""
    from svod.planner import plan_passes

    return plan_passes(plan)


def kernel_threads(plan) -> dict[int, int]:
    """Threads per kernel of `plan` (index -> count) as the cost model prices them in it
    on this machine (`SVOD_THREADS=1` forces one). Small kernels get one: a split must pay
    its dispatch."""
    from svod.costing import Machine, plan_prices
    from svod.planner import cost_model

    if _env_int("SVOD_THREADS", 0) == 1:
        return {}
    try:
        prices = plan_prices(plan, cost_model(), Machine.host())
    except Exception:  # noqa: BLE001 - a pricing failure costs speed, never a result
        return {}
    return {i: p.threads for i, p in enumerate(prices) if p.threads > 1}


# names that moved to svod.planner (the plan decision), still readable here
_MOVED = {"cost_model": "cost_model", "plan_generation": "plan_generation", "_import_search": "import_search",
          "LAST_SEARCH": "LAST_SEARCH", "_plan_store_key": "plan_store_key", "PLAN_FORMAT": "PLAN_FORMAT"}


def __getattr__(name: str):
    if name in _MOVED:
        from svod import planner

        return getattr(planner, _MOVED[name])
    raise AttributeError(f"module 'svod.engine' has no attribute {name!r}")


@dataclass
class Pipeline:
    """The replaceable parts of the realize path (the plan itself: `svod.planner.decide`)."""

    compact: Callable[[list[UOp]], tuple[GraphKey, Bindings]] = compact


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, "") or default)
    except ValueError:
        return default


class PlanCache:
    """In-memory LRU of Executables keyed by GraphKey hash. Bounded by entries and by
    bytes: what its entries hold (`Executable.footprint`: measured programs — a program
    shared by several plans counted once — graph programs, scratch, the plan objects);
    `SVOD_PLAN_CACHE_ENTRIES`, `SVOD_PLAN_CACHE_MB`. An evicted plan is dropped: its
    programs are freed unless another plan or a jit trace still holds them.

    Threads: `get`, `put`, `clear` take the lock; `use` and `holds` (the replay path) do
    not — they are single C-level dict calls, atomic under the GIL, and `put` iterates
    only over C-level snapshots (`list(d.values())`), so a concurrent `use` never makes
    an iteration fail ("OrderedDict mutated during iteration")."""

    def __init__(self, max_entries: int | None = None, max_bytes: int | None = None):
        self.max_entries = max_entries if max_entries is not None else _env_int("SVOD_PLAN_CACHE_ENTRIES", 512)
        self.max_bytes = max_bytes if max_bytes is not None else _env_int("SVOD_PLAN_CACHE_MB", 512) << 20
        self._d: OrderedDict[str, Executable] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _total(entries) -> int:
        own, progs = 0, {}
        for e in entries:
            o, p = e.footprint()
            own += o
            progs.update(p)
        return own + sum(progs.values())

    def nbytes(self) -> int:
        """Bytes held by the entries (each shared program once)."""
        with self._lock:
            entries = list(self._d.values())
        return self._total(entries)

    def get(self, key: GraphKey) -> Executable | None:
        with self._lock:
            exe = self._d.get(key.hash)
            if exe is not None:
                self._d.move_to_end(key.hash)
            return exe

    def put(self, key: GraphKey, exe: Executable) -> None:
        """Insert (most recent) and evict least-recent entries beyond either bound. Sizes
        are re-read here (programs and scratch appear after an entry's first run); the
        entry just put is never evicted."""
        with self._lock:
            d = self._d
            d[key.hash] = exe
            d.move_to_end(key.hash)
            while len(d) > self.max_entries:
                d.popitem(last=False)
                bump("plan_cache_evictions")
            if len(d) > 1 and self._total(list(d.values())) > self.max_bytes:
                # NOTE: evict oldest first; the total is recounted (shared programs stay
                # while a remaining entry holds them)
                while len(d) > 1:
                    d.popitem(last=False)
                    bump("plan_cache_evictions")
                    if self._total(list(d.values())) <= self.max_bytes:
                        break

    def use(self, key_hash: str) -> Executable | None:
        """The entry for `key_hash`, marked most recently used (None: not held). For the
        replay by signature, which skips `get`: a plan replayed all the time must not age
        out of the LRU. Lock-free (see the class docstring); an entry evicted meanwhile
        is simply gone."""
        exe = self._d.get(key_hash)
        if exe is not None:
            try:
                self._d.move_to_end(key_hash)
            except KeyError:
                pass
        return exe

    def holds(self, key_hash: str, exe: Executable) -> bool:
        """Whether `exe` is still the entry for `key_hash` (lock-free read)."""
        return self._d.get(key_hash) is exe

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


PIPELINE = Pipeline()
PLAN_CACHE = PlanCache()


# NOTE: os.environ.get costs ~1 µs (it encodes the key); realize asks on every call, so
# read CPython's underlying dict of encoded names when it is there (same values).
_ENV_DATA = getattr(os.environ, "_data", None)
_DEBUG_KEY = os.environ.encodekey("SVOD_DEBUG") if hasattr(os.environ, "encodekey") else None


def _debug() -> int:
    if _ENV_DATA is not None and _DEBUG_KEY is not None:
        v = _ENV_DATA.get(_DEBUG_KEY)
        if v is None:
            return 0
        v = os.environ.decodevalue(v)
    else:
        v = os.environ.get("SVOD_DEBUG", "0")
    try:
        return int(v or 0)
    except ValueError:
        return 1


def debug_log(msg: str) -> None:
    """One SVOD_DEBUG line: to the "svod" logger when logging is configured, else stderr."""
    if log.isEnabledFor(logging.INFO) and (log.handlers or logging.getLogger().handlers):
        log.info(msg)
    else:  # no logging configured: SVOD_DEBUG still prints
        print(msg, file=sys.stderr)


def get_executable(key: GraphKey) -> Executable:
    """The executable for `key`: `svod.planner.decide` (memory cache, tuning database,
    disk cache, search)."""
    from svod.planner import decide

    return decide(key).exe


def plan_for(tensors) -> tuple[GraphKey, Executable]:
    """The key and the plan svod uses for these (unrealized) tensors, without running it
    (for a size of a dynamic structure: its bucket's key and plan, `svod.shapes`)."""
    key, _ = PIPELINE.compact([t.uop for t in tensors if t.uop.op is not Ops.BUFFER])
    dyn = DYNAMIC.peek(key)[0] if dynamic_enabled() else None
    if dyn is not None:
        key = dyn.key
    return key, get_executable(key)


# when a list, every planned graph is appended as (GraphKey, where: "realize" or "jit NAME")
# (`svod explain FILE.py`, `svod viz FILE.py`)
RECORDER: list | None = None
# SVOD_PROFILE=1 (read at import; svod.profiler's module docstring): realize through the profiler
PROFILING = os.environ.get("SVOD_PROFILE", "").strip().lower() in ("1", "true", "yes", "on")


def _wrap(pending: list[UOp], outs) -> dict[UOp, UOp]:
    mapping = {}
    for r, arr in zip(pending, outs):
        assert arr.shape == r.shape and arr.dtype == r.dtype.np, (r, arr.shape, arr.dtype)
        mapping[r] = UOp.buffer(arr, r.dtype)
    return mapping


class ReplayCache:
    """Structural signature (svod.ir.signature_of) -> (key hash, leaf order, whether
    `RECENT` keeps the graph: its leaves' sizes follow from the signature, the
    `svod.shapes.SymbolicCall` of a size run in its bucket's plan or None).

    A front for PLAN_CACHE that skips compaction: an entry names the plan by its key
    hash only (`PlanCache.use` finds it), so this table never keeps a plan alive —
    evicting or clearing there is a miss here — and a re-planned key replays its new
    plan (one signature has one GraphKey, so one leaf order). Bounded; dropped
    wholesale when full. Single C-level dict calls: safe from several threads.
    """

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._d: dict[int, tuple] = {}

    def get(self, sig: int):
        return self._d.get(sig)

    def put(self, sig: int, key_hash: str, leaves: tuple, buffers: list, dyn=None) -> None:
        """`dyn`: the `svod.shapes.SymbolicCall` binding this size to its bucket's plan
        `key_hash` (one signature has one row count, so one call), None for an exact plan."""
        pos = {id(leaf): i for i, leaf in enumerate(leaves)}
        perm = tuple(pos.get(id(b), -1) for b in buffers)
        if len(perm) != len(leaves) or -1 in perm:
            return  # not the same leaves as the compacted graph's: never replay by signature
        if len(self._d) >= self.max_entries:
            self._d.clear()
        self._d[sig] = (key_hash, perm, RECENT.small(leaves), dyn)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


REPLAY = ReplayCache()


_REPLAY_TALLY = Tally((("realizes", 1), ("graph_cache_hits", 1)))  # replays by signature
_REPLAY_TICK = _REPLAY_TALLY.tick


class RecentGraphs:
    """The last few realized expressions over small inputs, kept alive.

    A realize replaces its expression by a buffer, so the expression's nodes die, and the
    next `f(x)` over the same inputs builds them again (~1 µs a node, half of the lazy
    path's cost on W7). Holding the last `max_graphs` expressions keeps their nodes in the
    hash-consing cache: rebuilding one is a lookup per op. Only expressions whose leaves
    hold at most `max_bytes` together are kept (a kept node keeps its inputs' arrays alive),
    so at most `max_graphs * max_bytes` of inputs outlive their tensors, until
    `max_graphs` more realizes or `clear()`. `SVOD_RETAIN_GRAPHS=0` turns it off.
    """

    def __init__(self, max_graphs: int, max_bytes: int = 1 << 18):
        self.max_graphs = max_graphs
        self.max_bytes = max_bytes
        self._q: deque = deque(maxlen=max(max_graphs, 1))

    def small(self, leaves) -> bool:
        """Whether a graph over these leaves (BufferRefs) is kept."""
        return bool(self.max_graphs) and leaves is not None and \
            sum(leaf.array.nbytes for leaf in leaves) <= self.max_bytes

    def keep(self, roots: list) -> None:
        self._q.append(roots)  # NOTE: deque.append is atomic under the GIL

    def clear(self) -> None:
        self._q.clear()

    def __len__(self) -> int:
        return len(self._q)


RECENT = RecentGraphs(_env_int("SVOD_RETAIN_GRAPHS", 16))
_DYNAMIC = DYNAMIC
_dynamic_on = dynamic_enabled
_BUFFER = Ops.BUFFER
_buffer = UOp.buffer


def realize_uops(roots: Sequence[UOp]) -> dict[UOp, UOp]:
    """Compute every pending root in one plan; returns the becomes-map root -> BUFFER."""
    if len(roots) == 1:  # the common case, without the dedup set
        if roots[0].op is _BUFFER:
            return {}
        pending: list[UOp] = list(roots)
    else:
        pending = []
        seen: set[int] = set()
        for r in roots:
            if r.op is not _BUFFER and id(r) not in seen:
                seen.add(id(r))
                pending.append(r)
        if not pending:
            return {}
    sig, leaves = signature_of(pending) if RECORDER is None and not _debug() and not PROFILING \
        else (None, None)
    fast = REPLAY.get(sig) if sig is not None else None
    exe = PLAN_CACHE.use(fast[0]) if fast is not None else None
    if exe is not None:
        # replay: a structure seen before (same signature => same GraphKey, leaves in a
        # known order): no compaction, no lookup by key
        _REPLAY_TICK()
        dyn = fast[3]
        if dyn is None:
            outs = exe.run([leaves[j].array for j in fast[1]])
        else:
            outs = dyn.results(exe.run(dyn.bind([leaves[j].array for j in fast[1]])))
        if fast[2]:
            RECENT.keep(pending)
        # NOTE: no `_wrap` checks: this Executable's outputs were checked on its first run
        return {r: _buffer(arr, r.dtype) for r, arr in zip(pending, outs)}
    t0 = time.perf_counter()
    bump("realizes")
    key, bindings = PIPELINE.compact(pending)
    if RECORDER is not None:
        RECORDER.append((key, "realize"))
    if PROFILING:  # SVOD_PROFILE=1: every kernel timed, printed, traced (svod.profiler)
        from svod.profiler import realize_profiled

        return _wrap(pending, realize_profiled(pending, key, bindings))
    hits = snapshot()["graph_cache_hits"]
    dyn = _DYNAMIC.lookup(key, bindings) if _dynamic_on() else None
    if dyn is not None:
        # a dynamic structure (svod.shapes): the plan of its size bucket, this size bound to it
        key = dyn.key
        exe = get_executable(key)
        if sig is not None and PLAN_CACHE.holds(key.hash, exe):
            REPLAY.put(sig, key.hash, leaves, bindings.buffers, dyn)
        outs = dyn.results(exe.run(dyn.bind(bindings.arrays)))
    else:
        exe = get_executable(key)
        if sig is not None and PLAN_CACHE.holds(key.hash, exe):
            REPLAY.put(sig, key.hash, leaves, bindings.buffers)
        outs = exe.run(bindings.arrays)
    if RECENT.small(leaves):
        RECENT.keep(pending)
    mapping = _wrap(pending, outs)
    if _debug():
        hit = "hit" if snapshot()["graph_cache_hits"] > hits else "miss"
        msg = (f"svod realize: key {key.hash[:12]} nodes={len(key.nodes)} inputs={len(bindings.arrays)} "
               f"outputs={len(pending)} cache={hit} {type(exe).__name__} "
               f"{(time.perf_counter() - t0) * 1e3:.3f} ms")
        if hit == "miss" and getattr(exe, "plan", None) is not None:  # why each boundary (svod.boundaries)
            from svod.boundaries import debug_text
            from svod.planner import LAST_SEARCH, cost_model

            msg += "\n" + debug_text(key, exe.plan, LAST_SEARCH.get(key.hash), cost_model())
        debug_log(msg)
    return mapping


def reset_caches() -> None:
    """Forget every in-memory plan (tests; `svod cache clear`)."""
    PLAN_CACHE.clear()
    REPLAY.clear()
    RECENT.clear()
    DYNAMIC.clear()
