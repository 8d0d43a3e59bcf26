"""First-call latency (issue 28, point 5) and why plans are made again (point 6).

Structure, not timing (the timings: bench/bench_first_call.py): a graph in which the
search has nothing to choose is planned without importing egglog, with the plan the
search would pick; the search is imported in the background after that first realize
(and a fork waits for it); a warm process loads its plan with the stored thread counts,
without building a cost model; every plan made again is recorded with its reason and
printed under SVOD_LOGS=recompiles.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import svod
from svod import firstcall
from svod.caches import PLAN_CACHE
from svod.executable import KernelPlan, stored_threads
from svod.key import compact
from svod.recompiles import RECOMPILES, structure

ROOT = pathlib.Path(__file__).resolve().parents[1]
_RNG = np.random.default_rng(7)


def _key(t):
    return compact([t.uop])[0]


def _x(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _child(code: str, cache: str, **env) -> dict:
    """Run `code` in a fresh interpreter (svod from this tree, its own cache); its last
    stdout line is JSON."""
    e = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_CACHE_DIR=cache, **env)
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- the no-choice rule


def test_no_choice_accepts_elementwise_trees_over_leaves_and_their_views():
    x, v = svod.asarray(_x(16, 8)), svod.asarray(_x(8))
    assert firstcall.no_choice(_key(svod.exp(x) * 2 + 1)) is not None
    assert firstcall.no_choice(_key(x * x + svod.sin(x))) is not None  # a leaf read twice is no choice
    assert firstcall.no_choice(_key(svod.tanh(x * v[None, :] + x.T.T))) is not None  # broadcast/view of leaves
    assert firstcall.no_choice(_key(svod.where(x > 0, x, x * 0.5))) is not None


def test_no_choice_refuses_graphs_with_a_real_choice():
    x, v = svod.asarray(_x(16, 8)), svod.asarray(_x(8))
    e = svod.exp(x)
    refused = {
        "a computed value used twice": e * e + 1,
        "a reduction": svod.sum(svod.exp(x), axis=1),
        "a computed value broadcast": svod.exp(v)[None, :] + x,
        "a view of a computed value": svod.exp(x).T + 1,
        "a matmul": svod.exp(x) @ svod.asarray(_x(8, 4)),
        "a complex dtype": svod.exp(svod.asarray(_x(4, 4) + 1j * _x(4, 4))) * 2,
    }
    for why, t in refused.items():
        assert firstcall.no_choice(_key(t)) is None, why
    k2 = compact([(svod.exp(x) * 2).uop, (svod.exp(x) + 1).uop])[0]  # two outputs
    assert firstcall.no_choice(k2) is None
    assert firstcall.no_choice(_key(x + 0)) is not None  # one op still fuses to one kernel


@pytest.mark.parametrize("build", [
    lambda x, v: svod.exp(x) * 2 + 1,
    lambda x, v: svod.tanh(x * v[None, :] - 3.0) / (svod.abs(x) + 1),
    lambda x, v: svod.where(x > v[None, :], svod.sqrt(svod.abs(x)), -x),
    lambda x, v: (x.astype(svod.float64) * 0.5).astype(svod.float32) + svod.log1p(svod.abs(x)),
])
def test_a_no_choice_plan_is_the_plan_the_search_picks(build):
    """The rule's promise, checked against the search itself with the active model."""
    from search import plan_search
    from svod.planner import cost_model

    x, v = svod.asarray(_x(64, 32)), svod.asarray(_x(32))
    key = _key(build(x, v))
    got = firstcall.no_choice_plan(key)
    assert got is not None
    searched = plan_search(key, cost_model=cost_model()).plan
    assert [k.key() for k in got[0].kernels] == [k.key() for k in searched.kernels]


def test_a_skipped_search_is_recorded_and_explained_and_the_result_is_numpys():
    xs = _x(32, 16)
    before = svod.stats()
    y = svod.exp(svod.asarray(xs)) * 2 + 1
    e = svod.explain(y)
    assert e.source == "greedy planner" and e.detail.startswith("search skipped: an elementwise tree of 3 op(s)")
    assert "search skipped" in str(e)
    np.testing.assert_allclose(y.numpy(), np.exp(xs) * 2 + 1, rtol=1e-6)
    after = svod.stats()
    assert after["searches_skipped"] - before["searches_skipped"] == 1
    assert after["searches"] == before["searches"]


def test_search_off_still_plans_greedily_and_counts_it_as_a_search(monkeypatch):
    monkeypatch.setenv("SVOD_SEARCH", "0")
    (svod.exp(svod.asarray(_x(8, 8))) * 2).numpy()
    s = svod.stats()
    assert s["searches"] == 1 and s["searches_skipped"] == 0


# ----------------------------------------------------------------------------- fresh processes

_COLD = """
    import json, sys, numpy as np, svod
    from svod import engine, firstcall
    seen = {}
    _start = engine.prefetch_search
    def _prefetch(importer):  # called once the result is computed: was egglog needed for it?
        seen.setdefault("egglog", "egglog" in sys.modules)
        return _start(importer)
    engine.prefetch_search = _prefetch
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    y = (svod.exp(svod.asarray(x)) * 2 + 1).numpy()
    ok = bool(np.allclose(y, np.exp(x) * 2 + 1, rtol=1e-6))
    # NOTE: not `"egglog" in sys.modules` here: the prefetch thread may already be importing
    # it (a race a loaded machine lost)
    egglog_at_result = seen.get("egglog", "egglog" in sys.modules)
    firstcall.wait_prefetch()
    s = svod.stats()
    print(json.dumps({"ok": ok, "egglog_at_result": egglog_at_result, "search_after": "search.saturate" in sys.modules,
                      "prefetch": firstcall.prefetch_state(), "skipped": s["searches_skipped"],
                      "searches": s["searches"]}))
"""


