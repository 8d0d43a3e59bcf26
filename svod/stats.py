"""Process-wide counters: what the engine did (cache hits, searches, compiles, fallbacks).

>>> import svod
>>> svod.reset_stats(); svod.stats()["graph_cache_hits"]
0
"""

from __future__ import annotations

import threading

COUNTERS = (
    "realizes",  # realize() calls that had pending work
    "graph_cache_hits",  # plan found in memory
    "graph_cache_misses",  # plan not in memory (disk or a new plan follows)
    "disk_cache_hits",  # plan found in the persistent store
    "searches",  # every planner call, greedy included
    "kernels_compiled",  # native kernels compiled (not loaded from the object cache)
    "kernels_loaded",  # native kernels loaded from the object cache
    "kernels_launched",  # kernel launches (native or interpreted)
    "interpreter_fallbacks",  # kernels or graphs evaluated by the numpy interpreter
    "nodes_evaluated",  # graph nodes computed (a recompute shows up here)
    "plan_cache_evictions",  # in-memory plans dropped by the LRU (entries or bytes bound)
    "search_seconds",
    "compile_seconds",
)

_lock = threading.Lock()
_values: dict[str, float] = dict.fromkeys(COUNTERS, 0)


def bump(name: str, amount: float = 1) -> None:
    with _lock:
        _values[name] += amount


def stats() -> dict[str, float]:
    """A snapshot of the counters (a copy)."""
    with _lock:
        return dict(_values)


def reset_stats() -> None:
    with _lock:
        for k in _values:
            _values[k] = 0
