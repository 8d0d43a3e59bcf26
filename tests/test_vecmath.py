"""Accuracy and special values of svod.codegen.vecmath, both the polynomial and libmvec paths.

Each case compiles ``math_kernel_ir`` (a vector loop + scalar tail calling the function)
and compares against numpy: a float64 reference for float32, long double (or mpmath for
erf) for float64. Errors are in ulps of the result dtype.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np
import pytest

from svod.codegen import jit
from svod.codegen.vecmath import get_math_fn, math_kernel_ir

LD = np.longdouble
PATHS = ["poly"] + (["libmvec"] if jit.has_libmvec() else [])
DTYPES = [np.float32, np.float64]
MAX_ULP = 4.0


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in units of spacing(ref rounded to got.dtype); 0 where they agree
    (NaN with NaN, inf with an overflowing reference), inf where one is NaN only."""
    dt = got.dtype
    with np.errstate(all="ignore"):
        refc = np.asarray(ref).astype(dt)
        same = (got == refc) | (np.isnan(got) & np.isnan(refc))
        e = np.abs(got.astype(LD) - np.asarray(ref, LD)) / np.spacing(np.abs(refc)).astype(LD)
    e[same] = 0
    e[np.isnan(e)] = np.inf
    return e.astype(np.float64)


@functools.cache
def _kernel(name: str, dtype: str, path: str):
    mod = jit.compile_ir(math_kernel_ir(name, dtype, use_libmvec=(path == "libmvec")),
                         name=f"test_{name}_{dtype}_{path}")
    nin = 2 if name == "pow" else 1
    return mod.ctypes_fn("kernel", None, [ctypes.c_void_p] * (1 + nin) + [ctypes.c_int64])


def run(name: str, path: str, *args: np.ndarray) -> np.ndarray:
    args = [np.ascontiguousarray(a) for a in args]
    out = np.empty_like(args[0])
    _kernel(name, args[0].dtype.name, path)(out.ctypes.data, *[a.ctypes.data for a in args], out.size)
    return out


def _mp_erf(x: np.ndarray) -> np.ndarray:
    mpmath = pytest.importorskip("mpmath")
    key = (x.dtype.str, x.tobytes())
    r = _MP_ERF.get(key)
    if r is None:  # (200,001 mpmath calls take ~6 s: both paths of a dtype share one sweep)
        r = _MP_ERF[key] = np.array([LD(mpmath.erf(float(v))) for v in x], LD)
    return np.where(x == 0, np.asarray(x, LD), r)  # mpmath has no -0.0


_MP_ERF: dict = {}


REFS = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
    "expm1": np.expm1, "log1p": np.log1p, "sqrt": np.sqrt,
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
}


def reference(name, x, y=None):
    X = np.asarray(x, LD)
    with np.errstate(all="ignore"):
        if name == "pow":
            return np.power(X, np.asarray(y, LD))
        if name == "erf":
            return _mp_erf(x)
        return REFS[name](X)


def sweep(name: str, dt) -> np.ndarray:
    """A dense sweep of the normal range plus random points (incl. over/underflow zones)."""
    f32 = dt == np.float32
    rng = np.random.default_rng(1234)
    tiny = float(np.finfo(dt).tiny)
    eps = float(np.finfo(dt).eps)
    # tiny and subnormal magnitudes, both signs: where exp(x) - 1 and log(1 + x) cancel
    sub = float(np.finfo(dt).smallest_subnormal)
    small = np.concatenate([np.exp(rng.uniform(np.log(sub), 0, 20_000)) * rng.choice([-1, 1], 20_000),
                            rng.uniform(-4 * tiny, 4 * tiny, 2_000)])
    s = {
        "exp": np.linspace(-104 if f32 else -746, 89 if f32 else 710, 200_001),
        "log": np.concatenate([np.exp(rng.uniform(-87 if f32 else -707, 88 if f32 else 709, 100_000)),
                               rng.uniform(0, 4 * tiny, 2000), rng.uniform(0.5, 2, 50_000)]),
        "tanh": np.concatenate([np.linspace(-20, 20, 200_001), rng.uniform(-1e-3, 1e-3, 1000)]),
        "sigmoid": np.linspace(-110 if f32 else -750, 40, 200_001),
        "erf": np.linspace(-7, 7, 200_001 if f32 else 8_001),
        "sin": np.concatenate([np.linspace(-50, 50, 200_001), rng.uniform(-1e6, 1e6, 50_000)]),
        "expm1": np.concatenate([np.linspace(-30, 88 if f32 else 709, 200_001), rng.uniform(-1, 1, 20_000),
                                 small]),
        "log1p": np.concatenate([np.linspace(-0.999, 3, 200_001), np.exp(rng.uniform(-80, 80, 50_000)), small,
                                 -1 + np.exp(rng.uniform(np.log(eps / 4), 0, 20_000))]),
        "sqrt": np.exp(rng.uniform(-80, 80, 50_000)),
    }
    s["cos"] = s["sin"]
    return s[name].astype(dt)


