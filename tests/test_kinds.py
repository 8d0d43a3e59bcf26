"""Kernel kinds (search/kinds.py): the attention kernel as a choice of the search — the
rule set `kind_attention` adds the variant, the lowering builds it
(`svod.lower.attention.build_attention`), the extraction prices it against the unfused
kernels — checked against numpy through the search's plans (tests/test_attention.py
plans the same chains with the greedy planner and its plan pass)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import engine
from svod.codegen.attention import tile
from svod.key import compact

NR = tile()[1]


def _arrays(batch, m, n, d, dv, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*batch, m, d)).astype(np.float32),
            rng.standard_normal((*batch, n, d)).astype(np.float32),
            rng.standard_normal((*batch, n, dv)).astype(np.float32))


def _ref(q, k, v, scale, keep=None, add=None):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    if add is not None:
        s = s + add
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _searched_kinds(*ts, **limits):
    """The kinds of the kernels of the search's plan for ts (realize then runs it). The
    tests calling it use a fresh plan store (`isolated`): a plan another test stored for
    the same structure (the greedy planner's, tests/test_attention.py) would be reused."""
    with svod.search_limits(enabled=True, **limits):
        _, exe = engine.plan_for(list(ts))
    assert exe.plan.planner == "search"
    return [k.kind for k in exe.plan.kernels]


def _search(t, **kw):
    from search import plan_search

    key, b = compact([t.uop])
    return key, b, plan_search(key, **kw)


# ----------------------------------------------------------------------------- the rule


def test_rule_fires_once_per_chain_and_only_there():
    from search import rules, saturate
    from svod.config import SearchLimits

    q, k, v = _arrays((2,), 16, NR, 8, NR)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    t = svod.nn.scaled_dot_product_attention(Q, K, V)
    key, _ = compact([t.uop])
    enc = saturate.encode(key, rules.DEFAULT)
    facts = [a for txt in enc.text for a in txt.split("\n") if "KindAttentionAt" in a]
    mm = [i for i, n in enumerate(key.nodes) if n.op is svod.ir.Ops.MATMUL]
    assert len(facts) == 1 and f"KindAttentionAt {mm[-1]} " in facts[0]
    rep = saturate.saturate(enc, SearchLimits())
    assert "kind_attention" in rep.fired and rep.added["kind_attention"] > 0
    # no chain, no fact: the rule set is not even run (gated on its facts)
    key2, _ = compact([(svod.nn.softmax(Q @ K.mT, axis=-2) @ V).uop])  # softmax over the wrong axis
    assert "kind_attention" not in saturate.encode(key2, rules.DEFAULT).rulesets
    key3, _ = compact([(svod.nn.softmax(Q @ K.mT, axis=-1) * 2.0 @ V).uop])  # not the softmax itself
    assert "kind_attention" not in saturate.encode(key3, rules.DEFAULT).rulesets
    q64 = svod.asarray(q.astype(np.float64))
    k64 = svod.asarray(k.astype(np.float64))
    key4, _ = compact([(svod.nn.softmax(q64 @ k64.mT, axis=-1) @ svod.asarray(v.astype(np.float64))).uop])
    assert "kind_attention" not in saturate.encode(key4, rules.DEFAULT).rulesets  # float32 only


def test_kind_is_exact_and_in_every_mode():
    from search import rules

    assert rules.STATUS["kind_attention"] == "exact"
    assert "kind_attention" in rules.default_rulesets("exact")
    assert "kind_attention" in rules.default_rulesets("reassoc")


# ----------------------------------------------------------------------------- the choice


def test_search_prices_attention_against_the_unfused_kernels():
    q, k, v = _arrays((2,), 64, 64, 16, 16, seed=1)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    key, b, r = _search(t, k=8)
    kinds = [[kk.kind for kk in v.plan.kernels] for v in r.variants]
    assert kinds[0] == ["attention"]
    without = [v for v, ks in zip(r.variants, kinds) if "attention" not in ks]
    assert without and without[0].seconds > r.variants[0].seconds
    e = svod.explain(t)
    line = [x for x in e.variants_table().splitlines() if x.startswith("kernel kind attention")]
    assert line and line[0].startswith("kernel kind attention: chosen;")


def test_cost_model_decides(monkeypatch):
    """With a cost model pricing the attention kernel above the unfused kernels, the
    search keeps them apart: the kind is a priced choice, not a peephole."""
    from svod.costing import RooflineModel

    class Dear(RooflineModel):
        def price_batch(self, kernels, machine):
            import dataclasses

            return [dataclasses.replace(p, seconds=p.seconds * 1e6) if kk.kind == "attention" else p
                    for kk, p in zip(kernels, super().price_batch(kernels, machine))]

    q, k, v = _arrays((2,), 32, 32, 8, 8, seed=2)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    key, b, r = _search(t, cost_model=Dear())
    assert "attention" not in [kk.kind for kk in r.plan.kernels]
    from svod.interp import run_plan

    np.testing.assert_allclose(run_plan(r.plan, b.arrays)[0], _ref(q, k, v, 1 / np.sqrt(8)), rtol=2e-5, atol=2e-6)


# ----------------------------------------------------------------------------- against numpy


@pytest.mark.parametrize("form", ["sdpa", "scale_after", "scale_before_softmax", "no_scale", "kt_given"])
def test_forms_fuse_through_the_search(isolated, form):
    q, k, v = _arrays((2,), 20, 2 * NR, 16, NR, seed=3)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    scale = 0.3
    if form == "sdpa":
        t, scale = svod.nn.scaled_dot_product_attention(Q, K, V), 0.25
    elif form == "scale_after":
        t = svod.nn.softmax((Q @ K.mT) * scale, axis=-1) @ V
    elif form == "scale_before_softmax":
        t = svod.nn.softmax(scale * (Q @ K.mT), axis=-1) @ V
    elif form == "no_scale":
        t, scale = svod.nn.softmax(Q @ K.mT, axis=-1) @ V, 1.0
    else:
        kt = np.ascontiguousarray(np.swapaxes(k, -1, -2))
        t = svod.nn.softmax((Q @ svod.asarray(kt)) * scale, axis=-1) @ V
    assert _searched_kinds(t) == ["attention"]
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, scale), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("mask", ["causal", "additive", "boolean", "neg_inf_additive", "fully_masked_row",
                                  "nan_in_mask"])
