"""The library (BLAS) step on svod's own threads: numpy's OpenBLAS, one thread per call.

Why: OpenBLAS runs a multi-threaded call on its own worker threads, and those threads
spin for about 2^28 cycles (~0.1 s) after every call before they sleep. On a machine
with as many cores as threads, a svod kernel that runs after a BLAS step shares its
cores with those spinning threads (docs/codegen.md has the measurement), and a BLAS
step that runs after a svod kernel shares them with svod's idle worker. So a library step calls OpenBLAS's
``cblas_?gemm`` from svod's pool instead: the product is cut into blocks of rows (or
of columns, for wide outputs) and batches, each block is one single-threaded gemm call,
and OpenBLAS's thread count is 1 while the step runs (and restored after it). No
OpenBLAS thread wakes, and the cores are svod's alone.

Matrix-vector products call ``cblas_?gemv``: ``A x`` as bands of the output; ``Aᵀ x``
(and ``x B``) as bands of A's contiguous rows, and a short ``A x`` as bands of A's
columns, each band a partial vector in bounded scratch, then the partials summed in
band order. The bands are a function of the shape alone, so these results are
bit-identical for any thread count (docs/codegen.md, "Matrix-vector products").

`matmul_into(a, b, out)` does this when it can: float32/float64 operands whose 2-D
slices are strided the way BLAS takes them (unit stride along one axis; transposes
are free), batch axes that collapse to one stride (broadcast batches have stride 0),
a C-contiguous `out`, and an OpenBLAS found in the process with the ILP64 ``cblas``
symbols numpy's wheels ship. Otherwise it returns False and the caller uses
``np.matmul``. ``SVOD_BLAS_THREADS=openblas`` turns the svod path off.

>>> import numpy as np
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3); b = np.ones((3, 2), np.float32)
>>> out = np.empty((2, 2), np.float32)
>>> matmul_into(a, b, out) in (True, False) and bool((out == a @ b).all()) or not available()
True
"""

from __future__ import annotations

import ctypes
import functools
import glob
import math
import os
import threading

import numpy as np

from svod.codegen.buffers import data_address
from svod.codegen.schedule import SMALL_FLOPS
from svod.runtime import pool_size, run_parallel

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
ALIGN = 16  # block edges on multiples of this (whole micro-tiles)
PARTS_PER_THREAD = 1  # blocks per thread (docs/codegen.md: more were no faster)

# ctx words (i64)
(F_GEMM, F_TA, F_TB, F_M, F_N, F_K, F_A, F_LDA, F_SA, F_AROW, F_B, F_LDB, F_SB, F_BCOL,
 F_C, F_LDC, F_SC, F_PARTS, F_COLS, F_BLOCK, F_ITEM, F_DOUBLE) = range(22)
_WORDS = 22

# (sgemm, dgemm, set_num_threads, get_num_threads, integer bits)
_SYMBOLS = [
    ("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", "scipy_openblas_set_num_threads64_",
     "scipy_openblas_get_num_threads64_", 64),
    ("cblas_sgemm64_", "cblas_dgemm64_", "openblas_set_num_threads64_", "openblas_get_num_threads64_", 64),
    ("cblas_sgemm", "cblas_dgemm", "openblas_set_num_threads", "openblas_get_num_threads", 32),
]


def _units_ir(name: str, words: list[str], bits: int, casts: list[str], setup: str, go: str, call) -> str:
    """``name(ctx, begin, end)``: one BLAS call per unit in [begin, end) of batch x parts
    blocks. ctx holds the i64 `words` (loaded as ``%word``); `setup` runs once, with
    ``%dim`` the length the parts cut; `go` computes, for the block [%lo, %hi) of batch
    index %bi, the call's operands, then `casts` narrows them to i`bits` (``%v.i``) and
    ``call(float type)`` calls single or double precision by ``%double``."""
    loads = "\n".join(f"  %{w}p = getelementptr i64, ptr %ctx, i64 {i}\n  %{w} = load i64, ptr %{w}p, align 8"
                      for i, w in enumerate(words))
    narrow = "\n".join(f"  %{v}.i = trunc i64 %{v} to i32" if bits == 32 else f"  %{v}.i = add i64 %{v}, 0"
                       for v in casts)
    return f"""
define void @{name}(ptr %ctx, i64 %begin, i64 %end) {{
entry:
{loads}
  %isd = icmp ne i64 %double, 0
{setup}
  br label %loop
loop:
  %u = phi i64 [ %begin, %entry ], [ %u1, %next ]
  %more = icmp ult i64 %u, %end
  br i1 %more, label %block.0, label %done
block.0:
  %bi = udiv i64 %u, %parts
  %p = urem i64 %u, %parts
  %lo = mul i64 %p, %block
  %hi0 = add i64 %lo, %block
  %hilt = icmp ult i64 %hi0, %dim
  %hi = select i1 %hilt, i64 %hi0, i64 %dim
  %empty = icmp uge i64 %lo, %hi
  br i1 %empty, label %next, label %go
go:
  %len = sub i64 %hi, %lo
{go}
{narrow}
  br i1 %isd, label %dcall, label %scall
scall:
{call("float")}
  br label %next
dcall:
{call("double")}
  br label %next
next:
  %u1 = add i64 %u, 1
  br label %loop
done:
  ret void
}}
"""


