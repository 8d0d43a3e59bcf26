"""Threads: a persistent worker pool with a native (LLVM IR) wait loop, dispatch in µs.

`run_parallel(fn_addr, args_addr, units, threads)` calls the native kernel entry
``void fn(void* args, i64 unit_begin, i64 unit_end)`` on contiguous slices of
``[0, units)`` and returns when all are done. Thread t (the caller is thread 0) runs
the slices of ``[units*t//T, units*(t+1)//T)`` unless a late thread's are left, which
the others then take from the back: consecutive kernels over the same rows touch them
on the same core.

Design (see docs/codegen.md): worker Python threads each enter, once, a native wait
loop compiled from LLVM IR (ctypes releases the GIL for the whole time). A worker spins
for `SPIN_SECONDS` (a pause-loop count measured at start) on an atomic job-generation
counter in a shared 256-byte block, then sleeps on a
futex (Linux x86-64: ``syscall(SYS_futex=202, ...)``; elsewhere it naps with usleep).
The dispatcher — also native, called through ctypes — writes (fn, args, units,
threads) and each thread's slice range, bumps the generation, wakes sleepers only when
some sleep, runs its own range (then steals) and spins until every slice is done.

Lifecycle: started lazily on the first parallel call; `os.register_at_fork` forgets the
pool in a child (threads do not survive fork) so the child starts its own; `atexit`
stops and joins the workers. Dispatch holds a lock; a second Python thread that finds
the pool busy runs its job single-threaded instead of waiting. Library (BLAS) steps use
this pool too (`svod.codegen.blas`): one-thread OpenBLAS calls on blocks of the product.

>>> import ctypes
>>> pool_size() >= 1
True
"""

from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading
import time

from svod.codegen.target import pool_size  # the pool's size is a fact of the target

SPIN_SECONDS = 50e-6  # how long an idle worker spins before it sleeps on the futex
_SPIN_YIELD = 200000  # dispatcher spins this long before yielding the CPU between checks
SLICES_PER_THREAD = 4  # more slices than threads: a late worker leaves less imbalance
# i64 word offsets in the shared block (gen, done and the job on separate cache lines)
GEN, DONE, NTHREADS, FN, ARGS, UNITS, NSLICES, QUIT, SLEEPERS, READY, SPINS = 0, 8, 16, 24, 25, 26, 27, 28, 29, 30, 31
# thread t's slice range at word RANGES + 8 t (a cache line each); front and back are 16-bit
# fields, ample for the SLICES_PER_THREAD x threads slices a job has
RANGES = 32
MAXT = 17  # threads the block has ranges for (workers + 1): a job never asks for more

_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def _use_futex() -> bool:
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")


def _counted_loop(name: str, params: str, body: str) -> str:
    """IR of ``void name(params, i64 %n)`` running `body` n times (at least once)."""
    sep = ", " if params else ""
    return f"""define void @{name}({params}{sep}i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  {body}
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}"""


