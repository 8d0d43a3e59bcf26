"""View leaves (svod.viewfold): slices of realized buffers bound at run time, so a Python
loop over slices shares one plan and one compiled object (issue 28, point 1)."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import viewfold
from svod.boundaries import op_name
from svod.engine import PIPELINE
from svod.ir import Ops


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("SVOD_DYNAMIC", raising=False)
    svod.reset()
    yield
    svod.reset()


def _counts():
    """(plans made, kernels compiled): a plan is searched, or planned greedily when the graph
    has no fusion choice (svod.firstcall: `searches_skipped`)."""
    s = svod.stats()
    return s["searches"] + s["searches_skipped"], s["kernels_compiled"]


def _delta(before):
    after = _counts()
    return after[0] - before[0], after[1] - before[1]


def test_loop_over_row_slices_searches_and_compiles_once_per_mode():
    a0 = np.random.default_rng(0).standard_normal((56, 130))
    a0[3, 7], a0[9, 0], a0[20, 5] = np.nan, -0.0, np.inf
    a = svod.asarray(a0)
    before = _counts()
    for i in range(1, 51):  # 50 different offsets
        got = ((a[i, 1:-1] + a[i + 1, 1:-1]) * 0.5).numpy()
        np.testing.assert_array_equal(got, (a0[i, 1:-1] + a0[i + 1, 1:-1]) * 0.5)
    searches, compiled = _delta(before)
    # the first offsets planned exactly, every other one in the folded plan
    assert searches == 2, searches
    assert compiled <= 4, compiled
    notes = viewfold.recompiles()
    assert len(notes) == 1 and "dynamic in its view offsets" in notes[0]


def test_exact_until_a_second_offset_and_first_offsets_keep_their_plan():
    a0 = np.arange(200, dtype=np.float32).reshape(10, 20)
    a = svod.asarray(a0)
    k1, b1 = PIPELINE.compact([(a[2] * 3).uop])
    assert all(len(n.arg) == 2 for n in k1.nodes if n.op is Ops.BUFFER)  # exact: the offset is key data
    assert len(b1.arrays) == 1 and b1.arrays[0] is a.uop.arg.array
    k2, b2 = PIPELINE.compact([(a[5] * 3).uop])  # a second offset: dynamic
    leaves = [n for n in k2.nodes if n.op is Ops.BUFFER]
    assert len(leaves) == 1 and leaves[0].arg[2] == viewfold.VIEW_MARK and leaves[0].shape == (20,)
    assert not any(n.op is Ops.SHRINK for n in k2.nodes)
    v = b2.arrays[0]
    assert np.shares_memory(v, a0) or np.shares_memory(v, a.uop.arg.array)  # a view, no copy
    np.testing.assert_array_equal(v, a0[5])
    k3, _ = PIPELINE.compact([(a[7] * 3).uop])
    assert k3 == k2  # one key for every other offset
    k4, _ = PIPELINE.compact([(a[2] * 3).uop])
    assert k4 == k1  # the first offsets keep their exact plan
    assert "view" in op_name(k2, k2.inputs[0])


def test_columns_scalars_flips_and_steps_equal_numpy():
    rng = np.random.default_rng(1)
    a0 = rng.standard_normal((40, 40))
    a = svod.asarray(a0)
    before = _counts()
    for k in range(0, 30):
        got = (a[k + 1:k + 9, k] / a[k, k]).numpy()  # a strided column and a scalar index
        np.testing.assert_array_equal(got, a0[k + 1:k + 9, k] / a0[k, k])
        np.testing.assert_array_equal((a[k, ::-1] - a[k + 1, 3::-1][:1]).numpy(),
                                      a0[k, ::-1] - a0[k + 1, 3::-1][:1])
        np.testing.assert_array_equal((a[k, 1::3] * 2).numpy(), a0[k, 1::3] * 2)
        np.testing.assert_array_equal((a[k:k + 5, 2:6].T + 1).numpy(), a0[k:k + 5, 2:6].T + 1)
    searches, compiled = _delta(before)
    # at most three per structure: the first offsets exact, then contiguous blocks folded,
    # then (an inner offset moving: the column) fully folded
    assert searches <= 12, searches


def test_blocks_fold_without_copies_and_inner_offsets_fold_fully():
    y0 = np.arange(600, dtype=np.float32).reshape(30, 20)
    y = svod.asarray(y0)
    base = y.uop.arg.array
    keys = []
    for i in range(4):  # leading-axis offsets only: a contiguous block leaf under a fixed shrink
        key, b = PIPELINE.compact([(y[i:i + 5, 1:] * 2).uop])
        keys.append(key)
        if i:
            (leaf,) = [n for n in key.nodes if n.op is Ops.BUFFER]
            assert leaf.arg[2] == viewfold.VIEW_MARK and leaf.shape == (5, 20)
            assert b.arrays[0].flags.c_contiguous and np.shares_memory(b.arrays[0], base)
            assert [n.arg for n in key.nodes if n.op is Ops.SHRINK] == [((0, 5), (1, 20))]
    assert keys[1] == keys[2] == keys[3] != keys[0]
    for i in range(4):
        np.testing.assert_array_equal((y[i:i + 5, 1:] * 2).numpy(), y0[i:i + 5, 1:] * 2)
    kinds = []
    for k in range(6):  # an inner offset moves: a block key per k, then fully folded
        key, b = PIPELINE.compact([(y[2:9, k] + 1).uop])
        kinds.append("full" if not any(n.op is Ops.SHRINK for n in key.nodes) else "shrink")
        np.testing.assert_array_equal((y[2:9, k] + 1).numpy(), y0[2:9, k] + 1)
    assert kinds[:2] == ["shrink", "shrink"] and kinds[3:] == ["full"] * 3, kinds
    assert any("inner view offsets" in m for m in viewfold.recompiles())


def test_sliding_window_1d():
    x0 = np.random.default_rng(2).random(5000).astype(np.float32)
    x = svod.asarray(x0)
    before = _counts()
    for i in range(0, 4000, 97):
        got = (x[i:i + 900] + x[i + 1:i + 901] + x[i + 2:i + 902]).numpy()
        np.testing.assert_array_equal(got, x0[i:i + 900] + x0[i + 1:i + 901] + x0[i + 2:i + 902])
    searches, _ = _delta(before)
    assert searches == 2


def test_replay_rebinds_views_of_a_new_buffer():
    """A signature seen before replays with its views taken of the new buffer's array."""
    rng = np.random.default_rng(3)
    for _ in range(2):  # make the structure dynamic
        for i in (1, 2, 3):
            a0 = rng.random((8, 16))
            np.testing.assert_array_equal((svod.asarray(a0)[i, 2:] * 2).numpy(), a0[i, 2:] * 2)
    hits = svod.stats()["graph_cache_hits"]
    for _ in range(5):
        a0 = rng.random((8, 16))
        np.testing.assert_array_equal((svod.asarray(a0)[3, 2:] * 2).numpy(), a0[3, 2:] * 2)
    assert svod.stats()["graph_cache_hits"] - hits == 5


