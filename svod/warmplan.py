"""Warm records: a persisted plan's compiled graph program, replayed in a fresh process
without rebuilding its Kernels, CompiledGraph or GraphProgram (docs/engine.md, first-call
latency).

When a persisted plan (`svod.planner`: saved or loaded under its store key) first builds
a native graph program, `save_record` stores beside the plan, under ``warm:<store key>``
in the store's "plans" kind, what running that program needs: the object-cache keys and
symbols of its kernels, its segment module and (when it dispatches to threads) the
runtime; the slot layout (inputs, outputs, temps); and two guards. A later process that
finds the plan in the disk cache asks `runner_for(record, plan row)`; a `WarmRunner` is
returned only when

- the record's **plan hash** equals the hash of the plan row read now (its plan JSON and
  thread counts): a plan replaced since (`svod tune`, a newer search) never runs the old
  record's code;
- its **witness** equals this process's (`witness`: llvmlite version, LLVM's host facts,
  the codegen target with its thread count, the pool size, libmvec in use,
  SVOD_THREADS): what the object keys' target part is a function of, besides the svod
  code, which the store's namespace already fixes (rows are keyed by machine and code
  fingerprint);
- the record is well formed (`v` = `VERSION`, every field of the expected type);
- native code is wanted (not `SVOD_CODEGEN=0`).

The runner then loads each module from its shared library (`svod.codegen.sharedlib.load`,
dlopen only; no llvmlite.binding, no object code through LLVM) on its first run; any
trouble there (a library missing or refused, a symbol absent) makes it report failure,
and the caller (`svod.executable.WarmPlan`) runs the plan the usual way from then on:
never an error, never a warning. A run whose inputs need converting (dtype, layout,
too few elements) returns None for the usual path to handle (and raise) as before.

Not recorded (the usual path only): plans with library (BLAS) steps, interpreted
kernels, split reductions (their shared counters are reset at fork through their
Programs), outputs that repeat a slot or alias an input; `SVOD_SHARED_LIBS=0` or no
``ld``.

Invariant: a runner performs exactly the native calls the GraphProgram built from the
same plan would (the same segment code, the same function table, the same slot
addresses up to where temps and outputs are allocated), so results are bit-identical to
the usual path's.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import sys
import threading

import numpy as np

VERSION = 1
PREFIX = "warm:"  # record key = PREFIX + the plan's store key (never starts with a graph hash)
_SEGMENT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_DEFINE = re.compile(r"define void @(svod_g\w+)\(")
STARTED = [0]  # runners started in this process (tests, svod explain)


def witness() -> str:
    """What the object keys' target part depends on in this process (module docstring)."""
    import llvmlite

    from svod.codegen.hostinfo import host_facts
    from svod.codegen.target import host_target, pool_size

    facts = host_facts()
    jit = sys.modules.get("svod.codegen.jit")
    mvec = jit.libmvec_enabled() if jit is not None else facts["mvec"]
    parts = (llvmlite.__version__, sorted((k, str(v)) for k, v in facts.items()), repr(host_target()),
             pool_size(), bool(mvec), os.environ.get("SVOD_THREADS", ""))
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


