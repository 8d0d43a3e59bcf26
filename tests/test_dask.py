"""svod.dask: dask.array programs with svod chunks equal dask with numpy chunks.

A real `dask.distributed.LocalCluster` of 2 worker processes (1 thread each) — no mocks —
runs the issue's programs: softmax of a layer norm over 8 chunks, an elementwise chain
with a global sum, a blockwise matmul; each equals numpy, runs one svod graph per chunk,
with at most one search per worker (the plan is shared through the persistent cache) and
cache hits after. Ops svod lacks run with numpy with one warning; a region that fails on
a worker falls back to numpy for that chunk. Differential cases on dask's synchronous
scheduler cover dtypes (numpy's promotion, integer division and sums), reductions along
and across chunks, slicing, rechunking, where, tensordot.

Skipped when dask/distributed are not installed (`pip install 'svod[distributed]'`).
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import svod  # noqa: E402
import svod.dask  # noqa: E402
from svod.errors import SvodWarning  # noqa: E402


def _ln(x):
    m = x.mean(axis=-1, keepdims=True)
    v = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / da.sqrt(v + 1e-5)


def _softmax(x):
    e = da.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _np_softmax_ln(x):
    m = x.mean(axis=-1, keepdims=True)
    y = (x - m) / np.sqrt(((x - m) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
    e = np.exp(y - y.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _chain(x):
    return da.tanh(x * 0.5 + 1.0) * da.exp(-x * x) - 0.25


def _np_chain(x):
    return np.tanh(x * 0.5 + 1.0) * np.exp(-x * x) - 0.25


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """2 worker processes x 1 thread over their own persistent cache (inherited env)."""
    old = os.environ.get("SVOD_CACHE_DIR")
    os.environ["SVOD_CACHE_DIR"] = str(tmp_path_factory.mktemp("dask-cache"))
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=":0", silence_logs=40)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()
    if old is None:
        os.environ.pop("SVOD_CACHE_DIR", None)
    else:
        os.environ["SVOD_CACHE_DIR"] = old


def _fresh(client) -> None:
    """Empty in-memory svod caches and zero counters on every worker (disk cache kept)."""
    def reset():
        from svod import engine

        engine.reset_caches()
        svod.reset_stats()
        svod.dask.region_stats(reset=True)

    client.run(reset)


def _worker_stats(client) -> list[dict]:
    out = client.run(lambda: dict(svod.stats(), **svod.dask.region_stats()))
    return list(out.values())


def _x(rows=8 * 64, cols=256, chunks=64, seed=0):
    xn = np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32)
    return xn, da.from_array(xn, chunks=(chunks, cols))


def test_softmax_of_layernorm_over_8_chunks(client):
    _fresh(client)
    xn, x = _x()
    y = _softmax(_ln(x))
    assert y.numblocks == (8, 1)
    got = svod.dask.compute(y)[0]
    st = _worker_stats(client)
    want = y.compute(scheduler="sync")  # dask with numpy chunks, same graph (here: the cluster reuses keys)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(got, _np_softmax_ln(xn), rtol=2e-5, atol=1e-7)
    assert sum(s["regions"] for s in st) == 8 and sum(s["fallbacks"] for s in st) == 0
    assert sum(s["realizes"] for s in st) == 8  # one svod graph per chunk
    assert all(s["searches"] <= 1 for s in st) and sum(s["searches"] for s in st) >= 1
    assert sum(s["graph_cache_hits"] + s["disk_cache_hits"] for s in st) >= 8 - sum(s["searches"] for s in st)
    # again: every chunk a cache hit, no search anywhere
    svod.dask.compute(y)
    st2 = _worker_stats(client)
    assert sum(s["searches"] for s in st2) == sum(s["searches"] for s in st)
    assert sum(s["graph_cache_hits"] for s in st2) >= sum(s["graph_cache_hits"] for s in st) + 8


def test_elementwise_chain_with_a_global_sum(client):
    _fresh(client)
    xn, x = _x(seed=1)
    total = _chain(x).sum()
    got = float(svod.dask.compute(total)[0])
    st = _worker_stats(client)
    assert got == pytest.approx(float(total.compute(scheduler="sync")), rel=1e-5)
    assert got == pytest.approx(float(_np_chain(xn).astype(np.float64).sum()), rel=1e-4)
    assert sum(s["regions"] for s in st) == 8 and sum(s["realizes"] for s in st) == 8
    assert all(s["searches"] <= 1 for s in st)


def test_blockwise_matmul(client):
    _fresh(client)
    xn, x = _x(seed=2)
    wn = np.random.default_rng(3).standard_normal((256, 128)).astype(np.float32) / 16
    bn = np.linspace(-1, 1, 128, dtype=np.float32)
    y = da.maximum(x @ da.from_array(wn) + bn, 0.0)
    got = svod.dask.compute(y)[0]
    st = _worker_stats(client)
    np.testing.assert_allclose(got, y.compute(scheduler="sync"), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, np.maximum(xn @ wn + bn, 0.0), rtol=1e-4, atol=1e-5)
    assert sum(s["regions"] for s in st) == 8 and sum(s["realizes"] for s in st) == 8
    assert all(s["searches"] <= 1 for s in st)


def test_an_op_svod_lacks_runs_with_numpy_and_one_warning(client):
    _fresh(client)
    svod.dask.region_stats(reset=True)
    xn, x = _x(seed=4)
    y = da.exp(x).map_blocks(np.sort, dtype=np.float32) * 2.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = svod.dask.compute(y)[0]
    ours = [w for w in caught if issubclass(w.category, SvodWarning)]
    assert len(ours) == 1 and "numpy.sort" in str(ours[0].message), [str(w.message) for w in caught]
    assert ours[0].filename == __file__  # the warning points at the user's line
    np.testing.assert_allclose(got, np.sort(np.exp(xn), axis=-1) * 2.0, rtol=1e-6)


def test_a_region_that_fails_on_a_worker_falls_back_per_chunk(client):
    _fresh(client)
    xn, x = _x(seed=5)
    y = (x * 2.0).astype(np.float16) + 1  # svod has no float16: found only when the chunk runs
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = svod.dask.compute(y)[0]
        deadline = time.monotonic() + 10  # the workers' warnings reach the client as events
        while not any("float16" in str(w.message) for w in caught) and time.monotonic() < deadline:
            time.sleep(0.1)
    ours = {str(w.message) for w in caught if issubclass(w.category, SvodWarning)}
    assert ours and all("ran with numpy" in m and "float16" in m for m in ours), ours
    want = (xn * 2.0).astype(np.float16) + 1
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, want)
    st = _worker_stats(client)
    assert sum(s["fallbacks"] for s in st) == sum(s["regions"] for s in st) == 8


# ----------------------------------------------------------------------------- differential, synchronous scheduler


_RNG = np.random.default_rng(7)
_XN = _RNG.standard_normal((96, 40)).astype(np.float32)
_IN = _RNG.integers(-5, 6, (96, 40)).astype(np.int32)


def _programs():
    x = da.from_array(_XN, chunks=(24, 40))
    x2 = da.from_array(_XN, chunks=(24, 20))
    xi = da.from_array(_IN, chunks=(24, 20))
    xs = da.from_array(np.where(np.abs(_XN) < 0.2, np.nan, _XN), chunks=(24, 40))
    return {
        "global_mean": x - x.mean(),
        "column_mean": x - x.mean(axis=0),
        "slice": (x[:, :17] * 2).sum(axis=1),
        "where": da.where(x > 0, x, 0.1 * x),
        "xtx": x.T @ x,
        "int_division": xi / 3,
        "int_floor_mod": (xi // 2) * 10 + xi % 3,
        "int_sum": xi.sum(axis=1),
        "int_mean": xi.mean(),
        "compare_count": (x > 0.5).sum(),
        "max_min": da.maximum(x, 0.0) + da.minimum(x, 1.0),
        "nan_max": da.maximum(xs, 0.0).max(axis=1),
        "rechunk": (x.rechunk((48, 40)) + 1).sum(axis=0),
        "softmax_2d_chunks": _softmax(x2),
        "std_var": x.std(axis=1) + x2.var(axis=0).sum(),
        "abs_pow": abs(-x) ** 2,
        "clip_round": da.round(da.clip(x, -0.5, 0.5) * 10),
        "float64": x.astype(np.float64) * np.float64(1.5),
        "f32_times_f64_scalar": x * np.float64(1.5),
        "tensordot": da.tensordot(x, x2.T, axes=1),
        "random_source": (da.random.default_rng(0).random((64, 40), chunks=(16, 40)) * 3).sum(),
    }


@pytest.mark.parametrize("name", sorted(_programs()))
def test_equals_dask_with_numpy(name):
    y = _programs()[name]
    want = y.compute(scheduler="sync")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SvodWarning)  # every program here runs on svod entirely
        got = svod.dask.compute(y, scheduler="sync")[0]
    assert np.asarray(got).dtype == np.asarray(want).dtype and np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6, equal_nan=True)


def test_a_broadcast_operand_is_one_region_read_by_every_chunk():
    """The normalised weight is computed once (its own region); each row block's matmul is a
    region of its own that reads it — not all eight pulled into the weight's region."""
    x = da.from_array(_XN, chunks=(24, 40))
    wn = np.abs(_RNG.standard_normal((40, 8))).astype(np.float32)
    w = da.from_array(wn)
    y = x @ (w / w.sum(axis=0))
    svod.dask.region_stats(reset=True)
    svod.reset_stats()
    got = svod.dask.compute(y, scheduler="sync")[0]
    assert svod.dask.region_stats()["regions"] == 5 and svod.stats()["realizes"] == 5
    np.testing.assert_allclose(got, _XN @ (wn / wn.sum(axis=0)), rtol=1e-5, atol=1e-6)


