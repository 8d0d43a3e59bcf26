"""Programs: compiled kernels ready to launch (`compile_kernel(kernel) -> Program`).

A Program runs one Kernel over flat contiguous slot buffers::

    prog = compile_kernel(kernel)
    prog.run({slot: array, ...}, threads=2)   # or a list indexed by slot

Inputs must be present; outputs should be pre-allocated (right dtype and size) by the
caller — a missing output slot is allocated and put into the dict. Kinds:

* ``native``: LLVM code (`svod.codegen.lower`), entry ``void f(i8** slots, i64 ub,
  i64 ue)`` over ``units`` parallel work units, split across threads by
  `svod.runtime.run_parallel`.
* ``library``: a library call (``Kernel.library``: numpy's sorting, LAPACK, ... through
  `svod.library`) or a BLAS step (``matmul.library``): numpy's OpenBLAS on the operand views,
  written into the output buffer, as one-thread gemm calls on blocks of the product
  spread over svod's pool (`svod.codegen.blas`: OpenBLAS's own threads would spin
  after the call on the cores the next kernel runs on).
* ``interpreted``: the fallback when lowering or compiling fails (one `SvodWarning`
  naming the kernel and the file holding its IR); results stay correct.

Ownership: a Program lives as long as something that runs it does — the plans
(`svod.executable.KernelPlan`), graph programs and jit traces that hold it. The registry
here only *finds* live programs by `Kernel.key()` (weak references: two plans with the
same kernel share one program, and nothing is compiled twice while one is alive); it
never keeps one alive, so evicting the last plan that uses a kernel frees its engine
and code pages. A kernel needed again is reloaded from the persistent object cache
(kind "objects", keyed by the kernel key + LLVM/llvmlite version + host CPU and
features: ~1 ms) instead of compiled. `Program.nbytes` is the memory a program holds,
measured when its engine is made (`svod.codegen.jit.CompiledModule.nbytes`), and
`live_programs()` counts what the process holds.

>>> import numpy as np
>>> from svod.kernel_examples import softmax_kernel, softmax_reference
>>> x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
>>> bufs = {0: x.reshape(-1), 1: np.empty(32, np.float32)}
>>> compile_kernel(softmax_kernel(4, 8)).run(bufs)
>>> bool(np.allclose(bufs[1].reshape(4, 8), softmax_reference(x), atol=1e-6))
True
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import threading
import time
import warnings
import weakref

import numpy as np

from svod.codegen.objcache import load_cached, object_key, store_object
from svod.codegen.schedule import schedule
from svod.kernel import Kernel
from svod.stats import bump

_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)

# NOTE: weak values: this finds live programs, their owners keep them (module docstring)
_programs: weakref.WeakValueDictionary[str, Program] = weakref.WeakValueDictionary()
_programs_lock = threading.Lock()
_compile_locks: dict[str, threading.Lock] = {}
_warned: set[str] = set()


class Program:
    """A runnable kernel. `run(buffers, threads)`; `.ir`, `.asm`, `.kernel`, `.units`, `.kind`."""

    kind = "abstract"
    # NOTE: the Python side of a program (the object, its specs, argument block), an upper
    # bound of what tracemalloc sees (docs/memory.md); the native part is added by subclasses
    PY_BYTES = 2 << 10

    def __init__(self, kernel: Kernel, units: int):
        self.kernel = kernel
        self.units = units
        self._base: Program | None = None  # the registered program a rebound copy shares code with
        self.slots = tuple(i.slot for i in kernel.inputs) + tuple(o.slot for o in kernel.outputs)
        self._n_in = len(kernel.inputs)
        self._out_specs = tuple((o.slot, o.dtype.np, int(np.prod(o.shape, dtype=np.int64)))
                                for o in kernel.outputs)
        self._in_specs = tuple((i.slot, i.dtype.np) for i in kernel.inputs)

    @property
    def ir(self) -> str:
        return ""

    @property
    def asm(self) -> str:
        return ""

    @property
    def nbytes(self) -> int:
        """Memory this program holds (shared with its rebound copies: see `footprint`)."""
        return self.PY_BYTES

    def footprint(self) -> tuple[int, int]:
        """(identity, bytes): programs with one identity share their memory, so a total
        over several owners counts each identity once."""
        base = self._base or self
        return id(base), base.nbytes

    def _outputs(self, buffers) -> None:
        """Allocate missing outputs (dict buffers only) and check dtype/size of the rest."""
        for spec in self._out_specs:
            self._output(spec, buffers.get(spec[0]) if isinstance(buffers, dict) else buffers[spec[0]], buffers)

    def _output(self, spec, arr, buffers):
        """The output array of `spec` (slot, dtype, size): `arr` checked, or allocated into
        `buffers` (a dict) when missing."""
        slot, dt, size = spec
        if arr is None:
            if not isinstance(buffers, dict):
                raise ValueError(f"program {self.kernel.name}: output slot {slot} is not allocated")
            buffers[slot] = arr = np.empty(size, dt)
        elif arr.dtype != dt or arr.size < size or not arr.flags.c_contiguous or not arr.flags.writeable:
            raise ValueError(f"program {self.kernel.name}: output slot {slot} needs a writable contiguous "
                             f"{dt} buffer of {size} elements, got {arr.dtype} {arr.shape}")
        return arr

    def run(self, buffers, threads: int = 1) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kernel.name} [{self.kernel.kind}] units={self.units}>"


_SPLIT_PROGRAMS: weakref.WeakSet = weakref.WeakSet()  # programs of split reductions (svod/codegen/split.py)


def _reset_split_counters() -> None:
    """In a forked child: zero every split reduction's shared counters (a launch that was
    running in another thread of the parent left them mid-count)."""
    for prog in list(_SPLIT_PROGRAMS):
        if prog._split_counts:
            ctypes.memset(prog._split_counts[0], 0, prog._split_counts[1])


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_split_counters)


class NativeProgram(Program):
    """LLVM-compiled kernel (freshly compiled, or loaded from the object cache)."""

    kind = "native"

    def __init__(self, kernel: Kernel, module, symbol: str, units: int, ir_text: str | None = None):
        super().__init__(kernel, units)
        self.module = module  # CompiledModule: keeps the code mapped
        self.symbol = symbol
        self.address = module.address(symbol)
        self._fn = _ENTRY(self.address)
        self._ir = ir_text
        self._argtype = ctypes.c_void_p * len(self.slots)
        self._args = self._argtype()
        self._args_addr = ctypes.addressof(self._args)
        self._args_lock = threading.Lock()
        self._need = tuple(_extent(i.view) for i in kernel.inputs)
        self._cache: list = [None] * len(self.slots)
        self._split_counts = None  # (address, bytes) of a split reduction's shared counters
        if kernel.kind in ("reduce", "rowwise", "rowcol"):
            plan = schedule(kernel).loops
            if plan.split > 1:
                get = ctypes.CFUNCTYPE(ctypes.c_void_p)(module.address(symbol + ".split.counts"))
                self._split_counts = (get(), 8 * (plan.units // plan.split))
                _SPLIT_PROGRAMS.add(self)

    @property
    def ir(self) -> str:
        """Optimised LLVM IR, compiled again on demand (the program keeps machine code only)."""
        return self._ir or self.module.ir or _recompile(self.kernel, lean=True).ir

    @property
    def nbytes(self) -> int:
        return self.PY_BYTES + self.module.nbytes

    @property
    def asm(self) -> str:
        try:
            return self.module.asm
        except ValueError:  # loaded from object code: compile again just for the text
            return _recompile(self.kernel).asm

    def _address(self, j: int, arr, buffers) -> int:
        """Validate slot position `j`'s array and remember (weakref, address) for next time."""
        slot = self.slots[j]
        if j < self._n_in:
            _, dt = self._in_specs[j]
            if arr is None or arr.dtype != dt or arr.size < self._need[j] or not arr.flags.c_contiguous:
                raise ValueError(f"program {self.kernel.name}: input slot {slot} needs a contiguous {dt} buffer "
                                 f"of at least {self._need[j]} elements, got "
                                 f"{None if arr is None else (arr.dtype, arr.shape)}")
        else:
            arr = self._output(self._out_specs[j - self._n_in], arr, buffers)
        addr = arr.__array_interface__["data"][0]
        try:
            self._cache[j] = (weakref.ref(arr), addr)
        except TypeError:  # not weak-referenceable (an ndarray subclass with __slots__)
            pass
        return addr

    def _fill(self, args, buffers) -> None:
        # NOTE: a weakref check is far cheaper than fetching a data address (docs/codegen.md).
        # A live array keeps its address, so (weakref, address) per slot position is safe to reuse.
        cache = self._cache
        get = buffers.get if isinstance(buffers, dict) else buffers.__getitem__
        for j, slot in enumerate(self.slots):
            arr = get(slot)
            c = cache[j]
            if c is not None and arr is not None and c[0]() is arr:
                args[j] = c[1]
            else:
                args[j] = self._address(j, arr, buffers)

    def run(self, buffers, threads: int = 1) -> None:
        if self.units == 0:
            self._outputs(buffers)
            return
        if self._args_lock.acquire(False):
            try:
                self._fill(self._args, buffers)
                self._launch(self._args_addr, threads)
            finally:
                self._args_lock.release()
        else:  # another Python thread is using the cached argument block
            args = self._argtype()
            self._fill(args, buffers)
            self._launch(ctypes.addressof(args), threads)

    def relocated(self) -> NativeProgram:
        """The same machine code loaded again at a new address, for timing copies that
        share nothing with the process's program (`costmodels.report` builds each
        variant several times)."""
        from svod.codegen.jit import load_object

        try:
            obj = self.module.object_code
        except ValueError:  # a shared library whose object code left the store: compile again
            obj = _recompile(self.kernel, lean=True).object_code
        mod = load_object(obj, [self.symbol], name=self.kernel.name)
        return NativeProgram(self.kernel, mod, self.symbol, self.units, self._ir)

    def repeat(self, buffers, n: int) -> None:
        """Run the kernel `n` times on one thread, the loop in native code (for timing:
        `costmodels.measure.time_kernel`)."""
        if self.units == 0:
            return
        from svod.runtime import repeat

        with self._args_lock:
            self._fill(self._args, buffers)
            repeat(self.address, self._args_addr, self.units, n)

    def _launch(self, args_addr: int, threads: int) -> None:
        if threads <= 1 or self.units <= 1:
            self._fn(args_addr, 0, self.units)
        else:
            from svod.runtime import run_parallel

            run_parallel(self.address, args_addr, self.units, threads)


