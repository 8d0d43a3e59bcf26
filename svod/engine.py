"""The one orchestrator: realize pending UOps along the pipeline of DESIGN.md.

    compact -> lookup -> plan -> build -> compile -> run

- **compact** (`PIPELINE.compact`, svod.key): the pending roots as a GraphKey (nodes
  numbered in a canonical order) and its Bindings (the input arrays);
- **lookup**: a structure replayed before is found by its signature (`REPLAY`) without
  compacting; a dynamic structure maps to its size bucket's key (svod.shapes);
- **plan** (`svod.planner.decide`: memory cache, tuning database, disk cache, search,
  plan passes) -> an Executable (svod.executable);
- **build, compile, run**: `Executable.run` builds the compiled graph and compiles its
  programs on the first run, and replays them after.

`realize_uops` is the path; everything that needs a plan asks `svod.planner.decide`. The
caches live in svod.caches, the executables in svod.executable, SVOD_VALIDATE in
svod.validate, switches and debug lines in svod.flags; `svod.reset()` (svod.memory)
empties every cache.

Hooks (a lower layer triggering this one, without importing it): at import, the engine
registers `realize_uops` as the realizer of `svod.tensor` (`svod.tensor._engine_realize`),
and `svod.profiler` registers its realize as `PROFILE_REALIZE` (SVOD_PROFILE=1).

>>> import svod
>>> x = svod.asarray([1.0, 2.0]) * 2
>>> _ = svod.realize(x); x.numpy()
array([2., 4.], dtype=float32)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from svod import planner as _planner
from svod import tensor as _tensor
from svod.caches import PLAN_CACHE, RECENT, REPLAY
from svod.config import algebra as config_algebra
from svod.executable import Executable
from svod.firstcall import prefetch_search
from svod.flags import DEBUG_KEY, ENV_DATA, debug_log, profile_switch
from svod.flags import debug as _debug
from svod.ir import Ops, UOp, signature_of
from svod.key import Bindings, GraphKey, compact
from svod.planner import LAST_SEARCH, cost_model, decide, import_search, start_background
from svod.recompiles import RECOMPILES
from svod.shapes import DYNAMIC
from svod.shapes import enabled as dynamic_enabled
from svod.stats import Tally, bump
from svod.stats import stats as snapshot
from svod.tiered import TIERED
from svod.tiered import enabled as _tiered_on
from svod.viewfold import OFFSETS
from svod.writes import WRITES
from svod.writes import split as split_writes


@dataclass
class Pipeline:
    """The replaceable parts of the realize path (the plan itself: `svod.planner.decide`)."""

    compact: Callable[[list[UOp]], tuple[GraphKey, Bindings]] = compact


PIPELINE = Pipeline()
# when a list, every planned graph is appended as (GraphKey, where: "realize" or "jit NAME")
# (`svod explain FILE.py`, `svod viz FILE.py`)
RECORDER: list | None = None
# SVOD_PROFILE=1 (read at import; svod.profiler's module docstring): realize through the
# profiler's `realize_profiled(pending, key, bindings) -> outputs`, which svod.profiler
# registers here at its import (svod/__init__ imports it)
PROFILING = profile_switch()
PROFILE_REALIZE: Callable | None = None


def get_executable(key: GraphKey, notes: tuple[str, ...] = (), provisional_ok: bool = False) -> Executable:
    """The executable for `key`: `svod.planner.decide` (memory cache, tuning database,
    disk cache, search). A plan not from the memory cache is recorded with why it was
    needed (`svod.recompiles`; `notes`: the notes of the lookup that led to `key`, why its
    structure turned dynamic in its sizes, svod.shapes, or in its view offsets,
    svod.viewfold). `provisional_ok`: the realize path takes a provisional greedy plan
    while the search runs in the background (tiered planning, svod.tiered); svod.jit,
    the profiler and explain get the searched plan."""
    d = decide(key, provisional_ok=provisional_ok)
    if d.source != "memory cache":
        RECOMPILES.note(key, d.source, notes)
    return d.exe


def plan_for(tensors) -> tuple[GraphKey, Executable]:
    """The key and the plan svod uses for these (unrealized) tensors, without running it
    (for a size of a dynamic structure: its bucket's key and plan, `svod.shapes`)."""
    key, _ = PIPELINE.compact([t.uop for t in tensors if t.uop.op is not Ops.BUFFER])
    dyn = DYNAMIC.peek(key)[0] if dynamic_enabled() else None
    if dyn is not None:
        key = dyn.key
    return key, get_executable(key)


def _wrap(pending: list[UOp], outs) -> dict[UOp, UOp]:
    mapping = {}
    for r, arr in zip(pending, outs):
        assert arr.shape == r.shape and arr.dtype == r.dtype.np, (r, arr.shape, arr.dtype)
        mapping[r] = UOp.buffer(arr, r.dtype)
    return mapping


_PREFETCH = [False]  # whether `prefetch_search` was asked for (once per process)
_REPLAY_TALLY = Tally((("realizes", 1), ("graph_cache_hits", 1)))  # one count per replay by signature
_REPLAY_TICK = _REPLAY_TALLY.tick
_DYNAMIC = DYNAMIC
_dynamic_on = dynamic_enabled
_BUFFER = Ops.BUFFER
_WHERE = Ops.WHERE
_buffer = UOp.buffer
# NOTE: the replay hit path's calls, bound once: `REPLAY.get`, `PLAN_CACHE.use` (a get and a
# move to the LRU's end) and `RECENT.keep` are C calls on containers the caches never
# rebind (their `clear` empties them in place)
_replay_get = REPLAY._d.get
_plan_get, _plan_touch = PLAN_CACHE._d.get, PLAN_CACHE._d.move_to_end
_algebra = config_algebra
_recent_keep = RECENT._q.append
_ENV, _DEBUG_KEY = ENV_DATA, DEBUG_KEY  # SVOD_DEBUG unset: no `debug()` call (svod.flags)


def realize_uops(roots: Sequence[UOp]) -> dict[UOp, UOp]:
    """Compute every pending root in one plan; returns the becomes-map root -> BUFFER."""
    if len(roots) == 1:  # the common case, without the dedup set and the merged signature
        r = roots[0]
        if r.op is _BUFFER:
            return {}
        pending: list[UOp] = [r]
        sig, leaves = r._sig, r._leaves  # `signature_of` of one root
    else:
        pending = list({id(r): r for r in roots if r.op is not _BUFFER}.values())
        if not pending:
            return {}
        sig, leaves = signature_of(pending)
    if RECORDER is not None or PROFILING or (_ENV is None or _ENV.get(_DEBUG_KEY) is not None) and _debug():
        sig = leaves = None
    # lookup by signature: a structure seen before (same signature => same GraphKey, leaves
    # in a known order) replays its plan with no compaction and no lookup by key
    fast = _replay_get(sig) if sig is not None else None
    exe = _plan_get(fast.key_hash) if fast is not None else None
    if exe is not None:
        try:  # `PLAN_CACHE.use`, inlined: a plan replayed all the time must not age out of the LRU
            _plan_touch(fast.key_hash)
        except KeyError:  # evicted meanwhile by another thread: this call still runs it
            pass
    if exe is not None and exe.algebra != _algebra():
        exe = None  # planned in the other algebra mode: the general path plans for this one
    if exe is not None:
        _REPLAY_TICK()
        hits = exe.hits
        if hits is not None and fast.dyn is None:  # this plan's straight-line hit for this signature (`_add_hit`)
            hit = hits.get(sig)
            if hit is not None:
                mapping = hit(leaves, pending)
                if mapping is not None:
                    if fast.recent:
                        _recent_keep(pending)
                    return mapping
        dyn = fast.dyn
        order = fast.perm
        quick = None
        if dyn is None:
            arrays = [leaves[order[0]].array] if len(order) == 1 else [leaves[j].array for j in order]
            quick = exe.quick  # the straight-line runner once set up (`Executable.quick`)
            outs = quick(arrays) if quick else None
            if outs is None:
                quick = None
                outs = exe.run(arrays)
        else:
            outs = dyn.run(exe, [leaves[j].array for j in order])  # svod.shapes: n rows of the bucket's plan
        if fast.recent:
            _recent_keep(pending)
        # NOTE: no `_wrap` checks: this Executable's outputs were checked on its first run
        if len(pending) == 1:
            r = pending[0]
            mapping = {r: _buffer(outs[0], r.dtype)}
        else:
            mapping = {r: _buffer(arr, r.dtype) for r, arr in zip(pending, outs)}
        if quick is not None and (hits is None or sig not in hits):
            _add_hit(exe, sig, order, pending, outs, mapping)
        return mapping
    return _realize_new(pending, sig, leaves)


_MAX_HITS = 64  # signatures with a straight-line hit per plan (more: the checked runner)


def _add_hit(exe: Executable, sig: int, perm: tuple, pending: list[UOp], outs, mapping: dict) -> None:
    """Give `exe` the straight-line replay hit of signature `sig` (leaf order `perm`;
    `QuickParts.hit_runner`) once its checked runner has accepted this call's leaves (so
    only for a plan run exactly, never a dynamic structure's bucket plan run for another
    size). Keyed by the signature, never by the leaf order alone: the signature fixes every
    leaf's dtype, shape and strides — what the checks that later calls skip read — while
    several signatures may share a plan (another size in a size bucket, a leaf of another
    layout that the checked runner would convert). The outputs' signatures (fresh
    C-contiguous arrays of fixed shape and dtype) are known too. Kept on the plan (a dict
    replaced whole: readers need no lock), so an evicted or replaced plan takes its hits
    with it."""
    hits = exe.hits or {}
    parts_of = getattr(exe, "quick_parts", None)
    got = parts_of() if parts_of is not None and len(hits) < _MAX_HITS else None
    if got is None:
        return
    parts, tally = got
    if len(parts.inputs) != len(perm) or len(parts.outputs) != len(pending) or len(outs) != len(pending):
        return
    sigs = []
    for r, arr in zip(pending, outs):
        if arr.shape != r.shape or arr.dtype != r.dtype.np or not arr.flags.c_contiguous:
            return
        sigs.append(mapping[r]._sig)
    exe.hits = {**hits, sig: parts.hit_runner(tally, perm, tuple(r.dtype for r in pending), tuple(sigs))}


def _realize_new(pending: list[UOp], sig, leaves) -> dict[UOp, UOp]:
    """`realize_uops` for a structure not replayed by signature: compact, look up (a dynamic
    structure: its bucket's key), plan, and run (the first run builds and compiles)."""
    if any(r.op is _WHERE for r in pending):  # region writes `x[key] = v` of a realized x (svod.writes)
        done, rest = split_writes(pending, realize_uops)
        if done:
            if rest:
                done.update(_realize_new(rest, None, None))
            return done
    t0 = time.perf_counter()
    bump("realizes")
    vnoted = OFFSETS.log.noted
    key, bindings = PIPELINE.compact(pending)
    if RECORDER is not None:
        RECORDER.append((key, "realize"))
    if PROFILING:  # SVOD_PROFILE=1: every kernel timed, printed, traced (svod.profiler)
        if PROFILE_REALIZE is None:
            raise RuntimeError("SVOD_PROFILE=1: svod.profiler is not imported (import svod imports it)")
        return _wrap(pending, PROFILE_REALIZE(pending, key, bindings))
    hits = snapshot()["graph_cache_hits"]
    noted = _DYNAMIC.noted
    dyn = _DYNAMIC.lookup(key, bindings) if _dynamic_on() else None
    if dyn is not None:  # a dynamic structure (svod.shapes): its size bucket's plan, this size bound to it
        key = dyn.key
    notes = OFFSETS.log.since(vnoted) + (_DYNAMIC.notes_since(noted) if _DYNAMIC.noted != noted else ())
    exe = get_executable(key, notes, provisional_ok=True)
    if sig is not None and PLAN_CACHE.holds(key.hash, exe):
        REPLAY.put(sig, key.hash, leaves, bindings.buffers, dyn)
    outs = exe.run(bindings.arrays) if dyn is None else dyn.run(exe, bindings.arrays)
    if RECENT.small(leaves):
        RECENT.keep(pending)
    mapping = _wrap(pending, outs)
    if len(TIERED) and start_background():
        pass  # tiered planning: this graph's search starts now that its result is ready (svod.tiered)
    elif not _PREFETCH[0] and exe.origin == "greedy planner" and not _tiered_on():
        # a new graph planned and compiled without the search: import the search in the
        # background for the next one (svod.firstcall; after this result is ready, never
        # during `import svod`, not on a warm process's disk-cache hits; not under tiered
        # planning, whose searches run in the search process, svod.searchproc)
        _PREFETCH[0] = True
        prefetch_search(import_search)
    if _debug():
        debug_log(_debug_line(key, bindings, pending, exe, snapshot()["graph_cache_hits"] > hits, t0))
    return mapping


def _debug_line(key: GraphKey, bindings: Bindings, pending, exe, hit: bool, t0: float) -> str:
    """The SVOD_DEBUG line of one realize (on a miss: why each boundary, svod.boundaries)."""
    msg = (f"svod realize: key {key.hash[:12]} nodes={len(key.nodes)} inputs={len(bindings.arrays)} "
           f"outputs={len(pending)} cache={'hit' if hit else 'miss'} {type(exe).__name__} "
           f"{(time.perf_counter() - t0) * 1e3:.3f} ms")
    if not hit and getattr(exe, "plan", None) is not None:
        from svod.boundaries import debug_text

        msg += "\n" + debug_text(key, exe.plan, LAST_SEARCH.get(key.hash), cost_model())
    return msg


def reset_caches() -> None:
    """Forget every in-memory plan: the plan cache, the replay table, the recent graphs and
    the dynamic-shape buckets (`svod.reset()` empties every other cache too)."""
    PLAN_CACHE.clear()
    REPLAY.clear()
    RECENT.clear()
    DYNAMIC.clear()
    WRITES.clear()


_tensor._engine_realize = realize_uops  # the hook: svod.tensor's realize calls the engine (module docstring)
_planner.ON_REPLACED = RECOMPILES.searched  # the hook: a background search's plan is recorded (svod.tiered)
