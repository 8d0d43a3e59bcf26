"""Vectorised inverse trigonometric and hyperbolic functions, hypot and logaddexp.

The emitters of ``svod.codegen.vecmath`` extended with ``asin acos atan sinh cosh asinh
acosh atanh`` (one argument) and ``atan2 hypot logaddexp`` (two). Importing this module
registers them in vecmath's table, so ``get_math_fn`` / ``emit_math`` / ``math_kernel_ir``
(re-exported here) know them; codegen imports them from here.

Same contract as vecmath: straight-line vector code (selects, no branches, no libm
calls), NaN propagates, special values follow numpy (C99 Annex F), and the error is
≤ 4 ulp over each function's domain (measured by ``tests/test_vecmath_inv.py`` against
long double; most are ≤ 1.5). float32 computes in float64 internally (exact-enough
reductions for free, results rounded once); float64 uses:

* atan: fdlibm's reduction to |t| ≤ 7/16 around atan(0), atan(1/2), atan(1), atan(3/2),
  pi/2 (the subtractions are exact), base angles as double-doubles.
* asin/acos: |x| ≤ 1/2 a polynomial; above, asin(x) = pi/2 - 2 asin(sqrt((1-|x|)/2))
  with the square root's rounding error recovered by an FMA and the pi/2 - 2s subtraction
  by TwoSum.
* atan2: atan(|y|/|x|), pi - that for x < 0 (pi as a double-double), C99's table for
  zeros and infinities.
* sinh/cosh: |x| < 1 a polynomial for sinh; else (e ± 1/e)/2 with e = exp(|x|); above 22,
  exp(|x| - ln2) with the subtraction carried exactly into exp's reduction (no overflow
  below the true overflow threshold).
* asinh/atanh: |x| < 1/2 polynomials; above, fdlibm's log/log1p forms. acosh: fdlibm.
* hypot: scaled by a power of two away from overflow/underflow; the sum of squares exact
  (FMA products, TwoSum) and one Newton correction of the square root.
* logaddexp: numpy's formula, max(a, b) + log1p(exp(-|a - b|)), a + ln2 where a == b
  (infinities of one sign; ln2 as a double-double). Where max(a, b) is in [-1.5, 0] the
  sum can cancel to near 0 (numpy's formula: 975 ulp at a result of 4e-4 in float64,
  1130 in float32), so there it is computed in double-double: a - b by TwoSum, exp of it
  by ``_exp_dd`` (~2**-68), log of 1 + that by vecmath's ``_log_dd`` (~2**-68), the sum
  by TwoSum: absolute error ~2**-67, so ≤ 4 ulp for results above ~1e-5 in float64 and
  above ~3e-14 in float32 (docs/codegen.md). It costs ~4x the plain form's time.

Polynomials: ``mpmath.chebyfit`` (50 digits) of the reduced function named beside each
table on the interval named there, lowest degree first; float32 tables fit to 2**-32.

>>> import llvmlite.ir as ir
>>> m = ir.Module()
>>> get_math_fn(m, "atan2", ir.VectorType(ir.DoubleType(), 4)).name
'svod.atan2.v4f64.poly'
"""

from __future__ import annotations

import math

from svod.codegen import vecmath as _vm
from svod.codegen.vecmath import emit_math, get_math_fn, math_kernel_ir
from svod.codegen.vecpoly import _Em, _exp, _log, _log1p, _log_dd, _scale

__all__ = ["FUNCTIONS", "BINARY", "emit_math", "get_math_fn", "math_kernel_ir"]

# atan(x) = x + x^3 P(x^2), x^2 in [0, (7/16)^2]
_ATAN64 = (
    -0.3333333333333333, 0.1999999999999941, -0.14285714285566806, 0.11111111096645038, -0.09090908355602592,
    0.07692285554889286, -0.06666241923359964, 0.05876946456755061, -0.05216679739313656, 0.04492259293193656,
    -0.033128134256069586, 0.014773184616983806,
)
_ATAN32 = (-0.333333333294813, 0.1999999802433561, -0.14285547665948575, 0.11105794992201753, -0.09009038127718107,
           0.07028349204332142, -0.03829480975537712)