def _extent(view) -> int:
    """Elements of the buffer a ViewChain may touch (max address + 1; 0 when it reads nothing)."""
    v = view.views[0]
    if v.size == 0 or v.fully_masked:
        return 0
    hi = v.offset
    for _, s, lo, top in v.axes():
        hi += max(s * lo, s * (top - 1))
    return hi + 1


class LibraryProgram(Program):
    """``matmul.library``: numpy's BLAS on the operands (strided views when BLAS can read
    them, else gathers), run on svod's pool by `svod.codegen.blas.matmul_into`; numpy's
    matmul when that does not apply."""

    kind = "library"

    def __init__(self, kernel: Kernel):
        super().__init__(kernel, 1)
        mm = kernel.matmul
        if mm is not None:
            self._a, self._b = kernel.inputs[mm.a], kernel.inputs[mm.b]

    def run(self, buffers, threads: int = 1) -> None:
        self._outputs(buffers)
        k = self.kernel
        if k.library is not None:  # numpy's sorting / LAPACK (svod/library.py) on the operand views
            from svod.library import execute, store

            store(k, execute(k.library.fn, k.library.params, [_operand(buffers[i.slot], i.view) for i in k.inputs]),
                  buffers)
            return
        o = k.outputs[0]
        a = _operand(buffers[self._a.slot], self._a.view)
        b = _operand(buffers[self._b.slot], self._b.view)
        out = buffers[o.slot][:self._out_specs[0][2]].reshape(k.shape)
        if out.size == 0:
            return
        from svod.codegen.blas import matmul_into

        if not matmul_into(a, b, out):  # svod's threads, one-thread gemm calls (see blas.py)
            np.matmul(a, b, out=out)


