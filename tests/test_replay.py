"""Replay: the plan cache across processes, concurrency, and svod.jit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import svod
from tests.threads import run_threads

ROOT = Path(__file__).resolve().parents[1]

_SCRIPT = """
import json, numpy as np, svod
x = svod.asarray(np.arange(64, dtype=np.float32).reshape(8, 8))
y = svod.nn.layer_norm(x, (8,)) * 2.0 + svod.nn.softmax(x)
out = y.numpy()
print(json.dumps({"stats": svod.stats(), "sum": float(out.sum())}))
"""


def _run(cache: Path, root: Path = ROOT) -> dict:
    env = dict(os.environ, SVOD_CACHE_DIR=str(cache), PYTHONPATH=str(root))
    res = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, env=env, cwd=root,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_second_process_skips_planning(tmp_path):
    first = _run(tmp_path)
    second = _run(tmp_path)
    assert first["stats"]["searches"] > 0
    assert second["stats"]["searches"] == 0 and second["stats"]["disk_cache_hits"] > 0
    assert second["stats"]["kernels_compiled"] == 0
    assert first["sum"] == pytest.approx(second["sum"], rel=1e-6)


def test_new_code_fingerprint_plans_again(tmp_path):
    src = tmp_path / "copy"
    for pkg in ("svod", "search", "costmodels"):
        if (ROOT / pkg).exists():
            shutil.copytree(ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    cache = tmp_path / "cache"
    _run(cache, src)
    assert _run(cache, src)["stats"]["searches"] == 0
    with open(src / "svod" / "ir.py", "a") as f:
        f.write("\n# a new commit\n")
    assert _run(cache, src)["stats"]["searches"] > 0


def test_processes_and_threads_at_once_lose_nothing(tmp_path):
    env = dict(os.environ, SVOD_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    procs = [subprocess.Popen([sys.executable, "-c", _SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=ROOT) for _ in range(2)]
    errors = []
    results = []

    def work(i):
        try:
            x = svod.asarray(np.full((16, 16), i, np.float32))
            for _ in range(5):
                results.append(float((svod.exp(x * 0.01) + i).sum().item()))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    run_threads(work, [(i,) for i in range(4)])
    outs = [p.communicate(timeout=300) for p in procs]
    assert not errors
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    sums = {json.loads(o[0].strip().splitlines()[-1])["sum"] for o in outs}
    assert len(sums) == 1
    assert len(results) == 20
    for i in range(4):
        want = float((np.exp(np.full((16, 16), i * 0.01, np.float32)) + i).sum())
        assert sum(abs(r - want) < 1e-3 * abs(want) for r in results) == 5


def test_jit_replays_without_planning():
    @svod.jit
    def f(x, y, s):
        return svod.nn.softmax(x * s) + y

    x, y = svod.random.randn(4, 8), svod.random.randn(8)
    a = f(x, y, 2.0)
    svod.reset_stats()
    b = f(svod.random.randn(4, 8), y, 3.0)  # new data, new scalar value: same trace
    assert f.traces == 1 and svod.stats()["searches"] == 0
    x2 = svod.random.randn(4, 8)
    np.testing.assert_allclose(f(x2, y, 0.5).numpy(), (svod.nn.softmax(x2 * 0.5) + y).numpy(), rtol=1e-6)
    assert a.shape == b.shape == (4, 8)
    f(svod.random.randn(2, 8), y, 1.0)  # new shape: a new entry
    assert f.traces == 2


def test_jit_strict_raises_on_new_signature():
    f = svod.jit(lambda x: x * 2, strict=True)
    f(svod.ones(3))
    f(svod.zeros(3))
    with pytest.raises(svod.JitError, match="new signature"):
        f(svod.ones(4))


def test_jit_outputs_do_not_alias_and_constants_are_captured():
    c = svod.asarray([1.0, 2.0, 3.0])

    @svod.jit
    def f(x):
        return x + c, x * 1.0, x

    x = svod.asarray([0.0, 0.0, 0.0])
    p, q, same = f(x)
    assert same is not x and same.tolist() == x.tolist()  # an argument returned unchanged is copied
    assert not np.shares_memory(same.numpy(), x.numpy())
    assert not np.shares_memory(p.numpy(), q.numpy())
    assert not np.shares_memory(q.numpy(), x.numpy())
    p2, _, _ = f(svod.asarray([1.0, 1.0, 1.0]))
    assert p2.tolist() == [2.0, 3.0, 4.0] and p.tolist() == [1.0, 2.0, 3.0]


def test_jit_rejects_non_tensor_outputs():
    with pytest.raises(svod.JitError, match="must return"):
        svod.jit(lambda x: 3)(svod.ones(2))


def test_plan_cache_is_bounded_by_entries_and_bytes():
    from svod import caches, engine

    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    keys = []
    for i in range(6):  # six structures: each a different constant
        t = svod.exp(svod.asarray(a) * float(i + 2))
        key, exe = engine.plan_for([t])
        keys.append((key, exe))
        exe.run([a])  # programs and scratch exist now: nbytes grows
        # measured: an engine holding loaded object code is tens of KB
        assert exe.nbytes() >= sum(p.nbytes for p in exe.programs()) >= 16 << 10
    one = keys[0][1].nbytes()
    cache = caches.PlanCache(max_entries=4, max_bytes=1 << 40)
    for key, exe in keys:
        cache.put(key, exe)
    assert len(cache) == 4 and cache.get(keys[0][0]) is None and cache.get(keys[-1][0]) is keys[-1][1]
    cache = caches.PlanCache(max_entries=100, max_bytes=int(2.5 * one))
    before = svod.stats()["plan_cache_evictions"]
    for key, exe in keys:
        cache.put(key, exe)
    assert len(cache) == 2 and cache.nbytes() <= 2.5 * one
    assert svod.stats()["plan_cache_evictions"] - before == 4
    assert cache.get(keys[-1][0]) is keys[-1][1] and cache.get(keys[-2][0]) is keys[-2][1]


def test_jit_fast_replay_counts_checks_and_threads():
    """The inlined replay (`capture._quick_for`): right values on every call, outputs
    fresh each call, counters kept, another layout (F order) not mistaken for the traced
    one, and threads replaying at once all get their own results."""

    @svod.jit
    def f(x, y):
        return svod.tanh(x * 1.5) + y, x - y

    rng = np.random.default_rng(0)

    def ref(a, b):
        return np.tanh(a * np.float32(1.5)) + b, a - b

    prev = None
    for _ in range(5):
        a, b = rng.standard_normal((2, 16, 8)).astype(np.float32)
        before = svod.stats()["kernels_launched"]
        p, q = f(svod.asarray(a), svod.asarray(b))
        assert svod.stats()["kernels_launched"] > before
        np.testing.assert_allclose(p.numpy(), ref(a, b)[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(q.numpy(), ref(a, b)[1], rtol=1e-6)
        if prev is not None:
            assert not np.shares_memory(prev.numpy(), p.numpy())
        prev = p
    from svod import capture

    if next(iter(f._entries.values())).exe.graph_program().kind == "native":  # not under SVOD_CODEGEN=0
        assert [q for q in f._quick.values() if q is not capture._NO_QUICK], "the fast replay was never set up"
    a, b = rng.standard_normal((2, 16, 8)).astype(np.float32)
    af = np.asfortranarray(a)
    p, q = f(svod.asarray(af), svod.asarray(b))
    np.testing.assert_allclose(p.numpy(), ref(a, b)[0], rtol=1e-5, atol=1e-6)

    errors = []

    def worker(seed):
        r = np.random.default_rng(seed)
        for _ in range(100):
            a, b = r.standard_normal((2, 16, 8)).astype(np.float32)
            p, q = f(svod.asarray(a), svod.asarray(b))
            if not (np.allclose(p.numpy(), ref(a, b)[0], rtol=1e-5, atol=1e-6) and np.array_equal(q.numpy(), a - b)):
                errors.append(seed)

    run_threads(worker, [(s,) for s in range(4)])
    assert not errors


def test_jit_fast_replay_leaves_match_buffer():
    """The inlined output leaves (`UOp.buffer_source`) are the nodes `UOp.buffer` makes."""
    f = svod.jit(lambda x: svod.exp(x) * 2.0)
    x = svod.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    for _ in range(4):  # trace, replay (sets the fast path up), then fast calls
        y = f(x)
    ref = svod.ir.UOp.buffer(y.uop.arg.array, y.uop.dtype)
    for name in ("op", "dtype", "src", "shape", "_hash", "_kb", "_sig"):
        assert getattr(y.uop, name) == getattr(ref, name), name
    assert y.uop._leaves == (y.uop.arg,) and y.uop.arg.array is y.uop.arg.array
    assert y.uop.arg.serial != ref.arg.serial
    np.testing.assert_allclose((y + 1).numpy(), np.exp(np.arange(6, dtype=np.float32)).reshape(2, 3) * 2 + 1,
                               rtol=1e-6)


def test_replayed_plan_stays_recent_in_the_lru(monkeypatch):
    """A structure replayed by signature (no `PlanCache.get`) still counts as used: new
    structures evict the others first."""
    from svod import caches

    cache = caches.PLAN_CACHE  # NOTE: its bounds change, not the object: svod.planner holds it too
    monkeypatch.setattr(cache, "max_entries", 3)
    monkeypatch.setattr(cache, "max_bytes", 1 << 40)
    caches.REPLAY.clear()
    a = svod.asarray(np.arange(16, dtype=np.float32))
    hot = lambda: (svod.exp(a) * 3.0).realize()  # noqa: E731
    hot()
    hot()  # now in the replay cache
    svod.reset_stats()
    for i in range(6):
        (svod.sin(a) + float(i)).realize()  # new structures fill the LRU
        hot()
    assert svod.stats()["graph_cache_misses"] == 6  # the new structures only: `hot` never aged out
    caches.REPLAY.clear()