def _pointers(operands) -> str:
    """IR lines setting ``%p<name>`` to operand `name`'s block: base ``%p<name>0`` plus
    (batch index %bi x its batch stride word + its offset, elements) x %item bytes."""
    lines = []
    for name, stride, off in operands:
        lines.append(f"  %{name}.b = mul i64 %bi, %{stride}")
        elem = f"%{name}.b"
        if off is not None:
            lines.append(f"  %{name}.e = add i64 %{name}.b, %{off}")
            elem = f"%{name}.e"
        lines += [f"  %{name}.x = mul i64 {elem}, %item",
                  f"  %p{name} = getelementptr i8, ptr %p{name}0, i64 %{name}.x"]
    return "\n".join(lines)


def _job_ir(bits: int) -> str:
    """``svod_blas_units(ctx, begin, end)``: one gemm call per block in [begin, end) of the
    product's batch x parts blocks (ctx: the i64 words F_*; integers passed as i`bits`)."""
    it = f"i{bits}"
    words = ["gemm", "ta", "tb", "m", "n", "k", "a", "lda", "sa", "arow", "b", "ldb", "sb", "bcol",
             "c", "ldc", "sc", "parts", "cols", "block", "item", "double"]

    def call(fty: str) -> str:
        return (f"  call void %gemmf(i32 {ROW_MAJOR}, i32 %ta32, i32 %tb32, {it} %mm.i, {it} %nn.i, {it} %k.i, "
                f"{fty} 1.0, ptr %pa, {it} %lda.i, ptr %pb, {it} %ldb.i, {fty} 0.0, ptr %pc, {it} %ldc.i)")

    setup = """  %gemmf = inttoptr i64 %gemm to ptr
  %ta32 = trunc i64 %ta to i32
  %tb32 = trunc i64 %tb to i32
  %bycol = icmp ne i64 %cols, 0
  %dim = select i1 %bycol, i64 %n, i64 %m
  %pa0 = inttoptr i64 %a to ptr
  %pb0 = inttoptr i64 %b to ptr
  %pc0 = inttoptr i64 %c to ptr"""
    go = """  %arows = mul i64 %lo, %arow
  %bcols = mul i64 %lo, %bcol
  %crows = mul i64 %lo, %ldc
  %aoff = select i1 %bycol, i64 0, i64 %arows
  %boff = select i1 %bycol, i64 %bcols, i64 0
  %coff = select i1 %bycol, i64 %lo, i64 %crows
  %mm = select i1 %bycol, i64 %m, i64 %len
  %nn = select i1 %bycol, i64 %len, i64 %n
""" + _pointers([("a", "sa", "aoff"), ("b", "sb", "boff"), ("c", "sc", "coff")])
    return _units_ir("svod_blas_units", words, bits, ["mm", "nn", "k", "lda", "ldb", "ldc"], setup, go, call)


# gemv ctx words (i64)
(G_GEMV, G_TRANS, G_ROWS, G_COLS, G_A, G_LDA, G_SA, G_X, G_INCX, G_SX, G_Y, G_SY, G_PARTS, G_BLOCK, G_ITEM,
 G_DOUBLE) = range(16)
_GWORDS = 16


def _gemv_ir(bits: int) -> str:
    """``svod_blas_gemv_units(ctx, begin, end)``: one ``cblas_?gemv`` call per block in
    [begin, end) of batch x parts blocks of the output vector. The stored matrix is
    rows x cols row-major (leading dimension lda); without a transpose a block is a band
    of its rows, with one a band of its columns (ctx: the i64 words G_*)."""
    it = f"i{bits}"
    words = ["gemv", "trans", "rows", "cols", "a", "lda", "sa", "x", "incx", "sx", "y", "sy", "parts", "block",
             "item", "double"]

    def call(fty: str) -> str:
        return (f"  call void %gemvf(i32 {ROW_MAJOR}, i32 %tr32, {it} %rr.i, {it} %cc.i, {fty} 1.0, ptr %pa, "
                f"{it} %lda.i, ptr %px, {it} %incx.i, {fty} 0.0, ptr %py, {it} 1)")

    setup = f"""  %gemvf = inttoptr i64 %gemv to ptr
  %tr32 = trunc i64 %trans to i32
  %bycol = icmp eq i64 %trans, {TRANS}
  %dim = select i1 %bycol, i64 %cols, i64 %rows
  %pa0 = inttoptr i64 %a to ptr
  %px0 = inttoptr i64 %x to ptr
  %py0 = inttoptr i64 %y to ptr"""
    go = """  %arows = mul i64 %lo, %lda
  %aoff = select i1 %bycol, i64 %lo, i64 %arows
  %rr = select i1 %bycol, i64 %rows, i64 %len
  %cc = select i1 %bycol, i64 %len, i64 %cols
""" + _pointers([("a", "sa", "aoff"), ("x", "sx", None), ("y", "sy", "lo")])
    return _units_ir("svod_blas_gemv_units", words, bits, ["rr", "cc", "lda", "incx"], setup, go, call)


