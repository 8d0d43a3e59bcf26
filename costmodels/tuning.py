"""The tuning database and the measured model.

Rows live in the store (kind "tuning"; the store namespaces them by machine fingerprint
and svod code version), one JSON row per measurement, each written in its own
transaction — an interrupted tuning run loses only the measurement under way:

- `kernel:<kernel content key>:t<threads>`: a kernel timed on `threads` threads
  (min of N, early stop) with what the calibrated model predicted and the kernel's
  features (the learned correction's data);
- `variant:<graph key hash>:<plan signature>`: a whole plan of a graph, timed as
  realize() runs it;
- `numpy:<graph key hash>`: the numpy reference of a tuned program;
- `choice:<graph key hash>`: the tuned plan of a graph (realize() uses it);
- `generation`: a token that changes whenever results are written; the plan cache's
  keys include it (with the profile's id), so plans made before are planned again;
- `correction`: the learned correction fitted to the kernel rows.

`MeasuredModel` prices a kernel with its measured time when the database has one, else
with the calibrated estimate (times the learned correction where that was shown to
help on held-out rows).

>>> from svod.store import Store
>>> db = TuningDB(Store(":memory:"))
>>> g0 = db.generation(); g1 = db.bump(); g0 != g1 == db.generation()
True
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

# NOTE: the models (analytic, features, svod.costing, svod.kernel) are imported where
# they are used: a warm process reads the tuning database's generation and its tuned
# plans without them (docs/engine.md, first-call latency)
if TYPE_CHECKING:
    from svod.costing import Machine
    from svod.kernel import Kernel, Plan

CalibratedModel = features = Price = plan_prices = None  # bound by `_models()` on first use


def _models() -> None:
    """Bind the model imports (the calibrated model, kernel features, prices) as module
    globals, once: what pricing needs, and a tuning-database lookup does not."""
    global CalibratedModel, features, Price, plan_prices
    if plan_prices is None:
        from costmodels.analytic import CalibratedModel
        from costmodels.features import features
        from svod.costing import Price, plan_prices

KIND = "tuning"


def plan_signature(plan: Plan) -> str:
    """A short content signature of a plan (its kernels' content keys, in order)."""
    import hashlib

    h = hashlib.blake2b(digest_size=8)
    for k in plan.kernels:
        h.update(k.key().encode())
    return h.hexdigest()


class TuningDB:
    """Typed access to the tuning rows of a store (default: the process-wide store)."""

    def __init__(self, store=None):
        if store is None:
            from svod.store import default_store

            store = default_store()
        self.store = store
        self._lock = threading.Lock()

    # ---- generation
    def generation(self) -> str:
        obj = self.store.get_json(KIND, "generation")
        return str(obj.get("token", "0")) if isinstance(obj, dict) else "0"

    def bump(self) -> str:
        """A new generation token (plans cached under the old one are planned again)."""
        token = os.urandom(6).hex()
        self.store.put_json(KIND, "generation", {"token": token})
        return token

    # ---- kernels
    @staticmethod
    def kernel_key(kernel: Kernel | str, threads: int) -> str:
        k = kernel if isinstance(kernel, str) else kernel.key()
        return f"kernel:{k}:t{threads}"

    def get_kernel(self, kernel: Kernel | str, threads: int) -> dict | None:
        row = self.store.get_json(KIND, self.kernel_key(kernel, threads))
        return row if isinstance(row, dict) and "seconds" in row else None

    def put_kernel(self, kernel: Kernel, threads: int, timing, predicted: float | None = None) -> dict:
        _models()
        f = features(kernel)
        row = {"seconds": timing.seconds, "median": timing.median, "runs": timing.runs, "threads": threads,
               "predicted": predicted, "kind": kernel.kind, "name": kernel.name, "features": f.vector(),
               "units": f.units}
        self.store.put_json(KIND, self.kernel_key(kernel, threads), row)
        return row

    def kernel_rows(self) -> list[dict]:
        out = []
        for key in self.store.keys(KIND):
            if key.startswith("kernel:"):
                row = self.store.get_json(KIND, key)
                if isinstance(row, dict) and "seconds" in row:
                    out.append(dict(row, key=key))
        return out

    def kernel_keys(self) -> set[str]:
        return {k for k in self.store.keys(KIND) if k.startswith("kernel:")}

    # ---- variants, numpy, choices
    @staticmethod
    def variant_key(graph_hash: str, plan: Plan | str) -> str:
        sig = plan if isinstance(plan, str) else plan_signature(plan)
        return f"variant:{graph_hash}:{sig}"

    def get_variant(self, graph_hash: str, plan: Plan | str) -> dict | None:
        row = self.store.get_json(KIND, self.variant_key(graph_hash, plan))
        return row if isinstance(row, dict) and "seconds" in row else None

    def put_variant(self, graph_hash: str, plan: Plan, row: dict) -> None:
        self.store.put_json(KIND, self.variant_key(graph_hash, plan), row)

    def get_numpy(self, graph_hash: str) -> float | None:
        row = self.store.get_json(KIND, f"numpy:{graph_hash}")
        return float(row["seconds"]) if isinstance(row, dict) and "seconds" in row else None

    def put_numpy(self, graph_hash: str, seconds: float) -> None:
        self.store.put_json(KIND, f"numpy:{graph_hash}", {"seconds": seconds})

    def put_choice(self, graph_hash: str, plan: Plan, row: dict) -> None:
        from svod.kernel import plan_to_json

        self.store.put_json(KIND, f"choice:{graph_hash}", dict(row, plan=plan_to_json(plan)))

    def get_choice(self, graph_hash: str) -> dict | None:
        row = self.store.get_json(KIND, f"choice:{graph_hash}")
        return row if isinstance(row, dict) and "plan" in row else None

    def tuned_plan(self, graph_hash: str) -> Plan | None:
        """The plan `svod tune` chose for this graph, or None."""
        row = self.get_choice(graph_hash)
        if row is None:
            return None
        from svod.kernel import plan_from_json  # NOTE: only for a tuned graph (a warm process has none)

        try:
            plan = plan_from_json(row["plan"])
            plan.check()
        except Exception:  # noqa: BLE001 - a damaged or foreign row is a miss
            return None
        return plan

    # ---- the learned correction
    def get_correction(self) -> dict | None:
        obj = self.store.get_json(KIND, "correction")
        return obj if isinstance(obj, dict) else None

    def put_correction(self, obj: dict) -> None:
        self.store.put_json(KIND, "correction", obj)


class MeasuredModel:
    """Measured time when the tuning database has it, else the estimate (calibrated model,
    with the learned correction where it helps). `measure=True`: time every kernel it
    is asked about that has no row yet (and store it) — what `svod tune` does."""

    name = "measured"

    def __init__(self, estimate=None, db: TuningDB | None = None, *,
                 measure: bool = False, correction: bool = True, budget: float = 0.25, cores: int | None = None):
        _models()
        self.estimate = estimate or CalibratedModel()
        self.cores = cores  # threads a kernel may use (a farm worker's CPUs); None: the profile's cores
        self.db = db or TuningDB()
        self.measure = measure
        self.budget = budget
        self._known = self.db.kernel_keys()
        self._rows: dict[str, dict | None] = {}
        self.correction = None
        if correction:
            from costmodels.learned import Correction

            self.correction = Correction.from_json(self.db.get_correction())
        self.measured_now = 0  # kernels timed by this model (measure=True)

    def _row(self, key: str, threads: int) -> dict | None:
        rk = TuningDB.kernel_key(key, threads)
        if rk not in self._known:
            return None
        if rk not in self._rows:
            self._rows[rk] = self.db.get_kernel(key, threads)
        return self._rows[rk]

    def thread_options(self, kernel: Kernel) -> list[int]:
        cores = max(1, self.cores or self.estimate.profile.cores)
        f = features(kernel)
        return [1] if cores == 1 or f.units <= 1 or f.library else [1, cores]

    def measure_kernel(self, kernel: Kernel, threads: int) -> dict:
        """Time `kernel` on `threads` threads and store the row (unless one exists)."""
        from costmodels.measure import time_kernel

        row = self._row(kernel.key(), threads)
        if row is not None:
            return row
        est = self.estimate.seconds(features(kernel), threads)
        t = time_kernel(kernel, threads, budget=self.budget)
        row = self.db.put_kernel(kernel, threads, t, est)
        rk = TuningDB.kernel_key(kernel, threads)
        self._known.add(rk)
        self._rows[rk] = row
        self.measured_now += 1
        return row

    def _price(self, kernel: Kernel, estimate: Callable):
        """The fastest measurement of `kernel` (timing it first when `measure`), else
        `estimate()` times the learned correction."""
        key = kernel.key()
        rows = []
        for t in self.thread_options(kernel):
            row = self.measure_kernel(kernel, t) if self.measure else self._row(key, t)
            if row is not None:
                rows.append((float(row["seconds"]), t))
        if rows:
            s, t = min(rows)
            return Price(s, t)
        p = estimate()
        if self.correction is not None:
            p = Price(p.seconds * self.correction.factor(kernel, p, self.estimate), p.threads)
        return p

    def price(self, kernel: Kernel, machine: Machine | None = None):
        return self._price(kernel, lambda: self.estimate.price(kernel, machine))

    def price_batch(self, kernels: Sequence[Kernel], machine: Machine | None = None) -> list:
        return [self.price(k, machine) for k in kernels]

    def price_plan(self, plan: Plan, machine: Machine | None = None) -> list:
        """Measured kernels at their measured time, the rest at the estimate's price in
        the plan's context (with the correction)."""
        estimates = plan_prices(plan, self.estimate, machine)
        return [self._price(k, lambda e=e: e) for k, e in zip(plan.kernels, estimates)]

    def measured_fraction(self, kernels: Sequence[Kernel]) -> float:
        if not kernels:
            return 1.0
        hit = sum(1 for k in kernels if any(self._row(k.key(), t) for t in self.thread_options(k)))
        return hit / len(kernels)


def default_model():
    """The model the engine plans with: measured where tuned, calibrated elsewhere
    (`SVOD_COST_MODEL=roofline|calibrated|measured` overrides; measured is the default)."""
    choice = os.environ.get("SVOD_COST_MODEL", "measured").strip().lower()
    if choice == "roofline":
        from svod.costing import RooflineModel

        return RooflineModel()
    _models()
    if choice == "calibrated":
        return CalibratedModel()
    return MeasuredModel(CalibratedModel())


def generation() -> str:
    """The cost-model generation plan-cache keys include: the model choice, the profile's
    id and the tuning database's token."""
    choice = os.environ.get("SVOD_COST_MODEL", "measured").strip().lower()
    if choice == "roofline":
        return "roofline"
    from costmodels.profile import profile
    from costmodels.version import MODEL_VERSION

    pid = f"{profile().id}v{MODEL_VERSION}"
    if choice == "calibrated":
        return f"c{pid}"
    return f"m{pid}.{TuningDB().generation()}"

