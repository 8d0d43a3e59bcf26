"""Peak probes: what this CPU can do at best, measured with svod's own JIT and thread pool.

* `fma_peak(threads)`: a register-only loop of ``llvm.fmuladd`` on the widest float32
  vectors the CPU has (zmm with AVX-512, ymm with AVX2), `FMA_CHAINS` independent
  accumulators (enough to cover the FMA latency on two FMA pipes), no memory traffic:
  GFLOP/s (2 flops per lane per FMA) per core and on `threads` cores.
* `read_bandwidth(nbytes, threads)`: a vector sum over a float32 buffer of `nbytes`
  (eight accumulators, no stores), split into contiguous slices over svod's pool:
  GB/s read from L2, L3 or DRAM depending on the size. The buffer is read once untimed
  (paged in, and cached when it fits).
* `wake_latency()`: how late the pool's worker joins a job after an idle gap (a job
  of two units that each spin a fixed time: ~1x when the worker takes its unit, ~2x
  when the calling thread runs both), after a busy gap, a sleep, and a sleep followed
  by `svod.runtime.wake()` some microseconds before the job.
* `probe()`: both, quickly (~0.5 s; `svod calibrate` stores it, `bench/bench_matmul.py`
  and `bench/bench_kernels.py` print shares of it).

The reductions and the GEMM are compared with these numbers (a share of peak), never
with times from another machine.

>>> p = fma_peak(1, seconds=0.01)
>>> p["gflops"] > 0 and p["lanes"] in (4, 8, 16)
True
>>> fma_peak(1, seconds=0.01, cpu_time=True)["gflops"] > 0  # one thread, in its CPU time
True
"""

from __future__ import annotations

import os
import time

import llvmlite.ir as ir
import numpy as np

FMA_CHAINS = 12  # independent accumulators: latency 4 x 2 pipes = 8 needed, 12 for slack
FMA_STEPS = 1 << 14  # FMA rounds per call of the probe loop
READ_ACCS = 8

_mod: list = []


