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
    ctx, units, nt, tiny, which = blas._plan(a.shape, a.strides, x.shape, x.strides, (4000, 1), "f", "f", "f", 2)
    assert which == "a" and units == nt == 2 and not tiny
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
