"""Why a plan was made again: the recompile log (like torch's ``TORCH_LOGS=recompiles``).

Every time the engine needs a plan that is not in the memory cache (`svod.engine.
get_executable`: realize, `svod.jit`, the profiler), one `Recompile` record says why,
comparing the graph with those this process planned before:

- ``new structure``: no graph of this structure (its ops, dtypes and wiring, shapes and
  arguments aside) was planned before;
- ``new shapes``: the structure was planned at other shapes — the first difference is
  named (``input 0 shape (1000, 256), was (1024, 256)``); a size of 0 or 1 rows of a
  dynamic structure says it is specialised (`svod.shapes`);
- ``new arguments``: same shapes, another constant or view argument (a slice bound, a
  reduction axis: ``CONST %2 2.0 -> 3.0``) or input strides;
- ``new bucket`` / ``became dynamic``: a size bucket of a dynamic structure, or its
  second row count (`svod.shapes`; the bucket's key then plans as above), or its second
  view offsets (`svod.viewfold`: slices of realized buffers bound at run time);
- ``evicted``: this very graph was planned before in this process and the memory cache
  dropped it (its LRU bounds: `svod.cache_info()`);
- ``searched``: tiered planning (`svod.tiered`) ran the graph's greedy plan on its first
  call, and the background search's plan has now replaced it (provisional -> searched).

The record also says where the plan came from (``disk cache``: planned by an earlier
process; ``search``/``greedy planner``: planned now; with the log on, also why the disk
cache had no plan: no entry for this graph, or only one under another cost-model
generation — `disk_miss`, one scan of the store's plan keys, done only then).
`RECOMPILES.log` keeps the records (oldest first, at most `MAX_LOG`;
`svod.shapes.recompiles()` lists the plans made again); `SVOD_LOGS=recompiles` (or
``SVOD_DEBUG=1``) prints one line per record to stderr (or the "svod" logger when logging
is configured); `RECOMPILES.describe(key)` says why `key` was planned in this process, or
why a realize would plan it now (svod.explain). `svod.reset()` forgets all of it.

>>> r = Recompile("0123456789ab", 3, "new structure", "first graph of structure 4567", "search")
>>> str(r)
'svod recompile: graph 0123456789ab (3 nodes): new structure (first graph of structure 4567); plan from search'
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass

from svod.flags import debug, debug_log
from svod.key import GraphKey

MAX_LOG = 256  # records kept
MAX_STRUCTURES = 4096  # structures remembered (LRU), each with its latest GraphKey


@dataclass(frozen=True)
class Recompile:
    """One plan made again (module docstring): which graph, why, and where its plan came from."""

    key: str  # the GraphKey's hash, 12 digits
    nodes: int
    reason: str  # "new structure", "new shapes", "new arguments", "new bucket", "became dynamic", "evicted",
    # "searched"
    detail: str  # the difference in words
    source: str = ""  # where decide found or made the plan (svod.planner.SOURCES)

    def __str__(self) -> str:
        src = f"; plan from {self.source}" if self.source else ""
        return f"svod recompile: graph {self.key} ({self.nodes} nodes): {self.reason} ({self.detail}){src}"


def logs_enabled(what: str = "recompiles") -> bool:
    """Whether `SVOD_LOGS` (a comma-separated list) names `what`; ``SVOD_DEBUG=1`` implies it."""
    raw = os.environ.get("SVOD_LOGS", "")
    return (raw and what in {p.strip() for p in raw.split(",")}) or debug() > 0


def structure(key: GraphKey) -> str:
    """The key with shapes, strides and arguments aside: ops, dtypes, wiring, outputs."""
    h = hashlib.blake2b(digest_size=8)
    for n in key.nodes:
        h.update(b"%s|%s|%s;" % (n.op.value.encode(), n.dtype.name.encode(), b",".join(b"%d" % s for s in n.src)))
    h.update(b"out:" + b",".join(b"%d" % o for o in key.outputs))
    return h.hexdigest()


def _arg_text(arg) -> str:
    t = repr(arg)
    return t if len(t) <= 40 else t[:37] + "..."


def difference(old: GraphKey, new: GraphKey) -> tuple[str, str]:
    """(reason, the first difference in words) between two keys of one structure."""
    for i, (a, b) in enumerate(zip(old.nodes, new.nodes)):
        if a.shape != b.shape:
            what = f"input {b.arg[0]}" if b.op.value == "BUFFER" else f"{b.op.value} %{i}"
            small = [d for d, (x, y) in enumerate(zip(a.shape, b.shape)) if x != y and y in (0, 1)]
            spec = "; sizes 0 and 1 are specialised" if small and len(a.shape) == len(b.shape) else ""
            return "new shapes", f"{what} shape {b.shape}, was {a.shape}{spec}"
    for i, (a, b) in enumerate(zip(old.nodes, new.nodes)):
        if a.arg != b.arg:
            if b.op.value == "BUFFER":
                return "new arguments", f"input {b.arg[0]} strides {b.arg[1]}, was {a.arg[1]}"
            return "new arguments", f"{b.op.value} %{i} {_arg_text(a.arg)} -> {_arg_text(b.arg)}"
    return "new arguments", "an argument outside the nodes differs"


def disk_miss(key: GraphKey) -> str:
    """Why the disk cache had no plan for `key` (one scan of the store's plan keys): an
    entry under another cost-model generation or plan format (a calibration or a tuning
    result since), or none for this graph with this svod code on this machine."""
    try:
        from svod.planner import plan_store_key
        from svod.store import default_store

        want = plan_store_key(key)
        others = [k for k in default_store().keys("plans") if k.startswith(key.hash + ":") and k != want]
    except Exception as e:  # noqa: BLE001 - a note, never an error
        return f"disk cache not read ({type(e).__name__})"
    if others:
        return "disk cache: only under another cost-model generation or plan format (planned again since)"
    return "disk cache: no entry for this graph (this machine, this svod code)"


class RecompileLog:
    """The structures planned so far (LRU) and the records; thread-safe (one lock)."""

    def __init__(self, max_structures: int = MAX_STRUCTURES, max_log: int = MAX_LOG):
        self.max_structures = max_structures
        self._structs: OrderedDict[str, GraphKey] = OrderedDict()  # structure -> latest key planned
        self._planned: OrderedDict[str, None] = OrderedDict()  # key hashes planned (bounded like _structs)
        self.log: deque = deque(maxlen=max_log)
        self._lock = threading.Lock()

    def why(self, key: GraphKey, bucket_notes: tuple[str, ...] = ()) -> tuple[str, str]:
        """(reason, detail) a plan of `key` would be recorded with now; records nothing."""
        with self._lock:
            if key.hash in self._planned:
                return "evicted", "planned before in this process; the memory cache dropped it (svod.cache_info())"
            old = self._structs.get(structure(key))
        if bucket_notes:
            last = bucket_notes[-1]
            return ("new bucket" if "new bucket" in last else "became dynamic"), "; ".join(bucket_notes)
        if old is None:
            return "new structure", f"first graph of structure {structure(key)[:12]} in this process"
        return difference(old, key)

    def note(self, key: GraphKey, source: str, bucket_notes: tuple[str, ...] = ()) -> Recompile:
        """Record a plan of `key` not found in the memory cache (and print it under SVOD_LOGS)."""
        reason, detail = self.why(key, bucket_notes)
        show = logs_enabled()
        if show and source in ("search", "greedy planner", "fallback"):  # why not from the disk (a store scan)
            source = f"{source}; {disk_miss(key)}"
        rec = Recompile(key.hash[:12], len(key.nodes), reason, detail, source)
        s = structure(key)
        with self._lock:
            self._structs[s] = key
            self._structs.move_to_end(s)
            self._planned[key.hash] = None
            self._planned.move_to_end(key.hash)
            while len(self._structs) > self.max_structures:
                self._structs.popitem(last=False)
            while len(self._planned) > 4 * self.max_structures:
                self._planned.popitem(last=False)
            self.log.append(rec)
        if show:
            debug_log(str(rec))
        return rec

    def searched(self, key: GraphKey, source: str, detail: str = "") -> Recompile:
        """Record that a background search's plan replaced `key`'s provisional greedy plan
        (tiered planning, svod.tiered; printed under SVOD_LOGS=recompiles)."""
        what = "the background search's plan replaced the provisional greedy plan of the first call"
        rec = Recompile(key.hash[:12], len(key.nodes), "searched", what + (f"; {detail}" if detail else ""), source)
        with self._lock:
            self.log.append(rec)
        if logs_enabled():
            debug_log(str(rec))
        return rec

    def describe(self, key: GraphKey) -> str:
        """One line for svod.explain: why this process planned `key` (its latest record),
        or why a realize would plan it now. A background search of `key` under way
        (tiered planning) is waited for first, so the line says what runs from now on."""
        from svod.tiered import TIERED

        if TIERED.pending(key.hash):
            TIERED.wait(key.hash)
        short = key.hash[:12]
        with self._lock:
            rec = next((r for r in reversed(self.log) if r.key == short), None)
        if rec is not None:
            return f"planned in this process: {rec.reason} ({rec.detail}); plan from {rec.source}"
        reason, detail = self.why(key)
        return f"not planned by a realize yet: {reason} ({detail})"

    def __len__(self) -> int:
        return len(self._structs) + len(self.log)

    def clear(self) -> None:
        with self._lock:
            self._structs.clear()
            self._planned.clear()
            self.log.clear()


RECOMPILES = RecompileLog()
