"""The polynomial implementations of svod's vector math (`svod.codegen.vecmath`): range
reduction and near-minimax polynomials emitted as IR on float/double scalars or vectors,
one emitter per function (`_EMITTERS`, name -> emitter on an `_Em`). Straight-line code
(selects, no branches) except the libm fallback of sin/cos for huge arguments.

Coefficients: ``mpmath.chebyfit`` (50 digits) of the reduced functions noted beside each
table, degree chosen so the fit error is < 1/8 ulp of the result.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from svod.ddmath import ERFC_MID as _ERFC_MID
from svod.ddmath import ERFC_TAIL as _ERFC_TAIL
from svod.ddmath import ERFC_TAIL_M as _ERFC_TAIL_M

# Coefficients, lowest degree first (see the module docstring for their provenance).
_EXP32 = (0.5, 0.16666575985420823, 0.041666553362644264, 0.00836334581098711, 0.0013926391896140632)
_EXP64 = (
    0.5, 0.1666666666666667, 0.04166666666666667, 0.008333333333325973, 0.0013888888888883633,
    0.0001984126987538548, 2.480158732595111e-05, 2.7557254685728803e-06, 2.755727313289604e-07,
    2.5105513541847086e-08, 2.0914898727175524e-09,
)
# log1p(f) = f - f^2/2 + f^3*P(f), f in [sqrt(.5)-1, sqrt(2)-1]
_LOG32 = (
    0.3333333112188015, -0.2499999662693948, 0.2000073050385224, -0.16667850972851767,
    0.1424855126436147, -0.12424037717650198, 0.1168907113745787, -0.11494546612890218,
    0.0698070195866497,
)
_LOG64 = (
    0.666666666666667, 0.39999999999893016, 0.2857142862890348, 0.22222210659293473,
    0.18182923591453207, 0.1533058183634364, 0.14630465387106195,
)
# float32 tanh (`_tanh32`): 2 tanh(x/2) = x + x z A(z) / Q(z), z = x^2, Q(0) = 1, |x| <= 9.02:
# a (4, 3) rational fit of tanh(u)/u on u in [0, 4.51] for relative error (linearised
# Remez with Lawson weights on mpmath values, 7.3e-10 = 0.012 ulp), rewritten in z = 4u^2.
_TANH32_A = (-0.08333333179604663, -0.001312406483229565, -3.5018634381850107e-06, -4.5474873930497437e-11)
_TANH32_Q = (1.0, 0.1157488656809666, 0.00149786431526771, 3.650522368767145e-06)
_TANH32_CLAMP = 9.02  # tanh(x) rounds to 1.0f beyond 9.011
_TANH64 = (
    -0.3333333333333333, 0.13333333333333042, -0.05396825396789699, 0.021869488519008305,
    -0.008863235103240878, 0.0035921217511549622, -0.0014557754120478055, 0.0005896606577757043,
    -0.0002375906496055562, 9.257116129556769e-05, -3.12011014257974e-05, 6.485163482793113e-06,
)
_ERF64S = (
    1.1283791670955126, -0.37612638903183543, 0.11283791670945006, -0.02686617064323777,
    0.0052239776071164225, -0.0008548325975389692, 0.00012055294904839707, -1.492473690741966e-05,
    1.6447424703317362e-06, -1.6208483801871705e-07, 1.3720064546777686e-08, -7.795898827002142e-10,
)
_ERF32S = (
    1.1283791658483509, -0.37612626666720334, 0.11283594715160218, -0.026854212010626412,
    0.005189087423433974, -0.000801686428716587, 7.875875062685488e-05,
)
_SIN64 = (
    -0.16666666666666666, 0.008333333333333331, -0.00019841269841265017, 2.755731921930192e-06,
    -2.5052106219521895e-08, 1.6058529572267877e-10, -7.586576588171073e-13,
)
_SIN32 = (-0.16666666663832763, 0.008333331865959415, -0.00019840082012765537, 2.7249314054698804e-06)
_COS64 = (
    0.041666666666666664, -0.0013888888888888887, 2.4801587301584618e-05, -2.7557319221382114e-07,
    2.087675578389404e-09, -1.1470459749675607e-11, 4.745804889760674e-14,
)
_COS32 = (0.0416666666643024, -0.0013888887664713619, 2.4800596435621998e-05, -2.7300448619488353e-07)
_ERF64L = (
    -1.265511801958552, 0.9999862655011019, 0.3752741584913511, 0.07993831690603778,
    -0.05674473836840475, -0.32854347596971395, 0.7985969910676389, -3.2983909530185764,
    9.866923250290387, -22.161946760128437, 39.54755119139804, -53.64517746839403, 52.72124094109795,
    -36.1518665696749, 16.437400600475563, -4.472316953586751, 0.5535888611630921,
)
_ERF32L = (
    -1.2651050350577273, 0.9926011375071658, 0.43314308654645584, -0.1728839506505007,
    0.5960435792699781, -1.2249800055124491, 0.7922780386201381, -0.10873120406464827,
    -0.042720233380725364,
)
_LOGTAIL = (
    0.3333333333333333, -0.25, 0.2, -0.1666666666666126, 0.1428571428570924, -0.1250000002211727,
    0.1111111113175443, -0.099999630839474, 0.09090874635124056, -0.08360280874161401,
    0.07717459173919658,
)
_POW_TABLE = (
    (1.3862818939058916, -0.32662526674393694, -1.0728777576151605e-17),
    (1.3287200038014984, -0.28421607566962925, 2.658969190103033e-17),
    (1.275747766994898, -0.24353249061347718, -5.280693187559986e-18),
    (1.2268372999367614, -0.2044395570480919, 1.2221144986023759e-17),
    (1.1815386834319943, -0.16681755805848775, -6.06563911793993e-18),
    (1.139466081743295, -0.13055980334860492, 7.6830362890547e-19),
    (1.1002867253758515, -0.09557080527114942, -3.284841465513954e-18),
    (1.0637120912017555, -0.06176476332731531, 2.765089422698e-18),
    (1.02949078508078, -0.029064296577051375, -1.1983317081708811e-18),
    (1.0, 0.0, 0.0),
    (0.9365856447056154, 0.06551430937811278, 6.3665140373316576e-18),
    (0.8847928755920341, 0.12240170024463733, 2.1486542856185666e-19),
    (0.8384281710637311, 0.17622636499735597, -4.057594802824411e-18),
    (0.796680699691, 0.2273013082049316, -1.2285948487235518e-17),
    (0.7588934637121784, 0.27589387545403277, -9.082333538433263e-18),
    (0.7245284687611634, 0.32223422363706977, 2.3881285819334213e-17),
)
_PIO2 = (1.5707950592041016, 1.2675900507019833e-06, 7.443542310303641e-13, 5.170182981794105e-19)
_LN2 = (0.6931471803691238, 1.9082149292705877e-10, 0.693115234375, 3.1946184945309415e-05)



# ------------------------------------------------------------------------- emitter


def _is_vec(ty: ir.Type) -> bool:
    return isinstance(ty, ir.VectorType)


def _suffix(ty: ir.Type) -> str:
    st = ty.element if _is_vec(ty) else ty
    s = "f64" if isinstance(st, ir.DoubleType) else "f32"
    return f"v{ty.count}{s}" if _is_vec(ty) else s


def _intrinsic(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    # NOTE: declare_intrinsic mangles only some names and builds wrong arities (FACTS.md).
    full = f"{name}.{_suffix(args[0])}"
    fn = module.globals.get(full)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), full)
    return fn


class _Em:
    """Builder helper for one float type (scalar or vector): splatted constants, math ops."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type):
        self.b, self.ty = b, ty
        self.n = ty.count if _is_vec(ty) else None
        st = ty.element if self.n else ty
        self.is64 = isinstance(st, ir.DoubleType)
        self.st = st
        self.ist = ir.IntType(64 if self.is64 else 32)
        self.ity = ir.VectorType(self.ist, self.n) if self.n else self.ist
        self.mant = 52 if self.is64 else 23
        self.bias = 1023 if self.is64 else 127
        self.module = b.module

    # constants
    def c(self, v: float) -> ir.Constant:
        k = ir.Constant(self.st, float(v))
        return ir.Constant(self.ty, [k] * self.n) if self.n else k

    def ci(self, v: int) -> ir.Constant:
        k = ir.Constant(self.ist, int(v))
        return ir.Constant(self.ity, [k] * self.n) if self.n else k

    def other(self, is64: bool) -> _Em:
        st = ir.DoubleType() if is64 else ir.FloatType()
        return _Em(self.b, ir.VectorType(st, self.n) if self.n else st)

    # arithmetic: plain IR ops (no fast-math flags: TwoSum and NaN checks must survive)
    def add(self, a, b): return self.b.fadd(a, b)
    def sub(self, a, b): return self.b.fsub(a, b)
    def mul(self, a, b): return self.b.fmul(a, b)
    def div(self, a, b): return self.b.fdiv(a, b)
    def neg(self, a): return self.b.fneg(a)

    def call(self, name: str, *args):
        return self.b.call(_intrinsic(self.module, name, self.ty, [self.ty] * len(args)), args)

    def fma(self, a, b, c):
        """a*b+c, fused where the target has FMA (llvm.fmuladd); never needed exact."""
        return self.call("llvm.fmuladd", a, b, c)

    def fma_exact(self, a, b, c):
        """a*b+c with one rounding (llvm.fma: a libm call on targets without FMA)."""
        return self.call("llvm.fma", a, b, c)

    def poly(self, x, coeffs) -> ir.Value:
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(k))
        return acc

    def abs(self, a): return self.call("llvm.fabs", a)
    def rint(self, a): return self.call("llvm.rint", a)
    def floor(self, a): return self.call("llvm.floor", a)
    def copysign(self, mag, sgn): return self.call("llvm.copysign", mag, sgn)

    # comparisons (ordered: false on NaN) and selects
    def lt(self, a, b): return self.b.fcmp_ordered("<", a, b)
    def gt(self, a, b): return self.b.fcmp_ordered(">", a, b)
    def ge(self, a, b): return self.b.fcmp_ordered(">=", a, b)
    def eq(self, a, b): return self.b.fcmp_ordered("==", a, b)
    def ne(self, a, b): return self.b.fcmp_unordered("!=", a, b)
    def isnan(self, a): return self.b.fcmp_unordered("uno", a, a)
    def sel(self, c, a, b): return self.b.select(c, a, b)
    def or_(self, a, b): return self.b.or_(a, b)
    def and_(self, a, b): return self.b.and_(a, b)

    # integer views
    def bits(self, a): return self.b.bitcast(a, self.ity)
    def fl(self, i): return self.b.bitcast(i, self.ty)
    def toi(self, a): return self.b.fptosi(a, self.ity)
    def tof(self, i): return self.b.sitofp(i, self.ty)

    def two_sum(self, a, b):
        s = self.add(a, b)
        bb = self.sub(s, a)
        err = self.add(self.sub(a, self.sub(s, bb)), self.sub(b, bb))
        return s, err

    def lookup(self, idx, values) -> ir.Value:
        """values[idx] for a small power-of-two table: a select tree on the index bits."""
        level = [self.c(v) for v in values]
        bit = 0
        while len(level) > 1:
            m = self.b.icmp_unsigned("!=", self.b.and_(idx, self.ci(1 << bit)), self.ci(0))
            level = [self.sel(m, level[k + 1], level[k]) for k in range(0, len(level), 2)]
            bit += 1
        return level[0]


