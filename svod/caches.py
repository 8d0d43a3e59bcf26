"""The engine's in-memory caches: plans by GraphKey, replays by signature, recent graphs.

- `PLAN_CACHE` (`PlanCache`): GraphKey hash -> Executable, an LRU bounded by entries and
  by the bytes its entries hold;
- `REPLAY` (`ReplayCache`): structural signature of a pending graph -> the key hash of its
  plan and its leaf order, so a structure seen before skips compaction; it never holds a
  plan (an evicted plan is a miss here);
- `RECENT` (`RecentGraphs`): the last few realized small expressions, kept alive so that
  rebuilding them is a hash-consing lookup per op.

`svod.reset()` (svod.memory) empties these with every other cache of the process.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from typing import TYPE_CHECKING

from svod.flags import env_int
from svod.stats import bump
from svod.viewfold import rebuild

if TYPE_CHECKING:
    from svod.executable import Executable
    from svod.key import GraphKey


class PlanCache:
    """In-memory LRU of Executables keyed by GraphKey hash. Bounded by entries and by
    bytes: what its entries hold (`Executable.footprint`: measured programs — a program
    shared by several plans counted once — graph programs, scratch, the plan objects);
    `SVOD_PLAN_CACHE_ENTRIES`, `SVOD_PLAN_CACHE_MB`. An evicted plan is dropped: its
    programs are freed unless another plan or a jit trace still holds them.

    Threads: `get`, `put`, `clear` take the lock; `use` and `holds` (the replay path) do
    not — they are single C-level dict calls, atomic under the GIL, and `put` iterates
    only over C-level snapshots (`list(d.values())`), so a concurrent `use` never makes
    an iteration fail ("OrderedDict mutated during iteration")."""

    def __init__(self, max_entries: int | None = None, max_bytes: int | None = None):
        self.max_entries = max_entries if max_entries is not None else env_int("SVOD_PLAN_CACHE_ENTRIES", 512)
        self.max_bytes = max_bytes if max_bytes is not None else env_int("SVOD_PLAN_CACHE_MB", 512) << 20
        self._d: OrderedDict[str, Executable] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _total(entries) -> int:
        own, progs = 0, {}
        for e in entries:
            o, p = e.footprint()
            own += o
            progs.update(p)
        return own + sum(progs.values())

    def nbytes(self) -> int:
        """Bytes held by the entries (each shared program once)."""
        with self._lock:
            entries = list(self._d.values())
        return self._total(entries)

    def get(self, key: GraphKey) -> Executable | None:
        with self._lock:
            exe = self._d.get(key.hash)
            if exe is not None:
                self._d.move_to_end(key.hash)
            return exe

    def put(self, key: GraphKey, exe: Executable) -> None:
        """Insert (most recent) and evict least-recent entries beyond either bound. Sizes
        are re-read here (programs and scratch appear after an entry's first run); the
        entry just put is never evicted."""
        with self._lock:
            self._put_locked(key, exe)

    def _put_locked(self, key: GraphKey, exe: Executable) -> None:
        d = self._d
        d[key.hash] = exe
        d.move_to_end(key.hash)
        while len(d) > self.max_entries:
            d.popitem(last=False)
            bump("plan_cache_evictions")
        if len(d) > 1 and self._total(list(d.values())) > self.max_bytes:
            # NOTE: evict oldest first; the total is recounted (shared programs stay
            # while a remaining entry holds them)
            while len(d) > 1:
                d.popitem(last=False)
                bump("plan_cache_evictions")
                if self._total(list(d.values())) <= self.max_bytes:
                    break

    def replace(self, key: GraphKey, old: Executable, new: Executable) -> bool:
        """Put `new` in place of `old` when `old` is still the entry for `key` (a
        background search's plan replacing a provisional one, svod.tiered); whether it
        did. A replay by signature finds the new plan by the key hash at its next call."""
        with self._lock:
            if self._d.get(key.hash) is not old:
                return False
            self._put_locked(key, new)
        return True

    def use(self, key_hash: str) -> Executable | None:
        """The entry for `key_hash`, marked most recently used (None: not held). For the
        replay by signature, which skips `get`: a plan replayed all the time must not age
        out of the LRU. Lock-free (see the class docstring); an entry evicted meanwhile
        is simply gone."""
        exe = self._d.get(key_hash)
        if exe is not None:
            try:
                self._d.move_to_end(key_hash)
            except KeyError:
                pass
        return exe

    def holds(self, key_hash: str, exe: Executable) -> bool:
        """Whether `exe` is still the entry for `key_hash` (lock-free read)."""
        return self._d.get(key_hash) is exe

    def clear(self) -> None:
        with self._lock:
            self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


class ReplayEntry:
    """What `ReplayCache` holds for one signature: `key_hash` (the plan's GraphKey hash),
    `perm` (for each input of the plan, the position of its leaf among the signature's
    leaves), `recent` (whether `RECENT` keeps the graph: its leaves' sizes follow from the
    signature), `dyn` (the `svod.shapes.SymbolicCall` of a size run in its bucket's plan,
    a `ViewBind`, or None). Holds no plan: the straight-line runner of a plan for this
    leaf order lives on the plan (`Executable.hits`, keyed by the signature; svod.engine)."""

    __slots__ = ("key_hash", "perm", "recent", "dyn")

    def __init__(self, key_hash: str, perm: tuple, recent: bool, dyn=None):
        self.key_hash, self.perm, self.recent, self.dyn = key_hash, perm, recent, dyn


class ReplayCache:
    """Structural signature (svod.ir.signature_of) -> `ReplayEntry` (the plan's key hash,
    the leaf order, whether `RECENT` keeps the graph, the dynamic-size call or None).

    A front for PLAN_CACHE that skips compaction: an entry names the plan by its key
    hash only (`PlanCache.use` finds it), so this table never keeps a plan alive —
    evicting or clearing there is a miss here — and a re-planned key replays its new
    plan (one signature has one GraphKey, so one leaf order). Bounded; dropped
    wholesale when full. Single C-level dict calls: safe from several threads.
    """

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._d: dict[int, tuple] = {}

    def get(self, sig: int):
        return self._d.get(sig)

    def put(self, sig: int, key_hash: str, leaves: tuple, buffers: list, dyn=None) -> None:
        """`dyn`: the `svod.shapes.SymbolicCall` binding this size to its bucket's plan
        `key_hash` (one signature has one row count, so one call), None for an exact plan.
        A binding that is a folded view (`svod.viewfold.ViewRef`) is replayed as the same
        view of its base leaf's array (one signature has one set of offsets): the entry's
        binder (`ViewBind`) wraps `dyn`."""
        pos = {id(leaf): i for i, leaf in enumerate(leaves)}
        steps = [getattr(b, "steps", None) for b in buffers]
        if any(s is not None for s in steps):
            perm = tuple(pos.get(id(b.base if s is not None else b), -1) for b, s in zip(buffers, steps))
            if -1 in perm or len(set(perm)) != len(leaves):
                return  # not the same leaves as the compacted graph's: never replay by signature
            dyn = ViewBind(tuple(steps), dyn)
        else:
            perm = tuple(pos.get(id(b), -1) for b in buffers)
            if len(perm) != len(leaves) or -1 in perm:
                return  # not the same leaves as the compacted graph's: never replay by signature
        if len(self._d) >= self.max_entries:
            self._d.clear()
        self._d[sig] = ReplayEntry(key_hash, perm, RECENT.small(leaves), dyn)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


class ViewBind:
    """The binder of a replay entry whose bindings include folded views: `bind(arrays)`
    makes binding i from its base leaf's array through `steps[i]` (None: the array itself,
    `svod.viewfold.rebuild`), then applies `inner` (a `svod.shapes.SymbolicCall` or None);
    `results` is inner's. Holds movement steps only, never an array."""

    __slots__ = ("steps", "inner")

    def __init__(self, steps: tuple, inner=None):
        self.steps = steps
        self.inner = inner

    def bind(self, arrays) -> list:
        out = [a if s is None else rebuild(s, a) for a, s in zip(arrays, self.steps)]
        return out if self.inner is None else self.inner.bind(out)

    def results(self, outs) -> list:
        return outs if self.inner is None else self.inner.results(outs)

    def run(self, exe, arrays) -> list:
        """`exe`'s results for the leaves' `arrays` (the inner call's `run`, svod.shapes)."""
        out = [a if s is None else rebuild(s, a) for a, s in zip(arrays, self.steps)]
        return exe.run(out) if self.inner is None else self.inner.run(exe, out)


class RecentGraphs:
    """The last few realized expressions over small inputs, kept alive.

    A realize replaces its expression by a buffer, so the expression's nodes die, and the
    next `f(x)` over the same inputs would build them again (docs/engine.md: what that
    costs). Holding the last `max_graphs` expressions keeps their nodes in the
    hash-consing cache: rebuilding one is a lookup per op. Only expressions whose leaves
    hold at most `max_bytes` together are kept (a kept node keeps its inputs' arrays alive),
    so at most `max_graphs * max_bytes` of inputs outlive their tensors, until
    `max_graphs` more realizes or `clear()`. `SVOD_RETAIN_GRAPHS=0` turns it off.
    """

    def __init__(self, max_graphs: int, max_bytes: int = 1 << 18):
        self.max_graphs = max_graphs
        self.max_bytes = max_bytes
        self._q: deque = deque(maxlen=max(max_graphs, 1))

    def small(self, leaves) -> bool:
        """Whether a graph over these leaves (BufferRefs) is kept."""
        return bool(self.max_graphs) and leaves is not None and \
            sum(leaf.array.nbytes for leaf in leaves) <= self.max_bytes

    def keep(self, roots: list) -> None:
        self._q.append(roots)  # NOTE: deque.append is atomic under the GIL

    def clear(self) -> None:
        self._q.clear()

    def __len__(self) -> int:
        return len(self._q)


PLAN_CACHE = PlanCache()
REPLAY = ReplayCache()
RECENT = RecentGraphs(env_int("SVOD_RETAIN_GRAPHS", 16))
