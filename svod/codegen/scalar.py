"""Scalar op semantics in generated code: one body node on registers, as numpy computes
it (`emit_op`; svod/interp.py is the reference), with the casts, integer division,
powers, shifts and constants it needs. A complex value is a (re, im) pair
(`svod/codegen/cplx.py`); float functions are svod's vector math (`svod/codegen/vecmath.py`).
"""

from __future__ import annotations

import math

import llvmlite.ir as ir
import numpy as np

from svod.codegen.cplx import const as complex_const
from svod.codegen.cplx import emit_complex
from svod.codegen.irbuild import F32, F64, I1, I32, I64, Fn, LoweringError, reg_type, tsuf
from svod.dtype import DType, float64
from svod.ir import COMPARE, Ops
from svod.ops import vector_math

MATH = vector_math(1)  # op -> vector-math function (svod/codegen/vecmath.py, vecmath_inv.py)
MATH2 = vector_math(2)


def const(dt: DType, value) -> ir.Constant:
    if dt.is_complex:
        return complex_const(dt, value)
    with np.errstate(all="ignore"):
        v = np.array(value).astype(dt.np)[()]
    if dt.is_float:
        return ir.Constant(reg_type(dt), float(v))
    if dt.is_bool:
        return ir.Constant(I1, int(bool(v)))
    return ir.Constant(reg_type(dt), _signed(int(v), 8 * dt.itemsize))


def _signed(v: int, bits: int) -> int:
    """`v` as the signed integer with the same `bits` low bits (LLVM's integer constants
    are written signed; an unsigned dtype's large values wrap)."""
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v



