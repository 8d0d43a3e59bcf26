"""Measured profiles: every kernel of a realize timed, and a Chrome-trace timeline.

`svod.profile(*tensors)` realizes the tensors (their values are computed, as by
`svod.realize`) with the plan realize() uses, running the compiled graph step by step
and timing each Allocate / Copy / Launch / Free; it returns a `Profile`: per kernel the
time (median and minimum over `repeats` runs), GB/s (bytes the kernel reads once plus
writes), GFLOP/s, the share of this machine's measured bandwidth at that working set
(`costmodels` profile, the curve for the kernel's thread count), and the cost model's
prediction against the measurement. `Profile.save_trace(path)` writes a Chrome-trace /
Perfetto JSON (open it in ui.perfetto.dev or chrome://tracing): the search and compile
spans, each step of the last run on the calling thread, and each slice of a parallel
kernel on the pool thread that ran it (timed natively around the slice).

`SVOD_PROFILE=1` profiles every realize of the process: one line per kernel on stderr
(as tinygrad's DEBUG=2), and with `SVOD_TRACE=path.json` the timeline of all of them is
written at exit (the switch and the machine-profile file: svod.flags). svod.profiler
registers that realize as the engine's `PROFILE_REALIZE` hook at its import.

>>> import svod, numpy as np
>>> x = svod.asarray(np.ones((64, 64), np.float32))
>>> p = svod.profile(svod.nn.softmax(x * 2.0), repeats=2)
>>> len(p.kernels), p.kernels[0].seconds > 0
(1, True)
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from svod import engine
from svod.planner import cost_model
from svod.stats import stats
from svod.tensor import Tensor, _apply_becomes, _realized

# ----------------------------------------------------------------------------- native slice timer

_TIMER_IR = r"""
declare i32 @clock_gettime(i32, ptr)
SYSCALL_DECL
define i64 @svod_prof_now() {
  %ts = alloca [2 x i64], align 8
  %r = call i32 @clock_gettime(i32 1, ptr %ts)
  %s = load i64, ptr %ts, align 8
  %np = getelementptr i64, ptr %ts, i64 1
  %n = load i64, ptr %np, align 8
  %ns = mul i64 %s, 1000000000
  %t = add i64 %ns, %n
  ret i64 %t
}
; block: [0] entry of the kernel, [1] its argument block, [2] records, [3] count, [4] capacity
define void @svod_prof_slice(ptr %w, i64 %ub, i64 %ue) {
  %fnp = load ptr, ptr %w, align 8
  %ap = getelementptr i64, ptr %w, i64 1
  %args = load ptr, ptr %ap, align 8
  %t0 = call i64 @svod_prof_now()
  call void %fnp(ptr %args, i64 %ub, i64 %ue)
  %t1 = call i64 @svod_prof_now()
  %tid = TID
  %rp = getelementptr i64, ptr %w, i64 2
  %recs = load ptr, ptr %rp, align 8
  %cp = getelementptr i64, ptr %w, i64 3
  %i = atomicrmw add ptr %cp, i64 1 seq_cst
  %capp = getelementptr i64, ptr %w, i64 4
  %cap = load i64, ptr %capp, align 8
  %room = icmp ult i64 %i, %cap
  br i1 %room, label %put, label %done
put:
  %base = mul i64 %i, 5
  %p0 = getelementptr i64, ptr %recs, i64 %base
  store i64 %tid, ptr %p0, align 8
  %p1 = getelementptr i64, ptr %p0, i64 1
  store i64 %ub, ptr %p1, align 8
  %p2 = getelementptr i64, ptr %p0, i64 2
  store i64 %ue, ptr %p2, align 8
  %p3 = getelementptr i64, ptr %p0, i64 3
  store i64 %t0, ptr %p3, align 8
  %p4 = getelementptr i64, ptr %p0, i64 4
  store i64 %t1, ptr %p4, align 8
  br label %done
done:
  ret void
}
"""
_timer = None
_timer_lock = threading.Lock()


def _slice_timer():
    """(address of svod_prof_slice, clock in ns matching it) compiled once; None when the
    JIT is unavailable (kernels are then timed whole, on the calling thread)."""
    global _timer
    if _timer is None:
        with _timer_lock:
            if _timer is None:
                try:
                    import platform

                    from svod.codegen.jit import compile_ir

                    linux64 = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
                    ir = _TIMER_IR.replace("SYSCALL_DECL", "declare i64 @syscall(i64, ...)" if linux64 else "")
                    ir = ir.replace("TID", "call i64 (i64, ...) @syscall(i64 186)" if linux64 else "add i64 0, 0")
                    mod = compile_ir(ir, name="svod_profiler")
                    now = ctypes.CFUNCTYPE(ctypes.c_int64)(mod.address("svod_prof_now"))
                    _timer = (mod, mod.address("svod_prof_slice"), now)
                except Exception:  # noqa: BLE001 - a profile without per-thread slices
                    _timer = False
    return _timer or None


# ----------------------------------------------------------------------------- results


@dataclass
class KernelTiming:
    """One kernel of the plan as measured (`seconds`: median over the runs)."""

    index: int
    name: str
    kind: str
    ops: str
    threads: int
    seconds: float
    best: float  # minimum over the runs
    bytes: int  # read once + written
    flops: float
    predicted: float | None  # the cost model's price in the plan
    peak_gbps: float | None  # the machine's measured bandwidth at this working set

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def bandwidth_share(self) -> float | None:
        return self.gbps / self.peak_gbps if self.peak_gbps else None


@dataclass
class Profile:
    """What `svod.profile` measured (see the module docstring)."""

    label: str
    kernels: list[KernelTiming]
    runs: int
    total: float  # median seconds of a whole run (all steps)
    search_seconds: float
    compile_seconds: float
    planned: str  # "searched" | "cache" | ...
    events: list[dict] = field(default_factory=list)
    threads: dict[int, str] = field(default_factory=dict)

    def table(self) -> str:
        head = (f"{'#':>3} {'kernel':<14} {'kind':<11} {'thr':>3} {'time':>11} {'GB/s':>8} {'GFLOP/s':>8} "
                f"{'of peak':>7} {'predicted':>11} {'meas/pred':>9}  ops")
        lines = [f"profile of {self.label}: {len(self.kernels)} kernel(s), {self.runs} run(s), "
                 f"{_t(self.total)} a run (median); plan {self.planned}"
                 + (f", search {_t(self.search_seconds)}" if self.search_seconds else "")
                 + (f", compile {_t(self.compile_seconds)}" if self.compile_seconds else ""), head]
        for k in self.kernels:
            share = "-" if k.bandwidth_share is None else f"{k.bandwidth_share:.0%}"
            pred = "-" if k.predicted is None else _t(k.predicted)
            ratio = "-" if not k.predicted else f"{k.seconds / k.predicted:.2f}x"
            lines.append(f"{k.index:>3} {k.name[:14]:<14} {k.kind:<11} {k.threads:>3} {_t(k.seconds):>11} "
                         f"{k.gbps:>8.2f} {k.gflops:>8.2f} {share:>7} {pred:>11} {ratio:>9}  {k.ops}")
        return "\n".join(lines)

    __str__ = table

    def _repr_pretty_(self, p, cycle):  # IPython
        p.text(self.table())

    def trace(self) -> dict:
        """The Chrome-trace / Perfetto JSON object."""
        return trace_document(self.events, self.threads)

    def save_trace(self, path: str) -> str:
        with open(path, "w") as fh:
            json.dump(self.trace(), fh)
        return path


def _t(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} µs"


def trace_document(events: list[dict], threads: dict[int, str]) -> dict:
    meta = [{"ph": "M", "name": "process_name", "pid": os.getpid(), "tid": 0, "args": {"name": "svod"}}]
    meta += [{"ph": "M", "name": "thread_name", "pid": os.getpid(), "tid": tid, "args": {"name": name}}
             for tid, name in sorted(threads.items())]
    return {"traceEvents": meta + events, "displayTimeUnit": "ms"}


# ----------------------------------------------------------------------------- running


class _Recorder:
    """Chrome-trace events with times from the clock the native slice timer uses."""

    def __init__(self):
        self.events: list[dict] = []
        self.tid = threading.get_native_id()
        self.threads = {self.tid: threading.current_thread().name}
        t = _slice_timer()
        self._now = t[2] if t is not None else None

    def now_ns(self) -> int:
        return self._now() if self._now is not None else time.monotonic_ns()

    def span(self, name: str, cat: str, t0: int, t1: int, tid: int | None = None, **args) -> None:
        self.events.append({"name": name, "cat": cat, "ph": "X", "ts": t0 / 1e3, "dur": max(t1 - t0, 0) / 1e3,
                            "pid": os.getpid(), "tid": self.tid if tid is None else tid, "args": args})


def _pool_thread_names() -> dict[int, str]:
    return {t.native_id: t.name for t in threading.enumerate() if t.name.startswith("svod-worker")
            and t.native_id is not None}


def _launch_native(prog, buffers, threads: int, rec: _Recorder, label: str) -> None:
    """Run a native program with each slice timed on the thread that runs it."""
    from svod.runtime import run_parallel

    timer = _slice_timer()
    if timer is None or threads <= 1 or prog.units <= 1:
        prog.run(buffers, threads)
        return
    args = prog._argtype()
    prog._fill(args, buffers)
    cap = 8 * threads * 4 + 16
    recs = (ctypes.c_int64 * (5 * cap))()
    block = (ctypes.c_int64 * 5)(prog.address, ctypes.addressof(args), ctypes.addressof(recs), 0, cap)
    run_parallel(timer[1], ctypes.addressof(block), prog.units, threads)
    for i in range(min(block[3], cap)):
        tid, ub, ue, t0, t1 = recs[5 * i:5 * i + 5]
        rec.span(f"{label} units {ub}-{ue}", "slice", t0, t1, tid=tid or rec.tid, units=ue - ub)


def run_steps(graph, programs, arrays, rec: _Recorder, times: dict[int, list[float]], run: int) -> list:
    """`svod.graph.run_graph` with every step timed (kernel times appended to `times`)."""
    from svod.graph import Allocate, Copy, Free, Launch
    from svod.pool import POOL

    plan = graph.plan
    buffers: dict[int, np.ndarray] = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    storage: dict[int, np.ndarray] = {}
    r0 = rec.now_ns()
    for s in graph.steps:
        t0 = rec.now_ns()
        if isinstance(s, Allocate):
            blk = storage.get(s.storage)
            if blk is None:
                blk = storage[s.storage] = POOL.array((graph.storage_bytes[s.storage],), np.uint8)
            buffers[s.slot] = blk[: s.nbytes].view(plan.slots[s.slot].dtype.np)
            rec.span(f"Allocate slot {s.slot}", "step", t0, rec.now_ns(), bytes=s.nbytes, storage=s.storage)
        elif isinstance(s, Launch):
            prog = programs[s.kernel]
            k = plan.kernels[s.kernel]
            if getattr(prog, "kind", "") == "native":
                _launch_native(prog, buffers, s.threads, rec, k.name)
            else:
                prog.run(buffers, s.threads)
            t1 = rec.now_ns()
            times.setdefault(s.kernel, []).append((t1 - t0) / 1e9)
            rec.span(f"Launch {k.name}", "kernel", t0, t1, kind=k.kind, threads=s.threads, run=run)
        elif isinstance(s, Copy):
            dst = buffers[s.dst]
            np.copyto(dst, buffers[s.src][: dst.size].view(dst.dtype))
            rec.span(f"Copy slot {s.src} -> {s.dst}", "step", t0, rec.now_ns(), bytes=int(dst.nbytes))
        elif isinstance(s, Free):
            rec.span(f"Free slot {s.slot}", "step", t0, rec.now_ns())
    rec.span(f"run {run}", "run", r0, rec.now_ns())
    return [buffers[slot].reshape(shape).copy() for slot, shape in plan.outputs]


def _peak(kernel, threads: int, nbytes: int) -> float | None:
    try:
        from costmodels.profile import profile as machine_profile

        p = machine_profile()
        curve = f"copy{min(max(threads, 1), 2)}"
        if curve not in p.curves():
            curve = "copy1"
        return p.bandwidth_at(curve, max(nbytes, 1)) / 1e9
    except Exception:  # noqa: BLE001 - no profile: no share column
        return None


def profile_key(key, exe, arrays, *, repeats: int = 5, label: str = "", rec: _Recorder | None = None,
                search_span: tuple[int, int, str] | None = None, warmup: bool = True) -> tuple[Profile, list]:
    """Profile one planned graph (`exe` from `svod.planner.decide`) over `repeats`
    timed runs (after one untimed run with `warmup`); returns the Profile and the
    outputs of the last run."""
    from svod.costing import Machine, flop_count, input_bytes, output_bytes, plan_prices

    rec = rec or _Recorder()
    if search_span is not None:
        t0, t1, what = search_span
        rec.span("search" if what == "searched" else f"plan ({what})", "search", t0, t1, graph=key.hash[:12])
    plan = getattr(exe, "plan", None)
    if plan is None:  # the whole graph in the interpreter
        t0 = rec.now_ns()
        outs = exe.run(arrays)
        t1 = rec.now_ns()
        rec.span("interpreter", "kernel", t0, t1)
        p = Profile(label, [], 1, (t1 - t0) / 1e9, 0.0, 0.0, "interpreted", rec.events, rec.threads)
        return p, outs
    t0 = rec.now_ns()
    programs = exe.programs()
    graph = exe.graph
    t1 = rec.now_ns()
    compile_s = (t1 - t0) / 1e9
    rec.span(f"compile {len(programs)} kernel(s)", "compile", t0, t1)
    times: dict[int, list[float]] = {}
    totals = []
    outs: list = []
    first = 0 if warmup else 1  # run 0 warms caches and pages; it is not counted
    for r in range(first, max(repeats, 1) + 1):
        keep = rec if r == repeats else _Recorder()
        s0 = time.perf_counter()
        outs = run_steps(graph, programs, arrays, keep, times if r else {}, r)
        if r:
            totals.append(time.perf_counter() - s0)
    rec.threads.update(_pool_thread_names())
    try:
        prices = plan_prices(plan, cost_model(), Machine.host())
    except Exception:  # noqa: BLE001 - no prediction column
        prices = [None] * len(plan.kernels)
    from svod.boundaries import kernel_ops

    threads = graph.threads or {}
    rows = []
    for i, k in enumerate(plan.kernels):
        ts = times.get(i, [0.0])
        nbytes = input_bytes(k) + output_bytes(k)
        t = threads.get(i, 1)
        rows.append(KernelTiming(i, k.name, k.kind, kernel_ops(k), t, statistics.median(ts), min(ts), nbytes,
                                 float(flop_count(k)), None if prices[i] is None else prices[i].seconds,
                                 _peak(k, t, nbytes)))
    planned = search_span[2] if search_span else "cache"
    search_s = (search_span[1] - search_span[0]) / 1e9 if search_span and search_span[2] == "searched" else 0.0
    prof = Profile(label or f"graph {key.hash[:12]}", rows, len(totals), statistics.median(totals), search_s,
                   compile_s, planned, rec.events, rec.threads)
    return prof, outs


def _plan_timed(key, rec: _Recorder):
    before = stats()
    t0 = rec.now_ns()
    exe = engine.get_executable(key)
    t1 = rec.now_ns()
    after = stats()
    what = "searched" if after["searches"] > before["searches"] else \
        "disk cache" if after["disk_cache_hits"] > before["disk_cache_hits"] else "memory cache"
    return exe, (t0, t1, what)


def profile(*tensors, repeats: int = 5, trace: str | None = None):
    """Realize `tensors` and measure every kernel of their plan (see the module
    docstring); `trace`: also write the Chrome-trace JSON there. Returns a `Profile`."""
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"svod.profile: expected Tensors, got {type(t).__name__}")
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"svod.profile: repeats must be a positive integer, got {repeats!r}")
    pending = list(dict.fromkeys(t.uop for t in tensors if not t.is_realized))
    if not pending:
        raise ValueError("svod.profile: every tensor is already realized; profile them before .numpy()/realize()")
    rec = _Recorder()
    key, bindings = engine.PIPELINE.compact(pending)
    exe, span = _plan_timed(key, rec)
    prof, outs = profile_key(key, exe, bindings.arrays, repeats=repeats, rec=rec, search_span=span)
    mapping = engine._wrap(pending, outs)
    for t in tensors:  # as svod.realize: the tensors passed in are rebound
        if t.uop in mapping:
            t.uop = mapping[t.uop]
            _realized(t)
    _apply_becomes(mapping)
    if trace:
        prof.save_trace(trace)
    return prof


# ----------------------------------------------------------------------------- SVOD_PROFILE=1

_SESSION: dict = {"events": [], "threads": {}, "registered": False}
MAX_EVENTS = 200_000  # the process-wide timeline keeps at most this many events (oldest kept)


def realize_profiled(pending, key, bindings) -> list:
    """The engine's realize under SVOD_PROFILE=1: one run, each kernel printed to stderr."""
    rec = _Recorder()
    exe, span = _plan_timed(key, rec)
    prof, outs = profile_key(key, exe, bindings.arrays, repeats=1, rec=rec, search_span=span, warmup=False)
    for k in prof.kernels:
        share = "" if k.bandwidth_share is None else f" {k.bandwidth_share:4.0%} of peak"
        pred = "" if not k.predicted else f" (predicted {_t(k.predicted)}, {k.seconds / k.predicted:.2f}x)"
        print(f"svod profile {key.hash[:8]} {k.name:<12} {k.kind:<11} {_t(k.seconds):>11} {k.gbps:7.2f} GB/s "
              f"{k.gflops:7.2f} GFLOP/s{share}{pred}  {k.ops}", file=sys.stderr)
    room = MAX_EVENTS - len(_SESSION["events"])
    if room > 0:
        _SESSION["events"].extend(prof.events[:room])
    _SESSION["threads"].update(prof.threads)
    if os.environ.get("SVOD_TRACE") and not _SESSION["registered"]:
        _SESSION["registered"] = True
        atexit.register(_write_session_trace)
    return outs


def forget_session() -> None:
    """Drop the SVOD_PROFILE=1 timeline gathered so far (`svod.reset`)."""
    _SESSION["events"].clear()
    _SESSION["threads"].clear()


def _write_session_trace() -> None:
    path = os.environ.get("SVOD_TRACE")
    if not path or not _SESSION["events"]:
        return
    try:
        with open(path, "w") as fh:
            json.dump(trace_document(_SESSION["events"], _SESSION["threads"]), fh)
        print(f"svod profile: timeline of {len(_SESSION['events'])} events written to {path}", file=sys.stderr)
    except OSError as e:
        print(f"svod profile: cannot write {path}: {e}", file=sys.stderr)


engine.PROFILE_REALIZE = realize_profiled  # the engine's SVOD_PROFILE=1 hook (svod.engine's docstring)
