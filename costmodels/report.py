"""`svod costmodel report`: how well a cost model ranks the fusion variants of real
programs, measured.

For each workload with a small graph (at most `max_choices` free kernel boundaries),
every cover of its graph by legal kernels is enumerated by the search's oracle — from
the Kernel spec, independently of any model. Up to `max_variants` of them are timed
(all of them when there are fewer; else the model's pick, the plan realize() runs, and a
seeded random sample: the sample does not depend on the model's ranking), each as
`realize()` would run it — the cover's plan (the lowering's plan passes, attention fusion, included), a
GraphProgram with the thread counts the model priced — medians of interleaved
repeats (each timing divided by how slow the machine ran its neighbours in time,
`costmodels.measure.steady`). Each variant is built `instances` times (its own graph
program, kernel code and scratch each time, built in a shuffled order) and counts at
its fastest instance, a guard against anything particular to one build — as many
builds as leave `MIN_ROUNDS` rounds within the budget: a GEMM-bound workload of 10-50 ms
a variant gets one build and at least `MIN_ROUNDS` rounds instead (`_instances_for`;
docs/engine.md: what motivated it).
Per workload: the Spearman rank correlation of predicted against measured time (both
resolved: a pair of measured variants the timing cannot tell apart ties — each variant
counts those measurably faster and half of those it ties with, `measure.resolved_ranks`
— and prices within 0.1% are one price), and the measured time of the model's pick over the
best measured variant; the plan realize() runs (`svod.planner.decide`: the tuned plan when
there is one) is timed too (`Row.realized`, `realize_ratio`). Where one side has nothing to
rank — every variant in one timing group, or all priced equal — the Spearman is undefined
(n/a) and the pick still counts.

The oracle is passed in (`costmodels` never imports `search`; the CLI wires them)::

>>> import search.oracle
>>> rows = report(CalibratedModel(), search.oracle, names=["w2_softmax"], small=True, max_variants=4,
...               repeats=3, progress=False)
>>> rows[0].measured_variants, rows[0].pick_ratio >= 1.0
(4, True)
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from costmodels.analytic import CalibratedModel
from costmodels.measure import (
    PlanRunner,
    group_ranks,
    resolved_ranks,
    robust_medians,
    spearman,
    steady,
    time_rounds,
)
from costmodels.progress import bar
from costmodels.targets import Target, workload_target
from svod.costing import CostModel, Machine, fewer_kernels_on_ties, plan_prices

__all__ = ["CalibratedModel", "Row", "format_report", "priced_ranks", "report", "rescore", "small_workloads",
           "summary"]


@dataclass
class Row:
    workload: str
    covers: int  # every distinct plan of the graph
    measured_variants: int
    predicted: list[float] = field(default_factory=list)  # seconds, per measured variant
    measured: list[float] = field(default_factory=list)  # median seconds, same order
    kernels: list[int] = field(default_factory=list)
    pick: int = 0  # index (in the lists) of the model's cheapest predicted variant
    # predicted ranks (prices within 0.1% tie) against the resolved measured ranks (variants
    # the timing cannot tell apart tie)
    spearman: float = math.nan
    spearman_raw: float = math.nan  # against the raw medians (every difference counts, however small)
    groups: int = 0  # distinct measured ranks (1: the timing tells no two variants apart)
    rounds: int = 0
    noise: float = math.nan  # Spearman between the odd and the even rounds' medians: the ceiling noise allows
    seconds: float = 0.0  # wall time spent on this workload
    note: str = ""
    reruns: int = 0  # measured again: the first timing did not agree with itself
    instances: int = 0  # separately built programs of each variant that were timed
    # which cover each measured variant is (the free values it materialises, GraphKey node
    # indices) and the measured ranks the Spearman used: what `rescore` prices again
    materialized: list[list[int]] = field(default_factory=list)
    ranks: list[float] = field(default_factory=list)
    # the plan realize() runs (svod.planner.decide): its index in the lists, or -1 when it is
    # not a cover (then timed beside them: its predicted and measured seconds here)
    realized: int = -1
    realize_predicted: float = math.nan
    realize_measured: float = math.nan

    @property
    def best(self) -> int:
        return min(range(len(self.measured)), key=self.measured.__getitem__) if self.measured else 0

    @property
    def pick_ratio(self) -> float:
        return self.measured[self.pick] / self.measured[self.best] if self.measured else math.nan

    @property
    def realize_ratio(self) -> float:
        """The measured time of the plan realize() runs over the best measured cover."""
        if not self.measured:
            return math.nan
        got = self.measured[self.realized] if self.realized >= 0 else self.realize_measured
        return got / self.measured[self.best]

    def pairs(self) -> list[tuple[float, float]]:
        """(predicted, measured) seconds of each measured variant."""
        return list(zip(self.predicted, self.measured))

    def to_json(self) -> dict:
        d = asdict(self)
        d["pick_ratio"] = self.pick_ratio
        d["realize_ratio"] = self.realize_ratio
        d["best"] = self.best
        return d


def small_workloads(oracle, max_choices: int = 12) -> list[str]:
    """Workloads whose graphs the oracle can enumerate (1 to `max_choices` free boundaries)."""
    from svod import workloads

    out = []
    for name in workloads.names():
        t = workload_target(name, small=True)
        if 1 <= len(oracle.choices(t.key)) <= max_choices:
            out.append(name)
    return out


def _sample(n: int, keep, k: int, seed: int) -> list[int]:
    """`k` indices of range(n): `keep` (an index or several) and a seeded random sample of
    the rest."""
    keeps = sorted({keep} if isinstance(keep, int) else set(keep))
    if n <= k:
        return list(range(n))
    rest = [i for i in range(n) if i not in keeps]
    rng = random.Random(seed)
    return sorted(keeps + rng.sample(rest, max(k - len(keeps), 0)))


@dataclass
class Variants:
    """What the report times for one target: every cover of its graph (the oracle's,
    cheapest first by the model, before the plan passes), each cover's plan after the plan
    passes (what realize() would run for that cover, what is priced and timed), the sample
    of covers timed, the model's pick, and the plan realize() runs (`svod.planner.decide`)
    with its index among the covers (-1: not a cover — a tuned plan, or the search found a
    plan no cover has; it is then timed beside the covers, outside the Spearman)."""

    covers: list
    plans: list
    chosen: list[int]
    pick: int
    realized: int
    realize_plan: object

    def timed(self) -> list:
        """The plans the report times, in order: the chosen covers' (after the passes),
        then realize's plan when it is not one of them."""
        out = [self.plans[ci] for ci in self.chosen]
        if self.realized < 0 and self.realize_plan is not None:
            out.append(self.realize_plan)
        return out


