"""The lazy path's second round of shortcuts (issue 33, docs/engine.md "The lazy per-call
path"): they build the same nodes as the general paths, give numpy's values and errors,
and the replay by signature never returns a stale value.

- frontends: `broadcast_to`'s int-shape case, `sum`/`prod`/`max`/`min` of a float tensor
  over None or one axis (`reductions._fast_reduce`), basic indexing by plain Python keys
  with memoised steps (`indexing._memo_index`), `tensor._expand_uop` — each node found by
  its hash-consing key first (`ir.ints_node`, `ir.reduce_node`, `ir.keyed_node`);
- realize: the straight-line hit of a plan per leaf order (`engine._add_hit`,
  `QuickParts.hit_runner`); `_apply_becomes` skipping live tensors no deeper than a root.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import svod
from svod import dtype as dt
from svod import tensor as T
from svod.caches import PLAN_CACHE, REPLAY
from svod.errors import AxisError, ShapeError, SvodIndexError, SvodValueError
from svod.indexing import _RECIPES, basic_index
from svod.ir import OP, UOp, signature_of

F32 = np.float32


def _a(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(F32)


# ----------------------------------------------------------------------------- nodes


def test_broadcast_to_fast_case_builds_the_general_nodes():
    v = svod.asarray(_a(4))
    y = v * 2.0
    u, f32 = y.uop, dt.float32
    r = UOp(OP.RESHAPE, f32, (u,), (1, 4))
    assert svod.broadcast_to(y, (3, 4)).uop is UOp(OP.EXPAND, f32, (r,), (3, 4))
    assert svod.broadcast_to(y, (4,)).uop is u
    assert svod.broadcast_to(y, (1, 4)).uop is r
    col = y[:, None]
    assert col.uop is UOp(OP.RESHAPE, f32, (u,), (4, 1))
    assert svod.broadcast_to(col, (4, 5)).uop is UOp(OP.EXPAND, f32, (col.uop,), (4, 5))
    # other shapes and arguments: the general path, the same node or svod's error
    assert svod.broadcast_to(y, [3, 4]).uop is svod.broadcast_to(y, (3, 4)).uop
    assert svod.broadcast_to(y, (np.int64(3), 4)).uop is svod.broadcast_to(y, (3, 4)).uop
    np.testing.assert_array_equal(svod.broadcast_to(y, (2, 4)).numpy(), np.broadcast_to(y.numpy(), (2, 4)))
    for bad in ((3, 5), (5,), ()):
        with pytest.raises(ShapeError, match="broadcast_to"):
            svod.broadcast_to(y, bad)
    with pytest.raises(ShapeError, match="negative"):
        svod.broadcast_to(y, (-1, 4))


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min"])
def test_reduction_fast_case_builds_the_general_nodes(name):
    a = _a((3, 4))
    x = svod.asarray(a) * 1.0
    u, f32 = x.uop, dt.float32
    fn = getattr(svod, name)
    for axis, axes in ((0, (0,)), (1, (1,)), (-1, (1,)), (-2, (0,)), (None, (0, 1))):
        red = UOp(OP.REDUCE, f32, (u,), (name, axes))
        rest = tuple(s for i, s in enumerate(u.shape) if i not in axes)
        assert fn(x, axis=axis).uop is UOp(OP.RESHAPE, f32, (red,), rest), (axis, "keepdims=False")
        assert fn(x, axis=axis, keepdims=True).uop is red, (axis, "keepdims=True")
        np.testing.assert_allclose(fn(x, axis=axis).numpy(), getattr(np, name)(a, axis=axis), rtol=1e-5)
    # the general path: axis tuples, dtypes, 0-d, out of range, empty max/min
    assert fn(x, axis=(0,)).uop is fn(x, axis=0).uop
    assert fn(x, axis=np.int64(1)).uop is fn(x, axis=1).uop
    with pytest.raises(AxisError, match=name):
        fn(x, axis=2)
    with pytest.raises(AxisError, match=name):
        fn(svod.asarray(np.float32(2.0)), axis=0)
    if name in ("max", "min"):
        with pytest.raises(SvodValueError, match="zero-size"):
            fn(svod.asarray(np.ones((0, 3), F32)), axis=0)
    else:
        assert fn(svod.asarray(np.ones((2, 3), np.int32)), axis=0).dtype == dt.int64  # numpy 2's accumulator
        assert fn(x, axis=0, dtype=svod.float64).dtype == dt.float64


def test_reduction_fast_case_keeps_nan_and_empty_axes_as_numpy():
    a = np.array([[1.0, np.nan, -0.0], [np.inf, 2.0, -np.inf]], F32)
    x = svod.asarray(a)
    for name in ("sum", "prod", "max", "min"):
        for axis in (0, 1, None):
            np.testing.assert_array_equal(getattr(svod, name)(x, axis=axis).numpy(),
                                          getattr(np, name)(a, axis=axis), err_msg=f"{name} {axis}")
    e = svod.asarray(np.ones((0, 3), F32))
    np.testing.assert_array_equal(svod.sum(e, axis=0).numpy(), np.zeros(3, F32))
    np.testing.assert_array_equal(svod.prod(e, axis=0).numpy(), np.ones(3, F32))


# ----------------------------------------------------------------------------- basic indexing

_shapes = st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple)
_ints = st.integers(-6, 6)
_slices = st.builds(slice, st.one_of(st.none(), _ints), st.one_of(st.none(), _ints),
                    st.one_of(st.none(), st.integers(-3, 3).filter(bool)))
_items = st.one_of(_ints, _slices, st.none(), st.just(Ellipsis))


def _numpy_index(a, key):
    try:
        return a[key], None
    except IndexError as e:
        return None, e


@settings(max_examples=150, deadline=None)
@given(_shapes, st.lists(_items, min_size=0, max_size=4), st.booleans())
def test_memoised_basic_index_equals_basic_index_and_numpy(shape, items, as_tuple):
    """A key seen before on a shape replays its memoised steps: the nodes `basic_index`
    builds for a new tensor of that shape, numpy's values, numpy's out-of-bounds errors."""
    key = tuple(items) if as_tuple or len(items) != 1 else items[0]
    if sum(k is Ellipsis for k in items) > 1:
        with pytest.raises(SvodIndexError):
            svod.asarray(_a(shape))[key]
        return
    for seed in range(3):  # the first call memoises, the later ones replay the steps on new leaves
        a = _a(shape, seed)
        x = svod.asarray(a) * 1.0
        want, err = _numpy_index(a * F32(1), key)
        if err is not None:
            with pytest.raises(SvodIndexError):
                x[key]
            continue
        got = x[key]
        assert got.uop is basic_index(x.uop, key)
        np.testing.assert_array_equal(got.numpy(), want)
        assert got.shape == want.shape


def test_index_memo_is_keyed_by_shape_dtype_and_key():
    _RECIPES.clear()
    x = svod.asarray(_a((4, 6))) * 1.0
    y = svod.asarray(_a((6, 4))) * 1.0
    xi = svod.asarray(np.arange(24, dtype=np.int64).reshape(4, 6)) * 1
    for t in (x, y, xi):
        for key in ((slice(None, None, 3), None), (slice(None), None), (1, slice(None)), (Ellipsis, -1)):
            got = t[key]
            assert got.uop is basic_index(t.uop, key)
            np.testing.assert_array_equal(got.numpy(), t.numpy()[key])
    assert len(_RECIPES) == 12
    # keys with numpy ints, bools, lists or tensors take the general path (no memo entry)
    n = len(_RECIPES)
    np.testing.assert_array_equal(x[np.int64(1)].numpy(), x.numpy()[1])
    np.testing.assert_array_equal(x[[0, 2]].numpy(), x.numpy()[[0, 2]])
    np.testing.assert_array_equal(x[x > 0].numpy(), x.numpy()[x.numpy() > 0])
    assert x[True].shape == (1, 4, 6)
    assert len(_RECIPES) == n


# ----------------------------------------------------------------------------- replay hits


def _w7(x):
    y = svod.tanh(x * 1.5 + 0.25) * x - 0.5
    return svod.maximum(svod.exp(-svod.sqrt(svod.abs(y))), 0.1)


def _w7_np(x):
    y = np.tanh(x * F32(1.5) + F32(0.25)) * x - F32(0.5)
    return np.maximum(np.exp(-np.sqrt(np.abs(y))), F32(0.1))


def test_hit_runner_reads_each_calls_leaves_never_a_stale_value():
    """The straight-line hit runs the plan on the leaves of this call: new data of the same
    structure, the same tensor rebound by a write, a leaf aliased twice — never the
    value of an earlier call."""
    a = _a(256)
    x = svod.asarray(a)
    for _ in range(4):
        np.testing.assert_allclose(_w7(x).numpy(), _w7_np(a), rtol=1e-5, atol=1e-6)
    sig = _w7(x).uop._sig
    exe = PLAN_CACHE.use(REPLAY.get(sig).key_hash)
    assert sig in (exe.hits or {})  # set up: the next calls take the hit
    before = svod.stats()
    for seed in range(1, 6):
        b = _a(256, seed)
        b[:3] = [np.nan, -0.0, np.inf]
        np.testing.assert_allclose(_w7(svod.asarray(b)).numpy(), _w7_np(b), rtol=1e-5, atol=1e-6)
    after = svod.stats()
    assert after["graph_cache_hits"] - before["graph_cache_hits"] == 5
    assert after["kernels_launched"] - before["kernels_launched"] == 5
    # the same tensor, rebound by a write between calls
    x[0] = 7.0
    a2 = a.copy()
    a2[0] = 7.0
    np.testing.assert_allclose(_w7(x).numpy(), _w7_np(a2), rtol=1e-5, atol=1e-6)
    # results are fresh arrays each call, not one buffer reused
    r1, r2 = _w7(x).numpy(), _w7(x).numpy()
    assert not np.shares_memory(r1, r2)


def test_hit_runner_two_roots_and_aliased_leaves():
    a, b = _a(64), _a(64, 1)
    for _ in range(4):
        for p, q in ((a, b), (b, a), (a, a)):
            x, y = svod.asarray(p), svod.asarray(q)
            s, d = svod.realize(x * y + 1.0, x - y)
            np.testing.assert_allclose(s.numpy(), p * q + F32(1), rtol=1e-6)
            np.testing.assert_allclose(d.numpy(), p - q, rtol=1e-6)
            xx = svod.asarray(p)
            np.testing.assert_allclose((xx * xx + 1.0).numpy(), p * p + F32(1), rtol=1e-6)


def test_hit_is_per_signature_sizes_in_a_bucket_and_layouts_sharing_a_plan():
    """Several signatures may share one plan — other row counts of a size bucket run by its
    plan (svod.shapes), a leaf of another layout the checked runner converts — and each
    gets the right values: a hit is made for and used by its own signature only
    (found by hypothesis: a hit keyed by the leaf order ran a 4-row plan on 3 rows)."""
    for shape in ((4, 4, 3), (3, 4, 3), (2, 4, 3), (4, 4, 3), (3, 4, 3)):
        for seed in range(3):
            a = _a(shape, seed)
            g = (svod.asarray(a) * 1.0) * 1.0
            got = g.numpy()
            assert got.shape == shape
            np.testing.assert_array_equal(got, a)
    c = _a((6, 5))
    for _ in range(3):
        for arr in (c, np.asfortranarray(c), c):
            x = svod.asarray(arr, copy=False)
            np.testing.assert_allclose(_w7(x).numpy(), _w7_np(c), rtol=1e-5, atol=1e-6)


def test_hit_runner_is_dropped_with_its_plan():
    x = svod.asarray(_a(32))
    for _ in range(3):
        _w7(x).numpy()
    entry = REPLAY.get(_w7(x).uop._sig)
    exe = PLAN_CACHE.use(entry.key_hash)
    assert exe.hits
    PLAN_CACHE.clear()  # evicted: the replay entry names a missing plan; a new plan is made
    np.testing.assert_allclose(_w7(x).numpy(), _w7_np(x.numpy()), rtol=1e-5, atol=1e-6)
    new = PLAN_CACHE.use(REPLAY.get(_w7(x).uop._sig).key_hash)
    assert new is not exe


_OPS = [
    lambda p: p * 1.5, lambda p: p + 0.25, lambda p: svod.exp(-svod.abs(p)), lambda p: svod.tanh(p),
    lambda p: svod.broadcast_to(p[:, None], (p.shape[0], 3)).sum(axis=1), lambda p: svod.sum(p, axis=0) + p,
    lambda p: p[::-1], lambda p: svod.maximum(p, 0.1), lambda p: p - svod.max(p, axis=None),
]
_NP_OPS = [
    lambda p: p * F32(1.5), lambda p: p + F32(0.25), lambda p: np.exp(-np.abs(p)), lambda p: np.tanh(p),
    lambda p: np.broadcast_to(p[:, None], (p.shape[0], 3)).sum(axis=1), lambda p: np.sum(p, axis=0) + p,
    lambda p: p[::-1], lambda p: np.maximum(p, F32(0.1)), lambda p: p - np.max(p, axis=None),
]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, len(_OPS) - 1), min_size=1, max_size=5),
       st.lists(st.integers(0, len(_OPS) - 1), min_size=1, max_size=5), st.integers(1, 40))
def test_replayed_programs_keep_apart_and_follow_their_data(s1, s2, n):
    """Two programs share a signature only when their keys are equal (and then their
    results agree on the same data); each program, replayed by signature over new data
    call after call, gives numpy's result for that data."""
    from svod.key import compact

    def run(script, a, lib, ops):
        v = lib(a)
        for i in script:
            v = ops[i](v)
        return v

    def scale(script, a):  # the largest intermediate: sums grow, and `p - max(p)` cancels
        m, v = 1.0, a
        for i in script:
            v = _NP_OPS[i](v)
            m = max(m, float(np.nanmax(np.abs(v))) if v.size else 0.0)
        return m

    sigs = []
    for script in (s1, s2):
        for seed in range(4):
            a = _a(n, seed)
            t = run(script, a, svod.asarray, _OPS)
            if seed == 0:
                sigs.append((t.uop._sig, compact([t.uop])[0].hash))
            want = run(script, a, lambda z: z, _NP_OPS)
            # (fused sums round in another order: the tolerance of docs/semantics.md, to scale;
            # a stale or misbound replay is off by the data itself)
            np.testing.assert_allclose(t.numpy(), want, rtol=2e-5, atol=2e-5 * scale(script, a))
    assert (sigs[0][0] == sigs[1][0]) == (sigs[0][1] == sigs[1][1])


