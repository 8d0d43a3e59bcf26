"""costmodels: features, the calibrated model over the checked-in machine profile, the
tuning database and the measured model, the learned correction, the engine's
generation plumbing, and smoke runs of calibrate and the report (tiny budgets).

Tests never calibrate for real: they use `tests/machine_profile.json` (identical to
the reference profile shipped in `costmodels.reference`), so plans are deterministic.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import numpy as np
import pytest

import svod
from costmodels import analytic, calibrate, digest, features, learned, measure, profile, stepprobes, tuning
from costmodels.analytic import CalibratedModel
from costmodels.features import features as kfeatures
from costmodels.profile import Profile
from costmodels.tuning import MeasuredModel, TuningDB
from svod.costing import CostModel, Machine, Price
from svod.kernel_examples import elementwise_chain_kernel, layernorm_kernel, matmul_bias_gelu_kernel, softmax_kernel
from svod.store import Store

PROFILE_PATH = Path(__file__).resolve().parent / "machine_profile.json"


@pytest.fixture(scope="module")
def prof() -> Profile:
    return Profile.load(PROFILE_PATH)


@pytest.fixture
def model(prof) -> CalibratedModel:
    return CalibratedModel(prof)


@pytest.fixture
def mem_store(tmp_path):
    s = Store(tmp_path / "store.sqlite")
    yield s
    s.close()


def _kernel(fn, *shapes, dtype=np.float32):
    return stepprobes.one_kernel(fn, *shapes, dtype=dtype)


# ----------------------------------------------------------------------------- profile


def test_checked_in_profile_is_the_reference(prof):
    ref = profile.reference()
    assert prof.id == ref.id, "tests/machine_profile.json and costmodels/reference.py differ: regenerate one"
    assert prof.cores >= 1 and prof.launch_seconds > 0 and prof.dispatch_seconds > 0
    for op in ("EXP", "LOG", "TANH", "ERF", "SIN", "COS", "SQRT", "POW", "DIV", "ALU"):
        assert prof.op_seconds[op] > 0, op


def test_bandwidth_curves_fall_with_the_working_set(prof):
    for curve, pts in prof.curves().items():
        bws = [b for _, b in pts]
        assert bws == sorted(bws, reverse=True), curve
        lo, hi = pts[0][0], pts[-1][0]
        assert prof.bandwidth_at(curve, lo / 10) == bws[0] and prof.bandwidth_at(curve, hi * 10) == bws[-1]
        mid = prof.bandwidth_at(curve, math.sqrt(lo * hi))
        assert bws[-1] <= mid <= bws[0]


def test_profile_json_round_trip_and_validation(prof, tmp_path):
    path = tmp_path / "p.json"
    prof.dump(path)
    assert Profile.load(path).id == prof.id
    with pytest.raises(ValueError):
        Profile.from_json({"format": 999})
    with pytest.raises(ValueError):
        Profile.from_json({"format": profile.PROFILE_FORMAT})


def test_profile_lookup_order(prof, tmp_path, monkeypatch, mem_store):
    profile.forget()
    monkeypatch.delenv("SVOD_PROFILE", raising=False)
    monkeypatch.delenv("SVOD_MACHINE_PROFILE", raising=False)
    assert profile.profile(mem_store).source == "reference"  # nothing stored yet
    data = dict(prof.data, launch_seconds=prof.launch_seconds * 2)
    profile.save(Profile.from_json(data), mem_store)
    got = profile.profile(mem_store, refresh=True)
    assert got.source == "store" and got.launch_seconds == prof.launch_seconds * 2
    # a profile stored by another svod version on this machine is reused (and re-stored)
    other = Store(tmp_path / "store.sqlite", code="another-commit")
    assert other.get_json("profiles", profile.STORE_KEY) is None
    profile.forget()
    assert profile.profile(other).launch_seconds == prof.launch_seconds * 2
    assert other.get_json("profiles", profile.STORE_KEY) is not None
    other.close()
    # SVOD_MACHINE_PROFILE wins over the store; SVOD_PROFILE=PATH is its old spelling, and
    # SVOD_PROFILE=1 (kernel profiling, svod.profiler) is never read as a path
    path = tmp_path / "mine.json"
    prof.dump(path)
    monkeypatch.setenv("SVOD_MACHINE_PROFILE", str(path))
    profile.forget()
    assert profile.profile(mem_store).source == f"file:{path}"
    monkeypatch.delenv("SVOD_MACHINE_PROFILE")
    monkeypatch.setenv("SVOD_PROFILE", str(path))
    profile.forget()
    assert profile.profile(mem_store).source == f"file:{path}"
    monkeypatch.setenv("SVOD_PROFILE", "1")
    profile.forget()
    assert profile.profile(mem_store).source == "store"
    monkeypatch.setenv("SVOD_PROFILE", str(tmp_path / "missing.json"))
    profile.forget()
    with pytest.warns(svod.SvodWarning, match="not a usable profile"):
        assert profile.profile(mem_store).source == "reference"
    profile.forget()


def test_costmodels_profile_is_callable(prof, tmp_path, monkeypatch):
    """`costmodels.profile()` (the notebooks' spelling) is the profile this process plans
    with; the module's functions stay reachable as `costmodels.profile.<name>`."""
    import costmodels

    path = tmp_path / "mine.json"
    prof.dump(path)
    monkeypatch.setenv("SVOD_MACHINE_PROFILE", str(path))
    profile.forget()
    got = costmodels.profile()
    assert isinstance(got, Profile) and got.source == f"file:{path}" and got is profile.profile()
    assert costmodels.profile.reference().cores >= 1 and callable(costmodels.profile.save)
    profile.forget()


# ----------------------------------------------------------------------------- features


def test_features_follow_the_codegen():
    f = kfeatures(softmax_kernel(64, 256))
    assert (f.kind, f.rows, f.row_len, f.passes) == ("rowwise", 64, 256, 3)
    assert f.ops["EXP"] == 64 * 256  # exp(x - max) is stashed by pass 1, not recomputed in pass 2
    assert f.read_bytes == f.write_bytes == 64 * 256 * 4
    ew = kfeatures(elementwise_chain_kernel(64, 256))
    assert ew.access["strided"] == 64 * 256  # the transposed input
    assert ew.read_bytes == (2 * 64 * 256 + 256) * 4  # the row vector counted once
    col = kfeatures(_kernel(lambda x: svod.sum(x, axis=0), (64, 256)))
    assert col.column and col.kind == "reduce"
    assert kfeatures(_kernel(lambda x: svod.flip(x, axis=1) + 1.0, (8, 16))).access == {"reverse": 128.0}
    cat = kfeatures(_kernel(lambda x, y: svod.concat([x, y], axis=1) * 2.0, (8, 4), (8, 4)))
    assert cat.access == {"contig": 2 * 8 * 8}  # the loop is cut at the concat boundary: plain reads
    rows = kfeatures(_kernel(lambda x, y: svod.concat([x, y], axis=0) * 2.0, (4, 8), (4, 8)))
    assert rows.access["masked"] == 2 * 8 * 8  # a mask on an outer axis: still a masked read
    mm = kfeatures(matmul_bias_gelu_kernel(16, 32, 64))
    assert mm.flops == 2 * 16 * 32 * 64 and not mm.matmul_strided and mm.ops["TANH"] == 16 * 64
    assert kfeatures(stepprobes._matmul_kernel(8, 8, 8, library=False, b_t=True)).matmul_strided
    assert kfeatures(layernorm_kernel(4, 8)).vector()["passes"] == 3.0


def test_features_count_the_schedules_stash():
    """The stash is the schedule's (svod/codegen/schedule.py): exp(x - max) is evaluated
    once a row element when stashed, twice when the row is too long to stash."""
    from svod.codegen import schedule

    short, long_ = softmax_kernel(4, schedule.STASH_ELEMS), softmax_kernel(2, 2 * schedule.STASH_ELEMS)
    assert schedule.schedule(short).stash and not schedule.schedule(long_).stash
    assert kfeatures(short).ops["EXP"] == 4 * schedule.STASH_ELEMS
    assert kfeatures(long_).ops["EXP"] == 2 * 2 * 2 * schedule.STASH_ELEMS


# ----------------------------------------------------------------------------- calibrated model


def test_calibrated_model_is_a_cost_model(model):
    assert isinstance(model, CostModel)
    ks = [softmax_kernel(256, 256), layernorm_kernel(64, 512), matmul_bias_gelu_kernel(64, 64, 64)]
    prices = model.price_batch(ks, Machine.host())
    assert all(isinstance(p, Price) and p.seconds > 0 and p.threads >= 1 for p in prices)
    assert model.price(ks[0]) == prices[0]  # cached by content key


def test_calibrated_model_orders_the_basics(model):
    n = 1 << 20
    add = kfeatures(_kernel(lambda x: x + 1.0, (n,)))
    exp = kfeatures(_kernel(lambda x: svod.exp(x), (n,)))
    erf = kfeatures(_kernel(lambda x: svod.erf(x), (n,)))
    assert model.seconds(add, 1) < model.seconds(exp, 1) < model.seconds(erf, 1)
    small = kfeatures(_kernel(lambda x: svod.exp(x), (256,)))
    assert model.price_features(small).threads == 1  # a split would not pay its dispatch
    assert model.price_features(erf).threads == model.profile.cores  # heavy compute splits
    big = kfeatures(_kernel(lambda x: x + 1.0, (1 << 24,)))
    # per byte, DRAM is no faster than the caches
    assert model.memory(big, 1) / big.working_set >= model.memory(add, 1) / add.working_set


def test_fusion_is_priced_cheaper_when_it_saves_traffic(model):
    from svod.key import compact
    from svod.lower import lower

    a, b = svod.random.randn(1 << 20), svod.random.randn(1 << 20)
    y = svod.exp(a * b + 1.0) * 0.5
    key, _ = compact([y.uop])
    fused = lower(key, set())
    computed = {i for i, n in enumerate(key.nodes) if n.op.name in ("MUL", "ADD", "EXP")}
    unfused = lower(key, computed)
    assert len(unfused.kernels) > len(fused.kernels)
    total = lambda p: sum(x.seconds for x in model.price_batch(list(p.kernels)))
    assert total(fused) < total(unfused)


def test_transpose_is_priced_by_the_reach_of_its_inner_loop(model):
    """A transposed read costs by the bytes its innermost loop sweeps (extent x stride), not
    by the tensor's size: the (8, 64, 1024) view of an (8, 1024, 64) tensor spans 256 KB
    (a K^T copy in attention, measured 0.26 ms here) and is priced like the small probe,
    far below one of the same element count whose inner loop walks 2048 rows (span 2 MB)."""
    narrow = _kernel(lambda x: x.permute(0, 2, 1) + 0.0, (8, 1024, 64))
    wide = _kernel(lambda x: x.T + 0.0, (2048, 256))
    fn, fw = kfeatures(narrow), kfeatures(wide)
    assert fn.access.get("strided") == fw.access.get("strided") == 8 * 1024 * 64
    assert fn.strided_span == 1024 * 64 * 4 and fw.strided_span == 2048 * 256 * 4
    assert model.gathers(fn) < 0.5 * model.gathers(fw)


def test_contiguous_streams_run_while_transposed_loads_wait(model):
    """A transposed read waits on a miss per element; the kernel's contiguous inputs stream
    meanwhile. x.T + y over 2048^2 costs what x.T alone costs (15.8 against 15.9 ms measured
    here), so y's stream is hidden up to the gathers' time — while x + y still pays for it,
    and a reversed (streaming) read hides nothing."""
    n = 2048
    t_alone = _kernel(lambda x: x.T + 0.0, (n, n))
    t_plus = _kernel(lambda x, y: x.T + y, (n, n), (n, n))
    plain, plus = _kernel(lambda x: x + 0.0, (n, n)), _kernel(lambda x, y: x + y, (n, n), (n, n))
    assert kfeatures(t_plus).contig_read_bytes == n * n * 4 and kfeatures(t_alone).contig_read_bytes == 0
    a, b = model.price(t_alone).seconds, model.price(t_plus).seconds
    assert a <= b < 1.02 * a
    assert model.price(plus).seconds > 1.2 * model.price(plain).seconds
    rev_alone = _kernel(lambda x: svod.flip(x, axis=1) + 0.0, (n, n))
    rev_plus = _kernel(lambda x, y: svod.flip(x, axis=1) + y, (n, n), (n, n))
    assert model.price(rev_plus).seconds > 1.2 * model.price(rev_alone).seconds


def test_transposed_weight_is_priced_by_its_packing(model):
    """The GEMM packs B whatever its layout: a transposed B costs its gather once per row
    tile, not a slower rate for every multiply-add — a big x @ w.T is priced near x @ w
    (measured 6.4 ms against 6.1 here), a small one relatively dearer."""
    def pair(m, k, n):
        return (kfeatures(stepprobes._matmul_kernel(m, k, n, library=False, b_t=True)),
                kfeatures(stepprobes._matmul_kernel(m, k, n, library=False)))

    from svod.codegen.schedule import plan_gemm

    big_t, big_c = pair(1024, 512, 768)
    assert big_t.matmul_strided and not big_c.matmul_strided and not big_t.library
    g = plan_gemm(stepprobes._matmul_kernel(1024, 512, 768, library=False, b_t=True))
    assert big_t.b_packed == g.batch * g.tiles_m * 512 * 768 and big_c.b_packed == 0
    ratio_big = model.compute(big_t) / model.compute(big_c)
    small_t, small_c = pair(64, 64, 128)
    assert 1.0 < ratio_big < 1.2 < model.compute(small_t) / model.compute(small_c)


def test_blas_step_with_a_transposed_operand_is_priced_at_the_measured_slowdown(prof):
    """OpenBLAS packs a transposed B from its other layout: calibrate times the BLAS step
    both ways side by side and the model charges the ratio to library steps whose B is
    transposed (x @ w.T, read in place). A profile without the pair prices both alike; the
    fit keeps the ratio within [1, 1.5]."""
    plain = stepprobes._matmul_kernel(1024, 512, 768, library=True)
    trans = stepprobes._matmul_kernel(1024, 512, 768, library=True, b_t=True)
    assert kfeatures(trans).matmul_strided and not kfeatures(plain).matmul_strided
    before = CalibratedModel(prof)
    assert before.price(trans).seconds == pytest.approx(before.price(plain).seconds)
    with_pair = CalibratedModel(Profile.from_json({**prof.data, "blas_trans_factor": 1.04}))
    assert with_pair.price(trans).seconds == pytest.approx(1.04 * with_pair.price(plain).seconds, rel=0.01)
    assert with_pair.price(plain).seconds == pytest.approx(before.price(plain).seconds)
    for measured, kept in ((0.97, 1.0), (1.04, 1.04), (3.0, 1.5)):
        raw = {"blas_trans": {"factor": measured}}
        assert calibrate.fit(raw, 2)["blas_trans_factor"] == kept


def test_blas_rates_come_from_side_by_side_ratios_to_the_gemm():
    """The BLAS step's rate curve is the GEMM's all-core rate over the measured time ratio
    of the two at each probe product (what the search chooses between is one against the
    other); without the pairs, the separately timed BLAS probes give the curve."""
    mm = {"native": 1e11, "native2:1024": 2e11, "blas:1024": 1.9e11}
    raw = {"matmul:" + k: {"seconds": 1.0, "median": 1.0, "flops": v, "read_bytes": 4e6, "write_bytes": 4e6}
           for k, v in mm.items()}
    raw["blas_pairs"] = {"1024": {"ratio": 1.04, "flops": 2.0 * 1024 ** 3, "bytes": 12 << 20},
                         "k64": {"ratio": 0.5, "flops": 2.0 ** 28, "bytes": 10 << 20}}
    prof = calibrate.fit(raw, 2)
    curve = {round(float(k), 1): v for k, v in prof["blas_flops"].items()}
    assert curve == {170.7: pytest.approx(2e11 / 1.04), 25.6: pytest.approx(4e11)}
    del raw["blas_pairs"]
    assert list(calibrate.fit(raw, 2)["blas_flops"].values()) == [pytest.approx(1.9e11)]


def test_cache_hold_is_fitted_from_its_probe():
    """calibrate's cache-hold curve: the share still cached after each wait, from a read
    timed right after a warm call, after the wait and after a sweep past the L3 (clipped,
    non-increasing); the fit stores it as it is, and a profile without it has none."""
    waited = {a: t for a, t in zip(calibrate.HOLD_AGES, (1.2, 1.0, 2.0, 4.0, 3.0, 2.9, 3.0))}
    got = calibrate.hold_shares(1.0, 3.0, waited)
    assert list(got) == [repr(a) for a in calibrate.HOLD_AGES]
    assert list(got.values()) == [0.9, 0.9, 0.5, 0.0, 0.0, 0.0, 0.0]
    assert calibrate.fit({"cache_hold": got}, 2)["cache_hold"] == got
    assert "cache_hold" not in calibrate.fit({}, 2)
    model = CalibratedModel(Profile.from_json({**profile.reference().data, "cache_hold": got}))
    assert model.hold(0.75e-3) == pytest.approx(0.7) and model.hold(3e-3) == 0.0


def test_gemm_epilogue_matrix_is_priced_at_its_measured_cost(prof):
    """A generated GEMM reading a full matrix in its epilogue (``a @ b + c`` as one kernel)
    pays calibrate's measured seconds per epilogue byte on top of the product, split over
    its threads; a row bias is bytes too (few); the BLAS step has no epilogue; profiles
    without the probe price as before."""
    m, k, n = stepprobes.EPILOGUE_SHAPE
    epi = stepprobes._epilogue_kernel(m, k, n)
    plain = stepprobes._matmul_kernel(m, k, n, library=False)
    assert kfeatures(epi).epilogue_read_bytes == 4 * m * n
    assert kfeatures(plain).epilogue_read_bytes == 0
    assert kfeatures(stepprobes._matmul_kernel(m, k, n, library=True)).epilogue_read_bytes == 0
    bias = kfeatures(matmul_bias_gelu_kernel(64, 32, 48))
    assert bias.epilogue_read_bytes == 4 * 48
    assert calibrate.fit({"epilogue": {"seconds_per_byte": 7e-11}}, 2)["epilogue_seconds"] == 7e-11
    assert "epilogue_seconds" not in calibrate.fit({}, 2)
    base = CalibratedModel(prof)
    with_probe = CalibratedModel(Profile.from_json({**prof.data, "epilogue_seconds": 7e-11}))
    cores = max(1, prof.cores)
    for te in sorted({1, cores}):
        f = kfeatures(epi)
        extra = with_probe.seconds(f, te) - base.seconds(f, te)
        assert extra == pytest.approx(4 * m * n * 7e-11 * cores / te)
        assert with_probe.seconds(kfeatures(plain), te) == base.seconds(kfeatures(plain), te)


def test_a_products_run_ages_the_caches_at_its_measured_rate(prof, monkeypatch):
    """calibrate's matmul_age_factor: a product's seconds count that many times over on
    the hold curve, so the kernel reading the BLAS step's output right after it is priced
    colder than with idle aging; the fit inverts the hold curve; profiles without the
    probe (the checked-in one) price as before; kernels that are not products age at 1."""
    from svod.key import compact
    from svod.lower import lower

    assert "matmul_age_factor" not in prof.data
    hold = {"0.001": 0.9, "0.004": 0.5, "0.016": 0.0}
    raw = {"cache_hold": hold, "matmul_aging": {"gemm": {"share": 0.9, "seconds": 2e-3, "read": 0.0},
                                                "blas": {"share": 0.5, "seconds": 4e-3, "read": 1e-4}}}
    fitted = calibrate.fit(raw, 2)["matmul_age_factor"]
    assert fitted["gemm"] == 1.0  # the curve's own age: the run ages like idle time
    assert fitted["blas"] == pytest.approx((2 * 4e-3 - 1e-4) / 4e-3, abs=1e-3)
    assert "matmul_age_factor" not in calibrate.fit({"cache_hold": hold}, 2)

    x = svod.asarray(np.ones((256, 128), np.float32))
    w = svod.asarray(np.ones((192, 128), np.float32))
    key, _ = compact([((x @ w.T) * 0.125).uop])
    mm = next(i for i, n in enumerate(key.nodes) if n.op.name == "MATMUL")
    monkeypatch.setenv("SVOD_BARE_GEMM", "0")  # the BLAS step on any host (an AVX-512 one may price the GEMM)
    plan = lower(key, {mm})  # the BLAS step, then the scale kernel reading its output
    assert plan.kernels[0].matmul.library and plan.kernels[1].matmul is None
    data = {**prof.data, "cache_hold": {"0.0001": 0.9, "0.001": 0.2, "0.01": 0.0}}
    base = CalibratedModel(Profile.from_json(data))
    aged = CalibratedModel(Profile.from_json({**data, "matmul_age_factor": {"blas": 3.0, "gemm": 1.0}}))
    assert aged.aging(plan.kernels[0]) == 3.0 and aged.aging(plan.kernels[1]) == 1.0
    p0, p1 = base.price_plan(plan), aged.price_plan(plan)
    assert p1[1].seconds > p0[1].seconds  # the scale kernel reads a colder input
    assert CalibratedModel(prof).price_plan(plan) == CalibratedModel(
        Profile.from_json({**prof.data, "matmul_age_factor": {}})).price_plan(plan)


def test_gemm_epilogue_row_operand_is_a_broadcast(model):
    """softmax(a @ b) with the matmul recomputed under `- max`: the row max reaches the
    GEMM epilogue as a view constant along n (stride 0), a broadcast, not a strided gather
    (it was priced 3x the product itself)."""
    import search.oracle
    from costmodels.targets import workload_target

    t = workload_target("batched_matmul_softmax", small=True)
    found = 0
    for c in search.oracle.all_covers(t.key, model, max_choices=12):
        for k in c.plan.kernels:
            if k.matmul is None or k.matmul.library or len(k.inputs) < 3:
                continue
            found += 1
            inner = len(k.shape) - 1
            for i, inp in enumerate(k.inputs):
                if i not in (k.matmul.a, k.matmul.b) and inp.view.views[-1].strides[inner] == 0:
                    assert features.access_class(k, i) == "bcast"
            assert "strided" not in kfeatures(k).access
    assert found


def test_library_call_mix_is_priced(model):
    both = kfeatures(_kernel(lambda x: svod.exp(svod.tanh(x)), (1 << 16,)))
    tanh = kfeatures(_kernel(lambda x: svod.tanh(x), (1 << 16,)))
    exp = kfeatures(_kernel(lambda x: svod.exp(x), (1 << 16,)))
    if both.calls:  # libmvec present: tanh is a call, exp inline around it costs more
        assert model.compute(both) > model.compute(tanh) + model.compute(exp) - 1e-12


# ----------------------------------------------------------------------------- tuning database, measured model


def test_generation_token_changes_on_every_bump(mem_store):
    db = TuningDB(mem_store)
    seen = {db.generation()}
    for _ in range(3):
        seen.add(db.bump())
        assert db.generation() in seen
    assert len(seen) == 4


def test_measured_figure_wins_over_the_estimate(model, mem_store):
    db = TuningDB(mem_store)
    k = softmax_kernel(128, 128)
    est = MeasuredModel(model, db).price(k)
    assert est == model.price(k)  # nothing measured: the estimate
    db.put_kernel(k, 1, measure.Timing(1.5e-3, 1.6e-3, 3, 1), predicted=est.seconds)
    db.put_kernel(k, 2, measure.Timing(2.5e-3, 2.6e-3, 3, 1), predicted=est.seconds)
    m = MeasuredModel(model, db)
    assert m.price(k) == Price(1.5e-3, 1)
    assert m.measured_fraction([k, softmax_kernel(8, 8)]) == 0.5


def test_measured_model_measures_each_kernel_once(model, mem_store, monkeypatch):
    calls = []

    def fake_time(kernel, threads=1, **kw):
        calls.append((kernel.key(), threads))
        return measure.Timing(1e-4 * threads, 1e-4, 3, 1)

    monkeypatch.setattr(measure, "time_kernel", fake_time)
    db = TuningDB(mem_store)
    m = MeasuredModel(model, db, measure=True)
    ks = [softmax_kernel(512, 512), softmax_kernel(4, 4)]
    first = m.price_batch(ks)
    assert first[0] == Price(1e-4, 1)
    m2 = MeasuredModel(model, db, measure=True)
    assert m2.price_batch(ks) == first and m2.measured_now == 0
    assert len(calls) == len(set(calls)) == sum(len(m.thread_options(k)) for k in ks)
    rows = db.kernel_rows()
    assert {r["threads"] for r in rows} <= {1, model.profile.cores}
    assert all("features" in r and r["seconds"] > 0 for r in rows)


def test_default_model_and_generation_follow_the_environment(monkeypatch):
    monkeypatch.setenv("SVOD_COST_MODEL", "roofline")
    assert tuning.default_model().name == "roofline" and tuning.generation() == "roofline"
    monkeypatch.setenv("SVOD_COST_MODEL", "calibrated")
    assert isinstance(tuning.default_model(), CalibratedModel) and tuning.generation().startswith("c")
    monkeypatch.delenv("SVOD_COST_MODEL")
    assert isinstance(tuning.default_model(), MeasuredModel) and tuning.generation().startswith("m")


def test_engine_plans_with_the_measured_model_and_rekeys_on_tuning(tmp_path, monkeypatch):
    from svod import engine, planner
    from svod.store import reset_default_store

    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    reset_default_store()
    profile.forget()
    try:
        assert isinstance(engine.cost_model(), MeasuredModel)
        x = svod.random.randn(64, 64)
        key, exe = engine.plan_for([svod.nn.softmax(x)])
        k1 = planner.plan_store_key(key)
        assert engine.cost_model() is engine.cost_model()  # one model per generation
        old = engine.cost_model()
        TuningDB().bump()
        assert planner.plan_store_key(key) != k1 and engine.cost_model() is not old
    finally:
        reset_default_store()
        profile.forget()


def test_realize_uses_a_tuned_plan(tmp_path, monkeypatch):
    from svod import engine
    from svod.key import compact
    from svod.lower import lower
    from svod.store import reset_default_store

    monkeypatch.setenv("SVOD_CACHE_DIR", str(tmp_path / "cache"))
    reset_default_store()
    try:
        x = svod.asarray(np.linspace(-2, 2, 96, dtype=np.float32).reshape(8, 12))
        y = svod.exp(x) * 2.0 + 1.0
        key, _ = compact([y.uop])
        computed = {i for i, n in enumerate(key.nodes) if n.op.name in ("EXP", "MUL")}
        slow = lower(key, computed)  # 3 kernels: what the search would never pick
        db = TuningDB()
        db.put_choice(key.hash, slow, {"sig": tuning.plan_signature(slow), "seconds": 1.0})
        db.bump()
        engine.reset_caches()
        _, exe = engine.plan_for([svod.exp(x) * 2.0 + 1.0])
        assert len(exe.plan.kernels) == 3
        np.testing.assert_allclose((svod.exp(x) * 2.0 + 1.0).numpy(), np.exp(x.numpy()) * 2 + 1, rtol=1e-6)
    finally:
        engine.reset_caches()
        reset_default_store()


# ----------------------------------------------------------------------------- learned correction


def _rows(n, factor, noise, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        size = float(2 ** rng.integers(10, 24))
        f = {"size": size, "units": size / 1024, "read_bytes": 8 * size, "write_bytes": 4 * size,
             "op:EXP": size * rng.integers(0, 3), "passes": 1.0}
        pred = 1e-9 * size
        out.append({"key": f"k{i}", "kind": "elementwise", "threads": 1, "features": f, "predicted": pred,
                    "seconds": pred * factor(f) * math.exp(noise * rng.standard_normal())})
    return out


def test_learned_correction_is_used_only_where_it_helps():
    # a systematic error that depends on the features: the fit is kept and helps
    c = learned.fit(_rows(60, lambda f: 2.0 if f["op:EXP"] else 0.7, 0.05))
    g = c.groups["elementwise"]
    assert g["used"] and g["cv_after"] < g["cv_before"]
    rt = learned.Correction.from_json(json.loads(json.dumps(c.to_json())))
    row = _rows(1, lambda f: 1.0, 0.0, seed=5)[0]
    assert rt.factor_row(row) == pytest.approx(c.factor_row(row))
    # pure noise: nothing to learn, the correction stays off
    c2 = learned.fit(_rows(60, lambda f: 1.0, 0.3, seed=1))
    assert not c2.groups["elementwise"]["used"]
    # too few rows: off
    assert not learned.fit(_rows(5, lambda f: 3.0, 0.0)).groups["elementwise"]["used"]
    assert "not used" in c2.describe()


# ----------------------------------------------------------------------------- calibrate and report (smoke)


def test_calibrate_smoke_with_a_few_probes(monkeypatch, mem_store):
    """A tiny calibration (three probes, short budgets): the pipeline, not the numbers."""
    few = [calibrate.Probe("copy:1048576:1", lambda: [stepprobes.one_kernel(calibrate._add1, (1 << 17,))], 1, 0.01),
           calibrate.Probe("op:NONE:f32", lambda: [stepprobes.one_kernel(calibrate._repeat("NONE", 4), (4096,))],
                           1, 0.01),
           calibrate.Probe("op:EXP:f32", lambda: [stepprobes.one_kernel(calibrate._repeat("EXP", 4), (4096,))],
                           1, 0.01)]
    monkeypatch.setattr(calibrate, "probes", lambda quick=False: few)
    monkeypatch.setattr(calibrate, "_launch_cost", lambda: 5e-8)
    monkeypatch.setattr(calibrate, "_alloc_cost", lambda: 1e-6)
    monkeypatch.setattr(calibrate, "_blas_transposed_cost", lambda: 1.04)
    p = calibrate.calibrate(progress=False, budget=0.5, rounds=1, save=False)
    assert p.op_seconds["EXP"] > 0 and p.bandwidth["copy1"] and p.launch_seconds == 5e-8
    assert p.get("blas_trans_factor") == 1.04
    assert "EXP" in digest.summary(p)
    profile.save(p, mem_store)
    assert mem_store.get_json("profiles", profile.STORE_KEY)["op_seconds"]["EXP"] == p.op_seconds["EXP"]
    assert analytic.CalibratedModel(p).price(softmax_kernel(8, 8)).seconds > 0
    profile.forget()


def test_report_smoke_on_a_small_workload(model):
    import search.oracle
    from costmodels import report

    rows = report.report(model, search.oracle, names=["w2_softmax", "w6_reductions"], small=True, max_variants=3,
                         repeats=4, progress=False, budget=0.0)
    assert [r.workload for r in rows] == ["w2_softmax", "w6_reductions"]
    for r in rows:
        assert r.measured_variants == 3 == len(r.measured) == len(r.predicted)
        assert r.rounds == 4 and 1 <= r.groups <= 3
        assert r.pick_ratio >= 1.0 and -1.0 <= r.spearman_raw <= 1.0
        # variants the timing cannot tell apart, or priced equal, or a timing that twice
        # disagreed with itself, have no rank order to match: n/a, said in the note
        nothing_to_rank = r.groups == 1 or r.note.startswith(("variants priced equal", "unresolved"))
        assert (nothing_to_rank and math.isnan(r.spearman)) or -1.0 <= r.spearman <= 1.0
        assert r.predicted[r.pick] == min(r.predicted)
    text = report.format_report(rows, "calibrated")
    assert "w2_softmax" in text and "mean Spearman" in text and "noise ceiling" in text
    assert json.dumps([r.to_json() for r in rows])


def _fake_rounds(per_variant):
    """A `time_rounds` stand-in: runner r's times are per_variant(variant of r, instance of r)
    (variants numbered by plan in the order first seen, instances by build order)."""
    def fake(runners, repeats=7, **_):
        ids, seen, out = {}, {}, []
        for r in runners:
            j = ids.setdefault(id(r.plan), len(ids))
            inst = seen[j] = seen.get(j, -1) + 1
            out.append(list(per_variant(j, inst, repeats)))
        fake.calls.append(len(runners))
        return out

    fake.calls = []
    return fake


def test_report_counts_each_variant_at_its_fastest_instance(model, monkeypatch):
    """Each variant is built `instances` times; an instance that lands badly (placement,
    not the variant) does not count."""
    import search.oracle
    from costmodels import report

    fake = _fake_rounds(lambda j, inst, n: [1e-3 * (1 + j) * (1.5 if inst == 0 else 1.0)] * n)
    monkeypatch.setattr(report, "time_rounds", fake)
    rows = report.report(model, search.oracle, names=["w2_softmax"], small=True, max_variants=4, repeats=4,
                         progress=False, budget=0.0, instances=3)
    assert fake.calls == [4 * 3]
    assert sorted(round(m * 1e3, 6) for m in rows[0].measured) == [1.0, 2.0, 3.0, 4.0]


def test_report_spends_a_heavy_workloads_budget_on_rounds():
    """Separate builds of each variant while `MIN_ROUNDS` rounds of them fit the budget;
    past that, fewer builds and at least `MIN_ROUNDS` rounds (a GEMM-bound workload's
    variants differ by a few percent: its medians need the rounds). Budget 0: as asked."""
    from costmodels import report

    calls = []

    def runner():
        calls.append(1)
        time.sleep(0.01)

    runners = [runner] * 3  # a round of one build: >= 30 ms
    assert report._instances_for(runners, 3, 7, budget=100.0) == (3, 7)
    assert len(calls) == 6  # each runner once untimed, once timed
    assert report._instances_for(runners, 3, 7, budget=0.1) == (1, report.MIN_ROUNDS)
    assert report._instances_for(runners, 3, 7, budget=0.0) == (3, 7)
    assert len(calls) == 12


def test_report_times_a_doubtful_workload_again(model, monkeypatch):
    """Odd and even rounds that rank the variants differently (split-half Spearman 0.2 <
    0.7): timed again with twice the budget; still so, the Spearman is n/a (unresolved)."""
    import search.oracle
    from costmodels import report

    even, odd = [1.0, 2.0, 3.0, 10.0], [3.0, 2.0, 1.0, 10.0]
    fake = _fake_rounds(lambda j, inst, n: [1e-3 * (even if r % 2 == 0 else odd)[j] for r in range(n)])
    monkeypatch.setattr(report, "time_rounds", fake)
    rows = report.report(model, search.oracle, names=["w2_softmax"], small=True, max_variants=4, repeats=4,
                         progress=False, budget=0.0, instances=1)
    r = rows[0]
    assert len(fake.calls) == 2 and r.reruns == 1 and r.noise == pytest.approx(0.2)
    assert math.isnan(r.spearman) and r.note.startswith("unresolved") and not math.isnan(r.spearman_raw)
    assert report.summary(rows)["unresolved"] == 1 and "1 unresolved" in report.format_report(rows)
    fake2 = _fake_rounds(lambda j, inst, n: [1e-3 * even[j]] * n)  # agrees with itself: measured once
    monkeypatch.setattr(report, "time_rounds", fake2)
    r = report.report(model, search.oracle, names=["w2_softmax"], small=True, max_variants=4, repeats=4,
                      progress=False, budget=0.0, instances=1)[0]
    assert len(fake2.calls) == 1 and r.reruns == 0 and not math.isnan(r.spearman) and not r.note
    from svod.cli import build_parser  # the CLI's default is the report's

    assert build_parser().parse_args(["costmodel", "report"]).doubt == report.DOUBT == 0.7


def test_prices_within_a_tenth_of_a_percent_are_one_price(model, monkeypatch):
    """A model that prices every variant the same (to 0.1%) has no ranking to compare: the
    Spearman is n/a, the pick still counts."""
    import search.oracle
    from costmodels import report

    assert report.priced_ranks([5.0, 5.004, 5.001, 6.0]) == [2.0, 2.0, 2.0, 4.0]
    assert report.priced_ranks([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]

    class Flat:
        def price_batch(self, kernels, machine=None):
            return [Price(1e-3 + 1e-9 * len(kernels), 1)] + [Price(1e-9, 1)] * (len(kernels) - 1)

    fake = _fake_rounds(lambda j, inst, n: [1e-3 * (1 + j)] * n)
    monkeypatch.setattr(report, "time_rounds", fake)
    r = report.report(Flat(), search.oracle, names=["w2_softmax"], small=True, max_variants=4, repeats=4,
                      progress=False, budget=0.0, instances=1)[0]
    assert r.groups == 4 and math.isnan(r.spearman) and r.note.startswith("variants priced equal")
    assert r.pick_ratio >= 1.0 and not math.isnan(r.spearman_raw)
    assert report.summary([r])["priced_equal"] == 1


def test_spearman_and_robust_medians():
    assert measure.spearman([1, 2, 3], [3, 2, 1]) == -1.0
    assert measure.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9487, abs=1e-3)
    assert math.isnan(measure.spearman([1], [1]))
    t = measure.robust_medians([[1.0, 10.0, 1.0], [2.0, 20.0, 2.0]])
    assert t[1] == pytest.approx(2 * t[0])


def test_resolved_ranks_tie_what_the_timing_cannot_tell_apart():
    same = [1.0, 1.02, 0.98, 1.0, 1.01]
    times = [same, [v * 1.001 for v in same], [v * 1.5 for v in same], [v * 1.02 for v in same]]
    assert measure.resolved_ranks(times) == [2.0, 2.0, 4.0, 2.0]  # within 3%: one group
    assert measure.resolved_ranks(times, rel=0.0) == [1.0, 2.0, 4.0, 3.0]  # noise-free rounds resolve 0.1%
    noisy = [[1.0, 1.3, 0.8, 1.1], [1.05, 0.9, 1.25, 1.0]]
    assert measure.resolved_ranks(noisy, rel=0.0) == [1.5, 1.5]  # 5% apart, far inside the noise


def test_steady_takes_a_slow_spell_within_a_round_out():
    """24 runners of true times 1.00, 1.05, ... in shuffled rounds; in every round the
    machine runs 1.5x slower for 8 consecutive timings (another guest took the core).
    Divided by the round's median, which runners landed in the spell decides their
    medians; divided by their neighbours' slowness, the true times come back."""
    import random

    rng = random.Random(1)
    true = [1.0 + 0.05 * i for i in range(24)]
    times = measure.RoundTimes([[] for _ in true])
    for _ in range(9):
        order = list(range(len(true)))
        rng.shuffle(order)
        times.order.append(order)
        start = rng.randrange(0, 16)
        for pos, j in enumerate(order):
            times[j].append(true[j] * (1.5 if start <= pos < start + 8 else 1.0))
    local = measure.robust_medians(times)
    assert [m / local[0] for m in local] == pytest.approx(true, rel=0.01)
    by_round = measure.robust_medians([list(t) for t in times])  # no order: round medians
    assert max(abs(m / by_round[0] - t) / t for m, t in zip(by_round, true)) > 0.2
    assert measure.spearman(local, true) == 1.0 and measure.spearman(by_round, true) < 0.95


def test_time_rounds_records_each_rounds_order():
    runs = []
    times = measure.time_rounds([lambda i=i: runs.append(i) for i in range(4)], repeats=3, target=1e-5)
    assert len(times.order) == 3 and all(sorted(o) == [0, 1, 2, 3] for o in times.order)


def test_time_rounds_can_time_each_runner_in_its_steady_state():
    """A runner whose first call after another runner is slow (its data evicted) is timed
    at its steady cost when each batch is warmed by an untimed call (warm=True), and with
    the cold call averaged in when it is not (the default)."""
    import time as _time

    last = [None]

    def runner(j):
        def run():
            _time.sleep(0.02 if last[0] != j else 0.0005)
            last[0] = j
        return run

    runners = [runner(0), runner(1)]
    warm = measure.robust_medians(measure.time_rounds(runners, repeats=3, target=2e-3, warm=True))
    cold = measure.robust_medians(measure.time_rounds(runners, repeats=3, target=2e-3, warm=False))
    # relative, not absolute: a loaded CI machine oversleeps 0.5 ms by as much again; a
    # cold batch carries one 20 ms call, so its mean is several times the warm cost
    assert max(warm) < 0.4 * min(cold)


def test_time_rounds_adds_rounds_within_the_budget():
    calls = []
    times = measure.time_rounds([lambda: calls.append(1)], repeats=3, target=1e-5, budget=0.0)
    assert len(times[0]) == 3
    times = measure.time_rounds([lambda: None, lambda: None], repeats=3, target=1e-5, budget=10.0, max_repeats=7)
    assert [len(t) for t in times] == [7, 7]


def test_sibling_column_reductions_share_their_read(model):
    import svod
    from costmodels.stepprobes import one_kernel

    both = one_kernel(lambda a: (svod.sum(a, axis=0), svod.max(a, axis=0)), (4096, 4096))
    one_sum = one_kernel(lambda a: svod.sum(a, axis=0), (4096, 4096))
    one_max = one_kernel(lambda a: svod.max(a, axis=0), (4096, 4096))
    f, s1, s2 = (model.price(k).seconds for k in (both, one_sum, one_max))
    assert max(s1, s2) < f < s1 + s2  # fused: one pass over the rows, two reductions
    from costmodels.features import features

    fb = features(both)
    assert fb.column
    # a DRAM-sized column reduction gains from a second thread only what streaming gains
    assert model.seconds(fb, 2) >= model.seconds(fb, 1) / model._stream_scaling(fb) * 0.99


def test_relocated_plan_runner_runs_its_own_copy_of_the_code():
    import svod.codegen.program as P
    from costmodels.targets import workload_target
    from svod.plan_greedy import plan_greedy

    t = workload_target("w2_softmax", small=True)
    plan = plan_greedy(t.key)
    shared, moved = measure.PlanRunner(plan, t.arrays), measure.PlanRunner(plan, t.arrays, relocate=True)
    for a, b in zip(shared(), moved()):
        np.testing.assert_array_equal(a, b)
    mine = [p.address for p in moved.program.programs if isinstance(p, P.NativeProgram)]
    theirs = {P.compile_kernel(k).address for k in plan.kernels}
    assert mine and not set(mine) & theirs


def test_time_kernel_reports_a_positive_minimum():
    t = measure.time_kernel(softmax_kernel(16, 64), threads=1, budget=0.02)
    assert 0 < t.seconds <= t.median and t.runs >= 1
    assert os.environ.get("SVOD_CACHE_DIR")  # the store stays the tests' temporary one


def test_batch_is_sized_from_warm_calls_not_a_slow_one(monkeypatch):
    """A program whose early calls are slow (state built on the first run, the replay
    closure compiled on the second) gets a batch sized from its steady calls."""
    from costmodels import measure

    clock = [0.0]
    calls = [0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])

    def fn():
        calls[0] += 1
        clock[0] += 1e-3 if calls[0] in (1, 2, 5) else 5e-6  # call 5: a hiccup while sizing

    n = measure._batch(fn, 2e-3)
    assert 300 <= n <= 500  # ~2 ms / 5 µs, not 2 ms / 1 ms