def _sig(plan) -> tuple:
    return tuple(k.key() for k in plan.kernels)


def variants(t: Target, model: CostModel, oracle, machine: Machine, max_variants: int, max_choices: int,
             seed: int) -> Variants:
    """The variants `measure_target` times (see `Variants`), without timing anything."""
    from svod.planner import decide

    covers, plans, seen = [], [], set()
    for c in oracle.all_covers(t.key, model, machine, max_choices=max_choices):
        p = c.plan
        if _sig(p) not in seen:  # two covers the lowering's passes make one plan: timed once
            seen.add(_sig(p))
            covers.append(c)
            plans.append(p)
    real = decide(t.key).plan
    sigs = [_sig(p) for p in plans]
    realized = sigs.index(_sig(real)) if real is not None and _sig(real) in sigs else -1
    if realized >= 0:  # the same kernels: time realize's very plan (its kernel names and slots)
        plans[realized] = real
    # a model-independent order (kernel content keys), then sample: the pick is covers[0]
    order = sorted(range(len(covers)), key=lambda i: sigs[i])
    keep = [order.index(0)] + ([order.index(realized)] if realized > 0 else [])
    chosen = [order[i] for i in _sample(len(order), keep, max_variants, seed)]
    return Variants(covers, plans, chosen, 0, realized, real)