# ----------------------------------------------------------------------------- rebinding


def test_apply_becomes_rebinds_holders_and_leaves_shallower_tensors():
    x = svod.asarray(_a(8))
    a = svod.exp(x * 3.0)
    shallow = x + 1.0  # depth 1 < a's: cannot hold a
    deeper_other = svod.tanh(svod.sqrt(svod.abs(x - 2.0)))  # deeper, shares the leaf, does not hold a
    holder = a * 2.0
    su, du = shallow.uop, deeper_other.uop
    T.realize(a)
    assert shallow.uop is su and deeper_other.uop is du
    assert holder.uop.src[0] is a.uop and a.uop.op is OP.BUFFER
    np.testing.assert_allclose(holder.numpy(), np.exp(x.numpy() * F32(3)) * F32(2), rtol=1e-6)
    np.testing.assert_allclose(shallow.numpy(), x.numpy() + F32(1), rtol=1e-6)


def test_signature_of_the_fast_frontends_matches_the_general_nodes():
    v = svod.asarray(_a(16))
    n = 16
    fast = svod.sum(svod.broadcast_to(v[:, None], (n, n)), axis=1)
    general = UOp(OP.RESHAPE, dt.float32, (UOp(OP.REDUCE, dt.float32, (
        UOp(OP.EXPAND, dt.float32, (UOp(OP.RESHAPE, dt.float32, (v.uop,), (n, 1)),), (n, n)),), ("sum", (1,))),), (n,))
    assert fast.uop is general
    assert signature_of([fast.uop]) == signature_of([general])


def test_the_frontends_shortcut_keys_are_the_nodes_keys():
    """`ir.ints_node` and `ir.reduce_node` look a node up by its hash-consing key written
    out (`_canon` of an int tuple is ``(_INTS, t)``): the two statements of that encoding
    must agree, or every lookup misses (slower, never wrong)."""
    from svod import ir

    t = (3, 1, 2)
    assert ir._canon(t) == (ir._INTS, t)
    x = svod.asarray(np.ones((2, 3, 4), np.float32))
    u = x.uop
    made = ir.UOp(ir.Ops.PERMUTE, u.dtype, (u,), (2, 0, 1))
    assert ir._NODE_CACHE.get((ir.Ops.PERMUTE, u.dtype, (u,), (ir._INTS, (2, 0, 1)))) is not None
    assert ir.ints_node(ir.Ops.PERMUTE, u.dtype, u, (2, 0, 1)) is made