def _runtime_ir() -> str:
    x86 = platform.machine() in ("x86_64", "AMD64", "i386", "i686")
    futex = _use_futex()
    pause = "call void @llvm.x86.sse2.pause()" if x86 else "call void asm sideeffect \"\", \"\"()"
    decl_pause = "declare void @llvm.x86.sse2.pause()" if x86 else ""
    woken = "%wx" if futex else "0"
    if futex:
        sleep = "%fx = call i64 (i64, ...) @syscall(i64 202, ptr %genp, i64 128, i64 %myx, ptr null)"
        wake = "%wx = call i64 (i64, ...) @syscall(i64 202, ptr %genp, i64 129, i64 %nwake)"
        decl_sys = "declare i64 @syscall(i64, ...)"
    else:
        sleep = "%fx = call i32 @usleep(i32 50)"
        wake = ""
        decl_sys = "declare i32 @usleep(i32)"
    # Slices are split into one contiguous range per thread of the job (thread t owns
    # slices [ns*t//nt, ns*(t+1)//nt)); range t's word is (generation << 32) | (front <<
    # 16) | back. A thread takes its own slices from the front, then steals the others'
    # from the back, each with a CAS: consecutive kernels over the same rows run them on
    # the same core (the data one wrote is in that core's cache for the next), a late
    # (sleeping) worker never delays a job, and slice boundaries (hence results) do not
    # depend on who runs them.
    take = """
LOOP:
  %PFXw = load atomic i64, ptr %PFXp acquire, align 8
  %PFXwg = lshr i64 %PFXw, 32
  %PFXsame = icmp eq i64 %PFXwg, %g64
  %PFXf0 = lshr i64 %PFXw, 16
  %PFXf = and i64 %PFXf0, 65535
  %PFXb = and i64 %PFXw, 65535
  %PFXleft = icmp ult i64 %PFXf, %PFXb
  %PFXcan = and i1 %PFXsame, %PFXleft
  br i1 %PFXcan, label %PFXtry, label %NEXT
PFXtry:
  %PFXw1 = STEP
  %PFXcx = cmpxchg ptr %PFXp, i64 %PFXw, i64 %PFXw1 acq_rel acquire
  %PFXok = extractvalue { i64, i1 } %PFXcx, 1
  br i1 %PFXok, label %PFXrun, label %LOOP
PFXrun:
  call void @svod_rt_slice(ptr %fn, ptr %args, i64 %units, i64 %ns, i64 SLICE)
  %PFXd = atomicrmw add ptr %donep, i64 1 release
  br label %LOOP
"""
    own = (take.replace("PFX", "o").replace("LOOP", "own").replace("%NEXT", "%steal0")
           .replace("STEP", "add i64 %ow, 65536").replace("SLICE", "%of"))
    steal = (take.replace("PFX", "s").replace("LOOP", "sloop").replace("%NEXT", "%sadv")
             .replace("STEP", "sub i64 %sw, 1").replace("SLICE", "%sb1"))
    steal = steal.replace("  call void @svod_rt_slice", "  %sb1 = sub i64 %sb, 1\n  call void @svod_rt_slice")
    ptrs = f"""
  %genp = getelementptr i64, ptr %pool, i64 {GEN}
  %donep = getelementptr i64, ptr %pool, i64 {DONE}
  %ntp = getelementptr i64, ptr %pool, i64 {NTHREADS}
  %fnp = getelementptr i64, ptr %pool, i64 {FN}
  %argp = getelementptr i64, ptr %pool, i64 {ARGS}
  %unitsp = getelementptr i64, ptr %pool, i64 {UNITS}
  %nsp = getelementptr i64, ptr %pool, i64 {NSLICES}
  %quitp = getelementptr i64, ptr %pool, i64 {QUIT}
  %sleepp = getelementptr i64, ptr %pool, i64 {SLEEPERS}
  %readyp = getelementptr i64, ptr %pool, i64 {READY}
  %spinp = getelementptr i64, ptr %pool, i64 {SPINS}
  %maxtp = getelementptr i64, ptr %pool, i64 {MAXT}"""
    work = f"""
define internal void @svod_rt_slice(ptr %fn, ptr %args, i64 %units, i64 %ns, i64 %k) {{
entry:
  %b0 = mul i64 %units, %k
  %b = udiv i64 %b0, %ns
  %k1 = add i64 %k, 1
  %e0 = mul i64 %units, %k1
  %e = udiv i64 %e0, %ns
  %nonempty = icmp ult i64 %b, %e
  br i1 %nonempty, label %call, label %exit
call:
  call void %fn(ptr %args, i64 %b, i64 %e)
  br label %exit
exit:
  ret void
}}

define internal void @svod_rt_work(ptr %pool, i32 %g, i64 %tid) {{
entry:{ptrs}
  %nt = load i64, ptr %ntp, align 8
  %units = load i64, ptr %unitsp, align 8
  %ns = load i64, ptr %nsp, align 8
  %fn = load ptr, ptr %fnp, align 8
  %args = load ptr, ptr %argp, align 8
  %g64 = zext i32 %g to i64
  %mine = icmp ult i64 %tid, %nt
  %oi0 = shl i64 %tid, 3
  %oi = add i64 %oi0, {RANGES}
  %op = getelementptr i64, ptr %pool, i64 %oi
  br i1 %mine, label %own, label %steal0
{own}
steal0:
  br label %snext
snext:
  %v = phi i64 [ 1, %steal0 ], [ %v1, %sadv ]
  %more = icmp ule i64 %v, %nt
  br i1 %more, label %sset, label %exit
sset:
  %tv = add i64 %tid, %v
  %r = urem i64 %tv, %nt
  %si0 = shl i64 %r, 3
  %si = add i64 %si0, {RANGES}
  %sp = getelementptr i64, ptr %pool, i64 %si
  br label %sloop
{steal}
sadv:
  %v1 = add i64 %v, 1
  br label %snext
exit:
  ret void
}}
"""
    return f"""
{decl_pause}
{decl_sys}
declare i32 @sched_yield()
{work}

define void @svod_rt_worker(ptr %pool, i64 %tid) {{
entry:{ptrs}
  %g0 = load atomic i32, ptr %genp acquire, align 8
  %r0 = atomicrmw add ptr %readyp, i64 1 seq_cst
  br label %wait
wait:
  %my = phi i32 [ %g0, %entry ], [ %g, %done ]
  br label %spin
spin:
  %spins = phi i64 [ 0, %wait ], [ %spins1, %pause ], [ 0, %sleep ]
  %g = load atomic i32, ptr %genp acquire, align 8
  %changed = icmp ne i32 %g, %my
  br i1 %changed, label %work, label %idle
idle:
  %limit = load i64, ptr %spinp, align 8
  %more = icmp ult i64 %spins, %limit
  br i1 %more, label %pause, label %sleep
pause:
  {pause}
  %spins1 = add i64 %spins, 1
  br label %spin
sleep:
  %s0 = atomicrmw add ptr %sleepp, i64 1 seq_cst
  %myx = zext i32 %my to i64
  {sleep}
  %s1 = atomicrmw sub ptr %sleepp, i64 1 seq_cst
  br label %spin
work:
  %q = load atomic i64, ptr %quitp acquire, align 8
  %isq = icmp ne i64 %q, 0
  br i1 %isq, label %exit, label %done
done:
  call void @svod_rt_work(ptr %pool, i32 %g, i64 %tid)
  br label %wait
exit:
  ret void
}}

define void @svod_rt_dispatch(ptr %pool, ptr %fn_a, ptr %args_a, i64 %units_a, i64 %nslices, i64 %nwake) {{
entry:{ptrs}
  store atomic i64 0, ptr %donep monotonic, align 8
  store ptr %fn_a, ptr %fnp, align 8
  store ptr %args_a, ptr %argp, align 8
  store i64 %units_a, ptr %unitsp, align 8
  store i64 %nslices, ptr %nsp, align 8
  %g0 = load atomic i32, ptr %genp monotonic, align 8
  %my = add i32 %g0, 1
  %my64 = zext i32 %my to i64
  %w0 = shl i64 %my64, 32
  %want = add i64 %nwake, 1
  %maxt = load i64, ptr %maxtp, align 8
  %fits = icmp ult i64 %want, %maxt
  %nt = select i1 %fits, i64 %want, i64 %maxt
  store i64 %nt, ptr %ntp, align 8
  br label %ranges
ranges:
  %t = phi i64 [ 0, %entry ], [ %t1, %ranges ]
  %lo0 = mul i64 %nslices, %t
  %lo = udiv i64 %lo0, %nt
  %t1 = add i64 %t, 1
  %hi0 = mul i64 %nslices, %t1
  %hi = udiv i64 %hi0, %nt
  %lo16 = shl i64 %lo, 16
  %rw0 = or i64 %w0, %lo16
  %rw = or i64 %rw0, %hi
  %ri0 = shl i64 %t, 3
  %ri = add i64 %ri0, {RANGES}
  %rp = getelementptr i64, ptr %pool, i64 %ri
  store atomic i64 %rw, ptr %rp release, align 8
  %rmore = icmp ult i64 %t1, %nt
  br i1 %rmore, label %ranges, label %publish
publish:
  store atomic i32 %my, ptr %genp seq_cst, align 8
  %sl = load atomic i64, ptr %sleepp seq_cst, align 8
  %any = icmp ne i64 %sl, 0
  br i1 %any, label %wake, label %claim
wake:
  {wake}
  br label %claim
claim:
  call void @svod_rt_work(ptr %pool, i32 %my, i64 0)
  br label %wait
wait:
  br label %check
check:
  %spins = phi i64 [ 0, %wait ], [ %spins1, %again ]
  %d = load atomic i64, ptr %donep acquire, align 8
  %fin = icmp uge i64 %d, %nslices
  br i1 %fin, label %exit, label %again0
again0:
  %long = icmp ugt i64 %spins, {_SPIN_YIELD}
  br i1 %long, label %yield, label %pause
yield:
  %y = call i32 @sched_yield()
  br label %again
pause:
  {pause}
  br label %again
again:
  %spins1 = add i64 %spins, 1
  br label %check
exit:
  ret void
}}

{_counted_loop("svod_rt_repeat", "ptr %fn, ptr %args, i64 %units", "call void %fn(ptr %args, i64 0, i64 %units)")}

{_counted_loop("svod_rt_pause", "", pause)}

define i64 @svod_rt_wake(ptr %pool) {{
entry:
  %genp = getelementptr i64, ptr %pool, i64 {GEN}
  %sleepp = getelementptr i64, ptr %pool, i64 {SLEEPERS}
  %nwake = load atomic i64, ptr %sleepp seq_cst, align 8
  %any = icmp ne i64 %nwake, 0
  br i1 %any, label %wake, label %exit
wake:
  {wake}
  br label %exit
exit:
  %r = phi i64 [ 0, %entry ], [ {woken}, %wake ]
  ret i64 %r
}}

define void @svod_rt_quit(ptr %pool) {{
entry:
  %genp = getelementptr i64, ptr %pool, i64 {GEN}
  %quitp = getelementptr i64, ptr %pool, i64 {QUIT}
  %nwake = add i64 0, 2147483647
  store atomic i64 1, ptr %quitp seq_cst, align 8
  %old = atomicrmw add ptr %genp, i32 1 seq_cst
  {wake}
  ret void
}}
"""


