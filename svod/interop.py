"""Exchange with other array libraries: DLPack both ways, numpy's dispatch protocols
(NEP 13 `__array_ufunc__`, NEP 18 `__array_function__`), the Array API inspection
namespace.

**numpy calls on svod tensors stay svod.** ``np.exp(t)``, ``np.sum(t, 0)``,
``np.concatenate([t, u])``, ``a_numpy_array * t`` return lazy svod tensors: numpy hands
the call to svod, which runs `svod.numpy`'s implementation of the same function (numpy's
calling conventions: positional axes, ``out=``, ``dtype=``, ufunc methods). The dtype rules
are the operands': svod's (float32 default) for plain `svod.Tensor` operands, numpy's
(float64) when one is a `svod.numpy.ndarray`. A numpy function svod does not implement
raises `TypeError` naming it (`NotImplementedByNumpyDispatch`) — never a silent
conversion. The one rule that leaves svod: explicit conversion (``np.asarray(t)``,
``np.array(t)``, ``t.numpy()``) computes the value and hands numpy a read-only view.

**DLPack.** ``t.__dlpack__()`` realizes `t` and exports svod's buffer without a copy;
the buffer is read-only (svod may hand it to other tensors), which DLPack >= 1.0
consumers are told through its read-only flag. A consumer asking for an older DLPack
version (which cannot say "read-only") gets a copy, unless it passed ``copy=False``
(then `BufferError`). ``svod.from_dlpack(x)`` wraps another library's CPU array
without a copy: the producer's later writes show through (DLPack's contract), so do
not write to it while svod tensors computed from it are pending.

>>> import numpy as np, svod
>>> t = svod.asarray([1.0, 4.0])
>>> type(np.sqrt(t)).__name__, np.sqrt(t).tolist()
('Tensor', [1.0, 2.0])
>>> svod.from_dlpack(np.arange(3.0)).tolist()
[0.0, 1.0, 2.0]
"""

from __future__ import annotations

import numpy as np

from svod import dtype as dt
from svod.errors import SvodValueError

__all__ = ["NotImplementedByNumpyDispatch", "array_function", "array_namespace_info", "array_ufunc",
           "from_dlpack", "to_dlpack"]


class NotImplementedByNumpyDispatch(TypeError):
    """numpy handed svod a function (or ufunc method) svod does not implement."""


# ----------------------------------------------------------------------------- DLPack


def to_dlpack(t, *, stream=None, max_version=None, dl_device=None, copy=None):
    """The capsule of `t`'s realized buffer (see the module docstring)."""
    if dl_device is not None and tuple(dl_device) != (1, 0):
        raise BufferError(f"__dlpack__: svod's tensors live on the CPU (device (1, 0)), not {dl_device}")
    arr = t.numpy()
    if copy:
        arr = np.array(arr)
    kw = {"max_version": max_version} if max_version is not None else {}
    try:
        return arr.__dlpack__(stream=stream, copy=copy, **kw)
    except BufferError:
        if copy is False or arr.flags.writeable:
            raise BufferError("__dlpack__: svod's buffer is read-only and this DLPack version cannot say so; "
                              "ask for max_version >= (1, 0) or allow a copy") from None
        return np.array(arr).__dlpack__(stream=stream, **kw)


def from_dlpack(x, /, *, device=None, copy=None):
    """A svod tensor viewing the DLPack producer `x`'s CPU data (a copy when `copy=True`
    or the data is not contiguous)."""
    from svod.ir import UOp
    from svod.tensor import Tensor

    if device not in (None, "cpu"):
        raise SvodValueError(f"from_dlpack: svod runs on 'cpu', not {device!r}")
    try:
        arr = np.from_dlpack(x, copy=copy)
    except (TypeError, BufferError, RuntimeError) as e:
        raise type(e)(f"from_dlpack: cannot import {type(x).__name__}: {e}") from e
    d = dt.from_numpy(arr.dtype, what=f"from_dlpack({type(x).__name__})")
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    return Tensor._from(UOp.buffer(arr, d))


# ----------------------------------------------------------------------------- numpy protocols


def _numpy_mode(objs) -> bool:
    """Whether a svod.numpy.ndarray is among the operands (numpy's dtype defaults then)."""
    from svod.numpy._ndarray import ndarray

    stack = list(objs)
    while stack:
        o = stack.pop()
        if type(o) is ndarray:
            return True
        if isinstance(o, (list, tuple)):
            stack.extend(o)
    return False


def _call(fn, args, kwargs, name: str):
    from svod.numpy._ndarray import call_numpy, call_svod

    if _numpy_mode(args) or _numpy_mode(kwargs.values()):
        return call_numpy(fn, args, kwargs)
    return call_svod(fn, args, kwargs)


def array_ufunc(ufunc, method: str, inputs, kwargs):
    """NEP 13: ``np.<ufunc>.<method>(...)`` with a svod tensor among the operands."""
    from svod.numpy import _ufuncs

    u = _ufuncs.UFUNCS.get(ufunc.__name__)
    if u is None:
        raise NotImplementedByNumpyDispatch(f"numpy.{ufunc.__name__} is not implemented by svod; compute it in "
                                            f"numpy on t.numpy() (or np.asarray(t))")
    fn = u if method == "__call__" else getattr(u, method, None)
    if fn is None:
        raise NotImplementedByNumpyDispatch(f"numpy.{ufunc.__name__}.{method} is not implemented by svod")
    return _call(fn, inputs, kwargs, f"{ufunc.__name__}.{method}")


def array_function(func, types, args, kwargs):
    """NEP 18: a numpy function called with a svod tensor among its arguments."""
    from svod.numpy import _dispatch_table

    mod = getattr(func, "__module__", "") or ""
    sub = next((s for s in ("linalg", "fft", "random") if mod.startswith(f"numpy.{s}")), "")
    name = f"{sub}.{func.__name__}" if sub else func.__name__
    impl = _dispatch_table().get(name)
    if impl is None:
        raise NotImplementedByNumpyDispatch(f"numpy.{name} is not implemented by svod; compute it in numpy on "
                                            f"t.numpy() (or np.asarray(t)), or see docs/semantics.md for what "
                                            f"svod.numpy covers")
    return _call(impl, args, kwargs, name)


# ----------------------------------------------------------------------------- Array API inspection


class _Info:
    """`__array_namespace_info__()` of the Array API 2023.12."""

    def capabilities(self) -> dict:
        return {"boolean indexing": True, "data-dependent shapes": True}

    def default_device(self) -> str:
        return "cpu"

    def devices(self) -> list[str]:
        return ["cpu"]

    def default_dtypes(self, *, device=None) -> dict:
        return {"real floating": dt.default_float, "complex floating": dt.complex_of(dt.default_float),
                "integral": dt.int64, "indexing": dt.int64}

    def dtypes(self, *, device=None, kind=None) -> dict:
        from svod import isdtype

        out = {d.name: d for d in dt.ALL}
        if kind is None:
            return out
        return {n: d for n, d in out.items() if isdtype(d, kind)}


def array_namespace_info() -> _Info:
    return _Info()
