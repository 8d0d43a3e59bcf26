"""Indexing: basic indices build lazy movement ops; advanced ones realize eagerly.

Basic indexing (ints, slices with any step, `None`, `...`) becomes SHRINK / FLIP /
RESHAPE (a step `s` is a pad + reshape + shrink, which the view algebra folds into a
strided view). Boolean masks and integer arrays have data-dependent shapes or gathers:
they realize their inputs and index with numpy (DESIGN "Numbers and dtypes").
`x[key] = v` rebinds `x` to a functional update: `where(mask, placed(v), x)`.

>>> import svod
>>> x = svod.arange(10)
>>> x[::-3].tolist(), x[2:8:2].tolist()
([9, 6, 3, 0], [2, 4, 6])
"""

from __future__ import annotations

import operator

import numpy as np

from svod import dtype as dt
from svod import eager as _eager
from svod import tensor as _T
from svod.elementwise import broadcast_to, where
from svod.errors import ShapeError, SvodIndexError
from svod.ir import Ops, UOp, _canon, shape_str
from svod.ir import keyed_node as _keyed_node
from svod.tensor import Tensor, WeakScalar, _from_numpy, asarray


def _is_int(k) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _is_advanced(k) -> bool:
    if isinstance(k, (Tensor, np.ndarray, list)):
        return True
    return isinstance(k, (bool, np.bool_))


