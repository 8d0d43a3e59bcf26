"""The thread pool: determinism across thread counts, fork safety, concurrent callers."""

from __future__ import annotations

import os

import numpy as np
import pytest

import svod
from svod import runtime
from svod.codegen.jit import compile_ir
from svod.codegen.program import compile_kernel
from svod.key import compact
from svod.plan_greedy import plan_greedy
from tests.threads import run_threads

_COUNT_IR = """
define void @count(ptr %a, i64 %b, i64 %e) {
entry:
  br label %c
c:
  %i = phi i64 [ %b, %entry ], [ %i1, %body ]
  %d = icmp slt i64 %i, %e
  br i1 %d, label %body, label %x
body:
  %p = getelementptr i64, ptr %a, i64 %i
  %v = load i64, ptr %p
  %v1 = add i64 %v, 1
  store i64 %v1, ptr %p
  %i1 = add i64 %i, 1
  br label %c
x:
  ret void
}
"""


@pytest.fixture(scope="module")
def count_fn():
    mod = compile_ir(_COUNT_IR, name="count")
    yield mod, mod.address("count")


def test_every_unit_runs_exactly_once(count_fn):
    _, addr = count_fn
    for units in (1, 2, 3, 7, 1001):
        a = np.zeros(units, np.int64)
        for _ in range(200):
            runtime.run_parallel(addr, a.ctypes.data, units, 2)
        assert (a == 200).all(), units


def test_a_job_asking_for_more_threads_than_the_pool_has_still_runs_every_unit(count_fn):
    """Each thread owns a range of slices; a job wanting more threads than the pool's
    block has ranges for (a graph program built for another thread count) is clamped to
    the pool's, and every unit still runs exactly once."""
    _, addr = count_fn
    pool = runtime._get_pool()
    a = np.zeros(100, np.int64)
    for _ in range(100):
        pool._dispatch(pool.addr, addr, a.ctypes.data, 100, 40, pool.nworkers + 8)
    assert (a == 100).all()


def test_repeat_runs_every_unit_n_times_on_this_thread(count_fn):
    _, addr = count_fn
    a = np.zeros(37, np.int64)
    runtime.repeat(addr, a.ctypes.data, 37, 123)
    assert (a == 123).all()
    runtime.repeat(addr, a.ctypes.data, 37, 0)  # at least once
    assert (a == 124).all()


def test_native_program_repeat_computes_what_run_does():
    plan, arrays = _softmax_program(64, 100)
    for k in plan.kernels:
        prog = compile_kernel(k)
        bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
        for o in k.outputs:
            bufs[o.slot] = np.zeros(int(np.prod(o.shape)), o.dtype.np)
        ref = {s: b.copy() for s, b in bufs.items()}
        prog.run(ref, 1)
        prog.repeat(bufs, 5)
        for o in k.outputs:
            np.testing.assert_array_equal(bufs[o.slot], ref[o.slot])


def _softmax_program(rows=256, cols=777):
    x = svod.asarray(np.random.default_rng(0).standard_normal((rows, cols)).astype(np.float32))
    key, b = compact([svod.nn.softmax(x, axis=-1).uop, svod.sum(x * x, axis=1).uop])
    plan = plan_greedy(key)
    return plan, b.arrays


def _run(plan, arrays, threads):
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for k in plan.kernels:
        compile_kernel(k).run(bufs, threads)
    return [bufs[s].copy() for s, _ in plan.outputs]


def test_two_threads_bit_identical_to_one():
    plan, arrays = _softmax_program()
    one = _run(plan, arrays, 1)
    for _ in range(5):
        two = _run(plan, arrays, 2)
        assert all(np.array_equal(p, q) for p, q in zip(one, two))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_uses_its_own_pool(count_fn):
    _, addr = count_fn
    a = np.zeros(64, np.int64)
    runtime.run_parallel(addr, a.ctypes.data, 64, 2)  # the parent's pool is running
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: the parent's workers do not exist here
        ok = 0
        try:
            b = np.zeros(64, np.int64)
            for _ in range(50):
                runtime.run_parallel(addr, b.ctypes.data, 64, 2)
            plan, arrays = _softmax_program(32, 100)
            _run(plan, arrays, 2)
            ok = int((b == 50).all())
        finally:
            os.write(w, bytes([ok]))
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"\x01"
    runtime.run_parallel(addr, a.ctypes.data, 64, 2)  # the parent's pool still works
    assert (a == 2).all()