# row-split gemv ctx words (i64): phase 1 (`svod_blas_gemv_rows`) and phase 2 (`svod_blas_gemv_combine`)
(R_GEMV, R_ROWS, R_COLS, R_A, R_LDA, R_SA, R_X, R_INCX, R_SX, R_PART, R_PSTRIDE, R_SP, R_Y, R_SY, R_PARTS,
 R_BLOCK, R_CPARTS, R_CBLOCK, R_ITEM, R_DOUBLE, R_TRANS, R_OUTLEN) = range(22)
_RWORDS = 22
_R_NAMES = ["gemv", "rows", "cols", "a", "lda", "sa", "x", "incx", "sx", "part", "pstride", "sp", "y", "sy",
            "parts", "block", "cparts", "cblock", "item", "double", "trans", "outlen"]


def _gemv_rows_ir(bits: int) -> str:
    """``svod_blas_gemv_rows(ctx, begin, end)``: a matrix-vector product of a row-major
    rows x cols matrix cut along its reduction axis: with `trans` (y = Aᵀ x) bands of
    `block` rows of A, without (y = A x) bands of `block` columns; one ``cblas_?gemv``
    per band in [begin, end) of batch x parts bands, each writing its own partial vector
    (outlen long) into the scratch rows ``part + (bi * parts + p) * pstride`` (ctx: R_*)."""
    it = f"i{bits}"

    def call(fty: str) -> str:
        return (f"  call void %gemvf(i32 {ROW_MAJOR}, i32 %tr32, {it} %rr.i, {it} %cc.i, {fty} 1.0, ptr %pa, "
                f"{it} %lda.i, ptr %px, {it} %incx.i, {fty} 0.0, ptr %py, {it} 1)")

    setup = f"""  %gemvf = inttoptr i64 %gemv to ptr
  %tr32 = trunc i64 %trans to i32
  %bycol = icmp eq i64 %trans, {NO_TRANS}
  %dim = select i1 %bycol, i64 %cols, i64 %rows
  %pa0 = inttoptr i64 %a to ptr
  %px0 = inttoptr i64 %x to ptr
  %py0 = inttoptr i64 %part to ptr"""
    go = """  %arows = mul i64 %lo, %lda
  %aoff = select i1 %bycol, i64 %lo, i64 %arows
  %rr = select i1 %bycol, i64 %rows, i64 %len
  %cc = select i1 %bycol, i64 %len, i64 %cols
  %xoff = mul i64 %lo, %incx
  %poff = mul i64 %p, %pstride
""" + _pointers([("a", "sa", "aoff"), ("x", "sx", "xoff"), ("y", "sp", "poff")])
    return _units_ir("svod_blas_gemv_rows", _R_NAMES, bits, ["rr", "cc", "lda", "incx"], setup, go, call)