_module = None
_module_lock = threading.Lock()


_SYMBOLS = ("svod_rt_worker", "svod_rt_dispatch", "svod_rt_quit", "svod_rt_pause", "svod_rt_repeat", "svod_rt_wake")


def _runtime_module():
    """The compiled runtime (once per process; the code survives fork)."""
    global _module
    if _module is None:
        with _module_lock:
            if _module is None:
                _module = _load_or_compile()
    return _module


def install_shared(okey: str):
    """The runtime module, loaded from the shared library of object key `okey` when this
    process has none yet (a warm record's runner, svod.warmplan: no object cache lookup,
    no lowering or schedule import); None when that library does not load."""
    global _module
    if _module is None:
        from svod.codegen import sharedlib

        mod = sharedlib.load(okey, _SYMBOLS, "svod_runtime")
        if mod is None:
            return None
        with _module_lock:
            if _module is None:
                _module = mod
    return _module


def _load_or_compile():
    """The runtime's native code: from the object cache, keyed by its IR text and the
    target like kernels and graph programs (a new process with a warm cache loads it in
    ~1 ms instead of an O3 compile), else compiled and stored there."""
    from svod.codegen.objcache import compiled_ir

    return compiled_ir("runtime", _runtime_ir(), _SYMBOLS, "svod_runtime")


