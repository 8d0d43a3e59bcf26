"""One plan decision (svod/planner.py): the plan svod.explain shows, the plan realize runs,
the plan `svod tune` times as realize's, and the plans `svod costmodel report` times
contain it — the same text, for every named workload and the attention variants (plain,
causal, masked), with and without a tuning-database entry. Provisional plans persist
and `svod tune` searches them again; `svod explain FILE.py` lists jitted graphs.

Every test runs against a temporary store and the checked-in machine profile.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import search.oracle
import svod
from costmodels import profile
from costmodels import report as report_mod
from costmodels.analytic import CalibratedModel
from costmodels.targets import Target, workload_target
from costmodels.tune import dedupe
from costmodels.tuning import TuningDB
from svod import cli, engine, planner, workloads
from svod.costing import Machine
from svod.key import compact

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "tests" / "machine_profile.json"
FAST = ("w2_softmax", "w5_attention", "linear_relu", "mean_var")  # the default run's share of the 31


def _text(plan) -> str:
    """A plan as text, without the name of the planner that made it."""
    return "\n".join(str(k) for k in plan.kernels) + f"\noutputs {plan.outputs}"


def _workload(name: str):
    w = workloads.get(name)
    arrays = w.make_inputs(w.small_shapes, seed=0)

    def build():
        out = w.build(**w.tensors(arrays))
        return out if isinstance(out, tuple) else (out,)

    return workload_target(name, small=True), build


def _attention(variant: str):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 12, 8), (2, 16, 8), (2, 16, 16)))
    mask = rng.standard_normal((12, 16)).astype(np.float32)

    def build():
        Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
        if variant == "causal":
            return (svod.nn.scaled_dot_product_attention(Q, K, V, is_causal=True),)
        if variant == "masked":
            return (svod.nn.scaled_dot_product_attention(Q, K, V, attn_mask=svod.asarray(mask)),)
        return (svod.nn.scaled_dot_product_attention(Q, K, V),)

    outs = build()
    key, bindings = compact([o.uop for o in outs])
    return Target(f"attention {variant}", key, list(bindings.arrays), lambda: None, 1), build


def _plans_seen(target, build) -> dict[str, str]:
    """The plan text each tool sees for this graph."""
    e = svod.explain(*build())
    assert e.key.hash == target.key.hash
    outs = build()
    svod.realize(*outs)
    exe = engine.PLAN_CACHE.get(target.key)
    est = CalibratedModel(profile.profile())
    cands = dedupe(cli._candidates(target, est, 2, 4))  # what tune times, in its order
    assert cands[0][0] == "realize"
    seen = {"explain": _text(e.plan), "realize": _text(exe.plan), "tune": _text(cands[0][1])}
    if 0 < len(search.oracle.choices(target.key)) <= 12:  # the report's default --max-choices
        vs = report_mod.variants(target, est, search.oracle, Machine.host(), 24, 12, 0)
        timed = [_text(p) for p in vs.timed()]
        realized = timed[vs.chosen.index(vs.realized)] if vs.realized >= 0 else timed[-1]
        assert seen["realize"] in timed
        seen["report"] = realized
    return seen


def _check_target(target, build):
    seen = _plans_seen(target, build)
    assert len(set(seen.values())) == 1, seen
    d = planner.decide(target.key)
    # a graph with no fusion choice is planned by the greedy planner, without the search
    # (svod.firstcall): every tool still sees that one plan
    from svod import firstcall

    made = "planned by greedy planner" if firstcall.no_choice(target.key) else "planned by search"
    assert d.source == "memory cache" and d.detail == made
    # with a tuning-database entry: another plan (the search's second variant, else the
    # greedy planner's), and every tool sees that one
    from search import plan_search
    from svod.plan_greedy import plan_greedy

    r = plan_search(target.key, cost_model=CalibratedModel(profile.profile()), k=4)
    others = [v.plan for v in r.variants[1:]] + [plan_greedy(target.key)]
    others = [p for p in others if _text(p) != seen["realize"]]
    if not others:
        return
    TuningDB().put_choice(target.key.hash, others[0], {"sig": "test", "seconds": 1e-6, "label": target.label})
    engine.reset_caches()
    e = svod.explain(*build())
    assert e.source == "tuning database" and "tuning database" in str(e)
    tuned = _plans_seen(target, build)
    assert set(tuned.values()) == {_text(others[0])}, tuned


@pytest.mark.parametrize("name", FAST)
def test_every_tool_sees_the_plan_realize_runs(isolated, name):
    _check_target(*_workload(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in workloads.names() if n not in FAST])
def test_every_tool_sees_the_plan_realize_runs_all_workloads(isolated, name):
    _check_target(*_workload(name))


@pytest.mark.parametrize("variant", ["plain", "causal", "masked"])
def test_every_tool_sees_the_fused_attention(isolated, variant):
    target, build = _attention(variant)
    e = svod.explain(*build())
    assert [k.kind for k in e.plan.kernels] == ["attention"], variant
    _check_target(target, build)


def test_explanation_names_the_model_and_the_source(isolated):
    x = svod.asarray(np.ones((8, 16), np.float32))
    e = svod.explain(svod.nn.softmax(x * 3.0))
    assert e.source == "search" and "measured" in e.model_name and "plan from: search" in str(e)
    assert "cost model: measured" in str(e)
    e2 = svod.explain(svod.nn.softmax(x * 3.0))
    assert e2.source == "memory cache" and _text(e2.plan) == _text(e.plan)
    engine.reset_caches()
    e3 = svod.explain(svod.nn.softmax(x * 3.0))
    assert e3.source == "disk cache" and _text(e3.plan) == _text(e.plan)
    from svod.costing import RooflineModel

    e4 = svod.explain(svod.nn.softmax(x * 3.0), cost_model=RooflineModel())
    assert e4.source == "search with a given model" and "roofline" in str(e4)


_SCRIPT = """
import json, numpy as np, svod
x = svod.asarray(np.arange(4096, dtype=np.float32).reshape(64, 64))
with svod.search_limits(seconds=0.0):
    y = (svod.nn.softmax(x * 0.01) + x.sum(axis=1, keepdims=True)).numpy()
