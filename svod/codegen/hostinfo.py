"""What LLVM says about this host, remembered between processes, so that a warm process
can key and load cached object code without importing ``llvmlite.binding``.

The object-cache key (`svod.codegen.objcache.target_key`) and the vector width
(`svod.codegen.target.host_target`) need the LLVM version, the host CPU name and
features LLVM detects, and whether glibc's libmvec links: facts only LLVM can tell, and
asking means importing ``llvmlite.binding`` (~20 ms quiet, more on a loaded machine) —
the biggest single cost of a warm first call (docs/engine.md). `host_facts()` asks LLVM
once per machine and keeps the answer in ``host-<machine fingerprint>.json`` in the cache
directory, stamped with what it depends on: the llvmlite version and the size and mtime
of its native library (an upgrade changes them), and `SVOD_NO_LIBMVEC`. A stamp that does
not match, an unreadable file or a process that has ``svod.codegen.jit`` imported already
asks LLVM (and rewrites the file). Standard library only.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import tempfile

_FORMAT = 1


def _stamp() -> list | None:
    """What the facts depend on beyond the machine (None: llvmlite not installed)."""
    import importlib.util

    spec = importlib.util.find_spec("llvmlite")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = spec.submodule_search_locations[0]
    try:
        st = os.stat(os.path.join(root, "binding", "libllvmlite.so"))
        lib = [st.st_size, st.st_mtime_ns]
    except OSError:
        lib = None
    import llvmlite  # its __init__ only (~0.3 ms): the version

    return [_FORMAT, llvmlite.__version__, lib, os.environ.get("SVOD_NO_LIBMVEC", "")]


def _path():
    from svod.cachedir import cache_dir
    from svod.fingerprint import machine_fingerprint

    return cache_dir() / f"host-{machine_fingerprint()}.json"


def _from_llvm(stamp) -> dict:
    """The facts, asked of LLVM (imports llvmlite.binding)."""
    import llvmlite.binding as llvm

    from svod.codegen import jit

    info = jit.host_target_info()
    return {"stamp": stamp, "triple": info["triple"], "cpu": info["cpu"], "features": info["features"],
            "vector_bits": info["vector_bits"], "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "mvec": bool(jit.has_libmvec())}


def _write(facts: dict) -> None:
    try:
        from svod.cachedir import prepare_dir

        p = _path()
        prepare_dir(p.parent)
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".host-", suffix=".tmp")
        with os.fdopen(fd, "w") as fh:
            json.dump(facts, fh)
        os.replace(tmp, p)
    except Exception:  # noqa: BLE001 - a cache of a fact: the next process asks LLVM again
        pass


@functools.cache
def host_facts() -> dict:
    """{"triple", "cpu", "features", "vector_bits", "llvm", "mvec"} of this host as LLVM
    sees it: from the file when its stamp matches, else from LLVM (and stored). Raises
    ImportError when llvmlite is not installed."""
    stamp = _stamp()
    if stamp is None:
        raise ImportError("llvmlite is not installed")
    if "svod.codegen.jit" not in sys.modules:
        try:
            with open(_path()) as fh:
                facts = json.load(fh)
            if isinstance(facts, dict) and facts.get("stamp") == stamp and \
                    all(k in facts for k in ("triple", "cpu", "features", "vector_bits", "llvm", "mvec")):
                return facts
        except (OSError, ValueError):
            pass
    facts = _from_llvm(stamp)
    try:
        with open(_path()) as fh:
            same = json.load(fh) == facts
    except (OSError, ValueError):
        same = False
    if not same:
        _write(facts)
    return facts


__all__ = ["host_facts"]
