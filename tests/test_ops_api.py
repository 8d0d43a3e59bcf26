"""The op suite, continued: the Array API functions of issue 29 against numpy, every dtype
(svod/elementwise.py, sorting, searching, sets, take, meshgrid, linalg, fft).

Same rules as tests/test_ops.py (its helpers are imported): public API only, exact dtypes,
values from numpy on inputs cast to the expected dtype; the new elementwise ops also in
random fused chains (one kernel, compiled); the module ends by checking that nothing ran
in the interpreter.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import svod
from tests.test_ops import (  # noqa: F401 - _count_fallbacks: test_ops' autouse fixture counts here too
    _FALLBACKS,
    ALL,
    BOOL,
    F32,
    F64,
    FEW,
    I32,
    I64,
    INTS,
    SETTINGS,
    _count_fallbacks,
    arrays,
    as_operand,
    binary_operands,
    check,
    expected_dtype,
    fits,
    float_result,
    ref,
    tol,
)

# a fallback (failed search, failed compile) is a bug in this suite, not a slower success
pytestmark = pytest.mark.filterwarnings("error::svod.SvodWarning")


# ----------------------------------------------------------------------------- elementwise

# name -> (svod fn, numpy reference, domain of the random values)
UNARY = {
    "asin": (svod.asin, np.arcsin, (-1.25, 1.25)),
    "acos": (svod.acos, np.arccos, (-1.25, 1.25)),
    "atan": (svod.atan, np.arctan, None),
    "sinh": (svod.sinh, np.sinh, (-100, 100)),
    "cosh": (svod.cosh, np.cosh, (-100, 100)),
    "asinh": (svod.asinh, np.arcsinh, None),
    "acosh": (svod.acosh, np.arccosh, (0.5, 1000)),
    "atanh": (svod.atanh, np.arctanh, (-1.25, 1.25)),
}
BINARY = {
    "atan2": (svod.atan2, np.arctan2),
    "hypot": (svod.hypot, np.hypot),
    "logaddexp": (svod.logaddexp, np.logaddexp),
    "copysign": (svod.copysign, np.copysign),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(data=st.data())
def test_unary_float_functions(name, data):
    fn, npf, dom = UNARY[name]
    lo, hi = dom if dom else (None, None)
    arr = data.draw(arrays(lo=lo, hi=hi))
    d = float_result(arr.dtype)
    with np.errstate(all="ignore"):
        want = np.asarray(npf(arr.astype(d))).astype(d)
    rtol, atol = tol(d, "ulp")
    check(fn(svod.asarray(arr)), want, rtol=rtol, atol=atol, signed_zero=True)


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(data=st.data())
def test_binary_float_functions(name, data):
    fn, npf = BINARY[name]
    a, b, kinds = data.draw(binary_operands())
    d = float_result(expected_dtype(a, b))
    with np.errstate(all="ignore"):
        want = np.asarray(npf(ref(a, d), ref(b, d))).astype(d)
    rtol, atol = tol(d, "ulp")
    if name == "logaddexp":  # where the result cancels to ~0 the error is absolute, as numpy's
        atol = np.maximum(np.abs(ref(a, d)), np.abs(ref(b, d))).astype(np.float64) * rtol
    check(fn(as_operand(a, kinds[0]), as_operand(b, kinds[1])), want, rtol=rtol, atol=atol,
          signed_zero=name in ("copysign", "atan2"))


@SETTINGS
@given(arr=arrays())
def test_signbit(arr):
    want = np.signbit(arr) if arr.dtype != BOOL else np.zeros(arr.shape, bool)
    check(svod.signbit(svod.asarray(arr)), want)


@pytest.mark.parametrize("name", ["bitwise_left_shift", "bitwise_right_shift"])
@SETTINGS
@given(data=st.data(), use_operator=st.booleans())
def test_shifts(name, data, use_operator):
    a, b, kinds = data.draw(binary_operands(lo=-70, hi=70))
    d = expected_dtype(a, b)
    x, y = as_operand(a, kinds[0]), as_operand(b, kinds[1])
    op = (lambda p, q: p << q) if name == "bitwise_left_shift" else (lambda p, q: p >> q)
    call = op if use_operator and (isinstance(x, svod.Tensor) or isinstance(y, svod.Tensor)) else getattr(svod, name)
    if d.kind not in "iu":
        # the function called: svod's, or numpy's ufunc when an ndarray's operator dispatches to svod (NEP 13)
        numpy_dispatch = call is op and isinstance(x, np.ndarray)
        called = name.removeprefix("bitwise_") if numpy_dispatch else name
        with pytest.raises(TypeError, match=f"^{called}: "):
            call(x, y)
        return
    if not (fits(d, a) and fits(d, b)):  # uint8 array << -1: numpy 2 raises
        with pytest.raises(OverflowError, match=name):
            getattr(svod, name)(x, y)
        return
    npf = np.left_shift if name == "bitwise_left_shift" else np.right_shift
    check(call(x, y), npf(ref(a, d), ref(b, d)))


def test_shift_counts_outside_the_width_follow_numpy():
    for d in INTS:
        bits = 8 * d.itemsize
        m = 2 ** bits if d.kind == "u" else None  # -1 as an unsigned value: its max
        a = np.array([v % m if m else v for v in (1, -8, 5, -1, 3, -3, int(np.iinfo(d).min), int(np.iinfo(d).max))], d)
        n = np.array([v % m if m else v for v in (bits - 1, bits, -1, bits + 9, 0, 2, 1, bits - 1)], d)
        check(svod.asarray(a) << svod.asarray(n), np.left_shift(a, n))
        check(svod.asarray(a) >> svod.asarray(n), np.right_shift(a, n))
    # mixed signedness promotes first: uint8 << int8 shifts int16 values by int16 counts
    u, c = np.array([1, 255, 128], np.uint8), np.array([3, -1, 9], np.int8)
    check(svod.asarray(u) << svod.asarray(c), np.left_shift(u, c))
    check(svod.asarray(u) >> svod.asarray(c), np.right_shift(u, c))
    x = svod.asarray([1, 2])
    x <<= 3
    check(x, np.array([8, 16], I64))


def test_float_shift_raises_at_the_op():
    with pytest.raises(TypeError, match=r"bitwise_left_shift: .*float32"):
        svod.asarray([1.0]) << 2
    with pytest.raises(TypeError, match="bitwise_right_shift"):
        svod.bitwise_right_shift(svod.asarray([1, 2]), 1.5)
    with pytest.raises(TypeError, match="bitwise_left_shift: .*bool"):
        svod.bitwise_left_shift(svod.asarray([True]), svod.asarray([False]))
    for d in (np.uint8, np.int16, np.uint64):  # a float operand promotes a narrow int to float: still an error
        with pytest.raises(TypeError, match=r"bitwise_right_shift: .*float"):
            svod.asarray(np.ones(2, d)) >> svod.asarray([1.0, 2.0])
        with pytest.raises(TypeError, match=r"bitwise_and: .*float"):
            svod.asarray(np.ones(2, d)) & 1.5


def test_unsupported_operands_raise_at_the_op():
    x = svod.asarray([1.0, 2.0])
    # the op the user wrote, once, and never the helper that converts the operand (asarray)
    with pytest.raises(TypeError, match=r"^less: not supported for complex operands \(complex64\)"):
        _ = x < 1j
    with pytest.raises(TypeError, match=r"^add: array has dtype float16"):
        x + np.ones(2, np.float16)
    with pytest.raises(TypeError, match=r"^atan2: not supported for complex operands \(complex128\)"):
        svod.atan2(x, np.ones(2, complex))


@SETTINGS
@given(arr=arrays())
def test_conj_real_imag_of_real_dtypes(arr):
    t = svod.asarray(arr)
    check(svod.conj(t), arr)
    check(svod.real(t), arr)
    check(svod.imag(t), np.zeros_like(arr))


_CHAIN = ["asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "atan2", "hypot", "logaddexp",
          "copysign", "exp", "mul", "expm1", "log1p"]


def _chain_step(name, xp, x, y):
    """One step of a fused chain, kept in each function's domain (tanh squashes into (-1, 1))."""
    arc = {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh", "acosh": "arccosh",
           "atanh": "arctanh", "atan2": "arctan2"}
    f = (lambda n: getattr(svod, n)) if xp is svod else (lambda n: getattr(np, arc.get(n, n)))
    if name in ("asin", "acos", "atanh"):
        return f(name)(f("tanh")(x) * 0.9)
    if name in ("sinh", "cosh"):
        return f(name)(f("tanh")(x) * 3)
    if name == "acosh":
        return f(name)(f("abs")(x) + 1)
    if name in ("atan2", "hypot", "logaddexp", "copysign"):
        return f(name)(x, y)
    if name in ("exp", "expm1"):
        return f(name)(f("tanh")(x))
    if name == "log1p":
        return f(name)(f("tanh")(x) * 0.9)
    if name == "mul":
        return x * y
    return f(name)(x)