# asin(x) = x + x^3 Q(x^2), x^2 in [0, 1/4]
_ASIN64 = (
    0.16666666666666666, 0.07500000000000118, 0.044642857142551895, 0.03038194447553234, 0.02237215744350722,
    0.017352816540325496, 0.01396378001220357, 0.011566459612121669, 0.009621842970100282, 0.009319560794767446,
    0.0030448799094556773, 0.019554513336123378, -0.01924167174674304, 0.02961201126495512,
)
_ASIN32 = (0.16666666686085643, 0.07499992404401838, 0.04464766388813485, 0.030269138728589183, 0.023611817008891752,
           0.010574415516912909, 0.030974540371355073)
# asinh(x) = x + x^3 A(x^2), x^2 in [0, 1/4]
_ASINH64 = (
    -0.16666666666666666, 0.0749999999999992, -0.044642857142677225, 0.030381944428513684, -0.022372158355736263,
    0.0173527441556904, -0.013964483323351326, 0.011547475926257406, -0.009725716144151688, 0.00818236764637779,
    -0.0064746008466359025, 0.00413835813140252, -0.0014988358499957474,
)
_ASINH32 = (-0.16666666662316948, 0.07499998291277349, -0.044641751613321755, 0.030354830679471985,
            -0.022050181881361538, 0.015327479671086832, -0.007160367626374271)
# atanh(x) = x + x^3 T(x^2), x^2 in [0, 1/4]
_ATANH64 = (
    0.3333333333333333, 0.20000000000000864, 0.14285714285490106, 0.11111111133938968, 0.09090907881509189,
    0.07692345940270638, 0.06665886352701884, 0.05893099692590042, 0.05160769881147162, 0.05441915418234587,
    0.012292448728540531, 0.13557903913692299, -0.14450491183414468, 0.21098097885975797,
)
_ATANH32 = (0.3333333332667797, 0.20000003401467603, 0.14285431157697343, 0.1112001209869603, 0.08955099766012217,
            0.08796603824337362, 0.018678887279114646, 0.15799513360319026)
# sinh(x) = x + x^3 S(x^2), x^2 in [0, 1]
_SINH64 = (0.16666666666666666, 0.008333333333333299, 0.00019841269841324198, 2.7557319191381816e-06,
           2.5052117695907823e-08, 1.6057679623801638e-10, 7.746178593018827e-13)
_SINH32 = (0.16666666646842135, 0.00833333967591706, 0.00019838101968683888, 2.8062802582276946e-06)

# double-doubles (hi, lo)
_PIO2 = (1.5707963267948966, 6.123233995736766e-17)
_PI = (3.141592653589793, 1.2246467991473532e-16)
_PIO4 = (0.7853981633974483, 3.061616997868383e-17)
_PI3O4 = (2.356194490192345, 9.184850993605148e-17)
_ATAN_HALF = (0.4636476090008061, 2.2698777452961687e-17)
_ATAN_1_5 = (0.982793723247329, 1.3903311031230998e-17)
_LN2 = (0.6931471805599453, 2.3190468138462996e-17)


def _in_f64(fn):
    """An emitter computing float32 through the float64 emitter ``fn(D, *xs, coarse=True)``
    (rounded once); float64 calls ``fn(E, *xs, coarse=False)``."""

    def emit(E: _Em, *xs):
        if E.is64:
            return fn(E, *xs, coarse=False)
        D = E.other(True)
        return E.b.fptrunc(fn(D, *[E.b.fpext(x, D.ty) for x in xs], coarse=True), E.ty)

    return emit


def _le(E: _Em, a, b):
    return E.b.fcmp_ordered("<=", a, b)


def _odd_poly(E: _Em, x, z, coeffs):
    """x + x z P(z) (x^2 = z): the small-argument form of the odd functions here."""
    return E.fma(E.mul(x, z), E.poly(z, coeffs), x)


# ------------------------------------------------------------------------- atan, atan2


