"""Complex values in generated code: a complex64/complex128 value is a pair of real
registers ``(re, im)`` of float32/float64 (a Python tuple in the emitter's environment),
stored interleaved as numpy's (re at element ``2*i``, im at ``2*i + 1`` of the parts'
float array: the loop vectoriser makes them an interleaved access group).

`emit_complex` lowers one node that has a complex result or a complex operand, with
numpy's arithmetic (not C99 Annex G's recovery of infinities): multiplication is
``(ar*br - ai*bi, ar*bi + ai*br)`` each part rounded as numpy's SIMD loop does it (a
fused multiply-add: ``fma(ar, br, -(ai*bi))``, ``fma(ar, bi, ai*br)``), division is
Smith's algorithm with numpy's branch for a zero divisor. The elementary functions
(exp, log, sqrt, pow, sign, the trigonometric and hyperbolic ones, expm1, log1p, and the
inverse functions of `svod/codegen/cplx_inv.py`) are their real formulas on svod's vector
math with C99 Annex G's special values (what glibc's cexp, clog, ..., which numpy calls,
return); finite values agree with numpy to a few ulps, not bit for bit. An op with no
lowering here raises `LoweringError` (the kernel runs in the numpy interpreter).
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from svod.codegen import cplx_inv
from svod.codegen.cplx_inv import copysign as _copysign
from svod.codegen.cplx_inv import fabs as _fabs
from svod.codegen.cplx_inv import fma as _fma
from svod.codegen.cplx_inv import isinf as _isinf
from svod.codegen.cplx_inv import log_abs as _log_abs
from svod.codegen.cplx_inv import m as _m
from svod.codegen.irbuild import LoweringError
from svod.dtype import DType
from svod.ir import Ops

I1 = ir.IntType(1)


def _ftype(dt: DType) -> ir.Type:
    return ir.DoubleType() if dt.real.itemsize == 8 else ir.FloatType()


def const(dt: DType, value) -> tuple[ir.Constant, ir.Constant]:
    """The (re, im) constants of a complex scalar, rounded to `dt`'s parts as numpy."""
    import numpy as np

    v = np.array(value).astype(dt.np)[()]
    ty = _ftype(dt)
    return ir.Constant(ty, float(v.real)), ir.Constant(ty, float(v.imag))


def mul(f, x, y):
    """numpy's complex product (its AVX2/AVX-512 loop: fmaddsub of a_re*b with a_im*b_rev)."""
    b = f.b
    (ar, ai), (br, bi) = x, y
    return _fma(f, ar, br, b.fneg(b.fmul(ai, bi))), _fma(f, ar, bi, b.fmul(ai, br))


def div(f, x, y):
    """numpy's complex quotient: Smith's algorithm; a zero divisor divides each part by
    |re| (inf or NaN parts, as numpy)."""
    b = f.b
    (ar, ai), (br, bi) = x, y
    one = ir.Constant(ar.type, 1.0)
    zero = ir.Constant(ar.type, 0.0)
    abr, abi = _fabs(f, br), _fabs(f, bi)
    first = b.fcmp_ordered(">=", abr, abi)
    both0 = b.and_(b.fcmp_ordered("==", abr, zero), b.fcmp_ordered("==", abi, zero))
    # |br| >= |bi|, not both zero
    rat1 = b.fdiv(bi, br)
    scl1 = b.fdiv(one, b.fadd(br, b.fmul(bi, rat1)))
    r1 = b.fmul(b.fadd(ar, b.fmul(ai, rat1)), scl1)
    i1 = b.fmul(b.fsub(ai, b.fmul(ar, rat1)), scl1)
    # zero divisor
    r0, i0 = b.fdiv(ar, abr), b.fdiv(ai, abr)
    # |br| < |bi| (or a NaN part)
    rat2 = b.fdiv(br, bi)
    scl2 = b.fdiv(one, b.fadd(bi, b.fmul(br, rat2)))
    r2 = b.fmul(b.fadd(b.fmul(ar, rat2), ai), scl2)
    i2 = b.fmul(b.fsub(b.fmul(ai, rat2), ar), scl2)
    re = b.select(first, b.select(both0, r0, r1), r2)
    im = b.select(first, b.select(both0, i0, i1), i2)
    return re, im


