"""The Ray measurement farm (costmodels.farm) on a real local Ray instance with 2 CPUs and
two 1-CPU actors — no mocks: tuning jobs spread over both actors and land in the tuning
database under the actors' machine fingerprint, a rerun resumes (measures nothing), a
killed actor's job is retried on its replacement (or reported), a job past its timeout
and a job that raises are reported while the run goes on; calibrate and costmodel report
on the farm; an unreachable address fails fast with a message.

Skipped when Ray is not installed (`pip install 'svod[distributed]'`; .ci/run installs it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from costmodels import profile  # noqa: E402
from costmodels.farm import FarmError, RayFarm  # noqa: E402
from costmodels.jobs import Job  # noqa: E402
from costmodels.tuning import KIND, TuningDB  # noqa: E402
from svod import engine  # noqa: E402
from svod.store import Store, machine_fingerprint, reset_default_store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "tests" / "machine_profile.json"


# ----------------------------------------------------------------------------- job functions the actors import


def slow(seconds: float) -> int:
    """A job that takes `seconds` and says which process ran it."""
    time.sleep(seconds)
    return os.getpid()


def broken(message: str) -> None:
    raise ValueError(message)


# ----------------------------------------------------------------------------- the farm


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """One local Ray instance (2 CPUs, two 1-CPU actors) for the module, over its own store."""
    cache = tmp_path_factory.mktemp("farm-cache")
    old = {k: os.environ.get(k) for k in ("SVOD_CACHE_DIR", "SVOD_PROFILE")}
    os.environ["SVOD_CACHE_DIR"] = str(cache)  # the actors inherit it: one store for all
    os.environ["SVOD_PROFILE"] = str(PROFILE)
    reset_default_store()
    profile.forget()
    f = RayFarm("local", num_cpus=2, actor_cpus=1)
    yield f
    f.close()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    reset_default_store()
    profile.forget()


def test_actors_report_their_machine(farm):
    assert len(farm.workers) == 2 and not farm.refused
    (g,) = farm.groups
    assert g.fingerprint == machine_fingerprint() and g.cpus == 1 and g.workers == 2
    assert {w.info["cpus"] for w in farm.workers} == {1}
    assert len({w.info["pid"] for w in farm.workers}) == 2
    assert "2 worker(s) x 1 CPU(s)" in farm.describe()


def test_tuning_spreads_over_both_actors_stores_rows_and_resumes(farm):
    from costmodels.analytic import CalibratedModel
    from costmodels.targets import workload_target
    from costmodels.tune import tune_farm
    from svod import cli

    target = workload_target("gelu", small=True)
    cands = cli._candidates(target, CalibratedModel(), 3, 4)
    (res,) = tune_farm(target, cands, farm, progress=False, repeats=3)
    assert not res.failures, res.failures
    assert len(res.workers) == 2 and all(n >= 1 for n in res.workers.values()), res.workers
    assert res.measured_now > 0 and res.chosen is not None
    assert all(v.measured is not None and v.measured > 0 for v in res.variants)
    # the rows are in the local database, under the actors' machine fingerprint only
    path = Path(os.environ["SVOD_CACHE_DIR"]) / "store-v1.sqlite"
    mine = Store(path, machine=farm.groups[0].fingerprint)
    keys = mine.keys(KIND)
    assert any(k.startswith("kernel:") for k in keys) and any(k.startswith("variant:") for k in keys)
    assert f"numpy:{target.key.hash}" in keys and f"choice:{target.key.hash}" in keys
    assert not Store(path, machine="x86_64-0000000000000000").keys(KIND)
    assert TuningDB(mine).get_choice(target.key.hash)["sig"] == res.variants[res.chosen].sig
    # a rerun measures nothing
    (again,) = tune_farm(target, cands, farm, progress=False, repeats=3)
    assert again.measured_now == 0 and not again.workers and again.chosen == res.chosen
    # realize() on this machine follows the choice the farm made
    engine.reset_caches()
    from svod import workloads
    from svod.engine import plan_for

    w = workloads.get("gelu")
    y = w.build(**w.tensors(w.make_inputs(w.small_shapes, 0)))
    from costmodels.tuning import plan_signature

    assert plan_signature(plan_for([y])[1].plan) == res.variants[res.chosen].sig
    mine.close()


def _kill_when_running(farm, pid_of_job: dict, after: float) -> threading.Thread:
    def kill():
        time.sleep(after)
        os.kill(pid_of_job["pid"], signal.SIGKILL)

    t = threading.Thread(target=kill, daemon=True)
    t.start()
    return t


def test_a_killed_actor_is_replaced_and_its_job_retried_or_reported(farm):
    g = farm.groups[0]
    victim = {"pid": farm.workers[-1].info["pid"]}  # the first job goes to the last idle actor
    jobs = [Job(f"slow{i}", "tests.test_farm:slow", {"seconds": 3.0}, f"slow {i}") for i in range(2)]
    killer = _kill_when_running(farm, victim, 1.0)
    results = {r.job.key: r for r in farm.run([(g, j) for j in jobs])}
    killer.join()
    assert all(r.ok for r in results.values()), {k: r.error for k, r in results.items()}
    retried = [r for r in results.values() if r.attempts == 2]
    assert len(retried) == 1 and retried[0].value != victim["pid"]
    assert len(farm.workers) == 2 and victim["pid"] not in {w.info["pid"] for w in farm.workers}
    # without retries the death is reported, and the run goes on
    farm.retries = 0
    try:
        victim["pid"] = farm.workers[-1].info["pid"]
        killer = _kill_when_running(farm, victim, 1.0)
        results = {r.job.key: r for r in farm.run([(g, j) for j in jobs])}
        killer.join()
    finally:
        farm.retries = 1
    failed = [r for r in results.values() if not r.ok]
    assert len(failed) == 1 and "died" in failed[0].error and failed[0].attempts == 1
    assert sum(r.ok for r in results.values()) == 1 and len(farm.workers) == 2


def test_timeouts_and_errors_are_reported_per_job(farm):
    g = farm.groups[0]
    jobs = [Job("late", "tests.test_farm:slow", {"seconds": 60.0}, "late", timeout=2.0),
            Job("bad", "tests.test_farm:broken", {"message": "no such kernel"}, "bad"),
            Job("ok", "tests.test_farm:slow", {"seconds": 0.1}, "ok")]
    t0 = time.monotonic()
    results = {r.job.key: r for r in farm.run([(g, j) for j in jobs])}
    assert time.monotonic() - t0 < 40
    assert "timed out after 2 s" in results["late"].error
    assert results["bad"].error.startswith("ValueError: no such kernel")
    assert results["ok"].ok and isinstance(results["ok"].value, int)
    assert len(farm.workers) == 2  # the timed-out actor was replaced


@pytest.mark.slow  # ~15 s: a quick calibration and two workloads' reports
def test_calibrate_and_report_on_the_farm(farm):
    from costmodels.farm import calibrate_farm, report_farm

    ((g, prof, err),) = calibrate_farm(farm, budget=1.0, quick=True, progress=False)
    assert err is None and prof.cores >= 1
    stored = g.db.store.get_json("profiles", profile.STORE_KEY)
    assert stored is not None and stored["machine"]["fingerprint"] == g.fingerprint

    counted = []

    class Counting:  # the same farm, counting the jobs it is given
        groups = farm.groups

        def run(self, pairs, pb=None):
            pairs = list(pairs)
            counted.append(len(pairs))
            return farm.run(pairs, pb)

    kw = {"small": True, "max_variants": 3, "repeats": 3, "budget": 0.2, "instances": 1, "progress": False}
    # NOTE: mean_var, not gelu: the accurate gelu has 44 free boundaries, past the report's --max-choices
    ((g, rows, failures),) = report_farm(Counting(), "search.oracle", ["mean_var", "w2_softmax"], **kw)
    assert not failures and [r.workload for r in rows] == ["mean_var", "w2_softmax"]
    assert all(r.measured_variants >= 2 and r.pick_ratio >= 1.0 for r in rows)
    ((_, again, _),) = report_farm(Counting(), "search.oracle", ["mean_var", "w2_softmax"], **kw)
    assert counted == [2, 0] and [r.measured for r in again] == [r.measured for r in rows]  # resumed
    with pytest.raises(ValueError, match="calibrated' or 'roofline"):
        report_farm(Counting(), "search.oracle", ["gelu"], model="measured", **kw)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_unreachable_address_fails_fast_with_a_message():
    port = _closed_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), SVOD_PROFILE=str(PROFILE))
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "svod", "tune", "gelu", "--small", "--ray", f"127.0.0.1:{port}"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"cannot reach a Ray cluster at 127.0.0.1:{port}" in p.stderr and "--ray local" in p.stderr
    assert time.monotonic() - t0 < 60
    with pytest.raises(FarmError, match="cannot read the Ray address"):
        from costmodels.farm import _host_port

        _host_port("host:port")


def test_docstring_examples():
    import doctest

    import costmodels.jobs
    import costmodels.targets

    assert doctest.testmod(costmodels.jobs).failed == 0 and doctest.testmod(costmodels.targets).failed == 0