def icmp(b: ir.IRBuilder, dt: DType, op: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """An integer comparison with the dtype's signedness (bool compares unsigned)."""
    return b.icmp_signed(op, x, y) if dt.is_signed else b.icmp_unsigned(op, x, y)



def _fconst(ty: ir.Type, v: float) -> ir.Constant:
    return ir.Constant(ty, v)


def _fptosi(f: Fn, x: ir.Value, bits: int) -> ir.Value:
    """x86's cvttss2si/cvttsd2si at `bits` (32 or 64): truncation toward zero in range;
    NaN, inf and out of range give the "integer indefinite" value INT_MIN."""
    b = f.b
    ity = ir.IntType(bits)
    lo = _fconst(x.type, -float(2 ** (bits - 1)))
    hi = _fconst(x.type, float(2 ** (bits - 1)))
    inr = b.and_(b.fcmp_ordered(">=", x, lo), b.fcmp_ordered("<", x, hi))
    # NOTE: fptosi of an out-of-range value is poison, but select never propagates the
    # poison of the arm it does not choose.
    return b.select(inr, b.fptosi(x, ity), ir.Constant(ity, -(2 ** (bits - 1))))


def _float_to_int(f: Fn, x: ir.Value, to: DType) -> ir.Value:
    """numpy's result on x86-64 (the C casts it compiles to; docs/semantics.md): int32 and
    int64 convert at their width; narrower integers convert to int32 and keep the low
    bits; uint32 converts to int64 and keeps the low 32 bits; uint64 converts values from
    2**63 up as ``(x - 2**63) ^ 2**63``. NaN and out-of-range values follow from INT_MIN
    (`_fptosi`): NaN gives 0 for the narrow types and uint32, INT_MIN for int32/int64,
    2**63 for uint64."""
    b = f.b
    bits = 8 * to.itemsize
    ity = reg_type(to)
    if to.is_signed and bits >= 32:
        return _fptosi(f, x, bits)
    if bits < 32:
        return b.trunc(_fptosi(f, x, 32), ity)
    if bits == 32:  # uint32
        return b.trunc(_fptosi(f, x, 64), ity)
    top = _fconst(x.type, float(2 ** 63))
    high = b.xor(_fptosi(f, b.fsub(x, top), 64), ir.Constant(I64, -(2 ** 63)))
    return b.select(b.fcmp_ordered(">=", x, top), high, _fptosi(f, x, 64))


def cast(f: Fn, x: ir.Value, src: DType, dst: DType) -> ir.Value:
    b = f.b
    if src == dst:
        return x
    if dst.is_bool:
        if src.is_float:
            return b.fcmp_unordered("!=", x, _fconst(x.type, 0.0))
        return b.icmp_unsigned("!=", x, ir.Constant(x.type, 0))
    if src.is_bool:
        return b.uitofp(x, reg_type(dst)) if dst.is_float else b.zext(x, reg_type(dst))
    if src.is_int and dst.is_int:  # widen with the source's sign; narrow keeps the low bits
        if dst.itemsize > src.itemsize:
            return b.sext(x, reg_type(dst)) if src.is_signed else b.zext(x, reg_type(dst))
        return b.trunc(x, reg_type(dst)) if dst.itemsize < src.itemsize else x
    if src.is_int and dst.is_float:
        return b.sitofp(x, reg_type(dst)) if src.is_signed else b.uitofp(x, reg_type(dst))
    if src.is_float and dst.is_float:
        return b.fpext(x, reg_type(dst)) if dst.itemsize > src.itemsize else b.fptrunc(x, reg_type(dst))
    return _float_to_int(f, x, dst)


def _via_f64(f: Fn, fn, dt: DType, *xs):
    """Evaluate a float function on integer/bool values the way numpy does: in float64,
    then cast back."""
    ys = [cast(f, x, dt, float64) for x in xs]
    return cast(f, fn(*ys), float64, dt)


def _math(f: Fn, name: str, *xs) -> ir.Value:
    from svod.codegen.vecmath_inv import emit_math  # vecmath's, with the inverse functions registered

    return emit_math(f.b, name, *xs)


def _float_divmod(f: Fn, a: ir.Value, b_: ir.Value, want_div: bool) -> ir.Value:
    """numpy's npy_divmod (floor_divide / remainder) for floats, branch-free."""
    b = f.b
    ty = a.type
    zero = _fconst(ty, 0.0)
    mod = b.frem(a, b_)
    div = b.fdiv(b.fsub(a, mod), b_)
    mod_nz = b.fcmp_unordered("!=", mod, zero)  # `if (mod)`: NaN counts as non-zero
    adj = b.and_(mod_nz, b.xor(b.fcmp_ordered("<", b_, zero), b.fcmp_ordered("<", mod, zero)))
    copysign = lambda m, s: f.call_intr(f"llvm.copysign.{tsuf(ty)}", ty, [m, s])
    if not want_div:
        mod2 = b.select(adj, b.fadd(mod, b_), mod)
        mod3 = b.select(mod_nz, mod2, copysign(zero, b_))
        return b.select(b.fcmp_ordered("==", b_, zero), mod, mod3)
    div2 = b.select(adj, b.fsub(div, _fconst(ty, 1.0)), div)
    fl = f.call_intr(f"llvm.floor.{tsuf(ty)}", ty, [div2])
    fl2 = b.select(b.fcmp_ordered(">", b.fsub(div2, fl), _fconst(ty, 0.5)), b.fadd(fl, _fconst(ty, 1.0)), fl)
    q = b.fdiv(a, b_)
    res = b.select(b.fcmp_unordered("!=", div2, zero), fl2, copysign(zero, q))
    return b.select(b.fcmp_ordered("==", b_, zero), q, res)


def _int_divmod(f: Fn, a: ir.Value, d: ir.Value, dt: DType, want_div: bool) -> ir.Value:
    """Floor division/modulo without traps: 0 for division by zero, INT_MIN // -1 wraps;
    unsigned dtypes divide unsigned (udiv/urem)."""
    b = f.b
    ty = a.type
    bits = 8 * dt.itemsize
    c = lambda v: ir.Constant(ty, v)
    dz = b.icmp_signed("==", d, c(0))
    if bits <= 32:
        return _small_int_divmod(f, a, d, dz, dt, want_div)
    if dt.is_unsigned:  # floor is truncation; only division by zero needs guarding
        ds = b.select(dz, c(1), d)
        return b.select(dz, c(0), b.udiv(a, ds) if want_div else b.urem(a, ds))
    ovf = b.and_(b.icmp_signed("==", a, c(-(2 ** (bits - 1)))), b.icmp_signed("==", d, c(-1)))
    ds = b.select(b.or_(dz, ovf), c(1), d)
    q = b.sdiv(a, ds)
    r = b.srem(a, ds)
    adj = b.and_(b.icmp_signed("!=", r, c(0)), b.icmp_signed("<", b.xor(r, ds), c(0)))
    res = b.select(adj, b.sub(q, c(1)), q) if want_div else b.select(adj, b.add(r, ds), r)
    return b.select(dz, c(0), res)


def _small_int_divmod(f: Fn, a: ir.Value, d: ir.Value, dz: ir.Value, dt: DType, want_div: bool) -> ir.Value:
    """Floor division/modulo of 8-, 16- and 32-bit integers through float32 (8/16-bit) or
    float64 (32-bit), which vectorise (x86 has no vector integer division: sdiv/udiv run
    one element at a time: docs/codegen.md). Exact:
    |a|, |d| <= 2**B (B = 16, 32), so a non-integer quotient a/d lies at least 1/|d| from
    every integer, more than the rounding error |a/d| * 2**-P of the float's P-bit
    significand (P = 24, 53; needs |a| < 2**P) -- the rounded quotient has the same floor,
    and an integer quotient is exact. The floor converts at twice the width first
    (-128 // -1 = 128 then wraps to -128, as numpy); the remainder is a - q*d in the
    dtype's own wrapping arithmetic (its sign is the divisor's). Division by zero: 0."""
    b = f.b
    ty = a.type
    c = lambda v: ir.Constant(ty, v)
    ft, wide = (F32, I32) if dt.itemsize <= 2 else (F64, I64)
    ds = b.select(dz, c(1), d)
    if dt.is_signed:
        fa, fd = b.sitofp(a, ft), b.sitofp(ds, ft)
    else:
        fa, fd = b.uitofp(a, ft), b.uitofp(ds, ft)
    q = b.fdiv(fa, fd)
    if dt.is_signed:
        q = f.call_intr(f"llvm.floor.{tsuf(ft)}", ft, [q])
    q = b.trunc(b.fptosi(q, wide), ty)  # in range: |q| <= 2**(bits-1) (signed) or < 2**bits (unsigned)
    res = q if want_div else b.sub(a, b.mul(q, ds))
    return b.select(dz, c(0), res)


def _int_pow(f: Fn, a: ir.Value, e: ir.Value, dt: DType) -> ir.Value:
    b = f.b
    ty = a.type
    bits = 8 * dt.itemsize
    c = lambda v: ir.Constant(ty, v)
    res, base = c(1), a
    nbits = bits if dt.is_unsigned else bits - 1  # a signed exponent's top bit is its sign
    for bit in range(nbits):  # square-and-multiply, branch-free (wraps like numpy)
        take = b.icmp_unsigned("!=", b.and_(b.lshr(e, c(bit)), c(1)), c(0))
        res = b.select(take, b.mul(res, base), res)
        if bit < nbits - 1:
            base = b.mul(base, base)
    if dt.is_unsigned:
        return res
    odd = b.icmp_unsigned("!=", b.and_(e, c(1)), c(0))
    negres = b.select(b.icmp_signed("==", a, c(1)), c(1),
                      b.select(b.icmp_signed("==", a, c(-1)), b.select(odd, c(-1), c(1)), c(0)))
    return b.select(b.icmp_signed("<", e, c(0)), negres, res)


def _shift(f: Fn, a: ir.Value, n: ir.Value, dt: DType, left: bool) -> ir.Value:
    """numpy's shifts: a count outside [0, bits) (negative counts included: numpy compares
    them unsigned) gives 0, or -1 for a negative value shifted right; never LLVM poison.
    Unsigned values shift right logically."""
    b = f.b
    if not dt.is_int:
        raise LoweringError(f"shift of {dt}")
    ty = a.type
    bits = 8 * dt.itemsize
    ok = b.icmp_unsigned("<", n, ir.Constant(ty, bits))
    safe = b.select(ok, n, ir.Constant(ty, 0))
    if left:
        return b.select(ok, b.shl(a, safe), ir.Constant(ty, 0))
    if dt.is_unsigned:
        return b.select(ok, b.lshr(a, safe), ir.Constant(ty, 0))
    return b.select(ok, b.ashr(a, safe), b.ashr(a, ir.Constant(ty, bits - 1)))


_FCMP = {Ops.CMPLT: "<", Ops.CMPLE: "<=", Ops.CMPEQ: "=="}


def emit_op(f: Fn, op, dt: DType, arg, xs: list[ir.Value], src_dts: list[DType]) -> ir.Value:
    """One body node on scalar registers, numpy semantics (see svod/interp.py); a complex
    value is a (re, im) pair (`svod/codegen/cplx.py`)."""
    b = f.b
    if dt.kind == "c" or (src_dts and any(s.kind == "c" for s in src_dts)):
        return emit_complex(f, op, dt, arg, xs, src_dts, lambda x, s, d: cast(f, x, s, d))
    if op is Ops.CONST:
        return const(dt, arg)
    sdt = src_dts[0] if src_dts else dt
    if op is Ops.CAST:
        return cast(f, xs[0], sdt, dt)
    if op is Ops.WHERE:
        return b.select(xs[0], xs[1], xs[2])
    if op in COMPARE:
        x, y = xs
        if sdt.is_float:
            return b.fcmp_unordered("!=", x, y) if op is Ops.CMPNE else b.fcmp_ordered(_FCMP[op], x, y)
        cmp = {Ops.CMPLT: "<", Ops.CMPLE: "<=", Ops.CMPEQ: "==", Ops.CMPNE: "!="}[op]
        return icmp(b, sdt, cmp, x, y)
    if op in (Ops.ISNAN, Ops.ISINF):
        x = xs[0]
        if not sdt.is_float:
            return ir.Constant(I1, 0)
        if op is Ops.ISNAN:
            return b.fcmp_unordered("uno", x, x)
        ax = f.call_intr(f"llvm.fabs.{tsuf(x.type)}", x.type, [x])
        return b.fcmp_ordered("==", ax, _fconst(x.type, math.inf))
    if op is Ops.SIGNBIT:
        x = xs[0]
        if not sdt.is_float:
            raise LoweringError(f"SIGNBIT of {sdt}")
        ity = ir.IntType(8 * sdt.itemsize)
        return b.icmp_signed("<", b.bitcast(x, ity), ir.Constant(ity, 0))
    ty = reg_type(dt)
    if op in MATH2 or op is Ops.COPYSIGN:
        if not dt.is_float:
            raise LoweringError(f"{op.name} of {dt}")
        if op is Ops.COPYSIGN:
            return f.call_intr(f"llvm.copysign.{tsuf(ty)}", ty, [xs[0], xs[1]])
        return _math(f, MATH2[op], xs[0], xs[1])
    if op in (Ops.SHL, Ops.SHR):
        return _shift(f, xs[0], xs[1], dt, op is Ops.SHL)
    if op in MATH:
        if dt.is_float:
            return _math(f, MATH[op], xs[0])
        return _via_f64(f, lambda y: _math(f, MATH[op], y), dt, xs[0])
    if op is Ops.NEG:
        if dt.is_float:
            return b.fneg(xs[0])
        if dt.is_bool:
            raise LoweringError("NEG of bool (numpy rejects it)")
        return b.sub(ir.Constant(ty, 0), xs[0])
    if op is Ops.ABS:
        if dt.is_float:
            return f.call_intr(f"llvm.fabs.{tsuf(ty)}", ty, [xs[0]])
        if dt.is_bool or dt.is_unsigned:
            return xs[0]
        return b.select(b.icmp_signed("<", xs[0], ir.Constant(ty, 0)), b.sub(ir.Constant(ty, 0), xs[0]), xs[0])
    if op in (Ops.FLOOR, Ops.CEIL, Ops.ROUND):
        if not dt.is_float:
            return xs[0]
        name = {Ops.FLOOR: "floor", Ops.CEIL: "ceil", Ops.ROUND: "roundeven"}[op]
        return f.call_intr(f"llvm.{name}.{tsuf(ty)}", ty, [xs[0]])
    if op is Ops.SIGN:
        x = xs[0]
        if dt.is_float:
            z = _fconst(ty, 0.0)
            r = b.select(b.fcmp_ordered("<", x, z), _fconst(ty, -1.0), b.select(b.fcmp_unordered("uno", x, x), x, z))
            return b.select(b.fcmp_ordered(">", x, z), _fconst(ty, 1.0), r)
        if dt.is_bool:
            return x
        z = ir.Constant(ty, 0)
        if dt.is_unsigned:
            return b.zext(b.icmp_unsigned("!=", x, z), ty)
        return b.sub(b.zext(b.icmp_signed(">", x, z), ty), b.zext(b.icmp_signed("<", x, z), ty))
    if op is Ops.NOT:
        if dt.is_float:
            raise LoweringError("NOT of a float")
        return b.xor(xs[0], ir.Constant(ty, -1 if not dt.is_bool else 1))
    if op in (Ops.AND, Ops.OR, Ops.XOR):
        if dt.is_float:
            raise LoweringError(f"{op.name} of floats")
        return {Ops.AND: b.and_, Ops.OR: b.or_, Ops.XOR: b.xor}[op](xs[0], xs[1])
    x, y = xs if len(xs) == 2 else (xs[0], None)
    if op is Ops.ADD:
        return b.fadd(x, y) if dt.is_float else b.or_(x, y) if dt.is_bool else b.add(x, y)
    if op is Ops.SUB:
        return b.fsub(x, y) if dt.is_float else b.xor(x, y) if dt.is_bool else b.sub(x, y)
    if op is Ops.MUL:
        return b.fmul(x, y) if dt.is_float else b.and_(x, y) if dt.is_bool else b.mul(x, y)
    if op is Ops.DIV:
        if dt.is_float:
            return b.fdiv(x, y)
        return _via_f64(f, lambda p, q: b.fdiv(p, q), dt, x, y)
    if op in (Ops.IDIV, Ops.MOD):
        if dt.is_float:
            return _float_divmod(f, x, y, op is Ops.IDIV)
        if dt.is_bool:
            return b.and_(x, y) if op is Ops.IDIV else ir.Constant(I1, 0)
        return _int_divmod(f, x, y, dt, op is Ops.IDIV)
    if op is Ops.POW:
        if dt.is_float:
            return _math(f, "pow", x, y)
        if dt.is_bool:
            return b.or_(x, b.xor(y, ir.Constant(I1, 1)))
        return _int_pow(f, x, y, dt)
    if op in (Ops.MAX, Ops.MIN):
        is_max = op is Ops.MAX
        if dt.is_float:
            # numpy: (a > b || isnan(a)) ? a : b  (NaN propagates from either side)
            take = b.or_(b.fcmp_ordered(">" if is_max else "<", x, y), b.fcmp_unordered("uno", x, x))
            return b.select(take, x, y)
        if dt.is_bool:
            return b.or_(x, y) if is_max else b.and_(x, y)
        return b.select(icmp(b, dt, ">" if is_max else "<", x, y), x, y)
    raise LoweringError(f"no lowering for {op!r} on {dt}")


__all__ = ["MATH", "MATH2", "cast", "const", "emit_op", "icmp"]