def cabs(f, x):
    """numpy's complex magnitude (its SIMD loop): parts' magnitudes, an infinite part makes
    both inf, then a NaN part both NaN; ``larger * sqrt(fma(r, r, 1))`` with ``r =
    smaller / larger`` (r = 0 where larger is 0 or inf)."""
    b = f.b
    re, im = _fabs(f, x[0]), _fabs(f, x[1])
    ty = re.type
    inf, nan = ir.Constant(ty, math.inf), ir.Constant(ty, math.nan)
    one, zero = ir.Constant(ty, 1.0), ir.Constant(ty, 0.0)
    rinf, iinf = _isinf(f, re), _isinf(f, im)
    im = b.select(rinf, inf, im)
    re = b.select(iinf, inf, re)
    rnan, inan = b.fcmp_unordered("uno", re, re), b.fcmp_unordered("uno", im, im)
    im = b.select(rnan, nan, im)
    re = b.select(inan, nan, re)
    gt = b.fcmp_ordered(">", re, im)
    larger, smaller = b.select(gt, re, im), b.select(gt, im, re)
    ok = b.not_(b.or_(b.fcmp_ordered("==", larger, zero), _isinf(f, larger)))
    ratio = b.select(ok, b.fdiv(smaller, b.select(ok, larger, one)), zero)
    name = "f64" if ty == ir.DoubleType() else "f32"
    root = f.call_intr(f"llvm.sqrt.{name}", ty, [_fma(f, ratio, ratio, one)])
    return b.fmul(root, larger)


def cexp(f, x):
    """exp(re) * (cos(im), sin(im)) with C99 Annex G's special cases (glibc's `cexp`,
    numpy's): im == 0 gives (exp(re), im); re = +inf: (inf * cos, inf * sin) signs, or
    (inf, im - im) for a non-finite im; re = -inf: (0, 0) signed by cos/sin, (0, ±0) for
    a non-finite im; re NaN: (NaN, im) for im == 0, else NaN."""
    b = f.b
    re, im = x
    ty = re.type
    zero, inf, nan = ir.Constant(ty, 0.0), ir.Constant(ty, math.inf), ir.Constant(ty, math.nan)
    e = _m(f, "exp", re)
    c, s = _m(f, "cos", im), _m(f, "sin", im)
    im_zero = b.fcmp_ordered("==", im, zero)
    im_fin = b.fcmp_ordered("<", _fabs(f, im), inf)
    re_inf = _isinf(f, re)
    re_nan = b.fcmp_unordered("uno", re, re)
    neg = b.fcmp_ordered("<", re, zero)
    # finite re (or any re when im == 0, NaN re below): the formula, im kept when it is 0;
    # above t = (max exponent - 1) ln 2, glibc scales cos/sin by exp(t) (up to twice) so a
    # part whose cos/sin is small stays finite, and past 3t gives max * cos/sin
    f64 = ty == ir.DoubleType()
    t = ir.Constant(ty, float(int((1023 if f64 else 127) * math.log(2))))  # glibc's int t
    et = _m(f, "exp", t)
    big_re, cc, ss = re, c, s
    for _ in range(2):
        over = b.fcmp_ordered(">", big_re, t)
        big_re = b.select(over, b.fsub(big_re, t), big_re)
        cc, ss = b.select(over, b.fmul(cc, et), cc), b.select(over, b.fmul(ss, et), ss)
    top = ir.Constant(ty, float(np_max(f64)))
    past = b.fcmp_ordered(">", big_re, t)
    ev = b.select(past, top, _m(f, "exp", big_re))
    out_re = b.select(im_zero, e, b.fmul(ev, cc))
    out_im = b.select(im_zero, im, b.fmul(ev, ss))
    cs = f.call_intr("llvm.copysign." + ("f64" if ty == ir.DoubleType() else "f32"), ty, [zero, im])
    # infinite re, finite nonzero im: copysign(value, cos), copysign(value, sin)
    val = b.select(neg, zero, inf)

    def sign_of(v, m):
        return f.call_intr("llvm.copysign." + ("f64" if ty == ir.DoubleType() else "f32"), ty, [v, m])
    inf_re = b.select(im_zero, val, b.select(im_fin, sign_of(val, c), b.select(neg, zero, inf)))
    inf_im = b.select(im_zero, im, b.select(im_fin, sign_of(val, s), b.select(neg, cs, b.fsub(im, im))))
    fin_bad = b.not_(im_fin)  # finite re, im inf or NaN: NaN + NaN j
    out_re = b.select(re_inf, inf_re, b.select(b.and_(fin_bad, b.not_(re_nan)), nan, out_re))
    out_im = b.select(re_inf, inf_im, b.select(b.and_(fin_bad, b.not_(re_nan)), nan, out_im))
    # NaN re: (NaN, im) when im == 0, else NaN
    out_re = b.select(re_nan, nan, out_re)
    out_im = b.select(re_nan, b.select(im_zero, im, nan), out_im)
    return out_re, out_im