def test_masks_through_the_search(isolated, mask):
    m, n, d = 12, 2 * NR, 8
    q, k, v = _arrays((3,), m, n, d, NR, seed=4)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    rng = np.random.default_rng(5)
    keep = add = None
    if mask == "causal":
        t = svod.nn.scaled_dot_product_attention(Q, K, V, is_causal=True)
        keep = np.tril(np.ones((m, n), dtype=bool))
    elif mask == "boolean":
        keep = rng.random((m, n)) < 0.6
        keep[:, 0] = True
        t = svod.nn.scaled_dot_product_attention(Q, K, V, attn_mask=svod.asarray(keep))
    elif mask == "fully_masked_row":
        keep = np.ones((m, n), dtype=bool)
        keep[5] = False
        t = svod.nn.scaled_dot_product_attention(Q, K, V, attn_mask=svod.asarray(keep))
    else:
        add = rng.standard_normal((3, m, n)).astype(np.float32)
        if mask == "neg_inf_additive":
            add[:, :, 3:7] = -np.inf
        elif mask == "nan_in_mask":
            add[1, 4, 2] = np.nan
        t = svod.nn.scaled_dot_product_attention(Q, K, V, attn_mask=svod.asarray(add))
    assert _searched_kinds(t) == ["attention"]
    want = _ref(q, k, v, 1 / np.sqrt(d), keep=keep, add=add)
    got = t.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # NaN rows exactly where numpy's are
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)
    if mask in ("fully_masked_row", "nan_in_mask"):
        assert np.isnan(want).any()


def test_exact_algebra_keeps_the_kind(isolated):
    q, k, v = _arrays((2,), 16, NR, 8, NR, seed=6)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    assert _searched_kinds(t, algebra="exact") == ["attention"]
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, 1 / np.sqrt(8)), rtol=2e-5, atol=2e-6)


