"""SVOD_VALIDATE: a plan's outputs checked against the numpy reference interpreter.

`validate_outputs` compares one run's outputs with `svod.interp.eval_key` over the same
inputs; a `KernelPlan` (svod.executable) calls it on its first run when SVOD_VALIDATE is
on, and raises `ValidationError` naming the graph and the plan on a difference.
"""

from __future__ import annotations

import numpy as np

from svod.interp import eval_key
from svod.key import GraphKey


class ValidationError(AssertionError):
    """SVOD_VALIDATE: a plan's results differ from the reference interpreter."""


def validate_outputs(key: GraphKey, arrays, outs, describe) -> None:
    """Compare a plan's outputs with the numpy reference interpreter (SVOD_VALIDATE=1).

    Float outputs agree within 1e-4 (float32) / 1e-10 (float64) of the output's scale,
    plus, when that fails, the result's own sensitivity to rounding: how far the
    reference moves when its float inputs move by a few ulps (`_rounding_slack`). A
    layer norm of a constant row is 0 exactly in one summation order and ~1e-3 in
    another (x - mean(x) is pure rounding, divided by sqrt(eps)); both are right."""
    ref = eval_key(key, arrays)
    slack = None
    for i, (got, want) in enumerate(zip(outs, ref)):
        ok = got.shape == want.shape and got.dtype == want.dtype
        if ok and want.dtype.kind == "c":  # each part, as a float output (no rounding slack)
            tol = 1e-4 if want.dtype == np.complex64 else 1e-10
            ok = all(bool(np.allclose(getattr(got, p), w, rtol=tol, equal_nan=True,
                                      atol=tol * float(np.max(np.abs(w[np.isfinite(w)]), initial=1.0))))
                     for p in ("real", "imag") for w in [getattr(want, p)])
        elif ok and want.dtype.kind == "f":
            tol = 1e-4 if want.dtype == np.float32 else 1e-10
            scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=1.0))
            ok = bool(np.allclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True))
            if not ok:
                slack = slack if slack is not None else _rounding_slack(key, arrays, ref)
                ok = bool(np.all(np.isclose(got, want, rtol=tol, atol=tol * scale, equal_nan=True) |
                                 (np.abs(got.astype(np.float64) - want) <= slack[i])))
        elif ok:
            ok = bool(np.array_equal(got, want))
        if not ok:
            raise ValidationError(f"SVOD_VALIDATE: output {i} of graph {key.hash[:12]} differs from the "
                                  f"reference interpreter\n{describe()}")


def _rounding_slack(key: GraphKey, arrays, ref) -> list[np.ndarray]:
    """Per output element: 4x the largest move of the reference over two evaluations with
    every float input nudged by up to 4 ulps (seeded random signs): a well-conditioned
    result moves by a few ulps, an ill-conditioned one by as much as rounding can."""
    rng = np.random.default_rng(0)
    moves = [np.zeros(r.shape, np.float64) for r in ref]
    for _ in range(2):
        nudged = []
        for a in arrays:
            a = np.asarray(a)
            if a.dtype.kind == "f" and a.size:
                step = np.spacing(np.abs(a)).astype(a.dtype)
                a = (a + step * rng.integers(-4, 5, a.shape).astype(a.dtype)).astype(a.dtype)
            nudged.append(a)
        for m, r, r2 in zip(moves, ref, eval_key(key, nudged)):
            if r.dtype.kind == "f" and r2.shape == r.shape:
                d = np.abs(r2.astype(np.float64) - r)
                np.maximum(m, np.where(np.isfinite(d), d, 0.0), out=m)
    return [4.0 * m for m in moves]
