"""Differential tests of the programs issue 30's algebra rewrites (tests/programs.py's
`algebra_programs`) against numpy, in svod's default algebra mode and in the `exact` mode.

The tolerance (the documented bound for float32 programs; docs/einsum.md): every finite
result within ``TOL * scale`` of numpy's float64 evaluation of the same program on the same
float32 inputs, where `scale` is the largest finite magnitude among all the program's
intermediate values (numpy's). ``TOL = 1e-4`` is ~840 float32 ulps of that scale: a
reassociated sum of n terms errs by at most ~n·eps·Σ|terms|, and these programs sum at
most ~80 terms of at most the scale each. NaN and ±inf must sit where numpy's are (a
rewrite may never move them), including -inf against +inf.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import svod
from svod.config import SearchLimits
from tests.programs import MOTIFS, _motif, _motif_shapes, algebra_programs

TOL = 1e-4
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
HAS_ALGEBRA_MODE = "algebra" in SearchLimits.__dataclass_fields__


def _reference(inputs, build):
    trace: list = []
    with np.errstate(all="ignore"):
        want = build([a.astype(np.float64) for a in inputs], xp=np, trace=trace)
    finite = [np.abs(t[np.isfinite(t)]) for t in map(np.asarray, trace)]
    scale = max([float(f.max()) for f in finite if f.size] + [1.0])
    return [np.asarray(w) for w in want], scale


def check_against_numpy(inputs, build, desc):
    want, scale = _reference(inputs, build)
    got = svod.realize(*build([svod.asarray(a) for a in inputs]))
    got = got if isinstance(got, (list, tuple)) else [got]
    for i, (g, w) in enumerate(zip(got, want)):
        g = g.numpy() if isinstance(g, svod.Tensor) else np.asarray(g)
        assert g.shape == w.shape, f"{desc}: output {i} shape {g.shape} != numpy's {w.shape}"
        assert g.dtype == np.float32, f"{desc}: output {i} dtype {g.dtype}"
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"{desc}: output {i} NaN positions differ from numpy's"
        assert np.array_equal(np.isposinf(g), np.isposinf(w)) and np.array_equal(np.isneginf(g), np.isneginf(w)), \
            f"{desc}: output {i} inf positions differ from numpy's"
        fin = np.isfinite(w)
        err = np.abs(g[fin].astype(np.float64) - w[fin])
        assert err.size == 0 or err.max() <= TOL * scale, \
            f"{desc}: output {i} differs from numpy by {err.max():.3g} > {TOL} * {scale:.3g}"


@SETTINGS
@given(algebra_programs())
def test_algebra_programs_match_numpy_in_the_default_mode(prog):
    check_against_numpy(*prog)


@pytest.mark.skipif(not HAS_ALGEBRA_MODE, reason="svod.search_limits(algebra=...) lands with issue 30's rule sets")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(algebra_programs())
def test_algebra_programs_match_numpy_in_the_exact_mode(prog):
    with svod.search_limits(algebra="exact"):
        check_against_numpy(*prog)


@pytest.mark.parametrize("name", MOTIFS)
def test_each_motif_at_a_mid_size_matches_numpy(name):
    """Every motif once at sizes where svod's matmul kernels and blocked reductions run
    (the drawn programs are small), with a NaN in the first input."""
    dims = (33, 40, 17, 2, 9)
    rng = np.random.default_rng(MOTIFS.index(name))
    inputs = [rng.standard_normal(s).astype(np.float32) for s in _motif_shapes(name, dims)]
    inputs[0].flat[5] = np.nan

    def build(ts, xp=svod, trace=None):
        res = _motif(xp, name, ts, 1)
        if trace is not None:
            trace.extend(res)
        return res

    check_against_numpy(inputs, build, name)


def test_the_check_fails_on_a_wrong_result():
    """The comparison itself: a result off by more than the bound, or a moved NaN, fails."""
    x = np.ones((3, 4), np.float32)

    def wrong(ts, xp=svod, trace=None):
        out = xp.sum(ts[0], axis=0)
        return [out * (1.0 + 10 * TOL) if xp is svod else out]

    with pytest.raises(AssertionError, match="differs from numpy"):
        check_against_numpy([x], wrong, "wrong")

    def moved_nan(ts, xp=svod, trace=None):
        return [xp.flip(ts[0], axis=0) if xp is svod else ts[0]]

    y = x.copy()
    y[0, 0] = np.nan
    with pytest.raises(AssertionError, match="NaN positions"):
        check_against_numpy([y], moved_nan, "moved")


# ----------------------------------------------------------------------------- contraction recognition
#
# search/contract.py: a sum of a product of broadcast operands gets a (batched) matmul
# variant in the e-graph (rule set `contract`, reassoc); the extraction keeps it where the
# cost model prices it below the fused multiply + reduce kernel.


def _key(*tensors):
    from svod.key import compact

    return compact([t.uop for t in tensors])[0]


def _decide(*tensors):
    from svod import planner

    return planner.decide(_key(*tensors))


def _products(key):
    """(batch, m, k, n) of every MATMUL node of a GraphKey."""
    out = []
    for n in key.nodes:
        if n.op.name == "MATMUL":
            a, b = (key.nodes[s].shape for s in n.src)
            out.append((a[:-2], a[-2], a[-1], b[-1]))
    return out


def _t(*shape, seed=0):
    return svod.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _bcast_1(t):
    return svod.reshape(svod.broadcast_to(t, (6, 4, 5)), (6, 4, 1, 5))


RECOGNISED = {  # name -> (build, the matmul form's (batch, m, k, n))
    "rows": (lambda: svod.sum(_t(6, 5)[:, None, :] * _t(4, 5, seed=1)[None], axis=-1), ((), 6, 5, 4)),
    "mid": (lambda: svod.sum(_t(6, 5)[:, :, None] * _t(5, 4, seed=1)[None], axis=1), ((), 6, 5, 4)),
    "batched": (lambda: svod.sum(_t(3, 6, 5)[:, :, None, :] * _t(3, 4, 5, seed=1)[:, None, :, :], axis=-1),
                ((3,), 6, 5, 4)),
    "heads": (lambda: svod.sum(_t(2, 3, 6, 5)[:, :, :, None, :] * _t(2, 3, 4, 5, seed=1)[:, :, None], axis=-1),
              ((2, 3), 6, 5, 4)),
    "two_axes": (lambda: svod.sum(_t(6, 2, 5)[:, :, :, None] * _t(2, 5, 4, seed=1)[None], axis=(1, 2)),
                 ((), 6, 10, 4)),
    "transposed": (lambda: svod.sum(_t(5, 6).T[:, :, None] * _t(4, 5, seed=1).T[None], axis=1), ((), 6, 5, 4)),
    "gemv": (lambda: svod.sum(_t(6, 5) * _t(5, seed=1), axis=-1), ((), 6, 5, 1)),
    "vec_mat": (lambda: svod.sum(_t(6, 5) * _t(6, seed=1)[:, None], axis=0), ((), 5, 6, 1)),  # A.T @ u
    # a RESHAPE adding a size-1 axis after a broadcast: the broadcast axis keeps reading nothing
    "reshape_after_expand": (lambda: svod.sum(_bcast_1(_t(6, 5)[:, None, :]) * _bcast_1(_t(4, 5, seed=1)[None]),
                                              axis=-1), ((), 6, 5, 4)),
    "keepdims": (lambda: svod.sum(_t(6, 5)[:, None, :] * _t(4, 5, seed=1)[None], axis=-1, keepdims=True),
                 ((), 6, 5, 4)),
    "float64": (lambda: svod.sum(svod.asarray(np.ones((6, 5)))[:, None, :] * svod.asarray(np.ones((4, 5)))[None],
                                 axis=-1), ((), 6, 5, 4)),
    "mixed_dtype": (lambda: svod.sum(_t(6, 5)[:, None, :] * svod.asarray(np.ones((4, 5)))[None], axis=-1),
                    ((), 6, 5, 4)),  # the float32 operand cast to float64 is the base
    "int32": (lambda: svod.sum(svod.asarray(np.ones((6, 5), np.int32))[:, None, :]
                               * svod.asarray(np.ones((4, 5), np.int32))[None], axis=-1, dtype=svod.int32),
              ((), 6, 5, 4)),
}


@pytest.mark.parametrize("name", RECOGNISED)
def test_contraction_patterns_get_a_matmul_form(name):
    """The encoder's templates hold one MATMUL of the pattern's (batch, m, k, n), and the
    form, decoded, computes numpy's values (the interpreter runs the decoded program)."""
    from search.contract import rewritten_programs, templates
    from svod.interp import eval_key

    build, want = RECOGNISED[name]
    t = build()
    key = _key(t)
    ext, forms = templates(key)
    assert len(forms) == 1, name
    (rule, new), = rewritten_programs(key, ["contract"])
    assert rule == "contract" and _products(new) == [want], (name, _products(new))
    assert not any(n.op.name == "REDUCE" for n in new.nodes)
    b = _bindings(t)
    got = eval_key(new, b.arrays)[0]
    ref = eval_key(key, b.arrays)[0]
    assert got.shape == ref.shape and got.dtype == ref.dtype
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def _bindings(t):
    from svod.key import compact

    return compact([t.uop])[1]