def test_a_fresh_process_plans_a_no_choice_graph_without_egglog_then_prefetches_it(tmp_path):
    out = _child(_COLD, str(tmp_path))
    assert out["ok"] and out["skipped"] == 1 and out["searches"] == 0
    assert out["egglog_at_result"] is False  # the result was ready before the search was imported
    assert out["prefetch"] == "done" and out["search_after"] is True


def test_a_process_that_exits_during_the_prefetch_waits_for_it(tmp_path):
    """The search's import runs on a daemon thread; a process that exits while it runs
    waits for it at exit, so the interpreter never stops that thread inside egglog's
    native code (which aborted a test child with "FATAL: exception not rethrown" after
    its output was complete). The hook registered first runs last: it sees the prefetch
    done."""
    code = """
        import atexit, json, numpy as np
        atexit.register(lambda: print(json.dumps({"at_exit": firstcall.prefetch_state()})))
        import svod
        from svod import firstcall
        (svod.exp(svod.asarray(np.ones((4, 4), np.float32))) * 2).numpy()
        print(json.dumps({"at_end": firstcall.prefetch_state()}))
    """
    e = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=e,
                       cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(x) for x in r.stdout.strip().splitlines()]
    assert lines[0]["at_end"] == "running"  # the program ended before the import did ...
    assert lines[-1]["at_exit"] == "done"  # ... and the exit waited for it


def test_prefetch_off_leaves_egglog_unimported(tmp_path):
    out = _child(_COLD, str(tmp_path), SVOD_PREFETCH="0")
    assert out["ok"] and out["prefetch"] == "not started" and out["search_after"] is False


def test_a_fork_during_the_prefetch_waits_for_it_and_the_child_plans_without_egglog(tmp_path):
    code = """
        import json, os, sys, numpy as np, svod
        from svod import firstcall
        (svod.exp(svod.asarray(np.ones((4, 4), np.float32))) + 1).numpy()
        state = firstcall.prefetch_state()
        pid = os.fork()
        if pid == 0:  # the child: the import lock is free; egglog is not usable: greedy, no hang
            t = svod.nn.softmax(svod.asarray(np.ones((4, 4), np.float32)))
            from svod.planner import decide
            from svod.key import compact
            d = decide(compact([t.uop])[0])
            y = t.numpy()
            ok = np.allclose(y, 0.25) and d.detail.startswith("search unavailable: egglog was imported")
            os._exit(0 if ok and d.exe.provisional else 3)
        _, status = os.waitpid(pid, 0)
        y = svod.nn.softmax(svod.asarray(np.ones((2, 4), np.float32))).numpy()  # the parent still searches
        print(json.dumps({"state_before_fork": state, "child": os.waitstatus_to_exitcode(status),
                          "parent": bool(np.allclose(y, 0.25)), "searches": svod.stats()["searches"]}))
    """
    out = _child(code, str(tmp_path))
    assert out["state_before_fork"] in ("running", "done") and out["child"] == 0
    assert out["parent"] and out["searches"] == 1


def test_a_warm_process_loads_the_plan_with_its_threads_and_builds_no_cost_model(tmp_path):
    code = """
        import json, sys, numpy as np, svod, svod.nn as nn
        x = svod.asarray(np.linspace(-3, 3, 64 * 32, dtype=np.float32).reshape(64, 32))
        y = nn.softmax(nn.layer_norm(x, (32,)) * 2 + 1).numpy()
        s = svod.stats()
        print(json.dumps({"model": "costmodels.analytic" in sys.modules, "egglog": "egglog" in sys.modules,
                          "disk": s["disk_cache_hits"], "compiled": s["kernels_compiled"],
                          "loaded": s["kernels_loaded"], "sum": float(y.sum())}))
    """
    cold = _child(code, str(tmp_path), SVOD_PREFETCH="0")
    warm = _child(code, str(tmp_path), SVOD_PREFETCH="0")
    assert cold["model"] and cold["egglog"] and cold["compiled"] >= 1
    assert warm["disk"] == 1 and warm["compiled"] == 0 and warm["loaded"] >= 1
    assert warm["model"] is False and warm["egglog"] is False
    assert abs(warm["sum"] - 64.0) < 1e-3 and abs(cold["sum"] - 64.0) < 1e-3


# ----------------------------------------------------------------------------- stored thread counts


def test_a_persisted_plan_carries_the_thread_counts_the_planner_gave_it():
    from svod.plan_greedy import plan_greedy
    from svod.planner import kernel_threads

    key = _key(svod.exp(svod.asarray(_x(512, 512))) * 2)
    plan = plan_greedy(key)
    exe = KernelPlan(key, plan, threads=kernel_threads)
    data = exe.to_json()
    want = kernel_threads(plan)
    assert {int(i): n for i, n in data["threads"].items()} == want
    loaded = KernelPlan(key, plan, threads=stored_threads(data, None))
    assert loaded.thread_map() == want


def test_a_kernel_loaded_from_the_object_cache_needs_no_lowering(tmp_path):
    from svod.codegen.lower import symbol_for
    from svod.codegen.program import cached_symbol
    from svod.plan_greedy import plan_greedy

    for t in (svod.exp(svod.asarray(_x(8, 8))) * 2, svod.nn.softmax(svod.asarray(_x(8, 8)))):
        for k in plan_greedy(_key(t)).kernels:
            assert cached_symbol(k) == symbol_for(k)
    code = """
        import json, sys, numpy as np, svod
        y = (svod.exp(svod.asarray(np.ones((8, 8), np.float32))) * 2).numpy()
        print(json.dumps({"lower": "svod.codegen.lower" in sys.modules, "loaded": svod.stats()["kernels_loaded"]}))
    """
    _child(code, str(tmp_path), SVOD_PREFETCH="0")
    warm = _child(code, str(tmp_path), SVOD_PREFETCH="0")
    assert warm == {"lower": False, "loaded": 1}


