"""`svod.jit`: capture a function of Tensors once per input signature, replay it after.

The first call with a new signature (shapes and dtypes of the Tensor arguments, kinds
of the scalar arguments, values of the other arguments) traces the function into one
graph, plans and compiles it; later calls bind the new arguments to the plan's input
slots and launch — no tracing, no graph building, no planning.

- Tensor (and numpy array) arguments are traced; Python scalars are traced as 0-d
  tensors (float32, int64 or bool), so a new value does not recompile. NOTE: unlike a
  weak Python scalar, a traced scalar takes part in dtype promotion as a 0-d array.
- Closed-over tensors are constants of the trace (their value at trace time).
- `strict=True` raises `JitError` instead of tracing a second signature.
- Outputs are fresh buffers: they never alias each other or the inputs, except when the
  function returns an input unchanged (then that input is returned).
- Fast replay: from the second call of a signature whose arguments are all realized
  Tensors and whose plan is one native segment, a call is one straight-line function
  generated for that entry (`_quick_for`), looked up by the arguments' leaf signatures:
  bind the arrays, allocate the outputs, call the graph program, wrap the outputs (W7:
  ~5 µs a call, of which ~2.3 µs are the kernel). Anything else takes the general path.

>>> import svod
>>> @svod.jit
... def f(x, s):
...     return svod.exp(x) * s
>>> a = f(svod.ones(3), 2.0); b = f(svod.zeros(3), 3.0)
>>> b.tolist(), f.traces
([3.0, 3.0, 3.0], 1)
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass

import numpy as np

from svod import dtype as dt
from svod.ir import Ops, UOp
from svod.tensor import Tensor


class JitError(TypeError):
    """Misuse of a jitted function (a new signature under strict=True, bad outputs)."""


def _flatten(out):
    """Outputs as a flat list of Tensors plus a rebuild function."""
    if isinstance(out, Tensor):
        return [out], lambda xs: xs[0]
    if isinstance(out, (tuple, list)):
        items = list(out)
        if not all(isinstance(x, Tensor) for x in items):
            raise JitError("jit: a jitted function must return Tensors (or a tuple/list/dict of Tensors)")
        kind = type(out)
        return items, lambda xs: kind(xs)
    if isinstance(out, dict):
        keys = list(out)
        if not all(isinstance(out[k], Tensor) for k in keys):
            raise JitError("jit: a jitted function must return Tensors (or a tuple/list/dict of Tensors)")
        return [out[k] for k in keys], lambda xs: dict(zip(keys, xs))
    raise JitError(f"jit: a jitted function must return Tensors, got {type(out).__name__}")


def _arg_sig(a):
    if isinstance(a, Tensor):
        return ("T", a.shape, a.dtype.name)
    if isinstance(a, np.ndarray):
        return ("T", a.shape, dt.from_numpy(a.dtype).name)
    k = dt.scalar_kind(a)
    if k is not None:
        return ("S", k)
    try:
        hash(a)
    except TypeError as e:
        raise JitError(f"jit: argument of type {type(a).__name__} is neither a Tensor, a scalar nor hashable") from e
    return ("V", a)


_SCALAR_DTYPE = {"f": dt.default_float, "i": dt.default_int, "b": dt.bool_}


@dataclass
class _Entry:
    exe: object  # engine Executable
    sources: list  # per binding: ("arg", i) or ("const", array)
    outputs: list  # per output: ("slot", j) index into exe outputs, or ("arg", i) / ("const", array)
    rebuild: object
    # precomputed for replay: per binding the argument index or the constant array;
    # per output (kind, value, svod DType) — no dtype lookups on the replay path
    exe_dtypes: tuple = ()  # svod DType of each exe output
    bind: tuple = ()
    out_plan: tuple = ()

    def __post_init__(self):
        self.bind = tuple(v if k == "arg" else _Const(v) for k, v in self.sources)
        self.out_plan = tuple(
            (k, v, None if k == "slot" else dt.from_numpy(v.dtype) if k == "const" else None)
            for k, v in self.outputs)


class _Const:
    """A constant binding of a trace (so an int index and an array never mix up)."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every JitFunction alive (`live_traces`)


def live_traces() -> tuple[int, int]:
    """(jitted functions alive, traces they hold) in this process (`svod.cache_info`)."""
    fns = list(_LIVE)
    return len(fns), sum(f.traces for f in fns)