def clog(f, x):
    """(log|z|, atan2(im, re)): C99's special values follow from those of log, hypot and
    atan2 (log(±0 + 0j) = -inf + (0 or pi)j, an infinite part gives +inf, ...); complex64's
    log|z| is computed in double precision."""
    b = f.b
    re, im = x
    if re.type == ir.FloatType():
        d = ir.DoubleType()
        mag = b.fptrunc(_log_abs(f, b.fpext(re, d), b.fpext(im, d)), re.type)
    else:
        mag = _log_abs(f, re, im)
    return mag, _m(f, "atan2", im, re)


def _csqrt(f, re, im):
    b = f.b
    ty = re.type
    zero, half, inf, nan = (ir.Constant(ty, v) for v in (0.0, 0.5, math.inf, math.nan))
    sq = lambda v: f.call_intr("llvm.sqrt." + ("f64" if ty == ir.DoubleType() else "f32"), ty, [v])  # noqa: E731
    d = _m(f, "hypot", re, im)
    pos = b.fcmp_ordered(">", re, zero)
    r1 = sq(b.fmul(half, b.fadd(d, re)))
    s1 = b.fmul(half, b.fdiv(im, r1))
    s2 = sq(b.fmul(half, b.fsub(d, re)))
    r2 = _fabs(f, b.fmul(half, b.fdiv(im, s2)))
    r, s_ = b.select(pos, r1, r2), b.select(pos, s1, s2)
    gen_re, gen_im = r, _copysign(f, s_, im)
    # im == 0: (sqrt(re), ±0) or (0, ±sqrt(-re)); re == 0: sqrt(|im|/2) (1 ± i)
    im0 = b.fcmp_ordered("==", im, zero)
    neg = b.fcmp_ordered("<", re, zero)
    z_re = b.select(neg, zero, _fabs(f, sq(re)))  # sqrt(-0.0) is -0.0: the root of -0 + 0j is +0
    z_im = b.select(neg, _copysign(f, sq(b.fneg(re)), im), _copysign(f, zero, im))
    re0 = b.fcmp_ordered("==", re, zero)
    t = sq(b.fmul(half, _fabs(f, im)))
    out_re = b.select(im0, z_re, b.select(re0, t, gen_re))
    out_im = b.select(im0, z_im, b.select(re0, _copysign(f, t, im), gen_im))
    # infinities and NaNs (C99): im = ±inf -> (inf, ±inf) whatever re; re = -inf -> (0 or NaN, ±inf);
    # re = +inf -> (inf, ±0 or NaN); NaN otherwise
    im_inf, re_inf = _isinf(f, im), _isinf(f, re)
    re_nan, im_nan = b.fcmp_unordered("uno", re, re), b.fcmp_unordered("uno", im, im)
    ninf_re = b.select(im_nan, nan, zero)
    ninf_im = b.select(im_nan, inf, _copysign(f, inf, im))
    pinf_im = b.select(im_nan, nan, _copysign(f, zero, im))
    out_re = b.select(re_inf, b.select(neg, ninf_re, inf), out_re)
    out_im = b.select(re_inf, b.select(neg, ninf_im, pinf_im), out_im)
    nan_case = b.and_(b.or_(re_nan, im_nan), b.not_(re_inf))
    out_re = b.select(nan_case, nan, out_re)
    out_im = b.select(nan_case, nan, out_im)
    out_re = b.select(im_inf, inf, out_re)
    out_im = b.select(im_inf, im, out_im)
    return out_re, out_im


