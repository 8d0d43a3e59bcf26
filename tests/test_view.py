"""Views against numpy: random movement chains, merge rules, concat, and evaluation helpers."""

from __future__ import annotations

import enum
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svod.view import (
    AxisInfo,
    View,
    ViewChain,
    apply_movement,
    concat_bounds,
    concat_chains,
    concat_views,
)

PAD = -1  # visible in int results: arange never yields a negative number


# ---- random movement chains


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _draw_reshape(draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    size = int(np.prod(shape))
    if size == 0:
        nd = draw(st.integers(1, 4))
        new = [draw(st.integers(0, 5)) for _ in range(nd)]
        new[draw(st.integers(0, nd - 1))] = 0
        return tuple(new)
    modes = ["random", "unit"]
    if len(shape) >= 2:
        modes.append("merge")
    if any(len(_prime_factors(n)) >= 2 for n in shape):
        modes.append("split")
    mode = draw(st.sampled_from(modes))
    if mode == "merge":
        i = draw(st.integers(0, len(shape) - 2))
        return shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
    if mode == "split":
        i = draw(st.sampled_from([i for i, n in enumerate(shape) if len(_prime_factors(n)) >= 2]))
        fs = _prime_factors(shape[i])
        k = draw(st.integers(1, len(fs) - 1))
        a = int(np.prod(fs[:k]))
        return shape[:i] + (a, shape[i] // a) + shape[i + 1:]
    if mode == "unit":
        if 1 in shape and draw(st.booleans()):
            i = shape.index(1)
            return shape[:i] + shape[i + 1:]
        i = draw(st.integers(0, len(shape)))
        return shape[:i] + (1,) + shape[i:]
    fs = _prime_factors(size)
    nd = draw(st.integers(1 if fs else 0, 4))
    new = [1] * nd
    for f in fs:
        new[draw(st.integers(0, nd - 1))] *= f
    return tuple(new)


@st.composite
def movement_cases(draw):
    nd = draw(st.integers(0, 4))
    dim = st.integers(0, 11).map(lambda k: 0 if k == 0 else 1 + k % 5)  # empty axes now and then
    base = tuple(draw(dim) for _ in range(nd))
    ops, shape = [], base
    for _ in range(draw(st.integers(1, 6))):
        kinds = ["RESHAPE", "RESHAPE", "PERMUTE", "SHRINK", "FLIP"]
        if shape:
            kinds += ["PAD", "STEP"]
        if 1 in shape:
            kinds.append("EXPAND")
        kind = draw(st.sampled_from(kinds))
        if kind == "RESHAPE":
            arg = _draw_reshape(draw, shape)
        elif kind == "PERMUTE":
            arg = tuple(draw(st.permutations(range(len(shape)))))
        elif kind == "SHRINK":
            arg = []
            for n in shape:
                if n and draw(st.integers(0, 9)):  # mostly non-empty
                    b = draw(st.integers(0, n - 1))
                    arg.append((b, draw(st.integers(b + 1, n))))
                else:
                    b = draw(st.integers(0, n))
                    arg.append((b, draw(st.integers(b, n))))
            arg = tuple(arg)
        elif kind == "FLIP":
            arg = tuple(i for i in range(len(shape)) if draw(st.booleans()))
        elif kind == "PAD":
            arg = (tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape), PAD)
        elif kind == "STEP":
            arg = (draw(st.integers(0, len(shape) - 1)), draw(st.sampled_from([-3, -2, -1, 2, 3])))
        else:
            arg = tuple(draw(st.integers(1, 4)) if n == 1 else n for n in shape)
        ops.append((kind, arg))
        shape = _numpy_apply(np.zeros(shape, np.int8), kind, arg).shape
        if int(np.prod(shape)) > 4000:
            break
    return base, ops


def _numpy_apply(x: np.ndarray, kind: str, arg) -> np.ndarray:
    if kind == "RESHAPE":
        return x.reshape(arg)
    if kind == "PERMUTE":
        return x.transpose(arg)
    if kind == "EXPAND":
        return np.broadcast_to(x, arg)
    if kind == "SHRINK":
        return x[tuple(slice(b, e) for b, e in arg)]
    if kind == "FLIP":
        return np.flip(x, axis=arg) if arg else x
    if kind == "PAD":
        return np.pad(x, arg[0], constant_values=arg[1])
    axis, step = arg
    return x[(slice(None),) * axis + (slice(None, None, step),)]


def _chain_apply(chain: ViewChain, kind: str, arg) -> ViewChain:
    if kind == "STEP":
        return chain.slice_step(*arg)
    out = apply_movement(chain, kind, arg)
    assert out is not None  # one pad value throughout
    return out


def _eval_steps(chain: ViewChain, idx: tuple[int, ...]) -> int | None:
    """A scalar evaluator built only from what the codegen reads: steps() and axes()."""
    addr = None
    for unravel_shape, view in chain.steps():
        if unravel_shape is not None:
            idx = tuple(int(c) for c in np.unravel_index(addr, unravel_shape)) if unravel_shape else ()
        addr = view.offset
        for i, ax in zip(idx, view.axes()):
            assert isinstance(ax, AxisInfo)
            if not ax.lo <= i < ax.hi:
                return None
            addr += i * ax.stride
    return addr


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(movement_cases())
def test_random_movement_chains_match_numpy(case):
    base, ops = case
    n = int(np.prod(base))
    flat = np.arange(n)
    ref = flat.reshape(base)
    chain = ViewChain.of(base)
    ref_is_view = True  # ref still shares its strides with the views (no copy yet)
    for kind, arg in ops:
        if kind == "RESHAPE" and ref_is_view and len(chain.views) == 1 and chain.views[0].mask is None:
            try:
                np.reshape(ref, arg, copy=False)
            except ValueError:
                ref_is_view = False
            else:  # whatever numpy reshapes without a copy, one view must express
                assert chain.views[0].reshape(arg) is not None, (chain.views[0], arg)
        if kind == "PAD":
            ref_is_view = False
        ref = _numpy_apply(ref, kind, arg)
        chain = _chain_apply(chain, kind, arg)
        assert chain.shape == ref.shape
        got = chain.gather(flat, PAD)
        np.testing.assert_array_equal(got, ref, err_msg=f"{base} {ops} -> {chain}")
    assert hash(chain) == hash(ViewChain(chain.views, chain.pad_value))
    addr, valid = chain.index_arrays()
    for idx in itertools.islice(np.ndindex(*ref.shape), 40):
        a = chain.address(idx)
        assert a == _eval_steps(chain, idx)
        assert (a is None) == (not valid[idx])
        assert (ref[idx] == PAD) if a is None else (flat[a] == ref[idx] and addr[idx] == a)


# ---- merge rules


def test_reshape_after_permute_needs_two_views():
    v = View.contiguous((2, 3)).permute((1, 0))
    assert v.reshape((6,)) is None
    c = ViewChain.of((2, 3)).permute((1, 0)).reshape((6,))
    assert len(c.views) == 2
    assert c.gather(np.arange(6)).tolist() == np.arange(6).reshape(2, 3).T.reshape(6).tolist()
    # reading the chain back through further ops stays exact
    c2 = c.reshape((2, 3)).flip((1,)).shrink(((0, 2), (1, 3)))
    ref = np.arange(6).reshape(2, 3).T.reshape(2, 3)[:, ::-1][:, 1:3]
    np.testing.assert_array_equal(c2.gather(np.arange(6)), ref)


@pytest.mark.parametrize("ops", [
    [("RESHAPE", (3, 4)), ("RESHAPE", (2, 6)), ("RESHAPE", (12,))],              # contiguous
    [("RESHAPE", (2, 2, 3)), ("PERMUTE", (1, 2, 0)), ("PERMUTE", (1, 0, 2))],     # permute -> permute
    [("SHRINK", ((0, 1), (0, 6))), ("EXPAND", (5, 6)), ("RESHAPE", (5, 1, 6, 1))],  # expand -> unit dims
    [("SHRINK", ((0, 1), (0, 6))), ("EXPAND", (4, 6)), ("RESHAPE", (2, 2, 6))],     # split broadcast axis
    [("SHRINK", ((0, 2), (1, 5))), ("RESHAPE", (2, 2, 2))],                         # split an untouched axis
    [("SHRINK", ((1, 2), (0, 6))), ("RESHAPE", (2, 3))],                            # shrunk row splits
    [("FLIP", (0, 1)), ("RESHAPE", (12,))],                                         # flipped merge
    [("PAD", (((0, 0), (1, 1)), PAD)), ("RESHAPE", (2, 1, 8))],                     # untouched masked axis
    [("PAD", (((1, 1), (0, 0)), PAD)), ("RESHAPE", (24,))],                         # mask on the outer axis
    [("PAD", (((1, 0), (0, 0)), PAD)), ("RESHAPE", (3, 2, 3))],                     # split a padded axis
    [("PERMUTE", (1, 0)), ("RESHAPE", (6, 1, 2, 1)), ("RESHAPE", (6, 2))],          # units after permute
    [("PAD", (((0, 0), (2, 2)), PAD)), ("FLIP", (1,)), ("PAD", (((1, 1), (0, 0)), PAD))],
])
def test_mergeable_chains_stay_single_views(ops):
    base = (2, 6)
    ref, chain = np.arange(12).reshape(base), ViewChain.of(base)
    for kind, arg in ops:
        ref, chain = _numpy_apply(ref, kind, arg), _chain_apply(chain, kind, arg)
    assert len(chain.views) == 1, chain
    np.testing.assert_array_equal(chain.gather(np.arange(12), PAD), ref)


@pytest.mark.parametrize("base, ops", [
    ((4, 1), [("EXPAND", (4, 3)), ("RESHAPE", (12,))]),           # broadcast inner axis
    ((6,), [("PAD", (((1, 1),), PAD)), ("RESHAPE", (2, 4))]),      # mask is not a box after the split
    ((2, 3), [("PAD", (((0, 0), (0, 1)), PAD)), ("RESHAPE", (8,))]),
    ((2, 3), [("FLIP", (1,)), ("RESHAPE", (6,))]),
])
def test_unmergeable_reshapes_return_none(base, ops):
    chain = ViewChain.of(base)
    for kind, arg in ops[:-1]:
        chain = _chain_apply(chain, kind, arg)
    assert chain.views[-1].reshape(ops[-1][1]) is None
    out = _chain_apply(chain, *ops[-1])
    assert len(out.views) == 2
    ref = np.arange(int(np.prod(base))).reshape(base)
    for kind, arg in ops:
        ref = _numpy_apply(ref, kind, arg)
    np.testing.assert_array_equal(out.gather(np.arange(int(np.prod(base))), PAD), ref)


def test_simplify_composes_through_a_flattenable_inner_view():
    inner = View.contiguous((3,)).pad(((1, 2),))  # [-1, 0, 1, 2, -1, -1]
    inside = ViewChain((inner, View((2,), (2,), 1, None)), PAD).simplify()  # reads 1, 3
    assert len(inside.views) == 1 and inside.gather(np.arange(3)).tolist() == [0, 2]
    cut = ViewChain((inner, View((3,), (2,), 0, None)), PAD).simplify()  # reads 0, 2, 4
    assert len(cut.views) == 1 and cut.gather(np.arange(3)).tolist() == [-1, 1, -1]
    back = ViewChain((inner, View((3,), (-2,), 5, None)), PAD).simplify()  # reads 5, 3, 1
    assert len(back.views) == 1 and back.gather(np.arange(3)).tolist() == [-1, 2, 0]


# ---- edge cases


def test_canonical_forms_and_keys():
    assert View((2, 1), (1, 5)) == View((2, 1), (1, 0))
    assert View((2, 3), (3, 1), 0, ((0, 2), (0, 3))).mask is None
    assert View.contiguous((2, 0, 3)).strides == (0, 0, 0)
    assert View.contiguous((3, 4)).is_contiguous and not View.contiguous((3, 4)).permute((1, 0)).is_contiguous
    k = View.contiguous((3,)).pad(((1, 0),)).key()
    assert k == ((4,), (1,), -1, ((1, 4),)) and hash(k) == hash(((4,), (1,), -1, ((1, 4),)))
    assert View.contiguous((1, 3)).expand((4, 3)).is_broadcast
    assert not View.contiguous((4, 3)).is_broadcast


def test_fully_masked_view():
    v = View.contiguous((2, 3)).pad(((0, 0), (2, 2))).shrink(((0, 2), (0, 2)))
    assert v.fully_masked and v.mask == ((0, 0), (0, 0))
    np.testing.assert_array_equal(v.gather(np.arange(6), PAD), np.full((2, 2), PAD))
    assert v.reshape((4,)).fully_masked
    assert v.shrink(((0, 1), (0, 1))).reshape(()) is None  # 0-d cannot be all-invalid
    c = ViewChain((v,), PAD).shrink(((0, 1), (0, 1))).reshape(())
    assert c.gather(np.arange(6)).tolist() == PAD and c.address(()) is None


def test_zero_d_and_zero_size():
    s = View.contiguous(())
    assert s.size == 1 and s.address(()) == 0 and s.reshape((1, 1)).reshape(()) == s
    assert s.pad(()) is s and ViewChain.of(()).gather(np.array([7])).tolist() == 7
    z = View.contiguous((0, 3))
    assert z.reshape((3, 0, 2)) == View.contiguous((3, 0, 2)) and z.pad(((0, 0), (1, 1))).size == 0
    p = z.pad(((1, 1), (0, 0)))
    assert p.shape == (2, 3) and p.fully_masked
    np.testing.assert_array_equal(p.gather(np.arange(0), PAD), np.full((2, 3), PAD))
    assert View.contiguous((1, 2)).expand((0, 2)).size == 0


def test_flip_and_pad_interact():
    x = np.arange(5)
    v = View.contiguous((5,)).pad(((2, 1),)).flip((0,))
    assert v.mask == ((1, 6),)
    np.testing.assert_array_equal(v.gather(x, PAD), np.pad(x, (2, 1), constant_values=PAD)[::-1])
    w = View.contiguous((5,)).flip((0,)).pad(((1, 0),)).slice_step(0, -2)
    np.testing.assert_array_equal(w.gather(x, PAD), np.pad(x[::-1], (1, 0), constant_values=PAD)[::-2])
    e = View.contiguous((1, 2)).pad(((0, 0), (1, 0))).expand((3, 3))
    np.testing.assert_array_equal(e.gather(np.arange(2), PAD), [[PAD, 0, 1]] * 3)


def test_negative_strides_with_offset():
    x = np.arange(24)
    v = View.contiguous((4, 6)).flip((0, 1)).shrink(((1, 3), (2, 6))).stride((1, -2))
    ref = x.reshape(4, 6)[::-1, ::-1][1:3, 2:6][:, ::-2]
    np.testing.assert_array_equal(v.gather(x), ref)
    assert v.offset == int(ref[0, 0]) and v.strides == (-6, 2)


def test_pad_values_must_agree():
    c = ViewChain.of((3,)).pad(((1, 1),), 0.0)
    assert c.pad(((1, 0),), 1.0) is None
    assert c.pad(((1, 0),), 0.0) is not None and c.pad(((1, 0),), 0) is not None
    assert c.pad(((1, 0),), -0.0) is None  # -0.0 is a different value
    nan = c.shrink(((1, 4),)).pad(((1, 0),), float("nan"))  # the 0.0 padding was cut away
    assert nan is not None and nan.pad(((0, 1),), float("nan")) is not None
    assert ViewChain.of((2,)).pad(((0, 0),), 5.0).pad_value == 0  # no-op pad, no mask


def test_apply_movement_accepts_enum_and_rejects_other_ops():
    class Ops(enum.Enum):
        PERMUTE = "PERMUTE"
        ADD = "ADD"

    assert apply_movement(View.contiguous((2, 3)), Ops.PERMUTE, (1, 0)).shape == (3, 2)
    with pytest.raises(ValueError, match="ADD"):
        apply_movement(View.contiguous((2, 3)), Ops.ADD, None)
    with pytest.raises(ValueError, match="expand"):
        View.contiguous((2, 3)).expand((4, 3))
    with pytest.raises(ValueError, match="reshape"):
        View.contiguous((2, 3)).reshape((5,))
    ops = [("PERMUTE", (1, 0)), ("RESHAPE", (6,)), ("PAD", (((1, 0),), 9))]
    c = ViewChain.from_movement((2, 3), ops)
    assert c.gather(np.arange(6)).tolist() == [9, 0, 3, 1, 4, 2, 5]


def test_render_and_steps():
    v = View.contiguous((4, 3)).pad(((1, 0), (0, 2)))
    assert v.render(("i", "j")) == ("-3 + 3*i + j", "1 <= i and j < 3")
    assert View.contiguous((3,)).flip((0,)).render(("i",)) == ("2 - i", None)
    c = ViewChain.of((2, 3)).permute((1, 0)).reshape((6,))
    assert [(u, w.shape) for u, w in c.steps()] == [(None, (6,)), ((3, 2), (3, 2))]


# ---- concat


@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3), (4, 3), (1, 3)], 0),
    ([(2, 1), (2, 0), (2, 4)], 1),
    ([(3,)], 0),
    ([(2, 2, 1), (2, 2, 3)], -1),
])
def test_concat_views_match_numpy(shapes, axis):
    srcs = [np.arange(int(np.prod(s))).reshape(s) + 100 * k for k, s in enumerate(shapes)]
    views = concat_views(shapes, axis)
    out = sum(v.gather(s.reshape(-1), 0) for v, s in zip(views, srcs))
    np.testing.assert_array_equal(out, np.concatenate(srcs, axis))
    for v, s in zip(views, srcs):  # validity alone also selects the source
        addr, valid = v.index_arrays()
        assert valid.sum() == s.size


def test_concat_chains_of_padded_sources():
    a = ViewChain.of((2,)).pad(((1, 0),), PAD)  # [-1, 0, 1]
    b = ViewChain.of((2, 2)).permute((1, 0)).reshape((4,))  # [0, 2, 1, 3]
    ca, cb = concat_chains([a, b], 0)
    (s0, e0), (s1, e1) = concat_bounds([3, 4])
    ga, gb = ca.gather(np.arange(2)), cb.gather(np.arange(4))
    out = np.where((np.arange(7) >= s0) & (np.arange(7) < e0), ga, gb)
    assert out.tolist() == [-1, 0, 1, 0, 2, 1, 3] and (s1, e1) == (3, 7)


def test_docstring_examples_run():
    import doctest

    import svod.view

    assert doctest.testmod(svod.view).failed == 0