def test_jit_never_binds_a_folded_view_of_its_trace():
    a0 = np.arange(60.0).reshape(6, 10)
    a = svod.asarray(a0)
    for i in (1, 2, 3):  # the structure below turns dynamic in its offsets
        (a[i, 1:-1] * 2).numpy()

    @svod.jit
    def f(x):
        return x[2, 1:-1] * 2

    for scale in (1.0, 3.0, -5.0):
        x0 = a0 * scale
        np.testing.assert_array_equal(f(svod.asarray(x0)).numpy(), x0[2, 1:-1] * 2)


def test_rows_and_offsets_both_change():
    rng = np.random.default_rng(4)
    x0 = rng.random((300, 8))
    x = svod.asarray(x0)
    for k in range(0, 120, 7):
        got = (x[k:k + 100 + k] * 2 + 1).numpy()
        np.testing.assert_array_equal(got, x0[k:k + 100 + k] * 2 + 1)


def test_dynamic_off_never_folds(monkeypatch):
    monkeypatch.setenv("SVOD_DYNAMIC", "0")
    a = svod.asarray(np.ones((5, 5), np.float32))
    for i in range(4):
        key, _ = PIPELINE.compact([(a[i] + 1).uop])
        assert any(n.op is Ops.SHRINK for n in key.nodes)
    assert viewfold.recompiles() == []


