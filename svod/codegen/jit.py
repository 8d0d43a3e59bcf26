"""llvmlite lifecycle: target setup, O3 compile, MCJIT engines, object-code reload.

Everything that touches ``llvmlite.binding`` goes through this module, under one lock:
LLVM's global state (target registry, symbol table, option parser) is not safe to mutate
from several Python threads at once, and compiles are short (10-20 ms).

Lifecycle rules learnt the hard way (see FACTS.md):

* ``llvm.initialize()`` raises in llvmlite 0.50; only the native target/asmprinter
  initialisers are called, once.
* An MCJIT engine frees the TargetMachine it was created with when it is collected, so
  every engine gets a fresh TargetMachine and the ``CompiledModule`` keeps both alive.
* On Intel AVX-512 hosts LLVM's tuning prefers 256-bit vectors; ``host_target_info``
  adds ``-prefer-256-bit`` so loops vectorise to zmm (docs/codegen.md).
* Function pointers handed out by ``CompiledModule.address`` are valid exactly as long
  as the ``CompiledModule`` is referenced; ctypes function objects made by
  ``ctypes_fn`` hold a reference to it.
* An engine that compiled a module keeps the whole optimised LLVM module and its
  code-generation state: ~840 KB of heap for a one-loop kernel, against ~44 KB for an
  engine that loaded the same object code (measured, docs/memory.md). ``compile_ir(...,
  lean=True)`` therefore emits the object code once and loads it into a fresh engine:
  what svod keeps per kernel and per graph program. ``CompiledModule.nbytes`` is the
  memory a module holds, measured when ``load_object`` creates its engine.

Example::

    >>> from svod.codegen.jit import compile_ir
    >>> import ctypes
    >>> m = compile_ir('define i64 @add1(i64 %x) { %y = add i64 %x, 1  ret i64 %y }', name="ex")
    >>> m.ctypes_fn("add1", ctypes.c_int64, [ctypes.c_int64])(41)
    42
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import sys
import threading
import time
from typing import Any

import llvmlite.binding as llvm

__all__ = [
    "CompiledModule",
    "compile_ir",
    "load_object",
    "host_target_info",
    "has_libmvec",
    "libmvec_enabled",
    "set_libmvec_enabled",
    "LLVM_LOCK",
]

# NOTE: re-entrant because compile_ir -> _target_machine -> _ensure_init nest.
LLVM_LOCK = threading.RLock()
_initialised = False


def _ensure_init() -> None:
    global _initialised
    if _initialised:
        return
    with LLVM_LOCK:
        if not _initialised:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _initialised = True


@functools.cache
def host_target_info() -> dict[str, Any]:
    """Describe the host for codegen and for machine fingerprints (cached).

    Returns ``{"triple", "cpu", "features", "feature_set", "vector_bits", "has_fma"}``;
    ``vector_bits`` is the preferred f32 SIMD width: 512 with avx512f, 256 with avx2,
    else 128.
    """
    _ensure_init()
    with LLVM_LOCK:
        triple = llvm.get_process_triple()
        cpu = llvm.get_host_cpu_name()
        try:
            feats = llvm.get_host_cpu_features()
            features = feats.flatten()
        except RuntimeError:  # not implemented on some hosts: let LLVM pick by CPU name
            features = ""
    enabled = frozenset(f[1:] for f in features.split(",") if f.startswith("+"))
    if "avx512f" in enabled:
        bits = 512
        # NOTE: LLVM tunes Intel AVX-512 cores (icelake/rocketlake/sapphirerapids...) with
        # prefer-256-bit, so the loop vectoriser emits ymm only. Kernels here are memory- or
        # transcendental-bound and the math library works on 512-bit vectors: opt in.
        features += ",-prefer-256-bit"
    elif "avx2" in enabled:
        bits = 256
    else:
        bits = 128
    return {
        "triple": triple,
        "cpu": cpu,
        "features": features,
        "feature_set": enabled,
        "vector_bits": bits,
        "has_fma": "fma" in enabled,
    }


def _target_machine() -> llvm.TargetMachine:
    """A fresh host TargetMachine (one per engine: the engine frees it)."""
    info = host_target_info()
    with LLVM_LOCK:
        target = llvm.Target.from_triple(info["triple"])
        return target.create_target_machine(
            cpu=info["cpu"], features=info["features"], opt=3, jit=True, codemodel="jitdefault"
        )


# ---------------------------------------------------------------------------- libmvec


@functools.cache
def _load_libmvec() -> bool:
    """Load glibc's libmvec into the process symbol table; True when it worked."""
    if os.environ.get("SVOD_NO_LIBMVEC"):
        return False
    _ensure_init()
    candidates = ["libmvec.so.1"]
    found = ctypes.util.find_library("mvec")
    if found:
        candidates.append(found)
    for cand in candidates:
        try:
            with LLVM_LOCK:
                llvm.load_library_permanently(cand)
                # NOTE: the lookup proves the library is really in the JIT's symbol table.
                if llvm.address_of_symbol("_ZGVbN4v_expf"):
                    return True
        except RuntimeError:
            continue
    return False