def _combine_ir() -> str:
    """``svod_blas_gemv_combine(ctx, begin, end)``: for each unit of batch x cparts chunks
    of `cblock` output elements, y[j] = ((p_0[j] + p_1[j]) + p_2[j]) + ... over the
    batch's `parts` partial vectors, in that order (each element's sum is the same
    whatever the chunking; the loop vectorises across j, never across partials)."""
    loads = "\n".join(f"  %{w}p = getelementptr i64, ptr %ctx, i64 {i}\n  %{w} = load i64, ptr %{w}p, align 8"
                      for i, w in enumerate(_R_NAMES))
    typed = []
    for fty in ("float", "double"):
        typed.append(f"""
define internal void @svod_combine_{fty}(ptr %pp, i64 %pstride, i64 %parts, ptr %py, i64 %sy, i64 %dim,
                                          i64 %cblock, i64 %cparts, i64 %begin, i64 %end) {{
entry:
  br label %uloop
uloop:
  %u = phi i64 [ %begin, %entry ], [ %u1, %unext ]
  %more = icmp ult i64 %u, %end
  br i1 %more, label %ubody, label %done
ubody:
  %bi = udiv i64 %u, %cparts
  %c = urem i64 %u, %cparts
  %lo = mul i64 %c, %cblock
  %hi0 = add i64 %lo, %cblock
  %hilt = icmp ult i64 %hi0, %dim
  %hi = select i1 %hilt, i64 %hi0, i64 %dim
  %empty = icmp uge i64 %lo, %hi
  br i1 %empty, label %unext, label %first
first:
  %ybase = mul i64 %bi, %sy
  %bp = mul i64 %bi, %parts
  %pbase = mul i64 %bp, %pstride
  br label %copy
copy:
  %j0 = phi i64 [ %lo, %first ], [ %j0n, %copy ]
  %s0i = add i64 %pbase, %j0
  %s0p = getelementptr {fty}, ptr %pp, i64 %s0i
  %s0 = load {fty}, ptr %s0p
  %d0i = add i64 %ybase, %j0
  %d0p = getelementptr {fty}, ptr %py, i64 %d0i
  store {fty} %s0, ptr %d0p
  %j0n = add i64 %j0, 1
  %c0 = icmp ult i64 %j0n, %hi
  br i1 %c0, label %copy, label %bloop
bloop:
  %b = phi i64 [ 1, %copy ], [ %b1, %addend ]
  %bmore = icmp ult i64 %b, %parts
  br i1 %bmore, label %bstart, label %unext
bstart:
  %bo = mul i64 %b, %pstride
  %src = add i64 %pbase, %bo
  br label %add
add:
  %j = phi i64 [ %lo, %bstart ], [ %jn, %add ]
  %si = add i64 %src, %j
  %sp = getelementptr {fty}, ptr %pp, i64 %si
  %sv = load {fty}, ptr %sp
  %di = add i64 %ybase, %j
  %dp = getelementptr {fty}, ptr %py, i64 %di
  %dv = load {fty}, ptr %dp
  %r = fadd {fty} %dv, %sv
  store {fty} %r, ptr %dp
  %jn = add i64 %j, 1
  %cj = icmp ult i64 %jn, %hi
  br i1 %cj, label %add, label %addend
addend:
  %b1 = add i64 %b, 1
  br label %bloop
unext:
  %u1 = add i64 %u, 1
  br label %uloop
done:
  ret void
}}
""")
    return "".join(typed) + f"""
define void @svod_blas_gemv_combine(ptr %ctx, i64 %begin, i64 %end) {{
entry:
{loads}
  %pp = inttoptr i64 %part to ptr
  %py = inttoptr i64 %y to ptr
  %isd = icmp ne i64 %double, 0
  br i1 %isd, label %d, label %f
f:
  call void @svod_combine_float(ptr %pp, i64 %pstride, i64 %parts, ptr %py, i64 %sy, i64 %outlen, i64 %cblock,
                                i64 %cparts, i64 %begin, i64 %end)
  ret void
d:
  call void @svod_combine_double(ptr %pp, i64 %pstride, i64 %parts, ptr %py, i64 %sy, i64 %outlen, i64 %cblock,
                                 i64 %cparts, i64 %begin, i64 %end)
  ret void
}}
"""


class _Blas:
    def __init__(self, lib: ctypes.CDLL, names: tuple):
        s, d, setn, getn, bits = names
        self.sgemm = ctypes.cast(getattr(lib, s), ctypes.c_void_p).value
        self.dgemm = ctypes.cast(getattr(lib, d), ctypes.c_void_p).value
        self.set_threads = getattr(lib, setn)
        self.set_threads.argtypes, self.set_threads.restype = [ctypes.c_int], None
        self.get_threads = getattr(lib, getn)
        self.get_threads.argtypes, self.get_threads.restype = [], ctypes.c_int
        self.bits = bits
        self.lib_path = lib._name
        from svod.codegen.jit import compile_ir

        gv = [getattr(lib, n.replace("gemm", "gemv"), None) for n in (s, d)]
        self.sgemv, self.dgemv = (ctypes.cast(f, ctypes.c_void_p).value if f is not None else None for f in gv)
        self.module = compile_ir(_job_ir(bits) + _gemv_ir(bits) + _gemv_rows_ir(bits) + _combine_ir(),
                                 name=f"svod_blas{bits}")
        self.units_fn = self.module.address("svod_blas_units")
        self.gemv_fn = self.module.address("svod_blas_gemv_units")
        self.rows_fn = self.module.address("svod_blas_gemv_rows")
        self.combine_fn = self.module.address("svod_blas_gemv_combine")
        entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
        self.rows_call, self.combine_call = entry(self.rows_fn), entry(self.combine_fn)
        self.gemv_call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(self.gemv_fn)
        self.units_call = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(self.units_fn)
        self._lock = threading.Lock()
        self._inside = 0
        self._saved = 1

    def __enter__(self):
        with self._lock:
            if self._inside == 0:
                self._saved = self.get_threads()
                if self._saved != 1:
                    self.set_threads(1)
            self._inside += 1
        return self

    def __exit__(self, *exc):
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._saved != 1:
                self.set_threads(self._saved)
        return False


