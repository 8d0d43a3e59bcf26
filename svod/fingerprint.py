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


def _hash_sources(root: Path) -> str:
    files: list[tuple[str, Path]] = []
    for pkg in _SOURCE_PACKAGES:
        base = root / pkg
        if base.is_dir():
            files += [(p.relative_to(root).as_posix(), p) for p in base.rglob("*.py")
                      if "__pycache__" not in p.parts]
    h = hashlib.blake2b(digest_size=16)
    for rel, p in sorted(files):
        try:
            data = p.read_bytes()
        except OSError:
            data = b"\xff<unreadable>"
        h.update(rel.encode() + b"\0" + len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


@functools.cache
def _default_code_fingerprint() -> str:
    return _hash_sources(_PACKAGE_ROOT)


def code_fingerprint(root: str | os.PathLike | None = None) -> str:
    """Hash of the `*.py` sources of svod/, search/ and costmodels/ (32 hex digits).

    Files are taken in sorted relative-path order and hashed with their paths, so an
    edit, a rename or a new file changes it. `root` is the directory holding the three
    packages (default: this installation; cached per process; an explicit `root` is
    hashed afresh on every call).

    >>> code_fingerprint() == code_fingerprint()
    True
    """
    if root is None:
        return _default_code_fingerprint()
    return _hash_sources(Path(root))


__all__ = ["code_fingerprint", "cpu_name", "machine_fingerprint"]