UNARY = ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "expm1", "log1p", "sqrt"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_accuracy(name, dt, path):
    x = sweep(name, dt)
    got = run(name, path, x)
    e = ulp_error(got, reference(name, x))
    k = int(np.argmax(e))
    assert e[k] <= MAX_ULP, f"{name} {dt.__name__} {path}: {e[k]:.2f} ulp at x={x[k]!r}: {got[k]!r}"


def test_tanh_f32_rational_bits_sweep():
    """float32 tanh's half-angle rational (vecpoly._tanh32): every 61st bit pattern of
    (0, 10] (subnormals included) both signs, and every float32 in [8.9, 9.2] (the clamp
    at 9.02; tanh rounds to 1.0f from 9.011), within 2.5 ulp (an exhaustive sweep measured
    2.40, docs/codegen.md); results never exceed 1 in magnitude; tiny x give x exactly."""
    bits = np.arange(1, 0x41200000, 61, dtype=np.uint32)
    lo, hi = np.array([8.9, 9.2], np.float32).view(np.uint32)
    bits = np.concatenate([bits, np.arange(lo, hi + 1, dtype=np.uint32)])
    x = np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)
    got = run("tanh", "poly", x)
    e = ulp_error(got, np.tanh(x.astype(np.float64)))
    k = int(np.argmax(e))
    assert e[k] <= 2.5, f"tanh f32: {e[k]:.2f} ulp at x={x[k]!r}: {got[k]!r}"
    assert np.all(np.abs(got) <= 1) and np.array_equal(np.signbit(got), np.signbit(x))
    tiny = np.abs(x) < 2.0 ** -13
    assert np.array_equal(got[tiny], x[tiny])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
def test_pow_accuracy(dt, path):
    rng = np.random.default_rng(7)
    f32 = dt == np.float32
    x = np.concatenate([np.exp(rng.uniform(-30, 30, 100_000)), rng.uniform(0, 3, 50_000),
                        -np.round(rng.uniform(0, 20, 10_000))]).astype(dt)
    y = np.concatenate([rng.uniform(-3, 3, 100_000), rng.uniform(-40 if f32 else -300, 40 if f32 else 300, 50_000),
                        np.round(rng.uniform(-30, 30, 10_000))]).astype(dt)
    got = run("pow", path, x, y)
    e = ulp_error(got, reference("pow", x, y))
    k = int(np.argmax(e))
    assert e[k] <= MAX_ULP, f"pow {path}: {e[k]:.2f} ulp at x={x[k]!r} y={y[k]!r}: {got[k]!r}"


SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.0]


def _specials(dt):
    info = np.finfo(dt)
    sub = float(info.smallest_subnormal)
    extra = [sub, -sub, 3 * sub, float(info.tiny), float(info.max), -float(info.max), 1e-30, -1e-30]
    # exp/expm1 overflow and underflow boundaries
    extra += [88.72283, 88.7229, -87.33654, -103.97, -104.0] if dt == np.float32 else \
        [709.782712893384, 709.7828, -708.3964, -745.1332, -746.0]
    return np.array(SPECIAL + extra, dt)


def _same(got, ref):
    with np.errstate(all="ignore"):
        ref = np.asarray(ref).astype(got.dtype)
    ok = (np.isnan(got) == np.isnan(ref)) & (np.signbit(got) == np.signbit(ref)) | np.isnan(ref)
    ok &= (ulp_error(got, ref) <= MAX_ULP)
    return ok


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", UNARY)
def test_unary_special_values(name, dt, path):
    x = _specials(dt)
    got = run(name, path, x)
    ref = reference(name, x)
    ok = _same(got, ref)
    assert ok.all(), f"{name} {dt.__name__} {path}: x={x[~ok]} got={got[~ok]} want={ref[~ok].astype(dt)}"


