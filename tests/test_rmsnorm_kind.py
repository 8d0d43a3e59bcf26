"""The row-prologue matmul kind (search/kinds.py `rmsnorm`, svod.lower.rmsnorm,
svod.codegen.rmsnorm): ``(x * rsqrt(mean(x²) + eps) * g) @ W (+ b, activation)`` as one
kernel whose GEMM computes the normalised x while packing A — against numpy and against
the row kernel + GEMM plan it replaces: odd shapes around the micro-tile, float32 and
float64, with and without the weight g and a bias, NaN and ±inf rows; the layer-norm
variant; the rule, the switch, the interpreter path, the JSON form, the spec checks, the
search's choice and a bucket plan at n rows.

The kernel tests force the kind's choice: the graph lowered with only its inputs and its
output materialised (`_forced`), which is what the extraction's "inline A" choice lowers
to. Whether the search picks it is the cost model's call (`test_search_picks_the_kind`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
from svod.ir import Ops
from svod.kernel import ACC, KernelError, KNode, plan_from_json, plan_to_json
from svod.key import compact


def _arrays(m, k, n, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(dtype), (rng.random(k) + 0.5).astype(dtype),
            (rng.standard_normal((k, n)) / np.sqrt(k)).astype(dtype), rng.standard_normal(n).astype(dtype))


def _graph(arrs, weight=True, bias=False, act=None):
    x, g, w, b = (svod.asarray(a) for a in arrs)
    with svod.eager_mode(False):
        y = svod.nn.rms_norm(x, x.shape[-1:], g if weight else None) @ w
        if bias:
            y = y + b
        if act is not None:
            y = act(y)
    return y


def _ref(arrs, weight=True, bias=False, relu=False):
    x, g, w, b = (a.astype(np.float64) for a in arrs)
    with np.errstate(all="ignore"):
        a = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)
        out = (a * g if weight else a) @ w + (b if bias else 0)
        return np.maximum(out, 0) if relu else out


def _forced(t, keep=()):
    """(key, bindings, plan) of t lowered with only its inputs, its output and `keep`
    materialised: the choice that computes A while packing it."""
    from svod.lower import lower

    key, b = compact([t.uop])
    choice = {i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER} | set(key.outputs) | set(keep)
    return key, b, lower(key, choice)


def _native(plan, arrays, threads=1):
    """The plan's output, every kernel compiled (`compile_kernel`)."""
    import warnings

    from svod.codegen.program import compile_kernel

    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for k in plan.kernels:
        for o in k.outputs:
            bufs[o.slot] = np.empty(int(np.prod(o.shape)), o.dtype.np)
        with warnings.catch_warnings():
            warnings.simplefilter("error", svod.SvodWarning)  # a failed compile (the interpreter) fails the test
            compile_kernel(k).run(bufs, threads)
    slot, shape = plan.outputs[0]
    return bufs[slot].reshape(shape)


def _a_operand(key):
    """The node the matmul reads as its A operand (the normalised x)."""
    mm = max(i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL)
    return key.nodes[mm].src[0]


def _as_gemm(plan):
    """The plan with every product the generated GEMM (not the BLAS step)."""
    ks = tuple(dataclasses.replace(k, matmul=dataclasses.replace(k.matmul, library=False)) if k.matmul else k
               for k in plan.kernels)
    return dataclasses.replace(plan, kernels=ks)


def _tol(dtype):  # the GEMM tolerance (sums in another order than numpy's)
    return dict(rtol=3e-5, atol=3e-5) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)


# ----------------------------------------------------------------------------- the kernel


@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 45), weight=st.booleans(),
       bias=st.booleans(), relu=st.booleans(), dtype=st.sampled_from([np.float32, np.float64]),
       bad=st.sampled_from(["none", "nan", "inf", "-inf"]))