def test_concurrent_python_threads():
    plan, arrays = _softmax_program(64, 300)
    want = _run(plan, arrays, 1)
    errors = []

    def worker():
        try:
            for _ in range(20):
                got = _run(plan, arrays, 2)
                if not all(np.array_equal(p, q) for p, q in zip(want, got)):
                    errors.append("mismatch")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    run_threads(worker, [()] * 4)
    assert not errors


def test_shutdown_and_restart(count_fn):
    _, addr = count_fn
    a = np.zeros(10, np.int64)
    runtime.run_parallel(addr, a.ctypes.data, 10, 2)
    runtime.shutdown()
    runtime.run_parallel(addr, a.ctypes.data, 10, 2)
    assert (a == 2).all()


def test_dispatch_is_cheap():
    # NOTE: a loose bound (the benchmark reports the real number); catches a pool that
    # falls back to sleeping/thread creation on every call.
    assert runtime.dispatch_cost(2, 500) < 200e-6


def test_openblas_spin_is_shortened_only_before_numpy_loads():
    """`import svod` before numpy sets OPENBLAS_THREAD_TIMEOUT=20 (OpenBLAS's workers stop
    spinning after ~0.4 ms instead of ~0.1 s, so they stop taking a core from svod's
    kernels); a value the user set wins, and after numpy's import svod changes nothing."""
    import subprocess
    import sys

    code = "import os{pre}; import svod; print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}

    def run(pre="", **extra):
        out = subprocess.run([sys.executable, "-c", code.format(pre=pre)], capture_output=True, text=True,
                             env={**env, **extra}, check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
        return out.stdout.strip()

    assert run() == "20"
    assert run(OPENBLAS_THREAD_TIMEOUT="26") == "26"
    assert run(pre="; import numpy") == "None"


def test_the_runtime_code_comes_from_the_object_cache_in_a_new_process(tmp_path, monkeypatch):
    """A process with a warm cache loads the pool's native code instead of compiling it."""
    import svod.codegen.jit as jit
    from svod.store import reset_default_store

    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    reset_default_store()
    try:
        first = runtime._load_or_compile()  # compiled and stored
        assert any(k.startswith("runtime:") for k in __import__("svod.store").store.default_store().keys("objects"))

        def no_compile(*a, **k):
            raise AssertionError("the runtime was compiled again")

        monkeypatch.setattr(jit, "compile_ir", no_compile)
        again = runtime._load_or_compile()
        assert again.object_code == first.object_code
        for name in runtime._SYMBOLS:
            assert again.address(name)
    finally:
        reset_default_store()


@pytest.mark.skipif(not runtime._use_futex() or runtime.pool_size() < 2,
                    reason="futex sleepers: Linux x86-64, 2+ threads")
def test_wake_rouses_sleeping_workers_without_a_job(count_fn):
    """`runtime.wake()` (called before a kernel is likely to follow) wakes the workers that
    sleep on the futex (the kernel's count of woken waiters); they run no job and sleep
    again; jobs right after a wake run every unit once."""
    import time

    _, addr = count_fn
    runtime.run_parallel(addr, np.zeros(4, np.int64).ctypes.data, 4, 2)  # the pool exists
    pool = runtime._get_pool()
    gen = pool.mem[runtime.GEN]
    woke = 0
    for _ in range(50):  # idle workers sleep after SPIN_SECONDS (a loaded machine: later)
        time.sleep(0.01)
        if pool.mem[runtime.SLEEPERS] == pool.nworkers:
            woke = runtime.wake()
            break
    assert woke == pool.nworkers  # every sleeper was on the futex and was woken
    assert pool.mem[runtime.GEN] == gen  # no job was published
    a = np.zeros(1001, np.int64)
    for _ in range(50):
        runtime.wake()
        runtime.run_parallel(addr, a.ctypes.data, 1001, 2)
    assert (a == 50).all()


def test_wake_without_a_pool_is_a_no_op():
    runtime.shutdown()
    assert runtime.wake() == 0  # no pool: nothing to wake, nothing started
    assert runtime._pool is None


@pytest.mark.skipif(runtime.pool_size() < 2, reason="needs 2 threads")
def test_wake_latency_probe_times_each_mode():
    """`svod.bench.peak.wake_latency`: every mode times a job of two units that each spin
    `work_us`, so no median is below one unit's time (nor absurdly above on any machine
    that runs the suite: the caller steals a late worker's unit)."""
    from svod.bench.peak import wake_latency

    res = wake_latency(300.0, gap_s=0.001, pre_us=(0.0, 50.0), repeats=3)
    assert set(res) == {"busy gap", "sleep gap", "sleep, wake, 0 us", "sleep, wake, 50 us"}
    for k, v in res.items():
        assert 0.5 * 300e-6 < v < 1.0, (k, v)
