"""Source lines of graph nodes: which line of the user's program built each op.

Recording is off by default (a frame walk per new node would cost about as much as the
op itself); `record()` turns it on for a block, and `svod viz FILE.py` /
`svod explain FILE.py` turn it on for the whole script. While on, every UOp created is
tagged with the first frame outside svod (and `search`, `costmodels`): a `softmax` call
tags its seven nodes with the user's line that called `svod.nn.softmax`.

>>> import svod
>>> from svod import sources
>>> with sources.record():
...     y = svod.exp(svod.asarray([1.0, 2.0]) * 3.0)
>>> sources.source_of(y.uop)[1] > 0
True

`key_sources(roots)` gives, per node of the GraphKey that `svod.key.compact(roots)`
builds, "file.py:LINE" (nodes made before recording, or inside svod, have none).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import threading
import weakref

import svod.ir as _ir

_ORIGINAL_NEW = object.__new__
_OWN_DIRS = tuple(os.path.dirname(os.path.abspath(p)) + os.sep for p in (
    _ir.__file__,
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(_ir.__file__))), "search", "x"),
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(_ir.__file__))), "costmodels", "x")))

_table: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # UOp -> (filename, lineno)
_depth = 0
_lock = threading.Lock()


def _internal(filename: str) -> bool:
    return filename.startswith(_OWN_DIRS) or filename.startswith("<frozen")


def _recording_new(cls):
    obj = _ORIGINAL_NEW(cls)
    if cls is _ir.UOp:
        f = sys._getframe(1)
        while f is not None and _internal(f.f_code.co_filename):
            f = f.f_back
        if f is not None:
            try:
                _table[obj] = (f.f_code.co_filename, f.f_lineno)
            except TypeError:  # pragma: no cover - not weak-referenceable
                pass
    return obj


@contextlib.contextmanager
def record():
    """Tag every UOp created inside the block with the user's source line (nestable)."""
    global _depth
    with _lock:
        _depth += 1
        _ir._new_object = _recording_new
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                _ir._new_object = _ORIGINAL_NEW


def recording() -> bool:
    return _depth > 0


def source_of(u) -> tuple[str, int] | None:
    """(filename, line) where UOp `u` was built while recording, else None."""
    try:
        return _table.get(u)
    except TypeError:
        return None


def describe(where: tuple[str, int] | None, text: bool = False) -> str | None:
    """'file.py:12' (and with `text`, the line's code after a colon)."""
    if where is None:
        return None
    fn, line = where
    out = f"{os.path.basename(fn)}:{line}"
    if text:
        code = linecache.getline(fn, line).strip()
        if code:
            out += f": {code}"
    return out


def key_sources(roots, text: bool = False) -> dict[int, str]:
    """Node index of `compact(roots)`'s GraphKey -> its source line (see the module
    docstring); the node order is the one `compact` uses."""
    from svod.key import compact_origins

    _, order, origins = compact_origins(list(roots))  # folded view leaves renumber the nodes
    out: dict[int, str] = {}
    for i, pos in enumerate(origins):
        d = describe(source_of(order[pos]), text)
        if d is not None:
            out[i] = d
    return out