def test_stored_threads_falls_back_on_anything_malformed(monkeypatch):
    fb = object()
    for bad in ({}, {"threads": [1, 2]}, {"threads": {"x": 2}}, {"threads": {"0": 0}}, None):
        assert stored_threads(bad, fb) is fb
    from svod.codegen.target import pool_size

    pool = pool_size()
    assert stored_threads({"threads": {"0": 1, "1": 4}, "pool": pool}, fb) == {1: 4}
    # counts priced for another pool size (SVOD_THREADS=1, another machine) or of a record
    # that does not say: priced again
    for other in (pool + 1, None, "2"):
        assert stored_threads({"threads": {"0": 1, "1": 4}, "pool": other}, fb) is fb
    assert stored_threads({"threads": {"0": 1, "1": 4}}, fb) is fb
    key = _key(svod.exp(svod.asarray(_x(8, 8))))
    from svod.plan_greedy import plan_greedy

    exe = KernelPlan(key, plan_greedy(key), threads={0: 2, 5: 3})  # index 5: no such kernel
    assert exe.thread_map() == {0: 2}
    monkeypatch.setenv("SVOD_THREADS", "1")
    assert exe.thread_map() == {}


# ----------------------------------------------------------------------------- recompile reasons


def test_every_reason_a_plan_is_made_again_is_recorded(capsys, monkeypatch):
    monkeypatch.setenv("SVOD_LOGS", "recompiles")
    a = _x(40, 8)
    svod.nn.softmax(svod.asarray(a)).numpy()  # new structure
    svod.nn.softmax(svod.asarray(a)).numpy()  # replayed: nothing recorded
    (svod.exp(svod.asarray(a)) * 2).numpy()  # another new structure
    (svod.exp(svod.asarray(a)) * 3).numpy()  # new arguments (a constant)
    svod.nn.softmax(svod.asarray(_x(41, 8))).numpy()  # second row count: dynamic, new bucket
    svod.nn.softmax(svod.asarray(_x(40, 9))).numpy()  # new shapes (an inner axis: exact)
    PLAN_CACHE.clear()  # as the LRU would drop it
    svod.nn.softmax(svod.asarray(_x(40, 9))).numpy()  # evicted
    reasons = [r.reason for r in RECOMPILES.log]
    assert reasons == ["new structure", "new structure", "new arguments", "new bucket", "new shapes", "evicted"]
    recs = list(RECOMPILES.log)
    assert "CONST" in recs[2].detail and "2.0 -> 3.0" in recs[2].detail
    assert "sizes 40 and 41 seen" in recs[3].detail and "new bucket 44" in recs[3].detail
    assert "input 0 shape (40, 9), was (44, 8)" in recs[4].detail  # against the latest: the bucket 44
    assert recs[5].source == "disk cache"  # planned by this process before: stored on disk
    assert recs[0].source == "search; disk cache: no entry for this graph (this machine, this svod code)"
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("svod recompile:")]
    assert len(lines) == 6 and lines[4] == str(recs[4])
    assert svod.shapes.recompiles()[0].startswith("new arguments: CONST")  # a first plan is not a recompile


def test_the_log_says_when_the_disk_cache_holds_the_graph_only_under_another_generation(monkeypatch):
    from costmodels.tuning import TuningDB

    monkeypatch.setenv("SVOD_LOGS", "recompiles")
    a = _x(30, 8)
    svod.nn.softmax(svod.asarray(a)).numpy()
    assert RECOMPILES.log[-1].source.startswith("search; disk cache: no entry")
    TuningDB().bump()  # a tuning result: a new cost-model generation, plans made before are planned again
    svod.reset()
    svod.nn.softmax(svod.asarray(a)).numpy()
    assert RECOMPILES.log[-1].source == ("search; disk cache: only under another cost-model generation or plan "
                                         "format (planned again since)")


def test_no_recompile_line_without_the_switch(capsys, monkeypatch):
    monkeypatch.delenv("SVOD_LOGS", raising=False)
    monkeypatch.delenv("SVOD_DEBUG", raising=False)
    for n in (10, 11):
        svod.nn.softmax(svod.asarray(_x(n, 8))).numpy()
    assert "svod recompile" not in capsys.readouterr().err
    assert len(RECOMPILES.log) == 2


def test_explain_says_why_a_plan_was_or_would_be_made():
    a = _x(20, 8)
    e = svod.explain(svod.exp(svod.asarray(a)) * 2)
    assert "not planned by a realize yet: new structure" in e.shapes
    (svod.exp(svod.asarray(a)) * 2).numpy()
    (svod.exp(svod.asarray(a)) * 3).numpy()
    e = svod.explain(svod.exp(svod.asarray(a)) * 3)
    assert "planned in this process: new arguments" in e.shapes and "planned in this process" in str(e)


def test_reset_forgets_the_recompile_log():
    (svod.exp(svod.asarray(_x(4, 4))) + 1).numpy()
    assert len(RECOMPILES) > 0
    svod.reset()
    assert len(RECOMPILES) == 0 and svod.shapes.recompiles() == []


def test_structure_ignores_shapes_and_arguments_only():
    x, y = svod.asarray(_x(4, 4)), svod.asarray(_x(5, 4))
    assert structure(_key(svod.exp(x) * 2)) == structure(_key(svod.exp(y) * 3))
    assert structure(_key(svod.exp(x) * 2)) != structure(_key(svod.log(x) * 2))


# ----------------------------------------------------------------------------- tiered planning


