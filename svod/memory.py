"""What svod holds, in this process and on disk: `svod.cache_info()` and `svod cache info`;
`svod.reset()` empties every cache and pool of this process.

Every cache is bounded and its bound is reported beside what it holds:

- plan cache (`svod.caches.PLAN_CACHE`): plans with their graph programs, scratch and
  compiled programs (shared ones once), measured; `SVOD_PLAN_CACHE_ENTRIES` (512) and
  `SVOD_PLAN_CACHE_MB` (512).
- replay table (`svod.caches.REPLAY`): signature -> plan key, never a plan; 4,096.
- compiled programs: kernels alive because a plan or a jit trace holds them; bounded by
  their owners.
- jit traces (`svod.jit`): one plan per traced signature, `SVOD_JIT_MAX_TRACES` (64)
  per jitted function, least recently used dropped first.
- buffer pool (`svod.pool.POOL`): free blocks kept for reuse; `SVOD_POOL_BYTES` (1 GiB),
  applied when a block comes back.
- einsum memos (`svod.contraction`): recipes 256, parsed subscripts and paths 1,024 each,
  cleared whole when full.
- matrix-vector partials (`svod.codegen.blas._SCRATCH`): at most 2 buffers of at most
  8 MiB kept.
- disk (`svod.store`): plans, object code, tuning data, profiles; plans + object code
  bounded by `SVOD_DISK_CACHE_MB` (256), least recently used evicted first.

>>> import svod
>>> info = svod.cache_info()
>>> sorted(info)
['disk', 'jit', 'plan_cache', 'pool', 'programs', 'replay']
>>> info["plan_cache"]["max_entries"] > 0
True
"""

from __future__ import annotations

import sys
from typing import Any

from svod import caches


def _pool_free(pool) -> int:
    return pool.stats()["blocks_free"]


def _store_open(store_mod) -> int:
    return int(store_mod._DEFAULT is not None)


def _nonzero_counters(stats_mod) -> int:
    return sum(1 for v in stats_mod.stats().values() if v)


# Every cache and pool of the process, as (name, module, empty it, count its entries): the
# plan path's caches, the compiled programs and their lookups, the memos keyed by data
# (signatures, constants, view chains, BLAS layouts, kernel features), the cost model and
# machine profiles, jit traces, the buffer pool, the default store's open handle, the
# counters. Memos of fixed facts of the machine or the code (its target, fingerprints,
# dtype promotion) are not caches in this sense and stay. A module not imported yet holds
# nothing: `reset` and `cache_sizes` skip it, and never import it.
CACHES = (
    ("plan cache", "svod.caches", lambda m: m.PLAN_CACHE.clear(), lambda m: len(m.PLAN_CACHE)),
    ("replay table", "svod.caches", lambda m: m.REPLAY.clear(), lambda m: len(m.REPLAY)),
    ("recent graphs", "svod.caches", lambda m: m.RECENT.clear(), lambda m: len(m.RECENT)),
    ("dynamic shapes", "svod.shapes", lambda m: m.DYNAMIC.clear(), lambda m: len(m.DYNAMIC) + len(m.DYNAMIC.log)),
    ("dynamic view offsets", "svod.viewfold", lambda m: m.OFFSETS.clear(),
     lambda m: len(m.OFFSETS) + len(m.OFFSETS.log)),
    ("dynamic region writes", "svod.writes", lambda m: m.WRITES.clear(), lambda m: len(m.WRITES) + len(m.WRITES.log)),
    ("cost model and search reports", "svod.planner", lambda m: m.forget(),
     lambda m: (m._MODEL is not None) + len(m.LAST_SEARCH)),
    ("jit traces", "svod.capture", lambda m: m.clear_traces(), lambda m: m.live_traces()[1]),
    ("compiled programs", "svod.codegen.program", lambda m: m.clear_programs(), lambda m: len(m._programs)),
    ("kernel schedules", "svod.codegen.schedule", lambda m: m.clear_cache(), lambda m: len(m._CACHE)),
    ("BLAS layouts", "svod.codegen.blas", lambda m: m._plan.cache_clear(), lambda m: m._plan.cache_info().currsize),
    ("signatures", "svod.ir", lambda m: m._SIGS.clear(), lambda m: len(m._SIGS)),
    ("constants", "svod.tensor", lambda m: m._CONST_CACHE.clear(), lambda m: len(m._CONST_CACHE)),
    ("index steps", "svod.indexing", lambda m: m._RECIPES.clear(), lambda m: len(m._RECIPES)),
    ("einsum recipes, parses and paths", "svod.contraction",
     lambda m: (m._RECIPES.clear(), m._PARSED.clear(), m._PATHS.clear()),
     lambda m: len(m._RECIPES) + len(m._PARSED) + len(m._PATHS)),
    ("matrix-vector partials scratch", "svod.codegen.blas", lambda m: m._SCRATCH.clear(),
     lambda m: len(m._SCRATCH.free)),
    ("view chains", "svod.lower.build", lambda m: m._CHAINS.clear(), lambda m: len(m._CHAINS)),
    ("kernel features", "costmodels.features", lambda m: m._BY_KEY.clear(), lambda m: len(m._BY_KEY)),
    ("machine profiles", "costmodels.profile", lambda m: m.forget(), lambda m: len(m._cached)),
    ("calibration kernels", "costmodels.calibrate", lambda m: m._OVERLAP_KERNELS.clear(),
     lambda m: len(m._OVERLAP_KERNELS)),
    ("profile session", "svod.profiler", lambda m: m.forget_session(), lambda m: len(m._SESSION["events"])),
    ("buffer pool", "svod.pool", lambda m: m.POOL.clear(), lambda m: _pool_free(m.POOL)),
    ("default store", "svod.store", lambda m: m.reset_default_store(), _store_open),
    ("counters", "svod.stats", lambda m: m.reset_stats(), _nonzero_counters),
)


