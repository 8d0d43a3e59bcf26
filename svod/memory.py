"""What svod holds, in this process and on disk: `svod.cache_info()` and `svod cache info`.

Every cache is bounded and its bound is reported beside what it holds:

- plan cache (`svod.engine.PLAN_CACHE`): plans with their graph programs, scratch and
  compiled programs (shared ones once), measured; `SVOD_PLAN_CACHE_ENTRIES` (512) and
  `SVOD_PLAN_CACHE_MB` (512).
- replay table (`svod.engine.REPLAY`): signature -> plan key, never a plan; 4,096.
- compiled programs: kernels alive because a plan or a jit trace holds them; bounded by
  their owners.
- jit traces (`svod.jit`): one plan per traced signature, `SVOD_JIT_MAX_TRACES` (64)
  per jitted function, least recently used dropped first.
- buffer pool (`svod.pool.POOL`): free blocks kept for reuse; `SVOD_POOL_BYTES` (1 GiB),
  applied when a block comes back.
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

from typing import Any


def cache_info(store=None) -> dict[str, Any]:
    """This process's memory caches (entries, measured bytes, bounds) and the persistent
    store's `info()` (the default store unless `store` is given)."""
    from svod import engine
    from svod.capture import live_traces
    from svod.codegen.program import live_programs
    from svod.pool import POOL
    from svod.stats import stats
    from svod.store import default_store

    pc = engine.PLAN_CACHE
    count, nbytes = live_programs()
    functions, traces = live_traces()
    return {
        "plan_cache": {"entries": len(pc), "bytes": pc.nbytes(), "max_entries": pc.max_entries,
                       "max_bytes": pc.max_bytes, "evictions": int(stats()["plan_cache_evictions"])},
        "replay": {"entries": len(engine.REPLAY), "max_entries": engine.REPLAY.max_entries},
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


__all__ = ["cache_info", "cache_info_text", "store_info_text"]
