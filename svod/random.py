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
from svod.errors import numpy_errors
from svod.tensor import _check_int, _check_shape, _from_numpy
from svod.tracing import JitError, current

_lock = threading.Lock()
_gen = np.random.default_rng(0)


def seed(s: int) -> None:
    """Reset the global generator (svod.random is deterministic per seed)."""
    global _gen
    with _lock:
        _gen = np.random.default_rng(s)


def _shape(args, size, op: str, dtype):
    """The shape asked for (`*args` or `size=`), checked: integers, none negative, not too
    big (svod.tensor._check_shape); errors name `random.<op>`."""
    if size is not None:
        shape = size
    elif len(args) == 1 and isinstance(args[0], (tuple, list)):
        shape = tuple(args[0])
    else:
        shape = tuple(args)
    return _check_shape(shape, f"random.{op}", dt.dtype(dtype))


def _make(arr, dtype):
    tr = current()
    if tr is not None:
        raise JitError(f"jit({tr.fn_name}): svod.random inside a jitted function would draw once, when it is traced, "
                       "and replay the same numbers on every call; draw outside it and pass the random tensor as an "
                       "argument")

    return _from_numpy(np.ascontiguousarray(arr.astype(dt.dtype(dtype).np)), copy=False)


def _draw(op: str, what: str, method: str, params: tuple, shape_args, size, dtype):
    """`_gen.<method>(*params, shape)` under the lock, as a tensor of `dtype`; numpy's errors
    name `random.<op>` and `what` (the arguments)."""
    with _lock, numpy_errors(f"random.{op}", what):
        return _make(getattr(_gen, method)(*params, _shape(shape_args, size, op, dtype)), dtype)


def rand(*shape, size=None, dtype=dt.float32):
    """Uniform [0, 1)."""
    return _draw("rand", f"shape {shape!r}, size={size!r}", "random", (), shape, size, dtype)


def uniform(low=0.0, high=1.0, size=None, dtype=dt.float32):
    return _draw("uniform", f"low={low!r}, high={high!r}, size={size!r}", "uniform", (low, high), (), size, dtype)


def randn(*shape, size=None, dtype=dt.float32):
    """Standard normal."""
    return _draw("randn", f"shape {shape!r}, size={size!r}", "standard_normal", (), shape, size, dtype)


def normal(loc=0.0, scale=1.0, size=None, dtype=dt.float32):
    return _draw("normal", f"loc={loc!r}, scale={scale!r}, size={size!r}", "normal", (loc, scale), (), size, dtype)


def randint(low, high=None, size=None, dtype=dt.int64):
    if high is None:
        low, high = 0, low
    return _draw("randint", f"low={low!r}, high={high!r}, size={size!r}", "integers", (low, high), (), size, dtype)


def permutation(n: int):
    n = _check_int(n, "n", "random.permutation", 0)
    with _lock:
        return _make(_gen.permutation(n), dt.int64)