def _module():
    """The probe functions, compiled once per process:
    ``void svod_peak_fma(i8* args, i64 ub, i64 ue)`` and ``void svod_peak_read(...)``, in
    the kernel entry ABI so `svod.runtime.run_parallel` runs them on the pool."""
    if _mod:
        return _mod[0]
    from svod.codegen.jit import compile_ir, host_target_info

    lanes = host_target_info()["vector_bits"] // 32
    f32, i64, i8p = ir.FloatType(), ir.IntType(64), ir.PointerType(ir.IntType(8))
    vt = ir.VectorType(f32, lanes)
    m = ir.Module("svod_peak")
    m.triple = host_target_info()["triple"]
    fma = ir.Function(m, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fmuladd.v{lanes}f32")
    ety = ir.FunctionType(ir.VoidType(), [i8p, i64, i64])

    # fma: args = {i64 steps, float* sink (one vector per unit)}
    fn, b, args = _open_unit_function(m, ety, "svod_peak_fma")
    steps = b.load(args)
    sink = b.inttoptr(b.load(b.gep(args, [ir.Constant(i64, 1)])), ir.PointerType(vt))
    u, ulp, loop, uend, done = _enter_units(fn, b)
    # NOTE: the addend depends on the unit so nothing folds at compile time
    uf = b.sitofp(u, f32)
    x = b.insert_element(ir.Constant(vt, [1.0] * lanes), b.fadd(uf, ir.Constant(f32, 1.0)), ir.Constant(i64, 0))
    init = [b.fadd(x, ir.Constant(vt, [float(c)] * lanes)) for c in range(FMA_CHAINS)]
    b.cbranch(b.icmp_signed("<", u, fn.args[2]), loop, done)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), ulp)
    mul = ir.Constant(vt, [0.999999] * lanes)
    accs = []
    for v in init:
        p = b.phi(vt)
        p.add_incoming(v, ulp)
        accs.append(p)
    new = [b.call(fma, [a, mul, x]) for a in accs]
    for _ in range(3):  # four FMA rounds per trip
        new = [b.call(fma, [a, mul, x]) for a in new]
    i2 = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i2, loop)
    for p, n in zip(accs, new):
        p.add_incoming(n, loop)
    b.cbranch(b.icmp_signed("<", i2, steps), loop, uend)
    _close_unit(b, new, sink, u, ulp, uend, done)

    # read: args = {float* data, i64 elems per unit, i64 units, float* sink}
    fn, b, args = _open_unit_function(m, ety, "svod_peak_read")
    data = b.inttoptr(b.load(args), ir.PointerType(vt))
    per = b.load(b.gep(args, [ir.Constant(i64, 1)]))  # vectors per unit, a multiple of READ_ACCS
    sink = b.inttoptr(b.load(b.gep(args, [ir.Constant(i64, 3)])), ir.PointerType(vt))
    u, ulp, loop, uend, done = _enter_units(fn, b)
    j0 = b.mul(u, per)
    jend = b.add(j0, per)
    b.cbranch(b.icmp_signed("<", u, fn.args[2]), loop, done)
    b.position_at_end(loop)
    j = b.phi(i64)
    j.add_incoming(j0, ulp)
    accs = []
    for _ in range(READ_ACCS):
        p = b.phi(vt)
        p.add_incoming(ir.Constant(vt, [0.0] * lanes), ulp)
        accs.append(p)
    new = []
    for c, a in enumerate(accs):  # (the loads come after every phi)
        v = b.load(b.gep(data, [b.add(j, ir.Constant(i64, c))]), align=64)
        new.append(b.fadd(a, v))
    j2 = b.add(j, ir.Constant(i64, READ_ACCS))
    j.add_incoming(j2, loop)
    for p, n in zip(accs, new):
        p.add_incoming(n, loop)
    b.cbranch(b.icmp_signed("<", j2, jend), loop, uend)
    _close_unit(b, new, sink, u, ulp, uend, done)

    cm = compile_ir(str(m), name="svod_peak")
    _mod.append((cm, lanes))
    return _mod[0]


def _threads(threads: int | None) -> int:
    from svod import runtime

    return max(1, threads or runtime.pool_size())


def fma_peak(threads: int | None = None, seconds: float = 0.05, cpu_time: bool = False) -> dict:
    """Float32 FMA throughput of a register-only loop: {"gflops", "per_core", "threads",
    "lanes", "bits"}; the best of a few calls of about `seconds` each.

    ``cpu_time=True`` (one thread only: the loop then runs on the calling thread) times
    it in the thread's CPU time, not wall time: what the core does while this thread
    holds it, unaffected by other processes taking the core away (a loaded machine)."""
    from svod import runtime

    cm, lanes = _module()
    t = _threads(threads)
    if cpu_time and t != 1:
        raise ValueError(f"fma_peak(threads={threads}, cpu_time=True): CPU time is one thread's; use threads=1")
    clock = time.thread_time if cpu_time else time.perf_counter
    fn = cm.address("svod_peak_fma")
    sink = np.zeros((t, lanes), np.float32)
    args = np.array([1 << 10, sink.ctypes.data], np.int64)
    t0 = clock()
    runtime.run_parallel(fn, args.ctypes.data, t, t)
    dt = max(clock() - t0, 1e-7)
    args[0] = max(1 << 10, min(1 << 26, int(args[0] * seconds / dt)))
    best = float("inf")
    for _ in range(3):
        t0 = clock()
        runtime.run_parallel(fn, args.ctypes.data, t, t)
        best = min(best, max(clock() - t0, 1e-7))
    flops = 2.0 * lanes * FMA_CHAINS * 4 * int(args[0]) * t
    g = flops / best / 1e9
    return {"gflops": g, "per_core": g / t, "threads": t, "lanes": lanes, "bits": lanes * 32}


