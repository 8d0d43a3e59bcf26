"""`svod.fft`: the Array API FFT extension (2023.12), as far as svod's dtypes go.

The transforms (`fft`, `ifft`, `fftn`, `ifftn`, `rfft`, `irfft`, `rfftn`, `irfftn`,
`hfft`, `ihfft`) run numpy's pocketfft as library steps of the plan (`svod.library`: lazy,
one step per call, results feeding fused kernels), so their values are numpy's bit for
bit. Dtypes as numpy 2: a float32 or complex64 input transforms in single precision
(complex64 out, float32 for irfft/hfft), float64/complex128 in double; integer and bool
input in the default float's precision. `fftfreq`, `rfftfreq`, `fftshift` and `ifftshift`
are real-valued (the shifts are lazy rolls).

>>> import svod
>>> svod.fft.fftfreq(4, d=0.5).tolist()
[0.0, 0.5, -1.0, -0.5]
"""

from __future__ import annotations

import numpy as np

from svod import dtype as dt
from svod.creation import library_call
from svod.dtype import DTypeError
from svod.errors import ShapeError, SvodValueError, numpy_errors
from svod.ir import check_size
from svod.movement import roll
from svod.tensor import Tensor, _check_int, _from_numpy, _normalize_axes, asarray

__all__ = ["fft", "fftfreq", "fftn", "fftshift", "hfft", "ifft", "ifftn", "ifftshift", "ihfft", "irfft", "irfftn",
           "rfft", "rfftfreq", "rfftn"]


def fftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> Tensor:
    """Sample frequencies of an n-point transform: [0, 1, ..., -1] / (d n)."""
    want = dt.dtype(dtype) if dtype is not None else dt.default_float
    n = _check_int(n, "n", "fft.fftfreq", 1)
    check_size((n,), want)
    with numpy_errors("fft.fftfreq", f"d={d!r}"):
        return _from_numpy(np.fft.fftfreq(n, d=d).astype(want.np), copy=False)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype=None, device=None) -> Tensor:
    want = dt.dtype(dtype) if dtype is not None else dt.default_float
    n = _check_int(n, "n", "fft.rfftfreq", 1)
    check_size((n // 2 + 1,), want)
    with numpy_errors("fft.rfftfreq", f"d={d!r}"):
        return _from_numpy(np.fft.rfftfreq(n, d=d).astype(want.np), copy=False)


def _shift(x, axes, sign: int, name: str) -> Tensor:
    x = asarray(x)
    ax = _normalize_axes(axes, x.ndim, f"fft.{name}")
    return roll(x, tuple(sign * (x.shape[a] // 2) for a in ax), axis=ax) if ax else x


def fftshift(x, /, *, axes=None) -> Tensor:
    """The zero frequency moved to the centre (a lazy roll by n // 2)."""
    return _shift(x, axes, 1, "fftshift")


def ifftshift(x, /, *, axes=None) -> Tensor:
    return _shift(x, axes, -1, "ifftshift")


_NORMS = ("backward", "ortho", "forward")


def _prepare(name: str, x, norm: str, real_in: bool | None):
    """The operand cast to what pocketfft takes: a complex dtype (`real_in` False), a real
    float (`real_in` True) or either (None: fft/ifft/fftn/ifftn take real input as numpy
    does, giving the complex dtype of its width)."""
    x = asarray(x)
    if norm not in _NORMS:
        raise SvodValueError(f"fft.{name}: norm must be one of {', '.join(map(repr, _NORMS))}, got {norm!r}")
    if x.ndim == 0:
        raise ShapeError(f"fft.{name}: needs at least one dimension, got a 0-d array")
    d = x.dtype
    if real_in:
        if d.is_complex:
            raise DTypeError(f"fft.{name}: takes a real array, got {d} (use fft.fft for complex input)")
        want = dt.math_float(d)
    else:
        want = dt.complex_of(dt.math_float(d)) if real_in is False or not d.is_inexact else d
    return x.astype(want, copy=False), want


def _n(name: str, n, what: str = "n"):
    return None if n is None else _check_int(n, what, f"fft.{name}", 1)


def _one_axis(name: str, x, n, axis: int, norm: str, real_in, out_len):
    x, d = _prepare(name, x, norm, real_in)
    (a,) = _normalize_axes(axis, x.ndim, f"fft.{name}")
    n = _n(name, n)
    shape = list(x.shape)
    shape[a] = out_len(n, x.shape[a])
    if shape[a] < 1 or (n is None and x.shape[a] < 1):
        raise SvodValueError(f"fft.{name}: invalid number of points {shape[a]} along axis {a} of shape {x.shape}")
    out_d = d.real if name in ("irfft", "hfft") else dt.complex_of(d)
    check_size(tuple(shape), out_d)
    return library_call("fft", (name, n, a, norm), [x], [(tuple(shape), out_d)])[0]


def _many_axes(name: str, x, s, axes, norm: str, real_in, last_len):
    x, d = _prepare(name, x, norm, real_in)
    if s is not None:
        s = tuple(_n(name, v, "s") for v in s)
    if axes is None:
        ax = tuple(range(x.ndim)) if s is None else tuple(range(x.ndim - len(s), x.ndim))
    else:
        ax = tuple(_normalize_axes(a, x.ndim, f"fft.{name}")[0] for a in axes)
    if s is not None and len(s) != len(ax):
        raise SvodValueError(f"fft.{name}: s {s} and axes {ax} have different lengths")
    shape = list(x.shape)
    for i, a in enumerate(ax):
        shape[a] = s[i] if s is not None else x.shape[a]
    if ax and last_len is not None:
        shape[ax[-1]] = last_len(None if s is None else s[-1], x.shape[ax[-1]])
    out_d = d.real if name == "irfftn" else dt.complex_of(d)
    check_size(tuple(shape), out_d)
    return library_call("fft", (name, s, ax, norm), [x], [(tuple(shape), out_d)])[0]


def _same(n, m):
    return m if n is None else n


def _half(n, m):
    return _same(n, m) // 2 + 1


def _full(n, m):
    return 2 * (m - 1) if n is None else n


def fft(x, /, *, n=None, axis: int = -1, norm: str = "backward") -> Tensor:
    """One-dimensional discrete Fourier transform along `axis` (numpy's pocketfft, a
    library step of the plan); real input gives the complex dtype of its width."""
    return _one_axis("fft", x, n, axis, norm, None, _same)


def ifft(x, /, *, n=None, axis: int = -1, norm: str = "backward") -> Tensor:
    return _one_axis("ifft", x, n, axis, norm, None, _same)


def rfft(x, /, *, n=None, axis: int = -1, norm: str = "backward") -> Tensor:
    """Transform of real input: the n // 2 + 1 non-negative frequencies."""
    return _one_axis("rfft", x, n, axis, norm, True, _half)


def irfft(x, /, *, n=None, axis: int = -1, norm: str = "backward") -> Tensor:
    """Inverse of `rfft`: n real points (2 (m - 1) by default)."""
    return _one_axis("irfft", x, n, axis, norm, False, _full)


def hfft(x, /, *, n=None, axis: int = -1, norm: str = "backward") -> Tensor:
    """Transform of a Hermitian-symmetric signal (given by its first half): real output."""
    return _one_axis("hfft", x, n, axis, norm, False, _full)


def ihfft(x, /, *, n=None, axis: int = -1, norm: str = "backward") -> Tensor:
    return _one_axis("ihfft", x, n, axis, norm, True, _half)


def fftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    return _many_axes("fftn", x, s, axes, norm, None, None)


def ifftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    return _many_axes("ifftn", x, s, axes, norm, None, None)


def rfftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    return _many_axes("rfftn", x, s, axes, norm, True, _half)


def irfftn(x, /, *, s=None, axes=None, norm: str = "backward") -> Tensor:
    return _many_axes("irfftn", x, s, axes, norm, False, _full)
