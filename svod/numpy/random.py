"""`svod.numpy.random`: numpy.random with svod arrays out.

Every function and `Generator`/`RandomState` method is numpy's own (same seeds, same
numbers, bit for bit); array results come back as `svod.numpy.ndarray`s and svod tensors
passed in are realized first. Sampling is eager (it is data creation).
"""

from __future__ import annotations

import numpy as _np

from svod.dtype import ALL as _ALL
from svod.errors import named, numpy_errors
from svod.numpy._ndarray import retag
from svod.tensor import Tensor, asarray

_SUPPORTED = frozenset(d.name for d in _ALL)  # numpy results of other dtypes stay numpy arrays


def _in(x):
    if isinstance(x, Tensor):
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(_in(v) for v in x)
    return x


def _out(r):
    if isinstance(r, _np.ndarray):
        if r.dtype.name in _SUPPORTED:
            return retag(asarray(r, copy=False))
        return r
    return r


def _wrap(fn, name: str):
    def f(*args, **kwargs):
        with numpy_errors(name):
            return _out(fn(*[_in(a) for a in args], **{k: _in(v) for k, v in kwargs.items()}))

    named(f, name)
    f.__doc__ = getattr(fn, "__doc__", None)
    return f


class _Wrapped:
    """A numpy Generator / RandomState whose methods return svod arrays."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        a = getattr(self._inner, name)
        return _wrap(a, name) if callable(a) else a

    def __repr__(self) -> str:
        return f"svod.numpy.random({self._inner!r})"


def default_rng(seed=None):
    return _Wrapped(_np.random.default_rng(_in(seed)))


def RandomState(seed=None):  # noqa: N802 - numpy's name
    return _Wrapped(_np.random.RandomState(_in(seed)))


def Generator(bit_generator):  # noqa: N802
    return _Wrapped(_np.random.Generator(bit_generator))


seed = _np.random.seed
get_state, set_state = _np.random.get_state, _np.random.set_state


def __getattr__(name: str):
    fn = getattr(_np.random, name)
    return _wrap(fn, name) if callable(fn) and not isinstance(fn, type) else fn
