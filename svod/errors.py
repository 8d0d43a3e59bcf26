"""Exceptions raised where the user wrote the op (never at realize time).

Each names the op and the shapes, axes or dtypes involved. They subclass the builtin
exceptions numpy raises for the same mistakes, so `except ValueError` keeps working.
"""

from __future__ import annotations

from svod.dtype import DTypeError


class ShapeError(ValueError):
    """Incompatible shapes: broadcasting, reshape, matmul, concat."""


class AxisError(ValueError, IndexError):
    """An axis out of range or repeated (numpy's AxisError is both, too)."""


class SvodIndexError(IndexError):
    """Bad index: out of range, too many indices, unsupported index type."""


class SvodWarning(UserWarning):
    """A fallback was taken: results stay correct, but slower."""


__all__ = ["ShapeError", "AxisError", "SvodIndexError", "DTypeError", "SvodWarning"]
