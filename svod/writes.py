"""The write side of a loop: `x[key] = v` on a realized `x` with the region's offset
bound at run time.

`x[key] = v` is lazily ``WHERE(PAD(ones), PAD(v), BUFFER x)`` (svod.indexing.setitem),
and the PAD offsets of the region are key data: a loop writing row ``i`` of a realized
array, realizing each step, would plan and compile once per ``i`` (the reads of the same
loop fold into view leaves, svod.viewfold, but the write did not). Here a pending root of
that form whose two pads place the same region — a *region write* — runs as

    out = a copy of x's array (one memcpy; the where's own plan reads all of x and
          writes all of out, too)
    out[region] = the value v, computed by v's own plan

so the region's offset is a binding (a numpy slice), not key data, and the plan is v's:
its reads of realized buffers fold at first sight (`svod.viewfold.fold_now`), so a loop
of any length writing rows ``i`` of a realized array makes two plans (the first write's
exact one, then the value's folded one) instead of one per ``i``.

When: automatic dynamic, as for sizes and view offsets. A structure (the root's graph
without sizes and offsets, `svod.eager.structure`) is run exactly the first time; a
second region (other pads) of the same structure makes it dynamic and from then on every
region write of it takes this path. `SVOD_DYNAMIC=0` or `SVOD_WRITES=0` turn it off.
`recompiles()` (and ``SVOD_DEBUG=1``) say when a structure turned dynamic.

In place: when nothing but this write can ever read x's array again (`exclusive`: x's
array owns its memory and CPython's reference counts of the array, its BufferRef, x's
BUFFER node and the value's nodes that read x leave no other holder; no other live lazy
Tensor's graph holds x's leaf), the value is written into x's own array and no copy is
made: a loop of row writes on a (512, 4096) float64 array costs ~0.5 ms a write instead
of ~15-22 ms (bench/bench_writes.py). Any alias — an ndarray from ``.numpy()`` or
``np.asarray``, a view or lazy expression over x, a second Tensor of the buffer, a
DLPack capsule, a held value Tensor that reads x — makes the write copy, so every holder
keeps numpy's semantics (each svod array is written once: what a holder saw, it keeps
seeing). The first dynamic write of a loop usually copies (x's array is a plan's pool
block or the caller's); the later ones write into that copy. CPython 3.9-3.13 with the
GIL only (the reference counts were measured there); elsewhere, or with
`SVOD_WRITES_IN_PLACE=0`, every write copies.

Not done: the value's plan writing straight into ``out[region]`` (its result is computed
into its own block, then copied: one extra pass over the region).
"""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict

import numpy as np

from svod.caches import RECENT
from svod.flags import NoteLog
from svod.ir import Ops, UOp


def enabled() -> bool:
    """`SVOD_DYNAMIC` on (as `svod.shapes.enabled`) and `SVOD_WRITES` not 0."""
    off = ("0", "false", "False", "")
    return os.environ.get("SVOD_DYNAMIC", "1") not in off and os.environ.get("SVOD_WRITES", "1") not in off


def match(root: UOp):
    """(x's BUFFER, region as slices, value v) when `root` is a region write, else None."""
    if root.op is not Ops.WHERE or len(root.src) != 3:
        return None
    mask, placed, x = root.src
    if x.op is not Ops.BUFFER or mask.op is not Ops.PAD or placed.op is not Ops.PAD:
        return None
    pads = mask.arg[0]
    if placed.arg[0] != pads or mask.arg[1] is not False or placed.arg[1] != 0:
        return None
    if x.dtype != root.dtype or placed.dtype != root.dtype or x.shape != root.shape:
        return None
    m = mask.src[0]
    while m.op is Ops.RESHAPE or m.op is Ops.EXPAND:
        m = m.src[0]
    if m.op is not Ops.CONST or m.arg is not True:
        return None
    v = placed.src[0]
    region = tuple(slice(lo, n - hi) for (lo, hi), n in zip(pads, x.shape))
    if v.shape != mask.src[0].shape or tuple(s.stop - s.start for s in region) != v.shape:
        return None
    return x, region, v