def _atan_pos(E: _Em, ax, coarse: bool):
    """atan(ax) for ax >= 0 (inf gives pi/2, NaN NaN), float64 arithmetic."""
    c0, c1 = E.ge(ax, E.c(7 / 16)), E.ge(ax, E.c(11 / 16))
    c2, c3 = E.ge(ax, E.c(19 / 16)), E.ge(ax, E.c(39 / 16))
    c = E.sel(c2, E.c(1.5), E.sel(c1, E.c(1.0), E.sel(c0, E.c(0.5), E.c(0.0))))
    num = E.sel(c3, E.c(-1.0), E.sub(ax, c))  # exact (Sterbenz) in every band
    den = E.sel(c3, ax, E.fma(c, ax, E.c(1.0)))
    t = E.div(num, den)
    z = E.mul(t, t)
    p = E.mul(E.mul(t, z), E.poly(z, _ATAN32 if coarse else _ATAN64))

    def base(k):
        return E.sel(c3, E.c(_PIO2[k]), E.sel(c2, E.c(_ATAN_1_5[k]), E.sel(
            c1, E.c(_PIO4[k]), E.sel(c0, E.c(_ATAN_HALF[k]), E.c(0.0)))))

    return E.add(base(0), E.add(t, E.add(p, base(1))))


def _atan(E: _Em, x, coarse: bool):
    return E.copysign(_atan_pos(E, E.abs(x), coarse), x)


def _signbit(E: _Em, x):
    return E.b.icmp_signed("<", E.bits(x), E.ci(0))


def _atan2(E: _Em, y, x, coarse: bool):
    """C99 atan2: the angle of (x, y) in [-pi, pi]."""
    ax, ay = E.abs(x), E.abs(y)
    a = _atan_pos(E, E.div(ay, ax), coarse)
    xneg = _signbit(E, x)
    a = E.sel(xneg, E.add(E.sub(E.c(_PI[0]), a), E.c(_PI[1])), a)
    inf = E.c(math.inf)
    a = E.sel(E.eq(ay, E.c(0.0)), E.sel(xneg, E.c(_PI[0]), E.c(0.0)), a)  # atan2(±0, x)
    both_inf = E.and_(E.eq(ax, inf), E.eq(ay, inf))
    a = E.sel(both_inf, E.sel(xneg, E.c(_PI3O4[0]), E.c(_PIO4[0])), a)
    a = E.sel(E.or_(E.isnan(x), E.isnan(y)), E.c(math.nan), a)
    return E.copysign(a, y)


# ------------------------------------------------------------------------- asin, acos


def _asin_parts(E: _Em, x, coarse: bool):
    """(big, s, c, r): for |x| > 1/2, asin(sqrt(w)) = s + c + r with w = (1-|x|)/2,
    s = sqrt(w) rounded, c its rounding error; for |x| <= 1/2, r = x^3 Q(x^2) (s, c unused)."""
    ax = E.abs(x)
    big = E.gt(ax, E.c(0.5))
    w = E.mul(E.sub(E.c(1.0), ax), E.c(0.5))  # exact for |x| >= 1/2
    s = E.call("llvm.sqrt", w)
    c = E.div(E.fma_exact(E.neg(s), s, w), E.add(s, s))
    c = E.sel(E.gt(s, E.c(0.0)), c, E.c(0.0))
    z = E.sel(big, w, E.mul(x, x))
    v = E.sel(big, s, x)
    r = E.mul(E.mul(v, z), E.poly(z, _ASIN32 if coarse else _ASIN64))
    return big, s, c, r


def _asin(E: _Em, x, coarse: bool):
    big, s, c, r = _asin_parts(E, x, coarse)
    small = E.add(x, r)
    hi, err = E.two_sum(E.c(_PIO2[0]), E.mul(s, E.c(-2.0)))
    large = E.add(hi, E.add(err, E.sub(E.c(_PIO2[1]), E.mul(E.add(c, r), E.c(2.0)))))
    res = E.sel(big, E.copysign(large, x), small)
    return E.sel(E.gt(E.abs(x), E.c(1.0)), E.c(math.nan), res)


