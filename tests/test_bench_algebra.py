"""The algebra benchmark (svod/bench/algebra.py, bench/bench_algebra.py, `svod bench --only
algebra`): every program runs on numpy and svod, svod's results are checked against numpy's,
and a wrong result is a FAIL, never a timing."""

from __future__ import annotations

import numpy as np
import pytest

import svod
from svod.bench import algebra, harness


def test_every_program_runs_and_matches_numpy_at_tiny_sizes():
    rows = algebra.run(sizes="tiny", repeats=1, peers=())
    assert [r["program"] for r in rows] == list(algebra.PROGRAMS)
    for r in rows:
        assert r["ok"], (r["program"], r["detail"])
        assert set(r["ms"]) == {"numpy", "svod"} and all(v > 0 for v in r["ms"].values())
        assert r["kernels"] >= 1 and r["first_ms"] > 0
    text = algebra.format_rows(rows)
    assert all(p in text for p in algebra.PROGRAMS) and "FAIL" not in text


def test_a_wrong_svod_result_is_a_fail(monkeypatch):
    def wrong(xp, a, b):
        return (xp.sum(a, axis=0) * (2.0 if xp is svod else 1.0) + xp.sum(b, axis=0),)

    monkeypatch.setattr(algebra, "sum_of_sums", wrong)
    (row,) = algebra.run(sizes="tiny", repeats=1, only=["sum_of_sums"], peers=())
    assert not row["ok"] and "FAIL" in algebra.format_rows([row])


def test_unknown_programs_and_sizes_are_refused():
    with pytest.raises(ValueError, match="unknown algebra program"):
        algebra.run(sizes="tiny", only=["nope"], peers=())
    with pytest.raises(ValueError, match="unknown sizes"):
        algebra.run(sizes="huge", peers=())


def test_svod_bench_only_algebra_is_wired():
    assert harness.parse_only("algebra") == ["algebra"]
    res = harness.run(sizes="tiny", only=["algebra"], peers=False, out=None, progress=False)
    assert res["cases"] == [] and [r["program"] for r in res["algebra"]] == list(algebra.PROGRAMS)
    assert not res["failures"]
    assert "algebra programs" in harness.format_table(res)


def test_a_missing_peer_is_a_note_not_a_crash(monkeypatch):
    monkeypatch.setattr(algebra, "available_peers", lambda: {"jax.jit": "jax is not installed"})
    (row,) = algebra.run(sizes="tiny", repeats=1, only=["chain_vec"], peers=("jax.jit",))
    assert row["skipped"] == {"jax.jit": "jax is not installed"} and row["ok"]
    assert np.isfinite(row["ms"]["svod"])
