"""Realize and the tensor registry: shared producers once, realized values never recomputed."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import svod


def test_realize_several_outputs_computes_shared_producer_once():
    x = svod.asarray(np.arange(6, dtype=np.float32))
    shared = svod.exp(x) * 2.0
    a, b = shared + 1.0, shared - 1.0
    svod.reset_stats()
    svod.realize(a, b)
    together = svod.stats()["nodes_evaluated"]

    shared2 = svod.exp(x) * 3.0
    a2, b2 = shared2 + 1.0, shared2 - 1.0
    svod.reset_stats()
    a2.realize()
    b2.realize()
    apart = svod.stats()["nodes_evaluated"]
    assert together < apart
    np.testing.assert_allclose(a.numpy(), np.exp(np.arange(6, dtype=np.float32)) * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(b.numpy(), np.exp(np.arange(6, dtype=np.float32)) * 2 - 1, rtol=1e-6)


def test_realized_value_is_never_recomputed():
    x = svod.asarray(np.ones(4, np.float32))
    a = svod.exp(x) + 1.0
    b = a * 2.0
    a.realize()
    assert a.is_realized
    # b's graph now starts at a's buffer: only the multiply remains
    assert a.uop in b.uop.toposort()
    assert "EXP" not in {n.op.name for n in b.uop.toposort()}
    svod.reset_stats()
    b.realize()
    assert svod.stats()["nodes_evaluated"] <= 3  # MUL and the constant's reshape + expand
    np.testing.assert_allclose(b.numpy(), (np.e + 1) * 2, rtol=1e-6)


def test_becomes_map_reaches_tensors_holding_the_node():
    x = svod.arange(5)
    y = x * 3
    alias = svod.Tensor._from(y.uop)  # another live tensor on the same node
    y.realize()
    assert alias.is_realized and alias.uop is y.uop


def test_realize_of_realized_is_a_no_op():
    x = svod.asarray([1.0, 2.0])
    svod.reset_stats()
    svod.realize(x, x)
    assert svod.stats()["realizes"] == 0


def test_same_structure_hits_the_plan_cache():
    for i in range(3):
        (svod.asarray(np.full(8, i, np.float32)) * 2 + 1).realize()
    s = svod.stats()
    assert s["graph_cache_misses"] == 1 and s["graph_cache_hits"] == 2


def test_numpy_is_a_read_only_view():
    t = svod.asarray([1.0, 2.0]) + 1
    arr = t.numpy()
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 5


def test_repr_does_not_compute_huge_tensors():
    big = svod.zeros((2000, 2000)) + 1
    svod.reset_stats()
    text = repr(big)
    assert "lazy" in text and "(2000, 2000)" in text
    assert svod.stats()["realizes"] == 0
    assert "1." in repr(svod.ones(3) * 1)


def test_debug_logging(monkeypatch, capsys, caplog):
    monkeypatch.setenv("SVOD_DEBUG", "1")
    with caplog.at_level("INFO", logger="svod"):
        (svod.asarray([1.0]) + 1).realize()
    assert "svod realize" in caplog.text + capsys.readouterr().err


@pytest.mark.slow
def test_100k_node_chain_realizes():
    t0 = time.perf_counter()
    x = svod.asarray(np.zeros(16, np.float32))
    for i in range(100_000):
        x = x + 1.0 if i % 2 == 0 else x * 1.0
    x.realize()
    assert time.perf_counter() - t0 < 30
    np.testing.assert_array_equal(x.numpy(), np.full(16, 50_000, np.float32))
    del x
    gc.collect()


def test_20k_node_chain_realizes_fast():
    x = svod.asarray(np.zeros(4, np.float32))
    for _ in range(20_000):
        x = x + 1.0
    x.realize()
    np.testing.assert_array_equal(x.numpy(), np.full(4, 20_000, np.float32))


def test_becomes_visits_only_tensors_sharing_a_leaf():
    """Realizing one of many independent pending results rebinds the tensors built on it
    and leaves the others alone; the leaf index holds nothing once they die (a BufferRef
    key would keep its array alive)."""
    from svod import tensor as T

    xs = [svod.asarray(np.full(8, i * 0.01, np.float32)) for i in range(300)]
    heads = [x * 2.0 + 1.0 for x in xs]
    tails = [h.exp() for h in heads]
    heads[7].realize()
    assert tails[7].uop.src[0].op is svod.ir.Ops.BUFFER  # rebound onto the realized head
    assert tails[8].uop.src[0].op is not svod.ir.Ops.BUFFER  # an unrelated graph: untouched
    for i, t in enumerate(tails):
        np.testing.assert_allclose(t.numpy(), np.exp(np.full(8, i * 0.01, np.float32) * 2 + 1), rtol=1e-6)
    y = xs[0] + 1.0
    y[0] = 5.0  # rebound in place: regrouped under its new leaves
    z = y * 3.0
    y.realize()
    assert z.numpy().tolist() == [15.0] + [3.0] * 7
    import weakref

    refs = [weakref.ref(x.uop.arg) for x in xs]
    assert all(r() in T._by_leaf for r in refs[8:20])  # pending graphs on these leaves: indexed
    del xs, heads, tails, y, z
    svod.caches.RECENT.clear()  # the realized expressions kept for rebuilding hold their leaves
    gc.collect()
    assert not [r for r in refs if r() is not None]  # the index keeps no leaf (nor its array) alive


def test_recent_graphs_make_a_rebuild_a_lookup():
    """A realized expression over small inputs stays alive for a while (`svod.caches.RECENT`):
    building it again gives the same nodes; large inputs, more realizes or `clear` let it go."""
    import weakref

    def f(x):
        return ((x * 1.5 + 0.25).exp() - x).abs()

    x = svod.asarray(np.linspace(0, 1, 64, dtype=np.float32))
    t = f(x)
    root = weakref.ref(t.uop)
    first = t.numpy().copy()
    gc.collect()
    assert root() is not None  # kept past the realize that replaced it
    t2 = f(x)
    assert t2.uop is root()  # the rebuild hit every node
    np.testing.assert_array_equal(t2.numpy(), first)
    for i in range(svod.caches.RECENT.max_graphs):  # pushed out by later realizes
        (x + float(i)).realize()
    del t, t2
    gc.collect()
    assert root() is None
    big = svod.asarray(np.ones(svod.caches.RECENT.max_bytes // 4 + 1, np.float32))
    tb = f(big)
    rb = weakref.ref(tb.uop)
    tb.realize()
    gc.collect()
    assert rb() is None  # leaves above max_bytes: never kept
    ts = f(x)
    rs = weakref.ref(ts.uop)
    ts.realize()
    svod.caches.RECENT.clear()
    gc.collect()
    assert rs() is None
    assert not svod.caches.RecentGraphs(0).small(x.uop._leaves)  # SVOD_RETAIN_GRAPHS=0
