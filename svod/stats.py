"""Process-wide counters: what the engine did (cache hits, searches, compiles, fallbacks).

>>> import svod
>>> svod.reset_stats(); svod.stats()["graph_cache_hits"]
0
"""

from __future__ import annotations

import itertools
import threading
import weakref

COUNTERS = (
    "realizes",  # realize() calls that had pending work
    "graph_cache_hits",  # plan found in memory
    "graph_cache_misses",  # plan not in memory (disk or a new plan follows)
    "disk_cache_hits",  # plan found in the persistent store
    "searches",  # every planner call, greedy included
    "searches_skipped",  # graphs planned without a search: the greedy plan is the only one (svod.firstcall)
    "searches_deferred",  # graphs given a provisional greedy plan, searched in the background (svod.tiered)
    "kernels_planned",  # kernels in the plans those calls made (a plan cache hit adds none)
    "kernels_compiled",  # native kernels compiled (not loaded from the object cache)
    "kernels_loaded",  # native kernels loaded from the object cache
    "kernels_launched",  # kernel launches (native or interpreted)
    "interpreter_fallbacks",  # kernels or graphs evaluated by the numpy interpreter
    "nodes_evaluated",  # graph nodes computed (a recompute shows up here)
    "plan_cache_evictions",  # in-memory plans dropped by the LRU (entries or bytes bound)
    "jit_traces",  # svod.jit traces (the first of each function included)
    "jit_retraces",  # svod.jit traces of a function traced before (new signature, guard, evicted)
    "jit_trace_evictions",  # svod.jit traces dropped by a function's LRU (max_traces)
    "search_seconds",
    "compile_seconds",
)

_lock = threading.RLock()  # NOTE: reentrant: a Tally's __del__ may run under it (a GC pass)
_values: dict[str, float] = dict.fromkeys(COUNTERS, 0)
_tallies: weakref.WeakSet = weakref.WeakSet()


class Tally:
    """Counters for one hot path, folded into the process counters when they are read:
    the path calls ``tally.tick()`` once per event (one C call, atomic under the GIL: no
    lock, cheaper than `bump`), each event counting `amounts` ((name, amount) pairs).
    Counts of a dropped Tally are folded in first."""

    __slots__ = ("amounts", "tick", "_folds", "_seen", "__weakref__")

    def __init__(self, amounts) -> None:
        self.amounts = tuple(amounts)
        self.tick = itertools.count().__next__  # returns ticks + folds so far, then adds one
        self._folds = 0
        self._seen = 0
        with _lock:
            _tallies.add(self)

    @property
    def n(self) -> int:
        """Events so far (under `_lock`: reading takes a tick of its own)."""
        with _lock:
            self._fold()
            return self._seen

    def _fold(self) -> None:
        n = self.tick() - self._folds
        self._folds += 1
        d, self._seen = n - self._seen, n
        if d:
            for name, amount in self.amounts:
                _values[name] += d * amount

    def __del__(self) -> None:
        try:
            with _lock:
                self._fold()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _fold_all() -> None:
    for t in list(_tallies):
        t._fold()


def bump(name: str, amount: float = 1) -> None:
    with _lock:
        _values[name] += amount


def bump_many(pairs) -> None:
    """`bump` for several (name, amount) pairs under one lock acquisition."""
    with _lock:
        for name, amount in pairs:
            _values[name] += amount


def stats() -> dict[str, float]:
    """A snapshot of the counters (a copy)."""
    with _lock:
        _fold_all()
        return dict(_values)


def reset_stats() -> None:
    with _lock:
        _fold_all()
        for k in _values:
            _values[k] = 0