def test_switch_off_means_no_attention_kernel_anywhere(isolated, monkeypatch):
    """(A fresh plan store: a plan stored before the switch was set keeps its kernels.)"""
    from search import rules, saturate

    monkeypatch.setenv("SVOD_FUSE_ATTENTION", "0")
    q, k, v = _arrays((2,), 16, NR, 8, NR, seed=7)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    key, _ = compact([t.uop])
    assert "kind_attention" not in saturate.encode(key, rules.DEFAULT).rulesets
    assert "attention" not in _searched_kinds(t)
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, 1 / np.sqrt(8)), rtol=2e-5, atol=2e-6)
    engine.reset_caches()
    with svod.search_limits(enabled=False):
        _, exe = engine.plan_for([t])
    assert "attention" not in [kk.kind for kk in exe.plan.kernels]


def test_greedy_plans_keep_the_plan_pass():
    from svod.lower import PLAN_PASSES, greedy_boundaries, initial_materialized, lower

    q, k, v = _arrays((2,), 16, NR, 8, NR, seed=8)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    key, _ = compact([t.uop])
    # the greedy planner materialises every matmul: only the pass fuses its plan
    assert [kk.kind for kk in lower(key, greedy_boundaries(key)).kernels] == ["attention"]
    unfused = lower(key, greedy_boundaries(key), planner="search")
    assert "attention" not in [kk.kind for kk in unfused.kernels]
    # a search's choice with the chain inlined: the lowering builds the kind's kernel itself
    built = lower(key, initial_materialized(key), planner="search",
                  passes=tuple(p for p in PLAN_PASSES if p.name != "attention fusion"))
    assert [kk.kind for kk in built.kernels] == ["attention"]


@pytest.mark.parametrize("case", ["scores_returned", "weights_returned", "first_matmul_materialised"])
def test_illegal_chains_stay_apart_and_correct(isolated, case):
    q, k, v = _arrays((2,), 8, NR, 4, NR, seed=9)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    scores = Q @ K.mT
    p = svod.nn.softmax(scores, axis=-1)
    t = p @ V
    if case == "first_matmul_materialised":
        from svod.lower import initial_materialized, lower

        key, _ = compact([t.uop])
        mm1 = min(i for i, n in enumerate(key.nodes) if n.op is svod.ir.Ops.MATMUL)
        plan = lower(key, initial_materialized(key) | {mm1}, planner="search")
        assert "attention" not in [kk.kind for kk in plan.kernels]
        return
    extra = scores if case == "scores_returned" else p
    assert "attention" not in _searched_kinds(t, extra)
    svod.realize(t, extra)
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, 1.0), rtol=2e-5, atol=2e-6)


def test_oracle_agrees_with_the_search():
    """The oracle enumerates every cover of a small chain (the attention kernel among
    them, built by the lowering): the search's plan is never dearer."""
    from search.oracle import all_covers

    q, k, v = _arrays((), 8, 8, 4, 4, seed=10)
    t = svod.nn.softmax(svod.asarray(q) @ svod.asarray(k).mT, axis=-1) @ svod.asarray(v)
    key, b, r = _search(t)
    covers = all_covers(key)
    assert any("attention" in [kk.kind for kk in c.plan.kernels] for c in covers)
    assert r.variants[0].seconds <= covers[0].seconds * (1 + 1e-6)


def test_two_chains_in_one_graph_each_fuse(isolated):
    """Two attention layers, the second causal and reading the first's output as its
    queries: one kind choice per chain, both taken."""
    q, k, v = _arrays((2,), 24, 24, 16, 16, seed=11)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    h = svod.nn.scaled_dot_product_attention(Q, K, V)
    t = svod.nn.scaled_dot_product_attention(h, K, V, is_causal=True)
    assert _searched_kinds(t) == ["attention", "attention"]
    first = _ref(q, k, v, 0.25)
    want = _ref(first.astype(np.float32), k, v, 0.25, keep=np.tril(np.ones((24, 24), dtype=bool)))
    np.testing.assert_allclose(t.numpy(), want, rtol=5e-5, atol=5e-6)
