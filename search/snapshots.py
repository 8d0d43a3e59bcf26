"""The e-graph after each saturation iteration, for the viewer (`svod.viewer`).

`saturation_snapshots(key)` encodes `key` as the search does and saturates it under
the same limits and rule sets, serialising the e-graph after the encoding (snapshot 0:
each node its own kernel) and after every iteration. The saturation is the search's
(deterministic), run again: the search itself never pays for the serialisations.

>>> import svod
>>> from svod.key import compact
>>> snaps, report = saturation_snapshots(compact([svod.exp(svod.ones(4) * 2).uop])[0])
>>> len(snaps) == report.iterations + 1, report.stop_reason
(True, 'saturated')
"""

from __future__ import annotations

import time

from search import rules
from search.saturate import SaturationReport, encode, saturate, session
from svod.config import SearchLimits
from svod.config import limits as current_limits
from svod.key import GraphKey


def saturation_snapshots(key: GraphKey, limits: SearchLimits | None = None, rulesets=None,
                         max_snapshots: int = 64) -> tuple[list[dict], SaturationReport]:
    """([serialised e-graph after encoding, after iteration 1, ...], the report);
    at most `max_snapshots` (the last one is always the final e-graph)."""
    names = tuple(rulesets or rules.DEFAULT)
    lim = limits or current_limits()
    snaps: list[dict] = []
    with session(names) as eg:
        t0 = time.perf_counter()
        enc = encode(key, names, egraph=eg)
        snaps.append(enc.serialize())
        report = saturate(enc, lim, time.perf_counter() - t0, on_iteration=lambda e: snaps.append(e.serialize()))
    if len(snaps) > max_snapshots:  # keep the first ones and the final e-graph
        snaps = snaps[:max_snapshots - 1] + snaps[-1:]
    return snaps, report