# ------------------------------------------------------------------------- exp family


def _scale(E: _Em, y, ni):
    """y * 2**ni for ni in [-1100, 1050]: two exact power-of-two factors, so results that
    overflow give inf and results that underflow round once into subnormals."""
    b = E.b
    n1 = b.ashr(ni, E.ci(1))
    n2 = b.sub(ni, n1)
    s1 = E.fl(b.shl(b.add(n1, E.ci(E.bias)), E.ci(E.mant)))
    s2 = E.fl(b.shl(b.add(n2, E.ci(E.bias)), E.ci(E.mant)))
    return E.mul(E.mul(y, s1), s2)


def _exp_reduce(E: _Em, x, xlo=None):
    """Clamp + Cody-Waite: returns (ni, p) with exp(x + xlo) = 2**ni * (1 + p)."""
    lo, hi = (-746.0, 710.0) if E.is64 else (-104.0, 89.0)
    xc = E.sel(E.gt(x, E.c(hi)), E.c(hi), x)
    xc = E.sel(E.lt(xc, E.c(lo)), E.c(lo), xc)
    clamped = E.ne(xc, x)  # true for NaN too
    xs = E.sel(clamped, E.sel(E.isnan(x), E.c(0.0), xc), x)
    n = E.rint(E.mul(xs, E.c(1.4426950408889634)))
    ln2hi, ln2lo = (_LN2[0], _LN2[1]) if E.is64 else (_LN2[2], _LN2[3])
    r = E.fma(E.neg(n), E.c(ln2hi), xs)
    r = E.fma(E.neg(n), E.c(ln2lo), r)
    if xlo is not None:
        r = E.add(r, E.sel(clamped, E.c(0.0), xlo))
    coeffs = _EXP64 if E.is64 else _EXP32
    p = E.fma(E.mul(r, r), E.poly(r, coeffs), r)
    return E.toi(n), p


