"""Why-not-fused (svod.boundaries): graphs whose kernel boundaries are known, each with
the reason it must get; plans named by their kernels' ops; the SVOD_DEBUG lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import svod
from svod.boundaries import REASONS, boundaries, describe_plan, kernel_ops, plan_difference, why_not_fused
from svod.key import compact

ROOT = Path(__file__).resolve().parents[1]


def _x(*shape):
    return svod.random.randn(*shape)


def _reasons(*tensors) -> list[str]:
    return sorted(b.reason for b in why_not_fused(svod.explain(*tensors)))


def test_fully_fused_softmax_and_layernorm_have_no_boundary():
    x = _x(64, 32)
    assert _reasons(svod.nn.softmax(x)) == []
    assert _reasons(svod.nn.layer_norm(x, (32,))) == []


def test_user_contiguous():
    x = _x(64, 32)
    bs = why_not_fused(svod.explain(svod.exp(x).contiguous() * 2.0))
    assert [b.reason for b in bs] == ["contiguous()"]
    assert bs[0].producer_label.startswith("contiguous()") and bs[0].consumer_label.startswith("mul")


def test_matmul_operand_and_matmul_result():
    x, w = _x(64, 32), _x(32, 16)
    assert _reasons(svod.exp(x) @ w) == ["matmul operand"]
    bs = why_not_fused(svod.explain((x @ w).sum(axis=1)))
    assert [b.reason for b in bs] == ["matmul result"] and "reduction" in bs[0].detail


def test_graph_output_read_by_another_output():
    x = _x(64, 32)
    e = svod.exp(x)
    assert _reasons(e, e * 2.0) == ["output"]


def test_reduction_over_other_axes():
    x = _x(64, 32)
    bs = why_not_fused(svod.explain((x * x).sum() + x.max(axis=1)))
    assert [b.reason for b in bs] == ["reduction over other axes"]
    assert "sum(axis=(0, 1))" in bs[0].detail and "reducing axes (1,)" in bs[0].detail


def test_shared_reduction():
    x = _x(64, 32)
    m = x.sum(axis=1, keepdims=True)
    assert "shared reduction" in _reasons((x - m) * (x + m), m.sum())


def test_priced_higher_names_the_difference():
    x = _x(64, 32)
    bs = why_not_fused(svod.explain(svod.nn.softmax(x, axis=0)))
    assert bs and {b.reason for b in bs} == {"priced higher"}
    for b in bs:
        assert b.delta_seconds is not None and b.delta_seconds > 0
        assert "more" in b.detail and ("µs" in b.detail or "ms" in b.detail)


def test_search_budget_when_saturation_stops_before_the_rules_fire():
    x = _x(64, 32)
    with svod.search_limits(iterations=0):
        bs = why_not_fused(svod.explain(svod.exp(svod.exp(x) * 2.0).sum(axis=1)))
    assert bs and {b.reason for b in bs} == {"search budget"}
    assert "iteration limit" in bs[0].detail


def test_size_policy_regions():
    x = _x(64, 32)
    with svod.search_limits(region_nodes=4):
        bs = why_not_fused(svod.explain(svod.exp(svod.exp(svod.exp(x) * 2.0) + 1.0).sum(axis=1) * 3.0))
    assert "size policy" in {b.reason for b in bs}
    assert all(b.detail.count("size policy") == 1 for b in bs if b.reason == "size policy")


def test_kernel_size_cap(monkeypatch):
    import svod.lower.build as pg

    monkeypatch.setattr(pg, "MAX_DEPTH", 20)
    y = _x(16, 8)
    for i in range(40):
        y = svod.sin(y) if i % 2 else y * 1.01
    bs = why_not_fused(svod.explain(y))
    assert [b.reason for b in bs] == ["kernel size cap"] and "20 deep" in bs[0].detail


def test_greedy_planner_and_no_fusion_rule_and_tuned():
    from search import plan_search
    from svod.plan_greedy import plan_greedy

    x, w = _x(64, 32), _x(32, 16)
    key, _ = compact([svod.nn.gelu(x @ w + 1.0).uop])
    reasons = {b.reason for b in boundaries(key, plan_greedy(key))}
    assert reasons == {"greedy planner"}
    key, _ = compact([svod.nn.softmax(x).uop])
    r = plan_search(key, rulesets=("fuse_elementwise", "fuse_reduce_prologue"))
    bs = boundaries(r.decoded, r.plan, report=r.report, rulesets=r.report.saturation.rulesets)
    assert {b.reason for b in bs} == {"no fusion rule"} and "a reduction into an elementwise op" in bs[0].detail
    e = svod.explain(svod.nn.softmax(x, axis=0))
    bs = boundaries(e.report.extraction.key, e.plan, report=e.report, model=e.cost_model, origin="tuned")
    assert bs and {b.reason for b in bs} == {"tuned"}


def test_every_reason_is_named_and_source_lines_label_the_ops(tmp_path):
    from svod import sources

    with sources.record():
        x = _x(64, 32)
        y = svod.exp(x).contiguous() * 2.0  # the line the labels must name
    e = svod.explain(y)
    (b,) = why_not_fused(e)
    assert b.reason in REASONS
    assert "test_boundaries.py:" in b.producer_label and "test_boundaries.py:" in b.consumer_label
    assert "why not fused" in str(e) and "contiguous()" in str(e)


def test_plans_are_described_by_their_ops():
    x = _x(64, 32)
    e = svod.explain(svod.nn.softmax(x))
    assert describe_plan(e.plan) == "max·sub·exp·sum·div" == kernel_ops(e.plan.kernels[0])
    assert "#" not in e.variants_table().split("\n", 1)[1]  # no hashes or node ids
    assert "max·sub·exp·sum·div" in e.variants_table()
    split = next(v for v in e.variants[1:] if len(v.plan.kernels) == 2)
    assert " | " in describe_plan(split.plan)
    diff = plan_difference(split.plan, e.plan, e.report.extraction.key)
    assert diff.startswith("materialises ") and "%" not in diff


def test_svod_debug_prints_the_reasons(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import svod\nx = svod.random.randn(32, 16)\nprint(float((svod.exp(x).contiguous() * 2).sum()))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_DEBUG="1", SVOD_CACHE_DIR=str(tmp_path / "c"))
    r = subprocess.run([sys.executable, str(prog)], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "why not fused" in r.stderr and "contiguous(): " in r.stderr


@pytest.mark.parametrize("name", ["w2_softmax", "w3_layernorm", "w4_mlp", "w6_reductions", "cross_entropy",
                                  "standardize_columns", "concat_norm", "swiglu"])
def test_workloads_get_a_reason_for_every_boundary(name):
    from svod import workloads

    w = workloads.get(name)
    out = w.build(**w.tensors(w.make_inputs(w.small_shapes)))
    outs = out if isinstance(out, tuple) else (out,)
    e = svod.explain(*outs)
    bs = why_not_fused(e)
    assert all(b.reason in REASONS and b.detail for b in bs)
    assert len({(b.producer, b.consumer) for b in bs}) == len(bs)