NOT_RECOGNISED = {
    "row_dots": lambda: svod.sum(_t(6, 5) * _t(6, 5, seed=1), axis=-1),  # every axis in both: no cheaper matmul
    "square": lambda: svod.sum(_t(6, 5) * _t(6, 5), axis=-1),
    "one_sided_sum": lambda: svod.sum(_t(6, 1, 5) * _t(4, 1, seed=1)[None], axis=(1, 2)),
    "max": lambda: svod.max(_t(6, 5)[:, None, :] * _t(4, 5, seed=1)[None], axis=-1),
    "add": lambda: svod.sum(_t(6, 5)[:, None, :] + _t(4, 5, seed=1)[None], axis=-1),
    "bool": lambda: svod.any(svod.asarray(np.ones((6, 5), bool))[:, None, :]
                             & svod.asarray(np.ones((4, 5), bool))[None], axis=-1),
    "broadcast_in_both": lambda: svod.sum(svod.broadcast_to(_t(6, 1, 5), (6, 4, 5)) * _t(5, seed=1), axis=-1),
}


@pytest.mark.parametrize("name", NOT_RECOGNISED)
def test_sums_that_are_not_matrix_products_get_no_form(name):
    from search.contract import templates

    key = _key(NOT_RECOGNISED[name]())
    ext, forms = templates(key)
    assert forms == {} and ext is key, name


