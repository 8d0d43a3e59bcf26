"""`svod bench`: the harness on tiny shapes (structure, checks, skipped peers) and the CLI."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from svod import cli
from svod.bench import harness, peers


@pytest.fixture(scope="module")
def tiny():
    return harness.run(sizes="tiny", only="w1,w2,w7", out=None)


def test_tiny_run_structure(tiny):
    ids = [c["id"] for c in tiny["cases"]]
    assert ids == ["w1_4K", "w2", "w7_lazy", "w7_jit"]
    assert tiny["failures"] == []
    for c in tiny["cases"]:
        assert c["check"]["ok"], c["check"]
        assert c["first_call_ms"] > 0
        assert set(c["times_ms"]) >= {"svod", "numpy"}
        assert all(v > 0 for v in c["times_ms"].values())
        assert all(r > 0 for r in c["speedup"].values())
        assert "svod" not in c["speedup"]
    w1, w2 = tiny["cases"][0], tiny["cases"][1]
    assert w1["gbps"]["svod"] > 0 and w1["probe"] in ("dram", "l3") and w1["probe_share"] > 0
    assert w2["probe"] in tiny["probes"]
    assert tiny["env"]["blas"]


def test_missing_peers_are_skipped_with_reason(tiny):
    for name, (mod, _) in peers.PEERS.items():
        if importlib.util.find_spec(mod) is None:
            assert name in tiny["peers_skipped"] and tiny["peers_skipped"][name]
            assert all(name not in c["times_ms"] for c in tiny["cases"])


def test_c_loop_or_reason(tiny):
    w1 = tiny["cases"][0]
    c_names = [n for n in w1["times_ms"] if n.startswith("C gcc")]
    assert c_names or "C loop" in w1["skipped"]
    assert all(w1["peer_checks"][n] for n in c_names)


def test_table_mentions_every_case(tiny):
    text = harness.format_table(tiny)
    assert all(c["label"] in text for c in tiny["cases"]) and "check PASS" in text


def test_failed_check_is_loud():
    bad = harness.check((1.0,), (2.0,), rtol=1e-5, atol=1e-5)
    assert not bad["ok"] and "max abs err" in bad["detail"]


def test_parse_only():
    assert harness.parse_only("w1, W2_softmax") == ["w1", "w2"]
    with pytest.raises(ValueError, match="unknown workload"):
        harness.parse_only("bogus")


def test_cli_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(harness._SHAPES, "quick", harness._SHAPES["tiny"])  # keep the test fast
    monkeypatch.setitem(harness.REPEATS, "quick", 2)
    monkeypatch.setitem(harness.TARGET_S, "quick", 1e-3)
    path = tmp_path / "bench.json"
    chart = tmp_path / "bench.png"
    assert cli.main(["bench", "--quick", "--only", "w7", "--json", str(path), "--chart", str(chart)]) == 0
    data = json.loads(path.read_text())
    assert [c["id"] for c in data["cases"]] == ["w7_lazy", "w7_jit"]
    out = capsys.readouterr().out
    assert "W7" in out and ("chart written" in out or "matplotlib is not installed" in out)
    if importlib.util.find_spec("matplotlib") is not None:
        assert "chart written" in out and chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_help_and_bad_only():
    r = subprocess.run([sys.executable, "-m", "svod", "bench", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--quick" in r.stdout
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--only", "bogus"])
    assert e.value.code == 2


def test_c_reference_leaves_float_state_alone():
    """Loading the -ffast-math C loop must not set FTZ/DAZ for the process (crtfastmath.o)."""
    from svod.bench.harness import build_c_kernels

    fns, reason = build_c_kernels()
    if not fns:
        pytest.skip(reason)
    tiny = np.array([1e-38], np.float32) * np.float32(1e-3)  # a subnormal result
    assert tiny[0] != 0, "a loaded library turned on flush-to-zero"


def test_loop_programs_run_unchanged_and_match_numpy():
    import doctest

    from svod.bench import harness, loops

    rows = loops.run(n=4, repeats=1, only=["row_normalise", "forward_solve"], budget_s=120.0)
    assert [r["program"] for r in rows] == ["forward_solve", "row_normalise"]
    for r in rows:
        assert r["ok"] and r["calls"] == 2 and r["numpy_steady_s"] > 0 and r["svod_steady_s"] > 0
        # small work runs eagerly in svod.numpy (svod.eager): searches and compiles stay bounded, not per iteration
        assert 0 <= r["searches"] + r["kernels_compiled"] <= 4
    text = loops.format_rows(rows)
    assert "forward_solve" in text and "NO" not in text.split("\n", 1)[1]
    assert harness.parse_only("loops,w1") == ["loops", "w1"]
    assert doctest.testmod(loops).failed == 0