def plan_hash(plan_json, threads: dict) -> str:
    """Hash of a plan's JSON and its thread counts (kernel index -> count > 1)."""
    t = sorted((int(i), int(n)) for i, n in threads.items() if int(n) > 1)
    text = json.dumps({"plan": plan_json, "threads": t}, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


# ----------------------------------------------------------------------------- writing


def record_for(exe, gp) -> dict | None:
    """The warm record of KernelPlan `exe` whose GraphProgram `gp` was just built, or
    None when the program is not one a runner replays (module docstring)."""
    from svod.codegen.objcache import ir_key, object_key
    from svod.codegen.program import NativeProgram
    from svod.codegen.sharedlib import SharedModule
    from svod.kernel import plan_to_json

    if gp.kind != "native" or len(gp.segments) != 1 or gp.segments[0][0] != "native" or gp._copies:
        return None
    names = _DEFINE.findall(gp.ir or "")
    if len(names) != 1 or gp._module is None:
        return None
    modules: list = []  # [okey, [symbols], name]
    index: dict[str, int] = {}

    def module(okey: str, symbol: str, name: str) -> int:
        i = index.get(okey)
        if i is None:
            i = index[okey] = len(modules)
            modules.append([okey, [], name])
        if symbol not in modules[i][1]:
            modules[i][1].append(symbol)
        return i

    by_address = {}
    for p in gp.programs:
        if not isinstance(p, NativeProgram) or p._split_counts is not None:
            return None
        by_address[p.address] = p
    table = []
    for addr in list(gp._table)[1:]:
        p = by_address.get(addr)
        if p is None:
            return None
        okey = p.module._okey if isinstance(p.module, SharedModule) else object_key(p.kernel)
        table.append([module(okey, p.symbol, p.kernel.name), p.symbol])
    gmod = gp._module
    gkey = gmod._okey if isinstance(gmod, SharedModule) else ir_key("graph", gp.ir)
    segment = [module(gkey, names[0], getattr(gmod, "name", "graph")), names[0]]
    runtime = None
    if gp._parallel:
        from svod.runtime import _SYMBOLS, _runtime_ir

        runtime = ir_key("runtime", _runtime_ir())
        if list(_SYMBOLS)[1] != "svod_rt_dispatch":
            return None
    g = gp.graph
    return {"v": VERSION, "witness": witness(), "plan": plan_hash(plan_to_json(exe.plan), exe.thread_map()),
            "n_kernels": len(exe.plan.kernels), "n_nodes": sum(len(k.nodes) for k in exe.plan.kernels),
            "modules": modules, "table": table, "segment": segment, "runtime": runtime,
            "n_slots": int(gp._n_slots), "n_inputs": int(gp.n_inputs),
            "inputs": [[np.dtype(dt).str, int(need)] for dt, need in gp._in_specs],
            "outputs": [[int(slot), [int(d) for d in shape], np.dtype(dt).str, int(count)]
                        for slot, shape, dt, count, _ in gp._out_specs],
            "temps": [[int(slot), int(st)] for slot, st in gp._temp_slots],
            "storage": [[int(st), int(g.storage_bytes[st])] for st in gp._temp_storages],
            "scratch": bool(gp._scratch_ok), "parallel": bool(gp._parallel)}


def save_record(exe, gp) -> None:
    """Store `exe`'s warm record under its store key (best effort, silent): only for a
    persisted plan (`exe.store_key`), with shared libraries enabled."""
    skey = getattr(exe, "store_key", None)
    if not skey:
        return
    try:
        from svod.codegen import sharedlib

        if not sharedlib.enabled():
            return
        rec = record_for(exe, gp)
        if rec is None:
            return
        from svod.store import default_store

        st = default_store()
        if st.get_json("plans", PREFIX + skey) != rec:
            st.put_json("plans", PREFIX + skey, rec)
    except Exception:  # noqa: BLE001 - the record is an optimisation, never an error
        return


# ----------------------------------------------------------------------------- reading


def _ints(xs, n: int) -> bool:
    return isinstance(xs, list) and all(isinstance(x, list) and len(x) == n and all(type(v) is int for v in x)
                                        for x in xs)


def _well_formed(rec) -> bool:
    try:
        mods = rec["modules"]
        ok = (rec.get("v") == VERSION and isinstance(rec["witness"], str) and isinstance(rec["plan"], str)
              and type(rec["n_kernels"]) is int and type(rec["n_nodes"]) is int
              and isinstance(mods, list) and mods
              and all(isinstance(m, list) and len(m) == 3 and isinstance(m[0], str) and isinstance(m[2], str)
                      and isinstance(m[1], list) and all(isinstance(s, str) for s in m[1]) for m in mods)
              and all(isinstance(t, list) and len(t) == 2 and type(t[0]) is int and 0 <= t[0] < len(mods)
                      and isinstance(t[1], str) and t[1] in mods[t[0]][1] for t in [*rec["table"], rec["segment"]])
              and (rec["runtime"] is None or isinstance(rec["runtime"], str))
              and type(rec["n_slots"]) is int and type(rec["n_inputs"]) is int
              and 0 <= rec["n_inputs"] <= rec["n_slots"]
              and _ints(rec["temps"], 2) and _ints(rec["storage"], 2)
              and isinstance(rec["scratch"], bool) and isinstance(rec["parallel"], bool)
              and (rec["runtime"] is not None) == rec["parallel"]
              and isinstance(rec["inputs"], list) and len(rec["inputs"]) == rec["n_inputs"]
              and isinstance(rec["outputs"], list) and rec["outputs"])
        if not ok:
            return False
        for dt, need in rec["inputs"]:
            np.dtype(dt)
            if type(need) is not int or need < 0:
                return False
        storages = {st for st, _ in rec["storage"]}
        slots = [slot for slot, _ in rec["temps"]]
        if any(st not in storages for _, st in rec["temps"]) or any(nb < 0 for _, nb in rec["storage"]):
            return False
        for slot, shape, dt, count in rec["outputs"]:
            np.dtype(dt)
            slots.append(slot)
            if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)
                    and type(count) is int and count == int(np.prod(shape, dtype=np.int64))):
                return False
        return all(type(s) is int and rec["n_inputs"] <= s < rec["n_slots"] for s in slots) and \
            len(set(slots)) == len(slots)
    except (KeyError, TypeError, ValueError, AttributeError):
        return False


