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
from tests.test_ops import (
    ALL,
    BOOL,
    F32,
    F64,
    FEW,
    I32,
    I64,
    SETTINGS,
    arrays,
    as_operand,
    binary_operands,
    check,
    expected_dtype,
    float_result,
    ref,
    tol,
)

_FALLBACKS = {"interpreter_fallbacks": 0, "tests": 0}


@pytest.fixture(autouse=True)
def _count_fallbacks():
    yield
    _FALLBACKS["interpreter_fallbacks"] += svod.stats()["interpreter_fallbacks"]
    _FALLBACKS["tests"] += 1


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
    if d.kind != "i":
        with pytest.raises(TypeError, match=name):
            call(x, y)
        return
    npf = np.left_shift if name == "bitwise_left_shift" else np.right_shift
    check(call(x, y), npf(ref(a, d), ref(b, d)))


def test_shift_counts_outside_the_width_follow_numpy():
    for d in (I32, I64):
        bits = 8 * d.itemsize
        a = np.array([1, -8, 5, -1, 3, -3], d)
        n = np.array([bits - 1, bits, -1, bits + 9, 0, 2], d)
        check(svod.asarray(a) << svod.asarray(n), np.left_shift(a, n))
        check(svod.asarray(a) >> svod.asarray(n), np.right_shift(a, n))
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


@SETTINGS
@given(arr=arrays())
def test_conj_real_imag_of_real_dtypes(arr):
    t = svod.asarray(arr)
    check(svod.conj(t), arr)
    check(svod.real(t), arr)
    check(svod.imag(t), np.zeros_like(arr))


_CHAIN = ["asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "atan2", "hypot", "logaddexp",
          "copysign", "exp", "mul"]


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
    if name == "exp":
        return f("exp")(f("tanh")(x))
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


# ----------------------------------------------------------------------------- module end


def test_zz_suite_runs_with_zero_interpreter_fallbacks():
    total = _FALLBACKS["interpreter_fallbacks"]
    print(f"interpreter_fallbacks over {_FALLBACKS['tests']} tests: {total}")
    assert total == 0


__all__ = ["ALL", "BOOL", "F32", "F64", "I32", "I64", "math"]