def _exp(E: _Em, x, xlo=None):
    ni, p = _exp_reduce(E, x, xlo)
    y = _scale(E, E.add(p, E.c(1.0)), ni)
    return E.sel(E.isnan(x), x, y)  # exp(nan) = nan; clamping made ±inf give inf / 0


def _expm1(E: _Em, x):
    ni, p = _exp_reduce(E, x)
    e = _scale(E, E.add(p, E.c(1.0)), ni)
    b = E.b
    # NOTE: for |n| <= 1 the subtraction of 1 cancels: use the exact forms instead.
    r = E.sub(e, E.c(1.0))
    r = E.sel(b.icmp_signed("==", ni, E.ci(-1)), E.fma(p, E.c(0.5), E.c(-0.5)), r)
    r = E.sel(b.icmp_signed("==", ni, E.ci(1)), E.fma(p, E.c(2.0), E.c(1.0)), r)
    r = E.sel(b.icmp_signed("==", ni, E.ci(0)), p, r)
    r = E.sel(E.eq(x, E.c(0.0)), x, r)  # keeps -0.0
    return E.sel(E.isnan(x), x, r)


def _sigmoid(E: _Em, x):
    # e = exp(-|x|) never overflows; x < 0 uses e/(1+e) so tiny results stay accurate.
    e = _exp(E, E.neg(E.abs(x)))
    r = E.div(E.c(1.0), E.add(E.c(1.0), e))
    return E.sel(E.ge(x, E.c(0.0)), r, E.mul(e, r))


