"""`meshgrid` (Array API): coordinate grids as lazy broadcasts (no copies until used).

>>> import svod
>>> X, Y = svod.meshgrid(svod.asarray([1, 2, 3]), svod.asarray([10, 20]))
>>> X.shape, Y.tolist()
((2, 3), [[10, 10, 10], [20, 20, 20]])
"""

from __future__ import annotations

from svod.elementwise import broadcast_to
from svod.errors import ShapeError, SvodValueError
from svod.ir import shape_str
from svod.movement import reshape
from svod.tensor import Tensor, asarray

__all__ = ["meshgrid"]


def meshgrid(*arrays, indexing: str = "xy") -> list[Tensor]:
    """One array per input, each the input broadcast over the grid of all inputs' lengths
    ("xy": the first two axes swapped, as numpy and the Array API do for 2-D plots)."""
    if indexing not in ("xy", "ij"):
        raise SvodValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    arrays = [asarray(a) for a in arrays]
    for a in arrays:
        if a.ndim != 1:
            raise ShapeError(f"meshgrid: inputs must be 1-D, got shape {shape_str(a.shape)}")
    n = len(arrays)
    shape = [a.shape[0] for a in arrays]
    if indexing == "xy" and n >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, a in enumerate(arrays):
        axis = {0: 1, 1: 0}.get(i, i) if indexing == "xy" and n >= 2 else i
        view = [1] * n
        view[axis] = a.shape[0]
        out.append(broadcast_to(reshape(a, tuple(view)), tuple(shape)))
    return out
