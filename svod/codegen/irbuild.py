"""The IR builder every codegen emitter uses: register types, a function builder with
structured loops (`Fn`), and small instruction helpers.

The IR is written clang -O0 style: loop counters and accumulators are allocas in the
entry block (`Fn.alloca`, `Fn.var`), loops are explicit condition/body/exit blocks
(`Fn.loop`); O3's SROA/mem2reg makes SSA of them and the loop vectoriser does the SIMD
work. Loop hints travel as ``llvm.loop`` metadata on the latch (`Fn.loop_md`).
"""

from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from svod.dtype import DType

F32, F64 = ir.FloatType(), ir.DoubleType()
I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
VOID = ir.VoidType()


class LoweringError(NotImplementedError):
    """The kernel uses an op/dtype combination the lowering does not support."""


@dataclass(frozen=True)
class Lowered:
    """A kernel's LLVM IR: entry ``void symbol(i8** slots, i64 ub, i64 ue)`` over `units`."""

    ir: str  # unoptimised LLVM IR text
    symbol: str
    units: int
    plan: object  # the `svod.codegen.schedule.LoopPlan` it was emitted from


_REG = {"float32": F32, "float64": F64, "bool": I1}
_INT_TYPES = {8: I8, 16: I16, 32: I32, 64: I64}


def reg_type(dt: DType) -> ir.Type:
    """The register type of a dtype: LLVM integers carry no sign, so int8 and uint8 are
    both i8 and every op that depends on the sign (compare, divide, shift right, widen,
    convert) picks its signed or unsigned instruction from the svod dtype."""
    t = _REG.get(dt.name)
    if t is None:
        if not dt.is_int:
            raise LoweringError(f"no register type for dtype {dt}")
        t = _INT_TYPES[8 * dt.itemsize]
    return t


def mem_type(dt: DType) -> ir.Type:
    """The element type of a buffer pointer: i8 for bool; the parts' float for a complex
    dtype (two elements a value, `svod/codegen/cplx.py`)."""
    if dt.is_complex:
        return reg_type(dt.real)
    return I8 if dt.is_bool else reg_type(dt)


def i64(v: int) -> ir.Constant:
    return ir.Constant(I64, int(v))


def func(module: ir.Module, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ret, args), name)
    return fn


def tsuf(t: ir.Type) -> str:
    return {id(F32): "f32", id(F64): "f64"}.get(id(t)) or ("f64" if isinstance(t, ir.DoubleType) else
                                                          "f32" if isinstance(t, ir.FloatType) else f"i{t.width}")