def test_the_matmul_form_is_chosen_where_cheaper_and_not_where_not():
    """At 256 x 256 x 128 the plan is one matrix product (no kernel over the m*n*k
    product); at 4 x 3 x 5 the fused multiply + reduce kernel stays; both match numpy."""
    big_x, big_w = _t(256, 128), _t(256, 128, seed=1)
    y = svod.sum(big_x[:, None, :] * big_w[None], axis=-1)
    d = _decide(y)
    assert [k.kind for k in d.plan.kernels] in (["blas"], ["matmul"]), [k.kind for k in d.plan.kernels]
    assert all(int(np.prod(k.shape)) < 256 * 256 * 128 for k in d.plan.kernels)
    want = big_x.numpy().astype(np.float64) @ big_w.numpy().T.astype(np.float64)
    bound = 2 * 128 * float(np.finfo(np.float32).eps) * (np.abs(big_x.numpy()).astype(np.float64)
                                                        @ np.abs(big_w.numpy()).T.astype(np.float64))
    assert np.all(np.abs(y.numpy() - want) <= bound)
    small_x, small_w = _t(4, 5), _t(3, 5, seed=1)
    z = svod.sum(small_x[:, None, :] * small_w[None], axis=-1)
    d = _decide(z)
    assert [k.kind for k in d.plan.kernels] == ["reduce"], [k.kind for k in d.plan.kernels]
    np.testing.assert_allclose(z.numpy(), small_x.numpy() @ small_w.numpy().T, rtol=1e-5, atol=1e-6)


def test_exact_mode_keeps_the_fused_reduction():
    """`algebra="exact"`: the contract rule set does not run; the plan is the rewrite-free one."""
    from search import plan_search, rules

    x, w = _t(256, 128), _t(256, 128, seed=1)
    y = svod.sum(x[:, None, :] * w[None], axis=-1)
    with svod.search_limits(algebra="exact"):
        d = _decide(y)
        assert "contract" not in rules.default_rulesets("exact")
    assert all(k.kind == "reduce" for k in d.plan.kernels), [k.kind for k in d.plan.kernels]
    free = plan_search(_key(y), rulesets=[n for n in rules.DEFAULT if n != "contract"])
    assert [k.key() for k in free.plan.kernels] == [k.key() for k in d.plan.kernels]


