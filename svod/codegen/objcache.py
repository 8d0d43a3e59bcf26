"""The persistent object cache of compiled code: kernels, graph programs, the runtime.

Object code is stored under a key naming what it was compiled from (a kernel's content
key, an IR text's hash) and the target (`target_key`: lowering version, LLVM and
llvmlite versions, host CPU and features, libmvec, GEMM blocking and thread count);
the store (`svod.store`) adds machine and svod-code fingerprints. `SVOD_OBJECT_CACHE=0`
disables it. Loading a cached object takes ~1 ms against an O3 compile. Where a linker
exists, each object is also linked into a shared library at exit, which later processes
load with dlopen, without importing llvmlite.binding (`svod.codegen.sharedlib`).
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # NOTE: not imported at run time: a warm record's loads need no Kernel (svod.warmplan)
    from svod.kernel import Kernel


def target_key() -> str:
    """What compiled code depends on beyond what it was compiled from. The LLVM facts come
    from `svod.codegen.hostinfo` (remembered per machine: a warm process does not import
    llvmlite.binding to key its objects); whether math calls use libmvec from the JIT
    when it is imported (`set_libmvec_enabled` may have turned it off)."""
    import llvmlite

    from svod.codegen.hostinfo import host_facts
    from svod.codegen.schedule import LOWER_VERSION, gemm_fingerprint

    info = host_facts()
    feats = hashlib.blake2b(info["features"].encode(), digest_size=8).hexdigest()
    jit = sys.modules.get("svod.codegen.jit")
    mvec = jit.libmvec_enabled() if jit is not None else info["mvec"]
    # NOTE: GEMM blocking follows the cache sizes and the thread count (not in the CPU name)
    return f"L{LOWER_VERSION}:llvmlite{llvmlite.__version__}:llvm{info['llvm']}:{info['cpu']}:{feats}:" \
           f"mvec{int(mvec)}:{gemm_fingerprint()}"


def object_key(kernel: Kernel) -> str:
    """The object-cache key (the store adds machine and svod-code fingerprints)."""
    return f"{kernel.key()}:{target_key()}"


def _cache_enabled() -> bool:
    return os.environ.get("SVOD_OBJECT_CACHE", "1") not in ("0", "false", "False")


def load_cached(okey: str, symbols, name: str):
    """The module stored under object-cache key `okey` (the store namespaces machine and
    code), loaded; None when absent, disabled (`SVOD_OBJECT_CACHE=0`) or unloadable."""
    if not _cache_enabled():
        return None
    from svod.codegen import sharedlib

    mod = sharedlib.load(okey, symbols, name)  # no llvmlite.binding (svod.codegen.sharedlib)
    if mod is not None:
        return mod
    try:
        from svod.store import default_store

        obj = default_store().get("objects", okey)
        if not obj:
            return None
        from svod.codegen.jit import load_object

        mod = load_object(obj, symbols, name=name)
    except Exception:  # noqa: BLE001 - the cache is an optimisation; a foreign/truncated object is a miss
        return None
    sharedlib.link_later(okey, obj)  # the next process loads it with dlopen
    return mod


def store_object(okey: str, module, meta: dict) -> None:
    """Keep `module`'s object code under `okey` for the next process (best effort)."""
    if not _cache_enabled():
        return
    try:
        from svod.store import default_store

        obj = module.object_code
        default_store().put("objects", okey, obj, meta=meta)
    except Exception:  # noqa: BLE001 - the cache is an optimisation, never an error
        return
    from svod.codegen import sharedlib

    sharedlib.link_later(okey, obj)



def ir_key(kind: str, ir: str) -> str:
    """The object-cache key of IR text `ir` compiled as `kind` ("graph", "runtime")."""
    return f"{kind}:{hashlib.blake2b(ir.encode(), digest_size=16).hexdigest()}:{target_key()}"


def compiled_ir(kind: str, ir: str, symbols, name: str):
    """`ir` compiled (lean) with its `symbols`: loaded from the cache under `kind`, the IR
    text's hash and the target when stored there, else compiled and stored."""
    okey = ir_key(kind, ir)
    mod = load_cached(okey, symbols, name)
    if mod is None:
        from svod.codegen.jit import compile_ir

        mod = compile_ir(ir, name=name, lean=True, keep_ir=False)
        store_object(okey, mod, {kind: name})
    return mod


__all__ = ["compiled_ir", "ir_key", "load_cached", "object_key", "store_object", "target_key"]