def test_reset_forgets_offsets():
    a = svod.asarray(np.ones((5, 5), np.float32))
    for i in range(3):
        (a[i] + 1).numpy()
    assert len(viewfold.OFFSETS) == 1 and viewfold.recompiles()
    svod.reset()
    assert len(viewfold.OFFSETS) == 0 and viewfold.recompiles() == []


def test_outputs_do_not_alias_the_sliced_buffer():
    a0 = np.arange(30.0).reshape(5, 6)
    a = svod.asarray(a0)
    outs = [(a[i, :] + 0).numpy() for i in range(4)]
    for i, o in enumerate(outs):
        assert not np.shares_memory(o, a.uop.arg.array)
        np.testing.assert_array_equal(o, a0[i])


def test_setitem_loop_reading_views_equals_numpy():
    """Row updates of a realized array (the write side stays key data, the reads fold)."""
    n = 12
    a0 = np.random.default_rng(5).random((n, n))
    a = svod.asarray(a0)
    ref = a0.copy()
    for i in range(1, n - 1):
        a[i, 1:-1] = 0.25 * (a[i - 1, 1:-1] + a[i + 1, 1:-1] + a[i, :-2] + a[i, 2:])
        a = svod.asarray(a.numpy())  # realized every row
        ref[i, 1:-1] = 0.25 * (ref[i - 1, 1:-1] + ref[i + 1, 1:-1] + ref[i, :-2] + ref[i, 2:])
    np.testing.assert_allclose(a.numpy(), ref, rtol=1e-12)


def test_source_lines_follow_folded_nodes():
    """`svod.sources.key_sources` numbers nodes as the key realize uses (view leaves fold
    several nodes into one): every node named, the slice leaf by its slicing line."""
    from svod import sources
    from svod.key import compact, compact_origins

    with sources.record():
        y = svod.asarray(np.arange(600, dtype=np.float32).reshape(30, 20))
        ts = [y[i:i + 5, 1:] * 2 + y[i + 1, 3] for i in range(3)]
    for t in ts:
        key, _ = compact([t.uop])
        again, order, origins = compact_origins([t.uop])
        assert again == key and len(origins) == len(key.nodes)
        named = sources.key_sources([t.uop], text=True)
        assert sorted(named) == list(range(len(key.nodes)))
        for i in key.inputs:
            want = "asarray" if len(key.nodes[i].arg) == 2 else "ts = ["
            assert want in named[i], (i, named[i])
    assert any(len(compact([t.uop])[0].nodes[i].arg) == 3 for t in ts[1:] for i in compact([t.uop])[0].inputs)


def test_a_slice_realized_alone_is_a_copy_at_every_offset():
    a0 = np.arange(60.0).reshape(6, 10)
    a = svod.asarray(a0)
    before = _counts()
    for i in range(5):
        r = a[i:i + 2].numpy()
        np.testing.assert_array_equal(r, a0[i:i + 2])
        assert not np.shares_memory(r, a.uop.arg.array)
    assert _delta(before)[0] <= 2


def test_the_recompile_record_says_the_structure_became_dynamic_in_its_view_offsets(monkeypatch, capsys):
    """The view-offset note reaches svod.recompiles' record of the plan it causes, printed
    under SVOD_LOGS=recompiles (one mechanism for every recompile line)."""
    from svod.recompiles import RECOMPILES

    monkeypatch.setenv("SVOD_LOGS", "recompiles")
    a = svod.asarray(np.arange(400.0).reshape(20, 20))
    for i in (1, 2):
        (a[i] * 3).numpy()
    recs = [r for r in RECOMPILES.log if "view offsets" in r.detail]
    assert len(recs) == 1 and recs[0].reason == "became dynamic", list(RECOMPILES.log)
    assert "view offsets" in capsys.readouterr().err
