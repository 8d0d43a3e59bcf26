"""svod.numpy's fast path for small realized operands (svod/numpy/_fast.py): numpy called
directly, with svod's dtypes (a memo the full path fills), svod's errors, the op table's
values, and svod's value semantics for writes.

Each differential case runs an op twice from an empty memo: the first call takes the
full path (frontend + svod.eager) and records the result dtype, the second takes the
fast path. Both must be identical — dtype, shape, every bit (NaN, ±inf, -0.0) — and
equal numpy's values; the fast path must actually have been taken (its counter)."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import svod
import svod.numpy as snp
from svod.numpy import _fast

SPECIAL = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e300, -3.0, 7.0], dtype=np.float64)


def _arr(dtype, seed=0, n=10):
    if np.dtype(dtype).kind == "c":
        return (SPECIAL + 1j * SPECIAL[::-1]).astype(dtype)
    if np.dtype(dtype).kind == "f":
        return SPECIAL.astype(dtype)
    if dtype == "bool":
        return np.arange(n) % 3 == 0
    return (np.arange(n) * (seed + 3) % 7 - 3).astype(dtype)


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    if a.dtype.kind in "fc":
        assert a.tobytes() == b.tobytes() or np.array_equal(a, b, equal_nan=True) and np.array_equal(
            np.signbit(a.real), np.signbit(b.real)), (a, b)
    else:
        np.testing.assert_array_equal(a, b)


def _twice(fn, fast_expected=True):
    """fn() from an empty memo (full path), then again (fast path): both results."""
    _fast._memo.clear()
    full = fn()
    before = _fast.stats()["fast"]
    fast = fn()
    if fast_expected:
        assert _fast.stats()["fast"] > before, "the second call takes the fast path"
    for r in (full, fast):  # (a 0-d result: numpy's scalar, as numpy gives it)
        assert isinstance(r, snp.ndarray) and r.is_realized or type(r) is type(fast) and isinstance(r, np.generic)
    _bits_equal(np.asarray(full), np.asarray(fast))
    assert full.dtype is fast.dtype or full.dtype == fast.dtype
    return fast


BIN = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
       "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge, "eq": operator.eq,
       "ne": operator.ne}


@pytest.mark.parametrize("name", list(BIN))
@pytest.mark.parametrize("da,db", [("float64", "float64"), ("float32", "float32"), ("float32", "float64"),
                                   ("complex128", "complex128"), ("float64", "int64"), ("int32", "float32"),
                                   ("float64", "bool"), ("complex64", "float64")])
def test_binary_operators_match_full_path_and_numpy(name, da, db):
    f = BIN[name]
    if name in ("lt", "le", "gt", "ge") and "complex" in da + db:
        pytest.skip("complex numbers have no order")
    a, b = _arr(da), _arr(db, 1)
    x, y = snp.asarray(a), snp.asarray(b)
    r = _twice(lambda: f(x, y))
    with np.errstate(all="ignore"):
        want = f(a, b)
    np.testing.assert_array_equal(r.numpy(), want)  # (values; NaN positions equal)
    _bits_equal(r.numpy(), np.asarray(want, dtype=r.numpy().dtype))


@pytest.mark.parametrize("name", ["add", "sub", "mul", "truediv", "lt", "eq"])
@pytest.mark.parametrize("scalar", [0.25, -0.0, 3, float("nan"), float("inf"), 2 ** 40, 1 + 2j])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64"])
@pytest.mark.parametrize("reflected", [False, True])
def test_python_scalars_are_weak_as_in_the_full_path(name, scalar, dtype, reflected):
    if name == "lt" and (isinstance(scalar, complex) or dtype.startswith("complex")):
        pytest.skip("complex numbers have no order")
    f = BIN[name]
    x = snp.asarray(_arr(dtype))
    r = _twice(lambda: f(scalar, x) if reflected else f(x, scalar))
    with np.errstate(all="ignore"):
        want = f(scalar, _arr(dtype)) if reflected else f(_arr(dtype), scalar)
    assert r.dtype.name == want.dtype.name  # NEP 50: the array's precision
    _bits_equal(r.numpy(), want)


def test_int_arrays_with_python_ints_take_the_full_path():
    """Value-dependent rules (an int that does not fit raises) stay the frontend's."""
    x = snp.asarray(np.arange(4, dtype=np.int8))
    _fast._memo.clear()
    before = _fast.stats()["fast"]
    for _ in range(3):
        assert (x + 1).tolist() == [1, 2, 3, 4]
    assert _fast.stats()["fast"] == before
    with pytest.raises(OverflowError):
        x + 300


