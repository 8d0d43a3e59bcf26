"""Memory and threads: programs are owned by the plans and traces that run them and
freed with the last one; the plan cache counts measured sizes; the pool gives memory
back when a block returns; every shared cache survives threads replaying and planning
at once. The soak tests (slow) check that RSS levels off under the bounds."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

import svod
from svod import caches, engine
from svod.codegen import program as program_mod

ROOT = Path(__file__).resolve().parents[1]


def _threads(target, n: int) -> list[BaseException]:
    """Run target(i) on n threads at once; the exceptions they raised."""
    errors: list[BaseException] = []

    def run(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported by the caller
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return errors


@pytest.fixture
def greedy(monkeypatch):
    """Quick plans (the greedy planner): these tests are about what happens to plans."""
    monkeypatch.setenv("SVOD_SEARCH", "0")


def _plan(i: int, n: int = 8):
    """A one-kernel structure per `i` (the constant is part of the key)."""
    a = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
    t = (svod.asarray(a) * float(i + 2) + 1.0).sum(axis=1)
    key, exe = engine.plan_for([t])
    exe.run([a])  # programs, graph program and scratch exist now
    return key, exe, a


def _modules(exe) -> list:
    return [p.module for p in exe.programs() if isinstance(p, program_mod.NativeProgram)]


# ----------------------------------------------------------------------------- ownership


def test_an_evicted_plan_frees_its_programs_at_once(greedy):
    """No reference cycle and no registry keeps a compiled kernel: dropping the plan cache's
    entry frees the engines (checked with the garbage collector off)."""
    key, exe, _ = _plan(0)
    refs = [weakref.ref(m) for m in _modules(exe)] + [weakref.ref(exe._gp._module)]
    assert len(refs) >= 2 and all(r() is not None for r in refs)
    count, nbytes = program_mod.live_programs()
    assert count >= 1 and nbytes > 0
    gc.disable()
    try:
        del exe
        engine.reset_caches()
        assert all(r() is None for r in refs)
    finally:
        gc.enable()


def test_lru_eviction_releases_programs_and_replay_keeps_no_plan(greedy, monkeypatch):
    cache = caches.PLAN_CACHE  # NOTE: its bounds change, not the object: svod.planner holds it too
    monkeypatch.setattr(cache, "max_entries", 2)
    x = svod.asarray(np.arange(12, dtype=np.float32))
    refs = []
    for i in range(6):
        t = svod.exp(x) * float(i + 2)
        t.realize()
        (svod.exp(x) * float(i + 2)).realize()  # replayed by signature: now in REPLAY too
        exe = cache.use(next(reversed(cache._d)))
        refs += [weakref.ref(m) for m in _modules(exe)]
        del exe, t
    assert len(caches.REPLAY) >= 6  # the replay table still names all six structures...
    alive = [r for r in refs if r() is not None]
    assert len(alive) <= 2  # ...but only the two cached plans' kernels are alive


def test_a_program_shared_by_two_plans_lives_while_either_does(greedy):
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    x = svod.asarray(a)
    k1, p1 = engine.plan_for([svod.exp(x) * 3.0])
    p1.run([a])
    k2, p2 = engine.plan_for([(svod.exp(x) * 3.0, svod.sin(x))[0] + 0.0])
    p2.run([a])
    shared = {id(p.module) for p in p1.programs() if hasattr(p, "module")} & \
        {id(p.module) for p in p2.programs() if hasattr(p, "module")}
    # one kernel key, one engine: the registry found the live program for the second plan
    if shared:
        own1, progs1 = p1.footprint()
        own2, progs2 = p2.footprint()
        both = caches.PlanCache._total([p1, p2])
        assert both == own1 + own2 + sum({**progs1, **progs2}.values()) < p1.nbytes() + p2.nbytes()


def test_program_sizes_are_measured_not_guessed(greedy):
    """The plan cache's byte bound reads measured sizes: 20 fresh programs' `nbytes`
    agree with the heap they took (mallinfo2) within a factor of two."""
    from svod.codegen.jit import _heap_in_use

    if _heap_in_use() is None:
        pytest.skip("needs glibc's mallinfo2")
    svod.reset_stats()
    gc.collect()
    h0 = _heap_in_use()
    keep = [_plan(100 + i, 3 + i)[1] for i in range(20)]
    gc.collect()
    grown = _heap_in_use() - h0
    counted = caches.PlanCache._total(keep)
    assert svod.stats()["kernels_compiled"] + svod.stats()["kernels_loaded"] >= 20
    assert 0.5 * grown <= counted <= 2.0 * grown, (counted, grown)


def test_dropping_a_jit_function_frees_its_traces_programs(greedy):
    @svod.jit
    def f(x):
        return svod.tanh(x) * 2.0 + 1.0

    refs = []
    for n in (3, 5, 7):
        x = svod.asarray(np.ones(n, np.float32))
        for _ in range(3):  # trace, replay, fast replay
            f(x)
        exe = engine.plan_for([svod.tanh(x) * 2.0 + 1.0])[1]
        refs += [weakref.ref(m) for m in _modules(exe)]
        del exe
    engine.reset_caches()  # only the traces hold the plans now
    assert all(r() is not None for r in refs)
    del f
    gc.collect()
    assert all(r() is None for r in refs)


def test_a_trace_evicted_by_the_jit_lru_frees_its_programs(greedy):
    """`svod.jit` keeps `max_traces` traces a function; a trace it drops (with its replay
    closures) holds nothing any more: once the plan cache lets go too, its kernels are
    freed, without a garbage collection."""
    f = svod.jit(lambda x: svod.sin(x) * 3.0 - 1.0, max_traces=2)
    refs = {}
    for n in (3, 5, 9, 17):  # sizes in different row buckets (svod.shapes): one plan each
        x = svod.asarray(np.ones(n, np.float32))
        for _ in range(3):  # trace, replay, inlined replay
            f(x)
        exe = engine.plan_for([svod.sin(x) * 3.0 - 1.0])[1]
        refs[n] = [weakref.ref(m) for m in _modules(exe)]
        del exe
    assert f.cached_traces == 2
    gc.disable()
    try:
        engine.reset_caches()
        assert all(r() is None for n in (3, 5) for r in refs[n])  # evicted traces: freed
        assert all(r() is not None for n in (9, 17) for r in refs[n])  # held traces: alive
    finally:
        gc.enable()


def test_cache_info_reports_every_cache(greedy):
    @svod.jit
    def f(x):
        return x * 2.0

    x = svod.asarray(np.ones(4, np.float32))
    f(x)
    big = (svod.asarray(np.ones(40_000, np.float32)) + 1.0).numpy()
    info = svod.cache_info()
    pc = info["plan_cache"]
    assert pc["entries"] == len(caches.PLAN_CACHE) >= 2 and pc["bytes"] == caches.PLAN_CACHE.nbytes() > 0
    assert info["programs"]["count"] >= 2 and info["programs"]["bytes"] > 0
    assert info["jit"]["functions"] >= 1 and info["jit"]["traces"] >= 1
    assert info["pool"]["bytes_in_use"] >= big.nbytes and info["disk"]["max_bytes"] > 0
    text = svod.memory.cache_info_text()
    assert f"{pc['entries']} plans" in text and "SVOD_DISK_CACHE_MB" in text


def test_reset_empties_every_cache_and_svod_works_after_it(monkeypatch):
    """Fill every cache svod.memory.CACHES lists (realize, replay, a dynamic structure, a
    searched plan, jit, a profile, BLAS, dropped pool blocks), then `svod.reset()`: each
    reports empty, and realize and jit give the right values again."""
    monkeypatch.setenv("SVOD_PROFILE", "0")
    from costmodels import calibrate

    calibrate._OVERLAP_KERNELS.setdefault("test", object())  # (filled by `svod calibrate` only)

    @svod.jit
    def f(x):
        return x * 2.0

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = svod.asarray(a)
    for _ in range(2):
        np.testing.assert_array_equal(f(x).numpy(), a * 2)
        np.testing.assert_array_equal((x + 1.0).numpy(), a + 1)  # the second: a replay by signature
    for n in (5, 6):  # a second row count makes the structure dynamic
        svod.asarray(np.ones((n, 4), np.float32)).sum(axis=1).numpy()
    m = svod.asarray(np.ones((64, 64), np.float32))
    (m @ m).numpy()  # a BLAS library step
    svod.profile(svod.exp(x))
    assert x[:, None].shape == (3, 1, 4)  # a basic index: its steps memoised (svod.indexing)
    (svod.asarray(np.ones(1 << 16, np.float32)) * 3.0).numpy()  # a dropped result: its block back in the pool
    e = svod.asarray(np.ones((8, 8), np.float32))
    svod.einsum("ij,jk->ik", e, e).numpy()  # einsum's parse, path and recipe memos
    big, v = svod.asarray(np.ones((2048, 1024), np.float32)), svod.asarray(np.ones(2048, np.float32))
    np.testing.assert_array_equal((big.T @ v).numpy(), np.full(1024, 2048, np.float32))  # row-split gemv: scratch
    sizes = svod.memory.cache_sizes()
    assert set(sizes) == {name for name, *_ in svod.memory.CACHES}
    filled = {k for k, v in sizes.items() if v}
    assert filled >= {"plan cache", "replay table", "recent graphs", "dynamic shapes", "cost model and search reports",
                      "jit traces", "compiled programs", "signatures", "constants", "index steps", "kernel features",
                      "view chains", "einsum recipes, parses and paths", "matrix-vector partials scratch",
                      "kernel schedules",
                      "machine profiles", "calibration kernels", "default store", "counters"}, sizes
    svod.reset()
    assert svod.memory.cache_sizes() == dict.fromkeys(sizes, 0)
    assert svod.cache_info()["plan_cache"]["entries"] == 0 and svod.cache_info()["jit"]["traces"] == 0
    np.testing.assert_array_equal(f(x).numpy(), a * 2)
    np.testing.assert_array_equal((x + 1.0).numpy(), a + 1)
    assert svod.stats()["jit_traces"] == 1 and svod.stats()["graph_cache_misses"] >= 1


# ----------------------------------------------------------------------------- pool


def test_pool_applies_its_cap_when_a_block_comes_back():
    from svod.pool import BufferPool

    pool = BufferPool(max_bytes=0)
    a = pool.array((1 << 20,), np.float32)  # 4 MiB: an mmap'd block
    block = weakref.ref(next(iter(pool._lent.values())))
    view = a[10:20]
    del a
    assert pool.stats()["blocks_in_use"] == 1  # a view keeps the block
    del view
    assert block() is None  # released (unmapped) when the last view died, not at the next allocation
    st = pool.stats()
    assert st["blocks_in_use"] == 0 and st["bytes_free"] == 0
    kept = BufferPool(max_bytes=8 << 20)
    b = kept.array((1 << 20,), np.float32)
    del b
    assert kept.stats()["bytes_free"] == 4 << 20  # under the cap: kept for reuse
    c = kept.array((1 << 20,), np.float32)
    assert kept.stats()["hits"] == 1
    del c


_POOL_RSS = """
import json, numpy as np, svod
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
src = svod.full((64 << 20,), 1.5, dtype="float32")  # 256 MiB results, computed lazily
for _ in range(2):  # the first round plans, compiles and starts the threads; the second is measured
    r0 = rss()
    t = src * 2
    a = t.numpy()
    r1 = rss()
    del a, t
    r2 = rss()