def reset() -> None:
    """Empty every in-memory cache and pool of this process (`CACHES`): the plan cache,
    replay table, recent graphs and dynamic-shape buckets, the cost model and search
    reports, every jit trace, the compiled-program registry and the memos keyed by data,
    the machine profiles read, the buffer pool's free blocks, the default store's handle
    (the next use opens `SVOD_CACHE_DIR` again) and the counters of `svod.stats()`.

    Nothing on disk is touched (`svod cache clear` empties the store). Arrays and tensors
    stay valid: a program or buffer still in use lives on with its user; the next realize
    plans (or loads from disk) and compiles again. Not thread-safe against realizes
    running meanwhile: call it between them (tests, benchmarks, after changing
    `SVOD_CACHE_DIR` or a machine profile)."""
    for _, module, clear, _ in CACHES:
        m = sys.modules.get(module)
        if m is not None:
            clear(m)


def cache_sizes() -> dict[str, int]:
    """Entries each cache of `CACHES` holds now (0 for a module not imported)."""
    out = {}
    for name, module, _, size in CACHES:
        m = sys.modules.get(module)
        out[name] = size(m) if m is not None else 0
    return out


def cache_info(store=None) -> dict[str, Any]:
    """This process's memory caches (entries, measured bytes, bounds) and the persistent
    store's `info()` (the default store unless `store` is given)."""
    from svod.capture import live_traces
    from svod.codegen.program import live_programs
    from svod.pool import POOL
    from svod.stats import stats
    from svod.store import default_store

    pc = caches.PLAN_CACHE
    count, nbytes = live_programs()
    functions, traces = live_traces()
    return {
        "plan_cache": {"entries": len(pc), "bytes": pc.nbytes(), "max_entries": pc.max_entries,
                       "max_bytes": pc.max_bytes, "evictions": int(stats()["plan_cache_evictions"])},
        "replay": {"entries": len(caches.REPLAY), "max_entries": caches.REPLAY.max_entries},
        "programs": {"count": count, "bytes": nbytes},
        "jit": {"functions": functions, "traces": traces},
        "pool": POOL.stats(),
        "disk": (store if store is not None else default_store()).info(),
    }


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def store_info_text(store=None) -> str:
    """A human-readable summary of a store's `info()` (default store)."""
    from svod.store import KINDS, default_store

    i = (store if store is not None else default_store()).info()
    if i["backend"] == "sqlite":
        head = f"svod cache: {i['path']} (SQLite, schema v{i['schema_version']}" + \
               (", read-only" if not i["writable"] else "") + ")"
    else:
        head = f"svod cache: in memory only ({i['degraded_reason'] or 'by request'})"
    lines = [
        head,
        f"  size on disk: {_human(i['size_bytes'])} ({_human(i['live_bytes'])} in use; plans + objects bounded "
        f"at {_human(i['max_bytes'])}, SVOD_DISK_CACHE_MB; {i['evictions']} evicted here)",
        f"  machine:      {i['machine_fingerprint']} ({i['cpu']})",
        f"  code:         {i['code_fingerprint']}",
        f"  {'kind':<10} {'current':>8} {'all versions':>13}",
    ]
    lines += [f"  {k:<10} {i['rows'][k]:>8} {i['rows_all_versions'][k]:>13}" for k in KINDS]
    if i["memory_entries"]:
        lines.append(f"  in memory only: {i['memory_entries']} entries, {_human(i['memory_bytes'])}")
    lines += [f"  note: {e}" for e in i["events"]]
    return "\n".join(lines)


def cache_info_text(store=None) -> str:
    """`cache_info()` as text: the memory caches of this process (a fresh `svod cache
    info` process holds none: it shows their bounds), then the persistent store."""
    i = cache_info(store)
    pc, pool = i["plan_cache"], i["pool"]
    mem = [
        "svod memory (this process):",
        f"  plan cache:   {pc['entries']} plans, {_human(pc['bytes'])} (bounds {pc['max_entries']} plans, "
        f"{_human(pc['max_bytes'])}; SVOD_PLAN_CACHE_ENTRIES, SVOD_PLAN_CACHE_MB); {pc['evictions']} evicted",
        f"  programs:     {i['programs']['count']} compiled kernels alive, {_human(i['programs']['bytes'])} "
        "(freed with the last plan or jit trace holding them)",
        f"  jit traces:   {i['jit']['traces']} held by {i['jit']['functions']} jitted functions (bound per "
        "function: SVOD_JIT_MAX_TRACES)",
        f"  replay table: {i['replay']['entries']} signatures (bound {i['replay']['max_entries']})",
        f"  buffer pool:  {_human(pool['bytes_in_use'])} in use, {_human(pool['bytes_free'])} free "
        f"(bound {_human(pool['max_bytes'])} free, SVOD_POOL_BYTES)",
    ]
    return "\n".join(mem) + "\n" + store_info_text(store)


__all__ = ["cache_info", "cache_info_text", "cache_sizes", "reset", "store_info_text"]
