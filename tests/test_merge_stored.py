"""A materialised value read element for element by an elementwise consumer over the
same space is computed once, stored, and used in registers by the consumer in the same
kernel (`svod.lower.merge`, the producer -> consumer half of the sibling merge pass)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import svod
from svod import engine
from svod.costing import plan_seconds
from svod.interp import eval_key, run_plan
from svod.kernel import KernelError
from svod.key import compact
from svod.lower import greedy_boundaries, lower
from svod.lower import merge as merge_mod

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # numpy warns on the special values


@pytest.fixture(autouse=True)
def _merge_stored_on(isolated, monkeypatch):
    """The merge is opt-in (svod.lower.merge.stored_merging): on here, in a fresh store."""
    monkeypatch.setenv("SVOD_MERGE_STORED", "1")

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.25, 3e38, -1e-40, 7.0], np.float32)


def _vals(n, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n).astype(np.float32)
    v[: min(n, SPECIAL.size)] = SPECIAL[: min(n, SPECIAL.size)]
    return v


def _plan(outs, search=False):
    with svod.search_limits(enabled=search):
        _, exe = engine.plan_for(list(outs))
    return exe.plan


def _same(got, want):
    """Bit-for-bit as numpy: values, NaN positions and the sign of zeros."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":
        assert np.array_equal(np.signbit(got), np.signbit(want))


def _check(fn, arrays, kernels, search=False):
    outs = fn(*[svod.asarray(a) for a in arrays])
    plan = _plan(outs, search)
    assert len(plan.kernels) == kernels, str(plan)
    want = fn(*arrays)
    for o, w in zip(outs, want):
        _same(o.numpy(), w)
    return plan


def _out_and_scaled(x):
    a = x * np.float32(2.0) + np.float32(-0.0)
    return a, a / np.float32(3.0)


@pytest.mark.parametrize("n", [1, 7, 100, 4099])
def test_an_output_and_its_elementwise_consumer_are_one_kernel(n):
    plan = _check(_out_and_scaled, [_vals(n)], 1)
    (k,) = plan.kernels
    assert k.kind == "elementwise" and len(k.outputs) == 2
    # the consumer uses the value in registers: no kernel reads a slot it writes
    assert not {i.slot for i in k.inputs} & {o.slot for o in k.outputs}


def test_the_switch_keeps_two_kernels(monkeypatch):
    x = svod.asarray(_vals(33))
    key, b = compact([t.uop for t in _out_and_scaled(x)])
    merged = lower(key, greedy_boundaries(key))
    monkeypatch.setenv("SVOD_MERGE_STORED", "0")
    apart = lower(key, greedy_boundaries(key))
    assert (len(merged.kernels), len(apart.kernels)) == (1, 2)
    for plan in (merged, apart):
        for got, want in zip(run_plan(plan, b.arrays), eval_key(key, b.arrays)):
            _same(got, want)


def test_bcast_sum_is_one_two_output_kernel():
    from svod.bench.algebra import bcast_sum

    v = _vals(256, seed=3)
    v[np.isinf(v) | (np.abs(v) > 1e30)] = 1.0  # finite sums: svod multiplies by the count, numpy adds
    outs = bcast_sum(svod, svod.asarray(v))
    plan = _plan(outs, search=True)
    assert len(plan.kernels) == 1 and len(plan.kernels[0].outputs) == 2, str(plan)
    want = bcast_sum(np, v)
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o.numpy(), w, rtol=1e-5, equal_nan=True)


def test_a_chain_of_outputs_is_one_kernel():
    def f(x, y):
        a = x + y
        b = np.sqrt(a) if isinstance(a, np.ndarray) else svod.sqrt(a)
        c = b * y - a
        return a, b, c

    with np.errstate(invalid="ignore"):
        _check(f, [_vals(50).reshape(5, 10), _vals(50, seed=1).reshape(5, 10)], 1)


