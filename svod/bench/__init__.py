"""The benchmark harness behind `svod bench` (installed with svod, so it works after pip install).

`harness.run(sizes=..., only=..., ...)` measures W1–W7 against numpy, the optional peers of
the `bench` extra (`peers`) and, for W1, a gcc-compiled C loop; see `svod.bench.harness`.
"""

from svod.bench.harness import run

__all__ = ["run"]