def test_kernel_matches_numpy_and_the_two_kernel_plan(m, k, n, weight, bias, relu, dtype, bad):
    """Odd sizes around the micro-tile (MR rows, NR columns) and the K blocks: the forced
    kind's kernel, compiled (one and two threads) and interpreted, equals numpy at the
    GEMM tolerance — a NaN or ±inf in a row of x gives that row numpy's NaNs — and the row
    kernel + generated GEMM plan bit for bit (the same row sums, the same products)."""
    from svod.interp import run_plan

    arrs = list(_arrays(m, k, n, dtype, seed=m * 7 + k))
    if bad != "none":
        arrs[0][m // 2, (3 * k) // 4] = float(bad)
    t = _graph(arrs, weight, bias, svod.nn.relu if relu else None)
    key, b, plan = _forced(t)
    if k > 1:  # a row of one element: the frontend's mean over it is no row reduction
        assert [q.kind for q in plan.kernels] == ["rmsnorm"]
    want = _ref(arrs, weight, bias, relu)
    got = _native(plan, b.arrays)
    assert got.dtype == dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **_tol(dtype))
    np.testing.assert_array_equal(_native(plan, b.arrays, threads=2), got)
    interp = run_plan(plan, b.arrays)[0]
    np.testing.assert_allclose(interp[fin], want[fin], **_tol(dtype))
    _, _, two = _forced(t, keep=(_a_operand(key),))
    assert "rmsnorm" not in [q.kind for q in two.kernels]
    np.testing.assert_array_equal(got, _native(_as_gemm(two), b.arrays))


@pytest.mark.parametrize("m,k,n", [(1, 5, 1), (6, 384, 64), (13, 1000, 33), (700, 64, 1400), (97, 769, 130)])
def test_tile_and_k_block_edges(m, k, n):
    """m at and around the row tiles, k over several K blocks (KC ~384), n over several
    column tiles (each unit's row statistics computed once per call): numpy's result and
    the two-kernel plan's bits, on two threads."""
    arrs = _arrays(m, k, n, seed=m + n)
    key, b, plan = _forced(_graph(arrs, bias=True))
    assert [q.kind for q in plan.kernels] == ["rmsnorm"]
    got = _native(plan, b.arrays, threads=2)
    np.testing.assert_allclose(got, _ref(arrs, bias=True), **_tol(np.float32))
    _, _, two = _forced(_graph(arrs, bias=True), keep=(_a_operand(key),))
    np.testing.assert_array_equal(got, _native(_as_gemm(two), b.arrays))


def test_layer_norm_variant_and_a_residual_epilogue():
    """The layer norm (mean, variance by two passes, weight and bias) before a projection
    with a GELU and a residual — the `residual` workload's block — is the same kind: three
    row passes in the statistics, the epilogue reading x's rows."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 48)).astype(np.float32)
    g, beta = (rng.random(48) + 0.5).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    w, bias = (rng.standard_normal((48, 48)) / 7).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    X = svod.asarray(x)
    with svod.eager_mode(False):
        t = X + svod.nn.gelu(svod.nn.layer_norm(X, (48,), svod.asarray(g), svod.asarray(beta)) @ svod.asarray(w)
                             + svod.asarray(bias), approximate="tanh")
    key, b, plan = _forced(t)
    assert [q.kind for q in plan.kernels] == ["rmsnorm"]
    xd = x.astype(np.float64)
    ln = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * g + beta
    h = ln @ w + bias
    want = xd + 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(_native(plan, b.arrays), want, rtol=3e-5, atol=3e-5)


@pytest.mark.parametrize("lead,k,n", [((2, 5), 8, 3), ((2, 3, 7), 33, 20), ((4, 9), 16, 16)])
def test_a_batch_of_rows_times_one_weight(lead, k, n):
    """``rmsnorm(x3) @ W`` with x of shape (b..., m, k) and W shared by the batch (the
    transformer's form): the product of all b·m rows, one kernel, its output (b..., m, n);
    with a residual read over the batch too (k == n). Numpy's result, bit for bit the two
    kernel plan's on two threads."""
    rng = np.random.default_rng(len(lead) + k)
    x = rng.standard_normal(lead + (k,)).astype(np.float32)
    g, w = (rng.random(k) + 0.5).astype(np.float32), (rng.standard_normal((k, n)) / 4).astype(np.float32)
    X = svod.asarray(x)
    with svod.eager_mode(False):
        t = svod.nn.rms_norm(X, (k,), svod.asarray(g)) @ svod.asarray(w)
        if k == n:
            t = X + svod.nn.relu(t)
    key, b, plan = _forced(t)
    assert [q.kind for q in plan.kernels] == ["rmsnorm"]
    xd = x.astype(np.float64)
    want = (xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6) * g) @ w
    if k == n:
        want = xd + np.maximum(want, 0)
    got = _native(plan, b.arrays, threads=2)
    assert got.shape == lead + (n,)
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=3e-5)
    _, _, two = _forced(t, keep=(_a_operand(key),))
    np.testing.assert_array_equal(got, _native(_as_gemm(two), b.arrays))


