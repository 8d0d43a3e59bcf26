"""Eager small work: ops on concrete values with a small result run at once, with numpy.

svod is lazy: an op builds a graph node and a realize plans, compiles and runs the
graph. For the small work a Python loop does between big steps — reading an element,
a row, a dot product of two short vectors, a row write — that costs a plan lookup and a
realize of a growing graph per value, where numpy costs a microsecond. So an op runs
*eagerly* when

* every operand is concrete: realized buffers (and views of them), Python and numpy
  scalars, constants (`svod.zeros(3)`), no pending lazy node bigger than the limit;
* every node it computes — the result, and each operand a computing node reads (the
  input of a reduction or a matmul) — has at most `limit()` elements (default
  `DEFAULT_MAX`, `SVOD_EAGER_MAX`); a view of a big buffer (a row of a big matrix) is
  free and does not count, only what is computed from it;
* eager mode is on here (`limit()`: by default inside `svod.numpy`'s functions and
  methods only — `SVOD_EAGER=auto`; `1` everywhere, `0` nowhere; `svod.eager_mode` for a
  block, per thread) and no `svod.jit` trace runs (a trace is one graph).

The op's node is built as always (its dtype, shape and errors are the lazy path's: one
frontend), then evaluated by svod's reference semantics — the op table's numpy
implementation (`svod.ops`, the interpreter every test compares compiled code with) —
and the tensor is bound to a realized buffer holding the result. So an eager value is
what the lazy path computes, up to the compiled code's documented tolerance (the
interpreter *is* the oracle), with svod's dtype rules exactly (float32 default of
`svod.asarray`, NEP 50 weak scalars), NaN, ±inf and -0.0 as numpy. Large results, and
ops on large pending graphs, stay lazy: fusion of real work is unchanged.

`x[key] = v` on a concrete `x` (svod/indexing.py) writes with numpy: into a copy of a
small `x`, or in place when `x`'s buffer provably has no other owner (`sole_owner`), so
that a row write into a big concrete matrix costs the row. "Other references to the old
value keep it" holds either way (docs/semantics.md, "Eager small work").

The operators of realized float tensors and `matmul` of realized operands call the same
implementations without building the node (svod/methods.py, svod/reductions.py), and
inside `svod.numpy` the common operators and functions call numpy directly
(svod/numpy/_fast.py). Why 65,536 elements: docs/semantics.md ("Eager small work") has
the measurements (lazy realize vs eager vs numpy, by size; the loop programs).

A pending value written by `x[key] = v` is realized by its plan unless its structure
(`structure`: the graph without sizes and offsets) has already made
`PLANS_PER_STRUCTURE` plans: then it runs with numpy (`realize_pending`), so a loop
whose slices shrink on several axes plans a bounded number of times.

>>> import svod, svod.numpy as snp
>>> x = snp.asarray([1.0, 2.0, 3.0])
>>> (x * 2).is_realized, float(x[1])
(True, 2.0)
>>> with svod.eager_mode(False):
...     (x * 2).is_realized
False
>>> with svod.eager_mode(True):  # svod's own namespace too
...     (svod.asarray([1.0, 2.0]) + 1).is_realized
True
"""

from __future__ import annotations

import os
import sys
import threading
import weakref

import numpy as np

from svod import dtype as _dt
from svod import tensor as T
from svod.errors import SvodValueError
from svod.ir import Ops, UOp
from svod.ops import TABLE, ops_where

DEFAULT_MAX = 65536  # elements; the measurement behind it: docs/semantics.md, "Eager small work"
_NODES = 24  # at most this many nodes evaluated for one op (a frontend builds a handful)


def _env() -> tuple[str, int]:
    """The process policy from `SVOD_EAGER` (auto / 1 / 0) and the limit from `SVOD_EAGER_MAX`."""
    on = os.environ.get("SVOD_EAGER", "auto").strip().lower() or "auto"
    policy = {"auto": "auto", "1": "on", "on": "on", "true": "on", "yes": "on",
              "0": "off", "off": "off", "false": "off", "no": "off"}.get(on)
    if policy is None:
        raise SvodValueError(f"SVOD_EAGER must be auto, 1 or 0, got {on!r}")
    raw = os.environ.get("SVOD_EAGER_MAX", "").strip()
    if not raw:
        return policy, DEFAULT_MAX
    try:
        v = int(raw)
    except ValueError:
        v = -1
    if v < 0:
        raise SvodValueError(f"SVOD_EAGER_MAX must be a non-negative integer, got {raw!r}")
    return policy, v


