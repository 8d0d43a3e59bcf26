"""The reach of a plan's buffer accesses (costmodels.reuse) and pricing kernels in their
plan (CalibratedModel.price_plan, svod.costing.plan_prices)."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

import svod
from costmodels.analytic import CalibratedModel
from costmodels.features import features
from costmodels.profile import Profile
from costmodels.reuse import ages, plan_accesses
from costmodels.tuning import MeasuredModel, TuningDB
from svod.costing import Machine, Price, RooflineModel, plan_prices, plan_seconds
from svod.graph import assign_storages, build_graph
from svod.key import compact
from svod.lower import lower
from svod.store import Store

PROFILE = Profile.load(Path(__file__).resolve().parent / "machine_profile.json")
F32 = 4


def _plan(fn, *shapes, cut=()):
    """Plan of fn(*inputs) with the named ops (by op name) made kernel boundaries."""
    xs = [svod.asarray(np.ones(s, np.float32)) for s in shapes]
    ys = fn(*xs)
    key, _ = compact([y.uop for y in (ys if isinstance(ys, tuple) else (ys,))])
    return lower(key, {i for i, n in enumerate(key.nodes) if n.op.name in cut})


def test_one_kernel_reaches_its_own_working_set():
    # the calibration's case: a kernel looped alone touches its whole working set between
    # two touches of any line
    plan = _plan(lambda a, b: a * b + 1.0, (256, 256), (256, 256))
    [acc] = plan_accesses(plan)
    ws = features(plan.kernels[0]).working_set
    assert [a.write for a in acc] == [False, False, True]
    assert all(a.reach == ws for a in acc)


def test_a_temp_read_right_after_its_write_reaches_over_the_two_kernels():
    n = 1 << 16
    plan = _plan(lambda a: svod.exp(a * 2.0), (n,), cut=("MUL",))
    assert len(plan.kernels) == 2
    first, second = plan_accesses(plan)
    own0, own1 = 2 * n * F32, 2 * n * F32
    temp_write = [a for a in first if a.write][0]
    temp_read = [a for a in second if not a.write][0]
    assert temp_read.slot == temp_write.slot
    assert temp_read.reach == (own0 + own1) / 2
    # the graph input is read by the first kernel only: it reaches back around the run,
    # over the output the second kernel writes
    x_read = [a for a in first if not a.write][0]
    assert x_read.reach == own0 + n * F32


def test_reach_counts_shared_storage_once():
    # temps whose lives do not overlap share a storage (svod.graph): the third temp takes
    # over the first's, and its write reaches back to the read that freed it
    n = 1 << 14
    plan = _plan(lambda a: svod.exp(svod.sqrt(a * 2.0) + 1.0), (n,), cut=("MUL", "SQRT", "ADD"))
    st = assign_storages(plan)
    g = build_graph(plan)
    assert st.slot_storage == g.slot_storage and st.storage_bytes == g.storage_bytes
    acc = plan_accesses(plan)
    storages = [a.storage for k in acc for a in k]
    assert len(set(storages)) < len(storages)  # some buffer is touched twice
    assert len({a.storage for k in acc for a in k if a.storage[0] == "st"}) < \
        len({a.slot for k in acc for a in k if a.slot >= plan.n_inputs})  # and temps share


def test_ages_are_the_reach_in_seconds():
    # a temp written by kernel 0 and read by kernel 1 was touched half of each kernel's
    # run ago; a buffer only one kernel touches was touched a whole run ago
    n = 1 << 16
    plan = _plan(lambda a: svod.exp(a * 2.0), (n,), cut=("MUL",))
    first, second = plan_accesses(plan)
    temp_read = [a for a in second if not a.write][0]
    x_read = [a for a in first if not a.write][0]
    assert temp_read.prev == 0 and x_read.prev == 0
    (a_x, a_t0), (a_t1, a_out) = ages([first, second], [3e-3, 1e-3])
    assert a_t1 == pytest.approx(2e-3) and a_x == pytest.approx(4e-3) and a_out == pytest.approx(4e-3)


def _with_hold(hold):
    data = copy.deepcopy(PROFILE.data)
    data.pop("cache_hold", None)
    if hold is not None:
        data["cache_hold"] = hold
    return CalibratedModel(Profile.from_json(data))


def test_hold_interpolates_the_calibrated_shares():
    m = _with_hold({"0.001": 0.9, "0.004": 0.3, "0.016": 0.0})
    assert m.hold(0.0) == 1.0 and m.hold(5e-4) == pytest.approx(0.95)
    assert m.hold(2.5e-3) == pytest.approx(0.6) and m.hold(1.0) == 0.0
    assert _with_hold(None).hold(1.0) == 1.0  # profiles without the probe: the caches hold


def test_a_temp_read_long_after_its_write_is_priced_from_further_away():
    # y = relu(x @ w): the temp between a 1024^3 matmul and its elementwise consumer was
    # written milliseconds before it is read; where the caches lose what is left alone
    # for that long, the consumer pays DRAM bandwidth; a temp read right after a short
    # kernel is priced as before
    plan = _plan(lambda a, b: svod.maximum(a @ b, 0.0), (1024, 1024), (1024, 1024), cut=("MATMUL",))
    assert len(plan.kernels) == 2
    keep, lose = _with_hold(None), _with_hold({"0.001": 1.0, "0.002": 0.0})
    p_keep, p_lose = keep.price_plan(plan), lose.price_plan(plan)
    assert p_lose[1].seconds > 1.5 * p_keep[1].seconds
    short = _plan(lambda a: svod.exp(a * 2.0), (1 << 12,), cut=("MUL",))
    assert lose.price_plan(short) == keep.price_plan(short)
    assert _with_hold({"0.001": 1.0, "0.002": 0.0}).price_plan(plan) == p_lose  # deterministic


def test_price_plan_of_one_kernel_is_its_price_without_a_footprint_factor():
    data = copy.deepcopy(PROFILE.data)
    data["footprint_factor"] = 1.0
    model = CalibratedModel(Profile.from_json(data))
    for shape in ((64, 64), (1024, 1024), (4096, 2048)):
        plan = _plan(lambda a, b: svod.tanh(a - b) * 3.0, shape, shape)
        assert len(plan.kernels) == 1
        assert model.price_plan(plan)[0] == model.price(plan.kernels[0])


def test_a_program_that_fits_the_l3_is_priced_from_it():
    # the same 4 MB-in, 4 MB-out elementwise kernel: in a program of its own its 8 MB stay
    # in the L3 between runs; beside a kernel that streams 128 MB they come from DRAM
    model = CalibratedModel(PROFILE)
    n = 1 << 20
    small = _plan(lambda a: a * 2.0 + 1.0, (n,))
    big = _plan(lambda a, b: (a * 2.0 + 1.0, svod.sqrt(b)), (n,), (16 * n,))
    p_small = model.price_plan(small)[0].seconds
    k = small.kernels[0]
    same = [i for i, kk in enumerate(big.kernels) if kk.key() == k.key()]
    assert same, "the big program runs the same kernel"
    p_big = model.price_plan(big)[same[0]].seconds
    assert p_big > 1.5 * p_small


def test_plan_prices_fall_back_to_pricing_kernels_alone():
    plan = _plan(lambda a: svod.exp(a * 2.0), (1 << 12,), cut=("MUL",))
    roof = RooflineModel()
    mach = Machine.host()
    assert plan_prices(plan, roof, mach) == roof.price_batch(list(plan.kernels), mach)
    assert plan_seconds(plan, roof, mach) == plan_seconds(plan.kernels, roof, mach)
    model = CalibratedModel(PROFILE)
    assert plan_prices(plan, model, mach) == model.price_plan(plan, mach)


def test_measured_model_prices_plans_with_its_measurements(tmp_path):
    plan = _plan(lambda a: svod.exp(a * 2.0), (1 << 12,), cut=("MUL",))
    store = Store(tmp_path / "s.sqlite")
    try:
        db = TuningDB(store)
        est = CalibratedModel(PROFILE)
        k0 = plan.kernels[0]

        class T:
            seconds, median, runs, calls = 1.25e-3, 1.25e-3, 3, 3

        for t in MeasuredModel(est, db, correction=False).thread_options(k0):
            db.put_kernel(k0, t, T, None)
        m = MeasuredModel(est, db, correction=False)
        got = m.price_plan(plan)
        assert got[0] == Price(1.25e-3, 1)
        assert got[1] == est.price_plan(plan)[1]
    finally:
        store.close()


@pytest.mark.parametrize("name", ["l2_normalize", "w2_softmax"])
def test_search_prices_variants_in_their_plans(name):
    # the search's variants carry the in-plan prices (what the report compares with timings)
    import search.oracle as oracle
    from costmodels.targets import workload_target

    t = workload_target(name, small=True)
    model = CalibratedModel(PROFILE)
    covers = oracle.all_covers(t.key, model, Machine.host(), max_choices=12)
    for c in covers[:6]:
        assert c.seconds == pytest.approx(sum(p.seconds for p in model.price_plan(c.plan)))
