"""`svod.numpy.fft`: numpy.fft over `svod.fft` (numpy's signatures: positional `n`/`s`,
`axis`/`axes`, ``norm=None`` for "backward"; numpy's float64 default, so the transform of
an integer or float64 array is complex128). The transforms are pocketfft library steps."""

from __future__ import annotations

from svod import fft as F
from svod.numpy._ndarray import numpy_function

IMPL = {
    "fftfreq": lambda n, d=1.0, device=None: F.fftfreq(n, d=d),
    "rfftfreq": lambda n, d=1.0, device=None: F.rfftfreq(n, d=d),
    "fftshift": lambda x, axes=None: F.fftshift(x, axes=axes),
    "ifftshift": lambda x, axes=None: F.ifftshift(x, axes=axes),
}


def _one(name: str):
    f = getattr(F, name)

    def transform(a, n=None, axis=-1, norm=None, out=None):
        if out is not None:
            raise TypeError(f"fft.{name}: out= is not supported (svod arrays are values)")
        return f(a, n=n, axis=axis, norm=norm or "backward")

    return transform


def _many(name: str, default_axes=None):
    f = getattr(F, name.replace("2", "n"))

    def transform(a, s=None, axes=default_axes, norm=None, out=None):
        if out is not None:
            raise TypeError(f"fft.{name}: out= is not supported (svod arrays are values)")
        return f(a, s=s, axes=axes, norm=norm or "backward")

    return transform


for _n in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
    IMPL[_n] = _one(_n)
for _n in ("fftn", "ifftn", "rfftn", "irfftn"):
    IMPL[_n] = _many(_n)
for _n in ("fft2", "ifft2", "rfft2", "irfft2"):
    IMPL[_n] = _many(_n, (-2, -1))

for _name, _fn in IMPL.items():
    globals()[_name] = numpy_function(_fn, _name)

__all__ = list(IMPL)