POLICY, _MAX = _env()
class _Local(threading.local):
    """This thread's `eager_mode` limit; None: the process policy. NOTE: a class default,
    not getattr(..., None): a missing attribute of a thread-local costs an exception (~4 µs)."""

    limit: int | None = None


_local = _Local()
_NUMPY_NS = _dt._DEFAULTS  # float64 as the default float: a svod.numpy function or method runs
_F64 = _dt.float64
_AUTO = POLICY == "auto"
_ON = _MAX if POLICY == "on" else 0


def limit() -> int:
    """The largest result (elements) an op may compute eagerly here and now; 0: eager off.

    Inside `eager_mode` that block's setting; else the process policy (`SVOD_EAGER`):
    "auto" (the default) runs small work eagerly inside `svod.numpy`'s functions and
    methods (the numpy-compatible namespace, where numpy programs loop over small
    pieces) and keeps svod's own namespace lazy (its graphs, plans and `svod.explain`
    are what its users build from small examples); "on" everywhere, "off" nowhere."""
    lim = _local.limit
    if lim is not None:
        return lim
    if _AUTO:
        return _MAX if _NUMPY_NS.float_dtype is _F64 else 0
    return _ON


# `numpy_limit()` outside `eager_mode` blocks: the process policy, fixed at import
NUMPY_POLICY_LIMIT = _MAX if _AUTO else _ON


def numpy_limit() -> int:
    """`limit()` inside `svod.numpy`'s functions and methods (numpy's defaults on): the
    fast path of `svod.numpy._fast` asks it before it switches the defaults (inline:
    ``_local.limit``, or `NUMPY_POLICY_LIMIT` when it is None)."""
    lim = _local.limit
    if lim is not None:
        return lim
    return NUMPY_POLICY_LIMIT


class eager_mode:
    """Turn eager small work on or off (and set its size limit) for a block, in this thread.

    ``with svod.eager_mode(False): ...`` keeps every op lazy (to see the plan of a small
    graph with `svod.explain`, or to build one graph of small pieces);
    ``with svod.eager_mode(max_elements=65536): ...`` raises the limit. Also a decorator.
    Nested blocks restore the enclosing setting on exit.
    """

    def __init__(self, enabled: bool = True, *, max_elements: int | None = None):
        if not isinstance(enabled, (bool, np.bool_)):
            raise SvodValueError(f"eager_mode: enabled must be True or False, got {enabled!r}")
        if max_elements is not None and (isinstance(max_elements, bool) or not isinstance(max_elements, int)
                                         or max_elements < 0):
            raise SvodValueError(f"eager_mode: max_elements must be a non-negative int, got {max_elements!r}")
        self.limit = 0 if not enabled else (max_elements if max_elements is not None else (_MAX or DEFAULT_MAX))
        self._saved: list = []

    def __enter__(self) -> eager_mode:
        if self.limit:
            _arm()
        self._saved.append(_local.limit)
        _local.limit = self.limit
        return self

    def __exit__(self, *exc) -> None:
        _local.limit = self._saved.pop()

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with eager_mode(self.limit > 0, max_elements=self.limit or None):
                return fn(*args, **kwargs)

        return wrapped


def disabled() -> eager_mode:
    """`eager_mode(False)`: for code that needs a graph (svod.dask regions, captures)."""
    return eager_mode(False)


# ----------------------------------------------------------------------------- evaluation

_BUFFER, _CONST = Ops.BUFFER, Ops.CONST

try:  # numpy's errors off for one call: numpy 2's errstate is this context variable (what it sets)
    from numpy._core._multiarray_umath import _make_extobj
    from numpy._core._ufunc_config import _extobj_contextvar as _EXTOBJ

    _QUIET = _make_extobj(all="ignore")
except (ImportError, AttributeError, TypeError):  # pragma: no cover - another numpy: the public context
    _EXTOBJ = None


def run(f, vals, npd, arg):
    """`f(vals, npd, arg)` (an op table implementation) with numpy's floating-point errors
    ignored, as the op table's contract says — `np.errstate(all="ignore")`, set directly
    (a third of the cost of building the context object per op)."""
    if _EXTOBJ is None:  # pragma: no cover
        with np.errstate(all="ignore"):
            return f(vals, npd, arg)
    tok = _EXTOBJ.set(_QUIET)
    try:
        return f(vals, npd, arg)
    finally:
        _EXTOBJ.reset(tok)