def test_strided_and_transposed_operands():
    """x a column slice of a wider array, W read transposed (``x @ w.T``): the statistics
    and the packing read x through its view, the GEMM packs the transposed B."""
    rng = np.random.default_rng(4)
    xbig = rng.standard_normal((21, 50)).astype(np.float32)
    wt = (rng.standard_normal((19, 30)) / 5).astype(np.float32)
    g = (rng.random(30) + 0.5).astype(np.float32)
    with svod.eager_mode(False):
        t = svod.nn.rms_norm(svod.asarray(xbig)[:, 10:40], (30,), svod.asarray(g)) @ svod.asarray(wt).mT
    key, b, plan = _forced(t)
    assert [q.kind for q in plan.kernels] == ["rmsnorm"]
    x = xbig[:, 10:40].astype(np.float64)
    want = (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g) @ wt.T.astype(np.float64)
    np.testing.assert_allclose(_native(plan, b.arrays), want, rtol=3e-5, atol=3e-5)


def test_chains_the_kind_leaves_alone():
    """A batched product (a weight per batch index), a reduction over another axis, a
    softmax of materialised scores (the attention kind's chain): no rmsnorm kernel,
    numpy's results."""
    rng = np.random.default_rng(2)
    x3 = rng.standard_normal((2, 5, 6)).astype(np.float32)
    w3 = rng.standard_normal((2, 6, 3)).astype(np.float32)  # a weight per batch index: a batched product
    w = w3[0]
    with svod.eager_mode(False):
        t = svod.nn.rms_norm(svod.asarray(x3), (6,)) @ svod.asarray(w3)
    _, b, plan = _forced(t)
    assert "rmsnorm" not in [q.kind for q in plan.kernels]
    x3d = x3.astype(np.float64)
    np.testing.assert_allclose(_native(plan, b.arrays), x3d / np.sqrt((x3d ** 2).mean(-1, keepdims=True) + 1e-6) @ w3,
                               rtol=3e-5, atol=3e-5)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    with svod.eager_mode(False):
        X = svod.asarray(x)
        a = X - svod.mean(X, axis=0, keepdims=True)  # a column statistic: not a row prologue
        t = a @ svod.asarray(w)
    _, b, plan = _forced(t)
    assert "rmsnorm" not in [q.kind for q in plan.kernels]
    np.testing.assert_allclose(_native(plan, b.arrays), (x - x.mean(0, keepdims=True)) @ w, rtol=3e-5, atol=3e-5)
    q, kk, v = (rng.standard_normal((9, 8)).astype(np.float32) for _ in range(3))
    with svod.eager_mode(False):
        s = svod.asarray(q) @ svod.asarray(kk).mT
        t = svod.nn.softmax(s, axis=-1) @ svod.asarray(v)
    key, b, _ = _forced(t)
    scores = next(i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL)
    _, _, plan = _forced(t, keep=(scores,))  # the attention kind's chain with its scores materialised
    assert "rmsnorm" not in [q.kind for q in plan.kernels]
    sd = q.astype(np.float64) @ kk.T
    e = np.exp(sd - sd.max(-1, keepdims=True))
    np.testing.assert_allclose(_native(plan, b.arrays), e / e.sum(-1, keepdims=True) @ v, rtol=3e-5, atol=3e-5)


# ----------------------------------------------------------------------------- the form


def test_json_roundtrip_interpreter_and_text():
    from svod.codegen.program import InterpretedProgram

    arrs = _arrays(7, 5, 9)
    key, b, plan = _forced(_graph(arrs, bias=True))
    again = plan_from_json(plan_to_json(plan))
    again.check()
    assert str(again) == str(plan) and again.kernels[0].key() == plan.kernels[0].key()
    kern = plan.kernels[0]
    assert "[rmsnorm]" in str(kern) and " rmsnorm(%" in str(kern)
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(b.arrays)}
    InterpretedProgram(kern).run(bufs)  # the numpy path (SVOD_CODEGEN=0, a failed compile)
    np.testing.assert_allclose(bufs[kern.outputs[0].slot].reshape(7, 9), _ref(arrs, bias=True), rtol=3e-5, atol=3e-5)


