"""The generated GEMM (svod/codegen/gemm.py): packed panels, register-blocked micro-kernel,
fused epilogues — against a float64 numpy reference within numpy's own error bound.

Two routes in: hand-built `Kernel`s (every matmul form the Kernel spec allows: batch
broadcasting, transposed and padded operand views, multi-output and non-float outputs),
and the frontend (`@` on Tensors, planned with every matmul fused into its consumer, as
the search's "matmul with fused epilogue" variant) so the views are the engine's own.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import svod
from svod.codegen.program import compile_kernel
from svod.codegen.schedule import gemm_config, plan_gemm, split_tiles
from svod.costing import Machine, RooflineModel, bare_matmul_choice
from svod.dtype import bool_, float32, float64
from svod.ir import Ops
from svod.kernel import ACC, LOAD, Kernel, KInput, KNode, KOutput, MatmulSpec
from svod.key import compact
from svod.lower import initial_materialized, lower
from svod.view import View, ViewChain
from tests.programs import programs

SIZES = [0, 1, 2, 5, 6, 7, 13, 16, 17, 33, 64, 129]
EPILOGUES = ["none", "bias", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "residual", "scale"]


def _rng(seed=0):
    return np.random.default_rng(seed)


# ----------------------------------------------------------------------------- reference and bound


def _gelu_np(z):
    from math import erf

    return 0.5 * z * (1 + np.vectorize(erf)(z / math.sqrt(2))) if z.size else z


def _gelu_tanh_np(z):
    return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3)))


# epilogue name -> (float64 reference, svod) on (y, bias, res); None for "none"
_EPILOGUES = {
    "bias": (lambda y, b, r: y + b, lambda y, b, r: y + b),
    "relu": (lambda y, b, r: np.maximum(y + b, 0), lambda y, b, r: svod.nn.relu(y + b)),
    "gelu": (lambda y, b, r: _gelu_np(y + b), lambda y, b, r: svod.nn.gelu(y + b)),
    "gelu_tanh": (lambda y, b, r: _gelu_tanh_np(y + b), lambda y, b, r: svod.nn.gelu(y + b, approximate="tanh")),
    "sigmoid": (lambda y, b, r: 1 / (1 + np.exp(-(y + b))), lambda y, b, r: svod.nn.sigmoid(y + b)),
    "tanh": (lambda y, b, r: np.tanh(y + b), lambda y, b, r: svod.tanh(y + b)),
    "residual": (lambda y, b, r: y + r, lambda y, b, r: y + r),
    "scale": (lambda y, b, r: y * 0.125, lambda y, b, r: y * 0.125),
}


def _epilogue_np(name: str, y: np.ndarray, bias: np.ndarray, res: np.ndarray) -> np.ndarray:
    """The epilogue in float64 (the reference)."""
    return y if name == "none" else _EPILOGUES[name][0](y, bias, res)


def _epilogue_svod(name: str, y, bias, res):
    return y if name == "none" else _EPILOGUES[name][1](y, bias, res)


def assert_within_bound(got, a, b, dtype, epilogue="none", bias=None, res=None, what=""):
    """|got - ref| <= the classic dot-product bound (k+4)·eps·(|A|@|B|), carried through the
    epilogue (every epilogue here is at most 1.13-Lipschitz, scaling 0.125) plus the
    epilogue's own few ulps — the bound numpy's float32 BLAS result satisfies too."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[-1]
    y = np.matmul(a64, b64)
    mag = np.matmul(np.abs(a64), np.abs(b64))
    bias = np.zeros(y.shape[-1]) if bias is None else bias.astype(np.float64)
    res = np.zeros_like(y) if res is None else res.astype(np.float64)
    want = _epilogue_np(epilogue, y, bias, res)
    eps = np.finfo(dtype).eps
    lip = 0.125 if epilogue == "scale" else 1.13
    tol = 2 * (k + 4) * eps * (mag * lip + np.abs(bias) + np.abs(res)) + 16 * eps * np.abs(want)
    tol += 8 * np.finfo(dtype).tiny
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert got.dtype == dtype, (what, got.dtype)
    err = np.abs(got.astype(np.float64) - want)
    bad = ~(err <= tol)
    assert not bad.any(), f"{what}: max err {err.max()} > tol at {np.argwhere(bad)[:3].tolist()}"


# ----------------------------------------------------------------------------- running plans


def run_fused(outs, threads: int = 2):
    """Plan `outs` with every matmul fused into its consumer (the generated GEMM), compile
    and run every kernel; returns (outputs, plan)."""
    key, bind = compact([o.uop for o in outs])
    plan = lower(key, initial_materialized(key))
    plan.check()
    bufs = {i: np.ascontiguousarray(x).reshape(-1) for i, x in enumerate(bind.arrays)}
    for k in plan.kernels:
        for o in k.outputs:
            bufs.setdefault(o.slot, np.empty(int(np.prod(o.shape)), o.dtype.np))
        compile_kernel(k).run(bufs, threads)
    return [bufs[s].reshape(sh).copy() for s, sh in plan.outputs], plan


def run_kernel(k: Kernel, ins: list[np.ndarray], threads: int = 2) -> dict:
    k.check()
    bufs = {i: np.ascontiguousarray(x).reshape(-1) for i, x in enumerate(ins)}
    for o in k.outputs:
        bufs[o.slot] = np.full(int(np.prod(o.shape)), 7, o.dtype.np)  # garbage: must be overwritten
    compile_kernel(k).run(bufs, threads)
    return bufs


# ----------------------------------------------------------------------------- frontend route


