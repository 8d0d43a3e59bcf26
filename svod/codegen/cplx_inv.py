"""The complex inverse functions in generated code, and the register-level helpers the
complex emitter (`svod/codegen/cplx.py`) shares with them.

`casinh`, `casin`, `cacos`, `cacosh`, `catanh`, `catan` take and return a complex value as
a pair of real registers ``(re, im)`` (float or double; complex64 is computed in double
and rounded once at the end). numpy computes these with the C library's functions
(glibc's casinh, ..., bit for bit); svod computes them with the algorithms of Hull,
Fairgrieve & Tang ("Implementing the complex arcsine and arccosine functions using
exception handling", ACM TOMS 1997) for asinh/asin/acos/acosh and Kahan's formulas for
atanh/atan (the forms FreeBSD's msun and numpy's own npymath use where no C library
provides them). Every branch of those algorithms is computed and the right one selected,
so a loop of them vectorises; C99 Annex G's special values (infinities, NaNs, the sign of
zero choosing the side of a branch cut) are selected last. Finite results agree with
numpy to a few ulps (docs/semantics.md, complex section), not bit for bit.

Identities (C99's definitions): asin(z) = -i asinh(iz) and atan(z) = -i atanh(iz), by the
functions' oddness and conjugate symmetry the parts of asinh/atanh of the swapped
(im, re) pair, swapped back; acosh from acos with the sign rules of C99 (real part >= 0,
imaginary part of the sign of im).
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

D = ir.DoubleType()
_EPS = 2.0 ** -52
_LN2 = math.log(2.0)
_PIO2_HI = 1.5707963267948966  # pi/2 rounded, and the rest (pi/2 - _PIO2_HI)
_PIO2_LO = 6.123233995736766e-17
_RECIP_EPS = 1.0 / _EPS  # above it asinh(z) = log(2z), atanh(z) = 1/z + i pi/2 to the last bit
_SQRT_6_EPS_4 = math.sqrt(6 * _EPS) / 4  # below it (both parts) asinh(z) = z
_SQRT_3_EPS_2 = math.sqrt(3 * _EPS) / 2  # below it atanh(z) = z
_FOUR_SQRT_MIN = 2.0 ** -509  # 4 sqrt(smallest normal): below it y/A would lose bits
_SQRT_MIN = 2.0 ** -511
_A_CROSS, _B_CROSS = 10.0, 0.6417  # HFT's crossovers: A = (|z+i| + |z-i|)/2, B = y/A


def sfx(x: ir.Value) -> str:
    return "f64" if x.type == D else "f32"


def fabs(f, x: ir.Value) -> ir.Value:
    return f.call_intr(f"llvm.fabs.{sfx(x)}", x.type, [x])


def fma(f, a, b_, c) -> ir.Value:
    return f.call_intr(f"llvm.fma.{sfx(a)}", a.type, [a, b_, c])


def copysign(f, x, y) -> ir.Value:
    return f.call_intr(f"llvm.copysign.{sfx(x)}", x.type, [x, y])


def fsqrt(f, x) -> ir.Value:
    return f.call_intr(f"llvm.sqrt.{sfx(x)}", x.type, [x])


def isinf(f, x: ir.Value) -> ir.Value:
    return f.b.fcmp_ordered("==", fabs(f, x), ir.Constant(x.type, math.inf))


def isnan(f, x: ir.Value) -> ir.Value:
    return f.b.fcmp_unordered("uno", x, x)


def m(f, name: str, *xs) -> ir.Value:
    """svod's vector math function `name` (C99 special values) at the builder's position."""
    from svod.codegen.vecmath_inv import emit_math  # registers asin, atan2, hypot, ...

    return emit_math(f.b, name, *xs)


def log_abs(f, re, im):
    """log|z| without overflow (log(m) + log1p(r*r)/2, m the larger magnitude, r =
    smaller/larger) and without cancellation near |z| = 1 (log1p(m*m - 1 + s*s)/2 for
    0.5 <= m < 2, s the smaller, the products exact as fma pairs); the special values are
    those of log and hypot."""
    b = f.b
    ty = re.type
    one, half, zero = ir.Constant(ty, 1.0), ir.Constant(ty, 0.5), ir.Constant(ty, 0.0)
    ar, ai = fabs(f, re), fabs(f, im)
    gt = b.fcmp_ordered(">", ar, ai)
    mx, sm = b.select(gt, ar, ai), b.select(gt, ai, ar)
    ok = b.not_(b.or_(b.fcmp_ordered("==", mx, zero), isinf(f, mx)))
    r = b.select(ok, b.fdiv(sm, b.select(ok, mx, one)), zero)
    far = b.fadd(m(f, "log", mx), b.fmul(half, m(f, "log1p", b.fmul(r, r))))
    # m*m - 1 + s*s with the products' rounding errors kept (fma): mh - 1 is exact here
    mh, sh = b.fmul(mx, mx), b.fmul(sm, sm)
    ml, sl = fma(f, mx, mx, b.fneg(mh)), fma(f, sm, sm, b.fneg(sh))
    near = b.fmul(half, m(f, "log1p", b.fadd(b.fadd(b.fsub(mh, one), sh), b.fadd(ml, sl))))
    is_near = b.and_(b.fcmp_ordered(">=", mx, half), b.fcmp_ordered("<", mx, ir.Constant(ty, 2.0)))
    special = b.or_(b.not_(ok), b.fcmp_unordered("uno", mx, sm))  # 0, inf or NaN parts: log(hypot)
    return b.select(special, m(f, "log", m(f, "hypot", re, im)), b.select(is_near, near, far))


def _c(v: float) -> ir.Constant:
    return ir.Constant(D, v)


def _in_double(fn):
    """`fn` on doubles: float parts are widened first and the result rounded once."""
    def wrapped(f, x):
        b = f.b
        re, im = x
        if re.type == D:
            return fn(f, re, im)
        r, i = fn(f, b.fpext(re, D), b.fpext(im, D))
        return b.fptrunc(r, re.type), b.fptrunc(i, re.type)
    wrapped.__doc__ = fn.__doc__
    return wrapped


def _half_diff(f, a, b_, h):
    """HFT's f(a, b) = (h - b)/2 with h = hypot(a, b), without cancellation for b >= 0."""
    b = f.b
    half = _c(0.5)
    neg = b.fcmp_ordered("<", b_, _c(0.0))
    zero = b.fcmp_ordered("==", b_, _c(0.0))
    pos = b.fmul(b.fdiv(b.fmul(a, a), b.fadd(h, b_)), half)
    return b.select(neg, b.fmul(b.fsub(h, b_), half), b.select(zero, b.fmul(a, half), pos))


