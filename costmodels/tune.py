"""`svod tune`: measure a program's best fusion variants and remember the fastest.

Given a target (`costmodels.targets`) and candidate plans — first the plan realize()
runs now (`svod.planner.decide`), then the search's k best and, for small graphs, the
oracle's cheapest covers, every one after the plan passes (attention fusion), so each is
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
from costmodels.measure import PlanRunner, time_callable, time_plans
from costmodels.progress import bar
from costmodels.targets import Target
from costmodels.tuning import MeasuredModel, TuningDB, plan_signature
from svod.costing import plan_prices
from svod.kernel import Plan


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

    def table(self) -> str:
        """Every variant, named by its kernels' ops; the confirmed ones first, by their
        confirmation medians (what decided the choice), then the rest by their timing."""
        from svod.boundaries import describe_plan

        times = [t for v in self.variants for t in (v.measured, v.predicted) if t]
        unit, scale = ("ms", 1e3) if times and max(times) >= 1e-3 else ("µs", 1e6)
        head = (f"{'#':>3} {'source':<7} {'kernels':>7} {'predicted ' + unit:>12} {'measured ' + unit:>11} "
                f"{'confirmed ' + unit:>12} {'vs numpy':>8}  kernels by their ops")
        lines = [f"svod tune {self.label}  (graph {self.graph[:12]})", head, "-" * len(head)]
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
    """Measure `candidates` (source, plan) of `target` and store the fastest as the tuned
    choice (see the module docstring). Raises KeyboardInterrupt through, having stored
    every measurement finished before it."""
    db = db or TuningDB()
    estimate = estimate or CalibratedModel()
    model = MeasuredModel(estimate, db, measure=False, correction=False, budget=budget)
    graph = target.key.hash
    found = dedupe(candidates)
    variants = [Variant(plan, src, sig, sum(p.seconds for p in plan_prices(plan, estimate)))
                for src, plan, sig in found]
    default = 0  # candidates[0] is the plan realize() ran before (the CLI puts it first)
    # what is left to measure (for the progress bar)
    todo_kernels: dict[str, tuple] = {}
    for v in variants:
        for k in v.plan.kernels:
            for t in model.thread_options(k):
                rk = TuningDB.kernel_key(k, t)
                if rk not in todo_kernels and db.get_kernel(k, t) is None:
                    todo_kernels[rk] = (k, t)
    todo_variants = [v for v in variants if db.get_variant(graph, v.sig) is None]
    need_numpy = db.get_numpy(graph) is None
    prior = db.get_choice(graph)
    need_confirm = prior is None or prior.get("sig") not in {v.sig for v in variants}
    total = len(todo_kernels) + len(todo_variants) + int(need_numpy) + int(need_confirm)
    measured = 0
    wrote = False

    def first_write():
        nonlocal wrote
        if not wrote:
            db.bump()  # plans made from here on see a new generation (again at the end)
            wrote = True

    try:
        with bar(total=total, desc=f"tune {target.label.split()[0]}", enabled=progress and total > 0,
                 unit="measurement") as pb:
            measuring = MeasuredModel(estimate, db, measure=True, correction=False, budget=budget)
            for k, t in todo_kernels.values():
                pb.set_postfix_str(f"kernel {k.name} on {t} thread(s)")
                first_write()
                measuring.measure_kernel(k, t)
                measured += 1
                pb.update(1)
            for v in variants:
                v.threads = {i: p.threads for i, p in enumerate(plan_prices(v.plan, measuring))
                             if p.threads > 1}
                row = db.get_variant(graph, v.sig)
                if row is None:
                    pb.set_postfix_str(f"variant {v.sig[:8]} ({v.kernels} kernels)")
                    run = PlanRunner(v.plan, target.arrays, v.threads)
                    t = time_callable(run, budget=budget * 2, min_runs=3, max_runs=15, target=5e-3)
                    row = {"seconds": t.seconds, "median": t.median, "predicted": v.predicted, "kernels": v.kernels,
                           "source": v.source, "threads": {str(i): n for i, n in v.threads.items()}}
                    first_write()
                    db.put_variant(graph, v.plan, row)
                    measured += 1
                    pb.update(1)
                v.measured = float(row["seconds"])
            numpy_s = db.get_numpy(graph)
            if numpy_s is None:
                pb.set_postfix_str("numpy reference")
                numpy_s = time_callable(target.reference, budget=budget * 2, target=5e-3).seconds
                first_write()
                db.put_numpy(graph, numpy_s)
                measured += 1
                pb.update(1)
            chosen, confirmed = _choose(variants, prior, need_confirm, confirm, repeats, target, pb)
            note = ""
            if need_confirm and chosen is not None:
                v = variants[chosen]
                first_write()
                db.put_choice(graph, v.plan, {"sig": v.sig, "seconds": v.measured, "label": target.label,
                                              "confirmed": {variants[i].sig: t for i, t in confirmed.items()},
                                              "repeats": repeats})
                pb.update(1)
            elif prior is not None:
                note = "chosen by an earlier run (the tuning database); its confirmation timings are shown"
    finally:
        if wrote:
            from costmodels.learned import refit

            try:
                refit(db)
            finally:
                db.bump()
                _forget_plans()
    corr = db.get_correction()
    from costmodels.learned import Correction

    c = Correction.from_json(corr)
    return TuneResult(target.label, graph, variants, numpy_s, chosen, default, measured,
                      c.describe() if c is not None else "", confirmed,
                      int((prior or {}).get("repeats", repeats)) if not need_confirm else repeats, note)


def _choose(variants: list[Variant], prior: dict | None, need_confirm: bool, confirm: int, repeats: int,
            target: Target, pb) -> tuple[int | None, dict[int, float]]:
    """(the tuned choice, variant index -> confirmation median): the prior choice when it
    is still a candidate (with the medians stored with it), else the fastest of an
    interleaved re-timing of the `confirm` fastest (one noisy timing never decides)."""
    measured = [i for i, v in enumerate(variants) if v.measured is not None]
    if not measured:
        return None, {}
    if not need_confirm and prior is not None:
        by_sig = {v.sig: i for i, v in enumerate(variants)}
        stored = {by_sig[s]: float(t) for s, t in (prior.get("confirmed") or {}).items() if s in by_sig}
        if prior.get("sig") in by_sig:
            return by_sig[prior["sig"]], stored
    top = sorted(measured, key=lambda i: variants[i].measured)[:max(1, confirm)]
    if len(top) == 1:
        return top[0], {}
    pb.set_postfix_str(f"confirming the fastest {len(top)}")
    runners = [PlanRunner(variants[i].plan, target.arrays, variants[i].threads) for i in top]
    meds = time_plans(runners, repeats=repeats, target=5e-3)
    best = min(range(len(top)), key=meds.__getitem__)
    return top[best], {i: float(m) for i, m in zip(top, meds)}


def _forget_plans() -> None:
    """In-memory plans of this process predate the new results: drop them."""
    from svod import engine

    engine.reset_caches()


def speedup(result: TuneResult) -> float:
    if result.chosen is None or not result.numpy_seconds:
        return math.nan
    return result.numpy_seconds / (result.variants[result.chosen].measured or math.nan)
