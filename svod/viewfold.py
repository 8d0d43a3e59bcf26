"""View leaves: slices of a realized buffer bound at run time, so loops over slices share a plan.

A graph reads a realized buffer through movement ops: ``a[i, 1:-1]`` is
``SHRINK(((i, i + 1), (1, n - 1)))`` then ``RESHAPE`` over the BUFFER leaf of ``a``. Those
offsets are key data, so a Python loop over ``i`` makes a new GraphKey, a new search and a
new compile per iteration. Compaction (`svod.key.compact`) can instead *fold* such a
chain into one leaf whose binding is the numpy view ``a[i, 1:-1]`` of the buffer (no
copy): the key then holds only the view's shape and strides, and the offset travels in
the binding (the data pointer passed at run time).

Which chains fold (`fold_view`): a run of SHRINK, RESHAPE (when numpy can do it as a
view), PERMUTE and FLIP ops directly on a BUFFER, with at least one SHRINK, topped by a
SHRINK or a RESHAPE (a PERMUTE or FLIP on top stays a key op over the folded leaf: the
kernel reads it through its view, no copy). EXPAND and PAD never fold (no offsets; an
expanded leaf would be copied at full size), nor does an empty view.

When (`ViewOffsets`, automatic dynamic as for row counts in `svod.shapes`): a structure
(the key without its sizes and without the args of its movement ops) is planned exactly
the first time, with the offsets as key data, exactly as before this module existed. The
second distinct exact key of the same structure (new offsets or sizes) makes it dynamic:
from then on other keys run folded, in two levels: first only contiguous blocks fold (no
copy at run time; a SHRINK on a contiguous buffer becomes its leading block under the
residual shrink), and when a later key's block form differs from the first one (an
inner offset or a size moves) every chain folds. The first exact key keeps its exact
plan. `SVOD_DYNAMIC=0` turns it off (with row counts). Why a structure turned dynamic is
in `recompiles()` and printed with ``SVOD_DEBUG=1``.

What a folded leaf costs at run time: nothing when the view is C-contiguous (a row, a
row segment, a 1-D slice); a copy of the view (`np.ascontiguousarray`, in the graph
program) when it is not (a column ``a[k + 1:, k]``, a 2-D interior block, a flipped
slice), because the generated kernels read input slots as contiguous arrays. That copy
is the price of not recompiling per offset; the first offsets keep the exact plan, which
reads the strided view in place. `svod.jit` traces never fold (`exact_leaves`): a trace's
leaves are re-bound to the next call's arguments by identity.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from svod.flags import NoteLog
from svod.ir import BufferRef, Ops
from svod.ops import ops_where

CHAIN_OPS = ops_where(view=True) - {Ops.EXPAND}  # views with real strides (a broadcast stays a node)
TOP_OPS = frozenset((Ops.SHRINK, Ops.RESHAPE))  # the fold's own rule: the views a folded chain may end with
VIEW_MARK = "view"  # third element of a folded BUFFER KeyNode's arg: (input_index, strides, "view")

_local = threading.local()


def enabled() -> bool:
    """Whether compaction may fold views: `SVOD_DYNAMIC` on (as `svod.shapes.enabled`) and
    not inside `exact_leaves()`."""
    return os.environ.get("SVOD_DYNAMIC", "1") not in ("0", "false", "False", "") \
        and not getattr(_local, "exact", 0)


@contextmanager
def exact_leaves():
    """Compactions inside never fold views (this thread): for `svod.jit` traces, whose
    bindings map each leaf's BufferRef back to an argument."""
    _local.exact = getattr(_local, "exact", 0) + 1
    try:
        yield
    finally:
        _local.exact -= 1


@contextmanager
def fold_now():
    """Compactions inside (this thread) fold the views of a structure seen for the first
    time at once, as blocks (level 1), and keep no exact first key for it: for the value
    of a region write (svod.writes), whose loop is known to move its offsets."""
    _local.now = getattr(_local, "now", 0) + 1
    try:
        yield
    finally:
        _local.now -= 1


def apply_view(arr: np.ndarray, op: Ops, arg) -> np.ndarray | None:
    """`op(arg)` applied to `arr` as a numpy view (no copy), or None when numpy would copy."""
    if op is Ops.SHRINK:
        return arr[tuple(slice(b, e) for b, e in arg)]
    if op is Ops.RESHAPE:
        try:
            return np.reshape(arr, arg, copy=False)
        except ValueError:
            return None
    if op is Ops.PERMUTE:
        return arr.transpose(arg)
    if op is Ops.FLIP:
        return np.flip(arr, axis=arg)
    return None


