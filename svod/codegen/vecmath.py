"""Vectorised transcendental math emitted into ``llvmlite.ir`` modules.

``get_math_fn(module, name, ty)`` declares/defines, once per module, an internal
``alwaysinline`` function computing ``name`` elementwise on ``ty`` — ``float``/``double``
or ``<N x float>``/``<N x double>``. Kernels call it; after inlining the body is
straight-line vector code (selects, no branches, no scalar libm calls), so it also
vectorises when a kernel written on scalars goes through the loop vectoriser.

Two implementations:

* **polynomial** (always available): range reduction + near-minimax polynomials in IR.
  float32 exp/log/tanh/sigmoid/expm1/log1p run in float32; float32 sin/cos/erf/erfc/pow
  run in float64 internally (exact-enough range reduction for free, ≤ 1 ulp).
* **libmvec** (glibc's vector math, ``_ZGVeN16v_expf`` ...): used for vector types when
  the library is present, the function is in ``libmvec_preferred()`` (chosen by
  measurement, see ``bench/bench_vecmath.py``) and libmvec is not disabled
  (``jit.set_libmvec_enabled(False)`` or ``SVOD_NO_LIBMVEC=1``).

Accuracy (max ulp vs a float64/correctly rounded reference, measured by
``tests/test_vecmath.py``): ≤ 4 ulp for every function and dtype over its full domain,
including sin/cos for every finite input: the Cody-Waite reduction is exact for |x| < 4e9,
larger arguments are recomputed by libm (per lane for vector types, in a branch that
ordinary inputs never take). ``emit_math`` on scalar sin/cos (kernels' loop bodies) keeps
loops vectorisable through LLVM's ``vector-function-abi-variant`` call attribute (see
``_emit_loop_sincos``). NaN propagates; special values follow numpy (see each emitter).

The polynomials are `svod.codegen.vecpoly`'s; this module chooses between them and
libmvec and emits the functions and calls.

Example::

    >>> import llvmlite.ir as ir
    >>> from svod.codegen.vecmath import get_math_fn
    >>> m = ir.Module()
    >>> f = get_math_fn(m, "exp", ir.VectorType(ir.FloatType(), 16))
    >>> f.name
    'svod.exp.v16f32.poly'
"""

from __future__ import annotations

import llvmlite.ir as ir

from svod.codegen.vecpoly import _EMITTERS, _Em, _fix_sincos, _is_vec, _sincos, _suffix

__all__ = ["get_math_fn", "emit_math", "math_kernel_ir", "MATH_FUNCTIONS", "LIBMVEC_PREFERRED", "libmvec_preferred"]

MATH_FUNCTIONS = ("exp", "log", "tanh", "sigmoid", "erf", "erfc", "sin", "cos", "pow", "sqrt", "expm1", "log1p")
_BINARY = {"pow"}

# (function, dtype) pairs where libmvec is the default for vector types, per vector ISA
# (libmvec's AVX-512 and AVX2 variants are different code). Rule: libmvec when it was
# >= 1.2x faster than the polynomial and its max error in the sweeps stayed <= 3.5 ulp;
# exp stays polynomial everywhere (1 ulp, and it is in every softmax). The measurements
# behind both tables: docs/codegen.md ("libmvec or polynomial").
LIBMVEC_PREFERRED_AVX512 = frozenset({
    ("sin", "f32"), ("sin", "f64"), ("cos", "f32"), ("cos", "f64"),
    ("erf", "f64"), ("expm1", "f32"), ("expm1", "f64"), ("log1p", "f32"), ("log1p", "f64"),
})
LIBMVEC_PREFERRED_AVX2 = frozenset({
    ("tanh", "f32"), ("tanh", "f64"), ("sin", "f32"), ("sin", "f64"), ("cos", "f32"), ("cos", "f64"),
    ("erf", "f32"), ("erf", "f64"), ("expm1", "f64"), ("log1p", "f32"), ("log1p", "f64"),
})


