"""Executables: what a plan decision hands the engine, `exe.run(arrays) -> outputs`.

- `KernelPlan`: a Plan of Kernels, built (svod.graph) and compiled (svod.codegen) on its
  first run, validated then under SVOD_VALIDATE (svod.validate), replayed after;
- `InterpretedGraph`: the whole GraphKey in the numpy reference interpreter (a planner
  failure's fallback);
- `InterpretedKernel`: one kernel in the kernel interpreter (SVOD_CODEGEN=0, or no
  usable llvmlite).

Invariants: an Executable's outputs are fresh arrays of the key's output shapes and
dtypes; `run` may be called from several threads; `footprint` counts each compiled
program by identity so that plans sharing it are not charged twice.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from svod.flags import env_int, flag
from svod.interp import eval_key
from svod.ir import Ops
from svod.key import GraphKey
from svod.stats import Tally, bump, bump_many
from svod.validate import validate_outputs

KEY_NODE_BYTES = 768  # the key and plan objects' memory per key node (docs/engine.md)


class Executable:
    """A runnable plan for one GraphKey: `run(arrays) -> outputs`."""

    key: GraphKey
    # a plan from a budget-limited search or a fallback: correct, persisted marked as such,
    # searched again by `svod tune` (svod.planner)
    provisional: bool = False
    origin: str = ""  # where svod.planner.decide found or made it ("search", "disk cache", ...)
    # the algebra mode and plan-switch setting it was planned under (svod.planner.plan_mode)
    algebra: str = "reassoc"
    mode: str = "reassoc"
    # the persistent store key its plan is saved or loaded under (svod.planner); a plan
    # with one stores a warm record when its graph program is built (svod.warmplan)
    store_key: str | None = None
    # the straight-line replay, `quick(arrays) -> outputs`, or None from it for a call that
    # needs `run` (an input to convert, another thread in the program); set by `run` once
    # a validated run built it (None before, False when there is none). The engine's
    # replay calls it first: the same outputs and counters as `run`, one call less.
    quick: Callable | None | bool = None
    # leaf order -> the engine's straight-line replay by signature of this plan
    # (`svod.engine._add_hit`, `QuickParts.hit_runner`); None until the first is made
    hits: dict | None = None

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
        the key and plan objects, estimated at `KEY_NODE_BYTES` a key node."""
        return KEY_NODE_BYTES * len(self.key.nodes), {}


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


def _pool_size() -> int:
    from svod.codegen.target import pool_size

    return pool_size()


def stored_threads(obj: dict, fallback: Callable | None) -> Callable | dict | None:
    """The thread counts persisted with a plan (`KernelPlan.to_json`'s "threads": kernel
    index -> count) when present and well formed, else `fallback` (the planner's
    `kernel_threads`, which prices the plan). The persisted counts are those the cost
    model of the plan's generation gave: the store key includes that generation. They
    hold only for the pool size they were priced for ("pool", `svod.codegen.target.
    pool_size`): a plan stored by a process of another size (``SVOD_THREADS=1``, a Ray
    worker or a cache copied from another machine) is priced again here, else a plan
    stored on one thread would run on one thread in a 16-thread process."""
    raw = obj.get("threads") if isinstance(obj, dict) else None
    if not isinstance(raw, dict) or obj.get("pool") != _pool_size():
        return fallback  # counts priced for another pool (another SVOD_THREADS or machine): price again
    try:
        out = {int(i): int(n) for i, n in raw.items()}
    except (TypeError, ValueError):
        return fallback
    if any(n < 1 for n in out.values()):
        return fallback
    return {i: n for i, n in out.items() if n > 1}


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
    with a memory plan) and run with one program per kernel.

    `threads(plan) -> {kernel index: thread count}` (the planner's `kernel_threads`: the
    counts the cost model prices the kernels with) is asked once, when the graph is built;
    without it every kernel runs on one thread. Under SVOD_VALIDATE the first run is
    checked against the reference interpreter (`svod.validate`); from the second run on, a
    program that has one replays through its straight-line runner (`quick_parts`)."""

    def __init__(self, key: GraphKey, plan, provisional: bool = False, threads: Callable | dict | None = None):
        self.key = key
        self.plan = plan
        self.provisional = provisional
        # plan -> {kernel index: threads}, asked once (when the graph is built or the plan
        # persisted); a dict: the counts stored with a persisted plan (`stored_threads`)
        self._threads = threads
        self._thread_map: dict[int, int] | None = None
        if isinstance(threads, dict):  # stored counts: only indices of this plan's kernels
            self._thread_map = {i: n for i, n in threads.items() if 0 <= i < len(plan.kernels)}
        self._validated = not flag("SVOD_VALIDATE")
        self._graph = None
        self._programs = None
        self._gp = None  # GraphProgram, built on the first run
        self._tally = None  # Tally of inlined replays (`quick_parts`)
        self.quick = None  # QuickParts.runner once set up; False: the program has none
        self._n_kernels = len(plan.kernels)
        self._n_nodes = sum(len(k.nodes) for k in plan.kernels)
        self._footprint = None  # (own bytes, {program identity: bytes}) once settled
        self._lock = threading.Lock()

    @property
    def graph(self):
        if self._graph is None:
            from svod.graph import build_graph

            self._graph = build_graph(self.plan, threads=self.thread_map())
        return self._graph

    def thread_map(self) -> dict[int, int]:
        """{kernel index: threads} of this plan (kernels absent run on one thread): asked
        of the planner's `threads` once, or the counts stored with the persisted plan —
        so a plan loaded from the disk cache needs no cost model. `SVOD_THREADS=1` forces
        one thread whatever was stored."""
        if env_int("SVOD_THREADS", 0) == 1:
            return {}
        m = self._thread_map
        if m is None:
            m = self._thread_map = dict(self._threads(self.plan)) if callable(self._threads) else {}
        return m

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
                    if self.store_key and self._gp.kind == "native":
                        from svod.warmplan import save_record

                        save_record(self, self._gp)  # the next process replays it (svod.warmplan)
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

        # the thread counts travel with the plan (`stored_threads`): a warm process then
        # builds the graph without pricing it (docs/engine.md, first-call latency)
        threads = {} if env_int("SVOD_THREADS", 0) == 1 and self._thread_map is None else self.thread_map()
        return {"kind": "plan", "plan": plan_to_json(self.plan), "pool": _pool_size(),
                "threads": {str(i): int(n) for i, n in sorted(threads.items())}}

    def quick_parts(self):
        """The graph program's replay pieces (`GraphProgram.quick_parts`) and this plan's
        `Tally` (one count per replay); None until a validated run has built the
        program's state, or when the program cannot take the fast path."""
        gp = self._gp
        if gp is None or not self._validated:
            return None
        return self._tallied(gp.quick_parts())

    def _tallied(self, parts):
        """(`parts`, this plan's replay `Tally`), or None when there are no parts."""
        if parts is None:
            return None
        if self._tally is None:
            self._tally = Tally((("kernels_launched", self._n_kernels), ("nodes_evaluated", self._n_nodes)))
        return parts, self._tally

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        fast = self.quick
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
            self.quick = got[0].runner(got[1]) if got is not None else False
        return outs


