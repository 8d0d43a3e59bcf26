"""Max ulp error of svod's public ops against a long-double reference, over sweeps that
include tiny and subnormal inputs, -0.0, branch points, overflow, NaN and ±inf.

Run: ``python3 bench/bench_accuracy.py [--path compiled|interp] [--ops expm1,log1p,...]``
(gelu, gelu_tanh and erfc are measured against mpmath on a smaller sweep; ``--no-mpmath``
skips them)
(``SVOD_NO_LIBMVEC=1`` for the polynomial path where libmvec would be used).

Each op runs through the public API (``svod.expm1(svod.asarray(x))`` ...): ``compiled``
realizes it (the generated code), ``interp`` evaluates the same graph with the numpy
reference interpreter (``svod.interp.eval_uops``). The reference is numpy on long double
(80-bit here: 11 more bits than float64), rounded to the dtype only in the ulp measure.
Printed per op and dtype: the max error in ulps of the result dtype (0 where the result
equals the rounded reference, NaN with NaN; inf where one is NaN only), where it occurs,
and how many zero results have the wrong sign (expm1(-0.0) must be -0.0).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import svod  # noqa: E402
import svod.numpy  # noqa: E402
from svod import nn  # noqa: E402

LD = np.longdouble


def ulp_error(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|got - ref| in ulps of ref rounded to got's dtype (tests/test_vecmath.py's measure)."""
    dt = got.dtype
    with np.errstate(all="ignore"):
        refc = np.asarray(ref).astype(dt)
        same = (got == refc) | (np.isnan(got) & np.isnan(refc))
        e = np.abs(got.astype(LD) - np.asarray(ref, LD)) / np.spacing(np.abs(refc)).astype(LD)
    e[same] = 0
    e[np.isnan(e)] = np.inf
    return e.astype(np.float64)


def sweep(dt, extra=()) -> np.ndarray:
    """Magnitudes from the smallest subnormal to the largest finite, both signs; a dense
    [-3, 3]; subnormals; special values; ``extra`` (op-specific branch points)."""
    rng = np.random.default_rng(26)
    info = np.finfo(dt)
    lo, hi = np.log(float(info.smallest_subnormal)), np.log(float(info.max))
    mag = np.exp(rng.uniform(lo, hi, 60_000)) * rng.choice([-1.0, 1.0], 60_000)
    sub = rng.uniform(-4, 4, 2_000) * float(info.tiny)
    spec = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, float(info.smallest_subnormal),
            -float(info.smallest_subnormal), float(info.tiny), -float(info.tiny), float(info.max),
            -float(info.max), 1e-8, -1e-8, 1e-30, -1e-30, 1e-40, -1e-40, -1e-7, 0.5, -0.5, 2.0, -2.0]
    with np.errstate(all="ignore"):
        parts = [mag, np.linspace(-3, 3, 30_001), rng.uniform(-1e-3, 1e-3, 5_000), sub, spec,
                 *[np.asarray(e, np.float64) for e in extra]]
        return np.concatenate(parts).astype(dt)


def _near(center, dt, sign):
    """center + sign * 2**k for k from log2(eps/4) to 0 (values next to a branch point)."""
    rng = np.random.default_rng(3)
    eps = float(np.finfo(dt).eps)
    return center + sign * np.exp(rng.uniform(np.log(eps / 4), 0, 20_000))


def _sigmoid_ref(x):
    return 1 / (1 + np.exp(-x))


