"""A caching buffer pool: repeated workloads stop paying page faults for fresh outputs.

A fresh array pays a page fault per page on first touch, which for a large output can
cost more than the fused kernel that fills it (docs/memory.md, "The buffer pool"). The
pool keeps blocks of memory after use and hands them out again; big blocks are anonymous
mmaps advised to use transparent huge pages where the OS allows.

Ownership: a block is handed out as numpy views of it. numpy collapses every view's
`base` to the block, so the block's reference count says whether any user-visible view
is alive: a block returns to the pool only when none is (DESIGN "Buffers").
The pool holds at most `max_bytes` of free blocks (env `SVOD_POOL_BYTES`), checked when
a block comes back: beyond the cap the oldest free blocks are released to the OS at once
(`SVOD_POOL_BYTES=0`: a dropped result's memory returns with its last view).

Threads: every list is changed under the pool's lock. A block comes back from a
finaliser, which may run inside a garbage collection while this very thread holds the
lock: it only appends to `_returned` and takes the lock if it is free; whoever holds the
lock drains `_returned` before letting go (`_unlock`), so no return waits for the next
allocation.

Small blocks (≤ `SMALL`) take a cheaper path: no lease and no finaliser (those cost
more than a small kernel); `array` keeps them in per-size lists and reads
the free ones off the reference count itself (only the pool's list refers to a free
block), so reuse still waits for every view. The replay path (`small_array`) skips even
that: blocks this small come from malloc's heap bins without page faults, and
`np.empty` is cheaper than any pool bookkeeping.

>>> p = BufferPool(max_bytes=1 << 20)
>>> a = p.array((4, 4), "float32")
>>> a.shape, p.stats()["blocks_in_use"]
((4, 4), 1)
>>> del a; p.stats()["blocks_in_use"]
0
"""

from __future__ import annotations

import collections
import mmap
import os
import sys
import threading
import weakref

import numpy as np

HUGE = 2 << 20  # blocks at least this big come from mmap + MADV_HUGEPAGE
MIN_MMAP = 256 << 10
SMALL = 64 << 10  # blocks up to this size: refcount-tracked, no finaliser
SMALL_PER_SIZE = 32  # tracked small blocks per rounded size
SMALL_TOTAL = 16 << 20  # tracked small bytes at most (and at most max_bytes)
_getrefcount = sys.getrefcount


def _first_free(blocks: list, base: int):
    """The first block only `blocks` refers to (refcount `base`), or None."""
    for b in blocks:
        if _getrefcount(b) == base:
            return b
    return None


def _free_refcount() -> int:
    """The reference count `_first_free` sees for a block held only by its list."""
    blocks = [np.empty(1, np.uint8)]
    for base in range(1, 8):
        if _first_free(blocks, base) is not None:
            return base
    raise RuntimeError("svod pool: cannot calibrate reference counts")


_FREE_REFS = _free_refcount()


