"""Double-double arithmetic written as svod graph ops, and the accurate GELU forms built
on it (`svod.nn.gelu` calls ``gelu_erf`` / ``gelu_tanh``, `svod.nn.silu` ``silu``).

Everything here is ordinary elementwise ops on float64 tensors: no op of its own, so the
compiled kernels and the reference interpreter compute the same IEEE operations, and
fusion (matmul epilogues included) sees plain ops. The error-free transformations
(Dekker's split and product, Knuth's TwoSum) need every add and multiply rounded on its
own: svod's lowering emits no fast-math or contraction flags for elementwise ops and the
search's rewrites are exact in IEEE arithmetic (search/rules.py, ``algebra``).

The GELU forms: an accurate elementwise function f (the sigmoid, erfc) of an argument
v(x) that is rounded loses ``|d log f / dv| * |v| * 2**-53`` relative: ~|v|**2 ulp for
erfc, |v| for the sigmoid's left tail, hundreds of ulp where the result is near
underflow. float32 inputs compute in float64 (``exact=False``: the argument's rounding
is ~2**-50 of the float32 ulp there). float64 (``exact=True``) carries the argument as
hi + lo and multiplies by the first-order correction (1 + (d log f / dv) * lo), and
where the result may be subnormal, scales so that one rounding lands there (a subnormal
intermediate times a factor > 1 would carry its rounding error up).

>>> import numpy as np, svod
>>> from svod import _ddgraph
>>> hi, lo = _ddgraph.two_prod(svod.asarray(np.array([0.1])), 0.1)
>>> float(hi.numpy()[0]), float(lo.numpy()[0])
(0.010000000000000002, -8.326672684688674e-19)
"""

from __future__ import annotations

from svod import elementwise as E

_SPLITTER = 134217729.0  # 2**27 + 1
_CLAMP = 64.0  # |x| beyond it: both GELU forms are x or -0.0 (splits stay < 2**995)

# Constants as (nearest double, remainder), from mpmath at 40 digits.
_K1 = (1.5957691216057308, -9.96930880911092e-17)  # 2 sqrt(2/pi)
_K2 = (0.07135481627260025, -6.175149918155315e-19)  # 2 sqrt(2/pi) * 0.044715
_RSQRT2 = (0.7071067811865476, -4.833646656726457e-17)  # 1/sqrt(2)
_LOG_SQRT_2PI = (0.9189385332046728, -3.8782941580672414e-17)
_FOUR_OVER_PI = 1.2732395447351628
# 2**64 scaling of exp: H = 64 * ln2_hi (exact: ln2_hi has 32 bits), exp(-H) = 2**-64 (1 + C64)
_H64 = 44.361419543623924
_C64 = 1.2212575621905263e-08  # expm1(64 ln 2 - H), from mpmath
_TWO_M64 = 2.0 ** -64


def split(a):
    """(hi, lo) with a = hi + lo exactly, each of at most 26 significant bits (float64
    tensors with |a| < 2**995)."""
    t = E.multiply(a, _SPLITTER)
    hi = E.subtract(t, E.subtract(t, a))
    return hi, E.subtract(a, hi)


def _split_const(c: float) -> tuple[float, float]:
    t = c * _SPLITTER
    hi = t - (t - c)
    return hi, c - hi


def two_sum(a, b):
    """(s, e): s = fl(a + b), s + e = a + b exactly (Knuth; any magnitudes, finite)."""
    s = E.add(a, b)
    bb = E.subtract(s, a)
    return s, E.add(E.subtract(a, E.subtract(s, bb)), E.subtract(b, bb))


def two_prod(a, b, a_parts=None):
    """(p, e): p = fl(a * b), p + e = a * b exactly (Dekker), barring underflow. ``a`` a
    float64 tensor (``a_parts``: its `split`, if already built), ``b`` a tensor or a float."""
    p = E.multiply(a, b)
    ah, al = a_parts if a_parts is not None else split(a)
    bh, bl = _split_const(b) if isinstance(b, float) else split(b)
    e = E.add(E.subtract(E.multiply(ah, bh), p), E.multiply(ah, bl))
    e = E.add(E.add(e, E.multiply(al, bh)), E.multiply(al, bl))
    return p, e


def x_sigmoid_plain(x, v):
    """x * sigmoid(v) as x / (1 + e) or x e / (1 + e), e = exp(-|v|) (float64, for float32
    results; one division); -0.0 where x = -inf (the limit: v has x's sign)."""
    e = E.exp(E.negative(E.abs(v)))
    res = E.divide(E.where(E.greater_equal(v, 0.0), x, E.multiply(x, e)), E.add(e, 1.0))
    return E.where(E.equal(x, float("-inf")), -0.0, res)