@FEW
@given(steps=st.lists(st.sampled_from(_CHAIN), min_size=2, max_size=6),
       arr=arrays([F32, F64], shape=(3, 5), lo=-3, hi=3, special=False), other=st.floats(-2, 2))
def test_new_ops_fuse_in_chains(steps, arr, other):
    """A random chain of the new ops is one compiled kernel and matches numpy."""
    x, y = svod.asarray(arr), (svod.asarray(arr[::-1].copy()) + other).realize()
    xn, yn = arr, (arr[::-1] + np.asarray(other, arr.dtype)).astype(arr.dtype)
    for name in steps:
        x, xn = _chain_step(name, svod, x, y), _chain_step(name, np, xn, yn)
    before = svod.stats()["kernels_compiled"] + svod.stats()["kernels_loaded"]
    rtol = 1e-4 if arr.dtype == F32 else 1e-11
    check(x, np.asarray(xn, arr.dtype), rtol=rtol, atol=rtol)
    assert svod.stats()["kernels_compiled"] + svod.stats()["kernels_loaded"] - before <= 1


_INT_CHAIN = ["add", "sub", "mul", "floordiv", "mod", "max", "min", "and", "or", "xor", "shl", "shr", "abs", "neg",
              "invert", "where", "recast", "scalar", "clip", "sign"]