def csqrt(f, x):
    """C99's csqrt (glibc's, numpy's): the principal root, real part >= 0, branch cut on
    the negative reals keeping the sign of im; special values as Annex G. complex64 is
    computed in double precision (no overflow of hypot(re, im) + re)."""
    b = f.b
    re, im = x
    if re.type == ir.FloatType():
        d = ir.DoubleType()
        r, i = _csqrt(f, b.fpext(re, d), b.fpext(im, d))
        return b.fptrunc(r, re.type), b.fptrunc(i, re.type)
    return _csqrt(f, re, im)


def csign(f, x):
    """numpy 2's complex sign: z / |z| (|z| = hypot); NaN for a NaN |z|, 0 for 0; an
    infinite |z|: (±1, 0) or (0, ±1) by the infinite part, NaN when both are."""
    b = f.b
    re, im = x
    ty = re.type
    zero, one, nan = ir.Constant(ty, 0.0), ir.Constant(ty, 1.0), ir.Constant(ty, math.nan)
    a = _m(f, "hypot", re, im)
    is_nan, is_inf = b.fcmp_unordered("uno", a, a), _isinf(f, a)
    is_zero = b.fcmp_ordered("==", a, zero)
    re_inf, im_inf = _isinf(f, re), _isinf(f, im)
    pm = lambda v: b.select(b.fcmp_ordered(">", v, zero), one, b.fneg(one))  # noqa: E731
    inf_re = b.select(re_inf, b.select(im_inf, nan, pm(re)), zero)
    inf_im = b.select(re_inf, b.select(im_inf, nan, zero), pm(im))
    out_re = b.select(is_nan, nan, b.select(is_inf, inf_re, b.select(is_zero, zero, b.fdiv(re, a))))
    out_im = b.select(is_nan, nan, b.select(is_inf, inf_im, b.select(is_zero, zero, b.fdiv(im, a))))
    return out_re, out_im


def _hyper(f, x, cosh: bool):
    """glibc's csinh (`cosh` False) / ccosh (True) — C99 Annex G's special values: finite
    parts by sinh(re)cos(im), cosh(re)sin(im) (or cosh·cos, sinh·sin), an im of 0 kept
    exactly (no inf·0 for a huge re); infinite re with finite nonzero im: infinities signed
    by cos/sin; the rest NaN as the standard's table."""
    b = f.b
    re, im = x
    ty = re.type
    zero, one, inf, nan = (ir.Constant(ty, v) for v in (0.0, 1.0, math.inf, math.nan))
    sh, ch = _m(f, "sinh", re), _m(f, "cosh", re)
    c, s = _m(f, "cos", im), _m(f, "sin", im)
    sre = _copysign(f, one, re)
    im0 = b.fcmp_ordered("==", im, zero)
    im_fin = b.fcmp_ordered("<", _fabs(f, im), inf)
    re0 = b.fcmp_ordered("==", re, zero)
    re_inf, re_nan = _isinf(f, re), b.fcmp_unordered("uno", re, re)
    if cosh:
        fin_re = b.select(im0, ch, b.fmul(ch, c))
        fin_im = b.select(im0, b.fmul(im, sre), b.fmul(sh, s))
        bad_re, bad_im = nan, b.select(re0, zero, nan)  # finite re, im inf/NaN
        inf_re = b.select(im0, inf, b.select(im_fin, _copysign(f, inf, c), inf))
        inf_im = b.select(im0, b.fmul(im, sre),
                          b.select(im_fin, b.fmul(_copysign(f, inf, s), sre), nan))
    else:
        fin_re = b.select(im0, sh, b.fmul(sh, c))
        fin_im = b.select(im0, im, b.fmul(ch, s))
        bad_re, bad_im = b.select(re0, _copysign(f, zero, re), nan), nan
        inf_re = b.select(im0, _copysign(f, inf, re),
                          b.select(im_fin, b.fmul(_copysign(f, inf, c), sre), inf))
        inf_im = b.select(im0, im, b.select(im_fin, _copysign(f, inf, s), nan))
    out_re = b.select(im_fin, fin_re, bad_re)
    out_im = b.select(im_fin, fin_im, bad_im)
    out_re = b.select(re_inf, inf_re, out_re)
    out_im = b.select(re_inf, inf_im, out_im)
    out_re = b.select(re_nan, nan, out_re)
    out_im = b.select(re_nan, b.select(im0, im, nan), out_im)
    return out_re, out_im


