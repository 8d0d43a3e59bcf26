"""Every elementwise function and reduction of the Array API, on every dtype it takes,
runs in generated code: no kernel falls back to the numpy interpreter
(`svod.stats()["interpreter_fallbacks"]` stays 0), and the result is numpy's."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import svod

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float32", "float64",
          "complex64", "complex128")
UNARY = ("abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "bitwise_invert", "ceil", "conj", "cos", "cosh",
         "exp", "expm1", "floor", "imag", "isfinite", "isinf", "isnan", "log", "log1p", "log2", "log10",
         "logical_not", "negative", "positive", "real", "round", "sign", "signbit", "sin", "sinh", "square", "sqrt",
         "tan", "tanh", "trunc")
BINARY = ("add", "atan2", "bitwise_and", "bitwise_left_shift", "bitwise_or", "bitwise_right_shift", "bitwise_xor",
          "copysign", "divide", "equal", "floor_divide", "greater", "greater_equal", "hypot", "less", "less_equal",
          "logaddexp", "logical_and", "logical_or", "logical_xor", "maximum", "minimum", "multiply", "not_equal", "pow",
          "remainder", "subtract")
REDUCTIONS = ("sum", "prod", "max", "min", "mean", "var", "std", "argmax", "argmin", "cumulative_sum", "all", "any")
# numpy's name where it differs from the Array API's
NUMPY = {"acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh", "atan": "arctan",
         "atanh": "arctanh", "atan2": "arctan2", "bitwise_invert": "invert", "bitwise_left_shift": "left_shift",
         "bitwise_right_shift": "right_shift", "pow": "power", "cumulative_sum": "cumsum"}


def _array(dt: str, shape, rng) -> np.ndarray:
    if dt == "bool":
        return rng.random(shape) > 0.5
    if dt.startswith("complex"):
        return (rng.random(shape) * 0.9 + 0.05 + 1j * (rng.random(shape) * 0.9 + 0.05)).astype(dt)
    if dt.startswith("float"):
        return (rng.random(shape) * 0.9 + 0.05).astype(dt)
    return rng.integers(1, 3, shape).astype(dt)


def _accepts(fn, args) -> bool:
    """Whether svod takes these operands at all (an op numpy rejects for the dtype, as
    `floor` of a complex, raises at the call: not this test's matter)."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the op does not apply to this dtype
        return False
    return True


def _with_neighbour(got):
    """`got` fused with a neighbour that keeps its values."""
    return svod.logical_and(got, got) if got.dtype == svod.bool else got * 1


def _compare(out: np.ndarray, want: np.ndarray, what: str = "") -> None:
    wide = np.complex128 if np.iscomplexobj(out) or np.iscomplexobj(want) else np.float64
    single = out.dtype in (np.float32, np.complex64)
    np.testing.assert_allclose(out.astype(wide), want.astype(wide), rtol=2e-6 if single else 1e-12, atol=1e-6,
                               equal_nan=True, err_msg=what)


def _check(fn, args, want) -> None:
    before = svod.stats()["interpreter_fallbacks"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", svod.SvodWarning)  # a fallback warns: fail loudly
        out = _with_neighbour(fn(*args)).numpy()
    assert svod.stats()["interpreter_fallbacks"] == before, "a kernel fell back to the interpreter"
    _compare(out, want)


@pytest.mark.parametrize("name", UNARY + BINARY)
def test_elementwise_runs_compiled_on_every_dtype(name):
    """One realize per function for all its dtypes, planned by the greedy planner (the
    search has nothing to choose between independent outputs, and the code is the
    matter here), each result checked alone."""
    rng = np.random.default_rng(0)
    k = 1 if name in UNARY else 2
    ref_fn = getattr(np, NUMPY.get(name, name))
    fn = getattr(svod, name)
    cases = []
    for dt in DTYPES:
        xs = [_array(dt, 64, rng) for _ in range(k)]
        args = [svod.asarray(x) for x in xs]
        if not _accepts(fn, args):
            continue
        with np.errstate(all="ignore"):
            want = np.asarray(ref_fn(*xs))
            if want.dtype == np.float16:  # numpy's float of small ints and bools; svod's is float32
                want = np.asarray(ref_fn(*(x.astype(np.float32) for x in xs)))
        cases.append((dt, _with_neighbour(fn(*args)), want))
    assert cases, f"svod.{name} took no dtype"
    before = svod.stats()["interpreter_fallbacks"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", svod.SvodWarning)  # a fallback warns: fail loudly
        with svod.search_limits(enabled=False):
            svod.realize(*(got for _, got, _ in cases))
    assert svod.stats()["interpreter_fallbacks"] == before, "a kernel fell back to the interpreter"
    for dt, got, want in cases:
        _compare(got.numpy(), want, f"svod.{name} on {dt}")


@pytest.mark.slow  # ~35 s of compiles (12 reductions x 13 dtypes x 3 axes): .ci/run's bounded step
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_run_compiled_on_every_dtype_and_axis(name):
    rng = np.random.default_rng(1)
    ref_fn = getattr(np, NUMPY.get(name, name))
    for dt in DTYPES:
        x = _array(dt, (300, 40), rng)
        for axis in (0, 1) if name == "cumulative_sum" else (0, 1, None):
            fn = functools.partial(getattr(svod, name), axis=axis)
            args = [svod.asarray(x)]
            if not _accepts(fn, args):
                continue
            with np.errstate(all="ignore"):
                want = np.asarray(ref_fn(x, axis=axis))
            _check(fn, args, want)