def _tanh32(E: _Em, x):
    """float32 tanh, one branch-free form: t = 2 tanh(x/2) by a rational, then tanh(x) =
    t / (1 + t^2/4). The half-angle step damps t's error by (1 - th^2)/(1 + th^2), th =
    tanh(x/2), where the result nears 1 (a direct rational x P/Q carried its roundings into
    results next to 1: 5.7 ulp); small x get t = x + (a small correction), so tiny and
    subnormal x give x exactly. ±inf clamp to ±1, NaN propagates (ordered compares)."""
    xc = E.sel(E.gt(x, E.c(_TANH32_CLAMP)), E.c(_TANH32_CLAMP), x)
    xc = E.sel(E.lt(xc, E.c(-_TANH32_CLAMP)), E.c(-_TANH32_CLAMP), xc)
    z = E.mul(xc, xc)
    t = E.fma(E.mul(xc, z), E.div(E.poly(z, _TANH32_A), E.poly(z, _TANH32_Q)), xc)
    r = E.div(t, E.fma(E.mul(t, E.c(0.25)), t, E.c(1.0)))
    # NOTE: tanh is odd: copysign restores -0.0 (x z A(z) is +0.0 for x = -0.0)
    return E.copysign(r, x)


def _tanh(E: _Em, x):
    if not E.is64:
        return _tanh32(E, x)
    ax = E.abs(x)
    z = E.mul(x, x)
    small = E.fma(E.mul(x, z), E.poly(z, _TANH64), x)
    e = _exp(E, E.add(ax, ax))
    big = E.sub(E.c(1.0), E.div(E.c(2.0), E.add(e, E.c(1.0))))
    # NOTE: tanh is odd: copysign restores -0.0 (the fma gives +0.0 for x = -0.0)
    return E.copysign(E.sel(E.lt(ax, E.c(0.625)), small, big), x)


# ------------------------------------------------------------------------- log family


def _log_parts(E: _Em, x):
    """x > 0 finite: returns (k, f) with x = 2**k * (1 + f), 1 + f in [sqrt(1/2), sqrt(2))."""
    b = E.b
    tiny = 2.0 ** (-1022 if E.is64 else -126)
    sub = E.lt(x, E.c(tiny))
    xs = E.sel(sub, E.mul(x, E.c(2.0 ** E.mant)), x)
    kadj = E.sel(sub, E.c(-float(E.mant)), E.c(0.0))
    # NOTE: musl's trick: bias the bits so the exponent split lands at sqrt(1/2).
    sq = 0x3FE6A09E667F3BCD if E.is64 else 0x3F3504F3
    one = 0x3FF0000000000000 if E.is64 else 0x3F800000
    ix = b.add(E.bits(xs), E.ci(one - sq))
    k = b.sub(b.ashr(ix, E.ci(E.mant)), E.ci(E.bias))
    ix = b.add(b.and_(ix, E.ci((1 << E.mant) - 1)), E.ci(sq))
    f = E.sub(E.fl(ix), E.c(1.0))
    return E.add(E.tof(k), kadj), f