def _int_chain_step(name, xp, x, y):
    """One step of a fused integer chain, the same expression for svod and numpy (both wrap)."""
    d = x.dtype
    other = xp.int8 if np.dtype(d) == np.uint16 else xp.uint16
    if name in ("add", "sub", "mul", "floordiv", "mod", "and", "or", "xor"):
        return {"add": x + y, "sub": x - y, "mul": x * y, "floordiv": x // y, "mod": x % y, "and": x & y,
                "or": x | y, "xor": x ^ y}[name]
    if name in ("max", "min"):
        return (xp.maximum if name == "max" else xp.minimum)(x, y)
    if name in ("shl", "shr"):
        return (x << (y & 7)) if name == "shl" else (x >> (y & 15))
    if name == "abs":
        return xp.abs(x)
    if name == "neg":
        return -x
    if name == "invert":
        return ~x
    if name == "where":
        return xp.where(x > y, x, y - 1)
    if name == "recast":  # through the other width and signedness and back
        return (x.astype(other) * 3 + y.astype(other)).astype(d)
    if name == "scalar":
        return x * 3 + 1
    if name == "clip":
        return xp.clip(x, 1, 100)
    return xp.sign(x) + x


@FEW
@given(steps=st.lists(st.sampled_from(_INT_CHAIN), min_size=2, max_size=7),
       arr=arrays([np.dtype(np.int8), np.dtype(np.uint16)], shape=(3, 5), lo=-(2 ** 16), hi=2 ** 16, special=False))
def test_int8_uint16_ops_fuse_in_chains(steps, arr):
    """A random chain of integer ops over int8 or uint16 (wraparound, unsigned division and
    shifts, casts across widths) is one compiled kernel and matches numpy bit for bit."""
    y_np = arr[::-1].copy()
    x, y = svod.asarray(arr), svod.asarray(y_np)
    xn = arr
    with np.errstate(all="ignore"):
        for name in steps:
            x, xn = _int_chain_step(name, svod, x, y), _int_chain_step(name, np, xn, y_np)
    before = svod.stats()["kernels_compiled"] + svod.stats()["kernels_loaded"]
    check(x, np.asarray(xn, arr.dtype))
    assert svod.stats()["kernels_compiled"] + svod.stats()["kernels_loaded"] - before <= 1


