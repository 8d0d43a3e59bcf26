"""The lazy, numpy-like `Tensor` and the Array-API-shaped functions over it.

Nothing is computed until a value is needed (`.numpy()`, `float(t)`, `print`, ...);
then `svod.realize` hands the pending graph to the engine. A registry of live tensors
(weak refs) lets each realize rebind every tensor that referenced a realized node, so a
value is never computed twice (seed 000).

>>> import svod
>>> x = svod.asarray([[1.0, 2.0], [3.0, 4.0]])
>>> y = svod.exp(x - x.max(axis=1, keepdims=True))
>>> (y / y.sum(axis=1, keepdims=True)).numpy().round(3)
array([[0.269, 0.731],
       [0.269, 0.731]], dtype=float32)
"""

from __future__ import annotations

import builtins
import math
import numbers
import operator
import os
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from svod import dtype as dt
from svod.dtype import DType, DTypeError
from svod.errors import AxisError, ShapeError, SvodOverflowError, SvodTypeError, SvodValueError, named, strip_label
from svod.ir import OP, Ops, UOp, _canon, check_size, shape_str, substitute
from svod.shapes import DYNAMIC as _DYNAMIC
from svod.shapes import bucket as _bucket
from svod.shapes import with_room as _with_room

# ----------------------------------------------------------------------------- registry

# id(tensor) -> weakref. NOTE: not a WeakSet: a set compares colliding members with ==,
# and Tensor.__eq__ is elementwise (it builds a Tensor, which registers: re-entry).
# Plain dict operations are atomic under the GIL: no lock on this hot path.
_live: dict[int, _LiveRef] = {}
# The same refs grouped by leaf (BufferRef) of the tensor's graph, so a realize visits only
# the pending tensors that can contain a realized root (a graph containing a root contains
# that root's leaves), not every live tensor: realizing N pending results one by one stays
# linear. Key None: tensors whose graph has no leaf list (very wide graphs). NOTE: a group
# lost to a race between threads only costs a missed rebind (a recompute), never a result.
_by_leaf: dict = {}


class _LiveRef(weakref.ref):
    __slots__ = ("key", "leaves")


def _index(ref: _LiveRef, leaves) -> None:
    ref.leaves = leaves
    key = ref.key
    if leaves is None:
        _by_leaf.setdefault(None, {})[key] = ref
        return
    for leaf in leaves:
        g = _by_leaf.get(leaf)
        if g is None:
            g = _by_leaf.setdefault(leaf, {})
        g[key] = ref


def _unindex(ref: _LiveRef) -> None:
    key = ref.key
    for leaf in (None,) if ref.leaves is None else ref.leaves:
        g = _by_leaf.get(leaf)
        if g is not None and g.get(key) is ref:
            g.pop(key, None)
            if not g:
                _by_leaf.pop(leaf, None)  # NOTE: a BufferRef key holds its array: drop empty groups
    ref.leaves = ()


def _unregister(ref: _LiveRef) -> None:
    if _live.get(ref.key) is ref:
        try:
            del _live[ref.key]
        except KeyError:
            pass
        _unindex(ref)


# Tensors made since the last realize, as plain weak references: most die before any
# realize (the intermediates of `y = f(y)` chains), so they are registered (indexed, with a
# death callback) only when a realize finds them alive (`_flush`) — 0.15 µs a tensor
# instead of ~1 µs for registering and unregistering each one.
_pending: list = []
_PENDING_MAX = 4096  # flush early past this many (bounds the list between realizes)
_weak, _new, _BUFFER = weakref.ref, object.__new__, OP.BUFFER


def _note(t: Tensor) -> None:
    """A new lazy tensor (the hot path of every op)."""
    _pending.append(weakref.ref(t))
    if len(_pending) > _PENDING_MAX:
        _flush()
    if t.uop._depth > PENDING_DEPTH > 0:
        _cut(t)


# ----------------------------------------------------------------------------- graph budget

# A pending graph deeper than this many nodes (longest path from a result to a realized
# leaf) is realized before it grows further (`SVOD_PENDING_DEPTH`; 0: never). A Python loop
# that realizes nothing thus costs O(steps): each segment is planned, compiled and run on
# its own, and equal segments have equal GraphKeys (one plan, one set of kernels, reused).
PENDING_DEPTH = int(os.environ.get("SVOD_PENDING_DEPTH", 256))
_cutting = False


def _cut(t: Tensor) -> None:
    """Realize `t` together with every live pending tensor that shares a leaf with it and is
    over half the depth budget deep (the other values a loop carries: realized in the same
    plan, so no segment is computed twice). Not while a `svod.jit` trace runs (a trace is
    one graph) nor from inside a cut."""
    global _cutting
    if _cutting or _READ_HOOK is not None:
        return
    _cutting = True
    try:
        if _pending:
            _flush()
        leaves = t.uop._leaves
        if leaves is None:
            refs = list(_live.values())
        else:
            cands: dict = {}
            for leaf in leaves:
                g = _by_leaf.get(leaf)
                if g:
                    cands.update(g)
            refs = list(cands.values())
        half = PENDING_DEPTH // 2
        others = []
        for ref in refs:
            o = ref()
            if o is not None and o is not t and o.uop._depth > half and o.uop.op is not _BUFFER:
                others.append(o)
        realize(t, *others)
    finally:
        _cutting = False


def _flush() -> None:
    global _pending
    batch, _pending = _pending, []  # NOTE: a note racing this swap is lost: a missed rebind, never a result
    for w in batch:
        t = w()
        if t is not None and t.uop.op is not OP.BUFFER:
            _register(t)


def _register(t: Tensor) -> None:
    key = id(t)
    ref = _live.get(key)
    if ref is None:
        ref = _LiveRef(t, _unregister)
        ref.key = key
        ref.leaves = ()  # NOTE: before it is published: another thread's realize may unindex it at once
        _live[key] = ref
        _index(ref, t.uop._leaves)
    elif ref.leaves != t.uop._leaves:  # rebound in place (setitem, +=): regroup
        _unindex(ref)
        _index(ref, t.uop._leaves)


def _realized(t: Tensor) -> None:
    ref = _live.pop(id(t), None)
    if ref is not None:
        _unindex(ref)


def _apply_becomes(mapping: dict[UOp, UOp]) -> None:
    """Rebind every live tensor through `mapping` (realized node -> BUFFER)."""
    if not mapping:
        return
    if _pending:
        _flush()
    memo: dict[UOp, UOp] | None = None
    root_leaves: set | None = set()
    for r in mapping:
        if not r._leaves:  # a constant graph (or a very wide one): any tensor may hold it
            root_leaves = None
            break
        root_leaves.update(r._leaves)
    if root_leaves is None:
        refs = list(_live.values())
    else:
        cands: dict = {}
        for leaf in root_leaves:
            g = _by_leaf.get(leaf)
            if g:
                cands.update(g)
        g = _by_leaf.get(None)
        if g:
            cands.update(g)
        refs = list(cands.values())
    for ref in refs:
        t = ref()
        if t is None:
            continue
        u = t.uop
        if u.op is OP.BUFFER or u.op is OP.CONST:
            continue
        if u in mapping:
            t.uop = mapping[u]
            _realized(t)  # realized: nothing left to rebind
        elif root_leaves is None or u._leaves is None or not root_leaves.isdisjoint(u._leaves):
            if memo is None:
                memo = dict(mapping)
            t.uop = nu = substitute([u], mapping, memo)[0]
            if nu.op is OP.BUFFER or nu.op is OP.CONST:
                _realized(t)
            elif ref.leaves != nu._leaves and _live.get(ref.key) is ref:
                _unindex(ref)
                _index(ref, nu._leaves)


# Set by svod.tracing while a `svod.jit` trace runs (None otherwise): called with the roots of
# every realize, it raises ConcretizationError for a value that needs a traced tensor's data,
# records a guard for one computed from traced Python scalars, and drops the roots a plain
# `realize()` asks for that depend on traced inputs (they stay lazy inside the trace).
_READ_HOOK = None
_TRACED_REPR = None  # set with _READ_HOOK: repr of a value that depends on traced inputs, else None
_engine_realize = None  # svod.engine.realize_uops, bound on first use (the engine is imported lazily)


def _realize_uops(roots):
    global _engine_realize
    hook = _READ_HOOK
    if hook is not None:
        roots = hook(roots)
        if not roots:
            return {}
    f = _engine_realize
    if f is None:
        from svod.engine import realize_uops as f

        _engine_realize = f
    return f(roots)