def _log_core(E: _Em, x, corr=None):
    """log(x) for finite x > 0 (specials are the caller's); ``corr`` is a small term added
    with the low-order part (log1p's rounding correction)."""
    k, f = _log_parts(E, x)
    if E.is64:
        # fdlibm: s = f/(2+f), log1p(f) = f - (hfsq - s*(hfsq + R(s^2)))
        s = E.div(f, E.add(E.c(2.0), f))
        z = E.mul(s, s)
        R = E.mul(z, E.poly(z, _LOG64))
        hfsq = E.mul(E.c(0.5), E.mul(f, f))
        lo = E.fma(k, E.c(_LN2[1]), E.mul(s, E.add(hfsq, R)))
        if corr is not None:
            lo = E.add(lo, corr)
        return E.fma(k, E.c(_LN2[0]), E.sub(f, E.sub(hfsq, lo)))
    z = E.mul(f, f)
    y = E.mul(E.mul(f, z), E.poly(f, _LOG32))
    y = E.fma(k, E.c(_LN2[3]), y)
    if corr is not None:
        y = E.add(y, corr)
    y = E.fma(z, E.c(-0.5), y)
    return E.fma(k, E.c(_LN2[2]), E.add(f, y))


def _log_specials(E: _Em, x, r, zero_at=0.0):
    r = E.sel(E.eq(x, E.c(math.inf)), x, r)
    r = E.sel(E.eq(x, E.c(zero_at)), E.c(-math.inf), r)
    r = E.sel(E.lt(x, E.c(zero_at)), E.c(math.nan), r)
    return E.sel(E.isnan(x), x, r)


def _log(E: _Em, x):
    return _log_specials(E, x, _log_core(E, x))


def _log1p(E: _Em, x):
    u = E.add(x, E.c(1.0))
    # fdlibm log1p: u = 1 + x rounded; c/u corrects log(u) back to log(1 + x).
    ge2 = E.ge(u, E.c(2.0))
    c = E.sel(ge2, E.sub(E.c(1.0), E.sub(u, x)), E.sub(x, E.sub(u, E.c(1.0))))
    r = _log_core(E, u, E.div(c, u))
    r = E.sel(E.eq(u, E.c(1.0)), x, r)  # tiny x (and ±0): log1p(x) = x
    r = E.sel(E.eq(u, E.c(math.inf)), E.c(math.inf), r)
    return _log_specials(E, x, r, zero_at=-1.0)


# ------------------------------------------------------------------------- erf, sin/cos (f64)


def _erf64(E: _Em, x, coarse: bool):
    """erf in float64; ``coarse`` selects the shorter polynomials that suffice for f32."""
    small_c, large_c, top = (_ERF32S, _ERF32L, 4.0) if coarse else (_ERF64S, _ERF64L, 6.0)
    ax = E.abs(x)
    z = E.mul(x, x)
    small = E.mul(x, E.poly(z, small_c))
    axc = E.sel(E.gt(ax, E.c(top)), E.c(top), ax)
    # erfc(a) = t*exp(P(t) - a^2), t = 2/(2+a) (Numerical Recipes' form, own fit)
    t = E.div(E.c(2.0), E.add(E.c(2.0), axc))
    w = E.sub(E.poly(t, large_c), E.mul(axc, axc))
    big = E.copysign(E.sub(E.c(1.0), E.mul(t, _exp(E, w))), x)
    return E.sel(E.lt(ax, E.c(1.0)), small, big)


_SINCOS_LIMIT = 4.0e9  # j = rint(x*2/pi) < 2**32: the 20-bit pieces of pi/2 multiply exactly


def _sincos64(E: _Em, x, want_cos: bool, coarse: bool):
    """sin or cos in float64; Cody-Waite with pi/2 in four pieces (exact for |x| < 4e9)."""
    b = E.b
    fin = E.lt(E.abs(x), E.c(math.inf))
    xs = E.sel(fin, x, E.c(0.0))
    j = E.rint(E.mul(xs, E.c(2.0 / math.pi)))
    nj = E.neg(j)
    r = xs
    for piece in _PIO2:
        r = E.fma(nj, E.c(piece), r)
    z = E.mul(r, r)
    s = E.fma(E.mul(r, z), E.poly(z, _SIN32 if coarse else _SIN64), r)
    c = E.fma(E.mul(z, z), E.poly(z, _COS32 if coarse else _COS64), E.fma(z, E.c(-0.5), E.c(1.0)))
    q = E.sub(j, E.mul(E.floor(E.mul(j, E.c(0.25))), E.c(4.0)))  # j mod 4, exact
    qi = E.toi(q)
    if want_cos:
        qi = b.add(qi, E.ci(1))
    odd = b.icmp_unsigned("!=", b.and_(qi, E.ci(1)), E.ci(0))
    negate = b.icmp_unsigned("!=", b.and_(qi, E.ci(2)), E.ci(0))
    v = E.sel(odd, c, s)
    v = E.sel(negate, E.neg(v), v)
    if not want_cos:
        v = E.sel(E.eq(x, E.c(0.0)), x, v)  # sin(-0.0) = -0.0
    return E.sel(fin, v, E.c(math.nan))


