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

__all__ = ["logaddexp"]

_LN2 = (0.6931471805599453, 2.3190468138462996e-17)
# ln 2 in three pieces: n * _LN2_C[0] is exact for |n| < 2**21
_LN2_C = (0.6931471803691238, 1.9082149292705877e-10, 1.1612227229362532e-26)
_TAYLOR = [1 / math.factorial(j) for j in range(3, 10)]  # exp(r) = 1 + r + r^2/2 + r^3 Q(r)


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
