"""The fused attention kernel (the lowering's attention-fusion pass, svod.lower.attention,
and svod.codegen.attention) against numpy: shapes around the micro-tile edges, the scale
in either kernel, transposed and broadcast operands, the patterns left alone, the
interpreter path, the JSON form and the spec checks.

The pattern and kernel tests plan with the greedy planner (every matmul a BLAS step, so
each chain reaches the pass), which tests the pass whatever the search would price. The
search prices the fused kernel against the unfused variants (their BLAS steps at their
fixed cost in a graph program: tests/test_small_steps.py has the small shapes that it
used to keep apart); W5's shapes go through it (`test_w5_is_one_kernel_and_correct`,
`test_explain_shows_the_plan_realize_runs`, `test_search_fuses_small_chains`)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import engine
from svod.codegen.attention import tile
from svod.fuse_attention import fuse_attention
from svod.kernel import ACC, AttentionSpec, Kernel, KernelError, KInput, KNode, KOutput, plan_from_json, plan_to_json
from svod.view import View, ViewChain

NR = tile()[1]


def _ref(q, k, v, scale):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)


def _arrays(shape_q, n, dv, seed=0):
    rng = np.random.default_rng(seed)
    *batch, m, d = shape_q
    q = rng.standard_normal((*batch, m, d)).astype(np.float32)
    k = rng.standard_normal((*batch, n, d)).astype(np.float32)
    v = rng.standard_normal((*batch, n, dv)).astype(np.float32)
    return q, k, v


def _plan_kinds(t, search: bool = False):
    """The kinds of the kernels realize runs for t (planned by the greedy planner unless
    `search`; the plan stays in the memory cache, so `t.numpy()` runs it)."""
    with svod.search_limits(enabled=search):
        _, exe = engine.plan_for([t])
    return [k.kind for k in exe.plan.kernels]


@pytest.mark.parametrize("batch,m,n,d,dv", [
    ((2,), 16, NR, 8, NR),
    ((3,), 37, 2 * NR, 5, NR),  # rows not a multiple of MR, odd head dim
    ((), 7, NR, 24, 2 * NR),  # no batch axis
    ((2, 3), 13, 3 * NR, 16, NR),  # two batch axes
    ((1,), 1, NR, 1, NR),
])
def test_sdpa_fuses_and_matches_numpy(batch, m, n, d, dv):
    q, k, v = _arrays((*batch, m, d), n, dv)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    assert _plan_kinds(t) == ["attention"]
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, 1 / np.sqrt(d)), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("form", ["scale_after_matmul", "scale_in_softmax", "no_scale", "kt_given"])
def test_pattern_forms(form):
    q, k, v = _arrays((2, 20, 16), 2 * NR, NR, seed=1)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    scale = 0.3
    if form == "scale_after_matmul":
        t = svod.nn.softmax((Q @ K.mT) * scale, axis=-1) @ V
    elif form == "scale_in_softmax":
        s = Q @ K.mT
        t = svod.nn.softmax(s * scale, axis=-1) @ V
    elif form == "no_scale":
        t, scale = svod.nn.softmax(Q @ K.mT, axis=-1) @ V, 1.0
    else:  # k already transposed in memory: the kernel reads kᵀ's buffer through a view
        kt = np.ascontiguousarray(np.swapaxes(k, -1, -2))
        t = svod.nn.softmax((Q @ svod.asarray(kt)) * scale, axis=-1) @ V
    assert _plan_kinds(t) == ["attention"]
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, scale), rtol=2e-5, atol=2e-6)


def _masked_ref(q, k, v, scale, keep=None, add=None):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * scale
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    if add is not None:
        s = s + add
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("m", [NR, 2 * NR + 5])
def test_causal_attention_fuses(m):
    q, k, v = _arrays((2, m, 8), 2 * NR, NR, seed=7)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    t = svod.nn.scaled_dot_product_attention(Q, K, V, is_causal=True)
    assert _plan_kinds(t) == ["attention"]
    keep = np.tril(np.ones((m, 2 * NR), dtype=bool))
    np.testing.assert_allclose(t.numpy(), _masked_ref(q, k, v, 1 / np.sqrt(8), keep=keep), rtol=2e-5, atol=2e-6)


def test_additive_and_boolean_masks_fuse():
    q, k, v = _arrays((3, 10, 8), NR, NR, seed=8)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    rng = np.random.default_rng(9)
    add = rng.standard_normal((3, 10, NR)).astype(np.float32)
    t = svod.nn.scaled_dot_product_attention(Q, K, V, attn_mask=svod.asarray(add))
    assert _plan_kinds(t) == ["attention"]
    np.testing.assert_allclose(t.numpy(), _masked_ref(q, k, v, 1 / np.sqrt(8), add=add), rtol=2e-5, atol=2e-6)
    keep = rng.random((10, NR)) < 0.7
    keep[:, 0] = True  # every row keeps a key
    t = svod.nn.scaled_dot_product_attention(Q, K, V, attn_mask=svod.asarray(keep))
    assert _plan_kinds(t) == ["attention"]
    np.testing.assert_allclose(t.numpy(), _masked_ref(q, k, v, 1 / np.sqrt(8), keep=keep), rtol=2e-5, atol=2e-6)


def test_fully_masked_row_is_nan_like_numpy():
    q, k, v = _arrays((1, 4, 8), NR, NR, seed=10)
    keep = np.ones((4, NR), dtype=bool)
    keep[2] = False
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v),
                                             attn_mask=svod.asarray(keep))
    assert _plan_kinds(t) == ["attention"]
    got = t.numpy()
    assert np.isnan(got[0, 2]).all() and np.isfinite(np.delete(got[0], 2, axis=0)).all()


def test_broadcast_values_across_heads():
    q, k, _ = _arrays((4, 9, 8), NR, NR, seed=2)
    v = np.random.default_rng(3).standard_normal((NR, NR)).astype(np.float32)  # one v for every head
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    assert _plan_kinds(t) == ["attention"]
    np.testing.assert_allclose(t.numpy(), _ref(q, k, np.broadcast_to(v, (4, NR, NR)), 1 / np.sqrt(8)),
                               rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("m,n,d,dv", [(8, NR + 3, 4, NR), (10, 197, 64, 40), (77, 77, 24, 24), (5, 3, 4, 5)])
def test_edge_panels_past_n_and_dv(m, n, d, dv):
    """n and dv that are not multiples of the micro-tile width: zero-padded panels, -inf
    scores past n, a scalar store of the last columns."""
    q, k, v = _arrays((2, m, d), n, dv, seed=m)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v), is_causal=m == n)
    assert _plan_kinds(t) == ["attention"]
    keep = np.tril(np.ones((m, n), dtype=bool)) if m == n else None
    np.testing.assert_allclose(t.numpy(), _masked_ref(q, k, v, 1 / np.sqrt(d), keep=keep), rtol=3e-5, atol=3e-6)


def test_unfusable_patterns_stay_apart_and_correct(monkeypatch):
    q, k, v = _arrays((2, 8, 4), NR, NR)
    scores = svod.asarray(q) @ svod.asarray(k).mT
    t = svod.nn.softmax(scores, axis=-1) @ svod.asarray(v)
    _, exe = engine.plan_for([t, scores])  # the scores are an output too: they must be written
    assert "attention" not in [kk.kind for kk in exe.plan.kernels]
    svod.realize(t, scores)
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, 1.0), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(scores.numpy(), q @ np.swapaxes(k, -1, -2), rtol=1e-5, atol=1e-5)
    monkeypatch.setenv("SVOD_FUSE_ATTENTION", "0")
    engine.reset_caches()
    q, k, v = _arrays((2, 8, 4), NR, NR, seed=5)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    assert len(_plan_kinds(t)) == 3
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, 0.5), rtol=2e-5, atol=2e-6)
    engine.reset_caches()


def test_w5_is_one_kernel_and_correct():
    from svod import workloads

    w = workloads.get("w5_attention")
    arrs = w.make_inputs({"q": (2, 64, 16), "k": (2, 64, 16), "v": (2, 64, 16)})
    t = w.build(**{n: svod.asarray(a) for n, a in arrs.items()})
    assert _plan_kinds(t, search=True) == ["attention"]
    np.testing.assert_allclose(t.numpy(), w.reference(**arrs), rtol=w.rtol, atol=w.atol)


@pytest.mark.parametrize("batch,m,n,d,dv", [((2,), 16, 2 * NR, 8, 2 * NR), ((3,), 37, 64, 5, 32)])
def test_search_fuses_small_chains(batch, m, n, d, dv):
    """At small shapes the two BLAS steps of the unfused chain cost more than the whole
    fused kernel (~15 µs each in a graph program): the search picks the fused kernel."""
    q, k, v = _arrays((*batch, m, d), n, dv, seed=3)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    assert _plan_kinds(t, search=True) == ["attention"]
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v, 1 / np.sqrt(d)), rtol=2e-5, atol=2e-6)


def _fused_plan():
    q, k, v = _arrays((2, 10, 8), NR, NR, seed=4)
    t = svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v))
    with svod.search_limits(enabled=False):
        key, exe = engine.plan_for([t])
    return key, exe.plan, (q, k, v)


def test_plan_json_roundtrip_and_interpreter():
    from svod.codegen.program import InterpretedProgram

    key, plan, (q, k, v) = _fused_plan()
    again = plan_from_json(plan_to_json(plan))
    again.check()
    assert str(again) == str(plan) and again.kernels[0].key() == plan.kernels[0].key()
    kern = plan.kernels[0]
    bufs = {kern.inputs[0].slot: q.reshape(-1), kern.inputs[1].slot: k.reshape(-1),
            kern.inputs[2].slot: v.reshape(-1)}
    InterpretedProgram(kern).run(bufs)  # the numpy path (SVOD_CODEGEN=0, a failed compile)
    np.testing.assert_allclose(bufs[kern.outputs[0].slot].reshape(kern.shape), _ref(q, k, v, 1 / np.sqrt(8)),
                               rtol=2e-5, atol=2e-6)
    assert fuse_attention(plan) is plan  # nothing left to fuse


def test_attention_spec_checks():
    _, plan, _ = _fused_plan()
    good = plan.kernels[0]
    import dataclasses

    with pytest.raises(KernelError, match="one ACC node"):
        dataclasses.replace(good, nodes=good.nodes + (KNode(ACC, good.nodes[0].dtype),)).check()
    bad_spec = dataclasses.replace(good.attention, dv=good.attention.dv + 1)
    with pytest.raises(KernelError, match="does not end in"):
        dataclasses.replace(good, attention=bad_spec).check()
    v = ViewChain((View.contiguous((2, 10, 9)),))
    wrong = (good.inputs[0], good.inputs[1], KInput(good.inputs[2].slot, good.inputs[2].dtype, v))
    with pytest.raises(KernelError, match="viewed as"):
        dataclasses.replace(good, inputs=wrong).check()
    assert isinstance(good.attention, AttentionSpec) and isinstance(good.outputs[0], KOutput)
    assert isinstance(good, Kernel) and good.kind == "attention"


def test_explain_shows_the_plan_realize_runs():
    """The search prices plans after the lowering's passes: its pick is the attention
    kernel realize runs, and no second "executed" plan exists."""
    from svod import workloads

    w = workloads.get("w5_attention")
    arrs = w.make_inputs({"q": (2, 64, 16), "k": (2, 64, 16), "v": (2, 64, 16)})
    e = svod.explain(w.build(**{n: svod.asarray(a) for n, a in arrs.items()}))
    assert [kk.kind for kk in e.plan.kernels] == ["attention"]
    assert [kk.key() for kk in e.searched.kernels] == [kk.key() for kk in e.plan.kernels]
    assert e.variants[0].plan.kernels[0].kind == "attention" and not hasattr(e, "executed")
    text = str(e)
    assert "not the search's pick" not in text and "attention" in e.variants_table()


def test_self_attention_reads_one_buffer_three_ways():
    """q, k and v the same tensor (one slot read as q, as kᵀ's view and as v); float64
    attention stays unfused (the kernel is float32) and right."""
    x = np.random.default_rng(11).standard_normal((2, 3 * NR, NR)).astype(np.float32)  # v's width: NR
    X = svod.asarray(x)
    t = svod.nn.scaled_dot_product_attention(X, X, X, is_causal=True)
    assert _plan_kinds(t) == ["attention"]
    keep = np.tril(np.ones((3 * NR, 3 * NR), dtype=bool))
    np.testing.assert_allclose(t.numpy(), _masked_ref(x, x, x, 1 / np.sqrt(NR), keep=keep), rtol=2e-5, atol=2e-6)
    X64 = svod.asarray(x.astype(np.float64))
    t64 = svod.nn.scaled_dot_product_attention(X64, X64, X64)
    assert "attention" not in _plan_kinds(t64)
    np.testing.assert_allclose(t64.numpy(), _masked_ref(x, x, x, 1 / np.sqrt(NR)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mask", [False, True])
def test_scores_written_by_a_kernel_of_their_own_still_fuse(mask):
    """A boundary chosen inside t (the scaled or masked scores materialised by an
    elementwise kernel between the matmul and the softmax) still gives one attention
    kernel, compiled and interpreted equal to numpy."""
    from svod.codegen.program import compile_kernel
    from svod.interp import run_plan
    from svod.ir import Ops
    from svod.key import compact
    from svod.lower import PLAN_PASSES, greedy_boundaries, lower

    q, k, v = _arrays((2, 10, 8), NR, NR, seed=7)
    Q, K, V = svod.asarray(q), svod.asarray(k), svod.asarray(v)
    s = (Q @ K.mT) * 0.3
    keep = np.tril(np.ones((10, NR), dtype=bool))
    if mask:
        s = svod.where(svod.asarray(keep), s, -np.inf)
    key, b = compact([(svod.nn.softmax(s, axis=-1) @ V).uop])
    op = Ops.WHERE if mask else Ops.MUL  # the last op of t before the softmax
    top = next(i for i, n in enumerate(key.nodes) if n.op is op and n.shape == (2, 10, NR))
    choice = greedy_boundaries(key) | {top}
    unfused = lower(key, choice, passes=PLAN_PASSES[:1])
    assert [kk.kind for kk in unfused.kernels] == ["blas", "elementwise", "rowwise", "blas"]
    plan = lower(key, choice)
    assert [kk.kind for kk in plan.kernels] == ["attention"]
    want = _masked_ref(q, k, v, 0.3, keep=keep if mask else None)
    np.testing.assert_allclose(run_plan(plan, b.arrays)[0], want, rtol=2e-5, atol=2e-6)
    kern = plan.kernels[0]
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(b.arrays)}
    bufs[kern.outputs[0].slot] = np.empty(int(np.prod(kern.outputs[0].shape)), np.float32)
    compile_kernel(kern).run(bufs)
    np.testing.assert_allclose(bufs[kern.outputs[0].slot].reshape(want.shape), want, rtol=2e-5, atol=2e-6)
