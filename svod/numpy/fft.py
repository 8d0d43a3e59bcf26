"""`svod.numpy.fft`: numpy.fft's real-valued helpers over `svod.fft` (numpy's float64
default); the transforms raise `DTypeError` until svod has complex dtypes."""

from __future__ import annotations

from svod import fft as F
from svod.numpy._ndarray import numpy_function

IMPL = {
    "fftfreq": lambda n, d=1.0, device=None: F.fftfreq(n, d=d),
    "rfftfreq": lambda n, d=1.0, device=None: F.rfftfreq(n, d=d),
    "fftshift": lambda x, axes=None: F.fftshift(x, axes=axes),
    "ifftshift": lambda x, axes=None: F.ifftshift(x, axes=axes),
}
for _n in ("fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fft2", "ifft2",
           "rfft2", "irfft2"):
    IMPL[_n] = getattr(F, _n, None) or F._complex(_n)

for _name, _fn in IMPL.items():
    globals()[_name] = numpy_function(_fn, _name)

__all__ = list(IMPL)
