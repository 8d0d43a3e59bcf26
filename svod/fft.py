"""`svod.fft`: the Array API FFT extension (2023.12), as far as svod's dtypes go.

`fftfreq`, `rfftfreq`, `fftshift` and `ifftshift` are real-valued and work (the shifts
are lazy rolls). Every transform (`fft`, `ifft`, `fftn`, `ifftn`, `rfft`, `irfft`, `rfftn`,
`irfftn`, `hfft`, `ihfft`) produces or consumes complex arrays: svod has no complex
dtypes yet (issue 29's next phase adds complex64/complex128, and the transforms then run
numpy's pocketfft as library steps, `svod.library`), so each raises `DTypeError` naming
itself. docs/semantics.md lists this.

>>> import svod
>>> svod.fft.fftfreq(4, d=0.5).tolist()
[0.0, 0.5, -1.0, -0.5]
"""

from __future__ import annotations

import numpy as np

from svod import dtype as dt
from svod.dtype import DTypeError
from svod.errors import named, numpy_errors
from svod.ir import check_size
from svod.tensor import Tensor, _check_int, _from_numpy, _normalize_axes, asarray, roll

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


def _complex(name: str):
    def transform(x, /, *args, **kwargs):
        asarray(x)
        raise DTypeError(f"fft.{name}: the transforms take or give complex arrays, and svod has no complex dtypes "
                         f"yet (only fftfreq, rfftfreq, fftshift and ifftshift work); compute it with numpy "
                         f"(np.fft.{name}(t.numpy()))")

    named(transform, name)
    transform.__doc__ = f"Not available yet: `{name}` needs complex dtypes (raises DTypeError)."
    return transform


fft, ifft, fftn, ifftn = _complex("fft"), _complex("ifft"), _complex("fftn"), _complex("ifftn")
rfft, irfft, rfftn, irfftn = _complex("rfft"), _complex("irfft"), _complex("rfftn"), _complex("irfftn")
hfft, ihfft = _complex("hfft"), _complex("ihfft")
