"""Bare products (a matmul with no elementwise epilogue): the BLAS step or svod's generated
GEMM, chosen by price (`svod.costing.bare_matmul_choice`, svod/lower/build.py). Both forms
against numpy (odd shapes, transposed operands, float32/float64, batches, NaN/inf), the
rules of the choice on fixed machines, the plan switch, and the choice in `svod.explain`."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod import costing
from svod.dtype import float32, float64, int32
from svod.kernel import ACC, Kernel, KInput, KNode, KOutput, MatmulSpec
from svod.view import ViewChain

AVX512 = costing.Machine(name="avx512", cores=2, vector_bits=512)
AVX2 = costing.Machine(name="avx2", cores=2, vector_bits=256, flops_per_core=costing.Machine.flops_per_core / 2)


def _kernel(m: int, k: int, n: int, dt=float32, batch: int = 1) -> Kernel:
    lead = (batch,) if batch > 1 else ()
    return Kernel("mm", lead + (m, n), (KInput(0, dt, ViewChain.of(lead + (m, k))),
                                        KInput(1, dt, ViewChain.of(lead + (k, n)))),
                  (KNode(ACC, dt),), (KOutput(2, 0, dt, lead + (m, n)),), (), MatmulSpec(0, 1, m, n, k, library=True))


def test_choice_follows_the_prices_on_a_measured_host():
    """On an AVX-512 host: the mid-size products where the GEMM measured 1.05-1.2x OpenBLAS
    per core run as the GEMM, and so do large ones (A read in place: 1.01-1.12x per core,
    `costing.BLAS_LARGE_RATE`); a badly padded one, matrix-vector products, tiny ones and
    non-float ones stay BLAS."""
    for shape in ((512, 256, 512), (512, 64, 512), (2048, 768, 768)):
        for dt in (float32, float64):
            lib, why = costing.bare_matmul_choice(_kernel(*shape, dt), AVX512)
            assert not lib and why.startswith("generated GEMM priced"), (shape, dt, why)
    assert costing.bare_matmul_choice(_kernel(64, 512, 512), AVX512)[0]
    assert "matrix-vector" in costing.bare_matmul_choice(_kernel(1, 4096, 4096), AVX512)[1]
    assert "matrix-vector" in costing.bare_matmul_choice(_kernel(4096, 4096, 1), AVX512)[1]
    assert "flops" in costing.bare_matmul_choice(_kernel(16, 16, 16), AVX512)[1]
    assert "int32" in costing.bare_matmul_choice(_kernel(512, 256, 512, int32), AVX512)[1]
    # the price, not a shape list: the choice is the cheaper of the two priced forms
    for shape in ((300, 200, 100), (129, 67, 301), (1000, 100, 1000)):
        k = _kernel(*shape)
        lib, _ = costing.bare_matmul_choice(k, AVX512)
        g = costing.price_matmul(Kernel(k.name, k.shape, k.inputs, k.nodes, k.outputs, (),
                                        MatmulSpec(0, 1, shape[0], shape[2], shape[1])), AVX512).seconds
        b = costing.price_matmul(k, AVX512).seconds
        assert lib == (b <= g), (shape, g, b)


def test_narrow_hosts_and_the_switch_keep_the_blas_step(monkeypatch):
    """Not measured on AVX2 hosts (the snapshot's reference host): BLAS there; and
    SVOD_BARE_GEMM=0 keeps every bare product on BLAS (a plan switch: in the plan key)."""
    lib, why = costing.bare_matmul_choice(_kernel(512, 256, 512), AVX2)
    assert lib and "256-bit" in why
    monkeypatch.setenv("SVOD_BARE_GEMM", "0")
    assert costing.bare_matmul_choice(_kernel(512, 256, 512), AVX512) == (True, "SVOD_BARE_GEMM=0")
    from svod.flags import plan_switches

    assert "+SVOD_BARE_GEMM=0" in plan_switches()
    monkeypatch.delenv("SVOD_BARE_GEMM")
    assert "SVOD_BARE_GEMM" not in plan_switches()


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A private plan store and empty in-memory caches (plans made under a patched choice
    must not leak into other tests), restored after."""
    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    svod.reset()
    yield monkeypatch
    svod.reset()


CASES = [  # (a shape, b shape, transpose a, transpose b)
    ((129, 67), (67, 301), False, False),
    ((257, 130), (130, 99), True, False),  # A read transposed
    ((200, 96), (96, 170), False, True),  # B read transposed (x @ w.T)
    ((131, 77), (77, 203), True, True),
    ((3, 70, 90), (90, 110), False, False),  # batched, B broadcast over the batch
    ((2, 1, 130, 40), (3, 40, 70), False, False),  # batch axes broadcast on both sides
    ((4, 65, 33), (4, 33, 129), False, True),
]


def _operands(sa, sb, ta, tb, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(sa[:-2] + sa[-2:][::-1] if ta else sa).astype(dtype)
    b = rng.standard_normal(sb[:-2] + sb[-2:][::-1] if tb else sb).astype(dtype)
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    return a, b


def _run(a, b, ta, tb):
    A = svod.asarray(np.ascontiguousarray(np.swapaxes(a, -1, -2))) if ta else svod.asarray(a)
    B = svod.asarray(np.ascontiguousarray(np.swapaxes(b, -1, -2))) if tb else svod.asarray(b)
    A = svod.matrix_transpose(A) if ta else A
    B = svod.matrix_transpose(B) if tb else B
    t = A @ B
    kinds = [k.kind for k in svod.explain(t).plan.kernels]
    return t.numpy(), kinds


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("form", ["gemm", "blas"])
def test_bare_products_match_numpy_in_both_forms(fresh, form, dtype):
    """Each case through the generated GEMM (the choice patched to it) and through the
    BLAS step (SVOD_BARE_GEMM=0): numpy's result, and the plan runs the form asked for."""
    import svod.lower.build as build

    if form == "gemm":
        fresh.setattr(build, "bare_matmul_choice", lambda k, machine=None: (False, "test: the GEMM"))
    else:
        fresh.setenv("SVOD_BARE_GEMM", "0")
    tol = dict(rtol=2e-4, atol=2e-4) if dtype == np.float32 else dict(rtol=1e-11, atol=1e-11)
    for i, (sa, sb, ta, tb) in enumerate(CASES):
        a, b = _operands(sa, sb, ta, tb, dtype, i)
        got, kinds = _run(a, b, ta, tb)
        want = np.matmul(a, b)
        assert got.dtype == want.dtype and got.shape == want.shape, (sa, sb)
        np.testing.assert_allclose(got, want, **tol, err_msg=f"{form} {sa} @ {sb} ta={ta} tb={tb}")
        assert kinds.count("matmul" if form == "gemm" else "blas") == 1, (form, sa, sb, kinds)


@pytest.mark.parametrize("form", ["gemm", "blas"])
def test_nan_and_inf_as_numpy(fresh, form):
    """NaN and ±inf propagate as numpy's matmul (inf·0 is NaN, inf − inf is NaN)."""
    import svod.lower.build as build

    if form == "gemm":
        fresh.setattr(build, "bare_matmul_choice", lambda k, machine=None: (False, "test: the GEMM"))
    else:
        fresh.setenv("SVOD_BARE_GEMM", "0")
    rng = np.random.default_rng(9)
    a = rng.standard_normal((97, 80)).astype(np.float32)
    b = rng.standard_normal((80, 150)).astype(np.float32)
    a[3, 5], a[10, 7], a[20, :] = np.nan, np.inf, 0.0
    b[7, 9], b[5, 11], b[:, 30] = 0.0, -np.inf, 0.0
    a[50, 1], b[1, 60] = np.inf, np.inf
    a[50, 2], b[2, 60] = np.inf, -np.inf  # inf - inf in one dot product
    got, kinds = _run(a, b, False, False)
    assert kinds.count("matmul" if form == "gemm" else "blas") == 1, kinds
    with np.errstate(invalid="ignore"):
        want = a @ b
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got) & (got > 0), np.isinf(want) & (want > 0))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=2e-4, atol=2e-4)


def test_explain_names_each_bare_products_step_and_why(fresh):
    """`svod.explain` lists each product without an epilogue, the step that runs it and the
    reason: the same as `bare_matmul_choice` on this host, and the plan runs that step."""
    rng = np.random.default_rng(3)
    x = svod.asarray(rng.standard_normal((512, 256)).astype(np.float32))
    w = svod.asarray(rng.standard_normal((512, 256)).astype(np.float32))
    v = svod.asarray(rng.standard_normal(256).astype(np.float32))
    for t in (x @ svod.matrix_transpose(w), x @ v):
        e = svod.explain(t)
        lines = e.bare_products()
        assert len(lines) == 1, lines
        (k,) = [k for k in e.plan.kernels if costing.is_bare_matmul(k)]
        lib, why = costing.bare_matmul_choice(k)
        assert k.matmul.library == lib
        assert lines[0].endswith(f"{'BLAS step' if lib else 'generated GEMM'} ({why})")
        assert "products without an epilogue" in str(e) and why in str(e)
    assert "matrix-vector" in svod.explain(x @ v).bare_products()[0]
    # an epilogue: the product is computed in its kernel, no bare-product line
    assert svod.explain(svod.exp(x @ svod.matrix_transpose(w))).bare_products() == []
