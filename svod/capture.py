"""`svod.jit`: trace a function of Tensors once per signature, replay it with new data.

The first call with a new signature traces the function into one graph (`svod.tracing`),
plans it (`svod.planner.decide`, as realize() would) and compiles it; later calls bind
the new arguments to the plan's inputs and launch — no tracing, no graph, no planning.
A jitted function never replays a stale value: every Python-level value it reads is a
traced input or a guard, and a read that can be neither is an error at that line.

What is traced, and when a call traces again ("retraces"):

- **Tensors and numpy arrays** (positional or keyword, also inside tuples, lists and
  dicts) are traced inputs; their shapes and dtypes are the signature. A new shape or
  dtype traces again; a new row count of a traced graph seen at another row count before
  runs in its size bucket's plan (`svod.shapes`: traced again, but no search or compile
  within a known bucket).
- **Python scalars** (bool, int, float) are traced 0-d inputs: a new value does not trace
  again. They stay weak (NEP 50), as the scalar itself would be: `x * s` keeps a float32
  `x`'s dtype; `s * 2` is still a weak scalar. **numpy scalars** are strong 0-d inputs.
- **Reading a traced scalar's value** — `if n > 0:`, `int(n)`, `x[i]`, `range(n)`,
  `x.reshape(n, -1)`, `x.sum(axis=k)` — computes it and makes the trace *guard* it: a
  call with another value of that argument traces again (reason "new value of guarded
  argument"). When an API needs a Python number and a traced scalar does not do (the
  first trace raises), the function is traced again with every Python scalar as its
  plain value, guarded; later traces of that function do so from the start.
- **static_argnums / static_argnames** (as in jax.jit): those arguments are passed as
  they are and their value is part of the signature; they must be hashable (not
  Tensors). None, strings, dtypes, functions, modules, slices and enum members are
  static without being named.
- **Reading a traced tensor's value** — `float(t)`, `int(t)`, `bool(t)`, `if t > 0`,
  `t.numpy()`, `t.tolist()`, `t.item()`, `np.asarray(t)`, boolean-mask or integer-array
  indexing, anything whose shape depends on the data — raises `ConcretizationError` at
  that line, naming the operation, the argument and the fix (move the read out of the
  function, `svod.where` instead of `if`, or a static argument). `t.realize()` inside the
  function leaves a traced value lazy; `print(t)` shows `<traced svod.Tensor ...>`.
- **Globals and closed-over variables** the function names are guarded by identity (a
  closed-over Tensor also by its value: an in-place update retraces); they are
  constants of the trace. Values read through them (attributes, a helper's own globals)
  and numpy arrays updated in place are not seen: pass such values as arguments.
- `svod.random` inside a traced function raises (its draw would be frozen): pass the
  random tensor as an argument.

Each trace is counted (`f.traces`; `svod.stats()["jit_traces"]`, `["jit_retraces"]`) and
logged with its reason under `SVOD_DEBUG=1`, as is each replay and its kind. A function
traced more than `retrace_limit` times (default 8, `SVOD_JIT_RETRACE_LIMIT`) warns once;
`strict=True` raises `JitError` instead of tracing again. The traces of a function are an
LRU of `max_traces` entries (default 64, `SVOD_JIT_MAX_TRACES`); an evicted trace's plan,
constants and replay code are released (the plan stays in the plan cache, bounded there).

Outputs are fresh buffers: they never alias each other, the arguments or the caller's
arrays (an argument returned unchanged, or a result returned twice, is copied). A
function that updates a Tensor argument in place (`x += 1`, `x[i] = v`) updates the
caller's Tensor on every call (a numpy array argument is written back), as eagerly.
Returned Python scalars are an error; a returned traced scalar is a Tensor of svod's
default dtype for its kind. A jitted function called while another traces is inlined.

Fast replay: from the second call of a signature whose arguments are all realized
Tensors and whose plan is one native segment, a call is one straight-line function
generated for that entry (`_quick_for`), looked up by the arguments' leaf signatures
(what it costs: docs/engine.md). Anything else takes the general path (binding keyword
and scalar arguments, checking guards).

>>> import svod
>>> @svod.jit
... def f(x, s):
...     return svod.exp(x) * s
>>> a = f(svod.ones(3), 2.0); b = f(svod.zeros(3), 3.0)
>>> b.tolist(), f.traces
([3.0, 3.0, 3.0], 1)
"""

from __future__ import annotations

