"""The state of a `svod.jit` trace: which values are traced inputs, which reads of them
are guards and which are errors, and how arguments are flattened into a signature.

A trace runs the user's function once on *placeholders*: each Tensor or array argument
becomes a fresh Tensor over a copy of its data, each Python scalar a `WeakScalar` (a 0-d
input holding its value). Every value the function reads goes through `realize`, where
this module's hook (`svod.tensor._READ_HOOK`, installed while any trace runs) looks at the
inputs the value depends on:

- a traced Tensor's data (`float(t)`, `bool(t)`, `if t > 0`, `t.numpy()`, `t.tolist()`,
  a boolean mask, anything with a data-dependent shape): `ConcretizationError`, raised at
  that line, naming the operation and the fix;
- only traced Python scalars (`if s > 0`, `int(n)`, `x[i]`, `range(n)`): the value is
  computed and the trace *guards* those arguments' values (a call with another value
  traces again: reason "new value of guarded argument");
- a plain `t.realize()` / `svod.realize(t)` of a traced value: nothing (it stays lazy);
  printing one shows `<traced svod.Tensor shape=... dtype=..., from x>`.

>>> import svod
>>> @svod.jit
... def f(x, thr):
...     return x[x > thr]
>>> try:
...     f(svod.arange(4), 1)
... except svod.ConcretizationError as e:
...     print(str(e).splitlines()[0][:60])
jit(f): indexing with a boolean mask or an integer array nee
"""

from __future__ import annotations

import enum
import sys
import threading
import types

import numpy as np

from svod import dtype as dt
from svod import tensor as T
from svod.ir import BufferRef, Ops, UOp, _canon, toposort


class JitError(TypeError):
    """Misuse of a jitted function: a new trace under strict=True, a static argument that
    is not hashable, an argument or a result that is not a Tensor (or a container of them)."""


class ConcretizationError(JitError):
    """A jitted function read the value of a traced tensor while it was traced (its value
    is known only when the replay runs): `float(t)`, `bool(t)`, `if t > 0`, `t.numpy()`,
    boolean-mask indexing, anything whose shape depends on the data."""


# ----------------------------------------------------------------------------- flattening

# argument types taken as part of the signature by value without being declared static:
# immutable by nature (a function is code; its globals are read at trace time)
_AUTO_STATIC = (type(None), str, bytes, complex, type, dt.DType, np.dtype, slice, range, type(Ellipsis),
                enum.Enum, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType,
                frozenset)


def _describe(v) -> str:
    r = repr(v)
    return f"{type(v).__name__} {r[:60]}{'...' if len(r) > 60 else ''}"