# numpy views of their source: no work, no size limit (a row of a big matrix is free)
_VIEWS = ops_where(view=True)
_INTERP = {op: info.interp for op, info in TABLE.items() if info.interp is not None}
_stats = {"ops": 0, "lazy_big": 0}


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def evaluate(u: UOp, lim: int) -> np.ndarray | None:
    """The value of `u` when it can run eagerly under `lim` elements (module docstring),
    as a fresh read-only C-contiguous array of `u`'s dtype and shape; else None."""
    memo: dict = {}
    budget = [_NODES]

    def ev(n: UOp):
        v = memo.get(n)
        if v is not None:
            return v
        op = n.op
        if op is _BUFFER:
            v = n.arg.array
        elif op is _CONST:
            v = np.array(n.arg, dtype=n.dtype.np)
        else:
            budget[0] -= 1
            if budget[0] < 0:
                return None
            f = _INTERP.get(op)
            if f is None:
                return None
            if op not in _VIEWS:
                if _size(n.shape) > lim:
                    return None
                for s in n.src:
                    if s.op is not _CONST and _size(s.shape) > lim and not _broadcast(s):
                        return None
            srcs = []
            for s in n.src:
                sv = ev(s)
                if sv is None:
                    return None
                srcs.append(sv)
            v = run(f, srcs, n.dtype.np, n.arg)
        memo[n] = v
        return v

    try:
        v = ev(u)
    except (NotImplementedError, MemoryError):
        return None
    if v is None:
        return None
    arr = np.asarray(v)
    npd = u.dtype.np
    if arr.shape != u.shape:  # never a silent wrong answer: the lazy path decides
        return None
    if arr.dtype != npd or arr.base is not None or not arr.flags.c_contiguous or not arr.flags.owndata \
            or _is_leaf_array(arr, memo):
        arr = np.array(arr, dtype=npd, order="C", copy=True)
    arr.flags.writeable = False
    return arr


def _broadcast(s: UOp) -> bool:
    """`s` is a broadcast of something within the limit (EXPAND of a small value: free)."""
    while s.op is Ops.EXPAND or s.op is Ops.RESHAPE:
        s = s.src[0]
        if s.op is _CONST:
            return True
    return False


def _is_leaf_array(arr, memo) -> bool:
    for n in memo:
        if n.op is _BUFFER and n.arg.array is arr:
            return True
    return False


_ELEMENTWISE = {op: info.interp for op, info in TABLE.items()
                if info.interp is not None and info.kind in ("unary", "binary", "ternary")}
_EXPAND, _RESHAPE = Ops.EXPAND, Ops.RESHAPE


def _direct(u: UOp):
    """The common case fast: an elementwise node whose operands are buffers or broadcast
    constants (`x * 2.0`, `a + b`); a constant enters as its 0-d value (numpy broadcasts it
    as the EXPAND would). None when `u` is not that case."""
    f = _ELEMENTWISE.get(u.op)
    if f is None:
        return None
    vals = []
    for s in u.src:
        op = s.op
        if op is _BUFFER:
            vals.append(s.arg.array)
            continue
        if op is _EXPAND:  # a broadcast: numpy's broadcasting of the source does the same
            s = s.src[0]
            op = s.op
            shape = s.shape
            while op is _RESHAPE:
                s = s.src[0]
                op = s.op
            if op is _CONST:
                vals.append(np.array(s.arg, dtype=s.dtype.np))
            elif op is _BUFFER:
                a = s.arg.array
                vals.append(a.reshape(()) if a.size == 1 else a.reshape(shape))  # (`v / x[i, i]`, `a[:, None] * b`)
            else:
                return None
            continue
        while op is _RESHAPE:
            s = s.src[0]
            op = s.op
        if op is not _CONST:
            return None
        vals.append(np.array(s.arg, dtype=s.dtype.np))
    v = run(f, vals, u.dtype.np, u.arg)
    arr = np.asarray(v)
    if arr.shape != u.shape or arr.dtype != u.dtype.np:
        return None  # (operands all constants, or an implementation that needs the full shapes)
    if arr.base is not None or not arr.flags.owndata or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C", copy=True)
    else:
        for a in vals:
            if a is arr:
                arr = np.array(arr, order="C", copy=True)
                break
    arr.flags.writeable = False
    return arr