def read_bandwidth(nbytes: int, threads: int | None = None, repeats: int = 5, buf: np.ndarray | None = None) -> dict:
    """Bytes/s of a vector sum over `nbytes` of float32 split over `threads` (the best of
    `repeats` after one untimed pass): {"gbps", "bytes", "threads"}."""
    from svod import runtime

    cm, lanes = _module()
    t = _threads(threads)
    units = max(t, 1) * 4
    step = lanes * READ_ACCS
    per = max(1, nbytes // 4 // units // step) * step  # elements per unit
    n = per * units
    if buf is None or buf.size < n:
        buf = np.ones(n + 16, np.float32)
    base = buf.ctypes.data
    base += (-base) % 64
    sink = np.zeros((units, lanes), np.float32)
    args = np.array([base, per // lanes, units, sink.ctypes.data], np.int64)
    fn = cm.address("svod_peak_read")
    runtime.run_parallel(fn, args.ctypes.data, units, t)
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        runtime.run_parallel(fn, args.ctypes.data, units, t)
        best = min(best, time.perf_counter() - t0)
    return {"gbps": 4 * n / best / 1e9, "bytes": 4 * n, "threads": t}


def _cache_bytes(level: int, default: int) -> int:
    from svod.bench.harness import _cache_size

    return int(_cache_size(level) or default)


def probe(threads: int | None = None, quick: bool = True) -> dict:
    """The FMA peak and the read bandwidths of this machine, in about half a second:
    {"cpu", "vector_bits", "threads", "fma_gflops_core", "fma_gflops", "l2_gbps",
    "l3_gbps", "dram_gbps", "seconds"} (bandwidths on `threads` threads, L2: half of a
    core's L2 per thread; L3: half the L3; DRAM: four times the L3, at least 256 MiB)."""
    from svod.codegen.jit import host_target_info

    t0 = time.perf_counter()
    t = _threads(threads)
    one = fma_peak(1, seconds=0.02 if quick else 0.1)
    alln = fma_peak(t, seconds=0.02 if quick else 0.1) if t > 1 else one
    l2 = _cache_bytes(2, 1 << 20)
    l3 = _cache_bytes(3, 32 << 20)
    reps = 5 if quick else 11
    out = {
        "cpu": host_target_info()["cpu"], "vector_bits": one["bits"], "threads": t, "cores": os.cpu_count(),
        "fma_gflops_core": one["gflops"], "fma_gflops": alln["gflops"],
        "l2_gbps": read_bandwidth(l2 // 2 * t, t, reps * 4)["gbps"],
        "l3_gbps": read_bandwidth(l3 // 2, t, reps * 2)["gbps"],
    }
    dram = max(4 * l3, 256 << 20)
    out["dram_gbps"] = read_bandwidth(dram, t, reps)["gbps"]
    out["seconds"] = time.perf_counter() - t0
    return out


def describe(p: dict) -> str:
    return (f"peak probe ({p['cpu']}, {p['vector_bits']}-bit vectors, {p['threads']} threads): FMA "
            f"{p['fma_gflops_core']:.1f} GFLOP/s a core, {p['fma_gflops']:.1f} on {p['threads']}; read L2 "
            f"{p['l2_gbps']:.1f} GB/s, L3 {p['l3_gbps']:.1f} GB/s, DRAM {p['dram_gbps']:.1f} GB/s "
            f"({p['seconds']:.2f} s)")


__all__ = ["describe", "fma_peak", "probe", "read_bandwidth"]

if __name__ == "__main__":  # pragma: no cover
    print(describe(probe(quick=False)))


_SPIN_IR = """
define void @svod_peak_spin(ptr %a, i64 %b, i64 %e) {
entry:
  %n0 = load i64, ptr %a
  %cnt = sub i64 %e, %b
  %n = mul i64 %n0, %cnt
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  call void asm sideeffect "", ""()
  %i1 = add i64 %i, 1
  %c = icmp ult i64 %i1, %n
  br i1 %c, label %loop, label %exit
exit:
  ret void
}
"""


def wake_latency(work_us: float = 200.0, gap_s: float = 0.003, pre_us: tuple = (0.0, 20.0, 100.0),
                 repeats: int = 30) -> dict:
    """Median seconds of a 2-unit job on 2 threads, each unit spinning `work_us`, after
    a `gap_s` gap between jobs: {"busy gap", "sleep gap", "sleep, wake, P us"...}. With
    the worker on time a job takes ~work_us; when it never comes, 2 x work_us (the
    caller steals its unit). "sleep, wake, P us": `runtime.wake()` P µs (busy) before
    the job, what a wake at the start of a call's Python work buys (docs/codegen.md,
    "Threads"). Modes interleaved, `repeats` rounds. Meaningless on a loaded machine:
    there the other core is taken whatever the pool does."""
    import ctypes
    import statistics

    from svod import runtime
    from svod.codegen.jit import compile_ir

    mod = compile_ir(_SPIN_IR, name="svod_peak_spin")
    fn = mod.address("svod_peak_spin")
    n = 1 << 16
    arg = (ctypes.c_int64 * 1)(n)
    best = float("inf")
    for _ in range(5):  # the fastest of five: a preempted timing would shorten the units
        t0 = time.perf_counter()
        runtime.run_parallel(fn, ctypes.addressof(arg), 1, 1)
        best = min(best, time.perf_counter() - t0)
    arg[0] = max(1, int(n * work_us * 1e-6 / max(best, 1e-9)))

    def busy(s):
        end = time.perf_counter() + s
        while time.perf_counter() < end:
            pass

    modes = {"busy gap": lambda: busy(gap_s), "sleep gap": lambda: time.sleep(gap_s)}
    for pre in pre_us:
        modes[f"sleep, wake, {pre:g} us"] = lambda pre=pre: (time.sleep(gap_s), runtime.wake(), busy(pre * 1e-6))
    times: dict[str, list[float]] = {k: [] for k in modes}
    runtime.run_parallel(fn, ctypes.addressof(arg), 2, 2)
    for _ in range(repeats):
        for k, before in modes.items():
            before()
            t0 = time.perf_counter()
            runtime.run_parallel(fn, ctypes.addressof(arg), 2, 2)
            times[k].append(time.perf_counter() - t0)
    del mod
    return {k: statistics.median(v) for k, v in times.items()}


def _open_unit_function(m, ety, name: str):
    """A probe function `name(i8* args, i64 ub, i64 ue)`: (function, builder in its entry
    block, args as i64*), for the entry's loads of the probe's arguments."""
    from llvmlite import ir

    fn = ir.Function(m, ety, name)
    b = ir.IRBuilder(fn.append_basic_block("e"))
    return fn, b, b.bitcast(fn.args[0], ir.PointerType(ir.IntType(64)))


def _enter_units(fn, b):
    """The loop over units ub..ue after the entry block: (unit index phi `u`, and the
    blocks: unit head, inner loop, unit end, exit); `b` is left in the unit head."""
    from llvmlite import ir

    ulp, loop, uend, done = (fn.append_basic_block(n) for n in ("u", "l", "ue", "d"))
    b.branch(ulp)
    b.position_at_end(ulp)
    u = b.phi(ir.IntType(64))
    u.add_incoming(fn.args[1], fn.blocks[0])
    return u, ulp, loop, uend, done


def _close_unit(b, accs, sink, u, ulp, uend, done) -> None:
    """The end of a probe's unit: sum the accumulators into sink[u] (keeps the work live),
    go to the next unit; then the function's exit."""
    from llvmlite import ir

    b.position_at_end(uend)
    tot = accs[0]
    for n in accs[1:]:
        tot = b.fadd(tot, n)
    b.store(tot, b.gep(sink, [u]), align=4)
    u.add_incoming(b.add(u, ir.Constant(ir.IntType(64), 1)), uend)
    b.branch(ulp)
    b.position_at_end(done)
    b.ret_void()