def realize(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Compute several tensors in one plan (shared producers once, sibling fusion).

    >>> import svod
    >>> a = svod.arange(4) * 2
    >>> b, c = svod.realize(a + 1, a - 1)
    >>> b.tolist(), c.tolist()
    ([1, 3, 5, 7], [-1, 1, 3, 5])
    """
    for t in tensors:
        if not isinstance(t, Tensor):
            raise SvodTypeError(f"realize: expected Tensors, got {type(t).__name__}")
    mapping = _realize_uops([t.uop for t in tensors])
    for t in tensors:  # tensors passed in are rebound even if the registry lost them
        if t.uop in mapping:
            t.uop = mapping[t.uop]
            _realized(t)
    _apply_becomes(mapping)
    return tensors


# ----------------------------------------------------------------------------- helpers


def _normalize_axis(axis: int, ndim: int, op: str) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise SvodTypeError(f"{op}: axis must be an int, got {type(axis).__name__}")
    a = int(axis)
    if not -ndim <= a < ndim:
        raise AxisError(f"{op}: axis {a} is out of bounds for array of dimension {ndim}")
    return a % ndim if ndim else 0


def _normalize_axes(axis, ndim: int, op: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple)):
        axes = tuple(_normalize_axis(a, ndim, op) for a in axis)
        if len(set(axes)) != len(axes):
            raise AxisError(f"{op}: repeated axis in {tuple(axis)}")
        return tuple(sorted(axes))
    return (_normalize_axis(axis, ndim, op),)


def broadcast_shapes(*shapes: tuple[int, ...], op: str = "broadcast_shapes") -> tuple[int, ...]:
    """numpy broadcasting of shapes; raises ShapeError naming `op` and the shapes."""
    if op == "broadcast_shapes":  # the public function: the shapes come from the user
        shapes = tuple(_check_shape(s, op) for s in shapes)
    ndim = builtins.max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            d = s[i - ndim + len(s)] if i - ndim + len(s) >= 0 else 1
            if d != 1:
                if size not in (1, d):
                    raise ShapeError(f"{op}: shapes {', '.join(shape_str(x) for x in shapes)} "
                                     f"cannot be broadcast together")
                size = d
        out.append(size)
    return tuple(out)


def _prod(xs: Iterable[int]) -> int:
    return math.prod(xs)


def _is_scalar(x) -> bool:
    return dt.scalar_kind(x) is not None and not isinstance(x, np.ndarray)


def _scalar_value(x):
    if isinstance(x, np.generic):
        return x.item()
    return x


# ----------------------------------------------------------------------------- Tensor


def _fast_binary(op: Ops, fn_name: str, reflected: bool):
    """A binary operator method with the float-tensor cases inline — a float tensor with a
    Python float or int (weak: the tensor's dtype), or two float tensors of one dtype and
    shape — and the rest through the module function `fn_name` (promotion, broadcasting,
    errors). Same nodes either way; the inline path skips three calls per op."""

    def method(self, o):
        u = self.uop
        d = u.dtype
        if d.kind == "f":
            t = type(o)
            if t is float or t is int:
                c = _const(o, d, u.shape)
                return Tensor._from(UOp(op, d, (c, u) if reflected else (u, c)))
            if t is Tensor:
                v = o.uop
                if v.dtype is d and v.shape == u.shape:
                    return Tensor._from(UOp(op, d, (v, u) if reflected else (u, v)))
        f = globals()[fn_name]
        return f(o, self) if reflected else f(self, o)

    return named(method, f"__{'r' if reflected else ''}{fn_name}__")


class Tensor:
    """A lazy n-d array. Create with `svod.asarray`, `svod.zeros`, ...; operators build
    the graph; `.numpy()` or `svod.realize` computes it.

    Hashable by identity; `==` is elementwise (as in numpy).
    """

    __slots__ = ("uop", "__weakref__")
    __array_priority__ = 100  # numpy defers binary operators to Tensor

    def __init__(self, data=None, dtype=None, *, _uop: UOp | None = None):
        if _uop is None:
            _uop = asarray(data, dtype=dtype).uop
        self.uop = _uop
        if _uop.op is not OP.BUFFER:  # realized tensors need no becomes-map
            _note(self)

    @staticmethod
    def _from(u: UOp) -> Tensor:
        t = _new(Tensor)
        t.uop = u
        if u.op is not _BUFFER:
            _pending.append(_weak(t))  # `_note`, inlined: every op passes here
            if len(_pending) > _PENDING_MAX:
                _flush()
            if u._depth > PENDING_DEPTH > 0:
                _cut(t)
        return t

    # --- attributes
    @property
    def shape(self) -> tuple[int, ...]:
        return self.uop.shape

    @shape.setter
    def shape(self, value) -> None:
        """numpy's ``x.shape = (...)``: rebinds `x` to the reshape (-1 allowed)."""
        self.uop = reshape(self, value).uop
        _register(self)

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.uop.shape)

    @property
    def size(self) -> int:
        return _prod(self.uop.shape)

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def T(self) -> Tensor:
        return permute_dims(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(f"mT: needs at least 2 dimensions, got shape {shape_str(self.shape)}")
        order = list(range(self.ndim))
        order[-1], order[-2] = order[-2], order[-1]
        return permute_dims(self, tuple(order))

    @property
    def is_realized(self) -> bool:
        return self.uop.op is OP.BUFFER

    def __hash__(self) -> int:
        return id(self)

    # --- realization and conversion
    def realize(self) -> Tensor:
        u = self.uop
        if u.op is _BUFFER:
            if _READ_HOOK is not None:  # a traced input read directly (svod.jit: a guard or an error)
                _READ_HOOK((u,))
            return self
        mapping = _realize_uops((u,))  # `realize(self)` for one tensor, without its loops
        nu = mapping.get(u)
        if nu is not None:
            self.uop = nu
            _realized(self)
        _apply_becomes(mapping)
        return self

    def numpy(self) -> np.ndarray:
        """The value as a read-only numpy array (a view of svod's buffer, no copy)."""
        self.realize()
        arr = self.uop.arg.array
        if arr.flags.writeable or arr.base is None:
            arr = arr.view()
            arr.flags.writeable = False
        return arr

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)
        if copy:
            return arr.copy()
        return arr

    def __array_namespace__(self, api_version=None):
        if api_version not in (None, "2021.12", "2022.12", "2023.12"):
            raise SvodValueError(f"svod implements the array API 2023.12, not {api_version}")
        import svod

        return svod

    def item(self, *args):
        """The value as a Python scalar; numpy's `item(i)` / `item(i, j)` pick one element."""
        if args:
            return self.numpy().item(*args)
        if self.size != 1:
            raise SvodValueError(f"item: can only convert an array of size 1, got shape {shape_str(self.shape)}")
        return self.numpy().reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def _scalar(self, what: str):
        if self.size != 1:
            raise SvodTypeError(f"only size-1 arrays can be converted to Python {what}, got shape "
                            f"{shape_str(self.shape)}")
        return self.numpy().reshape(()).item()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise SvodValueError(f"the truth value of an array with shape {shape_str(self.shape)} is ambiguous; "
                             f"use .any() or .all()")
        return bool(self._scalar("bool"))

    def __float__(self) -> float:
        return float(self._scalar("float"))

    def __int__(self) -> int:
        return int(self._scalar("int"))

    def __complex__(self) -> complex:
        return complex(self._scalar("complex"))

    def __index__(self) -> int:
        if self.ndim != 0 or not (self.dtype.is_int or self.dtype.is_bool):
            raise SvodTypeError(f"only 0-d integer arrays can be used as an index, got {self.dtype} "
                            f"shape {shape_str(self.shape)}")
        return int(self._scalar("int"))

    def __len__(self) -> int:
        if self.ndim == 0:
            raise SvodTypeError("len() of a 0-d array")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise SvodTypeError("iteration over a 0-d array")
        for i in range(self.shape[0]):
            yield self[i]

    def __repr__(self) -> str:
        if _TRACED_REPR is not None:  # inside a svod.jit trace: a traced value prints as such
            r = _TRACED_REPR(self)
            if r is not None:
                return r
        if self.is_realized or self.size <= 1000:
            body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
            return f"tensor({body}, dtype={self.dtype})"
        return f"<svod.Tensor shape={shape_str(self.shape)} dtype={self.dtype} lazy>"

    def __str__(self) -> str:
        if _TRACED_REPR is not None and _TRACED_REPR(self) is not None:
            return self.__repr__()
        if self.is_realized or self.size <= 1000:
            return str(self.numpy())
        return self.__repr__()

    def __format__(self, spec: str) -> str:
        if self.ndim == 0 and spec:
            return format(self.item(), spec)
        return str(self) if not spec else format(str(self), spec)

    def __setstate__(self, state):  # pragma: no cover
        raise SvodTypeError("pickle svod tensors through .numpy()")

    def __reduce__(self):
        return (asarray, (np.array(self.numpy()),))

    # --- dtype
    def astype(self, dtype, copy: bool = True) -> Tensor:
        return astype(self, dtype, copy=copy)

    # --- arithmetic operators
    __add__ = _fast_binary(OP.ADD, "add", reflected=False)
    __radd__ = _fast_binary(OP.ADD, "add", reflected=True)

    __sub__ = _fast_binary(OP.SUB, "subtract", reflected=False)
    __rsub__ = _fast_binary(OP.SUB, "subtract", reflected=True)

    __mul__ = _fast_binary(OP.MUL, "multiply", reflected=False)
    __rmul__ = _fast_binary(OP.MUL, "multiply", reflected=True)

    __truediv__ = _fast_binary(OP.DIV, "divide", reflected=False)
    __rtruediv__ = _fast_binary(OP.DIV, "divide", reflected=True)

    def __floordiv__(self, o):
        return floor_divide(self, o)

    def __rfloordiv__(self, o):
        return floor_divide(o, self)

    def __mod__(self, o):
        return remainder(self, o)

    def __rmod__(self, o):
        return remainder(o, self)

    def __pow__(self, o):
        return pow(self, o)

    def __rpow__(self, o):
        return pow(o, self)

    def __matmul__(self, o):
        return matmul(self, o)

    def __rmatmul__(self, o):
        return matmul(o, self)

    def __and__(self, o):
        return bitwise_and(self, o)

    def __rand__(self, o):
        return bitwise_and(o, self)

    def __or__(self, o):
        return bitwise_or(self, o)

    def __ror__(self, o):
        return bitwise_or(o, self)

    def __xor__(self, o):
        return bitwise_xor(self, o)

    def __rxor__(self, o):
        return bitwise_xor(o, self)

    def __lshift__(self, o):
        from svod.elementwise import bitwise_left_shift

        return bitwise_left_shift(self, o)

    def __rlshift__(self, o):
        from svod.elementwise import bitwise_left_shift

        return bitwise_left_shift(o, self)

    def __rshift__(self, o):
        from svod.elementwise import bitwise_right_shift

        return bitwise_right_shift(self, o)

    def __rrshift__(self, o):
        from svod.elementwise import bitwise_right_shift

        return bitwise_right_shift(o, self)

    def __neg__(self):
        return negative(self)

    def __pos__(self):
        return positive(self)

    def __abs__(self):
        return abs(self)

    def __invert__(self):
        return bitwise_invert(self)

    def __lt__(self, o):
        return less(self, o)

    def __le__(self, o):
        return less_equal(self, o)

    def __gt__(self, o):
        return greater(self, o)

    def __ge__(self, o):
        return greater_equal(self, o)

    def __eq__(self, o):  # type: ignore[override]
        return equal(self, o)

    def __ne__(self, o):  # type: ignore[override]
        return not_equal(self, o)

    # in-place operators rebind this tensor to a functional update (same dtype required)
    def _inplace(self, fn, o, name: str) -> Tensor:
        res = fn(self, o)
        if res.dtype != self.dtype:
            raise DTypeError(f"{name}: result dtype {res.dtype} cannot be cast to the in-place "
                             f"operand's dtype {self.dtype}")
        if res.shape != self.shape:
            raise ShapeError(f"{name}: result shape {shape_str(res.shape)} differs from the in-place "
                             f"operand's shape {shape_str(self.shape)}")
        self.uop = res.uop
        _register(self)  # now pending: later realizes must rebind it
        return self

    def __iadd__(self, o):
        return self._inplace(add, o, "__iadd__")

    def __isub__(self, o):
        return self._inplace(subtract, o, "__isub__")

    def __imul__(self, o):
        return self._inplace(multiply, o, "__imul__")

    def __itruediv__(self, o):
        return self._inplace(divide, o, "__itruediv__")

    def __ifloordiv__(self, o):
        return self._inplace(floor_divide, o, "__ifloordiv__")

    def __imod__(self, o):
        return self._inplace(remainder, o, "__imod__")

    def __ipow__(self, o):
        return self._inplace(pow, o, "__ipow__")

    def __imatmul__(self, o):
        return self._inplace(matmul, o, "__imatmul__")

    def __iand__(self, o):
        return self._inplace(bitwise_and, o, "__iand__")

    def __ior__(self, o):
        return self._inplace(bitwise_or, o, "__ior__")

    def __ixor__(self, o):
        return self._inplace(bitwise_xor, o, "__ixor__")

    def __ilshift__(self, o):
        return self._inplace(Tensor.__lshift__, o, "__ilshift__")

    def __irshift__(self, o):
        return self._inplace(Tensor.__rshift__, o, "__irshift__")

    # --- indexing
    def __getitem__(self, key) -> Tensor:
        from svod.indexing import getitem

        return getitem(self, key)

    def __setitem__(self, key, value) -> None:
        from svod.indexing import setitem

        self.uop = setitem(self, key, value).uop
        _register(self)

    # --- method forms of the common functions
    def reshape(self, *shape, copy=None) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return reshape(self, shape)

    def permute(self, *axes) -> Tensor:
        if len(axes) == 1 and isinstance(axes[0], (tuple, list)):
            axes = tuple(axes[0])
        return permute_dims(self, axes)

    def transpose(self, *axes) -> Tensor:
        if not axes or axes == (None,):
            return self.T
        return self.permute(*axes)

    def flatten(self) -> Tensor:
        return reshape(self, (-1,))

    def ravel(self) -> Tensor:
        return reshape(self, (-1,))

    def broadcast_to(self, shape) -> Tensor:
        return broadcast_to(self, shape)

    def expand_dims(self, axis) -> Tensor:
        return expand_dims(self, axis)

    def squeeze(self, axis=None) -> Tensor:
        return squeeze(self, axis)

    def flip(self, axis=None) -> Tensor:
        return flip(self, axis=axis)

    def contiguous(self) -> Tensor:
        return Tensor._from(UOp(OP.CONTIGUOUS, self.dtype, (self.uop,)))

    def sum(self, axis=None, keepdims=False, dtype=None):
        return sum(self, axis=axis, keepdims=keepdims, dtype=dtype)

    def prod(self, axis=None, keepdims=False, dtype=None):
        return prod(self, axis=axis, keepdims=keepdims, dtype=dtype)

    def max(self, axis=None, keepdims=False):
        return max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        return min(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        return mean(self, axis=axis, keepdims=keepdims)

    def var(self, axis=None, correction=0.0, keepdims=False, ddof=None):
        return var(self, axis=axis, correction=correction if ddof is None else ddof, keepdims=keepdims)

    def std(self, axis=None, correction=0.0, keepdims=False, ddof=None):
        return std(self, axis=axis, correction=correction if ddof is None else ddof, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False):
        return argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False):
        return argmin(self, axis=axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False):
        return any(self, axis=axis, keepdims=keepdims)

    def all(self, axis=None, keepdims=False):
        return all(self, axis=axis, keepdims=keepdims)

    def exp(self):
        return exp(self)

    def log(self):
        return log(self)

    def sqrt(self):
        return sqrt(self)

    def abs(self):
        return abs(self)

    def tanh(self):
        return tanh(self)

    def sigmoid(self):
        from svod.nn import sigmoid

        return sigmoid(self)

    def relu(self):
        from svod.nn import relu

        return relu(self)

    def clip(self, min=None, max=None):
        return clip(self, min, max)

    def round(self, decimals: int = 0):
        if decimals:
            from svod.numpy._functions import around

            return around(self, decimals)
        return round(self)

    def square(self):
        return square(self)

    def reciprocal(self):
        return reciprocal(self)

    def softmax(self, axis=-1):
        from svod.nn import softmax

        return softmax(self, axis=axis)

    def matmul(self, o):
        return matmul(self, o)

    def dot(self, o):
        from svod.numpy._functions import dot

        return dot(self, o)

    # --- numpy's ndarray methods (svod.numpy's functions; `svod/numpy/_functions.py`)
    def copy(self, order="C") -> Tensor:
        """A new tensor with this value (lazy; later updates of either leave the other)."""
        return Tensor._from(UOp(OP.CONTIGUOUS, self.dtype, (self.uop,)))

    def fill(self, value) -> None:
        """Set every element to `value` (rebinds this tensor, as `x[...] = value`)."""
        if isinstance(value, Tensor):
            value = value.item()
        if self.dtype.is_int and not dt.can_cast_scalar(self.dtype, value):
            raise SvodOverflowError(f"fill: {value} does not fit {self.dtype}")
        self.uop = full(self.shape, np.array(value).astype(self.dtype.np).item(), dtype=self.dtype).uop
        _register(self)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def real(self) -> Tensor:
        from svod.elementwise import real

        return real(self) if self.dtype.kind == "c" else self

    @property
    def imag(self) -> Tensor:
        from svod.elementwise import imag

        return imag(self)

    def conj(self) -> Tensor:
        from svod.elementwise import conj

        return conj(self) if self.dtype.kind == "c" else self

    conjugate = conj

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        order = list(range(self.ndim))
        a, b = _normalize_axis(axis1, self.ndim, "swapaxes"), _normalize_axis(axis2, self.ndim, "swapaxes")
        order[a], order[b] = order[b], order[a]
        return permute_dims(self, tuple(order))

    def _np(self, name: str, *args, **kwargs):
        from svod.numpy import _functions

        return getattr(_functions, name)(self, *args, **kwargs)

    def cumsum(self, axis=None, dtype=None):
        return self._np("cumsum", axis, dtype)

    def cumprod(self, axis=None, dtype=None):
        return self._np("cumprod", axis, dtype)

    def ptp(self, axis=None, keepdims=False):
        return self._np("ptp", axis, keepdims=keepdims)

    def nonzero(self):
        from svod.searching import nonzero

        return nonzero(self)

    def sort(self, axis: int = -1, kind=None, order=None) -> None:
        """Sort in place along `axis` (stable; rebinds this tensor), as numpy's method."""
        from svod.sorting import sort

        self.uop = sort(self, axis=axis).uop
        _register(self)

    def argsort(self, axis: int = -1, kind=None, order=None):
        return self._np("argsort", axis, kind)

    def searchsorted(self, v, side="left", sorter=None):
        from svod.searching import searchsorted

        return searchsorted(self, v, side=side, sorter=sorter)

    def repeat(self, repeats, axis=None):
        return self._np("repeat", repeats, axis)

    def take(self, indices, axis=None):
        from svod.gather import take

        return take(self, indices, axis=axis)

    def diagonal(self, offset=0, axis1=0, axis2=1):
        return self._np("diagonal", offset, axis1, axis2)

    def trace(self, offset=0, axis1=0, axis2=1, dtype=None):
        return self._np("trace", offset, axis1, axis2, dtype)

    def to_device(self, device, /, *, stream=None) -> Tensor:
        if device != "cpu":
            raise SvodValueError(f"to_device: svod runs on 'cpu', not {device!r}")
        return self

    # --- interchange and numpy's protocols (svod/interop.py)
    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        from svod.interop import to_dlpack

        return to_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        from svod.interop import array_ufunc

        return array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        from svod.interop import array_function

        return array_function(func, types, args, kwargs)


# ----------------------------------------------------------------------------- creation


# ----------------------------------------------------------------------------- traced Python scalars

_KIND_VALUE = {"b": False, "i": 0, "f": 0.0, "c": 0j}  # a Python scalar of each kind (for dtype promotion)
# Set by svod.tracing while a trace runs: called when a traced Python int is cast to a
# narrower integer dtype; checks the value fits (OverflowError, as outside the jit) and
# guards its range.
_WEAK_RANGE_HOOK = None


def _weak_kind(x) -> str | None:
    """'b', 'i' or 'f' for a weak operand (a WeakScalar or a Python bool/int/float), else None."""
    t = type(x)
    if t is WeakScalar:
        return x.uop.dtype.kind
    return "b" if t is bool else "i" if t is int else "f" if t is float else None


class WeakScalar(Tensor):
    """A Python scalar argument inside a `svod.jit` trace: a 0-d input holding the exact
    value (bool, int64 or float64) that takes part in dtype promotion as the Python scalar
    does (weak, NEP 50): `x * s` keeps the dtype of a float32 `x`. Operators between weak
    scalars and Python scalars stay weak, with Python's promotion (bool arithmetic is
    int, `/` is float); any other use (`svod.exp(s)`, `svod.asarray(s)`) makes it a Tensor
    of svod's default dtype for its kind, as `svod.asarray(value)` does. Reading its value
    (`float(s)`, `if s > 0`, an index) makes the trace guard that value (svod.tracing)."""

    __slots__ = ()
    __hash__ = Tensor.__hash__

    @staticmethod
    def _wrap(u: UOp) -> WeakScalar:
        t = _new(WeakScalar)
        t.uop = u
        if u.op is not _BUFFER:
            _note(t)
        return t

    def strong(self) -> Tensor:
        """A Tensor of the default dtype of this scalar's kind (what asarray(value) gives)."""
        k = self.uop.dtype.kind
        d = dt.default_float if k == "f" else dt.default_int if k == "i" else dt.bool_
        return Tensor._from(_cast(self.uop, d))

    def cast(self, d: DType, op: str) -> UOp:
        """This scalar as a `d` operand of `op` (the dtype promotion chose `d`)."""
        hook = _WEAK_RANGE_HOOK
        if hook is not None and d.is_int and self.uop.dtype.is_int and d is not self.uop.dtype:
            hook(self, d, op)
        return _cast(self.uop, d)


_WEAK_DT = {"b": dt.bool_, "i": dt.int64, "f": dt.float64}


def _weak_binary(fn, a, b, kind_rule: str) -> WeakScalar:
    """`fn(a, b)` for two weak operands, computed at the weak dtype of the higher kind and
    weak again. `kind_rule`: "arith" (bool computes as int, as in Python), "div" (float),
    "bits" (bool stays bool)."""
    ka, kb = _weak_kind(a), _weak_kind(b)
    kind = "f" if kind_rule == "div" else builtins.max(ka, kb, key="bif".index)
    if kind == "b" and kind_rule == "arith":
        kind = "i"
    d = _WEAK_DT[kind]
    conv = {"b": bool, "i": int, "f": float}[kind]
    ua = a.uop if type(a) is WeakScalar else UOp.const(conv(a), d)
    ub = b.uop if type(b) is WeakScalar else UOp.const(conv(b), d)
    return WeakScalar._wrap(fn(Tensor._from(_cast(ua, d)), Tensor._from(_cast(ub, d))).uop)


def _weak_method(fn_name: str, reflected: bool, kind_rule: str = "arith"):
    def method(self, o):
        fn = globals()[fn_name]
        if _weak_kind(o) is not None:
            return _weak_binary(fn, o, self, kind_rule) if reflected else _weak_binary(fn, self, o, kind_rule)
        return fn(o, self) if reflected else fn(self, o)

    return named(method, f"__{'r' if reflected else ''}{fn_name}__")


def _weak_unary(fn_name: str):
    def method(self):
        u = self.uop
        if u.dtype.is_bool:  # Python: -True == -1, ~True == -2
            u = _cast(u, dt.int64)
        return WeakScalar._wrap(globals()[fn_name](Tensor._from(u)).uop)

    return method


for _name, _fn, _rule in (("add", "add", "arith"), ("sub", "subtract", "arith"), ("mul", "multiply", "arith"),
                          ("truediv", "divide", "div"), ("floordiv", "floor_divide", "arith"),
                          ("mod", "remainder", "arith"), ("pow", "pow", "arith"), ("and", "bitwise_and", "bits"),
                          ("or", "bitwise_or", "bits"), ("xor", "bitwise_xor", "bits")):
    setattr(WeakScalar, f"__{_name}__", _weak_method(_fn, False, _rule))
    setattr(WeakScalar, f"__r{_name}__", _weak_method(_fn, True, _rule))
for _name, _fn in (("lt", "less"), ("le", "less_equal"), ("gt", "greater"), ("ge", "greater_equal"),
                   ("eq", "equal"), ("ne", "not_equal")):
    setattr(WeakScalar, f"__{_name}__", _weak_method(_fn, False))
for _name, _fn in (("neg", "negative"), ("pos", "positive"), ("abs", "abs"), ("invert", "bitwise_invert")):
    setattr(WeakScalar, f"__{_name}__", _weak_unary(_fn))
del _name, _fn, _rule


def _from_numpy(arr: np.ndarray, copy: bool) -> Tensor:
    d = dt.from_numpy(arr.dtype)
    if copy or not arr.flags.c_contiguous and not arr.flags.f_contiguous:
        if copy and _DYNAMIC.active and arr.ndim and 1 < arr.shape[0] != _bucket(arr.shape[0]):
            # a process with programs of changing row counts: room for the row bucket, so a
            # dynamic structure binds this input without a copy (svod.shapes.with_room)
            arr = _with_room(arr)
        else:
            arr = np.array(arr, copy=True, order="C")
    arr.flags.writeable = False if copy else arr.flags.writeable
    return Tensor._from(UOp.buffer(arr, d))


def _infer_list_dtype(obj) -> DType:
    """float32 if any Python float appears, else int64 if any int, else bool (iteratively)."""
    kinds = set()
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        elif isinstance(x, Tensor):
            kinds.add(x.dtype.kind)
        elif isinstance(x, np.ndarray):
            kinds.add(dt.from_numpy(x.dtype).kind)
        else:
            k = dt.scalar_kind(x)
            if k is None:
                raise DTypeError(f"asarray: element of type {type(x).__name__} ({x!r:.40}) is not a number; "
                                 f"svod supports {', '.join(d.name for d in dt.ALL)}")
            kinds.add(k)
    if "c" in kinds:
        return dt.complex_of(dt.default_float)
    if "f" in kinds or not kinds:  # an empty list has no kind: the default float, as in torch/JAX
        return dt.default_float
    if "i" in kinds or "u" in kinds:
        return dt.default_int
    return dt.bool_


def asarray(obj, /, *, dtype=None, device=None, copy: bool | None = None) -> Tensor:
    """Convert arrays, nested lists, scalars or Tensors into a Tensor.

    Python floats become float32 (svod's default float), Python ints int64; numpy arrays
    keep their dtype. The data is copied unless `copy=False`.

    >>> import svod
    >>> svod.asarray([1, 2.5]).dtype, svod.asarray([1, 2]).dtype
    (float32, int64)
    """
    if device not in (None, "cpu"):
        raise SvodValueError(f"asarray: svod runs on 'cpu', not {device!r}")
    want = dt.dtype(dtype) if dtype is not None else None
    if isinstance(obj, Tensor):
        if type(obj) is WeakScalar:
            obj = obj.strong()
        if want is not None and want != obj.dtype:
            if copy is False:
                raise SvodValueError(f"asarray: copy=False but a cast from {obj.dtype} to {want} is needed")
            return astype(obj, want)
        return obj if not copy else Tensor._from(UOp(OP.CONTIGUOUS, obj.dtype, (obj.uop,)))
    if isinstance(obj, np.ndarray) or (hasattr(obj, "__array__") and not isinstance(obj, (list, tuple))):
        arr = np.asarray(obj)
        if arr.dtype == object or arr.dtype.kind in "USV":
            raise DTypeError(f"asarray: arrays of dtype {arr.dtype} are not supported")
        if want is not None and arr.dtype != want.np:
            if copy is False:
                raise SvodValueError(f"asarray: copy=False but a cast from {arr.dtype} to {want} is needed")
            arr = arr.astype(want.np)
            return _from_numpy(arr, copy=False)
        return _from_numpy(arr, copy=copy is not False)
    if isinstance(obj, (str, bytes)):
        raise DTypeError(f"asarray: strings are not supported (got {obj!r:.40})")
    if _is_scalar(obj):
        d = want or dt.result_type(_scalar_value(obj))
        if isinstance(obj, np.generic) and want is None:
            d = dt.from_numpy(obj.dtype)
        value = _scalar_value(obj)
        if d.is_int and isinstance(value, int) and not dt.can_cast_scalar(d, value):
            raise SvodOverflowError(f"asarray: Python int {value} does not fit {d}")
        return _from_numpy(np.array(value, dtype=d.np), copy=False)
    if isinstance(obj, (list, tuple)):
        if builtins.any(isinstance(x, Tensor) for x in _flat_iter(obj)):
            obj = _materialise_tensors(obj)
        d = want or _infer_list_dtype(obj)
        try:
            with np.errstate(all="raise"):
                arr = np.array(obj, dtype=d.np)
        except ValueError as e:
            raise ShapeError(f"asarray: nested sequence is ragged or inconsistent ({e})") from e
        except OverflowError as e:
            raise SvodOverflowError(f"asarray: value out of range for {d} ({e})") from e
        return _from_numpy(arr, copy=False)
    raise DTypeError(f"asarray: cannot convert object of type {type(obj).__name__}")


def _flat_iter(obj):
    stack = [obj]
    while stack:
        x = stack.pop()
        if isinstance(x, (list, tuple)):
            stack.extend(x)
        else:
            yield x


def _materialise_tensors(obj):
    if isinstance(obj, (list, tuple)):
        return [_materialise_tensors(x) for x in obj]
    if isinstance(obj, Tensor):
        return obj.numpy()
    return obj


def _check_shape(shape, op: str, dtype: DType | None = None) -> tuple[int, ...]:
    """`shape` as a tuple of ints: integers (not floats, not bools), none negative, and —
    with `dtype` — not too big to address (`svod.ir.check_size`)."""
    if type(shape) is not tuple or not builtins.all(type(s) is int for s in shape):  # the common case is one test
        if not isinstance(shape, tuple):
            try:
                shape = (shape,) if isinstance(shape, (numbers.Number, np.generic)) else tuple(shape)
            except TypeError:
                shape = (shape,)
        try:
            if builtins.any(isinstance(s, (bool, np.bool_)) for s in shape):
                raise TypeError
            shape = tuple(operator.index(s) for s in shape)
        except TypeError:
            raise SvodTypeError(f"{op}: shape must be integers, got {_show(shape)}") from None
    if shape and builtins.min(shape) < 0:
        raise ShapeError(f"{op}: negative dimensions are not allowed in shape {shape_str(shape)}")
    if dtype is not None:
        check_size(shape, dtype)
    return shape


def _show(v) -> str:
    """A short description of an argument for a message: a Tensor by shape and dtype."""
    if isinstance(v, Tensor):
        return f"a {v.dtype} tensor of shape {shape_str(v.shape)}"
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _check_int(value, what: str, op: str, minimum: int | None = None) -> int:
    """`value` as a Python int: an integer (not a float, not a bool), at least `minimum`."""
    if isinstance(value, (bool, np.bool_)):
        raise SvodTypeError(f"{op}: {what} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise SvodTypeError(f"{op}: {what} must be an integer, got {_show(value)} ({type(value).__name__})") from None
    if minimum is not None and v < minimum:
        raise SvodValueError(f"{op}: {what} must be {'non-negative' if minimum == 0 else f'at least {minimum}'}, "
                             f"got {v}")
    return v


_CONST_CACHE: dict = {}  # (value key, dtype, shape) -> broadcast constant UOp (strong refs, bounded)


def _const(value, dtype: DType, shape: tuple[int, ...]) -> UOp:
    """A constant broadcast to `shape` (CONST -> RESHAPE -> EXPAND), memoised: scalars in
    expressions are the commonest operands and building the chain costs three nodes."""
    ck = (_canon(value), dtype, shape)
    u = _CONST_CACHE.get(ck)
    if u is not None:
        return u
    u = UOp.const(value, dtype)
    if shape:
        u = UOp(OP.RESHAPE, dtype, (u,), (1,) * len(shape))
        if builtins.any(s != 1 for s in shape):
            u = UOp(OP.EXPAND, dtype, (u,), shape)
    if len(_CONST_CACHE) > 4096:
        _CONST_CACHE.clear()
    _CONST_CACHE[ck] = u
    return u


def full(shape, fill_value, *, dtype=None, device=None) -> Tensor:
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if not _is_scalar(fill_value):
        raise SvodTypeError(f"full: fill_value must be a scalar, got {type(fill_value).__name__}")
    d = dt.dtype(dtype) if dtype is not None else dt.from_numpy(fill_value.dtype) \
        if isinstance(fill_value, np.generic) else dt.result_type(_scalar_value(fill_value))  # np scalars: strong
    shape = _check_shape(shape, "full", d)
    if d.is_int and not dt.can_cast_scalar(d, fill_value):
        raise SvodOverflowError(f"full: fill value {fill_value} does not fit {d}")
    return Tensor._from(_const(fill_value, d, shape))


def zeros(shape, *, dtype=None, device=None) -> Tensor:
    return full(shape, 0, dtype=dtype or dt.default_float)


def ones(shape, *, dtype=None, device=None) -> Tensor:
    return full(shape, 1, dtype=dtype or dt.default_float)


def empty(shape, *, dtype=None, device=None) -> Tensor:
    return zeros(shape, dtype=dtype)


def full_like(x: Tensor, fill_value, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return full(x.shape, fill_value, dtype=dtype or x.dtype)


def zeros_like(x: Tensor, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return full(x.shape, 0, dtype=dtype or x.dtype)


def ones_like(x: Tensor, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return full(x.shape, 1, dtype=dtype or x.dtype)


def empty_like(x: Tensor, *, dtype=None, device=None) -> Tensor:
    x = asarray(x)
    return zeros_like(x, dtype=dtype)


def arange(start, /, stop=None, step=1, *, dtype=None, device=None) -> Tensor:
    """Like numpy.arange; int arguments give int64, floats float32."""
    if stop is None:
        start, stop = 0, start
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if isinstance(v, Tensor):
            v = v.item()
        if not isinstance(v, (numbers.Real, np.integer, np.floating)) or isinstance(v, (bool, np.bool_)):
            raise SvodTypeError(f"arange: {what} must be a real number, got {v!r} ({type(v).__name__})")
        if not math.isfinite(v):
            raise SvodValueError(f"arange: {what} must be finite, got {v!r} (arange({start!r}, {stop!r}, {step!r}) "
                                 f"has no length)")
    if step == 0:
        raise SvodValueError("arange: step must not be zero")
    d = dt.dtype(dtype) if dtype is not None else dt.result_type(start, stop, step)
    n = builtins.max(0, math.ceil((stop - start) / step))
    check_size((n,), d)
    arr = (start + step * np.arange(n, dtype=np.float64 if d.is_float else np.int64)).astype(d.np)
    return _from_numpy(arr, copy=False)


def linspace(start, stop, /, num: int, *, dtype=None, device=None, endpoint: bool = True) -> Tensor:
    d = dt.dtype(dtype) if dtype is not None else dt.default_float
    num = _check_int(num, "num", "linspace", 0)
    check_size((num,), d)
    return _from_numpy(np.linspace(start, stop, num, endpoint=endpoint, dtype=np.float64).astype(d.np), copy=False)


def eye(n_rows: int, n_cols: int | None = None, /, *, k: int = 0, dtype=None, device=None) -> Tensor:
    d = dt.dtype(dtype) if dtype is not None else dt.default_float
    n_rows = _check_int(n_rows, "n_rows", "eye", 0)
    n_cols = n_rows if n_cols is None else _check_int(n_cols, "n_cols", "eye", 0)
    k = _check_int(k, "k", "eye")
    check_size((n_rows, n_cols), d)
    return _from_numpy(np.eye(n_rows, n_cols, k=k, dtype=d.np), copy=False)


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    x = asarray(x)
    k = _check_int(k, "k", "tril")
    if x.ndim < 2:
        raise ShapeError(f"tril: needs at least 2 dimensions, got shape {shape_str(x.shape)}")
    mask = asarray(np.tril(np.ones(x.shape[-2:], dtype=bool), k=k))
    return where(mask, x, zeros_like(x))


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    x = asarray(x)
    k = _check_int(k, "k", "triu")
    if x.ndim < 2:
        raise ShapeError(f"triu: needs at least 2 dimensions, got shape {shape_str(x.shape)}")
    mask = asarray(np.triu(np.ones(x.shape[-2:], dtype=bool), k=k))
    return where(mask, x, zeros_like(x))


# ----------------------------------------------------------------------------- casting & broadcasting


def astype(x: Tensor, dtype, /, *, copy: bool = True, device=None) -> Tensor:
    """Cast to `dtype`. A complex value cast to a real dtype keeps its real part (numpy's
    result, without its ComplexWarning); to bool it is True unless both parts are 0."""
    x = asarray(x)
    d = dt.dtype(dtype)
    if d == x.dtype:
        return x if not copy else Tensor._from(x.uop)
    if x.dtype.is_complex and not d.is_complex:
        if d.is_bool:
            return not_equal(x, 0)
        return astype(Tensor._from(UOp(OP.REAL, x.dtype.real, (x.uop,))), d, copy=False)
    return Tensor._from(UOp(OP.CAST, d, (x.uop,)))


def _no_complex(name: str, d: DType, why: str = "") -> None:
    """Raise DTypeError naming `name` for a complex dtype (an op numpy rejects for complex:
    orderings, maximum/minimum, floor/ceil, //, %, ...)."""
    if d.is_complex:
        raise DTypeError(f"{name}: not supported for complex operands ({d}){why}")


def _cast(u: UOp, d: DType) -> UOp:
    return u if u.dtype == d else UOp(OP.CAST, d, (u,))


def _expand_uop(u: UOp, shape: tuple[int, ...]) -> UOp:
    if u.shape == shape:
        return u
    if u.ndim < len(shape):
        u = UOp(OP.RESHAPE, u.dtype, (u,), (1,) * (len(shape) - u.ndim) + u.shape)
    if u.shape != shape:
        u = UOp(OP.EXPAND, u.dtype, (u,), shape)
    return u


def broadcast_to(x: Tensor, /, shape) -> Tensor:
    x = asarray(x)
    shape = _check_shape(shape, "broadcast_to")
    if len(shape) < x.ndim or builtins.any(
            a != b and a != 1 for a, b in zip(x.shape, shape[len(shape) - x.ndim:])):
        raise ShapeError(f"broadcast_to: cannot broadcast shape {shape_str(x.shape)} to {shape_str(shape)}")
    return Tensor._from(_expand_uop(x.uop, shape))


def broadcast_arrays(*arrays: Tensor) -> list[Tensor]:
    arrays = [asarray(a) for a in arrays]
    shape = broadcast_shapes(*(a.shape for a in arrays), op="broadcast_arrays")
    return [broadcast_to(a, shape) for a in arrays]


def result_type(*arrays_and_dtypes) -> DType:
    return dt.result_type(*[a.dtype if isinstance(a, Tensor) else a for a in arrays_and_dtypes])


def _operands(op: str, *xs, dtype_fn=None) -> tuple[list[UOp], DType]:
    """Turn operands (Tensors, arrays, scalars) into UOps of one dtype and one shape."""
    if len(xs) == 2:  # fast paths: two tensors alike, or a float tensor and a Python float/int
        a, b = xs
        ta, tb = type(a) is Tensor, type(b) is Tensor
        if ta or tb:
            u = a.uop if ta else b.uop
            d = u.dtype
            if dtype_fn is None or dtype_fn(d) is d:
                if ta and tb:
                    ub = b.uop
                    if ub.dtype is d and ub.shape == u.shape:
                        return [u, ub], d
                elif d.is_float and type(b if ta else a) in (float, int):
                    c = _const(b if ta else a, d, u.shape)
                    return ([u, c] if ta else [c, u]), d
    tensors = [x if isinstance(x, Tensor) and type(x) is not WeakScalar else None for x in xs]
    strong: list[Any] = []
    for i, x in enumerate(xs):
        if type(x) is WeakScalar:  # a traced Python scalar (svod.jit): weak, as the scalar itself
            strong.append(_KIND_VALUE[x.uop.dtype.kind])
            continue
        if tensors[i] is None and (not _is_scalar(x) or isinstance(x, np.generic)):  # NEP 50: numpy scalars are strong
            try:
                tensors[i] = asarray(x)
            except DTypeError as e:  # name the op the user wrote (a complex operand, a uint8 array, ...)
                raise DTypeError(f"{op}: {strip_label(str(e))}") from None
        if tensors[i] is not None:
            strong.append(tensors[i].dtype)
        else:
            strong.append(_scalar_value(x))
    try:
        d = dt.result_type(*strong)
    except DTypeError as e:
        raise DTypeError(f"{op}: {strip_label(str(e))}") from e
    if dtype_fn is not None:
        d = dtype_fn(d)
    shape = broadcast_shapes(*(t.shape for t in tensors if t is not None), op=op)
    uops = []
    for i, x in enumerate(xs):
        if tensors[i] is not None:
            uops.append(_expand_uop(_cast(tensors[i].uop, d), shape))
        elif type(x) is WeakScalar:
            uops.append(_expand_uop(x.cast(d, op), shape))
        else:
            v = _scalar_value(x)
            if d.is_int and isinstance(v, (int, float)) and not isinstance(v, bool):
                if isinstance(v, float) and not v.is_integer():
                    raise DTypeError(f"{op}: cannot use float {v} with an integer array")
                dt.check_scalar(d, v, op)
            uops.append(_const(v, d, shape))
    return uops, d


def _binop(op: Ops, name: str, a, b, *, dtype_fn=None, out_dtype=None) -> Tensor:
    (ua, ub), d = _operands(name, a, b, dtype_fn=dtype_fn)
    return Tensor._from(UOp(op, out_dtype or d, (ua, ub)))


def _unop(op: Ops, name: str, x, *, float_only=False, allow_bool=True, identity_for_int=False) -> Tensor:
    if type(x) is Tensor:  # the common case first: a float tensor takes none of the branches below
        u = x.uop
        if u.dtype.is_float:
            return Tensor._from(UOp(op, u.dtype, (u,)))
    x = asarray(x)
    if not allow_bool and x.dtype.is_bool:
        raise DTypeError(f"{name}: not supported for bool input")
    if identity_for_int and not x.dtype.is_inexact:
        return x
    u = x.uop
    if float_only and not x.dtype.is_float:
        u = _cast(u, dt.math_float(u.dtype))
    return Tensor._from(UOp(op, u.dtype, (u,)))


def _float_result(d: DType) -> DType:
    """The dtype of a division or mean of `d` values: the default float for ints and bool."""
    return d if d.is_inexact else dt.default_float


def _math_result(d: DType) -> DType:
    """The dtype of a float function of `d` values (`dtype.math_float`)."""
    return dt.math_float(d)


# ----------------------------------------------------------------------------- elementwise


def add(a, b, /) -> Tensor:
    (ua, ub), d = _operands("add", a, b)
    return Tensor._from(UOp(OP.OR if d.is_bool else OP.ADD, d, (ua, ub)))


def subtract(a, b, /) -> Tensor:
    (ua, ub), d = _operands("subtract", a, b)
    if d.is_bool:
        raise DTypeError("subtract: boolean subtract is not supported, use logical_xor or bitwise_xor")
    return Tensor._from(UOp(OP.SUB, d, (ua, ub)))


def multiply(a, b, /) -> Tensor:
    (ua, ub), d = _operands("multiply", a, b)
    return Tensor._from(UOp(OP.AND if d.is_bool else OP.MUL, d, (ua, ub)))


def divide(a, b, /) -> Tensor:
    """True division; integers divide in the default float dtype (float32)."""
    return _binop(OP.DIV, "divide", a, b, dtype_fn=_float_result)


def floor_divide(a, b, /) -> Tensor:
    (ua, ub), d = _operands("floor_divide", a, b)
    _no_complex("floor_divide", d)
    if d.is_bool:
        raise DTypeError("floor_divide: not supported for bool operands")
    return Tensor._from(UOp(OP.IDIV, d, (ua, ub)))


def remainder(a, b, /) -> Tensor:
    (ua, ub), d = _operands("remainder", a, b)
    _no_complex("remainder", d)
    if d.is_bool:
        raise DTypeError("remainder: not supported for bool operands")
    return Tensor._from(UOp(OP.MOD, d, (ua, ub)))


def pow(a, b, /) -> Tensor:  # noqa: A001 - the Array API name
    (ua, ub), d = _operands("pow", a, b)
    if d.is_bool:
        raise DTypeError("pow: not supported for bool operands")
    return Tensor._from(UOp(OP.POW, d, (ua, ub)))


def maximum(a, b, /) -> Tensor:
    """Elementwise maximum; NaN propagates (numpy semantics)."""
    (ua, ub), d = _operands("maximum", a, b)
    _no_complex("maximum", d, "; complex numbers have no order")
    return Tensor._from(UOp(OP.OR if d.is_bool else OP.MAX, d, (ua, ub)))


def minimum(a, b, /) -> Tensor:
    (ua, ub), d = _operands("minimum", a, b)
    _no_complex("minimum", d, "; complex numbers have no order")
    return Tensor._from(UOp(OP.AND if d.is_bool else OP.MIN, d, (ua, ub)))


def _cmp_out_of_range(op: Ops, left, right) -> Tensor | None:
    """`left OP right` when one side is an integer Tensor and the other a Python int outside
    that Tensor's dtype range: numpy 2 compares such values exactly (instead of raising
    OverflowError as arithmetic does), so the result is the same for every element.
    None when that is not the case."""
    if type(right) is int and type(left) not in (int, float, bool):
        x, v, x_left = left, right, True
    elif type(left) is int and type(right) not in (int, float, bool):
        x, v, x_left = right, left, False
    else:
        return None
    if type(x) is WeakScalar:
        return None
    if not isinstance(x, Tensor):
        if not isinstance(x, (np.ndarray, np.generic)) or x.dtype.kind not in "iu":
            return None  # (other dtypes: _operands raises, naming the op)
        x = asarray(x)
    if not x.dtype.is_int or dt.can_cast_scalar(x.dtype, v):
        return None
    if op is OP.CMPEQ or op is OP.CMPNE:
        value = op is OP.CMPNE
    else:  # CMPLT / CMPLE: x < v holds for every x when v is above the range; v < x when below
        value = (v > 0) if x_left else (v < 0)
    return broadcast_to(asarray(value), x.shape)


def _cmp(op: Ops, name: str, a, b, swap=False) -> Tensor:
    if type(a) is int or type(b) is int:
        out = _cmp_out_of_range(op, b, a) if swap else _cmp_out_of_range(op, a, b)
        if out is not None:
            return out
    (ua, ub), d = _operands(name, a, b)
    if op is not OP.CMPEQ and op is not OP.CMPNE:
        _no_complex(name, d, "; complex numbers have no order")
    if swap:
        ua, ub = ub, ua
    return Tensor._from(UOp(op, dt.bool_, (ua, ub)))


def less(a, b, /) -> Tensor:
    return _cmp(OP.CMPLT, "less", a, b)


def less_equal(a, b, /) -> Tensor:
    return _cmp(OP.CMPLE, "less_equal", a, b)


def greater(a, b, /) -> Tensor:
    return _cmp(OP.CMPLT, "greater", a, b, swap=True)


def greater_equal(a, b, /) -> Tensor:
    return _cmp(OP.CMPLE, "greater_equal", a, b, swap=True)


def equal(a, b, /) -> Tensor:
    return _cmp(OP.CMPEQ, "equal", a, b)


def not_equal(a, b, /) -> Tensor:
    return _cmp(OP.CMPNE, "not_equal", a, b)


def _bitwise(op: Ops, name: str, a, b) -> Tensor:
    (ua, ub), d = _operands(name, a, b)
    if d.is_inexact:
        raise DTypeError(f"{name}: not supported for floating-point operands ({d})")
    return Tensor._from(UOp(op, d, (ua, ub)))


def bitwise_and(a, b, /) -> Tensor:
    return _bitwise(OP.AND, "bitwise_and", a, b)


def bitwise_or(a, b, /) -> Tensor:
    return _bitwise(OP.OR, "bitwise_or", a, b)


def bitwise_xor(a, b, /) -> Tensor:
    return _bitwise(OP.XOR, "bitwise_xor", a, b)


def bitwise_invert(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_inexact:
        raise DTypeError(f"bitwise_invert: not supported for {x.dtype}")
    return Tensor._from(UOp(OP.NOT, x.dtype, (x.uop,)))


def _as_bool(x) -> Tensor:
    x = asarray(bool(x)) if _is_scalar(x) else asarray(x)  # NOTE: 1e-50 must not round to a float32 zero
    return x if x.dtype.is_bool else not_equal(x, 0)


def logical_and(a, b, /) -> Tensor:
    return _bitwise(OP.AND, "logical_and", _as_bool(a), _as_bool(b))


def logical_or(a, b, /) -> Tensor:
    return _bitwise(OP.OR, "logical_or", _as_bool(a), _as_bool(b))


def logical_xor(a, b, /) -> Tensor:
    return _bitwise(OP.XOR, "logical_xor", _as_bool(a), _as_bool(b))


def logical_not(x, /) -> Tensor:
    x = _as_bool(x)
    return Tensor._from(UOp(OP.NOT, dt.bool_, (x.uop,)))


def negative(x, /) -> Tensor:
    return _unop(OP.NEG, "negative", x, allow_bool=False)


def positive(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_bool:
        raise DTypeError("positive: not supported for bool input")
    return x


def abs(x, /) -> Tensor:  # noqa: A001
    """|x|; of a complex value its modulus in the parts' float dtype, computed as numpy's
    SIMD loop: ``max * sqrt(1 + (min/max)**2)`` of the parts' magnitudes; inf if either
    part is infinite (even with a NaN), else NaN if either is NaN."""
    x = asarray(x)
    if x.dtype.is_complex:
        return Tensor._from(UOp(OP.ABS, x.dtype.real, (x.uop,)))
    return x if x.dtype.is_bool else _unop(OP.ABS, "abs", x)


def exp(x, /) -> Tensor:
    return _unop(OP.EXP, "exp", x, float_only=True)


def log(x, /) -> Tensor:
    return _unop(OP.LOG, "log", x, float_only=True)


def sqrt(x, /) -> Tensor:
    return _unop(OP.SQRT, "sqrt", x, float_only=True)


def rsqrt(x, /) -> Tensor:
    return reciprocal(sqrt(x))


def sin(x, /) -> Tensor:
    return _unop(OP.SIN, "sin", x, float_only=True)


def cos(x, /) -> Tensor:
    return _unop(OP.COS, "cos", x, float_only=True)


def tan(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_complex:  # tan(z) = -i tanh(i z): glibc's ctan special values too
        from svod.elementwise import imag, real

        iz = Tensor._from(UOp(OP.COMPLEX, x.dtype, (negative(imag(x)).uop, real(x).uop)))
        t = tanh(iz)
        return Tensor._from(UOp(OP.COMPLEX, x.dtype, (imag(t).uop, negative(real(t)).uop)))
    return divide(sin(x), cos(x))


def tanh(x, /) -> Tensor:
    return _unop(OP.TANH, "tanh", x, float_only=True)


def erf(x, /) -> Tensor:
    _no_complex("erf", asarray(x).dtype)
    return _unop(OP.ERF, "erf", x, float_only=True)


def erfc(x, /) -> Tensor:
    """1 - erf(x), within a few ulp also where it is tiny (an op of its own: no cancellation;
    down to the subnormals, x < 26.6 in float64, x < 10.05 in float32)."""
    return _unop(OP.ERFC, "erfc", x, float_only=True)


def expm1(x, /) -> Tensor:
    """exp(x) - 1, accurate for tiny x (an op of its own: no cancellation); -0.0 stays -0.0."""
    return _unop(OP.EXPM1, "expm1", x, float_only=True)


def log1p(x, /) -> Tensor:
    """log(1 + x), accurate for tiny x (an op of its own: no rounding of 1 + x); -0.0 stays -0.0."""
    return _unop(OP.LOG1P, "log1p", x, float_only=True)


def _scaled_log(x, c: float) -> Tensor:
    """log(x) * c, c rounded to the result's float dtype; a complex log scales each part
    (numpy's: an infinite real part keeps a zero imaginary part)."""
    x = asarray(x)
    f = _math_result(x.dtype)
    lg = log(x)
    if f.is_complex:
        from svod.elementwise import imag, real

        k = np.array(c, dtype=f.real.np).item()
        return Tensor._from(UOp(OP.COMPLEX, f, (multiply(real(lg), k).uop, multiply(imag(lg), k).uop)))
    return multiply(lg, np.array(c, dtype=f.np).item())


def log2(x, /) -> Tensor:
    return _scaled_log(x, 1 / math.log(2))


def log10(x, /) -> Tensor:
    return _scaled_log(x, 1 / math.log(10))


def floor(x, /) -> Tensor:
    _no_complex("floor", asarray(x).dtype)
    return _unop(OP.FLOOR, "floor", x, identity_for_int=True)


def ceil(x, /) -> Tensor:
    _no_complex("ceil", asarray(x).dtype)
    return _unop(OP.CEIL, "ceil", x, identity_for_int=True)


def trunc(x, /) -> Tensor:
    x = asarray(x)
    _no_complex("trunc", x.dtype)
    if not x.dtype.is_float:
        return x
    return where(less(x, 0), ceil(x), floor(x))


def round(x, /) -> Tensor:  # noqa: A001
    """Round half to even (numpy semantics)."""
    return _unop(OP.ROUND, "round", x, identity_for_int=True)


def sign(x, /) -> Tensor:
    return _unop(OP.SIGN, "sign", x, allow_bool=False)


def reciprocal(x, /) -> Tensor:
    x = asarray(x)
    if x.dtype.is_complex:  # numpy's own loop (not 1/x by Smith's division): r = im/re, d = re + im r, ...
        from svod.elementwise import imag, real

        re, im = real(x), imag(x)
        first = less_equal(abs(im), abs(re))
        r1 = divide(im, re)
        d1 = add(re, multiply(im, r1))
        r2 = divide(re, im)
        d2 = add(multiply(re, r2), im)
        out_re = where(first, divide(1, d1), divide(r2, d2))
        out_im = where(first, divide(negative(r1), d1), divide(-1, d2))
        return Tensor._from(UOp(OP.COMPLEX, x.dtype, (out_re.uop, out_im.uop)))
    return divide(1, x)


def square(x, /) -> Tensor:
    x = asarray(x)
    return multiply(x, x)


def isnan(x, /) -> Tensor:
    """NaN test; a complex value is NaN when either part is."""
    x = asarray(x)
    if not x.dtype.is_inexact:
        return full(x.shape, False, dtype=dt.bool_)
    return Tensor._from(UOp(OP.ISNAN, dt.bool_, (x.uop,)))


def isinf(x, /) -> Tensor:
    """Infinity test; a complex value is infinite when either part is."""
    x = asarray(x)
    if not x.dtype.is_inexact:
        return full(x.shape, False, dtype=dt.bool_)
    return Tensor._from(UOp(OP.ISINF, dt.bool_, (x.uop,)))


def isfinite(x, /) -> Tensor:
    return logical_not(logical_or(isnan(x), isinf(x)))


def where(condition, x1, x2, /) -> Tensor:
    """Elementwise select; numpy broadcasting and promotion between `x1` and `x2`."""
    scalar = _is_scalar(condition)
    c = _as_bool(condition) if not scalar else asarray(bool(condition))
    (u1, u2), d = _operands("where", x1, x2)
    shape = broadcast_shapes(c.shape, u1.shape, op="where")
    k = c.uop
    while k.op is OP.EXPAND or k.op is OP.RESHAPE:
        k = k.src[0]
    if scalar or k.op is OP.CONST:  # a constant condition selects one side (`x[:] = v` makes one)
        return Tensor._from(_expand_uop(u1 if (bool(condition) if scalar else k.arg) else u2, shape))
    return Tensor._from(UOp(OP.WHERE, d, (_expand_uop(c.uop, shape), _expand_uop(u1, shape),
                                           _expand_uop(u2, shape))))


def clip(x, /, min=None, max=None) -> Tensor:  # noqa: A002
    """Clamp to [min, max]; NaN in `x` propagates. Keeps `x`'s dtype. As numpy 2, a Python
    int bound beyond an integer `x`'s range that clamps nothing (a min below it, a max
    above it) is ignored; one that would clamp raises OverflowError."""
    x = asarray(x)
    _no_complex("clip", x.dtype, "; complex numbers have no order")
    if x.dtype.is_int:
        lo_, hi_ = dt.int_limits(x.dtype)
        if type(min) is int and min < lo_:
            min = None  # noqa: A001
        if type(max) is int and max > hi_:
            max = None  # noqa: A001
        for v in (min, max):
            if type(v) is int:
                dt.check_scalar(x.dtype, v, "clip")
    out = x
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return astype(out, x.dtype, copy=False) if out.dtype != x.dtype else out


# ----------------------------------------------------------------------------- reductions


def _reduce(x, rop: str, axis, keepdims: bool, op: str, out_dtype: DType | None = None) -> Tensor:
    x = asarray(x)
    if rop in ("max", "min"):
        _no_complex(op, x.dtype, "; complex numbers have no order")
    elif rop == "sum" and (out_dtype or x.dtype).is_complex:  # the parts' sums: compiled float reductions
        from svod.elementwise import imag, real

        x = astype(x, out_dtype or x.dtype, copy=False)
        parts = [_reduce(p(x), "sum", axis, keepdims, op) for p in (real, imag)]
        return Tensor._from(UOp(OP.COMPLEX, x.dtype, (parts[0].uop, parts[1].uop)))
    axes = _normalize_axes(axis, x.ndim, op)
    u = x.uop
    if out_dtype is not None and out_dtype != x.dtype:
        u = _cast(u, out_dtype)
    if rop in ("max", "min") and builtins.any(x.shape[a] == 0 for a in axes):
        raise SvodValueError(f"{op}: zero-size array (shape {shape_str(x.shape)}) along axes {axes} has no identity")
    if axes:
        u = UOp(OP.REDUCE, u.dtype, (u,), (rop, axes))
    if not keepdims:
        u = UOp(OP.RESHAPE, u.dtype, (u,), tuple(s for i, s in enumerate(x.shape) if i not in axes))
    return Tensor._from(u)


def _acc_dtype(d: DType, dtype) -> DType:
    """The accumulation dtype of sum/prod/cumulative_sum (numpy 2 on a 64-bit platform, and
    the Array API's default): floats keep theirs, unsigned ints give uint64, signed ints
    and bool int64."""
    if dtype is not None:
        return dt.dtype(dtype)
    return d if d.is_inexact else dt.uint64 if d.is_unsigned else dt.int64


def sum(x, /, *, axis=None, dtype=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    x = asarray(x)
    return _reduce(x, "sum", axis, keepdims, "sum", _acc_dtype(x.dtype, dtype))


def prod(x, /, *, axis=None, dtype=None, keepdims: bool = False) -> Tensor:
    x = asarray(x)
    return _reduce(x, "prod", axis, keepdims, "prod", _acc_dtype(x.dtype, dtype))


def max(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum along axes; NaN wins (numpy semantics)."""
    return _reduce(x, "max", axis, keepdims, "max")


def min(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(x, "min", axis, keepdims, "min")


def any(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(_as_bool(x), "max", axis, keepdims, "any") if _count(x, axis, "any") else \
        _reduce_empty(x, False, axis, keepdims, "any")


def all(x, /, *, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce(_as_bool(x), "min", axis, keepdims, "all") if _count(x, axis, "all") else \
        _reduce_empty(x, True, axis, keepdims, "all")


def _count(x, axis, op: str = "reduce") -> int:
    x = asarray(x)
    axes = _normalize_axes(axis, x.ndim, op)
    return _prod(x.shape[a] for a in axes)


def _reduce_empty(x, value, axis, keepdims, op) -> Tensor:
    x = asarray(x)
    axes = _normalize_axes(axis, x.ndim, op)
    shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)) if keepdims else \
        tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return full(shape, value, dtype=dt.bool_)


def mean(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean; integers average in the default float dtype (float32)."""
    x = asarray(x)
    f = _float_result(x.dtype)
    n = _count(x, axis, "mean")
    s = _reduce(x, "sum", axis, keepdims, "mean", f)
    return divide(s, n) if n else multiply(s, float("nan"))


def var(x, /, *, axis=None, correction=0.0, keepdims: bool = False) -> Tensor:
    """Variance, two passes (mean, then squared deviations) — never E[x²]−E[x]²; of
    complex values the mean of |x - mean|², real (numpy's)."""
    x = asarray(x)
    f = _float_result(x.dtype)
    xf = astype(x, f, copy=False)
    n = _count(x, axis, "var")
    m = mean(xf, axis=axis, keepdims=True)
    d = subtract(xf, m)
    if f.is_complex:  # |d|² = re² + im², in the parts' float dtype (numpy's real result)
        from svod.elementwise import imag, real

        re, im = real(d), imag(d)
        d2 = add(multiply(re, re), multiply(im, im))
    else:
        d2 = multiply(d, d)
    ss = _reduce(d2, "sum", axis, keepdims, "var")
    denom = n - correction
    return divide(ss, denom) if denom > 0 else multiply(ss, float("inf")) if denom == 0 and n else \
        multiply(ss, float("nan"))


def std(x, /, *, axis=None, correction=0.0, keepdims: bool = False) -> Tensor:
    return sqrt(var(x, axis=axis, correction=correction, keepdims=keepdims))


def _argreduce(op: Ops, name: str, x, axis, keepdims) -> Tensor:
    x = asarray(x)
    _no_complex(name, x.dtype, "; complex numbers have no order")
    if axis is None:
        if x.size == 0:
            raise SvodValueError(f"{name}: attempt to get {name} of an empty sequence")
        flat = reshape(x, (-1,))
        u = UOp(op, dt.int64, (flat.uop,), 0)
        return Tensor._from(UOp(OP.RESHAPE, dt.int64, (u,), (1,) * x.ndim if keepdims else ()))
    a = _normalize_axis(axis, x.ndim, name)
    if x.shape[a] == 0:
        raise SvodValueError(f"{name}: attempt to get {name} of an empty sequence (axis {a} of shape "
                         f"{shape_str(x.shape)})")
    u = UOp(op, dt.int64, (x.uop,), a)
    if not keepdims:
        u = UOp(OP.RESHAPE, dt.int64, (u,), tuple(s for i, s in enumerate(x.shape) if i != a))
    return Tensor._from(u)


def argmax(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    """Index of the first maximum; NaN wins (numpy semantics)."""
    return _argreduce(OP.ARGMAX, "argmax", x, axis, keepdims)


def argmin(x, /, *, axis=None, keepdims: bool = False) -> Tensor:
    return _argreduce(OP.ARGMIN, "argmin", x, axis, keepdims)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False) -> Tensor:
    """Cumulative sum (computed eagerly: a scan is not a fusion target yet)."""
    x = asarray(x)
    if axis is None:
        if x.ndim > 1:
            raise SvodValueError("cumulative_sum: axis is required for arrays with more than one dimension")
        axis = 0
    a = _normalize_axis(axis, x.ndim, "cumulative_sum")
    d = _acc_dtype(x.dtype, dtype)
    out = np.cumsum(x.numpy(), axis=a, dtype=d.np)
    if include_initial:
        pad = [(0, 0)] * x.ndim
        pad[a] = (1, 0)
        out = np.pad(out, pad)
    return _from_numpy(out, copy=False)


# ----------------------------------------------------------------------------- movement


def reshape(x, /, shape, *, copy=None) -> Tensor:
    x = asarray(x)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError as e:
        raise SvodTypeError(f"reshape: shape must be ints, got {shape!r}") from e
    if builtins.sum(1 for s in shape if s == -1) > 1:
        raise ShapeError(f"reshape: can only specify one unknown dimension (-1), got {shape_str(shape)}")
    if builtins.any(s < -1 for s in shape):
        raise ShapeError(f"reshape: invalid shape {shape_str(shape)}")
    if -1 in shape:
        known = _prod(s for s in shape if s != -1)
        if known == 0 or x.size % known:
            raise ShapeError(f"reshape: cannot reshape array of size {x.size} (shape {shape_str(x.shape)}) "
                             f"into shape {shape_str(shape)}")
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    if _prod(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape array of size {x.size} (shape {shape_str(x.shape)}) "
                         f"into shape {shape_str(shape)}")
    if shape == x.shape:
        return x
    return Tensor._from(UOp(OP.RESHAPE, x.dtype, (x.uop,), shape))


def permute_dims(x, /, axes) -> Tensor:
    x = asarray(x)
    if not isinstance(axes, (tuple, list)):
        raise SvodTypeError(f"permute_dims: axes must be a sequence of {x.ndim} integers, got {axes!r}")
    axes = tuple(axes)
    if builtins.any(isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)) for a in axes):
        raise SvodTypeError(f"permute_dims: axes must be integers, got {axes!r}")
    if sorted(a % x.ndim if -x.ndim <= a < x.ndim else -1 for a in axes) != list(range(x.ndim)) \
            or len(axes) != x.ndim:
        raise AxisError(f"permute_dims: axes {axes} are not a permutation of the {x.ndim} axes of shape "
                        f"{shape_str(x.shape)}")
    axes = tuple(a % x.ndim for a in axes)
    if axes == tuple(range(x.ndim)):
        return x
    return Tensor._from(UOp(OP.PERMUTE, x.dtype, (x.uop,), axes))


def matrix_transpose(x, /) -> Tensor:
    return asarray(x).mT


def moveaxis(x, source, destination, /) -> Tensor:
    x = asarray(x)
    src = tuple(_normalize_axis(s, x.ndim, "moveaxis") for s in
                (source if isinstance(source, (tuple, list)) else (source,)))
    dst = tuple(_normalize_axis(s, x.ndim, "moveaxis") for s in
                (destination if isinstance(destination, (tuple, list)) else (destination,)))
    if len(src) != len(dst):
        raise SvodValueError("moveaxis: source and destination must have the same number of elements")
    order = [a for a in range(x.ndim) if a not in src]
    for d_, s_ in sorted(zip(dst, src)):
        order.insert(d_, s_)
    return permute_dims(x, tuple(order))


def expand_dims(x, /, axis=0) -> Tensor:
    x = asarray(x)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    nd = x.ndim + len(axes)
    norm = sorted(_normalize_axis(a, nd, "expand_dims") for a in axes)
    if len(set(norm)) != len(norm):
        raise AxisError(f"expand_dims: repeated axis in {axis}")
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def squeeze(x, /, axis=None) -> Tensor:
    x = asarray(x)
    if axis is None:
        axes = tuple(i for i, s in enumerate(x.shape) if s == 1)
    else:
        axes = _normalize_axes(axis, x.ndim, "squeeze")
        for a in axes:
            if x.shape[a] != 1:
                raise ShapeError(f"squeeze: cannot select axis {a} of shape {shape_str(x.shape)}: size is not 1")
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in axes))


def flip(x, /, *, axis=None) -> Tensor:
    x = asarray(x)
    axes = _normalize_axes(axis, x.ndim, "flip")
    axes = tuple(a for a in axes if x.shape[a] > 1)
    if not axes:
        return x
    return Tensor._from(UOp(OP.FLIP, x.dtype, (x.uop,), axes))


def roll(x, /, shift, *, axis=None) -> Tensor:
    x = asarray(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), x.shape)
    shifts = tuple(shift) if isinstance(shift, (tuple, list)) else (shift,)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    shifts = tuple(_check_int(s, f"shift {shift!r}", "roll") for s in shifts)
    if len(shifts) != len(axes):
        if len(shifts) != 1 and len(axes) != 1:
            raise ShapeError(f"roll: shift {shift!r} and axis {axis!r} must have the same length (or one of them "
                             f"length 1)")
        shifts, axes = shifts * (len(axes) if len(shifts) == 1 else 1), axes * (len(shifts) if len(axes) == 1 else 1)
    out = x
    for s, a in zip(shifts, axes):
        a = _normalize_axis(a, x.ndim, "roll")
        n = x.shape[a]
        if n == 0:
            continue
        s %= n
        if s:
            idx = [slice(None)] * x.ndim
            idx[a] = slice(n - s, None)
            tail = out[tuple(idx)]
            idx[a] = slice(0, n - s)
            out = concat([tail, out[tuple(idx)]], axis=a)
    return out


def pad(x, /, pad_width, mode: str = "constant", constant_values=0) -> Tensor:
    """numpy.pad with mode='constant': `pad_width` is an int, (lo, hi) or one pair per axis."""
    x = asarray(x)
    if mode != "constant":
        raise SvodValueError(f"pad: only mode='constant' is supported, got {mode!r}")
    pw = np.asarray(pad_width)
    if pw.dtype.kind not in "iu":
        raise SvodTypeError(f"pad: pad_width must be integers, got {pad_width!r}")
    try:
        pw = np.broadcast_to(pw, (x.ndim, 2))
    except ValueError as e:
        raise ShapeError(f"pad: pad_width {pad_width!r} does not fit an array of shape {shape_str(x.shape)}") from e
    if (pw < 0).any():
        raise SvodValueError(f"pad: pad widths must be non-negative, got {pad_width!r}")
    pads = tuple((int(a), int(b)) for a, b in pw)
    if builtins.all(p == (0, 0) for p in pads):
        return x
    if dt.scalar_kind(constant_values) is None:
        raise SvodTypeError(f"pad: constant_values must be a scalar, got {constant_values!r}")
    value = np.array(constant_values).astype(x.dtype.np).item()
    return Tensor._from(UOp(OP.PAD, x.dtype, (x.uop,), (pads, value)))


def concat(arrays: Sequence[Tensor], /, *, axis: int | None = 0) -> Tensor:
    if not isinstance(arrays, (list, tuple, Tensor)):
        raise SvodTypeError(f"concat: arrays must be a sequence of arrays, got {type(arrays).__name__}")
    arrays = [asarray(a) for a in arrays]
    if not arrays:
        raise SvodValueError("concat: need at least one array")
    if axis is None:
        arrays = [reshape(a, (-1,)) for a in arrays]
        axis = 0
    nd = arrays[0].ndim
    if nd == 0:
        raise ShapeError("concat: zero-dimensional arrays cannot be concatenated")
    for a in arrays:
        if a.ndim != nd:
            raise ShapeError(f"concat: all arrays must have the same number of dimensions, got shapes "
                             f"{', '.join(shape_str(b.shape) for b in arrays)}")
    ax = _normalize_axis(axis, nd, "concat")
    for a in arrays:
        if builtins.any(a.shape[i] != arrays[0].shape[i] for i in range(nd) if i != ax):
            raise ShapeError(f"concat: shapes {', '.join(shape_str(b.shape) for b in arrays)} differ outside "
                             f"axis {ax}")
    d = dt.result_type(*[a.dtype for a in arrays])
    srcs = tuple(_cast(a.uop, d) for a in arrays if a.shape[ax] > 0)
    if not srcs:
        return full(tuple(0 if i == ax else s for i, s in enumerate(arrays[0].shape)), 0, dtype=d)
    if len(srcs) == 1:
        return Tensor._from(srcs[0])
    return Tensor._from(UOp(OP.CAT, d, srcs, ax))


def stack(arrays: Sequence[Tensor], /, *, axis: int = 0) -> Tensor:
    if not isinstance(arrays, (list, tuple, Tensor)):
        raise SvodTypeError(f"stack: arrays must be a sequence of arrays, got {type(arrays).__name__}")
    arrays = [asarray(a) for a in arrays]
    if not arrays:
        raise SvodValueError("stack: need at least one array")
    shape = arrays[0].shape
    for a in arrays:
        if a.shape != shape:
            raise ShapeError(f"stack: all input arrays must have the same shape, got "
                             f"{', '.join(shape_str(b.shape) for b in arrays)}")
    ax = _normalize_axis(axis, len(shape) + 1, "stack")
    return concat([expand_dims(a, ax) for a in arrays], axis=ax)


def unstack(x, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    x = asarray(x)
    ax = _normalize_axis(axis, x.ndim, "unstack")
    return tuple(x[(slice(None),) * ax + (i,)] for i in range(x.shape[ax]))


def tile(x, repetitions, /) -> Tensor:
    x = asarray(x)
    reps = tuple(repetitions) if isinstance(repetitions, (tuple, list)) else (repetitions,)
    reps = tuple(_check_int(r, f"repetitions {reps!r}", "tile", 0) for r in reps)
    nd = builtins.max(len(reps), x.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    # (a, b) -> (1, a, 1, b) -> (ra, a, rb, b) -> (ra*a, rb*b)
    inter = []
    for s in x.shape:
        inter += [1, s]
    y = reshape(x, tuple(inter))
    full_shape = []
    for r, s in zip(reps, x.shape):
        full_shape += [r, s]
    y = broadcast_to(y, tuple(full_shape))
    return reshape(y, tuple(r * s for r, s in zip(reps, x.shape)))


def repeat(x, repeats: int, /, *, axis=None) -> Tensor:
    x = asarray(x)
    if not isinstance(repeats, (int, np.integer)):
        r = repeats.numpy() if isinstance(repeats, Tensor) else np.asarray(repeats)
        if r.dtype.kind not in "iu":
            raise SvodTypeError(f"repeat: repeats must be integers, got {repeats!r} ({r.dtype})")
        if (r < 0).any():
            raise SvodValueError(f"repeat: repeats must be non-negative, got {r.tolist()!r}")
        if r.ndim == 0:
            repeats = int(r)
        else:  # one count per element: the output's shape depends on them (eager, as nonzero)
            try:
                return _from_numpy(np.repeat(x.numpy(), r, axis=axis), copy=False)
            except ValueError as e:
                raise ShapeError(f"repeat: {e} (array of shape {shape_str(x.shape)}, repeats of shape "
                                 f"{shape_str(r.shape)})") from None
    repeats = _check_int(repeats, "repeats", "repeat", 0)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    a = _normalize_axis(axis, x.ndim, "repeat")
    y = expand_dims(x, a + 1)
    shape = list(y.shape)
    shape[a + 1] = int(repeats)
    y = broadcast_to(y, tuple(shape))
    out = list(x.shape)
    out[a] *= int(repeats)
    return reshape(y, tuple(out))


# ----------------------------------------------------------------------------- matmul


def matmul(a, b, /) -> Tensor:
    """numpy.matmul: batch dims broadcast, 1-D operands promoted and squeezed.

    >>> import svod
    >>> (svod.ones((2, 3)) @ svod.ones((3,))).tolist()
    [3.0, 3.0]
    """
    a, b = asarray(a), asarray(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must be at least 1-D, got shapes {shape_str(a.shape)} and "
                         f"{shape_str(b.shape)}; use * for scalars")
    d = dt.promote_types(a.dtype, b.dtype)
    if d.is_complex:  # four real matmuls (the float GEMM), recombined
        from svod.elementwise import imag, real

        a, b = astype(a, d, copy=False), astype(b, d, copy=False)
        ar, ai, br, bi = real(a), imag(a), real(b), imag(b)
        re, im = subtract(matmul(ar, br), matmul(ai, bi)), add(matmul(ar, bi), matmul(ai, br))
        return Tensor._from(UOp(OP.COMPLEX, d, (re.uop, im.uop)))
    ua, ub = _cast(a.uop, d), _cast(b.uop, d)
    squeeze_a = a.ndim == 1
    squeeze_b = b.ndim == 1
    if squeeze_a:
        ua = UOp(OP.RESHAPE, d, (ua,), (1,) + ua.shape)
    if squeeze_b:
        ub = UOp(OP.RESHAPE, d, (ub,), ub.shape + (1,))
    if ua.shape[-1] != ub.shape[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {shape_str(a.shape)} @ {shape_str(b.shape)} "
                         f"({ua.shape[-1]} != {ub.shape[-2]})")
    try:
        batch = broadcast_shapes(ua.shape[:-2], ub.shape[:-2], op="matmul")
    except ShapeError as e:
        raise ShapeError(f"matmul: batch dimensions of {shape_str(a.shape)} and {shape_str(b.shape)} "
                         f"cannot be broadcast together") from e
    ua = _expand_uop(ua, batch + ua.shape[-2:])
    ub = _expand_uop(ub, batch + ub.shape[-2:])
    out = UOp(OP.MATMUL, d, (ua, ub))
    shape = out.shape
    if squeeze_a:
        shape = shape[:-2] + shape[-1:]
    if squeeze_b:
        shape = shape[:-1]
    if shape != out.shape:
        out = UOp(OP.RESHAPE, d, (out,), shape)
    return Tensor._from(out)


def tensordot(a, b, /, *, axes=2) -> Tensor:
    a, b = asarray(a), asarray(b)
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        n = int(axes)
        if not 0 <= n <= builtins.min(a.ndim, b.ndim):
            raise AxisError(f"tensordot: axes={n} must be between 0 and the dimensions of both operands, "
                            f"shapes {shape_str(a.shape)} and {shape_str(b.shape)}")
        ax_a = tuple(range(a.ndim - n, a.ndim))
        ax_b = tuple(range(n))
    else:
        try:
            sa, sb = axes
            sa = (sa,) if isinstance(sa, (int, np.integer)) else tuple(sa)
            sb = (sb,) if isinstance(sb, (int, np.integer)) else tuple(sb)
        except (TypeError, ValueError):
            raise SvodTypeError(f"tensordot: axes must be an int or a pair of axis sequences, got {axes!r}") from None
        if len(sa) != len(sb):
            raise ShapeError(f"tensordot: axes {axes!r} contract {len(sa)} axes of the first operand (shape "
                             f"{shape_str(a.shape)}) but {len(sb)} of the second (shape {shape_str(b.shape)})")
        ax_a = tuple(_normalize_axis(x, a.ndim, "tensordot") for x in sa)
        ax_b = tuple(_normalize_axis(x, b.ndim, "tensordot") for x in sb)
        if len(set(ax_a)) != len(ax_a) or len(set(ax_b)) != len(ax_b):
            raise AxisError(f"tensordot: repeated axis in {axes!r}")
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise ShapeError(f"tensordot: contracted axes differ in size: {shape_str(a.shape)} and "
                             f"{shape_str(b.shape)} over {ax_a} / {ax_b}")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = _prod(a.shape[i] for i in ax_a)
    am = reshape(permute_dims(a, free_a + list(ax_a)), (_prod(a.shape[i] for i in free_a), k))
    bm = reshape(permute_dims(b, list(ax_b) + free_b), (k, _prod(b.shape[i] for i in free_b)))
    return reshape(matmul(am, bm), tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))


def vecdot(x1, x2, /, *, axis: int = -1) -> Tensor:
    """Dot products along `axis` (a negative axis, counted from the end of both); the other
    axes broadcast, the contracted one must have one size in both; result dtype: the
    operands' promoted dtype. Complex operands: sum(conj(x1) * x2), as the standard says."""
    x1, x2 = asarray(x1), asarray(x2)
    if x1.dtype.is_complex:
        from svod.elementwise import conj

        x1 = conj(x1)
    shape = broadcast_shapes(x1.shape, x2.shape, op="vecdot")
    ax = _normalize_axis(axis, len(shape), "vecdot")
    k = ax - len(shape)  # the same axis counted from the end in both operands
    if -k > builtins.min(x1.ndim, x2.ndim) or x1.shape[k] != x2.shape[k]:
        raise ShapeError(f"vecdot: the contracted axis {axis} differs in size: shapes {shape_str(x1.shape)} and "
                         f"{shape_str(x2.shape)}")
    d = dt.promote_types(x1.dtype, x2.dtype)
    return sum(multiply(x1, x2), axis=ax, dtype=d if not d.is_bool else None)