def measure_target(t: Target, model: CostModel, oracle, machine: Machine, max_variants: int, repeats: int,
                   max_choices: int, seed: int, pb=None, budget: float = 5.0, instances: int = 3) -> Row:
    """Time up to `max_variants` covers of `t`'s graph (see the module docstring), and the
    plan realize() runs when it is not one of them."""
    t0 = time.perf_counter()
    vs = variants(t, model, oracle, machine, max_variants, max_choices, seed)
    covers, chosen = vs.covers, vs.chosen
    timed = vs.timed()  # realize's plan, when not a cover, last: timed with them, out of their ranking
    pred, nk, threads = [], [], []
    for plan in timed:
        prices = plan_prices(plan, model, machine)
        threads.append({i: p.threads for i, p in enumerate(prices) if p.threads > 1})
        pred.append(sum(p.seconds for p in prices))
        nk.append(len(plan.kernels))
    runners, owner = [], []  # owner[r]: the variant (index into timed) runner r is an instance of
    rng = random.Random(seed)

    def build(inst: int) -> None:
        order = list(range(len(timed)))
        rng.shuffle(order)
        for j in order:  # later instances run their own copies of the kernels' code
            runners.append(PlanRunner(timed[j], t.arrays, threads[j], relocate=inst > 0))
            owner.append(j)
            if pb is not None:
                pb.set_postfix_str(f"{t.label.split()[0]}: compiled {len(runners)} variant builds")

    build(0)
    instances, repeats = _instances_for(runners, max(1, instances), repeats, budget)
    for inst in range(1, instances):
        build(inst)
    all_times = time_rounds(runners, repeats=repeats, target=2e-3, seed=seed, budget=budget)
    rounds = len(all_times[0]) if all_times else 0
    # the machine's speed at each moment out, over every runner (each one's neighbours in
    # time are instances of other variants); the variants' series are picked from these
    adj = steady(all_times)
    all_meds = [statistics.median(a) if a else math.nan for a in adj]
    best = {}  # variant -> its fastest instance
    for r, j in enumerate(owner):
        if j not in best or all_meds[r] < all_meds[best[j]]:
            best[j] = r
    n = len(chosen)
    times = [adj[best[j]] for j in range(n)]
    meas = [all_meds[best[j]] for j in range(n)]
    row = Row(t.label.split()[0], len(covers), n, pred[:n], meas, nk[:n], chosen.index(0),
              materialized=[sorted(covers[ci].materialized) for ci in chosen])
    row.realized = chosen.index(vs.realized) if vs.realized >= 0 else -1
    if len(timed) > n:
        row.realize_predicted, row.realize_measured = pred[n], all_meds[best[n]]
    row.instances = instances
    ranks = row.ranks = resolved_ranks(times)
    row.rounds, row.groups = rounds, len(set(ranks))
    row.spearman_raw = spearman(row.predicted, meas)
    prices = priced_ranks(row.predicted)
    row.spearman = spearman(prices, ranks)
    if row.groups == 1 and n > 1:
        row.note = "variants indistinguishable (timing)"
    elif len(set(prices)) == 1 and n > 1:
        row.note = f"variants priced equal (within {PRICE_TIE:.1%})"
    if rounds >= 4:
        row.noise = spearman(robust_medians(times, range(0, rounds, 2)), robust_medians(times, range(1, rounds, 2)))
    row.seconds = time.perf_counter() - t0
    return row


MIN_ROUNDS = 15  # rounds a workload whose instances would not fit them in the budget gets


def _instances_for(runners: Sequence[PlanRunner], instances: int, repeats: int, budget: float) -> tuple[int, int]:
    """(instances, rounds at least) for a workload whose first instance of each variant is
    `runners`: as many instances as leave `MIN_ROUNDS` rounds within `budget` (one call of
    each runner says what a round costs), and then at least `MIN_ROUNDS` rounds. Separate
    builds guard against what is particular to one build's code; they matter for programs
    of microseconds, not for GEMM-bound ones of tens of milliseconds, whose variants differ
    by a few percent: there a round spent on another build is a round less for the medians
    (docs/engine.md). A budget of 0 asks for `repeats` rounds of every instance, as given."""
    if budget <= 0.0:
        return instances, repeats
    one = 0.0
    for r in runners:
        r()  # the first call pays what later ones do not (pool blocks, page faults)
        t0 = time.perf_counter()
        r()
        one += time.perf_counter() - t0
    fit = int(budget / max(MIN_ROUNDS * one, 1e-9))
    if fit >= instances:
        return instances, repeats
    return max(1, fit), max(repeats, MIN_ROUNDS)