import dis
import functools
import inspect
import threading
import warnings
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from svod import dtype as dt
from svod import engine
from svod import tracing as _tracing
from svod.errors import SvodWarning, user_stacklevel
from svod.flags import DEBUG_KEY as _DEBUG_KEY
from svod.flags import ENV_DATA as _DEBUG_DATA  # SVOD_DEBUG tested inline on the replay path
from svod.flags import debug as _debug
from svod.flags import debug_log, env_int
from svod.ir import Ops, UOp
from svod.shapes import DYNAMIC, BucketRun
from svod.shapes import enabled as dynamic_enabled
from svod.stats import bump
from svod.tensor import Tensor, WeakScalar, _cast
from svod.tracing import ConcretizationError, JitError, Trace, flatten, guard_key, show, unflatten
from svod.tracing import current as current_trace
from svod.viewfold import exact_leaves

__all__ = ["ConcretizationError", "JitError", "JitFunction", "JitWarning", "jit"]

_WEAK_NP = {"b": np.bool_, "i": np.int64, "f": np.float64}
_MISSING = object()


class _Const:
    """A constant binding of a trace (so an int leaf index and an array never mix up)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array


@dataclass(eq=False)
class _Entry:
    """One trace: its plan and how a call's leaves bind to it."""

    exe: object  # engine Executable, None when every output is an input or a constant
    bind: tuple  # per plan input: a leaf index, or a _Const
    out_plan: tuple  # per output: (kind, value, DType, copy) with kind "slot" | "arg" | "const"
    rebuild: object  # flat outputs -> the function's result structure
    exe_dtypes: tuple  # svod DType of each plan output
    updates: tuple  # (leaf index, index into the flat outputs): arguments updated in place
    guards: tuple  # (leaf index, guard_key) equality guards
    ranges: tuple  # (leaf index, lo, hi) range guards
    env: tuple  # (kind, holder, name, value, uop) guards on globals and closure cells
    spec: tuple
    reason: str
    quick_keys: list = field(default_factory=list)
    used: bool = False  # replayed since the LRU last looked (the inlined replay sets it: see _insert)

    @property
    def lru_key(self) -> tuple:
        return (self.spec, self.guards, self.ranges)

    def matches(self, leaves, names) -> str | None:
        """None when this trace holds for these leaf values, else why not."""
        for i, want in self.guards:
            if guard_key(leaves[i]) != want:
                return f"new value of guarded argument '{names[i]}': {want[1][-1]!r} -> {leaves[i]!r}"
        for i, lo, hi in self.ranges:
            if not lo <= int(leaves[i]) <= hi:
                return f"argument '{names[i]}' = {leaves[i]!r} is out of the range [{lo}, {hi}] its trace checked"
        return self.env_changed()

    def env_changed(self) -> str | None:
        for kind, holder, name, value, uop in self.env:
            cur = holder.get(name, _MISSING) if kind == "global" else _cell(holder)
            if cur is not value:
                return f"{'global' if kind == 'global' else 'closed-over variable'} '{name}' was rebound"
            if uop is not None and value.uop is not uop:
                return f"{'global' if kind == 'global' else 'closed-over'} tensor '{name}' was updated"
        return None