def ctanh(f, x):
    """glibc's ctanh (numpy's): (sinh·cosh, sin·cos) / (sinh² + cos²) for finite parts;
    for |re| > t (t = (max exponent − 1)·ln2/2) the real part is ±1 and the imaginary
    4 sin cos / exp(2|re|), in two steps so it underflows instead of overflowing; an
    infinite re gives ±1 + (±0, signed by sin·cos when |im| > 1, else by im); NaN parts
    NaN, except im = 0 (kept: tanh(NaN + 0j) = NaN + 0j)."""
    b = f.b
    re, im = x
    ty = re.type
    f64 = ty == ir.DoubleType()
    zero, one, four, nan = (ir.Constant(ty, v) for v in (0.0, 1.0, 4.0, math.nan))
    t = ir.Constant(ty, float(int((1023 if f64 else 127) * math.log(2) / 2)))
    eps = ir.Constant(ty, float(np_eps(f64)))
    s, c = _m(f, "sin", im), _m(f, "cos", im)
    sh, ch = _m(f, "sinh", re), _m(f, "cosh", re)
    den = b.select(b.fcmp_ordered(">", _fabs(f, sh), b.fmul(_fabs(f, c), eps)),
                   b.fadd(b.fmul(sh, sh), b.fmul(c, c)), b.fmul(c, c))
    fin_re, fin_im = b.fdiv(b.fmul(sh, ch), den), b.fdiv(b.fmul(s, c), den)
    # large |re|
    ax = _fabs(f, re)
    exp2t = _m(f, "exp", b.fmul(ir.Constant(ty, 2.0), t))
    big_im = b.fdiv(b.fmul(four, b.fmul(s, c)), exp2t)
    rest = b.fsub(ax, t)
    big_im = b.select(b.fcmp_ordered(">", rest, t), b.fdiv(big_im, exp2t),
                      b.fdiv(big_im, _m(f, "exp", b.fmul(ir.Constant(ty, 2.0), rest))))
    big = b.fcmp_ordered(">", ax, t)
    out_re = b.select(big, _copysign(f, one, re), fin_re)
    out_im = b.select(big, big_im, fin_im)
    # non-finite parts
    re_inf = _isinf(f, re)
    im_fin = b.fcmp_ordered("<", _fabs(f, im), ir.Constant(ty, math.inf))
    inf_im = b.select(b.and_(im_fin, b.fcmp_ordered(">", _fabs(f, im), one)),
                      _copysign(f, zero, b.fmul(s, c)), _copysign(f, zero, im))
    re_fin = b.fcmp_ordered("<", ax, ir.Constant(ty, math.inf))
    nonfin = b.not_(b.and_(re_fin, im_fin))
    im0 = b.fcmp_ordered("==", im, zero)
    re0 = b.fcmp_ordered("==", re, zero)  # tanh(±0 + inf/NaN j) = ±0 + NaN j (C23's, glibc's)
    nf_re = b.select(re_inf, _copysign(f, one, re), b.select(b.or_(im0, re0), re, nan))
    nf_im = b.select(re_inf, inf_im, b.select(im0, im, nan))
    return b.select(nonfin, nf_re, out_re), b.select(nonfin, nf_im, out_im)