UNARY = {
    # name: (svod function, long-double reference, extra sweep points(dt))
    "expm1": (svod.expm1, np.expm1, lambda dt: [np.linspace(-120, 720, 20_001)]),
    "log1p": (svod.log1p, np.log1p, lambda dt: [_near(-1.0, dt, 1), _near(0.0, dt, 1), _near(0.0, dt, -1)]),
    "sigmoid": (nn.sigmoid, _sigmoid_ref, lambda dt: [np.linspace(-760, 760, 40_001)]),
    "tanh": (svod.tanh, np.tanh, lambda dt: []),
    "sinh": (svod.sinh, np.sinh, lambda dt: [np.linspace(-720, 720, 20_001)]),
    "cosh": (svod.cosh, np.cosh, lambda dt: [np.linspace(-720, 720, 20_001)]),
    "asinh": (svod.asinh, np.arcsinh, lambda dt: []),
    "acosh": (svod.acosh, np.arccosh, lambda dt: [_near(1.0, dt, 1)]),
    "atanh": (svod.atanh, np.arctanh, lambda dt: [_near(1.0, dt, -1), _near(-1.0, dt, 1)]),
    "exp": (svod.exp, np.exp, lambda dt: []),
    "log": (svod.log, np.log, lambda dt: [_near(1.0, dt, 1), _near(1.0, dt, -1)]),
    "silu": (nn.silu, lambda v: np.where(v == -np.inf, -0.0, v / (1 + np.exp(-v))),
             lambda dt: [np.linspace(-760, 100, 40_001), -np.exp(np.linspace(0, 6.65, 10_000))]),
    "log2": (svod.log2, np.log2, lambda dt: [_near(1.0, dt, 1), _near(1.0, dt, -1)]),
    "log10": (svod.log10, np.log10, lambda dt: [_near(1.0, dt, 1), _near(1.0, dt, -1)]),
    "tan": (svod.tan, np.tan, lambda dt: [np.linspace(-10, 10, 20_001)]),
    "rsqrt": (svod.rsqrt, lambda v: 1 / np.sqrt(v), lambda dt: []),
    "numpy.cbrt": (svod.numpy.cbrt, np.cbrt, lambda dt: []),
}


def _rows(dt):
    """Rows of 8: random normal rows, rows with one dominant entry (the others 5..60 below
    it, so log-probabilities of the max are tiny), ties, and rows near cancellation."""
    rng = np.random.default_rng(11)
    n = 8
    a = rng.normal(size=(4000, n)) * rng.choice([0.1, 1.0, 10.0], (4000, 1))
    b = -rng.uniform(5, 60, (4000, n))
    b[:, 0] = rng.uniform(-5, 5, 4000)
    c = np.zeros((100, n))
    c[:, 2:] = -rng.uniform(1, 90, (100, n - 2))
    return np.concatenate([a, b, c]).astype(dt)