def test_zero_d_operands_and_broadcasting():
    m = snp.asarray(np.arange(12.0).reshape(3, 4))
    d = m[1, 2]
    assert type(d) is np.float64 and d == 6.0  # an element: numpy's scalar
    r = _twice(lambda: m / d)
    np.testing.assert_array_equal(r.numpy(), np.arange(12.0).reshape(3, 4) / 6.0)
    r = _twice(lambda: d / m)  # (numpy's scalar first: NEP 13, `ndarray.__array_ufunc__`)
    np.testing.assert_array_equal(r.numpy(), 6.0 / np.arange(12.0).reshape(3, 4))
    col, row = m[:, 0], m[0]
    r = _twice(lambda: col.reshape(3, 1) * row)  # broadcast to (3, 4)
    np.testing.assert_array_equal(r.numpy(), np.arange(0, 12.0, 4).reshape(3, 1) * np.arange(4.0))
    z = snp.asarray(6.0)  # a 0-d array (numpy's asarray gives one too) ...
    assert type(z) is snp.ndarray and z.shape == ()
    s = _twice(lambda: z + z)  # ... and its sum a scalar, as numpy's
    assert type(s) is np.float64 and s == 12.0
    s = _twice(lambda: z + d)
    assert type(s) is np.float64 and s == 12.0


def test_shape_errors_are_svods():
    x, y = snp.asarray(np.ones(3)), snp.asarray(np.ones(4))
    _fast._memo.clear()
    x + x  # learned for (float64, float64)
    with pytest.raises(svod.ShapeError):
        x + y


def test_results_over_the_limit_stay_lazy():
    x = snp.asarray(np.ones(64))
    _fast._memo.clear()
    with svod.eager_mode(True, max_elements=16):
        x + x
        y = x + x
    assert not y.is_realized
    col = snp.asarray(np.ones((64, 1)))
    with svod.eager_mode(True, max_elements=100):
        x * 2.0
        z = col * x  # 64 x 64 = 4096 elements > 100: lazy
    assert not z.is_realized
    assert np.array_equal(z.numpy(), np.ones((64, 64)))


def test_eager_off_and_traces_keep_graphs():
    x = snp.asarray(np.ones(4))
    _fast._memo.clear()
    x + x
    x + x
    with svod.eager_mode(False):
        assert not (x + x).is_realized
        assert not x[1:].is_realized

    @svod.jit
    def f(t):
        return t * 2.0 + t[0]

    np.testing.assert_array_equal(f(snp.asarray(np.arange(4.0))).numpy(), np.arange(4.0) * 2.0)
    np.testing.assert_array_equal(f(snp.asarray(np.arange(1.0, 5.0))).numpy(), np.arange(1.0, 5.0) * 2.0 + 1.0)


@pytest.mark.parametrize("key", [3, -1, (1, 2), (slice(1, -1),), (1, slice(None, None, -2)), (slice(5, 1, -1), 0),
                                 slice(None), (slice(2, 100), slice(-100, 2)), (-2, -3)])
def test_getitem_is_numpys_indexing_copied(key):
    a = np.arange(48.0).reshape(6, 8)
    x = snp.asarray(a.copy())
    r = _twice(lambda: x[key])
    if isinstance(a[key], np.generic):  # an element: numpy's scalar, as numpy gives it
        assert type(r) is type(a[key]) and r == a[key]
        x[key] = -1.0
        assert r == a[key], "a scalar is a copy of the value"
        return
    _bits_equal(r.numpy(), np.asarray(a[key]))
    assert r.numpy().flags.c_contiguous and not r.numpy().flags.writeable
    x[key] = -1.0  # a slice is a value: the one taken before keeps its elements
    _bits_equal(r.numpy(), np.asarray(a[key]))


@pytest.mark.parametrize("key", [6, (0, 9), (-7,), (1, 2, 3)])
def test_index_errors_are_svods(key):
    x = snp.asarray(np.zeros((6, 8)))
    with pytest.raises(svod.SvodError):
        x[key]


