"""The persistent object cache of compiled code: kernels, graph programs, the runtime.

Object code is stored under a key naming what it was compiled from (a kernel's content
key, an IR text's hash) and the target (`target_key`: lowering version, LLVM and
llvmlite versions, host CPU and features, libmvec, GEMM blocking and thread count);
the store (`svod.store`) adds machine and svod-code fingerprints. `SVOD_OBJECT_CACHE=0`
disables it. Loading a cached object takes ~1 ms against an O3 compile.
"""

from __future__ import annotations

import hashlib
import os

from svod.kernel import Kernel


def target_key() -> str:
    """What compiled code depends on beyond what it was compiled from."""
    import llvmlite
    import llvmlite.binding as llvm

    from svod.codegen import jit
    from svod.codegen.schedule import LOWER_VERSION, gemm_fingerprint

    info = jit.host_target_info()
    feats = hashlib.blake2b(info["features"].encode(), digest_size=8).hexdigest()
    ver = ".".join(map(str, llvm.llvm_version_info))
    # NOTE: GEMM blocking follows the cache sizes and the thread count (not in the CPU name)
    return f"L{LOWER_VERSION}:llvmlite{llvmlite.__version__}:llvm{ver}:{info['cpu']}:{feats}:" \
           f"mvec{int(jit.libmvec_enabled())}:{gemm_fingerprint()}"


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
    from svod.codegen.jit import load_object

    try:
        from svod.store import default_store

        obj = default_store().get("objects", okey)
        return load_object(obj, symbols, name=name) if obj else None
    except Exception:  # noqa: BLE001 - the cache is an optimisation; a foreign/truncated object is a miss
        return None


def store_object(okey: str, module, meta: dict) -> None:
    """Keep `module`'s object code under `okey` for the next process (best effort)."""
    if not _cache_enabled():
        return
    try:
        from svod.store import default_store

        default_store().put("objects", okey, module.object_code, meta=meta)
    except Exception:  # noqa: BLE001 - the cache is an optimisation, never an error
        pass



def compiled_ir(kind: str, ir: str, symbols, name: str):
    """`ir` compiled (lean) with its `symbols`: loaded from the cache under `kind`, the IR
    text's hash and the target when stored there, else compiled and stored."""
    from svod.codegen.jit import compile_ir

    okey = f"{kind}:{hashlib.blake2b(ir.encode(), digest_size=16).hexdigest()}:{target_key()}"
    mod = load_cached(okey, symbols, name)
    if mod is None:
        mod = compile_ir(ir, name=name, lean=True, keep_ir=False)
        store_object(okey, mod, {kind: name})
    return mod


__all__ = ["compiled_ir", "load_cached", "object_key", "store_object", "target_key"]