def _hard(f, x, y):
    """HFT's core for x, y >= 0 finite, neither tiny-both nor huge: returns (rx, usable,
    B, den, num) with rx = Re asinh(x + iy) = log(A + sqrt(A² - 1)) and Im asinh =
    asin(B) where `usable`, else atan2(num, den) (num/den = y/sqrt(A² - y²), scaled)."""
    b = f.b
    one = _c(1.0)
    yp1, ym1, my1 = b.fadd(y, one), b.fsub(y, one), b.fsub(one, y)
    r_ = m(f, "hypot", x, yp1)
    s_ = m(f, "hypot", x, ym1)
    a_ = b.fmul(b.fadd(r_, s_), _c(0.5))
    a_ = b.select(b.fcmp_ordered("<", a_, one), one, a_)
    y1 = b.fcmp_ordered("==", y, one)
    near = b.fcmp_ordered(">=", x, b.fmul(_c(_EPS), fabs(f, ym1)))  # x not negligible beside |y - 1|
    ylt1 = b.fcmp_ordered("<", y, one)
    # the real part: A - 1 from the half differences where A is near 1
    am1 = b.fadd(_half_diff(f, x, yp1, r_), _half_diff(f, x, my1, s_))
    rx_near = m(f, "log1p", b.fadd(am1, fsqrt(f, b.fmul(am1, b.fadd(a_, one)))))
    rx_in = b.fdiv(x, fsqrt(f, b.fmul(my1, yp1)))
    rx_out = m(f, "log1p", b.fadd(ym1, fsqrt(f, b.fmul(ym1, yp1))))
    rx_small = b.select(b.and_(y1, b.fcmp_ordered("<", x, _c(_EPS * _EPS / 128))), fsqrt(f, x),
                        b.select(near, rx_near, b.select(ylt1, rx_in, rx_out)))
    rx_big = m(f, "log", b.fadd(a_, fsqrt(f, b.fsub(b.fmul(a_, a_), one))))
    rx = b.select(b.fcmp_ordered("<", a_, _c(_A_CROSS)), rx_small, rx_big)
    # the imaginary part: asin(y/A), or atan2(y, sqrt(A² - y²)) where y/A is near 1
    bb = b.fdiv(y, a_)
    amy = b.fadd(_half_diff(f, x, yp1, r_), _half_diff(f, x, ym1, s_))
    d1 = b.and_(y1, b.fcmp_ordered("<", x, _c(_EPS / 128)))
    scale = _c(4 / _EPS / _EPS)
    den_out = b.fdiv(b.fmul(b.fmul(x, scale), y), fsqrt(f, b.fmul(yp1, ym1)))
    den = b.select(d1, b.fmul(fsqrt(f, x), fsqrt(f, b.fmul(b.fadd(a_, y), _c(0.5)))),
                   b.select(near, fsqrt(f, b.fmul(amy, b.fadd(a_, y))),
                            b.select(ylt1, fsqrt(f, b.fmul(my1, yp1)), den_out)))
    out = b.and_(b.not_(b.or_(d1, near)), b.not_(ylt1))  # y > 1, x negligible: num scaled too
    num = b.select(out, b.fmul(y, scale), y)
    tiny_y = b.fcmp_ordered("<", y, _c(_FOUR_SQRT_MIN))  # y/A would be subnormal: atan2 of scaled parts
    den = b.select(tiny_y, b.fmul(a_, _c(2 / _EPS)), den)
    num = b.select(tiny_y, b.fmul(y, _c(2 / _EPS)), num)
    usable = b.and_(b.not_(tiny_y), b.not_(b.fcmp_ordered(">", bb, _c(_B_CROSS))))
    return rx, usable, bb, den, num


