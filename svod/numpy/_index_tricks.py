"""numpy's `mgrid` and `ogrid`: index grids from slices (``np.mgrid[0:3, 0:5]``), lazy
broadcasts of aranges (a complex step ``5j`` means 5 points, ends included, as numpy)."""

from __future__ import annotations

import svod.tensor as T
from svod import creation as C
from svod import dtype as dt
from svod import movement as M
from svod.errors import SvodTypeError
from svod.grids import meshgrid

__all__ = ["mgrid", "ogrid"]


def _axis_values(s) -> T.Tensor:
    if not isinstance(s, slice):
        raise SvodTypeError(f"mgrid/ogrid: index with slices (start:stop:step), got {type(s).__name__}")
    start = 0 if s.start is None else s.start
    step = 1 if s.step is None else s.step
    if isinstance(step, complex):
        return C.linspace(start, s.stop, int(abs(step)))
    if any(isinstance(v, float) for v in (start, s.stop, step)):
        return C.arange(float(start), float(s.stop), float(step), dtype=dt.default_float)
    return C.arange(start, s.stop, step)


class _Grid:
    def __init__(self, sparse: bool):
        self.sparse = sparse

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            return _axis_values(key)
        vals = [_axis_values(k) for k in key]
        d = T.result_type(*vals)
        vals = [T.astype(v, d, copy=False) for v in vals]
        if self.sparse:
            n = len(vals)
            return [M.reshape(v, tuple(v.shape[0] if i == j else 1 for j in range(n))) for i, v in enumerate(vals)]
        return M.stack(meshgrid(*vals, indexing="ij"))


mgrid = _Grid(sparse=False)
ogrid = _Grid(sparse=True)
