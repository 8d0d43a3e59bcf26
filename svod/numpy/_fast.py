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
* **Results** are fresh read-only C-contiguous arrays bound to a realized node
  (`UOp.buffer`), exactly what `svod.eager` makes; a basic index copies (svod's slices
  are values). `x[key] = v` of a realized `x` writes in place when `svod.eager.sole_owner`
  allows, else into a copy — `svod.indexing`'s eager write, without the frontend.

`stats()` counts the calls that took this path; tests/test_numpy_fast.py compares every
path with numpy (dtypes, NaN/inf/-0.0, aliasing, in-place writes) and checks that the
path is taken.
"""

from __future__ import annotations

import numpy as np

import svod.tensor as _T
from svod import eager as _eager
from svod.ir import Ops, UOp
from svod.ops import reduce_numpy

__all__ = ["install", "stats"]

_BUFFER = Ops.BUFFER
_new = object.__new__
_buffer = UOp.buffer
_limit = _eager.numpy_limit
_sole_owner = _eager.sole_owner
_EXTOBJ, _QUIET = _eager._EXTOBJ, getattr(_eager, "_QUIET", None)
if _EXTOBJ is None:  # pragma: no cover - another numpy: the public context, per call
    def _set(_):
        ctx = np.errstate(all="ignore")
        ctx.__enter__()
        return ctx

    def _reset(ctx):
        ctx.__exit__(None, None, None)
else:
    _set, _reset = _EXTOBJ.set, _EXTOBJ.reset
_BIG = 2 ** 53
_FC = frozenset("fc")

# (op name, dtype of a, dtype of b or type of a Python scalar) -> (svod DType, numpy dtype)
# of the result, or False: this combination always takes the full path
_memo: dict = {}
_stats = {"fast": 0, "learned": 0}
_ndarray = None  # svod.numpy.ndarray (set by `install`)
_Tensor = _T.Tensor


def stats() -> dict:
    """How many ops took the fast path, and how many op/dtype combinations were learned."""
    return dict(_stats)


def _quiet(f, *args):
    """`f(*args)` with numpy's floating-point errors ignored (svod's compiled semantics)."""
    if _EXTOBJ is None:  # pragma: no cover - another numpy
        with np.errstate(all="ignore"):
            return f(*args)
    tok = _EXTOBJ.set(_QUIET)
    try:
        return f(*args)
    finally:
        _EXTOBJ.reset(tok)


def _wrap(arr, d):
    """A realized `svod.numpy.ndarray` over the fresh array `arr` of svod dtype `d`."""
    arr.setflags(write=False)  # (cheaper than arr.flags.writeable = False, which builds a flags object)
    t = _new(_ndarray)
    t.uop = _buffer(arr, d)
    return t


def _operand(o, kind_ok):
    """(array or Python scalar, memo key part) of a fast operand, or (None, None)."""
    t = type(o)
    if t is _ndarray or t is _Tensor:
        v = o.uop
        if v.op is _BUFFER:
            return v.arg.array, v.dtype
        return None, None
    if t is float or t is complex:
        return o, t
    if t is int and kind_ok and -_BIG <= o <= _BIG:  # (a Python int with an int array: value checks, full path)
        return o, t
    return None, None


def _learn(key, res):
    """Record the dtype of a full-path result `res` for `key` (when it was computed eagerly)."""
    if key not in _memo and isinstance(res, _Tensor) and res.uop.op is _BUFFER:
        d = res.uop.dtype
        _memo[key] = (d, d.np)
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
    """`r` (numpy's result) as a fresh array when its dtype is `want`'s numpy dtype, else None."""
    if type(r) is not np.ndarray:
        r = np.asarray(r)  # a 0-d result comes back as a numpy scalar
    if r.dtype is not want[1]:
        return None
    return r


def _binary(name: str, npf, slow, reflected: bool):
    """An `ndarray` binary operator: `npf(self, o)` (or `npf(o, self)`) on the fast path.
    (`_operand`, `_size_ok`, `_quiet`, `_result` and `_wrap` inline: every op passes here.)"""

    def method(self, o):
        u = self.uop
        if u.op is _BUFFER and _T._READ_HOOK is None:
            d = u.dtype
            t = type(o)
            if t is _ndarray or t is _Tensor:
                v = o.uop
                if v.op is not _BUFFER:
                    return slow(self, o)
                b, kb = v.arg.array, v.dtype
                small = b.shape == u.shape
            elif t is float or t is complex or t is int and d.kind in _FC and -_BIG <= o <= _BIG:
                b, kb, small = o, t, True  # (a weak Python scalar: the array's shape)
            else:
                return slow(self, o)
            key = (name, d, kb)
            want = _memo.get(key)
            if want:
                lim = _limit()
                a = u.arg.array
                if lim and (a.size <= lim if small else _size_ok(a, b, lim)):
                    tok = _set(_QUIET)
                    try:
                        r = npf(b, a) if reflected else npf(a, b)
                    finally:
                        _reset(tok)
                    if type(r) is not np.ndarray:
                        r = np.asarray(r)  # a 0-d result comes back as a numpy scalar
                    if r.dtype is want[1]:
                        _stats["fast"] += 1
                        r.setflags(write=False)
                        res = _new(_ndarray)
                        res.uop = _buffer(r, want[0])
                        return res
                    _memo[key] = False  # numpy's dtype is not svod's: the full path from now on
            elif want is None:
                return _learn(key, slow(self, o))
        return slow(self, o)

    method.__name__ = method.__qualname__ = slow.__name__
    method.__doc__ = slow.__doc__
    return method


def _inplace(name: str, npf, slow):
    """An in-place operator (`x += o`): the result must keep `x`'s dtype and shape (the
    full path raises otherwise); `x` is rebound to a fresh array, as the full path does."""

    def method(self, o):
        u = self.uop
        if u.op is _BUFFER and _T._READ_HOOK is None:
            d = u.dtype
            b, kb = _operand(o, d.kind in _FC)
            if kb is not None:
                key = (name, d, kb)
                want = _memo.get(key)
                if want is None:  # (the full path keeps x's dtype or raises: its result's dtype is the op's)
                    return _learn(key, slow(self, o))
                if want and want[0] is d:
                    lim = _limit()
                    a = u.arg.array
                    if lim and a.size <= lim:
                        r = _result(_quiet(npf, a, b), want)
                        if r is not None and r.shape == a.shape:
                            _stats["fast"] += 1
                            r.flags.writeable = False
                            self.uop = _buffer(r, d)
                            return self
        return slow(self, o)

    method.__name__ = method.__qualname__ = slow.__name__
    method.__doc__ = slow.__doc__
    return method


def _unary(name: str, npf, slow):
    def method(self):
        u = self.uop
        if u.op is _BUFFER and _T._READ_HOOK is None:
            key = (name, u.dtype, None)
            want = _memo.get(key)
            if want:
                a = u.arg.array
                lim = _limit()
                if lim and a.size <= lim:
                    r = _result(_quiet(npf, a), want)
                    if r is not None:
                        _stats["fast"] += 1
                        return _wrap(r, want[0])
                    _memo[key] = False
            elif want is None:
                return _learn(key, slow(self))
        return slow(self)

    method.__name__ = method.__qualname__ = slow.__name__
    method.__doc__ = slow.__doc__
    return method


def _basic(key) -> bool:
    """`key` is a Python int, a slice of Python ints / None, or a tuple of those."""
    t = type(key)
    if t is int:
        return True
    if t is slice:
        return _plain_slice(key)
    if t is not tuple:
        return False
    for k in key:
        t = type(k)
        if t is int:
            continue
        if t is not slice or not _plain_slice(k):
            return False
    return True


def _plain_slice(s: slice) -> bool:
    for v in (s.start, s.stop, s.step):
        if v is not None and type(v) is not int:
            return False
    return s.step != 0


def _getitem(slow):
    def __getitem__(self, key):
        u = self.uop
        if u.op is _BUFFER and _T._READ_HOOK is None and _basic(key):
            lim = _limit()
            if lim:
                try:
                    v = u.arg.array[key]
                except (IndexError, TypeError, ValueError):
                    return slow(self, key)  # svod's error
                if type(v) is np.ndarray:
                    if v.size <= lim:
                        _stats["fast"] += 1
                        return _wrap(v.copy(), u.dtype)  # (C order: a slice is a value, not a view)
                else:  # one element: a numpy scalar
                    _stats["fast"] += 1
                    return _wrap(np.array(v), u.dtype)
        return slow(self, key)

    __getitem__.__doc__ = slow.__doc__
    return __getitem__


def _fits(vshape, region) -> bool:
    """svod's broadcast of a value of `vshape` to `region` (`broadcast_to`'s rule)."""
    n = len(vshape)
    if n > len(region):
        return False
    for a, b in zip(vshape, region[len(region) - n:]):
        if a != b and a != 1:
            return False
    return True


def _setitem(slow):
    def __setitem__(self, key, value):
        u = self.uop
        if u.op is _BUFFER and _T._READ_HOOK is None and _basic(key) and _limit():
            d = u.dtype
            tv = type(value)
            varr = None
            if tv is _ndarray or tv is _Tensor:
                vu = value.uop
                if vu.op is _BUFFER and vu.dtype is d:
                    varr = vu.arg.array
                vu = None
            elif d.kind in _FC and (tv is float or tv is int and -_BIG <= value <= _BIG) or \
                    d.kind == "c" and tv is complex:
                varr = value
            if varr is not None:
                try:
                    region = u.arg.array[key]
                except (IndexError, TypeError, ValueError):
                    region = None
                if region is not None:
                    region = region.shape if type(region) is np.ndarray else ()  # (drops the view of x's array)
                    if type(varr) is not np.ndarray or _fits(varr.shape, region):
                        _stats["fast"] += 1
                        for s in region:
                            if not s:
                                return
                        del u  # NOTE: no reference to x's node, BufferRef or array while ownership is checked
                        if _sole_owner(self):
                            _eager.write_in_place(self, key, varr)
                        else:
                            u = self.uop
                            new = np.array(u.arg.array, order="C", copy=True)
                            new[key] = varr
                            new.setflags(write=False)
                            self.uop = _buffer(new, d)
                        _T._realized(self)
                        return
        slow(self, key, value)

    __setitem__.__doc__ = slow.__doc__
    return __setitem__


# ----------------------------------------------------------------------------- functions

def _function(name: str, npf, slow, nin: int):
    """A `svod.numpy` function or ufunc called with `nin` positional operands and nothing else."""

    def fn(*args, **kwargs):
        if not kwargs and len(args) == nin and _T._READ_HOOK is None:
            x = args[0]
            tx = type(x)
            if tx is _ndarray or tx is _Tensor:
                u = x.uop
                if u.op is _BUFFER:
                    d = u.dtype
                    if nin == 1:
                        key, b = (name, d, None), None
                    else:
                        b, kb = _operand(args[1], d.kind in _FC)
                        key = (name, d, kb) if kb is not None else None
                    if key is not None:
                        want = _memo.get(key)
                        if want:
                            lim = _limit()
                            a = u.arg.array
                            if lim and (a.size <= lim if nin == 1 else _size_ok(a, b, lim)):
                                r = _result(_quiet(npf, a) if nin == 1 else _quiet(npf, a, b), want)
                                if r is not None:
                                    _stats["fast"] += 1
                                    return _wrap(r, want[0])
                                _memo[key] = False
                        elif want is None:
                            return _learn(key, slow(*args))
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
        if u.op is _BUFFER and v.op is _BUFFER and u.dtype is v.dtype:
            return u.arg.array, v.arg.array, u.dtype
    return None


def _matmul_like(name: str, slow):
    """`dot` / `matmul` / `@` of realized operands of one dtype with 1 or 2 axes each and
    matching inner sizes: `np.matmul` (the op table's MATMUL), as `svod.reductions` does."""

    def fn(a, b, *rest, **kwargs):
        if not rest and not kwargs and _T._READ_HOOK is None:
            p = _two_realized(a, b)
            if p is not None:
                x, y, d = p
                key = (name, d, d)
                want = _memo.get(key)
                nx, ny = x.ndim, y.ndim
                if want and 1 <= nx <= 2 and 1 <= ny <= 2 and x.shape[-1] == y.shape[0]:
                    lim = _limit()
                    if lim and x.size <= lim and y.size <= lim and \
                            (x.shape[0] if nx == 2 else 1) * (y.shape[1] if ny == 2 else 1) <= lim:
                        got = _taken(key, _result(_quiet(np.matmul, x, y), want), want)
                        if got is not None:
                            return got
                elif want is None:
                    return _learn(key, slow(a, b))
        return slow(a, b, *rest, **kwargs)

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
    _stats["fast"] += 1
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
                        got = _taken(key, _result(_quiet(np.multiply, x.reshape(-1, 1), y.reshape(1, -1)), want),
                                     want)
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
                if u.op is _BUFFER and u.dtype.kind != "c":  # (a complex sum is two float sums in svod)
                    key = ("sum", u.dtype, None)
                    want = _memo.get(key)
                    if want:
                        x = u.arg.array
                        lim = _limit()
                        if lim and x.size <= lim and x.size:
                            r = _result(_quiet(reduce_numpy, "sum", x, tuple(range(x.ndim)), want[1]).reshape(()),
                                        want)
                            if r is not None:
                                _stats["fast"] += 1
                                return _wrap(np.array(r), want[0])  # (the reshape is a view: a fresh array)
                            _memo[key] = False
                    elif want is None:
                        return _learn(key, slow(a))
        return slow(a, *rest, **kwargs)

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


def install(ndarray, namespace: dict) -> None:
    """Put the fast paths in front of `ndarray`'s operators and of the functions and ufuncs
    of the `svod.numpy` namespace `namespace` (their full paths are what was there)."""
    global _ndarray
    _ndarray = ndarray
    for op, (npf, name, reflected) in _OPERATORS.items():
        # NOTE: a reflected operator's memo is its forward op's with the operands swapped:
        # its own name keeps the two apart (`2 - a` and `a - 2` promote alike, the key stays honest)
        setattr(ndarray, op, _binary(name + ("/r" if reflected else ""), npf, getattr(ndarray, op), reflected))
    for op, (npf, name) in _INPLACE.items():
        setattr(ndarray, op, _inplace(name, npf, getattr(ndarray, op)))
    ndarray.__neg__ = _unary("negative", np.negative, ndarray.__neg__)
    ndarray.__getitem__ = _getitem(ndarray.__getitem__)
    ndarray.__setitem__ = _setitem(ndarray.__setitem__)
    ndarray.__matmul__ = _matmul_like("matmul", ndarray.__matmul__)
    ndarray.dot = _matmul_like("matmul", ndarray.dot)
    for name, npf in UNARY.items():
        u = namespace[name]
        u._call = _function(name, npf, u._call, 1)
    for name, npf in BINARY.items():
        u = namespace[name]
        u._call = _function(name, npf, u._call, 2)
    namespace["dot"] = _matmul_like("matmul", namespace["dot"])
    namespace["matmul"] = _matmul_like("matmul", namespace["matmul"])
    namespace["outer"] = _outer(namespace["outer"])
    namespace["sum"] = _sum(namespace["sum"])
