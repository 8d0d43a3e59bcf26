"""The fast path of `svod.numpy` for small realized operands: numpy called directly.

A numpy program run on `svod.numpy` loops over small pieces — `a[i, 1:-1]`, `row / d`,
`x[i] = ...`, `np.dot(u, v)` — and eager small work (`svod.eager`) already computes
each such op at once with numpy. What it still paid per op was svod's Python: the
namespace wrapper that switches numpy's dtype defaults on and off, the frontend's
promotion and broadcasting, a graph node for the op, then its evaluation (~5–10 µs,
numpy's own op ~0.3–1 µs). This module puts a thin path in front of the most common
`ndarray` operators and `svod.numpy` functions:

* **When.** Every operand is a realized svod array (or a Python float, a Python int of
  at most 2⁵³ in magnitude with a float or complex array, a Python complex), the key of
  an index is made of Python ints and slices, eager small work is on here
  (`svod.eager.numpy_limit`) and no `svod.jit` trace runs, and the result has at most
  the eager limit's elements. Anything else — and the first time a combination of op,
  operand dtypes and Python-scalar kinds is met — takes the full path (the wrapped
  method or function), which computes the value (eagerly when it may) and raises svod's
  errors.
* **Dtypes are svod's.** The result dtype of (op, operand dtypes, scalar kinds) comes
  from a memo that the full path fills: the first call of each combination runs the full
  path and records the dtype of its eagerly computed result; later calls run numpy's
  function and keep its result only when numpy's dtype is that recorded dtype (else the
  combination is marked slow for good). So NEP 50, svod's casting rules and svod's
  errors hold exactly; numpy's dtype rules are never trusted blind.
* **Values are the op table's.** Only ops whose `svod.ops` implementation is the numpy
  function called here are on the path (`+ - * /`, comparisons, unary minus,
  `maximum`/`minimum`, `sqrt`, `exp`, `log`, `sin`, `cos`, `tanh`, `abs`, `floor`,
  `ceil`, `@`/`dot`/`matmul` of at most 2-D operands of one dtype (`np.matmul`),
  `outer`, `sum` over all axes), with numpy's floating-point warnings off as in svod's
  compiled code. NaN, ±inf and -0.0 are numpy's.
* **Results** are fresh arrays bound to an unmaterialized realized node
  (`svod.eager.Fresh`: its BufferRef, signature and read-only flag are built when
  something reads them — every reader of `.uop` sees `UOp.buffer`'s node); fast ops read
  the array directly. A 0-d result is the numpy scalar numpy returns, itself (an element
  `A[i, j]`, a dot product of two vectors, a sum; `_ndarray.scalar_of` makes the full
  path's 0-d results the same, so the type never depends on which path ran): its
  arithmetic with other scalars is numpy's own. numpy scalars are operands here too
  (strong, of their dtype: `row / A[i, i]`, `A[i, j] = s`, `np.sqrt(s)`; on the left of an
  operator numpy hands the call to `ndarray.__array_ufunc__`, which runs the ufunc's fast
  path). A ufunc of scalars only is numpy's call in the caller's error state. A basic
  index is a view or a copy (`_getitem`). `x[key] = v` of a realized `x` writes in place
  when `svod.eager.sole_owner` allows, else into a copy — `svod.indexing`'s eager write,
  without the frontend.
* **Error state.** numpy's floating-point errors are silenced (svod's compiled code never
  warns) around every op of a svod array that could raise a flag; ops that cannot
  (`_noisy`: integer arithmetic without division, comparisons of real floats — probed at
  import) skip it.

`stats()` counts the calls that took this path; tests/test_numpy_fast.py compares every
path with numpy (dtypes, NaN/inf/-0.0, aliasing, in-place writes) and checks that the
path is taken; tests/test_numpy_scalars.py checks the scalars against numpy's.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import operator
import threading

import numpy as np

import svod.tensor as _T
from svod import dtype as _dt
from svod import eager as _eager
from svod.ir import Ops
from svod.numpy._ndarray import scalar_of as _scalar_of

__all__ = ["install", "stats"]

_BUFFER = Ops.BUFFER
_Fresh = _eager.Fresh
_fresh = _eager.fresh
_array = _eager.array_of  # the array (or a 0-d value's numpy scalar) of a realized node, else None
_new = object.__new__
_limit = _eager.numpy_limit
_local = _eager._local  # NOTE: `numpy_limit()` inline in the hot paths: `_local.limit`, else `_POLICY`
_POLICY = _eager.NUMPY_POLICY_LIMIT
_sole_owner = _eager.sole_owner
_detach_views, _note_view = _eager.detach_views, _eager.note_view
_rc = __import__("sys").getrefcount
_BASE_FU, _BASE_FA = _eager._BASE_FU, _eager._BASE_FA
_live = _T._live  # (tensors noted pending: a written tensor leaves it, `svod.tensor._realized`)
_EXTOBJ, _QUIET = _eager._EXTOBJ, getattr(_eager, "_QUIET", None)
_BIG = 2 ** 53
# `x[key]` of a realized x with a result of more bytes than this is a view of x's memory, a
# smaller one a copy (`_getitem`)
_VIEW_MIN = 2048
_FC = frozenset("fc")
_add_reduce = np.add.reduce
_matmul = np.matmul
# a numpy scalar's type -> its svod dtype (a strong operand, NEP 50)
_NPSCALAR = {d.np.type: d for d in _dt.ALL}
_NPSCALAR_GET = _NPSCALAR.get



class _Memo(dict):
    """(op name, dtype of a, dtype of b or type of a Python scalar) -> (svod DType, numpy
    dtype, whether numpy's floating-point errors must be silenced) of the result, or False:
    this combination always takes the full path. Also kept as one table per op name,
    `table(name)[dtype of a][dtype of b]`, which the hot paths read (two lookups of
    identity-hashed keys: no tuple built and hashed per op). Written only through
    `m[key] = v` and `clear()`, which keep the two in step."""

    __slots__ = ("_by_op",)

    def __init__(self):
        super().__init__()
        self._by_op: dict = {}

    def table(self, name: str) -> dict:
        """op name's table (the same dict for the life of the process)."""
        return self._by_op.setdefault(name, {})

    def __setitem__(self, key, value) -> None:
        dict.__setitem__(self, key, value)
        name, d, kb = key
        self.table(name).setdefault(d, {})[kb] = value

    def clear(self) -> None:
        dict.clear(self)
        for t in self._by_op.values():
            t.clear()


_memo = _Memo()
_stats = {"learned": 0}
# the fast-path count: `_tick()` per op (three bytecodes where `_stats["fast"] += 1` takes ten)
_ticks = itertools.count()
_tick = _ticks.__next__
_ndarray = None  # svod.numpy.ndarray (set by `install`)
_Tensor = _T.Tensor

# ops that raise no floating-point flag on integer/bool operands (no division, no float result)
_EXACT_ON_INTS = frozenset(("add", "subtract", "multiply", "negative", "absolute", "maximum", "minimum", "less",
                            "less_equal", "greater", "greater_equal", "equal", "not_equal", "matmul", "outer",
                            "sum", "floor", "ceil"))
_COMPARE = frozenset(("less", "less_equal", "greater", "greater_equal", "equal", "not_equal", "maximum", "minimum"))


def _probe_compare() -> bool:
    """Whether this numpy's comparisons and maximum/minimum of real floats raise no
    floating-point flag on NaN and inf operands (several lengths: its SIMD loops and scalar
    tails; complex ones do raise "invalid" and always run quiet). Measured at import; when
    they do, they run under the quiet error state."""
    try:
        with np.errstate(all="raise"):
            for n in (1, 3, 8, 17, 64):
                for dt in (np.float16, np.float32, np.float64):
                    a = np.full(n, np.nan, dt)
                    b = np.linspace(-1, 1, n).astype(dt)
                    b[0] = np.inf
                    for f in (np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal,
                              np.maximum, np.minimum, operator.lt, operator.le, operator.gt, operator.ge,
                              operator.eq, operator.ne):
                        f(a, b), f(b, a), f(a, 1.0), f(a[0], b[-1]), f(b[0], a[-1]), f(a[0], 0), f(b, -np.inf)
    except FloatingPointError:
        return False
    return True


_COMPARE_EXACT = _probe_compare()


def _noisy(key) -> bool:
    """Whether numpy may raise a floating-point warning for memo key `key` (so the call runs
    under the quiet error state, as svod's compiled code never warns)."""
    name, d, kb = key
    name = name.split("/")[0]
    kind = "c" if kb is complex else "f" if kb is float else "i" if kb is int or kb is None else kb.kind
    if name in _COMPARE and _COMPARE_EXACT and d.kind != "c" and kind != "c" and \
            (type(kb) is not type or d.itemsize == 8):
        return False  # (a Python scalar is cast to the array's dtype: 1e308 overflows float32, and flags)
    return not (name in _EXACT_ON_INTS and d.kind in "biu" and kind in "biu")


def stats() -> dict:
    """How many ops took the fast path, and how many op/dtype combinations were learned."""
    return {"fast": int(repr(_ticks)[len("count("):-1]), **_stats}


def _quiet_set(f, *args):
    """`f(*args)` with numpy's error state set quiet for the call (the context variable set
    and reset in the caller's context)."""
    if _EXTOBJ is None:  # pragma: no cover - another numpy
        with np.errstate(all="ignore"):
            return f(*args)
    tok = _EXTOBJ.set(_QUIET)
    try:
        return f(*args)
    finally:
        _EXTOBJ.reset(tok)


class _QuietContext(threading.local):
    """Per thread: `run(f, *args)` runs `f(*args)` inside a context of its own whose numpy
    error state is quiet (`contextvars.Context.run`: entering a context is a pointer swap,
    where setting and resetting numpy's context variable builds a new context mapping and a
    token per call — ~900 of a fast op's ~15,000 CPU instructions). Only for numpy's own
    functions on numpy arrays and scalars, which read no other context variable and call no
    Python code. A context cannot be entered twice at once: a fast op run while this
    thread's is entered (from a finaliser during the call) takes `_quiet_set` (`_quiet`)."""

    def __init__(self):
        if _EXTOBJ is None:  # pragma: no cover - another numpy
            self.run = _quiet_set
            return
        ctx = contextvars.Context()
        ctx.run(_EXTOBJ.set, _QUIET)
        self.run = ctx.run


_q = _QuietContext()


def _quiet(f, *args):
    """`f(*args)` with numpy's floating-point errors ignored (svod's compiled semantics)."""
    try:
        return _q.run(f, *args)
    except RuntimeError:  # (this thread's quiet context is entered already: see `_QuietContext`)
        return _quiet_set(f, *args)


def _wrap(arr, d):
    """A realized `svod.numpy.ndarray` over `arr` — a fresh array (or numpy scalar) of svod
    dtype `d` that nothing else holds — as an unmaterialized `svod.eager.Fresh` node."""
    n = _new(_Fresh)
    n.dtype = d
    n._a = arr
    t = _new(_ndarray)
    t.uop = n
    return t


def _operand(o, kind_ok):
    """(array or Python scalar, memo key part) of a fast operand, or (None, None)."""
    t = type(o)
    if t is _ndarray or t is _Tensor:
        v = o.uop
        a = _array(v)
        if a is not None:
            return a, v.dtype
        return None, None
    if t is float or t is complex:
        return o, t
    if t is int and kind_ok and -_BIG <= o <= _BIG:  # (a Python int with an int array: value checks, full path)
        return o, t
    return None, None


def _learn(key, res):
    """Record the dtype of a full-path result `res` for `key` (when it was computed eagerly:
    a realized array, or the numpy scalar of a realized 0-d result)."""
    if key not in _memo:
        if isinstance(res, _Tensor):
            if res.uop.op is not _BUFFER:
                return res
            d = res.uop.dtype
        else:
            d = _NPSCALAR_GET(type(res))
            if d is None:
                return res
        _memo[key] = (d, d.np, _noisy(key))
        _stats["learned"] += 1
    return res


def _size_ok(a, b, lim) -> bool:
    """The broadcast result of arrays/scalars `a`, `b` has at most `lim` elements (a cheap
    bound first: equal shapes or a scalar side)."""
    sa = a.shape if type(a) is np.ndarray else ()
    sb = b.shape if type(b) is np.ndarray else ()
    if sa == sb or not sb:
        return a.size <= lim if sa else True
    if not sa:
        return b.size <= lim
    try:
        n = 1
        for s in np.broadcast_shapes(sa, sb):
            n *= s
    except ValueError:
        return False  # the full path raises svod's error
    return n <= lim


def _result(r, want):
    """`r` (numpy's result: an array or a numpy scalar) when its dtype is `want`'s numpy
    dtype, else None."""
    if r.dtype is not want[1]:
        return None
    return r


def _call1(npf, a, want):
    """`npf(a)` under the quiet error state when `want` says numpy may warn."""
    if not want[2]:
        return npf(a)
    return _quiet(npf, a)


def _call2(npf, a, b, want):
    if not want[2]:
        return npf(a, b)
    return _quiet(npf, a, b)


def _binary(name: str, npf, slow, reflected: bool, pyop=None):
    """An `ndarray` binary operator: `npf(self, o)` (or `npf(o, self)`) on the fast path.
    (`_array`, `_operand`, `_size_ok`, `_quiet`, `_result` and `_wrap` inline: every op passes here.)

    Two real-float scalars — a 0-d value's numpy scalar with another one of its dtype or a
    Python float/int — use `pyop` (the Python operator: numpy's scalar math, the same
    correctly rounded IEEE operation or exact comparison, in the same error state, ~0.05 µs
    where the ufunc call costs ~0.6); integer scalars do not (their scalar math warns on
    overflow where the array loop wraps silently), nor complex ones."""

    table = _memo.table(name)

    def method(self, o):
        u = self.uop
        if type(u) is _Fresh:
            a = u._a
            if a is None:
                a = u.arg.array
        elif u.op is _BUFFER:
            a = u.arg.array
        else:
            return _scalar_of(slow(self, o))
        d = u.dtype
        t = type(o)
        if t is _ndarray or t is _Tensor:
            v = o.uop
            if type(v) is _Fresh:
                b = v._a
                if b is None:
                    b = v.arg.array
            elif v.op is _BUFFER:
                b = v.arg.array
            else:
                return _scalar_of(slow(self, o))
            kb = v.dtype
        elif t is float or t is complex or t is int and d.kind in _FC and -_BIG <= o <= _BIG:
            b, kb = o, t  # (a weak Python scalar: the array's shape)
        else:
            kb = _NPSCALAR_GET(t)  # a numpy scalar (`A[i, j]`, a dot product): strong, its dtype's
            if kb is None:
                return _scalar_of(slow(self, o))
            b = o
        want = table.get(d)
        if want is not None:
            want = want.get(kb)
        if want:
            if _T._READ_HOOK is not None:
                return slow(self, o)
            lim = _local.limit
            if lim is None:
                lim = _POLICY
            # the result's size: `a`'s with a Python scalar; at most the larger operand's when
            # neither has more than one axis; else the broadcast shape's (NOTE: no shape tuples
            # on the common paths)
            if lim and a.size <= lim and (kb is t or (b.size <= lim and (a.ndim <= 1 and b.ndim <= 1 or
                                                                      _size_ok(a, b, lim)))):
                f = npf
                if pyop is not None and type(a) is not np.ndarray and type(b) is not np.ndarray and \
                        d.kind == "f" and (kb is d or kb is float or kb is int):
                    f = pyop  # (two real-float scalars: numpy's scalar math)
                if reflected:
                    a, b = b, a
                try:
                    if want[2]:
                        try:
                            r = _q.run(f, a, b)
                        except RuntimeError:  # (the quiet context entered already: `_QuietContext`)
                            r = _quiet_set(f, a, b)
                    else:
                        r = f(a, b)
                except ValueError:  # shapes that do not broadcast (1-D operands): svod's error
                    return slow(self, o)
                if r.dtype is want[1]:  # an array, or a numpy scalar for a 0-d result (returned as numpy does)
                    _tick()
                    if type(r) is not np.ndarray:
                        return r
                    n = _new(_Fresh)
                    n.dtype = want[0]
                    n._a = r
                    res = _new(_ndarray)
                    res.uop = n
                    return res
                _memo[(name, d, kb)] = False  # numpy's dtype is not svod's: the full path from now on
        elif want is None:
            return _scalar_of(_learn((name, d, kb), slow(self, o)))
        return _scalar_of(slow(self, o))

    method.__name__ = method.__qualname__ = slow.__name__
    method.__doc__ = slow.__doc__
    return method


def _inplace(name: str, npf, slow):
    """An in-place operator (`x += o`): the result must keep `x`'s dtype and shape (the
    full path raises otherwise); `x` is rebound to a fresh array, as the full path does."""

    def method(self, o):
        u = self.uop
        a = _array(u)
        if a is not None and _T._READ_HOOK is None:
            d = u.dtype
            b, kb = _operand(o, d.kind in _FC)
            if kb is not None:
                key = (name, d, kb)
                want = _memo.get(key)
                if want is None:  # (the full path keeps x's dtype or raises: its result's dtype is the op's)
                    return _learn(key, slow(self, o))
                if want and want[0] is d:
                    lim = _local.limit
                    if lim is None:
                        lim = _POLICY
                    if lim and a.size <= lim:
                        r = _quiet(npf, a, b) if want[2] else npf(a, b)
                        if r.dtype is want[1] and r.shape == a.shape:
                            _tick()
                            self.uop = _fresh(r, d)
                            return self
        return slow(self, o)

    method.__name__ = method.__qualname__ = slow.__name__
    method.__doc__ = slow.__doc__
    return method


def _unary(name: str, npf, slow):
    def method(self):
        u = self.uop
        a = _array(u)
        if a is not None and _T._READ_HOOK is None:
            key = (name, u.dtype, None)
            want = _memo.get(key)
            if want:
                lim = _limit()
                if lim and a.size <= lim:
                    r = _result(_call1(npf, a, want), want)
                    if r is not None:
                        _tick()
                        return _wrap(r, want[0]) if type(r) is np.ndarray else r
                    _memo[key] = False
            elif want is None:
                return _scalar_of(_learn(key, slow(self)))
        return _scalar_of(slow(self))

    method.__name__ = method.__qualname__ = slow.__name__
    method.__doc__ = slow.__doc__
    return method


_BOUND = frozenset((int, type(None)))  # the types of a basic slice's start, stop and step


def _ints(key) -> int:
    """The number of Python ints in a basic `key` — a Python int, a slice of Python ints /
    None with a nonzero step, or a tuple of those — else -1 (any other key: the full path)."""
    t = type(key)
    if t is int:
        return 1
    if t is slice:
        return 0 if _plain_slice(key) else -1
    if t is not tuple:
        return -1
    n = 0
    for k in key:
        if type(k) is int:
            n += 1
        elif type(k) is not slice or type(k.start) not in _BOUND or type(k.stop) not in _BOUND or \
                type(k.step) not in _BOUND or k.step == 0:
            return -1
    return n


def _plain_slice(s: slice) -> bool:
    for v in (s.start, s.stop, s.step):
        if v is not None and type(v) is not int:
            return False
    return s.step != 0


def _getitem(slow):
    """`x[key]` of a realized x with a basic key (ints, slices, None, Ellipsis: numpy's basic
    indexing, whose result is a view of x's memory — checked on the result, where a check of
    the key cost more) and a result within the eager limit: numpy's indexing. An element is
    the numpy scalar numpy returns; a part of more than `_VIEW_MIN` bytes is a *view* of x's
    memory, a smaller one a copy (cheaper than recording a view). A view is a value all the
    same (svod's slices are not numpy's views): nothing writes memory that a live view
    reads. An in-place write needs `svod.eager.sole_owner`, and a view holds a reference to
    the array owning its memory (numpy collapses `base` to it), so while one lives a write
    of x goes into a copy of x — unless the view is held by the unmaterialized node made
    here, recorded with `svod.eager.note_view`: the write first gives such nodes copies of
    their own (`svod.eager.detach_views`) and then writes in place (a loop that keeps a row
    while it writes the others copies the row once). A node holding a view copies it into
    its own memory when it is materialized (`svod.eager.Fresh`). So a loop reading big parts
    (Jacobi's `a[:-2] + a[1:-1] + a[2:]`, Cholesky's `ell[j + 1:, :j] @ ell[j, :j]`) does
    not copy them, as numpy does not."""

    def __getitem__(self, key):
        u = self.uop
        if type(u) is _Fresh:
            arr = u._a
            if arr is None:
                arr = u.arg.array
        elif u.op is _BUFFER:
            arr = u.arg.array
        else:
            return _lazy_item(self, key, slow)
        if _T._READ_HOOK is None:
            lim = _local.limit
            if lim is None:
                lim = _POLICY
            if lim:
                try:
                    v = arr[key]
                except (IndexError, TypeError, ValueError):
                    return slow(self, key)  # svod's error
                if type(v) is not np.ndarray:  # one element: numpy's scalar (a copy of the value), as numpy
                    _tick()
                    return v
                b = v.base  # NOTE: basic indexing (ints, slices, None, Ellipsis) gives a view of x's memory
                if b is not arr and (b is None or b is not arr.base):  # an advanced index: its copy
                    return _scalar_key(slow(self, key), key)
                if type(v) is np.ndarray:
                    if v.size > lim:
                        return slow(self, key)
                    if v.nbytes <= _VIEW_MIN:
                        v = v.copy()  # (C order)
                    else:  # a view of x's memory, a value all the same (`_getitem`)
                        _tick()
                        n = _new(_Fresh)
                        n.dtype = u.dtype
                        n._a = v
                        b = v.base  # (the array owning the memory: numpy collapses a view's base)
                        _note_view(b, n)
                        res = _new(_ndarray)
                        res.uop = n
                        return res
                _tick()
                n = _new(_Fresh)
                n.dtype = u.dtype
                n._a = v
                res = _new(_ndarray)
                res.uop = n
                return res
        return _scalar_key(slow(self, key), key)

    __getitem__.__doc__ = slow.__doc__
    return __getitem__


def _scalar_key(res, key):
    """A full-path `x[key]` result: numpy's scalar when it is a realized 0-d value and `key`
    holds no Ellipsis (numpy gives `x[..., 0]` and `x[...]` as 0-d arrays)."""
    if key is Ellipsis or type(key) is tuple and any(k is Ellipsis for k in key):
        return res
    return _scalar_of(res)


def _lazy_item(self, key, slow):
    """`x[key]` of a pending (lazy) `x`. An element (`key` of one Python int per axis) with
    eager small work on and no trace running: numpy's scalar of the value now — from the
    full path when it computed it eagerly (`x` a view of realized memory), else `x` is
    realized first (`svod.eager.realize_pending`: by its plan, or with numpy once its
    structure has made its plans), as numpy has the whole array, and read — a Python loop
    reading elements of a computed array realizes it once, not a graph per element. Any
    other key: the full path (a lazy part stays lazy)."""
    res = slow(self, key)
    if _T._READ_HOOK is not None or not _limit():
        return res
    tk = type(key)
    if tk is int or isinstance(key, np.integer):
        n = 1
    elif tk is tuple:
        n = 0
        for k in key:
            if type(k) is not int and not isinstance(k, np.integer):
                return _scalar_of(res) if k is not Ellipsis else res
            n += 1
    else:
        return _scalar_of(res)
    if n != len(self.shape):
        return res if n < len(self.shape) else _scalar_of(res)
    v = _scalar_of(res)
    if v is not res:
        return v
    _eager.realize_pending(self)  # (the index was checked by the full path above: it is in range)
    return _array(self.uop)[key]


def _setitem(slow):
    def __setitem__(self, key, value):
        u = self.uop
        if type(u) is _Fresh:  # (`_array`, inline)
            arr = u._a
            if arr is None:
                arr = u.arg.array
        elif u.op is _BUFFER:
            arr = u.arg.array
        else:
            return slow(self, key, value)
        tk = type(key)
        if tk is tuple:  # (`_ints`, inline)
            nints = 0
            for k in key:
                if type(k) is int:
                    nints += 1
                elif type(k) is not slice or type(k.start) not in _BOUND or type(k.stop) not in _BOUND or \
                        type(k.step) not in _BOUND or k.step == 0:
                    nints = -1
                    break
        elif tk is int:
            nints = 1
        else:
            nints = _ints(key)
        if _T._READ_HOOK is None and nints >= 0:
            lim = _local.limit
            if lim is None:
                lim = _POLICY
            d = u.dtype
            tv = type(value)
            varr = None
            if not lim:
                pass
            elif tv is _ndarray or tv is _Tensor:
                vu = value.uop
                if vu.dtype is d:
                    if type(vu) is _Fresh:
                        varr = vu._a
                        if varr is None:
                            varr = vu.arg.array
                    elif vu.op is _BUFFER:
                        varr = vu.arg.array
                vu = None
            elif d.kind in _FC and (tv is float or tv is int and -_BIG <= value <= _BIG) or \
                    d.kind == "c" and tv is complex:
                varr = value
            elif _NPSCALAR_GET(tv) is d:  # a numpy scalar of x's dtype (`A[i, j] = s`)
                varr = value
            if varr is not None:
                if type(varr) is np.ndarray and varr.ndim > arr.ndim - nints:
                    # numpy drops a value's extra leading 1-axes, svod's broadcast (`broadcast_to`'s rule)
                    # does not: with no more axes than the region, numpy's rule is svod's
                    return slow(self, key, value)
                del u, arr  # NOTE: no reference to x's node, BufferRef or array while ownership is checked
                try:
                    u = self.uop
                    if type(u) is _Fresh:
                        # `sole_owner`'s check of an unmaterialized node, inline (the same counts: the
                        # node held by x and `u`, the array by the node and `arr`), then `write_in_place`
                        arr = u._a
                        if type(arr) is np.ndarray and arr.base is None and _rc(u) <= _BASE_FU and \
                                _rc(arr) <= _BASE_FA:
                            arr[key] = varr
                            n = _new(_Fresh)
                            n.dtype = d
                            n._a = arr
                            self.uop = n
                            _tick()
                            if id(self) in _live:
                                _T._realized(self)
                            return
                        del arr
                    del u
                    if _sole_owner(self) or _detach_views(self) and _sole_owner(self):
                        _eager.write_in_place(self, key, varr)
                    else:
                        new = np.array(_array(self.uop), order="C", copy=True)
                        new[key] = varr
                        self.uop = _fresh(new, d)
                except (IndexError, TypeError, ValueError):
                    # a bad key or a value numpy cannot broadcast: numpy checks both before it writes
                    # anything, and x is not rebound, so the full path raises svod's error
                    return slow(self, key, value)
                _tick()
                if id(self) in _live:
                    _T._realized(self)
                return
        slow(self, key, value)

    __setitem__.__doc__ = slow.__doc__
    return __setitem__


def _scalar(self, what: str):
    """`Tensor._scalar` (`float(t)`, `int(t)`, `bool(t)`, `t.item()`) reading an
    unmaterialized `Fresh` node's value directly (no BufferRef built for a read)."""
    u = self.uop
    if type(u) is _Fresh and _T._READ_HOOK is None:
        a = u._a
        if a is not None and a.size == 1:
            return a.item()
    return _Tensor._scalar(self, what)


def _bool(self) -> bool:
    u = self.uop
    if type(u) is _Fresh and _T._READ_HOOK is None:
        a = u._a
        if a is not None and a.size == 1:
            return bool(a.item())
    return _Tensor.__bool__(self)


def _item(self, *args):
    """`Tensor.item`: a size-1 unmaterialized value read directly."""
    if not args:
        u = self.uop
        if type(u) is _Fresh and _T._READ_HOOK is None:
            a = u._a
            if a is not None and a.size == 1:
                return a.item()
    return _Tensor.item(self, *args)


def _float(self) -> float:
    u = self.uop
    if type(u) is _Fresh and _T._READ_HOOK is None:
        a = u._a
        if a is not None and a.size == 1:
            return float(a.item())
    return _Tensor.__float__(self)


# ----------------------------------------------------------------------------- functions

def _fn_operand(o):
    """(value, kind, what) of an operand of a fast ufunc call: a realized svod array (its
    array or 0-d value's numpy scalar, its dtype, 1), a numpy scalar of a svod dtype
    (itself, its dtype, 0), a Python float/complex/int (itself, its type, -1); else
    (None, None, None)."""
    t = type(o)
    if t is _ndarray or t is _Tensor:
        u = o.uop
        if type(u) is _Fresh:  # (`_array`, inline)
            a = u._a
            if a is None:
                a = u.arg.array
        elif u.op is _BUFFER:
            a = u.arg.array
        else:
            return None, None, None
        return a, u.dtype, 1
    if t is float or t is complex or t is int:
        return o, t, -1
    d = _NPSCALAR_GET(t)
    if d is not None:
        return o, d, 0
    return None, None, None


def _function(name: str, npf, slow, nin: int):
    """A `svod.numpy` ufunc's `__call__` (`self` unused) on the fast path when called with
    `nin` positional operands and nothing else; `slow(*args, **kwargs)` otherwise. (The
    ufunc object's class gets it as `__call__`: one Python frame per call, not two.)

    The operands: realized svod arrays (quiet: svod's compiled semantics), numpy scalars,
    and for a binary ufunc a Python float/complex (or int of at most 2^53 with a float or
    complex other operand) — in either order (a svod array second: the memo's `name/r`,
    keyed by that array's dtype). Operands that are all numpy scalars (the first one a
    numpy scalar, the second a numpy or Python scalar, or the other way round) are numpy's
    own call: its scalar result in the caller's error state, as numpy gives it (memo
    `name/s`, `name/sr`)."""

    table = _memo.table(name)
    rtable = _memo.table(name + "/r")
    stable = _memo.table(name + "/s")
    srtable = _memo.table(name + "/sr")
    rname, sname, srname = name + "/r", name + "/s", name + "/sr"

    def fn(_self, *args, **kwargs):
        if not kwargs and len(args) == nin and _T._READ_HOOK is None:
            a, d, wa = _fn_operand(args[0])
            if wa is not None:
                if nin == 1:
                    b = kb = None
                    if wa == 1:
                        tab, key = table, (name, d, None)
                    elif wa == 0:
                        tab, key = stable, (sname, d, None)
                    else:
                        tab = None
                else:
                    b, kb, wb = _fn_operand(args[1])
                    tab = None
                    if wb is None:
                        pass
                    elif wa == 1 and (wb >= 0 or kb is not int or d.kind in _FC and -_BIG <= b <= _BIG):
                        tab, key = table, (name, d, kb)
                    elif wb == 1 and (wa >= 0 or d is not int or kb.kind in _FC and -_BIG <= a <= _BIG):
                        tab, key = rtable, (rname, kb, d)  # (the array's dtype first: `name/r`)
                    elif wa == 0 and (wb == 0 or kb is not int or d.kind in _FC and -_BIG <= b <= _BIG):
                        tab, key = stable, (sname, d, kb)
                    elif wb == 0 and (d is not int or kb.kind in _FC and -_BIG <= a <= _BIG):
                        tab, key = srtable, (srname, kb, d)  # (a Python number, then a numpy scalar)
                if tab is not None:
                    want = tab.get(key[1])
                    if want is not None:
                        want = want.get(key[2])
                    if want:
                        lim = _local.limit
                        if lim is None:
                            lim = _POLICY
                        if lim and (nin == 1 and (wa == 0 or a.size <= lim) or nin == 2 and _size_ok(a, b, lim)):
                            if tab is stable or tab is srtable:  # scalars only: numpy's call, the caller's error state
                                r = npf(a) if nin == 1 else npf(a, b)
                            elif want[2]:
                                r = _quiet(npf, a) if nin == 1 else _quiet(npf, a, b)
                            else:
                                r = npf(a) if nin == 1 else npf(a, b)
                            if r.dtype is want[1]:
                                _tick()
                                if type(r) is not np.ndarray:
                                    return r  # (a 0-d result: numpy's scalar)
                                n = _new(_Fresh)  # (`_wrap`, inline)
                                n.dtype = want[0]
                                n._a = r
                                res = _new(_ndarray)
                                res.uop = n
                                return res
                            _memo[key] = False
                    elif want is None:
                        res = _learn(key, slow(*args))
                        if (tab is stable or tab is srtable) and _memo.get(key):  # numpy's call, as later calls
                            r = npf(a) if nin == 1 else npf(a, b)
                            if r.dtype is _memo[key][1]:
                                return r
                            _memo[key] = False
                        return res
        return slow(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = slow.__doc__
    fn.__wrapped__ = getattr(slow, "__wrapped__", slow)
    return fn


def _two_realized(a, b):
    """The arrays and dtype of two realized svod arrays of one dtype, else None."""
    ta, tb = type(a), type(b)
    if (ta is _ndarray or ta is _Tensor) and (tb is _ndarray or tb is _Tensor):
        u, v = a.uop, b.uop
        if u.dtype is v.dtype:
            x, y = _array(u), _array(v)
            if x is not None and y is not None:
                return np.asarray(x), np.asarray(y), u.dtype  # (a numpy scalar of a 0-d value as an array)
    return None


def _matmul_like(name: str, slow):
    """`dot` / `matmul` / `@` of realized operands of one dtype with 1 or 2 axes each and
    matching inner sizes: `np.matmul` (the op table's MATMUL), as `svod.reductions` does.
    (`_two_realized`, `_call2` and `_wrap` inline: a loop's dot products pass here.)"""

    table = _memo.table(name)

    def fn(a, b, *rest, **kwargs):
        if not rest and not kwargs and _T._READ_HOOK is None:
            ta, tb = type(a), type(b)
            if (ta is _ndarray or ta is _Tensor) and (tb is _ndarray or tb is _Tensor):
                u, v = a.uop, b.uop
                d = u.dtype
                x = y = None
                if v.dtype is d:  # (`_array` of both, inline)
                    if type(u) is _Fresh:
                        x = u._a
                        if x is None:
                            x = u.arg.array
                    elif u.op is _BUFFER:
                        x = u.arg.array
                    if x is not None:
                        if type(v) is _Fresh:
                            y = v._a
                            if y is None:
                                y = v.arg.array
                        elif v.op is _BUFFER:
                            y = v.arg.array
                if y is not None:
                    want = table.get(d)
                    if want is not None:
                        want = want.get(d)
                    if want:
                        nx, ny = x.ndim, y.ndim  # (a numpy scalar of a 0-d value: ndim 0, not taken)
                        if 1 <= nx <= 2 and 1 <= ny <= 2 and x.shape[-1] == y.shape[0]:
                            lim = _local.limit
                            if lim is None:
                                lim = _POLICY
                            if lim and x.size <= lim and y.size <= lim and \
                                    (x.shape[0] if nx == 2 else 1) * (y.shape[1] if ny == 2 else 1) <= lim:
                                if want[2]:
                                    try:
                                        r = _q.run(_matmul, x, y)
                                    except RuntimeError:  # (the quiet context entered already)
                                        r = _quiet_set(_matmul, x, y)
                                else:
                                    r = _matmul(x, y)
                                if r.dtype is want[1]:
                                    _tick()
                                    # (two vectors: numpy's scalar, as numpy returns it)
                                    return _wrap(r, want[0]) if type(r) is np.ndarray else r
                                _memo[(name, d, d)] = False
                    elif want is None:
                        return _scalar_of(_learn((name, d, d), slow(a, b)))
        return _scalar_of(slow(a, b, *rest, **kwargs))

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = slow.__doc__
    fn.__wrapped__ = getattr(slow, "__wrapped__", slow)
    return fn


def _taken(key, r, want):
    """The wrapped fast result `r`, counted; None (and `key` marked slow for good) when
    numpy's dtype was not the memo's."""
    if r is None:
        _memo[key] = False
        return None
    _tick()
    return _wrap(r, want[0])


def _outer(slow):
    def outer(a, b, *rest, **kwargs):
        if not rest and not kwargs and _T._READ_HOOK is None:
            p = _two_realized(a, b)
            if p is not None:
                x, y, d = p
                key = ("outer", d, d)
                want = _memo.get(key)
                if want:
                    lim = _limit()
                    if lim and x.size * y.size <= lim:
                        r = _call2(np.multiply, x.reshape(-1, 1), y.reshape(1, -1), want)
                        got = _taken(key, _result(r, want), want)
                        if got is not None:
                            return got
                elif want is None:
                    return _learn(key, slow(a, b))
        return slow(a, b, *rest, **kwargs)

    outer.__doc__ = slow.__doc__
    outer.__wrapped__ = getattr(slow, "__wrapped__", slow)
    return outer


def _sum(slow):
    """`sum(x)` over all axes of a realized array (no other argument): the op table's
    reduction (`svod.ops.reduce_numpy`) in the learned accumulator dtype."""

    def sum(a, *rest, **kwargs):  # noqa: A001
        if not rest and not kwargs and _T._READ_HOOK is None:
            ta = type(a)
            if ta is _ndarray or ta is _Tensor:
                u = a.uop
                x = _array(u)
                if x is not None and u.dtype.kind != "c":  # (a complex sum is two float sums in svod)
                    key = ("sum", u.dtype, None)
                    want = _memo.get(key)
                    if want:
                        x = np.asarray(x)
                        lim = _limit()
                        if lim and x.size <= lim and x.size:
                            # `reduce_numpy`'s np.sum(x, all axes, dtype) is this ufunc reduction (numpy's
                            # `_wrapreduction` calls it for an ndarray): the same loop, a numpy scalar
                            axes = tuple(range(x.ndim))
                            r = _result(_quiet(_add_reduce, x, axes, want[1]) if want[2] else
                                        _add_reduce(x, axes, want[1]), want)
                            if r is not None:
                                _tick()
                                return r  # (a numpy scalar, as numpy returns it)
                            _memo[key] = False
                    elif want is None:
                        return _scalar_of(_learn(key, slow(a)))
        return _scalar_of(slow(a, *rest, **kwargs))

    sum.__doc__ = slow.__doc__
    sum.__wrapped__ = getattr(slow, "__wrapped__", slow)
    return sum


# numpy functions whose svod op's table implementation is the same numpy function
UNARY = {"sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
         "absolute": np.absolute, "negative": np.negative, "floor": np.floor, "ceil": np.ceil}
BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.true_divide,
          "true_divide": np.true_divide, "maximum": np.maximum, "minimum": np.minimum, "less": np.less,
          "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal,
          "equal": np.equal, "not_equal": np.not_equal}
# ndarray operator -> (numpy function, memo name, reflected)
_PYOPS = {"add": operator.add, "subtract": operator.sub, "multiply": operator.mul, "divide": operator.truediv,
          "less": operator.lt, "less_equal": operator.le, "greater": operator.gt, "greater_equal": operator.ge,
          "equal": operator.eq, "not_equal": operator.ne}
_OPERATORS = {
    "__add__": (np.add, "add", False), "__radd__": (np.add, "add", True),
    "__sub__": (np.subtract, "subtract", False), "__rsub__": (np.subtract, "subtract", True),
    "__mul__": (np.multiply, "multiply", False), "__rmul__": (np.multiply, "multiply", True),
    "__truediv__": (np.true_divide, "divide", False), "__rtruediv__": (np.true_divide, "divide", True),
    "__lt__": (np.less, "less", False), "__le__": (np.less_equal, "less_equal", False),
    "__gt__": (np.greater, "greater", False), "__ge__": (np.greater_equal, "greater_equal", False),
    "__eq__": (np.equal, "equal", False), "__ne__": (np.not_equal, "not_equal", False),
}
_INPLACE = {"__iadd__": (np.add, "add"), "__isub__": (np.subtract, "subtract"),
            "__imul__": (np.multiply, "multiply"), "__itruediv__": (np.true_divide, "divide")}


_UFUNC_CALLS: dict = {}  # numpy's ufunc -> the `svod.numpy` ufunc's fast call (`install`)
_REFLECTED: dict = {}  # numpy's ufunc -> the ndarray operator computing `ufunc(other, x)` as `op(x, other)`


def _array_ufunc(slow):
    """`ndarray.__array_ufunc__` (NEP 13): numpy's call of a ufunc of the fast path with no
    keyword — what `numpy_scalar * svod_array` and `np.add(numpy_scalar, svod_array)` become
    (numpy's scalar defers to the array's `__array_ufunc__`) — is the `svod.numpy` ufunc's
    fast call (the same result as `svod.numpy.<ufunc>(...)`, which the protocol's full path
    runs for an ndarray operand); anything else the protocol's full path."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and not kwargs:
            if len(inputs) == 2 and inputs[1] is self:  # `s * x`: x's reflected operator (one call less)
                op = _REFLECTED.get(ufunc)
                if op is not None:
                    o = inputs[0]
                    if type(o) is np.ndarray and not o.shape:
                        o = o[()]  # (`s < x`: numpy's comparison hands over its scalar as a 0-d array)
                    return op(self, o)
            f = _UFUNC_CALLS.get(ufunc)
            if f is not None:
                return f(*inputs)
        return slow(self, ufunc, method, *inputs, **kwargs)

    __array_ufunc__.__doc__ = slow.__doc__
    return __array_ufunc__


def install(ndarray, namespace: dict) -> None:
    """Put the fast paths in front of `ndarray`'s operators and of the functions and ufuncs
    of the `svod.numpy` namespace `namespace` (their full paths are what was there)."""
    global _ndarray
    _ndarray = ndarray
    for op, (npf, name, reflected) in _OPERATORS.items():
        # NOTE: a reflected operator's memo is its forward op's with the operands swapped:
        # its own name keeps the two apart (`2 - a` and `a - 2` promote alike, the key stays honest)
        setattr(ndarray, op, _binary(name + ("/r" if reflected else ""), npf, getattr(ndarray, op), reflected,
                                     _PYOPS[name]))
    for op, (npf, name) in _INPLACE.items():
        setattr(ndarray, op, _inplace(name, npf, getattr(ndarray, op)))
    ndarray.__neg__ = _unary("negative", np.negative, ndarray.__neg__)
    ndarray.__getitem__ = _getitem(ndarray.__getitem__)
    ndarray.__setitem__ = _setitem(ndarray.__setitem__)
    ndarray.__matmul__ = _matmul_like("matmul", ndarray.__matmul__)
    ndarray._scalar, ndarray.__bool__, ndarray.__float__, ndarray.item = _scalar, _bool, _float, _item
    ndarray.dot = _matmul_like("matmul", ndarray.dot)
    for nin, table in ((1, UNARY), (2, BINARY)):
        for name, npf in table.items():
            u = namespace[name]
            call = _function(name, npf, u._call, nin)
            # NOTE: its own subclass (same layout, `isinstance(u, svod.numpy.ufunc)` holds) whose
            # __call__ is the fast path itself; `_call` (what __call__ ran) runs it too
            u.__class__ = type(type(u).__name__, (type(u),), {"__call__": call, "__module__": type(u).__module__})
            u._call = functools.partial(call, u)
            _UFUNC_CALLS.setdefault(npf, u._call)
    ndarray.__array_ufunc__ = _array_ufunc(ndarray.__array_ufunc__)
    # (a comparison with the operands swapped is the mirrored comparison: the same IEEE result)
    for npf, op in ((np.add, "__radd__"), (np.subtract, "__rsub__"), (np.multiply, "__rmul__"),
                    (np.true_divide, "__rtruediv__"), (np.less, "__gt__"), (np.less_equal, "__ge__"),
                    (np.greater, "__lt__"), (np.greater_equal, "__le__"), (np.equal, "__eq__"),
                    (np.not_equal, "__ne__")):
        _REFLECTED[npf] = getattr(ndarray, op)
    namespace["dot"] = _matmul_like("matmul", namespace["dot"])
    namespace["matmul"] = _matmul_like("matmul", namespace["matmul"])
    namespace["outer"] = _outer(namespace["outer"])
    namespace["sum"] = _sum(namespace["sum"])
