"""Row reductions of short rows read across rows (`schedule.narrow_rows`,
svod/codegen/narrow.py): which kernels take the path, results against numpy (NaN, inf,
-0.0 included), every row's bits the same on the vector and the scalar path and for any
thread count, and the documented fold order (`narrow_order`) checked bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import svod
from svod.codegen.narrow import narrow_order
from svod.codegen.program import compile_kernel
from svod.codegen.schedule import gemm_config, plan_loops
from svod.key import compact
from svod.plan_greedy import plan_greedy

V32 = max(2, gemm_config(4).vw)  # float32 lanes of a vector block on this host
V64 = max(2, V32 // 2)


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    svod.reset()
    yield
    svod.reset()


def _kernel(out):
    key, b = compact([o.uop for o in (out if isinstance(out, tuple) else (out,))])
    plan = plan_greedy(key)
    assert len(plan.kernels) == 1, plan
    return plan.kernels[0], b.arrays


def _run(kernel, arrays, threads, prog=None):
    bufs = {i: np.ascontiguousarray(a).reshape(-1) for i, a in enumerate(arrays)}
    for o in kernel.outputs:
        bufs[o.slot] = np.full(int(np.prod(o.shape)), 7, o.dtype.np)
    (prog or compile_kernel(kernel)).run(bufs, threads)
    return [bufs[o.slot].reshape(o.shape).copy() for o in kernel.outputs]


def _narrow(out) -> int:
    return plan_loops(_kernel(out)[0]).narrow


def _data(rng, shape, dt):
    if np.dtype(dt).kind == "f":
        return (rng.standard_normal(shape) * 10).astype(dt)
    return rng.integers(-1000, 1000, shape).astype(dt)


# ---------------------------------------------------------------- which kernels


@pytest.mark.parametrize("n", [2, 3, 7, 8, 12, 16, 17, 33, 64, 99])
def test_short_rows_take_the_path(n):
    x = svod.asarray(np.ones((4 * V32, n), np.float32))
    assert _narrow(svod.sum(x, axis=1)) > 0
    assert _narrow(svod.max(3.0 * x - 1.0, axis=1)) > 0
    assert _narrow(svod.mean(x, axis=1)) > 0


def test_other_kernels_keep_the_row_loop():
    rng = np.random.default_rng(0)
    x = svod.asarray(rng.standard_normal((4 * V32, 16)).astype(np.float32))
    wide = svod.asarray(np.ones((4 * V32, 100), np.float32))
    assert _narrow(svod.sum(wide, axis=1)) == 0  # longer than NARROW_MAX
    assert _narrow(svod.sum(svod.asarray(np.ones((V32 - 1, 16), np.float32)), axis=1)) == 0  # < one block
    assert _narrow(svod.sum(svod.exp(x), axis=1)) == 0  # a transcendental prologue
    assert _narrow(svod.sum(svod.asarray(np.ones((4 * V32, 16), np.int32)), axis=1)) == 0  # int32 -> int64 cast
    assert _narrow(svod.argmax(x, axis=1)) == 0
    big = svod.asarray(np.ones((4 * V32, 32), np.float32))
    assert _narrow(svod.sum(big[:, :16], axis=1)) == 0  # rows not contiguous
    assert _narrow(svod.sum(svod.asarray(np.ones((16, 4 * V32), np.float32)).T, axis=1)) == 0  # transposed
    assert _narrow(svod.sum(x, axis=0)) == 0  # a column reduce


# ---------------------------------------------------------------- against numpy

SHAPES = [(V32, 2), (V32 + 1, 3), (3 * V32 + 5, 5), (1000, 8), (257, 12), (100, 16), (333, 17), (64, 24),
          (129, 33), (50, 64), (37, 99)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dt", [np.float32, np.float64, np.int64])
def test_matches_numpy(shape, dt):
    rng = np.random.default_rng(sum(shape))
    a, b2 = _data(rng, shape, dt), _data(rng, shape, dt)
    v = _data(rng, shape[1:], dt)
    A, B, W = svod.asarray(a), svod.asarray(b2), svod.asarray(v)
    cases = [
        (svod.sum(A, axis=1), a.sum(axis=1)),
        (svod.max(A, axis=1), a.max(axis=1)),
        (svod.min(A * 2 - 1, axis=1, keepdims=True), (a * 2 - 1).min(axis=1, keepdims=True)),
        (svod.sum(A, axis=1) - svod.sum(B, axis=1), a.sum(axis=1) - b2.sum(axis=1)),
        (svod.sum(A * W, axis=1), (a * v).sum(axis=1)),
    ]
    if np.dtype(dt).kind == "f":
        cases += [(svod.mean(A, axis=1), a.mean(axis=1)), (svod.max(-A / 3.0, axis=1), (-a / 3.0).max(axis=1))]
    for got, want in cases:
        got = got.numpy()
        assert got.shape == want.shape and got.dtype == want.dtype
        if np.dtype(dt).kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5 if dt == np.float32 else 1e-12, atol=1e-4)
        else:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [3, 16, 17, 64])
def test_nan_inf_signed_zero_as_numpy(n):
    m = 2 * V32 + 3
    x = np.random.default_rng(n).standard_normal((m, n)).astype(np.float32)
    x[1, 0] = np.nan
    x[2, n - 1] = np.inf
    x[3, :] = -0.0
    x[4, 0], x[4, 1] = -np.inf, np.inf
    x[5, :] = -np.inf
    x[m - 1, n - 1] = np.nan  # a row on the scalar path
    x[m - 2, :] = -0.0
    X = svod.asarray(x)
    for got, want in [(svod.sum(X, axis=1), x.sum(axis=1)), (svod.max(X, axis=1), x.max(axis=1)),
                      (svod.min(X, axis=1), x.min(axis=1))]:
        got = got.numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # NaN where numpy has NaN, the same infinities
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        np.testing.assert_array_equal(np.signbit(got[[3, m - 2]]), np.signbit(want[[3, m - 2]]))


# ---------------------------------------------------------------- bits


@pytest.mark.parametrize("n", [3, 8, 12, 16, 24, 64])
def test_bit_identical_for_any_thread_count_and_position(n):
    m = 5 * V32 + 7  # whole blocks, then rows on the scalar path
    x = np.random.default_rng(n).standard_normal((m, n)).astype(np.float32)
    kernel, arrays = _kernel(svod.sum(svod.asarray(x), axis=1))
    assert plan_loops(kernel).narrow
    prog = compile_kernel(kernel)
    ref = _run(kernel, arrays, 1, prog)[0]
    for t in (2, 3):
        assert np.array_equal(_run(kernel, arrays, t, prog)[0], ref)
    # the tail rows (scalar path) inside a longer array (vector blocks): the same bits
    tail = x[m - (m % V32):]
    longer = np.concatenate([tail, x[:2 * V32]])
    again = svod.sum(svod.asarray(longer), axis=1).numpy()
    assert np.array_equal(again[:len(tail)], ref[m - (m % V32):])


def _emulate(row: np.ndarray, tree):
    if tree is None:
        return None
    if isinstance(tree, int):
        return row[tree]
    lo, hi = (_emulate(row, t) for t in tree)
    return lo if hi is None else hi if lo is None else row.dtype.type(lo + hi)


@pytest.mark.parametrize("n", [2, 3, 5, 12, 16, 17, 40, 64, 97])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_fold_order_is_the_documented_one(n, dt):
    lanes = V32 if dt == np.float32 else V64
    x = (np.random.default_rng(n).standard_normal((2 * lanes + 1, n)) * 1e3).astype(dt)
    got = svod.sum(svod.asarray(x), axis=1).numpy()
    tree = narrow_order(n, lanes)
    want = np.array([_emulate(r, tree) + dt(0) for r in x], dt)
    assert np.array_equal(got, want)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(V32, 4 * V32 + 3), n=st.integers(2, 99), op=st.sampled_from(["sum", "max", "min"]),
       special=st.sampled_from([None, np.nan, np.inf, -np.inf, -0.0]), seed=st.integers(0, 2**16))
def test_hypothesis_against_numpy(m, n, op, special, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)).astype(np.float32)
    if special is not None:
        x[rng.integers(0, m, 3), rng.integers(0, n, 3)] = special
    got = getattr(svod, op)(svod.asarray(x) * 2.0 + 1.0, axis=1).numpy()
    want = getattr(np, op)(x * np.float32(2.0) + np.float32(1.0), axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert np.array_equal(np.isnan(got), np.isnan(want))


def test_batched_rows_and_offset_views():
    """Kept axes that merge into one (a batch of row blocks), a slice of rows (a view with an
    offset), keepdims and a float64 mean."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5 * V32 + 1, 12)).astype(np.float32)
    assert _narrow(svod.sum(svod.asarray(x), axis=-1)) > 0
    np.testing.assert_allclose(svod.sum(svod.asarray(x), axis=-1, keepdims=True).numpy(),
                               x.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-5)
    y = rng.standard_normal((4 * V32 + 9, 7))
    Y = svod.asarray(y)[5:]
    assert _narrow(svod.mean(Y, axis=1)) > 0
    np.testing.assert_allclose(svod.mean(Y, axis=1).numpy(), y[5:].mean(axis=1), rtol=1e-12)