def _libm_lane(b: ir.IRBuilder, xi, libm_name: str):
    """``libm_name`` (the double function) on one float/double value."""
    dbl = ir.DoubleType()
    fn = b.module.globals.get(libm_name) or ir.Function(
        b.module, ir.FunctionType(dbl, [dbl]), libm_name)
    if isinstance(xi.type, ir.DoubleType):
        return b.call(fn, [xi])
    return b.fptrunc(b.call(fn, [b.fpext(xi, dbl)]), xi.type)


def _libm_fallback(E: _Em, x, fast, mask, libm_name: str):
    """``fast`` with the lanes where ``mask`` holds recomputed by the libm double function
    ``libm_name``, in a branch taken only when some lane needs it (huge sin/cos arguments).

    Vector types: the slow path loops over the set mask bits (cttz) through a stack slot,
    so the code stays small for every width. Scalar types: one branch."""
    b = E.b
    if not E.n:
        cur = b.block
        slow, done = b.append_basic_block("slow"), b.append_basic_block("done")
        b.cbranch(mask, slow, done)
        b.position_at_end(slow)
        exact = _libm_lane(b, x, libm_name)
        return _join(b, done, E.ty, fast, cur, exact, slow)
    n = E.n
    itn = ir.IntType(n)
    i32 = ir.IntType(32)
    bitsv = b.bitcast(mask, itn)
    anyset = b.icmp_unsigned("!=", bitsv, ir.Constant(itn, 0))
    cttz = b.module.globals.get(f"llvm.cttz.i{n}") or ir.Function(
        b.module, ir.FunctionType(itn, [itn, ir.IntType(1)]), f"llvm.cttz.i{n}")
    # NOTE: the slot goes in the entry block: a static alloca, not one per execution once
    # this function is inlined into a loop.
    with b.goto_entry_block():
        slot = b.alloca(ir.ArrayType(E.st, n), name="lanes")
    elem = 8 if E.is64 else 4
    cur = b.block
    slow = b.append_basic_block("slow")
    lane = b.append_basic_block("lane")
    gather = b.append_basic_block("gather")
    done = b.append_basic_block("done")
    b.cbranch(anyset, slow, done)
    b.position_at_end(slow)
    b.store(fast, b.bitcast(slot, ir.PointerType(E.ty)), align=elem)
    b.branch(lane)
    b.position_at_end(lane)
    m = b.phi(itn)
    m.add_incoming(bitsv, slow)
    i = b.call(cttz, [m, ir.Constant(ir.IntType(1), 1)])
    i = i if n == 32 else b.zext(i, i32) if n < 32 else b.trunc(i, i32)
    r = _libm_lane(b, b.extract_element(x, i), libm_name)
    b.store(r, b.gep(slot, [ir.Constant(i32, 0), i]), align=elem)
    rest = b.and_(m, b.sub(m, ir.Constant(itn, 1)))
    m.add_incoming(rest, lane)
    b.cbranch(b.icmp_unsigned("!=", rest, ir.Constant(itn, 0)), lane, gather)
    b.position_at_end(gather)
    acc = b.load(b.bitcast(slot, ir.PointerType(E.ty)), align=elem)
    return _join(b, done, E.ty, fast, cur, acc, gather)


def _join(b: ir.IRBuilder, done, ty: ir.Type, fast, fast_block, slow, slow_block):
    """Branch to `done` and merge the fast path's value with the slow path's there."""
    b.branch(done)
    b.position_at_end(done)
    phi = b.phi(ty)
    phi.add_incoming(fast, fast_block)
    phi.add_incoming(slow, slow_block)
    return phi


def _sincos_huge(E: _Em, x):
    """|x| >= _SINCOS_LIMIT and finite: where the Cody-Waite reduction is not exact."""
    ax = E.abs(x)
    return E.and_(E.ge(ax, E.c(_SINCOS_LIMIT)), E.lt(ax, E.c(math.inf)))


def _sincos(E: _Em, x, want_cos: bool, exact: bool = True):
    """sin/cos; ``exact``: arguments with |x| >= 4e9 (more bits of pi/2 than Cody-Waite
    has) are recomputed by libm (Payne-Hanek), in a branch ordinary arguments never take.
    ``exact=False`` is straight-line code, exact for |x| < 4e9 only (see _fix_fn)."""
    D = E.other(True)
    xd = x if E.is64 else E.b.fpext(x, D.ty)
    v = _sincos64(D, xd, want_cos, coarse=not E.is64)
    if exact:
        v = _libm_fallback(D, xd, v, _sincos_huge(D, xd), "cos" if want_cos else "sin")
    return v if E.is64 else E.b.fptrunc(v, E.ty)


