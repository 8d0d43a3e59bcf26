"""Measurement jobs: what `svod tune`, `svod calibrate` and `svod costmodel report` time,
as data, and where they run.

A `Job` names a function by import path (`"costmodels.jobs:time_kernel_job"`) and gives
it JSON arguments; its value is JSON too. So a job means the same in this process and on
a farm's worker on another machine (`costmodels.farm.RayFarm`), can be logged, and its
`key` says which result it produces (for tuning: the tuning-database row it fills). The
functions here run on the worker; the caller stores what they return (`costmodels.tune`
writes each row into the database of the machine that measured it).

A farm runs jobs on groups of identical machines (`MachineGroup`: one machine
fingerprint, one thread count per worker) and yields a `JobResult` per job as it
finishes — a failed job is a result with an `error`, never an exception that stops the
run. `LocalFarm` is this process: one group, jobs run one after another, in order (what
tuning did before farms existed).

>>> farm = LocalFarm()
>>> job = Job("demo", "json:dumps", {"obj": [1, 2]})
>>> [(r.ok, r.value) for r in farm.run([(farm.groups[0], job)])]
[(True, '[1, 2]')]
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Job:
    """One measurement: `fn` ("module:function") called with `args` (JSON data)."""

    key: str  # unique in a run: the result it produces (for tuning, the database row key)
    fn: str
    args: dict = field(default_factory=dict)
    label: str = ""  # what a progress bar shows
    timeout: float | None = None  # seconds on a farm's worker; None: the farm's default


@dataclass
class JobResult:
    job: Job
    value: Any = None
    error: str | None = None  # None: the job succeeded
    machine: str = ""  # machine fingerprint of the worker that ran it
    worker: str = ""  # which worker (host:pid)
    seconds: float = 0.0  # wall time of the last attempt
    attempts: int = 1

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class MachineGroup:
    """Workers on identical machines: timings taken on any of them are one machine's.
    `db` is the tuning database their results go to (keyed by `fingerprint`)."""

    fingerprint: str
    cpus: int | None  # svod threads of each worker (its CPU share); None: this process, as its profile says
    workers: int = 1
    cpu: str = ""
    hosts: tuple[str, ...] = ()
    db: Any = None  # TuningDB for this fingerprint (set by the farm)

    @property
    def label(self) -> str:
        hosts = ", ".join(self.hosts[:3]) + (" ..." if len(self.hosts) > 3 else "")
        cpus = "all" if self.cpus is None else self.cpus
        return (f"{self.cpu or 'machine'} [{self.fingerprint}]: {self.workers} worker(s) x {cpus} "
                f"CPU(s){' on ' + hosts if hosts else ''}")


def resolve(fn: str):
    """The function a job names ("module:qualified.name")."""
    mod, _, name = fn.partition(":")
    if not mod or not name:
        raise ValueError(f"a job function is named 'module:function', not {fn!r}")
    obj: Any = importlib.import_module(mod)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def run_job(fn: str, args: dict) -> Any:
    """Run one job's function here (what a farm's worker does with a job)."""
    return resolve(fn)(**args)


def error_text(e: BaseException) -> str:
    """A job's failure in one line plus the innermost frame (where it failed)."""
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {e}{where}"


def this_machine(cpus: int | None = None) -> dict:
    """What a worker reports about itself: machine and code fingerprints, CPU name,
    host, process and the threads svod uses there."""
    import socket

    from svod import runtime
    from svod.store import code_fingerprint, cpu_name, machine_fingerprint

    return {"machine": machine_fingerprint(), "code": code_fingerprint(), "cpu": cpu_name(),
            "host": socket.gethostname(), "pid": os.getpid(), "cpus": int(cpus or runtime.pool_size())}


class Farm(contextlib.AbstractContextManager):
    """What runs jobs: `groups` (the machine groups), `run(pairs, pb)` yielding a
    `JobResult` per (group, job) as it finishes, `close()` (also on leaving a `with`)."""

    groups: list[MachineGroup]

    def run(self, pairs: Iterable[tuple[MachineGroup, Job]], pb=None) -> Iterator[JobResult]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __exit__(self, *exc) -> None:
        self.close()


class LocalFarm(Farm):
    """This process as a farm of one worker: jobs run here, one after another, in order.
    A job that raises is reported (`JobResult.error`); KeyboardInterrupt goes through."""

    def __init__(self, db=None):
        me = this_machine()
        self.groups = [MachineGroup(me["machine"], None, 1, me["cpu"], (me["host"],), db)]
        self._where = f"{me['host']}:{me['pid']}"

    def run(self, pairs: Iterable[tuple[MachineGroup, Job]], pb=None) -> Iterator[JobResult]:
        for group, job in pairs:
            if pb is not None:
                pb.set_postfix_str(job.label or job.key)
            t0 = time.perf_counter()
            try:
                res = JobResult(job, run_job(job.fn, job.args))
            except Exception as e:  # noqa: BLE001 - a failed job is a result, the run goes on
                res = JobResult(job, error=error_text(e))
            res.machine, res.worker, res.seconds = group.fingerprint, self._where, time.perf_counter() - t0
            yield res