PRICE_TIE = 1e-3  # predictions closer than this (relative) are one price


def priced_ranks(pred: Sequence[float], rel: float = PRICE_TIE) -> list[float]:
    """Ranks of the predictions in which prices within `rel` of a group's cheapest share
    the group's average rank: a model that prices two covers a tiny copy kernel apart
    (a part in 10,000) says they cost the same, and ranking its dust against timings
    would be a coin toss (Spearman's rho is undefined for a constant side).

    >>> priced_ranks([1.0, 1.0005, 2.0, 1.0002])
    [2.0, 2.0, 4.0, 2.0]
    """
    return group_ranks(pred, lambda first, j: pred[j] - pred[first] <= rel * abs(pred[first]))


# split-half Spearman below which a workload's timing is measured again: the rank agreement
# the goal asks of a model (0.7 for every workload), asked of the timing first. At 0.5,
# linear_relu's timing with a split-half of 0.61 stood, and scored the model 0.30; timed
# again (0.96) it scored 0.86.
DOUBT = 0.7


def report(model: CostModel | None, oracle, names: Sequence[str] | None = None, *, small: bool = False,
           max_variants: int = 24, repeats: int = 7, max_choices: int = 12, seed: int = 0,
           progress: bool = True, machine: Machine | None = None, budget: float = 5.0,
           instances: int = 3, doubt: float = DOUBT) -> list[Row]:
    """Measure the variants of each small workload and compare with `model`'s predictions
    (None: the calibrated model over this machine's profile). `oracle` is
    `search.oracle` (anything with `choices(key)` and `all_covers(key, model, machine,
    max_choices=)`). Each workload gets at least `repeats` interleaved rounds, and more
    while its timing has taken less than `budget` seconds; each variant is timed as
    `instances` separately built programs, at its fastest.

    A doubtful workload — its timing does not agree with itself: the split-half Spearman
    of its odd and even rounds below `doubt`, a rule on the measurements alone, blind to
    the model — is measured again with twice the budget, and the new timing replaces the
    first. Still doubtful, its Spearman is not defined (n/a, "unresolved": no ranking to
    compare a model with); its raw Spearman and its pick are reported all the same."""
    model = model or CalibratedModel()
    machine = machine or Machine.host()
    names = list(names) if names is not None else None
    rows: list[Row] = []
    from svod import workloads

    todo = names if names is not None else workloads.names()
    with bar(total=len(todo), desc="costmodel report", enabled=progress, unit="workload") as pb:
        for name in todo:
            pb.set_postfix_str(name)
            t = workload_target(name, small=small)
            n_free = len(oracle.choices(t.key))
            if n_free > max_choices or n_free == 0:
                if names is not None:
                    rows.append(Row(name, 0, 0, note=f"skipped: {n_free} free boundaries (max {max_choices})"))
                pb.update(1)
                continue
            row = measure_target(t, model, oracle, machine, max_variants, repeats, max_choices, seed, pb, budget,
                                 instances)
            if _doubtful(row, doubt):
                pb.set_postfix_str(f"{name}: timing again (split-half {row.noise:.2f})")
                first = row.seconds
                row = measure_target(t, model, oracle, machine, max_variants, repeats, max_choices, seed, pb,
                                     2 * budget, instances)
                row.reruns, row.seconds = 1, row.seconds + first
                if _doubtful(row, doubt):
                    row.spearman = math.nan
                    row.note = f"unresolved: timing does not agree with itself (split-half {row.noise:.2f})"
            rows.append(row)
            pb.update(1)
    return rows


