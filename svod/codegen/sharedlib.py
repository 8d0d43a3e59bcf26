"""Cached object code as shared libraries, loaded with ctypes: a warm process runs the
kernels, graph programs and runtime it compiled before without importing
``llvmlite.binding`` (docs/engine.md, first-call latency).

Each module svod compiles is stored as relocatable object code in the store (kind
"objects", `svod.codegen.objcache`), loaded by an MCJIT engine. When the system linker
``ld`` exists, the same object code is also linked into a shared library,
``<cache dir>/lib/<blake2b(machine, code, object key)>.so`` — at interpreter exit, a few
ms per module off the critical path, for the modules this process compiled or loaded
through LLVM — and a later process loads that library with ``dlopen`` (`load`): the same
machine code, relocated by the dynamic loader instead of by LLVM's RuntimeDyld.

- The code is position-dependent (LLVM's JIT code model), so the library has text
  relocations (``-z notext``): the loader patches the code pages once at load, as
  RuntimeDyld does. A loader that refuses them (a hardened system) makes `load` fail:
  the caller falls back to LLVM, silently — this is an optimisation, never an error.
- Math calls into glibc's libmvec: the library is linked without it (``ld -shared``
  only), and `load` puts libmvec in the global namespace first when the object key says
  the code uses it (``mvec1``), as `svod.codegen.jit.has_libmvec` does for MCJIT.
- A library is written to a temporary name and renamed: a reader never sees half of one.
  Its name hashes the machine fingerprint, svod's code fingerprint and the object key
  (which names the target: LLVM version, CPU, features), so no stale code is loaded.
  At most `MAX_LIBS` libraries are kept (the oldest, by mtime, removed first);
  `SVOD_SHARED_LIBS=0` turns the whole mechanism off; `SVOD_OBJECT_CACHE=0` too.
- A loaded library is never unloaded (``dlclose``: a replay closure may still hold its
  code's addresses), so a process loads at most `MAX_LOADED` distinct libraries; past
  that, `load` returns None and the module goes through LLVM, whose code is freed with its
  plan (the memory caches' bounds hold). Measured: 14 KB of RSS a loaded library (512
  of a soak's libraries dlopened in one process: its text relocated in place, the ctypes
  handle), so the cap holds ~2 MB.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

MAX_LIBS = 2048  # shared libraries kept in the cache directory
MAX_LOADED = 128  # distinct libraries one process loads (never unloaded: module docstring)
_PENDING_MAX = 256  # modules waiting to be linked at exit

_lock = threading.Lock()
_pending: dict[str, bytes] = {}  # library path -> object code, linked at exit
_loaded: set[str] = set()  # library paths this process has loaded (at most MAX_LOADED)
_exit_hook = [False]


def enabled() -> bool:
    """`SVOD_SHARED_LIBS` and `SVOD_OBJECT_CACHE` both on, and an ``ld`` on the PATH."""
    off = ("0", "false", "False", "no", "off")
    if os.environ.get("SVOD_SHARED_LIBS", "1") in off or os.environ.get("SVOD_OBJECT_CACHE", "1") in off:
        return False
    return _linker() is not None


@functools.cache
def _linker() -> str | None:
    return shutil.which("ld")


def _lib_dir() -> Path:
    from svod.cachedir import cache_dir

    return cache_dir() / "lib"


def lib_path(okey: str) -> Path:
    """Where the library of object key `okey` lives (machine and code fingerprints hashed in)."""
    from svod.fingerprint import code_fingerprint, machine_fingerprint

    h = hashlib.blake2b(f"{machine_fingerprint()}\0{code_fingerprint()}\0{okey}".encode(), digest_size=16)
    return _lib_dir() / f"{h.hexdigest()}.so"


class SharedModule:
    """A shared library of svod code, the `svod.codegen.jit.CompiledModule` interface that
    programs use (`address`, `ctypes_fn`, `nbytes`, `object_code`)."""

    def __init__(self, name: str, lib: ctypes.CDLL, path: Path, okey: str, symbols=()):
        self.name = name
        self._lib = lib
        self.path = path
        self._okey = okey
        self._addresses: dict[str, int] = {}
        self.symbols = tuple(symbols)
        self.timings: dict[str, float] = {}
        try:
            self.engine_bytes = (path.stat().st_size + 4095) // 4096 * 4096
        except OSError:
            self.engine_bytes = 0
        self._object: bytes | None = None

    @property
    def nbytes(self) -> int:
        """The library's mapped size (file size, page-rounded)."""
        return self.engine_bytes

    def address(self, symbol: str) -> int:
        """Address of `symbol` in the library; KeyError when absent."""
        addr = self._addresses.get(symbol)
        if addr is None:
            try:
                addr = ctypes.cast(getattr(self._lib, symbol), ctypes.c_void_p).value
            except AttributeError:
                addr = None
            if not addr:
                raise KeyError(f"symbol {symbol!r} not found in shared library {self.path.name} ({self.name!r})")
            self._addresses[symbol] = addr
        return addr

    def ctypes_fn(self, symbol: str, restype, argtypes):
        """A ctypes callable for `symbol` (the library stays loaded for the process)."""
        fn = ctypes.CFUNCTYPE(restype, *argtypes)(self.address(symbol))
        fn._svod_owner = self
        return fn

    @property
    def ir(self) -> str:
        return ""

    @property
    def asm(self) -> str:
        raise ValueError(f"{self.name!r} was loaded from a shared library: no assembly")

    @property
    def object_code(self) -> bytes:
        """The object code the library was linked from (read from the store)."""
        if self._object is None:
            from svod.store import default_store

            obj = default_store().get("objects", self._okey)
            if not obj:
                raise ValueError(f"{self.name!r}: its object code is no longer in the store")
            self._object = bytes(obj)
        return self._object

    def __repr__(self) -> str:
        return f"SharedModule({self.name!r}, {self.path.name})"


