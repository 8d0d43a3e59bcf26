"""Double-double arithmetic in numpy for the reference interpreter's logaddexp.

``logaddexp(a, b)`` computes what ``svod/codegen/vecmath_inv.py`` computes: numpy's
max + log1p(exp(-|a - b|)) (in float64; float32 operands are widened, the caller rounds
back), except where max(a, b) is in [-1.5, 0], where the sum can cancel to near 0: there
a - b, exp and log are carried as (hi, lo) pairs and the result has an absolute error of
~2**-67 (numpy's formula: 2**-53, thousands of ulps on a result of 1e-4). Where a == b
the result is a + ln 2 with ln 2 as a double-double. Plain float64 operations only (no
FMA: products are split à la Dekker), so the result does not depend on the platform's
long double.

>>> import numpy as np
>>> float(logaddexp(np.array([-np.log(2)]), np.array([-np.log(2)]))[0])  # ln 2 - fl(ln 2)
2.3190468138462996e-17
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["erfc", "logaddexp"]

_LN2 = (0.6931471805599453, 2.3190468138462996e-17)
# ln 2 in three pieces: n * _LN2_C[0] is exact for |n| < 2**21
_LN2_C = (0.6931471803691238, 1.9082149292705877e-10, 1.1612227229362532e-26)
_TAYLOR = [1 / math.factorial(j) for j in range(3, 10)]  # exp(r) = 1 + r + r^2/2 + r^3 Q(r)

# erfc(a) = exp(-a^2 + H(a)), H = log(erfcx): polynomials in a - m on [0.5, 1.5], [1.5, 3],
# [3, 4.75] (fit errors 7e-20, 5e-19, 5e-20 absolute); a >= 4.75: erfc(a) = exp(-a^2 +
# F(s)) / a, F(s) = log(a erfcx(a)) in s - m, s = 1/a^2 in [0.0013, 0.0444] (2.2e-20)
ERFC_MID = (
    (1.0, (-0.8496055099332482, -0.6389675142347913, 0.15689274364151465, -0.04156109804652362,
           0.01003382543429413, -0.0019779030210901865, 0.00023732470776642464, 2.627037010206006e-05,
           -2.7141093589592968e-05, 9.57732704387676e-06, -2.018840939344502e-06, 1.0350830150906708e-07,
           1.25406443688548e-07, -6.610207988616529e-08, 1.9050439845338246e-08, -2.2731961734139957e-09,
           -6.275088340302124e-10)),
    (2.25, (-1.4649598963658184, -0.38291381054455204, 0.06513243312188328, -0.013312548394200839,
            0.002771336832186398, -0.0005548409098075598, 0.0001026377879711553, -1.660389542648078e-05,
            2.0482895864648323e-06, -7.209567817488681e-08, -6.162862296692537e-08, 2.6619797183011644e-08,
            -7.340317215659436e-09, 1.5765927134983864e-09, -2.5552664236425773e-10, 1.3693542842594307e-11,
            6.75054078614729e-12)),
    (3.875, (-1.9578087187691673, -0.24319821095750396, 0.0280342476332068, -0.0040990113534266825,
             0.0006425055864273752, -0.00010236964380674868, 1.6161607783894234e-05, -2.485989597283113e-06,
             3.668355888969216e-07, -5.0908742134350926e-08, 6.423812983187373e-09, -6.817202406274635e-10,
             4.492194280828366e-11, 3.716543170171641e-12, -2.335603551405922e-12, 7.042970461572281e-13,
             -1.4277683639901437e-13)),
)
ERFC_TAIL_M = 0.02285
ERFC_TAIL = (
    -0.5834806466584643, -0.47361928791867547, 0.5340410654705615, -1.1435426233587151, 3.431960378754516,
    -12.890085546065578, 57.201322797624904, -289.7591631023505, 1637.6136183575352, -10159.700940462979,
    68331.3704612999, -490083.165893758, 3765113.33693073, -35520202.81530217, 308810820.81422824,
)


def _two_sum(a, b):
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a, b):  # |a| >= |b|
    s = a + b
    return s, b - (s - a)


def _split(a):
    c = 134217729.0 * a  # 2**27 + 1
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a, b):
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _exp_dd(yh, yl):
    """exp(yh + yl), yh in (-710, 1]: (n, ph, pl) with exp = 2**n (1 + ph + pl), ~2**-68
    relative (Cody-Waite, /32, Taylor to degree 9, five double-double squarings)."""
    n = np.rint(yh / math.log(2))
    r1 = yh - n * _LN2_C[0]  # exact
    p, pe = _two_prod(n, _LN2_C[1])
    rh, rl = _two_sum(r1, -p)
    rh, rl = _fast_two_sum(rh, ((rl - pe) - n * _LN2_C[2]) + yl)
    rh, rl = rh / 32, rl / 32
    sh, sl = _two_prod(rh, rh)
    sl = sl + 2 * rh * rl
    ph, pl = _two_sum(rh, sh / 2)
    q = np.zeros_like(rh) + _TAYLOR[-1]
    for c in reversed(_TAYLOR[:-1]):
        q = q * rh + c
    ph, pl = _fast_two_sum(ph, pl + (rl + sl / 2 + rh * sh * q))
    for _ in range(5):  # 1 + p -> (1 + p)^2
        qh, ql = _two_prod(ph, ph)
        h, lo = _two_sum(2 * ph, qh)
        ph, pl = _fast_two_sum(h, lo + 2 * pl + (ql + 2 * ph * pl))
    return n.astype(np.int64), ph, pl


def _log_dd(u):
    """log(u) for u in [1, 2] as (hi, lo), ~2**-67 absolute: l = log(u) rounded, then one
    Newton step log(u) = l + log1p(u exp(-l) - 1) with exp(-l) in double-double."""
    lh = np.log(u)
    n, ph, pl = _exp_dd(-lh, np.zeros_like(u))
    eh, el = _fast_two_sum(np.ones_like(u), ph)
    eh, el = np.ldexp(eh, n), np.ldexp(el + pl, n)
    p, pe = _two_prod(u, eh)
    w = (p - 1) + (pe + u * el)  # p - 1 exact: u exp(-l) is within 2**-51 of 1
    return _fast_two_sum(lh, w - w * w / 2)


def logaddexp(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(exp(a) + exp(b)) in float64 (see the module docstring)."""
    a, b = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(b, np.float64))
    with np.errstate(all="ignore"):
        out = np.array(np.logaddexp(a, b))  # writable, 0-d included
        dh, dl = _two_sum(a, -b)
        m = np.where(dh > 0, a, b)
        zone = (m >= -1.5) & (m <= 0) & (np.abs(dh) < 700)
        if zone.any():
            m, dh, dl = m[zone], dh[zone], dl[zone]
            yh, yl = -np.abs(dh), np.where(dh < 0, dl, -dl)
            n, ph, pl = _exp_dd(yh, yl)
            eh, el = _fast_two_sum(np.ones_like(ph), ph)
            eh, el = np.ldexp(eh, n), np.ldexp(el + pl, n)
            uh, ul = _fast_two_sum(np.ones_like(eh), eh)
            lh, ll = _log_dd(uh)
            sh, se = _two_sum(m, lh)
            out[zone] = sh + (se + (ll + (ul + el) / uh))
        return np.where(a == b, (a + _LN2[0]) + _LN2[1], out)


