"""The lazy `Tensor`: the class, its registry of live tensors, realization, construction.

Nothing is computed until a value is needed (`.numpy()`, `float(t)`, `print`, ...);
then `svod.realize` hands the pending graph to the engine through one call site
(`_realize_uops` -> `_engine_realize`, the hook `svod.engine` sets when it is imported:
`import svod` imports it, so the tensor layer never imports the engine). A registry of live tensors (weak refs)
lets each realize rebind every tensor that referenced a realized node, so a value is
never computed twice (seed 000).

Layering (no import cycles). This module is the bottom of the tensor layer: it imports
no frontend, only `svod.dtype`, `svod.errors`, `svod.ir` and `svod.shapes`. It holds
the class with the methods that need nothing above it (attributes, realization,
conversion to Python and numpy values, `astype`, `copy`), construction (`asarray`),
the casting and broadcasting primitives every op uses (`_cast`, `_expand_uop`, `_const`)
and the argument checks. The function modules build on it, in this order:

    tensor  <-  creation  <-  elementwise  <-  movement  <-  reductions  <-  frontends
    (indexing, nn, linalg, fft, sorting, ..., svod.numpy)  <-  svod.methods  <-  svod

Every method that delegates to a function module (the operators, `x[i]`, `x.sum()`,
`x.T`, numpy's protocols, ...) is attached to `Tensor` (and the weak-scalar operators
to `WeakScalar`) in one place, `svod/methods.py`, which `svod/__init__.py` imports: a
`Tensor` has its full API whenever `svod` is imported (importing any `svod.*` module
imports the package first).

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
import sys
import weakref
from collections.abc import Iterable

import numpy as np

from svod import dtype as dt
from svod.dtype import DType, DTypeError
from svod.errors import AxisError, ShapeError, SvodOverflowError, SvodTypeError, SvodValueError
from svod.ir import _NODE_CACHE, OP, UOp, _canon, check_size, shape_str, substitute
from svod.ir import ints_node as _ints_node
from svod.ir import make_node as _make_node
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
# death callback) only when a realize finds them alive (`_flush`): an op pays one list
# append, not a registration and an unregistration (docs/semantics.md, "The tensor layer").
_pending: list = []
_PENDING_MAX = 4096  # flush early past this many (bounds the list between realizes)
_weak, _new, _BUFFER = weakref.ref, object.__new__, OP.BUFFER
_RESHAPE, _EXPAND = OP.RESHAPE, OP.EXPAND


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
        refs = _sharing(t.uop._leaves)
        half = PENDING_DEPTH // 2
        others = []
        for ref in refs:
            o = ref()
            if o is not None and o is not t and o.uop._depth > half and o.uop.op is not _BUFFER:
                others.append(o)
        realize(t, *others)
    finally:
        _cutting = False


def _sharing(leaves, unindexed: bool = False) -> list:
    """The live refs whose graphs contain one of `leaves` (every live ref when `leaves` is
    None); with `unindexed`, also those of graphs without a leaf list."""
    if leaves is None:
        return list(_live.values())
    cands: dict = {}
    for leaf in (*leaves, None) if unindexed else leaves:
        g = _by_leaf.get(leaf)
        if g:
            cands.update(g)
    return list(cands.values())


def _flush() -> None:
    global _pending
    batch, _pending = _pending, []  # NOTE: a note racing this swap is lost: a missed rebind, never a result
    for w in batch:
        t = w()
        if t is not None and t.uop.op is not _BUFFER:
            _register(t)


def _register(t: Tensor) -> None:
    if t.uop.op is OP.BUFFER:  # rebound to a realized value (an eager update): nothing to rebind later
        _realized(t)
        return
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
    if None not in _by_leaf:  # often nothing to rebind: no live tensor's graph holds a root's leaf
        for r in mapping:
            leaves = r._leaves
            if not leaves:  # a constant graph (or a very wide one): the general path
                break
            for leaf in leaves:
                if leaf in _by_leaf:
                    break
            else:
                continue
            break
        else:  # (a graph holding a root holds that root's leaves)
            return
    memo: dict[UOp, UOp] | None = None
    root_leaves: set | None = set()
    shallow = None  # the least depth of a root: a graph no deeper holds none (unless it is one)
    for r in mapping:
        if shallow is None or r._depth < shallow:
            shallow = r._depth
        if root_leaves is not None:
            if not r._leaves:  # a constant graph (or a very wide one): any tensor may hold it
                root_leaves = None
            else:
                root_leaves.update(r._leaves)
    refs = _sharing(root_leaves, unindexed=True)
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
        elif u._depth <= shallow:  # (a node holding a root is deeper than it: no walk)
            continue
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
_engine_realize = None  # svod.engine.realize_uops: the engine sets it when imported (`import svod` does)
# svod.eager.try_eager once some thread can run eager small work (svod.eager._arm: the "on"
# policy, an `eager_mode` block, svod.numpy's first call under the "auto" policy), else None:
# a realized node with the value of a new node that may run eagerly (small, over concrete
# values), else None.
_EAGER = None


def _realize_one(t: Tensor) -> None:
    """`realize(t)` for one tensor, without its loops: compute `t`, rebind it and every
    live tensor that contains its node."""
    u = t.uop
    if u.op is _BUFFER:
        if _READ_HOOK is not None:  # a traced input read directly (svod.jit: a guard or an error)
            _READ_HOOK((u,))
        return
    f = _engine_realize
    if _READ_HOOK is not None or f is None:
        mapping = _realize_uops((u,))
    else:  # `_realize_uops`, inlined
        mapping = f((u,))
    nu = mapping.get(u)
    if nu is not None:
        t.uop = nu
        if _live:  # `_realized(t)`: a tensor that was never flushed is not registered
            _realized(t)
    if mapping:
        _apply_becomes(mapping)


def _realize_uops(roots):
    hook = _READ_HOOK
    if hook is not None:
        roots = hook(roots)
        if not roots:
            return {}
    f = _engine_realize
    if f is None:
        raise RuntimeError("svod.tensor: no realizer is registered (import svod, whose engine registers it, "
                           "before computing a value)")
    return f(roots)


def realize(*tensors: Tensor) -> tuple[Tensor, ...]:
    """Compute several tensors in one plan (shared producers once, sibling fusion).

    >>> import svod
    >>> a = svod.arange(4) * 2
    >>> b, c = svod.realize(a + 1, a - 1)
    >>> b.tolist(), c.tolist()
    ([1, 3, 5, 7], [-1, 1, 3, 5])
    """
    if len(tensors) == 1 and isinstance(tensors[0], Tensor):  # one tensor: its method (the same steps)
        _realize_one(tensors[0])
        return tensors
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
        """A Tensor of node `u` (the one constructor of every op's result): a small node
        over concrete values runs now when eager small work is on (svod.eager); a lazy one
        is noted for rebinding (`_note`) and cut at the pending-depth budget. `_node1` and
        `_node2` are this with the node's hash-consing lookup inlined (keep them in step)."""
        t = _new(Tensor)
        if u.op is not _BUFFER and _EAGER is not None:  # small work on concrete values runs now (svod.eager)
            e = _EAGER(u)
            if e is not None:
                u = e
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
        return self.uop.shape  # (the setter, ``x.shape = ...``: svod/methods.py)

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
    def is_realized(self) -> bool:
        return self.uop.op is OP.BUFFER

    def __hash__(self) -> int:
        return id(self)

    # --- realization and conversion
    def realize(self) -> Tensor:
        _realize_one(self)
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
        return sys.modules["svod"]  # the package: always loaded before any of its modules (no import here)

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
        u = self.uop
        if u.op is _BUFFER and _READ_HOOK is None and u.arg.array.size == 1:  # a realized value: read it
            return u.arg.array.item()
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

    def contiguous(self) -> Tensor:
        return Tensor._from(UOp(OP.CONTIGUOUS, self.dtype, (self.uop,)))

    def copy(self, order="C") -> Tensor:
        """A new tensor with this value (lazy; later updates of either leave the other)."""
        return Tensor._from(UOp(OP.CONTIGUOUS, self.dtype, (self.uop,)))

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def to_device(self, device, /, *, stream=None) -> Tensor:
        if device != "cpu":
            raise SvodValueError(f"to_device: svod runs on 'cpu', not {device!r}")
        return self

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)  # kDLCPU