def has_libmvec() -> bool:
    """True when glibc's libmvec is loaded and its vector variants can be linked."""
    return _load_libmvec()


_libmvec_override: bool | None = None


def set_libmvec_enabled(enabled: bool | None) -> None:
    """Force libmvec use on (if present) or off; ``None`` restores the default.

    Affects modules built afterwards (``vecmath`` reads it when a math function is first
    emitted into a module). Tests use it to exercise the polynomial path.
    """
    global _libmvec_override
    _libmvec_override = enabled


def libmvec_enabled() -> bool:
    """Whether newly emitted math calls may use libmvec (present and not disabled)."""
    if _libmvec_override is False:
        return False
    return has_libmvec()


# ---------------------------------------------------------------------------- modules


class CompiledModule:
    """Native code owned by one MCJIT engine; freed when this object is collected.

    ``address(symbol)`` gives a raw function pointer valid while ``self`` lives;
    ``ctypes_fn`` wraps it and keeps ``self`` alive through the wrapper.
    """

    def __init__(self, name: str, engine: Any, tm: Any, module: Any | None, ir: str | None,
                 symbols: tuple[str, ...] | None = None, objfile: Any = None,
                 object_code: bytes | None = None, timings: dict[str, float] | None = None):
        self.name = name
        self._engine = engine
        self._tm = tm
        self._module = module  # the llvm.ModuleRef (None for objects loaded from bytes)
        self._objfile = objfile
        self._ir = ir
        self._asm: str | None = None
        self._object: bytes | None = object_code
        self._addresses: dict[str, int] = {}
        self.symbols = symbols
        self.timings = timings or {}
        self.engine_bytes = 0  # native memory of the engine, measured by `load_object`

    @property
    def nbytes(self) -> int:
        """Memory this module holds: its engine (heap measured at load, plus its mapped
        code pages) and the object code and IR text kept for reloading and inspection.
        Modules compiled without ``lean`` keep their LLVM module too, not counted here."""
        return self.engine_bytes + len(self._object or b"") + len(self._ir or "")

    def address(self, symbol: str) -> int:
        """Address of ``symbol`` in this module's native code; KeyError when absent."""
        addr = self._addresses.get(symbol)
        if addr is None:
            with LLVM_LOCK:
                addr = self._engine.get_function_address(symbol)
            if not addr:
                raise KeyError(f"symbol {symbol!r} not found in compiled module {self.name!r}")
            self._addresses[symbol] = addr
        return addr

    def ctypes_fn(self, symbol: str, restype: Any, argtypes: list[Any]) -> Any:
        """A ctypes callable for ``symbol``; it references this module so code stays mapped."""
        proto = ctypes.CFUNCTYPE(restype, *argtypes)
        fn = proto(self.address(symbol))
        fn._svod_owner = self  # NOTE: keeps the engine (and so the code pages) alive
        return fn

    @property
    def ir(self) -> str:
        """Optimised LLVM IR text (empty for modules loaded from object code)."""
        return self._ir or ""

    def _emit(self, what: str, missing: str):
        """The target machine's `what` ("assembly" or "object") of the IR module."""
        if self._module is None:
            raise ValueError(f"{self.name!r} {missing}")
        with LLVM_LOCK:
            return getattr(_target_machine(), f"emit_{what}")(self._module)

    @property
    def asm(self) -> str:
        """Assembly text, produced on first access (needs the IR module)."""
        if self._asm is None:
            self._asm = self._emit("assembly", "was loaded from object code: no assembly")
        return self._asm

    @property
    def object_code(self) -> bytes:
        """Relocatable object code (ELF on Linux), emitted on first access."""
        if self._object is None:
            self._object = bytes(self._emit("object", "has no IR module to emit"))
        return self._object

    def __repr__(self) -> str:
        return f"CompiledModule({self.name!r})"


def _optimise(mod: Any, tm: Any) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    try:
        mpm.run(mod, pb)
    finally:
        _free_pass_manager(mpm)


def _free_pass_manager(mpm: Any) -> None:
    """Free a module pass manager now.

    NOTE: in llvmlite 0.50 `ModulePassManager(ObjectRef, NewPassManager)` inherits
    ObjectRef's no-op `_dispose` ahead of NewPassManager's, so closing or collecting it
    frees nothing: the whole O3 pipeline, ~80 KB once it has run, leaked per compile
    (measured with mallinfo2 and heaptrack, docs/memory.md). What remains per compile is
    ~2 KB (the PassInstrumentationCallbacks that `create_pass_builder` never frees)."""
    from llvmlite.binding import ffi
    from llvmlite.binding.newpassmanagers import NewPassManager

    if mpm.closed:
        return
    if type(mpm)._dispose is ffi.ObjectRef._dispose:
        try:
            NewPassManager._dispose(mpm)
        finally:
            mpm.detach()
    else:  # a fixed llvmlite
        mpm.close()


