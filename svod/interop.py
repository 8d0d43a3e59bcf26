"""Exchange with other array libraries: DLPack both ways, numpy's dispatch protocols
(NEP 13 `__array_ufunc__`, NEP 18 `__array_function__`: their handlers are in
`svod/numpy/_protocols.py`, above `svod.numpy`), the Array API inspection namespace and
`isdtype`.

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
from svod.ir import UOp
from svod.tensor import Tensor

__all__ = ["NotImplementedByNumpyDispatch", "array_namespace_info", "from_dlpack", "isdtype", "to_dlpack"]


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
        out = {d.name: d for d in dt.ALL}
        if kind is None:
            return out
        return {n: d for n, d in out.items() if isdtype(d, kind)}


def array_namespace_info() -> _Info:
    return _Info()


def isdtype(dtype, kind) -> bool:
    """Array API `isdtype`: kind is a dtype, a kind name, or a tuple of those."""
    d = dt.dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        kinds = {"bool": d.is_bool, "signed integer": d.is_signed, "unsigned integer": d.is_unsigned,
                 "integral": d.is_int, "real floating": d.is_float, "complex floating": d.is_complex,
                 "numeric": not d.is_bool}
        if kind not in kinds:
            raise ValueError(f"isdtype: unknown kind {kind!r}; the kinds are {', '.join(map(repr, kinds))}")
        return kinds[kind]
    return d == dt.dtype(kind)