def _ln_softmax(x, n):
    return svod.nn.softmax(svod.nn.layer_norm(svod.asarray(x), (n,)) * 2 + 1)


def _ln_softmax_np(x):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    z = (x - m) / np.sqrt(v + 1e-5) * 2 + 1
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_tiered_first_call_runs_the_greedy_plan_then_the_searched_one(monkeypatch, capsys):
    from svod.planner import settle

    monkeypatch.setenv("SVOD_TIERED", "1")
    monkeypatch.setenv("SVOD_LOGS", "recompiles")
    x = _x(48, 32)
    want = _ln_softmax_np(x)
    key = _key(_ln_softmax(x, 32))
    y1 = _ln_softmax(x, 32).numpy()  # the first call: the provisional greedy plan
    first = RECOMPILES.log[0]
    assert first.reason == "new structure" and first.source == "greedy planner" or \
        first.source.startswith("greedy planner;")
    s = svod.stats()
    assert s["searches_deferred"] == 1 and s["searches"] == 0
    provisional = PLAN_CACHE.get(key)
    assert provisional.provisional and provisional.origin == "greedy planner"
    np.testing.assert_allclose(y1, want, rtol=1e-5, atol=1e-6)
    assert settle(120)
    searched = PLAN_CACHE.get(key)
    assert searched is not provisional and searched.origin == "search" and not searched.provisional
    assert svod.stats()["searches"] == 1
    assert RECOMPILES.log[-1].reason == "searched" and RECOMPILES.log[-1].source == "search"
    assert "svod recompile" in capsys.readouterr().err
    y2 = _ln_softmax(x, 32).numpy()  # replayed by signature: the searched plan
    np.testing.assert_allclose(y2, want, rtol=1e-5, atol=1e-6)
    assert PLAN_CACHE.get(key) is searched and searched._gp is not None
    e = svod.explain(_ln_softmax(x, 32))
    assert "replaced the greedy planner (provisional" in e.detail
    assert [k.key() for k in e.plan.kernels] == [k.key() for k in searched.plan.kernels]
    assert "searched" in e.shapes


def test_tiered_callers_other_than_realize_wait_for_the_search(monkeypatch):
    from svod import tiered
    from svod.planner import decide

    monkeypatch.setenv("SVOD_TIERED", "1")
    x = _x(40, 16)
    key = _key(_ln_softmax(x, 16))
    _ln_softmax(x, 16).numpy()
    assert tiered.TIERED.pending(key.hash) or PLAN_CACHE.get(key).origin == "search"
    e = svod.explain(_ln_softmax(x, 16))  # right after the first call: says what runs from now on
    assert "planned in this process: searched" in e.shapes and "replaced the greedy planner" in e.detail
    d = decide(key)  # explain / jit / tune: never the provisional plan of a pending search
    assert not tiered.TIERED.pending(key.hash)
    assert d.exe.origin == "search" and d.exe is PLAN_CACHE.get(key)
    jitted = svod.jit(lambda a: svod.nn.softmax(svod.nn.layer_norm(a, (16,)) * 2 + 1))
    np.testing.assert_allclose(jitted(svod.asarray(x)).numpy(), _ln_softmax_np(x), rtol=1e-5, atol=1e-6)


def test_tiered_is_off_with_the_switch_and_never_for_search_off_or_no_choice(monkeypatch):
    x = _x(24, 16)
    monkeypatch.setenv("SVOD_TIERED", "0")
    _ln_softmax(x, 16).numpy()
    assert RECOMPILES.log[-1].source == "search" and svod.stats()["searches_deferred"] == 0
    svod.reset()
    monkeypatch.setenv("SVOD_TIERED", "1")
    (svod.exp(svod.asarray(x)) * 2 + 1).numpy()  # no choice: the greedy plan is final
    assert svod.stats()["searches_deferred"] == 0 and svod.stats()["searches_skipped"] == 1
    monkeypatch.setenv("SVOD_SEARCH", "0")
    _ln_softmax(_x(25, 16), 16).numpy()
    assert svod.stats()["searches_deferred"] == 0


def test_tiered_reset_waits_for_the_search_under_way(monkeypatch):
    from svod import tiered

    monkeypatch.setenv("SVOD_TIERED", "1")
    x = _x(36, 16)
    _ln_softmax(x, 16).numpy()
    svod.reset()
    assert len(tiered.TIERED) == 0 and len(PLAN_CACHE) == 0
    np.testing.assert_allclose(_ln_softmax(x, 16).numpy(), _ln_softmax_np(x), rtol=1e-5, atol=1e-6)
    svod.planner.settle(120)


def test_the_background_queue_is_bounded_and_runs_one_job_at_a_time():
    import threading
    import time

    from svod.tiered import Background

    bg = Background(max_pending=2)
    active, peak, ran = [0], [0], []
    lock = threading.Lock()

    def work(job):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        ran.append(job.key.hash)
        with lock:
            active[0] -= 1

    class K:
        def __init__(self, h):
            self.hash = h

    assert bg.submit(K("a"), None, None, work) and bg.submit(K("b"), None, None, work)
    assert not bg.submit(K("c"), None, None, work)  # full: the caller searches synchronously
    assert not bg.submit(K("a"), None, None, work)  # queued already
    assert bg.pending("a") and ran == []  # queued, not started before `start`
    assert bg.wait("b", 10) and bg.wait_all(10)
    assert ran == ["a", "b"] and peak[0] == 1 and len(bg) == 0


_TIERED_CHILD = """
    import json, sys, numpy as np, svod, svod.nn as nn
    x = np.linspace(-2, 2, 64 * 32, dtype=np.float32).reshape(64, 32)
    y = nn.softmax(nn.layer_norm(svod.asarray(x), (32,)) * 2 + 1).numpy()
    s = svod.stats()
    print(json.dumps({"egglog_at_result": "egglog" in sys.modules, "deferred": s["searches_deferred"],
                      "model_at_result": "costmodels.analytic" in sys.modules,
                      "disk": s["disk_cache_hits"], "sum": float(y.sum()), "rows": float(y.sum(-1).min())}))
"""