@st.composite
def matmul_cases(draw):
    dt = draw(st.sampled_from([np.float32, np.float64]))
    m, k, n = (draw(st.sampled_from(SIZES)) for _ in range(3))
    nbatch = draw(st.integers(0, 2))
    ba = tuple(draw(st.sampled_from([1, 2, 3])) for _ in range(nbatch))
    # broadcast: each batch dim of B is the same as A's, or 1 (or A's is 1)
    bb = tuple(draw(st.sampled_from([x, 1])) for x in ba)
    if nbatch and draw(st.booleans()):
        ba, bb = bb, ba
    if nbatch and draw(st.booleans()):
        bb = bb[1:]  # fewer batch dims on one side
    ta, tb = draw(st.booleans()), draw(st.booleans())
    epi = draw(st.sampled_from(EPILOGUES))
    return dt, m, k, n, ba, bb, ta, tb, epi


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matmul_cases())
def test_hypothesis_fused_matmul_matches_float64_reference(case):
    dt, m, k, n, ba, bb, ta, tb, epi = case
    rng = _rng(m * 1000 + k * 10 + n)
    # a transposed operand is stored (..., k, m) and viewed through .mT: a strided view
    a_store = rng.standard_normal(ba + ((k, m) if ta else (m, k))).astype(dt)
    b_store = rng.standard_normal(bb + ((n, k) if tb else (k, n))).astype(dt)
    bias = rng.standard_normal(n).astype(dt)
    out_batch = np.broadcast_shapes(ba, bb)
    res = rng.standard_normal(out_batch + (m, n)).astype(dt)
    A, B, Bias, Res = (svod.asarray(x) for x in (a_store, b_store, bias, res))
    A = A.mT if ta else A
    B = B.mT if tb else B
    y = _epilogue_svod(epi, A @ B, Bias, Res)
    (got,), plan = run_fused([y])
    kinds = [kk.kind for kk in plan.kernels]
    products = [kk for kk in plan.kernels if kk.kind in ("matmul", "blas")]
    if got.size:
        assert len(products) == 1, kinds
        if epi != "none":
            assert products[0].kind == "matmul", kinds
        else:  # a bare product: the BLAS step or the generated GEMM, whichever is priced cheaper
            library, why = bare_matmul_choice(products[0])
            assert products[0].kind == ("blas" if library else "matmul"), (kinds, why)
    a = np.swapaxes(a_store, -1, -2) if ta else a_store
    b = np.swapaxes(b_store, -1, -2) if tb else b_store
    uses_bias = epi in ("bias", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh")
    assert_within_bound(got, a, b, dt, epi, bias if uses_bias else None, res if epi == "residual" else None,
                        what=str(case))


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 7, 7), (129, 129, 129), (1000, 7, 129), (7, 1000, 1),
                                   (1, 1000, 7), (129, 600, 1000), (0, 5, 7), (5, 0, 7), (5, 7, 0), (0, 0, 0)])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_odd_and_empty_sizes(m, k, n, dt):
    rng = _rng(1)
    a = rng.standard_normal((m, k)).astype(dt)
    b = rng.standard_normal((k, n)).astype(dt)
    bias = rng.standard_normal(n).astype(dt)
    A, B, Bias = (svod.asarray(x) for x in (a, b, bias))
    (got,), plan = run_fused([svod.nn.relu(A @ B + Bias)])
    assert_within_bound(got, a, b, dt, "relu", bias, what=f"{m}x{k}x{n}")


@pytest.mark.parametrize("k", [1, 15, 16, 17, 47, 300, 800])
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_transposed_b_pack_blocks_and_tails(k, dt):
    """x @ w.T: B's k axis contiguous, packed VW x VW blocks at a time through an
    in-register transpose; k tails, a partial last panel and a K split across blocks
    (k = 800 > KC) must all land where the plain pack puts them."""
    cfg = gemm_config(np.dtype(dt).itemsize)
    m, n = 2 * cfg.mr + 3, 3 * cfg.nr + 5
    rng = _rng(k)
    x = rng.standard_normal((m, k)).astype(dt)
    w = rng.standard_normal((n, k)).astype(dt)
    (got,), plan = run_fused([svod.asarray(x) @ svod.asarray(w).T * 0.125])
    assert [kk.kind for kk in plan.kernels] == ["matmul"]
    assert_within_bound(got, x, w.T, dt, "scale", what=f"{m}x{k}x{n}")


def test_empty_batch():
    a = np.ones((0, 3, 4), np.float32)
    b = np.ones((4, 5), np.float32)
    (got,), _ = run_fused([svod.asarray(a) @ svod.asarray(b) * 2.0])
    assert got.shape == (0, 3, 5)


def test_attention_scores_and_values():
    """q @ kᵀ (a transposed B through a permute view), softmax, @ v — batched heads."""
    rng = _rng(2)
    q, kk, v = (rng.standard_normal((2, 3, 37, 16)).astype(np.float32) for _ in range(3))
    Q, K, V = (svod.asarray(x) for x in (q, kk, v))
    s = (Q @ K.transpose(0, 1, 3, 2)) * 0.125
    (got_s,), plan = run_fused([s])
    assert [x.kind for x in plan.kernels] == ["matmul"]
    assert_within_bound(got_s, q, np.swapaxes(kk, -1, -2), np.float32, "scale")
    p = rng.random((2, 3, 37, 37)).astype(np.float32)
    (got_o,), _ = run_fused([svod.asarray(p) @ V + 1.0])
    assert_within_bound(got_o, p, v, np.float32, "bias", np.ones(16, np.float32))


def test_vector_operands():
    rng = _rng(3)
    a = rng.standard_normal((9, 300)).astype(np.float32)
    x = rng.standard_normal(300).astype(np.float32)
    (got,), _ = run_fused([svod.tanh(svod.asarray(a) @ svod.asarray(x) + 0.0)])
    assert_within_bound(got[:, None], a, x[:, None], np.float32, "tanh", np.zeros(1), what="matvec")
    (got2,), _ = run_fused([svod.asarray(x) @ svod.asarray(a.T.copy()) * 0.125])
    assert_within_bound(got2[None], x[None], a.T, np.float32, "scale", what="vecmat")


def test_mlp_block_matches_numpy():
    rng = _rng(4)
    x = rng.standard_normal((64, 96)).astype(np.float32)
    w1 = (rng.standard_normal((96, 256)) / 10).astype(np.float32)
    b1 = rng.standard_normal(256).astype(np.float32)
    w2 = (rng.standard_normal((256, 80)) / 16).astype(np.float32)
    b2 = rng.standard_normal(80).astype(np.float32)
    X, W1, B1, W2, B2 = (svod.asarray(t) for t in (x, w1, b1, w2, b2))
    (got,), plan = run_fused([svod.nn.gelu(X @ W1 + B1) @ W2 + B2])
    # the fused MLP kind (search/kinds.py): two row blocks, no weight packed more often than
    # by the two GEMMs; measured 157-167 us a call against 180-274 for the two GEMMs
    assert [k.kind for k in plan.kernels] == ["mlp"]
    h = _epilogue_np("gelu", x.astype(np.float64) @ w1.astype(np.float64), b1.astype(np.float64), None)
    want = h @ w2 + b2
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