def np_max(f64: bool) -> float:
    import numpy as np

    return np.finfo(np.float64 if f64 else np.float32).max


def np_eps(f64: bool) -> float:
    return 2.0 ** -52 if f64 else 2.0 ** -23


def _cmul_plain(b, x, y):
    """The textbook product (numpy's scalar `cmul` in npymath: no fma)."""
    (ar, ai), (br, bi) = x, y
    return b.fsub(b.fmul(ar, br), b.fmul(ai, bi)), b.fadd(b.fmul(ar, bi), b.fmul(ai, br))


def _cmul_c99(f, x, y):
    """C's complex product (libgcc's __muldc3, what glibc's cpow computes b·log(a) with):
    the textbook formula, and when both parts are NaN, Annex G's recovery of infinities
    (an infinite factor boxed to ±1/±0 with the other's NaNs zeroed, or an overflowed
    partial product's NaNs zeroed), times inf."""
    b = f.b
    (a_, b_), (c, d) = x, y
    ty = a_.type
    zero, one, inf = ir.Constant(ty, 0.0), ir.Constant(ty, 1.0), ir.Constant(ty, math.inf)
    ac, bd, ad, bc = b.fmul(a_, c), b.fmul(b_, d), b.fmul(a_, d), b.fmul(b_, c)
    xr, yi = b.fsub(ac, bd), b.fadd(ad, bc)
    isnan = lambda v: b.fcmp_unordered("uno", v, v)  # noqa: E731
    box = lambda v: _copysign(f, b.select(_isinf(f, v), one, zero), v)  # noqa: E731
    z0 = lambda v: b.select(isnan(v), _copysign(f, zero, v), v)  # noqa: E731
    zinf = b.or_(_isinf(f, a_), _isinf(f, b_))
    winf = b.or_(_isinf(f, c), _isinf(f, d))
    a1 = b.select(zinf, box(a_), a_)
    b1 = b.select(zinf, box(b_), b_)
    c1 = b.select(zinf, z0(c), c)
    d1 = b.select(zinf, z0(d), d)
    c2 = b.select(winf, box(c1), c1)
    d2 = b.select(winf, box(d1), d1)
    a2 = b.select(winf, z0(a1), a1)
    b2 = b.select(winf, z0(b1), b1)
    over = b.and_(b.not_(b.or_(zinf, winf)),
                  b.or_(b.or_(_isinf(f, ac), _isinf(f, bd)), b.or_(_isinf(f, ad), _isinf(f, bc))))
    a3, b3, c3, d3 = (b.select(over, z0(v), v) for v in (a2, b2, c2, d2))
    recalc = b.and_(b.and_(isnan(xr), isnan(yi)), b.or_(b.or_(zinf, winf), over))
    rx = b.fmul(inf, b.fsub(b.fmul(a3, c3), b.fmul(b3, d3)))
    ry = b.fmul(inf, b.fadd(b.fmul(a3, d3), b.fmul(b3, c3)))
    return b.select(recalc, rx, xr), b.select(recalc, ry, yi)