def test_a_shared_temporary_read_by_two_consumers():
    def f(x):
        t = x * x + np.float32(1.0)  # read by two outputs: materialised when its cone is heavy, else inlined
        return t - x, t * x

    _check(f, [_vals(64).reshape(8, 8)], 1)


def test_a_transposed_read_stays_a_second_kernel():
    def f(x):
        a = x * np.float32(2.0)
        return a, (a.T if isinstance(a, np.ndarray) else a.T) + np.float32(1.0)

    plan = _check(f, [_vals(48).reshape(6, 8)], 2)
    assert any(i.slot in {o.slot for o in plan.kernels[0].outputs} for i in plan.kernels[1].inputs)


def test_a_broadcast_read_stays_a_second_kernel():
    def f(v, m):
        a = v * np.float32(2.0)
        return a, a[None, :] + m

    _check(f, [_vals(8), _vals(48, seed=2).reshape(6, 8)], 2)


def test_a_reduction_of_the_output_still_runs_after_it():
    def f(x):
        a = x * np.float32(2.0)
        s = a.sum(axis=1, keepdims=True)
        return a, a - np.float32(1.0), s

    outs = f(svod.asarray(_vals(60).reshape(6, 10)))
    plan = _plan(outs)
    want = f(_vals(60).reshape(6, 10))
    assert len(plan.kernels) <= 2, str(plan)
    for o, w in zip(outs, want[:2]):
        _same(o.numpy(), w)
    np.testing.assert_allclose(outs[2].numpy(), want[2], rtol=1e-5, equal_nan=True)


def test_bool_and_int_outputs():
    def f(x, y):
        a = x > np.float32(0.0)
        return a, a & (y > np.float32(0.5))

    _check(f, [_vals(40), _vals(40, seed=4)], 1)

    def g(i):
        a = i * 3
        return a, a + 1

    _check(g, [np.arange(-20, 20, dtype=np.int64)], 1)


def test_the_merged_kernel_is_priced_cheaper():
    from costmodels.analytic import CalibratedModel

    x = svod.asarray(_vals(1 << 16))
    key, _ = compact([t.uop for t in _out_and_scaled(x)])
    merged = lower(key, greedy_boundaries(key))
    apart = lower(key, greedy_boundaries(key), merge_siblings=False)
    model = CalibratedModel()
    assert len(merged.kernels) == 1 and len(apart.kernels) == 2
    assert plan_seconds(merged, model) < plan_seconds(apart, model)


def test_a_non_identity_read_inside_a_group_raises():
    x = svod.asarray(_vals(48).reshape(6, 8))
    a = x * np.float32(2.0)
    key, _ = compact([a.uop, (a.T + np.float32(1.0)).uop])
    plan = lower(key, greedy_boundaries(key))
    assert len(plan.kernels) == 2
    first, second = plan.kernels
    # a transposed read of the first kernel's output: a shape of its own, so force one
    second = dataclasses.replace(second, shape=first.shape, inputs=tuple(
        dataclasses.replace(i, view=i.view.reshape(first.shape)) for i in second.inputs))
    with pytest.raises(KernelError, match="identity"):
        merge_mod._concat_kernels([first, second])


def test_the_depth_cut_stays_a_cut(monkeypatch):
    """A chain the lowering cuts every MAX_DEPTH ops is not glued back together: a merged
    kernel's expression stays within MAX_DEPTH (compile time bounded)."""
    from svod.lower import build as build_mod

    y = svod.asarray(_vals(32).reshape(4, 8))
    want = _vals(32).reshape(4, 8)
    for i in range(30):
        y = y * 1.01 if i % 2 else svod.sin(y)
        want = want * np.float32(1.01) if i % 2 else np.sin(want)
    key, b = compact([y.uop])
    monkeypatch.setattr(build_mod, "MAX_DEPTH", 8)
    plan = lower(key, greedy_boundaries(key))
    unmerged = lower(key, greedy_boundaries(key), merge_siblings=False)
    assert len(plan.kernels) >= 3
    deepest = max(max(merge_mod._depths(k, {})) for k in unmerged.kernels)  # the build's cut: 8 graph levels
    assert all(max(merge_mod._depths(k, {})) <= deepest for k in plan.kernels)
    monkeypatch.setattr(build_mod, "MAX_DEPTH", 200)
    assert len(lower(key, greedy_boundaries(key)).kernels) == 1
    np.testing.assert_allclose(run_plan(plan, b.arrays)[0], eval_key(key, b.arrays)[0], rtol=1e-6)