class Fn:
    """Builder state for one function: allocas in the entry block, structured loops."""

    def __init__(self, module: ir.Module, fn: ir.Function):
        self.module = module
        self.fn = fn
        self.entry = fn.append_basic_block("entry")
        self.alloca_b = ir.IRBuilder(self.entry)
        start = fn.append_basic_block("start")
        self.b = ir.IRBuilder(start)
        self._n = 0

    def finish(self) -> None:
        self.alloca_b.branch(self.fn.basic_blocks[1])

    def alloca(self, ty: ir.Type, count: int | None = None, name: str = "") -> ir.Value:
        size = None if count is None else ir.Constant(I32, count)
        return self.alloca_b.alloca(ty, size=size, name=name)

    def var(self, ty: ir.Type, init: ir.Value, name: str = "") -> ir.Value:
        p = self.alloca(ty, name=name)
        self.b.store(init, p)
        return p

    def call_intr(self, name: str, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        return self.b.call(func(self.module, name, ret, [a.type for a in args]), args)

    def loop_md(self, hints: tuple[tuple[str, int | None], ...]) -> ir.MDValue:
        """A self-referential ``llvm.loop`` ID carrying `hints` (("llvm.loop.unroll.disable",
        None), ("llvm.loop.interleave.count", 4), ...), one node per distinct hint set."""
        cache = self.module.__dict__.setdefault("_svod_loop_md", {})
        md = cache.get(hints)
        if md is None:
            ops = []
            for k, v in hints:
                ops.append(self.module.add_metadata([ir.MetaDataString(self.module, k)] +
                                                    ([] if v is None else [ir.Constant(I32, v)])))
            md = self.module.add_metadata(ops)
            md.operands = (md,) + tuple(md.operands)  # a loop ID refers to itself
            cache[hints] = md
        return md

    def loop(self, start: ir.Value, end: ir.Value, body, name: str = "i",
             hints: tuple[tuple[str, int | None], ...] = ()) -> None:
        """for (i = start; i < end; i++) body(i)   (signed i64 bounds); `hints` go on the
        latch as ``llvm.loop`` metadata (see `loop_md`)."""
        b = self.b
        self._n += 1
        k = self._n
        ivar = self.var(I64, start, f"{name}{k}")
        cond = self.fn.append_basic_block(f"{name}{k}.cond")
        body_bb = self.fn.append_basic_block(f"{name}{k}.body")
        exit_bb = self.fn.append_basic_block(f"{name}{k}.exit")
        b.branch(cond)
        b.position_at_end(cond)
        i = b.load(ivar)
        b.cbranch(b.icmp_signed("<", i, end), body_bb, exit_bb)
        b.position_at_end(body_bb)
        body(i)
        b.store(b.add(i, ir.Constant(I64, 1)), ivar)
        latch = b.branch(cond)
        if hints:
            latch.set_metadata("llvm.loop", self.loop_md(hints))
        b.position_at_end(exit_bb)

    def if_then(self, cond: ir.Value, then) -> None:
        b = self.b
        self._n += 1
        t = self.fn.append_basic_block(f"then{self._n}")
        e = self.fn.append_basic_block(f"endif{self._n}")
        b.cbranch(cond, t, e)
        b.position_at_end(t)
        then()
        b.branch(e)
        b.position_at_end(e)

    def if_else(self, cond: ir.Value, then, other) -> None:
        """if (cond) then() else other()."""
        self._n += 1
        t = self.fn.append_basic_block(f"then{self._n}")
        e = self.fn.append_basic_block(f"else{self._n}")
        j = self.fn.append_basic_block(f"join{self._n}")
        self.b.cbranch(cond, t, e)
        self.b.position_at_end(t)
        then()
        self.b.branch(j)
        self.b.position_at_end(e)
        other()
        self.b.branch(j)
        self.b.position_at_end(j)

def matrix_ctx(bctx: dict, nb: int, row, col, rows: int, cols: int) -> dict:
    """Loop context of element (`row`, `col`) of a (`rows`, `cols`) matrix whose axes
    follow `nb` batch axes (indexed by `bctx`); a size-1 axis gets no index."""
    ctx = dict(bctx)
    if rows != 1:
        ctx[(nb,)] = row
    if cols != 1:
        ctx[(nb + 1,)] = col
    return ctx


def vload(b: ir.IRBuilder, ptr: ir.Value, vt: ir.VectorType, align: int) -> ir.Value:
    return b.load(b.bitcast(ptr, vt.as_pointer()), align=align)


def vstore(b: ir.IRBuilder, v: ir.Value, ptr: ir.Value, vt: ir.VectorType, align: int) -> None:
    b.store(v, b.bitcast(ptr, vt.as_pointer()), align=align)


def imin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """The smaller of two signed integers."""
    return b.select(b.icmp_signed("<", x, y), x, y)


def ceil_div(b: ir.IRBuilder, x: ir.Value, d: int) -> ir.Value:
    return b.sdiv(b.add(x, i64(d - 1)), i64(d))


__all__ = ["F32", "F64", "I1", "I8", "I16", "I32", "I64", "VOID", "Fn", "Lowered", "LoweringError", "ceil_div", "func",
           "i64", "imin", "matrix_ctx", "mem_type", "reg_type", "tsuf", "vload", "vstore"]
