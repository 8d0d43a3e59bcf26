"""Measured cost models for svod (the `svod.costing.CostModel` contract).

- `profile`: machine profiles (`costmodels.profile()`: the stored calibration, else the
  shipped reference), `calibrate`: `svod calibrate`'s probes and fit;
- `features`: what the models count in a kernel; `analytic`: `CalibratedModel`, kernel
  seconds from those features and the profile; `reuse`: the reach of each buffer access
  in a plan (what the caches still hold), for pricing kernels in their plan;
- `measure`: timing kernels and plans (warm, interleaved rounds, robust medians);
- `tuning`: the tuning database and `MeasuredModel` (a measured figure wins over an
  estimate), `learned`: the least-squares correction fitted to it;
- `report` (`svod costmodel report`), `tune` (`svod tune`), `targets`, `progress`.

Within svod only `engine.py`, `explain.py` and the CLI import this package (lazily); it
imports svod core (tests/test_layering.py).
"""

from costmodels import profile as profile  # noqa: E402  (callable: costmodels.profile() is the machine profile)