def _cell(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _MISSING


def _codes(code) -> list:
    out, stack = [], [code]
    while stack:
        c = stack.pop()
        out.append(c)
        stack.extend(k for k in c.co_consts if inspect.iscode(k))
    return out


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every JitFunction alive (`live_traces`)


def live_traces() -> tuple[int, int]:
    """(jitted functions alive, traces they hold) in this process (`svod.cache_info`)."""
    fns = list(_LIVE)
    return len(fns), sum(f.cached_traces for f in fns)


def clear_traces() -> None:
    """Forget every trace of every jitted function alive (`svod.reset`)."""
    for f in list(_LIVE):
        f.clear()


class JitFunction:
    """A function traced once per signature and replayed (see the module docstring)."""

    def __init__(self, fn, *, static_argnums=(), static_argnames=(), strict: bool = False,
                 retrace_limit: int | None = None, max_traces: int | None = None):
        if not callable(fn):
            raise JitError(f"jit: expected a function, got {type(fn).__name__}")
        self.fn = fn
        self.strict = strict
        self.name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
        self.retrace_limit = retrace_limit if retrace_limit is not None else env_int("SVOD_JIT_RETRACE_LIMIT", 8)
        self.max_traces = max(1, max_traces if max_traces is not None else env_int("SVOD_JIT_MAX_TRACES", 64))
        self._sig, self._static = _static_params(fn, static_argnums, static_argnames, self.name)
        self._lru: OrderedDict[tuple, _Entry] = OrderedDict()
        self._by_spec: dict[tuple, list[_Entry]] = {}
        self._quick: dict = {}  # leaf signatures -> replay closure (see _quick_for)
        self._fast: dict = {}  # positional tensor specs -> entry (all-Tensor positional calls)
        self._evicted: OrderedDict[tuple, None] = OrderedDict()  # specs traced then evicted (reasons)
        self._lock = threading.RLock()
        self._specialize = False  # Python scalars passed as values (guarded): see the module docstring
        self._warned = False
        self.traces = 0  # traces made (the first one included)
        self.reasons: list[str] = []  # why each trace was made (the latest 32)
        functools.update_wrapper(self, fn)
        _LIVE.add(self)

    # ------------------------------------------------------------------ calls
    def __call__(self, *args, **kwargs):
        if not kwargs and not _tracing._running:  # (while any trace runs, placeholders may be the arguments)
            # the replay hot path: arguments are realized Tensors whose leaf signatures
            # (dtype, shape, strides: `UOp.buffer`) name a `_quick_for` closure
            try:
                quick = self._quick.get(args[0].uop._sig if len(args) == 1 else tuple([a.uop._sig for a in args]))
            except (AttributeError, IndexError):
                quick = None
            if quick is not None:
                out = quick(args)
                if out is not None:
                    if _DEBUG_DATA is None or _DEBUG_DATA.get(_DEBUG_KEY) is not None:
                        self._log_replay("inlined")
                    return out
            out = self._call_fast(args)
            if out is not None:
                return out
        if current_trace() is not None:  # called while another function traces: inline
            return self.fn(*args, **kwargs)
        return self._call(args, kwargs)

    def _call_fast(self, args):
        """Replay when every argument is a realized Tensor and no keywords are given: the
        entry and arrays come from one pass over the arguments. None: the general path."""
        spec, arrays = [], []
        for a in args:
            if type(a) is not Tensor:
                return None
            u = a.uop
            if u.op is not Ops.BUFFER:
                return None
            spec.append((u.shape, u.dtype))
            arrays.append(u.arg.array)
        entry = self._fast.get(tuple(spec))
        if entry is None or entry.env_changed() is not None or entry.lru_key not in self._lru:
            return None
        self._touch(entry)
        out = self._replay(entry, args, arrays)
        qkey = args[0].uop._sig if len(args) == 1 else tuple(a.uop._sig for a in args)  # as in __call__
        if qkey not in self._quick:
            with self._lock:
                if entry.lru_key in self._lru:
                    self._quick[qkey] = _quick_for(entry, arrays) or _NO_QUICK
                    entry.quick_keys.append(qkey)
        self._log_replay("fast")
        return out

    def _call(self, args, kwargs):
        spec, leaves, names = self._flatten(args, kwargs)
        arrays = _leaf_arrays(leaves)
        entry, why = self._lookup(spec, leaves, names)
        kind = "general"
        if entry is None:
            with self._lock:
                entry, why = self._lookup(spec, leaves, names)
                if entry is None:
                    entry = self._trace(spec, leaves, names, why)
                    kind = "traced"
        out = self._replay(entry, leaves, arrays)
        if kind == "general":
            self._log_replay(kind)
        if not kwargs and len(leaves) == len(args) and all(type(a) is Tensor for a in args) and \
                not entry.guards and not entry.ranges:
            with self._lock:  # all-Tensor positional calls of this entry: the fast path from now on
                self._fast[tuple((a.uop.shape, a.uop.dtype) for a in args)] = entry
        return out

    def _flatten(self, args, kwargs):
        """(signature spec, leaf values, leaf names) of a call."""
        if self._sig is None:  # no inspectable signature: positional, then sorted keywords
            items = [(f"#{i}", a, i in self._static) for i, a in enumerate(args)]
            items += [(k, kwargs[k], k in self._static) for k in sorted(kwargs)]
        else:
            try:
                bound = self._sig.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"jit({self.name}): {e}") from None
            bound.apply_defaults()
            items = []
            for name, value in bound.arguments.items():
                p = self._sig.parameters[name]
                if p.kind is p.VAR_POSITIONAL:
                    base = sum(1 for q in self._sig.parameters.values() if q.kind in (q.POSITIONAL_ONLY,
                                                                                        q.POSITIONAL_OR_KEYWORD))
                    items += [(f"{name}[{j}]", v, base + j in self._static) for j, v in enumerate(value)]
                elif p.kind is p.VAR_KEYWORD:
                    items += [(k, value[k], k in self._static) for k in sorted(value)]
                else:
                    items.append((name, value, name in self._static))
        leaves: list = []
        spec = tuple((name, flatten(v, leaves, name, static, self.name)) for name, v, static in items)
        return spec, [v for v, _ in leaves], [w for _, w in leaves]

    def _lookup(self, spec, leaves, names) -> tuple[_Entry | None, str]:
        """The trace that holds for this call, or (None, why a new trace is needed)."""
        bucket = self._by_spec.get(spec)
        if bucket:
            why = ""
            for e in bucket:
                miss = e.matches(leaves, names)
                if miss is None:
                    self._touch(e)
                    return e, ""
                why = why or miss
            return None, why
        if not self._lru:
            if spec in self._evicted:
                return None, f"traced before, evicted by the LRU bound (max_traces={self.max_traces})"
            return None, "first call"
        if spec in self._evicted:
            return None, f"traced before, evicted by the LRU bound (max_traces={self.max_traces})"
        return None, _spec_diff(next(reversed(self._lru.values())).spec, spec)

    # ------------------------------------------------------------------ tracing
    def _trace(self, spec, leaves, names, why: str) -> _Entry:
        if self.traces and self.strict:
            raise JitError(f"jit({self.name}, strict=True): a call needs a new trace ({why}); traced "
                           f"{self.traces} time(s) before: {'; '.join(self.reasons[-4:])}")
        failed = None
        try:
            entry = self._trace_once(spec, leaves, names, why, self._specialize)
        except Exception as e:  # noqa: BLE001 - retried once with the scalars as values, else re-raised
            if self._specialize or not any(type(v) in (bool, int, float) or isinstance(v, np.generic)
                                           for v in leaves):
                raise
            failed = e
        if failed is not None:  # outside the except block: the retry's error is the one shown
            entry = self._trace_once(spec, leaves, names, why, True)
            self._specialize = True
            why += f"; Python scalars are guarded values from now on ({type(failed).__name__} with traced ones: " \
                   f"{str(failed).splitlines()[0][:120]})"
            entry.reason = why
        self._insert(entry)
        self.traces += 1
        self.reasons = (self.reasons + [why])[-32:]
        bump("jit_traces")
        if self.traces > 1:
            bump("jit_retraces")
        if _debug():
            key = getattr(entry.exe, "key", None)
            debug_log(f"svod jit {self.name}: {'trace' if self.traces == 1 else 'retrace'} #{self.traces} ({why})"
                      + (f"; graph {key.hash[:12]}, plan from {getattr(entry.exe, 'origin', '?')}" if key else ""))
        if self.traces > self.retrace_limit and not self._warned:
            self._warned = True
            warnings.warn(f"svod.jit: {self.name} was traced {self.traces} times (retrace_limit={self.retrace_limit}"
                          f"); each trace plans and compiles again. Latest reasons: {'; '.join(self.reasons[-3:])}. "
                          "Make values that change static arguments, or pass them as tensors.",
                          JitWarning, stacklevel=user_stacklevel())
        return entry

    def _trace_once(self, spec, leaves, names, why: str, specialize: bool) -> _Entry:
        codes = frozenset(_codes(self.fn.__code__)) if hasattr(self.fn, "__code__") else frozenset()
        env = self._snapshot_env()
        trace = Trace(self.name, codes, names, leaves)
        traced = []
        for i, v in enumerate(leaves):
            if isinstance(v, Tensor):
                traced.append(trace.placeholder(i, np.ascontiguousarray(_leaf_array(v)), True, False))
            elif isinstance(v, np.ndarray):
                traced.append(trace.placeholder(i, np.ascontiguousarray(v), True, False))
            elif specialize:
                traced.append(v)
                trace.guard(i)
            elif isinstance(v, np.generic):
                traced.append(trace.placeholder(i, np.array(v), False, False))
            else:
                kind = "b" if type(v) is bool else "i" if type(v) is int else "f"
                traced.append(trace.placeholder(i, np.array(v, _WEAK_NP[kind]), False, True))
        before = [t.uop if isinstance(t, Tensor) else None for t in traced]
        it = iter(traced)
        rebuilt = {name: unflatten(s, it) for name, s in spec}
        args, kwargs = self._call_args(rebuilt)
        with trace:
            result = self.fn(*args, **kwargs)
        outs, rebuild = _flatten_result(result, self.name)
        updates = [(i, t.uop) for i, (t, u) in enumerate(zip(traced, before))
                   if u is not None and i in trace.tensor_leaves and t.uop is not u]
        flat = [_strong(t) for t in outs] + [Tensor._from(u) for _, u in updates]
        # the graph: every output that is not an input or a constant as it stands
        leaf_of = {ref: i for ref, i in trace.refs.items()}
        pending: list[UOp] = []
        out_plan = []
        seen_slots: set[int] = set()
        for t in flat:
            u = t.uop
            if u.op is Ops.BUFFER:
                i = leaf_of.get(u.arg)
                if i is not None and i in trace.tensor_leaves:
                    out_plan.append(("arg", i, u.dtype, True))
                else:
                    out_plan.append(("const", u.arg.array, u.dtype, True))
                continue
            if u not in pending:
                pending.append(u)
            j = pending.index(u)
            out_plan.append(("slot", j, u.dtype, j in seen_slots))
            seen_slots.add(j)
        exe, bind = None, ()
        if pending:
            noted = DYNAMIC.noted
            with exact_leaves():  # a trace re-binds leaves by identity: no folded views (svod.viewfold)
                key, bindings = engine.PIPELINE.compact(pending)  # (svod viz records graphs there)
            dyn = DYNAMIC.lookup(key, bindings) if dynamic_enabled() else None
            notes = DYNAMIC.notes_since(noted)  # why a plan is made again: svod.recompiles
            if dyn is not None:  # a dynamic structure: its size bucket's plan (svod.shapes)
                key = dyn.key
                exe = BucketRun(engine.get_executable(key, notes), dyn)
            else:
                exe = engine.get_executable(key, notes)
            if engine.RECORDER is not None:
                engine.RECORDER.append((key, f"jit {self.name}"))
            bind = tuple(leaf_of[ref] if ref in leaf_of else _Const(arr)
                         for ref, arr in zip(bindings.buffers, bindings.arrays))
        n_out = len(outs)
        return _Entry(exe, bind, tuple(out_plan), rebuild,
                      tuple(u.dtype for u in pending), tuple((i, n_out + k) for k, (i, _) in enumerate(updates)),
                      tuple(sorted(trace.guards.items())), tuple(sorted((i, lo, hi) for i, (lo, hi) in
                                                                        trace.ranges.items())),
                      env, spec, why)

    def _call_args(self, rebuilt: dict) -> tuple[list, dict]:
        if self._sig is None:
            args = [rebuilt[k] for k in rebuilt if k.startswith("#")]
            return args, {k: v for k, v in rebuilt.items() if not k.startswith("#")}
        args, kwargs = [], {}
        for name, p in self._sig.parameters.items():
            if p.kind is p.VAR_POSITIONAL:
                args += [rebuilt[k] for k in rebuilt if k.startswith(f"{name}[")]
            elif p.kind is p.VAR_KEYWORD:
                kwargs.update({k: rebuilt[k] for k in rebuilt if k not in self._sig.parameters and "[" not in k})
            elif name in rebuilt:
                if p.kind is p.KEYWORD_ONLY:
                    kwargs[name] = rebuilt[name]
                elif p.kind is p.POSITIONAL_ONLY or not kwargs:
                    args.append(rebuilt[name])
                else:
                    kwargs[name] = rebuilt[name]
        return args, kwargs

    def _snapshot_env(self) -> tuple:
        """Guards on the globals the function names and its closed-over variables; lazy
        closed-over Tensors are realized first (their value at trace time is a constant)."""
        fn = getattr(self.fn, "__func__", self.fn)
        code = getattr(fn, "__code__", None)
        if code is None:
            return ()
        env = []
        g = getattr(fn, "__globals__", {})
        names = sorted({ins.argval for c in _codes(code) for ins in dis.get_instructions(c)
                        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")})
        for n in names:
            if n in g:
                env.append(("global", g, n, g[n]))
        for n, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
            v = _cell(cell)
            if v is not _MISSING:
                env.append(("cell", cell, n, v))
        out = []
        for kind, holder, n, v in env:
            if isinstance(v, Tensor):
                v.realize()
            out.append((kind, holder, n, v, v.uop if isinstance(v, Tensor) else None))
        return tuple(out)

    # ------------------------------------------------------------------ the trace LRU
    def _insert(self, entry: _Entry) -> None:
        old = self._lru.pop(entry.lru_key, None)
        if old is not None:
            self._drop(old)
        for e in [e for e in self._by_spec.get(entry.spec, []) if e.env_changed() is not None]:
            self._lru.pop(e.lru_key, None)  # stale: a global or closed-over value changed
            self._drop(e)
        entry.used = True  # so the loop below never evicts the entry it makes room for
        self._lru[entry.lru_key] = entry
        self._by_spec.setdefault(entry.spec, []).append(entry)
        while len(self._lru) > self.max_traces:
            _, old = self._lru.popitem(last=False)
            if old.used:  # replayed by the inlined path since (which only flags it): a second chance
                old.used = False
                self._lru[old.lru_key] = old
                continue
            self._drop(old)
            self._evicted[old.spec] = None
            if len(self._evicted) > 256:
                self._evicted.popitem(last=False)
            bump("jit_trace_evictions")

    def _drop(self, entry: _Entry) -> None:
        """Forget an entry everywhere (its plan, constants and replay closures go with it)."""
        bucket = self._by_spec.get(entry.spec)
        if bucket is not None:
            bucket[:] = [e for e in bucket if e is not entry]
            if not bucket:
                del self._by_spec[entry.spec]
        for k in entry.quick_keys:
            self._quick.pop(k, None)
        for k in [k for k, e in self._fast.items() if e is entry]:
            del self._fast[k]
        entry.quick_keys = []

    def _touch(self, entry: _Entry) -> None:
        try:
            self._lru.move_to_end(entry.lru_key)
        except KeyError:  # evicted meanwhile
            pass

    def clear(self) -> None:
        """Forget every trace of this function."""
        with self._lock:
            for e in list(self._lru.values()):
                self._drop(e)
            self._lru.clear()
            self._quick.clear()
            self._fast.clear()

    @property
    def cached_traces(self) -> int:
        """Traces held now (at most `max_traces`)."""
        return len(self._lru)

    @property
    def _entries(self) -> dict:  # the traces held, by their LRU key (tests, benchmarks)
        return dict(self._lru)

    # ------------------------------------------------------------------ replay
    def _replay(self, entry: _Entry, leaves, arrays):
        results = ()
        if entry.exe is not None:
            results = entry.exe.run([arrays[b] if type(b) is int else b.array for b in entry.bind])
        out = []
        for kind, v, d, copy in entry.out_plan:
            if kind == "slot":
                arr = results[v]
                out.append(Tensor._from(UOp.buffer(arr.copy() if copy else arr, d)))
            elif kind == "arg":
                out.append(Tensor._from(UOp.buffer(np.array(arrays[v], copy=True), d)))
            else:
                out.append(Tensor._from(UOp.buffer(np.array(v, copy=True), d)))
        if entry.updates:
            for i, j in entry.updates:
                _update(leaves[i], out[j], self.name)
            out = out[:len(out) - len(entry.updates)]
        return entry.rebuild(out)

    def _log_replay(self, kind: str) -> None:
        if _DEBUG_DATA is not None and _DEBUG_DATA.get(_DEBUG_KEY) is None:
            return
        if _debug():
            debug_log(f"svod jit {self.name}: replay ({kind})")

    def __repr__(self) -> str:
        return f"<svod.jit {self.name}: {self.traces} trace(s), {len(self._lru)} held>"

    def __get__(self, obj, objtype=None):  # a jitted method binds like a function
        return self if obj is None else functools.partial(self, obj)


class JitWarning(SvodWarning):
    """A jitted function keeps tracing again (more than its retrace_limit traces)."""


def _update(target, value: Tensor, name: str) -> None:
    """Write an in-place update of an argument back to the caller's Tensor or array."""
    if isinstance(target, Tensor):
        target.uop = value.uop
    elif isinstance(target, np.ndarray):
        if not target.flags.writeable:
            raise JitError(f"jit({name}): the function updates an argument in place, but the caller's array is "
                           "read-only")
        np.copyto(target, value.numpy())


def _strong(t: Tensor) -> Tensor:
    """An output: a traced Python scalar becomes a Tensor of its kind's default dtype."""
    if type(t) is WeakScalar:
        k = t.uop.dtype.kind
        return Tensor._from(_cast(t.uop, dt.default_float if k == "f" else dt.default_int if k == "i" else dt.bool_))
    return t


def _leaf_array(v):
    if isinstance(v, Tensor):
        v.realize()
        return v.uop.arg.array
    return v


def _leaf_arrays(leaves) -> list:
    """This call's arrays, one per leaf: Tensors realized, scalars as 0-d arrays of their
    traced dtype (numpy scalars keep theirs)."""
    out = []
    for v in leaves:
        t = type(v)
        if isinstance(v, Tensor):
            v.realize()
            out.append(v.uop.arg.array)
        elif t is np.ndarray:
            out.append(v)
        elif t is bool:
            out.append(np.array(v, np.bool_))
        elif t is int:
            out.append(np.array(v, np.int64))
        elif t is float:
            out.append(np.array(v, np.float64))
        else:  # a numpy scalar
            out.append(np.array(v))
    return out


def _flatten_result(result, name: str):
    """The function's result as a flat list of Tensors plus a rebuild function."""
    outs: list = []

    def walk(v, where: str):
        if isinstance(v, Tensor):
            outs.append(v)
            return None
        if isinstance(v, tuple) and hasattr(v, "_fields"):
            return ("ntuple", type(v), [walk(x, f"{where}.{f}") for f, x in zip(v._fields, v)])
        if isinstance(v, (tuple, list)):
            return (type(v), [walk(x, f"{where}[{i}]") for i, x in enumerate(v)])
        if isinstance(v, dict):
            return ("dict", list(v), [walk(v[k], f"{where}[{k!r}]") for k in v])
        raise JitError(f"jit({name}): a jitted function must return Tensors (or tuples, lists or dicts of them), "
                       f"got {type(v).__name__} {repr(v)[:40]} as {where or 'its result'}")

    spec = walk(result, "")

    def rebuild(xs):
        return _rebuild(spec, iter(xs))

    return outs, rebuild


def _rebuild(s, it):
    """The result structure `s` (from `_flatten_result`) with the Tensors drawn from `it`.

    NOTE: a module-level function on purpose: a nested `build` that calls itself is a
    reference cycle (function -> its cell -> function) that would hold `it`, hence every
    result Tensor, until a garbage collection ran: a dropped result must go back to the
    buffer pool at once (docs/engine.md: what the late return cost).
    """
    if s is None:
        return next(it)
    if s[0] == "ntuple":
        return s[1](*[_rebuild(c, it) for c in s[2]])
    if s[0] == "dict":
        return {k: _rebuild(c, it) for k, c in zip(s[1], s[2])}
    return s[0](_rebuild(c, it) for c in s[1])


def _spec_diff(old: tuple, new: tuple) -> str:
    """Why a new signature: the arguments whose kind, shape, dtype or static value changed."""
    o, n = dict(old), dict(new)
    diffs = []
    for name in list(o) + [k for k in n if k not in o]:
        a, b = o.get(name), n.get(name)
        if a != b:
            what = "static argument" if "static" in ((a or ("",))[0], (b or ("",))[0]) else "argument"
            diffs.append(f"{what} '{name}': {show(a) if a else 'absent'} -> {show(b) if b else 'absent'}")
    return "new signature: " + ("; ".join(diffs[:3]) if diffs else "another argument structure")


def _static_params(fn, nums, names, fn_name: str):
    """(inspect.Signature or None, the static parameters: names, and positions into *args)."""
    nums = (nums,) if isinstance(nums, int) else tuple(nums or ())
    names = (names,) if isinstance(names, str) else tuple(names or ())
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        sig = None
    static: set = set()
    if sig is None:
        static.update(nums)
        static.update(names)
        return None, static
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    has_var = any(p.kind is p.VAR_POSITIONAL for p in params)
    has_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    for n in nums:
        if not isinstance(n, int) or isinstance(n, bool):
            raise JitError(f"jit({fn_name}): static_argnums must be ints, got {n!r}")
        k = n + len(positional) if n < 0 else n
        if 0 <= k < len(positional):
            static.add(positional[k].name)
        elif has_var and n >= 0:
            static.add(k)  # an index into *args
        else:
            raise JitError(f"jit({fn_name}): static_argnums={n} is out of range: {fn_name} takes "
                           f"{len(positional)} positional argument(s) ({', '.join(p.name for p in positional)})")
    for n in names:
        if not isinstance(n, str):
            raise JitError(f"jit({fn_name}): static_argnames must be strings, got {n!r}")
        if n not in sig.parameters and not has_kw:
            raise JitError(f"jit({fn_name}): static_argnames names {n!r}, which is not a parameter of "
                           f"{fn_name} ({', '.join(sig.parameters)})")
        static.add(n)
    return sig, static


def _NO_QUICK(args):
    return None


def _quick_for(entry: _Entry, arrays):
    """A replay closure for `entry`, `quick(args) -> outputs` (None: take the general
    path), for the common case: the plan binds the leading arguments in order, every
    output is a fresh buffer of the plan, and the plan's graph program can take its fast
    path (`KernelPlan.quick_parts`). It is generated as straight-line code for this
    entry's argument and output counts (the replay costs a few microseconds, so every
    loop and call level shows), with the entry's guards on globals and closed-over values
    inline. The caller keys it by the arguments' leaf signatures (dtype, shape, strides),
    so `arrays` — this call's, checked here — stand for every later call: C-contiguous,
    big enough. None when the case does not apply."""
    exe, bind = entry.exe, entry.bind
    qp = getattr(exe, "quick_parts", None)
    got = qp() if qp is not None else None
    if got is None or bind != tuple(range(len(bind))) or entry.updates or \
            any(k != "slot" or copy for k, _, _, copy in entry.out_plan):
        return None
    parts, tally = got
    if len(parts.inputs) != len(bind) or len(arrays) != len(bind):
        return None
    for a, (want, need) in zip(arrays, parts.inputs):
        if a.dtype is not want or a.size < need or not a.flags.c_contiguous:
            return None
    ns, call = parts.call_source(tally)
    ns.update(UOp.buffer_namespace(), _Tensor=Tensor, rebuild=entry.rebuild, _E=entry, _M=_MISSING, _cellv=_cell)
    body = ["def quick(args):"]
    for j, (kind, holder, _, value, uop) in enumerate(entry.env):  # guards: any change -> the general path
        ns[f"H{j}"], ns[f"V{j}"], ns[f"U{j}"] = holder, value, uop
        got_v = f"H{j}.get({entry.env[j][2]!r}, _M)" if kind == "global" else f"_cellv(H{j})"
        body.append(f"    if {got_v} is not V{j}{f' or V{j}.uop is not U{j}' if uop is not None else ''}: "
                    "return None")
    for i, (want, _) in enumerate(parts.inputs):
        ns[f"W{i}"] = want
        body.append(f"    a{i} = args[{i}].uop.arg.array")
        body.append(f"    if a{i}.dtype is not W{i}: return None")
    body += call
    body.append("    _E.used = True")  # the LRU's second chance (a store, not a move: this is the hot path)
    outs = [(k, v) for k, (_, v, _, _) in enumerate(entry.out_plan)]
    for k, v in outs:  # the output Tensors, built inline (see UOp.buffer_source)
        _, shape, dtype = parts.outputs[v]
        ns[f"T{k}"] = entry.exe_dtypes[v]
        ns[f"G{k}"] = UOp.buffer(np.empty(shape, dtype), entry.exe_dtypes[v])._sig  # the fresh outputs' layout
        body += UOp.buffer_source(f"o{v}", f"T{k}", f"G{k}", f"u{k}")
        body.append(f"    t{k} = _new(_Tensor); t{k}.uop = u{k}")
    probe = object()
    if len(outs) == 1 and entry.rebuild([probe]) is probe:  # a function returning one Tensor
        body.append("    return t0")
    else:
        body.append("    return rebuild([" + ", ".join(f"t{k}" for k, _ in outs) + "])")
    exec("\n".join(body), ns)  # noqa: S102 - our own template, no user text
    return ns.pop("quick")  # NOTE: no cycle function <-> its globals: a dropped trace frees its code at once


def jit(fn=None, *, static_argnums=(), static_argnames=(), strict: bool = False, retrace_limit: int | None = None,
        max_traces: int | None = None):
    """Trace `fn` once per signature and replay it with new data (below: what is traced,
    guarded, static or an error, and when a call traces again).

    `static_argnums` / `static_argnames`: arguments whose value is part of the signature
    (hashable, as in jax.jit). `strict`: raise `JitError` instead of tracing a second
    time. `retrace_limit`: warn once after this many traces (default 8,
    `SVOD_JIT_RETRACE_LIMIT`). `max_traces`: traces kept per function, least recently
    used first out (default 64, `SVOD_JIT_MAX_TRACES`). Usable as `@svod.jit` or
    `@svod.jit(static_argnames=("n",))`."""
    if fn is None:
        return lambda f: JitFunction(f, static_argnums=static_argnums, static_argnames=static_argnames,
                                     strict=strict, retrace_limit=retrace_limit, max_traces=max_traces)
    return JitFunction(fn, static_argnums=static_argnums, static_argnames=static_argnames, strict=strict,
                       retrace_limit=retrace_limit, max_traces=max_traces)


# help(svod.jit) shows the whole contract: what is traced, guarded, static or an error
jit.__doc__ = f"{jit.__doc__}\n\n{__doc__}"
