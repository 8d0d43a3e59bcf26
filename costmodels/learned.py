"""The learned correction: least squares over kernel features, fitted to the tuning
database, used only where it improves held-out error.

The calibrated model's error on a measured kernel is `log(measured / predicted)`. A
ridge least-squares fit of that error on a few kernel features (size, working set,
work per element by kind of op, gathers, passes, threads) gives a multiplicative
correction. Rows are split in `FOLDS` folds by a hash of their key (deterministic);
the correction is kept for a group of kernels (elementwise, reductions, matmul) only
when its cross-validated median absolute log error beats the uncorrected model's by at
least `MIN_GAIN`, with at least `MIN_ROWS` rows — else that group is left as estimated.

>>> import random
>>> rows = [{"key": f"k{i}", "kind": "elementwise", "threads": 1, "predicted": 1.0,
...          "seconds": 2.0 * (1 + 0.01 * random.random()),
...          "features": {"size": 1000.0 * (i + 1), "units": 1.0, "read_bytes": 4e3 * (i + 1)}} for i in range(40)]
>>> c = fit(rows)
>>> c.groups["elementwise"]["used"], round(c.factor_row(rows[0]), 1)
(True, 2.0)
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from svod.ops import long_latency_features

FOLDS = 5
MIN_ROWS = 12
MIN_GAIN = 0.05
RIDGE = 1e-2
CLIP = 4.0  # the correction never moves an estimate by more than this factor
FEATURES = ("bias", "log_working_set", "log_size", "log_per_unit", "passes", "threads", "transcendental",
            "alu", "gather", "reduce", "matmul")
_TRANS = long_latency_features()  # feature classes of the long-latency ops (svod.ops)


def group_of(kind: str) -> str:
    return {"reduce": "reduction", "rowwise": "reduction", "blas": "matmul"}.get(kind, kind)


def design(feat: dict, threads: int) -> list[float]:
    """The correction's inputs from a kernel's feature vector (`Features.vector()`)."""
    size = max(feat.get("size", 1.0), 1.0)
    ws = feat.get("read_bytes", 0.0) + feat.get("write_bytes", 0.0)
    units = max(feat.get("units", 1.0), 1.0)
    trans = sum(v for k, v in feat.items() if k.startswith("op:") and k[3:].rstrip("64") in _TRANS)
    alu = sum(v for k, v in feat.items() if k.startswith("op:ALU"))
    gather = sum(feat.get("access:" + a, 0.0) for a in ("strided", "masked", "chain"))
    return [1.0, math.log10(ws + 1.0), math.log10(size), math.log10(size / units), feat.get("passes", 1.0),
            1.0 if threads > 1 else 0.0, trans / size, alu / size, gather / size, feat.get("reduce_elems", 0.0) / size,
            1.0 if feat.get("flops", 0.0) > 0 else 0.0]


def _target(row: dict) -> float | None:
    p, s = row.get("predicted"), row.get("seconds")
    if not p or not s or p <= 0 or s <= 0:
        return None
    return math.log(s / p)


def _fold(key: str) -> int:
    return int(hashlib.blake2b(key.encode(), digest_size=2).hexdigest(), 16) % FOLDS


def _solve(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    reg = RIDGE * len(y) * np.eye(x.shape[1])
    reg[0, 0] = 0.0  # the bias is not shrunk
    return np.linalg.solve(x.T @ x + reg, x.T @ y)


def _median_abs(v) -> float:
    return float(statistics.median(abs(a) for a in v)) if len(v) else math.nan


@dataclass
class Correction:
    groups: dict = field(default_factory=dict)  # group -> {"used", "w", "n", "cv_before", "cv_after"}

    @staticmethod
    def from_json(obj: dict | None) -> Correction | None:
        if not isinstance(obj, dict) or obj.get("features") != list(FEATURES):
            return None
        return Correction(dict(obj.get("groups", {})))

    def to_json(self) -> dict:
        return {"features": list(FEATURES), "groups": self.groups}

    def _factor(self, group: str, feat: dict, threads: int) -> float:
        g = self.groups.get(group)
        if not g or not g.get("used"):
            return 1.0
        z = float(np.dot(design(feat, threads), g["w"]))
        return math.exp(max(-math.log(CLIP), min(math.log(CLIP), z)))

    def factor(self, kernel, price, estimate=None) -> float:
        """The multiplicative correction for `kernel` priced at `price` (1.0 where unused)."""
        from costmodels.features import features

        return self._factor(group_of(kernel.kind), features(kernel).vector(), price.threads)

    def factor_row(self, row: dict) -> float:
        return self._factor(group_of(row.get("kind", "")), row.get("features", {}), int(row.get("threads", 1)))

    def describe(self) -> str:
        if not self.groups:
            return "learned correction: no data"
        parts = []
        for g, d in sorted(self.groups.items()):
            state = "used" if d.get("used") else "not used"
            parts.append(f"{g}: {state} ({d.get('n', 0)} rows, held-out median |log error| "
                         f"{d.get('cv_before', math.nan):.3f} -> {d.get('cv_after', math.nan):.3f})")
        return "learned correction: " + "; ".join(parts)


def fit(rows: list[dict]) -> Correction:
    """Fit per group, keep each group's fit only where it improves held-out error."""
    by_group: dict[str, list[dict]] = {}
    for r in rows:
        if _target(r) is not None and isinstance(r.get("features"), dict):
            by_group.setdefault(group_of(r.get("kind", "")), []).append(r)
    out = Correction()
    for g, rs in by_group.items():
        y = np.array([_target(r) for r in rs])
        x = np.array([design(r["features"], int(r.get("threads", 1))) for r in rs])
        info: dict = {"n": len(rs), "used": False, "cv_before": _median_abs(y), "cv_after": math.nan}
        if len(rs) >= MIN_ROWS:
            folds = np.array([_fold(str(r.get("key", i))) for i, r in enumerate(rs)])
            resid = []
            for k in range(FOLDS):
                test = folds == k
                if not test.any() or test.all():
                    continue
                w = _solve(x[~test], y[~test])
                pred = np.clip(x[test] @ w, -math.log(CLIP), math.log(CLIP))
                resid.extend((y[test] - pred).tolist())
            info["cv_after"] = _median_abs(resid)
            before = _median_abs([y[i] for i in range(len(y)) if 0 <= folds[i] < FOLDS])
            info["cv_before"] = before
            if resid and info["cv_after"] < (1 - MIN_GAIN) * before:
                info["used"] = True
                info["w"] = _solve(x, y).tolist()
        out.groups[g] = info
    return out


def refit(db) -> Correction:
    """Fit the correction to `db`'s kernel rows and store it."""
    c = fit(db.kernel_rows())
    db.put_correction(c.to_json())
    return c
