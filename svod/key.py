"""Compaction: a pending UOp graph -> an ID-normalised `GraphKey` plus `Bindings`.

The key re-indexes the nodes 0..N-1 in a deterministic topological order, turns every
realized input into a leaf described by (dtype, shape, strides) only, and keeps shapes,
axes, pads and constants as key data. Two graphs that differ only in node identities or
in the data of their inputs get equal keys, so a plan found for one replays for the other
(seed 002/003: the schedule cache keyed by a normalised graph).

>>> import numpy as np
>>> from svod.ir import UOp, Ops
>>> from svod import dtype as d
>>> def g(arr):
...     x = UOp.buffer(arr, d.float32)
...     return UOp(Ops.EXP, d.float32, (x,))
>>> k1, b1 = compact([g(np.zeros(3, np.float32))])
>>> k2, b2 = compact([g(np.ones(3, np.float32))])
>>> k1 == k2 and k1.hash == k2.hash
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from svod.dtype import DType
from svod.dtype import dtype as to_dtype
from svod.ir import BufferRef, Ops, UOp, _hash_arg, substitute, toposort
from svod.ops import ops_where
from svod.viewfold import CHAIN_OPS, OFFSETS, TOP_OPS, VIEW_MARK, ViewRef, apply_view
from svod.viewfold import enabled as _fold_enabled


@dataclass(frozen=True)
class KeyNode:
    """One node of a GraphKey: sources are indices of earlier nodes.

    For `Ops.BUFFER` leaves, `arg` is `(input_index, strides)`: the position of the
    input in the Bindings and its element strides; a folded view leaf (svod.viewfold) has
    `(input_index, strides, "view")`: its binding is a view of a buffer, at an offset the
    key does not hold.
    """

    op: Ops
    dtype: DType
    src: tuple[int, ...]
    arg: object
    shape: tuple[int, ...]

    def encode(self) -> bytes:
        return b"|".join([self.op.value.encode(), self.dtype.name.encode(),
                          b",".join(b"%d" % s for s in self.src), _hash_arg(self.arg),
                          b",".join(b"%d" % s for s in self.shape)])


@dataclass(frozen=True)
class GraphKey:
    """An ID-normalised graph: nodes in topological order and the output node indices."""

    nodes: tuple[KeyNode, ...]
    outputs: tuple[int, ...]
    hash: str = field(default="", compare=False)

    def __post_init__(self):
        if not self.hash:
            h = hashlib.blake2b(digest_size=20)
            for n in self.nodes:
                h.update(n.encode())
                h.update(b";")
            h.update(b"out:" + b",".join(b"%d" % o for o in self.outputs))
            object.__setattr__(self, "hash", h.hexdigest())

    def __hash__(self) -> int:
        return hash(self.hash)

    def __eq__(self, other) -> bool:
        # by content hash: node equality would identify 0.0 with -0.0
        return isinstance(other, GraphKey) and self.hash == other.hash

    @property
    def inputs(self) -> list[int]:
        """Node indices of the input leaves, in binding order."""
        cached = self.__dict__.get("_inputs")
        if cached is None:
            cached = [i for i, n in enumerate(self.nodes) if n.op is Ops.BUFFER]
            object.__setattr__(self, "_inputs", cached)
        return list(cached)

    def users(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.nodes]
        for i, n in enumerate(self.nodes):
            for s in n.src:
                out[s].append(i)
        return out

    def to_json(self) -> dict:
        """A JSON-able form (no pickle): enough to rebuild the key in another process."""
        return {"nodes": [[n.op.value, n.dtype.name, list(n.src), _arg_to_json(n.arg), list(n.shape)]
                          for n in self.nodes], "outputs": list(self.outputs), "hash": self.hash}

    @staticmethod
    def from_json(obj: dict) -> GraphKey:
        nodes = tuple(KeyNode(Ops(op), to_dtype(dt), tuple(src), _arg_from_json(arg), tuple(shape))
                      for op, dt, src, arg, shape in obj["nodes"])
        key = GraphKey(nodes, tuple(obj["outputs"]))
        if obj.get("hash") and obj["hash"] != key.hash:
            raise ValueError("GraphKey JSON does not match its hash")
        return key

    def __str__(self) -> str:
        lines = []
        for i, n in enumerate(self.nodes):
            arg = "" if n.arg is None else f" {n.arg}"
            src = ", ".join(f"%{s}" for s in n.src)
            out = "  <- out" if i in self.outputs else ""
            lines.append(f"%{i} = {n.op.name}[{n.dtype} {n.shape}]({src}){arg}{out}")
        return "\n".join(lines)


def _arg_to_json(arg):
    if isinstance(arg, tuple):
        return {"t": [_arg_to_json(a) for a in arg]}
    if isinstance(arg, float):
        return {"f": arg.hex()}
    if isinstance(arg, complex):
        return {"c": [arg.real.hex(), arg.imag.hex()]}
    if isinstance(arg, DType):
        return {"d": arg.name}
    return arg


def _arg_from_json(obj):
    if isinstance(obj, dict):
        if "t" in obj:
            return tuple(_arg_from_json(a) for a in obj["t"])
        if "f" in obj:
            return float.fromhex(obj["f"])
        if "c" in obj:
            return complex(float.fromhex(obj["c"][0]), float.fromhex(obj["c"][1]))
        if "d" in obj:
            return to_dtype(obj["d"])
    return obj


@dataclass
class Bindings:
    """The data of a compacted graph: input arrays in leaf order."""

    arrays: list[np.ndarray]
    buffers: list[BufferRef]


def _strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def share_partial_reductions(order: list[UOp], roots: list[UOp]) -> tuple[list[UOp], list[UOp]]:
    """(order, roots) with every reduction computed from another over fewer axes of the
    same source with the same op, when the graph has one: ``sum(x)`` next to
    ``sum(x, axis=1)`` becomes ``sum(sum(x, axis=1), axis=0)``, a pass over 4096 row sums
    instead of 64 MB (W6). Exact for max/min (and integer sums: wrapping arithmetic
    associates); float sums and products are reassociated, a change within float
    tolerance like any blocked summation order. `order` is the topological order of
    `roots`; both are returned unchanged when nothing applies."""
    groups: dict[tuple[int, str], list[UOp]] = {}
    for u in order:
        if u.op is Ops.REDUCE:
            groups.setdefault((id(u.src[0]), u.arg[0]), []).append(u)
    mapping: dict[UOp, UOp] = {}
    for group in groups.values():
        if len(group) < 2:
            continue
        group.sort(key=lambda u: len(u.arg[1]))  # the partials first: a chain reuses their rewrites
        for i, big in enumerate(group):
            axes = set(big.arg[1])
            best = max((u for u in group[:i] if set(u.arg[1]) < axes), key=lambda u: len(u.arg[1]), default=None)
            if best is not None:
                rest = tuple(sorted(axes - set(best.arg[1])))
                mapping[big] = UOp(Ops.REDUCE, big.dtype, (mapping.get(best, best),), (big.arg[0], rest))
    if not mapping:
        return order, roots
    roots = substitute(roots, mapping)
    return toposort(roots), roots


def compact(roots: list[UOp]) -> tuple[GraphKey, Bindings]:
    """Normalise the graph below `roots` into a GraphKey and the Bindings of its inputs
    (reductions that can reuse a partial one do: `share_partial_reductions`).

    Slices of realized buffers whose structure turned dynamic in its offsets are folded
    into view leaves (svod.viewfold: the key without the offsets, the views bound); the
    first offsets of a structure, and every graph without such slices, compact exactly."""
    key, bindings, _, _ = _compact(roots, True)
    return key, bindings


def compact_origins(roots: list[UOp]) -> tuple[GraphKey, list[UOp], list[int]]:
    """(key, order, origins): the key `compact(roots)` gives now (recording nothing in
    svod.viewfold's automatic dynamic), the topological order of the graph's nodes, and
    for each key node the position in `order` of the node it comes from (a folded view
    leaf: its chain's top node) — for naming key nodes by their source lines."""
    key, _, origins, order = _compact(roots, False)
    return key, order, origins


def _compact(roots: list[UOp], record: bool) -> tuple[GraphKey, Bindings, list[int], list[UOp]]:
    order, roots = share_partial_reductions(toposort(roots), list(roots))
    index: dict[int, int] = {}
    nodes: list[KeyNode] = []
    arrays: list[np.ndarray] = []
    bufs: list[BufferRef] = []
    h = hashlib.blake2b(digest_size=20)
    # id(node) -> (numpy view, base BufferRef, movement steps, has a SHRINK, block): chains
    # of movement ops on a realized buffer that numpy can take as views (svod.viewfold),
    # and `sh` the structure's hash (no sizes, no movement args) while folding is on
    views: dict[int, tuple] | None = {} if _fold_enabled() else None
    sh = hashlib.blake2b(digest_size=20) if views is not None else None
    for u in order:
        if u.op is Ops.BUFFER:
            arr = u.arg.array
            node = KeyNode(Ops.BUFFER, u.dtype, (), (len(arrays), _strides(arr)), u.shape)
            arrays.append(arr)
            bufs.append(u.arg)
            h.update(node.encode())
            if sh is not None:
                sh.update(b"B|%s|%d;" % (u.dtype.name.encode(), len(u.shape)))
        else:
            src = tuple(index[id(s)] for s in u.src)
            node = KeyNode(u.op, u.dtype, src, u.arg, u.shape)
            # NOTE: the same bytes as node.encode(), with the position-free parts cached on
            # the UOp: a replayed structure re-hashes only its source indices
            parts = u._kb
            if parts is None:
                parts = u._kb = _key_parts(u)
            srcb = b",".join(b"%d" % d for d in src)
            h.update(parts[0] + srcb + parts[1])
            if sh is not None:
                sh.update(parts[0] + srcb + parts[2])
                if u.op in CHAIN_OPS:
                    _chain_view(u, views)
        h.update(b";")
        index[id(u)] = len(nodes)
        nodes.append(node)
    outputs = tuple(index[id(r)] for r in roots)
    tail = b"out:" + b",".join(b"%d" % o for o in outputs)
    h.update(tail)
    key = GraphKey(tuple(nodes), outputs, h.hexdigest())
    if views and any(f[3] for f in views.values()):
        sh.update(tail)
        memo: dict[bool, tuple | None] = {}

        def folded(full: bool):
            if full not in memo:
                memo[full] = fold_views(order, roots, views, full)
            return memo[full]

        level = OFFSETS.level(sh.hexdigest(), key.hash, lambda: (folded(False) or (key,))[0].hash, record)
        got = folded(level == 2) if level else None
        if got is not None:
            return got[0], got[1], got[3], order
    return key, Bindings(arrays, bufs), list(range(len(order))), order


def _key_parts(u: UOp) -> tuple[bytes, bytes, bytes]:
    """The position-free parts of u's key encoding (cached on the UOp as `_kb`): the head
    (op, dtype), the tail (arg, shape) of `KeyNode.encode`, and the structure's tail (the
    arg, or only the rank for ops whose args are sizes or offsets, `_SIZED`)."""
    arg = _hash_arg(u.arg)
    return (u.op.value.encode() + b"|" + u.dtype.name.encode() + b"|",
            b"|" + arg + b"|" + b",".join(b"%d" % d for d in u.shape),
            b"|%d;" % len(u.shape) if u.op in _SIZED else b"|" + arg + b";")


# ops whose args are sizes or offsets: a structure (`compact`'s `sh`) keeps only their rank
_SIZED = ops_where(kind="movement") | {Ops.BUFFER}


def _chain_view(u: UOp, views: dict[int, tuple]) -> None:
    """Record u's numpy view in `views` when u is a movement op numpy can take as a view of
    a realized buffer, directly or through earlier ones: (view, base BufferRef, steps,
    has a SHRINK, block). `block`, for a SHRINK directly on a C-contiguous buffer: (the
    smallest contiguous block of the buffer that holds the view and starts at its first
    element's leading offsets, that block's steps, the SHRINK left to apply to it), or
    None when that block is the whole buffer."""
    s = u.src[0]
    if s.op is Ops.BUFFER:
        prev = (s.arg.array, s.arg, (), False, None)
    else:
        prev = views.get(id(s))
        if prev is None:
            return
    v = apply_view(prev[0], u.op, u.arg)
    if v is None:
        return
    steps = prev[2] + ((u.op, u.arg),)
    block = _block(prev[0], u.arg) if u.op is Ops.SHRINK and s.op is Ops.BUFFER else None
    views[id(u)] = (v, prev[1], steps, prev[3] or u.op is Ops.SHRINK, block)


def _block(base: np.ndarray, arg: tuple) -> tuple | None:
    """(block view, its steps, residual SHRINK arg) of SHRINK `arg` on C-contiguous `base`:
    the block fixes the leading axes of extent 1 at their index, slices the first longer
    axis and keeps every later one whole, so it is contiguous and only the later axes'
    offsets stay in the residual shrink. None when the block would be the whole buffer."""
    if not base.flags.c_contiguous or not base.ndim:
        return None
    j = next((a for a, (b, e) in enumerate(arg) if e - b != 1), len(arg) - 1)
    barg = tuple(be if a <= j else (0, n) for a, (be, n) in enumerate(zip(arg, base.shape)))
    if barg == tuple((0, n) for n in base.shape):
        return None
    rest = tuple((0, e - b) if a <= j else (b, e) for a, (b, e) in enumerate(arg))
    steps = ((Ops.SHRINK, barg),)
    return apply_view(base, Ops.SHRINK, barg), steps, rest


def fold_views(order: list[UOp], roots: list[UOp], views: dict[int, tuple],
               full: bool) -> tuple[GraphKey, Bindings, int, list[int]] | None:
    """(key, bindings, count, origins) of the graph with slice chains over realized
    buffers as view leaves, or None when there is none (origins: `compact_origins`).
    `full`: every topmost foldable chain (svod.viewfold: a SHRINK or RESHAPE on top, a
    SHRINK in it, not empty) is one leaf, bound to its view (copied at run time when not
    contiguous); else only chains whose view is C-contiguous
    are, and a SHRINK directly on a contiguous buffer becomes its contiguous leading block
    (a leaf) under the residual SHRINK (`_block`). `order` is the topological order of
    `roots` and `views` the chains `compact` found."""
    need = {id(r) for r in roots}
    leaves: dict[int, tuple] = {}  # id -> (view, base, steps, residual SHRINK arg or None)
    for u in reversed(order):
        if id(u) not in need:
            continue
        f = views.get(id(u))
        if f is not None and f[3] and u.op in TOP_OPS and f[0].size:
            if full or f[0].flags.c_contiguous:
                leaves[id(u)] = (f[0], f[1], f[2], None)
                continue
            if f[4] is not None:
                leaves[id(u)] = (f[4][0], f[1], f[4][1], f[4][2])
                continue
        need.update(id(s) for s in u.src)
    if not leaves:
        return None
    index: dict[int, int] = {}
    nodes: list[KeyNode] = []
    arrays: list[np.ndarray] = []
    bufs: list[BufferRef] = []
    kh = hashlib.blake2b(digest_size=20)  # the key's hash: the bytes of KeyNode.encode (as in compact)

    origins: list[int] = []

    def add(node: KeyNode) -> None:
        kh.update(node.encode() + b";")
        nodes.append(node)
        origins.append(pos)

    for pos, u in enumerate(order):
        if id(u) not in need:
            continue
        leaf = leaves.get(id(u))
        if leaf is not None:
            v, base, steps, rest = leaf
            add(KeyNode(Ops.BUFFER, u.dtype, (), (len(arrays), _strides(v), VIEW_MARK), v.shape))
            arrays.append(v)
            bufs.append(ViewRef(v, base, steps))
            if rest is not None:  # the block's leaf, then the residual shrink (node u itself)
                add(KeyNode(Ops.SHRINK, u.dtype, (len(nodes) - 1,), rest, u.shape))
        elif u.op is Ops.BUFFER:
            arr = u.arg.array
            add(KeyNode(Ops.BUFFER, u.dtype, (), (len(arrays), _strides(arr)), u.shape))
            arrays.append(arr)
            bufs.append(u.arg)
        else:
            src = tuple(index[id(s)] for s in u.src)
            node = KeyNode(u.op, u.dtype, src, u.arg, u.shape)
            parts = u._kb  # set by compact's pass over the same nodes
            srcb = b",".join(b"%d" % d for d in src)
            kh.update(parts[0] + srcb + parts[1] + b";")
            nodes.append(node)
            origins.append(pos)
        index[id(u)] = len(nodes) - 1
    outputs = tuple(index[id(r)] for r in roots)
    tail = b"out:" + b",".join(b"%d" % o for o in outputs)
    kh.update(tail)
    return GraphKey(tuple(nodes), outputs, kh.hexdigest()), Bindings(arrays, bufs), len(leaves), origins