def flatten(v, leaves: list, where: str, static: bool, fn_name: str):
    """The signature spec of argument value `v` (a nested, hashable tuple), appending its
    traced leaves (Tensors, arrays, Python and numpy scalars) to `leaves` as
    (value, where). `where` names the argument in messages (`x`, `pair[0]`, `opts['a']`).
    Other array-likes (anything with `__array__`) are traced as the numpy array they give."""
    if static:
        if isinstance(v, (T.Tensor, np.ndarray)):
            raise JitError(f"jit({fn_name}): static argument '{where}' is a {type(v).__name__}; a static argument is "
                           "part of the signature by value, which a Tensor or an array is not (pass it as a "
                           "regular argument: it is traced)")
        try:
            hash(v)
        except TypeError:
            raise JitError(f"jit({fn_name}): static argument '{where}' must be hashable (it is part of the trace's "
                           f"signature), got {_describe(v)}; pass a tuple instead of a list, or a frozenset, or "
                           "make it a regular argument") from None
        return ("static", type(v), v)
    t = type(v)
    if isinstance(v, T.Tensor):
        leaves.append((v, where))
        return ("T", v.shape, v.dtype.name)
    if t is np.ndarray:
        leaves.append((v, where))
        try:
            return ("T", v.shape, dt.from_numpy(v.dtype).name)
        except Exception as e:  # noqa: BLE001 - an unsupported dtype, named where the user passed it
            raise JitError(f"jit({fn_name}): argument '{where}' is an array of dtype {v.dtype}, which svod does "
                           f"not support ({e})") from None
    if isinstance(v, np.generic) and dt.scalar_kind(v) is not None:
        leaves.append((v, where))
        return ("N", dt.from_numpy(v.dtype).name)
    if t is bool or t is float or (t is int and -(1 << 63) <= v < (1 << 63)):
        leaves.append((v, where))
        return ("S", "b" if t is bool else "i" if t is int else "f")
    if t is int:  # beyond int64: its value is the signature
        return ("static", int, v)
    if isinstance(v, tuple) and hasattr(v, "_fields"):  # a namedtuple
        return ("ntuple", t, tuple(flatten(x, leaves, f"{where}.{f}", False, fn_name) for f, x in zip(v._fields, v)))
    if t is tuple or t is list:
        return (t.__name__, tuple(flatten(x, leaves, f"{where}[{i}]", False, fn_name) for i, x in enumerate(v)))
    if t is dict:
        keys = tuple(v)
        try:
            hash(keys)
        except TypeError:
            raise JitError(f"jit({fn_name}): argument '{where}' is a dict with unhashable keys") from None
        return ("dict", keys, tuple(flatten(v[k], leaves, f"{where}[{k!r}]", False, fn_name) for k in keys))
    if isinstance(v, _AUTO_STATIC):
        try:
            hash(v)
        except TypeError:
            pass
        else:
            return ("static", t, v)
    if hasattr(v, "__array__"):  # another library's array: traced as the numpy array it gives
        return flatten(np.asarray(v), leaves, where, False, fn_name)
    raise JitError(f"jit({fn_name}): argument '{where}' is a {_describe(v)}: svod traces Tensors, numpy arrays, "
                   "Python and numpy scalars, and tuples, lists and dicts of them; mark it static "
                   "(static_argnums= / static_argnames=) if it is hashable and its value does not change "
                   "between calls with the same signature")


def unflatten(spec, it):
    """Rebuild an argument from its spec, taking traced leaves from iterator `it`."""
    kind = spec[0]
    if kind == "static":
        return spec[2]
    if kind in ("T", "N", "S"):
        return next(it)
    if kind == "ntuple":
        return spec[1](*[unflatten(s, it) for s in spec[2]])
    if kind == "tuple":
        return tuple(unflatten(s, it) for s in spec[1])
    if kind == "list":
        return [unflatten(s, it) for s in spec[1]]
    return {k: unflatten(s, it) for k, s in zip(spec[1], spec[2])}


def show(spec) -> str:
    """A spec in words (retrace reasons)."""
    kind = spec[0]
    if kind == "T":
        return f"a {spec[2]} tensor of shape {spec[1]}"
    if kind == "N":
        return f"a numpy {spec[1]} scalar"
    if kind == "S":
        return f"a Python {dict(b='bool', i='int', f='float')[spec[1]]}"
    if kind == "static":
        return f"the value {spec[2]!r}"
    if kind == "dict":
        return "a dict {" + ", ".join(f"{k!r}: {show(s)}" for k, s in zip(spec[1], spec[2])) + "}"
    items = spec[2] if kind == "ntuple" else spec[1]
    return f"a {kind} ({', '.join(show(s) for s in items)})"


def guard_key(v):
    """What an equality guard on a scalar compares: its type and value (-0.0 apart from
    0.0, NaN equal to NaN)."""
    return (type(v), _canon(v.item() if isinstance(v, np.generic) else v))


# ----------------------------------------------------------------------------- traces

_local = threading.local()  # .trace: the trace running on this thread
_lock = threading.Lock()
_placeholders: dict[BufferRef, tuple[Trace, int]] = {}  # every running trace's inputs
_running = 0  # traces running in the process (the hooks are installed while > 0)