class ViewRef(BufferRef):
    """The BufferRef of a folded leaf: `array` is the view, `base` the buffer's BufferRef
    and `steps` the (op, arg) movement ops that make the view from ``base.array``
    (`rebuild`). Replay tables bind the base's array through `steps` (svod.caches)."""

    __slots__ = ("base", "steps")

    def __init__(self, array: np.ndarray, base: BufferRef, steps: tuple):
        super().__init__(array)
        self.base = base
        self.steps = steps



def rebuild(steps: tuple, base_array: np.ndarray) -> np.ndarray:
    """The view `steps` ((op, arg) pairs of a `ViewRef`) make of `base_array`."""
    a = base_array
    for op, arg in steps:
        a = apply_view(a, op, arg)
    return a


class ViewOffsets:
    """Automatic dynamic for view offsets, per structure (the fully folded key's hash):
    the first exact key seen, the block-folded key its second one chose, and whether it
    went fully dynamic. Bounded LRU; one lock."""

    def __init__(self, max_structures: int = 4096, max_log: int = 256):
        self.max_structures = max_structures
        self._seen: OrderedDict[str, list] = OrderedDict()  # struct -> [first exact, block key or None, full]
        self.log = NoteLog(max_log)  # the engine passes new notes to the recompile record (svod.recompiles)
        self._lock = threading.Lock()

    def level(self, struct: str, exact: str, block, record: bool = True) -> int:
        """How the graph with exact key hash `exact` of structure `struct` compacts: 0
        exactly, 1 with contiguous blocks folded, 2 fully folded (module docstring).
        `block()` gives the block-folded key's hash (called only past the first exact
        key of the structure). `record=False`: what it would be, changing nothing."""
        if not record:
            return self._peek(struct, exact, block)
        now = getattr(_local, "now", 0)
        with self._lock:
            seen = self._seen.get(struct)
            if seen is None and not now:
                self._seen[struct] = [exact, None, False]
                if len(self._seen) > self.max_structures:
                    self._seen.popitem(last=False)
                return 0
            if seen is not None:
                self._seen.move_to_end(struct)
                if exact == seen[0]:
                    return 0  # the first offsets keep their exact plan
                if seen[2]:
                    return 2
        if seen is None:  # `fold_now`, a first sight: no exact first key, folded at once
            bh = block()
            with self._lock:
                seen = self._seen.setdefault(struct, ["", None, False])
                if len(self._seen) > self.max_structures:
                    self._seen.popitem(last=False)
                if seen[1] is None and not seen[2]:
                    full = bh == exact  # no contiguous block to fold: the views themselves
                    seen[1 + full] = True if full else bh
                    self._note(struct, f"structure {struct[:12]} folded at first sight (the value of a region "
                                       f"write, svod.writes): {'views' if full else 'contiguous blocks'} of "
                                       "realized buffers bound at run time")
                    return 2 if full else 1
        bh = block()
        with self._lock:
            if seen[1] is None and bh != exact:
                seen[1] = bh
                self._note(struct, f"structure {struct[:12]} is dynamic in its view offsets: keys {seen[0][:12]} "
                                   f"and {exact[:12]} differ there; contiguous blocks of realized buffers now "
                                   "bound at run time")
                return 1
            if bh == seen[1]:
                return 1
            seen[2] = True
            self._note(struct, f"structure {struct[:12]} is dynamic in inner view offsets or sizes: key "
                               f"{exact[:12]}; slices of realized buffers now bound at run time as views "
                               "(copied when not contiguous)")
            return 2

    def _peek(self, struct: str, exact: str, block) -> int:
        with self._lock:
            seen = self._seen.get(struct)
            if seen is None or exact == seen[0]:
                return 0
            if seen[2]:
                return 2
            first_block = seen[1]
        bh = block()
        if first_block is None:
            return 1 if bh != exact else 2
        return 1 if bh == first_block else 2

    def _note(self, struct: str, msg: str) -> None:
        self.log.add(struct, msg)

    def __len__(self) -> int:
        return len(self._seen)

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()
            self.log.clear()


OFFSETS = ViewOffsets()


def recompiles() -> list[str]:
    """Why structures turned dynamic in their view offsets (oldest first)."""
    return [msg for _, msg in OFFSETS.log]