print(json.dumps([r0, r1, r2]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_dropped_result_returns_its_memory_under_pool_cap_0():
    env = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_POOL_BYTES="0", SVOD_SEARCH="0")
    res = subprocess.run([sys.executable, "-c", _POOL_RSS], capture_output=True, text=True, env=env,
                         timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-2000:]
    r0, r1, r2 = json.loads(res.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    assert r1 - r0 > 200 * mib  # the result was resident
    assert r2 - r0 < 16 * mib, (r0 / mib, r1 / mib, r2 / mib)  # and is given back at `del`


# ----------------------------------------------------------------------------- threads


def test_threads_replay_and_insert_plans_under_a_tiny_switch_interval(greedy, monkeypatch):
    """Threads replay known structures (the lock-free `PlanCache.use` path) while others
    plan new ones into a small LRU (evictions all the time), with big outputs from the
    pool, a jitted function, counters and cache reports read at once: no error, every
    result right."""
    cache = caches.PLAN_CACHE  # NOTE: its bounds change, not the object: svod.planner holds it too
    monkeypatch.setattr(cache, "max_entries", 8)

    @svod.jit
    def g(x):
        return svod.exp(x) - 1.0

    rounds = 200
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)

    def work(tid: int) -> None:
        rng = np.random.default_rng(tid)
        a = np.full((6, 4), float(tid + 1), np.float32)
        x = svod.asarray(a)
        big = np.ones(40_000, np.float32)  # 160 KB outputs: pool blocks
        for r in range(rounds):
            # even threads replay two hot structures; odd ones cycle through 16 cold ones
            k = int(rng.integers(0, 2)) if tid % 2 == 0 else 2 + int(rng.integers(0, 16))
            got = (x * float(k) + 1.0).sum(axis=1).numpy()
            np.testing.assert_allclose(got, (a * np.float32(k) + 1).sum(axis=1), rtol=1e-6)
            if r % 5 == tid % 5:
                out = (svod.asarray(big) * float(k % 3)).numpy()
                assert out[0] == k % 3 and out.shape == big.shape
            if r % 7 == 0:
                np.testing.assert_allclose(g(x).numpy(), np.expm1(a), rtol=1e-5, atol=1e-6)
            if r % 11 == 0:
                svod.stats()
                cache.nbytes()
                program_mod.live_programs()

    try:
        errors = _threads(work, 4)
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[0]
    assert len(cache) <= 8
    assert svod.stats()["plan_cache_evictions"] > 0


# ----------------------------------------------------------------------------- soak (slow)


@pytest.fixture(scope="module")
def soak_cache(tmp_path_factory):
    """One persistent cache for both soaks: the second loads the first's plans."""
    return tmp_path_factory.mktemp("soak-cache")


def _soak(cache, env: dict, *args: str) -> dict:
    # SVOD_DYNAMIC=0: the soak's 1,000 row counts must stay 1,000 distinct plans (with automatic
    # dynamic shapes they would share a few dozen bucket plans and never fill the plan cache)
    full = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_CACHE_DIR=str(cache), SVOD_SEARCH="0",
                SVOD_VALIDATE="0", SVOD_DYNAMIC="0", **env)
    res = subprocess.run([sys.executable, "-m", "tests.soak", *args], capture_output=True, text=True, env=full,
                         cwd=ROOT, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


MIB = 1 << 20


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_soak_rss_levels_off_under_the_bounds(soak_cache):
    """20,000 realizes over 1,000 shapes, then 300 jit signatures (the greedy planner, to
    keep the run short: the search's own memory is measured in docs/memory.md). Before
    the bounds were honest this grew ~1.6 MB a shape (1.6 GB here)."""
    bounds = {"SVOD_PLAN_CACHE_ENTRIES": "256", "SVOD_PLAN_CACHE_MB": "32", "SVOD_POOL_BYTES": str(32 * MIB),
              "SVOD_JIT_MAX_TRACES": "32"}
    d = _soak(soak_cache, bounds)
    rss = dict(d["samples"])
    assert d["stats"]["plan_cache_evictions"] > 1000 and d["stats"]["disk_cache_hits"] > 500
    assert rss[20000] - rss[2000] < 8 * MIB, d["samples"]  # level after the first pass over the shapes
    assert rss[20000] - d["warm"] < (32 + 32 + 40) * MIB, d  # plan cache + pool + fixed slack
    assert d["plan_cache"]["bytes"] <= 32 * MIB and d["plan_cache"]["entries"] <= 256
    jit_growth = d["jit_samples"][-1][1] - rss[20000]
    if d["max_traces"] is not None:  # svod.jit bounds its traces per function (LRU)
        assert d["traces"] <= 32
        assert jit_growth < 16 * MIB, d["jit_samples"]
    else:
        assert jit_growth < 60 * MIB, d["jit_samples"]  # 300 traces of ~150 KB each at most


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_soak_with_tiny_bounds_stays_tiny(soak_cache):
    """Every realize misses an 8-entry plan cache (plans and kernels come back from disk),
    the pool keeps nothing: after the first pass RSS does not move."""
    # SVOD_SHARED_LIBS=0: with the shared libraries a warm process has not imported LLVM at
    # the "warm" sample, and imports it (~55 MB of RSS, once) when a module goes past
    # sharedlib.MAX_LOADED: that one-off import is not growth; the soak above runs with them
    tiny = {"SVOD_PLAN_CACHE_ENTRIES": "8", "SVOD_PLAN_CACHE_MB": "1", "SVOD_POOL_BYTES": "0",
            "SVOD_RETAIN_GRAPHS": "0", "SVOD_JIT_MAX_TRACES": "4", "SVOD_SHARED_LIBS": "0"}
    d = _soak(soak_cache, tiny, "--realizes", "2000", "--every", "500")
    rss = dict(d["samples"])
    assert d["stats"]["disk_cache_hits"] > 800
    assert rss[2000] - rss[1000] < 4 * MIB, d["samples"]
    assert rss[2000] - d["warm"] < 24 * MIB, d
    assert d["programs"]["count"] <= 8 + d["traces"]  # only what a cached plan or a trace holds
    if d["max_traces"] is not None:
        assert d["traces"] <= 4 and d["jit_samples"][-1][1] - rss[2000] < 8 * MIB, d["jit_samples"]