# ----------------------------------------------------------------------------- sorting, searching, sets


def _sort_reference(x: np.ndarray, axis: int, descending: bool) -> np.ndarray:
    """Stable order along `axis`, written independently of svod's: ascending puts NaNs
    last (numpy), descending reverses distinct values and keeps ties in input order."""
    xm = np.moveaxis(x, axis, -1)
    out = np.empty(xm.shape, np.int64)
    for idx in np.ndindex(xm.shape[:-1]):
        row = xm[idx].astype(np.float64)
        nan = np.isnan(row)
        pos = np.arange(row.size)
        if descending:  # lexsort: last key first
            out[idx] = np.lexsort((pos, -np.where(nan, 0, row), ~nan))
        else:
            out[idx] = np.lexsort((pos, np.where(nan, 0, row), nan))
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("name", ["sort", "argsort"])
@SETTINGS
@given(arr=arrays(min_dims=1), data=st.data(), descending=st.booleans())
def test_sort_argsort(name, arr, data, descending):
    axis = data.draw(st.integers(-arr.ndim, arr.ndim - 1))
    order = _sort_reference(arr, axis, descending)
    t = svod.asarray(arr)
    if name == "argsort":
        check(svod.argsort(t, axis=axis, descending=descending), order)
    else:
        want = np.take_along_axis(arr, order, axis=axis)
        check(svod.sort(t, axis=axis, descending=descending), want, signed_zero=True)


def test_sort_fuses_with_its_neighbours_and_rejects_0d():
    x = svod.asarray(np.array([3.0, np.nan, -1.0, 2.0], F32))
    check(svod.sort(x * 2) + 1, np.array([-1.0, 5.0, 7.0, np.nan], F32))
    check(svod.argsort(svod.asarray([2, 1, 2, 0]), descending=True), np.array([0, 2, 1, 3]))
    with pytest.raises(ValueError, match="sort"):
        svod.sort(svod.asarray(1.0))


@SETTINGS
@given(a=arrays(ALL, shape=st.integers(0, 8).map(lambda n: (n,))), b=arrays(ALL),
       side=st.sampled_from(["left", "right"]), use_sorter=st.booleans())
def test_searchsorted(a, b, side, use_sorter):
    d = np.result_type(a.dtype, b.dtype)
    sa = np.sort(a.astype(d), kind="stable")
    if use_sorter:
        perm = np.random.default_rng(0).permutation(a.size)
        x1, sorter = sa[perm], np.argsort(perm, kind="stable")
        got = svod.searchsorted(svod.asarray(x1), svod.asarray(b), side=side, sorter=svod.asarray(sorter))
    else:
        got = svod.searchsorted(svod.asarray(sa), svod.asarray(b), side=side)
    check(got, np.searchsorted(sa, b.astype(d), side=side).astype(I64))


@SETTINGS
@given(arr=arrays(min_dims=1))
def test_nonzero(arr):
    got = svod.nonzero(svod.asarray(arr))
    want = np.nonzero(arr)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        check(g, w.astype(I64))


@pytest.mark.parametrize("name", ["unique_all", "unique_counts", "unique_inverse", "unique_values"])
@SETTINGS
@given(arr=arrays(lo=-3, hi=3))
def test_unique(name, arr):
    got, want = getattr(svod, name)(svod.asarray(arr)), getattr(np, name)(arr)
    if name == "unique_values":
        got, want = (got,), (want,)
    for g, w in zip(got, want):
        check(g, w if w.dtype == arr.dtype else w.astype(I64))