def current() -> Trace | None:
    """The trace running on this thread, if any."""
    return getattr(_local, "trace", None)


class Trace:
    """One run of the user's function on placeholders (see the module docstring).
    `guards[i]`: equality guards on scalar leaf i; `ranges[i]`: (lo, hi) of an int leaf
    cast to a narrower dtype; `names[i]`: how messages call leaf i."""

    def __init__(self, fn_name: str, codes: frozenset, names: list[str], values: list):
        self.fn_name = fn_name
        self.codes = codes  # code objects of the traced function (where an op's frame walk stops)
        self.names = names
        self.values = values  # this call's leaf values (for guards)
        self.tensor_leaves: set[int] = set()
        self.refs: dict[BufferRef, int] = {}
        self.guards: dict[int, object] = {}
        self.ranges: dict[int, tuple[int, int]] = {}

    def placeholder(self, i: int, array: np.ndarray, tensor: bool, weak: bool) -> T.Tensor:
        """The traced stand-in of leaf i over `array` (a private copy of its data)."""
        u = UOp.buffer(array, dt.from_numpy(array.dtype))
        self.refs[u.arg] = i
        if tensor:
            self.tensor_leaves.add(i)
        return T.WeakScalar._wrap(u) if weak else T.Tensor._from(u)

    def guard(self, i: int) -> None:
        self.guards[i] = guard_key(self.values[i])

    def __enter__(self) -> Trace:
        global _running
        _local.trace = self
        with _lock:
            _placeholders.update((ref, (self, i)) for ref, i in self.refs.items())
            _running += 1
            T._READ_HOOK, T._WEAK_RANGE_HOOK, T._TRACED_REPR = _on_read, _on_weak_cast, _traced_repr
        return self

    def __exit__(self, *exc) -> None:
        global _running
        _local.trace = None
        with _lock:
            for ref in self.refs:
                _placeholders.pop(ref, None)
            _running -= 1
            if not _running:
                T._READ_HOOK = T._WEAK_RANGE_HOOK = T._TRACED_REPR = None


def _leaves_of(roots) -> set:
    out: set = set()
    for r in roots:
        ls = r._leaves
        if ls is None:  # a very wide graph keeps no leaf list: walk it
            ls = [u.arg for u in toposort([r]) if u.op is Ops.BUFFER]
        out.update(ls)
    return out


def _on_read(roots):
    """`svod.tensor._READ_HOOK`: the roots a realize may compute (see the module docstring)."""
    ph = _placeholders
    hits = [ph[leaf] for leaf in _leaves_of(roots) if leaf in ph]
    if not hits:
        return roots
    op, qual = _user_op({code for tr, _ in hits for code in tr.codes})
    if op == "realize":  # t.realize() / svod.realize(t) inside a trace: traced values stay lazy
        return [r for r in roots if not any(leaf in ph for leaf in _leaves_of([r]))]
    tensors = [(tr, i) for tr, i in hits if i in tr.tensor_leaves]
    if tensors:
        tr = tensors[0][0]
        raise ConcretizationError(_message(tr, qual, sorted({tr.names[i] for t, i in tensors if t is tr})))
    for tr, i in hits:
        tr.guard(i)
    return roots


def _traced_repr(t) -> str | None:
    """`svod.tensor._TRACED_REPR`: how a value that depends on traced inputs prints inside a
    trace (printing it reads nothing: no error, no guard); None for any other value."""
    ph = _placeholders
    hits = [ph[leaf] for leaf in _leaves_of([t.uop]) if leaf in ph]
    if not hits:
        return None
    tr = hits[0][0]
    names = ", ".join(sorted({tr.names[i] for t2, i in hits if t2 is tr}))
    kind = "traced Python scalar" if type(t) is T.WeakScalar else "traced svod.Tensor"
    return f"<{kind} shape={t.shape} dtype={t.dtype}, from {names}>"


