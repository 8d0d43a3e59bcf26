"""Small steps against their real cost: a library (BLAS) step costs a graph program a fixed
~15 µs besides its flops (the Python call between native segments; `svod calibrate`
measures it as `library_step_seconds`, docs/costmodels.md). Without that term the
calibrated model priced small BLAS steps at their flops alone, and the search picked
(blas, reduce, rowwise, blas) over the fused attention kernel for small attention chains
— a realize() of ~100 µs against ~55 µs fused."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from costmodels import calibrate, stepprobes
from costmodels.analytic import CalibratedModel
from costmodels.profile import LIBRARY_STEP_SECONDS, Profile, reference
from svod import engine
from svod.costing import plan_seconds

# (batch, m, n, d, dv): the shapes where the search kept attention unfused
SMALL_ATTENTION = [(2, 16, 32, 8, 32), (1, 7, 32, 24, 64), (2, 12, 32, 8, 32)]


def _sdpa(b, m, n, d, dv):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((b, m, d), (b, n, d), (b, n, dv)))
    return svod.nn.scaled_dot_product_attention(svod.asarray(q), svod.asarray(k), svod.asarray(v)), (q, k, v)


def _ref(q, k, v):
    s = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("shape", SMALL_ATTENTION)
def test_small_attention_plans_to_one_attention_kernel(isolated, shape):
    t, (q, k, v) = _sdpa(*shape)
    with svod.search_limits(enabled=True):
        _, exe = engine.plan_for([t])
    assert [kk.kind for kk in exe.plan.kernels] == ["attention"], str(exe.plan)
    np.testing.assert_allclose(t.numpy(), _ref(q, k, v), rtol=2e-5, atol=2e-6)


def _model(**changes) -> CalibratedModel:
    from costmodels.profile import profile

    return CalibratedModel(Profile(dict(profile().data, **changes)))


def _unfused(key):
    """The plan the search picked before the library-step term: (blas, reduce, rowwise,
    blas) — both products, the max and the softmax's division materialised (the attention
    pass leaves a softmax whose max is a kernel of its own alone)."""
    from svod.lower import lower

    mats = {i for i, n in enumerate(key.nodes)
            if n.op.name in ("MATMUL", "DIV") or (n.op.name == "REDUCE" and n.arg[0] == "max")}
    plan = lower(key, mats)
    assert [k.kind for k in plan.kernels] == ["blas", "reduce", "rowwise", "blas"], str(plan)
    return plan


def test_a_blas_step_costs_its_library_step(isolated):
    t, _ = _sdpa(*SMALL_ATTENTION[0])
    key, _ = engine.PIPELINE.compact([t.uop])
    plan = _unfused(key)
    stored = _model()
    assert "library_step_seconds" not in stored.profile.data  # the checked-in profile predates the probe
    assert stored.profile.library_step_seconds == LIBRARY_STEP_SECONDS
    free, dear = _model(library_step_seconds=0.0), _model(library_step_seconds=1e-3)
    for kk in plan.kernels:
        if kk.kind == "blas":
            assert stored.price(kk).seconds - free.price(kk).seconds == pytest.approx(LIBRARY_STEP_SECONDS)
            assert dear.price(kk).seconds - free.price(kk).seconds == pytest.approx(1e-3)
        else:  # a kernel of svod's own code does not pay it
            assert stored.price(kk).seconds == dear.price(kk).seconds == free.price(kk).seconds


def test_the_fused_plan_is_priced_below_the_unfused_one(isolated):
    t, _ = _sdpa(*SMALL_ATTENTION[0])
    key, _ = engine.PIPELINE.compact([t.uop])
    with svod.search_limits(enabled=True):
        _, exe = engine.plan_for([t])
    fused, unfused = exe.plan, _unfused(key)
    model = _model()
    gap = plan_seconds(unfused, model) - plan_seconds(fused, model)
    assert gap > LIBRARY_STEP_SECONDS  # two library steps against one native kernel
    # the term is what decides it: without it the two plans priced within a few µs
    free = _model(library_step_seconds=0.0)
    assert plan_seconds(unfused, free) - plan_seconds(fused, free) == pytest.approx(gap - 2 * LIBRARY_STEP_SECONDS,
                                                                                   abs=1e-9)


def test_fit_keeps_the_library_step_probe():
    assert calibrate.fit({"library_step": {"seconds": 2.5e-5}}, 2)["library_step_seconds"] == 2.5e-5
    assert "library_step_seconds" not in calibrate.fit({}, 2)  # the profile's default then applies
    assert Profile.from_json(dict(reference().data, library_step_seconds=3e-6)).library_step_seconds == 3e-6


def test_blas_rate_fit_takes_the_library_step_out():
    """The BLAS/GEMM pairs time the BLAS step with its Python side in it; the model prices
    that side apart, so the fitted rate is the product's alone (else it is counted twice)."""
    mm = {"native": 1e11, "native2:1024": 2e11}
    raw = {"matmul:" + k: {"seconds": 1.0, "median": 1.0, "flops": v, "read_bytes": 4e6, "write_bytes": 4e6}
           for k, v in mm.items()}
    pair = {"ratio": 1.2, "flops": 2.0 * 256 ** 3, "bytes": 3 * 256 * 256 * 4, "seconds": 300e-6}
    raw["blas_pairs"] = {"256": pair}
    plain = list(calibrate.fit(raw, 2)["blas_flops"].values())
    assert plain == [pytest.approx(2e11 / 1.2)]  # no probe: as measured
    raw["library_step"] = {"seconds": 15e-6}
    net = list(calibrate.fit(raw, 2)["blas_flops"].values())
    assert net == [pytest.approx(2e11 / (1.2 * 285 / 300))]
    del pair["seconds"]  # a pair stored before the BLAS seconds were kept: as measured
    assert list(calibrate.fit(raw, 2)["blas_flops"].values()) == plain


def test_library_step_probe_measures_a_plausible_overhead():
    """The probe's two plans (BLAS steps with their adds apart, generated GEMMs with the adds
    in their epilogues) compute the same thing; the per-step difference is the Python side
    of a library step: microseconds, not nothing and not milliseconds."""
    sec = stepprobes._library_step_cost()
    assert 5e-7 < sec < 1e-3, sec