print(json.dumps({"stats": svod.stats(), "sum": float(y.sum())}))
"""


def _run(cache: Path, code: str = _SCRIPT) -> dict:
    env = dict(os.environ, SVOD_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT), SVOD_MACHINE_PROFILE=str(PROFILE))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_provisional_plans_persist_and_tune_searches_them_again(isolated):
    """A search cut short by its budget gives a correct, provisional plan: persisted, used by
    the next process without a search, searched again by `svod tune`."""
    cache = isolated / "cache"
    first = _run(cache)
    assert first["stats"]["searches"] == 1
    second = _run(cache)
    assert second["stats"]["searches"] == 0 and second["stats"]["disk_cache_hits"] >= 1
    assert second["sum"] == pytest.approx(first["sum"], rel=1e-6)
    keys = planner.provisional_keys()
    assert len(keys) == 1
    d = planner.decide(keys[0])
    assert d.source == "disk cache" and d.exe.provisional and "provisional" in d.detail
    again = planner.research(keys[0], seconds=30.0)
    assert again.source == "search" and not again.exe.provisional
    assert planner.provisional_keys() == []
    code, out, _ = _cli(["tune", "--provisional"])
    assert code == 0 and "no provisional plans" in out


def _cli(argv):
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


def test_tune_provisional_researches_every_stored_provisional_plan(isolated):
    cache = isolated / "cache"
    _run(cache)
    code, out, _ = _cli(["tune", "--provisional", "--seconds", "30"])
    assert code == 0 and "searched 1 provisional plan(s) again: 1 complete" in out, out
    assert planner.provisional_keys() == []


def test_explain_lists_the_graphs_of_jitted_functions(isolated, tmp_path):
    script = tmp_path / "jit_script.py"
    script.write_text(
        "import sys, numpy as np, svod\n"
        "@svod.jit\n"
        "def step(x, s):\n"
        "    return svod.nn.softmax(x * s, axis=-1)\n"
        "n = int(sys.argv[sys.argv.index('--rows') + 1])\n"
        "x = svod.asarray(np.ones((n, 8), np.float32))\n"
        "for s in (1.0, 2.0):\n"
        "    step(x, s)\n"
        "print('rows', n)\n")
    code, out, err = _cli(["explain", str(script), "--", "--rows", "3"])
    assert code == 0, err
    assert "rows 3" in out and "1 distinct graph(s)" in out and "from jit step" in out
    assert "plan from: memory cache (planned by" in out and "cost model:" in out


def test_a_plan_switch_is_part_of_the_plans_store_key(isolated, monkeypatch):
    """`SVOD_FUSE_ATTENTION=0` set after an attention plan was stored is never served that
    plan (from disk or memory): plans are stored and cached per setting of the plan
    switches (`svod.flags.PLAN_SWITCHES`), as per algebra mode."""
    target, build = _attention("plain")

    def kinds():
        d = planner.decide(target.key)
        return d.source, [k.kind for k in d.exe.plan.kernels]

    svod.realize(*build())
    assert "attention" in kinds()[1]
    default_key = planner.plan_store_key(target.key)
    monkeypatch.setenv("SVOD_FUSE_ATTENTION", "0")
    assert planner.plan_store_key(target.key) == default_key + "+SVOD_FUSE_ATTENTION=0"
    source, ks = kinds()  # the memory cache holds the attention plan: not served
    assert source not in ("memory cache", "disk cache") and "attention" not in ks
    engine.reset_caches()
    source, ks = kinds()
    assert source == "disk cache" and "attention" not in ks
    monkeypatch.delenv("SVOD_FUSE_ATTENTION")
    engine.reset_caches()
    source, ks = kinds()
    assert source == "disk cache" and "attention" in ks


def test_every_plan_pass_and_kernel_kind_switch_is_a_plan_switch():
    """A switch that changes what a planner builds is listed once more in
    `svod.flags.PLAN_SWITCHES` (svod.flags may not import the lowering: warm processes
    skip it); this keeps the two lists in step."""
    from search.kinds import KINDS
    from svod.flags import PLAN_SWITCHES
    from svod.lower.passes import PLAN_PASSES

    listed = {name for name, _ in PLAN_SWITCHES}
    used = {p.switch for p in PLAN_PASSES if p.switch} | {k.switch for k in KINDS if k.switch}
    assert used <= listed, used - listed