_blas: list[_Blas | None] = []
_blas_lock = threading.Lock()


def _after_fork_in_child() -> None:
    """A fork during another thread's library step must not leave the child's lock held
    (OpenBLAS's thread count is the parent's, restored or not: reset it to what it was)."""
    global _blas_lock
    _blas_lock = threading.Lock()
    _SCRATCH.lock = threading.Lock()
    if _blas and _blas[0] is not None:
        lib = _blas[0]
        lib._lock = threading.Lock()
        if lib._inside:
            lib._inside = 0
            if lib._saved != 1:
                lib.set_threads(lib._saved)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _candidates() -> list[str]:
    """OpenBLAS shared objects in the process (numpy's wheel bundles one in numpy.libs)."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.rsplit(None, 1)[-1] if "/" in line else ""
                if "openblas" in os.path.basename(p).lower() and p not in paths:
                    paths.append(p)
    except OSError:
        pass
    base = os.path.dirname(np.__file__)
    for pat in ("../numpy.libs/*openblas*.so*", ".dylibs/*openblas*", "../numpy/.dylibs/*openblas*"):
        found = (os.path.realpath(p) for p in sorted(glob.glob(os.path.join(base, pat))))
        paths += [p for p in found if p not in paths]
    return paths


def _load() -> _Blas | None:
    if os.environ.get("SVOD_BLAS_THREADS", "").lower() == "openblas":
        return None
    np.ones((2, 2), np.float32) @ np.ones((2, 2), np.float32)  # numpy's BLAS is loaded
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for names in _SYMBOLS:
            if all(hasattr(lib, n) for n in names[:4]):
                try:
                    return _Blas(lib, names)
                except Exception as e:  # noqa: BLE001 - numpy's matmul does the step instead
                    import warnings

                    from svod.errors import user_stacklevel

                    warnings.warn(f"svod: library steps use numpy's matmul (OpenBLAS binding failed: {e})",
                                  RuntimeWarning, stacklevel=user_stacklevel())
                    return None
    return None


def blas() -> _Blas | None:
    """The OpenBLAS binding, or None when there is none (then library steps call np.matmul)."""
    if not _blas:
        with _blas_lock:
            if not _blas:
                _blas.append(_load())
    return _blas[0]


def available() -> bool:
    return blas() is not None


def _layout(rows: int, cols: int, sr: int, sc: int) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a rows x cols matrix with element strides
    (sr, sc) as row-major BLAS takes it, or None when BLAS cannot read it in place."""
    if (sc == 1 or cols == 1) and (rows == 1 or sr >= max(cols, 1)):
        return NO_TRANS, (sr if rows > 1 else max(cols, 1))
    if (sr == 1 or rows == 1) and (cols == 1 or sc >= max(rows, 1)):
        return TRANS, (sc if cols > 1 else max(rows, 1))
    return None


def _batch_stride(shape: tuple, strides: tuple) -> int | None:
    """One element stride that walks all batch axes in order (C order), or None."""
    dims = [(n, s) for n, s in zip(shape, strides) if n != 1]
    if not dims:
        return 0
    step = dims[-1][1]
    for (_, s_out), (n_in, s_in) in zip(dims[:-1], dims[1:]):
        if s_out != s_in * n_in:
            return None
    return step


def matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int | None = None) -> bool:
    """``out[...] = a @ b`` on svod's pool with single-threaded gemm calls; False (nothing
    written) when this path does not apply. `a` is (..., m, k), `b` (..., k, n), `out`
    the broadcast (..., m, n), C-contiguous. The layout work is cached per shapes and
    strides: a call costs a few µs besides the gemm calls."""
    lib = blas()
    if lib is None or not out.flags.c_contiguous:
        return False
    plan = _plan(a.shape, a.strides, b.shape, b.strides, out.shape, a.dtype.char, b.dtype.char, out.dtype.char,
                 threads or 0)
    if plan is None:
        return False
    if plan is _EMPTY:
        if out.size:
            out[...] = 0  # k == 0: the sum over nothing
        return True
    ctx, units, nt, tiny, gemv, split = plan
    ctx = ctx.copy()
    if split is not None:
        return _gemv_rows_into(lib, a, b, out, ctx, units, nt, tiny, gemv, split)
    if gemv == "a":  # y = A x: A is the matrix
        ctx[G_A], ctx[G_X], ctx[G_Y] = data_address(a), data_address(b), data_address(out)
    elif gemv == "b":  # y = x B: B is the matrix
        ctx[G_A], ctx[G_X], ctx[G_Y] = data_address(b), data_address(a), data_address(out)
    else:
        ctx[F_A], ctx[F_B], ctx[F_C] = data_address(a), data_address(b), data_address(out)
    fn, call = (lib.gemv_fn, lib.gemv_call) if gemv else (lib.units_fn, lib.units_call)
    if tiny:  # OpenBLAS runs these on the calling thread whatever its thread count
        call(data_address(ctx), 0, units)
        return True
    with lib:
        if nt == 1:
            call(data_address(ctx), 0, units)
        else:
            run_parallel(fn, data_address(ctx), units, nt)
    return True


