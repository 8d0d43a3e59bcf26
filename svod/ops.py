"""The op table: what svod knows about each op, one entry (`OpInfo`) per `Ops` member.

Every module that needs a fact about an op reads it here — the IR's op classes
(`svod.ir.UNARY`, `BINARY`, ...), the reference interpreter's numpy implementation, the
fusion rules' op classes, the cost models' weights and feature classes, the codegen's
vector-math names, latency and stash decisions. Other modules hold no op sets of their
own: they call the projections below (`ops_where`, `weights`, `vector_math`, ...). Adding an
op is one `Ops` member, one entry in `TABLE`, its lowering in `svod/codegen` and its
frontend function (tests/test_ops_table.py checks that every member has a complete,
consistent entry and that no other module keeps a table of ops). docs/ops.md describes
the columns.

Contract of an entry:
- `kind` is one of `KINDS`; `arity` the number of operands (None: any number);
- `cost` is "cheap" exactly when `weight` is 1 (one simple vector instruction or two);
- `latency` "long" marks an op that ends a long dependency chain (the float vector-math
  functions, divide and square root): such a value is worth stashing between row passes
  rather than recomputing, and a loop of them wants several vectors in flight;
- `interp(srcs, npd, arg)` evaluates the node on numpy arrays with numpy's errors off, in
  the node's numpy dtype `npd`; it *defines* svod's semantics where numpy has a choice
  (docs/semantics.md). None only for BUFFER (its array) and LIBRARY (svod.library runs
  the call: `svod.interp` evaluates it).

>>> TABLE[Ops.EXP].kind, TABLE[Ops.EXP].cost, TABLE[Ops.EXP].math, TABLE[Ops.ADD].arity
('unary', 'transcendental', 'exp', 2)
>>> Ops.WHERE in ops_where(kind="ternary")
True
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np


class Ops(enum.Enum):
    # leaves
    BUFFER = "BUFFER"  # arg: BufferRef (realized data)
    CONST = "CONST"  # arg: Python scalar; shape ()
    # unary elementwise
    NEG = "NEG"
    ABS = "ABS"
    EXP = "EXP"
    LOG = "LOG"
    SQRT = "SQRT"
    SIN = "SIN"
    COS = "COS"
    TANH = "TANH"
    ERF = "ERF"
    ERFC = "ERFC"  # 1 - erf(x), relatively accurate in the right tail (no cancellation)
    EXPM1 = "EXPM1"  # exp(x) - 1 without the cancellation (exact forms near 0)
    LOG1P = "LOG1P"  # log(1 + x), likewise
    FLOOR = "FLOOR"
    CEIL = "CEIL"
    ROUND = "ROUND"  # half to even
    SIGN = "SIGN"
    NOT = "NOT"  # logical not (bool) / bitwise invert (int)
    ISNAN = "ISNAN"
    ISINF = "ISINF"
    CAST = "CAST"  # dtype is the target
    # inverse trigonometric and hyperbolic (float; svod/elementwise.py)
    ASIN = "ASIN"
    ACOS = "ACOS"
    ATAN = "ATAN"
    SINH = "SINH"
    COSH = "COSH"
    ASINH = "ASINH"
    ACOSH = "ACOSH"
    ATANH = "ATANH"
    SIGNBIT = "SIGNBIT"  # bool result: the sign bit (set for -0.0 and negative NaNs)
    # complex parts (svod/complex.py): REAL/IMAG give the part's float dtype, CONJ keeps it
    REAL = "REAL"
    IMAG = "IMAG"
    CONJ = "CONJ"
    COMPLEX = "COMPLEX"  # (re, im) of one float dtype -> the complex dtype of that width
    # binary elementwise (same dtype operands)
    ADD = "ADD"
    SUB = "SUB"
    MUL = "MUL"
    DIV = "DIV"  # true division, float only
    IDIV = "IDIV"  # floor division (numpy //), 0 on integer division by zero
    MOD = "MOD"  # floor modulo (numpy %), sign of the divisor
    POW = "POW"
    MAX = "MAX"  # numpy maximum: NaN propagates
    MIN = "MIN"
    CMPLT = "CMPLT"
    CMPLE = "CMPLE"
    CMPEQ = "CMPEQ"
    CMPNE = "CMPNE"
    AND = "AND"  # logical for bool, bitwise for int
    OR = "OR"
    XOR = "XOR"
    ATAN2 = "ATAN2"  # (y, x), float
    HYPOT = "HYPOT"
    LOGADDEXP = "LOGADDEXP"
    COPYSIGN = "COPYSIGN"
    SHL = "SHL"  # integer shifts, numpy's rules for shifts outside [0, bits)
    SHR = "SHR"  # arithmetic
    # ternary
    WHERE = "WHERE"  # (cond: bool, a, b)
    # reductions: keep reduced axes as size 1
    REDUCE = "REDUCE"  # arg: (ReduceOp name, axes)
    ARGMAX = "ARGMAX"  # arg: axis; first index, NaN wins; int64
    ARGMIN = "ARGMIN"
    # movement
    RESHAPE = "RESHAPE"  # arg: shape
    PERMUTE = "PERMUTE"  # arg: order
    EXPAND = "EXPAND"  # arg: shape (size-1 axes broadcast)
    SHRINK = "SHRINK"  # arg: ((begin, end), ...)
    FLIP = "FLIP"  # arg: axes
    PAD = "PAD"  # arg: (((lo, hi), ...), value)
    CAT = "CAT"  # arg: axis; several sources
    # compute-heavy
    MATMUL = "MATMUL"  # (a[..., m, k], b[..., k, n]), equal batch shapes
    # boundaries
    CONTIGUOUS = "CONTIGUOUS"  # identity that asks for a materialised result
    # a library step (sorting, LAPACK, ...; svod/library.py): arg (function, params, output
    # index, shape); one node per output of the call, the call runs once per plan step
    LIBRARY = "LIBRARY"

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    # members are singletons: identity hashing (Enum's default hashes the name in Python)
    __hash__ = object.__hash__


REDUCE_OPS = ("sum", "prod", "max", "min")  # the reductions an Ops.REDUCE arg names


class Kind(NamedTuple):
    """What an op's kind implies."""

    arity: int | None  # operands of a node (None: any number)
    phrase: str  # an article and the kind, in why-not-fused reasons
    fusion: tuple[str, ...]  # the fusion-rule classes (search/rules.py) of its ops