def libmvec_preferred() -> frozenset:
    """The (function, dtype) pairs this host calls libmvec for (by its vector width)."""
    from svod.codegen.jit import host_target_info

    return LIBMVEC_PREFERRED_AVX512 if host_target_info()["vector_bits"] >= 512 else LIBMVEC_PREFERRED_AVX2


LIBMVEC_PREFERRED = LIBMVEC_PREFERRED_AVX512  # the AVX-512 table (kept for callers of the old name)

# libmvec exports (glibc >= 2.22; tanh/erf/expm1/log1p since 2.35)
_MVEC_NAMES = {"exp", "log", "sin", "cos", "pow", "tanh", "erf", "expm1", "log1p"}

# ------------------------------------------------------------------------- libmvec


def _mvec_variant(name: str, is64: bool, lanes: int) -> tuple[str, int] | None:
    """The widest usable libmvec symbol for ``lanes`` lanes: (symbol, variant lanes)."""
    from svod.codegen.jit import host_target_info

    feats = host_target_info()["feature_set"]
    isas = [("e", 512)] if "avx512f" in feats else []
    isas += [("d", 256)] if "avx2" in feats else []
    isas += [("b", 128)]
    args = "vv" if name in _BINARY else "v"
    for letter, bits in isas:
        vl = bits // (64 if is64 else 32)
        if vl <= lanes and lanes % vl == 0:
            return f"_ZGV{letter}N{vl}{args}_{name}{'' if is64 else 'f'}", vl
    return None


def _use_mvec(name: str, ty: ir.Type, use_libmvec: bool | None) -> tuple[str, int] | None:
    if not _is_vec(ty) or name not in _MVEC_NAMES:
        return None
    from svod.codegen import jit

    if use_libmvec is None:
        key = (name, "f64" if isinstance(ty.element, ir.DoubleType) else "f32")
        use_libmvec = key in libmvec_preferred() and jit.libmvec_enabled()
    elif use_libmvec:
        use_libmvec = jit.libmvec_enabled()
    if not use_libmvec:
        return None
    found = _mvec_variant(name, isinstance(ty.element, ir.DoubleType), ty.count)
    if found is None:
        return None
    from llvmlite import binding as llvm

    return found if llvm.address_of_symbol(found[0]) else None


def _emit_mvec(b: ir.IRBuilder, ty: ir.VectorType, symbol: str, vl: int, args):
    vty = ir.VectorType(ty.element, vl)
    fn = b.module.globals.get(symbol) or ir.Function(
        b.module, ir.FunctionType(vty, [vty] * len(args)), symbol)
    if vl == ty.count:
        return b.call(fn, args)
    i32 = ir.IntType(32)
    parts = []
    for lo in range(0, ty.count, vl):
        mask = ir.Constant(ir.VectorType(i32, vl), [ir.Constant(i32, lo + i) for i in range(vl)])
        chunk = [b.shuffle_vector(a, ir.Constant(ty, ir.Undefined), mask) for a in args]
        parts.append(b.call(fn, chunk))
    while len(parts) > 1:  # concatenate pairwise
        w = parts[0].type.count
        mask = ir.Constant(ir.VectorType(i32, 2 * w), [ir.Constant(i32, i) for i in range(2 * w)])
        parts = [b.shuffle_vector(parts[i], parts[i + 1], mask) for i in range(0, len(parts), 2)]
    return parts[0]


# ------------------------------------------------------------------------- public API