_EMPTY = ("empty",)


def _gemv_rows_into(lib, a, b, out, ctx, units, nt, tiny, gemv, split) -> bool:
    """The split of a matrix-vector product's reduction axis (`_gemv_plan`): bands of the
    matrix, each a partial vector in scratch, then the partials summed in band order by
    chunks of the output."""
    cunits, nbytes = split
    mat, vec = (a, b) if gemv == "a" else (b, a)
    buf = _SCRATCH.take(nbytes)
    try:
        ctx[R_A], ctx[R_X], ctx[R_Y], ctx[R_PART] = (data_address(mat), data_address(vec), data_address(out),
                                                     data_address(buf))
        c = data_address(ctx)
        if tiny:
            lib.rows_call(c, 0, units)
            lib.combine_call(c, 0, cunits)
            return True
        with lib:
            if nt == 1:
                lib.rows_call(c, 0, units)
            else:
                run_parallel(lib.rows_fn, c, units, nt)
        run_parallel(lib.combine_fn, c, cunits, nt)
    finally:
        _SCRATCH.give(buf)
    return True


SCRATCH_MAX = 8 << 20  # bytes of partial vectors a row-split product may use
MIN_BAND_ROWS = 128  # rows of the matrix per band of the row split (at least)
MIN_BAND_COLS = 4096  # columns per band of the column split of a short A x (at least: each run a gemv reads)
SHORT_OUTPUT = 256  # A x with fewer rows than this splits A's columns (16 rows a thread leaves 16 threads busy)
MAX_BANDS = 64  # bands of the row split (at most): the threads it can keep busy


class _ScratchPool:
    """Scratch for the partial vectors: 64-byte aligned buffers of at most SCRATCH_MAX
    bytes, at most `keep` of them kept between calls (a call from a second Python thread
    while one is in use allocates its own)."""

    def __init__(self, keep: int = 2):
        self.keep, self.free, self.lock = keep, [], threading.Lock()

    def take(self, nbytes: int) -> np.ndarray:
        with self.lock:
            for i, buf in enumerate(self.free):
                if buf.nbytes >= nbytes:
                    return self.free.pop(i)
        raw = np.empty(nbytes + 64, np.uint8)
        off = -raw.ctypes.data % 64
        return raw[off:off + nbytes]

    def clear(self) -> None:
        """Drop the kept buffers (`svod.reset`)."""
        with self.lock:
            self.free.clear()

    def give(self, buf: np.ndarray) -> None:
        with self.lock:
            if len(self.free) < self.keep:
                self.free.append(buf)
            else:  # keep the largest
                self.free.sort(key=lambda v: v.nbytes)
                if self.free[0].nbytes < buf.nbytes:
                    self.free[0] = buf


_SCRATCH = _ScratchPool()