@SETTINGS
@given(arr=arrays(min_dims=1, max_side=5), data=st.data())
def test_take(arr, data):
    axis = data.draw(st.integers(-arr.ndim, arr.ndim - 1))
    n = arr.shape[axis]
    assume_n = data.draw(st.lists(st.integers(-n, n - 1), max_size=6)) if n else []
    idx = np.array(assume_n, np.int64)
    check(svod.take(svod.asarray(arr), svod.asarray(idx), axis=axis), np.take(arr, idx, axis=axis))
    check(svod.take(svod.asarray(arr), svod.asarray(idx)) if arr.size else svod.asarray(arr[:0].reshape(-1)),
          np.take(arr, idx) if arr.size else arr[:0].reshape(-1))


def test_take_checks_indices_where_it_is_called():
    x = svod.asarray([[1, 2], [3, 4]])
    with pytest.raises(IndexError, match="take: index 2 is out of bounds for axis 0"):
        svod.take(x, svod.asarray([0, 2]), axis=0)
    with pytest.raises(TypeError, match="take: indices must be integers"):
        svod.take(x, svod.asarray([0.0]), axis=0)
    check(svod.take(x, svod.asarray([-1, 0]), axis=1) * 10, np.array([[20, 10], [40, 30]]))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
@SETTINGS
@given(a=arrays(shape=(3,)), b=arrays(shape=(2,)), c=arrays(shape=(4,)), n=st.integers(0, 3))
def test_meshgrid(indexing, a, b, c, n):
    ins = [a, b, c][:n]
    got = svod.meshgrid(*[svod.asarray(x) for x in ins], indexing=indexing)
    want = np.meshgrid(*ins, indexing=indexing)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        check(g, w)


# ----------------------------------------------------------------------------- linalg


def _mats(rng, d, shape):
    a = rng.normal(size=shape)
    if np.dtype(d).kind == "i":
        a = np.round(a * 3)
    return a.astype(d)


def _spd(rng, d, n, batch=()):
    a = rng.normal(size=batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(d)


LA_DTYPES = [F32, F64, I64]


@pytest.mark.parametrize("d", LA_DTYPES)
@pytest.mark.parametrize("batch", [(), (2,)])
def test_linalg_lapack_steps_equal_numpy(d, batch):
    rng = np.random.default_rng(5)
    fd = float_result(np.dtype(d))
    a = _mats(rng, d, batch + (4, 4))
    r = _mats(rng, d, batch + (5, 3))
    spd = _spd(rng, d, 4, batch)
    b = _mats(rng, d, batch + (4, 2))
    A, R, S, B = (svod.asarray(x) for x in (a, r, spd, b))
    af, rf, sf, bf = (x.astype(fd) for x in (a, r, spd, b))
    la = np.linalg
    check(svod.linalg.det(A), la.det(af))
    check(svod.linalg.inv(A), la.inv(af))
    check(svod.linalg.pinv(R), la.pinv(rf, rtol=None))
    check(svod.linalg.cholesky(S), la.cholesky(sf))
    check(svod.linalg.cholesky(S, upper=True), la.cholesky(sf, upper=True))
    for got, want in zip(svod.linalg.slogdet(A), la.slogdet(af)):
        check(got, want)
    for got, want in zip(svod.linalg.eigh(S), la.eigh(sf)):
        check(got, want)
    check(svod.linalg.eigvalsh(S), la.eigvalsh(sf))
    for mode in ("reduced", "complete"):
        for got, want in zip(svod.linalg.qr(R, mode=mode), la.qr(rf, mode=mode)):
            check(got, want)
    for full in (True, False):
        for got, want in zip(svod.linalg.svd(R, full_matrices=full), la.svd(rf, full_matrices=full)):
            check(got, want)
    check(svod.linalg.svdvals(R), la.svd(rf, compute_uv=False))
    check(svod.linalg.solve(A, B), la.solve(af, bf))
    if not batch:
        check(svod.linalg.solve(A, svod.asarray(b[:, 0])), la.solve(af, bf[:, 0]))


def test_linalg_multi_output_call_runs_once_and_fuses():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(6, 4))
    q, r = svod.linalg.qr(svod.asarray(a))
    before = svod.stats()["kernels_launched"]
    check((q @ r) * 2, (a * 2), rtol=1e-12, atol=1e-12)
    assert svod.stats()["kernels_launched"] - before <= 2  # one qr step (both results), one fused matmul