def _operand(flat: np.ndarray, chain) -> np.ndarray:
    """The operand as an ndarray: a strided view when one unmasked view suffices, else a gather."""
    if len(chain.views) == 1 and chain.views[0].mask is None and flat.size:
        v = chain.views[0]
        item = flat.itemsize
        base = flat[v.offset:] if v.offset < flat.size else flat
        if v.offset < flat.size:
            return np.lib.stride_tricks.as_strided(base, v.shape, tuple(s * item for s in v.strides),
                                                   writeable=False)
    return chain.gather(flat, pad_value=0)


class InterpretedProgram(Program):
    """The numpy kernel interpreter (fallback when code generation fails)."""

    kind = "interpreted"

    def __init__(self, kernel: Kernel, reason: str = "", ir_text: str = ""):
        super().__init__(kernel, 1)
        self.reason = reason
        self._ir = ir_text

    @property
    def ir(self) -> str:
        return self._ir

    @property
    def nbytes(self) -> int:
        return self.PY_BYTES + len(self._ir)

    def run(self, buffers, threads: int = 1) -> None:
        from svod.interp import run_kernel

        bump("interpreter_fallbacks")
        self._outputs(buffers)
        scratch = {s: buffers[s] for s in set(self.slots)}
        run_kernel(self.kernel, scratch)
        for slot, _, size in self._out_specs:
            buffers[slot][:size] = scratch[slot]