def test_spec_checks():
    arrs = _arrays(7, 5, 9)
    _, _, plan = _forced(_graph(arrs, bias=True))
    good = plan.kernels[0]
    good.check()
    rs = good.rmsnorm
    with pytest.raises(KernelError, match="ACC"):
        dataclasses.replace(good, nodes=good.nodes + (KNode(ACC, good.nodes[0].dtype),)).check()
    with pytest.raises(KernelError, match="2-D over"):
        dataclasses.replace(good, rmsnorm=dataclasses.replace(rs, n=rs.n + 1)).check()
    with pytest.raises(KernelError, match="viewed as"):
        dataclasses.replace(good, rmsnorm=dataclasses.replace(rs, k=rs.k + 1)).check()
    with pytest.raises(KernelError, match="outside its part"):  # part 2 reading part 1 directly
        nodes = list(good.nodes)
        nodes[-1] = dataclasses.replace(nodes[-1], src=(0,) + nodes[-1].src[1:])
        dataclasses.replace(good, nodes=tuple(nodes)).check()
    with pytest.raises(KernelError, match="split"):
        dataclasses.replace(good, rmsnorm=dataclasses.replace(rs, split=0)).check()


# ----------------------------------------------------------------------------- the search


def test_rule_fact_and_the_switch(monkeypatch):
    from search import kinds
    from svod.flags import PLAN_SWITCHES
    from svod.lower import lower

    arrs = _arrays(8, 6, 10)
    key, _ = compact([_graph(arrs).uop])
    mm = max(i for i, n in enumerate(key.nodes) if n.op is Ops.MATMUL)

    def facts():
        return [f for i in range(len(key.nodes)) for f in kinds._facts(key, i, None) if f.startswith("(KindRmsnormAt")]

    assert facts() == [f"(KindRmsnormAt {mm} {_a_operand(key)})"]
    monkeypatch.setenv("SVOD_FUSE_RMSNORM", "0")
    assert not facts()
    choice = {i for i, n in enumerate(key.nodes) if n.op is Ops.BUFFER} | set(key.outputs)
    assert "rmsnorm" not in [k.kind for k in lower(key, choice).kernels]  # the lowering builds none either
    assert ("SVOD_FUSE_RMSNORM", "1") in PLAN_SWITCHES


def test_search_picks_the_kind_and_explain_names_it():
    """A projection of a normalised x whose GEMM is short (n = 96: one column tile) saves
    the row kernel's write and the GEMM's read of the normalised x: the extraction picks
    the kind, explain says so, and the result is numpy's."""
    arrs = _arrays(384, 256, 96, seed=1)
    t = _graph(arrs, bias=True)
    e = svod.explain(t)
    assert [k.kind for k in e.plan.kernels] == ["rmsnorm"], e.variants_table()
    lines = [ln for ln in e.variants_table().splitlines() if ln.startswith("kernel kind rmsnorm")]
    assert lines and lines[0].startswith("kernel kind rmsnorm: chosen"), e.variants_table()
    np.testing.assert_allclose(t.numpy(), _ref(arrs, bias=True), rtol=3e-5, atol=3e-5)


def test_decode_shape_keeps_the_blas_plan():
    """A few rows against a wide weight (decode-like, m = 8): the BLAS step is priced below
    the generated GEMM, so the extraction keeps row kernel + BLAS (the kind is one GEMM)."""
    arrs = _arrays(8, 1024, 4096, seed=2)
    t = _graph(arrs)
    e = svod.explain(t)
    assert "rmsnorm" not in [k.kind for k in e.plan.kernels], e.variants_table()
    np.testing.assert_allclose(t.numpy(), _ref(arrs), rtol=1e-4, atol=1e-4)