def _fix_sincos(E: _Em, x, fast, want_cos: bool):
    """``fast`` (from _sincos(exact=False)) with huge-argument elements redone by libm."""
    return _libm_fallback(E, x, fast, _sincos_huge(E, x), "cos" if want_cos else "sin")


def _erf(E: _Em, x):
    if E.is64:
        return _erf64(E, x, coarse=False)
    D = E.other(True)
    return E.b.fptrunc(_erf64(D, E.b.fpext(x, D.ty), coarse=True), E.ty)


def _erfc64(E: _Em, x):
    """erfc in float64, relatively accurate in the right tail down to the subnormals.

    a = |x|: a < 0.5: 1 - erf(a) (no cancellation there: erfc >= 0.48); a < 4.75:
    exp(-a^2 + H(a)) with H = log(erfcx) by pieces (coefficients picked per lane); beyond,
    exp(-a^2 + F(1/a^2)) / a. a^2 is exact as hi + lo (FMA), so the exponent's rounding
    stays ~1 ulp; x < 0: 2 - erfc(a)."""
    ax = E.abs(x)
    small = E.sub(E.c(1.0), E.mul(ax, E.poly(E.mul(ax, ax), _ERF64S)))
    in2, in3 = E.ge(ax, E.c(1.5)), E.ge(ax, E.c(3.0))
    (m1, c1), (m2, c2), (m3, c3) = _ERFC_MID
    m = E.sel(in3, E.c(m3), E.sel(in2, E.c(m2), E.c(m1)))
    y = E.sub(ax, m)
    acc = None
    for k in reversed(range(1, len(c1))):
        ck = E.sel(in3, E.c(c3[k]), E.sel(in2, E.c(c2[k]), E.c(c1[k])))
        acc = ck if acc is None else E.fma(acc, y, ck)
    tail = E.ge(ax, E.c(4.75))
    s = E.div(E.c(1.0), E.mul(ax, ax))
    st = E.sub(s, E.c(_ERFC_TAIL_M))
    # the constant term joins the exponent exactly (TwoSum): its rounding would be ~1 ulp
    h0 = E.sel(tail, E.c(_ERFC_TAIL[0]), E.sel(in3, E.c(c3[0]), E.sel(in2, E.c(c2[0]), E.c(c1[0]))))
    h1 = E.sel(tail, E.mul(st, E.poly(st, _ERFC_TAIL[1:])), E.mul(y, acc))
    p = E.mul(ax, ax)
    pl = E.fma_exact(ax, ax, E.neg(p))
    s1, e1 = E.two_sum(E.neg(p), h0)
    s2, e2 = E.two_sum(s1, h1)
    big = _exp(E, s2, E.sub(E.add(e1, e2), pl))
    big = E.div(big, E.sel(tail, ax, E.c(1.0)))
    r = E.sel(E.lt(ax, E.c(0.5)), small, big)
    r = E.sel(E.gt(ax, E.c(28.0)), E.c(0.0), r)  # underflowed (and a^2 = inf: no NaN)
    r = E.sel(E.lt(x, E.c(0.0)), E.sub(E.c(2.0), r), r)
    return E.sel(E.isnan(x), x, r)


def _erfc(E: _Em, x):
    if E.is64:
        return _erfc64(E, x)
    D = E.other(True)
    return E.b.fptrunc(_erfc64(D, E.b.fpext(x, D.ty)), E.ty)


# ------------------------------------------------------------------------- pow


_POW_OFF = 0x3FE6955500000000