def test_a_chunk_read_by_several_ops_is_one_input_and_every_compute_hits_the_plan():
    """One graph input per chunk however many ops read it (read once, not four times), and
    every chunk and every compute build the same GraphKey: one search in all."""
    from svod import engine

    x = da.from_array(_XN, chunks=(24, 40))
    y = da.tanh(x * 0.5 + 1.0) * da.exp(-x * x) - 0.25 + da.sqrt(abs(x))
    engine.reset_caches()
    svod.reset_stats()
    engine.RECORDER = []
    try:
        for _ in range(2):
            s, m = svod.dask.compute(y.sum(), y.max(), scheduler="sync")
        keys = [r[0] if isinstance(r, tuple) else r for r in engine.RECORDER]  # (key, who realized it)
    finally:
        engine.RECORDER = None
    assert len(keys) == 8 and len({k.hash for k in keys}) == 1 and len(keys[0].inputs) == 1
    assert svod.stats()["searches"] == 1
    want = np.tanh(_XN * 0.5 + 1.0) * np.exp(-_XN * _XN) - 0.25 + np.sqrt(abs(_XN))
    assert float(s) == pytest.approx(float(want.sum()), rel=1e-5) and float(m) == float(want.max())


def test_threaded_scheduler_and_the_config_switch():
    x = da.from_array(_XN, chunks=(24, 40))
    y = _softmax(_ln(x))
    svod.reset_stats()
    with svod.dask.enabled():
        got = y.compute(scheduler="threads")
    assert svod.stats()["realizes"] == 4
    np.testing.assert_allclose(got, _np_softmax_ln(_XN), rtol=2e-5, atol=1e-7)
    svod.reset_stats()
    y.compute(scheduler="threads")  # outside the block: plain dask
    assert svod.stats()["realizes"] == 0


def test_docstring_examples():
    import doctest

    import svod._dask_chunk

    assert doctest.testmod(svod.dask).failed == 0 and doctest.testmod(svod._dask_chunk).failed == 0