def cpow(f, x, y):
    """numpy's npy_cpow: b = 0 -> 1; a = 0 -> 0 for re(b) > 0, else NaN; a real integer
    exponent |n| < 100 -> repeated squaring with the textbook product (n = 1, 2, 3
    unrolled as numpy: a, a·a, a·(a·a)), 1/a^|n| by Smith's division for n < 0;
    otherwise exp(b·log(a))."""
    b = f.b
    (ar, ai), (br, bi) = x, y
    ty = ar.type
    zero, one, nan = ir.Constant(ty, 0.0), ir.Constant(ty, 1.0), ir.Constant(ty, math.nan)
    fty = "f64" if ty == ir.DoubleType() else "f32"
    nb = f.call_intr(f"llvm.trunc.{fty}", ty, [br])
    integral = b.and_(b.and_(b.fcmp_ordered("==", bi, zero), b.fcmp_ordered("==", nb, br)),
                      b.fcmp_ordered("<", _fabs(f, br), ir.Constant(ty, 100.0)))
    n = b.fptosi(b.select(integral, _fabs(f, br), zero), ir.IntType(32))
    # repeated squaring over the 7 bits of |n| < 100 (numpy's loop; extra squarings unused)
    aa, p = (one, zero), (ar, ai)
    for k in range(7):
        bit = b.icmp_unsigned("!=", b.and_(n, ir.Constant(ir.IntType(32), 1 << k)), ir.Constant(ir.IntType(32), 0))
        m = _cmul_plain(b, aa, p)
        aa = (b.select(bit, m[0], aa[0]), b.select(bit, m[1], aa[1]))
        if k < 6:
            p = _cmul_plain(b, p, p)
    inv = div(f, (one, zero), aa)
    negn = b.fcmp_ordered("<", br, zero)
    ip = (b.select(negn, inv[0], aa[0]), b.select(negn, inv[1], aa[1]))
    sq = _cmul_plain(b, x, x)
    cube = _cmul_plain(b, x, sq)
    is1, is2, is3 = (b.fcmp_ordered("==", br, ir.Constant(ty, v)) for v in (1.0, 2.0, 3.0))
    ip = tuple(b.select(is1, xv, b.select(is2, sv, b.select(is3, cv, iv)))
               for xv, sv, cv, iv in zip(x, sq, cube, ip))
    lg = clog(f, x)
    gen = cexp(f, _cmul_c99(f, y, lg))
    out = tuple(b.select(integral, iv, gv) for iv, gv in zip(ip, gen))
    a0 = b.and_(b.fcmp_ordered("==", ar, zero), b.fcmp_ordered("==", ai, zero))
    zpos = b.fcmp_ordered(">", br, zero)
    out = tuple(b.select(a0, b.select(zpos, zero, nan), o) for o in out)
    b0 = b.and_(b.fcmp_ordered("==", br, zero), b.fcmp_ordered("==", bi, zero))
    return b.select(b0, one, out[0]), b.select(b0, zero, out[1])


_INVERSE = {Ops.ASIN: cplx_inv.casin, Ops.ACOS: cplx_inv.cacos, Ops.ATAN: cplx_inv.catan,
            Ops.ASINH: cplx_inv.casinh, Ops.ACOSH: cplx_inv.cacosh, Ops.ATANH: cplx_inv.catanh}