def runner_for(rec, obj: dict) -> WarmRunner | None:
    """A runner for plan row `obj` from its warm record `rec`, or None when there is no
    record, it is damaged, or it was made for another plan or target (module docstring)."""
    if os.environ.get("SVOD_CODEGEN", "1") in ("0", "false", "False"):
        return None  # the interpreter was asked for: no native code runs
    if not isinstance(rec, dict) or not _well_formed(rec):
        return None
    try:
        threads = obj.get("threads") or {}
        threads = {int(i): int(n) for i, n in threads.items()} if isinstance(threads, dict) else None
        if threads is None:
            return None
        threads = {i: n for i, n in threads.items() if 0 <= i < rec["n_kernels"]}
        if rec["plan"] != plan_hash(obj["plan"], threads) or rec["witness"] != witness():
            return None
    except (KeyError, TypeError, ValueError, ImportError, AttributeError):
        return None
    return WarmRunner(rec)


class WarmRunner:
    """Runs a warm record's graph program: `start()` loads its modules (once; False on
    any trouble), `run(arrays)` -> fresh outputs, or None when an input needs the usual
    path. Thread-safe: an uncontended run reuses one slot array (and the scratch temps),
    a contended one allocates its own."""

    def __init__(self, rec: dict):
        self.rec = rec
        self.n_kernels = rec["n_kernels"]
        self.n_nodes = rec["n_nodes"]
        self.n_inputs = rec["n_inputs"]
        self._inputs = tuple((np.dtype(dt), need) for dt, need in rec["inputs"])
        self._outputs = tuple((slot, tuple(shape), np.dtype(dt), count) for slot, shape, dt, count in rec["outputs"])
        self._storage = {st: max(nb, 1) for st, nb in rec["storage"]}
        self._temps = tuple((slot, st) for slot, st in rec["temps"])
        self._scratch = rec["scratch"]
        self._parallel = rec["parallel"]
        self._lock = threading.Lock()
        self._mods: list = []
        self._keep = ()
        self.nbytes = 2048

    def start(self) -> bool:
        """Load the modules from their shared libraries and build the function table and
        the slot array; False (nothing kept) when any module does not load."""
        from svod.codegen import sharedlib
        from svod.codegen.buffers import data_address

        rec = self.rec
        mods = []
        for okey, symbols, name in rec["modules"]:
            m = sharedlib.load(okey, symbols, name)
            if m is None:
                return False
            mods.append(m)
        table = (ctypes.c_void_p * (len(rec["table"]) + 1))()
        try:
            if self._parallel:
                from svod import runtime

                rt = runtime.install_shared(rec["runtime"])
                if rt is None:
                    return False
                table[0] = rt.address("svod_rt_dispatch")
            for i, (m, sym) in enumerate(rec["table"], 1):
                table[i] = mods[m].address(sym)
            m, sym = rec["segment"]
            self._segment = _SEGMENT(mods[m].address(sym))
        except KeyError:
            return False
        self._table = table
        self._fns = ctypes.addressof(table)
        self._mods = mods
        self._slots, self._addr, self._blocks = self._state(True) if self._scratch else (None, None, None)
        self._data_address = data_address
        self.nbytes = 2048 + sum(m.nbytes for m in mods) + \
            (sum(b.nbytes for b in self._blocks.values()) if self._blocks else 0)
        STARTED[0] += 1
        return True

    def quick_parts(self):
        """`svod.codegen.quick.QuickParts` of this runner (svod.jit's inlined replay),
        on the conditions of `GraphProgram._quick`: started, no thread dispatch, scratch
        temps, every output small; else None."""
        if not self._mods or self._parallel or not self._scratch:
            return None
        from svod import pool as _pool

        if any(count * dt.itemsize > _pool.SMALL for _, _, dt, count in self._outputs):
            return None
        from svod.codegen.quick import QuickParts, _Count

        keep = (tuple(self._mods), self._table, self._blocks)
        return QuickParts(_Count(), keep, self._slots, self._addr, self._fns, self._segment, self._lock,
                          self._inputs, tuple((slot, shape, dt) for slot, shape, dt, _ in self._outputs))

    def _state(self, persistent: bool):
        from svod.codegen.buffers import data_address
        from svod.pool import POOL

        slots = (ctypes.c_void_p * max(1, self.rec["n_slots"]))()
        blocks = {st: np.empty(nb, np.uint8) if persistent else POOL.array((nb,), np.uint8)
                  for st, nb in self._storage.items()}
        for slot, st in self._temps:
            slots[slot] = data_address(blocks[st])
        return slots, ctypes.addressof(slots), blocks

    def run(self, arrays):
        if len(arrays) < self.n_inputs:
            return None
        for a, (want, need) in zip(arrays, self._inputs):
            if a.dtype != want or a.size < need or not a.flags.c_contiguous:
                return None
        from svod import pool as _pool

        pool = _pool.POOL
        small = _pool.SMALL
        outs = [pool.small_array(shape, dt, count) if count * dt.itemsize <= small else pool.array(shape, dt)
                for _, shape, dt, count in self._outputs]
        address = self._data_address
        mine = self._lock.acquire(False)
        try:
            if mine and self._scratch:
                slots, addr = self._slots, self._addr
            else:  # big temps (pool blocks for this run), or another thread is replaying
                slots, addr, blocks = self._state(False)
            for i in range(self.n_inputs):
                slots[i] = address(arrays[i])
            for (slot, _, _, _), o in zip(self._outputs, outs):
                slots[slot] = address(o)
            if self._parallel:
                self._call_parallel(addr)
            else:
                self._segment(addr, self._fns, None)
        finally:
            if mine:
                self._lock.release()
        return outs

    def _call_parallel(self, addr: int) -> None:
        from svod.runtime import _get_pool

        p = _get_pool()
        if p.lock.acquire(False):
            try:
                self._segment(addr, self._fns, p.addr)
            finally:
                p.lock.release()
        else:  # another Python thread is dispatching: this run single-threaded
            self._segment(addr, self._fns, None)


__all__ = ["PREFIX", "VERSION", "WarmRunner", "plan_hash", "record_for", "runner_for", "save_record", "witness"]
