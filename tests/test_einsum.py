"""svod.einsum / svod.einsum_path against numpy: hypothesis-drawn subscripts and shapes
(explicit and implicit, ellipses, repeated labels, size-1 broadcasting, 1-4 operands), every
dtype, the lowering's kinds (a contraction that is a matrix product is written as numpy's
broadcast sum and planned as svod's matmul where that is cheaper; written as the matmul in
`algebra="exact"` mode), the path, and the errors (numpy's cases, naming einsum and
the shapes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
import svod.numpy as snp
from svod.ir import OP, toposort

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _ops(t) -> list:
    return [u.op for u in toposort([t.uop])]


def _close(got, want, dtype):
    got = np.asarray(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if np.dtype(dtype).kind in "fc":
        tol = 1e-4 if np.dtype(dtype).itemsize <= 8 and np.dtype(dtype) != np.float64 else 1e-10
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (1 + np.abs(want).max(initial=0)))
    else:
        np.testing.assert_array_equal(got, want)


@st.composite
def einsums(draw, max_operands: int = 4):
    """(subscripts, shapes): labels a-f with drawn sizes (0-4), operands of 0-4 labels
    (repeats: diagonals), some dimensions 1 (broadcast), an optional ellipsis, explicit or
    implicit output."""
    pool = "abcdef"
    size = {c: draw(st.sampled_from([1, 2, 3, 4, 0]) if draw(st.booleans()) else st.integers(1, 4)) for c in pool}
    n = draw(st.integers(1, max_operands))
    use_ell = draw(st.integers(0, 3)) == 0
    ell = tuple(draw(st.lists(st.integers(1, 3), max_size=2))) if use_ell else ()
    terms, shapes = [], []
    for _ in range(n):
        ls = draw(st.lists(st.sampled_from(pool), max_size=4 if n < 4 else 3))
        shp = [size[c] for c in ls]
        for i in range(len(shp)):  # a dimension of size 1 broadcasts against the label's size
            if draw(st.integers(0, 5)) == 0:  # on a repeated label numpy refuses it: so must svod
                shp[i] = 1
        t = "".join(ls)
        if use_ell and draw(st.booleans()):
            k = draw(st.integers(0, len(ell)))
            tail = [1 if draw(st.integers(0, 3)) == 0 else e for e in ell[len(ell) - k:]]
            pos = draw(st.integers(0, len(ls)))
            t = "".join(ls[:pos]) + "..." + "".join(ls[pos:])
            shp = shp[:pos] + tail + shp[pos:]
        terms.append(t)
        shapes.append(tuple(shp))
    used = sorted(set("".join(terms).replace(".", "")))
    if draw(st.booleans()):
        sub = ",".join(terms)
    else:
        out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
        has_ell = any("..." in t for t in terms)
        out = "".join(out)
        if has_ell:
            pos = draw(st.integers(0, len(out)))
            out = out[:pos] + "..." + out[pos:]
        sub = ",".join(terms) + "->" + out
    return sub, shapes


def _numpy_or_error(sub, arrs, **kw):
    try:
        return np.einsum(sub, *arrs, **kw), None
    except ValueError as e:
        return None, e


@SETTINGS
@given(einsums(), st.integers(0, 2**16))
def test_einsum_matches_numpy_on_drawn_subscripts(case, seed):
    sub, shapes = case
    rng = np.random.default_rng(seed)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want, err = _numpy_or_error(sub, arrs)
    if err is not None:  # numpy refuses (e.g. an ellipsis of mismatched sizes): svod refuses too, naming einsum
        with pytest.raises(ValueError, match="^einsum: "):
            svod.einsum(sub, *[svod.asarray(a) for a in arrs])
        return
    got = svod.einsum(sub, *[svod.asarray(a) for a in arrs])
    _close(got.numpy(), want, np.float32)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsums(max_operands=4), st.sampled_from([False, True, "greedy", "optimal"]), st.integers(0, 2**16))
def test_every_optimize_gives_numpys_values_in_float64(case, optimize, seed):
    sub, shapes = case
    rng = np.random.default_rng(seed)
    arrs = [rng.standard_normal(s) for s in shapes]
    want, err = _numpy_or_error(sub, arrs)
    if err is not None:
        return
    got = svod.einsum(sub, *[svod.asarray(a) for a in arrs], optimize=optimize)
    _close(got.numpy(), want, np.float64)


DTYPES = [np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64, np.uint32, np.float32, np.float64,
          np.complex64, np.complex128]
CASES = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bi,bi->b", [(3, 5), (3, 5)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
         ("ii->i", [(4, 4)]), ("ij->i", [(3, 4)]), ("i,j->ij", [(3,), (4,)]),
         ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
         ("bij,bjk->bik", [(2, 3, 4), (2, 4, 3)])]


def _values(rng, shape, dtype):
    d = np.dtype(dtype)
    if d.kind == "b":
        return rng.random(shape) < 0.5
    if d.kind in "iu":  # large enough that int8 / uint8 products and sums wrap, as numpy's do
        return rng.integers(0 if d.kind == "u" else -60, 60, size=shape).astype(d)
    if d.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(d)
    return rng.standard_normal(shape).astype(d)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_einsum_every_dtype_matches_numpy(dtype):
    rng = np.random.default_rng(1)
    for sub, shapes in CASES:
        arrs = [_values(rng, s, dtype) for s in shapes]
        with np.errstate(over="ignore"):
            want = np.einsum(sub, *arrs)
        got = svod.einsum(sub, *[svod.asarray(a) for a in arrs])
        _close(got.numpy(), want, dtype)


def test_mixed_dtypes_python_scalars_and_dtype_casting_follow_numpy():
    rng = np.random.default_rng(2)
    a32, i32 = rng.standard_normal((3, 4)).astype(np.float32), rng.integers(-5, 5, (4,)).astype(np.int32)
    for sub, arrs in [("ij,j->i", (a32, i32)), ("ij,->ij", (a32, 2.0)), ("ij,->ij", (a32, np.float32(2)))]:
        got = svod.einsum(sub, *[svod.asarray(x) if isinstance(x, np.ndarray) else x for x in arrs])
        _close(got.numpy(), np.einsum(sub, *arrs), np.float64)
    got = svod.einsum("ij,j->i", svod.asarray(a32), svod.asarray(i32), dtype=np.float32, casting="same_kind")
    _close(got.numpy(), np.einsum("ij,j->i", a32, i32, dtype=np.float32, casting="same_kind"), np.float32)
    with pytest.raises(TypeError, match="^einsum: cannot cast operand 0 from float32 to int32"):
        svod.einsum("ij,j->i", svod.asarray(a32), svod.asarray(i32), dtype="int32")


def test_interleaved_form_and_implicit_ascii_order_match_numpy():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    got = svod.einsum(svod.asarray(a), [0, 1], svod.asarray(b), [1, 30])
    _close(got.numpy(), np.einsum(a, [0, 1], b, [1, 30]), np.float64)
    got = svod.einsum(svod.asarray(a), [Ellipsis, 1], svod.asarray(b), [1, 2], [2, Ellipsis])
    _close(got.numpy(), np.einsum(a, [Ellipsis, 1], b, [1, 2], [2, Ellipsis]), np.float64)
    x = rng.standard_normal((2, 3, 4))
    for sub in ("aBc", "cBa", "Ba...", "...zA"):  # uppercase sorts before lowercase, the ellipsis first
        _close(svod.einsum(sub, svod.asarray(x)).numpy(), np.einsum(sub, x), np.float64)


def test_out_and_numpy_namespace():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    out = np.empty((2, 4))
    r = svod.einsum("ij,jk", svod.asarray(a), svod.asarray(b), out=out)
    assert r is out
    np.testing.assert_allclose(out, a @ b)
    r = snp.einsum("ij,jk", snp.asarray(a), snp.asarray(b))
    assert type(r).__name__ == "ndarray"
    np.testing.assert_allclose(r.numpy(), a @ b)
    assert snp.einsum.__wrapped__ is svod.einsum
    path, report = snp.einsum_path("ij,jk,kl", a, b, np.ones((4, 1)))
    assert path == np.einsum_path("ij,jk,kl", a, b, np.ones((4, 1)))[0]


# ----------------------------------------------------------------------------- the lowering


MATRIX_PRODUCTS = [
    ("ij,jk->ik", [(8, 9), (9, 7)]), ("ij,jk", [(8, 9), (9, 7)]), ("bij,bjk->bik", [(2, 8, 9), (2, 9, 7)]),
    ("ij,j->i", [(8, 9), (9,)]), ("i,ij->j", [(8,), (8, 9)]), ("bhqd,bhkd->bhqk", [(2, 3, 8, 5), (2, 3, 7, 5)]),
    ("ijk,jkl->il", [(4, 5, 6), (5, 6, 7)]), ("abcd,cdbe->ae", [(2, 3, 4, 5), (4, 5, 3, 6)]),
    ("ij,kj->ik", [(8, 9), (7, 9)]), ("ji,jk->ik", [(9, 8), (9, 7)]),
]


def _plan_kernels(t):
    """The kernels of the plan realize() uses for `t` (planned, not run)."""
    from svod import planner
    from svod.key import compact

    return planner.decide(compact([t.uop])[0]).plan.kernels


@pytest.mark.parametrize("sub,shapes", MATRIX_PRODUCTS)
def test_matrix_products_are_written_as_broadcast_sums_that_the_search_makes_matmuls(sub, shapes):
    """A contraction is written as numpy defines it (operands aligned, multiplied with
    broadcasting, summed): no MATMUL node in the graph. At sizes where a matrix product is
    cheaper (x8 here) the search's `contract` rule set makes it one: the plan has a matmul
    kernel (BLAS or generated GEMM) and no kernel iterating over the (i, j, k) product."""
    rng = np.random.default_rng(4)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    t = svod.einsum(sub, *[svod.asarray(a) for a in arrs])
    assert OP.MATMUL not in _ops(t)
    _close(t.numpy(), np.einsum(sub, *arrs), np.float32)
    big = [rng.standard_normal(tuple(8 * d for d in s)).astype(np.float32) for s in shapes]
    t = svod.einsum(sub, *[svod.asarray(a) for a in big])
    kernels = _plan_kernels(t)
    if sub not in ("ij,j->i", "i,ij->j"):  # matrix-vector: memory-bound both ways, the cost model decides
        assert any(k.kind in ("blas", "matmul") for k in kernels), (sub, [k.kind for k in kernels])
        space = max(int(np.prod(a.shape)) for a in big) + int(np.prod(t.shape))
        assert all(int(np.prod(k.shape)) <= space for k in kernels), (sub, [k.shape for k in kernels])
    _close(t.numpy(), np.einsum(sub, *big), np.float32)


@pytest.mark.parametrize("sub,shapes", MATRIX_PRODUCTS)
def test_exact_mode_writes_matrix_products_as_one_matmul(sub, shapes):
    """Under `algebra="exact"` the `contract` rule set does not run, so einsum writes the
    matrix product as svod's matmul itself: one MATMUL node, and no elementwise product
    as large as the (i, j, k) broadcast would be."""
    rng = np.random.default_rng(4)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    with svod.search_limits(algebra="exact"):
        t = svod.einsum(sub, *[svod.asarray(a) for a in arrs])
        nodes = toposort([t.uop])
        assert sum(u.op is OP.MATMUL for u in nodes) == 1, sub
        biggest_input = max(int(np.prod(s)) for s in shapes)
        assert all(int(np.prod(u.shape)) <= max(biggest_input, int(np.prod(t.shape)))
                   for u in nodes if u.op is OP.MUL), sub
        _close(t.numpy(), np.einsum(sub, *arrs), np.float32)


@pytest.mark.parametrize("sub,shapes,kind", [
    ("ij,ij->ij", [(8, 9), (8, 9)], "multiply"), ("i,j->ij", [(8,), (9,)], "multiply"),
    ("bi,bi->b", [(8, 9), (8, 9)], "reduce"), ("i,i", [(9,), (9,)], "reduce"), ("ij,ij->", [(8, 9), (8, 9)], "reduce"),
])
def test_elementwise_and_row_dot_contractions_are_not_matmuls(sub, shapes, kind):
    """No label summed: a broadcast multiply; nothing free on either side: multiply + sum
    (one reduction), not a batched 1x1 matmul."""
    rng = np.random.default_rng(5)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    t = svod.einsum(sub, *[svod.asarray(a) for a in arrs])
    ops = _ops(t)
    assert OP.MATMUL not in ops
    assert (OP.REDUCE in ops) == (kind == "reduce")
    _close(t.numpy(), np.einsum(sub, *arrs), np.float32)


def test_three_operands_follow_numpys_greedy_path():
    """(A @ B) @ v contracted as A @ (B @ v): two matrix-vector contractions (products of
    at most n x n elements), never the n x n x n product of A @ B."""
    rng = np.random.default_rng(6)
    a, b, v = (rng.standard_normal(s).astype(np.float32) for s in ((64, 64), (64, 64), (64,)))
    t = svod.einsum("ij,jk,k->i", *(svod.asarray(x) for x in (a, b, v)))
    muls = [u for u in toposort([t.uop]) if u.op is OP.MUL]
    assert len(muls) == 2 and all(int(np.prod(u.shape)) == 64 * 64 for u in muls), [u.shape for u in muls]
    _close(t.numpy(), np.einsum("ij,jk,k->i", a, b, v), np.float32)
    left = svod.einsum("ij,jk,k->i", *(svod.asarray(x) for x in (a, b, v)), optimize=False)
    assert any(u.op is OP.MUL and u.shape == (64, 64, 64) for u in toposort([left.uop]))
    assert any(k.kind in ("blas", "matmul") for k in _plan_kernels(left))  # A @ B as a matrix product
    _close(left.numpy(), np.einsum("ij,jk,k->i", a, b, v), np.float32)
    path = ["einsum_path", (0, 1), (0, 1)]
    _close(svod.einsum("ij,jk,k->i", *(svod.asarray(x) for x in (a, b, v)), optimize=path).numpy(),
           np.einsum("ij,jk,k->i", a, b, v), np.float32)
    with svod.search_limits(algebra="exact"):
        t = svod.einsum("ij,jk,k->i", *(svod.asarray(x) for x in (a, b, v)))
        mms = [u for u in toposort([t.uop]) if u.op is OP.MATMUL]
        assert len(mms) == 2 and all(1 in u.shape[-2:] for u in mms), [u.shape for u in mms]


def test_einsum_path_is_numpys_and_realizes_nothing():
    shapes = [(10, 20), (20, 30), (30, 5), (5,)]
    ts = [svod.ones(s) * 2.0 for s in shapes]
    before = svod.stats().get("realizes", 0)
    path, report = svod.einsum_path("ij,jk,kl,l->i", *ts)
    want, want_report = np.einsum_path("ij,jk,kl,l->i", *[np.ones(s) for s in shapes])
    assert path == want and report == want_report
    assert svod.stats().get("realizes", 0) == before
    assert svod.einsum_path("ij,jk", *ts[:2], optimize="optimal")[0] == ["einsum_path", (0, 1)]


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize("sub,shapes,match", [
    ("ij,jk", [(2, 3), (4, 5)], r"^einsum: label 'j' has size 3 in operand 0 \(shape \(2, 3\)\) and 4 in operand 1 "
                                r"\(shape \(4, 5\)\)"),
    ("ijk", [(2, 3)], r"^einsum: subscripts 'ijk' of operand 0 name 3 dimensions, but the operand has shape \(2, 3\)"),
    ("ij,jk", [(2, 3)], r"^einsum: subscripts 'ij,jk' name 2 operands, but 1 were given"),
    ("ij->ii", [(2, 3)], r"^einsum: output subscript 'i' appears more than once"),
    ("ij->k", [(2, 3)], r"^einsum: output subscript 'k' of 'ij->k' appears in no operand"),
    ("i.j", [(2, 3)], r"^einsum: subscripts 'i.j' of operand 0 contain a '.'"),
    ("i1", [(2, 3)], r"^einsum: invalid subscript '1'"),
    ("ij->i->j", [(2, 3)], r"^einsum: subscripts 'ij->i->j' contain a '-' or '>'"),
    ("...i->i", [(2, 3)], r"^einsum: the ellipsis of '...i->i' stands for 1 dimension"),
    ("ii", [(1, 3)], r"^einsum: label 'i' repeats in operand 0 \(shape \(1, 3\)\) with sizes 1 and 3"),
    ("...i,...i", [(2, 3), (4, 3)], r"^einsum: the ellipsis \(broadcast dimensions\) has size 2 in operand 0 "
                                    r"\(shape \(2, 3\)\) and 4 in operand 1 \(shape \(4, 3\)\)"),
])
def test_errors_name_einsum_with_the_shapes_where_numpy_refuses(sub, shapes, match):
    arrs = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError):
        np.einsum(sub, *arrs)
    with pytest.raises(ValueError, match=match):
        svod.einsum(sub, *[svod.asarray(a) for a in arrs])


def test_einsum_is_the_hand_written_contraction_and_repeats_its_errors():
    """`einsum("ik,jk->ij")` builds the same graph as the contraction written by hand,
    `(x[:, None, :] * w[None]).sum(-1)` (so the same plan and kernels: bench_algebra's
    `einsum` and `contract_bmr` rows); the memoised parse gives the same graph on every
    call, and a refused call is refused again with the same message (errors are not kept)."""
    from svod.key import compact

    rng = np.random.default_rng(5)
    x, w = (rng.standard_normal(s).astype(np.float32) for s in ((6, 5), (4, 5)))
    X, W = svod.asarray(x), svod.asarray(w)
    by_hand = compact([svod.sum(X[:, None, :] * W[None], axis=-1).uop])[0]
    for _ in range(3):
        t = svod.einsum("ik,jk->ij", X, W)
        assert compact([t.uop])[0] == by_hand
        _close(t.numpy(), np.einsum("ik,jk->ij", x, w), np.float32)
    for _ in range(2):
        with pytest.raises(ValueError, match=r"^einsum: label 'k' has size 5 in operand 0"):
            svod.einsum("ik,jk->ij", X, svod.asarray(np.ones((4, 3), np.float32)))
    # another shape under the same subscripts is parsed for its own sizes
    t = svod.einsum("ik,jk->ij", svod.asarray(x[:, :3]), svod.asarray(w[:, :3]))
    assert t.shape == (6, 4)
    _close(t.numpy(), np.einsum("ik,jk->ij", x[:, :3], w[:, :3]), np.float32)


def test_bad_optimize_and_paths_are_refused():
    a = [svod.ones((2, 3)), svod.ones((3, 4)), svod.ones((4,))]
    with pytest.raises(ValueError, match="^einsum: optimize='fastest'"):
        svod.einsum("ij,jk,k", *a, optimize="fastest")
    with pytest.raises(ValueError, match="^einsum: the explicit path leaves 2 operands"):
        svod.einsum("ij,jk,k", *a, optimize=["einsum_path", (0, 1)])
    with pytest.raises(ValueError, match=r"^einsum: the explicit path step \(0, 3\)"):
        svod.einsum("ij,jk,k", *a, optimize=["einsum_path", (0, 3), (0, 1)])
    with pytest.raises(TypeError, match="^einsum: the first argument is not a subscripts string"):
        svod.einsum(a[0], "ij")
    with pytest.raises(ValueError, match="^einsum_path: subscripts 'ij,jk' name 2 operands"):
        svod.einsum_path("ij,jk", a[0])


def test_einsum_under_jit_and_into_a_svod_out():
    rng = np.random.default_rng(7)
    a, b, v = (rng.standard_normal(s).astype(np.float32) for s in ((32, 16), (16, 8), (8,)))

    @svod.jit
    def f(x, y, z):
        return svod.einsum("ij,jk,k->i", x, y, z) + 1.0

    for _ in range(3):  # trace, then replays
        got = f(svod.asarray(a), svod.asarray(b), svod.asarray(v))
    _close(got.numpy(), (np.einsum("ij,jk,k->i", a, b, v) + 1).astype(np.float32), np.float32)
    out = svod.zeros((16,))
    assert svod.einsum("ij->j", svod.asarray(a), out=out) is out
    _close(out.numpy(), a.sum(0), np.float32)


def test_the_algebra_mode_einsum_reads_is_the_search_limits_one(monkeypatch):
    """`svod.config.algebra()` (what einsum reads once per call) agrees with
    `limits().algebra` whichever sets it: the environment, a global `search_limits`, a
    `search_limits` block (innermost wins); and einsum follows it (a MATMUL node only in
    exact mode)."""
    from svod import config
    from svod.config import algebra, limits

    X, W = svod.asarray(np.ones((3, 2), np.float32)), svod.asarray(np.ones((4, 2), np.float32))

    def matmuls():
        return sum(u.op is OP.MATMUL for u in toposort([svod.einsum("ik,jk->ij", X, W).uop]))

    monkeypatch.delenv("SVOD_ALGEBRA", raising=False)
    assert algebra() == limits().algebra == "reassoc" and matmuls() == 0
    monkeypatch.setenv("SVOD_ALGEBRA", "exact")
    assert algebra() == limits().algebra == "exact" and matmuls() == 1
    with svod.search_limits(algebra="reassoc"):
        assert algebra() == limits().algebra == "reassoc" and matmuls() == 0
        with svod.search_limits(algebra="exact"):
            assert algebra() == limits().algebra == "exact" and matmuls() == 1
    monkeypatch.delenv("SVOD_ALGEBRA")
    monkeypatch.setattr(config, "_global", config._global)  # the global setting below is undone after the test
    svod.search_limits(algebra="exact")  # set globally
    assert algebra() == limits().algebra == "exact" and matmuls() == 1
    svod.search_limits(algebra="reassoc")
    assert algebra() == limits().algebra == "reassoc" and matmuls() == 0


RECIPE_SPECS = [("ij,jk->ik", [(30, 40), (40, 50)]), ("ik,jk->ij", [(30, 40), (50, 40)]),
                ("bij,bjk->bik", [(3, 20, 30), (3, 30, 10)]), ("ii->i", [(20, 20)]), ("ij->", [(20, 30)]),
                ("ij,ij->i", [(20, 30), (20, 30)]), ("...ij,...jk", [(2, 3, 4, 5), (2, 3, 5, 6)]),
                ("ij,jk,kl->il", [(10, 20), (20, 30), (30, 5)]), ("i,j->ij", [(7,), (9,)])]


@pytest.mark.parametrize("sub,shapes", RECIPE_SPECS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_a_recorded_call_is_replayed_as_the_same_graph(sub, shapes, dtype):
    """The first call on realized operands records the nodes it built; a later call with
    other operands of the same shapes replays them: the very nodes (hash-consed) the
    plain path builds over those operands, and numpy's values."""
    from svod import contraction as C

    rng = np.random.default_rng(11)
    arrs = [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    C._RECIPES.clear()
    svod.einsum(sub, *[svod.asarray(a) for a in arrs])
    assert len(C._RECIPES) == 1
    arrs2 = [(rng.standard_normal(s) * 3).astype(dtype) for s in shapes]
    ops2 = [svod.asarray(a) for a in arrs2]
    replayed = svod.einsum(sub, *ops2)
    C._RECIPES.clear()
    plain = svod.einsum(sub, *ops2)
    assert replayed.uop is plain.uop
    _close(replayed.numpy(), np.einsum(sub, *arrs2), dtype)


def test_recipes_keep_aliasing_dtype_casts_and_lazy_operands_apart():
    """The same tensor twice, a `dtype=` cast and a lazy operand each give their own
    graph: a recipe recorded for distinct realized operands is not replayed for them."""
    from svod import contraction as C

    rng = np.random.default_rng(12)
    a = rng.standard_normal((20, 20)).astype(np.float32)
    b = rng.standard_normal((20, 20)).astype(np.float32)
    ta, tb = svod.asarray(a), svod.asarray(b)
    C._RECIPES.clear()
    _close(svod.einsum("ij,jk->ik", ta, tb).numpy(), a @ b, np.float32)
    _close(svod.einsum("ij,jk->ik", ta, ta).numpy(), a @ a, np.float32)  # aliased: its own recipe
    _close(svod.einsum("ij,jk->ik", tb, tb).numpy(), b @ b, np.float32)
    _close(svod.einsum("ij,jk->ik", tb, ta).numpy(), b @ a, np.float32)
    got = svod.einsum("ij,jk->ik", ta, tb, dtype=np.float64)
    assert got.dtype == svod.float64
    _close(got.numpy(), a.astype(np.float64) @ b, np.float64)
    lazy = ta * 2.0  # not realized: the plain path, no recipe for it
    n = len(C._RECIPES)
    _close(svod.einsum("ij,jk->ik", lazy, tb).numpy(), (a * 2) @ b, np.float32)
    assert len(C._RECIPES) == n
    with pytest.raises(ValueError, match=r"^einsum: label 'k' has size 20 in operand 0"):
        svod.einsum("ik,jk->ij", ta, svod.asarray(np.ones((4, 3), np.float32)))