def get_math_fn(module: ir.Module, name: str, ty: ir.Type, *, use_libmvec: bool | None = None
                ) -> ir.Function:
    """The function computing ``name`` elementwise on ``ty`` in ``module`` (defined once).

    ``ty`` is ``ir.FloatType()``, ``ir.DoubleType()`` or a vector of either; ``pow`` takes
    two arguments of ``ty``, the others one. ``use_libmvec``: None = per-function default
    (``libmvec_preferred()``), True = use libmvec when available for this type, False =
    polynomial. The function is internal and alwaysinline; call it with
    ``builder.call(fn, [x])``.
    """
    if name not in _EMITTERS:
        raise ValueError(f"vecmath: unknown function {name!r}; known: {', '.join(MATH_FUNCTIONS)}")
    st = ty.element if _is_vec(ty) else ty
    if not isinstance(st, (ir.FloatType, ir.DoubleType)):
        raise TypeError(f"vecmath.{name}: need float/double (or vector of), got {ty}")
    mvec = _use_mvec(name, ty, use_libmvec)
    fname = f"svod.{name}.{_suffix(ty)}.{'mvec' if mvec else 'poly'}"
    fn = module.globals.get(fname)
    if fn is not None:
        return fn
    nargs = 2 if name in _BINARY else 1
    fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), fname)
    fn.linkage = "internal"
    fn.attributes.add("alwaysinline")
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    if mvec:
        res = _emit_mvec(b, ty, mvec[0], mvec[1], fn.args)
    else:
        res = _EMITTERS[name](_Em(b, ty), *fn.args)
    b.ret(res)
    return fn


# Functions whose exact scalar form branches (to libm for huge arguments), which stops the
# loop vectoriser when inlined into a loop body. emit_math calls them on scalars through
# noinline functions whose call sites name vector variants (LLVM's
# ``vector-function-abi-variant`` attribute), so loops still vectorise (_emit_loop_sincos).
_BRANCHY = frozenset({"sin", "cos"})


def _vf_widths(ebits: int, count: int = 2) -> list[int]:
    """Vector widths the loop vectoriser may pick for a loop whose widest element has
    ``ebits`` bits: the host's full register width, then halves (``count`` in all, each
    at least 128 bits). Narrowest first."""
    from svod.codegen.jit import host_target_info

    bits = host_target_info()["vector_bits"]
    return [bits // d // ebits for d in (4, 2, 1)[-count:] if bits // d >= 128]


def _keep_alive(module: ir.Module, fn: ir.Function) -> None:
    """List ``fn`` in ``@llvm.compiler.used``: LLVM ignores vector variants that are not
    in the module, and would delete an unreferenced one before the loop vectoriser runs."""
    i8p = ir.IntType(8).as_pointer()
    gv = module.globals.get("llvm.compiler.used")
    if gv is None:
        gv = ir.GlobalVariable(module, ir.ArrayType(i8p, 0), "llvm.compiler.used")
        gv.linkage = "appending"
        gv.section = "llvm.metadata"
        gv.svod_items = []
    if fn in gv.svod_items:
        return
    gv.svod_items.append(fn)
    # NOTE: llvmlite globals have a fixed element count: retype the (unreferenced) array.
    gv.value_type = ir.ArrayType(i8p, len(gv.svod_items))
    gv.initializer = ir.Constant(gv.value_type, [f.bitcast(i8p) for f in gv.svod_items])


def _define(module: ir.Module, fname: str, ty: ir.Type, nargs: int, body, *, inline: bool
            ) -> ir.Function:
    """The internal function ``fname``: ``ty`` x nargs -> ``ty``, defined once by ``body``."""
    fn = module.globals.get(fname)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(ty, [ty] * nargs), fname)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline" if inline else "noinline")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(body(b, *fn.args))
        if _is_vec(ty):
            _keep_alive(module, fn)
    return fn


def _vfabi_call(b: ir.IRBuilder, fn: ir.Function, args, variants) -> ir.Value:
    """``fn(args)`` whose call site names ``variants`` ((lanes, vector function), ...)."""
    params = "v" * len(args)
    attr = ",".join(f"_ZGV_LLVM_N{n}{params}_{fn.name}({vfn.name})" for n, vfn in variants)
    call = b.call(fn, list(args))
    # NOTE: llvmlite only accepts known call attributes: add the string ones directly.
    set.add(call.attributes, f'"vector-function-abi-variant"="{attr}"')
    set.add(call.attributes, "memory(none)")
    return call