def _lse_ref(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(s, log(sum(exp(s)))) per row in long double, s = x - max, the log as log1p of the
    terms other than one max (exact for tiny sums)."""
    X = x.astype(LD)
    m = X.max(axis=-1, keepdims=True)
    s = X - m
    e = np.exp(s)
    first = np.argmax(x, axis=-1)
    e[np.arange(len(x)), first] = 0
    return s, np.log1p(e.sum(axis=-1, keepdims=True))


def _log_softmax_ref(x):
    s, l = _lse_ref(x)
    return s - l


def _logsumexp_ref(x):
    s, l = _lse_ref(x)
    return (x.astype(LD).max(axis=-1, keepdims=True) + l)[..., 0]


def _logsumexp(x):  # svod/workloads.py's formula
    m = svod.max(x, axis=-1, keepdims=True)
    return svod.log(svod.sum(svod.exp(x - m), axis=-1)) + svod.squeeze(m, -1)


ROWS = {
    "log_softmax": (lambda x: nn.log_softmax(x, axis=-1), _log_softmax_ref),
    "logsumexp(workload)": (_logsumexp, _logsumexp_ref),
}


def _np_log_softmax(x):  # scipy.special.log_softmax's formula
    s = x - x.max(axis=-1, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=-1, keepdims=True))


def _np_logsumexp(x):
    m = x.max(axis=-1, keepdims=True)
    return np.log(np.exp(x - m).sum(axis=-1)) + m[..., 0]


# numpy's own result in the dtype, for comparison (default: the reference function on x)
NUMPY = {"sigmoid": _sigmoid_ref, "silu": lambda v: np.where(v == -np.inf, -0.0, v / (1 + np.exp(-v)))}
NP_ROWS = {"log_softmax": _np_log_softmax, "logsumexp(workload)": _np_logsumexp}


def _logaddexp_inputs(dt):
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.uniform(-50, 50, 40_000), rng.uniform(-1, 1, 20_000), sweep(dt)[:20_000]])
    y = np.concatenate([rng.uniform(-50, 50, 40_000), rng.uniform(-1, 1, 20_000), -sweep(dt)[20_000:40_000]])
    return x.astype(dt), y.astype(dt)


def logaddexp_near_zero(path: str, n: int = 3000) -> None:
    """logaddexp on pairs whose result is within ~1e-19 .. 1e-1 of 0 (a in [-ln2, 0), b next
    to log(1 - exp(a))), against mpmath: max ulp (all, and over results >= 1e-5) and the
    max absolute error on results < 1e-5, svod and numpy."""
    import mpmath

    rng = np.random.default_rng(1)
    a = rng.uniform(-0.69, -1e-3, n)
    b = np.log1p(-np.exp(a)) * (1 + rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-15, -1, n))
    for dt in (np.float32, np.float64):
        x, y = a.astype(dt), b.astype(dt)
        got = evaluate(svod.logaddexp(svod.asarray(x), svod.asarray(y)), path)
        with mpmath.workprec(300):
            exact = [mpmath.log(mpmath.exp(float(p)) + mpmath.exp(float(q))) for p, q in zip(x, y)]
            for name, g in (("svod", got), ("numpy", np.logaddexp(x, y))):
                err = np.array([float(abs(mpmath.mpf(float(v)) - r)) for v, r in zip(g, exact)])
                want = np.array([float(r) for r in exact], dt)
                ulps = err / np.spacing(np.abs(want)).astype(np.float64)
                k = int(np.argmax(ulps))
                small = np.abs(want) < 1e-5
                print(f"logaddexp near 0 {np.dtype(dt).name:8s} {name:6s} max {ulps[k]:10.4g} ulp (at a result of "
                      f"{want[k]:.3g}), over results >= 1e-5 {ulps[~small].max():.4g} ulp, absolute error on "
                      f"results < 1e-5 {err[small].max():.3g} (down to {np.abs(want).min():.3g})")


# ops without a long-double reference in numpy (erfc), or whose argument needs more than
# long double near underflow (gelu): against mpmath at 200 bits on a smaller sweep
def _gelu_np(x, form):  # the textbook formulas in the dtype (what svod computed before)
    import math

    with np.errstate(all="ignore"):
        if form == "tanh":
            c = x.dtype.type(math.sqrt(2.0 / math.pi))
            return x.dtype.type(0.5) * x * (1 + np.tanh(c * (x + x.dtype.type(0.044715) * x * x * x)))
        erf = np.vectorize(math.erf, otypes=[np.float64])(x * x.dtype.type(1 / math.sqrt(2.0))).astype(x.dtype)
        return x.dtype.type(0.5) * x * (1 + erf)


def _mp_sweep(dt, n: int) -> np.ndarray:
    rng = np.random.default_rng(27)
    lim = 40.0 if dt == np.float64 else 15.0
    sub = float(np.finfo(dt).smallest_subnormal)
    tiny = np.exp(rng.uniform(np.log(sub), 0, n // 8)) * rng.choice([-1.0, 1.0], n // 8)
    return np.concatenate([rng.uniform(-lim, 6, n // 2), rng.uniform(-4, 4, n // 4), tiny,
                           [-36.0, -37.6, -38.4, -21.6, -14.2, -6.0, -3.0, 64.0, -64.0, sub, -sub]]).astype(dt)


def mp_ops(path: str, want: set, n: int = 4000) -> None:
    """gelu (erf and tanh forms) and erfc against mpmath: max ulp (of the correctly rounded
    result; subnormal spacing below), svod and the textbook formula / libm's erfc in the dtype."""
    import math

    import mpmath

    for name in ("gelu", "gelu_tanh", "erfc"):
        if want and name not in want:
            continue
        for dt in (np.float32, np.float64):
            if name == "erfc":
                rng = np.random.default_rng(28)
                x = np.concatenate([rng.uniform(-7, 28, n // 2), rng.uniform(0.3, 5, n // 4),
                                    np.exp(rng.uniform(-700 if dt == np.float64 else -100, 0, n // 4))]).astype(dt)
                got = evaluate(svod.erfc(svod.asarray(x)), path)
                other = np.vectorize(math.erfc, otypes=[np.float64])(x).astype(dt)
            else:
                x = _mp_sweep(dt, n)
                form = "tanh" if name == "gelu_tanh" else "none"
                got = evaluate(nn.gelu(svod.asarray(x), approximate=form), path)
                other = _gelu_np(x, form)
            with mpmath.workprec(200):
                k = mpmath.sqrt(2 / mpmath.pi)

                def f(v, name=name, k=k):
                    v = mpmath.mpf(float(v))
                    if name == "erfc":
                        return mpmath.erfc(v)
                    if name == "gelu":
                        return v * mpmath.erfc(-v / mpmath.sqrt(2)) / 2
                    return v / (1 + mpmath.exp(-2 * k * (v + mpmath.mpf("0.044715") * v ** 3)))

                exact = [f(v) for v in x]
                want_ = np.array([float(r) for r in exact], dt)
                errs = []
                for g in (got, other):
                    err = np.array([float(abs(mpmath.mpf(float(v)) - r)) if np.isfinite(v) else np.inf
                                    for v, r in zip(g, exact)])
                    errs.append(err / np.maximum(np.spacing(np.abs(want_)).astype(np.float64),
                                                 float(np.finfo(dt).smallest_subnormal)))
            k_ = int(np.argmax(errs[0]))
            ref_name = "libm" if name == "erfc" else "formula"
            print(f"{name:20s} {np.dtype(dt).name:8s} max {errs[0][k_]:10.4g} ulp ({ref_name}: {errs[1].max():.4g}); "
                  f"worst at x={x[k_]!r} got {got[k_]!r} want {want_[k_]!r}")


def evaluate(t, path: str) -> np.ndarray:
    if path == "interp":
        from svod.interp import eval_uops

        return np.asarray(eval_uops([t.uop])[0])
    return t.numpy()


def report(name: str, dt, x, got, ref, arg_desc=None, np_got=None) -> float:
    e = ulp_error(got, ref).ravel()
    k = int(np.argmax(e))
    with np.errstate(all="ignore"):
        refc = np.asarray(ref).astype(got.dtype)
    badsign = int(((got == 0) & (refc == 0) & (np.signbit(got) != np.signbit(refc))).sum())
    where = arg_desc(k) if arg_desc else f"x={x.ravel()[k]!r}"
    npe = "" if np_got is None else f" (numpy: {ulp_error(np.asarray(np_got, got.dtype), ref).max():.4g})"
    print(f"{name:20s} {np.dtype(dt).name:8s} max {e[k]:10.4g} ulp{npe}; wrong-signed zeros {badsign}; "
          f"worst at {where} got {got.ravel()[k]!r} want {refc.ravel()[k]!r}")
    return float(e[k])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", choices=["compiled", "interp"], default="compiled")
    ap.add_argument("--ops", default="")
    ap.add_argument("--near-zero", action="store_true", help="also logaddexp near 0 against mpmath (slow)")
    ap.add_argument("--no-mpmath", action="store_true", help="skip gelu/erfc (against mpmath, ~30 s)")
    args = ap.parse_args(argv)
    want = set(filter(None, args.ops.split(",")))
    print(f"path: {args.path}; libmvec: {'off' if os.environ.get('SVOD_NO_LIBMVEC') else 'default'}")
    for dt in (np.float32, np.float64):
        for name, (fn, ref, extra) in UNARY.items():
            if want and name not in want:
                continue
            x = sweep(dt, extra(dt))
            got = evaluate(fn(svod.asarray(x)), args.path)
            with np.errstate(all="ignore"):
                r = ref(x.astype(LD))
            with np.errstate(all="ignore"):
                np_got = NUMPY.get(name, ref)(x)
            report(name, dt, x, got, r, np_got=np_got)
        if not want or "logaddexp" in want:
            x, y = _logaddexp_inputs(dt)
            got = evaluate(svod.logaddexp(svod.asarray(x), svod.asarray(y)), args.path)
            with np.errstate(all="ignore"):
                r = np.logaddexp(x.astype(LD), y.astype(LD))
            report("logaddexp", dt, x, got, r, lambda k, x=x, y=y: f"({x[k]!r}, {y[k]!r})",
                   np_got=np.logaddexp(x, y))
        for name, (fn, ref) in ROWS.items():
            if want and name.split("(")[0] not in want:
                continue
            x = _rows(dt)
            got = evaluate(fn(svod.asarray(x)), args.path)
            r = ref(x)
            rows = x.shape[1]
            with np.errstate(all="ignore"):
                np_got = NP_ROWS[name](x)
            row = (lambda k, x=x, rows=rows, nd=got.ndim: f"row {x[k // rows if nd > 1 else k].tolist()}")
            report(name, dt, x, got, r, row, np_got)
    if not args.no_mpmath:
        mp_ops(args.path, want)
    if args.near_zero:
        logaddexp_near_zero(args.path)


if __name__ == "__main__":
    main()
