"""The UOp graph: immutable, hash-consed nodes `(op, dtype, src, arg)`.

Every node is unique for its structure (a weak-value cache hands back the existing
object), so equality is identity and graphs share structure for free. Each node also
carries its `shape` (derived from op, sources and arg) and a structural content hash
that is stable across processes (blake2b, never Python's salted `hash()`).
All walks are iterative: a 100,000-node chain must not hit the recursion limit. Each node
keeps its depth (`_depth`: the longest path to a leaf; BUFFER and CONST are 0), which the
Tensor layer's pending-depth budget reads (`SVOD_PENDING_DEPTH`, docs/planning.md).
The op classes below (`UNARY`, `BINARY`, ...) are projections of the op table
(`svod.ops`, where `Ops` is defined; re-exported here).

>>> from svod.ir import UOp, Ops
>>> from svod import dtype as d
>>> a = UOp.const(2.0, d.float32)
>>> UOp(Ops.ADD, d.float32, (a, a)) is UOp(Ops.ADD, d.float32, (a, a))
True
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import math
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from svod.dtype import DType
from svod.errors import ShapeError
from svod.ops import REDUCE_OPS, Ops, ops_where
from svod.view import Shaped

UNARY = ops_where(kind="unary")
BINARY = ops_where(kind="binary")
BOOL_UNARY = ops_where(kind="unary", bool_result=True)  # result bool whatever the source dtype
COMPARE = ops_where(kind="binary", bool_result=True)
ELEMENTWISE = UNARY | BINARY | ops_where(kind="ternary")
_SAME_SHAPE = UNARY | ops_where(kind="boundary")  # one source, its shape
REDUCTIONS = ops_where(kind="reduction")
MOVEMENT = ops_where(kind="movement")


class BufferRef:
    """A realized value: a numpy array owned by the graph. Hashes by identity.

    `serial` is a process-local counter used in content hashes and reprs.
    """

    __slots__ = ("array", "serial", "__weakref__")
    _counter = itertools.count()

    def __init__(self, array: np.ndarray):
        self.array = array
        self.serial = next(BufferRef._counter)

    def __repr__(self) -> str:
        return f"buf{self.serial}"


_INTS = object()  # `_canon`'s tag of a tuple of plain ints (no arg can hold it)


def _canon(arg: Any) -> Any:
    """Hash-consing key for an arg: keeps -0.0 apart from 0.0, 1 from 1.0 and True, NaN equal.
    (In-memory only; content hashes use `_hash_arg`.)"""
    t = type(arg)
    if t is float:  # NOTE: the hot case (scalars in expressions); hex() only where == is not identity
        return ("f", arg) if arg == arg and arg != 0.0 else ("f", arg.hex())
    if t is int:
        return ("i", arg)
    if t is tuple:  # NOTE: shapes and axes (every movement and reduction arg) are tuples of ints
        for a in arg:
            if type(a) is not int:
                return tuple([_canon(a) for a in arg])
        return (_INTS, arg)  # equal int tuples are equal keys; the private tag keeps them apart from all else
    if t is complex:
        return ("c", arg.real.hex(), arg.imag.hex())
    if isinstance(arg, bool):
        return ("b", arg)
    if isinstance(arg, int):
        return ("i", arg)
    if isinstance(arg, float):
        return ("f", arg) if arg == arg and arg != 0.0 else ("f", float(arg).hex())
    if isinstance(arg, tuple):
        return tuple(_canon(a) for a in arg)
    return arg


def _hash_arg(arg: Any) -> bytes:
    """Stable bytes for an arg (for the content hash)."""
    if isinstance(arg, BufferRef):
        return b"buf%d" % arg.serial
    if isinstance(arg, DType):
        return arg.name.encode()
    if isinstance(arg, enum.Enum):
        return str(arg.value).encode()
    if isinstance(arg, float):
        return b"f" + arg.hex().encode()
    if isinstance(arg, complex):
        return b"c" + arg.real.hex().encode() + b"," + arg.imag.hex().encode()
    if isinstance(arg, bool):
        return b"b1" if arg else b"b0"
    if isinstance(arg, int):
        return b"i%d" % arg
    if isinstance(arg, str):
        return b"s" + arg.encode()
    if isinstance(arg, tuple):
        return b"(" + b",".join(_hash_arg(a) for a in arg) + b")"
    if arg is None:
        return b"N"
    raise TypeError(f"UOp arg of type {type(arg).__name__} has no stable hash")


def _prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _infer_shape(op: Ops, src: tuple[UOp, ...], arg: Any) -> tuple[int, ...]:
    if op is Ops.BUFFER:
        return tuple(arg.array.shape)
    if op is Ops.CONST:
        return ()
    if op in BINARY:
        s = src[0].shape
        assert src[1].shape == s, f"{op}: shapes differ {s} {src[1].shape}"
        return s
    if op in ELEMENTWISE or op is Ops.CONTIGUOUS:
        s = src[0].shape
        assert all(x.shape == s for x in src), f"{op}: shapes differ {[x.shape for x in src]}"
        return s
    if op is Ops.REDUCE:
        axes = set(arg[1])
        return tuple(1 if i in axes else n for i, n in enumerate(src[0].shape))
    if op in (Ops.ARGMAX, Ops.ARGMIN):
        return tuple(1 if i == arg else n for i, n in enumerate(src[0].shape))
    if op is Ops.RESHAPE:
        assert _prod(arg) == _prod(src[0].shape), f"RESHAPE {src[0].shape} -> {arg}"
        return tuple(arg)
    if op is Ops.PERMUTE:
        assert sorted(arg) == list(range(len(src[0].shape))), f"PERMUTE {arg}"
        return tuple(src[0].shape[i] for i in arg)
    if op is Ops.EXPAND:
        s = src[0].shape
        assert len(arg) == len(s) and all(a == b or a == 1 for a, b in zip(s, arg)), f"EXPAND {s} -> {arg}"
        return tuple(arg)
    if op is Ops.SHRINK:
        assert len(arg) == len(src[0].shape)
        assert all(0 <= b <= e <= n for (b, e), n in zip(arg, src[0].shape)), f"SHRINK {src[0].shape} {arg}"
        return tuple(e - b for b, e in arg)
    if op is Ops.FLIP:
        return src[0].shape
    if op is Ops.PAD:
        pads = arg[0]
        assert len(pads) == len(src[0].shape)
        return tuple(n + lo + hi for n, (lo, hi) in zip(src[0].shape, pads))
    if op is Ops.CAT:
        s0 = src[0].shape
        out = list(s0)
        out[arg] = sum(x.shape[arg] for x in src)
        return tuple(out)
    if op is Ops.MATMUL:
        a, b = src[0].shape, src[1].shape
        assert a[:-2] == b[:-2] and a[-1] == b[-2], f"MATMUL {a} @ {b}"
        return a[:-1] + (b[-1],)
    if op is Ops.LIBRARY:
        return tuple(arg[3])
    raise AssertionError(f"no shape rule for {op}")


# The largest array, in bytes, as numpy's: what a 64-bit address space (and svod's int64
# index arithmetic) can hold.
MAX_NBYTES = 2**63 - 1
_GROWS = ops_where(grows=True)  # may make a bigger array


def check_size(shape: tuple[int, ...], dtype: DType) -> None:
    """Raise ShapeError (numpy's "array is too big") for a shape whose elements of `dtype`
    would not fit in `MAX_NBYTES`, or with an axis longer than an int64 can count.
    The message is labelled with the op the user called (svod.errors)."""
    size = math.prod(shape)
    if size * dtype.itemsize > MAX_NBYTES or (size == 0 and any(n > MAX_NBYTES for n in shape)):
        raise ShapeError(f"array is too big: shape {shape_str(shape)} of {dtype} would take {size * dtype.itemsize} "
                         f"bytes, more than the {MAX_NBYTES} a 64-bit address space can hold")


class UOp(Shaped):
    """An immutable graph node. Construct with `UOp(op, dtype, src, arg)`; equal structure
    gives the same object."""

    __slots__ = ("op", "dtype", "src", "arg", "shape", "_hash", "_kb", "_sig", "_leaves", "_depth", "__weakref__")
    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    shape: tuple[int, ...]

    # key -> weakref to the node; a node's death removes its entry (see _forget). A plain
    # dict of weakrefs: WeakValueDictionary's Python-level get/set costs more per node (docs/ops.md).
    _cache: dict = {}

    def __new__(cls, op: Ops, dtype: DType, src: tuple[UOp, ...] = (), arg: Any = None):
        carg = arg if arg is None or op is _BUFFER_OP else _canon(arg)
        key = (op, dtype, src, carg)
        cache = _NODE_CACHE
        ref = cache.get(key)
        if ref is not None:
            hit = ref()
            if hit is not None:
                return hit
        return make_node(cls, op, dtype, src, arg, carg, key)

    # identity semantics (hash-consed)
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __reduce__(self):
        raise TypeError("UOps are process-local; use svod.key.compact for a portable form")

    @property
    def content_hash(self) -> str:
        """Structural hash, stable across processes (hex)."""
        if self._hash is None:
            for n in toposort([self], stop=_HASHED):
                h = hashlib.blake2b(digest_size=16)
                h.update(n.op.value.encode())
                h.update(n.dtype.name.encode())
                h.update(_hash_arg(n.arg))
                for s in n.src:
                    h.update(s._hash)
                n._hash = h.digest()
        return self._hash.hex()



    @staticmethod
    def const(value, dtype: DType) -> UOp:
        return UOp(Ops.CONST, dtype, (), _py_scalar(value, dtype))

    @staticmethod
    def buffer(array: np.ndarray, dtype: DType) -> UOp:
        """A realized leaf. NOTE: a fresh BufferRef can never be a hash-consing hit, so the
        node skips the cache (this is the hot path of every realize and every replay)."""
        ref = _new_object(BufferRef)  # NOTE: BufferRef(array) inline (a Python __init__ call)
        ref.array = array
        ref.serial = _next_serial()
        self = _new_object(UOp)
        self.op = _BUFFER_OP
        self.dtype = dtype
        self.src = ()
        self.arg = ref
        self.shape = shape = array.shape  # a tuple already
        self._hash = self._kb = None
        self._depth = 0
        k = ("B", dtype, shape, array.strides)
        self._sig = _SIGS.get(k) or _intern(k)
        self._leaves = (ref,)  # NOTE: the BufferRef, not the node: (self,) would be a cycle
        return self

    @staticmethod
    def buffer_source(array: str, dtype: str, sig: str, out: str, indent: str = "    ",
                      shape: str | None = None) -> list[str]:
        """Python source lines that bind `out` to a node equal to ``buffer(array, dtype)``
        with its structural signature given (`sig`: the `_sig` of a `buffer` of an array
        of the same dtype, shape and strides) — names of variables in generated replay
        code, where a call per leaf shows (docs/ops.md). `shape`: a name bound to a tuple
        equal to ``array.shape`` (one attribute read less), else the array's own. The
        generated code's namespace needs `buffer_namespace()`; keep both in step with
        `buffer`."""
        r = f"{out}_ref"
        shape = shape or f"{array}.shape"
        return [f"{indent}{r} = _new(_BufferRef); {r}.array = {array}; {r}.serial = _next(_serials)",
                f"{indent}{out} = _new(_UOp); {out}.op = _BUFFER; {out}.dtype = {dtype}; {out}.src = (); "
                f"{out}.arg = {r}; {out}.shape = {shape}",
                f"{indent}{out}._hash = None; {out}._kb = None; {out}._depth = 0; {out}._sig = {sig}; "
                f"{out}._leaves = ({r},)"]

    @staticmethod
    def buffer_namespace() -> dict:
        """The names `buffer_source` lines use."""
        return {"_new": object.__new__, "_BufferRef": BufferRef, "_UOp": UOp, "_BUFFER": Ops.BUFFER, "_next": next,
                "_serials": BufferRef._counter}

    def toposort(self) -> list[UOp]:
        return toposort([self])

    def __repr__(self) -> str:
        arg = "" if self.arg is None else f", arg={self.arg!r}"
        return f"UOp({self.op.name}, {self.dtype}, shape={self.shape}, nsrc={len(self.src)}{arg})"



def make_node(cls, op: Ops, dtype: DType, src: tuple, arg: Any, carg: Any, key: tuple) -> UOp:
    """The node of hash-consing key `key` = ``(op, dtype, src, carg)`` (``carg == _canon(arg)``,
    `arg` itself for a BUFFER or None), made after the caller's lookup of `key` missed:
    `UOp.__new__`'s miss path, which `tensor._node1/_node2` call directly (their key has
    no arg: one lookup and no type call per new node)."""
    cache = _NODE_CACHE
    self = _new_object(cls)
    self.op, self.dtype, self.src, self.arg = op, dtype, src, arg
    self._hash = None  # NOTE: computed on demand; most nodes never need it
    self._kb = None  # cached key-encoding parts (svod.key.compact)
    # NOTE: the unary and binary cases of _infer_shape and _signature inline (every op)
    if len(src) == 1 and op in _SAME_SHAPE:
        s = src[0]
        self.shape = s.shape
        self._depth = s._depth + 1
        if s._sig is None:
            self._sig = self._leaves = None
        else:
            k = (op, dtype, carg, s._sig)
            self._sig = _SIGS.get(k) or _intern(k)
            self._leaves = s._leaves
    elif len(src) == 2 and op in BINARY:
        a, b = src
        self.shape = s = a.shape
        da, db = a._depth, b._depth
        self._depth = (da if da > db else db) + 1
        assert b.shape == s, f"{op}: shapes differ {s} {b.shape}"
        la, lb = a._leaves, b._leaves
        if a._sig is None or b._sig is None:
            self._sig = self._leaves = None
        elif la == lb or not lb or not la:  # one leaf list (`_signature`'s common cases)
            k = (op, dtype, carg, a._sig, b._sig)
            self._sig = _SIGS.get(k) or _intern(k)
            self._leaves = la or lb
        else:
            self._sig, self._leaves = _signature(key, src)
    else:
        self.shape = _infer_shape(op, src, arg)
        self._depth = max([s._depth for s in src], default=-1) + 1
        if op in _GROWS:
            check_size(self.shape, dtype)
        self._sig, self._leaves = _signature(key, src)
    new = _NodeRef(self, _forget)
    new.key = key
    # NOTE: setdefault is atomic under the GIL: if another thread built the same node
    # meanwhile, keep its node (a dead entry awaiting its callback is replaced)
    ref = cache.setdefault(key, new)
    if ref is not new:
        hit = ref()
        if hit is not None:
            return hit
        cache[key] = new
    return self


def _py_scalar(value, dtype: DType):
    """Canonical Python scalar of a constant for its dtype."""
    if dtype.is_float:
        return float(value)
    if dtype.is_complex:
        return complex(value)
    if dtype.is_int:
        return int(value)
    return bool(value)


class _Hashed:
    """A `stop` set for toposort: nodes whose content hash is already known."""

    def __contains__(self, u) -> bool:
        return u._hash is not None


_HASHED = _Hashed()


def toposort(roots: Iterable[UOp], stop: Any = ()) -> list[UOp]:
    """All nodes reachable from `roots`, sources before users, deterministic order.

    Iterative DFS: sources are visited in order, so the order depends only on structure.
    Nodes in `stop` (a set or dict) are neither descended into nor returned.
    """
    order: list[UOp] = []
    seen: set[int] = set()
    for root in roots:
        if id(root) in seen or root in stop:
            continue
        stack: list[tuple[UOp, int]] = [(root, 0)]
        seen.add(id(root))
        while stack:
            node, i = stack[-1]
            if i < len(node.src):
                stack[-1] = (node, i + 1)
                child = node.src[i]
                if id(child) not in seen and child not in stop:
                    seen.add(id(child))
                    stack.append((child, 0))
            else:
                stack.pop()
                order.append(node)
    return order


def substitute(roots: list[UOp], mapping: dict[UOp, UOp], memo: dict[UOp, UOp] | None = None) -> list[UOp]:
    """Rebuild `roots` with every node in `mapping` replaced (iteratively).

    `memo` may be shared between calls so that many roots with common structure are
    rewritten in time proportional to their distinct nodes.
    """
    memo = {} if memo is None else memo
    memo.update(mapping)
    for node in toposort(roots, stop=memo):
        new_src = tuple(memo.get(s, s) for s in node.src)
        memo[node] = node if new_src == node.src else UOp(node.op, node.dtype, new_src, node.arg)
    return [memo.get(r, r) for r in roots]


class OP:
    """Plain class attributes naming the `Ops` members: ``OP.MUL is Ops.MUL``. An ``Ops.X``
    access goes through the enum machinery, slower than a class attribute (docs/ops.md);
    the per-op paths of the frontend name members through `OP`."""


for _m in Ops:
    setattr(OP, _m.name, _m)

_NODE_CACHE = UOp._cache
_BUFFER_OP = Ops.BUFFER
_new_object = object.__new__
_next_serial = BufferRef._counter.__next__
_cache_get = _NODE_CACHE.get


def ints_node(op: Ops, dtype: DType, u: UOp, arg: tuple) -> UOp:
    """``UOp(op, dtype, (u,), arg)`` for `arg` a tuple of plain Python ints (a shape, axes,
    a permutation): the node found by its hash-consing key first, without the type call
    and `_canon` (`_canon` of such a tuple is ``(_INTS, arg)``). The movement and
    reduction frontends' hot path; the caller guarantees the int tuple (anything else
    must go through `UOp`, whose key would differ: a miss, never a wrong hit)."""
    ref = _cache_get((op, dtype, (u,), (_INTS, arg)))
    if ref is not None:
        n = ref()
        if n is not None:
            return n
    return UOp(op, dtype, (u,), arg)


def reduce_node(dtype: DType, u: UOp, rop: str, axes: tuple) -> UOp:
    """``UOp(Ops.REDUCE, dtype, (u,), (rop, axes))`` for `axes` a tuple of plain ints (sorted,
    distinct, in range), found by its hash-consing key first (`ints_node`'s shortcut)."""
    ref = _cache_get((_REDUCE_OP, dtype, (u,), (rop, (_INTS, axes))))
    if ref is not None:
        n = ref()
        if n is not None:
            return n
    return UOp(_REDUCE_OP, dtype, (u,), (rop, axes))


def keyed_node(op: Ops, dtype: DType, u: UOp, arg: Any, carg: Any) -> UOp:
    """``UOp(op, dtype, (u,), arg)`` with ``carg == _canon(arg)`` known to the caller (a
    memoised recipe of movement steps), found by its hash-consing key first."""
    ref = _cache_get((op, dtype, (u,), carg))
    if ref is not None:
        n = ref()
        if n is not None:
            return n
    return UOp(op, dtype, (u,), arg)


_REDUCE_OP = Ops.REDUCE

# ----------------------------------------------------------------------------- signatures
# A structural signature is a small int naming a UOp's graph up to the identity of its
# realized leaves: op, dtype, arg and shape of every node, the (dtype, shape, strides) of
# each leaf, and which leaf occurrences are the same buffer. With hash-consing that is
# the whole DAG (two nodes are one object iff their structure and leaves are equal), so
# equal signatures compact to equal GraphKeys with leaves in a fixed correspondence: the
# engine's replay cache maps a signature straight to its plan, skipping compaction.
# Computed at construction (one dict lookup per new node). Ids are never reused, so the
# table can be dropped when it grows without ever confusing two structures.

MAX_SIG_LEAVES = 16  # wider graphs get no signature (merging leaf lists would cost more)
_SIGS: dict = {}
_sig_ids = itertools.count(1)


def _intern(k) -> int:
    sig = _SIGS.get(k)
    if sig is None:
        if len(_SIGS) > 200_000:
            _SIGS.clear()
        sig = _SIGS.setdefault(k, next(_sig_ids))
    return sig


def merge_leaves(nodes) -> tuple[Any, tuple]:
    """(pattern, leaves): the distinct leaves (BufferRefs) of `nodes` in first-occurrence order, and for
    each node the positions of its leaves in that list (pattern 0 when every node with
    leaves has the same leaf tuple); (None, None) when a node has no signature or there
    are more than MAX_SIG_LEAVES leaves."""
    first = ()
    same = True
    for n in nodes:
        lv = n._leaves
        if lv is None:
            return None, None
        if lv:
            if not first:
                first = lv
            elif lv != first:
                same = False
                break
    if same:
        return 0, first
    pos: dict = {}
    merged: list = []
    pattern = []
    for n in nodes:
        idx = []
        for leaf in n._leaves:
            j = pos.get(leaf)
            if j is None:
                j = pos[leaf] = len(merged)
                merged.append(leaf)
            idx.append(j)
        pattern.append(tuple(idx))
    if len(merged) > MAX_SIG_LEAVES:
        return None, None
    return tuple(pattern), tuple(merged)


def _signature(key: tuple, src: tuple) -> tuple[int | None, tuple | None]:
    op, dtype, _, carg = key
    if not src:
        return _intern((op, dtype, carg)), ()
    if len(src) == 1:
        s = src[0]
        if s._sig is None:
            return None, None
        return _intern((op, dtype, carg, s._sig)), s._leaves
    if len(src) == 2:  # the common binary cases: one leaf list, or leaves on one side
        a, b = src
        la, lb = a._leaves, b._leaves
        if a._sig is None or b._sig is None:
            return None, None
        if la == lb or not lb:
            return _intern((op, dtype, carg, a._sig, b._sig)), la
        if not la:
            return _intern((op, dtype, carg, a._sig, b._sig)), lb
    return _merged_signature((op, dtype, carg), src)


def signature_of(roots) -> tuple[int | None, tuple | None]:
    """(signature, leaves) of several roots together, or (None, None)."""
    if len(roots) == 1:
        return roots[0]._sig, roots[0]._leaves
    if len(roots) == 2:  # `_merged_signature(("R",), roots)` when both have one leaf list or one has none
        a, b = roots
        sa, sb = a._sig, b._sig
        if sa is None or sb is None:
            return None, None
        la, lb = a._leaves, b._leaves
        if la == lb or not lb or not la:
            k = ("R", (sa, sb), 0)
            return _SIGS.get(k) or _intern(k), la or lb
    return _merged_signature(("R",), roots)


def _merged_signature(head: tuple, nodes) -> tuple[int | None, tuple | None]:
    """The signature `head + (signatures of nodes, leaf pattern)` and the merged leaves,
    or (None, None) when a node has none or the leaves are too many."""
    sigs = tuple(n._sig for n in nodes)
    if None in sigs:
        return None, None
    pattern, leaves = merge_leaves(nodes)
    if leaves is None:
        return None, None
    return _intern((*head, sigs, pattern)), leaves


class _NodeRef(weakref.ref):
    """The cache's weak reference to a node, carrying its cache key."""

    __slots__ = ("key",)


def _forget(ref: _NodeRef) -> None:
    # only drop the entry if it still refers to the dead node (a new one may own it)
    cache = UOp._cache
    key = ref.key
    if cache.get(key) is ref:
        try:
            del cache[key]
        except KeyError:  # raced with another thread's removal
            pass


def live_nodes() -> int:
    """Number of UOps alive in this process (the hash-consing cache size)."""
    return sum(1 for r in list(UOp._cache.values()) if r() is not None)


def is_realized(u: UOp) -> bool:
    return u.op is Ops.BUFFER


def reduce_identity(rop: str, dtype: DType):
    from svod.dtype import max_value, min_value

    return {"sum": 0, "prod": 1, "max": min_value(dtype), "min": max_value(dtype)}[rop]


def shape_str(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


__all__ = ["UOp", "Ops", "BufferRef", "toposort", "substitute", "live_nodes", "is_realized",
           "UNARY", "BINARY", "COMPARE", "ELEMENTWISE", "REDUCTIONS", "MOVEMENT", "REDUCE_OPS"]