def _large_or_tiny(f, ax, ay):
    b = f.b
    large = b.or_(b.fcmp_ordered(">", ax, _c(_RECIP_EPS)), b.fcmp_ordered(">", ay, _c(_RECIP_EPS)))
    tiny = b.and_(b.fcmp_ordered("<", ax, _c(_SQRT_6_EPS_4)), b.fcmp_ordered("<", ay, _c(_SQRT_6_EPS_4)))
    return large, tiny


def _asinh_d(f, x, y):
    """asinh(x + iy), C99's casinh: odd, conjugate-symmetric; asinh(±inf + iy) = ±inf + i
    (±0, or ±pi/4 for an infinite y); asinh(NaN ± i inf) = ±inf + i NaN (the real part's
    sign unspecified: glibc's is the NaN's sign bit); asinh(NaN ± i0) = NaN ± i0; other NaNs NaN."""
    b = f.b
    nan = _c(math.nan)
    ax, ay = fabs(f, x), fabs(f, y)
    large, tiny = _large_or_tiny(f, ax, ay)
    rx, usable, bb, den, num = _hard(f, ax, ay)
    ry = b.select(usable, m(f, "asin", bb), m(f, "atan2", num, den))
    re = b.select(large, b.fadd(log_abs(f, ax, ay), _c(_LN2)), b.select(tiny, ax, rx))
    im = b.select(large, m(f, "atan2", ay, ax), b.select(tiny, ay, ry))
    re, im = copysign(f, re, x), copysign(f, im, y)
    xn, yn = isnan(f, x), isnan(f, y)
    xi, yi = isinf(f, x), isinf(f, y)
    y0 = b.fcmp_ordered("==", y, _c(0.0))
    nan_re = b.select(xi, x, b.select(yi, copysign(f, _c(math.inf), x), nan))
    nan_im = b.select(xi, nan, b.select(yi, nan, b.select(y0, y, nan)))
    any_nan = b.or_(xn, yn)
    return b.select(any_nan, nan_re, re), b.select(any_nan, nan_im, im)