def _emit_loop_mvec(b: ir.IRBuilder, name: str, x: ir.Value, widths: list[int], use_libmvec: bool | None
                    ) -> ir.Value:
    """``name`` of a scalar inside a loop the vectoriser will widen: a noinline call of the
    exact scalar function whose vector variants (at each of ``widths`` lanes) are the
    libmvec symbols, or wrappers of vecmath's vector functions where libmvec has no
    variant of that width."""
    module = b.module
    ty = x.type
    suf = _suffix(ty)
    variants = []
    for n in widths:
        vty = ir.VectorType(ty, n)
        mvec = _use_mvec(name, vty, use_libmvec)
        if mvec is not None and mvec[1] == n:
            vfn = module.globals.get(mvec[0]) or ir.Function(
                module, ir.FunctionType(vty, [vty]), mvec[0])
            _keep_alive(module, vfn)
        else:
            vfn = _define(module, f"svod.{name}.{_suffix(vty)}.vf", vty, 1, lambda bb, v, vty=vty:
                          bb.call(get_math_fn(module, name, vty, use_libmvec=use_libmvec), [v]),
                          inline=False)
        variants.append((n, vfn))
    exact = _define(module, f"svod.{name}.{suf}.loop", ty, 1, lambda bb, v:
                    bb.call(get_math_fn(module, name, ty, use_libmvec=False), [v]), inline=False)
    return _vfabi_call(b, exact, [x], variants)


# Functions whose scalar polynomial is slow enough (erf: float32 computed in float64) that
# a loop calls libmvec's vector variants instead, where the host prefers libmvec for them.
_LOOP_MVEC = frozenset({"erf"})


def _loop_widths(suf: str) -> list[int]:
    # a loop mixing float and double vectorises at the double width: offer both
    return _vf_widths(64 if suf == "f64" else 32) if suf == "f64" else \
        sorted(set(_vf_widths(32, 1) + _vf_widths(64, 1)))


def _emit_loop_sincos(b: ir.IRBuilder, name: str, x: ir.Value, use_libmvec: bool | None
                      ) -> ir.Value:
    """sin/cos of a scalar, exact for every input, vectorisable by LLVM's loop vectoriser.

    * libmvec route (when emit_math would use it for the full vector width): a noinline
      call of the exact scalar function, vector variants = the libmvec symbols (exact for
      every finite input) or wrappers of vecmath's vector functions.
    * polynomial route: the straight-line polynomial inline (exact for |x| < 4e9), then a
      noinline call ``fix(x, fast)`` whose vector variants test the lanes for |x| >= 4e9
      and recompute only those through libm. The polynomial stays in the loop body (no
      call overhead inside it); the per-vector test costs a call and a mask compare.
    """
    module = b.module
    ty = x.type
    suf = _suffix(ty)
    want_cos = name == "cos"
    widths = _loop_widths(suf)
    if _use_mvec(name, ir.VectorType(ty, widths[-1]), use_libmvec):
        return _emit_loop_mvec(b, name, x, widths, use_libmvec)
    fast = _define(module, f"svod.{name}.{suf}.fast", ty, 1, lambda bb, v:
                   _sincos(_Em(bb, ty), v, want_cos, exact=False), inline=True)
    variants = []
    # NOTE: the polynomial computes in double, so the loop's VF is the double width. Each
    # variant costs ~3 ms of compile time: offer only that one (at another VF LLVM would
    # call the scalar fix per element — slower, still exact).
    for n in _vf_widths(64, 1):
        vty = ir.VectorType(ty, n)
        variants.append((n, _define(module, f"svod.{name}.{_suffix(vty)}.fix", vty, 2,
                                    lambda bb, v, f, vty=vty: _fix_sincos(_Em(bb, vty), v, f, want_cos),
                                    inline=False)))
    fix = _define(module, f"svod.{name}.{suf}.fix", ty, 2, lambda bb, v, f:
                  _fix_sincos(_Em(bb, ty), v, f, want_cos), inline=False)
    return _vfabi_call(b, fix, [x, b.call(fast, [x])], variants)