def try_eager(u: UOp) -> UOp | None:
    """`svod.tensor`'s hook for every new node: a realized BUFFER with `u`'s value when `u`
    runs eagerly, else None (the node stays lazy)."""
    lim = _local.limit
    if lim is None:  # `limit()`, inlined: this runs for every node svod builds
        lim = (_MAX if _NUMPY_NS.float_dtype is _F64 else 0) if _AUTO else _ON
    if not lim or T._READ_HOOK is not None:
        return None
    n = 1
    for d in u.shape:
        n *= d
    if n > lim:
        return None
    arr = _direct(u)
    if arr is None:
        arr = evaluate(u, lim)
    if arr is None:
        _stats["lazy_big"] += 1
        return None
    _stats["ops"] += 1
    return UOp.buffer(arr, u.dtype)


def concrete(t) -> np.ndarray | None:
    """The array of a realized tensor (read-only), else None."""
    u = t.uop
    return u.arg.array if u.op is _BUFFER else None


# ----------------------------------------------------------------------------- fresh nodes

# (svod.numpy's fast path makes them; `sole_owner` / `write_in_place` below know both states)

_new_obj = object.__new__
_FRESH_LOCK = threading.Lock()


class FreshLeaf(UOp):
    """A `Fresh` node since materialized: a plain realized leaf (every UOp slot set; `_a`
    is None). Its own class so that a `Fresh` can become one (`__class__` assignment needs
    the same slots)."""

    __slots__ = ("_a",)
    op = _BUFFER  # NOTE: a class attribute over UOp's slot: every fresh node is a BUFFER (one store less per op)


_UOP_SLOTS = {name: UOp.__dict__[name] for name in ("arg", "src", "_sig", "_leaves", "_hash", "_kb", "_depth", "shape")}


def _materialize(node) -> None:
    """Fill `node`'s UOp slots with what `UOp.buffer` makes of its value and make it a
    `FreshLeaf` (nothing when another thread did first)."""
    with _FRESH_LOCK:  # NOTE: two threads must not give one node two BufferRefs
        if type(node) is not Fresh:
            return
        a = node._a
        if type(a) is not np.ndarray:  # a numpy scalar: a 0-d value read from an array
            a = np.array(a)
        elif a.base is not None:  # a view of another array's memory (`x[key]`): its own copy
            a = np.array(a, order="C")
        n = UOp.buffer(a, node.dtype)
        a.setflags(write=False)  # (a realized buffer is read-only; `UOp.buffer`'s callers set it)
        for name, slot in _UOP_SLOTS.items():
            slot.__set__(node, getattr(n, name))
        node._a = None
        node.__class__ = FreshLeaf


def _lazy_slot(name: str) -> property:
    get = _UOP_SLOTS[name].__get__

    def read(self):
        _materialize(self)
        return get(self)

    read.__name__ = name
    return property(read, doc=f"UOp's `{name}` (the first read materializes the node)")


def _shape(self):
    a = self._a
    if a is not None:
        return a.shape
    return _UOP_SLOTS["shape"].__get__(self)  # (materialized by another thread meanwhile)