KINDS: dict[str, Kind] = {
    "leaf": Kind(0, "an elementwise op", ()),  # BUFFER, CONST (a CONST fuses as an elementwise op)
    "unary": Kind(1, "an elementwise op", ("Elementwise",)),
    "binary": Kind(2, "an elementwise op", ("Elementwise",)),
    "ternary": Kind(3, "an elementwise op", ("Elementwise",)),
    "reduction": Kind(1, "a reduction", ("Reduction",)),
    "movement": Kind(1, "a view", ("Elementwise", "Movement")),
    "concat": Kind(None, "an elementwise op", ("Elementwise",)),  # CAT: index arithmetic over its sources
    "matmul": Kind(2, "a matmul", ("Matmul",)),
    "boundary": Kind(1, "an elementwise op", ("Elementwise",)),  # CONTIGUOUS: a consumer only (rules.py)
    "library": Kind(None, "a library step", ()),
}
COSTS = ("cheap", "divide", "transcendental")
LATENCIES = ("short", "long")
FEATURE_CLASSES = ("ALU", "EXP", "LOG", "SQRT", "SIN", "COS", "TANH", "ERF", "POW", "DIV", "IDIV", "MOD",
                   "ROUND", "CAST")


@dataclass(frozen=True)
class OpInfo:
    """The facts of one op (see the module docstring for the contract)."""

    op: Ops
    kind: str  # KINDS
    interp: Callable[[list, np.dtype, Any], Any] | None  # (srcs, numpy dtype, arg) -> value
    cost: str = "cheap"  # COSTS
    latency: str = "short"  # LATENCIES
    weight: int = 1  # roofline flops per element (svod.costing)
    complex_factor: int = 2  # a complex node costs this many of its real op (svod.costing)
    feature: str = "ALU"  # calibrated cost class (costmodels.features; "64" appended for 8-byte lanes)
    units: float = 1.0  # evaluations of its feature class one element costs
    math: str | None = None  # vector-math function of the codegen (svod/codegen/vecmath*.py)
    bool_result: bool = False  # the result is bool whatever the operands' dtype
    grows: bool = False  # may make a bigger array than its sources (size checked at construction)
    view: bool = False  # indexes its one source's memory, computing nothing (numpy can make it a view;
    # RESHAPE where the strides allow): eager work and view leaves look through these
    sized: bool = False  # its argument is sizes or offsets (a shape, slice bounds, pad widths): a
    # structure without sizes (svod.eager's plan bound) keeps only the rank for it
    fusion: tuple[str, ...] | None = None  # fusion-rule classes; None: the kind's

    @property
    def arity(self) -> int | None:
        """Operands of a node (None: any number)."""
        return KINDS[self.kind].arity

    @property
    def fusion_classes(self) -> tuple[str, ...]:
        """The classes of search/rules.py's egglog facts this op belongs to."""
        return KINDS[self.kind].fusion if self.fusion is None else self.fusion

    @property
    def phrase(self) -> str:
        """An article and a kind, for reasons: 'a reduction', 'an elementwise op'."""
        return KINDS[self.kind].phrase


