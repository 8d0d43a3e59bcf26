"""A realized leaf made on the fast path, whose BufferRef is built when something reads it.

`UOp.buffer(arr, dtype)` — two objects, a serial, a signature lookup, the read-only flag
set on `arr` — costs more than numpy's own op on a 30-element row (~0.8 µs against
~0.5). `svod.numpy`'s fast path (svod/numpy/_fast.py) makes one per op, and most of
those values are read by the next fast op and dropped. `fresh(arr, dtype)` makes a
`Fresh` node instead: a `UOp` of op BUFFER whose `op`, `dtype` and `shape` are
set, and whose other slots (`arg`, `src`, `_sig`, `_leaves`, `_hash`, `_kb`, `_depth`) are filled
by `UOp.buffer`'s own code on the first read of any of them ("materialized"). So

* every reader of a tensor's `.uop` sees a correct realized node: reading `u.arg`,
  `u.src`, `u._sig` ... of a `Fresh` returns what `UOp.buffer(arr, dtype)` would have;
  `isinstance(u, UOp)`, identity equality and hashing are a UOp's;
* before materialization the fast path reads the array from the `_a` slot (`array_of`),
  and nothing else can reach it: no BufferRef exists, so nothing can be keyed by one. A
  0-d value may be held as a numpy scalar of the node's numpy dtype (an element read
  `A[i, j]`, a 0-d result): numpy's functions take it as the 0-d array it stands for, and
  materialization makes it one;
* invariant: while `_a` is set (not materialized), `_a` is a fresh array that owns its
  memory, held only by this node (and transient locals of the fast path); it may be
  writeable. Materialization sets it read-only (as `UOp.buffer`'s arrays are) and sets
  `_a` to None, after which the node is a plain realized leaf.

`svod.eager.sole_owner` / `write_in_place` know both states: an unmaterialized node is
written in place when nothing but its tensor holds the node and the array (reference
counts, as for a materialized one), and its tensor is rebound to a new `Fresh` node.
"""

from __future__ import annotations

import threading

import numpy as np

from svod.ir import Ops, UOp

__all__ = ["Fresh", "array_of", "fresh"]

_BUFFER = Ops.BUFFER
_new = object.__new__
_buffer = UOp.buffer
_LOCK = threading.Lock()
# the slots `fresh` leaves unset: the first read of any of them materializes the node
_LAZY = frozenset(("arg", "src", "_sig", "_leaves", "_hash", "_kb", "_depth"))


class Fresh(UOp):
    """A realized leaf (op BUFFER) whose BufferRef is built on first read (module docstring)."""

    __slots__ = ("_a",)

    def __getattr__(self, name):  # called only for a slot that is not set
        if name not in _LAZY:
            raise AttributeError(f"'UOp' object has no attribute {name!r}")
        with _LOCK:  # NOTE: two threads must not give one node two BufferRefs
            a = self._a
            if a is not None:
                if type(a) is not np.ndarray:  # a numpy scalar: a 0-d value read from an array
                    a = np.array(a)
                n = _buffer(a, self.dtype)
                a.setflags(write=False)  # (a realized buffer is read-only; `UOp.buffer`'s callers set it)
                self.src, self._hash, self._kb = n.src, n._hash, n._kb
                self._sig, self._leaves, self._depth, self.arg = n._sig, n._leaves, n._depth, n.arg
                self._a = None
        return object.__getattribute__(self, name)


def fresh(arr: np.ndarray, dtype) -> Fresh:
    """An unmaterialized realized leaf over `arr` (a fresh array of `dtype`'s numpy dtype
    that owns its memory and that nothing else holds, or a numpy scalar of that dtype) of
    svod dtype `dtype`."""
    n = _new(Fresh)
    n.op = _BUFFER
    n.dtype = dtype
    n.shape = arr.shape
    n._a = arr
    return n


def array_of(u) -> np.ndarray | None:
    """The array of realized node `u` (without materializing a `Fresh`), else None."""
    if type(u) is Fresh:
        a = u._a
        return a if a is not None else u.arg.array
    if u.op is _BUFFER:
        return u.arg.array
    return None
