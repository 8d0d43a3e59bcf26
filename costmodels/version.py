"""The calibrated model's formula version, apart from the model (a leaf module).

Bumped whenever the formulas of `costmodels.analytic` change: plan-cache keys include it
(`costmodels.tuning.generation`), so plans chosen by an older model are re-planned, not
replayed from the disk cache. A module of its own so that a warm process computes the
plan-cache key without importing the model (docs/engine.md, first-call latency).
"""

MODEL_VERSION = "12"