# ----------------------------------------------------------------------------- traced Python scalars

_KIND_VALUE = {"b": False, "i": 0, "f": 0.0, "c": 0j}  # a Python scalar of each kind (for dtype promotion)
# Set by svod.tracing while a trace runs: called when a traced Python int is cast to a
# narrower integer dtype; checks the value fits (OverflowError, as outside the jit) and
# guards its range.
_WEAK_RANGE_HOOK = None


_from = Tensor._from  # (a module global: one lookup less on the per-op paths)


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


# ----------------------------------------------------------------------------- construction


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
    expressions are the commonest operands and building the chain costs three nodes.
    The memo's key: a nonzero, non-NaN Python float as it is (the hot case: `x * 1.5`;
    no other key is a bare float, and equal such floats are one constant), any other
    value by `_canon` (1 apart from 1.0 and True, -0.0 from 0.0, NaNs equal)."""
    ck = (value, dtype, shape) if type(value) is float and value == value and value != 0.0 else \
        (_canon(value), dtype, shape)
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


def _node1(op, dtype: DType, u: UOp) -> Tensor:
    """`Tensor._from(UOp(op, dtype, (u,)))` for an op without arg, the node found by its
    hash-consing key first (the frontends' per-op hot path: an expression rebuilt over
    the same inputs is a lookup per op, and a type call with its `__new__` costs more
    than the lookup). Same node, same Tensor, same eager and depth handling: `_from`'s
    body inline (keep the three in step)."""
    src = (u,)
    key = (op, dtype, src, None)
    ref = _NODE_CACHE.get(key)
    n = ref() if ref is not None else None
    if n is None:  # a new node: `UOp.__new__`'s miss path without the type call and a second lookup
        n = _make_node(UOp, op, dtype, src, None, None, key)
    if _EAGER is not None:  # (`n` is never a BUFFER: a computed node)
        e = _EAGER(n)
        if e is not None:
            return _from(e)
    t = _new(Tensor)
    t.uop = n
    _pending.append(_weak(t))
    if len(_pending) > _PENDING_MAX:
        _flush()
    if n._depth > PENDING_DEPTH > 0:
        _cut(t)
    return t


def _node2(op, dtype: DType, a: UOp, b: UOp) -> Tensor:
    """`Tensor._from(UOp(op, dtype, (a, b)))` for an op without arg (`_node1`'s lookup and
    `_from`'s body inline)."""
    src = (a, b)
    key = (op, dtype, src, None)
    ref = _NODE_CACHE.get(key)
    n = ref() if ref is not None else None
    if n is None:  # (as in `_node1`)
        n = _make_node(UOp, op, dtype, src, None, None, key)
    if _EAGER is not None:
        e = _EAGER(n)
        if e is not None:
            return _from(e)
    t = _new(Tensor)
    t.uop = n
    _pending.append(_weak(t))
    if len(_pending) > _PENDING_MAX:
        _flush()
    if n._depth > PENDING_DEPTH > 0:
        _cut(t)
    return t

# ----------------------------------------------------------------------------- casting & broadcasting


def astype(x: Tensor, dtype, /, *, copy: bool = True, device=None) -> Tensor:
    """Cast to `dtype`. A complex value cast to a real dtype keeps its real part (numpy's
    result, without its ComplexWarning); to bool it is True unless both parts are 0."""
    x = asarray(x)
    d = dt.dtype(dtype)
    if d == x.dtype:
        return x if not copy else Tensor._from(x.uop)
    if x.dtype.is_complex and not d.is_complex:
        if d.is_bool:  # `not_equal(x, 0)`: the same node, built here (elementwise is above this module)
            return Tensor._from(UOp(OP.CMPNE, dt.bool_, (x.uop, _const(0, x.dtype, x.shape))))
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
    """`u` broadcast to `shape` (a tuple of ints `u.shape` broadcasts to): leading 1s by a
    RESHAPE, then an EXPAND; each node found by its hash-consing key first (`ints_node`)."""
    s = u.shape
    if s == shape:
        return u
    k = len(shape) - len(s)
    if k > 0:
        s = (1,) * k + s
        u = _ints_node(_RESHAPE, u.dtype, u, s)
    if s != shape:
        u = _ints_node(_EXPAND, u.dtype, u, shape)
    return u


def result_type(*arrays_and_dtypes) -> DType:
    return dt.result_type(*[a.dtype if isinstance(a, Tensor) else a for a in arrays_and_dtypes])