def test_setitem_in_place_keeps_every_other_holder():
    a = snp.asarray(np.arange(16.0).reshape(4, 4))
    a[0, 0] = 1.0  # a copy (the caller's array is not ours), then in place
    held = a[1]
    exported = a.numpy()
    alias = snp.asarray(a)
    before = exported.copy()
    _fast._memo.clear()
    for i in range(4):
        a[1, :] = snp.asarray(np.full(4, -float(i)))
        a[2, i] = 7.5
        a[3] = -0.0
    np.testing.assert_array_equal(held.numpy(), np.arange(4.0, 8.0))
    np.testing.assert_array_equal(exported, before)
    if alias is not a:
        np.testing.assert_array_equal(alias.numpy(), before)
    want = before.copy()
    want[1] = -3.0
    want[2] = 7.5
    want[3] = -0.0
    _bits_equal(a.numpy(), want)


def test_setitem_writes_in_place_for_a_sole_owner():
    a = snp.zeros((8, 8))
    a[0, 0] = 1.0  # first write: the constant made once
    arr = a.uop.arg.array
    address = arr.__array_interface__["data"][0]
    del arr
    for i in range(8):
        a[i, 1:-1] = snp.asarray(np.full(6, float(i)))
    assert a.uop.arg.array.__array_interface__["data"][0] == address
    assert a.numpy()[5, 3] == 5.0


def test_setitem_aliasing_and_overlap():
    a = snp.asarray(np.arange(10.0))
    a[1:] = a[:-1]  # the value is a copy taken before the write
    np.testing.assert_array_equal(a.numpy(), np.r_[0.0, np.arange(9.0)])
    b = snp.asarray(np.arange(5.0))
    b[:] = b
    np.testing.assert_array_equal(b.numpy(), np.arange(5.0))


def test_setitem_casts_and_errors_take_the_full_path():
    a = snp.asarray(np.zeros(4, dtype=np.int32))
    a[1] = 2.7  # a float into an int array: the frontend's cast
    assert a.dtype == snp.int32 and a.tolist() == [0, 2, 0, 0]
    f = snp.asarray(np.zeros(4))
    f[2] = snp.asarray(np.array(3, dtype=np.int64))
    assert f.tolist() == [0.0, 0.0, 3.0, 0.0] and f.dtype == snp.float64
    with pytest.raises(svod.ShapeError):
        f[1:3] = snp.asarray(np.ones(3))
    with pytest.raises(svod.SvodError):
        f[9] = 1.0


@pytest.mark.parametrize("op", ["iadd", "isub", "imul", "itruediv"])
def test_inplace_operators(op):
    a, b = np.linspace(-2, 2, 9), SPECIAL[:9].copy()
    x = snp.asarray(a.copy())
    keep = x
    exported = x.numpy()
    _fast._memo.clear()
    for _ in range(2):
        x = getattr(operator, op)(x, snp.asarray(b))
    assert x is keep
    with np.errstate(all="ignore"):
        want = getattr(operator, op)(getattr(operator, op)(a.copy(), b), b)
    _bits_equal(x.numpy(), want)
    np.testing.assert_array_equal(exported, a)  # an array handed out before keeps its value
    i = snp.asarray(np.arange(3, dtype=np.int64))
    with pytest.raises(svod.SvodError):
        i /= 2.0  # float64 result into an int array: svod's error


@pytest.mark.parametrize("name", list(_fast.UNARY))
@pytest.mark.parametrize("dtype", ["float64", "float32", "int64", "complex128"])
def test_unary_ufuncs(name, dtype):
    if name in ("floor", "ceil") and dtype == "complex128":
        pytest.skip("numpy has no complex floor")
    a = _arr(dtype)
    x = snp.asarray(a)
    r = _twice(lambda: getattr(snp, name)(x), fast_expected=False)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a)
    if r.dtype.name == want.dtype.name:
        np.testing.assert_allclose(r.numpy(), want, rtol=1e-6, equal_nan=True)


def test_negation_and_binary_ufuncs():
    x, y = snp.asarray(SPECIAL), snp.asarray(SPECIAL[::-1].copy())
    _bits_equal(_twice(lambda: -x).numpy(), -SPECIAL)
    for name in ("maximum", "minimum", "add", "less", "not_equal"):
        with np.errstate(all="ignore"):
            want = getattr(np, name)(SPECIAL, SPECIAL[::-1])
        _bits_equal(_twice(lambda: getattr(snp, name)(x, y)).numpy(), want)  # noqa: B023