def emit_complex(f, op, dt: DType, arg, xs: list, src_dts: list[DType], cast_real):
    """One node with a complex result or operand. `cast_real(x, src, dst)` is the real
    cast of svod/codegen/lower.py (for real -> complex casts). Raises `LoweringError`
    for the ops not lowered (see the module docstring)."""
    b = f.b
    if op is Ops.CONST:
        return const(dt, arg)
    sdt = src_dts[0] if src_dts else dt
    if op is Ops.CAST:
        x = xs[0]
        if sdt.is_complex and dt.is_complex:
            return cast_real(x[0], sdt.real, dt.real), cast_real(x[1], sdt.real, dt.real)
        if dt.is_complex:  # a real value: imaginary part +0.0
            return cast_real(x, sdt, dt.real), ir.Constant(_ftype(dt), 0.0)
        raise LoweringError(f"CAST {sdt} -> {dt} (the frontend takes the real part first)")
    if op is Ops.REAL:
        return xs[0][0]
    if op is Ops.IMAG:
        return xs[0][1]
    if op is Ops.CONJ:
        return xs[0][0], b.fneg(xs[0][1])
    if op is Ops.COMPLEX:
        return xs[0], xs[1]
    if op is Ops.WHERE:
        c, x, y = xs
        return b.select(c, x[0], y[0]), b.select(c, x[1], y[1])
    if op is Ops.ISNAN:
        (re, im), = xs
        return b.or_(b.fcmp_unordered("uno", re, re), b.fcmp_unordered("uno", im, im))
    if op is Ops.ISINF:
        (re, im), = xs
        return b.or_(_isinf(f, re), _isinf(f, im))
    if op is Ops.CMPEQ:
        (ar, ai), (br, bi) = xs
        return b.and_(b.fcmp_ordered("==", ar, br), b.fcmp_ordered("==", ai, bi))
    if op is Ops.CMPNE:
        (ar, ai), (br, bi) = xs
        return b.or_(b.fcmp_unordered("!=", ar, br), b.fcmp_unordered("!=", ai, bi))
    if op is Ops.ABS:
        return cabs(f, xs[0])
    if op is Ops.EXP:
        return cexp(f, xs[0])
    if op is Ops.LOG:
        return clog(f, xs[0])
    if op is Ops.SQRT:
        return csqrt(f, xs[0])
    if op is Ops.SIGN:
        return csign(f, xs[0])
    if op is Ops.SINH or op is Ops.COSH:
        return _hyper(f, xs[0], op is Ops.COSH)
    if op is Ops.SIN:  # -i sinh(i z); glibc's csin gives +inf for an infinite im with a non-finite re
        re, im = xs[0]
        u, v = _hyper(f, (b.fneg(im), re), False)
        odd = b.and_(_isinf(f, im), b.fcmp_unordered("uno", b.fsub(re, re), b.fsub(re, re)))
        return v, b.select(odd, ir.Constant(re.type, math.inf), b.fneg(u))
    if op is Ops.TANH:
        return ctanh(f, xs[0])
    if op is Ops.EXPM1:  # numpy's nc_expm1: (expm1(re) cos(im) - 2 sin²(im/2), exp(re) sin(im))
        re, im = xs[0]
        a = _m(f, "sin", b.fmul(im, ir.Constant(im.type, 0.5)))
        out_re = b.fsub(b.fmul(_m(f, "expm1", re), _m(f, "cos", im)), b.fmul(ir.Constant(im.type, 2.0), b.fmul(a, a)))
        return out_re, b.fmul(_m(f, "exp", re), _m(f, "sin", im))
    if op is Ops.LOG1P:  # numpy's nc_log1p: (log(hypot(re + 1, im)), atan2(im, re + 1))
        re, im = xs[0]
        r1 = b.fadd(re, ir.Constant(re.type, 1.0))
        return _m(f, "log", _m(f, "hypot", r1, im)), _m(f, "atan2", im, r1)
    if op is Ops.ROUND:  # each part, half to even (numpy's rint of both)
        name = "llvm.roundeven." + ("f64" if xs[0][0].type == ir.DoubleType() else "f32")
        return tuple(f.call_intr(name, p.type, [p]) for p in xs[0])
    if op is Ops.COS:  # cosh(i z)
        return _hyper(f, (b.fneg(xs[0][1]), xs[0][0]), True)
    if op in _INVERSE:
        return _INVERSE[op](f, xs[0])
    if op is Ops.NEG:
        return b.fneg(xs[0][0]), b.fneg(xs[0][1])
    if op is Ops.ADD:
        (ar, ai), (br, bi) = xs
        return b.fadd(ar, br), b.fadd(ai, bi)
    if op is Ops.SUB:
        (ar, ai), (br, bi) = xs
        return b.fsub(ar, br), b.fsub(ai, bi)
    if op is Ops.MUL:
        return mul(f, xs[0], xs[1])
    if op is Ops.DIV:
        return div(f, xs[0], xs[1])
    if op is Ops.POW:
        return cpow(f, xs[0], xs[1])
    raise LoweringError(f"no lowering for {op!r} on {dt} (complex)")


__all__ = ["const", "div", "emit_complex", "mul"]