# ----------------------------------------------------------------------------- numpy semantics


def _same(f):
    """A unary numpy function, its result in the node's dtype."""
    return lambda srcs, npd, arg: f(srcs[0]).astype(npd, copy=False)


def _pair(f):
    """A binary numpy function, its result in the node's dtype."""
    return lambda srcs, npd, arg: np.asarray(f(srcs[0], srcs[1])).astype(npd, copy=False)


def _view(f):
    """A movement op: `f(array, arg)`."""
    return lambda srcs, npd, arg: f(srcs[0], arg)


_U32 = np.dtype(np.uint32)


def _cast(srcs, npd, arg):
    src = srcs[0]
    if npd == _U32 and src.dtype.kind == "f":
        # NaN/inf/out of range: numpy's platform result, which for uint32 differs between its
        # contiguous (SIMD) and strided loops; svod takes the C cast's (the strided loop's):
        # convert to int64, keep the low 32 bits (docs/semantics.md)
        return src.astype(np.int64).astype(npd)
    # NaN/inf/out of range otherwise: numpy's platform result, the same in every loop
    return src.astype(npd)


def _erf(srcs, npd, arg):
    # numpy has no erf; math.erf (float64) vectorised; a 0-d source gives a float
    x = srcs[0]
    return np.asarray(np.frompyfunc(math.erf, 1, 1)(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _erfc(srcs, npd, arg):
    # the codegen's algorithm in numpy double-double (svod/ddmath.py; float32 rounds once)
    from svod.ddmath import erfc

    x = srcs[0]
    return np.asarray(erfc(x.astype(np.float64))).astype(x.dtype)


def _not(srcs, npd, arg):
    x = srcs[0]
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _complex(re: np.ndarray, im: np.ndarray) -> np.ndarray:
    """The complex array with parts `re`, `im` (exactly: no arithmetic on inf/NaN parts)."""
    out = np.empty(np.broadcast_shapes(re.shape, im.shape), dtype=np.result_type(re.dtype, np.complex64))
    out.real, out.imag = re, im
    return out


def _divmod(idiv: bool):
    """Floor division or modulo; integer division by zero gives 0."""
    def f(a, b):
        if a.dtype.kind not in "iub":
            return np.floor_divide(a, b) if idiv else np.remainder(a, b)
        zero = b == 0
        safe = np.where(zero, 1, b).astype(b.dtype)
        out = np.floor_divide(a, safe) if idiv else np.remainder(a, safe)
        return np.where(zero, 0, out).astype(a.dtype)
    return f


def _pow(a, b):
    if a.dtype.kind != "i":
        return np.power(a, b)
    neg = b < 0
    out = np.power(a, np.where(neg, 0, b).astype(b.dtype))
    # a ** -k for integers: 1 for a == 1, ±1 for a == -1, else 0 (C semantics, no error)
    negres = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
    return np.where(neg, negres, out).astype(a.dtype)


def _logaddexp(a, b):
    # the codegen's: double-double where the sum cancels (svod/ddmath.py)
    from svod.ddmath import logaddexp

    return logaddexp(a, b)


def reduce_numpy(rop: str, x: np.ndarray, axes: tuple[int, ...], out_dtype) -> np.ndarray:
    """An Ops.REDUCE of `x` over `axes` (kept as size 1); bool max/min are any/all."""
    if x.dtype == np.bool_ and rop in ("max", "min"):
        return (np.any if rop == "max" else np.all)(x, axis=axes, keepdims=True)
    if rop in ("sum", "prod"):
        return (np.sum if rop == "sum" else np.prod)(x, axis=axes, keepdims=True, dtype=out_dtype)
    if rop in ("max", "min"):
        return (np.max if rop == "max" else np.min)(x, axis=axes, keepdims=True)
    raise NotImplementedError(rop)


def _reduce(srcs, npd, arg):
    rop, axes = arg
    return np.asarray(reduce_numpy(rop, srcs[0], tuple(axes), npd)).astype(npd, copy=False)


def _arg_reduce(f):
    # numpy's argmax/argmin already return the first index and let NaN win
    return lambda srcs, npd, arg: np.expand_dims(f(srcs[0], axis=arg), arg).astype(np.int64)


def _pad(x, arg):
    pads, value = arg
    return np.pad(x, pads, mode="constant", constant_values=value)


# ----------------------------------------------------------------------------- the table


_e = OpInfo


def _fn(op: Ops, kind: str, f, weight: int, feature: str, cost: str = "transcendental", **facts) -> OpInfo:
    """A vector-math function: long latency, `math` the lower-case name of its op."""
    wrap = _same if kind == "unary" else _pair
    return OpInfo(op, kind, wrap(f), cost=cost, latency="long", weight=weight, feature=feature,
                  math=op.value.lower(), **facts)


TABLE: dict[Ops, OpInfo] = {o.op: o for o in (
    _e(Ops.BUFFER, "leaf", None),
    _e(Ops.CONST, "leaf", lambda srcs, npd, arg: np.array(arg, dtype=npd), fusion=("Elementwise",)),
    # ---- unary
    _e(Ops.NEG, "unary", _same(np.negative)),
    _e(Ops.ABS, "unary", _same(np.abs), complex_factor=3),
    _fn(Ops.EXP, "unary", np.exp, 10, "EXP", complex_factor=3),
    _fn(Ops.LOG, "unary", np.log, 12, "LOG", complex_factor=3),
    _fn(Ops.SQRT, "unary", np.sqrt, 4, "SQRT", cost="divide", complex_factor=3),
    _fn(Ops.SIN, "unary", np.sin, 14, "SIN", complex_factor=4),
    _fn(Ops.COS, "unary", np.cos, 14, "COS", complex_factor=4),
    _fn(Ops.TANH, "unary", np.tanh, 14, "TANH", complex_factor=5),
    _e(Ops.ERF, "unary", _erf, cost="transcendental", latency="long", weight=16, feature="ERF", math="erf"),
    _e(Ops.ERFC, "unary", _erfc, cost="transcendental", latency="long", weight=20, feature="ERF", math="erfc"),
    _fn(Ops.EXPM1, "unary", np.expm1, 12, "EXP", complex_factor=4),  # exp plus a few selects
    _fn(Ops.LOG1P, "unary", np.log1p, 14, "LOG", complex_factor=3),
    _e(Ops.FLOOR, "unary", _same(np.floor), feature="ROUND"),
    _e(Ops.CEIL, "unary", _same(np.ceil), feature="ROUND"),
    _e(Ops.ROUND, "unary", _same(np.round), feature="ROUND"),
    _e(Ops.SIGN, "unary", _same(np.sign), complex_factor=3),
    _e(Ops.NOT, "unary", _not),
    _e(Ops.ISNAN, "unary", _same(np.isnan), bool_result=True),
    _e(Ops.ISINF, "unary", _same(np.isinf), bool_result=True),
    _e(Ops.CAST, "unary", _cast, feature="CAST"),
    # the inverse functions (svod/codegen/vecmath_inv.py) are priced as the calibrated
    # function of like work: a polynomial and a division (TANH), log + exp (POW)
    _fn(Ops.ASIN, "unary", np.arcsin, 20, "TANH"),
    _fn(Ops.ACOS, "unary", np.arccos, 20, "TANH"),
    _fn(Ops.ATAN, "unary", np.arctan, 20, "TANH"),
    _fn(Ops.SINH, "unary", np.sinh, 14, "TANH", complex_factor=4),
    _fn(Ops.COSH, "unary", np.cosh, 14, "TANH", complex_factor=4),
    _fn(Ops.ASINH, "unary", np.arcsinh, 26, "POW"),
    _fn(Ops.ACOSH, "unary", np.arccosh, 26, "POW"),
    _fn(Ops.ATANH, "unary", np.arctanh, 26, "POW"),
    _e(Ops.SIGNBIT, "unary", _same(np.signbit), bool_result=True),
    _e(Ops.REAL, "unary", _same(np.real)),
    _e(Ops.IMAG, "unary", _same(np.imag)),
    _e(Ops.CONJ, "unary", _same(np.conjugate)),
    # ---- binary
    _e(Ops.COMPLEX, "binary", _pair(_complex)),
    _e(Ops.ADD, "binary", _pair(np.add)),
    _e(Ops.SUB, "binary", _pair(np.subtract)),
    _e(Ops.MUL, "binary", _pair(np.multiply), complex_factor=4),
    _e(Ops.DIV, "binary", _pair(np.true_divide), cost="divide", latency="long", weight=4, complex_factor=4,
       feature="DIV"),
    # integer division has no vector instruction; not counted as a long-latency chain
    _e(Ops.IDIV, "binary", _pair(_divmod(True)), cost="divide", weight=8, feature="IDIV"),
    _e(Ops.MOD, "binary", _pair(_divmod(False)), cost="divide", weight=8, feature="MOD"),
    _e(Ops.POW, "binary", _pair(_pow), cost="transcendental", latency="long", weight=26, complex_factor=4,
       feature="POW"),
    _e(Ops.MAX, "binary", _pair(np.maximum)),
    _e(Ops.MIN, "binary", _pair(np.minimum)),
    _e(Ops.CMPLT, "binary", _pair(np.less), bool_result=True),
    _e(Ops.CMPLE, "binary", _pair(np.less_equal), bool_result=True),
    _e(Ops.CMPEQ, "binary", _pair(np.equal), bool_result=True),
    _e(Ops.CMPNE, "binary", _pair(np.not_equal), bool_result=True),
    _e(Ops.AND, "binary", _pair(np.bitwise_and)),
    _e(Ops.OR, "binary", _pair(np.bitwise_or)),
    _e(Ops.XOR, "binary", _pair(np.bitwise_xor)),
    _fn(Ops.ATAN2, "binary", np.arctan2, 24, "TANH"),
    _fn(Ops.HYPOT, "binary", np.hypot, 8, "DIV", cost="divide"),
    # the double-double form (where the sum can cancel) beside the plain one: ~3 pows
    _fn(Ops.LOGADDEXP, "binary", _logaddexp, 80, "POW", units=3.0),
    _e(Ops.COPYSIGN, "binary", _pair(np.copysign)),
    # numpy's shifts: 0 (or -1 for a negative value shifted right) outside [0, bits)
    _e(Ops.SHL, "binary", _pair(np.left_shift)),
    _e(Ops.SHR, "binary", _pair(np.right_shift)),
    # ---- the rest
    _e(Ops.WHERE, "ternary", lambda srcs, npd, arg: np.where(srcs[0], srcs[1], srcs[2])),
    _e(Ops.REDUCE, "reduction", _reduce),
    _e(Ops.ARGMAX, "reduction", _arg_reduce(np.argmax)),
    _e(Ops.ARGMIN, "reduction", _arg_reduce(np.argmin)),
    _e(Ops.RESHAPE, "movement", _view(lambda x, arg: x.reshape(arg)), view=True, sized=True),
    _e(Ops.PERMUTE, "movement", _view(np.transpose), view=True),
    _e(Ops.EXPAND, "movement", _view(np.broadcast_to), grows=True, view=True, sized=True),
    _e(Ops.SHRINK, "movement", _view(lambda x, arg: x[tuple(slice(b, e) for b, e in arg)]), view=True,
       sized=True),
    _e(Ops.FLIP, "movement", _view(lambda x, arg: np.flip(x, axis=tuple(arg)) if arg else x), view=True),
    _e(Ops.PAD, "movement", _view(_pad), grows=True, sized=True),
    _e(Ops.CAT, "concat", lambda srcs, npd, arg: np.concatenate(srcs, axis=arg), grows=True),
    _e(Ops.MATMUL, "matmul", _pair(np.matmul), grows=True),
    _e(Ops.CONTIGUOUS, "boundary", lambda srcs, npd, arg: np.ascontiguousarray(srcs[0])),
    _e(Ops.LIBRARY, "library", None, grows=True),
)}


# ----------------------------------------------------------------------------- projections


def ops_where(**facts) -> frozenset:
    """The ops whose entries have every given fact: ``ops_where(kind="unary", bool_result=True)``."""
    return frozenset(o for o, e in TABLE.items() if all(getattr(e, k) == v for k, v in facts.items()))


def long_latency() -> frozenset:
    """Ops ending a long dependency chain (svod/codegen/lower.py's ILP hint and its stash)."""
    return ops_where(latency="long")


def weights() -> dict:
    """op -> roofline flops per element, for the ops that weigh more than 1."""
    return {o: e.weight for o, e in TABLE.items() if e.weight != 1}


def complex_factors() -> dict:
    """op -> its complex multiplier, for the ops whose factor is not the default 2."""
    return {o: e.complex_factor for o, e in TABLE.items() if e.complex_factor != 2}


def feature_classes() -> dict:
    """op -> calibrated cost class, for the ops not in the default class "ALU"."""
    return {o: e.feature for o, e in TABLE.items() if e.feature != "ALU"}


def feature_units() -> dict:
    """op -> evaluations of its class per element, where that is not 1."""
    return {o: e.units for o, e in TABLE.items() if e.units != 1.0}


def long_latency_features() -> frozenset:
    """The feature classes of the long-latency ops (the learned correction's
    "transcendental" work)."""
    return frozenset(TABLE[o].feature for o in long_latency())


def vector_math(arity: int) -> dict:
    """op -> the codegen's vector-math function name, for the ops of `arity` operands."""
    return {o: e.math for o, e in TABLE.items() if e.math is not None and e.arity == arity}


def fusion_class(name: str) -> list[str]:
    """`Ops` values (strings) of the fusion-rule class `name`, in table order."""
    return [o.value for o, e in TABLE.items() if name in e.fusion_classes]


def phrase(op: Ops) -> str:
    """An article and a kind, for reasons: 'a reduction', 'an elementwise op'."""
    return TABLE[op].phrase