def test_explain_names_the_contraction_and_the_report_counts_it():
    x, w = _t(256, 128), _t(256, 128, seed=1)
    e = svod.explain(svod.sum(x[:, None, :] * w[None], axis=-1))
    assert any("contract" in r.rulesets for r in e.rewrites), [str(r) for r in e.rewrites]
    assert "contract +" in str(e)


def test_nonfinite_and_signed_zero_as_numpy_through_the_matmul_form():
    """NaN and inf land where numpy's broadcast sum puts them (inf * 0 is NaN in both);
    a row of zeros (-0.0 included) gives numpy's +0.0."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((256, 128)).astype(np.float32)
    w = rng.standard_normal((256, 128)).astype(np.float32)
    x[3] = -0.0
    x[4, 7] = np.nan
    x[5, 0] = np.inf
    w[9, 0] = 0.0
    w[10, 1] = -np.inf
    y = svod.sum(svod.asarray(x)[:, None, :] * svod.asarray(w)[None], axis=-1)
    assert any(k.kind in ("blas", "matmul") for k in _decide(y).plan.kernels)
    got = y.numpy()
    with np.errstate(all="ignore"):
        want = np.sum(x[:, None, :].astype(np.float64) * w[None], axis=-1)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isposinf(got), np.isposinf(want)) and np.array_equal(np.isneginf(got), np.isneginf(want))
    assert np.array_equal(np.signbit(got[3]), np.signbit(want[3].astype(np.float32)))
    fin = np.isfinite(want)
    assert np.abs(got[fin] - want[fin]).max() <= 1e-4 * np.abs(want[fin]).max()


def test_integer_contraction_wraps_as_numpy():
    """int32 products that overflow wrap the same through the matmul form (integer sums
    are associative modulo 2**32)."""
    rng = np.random.default_rng(8)
    x = rng.integers(-2**20, 2**20, (256, 128)).astype(np.int32)
    w = rng.integers(-2**20, 2**20, (256, 128)).astype(np.int32)
    y = svod.sum(svod.asarray(x)[:, None, :] * svod.asarray(w)[None], axis=-1, dtype=svod.int32)
    with np.errstate(all="ignore"):
        want = np.sum(x[:, None, :] * w[None], axis=-1, dtype=np.int32)
    assert np.array_equal(y.numpy(), want)


# ----------------------------------------------------------------------------- sibling products


def _sibling_outputs(m, k, n, seed=0):
    x, a, b, c = _t(m, k, seed=seed), _t(k, n, seed=seed + 1), _t(k, n + 1, seed=seed + 2), _t(k, n, seed=seed + 3)
    return [x @ a, svod.tanh(x @ b), x @ c + 0.5]


def test_sibling_products_get_one_wider_product_sliced():
    """x @ A, x @ B, x @ C: each gets `(x @ concat(A, B, C))[:, off:off + n]` (rule set
    `matmul_siblings`, on by default for small groups); the search's plan with it computes numpy's values, and is
    never predicted dearer than the plan without it (the concatenation is priced in the form)."""
    from search import plan_search, rules
    from search.contract import SIBLINGS, rewritten_programs, templates
    from svod.interp import eval_key, run_plan
    from svod.key import compact

    assert SIBLINGS in rules.DEFAULT and SIBLINGS not in rules.OPT_IN and SIBLINGS not in rules.EXACT
    for m, k, n in ((4, 6, 3), (96, 64, 48)):
        outs = _sibling_outputs(m, k, n)
        key, b = compact([o.uop for o in outs])
        ext, forms = templates(key, siblings=True)
        assert len(forms) == 3
        cats = [nd for nd in ext.nodes if nd.op.name == "CAT"]
        assert len(cats) == 1 and cats[0].shape == (k, 3 * n + 1)
        progs = rewritten_programs(key, [SIBLINGS])
        assert len(progs) == 3
        for _, p in progs:  # each program (one sibling sliced from the wide product) computes the same
            assert sum(nd.op.name == "CAT" for nd in p.nodes) == 1
            for g, o in zip(eval_key(p, b.arrays), outs):
                w = o.numpy()
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))
        with_it = plan_search(key, rulesets=rules.DEFAULT)
        without = plan_search(key, rulesets=tuple(r for r in rules.DEFAULT if r != SIBLINGS))
        got = run_plan(with_it.plan, b.arrays)
        for g, o in zip(got, outs):
            np.testing.assert_allclose(g, o.numpy(), rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(o.numpy()).max())))
        assert with_it.report.extraction.best.seconds <= without.report.extraction.best.seconds * (1 + 1e-9)
        if m == 4:  # tiny: one BLAS call instead of three is what the model prefers
            rewrites = with_it.report.rewrites
            assert any(SIBLINGS in r.rulesets for r in rewrites), [str(r) for r in rewrites]


def test_big_sibling_groups_get_no_merged_form():
    """Groups over `SIBLING_MAX_FLOPS` keep their products: measured slower merged from
    bench_algebra's `siblings` at n = 512 up (docs/algebra.md), where the cost model
    still chose the merge; just under the limit the form is made."""
    from search.contract import SIBLING_MAX_FLOPS, templates

    def group(m, k, n):
        x = _t(m, k)
        return _key(*(x @ _t(k, n, seed=s) for s in (1, 2, 3)))

    assert len(templates(group(256, 96, 96), siblings=True)[1]) == 3  # 14 Mflop
    assert 2 * 512 * 192 * 3 * 192 > SIBLING_MAX_FLOPS
    assert templates(group(512, 192, 192), siblings=True)[1] == {}
    assert templates(group(2048, 768, 768), siblings=True)[1] == {}  # bench_algebra's siblings


def test_contract_and_siblings_run_only_on_graphs_with_their_pattern():
    """`contract` needs a sum of a product and `matmul_siblings` two products of one left
    operand (gates `ContractAt`, `SiblingAt`): other graphs skip their egglog runs; graphs
    with the pattern run them and get the forms."""
    from search import plan_search
    from search.contract import NAME, SIBLINGS

    x, w, v = _t(8, 6), _t(6, 5, seed=1), _t(6, 4, seed=2)
    plain = plan_search(_key(svod.tanh(x @ w) + 1.0))
    assert NAME not in plain.report.saturation.rulesets and SIBLINGS not in plain.report.saturation.rulesets
    both = plan_search(_key(x @ w, x @ v, svod.sum(x[:, None, :] * x[None], axis=-1)))
    assert {NAME, SIBLINGS} <= set(both.report.saturation.rulesets)
    assert both.report.saturation.added.get(SIBLINGS, 0) > 0 and both.report.saturation.added.get(NAME, 0) > 0


def test_products_whose_right_operand_reads_a_sibling_are_not_merged():
    """x @ W and x @ (x @ W): merging would make the product read itself."""
    from search.contract import templates

    x, w = _t(5, 5), _t(5, 3, seed=1)
    y = x @ w
    key = _key(y, x @ y)
    assert templates(key, siblings=True)[1] == {}


def test_graphs_searched_by_regions_keep_the_preferred_matmul_form():
    """A graph searched region by region keeps its program as written, except that each
    contraction the search of it alone would make a matmul is one (einsum's included):
    the big one a BLAS step, the tiny one a fused reduction; values as numpy's."""
    from search import plan_search
    from svod.interp import run_plan
    from svod.key import compact

    x, w = _t(256, 128), _t(256, 128, seed=1)
    y = svod.tanh(svod.einsum("ik,jk->ij", x, w) * 0.5) + 1.0
    small = svod.sum(x[:4, None, :5] * w[None, :3, :5], axis=-1)
    key, b = compact([y.uop, small.uop])
    r = plan_search(key, limits=SearchLimits(region_nodes=6))
    assert r.report.reason.startswith("size policy"), r.report.reason
    kinds = [k.kind for k in r.plan.kernels]
    assert kinds.count("blas") + kinds.count("matmul") == 1 and "reduce" in kinds, kinds
    assert all(int(np.prod(k.shape)) < 256 * 256 * 128 for k in r.plan.kernels)
    got = run_plan(r.plan, b.arrays)
    xs, ws = x.numpy().astype(np.float64), w.numpy().astype(np.float64)
    np.testing.assert_allclose(got[0], np.tanh((xs @ ws.T) * 0.5) + 1.0, atol=1e-4)
    np.testing.assert_allclose(got[1], xs[:4, :5] @ ws[:3, :5].T, atol=1e-5)
    with svod.search_limits(algebra="exact"):
        r = plan_search(key, limits=SearchLimits(region_nodes=6, algebra="exact"))
    assert "blas" not in [k.kind for k in r.plan.kernels]