def test_a_temporary_only_its_consumer_reads_stays_a_boundary():
    """A temporary the planner (or the user, `contiguous()`) materialised and only an
    elementwise consumer reads element for element is not merged: its store would be
    dead, and the boundary is what was asked for. Also an output of the graph: stored
    anyway, so merged."""
    x = svod.asarray(_vals(64))
    t = svod.exp(x * 2.0)
    y = t + 1.0
    key, b = compact([y.uop])
    cut = {i for i, n in enumerate(key.nodes) if n.op.name == "EXP"}  # materialise t
    plan = lower(key, cut)
    assert len(plan.kernels) == 2
    _same(run_plan(plan, b.arrays)[0], eval_key(key, b.arrays)[0])
    key2, b2 = compact([y.uop, t.uop])
    (k2,) = lower(key2, {i for i, n in enumerate(key2.nodes) if n.op.name == "EXP"}).kernels
    assert len(k2.outputs) == 2
    for got, want in zip(run_plan(lower(key2, set()), b2.arrays), eval_key(key2, b2.arrays)):
        _same(got, want)


def test_a_temporary_also_read_another_way_is_merged():
    """t is read transposed by one consumer (so it is stored) and element for element by
    another: that one uses it in registers in t's kernel."""
    def f(x):
        t = x * np.float32(2.0) + np.float32(1.0)
        return (t - x) * np.float32(3.0), (t.T if isinstance(t, np.ndarray) else t.T) * np.float32(0.5)

    xs = _vals(64).reshape(8, 8)
    outs = f(svod.asarray(xs))
    key, b = compact([o.uop for o in outs])
    cut = {i for i, n in enumerate(key.nodes) if n.op.name == "ADD"}
    plan = lower(key, cut)
    assert len(plan.kernels) == 2 and len(plan.kernels[0].outputs) == 2, str(plan)
    for got, want in zip(run_plan(plan, b.arrays), f(xs)):
        _same(got, want)

def test_stored_outputs_are_priced_between_fused_and_apart():
    """Materialising an output's consumer chain costs stores, not kernels: the calibrated
    model prices the merged kernel (the outputs stored, used in registers) below the
    separate kernels."""
    from costmodels.analytic import CalibratedModel

    a, b = svod.asarray(_vals(1 << 18)), svod.asarray(_vals(1 << 18, seed=5))
    u = a * b + 1.0
    e = svod.exp(u)
    y = e * 0.5
    key, _ = compact([u.uop, e.uop, y.uop])
    merged, apart = lower(key, set()), lower(key, set(), merge_siblings=False)
    assert [len(p.kernels) for p in (merged, apart)] == [1, 3]
    model = CalibratedModel()
    assert plan_seconds(merged, model) < plan_seconds(apart, model)

def test_explain_says_the_stored_value_is_used_in_the_same_kernel():
    from svod.boundaries import why_not_fused

    x = svod.asarray(_vals(48).reshape(6, 8))
    a = svod.exp(x) * 2.0
    bs = why_not_fused(svod.explain(a, a + 1.0))
    assert [b.reason for b in bs] == ["output"]
    assert "used in registers by its consumer in the same kernel" in bs[0].detail
    x2 = svod.asarray(_vals(48).reshape(6, 8))
    a2 = svod.exp(x2) * 2.0
    bs2 = why_not_fused(svod.explain(a2, a2.T + 1.0))  # a transposed read: two kernels
    assert bs2 and all("same kernel" not in b.detail for b in bs2)