class JitFunction:
    def __init__(self, fn, strict: bool = False):
        self.fn = fn
        self.strict = strict
        self._entries: dict[tuple, _Entry] = {}
        self._quick: dict[tuple, object] = {}  # signature -> replay closure (see _quick_for)
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn)
        _LIVE.add(self)

    @property
    def traces(self) -> int:
        """How many signatures were traced."""
        return len(self._entries)

    def _arrays(self, args) -> list[np.ndarray | None]:
        out = []
        for a in args:
            if isinstance(a, Tensor):
                a.realize()
                out.append(a.uop.arg.array)
            elif isinstance(a, np.ndarray):
                out.append(a)
            elif dt.scalar_kind(a) is not None:
                out.append(np.array(a, dtype=_SCALAR_DTYPE[dt.scalar_kind(a)].np))
            else:
                out.append(None)
        return out

    def _trace(self, args, kwargs, arrays) -> _Entry:
        from svod.engine import get_executable
        from svod.key import compact
        traced = []
        arg_of_buf: dict[int, int] = {}
        for i, (a, arr) in enumerate(zip(args, arrays)):
            if arr is None:
                traced.append(a)
                continue
            u = UOp.buffer(arr, dt.from_numpy(arr.dtype))
            arg_of_buf[id(u.arg)] = i
            traced.append(Tensor._from(u))
        outs, rebuild = _flatten(self.fn(*traced, **kwargs))
        pending = []
        outputs = []
        for t in outs:
            if t.uop.op is Ops.BUFFER:
                i = arg_of_buf.get(id(t.uop.arg))
                outputs.append(("arg", i) if i is not None else ("const", t.uop.arg.array))
            else:
                if t.uop not in pending:
                    pending.append(t.uop)
                outputs.append(("slot", pending.index(t.uop)))
        exe, sources = None, []
        if pending:
            key, bindings = compact(pending)
            exe = get_executable(key)
            for ref, arr in zip(bindings.buffers, bindings.arrays):
                i = arg_of_buf.get(id(ref))
                sources.append(("arg", i) if i is not None else ("const", arr))
        return _Entry(exe, sources, outputs, rebuild, tuple(u.dtype for u in pending))

    def _fast(self, args):
        """Replay when every argument is a realized Tensor and no keywords are given: the
        signature and arrays come from one pass over the arguments. None: take the
        general path."""
        sig, arrays = [], []
        for a in args:
            if type(a) is not Tensor:
                return None
            u = a.uop
            if u.op is not Ops.BUFFER:
                return None
            sig.append(("T", u.shape, u.dtype.name))
            arrays.append(u.arg.array)
        entry = self._entries.get((tuple(sig), ()))
        if entry is None:
            return None
        out = self._replay(entry, args, arrays)
        qkey = args[0].uop._sig if len(args) == 1 else tuple(a.uop._sig for a in args)  # as in __call__
        if qkey not in self._quick:
            self._quick[qkey] = _quick_for(entry, arrays) or _NO_QUICK
        return out

    def __call__(self, *args, **kwargs):
        if not kwargs:
            # the replay hot path: arguments are realized Tensors whose leaf signatures
            # (dtype, shape, strides: `UOp.buffer`) name a `_quick_for` closure
            try:
                quick = self._quick.get(args[0].uop._sig if len(args) == 1 else tuple([a.uop._sig for a in args]))
            except (AttributeError, IndexError):
                quick = None
            if quick is not None:
                out = quick(args)
                if out is not None:
                    return out
            out = self._fast(args)
            if out is not None:
                return out
        sig = (tuple(_arg_sig(a) for a in args), tuple(sorted((k, _arg_sig(v)) for k, v in kwargs.items())))
        entry = self._entries.get(sig)
        arrays = self._arrays(args)
        if entry is None:
            with self._lock:
                entry = self._entries.get(sig)
                if entry is None:
                    if self.strict and self._entries:
                        known = "\n  ".join(str(s[0]) for s in self._entries)
                        raise JitError(f"jit(strict=True): {getattr(self.fn, '__name__', 'function')} called with a "
                                       f"new signature {sig[0]}; traced:\n  {known}")
                    entry = self._trace(args, kwargs, arrays)
                    self._entries[sig] = entry
        return self._replay(entry, args, arrays)

    def _replay(self, entry: _Entry, args, arrays):
        results = ()
        if entry.exe is not None:
            results = entry.exe.run([arrays[b] if type(b) is int else b.array for b in entry.bind])
        out = []
        for kind, v, d in entry.out_plan:
            if kind == "slot":
                out.append(Tensor._from(UOp.buffer(results[v], entry.exe_dtypes[v])))
            elif kind == "arg":
                a = args[v]
                out.append(a if isinstance(a, Tensor) else Tensor._from(UOp.buffer(arrays[v], dt.from_numpy(
                    arrays[v].dtype))))
            else:
                out.append(Tensor._from(UOp.buffer(v, d)))
        return entry.rebuild(out)


def _NO_QUICK(args):
    return None


def _quick_for(entry: _Entry, arrays):
    """A replay closure for `entry`, `quick(args) -> outputs` (None: take the general
    path), for the common case: the plan binds the leading arguments in order, every
    output is a fresh buffer of the plan, and the plan's graph program can take its fast
    path (`KernelPlan.quick_parts`). It is generated as straight-line code for this
    entry's argument and output counts (the replay costs a few microseconds, so every
    loop and call level shows). The caller keys it by the arguments' leaf signatures
    (dtype, shape, strides), so `arrays` — this call's, checked here — stand for every
    later call: C-contiguous, big enough. None when the case does not apply."""
    exe, bind = entry.exe, entry.bind
    qp = getattr(exe, "quick_parts", None)
    got = qp() if qp is not None else None
    if got is None or bind != tuple(range(len(bind))) or any(k != "slot" for k, _, _ in entry.out_plan):
        return None
    parts, tally = got
    if len(parts.inputs) != len(bind):
        return None
    for a, (want, need) in zip(arrays, parts.inputs):
        if a.dtype is not want or a.size < need or not a.flags.c_contiguous:
            return None
    ns, call = parts.call_source(tally)
    ns.update(UOp.buffer_namespace(), _Tensor=Tensor, rebuild=entry.rebuild)
    body = ["def quick(args):"]
    for i, (want, _) in enumerate(parts.inputs):
        ns[f"W{i}"] = want
        body.append(f"    a{i} = args[{i}].uop.arg.array")
        body.append(f"    if a{i}.dtype is not W{i}: return None")
    body += call
    outs = [(k, v) for k, (_, v, _) in enumerate(entry.out_plan)]
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


def jit(fn=None, *, strict: bool = False):
    """Capture-and-replay decorator (see the module docstring)."""
    if fn is None:
        return lambda f: JitFunction(f, strict=strict)
    return JitFunction(fn, strict=strict)
