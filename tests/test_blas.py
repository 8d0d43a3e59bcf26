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