def _on_weak_cast(x, d, op: str) -> None:
    """`svod.tensor._WEAK_RANGE_HOOK`: a traced Python int becomes an operand of a narrower
    integer dtype `d`. Its value must fit (else OverflowError, as outside the jit); a
    direct argument gets a range guard (no retrace while values fit), a value computed
    from arguments guards their values."""
    ref = x.uop.arg if x.uop.op is Ops.BUFFER else None
    hit = _placeholders.get(ref) if ref is not None else None
    info = np.iinfo(d.np)
    if hit is None:
        v = int(x)  # computed from arguments: its value is read (and guarded)
    else:
        tr, i = hit
        v = int(tr.values[i])
        lo, hi = tr.ranges.get(i, (info.min, info.max))
        tr.ranges[i] = (max(lo, int(info.min)), min(hi, int(info.max)))
    if not info.min <= v <= info.max:
        raise OverflowError(f"{op}: Python int {v} out of bounds for {d}")


# what the user wrote, by the name of the outermost svod function on the stack
_READS = {
    "__float__": "float(t)", "__int__": "int(t)", "__complex__": "complex(t)",
    "__bool__": "bool(t) (an `if`, `while`, `and`/`or`, `not` or `assert` on a traced value)",
    "__index__": "using a traced value as a Python int (an index, a size, an axis, range())",
    "numpy": "t.numpy()", "tolist": "t.tolist()", "item": "t.item()", "__array__": "np.asarray(t)",
    "__repr__": "printing a traced value", "__str__": "printing a traced value",
    "__format__": "formatting a traced value", "__iter__": "iterating over a traced value",
    "__getitem__": "indexing with a boolean mask or an integer array",
    "__setitem__": "assigning through a boolean mask or an integer array",
    "nonzero": "nonzero()", "argwhere": "argwhere()", "unique": "unique()",
}
_HINTS = {
    "__bool__": "choose by value with svod.where(cond, a, b), or branch outside the jitted function",
    "__getitem__": "keep the shape with svod.where(mask, x, 0), or index outside the jitted function",
    "__setitem__": "use svod.where(mask, value, x), or assign outside the jitted function",
    "__index__": "pass the index as a Python int argument (svod guards it) or a static argument",
}


def _user_op(stop_codes: set) -> tuple[str, str]:
    """(name, qualified name) of the outermost svod function between the user's code and
    this hook: the operation the user wrote (`Tensor.__float__`, `Tensor.__getitem__`...)."""
    f = sys._getframe(2)
    found = None
    names = set()
    while f is not None:
        code = f.f_code
        mod = str(f.f_globals.get("__name__", ""))
        if code in stop_codes or not (mod == "svod" or mod.startswith("svod.")):
            break
        if code.co_name not in ("_on_read", "_realize_uops", "realize_uops"):
            found = code
            names.add(code.co_name)
        f = f.f_back
    if found is None:
        return "realize", "realize"
    if "__index__" in names and found.co_name in ("__getitem__", "__setitem__"):  # x[i] with i from the data
        return "__index__", "__index__"
    return found.co_name, getattr(found, "co_qualname", found.co_name)


def _message(tr: Trace, qual: str, names: list[str]) -> str:
    op = qual.rsplit(".", 1)[-1]
    what = _READS.get(op, f"{qual}()")
    args = ", ".join(f"'{n}'" for n in names)
    hint = _HINTS.get(op, "move the read out of the jitted function (return the value and read it after the "
                          "call)")
    return (f"jit({tr.fn_name}): {what} needs the value of argument{'s' if len(names) > 1 else ''} {args}, "
            "which is not known while tracing\n"
            "A jitted function is traced once per signature and replayed with new data, so its Python code cannot "
            f"depend on a traced tensor's values. Fix: {hint}; or make the value a static argument "
            "(static_argnums= / static_argnames=) when it is a Python value, not a tensor.")