def _acos_d(f, x, y):
    """acos(x + iy), C99's cacos: real part in [0, pi], imaginary part of the sign
    opposite to y's (acos(conj z) = conj acos(z)); acos(±0 + i NaN) = pi/2 + i NaN;
    acos(±inf + i NaN) = NaN ∓ i inf (the sign unspecified: glibc's is the
    NaN's sign bit flipped), acos(NaN ± i inf) = NaN ∓ i inf; other NaNs NaN."""
    b = f.b
    nan, zero = _c(math.nan), _c(0.0)
    ax, ay = fabs(f, x), fabs(f, y)
    large, tiny = _large_or_tiny(f, ax, ay)
    ry, usable, bb, den, num = _hard(f, ay, ax)  # acos(z) = pi/2 - asin(z): asinh of (y, x)'s parts
    rx = b.select(usable, m(f, "acos", copysign(f, bb, x)), m(f, "atan2", den, copysign(f, num, x)))
    big_re = fabs(f, m(f, "atan2", y, x))
    big_im = b.fadd(log_abs(f, ax, ay), _c(_LN2))
    tiny_re = b.fsub(_c(_PIO2_HI), b.fsub(x, _c(_PIO2_LO)))
    re = b.select(large, big_re, b.select(tiny, tiny_re, rx))
    im = copysign(f, b.select(large, big_im, b.select(tiny, ay, ry)), b.fneg(y))
    one = b.and_(b.fcmp_ordered("==", x, _c(1.0)), b.fcmp_ordered("==", y, zero))
    re = b.select(one, zero, re)  # acos(1 ± i0) = +0 ∓ i0 exactly
    xn, yn = isnan(f, x), isnan(f, y)
    xi, yi = isinf(f, x), isinf(f, y)
    x0 = b.fcmp_ordered("==", x, zero)
    nan_re = b.select(b.and_(x0, b.not_(yi)), _c(_PIO2_HI), nan)
    nan_im = b.select(xi, copysign(f, _c(math.inf), b.fneg(y)), b.select(yi, b.fneg(y), nan))
    any_nan = b.or_(xn, yn)
    return b.select(any_nan, nan_re, re), b.select(any_nan, nan_im, im)


def _acosh_d(f, x, y):
    """acosh(x + iy) from acos (C99's cacosh): (|Im acos|, Re acos signed as y); acosh(±inf
    + i NaN) = inf + i NaN, acosh(NaN ± i inf) = inf + i NaN, acosh(±0 + i NaN) = NaN +
    i pi/2 (whatever the NaN's sign, as glibc)."""
    re, im = _acos_d(f, x, y)
    # NaN parts stay NaN (fabs, copysign keep them); a NaN y's sign does not sign pi/2
    return fabs(f, im), f.b.select(isnan(f, y), re, copysign(f, re, y))


def _recip_re(f, x, y):
    """Re(1/z) = x/(x² + y²) without overflow: (1/x)/(1 + (y/x)²) or (x/y)/y/(1 + (x/y)²);
    1/x = ±0 for an infinite x."""
    b = f.b
    one = _c(1.0)
    ax, ay = fabs(f, x), fabs(f, y)
    xbig = b.fcmp_ordered(">=", ax, ay)
    r1 = b.fdiv(y, x)
    v1 = b.fdiv(b.fdiv(one, x), fma(f, r1, r1, one))
    r2 = b.fdiv(x, y)
    v2 = b.fdiv(b.fdiv(r2, y), fma(f, r2, r2, one))
    return b.select(isinf(f, x), b.fdiv(one, x), b.select(xbig, v1, v2))