class Writes:
    """Automatic dynamic for region writes: the first pads seen per structure, the
    structures turned dynamic, and the notes. Bounded LRU; one lock."""

    def __init__(self, max_structures: int = 4096, max_log: int = 256):
        self.max_structures = max_structures
        self._seen: OrderedDict[tuple, tuple | None] = OrderedDict()  # structure -> first pads, None: dynamic
        self.log = NoteLog(max_log)
        self.runs = 0  # region writes run this way (tests count them)
        self.in_place = 0  # of those, written into x's own array (`exclusive`)
        self._lock = threading.Lock()

    def dynamic(self, root: UOp) -> bool:
        """Whether `root` (a region write) runs as copy + the value's plan; records it."""
        from svod.eager import structure

        struct = structure(root)
        if struct is None:
            return False
        pads = root.src[0].arg[0]
        with self._lock:
            if struct not in self._seen:
                self._seen[struct] = pads
                if len(self._seen) > self.max_structures:
                    self._seen.popitem(last=False)
                return False
            self._seen.move_to_end(struct)
            first = self._seen[struct]
            if first is None:
                return True
            if first == pads:
                return False  # the first region keeps its exact plan
            self._seen[struct] = None
            tag = f"{hash(struct) & 0xFFFFFFFFFFFF:012x}"
            msg = (f"region write {tag} of a {root.shape} {root.dtype.name} buffer is dynamic in its region: "
                   f"pads {first} and {pads} seen; now a copy of the buffer and the value's own plan (svod.writes)")
            self.log.add(tag, msg)
        from svod.flags import debug, debug_log

        if debug():
            debug_log(f"svod recompile: {msg}")
        return True

    def peek(self, root: UOp) -> bool:
        """Whether `dynamic(root)` would take the region-write path now, without recording
        anything (`svod.explain`: the plan realize runs)."""
        from svod.eager import structure

        struct = structure(root)
        if struct is None:
            return False
        with self._lock:
            if struct not in self._seen:
                return False
            first = self._seen[struct]
        return first is None or first != root.src[0].arg[0]

    def __len__(self) -> int:
        return len(self._seen)

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()
            self.log.clear()
            self.runs = 0
            self.in_place = 0


WRITES = Writes()


def split(pending: list[UOp], realize) -> tuple[dict, list[UOp]]:
    """({root: BUFFER} for the dynamic region writes among `pending`, run here with
    `realize` (the engine's `realize_uops`) computing their values; the other roots)."""
    if not enabled():
        return {}, pending
    done: dict = {}
    rest: list[UOp] = []
    for r in pending:
        m = match(r) if r.op is Ops.WHERE else None
        if m is None or not WRITES.dynamic(r):
            rest.append(r)
            continue
        done[r] = run(r, m, realize)
    return done, rest


def run(root: UOp, m, realize) -> UOp:
    """The BUFFER of region write `root` (`match`'s `m`): x's array with the value
    computed by its own plan (its view reads folded at first sight) placed in the region —
    written in place when nothing but this write can see x's array (`exclusive`), else
    into a copy of it."""
    from svod.viewfold import fold_now

    x, region, v = m
    if v.op is Ops.BUFFER:
        val = v.arg.array
    else:
        with fold_now():
            val = realize([v])[v].arg.array
    if _in_place_on() and exclusive(root, val):
        out = x.arg.array
        out.flags.writeable = True
        try:
            out[region] = val
        finally:
            out.flags.writeable = False
        WRITES.in_place += 1
        _forget_recent(x.arg)
    else:
        out = np.array(x.arg.array, order="C", copy=True)
        out[region] = val
        out.flags.writeable = False
    WRITES.runs += 1
    return UOp.buffer(out, root.dtype)


# NOTE: the references `exclusive` expects besides the graph's own, from the frames of
# `split` and `run` as written (the tuple `m` and run's unpacked `x`), and getrefcount's
# argument; tests/test_writes.py checks both sides (a plain loop writes in place, every
# alias copies)
_X_FRAME_REFS = 4  # the m tuple, run's `x`, this frame's `x`, getrefcount's argument
_REF_FRAME_REFS = 2  # this frame's `ref`, getrefcount's argument
_ARRAY_REFS = 2  # the BufferRef's `array`, getrefcount's argument
_NODE_FRAME_REFS = 3  # the `nodes` list, the loop's `n`, getrefcount's argument
_V_FRAME_REFS = 3  # the m tuple, run's `v`, exclusive's `v`
# CPython with the GIL, versions whose reference counts these were measured on: elsewhere copy
_REFCOUNTS_KNOWN = (sys.implementation.name == "cpython" and (3, 9) <= sys.version_info[:2] < (3, 14)
                    and getattr(sys, "_is_gil_enabled", lambda: True)())


def _forget_recent(ref) -> None:
    """Drop the kept recent graphs (svod.caches.RECENT, a hash-consing aid) over x's old
    BufferRef: they hold the array just written, which would make the next write of the
    loop copy it (`exclusive` sees one more reference) although nothing can read them."""
    q = RECENT._q
    keep = []
    hit = False
    for roots in list(q):
        over = False
        for r in roots:
            lv = r._leaves
            if lv is None or ref in lv:
                over = True
                break
        hit |= over
        if not over:
            keep.append(roots)
    if hit:
        q.clear()
        q.extend(keep)


def _in_place_on() -> bool:
    return _REFCOUNTS_KNOWN and os.environ.get("SVOD_WRITES_IN_PLACE", "1") not in ("0", "false", "False", "")