def _acos(E: _Em, x, coarse: bool):
    big, s, c, r = _asin_parts(E, x, coarse)
    hi, err = E.two_sum(E.c(_PIO2[0]), E.neg(E.add(x, r)))
    small = E.add(hi, E.add(err, E.c(_PIO2[1])))
    pos = E.mul(E.add(s, E.add(c, r)), E.c(2.0))
    hi2, err2 = E.two_sum(E.c(_PI[0]), E.mul(s, E.c(-2.0)))
    neg = E.add(hi2, E.add(err2, E.sub(E.c(_PI[1]), E.mul(E.add(c, r), E.c(2.0)))))
    res = E.sel(big, E.sel(E.lt(x, E.c(0.0)), neg, pos), small)
    return E.sel(E.gt(E.abs(x), E.c(1.0)), E.c(math.nan), res)


# ------------------------------------------------------------------------- sinh, cosh


def _exp_minus_ln2(E: _Em, ax):
    """exp(ax - ln 2) = exp(ax) / 2 without overflowing first; the subtraction is exact
    (TwoSum) and its low part goes into exp's reduced argument."""
    h, err = E.two_sum(ax, E.c(-_LN2[0]))
    return _exp(E, h, E.sub(err, E.c(_LN2[1])))


def _sinh(E: _Em, x, coarse: bool):
    ax = E.abs(x)
    small = _odd_poly(E, ax, E.mul(ax, ax), _SINH32 if coarse else _SINH64)
    e = _exp(E, ax)
    mid = E.mul(E.sub(e, E.div(E.c(1.0), e)), E.c(0.5))
    res = E.sel(E.lt(ax, E.c(1.0)), small, mid)
    if not coarse:  # float32's range ends far below float64's exp overflow
        res = E.sel(E.gt(ax, E.c(22.0)), _exp_minus_ln2(E, ax), res)
    res = E.sel(E.isnan(x), x, res)
    return E.copysign(res, x)


def _cosh(E: _Em, x, coarse: bool):
    ax = E.abs(x)
    e = _exp(E, ax)
    res = E.mul(E.add(e, E.div(E.c(1.0), e)), E.c(0.5))
    if not coarse:
        res = E.sel(E.gt(ax, E.c(22.0)), _exp_minus_ln2(E, ax), res)
    return E.sel(E.isnan(x), x, res)


# ------------------------------------------------------------------------- asinh, acosh, atanh


def _asinh(E: _Em, x, coarse: bool):
    ax = E.abs(x)
    z = E.mul(ax, ax)
    small = _odd_poly(E, ax, z, _ASINH32 if coarse else _ASINH64)
    root = E.call("llvm.sqrt", E.add(z, E.c(1.0)))
    mid = _log1p(E, E.add(ax, E.div(z, E.add(E.c(1.0), root))))
    big = _log(E, E.add(E.add(ax, ax), E.div(E.c(1.0), E.add(root, ax))))
    huge = E.add(_log(E, ax), E.c(_LN2[0]))
    res = E.sel(E.lt(ax, E.c(0.5)), small, E.sel(_le(E, ax, E.c(2.0)), mid, E.sel(
        E.lt(ax, E.c(2.0 ** 28)), big, huge)))
    res = E.sel(E.isnan(x), x, res)
    return E.copysign(res, x)


def _acosh(E: _Em, x, coarse: bool):
    t = E.sub(x, E.c(1.0))  # exact for x in [1, 2]
    mid = _log1p(E, E.add(t, E.call("llvm.sqrt", E.fma(t, t, E.add(t, t)))))
    big = _log(E, E.sub(E.add(x, x), E.div(E.c(1.0), E.add(x, E.call("llvm.sqrt", E.fma(x, x, E.c(-1.0)))))))
    huge = E.add(_log(E, x), E.c(_LN2[0]))
    res = E.sel(_le(E, x, E.c(2.0)), mid, E.sel(E.lt(x, E.c(2.0 ** 28)), big, huge))
    res = E.sel(E.lt(x, E.c(1.0)), E.c(math.nan), res)
    return E.sel(E.isnan(x), x, res)