def _atanh_d(f, x, y):
    """atanh(x + iy), C99's catanh by Kahan's formulas: Re = log1p(4|x|/((|x|-1)² + y²))/4,
    Im = atan2(2|y|, (1-|x|)(1+|x|) - y²)/2, signed as x and y; atanh(±1 ± i0) = ±inf ±
    i0; atanh(±0 + i NaN) = ±0 + i NaN; an infinite part gives ±0 ± i pi/2 (±0 + i NaN
    for an infinite x with a NaN y); other NaNs NaN."""
    b = f.b
    one, two, zero, nan = _c(1.0), _c(2.0), _c(0.0), _c(math.nan)
    pio2 = _c(_PIO2_HI)
    ax, ay = fabs(f, x), fabs(f, y)
    large = b.or_(b.fcmp_ordered(">", ax, _c(_RECIP_EPS)), b.fcmp_ordered(">", ay, _c(_RECIP_EPS)))
    tiny = b.and_(b.fcmp_ordered("<", ax, _c(_SQRT_3_EPS_2)), b.fcmp_ordered("<", ay, _c(_SQRT_3_EPS_2)))
    ax1 = b.fcmp_ordered("==", ax, one)
    ay_eps = b.fcmp_ordered("<", ay, _c(_EPS))
    axm1 = b.fsub(ax, one)
    ss = b.fmul(axm1, axm1)
    ss = b.select(b.fcmp_ordered("<", ay, _c(_SQRT_MIN)), ss, fma(f, ay, ay, ss))
    rx = b.select(b.and_(ax1, ay_eps), b.fmul(b.fsub(_c(_LN2), m(f, "log", ay)), _c(0.5)),
                  b.fmul(m(f, "log1p", b.fdiv(b.fmul(_c(4.0), ax), ss)), _c(0.25)))
    d = b.fmul(b.fsub(one, ax), b.fadd(one, ax))
    ry = b.select(ax1, m(f, "atan2", two, b.fneg(ay)),
                  b.select(ay_eps, m(f, "atan2", b.fmul(two, ay), d),
                           m(f, "atan2", b.fmul(two, ay), b.fsub(d, b.fmul(ay, ay)))))
    ry = b.fmul(ry, _c(0.5))
    re = copysign(f, b.select(tiny, ax, rx), x)
    im = copysign(f, b.select(tiny, ay, ry), y)
    re = b.select(large, _recip_re(f, x, y), re)
    im = b.select(large, copysign(f, pio2, y), im)
    # exact cases first in C99's order: a real argument in [-1, 1], then ±0 + i(inf or NaN)
    real_in = b.and_(b.fcmp_ordered("==", y, zero), b.fcmp_ordered("<=", ax, one))
    re = b.select(real_in, m(f, "atanh", x), re)
    im = b.select(real_in, y, im)
    x0_bad = b.and_(b.fcmp_ordered("==", x, zero), b.not_(b.fcmp_ordered("<", ay, _c(math.inf))))
    xn, yn = isnan(f, x), isnan(f, y)
    xi, yi = isinf(f, x), isinf(f, y)
    nan_re = b.select(b.or_(xi, yi), copysign(f, zero, x), nan)
    nan_im = b.select(yi, copysign(f, pio2, y), nan)
    any_nan = b.and_(b.or_(xn, yn), b.not_(x0_bad))
    re = b.select(x0_bad, x, re)
    im = b.select(x0_bad, m(f, "atan", y), im)
    return b.select(any_nan, nan_re, re), b.select(any_nan, nan_im, im)


def _swapped(fn):
    """g(z) = -i fn(iz) for an odd, conjugate-symmetric fn: fn on (im, re), parts swapped."""
    def wrapped(f, x, y):
        r, i = fn(f, y, x)
        return i, r
    return wrapped


casinh = _in_double(_asinh_d)
casin = _in_double(_swapped(_asinh_d))
cacos = _in_double(_acos_d)
cacosh = _in_double(_acosh_d)
catanh = _in_double(_atanh_d)
catan = _in_double(_swapped(_atanh_d))

__all__ = ["cacos", "cacosh", "casin", "casinh", "catan", "catanh", "copysign", "fabs", "fma",
           "fsqrt", "isinf", "isnan", "log_abs", "m"]