def test_linalg_errors():
    with pytest.raises(ValueError, match="linalg.inv: needs square matrices"):
        svod.linalg.inv(svod.ones((2, 3)))
    with pytest.raises(ValueError, match="linalg.det: needs a matrix"):
        svod.linalg.det(svod.ones(3))
    with pytest.raises(ValueError, match="linalg.solve"):
        svod.linalg.solve(svod.eye(3), svod.ones(4))
    sing = svod.linalg.inv(svod.zeros((3, 3), dtype=svod.float64))
    with pytest.raises(np.linalg.LinAlgError) as e:
        sing.numpy()
    assert "svod.linalg.inv" in " ".join(e.value.__notes__)
    check(svod.linalg.inv(svod.eye(2) * 2), np.eye(2, dtype=F32) / 2)  # svod keeps working after it


@pytest.mark.parametrize("d", LA_DTYPES)
def test_linalg_composed_functions(d):
    rng = np.random.default_rng(3)
    fd = float_result(np.dtype(d))
    a = _mats(rng, d, (2, 4, 4))
    v, w = _mats(rng, d, (5, 3)), _mats(rng, d, (3,))
    A, V, W = svod.asarray(a), svod.asarray(v), svod.asarray(w)
    af = a.astype(fd)
    rt = 1e-5 if fd == F32 else 1e-12
    for k in (-2, -1, 0, 1, 3, 5):
        check(svod.linalg.diagonal(A, offset=k), np.diagonal(a, offset=k, axis1=-2, axis2=-1))
        check(svod.linalg.trace(A, offset=k), np.trace(a, offset=k, axis1=-2, axis2=-1).astype(
            a.dtype if a.dtype.kind == "f" else I64))
    check(svod.linalg.outer(W, W), np.outer(w, w))
    check(svod.linalg.cross(V, W), np.cross(v, w))
    for n in (0, 1, 2, 5):
        check(svod.linalg.matrix_power(A, n), np.linalg.matrix_power(a, n), rtol=rt, atol=rt)
    check(svod.linalg.matrix_power(svod.asarray(af), -2), np.linalg.matrix_power(af, -2), rtol=100 * rt, atol=rt)
    check(svod.linalg.matrix_rank(A), np.linalg.matrix_rank(af).astype(I64))
    check(svod.linalg.matrix_rank(svod.ones((3, 3))), np.array(1, I64))
    for ord_ in ("fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf):
        check(svod.linalg.matrix_norm(A, ord=ord_), np.linalg.matrix_norm(af, ord=ord_), rtol=rt, atol=rt)
    check(svod.linalg.matrix_norm(A, keepdims=True), np.linalg.matrix_norm(af, keepdims=True), rtol=rt)
    for ord_ in (2, 1, 0, math.inf, -math.inf, 3, 0.5):
        for axis in (None, 1, (0, 2)):
            check(svod.linalg.vector_norm(A, ord=ord_, axis=axis), np.linalg.vector_norm(af, ord=ord_, axis=axis),
                  rtol=rt, atol=rt)


def test_lstsq_equals_numpy():
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(8, 3)), rng.normal(size=(8, 2))
    for bb in (b, b[:, 0]):
        got, want = svod.linalg.lstsq(svod.asarray(a), svod.asarray(bb)), np.linalg.lstsq(a, bb)
        for g, w in zip(got, want):
            check(g, w, rtol=1e-10, atol=1e-12)  # rank: int32, as numpy's
    deficient = np.ones((4, 3))
    got, want = svod.linalg.lstsq(svod.asarray(deficient), svod.asarray(b[:4])), np.linalg.lstsq(deficient, b[:4])
    assert got.residuals.shape == want[1].shape == (0,) and int(got.rank.item()) == int(want[2]) == 1


# ----------------------------------------------------------------------------- fft


def test_fft_real_functions():
    check(svod.fft.fftfreq(5, d=0.5), np.fft.fftfreq(5, d=0.5).astype(F32))
    check(svod.fft.rfftfreq(6, dtype=svod.float64), np.fft.rfftfreq(6))
    x = np.arange(12.0).reshape(3, 4)
    check(svod.fft.fftshift(svod.asarray(x)), np.fft.fftshift(x))
    check(svod.fft.ifftshift(svod.asarray(x), axes=1), np.fft.ifftshift(x, axes=1))


