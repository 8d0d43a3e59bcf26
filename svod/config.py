"""Settings read by the planner: search limits (settable from code and environment).

| variable | default | meaning |
|---|---|---|
| `SVOD_SEARCH_ITERATIONS` | 24 | saturation iterations at most |
| `SVOD_SEARCH_ENODES` | 200000 | stop saturating above this many e-nodes |
| `SVOD_SEARCH_SECONDS` | 2.0 | wall-time budget of one search (saturation + extraction) |
| `SVOD_SEARCH_REGION_NODES` | 400 | bigger graphs are searched region by region (one pass, never nested) |
| `SVOD_SEARCH_MAX_NODES` | 20000 | graphs bigger than this use the greedy planner |
| `SVOD_SEARCH_EXACT` | 6 | exact extraction up to this many free boundary choices |
| `SVOD_SEARCH` | 1 | 0: always use the greedy planner |
| `SVOD_ALGEBRA` | reassoc | `exact`: only bit-identical rewrites (docs/algebra.md) |
| `SVOD_TIERED` | 1 | 0: search a realize's new graph before its first run (`svod.tiered`) |
| `SVOD_SEARCH_PROCESS` | 1 | 0: background searches in a thread, not a process (`svod.searchproc`) |
| `SVOD_SEARCH_PROCESS_IDLE` | 60 | seconds the search process waits for work before it exits |

`SVOD_PENDING_DEPTH` (default 256; `svod.tensor.PENDING_DEPTH`) bounds the lazy graph
itself: a pending graph deeper than that is realized before it grows further (see
docs/planning.md).

>>> import svod
>>> with svod.search_limits(seconds=0.5):
...     svod.config.limits().seconds
0.5
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class SearchLimits:
    iterations: int = 24
    enodes: int = 200_000
    seconds: float = 2.0
    max_nodes: int = 20000
    region_nodes: int = 400
    exact: int = 6
    enabled: bool = True
    algebra: str = "reassoc"  # "reassoc" | "exact": which algebra rule sets run (docs/algebra.md)


def _from_env() -> SearchLimits:
    e = os.environ.get
    return SearchLimits(
        iterations=int(e("SVOD_SEARCH_ITERATIONS", 24)),
        enodes=int(e("SVOD_SEARCH_ENODES", 200_000)),
        seconds=float(e("SVOD_SEARCH_SECONDS", 2.0)),
        max_nodes=int(e("SVOD_SEARCH_MAX_NODES", 20000)),
        region_nodes=int(e("SVOD_SEARCH_REGION_NODES", 400)),
        exact=int(e("SVOD_SEARCH_EXACT", 6)),
        enabled=e("SVOD_SEARCH", "1") not in ("0", "false", "False"),
        algebra=e("SVOD_ALGEBRA", "reassoc"),
    )


_local = threading.local()
_global: SearchLimits | None = None


def limits() -> SearchLimits:
    """The limits in force (innermost `search_limits` context, else set globally, else env)."""
    stack = getattr(_local, "stack", None)
    if stack:
        return stack[-1]
    return _global or _from_env()


def algebra() -> str:
    """`limits().algebra` without reading the other limits from the environment (einsum
    asks once per call: building all of `SearchLimits` from the environment was a tenth
    of a small einsum's Python time)."""
    stack = _local.__dict__.get("stack")  # (no AttributeError raised and caught when unset)
    if stack:
        return stack[-1].algebra
    if _global is not None:
        return _global.algebra
    if _ENV_DATA is not None:  # (the environment's own dict: ~0.1 µs, not os.environ.get's ~1 µs)
        v = _ENV_DATA.get(_ALGEBRA_KEY)
        return "reassoc" if v is None else os.environ.decodevalue(v)
    return os.environ.get("SVOD_ALGEBRA", "reassoc")


_ENV_DATA = getattr(os.environ, "_data", None) if hasattr(os.environ, "encodekey") else None
_ALGEBRA_KEY = os.environ.encodekey("SVOD_ALGEBRA") if _ENV_DATA is not None else None


@contextlib.contextmanager
def pinned(value: SearchLimits):
    """Use `value` as the limits of the calling thread within the block, whatever is set
    globally meanwhile (a background search keeps the limits it was queued under,
    svod.tiered)."""
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(value)
    try:
        yield value
    finally:
        stack.pop()


class search_limits(contextlib.AbstractContextManager):
    """Set search limits: for the process (`svod.search_limits(seconds=1)`) or, used as a
    context manager, for the enclosed block only."""

    def __init__(self, **changes):
        global _global
        unknown = set(changes) - set(SearchLimits.__dataclass_fields__)
        if unknown:
            raise TypeError(f"search_limits: unknown limit(s) {sorted(unknown)}; "
                            f"known: {sorted(SearchLimits.__dataclass_fields__)}")
        if changes.get("algebra", "reassoc") not in ("reassoc", "exact"):
            raise ValueError(f"search_limits: algebra must be 'reassoc' or 'exact', got {changes['algebra']!r}")
        self._prev = _global
        self.value = replace(limits(), **changes)
        _global = self.value
        self._entered = False

    def __enter__(self):
        global _global
        _global = self._prev  # as a context manager the change is scoped, not global
        stack = getattr(_local, "stack", None)
        if stack is None:
            stack = _local.stack = []
        stack.append(self.value)
        return self.value

    def __exit__(self, *exc):
        _local.stack.pop()
        return False