def _atanh(E: _Em, x, coarse: bool):
    ax = E.abs(x)
    small = _odd_poly(E, ax, E.mul(ax, ax), _ATANH32 if coarse else _ATANH64)
    one_m = E.sub(E.c(1.0), ax)  # exact for |x| >= 1/2
    big = E.mul(_log1p(E, E.div(E.add(ax, ax), one_m)), E.c(0.5))
    res = E.sel(E.lt(ax, E.c(0.5)), small, big)
    res = E.sel(E.gt(ax, E.c(1.0)), E.c(math.nan), res)
    res = E.sel(E.isnan(x), x, res)
    return E.copysign(res, x)


# ------------------------------------------------------------------------- hypot, logaddexp


def _hypot(E: _Em, x, y, coarse: bool):
    ax, ay = E.abs(x), E.abs(y)
    inf = E.c(math.inf)
    if coarse:  # float32 operands: their squares cannot overflow or underflow in float64
        res = E.call("llvm.sqrt", E.fma(ax, ax, E.mul(ay, ay)))
    else:
        gt = E.gt(ax, ay)
        a, b = E.sel(gt, ax, ay), E.sel(gt, ay, ax)
        up, down = E.lt(a, E.c(2.0 ** -500)), E.gt(a, E.c(2.0 ** 500))
        scale = E.sel(down, E.c(2.0 ** -600), E.sel(up, E.c(2.0 ** 600), E.c(1.0)))
        sa, sb = E.mul(a, scale), E.mul(b, scale)
        p1, p2 = E.mul(sa, sa), E.mul(sb, sb)
        e1, e2 = E.fma_exact(sa, sa, E.neg(p1)), E.fma_exact(sb, sb, E.neg(p2))
        s, es = E.two_sum(p1, p2)
        lo = E.add(es, E.add(e1, e2))
        r = E.call("llvm.sqrt", s)
        d = E.add(E.fma_exact(E.neg(r), r, s), lo)
        r = E.sel(E.gt(r, E.c(0.0)), E.add(r, E.div(d, E.add(r, r))), r)
        res = E.mul(r, E.sel(down, E.c(2.0 ** 600), E.sel(up, E.c(2.0 ** -600), E.c(1.0))))
    res = E.sel(E.or_(E.isnan(x), E.isnan(y)), E.c(math.nan), res)
    return E.sel(E.or_(E.eq(ax, inf), E.eq(ay, inf)), inf, res)  # hypot(inf, nan) = inf


# ln 2 in three pieces: n * _LN2_C1 is exact for |n| < 2**21; the rest to ~2**-140
_LN2_C1, _LN2_C2, _LN2_C3 = 0.6931471803691238, 1.9082149292705877e-10, 1.1612227229362532e-26


def _fast2sum(E: _Em, a, b):
    """a + b as (hi, lo) exactly, for |a| >= |b| (or a = 0)."""
    s = E.add(a, b)
    return s, E.sub(b, E.sub(s, a))


def _two_prod(E: _Em, a, b):
    p = E.mul(a, b)
    return p, E.fma_exact(a, b, E.neg(p))


