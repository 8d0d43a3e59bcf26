"""numpy.einsum / numpy.einsum_path in `svod.numpy`: the same functions as `svod.einsum` and
`svod.einsum_path` (svod/contraction.py has the semantics and the lowering)."""

from __future__ import annotations

from svod.contraction import einsum, einsum_path

__all__ = ["einsum", "einsum_path"]