def _gone(pid: int, timeout: float = 120.0) -> bool:
    """Whether process `pid` has ended (exited, or a zombie) within `timeout` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_tiered_in_fresh_processes_the_search_process_persists_the_plan_after_its_parent_exits(tmp_path):
    code = _TIERED_CHILD.replace("s = svod.stats()", """s = svod.stats()
    import time
    from svod import searchproc, tiered
    while len(tiered.TIERED) and not (tiered.TIERED._current and tiered.TIERED._current.sent.is_set()):
        time.sleep(0.002)
    pid = searchproc.SEARCH_PROCESS._proc.pid
    print(json.dumps({"pid": pid}))""")
    e = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_CACHE_DIR=str(tmp_path), SVOD_TIERED="1")
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=e, cwd=ROOT, text=True)
    lines = p.stdout.read().strip().splitlines()
    assert p.wait(120) == 0
    info, cold = json.loads(lines[-2]), json.loads(lines[-1])
    assert cold["deferred"] == 1 and cold["egglog_at_result"] is False  # no search before the result
    assert cold["model_at_result"] is False  # the provisional plan's threads: the roofline, no calibrated model
    assert _gone(info["pid"])  # the search process ends on its own once its parent has exited
    check = """
        import json, numpy as np, svod, svod.nn as nn
        from svod.planner import decide
        from svod.key import compact
        x = np.linspace(-2, 2, 64 * 32, dtype=np.float32).reshape(64, 32)
        t = nn.softmax(nn.layer_norm(svod.asarray(x), (32,)) * 2 + 1)
        d = decide(compact([t.uop])[0])
        print(json.dumps({"source": d.source, "provisional": d.exe.provisional, "kernels": len(d.plan.kernels)}))
    """
    warm = _child(check, str(tmp_path), SVOD_TIERED="1")
    assert warm["source"] == "disk cache" and warm["provisional"] is False  # the exit finished the search
    again = _child(_TIERED_CHILD, str(tmp_path), SVOD_TIERED="1")
    assert again["disk"] == 1 and again["deferred"] == 0
    assert abs(again["sum"] - 64.0) < 1e-3 and abs(cold["sum"] - 64.0) < 1e-3 and again["rows"] > 0.999


def test_tiered_a_fork_waits_for_the_background_search_and_the_child_searches_in_its_own_process(tmp_path):
    code = """
        import json, os, sys, time, numpy as np, svod, svod.nn as nn
        from svod import searchproc, tiered
        x = np.ones((8, 16), np.float32)
        nn.softmax(nn.layer_norm(svod.asarray(x), (16,)) + 1).numpy()
        queued = len(tiered.TIERED)
        while tiered.TIERED._current is None and len(tiered.TIERED):
            time.sleep(0.001)  # fork while the search runs (or just after)
        pid = os.fork()
        if pid == 0:  # no search pending here; a new graph is tiered and searched by a process of its own
            t = nn.softmax(svod.asarray(np.ones((4, 4), np.float32)) * 3)
            ok = np.allclose(t.numpy(), 0.25) and svod.stats()["searches_deferred"] == 2  # the parent's one too
            ok = ok and svod.planner.settle(120) and searchproc.SEARCH_PROCESS.started == 2
            ok = ok and np.allclose((nn.softmax(svod.asarray(np.ones((4, 4), np.float32)) * 3)).numpy(), 0.25)
            os._exit(0 if ok and "egglog" not in sys.modules else 3)
        _, status = os.waitpid(pid, 0)
        after_fork = len(tiered.TIERED)
        svod.planner.settle(120)
        print(json.dumps({"queued": queued, "child": os.waitstatus_to_exitcode(status), "after_fork": after_fork,
                          "searches": svod.stats()["searches"], "egglog": "egglog" in sys.modules}))
    """
    out = _child(code, str(tmp_path), SVOD_TIERED="1")
    assert out["queued"] == 1 and out["child"] == 0
    assert out["after_fork"] == 0 and out["searches"] == 1  # the fork waited for the search under way
    assert out["egglog"] is False  # searched in the search process: egglog never entered this one


def test_tiered_without_the_search_process_searches_in_a_thread(monkeypatch):
    import sys

    from svod.planner import settle

    monkeypatch.setenv("SVOD_TIERED", "1")
    monkeypatch.setenv("SVOD_SEARCH_PROCESS", "0")
    x = _x(20, 16)
    key = _key(_ln_softmax(x, 16))
    _ln_softmax(x, 16).numpy()
    assert settle(120) and PLAN_CACHE.get(key).origin == "search"
    assert "search.saturate" in sys.modules
    np.testing.assert_allclose(_ln_softmax(x, 16).numpy(), _ln_softmax_np(x), rtol=1e-5, atol=1e-6)


def test_the_search_process_exits_when_idle_and_a_new_one_serves_the_next_search(monkeypatch):
    import time

    from svod import searchproc
    from svod.planner import settle

    monkeypatch.setenv("SVOD_TIERED", "1")
    monkeypatch.setenv("SVOD_SEARCH_PROCESS_IDLE", "0.3")
    searchproc.SEARCH_PROCESS.close()
    started = searchproc.SEARCH_PROCESS.started
    _ln_softmax(_x(12, 16), 16).numpy()
    assert settle(120)
    proc = searchproc.SEARCH_PROCESS._proc
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() == 0  # exited on its own, idle
    x = _x(12, 24)
    _ln_softmax(x, 24).numpy()
    assert settle(120) and searchproc.SEARCH_PROCESS.started == started + 2
    assert svod.stats()["searches"] == 2
    np.testing.assert_allclose(_ln_softmax(x, 24).numpy(), _ln_softmax_np(x), rtol=1e-5, atol=1e-6)
    searchproc.SEARCH_PROCESS.close()


# ----------------------------------------------------------------------------- the warm path: shared libraries

_WARM = """
    import json, sys, numpy as np, svod, svod.nn as nn
    rng = np.random.default_rng(3)
    x = rng.standard_normal((512, 256)).astype(np.float32)
    a = rng.standard_normal(256).astype(np.float32)
    y = nn.softmax(nn.layer_norm(svod.asarray(x), (256,)) * svod.asarray(a) + 1).numpy()
    e = (svod.exp(svod.asarray(x)) * 2 + 1).numpy()
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    z = (x - m) / np.sqrt(v + 1e-5) * a + 1
    w = np.exp(z - z.max(-1, keepdims=True)); w /= w.sum(-1, keepdims=True)
    s = svod.stats()
    print(json.dumps({"binding": "llvmlite.binding" in sys.modules, "ok": bool(np.allclose(y, w, rtol=1e-4, atol=1e-6)),
                      "ok_exp": bool(np.allclose(e, np.exp(x) * 2 + 1, rtol=1e-6)),
                      "compiled": s["kernels_compiled"], "loaded": s["kernels_loaded"]}))