class Fresh(FreshLeaf):
    """A realized leaf (op BUFFER) made on the fast path, whose BufferRef is built when
    something reads it.

    `UOp.buffer(arr, dtype)` — two objects, a serial, a signature lookup, the read-only flag
    set on `arr` — costs more than numpy's own op on a 30-element row (~0.8 µs against
    ~0.5). `svod.numpy`'s fast path (svod/numpy/_fast.py) makes one per op, and most of
    those values are read by the next fast op and dropped. `fresh(arr, dtype)` makes a
    `Fresh` node instead: a `UOp` of op BUFFER (a class attribute) whose `dtype` and `_a`
    (the value) are set, whose `shape` reads `_a`'s, and whose other slots (`arg`, `src`,
    `_sig`, `_leaves`, `_hash`, `_kb`, `_depth`) are properties that fill UOp's slots with
    what `UOp.buffer` makes on the first read of any of them ("materialized") and turn the
    node into a `FreshLeaf` (same slots, no properties: a plain realized leaf whose `_a` is
    None). NOTE: properties, not `__getattr__`: a class with `__getattr__` has no
    specialized attribute reads, and the fast path reads `_a` and `dtype` of every operand.
    So

    * every reader of a tensor's `.uop` sees a correct realized node: reading `u.arg`,
      `u.src`, `u._sig` ... of a `Fresh` returns what `UOp.buffer(arr, dtype)` would have;
      `isinstance(u, UOp)`, identity equality and hashing are a UOp's;
    * before materialization the fast path reads the array from the `_a` slot (`array_of`),
      and nothing else can reach it: no BufferRef exists, so nothing can be keyed by one. A
      0-d value may be held as a numpy scalar of the node's numpy dtype (an element read
      `A[i, j]`, a 0-d result): numpy's functions take it as the 0-d array it stands for, and
      materialization makes it one;
    * invariant: while the node is a `Fresh` (not materialized), `_a` is either a fresh array that
      owns its memory, held only by this node (and transient locals of the fast path; it
      may be writeable), or a view of another array's memory (`x[key]` on the fast path:
      `a.base` is not None), which nothing writes while the view lives (every in-place
      write needs `sole_owner`, and the view holds a reference to the array owning its
      memory). Materialization copies a view into its own C-ordered memory (so a plan sees
      the buffer a copy made before: same strides, nothing else kept alive), sets the
      array read-only (as `UOp.buffer`'s arrays are), sets `_a` to None and makes the node
      a `FreshLeaf`.

    `sole_owner` / `write_in_place` know both states: an unmaterialized node is
    written in place when nothing but its tensor holds the node and the array (reference
    counts, as for a materialized one), and its tensor is rebound to a new `Fresh` node.
    """

    __slots__ = ()
    arg, src, _sig, _leaves = _lazy_slot("arg"), _lazy_slot("src"), _lazy_slot("_sig"), _lazy_slot("_leaves")
    _hash, _kb, _depth = _lazy_slot("_hash"), _lazy_slot("_kb"), _lazy_slot("_depth")
    shape = property(_shape, doc="The value's shape (no materialization)")


def fresh(arr: np.ndarray, dtype) -> Fresh:
    """An unmaterialized realized leaf over `arr` (a fresh array of `dtype`'s numpy dtype
    that owns its memory and that nothing else holds, or a numpy scalar of that dtype) of
    svod dtype `dtype`."""
    n = _new_obj(Fresh)
    n.dtype = dtype
    n._a = arr
    return n


def array_of(u) -> np.ndarray | None:
    """The array of realized node `u` (without materializing a `Fresh`: its array or its
    0-d value's numpy scalar), else None."""
    if type(u) is Fresh:
        a = u._a
        return a if a is not None else u.arg.array
    if u.op is _BUFFER:
        return u.arg.array
    return None


# ----------------------------------------------------------------------------- ownership

def sole_owner(t) -> bool:
    """Whether `t`'s buffer provably has no other holder, so writing it in place changes no
    other value: `t` is realized, its buffer owns its memory (not the caller's numpy array
    passed with `copy=False`, not a view), and nothing else refers to its node, its
    BufferRef or its array — no other tensor, pending graph, replay binding, exported
    `.numpy()` view or jit constant (each of those holds a reference: CPython's reference
    counts say so, as numpy's temporary elision uses them). An unmaterialized
    `svod.eager.Fresh` node has no BufferRef yet and its array is fresh (`svod.eager.Fresh`):
    the node and the array are counted."""
    u = t.uop
    if type(u) is Fresh:
        arr = u._a
        if arr is not None:
            # the node: t.uop and `u`; the array: node._a and `arr`
            rc = sys.getrefcount
            return type(arr) is np.ndarray and rc(u) <= _BASE_FU and rc(arr) <= _BASE_FA and arr.base is None
    if u.op is not _BUFFER:
        return False
    ref = u.arg
    arr = ref.array
    if arr.base is not None or not arr.flags.owndata or not arr.flags.c_contiguous:
        return False
    # references expected when nothing else holds them (each count includes getrefcount's own
    # argument): the node: t.uop and `u`; the BufferRef: node.arg, node._leaves, `ref`; the
    # array: ref.array and `arr`.
    rc = sys.getrefcount
    return rc(u) <= _BASE_U and rc(ref) <= _BASE_REF and rc(arr) <= _BASE_ARR