# ----------------------------------------------------------------------------- compile


def _recompile(kernel: Kernel, lean: bool = False):
    """The kernel compiled again, for its IR (`lean`) or assembly text; nobody keeps it."""
    from svod.codegen.jit import compile_ir
    from svod.codegen.lower import lower_kernel

    low = lower_kernel(kernel)
    return compile_ir(low.ir, name=kernel.name, lean=lean)


def cached_symbol(kernel: Kernel) -> str:
    """The kernel's function name, as `svod.codegen.lower.symbol_for` names it — without
    importing the lowering, which a kernel loaded from the object cache does not need
    (first-call latency, docs/engine.md; tests/test_first_call.py checks they agree)."""
    return f"svod_k_{kernel.key()[:20]}"


def _build(kernel: Kernel) -> Program:
    if (kernel.matmul is not None and kernel.matmul.library) or kernel.library is not None:
        return LibraryProgram(kernel)
    symbol = cached_symbol(kernel)
    okey = object_key(kernel)
    t0 = time.perf_counter()
    mod = load_cached(okey, [symbol], kernel.name)
    if mod is not None:
        prog = NativeProgram(kernel, mod, symbol, schedule(kernel).loops.units)
        bump("kernels_loaded")
        bump("compile_seconds", time.perf_counter() - t0)
        return prog
    from svod.codegen.jit import compile_ir
    from svod.codegen.lower import lower_kernel, symbol_for

    symbol = symbol_for(kernel)
    ir_text = ""
    try:
        low = lower_kernel(kernel, symbol)
        ir_text = low.ir
        mod = compile_ir(ir_text, name=kernel.name, lean=True, keep_ir=False)
        prog = NativeProgram(kernel, mod, symbol, low.units)
    except Exception as e:  # noqa: BLE001 - a codegen bug must not lose the user's result
        return _fallback(kernel, e, ir_text)
    bump("kernels_compiled")
    bump("compile_seconds", time.perf_counter() - t0)
    store_object(okey, mod, {"kernel": kernel.name, "symbol": symbol})
    return prog


