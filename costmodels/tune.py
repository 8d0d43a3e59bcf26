"""`svod tune`: measure a program's best fusion variants and remember the fastest.

Given a target (`costmodels.targets`) and candidate plans — first the plan realize()
runs now (`svod.planner.decide`), then the search's k best and, for small graphs, the
oracle's cheapest covers, every one lowered through the plan passes (attention fusion), so each is
timed as realize() would run it; the CLI supplies them, `costmodels` does not import
`search`:

1. every kernel of every candidate is timed on 1 thread and on all cores
   (`MeasuredModel(measure=True)`), each result committed as its own row;
2. every candidate plan is timed whole, as realize() runs it (thread counts from the
   measured kernels), one row each;
3. the numpy reference is timed once (the speed-up column);
4. the fastest few are timed again, interleaved, and the winner is stored as the
   graph's tuned choice; the learned correction is refitted; the generation is bumped.

Rows already in the database are not measured again, so an interrupted run (Ctrl-C
loses only the measurement under way) resumes where it stopped, and a finished run
repeated measures nothing. realize() then runs the tuned plan for this graph, and the
search prices these kernels with their measured times everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from costmodels.analytic import CalibratedModel
from costmodels.features import features
from costmodels.jobs import Job, LocalFarm, MachineGroup
from costmodels.measure import Timing
from costmodels.progress import bar
from costmodels.targets import Target
from costmodels.tuning import MeasuredModel, TuningDB, plan_signature
from svod.costing import plan_prices
from svod.kernel import Kernel, Plan, kernel_to_json, plan_to_json


@dataclass
class Variant:
    plan: Plan
    source: str  # "realize" (the plan realize() ran), "search" (the search's k best) or "oracle" (a cover)
    sig: str
    predicted: float  # the calibrated model's estimate, seconds
    measured: float | None = None  # seconds (min of N), None until measured
    threads: dict = field(default_factory=dict)

    @property
    def kernels(self) -> int:
        return len(self.plan.kernels)


@dataclass
class TuneResult:
    label: str
    graph: str  # GraphKey hash
    variants: list[Variant]
    numpy_seconds: float | None
    chosen: int | None  # index into variants
    default: int  # the variant realize() ran before this tuning run (candidates[0]: svod.planner.decide)
    measured_now: int = 0  # measurements taken by this run (kernels, variants, numpy)
    correction: str = ""
    confirmed: dict = field(default_factory=dict)  # variant index -> median of the confirmation runs
    confirm_repeats: int = 0
    confirm_note: str = ""
    machine: str = ""  # the machines that measured it (a farm's group), "" for this process
    failures: list[str] = field(default_factory=list)  # measurements that failed: "what: why"
    workers: dict[str, int] = field(default_factory=dict)  # worker (host:pid) -> jobs it ran

    def table(self) -> str:
        """Every variant, named by its kernels' ops; the confirmed ones first, by their
        confirmation medians (what decided the choice), then the rest by their timing."""
        from svod.boundaries import describe_plan

        times = [t for v in self.variants for t in (v.measured, v.predicted) if t]
        unit, scale = ("ms", 1e3) if times and max(times) >= 1e-3 else ("µs", 1e6)
        head = (f"{'#':>3} {'source':<7} {'kernels':>7} {'predicted ' + unit:>12} {'measured ' + unit:>11} "
                f"{'confirmed ' + unit:>12} {'vs numpy':>8}  kernels by their ops")
        lines = [f"svod tune {self.label}  (graph {self.graph[:12]})"]
        if self.machine:
            lines.append(f"measured on {self.machine}")
        lines += [head, "-" * len(head)]
        conf = self.confirmed

        def rank(i):
            v = self.variants[i]
            return (i not in conf, conf.get(i, 0.0), v.measured is None, v.measured or 0.0)

        for i in sorted(range(len(self.variants)), key=rank):
            v = self.variants[i]
            meas = "-" if v.measured is None else f"{v.measured * scale:.3f}"
            best = conf.get(i, v.measured)
            speed = "-" if best is None or not self.numpy_seconds else f"{self.numpy_seconds / best:.2f}x"
            c = f"{conf[i] * scale:.3f}" if i in conf else "-"
            mark = (" <- chosen" if i == self.chosen else "") + \
                (" (realize's plan before)" if i == self.default else "")
            lines.append(f"{i:>3} {v.source:<7} {v.kernels:>7} {v.predicted * scale:>12.3f} {meas:>11} {c:>12} "
                         f"{speed:>8}  {describe_plan(v.plan)}{mark}")
        lines.append("measured: the minimum of a variant's own timing runs; confirmed: the median of "
                     f"{self.confirm_repeats} interleaved runs of the fastest {len(conf) or 'few'}, which decides")
        if self.confirm_note:
            lines.append(self.confirm_note)
        if self.numpy_seconds:
            lines.append(f"numpy reference: {self.numpy_seconds * scale:.3f} {unit}")
        if self.chosen is not None and self.chosen in conf and self.default in conf:
            gain = conf[self.default] / conf[self.chosen]
            lines.append(f"tuned choice is {gain:.2f}x the plan realize() ran before (confirmation medians); "
                         "realize() now runs it")
        elif self.chosen is not None and self.variants[self.chosen].measured and \
                self.variants[self.default].measured:
            gain = self.variants[self.default].measured / self.variants[self.chosen].measured
            lines.append(f"tuned choice is {gain:.2f}x the plan realize() ran before; realize() now runs it")
        lines.append(f"measured in this run: {self.measured_now} (rows already in the tuning database are reused)")
        if self.correction:
            lines.append(self.correction)
        if self.failures:
            lines.append(f"{len(self.failures)} measurement(s) failed (the run went on without them):")
            lines += [f"  {f}" for f in self.failures]
        return "\n".join(lines)


def dedupe(candidates: Sequence[tuple[str, Plan]]) -> list[tuple[str, Plan, str]]:
    seen: set[str] = set()
    out = []
    for source, plan in candidates:
        sig = plan_signature(plan)
        if sig not in seen:
            seen.add(sig)
            out.append((source, plan, sig))
    return out


def tune(target: Target, candidates: Sequence[tuple[str, Plan]], *, db: TuningDB | None = None,
         estimate: CalibratedModel | None = None, progress: bool = True, confirm: int = 3, repeats: int = 7,
         budget: float = 0.25) -> TuneResult:
    """Measure `candidates` (source, plan) of `target` in this process and store the
    fastest as the tuned choice (see the module docstring). Raises KeyboardInterrupt
    through, having stored every measurement finished before it."""
    farm = LocalFarm(db if db is not None else TuningDB())
    return tune_farm(target, candidates, farm, estimate=estimate, progress=progress, confirm=confirm,
                     repeats=repeats, budget=budget)[0]


@dataclass
class _Session:
    """The tuning of one target on one group of identical machines: its variants, the
    database its rows go to, and what is left to measure there."""

    group: MachineGroup
    estimate: CalibratedModel
    variants: list[Variant]
    model: MeasuredModel  # prices with this group's rows (thread options: its workers' CPUs)
    measured: int = 0
    wrote: bool = False
    failures: list[str] = field(default_factory=list)
    workers: dict[str, int] = field(default_factory=dict)  # worker -> jobs it ran

    @property
    def db(self) -> TuningDB:
        return self.group.db

    def write(self) -> None:
        if not self.wrote:
            self.db.bump()  # plans made from here on see a new generation (again at the end)
            self.wrote = True

    def fail(self, res) -> None:
        self.failures.append(f"{res.job.label or res.job.key}: {res.error}")


def _estimate_for(group: MachineGroup, estimate: CalibratedModel | None) -> CalibratedModel:
    """The calibrated model of `group`'s machine: the given one for this machine, else the
    profile stored under that machine's fingerprint (`svod calibrate --ray`), else the
    reference profile."""
    from svod.store import machine_fingerprint

    if group.fingerprint == machine_fingerprint() and estimate is not None:
        return estimate
    if group.fingerprint == machine_fingerprint():
        return CalibratedModel()
    from costmodels.profile import profile

    return CalibratedModel(profile(store=group.db.store))


def _kernel_jobs(s: _Session, budget: float) -> list[tuple[Job, Kernel, int]]:
    todo: dict[str, tuple[Job, Kernel, int]] = {}
    for v in s.variants:
        for k in v.plan.kernels:
            for t in s.model.thread_options(k):
                rk = TuningDB.kernel_key(k, t)
                if rk not in todo and s.db.get_kernel(k, t) is None:
                    job = Job(rk, "costmodels.jobs:time_kernel_job",
                              {"kernel": kernel_to_json(k), "threads": t, "budget": budget},
                              f"kernel {k.name} on {t} thread(s)", KERNEL_TIMEOUT)
                    todo[rk] = (job, k, t)
    return list(todo.values())


KERNEL_TIMEOUT = 300.0  # seconds a farm's worker may take over one job (compiling included)
PLAN_TIMEOUT = 600.0


def tune_farm(target: Target, candidates: Sequence[tuple[str, Plan]], farm=None, *,
              estimate: CalibratedModel | None = None, progress: bool = True, confirm: int = 3, repeats: int = 7,
              budget: float = 0.25) -> list[TuneResult]:
    """`tune` on a farm (`costmodels.farm.RayFarm`; None: this process): one result per
    group of identical machines in it, each measured on those machines only and stored
    in the tuning database under their machine fingerprint (timings of different
    machines never mix; a farm of identical machines tunes once for all of them).

    Jobs run in waves: every missing kernel timing, then every missing whole-variant
    timing and numpy reference (thread counts from the kernel rows), then the
    confirmation of the fastest few side by side on one worker. Each result is written
    as it arrives, so an interrupted run — Ctrl-C, a farm that went away — loses only the
    jobs in flight, and a repeated run measures nothing. A job that fails (an error, a
    timeout, a worker that died twice) is listed in the result's `failures`; the run goes
    on without it."""
    from costmodels.jobs import remember

    farm = farm if farm is not None else LocalFarm(TuningDB())
    for g in farm.groups:
        if g.db is None:
            g.db = TuningDB()
    remember(target)
    graph = target.key.hash
    found = dedupe(candidates)
    sessions = []
    for g in farm.groups:
        est = _estimate_for(g, estimate)
        variants = [Variant(plan, src, sig, sum(p.seconds for p in plan_prices(plan, est))) for src, plan, sig in found]
        model = MeasuredModel(est, g.db, measure=False, correction=False, budget=budget, cores=g.cpus)
        sessions.append(_Session(g, est, variants, model))
    spec = target.spec
    if spec is None and not isinstance(farm, LocalFarm):
        raise ValueError(f"{target.label}: a target without a spec cannot be rebuilt on a farm's workers")
    kernels = {id(s): _kernel_jobs(s, budget) for s in sessions}
    todo_variants = {id(s): {id(v) for v in s.variants if s.db.get_variant(graph, v.sig) is None} for s in sessions}
    need_numpy = {id(s): s.db.get_numpy(graph) is None for s in sessions}
    priors = {id(s): s.db.get_choice(graph) for s in sessions}
    need_confirm = {id(s): priors[id(s)] is None or priors[id(s)].get("sig") not in {v.sig for v in s.variants}
                    for s in sessions}
    total = sum(len(kernels[id(s)]) + len(todo_variants[id(s)]) + need_numpy[id(s)] + need_confirm[id(s)]
                for s in sessions)
    by_group = {id(s.group): s for s in sessions}
    chosen: dict[int, int | None] = {}
    confirmed: dict[int, dict[int, float]] = {}  # session -> variant index -> confirmation median
    numpy_s: dict[int, float | None] = {}
    try:
        with bar(total=total, desc=f"tune {target.label.split()[0]}", enabled=progress and total > 0,
                 unit="measurement") as pb:
            # wave 1: kernels
            wave = [(s.group, job) for s in sessions for job, _, _ in kernels[id(s)]]
            info = {(id(s.group), job.key): (k, t) for s in sessions for job, k, t in kernels[id(s)]}
            for res, s in _results(farm, wave, by_group, pb):
                k, t = info[(id(s.group), res.job.key)]
                s.write()
                s.db.put_kernel(k, t, Timing(**res.value), s.estimate.seconds(features(k), t))
                s.measured += 1
            # wave 2: whole variants and the numpy reference
            wave = []
            for s in sessions:
                prices = MeasuredModel(s.estimate, s.db, measure=False, correction=False, budget=budget,
                                       cores=s.group.cpus)
                for v in s.variants:
                    v.threads = {i: p.threads for i, p in enumerate(plan_prices(v.plan, prices)) if p.threads > 1}
                    if id(v) in todo_variants[id(s)]:
                        vkey = TuningDB.variant_key(graph, v.sig)
                        wave.append((s.group, Job(vkey, "costmodels.jobs:time_variant_job",
                                                  {"target": spec, "graph": graph, "plan": plan_to_json(v.plan),
                                                   "threads": {str(i): n for i, n in v.threads.items()},
                                                   "budget": budget * 2},
                                                  f"variant {v.sig[:8]} ({v.kernels} kernels)", PLAN_TIMEOUT)))
                if need_numpy[id(s)]:
                    wave.append((s.group, Job(f"numpy:{graph}", "costmodels.jobs:time_numpy_job",
                                              {"target": spec, "graph": graph, "budget": budget * 2},
                                              "numpy reference", PLAN_TIMEOUT)))
            for res, s in _results(farm, wave, by_group, pb):
                s.write()
                if res.job.key.startswith("numpy:"):
                    s.db.put_numpy(graph, res.value["seconds"])
                else:
                    v = next(v for v in s.variants if TuningDB.variant_key(graph, v.sig) == res.job.key)
                    s.db.put_variant(graph, v.plan, {
                        "seconds": res.value["seconds"], "median": res.value["median"], "predicted": v.predicted,
                        "kernels": v.kernels, "source": v.source, "threads": {str(i): n for i, n in v.threads.items()}})
                s.measured += 1
            for s in sessions:
                for v in s.variants:
                    row = s.db.get_variant(graph, v.sig)
                    v.measured = float(row["seconds"]) if row is not None else None
                numpy_s[id(s)] = s.db.get_numpy(graph)
            # wave 3: the tuned choice (the fastest few side by side, on one worker)
            wave, tops = [], {}
            for s in sessions:
                pick, top, confirmed[id(s)] = _choose(s.variants, priors[id(s)], need_confirm[id(s)], confirm)
                chosen[id(s)] = pick
                if pick is None and top:
                    tops[id(s)] = top
                    wave.append((s.group, Job(f"confirm:{graph}", "costmodels.jobs:confirm_job",
                                              {"target": spec, "graph": graph,
                                               "plans": [plan_to_json(s.variants[i].plan) for i in top],
                                               "threads": [{str(j): n for j, n in s.variants[i].threads.items()}
                                                           for i in top], "repeats": repeats},
                                              f"confirming the fastest {len(top)}", PLAN_TIMEOUT)))
                elif pick is not None and need_confirm[id(s)]:
                    _store_choice(s, graph, pick, target.label, {}, repeats)
                    pb.update(1)
            for res, s in _results(farm, wave, by_group, pb):
                top = tops[id(s)]
                confirmed[id(s)] = {i: float(m) for i, m in zip(top, res.value)}
                chosen[id(s)] = top[min(range(len(top)), key=res.value.__getitem__)]
                _store_choice(s, graph, chosen[id(s)], target.label, confirmed[id(s)], repeats)
    finally:
        wrote = [s for s in sessions if s.wrote]
        for s in wrote:
            from costmodels.learned import refit

            try:
                refit(s.db)
            finally:
                s.db.bump()
        if wrote:
            _forget_plans()
    from costmodels.learned import Correction

    out = []
    for s in sessions:
        c = Correction.from_json(s.db.get_correction())
        prior = priors[id(s)]
        from_prior = not need_confirm[id(s)] and prior is not None
        # default 0: candidates[0] is the plan realize() ran before (the CLI puts it first)
        r = TuneResult(target.label, graph, s.variants, numpy_s.get(id(s)), chosen.get(id(s)), 0, s.measured,
                       c.describe() if c is not None else "", confirmed.get(id(s), {}),
                       int(prior.get("repeats", repeats)) if from_prior else repeats,
                       "chosen by an earlier run (the tuning database); its confirmation timings are shown"
                       if from_prior else "")
        r.machine, r.failures, r.workers = s.group.label, s.failures, s.workers
        out.append(r)
    return out


def _results(farm, wave, by_group, pb):
    """(result, session) for each successful job of `wave`, as they finish; failures are
    noted on their session and counted on the bar."""
    if not wave:
        return
    owner = {id(job): by_group[id(g)] for g, job in wave}
    for res in farm.run(wave, pb):
        s = owner[id(res.job)]
        pb.update(1)
        if res.worker:
            s.workers[res.worker] = s.workers.get(res.worker, 0) + 1
        if res.ok:
            yield res, s
        else:
            s.fail(res)


def _store_choice(s: _Session, graph: str, i: int, label: str, confirmed: dict[int, float], repeats: int) -> None:
    v = s.variants[i]
    s.write()
    s.db.put_choice(graph, v.plan, {"sig": v.sig, "seconds": v.measured, "label": label, "repeats": repeats,
                                    "confirmed": {s.variants[j].sig: t for j, t in confirmed.items()}})


def _choose(variants: list[Variant], prior: dict | None, need_confirm: bool,
            confirm: int) -> tuple[int | None, list[int], dict[int, float]]:
    """(the tuned choice, [], confirmation medians) when it is decided without timing — the
    prior choice while it is still a candidate (with the medians stored with it), or the
    only measured variant — else (None, the `confirm` fastest measured variants, {}), to be
    re-timed interleaved (one noisy timing never decides)."""
    measured = [i for i, v in enumerate(variants) if v.measured is not None]
    if not measured:
        return None, [], {}
    if not need_confirm and prior is not None:
        by_sig = {v.sig: i for i, v in enumerate(variants)}
        stored = {by_sig[s]: float(t) for s, t in (prior.get("confirmed") or {}).items() if s in by_sig}
        if prior.get("sig") in by_sig:
            return by_sig[prior["sig"]], [], stored
    top = sorted(measured, key=lambda i: variants[i].measured)[:max(1, confirm)]
    if len(top) == 1:
        return top[0], [], {}
    return None, top, {}


def _forget_plans() -> None:
    """In-memory plans of this process predate the new results: drop them."""
    from svod import engine

    engine.reset_caches()


def speedup(result: TuneResult) -> float:
    if result.chosen is None or not result.numpy_seconds:
        return math.nan
    return result.numpy_seconds / (result.variants[result.chosen].measured or math.nan)
