"""Differential tests of the programs issue 30's algebra rewrites (tests/programs.py's
`algebra_programs`) against numpy, in svod's default algebra mode and in the `exact` mode.

The tolerance (the documented bound for float32 programs; docs/einsum.md): every finite
result within ``TOL * scale`` of numpy's float64 evaluation of the same program on the same
float32 inputs, where `scale` is the largest finite magnitude among all the program's
intermediate values (numpy's). ``TOL = 1e-4`` is ~840 float32 ulps of that scale: a
reassociated sum of n terms errs by at most ~n·eps·Σ|terms|, and these programs sum at
most ~80 terms of at most the scale each. NaN and ±inf must sit where numpy's are (a
rewrite may never move them), including -inf against +inf.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import svod
from svod.config import SearchLimits
from tests.programs import MOTIFS, _motif, _motif_shapes, algebra_programs

TOL = 1e-4
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.data_too_large])
HAS_ALGEBRA_MODE = "algebra" in SearchLimits.__dataclass_fields__


def _reference(inputs, build):
    trace: list = []
    with np.errstate(all="ignore"):
        want = build([a.astype(np.float64) for a in inputs], xp=np, trace=trace)
    finite = [np.abs(t[np.isfinite(t)]) for t in map(np.asarray, trace)]
    scale = max([float(f.max()) for f in finite if f.size] + [1.0])
    return [np.asarray(w) for w in want], scale


def check_against_numpy(inputs, build, desc):
    want, scale = _reference(inputs, build)
    got = svod.realize(*build([svod.asarray(a) for a in inputs]))
    got = got if isinstance(got, (list, tuple)) else [got]
    for i, (g, w) in enumerate(zip(got, want)):
        g = g.numpy() if isinstance(g, svod.Tensor) else np.asarray(g)
        assert g.shape == w.shape, f"{desc}: output {i} shape {g.shape} != numpy's {w.shape}"
        assert g.dtype == np.float32, f"{desc}: output {i} dtype {g.dtype}"
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"{desc}: output {i} NaN positions differ from numpy's"
        assert np.array_equal(np.isposinf(g), np.isposinf(w)) and np.array_equal(np.isneginf(g), np.isneginf(w)), \
            f"{desc}: output {i} inf positions differ from numpy's"
        fin = np.isfinite(w)
        err = np.abs(g[fin].astype(np.float64) - w[fin])
        assert err.size == 0 or err.max() <= TOL * scale, \
            f"{desc}: output {i} differs from numpy by {err.max():.3g} > {TOL} * {scale:.3g}"


@SETTINGS
@given(algebra_programs())
def test_algebra_programs_match_numpy_in_the_default_mode(prog):
    check_against_numpy(*prog)


@pytest.mark.skipif(not HAS_ALGEBRA_MODE, reason="svod.search_limits(algebra=...) lands with issue 30's rule sets")
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(algebra_programs())
def test_algebra_programs_match_numpy_in_the_exact_mode(prog):
    with svod.search_limits(algebra="exact"):
        check_against_numpy(*prog)


@pytest.mark.parametrize("name", MOTIFS)
def test_each_motif_at_a_mid_size_matches_numpy(name):
    """Every motif once at sizes where svod's matmul kernels and blocked reductions run
    (the drawn programs are small), with a NaN in the first input."""
    dims = (33, 40, 17, 2, 9)
    rng = np.random.default_rng(MOTIFS.index(name))
    inputs = [rng.standard_normal(s).astype(np.float32) for s in _motif_shapes(name, dims)]
    inputs[0].flat[5] = np.nan

    def build(ts, xp=svod, trace=None):
        res = _motif(xp, name, ts, 1)
        if trace is not None:
            trace.extend(res)
        return res

    check_against_numpy(inputs, build, name)


def test_the_check_fails_on_a_wrong_result():
    """The comparison itself: a result off by more than the bound, or a moved NaN, fails."""
    x = np.ones((3, 4), np.float32)

    def wrong(ts, xp=svod, trace=None):
        out = xp.sum(ts[0], axis=0)
        return [out * (1.0 + 10 * TOL) if xp is svod else out]

    with pytest.raises(AssertionError, match="differs from numpy"):
        check_against_numpy([x], wrong, "wrong")

    def moved_nan(ts, xp=svod, trace=None):
        return [xp.flip(ts[0], axis=0) if xp is svod else ts[0]]

    y = x.copy()
    y[0, 0] = np.nan
    with pytest.raises(AssertionError, match="NaN positions"):
        check_against_numpy([y], moved_nan, "moved")