def erfc(x: np.ndarray) -> np.ndarray:
    """erfc in float64 as ``svod/codegen/vecmath.py`` computes it (its tables; float32
    operands widened, the caller rounds back), with exp in double-double: |x| < 0.5 is
    libm's erfc (math.erfc, < 1 ulp there), beyond exp(-a^2 + H(a)) [/ a], a = |x|, the
    exponent as an exact sum of -a^2 (Dekker), H's constant term and the rest. ~0.6 ulp;
    libm's erfc alone reaches 2.5 ulp (x = 1.21)."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        a = np.minimum(np.abs(x), 28.0)
        in2, in3, tail = a >= 1.5, a >= 3.0, a >= 4.75
        (m1, c1), (m2, c2), (m3, c3) = ERFC_MID
        y = a - np.where(in3, m3, np.where(in2, m2, m1))
        acc = np.zeros_like(a)
        for k in reversed(range(1, len(c1))):
            acc = acc * y + np.where(in3, c3[k], np.where(in2, c2[k], c1[k]))
        st = 1.0 / (a * a) - ERFC_TAIL_M
        q = np.zeros_like(a)
        for c in reversed(ERFC_TAIL[1:]):
            q = q * st + c
        h0 = np.where(tail, ERFC_TAIL[0], np.where(in3, c3[0], np.where(in2, c2[0], c1[0])))
        h1 = np.where(tail, st * q, y * acc)
        p, pe = _two_prod(a, a)
        s1, e1 = _two_sum(-p, h0)
        s2, e2 = _two_sum(s1, h1)
        n, ph, pl = _exp_dd(s2, (e1 + e2) - pe)
        m = 1.0 + (ph + pl)
        m = np.ldexp(np.where(tail, m / np.maximum(a, 1.0), m), n)
        small = np.asarray(np.frompyfunc(math.erfc, 1, 1)(np.minimum(a, 0.5)), np.float64)
        r = np.where(a < 0.5, small, np.where(np.abs(x) > 28.0, 0.0, m))
        r = np.where(x < 0, 2.0 - r, r)
    return np.where(np.isnan(x), x, r)