def x_sigmoid(x, xs, vh, vl=None):
    """x * sigmoid(vh + vl) to a few float64 ulp, subnormal results included; vh has the
    sign of x, ``xs`` is x clamped to where the result is x (large x) or underflows (x
    very negative; then -0.0, -inf included), ``vl`` a low part (|vl| <~ ulp(vh)) or None.

    One exp: exp(-vh) where vh >= 0, else exp(vh + H), H = 64 ln2_hi: x exp(vh) is formed
    2**64 larger and scaled down once, so a subnormal result rounds once (x exp(vh) from a
    subnormal exp(vh) would carry its rounding error up |x| times: 371 ulp in silu). The
    sigmoid's 1 / (1 + e) is corrected by its measured rounding (rho), the TwoSum error of
    vh + H goes back in as a factor 1 + she."""
    pos = E.greater_equal(vh, 0.0)
    sh, she = two_sum(vh, _H64)  # sh + she = vh + H exactly
    big = E.exp(E.where(pos, E.negative(vh), sh))
    # exp(vh) = big 2**-64 (1 + she + C64) (to 2**-80): she is 16 ulp at 44
    lo = E.add(she, _C64)
    down = E.multiply(big, _TWO_M64)
    e = E.where(pos, big, E.add(down, E.multiply(down, lo)))  # exp(-|vh|)
    # r = 1 / (1 + e) with its rounding measured: 1/(d + de) = r (1 + rho), d + de = 1 + e
    # exactly (Fast2Sum, e <= 1), rho = (1 - r d) - r de, r d exact as rd + rde (Dekker)
    d = E.add(e, 1.0)
    de = E.subtract(e, E.subtract(d, 1.0))
    r = E.reciprocal(d)
    rd, rde = two_prod(r, d)
    rho = E.subtract(E.subtract(E.subtract(1.0, rd), rde), E.multiply(r, de))
    # sigmoid(vh + vl) = sigmoid(vh) (1 + (1 - sigmoid(vh)) vl): 1 - sigmoid is e r (vh >= 0), r
    cpos, cneg = rho, E.add(lo, rho)
    if vl is not None:
        cpos = E.add(cpos, E.multiply(E.multiply(e, r), vl))
        cneg = E.add(cneg, E.multiply(r, vl))
    res_pos = E.multiply(x, E.add(r, E.multiply(r, cpos)))
    res_neg = E.multiply(E.multiply(E.multiply(xs, big), E.add(r, E.multiply(r, cneg))), _TWO_M64)
    return E.where(pos, res_pos, res_neg)


def silu(x, exact: bool):
    """x * sigmoid(x) for a float64 tensor ``x`` (``exact``: to float64's 4 ulp, else to
    float32's, computed plainly in float64)."""
    if not exact:
        return x_sigmoid_plain(x, x)
    xs = E.clip(x, -1000.0, 1000.0)
    return x_sigmoid(x, xs, xs)


def gelu_tanh(x, exact: bool):
    """x * sigmoid(v), v = 2 sqrt(2/pi) (x + 0.044715 x^3), for a float64 tensor ``x``;
    ``exact``: v as a double-double, to float64's 4 ulp (else to float32's)."""
    if not exact:
        return x_sigmoid_plain(x, E.multiply(x, E.add(E.multiply(E.multiply(x, x), _K2[0]), _K1[0])))
    xs = E.clip(x, -_CLAMP, _CLAMP)
    xp = split(xs)
    p, pe = two_prod(xs, xs, xp)  # x^2
    q, qe = two_prod(p, _K2[0])
    qe = E.add(qe, E.add(E.multiply(pe, _K2[0]), E.multiply(p, _K2[1])))
    s, se = two_sum(q, _K1[0])  # k1 + k2 x^2 = s + zl
    zl = E.add(se, E.add(qe, _K1[1]))
    vh, ve = two_prod(xs, s, xp)
    return x_sigmoid(x, xs, vh, E.add(ve, E.multiply(xs, zl)))  # v = vh + vl, |vl| <~ ulp(vh)


# Phi(x) x for x -> -inf: -phi(x) * sum_k (-1)^k (2k-1)!! / x^(2k); 10 terms: < 2**-64
# relative for x <= -36 (the next term is 19!! / 36**20)
_TAIL = tuple(float((-1) ** k * _k) for k, _k in enumerate((1, 1, 3, 15, 105, 945, 10395, 135135, 2027025,
                                                             34459425)))