# ----------------------------------------------------------------------------- kernel route


def _mm_kernel(dt, batch, m, k, n, a_view=None, b_view=None, nodes=None, outputs=None, extra=()):
    d = dt
    shape = batch + (m, n)
    a_view = a_view or ViewChain.of(batch + (m, k))
    b_view = b_view or ViewChain.of(batch + (k, n))
    ins = (KInput(0, d, a_view), KInput(1, d, b_view)) + tuple(extra)
    nodes = nodes or (KNode(ACC, d),)
    nin = len(ins)
    outputs = outputs or (KOutput(nin, len(nodes) - 1, d, shape),)
    return Kernel("mm_test", shape, ins, tuple(nodes), tuple(outputs), (), MatmulSpec(0, 1, m, n, k))


@pytest.mark.parametrize("dt", [float32, float64])
def test_multiple_k_blocks_with_a_bool_output_use_scratch_partials(dt):
    """No output has the accumulator dtype: partial sums between K blocks live in scratch."""
    k = gemm_config(dt.itemsize).kc * 2 + 3
    m, n = 13, 21
    nodes = (KNode(ACC, dt), KNode(Ops.CONST, dt, (), 0.0), KNode(Ops.CMPLT, bool_, (1, 0)))
    kern = _mm_kernel(dt, (), m, k, n, nodes=nodes, outputs=(KOutput(2, 2, bool_, (m, n)),))
    assert plan_gemm(kern).nkb == 3
    rng = _rng(5)
    a, b = rng.standard_normal((m, k)).astype(dt.np), rng.standard_normal((k, n)).astype(dt.np)
    bufs = run_kernel(kern, [a, b])
    want = a.astype(np.float64) @ b.astype(np.float64)
    sure = np.abs(want) > 1e-3 * np.abs(a) @ np.abs(b)  # far from 0: the sign is certain
    np.testing.assert_array_equal(bufs[2].reshape(m, n).astype(bool)[sure], (want > 0)[sure])


def test_multi_output_acc_and_epilogue_and_k_blocks():
    dt = float32
    k = gemm_config(4).kc + 17
    m, n = 40, 70
    nodes = (KNode(ACC, dt), KNode(LOAD, dt, (), 2), KNode(Ops.ADD, dt, (0, 1)), KNode(Ops.TANH, dt, (2,)))
    bias_view = ViewChain((View.contiguous((1, n)).expand((m, n)),))
    outs = (KOutput(3, 3, dt, (m, n)), KOutput(4, 0, dt, (m, n)))
    kern = _mm_kernel(dt, (), m, k, n, nodes=nodes, outputs=outs, extra=(KInput(2, dt, bias_view),))
    rng = _rng(6)
    a, b, bias = rng.standard_normal((m, k)), rng.standard_normal((k, n)), rng.standard_normal(n)
    a, b, bias = (x.astype(np.float32) for x in (a, b, bias))
    bufs = run_kernel(kern, [a, b, bias])
    assert_within_bound(bufs[4].reshape(m, n), a, b, np.float32, what="acc output")
    assert_within_bound(bufs[3].reshape(m, n), a, b, np.float32, "tanh", bias, what="tanh output")


