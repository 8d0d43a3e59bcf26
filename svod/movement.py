"""The Array API's manipulation functions: reshape, permute, expand/squeeze, flip, roll,
pad, concatenate/stack/unstack, tile, repeat, and the triangle masks tril/triu.

Views (reshape, permute, expand, flip, pad, slices of a concat) are graph nodes, never
copies: the kernels read through them. Checks raise `ShapeError` / `AxisError` naming
the function the user called, with the shapes. Shapes must be known here (a `repeat`
by per-element counts computes the input: its result's shape depends on the data).

>>> import svod
>>> svod.concat([svod.ones((1, 2)), svod.zeros((1, 2))], axis=0).tolist()
[[1.0, 1.0], [0.0, 0.0]]
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Sequence

import numpy as np

from svod import dtype as dt
from svod.creation import full, zeros_like
from svod.elementwise import broadcast_to, where
from svod.errors import AxisError, ShapeError, SvodTypeError, SvodValueError
from svod.ir import OP, UOp, shape_str
from svod.tensor import Tensor, _cast, _check_int, _from_numpy, _normalize_axes, _normalize_axis, _prod, asarray

# ----------------------------------------------------------------------------- movement


def reshape(x, /, shape, *, copy=None) -> Tensor:
    x = asarray(x)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError as e:
        raise SvodTypeError(f"reshape: shape must be ints, got {shape!r}") from e
    if builtins.sum(1 for s in shape if s == -1) > 1:
        raise ShapeError(f"reshape: can only specify one unknown dimension (-1), got {shape_str(shape)}")
    if builtins.any(s < -1 for s in shape):
        raise ShapeError(f"reshape: invalid shape {shape_str(shape)}")
    if -1 in shape:
        known = _prod(s for s in shape if s != -1)
        if known == 0 or x.size % known:
            raise ShapeError(f"reshape: cannot reshape array of size {x.size} (shape {shape_str(x.shape)}) "
                             f"into shape {shape_str(shape)}")
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    if _prod(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape array of size {x.size} (shape {shape_str(x.shape)}) "
                         f"into shape {shape_str(shape)}")
    if shape == x.shape:
        return x
    return Tensor._from(UOp(OP.RESHAPE, x.dtype, (x.uop,), shape))


def permute_dims(x, /, axes) -> Tensor:
    x = asarray(x)
    if not isinstance(axes, (tuple, list)):
        raise SvodTypeError(f"permute_dims: axes must be a sequence of {x.ndim} integers, got {axes!r}")
    axes = tuple(axes)
    if builtins.any(isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)) for a in axes):
        raise SvodTypeError(f"permute_dims: axes must be integers, got {axes!r}")
    if sorted(a % x.ndim if -x.ndim <= a < x.ndim else -1 for a in axes) != list(range(x.ndim)) \
            or len(axes) != x.ndim:
        raise AxisError(f"permute_dims: axes {axes} are not a permutation of the {x.ndim} axes of shape "
                        f"{shape_str(x.shape)}")
    axes = tuple(a % x.ndim for a in axes)
    if axes == tuple(range(x.ndim)):
        return x
    return Tensor._from(UOp(OP.PERMUTE, x.dtype, (x.uop,), axes))


def matrix_transpose(x, /) -> Tensor:
    return asarray(x).mT


def moveaxis(x, source, destination, /) -> Tensor:
    x = asarray(x)
    src = tuple(_normalize_axis(s, x.ndim, "moveaxis") for s in
                (source if isinstance(source, (tuple, list)) else (source,)))
    dst = tuple(_normalize_axis(s, x.ndim, "moveaxis") for s in
                (destination if isinstance(destination, (tuple, list)) else (destination,)))
    if len(src) != len(dst):
        raise SvodValueError("moveaxis: source and destination must have the same number of elements")
    order = [a for a in range(x.ndim) if a not in src]
    for d_, s_ in sorted(zip(dst, src)):
        order.insert(d_, s_)
    return permute_dims(x, tuple(order))


def expand_dims(x, /, axis=0) -> Tensor:
    x = asarray(x)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    nd = x.ndim + len(axes)
    norm = sorted(_normalize_axis(a, nd, "expand_dims") for a in axes)
    if len(set(norm)) != len(norm):
        raise AxisError(f"expand_dims: repeated axis in {axis}")
    shape = list(x.shape)
    for a in norm:
        shape.insert(a, 1)
    return reshape(x, tuple(shape))


def squeeze(x, /, axis=None) -> Tensor:
    x = asarray(x)
    if axis is None:
        axes = tuple(i for i, s in enumerate(x.shape) if s == 1)
    else:
        axes = _normalize_axes(axis, x.ndim, "squeeze")
        for a in axes:
            if x.shape[a] != 1:
                raise ShapeError(f"squeeze: cannot select axis {a} of shape {shape_str(x.shape)}: size is not 1")
    return reshape(x, tuple(s for i, s in enumerate(x.shape) if i not in axes))


def flip(x, /, *, axis=None) -> Tensor:
    x = asarray(x)
    axes = _normalize_axes(axis, x.ndim, "flip")
    axes = tuple(a for a in axes if x.shape[a] > 1)
    if not axes:
        return x
    return Tensor._from(UOp(OP.FLIP, x.dtype, (x.uop,), axes))


def roll(x, /, shift, *, axis=None) -> Tensor:
    x = asarray(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, axis=0), x.shape)
    shifts = tuple(shift) if isinstance(shift, (tuple, list)) else (shift,)
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    shifts = tuple(_check_int(s, f"shift {shift!r}", "roll") for s in shifts)
    if len(shifts) != len(axes):
        if len(shifts) != 1 and len(axes) != 1:
            raise ShapeError(f"roll: shift {shift!r} and axis {axis!r} must have the same length (or one of them "
                             f"length 1)")
        shifts, axes = shifts * (len(axes) if len(shifts) == 1 else 1), axes * (len(shifts) if len(axes) == 1 else 1)
    out = x
    for s, a in zip(shifts, axes):
        a = _normalize_axis(a, x.ndim, "roll")
        n = x.shape[a]
        if n == 0:
            continue
        s %= n
        if s:
            idx = [slice(None)] * x.ndim
            idx[a] = slice(n - s, None)
            tail = out[tuple(idx)]
            idx[a] = slice(0, n - s)
            out = concat([tail, out[tuple(idx)]], axis=a)
    return out


def pad(x, /, pad_width, mode: str = "constant", constant_values=0) -> Tensor:
    """numpy.pad with mode='constant': `pad_width` is an int, (lo, hi) or one pair per axis."""
    x = asarray(x)
    if mode != "constant":
        raise SvodValueError(f"pad: only mode='constant' is supported, got {mode!r}")
    pw = np.asarray(pad_width)
    if pw.dtype.kind not in "iu":
        raise SvodTypeError(f"pad: pad_width must be integers, got {pad_width!r}")
    try:
        pw = np.broadcast_to(pw, (x.ndim, 2))
    except ValueError as e:
        raise ShapeError(f"pad: pad_width {pad_width!r} does not fit an array of shape {shape_str(x.shape)}") from e
    if (pw < 0).any():
        raise SvodValueError(f"pad: pad widths must be non-negative, got {pad_width!r}")
    pads = tuple((int(a), int(b)) for a, b in pw)
    if builtins.all(p == (0, 0) for p in pads):
        return x
    if dt.scalar_kind(constant_values) is None:
        raise SvodTypeError(f"pad: constant_values must be a scalar, got {constant_values!r}")
    value = np.array(constant_values).astype(x.dtype.np).item()
    return Tensor._from(UOp(OP.PAD, x.dtype, (x.uop,), (pads, value)))


def concat(arrays: Sequence[Tensor], /, *, axis: int | None = 0) -> Tensor:
    if not isinstance(arrays, (list, tuple, Tensor)):
        raise SvodTypeError(f"concat: arrays must be a sequence of arrays, got {type(arrays).__name__}")
    arrays = [asarray(a) for a in arrays]
    if not arrays:
        raise SvodValueError("concat: need at least one array")
    if axis is None:
        arrays = [reshape(a, (-1,)) for a in arrays]
        axis = 0
    nd = arrays[0].ndim
    if nd == 0:
        raise ShapeError("concat: zero-dimensional arrays cannot be concatenated")
    for a in arrays:
        if a.ndim != nd:
            raise ShapeError(f"concat: all arrays must have the same number of dimensions, got shapes "
                             f"{', '.join(shape_str(b.shape) for b in arrays)}")
    ax = _normalize_axis(axis, nd, "concat")
    for a in arrays:
        if builtins.any(a.shape[i] != arrays[0].shape[i] for i in range(nd) if i != ax):
            raise ShapeError(f"concat: shapes {', '.join(shape_str(b.shape) for b in arrays)} differ outside "
                             f"axis {ax}")
    d = dt.result_type(*[a.dtype for a in arrays])
    srcs = tuple(_cast(a.uop, d) for a in arrays if a.shape[ax] > 0)
    if not srcs:
        return full(tuple(0 if i == ax else s for i, s in enumerate(arrays[0].shape)), 0, dtype=d)
    if len(srcs) == 1:
        return Tensor._from(srcs[0])
    return Tensor._from(UOp(OP.CAT, d, srcs, ax))


def stack(arrays: Sequence[Tensor], /, *, axis: int = 0) -> Tensor:
    if not isinstance(arrays, (list, tuple, Tensor)):
        raise SvodTypeError(f"stack: arrays must be a sequence of arrays, got {type(arrays).__name__}")
    arrays = [asarray(a) for a in arrays]
    if not arrays:
        raise SvodValueError("stack: need at least one array")
    shape = arrays[0].shape
    for a in arrays:
        if a.shape != shape:
            raise ShapeError(f"stack: all input arrays must have the same shape, got "
                             f"{', '.join(shape_str(b.shape) for b in arrays)}")
    ax = _normalize_axis(axis, len(shape) + 1, "stack")
    return concat([expand_dims(a, ax) for a in arrays], axis=ax)


def unstack(x, /, *, axis: int = 0) -> tuple[Tensor, ...]:
    x = asarray(x)
    ax = _normalize_axis(axis, x.ndim, "unstack")
    return tuple(x[(slice(None),) * ax + (i,)] for i in range(x.shape[ax]))


def tile(x, repetitions, /) -> Tensor:
    x = asarray(x)
    reps = tuple(repetitions) if isinstance(repetitions, (tuple, list)) else (repetitions,)
    reps = tuple(_check_int(r, f"repetitions {reps!r}", "tile", 0) for r in reps)
    nd = builtins.max(len(reps), x.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    # (a, b) -> (1, a, 1, b) -> (ra, a, rb, b) -> (ra*a, rb*b)
    inter = []
    for s in x.shape:
        inter += [1, s]
    y = reshape(x, tuple(inter))
    full_shape = []
    for r, s in zip(reps, x.shape):
        full_shape += [r, s]
    y = broadcast_to(y, tuple(full_shape))
    return reshape(y, tuple(r * s for r, s in zip(reps, x.shape)))


def repeat(x, repeats: int, /, *, axis=None) -> Tensor:
    x = asarray(x)
    if not isinstance(repeats, (int, np.integer)):
        r = repeats.numpy() if isinstance(repeats, Tensor) else np.asarray(repeats)
        if r.dtype.kind not in "iu":
            raise SvodTypeError(f"repeat: repeats must be integers, got {repeats!r} ({r.dtype})")
        if (r < 0).any():
            raise SvodValueError(f"repeat: repeats must be non-negative, got {r.tolist()!r}")
        if r.ndim == 0:
            repeats = int(r)
        else:  # one count per element: the output's shape depends on them (eager, as nonzero)
            try:
                return _from_numpy(np.repeat(x.numpy(), r, axis=axis), copy=False)
            except ValueError as e:
                raise ShapeError(f"repeat: {e} (array of shape {shape_str(x.shape)}, repeats of shape "
                                 f"{shape_str(r.shape)})") from None
    repeats = _check_int(repeats, "repeats", "repeat", 0)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    a = _normalize_axis(axis, x.ndim, "repeat")
    y = expand_dims(x, a + 1)
    shape = list(y.shape)
    shape[a + 1] = int(repeats)
    y = broadcast_to(y, tuple(shape))
    out = list(x.shape)
    out[a] *= int(repeats)
    return reshape(y, tuple(out))


def _triangle(x, k, name: str, mask_fn) -> Tensor:
    """`x` with the elements outside the triangle `mask_fn` (np.tril / np.triu) zeroed."""
    x = asarray(x)
    k = _check_int(k, "k", name)
    if x.ndim < 2:
        raise ShapeError(f"{name}: needs at least 2 dimensions, got shape {shape_str(x.shape)}")
    mask = asarray(mask_fn(np.ones(x.shape[-2:], dtype=bool), k=k))
    return where(mask, x, zeros_like(x))


def tril(x: Tensor, /, *, k: int = 0) -> Tensor:
    """The lower triangle of the last two axes (diagonal `k` and below); zeros above."""
    return _triangle(x, k, "tril", np.tril)


def triu(x: Tensor, /, *, k: int = 0) -> Tensor:
    """The upper triangle of the last two axes (diagonal `k` and above); zeros below."""
    return _triangle(x, k, "triu", np.triu)