def _round(nbytes: int) -> int:
    if nbytes <= 4096:
        return max(64, (nbytes + 63) // 64 * 64)
    if nbytes < HUGE:
        return (nbytes + 4095) // 4096 * 4096
    return (nbytes + HUGE - 1) // HUGE * HUGE


def _new_block(nbytes: int) -> np.ndarray:
    if nbytes >= MIN_MMAP and hasattr(mmap, "MAP_PRIVATE"):
        mm = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if nbytes >= HUGE and hasattr(mm, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                mm.madvise(mmap.MADV_HUGEPAGE)
            except OSError:  # THP disabled: plain pages
                pass
        return np.frombuffer(mm, dtype=np.uint8)
    return np.empty(nbytes, dtype=np.uint8)


class BufferPool:
    """Blocks by size; `array(shape, dtype)` gives a (possibly reused) uninitialised array."""

    def __init__(self, max_bytes: int | None = None):
        env = os.environ.get("SVOD_POOL_BYTES")
        self.max_bytes = max_bytes if max_bytes is not None else int(env) if env else 1 << 30
        self._free: list[np.ndarray] = []  # blocks nobody uses, oldest first
        self._lent: dict[int, np.ndarray] = {}  # id -> block currently lent
        # NOTE: finalisers run inside garbage collection, possibly while this thread holds
        # the lock: they only append here (atomic), and the pool drains it under the lock.
        self._returned: collections.deque[int] = collections.deque()
        self._lock = threading.Lock()
        self._small: dict[int, list[np.ndarray]] = {}  # rounded size -> tracked small blocks
        self._small_bytes = 0
        self.hits = 0
        self.misses = 0

    def _drain(self) -> None:
        """Move blocks whose last view died back to the free list and release the oldest
        free blocks beyond `max_bytes` (lock held)."""
        while self._returned:
            blk = self._lent.pop(self._returned.popleft(), None)
            if blk is not None:
                self._free.append(blk)
        if self._free:
            total = sum(b.nbytes for b in self._free)
            while self._free and total > self.max_bytes:
                total -= self._free.pop(0).nbytes  # NOTE: the last reference: munmap / free here

    def _unlock(self) -> None:
        """Release the lock, draining blocks that came back while it was held."""
        while True:
            self._lock.release()
            if not self._returned or not self._lock.acquire(False):
                return
            self._drain()

    def _take(self, nbytes: int) -> np.ndarray:
        need = _round(max(nbytes, 1))
        self._lock.acquire()
        try:
            self._drain()
            fits = [b for b in self._free if need <= b.nbytes <= 2 * need]
            if fits:
                blk = min(fits, key=lambda b: b.nbytes)
                del self._free[next(i for i, b in enumerate(self._free) if b is blk)]
                self.hits += 1
            else:
                blk = _new_block(need)
                self.misses += 1
            self._lent[id(blk)] = blk
            return blk
        finally:
            self._unlock()

    def _give_back(self, key: int) -> None:
        """A lease died (finaliser): the block is free; the cap is applied now when the
        lock is free, else by its holder before it lets go (see the module docstring)."""
        self._returned.append(key)
        if self._lock.acquire(False):
            try:
                self._drain()
            finally:
                self._unlock()

    def _take_small(self, nbytes: int) -> np.ndarray:
        need = (nbytes + 63) // 64 * 64 if nbytes <= 4096 else (nbytes + 4095) // 4096 * 4096  # _round
        need = need or 64
        self._lock.acquire()
        try:
            blocks = self._small.get(need)
            if blocks is None:
                blocks = self._small[need] = []
            blk = _first_free(blocks, _FREE_REFS)
            if blk is not None:
                self.hits += 1
                return blk
            self.misses += 1
            blk = np.empty(need, np.uint8)
            if len(blocks) < SMALL_PER_SIZE and self._small_bytes + need <= min(SMALL_TOTAL, self.max_bytes):
                blocks.append(blk)
                self._small_bytes += need
            return blk  # untracked when over the caps: the garbage collector frees it
        finally:
            self._unlock()

    def small_array(self, shape: tuple[int, ...], dt: np.dtype, count: int) -> np.ndarray:
        """The replay path's allocator for outputs of at most `SMALL` bytes (arguments
        normalised: a tuple of ints, a numpy dtype, their product)."""
        # NOTE: blocks this small come from malloc's heap bins (below glibc's mmap
        # threshold): freed and re-used without page faults, and np.empty is cheaper
        # than any pool bookkeeping (docs/memory.md)
        return np.empty(shape, dt)

    def array(self, shape, dtype) -> np.ndarray:
        """An uninitialised C-contiguous array; its block returns to the pool when the
        array and every view of it are gone."""
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        n = 1
        for s in shape:
            n *= s
        nbytes = n * dt.itemsize
        if nbytes <= SMALL:
            a = np.frombuffer(self._take_small(nbytes), dt, n)  # base: the block (refcount = views)
            return a if len(shape) == 1 else a.reshape(shape)
        blk = self._take(nbytes)
        # The lease is the array every view's `base` collapses to: numpy stops collapsing
        # at a non-ndarray base (the memoryview), so the lease lives exactly as long as
        # some view of the block does.
        lease = np.frombuffer(memoryview(blk)[: n * dt.itemsize], dtype=np.uint8)
        weakref.finalize(lease, self._give_back, id(blk))
        return lease.view(dt).reshape(shape)

    def _small_split(self) -> tuple[list, list]:
        """Tracked small blocks as (free, in use) (lock held)."""
        free, used = [], []
        for blocks in self._small.values():
            for b in blocks:
                (free if _getrefcount(b) == _FREE_REFS else used).append(b)
        return free, used

    def clear(self) -> None:
        self._lock.acquire()
        try:
            self._drain()
            self._free.clear()
            for need, blocks in list(self._small.items()):
                keep = [b for b in blocks if _getrefcount(b) != _FREE_REFS]
                self._small_bytes -= need * (len(blocks) - len(keep))
                self._small[need] = keep
        finally:
            self._unlock()

    def stats(self) -> dict:
        self._lock.acquire()
        try:
            self._drain()
            sfree, sused = self._small_split()
            return {"blocks_free": len(self._free) + len(sfree), "blocks_in_use": len(self._lent) + len(sused),
                    "bytes_free": sum(b.nbytes for b in self._free) + sum(b.nbytes for b in sfree),
                    "bytes_in_use": sum(b.nbytes for b in self._lent.values()) + sum(b.nbytes for b in sused),
                    "hits": self.hits, "misses": self.misses, "max_bytes": self.max_bytes}
        finally:
            self._unlock()


POOL = BufferPool()


def _reset_after_fork() -> None:
    global POOL
    POOL = BufferPool(POOL.max_bytes)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_after_fork)
