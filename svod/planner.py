"""Where the plan of a GraphKey comes from: one function, `decide`, and everything that
needs a plan calls it — `realize()` and `svod.jit` (through `engine.get_executable`),
`svod.explain` and `svod explain FILE.py`, `svod tune` and `svod costmodel report`.

    memory cache -> tuning database -> disk cache -> search (the active cost model)

- **memory cache**: `svod.caches.PLAN_CACHE`, the Executables of this process;
- **tuning database**: the plan `svod tune` measured fastest for this graph (the plan
  realize runs, as tune timed it);
- **disk cache**: plans this machine searched before (`svod/store.py`), keyed by graph,
  plan format and cost-model generation, so a calibration or a tuning result plans again;
- **search**: the e-graph search priced by `cost_model()` (the active model: measured
  where `svod tune` timed kernels, the calibrated model elsewhere); every plan it prices
  is already through the lowering's plan passes (`svod.lower`: attention fusion included).
  A search that fails falls back to the greedy planner, a greedy planner that fails to
  the interpreter, each with one warning (`source == "fallback"`). `SVOD_SEARCH=0` plans
  with the greedy planner (`source == "greedy planner"`).

A plan from a search cut short by its budget, or from the greedy fallback, is correct but
maybe slower than a full search could find: it is persisted marked *provisional* together
with its GraphKey (for graphs the size policy lets the search take: a bigger budget can
help those), later processes use it as it is (no search in every process), and `svod
tune` searches it again with a larger budget (`research`, `provisional_keys`). The
whole-graph interpreter, a planner failure, is never persisted.

>>> import svod
>>> from svod.key import compact
>>> key, _ = compact([(svod.asarray([1.0, 2.0]) * 2).uop])
>>> decide(key).source in ("search", "disk cache", "greedy planner"), decide(key).source
(True, 'memory cache')
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass

from svod import tiered
from svod.caches import PLAN_CACHE
from svod.executable import Executable, InterpretedGraph, KernelPlan, WarmPlan, stored_threads
from svod.firstcall import skip_search
from svod.flags import debug as _debug
from svod.flags import debug_log, env_int
from svod.flags import flag as _flag
from svod.flags import warn_once as _warn_once
from svod.key import GraphKey
from svod.stats import bump

SOURCES = ("memory cache", "tuning database", "disk cache", "search", "greedy planner", "fallback")


@dataclass
class Decision:
    """The plan `decide` settled on, and where it came from."""

    exe: Executable
    source: str  # one of SOURCES
    detail: str = ""  # why a fallback; which source a memory-cached plan came from; "provisional"
    search: object = None  # search.SearchResult when this call searched (its report, variants, e-graph)

    @property
    def model(self) -> str:
        """The active cost model, described (`describe_model`; read on demand: it asks the
        store for the tuning generation)."""
        return describe_model(cost_model())

    @property
    def plan(self):
        """The Plan of Kernels realize runs (None for the whole-graph interpreter)."""
        return getattr(self.exe, "plan", None)

    def __str__(self) -> str:
        return f"{self.source}{f' ({self.detail})' if self.detail else ''}; cost model {self.model}"


# ----------------------------------------------------------------------------- cost model


_MODEL: tuple[str, object] | None = None  # (generation, model) of the latest cost_model() call


def cost_model():
    """The cost model the search prices with: `costmodels.tuning.default_model()` —
    measured times from the tuning database where `svod tune` stored them, the calibrated
    model over this machine's profile elsewhere (`SVOD_COST_MODEL` picks another). One
    instance per plan generation: tuning results or a new profile make a fresh one."""
    global _MODEL
    gen = plan_generation()
    cached = _MODEL
    if cached is not None and cached[0] == gen:
        return cached[1]
    try:
        from costmodels.tuning import default_model

        model = default_model()
    except Exception as e:  # noqa: BLE001 - a broken profile or store costs plan quality, never a result
        from svod.costing import RooflineModel

        _warn_once("costmodel", f"svod: the calibrated cost model is unavailable ({type(e).__name__}: {e}); "
                                "planning with the roofline model")
        model = RooflineModel()
    _MODEL = (gen, model)
    return model


def kernel_threads(plan) -> dict[int, int]:
    """Threads per kernel of `plan` (index -> count) as the cost model prices them in it
    on this machine (`SVOD_THREADS=1` forces one). Small kernels get one: a split must pay
    its dispatch. Every KernelPlan the planner makes builds its graph with these."""
    if env_int("SVOD_THREADS", 0) == 1:
        return {}
    return _priced_threads(plan, cost_model())


def _priced_threads(plan, model) -> dict[int, int]:
    """Threads per kernel of `plan` as `model` prices them on this machine ({} when the
    pricing fails: a failure costs speed, never a result)."""
    from svod.costing import Machine, plan_prices

    try:
        prices = plan_prices(plan, model, Machine.host())
    except Exception:  # noqa: BLE001 - a pricing failure costs speed, never a result
        return {}
    return {i: p.threads for i, p in enumerate(prices) if p.threads > 1}


def forget() -> None:
    """Drop the cost model made for the current generation and the kept search reports,
    after the background search under way (`svod.reset`; queued ones are dropped): the
    next plan builds the model again."""
    global _MODEL
    tiered.TIERED.drain()
    _MODEL = None
    LAST_SEARCH.clear()


def describe_model(model) -> str:
    """A cost model in words: its name and what it stands on."""
    name = getattr(model, "name", type(model).__name__)
    est = getattr(model, "estimate", model)
    prof = getattr(est, "profile", None)
    if prof is None:
        return name
    over = " over the calibrated model" if est is not model else ""
    return f"{name}{over} (machine profile {getattr(prof, 'id', '?')}, {getattr(prof, 'source', '?')})"


def plan_generation() -> str:
    """The cost-model generation in every persistent plan key: which model, the machine
    profile's id and the tuning database's token (`costmodels.tuning.generation`), so a
    calibration or tuning result makes plans made before it be planned again."""
    try:
        from costmodels.tuning import generation

        return generation()
    except Exception:  # noqa: BLE001 - no costmodels: the fixed generation of the roofline
        return "g0"


# ----------------------------------------------------------------------------- planners


_search_imported = threading.Event()


def import_search() -> None:
    """Import the search (and egglog) on a fresh thread, once.

    NOTE: egglog keeps references to the frames that were on the stack while it was
    imported (its declarations remember where they were made). Imported from here, that
    stack would be the user's realize() — whose locals (the result arrays) would then
    never be freed. A thread of its own starts from an empty stack."""
    if _search_imported.is_set():
        return
    err: list[BaseException] = []

    def work():
        try:
            import search.extract  # noqa: F401
            import search.saturate  # noqa: F401
        except BaseException as e:  # noqa: BLE001 - re-raised on the caller's thread
            err.append(e)

    t = threading.Thread(target=work, name="svod-import-search")
    t.start()
    t.join()
    if err:
        raise err[0]
    _search_imported.set()


LAST_SEARCH: dict = {}  # the latest search report per key hash (explain, SVOD_DEBUG)


def provisional_threads(plan) -> dict[int, int]:
    """Threads per kernel of a tiered provisional plan (`svod.tiered`): priced by the
    roofline model (`svod.costing.RooflineModel`, in svod's core) instead of the active
    cost model, whose first build in a process costs ~80 ms of CPU (importing and
    calibrating costmodels) on the critical path of a first call — for a plan that serves
    until its search is done. `SVOD_THREADS=1` forces one thread."""
    from svod.costing import RooflineModel

    if env_int("SVOD_THREADS", 0) == 1:
        return {}
    return _priced_threads(plan, RooflineModel())


def _greedy(key: GraphKey, source: str, detail: str, provisional: bool,
            threads=None) -> tuple[Executable, str, str]:
    """The greedy planner; a failure falls back to the interpreter with one warning."""
    from svod.plan_greedy import plan_greedy

    try:
        # a final plan prices the kernel kinds (svod.plan_greedy.greedy_kinds); a provisional
        # one does not (its search decides soon, and the cost model costs a first call ~80 ms)
        plan = plan_greedy(key) if provisional else plan_greedy(key, cost_model())
        if _flag("SVOD_VALIDATE"):
            plan.check()
    except Exception as e:  # noqa: BLE001 - any planner bug must not lose the user's result
        _warn_once("plan", f"svod: planning failed ({type(e).__name__}: {e}); running graph {key.hash[:12]} in "
                           f"the interpreter")
        exe = InterpretedGraph(key)
        exe.provisional = True
        return exe, "fallback", f"interpreter: the greedy planner failed ({type(e).__name__})"
    return KernelPlan(key, plan, provisional=provisional, threads=threads or kernel_threads), source, detail


TIERED_DETAIL = "provisional: the search runs in the background (tiered planning, svod.tiered)"


def search_plan(key: GraphKey, *, model=None, k: int = 1, keep_egraph: bool = False, limits=None,
                provisional_ok: bool = False):
    """Search `key` with `model` (default: the active one) and `limits` (default: those in
    force); returns (Executable, source, detail, SearchResult or None).
    `provisional_ok` (the realize path): under tiered planning (`svod.tiered`) a graph the
    search may improve gets the greedy plan now, provisional, and its search is queued
    for the background worker (`start_background`)."""
    from svod.config import limits as current_limits

    lim = limits or current_limits()
    if lim.enabled and (skip := skip_search(key)) is not None:  # svod.firstcall: no egglog import / a fork
        bump("searches_skipped")
        if skip[0] is None:
            return (*_greedy(key, "greedy planner", skip[1], True), None)
        return KernelPlan(key, skip[0], threads=kernel_threads), "greedy planner", skip[1], None
    if provisional_ok and lim.enabled and k == 1 and not keep_egraph and len(key.nodes) <= lim.max_nodes \
            and tiered.enabled():
        exe, source, detail = _greedy(key, "greedy planner", TIERED_DETAIL, True, threads=provisional_threads)
        if source == "greedy planner" and tiered.TIERED.submit(key, exe, lim, _background_search):
            exe.tiered = True
            bump("searches_deferred")
            return exe, source, detail, None
    bump("searches")
    t0 = time.perf_counter()
    try:
        out = _search_plan(key, lim, model, k, keep_egraph)
        plan = getattr(out[0], "plan", None)
        if plan is not None:
            bump("kernels_planned", len(plan.kernels))
        return out
    finally:
        bump("search_seconds", time.perf_counter() - t0)


def _search_plan(key: GraphKey, lim, model, k: int, keep_egraph: bool):
    if not lim.enabled:
        exe, source, detail = _greedy(key, "greedy planner", "SVOD_SEARCH=0", False)
        return exe, source, detail, None
    try:
        import_search()
        from search import plan_search

        result = plan_search(key, cost_model=model or cost_model(), k=k, keep_egraph=keep_egraph, limits=lim)
        plan = result.plan
        if _flag("SVOD_VALIDATE"):
            plan.check()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # noqa: BLE001 - egglog panics derive from BaseException
        _warn_once("search", f"svod: the fusion search failed ({type(e).__name__}: {e}); using the greedy "
                             f"planner for graph {key.hash[:12]}")
        exe, source, detail = _greedy(key, "fallback", f"greedy planner: the search failed ({type(e).__name__})",
                                      True)
        return exe, source, detail, None
    LAST_SEARCH[key.hash] = result.report
    if len(LAST_SEARCH) > 64:
        LAST_SEARCH.pop(next(iter(LAST_SEARCH)), None)
    if _debug():
        print(f"svod search {key.hash[:12]}:\n{result.report}", file=sys.stderr)
    rep = result.report
    if rep.planner == "greedy":
        source, detail = "fallback", f"greedy planner: {rep.reason}"
    else:
        source, detail = "search", "provisional: the search ran out of budget" if result.provisional else ""
    return KernelPlan(key, plan, provisional=result.provisional, threads=kernel_threads), source, detail, result


# the hook told when a background search's plan replaced a provisional one, (key, source,
# detail): the engine registers `svod.recompiles.RECOMPILES.searched` at its import (the
# recompile log sits above the planner: docs/engine.md, layering)
ON_REPLACED = None


def _background_search(job) -> None:
    """The background worker's job (svod.tiered): search `job.key` under the limits it was
    queued with, compile the plan, persist it, and swap it in for the provisional plan
    (when that is still the memory cache's entry: not evicted or reset meanwhile)."""
    from svod.config import pinned

    key = job.key
    with pinned(job.limits):
        got = _search_elsewhere(key, job.limits, job.sent.set)
        if got is None:  # no search process: in this thread
            exe, source, detail, _ = search_plan(key, limits=job.limits)
            _save(key, exe)
        else:
            exe, source, detail = got
        exe.origin = source
        exe.algebra = job.limits.algebra
        exe.mode = job.limits.algebra + _plan_switches()
        build = getattr(exe, "graph_program", None)
        if build is not None:  # compiled here, off the critical path
            build()
    swapped = PLAN_CACHE.replace(key, job.exe, exe)
    job.outcome = f"{source}{f' ({detail})' if detail else ''}; " + \
        ("replaced the provisional plan" if swapped else "the provisional plan was gone (evicted or reset)")
    if swapped:
        exe.replaced = "greedy planner (provisional: the first call's plan)"
        if ON_REPLACED is not None:
            ON_REPLACED(key, source, detail)
    if _debug():
        debug_log(f"svod plan {key.hash[:12]}: background {job.outcome}")


def _search_elsewhere(key: GraphKey, lim, on_sent=None):
    """(Executable, source, detail) of `key` searched in the search process
    (`svod.searchproc`: it persists the plan too), or None when that is off or failed
    (then the caller searches in its own thread). `on_sent()` is called once the
    process has the request (the exit need not wait for the answer then)."""
    from svod import searchproc

    if not searchproc.enabled():
        return None
    t0 = time.perf_counter()
    try:
        reply = searchproc.SEARCH_PROCESS.search(key, lim, on_sent)
    except (RuntimeError, OSError, ValueError) as e:
        _warn_once("searchproc", f"svod: the search process is unusable ({e}); background searches run in a "
                                 f"thread of this process")
        return None
    finally:
        bump("search_seconds", time.perf_counter() - t0)
    data = reply.get("plan") if reply.get("ok") else None
    if not isinstance(data, dict) or data.get("kind") != "plan":
        return None  # failed there, or the interpreter fallback: searched here instead
    from svod.kernel import plan_from_json

    plan = plan_from_json(data["plan"])
    plan.check()
    bump("searches")
    bump("kernels_planned", len(plan.kernels))
    exe = KernelPlan(key, plan, provisional=bool(reply.get("provisional")),
                     threads=stored_threads(data, kernel_threads))
    return exe, str(reply.get("source", "search")), str(reply.get("detail", ""))


def start_background() -> bool:
    """Start the background searches queued by tiered planning (the engine calls it once
    a realize's result is ready); whether one runs."""
    return len(tiered.TIERED) > 0 and tiered.TIERED.start()


def settle(timeout: float | None = None) -> bool:
    """Wait for every background search (tiered planning) to finish and swap its plan in;
    True when none is left. Tests and benchmarks call it to be deterministic."""
    return tiered.TIERED.wait_all(timeout)


# ----------------------------------------------------------------------------- persistence

# bump when the JSON form of plans changes (provisional plans add "provisional" and "key"),
# or what a search may choose (2: algebraic rewrites, docs/algebra.md)
PLAN_FORMAT = 2


def algebra_mode() -> str:
    """The algebra mode in force ("reassoc" or "exact": `svod.search_limits(algebra=)`,
    `SVOD_ALGEBRA`); a plan is made for one mode and used only in it."""
    from svod.config import algebra

    return algebra()


def plan_mode() -> str:
    """`algebra_mode()` and the plan switches away from their defaults
    (`svod.flags.plan_switches`): what a stored or cached plan was made under."""
    return algebra_mode() + _plan_switches()


def _plan_switches() -> str:
    from svod.flags import plan_switches

    return plan_switches()


def plan_store_key(key: GraphKey) -> str:
    return f"{key.hash}:{PLAN_FORMAT}:{plan_generation()}:{plan_mode()}"


def _tuned(key: GraphKey) -> Executable | None:
    """The plan `svod tune` measured best for this graph, if any (costmodels' tuning DB)."""
    try:
        from costmodels.tuning import TuningDB

        plan = TuningDB().tuned_plan(key.hash)
    except Exception:  # noqa: BLE001 - the tuning DB is an optimisation, never an error
        return None
    return None if plan is None else KernelPlan(key, plan, threads=kernel_threads)


def _load(key: GraphKey) -> Executable | None:
    """Rebuild a plan from the persistent store (the store namespaces machine + code): a
    `WarmPlan` when a warm record of this very plan and target is stored beside it
    (svod.warmplan: its graph program replays without building Kernels), else a
    KernelPlan."""
    from svod.store import default_store

    skey = plan_store_key(key)
    st = default_store()
    obj = st.get_json("plans", skey)
    if not isinstance(obj, dict) or obj.get("kind") != "plan":
        return None
    threads = stored_threads(obj, kernel_threads)
    runner = None
    if not _debug():  # SVOD_DEBUG prints the plan's boundaries: the plan is built anyway
        try:
            from svod.warmplan import PREFIX, runner_for

            runner = runner_for(st.get_json("plans", PREFIX + skey), obj)
        except Exception:  # noqa: BLE001 - the record is an optimisation: the usual path below
            runner = None
    if runner is not None:
        exe = WarmPlan(key, obj, runner, provisional=bool(obj.get("provisional")), threads=threads)
    else:
        from svod.kernel import plan_from_json

        try:
            plan = plan_from_json(obj["plan"])
            plan.check()
        except Exception:  # noqa: BLE001 - a stale or foreign entry is a miss, never an error
            return None
        exe = KernelPlan(key, plan, provisional=bool(obj.get("provisional")), threads=threads)
    exe.store_key = skey
    return exe


def _save(key: GraphKey, exe: Executable) -> None:
    """Persist a plan; a provisional one with its GraphKey (`svod tune` searches it again).
    The whole-graph interpreter (a planner failure) is never persisted."""
    data = exe.to_json()
    if data is None or data.get("kind") != "plan":
        return
    if exe.provisional:
        from svod.config import limits

        data = dict(data, provisional=True)
        if len(key.nodes) <= limits().max_nodes:  # above it the size policy plans greedily however long
            data["key"] = key.to_json()
    from svod.store import default_store

    skey = plan_store_key(key)
    if default_store().put_json("plans", skey, data):
        exe.store_key = skey  # its graph program, once built, stores a warm record (svod.warmplan)


def provisional_keys() -> list[GraphKey]:
    """GraphKeys of the provisional plans stored under the current generation."""
    from svod.store import default_store

    st = default_store()
    suffix = f":{PLAN_FORMAT}:{plan_generation()}:{plan_mode()}"
    out = []
    for name in st.keys("plans"):
        if not name.endswith(suffix):
            continue
        obj = st.get_json("plans", name)
        if isinstance(obj, dict) and obj.get("provisional") and isinstance(obj.get("key"), dict):
            try:
                out.append(GraphKey.from_json(obj["key"]))
            except (ValueError, KeyError, TypeError):  # a damaged entry is skipped
                continue
    return out


# ----------------------------------------------------------------------------- the decision


def decide(key: GraphKey, *, k: int = 1, keep_egraph: bool = False, provisional_ok: bool = False) -> Decision:
    """The plan realize runs for `key`: memory cache, tuning database, disk cache, then a
    search with the active cost model (see the module docstring).
    A plan found below the memory cache is put in it (and a searched one persisted), so the
    next call — realize's, explain's, tune's — gets the same Executable. `k` and
    `keep_egraph` go to the search when it runs (explain: variants and the e-graph).
    `provisional_ok` (the realize path only): a new graph with fusion choices may get the
    greedy plan while its search runs in the background (`svod.tiered`); every other
    caller waits for a pending background search and gets its plan."""
    if not provisional_ok and tiered.TIERED.pending(key.hash):
        tiered.TIERED.wait(key.hash)
    exe = PLAN_CACHE.get(key)
    mode = plan_mode()
    if exe is not None and getattr(exe, "mode", "reassoc") != mode:
        exe = None  # planned in another algebra mode or switch setting: plan again (the cache keeps the newer)
    if exe is not None:
        bump("graph_cache_hits")
        origin = getattr(exe, "origin", "")
        if getattr(exe, "replaced", ""):
            origin += f", in the background; it replaced the {exe.replaced}"
        elif getattr(exe, "tiered", False) and tiered.TIERED.pending(key.hash):
            origin += f" ({TIERED_DETAIL})"
        return Decision(exe, "memory cache", f"planned by {origin}" if origin else "")
    bump("graph_cache_misses")
    result = None
    exe, source, detail = _tuned(key), "tuning database", "svod tune's measured choice"
    if exe is None:
        exe, source, detail = _load(key), "disk cache", ""
    if exe is not None:
        bump("disk_cache_hits")
        if exe.provisional:
            detail = "provisional: svod tune searches it again"
    else:
        exe, source, detail, result = search_plan(key, k=k, keep_egraph=keep_egraph, provisional_ok=provisional_ok)
        if not getattr(exe, "tiered", False):  # a tiered plan is replaced, never persisted
            _save(key, exe)
    exe.origin = source
    exe.algebra, exe.mode = algebra_mode(), mode
    PLAN_CACHE.put(key, exe)
    if _debug():
        debug_log(f"svod plan {key.hash[:12]}: {source}{f' ({detail})' if detail else ''}")
    return Decision(exe, source, detail, result)


def research(key: GraphKey, *, seconds: float | None = None) -> Decision:
    """Search `key` again with a larger budget (`svod tune` on a provisional plan): at
    least `seconds` (default 8x the search budget in force, at least 10 s). The result
    replaces the plan in memory and on disk, provisional again only if this search too
    was cut short."""
    from dataclasses import replace

    from svod.config import limits

    lim = limits()
    lim = replace(lim, seconds=seconds if seconds is not None else max(8 * lim.seconds, 10.0))
    exe, source, detail, result = search_plan(key, limits=lim)
    _save(key, exe)
    exe.origin = source
    exe.algebra, exe.mode = algebra_mode(), plan_mode()
    PLAN_CACHE.put(key, exe)
    return Decision(exe, source, detail, result)
