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

Not done: the value's plan writing straight into ``out[region]`` (its result is computed
into its own block, then copied: one extra pass over the region), and writing in place
into a donated ``x`` (nothing else holding its buffer) instead of copying it.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

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
    """The BUFFER of region write `root` (`match`'s `m`): a copy of x with the value
    computed by its own plan (its view reads folded at first sight) placed in the region."""
    from svod.viewfold import fold_now

    x, region, v = m
    if v.op is Ops.BUFFER:
        val = v.arg.array
    else:
        with fold_now():
            val = realize([v])[v].arg.array
    out = np.array(x.arg.array, order="C", copy=True)
    out[region] = val
    out.flags.writeable = False
    WRITES.runs += 1
    return UOp.buffer(out, root.dtype)


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
        return [match(pending[0])[2]], ("region write: realize copies x and places this value's result in "
                                        "the region (svod.writes); the plan below is the value's")
    return pending, (f"{len(writes)} of these roots are region writes: realize runs each as a copy of x plus "
                     "its value's own plan (svod.writes), the others in the plan below")


def recompiles() -> list[str]:
    """Why region writes left their exact plans (oldest first)."""
    return [msg for _, msg in WRITES.log]
