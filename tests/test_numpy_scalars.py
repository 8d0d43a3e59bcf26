"""svod.numpy's scalars against numpy's: an element read, a dot product of two vectors, a
reduction over all axes and a ufunc of scalars give the numpy scalar numpy gives (type,
bits, NaN/±inf/-0.0), whose arithmetic is numpy's own — its error state, its integer
wrap-around and warnings; `float(s)`, `s.item()`, comparisons driving control flow and
`A[i, j] = s` behave as in numpy; a lazy array read through a scalar gives its value at
the time of the read (never a stale one); `svod.jit` replays with scalars read in a loop.
docs/semantics.md, "numpy scalars"."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import svod
import svod.numpy as snp
from svod.numpy import _fast
from svod.numpy._ndarray import SCALAR_FUNCTIONS, SCALAR_METHODS

SPECIAL = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e308, 5e-324, 3.0])
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64",
          "complex64", "complex128"]


def _values(dtype: str) -> np.ndarray:
    if dtype == "bool":
        return np.array([True, False, True, True, False, False, True, False, True, True]).reshape(2, 5)
    with np.errstate(all="ignore"):
        if dtype.startswith("complex"):
            return (SPECIAL + 1j * SPECIAL[::-1]).astype(dtype).reshape(2, 5)
        if dtype.startswith(("int", "uint")):
            info = np.iinfo(dtype)
            return np.array([0, 1, -1, info.max, info.min, 7, -7, 2, info.max - 1, 3]).astype(dtype).reshape(2, 5)
        return SPECIAL.astype(dtype).reshape(2, 5)


def _same(got, want):
    """The same type and the same bits (NaN payloads and -0.0 included)."""
    assert type(got) is type(want), (type(got), type(want))
    assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (got, want)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_element_is_numpys_scalar_of_each_dtype(dtype):
    a = _values(dtype)
    x = snp.asarray(a)
    for _ in range(2):  # (the first read learns nothing: element reads are numpy's indexing)
        for key in [(0, 0), (1, 4), (-1, -2), (0, 1), (1, 0)]:
            _same(x[key], a[key])
        for i in range(5):
            _same(x[1][i], a[1][i])
            _same(list(x[0])[i], list(a[0])[i])  # (iterating a row)


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_element_of_a_lazy_array_is_read_at_the_time_of_the_read(dtype):
    a = _values(dtype)
    x = snp.asarray(a)
    with svod.eager_mode(False):
        y = x[::-1]  # a lazy value
        assert not y.is_realized
        lazy = y[0, 1]
        assert type(lazy) is snp.ndarray and not lazy.is_realized, "eager off: a 0-d array, lazy"
    s = y[0, 1]  # eager work on: numpy's scalar of y's value now
    _same(s, a[::-1][0, 1])
    _same(lazy.numpy()[()], a[::-1][0, 1])


def test_a_pending_big_array_is_realized_once_by_an_element_read_and_never_read_stale():
    a = np.random.default_rng(0).random((300, 300))  # 90,000 elements: over the eager limit
    A = snp.asarray(a)
    B = A * 2.0 + 1.0
    if B.is_realized:
        pytest.skip("the eager limit is set above this array")
    s = B[1, 2]
    assert type(s) is np.float64 and s == a[1, 2] * 2.0 + 1.0 and B.is_realized
    before = svod.stats()["realizes"]
    total = 0.0
    for i in range(300):
        total += B[i, i]
    assert svod.stats()["realizes"] == before, "later reads: numpy's indexing, no realize"
    assert total == sum(a[i, i] * 2.0 + 1.0 for i in range(300))
    A[1, 2] = 100.0  # B was computed from the old A, s is a copy: neither changes
    assert B[1, 2] == a[1, 2] * 2.0 + 1.0 and s == a[1, 2] * 2.0 + 1.0
    C = A + 0.0  # computed from the new A
    assert C[1, 2] == 100.0
    # a loop that writes a pending value and reads it back: every read sees the last write
    x = snp.asarray(np.zeros(100_000))
    x = x + 0.0  # pending (over the eager limit)
    for i in range(1, 12):
        x[i] = x[i - 1] + 1.5
        assert x[i] == 1.5 * i
    np.testing.assert_array_equal(x.numpy()[:12], np.arange(12) * 1.5)


def _numpy_call(xp, name, a, m, s):
    """`name` called as the numpy probe of SCALAR_FUNCTIONS does: on a vector, a matrix or a scalar."""
    if name.startswith("linalg."):
        f = getattr(xp.linalg, name[len("linalg."):])
        return f(m) if name in ("linalg.det", "linalg.cond", "linalg.matrix_rank", "linalg.matrix_norm",
                                "linalg.trace") else f(a, a) if name == "linalg.vecdot" else f(a)
    f = getattr(xp, name)
    if name in ("dot", "vdot", "inner", "matmul"):
        return f(a, a)
    if name in ("fmax", "fmin", "logaddexp2"):
        return f(s, s)
    if name == "trace":
        return f(m)
    if name in ("quantile", "percentile"):
        return f(a, 0.5)
    if name == "clip":
        return f(s, 0.0, 1.0)
    if name == "take":
        return f(a, 1)
    if name == "einsum":
        return f("i,i", a, a)
    if name in ("cbrt", "exp2", "angle", "around", "round", "nan_to_num", "deg2rad", "rad2deg"):
        return f(s)
    return f(a)


@pytest.mark.parametrize("name", sorted(SCALAR_FUNCTIONS))
def test_functions_with_a_0d_result_give_numpys_scalar(name):
    a, m, s = np.array([1.0, 2.5, -3.0, 4.0]), np.array([[2.0, 1.0], [0.5, 3.0]]), np.float64(2.5)
    want = _numpy_call(np, name, a, m, s)
    for _ in range(2):  # the full path, then (where there is one) the fast path
        got = _numpy_call(snp, name, snp.asarray(a), snp.asarray(m), s)
        assert type(got) is type(want), (name, type(got), type(want))
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("name", sorted(SCALAR_METHODS))
def test_methods_with_a_0d_result_give_numpys_scalar(name):
    a = np.array([[1.0, 2.5], [-3.0, 4.0]])
    x = snp.asarray(a)
    want = getattr(a, name)(a) if name == "dot" else getattr(a, name)() if hasattr(a, name) else getattr(np, name)(a)
    got = getattr(x, name)(x) if name == "dot" else getattr(x, name)()
    if isinstance(want, np.generic):
        assert type(got) is type(want), name
        np.testing.assert_allclose(got, want, rtol=1e-12)
    else:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    v = snp.asarray(a[0])
    assert type(v.dot(v)) is np.float64 and v.dot(v) == a[0].dot(a[0])


def test_ufuncs_and_operators_of_scalars_and_0d_arrays_give_numpys_scalar():
    x = snp.asarray(np.array([4.0, -1.0]))
    z = snp.asarray(np.float64(9.0))  # a 0-d array (numpy's asarray gives one too)
    for _ in range(2):
        for got, want in ((snp.sqrt(x[0]), np.sqrt(np.float64(4.0))), (snp.sqrt(z), np.float64(3.0)),
                          (snp.maximum(x[0], x[1]), np.float64(4.0)), (snp.add(x[0], 1.5), np.float64(5.5)),
                          (-z, np.float64(-9.0)), (z * 2.0, np.float64(18.0)), (z > 3.0, np.True_),
                          (snp.add.reduce(x), np.float64(3.0)), (snp.exp(np.float32(0.0)), np.float32(1.0))):
            _same(got, want)
    assert type(snp.asarray(2.0)) is snp.ndarray and type(snp.zeros(())) is snp.ndarray
    assert type(z[...]) is snp.ndarray and type(x[..., 0]) is snp.ndarray, "an Ellipsis key: a 0-d array, as numpy's"
    assert type(z[()]) is np.float64


def test_control_flow_float_item_and_writes_of_scalars():
    a = np.array([[4.0, -1.0, 0.0], [2.0, 0.5, -0.0]])
    x = snp.asarray(a.copy())
    for _ in range(2):
        s = x[0, 0]
        assert float(s) == 4.0 and s.item() == 4.0 and type(s.item()) is float and int(s) == 4
        assert (s > 0) is np.True_ and bool(x[0, 2]) is False and bool(x[1, 2]) is False
        n = 0
        for i in range(3):
            if x[0, i] > 0:
                n += 1
        assert n == 1 and ["a", "b", "c"][int(x[1, 1] * 4)] == "c"
    y, w = snp.asarray(a.copy()), a.copy()
    for i in range(2):
        for j in range(3):
            s, t = y[i, j], w[i, j]
            y[i, j] = s * 2.0 - y[1 - i, j]
            w[i, j] = t * 2.0 - w[1 - i, j]
    np.testing.assert_array_equal(y.numpy(), w)
    # numpy scalars of another dtype: numpy's casts
    y[0, 0] = np.float32(2.5)
    y[0, 1] = np.int64(7)
    k = snp.asarray(np.arange(6).reshape(2, 3))
    k[0, 0] = np.float64(5.75)  # (numpy's setitem casts unsafely: 5)
    assert y[0, 0] == 2.5 and y[0, 1] == 7.0 and k[0, 0] == 5 and type(k[0, 0]) is np.int64


def test_error_state_is_numpys_for_scalars_and_quiet_for_svod_arrays():
    x = snp.asarray(np.array([1.0, 0.0, -1.0, 1e308]))
    a = np.array([1.0, 0.0, -1.0, 1e308])
    for _ in range(2):
        with warnings.catch_warnings(record=True) as got, np.errstate(all="warn"):
            warnings.simplefilter("always")
            r = x[0] / x[1]
            q = snp.sqrt(x[2])  # a ufunc of numpy scalars: numpy's call
            o = x[3] * 10.0
        with warnings.catch_warnings(record=True) as want, np.errstate(all="warn"):
            warnings.simplefilter("always")
            ra, qa, oa = a[0] / a[1], np.sqrt(a[2]), a[3] * 10.0
        assert [str(w.message) for w in got] == [str(w.message) for w in want] and len(got) == 3
        _same(r, ra)
        _same(q, qa)
        _same(o, oa)
        with np.errstate(all="raise"):
            with pytest.raises(FloatingPointError):
                x[0] / x[1]
            with pytest.raises(FloatingPointError):
                snp.sqrt(x[2])
            # an op of a svod array is svod's: quiet, as its compiled code (numpy's own would raise)
            np.testing.assert_array_equal(snp.sqrt(x).numpy()[2:3], [np.nan])
            np.testing.assert_array_equal((x / x[1]).numpy(), [np.inf, np.nan, -np.inf, np.inf])
            np.testing.assert_array_equal((x[1] / x).numpy()[:2], [0.0, np.nan])  # (a scalar first, NEP 13)


def test_integer_scalars_wrap_and_warn_as_numpys():
    big = np.array([np.iinfo(np.int64).max, 1, -3], dtype=np.int64)
    x = snp.asarray(big)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            s = x[0] + x[1]  # numpy's scalar math: wraps, warns
        with warnings.catch_warnings(record=True) as want:
            warnings.simplefilter("always")
            t = big[0] + big[1]
        _same(s, t)
        assert [str(w.message) for w in got] == [str(w.message) for w in want]
        # an array with a scalar: numpy's array loop wraps silently, and so does svod's
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal((x + x[1]).numpy(), big + big[1])
            np.testing.assert_array_equal((x[1] + x).numpy(), big[1] + big)
        _same(x[2] // 2, big[2] // 2)
        _same(x[2] % 2, big[2] % 2)
        _same(snp.sum(x), np.sum(big))


def test_bools_are_numpys():
    b = np.array([True, False, True])
    x = snp.asarray(b)
    _same(x[0], b[0])
    _same(x[0] & x[1], b[0] & b[1])
    _same(~x[1], ~b[1])
    _same(x[0] == x[2], b[0] == b[2])
    assert (not x[1]) is True and [i for i in range(3) if x[i]] == [0, 2]
    _same(snp.any(x), np.any(b))
    _same(snp.all(x), np.all(b))
    _same(x.sum(), b.sum())


def test_a_scalar_from_a_held_view_is_a_copy():
    a = np.arange(2000.0).reshape(4, 500)  # a row of 4 KB: a view of a's memory on the fast path
    x = snp.asarray(a.copy())
    for _ in range(2):
        row = x[1]
        e = row[3]
        x[1, 3] = -1.0
        assert e == 503.0 and row[3] == 503.0 and x[1, 3] == -1.0
        x[1, 3] = 503.0
        row2 = row * 1.0
        row[3]  # noqa: B018 - a read does not change anything
        assert row2[3] == 503.0


def test_jit_in_a_loop_takes_scalars_read_from_arrays():
    a = np.random.default_rng(3).random((6, 8))
    A = snp.asarray(a.copy())
    f = svod.jit(lambda r, s: r * s + r[0])
    g = svod.jit(lambda m: m[1, 2] * m)  # an element read of a traced input: traced, not a constant
    traces = svod.stats()["jit_traces"]
    for i in range(6):
        s = A[i, i]
        assert type(s) is np.float64
        np.testing.assert_allclose(f(A[0], s).numpy(), a[0] * a[i, i] + a[0, 0], rtol=1e-12)
        m = A * 1.0
        m[1, 2] = float(i)
        mm = a.copy()
        mm[1, 2] = float(i)
        np.testing.assert_allclose(g(m).numpy(), float(i) * mm, rtol=1e-12)
        A[0, 0] = float(i)  # the next call must see it
        a[0, 0] = float(i)
    assert svod.stats()["jit_traces"] - traces <= 4, "scalars are inputs: a bounded number of traces"


def test_numpy_scalar_operands_take_the_fast_path():
    x = snp.asarray(np.arange(8.0))
    s = x[3]
    a, sa = np.arange(8.0), np.float64(3.0)
    for f in (lambda u, t: u * t, lambda u, t: t * u, lambda u, t: u / t, lambda u, t: t - u, lambda u, t: t < u,
              lambda u, t: t == u, lambda u, t: t >= u, lambda u, t: np.asarray(t) <= u,
              lambda u, t: snp.maximum(t, u) if u is x else np.maximum(t, u), lambda u, t: snp.sqrt(t)):
        f(x, s)
        before = _fast.stats()["fast"]
        got = f(x, s)
        assert _fast.stats()["fast"] == before + 1
        want = f(a, sa)
        if isinstance(want, np.generic):
            _same(got, want)
        else:
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got.numpy(), want)
    before = _fast.stats()["fast"]
    x[2] = s
    assert _fast.stats()["fast"] == before + 1 and x[2] == 3.0


def test_ufuncs_of_scalars_only_are_numpys_call_in_either_order():
    z = snp.asarray(np.array([0.0, -1.0]))
    for _ in range(2):
        for call, ref in ((lambda: snp.divide(1.0, z[0]), lambda: np.divide(1.0, np.float64(0.0))),
                          (lambda: snp.divide(z[1], 0.0), lambda: np.divide(np.float64(-1.0), 0.0)),
                          (lambda: snp.sqrt(z[1]), lambda: np.sqrt(np.float64(-1.0))),
                          (lambda: snp.maximum(2, z[1]), lambda: np.maximum(2, np.float64(-1.0)))):
            for state in ("ignore", "warn", "raise"):
                outcome = []
                for f in (call, ref):
                    with warnings.catch_warnings(record=True) as w, np.errstate(all=state):
                        warnings.simplefilter("always")
                        try:
                            r = f()
                            outcome.append((type(r), np.asarray(r).tobytes(), [str(m.message) for m in w]))
                        except FloatingPointError as e:
                            outcome.append(("raised", str(e)))
                assert outcome[0] == outcome[1], (state, outcome)


def test_a_scalar_combination_whose_numpy_dtype_is_not_svods_stays_svods():
    s = np.int8(4)
    for _ in range(2):
        r = snp.sqrt(s)  # numpy: float16; svod has no float16 (docs/semantics.md: float32)
        assert type(r) is np.float32 and r == 2.0
    assert type(np.sqrt(s)) is np.float16


def test_numpy_itself_on_svod_numpy_arrays_gives_its_scalars_and_svod_tensors_stay_tensors():
    a = np.arange(1.0, 5.0)
    x = snp.asarray(a)
    for got, want in ((np.sum(x), np.sum(a)), (np.dot(x, x), np.dot(a, a)), (np.add.reduce(x), np.add.reduce(a)),
                      (np.mean(x), np.mean(a)), (np.linalg.norm(x), np.linalg.norm(a)), (np.sqrt(x[1]), np.sqrt(a[1])),
                      (np.amax(x), np.amax(a))):
        assert type(got) is type(want)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    t = svod.asarray(np.arange(1.0, 5.0))  # svod's own namespace: 0-d tensors, lazy
    assert type(np.sum(t)) is svod.Tensor and type(svod.sum(t)) is svod.Tensor and type(t[1]) is svod.Tensor


def test_every_operator_of_0d_arrays_gives_numpys_scalar():
    a = np.float64(7.0)
    z, zi = snp.asarray(np.asarray(a)), snp.asarray(np.asarray(np.int64(6)))
    ai = np.asarray(np.int64(6))
    for f in (lambda u: u ** 2, lambda u: 2 ** u, lambda u: u % 4, lambda u: u // 2, lambda u: -u, lambda u: +u,
              lambda u: abs(u), lambda u: u >= 7, lambda u: 3.0 - u):
        for _ in range(2):
            _same(f(z), f(np.asarray(a)))
    for f in (lambda u: u & 3, lambda u: u | 1, lambda u: u ^ 5, lambda u: u << 2, lambda u: u >> 1, lambda u: ~u):
        _same(f(zi), f(ai))
    _same(snp.asarray(np.ones(3)) @ snp.asarray(np.ones(3)), np.ones(3) @ np.ones(3))
