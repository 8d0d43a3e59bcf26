"""First-call latency: graphs whose plan needs no search, and the search imported early.

A fresh process pays, on its first realize, for the import of the fusion search (egglog:
~0.2-0.3 s, more than the search and the compile together) — for graphs in which the
search has nothing to choose. Two measures (docs/engine.md, "First-call latency"):

- `no_choice(key)`: why the greedy plan of `key` is provably the plan the search would
  pick, or None. Such a graph is planned by the greedy planner without importing egglog
  (`svod.planner.search_plan` asks; the decision's detail and `svod.explain` say "search
  skipped: ..."; `svod.stats()["searches_skipped"]` counts them).
- `prefetch_search()`: import the search on a background thread after the first realize
  that did not need it, so that the next graph that does finds egglog imported.

The no-choice rule: one output; every computed node elementwise (no reduction, matmul,
library step, concatenation or pad), of the output's shape (no computed value is
broadcast, so none is evaluated twice per output element), used by exactly one consumer
(a tree: nothing is shared, so no materialisation saves work); the other nodes leaves —
inputs, constants, and views of them (reshape, expand, permute, shrink, flip: strided
reads that cost no compute); no complex dtype; at most `MAX_NODES` computed nodes. The
single fused kernel then evaluates each node once per output element and reads each
input once per use: every other plan materialises an intermediate (a write and a read
more) and computes nothing less, so it costs at least as much under any cost model that
charges memory traffic. The greedy planner fuses such a tree into one kernel; that is
checked (`no_choice_plan`), never assumed.

Forks (Ray/Dask workers, multiprocessing): a fork waits for a prefetch under way
(`os.register_at_fork`), so a child never inherits a held import lock. egglog itself does
not survive a fork — its extension starts a native thread at import, and a forked
child's first search hangs — so a child of a process that had imported egglog (prefetched
or searched) plans with the greedy planner (`search_unusable`, `skip_search`). Prefetch
starts no thread during `import svod`, and none when the search is off (`SVOD_SEARCH=0`)
or `SVOD_PREFETCH=0`, or under tiered planning (the engine asks: `svod.tiered`; its
searches run in the search process, `svod.searchproc`).
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Callable

from svod.flags import flag
from svod.ir import ELEMENTWISE, Ops
from svod.key import GraphKey
from svod.ops import ops_where

MAX_NODES = 64  # computed nodes of a no-choice tree (a bigger kernel may be worth a split)
_LEAF_VIEWS = ops_where(view=True)


def no_choice(key: GraphKey) -> str | None:
    """Why `key`'s greedy plan is the only plan worth having (module docstring), or None
    when the search may find a better one."""
    if len(key.outputs) != 1:
        return None
    nodes = key.nodes
    out_shape = nodes[key.outputs[0]].shape
    leaf = [False] * len(nodes)
    users = [0] * len(nodes)
    computed = 0
    for i, n in enumerate(nodes):
        if n.dtype.is_complex:
            return None
        for s in n.src:
            users[s] += 1
        if n.op in (Ops.BUFFER, Ops.CONST):
            leaf[i] = True
        elif n.op in _LEAF_VIEWS and all(leaf[s] for s in n.src):
            leaf[i] = True
        elif n.op in ELEMENTWISE and n.shape == out_shape:
            computed += 1
        else:
            return None
    if computed == 0 or computed > MAX_NODES or leaf[key.outputs[0]]:
        return None
    for i in range(len(nodes)):
        if not leaf[i] and users[i] != (0 if i == key.outputs[0] else 1):
            return None
    return f"an elementwise tree of {computed} op(s), each used once: one fused kernel is the only plan"


def no_choice_plan(key: GraphKey):
    """(plan, reason) for a no-choice graph: the greedy planner's plan when it is the one
    fused kernel the rule promises; None otherwise (the graph is then searched)."""
    why = no_choice(key)
    if why is None:
        return None
    from svod.plan_greedy import plan_greedy

    plan = plan_greedy(key)
    if len(plan.kernels) != 1:
        return None
    if flag("SVOD_VALIDATE"):  # as the planners check theirs
        plan.check()
    return plan, why


def skip_search(key: GraphKey):
    """Why `key` is planned without the search, or None (search it):
    (plan, "search skipped: ...") for a no-choice graph; (None, "search unavailable:
    ...") in a process forked after egglog was imported (`search_unusable`), where the
    caller plans greedily (a provisional plan: `svod tune` searches it again)."""
    got = no_choice_plan(key)
    if got is not None:
        return got[0], f"search skipped: {got[1]}"
    why = search_unusable()
    return None if why is None else (None, f"search unavailable: {why}")


# ----------------------------------------------------------------------------- fork

_forked_with_egglog = False


def _after_fork_in_child() -> None:
    global _forked_with_egglog
    if "egglog.bindings" in sys.modules:
        _forked_with_egglog = True


def search_unusable() -> str | None:
    """Why the search cannot run in this process, or None. egglog's native extension
    starts a thread when it is imported; a forked child has no such thread, and its first
    e-graph operation hangs (measured: a child of a process that imported egglog hangs in
    its first search, whether or not the parent searched). Such a child plans greedily."""
    if _forked_with_egglog:
        return "egglog was imported before this process was forked (its native thread does not survive a fork)"
    return None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ----------------------------------------------------------------------------- prefetch

PREFETCH_EXIT_WAIT = 30.0  # seconds an exiting process waits for the search's import (~0.4 s)
_prefetch_lock = threading.Lock()
_prefetch_thread: threading.Thread | None = None
_at_fork_registered = False


def prefetch_enabled() -> bool:
    """Whether `prefetch_search` may start: the search on, `SVOD_PREFETCH` not 0."""
    from svod.config import limits

    return os.environ.get("SVOD_PREFETCH", "1") not in ("", "0", "false", "False") and limits().enabled


def prefetch_search(importer: Callable[[], None]) -> bool:
    """Start `importer` (the engine passes `svod.planner.import_search`: the search and
    egglog) on a daemon thread, once per process; returns whether a thread was started
    now. A later search waits for it (the import locks order the two); a fork waits for
    it first."""
    global _prefetch_thread, _at_fork_registered
    if "search.saturate" in sys.modules or not prefetch_enabled():
        return False
    with _prefetch_lock:
        if _prefetch_thread is not None:
            return False
        t = threading.Thread(target=_prefetch_work, args=(importer,), name="svod-prefetch-search", daemon=True)
        if not _at_fork_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(before=wait_prefetch)
            _at_fork_registered = True
        # NOTE: the exit waits for the import: a daemon thread stopped by the interpreter's
        # finalization inside egglog's native code aborted the process ("FATAL: exception not
        # rethrown", rc -6) after the program's output was complete (seen in a test child)
        atexit.register(wait_prefetch, PREFETCH_EXIT_WAIT)
        _prefetch_thread = t
        t.start()
    return True


def _prefetch_work(importer) -> None:
    try:
        importer()
    except BaseException:  # noqa: BLE001 - a failed prefetch is retried (and reported) by the search itself
        pass


def wait_prefetch(timeout: float | None = 60.0) -> None:
    """Wait for a prefetch under way (before a fork; tests)."""
    t = _prefetch_thread
    if t is not None and t.is_alive() and t is not threading.current_thread():
        t.join(timeout)


def prefetch_state() -> str:
    """"not started", "running" or "done" (tests, explain)."""
    t = _prefetch_thread
    if t is None:
        return "not started"
    return "running" if t.is_alive() else "done"