def emit_math(builder: ir.IRBuilder, name: str, *args: ir.Value, use_libmvec: bool | None = None
              ) -> ir.Value:
    """Call ``name`` on ``args`` at the builder's position (declaring it on first use).

    On scalars, sin and cos go through _emit_loop_sincos: exact for every input (libm
    for |x| >= 4e9) while a loop around the call still vectorises.
    """
    ty = args[0].type
    if name in _BRANCHY and isinstance(ty, (ir.FloatType, ir.DoubleType)):
        return _emit_loop_sincos(builder, name, args[0], use_libmvec)
    if name in _LOOP_MVEC and isinstance(ty, (ir.FloatType, ir.DoubleType)):
        widths = _loop_widths(_suffix(ty))
        if _use_mvec(name, ir.VectorType(ty, widths[-1]), use_libmvec):
            return _emit_loop_mvec(builder, name, args[0], widths, use_libmvec)
    fn = get_math_fn(builder.module, name, ty, use_libmvec=use_libmvec)
    return builder.call(fn, list(args))


def math_kernel_ir(name: str, dtype: str, *, lanes: int | None = None,
                   use_libmvec: bool | None = None, symbol: str = "kernel") -> str:
    """IR text of ``void symbol(T* noalias out, T* noalias a[, T* noalias b], i64 n)``
    applying ``name`` elementwise: a ``lanes``-wide vector loop plus a scalar tail.

    ``dtype`` is ``"float32"`` or ``"float64"``; ``lanes`` defaults to the host's vector
    width. Used by tests, benchmarks and calibration to time one math function.
    """
    from svod.codegen.jit import host_target_info

    st = ir.DoubleType() if dtype == "float64" else ir.FloatType()
    if lanes is None:
        lanes = host_target_info()["vector_bits"] // (64 if dtype == "float64" else 32)
    vt = ir.VectorType(st, lanes)
    nin = 2 if name in _BINARY else 1
    i64 = ir.IntType(64)
    ptr = ir.PointerType(st)
    module = ir.Module(name=f"svod_math_{name}")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * (1 + nin) + [i64]), symbol)
    for a in fn.args[:-1]:
        a.add_attribute("noalias")
    out, ins, n = fn.args[0], fn.args[1:-1], fn.args[-1]
    vfn = get_math_fn(module, name, vt, use_libmvec=use_libmvec)
    sfn = get_math_fn(module, name, st, use_libmvec=use_libmvec)
    entry = fn.append_basic_block("entry")
    vloop, vexit = fn.append_basic_block("vloop"), fn.append_basic_block("vexit")
    sloop, done = fn.append_basic_block("sloop"), fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    nvec = b.mul(b.udiv(n, ir.Constant(i64, lanes)), ir.Constant(i64, lanes))
    b.cbranch(b.icmp_signed(">", nvec, ir.Constant(i64, 0)), vloop, vexit)
    b.position_at_end(vloop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    # NOTE: element alignment only: numpy buffers need not be vector-aligned.
    align = 8 if dtype == "float64" else 4
    args = [b.load(b.bitcast(b.gep(p, [i]), ir.PointerType(vt)), align=align) for p in ins]
    b.store(b.call(vfn, args), b.bitcast(b.gep(out, [i]), ir.PointerType(vt)), align=align)
    inext = b.add(i, ir.Constant(i64, lanes))
    i.add_incoming(inext, vloop)
    b.cbranch(b.icmp_signed("<", inext, nvec), vloop, vexit)
    b.position_at_end(vexit)
    b.cbranch(b.icmp_signed("<", nvec, n), sloop, done)
    b.position_at_end(sloop)
    j = b.phi(i64)
    j.add_incoming(nvec, vexit)
    sargs = [b.load(b.gep(p, [j])) for p in ins]
    b.store(b.call(sfn, sargs), b.gep(out, [j]))
    jnext = b.add(j, ir.Constant(i64, 1))
    j.add_incoming(jnext, sloop)
    b.cbranch(b.icmp_signed("<", jnext, n), sloop, done)
    b.position_at_end(done)
    b.ret_void()
    return str(module)