def _exp_dd(E: _Em, yh, yl):
    """exp(yh + yl) for -700 < yh <= 0 as (n, ph, pl): 2**n * (1 + ph + pl) with ~2**-68
    relative error (measured against mpmath: the series' rounded tail, doubled by each
    squaring). Cody-Waite with ln 2 in three pieces (the reduced argument as a
    double-double), divided by 32, a Taylor series of degree 9 with r + r^2/2 carried
    exactly, then squared back five times in double-double arithmetic."""
    n = E.rint(E.mul(yh, E.c(1 / math.log(2))))
    r1 = E.sub(yh, E.mul(n, E.c(_LN2_C1)))  # both exact
    ph_, pl_ = _two_prod(E, n, E.c(_LN2_C2))
    rh, rl = E.two_sum(r1, E.neg(ph_))
    rl = E.add(E.sub(E.sub(rl, pl_), E.mul(n, E.c(_LN2_C3))), yl)
    rh, rl = _fast2sum(E, rh, rl)
    rh, rl = E.mul(rh, E.c(1 / 32)), E.mul(rl, E.c(1 / 32))
    sh, sl = _two_prod(E, rh, rh)
    sl = E.fma(E.add(rh, rh), rl, sl)
    ph, pl = E.two_sum(rh, E.mul(sh, E.c(0.5)))
    tail = E.mul(E.mul(rh, sh), E.poly(rh, [1 / math.factorial(j) for j in range(3, 10)]))
    pl = E.add(pl, E.add(E.add(rl, E.mul(sl, E.c(0.5))), tail))
    ph, pl = _fast2sum(E, ph, pl)
    for _ in range(5):  # 1 + p -> (1 + p)^2: p -> 2p + p^2
        qh, ql = _two_prod(E, ph, ph)
        ql = E.fma(E.add(ph, ph), pl, ql)
        h, lo = E.two_sum(E.add(ph, ph), qh)
        ph, pl = _fast2sum(E, h, E.add(lo, E.add(E.add(pl, pl), ql)))
    return E.toi(n), ph, pl


def _logaddexp_dd(E: _Em, m, dh, dl):
    """m + log1p(exp(-|dh + dl|)) with ~2**-68 absolute error (float64, |dh| < 700): the
    form where m in [-ln 2, 0] and the sum cancels to near 0."""
    neg = E.lt(dh, E.c(0.0))
    yh, yl = E.neg(E.abs(dh)), E.sel(neg, dl, E.neg(dl))
    ni, ph, pl = _exp_dd(E, yh, yl)
    eh, el = _fast2sum(E, E.c(1.0), ph)
    eh, el = _scale(E, eh, ni), _scale(E, E.add(el, pl), ni)
    uh, ul = _fast2sum(E, E.c(1.0), eh)
    lh, ll = _log_dd(E, uh)
    sh, se = E.two_sum(m, lh)
    return E.add(sh, E.add(se, E.add(ll, E.div(E.add(ul, el), uh))))


def _logaddexp(E: _Em, a, b, coarse: bool):
    d = E.sub(a, b)
    m = E.sel(E.gt(d, E.c(0.0)), a, b)
    res = E.add(m, _log1p(E, _exp(E, E.neg(E.abs(d)))))
    # where the sum can cancel (max in [-1.5, 0]: the result is at most ln 2 - |max|), the
    # double-double form; float32 too (in float64 the plain form loses 2**-53 absolutely)
    dh, dl = E.two_sum(a, E.neg(b))
    zone = E.and_(E.and_(E.ge(m, E.c(-1.5)), _le(E, m, E.c(0.0))), E.lt(E.abs(dh), E.c(700.0)))
    res = E.sel(zone, _logaddexp_dd(E, m, dh, dl), res)
    res = E.sel(E.isnan(d), d, res)
    # a == b: a + ln 2 with ln 2 as a double-double (a = -ln 2 rounded gives ln 2's rounding error, not 0)
    return E.sel(E.eq(a, b), E.add(E.add(a, E.c(_LN2[0])), E.c(_LN2[1])), res)


FUNCTIONS = {
    "asin": _in_f64(_asin), "acos": _in_f64(_acos), "atan": _in_f64(_atan),
    "sinh": _in_f64(_sinh), "cosh": _in_f64(_cosh),
    "asinh": _in_f64(_asinh), "acosh": _in_f64(_acosh), "atanh": _in_f64(_atanh),
    "atan2": _in_f64(_atan2), "hypot": _in_f64(_hypot), "logaddexp": _in_f64(_logaddexp),
}
BINARY = frozenset({"atan2", "hypot", "logaddexp"})

# registered in vecmath's tables: get_math_fn / emit_math / math_kernel_ir dispatch on them
_vm._EMITTERS.update(FUNCTIONS)
_vm._BINARY.update(BINARY)
_vm.MATH_FUNCTIONS = tuple(dict.fromkeys(_vm.MATH_FUNCTIONS + tuple(FUNCTIONS)))