def compile_ir(llvm_ir: str, *, name: str, optimise: bool = True, lean: bool = False,
               keep_ir: bool = True) -> CompiledModule:
    """Parse, verify, optimise (O3 + loop/SLP vectorisers) and JIT ``llvm_ir``.

    Raises ``RuntimeError`` (with the module name noted) when the IR does not parse or
    verify. ``CompiledModule.timings`` holds parse/opt/codegen seconds.

    ``lean=True``: emit object code and load it into an engine of its own (the LLVM
    module is freed: ``asm`` is unavailable, ``object_code`` costs nothing more);
    ``keep_ir=False`` also drops the optimised IR text. The same machine code either way.
    """
    _ensure_init()
    # NOTE: functions emitted by vecmath may reference libmvec symbols; make sure the
    # library is in the process symbol table before MCJIT resolves relocations.
    if "_ZGV" in llvm_ir:
        has_libmvec()
    t0 = time.perf_counter()
    with LLVM_LOCK:
        try:
            mod = llvm.parse_assembly(llvm_ir)
            mod.name = name
            mod.verify()
        except RuntimeError as e:
            e.add_note(f"while compiling svod module {name!r}")
            raise
        info = host_target_info()
        mod.triple = info["triple"]
        tm = _target_machine()
        mod.data_layout = str(tm.target_data)
        t1 = time.perf_counter()
        if optimise:
            _optimise(mod, tm)
        t2 = time.perf_counter()
        if lean:
            obj = bytes(tm.emit_object(mod))
            opt_ir = str(mod) if keep_ir else None
            del mod, tm  # NOTE: the module and its TargetMachine are freed here, not kept
            cm = load_object(obj, (), name=name)
            cm._ir = opt_ir
        else:
            engine = llvm.create_mcjit_compiler(mod, tm)
            engine.finalize_object()
            cm = CompiledModule(name, engine, tm, mod, str(mod))
        t3 = time.perf_counter()
    cm.timings = {"parse": t1 - t0, "opt": t2 - t1, "codegen": t3 - t2}
    return cm


_PAGE = 4096


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]


@functools.cache
def _mallinfo2():
    """glibc's mallinfo2 (None elsewhere): heap bytes in use, all arenas, ~6 µs a call."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc, or glibc < 2.33
        return None
    fn.restype = _MallInfo2
    fn.argtypes = []
    return fn


def _heap_in_use() -> int | None:
    fn = _mallinfo2()
    if fn is None:
        return None
    m = fn()
    return m.uordblks + m.hblkhd


# NOTE: the engine of a loaded object measured ~44 KB of heap on llvmlite 0.50 / LLVM 22
# (one-loop kernel); the estimate where the heap cannot be read (not glibc).
_ENGINE_HEAP_ESTIMATE = 48 << 10


def _engine_bytes(heap_delta: int | None, obj_size: int) -> int:
    """An engine's memory: heap it allocated (measured; other threads' allocations in the
    same interval count too, so never less than the estimate's floor of the object size)
    plus its mapped sections (code and data, each page-rounded)."""
    heap = _ENGINE_HEAP_ESTIMATE if heap_delta is None else max(heap_delta, obj_size)
    return heap + (obj_size + _PAGE - 1) // _PAGE * _PAGE + _PAGE


def load_object(obj: bytes, symbols: list[str] | tuple[str, ...] = (), *, name: str = "object"
                ) -> CompiledModule:
    """Create an engine from object code (from ``CompiledModule.object_code``), no recompile.

    ``symbols`` are resolved eagerly so a foreign or truncated object fails here with
    ``KeyError`` rather than at call time.
    """
    _ensure_init()
    if b"_ZGV" in obj:
        has_libmvec()
    obj = bytes(obj)
    with LLVM_LOCK:
        info = host_target_info()
        h0 = _heap_in_use()
        empty = llvm.parse_assembly(f'target triple = "{info["triple"]}"\n')
        tm = _target_machine()
        engine = llvm.create_mcjit_compiler(empty, tm)
        objfile = llvm.ObjectFileRef.from_data(obj)
        engine.add_object_file(objfile)
        engine.finalize_object()
        h1 = _heap_in_use()
    cm = CompiledModule(name, engine, tm, None, None, symbols=tuple(symbols), objfile=objfile,
                        object_code=obj)
    cm.engine_bytes = _engine_bytes(None if h0 is None or h1 is None else h1 - h0, len(obj))
    for s in symbols:
        cm.address(s)
    return cm