def test_documented_specials():
    x = np.array([-np.inf, np.inf, np.nan, -0.0], np.float32)
    assert np.array_equal(run("exp", "poly", x), [0, np.inf, np.nan, 1], equal_nan=True)
    t = run("tanh", "poly", x)
    assert np.array_equal(t, [-1, 1, np.nan, 0], equal_nan=True) and np.signbit(t[3])
    assert np.array_equal(run("sigmoid", "poly", x), [0, 1, np.nan, 0.5], equal_nan=True)
    assert np.isnan(run("sin", "poly", x)[:3]).all() and np.isnan(run("cos", "poly", x)[:3]).all()
    lg = run("log", "poly", np.array([0.0, -1.0, np.inf, 1e-45], np.float32))
    assert lg[0] == -np.inf and np.isnan(lg[1]) and lg[2] == np.inf
    assert abs(lg[3] - np.log(np.float64(1e-45).astype(np.float32).astype(np.float64))) < 1e-5


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
def test_pow_special_values(dt, path):
    vals = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan, 2.5, -2.5]
    xx, yy = np.meshgrid(np.array(vals, dt), np.array(vals, dt))
    x, y = xx.ravel(), yy.ravel()
    got = run("pow", path, x, y)
    with np.errstate(all="ignore"):
        ref = np.power(x, y)
    ok = _same(got, ref)
    assert ok.all(), f"pow: x={x[~ok]} y={y[~ok]} got={got[~ok]} want={ref[~ok]}"


@pytest.mark.parametrize("dt", DTYPES, ids=["f32", "f64"])
@pytest.mark.parametrize("name", ["sin", "cos"])
def test_sincos_huge_arguments_fall_back_exactly(name, dt):
    # vector lanes and scalar elements with |x| >= 4e9 go through libm; the odd length
    # puts the last elements in the scalar tail.
    rng = np.random.default_rng(3)
    top = 88 if dt == np.float32 else 709
    x = np.concatenate([np.exp(rng.uniform(22.2, top, 1024)), -np.exp(rng.uniform(22.2, top, 1023)),
                        [np.finfo(dt).max, -np.finfo(dt).max, 3e38, 1e20, -3e9, 5e9]]).astype(dt)
    got = run(name, "poly", x)
    assert ulp_error(got, reference(name, x)).max() <= MAX_ULP


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_emit_math_sincos_scalar_names_vector_variants(name):
    import llvmlite.ir as ir

    from svod.codegen.vecmath import emit_math

    m = ir.Module()
    f = ir.Function(m, ir.FunctionType(ir.FloatType(), [ir.FloatType()]), "f")
    b = ir.IRBuilder(f.append_basic_block())
    b.ret(emit_math(b, name, f.args[0], use_libmvec=False))
    txt = str(m)
    assert '"vector-function-abi-variant"="_ZGV_LLVM_N' in txt and "llvm.compiler.used" in txt
    assert f"svod.{name}.f32.fix" in txt


def test_polynomial_path_is_forced_without_libmvec():
    jit.set_libmvec_enabled(False)
    try:
        txt = math_kernel_ir("sin", "float32")
    finally:
        jit.set_libmvec_enabled(None)
    assert "_ZGV" not in txt and "svod.sin.v" in txt


@pytest.mark.skipif(not jit.has_libmvec(), reason="glibc libmvec not present")
def test_libmvec_symbol_used_when_requested():
    txt = math_kernel_ir("exp", "float32", lanes=32, use_libmvec=True)
    w = jit.host_target_info()["vector_bits"]
    assert ("_ZGVeN16v_expf" if w == 512 else "_ZGVdN8v_expf" if w == 256 else "_ZGVbN4v_expf") in txt


def test_get_math_fn_defines_once_and_rejects_bad_input():
    import llvmlite.ir as ir

    m = ir.Module()
    ty = ir.VectorType(ir.DoubleType(), 8)
    assert get_math_fn(m, "log", ty, use_libmvec=False) is get_math_fn(m, "log", ty, use_libmvec=False)
    with pytest.raises(ValueError):
        get_math_fn(m, "gamma", ty)
    with pytest.raises(TypeError):
        get_math_fn(m, "exp", ir.IntType(32))


def test_erf_in_a_kernel_loop_calls_libmvec_where_the_host_prefers_it():
    """Kernels are scalar IR the loop vectoriser widens: erf (a float64 polynomial for
    float32, ~5 ns/element) reaches libmvec there through a vector-variant call."""
    import re

    import svod
    from svod.codegen import jit
    from svod.codegen.lower import lower_kernel
    from svod.codegen.vecmath import libmvec_preferred
    from svod.key import compact
    from svod.plan_greedy import plan_greedy

    key, _ = compact([svod.erf(svod.asarray(np.zeros((8, 64), np.float32))).uop])
    text = lower_kernel(plan_greedy(key).kernels[0]).ir
    routed = "vector-function-abi-variant" in text and re.search(r"_ZGV\w*erff", text) is not None
    assert routed == (("erf", "f32") in libmvec_preferred() and jit.libmvec_enabled() and jit.has_libmvec())
