"""Library (BLAS) steps on svod's pool: `svod.codegen.blas.matmul_into` against numpy."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from svod.codegen import blas

pytestmark = pytest.mark.skipif(not blas.available(), reason="no OpenBLAS with cblas symbols in this numpy")

CASES = [  # (a shape, b shape, transpose b's storage)
    ((64, 32), (32, 48), False),
    ((3, 64, 32), (32, 48), False),  # b broadcast over the batch
    ((1, 50), (50, 1), False),
    ((100, 7), (7, 9), True),  # b read transposed in place
    ((300, 300), (300, 300), False),  # big enough for two threads
    ((5, 400, 64), (5, 64, 400), False),  # batches
    ((1000, 3), (3, 2000), False),  # wide: cut into column blocks
    ((2, 1, 130, 40), (3, 40, 70), False),  # batch axes broadcast on both sides
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sa,sb,tb", CASES)
def test_matmul_into_matches_numpy(sa, sb, tb, threads, dtype):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(sa).astype(dtype)
    b = rng.standard_normal(sb[:-2] + sb[-2:][::-1] if tb else sb).astype(dtype)
    if tb:
        b = np.swapaxes(b, -1, -2)
    want = np.matmul(a, b)
    out = np.full(want.shape, np.nan, dtype)
    if not blas.matmul_into(a, b, out, threads=threads):
        assert sa == (2, 1, 130, 40)  # a's batch (2, 1) against b's (3,): no single stride
        return
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * 10)


def test_operands_blas_cannot_read_are_left_to_numpy():
    a = np.ones((8, 6), np.float32)
    b = np.ones((12, 8), np.float32)[::2]  # (6, 8), rows 2 apart: fine
    out = np.empty((8, 8), np.float32)
    assert blas.matmul_into(a, b, out)
    np.testing.assert_array_equal(out, a @ b)
    assert not blas.matmul_into(a, np.ones((6, 16), np.float32)[:, ::2], out)  # no unit stride
    assert not blas.matmul_into(a, np.ones((6, 8), np.float32)[::-1], out)  # negative stride
    assert not blas.matmul_into(a.astype(np.int32), b.astype(np.int32), out.astype(np.int32))
    assert not blas.matmul_into(a, b, np.empty((8, 8), np.float32, order="F"))


def test_views_into_one_buffer_and_empty_products():
    flat = np.arange(200, dtype=np.float64)
    a = flat[10:10 + 6 * 5].reshape(6, 5)
    b = flat[100:100 + 5 * 4].reshape(5, 4)
    out = np.empty((6, 4))
    assert blas.matmul_into(a, b, out)
    np.testing.assert_allclose(out, a @ b)
    z = np.full((3, 4), 7.0)
    assert blas.matmul_into(np.ones((3, 0)), np.ones((0, 4)), z)
    assert (z == 0).all()  # k == 0: the sum over nothing
    assert blas.matmul_into(np.ones((0, 5)), np.ones((5, 4)), np.empty((0, 4)))


def test_openblas_thread_count_is_restored():
    lib = blas.blas()
    before = lib.get_threads()
    a = np.ones((256, 256), np.float32)
    blas.matmul_into(a, a, np.empty_like(a), threads=2)
    assert lib.get_threads() == before


def test_env_switch_leaves_library_steps_to_numpy():
    code = "from svod.codegen import blas; print(blas.available())"
    env = {**os.environ, "SVOD_BLAS_THREADS": "openblas"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.strip() == "False"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_fork_child_runs_library_steps():
    a = np.random.default_rng(1).standard_normal((200, 300)).astype(np.float32)
    b = np.random.default_rng(2).standard_normal((300, 250)).astype(np.float32)
    out = np.empty((200, 250), np.float32)
    assert blas.matmul_into(a, b, out)  # the parent has the binding and a pool
    pid = os.fork()
    if pid == 0:  # the child: the same product on its own pool
        ok = False
        try:
            o2 = np.empty_like(out)
            ok = blas.matmul_into(a, b, o2) and bool(np.allclose(o2, a @ b, rtol=1e-4, atol=1e-3))
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


GEMV_CASES = [  # (a, b) builders: matrix-vector and vector-matrix products, odd sizes, strides
    lambda r, d: (r((997, 1503), d), r((1503, 1), d)),  # A x: bands of A's rows
    lambda r, d: (r((1503, 997), d).T, r((1503, 1), d)),  # A stored transposed: bands of its columns
    lambda r, d: (r((997, 1503), d), r((3006, 1), d)[::2]),  # x with stride 2
    lambda r, d: (r((1, 1503), d), r((1503, 997), d)),  # x B
    lambda r, d: (r((1, 1503), d), r((997, 1503), d).T),  # x B, B stored transposed
    lambda r, d: (r((2, 1503), d)[:1, :], r((1503, 331), d)),  # x a row of a bigger matrix
    lambda r, d: (r((4, 600, 700), d), r((4, 700, 1), d)),  # batched A x
    lambda r, d: (r((600, 700), d), r((3, 700, 1), d)),  # A broadcast over the batch
    lambda r, d: (r((3, 1, 700), d), r((3, 700, 500), d)),  # batched x B
    lambda r, d: (r((1, 5000), d), r((5000, 1), d)),  # a dot product
    lambda r, d: (r((33, 17), d), r((17, 1), d)),  # small: one call on the calling thread
    lambda r, d: (r((1031, 1333), d).T, r((3093, 1), d)[::3]),  # Aᵀ x, odd sizes, x with stride 3: row split
    lambda r, d: (r((4, 700, 500), d).transpose(0, 2, 1), r((4, 700, 1), d)),  # batched Aᵀ x: row split
    lambda r, d: (r((700, 500), d).T, r((3, 700, 1), d)),  # Aᵀ broadcast over the batch: row split
    lambda r, d: (r((1, 200), d), r((200, 3000), d)),  # x B with few rows: output bands
    lambda r, d: (r((1, 260), d), r((260, 4001), d)),  # x B, just two bands of rows
    lambda r, d: (r((300, 300), d).T, r((300, 1), d)),  # small Aᵀ x: one call
    lambda r, d: (r((7, 300001), d), r((300001, 1), d)),  # short A x: bands of A's columns
    lambda r, d: (r((1, 100003), d), r((20, 100003), d).T),  # short x Bᵀ: bands of B's columns
    lambda r, d: (r((3, 16, 50001), d), r((3, 50001, 1), d)),  # batched short A x
    lambda r, d: (r((9, 200000), d), r((600000, 1), d)[::3]),  # short A x, x with stride 3
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("case", range(len(GEMV_CASES)))
def test_matrix_vector_products_run_as_gemv_and_match_numpy(case, threads, dtype):
    rng = np.random.default_rng(case)

    def r(shape, d):
        return rng.standard_normal(shape).astype(d)

    a, b = GEMV_CASES[case](r, dtype)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    out = np.full(want.shape, np.nan, dtype)
    assert blas.matmul_into(a, b, out, threads=threads)
    plan = blas._plan(a.shape, a.strides, b.shape, b.strides, out.shape, a.dtype.char, b.dtype.char,
                      out.dtype.char, threads)
    assert plan[4] in ("a", "b")  # the gemv path, not gemm with one column
    tol = 1e-4 if dtype == np.float32 else 1e-11
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.sqrt(a.shape[-1]))


def test_gemv_bands_cover_the_output_once():
    a = np.ones((4000, 5000), np.float32)
    x = np.ones((5000, 1), np.float32)
    ctx, units, nt, tiny, which, split = blas._plan(a.shape, a.strides, x.shape, x.strides, (4000, 1), "f", "f",
                                                    "f", 2)
    assert which == "a" and units == nt == 2 and not tiny and split is None
    assert ctx[blas.G_PARTS] * ctx[blas.G_BLOCK] >= 4000 and ctx[blas.G_BLOCK] % blas.ALIGN == 0
    out = np.full((4000, 1), np.nan, np.float32)
    assert blas.matmul_into(a, x, out, threads=2)
    assert np.all(out == 5000)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_svod_matrix_vector_products_end_to_end(dtype):
    import svod

    rng = np.random.default_rng(4)
    A = rng.standard_normal((1201, 2047)).astype(dtype)
    x = rng.standard_normal(2047).astype(dtype)
    y = rng.standard_normal(1201).astype(dtype)
    B = rng.standard_normal((3, 1201, 2047)).astype(dtype)
    tA, tx, ty, tB = (svod.asarray(v) for v in (A, x, y, B))
    tol = 1e-4 if dtype == np.float32 else 1e-11
    for got, want in ((tA @ tx, A @ x), (ty @ tA, y @ A), (tA.T @ ty, A.T @ y), (tB @ tx, B @ x),
                      (tx @ tA.T, x @ A.T)):
        g = got.numpy()
        assert g.dtype == dtype and g.shape == want.shape
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol * 50)


def _plan_of(a, b, out, threads):
    return blas._plan(a.shape, a.strides, b.shape, b.strides, out.shape, a.dtype.char, b.dtype.char,
                      out.dtype.char, threads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_gemv_splits_by_rows_of_the_matrix(dtype):
    rng = np.random.default_rng(7)
    A = rng.standard_normal((2500, 1200)).astype(dtype)  # stored rows x cols
    x = rng.standard_normal((2500, 1)).astype(dtype)
    for threads in (1, 2, 4):
        # Aᵀ x and x A read A along its rows: bands of rows, partials, combine
        for a, b, out in ((A.T, x, np.empty((1200, 1), dtype)), (x.T, A, np.empty((1, 1200), dtype))):
            ctx, units, nt, tiny, which, split = _plan_of(a, b, out, threads)
            assert split is not None and not tiny
            parts, block = ctx[blas.R_PARTS], ctx[blas.R_BLOCK]
            assert units == parts >= 2 and block >= blas.MIN_BAND_ROWS and block % blas.ALIGN == 0
            assert (parts - 1) * block < 2500 <= parts * block  # every row in exactly one band
            assert split[1] == parts * blas._pstride(1200, A.itemsize) * A.itemsize <= blas.SCRATCH_MAX
            assert "row split" in blas.gemv_split(a, b, out, threads)
        # A x and x Aᵀ are dot products of A's rows: output bands
        B = A[:1200, :1000]
        out = np.empty((1200, 1), dtype)
        assert _plan_of(B, x[:1000], out, threads)[5] is None
        assert "output bands" in blas.gemv_split(B, x[:1000], out, threads)
        # A x with fewer rows than SHORT_OUTPUT: bands of A's columns (long runs of each row)
        short = rng.standard_normal((10, 120000)).astype(dtype)
        xs = rng.standard_normal((120000, 1)).astype(dtype)
        out = np.empty((10, 1), dtype)
        ctx, units, nt, tiny, which, split = _plan_of(short, xs, out, threads)
        assert split is not None and ctx[blas.R_TRANS] == blas.NO_TRANS and ctx[blas.R_BLOCK] >= blas.MIN_BAND_COLS
        assert (ctx[blas.R_PARTS] - 1) * ctx[blas.R_BLOCK] < 120000 <= ctx[blas.R_PARTS] * ctx[blas.R_BLOCK]
        assert "column split" in blas.gemv_split(short, xs, out, threads)
        # under SMALL_FLOPS one thread runs it, for any thread count: one call, no partials
        small = A[:300, :300]
        out = np.empty((300, 1), dtype)
        assert _plan_of(small.T, x[:300], out, threads)[5] is None
        assert blas.gemv_split(small.T, x[:300], out, threads) == "output bands: 1 of 300, 1 thread"


def test_row_split_bands_do_not_depend_on_threads_and_respect_the_scratch_bound(monkeypatch):
    for rows, out_len, batch, item in ((5000, 4000, 1, 4), (5000, 4000, 3, 8), (129, 7, 1, 4), (100000, 3, 1, 8)):
        bands = blas._row_bands(rows, out_len, batch, item)
        if rows < 2 * blas.MIN_BAND_ROWS:
            assert bands is None
            continue
        parts, block = bands
        assert 2 <= parts <= blas.MAX_BANDS and (parts - 1) * block < rows <= parts * block
        assert batch * parts * blas._pstride(out_len, item) * item <= blas.SCRATCH_MAX
    assert blas._row_bands(5000, 3_000_000, 1, 4) is None  # two partials would pass SCRATCH_MAX
    # with a small bound, a real product falls back to output bands and stays right
    monkeypatch.setattr(blas, "SCRATCH_MAX", 4096)
    blas._plan.cache_clear()
    try:
        rng = np.random.default_rng(8)
        A = rng.standard_normal((3000, 2000)).astype(np.float32)
        x = rng.standard_normal((3000, 1)).astype(np.float32)
        out = np.empty((2000, 1), np.float32)
        assert _plan_of(A.T, x, out, 2)[5] is None
        assert blas.matmul_into(A.T, x, out, threads=2)
        np.testing.assert_allclose(out, A.T.astype(np.float64) @ x, rtol=1e-4, atol=1e-3)
    finally:
        monkeypatch.undo()
        blas._plan.cache_clear()


def test_scratch_pool_is_bounded_and_aligned():
    pool = blas._ScratchPool(keep=2)
    bufs = [pool.take(n) for n in (1000, 5000, 3000, 100)]
    assert all(b.ctypes.data % 64 == 0 and b.nbytes == n for b, n in zip(bufs, (1000, 5000, 3000, 100)))
    for b in bufs:
        pool.give(b)
    assert len(pool.free) == 2 and sorted(b.nbytes for b in pool.free) == [3000, 5000]
    assert pool.take(4000).nbytes == 5000  # a kept buffer that is big enough is reused


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_gemv_is_bit_identical_run_to_run_and_across_thread_counts(dtype):
    rng = np.random.default_rng(9)
    A = rng.standard_normal((3001, 1500)).astype(dtype)
    x = rng.standard_normal((3001, 1)).astype(dtype)
    results = []
    S = rng.standard_normal((5, 400001)).astype(dtype)
    xs = rng.standard_normal((400001, 1)).astype(dtype)
    short = []
    for threads in (1, 2, 3, 4, 1, 2):
        out = np.empty((1500, 1), dtype)
        assert blas.matmul_into(A.T, x, out, threads=threads)
        results.append(out)
        out = np.empty((5, 1), dtype)
        assert blas.matmul_into(S, xs, out, threads=threads)
        short.append(out)
    assert _plan_of(A.T, x, results[0], 2)[5] is not None  # the row split ran
    assert _plan_of(S, xs, short[0], 2)[5] is not None  # the column split ran
    for r in results[1:]:
        assert r.tobytes() == results[0].tobytes()
    for r in short[1:]:
        assert r.tobytes() == short[0].tobytes()
    np.testing.assert_allclose(short[0], S.astype(np.float64) @ xs, rtol=1e-4 if dtype == np.float32 else 1e-11,
                               atol=1e-2 if dtype == np.float32 else 1e-9)
    np.testing.assert_allclose(results[0], A.T.astype(np.float64) @ x, rtol=1e-4 if dtype == np.float32 else 1e-11,
                               atol=1e-3 if dtype == np.float32 else 1e-10)


def test_gemv_results_are_the_same_bits_for_any_pool_size():
    """SVOD_THREADS sets the pool per process: the default thread count of each product."""
    code = """if 1:
        import hashlib, numpy as np
        from svod.codegen import blas
        rng = np.random.default_rng(10)
        h = hashlib.sha256()
        for dt in (np.float32, np.float64):
            A = rng.standard_normal((2600, 1100)).astype(dt)
            x = rng.standard_normal((2600, 1)).astype(dt)
            S = rng.standard_normal((12, 90000)).astype(dt)
            xs = rng.standard_normal((90000, 1)).astype(dt)
            for a, b, shape in ((A.T, x, (1100, 1)), (x.T, A, (1, 1100)), (A[:1100, :900], x[:900], (1100, 1)),
                                (S, xs, (12, 1))):
                out = np.empty(shape, dt)
                assert blas.matmul_into(a, b, out)
                h.update(out.tobytes())
        print(h.hexdigest())
    """
    root = os.path.dirname(os.path.dirname(__file__))
    digests = set()
    for threads in ("1", "2"):
        env = {**os.environ, "SVOD_THREADS": threads}
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root,
                             timeout=300)
        assert run.returncode == 0, run.stderr
        digests.add(run.stdout.strip())
    assert len(digests) == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_gemv_with_nan_and_inf_rows_matches_numpy(dtype, threads):
    rng = np.random.default_rng(11)
    A = rng.standard_normal((1500, 700)).astype(dtype)
    x = rng.standard_normal((1500, 1)).astype(dtype)
    A[10, :] = np.nan  # a NaN row: every output of Aᵀ x is NaN
    A[200, 5] = np.inf  # one +inf: column 5 of Aᵀ x is ±inf by x[200]'s sign
    A[900, 6], A[1400, 6] = np.inf, -np.inf  # inf - inf: NaN whatever the order
    x[1300] = 0.0
    A[1300, 8] = np.inf  # 0 x inf: NaN
    S = rng.standard_normal((6, 200000)).astype(dtype)
    xs = rng.standard_normal((200000, 1)).astype(dtype)
    S[2, :] = np.nan  # a NaN row: output 2 is NaN
    S[3, 100], S[3, 150000] = np.inf, -np.inf  # inf - inf in different bands of columns: NaN
    S[4, 77] = -np.inf  # -inf x x[77]
    xs[5000] = np.inf  # +inf x S[:, 5000]: ±inf where finite, NaN with row 2
    for a, b in ((A.T, x), (x.T, A), (A[:700, :], x[:700]), (x[:700].T, A[:700, :].T), (S, xs), (xs.T, S.T)):
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        out = np.full(want.shape, 7.0, dtype)
        assert blas.matmul_into(a, b, out, threads=threads)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(out), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(out), np.isneginf(want))
        fin = np.isfinite(want)
        tol = 1e-4 if dtype == np.float32 else 1e-11
        np.testing.assert_allclose(out[fin], want[fin], rtol=tol, atol=tol * 30)


def test_row_split_from_several_python_threads_at_once():
    """Each call takes its own scratch (the pool keeps two; more are allocated) and the
    same bits come out as from one thread."""
    import threading

    rng = np.random.default_rng(12)
    A = rng.standard_normal((2048, 1024)).astype(np.float32)
    xs = [rng.standard_normal((2048, 1)).astype(np.float32) for _ in range(4)]
    want = []
    for x in xs:
        out = np.empty((1024, 1), np.float32)
        assert blas.matmul_into(A.T, x, out, threads=2)
        want.append(out)
    assert _plan_of(A.T, xs[0], want[0], 2)[5] is not None
    got = [[] for _ in xs]
    errors = []

    def work(i):
        try:
            for _ in range(20):
                out = np.empty((1024, 1), np.float32)
                assert blas.matmul_into(A.T, xs[i], out, threads=2)
                got[i].append(out)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(4):
        assert len(got[i]) == 20 and all(g.tobytes() == want[i].tobytes() for g in got[i])
    assert len(blas._SCRATCH.free) <= blas._SCRATCH.keep