def test_padded_and_chained_operand_views():
    """A padded operand (masked view: zeros read, never loaded) and a reshape-after-permute
    chain go through the general element loads of the packing."""
    dt = float32
    m, k, n = 9, 12, 20
    a_real = _rng(7).standard_normal((m, k - 4)).astype(np.float32)
    a_view = ViewChain((View.contiguous((m, k - 4)).pad(((0, 0), (2, 2))),))
    b_store = _rng(8).standard_normal((n, k)).astype(np.float32)  # B = b_store.T reshaped (k, n)
    b_view = ViewChain.of((n, k))
    from svod.view import apply_movement

    b_view = apply_movement(b_view, "PERMUTE", (1, 0))
    b_view = apply_movement(b_view, "RESHAPE", (k // 2, 2, n))
    b_view = apply_movement(b_view, "RESHAPE", (k, n))
    kern = _mm_kernel(dt, (), m, k, n, a_view=a_view, b_view=b_view)
    bufs = run_kernel(kern, [a_real, b_store])
    a = np.pad(a_real, ((0, 0), (2, 2)))
    assert_within_bound(bufs[2].reshape(m, n), a, b_store.T, np.float32)


def test_threads_and_units_do_not_change_results():
    """Each element's sum order depends on K and KC only: 1 and 2 threads agree bit for bit."""
    rng = _rng(9)
    a = rng.standard_normal((300, 700)).astype(np.float32)
    b = rng.standard_normal((700, 333)).astype(np.float32)
    kern = _mm_kernel(float32, (), 300, 700, 333)
    assert plan_gemm(kern).units > 1
    one = run_kernel(kern, [a, b], threads=1)[2]
    two = run_kernel(kern, [a, b], threads=2)[2]
    np.testing.assert_array_equal(one, two)


def test_integer_matmul_keeps_the_simple_lowering():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.arange(20, dtype=np.int32).reshape(4, 5)
    from svod.dtype import int32

    bufs = run_kernel(_mm_kernel(int32, (), 3, 4, 5), [a, b])
    np.testing.assert_array_equal(bufs[2].reshape(3, 5), a @ b)


# ----------------------------------------------------------------------------- structure


def test_generated_code_is_a_vector_micro_kernel_with_packing():
    kern = _mm_kernel(float32, (), 64, 64, 64)
    ir_text = compile_kernel(kern).ir
    cfg = gemm_config(4)
    assert f"llvm.fmuladd.v{cfg.vw}f32" in ir_text
    assert "@malloc" in ir_text and "@free" in ir_text


def _epilogue_kernel(m, k, n, operand_view):
    """relu(a @ b + e) with the epilogue operand e read through `operand_view`."""
    dt = float32
    nodes = (KNode(ACC, dt), KNode(LOAD, dt, (), 2), KNode(Ops.ADD, dt, (0, 1)), KNode(Ops.CONST, dt, (), 0.0),
             KNode(Ops.MAX, dt, (2, 3)))
    return _mm_kernel(dt, (), m, k, n, nodes=nodes, extra=(KInput(2, dt, operand_view),))


def _read_prefetches(ir_text: str) -> int:
    return sum(1 for line in ir_text.splitlines() if "@llvm.prefetch" in line and "i32 0, i32 3, i32 1)" in line)


def test_epilogue_operands_that_change_per_row_are_prefetched():
    """A residual (a full m x n operand) is read once per tile after the k loop: its tile
    rows are prefetched before the micro-kernel so the misses overlap the FMAs. A row bias
    (the same row for every tile row, hot in L1) is not."""
    m, k, n = 40, gemm_config(4).kc + 17, 70  # two K blocks and edge tiles
    full = compile_kernel(_epilogue_kernel(m, k, n, ViewChain.of((m, n)))).ir
    row = compile_kernel(_epilogue_kernel(m, k, n, ViewChain((View.contiguous((1, n)).expand((m, n)),)))).ir
    assert _read_prefetches(full) >= gemm_config(4).mr  # one line or more per tile row
    assert _read_prefetches(row) == 0
    rng = _rng(8)
    a, b, e = (rng.standard_normal(s).astype(np.float32) for s in ((m, k), (k, n), (m, n)))
    out = run_kernel(_epilogue_kernel(m, k, n, ViewChain.of((m, n))), [a, b, e])[3].reshape(m, n)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + e, 0)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mr,nv,kc", [(6, 4, 384), (12, 2, 256)], ids=["gemm-6x4", "attention-12x2"])
def test_avx512_configuration_compiles_to_zmm_without_spills(monkeypatch, mr, nv, kc):
    """The AVX-512 blockings (the GEMM's 6 x 64 f32 and the attention kernel's 12 x 32: 24
    zmm accumulators each) cannot run on an AVX2 host, but they must compile: asm for an
    AVX-512 CPU, FMAs on zmm, no stack traffic in the micro-kernel."""
    import re

    import llvmlite.binding as llvm

    import svod.codegen.schedule as schedule
    from svod.codegen.jit import LLVM_LOCK, _ensure_init
    from svod.codegen.lower import lower_kernel
    from svod.kernel_examples import matmul_bias_gelu_kernel

    cfg = schedule.GemmConfig(4, 16, mr, nv, kc, 240, 1024, 1020)
    monkeypatch.setattr(schedule, "gemm_config", lambda itemsize, target=None, tall=False: cfg)
    monkeypatch.setattr(schedule, "_CACHE", {})
    low = lower_kernel(matmul_bias_gelu_kernel(100, 70, 90))
    _ensure_init()
    with LLVM_LOCK:
        mod = llvm.parse_assembly(low.ir)
        tm = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(
            cpu="skylake-avx512", features="+avx512f,+avx512vl,+avx512bw,+avx512dq,+fma,+avx2", opt=3)
        mod.triple = "x86_64-unknown-linux-gnu"
        mod.data_layout = str(tm.target_data)
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
        pb.getModulePassManager().run(mod, pb)
        asm = tm.emit_assembly(mod)
    uk = asm[asm.index(".uk:"):]
    uk = uk[:uk.index("ret")]
    assert len(re.findall(r"vfmadd231ps\s+[^\n]*zmm", uk)) >= 24
    assert not re.findall(r"\(%rsp\)", uk), "the micro-kernel spills accumulators"


def test_avx512_gemm_is_6x4_and_attention_keeps_12x2():
    """On a 32-register target the GEMM's micro-tile is 6 x 4 vectors (KC up to `KC_MAX`)
    and the attention kernel's stays 12 x 2 (its units are blocks of 12 query rows); a
    product whose padding the tall 12 x 2 tile cuts by more than `TALL_PADDING` (narrow
    columns: 197 pads to 256 with 64-wide panels, to 224 with 32) gets it; both are in the
    object-cache key; AVX2 keeps 6 x 2 for everything."""
    from svod.codegen.schedule import KC_MAX, TALL_PADDING, gemm_config, gemm_fingerprint, gemm_tiling
    from svod.codegen.target import Target

    t512, t256 = Target(512, 32 << 10, 1 << 20, 32 << 20, 2), Target(256, 32 << 10, 512 << 10, 32 << 20, 2)
    for isz, lanes in ((4, 16), (8, 8)):
        c = gemm_config(isz, t512)
        assert (c.mr, c.nv, c.nr) == (6, 4, 4 * lanes) and c.kc <= KC_MAX and c.mc % c.mr == 0 and c.nc % c.nr == 0
        assert c.mr * isz * c.kc <= t512.l1 // 2  # the Ap micro-panel: half of L1
        assert (gemm_config(isz, t256).mr, gemm_config(isz, t256).nv) == (6, 2)
    a = gemm_config(4, t512, tall=True)
    assert (a.mr, a.nv) == (12, 2) and gemm_config(4, t256, tall=True) == gemm_config(4, t256)
    assert "g6x4" in gemm_fingerprint(t512) and "g12x2" in gemm_fingerprint(t512)
    # per product: the tall tile where it pads m x n less by more than TALL_PADDING
    for (m, n), mr in {(197, 197): 12, (2048, 2048): 6, (512, 4096): 6, (100, 40): 6, (48, 33): 6, (48, 30): 12,
                       (1, 1): 6}.items():
        p = gemm_tiling(1, m, n, 64, 4, t512)
        assert p.cfg.mr == mr, (m, n, p.cfg)
        pads = {c.mr: -(-m // c.mr) * c.mr * (-(-n // c.nr) * c.nr) for c in (gemm_config(4, t512),
                                                                           gemm_config(4, t512, tall=True))}
        assert (pads[12] < TALL_PADDING * pads[6]) == (mr == 12)
        assert gemm_tiling(1, m, n, 64, 4, t256).cfg == gemm_config(4, t256)


def test_split_tiles_balances_units():
    mt, nt, tm, tn = split_tiles(1, 1024, 1024, 6, 16, 1020, 1024, workers=2)
    assert tm * tn >= 4 and mt % 6 == 0 and nt % 16 == 0 and mt * tm >= 1024 and nt * tn >= 1024
    assert split_tiles(1, 7, 7, 6, 16, 1020, 1024, workers=2)[2:] == (1, 1)  # too small to split
    assert split_tiles(8, 64, 64, 6, 16, 1020, 1024, workers=2)[2:] == (1, 1)  # batch gives the units
    assert split_tiles(1, 0, 5, 6, 16, 1020, 1024, workers=2)[2:] == (0, 0)


def test_roofline_matmul_prices():
    """The roofline's matmul branch: a vector-times-matrix prefers BLAS (the micro-tile
    pads one row to MR), large fused kernels use both cores, tiny ones one."""
    model, mach = RooflineModel(), Machine(cores=2, vector_bits=256, flops_per_core=16e9)
    skinny = _mm_kernel(float32, (), 1, 1024, 1024)
    lib = Kernel(skinny.name, skinny.shape, skinny.inputs, skinny.nodes, skinny.outputs, (),
                 MatmulSpec(0, 1, 1, 1024, 1024, library=True))
    assert model.price(lib, mach).seconds < model.price(skinny, mach).seconds
    big = _mm_kernel(float32, (), 1024, 1024, 1024)
    assert model.price(big, mach).threads == 2
    assert model.price(_mm_kernel(float32, (), 8, 8, 8), mach).threads == 1
    tiny_lib = Kernel("t", (8, 8), big.inputs[:0] + (KInput(0, float32, ViewChain.of((8, 8))),
                                                      KInput(1, float32, ViewChain.of((8, 8)))),
                      (KNode(ACC, float32),), (KOutput(2, 0, float32, (8, 8)),), (), MatmulSpec(0, 1, 8, 8, 8, True))
    assert model.price(_mm_kernel(float32, (), 8, 8, 8), mach).seconds < model.price(tiny_lib, mach).seconds


# ----------------------------------------------------------------------------- in-place updates of matmul results


def test_issue_inplace_update_of_a_broadcast_matmul_compiles():
    """`a[:] = a @ c` with a broadcast operand (issue 26.8): the `where(True, ...)` of the
    update is simplified away, the plan compiles (no interpreter fallback) and matches numpy."""
    import warnings

    rng = _rng(26)
    an, cn = rng.random((16, 16, 128)), rng.random((128, 128))
    a, c = svod.asarray(an), svod.asarray(cn)
    svod.reset_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error", svod.SvodWarning)
        a[:] = svod.reshape(svod.reshape(a, (16, 16, 1, 128)) @ c, (16, 16, 128))
        got = a.numpy()
    np.testing.assert_allclose(got, (an.reshape(16, 16, 1, 128) @ cn).reshape(16, 16, 128), rtol=1e-12)
    assert svod.stats()["interpreter_fallbacks"] == 0
    # a constant condition selects a side, with where's promotion and broadcasting
    x = svod.asarray(np.array([[1, 2]], np.int32))
    for cond in (True, False, np.bool_(True), svod.full((3, 1), False, dtype=svod.bool)):
        got = svod.where(cond, x, svod.asarray(np.array([7], np.int64)))
        assert got.uop.op is not Ops.WHERE
        want = np.where(np.asarray(cond.numpy() if isinstance(cond, svod.Tensor) else cond), x.numpy(),
                        np.array([7], np.int64))
        assert got.dtype == svod.int64 and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("key", [(slice(None), slice(None), slice(1, 6)), (slice(None), 2), (0, slice(None, None, 2)),
                                 None])
def test_update_of_a_matmul_result_reading_its_own_operand(key):
    """`a[key] = (a @ c)[key]`, and `where(mask, a @ c, a)`: the epilogue of a fused GEMM
    reads the matmul's own operand (the old value). It gets an input of its own
    (`Kernel.check` forbids loading an operand), every kernel compiles natively, the
    result matches numpy."""
    rng = _rng(1)
    an, cn = rng.random((4, 6, 6)), rng.random((6, 6))
    a, c = svod.asarray(an), svod.asarray(cn)
    want = an.copy()
    if key is None:
        mask = rng.random((4, 6, 6)) > 0.5
        a = svod.where(svod.asarray(mask), a @ c, a)
        want = np.where(mask, an @ cn, an)
    else:
        a[key] = (a @ c)[key]
        want[key] = (an @ cn)[key]
    (got,), plan = run_fused([a])
    assert "interpreted" not in {compile_kernel(k).kind for k in plan.kernels}
    if key is None:
        (k,) = [k for k in plan.kernels if k.matmul is not None]
        assert not k.matmul.library and any(n.op == LOAD for n in k.nodes)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(a.numpy(), want, rtol=1e-12)


def test_interpreter_reads_broadcast_matmul_operands_in_place():
    """The interpreter (the fallback of a kernel that fails to compile) runs a fused matmul
    with a broadcast operand without materialising the broadcast: its peak memory stays
    within a few outputs, not the 32 MiB the expanded operand would take."""
    import tracemalloc

    from svod import interp

    rng = _rng(2)
    an, cn = rng.random((32, 32, 1, 64)), rng.random((64, 64))
    a, c = svod.asarray(an), svod.asarray(cn)
    out = svod.where(svod.asarray(rng.random((32, 32, 1, 64)) > 0.5), a @ c, a)
    key, bind = compact([out.uop])
    plan = lower(key, initial_materialized(key))
    (k,) = [k for k in plan.kernels if k.matmul is not None]
    assert any(0 in i.view.views[0].strides[:2] for i in k.inputs), "the operand is not a broadcast view"
    bufs = {i: np.ascontiguousarray(x).reshape(-1) for i, x in enumerate(bind.arrays)}
    for kk in plan.kernels:
        for o in kk.outputs:
            bufs.setdefault(o.slot, np.empty(int(np.prod(o.shape)), o.dtype.np))
    tracemalloc.start()
    try:
        for kk in plan.kernels:
            interp.run_kernel(kk, bufs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    broadcast_bytes = 32 * 32 * 64 * 64 * 8
    assert peak < broadcast_bytes / 4, f"interpreter peak {peak} bytes"
    (s, sh), = plan.outputs
    np.testing.assert_allclose(bufs[s][:int(np.prod(sh))].reshape(sh), out.numpy(), rtol=1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_ops=5))
def test_hypothesis_programs_realize_without_interpreter_fallbacks(prog):
    """The generator's programs (in-place slice updates of matmul results among them)
    through the engine — search, plan passes, codegen: no kernel falls back to the
    interpreter, and the values are the interpreter's."""
    from svod.interp import eval_uops

    inputs, build, desc = prog
    outs = build([svod.asarray(a) for a in inputs])
    want = eval_uops([t.uop for t in outs])
    before = svod.stats()["interpreter_fallbacks"]
    svod.realize(*outs)
    assert svod.stats()["interpreter_fallbacks"] == before, desc
    for t, w in zip(outs, want):
        np.testing.assert_allclose(t.numpy(), w, rtol=2e-5, atol=2e-5, err_msg=desc)


def test_interpreter_gather_skips_broadcast_axes_of_masked_and_chained_views():
    """A masked or multi-view operand is gathered without its broadcast axes, then
    broadcast back: same values as the full gather, a fraction of its memory."""
    import tracemalloc

    from svod import interp

    rng = _rng(3)
    flat = rng.random(64 * 32)
    chain = (ViewChain.of(View.contiguous((64, 32)).permute((1, 0))).reshape((2048,)).reshape((1, 2048))
             .pad(((0, 0), (1, 1))).expand((500, 2050)))
    assert len(chain.views) == 2 and chain.views[-1].mask is not None
    want = chain.gather(flat, pad_value=0)
    tracemalloc.start()
    try:
        got = interp._gather(flat, chain)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(got, want)
    assert peak < want.nbytes / 10, (peak, want.nbytes)
    for seed in range(40):  # random movement chains: the same values as the plain gather
        r = _rng(seed)
        shape = tuple(int(n) for n in r.integers(1, 5, size=3))
        ops = []
        cur = shape
        for _ in range(4):
            k = r.integers(0, 5)
            if k == 0:
                ops.append(("PERMUTE", tuple(int(i) for i in r.permutation(len(cur)))))
                cur = tuple(cur[i] for i in ops[-1][1])
            elif k == 1:
                new = tuple(int(n) if n != 1 else int(r.integers(1, 4)) for n in cur)
                ops.append(("EXPAND", new))
                cur = new
            elif k == 2:
                pads = tuple((int(r.integers(0, 2)), int(r.integers(0, 2))) for _ in cur)
                ops.append(("PAD", (pads, 0)))
                cur = tuple(n + lo + hi for n, (lo, hi) in zip(cur, pads))
            elif k == 3:
                ops.append(("RESHAPE", (int(np.prod(cur)),)))
                cur = ops[-1][1]
                ops.append(("RESHAPE", (1,) + cur))
                cur = ops[-1][1]
            else:
                ops.append(("FLIP", (0,)))
        c = ViewChain.from_movement(shape, ops)
        if c is None:
            continue
        buf = _rng(seed).random(int(np.prod(shape)))
        np.testing.assert_array_equal(interp._gather(buf, c), c.gather(buf, pad_value=0), err_msg=str(ops))


# ----------------------------------------------------------------------------- every target's GEMM


def _target_variants():
    """(name, Target): the AVX2 blocking (16 registers: 6 x 2 ymm) and the AVX-512 one (32:
    6 x 4 zmm), each with a real cache hierarchy and with tiny caches (4 KiB L1, 16-32
    KiB L2) so small products take every path: many K blocks, MC blocks, unit tiles."""
    from svod.codegen.target import Target

    out = [("avx2", Target(256, 32 << 10, 512 << 10, 32 << 20, 2)),
           ("avx2-tiny", Target(256, 4 << 10, 16 << 10, 1 << 20, 2))]
    out += [("avx512", Target(512, 32 << 10, 1 << 20, 32 << 20, 2)),
            ("avx512-tiny", Target(512, 4 << 10, 32 << 10, 1 << 20, 2))]
    return out


def _host_runs(target) -> bool:
    from svod.codegen.jit import host_target_info

    return host_target_info()["vector_bits"] >= target.vector_bits


def _gemm_kernel(dt, batch, m, k, n, b_t, bcast_b, epilogue):
    """A hand-built matmul kernel: B stored (k, n) or (n, k) (``b_t``: viewed transposed),
    with B's batch dims broadcast (stride 0) when ``bcast_b``; epilogue "none" or
    "bias_relu" (a row bias, then max(., 0))."""
    from svod.view import apply_movement

    bshape = (n, k) if b_t else (k, n)
    bv = ViewChain.of(((1,) * len(batch) if bcast_b else batch) + bshape)
    if b_t:
        nb = len(batch)
        bv = apply_movement(bv, "PERMUTE", tuple(range(nb)) + (nb + 1, nb))
    if bcast_b and batch:
        bv = apply_movement(bv, "EXPAND", batch + (k, n))
    if epilogue == "none":
        return _mm_kernel(dt, batch, m, k, n, b_view=bv)
    shape = batch + (m, n)
    bias = ViewChain((View.contiguous((1,) * (len(batch) + 1) + (n,)).expand(shape),))
    nodes = (KNode(ACC, dt), KNode(LOAD, dt, (), 2), KNode(Ops.ADD, dt, (0, 1)), KNode(Ops.CONST, dt, (), 0.0),
             KNode(Ops.MAX, dt, (2, 3)))
    return _mm_kernel(dt, batch, m, k, n, b_view=bv, nodes=nodes, extra=(KInput(2, dt, bias),))


def _run_for_target(kern, target, ins, threads=2):
    """Lower `kern` with `target`'s GEMM blocking (the host's JIT compiles it), run it on
    svod's pool, return the output and the micro-kernel's assembly."""
    import ctypes

    import svod.codegen.schedule as schedule
    from svod import runtime
    from svod.codegen.jit import compile_ir
    from svod.codegen.lower import lower_kernel

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(schedule, "host_target", lambda: target)
        mp.setattr(schedule, "_CACHE", {})
        schedule.gemm_config.cache_clear()
        try:
            plan = schedule.plan_gemm(kern)
            low = lower_kernel(kern, "svod_gemm_variant")
        finally:
            schedule.gemm_config.cache_clear()
    cm = compile_ir(low.ir, name="gemm_variant")
    arrays = [np.ascontiguousarray(x).reshape(-1) for x in ins]
    out = np.full(int(np.prod(kern.outputs[0].shape)), 7, kern.outputs[0].dtype.np)  # garbage
    slots = (ctypes.c_void_p * (len(arrays) + 1))(*[a.ctypes.data for a in arrays], out.ctypes.data)
    runtime.run_parallel(cm.address("svod_gemm_variant"), ctypes.addressof(slots), low.units, threads)
    return out.reshape(kern.outputs[0].shape), plan, cm.asm


@st.composite
def gemm_variant_cases(draw):
    name, target = draw(st.sampled_from(_target_variants()))
    dt = draw(st.sampled_from([float32, float64]))
    m, n = draw(st.integers(1, 150)), draw(st.integers(1, 150))
    k = draw(st.sampled_from([1, 7, 31, 64, 97, 200, 450]))
    batch = draw(st.sampled_from([(), (2,), (3, 1)]))
    return name, target, dt, batch, m, k, n, draw(st.booleans()), draw(st.booleans()), \
        draw(st.sampled_from(["none", "bias_relu"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gemm_variant_cases())
def test_hypothesis_every_target_blocking_matches_float64_reference(case):
    """Every target's micro-kernel shape and cache blocking, compiled for this host and run
    where it can (an AVX2 blocking runs on an AVX-512 host; the AVX-512 one only there),
    against the float64 reference: odd sizes, K blocks, transposed and broadcast B,
    batches, a fused epilogue."""
    name, target, dt, batch, m, k, n, b_t, bcast_b, epi = case
    if not _host_runs(target):
        return  # NOTE: compiled-only coverage of the AVX-512 blocking: test_avx512_configuration...
    kern = _gemm_kernel(dt, batch, m, k, n, b_t, bcast_b, epi)
    rng = _rng(m * 7 + k * 3 + n)
    a = rng.standard_normal(batch + (m, k)).astype(dt.np)
    bstore = rng.standard_normal(((1,) * len(batch) if bcast_b else batch) + ((n, k) if b_t else (k, n))).astype(dt.np)
    bias = rng.standard_normal(n).astype(dt.np)
    ins = [a, bstore] + ([bias] if epi != "none" else [])
    got, plan, _ = _run_for_target(kern, target, ins)
    assert plan.cfg.vw == target.lanes(dt.itemsize)
    b = np.swapaxes(bstore, -1, -2) if b_t else bstore
    b = np.broadcast_to(b, batch + (k, n))
    assert_within_bound(got, a, b, dt.np, "relu" if epi != "none" else "none", bias if epi != "none" else None,
                        what=f"{name} {case[2:]}")


@pytest.mark.parametrize("name,target", _target_variants(), ids=[v[0] for v in _target_variants()])
@pytest.mark.parametrize("dt", [float32, float64])
@pytest.mark.parametrize("tall", [False, True], ids=["default-tile", "tall-tile"])
def test_every_target_blocking_takes_every_path(name, target, dt, tall):
    """Per target and micro-tile (the default one and the tall one `gemm_tiling` takes
    for narrow products: 6 x 4 and 12 x 2 zmm on AVX-512, 6 x 2 ymm both on AVX2): the
    micro-kernel's registers are the target's (ymm for AVX2, zmm for AVX-512), and a
    product with many K blocks, units and edge tiles in both directions (tiny caches:
    also several NC column blocks and, by `SVOD_GEMM`'s mc, several MC row blocks a unit)
    is right on 1 and 2 threads, bit for bit the same."""
    if not _host_runs(target):
        pytest.skip(f"this host cannot run {target.vector_bits}-bit vectors")
    from svod.codegen.schedule import gemm_config as cfg_for

    with pytest.MonkeyPatch.context() as mp:
        if "tiny" in name:  # A packed (not read in place): MC row blocks a unit
            mp.setenv("SVOD_GEMM", "mc=24,packa=1")
        import svod.codegen.schedule as schedule

        mp.setattr(schedule, "TALL_PADDING", 1e9 if tall else 0.0)  # this tile whatever the padding
        cfg_for.cache_clear()
        cfg = cfg_for(dt.itemsize, target, tall)
        m, n = 3 * cfg.mr + 5, 2 * cfg.nr + 3
        k = 2 * cfg.kc + 7
        if "tiny" in name:
            m, n = max(m, 2 * cfg.mt + 7), max(n, 2 * cfg.nt + 5)
        kern = _gemm_kernel(dt, (), m, k, n, False, False, "bias_relu")
        rng = _rng(3)
        a, b = rng.standard_normal((m, k)).astype(dt.np), rng.standard_normal((k, n)).astype(dt.np)
        bias = rng.standard_normal(n).astype(dt.np)
        got, plan, asm = _run_for_target(kern, target, [a, b, bias])
        one, _, _ = _run_for_target(kern, target, [a, b, bias], threads=1)
    cfg_for.cache_clear()
    assert plan.cfg == cfg, (name, tall, plan.cfg)
    assert plan.nkb == 3
    if "tiny" in name:
        assert plan.units > 1 and plan.mc < plan.mt and 0 < cfg.nc < plan.nt, plan
    assert_within_bound(got, a, b, dt.np, "relu", bias, what=name)
    np.testing.assert_array_equal(one, got)
    uk = asm[asm.index(".uk:"):]
    uk = uk[:uk.index("ret")]
    reg = "zmm" if target.vector_bits == 512 else "ymm"
    fma = "vfmadd231ps" if dt is float32 else "vfmadd231pd"
    assert len([ln for ln in uk.splitlines() if fma in ln and reg in ln]) >= cfg.mr * cfg.nv, name


def _a_view(batch, m, k, lda, a_bcast):
    """A (batch..., m, k) read from a buffer of rows `lda` wide (a column slice when lda > k),
    its batch dims broadcast (stride 0) when `a_bcast`."""
    from svod.view import apply_movement

    store = ((1,) * len(batch) if a_bcast else batch) + (m, lda)
    v = ViewChain.of(store)
    if lda > k:
        v = apply_movement(v, "SHRINK", tuple((0, n) for n in store[:-1]) + ((0, k),))
    if a_bcast and batch:
        v = apply_movement(v, "EXPAND", batch + (m, k))
    return v, store


@pytest.mark.parametrize("name,target", _target_variants(), ids=[v[0] for v in _target_variants()])
@pytest.mark.parametrize("dt", [float32, float64])
@pytest.mark.parametrize("shape", [("edge", (), 0, False), ("whole-panels", (), 0, False),
                                   ("strided-rows", (), 37, False), ("batch-broadcast", (2,), 5, True)],
                         ids=lambda s: s[0])
def test_a_read_in_place_matches_packed_a_bit_for_bit(name, target, dt, shape):
    """A whose k axis is contiguous is read in place by the micro-kernel (``ukd``: full
    MR-row panels at A's own row stride; only a partial last panel is packed and runs
    ``uk``): the same sums as with A packed (``SVOD_GEMM=packa=1``), bit for bit, within
    the float64 bound, on 1 and 2 threads; a row count that is a multiple of MR compiles no
    packed kernel at all; the units split columns first (each B column packed once)."""
    if not _host_runs(target):
        pytest.skip(f"this host cannot run {target.vector_bits}-bit vectors")
    from svod.codegen.schedule import gemm_config as cfg_for

    what, batch, pad, a_bcast = shape
    cfg_for.cache_clear()
    cfg = cfg_for(dt.itemsize, target)
    m = 4 * cfg.mr if what == "whole-panels" else 4 * cfg.mr + 3
    k, n = 2 * cfg.kc + 5, 16 * cfg.nr + 7
    a_view, a_store = _a_view(batch, m, k, k + pad, a_bcast)
    kern = _gemm_kernel(dt, batch, m, k, n, False, False, "bias_relu")
    kern = dataclasses.replace(kern, inputs=(KInput(0, dt, a_view),) + kern.inputs[1:])
    rng = _rng(11)
    a_buf = rng.standard_normal(a_store).astype(dt.np)
    b = rng.standard_normal(batch + (k, n)).astype(dt.np)
    bias = rng.standard_normal(n).astype(dt.np)
    got, plan, asm = _run_for_target(kern, target, [a_buf, b, bias])
    one, _, _ = _run_for_target(kern, target, [a_buf, b, bias], threads=1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SVOD_GEMM", "packa=1")
        cfg_for.cache_clear()
        packed, pplan, _ = _run_for_target(kern, target, [a_buf, b, bias])
    cfg_for.cache_clear()
    assert plan.a_direct and not pplan.a_direct, (plan, pplan)
    assert plan.tiles_m == 1 and plan.units >= 2, plan  # columns split, not rows
    a = np.broadcast_to(a_buf[..., :k], batch + (m, k))
    assert_within_bound(got, a, b, dt.np, "relu", bias, what=f"{name} {what}")
    np.testing.assert_array_equal(one, got)
    np.testing.assert_array_equal(packed, got)
    fma = "vfmadd231ps" if dt is float32 else "vfmadd231pd"
    reg = "zmm" if target.vector_bits == 512 else "ymm"
    ukd = asm[asm.index(".ukd:"):]
    ukd = ukd[:ukd.index("ret")]
    assert len([ln for ln in ukd.splitlines() if fma in ln and reg in ln]) >= cfg.mr * cfg.nv
    assert (".uk:" in asm) == (m % cfg.mr != 0), what


# ----------------------------------------------------------------------------- epilogue = unfused, bit for bit


def _bits_equal_mask(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: bit-identical, except that any NaN matches any NaN (-0.0 and +0.0 differ)."""
    ints = {4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return (np.isnan(a) & np.isnan(b)) | (a.view(ints) == b.view(ints))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
@pytest.mark.parametrize("act", ["gelu_tanh", "gelu", "silu"])
@pytest.mark.parametrize("m,k,n", [(37, 700, 45), (12, 5, 32), (1, 3, 1), (50, 64, 129)])
def test_fused_epilogue_is_bit_identical_to_the_unfused_kernels(dt, act, m, k, n):
    """A long epilogue (exp, divide) runs interleaved over the tile's columns (several
    vectors in flight, `lower._ilp_hints`): the same operations per element, so the fused
    product must equal, bit for bit, the generated product alone (ACC) followed by the
    activation as an elementwise kernel — at odd sizes (edge tiles, column remainders),
    several K blocks (k = 700), and with NaN, ±inf and -0.0 in the operands and the bias."""
    rng = _rng(m * 7 + k * 3 + n)
    a = rng.standard_normal((m, k)).astype(dt)
    b = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(dt)
    bias = (4 * rng.standard_normal(n)).astype(dt)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 30.0, -30.0, -1e4], dt)
    bias[: min(n, len(specials))] = specials[: min(n, len(specials))]
    if m > 2:
        a[1, :] = np.inf  # a row of ±inf/NaN sums
        a[2, : k // 2] = -0.0
    # the generated product alone (a Kernel whose output is ACC, never the BLAS step)
    acc = run_kernel(_mm_kernel(float32 if dt == np.float32 else float64, (), m, k, n), [a, b])[2].reshape(m, n)

    def activation(y):
        if act == "silu":
            return svod.nn.silu(y)
        return svod.nn.gelu(y, approximate="tanh" if act == "gelu_tanh" else "none")

    A, B, Bias = (svod.asarray(x) for x in (a, b, bias))
    (fused,), plan = run_fused([activation(A @ B + Bias)])
    assert [kk.kind for kk in plan.kernels] == ["matmul"], [kk.kind for kk in plan.kernels]
    unfused = activation(svod.asarray(acc) + Bias).numpy()
    assert fused.dtype == unfused.dtype == dt
    assert fused.shape == unfused.shape == (m, n)
    same = _bits_equal_mask(fused, unfused)
    assert same.all(), (act, dt, np.argwhere(~same)[:5], fused[~same][:5], unfused[~same][:5])
