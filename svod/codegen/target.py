"""The machine codegen schedules for: vector width, cache sizes, worker threads.

`Target` is everything `svod.codegen.schedule` reads about a machine; `host_target()` is
this process's (the JIT's vector width, the caches the OS reports, the pool size). A
cost model describing another machine builds its own `Target` (`svod.costing`). Pure:
no llvmlite import here (the vector width comes from `svod.codegen.jit` when it is
imported, else from the facts remembered per machine, `svod.codegen.hostinfo`, which ask
the JIT once; `DEFAULT_VECTOR_BITS` without llvmlite).

>>> t = Target(vector_bits=256, l1=32 << 10, l2=512 << 10, l3=32 << 20, workers=2)
>>> t.lanes(4), t.vector_registers
(8, 16)
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

DEFAULT_VECTOR_BITS = 256  # the width assumed when the JIT cannot say (AVX2)
DEFAULT_CACHES = (32 << 10, 1 << 20, 32 << 20)  # (L1d, L2, L3) when the OS does not say


@dataclass(frozen=True)
class Target:
    """What codegen's decisions depend on beyond the kernel."""

    vector_bits: int = DEFAULT_VECTOR_BITS
    l1: int = DEFAULT_CACHES[0]  # L1 data cache bytes (per core)
    l2: int = DEFAULT_CACHES[1]  # L2 bytes (per core)
    l3: int = DEFAULT_CACHES[2]  # last-level cache bytes (shared)
    workers: int = 1  # threads a kernel's units are spread over (`pool_size`)

    def lanes(self, itemsize: int) -> int:
        """Elements of `itemsize` bytes in one vector register."""
        return max(1, self.vector_bits // (8 * itemsize))

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers (AVX-512: 32, AVX2: 16)."""
        return 32 if self.vector_bits >= 512 else 16


@functools.cache
def cache_sizes() -> tuple[int, int, int]:
    """(L1d, L2, L3) bytes per core/shared as the OS reports them (`DEFAULT_CACHES` when unknown)."""
    found = dict(zip((1, 2, 3), DEFAULT_CACHES))
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            if not entry.startswith("index"):
                continue
            d = os.path.join(base, entry)
            with open(os.path.join(d, "type")) as fh:
                kind = fh.read().strip()
            if kind == "Instruction":
                continue
            with open(os.path.join(d, "level")) as fh:
                level = int(fh.read())
            with open(os.path.join(d, "size")) as fh:
                text = fh.read().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * mult
            if level in found and size > 0:
                found[level] = size
    except (OSError, ValueError):
        pass
    return found[1], found[2], found[3]


_size: list[int] = []


def pool_size() -> int:
    """Threads the pool can use (workers + the calling thread): SVOD_THREADS or the CPU
    count, read once per process."""
    if not _size:
        n = os.cpu_count() or 1
        try:
            n = int(os.environ.get("SVOD_THREADS") or n)
        except ValueError:
            pass
        _size.append(max(1, n))
    return _size[0]


def _vector_bits() -> int:
    import sys

    jit = sys.modules.get("svod.codegen.jit")
    if jit is not None:
        return int(jit.host_target_info().get("vector_bits", DEFAULT_VECTOR_BITS))
    try:  # remembered per machine: no llvmlite.binding import on a warm process
        from svod.codegen.hostinfo import host_facts

        return int(host_facts().get("vector_bits", DEFAULT_VECTOR_BITS))
    except ImportError:  # no llvmlite: nothing is compiled, the default width is priced
        return DEFAULT_VECTOR_BITS


def host_target() -> Target:
    """This process's target (its parts are each read once and cached; a swapped-in host
    — tests' reference host — is seen at the next call)."""
    l1, l2, l3 = cache_sizes()
    return Target(_vector_bits(), l1, l2, l3, pool_size())


__all__ = ["DEFAULT_CACHES", "DEFAULT_VECTOR_BITS", "Target", "cache_sizes", "host_target", "pool_size"]
