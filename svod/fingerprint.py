"""Fingerprints that namespace everything svod persists: the machine (CPU model and ISA
features: object code never runs on a CPU without them) and svod's own code (a hash of
its sources: a new commit never replays an old plan or object). Standard library only,
cheap, cached per process.

>>> machine_fingerprint() == machine_fingerprint() and len(code_fingerprint()) == 32
True
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import sys
from pathlib import Path

_SOURCE_PACKAGES = ("svod", "search", "costmodels")
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


_CPUINFO_KEYS = frozenset({"vendor_id", "cpu family", "model", "model name", "flags",  # x86
                           "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "Features",
                           "isa", "uarch", "cpu model"})  # arm, riscv, mips


@functools.cache
def _cpu_fields() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo (ISA-relevant keys only), else {}."""
    fields: dict[str, str] = {}
    if not sys.platform.startswith("linux"):
        return fields
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:  # end of the first processor block
                        break
                    continue
                k, _, v = line.partition(":")
                k = k.strip()
                if k in _CPUINFO_KEYS and k not in fields:
                    fields[k] = v.strip()
    except OSError:
        pass
    return fields


def cpu_name() -> str:
    """A human-readable CPU model name (for `svod cache info`)."""
    f = _cpu_fields()
    name = f.get("model name") or f.get("cpu model") or platform.processor() or platform.machine()
    return name or "unknown"


@functools.cache
def machine_fingerprint() -> str:
    """CPU model name + ISA feature flags, hashed: `"<arch>-<16 hex>"`. Cheap and cached.

    Object code compiled for one feature set (AVX-512, say) must never be loaded on a CPU
    without it; this is the part of every stored key that guarantees it.

    >>> machine_fingerprint() == machine_fingerprint()
    True
    """
    f = _cpu_fields()
    flags = " ".join(sorted((f.get("flags") or f.get("Features") or f.get("isa") or "").split()))
    desc = "\n".join([
        platform.system(), platform.machine(), cpu_name(),
        *(f"{k}={f[k]}" for k in sorted(f) if k not in ("flags", "Features", "isa", "model name")),
        flags,
    ])
    digest = hashlib.blake2b(desc.encode(), digest_size=8).hexdigest()
    return f"{platform.machine() or 'unknown'}-{digest}"


def _source_files(root: Path) -> list[tuple[str, str]]:
    """(path relative to `root` with "/", path) of every `*.py` under the source packages
    but `__pycache__`, sorted. NOTE: os.walk, not Path.rglob: ~0.5 ms against 3-11 ms for
    ~150 files, on every warm process's first realize (docs/engine.md)."""
    files: list[tuple[str, str]] = []
    top = os.fspath(root)
    for pkg in _SOURCE_PACKAGES:
        base = os.path.join(top, pkg)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, top).replace(os.sep, "/")
            files += [(f"{rel}/{n}", os.path.join(dirpath, n)) for n in filenames if n.endswith(".py")]
    return sorted(files)


def _hash_files(files: list[tuple[str, str]]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for rel, p in files:
        try:
            with open(p, "rb") as fh:
                data = fh.read()
        except OSError:
            data = b"\xff<unreadable>"
        h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _hash_sources(root: Path) -> str:
    return _hash_files(_source_files(root))


def _stat_signature(files: list[tuple[str, str]]) -> str | None:
    """A digest of every source file's path, size, inode, mtime and ctime (ns), or None
    when a file cannot be stat-ed. Any write to a file moves its ctime (which no user
    call can set back) and a checkout replaces the file (a new inode), so an equal
    signature means the contents hashed under it are still the files' contents: the same
    rule as Python's own bytecode cache, at nanosecond rather than second resolution."""
    h = hashlib.blake2b(digest_size=16)
    for rel, p in files:
        try:
            st = os.stat(p)
        except OSError:
            return None
        h.update(f"{rel}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
    return h.hexdigest()


_MEMO_NAME = "code-fingerprint.json"
_MEMO_ENTRIES = 8  # installations (checkouts, venvs) sharing one cache directory


def _memo_fingerprint(root: Path, memo: Path | None) -> str:
    """The content hash of `root`'s sources, memoised in the file `memo` under their stat
    signature: hashing ~150 files costs 10-30 ms of a warm process's first realize, the
    stats ~1 ms. The memo keeps the latest `_MEMO_ENTRIES` signatures; it is written
    atomically (a temporary file renamed over it), and anything unreadable, malformed or
    unwritable only means the sources are hashed."""
    files = _source_files(root)
    sig = _stat_signature(files) if memo is not None else None
    entries: dict = {}
    if sig is not None:
        try:
            entries = json.loads(memo.read_text())
            if not isinstance(entries, dict):
                entries = {}
        except (OSError, ValueError):
            entries = {}
        hit = entries.get(sig)
        if isinstance(hit, str) and len(hit) == 32:
            return hit
    fp = _hash_files(files)
    if sig is not None:
        entries.pop(sig, None)
        keep = [(k, v) for k, v in entries.items() if isinstance(v, str)][-(_MEMO_ENTRIES - 1):]
        try:
            memo.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = memo.with_name(f"{memo.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(dict(keep + [(sig, fp)])))
            os.replace(tmp, memo)
        except OSError:
            pass
    return fp


@functools.cache
def _default_code_fingerprint() -> str:
    try:
        if __package__:
            from svod.cachedir import cache_dir  # standard library only, like this module
        else:  # NOTE: loaded alone by path (svod.store run without the package): its sibling
            import importlib.util

            spec = importlib.util.spec_from_file_location("svod_cachedir", Path(__file__).with_name("cachedir.py"))
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            cache_dir = mod.cache_dir
        memo = cache_dir() / _MEMO_NAME
    except Exception:  # NOTE: an unusable cache location only costs the hashing
        memo = None
    return _memo_fingerprint(_PACKAGE_ROOT, memo)


def code_fingerprint(root: str | os.PathLike | None = None) -> str:
    """Hash of the `*.py` sources of svod/, search/ and costmodels/ (32 hex digits).

    Files are taken in sorted relative-path order and hashed with their paths, so an
    edit, a rename or a new file changes it. `root` is the directory holding the three
    packages (default: this installation; cached per process, and across processes in
    the cache directory under the files' stat signature, `_memo_fingerprint`; an
    explicit `root` is hashed afresh on every call).

    >>> code_fingerprint() == code_fingerprint()
    True
    """
    if root is None:
        return _default_code_fingerprint()
    return _hash_sources(Path(root))


__all__ = ["code_fingerprint", "cpu_name", "machine_fingerprint"]