"""


def _has_linker() -> bool:
    from svod.codegen import sharedlib

    return sharedlib._linker() is not None


@pytest.mark.skipif(not _has_linker(), reason="no system linker (ld): the warm path loads through LLVM")
def test_a_warm_process_runs_cached_code_from_shared_libraries_without_llvmlite_binding(tmp_path):
    cold = _child(_WARM, str(tmp_path), SVOD_PREFETCH="0")
    assert cold["ok"] and cold["ok_exp"] and cold["binding"] and cold["compiled"] >= 2
    libs = list((tmp_path / "lib").glob("*.so"))
    assert len(libs) >= 4  # kernels, the runtime, the graph programs: linked at exit
    warm = _child(_WARM, str(tmp_path), SVOD_PREFETCH="0")
    assert warm["ok"] and warm["ok_exp"] and warm["compiled"] == 0 and warm["loaded"] >= 2
    assert warm["binding"] is False  # dlopen, no LLVM
    off = _child(_WARM, str(tmp_path), SVOD_PREFETCH="0", SVOD_SHARED_LIBS="0")
    assert off["ok"] and off["compiled"] == 0 and off["binding"] is True  # the object code through LLVM


@pytest.mark.skipif(not _has_linker(), reason="no system linker (ld)")
def test_a_damaged_shared_library_falls_back_to_llvm_silently_and_is_linked_again(tmp_path):
    _child(_WARM, str(tmp_path), SVOD_PREFETCH="0")
    libs = sorted((tmp_path / "lib").glob("*.so"))
    for p in libs:
        p.write_bytes(p.read_bytes()[:100])  # truncated: dlopen fails
    code = _WARM.replace("print(json.dumps(", "import warnings; print(json.dumps(")
    warm = _child(code, str(tmp_path), SVOD_PREFETCH="0", PYTHONWARNINGS="error")
    assert warm["ok"] and warm["ok_exp"] and warm["compiled"] == 0 and warm["binding"] is True
    assert all(p.stat().st_size > 100 for p in libs)  # linked again at that process's exit
    again = _child(_WARM, str(tmp_path), SVOD_PREFETCH="0")
    assert again["ok"] and again["binding"] is False


def test_host_facts_match_llvm_and_key_objects_as_llvm_would(tmp_path, monkeypatch):
    import llvmlite
    import llvmlite.binding as llvm

    from svod.codegen import hostinfo, jit, objcache

    facts = hostinfo.host_facts()
    info = jit.host_target_info()
    assert (facts["cpu"], facts["features"], facts["vector_bits"], facts["triple"]) == \
        (info["cpu"], info["features"], info["vector_bits"], info["triple"])
    assert facts["llvm"] == ".".join(map(str, llvm.llvm_version_info)) and facts["mvec"] == jit.has_libmvec()
    key = objcache.target_key()
    assert f":llvmlite{llvmlite.__version__}:llvm{facts['llvm']}:{info['cpu']}:" in key
    assert f":mvec{int(jit.libmvec_enabled())}:" in key
    # a fresh process reads the same facts from the file, without LLVM
    code = """
        import json, sys
        from svod.codegen import objcache
        k = objcache.target_key()
        print(json.dumps({"key": k, "binding": "llvmlite.binding" in sys.modules}))
    """
    first = _child(code, str(tmp_path))
    second = _child(code, str(tmp_path))
    assert first["binding"] is True and second["binding"] is False and first["key"] == second["key"] == key
    # a stamp that does not match (another llvmlite build, SVOD_NO_LIBMVEC) asks LLVM again
    third = _child(code, str(tmp_path), SVOD_NO_LIBMVEC="1")
    assert third["binding"] is True and ":mvec0:" in third["key"]


@pytest.mark.skipif(not _has_linker(), reason="no system linker (ld)")
def test_clearing_the_object_cache_removes_the_shared_libraries(tmp_path):
    _child(_WARM, str(tmp_path), SVOD_PREFETCH="0")
    assert list((tmp_path / "lib").glob("*.so"))
    code = """
        import json
        from svod.store import default_store
        print(json.dumps({"removed": default_store().clear("objects")}))
    """
    assert _child(code, str(tmp_path))["removed"] >= 4
    assert not list((tmp_path / "lib").glob("*.so"))
    warm = _child(_WARM, str(tmp_path), SVOD_PREFETCH="0")
    assert warm["ok"] and warm["compiled"] >= 2  # nothing left to load: compiled again


# ----------------------------------------------------------------------------- warm records (svod.warmplan)

_HEAVY = ("svod.kernel", "svod.graph", "svod.codegen.schedule", "svod.codegen.program", "svod.codegen.graphprog",
          "svod.codegen.objcache", "llvmlite.binding", "egglog", "search", "costmodels.analytic")

_WARM_REC = """
    import json, sys, numpy as np, svod, svod.nn as nn
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1024, 256)).astype(np.float32)
    a = rng.standard_normal(256).astype(np.float32); b = rng.standard_normal(256).astype(np.float32)
    y = nn.softmax(nn.layer_norm(svod.asarray(x), (256,)) * svod.asarray(a) + svod.asarray(b)).numpy()
    e = (svod.exp(svod.asarray(x)) * 2 + 1).numpy()
    heavy = sorted(m for m in HEAVY if m in sys.modules)
    from svod import warmplan
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    z = (x - m) / np.sqrt(v + 1e-5) * a + b
    w = np.exp(z - z.max(-1, keepdims=True)); w /= w.sum(-1, keepdims=True)
    y2 = nn.softmax(nn.layer_norm(svod.asarray(x[::-1].copy()), (256,)) * svod.asarray(a) + svod.asarray(b)).numpy()
    s = svod.stats()
    print(json.dumps({"heavy": heavy, "started": warmplan.STARTED[0],
                      "ok": bool(np.allclose(y, w, rtol=1e-4, atol=1e-6)),
                      "ok_again": bool(np.allclose(y2, w[::-1], rtol=1e-4, atol=1e-6)),
                      "ok_exp": bool(np.allclose(e, np.exp(x) * 2 + 1, rtol=1e-6)),
                      "y": float(y.astype(np.float64).sum()), "e": float(e.astype(np.float64).sum()),
                      "compiled": s["kernels_compiled"], "disk": s["disk_cache_hits"],
                      "launched": s["kernels_launched"]}))