class _Pool:
    def __init__(self, nworkers: int):
        mod = _runtime_module()
        self.mem = (ctypes.c_int64 * (RANGES + 8 * (nworkers + 1)))()
        self.addr = ctypes.addressof(self.mem)
        self.nworkers = nworkers
        self._worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(mod.address("svod_rt_worker"))
        self._dispatch = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                          ctypes.c_int64, ctypes.c_int64)(mod.address("svod_rt_dispatch"))
        self._quit = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(mod.address("svod_rt_quit"))
        self._wake = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)(mod.address("svod_rt_wake"))
        self.mem[SPINS] = spin_iterations()
        self.mem[MAXT] = nworkers + 1
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._worker, args=(self.addr, t), daemon=True,
                                         name=f"svod-worker-{t}") for t in range(1, nworkers + 1)]
        for t in self.threads:
            t.start()
        deadline = time.monotonic() + 10
        while self.mem[READY] < nworkers:  # every worker has read the generation
            if time.monotonic() > deadline:
                raise RuntimeError("svod runtime: worker threads did not start")
            time.sleep(0.0001)
        self.pid = os.getpid()

    def run(self, fn_addr: int, args_addr: int, units: int, threads: int) -> None:
        nt = max(1, min(threads, self.nworkers + 1, units))
        slices = min(units, nt * SLICES_PER_THREAD)
        self._dispatch(self.addr, fn_addr, args_addr, units, slices, nt - 1)

    def shutdown(self) -> None:
        self._quit(self.addr)
        for t in self.threads:
            t.join(timeout=5)


