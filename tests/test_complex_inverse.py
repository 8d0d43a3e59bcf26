"""Complex asin, acos, atan, asinh, acosh, atanh (svod/codegen/cplx_inv.py) and the complex
product down columns (svod/codegen/columns.py) in generated code, against numpy (which
calls glibc's casin, ...): C99 Annex G's special values and the sign of zero on the
branch cuts exactly, finite values within `ULPS` (docs/semantics.md, complex section),
compiled (no SvodWarning, no interpreter fallback) and fused with the ops around them."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import svod
from svod.errors import SvodWarning

C64, C128 = np.dtype(np.complex64), np.dtype(np.complex128)
NAMES = ["asin", "acos", "atan", "asinh", "acosh", "atanh"]
ULPS = 4  # the largest difference from numpy measured over these inputs (docs/semantics.md)
_PARTS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.0, 0.99, 1 + 2 ** -52, 1 - 2 ** -53, 2 ** -27, 1e-8,
          1e-30, -1e-38, 1e-45, 1e-300, -1e-300, 1e17, 4.5e15, 3.4e38, -3.4e38, 1e300, -1e300,
          math.inf, -math.inf, math.nan, -math.nan]  # a NaN's sign must not sign a result


def inputs(d: np.dtype) -> np.ndarray:
    """Every (re, im) pair of `_PARTS` (the branch cuts with both signs of zero, tiny and
    huge magnitudes, float32's extremes, infinities and NaN), random values over 17
    decades, |z| near 1, and points near the branch points ±1 and ±i."""
    p = np.array(_PARTS)
    grid = np.empty(len(p) ** 2, np.complex128)
    grid.real, grid.imag = np.repeat(p, len(p)), np.tile(p, len(p))  # exact parts (no 0 * inf)
    rng = np.random.default_rng(7)
    rand = (rng.standard_normal(800) + 1j * rng.standard_normal(800)) * np.exp(rng.uniform(-20, 20, 800))
    circle = np.exp(1j * rng.uniform(-4, 4, 200)) * (1 + rng.standard_normal(200) * 1e-6)
    lo = np.exp(rng.uniform(-700, 0, 100) * math.log(2))
    near = np.concatenate([1 + lo + 1j * lo[::-1], 1 - lo * 1j, -1 - lo + 1j * lo, 1j + lo,
                           1j * (1 + lo) + lo[::-1], 1j * (1 - lo) + lo[::-1], (1 - lo) + 1j * lo[::-1]])
    with np.errstate(all="ignore"):  # 1e300 parts overflow complex64: inf, as numpy's cast
        return np.concatenate([grid, rand, circle, near]).astype(d)


def check_close(got: np.ndarray, want: np.ndarray, ulps: float, what: str) -> float:
    """NaN parts where numpy's are, infinities and zeros equal with their signs, the rest
    within `ulps` units in the last place of numpy's part (the spacing of 0 is the
    smallest subnormal); returns the largest difference in ulps."""
    worst = 0.0
    for part in ("real", "imag"):
        g, w = getattr(got, part), getattr(want, part)
        gn, wn = np.isnan(g), np.isnan(w)
        assert np.array_equal(gn, wn), f"{what} {part}: NaN where numpy's is not at {np.nonzero(gn != wn)[0][:5]}"
        exact = np.isinf(w) | np.isinf(g) | ((w == 0) & (g == 0))
        bad = exact & ~wn & ((g != w) | (np.signbit(g) != np.signbit(w)))
        i = np.nonzero(bad)[0][:5]
        assert not bad.any(), f"{what} {part}: special values differ at {i}: got {g[i]} want {w[i]}"
        fin = ~wn & ~exact
        err = np.abs(g[fin].astype(np.float64) - w[fin]) / np.spacing(np.abs(w[fin])).astype(np.float64)
        if err.size:
            k = int(np.argmax(err))
            assert err[k] <= ulps, f"{what} {part}: {err[k]} ulps: got {g[fin][k]} want {w[fin][k]}"
            worst = max(worst, float(err[k]))
    return worst


def realized_compiled(*ts):
    """`svod.realize(*ts)`, asserting no kernel fell back to the numpy interpreter; returns
    the number of kernels launched."""
    before = svod.stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error", SvodWarning)
        svod.realize(*ts)
    after = svod.stats()
    assert after["interpreter_fallbacks"] == before["interpreter_fallbacks"]
    return after["kernels_launched"] - before["kernels_launched"]


@pytest.mark.parametrize("d", [C64, C128], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_complex_inverse_function_matches_numpy(name, d):
    x = inputs(d)
    t = getattr(svod, name)(svod.asarray(x))
    realized_compiled(t)
    with np.errstate(all="ignore"):
        want = getattr(np, "arc" + name[1:])(x)
    assert t.dtype.name == want.dtype.name
    check_close(t.numpy(), want, ULPS, f"{name} on {d}")


@pytest.mark.parametrize("d", [C64, C128], ids=str)
def test_complex_inverse_special_values_by_name(d):
    """C99 Annex G's table entries, each part's sign included (glibc's choice where the
    standard leaves a sign unspecified)."""
    inf, nan = math.inf, math.nan
    cases = {  # (argument, expected)
        "asinh": [(complex(0.0, 0.0), complex(0.0, 0.0)), (complex(-0.0, -0.0), complex(-0.0, -0.0)),
                  (complex(1.0, inf), complex(inf, math.pi / 2)), (complex(inf, 1.0), complex(inf, 0.0)),
                  (complex(inf, inf), complex(inf, math.pi / 4)), (complex(nan, 0.0), complex(nan, 0.0)),
                  (complex(nan, -inf), complex(inf, nan)), (complex(-inf, nan), complex(-inf, nan)),
                  (complex(0.0, 2.0), complex(math.acosh(2.0), math.pi / 2)),  # the cut: the side of re's zero
                  (complex(-0.0, 2.0), complex(-math.acosh(2.0), math.pi / 2))],
        "acos": [(complex(0.0, nan), complex(math.pi / 2, nan)), (complex(1.0, 0.0), complex(0.0, -0.0)),
                 (complex(-inf, 1.0), complex(math.pi, -inf)), (complex(inf, -1.0), complex(0.0, inf)),
                 (complex(nan, inf), complex(nan, -inf)), (complex(2.0, 0.0), complex(0.0, -math.acosh(2.0))),
                 (complex(2.0, -0.0), complex(0.0, math.acosh(2.0)))],
        "acosh": [(complex(0.0, 0.0), complex(0.0, math.pi / 2)), (complex(-inf, 1.0), complex(inf, math.pi)),
                  (complex(inf, nan), complex(inf, nan)), (complex(-2.0, -0.0), complex(math.acosh(2.0), -math.pi))],
        "atanh": [(complex(1.0, 0.0), complex(inf, 0.0)), (complex(-1.0, -0.0), complex(-inf, -0.0)),
                  (complex(0.0, nan), complex(0.0, nan)), (complex(inf, nan), complex(0.0, nan)),
                  (complex(nan, inf), complex(0.0, math.pi / 2)), (complex(-inf, -1.0), complex(-0.0, -math.pi / 2)),
                  (complex(2.0, -0.0), complex(math.atanh(0.5), -math.pi / 2))],
        "asin": [(complex(2.0, 0.0), complex(math.pi / 2, math.acosh(2.0))),
                 (complex(2.0, -0.0), complex(math.pi / 2, -math.acosh(2.0))), (complex(-inf, nan), complex(nan, inf))],
        "atan": [(complex(0.0, 1.0), complex(0.0, inf)), (complex(-0.0, 2.0), complex(-math.pi / 2, math.atanh(0.5)))],
    }
    for name, pairs in cases.items():
        x = np.array([a for a, _ in pairs], d)
        want = np.array([e for _, e in pairs], d)
        t = getattr(svod, name)(svod.asarray(x))
        realized_compiled(t)
        with np.errstate(all="ignore"):
            check_close(getattr(np, "arc" + name[1:])(x), want, 1, f"numpy's {name} (the table)")
        check_close(t.numpy(), want, 1, f"{name} on {d}")


@pytest.mark.parametrize("d", [C64, C128], ids=str)
def test_complex_inverse_functions_fuse_into_one_kernel(d):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(257) + 1j * rng.standard_normal(257)).astype(d)
    z = svod.asarray(x)
    chains = [svod.asin(z * 2 + 1) * z, svod.atanh(svod.acos(z) - svod.asinh(z.conj())),
              svod.acosh(z) + svod.atan(z / 3)]
    assert realized_compiled(*chains) == 1
    with np.errstate(all="ignore"):
        two, one, three = d.type(2), d.type(1), d.type(3)
        wants = [np.arcsin(x * two + one) * x, np.arctanh(np.arccos(x) - np.arcsinh(x.conj())),
                 np.arccosh(x) + np.arctan(x / three)]
    eps = np.finfo(d).eps
    for t, w in zip(chains, wants):  # sums of terms that cancel: errors relative to the terms' size
        np.testing.assert_allclose(t.numpy(), w, rtol=64 * eps, atol=64 * eps * np.abs(w).max())


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    ok = True
    for part in ("real", "imag"):
        g, w = getattr(got, part), getattr(want, part)
        ok &= bool(np.array_equal(np.isnan(g), np.isnan(w)))
        ok &= bool(np.all(np.isnan(w) | ((g == w) & (np.signbit(g) == np.signbit(w)))))
    return ok


@pytest.mark.parametrize("d", [C64, C128], ids=str)
@pytest.mark.parametrize("shape", [(7, 5), (300, 33), (600, 600)])
def test_complex_prod_down_columns_compiled_bit_for_bit(shape, d):
    """prod over axis 0 (columns): numpy's in-order product from 1 (its fma form), special
    values and zeros' signs included; fused with ops before and after and with a float sum
    of the same rows in one kernel."""
    rng = np.random.default_rng(5)
    a = np.exp(1j * rng.uniform(-3, 3, shape) + rng.standard_normal(shape) * 0.01)
    p = np.array([0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, math.nan])
    sp = np.empty(len(p) ** 2, complex)
    sp.real, sp.imag = np.repeat(p, len(p)), np.tile(p, len(p))
    mask = rng.random(shape) < 0.02
    a[mask] = sp[rng.integers(0, len(sp), int(mask.sum()))]
    a[:2, : shape[1] // 3] = complex(-0.0, -1.0)
    a = a.astype(d)
    t = svod.asarray(a)
    outs = [svod.prod(t, axis=0), svod.prod(t * 2 + 1, axis=0) * t[0], svod.sum(svod.real(t), axis=0)]
    realized_compiled(*outs)
    with np.errstate(all="ignore"):
        wants = [np.prod(a, axis=0), np.prod(a * d.type(2) + d.type(1), axis=0) * a[0]]
        assert _same_bits(outs[0].numpy(), wants[0])
        assert _same_bits(outs[1].numpy(), wants[1])
        np.testing.assert_allclose(outs[2].numpy(), np.sum(a.real, axis=0), rtol=1e-4 if d == C64 else 1e-12)


def test_complex_prod_over_leading_axes_of_3d():
    rng = np.random.default_rng(6)
    a = np.exp(1j * rng.uniform(-3, 3, (5, 6, 7)))
    t = svod.asarray(a)
    out, keep = svod.prod(t, axis=(0, 1)), svod.prod(t, axis=0, keepdims=True)
    realized_compiled(out)
    realized_compiled(keep)
    assert _same_bits(out.numpy(), np.prod(a, axis=(0, 1)))
    assert _same_bits(keep.numpy(), np.prod(a, axis=0, keepdims=True))
    # realized together the search reuses prod(axis=0) for prod(axis=(0, 1)): the product
    # reassociated (rows' products, then their product), a few ulps from numpy's order
    out, keep = svod.prod(t, axis=(0, 1)), svod.prod(t, axis=0, keepdims=True)
    realized_compiled(out, keep)
    np.testing.assert_allclose(out.numpy(), np.prod(a, axis=(0, 1)), rtol=1e-14)