def rescore(data: dict, model: CostModel, oracle, machine: Machine | None = None) -> list[Row]:
    """The rows of an earlier report (`svod costmodel report --json`'s data) priced again
    by `model`: the same measured variants, timings and measured ranks, new predictions,
    Spearman and pick — a cost model compared with another on one set of timings, without
    timing anything again (two reports differ by the machine's state as well as by their
    models). The pick is the model's cheapest cover of the whole graph (`oracle`, as in
    the report); when the report did not time it, the row says so and its pick ratio is
    the best-priced measured variant's.

    >>> import search.oracle
    >>> rows = report(CalibratedModel(), search.oracle, names=["gelu"], small=True, max_variants=3, repeats=3,
    ...               progress=False, instances=1)
    >>> data = {"small": True, "rows": [r.to_json() for r in rows]}
    >>> again = rescore(data, CalibratedModel(), search.oracle)
    >>> again[0].measured == rows[0].measured, again[0].predicted == rows[0].predicted, again[0].pick == rows[0].pick
    (True, True, True)
    """
    from svod.lower import initial_materialized, lower

    machine = machine or Machine.host()
    out = []
    for rj in data.get("rows", []):
        if not rj.get("measured"):
            continue
        if "materialized" not in rj:
            raise ValueError(f"{rj.get('workload')}: the report does not name its variants (written by an older "
                             "svod): time it again with svod costmodel report --json")
        t = workload_target(rj["workload"], small=bool(data.get("small", False)))
        base = initial_materialized(t.key)
        plans = [lower(t.key, base | frozenset(m), planner="oracle") for m in rj["materialized"]]
        if [len(p.kernels) for p in plans] != rj["kernels"]:
            raise ValueError(f"{rj['workload']}: its graph changed since the report (the stored covers lower to "
                             "other plans): time it again")
        pred = [sum(p.seconds for p in plan_prices(plan, model, machine)) for plan in plans]
        sigs = [_sig(plan) for plan in plans]
        cheapest = oracle.all_covers(t.key, model, machine, max_choices=max(len(oracle.choices(t.key)), 1))[0]
        want = _sig(cheapest.plan)
        note = ""
        if want in sigs:
            pick = sigs.index(want)
        else:  # the report timed a sample that missed this model's pick: its best-priced measured variant
            pick = fewer_kernels_on_ties(sorted(range(len(pred)), key=pred.__getitem__), seconds=pred.__getitem__,
                                         kernels=rj["kernels"].__getitem__)[0]
            note = "pick not timed: best-priced measured variant"
        row = Row(rj["workload"], rj["covers"], rj["measured_variants"], pred, rj["measured"], rj["kernels"], pick,
                  groups=rj["groups"], rounds=rj["rounds"], noise=rj["noise"], reruns=rj.get("reruns", 0),
                  instances=rj.get("instances", 0), materialized=rj["materialized"], ranks=rj["ranks"])
        row.spearman_raw = spearman(pred, row.measured)
        prices = priced_ranks(pred)
        unresolved = rj.get("note", "").startswith("unresolved")
        row.spearman = math.nan if unresolved else spearman(prices, row.ranks)
        if unresolved or (row.groups == 1 and row.measured_variants > 1):
            note = rj["note"]
        elif len(set(prices)) == 1 and row.measured_variants > 1:
            note = f"variants priced equal (within {PRICE_TIE:.1%})"
        row.note = note
        out.append(row)
    return out


def _doubtful(row: Row, doubt: float) -> bool:
    return row.groups > 1 and not math.isnan(row.noise) and row.noise < doubt