def _fallback(kernel: Kernel, err: BaseException, ir_text: str) -> Program:
    from svod.errors import SvodWarning, user_stacklevel

    path = "(no IR: lowering failed)"
    if ir_text:
        fd, path = tempfile.mkstemp(prefix=f"svod-{kernel.name[:40]}-", suffix=".ll")
        with os.fdopen(fd, "w") as fh:
            fh.write(ir_text)
    key = kernel.key()
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"svod: compiling kernel {kernel.name} failed ({type(err).__name__}: "
                      f"{str(err).splitlines()[0] if str(err) else ''}); running it in the interpreter. "
                      f"IR: {path}", SvodWarning, stacklevel=user_stacklevel())
    return InterpretedProgram(kernel, f"{type(err).__name__}: {err}", ir_text)


def compile_kernel(kernel: Kernel) -> Program:
    """The Program for `kernel`: the live one of its content key if any, else loaded from
    the object cache when possible, compiled otherwise; never raises for a kernel that
    passes `check()`. The caller owns what it gets (see the module docstring)."""
    key = kernel.key()
    prog = _programs.get(key)
    if prog is not None:
        return _rebind(prog, kernel)
    with _programs_lock:
        prog = _programs.get(key)
        if prog is not None:
            return _rebind(prog, kernel)
        lock = _compile_locks.setdefault(key, threading.Lock())
    with lock:  # one compile per key, other keys compile concurrently
        prog = _programs.get(key)
        if prog is None:
            prog = _build(kernel)
            with _programs_lock:
                _programs[key] = prog
                _compile_locks.pop(key, None)
    return _rebind(prog, kernel)


def _rebind(prog: Program, kernel: Kernel) -> Program:
    """Programs are shared by content key; slot numbers are not part of it."""
    if prog.kernel is kernel or prog.slots == tuple(i.slot for i in kernel.inputs) + \
            tuple(o.slot for o in kernel.outputs):
        return prog
    import copy

    clone = copy.copy(prog)
    clone._base = prog  # keeps the registered program (and so its code) alive
    clone.kernel = kernel
    clone.slots = tuple(i.slot for i in kernel.inputs) + tuple(o.slot for o in kernel.outputs)
    clone._out_specs = tuple((o.slot, o.dtype.np, spec[2]) for o, spec in zip(kernel.outputs, prog._out_specs))
    clone._in_specs = tuple((i.slot, i.dtype.np) for i in kernel.inputs)
    if isinstance(prog, NativeProgram):
        clone._args = clone._argtype()
        clone._args_addr = ctypes.addressof(clone._args)
        clone._args_lock = threading.Lock()
        clone._cache = [None] * len(clone.slots)
    if isinstance(prog, LibraryProgram) and kernel.matmul is not None:
        mm = kernel.matmul
        clone._a, clone._b = kernel.inputs[mm.a], kernel.inputs[mm.b]
    return clone


def clear_programs() -> None:
    """Forget the registered Programs (tests): the next `compile_kernel` of a kernel makes
    a new one; the old ones live on while their owners do."""
    with _programs_lock:
        _programs.clear()


def live_programs() -> tuple[int, int]:
    """(count, bytes) of the programs alive in this process (registered: one per kernel
    content key), with their measured sizes."""
    with _programs_lock:
        progs = list(_programs.values())
    return len(progs), sum(p.nbytes for p in progs)


def run_kernel_native(kernel: Kernel, buffers, threads: int = 1) -> None:
    """compile_kernel(kernel).run(buffers, threads) — for callers holding only a kernel."""
    compile_kernel(kernel).run(buffers, threads)


__all__ = ["InterpretedProgram", "LibraryProgram", "NativeProgram", "Program", "clear_programs",
           "compile_kernel", "live_programs", "object_key", "run_kernel_native"]
