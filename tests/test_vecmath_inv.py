"""Accuracy and special values of svod.codegen.vecmath_inv (the inverse trigonometric and
hyperbolic functions, atan2, hypot, logaddexp).

Each case compiles ``math_kernel_ir`` (a vector loop + scalar tail) and compares against
numpy on long double (80-bit here), in ulps of the result dtype; special values must equal
numpy's float results, signs of zeros included.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest

from svod.codegen import jit
from svod.codegen.vecmath_inv import BINARY, FUNCTIONS, math_kernel_ir
from tests.test_vecmath import LD, MAX_ULP, ulp_error

REF = {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
       "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "atan2": np.arctan2, "hypot": np.hypot,
       "logaddexp": np.logaddexp}
UNARY = sorted(set(FUNCTIONS) - BINARY)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -2.0, 5e-324, -5e-324, 1e-310, 0.5, -0.5,
           1e300, -1e300, 3e38, 1e-40, 710.0, 710.5, -710.4, 89.4, 89.5, 0.9999999, -0.99999999, 22.0, 2.0 ** 28]


def test_every_function_has_a_reference():
    assert set(REF) == set(FUNCTIONS)


@functools.cache
def _kernel(name: str, dtype: str, lanes: int | None):
    mod = jit.compile_ir(math_kernel_ir(name, dtype, lanes=lanes), name=f"test_inv_{name}_{dtype}_{lanes}")
    nin = 2 if name in BINARY else 1
    return mod, mod.ctypes_fn("kernel", None, [ctypes.c_void_p] * (1 + nin) + [ctypes.c_int64])


def run(name: str, *args: np.ndarray, lanes: int | None = None) -> np.ndarray:
    args = [np.ascontiguousarray(a) for a in args]
    out = np.empty_like(args[0])
    _kernel(name, args[0].dtype.name, lanes)[1](out.ctypes.data, *[a.ctypes.data for a in args], out.size)
    return out


def _signed(rng, n, lo, hi):
    return np.exp(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)


def sweep(name: str, dt) -> tuple[np.ndarray, ...]:
    """Dense sweeps of each branch's range, random points over the magnitudes, edges."""
    rng = np.random.default_rng(29)
    f32 = dt == np.float32
    big = 88.0 if f32 else 709.0
    top = 80 if f32 else 700
    one = {
        "asin": np.concatenate([np.linspace(-1, 1, 100_001), rng.uniform(-1e-3, 1e-3, 1000)]),
        "atan": np.concatenate([np.linspace(-10, 10, 50_001), _signed(rng, 20_000, -top, top)]),
        "sinh": np.concatenate([np.linspace(-big - 1.5, big + 1.5, 50_001), rng.uniform(-2, 2, 20_000),
                                rng.uniform(-1e-5, 1e-5, 1000)]),
        "asinh": np.concatenate([np.linspace(-5, 5, 50_001), _signed(rng, 20_000, -top, top)]),
        "acosh": np.concatenate([np.linspace(1, 5, 50_001), 1 + np.exp(rng.uniform(-40, 0, 10_000)),
                                 np.exp(rng.uniform(0, top, 20_000))]),
        "atanh": np.concatenate([np.linspace(-1, 1, 100_001), rng.uniform(-1e-3, 1e-3, 1000)]),
    }
    one["acos"], one["cosh"] = one["asin"], one["sinh"]
    if name in one:
        return (one[name].astype(dt),)
    n = 40_000
    if name == "atan2":
        y = np.concatenate([rng.normal(size=n), _signed(rng, n, -top, top)])
        x = np.concatenate([rng.normal(size=n), _signed(rng, n, -top, top)])
    elif name == "hypot":
        y = np.concatenate([rng.normal(size=n), np.exp(rng.uniform(-top, top, n))])
        x = np.concatenate([rng.normal(size=n), np.exp(rng.uniform(-top, top, n))])
    else:  # logaddexp away from results that cancel to ~0 (there numpy's error is absolute too)
        y = np.concatenate([rng.uniform(-50, 50, n), rng.uniform(0, 100, n), rng.uniform(-1e3, -900, n)])
        x = np.concatenate([rng.uniform(-50, 50, n) + 60, rng.uniform(0, 100, n), rng.uniform(-1e3, -900, n)])
    return y.astype(dt), x.astype(dt)


@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_accuracy(name, dt):
    args = sweep(name, dt)
    got = run(name, *args)
    with np.errstate(all="ignore"):
        e = ulp_error(got, REF[name](*[a.astype(LD) for a in args]))
    k = int(np.argmax(e))
    assert e[k] <= MAX_ULP, f"{name} {dt.__name__}: {e[k]:.2f} ulp at {[a[k] for a in args]}: {got[k]!r}"


@pytest.mark.parametrize("lanes", [None, 1])
@pytest.mark.parametrize("dt", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_special_values_follow_numpy(name, dt, lanes):
    with np.errstate(all="ignore"):
        x = np.array(SPECIAL, dt)
        args = [a.ravel() for a in np.meshgrid(x, x)] if name in BINARY else [x]
        want = REF[name](*args)
        exact = REF[name](*[a.astype(LD) for a in args])  # numpy's float64 logaddexp is 15 ulp off at one pair
    got = run(name, *args, lanes=lanes)
    same = ((got == want) & (np.signbit(got) == np.signbit(want))) | (np.isnan(got) & np.isnan(want))
    with np.errstate(all="ignore"):
        close = np.isfinite(want) & (np.signbit(got) == np.signbit(want)) & \
            (np.abs(got.astype(LD) - exact) <= MAX_ULP * np.spacing(np.abs(want)).astype(LD))
    bad = np.nonzero(~(same | close))[0]
    assert not bad.size, [(tuple(a[i] for a in args), got[i], want[i]) for i in bad[:5]]