""".replace("HEAVY", repr(_HEAVY))


@pytest.mark.skipif(not _has_linker(), reason="no system linker (ld): no shared libraries, no warm records")
def test_a_warm_process_replays_stored_graph_programs_without_building_kernels(tmp_path):
    env = {"SVOD_PREFETCH": "0", "SVOD_VALIDATE": "0"}
    cold = _child(_WARM_REC, str(tmp_path), **env)
    assert cold["ok"] and cold["ok_again"] and cold["ok_exp"] and cold["started"] == 0
    assert "svod.kernel" in cold["heavy"] and cold["compiled"] >= 2
    warm = _child(_WARM_REC, str(tmp_path), **env)
    assert warm["started"] == 2 and warm["disk"] == 2 and warm["compiled"] == 0
    assert warm["heavy"] == []  # no Kernel, graph, schedule, program, LLVM binding, search or model
    assert warm["ok"] and warm["ok_again"] and warm["ok_exp"]
    assert (warm["y"], warm["e"]) == (cold["y"], cold["e"])  # the same code: bit-identical sums
    assert warm["launched"] == cold["launched"] > 0  # warm runs are counted like any other
    checked = _child(_WARM_REC, str(tmp_path), SVOD_PREFETCH="0", SVOD_VALIDATE="1")  # validated like a KernelPlan
    assert checked["started"] == 2 and checked["ok"] and checked["ok_exp"]
    one = _child(_WARM_REC, str(tmp_path), SVOD_PREFETCH="0", SVOD_VALIDATE="0", SVOD_THREADS="1")
    assert one["started"] == 0 and one["ok"] and one["ok_exp"]  # another target: the record is not used
    interp = _child(_WARM_REC, str(tmp_path), SVOD_PREFETCH="0", SVOD_VALIDATE="0", SVOD_CODEGEN="0")
    assert interp["started"] == 0 and interp["ok"] and interp["ok_exp"]  # the interpreter, as asked


@pytest.mark.skipif(not _has_linker(), reason="no system linker (ld)")
def test_a_warm_record_whose_libraries_are_gone_falls_back_silently(tmp_path):
    env = {"SVOD_PREFETCH": "0", "SVOD_VALIDATE": "0"}
    _child(_WARM_REC, str(tmp_path), **env)
    for p in (tmp_path / "lib").glob("*.so"):
        p.unlink()
    warm = _child(_WARM_REC, str(tmp_path), PYTHONWARNINGS="error", **env)
    assert warm["started"] == 0 and warm["ok"] and warm["ok_again"] and warm["ok_exp"] and warm["compiled"] == 0
    assert list((tmp_path / "lib").glob("*.so"))  # linked again at exit
    again = _child(_WARM_REC, str(tmp_path), **env)
    assert again["started"] == 2 and again["ok"] and again["heavy"] == []


def _warm_realize(n: int):
    x = np.linspace(-2, 2, n * 32, dtype=np.float32).reshape(n, 32)
    y = svod.nn.softmax(svod.nn.layer_norm(svod.asarray(x), (32,)) * 3 - 1)
    return x, y


def _warm_round(monkeypatch):
    """Plan, compile and run a graph, link its libraries, forget every in-memory cache:
    the next realize loads the plan (and its warm record) from the store."""
    from svod.codegen import sharedlib

    monkeypatch.setenv("SVOD_VALIDATE", "0")
    with sharedlib._lock:  # modules earlier tests left waiting (bounded: _PENDING_MAX) would crowd these out
        sharedlib._pending.clear()
    x, y = _warm_realize(48)
    first = y.numpy()
    sharedlib.link_pending()
    svod.reset()
    return x, first


@pytest.mark.skipif(not _has_linker(), reason="no system linker (ld)")
def test_a_warm_record_runs_only_for_its_own_plan_and_target(isolated, monkeypatch):
    from svod import warmplan
    from svod.executable import WarmPlan
    from svod.planner import plan_store_key
    from svod.store import default_store

    x, first = _warm_round(monkeypatch)
    _, y = _warm_realize(48)
    key = svod.engine.plan_for([y])[0]
    got = y.numpy()
    exe = PLAN_CACHE.get(key)
    assert isinstance(exe, WarmPlan) and exe.warm and exe.origin == "disk cache"
    np.testing.assert_array_equal(got, first)
    assert exe.to_json()["plan"] == default_store().get_json("plans", plan_store_key(key))["plan"]
    assert exe.describe() and len(exe.plan.kernels) == exe._n_kernels  # the Plan, built on demand
    st = default_store()
    skey = plan_store_key(key)
    rec, obj = st.get_json("plans", warmplan.PREFIX + skey), st.get_json("plans", skey)
    assert warmplan.runner_for(rec, obj) is not None
    other = dict(obj, plan=dict(obj["plan"], extra=1))  # the plan replaced since: never the old code
    assert warmplan.runner_for(rec, other) is None
    assert warmplan.runner_for(rec, dict(obj, threads={"0": 7})) is None
    assert warmplan.runner_for(dict(rec, witness="0" * 32), obj) is None  # another target
    for field, bad in (("v", 99), ("modules", []), ("segment", [9, "x"]), ("outputs", [[0, [2], "<f4", 3]]),
                       ("temps", [[0, 5]]), ("inputs", "f4"), ("n_slots", "4"), ("runtime", 3),
                       ("n_slots", rec["n_inputs"] - 1)):
        assert warmplan.runner_for(dict(rec, **{field: bad}), obj) is None, field
    assert warmplan.runner_for(None, obj) is None and warmplan.runner_for({"v": 1}, obj) is None
    # a damaged record in the store: the usual KernelPlan, the same result
    st.put_json("plans", warmplan.PREFIX + skey, dict(rec, table=[[0, "no_such_symbol"]]))
    svod.reset()
    _, y = _warm_realize(48)
    np.testing.assert_array_equal(y.numpy(), first)
    exe = PLAN_CACHE.get(svod.engine.plan_for([y])[0])
    assert not isinstance(exe, WarmPlan)


@pytest.mark.skipif(not _has_linker(), reason="no system linker (ld)")
def test_a_warm_plan_takes_the_usual_path_for_inputs_it_cannot_take_and_from_threads(isolated, monkeypatch):
    import threading

    from svod.executable import WarmPlan

    x, first = _warm_round(monkeypatch)
    _, y = _warm_realize(48)
    key, exe = svod.engine.plan_for([y])
    assert isinstance(exe, WarmPlan)
    from svod.key import compact

    arrays = compact([y.uop])[1].arrays
    np.testing.assert_array_equal(exe.run(arrays)[0], first)
    assert exe._gp is None  # the warm runner ran it
    parts = exe.quick_parts()  # svod.jit's inlined replay, from the warm runner
    assert parts is not None and parts[0].runner(None)(arrays)[0].tobytes() == first.tobytes()
    f = svod.jit(lambda t: svod.nn.softmax(svod.nn.layer_norm(t, (32,)) * 3 - 1))
    for _ in range(3):
        np.testing.assert_array_equal(f(svod.asarray(x)).numpy(), first)
    assert exe._gp is None
    strided = [np.asfortranarray(a) if a.ndim == 2 else a for a in arrays]  # not C-contiguous: usual path
    np.testing.assert_array_equal(exe.run(strided)[0], first)
    assert exe._gp is not None and exe.warm
    outs = [None] * 8

    def work(i):
        outs[i] = exe.run(arrays)[0]

    ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for o in outs:
        np.testing.assert_array_equal(o, first)


def test_a_plan_stored_on_one_thread_is_priced_again_in_a_bigger_pool(tmp_path):
    """A plan persisted by a process with SVOD_THREADS=1 carries no thread counts; a
    2-thread process that loads it prices its kernels again and splits the big
    elementwise kernel, instead of running it on one thread. (bench_scaling on 16 cores
    found W1 and W2 flat from 1 to 16 threads: its 1-thread child stored the plans that
    every later child loaded.)"""
    code = """
        import json, numpy as np, svod
        from svod import engine
        x = svod.asarray(np.arange(1 << 22, dtype=np.float32))
        y = (svod.exp(x * 1e-7) + 1.0) * 3.0
        key, exe = engine.plan_for([y])
        got = y.numpy()
        ok = bool(np.allclose(got, (np.exp(np.arange(1 << 22, dtype=np.float32) * 1e-7) + 1) * 3, rtol=1e-6))
        print(json.dumps({"threads": {str(k): v for k, v in exe.thread_map().items()}, "ok": ok,
                          "stored": exe.to_json().get("pool"), "loaded": svod.stats()["disk_cache_hits"]}))
    """
    # one profile file for both (a calibrated machine: the same plan generation for any
    # pool; the uncalibrated reference is scaled to the pool, another generation each)
    prof = str(ROOT / "tests" / "machine_profile.json")
    one = _child(code, str(tmp_path), SVOD_THREADS="1", SVOD_TIERED="0", SVOD_MACHINE_PROFILE=prof)
    assert one["ok"] and one["threads"] == {} and one["stored"] == 1
    two = _child(code, str(tmp_path), SVOD_THREADS="2", SVOD_TIERED="0", SVOD_MACHINE_PROFILE=prof)
    assert two["ok"] and two["loaded"] >= 1, two  # the plan came from the disk cache ...
    assert two["threads"] and max(two["threads"].values()) == 2, two  # ... and runs on both threads
    assert two["stored"] == 2