@pytest.mark.parametrize("sa,sb", [((7,), (7,)), ((5, 7), (7,)), ((5, 7), (7, 3)), ((7,), (7, 2))])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_dot_matmul_outer_sum(sa, sb, dtype):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    x, y = snp.asarray(a), snp.asarray(b)
    for f in (lambda: snp.dot(x, y), lambda: x @ y, lambda: snp.matmul(x, y), lambda: x.dot(y)):
        r = _twice(f)
        np.testing.assert_allclose(np.asarray(r), a @ b, rtol=1e-5)
        assert r.dtype.name == dtype
        assert isinstance(r, np.generic) == isinstance(a @ b, np.generic), "two vectors: numpy's scalar"
    o = _twice(lambda: snp.outer(x, y))
    _bits_equal(o.numpy(), np.outer(a, b))
    s = _twice(lambda: snp.sum(x * x))
    np.testing.assert_allclose(s, np.sum(a * a), rtol=1e-6)
    assert type(s) is type(np.sum(a * a)) and s.dtype.name == dtype


def test_sum_of_ints_and_bools_accumulates_in_int64():
    for a in (np.arange(6, dtype=np.int32), np.arange(6) % 2 == 0):
        r = _twice(lambda: snp.sum(snp.asarray(a)))  # noqa: B023
        assert type(r) is np.int64 and int(r) == int(np.sum(a))


def test_a_learned_dtype_that_numpy_does_not_give_is_never_used():
    """If numpy's result dtype differs from the one the full path recorded, the fast path
    gives up for that combination (the full path's result is returned)."""
    x = snp.asarray(np.arange(4.0))
    _fast._memo.clear()
    x + x
    key = ("add", x.dtype, x.dtype)
    _fast._memo[key] = (snp.float32, np.dtype("float32"), True)  # a (wrong) memo entry (dtype, numpy dtype, quiet)
    r = x + x
    assert r.dtype == snp.float64 and _fast._memo[key] is False
    assert (x + x).dtype == snp.float64


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["float64", "float32", "int64"]), st.sampled_from(["float64", "float32", "int32", "bool"]),
       st.sampled_from(list(BIN)), st.integers(1, 5), st.integers(1, 5), st.integers(0, 2 ** 16))
def test_hypothesis_fast_equals_full_and_numpy(da, db, name, n, m, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((n, m)) * 4).astype(da)
    b = (rng.standard_normal((m,)) * 4).astype(db)
    x, y = snp.asarray(a), snp.asarray(b)
    f = BIN[name]
    r = _twice(lambda: f(x, y), fast_expected=False)
    with np.errstate(all="ignore"):
        want = f(a, b)
    np.testing.assert_allclose(r.numpy(), want, rtol=1e-6, equal_nan=True)


# ops per call of each loop program (svod/bench/loops.py, read off its source): every read,
# operator, function call and write of the loop body, times the trip counts
# (arithmetic of two numpy scalars — cholesky's `a[j, j] - dot(...)`, forward substitution's
# `(b[i] - dot(...)) / ell[i, i]` — is numpy's own: not an op of svod's)
OPS_PER_CALL = {"gauss_seidel_2d": lambda n: 2 * (n - 2) * 9, "lu": lambda n: (n - 1) * 10,
                "cholesky": lambda n: 14 * n - 8, "forward_solve": lambda n: 6 * n, "jacobi_1d": lambda n: 100 * 2 * 7,
                "row_normalise": lambda n: 6 * n}


@pytest.mark.parametrize("n", [16, 40])
def test_loop_programs_take_the_fast_path_with_numpys_values(n):
    """Issue 28's loop programs (numpy code run unchanged on svod.numpy): after a first call
    has learned the dtypes, every op of the loop bodies takes the fast path, and the values
    are numpy's."""
    from svod import eager
    from svod.bench import loops

    if eager.numpy_limit() < 100 * n:
        pytest.skip("the eager limit is set below these programs' sizes")
    for name, (fn, make) in loops.programs(n).items():
        arrays = make(np.random.default_rng(3))
        fn(snp, *[snp.asarray(a.copy()) for a in arrays])
        f0 = _fast.stats()["fast"]
        got = fn(snp, *[snp.asarray(a.copy()) for a in arrays]).numpy()
        want = fn(np, *[a.copy() for a in arrays])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)
        assert _fast.stats()["fast"] - f0 == OPS_PER_CALL[name](n), name