_TAIL_AT = -36.0


# erfc(a) = t exp(-a^2 + P(t)), t = 2 / (2 + a), a in [0, 12]: P in t - 0.575 fitted on
# t in [0.15, 1] (mpmath.chebyfit, degree 12, 2.8e-10 absolute: ~0.005 float32 ulp)
_ERFC32_M = 0.575
_ERFC32 = (-0.5699949606308037, 1.3671408686523996, 0.10085970299625202, -0.40605203960967345,
           -0.04698730121802391, 0.29801438838448385, -0.039565232950787045, -0.2613258125424873,
           0.14843940406666023, 0.19893334581176578, -0.23792240118990163, -0.0900726589370292,
           0.19230463699157319)


def _erfc_coarse(x):
    """erfc(-x / sqrt(2)) to ~1e-9 relative, for float32 results (float64 ``x``): a third
    of the ERFC op's work (one polynomial, no pieces), enough where float64's 4 ulp is not
    needed; x >= 0 gives 2 - erfc(|x| / sqrt(2)) (no cancellation: >= 1)."""
    a = E.minimum(E.multiply(E.abs(x), _RSQRT2[0]), 12.0)  # beyond: erfc underflows float32
    t = E.divide(2.0, E.add(a, 2.0))
    y = E.subtract(t, _ERFC32_M)
    poly = E.add(E.multiply(y, _ERFC32[-1]), _ERFC32[-2])
    for c in reversed(_ERFC32[:-2]):
        poly = E.add(E.multiply(poly, y), c)
    e = E.multiply(t, E.exp(E.subtract(poly, E.multiply(a, a))))
    e = E.where(E.equal(a, 12.0), 0.0, e)  # a >= 12: erfc < 1.4e-64, the results are 0 in float32
    return E.where(E.less(x, 0.0), e, E.subtract(2.0, e))


def gelu_erf(x, exact: bool):
    """0.5 x erfc(-x / sqrt(2)) for a float64 tensor ``x``; ``exact``: the ERFC op on the
    argument as a double-double, to float64's 4 ulp (else `_erfc_coarse`, to float32's)."""
    half = E.multiply(x, 0.5)
    if not exact:
        return E.where(E.equal(x, float("-inf")), -0.0, E.multiply(half, _erfc_coarse(x)))
    a = E.multiply(x, -_RSQRT2[0])
    xs = E.clip(x, -_CLAMP, _CLAMP)
    xp = split(xs)
    p, pe = two_prod(xs, _RSQRT2[0], xp)
    al = E.negative(E.add(pe, E.multiply(xs, _RSQRT2[1])))  # -x/sqrt(2) = a + al (|x| <= 64)
    # erfc(a + al) = erfc(a) (1 - g(a) al), g = -d log erfc / da = 2 exp(-a^2) / (sqrt(pi)
    # erfc(a)); a + sqrt(a^2 + 4/pi) is within 25% of g for a > 0 (the bounds on erfcx), and
    # |g al| <= 2 a^2 2**-53, so the correction's own error stays < 0.4 ulp; for a < 0,
    # g |al| < 0.3 2**-53: no correction
    ac = E.negative(p)
    g = E.where(E.greater(ac, 0.0), E.add(ac, E.sqrt(E.add(E.multiply(ac, ac), _FOUR_OVER_PI))), 0.0)
    he = E.multiply(half, E.erfc(a))
    res = E.subtract(he, E.multiply(he, E.multiply(g, al)))
    # x < -36: erfc(a) would be subnormal below x ~ -37.5 and the result 19x larger
    p2, pe2 = two_prod(xs, xs, xp)
    hi, e1 = two_sum(E.multiply(p2, -0.5), -_LOG_SQRT_2PI[0])  # -x^2/2 - log sqrt(2 pi)
    lo = E.subtract(E.subtract(e1, E.multiply(pe2, 0.5)), _LOG_SQRT_2PI[1])
    w = E.reciprocal(p2)
    series = E.add(E.multiply(w, _TAIL[-1]), _TAIL[-2])
    for c in reversed(_TAIL[:-2]):
        series = E.add(E.multiply(series, w), c)
    tail = E.negative(E.multiply(E.exp(hi), E.add(series, E.multiply(series, lo))))
    near = E.less_equal(E.abs(x), _CLAMP)
    return E.where(E.less(x, _TAIL_AT), tail, E.where(near, res, he))
