"""Seeded random tensors (generated on the host with numpy's PCG64, then lazy as usual).

>>> import svod
>>> svod.random.seed(0); a = svod.random.rand(3)
>>> svod.random.seed(0); bool((a == svod.random.rand(3)).all())
True
"""

from __future__ import annotations

import threading

import numpy as np

from svod import dtype as dt

_lock = threading.Lock()
_gen = np.random.default_rng(0)


def seed(s: int) -> None:
    """Reset the global generator (svod.random is deterministic per seed)."""
    global _gen
    with _lock:
        _gen = np.random.default_rng(s)


def _shape(args, size):
    if size is not None:
        return (size,) if isinstance(size, int) else tuple(size)
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def _make(arr, dtype):
    from svod.tensor import _from_numpy
    from svod.tracing import JitError, current

    tr = current()
    if tr is not None:
        raise JitError(f"jit({tr.fn_name}): svod.random inside a jitted function would draw once, when it is traced, "
                       "and replay the same numbers on every call; draw outside it and pass the random tensor as an "
                       "argument")

    return _from_numpy(np.ascontiguousarray(arr.astype(dt.dtype(dtype).np)), copy=False)


def rand(*shape, size=None, dtype=dt.float32):
    """Uniform [0, 1)."""
    with _lock:
        return _make(_gen.random(_shape(shape, size)), dtype)


def uniform(low=0.0, high=1.0, size=None, dtype=dt.float32):
    with _lock:
        return _make(_gen.uniform(low, high, _shape((), size)), dtype)


def randn(*shape, size=None, dtype=dt.float32):
    """Standard normal."""
    with _lock:
        return _make(_gen.standard_normal(_shape(shape, size)), dtype)


def normal(loc=0.0, scale=1.0, size=None, dtype=dt.float32):
    with _lock:
        return _make(_gen.normal(loc, scale, _shape((), size)), dtype)


def randint(low, high=None, size=None, dtype=dt.int64):
    if high is None:
        low, high = 0, low
    with _lock:
        return _make(_gen.integers(low, high, _shape((), size)), dtype)


def permutation(n: int):
    with _lock:
        return _make(_gen.permutation(n), dt.int64)