class WarmPlan(KernelPlan):
    """A persisted KernelPlan replayed from its warm record (`svod.warmplan`): the first
    run loads the graph program's modules from their shared libraries and runs them,
    without building the plan's Kernels, CompiledGraph or Programs. Everything else a
    KernelPlan offers (`plan`, `graph`, `programs`, `graph_program`, `describe`,
    `quick_parts`, ...) builds the plan from its JSON on first use (`plan`, checked like
    a plan loaded from the disk cache). When the record's modules do not load, or an input
    needs converting, `run` takes the usual KernelPlan path (from then on, for the
    former): same results, same errors. Under SVOD_VALIDATE the first run is validated
    as a KernelPlan's is."""

    def __init__(self, key: GraphKey, obj: dict, runner, provisional: bool = False,
                 threads: Callable | dict | None = None):
        self.key = key
        self._obj = obj
        self._plan = None
        self._warm = runner  # WarmRunner; started on the first run; False after it failed
        self._started = False
        self.provisional = provisional
        self._threads = threads
        self._thread_map = None
        if isinstance(threads, dict):
            self._thread_map = {i: n for i, n in threads.items() if 0 <= i < runner.n_kernels}
        self._validated = not flag("SVOD_VALIDATE")
        self._graph = None
        self._programs = None
        self._gp = None
        self._tally = None
        self.quick = None
        self._n_kernels = runner.n_kernels
        self._n_nodes = runner.n_nodes
        self._footprint = None
        self._lock = threading.Lock()
        # (the Tally is kept: its counts fold into the process counters when it is read or
        # dropped; a bare `.tick` would count into a Tally already gone)
        self._warm_tally = Tally((("kernels_launched", runner.n_kernels), ("nodes_evaluated", runner.n_nodes)))
        self._warm_tick = self._warm_tally.tick

    @property
    def plan(self):
        """The Plan, built from the stored JSON on first use (and checked)."""
        p = self._plan
        if p is None:
            from svod.kernel import plan_from_json

            p = plan_from_json(self._obj["plan"])
            p.check()
            self._plan = p
        return p

    @plan.setter
    def plan(self, value) -> None:
        self._plan = value

    @property
    def warm(self) -> bool:
        """Whether runs go through the warm record's runner (False once it failed to load,
        True before the first run)."""
        return bool(self._warm)

    def to_json(self) -> dict:
        return {"kind": "plan", "plan": self._obj["plan"], "pool": self._obj.get("pool"),
                "threads": dict(self._obj.get("threads") or {})}

    def footprint(self) -> tuple[int, dict[int, int]]:
        if self._gp is not None or not self._warm:
            return super().footprint()
        return KEY_NODE_BYTES * len(self.key.nodes) + self._warm.nbytes, {}

    def quick_parts(self):
        """The warm runner's replay pieces (`WarmRunner.quick_parts`) once a validated run
        started it; the usual KernelPlan's when it runs that way."""
        if self._gp is not None or not self._warm:
            return super().quick_parts()
        if not self._started or not self._validated:
            return None
        return self._tallied(self._warm.quick_parts())

    def run(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        if not self._started:
            with self._lock:
                if not self._started:
                    w = self._warm
                    if w and w.start():
                        bump("kernels_loaded", w.n_kernels)
                    else:
                        self._warm = False
                    self._started = True
        fast = self.quick
        if fast:  # from the second run: the straight-line runner (`quick_parts`), as a KernelPlan's
            outs = fast(arrays)
            if outs is not None:
                return outs
        w = self._warm
        if w:
            outs = w.run(arrays)
            if outs is not None:
                self._warm_tick()
                if not self._validated:
                    validate_outputs(self.key, arrays, outs, self.describe)
                    self._validated = True
                elif fast is None and self._gp is None:
                    got = self.quick_parts()
                    self.quick = got[0].runner(got[1]) if got is not None else False
                return outs
        return super().run(arrays)