@functools.cache
def _libmvec() -> bool:
    """glibc's libmvec in the global namespace (the libraries' math calls resolve there)."""
    for name in ("libmvec.so.1", "libmvec.so"):
        try:
            ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
            return True
        except OSError:
            continue
    return False


def load(okey: str, symbols, name: str) -> SharedModule | None:
    """The library of `okey` loaded, its `symbols` resolved; None when there is none, the
    mechanism is off, or the loader refuses it (then the caller loads the object code
    through LLVM, and the library is linked again at exit)."""
    if not enabled():
        return None
    path = lib_path(okey)
    if not path.is_file():
        return None
    if ":mvec1:" in okey and not _libmvec():
        return None
    key = str(path)
    with _lock:
        if key not in _loaded:
            if len(_loaded) >= MAX_LOADED:
                return None  # the code goes through LLVM: freed with its plan
            _loaded.add(key)
    try:
        lib = ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        mod = SharedModule(name, lib, path, okey, symbols)
        for s in symbols:
            mod.address(s)
    except (OSError, KeyError):
        try:
            path.unlink()  # unloadable here: rebuilt from the object code at exit
        except OSError:
            pass
        return None
    return mod


def link_later(okey: str, object_code: bytes) -> None:
    """Link `object_code` into the library of `okey` at interpreter exit (once; bounded)."""
    if not enabled():
        return
    path = lib_path(okey)
    if path.is_file():
        return
    with _lock:
        if len(_pending) >= _PENDING_MAX:
            return
        _pending[str(path)] = bytes(object_code)
        if not _exit_hook[0]:
            _exit_hook[0] = True
            atexit.register(link_pending)


def link_pending() -> int:
    """Link every module waiting (the exit hook; tests call it): one ``ld`` per module,
    run in parallel. First the background search under way is finished (svod.tiered:
    its plan's modules are linked too). Returns the libraries written."""
    from svod.tiered import TIERED

    TIERED.finish_at_exit()
    with _lock:
        work = list(_pending.items())
        _pending.clear()
    if not work or _linker() is None:
        return 0
    try:
        from svod.cachedir import prepare_dir

        d = _lib_dir()
        prepare_dir(d.parent)
        prepare_dir(d)
    except Exception:  # noqa: BLE001 - no usable cache dir: no libraries
        return 0
    written = 0
    with tempfile.TemporaryDirectory(prefix="svod-link-") as tmp:
        procs = []
        for i, (path, obj) in enumerate(work):
            src = os.path.join(tmp, f"m{i}.o")
            out = os.path.join(str(d), f".{os.path.basename(path)}.{os.getpid()}.tmp")
            with open(src, "wb") as fh:
                fh.write(obj)
            try:
                p = subprocess.Popen([_linker(), "-shared", "-z", "notext", "-z", "noexecstack", "-o", out, src],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            except OSError:
                continue
            procs.append((p, out, path))
        for p, out, path in procs:
            try:
                ok = p.wait(timeout=30) == 0
            except subprocess.TimeoutExpired:
                p.kill()
                ok = False
            try:
                if ok:
                    os.replace(out, path)
                    written += 1
                else:
                    os.unlink(out)
            except OSError:
                pass
    _trim(d)
    return written


def _trim(d: Path) -> None:
    """Keep at most `MAX_LIBS` libraries (oldest first out)."""
    try:
        libs = [e for e in os.scandir(d) if e.name.endswith(".so")]
        if len(libs) <= MAX_LIBS:
            return
        libs.sort(key=lambda e: e.stat().st_mtime)
        for e in libs[: len(libs) - MAX_LIBS]:
            os.unlink(e.path)
    except OSError:
        pass


__all__ = ["MAX_LIBS", "SharedModule", "enabled", "lib_path", "link_later", "link_pending", "load"]