@functools.lru_cache(maxsize=512)
def _plan(a_shape, a_strides, b_shape, b_strides, out_shape, ca, cb, co, threads):
    """(ctx words without the data addresses, units, threads) for a product of this
    layout, `_EMPTY` when there is nothing to multiply, or None when BLAS cannot take it."""
    lib = blas()
    if len(a_shape) < 2 or len(b_shape) < 2 or not (ca == cb == co) or ca not in "fd":
        return None
    m, k = a_shape[-2:]
    n = b_shape[-1]
    batch_shape = out_shape[:-2]
    if b_shape[-2] != k or out_shape[-2:] != (m, n):
        return None
    if math.prod(out_shape) == 0 or k == 0:
        return _EMPTY
    item = 8 if ca == "d" else 4
    if any(s % item for s in a_strides + b_strides):
        return None
    sa = tuple(s // item for s in a_strides)
    sb = tuple(s // item for s in b_strides)
    la, lb = _layout(m, k, sa[-2], sa[-1]), _layout(k, n, sb[-2], sb[-1])
    if la is None or lb is None or min(sa + sb, default=0) < 0:
        return None
    batch = math.prod(batch_shape)
    if lib.bits == 32 and max(m, n, k, la[1], lb[1]) >= 2 ** 31:
        return None
    bsa = _batch_stride(*_broadcast_batch(a_shape, batch_shape, sa))
    bsb = _batch_stride(*_broadcast_batch(b_shape, batch_shape, sb))
    if bsa is None or bsb is None:
        return None
    flops = 2.0 * batch * m * n * k
    nt = 1 if flops < SMALL_FLOPS else max(1, threads or pool_size())
    if (n == 1 or m == 1) and (lib.sgemv if ca == "f" else lib.dgemv):
        g = _gemv_plan(lib, m, n, k, sa, sb, la, lb, bsa, bsb, batch, ca, item, nt)
        if g is not None:
            return g
    cols = n > m  # cut the longer side of the output
    dim = n if cols else m
    parts, block = _parts(dim, batch, nt)
    ctx = np.zeros(_WORDS, np.int64)
    ctx[F_GEMM] = lib.dgemm if ca == "d" else lib.sgemm
    ctx[F_TA], ctx[F_TB] = la[0], lb[0]
    ctx[F_M], ctx[F_N], ctx[F_K] = m, n, k
    ctx[F_LDA], ctx[F_SA], ctx[F_AROW] = la[1], bsa, sa[-2]
    ctx[F_LDB], ctx[F_SB], ctx[F_BCOL] = lb[1], bsb, sb[-1]
    ctx[F_LDC], ctx[F_SC] = n, m * n
    ctx[F_PARTS], ctx[F_COLS], ctx[F_BLOCK] = parts, int(cols), block
    ctx[F_ITEM], ctx[F_DOUBLE] = item, int(ca == "d")
    # OpenBLAS's own rule: m*n*k at most 65536 x GEMM_MULTITHREAD_THRESHOLD (4) stays on one thread
    return ctx, batch * parts, nt, batch == 1 and m * n * k <= 65536 * 4, None, None


def _parts(dim: int, batch: int, nt: int) -> tuple[int, int]:
    """(parts, block): `dim` cut into blocks of `block` (a multiple of ALIGN when cut),
    enough that batch x parts spreads evenly over `nt` threads (each block packs its own
    panels, so no more than that), at most one per ALIGN rows."""
    per = PARTS_PER_THREAD * nt
    parts = max(1, min(per // math.gcd(batch, per), -(-dim // ALIGN)))
    block = -(-dim // parts)
    if parts > 1:
        block = -(-block // ALIGN) * ALIGN
        parts = -(-dim // block)
    return parts, block


def _gemv_plan(lib, m, n, k, sa, sb, la, lb, bsa, bsb, batch, ca, item, nt):
    """A matrix times a vector (n == 1: ``A x``; m == 1: ``x B``) as ``cblas_?gemv`` calls
    (a gemm call with n = 1 packs and runs the GEMM machinery for one column,
    docs/codegen.md). When the stored matrix is read along its rows (``Aᵀ x`` of a
    row-major A, ``x B``) and the product is not small: bands of the matrix's rows, each
    a partial output vector, then an in-order combine (`_row_bands`); likewise bands of
    its columns for ``A x`` with fewer than SHORT_OUTPUT rows (output bands would leave
    threads idle); otherwise the output vector cut into `nt` bands per batch, each band
    a run of whole dot products.
    None when the vector's stride is not positive (gemm then)."""
    if n == 1:  # y (m) = A (m x k) x (k), x's stride along k: b's row stride
        trans, ld = la
        mat_b, vec_b, inc = bsa, bsb, sb[-2] if k > 1 else 1
        rows, cols = (m, k) if trans == NO_TRANS else (k, m)
        which, out_len = "a", m
    else:  # y (n) = x (k) B (k x n) = B^T x, x's stride along k: a's column stride
        trans0, ld = lb
        trans = TRANS if trans0 == NO_TRANS else NO_TRANS
        mat_b, vec_b, inc = bsb, bsa, sa[-1] if k > 1 else 1
        rows, cols = (k, n) if trans0 == NO_TRANS else (n, k)
        which, out_len = "b", n
    if inc <= 0:
        return None
    # OpenBLAS's gemv runs on its own threads from rows x cols >= 2304 x GEMM_MULTITHREAD_THRESHOLD (4)
    tiny = batch == 1 and rows * cols < 2304 * 4
    # under SMALL_FLOPS one thread runs the product whatever the pool (a function of the
    # shape, so the choice stays independent of the thread count): one call is cheapest
    if 2.0 * batch * rows * cols >= SMALL_FLOPS and (trans == TRANS or out_len < SHORT_OUTPUT):
        red = rows if trans == TRANS else cols
        bands = _row_bands(red, out_len, batch, item, MIN_BAND_ROWS if trans == TRANS else MIN_BAND_COLS)
        if bands is not None:
            return _rows_plan(lib, trans, rows, cols, ld, mat_b, inc, vec_b, out_len, batch, ca, item, nt, bands,
                              which)
    parts, block = _parts(out_len, batch, nt)
    ctx = np.zeros(_GWORDS, np.int64)
    ctx[G_GEMV] = lib.dgemv if ca == "d" else lib.sgemv
    ctx[G_TRANS], ctx[G_ROWS], ctx[G_COLS] = trans, rows, cols
    ctx[G_LDA], ctx[G_SA], ctx[G_INCX], ctx[G_SX], ctx[G_SY] = ld, mat_b, inc, vec_b, out_len
    ctx[G_PARTS], ctx[G_BLOCK], ctx[G_ITEM], ctx[G_DOUBLE] = parts, block, item, int(ca == "d")
    return ctx, batch * parts, nt, tiny, which, None


def _pstride(out_len: int, item: int) -> int:
    """Elements between partial vectors: out_len rounded up to whole 64-byte lines."""
    per = 64 // item
    return -(-out_len // per) * per


def _row_bands(rows: int, out_len: int, batch: int, item: int, least: int = 0) -> tuple[int, int] | None:
    """(bands, length of a band) of the reduction axis (`rows` long) of a matrix-vector
    product, or None when the output bands do instead. A function of the shape alone,
    never of the thread count: the same bands (the same gemv calls) and the same combine
    order on any number of threads, so the result is bit-identical across thread counts.
    Bands of at least `least` (default MIN_BAND_ROWS) along the axis (each band writes and
    the combine reads one partial vector, so the extra traffic is at most 2 / `least` of
    the matrix's), at most MAX_BANDS, and the partials within SCRATCH_MAX bytes; fewer
    than two bands: None."""
    per = batch * _pstride(out_len, item) * item
    bands = min(MAX_BANDS, rows // (least or MIN_BAND_ROWS), SCRATCH_MAX // per)
    if bands < 2:
        return None
    block = -(-rows // bands)
    block = -(-block // ALIGN) * ALIGN
    return -(-rows // block), block


def _rows_plan(lib, trans, rows, cols, ld, mat_b, inc, vec_b, out_len, batch, ca, item, nt, bands, which):
    """The plan of a split of the reduction axis: ctx words R_*, the band units, and
    (combine units, scratch bytes)."""
    parts, block = bands
    pstride = _pstride(out_len, item)
    cparts, cblock = _parts(out_len, batch, nt)
    ctx = np.zeros(_RWORDS, np.int64)
    ctx[R_GEMV] = lib.dgemv if ca == "d" else lib.sgemv
    ctx[R_ROWS], ctx[R_COLS], ctx[R_LDA], ctx[R_SA] = rows, cols, ld, mat_b
    ctx[R_INCX], ctx[R_SX], ctx[R_PSTRIDE], ctx[R_SP] = inc, vec_b, pstride, parts * pstride
    ctx[R_SY], ctx[R_PARTS], ctx[R_BLOCK] = out_len, parts, block
    ctx[R_CPARTS], ctx[R_CBLOCK], ctx[R_ITEM], ctx[R_DOUBLE] = cparts, cblock, item, int(ca == "d")
    ctx[R_TRANS], ctx[R_OUTLEN] = trans, out_len
    return ctx, batch * parts, nt, False, which, (batch * cparts, batch * parts * pstride * item)


def gemv_split(a: np.ndarray, b: np.ndarray, out: np.ndarray, threads: int | None = None) -> str:
    """How `matmul_into(a, b, out, threads)` runs this product, in words (benchmarks print it)."""
    lib = blas()
    plan = None if lib is None else _plan(a.shape, a.strides, b.shape, b.strides, out.shape, a.dtype.char,
                                          b.dtype.char, out.dtype.char, threads or 0)
    if plan is None or plan is _EMPTY:
        return "numpy" if plan is None else "empty"
    ctx, units, nt, tiny, gemv, split = plan
    where = "calling thread" if tiny else f"{nt} thread{'s' * (nt > 1)}"
    if gemv is None:
        return f"gemm, {units} blocks, {where}"
    if split is not None:
        axis = "rows" if ctx[R_TRANS] == TRANS else "columns"
        return f"{axis[:-1]} split: {ctx[R_PARTS]} bands of {ctx[R_BLOCK]} {axis} + combine, {where}"
    return f"output bands: {ctx[G_PARTS]} of {ctx[G_BLOCK]}, {where}"


def _broadcast_batch(shape: tuple, batch_shape: tuple, strides: tuple) -> tuple[tuple, tuple]:
    """An operand's batch axes broadcast to `batch_shape` (stride 0 where it broadcasts)."""
    lead = len(batch_shape) - (len(shape) - 2)
    full = (1,) * lead + tuple(shape[:-2])
    st = (0,) * lead + tuple(strides[:-2])
    return batch_shape, tuple(0 if n == 1 else s for n, s in zip(full, st))