# ----------------------------------------------------------------------------- targets on workers

_TARGET_CAP = 4  # targets a worker keeps built (each holds its input arrays)
_targets: OrderedDict[str, Any] = OrderedDict()


def _spec_key(spec: dict) -> str:
    return json.dumps(spec, sort_keys=True)


def remember(target) -> None:
    """Keep `target` for this process's jobs (a local farm then needs no rebuild)."""
    if target.spec is not None:
        _targets[_spec_key(target.spec)] = target
        while len(_targets) > _TARGET_CAP:
            _targets.popitem(last=False)


def target_of(spec: dict, graph: str):
    """The target a job names, built here once (`targets.target_from_spec`); its graph
    must be the one the job was made for (else this worker runs other svod code, or a
    script that builds another program)."""
    from costmodels.targets import target_from_spec

    k = _spec_key(spec)
    t = _targets.get(k)
    if t is None:
        t = target_from_spec(spec)
        remember(t)
    else:
        _targets.move_to_end(k)
    if t.key.hash != graph:
        raise RuntimeError(f"this worker builds graph {t.key.hash[:12]} for {t.label}, not {graph[:12]}")
    return t


# ----------------------------------------------------------------------------- job functions (run on workers)


def _timing(t) -> dict:
    return {"seconds": t.seconds, "median": t.median, "runs": t.runs, "calls": t.calls}


def time_kernel_job(kernel: dict, threads: int, budget: float) -> dict:
    """Time one kernel (`measure.time_kernel`) on `threads` threads."""
    from costmodels import measure
    from svod.kernel import kernel_from_json

    return _timing(measure.time_kernel(kernel_from_json(kernel), threads, budget=budget))


def _threads(obj: dict) -> dict[int, int]:
    return {int(i): int(n) for i, n in obj.items()}


def time_variant_job(target: dict, graph: str, plan: dict, threads: dict, budget: float) -> dict:
    """Time a whole plan of a target's graph as realize() runs it."""
    from costmodels import measure
    from svod.kernel import plan_from_json

    t = target_of(target, graph)
    run = measure.PlanRunner(plan_from_json(plan), t.arrays, _threads(threads))
    return _timing(measure.time_callable(run, budget=budget, min_runs=3, max_runs=15, target=5e-3))


def time_numpy_job(target: dict, graph: str, budget: float) -> dict:
    """Time a target's numpy reference."""
    from costmodels import measure

    t = target_of(target, graph)
    return _timing(measure.time_callable(t.reference, budget=budget, target=5e-3))


def confirm_job(target: dict, graph: str, plans: list[dict], threads: list[dict], repeats: int) -> list[float]:
    """Time several plans of a graph side by side (interleaved rounds on one machine):
    their robust medians, seconds."""
    from costmodels import measure
    from svod.kernel import plan_from_json

    t = target_of(target, graph)
    runners = [measure.PlanRunner(plan_from_json(p), t.arrays, _threads(th)) for p, th in zip(plans, threads)]
    return [float(s) for s in measure.time_plans(runners, repeats=repeats, target=5e-3)]


def calibrate_job(budget: float, quick: bool) -> dict:
    """Calibrate the worker's machine; its profile (JSON), not stored there."""
    from costmodels.calibrate import calibrate

    return calibrate(progress=False, budget=budget, quick=quick, save=False).to_json()


def report_job(workload: str, oracle: str, model: str, profile: dict | None, small: bool, max_variants: int,
               repeats: int, max_choices: int, seed: int, budget: float, instances: int, doubt: float) -> dict:
    """One workload's row of `svod costmodel report`, measured on the worker. `oracle` is
    the module enumerating covers (the CLI names `search.oracle`: costmodels never
    imports the search); `model` "calibrated" over `profile` (the worker machine's, from
    the caller's store; None: the reference) or "roofline"."""
    from costmodels import report as rep

    if model == "roofline":
        from svod.costing import RooflineModel

        m = RooflineModel()
    else:
        from costmodels.analytic import CalibratedModel
        from costmodels.profile import Profile, reference

        m = CalibratedModel(Profile.from_json(profile, "farm") if profile else reference())
    rows = rep.report(m, importlib.import_module(oracle), names=[workload], small=small, max_variants=max_variants,
                      repeats=repeats, max_choices=max_choices, seed=seed, progress=False, budget=budget,
                      instances=instances, doubt=doubt)
    return rows[0].to_json()


__all__ = ["Farm", "Job", "JobResult", "LocalFarm", "MachineGroup", "remember", "resolve", "run_job", "target_of",
           "this_machine"]