def _slice_span(k: slice, n: int) -> tuple[int, int, int, int]:
    """Slice `k` of an axis of size `n` as (begin, end, length, step): the elements taken
    are begin, begin + |step|, ... below end, read backwards when step < 0."""
    start, stop, step = k.indices(n)
    if step > 0:
        length = max(0, -(-(stop - start) // step))
        b = start
    else:
        length = max(0, -(-(start - stop) // -step))
        b = start + (length - 1) * step if length else 0
    return b, b + (length - 1) * abs(step) + 1 if length else b, length, step


def _expand_key(key, ndim: int, shape) -> list:
    """Normalise `key` to a list with exactly one entry per consumed axis plus Nones."""
    if not isinstance(key, tuple):
        key = (key,)
    n_ellipsis = sum(1 for k in key if k is Ellipsis)
    if n_ellipsis > 1:
        raise SvodIndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > ndim:
        raise SvodIndexError(f"too many indices for array: array of shape {shape_str(shape)} is "
                             f"{ndim}-dimensional, but {consumed} were indexed")
    out = []
    for k in key:
        if k is Ellipsis:
            out.extend([slice(None)] * (ndim - consumed))
        else:
            out.append(k)
    if not n_ellipsis:
        out.extend([slice(None)] * (ndim - consumed))
    return out


def _step_slice(u: UOp, axis: int, step: int) -> UOp:
    """Every `step`-th element along `axis` (step > 1) via pad + reshape + shrink."""
    n = u.shape[axis]
    m = -(-n // step)
    d = u.dtype
    if m * step != n:
        pads = tuple((0, m * step - n) if i == axis else (0, 0) for i in range(u.ndim))
        u = UOp(Ops.PAD, d, (u,), (pads, _zero(d)))
    shape = u.shape[:axis] + (m, step) + u.shape[axis + 1:]
    u = UOp(Ops.RESHAPE, d, (u,), shape)
    u = UOp(Ops.SHRINK, d, (u,), tuple((0, 1) if i == axis + 1 else (0, s) for i, s in enumerate(shape)))
    return UOp(Ops.RESHAPE, d, (u,), shape[:axis + 1] + shape[axis + 2:])


def _zero(d):
    return 0.0 if d.is_float else (False if d.is_bool else 0)


def basic_index(u: UOp, key) -> UOp:
    """Apply a basic index (no arrays) to a UOp."""
    items = _expand_key(key, u.ndim, u.shape)
    d = u.dtype
    axis = 0
    shrink, flips, steps, out_shape = [], [], [], []
    for k in items:
        if k is None:
            out_shape.append(("new",))
            continue
        n = u.shape[axis]
        if _is_int(k):
            i = operator.index(k)
            if not -n <= i < n:
                raise SvodIndexError(f"index {i} is out of bounds for axis {axis} with size {n} "
                                     f"(array shape {shape_str(u.shape)})")
            i %= n
            shrink.append((i, i + 1))
            out_shape.append(("drop",))
        elif isinstance(k, slice):
            b, e, length, step = _slice_span(k, n)
            shrink.append((b, e) if length else (0, 0))
            if step < 0 and length > 1:
                flips.append(axis)
            if abs(step) > 1 and length > 1:
                steps.append((axis, abs(step)))
            out_shape.append(("keep",))
        else:
            raise SvodIndexError(f"only integers, slices (`:`), ellipsis (`...`), None and integer or "
                                 f"boolean arrays are valid indices, got {type(k).__name__}")
        axis += 1
    if any(s != (0, n) for s, n in zip(shrink, u.shape)):
        u = UOp(Ops.SHRINK, d, (u,), tuple(shrink))
    if flips:
        u = UOp(Ops.FLIP, d, (u,), tuple(flips))
    for ax, st in steps:
        u = _step_slice(u, ax, st)
    final = []
    axis = 0
    for kind in out_shape:
        if kind[0] == "new":
            final.append(1)
        elif kind[0] == "drop":
            axis += 1
        else:
            final.append(u.shape[axis])
            axis += 1
    final = tuple(final)
    if final != u.shape:
        u = UOp(Ops.RESHAPE, d, (u,), final)
    return u


def _int_scalars(key):
    """`key` with 0-d integer Tensors replaced by Python ints (numpy treats a 0-d integer
    array index as an integer): basic indexing stays lazy, and inside `svod.jit` the value
    of a traced Python int becomes a guard instead of a read of the indexed array."""
    items = key if isinstance(key, tuple) else (key,)
    if not any(isinstance(k, Tensor) and k.ndim == 0 and k.dtype.is_int for k in items):
        return key
    out = tuple(operator.index(k) if isinstance(k, Tensor) and k.ndim == 0 and k.dtype.is_int else k for k in items)
    return out if isinstance(key, tuple) else out[0]


def _numpy_key(key):
    """Convert Tensors inside an advanced key into numpy arrays (realizing them)."""
    items = key if isinstance(key, tuple) else (key,)
    out = []
    for k in items:
        if isinstance(k, Tensor):
            k = k.numpy()
        if isinstance(k, list):
            k = np.asarray(k) if len(k) else np.zeros(0, np.int64)  # numpy: x[[]] is an empty int index
            if k.dtype.kind not in "biu":
                raise SvodIndexError(f"arrays used as indices must be of integer or boolean type, got {k.dtype}")
        if isinstance(k, np.ndarray) and k.dtype.kind not in "biu":
            raise SvodIndexError(f"arrays used as indices must be of integer or boolean type, got {k.dtype}")
        out.append(k)
    return tuple(out) if isinstance(key, tuple) else out[0]


def _basic_key(key) -> bool:
    """`key` is made of Python/numpy ints, slices, None and Ellipsis only (what numpy and
    svod index alike; anything else takes the lazy path, which raises svod's errors)."""
    for k in key if type(key) is tuple else (key,):
        t = type(k)
        if t is int or t is slice or k is None or k is Ellipsis:
            continue
        if isinstance(k, np.integer):
            continue
        return False
    return True


def _eager_getitem(x, key):
    """`x[key]` of a realized `x` with numpy when the result is small (svod.eager), else None."""
    lim = _eager.limit()
    if not lim or _T._READ_HOOK is not None:
        return None
    u = x.uop
    try:
        v = u.arg.array[key]
    except (IndexError, TypeError, ValueError):
        return None  # the lazy path raises svod's error
    if type(v) is np.ndarray:
        if v.size > lim:
            return None
        arr = v.copy()  # C order: a slice is a value (svod's semantics), not a view
    else:  # one element: a numpy scalar
        arr = np.array(v)
    if arr.dtype != u.dtype.np:
        return None
    arr.flags.writeable = False
    return Tensor._from(UOp.buffer(arr, u.dtype))


# (shape, dtype, `_key_code` of a basic key) -> the movement steps `basic_index` makes of it,
# bottom up, as (op, arg, canonical arg): a key seen before on a shape replays its steps
# without parsing it again (`x[:, None]`, `x[i]` in loops). Bounded; dropped when full.
_RECIPES: dict = {}


def _key_code(key):
    """A hashable code of a basic key made of plain ints, slices of plain ints and None,
    None and Ellipsis only (what `basic_index` alone decides, from the shape); None for
    any other key (numpy ints, bools, arrays, Tensors: the general path)."""
    out = []
    for k in key if type(key) is tuple else (key,):
        t = type(k)
        if t is slice:
            a, b, c = k.start, k.stop, k.step
            if not ((a is None or type(a) is int) and (b is None or type(b) is int) and (c is None or type(c) is int)):
                return None
            out.append((a, b, c))
        elif t is int or k is None or k is Ellipsis:
            out.append(k)
        else:
            return None
    return tuple(out)


def _memo_index(u: UOp, code, key) -> UOp:
    """`basic_index(u, key)`, its steps memoised by (shape, dtype, `code`): the same nodes
    (basic indexing depends on the key, the shape and — a step's pad value — the dtype)."""
    rk = (u.shape, u.dtype, code)
    steps = _RECIPES.get(rk)
    if steps is None:
        r = basic_index(u, key)  # (raises for an index out of bounds: never memoised)
        chain = []
        n = r
        while n is not u:
            chain.append((n.op, n.arg, _canon(n.arg)))
            n = n.src[0]
        if len(_RECIPES) > 4096:
            _RECIPES.clear()
        _RECIPES[rk] = tuple(reversed(chain))
        return r
    d = u.dtype
    for op, arg, carg in steps:
        u = _keyed_node(op, d, u, arg, carg)
    return u


def getitem(x, key):
    code = _key_code(key)
    if code is not None:  # a basic key of plain Python values: memoised steps
        u = x.uop
        if u.op is Ops.BUFFER and _T._EAGER is not None:  # (None: no thread can run eager work yet)
            r = _eager_getitem(x, key)
            if r is not None:
                return r
        return _T._from(_memo_index(u, code, key))
    if x.uop.op is Ops.BUFFER and _basic_key(key):  # (a basic key holds no 0-d Tensor: no _int_scalars)
        r = _eager_getitem(x, key)
        if r is not None:
            return r
    key = _int_scalars(key)
    items = key if isinstance(key, tuple) else (key,)
    if any(_is_advanced(k) for k in items):
        arr = x.numpy()
        try:
            res = arr[_numpy_key(key)]
        except IndexError as e:
            raise SvodIndexError(f"getitem: {e} (array shape {shape_str(x.shape)})") from e
        return _from_numpy(np.array(res, copy=True), copy=False)
    return Tensor._from(basic_index(x.uop, key))


def _fits(vshape, region) -> bool:
    """svod's broadcast of a value of `vshape` to `region` (`broadcast_to`'s rule)."""
    if len(vshape) > len(region):
        return False
    return all(a == b or a == 1 for a, b in zip(vshape, region[len(region) - len(vshape):]))


def _eager_setitem(x, key, value):
    """`x[key] = value` with numpy for a realized `x` (svod.eager): written in place when
    `x`'s buffer has no other owner (`eager.sole_owner`), else into a copy, which is ours,
    so that later writes of concrete values go in place (one memcpy: the lazy `where`
    would read all of `x` and write a new array too, after planning it; a realize that
    read `x` keeps it in its caches, so the write after it copies again). A pending value is realized first (its
    own plan), a concrete one written as it is. None: the lazy path (a weak scalar, a
    shape it must refuse). Values, casts and errors are the lazy path's."""
    lim = _eager.limit()
    if not lim or _T._READ_HOOK is not None:
        return None
    try:
        region = np.shape(x.uop.arg.array[key])  # NOTE: no lasting reference to x's node or array
    except (IndexError, TypeError, ValueError):
        return None
    rsize = 1
    for n in region:
        rsize *= n
    if isinstance(value, Tensor):
        if type(value) is WeakScalar:
            return None
        v = value
    elif dt.scalar_kind(value):
        varr = np.array(value).astype(x.dtype.np)  # the lazy path's cast (and its warnings), as it does
        v = None
    else:
        v = asarray(value)
    if v is not None:
        if v.dtype != x.dtype:
            v = v.astype(x.dtype)
        vu = v.uop
        if not _fits(vu.shape, region):
            return None  # a shape mismatch raises on the lazy path
        if vu.op is not Ops.BUFFER:
            # a pending value (a big one: small ones ran eagerly) is computed now by its own
            # plan, whose reads of realized buffers fold into view leaves (svod.viewfold):
            # a loop writing rows of a realized array plans once, not once per offset
            _eager.realize_pending(v)  # (a structure that keeps making new plans runs with numpy)
            vu = v.uop
            if vu.op is not Ops.BUFFER:
                return None
        varr = vu.arg.array
    if rsize == 0:
        return x
    # NOTE: after the value is computed (a pending value's graph, which may read x, is gone)
    # and while this function holds no reference to x's node, BufferRef or array
    if _eager.sole_owner(x) or _eager.detach_views(x) and _eager.sole_owner(x):
        _eager.write_in_place(x, key, varr)
        return x
    u = x.uop
    new = np.array(u.arg.array, order="C", copy=True)
    new[key] = varr
    new.flags.writeable = False
    return Tensor._from(UOp.buffer(new, u.dtype))


def _filled(x):
    """`x` as a realized array when eager small work is on and `x` is a constant filled to
    its shape (`zeros`, `empty`, `full` and their `_like`s: numpy programs allocate an
    array to write into it), else `x` itself. The same value, so a write into it goes the
    eager way (in place from the first write on) instead of a lazy `where` per write."""
    if not _eager.limit() or _T._READ_HOOK is not None:
        return x
    u = x.uop
    while u.op is Ops.EXPAND or u.op is Ops.RESHAPE:
        u = u.src[0]
    if u.op is not Ops.CONST:
        return x
    arr = np.full(x.shape, u.arg, x.dtype.np)
    arr.flags.writeable = False
    return Tensor._from(UOp.buffer(arr, x.dtype))


def setitem(x, key, value):
    """Functional `x[key] = value`: returns the updated tensor (same shape and dtype). A
    realized `x` with a small region and a concrete value is written with numpy at once
    (svod.eager: in place when nothing else holds `x`'s buffer, else into a copy)."""
    if _basic_key(key):
        if x.uop.op is not Ops.BUFFER:
            x = _filled(x)
        if x.uop.op is Ops.BUFFER:
            r = _eager_setitem(x, key, value)
            if r is not None:
                return r
    key = _int_scalars(key)
    items = key if isinstance(key, tuple) else (key,)
    v = value if isinstance(value, Tensor) else asarray(value) if not dt.scalar_kind(value) else None
    if any(_is_advanced(k) for k in items):
        arr = np.array(x.numpy(), copy=True)
        try:
            arr[_numpy_key(key)] = v.numpy() if v is not None else value
        except (IndexError, ValueError) as e:
            raise SvodIndexError(f"setitem: {e} (array shape {shape_str(x.shape)})") from e
        return _from_numpy(arr, copy=False)
    region = basic_index(x.uop, key).shape
    if v is None:
        v = asarray(np.array(value).astype(x.dtype.np))
    if v.dtype != x.dtype:
        v = v.astype(x.dtype)
    try:
        v = broadcast_to(v, region)
    except ShapeError as e:
        raise ShapeError(f"setitem: value of shape {shape_str(v.shape)} cannot be broadcast to the indexed "
                         f"region {shape_str(region)}") from e
    if v.size == 0:
        return x
    placed = Tensor._from(_place(v.uop, key, x.shape))
    mask = Tensor._from(_place(_ones_bool(region), key, x.shape))
    return where(mask, placed, x)


def _ones_bool(shape):
    u = UOp.const(True, dt.bool_)
    if shape:
        u = UOp(Ops.EXPAND, dt.bool_, (UOp(Ops.RESHAPE, dt.bool_, (u,), (1,) * len(shape)),), tuple(shape))
    return u


def _place(v: UOp, key, shape) -> UOp:
    """The inverse of `basic_index`: put a region-shaped value back at its place in an
    array of `shape`, zero (False) elsewhere — lazily, with movement ops only."""
    items = [k for k in _expand_key(key, len(shape), shape) if k is not None]
    d = v.dtype
    per_axis = []  # (begin, end, length, step, flipped)
    for axis, k in enumerate(items):
        n = shape[axis]
        if _is_int(k):
            i = operator.index(k) % n
            per_axis.append((i, i + 1, 1, 1, False))
            continue
        b, e, length, step = _slice_span(k, n)
        per_axis.append((b, e, length, abs(step), step < 0 and length > 1))
    axis_shape = tuple(p[2] for p in per_axis)
    if v.shape != axis_shape:
        v = UOp(Ops.RESHAPE, d, (v,), axis_shape)
    flips = tuple(a for a, p in enumerate(per_axis) if p[4])
    if flips:
        v = UOp(Ops.FLIP, d, (v,), flips)
    for a, (b, e, length, step, _) in enumerate(per_axis):
        if step > 1 and length > 1:
            s = v.shape
            v = UOp(Ops.RESHAPE, d, (v,), s[:a + 1] + (1,) + s[a + 1:])
            pads = tuple((0, step - 1) if i == a + 1 else (0, 0) for i in range(len(s) + 1))
            v = UOp(Ops.PAD, d, (v,), (pads, _zero(d)))
            v = UOp(Ops.RESHAPE, d, (v,), s[:a] + (length * step,) + s[a + 1:])
            v = UOp(Ops.SHRINK, d, (v,), tuple((0, e - b) if i == a else (0, n) for i, n in enumerate(v.shape)))
    pads = tuple((p[0], n - p[1]) for p, n in zip(per_axis, shape))
    if any(p != (0, 0) for p in pads):
        v = UOp(Ops.PAD, d, (v,), (pads, _zero(d)))
    return v