def summary(rows: Sequence[Row]) -> dict:
    """Means over the workloads with a defined Spearman (at least two variants)."""
    ranked = [r for r in rows if not math.isnan(r.spearman)]
    raw = [r for r in rows if not math.isnan(r.spearman_raw)]
    measured = [r for r in rows if r.measured]
    return {
        "workloads": len(measured),
        "mean_spearman": statistics.fmean(r.spearman for r in ranked) if ranked else math.nan,
        "min_spearman": min((r.spearman for r in ranked), default=math.nan),
        "mean_spearman_raw": statistics.fmean(r.spearman_raw for r in raw) if raw else math.nan,
        "min_spearman_raw": min((r.spearman_raw for r in raw), default=math.nan),
        "indistinguishable": sum(1 for r in measured if r.groups == 1 and r.measured_variants > 1),
        "priced_equal": sum(1 for r in measured if r.note.startswith("variants priced equal")),
        "unresolved": sum(1 for r in measured if r.note.startswith("unresolved")),
        "reruns": sum(r.reruns for r in measured),
        "mean_pick_ratio": statistics.fmean(r.pick_ratio for r in measured) if measured else math.nan,
        "max_pick_ratio": max((r.pick_ratio for r in measured), default=math.nan),
        "picks_within_15pct": sum(1 for r in measured if r.pick_ratio <= 1.15),
        "realize_is_pick": sum(1 for r in measured if r.realized == r.pick),
        "mean_realize_ratio": statistics.fmean(r.realize_ratio for r in measured if not math.isnan(r.realize_ratio))
        if any(not math.isnan(r.realize_ratio) for r in measured) else math.nan,
        "mean_noise": statistics.fmean(r.noise for r in ranked if not math.isnan(r.noise))
        if any(not math.isnan(r.noise) for r in ranked) else math.nan,
    }


def format_report(rows: Sequence[Row], model_name: str = "") -> str:
    head = f"{'workload':<24} {'covers':>6} {'timed':>5} {'rounds':>6} {'groups':>6} {'spearman':>8} {'raw':>6} " \
           f"{'noise':>6} {'pick/best':>9} {'pick ms':>9} {'best ms':>9}  note"
    lines = [f"cost model: {model_name}" if model_name else "", head, "-" * len(head)]

    def num(x: float, fmt: str) -> str:
        return "n/a" if math.isnan(x) else format(x, fmt)

    for r in rows:
        if not r.measured:
            lines.append(f"{r.workload:<24} {r.covers:>6} {0:>5} {'':>6} {'':>6} {'':>8} {'':>6} {'':>6} {'':>9} "
                         f"{'':>9} {'':>9}  {r.note}")
            continue
        flag = ("" if r.pick_ratio <= 1.15 else "  pick > 15% off") + ("  (timed twice)" if r.reruns and not
                                                                          r.note else "")
        lines.append(f"{r.workload:<24} {r.covers:>6} {r.measured_variants:>5} {r.rounds:>6} {r.groups:>6} "
                     f"{num(r.spearman, '.3f'):>8} {num(r.spearman_raw, '.2f'):>6} {num(r.noise, '.2f'):>6} "
                     f"{r.pick_ratio:>9.3f} {r.measured[r.pick] * 1e3:>9.3f} {r.measured[r.best] * 1e3:>9.3f}  "
                     f"{r.note}{flag}")
    s = summary(rows)
    lines.append("-" * len(head))
    lines.append(f"mean Spearman {s['mean_spearman']:.3f} (min {s['min_spearman']:.3f}) over the workloads whose "
                 f"variants the timing tells apart; against raw medians {s['mean_spearman_raw']:.3f} (min "
                 f"{s['min_spearman_raw']:.3f}); {s['indistinguishable']} workload(s) with indistinguishable variants, "
                 f"{s['priced_equal']} with variants the model prices equal, "
                 f"{s['unresolved']} unresolved (timed twice, twice disagreeing with itself); {s['reruns']} "
                 "rerun(s)")
    lines.append(f"pick/best mean {s['mean_pick_ratio']:.3f}, max {s['max_pick_ratio']:.3f}; "
                 f"{s['picks_within_15pct']}/{s['workloads']} picks within 15% of best")
    lines.append(f"realize() runs the model's pick in {s['realize_is_pick']}/{s['workloads']} workloads; its plan "
                 f"(svod.planner.decide, with the active cost model) measured {s['mean_realize_ratio']:.3f}x the best "
                 "on average")
    lines.append(f"noise ceiling: mean split-half Spearman of the measurements themselves {s['mean_noise']:.3f} "
                 "(odd vs even rounds); measured ranks: a variant counts the variants measurably faster (medians "
                 "more than 2 standard errors and more than 3% apart) and half of those it cannot be told apart "
                 "from; groups: distinct measured ranks")
    return "\n".join(ln for ln in lines if ln is not None)
