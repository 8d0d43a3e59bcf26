"""numpy buffers as native pointers: `data_address(a)`, the data pointer of an ndarray,
fast enough for per-call argument blocks (graph programs, BLAS steps).

>>> import numpy as np
>>> a = np.zeros(4, np.float32)
>>> data_address(a) == a.__array_interface__["data"][0]
True
"""

from __future__ import annotations

import ctypes

import numpy as np


def _probe_data_offset() -> int | None:
    """Offset of `data` in numpy's array struct (PyArray_DATA: right after the object
    header, part of numpy's C ABI), checked against `__array_interface__`; None when the
    probe disagrees (then the slower public path is used)."""
    off = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    try:
        for a in (np.zeros(3, np.float32), np.zeros(5, np.int64)[1:], np.empty(0, np.uint8)):
            if ctypes.c_void_p.from_address(id(a) + off).value != a.__array_interface__["data"][0]:
                return None
    except Exception:  # noqa: BLE001 - not CPython: use the public path
        return None
    return off


_DATA_OFFSET = _probe_data_offset()
# NOTE: all of memory as an array of words: indexing it reads one word without building a
# ctypes object (docs/codegen.md has the timings). Used only for the aligned `data` field
# found by the probe.
_WORDS = (ctypes.c_size_t * (1 << 58)).from_address(0) if _DATA_OFFSET is not None \
    and _DATA_OFFSET % ctypes.sizeof(ctypes.c_size_t) == 0 and ctypes.sizeof(ctypes.c_size_t) == 8 else None


def data_address(a: np.ndarray) -> int:
    """The data pointer of `a`: numpy's `data` field read directly when the probe found it,
    else through ``__array_interface__``."""
    if _WORDS is not None:
        return _WORDS[(id(a) + _DATA_OFFSET) >> 3]
    if _DATA_OFFSET is not None:
        return ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value or 0
    return a.__array_interface__["data"][0]


__all__ = ["data_address"]