def test_a_bucket_plan_runs_n_rows_through_the_kind():
    """A bucket plan holding the kind's kernel (x's rows dynamic) runs n rows through the
    kernel's rows variant (its GEMM's last row tile and its row statistics stop at row
    n): each size's result has n rows and equals numpy's (a NaN row, ±inf included), no
    new compile for a new size in the bucket."""
    from svod import engine

    rng = np.random.default_rng(8)
    g = (rng.random(24) + 0.5).astype(np.float32)
    w = (rng.standard_normal((24, 40)) / 5).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)

    def f(x):
        return svod.nn.rms_norm(x, (24,), svod.asarray(g)) @ svod.asarray(w) + svod.asarray(bias)

    def data(n):
        x = (rng.standard_normal((n, 24)) * 3).astype(np.float32)
        x[1, 2], x[2, 3] = np.nan, np.inf
        return x

    def ref(x):
        xd = x.astype(np.float64)
        with np.errstate(all="ignore"):
            return (xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-6) * g) @ w + bias

    def check(x):
        got = f(svod.asarray(x)).numpy()
        want = ref(x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        fin = np.isfinite(want)
        np.testing.assert_allclose(got[fin], want[fin], rtol=3e-5, atol=3e-5)

    for n in (100, 101):  # the exact plan, then the bucket 104's plan
        check(data(n))
    _, exe = engine.plan_for([f(svod.asarray(data(102)))])
    if "rmsnorm" not in [k.kind for k in exe.plan.kernels]:
        pytest.skip(f"the search did not choose the kind here: {[k.kind for k in exe.plan.kernels]}")
    s0 = svod.stats()
    for n in (102, 97, 103, 99):
        check(data(n))
    s1 = svod.stats()
    assert (s1["searches"], s1["kernels_compiled"]) == (s0["searches"], s0["kernels_compiled"])
    rp = exe._gp.__dict__.get("_rows_program") if exe._gp is not None else None
    assert rp is not None and rp.ok and rp.runs >= 4, None if rp is None else rp.reason
    assert [sp for sp in rp.specs.values() if sp[0] == "tiles"], rp.specs


# ----------------------------------------------------------------------------- the greedy planner


def _workload_key(name, small):
    from svod import workloads

    w = workloads.get(name)
    arrs = {k: np.zeros(s, np.float32) for k, s in (w.small_shapes if small else w.default_shapes).items()}
    with svod.eager_mode(False):
        t = w.build(**w.tensors(arrs))
    return compact([t.uop])[0]


def test_greedy_planner_prices_the_kinds():
    """Without a cost model the greedy plan holds no mlp/rmsnorm kernel (their operands are
    greedy boundaries: nothing unpriced); with one it keeps each site's kind where the
    model prices the plan holding it cheaper — and only then."""
    from svod.costing import Machine, plan_prices
    from svod.lower import greedy_boundaries, lower
    from svod.lower.kindsites import kind_sites
    from svod.plan_greedy import plan_greedy
    from svod.planner import cost_model

    model = cost_model()

    def cost(p):
        return sum(q.seconds for q in plan_prices(p, model, Machine.host()))

    # kind: the kind the model must choose (it prices it 10-20x cheaper at the small shapes);
    # None: never (W4 at full size); "either": the margin is under 1% (residual at full
    # size, where the two-kernel plan's GEMM reads A in place): the choice must only agree
    # with the model's prices, checked below
    for name, small, kind in (("residual", False, "either"), ("residual", True, "rmsnorm"), ("w4_mlp", True, "mlp"),
                              ("w4_mlp", False, None)):
        key = _workload_key(name, small)
        plain = plan_greedy(key)
        assert not {"mlp", "rmsnorm"} & {k.kind for k in plain.kernels}, (name, small)
        priced = plan_greedy(key, model)
        kinds = [k.kind for k in priced.kernels]
        if kind == "either":
            (site,) = [s for s in kind_sites(key) if s.kind == "rmsnorm"]
            with_kind = cost(lower(key, greedy_boundaries(key) - {site.operand} - set(site.also)))
            assert ("rmsnorm" in kinds) == (with_kind < cost(plain)), (name, kinds, with_kind, cost(plain))
            continue
        if kind is None:
            assert priced.kernels == plain.kernels, (name, kinds)
            continue
        assert kind in kinds, (name, small, kinds)
        assert cost(priced) < cost(plain)
        (site,) = [s for s in kind_sites(key) if s.kind == kind]
        assert site.operand in greedy_boundaries(key) or kind == "mlp"
        assert [k.kind for k in lower(key, greedy_boundaries(key) - {site.operand} - set(site.also)).kernels] == kinds


def test_search_off_realizes_the_kind(monkeypatch):
    """SVOD_SEARCH=0 (the greedy planner for every graph) runs the kind where the cost model
    prefers it, with numpy's result."""
    from svod import engine

    monkeypatch.setenv("SVOD_SEARCH", "0")
    arrs = _arrays(390, 256, 96, seed=5)  # a shape no other test plans (plans are cached by structure)
    t = _graph(arrs, bias=True)
    _, exe = engine.plan_for([t])
    # the greedy boundaries keep the product's bias in a kernel of its own
    assert [k.kind for k in exe.plan.kernels] == ["rmsnorm", "elementwise"]
    np.testing.assert_allclose(t.numpy(), _ref(arrs, bias=True), rtol=3e-5, atol=3e-5)