def _log_dd(E: _Em, ax):
    """log(ax) as hi + lo with ~2**-68 relative error, ax > 0 finite (float64 only).

    Table of 16 (1/c, log c) pairs picked by mantissa bits (select tree, no gathers),
    r = ax/c - 1 exactly as a double-double via FMA, log1p(r) with r - r^2/2 exact.
    """
    b = E.b
    sub = E.lt(ax, E.c(2.0 ** -1022))
    ax = E.sel(sub, E.mul(ax, E.c(2.0 ** 52)), ax)
    kadj = E.sel(sub, E.c(-52.0), E.c(0.0))
    ix = E.bits(ax)
    tmp = b.sub(ix, E.ci(_POW_OFF))
    idx = b.and_(b.lshr(tmp, E.ci(48)), E.ci(15))
    k = E.add(E.tof(b.ashr(tmp, E.ci(52))), kadj)
    z = E.fl(b.sub(ix, b.and_(tmp, E.ci(0xFFF << 52))))
    invc = E.lookup(idx, [t[0] for t in _POW_TABLE])
    logc_hi = E.lookup(idx, [t[1] for t in _POW_TABLE])
    logc_lo = E.lookup(idx, [t[2] for t in _POW_TABLE])
    p = E.mul(z, invc)
    rlo = E.fma_exact(z, invc, E.neg(p))
    r = E.sub(p, E.c(1.0))  # exact (Sterbenz)
    s1, e1 = E.two_sum(E.mul(k, E.c(_LN2[0])), logc_hi)
    s2, e2 = E.two_sum(s1, r)
    t = E.mul(r, r)
    tl = E.fma_exact(r, r, E.neg(t))
    s3, e3 = E.two_sum(s2, E.mul(t, E.c(-0.5)))
    tail = E.mul(E.mul(t, r), E.poly(r, _LOGTAIL))
    lo = E.add(E.add(e1, e2), E.add(e3, E.mul(tl, E.c(-0.5))))
    lo = E.add(lo, E.fma(k, E.c(_LN2[1]), logc_lo))
    # log1p(r + rlo) - log1p(r) = rlo (1 - r + r^2 - ...): with r^2 the rest is < 2**-67
    lo = E.add(lo, E.fma(rlo, E.add(E.sub(E.c(1.0), r), t), tail))
    hi = E.add(s3, lo)
    return hi, E.sub(lo, E.sub(hi, s3))


def _pow64(E: _Em, x, y, exact_log: bool):
    """numpy/C99 pow in float64 arithmetic; ``exact_log`` uses the double-double log."""
    b = E.b
    ax = E.abs(x)
    finite_pos = E.and_(E.gt(ax, E.c(0.0)), E.lt(ax, E.c(math.inf)))
    axs = E.sel(finite_pos, ax, E.c(1.0))
    ys = E.sel(E.isnan(y), E.c(0.0), y)
    if exact_log:
        hi, lo = _log_dd(E, axs)
        ph = E.mul(ys, hi)
        pl = E.fma(ys, lo, E.fma_exact(ys, hi, E.neg(ph)))
        mag = _exp(E, ph, pl)
    else:
        mag = _exp(E, E.mul(ys, _log_core(E, axs)))
    zero, inf = E.c(0.0), E.c(math.inf)
    ylt0 = E.lt(y, zero)
    mag = E.sel(E.eq(ax, zero), E.sel(ylt0, inf, zero), mag)
    mag = E.sel(E.eq(ax, inf), E.sel(ylt0, zero, inf), mag)
    yinf = E.eq(E.abs(y), inf)
    axlt1 = E.lt(ax, E.c(1.0))
    mag = E.sel(yinf, E.sel(b.xor(axlt1, ylt0), zero, inf), mag)
    mag = E.sel(E.and_(yinf, E.eq(ax, E.c(1.0))), E.c(1.0), mag)
    # sign: negative base (incl. -0.0, -inf) with an odd integer exponent
    y_int = E.eq(E.floor(y), y)
    y_half = E.mul(y, E.c(0.5))
    y_odd = E.and_(y_int, E.ne(E.floor(y_half), y_half))
    xneg = b.icmp_signed("<", E.bits(x), E.ci(0))
    res = E.sel(E.and_(xneg, y_odd), E.neg(mag), mag)
    bad = E.and_(E.and_(E.lt(x, zero), E.gt(x, E.neg(inf))), b.not_(y_int))
    res = E.sel(E.or_(bad, E.or_(E.isnan(x), E.isnan(y))), E.c(math.nan), res)
    one = E.c(1.0)
    return E.sel(E.or_(E.eq(y, zero), E.eq(x, one)), one, res)


def _pow(E: _Em, x, y):
    if E.is64:
        return _pow64(E, x, y, exact_log=True)
    D = E.other(True)
    r = _pow64(D, E.b.fpext(x, D.ty), E.b.fpext(y, D.ty), exact_log=False)
    return E.b.fptrunc(r, E.ty)


def _sqrt(E: _Em, x):
    return E.call("llvm.sqrt", x)


_EMITTERS = {
    "exp": _exp, "log": _log, "tanh": _tanh, "sigmoid": _sigmoid, "erf": _erf,
    "sin": lambda E, x: _sincos(E, x, False), "cos": lambda E, x: _sincos(E, x, True),
    "pow": _pow, "sqrt": _sqrt, "expm1": _expm1, "log1p": _log1p, "erfc": _erfc,
}