_spins: list[int] = []


def spin_iterations() -> int:
    """Pause-loop iterations that last about `SPIN_SECONDS` on this CPU (measured once per
    process). A pause costs ~10 cycles on some cores and ~65 on others (Zen 2 and later),
    so a fixed count would spin anywhere from 50 µs to half a millisecond — time during
    which an idle worker holds a core that BLAS threads or the user's code could use."""
    if not _spins:
        fn = ctypes.CFUNCTYPE(None, ctypes.c_int64)(_runtime_module().address("svod_rt_pause"))
        n, best = 2000, float("inf")
        fn(n)
        for _ in range(5):
            t0 = time.perf_counter()
            fn(n)
            best = min(best, time.perf_counter() - t0)
        _spins.append(int(min(max(SPIN_SECONDS * n / max(best, 1e-9), 100), 1_000_000)))
    return _spins[0]


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _get_pool() -> _Pool:
    global _pool
    p = _pool
    if p is None or p.pid != os.getpid():
        with _pool_lock:
            if _pool is None or _pool.pid != os.getpid():
                _pool = _Pool(max(1, pool_size() - 1))
            p = _pool
    return p


def run_parallel(fn_addr: int, args_addr: int, units: int, threads: int) -> None:
    """Run ``fn(args, ub, ue)`` over ``[0, units)`` split into ``threads`` contiguous slices."""
    if units <= 0:
        return
    if threads <= 1 or units == 1 or pool_size() <= 1:
        _ENTRY(fn_addr)(args_addr, 0, units)
        return
    pool = _get_pool()
    if not pool.lock.acquire(blocking=False):  # another Python thread is dispatching: go alone
        _ENTRY(fn_addr)(args_addr, 0, units)
        return
    try:
        pool.run(fn_addr, args_addr, units, threads)
    finally:
        pool.lock.release()


def wake() -> int:
    """Wake the pool's sleeping workers without a job: they spin `SPIN_SECONDS` on the
    generation again (then sleep). Called where a parallel kernel is likely to follow
    within microseconds (the start of a realize or a replay), so that a worker's wake-up
    -- slow after an idle gap on a virtual machine -- overlaps the Python work before
    the dispatch instead of delaying the kernel. Returns how many workers the futex
    woke (0: no pool, none asleep, or no futex here). ~0.1 µs when none sleeps; one
    syscall otherwise."""
    p = _pool
    if p is not None and p.mem[SLEEPERS] and p.pid == os.getpid():
        return int(p._wake(p.addr))
    return 0


_repeat_fn = None


def repeat(fn_addr: int, args_addr: int, units: int, n: int) -> None:
    """Call the kernel entry at `fn_addr` on all `units` `n` times in a row on this thread,
    from native code: timing a microsecond kernel without a Python call around each run."""
    global _repeat_fn
    if _repeat_fn is None:
        _repeat_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
            _runtime_module().address("svod_rt_repeat"))
    _repeat_fn(fn_addr, args_addr, units, max(int(n), 1))


def shutdown() -> None:
    """Stop and join the workers (atexit; a later parallel call starts a new pool)."""
    global _pool
    with _pool_lock:
        p, _pool = _pool, None
    if p is not None and p.pid == os.getpid():
        with p.lock:
            p.shutdown()


def _after_fork_in_child() -> None:
    global _pool, _pool_lock
    _pool = None  # the workers did not survive fork; the shared block is simply dropped
    _pool_lock = threading.Lock()


def dispatch_cost(threads: int = 2, repeats: int = 2000) -> float:
    """Median seconds of one `run_parallel` of an empty job (for benchmarks and docs)."""
    from svod.codegen.jit import compile_ir

    mod = compile_ir("define void @noop(ptr %a, i64 %b, i64 %e) { ret void }", name="noop")
    addr = mod.address("noop")
    run_parallel(addr, 0, threads, threads)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run_parallel(addr, 0, threads, threads)
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(shutdown)

__all__ = ["dispatch_cost", "install_shared", "pool_size", "repeat", "run_parallel", "shutdown", "wake"]
