"""Views: how a kernel reads a tensor out of a flat buffer without copying it.

A `View` maps an index ``idx`` of its ``shape`` to an element address in a flat buffer:
``offset + sum(idx[i] * strides[i])`` (strides in elements; 0 broadcasts, negative flips),
unless ``mask`` says ``idx`` lies outside the valid box, in which case the value is the
pad value (chosen by the consumer; a `ViewChain` carries it). Every movement op of the
IR (reshape, permute, expand, shrink, flip, pad, and step slices) maps a View to a View,
except a reshape that mixes axes a single strided layout cannot express (reshape after
permute): `View.reshape` returns None then, and a `ViewChain` appends a second view,
whose address is a row-major linear index into the previous view's shape.

Views are canonical, so equal layouts compare equal and have equal `key()`s: size-1
axes (and axes whose valid range holds one index) have stride 0, a mask covering the
whole shape is None, a shape with a 0 has zero strides and no mask, and a fully masked
view has zero strides, offset 0 and an all-(0, 0) mask.

>>> import numpy as np
>>> v = View.contiguous((2, 3)).permute((1, 0))
>>> v.strides, v.reshape((6,)) is None
((1, 3), True)
>>> c = ViewChain.of((2, 3)).permute((1, 0)).reshape((6,))
>>> len(c.views), c.gather(np.arange(6)).tolist()
(2, [0, 3, 1, 4, 2, 5])
>>> p = apply_movement(ViewChain.of((2,)), "PAD", (((1, 2),), -1))
>>> p.gather(np.arange(2)).tolist(), p.views[0].mask
([-1, 0, 1, -1, -1], ((1, 3),))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

Shape = tuple[int, ...]
Mask = tuple[tuple[int, int], ...]


def _prod(xs: Iterable[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def _row_major(shape: Sequence[int]) -> Shape:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def _norm_axis(axis: int, ndim: int, op: str) -> int:
    if not -ndim <= axis < ndim:
        raise IndexError(f"{op}: axis {axis} out of range for {ndim} dims")
    return axis % ndim


class AxisInfo(NamedTuple):
    """One axis of a View for code generators: index i in [0, size) reads
    ``stride * i`` (plus the view's offset) when ``lo <= i < hi``."""

    size: int
    stride: int
    lo: int
    hi: int


class Shaped:
    """Mixin of anything with a `shape` tuple (View, UOp): its `ndim` and `size`."""

    __slots__ = ()
    shape: Shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return _prod(self.shape)


@dataclass(frozen=True)
class View(Shaped):
    """A strided, optionally masked view of a flat buffer (canonicalised on creation).

    >>> View((2, 1, 3), (3, 7, 1), 0, None).strides  # size-1 axes get stride 0
    (3, 0, 1)
    >>> View.contiguous((4,)).flip((0,)).address((1,))
    2
    """

    shape: Shape
    strides: Shape
    offset: int = 0
    mask: Mask | None = None

    def __post_init__(self) -> None:
        shape = tuple(int(n) for n in self.shape)
        strides = tuple(int(s) for s in self.strides)
        offset = int(self.offset)
        if len(strides) != len(shape) or any(n < 0 for n in shape):
            raise ValueError(f"View: bad shape {shape} / strides {strides}")
        mask = None if self.mask is None else tuple((int(lo), int(hi)) for lo, hi in self.mask)
        if mask is not None and len(mask) != len(shape):
            raise ValueError(f"View: mask {mask} does not match shape {shape}")
        if 0 in shape:  # nothing to read
            strides, offset, mask = (0,) * len(shape), 0, None
        elif mask is not None:
            mask = tuple((max(lo, 0), min(hi, n)) for (lo, hi), n in zip(mask, shape))
            if any(lo >= hi for lo, hi in mask):  # nothing valid: every read gives the pad value
                strides, offset, mask = (0,) * len(shape), 0, ((0, 0),) * len(shape)
            else:
                st = list(strides)
                for i, (lo, hi) in enumerate(mask):
                    if hi - lo == 1 and st[i] != 0:  # one valid index: fold it into the offset
                        offset += lo * st[i]
                        st[i] = 0
                strides = tuple(st)
                if all(lo == 0 and hi == n for (lo, hi), n in zip(mask, shape)):
                    mask = None
        if mask is None:
            strides = tuple(0 if n == 1 else s for n, s in zip(shape, strides))
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "offset", offset)
        object.__setattr__(self, "mask", mask)

    # ---- construction and properties

    @staticmethod
    def contiguous(shape: Sequence[int]) -> View:
        """The plain row-major layout of ``shape`` at offset 0."""
        return View(tuple(shape), _row_major(shape), 0, None)

    def key(self) -> tuple:
        """A stable, hashable description (plain ints and tuples)."""
        return (self.shape, self.strides, self.offset, self.mask)

    @property
    def is_contiguous(self) -> bool:
        """Plain row-major layout, offset 0, no mask. (Named ``is_`` because
        ``View.contiguous`` is the constructor.)"""
        return self == View.contiguous(self.shape)

    @property
    def fully_masked(self) -> bool:
        """Every index reads the pad value (and the view is not empty)."""
        return self.mask is not None and any(lo >= hi for lo, hi in self.mask)

    @property
    def is_broadcast(self) -> bool:
        """Some axis repeats an element (stride 0 over more than one valid index)."""
        return any(s == 0 and hi - lo > 1 for s, (lo, hi) in zip(self.strides, self.valid_box()))

    def valid_box(self) -> Mask:
        """The per-axis valid ranges [lo, hi) (the whole shape when unmasked)."""
        return self.mask if self.mask is not None else tuple((0, n) for n in self.shape)

    def axes(self) -> tuple[AxisInfo, ...]:
        """Per-axis size, stride and valid range: what a code generator needs (plus `offset`)."""
        return tuple(AxisInfo(n, s, lo, hi)
                     for n, s, (lo, hi) in zip(self.shape, self.strides, self.valid_box()))

    # ---- movement ops

    def permute(self, order: Sequence[int]) -> View:
        order = tuple(order)
        if sorted(order) != list(range(self.ndim)):
            raise ValueError(f"permute: {order} is not a permutation of {self.ndim} axes")
        mask = None if self.mask is None else tuple(self.mask[i] for i in order)
        return View(tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order),
                    self.offset, mask)

    def expand(self, shape: Sequence[int]) -> View:
        """Broadcast size-1 axes to ``shape`` (same number of dims)."""
        shape = tuple(shape)
        if len(shape) != self.ndim or any(a != b and a != 1 for a, b in zip(self.shape, shape)):
            raise ValueError(f"expand: cannot expand {self.shape} to {shape}")
        if shape == self.shape:
            return self
        mask = None
        if self.mask is not None:  # a size-1 axis that is valid stays valid everywhere
            mask = tuple((0, new) if old == 1 and hi > lo else (lo, hi)
                         for (lo, hi), old, new in zip(self.mask, self.shape, shape))
        strides = tuple(0 if old != new else s for s, old, new in zip(self.strides, self.shape, shape))
        return View(shape, strides, self.offset, mask)

    def shrink(self, arg: Sequence[tuple[int, int]]) -> View:
        """Keep ``[begin, end)`` of every axis."""
        arg = tuple((int(b), int(e)) for b, e in arg)
        if len(arg) != self.ndim or any(not 0 <= b <= e <= n for (b, e), n in zip(arg, self.shape)):
            raise ValueError(f"shrink: bad bounds {arg} for shape {self.shape}")
        offset = self.offset + sum(b * s for (b, _), s in zip(arg, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple((max(lo - b, 0), min(hi - b, e - b)) for (lo, hi), (b, e) in zip(self.mask, arg))
        return View(tuple(e - b for b, e in arg), self.strides, offset, mask)

    def flip(self, axes: Iterable[int]) -> View:
        axes = {_norm_axis(a, self.ndim, "flip") for a in axes}
        strides, offset = list(self.strides), self.offset
        mask = None if self.mask is None else list(self.mask)
        for a in axes:
            n = self.shape[a]
            if n == 0:
                continue
            offset += (n - 1) * strides[a]
            strides[a] = -strides[a]
            if mask is not None:
                lo, hi = mask[a]
                mask[a] = (n - hi, n - lo)
        return View(self.shape, tuple(strides), offset, None if mask is None else tuple(mask))

    def pad(self, arg: Sequence[tuple[int, int]]) -> View:
        """Add ``lo`` invalid indices before and ``hi`` after every axis."""
        arg = tuple((int(lo), int(hi)) for lo, hi in arg)
        if len(arg) != self.ndim or any(lo < 0 or hi < 0 for lo, hi in arg):
            raise ValueError(f"pad: bad padding {arg} for shape {self.shape}")
        if all(lo == 0 and hi == 0 for lo, hi in arg):
            return self
        shape = tuple(n + lo + hi for n, (lo, hi) in zip(self.shape, arg))
        if self.size == 0:  # padding an empty tensor: all pad values
            return View(shape, (0,) * self.ndim, 0, ((0, 0),) * self.ndim)
        offset = self.offset - sum(lo * s for (lo, _), s in zip(arg, self.strides))
        mask = tuple((vlo + lo, vhi + lo) for (vlo, vhi), (lo, _) in zip(self.valid_box(), arg))
        return View(shape, self.strides, offset, mask)

    def slice_step(self, axis: int, step: int) -> View:
        """numpy's ``x[..., ::step]`` on one axis (a negative step flips first)."""
        axis = _norm_axis(axis, self.ndim, "slice_step")
        if step == 0:
            raise ValueError("slice_step: step must be non-zero")
        v = self.flip((axis,)) if step < 0 else self
        step = abs(step)
        if step == 1:
            return v
        n = v.shape[axis]
        shape = v.shape[:axis] + (-(-n // step),) + v.shape[axis + 1:]
        strides = v.strides[:axis] + (v.strides[axis] * step,) + v.strides[axis + 1:]
        mask = None
        if v.mask is not None:  # index j reads old j*step: valid iff lo <= j*step < hi
            lo, hi = v.mask[axis]
            mask = v.mask[:axis] + ((-(-lo // step), -(-hi // step)),) + v.mask[axis + 1:]
        return View(shape, strides, v.offset, mask)

    def stride(self, steps: Sequence[int]) -> View:
        """Step slices on every axis at once (``x[::s0, ::s1, ...]``)."""
        if len(steps) != self.ndim:
            raise ValueError(f"stride: {len(steps)} steps for shape {self.shape}")
        v = self
        for axis, step in enumerate(steps):
            v = v.slice_step(axis, step)
        return v

    def reshape(self, new_shape: Sequence[int]) -> View | None:
        """The same elements in row-major order under ``new_shape``, or None when no
        single strided, box-masked view can express it (e.g. after a permute)."""
        new_shape = tuple(int(n) for n in new_shape)
        if any(n < 0 for n in new_shape) or _prod(new_shape) != self.size:
            raise ValueError(f"reshape: cannot reshape {self.shape} to {new_shape}")
        if new_shape == self.shape:
            return self
        if self.size == 0 or self.is_contiguous:
            return View.contiguous(new_shape)
        if self.fully_masked:  # a 0-d shape cannot carry an all-invalid mask
            nd = len(new_shape)
            return View(new_shape, (0,) * nd, 0, ((0, 0),) * nd) if nd else None
        old = [(n, s, lo, hi) for n, s, (lo, hi) in zip(self.shape, self.strides, self.valid_box()) if n != 1]
        new_axes = [i for i, n in enumerate(new_shape) if n != 1]
        strides, mask = [0] * len(new_shape), [(0, 1)] * len(new_shape)
        offset, oi, ni = self.offset, 0, 0
        while oi < len(old):  # minimal groups of old and new axes with equal products
            og, ng = [old[oi]], [new_axes[ni]]
            po, pn = old[oi][0], new_shape[new_axes[ni]]
            oi, ni = oi + 1, ni + 1
            while po != pn:
                if po < pn:
                    og.append(old[oi])
                    po, oi = po * old[oi][0], oi + 1
                else:
                    ng.append(new_axes[ni])
                    pn, ni = pn * new_shape[new_axes[ni]], ni + 1
            merged = _merge_axes(og)
            if merged is None:
                return None
            size, stride, lo, hi, extra = merged
            split = _split_axis(size, stride, lo, hi, [new_shape[i] for i in ng])
            if split is None:
                return None
            offset += extra
            for i, (st, m) in zip(ng, split):
                strides[i], mask[i] = st, m
        return View(new_shape, tuple(strides), offset, tuple(mask) if self.mask is not None else None)

    # ---- evaluation

    def address(self, idx: Sequence[int]) -> int | None:
        """The buffer address read at ``idx``, or None when ``idx`` is masked."""
        if len(idx) != self.ndim or any(not 0 <= i < n for i, n in zip(idx, self.shape)):
            raise IndexError(f"address: index {tuple(idx)} out of range for shape {self.shape}")
        if self.mask is not None and any(not lo <= i < hi for i, (lo, hi) in zip(idx, self.mask)):
            return None
        return self.offset + sum(i * s for i, s in zip(idx, self.strides))

    def index_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(addresses, valid)``: int64 and bool arrays of ``shape``; addresses under an
        invalid position are meaningless."""
        nd = self.ndim
        addr = np.full(self.shape, self.offset, dtype=np.int64)
        valid = np.ones(self.shape, dtype=bool)
        for i, (n, s, (lo, hi)) in enumerate(zip(self.shape, self.strides, self.valid_box())):
            r = np.arange(n, dtype=np.int64).reshape((1,) * i + (n,) + (1,) * (nd - i - 1))
            if s:
                addr += r * s
            if lo > 0 or hi < n:
                valid &= (r >= lo) & (r < hi)
        return addr, valid

    def gather(self, flat: np.ndarray, pad_value: object = 0) -> np.ndarray:
        """Materialise this view over the 1-D buffer ``flat``."""
        return ViewChain((self,), pad_value).gather(flat)

    def render(self, idx_names: Sequence[str]) -> tuple[str, str | None]:
        """Source-like text ``(address, validity or None)`` over the named indices;
        for golden tests and debugging output.

        >>> View.contiguous((4, 3)).pad(((1, 0), (0, 0))).render(("i", "j"))
        ('-3 + 3*i + j', '1 <= i')
        """
        terms = [str(self.offset)] if self.offset or not any(self.strides) else []
        for name, s in zip(idx_names, self.strides):
            if s:
                mag = name if abs(s) == 1 else f"{abs(s)}*{name}"
                terms.append(("- " if s < 0 else "+ ") + mag if terms else ("-" if s < 0 else "") + mag)
        conds = []
        for name, (n, _, lo, hi) in zip(idx_names, self.axes()):
            if lo > 0:
                conds.append(f"{lo} <= {name}")
            if hi < n:
                conds.append(f"{name} < {hi}")
        return " ".join(terms), (" and ".join(conds) if conds else ("False" if self.fully_masked else None))


def _merge_axes(axes: list[tuple[int, int, int, int]]) -> tuple[int, int, int, int, int] | None:
    """Fold axes (size, stride, lo, hi), outer first, into one axis whose valid range is
    an interval: ``(size, stride, lo, hi, offset_change)``, or None."""
    size, stride, lo, hi = axes[-1]
    extra = 0
    for n, s, alo, ahi in reversed(axes[:-1]):
        if ahi - alo == 1:  # the outer index is pinned, so its stride only shifts the offset
            extra += alo * (s - stride * size)
            lo, hi = alo * size + lo, alo * size + hi
        elif lo == 0 and hi == size and s == stride * size:
            lo, hi = alo * size, ahi * size
        else:
            return None
        size *= n
    return size, stride, lo, hi, extra


def _split_axis(size: int, stride: int, lo: int, hi: int,
                sizes: list[int]) -> list[tuple[int, tuple[int, int]]] | None:
    """Split one axis into ``sizes`` (outer first): per new axis (stride, (lo, hi)), or None
    when the valid interval is not a box in the new axes."""
    out, w = [], size
    for m in sizes:
        w //= m
        if lo // w == (hi - 1) // w:
            q = lo // w
            out.append((stride * w, (q, q + 1)))
            lo, hi = lo - q * w, hi - q * w
        elif lo % w == 0 and hi % w == 0:
            out.append((stride * w, (lo // w, hi // w)))
            lo, hi = 0, w
        else:
            return None
    return out


def _compose(inner: View, outer: View) -> View | None:
    """One View equal to reading ``outer`` whose addresses are row-major indices into
    ``inner.shape``, or None when we cannot prove one exists."""
    if inner.is_contiguous:
        return outer
    if outer.is_contiguous and outer.size == inner.size:
        return inner.reshape(outer.shape)
    if outer.size == 0:
        return View.contiguous(outer.shape)
    flat = inner.reshape((inner.size,))
    if flat is None:
        return None
    if outer.fully_masked:
        return outer
    (S,), c, (L, H) = flat.strides, flat.offset, flat.valid_box()[0]
    box = list(outer.valid_box())
    amin = outer.offset + sum(min(s * lo, s * (hi - 1)) for s, (lo, hi) in zip(outer.strides, box))
    amax = outer.offset + sum(max(s * lo, s * (hi - 1)) for s, (lo, hi) in zip(outer.strides, box))
    if not (L <= amin and amax < H):  # the inner mask cuts the outer box
        active = [i for i, (s, (lo, hi)) in enumerate(zip(outer.strides, box)) if s and hi - lo > 1]
        if len(active) > 1:
            return None
        if not active:
            box = [(0, 0)] * outer.ndim
        else:
            a = active[0]
            s = outer.strides[a]
            base = outer.offset + sum(st * lo for i, (st, (lo, _)) in enumerate(zip(outer.strides, box))
                                      if i != a)
            if s > 0:  # L <= base + s*j < H
                jlo, jhi = -((base - L) // s), -((base - H) // s)
            else:
                t = -s
                jlo, jhi = (base - H) // t + 1, (base - L) // t + 1
            box[a] = (max(box[a][0], jlo), min(box[a][1], jhi))
    mask = None if outer.mask is None and box == list(outer.valid_box()) else tuple(box)
    return View(outer.shape, tuple(S * s for s in outer.strides), c + S * outer.offset, mask)


def _value_key(v: object) -> tuple:
    # NOTE: numbers compare by value (0 == 0.0 == False), but -0.0 and NaN are told apart
    # and equal to themselves, which == would not do.
    if isinstance(v, bool | int | float | np.bool_ | np.integer | np.floating):
        f = float(v)
        if f != f or f == v:
            return ("n", f.hex())
        return ("i", int(v))  # an int too large for an exact float
    return ("r", repr(v))


@dataclass(frozen=True, eq=False)
class ViewChain:
    """Views applied innermost first: ``views[0]`` addresses the buffer, and each later
    view's address is a row-major linear index into the previous view's shape. Masked
    positions of any view read ``pad_value``.

    >>> c = ViewChain.of((2, 3)).permute((1, 0)).reshape((6,)).reshape((3, 2)).permute((1, 0))
    >>> len(c.views), c.views[0].is_contiguous  # the reshape round trip merged back
    (1, True)
    """

    views: tuple[View, ...]
    pad_value: object = 0

    def __post_init__(self) -> None:
        if not self.views:
            raise ValueError("ViewChain: needs at least one view")
        if not self.masked:  # no view pads: normalise so equal chains compare equal
            object.__setattr__(self, "pad_value", 0)

    @staticmethod
    def of(x: View | ViewChain | Sequence[int]) -> ViewChain:
        """A chain from a View, a chain, or the shape of a contiguous buffer."""
        if isinstance(x, ViewChain):
            return x
        return ViewChain((x if isinstance(x, View) else View.contiguous(tuple(x)),))

    def key(self) -> tuple:
        return (tuple(v.key() for v in self.views), _value_key(self.pad_value))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ViewChain) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    @property
    def shape(self) -> Shape:
        return self.views[-1].shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.views[-1].size

    @property
    def masked(self) -> bool:
        return any(v.mask is not None for v in self.views)

    @property
    def is_contiguous(self) -> bool:
        return len(self.views) == 1 and self.views[0].is_contiguous

    def _with_last(self, v: View) -> ViewChain:
        return self._derive(self.views[:-1] + (v,), self.pad_value)

    def _derive(self, views: tuple[View, ...], pad_value: object) -> ViewChain:
        """The simplified chain of `views`, which differ from this chain's only in the last
        one or two. When this chain is simplified (no adjacent pair merges), only the tail
        can merge: one `_compose` per merge instead of one per view (a long chain of
        movement ops stays linear, not quadratic, in its length)."""
        out = ViewChain(views, pad_value)
        if len(self.views) == 1 or self.__dict__.get("_simple"):
            return out._simplify_tail()
        return out.simplify()

    def _simplify_tail(self) -> ViewChain:
        views = list(self.views)
        while len(views) >= 2:
            merged = _compose(views[-2], views[-1])
            if merged is None:
                break
            views[-2:] = [merged]
        out = self if len(views) == len(self.views) else ViewChain(tuple(views), self.pad_value)
        out.__dict__["_simple"] = True
        return out

    # ---- movement ops (all but reshape always act on the outermost view)

    def permute(self, order: Sequence[int]) -> ViewChain:
        return self._with_last(self.views[-1].permute(order))

    def expand(self, shape: Sequence[int]) -> ViewChain:
        return self._with_last(self.views[-1].expand(shape))

    def shrink(self, arg: Sequence[tuple[int, int]]) -> ViewChain:
        return self._with_last(self.views[-1].shrink(arg))

    def flip(self, axes: Iterable[int]) -> ViewChain:
        return self._with_last(self.views[-1].flip(axes))

    def slice_step(self, axis: int, step: int) -> ViewChain:
        return self._with_last(self.views[-1].slice_step(axis, step))

    def stride(self, steps: Sequence[int]) -> ViewChain:
        return self._with_last(self.views[-1].stride(steps))

    def pad(self, arg: Sequence[tuple[int, int]], value: object = 0) -> ViewChain | None:
        """Pad with ``value``; None when the chain already pads with a different value
        (one chain has one pad value: the caller materialises first)."""
        v = self.views[-1].pad(arg)
        if v is self.views[-1]:
            return self
        if self.masked and _value_key(value) != _value_key(self.pad_value):
            return None
        return self._derive(self.views[:-1] + (v,), value)

    def reshape(self, new_shape: Sequence[int]) -> ViewChain:
        """Merge into the outermost view when possible, else append a contiguous view."""
        v = self.views[-1].reshape(new_shape)
        if v is not None:
            return self._with_last(v)
        return self._derive(self.views + (View.contiguous(tuple(new_shape)),), self.pad_value)

    def simplify(self) -> ViewChain:
        """Merge adjacent views while an exact single-view form exists."""
        views = list(self.views)
        i = len(views) - 1
        while i >= 1:
            merged = _compose(views[i - 1], views[i])
            if merged is None:
                i -= 1
                continue
            views[i - 1:i + 1] = [merged]
            i = min(i, len(views) - 1)
        if len(views) == len(self.views) and all(a is b for a, b in zip(views, self.views)):
            out = self
        else:
            out = ViewChain(tuple(views), self.pad_value)
        out.__dict__["_simple"] = True  # no adjacent pair merges (see `_derive`)
        return out

    # ---- evaluation

    def steps(self) -> tuple[tuple[Shape | None, View], ...]:
        """For code generators, outermost first: ``(unravel_shape, view)``. The first
        view takes the loop indices; each later one takes the previous address,
        unravelled row-major into ``unravel_shape`` (== that view's shape). Any masked
        step makes the element the pad value."""
        out: list[tuple[Shape | None, View]] = [(None, self.views[-1])]
        out.extend((v.shape, v) for v in reversed(self.views[:-1]))
        return tuple(out)

    def address(self, idx: Sequence[int]) -> int | None:
        """The buffer address read at ``idx``, or None when masked anywhere in the chain."""
        a = self.views[-1].address(idx)
        for v in reversed(self.views[:-1]):
            if a is None:
                return None
            if not 0 <= a < v.size:
                raise IndexError(f"address: linear index {a} outside inner view of shape {v.shape}")
            a = v.address([(a // w) % n for n, w in zip(v.shape, _row_major(v.shape))])
        return a

    def index_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(addresses, valid)`` over the chain's shape, as for `View.index_arrays`."""
        addr, valid = self.views[-1].index_arrays()
        for v in reversed(self.views[:-1]):
            lin = np.where(valid, addr, 0)
            inner_addr = np.full(addr.shape, v.offset, dtype=np.int64)
            inner_valid = valid & (v.size > 0)
            for n, w, s, (lo, hi) in zip(v.shape, _row_major(v.shape), v.strides, v.valid_box()):
                if n == 0:
                    break
                c = (lin // w) % n
                inner_addr += c * s
                if lo > 0 or hi < n:
                    inner_valid &= (c >= lo) & (c < hi)
            addr, valid = inner_addr, inner_valid
        return addr, valid

    def gather(self, flat: np.ndarray, pad_value: object = None) -> np.ndarray:
        """Materialise the chain over the 1-D buffer ``flat`` (masked positions get
        ``pad_value``, by default the chain's own)."""
        flat = np.asarray(flat).reshape(-1)
        fill = self.pad_value if pad_value is None else pad_value
        addr, valid = self.index_arrays()
        out = np.empty(self.shape, dtype=flat.dtype)
        out[...] = np.asarray(fill).astype(flat.dtype) if not valid.all() else 0
        out[valid] = flat[addr[valid]]
        return out

    @staticmethod
    def from_movement(base_shape: Sequence[int], ops: Iterable[tuple[object, object]]) -> ViewChain | None:
        """Apply ``(op_name, arg)`` movement ops to a contiguous buffer of ``base_shape``."""
        chain: ViewChain | None = ViewChain.of(tuple(base_shape))
        for op, arg in ops:
            chain = apply_movement(chain, op, arg)
            if chain is None:
                return None
        return chain


def apply_movement(views: View | ViewChain, op: object, arg: object) -> ViewChain | None:
    """Apply one IR movement op (name as a string, or an enum whose value is it) with the
    IR's arg conventions. Returns None only for a PAD whose value differs from a pad
    already in the chain.

    >>> apply_movement(View.contiguous((2, 3)), "SHRINK", ((0, 1), (1, 3))).views[0]
    View(shape=(1, 2), strides=(0, 1), offset=1, mask=None)
    """
    chain = ViewChain.of(views)
    name = getattr(op, "value", op)
    if name == "RESHAPE":
        return chain.reshape(arg)  # type: ignore[arg-type]
    if name == "PERMUTE":
        return chain.permute(arg)  # type: ignore[arg-type]
    if name == "EXPAND":
        return chain.expand(arg)  # type: ignore[arg-type]
    if name == "SHRINK":
        return chain.shrink(arg)  # type: ignore[arg-type]
    if name == "FLIP":
        return chain.flip(arg)  # type: ignore[arg-type]
    if name == "PAD":
        pads, value = arg  # type: ignore[misc]
        return chain.pad(pads, value)
    raise ValueError(f"apply_movement: {op!r} is not a movement op")


def concat_bounds(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Where each source lands on the concat axis: ``[start, end)`` per source."""
    out, start = [], 0
    for n in lengths:
        out.append((start, start + n))
        start += n
    return out


def concat_views(shapes: Sequence[Sequence[int]], axis: int) -> list[View]:
    """Concatenation of contiguous buffers along ``axis`` as one masked view per source:
    source k's view has the full output shape and is valid exactly where source k lands,
    so summing the gathers (pad value 0) or selecting by validity gives the result.

    >>> [v.mask for v in concat_views([(2,), (3,)], 0)]
    [((0, 2),), ((2, 5),)]
    """
    return [c.views[-1] for c in concat_chains([ViewChain.of(tuple(s)) for s in shapes], axis)]


def concat_chains(chains: Sequence[View | ViewChain], axis: int) -> list[ViewChain]:
    """`concat_views` for sources that are themselves (maybe padded) views of buffers.
    Each source is padded with its own pad value, so a source that already pads is
    selected by its `concat_bounds` range on ``axis``, not by validity."""
    chains = [ViewChain.of(c) for c in chains]
    if not chains:
        raise ValueError("concat: needs at least one source")
    nd = chains[0].ndim
    axis = _norm_axis(axis, nd, "concat")
    for c in chains:
        if c.ndim != nd or any(a != b for i, (a, b) in enumerate(zip(c.shape, chains[0].shape)) if i != axis):
            raise ValueError(f"concat: shapes {[c.shape for c in chains]} differ off axis {axis}")
    bounds = concat_bounds([c.shape[axis] for c in chains])
    total, out = bounds[-1][1], []
    for c, (start, end) in zip(chains, bounds):
        pads = [(0, 0)] * nd
        pads[axis] = (start, total - end)
        padded = c.pad(pads, c.pad_value)
        assert padded is not None  # same pad value never conflicts
        out.append(padded)
    return out


__all__ = ["AxisInfo", "View", "ViewChain", "apply_movement", "concat_bounds", "concat_chains",
           "concat_views"]