def exclusive(root: UOp, val) -> bool:
    """Whether region write `root` may write its value `val` into x's array in place: no
    one but this write can ever read that array again. Proved by ownership and reference
    counts (CPython's, exact): x's array owns its memory (no base: not a view of a user's
    array, a pool block or a mapped file, and nothing holds a view of it), is referenced
    only by x's BufferRef; the BufferRef only by x's BUFFER node and the signature-leaf
    tuples of the nodes of this write; x's BUFFER node only by this write's WHERE and the
    nodes of the value's own graph (already computed: it is never read again). Any other
    holder — a Tensor of x's old value, a lazy expression over it, a view, an
    ``np.asarray``/``.numpy()`` export, a DLPack capsule, a cache keeping the array or its
    BufferRef — adds a reference, and the write copies x instead (numpy's semantics: the
    holder keeps seeing the old values). `val` must not share memory with x's array."""
    x = root.src[2]
    arr = x.arg.array
    if arr.base is not None or not arr.flags.owndata or not arr.flags.c_contiguous or \
            (isinstance(val, np.ndarray) and np.may_share_memory(arr, val)):
        return False
    del arr
    ref = x.arg
    v = root.src[1].src[0]
    # NOTE: plain loops, no comprehension or generator over `x`/`ref`: a closure would hold
    # them in a cell, one more reference than the counts below expect
    nodes = [root, root.src[0], root.src[1]]
    if v.op is not Ops.BUFFER:
        from svod.ir import toposort

        for n in toposort([v]):
            if n is not x:
                nodes.append(n)
    parents: dict[int, int] = {}
    dep: set[int] = set()  # the value's nodes that read x (through any path)
    tuples: dict[int, tuple] = {id(x._leaves): x._leaves}
    for n in nodes:
        for s in n.src:
            parents[id(s)] = parents.get(id(s), 0) + 1
            if s is x or id(s) in dep:
                dep.add(id(n))
        if type(n._leaves) is tuple:
            tuples[id(n._leaves)] = n._leaves
    leaves = 0
    for t in tuples.values():
        for leaf in t:
            leaves += leaf is ref
    t = leaf = None
    # a node of the value that reads x must be held by the value's graph alone: a Tensor or
    # lazy expression holding it could be realized again later, reading x's old values
    recent = 0
    for roots in RECENT._q:  # the last realized expressions, kept for hash-consing only
        for r in roots:
            recent += r is v
    s = r = roots = None  # NOTE: the loops' last values would count as references below
    for i in range(3, len(nodes)):  # NOTE: not `nodes[3:]`: a slice would hold the nodes once more
        n = nodes[i]
        if id(n) in dep and sys.getrefcount(n) - _NODE_FRAME_REFS != parents[id(n)] + \
                (_V_FRAME_REFS + recent if n is v else 0):
            return False
    del n
    # every live lazy Tensor whose graph holds x's leaf must be x's new value itself (realize
    # rebinds those to the result): another one (`sum(x)` after the write, realized with it or
    # later) would evaluate this write's WHERE again over x's old array (svod.tensor's registry;
    # the tensors made since the last realize registered first)
    from svod import tensor as T

    T._flush()
    if T._by_leaf.get(None):
        return False  # tensors of very wide graphs, not indexed by leaf: any of them may hold x
    group = T._by_leaf.get(ref)
    if group:
        for w in list(group.values()):
            t = w()
            if t is not None and t.uop is not root:
                return False
        t = w = None
    registry = group is not None  # the registry's key is one more reference to the BufferRef
    group = None
    return (sys.getrefcount(x) - _X_FRAME_REFS == parents.get(id(x), 0)
            and sys.getrefcount(ref) - _REF_FRAME_REFS == 1 + leaves + registry
            and sys.getrefcount(ref.array) == _ARRAY_REFS)


def explained(pending: list[UOp]) -> tuple[list[UOp], str]:
    """(the roots whose plan `svod.explain` shows, a note) for `pending`: a single region
    write that realize would run as copy + value plan is explained by its value's plan
    (compacted as realize compacts it, its view reads folded); a region write among other
    roots is named in the note (realize runs it apart, then the others together)."""
    if not enabled():
        return pending, ""
    writes = [r for r in pending if r.op is Ops.WHERE and match(r) is not None and WRITES.peek(r)]
    if not writes:
        return pending, ""
    if len(pending) == 1 and match(pending[0])[2].op is not Ops.BUFFER:
        return [match(pending[0])[2]], ("region write: realize places this value's result in the region of "
                                        "x's array (in place when nothing else can read that array, else in a "
                                        "copy: svod.writes); the plan below is the value's")
    return pending, (f"{len(writes)} of these roots are region writes: realize runs each as its value's own plan "
                     "written into x's array or a copy of it (svod.writes), the others in the plan below")


def recompiles() -> list[str]:
    """Why region writes left their exact plans (oldest first)."""
    return [msg for _, msg in WRITES.log]