_FFT_CASES = [("fft", {}), ("fft", {"n": 7, "axis": 0}), ("ifft", {"norm": "ortho"}), ("rfft", {"n": 10}),
              ("ihfft", {"axis": 0, "norm": "forward"}), ("fftn", {}), ("ifftn", {"axes": (1,)}),
              ("rfftn", {"s": (3, 6), "axes": (0, 1)}), ("irfft", {}), ("irfft", {"n": 9}), ("hfft", {"axis": 0}),
              ("irfftn", {"axes": (0, 1)})]


@pytest.mark.parametrize("d", [F32, F64], ids=str)
@pytest.mark.parametrize("case", _FFT_CASES, ids=lambda c: f"{c[0]}-{'-'.join(map(str, c[1].values()))}")
def test_fft_transforms_are_numpys(case, d):
    """pocketfft as a library step: numpy's values bit for bit, numpy 2's dtypes (float32
    and complex64 in single precision), results that feed fused kernels."""
    name, kw = case
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 8)).astype(d)
    if name in ("irfft", "hfft", "irfftn"):
        x = (x + 1j * rng.standard_normal((5, 8))).astype(np.complex64 if d == F32 else np.complex128)
    want = getattr(np.fft, name)(x, **kw)
    got = getattr(svod.fft, name)(svod.asarray(x), **kw)
    assert got.dtype.name == want.dtype.name and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)
    fused = svod.sum(svod.abs(got) * 2)
    np.testing.assert_allclose(fused.numpy(), np.sum(np.abs(want) * 2), rtol=1e-5)


def test_fft_of_integers_and_errors():
    x = np.arange(6)
    check_c = svod.fft.fft(svod.asarray(x))
    assert check_c.dtype == svod.complex64  # the default float's precision (complex128 under svod.numpy)
    np.testing.assert_allclose(check_c.numpy(), np.fft.fft(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="fft.fft: norm"):
        svod.fft.fft(svod.asarray(x), norm="none")
    with pytest.raises(TypeError, match="fft.rfft: takes a real array"):
        svod.fft.rfft(svod.asarray(x) * 1j)
    with pytest.raises(ValueError, match="fft.ifft: n"):
        svod.fft.ifft(svod.asarray(x), n=0)


# ----------------------------------------------------------------------------- module end


def test_zz_suite_runs_with_zero_interpreter_fallbacks():
    """Over this module (and test_ops when both ran): nothing ran in the interpreter."""
    total = _FALLBACKS["interpreter_fallbacks"]
    print(f"interpreter_fallbacks over {_FALLBACKS['tests']} tests: {total}")
    assert total == 0


__all__ = ["ALL", "BOOL", "F32", "F64", "I32", "I64", "math"]


def test_pinv_takes_an_array_rtol_broadcast_against_the_stack():
    """The Array API's `rtol: float | array`: one cut-off per matrix of the stack (numpy's
    rcond broadcasting), lazy like x; a shape that does not broadcast is refused by name."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 5)).astype(np.float64)
    x[1, :, 0] = x[1, :, 1] * (1 + 1e-9)  # a nearly dependent column: the cut-off decides
    rt = np.array([1e-15, 1e-3, 0.5])
    got = svod.linalg.pinv(svod.asarray(x), rtol=svod.asarray(rt))
    assert not got.is_realized
    np.testing.assert_allclose(got.numpy(), np.linalg.pinv(x, rtol=rt), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(svod.linalg.pinv(svod.asarray(x), rtol=np.array(1e-3)).numpy(),
                               np.linalg.pinv(x, rtol=1e-3), rtol=1e-9, atol=1e-12)
    empty = svod.linalg.pinv(svod.asarray(np.zeros((0, 2, 3))), rtol=svod.asarray(np.zeros(0)))
    assert empty.shape == (0, 3, 2)
    with pytest.raises(svod.errors.ShapeError, match=r"linalg.pinv: rtol of shape \(2,\)"):
        svod.linalg.pinv(svod.asarray(x), rtol=np.array([0.1, 0.2]))
