"""Set functions (Array API): `unique_all`, `unique_counts`, `unique_inverse`,
`unique_values`, computed by numpy on the realized input (eager: their shapes depend on
the data; docs/semantics.md). Each NaN is a distinct value, -0.0 and 0.0 one value;
values come sorted; indices and counts are int64; `inverse_indices` has the input's
shape.

>>> import svod
>>> r = svod.unique_counts(svod.asarray([3, 1, 3, 2]))
>>> r.values.tolist(), r.counts.tolist()
([1, 2, 3], [1, 1, 2])
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from svod.tensor import Tensor, _from_numpy, asarray

__all__ = ["unique_all", "unique_counts", "unique_inverse", "unique_values"]


class UniqueAllResult(NamedTuple):
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


def _wrap(a: np.ndarray, index: bool = False) -> Tensor:
    return _from_numpy(a.astype(np.int64, copy=False) if index else np.ascontiguousarray(a), copy=False)


def unique_all(x, /) -> UniqueAllResult:
    r = np.unique_all(asarray(x).numpy())
    return UniqueAllResult(_wrap(r.values), _wrap(r.indices, True), _wrap(r.inverse_indices, True),
                           _wrap(r.counts, True))


def unique_counts(x, /) -> UniqueCountsResult:
    r = np.unique_counts(asarray(x).numpy())
    return UniqueCountsResult(_wrap(r.values), _wrap(r.counts, True))


def unique_inverse(x, /) -> UniqueInverseResult:
    r = np.unique_inverse(asarray(x).numpy())
    return UniqueInverseResult(_wrap(r.values), _wrap(r.inverse_indices, True))


def unique_values(x, /) -> Tensor:
    return _wrap(np.unique_values(asarray(x).numpy()))