def _calibrate() -> tuple[int, int, int]:
    """The reference counts `sole_owner` sees for a tensor nobody else holds (measured once
    at import on this interpreter, so the check follows CPython's own counting)."""
    t = T.Tensor._from(UOp.buffer(np.zeros(2), _dt.float64))
    u = t.uop
    ref = u.arg
    arr = ref.array
    out = sys.getrefcount(u), sys.getrefcount(ref), sys.getrefcount(arr)
    del u, ref, arr
    t = T.Tensor._from(fresh(np.zeros(2), _dt.float64))
    u = t.uop
    arr = u._a
    out += sys.getrefcount(u), sys.getrefcount(arr)
    del u, arr
    return out


_BASE_U, _BASE_REF, _BASE_ARR, _BASE_FU, _BASE_FA = _calibrate()


# views of realized arrays held by unmaterialized `Fresh` nodes (svod.numpy's `x[key]`):
# id(array owning the memory) -> weak references to those nodes
_views: dict = {}
_VIEWS_MAX = 1024  # owners remembered before the dead entries are dropped
_views_limit = _VIEWS_MAX
_weak = weakref.ref


def note_view(owner: np.ndarray, node: Fresh) -> None:
    """Record that unmaterialized node `node` holds a view of `owner`'s memory (`owner`:
    the view's `base`), so that a later write of `owner`'s tensor can give the node its
    own copy instead of copying `owner` (`detach_views`)."""
    global _views_limit
    refs = _views.get(id(owner))
    if refs is None:
        if len(_views) >= _views_limit:
            for k in [k for k, rs in _views.items() if all(r() is None for r in rs)]:
                del _views[k]
            # (many owners with live views: the next sweep after twice as many, so that
            # recording stays O(1) amortized)
            _views_limit = max(_VIEWS_MAX, 2 * len(_views))
        _views[id(owner)] = [_weak(node)]
        return
    if len(refs) >= 8:
        refs[:] = [r for r in refs if r() is not None]
    refs.append(_weak(node))


def detach_views(t) -> bool:
    """Give every unmaterialized node that holds a view of realized tensor `t`'s array
    (`note_view`) a C-ordered copy of its own: the same value, no longer `t`'s memory, so
    that `sole_owner(t)` can hold again and a write of `t` goes in place instead of into
    a copy of all of `t` (a loop that keeps a row while it writes others). Whether there
    was any. Safe whatever else holds a view: `sole_owner` still counts every reference
    (a view in a local, an exported array) after this."""
    u = t.uop
    arr = array_of(u)
    if arr is None or type(arr) is not np.ndarray:
        return False
    refs = _views.pop(id(arr), None)
    if not refs:
        return False
    with _FRESH_LOCK:  # (materialization replaces `_a` under it too)
        for r in refs:
            n = r()
            if n is not None:
                a = n._a
                if a is not None and a.base is arr:
                    n._a = np.array(a, order="C")
    return True


def write_in_place(t, key, value) -> None:
    """Write `value` (a numpy array or scalar of `t`'s dtype) at `key` of `t`'s buffer,
    which `sole_owner(t)` allows, and rebind `t` to a fresh node over it (a new BufferRef:
    anything keyed by the old one sees it die, never a changed value). The new node is an
    unmaterialized `svod.eager.Fresh` (its array stays writeable until something reads
    its BufferRef: the next write of a loop costs the write)."""
    u = t.uop
    arr = u._a if type(u) is Fresh else None
    if arr is None:  # a materialized node: sole_owner proved its BufferRef and array have no other holder
        arr = u.arg.array
        arr.setflags(write=True)  # (setflags: `arr.flags.writeable = ...` builds a flags object per call)
        try:
            arr[key] = value
        except BaseException:
            arr.setflags(write=False)
            raise
    else:
        arr[key] = value
    t.uop = fresh(arr, u.dtype)


# ----------------------------------------------------------------------------- plans per structure

def _env_plans() -> int:
    raw = os.environ.get("SVOD_EAGER_PLANS", "").strip()
    try:
        v = int(raw) if raw else 4
    except ValueError:
        v = -1
    if v < 0:
        raise SvodValueError(f"SVOD_EAGER_PLANS must be a non-negative integer, got {raw!r}")
    return v


