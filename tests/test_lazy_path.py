"""The lazy per-call path (build + realize of a small expression, W7): its shortcuts build the
same nodes, give the same values and keep the same guarantees as the general paths.

- per-op: `tensor._node1/_node2` (the hash-consing lookup without the type call), the float
  fast paths of the elementwise functions (`elementwise._fast2`, the one-op functions), the
  constants' memo key (`tensor._const`), int tuples in `ir._canon`;
- realize: one tensor without the loops (`tensor._realize_one`), the early return of
  `_apply_becomes` when no live tensor shares a root's leaf, the replay hit calling
  `Executable.quick` directly (`engine.realize_uops`).
"""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import dtype as dt
from svod import engine
from svod import tensor as T
from svod.caches import PLAN_CACHE, REPLAY
from svod.dtype import DTypeError
from svod.errors import ShapeError
from svod.ir import OP, UOp, _canon

F32 = np.float32


def _x(n=16, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(F32)


def _w7(x):
    y = svod.tanh(x * 1.5 + 0.25) * x - 0.5
    return svod.maximum(svod.exp(-svod.sqrt(svod.abs(y))), 0.1)


def _w7_np(x):
    y = np.tanh(x * F32(1.5) + F32(0.25)) * x - F32(0.5)
    return np.maximum(np.exp(-np.sqrt(np.abs(y))), F32(0.1))


# ----------------------------------------------------------------------------- nodes


def test_fast_paths_build_the_general_paths_nodes():
    x = svod.asarray(_x())
    y = x * 2.0
    u, f32 = y.uop, dt.float32
    c = T._const(1.5, f32, u.shape)
    # binary: tensor with Python float / int, two tensors alike
    for fn, op in ((svod.add, OP.ADD), (svod.subtract, OP.SUB), (svod.multiply, OP.MUL),
                   (svod.divide, OP.DIV), (svod.maximum, OP.MAX), (svod.minimum, OP.MIN)):
        assert fn(y, 1.5).uop is UOp(op, f32, (u, c)), fn.__name__
        assert fn(y, x).uop is UOp(op, f32, (u, x.uop)), fn.__name__
        assert fn(y, 3).uop is UOp(op, f32, (u, T._const(3, f32, u.shape))), fn.__name__
    # the operators (svod.methods) and the one-op functions
    assert (y + 1.5).uop is svod.add(y, 1.5).uop
    assert (1.5 - y).uop is UOp(OP.SUB, f32, (c, u))
    for fn, op in ((svod.exp, OP.EXP), (svod.sqrt, OP.SQRT), (svod.tanh, OP.TANH), (svod.abs, OP.ABS),
                   (svod.negative, OP.NEG), (svod.floor, OP.FLOOR), (svod.round, OP.ROUND)):
        assert fn(y).uop is UOp(op, f32, (u,)), fn.__name__
    assert (-y).uop is UOp(OP.NEG, f32, (u,))


def test_fast_paths_leave_promotion_broadcasting_and_errors_to_the_general_path():
    xf = svod.asarray(_x())
    xi = svod.asarray(np.arange(16, dtype=np.int32))
    assert svod.exp(xi).dtype == dt.float32  # an int tensor: the float function's float dtype
    assert svod.abs(xi).dtype == dt.int32
    assert svod.add(xf, svod.asarray(np.ones(16, np.float64))).dtype == dt.float64  # promotion
    assert svod.maximum(xf, svod.asarray(np.ones((3, 1), F32))).shape == (3, 16)  # broadcasting
    assert svod.divide(xi, 2).dtype == dt.float32
    xc = svod.asarray(np.ones(4, np.complex64))
    with pytest.raises(DTypeError, match="maximum"):
        svod.maximum(xc, 1.0)
    with pytest.raises(ShapeError, match="add"):
        svod.add(xf, svod.asarray(np.ones(3, F32)))
    with pytest.raises(DTypeError, match="negative"):
        svod.negative(svod.asarray(np.array([True, False])))


def test_constant_memo_keeps_zero_signs_nan_and_kinds_apart():
    x = svod.asarray(np.array([1.0, -2.0, np.inf], F32))
    got = (x * -0.0).numpy()
    want = np.array([1.0, -2.0, np.inf], F32) * F32(-0.0)
    np.testing.assert_array_equal(np.signbit(got[:2]), np.signbit(want[:2]))
    assert np.signbit((x * 0.0).numpy()[0]) == np.False_
    assert np.isnan((x + float("nan")).numpy()).all()
    f32 = dt.float32
    assert T._const(0.0, f32, (3,)) is not T._const(-0.0, f32, (3,))
    assert T._const(1.5, f32, (3,)) is T._const(1.5, f32, (3,))
    assert T._const(2.0, f32, (3,)) is T._const(2, f32, (3,))  # the same float32 constant either way
    assert T._const(2, dt.int32, (3,)) is not T._const(True, dt.bool_, (3,))


def test_canon_int_tuples_are_keys_apart_from_other_tuples():
    assert _canon((2, 3)) == _canon((2, 3))
    assert _canon((2, 3)) != _canon((2.0, 3.0))
    assert _canon((1, 3)) != _canon((True, 3))
    assert _canon(("sum", (0,))) == _canon(("sum", (0,)))
    assert _canon(("sum", (0,))) != _canon(("sum", (0.0,)))
    assert _canon(()) == _canon(())
    x = svod.asarray(np.ones((2, 3), F32))
    assert svod.reshape(x, (3, 2)).uop is svod.reshape(x, (3, 2)).uop  # hash-consed movement nodes
    assert svod.broadcast_to(x, (4, 2, 3)).uop is svod.broadcast_to(x, (4, 2, 3)).uop


# ----------------------------------------------------------------------------- values


@pytest.mark.parametrize("n", [1, 7, 1000])
def test_w7_lazy_matches_numpy_call_after_call(n):
    xs = [_x(n, seed) for seed in range(3)]
    xs[1][: min(n, 3)] = [np.nan, -0.0, np.inf][: min(n, 3)]
    for _ in range(2):  # first call plans, later calls replay by signature
        for a in xs:
            got = _w7(svod.asarray(a)).numpy()
            np.testing.assert_allclose(got, _w7_np(a), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_replay_hit_counts_and_falls_back_to_run(monkeypatch):
    x = svod.asarray(_x(64))
    want = _w7_np(x.numpy())
    for _ in range(3):  # plan, first run, then the straight-line runner
        _w7(x).numpy()
    u = _w7(x).uop
    sig = u._sig
    entry = REPLAY.get(sig)
    exe = PLAN_CACHE.use(entry.key_hash)
    assert callable(exe.quick)
    assert callable(exe.hits[sig])  # the straight-line hit of this signature (engine._add_hit)
    before = svod.stats()
    np.testing.assert_allclose(_w7(x).numpy(), want, rtol=1e-5, atol=1e-6)
    after = svod.stats()
    assert after["graph_cache_hits"] - before["graph_cache_hits"] == 1
    assert after["kernels_launched"] - before["kernels_launched"] == 1
    # a hit and a straight-line runner that decline (an input to convert, another thread):
    # `run` takes it
    calls = []
    monkeypatch.setattr(exe, "hits", {sig: lambda leaves, roots: calls.append("hit")})
    monkeypatch.setattr(exe, "quick", lambda arrays: calls.append("quick"))
    before = svod.stats()
    np.testing.assert_allclose(_w7(x).numpy(), want, rtol=1e-5, atol=1e-6)
    assert calls[0] == "hit" and "quick" in calls  # asked in turn, declined: the graph program ran
    assert svod.stats()["kernels_launched"] - before["kernels_launched"] == 1


def test_debug_realize_still_logs_on_a_replayable_structure(monkeypatch, capsys):
    x = svod.asarray(_x(32))
    _w7(x).numpy()
    _w7(x).numpy()
    monkeypatch.setenv("SVOD_DEBUG", "1")
    _w7(x).numpy()
    assert "svod realize: key" in capsys.readouterr().err


# ----------------------------------------------------------------------------- rebinding


def test_realize_one_rebinds_live_tensors_that_hold_the_root():
    x = svod.asarray(_x(8))
    a = x * 3.0
    b = a + 1.0  # holds a's node
    other = svod.asarray(_x(8, 1)) * 2.0  # another leaf: untouched
    other_uop = other.uop
    T.realize(a)
    assert a.is_realized
    assert b.uop.src[0].op is OP.BUFFER and b.uop.src[0] is a.uop
    assert other.uop is other_uop
    np.testing.assert_allclose(b.numpy(), x.numpy() * F32(3) + F32(1), rtol=1e-6)


def test_realize_many_rebinds_and_skips_unrelated():
    x = svod.asarray(_x(8))
    a, c = x * 3.0, x - 1.0
    b = a * c  # holds both roots
    svod.realize(a, c)
    assert {s.op for s in b.uop.src} == {OP.BUFFER}
    np.testing.assert_allclose(b.numpy(), (x.numpy() * F32(3)) * (x.numpy() - F32(1)), rtol=1e-6)


def test_realize_of_a_constant_graph_rebinds_its_holders():
    a = svod.zeros(4) + 2.0  # no leaves: any live tensor may hold it
    b = a * 3.0
    T.realize(a)
    assert b.uop.src[0] is a.uop
    np.testing.assert_array_equal(b.numpy(), np.full(4, 6.0, F32))


def test_realize_one_under_a_jit_trace_keeps_traced_values_lazy():
    @svod.jit
    def f(x):
        y = x * 2.0
        y.realize()  # inside a trace: a traced value stays lazy (no error, one graph)
        return y + 1.0

    a = _x(8)
    np.testing.assert_allclose(f(svod.asarray(a)).numpy(), a * F32(2) + F32(1), rtol=1e-6)
    np.testing.assert_allclose(f(svod.asarray(a)).numpy(), a * F32(2) + F32(1), rtol=1e-6)


def test_engine_realize_uops_single_buffer_root_is_a_no_op():
    x = svod.asarray(_x(4))
    assert engine.realize_uops([x.uop]) == {}
    assert engine.realize_uops([x.uop, x.uop]) == {}


def test_two_root_signature_is_the_merged_one():
    from svod.ir import _merged_signature, signature_of

    x, y = svod.asarray(_x(8)), svod.asarray(_x(8, 1))
    c = svod.zeros(8) + 1.0  # no leaves
    for a, b in ((x * 2.0, x + 1.0), (x * 2.0, c * 3.0), (c * 3.0, x * 2.0), (x * 2.0, y * 2.0),
                 (x * 2.0, x * 2.0)):
        assert signature_of([a.uop, b.uop]) == _merged_signature(("R",), [a.uop, b.uop])
    assert signature_of([(x * 2.0).uop, (x + 1.0).uop]) != signature_of([(x + 1.0).uop, (x * 2.0).uop])