# A small pending graph whose structure (the graph without its sizes and offsets) has made
# this many new plans (a search, a greedy plan or a compile) is computed with numpy from then on, whatever
# its size: torch.compile's recompile limit, past which new sizes run eagerly. 0: never.
PLANS_PER_STRUCTURE = _env_plans()
_SIZED = ops_where(sized=True)  # args that are sizes or offsets
_planned: dict = {}  # structure -> realizes of it that made a plan (searched, planned greedily or compiled)
_PLANNING = ("searches", "searches_skipped", "kernels_compiled")
_PLANNED_MAX = 4096  # structures remembered (oldest dropped first)
_stats["structure_fallbacks"] = 0


def structure(u: UOp) -> tuple | None:
    """The structure of `u`'s graph — ops, dtypes, wiring, the args that are not sizes or
    offsets, leaves by dtype and rank — or None when it has more than `_NODES` nodes.
    Two iterations of a loop over shrinking slices (`a[k + 1:, k + 1:] - outer(...)`)
    have one structure and different shapes."""
    index: dict = {}
    parts: list = []

    def walk(n: UOp) -> int | None:
        i = index.get(n)
        if i is not None:
            return i
        if len(index) >= _NODES:
            return None
        srcs = []
        for s in n.src:
            j = walk(s)
            if j is None:
                return None
            srcs.append(j)
        op = n.op
        # a leaf's or a view's sizes and offsets: only the rank; any other argument whole
        arg = len(n.shape) if op is _BUFFER or op in _SIZED else repr(n.arg)
        i = index[n] = len(parts)
        parts.append((op, n.dtype, arg, tuple(srcs)))
        return i

    try:
        return tuple(parts) if walk(u) is not None else None
    finally:
        walk = None  # NOTE: a recursive closure is a reference cycle: it held the graph's nodes until a gc pass


def realize_pending(t) -> None:
    """Realize the pending tensor `t` (a value written by `x[key] = t` with eager work on):
    by its plan, as always — unless its structure has already made `PLANS_PER_STRUCTURE`
    new plans here: then with numpy (`evaluate`, no size limit), the way numpy runs it. So
    a loop whose slices shrink on several axes (LU's trailing update, Cholesky's column)
    plans a bounded number of times, not once per iteration; steady calls replay the
    plans made and run the other sizes at numpy's speed. Counted in `stats()` as
    "structure_fallbacks"."""
    u = t.uop
    if not PLANS_PER_STRUCTURE or T._READ_HOOK is not None:
        t.realize()
        return
    key = structure(u)
    if key is not None and _planned.get(key, 0) >= PLANS_PER_STRUCTURE:
        arr = evaluate(u, sys.maxsize)
        if arr is not None:
            _stats["structure_fallbacks"] += 1
            t.uop = UOp.buffer(arr, u.dtype)
            T._realized(t)
            return
    from svod.stats import stats as _counters

    before = _counters()
    t.realize()
    if key is not None:
        after = _counters()
        if any(after[k] > before[k] for k in _PLANNING):
            if key not in _planned and len(_planned) >= _PLANNED_MAX:
                _planned.pop(next(iter(_planned)), None)  # the oldest structure: bounded memory
            _planned[key] = _planned.get(key, 0) + 1


def stats() -> dict:
    """Counts of ops that ran eagerly and of small ops left lazy (a pending or big operand)."""
    return dict(_stats)


__all__ = ["DEFAULT_MAX", "concrete", "detach_views", "disabled", "eager_mode", "evaluate", "limit", "note_view",
           "numpy_limit", "realize_pending", "sole_owner", "stats", "structure", "try_eager", "write_in_place"]

def _arm() -> None:
    """Make every new node ask `try_eager` from now on (`svod.tensor._EAGER`). Until some
    thread can run eager work — the "on" policy, an `eager_mode` block with a limit, or
    (the "auto" policy) a first `svod.numpy` call under numpy's defaults — `try_eager`
    would answer None for every node, so the tensor layer skips the call (~0.13 µs a
    node: a fifth of a lazy op). Armed once, never disarmed: the check is cheap to keep
    and a disarm could race with another thread's block."""
    T._EAGER = try_eager
    _dt._ON_FIRST_NUMPY_DEFAULTS = None


if _ON:  # the "on" policy: eager work anywhere, from the start
    _arm()
elif _AUTO and _MAX:  # "auto": from the first time a thread runs under numpy's defaults
    _dt._ON_FIRST_NUMPY_DEFAULTS = _arm
